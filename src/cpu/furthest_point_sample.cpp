// CPU furthest point sampling. Baseline: one pass over the cloud per step.
#include "pcops/furthest_point_sample.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/distance.hpp"

namespace pcops::cpu {

void furthest_point_sample(const CpuContext& ctx, PointsView points, LengthsView lengths,
                           const FpsParams& params, int64_t* out) {
  core::validate_furthest_point_sample(points, lengths, params);
  const int64_t M = params.num_samples;
  parallel_for(ctx, 0, points.batch, 1, [&](int64_t b0, int64_t b1) {
    std::vector<float> mind;
    for (int64_t b = b0; b < b1; ++b) {
      int64_t* o = out + b * M;
      const int64_t n = lengths.get(b, points.count);
      if (n == 0) {
        for (int64_t t = 0; t < M; ++t) o[t] = -1;
        continue;
      }
      mind.assign(n, INFINITY);
      std::vector<char> eligible(n, 1);
      if (params.skip_near_origin) {
        for (int64_t j = 0; j < n; ++j) {
          const float x = points.at(b, j, 0), y = points.at(b, j, 1), z = points.at(b, j, 2);
          eligible[j] = ((x * x + y * y) + z * z) > 1e-3f;
        }
      }
      // With lengths, slots past the cloud's length hold -1 (PyTorch3D's convention); without,
      // the rule continues and index 0 repeats.
      const int64_t steps = lengths.present() ? std::min(M, n) : M;
      for (int64_t t = steps; t < M; ++t) o[t] = -1;
      int64_t c = params.start_index;
      for (int64_t t = 0; t < steps; ++t) {
        o[t] = c;
        if (t + 1 == steps) break;
        float best = -1.0f;
        int64_t arg = 0;
        const float* q = &points.at(b, c, 0);
        for (int64_t j = 0; j < n; ++j) {
          float s = common::squared_distance(q, points.stride_dim, &points.at(b, j, 0),
                                             points.stride_dim, points.dim);
          if (!std::isfinite(s)) s = 0.0f;
          if (s < mind[j]) mind[j] = s;
          if (eligible[j] && mind[j] > best) {
            best = mind[j];
            arg = j;
          }
        }
        c = arg;
      }
    }
  });
}

}  // namespace pcops::cpu
