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

namespace cuda {
// Same contract as the cpu:: functions; every pointer is device memory (idx: contiguous int64
// [B, M]). Bitwise equal to the CPU backend, deterministic (no float atomics).
// idx must lie in [-1, N) (backward: [-1, count)): the range is NOT checked here (that would
// need a device-to-host copy and a synchronisation; the torch binding checks it before calling).
// An index outside the range is never dereferenced (it is treated like -1), so bad indices give
// wrong values, never out-of-bounds accesses.
void gather_points(const CudaContext& ctx, FeaturesView features, const int64_t* idx,
                   int64_t num_indices, float* out);

void gather_points_backward(const CudaContext& ctx, FeaturesView grad_out, const int64_t* idx,
                            int64_t count, float* grad_features);
}  // namespace cuda

}  // namespace pcops
