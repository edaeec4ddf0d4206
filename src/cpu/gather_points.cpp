// CPU gather_points and its backward (also the kernels of group_points, which gathers over the
// flattened (m, s) index). Parallel decomposition: (b, c) rows; the backward scatters each
// row's gradient in ascending index order inside one task (no atomics: deterministic).
#include "pcops/gather_points.hpp"

#include <algorithm>

#include "core/validate.hpp"

namespace pcops::cpu {
namespace {

int64_t row_grain(int64_t row_length) {
  return std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(row_length, 1));
}

}  // namespace

void gather_points(const CpuContext& ctx, FeaturesView features, const int64_t* idx,
                   int64_t num_indices, float* out) {
  core::validate_gather_points(features, features.batch, num_indices);
  const int64_t B = features.batch, C = features.channels, N = features.count, M = num_indices;
  core::check_indices(idx, core::checked_mul(B, M, "idx"), N, "idx");
  if (B * C * M == 0) return;
  parallel_for(ctx, 0, B * C, row_grain(M), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / C, c = r % C;
      const int64_t* ib = idx + b * M;
      float* o = out + r * M;
      if (N == 0) {  // every index is -1 (and the features may have no storage at all)
        std::fill(o, o + M, 0.0f);
      } else if (features.stride_point == 1) {
        const float* f = &features.at(b, c, 0);
        for (int64_t m = 0; m < M; ++m) o[m] = ib[m] >= 0 ? f[ib[m]] : 0.0f;
      } else {
        for (int64_t m = 0; m < M; ++m) o[m] = ib[m] >= 0 ? features.at(b, c, ib[m]) : 0.0f;
      }
    }
  });
}

void gather_points_backward(const CpuContext& ctx, FeaturesView grad_out, const int64_t* idx,
                            int64_t count, float* grad_features) {
  core::check_features(grad_out, "grad_out");
  PCOPS_CHECK(count >= 0, Value, "count: expected >= 0, got ", count);
  const int64_t B = grad_out.batch, C = grad_out.channels, M = grad_out.count, N = count;
  core::checked_mul(core::checked_mul(B, C, "grad_features"), N, "grad_features");
  core::check_indices(idx, core::checked_mul(B, M, "idx"), N, "idx");
  if (B * C * N == 0) return;
  parallel_for(ctx, 0, B * C, row_grain(M + N), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / C, c = r % C;
      const int64_t* ib = idx + b * M;
      float* g = grad_features + r * N;
      std::fill(g, g + N, 0.0f);
      for (int64_t m = 0; m < M; ++m) {
        const int64_t j = ib[m];
        if (j >= 0) g[j] = g[j] + grad_out.at(b, c, m);
      }
    }
  });
}

}  // namespace pcops::cpu
