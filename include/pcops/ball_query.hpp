#pragma once
// ball_query(query [B,M,3], ref [B,N,3], radius, K, query_lengths, ref_lengths)
//   -> dist2 float32 [B,M,K] (squared), idx int64 [B,M,K]
//
// Contract (docs/ops/ball_query.md):
// - R2 = fl32(fl32(r) * fl32(r)) (the PyTorch3D rule). Reference j matches when s < R2 (strict;
//   NaN never matches), s summed as ((dx*dx + dy*dy) + dz*dz) without FMA.
// - The first K matches in reference input order are returned (not the K nearest); slots after
//   the matches hold (0, -1). Test idx >= 0, not the distance.
// - radius finite and >= 0 (0 matches nothing); K >= 0.
// - Backward, for a filled slot (q_i, x_j) with upstream gradient G:
//   dL/dq_i += 2G(q_i - x_j), dL/dx_j -= 2G(q_i - x_j); padded slots never contribute.
//   The CPU backward is deterministic (fixed summation order).
// - Exact, deterministic, thread-safe.
#include <cstdint>

#include "pcops/context.hpp"
#include "pcops/view.hpp"

namespace pcops {

struct BallQueryParams {
  float radius = 0.0f;
  int64_t max_neighbors = 0;  // K
};

namespace core {
void validate_ball_query(const PointsView& query, const PointsView& ref,
                         const LengthsView& query_lengths, const LengthsView& ref_lengths,
                         const BallQueryParams& params);
// The squared-radius threshold of the contract.
float ball_query_threshold(float radius);
}  // namespace core

namespace cpu {
// dist2, idx: caller-owned [B, M, K], contiguous.
void ball_query(const CpuContext& ctx, PointsView query, PointsView ref, LengthsView query_lengths,
                LengthsView ref_lengths, const BallQueryParams& params, float* dist2, int64_t* idx);

// grad_dist2, idx: [B, M, K] contiguous (idx from the forward). grad_query [B,M,3] and
// grad_ref [B,N,3] are caller-owned contiguous buffers that this function overwrites.
void ball_query_backward(const CpuContext& ctx, PointsView query, PointsView ref,
                         const int64_t* idx, const float* grad_dist2, int64_t K,
                         float* grad_query, float* grad_ref);
}  // namespace cpu

namespace cuda {
// Same contracts and parameters as the cpu:: functions; tensors in device memory, lengths in
// host memory. Bitwise equal to the CPU backend (the backward too: it is deterministic).
void ball_query(const CudaContext& ctx, PointsView query, PointsView ref, LengthsView query_lengths,
                LengthsView ref_lengths, const BallQueryParams& params, float* dist2, int64_t* idx);

void ball_query_backward(const CudaContext& ctx, PointsView query, PointsView ref,
                         const int64_t* idx, const float* grad_dist2, int64_t K,
                         float* grad_query, float* grad_ref);
}  // namespace cuda

}  // namespace pcops
