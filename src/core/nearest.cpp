#include "pcops/nearest.hpp"

#include "core/validate.hpp"

namespace pcops::core {

void validate_nearest(const RaggedPointsView& x, const RaggedPointsView& y, const OffsetsView& ptr_x,
                      const OffsetsView& ptr_y) {
  check_ragged_pair(x, y, ptr_x, ptr_y);
  for (int64_t b = 0; b < ptr_x.batch(); ++b)
    PCOPS_CHECK(ptr_x.length(b) == 0 || ptr_y.length(b) > 0, Value, "y: cloud ", b, " has ",
                ptr_x.length(b), " points in x but none in y (nearest needs at least one)");
}

}  // namespace pcops::core
