// Uniform grid build: bounding box, cell size from N, the box and the occupancy, then a stable
// counting sort of the points into cell order. Parallel decomposition: the points are split
// into one contiguous piece per worker; each piece has its own histogram, so the scatter keeps
// ascending original indices within every cell.
#include "cpu/spatial_grid.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace pcops::cpu::grid {
namespace {

constexpr uint32_t kSpecial = 0xFFFFFFFFu;

// Number of cells of edge h over the extents e (saturating).
double cells_for(const double e[3], double h) {
  double c = 1.0;
  for (int a = 0; a < 3; ++a) c *= std::max(1.0, std::ceil(e[a] / h));
  return c;
}

// Smallest h (within a factor 1e-3) whose cell count is <= target, h >= floor_h.
double edge_for_cells(const double e[3], double target, double floor_h) {
  const double emax = std::max({e[0], e[1], e[2]});
  if (!(emax > 0.0)) return std::max(1.0, floor_h);
  double hi = emax * 1.000001;  // one cell per axis
  if (floor_h >= hi) return floor_h;
  double lo = std::max(floor_h, emax * 1e-7);
  if (cells_for(e, lo) <= target) return lo;
  for (int it = 0; it < 60 && hi > lo * 1.001; ++it) {
    const double mid = std::sqrt(lo * hi);
    if (cells_for(e, mid) <= target) hi = mid; else lo = mid;
  }
  return hi;
}

}  // namespace

void build(const CpuContext& ctx, const PointsView& pts, int64_t b, int64_t n,
           const BuildOptions& opt, Grid& g) {
  const int64_t pieces = std::max<int64_t>(1, std::min<int64_t>(max_threads(ctx), n / 32768));
  const int64_t step = (n + pieces - 1) / std::max<int64_t>(pieces, 1);
  auto piece_range = [&](int64_t p, int64_t& a, int64_t& e) {
    a = std::min(n, p * step);
    e = std::min(n, a + step);
  };

  // 1. Bounding box of the finite points.
  std::vector<double> box(static_cast<size_t>(pieces) * 6);
  std::vector<int64_t> finite_count(pieces, 0);
  parallel_for(ctx, 0, pieces, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      int64_t a, e;
      piece_range(p, a, e);
      float mn[3] = {INFINITY, INFINITY, INFINITY}, mx[3] = {-INFINITY, -INFINITY, -INFINITY};
      int64_t cnt = 0;
      for (int64_t j = a; j < e; ++j) {
        const float px = pts.at(b, j, 0), py = pts.at(b, j, 1), pz = pts.at(b, j, 2);
        if (!finite3(px, py, pz)) continue;
        ++cnt;
        mn[0] = std::min(mn[0], px); mx[0] = std::max(mx[0], px);
        mn[1] = std::min(mn[1], py); mx[1] = std::max(mx[1], py);
        mn[2] = std::min(mn[2], pz); mx[2] = std::max(mx[2], pz);
      }
      for (int d = 0; d < 3; ++d) {
        box[p * 6 + d] = mn[d];
        box[p * 6 + 3 + d] = mx[d];
      }
      finite_count[p] = cnt;
    }
  });
  double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
  int64_t nf = 0;
  for (int64_t p = 0; p < pieces; ++p) {
    nf += finite_count[p];
    for (int d = 0; d < 3; ++d) {
      lo[d] = std::min(lo[d], box[p * 6 + d]);
      hi[d] = std::max(hi[d], box[p * 6 + 3 + d]);
    }
  }
  g.num_finite = nf;
  if (nf == 0) {
    for (int d = 0; d < 3; ++d) lo[d] = hi[d] = 0.0;
  }
  double ext[3], maxabs = 0.0;
  for (int d = 0; d < 3; ++d) {
    ext[d] = hi[d] - lo[d];
    maxabs = std::max({maxabs, std::fabs(lo[d]), std::fabs(hi[d])});
  }
  const double cap = opt.max_cells_per_point * static_cast<double>(std::max<int64_t>(nf, 1)) + 64.0;
  const double target = std::max(1.0, std::min(cap, static_cast<double>(nf) / opt.points_per_cell));

  double h = edge_for_cells(ext, target, opt.min_cell);

  std::unique_ptr<uint32_t[]> cid(new uint32_t[std::max<int64_t>(n, 1)]);
  std::vector<std::vector<int32_t>> hist(pieces);
  auto set_edge = [&](double edge) {
    g.h = edge;
    g.inv_h = 1.0 / edge;
    g.num_cells = 1;
    for (int d = 0; d < 3; ++d) {
      g.lo[d] = lo[d];
      g.dims[d] = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(ext[d] / edge)));
      g.num_cells *= g.dims[d];
    }
    g.slack = edge * 1e-8 + maxabs * 1e-14;
  };
  // 2. Cell ids and per-piece histograms; returns the number of occupied cells.
  auto assign = [&]() -> int64_t {
    parallel_for(ctx, 0, pieces, 1, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        int64_t a, e;
        piece_range(p, a, e);
        std::vector<int32_t>& hc = hist[p];
        hc.assign(static_cast<size_t>(g.num_cells), 0);
        for (int64_t j = a; j < e; ++j) {
          const float px = pts.at(b, j, 0), py = pts.at(b, j, 1), pz = pts.at(b, j, 2);
          if (!finite3(px, py, pz)) {
            cid[j] = kSpecial;
            continue;
          }
          const uint32_t c = static_cast<uint32_t>(g.cell(g.coord(0, px), g.coord(1, py), g.coord(2, pz)));
          cid[j] = c;
          ++hc[c];
        }
      }
    });
    int64_t occupied = 0;
    for (int64_t c = 0; c < g.num_cells; ++c) {
      int32_t t = 0;
      for (int64_t p = 0; p < pieces; ++p) t += hist[p][c];
      occupied += t > 0;
    }
    return occupied;
  };
  set_edge(h);
  int64_t occupied = assign();
  // Surface-like or clustered data leaves most cells empty: refine once so that the occupied
  // cells hold about the target count (occupancy of a surface scales with 1/h^2).
  if (occupied > 0 && static_cast<double>(nf) / occupied > 2.0 * opt.points_per_cell &&
      h > opt.min_cell) {
    double h1 = h * std::sqrt(opt.points_per_cell * occupied / static_cast<double>(nf));
    h1 = std::max(h1, opt.min_cell);
    if (cells_for(ext, h1) > cap) h1 = edge_for_cells(ext, cap, opt.min_cell);
    if (h1 < 0.8 * h) {
      set_edge(h1);
      occupied = assign();
    }
  }

  // 3. Offsets: cell_start and the write cursor of every (piece, cell).
  const int64_t C = g.num_cells;
  g.cell_start.resize(static_cast<size_t>(C) + 1);
  int32_t run = 0;
  for (int64_t c = 0; c < C; ++c) {
    g.cell_start[c] = run;
    for (int64_t p = 0; p < pieces; ++p) {
      const int32_t t = hist[p][c];
      hist[p][c] = run;
      run += t;
    }
  }
  g.cell_start[C] = run;

  // 4. Scatter into cell order (stable).
  g.x.reset(new float[std::max<int64_t>(nf, 1)]);
  g.y.reset(new float[std::max<int64_t>(nf, 1)]);
  g.z.reset(new float[std::max<int64_t>(nf, 1)]);
  g.id.reset(new int32_t[std::max<int64_t>(nf, 1)]);
  parallel_for(ctx, 0, pieces, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      int64_t a, e;
      piece_range(p, a, e);
      int32_t* cur = hist[p].data();
      for (int64_t j = a; j < e; ++j) {
        const uint32_t c = cid[j];
        if (c == kSpecial) continue;
        const int32_t at = cur[c]++;
        g.x[at] = pts.at(b, j, 0);
        g.y[at] = pts.at(b, j, 1);
        g.z[at] = pts.at(b, j, 2);
        g.id[at] = static_cast<int32_t>(j);
      }
    }
  });
  g.special.clear();
  if (nf < n) {
    for (int64_t j = 0; j < n; ++j)
      if (cid[j] == kSpecial) g.special.push_back(j);
  }
}

__attribute__((target_clones("avx512f", "avx2", "default")))
int squared_distances3(const float* __restrict x, const float* __restrict y,
                       const float* __restrict z, int n, float qx, float qy, float qz, float limit,
                       bool strict, float* __restrict out) {
  int cnt = 0;
  if (strict) {
    for (int i = 0; i < n; ++i) {
      const float dx = qx - x[i], dy = qy - y[i], dz = qz - z[i];
      const float s = (dx * dx + dy * dy) + dz * dz;
      out[i] = s;
      cnt += s < limit;
    }
  } else {
    for (int i = 0; i < n; ++i) {
      const float dx = qx - x[i], dy = qy - y[i], dz = qz - z[i];
      const float s = (dx * dx + dy * dy) + dz * dz;
      out[i] = s;
      cnt += s <= limit;
    }
  }
  return cnt;
}

__attribute__((target_clones("avx512f", "avx2", "default")))
void squared_distances_nd(const float* __restrict xt, int64_t ld, int64_t dim, int n,
                          const float* __restrict q, float* __restrict out) {
  {
    const float q0 = q[0];
    for (int i = 0; i < n; ++i) {
      const float d = q0 - xt[i];
      out[i] = d * d;
    }
  }
  for (int64_t k = 1; k < dim; ++k) {
    const float qk = q[k];
    const float* row = xt + k * ld;
    for (int i = 0; i < n; ++i) {
      const float d = qk - row[i];
      out[i] = out[i] + d * d;
    }
  }
}

}  // namespace pcops::cpu::grid
