// CUDA three_interpolate and its backward, bitwise equal to the CPU backend (the contract fixes
// every rounding: acc = +0, then acc = fl(acc + fl(w * f)) in slot order forward; sources in
// ascending (n, t) order for grad_features; channels in ascending order for grad_weight).
//
// - Forward: one thread per (b, group of kChannels channels, n), n fastest: its three indices and
//   weights are read once, each output row is written coalesced along n.
// - grad_features: a scatter, made deterministic without atomics by the inverse index
//   (primitives/inverse_index.cuh): for every (b, m) the slots (n, t) with idx = m, ascending;
//   one thread per (b, channel group, m) folds them in that order.
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

}  // namespace

void three_interpolate(const CudaContext& ctx, FeaturesView features, const int64_t* idx,
                       PointsView weight, float* out) {
  core::validate_three_interpolate(features, weight);
  const int64_t B = features.batch, C = features.channels, N = weight.count;
  core::checked_mul(core::checked_mul(B, N, "idx"), 3, "idx");
  PCOPS_CHECK(idx != nullptr || B * N == 0, Value, "idx: data is null for a non-empty view");
  if (B * C * N == 0) return;
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
    const int64_t groups = detail::ceil_div(C, InterpPolicy::kChannels);
    detail::launch(ctx, grad_features_kernel, dim3(blocks_for(B * groups * M)), dim3(T), 0, grad_out,
                   weight, inv, M, groups, grad_features);
  }
  if (grad_weight != nullptr && B * N > 0)
    detail::launch(ctx, grad_weight_kernel, dim3(blocks_for(B * N)), dim3(T), 0, grad_out, features,
                   idx, N, grad_weight);
}

}  // namespace pcops::cuda
