#pragma once
// furthest_point_sample(points [B,N,D] float32, num_samples M, start_index, lengths) -> int64 [B,M]
//
// Contract (docs/ops/furthest_point_sample.md):
// - c0 = start_index; c_{t+1} = the smallest index j maximising m_j = min over chosen centres u
//   of s(x_j, x_u), s the squared distance summed in coordinate order without FMA.
// - A non-finite s counts as 0 when it updates m_j.
// - When M exceeds the points available the rule continues (all m_j = 0, so index 0 repeats).
// - lengths: only the first lengths[b] points of cloud b take part; output slots t >= lengths[b]
//   hold -1 (an empty cloud gives all -1), as PyTorch3D. start_index must be < lengths[b] for
//   every non-empty cloud.
// - skip_near_origin (the pointnet2_ops rule): points with x^2+y^2+z^2 <= 1e-3 are never chosen
//   after the start.
// - Deterministic: the result does not depend on the number of threads. Thread-safe.
#include <cstdint>

#include "pcops/context.hpp"
#include "pcops/ragged.hpp"
#include "pcops/view.hpp"

namespace pcops {

struct FpsParams {
  int64_t num_samples = 0;
  int64_t start_index = 0;
  bool skip_near_origin = false;
};

namespace core {
// Throws pcops::Error on bad input.
void validate_furthest_point_sample(const PointsView& points, const LengthsView& lengths,
                                    const FpsParams& params);
}

namespace cpu {
// out: caller-owned int64 [B, num_samples], contiguous.
void furthest_point_sample(const CpuContext& ctx, PointsView points, LengthsView lengths,
                           const FpsParams& params, int64_t* out);
}  // namespace cpu

// Ragged FPS (torch_cluster's fps on CSR offsets): cloud b contributes counts[b] samples chosen
// by the rule above on its rows, starting at its local row starts[b]; out is the concatenation in
// cloud order of global row indices (length sum(counts)). counts[b] > 0 needs a non-empty cloud
// and 0 <= starts[b] < |cloud b|; counts and starts are host arrays of B entries.
namespace core {
void validate_furthest_point_sample_ragged(const RaggedPointsView& points, const OffsetsView& ptr,
                                           const int64_t* counts, const int64_t* starts);
}
namespace cpu {
// out: caller-owned int64 [sum(counts)].
void furthest_point_sample_ragged(const CpuContext& ctx, RaggedPointsView points, OffsetsView ptr,
                                  const int64_t* counts, const int64_t* starts, int64_t* out);
}  // namespace cpu

namespace cuda {
// Same contract and parameters as cpu::furthest_point_sample; points and out in device memory,
// lengths in host memory. Bitwise equal to the CPU backend.
void furthest_point_sample(const CudaContext& ctx, PointsView points, LengthsView lengths,
                           const FpsParams& params, int64_t* out);
// Same contract as cpu::furthest_point_sample_ragged; points and out in device memory, ptr,
// counts and starts in host memory. Bitwise equal to the CPU backend.
void furthest_point_sample_ragged(const CudaContext& ctx, RaggedPointsView points, OffsetsView ptr,
                                  const int64_t* counts, const int64_t* starts, int64_t* out);
}  // namespace cuda

}  // namespace pcops
