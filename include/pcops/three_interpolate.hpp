#pragma once
// three_interpolate(features [B,C,M], idx int64 [B,N,3], weight [B,N,3]) -> out float32 [B,C,N]
//
// Contract (docs/ops/three_interpolate.md), all float32 without FMA, fl() = one rounding:
// - out[b,c,n]: acc = +0; for t = 0, 1, 2 (slot order): if idx[b,n,t] >= 0,
//   acc = fl(acc + fl(weight[b,n,t] * features[b,c,idx[b,n,t]])). out = acc.
//   A slot with idx -1 (three_nn's padding) contributes nothing and gets no gradient.
// - idx values must lie in [-1, M) (an Index error otherwise, checked before any work).
// - Backward with upstream G = grad_out [B,C,N]:
//   grad_features[b,c,m] = sum over (n, t) in ascending (n, t) order with idx[b,n,t] = m of
//     fl(G[b,c,n] * weight[b,n,t]), accumulated from +0 (no atomics: deterministic);
//   grad_weight[b,n,t] = sum over c ascending of fl(G[b,c,n] * features[b,c,idx[b,n,t]]),
//     accumulated from +0; +0 where idx[b,n,t] = -1. idx gets no gradient.
// - Deterministic (bitwise run to run and across thread counts), thread-safe.
#include <cstdint>

#include "pcops/context.hpp"
#include "pcops/view.hpp"

namespace pcops {

namespace core {
// weight: [B, N, 3] (as a PointsView of dim 3); idx has the same shape.
void validate_three_interpolate(const FeaturesView& features, const PointsView& weight);
}

namespace cpu {
// idx: contiguous [B, N, 3] host memory, range-checked here. out: caller-owned [B, C, N].
void three_interpolate(const CpuContext& ctx, FeaturesView features, const int64_t* idx,
                       PointsView weight, float* out);

// grad_out: [B, C, N]. grad_features [B, C, M] and grad_weight [B, N, 3] are caller-owned
// contiguous buffers that this function overwrites; either may be nullptr (not computed).
void three_interpolate_backward(const CpuContext& ctx, FeaturesView grad_out,
                                FeaturesView features, const int64_t* idx, PointsView weight,
                                float* grad_features, float* grad_weight);
}  // namespace cpu

namespace cuda {
// Same contract as the cpu:: functions; every pointer is device memory (idx: contiguous int64
// [B, N, 3]). Bitwise equal to the CPU backend, deterministic (no float atomics).
// idx must lie in [-1, M): the range is NOT checked here (that would need a device-to-host
// copy and a synchronisation; the torch binding checks it before calling). A slot outside the
// range is never dereferenced (it is skipped like -1), so bad indices give wrong values, never
// out-of-bounds accesses.
void three_interpolate(const CudaContext& ctx, FeaturesView features, const int64_t* idx,
                       PointsView weight, float* out);

void three_interpolate_backward(const CudaContext& ctx, FeaturesView grad_out,
                                FeaturesView features, const int64_t* idx, PointsView weight,
                                float* grad_features, float* grad_weight);
}  // namespace cuda

}  // namespace pcops
