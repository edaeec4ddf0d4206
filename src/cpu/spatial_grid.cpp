// Uniform grid build: bounding box, cell size from N, the box and the occupancy, then a stable
// counting sort of the points into cell order. Parallel decomposition: the points are split
// into one contiguous piece per worker; each piece has its own histogram, so the scatter keeps
// ascending original indices within every cell.
#include "cpu/spatial_grid.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <immintrin.h>
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

inline float unordered(int32_t i) {
  i = i < 0 ? i ^ 0x7FFFFFFF : i;
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}

// Bounds of the finite values of each coordinate of a packed [count, 3] block, as ordered ints
// (integer min/max reductions vectorise; float ones do not without fast-math). Finite
// coordinates of points that have a non-finite one may widen the box; that is harmless.
__attribute__((target_clones("avx512f", "avx2", "default")))
void bbox_packed(const float* __restrict p, int64_t count, int32_t* __restrict mn,
                 int32_t* __restrict mx) {
  constexpr int W = 48;  // 16 points; lane l holds coordinate l % 3
  int32_t lo[W], hi[W];
  for (int l = 0; l < W; ++l) {
    lo[l] = INT32_MAX;
    hi[l] = INT32_MIN;
  }
  const int64_t total = 3 * count;
  int64_t i = 0;
  for (; i + W <= total; i += W) {
    for (int l = 0; l < W; ++l) {
      const float v = p[i + l];
      int32_t iv;
      std::memcpy(&iv, &v, 4);
      iv = iv < 0 ? iv ^ 0x7FFFFFFF : iv;
      const bool f = (v - v) == 0.0f;
      lo[l] = std::min(lo[l], f ? iv : INT32_MAX);
      hi[l] = std::max(hi[l], f ? iv : INT32_MIN);
    }
  }
  for (; i < total; ++i) {
    const float v = p[i];
    int32_t iv;
    std::memcpy(&iv, &v, 4);
    iv = iv < 0 ? iv ^ 0x7FFFFFFF : iv;
    const bool f = (v - v) == 0.0f;
    const int l = static_cast<int>(i % 3);
    lo[l] = std::min(lo[l], f ? iv : INT32_MAX);
    hi[l] = std::max(hi[l], f ? iv : INT32_MIN);
  }
  for (int d = 0; d < 3; ++d) {
    mn[d] = INT32_MAX;
    mx[d] = INT32_MIN;
  }
  for (int l = 0; l < W; ++l) {
    mn[l % 3] = std::min(mn[l % 3], lo[l]);
    mx[l % 3] = std::max(mx[l % 3], hi[l]);
  }
}

// Cell ids of a packed [count, 3] block (kSpecial for points with a non-finite coordinate);
// the same clamped truncation as Grid::coord.
__attribute__((target_clones("avx512f", "avx2", "default")))
void cells_packed(const float* __restrict p, int64_t count, double lo0, double lo1, double lo2,
                  double inv, double m0, double m1, double m2, uint32_t d0, uint32_t d01,
                  uint32_t* __restrict out) {
  for (int64_t j = 0; j < count; ++j) {
    const float x = p[3 * j], y = p[3 * j + 1], z = p[3 * j + 2];
    const bool f = ((x - x) == 0.0f) & ((y - y) == 0.0f) & ((z - z) == 0.0f);
    double tx = (static_cast<double>(x) - lo0) * inv;
    double ty = (static_cast<double>(y) - lo1) * inv;
    double tz = (static_cast<double>(z) - lo2) * inv;
    tx = tx > 0.0 ? tx : 0.0;
    ty = ty > 0.0 ? ty : 0.0;
    tz = tz > 0.0 ? tz : 0.0;
    tx = tx < m0 ? tx : m0;
    ty = ty < m1 ? ty : m1;
    tz = tz < m2 ? tz : m2;
    const uint32_t c = static_cast<uint32_t>(static_cast<int32_t>(tx)) +
                       static_cast<uint32_t>(static_cast<int32_t>(ty)) * d0 +
                       static_cast<uint32_t>(static_cast<int32_t>(tz)) * d01;
    out[j] = f ? c : kSpecial;
  }
}

template <class T>
void grow(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
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

  const bool packed = pts.stride_dim == 1 && pts.stride_point == 3;
  // 1. Bounding box of the finite points.
  std::vector<double> box(static_cast<size_t>(pieces) * 6);
  std::vector<int64_t> finite_count(pieces, 0);
  parallel_for(ctx, 0, pieces, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      int64_t a, e;
      piece_range(p, a, e);
      float mn[3] = {INFINITY, INFINITY, INFINITY}, mx[3] = {-INFINITY, -INFINITY, -INFINITY};
      int64_t cnt = 0;
      if (packed && e > a) {
        int32_t imn[3], imx[3];
        bbox_packed(&pts.at(b, a, 0), e - a, imn, imx);
        for (int d = 0; d < 3; ++d)
          if (imn[d] <= imx[d]) {
            mn[d] = unordered(imn[d]);
            mx[d] = unordered(imx[d]);
            cnt = 1;  // some finite value (the exact count comes from the histogram)
          }
      }
      for (int64_t j = packed ? e : a; j < e; ++j) {
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
  // nf is an upper estimate here (the packed path only knows some value was finite); the exact
  // count comes from the histogram below.
  for (int d = 0; d < 3; ++d)
    if (!(lo[d] <= hi[d])) lo[d] = hi[d] = 0.0;
  nf = nf > 0 ? n : 0;
  double ext[3], maxabs = 0.0;
  for (int d = 0; d < 3; ++d) {
    ext[d] = hi[d] - lo[d];
    maxabs = std::max({maxabs, std::fabs(lo[d]), std::fabs(hi[d])});
  }
  const double cap = opt.max_cells_per_point * static_cast<double>(std::max<int64_t>(nf, 1)) + 64.0;
  const double target = std::max(1.0, std::min(cap, static_cast<double>(nf) / opt.points_per_cell));

  double h = edge_for_cells(ext, target, opt.min_cell);

  grow(g.scratch_cell, n);
  uint32_t* cid = g.scratch_cell.data();
  std::vector<std::vector<int32_t>>& hist = g.scratch_hist;
  if (static_cast<int64_t>(hist.size()) < pieces) hist.resize(pieces);
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
        grow(hc, g.num_cells);
        std::fill(hc.begin(), hc.begin() + g.num_cells, 0);
        if (packed && e > a) {
          cells_packed(&pts.at(b, a, 0), e - a, g.lo[0], g.lo[1], g.lo[2], g.inv_h,
                       static_cast<double>(g.dims[0] - 1), static_cast<double>(g.dims[1] - 1),
                       static_cast<double>(g.dims[2] - 1), static_cast<uint32_t>(g.dims[0]),
                       static_cast<uint32_t>(g.dims[0] * g.dims[1]), cid + a);
          for (int64_t j = a; j < e; ++j)
            if (cid[j] != kSpecial) ++hc[cid[j]];
          continue;
        }
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
    int64_t total = 0;
    double sq = 0.0;
    for (int64_t c = 0; c < g.num_cells; ++c) {
      int32_t t = 0;
      for (int64_t p = 0; p < pieces; ++p) t += hist[p][c];
      total += t;
      sq += static_cast<double>(t) * t;
    }
    nf = total;
    return total > 0 ? sq / static_cast<double>(total) : 0.0;
  };
  set_edge(h);
  // The cost of a search grows with the occupancy of the cells around a point, i.e. the mean
  // over points of their cell's count. Surfaces, scans and clustered data leave most cells empty
  // and pack the rest: refine (at most twice) towards the target, assuming surface-like scaling
  // (count per cell ~ h^2), within the cell budget.
  double load = assign();
  for (int pass = 0; pass < 2; ++pass) {
    if (!(load > 2.0 * opt.points_per_cell) || h <= opt.min_cell) break;
    double h1 = h * std::sqrt(1.2 * opt.points_per_cell / load);
    h1 = std::max(h1, opt.min_cell);
    if (cells_for(ext, h1) > cap) h1 = edge_for_cells(ext, cap, opt.min_cell);
    if (!(h1 < 0.8 * h)) break;
    h = h1;
    set_edge(h);
    load = assign();
  }

  g.load = load;
  // 3. Offsets: cell_start and the write cursor of every (piece, cell).
  const int64_t C = g.num_cells;
  grow(g.cell_start, C + 1);
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
  g.num_finite = nf;

  // 4. Scatter the indices into cell order (stable), then gather the coordinates: one random
  // 4-byte write per point and independent random reads, instead of four random writes.
  grow(g.x, nf + 1);
  grow(g.y, nf + 1);
  grow(g.z, nf + 1);
  grow(g.id, nf + 1);
  int32_t* perm = g.id.data();
  parallel_for(ctx, 0, pieces, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      int64_t a, e;
      piece_range(p, a, e);
      int32_t* cur = hist[p].data();
      for (int64_t j = a; j < e; ++j) {
        const uint32_t c = cid[j];
        if (c == kSpecial) continue;
        perm[cur[c]++] = static_cast<int32_t>(j);
      }
    }
  });
  float* gx = g.x.data();
  float* gy = g.y.data();
  float* gz = g.z.data();
  parallel_for(ctx, 0, nf, 16384, [&](int64_t i0, int64_t i1) {
    if (packed) {
      const float* base = &pts.at(b, 0, 0);
      for (int64_t i = i0; i < i1; ++i) {
        // The reads are random: prefetch well ahead of use.
        if (i + 32 < i1) __builtin_prefetch(base + 3 * static_cast<int64_t>(perm[i + 32]));
        const float* p = base + 3 * static_cast<int64_t>(perm[i]);
        gx[i] = p[0];
        gy[i] = p[1];
        gz[i] = p[2];
      }
    } else {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t j = perm[i];
        gx[i] = pts.at(b, j, 0);
        gy[i] = pts.at(b, j, 1);
        gz[i] = pts.at(b, j, 2);
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

namespace {

// The filter kernels compute s exactly as the contract does (sub, mul, mul, add, mul, add; no
// FMA: the build uses -ffp-contract=off, which also covers intrinsics).
int filter3_scalar(const float* x, const float* y, const float* z, int n, float qx, float qy,
                   float qz, float limit, bool strict, float* out_s, int32_t* out_i) {
  int cnt = 0;
  for (int i = 0; i < n; ++i) {
    const float dx = qx - x[i], dy = qy - y[i], dz = qz - z[i];
    const float s = (dx * dx + dy * dy) + dz * dz;
    if (strict ? s < limit : s <= limit) {
      out_s[cnt] = s;
      out_i[cnt] = i;
      ++cnt;
    }
  }
  return cnt;
}

__attribute__((target("avx512f")))
int filter3_avx512(const float* x, const float* y, const float* z, int n, float qx, float qy,
                   float qz, float limit, bool strict, float* out_s, int32_t* out_i) {
  const __m512 vqx = _mm512_set1_ps(qx), vqy = _mm512_set1_ps(qy), vqz = _mm512_set1_ps(qz);
  const __m512 vl = _mm512_set1_ps(limit);
  __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i step = _mm512_set1_epi32(16);
  int cnt = 0;
  for (int i = 0; i < n; i += 16) {
    const __mmask16 live = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1u);
    const __m512 dx = _mm512_sub_ps(vqx, _mm512_maskz_loadu_ps(live, x + i));
    const __m512 dy = _mm512_sub_ps(vqy, _mm512_maskz_loadu_ps(live, y + i));
    const __m512 dz = _mm512_sub_ps(vqz, _mm512_maskz_loadu_ps(live, z + i));
    const __m512 sv = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(dx, dx), _mm512_mul_ps(dy, dy)),
                                    _mm512_mul_ps(dz, dz));
    const __mmask16 m = strict ? _mm512_mask_cmp_ps_mask(live, sv, vl, _CMP_LT_OQ)
                               : _mm512_mask_cmp_ps_mask(live, sv, vl, _CMP_LE_OQ);
    if (m) {
      // Compress in registers, then a full store (Zen 4 compress-to-memory is slow).
      _mm512_storeu_ps(out_s + cnt, _mm512_maskz_compress_ps(m, sv));
      _mm512_storeu_si512(out_i + cnt, _mm512_maskz_compress_epi32(m, idx));
      cnt += __builtin_popcount(m);
    }
    idx = _mm512_add_epi32(idx, step);
  }
  return cnt;
}

__attribute__((target("avx2")))
int filter3_avx2(const float* x, const float* y, const float* z, int n, float qx, float qy,
                 float qz, float limit, bool strict, float* out_s, int32_t* out_i) {
  const __m256 vqx = _mm256_set1_ps(qx), vqy = _mm256_set1_ps(qy), vqz = _mm256_set1_ps(qz);
  const __m256 vl = _mm256_set1_ps(limit);
  int cnt = 0, i = 0;
  alignas(32) float sb[8];
  for (; i + 8 <= n; i += 8) {
    const __m256 dx = _mm256_sub_ps(vqx, _mm256_loadu_ps(x + i));
    const __m256 dy = _mm256_sub_ps(vqy, _mm256_loadu_ps(y + i));
    const __m256 dz = _mm256_sub_ps(vqz, _mm256_loadu_ps(z + i));
    const __m256 sv = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(dx, dx), _mm256_mul_ps(dy, dy)),
                                    _mm256_mul_ps(dz, dz));
    unsigned m = static_cast<unsigned>(_mm256_movemask_ps(
        strict ? _mm256_cmp_ps(sv, vl, _CMP_LT_OQ) : _mm256_cmp_ps(sv, vl, _CMP_LE_OQ)));
    if (m) {
      _mm256_store_ps(sb, sv);
      while (m) {
        const int b = __builtin_ctz(m);
        m &= m - 1;
        out_s[cnt] = sb[b];
        out_i[cnt] = i + b;
        ++cnt;
      }
    }
  }
  const int tail = filter3_scalar(x + i, y + i, z + i, n - i, qx, qy, qz, limit, strict,
                                  out_s + cnt, out_i + cnt);
  for (int t = 0; t < tail; ++t) out_i[cnt + t] += i;
  return cnt + tail;
}

int filter_le_scalar(const float* s, int n, float limit, float* out_s, int32_t* out_i) {
  int cnt = 0;
  for (int i = 0; i < n; ++i) {
    out_s[cnt] = s[i];
    out_i[cnt] = i;
    cnt += s[i] <= limit;
  }
  return cnt;
}

__attribute__((target("avx512f")))
int filter_le_avx512(const float* s, int n, float limit, float* out_s, int32_t* out_i) {
  const __m512 vl = _mm512_set1_ps(limit);
  __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i step = _mm512_set1_epi32(16);
  int cnt = 0;
  for (int i = 0; i < n; i += 16) {
    const __mmask16 live = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1u);
    const __m512 sv = _mm512_maskz_loadu_ps(live, s + i);
    const __mmask16 m = _mm512_mask_cmp_ps_mask(live, sv, vl, _CMP_LE_OQ);
    if (m) {
      _mm512_storeu_ps(out_s + cnt, _mm512_maskz_compress_ps(m, sv));
      _mm512_storeu_si512(out_i + cnt, _mm512_maskz_compress_epi32(m, idx));
      cnt += __builtin_popcount(m);
    }
    idx = _mm512_add_epi32(idx, step);
  }
  return cnt;
}

using FilterLe = int (*)(const float*, int, float, float*, int32_t*);

using Filter3 = int (*)(const float*, const float*, const float*, int, float, float, float, float,
                        bool, float*, int32_t*);

Filter3 pick_filter3() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return filter3_avx512;
  if (__builtin_cpu_supports("avx2")) return filter3_avx2;
  return filter3_scalar;
}

}  // namespace

int filter_le(const float* s, int n, float limit, float* out_s, int32_t* out_i) {
  static const FilterLe impl = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") ? filter_le_avx512 : filter_le_scalar;
  }();
  return impl(s, n, limit, out_s, out_i);
}

int filter3(const float* x, const float* y, const float* z, int n, float qx, float qy, float qz,
            float limit, bool strict, float* out_s, int32_t* out_i) {
  static const Filter3 impl = pick_filter3();
  return impl(x, y, z, n, qx, qy, qz, limit, strict, out_s, out_i);
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
