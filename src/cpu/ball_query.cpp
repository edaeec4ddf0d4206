// CPU ball query. Baseline: brute force in reference order.
#include "pcops/ball_query.hpp"

#include <vector>

#include "common/distance.hpp"

namespace pcops::cpu {

void ball_query(const CpuContext& ctx, PointsView query, PointsView ref, LengthsView query_lengths,
                LengthsView ref_lengths, const BallQueryParams& params, float* dist2, int64_t* idx) {
  core::validate_ball_query(query, ref, query_lengths, ref_lengths, params);
  const int64_t K = params.max_neighbors, M = query.count, B = query.batch;
  const float R2 = core::ball_query_threshold(params.radius);
  parallel_for(ctx, 0, B * M, 16, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t b = i / M, m = i % M;
      float* od = dist2 + i * K;
      int64_t* oi = idx + i * K;
      int64_t filled = 0;
      if (m < query_lengths.get(b, M)) {
        const int64_t n = ref_lengths.get(b, ref.count);
        const float qx = query.at(b, m, 0), qy = query.at(b, m, 1), qz = query.at(b, m, 2);
        for (int64_t j = 0; j < n && filled < K; ++j) {
          const float s = common::squared_distance3(qx, qy, qz, ref.at(b, j, 0), ref.at(b, j, 1),
                                                    ref.at(b, j, 2));
          if (s < R2) {
            od[filled] = s;
            oi[filled] = j;
            ++filled;
          }
        }
      }
      for (int64_t t = filled; t < K; ++t) {
        od[t] = 0.0f;
        oi[t] = -1;
      }
    }
  });
}

void ball_query_backward(const CpuContext& ctx, PointsView query, PointsView ref, const int64_t* idx,
                         const float* grad_dist2, int64_t K, float* grad_query, float* grad_ref) {
  const int64_t B = query.batch, M = query.count, N = ref.count;
  // Query gradients: one query per task, fixed slot order.
  parallel_for(ctx, 0, B * M, 64, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t b = i / M, m = i % M;
      float g[3] = {0.0f, 0.0f, 0.0f};
      for (int64_t t = 0; t < K; ++t) {
        const int64_t j = idx[i * K + t];
        if (j < 0) continue;
        const float G = grad_dist2[i * K + t];
        for (int d = 0; d < 3; ++d) g[d] += 2.0f * G * (query.at(b, m, d) - ref.at(b, j, d));
      }
      for (int d = 0; d < 3; ++d) grad_query[i * 3 + d] = g[d];
    }
  });
  // Reference gradients: one batch entry per task, queries and slots in order (deterministic).
  parallel_for(ctx, 0, B, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      float* gr = grad_ref + b * N * 3;
      for (int64_t j = 0; j < N * 3; ++j) gr[j] = 0.0f;
      for (int64_t m = 0; m < M; ++m) {
        const int64_t i = b * M + m;
        for (int64_t t = 0; t < K; ++t) {
          const int64_t j = idx[i * K + t];
          if (j < 0) continue;
          const float G = grad_dist2[i * K + t];
          for (int d = 0; d < 3; ++d) gr[j * 3 + d] -= 2.0f * G * (query.at(b, m, d) - ref.at(b, j, d));
        }
      }
    }
  });
}

}  // namespace pcops::cpu
