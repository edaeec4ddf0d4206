#include "pcops/group_points.hpp"

#include "core/validate.hpp"

namespace pcops::core {

void validate_group_points(const FeaturesView& features, int64_t idx_batch,
                           const GroupPointsParams& params) {
  check_features(features, "features");
  PCOPS_CHECK(idx_batch == features.batch, Value, "idx: expected batch size ", features.batch,
              " (as features), got ", idx_batch);
  PCOPS_CHECK(params.num_groups >= 0 && params.group_size >= 0, Value,
              "idx: expected non-negative [M, S], got [", params.num_groups, ", ",
              params.group_size, "]");
  const int64_t per_cloud = checked_mul(params.num_groups, params.group_size, "group_points idx");
  checked_mul(checked_mul(features.batch, features.channels, "group_points output"), per_cloud,
              "group_points output");
}

}  // namespace pcops::core
