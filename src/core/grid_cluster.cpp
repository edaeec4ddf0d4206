#include "pcops/grid_cluster.hpp"

#include "core/validate.hpp"

namespace pcops::core {

void validate_grid_cluster(int64_t count, int64_t dim) {
  PCOPS_CHECK(count >= 0, Value, "pos: expected a non-negative number of points, got ", count);
  PCOPS_CHECK(dim >= 1, Value, "pos: expected at least one coordinate (dim >= 1), got ", dim);
}

}  // namespace pcops::core
