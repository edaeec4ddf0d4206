#include "pcops/gather_points.hpp"

#include "core/validate.hpp"

namespace pcops::core {

void validate_gather_points(const FeaturesView& features, int64_t idx_batch, int64_t num_indices) {
  check_features(features, "features");
  PCOPS_CHECK(idx_batch == features.batch, Value, "idx: expected batch size ", features.batch,
              " (as features), got ", idx_batch);
  PCOPS_CHECK(num_indices >= 0, Value, "idx: expected >= 0 indices per cloud, got ", num_indices);
  checked_mul(checked_mul(features.batch, features.channels, "gather_points output"), num_indices,
              "gather_points output");
}

}  // namespace pcops::core
