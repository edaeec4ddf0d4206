// CPU three_interpolate and its backward, in the contract's fixed order (no atomics).
// Parallel decomposition: forward and grad_features over (b, c) rows, one row per task step,
// each row's points (and, backward, its (n, t) slots) in ascending order; grad_weight over
// (b, block of points), channels in ascending order inside a block.
#include "pcops/three_interpolate.hpp"

#include <algorithm>
#include <vector>

#include "core/validate.hpp"

namespace pcops::cpu {
namespace {

constexpr int64_t kPointBlock = 256;

int64_t row_grain(int64_t row_length) {
  return std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(row_length, 1));
}

}  // namespace

void three_interpolate(const CpuContext& ctx, FeaturesView features, const int64_t* idx,
                       PointsView weight, float* out) {
  core::validate_three_interpolate(features, weight);
  const int64_t B = features.batch, C = features.channels, M = features.count, N = weight.count;
  core::check_indices(idx, core::checked_mul(core::checked_mul(B, N, "idx"), 3, "idx"), M, "idx");
  if (B * C * N == 0) return;
  parallel_for(ctx, 0, B * C, row_grain(N), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / C, c = r % C;
      const int64_t* ib = idx + b * N * 3;
      float* o = out + r * N;
      for (int64_t n = 0; n < N; ++n) {
        float acc = 0.0f;
        for (int t = 0; t < 3; ++t) {
          const int64_t j = ib[n * 3 + t];
          if (j < 0) continue;
          acc = acc + weight.at(b, n, t) * features.at(b, c, j);
        }
        o[n] = acc;
      }
    }
  });
}

void three_interpolate_backward(const CpuContext& ctx, FeaturesView grad_out,
                                FeaturesView features, const int64_t* idx, PointsView weight,
                                float* grad_features, float* grad_weight) {
  core::validate_three_interpolate(features, weight);
  core::check_features(grad_out, "grad_out");
  const int64_t B = features.batch, C = features.channels, M = features.count, N = weight.count;
  PCOPS_CHECK(grad_out.batch == B && grad_out.channels == C && grad_out.count == N, Value,
              "grad_out: expected shape [", B, ", ", C, ", ", N, "], got [", grad_out.batch, ", ",
              grad_out.channels, ", ", grad_out.count, "]");
  core::check_indices(idx, core::checked_mul(core::checked_mul(B, N, "idx"), 3, "idx"), M, "idx");
  if (grad_features != nullptr && B * C * M > 0) {
    parallel_for(ctx, 0, B * C, row_grain(N + M), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t b = r / C, c = r % C;
        const int64_t* ib = idx + b * N * 3;
        float* g = grad_features + r * M;
        std::fill(g, g + M, 0.0f);
        for (int64_t n = 0; n < N; ++n) {
          const float go = grad_out.at(b, c, n);
          for (int t = 0; t < 3; ++t) {
            const int64_t j = ib[n * 3 + t];
            if (j >= 0) g[j] = g[j] + go * weight.at(b, n, t);
          }
        }
      }
    });
  }
  if (grad_weight != nullptr && B * N > 0) {
    const int64_t blocks = (N + kPointBlock - 1) / kPointBlock;
    parallel_for(ctx, 0, B * blocks, 1, [&](int64_t k0, int64_t k1) {
      for (int64_t k = k0; k < k1; ++k) {
        const int64_t b = k / blocks, n0 = (k % blocks) * kPointBlock;
        const int64_t n1 = std::min(N, n0 + kPointBlock);
        const int64_t* ib = idx + b * N * 3;
        float* gw = grad_weight + b * N * 3;
        std::fill(gw + n0 * 3, gw + n1 * 3, 0.0f);
        for (int64_t c = 0; c < C; ++c)
          for (int64_t n = n0; n < n1; ++n) {
            const float go = grad_out.at(b, c, n);
            for (int t = 0; t < 3; ++t) {
              const int64_t j = ib[n * 3 + t];
              if (j >= 0) gw[n * 3 + t] = gw[n * 3 + t] + go * features.at(b, c, j);
            }
          }
      }
    });
  }
}

}  // namespace pcops::cpu
