// CPU nearest_neighbor (chamfer_distance's search) and the deterministic helpers of its autograd.
//
// Search paths:
// - float32, norm 2, D = 3: cpu::knn with k = 1 (its uniform grid for large clouds, a vectorised
//   brute force otherwise); the same (key, index) rule, so the same index.
// - everything else (float64, norm 1, any D): brute force over a coordinate-major copy of y.
//   Parallel decomposition: tiles of kTileQueries queries of one cloud per task; each tile walks
//   y in blocks of kBlock points (the block stays in L1/L2 while every query of the tile reads it),
//   computing a block of s values per query with a vectorisable loop, then a scalar scan keeps the
//   running best (key, index) of the query in registers.
#include "pcops/nearest_neighbor.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/nearest_neighbor.hpp"
#include "core/validate.hpp"
#include "pcops/error.hpp"
#include "pcops/knn.hpp"

namespace pcops::cpu {
namespace {

constexpr int64_t kBlock = 512;        // y points per block
constexpr int64_t kTileQueries = 32;   // queries sharing one pass over y

template <int Norm, class T>
void block_values(const T* yt, int64_t ld, int64_t D, int64_t len, const T* q, T* s) {
  for (int64_t j = 0; j < len; ++j) s[j] = common::nn::term<Norm>(common::nn::sub(q[0], yt[j]));
  for (int64_t d = 1; d < D; ++d) {
    const T* row = yt + d * ld;
    const T qd = q[d];
    for (int64_t j = 0; j < len; ++j) s[j] = common::nn::add(s[j], common::nn::term<Norm>(common::nn::sub(qd, row[j])));
  }
}

template <int Norm, class View>
void brute(const CpuContext& ctx, const View& x, const View& y, const LengthsView& xl,
           const LengthsView& yl, int64_t* idx) {
  using T = typename View::value_type;
  const int64_t B = x.batch, P1 = x.count, P2 = y.count, D = x.dim;
  // Coordinate-major copy of each cloud's valid points: yt[b][d][j].
  std::vector<T> yt(static_cast<size_t>(B * P2 * D));
  // Grains of about kMinTaskWork operations, so that small inputs run on the calling thread.
  constexpr int64_t kMinTaskWork = int64_t{1} << 16;
  parallel_for(ctx, 0, B, std::max<int64_t>(1, kMinTaskWork / std::max<int64_t>(1, P2 * D)), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t n = yl.get(b, P2);
      T* dst = yt.data() + b * P2 * D;
      for (int64_t j = 0; j < n; ++j)
        for (int64_t d = 0; d < D; ++d) dst[d * P2 + j] = y.at(b, j, d);
    }
  });
  const int64_t tiles_per_cloud = (P1 + kTileQueries - 1) / kTileQueries;
  const int64_t tile_work = std::max<int64_t>(1, kTileQueries * P2 * D);
  parallel_for(ctx, 0, B * tiles_per_cloud, std::max<int64_t>(1, kMinTaskWork / tile_work), [&](int64_t t0, int64_t t1) {
    std::vector<T> q(static_cast<size_t>(kTileQueries * D));
    std::vector<T> s(static_cast<size_t>(kBlock));
    T best[kTileQueries];
    int64_t arg[kTileQueries];
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / tiles_per_cloud, m0 = (t % tiles_per_cloud) * kTileQueries;
      const int64_t mq = xl.get(b, P1), n = yl.get(b, P2);
      const int64_t m1 = std::min(P1, m0 + kTileQueries);
      const int64_t valid_end = std::min(m1, mq);
      int64_t* out = idx + b * P1;
      for (int64_t m = std::max(m0, valid_end); m < m1; ++m) out[m] = -1;  // padding rows
      const int64_t cnt = valid_end - m0;
      if (cnt <= 0) continue;
      if (n == 0) {
        for (int64_t m = m0; m < valid_end; ++m) out[m] = -1;
        continue;
      }
      for (int64_t r = 0; r < cnt; ++r) {
        for (int64_t d = 0; d < D; ++d) q[r * D + d] = x.at(b, m0 + r, d);
        arg[r] = -1;
        best[r] = static_cast<T>(INFINITY);
      }
      const T* base = yt.data() + b * P2 * D;
      for (int64_t j0 = 0; j0 < n; j0 += kBlock) {
        const int64_t len = std::min(kBlock, n - j0);
        for (int64_t r = 0; r < cnt; ++r) {
          block_values<Norm>(base + j0, P2, D, len, q.data() + r * D, s.data());
          T bk = best[r];
          int64_t bj = arg[r];
          int64_t j = 0;
          if (bj < 0) {  // the first candidate is taken whatever its key (all +inf gives index 0)
            bk = common::nn::key(s[0]);
            bj = j0;
            j = 1;
          }
          // Ascending j with a strict comparison: ties keep the lowest index.
          for (; j < len; ++j) {
            const T k = common::nn::key(s[j]);
            if (k < bk) {
              bk = k;
              bj = j0 + j;
            }
          }
          best[r] = bk;
          arg[r] = bj;
        }
      }
      for (int64_t r = 0; r < cnt; ++r) out[m0 + r] = arg[r];
    }
  });
}

template <class View>
void search(const CpuContext& ctx, const View& x, const View& y, const LengthsView& xl,
            const LengthsView& yl, int64_t norm, int64_t* idx) {
  if (norm == 1) brute<1>(ctx, x, y, xl, yl, idx);
  else brute<2>(ctx, x, y, xl, yl, idx);
}

template <class T>
void sum_rows(const CpuContext& ctx, const T* values, int64_t rows, int64_t length, T* out) {
  core::validate_ordered_sum(values, rows, length);
  if (rows == 0) return;
  if (length == 0) {
    std::fill(out, out + rows, T(0));
    return;
  }
  constexpr int64_t G = common::nn::kSumGroup;
  // Level 1 (the bulk of the work) in parallel over all groups of all rows, the rest per row.
  const int64_t groups = (length + G - 1) / G;
  std::vector<T> level(static_cast<size_t>(rows * groups));
  parallel_for(ctx, 0, rows * groups, 1024, [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t r = g / groups, c = g % groups;
      const T* v = values + r * length + c * G;
      const int64_t len = std::min(G, length - c * G);
      T s = v[0];
      for (int64_t i = 1; i < len; ++i) s = common::nn::add(s, v[i]);
      level[g] = s;
    }
  });
  parallel_for(ctx, 0, rows, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      T* v = level.data() + r * groups;
      int64_t n = groups;
      while (n > 1) {  // in place: group c is written to slot c <= G * c, after its reads
        const int64_t m = (n + G - 1) / G;
        for (int64_t c = 0; c < m; ++c) {
          const int64_t len = std::min(G, n - c * G);
          T s = v[c * G];
          for (int64_t i = 1; i < len; ++i) s = common::nn::add(s, v[c * G + i]);
          v[c] = s;
        }
        n = m;
      }
      out[r] = v[0];
    }
  });
}

template <class T>
void scatter_rows(const CpuContext& ctx, const T* grad, const int64_t* idx, int64_t batch, int64_t num_idx,
                  int64_t width, int64_t count, T* out) {
  core::validate_gather_rows_backward(grad, idx, batch, num_idx, width, count);
  core::check_indices(idx, batch * num_idx, count, "idx");
  if (batch * count * width == 0) return;
  // Each task owns a range of target rows of one cloud and walks that cloud's indices in
  // ascending order: the sum order does not depend on the number of threads.
  const int64_t splits = std::max<int64_t>(1, std::min<int64_t>(max_threads(ctx), (count + 1023) / 1024));
  const int64_t span = (count + splits - 1) / splits;
  parallel_for(ctx, 0, batch * splits, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / splits, lo = (t % splits) * span, hi = std::min(count, lo + span);
      if (lo >= hi) continue;
      T* o = out + b * count * width;
      std::fill(o + lo * width, o + hi * width, T(0));
      const int64_t* ib = idx + b * num_idx;
      const T* g = grad + b * num_idx * width;
      for (int64_t p = 0; p < num_idx; ++p) {
        const int64_t j = ib[p];
        if (j < lo || j >= hi) continue;
        for (int64_t u = 0; u < width; ++u) o[j * width + u] = common::nn::add(o[j * width + u], g[p * width + u]);
      }
    }
  });
}

}  // namespace

void nearest_neighbor(const CpuContext& ctx, PointsView x, PointsView y, LengthsView x_lengths,
                      LengthsView y_lengths, const NearestNeighborParams& params, int64_t* idx) {
  core::validate_nearest_neighbor(x, y, x_lengths, y_lengths, params);
  const int64_t B = x.batch, P1 = x.count;
  if (B * P1 == 0) return;
  if (y.count == 0) {
    std::fill(idx, idx + B * P1, int64_t{-1});
    return;
  }
  if (params.norm == 2 && x.dim == 3 && y.count <= int64_t{0xFFFFFFFF}) {
    std::vector<float> dist(static_cast<size_t>(B * P1));
    knn(ctx, x, y, x_lengths, y_lengths, KnnParams{1}, dist.data(), idx);
    return;
  }
  search(ctx, x, y, x_lengths, y_lengths, params.norm, idx);
}

void nearest_neighbor(const CpuContext& ctx, PointsView64 x, PointsView64 y, LengthsView x_lengths,
                      LengthsView y_lengths, const NearestNeighborParams& params, int64_t* idx) {
  core::validate_nearest_neighbor(x, y, x_lengths, y_lengths, params);
  if (x.batch * x.count == 0) return;
  search(ctx, x, y, x_lengths, y_lengths, params.norm, idx);
}

template <class T>
void norm_rows(const CpuContext& ctx, const T* values, int64_t rows, int64_t length, T* out) {
  core::validate_ordered_sum(values, rows, length);
  parallel_for(ctx, 0, rows, 4096, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) out[r] = common::nn::ordered_norm(values + r * length, length);
  });
}

void ordered_sum(const CpuContext& ctx, const float* values, int64_t rows, int64_t length, float* out) {
  sum_rows(ctx, values, rows, length, out);
}
void ordered_sum(const CpuContext& ctx, const double* values, int64_t rows, int64_t length, double* out) {
  sum_rows(ctx, values, rows, length, out);
}

void ordered_norm(const CpuContext& ctx, const float* values, int64_t rows, int64_t length, float* out) {
  norm_rows(ctx, values, rows, length, out);
}
void ordered_norm(const CpuContext& ctx, const double* values, int64_t rows, int64_t length, double* out) {
  norm_rows(ctx, values, rows, length, out);
}

void gather_rows_backward(const CpuContext& ctx, const float* grad, const int64_t* idx, int64_t batch,
                          int64_t num_idx, int64_t width, int64_t count, float* out) {
  scatter_rows(ctx, grad, idx, batch, num_idx, width, count, out);
}
void gather_rows_backward(const CpuContext& ctx, const double* grad, const int64_t* idx, int64_t batch,
                          int64_t num_idx, int64_t width, int64_t count, double* out) {
  scatter_rows(ctx, grad, idx, batch, num_idx, width, count, out);
}

}  // namespace pcops::cpu
