// CUDA grid_cluster (torch_cluster / pyg-lib ids); bitwise equal to the CPU backend
// (src/cpu/grid_cluster.cpp): the same operations in T (float or double), each correctly rounded
// (__fsub_rn / __fdiv_rn, __dsub_rn / __ddiv_rn), the same conversion to int64 and the same
// wrapping int64 arithmetic.
//
// Kernels: (1) when start or end is absent, per-dimension min / max of pos with NaN propagating
// (blocks x dimensions write partials, one thread per dimension combines them: min / max of a
// set, so the order does not matter; only the sign of a zero bound can differ from the CPU's
// sequential scan, and it cannot change an id: x - (+0) and x - (-0) truncate alike); (2) one
// thread computes start and the mixed-radix strides; (3) one thread per point.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "cuda/common.cuh"
#include "cuda/primitives/ragged.cuh"
#include "pcops/grid_cluster.hpp"

namespace pcops::cuda {
namespace {

struct GridClusterPolicy {
  static constexpr int kThreads = 256;
  static constexpr int64_t kMaxReduceBlocks = 256;  // partials per dimension
};

__device__ __forceinline__ float sub_rn(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ double sub_rn(double a, double b) { return __dsub_rn(a, b); }
__device__ __forceinline__ float div_rn(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ double div_rn(double a, double b) { return __ddiv_rn(a, b); }

// torch's float -> int64 conversion on x86: truncation, INT64_MIN when out of range or NaN.
template <class T>
__device__ __forceinline__ int64_t to_int64(T v) {
  const double d = static_cast<double>(v);
  if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0)) return INT64_MIN;
  return static_cast<int64_t>(d);
}

__device__ __forceinline__ int64_t wrap_mul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}
__device__ __forceinline__ int64_t wrap_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}

template <class T>
struct Bounds {
  T lo, hi;
  int nan;
};

template <class T>
__device__ __forceinline__ Bounds<T> combine(Bounds<T> a, const Bounds<T>& b) {
  a.nan |= b.nan;
  a.lo = b.lo < a.lo ? b.lo : a.lo;
  a.hi = b.hi > a.hi ? b.hi : a.hi;
  return a;
}

// Partial bounds of each dimension d (blockIdx.y strides over them) over the points of block
// blockIdx.x (grid-stride).
template <class T>
__global__ void bounds_kernel(const T* __restrict__ pos, int64_t N, int64_t D,
                              Bounds<T>* __restrict__ partial) {
  __shared__ Bounds<T> red[GridClusterPolicy::kThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t d = blockIdx.y; d < D; d += gridDim.y) {
    Bounds<T> acc{static_cast<T>(INFINITY), static_cast<T>(-INFINITY), 0};
    for (int64_t n = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; n < N;
         n += int64_t{gridDim.x} * blockDim.x) {
      const T v = pos[n * D + d];
      if (v != v) acc.nan = 1;
      else acc = combine(acc, Bounds<T>{v, v, 0});
    }
    for (int o = 16; o > 0; o >>= 1) {
      Bounds<T> other;
      other.lo = __shfl_xor_sync(0xFFFFFFFFu, acc.lo, o);
      other.hi = __shfl_xor_sync(0xFFFFFFFFu, acc.hi, o);
      other.nan = __shfl_xor_sync(0xFFFFFFFFu, acc.nan, o);
      acc = combine(acc, other);
    }
    if (lane == 0) red[warp] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) acc = combine(acc, red[w]);
      partial[d * gridDim.x + blockIdx.x] = acc;
    }
    __syncthreads();  // red is reused by the next dimension
  }
}

// Start per dimension (given, or the min of pos with NaN propagating) and the mixed-radix strides,
// in the CPU's order. One thread.
template <class T>
__global__ void strides_kernel(const Bounds<T>* __restrict__ partial, int64_t parts, int64_t D,
                               const T* __restrict__ size, const T* __restrict__ start_in,
                               const T* __restrict__ end_in, T* __restrict__ start,
                               int64_t* __restrict__ stride) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  int64_t acc = 1;
  for (int64_t d = 0; d < D; ++d) {
    T lo = 0, hi = 0;
    if (start_in == nullptr || end_in == nullptr) {
      Bounds<T> b = partial[d * parts];
      for (int64_t p = 1; p < parts; ++p) b = combine(b, partial[d * parts + p]);
      lo = b.nan ? static_cast<T>(NAN) : b.lo;
      hi = b.nan ? static_cast<T>(NAN) : b.hi;
    }
    const T s = start_in != nullptr ? start_in[d] : lo;
    const T e = end_in != nullptr ? end_in[d] : hi;
    start[d] = s;
    stride[d] = acc;
    acc = wrap_mul(acc, wrap_add(to_int64(div_rn(sub_rn(e, s), size[d])), 1));
  }
}

// One thread per point.
template <class T>
__global__ void ids_kernel(const T* __restrict__ pos, int64_t N, int64_t D, const T* __restrict__ size,
                           const T* __restrict__ start, const int64_t* __restrict__ stride,
                           int64_t* __restrict__ out) {
  for (int64_t n = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; n < N;
       n += int64_t{gridDim.x} * blockDim.x) {
    int64_t id = 0;
    for (int64_t d = 0; d < D; ++d)
      id = wrap_add(id, wrap_mul(to_int64(div_rn(sub_rn(pos[n * D + d], start[d]), size[d])), stride[d]));
    out[n] = id;
  }
}

template <class T>
void grid_cluster_impl(const CudaContext& ctx, const T* pos, int64_t N, int64_t D, const T* size,
                       const T* start_in, const T* end_in, int64_t* out) {
  core::validate_grid_cluster(N, D);
  if (N == 0) return;
  detail::Workspace ws(ctx);
  constexpr int TH = GridClusterPolicy::kThreads;
  T* start = ws.alloc<T>(D);
  int64_t* stride = ws.alloc<int64_t>(D);
  int64_t parts = 1;
  Bounds<T>* partial = nullptr;
  if (start_in == nullptr || end_in == nullptr) {
    parts = std::min<int64_t>(GridClusterPolicy::kMaxReduceBlocks, detail::ceil_div(N, TH * 8));
    partial = ws.alloc<Bounds<T>>(parts * D);
    detail::launch(ctx, bounds_kernel<T>,
                   dim3(static_cast<unsigned>(parts), static_cast<unsigned>(std::min<int64_t>(D, 65535))),
                   dim3(TH), 0, pos, N, D, partial);
  }
  detail::launch(ctx, strides_kernel<T>, dim3(1), dim3(1), 0, partial, parts, D, size, start_in,
                 end_in, start, stride);
  detail::launch(ctx, ids_kernel<T>, dim3(static_cast<unsigned>(primitives::blocks_for(N, TH))),
                 dim3(TH), 0, pos, N, D, size, start, stride, out);
}

}  // namespace

void grid_cluster(const CudaContext& ctx, const float* pos, int64_t count, int64_t dim,
                  const float* size, const float* start, const float* end, int64_t* out) {
  grid_cluster_impl(ctx, pos, count, dim, size, start, end, out);
}

void grid_cluster(const CudaContext& ctx, const double* pos, int64_t count, int64_t dim,
                  const double* size, const double* start, const double* end, int64_t* out) {
  grid_cluster_impl(ctx, pos, count, dim, size, start, end, out);
}

}  // namespace pcops::cuda
