// CUDA point_conv (MVMR) and its backward, bitwise equal to the CPU backend (docs/ops/point_conv.md).
//
// Grouping: three stable CUB radix passes (least significant column first) order the triplets
// by (key, second, third), exactly as the CPU's counting sorts; a binary search per row gives the
// CSR offsets. Triplets with any column out of range get sentinel keys past every row, so they
// are never visited (the binding range-checks first; this only keeps bad input memory-safe).
// MVMR kernel: one thread per (row, destination channel), folding the row's triplets in order and
// the source channels ascending with __fmul_rn / __fadd_rn; neighbouring threads read
// neighbouring channels of the matrix (coalesced), the source value is a broadcast.
// VVOR kernel (grad_weights): one thread per (k, o, c), folding kernel k's triplets in order.
// Deterministic: no atomics anywhere. This is the contract path; a faster tiled path with the
// same per-element order is future work (docs/ops/point_conv.md, Performance).
#include <cub/cub.cuh>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/bits.hpp"
#include "cuda/common.cuh"
#include "cuda/point_conv_tiled.hpp"
#include "pcops/point_conv.hpp"

namespace pcops::cuda {
namespace {

struct PointConvPolicy {
  static constexpr int kThreads = 256;
  static constexpr int64_t kMaxBlocks = int64_t{1} << 20;  // grid-stride beyond
};

unsigned blocks_for(int64_t items) {
  return static_cast<unsigned>(std::clamp<int64_t>(detail::ceil_div(items, PointConvPolicy::kThreads), 1,
                                                   PointConvPolicy::kMaxBlocks));
}

using common::bits_for;

__device__ __forceinline__ bool triplet_valid(const int64_t* t, int64_t r, int64_t n_out, int64_t n_in,
                                              int64_t K) {
  const int64_t i = t[r * 3], j = t[r * 3 + 1], k = t[r * 3 + 2];
  return i >= 0 && i < n_out && j >= 0 && j < n_in && k >= 0 && k < K;
}

__global__ void iota_kernel(int64_t* order, int64_t T) {
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < T; p += int64_t{gridDim.x} * blockDim.x)
    order[p] = p;
}

// keys[p] = column `col` of triplet order[p], or `count` (past every row) for an invalid triplet.
__global__ void column_keys_kernel(const int64_t* t, const int64_t* order, int64_t T, int col, int64_t count,
                                   int64_t n_out, int64_t n_in, int64_t K, uint64_t* keys) {
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < T; p += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = order[p];
    keys[p] = triplet_valid(t, r, n_out, n_in, K) ? static_cast<uint64_t>(t[r * 3 + col])
                                                  : static_cast<uint64_t>(count);
  }
}

__global__ void offsets_kernel(const uint64_t* sorted, int64_t T, int64_t rows, int64_t* offsets) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k <= rows; k += int64_t{gridDim.x} * blockDim.x) {
    int64_t lo = 0, hi = T;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (sorted[mid] < static_cast<uint64_t>(k)) lo = mid + 1;
      else hi = mid;
    }
    offsets[k] = lo;
  }
}

struct Grouping {
  const int64_t* offsets = nullptr;  // [rows + 1]
  const int64_t* order = nullptr;    // [T]
};

Grouping group_triplets(const CudaContext& ctx, detail::Workspace& ws, const PointConvShape& s, const int64_t* t,
                        int key, int second, int third) {
  const int64_t T = s.triplets;
  const int64_t counts[3] = {s.num_out, s.num_in, s.kernels};
  const int64_t rows = counts[key];
  int64_t* offsets = ws.alloc<int64_t>(rows + 1);
  Grouping g{offsets, offsets};
  constexpr int NT = PointConvPolicy::kThreads;
  if (T == 0) {
    PCOPS_CUDA_CHECK(cudaMemsetAsync(offsets, 0, static_cast<size_t>(rows + 1) * sizeof(int64_t),
                                     detail::stream_of(ctx)));
    return g;
  }
  uint64_t* keys = ws.alloc<uint64_t>(T);
  uint64_t* keys_alt = ws.alloc<uint64_t>(T);
  int64_t* order = ws.alloc<int64_t>(T);
  int64_t* order_alt = ws.alloc<int64_t>(T);
  detail::launch(ctx, iota_kernel, dim3(blocks_for(T)), dim3(NT), 0, order, T);
  size_t temp_bytes = 0;
  {
    cub::DoubleBuffer<uint64_t> dk(keys, keys_alt);
    cub::DoubleBuffer<int64_t> dv(order, order_alt);
    PCOPS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, dk, dv, T, 0, 64, detail::stream_of(ctx)));
  }
  void* temp = ws.bytes(temp_bytes);
  const int cols[3] = {third, second, key};
  const uint64_t* sorted_keys = keys;
  for (int col : cols) {
    detail::launch(ctx, column_keys_kernel, dim3(blocks_for(T)), dim3(NT), 0, t,
                   static_cast<const int64_t*>(order), T, col, counts[col], s.num_out, s.num_in, s.kernels, keys);
    cub::DoubleBuffer<uint64_t> dk(keys, keys_alt);
    cub::DoubleBuffer<int64_t> dv(order, order_alt);
    PCOPS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, dk, dv, T, 0, bits_for(counts[col]),
                                                     detail::stream_of(ctx)));  // stable
    if (dv.Current() != order) std::swap(order, order_alt);
    if (dk.Current() != keys) std::swap(keys, keys_alt);
    sorted_keys = keys;
  }
  detail::launch(ctx, offsets_kernel, dim3(blocks_for(rows + 1)), dim3(NT), 0, sorted_keys, T, rows, offsets);
  g.order = order;
  return g;
}

// dst[r, d] for r < rows, d < c_dst: fold the triplets of row r (grouping order), then s ascending:
// acc = fl(acc + fl(mat[k, s, d] * src[m, s])), m = the triplet's src_col entry. mat [K, C_src, C_dst].
__global__ void mvmr_kernel(const int64_t* offsets, const int64_t* order, const int64_t* t, int src_col,
                            const float* __restrict__ src, int64_t c_src, const float* __restrict__ mat,
                            int64_t c_dst, int64_t rows, float* __restrict__ dst) {
  const int64_t total = rows * c_dst;
  for (int64_t q = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; q < total; q += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = q / c_dst, d = q - r * c_dst;
    float acc = 0.0f;
    for (int64_t p = offsets[r]; p < offsets[r + 1]; ++p) {
      const int64_t row = order[p];
      const float* m = mat + t[row * 3 + 2] * c_src * c_dst + d;
      const float* sv = src + t[row * 3 + src_col] * c_src;
      for (int64_t cs = 0; cs < c_src; ++cs) acc = __fadd_rn(acc, __fmul_rn(m[cs * c_dst], sv[cs]));
    }
    dst[q] = acc;
  }
}

// grad_weights[k, o, c]: fold kernel k's triplets (order (i, j)): acc = fl(acc + fl(G[i, o] * F[j, c])).
__global__ void vvor_kernel(const int64_t* offsets, const int64_t* order, const int64_t* t,
                            const float* __restrict__ grad_out, const float* __restrict__ features, int64_t K,
                            int64_t co, int64_t ci, float* __restrict__ grad_weights) {
  const int64_t total = K * co * ci;
  for (int64_t q = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; q < total; q += int64_t{gridDim.x} * blockDim.x) {
    const int64_t k = q / (co * ci), rem = q - k * co * ci, o = rem / ci, c = rem - o * ci;
    float acc = 0.0f;
    for (int64_t p = offsets[k]; p < offsets[k + 1]; ++p) {
      const int64_t row = order[p];
      acc = __fadd_rn(acc, __fmul_rn(grad_out[t[row * 3] * co + o], features[t[row * 3 + 1] * ci + c]));
    }
    grad_weights[q] = acc;
  }
}

// ii[p], jj[p] = the i and j of the triplet at grouping position p (the VVOR's operands without
// the order -> triplet indirection; positions past the valid triplets are never read).
__global__ void gather_ij_kernel(const int64_t* order, const int64_t* t, int64_t T, int64_t* ii, int64_t* jj) {
  PCOPS_CUDA_GRID_STRIDE(p, T) {
    const int64_t r = order[p];
    ii[p] = t[r * 3];
    jj[p] = t[r * 3 + 1];
  }
}

// The VVOR of vvor_kernel, eight triplets at a time: their sixteen loads are issued before the
// eight dependent additions, which stay in the same order (an experiment, override
// PCOPS_CUDA_POINT_CONV_CONFIG=vvor-unrolled).
__global__ void vvor_unrolled_kernel(const int64_t* offsets, const int64_t* __restrict__ ii,
                                     const int64_t* __restrict__ jj, const float* __restrict__ grad_out,
                                     const float* __restrict__ features, int64_t K, int64_t co, int64_t ci,
                                     float* __restrict__ grad_weights) {
  constexpr int U = 8;
  PCOPS_CUDA_GRID_STRIDE(q, K * co * ci) {
    const int64_t k = q / (co * ci), rem = q - k * co * ci, o = rem / ci, c = rem - o * ci;
    float acc = 0.0f;
    int64_t p = offsets[k];
    const int64_t end = offsets[k + 1];
    for (; p + U <= end; p += U) {
      float gv[U], fv[U];
#pragma unroll
      for (int u = 0; u < U; ++u) gv[u] = grad_out[ii[p + u] * co + o], fv[u] = features[jj[p + u] * ci + c];
#pragma unroll
      for (int u = 0; u < U; ++u) acc = __fadd_rn(acc, __fmul_rn(gv[u], fv[u]));
    }
    for (; p < end; ++p) acc = __fadd_rn(acc, __fmul_rn(grad_out[ii[p] * co + o], features[jj[p] * ci + c]));
    grad_weights[q] = acc;
  }
}

// PCOPS_CUDA_POINT_CONV_CONFIG: comma-separated experiments ("vvor-unrolled", "mvmr-tiled").
bool config_has(const char* name) {
  const char* e = std::getenv("PCOPS_CUDA_POINT_CONV_CONFIG");
  if (e == nullptr) return false;
  const std::string s = "," + std::string(e) + ",";
  return s.find("," + std::string(name) + ",") != std::string::npos;
}

// wt[k, c, o] = w[k, o, c].
__global__ void transpose_kernel(const float* w, int64_t K, int64_t co, int64_t ci, float* wt) {
  const int64_t total = K * co * ci;
  for (int64_t q = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; q < total; q += int64_t{gridDim.x} * blockDim.x) {
    const int64_t k = q / (ci * co), rem = q - k * ci * co, c = rem / co, o = rem - c * co;
    wt[q] = w[(k * co + o) * ci + c];
  }
}

}  // namespace

void point_conv(const CudaContext& ctx, const PointConvShape& s, const float* features, const float* weights,
                const int64_t* triplets, float* out) {
  core::validate_point_conv(s);
  const int64_t Ci = s.channels_in, Co = s.channels_out, K = s.kernels;
  if (s.num_out * Co == 0) return;
  detail::Workspace ws(ctx);
  constexpr int NT = PointConvPolicy::kThreads;
  float* wt = ws.alloc<float>(K * Ci * Co);
  detail::launch(ctx, transpose_kernel, dim3(blocks_for(K * Ci * Co)), dim3(NT), 0, weights, K, Co, Ci, wt);
  if (config_has("mvmr-tiled") && point_conv_exact_tiled(ctx, triplets, s.triplets, 0, 1, s.num_out, s.num_in, K,
                                                         features, Ci, wt, Co, out))
    return;
  const Grouping g = group_triplets(ctx, ws, s, triplets, /*key=*/0, /*second=*/2, /*third=*/1);
  detail::launch(ctx, mvmr_kernel, dim3(blocks_for(s.num_out * Co)), dim3(NT), 0, g.offsets, g.order, triplets,
                 1, features, Ci, static_cast<const float*>(wt), Co, s.num_out, out);
}

void point_conv_backward(const CudaContext& ctx, const PointConvShape& s, const float* grad_out,
                         const float* features, const float* weights, const int64_t* triplets,
                         float* grad_features, float* grad_weights) {
  core::validate_point_conv(s);
  const int64_t Ci = s.channels_in, Co = s.channels_out, K = s.kernels;
  detail::Workspace ws(ctx);
  constexpr int NT = PointConvPolicy::kThreads;
  if (grad_features != nullptr && s.num_in * Ci > 0 &&
      !(config_has("mvmr-tiled") && point_conv_exact_tiled(ctx, triplets, s.triplets, 1, 0, s.num_in, s.num_out, K,
                                                          grad_out, Co, weights, Ci, grad_features))) {
    const Grouping g = group_triplets(ctx, ws, s, triplets, /*key=*/1, /*second=*/2, /*third=*/0);
    detail::launch(ctx, mvmr_kernel, dim3(blocks_for(s.num_in * Ci)), dim3(NT), 0, g.offsets, g.order, triplets,
                   0, grad_out, Co, weights, Ci, s.num_in, grad_features);
  }
  if (grad_weights != nullptr && K * Co * Ci > 0) {
    const Grouping g = group_triplets(ctx, ws, s, triplets, /*key=*/2, /*second=*/0, /*third=*/1);
    if (config_has("vvor-unrolled") && s.triplets > 0) {
      int64_t* ii = ws.alloc<int64_t>(s.triplets);
      int64_t* jj = ws.alloc<int64_t>(s.triplets);
      detail::launch(ctx, gather_ij_kernel, dim3(blocks_for(s.triplets)), dim3(NT), 0, g.order, triplets,
                     s.triplets, ii, jj);
      detail::launch(ctx, vvor_unrolled_kernel, dim3(blocks_for(K * Co * Ci)), dim3(NT), 0, g.offsets,
                     static_cast<const int64_t*>(ii), static_cast<const int64_t*>(jj), grad_out, features, K, Co, Ci,
                     grad_weights);
    } else {
      detail::launch(ctx, vvor_kernel, dim3(blocks_for(K * Co * Ci)), dim3(NT), 0, g.offsets, g.order, triplets,
                     grad_out, features, K, Co, Ci, grad_weights);
    }
  }
}

}  // namespace pcops::cuda
