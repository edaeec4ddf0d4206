#pragma once
// gather_points(features [B,C,N], idx int64 [B,M]) -> out float32 [B,C,M]
//
// Contract (docs/ops/gather_points.md):
// - out[b,c,m] = features[b,c,idx[b,m]] (an exact copy); idx = -1 (padding) gives +0 and no
//   gradient. idx values must lie in [-1, N) (an Index error otherwise, before any work).
// - Backward with upstream G [B,C,M]: grad_features[b,c,n] = sum over m ascending with
//   idx[b,m] = n of G[b,c,m], float32, accumulated from +0 (no atomics: deterministic).
// - Deterministic, thread-safe.
#include <cstdint>

#include "pcops/context.hpp"
#include "pcops/view.hpp"

namespace pcops {

namespace core {
void validate_gather_points(const FeaturesView& features, int64_t idx_batch, int64_t num_indices);
}

namespace cpu {
// idx: contiguous [B, M] host memory, range-checked here. out: caller-owned [B, C, M].
void gather_points(const CpuContext& ctx, FeaturesView features, const int64_t* idx,
                   int64_t num_indices, float* out);

// grad_out: [B, C, M]; idx: [B, M]; grad_features: caller-owned [B, C, count], overwritten.
void gather_points_backward(const CpuContext& ctx, FeaturesView grad_out, const int64_t* idx,
                            int64_t count, float* grad_features);
}  // namespace cpu

}  // namespace pcops
