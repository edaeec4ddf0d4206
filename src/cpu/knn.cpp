// CPU kNN: exact. 3-D clouds large enough to pay for it go through a uniform grid (built per
// call, see spatial_grid.hpp) searched in growing Chebyshev rings of cells; everything else
// (any D, small clouds, k close to N) is a vectorised brute force over a coordinate-major copy.
// Parallel decomposition: queries (grid: many queries go in cell order, and the queries of one
// cell share one gathered block of the points of its 3 x 3 x 3 cells), one chunk per task with its
// own selection buffer; the grid build is parallel over point pieces.
//
// Selection keeps the best k by (key, index), key = s with NaN as +inf, in a buffer of up to
// 2k candidates that is cut back to k by a branch-free selection (topk_select.hpp); its k-th key
// is the admission threshold and the pruning bound.
#include "pcops/knn.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/distance.hpp"
#include "pcops/error.hpp"
#include "pcops/spatial_index.hpp"
#include "cpu/spatial_grid.hpp"
#include "cpu/knn_grid.hpp"
#include "cpu/knn_topk.hpp"

namespace pcops::cpu {
namespace {

constexpr int kBlock = 256;
// Queries of one cell that pay for gathering the points of its 3 x 3 x 3 cells into one block.
constexpr int64_t kShareMinQueries = 4;
// kIndexLoad (knn_grid.hpp): above that mean cell load a cloud goes to the spatial index instead
// of the grid. Measured on 2 cores at 300k points, k = 16 (all-points queries, random order; load
// of the grid after its refinement): uniform (load 5) grid 0.38 s / index 0.85 s, sphere (12)
// 0.39 / 0.43 s, dense core + sparse halo + sheet (182) 0.93 / 0.67 s, 20 tight clusters + 10 %
// uniform (6116) 2.09 / 0.73 s.

void pad(float* od, int64_t* oi, int64_t k) {
  for (int64_t t = 0; t < k; ++t) {
    od[t] = INFINITY;
    oi[t] = -1;
  }
}

// ---------------------------------------------------------------------------------------------
// Brute force: any D. Each cloud's references are copied coordinate-major so the distance loop
// runs over contiguous blocks of references.
void knn_brute(const CpuContext& ctx, const PointsView& query, const PointsView& ref,
               const LengthsView& query_lengths, const LengthsView& ref_lengths, int64_t k,
               float* dist, int64_t* idx) {
  const int64_t B = query.batch, M = query.count, N = ref.count, D = ref.dim;
  std::vector<float> xt(static_cast<size_t>(B * N * D));
  parallel_for(ctx, 0, B, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t n = ref_lengths.get(b, N);
      float* dst = xt.data() + b * N * D;
      for (int64_t j = 0; j < n; ++j)
        for (int64_t d = 0; d < D; ++d) dst[d * N + j] = ref.at(b, j, d);
    }
  });
  const int64_t work = std::max<int64_t>(1, N * D);
  const int64_t grain = std::max<int64_t>(1, std::min<int64_t>(64, (1 << 16) / work));
  parallel_for(ctx, 0, B * M, grain, [&](int64_t i0, int64_t i1) {
    TopK tk(std::max<int64_t>(k, 1));
    std::vector<float> q(static_cast<size_t>(D));
    float s[kBlock + 16], s2[kBlock + 16];
    int32_t off[kBlock + 16];
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t b = i / M, m = i % M;
      float* od = dist + i * k;
      int64_t* oi = idx + i * k;
      if (k == 0) continue;
      if (m >= query_lengths.get(b, M)) {
        pad(od, oi, k);
        continue;
      }
      const int64_t n = ref_lengths.get(b, N);
      for (int64_t d = 0; d < D; ++d) q[d] = query.at(b, m, d);
      const float* base = xt.data() + b * N * D;
      tk.reset();
      for (int64_t j0 = 0; j0 < n; j0 += kBlock) {
        const int len = static_cast<int>(std::min<int64_t>(kBlock, n - j0));
        const float t = tk.threshold();
        if (D == 3 && t < INFINITY) {  // NaN and +inf keys cannot pass a finite threshold
          const int cnt = grid::filter3(base + j0, base + N + j0, base + 2 * N + j0, len, q[0], q[1],
                                        q[2], t, false, s, off);
          for (int c = 0; c < cnt; ++c) tk.push(s[c], static_cast<uint32_t>(j0 + off[c]));
          continue;
        }
        if (D == 3)
          grid::squared_distances3(base + j0, base + N + j0, base + 2 * N + j0, len, q[0], q[1], q[2],
                                   t, false, s);
        else
          grid::squared_distances_nd(base + j0, N, D, len, q.data(), s);
        // Every key competes while the threshold is +inf (NaN keys count as +inf); once it is
        // finite, only s <= threshold can enter.
        int c = 0;
        for (; c < len && tk.threshold() == INFINITY; ++c)
          tk.push(common::knn_key(s[c]), static_cast<uint32_t>(j0 + c));
        if (c < len) {
          const int cnt = grid::filter_le(s + c, len - c, tk.threshold(), s2, off);
          for (int e = 0; e < cnt; ++e) tk.push(s2[e], static_cast<uint32_t>(j0 + c + off[e]));
        }
      }
      tk.finish(od, oi);
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Grid search for one cloud.
struct GridSearch {
  const grid::Grid& g;

  // Squared lower bound, along axis a, of the distance from v to the cells [c0, c1].
  double gap(int a, int64_t c0, int64_t c1, double v) const {
    double d = std::max({0.0, g.edge(a, c0) - v, v - g.edge(a, c1 + 1)}) - g.slack;
    return d > 0.0 ? d * d : 0.0;
  }

  void scan(int64_t p0, int64_t p1, float qx, float qy, float qz, TopK& tk, float* s,
            int32_t* off) const {
    scan_arrays(g.x.data(), g.y.data(), g.z.data(), g.id.data(), p0, p1, qx, qy, qz, tk, s, off);
  }

  static void scan_arrays(const float* x, const float* y, const float* z, const int32_t* id,
                          int64_t p0, int64_t p1, float qx, float qy, float qz, TopK& tk, float* s,
                          int32_t* off) {
    for (int64_t j0 = p0; j0 < p1; j0 += kBlock) {
      const int len = static_cast<int>(std::min<int64_t>(kBlock, p1 - j0));
      const int cnt = grid::filter3(x + j0, y + j0, z + j0, len, qx, qy, qz, tk.threshold(), false,
                                    s, off);
      const int32_t* ids = id + j0;
      for (int c = 0; c < cnt; ++c) tk.push(s[c], static_cast<uint32_t>(ids[off[c]]));
    }
  }

  // The points of the cells within one cell (Chebyshev) of cell (cx, cy, cz), copied into one
  // block: the rings 0 and 1 of every query in that cell.
  struct Near {
    std::vector<float> x, y, z;
    std::vector<int32_t> id;
    int64_t n = 0;
  };
  void gather_near(int64_t cx, int64_t cy, int64_t cz, Near& out) const {
    const int64_t x0 = std::max<int64_t>(0, cx - 1), x1 = std::min<int64_t>(g.dims[0] - 1, cx + 1);
    const int64_t y0 = std::max<int64_t>(0, cy - 1), y1 = std::min<int64_t>(g.dims[1] - 1, cy + 1);
    const int64_t z0 = std::max<int64_t>(0, cz - 1), z1 = std::min<int64_t>(g.dims[2] - 1, cz + 1);
    const int64_t own = g.cell(cx, cy, cz);
    const int64_t c0 = g.cell_start[own], c1 = g.cell_start[own + 1];
    out.n = 0;
    append(c0, c1, out);  // the own cell first: its points tighten the threshold soonest
    for (int64_t z = z0; z <= z1; ++z)
      for (int64_t y = y0; y <= y1; ++y) {
        const int64_t row = g.cell(0, y, z);
        const int64_t p0 = g.cell_start[row + x0], p1 = g.cell_start[row + x1 + 1];
        if (y == cy && z == cz) {
          append(p0, c0, out);
          append(c1, p1, out);
        } else {
          append(p0, p1, out);
        }
      }
  }
  void append(int64_t p0, int64_t p1, Near& out) const {
    const int64_t need = out.n + (p1 - p0);
    if (static_cast<int64_t>(out.x.size()) < need) {
      const size_t cap = static_cast<size_t>(std::max<int64_t>(need, 2 * out.n));
      out.x.resize(cap);
      out.y.resize(cap);
      out.z.resize(cap);
      out.id.resize(cap);
    }
    std::copy(g.x.begin() + p0, g.x.begin() + p1, out.x.begin() + out.n);
    std::copy(g.y.begin() + p0, g.y.begin() + p1, out.y.begin() + out.n);
    std::copy(g.z.begin() + p0, g.z.begin() + p1, out.z.begin() + out.n);
    std::copy(g.id.begin() + p0, g.id.begin() + p1, out.id.begin() + out.n);
    out.n = need;
  }

  // Rings below first_ring are taken as already scanned into tk.
  void query(float qx, float qy, float qz, TopK& tk, float* s, int32_t* off,
             int64_t first_ring = 0) const {
    const double q[3] = {qx, qy, qz};
    int64_t cq[3];
    for (int a = 0; a < 3; ++a) cq[a] = g.coord(a, q[a]);
    const int64_t* dims = g.dims;
    for (int64_t r = 0;; ++r) {
      if (r >= first_ring) {
        int64_t lo[3], hi[3];
        for (int a = 0; a < 3; ++a) {
          lo[a] = std::max<int64_t>(0, cq[a] - r);
          hi[a] = std::min<int64_t>(dims[a] - 1, cq[a] + r);
        }
        for (int64_t z = lo[2]; z <= hi[2]; ++z) {
          const double gz = gap(2, z, z, q[2]);
          if (beyond(gz, tk.threshold())) continue;
          const bool ring_z = (z - cq[2] == r) || (cq[2] - z == r);
          for (int64_t y = lo[1]; y <= hi[1]; ++y) {
            const double gyz = gz + gap(1, y, y, q[1]);
            if (beyond(gyz, tk.threshold())) continue;
            const int64_t row = g.cell(0, y, z);
            if (ring_z || (y - cq[1] == r) || (cq[1] - y == r)) {
              if (beyond(gyz + gap(0, lo[0], hi[0], q[0]), tk.threshold())) continue;
              scan(g.cell_start[row + lo[0]], g.cell_start[row + hi[0] + 1], qx, qy, qz, tk, s,
                   off);
            } else {
              const int64_t xa = cq[0] - r, xb = cq[0] + r;
              if (xa >= 0 && !beyond(gyz + gap(0, xa, xa, q[0]), tk.threshold()))
                scan(g.cell_start[row + xa], g.cell_start[row + xa + 1], qx, qy, qz, tk, s, off);
              if (xb < dims[0] && !beyond(gyz + gap(0, xb, xb, q[0]), tk.threshold()))
                scan(g.cell_start[row + xb], g.cell_start[row + xb + 1], qx, qy, qz, tk, s, off);
            }
          }
        }
      }
      // Stop when every cell was visited or the unvisited region is provably farther than the
      // current k-th candidate.
      double out = INFINITY;
      for (int a = 0; a < 3; ++a) {
        if (cq[a] - r > 0) out = std::min(out, q[a] - g.edge(a, cq[a] - r));
        if (cq[a] + r < dims[a] - 1) out = std::min(out, g.edge(a, cq[a] + r + 1) - q[a]);
      }
      if (out == INFINITY) break;
      out -= g.slack;
      if (out > 0.0 && beyond(out * out, tk.threshold())) break;
    }
    // Points with a non-finite coordinate: their s is +inf or NaN whatever the query, key +inf.
    for (const int64_t j : g.special) tk.push(INFINITY, static_cast<uint32_t>(j));
  }
};

void knn_grid_cloud(const CpuContext& ctx, const PointsView& query, const PointsView& ref,
                    int64_t b, int64_t mq, int64_t n, int64_t k, float* dist, int64_t* idx,
                    grid::Grid& g) {
  const grid::BuildOptions opt = knn_grid_options(k);
  grid::build(ctx, ref, b, n, opt, g);
  const int64_t M = query.count;
  if (knn_grid_skewed(g, opt) && index_routes_enabled()) {
    // Strongly uneven density (clusters, dense cores in sparse halos): the grid's cells near
    // the dense parts stay overfull within its cell budget, so the adaptive tree of the spatial
    // index searches faster. Same results either way.
    const PointsView q1 = single_cloud(query, b, mq), r1 = single_cloud(ref, b, n);
    SpatialIndex index;
    index.build(ctx, r1, LengthsView{}, SpatialIndexParams{SpatialIndexParams{}.leaf_size, /*grid=*/false});
    index.knn(ctx, q1, LengthsView{}, k, dist + b * M * k, idx + b * M * k);  // rows [0, mq) of cloud b
    return;
  }
  knn_grid_search(ctx, query, b, mq, k, g, n, dist + b * M * k, idx + b * M * k);
}

}  // namespace

grid::BuildOptions knn_grid_options(int64_t k) {
  grid::BuildOptions opt;
  // About k/4 points per cell: the first ring box (3 x 3 x 3 cells) then usually holds the k
  // nearest, with few rows to visit.
  opt.points_per_cell = std::clamp(static_cast<double>(k) / 4.0, 1.0, 32.0);
  return opt;
}

bool knn_grid_skewed(const grid::Grid& g, const grid::BuildOptions& opt) {
  return g.load > kIndexLoad * opt.points_per_cell;
}

void knn_grid_search(const CpuContext& ctx, const PointsView& query, int64_t b, int64_t mq, int64_t k,
                     const grid::Grid& g, int64_t n, float* dist, int64_t* idx) {
  // Process the queries in cell order when there are many (cache locality); the queries of a
  // cell with several of them then share one gathered block of their rings 0 and 1.
  std::vector<int64_t> order;
  std::vector<int32_t> qc;
  if (mq >= 4096 && g.num_cells <= 4 * mq) {
    qc.resize(static_cast<size_t>(mq));
    std::vector<int64_t> count(static_cast<size_t>(g.num_cells) + 2, 0);
    for (int64_t m = 0; m < mq; ++m) {
      const float qx = query.at(b, m, 0), qy = query.at(b, m, 1), qz = query.at(b, m, 2);
      const int64_t c = grid::finite3(qx, qy, qz)
                            ? g.cell(g.coord(0, qx), g.coord(1, qy), g.coord(2, qz))
                            : g.num_cells;
      qc[m] = static_cast<int32_t>(c);
      ++count[c + 1];
    }
    for (int64_t c = 0; c <= g.num_cells; ++c) count[c + 1] += count[c];
    order.resize(static_cast<size_t>(mq));
    for (int64_t m = 0; m < mq; ++m) order[count[qc[m]]++] = m;
  }

  const GridSearch search{g};
  parallel_for(ctx, 0, mq, 16, [&](int64_t t0, int64_t t1) {
    TopK tk(k);
    float s[kBlock + 16];
    int32_t off[kBlock + 16];
    GridSearch::Near near;
    int64_t near_cell = -1;
    bool use_near = false;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t m = order.empty() ? t : order[t];
      if (!order.empty() && t + kPrefetch < t1) prefetch_query_row(query, b, order[t + kPrefetch], k, dist, idx);
      const float qx = query.at(b, m, 0), qy = query.at(b, m, 1), qz = query.at(b, m, 2);
      tk.reset();
      const bool in_cell = !order.empty() && qc[m] < g.num_cells;
      if (in_cell && qc[m] != near_cell) {
        const int64_t c = near_cell = qc[m];
        int64_t run = 1;
        while (t + run < t1 && qc[order[t + run]] == c) ++run;
        use_near = run >= kShareMinQueries;
        if (use_near) {
          const int64_t cx = c % g.dims[0], cy = (c / g.dims[0]) % g.dims[1];
          search.gather_near(cx, cy, c / (g.dims[0] * g.dims[1]), near);
        }
      }
      if (in_cell && use_near) {
        GridSearch::scan_arrays(near.x.data(), near.y.data(), near.z.data(), near.id.data(), 0,
                                near.n, qx, qy, qz, tk, s, off);
        search.query(qx, qy, qz, tk, s, off, 2);
      } else if (grid::finite3(qx, qy, qz)) {
        search.query(qx, qy, qz, tk, s, off);
      } else {
        // A non-finite query: every s is NaN or +inf, so every key is +inf and the first k
        // indices win.
        for (int64_t j = 0; j < std::min(n, k); ++j) tk.push(INFINITY, static_cast<uint32_t>(j));
      }
      tk.finish(dist + m * k, idx + m * k);
    }
  });
}

void knn(const CpuContext& ctx, PointsView query, PointsView ref, LengthsView query_lengths,
         LengthsView ref_lengths, const KnnParams& params, float* dist, int64_t* idx) {
  core::validate_knn(query, ref, query_lengths, ref_lengths, params);
  const int64_t k = params.k, M = query.count, B = query.batch, N = ref.count;
  if (k == 0 || B * M == 0) return;
  PCOPS_CHECK(N <= int64_t{0xFFFFFFFF}, Value, "ref: at most 2^32 - 1 points per cloud are supported, got ",
              N);
  const bool use_grid_at_all = ref.dim == 3 && N < (int64_t{1} << 31) && M >= 32 && N >= 512;
  if (!use_grid_at_all) {
    knn_brute(ctx, query, ref, query_lengths, ref_lengths, k, dist, idx);
    return;
  }
  // Kept per calling thread: rebuilding into warm buffers avoids faulting in fresh pages.
  static thread_local grid::Grid g;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = ref_lengths.get(b, N), mq = query_lengths.get(b, M);
    for (int64_t m = mq; m < M; ++m) pad(dist + (b * M + m) * k, idx + (b * M + m) * k, k);
    if (mq == 0) continue;
    if (n == 0) {
      for (int64_t m = 0; m < mq; ++m) pad(dist + (b * M + m) * k, idx + (b * M + m) * k, k);
      continue;
    }
    if (n >= 512 && 4 * k <= n) {
      knn_grid_cloud(ctx, query, ref, b, mq, n, k, dist, idx, g);
    } else {
      // One cloud through the brute force: a view of cloud b alone.
      knn_brute(ctx, single_cloud(query, b, mq), single_cloud(ref, b, n), LengthsView{}, LengthsView{}, k,
                dist + b * M * k, idx + b * M * k);
    }
  }
}

}  // namespace pcops::cpu
