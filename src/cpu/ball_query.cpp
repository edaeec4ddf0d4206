// CPU ball query: exact. Large 3-D clouds go through a uniform grid (built per call with cells
// of about half the radius, see spatial_grid.hpp): the cells overlapping the query's ball,
// widened by a safety margin, are scanned and every match (s < R2, computed exactly as the
// contract says) competes for the K smallest reference indices. Small clouds, few queries and
// radii that cover the cloud use a brute force in reference order that stops at the K-th match.
// Parallel decomposition: queries, one chunk per task with its own match buffer.
#include "pcops/ball_query.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/distance.hpp"
#include "cpu/knn_grid.hpp"
#include "cpu/knn_topk.hpp"
#include "cpu/spatial_grid.hpp"
#include "pcops/spatial_index.hpp"

namespace pcops::cpu {
namespace {

constexpr int kBlock = 256;

void pad(float* od, int64_t* oi, int64_t K) {
  for (int64_t t = 0; t < K; ++t) {
    od[t] = 0.0f;
    oi[t] = -1;
  }
}

// Brute force over cloud b, queries [0, mq): reference order, stops at the K-th match.
void ball_brute_cloud(const CpuContext& ctx, const PointsView& query, const PointsView& ref,
                      int64_t b, int64_t mq, int64_t n, int64_t K, float R2, float* dist2,
                      int64_t* idx) {
  const int64_t M = query.count;
  std::vector<float> xt(static_cast<size_t>(3 * n));
  for (int64_t j = 0; j < n; ++j)
    for (int d = 0; d < 3; ++d) xt[d * n + j] = ref.at(b, j, d);
  const float* X = xt.data();
  parallel_for(ctx, 0, mq, std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(n, 1)),
               [&](int64_t m0, int64_t m1) {
    float s[kBlock + 16];
    int32_t off[kBlock + 16];
    for (int64_t m = m0; m < m1; ++m) {
      float* od = dist2 + (b * M + m) * K;
      int64_t* oi = idx + (b * M + m) * K;
      const float qx = query.at(b, m, 0), qy = query.at(b, m, 1), qz = query.at(b, m, 2);
      int64_t filled = 0;
      for (int64_t j0 = 0; j0 < n && filled < K; j0 += kBlock) {
        const int len = static_cast<int>(std::min<int64_t>(kBlock, n - j0));
        const int cnt =
            grid::filter3(X + j0, X + n + j0, X + 2 * n + j0, len, qx, qy, qz, R2, true, s, off);
        for (int c = 0; c < cnt && filled < K; ++c) {
          od[filled] = s[c];
          oi[filled] = j0 + off[c];
          ++filled;
        }
      }
      for (int64_t t = filled; t < K; ++t) {
        od[t] = 0.0f;
        oi[t] = -1;
      }
    }
  });
}

// Grid search over cloud b. Returns false (and writes nothing) when the grid does not pay. A cloud
// whose grid is overfull within its cell budget goes to the spatial index instead (measured on 2
// cores, all points querying, radius = the median 16th-neighbour distance, K = 32: 20 tight
// clusters + 10 % uniform, 300k points 0.40 -> 0.19 s, 1M 2.79 -> 0.72 s; uniform clouds keep
// the grid; benchmarks/scripts/index_routes_cpu.py).
bool ball_grid_cloud(const CpuContext& ctx, const PointsView& query, const PointsView& ref,
                     int64_t b, int64_t mq, int64_t n, int64_t K, float radius, float R2, float* dist2,
                     int64_t* idx) {
  // Warm buffers across calls (see knn.cpp). A reference, so that the workers' lambdas below use
  // this thread's grid rather than their own thread_local instance.
  static thread_local grid::Grid tls_grid;
  grid::Grid& g = tls_grid;
  const grid::BuildOptions opt = radius_grid_options(R2);
  grid::build(ctx, ref, b, n, opt, g);
  if (g.num_cells <= 8) return false;
  const int64_t M = query.count;
  if (radius_grid_skewed(g, opt) && index_routes_enabled()) {
    // The cell budget kept the cells well above the radius and they are overfull: strongly uneven
    // density (clusters, dense cores). The spatial index's adaptive tree searches faster there;
    // same results either way.
    SpatialIndex index;
    index.build(ctx, single_cloud(ref, b, n), LengthsView{}, SpatialIndexParams{SpatialIndexParams{}.leaf_size, false});
    index.ball_query(ctx, single_cloud(query, b, mq), LengthsView{}, radius, K, dist2 + b * M * K, idx + b * M * K);
    return true;
  }
  ball_grid_search(ctx, query, b, mq, K, R2, g, dist2 + b * M * K, idx + b * M * K);
  return true;
}

}  // namespace

grid::BuildOptions radius_grid_options(float R2) {
  grid::BuildOptions opt;
  opt.min_cell = radius_reach(R2) * 0.5;
  opt.points_per_cell = 2.0;
  return opt;
}

bool radius_grid_skewed(const grid::Grid& g, const grid::BuildOptions& opt) {
  return g.h > 1.5 * opt.min_cell && g.load > kIndexLoad * opt.points_per_cell;
}

void ball_grid_search(const CpuContext& ctx, const PointsView& query, int64_t b, int64_t mq, int64_t K, float R2,
                      const grid::Grid& g, float* dist2, int64_t* idx) {
  const double rr = radius_reach(R2);  // every match is closer
  const double lim = static_cast<double>(R2);
  auto gap = [&](int a, int64_t c, double v) {
    double d = std::max({0.0, g.edge(a, c) - v, v - g.edge(a, c + 1)}) - g.slack;
    return d > 0.0 ? d * d : 0.0;
  };
  auto beyond = [&](double lb2) { return lb2 > kBoundTiny && lb2 * kBoundMargin >= lim; };
  parallel_for(ctx, 0, mq, 16, [&](int64_t m0, int64_t m1) {
    FirstK fk(K);
    float s[kBlock + 16];
    int32_t off[kBlock + 16];
    for (int64_t m = m0; m < m1; ++m) {
      const float qx = query.at(b, m, 0), qy = query.at(b, m, 1), qz = query.at(b, m, 2);
      fk.reset();
      // A non-finite query matches nothing (s is +inf or NaN, R2 finite); nor does a point with a
      // non-finite coordinate (kept out of the grid's cells).
      if (grid::finite3(qx, qy, qz)) {
        const double q[3] = {qx, qy, qz};
        int64_t c0[3], c1[3];
        for (int a = 0; a < 3; ++a) {
          c0[a] = g.coord(a, q[a] - rr - g.slack);
          c1[a] = g.coord(a, q[a] + rr + g.slack);
        }
        for (int64_t z = c0[2]; z <= c1[2]; ++z) {
          const double gz = gap(2, z, q[2]);
          if (beyond(gz)) continue;
          for (int64_t y = c0[1]; y <= c1[1]; ++y) {
            const double gyz = gz + gap(1, y, q[1]);
            if (beyond(gyz)) continue;
            const int64_t row = g.cell(0, y, z);
            const int64_t p0 = g.cell_start[row + c0[0]], p1 = g.cell_start[row + c1[0] + 1];
            for (int64_t j0 = p0; j0 < p1; j0 += kBlock) {
              const int len = static_cast<int>(std::min<int64_t>(kBlock, p1 - j0));
              const int cnt = grid::filter3(g.x.data() + j0, g.y.data() + j0, g.z.data() + j0, len, qx, qy, qz, R2,
                                            true, s, off);
              const int32_t* ids = g.id.data() + j0;
              for (int c = 0; c < cnt; ++c) fk.push(static_cast<uint32_t>(ids[off[c]]), s[c]);
            }
          }
        }
      }
      fk.finish(dist2 + m * K, idx + m * K);
    }
  });
}

void ball_query(const CpuContext& ctx, PointsView query, PointsView ref, LengthsView query_lengths,
                LengthsView ref_lengths, const BallQueryParams& params, float* dist2, int64_t* idx) {
  core::validate_ball_query(query, ref, query_lengths, ref_lengths, params);
  const int64_t K = params.max_neighbors, M = query.count, B = query.batch, N = ref.count;
  if (K == 0 || B * M == 0) return;
  const float R2 = core::ball_query_threshold(params.radius);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = ref_lengths.get(b, N), mq = query_lengths.get(b, M);
    for (int64_t m = mq; m < M; ++m) pad(dist2 + (b * M + m) * K, idx + (b * M + m) * K, K);
    if (mq == 0) continue;
    if (n == 0 || !(R2 > 0.0f)) {  // nothing can match (s < 0 never holds)
      for (int64_t m = 0; m < mq; ++m) pad(dist2 + (b * M + m) * K, idx + (b * M + m) * K, K);
      continue;
    }
    const bool grid_pays = n >= 512 && mq >= 16 && std::isfinite(R2) && n < (int64_t{1} << 31);
    if (grid_pays && ball_grid_cloud(ctx, query, ref, b, mq, n, K, params.radius, R2, dist2, idx)) continue;
    ball_brute_cloud(ctx, query, ref, b, mq, n, K, R2, dist2, idx);
  }
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
