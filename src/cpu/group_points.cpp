// CPU group_points: gather_points over the flattened (m, s) index (src/cpu/gather_points.cpp),
// whose ascending scatter order is the contract's ascending (m, s) order.
#include "pcops/group_points.hpp"

#include "core/validate.hpp"
#include "pcops/gather_points.hpp"

namespace pcops::cpu {

void group_points(const CpuContext& ctx, FeaturesView features, const int64_t* idx,
                  const GroupPointsParams& params, float* out) {
  core::validate_group_points(features, features.batch, params);
  gather_points(ctx, features, idx, params.num_groups * params.group_size, out);
}

void group_points_backward(const CpuContext& ctx, FeaturesView grad_out, const int64_t* idx,
                           const GroupPointsParams& params, int64_t count, float* grad_features) {
  core::check_features(grad_out, "grad_out");
  PCOPS_CHECK(params.num_groups >= 0 && params.group_size >= 0, Value,
              "idx: expected non-negative [M, S], got [", params.num_groups, ", ",
              params.group_size, "]");
  PCOPS_CHECK(grad_out.count ==
                  core::checked_mul(params.num_groups, params.group_size, "group_points idx"),
              Value, "grad_out: expected ", params.num_groups, " x ", params.group_size,
              " values per channel, got ", grad_out.count);
  gather_points_backward(ctx, grad_out, idx, count, grad_features);
}

}  // namespace pcops::cpu
