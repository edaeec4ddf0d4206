#pragma once
// voxelize(points [N, D], voxel_size [D], ptr [B + 1]?, start [D]?, end [D]?) (docs/ops/voxelize.md)
//
// Contract, all arithmetic in T (float or double), no contraction:
// - Cell of point n: c_d = floor(fl(fl(p_d - start_d) / size_d)) (floor, not trunc: negative
//   coordinates fall into negative cells). start defaults to 0 (an absolute grid, so voxels of
//   different calls align).
// - A point takes no voxel (voxel id -1) when a coordinate is NaN or infinite, or, when `end` is
//   given, when some start_d <= p_d <= end_d fails. A kept point whose cell does not fit in
//   [-2^62, 2^62) is a Value error (int64 overflow guard).
// - Voxels are the distinct (batch, cell) pairs of the kept points, numbered 0..V-1 in
//   lexicographic order of (batch, c_0, ..., c_{D-1}) (batch = the point's cloud in ptr; 0
//   without ptr).
// - Outputs: voxel_id [N] (the inverse map, -1 for dropped points); perm [N]: the kept points
//   grouped by voxel, ascending point index inside a voxel (stable), then the dropped points in
//   ascending index; voxel_ptr [V + 1] (CSR offsets into perm, voxel_ptr[V] = kept points),
//   counts [V], coords [V, D] (the cells), batch [V].
// - Deterministic and thread-count independent; thread-safe.
#include <cstdint>
#include <functional>

#include "pcops/context.hpp"

namespace pcops {

// Per-voxel output buffers, requested once the number of voxels V is known.
struct VoxelBuffers {
  int64_t* coords = nullptr;     // [V, D]
  int64_t* batch = nullptr;      // [V]
  int64_t* counts = nullptr;     // [V]
  int64_t* voxel_ptr = nullptr;  // [V + 1]
};
using VoxelAllocator = std::function<VoxelBuffers(int64_t num_voxels)>;

namespace core {
// Sizes, the offsets (ptr[0] = 0, non-decreasing, ptr[B] = N) and the grid parameters (size
// finite and > 0, start / end finite, end >= start), all host memory.
template <class T>
void validate_voxelize(int64_t count, int64_t dim, const T* voxel_size, const T* start, const T* end,
                       const int64_t* ptr, int64_t num_clouds);
}  // namespace core

namespace cpu {
// points: contiguous [count, dim]; voxel_size [dim]; start / end [dim] or nullptr; ptr
// [num_clouds + 1] or nullptr (one cloud); voxel_id, perm: caller-owned [count].
// Returns V after filling the buffers returned by allocate(V).
int64_t voxelize(const CpuContext& ctx, const float* points, int64_t count, int64_t dim,
                 const float* voxel_size, const float* start, const float* end, const int64_t* ptr,
                 int64_t num_clouds, int64_t* voxel_id, int64_t* perm, const VoxelAllocator& allocate);
int64_t voxelize(const CpuContext& ctx, const double* points, int64_t count, int64_t dim,
                 const double* voxel_size, const double* start, const double* end, const int64_t* ptr,
                 int64_t num_clouds, int64_t* voxel_id, int64_t* perm, const VoxelAllocator& allocate);
}  // namespace cpu

namespace cuda {
// The CPU function's contract and results on the device: points [count, dim] (dim <= 16),
// voxel_id and perm [count] and the buffers of allocate(V) are device memory; voxel_size, start,
// end and ptr are host memory (validated there). Synchronises the context's stream twice (the
// overflow check and V).
int64_t voxelize(const CudaContext& ctx, const float* points, int64_t count, int64_t dim,
                 const float* voxel_size, const float* start, const float* end, const int64_t* ptr,
                 int64_t num_clouds, int64_t* voxel_id, int64_t* perm, const VoxelAllocator& allocate);
int64_t voxelize(const CudaContext& ctx, const double* points, int64_t count, int64_t dim,
                 const double* voxel_size, const double* start, const double* end, const int64_t* ptr,
                 int64_t num_clouds, int64_t* voxel_id, int64_t* perm, const VoxelAllocator& allocate);
}  // namespace cuda

}  // namespace pcops
