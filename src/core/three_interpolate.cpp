#include "pcops/three_interpolate.hpp"

#include "core/validate.hpp"

namespace pcops::core {

void validate_three_interpolate(const FeaturesView& features, const PointsView& weight) {
  check_features(features, "features");
  check_points(weight, "weight");
  PCOPS_CHECK(weight.dim == 3, Value, "weight: expected 3 weights per point ([B, N, 3]), got ",
              weight.dim);
  PCOPS_CHECK(weight.batch == features.batch, Value, "weight: expected batch size ",
              features.batch, " (as features), got ", weight.batch);
  checked_mul(checked_mul(features.batch, features.channels, "three_interpolate output"),
              weight.count, "three_interpolate output");
}

}  // namespace pcops::core
