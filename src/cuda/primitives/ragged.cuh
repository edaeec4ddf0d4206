#pragma once
// Small pieces shared by the ragged (CSR offsets) CUDA operators: a device-side view of a flat
// point array, the cloud of a flat row, and the upload of host-side per-cloud tables.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cuda/common.cuh"
#include "pcops/ragged.hpp"

namespace pcops::cuda::primitives {

// A RaggedPointsView as kernels read it.
struct FlatPoints {
  const float* data;
  int64_t sp, sd;
  __device__ __forceinline__ float at(int64_t n, int64_t d) const { return data[n * sp + d * sd]; }
  __device__ __forceinline__ const float* row(int64_t n) const { return data + n * sp; }
};

inline FlatPoints flat_points(const RaggedPointsView& v) {
  return FlatPoints{v.data, v.stride_point, v.stride_dim};
}

// The cloud b of row i under offsets off[0..B] (off[b] <= i < off[b + 1]; empty clouds are
// skipped because the last b with off[b] <= i is taken). i must be < off[B].
__device__ __forceinline__ int64_t cloud_of(const int64_t* __restrict__ off, int64_t B, int64_t i) {
  int64_t lo = 0, hi = B;  // invariant: off[lo] <= i < off[hi]
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (off[mid] <= i) lo = mid;
    else hi = mid;
  }
  return lo;
}

// Rows [begin, begin + n) of a ragged batch of 3-d points as one cloud (a batch of one), for a
// SpatialIndex built per cloud.
inline PointsView cloud_points(const RaggedPointsView& v, int64_t begin, int64_t n) {
  return PointsView{v.row(begin), 1, n, 3, 0, v.stride_point, v.stride_dim};
}

// Copies a host table to the device on the context's stream (workspace memory).
template <class T>
T* upload(const CudaContext& ctx, detail::Workspace& ws, const std::vector<T>& host) {
  T* dev = ws.alloc<T>(static_cast<int64_t>(std::max<size_t>(host.size(), 1)));
  // Without waiting for the stream (small tables travel as kernel arguments).
  detail::copy_to_device_async(ctx, dev, host.data(), host.size() * sizeof(T));
  return dev;
}

inline int64_t blocks_for(int64_t items, int threads, int64_t cap = int64_t{1} << 20) {
  return std::max<int64_t>(1, std::min<int64_t>(cap, detail::ceil_div(items, threads)));
}

}  // namespace pcops::cuda::primitives
