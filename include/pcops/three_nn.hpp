#pragma once
// three_nn(unknown [B,N,3], known [B,M,3], unknown_lengths, known_lengths)
//   -> dist float32 [B,N,3] (Euclidean), idx int64 [B,N,3]
//
// Contract (docs/ops/three_nn.md): knn with k = 3 on 3-D points.
// - s = ((dx*dx + dy*dy) + dz*dz) in float32 without FMA; for each unknown point the known
//   points are ordered by (s, index) ascending (NaN s sorts as +inf) and the first three are
//   returned, so among equal distances the lower index comes first.
// - dist = sqrt(s) correctly rounded, taken after selection (a NaN s is reported as +inf).
// - M >= 3 is required (an error otherwise, whatever the lengths). With known_lengths, a cloud
//   of fewer than three valid points pads the missing slots with (+inf, -1); unknown points past
//   unknown_lengths[b] hold (+inf, -1) in every slot.
// - Exact (the kNN grid returns what brute force returns), deterministic, thread-safe.
#include <cstdint>

#include "pcops/context.hpp"
#include "pcops/view.hpp"

namespace pcops {

namespace core {
void validate_three_nn(const PointsView& unknown, const PointsView& known,
                       const LengthsView& unknown_lengths, const LengthsView& known_lengths);
}

namespace cpu {
// dist, idx: caller-owned [B, N, 3], contiguous.
void three_nn(const CpuContext& ctx, PointsView unknown, PointsView known,
              LengthsView unknown_lengths, LengthsView known_lengths, float* dist, int64_t* idx);
}  // namespace cpu

namespace cuda {
// Same contract as cpu::three_nn; unknown, known, dist and idx in device memory, lengths in host
// memory. Bitwise equal to the CPU backend.
void three_nn(const CudaContext& ctx, PointsView unknown, PointsView known,
              LengthsView unknown_lengths, LengthsView known_lengths, float* dist, int64_t* idx);
}  // namespace cuda

}  // namespace pcops
