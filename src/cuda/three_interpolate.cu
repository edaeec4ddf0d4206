// CUDA three_interpolate and its backward, bitwise equal to the CPU backend (the contract fixes
// every rounding: acc = +0, then acc = fl(acc + fl(w * f)) in slot order forward; sources in
// ascending (n, t) order for grad_features; channels in ascending order for grad_weight).
//
// From kRowMinChannels channels on, the gathers read point rows: the features (forward) or
// grad_out (grad_features) are first transposed into a workspace [B, points, C], so a warp reads
// the 32 channels of one gathered point as one 128-byte row instead of 32 sectors of 32 bytes;
// a block works on a tile of 32 destination points and writes its results through shared memory,
// coalesced along the points. Below it (and for any shape the row kernels do not take) one
// thread per (b, group of kChannels channels, destination point) gathers straight from the
// channel-first layout:
// - Forward: its three indices and weights are read once, each output row is written coalesced
//   along n.
// - grad_features: a scatter, made deterministic without atomics by the inverse index
//   (primitives/inverse_index.cuh): for every (b, m) the slots (n, t) with idx = m, ascending;
//   one thread (row kernels: one lane per channel) folds them in that order.
// - grad_weight: a gather over channels; one thread per (b, n) keeps its three sums.
// idx is device memory and is not range-checked here (see the header): slots outside [0, M) are
// skipped like -1, so nothing outside the features is ever read.
#include "pcops/three_interpolate.hpp"

#include <algorithm>
#include <cstdint>

#include "common/distance.hpp"
#include "core/validate.hpp"
#include "cuda/common.cuh"
#include "cuda/primitives/inverse_index.cuh"
#include "pcops/error.hpp"

namespace pcops::cuda {
namespace {

struct InterpPolicy {
  static constexpr int kThreads = 256;
  static constexpr int kChannels = 8;  // channels per thread: idx / weight / list read once for 8
  static constexpr int64_t kMaxBlocks = int64_t{1} << 20;  // grid-stride beyond
  // The row kernels: from this many channels on; tiles of 32 destination points, 8 warps.
  static constexpr int64_t kRowMinChannels = 16;
  static constexpr int kTile = 32;
  static constexpr int kRowWarps = 8;
  static constexpr int64_t kMaxGridY = 65535;  // grid y, z limit (batches beyond: the kernels stride over b)
};

unsigned blocks_for(int64_t items) {
  return static_cast<unsigned>(std::clamp<int64_t>(
      detail::ceil_div(items, InterpPolicy::kThreads), 1, InterpPolicy::kMaxBlocks));
}

__device__ __forceinline__ float feature(const FeaturesView& f, int64_t b, int64_t c, int64_t n) {
  return f.data[b * f.stride_batch + c * f.stride_channel + n * f.stride_point];
}

__device__ __forceinline__ float point_value(const PointsView& v, int64_t b, int64_t n, int64_t d) {
  return v.data[b * v.stride_batch + n * v.stride_point + d * v.stride_dim];
}

// out[b, c, n] for a group of kChannels channels. Thread t = ((b * groups) + g) * N + n.
__global__ void __launch_bounds__(InterpPolicy::kThreads)
    forward_kernel(FeaturesView features, const int64_t* idx, PointsView weight, int64_t N,
                   int64_t groups, float* out) {
  constexpr int G = InterpPolicy::kChannels;
  const int64_t C = features.channels, M = features.count;
  const int64_t total = features.batch * groups * N;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t n = i % N, r = i / N, g = r % groups, b = r / groups;
    int64_t j[3];
    float w[3];
#pragma unroll
    for (int t = 0; t < 3; ++t) {
      j[t] = idx[(b * N + n) * 3 + t];
      if (!(j[t] >= 0 && j[t] < M)) j[t] = -1;
      w[t] = point_value(weight, b, n, t);
    }
    const int64_t c0 = g * G;
#pragma unroll
    for (int cc = 0; cc < G; ++cc) {
      const int64_t c = c0 + cc;
      if (c >= C) break;
      float acc = 0.0f;
#pragma unroll
      for (int t = 0; t < 3; ++t)
        if (j[t] >= 0) acc = common::add_rn(acc, common::mul_rn(w[t], feature(features, b, c, j[t])));
      out[(b * C + c) * N + n] = acc;
    }
  }
}

// grad_features[b, c, m] = fold over the slots q = n * 3 + t of list (b, m), ascending, of
// fl(G[b, c, n] * w[b, n, t]) from +0. Thread i = ((b * groups) + g) * M + m: neighbouring
// threads write neighbouring m of one channel row.
__global__ void __launch_bounds__(InterpPolicy::kThreads)
    grad_features_kernel(FeaturesView grad_out, PointsView weight, primitives::InverseIndex inv,
                         int64_t M, int64_t groups, float* grad_features) {
  constexpr int G = InterpPolicy::kChannels;
  const int64_t C = grad_out.channels;
  const int64_t total = grad_out.batch * groups * M;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t m = i % M, r = i / M, g = r % groups, b = r / groups;
    const int64_t c0 = g * G;
    const int cn = static_cast<int>(std::min<int64_t>(G, C - c0));
    float acc[G];
#pragma unroll
    for (int cc = 0; cc < G; ++cc) acc[cc] = 0.0f;
    const int64_t lo = inv.offsets[b * M + m], hi = inv.offsets[b * M + m + 1];
    for (int64_t e = lo; e < hi; ++e) {
      const int64_t q = inv.position(e), n = q / 3;
      const float w = point_value(weight, b, n, q - n * 3);
#pragma unroll
      for (int cc = 0; cc < G; ++cc)
        if (cc < cn) acc[cc] = common::add_rn(acc[cc], common::mul_rn(feature(grad_out, b, c0 + cc, n), w));
    }
#pragma unroll
    for (int cc = 0; cc < G; ++cc)
      if (cc < cn) grad_features[(b * C + c0 + cc) * M + m] = acc[cc];
  }
}

// grad_weight[b, n, t] = fold over c ascending of fl(G[b, c, n] * F[b, c, idx[b, n, t]]) from +0
// (+0 for a skipped slot). One thread per (b, n); reads of G are coalesced along n.
__global__ void __launch_bounds__(InterpPolicy::kThreads)
    grad_weight_kernel(FeaturesView grad_out, FeaturesView features, const int64_t* idx, int64_t N,
                       float* grad_weight) {
  const int64_t C = features.channels, M = features.count;
  const int64_t total = features.batch * N;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = i / N, n = i - b * N;
    int64_t j[3];
    float acc[3] = {0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int t = 0; t < 3; ++t) {
      j[t] = idx[i * 3 + t];
      if (!(j[t] >= 0 && j[t] < M)) j[t] = -1;
    }
    for (int64_t c = 0; c < C; ++c) {
      const float go = feature(grad_out, b, c, n);
#pragma unroll
      for (int t = 0; t < 3; ++t)
        if (j[t] >= 0) acc[t] = common::add_rn(acc[t], common::mul_rn(go, feature(features, b, c, j[t])));
    }
#pragma unroll
    for (int t = 0; t < 3; ++t) grad_weight[i * 3 + t] = acc[t];
  }
}

// [B, C, count] (any strides) -> dst [B, count, C] contiguous: 32 x 32 tiles through shared memory,
// reads coalesced along the points (where the view is), writes along the channels.
__global__ void __launch_bounds__(256)
    transpose_rows_kernel(FeaturesView v, float* dst) {
  __shared__ float tile[32][33];
  const int64_t C = v.channels, P = v.count;
  const int64_t p0 = blockIdx.x * int64_t{32}, c0 = blockIdx.y * int64_t{32};
  const int tx = static_cast<int>(threadIdx.x & 31u), ty = static_cast<int>(threadIdx.x >> 5);
  for (int64_t b = blockIdx.z; b < v.batch; b += gridDim.z) {
    for (int r = ty; r < 32; r += 8) {
      const int64_t c = c0 + r, p = p0 + tx;
      if (c < C && p < P) tile[r][tx] = v.data[b * v.stride_batch + c * v.stride_channel + p * v.stride_point];
    }
    __syncthreads();
    for (int r = ty; r < 32; r += 8) {
      const int64_t p = p0 + r, c = c0 + tx;
      if (p < P && c < C) dst[(b * P + p) * C + c] = tile[tx][r];
    }
    __syncthreads();
  }
}

void transpose_rows(const CudaContext& ctx, FeaturesView v, float* dst) {
  if (v.batch == 0 || v.count == 0 || v.channels == 0) return;
  const unsigned z = static_cast<unsigned>(std::min<int64_t>(v.batch, InterpPolicy::kMaxGridY));
  detail::launch(ctx, transpose_rows_kernel,
                 dim3(static_cast<unsigned>(detail::ceil_div(v.count, 32)),
                      static_cast<unsigned>(detail::ceil_div(v.channels, 32)), z),
                 dim3(256), 0, v, dst);
}

// The row kernels' results: tile[c][p] (32 channels from c0 x tp points from p0) into dst [.., C,
// P] of batch b, warp w writing channel rows w, w + W, ... along the points (coalesced).
__device__ __forceinline__ void store_tile(const float (&tile)[32][InterpPolicy::kTile + 1], float* dst, int64_t b,
                                           int64_t C, int64_t c0, int64_t P, int64_t p0, int tp, int warp,
                                           int lane) {
  for (int r = warp; r < 32 && c0 + r < C; r += InterpPolicy::kRowWarps)
    if (lane < tp) dst[(b * C + c0 + r) * P + p0 + lane] = tile[r][lane];
}

// out[b, c, n] from rows [B, M, C] of the features. Block (tile of 32 n, 32 channels, b): the
// tile's indices and weights in shared memory; warp w folds points n0 + w, n0 + w + 8, ... with
// lane = channel into a 32 x 32 shared tile that the warps then write along n.
__global__ void __launch_bounds__(InterpPolicy::kRowWarps * 32)
    forward_rows_kernel(const float* rows, const int64_t* idx, PointsView weight, int64_t B, int64_t C,
                        int64_t M, int64_t N, float* out) {
  constexpr int T = InterpPolicy::kTile, W = InterpPolicy::kRowWarps;
  __shared__ int64_t sj[T * 3];
  __shared__ float sw[T * 3];
  __shared__ float tile[32][T + 1];
  const int lane = static_cast<int>(threadIdx.x & 31u), warp = static_cast<int>(threadIdx.x >> 5);
  const int64_t n0 = blockIdx.x * int64_t{T}, c0 = blockIdx.y * int64_t{32}, c = c0 + lane;
  const int tn = static_cast<int>(std::min<int64_t>(T, N - n0));
  for (int64_t b = blockIdx.z; b < B; b += gridDim.z) {
    if (static_cast<int>(threadIdx.x) < tn * 3) {
      const int q = static_cast<int>(threadIdx.x), n = q / 3, t = q - n * 3;
      const int64_t j = idx[(b * N + n0 + n) * 3 + t];
      sj[q] = (j >= 0 && j < M) ? j : -1;
      sw[q] = weight.data[b * weight.stride_batch + (n0 + n) * weight.stride_point + t * weight.stride_dim];
    }
    __syncthreads();
    const float* fb = rows + b * M * C;
    for (int n = warp; n < tn; n += W) {
      float acc = 0.0f;
      if (c < C) {
#pragma unroll
        for (int t = 0; t < 3; ++t) {
          const int64_t j = sj[n * 3 + t];
          if (j >= 0) acc = common::add_rn(acc, common::mul_rn(sw[n * 3 + t], fb[j * C + c]));
        }
      }
      tile[lane][n] = acc;
    }
    __syncthreads();
    store_tile(tile, out, b, C, c0, N, n0, tn, warp, lane);
    __syncthreads();
  }
}

// grad_features[b, c, m] from rows [B, N, C] of grad_out: block (tile of 32 m, 32 channels, b);
// warp w folds the lists of m0 + w, m0 + w + 8, ... (lane = channel; the list's positions and
// weights are the same for every lane), U sources' loads ahead of their adds.
__global__ void __launch_bounds__(InterpPolicy::kRowWarps * 32)
    grad_features_rows_kernel(const float* rows, PointsView weight, primitives::InverseIndex inv, int64_t B,
                              int64_t C, int64_t M, int64_t N, float* grad_features) {
  constexpr int T = InterpPolicy::kTile, W = InterpPolicy::kRowWarps, U = 4;
  __shared__ float tile[32][T + 1];
  const int lane = static_cast<int>(threadIdx.x & 31u), warp = static_cast<int>(threadIdx.x >> 5);
  const int64_t m0 = blockIdx.x * int64_t{T}, c0 = blockIdx.y * int64_t{32}, c = c0 + lane;
  const int tm = static_cast<int>(std::min<int64_t>(T, M - m0));
  const bool active = c < C;
  for (int64_t b = blockIdx.z; b < B; b += gridDim.z) {
    const float* gb = rows + b * N * C;
    for (int m = warp; m < tm; m += W) {
      float acc = 0.0f;
      const int64_t lo = inv.offsets[b * M + m0 + m], hi = inv.offsets[b * M + m0 + m + 1];
      for (int64_t e = lo; e < hi; e += U) {
        float g[U], w[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          g[u] = 0.0f;
          w[u] = 0.0f;
          if (e + u < hi) {
            const int64_t q = inv.position(e + u), n = q / 3;
            w[u] = weight.data[b * weight.stride_batch + n * weight.stride_point + (q - n * 3) * weight.stride_dim];
            if (active) g[u] = gb[n * C + c];
          }
        }
#pragma unroll
        for (int u = 0; u < U; ++u)
          if (e + u < hi) acc = common::add_rn(acc, common::mul_rn(g[u], w[u]));
      }
      tile[lane][m] = acc;
    }
    __syncthreads();
    store_tile(tile, grad_features, b, C, c0, M, m0, tm, warp, lane);
    __syncthreads();
  }
}

bool use_rows(int64_t C) {
  return C >= InterpPolicy::kRowMinChannels && detail::ceil_div(C, 32) <= InterpPolicy::kMaxGridY;
}

dim3 row_grid(int64_t points, int64_t C, int64_t B) {
  return dim3(static_cast<unsigned>(detail::ceil_div(points, InterpPolicy::kTile)),
              static_cast<unsigned>(detail::ceil_div(C, 32)),
              static_cast<unsigned>(std::min<int64_t>(B, InterpPolicy::kMaxGridY)));
}

}  // namespace

void three_interpolate(const CudaContext& ctx, FeaturesView features, const int64_t* idx,
                       PointsView weight, float* out) {
  core::validate_three_interpolate(features, weight);
  const int64_t B = features.batch, C = features.channels, N = weight.count;
  core::checked_mul(core::checked_mul(B, N, "idx"), 3, "idx");
  PCOPS_CHECK(idx != nullptr || B * N == 0, Value, "idx: data is null for a non-empty view");
  if (B * C * N == 0) return;
  if (use_rows(C)) {
    detail::Workspace ws(ctx);
    float* rows = ws.alloc<float>(B * features.count * C);
    transpose_rows(ctx, features, rows);
    detail::launch(ctx, forward_rows_kernel, row_grid(N, C, B), dim3(InterpPolicy::kRowWarps * 32), 0, rows, idx,
                   weight, B, C, features.count, N, out);
    return;
  }
  const int64_t groups = detail::ceil_div(C, InterpPolicy::kChannels);
  detail::launch(ctx, forward_kernel, dim3(blocks_for(B * groups * N)), dim3(InterpPolicy::kThreads), 0,
                 features, idx, weight, N, groups, out);
}

void three_interpolate_backward(const CudaContext& ctx, FeaturesView grad_out,
                                FeaturesView features, const int64_t* idx, PointsView weight,
                                float* grad_features, float* grad_weight) {
  core::validate_three_interpolate(features, weight);
  core::check_features(grad_out, "grad_out");
  const int64_t B = features.batch, C = features.channels, M = features.count, N = weight.count;
  PCOPS_CHECK(grad_out.batch == B && grad_out.channels == C && grad_out.count == N, Value,
              "grad_out: expected shape [", B, ", ", C, ", ", N, "], got [", grad_out.batch, ", ",
              grad_out.channels, ", ", grad_out.count, "]");
  core::checked_mul(core::checked_mul(B, N, "idx"), 3, "idx");
  PCOPS_CHECK(idx != nullptr || B * N == 0, Value, "idx: data is null for a non-empty view");
  constexpr unsigned T = InterpPolicy::kThreads;
  if (grad_features != nullptr && B * C * M > 0) {
    detail::Workspace ws(ctx);
    const primitives::InverseIndex inv = primitives::inverse_index(ctx, ws, idx, B, N * 3, M);
    if (use_rows(C)) {
      float* rows = ws.alloc<float>(B * N * C);
      transpose_rows(ctx, grad_out, rows);
      detail::launch(ctx, grad_features_rows_kernel, row_grid(M, C, B), dim3(InterpPolicy::kRowWarps * 32), 0, rows,
                     weight, inv, B, C, M, N, grad_features);
    } else {
      const int64_t groups = detail::ceil_div(C, InterpPolicy::kChannels);
      detail::launch(ctx, grad_features_kernel, dim3(blocks_for(B * groups * M)), dim3(T), 0, grad_out,
                     weight, inv, M, groups, grad_features);
    }
  }
  if (grad_weight != nullptr && B * N > 0)
    detail::launch(ctx, grad_weight_kernel, dim3(blocks_for(B * N)), dim3(T), 0, grad_out, features,
                   idx, N, grad_weight);
}

}  // namespace pcops::cuda
