#pragma once
// grid_cluster(pos [N,D], size [D], start [D]?, end [D]?) -> int64 [N] (torch_cluster ids)
//
// Contract (docs/ops/grid_cluster.md, PEERS.md 1.8), all arithmetic in T (float or double):
// - start / end default to the per-dimension min / max of pos (nullptr).
// - voxels_d = trunc((end_d - start_d) / size_d) + 1; stride_0 = 1, stride_d = stride_{d-1} *
//   voxels_{d-1} (dimension 0 is the fastest axis).
// - c_d = trunc((pos_d - start_d) / size_d) (toward zero, not floor; no clamping, so points
//   outside [start, end] give raw ids exactly as upstream); id = sum_d c_d * stride_d.
// - int64 arithmetic wraps (two's complement) as torch's does; a quotient that is NaN or outside
//   the int64 range converts to INT64_MIN (what torch's conversion gives on x86).
// - Deterministic, thread-safe.
#include <cstdint>

#include "pcops/context.hpp"

namespace pcops {

namespace core {
void validate_grid_cluster(int64_t count, int64_t dim);
}

namespace cpu {
// pos: contiguous [count, dim]; size, start, end: [dim] (start / end may be nullptr);
// out: caller-owned int64 [count].
void grid_cluster(const CpuContext& ctx, const float* pos, int64_t count, int64_t dim,
                  const float* size, const float* start, const float* end, int64_t* out);
void grid_cluster(const CpuContext& ctx, const double* pos, int64_t count, int64_t dim,
                  const double* size, const double* start, const double* end, int64_t* out);
}  // namespace cpu

namespace cuda {
// Same contract as cpu::grid_cluster; pos, size, start, end (start / end may be nullptr) and out
// in device memory. Bitwise equal to the CPU backend.
void grid_cluster(const CudaContext& ctx, const float* pos, int64_t count, int64_t dim,
                  const float* size, const float* start, const float* end, int64_t* out);
void grid_cluster(const CudaContext& ctx, const double* pos, int64_t count, int64_t dim,
                  const double* size, const double* start, const double* end, int64_t* out);
}  // namespace cuda

}  // namespace pcops
