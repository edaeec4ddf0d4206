// CUDA ragged radius search (torch_cluster's radius); bitwise equal to the CPU backend
// (src/cpu/radius.cpp): per query the first max_num_neighbors references j of its cloud, in index
// order, with s < R2 (strict, NaN never matches), R2 = fl32(r * r) with the product in double.
//
// Count-then-fill: a counting pass writes c_i = min(cap, matches) per query, CUB scans c into
// edge offsets, one synchronisation reads E back, allocate(E), and a fill pass writes the edges.
// Paths, chosen per cloud on the host (offsets are host memory) and per query on the device:
// - spatial index (3-D, finite R2, cap <= 32, a cloud of >= 100k references queried densely: the
//   dense operators' rule, detail::IndexRoute; PCOPS_CUDA_RADIUS_INDEX=always|never overrides):
//   a SpatialIndex of the cloud built for the call, whose ball_query_below gives each query its
//   cap smallest matching local indices in ascending order before the counting pass, the query's
//   own row excluded there with ignore_same_index (reference row == query row, as everywhere
//   here): its edges. The counting and fill passes read them, one warp per query, a lane per slot.
// - ordered scan (D != 3, R2 = +inf, clouds under RadiusPolicy::kGridMinPoints): one warp per
//   query walks its cloud in index order and stops at the cap; exact by construction.
// - uniform grid (3-D, finite R2): all grid clouds in one build (bounding box by integer
//   atomics, cells of edge >= the padded radius, a counting sort of the finite points into cell
//   order as float4 (x, y, z, local index)); one warp per query filters the 3x3x3 cells around
//   it. The counting pass stops at cap + 1 matches. The fill pass keeps the cap smallest
//   matching indices in a per-warp shared-memory buffer (cap <= kMaxBufCap; bitonic-sorted when
//   full, then later candidates must beat the cap-th index). A saturated query whose 27 cells
//   hold a large part of its cloud (the grid cannot prune) takes the ordered scan instead, which
//   stops at the cap. With cap > kMaxBufCap, unsaturated queries write their matches unordered
//   and a CUB segmented sort orders every query's segment; saturated ones take the ordered scan.
// Deterministic: the in-cell order that the integer atomics produce changes which point is seen
// first, never the result (the selection is by index, a total order).
#include <cub/cub.cuh>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/distance.hpp"
#include "cuda/common.cuh"
#include "cuda/primitives/ragged.cuh"
#include "pcops/error.hpp"
#include "pcops/radius.hpp"
#include "pcops/spatial_index.hpp"

namespace pcops::cuda {
namespace {

using primitives::cloud_of;
using primitives::FlatPoints;

struct RadiusPolicy {
  static constexpr int kWarpsPerBlock = 4;      // query kernels
  static constexpr int kThreads = 256;          // build and elementwise kernels
  static constexpr int64_t kGridMinPoints = 128;
  static constexpr int64_t kCellsPerPoint = 2;  // cell budget of a cloud: 2 n + 64
  static constexpr int64_t kExtraCells = 64;
  static constexpr double kMaxDim = 2097152.0;  // cells per axis: keeps cell coordinates exact
  static constexpr double kMargin = 1e-5;       // radius padding of the cell edge
  static constexpr double kTiny = 1e-30;        // covers the underflow error of s
  static constexpr int64_t kMaxBufCap = 1024;   // larger caps: unordered fill + segmented sort
                                                // (buffer: 2 * 1024 indices = 8 KiB per warp)
  static constexpr int64_t kOrderedShare = 4;   // saturated query: ordered scan when 4 * cand >= n
  static constexpr int64_t kMaxBlocksX = 4096;  // build kernels, per cloud
};

constexpr unsigned kFull = 0xFFFFFFFFu;
enum Mode : int8_t { kNone = 0, kOrdered = 1, kGrid = 2, kIndex = 3 };
enum Sat : int8_t { kFits = 0, kSatGrid = 1, kSatOrdered = 2 };

__device__ __forceinline__ bool finite3(float a, float b, float c) {
  return isfinite(a) && isfinite(b) && isfinite(c);
}

// float <-> uint32 with unsigned order equal to float order (finite values only here).
__device__ __forceinline__ unsigned ordered_bits(float f) {
  const unsigned u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float from_ordered_bits(unsigned u) {
  return __uint_as_float((u & 0x80000000u) ? (u & 0x7FFFFFFFu) : ~u);
}

struct GridParams {
  double lo[3];
  double inv_h;  // cells per unit length
  int64_t dims[3];
  int64_t cell_off;
  int has_points;  // 0: no finite point, nothing matches
  int reserved;
};

// Per-cloud tables (device copies of host data).
struct Tables {
  const int64_t* xoff;  // B + 1 reference offsets
  const int64_t* yoff;  // B + 1 query offsets
  const int8_t* mode;   // Mode per cloud
  int64_t B;
};

// The spatial-index route's matches: cloud b's query q (local) has its K slots at
// idx[off[b] + q * K, + K), local reference indices ascending, -1 after the last match.
struct IndexHits {
  const int64_t* idx;
  const int64_t* off;  // per cloud (kIndex clouds only)
  int64_t K;
};

// Cell coordinate along one axis, in double: monotone in v and accurate enough (dims <= 2^21,
// relative error ~2^-52) that two values closer than the cell edge / (1 + 1e-5) never land two
// cells apart. The same function serves points and queries.
__device__ __forceinline__ double cell_coord(float v, double lo, double inv_h) {
  return floor((static_cast<double>(v) - lo) * inv_h);
}

// ------------------------------------------------------------------------------------------------
// Grid build

// Bounding box of the finite points of each grid cloud: blockIdx.y strides over clouds, the x
// blocks over its points; warp min/max then one integer atomic per warp and axis.
__global__ void bbox_kernel(FlatPoints x, Tables t, unsigned* __restrict__ bmin,
                            unsigned* __restrict__ bmax) {
  for (int64_t b = blockIdx.y; b < t.B; b += gridDim.y) {
    if (t.mode[b] != kGrid) continue;  // uniform across the block
    const int64_t x0 = t.xoff[b], n = t.xoff[b + 1] - x0;
    unsigned mn[3] = {kFull, kFull, kFull}, mx[3] = {0u, 0u, 0u};
    for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < n;
         j += int64_t{gridDim.x} * blockDim.x) {
      const float v[3] = {x.at(x0 + j, 0), x.at(x0 + j, 1), x.at(x0 + j, 2)};
      if (!finite3(v[0], v[1], v[2])) continue;
      for (int a = 0; a < 3; ++a) {
        mn[a] = min(mn[a], ordered_bits(v[a]));
        mx[a] = max(mx[a], ordered_bits(v[a]));
      }
    }
    for (int a = 0; a < 3; ++a) {
      mn[a] = __reduce_min_sync(kFull, mn[a]);
      mx[a] = __reduce_max_sync(kFull, mx[a]);
    }
    if ((threadIdx.x & 31) == 0 && mn[0] <= mx[0]) {
      for (int a = 0; a < 3; ++a) {
        atomicMin(&bmin[3 * b + a], mn[a]);
        atomicMax(&bmax[3 * b + a], mx[a]);
      }
    }
  }
}

// Cell edge h >= rr (3x3x3 cells cover every match) within the cloud's cell budget. One thread
// per cloud.
__global__ void params_kernel(Tables t, const unsigned* __restrict__ bmin,
                              const unsigned* __restrict__ bmax, const int64_t* __restrict__ cell_off,
                              double rr, GridParams* __restrict__ out) {
  const int64_t b = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (b >= t.B || t.mode[b] != kGrid) return;
  GridParams g{};
  g.cell_off = cell_off[b];
  g.inv_h = 1.0;
  g.dims[0] = g.dims[1] = g.dims[2] = 1;
  g.has_points = bmin[3 * b] <= bmax[3 * b] ? 1 : 0;
  if (g.has_points) {
    double ext[3];
    for (int a = 0; a < 3; ++a) {
      g.lo[a] = static_cast<double>(from_ordered_bits(bmin[3 * b + a]));
      ext[a] = static_cast<double>(from_ordered_bits(bmax[3 * b + a])) - g.lo[a];
    }
    const double cap = static_cast<double>(cell_off[b + 1] - cell_off[b]);
    double h = rr;
    for (int a = 0; a < 3; ++a) h = fmax(h, ext[a] / (RadiusPolicy::kMaxDim - 1.0));
    h = fmax(h, cbrt(ext[0] * ext[1] * ext[2] / cap));
    for (;;) {
      double cells = 1.0;
      const double inv = 1.0 / h;
      for (int a = 0; a < 3; ++a) cells *= floor(ext[a] * inv) + 1.0;
      if (cells <= cap) break;
      h *= 1.25;
    }
    g.inv_h = 1.0 / h;
    for (int a = 0; a < 3; ++a) g.dims[a] = static_cast<int64_t>(floor(ext[a] * g.inv_h)) + 1;
  } else {
    g.lo[0] = g.lo[1] = g.lo[2] = 0.0;
  }
  out[b] = g;
}

// Cell and in-cell rank of every finite point of the grid clouds (-1: non-finite, never
// matches). Ranks by integer atomics aggregated over the lanes of a warp that hit the same cell
// (duplicate-heavy clouds would otherwise serialise on one counter). blockIdx.y strides over
// clouds; warps take 32 consecutive points.
__global__ void hist_kernel(FlatPoints x, Tables t, const GridParams* __restrict__ params,
                            unsigned long long* __restrict__ counts, int64_t* __restrict__ cell_of,
                            int* __restrict__ rank_of) {
  const int lane = threadIdx.x & 31;
  for (int64_t b = blockIdx.y; b < t.B; b += gridDim.y) {
    if (t.mode[b] != kGrid) continue;
    const int64_t x0 = t.xoff[b], n = t.xoff[b + 1] - x0;
    const GridParams g = params[b];
    const int64_t stride = int64_t{gridDim.x} * blockDim.x;
    for (int64_t j0 = blockIdx.x * int64_t{blockDim.x} + (threadIdx.x & ~31u); j0 < n; j0 += stride) {
      const int64_t j = j0 + lane;
      long long cell = -1;
      if (j < n) {
        const float v[3] = {x.at(x0 + j, 0), x.at(x0 + j, 1), x.at(x0 + j, 2)};
        if (finite3(v[0], v[1], v[2])) {
          int64_t c[3];
          for (int a = 0; a < 3; ++a) {
            const double tc = fmin(fmax(cell_coord(v[a], g.lo[a], g.inv_h), 0.0),
                                   static_cast<double>(g.dims[a] - 1));
            c[a] = static_cast<int64_t>(tc);
          }
          cell = g.cell_off + (c[2] * g.dims[1] + c[1]) * g.dims[0] + c[0];
        }
      }
      const unsigned peers = __match_any_sync(kFull, cell);
      const int leader = __ffs(peers) - 1;
      unsigned long long r = 0;
      if (cell >= 0 && lane == leader) r = atomicAdd(&counts[cell], static_cast<unsigned long long>(__popc(peers)));
      r = __shfl_sync(kFull, r, leader) + __popc(peers & ((1u << lane) - 1u));
      if (j < n) {
        cell_of[x0 + j] = cell;
        rank_of[x0 + j] = static_cast<int>(r);
      }
    }
  }
}

// Points into cell order. One thread per reference row (grid-stride).
__global__ void scatter_kernel(FlatPoints x, int64_t N, const int64_t* __restrict__ xoff, int64_t B,
                               const int64_t* __restrict__ cell_of, const int* __restrict__ rank_of,
                               const unsigned long long* __restrict__ start, float4* __restrict__ pts) {
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < N;
       p += int64_t{gridDim.x} * blockDim.x) {
    const int64_t cell = cell_of[p];
    if (cell < 0) continue;
    const int64_t j = p - xoff[cloud_of(xoff, B, p)];
    const int64_t pos = static_cast<int64_t>(start[cell]) + rank_of[p];
    pts[pos] = make_float4(x.at(p, 0), x.at(p, 1), x.at(p, 2),
                           __uint_as_float(static_cast<uint32_t>(j)));
  }
}

// Marks every cell_of entry as "no cell" (clouds that are not on the grid keep it).
__global__ void fill_int64_kernel(int64_t* __restrict__ v, int64_t n, int64_t value) {
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < n;
       p += int64_t{gridDim.x} * blockDim.x)
    v[p] = value;
}

// ------------------------------------------------------------------------------------------------
// Query side

struct Query {
  int64_t i;   // global query row
  int64_t x0;  // first reference row of its cloud
  int64_t n;   // references in its cloud
  float q[3];
};

template <bool kDim3>
__device__ __forceinline__ bool matches(const FlatPoints& x, const FlatPoints& y, const Query& qq,
                                        int64_t D, int64_t j, float R2, bool ignore_same) {
  if (ignore_same && qq.x0 + j == qq.i) return false;
  float s;
  if constexpr (kDim3)
    s = common::squared_distance3(qq.q[0], qq.q[1], qq.q[2], x.at(qq.x0 + j, 0), x.at(qq.x0 + j, 1),
                                  x.at(qq.x0 + j, 2));
  else
    s = common::squared_distance(y.row(qq.i), y.sd, x.row(qq.x0 + j), x.sd, D);
  return s < R2;
}

// Ordered scan, counting: matches in index order, stopping once more than `limit` are found.
template <bool kDim3>
__device__ int64_t ordered_count(const FlatPoints& x, const FlatPoints& y, const Query& qq, int64_t D,
                                 float R2, bool ignore_same, int64_t limit) {
  const int lane = threadIdx.x & 31;
  int64_t count = 0;
  for (int64_t j0 = 0; j0 < qq.n && count <= limit; j0 += 32) {
    const int64_t j = j0 + lane;
    const bool ok = j < qq.n && matches<kDim3>(x, y, qq, D, j, R2, ignore_same);
    count += __popc(__ballot_sync(kFull, ok));
  }
  return count;
}

// Ordered scan, filling: the first c matches in index order to out1 / row0 at [o, o + c).
template <bool kDim3>
__device__ void ordered_fill(const FlatPoints& x, const FlatPoints& y, const Query& qq, int64_t D,
                             float R2, bool ignore_same, int64_t c, int64_t o,
                             int64_t* __restrict__ row0, int64_t* __restrict__ out1) {
  const int lane = threadIdx.x & 31;
  const unsigned lt = (1u << lane) - 1u;
  int64_t written = 0;
  for (int64_t j0 = 0; j0 < qq.n && written < c; j0 += 32) {
    const int64_t j = j0 + lane;
    const bool ok = j < qq.n && matches<kDim3>(x, y, qq, D, j, R2, ignore_same);
    const unsigned msk = __ballot_sync(kFull, ok);
    const int64_t pos = written + __popc(msk & lt);
    if (ok && pos < c) {
      out1[o + pos] = qq.x0 + j;
      row0[o + pos] = qq.i;
    }
    written += __popc(msk);
  }
}

// The 3x3x3 cell block around a finite query: rows [z][y] of x-runs [c0x, c1x].
struct Block {
  int64_t c0[3], c1[3];
};

__device__ __forceinline__ Block block_of(const GridParams& g, const float q[3]) {
  Block k;
#pragma unroll
  for (int a = 0; a < 3; ++a) {
    const double t = fmin(fmax(cell_coord(q[a], g.lo[a], g.inv_h), -2.0),
                          static_cast<double>(g.dims[a] + 1));
    const int64_t c = static_cast<int64_t>(t);
    k.c0[a] = c - 1 > 0 ? c - 1 : 0;
    k.c1[a] = c + 1 < g.dims[a] - 1 ? c + 1 : g.dims[a] - 1;
  }
  return k;
}

// Visits the candidates of the block 32 at a time: fn(ok, j) is warp-collective (ok: the lane
// holds a match with local index j) and returns true to stop.
template <class Fn>
__device__ __forceinline__ void grid_visit(const GridParams& g, const Block& k,
                                           const unsigned long long* __restrict__ start,
                                           const float4* __restrict__ pts, const Query& qq,
                                           float R2, bool ignore_same, Fn&& fn) {
  const int lane = threadIdx.x & 31;
  for (int64_t z = k.c0[2]; z <= k.c1[2]; ++z) {
    for (int64_t yy = k.c0[1]; yy <= k.c1[1]; ++yy) {
      const int64_t row = g.cell_off + (z * g.dims[1] + yy) * g.dims[0];
      const int64_t p1 = static_cast<int64_t>(start[row + k.c1[0] + 1]);
      for (int64_t p0 = static_cast<int64_t>(start[row + k.c0[0]]); p0 < p1; p0 += 32) {
        const int64_t p = p0 + lane;
        bool ok = false;
        uint32_t j = 0;
        if (p < p1) {
          const float4 v = __ldg(pts + p);
          j = __float_as_uint(v.w);
          const float s = common::squared_distance3(qq.q[0], qq.q[1], qq.q[2], v.x, v.y, v.z);
          ok = s < R2 && !(ignore_same && qq.x0 + j == qq.i);
        }
        if (fn(ok, j)) return;
      }
    }
  }
}

// Points in the block (upper bound of the grid's work for the query).
__device__ __forceinline__ int64_t grid_candidates(const GridParams& g, const Block& k,
                                                   const unsigned long long* __restrict__ start) {
  int64_t c = 0;
  for (int64_t z = k.c0[2]; z <= k.c1[2]; ++z)
    for (int64_t yy = k.c0[1]; yy <= k.c1[1]; ++yy) {
      const int64_t row = g.cell_off + (z * g.dims[1] + yy) * g.dims[0];
      c += static_cast<int64_t>(start[row + k.c1[0] + 1] - start[row + k.c0[0]]);
    }
  return c;
}

__device__ __forceinline__ Query load_query(const FlatPoints& x, const FlatPoints& y, const Tables& t,
                                            int64_t i, int64_t& b, bool is3) {
  b = cloud_of(t.yoff, t.B, i);
  Query qq;
  qq.i = i;
  qq.x0 = t.xoff[b];
  qq.n = t.xoff[b + 1] - qq.x0;
  qq.q[0] = qq.q[1] = qq.q[2] = 0.0f;
  if (is3) {
    qq.q[0] = y.at(i, 0);
    qq.q[1] = y.at(i, 1);
    qq.q[2] = y.at(i, 2);
  }
  return qq;
}

// Slot `lane` of query qq's index row: whether it holds a match, and its local index j (-1 past
// K or past the row's matches). The index never returns the query's own row (skip_offset).
__device__ __forceinline__ bool index_slot(const IndexHits& h, const Tables& t, const Query& qq, int64_t b,
                                           int64_t& j) {
  const int lane = threadIdx.x & 31;
  j = lane < h.K ? h.idx[h.off[b] + (qq.i - t.yoff[b]) * h.K + lane] : -1;
  return j >= 0;
}

// Counting pass. One warp per query (grid-stride over all query rows): cnt[i] = min(cap, matches),
// sat[i] says whether there are more than cap matches and which fill takes the query (kFits for
// the index route's queries: their fill reads the index row whatever the count).
template <bool kDim3>
__global__ void __launch_bounds__(RadiusPolicy::kWarpsPerBlock * 32)
    count_kernel(FlatPoints x, FlatPoints y, int64_t M, int64_t D, Tables t,
                 const GridParams* __restrict__ params, const unsigned long long* __restrict__ start,
                 const float4* __restrict__ pts, IndexHits hits, float R2, int64_t cap,
                 bool ignore_same, int64_t* __restrict__ cnt, int8_t* __restrict__ sat) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t{gridDim.x} * RadiusPolicy::kWarpsPerBlock;
  for (int64_t i = blockIdx.x * int64_t{RadiusPolicy::kWarpsPerBlock} + (threadIdx.x >> 5); i < M;
       i += warps) {
    int64_t b;
    const Query qq = load_query(x, y, t, i, b, kDim3);
    const int8_t mode = t.mode[b];
    int64_t count = 0;
    int8_t s = kFits;
    if (mode == kOrdered && qq.n > 0) {
      count = ordered_count<kDim3>(x, y, qq, D, R2, ignore_same, cap);
      s = count > cap ? kSatOrdered : kFits;
    } else if (kDim3 && mode == kIndex) {
      // The row's matches (never the own row): at most K = cap.
      int64_t j;
      count = __popc(__ballot_sync(kFull, index_slot(hits, t, qq, b, j)));
    } else if (kDim3 && mode == kGrid) {
      const GridParams g = params[b];
      // R2 is finite here: a non-finite query matches nothing, and nor does a cloud without a
      // finite point.
      if (g.has_points && finite3(qq.q[0], qq.q[1], qq.q[2])) {
        const Block k = block_of(g, qq.q);
        grid_visit(g, k, start, pts, qq, R2, ignore_same, [&](bool ok, uint32_t) {
          count += __popc(__ballot_sync(kFull, ok));
          return count > cap;
        });
        if (count > cap)
          s = (cap > RadiusPolicy::kMaxBufCap ||
               RadiusPolicy::kOrderedShare * grid_candidates(g, k, start) >= qq.n)
                  ? kSatOrdered
                  : kSatGrid;
      }
    }
    if (lane == 0) {
      cnt[i] = count < cap ? count : cap;
      sat[i] = s;
    }
  }
}

// Sorts buf[0, count) ascending, padding to a power of two (>= 32, <= capacity) with ~0.
__device__ __forceinline__ void warp_sort(uint32_t* buf, int count, int lane) {
  int L = 32;
  while (L < count) L <<= 1;
  for (int t = count + lane; t < L; t += 32) buf[t] = kFull;
  __syncwarp();
  for (int k = 2; k <= L; k <<= 1) {
    for (int jj = k >> 1; jj > 0; jj >>= 1) {
      for (int t = lane; t < (L >> 1); t += 32) {
        const int a = 2 * t - (t & (jj - 1)), c = a + jj;
        const uint32_t va = buf[a], vc = buf[c];
        if ((va > vc) == ((a & k) == 0)) {
          buf[a] = vc;
          buf[c] = va;
        }
      }
      __syncwarp();
    }
  }
}

// Fill pass. One warp per query, edges at [off[i], off[i] + cnt[i]). capacity > 0: the grid
// queries select through a shared-memory buffer of `capacity` (= 2 * pow2 >= max(cap, 32))
// local indices per warp; capacity == 0: unsaturated grid queries write unordered (a segmented
// sort follows). Index-route queries take their row's slots, one per lane.
template <bool kDim3>
__global__ void __launch_bounds__(RadiusPolicy::kWarpsPerBlock * 32)
    fill_kernel(FlatPoints x, FlatPoints y, int64_t M, int64_t D, Tables t,
                const GridParams* __restrict__ params, const unsigned long long* __restrict__ start,
                const float4* __restrict__ pts, IndexHits hits, float R2, int64_t cap,
                bool ignore_same, const int64_t* __restrict__ cnt, const int8_t* __restrict__ sat,
                const int64_t* __restrict__ off, int capacity, int64_t* __restrict__ row0,
                int64_t* __restrict__ out1) {
  extern __shared__ uint32_t smem32[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned lt = (1u << lane) - 1u;
  uint32_t* buf = smem32 + static_cast<int64_t>(warp) * capacity;
  const int64_t warps = int64_t{gridDim.x} * RadiusPolicy::kWarpsPerBlock;
  for (int64_t i = blockIdx.x * int64_t{RadiusPolicy::kWarpsPerBlock} + warp; i < M; i += warps) {
    const int64_t c = cnt[i];
    if (c == 0) continue;
    int64_t b;
    const Query qq = load_query(x, y, t, i, b, kDim3);
    const int64_t o = off[i];
    const int8_t s = sat[i];
    if (kDim3 && t.mode[b] == kIndex) {  // the first c slots, in order
      int64_t j;
      const bool ok = index_slot(hits, t, qq, b, j);
      const int64_t pos = __popc(__ballot_sync(kFull, ok) & lt);
      if (ok && pos < c) {
        out1[o + pos] = qq.x0 + j;
        row0[o + pos] = qq.i;
      }
      continue;
    }
    if (!kDim3 || t.mode[b] == kOrdered || s == kSatOrdered) {
      ordered_fill<kDim3>(x, y, qq, D, R2, ignore_same, c, o, row0, out1);
      continue;
    }
    const GridParams g = params[b];
    const Block k = block_of(g, qq.q);
    if (capacity == 0) {  // unsaturated: every match is an edge
      int64_t written = 0;
      grid_visit(g, k, start, pts, qq, R2, ignore_same, [&](bool ok, uint32_t j) {
        const unsigned msk = __ballot_sync(kFull, ok);
        if (ok) {
          const int64_t pos = o + written + __popc(msk & lt);
          out1[pos] = qq.x0 + j;
          row0[pos] = qq.i;
        }
        written += __popc(msk);
        return false;
      });
      continue;
    }
    int count = 0;
    uint32_t thr = kFull;  // candidates need local index < thr
    const int kcap = static_cast<int>(cap < capacity ? cap : capacity);
    grid_visit(g, k, start, pts, qq, R2, ignore_same, [&](bool ok, uint32_t j) {
      ok = ok && j < thr;
      unsigned msk = __ballot_sync(kFull, ok);
      if (count + __popc(msk) > capacity) {
        warp_sort(buf, count, lane);
        count = kcap;
        thr = buf[kcap - 1];
        ok = ok && j < thr;
        msk = __ballot_sync(kFull, ok);
      }
      if (ok) buf[count + __popc(msk & lt)] = j;
      count += __popc(msk);
      __syncwarp();
      return false;
    });
    __syncwarp();
    warp_sort(buf, count, lane);
    for (int64_t e = lane; e < c; e += 32) {
      out1[o + e] = qq.x0 + buf[e];
      row0[o + e] = qq.i;
    }
    __syncwarp();  // buf is reused by the warp's next query
  }
}

int64_t pow2_at_least(int64_t v) {
  int64_t p = 32;
  while (p < v) p <<= 1;
  return p;
}

dim3 flat_grid(int64_t items, int threads) {
  return dim3(static_cast<unsigned>(primitives::blocks_for(items, threads)));
}

}  // namespace

int64_t radius(const CudaContext& ctx, RaggedPointsView x, RaggedPointsView y, OffsetsView ptr_x,
               OffsetsView ptr_y, const RadiusParams& params, const EdgeAllocator& allocate) {
  core::validate_radius(x, y, ptr_x, ptr_y, params);
  const float R2 = core::radius_threshold(params.r);
  const int64_t cap = params.max_num_neighbors, M = y.count, N = x.count, B = ptr_x.batch();
  const int64_t D = x.dim;
  const bool ignore_same = params.ignore_same_index;
  if (cap == 0 || M == 0 || N == 0 || !(R2 > 0.0f)) {  // s < R2 <= 0 never holds
    allocate(0);
    return 0;
  }
  const cudaStream_t stream = detail::stream_of(ctx);
  detail::Workspace ws(ctx);
  constexpr int T = RadiusPolicy::kThreads;

  // Paths per cloud, the grid's cell budget and the index route's slots.
  const bool is3 = D == 3;
  const bool grid_ok = is3 && std::isfinite(R2);
  // The index rows' width: cap (> 32: no route; clamped against overflow).
  const int64_t width = std::min<int64_t>(cap, 33);
  std::vector<int8_t> mode(static_cast<size_t>(B), kNone);
  std::vector<int64_t> cell_off(static_cast<size_t>(B) + 1, 0);
  std::vector<int64_t> hit_off(static_cast<size_t>(B), 0);
  int64_t max_grid_n = 0, total_hits = 0, max_hits = 0;
  bool any_grid = false;
  const detail::IndexRoute index_route("PCOPS_CUDA_RADIUS_INDEX");
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = ptr_x.length(b), m = ptr_y.length(b);
    int64_t cells = 0;
    if (n > 0 && m > 0) {
      if (grid_ok && m < (int64_t{1} << 31) && index_route(width, m, n)) {
        mode[b] = kIndex;
        hit_off[b] = total_hits;
        total_hits += m * width;
        max_hits = std::max(max_hits, m * width);
      } else if (grid_ok && n >= RadiusPolicy::kGridMinPoints && n < (int64_t{1} << 31)) {
        mode[b] = kGrid;
        cells = RadiusPolicy::kCellsPerPoint * n + RadiusPolicy::kExtraCells;
        max_grid_n = std::max(max_grid_n, n);
        any_grid = true;
      } else {
        mode[b] = kOrdered;
      }
    }
    cell_off[b + 1] = cell_off[b] + cells;
  }
  const int64_t total_cells = cell_off[static_cast<size_t>(B)];
  const std::vector<int64_t> xo(ptr_x.data, ptr_x.data + B + 1), yo(ptr_y.data, ptr_y.data + B + 1);
  const Tables tab{primitives::upload(ctx, ws, xo), primitives::upload(ctx, ws, yo),
                   primitives::upload(ctx, ws, mode), B};
  const FlatPoints fx = primitives::flat_points(x), fy = primitives::flat_points(y);

  // Index route: per cloud, a SpatialIndex of its references and the K = width smallest matching
  // local indices of each of its queries (the distances are not needed: one buffer serves all).
  IndexHits hits{nullptr, nullptr, width};
  if (total_hits > 0) {
    int64_t* idx = ws.alloc<int64_t>(total_hits);
    float* dist2 = ws.alloc<float>(max_hits);
    const CudaContext c = detail::stream_ordered(ctx);  // the index's memory as workspace
    for (int64_t b = 0; b < B; ++b) {
      if (mode[b] != kIndex) continue;
      SpatialIndex index;
      index.build(c, primitives::cloud_points(x, ptr_x.begin(b), ptr_x.length(b)), LengthsView{},
                  SpatialIndexParams{});
      index.ball_query_below(c, primitives::cloud_points(y, ptr_y.begin(b), ptr_y.length(b)), LengthsView{}, R2,
                             width, dist2, idx + hit_off[b],
                             ignore_same ? ptr_y.begin(b) - ptr_x.begin(b) : SpatialIndex::kNoSkip);
    }
    hits.idx = idx;
    hits.off = primitives::upload(ctx, ws, hit_off);
  }

  // Grid build.
  GridParams* gp = nullptr;
  unsigned long long* start = nullptr;
  float4* pts = nullptr;
  if (any_grid) {
    unsigned* bmin = ws.alloc<unsigned>(3 * B);
    unsigned* bmax = ws.alloc<unsigned>(3 * B);
    PCOPS_CUDA_CHECK(cudaMemsetAsync(bmin, 0xFF, static_cast<size_t>(3 * B) * sizeof(unsigned), stream));
    PCOPS_CUDA_CHECK(cudaMemsetAsync(bmax, 0x00, static_cast<size_t>(3 * B) * sizeof(unsigned), stream));
    const dim3 pgrid(static_cast<unsigned>(primitives::blocks_for(max_grid_n, T, RadiusPolicy::kMaxBlocksX)),
                     static_cast<unsigned>(std::min<int64_t>(B, 65535)));
    detail::launch(ctx, bbox_kernel, pgrid, dim3(T), 0, fx, tab, bmin, bmax);
    // Every match has exact distance below rr: s is within a relative 1e-6 of the exact squared
    // distance, up to an absolute underflow error far below kTiny.
    const double rr = std::sqrt(static_cast<double>(R2) + RadiusPolicy::kTiny) * (1.0 + RadiusPolicy::kMargin);
    const int64_t* d_cell_off = primitives::upload(ctx, ws, cell_off);
    gp = ws.alloc<GridParams>(B);
    detail::launch(ctx, params_kernel, dim3(static_cast<unsigned>(detail::ceil_div(B, 128))), dim3(128),
                   0, tab, bmin, bmax, d_cell_off, rr, gp);
    unsigned long long* counts = ws.alloc<unsigned long long>(total_cells + 1);
    start = ws.alloc<unsigned long long>(total_cells + 1);
    PCOPS_CUDA_CHECK(cudaMemsetAsync(counts, 0, static_cast<size_t>(total_cells + 1) * sizeof(unsigned long long), stream));
    int64_t* cell_of = ws.alloc<int64_t>(N);
    int* rank_of = ws.alloc<int>(N);
    detail::launch(ctx, fill_int64_kernel, flat_grid(N, T), dim3(T), 0, cell_of, N, int64_t{-1});
    detail::launch(ctx, hist_kernel, pgrid, dim3(T), 0, fx, tab, gp, counts, cell_of, rank_of);
    size_t temp_bytes = 0;
    PCOPS_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, temp_bytes, counts, start, total_cells + 1, stream));
    void* temp = ws.bytes(temp_bytes);
    PCOPS_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(temp, temp_bytes, counts, start, total_cells + 1, stream));
    pts = ws.alloc<float4>(N);
    detail::launch(ctx, scatter_kernel, flat_grid(N, T), dim3(T), 0, fx, N, tab.xoff, B, cell_of,
                   rank_of, start, pts);
  }

  // Counting pass and edge offsets.
  int64_t* cnt = ws.alloc<int64_t>(M + 1);
  int8_t* sat = ws.alloc<int8_t>(M);
  int64_t* off = ws.alloc<int64_t>(M + 1);
  PCOPS_CUDA_CHECK(cudaMemsetAsync(cnt + M, 0, sizeof(int64_t), stream));
  const dim3 qgrid(static_cast<unsigned>(primitives::blocks_for(M, RadiusPolicy::kWarpsPerBlock)));
  const dim3 qblock(RadiusPolicy::kWarpsPerBlock * 32);
  if (is3)
    detail::launch(ctx, count_kernel<true>, qgrid, qblock, 0, fx, fy, M, D, tab, gp, start, pts, hits,
                   R2, cap, ignore_same, cnt, sat);
  else
    detail::launch(ctx, count_kernel<false>, qgrid, qblock, 0, fx, fy, M, D, tab, gp, start, pts, hits,
                   R2, cap, ignore_same, cnt, sat);
  {
    size_t temp_bytes = 0;
    PCOPS_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, temp_bytes, cnt, off, M + 1, stream));
    void* temp = ws.bytes(temp_bytes);
    PCOPS_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(temp, temp_bytes, cnt, off, M + 1, stream));
  }
  int64_t E = 0;
  PCOPS_CUDA_CHECK(cudaMemcpyAsync(&E, off + M, sizeof(int64_t), cudaMemcpyDeviceToHost, stream));
  // SYNC: E sizes the caller's output; it is only known once the counting pass has run.
  PCOPS_CUDA_CHECK(cudaStreamSynchronize(stream));
  int64_t* edges = allocate(E);
  if (E == 0) return 0;
  int64_t* row0 = edges;
  int64_t* row1 = edges + E;

  // Fill pass.
  const bool buffered = cap <= RadiusPolicy::kMaxBufCap;
  const int capacity = buffered ? static_cast<int>(2 * pow2_at_least(cap)) : 0;
  const bool unordered = any_grid && !buffered;  // segments need a sort afterwards
  int64_t* out1 = unordered ? ws.alloc<int64_t>(E) : row1;
  const size_t smem = static_cast<size_t>(RadiusPolicy::kWarpsPerBlock) * capacity * sizeof(uint32_t);
  if (is3) {
    detail::launch(ctx, fill_kernel<true>, qgrid, qblock, smem, fx, fy, M, D, tab, gp, start, pts, hits,
                   R2, cap, ignore_same, cnt, sat, off, capacity, row0, out1);
  } else {
    detail::launch(ctx, fill_kernel<false>, qgrid, qblock, 0, fx, fy, M, D, tab, gp, start, pts, hits,
                   R2, cap, ignore_same, cnt, sat, off, 0, row0, out1);
  }
  if (unordered) {
    size_t temp_bytes = 0;
    PCOPS_CUDA_CHECK(cub::DeviceSegmentedSort::SortKeys(nullptr, temp_bytes, out1, row1, E, M, off,
                                                        off + 1, stream));
    void* temp = ws.bytes(temp_bytes);
    PCOPS_CUDA_CHECK(cub::DeviceSegmentedSort::SortKeys(temp, temp_bytes, out1, row1, E, M, off,
                                                        off + 1, stream));
  }
  return E;
}

}  // namespace pcops::cuda
