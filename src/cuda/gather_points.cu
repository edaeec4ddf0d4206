// CUDA gather_points and group_points (a gather over the flattened (m, s) index) with their
// backwards, bitwise equal to the CPU backend.
//
// - Forward: an exact copy (+0 for index -1). One thread per (b, group of kChannels channels, m),
//   m fastest: the index is read once per group, each output row is written coalesced along m.
// - Backward: grad_features[b, c, n] folds G[b, c, m] over the m with idx[b, m] = n in ascending
//   order from +0 (the CPU's scatter order). The inverse index (primitives/inverse_index.cuh)
//   lists those m per (b, n); one thread per (b, channel group, n) folds its list. No atomics:
//   deterministic.
// idx is device memory and is not range-checked here (see the header): an index outside
// [0, count) is treated like -1, so nothing outside the features is ever read.
#include "pcops/gather_points.hpp"
#include "pcops/group_points.hpp"

#include <algorithm>
#include <cstdint>

#include "common/distance.hpp"
#include "core/validate.hpp"
#include "cuda/common.cuh"
#include "cuda/primitives/inverse_index.cuh"
#include "pcops/error.hpp"

namespace pcops::cuda {
namespace {

struct GatherPolicy {
  static constexpr int kThreads = 256;
  static constexpr int kChannels = 8;  // channels per thread: the index (or list) read once for 8
  static constexpr int64_t kMaxBlocks = int64_t{1} << 20;  // grid-stride beyond
};

unsigned blocks_for(int64_t items) {
  return static_cast<unsigned>(std::clamp<int64_t>(
      detail::ceil_div(items, GatherPolicy::kThreads), 1, GatherPolicy::kMaxBlocks));
}

__device__ __forceinline__ float feature(const FeaturesView& f, int64_t b, int64_t c, int64_t n) {
  return f.data[b * f.stride_batch + c * f.stride_channel + n * f.stride_point];
}

// out[b, c, m] = features[b, c, idx[b, m]] (+0 for a skipped index). Thread i = ((b * groups) +
// g) * M + m.
__global__ void __launch_bounds__(GatherPolicy::kThreads)
    gather_kernel(FeaturesView features, const int64_t* idx, int64_t M, int64_t groups, float* out) {
  constexpr int G = GatherPolicy::kChannels;
  const int64_t C = features.channels, N = features.count;
  const int64_t total = features.batch * groups * M;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t m = i % M, r = i / M, g = r % groups, b = r / groups;
    const int64_t j = idx[b * M + m];
    const bool valid = j >= 0 && j < N;
    const int64_t c0 = g * G;
#pragma unroll
    for (int cc = 0; cc < G; ++cc) {
      const int64_t c = c0 + cc;
      if (c >= C) break;
      out[(b * C + c) * M + m] = valid ? feature(features, b, c, j) : 0.0f;
    }
  }
}

// grad_features[b, c, n] = fold over the list (b, n) (positions m, ascending) of G[b, c, m] from
// +0. Thread i = ((b * groups) + g) * N + n.
__global__ void __launch_bounds__(GatherPolicy::kThreads)
    scatter_kernel(FeaturesView grad_out, primitives::InverseIndex inv, int64_t N, int64_t groups,
                   float* grad_features) {
  constexpr int G = GatherPolicy::kChannels;
  const int64_t C = grad_out.channels;
  const int64_t total = grad_out.batch * groups * N;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t n = i % N, r = i / N, g = r % groups, b = r / groups;
    const int64_t c0 = g * G;
    const int cn = static_cast<int>(std::min<int64_t>(G, C - c0));
    float acc[G];
#pragma unroll
    for (int cc = 0; cc < G; ++cc) acc[cc] = 0.0f;
    const int64_t lo = inv.offsets[b * N + n], hi = inv.offsets[b * N + n + 1];
    for (int64_t e = lo; e < hi; ++e) {
      const int64_t m = inv.position(e);
#pragma unroll
      for (int cc = 0; cc < G; ++cc)
        if (cc < cn) acc[cc] = common::add_rn(acc[cc], feature(grad_out, b, c0 + cc, m));
    }
#pragma unroll
    for (int cc = 0; cc < G; ++cc)
      if (cc < cn) grad_features[(b * C + c0 + cc) * N + n] = acc[cc];
  }
}

}  // namespace

void gather_points(const CudaContext& ctx, FeaturesView features, const int64_t* idx,
                   int64_t num_indices, float* out) {
  core::validate_gather_points(features, features.batch, num_indices);
  const int64_t B = features.batch, C = features.channels, M = num_indices;
  core::checked_mul(B, M, "idx");
  PCOPS_CHECK(idx != nullptr || B * M == 0, Value, "idx: data is null for a non-empty view");
  if (B * C * M == 0) return;
  const int64_t groups = detail::ceil_div(C, GatherPolicy::kChannels);
  detail::launch(ctx, gather_kernel, dim3(blocks_for(B * groups * M)), dim3(GatherPolicy::kThreads), 0,
                 features, idx, M, groups, out);
}

void gather_points_backward(const CudaContext& ctx, FeaturesView grad_out, const int64_t* idx,
                            int64_t count, float* grad_features) {
  core::check_features(grad_out, "grad_out");
  PCOPS_CHECK(count >= 0, Value, "count: expected >= 0, got ", count);
  const int64_t B = grad_out.batch, C = grad_out.channels, M = grad_out.count, N = count;
  core::checked_mul(core::checked_mul(B, C, "grad_features"), N, "grad_features");
  core::checked_mul(B, M, "idx");
  PCOPS_CHECK(idx != nullptr || B * M == 0, Value, "idx: data is null for a non-empty view");
  if (B * C * N == 0) return;
  detail::Workspace ws(ctx);
  const primitives::InverseIndex inv = primitives::inverse_index(ctx, ws, idx, B, M, N);
  const int64_t groups = detail::ceil_div(C, GatherPolicy::kChannels);
  detail::launch(ctx, scatter_kernel, dim3(blocks_for(B * groups * N)), dim3(GatherPolicy::kThreads), 0,
                 grad_out, inv, N, groups, grad_features);
}

void group_points(const CudaContext& ctx, FeaturesView features, const int64_t* idx,
                  const GroupPointsParams& params, float* out) {
  core::validate_group_points(features, features.batch, params);
  gather_points(ctx, features, idx, params.num_groups * params.group_size, out);
}

void group_points_backward(const CudaContext& ctx, FeaturesView grad_out, const int64_t* idx,
                           const GroupPointsParams& params, int64_t count, float* grad_features) {
  core::check_features(grad_out, "grad_out");
  PCOPS_CHECK(params.num_groups >= 0 && params.group_size >= 0, Value,
              "idx: expected non-negative [M, S], got [", params.num_groups, ", ",
              params.group_size, "]");
  PCOPS_CHECK(grad_out.count ==
                  core::checked_mul(params.num_groups, params.group_size, "group_points idx"),
              Value, "grad_out: expected ", params.num_groups, " x ", params.group_size,
              " values per channel, got ", grad_out.count);
  gather_points_backward(ctx, grad_out, idx, count, grad_features);
}

}  // namespace pcops::cuda
