#include "pcops/radius.hpp"

#include <cmath>

#include "core/validate.hpp"

namespace pcops::core {

void validate_radius(const RaggedPointsView& x, const RaggedPointsView& y, const OffsetsView& ptr_x,
                     const OffsetsView& ptr_y, const RadiusParams& params) {
  check_ragged_pair(x, y, ptr_x, ptr_y);
  PCOPS_CHECK(std::isfinite(params.r) && params.r >= 0.0, Value,
              "r: expected a finite radius >= 0, got ", params.r);
  PCOPS_CHECK(params.max_num_neighbors >= 0, Value, "max_num_neighbors: expected >= 0, got ",
              params.max_num_neighbors);
}

float radius_threshold(double r) { return static_cast<float>(r * r); }

}  // namespace pcops::core
