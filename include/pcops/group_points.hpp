#pragma once
// group_points(features [B,C,N], idx int64 [B,M,S]) -> out float32 [B,C,M,S]
//
// Contract (docs/ops/group_points.md): gather_points over the flattened (m, s) index:
// - out[b,c,m,s] = features[b,c,idx[b,m,s]] (an exact copy); idx = -1 (ball_query's padding)
//   gives +0 and no gradient. idx values must lie in [-1, N) (an Index error otherwise).
// - Backward with upstream G [B,C,M,S]: grad_features[b,c,n] = sum over (m, s) in ascending
//   order with idx[b,m,s] = n of G[b,c,m,s], float32 from +0 (no atomics: deterministic).
// - Deterministic, thread-safe.
#include <cstdint>

#include "pcops/context.hpp"
#include "pcops/view.hpp"

namespace pcops {

struct GroupPointsParams {
  int64_t num_groups = 0;  // M
  int64_t group_size = 0;  // S
};

namespace core {
void validate_group_points(const FeaturesView& features, int64_t idx_batch,
                           const GroupPointsParams& params);
}

namespace cpu {
// idx: contiguous [B, M, S] host memory, range-checked here. out: caller-owned [B, C, M, S].
void group_points(const CpuContext& ctx, FeaturesView features, const int64_t* idx,
                  const GroupPointsParams& params, float* out);

// grad_out: contiguous [B, C, M, S] (passed as the [B, C, M*S] view); idx: [B, M, S];
// grad_features: caller-owned [B, C, count], overwritten.
void group_points_backward(const CpuContext& ctx, FeaturesView grad_out, const int64_t* idx,
                           const GroupPointsParams& params, int64_t count, float* grad_features);
}  // namespace cpu

namespace cuda {
// Same contract as the cpu:: functions; every pointer is device memory (idx: contiguous int64
// [B, M, S]). Bitwise equal to the CPU backend, deterministic (no float atomics). As for
// cuda::gather_points, idx must lie in [-1, N) (backward: [-1, count)) and is not range-checked
// here; an index outside the range is treated like -1 (never dereferenced).
void group_points(const CudaContext& ctx, FeaturesView features, const int64_t* idx,
                  const GroupPointsParams& params, float* out);

void group_points_backward(const CudaContext& ctx, FeaturesView grad_out, const int64_t* idx,
                           const GroupPointsParams& params, int64_t count, float* grad_features);
}  // namespace cuda

}  // namespace pcops
