// CUDA kNN: exact, bitwise equal to the CPU backend (the k smallest (key, index), key = s with NaN
// as +inf, dist = sqrt(key) taken after selection).
//
// Paths, chosen per call and per cloud on the host (lengths are host memory):
// - k > KnnPolicy::kMaxWarpK: per query, every key is materialised and the (key, index) pairs are
//   radix-sorted (CUB segmented sort over chunks of queries); the first k are written. Any D.
// - 3-D clouds with at least kGridMinPoints references (and 4k <= n): a uniform grid is built on the
//   GPU (bounding box, cell size refined from the measured occupancy, counting sort of the points
//   into cell order as SoA floats + original indices; points with a non-finite coordinate go to one
//   extra cell per cloud), then one warp per query searches growing Chebyshev rings of cells with
//   the CPU's rounding-safe double lower bound. k = 1 (chamfer_distance's nearest neighbour): one
//   thread per query walks the same rings with its best (key, index) in a register.
// - everything else (any D, small clouds): one warp per query scans all references.
// Selection is primitives::WarpTopK (shared-memory buffer, bitonic merges); its k-th key is the
// admission threshold and the pruning bound. Queries past query_lengths and clouds without
// references are padded by their own kernel.
//
// Determinism: integer atomics only (bounding box min/max, histogram ranks, occupancy sums); the
// in-cell order they produce changes which points are looked at first, never the result, because
// (key, index) is a total order and pruning is conservative.
#include "pcops/knn.hpp"

#include <cub/cub.cuh>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/distance.hpp"
#include "cuda/common.cuh"
#include "cuda/knn_grid.hpp"
#include "cuda/primitives/warp_topk.cuh"
#include "pcops/error.hpp"
#include "pcops/spatial_index.hpp"

namespace pcops::cuda {
namespace {

using primitives::WarpTopK;

struct KnnPolicy {
  static constexpr int64_t kMaxWarpK = 1024;          // larger k: per-query radix sort
  static constexpr int kSmemPerBlock = 32768;         // top-k buffers of one block
  static constexpr int kMaxWarpsPerBlock = 8;
  static constexpr int kNearestThreads = 128;         // k = 1 grid search: one thread per query
  static constexpr int64_t kGridMinPoints = 4096;     // smaller clouds: brute force
  static constexpr int64_t kGridMaxPoints = int64_t{1} << 30;
  static constexpr double kCellsPerPoint = 4.0;       // cell budget of a cloud
  static constexpr int64_t kMaxCellsPerCloud = int64_t{1} << 28;
  static constexpr int64_t kMaxPassPoints = int64_t{1} << 30;  // keeps grid positions in int32
  static constexpr int64_t kMaxPassCells = int64_t{1} << 30;
  static constexpr int64_t kMaxPassClouds = 65535;    // gridDim.y
  static constexpr int kRefinePasses = 2;             // occupancy-driven cell size refinements
  static constexpr int kBuildThreads = 256;
  static constexpr int64_t kMaxBlocksX = 65535;
  static constexpr int64_t kSortBudgetItems = int64_t{1} << 24;  // keys per sort chunk (x16 bytes)
};

// Relative margin and floor of the rounding-safe pruning bound (identical to src/cpu/knn.cpp): a
// float32 s is within a few units of 2^-24 of the exact squared distance unless it underflows.
constexpr double kMargin = 1.0 - 1e-5;
constexpr double kTiny = 1e-30;

__device__ __forceinline__ bool beyond(double lb2, float threshold) {
  return lb2 > kTiny && lb2 * kMargin > static_cast<double>(threshold);
}

__device__ __forceinline__ bool finite3(float a, float b, float c) {
  return (a - a) == 0.0f && (b - b) == 0.0f && (c - c) == 0.0f;
}

__device__ __forceinline__ const float* point_ptr(const PointsView& v, int64_t b, int64_t n) {
  return v.data + b * v.stride_batch + n * v.stride_point;
}

__device__ __forceinline__ uint64_t pack(float s, uint32_t id) {
  return (static_cast<uint64_t>(__float_as_uint(common::knn_key(s))) << 32) | id;
}

// Writes the k slots of one query from a merged WarpTopK: sqrt of the key, or (+inf, -1).
__device__ void write_result(const WarpTopK& top, int64_t k, float* od, int64_t* oi) {
  const uint64_t* v = top.result();
  for (int64_t t = WarpTopK::lane(); t < k; t += 32) {
    const uint64_t e = v[t];
    if (e == WarpTopK::kEmpty) {
      od[t] = INFINITY;
      oi[t] = -1;
    } else {
      od[t] = __fsqrt_rn(__uint_as_float(static_cast<uint32_t>(e >> 32)));
      oi[t] = static_cast<int64_t>(e & 0xFFFFFFFFu);
    }
  }
}

// (+inf, -1) in every slot of the queries past query_lengths and of clouds without references.
// One thread per output slot.
__global__ void pad_kernel(const int64_t* qlen, const int64_t* rlen, int64_t total, int64_t M,
                           int64_t k, float* dist, int64_t* idx) {
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < total;
       t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = t / k, b = i / M, m = i - b * M;
    if (m >= qlen[b] || rlen[b] == 0) {
      dist[t] = INFINITY;
      idx[t] = -1;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Brute force. One warp per query (grid-stride over all B*M queries, skipping those of other
// paths); lanes take consecutive references. The warps of a block share references through L1.
template <bool kDim3>
__global__ void __launch_bounds__(256) brute_kernel(PointsView query, PointsView ref,
                                                    const int64_t* qlen, const int64_t* rlen,
                                                    const int8_t* brute, int64_t M, int64_t k,
                                                    int half, float* dist, int64_t* idx) {
  extern __shared__ uint64_t smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wpb = blockDim.x >> 5;
  WarpTopK top{smem + static_cast<int64_t>(warp) * 2 * half, half, static_cast<int>(k)};
  const int64_t total = query.batch * M;
  const int64_t D = query.dim;
  for (int64_t i = int64_t{blockIdx.x} * wpb + warp; i < total; i += int64_t{gridDim.x} * wpb) {
    const int64_t b = i / M, m = i - b * M;
    if (!brute[b] || m >= qlen[b]) continue;
    const int64_t n = rlen[b];
    const float* qp = point_ptr(query, b, m);
    float qx = 0.0f, qy = 0.0f, qz = 0.0f;
    if (kDim3) {
      qx = qp[0];
      qy = qp[query.stride_dim];
      qz = qp[2 * query.stride_dim];
    }
    top.reset();
    for (int64_t j0 = 0; j0 < n; j0 += 32) {
      const int64_t j = j0 + lane;
      const bool valid = j < n;
      uint64_t v = 0;
      if (valid) {
        const float* xp = point_ptr(ref, b, j);
        float s;
        if (kDim3)
          s = common::squared_distance3(qx, qy, qz, xp[0], xp[ref.stride_dim], xp[2 * ref.stride_dim]);
        else
          s = common::squared_distance(qp, query.stride_dim, xp, ref.stride_dim, D);
        v = pack(s, static_cast<uint32_t>(j));
      }
      top.offer(v, valid);
    }
    top.merge();
    write_result(top, k, dist + i * k, idx + i * k);
  }
}

// ---------------------------------------------------------------------------------------------
// Uniform grid over the 3-D clouds of one pass.

// One cloud of a pass (host-computed): element offsets of its first query and reference row in
// the views' data (dense: b * stride_batch; ragged: the cloud's first row * stride_point), its
// sizes, and the output slot of its first query (rows of k slots). Cells [cell_base,
// cell_base + cap) are its grid cells (the first dims product of them used), cell_base + cap
// collects its non-finite points.
struct PassCloud {
  int64_t qbase, rbase, n, mq, out;
  int32_t cell_base, cap;
  int64_t pbase;  // first row of its points in the pass's cell-ordered arrays (set by grid_pass)
};

__device__ __forceinline__ const float* row_ptr(const PointsView& v, int64_t base, int64_t n) {
  return v.data + base + n * v.stride_point;
}

struct GridParams {
  double lo[3];
  double ext[3];
  double h, inv_h, slack, maxabs;
  int dims[3];
  int ncells;
  int settled;   // 1: no further refinement
  int reserved;  // written with the rest, so whole-struct copies never read unset bytes
};

struct CloudScratch {
  int bmin[3], bmax[3];  // ordered-int encodings of the float bounds of the finite points
  unsigned long long sumsq, total;
};

__device__ __forceinline__ double edge(const GridParams& g, int a, int c) {
  return g.lo[a] + static_cast<double>(c) * g.h;
}

// Cell coordinate along axis a, clamped into the grid (the CPU's Grid::coord).
__device__ __forceinline__ int coord(const GridParams& g, int a, double v) {
  const double t = (v - g.lo[a]) * g.inv_h;
  if (!(t >= 1.0)) return 0;
  if (t >= static_cast<double>(g.dims[a])) return g.dims[a] - 1;
  return static_cast<int>(t);
}

// Squared lower bound, along axis a, of the distance from v to the cells [c0, c1] (slack covers
// the double rounding of cell membership).
__device__ __forceinline__ double gap(const GridParams& g, int a, int c0, int c1, double v) {
  const double d = fmax(0.0, fmax(edge(g, a, c0) - v, v - edge(g, a, c1 + 1))) - g.slack;
  return d > 0.0 ? d * d : 0.0;
}

// The cells of the Chebyshev ring r around cell cq, clamped to the grid: [lo, hi] per axis.
__device__ __forceinline__ void ring_bounds(const GridParams& g, const int cq[3], int r, int lo[3], int hi[3]) {
#pragma unroll
  for (int a = 0; a < 3; ++a) {
    lo[a] = max(0, cq[a] - r);
    hi[a] = min(g.dims[a] - 1, cq[a] + r);
  }
}

// After ring r: true when every cell was visited, or when the unvisited region is provably
// farther than the current k-th key (the rounding-safe bound of the CPU).
__device__ __forceinline__ bool rings_done(const GridParams& g, const double q[3], const int cq[3], int r,
                                           float threshold) {
  double o = INFINITY;
#pragma unroll
  for (int a = 0; a < 3; ++a) {
    if (cq[a] - r > 0) o = fmin(o, q[a] - edge(g, a, cq[a] - r));
    if (cq[a] + r < g.dims[a] - 1) o = fmin(o, edge(g, a, cq[a] + r + 1) - q[a]);
  }
  if (o == INFINITY) return true;  // every cell visited
  o -= g.slack;
  return o > 0.0 && beyond(o * o, threshold);
}

__device__ double cells_for(const double e[3], double h) {
  double c = 1.0;
  for (int a = 0; a < 3; ++a) c *= fmax(1.0, ceil(e[a] / h));
  return c;
}

// Smallest edge (within a factor 1e-3) whose cell count is <= target (the CPU's edge_for_cells).
__device__ double edge_for_cells(const double e[3], double target) {
  const double emax = fmax(e[0], fmax(e[1], e[2]));
  if (!(emax > 0.0)) return 1.0;
  double hi = emax * 1.000001;
  double lo = emax * 1e-7;
  if (cells_for(e, lo) <= target) return lo;
  for (int it = 0; it < 60 && hi > lo * 1.001; ++it) {
    const double mid = sqrt(lo * hi);
    if (cells_for(e, mid) <= target) hi = mid;
    else lo = mid;
  }
  return hi;
}

__device__ void set_edge(GridParams& g, double h) {
  g.h = h;
  g.inv_h = 1.0 / h;
  g.ncells = 1;
  for (int a = 0; a < 3; ++a) {
    g.dims[a] = max(1, static_cast<int>(ceil(g.ext[a] / h)));
    g.ncells *= g.dims[a];
  }
  g.slack = h * 1e-8 + g.maxabs * 1e-14;
}

// One thread per cloud.
__global__ void init_scratch_kernel(CloudScratch* sc, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int a = 0; a < 3; ++a) {
    sc[c].bmin[a] = 0x7FFFFFFF;
    sc[c].bmax[a] = static_cast<int>(0x80000000u);
  }
  sc[c].sumsq = 0;
  sc[c].total = 0;
}

// Bounding box of the finite points. blockIdx.y = cloud, threads grid-stride over its points;
// warp min/max then one integer atomic per warp and axis.
__global__ void bbox_kernel(PointsView ref, const PassCloud* clouds, CloudScratch* sc) {
  const PassCloud cl = clouds[blockIdx.y];
  detail::OrderedBox3 box;
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < cl.n;
       j += int64_t{gridDim.x} * blockDim.x) {
    const float* p = row_ptr(ref, cl.rbase, j);
    const float x = p[0], y = p[ref.stride_dim], z = p[2 * ref.stride_dim];
    if (finite3(x, y, z)) box.add(x, y, z);
  }
  box.flush(sc[blockIdx.y].bmin, sc[blockIdx.y].bmax);
}

// First cell size of each cloud from its box and point count. One thread per cloud.
__global__ void params_kernel(const PassCloud* clouds, const CloudScratch* sc, GridParams* params,
                              int C, double points_per_cell) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  GridParams g;
  double lo[3], hi[3];
  for (int a = 0; a < 3; ++a) {
    if (sc[c].bmin[a] <= sc[c].bmax[a]) {
      lo[a] = detail::from_ordered_int(sc[c].bmin[a]);
      hi[a] = detail::from_ordered_int(sc[c].bmax[a]);
    } else {
      lo[a] = hi[a] = 0.0;
    }
  }
  g.maxabs = 0.0;
  for (int a = 0; a < 3; ++a) {
    g.lo[a] = lo[a];
    g.ext[a] = hi[a] - lo[a];
    g.maxabs = fmax(g.maxabs, fmax(fabs(lo[a]), fabs(hi[a])));
  }
  const double n = static_cast<double>(clouds[c].n);
  const double target = fmax(1.0, fmin(static_cast<double>(clouds[c].cap), n / points_per_cell));
  set_edge(g, edge_for_cells(g.ext, target));
  g.settled = 0;
  g.reserved = 0;
  params[c] = g;
}

// Cell of every point (non-finite: the cloud's extra cell) and its rank in the cell (histogram by
// integer atomics, aggregated over the lanes of a warp that hit the same cell: duplicate-heavy
// clouds would otherwise serialise on one counter). blockIdx.y = cloud; warps take 32 consecutive
// points. kStore: final pass, keeps cell and rank for the scatter; otherwise a measuring pass,
// skipped for settled clouds.
template <bool kStore>
__global__ void hist_kernel(PointsView ref, const PassCloud* clouds, const GridParams* params, int* counts,
                            int* cell_of, int* rank_of) {
  const PassCloud cl = clouds[blockIdx.y];
  const GridParams& g = params[blockIdx.y];
  if (!kStore && g.settled) return;
  const int64_t pb = cl.pbase;
  const int lane = threadIdx.x & 31;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t j0 = blockIdx.x * int64_t{blockDim.x} + (threadIdx.x & ~31u); j0 < cl.n; j0 += stride) {
    const int64_t j = j0 + lane;
    const bool valid = j < cl.n;
    int cell = -1;
    if (valid) {
      const float* p = row_ptr(ref, cl.rbase, j);
      const float x = p[0], y = p[ref.stride_dim], z = p[2 * ref.stride_dim];
      cell = cl.cell_base + cl.cap;
      if (finite3(x, y, z))
        cell = cl.cell_base + (coord(g, 2, z) * g.dims[1] + coord(g, 1, y)) * g.dims[0] + coord(g, 0, x);
    }
    const unsigned peers = __match_any_sync(0xFFFFFFFFu, cell);
    const int leader = __ffs(peers) - 1;
    int r = 0;
    if (valid && lane == leader) r = atomicAdd(&counts[cell], __popc(peers));
    r = __shfl_sync(0xFFFFFFFFu, r, leader) + __popc(peers & ((1u << lane) - 1u));
    if (kStore && valid) {
      cell_of[pb + j] = cell;
      rank_of[pb + j] = r;
    }
  }
}

// Occupancy of the measuring pass (sum over cells of count^2, and the count of finite points);
// zeroes the counts for the next pass. blockIdx.y = cloud, threads grid-stride over its cells.
__global__ void occupancy_kernel(const PassCloud* clouds, const GridParams* params, int* counts,
                                 CloudScratch* sc) {
  const PassCloud cl = clouds[blockIdx.y];
  const GridParams& g = params[blockIdx.y];
  if (g.settled) return;
  unsigned long long sq = 0, tot = 0;
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c <= g.ncells; c += gridDim.x * blockDim.x) {
    const int cell = c < g.ncells ? cl.cell_base + c : cl.cell_base + cl.cap;
    const int v = counts[cell];
    if (v != 0) {
      counts[cell] = 0;
      if (c < g.ncells) {
        sq += static_cast<unsigned long long>(v) * static_cast<unsigned long long>(v);
        tot += static_cast<unsigned long long>(v);
      }
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    sq += __shfl_down_sync(0xFFFFFFFFu, sq, o);
    tot += __shfl_down_sync(0xFFFFFFFFu, tot, o);
  }
  if ((threadIdx.x & 31) == 0 && tot != 0) {
    atomicAdd(&sc[blockIdx.y].sumsq, sq);
    atomicAdd(&sc[blockIdx.y].total, tot);
  }
}

// Refines the cell edge towards the target occupancy assuming surface-like scaling (count per
// cell ~ h^2), within the cell budget (the CPU's rule). One thread per cloud.
__global__ void refine_kernel(const PassCloud* clouds, CloudScratch* sc, GridParams* params, int C,
                              double points_per_cell) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  GridParams g = params[c];
  if (g.settled) return;
  const double total = static_cast<double>(sc[c].total);
  const double load = total > 0.0 ? static_cast<double>(sc[c].sumsq) / total : 0.0;
  sc[c].sumsq = 0;
  sc[c].total = 0;
  g.settled = 1;
  if (load > 2.0 * points_per_cell) {
    const double cap = static_cast<double>(clouds[c].cap);
    double h1 = g.h * sqrt(1.2 * points_per_cell / load);
    if (cells_for(g.ext, h1) > cap) h1 = edge_for_cells(g.ext, cap);
    if (h1 < 0.8 * g.h) {
      set_edge(g, h1);
      g.settled = 0;
    }
  }
  params[c] = g;
}

// Points into cell order: SoA coordinates and original indices. blockIdx.y = cloud.
__global__ void scatter_kernel(PointsView ref, const PassCloud* clouds, const int* cell_of, const int* rank_of, const int* start, float* sx,
                               float* sy, float* sz, uint32_t* sid) {
  const PassCloud cl = clouds[blockIdx.y];
  const int64_t pb = cl.pbase;
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < cl.n;
       j += int64_t{gridDim.x} * blockDim.x) {
    const float* p = row_ptr(ref, cl.rbase, j);
    const int pos = start[cell_of[pb + j]] + rank_of[pb + j];
    sx[pos] = p[0];
    sy[pos] = p[ref.stride_dim];
    sz[pos] = p[2 * ref.stride_dim];
    sid[pos] = static_cast<uint32_t>(j);
  }
}

struct GridPoints {
  const float* x;
  const float* y;
  const float* z;
  const uint32_t* id;
};

// The points [p0, p1) of the cell-ordered arrays, 32 at a time (warp-collective).
__device__ __forceinline__ void scan_range(int p0, int p1, float qx, float qy, float qz,
                                           const GridPoints& pts, WarpTopK& top) {
  const int lane = WarpTopK::lane();
  for (int base = p0; base < p1; base += 32) {
    const int p = base + lane;
    const bool valid = p < p1;
    uint64_t v = 0;
    if (valid) v = pack(common::squared_distance3(qx, qy, qz, pts.x[p], pts.y[p], pts.z[p]), pts.id[p]);
    top.offer(v, valid);
  }
}

// One warp per query of the cloud blockIdx.y (grid-stride). Ring r >= 1 is the Chebyshev shell r
// around the query's cell (ring 1 includes the cell itself); its (y, z) rows are split over the
// lanes, which prune them with the double lower bound, and the surviving row ranges are scanned by
// the whole warp. After each ring, the search stops once the unvisited region is provably farther
// than the current k-th key.
__global__ void __launch_bounds__(256, 3) grid_query_kernel(PointsView query, const PassCloud* clouds,
                                                         const GridParams* params, const int* start,
                                                         GridPoints pts, int64_t k,
                                                         int half, float* dist, int64_t* idx) {
  extern __shared__ uint64_t smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wpb = blockDim.x >> 5;
  WarpTopK top{smem + static_cast<int64_t>(warp) * 2 * half, half, static_cast<int>(k)};
  const PassCloud cl = clouds[blockIdx.y];
  const GridParams& g = params[blockIdx.y];
  const int* cs = start + cl.cell_base;
  for (int64_t m = int64_t{blockIdx.x} * wpb + warp; m < cl.mq; m += int64_t{gridDim.x} * wpb) {
    const float* qp = row_ptr(query, cl.qbase, m);
    const float qx = qp[0], qy = qp[query.stride_dim], qz = qp[2 * query.stride_dim];
    const int64_t out = cl.out + m * k;
    if (!finite3(qx, qy, qz)) {
      // Every s is NaN or +inf: all keys are +inf, so the first k references by index.
      for (int64_t t = lane; t < k; t += 32) {
        dist[out + t] = INFINITY;
        idx[out + t] = t < cl.n ? t : -1;
      }
      continue;
    }
    top.reset();
    const double q[3] = {qx, qy, qz};
    const int cq[3] = {coord(g, 0, q[0]), coord(g, 1, q[1]), coord(g, 2, q[2])};
    for (int r = 1;; ++r) {
      int lo[3], hi[3];
      ring_bounds(g, cq, r, lo, hi);
      const int ny = hi[1] - lo[1] + 1, nz = hi[2] - lo[2] + 1, rows = ny * nz;
      for (int r0 = 0; r0 < rows; r0 += 32) {
        const int t = r0 + lane;
        const float tf = top.threshold_key();
        int a0 = 0, a1 = 0, b0 = 0, b1 = 0;
        double la = 0.0, lb = 0.0;
        if (t < rows) {
          const int y = lo[1] + t % ny, z = lo[2] + t / ny;
          const double gyz = gap(g, 2, z, z, q[2]) + gap(g, 1, y, y, q[1]);
          if (!beyond(gyz, tf)) {
            const int row = (z * g.dims[1] + y) * g.dims[0];
            if (r == 1 || abs(z - cq[2]) == r || abs(y - cq[1]) == r) {
              la = gyz + gap(g, 0, lo[0], hi[0], q[0]);
              if (!beyond(la, tf)) {
                a0 = cs[row + lo[0]];
                a1 = cs[row + hi[0] + 1];
              }
            } else {
              const int xa = cq[0] - r, xb = cq[0] + r;
              if (xa >= 0) {
                la = gyz + gap(g, 0, xa, xa, q[0]);
                if (!beyond(la, tf)) {
                  a0 = cs[row + xa];
                  a1 = cs[row + xa + 1];
                }
              }
              if (xb < g.dims[0]) {
                lb = gyz + gap(g, 0, xb, xb, q[0]);
                if (!beyond(lb, tf)) {
                  b0 = cs[row + xb];
                  b1 = cs[row + xb + 1];
                }
              }
            }
          }
        }
        unsigned work = __ballot_sync(0xFFFFFFFFu, a1 > a0 || b1 > b0);
        while (work != 0u) {
          const int src = __ffs(work) - 1;
          work &= work - 1u;
          int p0 = __shfl_sync(0xFFFFFFFFu, a0, src), p1 = __shfl_sync(0xFFFFFFFFu, a1, src);
          double l = __shfl_sync(0xFFFFFFFFu, la, src);
          // The threshold may have tightened since the row was examined.
          if (p1 > p0 && !beyond(l, top.threshold_key())) scan_range(p0, p1, qx, qy, qz, pts, top);
          p0 = __shfl_sync(0xFFFFFFFFu, b0, src);
          p1 = __shfl_sync(0xFFFFFFFFu, b1, src);
          l = __shfl_sync(0xFFFFFFFFu, lb, src);
          if (p1 > p0 && !beyond(l, top.threshold_key())) scan_range(p0, p1, qx, qy, qz, pts, top);
        }
      }
      top.merge();  // the tightest threshold for the stop test
      if (rings_done(g, q, cq, r, top.threshold_key())) break;
    }
    // Points with a non-finite coordinate: key +inf, after every finite point.
    scan_range(cs[cl.cap], cs[cl.cap + 1], qx, qy, qz, pts, top);
    top.merge();
    write_result(top, k, dist + out, idx + out);
  }
}

// k = 1 (chamfer_distance's search): one thread per query, the same rings, row pruning, stop test
// and non-finite cell as grid_query_kernel, with the best (key, index) in a register instead of a
// warp's top-k buffer. Threads search independently, so a warp keeps 32 queries in flight where
// grid_query_kernel keeps one; the result is the same (key, index) minimum.
__global__ void __launch_bounds__(KnnPolicy::kNearestThreads)
    grid_nearest_kernel(PointsView query, const PassCloud* clouds, const GridParams* params, const int* start,
                        GridPoints pts, float* dist, int64_t* idx) {
  constexpr uint64_t kEmpty = ~uint64_t{0};
  const PassCloud cl = clouds[blockIdx.y];
  const GridParams& g = params[blockIdx.y];
  const int* cs = start + cl.cell_base;
  for (int64_t m = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; m < cl.mq; m += int64_t{gridDim.x} * blockDim.x) {
    const float* qp = row_ptr(query, cl.qbase, m);
    const float qx = qp[0], qy = qp[query.stride_dim], qz = qp[2 * query.stride_dim];
    const int64_t out = cl.out + m;
    if (!finite3(qx, qy, qz)) {  // every key is +inf: the first reference
      dist[out] = INFINITY;
      idx[out] = cl.n > 0 ? 0 : -1;
      continue;
    }
    uint64_t best = kEmpty;
    const auto scan = [&](int p0, int p1) {
      for (int p = p0; p < p1; ++p) {
        const uint64_t v = pack(common::squared_distance3(qx, qy, qz, pts.x[p], pts.y[p], pts.z[p]), pts.id[p]);
        best = v < best ? v : best;
      }
    };
    const auto threshold = [&] {
      return best == kEmpty ? __int_as_float(0x7f800000) : __uint_as_float(static_cast<uint32_t>(best >> 32));
    };
    const double q[3] = {qx, qy, qz};
    const int cq[3] = {coord(g, 0, q[0]), coord(g, 1, q[1]), coord(g, 2, q[2])};
    for (int r = 1;; ++r) {
      int lo[3], hi[3];
      ring_bounds(g, cq, r, lo, hi);
      for (int z = lo[2]; z <= hi[2]; ++z) {
        const double gz = gap(g, 2, z, z, q[2]);
        if (beyond(gz, threshold())) continue;
        for (int y = lo[1]; y <= hi[1]; ++y) {
          const float tf = threshold();
          const double gyz = gz + gap(g, 1, y, y, q[1]);
          if (beyond(gyz, tf)) continue;
          const int row = (z * g.dims[1] + y) * g.dims[0];
          if (r == 1 || abs(z - cq[2]) == r || abs(y - cq[1]) == r) {
            if (!beyond(gyz + gap(g, 0, lo[0], hi[0], q[0]), tf)) scan(cs[row + lo[0]], cs[row + hi[0] + 1]);
          } else {
            const int xa = cq[0] - r, xb = cq[0] + r;
            if (xa >= 0 && !beyond(gyz + gap(g, 0, xa, xa, q[0]), tf)) scan(cs[row + xa], cs[row + xa + 1]);
            if (xb < g.dims[0] && !beyond(gyz + gap(g, 0, xb, xb, q[0]), threshold()))
              scan(cs[row + xb], cs[row + xb + 1]);
          }
        }
      }
      if (rings_done(g, q, cq, r, threshold())) break;
    }
    scan(cs[cl.cap], cs[cl.cap + 1]);  // points with a non-finite coordinate: key +inf, last
    if (best == kEmpty) {
      dist[out] = INFINITY;
      idx[out] = -1;
    } else {
      dist[out] = __fsqrt_rn(__uint_as_float(static_cast<uint32_t>(best >> 32)));
      idx[out] = static_cast<int64_t>(best & 0xFFFFFFFFu);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Large k: keys (key bits << ib | index) of a chunk of queries of one cloud, one thread per pair.
__global__ void sort_keys_kernel(PointsView query, PointsView ref, int64_t b, int64_t m0, int64_t qc,
                                 int64_t n, int ib, uint64_t* keys) {
  const int64_t total = qc * n;
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < total;
       t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t qi = t / n, j = t - qi * n;
    const float s = common::squared_distance(point_ptr(query, b, m0 + qi), query.stride_dim,
                                             point_ptr(ref, b, j), ref.stride_dim, query.dim);
    keys[t] = (static_cast<uint64_t>(__float_as_uint(common::knn_key(s))) << ib) |
              static_cast<uint64_t>(j);
  }
}

// Segment q of a chunk is [q * n, (q + 1) * n); one thread per offset.
__global__ void segment_offsets_kernel(int* offsets, int64_t count, int64_t n) {
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t <= count;
       t += int64_t{gridDim.x} * blockDim.x)
    offsets[t] = static_cast<int>(t * n);
}

// The first k sorted keys of each query of the chunk; one thread per output slot.
__global__ void sort_out_kernel(const uint64_t* keys, int64_t qc, int64_t n, int64_t k, int ib,
                                float* dist, int64_t* idx) {
  const int64_t total = qc * k;
  const uint64_t low = (uint64_t{1} << ib) - 1;
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < total;
       t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t qi = t / k, r = t - qi * k;
    if (r < n) {
      const uint64_t e = keys[qi * n + r];
      dist[t] = __fsqrt_rn(__uint_as_float(static_cast<uint32_t>(e >> ib)));
      idx[t] = static_cast<int64_t>(e & low);
    } else {
      dist[t] = INFINITY;
      idx[t] = -1;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Host side.

int64_t blocks_for(int64_t items, int threads, int64_t cap = KnnPolicy::kMaxBlocksX) {
  return std::max<int64_t>(1, std::min<int64_t>(cap, detail::ceil_div(items, threads)));
}

template <class T>
T* upload(const CudaContext& ctx, detail::Workspace& ws, const std::vector<T>& host) {
  T* dev = ws.alloc<T>(static_cast<int64_t>(std::max<size_t>(host.size(), 1)));
  // Without waiting for the stream (small tables travel as kernel arguments).
  detail::copy_to_device_async(ctx, dev, host.data(), host.size() * sizeof(T));
  return dev;
}

// Warps per block and dynamic shared memory of the warp top-k kernels.
struct WarpLaunch {
  int half, warps;
  size_t smem;
};
WarpLaunch warp_launch(int64_t k) {
  WarpLaunch w;
  w.half = WarpTopK::half_for(k);
  const int per_warp = 2 * w.half * static_cast<int>(sizeof(uint64_t));
  w.warps = std::clamp(KnnPolicy::kSmemPerBlock / per_warp, 1, KnnPolicy::kMaxWarpsPerBlock);
  w.smem = static_cast<size_t>(w.warps) * per_warp;
  return w;
}

void grid_pass(const CudaContext& ctx, const PointsView& query, const PointsView& ref,
               std::vector<PassCloud> clouds, int64_t k, float* dist, int64_t* idx) {
  detail::Workspace ws(ctx);
  const cudaStream_t stream = detail::stream_of(ctx);
  const int C = static_cast<int>(clouds.size());
  int64_t points = 0, cells = 0, max_n = 0, max_m = 0, max_cells = 0;
  for (size_t c = 0; c < clouds.size(); ++c) {
    clouds[c].pbase = points;
    points += clouds[c].n;
    cells += clouds[c].cap + 1;
    max_n = std::max(max_n, clouds[c].n);
    max_m = std::max(max_m, clouds[c].mq);
    max_cells = std::max<int64_t>(max_cells, clouds[c].cap + 1);
  }
  const double ppc = std::clamp(static_cast<double>(k) / 2.0, 1.0, 32.0);

  const PassCloud* d_clouds = upload(ctx, ws, clouds);
  CloudScratch* sc = ws.alloc<CloudScratch>(C);
  GridParams* params = ws.alloc<GridParams>(C);
  int* counts = ws.alloc<int>(cells + 1);
  int* start = ws.alloc<int>(cells + 1);
  int* cell_of = ws.alloc<int>(points);
  int* rank_of = ws.alloc<int>(points);
  float* sx = ws.alloc<float>(points);
  float* sy = ws.alloc<float>(points);
  float* sz = ws.alloc<float>(points);
  uint32_t* sid = ws.alloc<uint32_t>(points);
  PCOPS_CUDA_CHECK(cudaMemsetAsync(counts, 0, static_cast<size_t>(cells + 1) * sizeof(int), stream));

  constexpr int T = KnnPolicy::kBuildThreads;
  const int cb = static_cast<int>(detail::ceil_div(C, 128));
  const dim3 pgrid(static_cast<unsigned>(blocks_for(max_n, T)), static_cast<unsigned>(C));
  const dim3 cgrid(static_cast<unsigned>(blocks_for(max_cells, T)), static_cast<unsigned>(C));
  detail::launch(ctx, init_scratch_kernel, dim3(cb), dim3(128), 0, sc, C);
  detail::launch(ctx, bbox_kernel, pgrid, dim3(T), 0, ref, d_clouds, sc);
  detail::launch(ctx, params_kernel, dim3(cb), dim3(128), 0, d_clouds, sc, params, C, ppc);
  for (int pass = 0; pass < KnnPolicy::kRefinePasses; ++pass) {
    detail::launch(ctx, hist_kernel<false>, pgrid, dim3(T), 0, ref, d_clouds, params, counts,
                   static_cast<int*>(nullptr), static_cast<int*>(nullptr));
    detail::launch(ctx, occupancy_kernel, cgrid, dim3(T), 0, d_clouds, params, counts, sc);
    detail::launch(ctx, refine_kernel, dim3(cb), dim3(128), 0, d_clouds, sc, params, C, ppc);
  }
  detail::launch(ctx, hist_kernel<true>, pgrid, dim3(T), 0, ref, d_clouds, params, counts,
                 cell_of, rank_of);
  size_t temp_bytes = 0;
  PCOPS_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, temp_bytes, counts, start, cells + 1, stream));
  void* temp = ws.bytes(temp_bytes);
  PCOPS_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(temp, temp_bytes, counts, start, cells + 1, stream));
  detail::launch(ctx, scatter_kernel, pgrid, dim3(T), 0, ref, d_clouds, cell_of, rank_of,
                 start, sx, sy, sz, sid);

  if (k == 1) {
    constexpr int kQ = KnnPolicy::kNearestThreads;
    detail::launch(ctx, grid_nearest_kernel, dim3(static_cast<unsigned>(blocks_for(max_m, kQ)), static_cast<unsigned>(C)),
                   dim3(kQ), 0, query, d_clouds, params, start, GridPoints{sx, sy, sz, sid}, dist, idx);
    return;
  }
  const WarpLaunch wl = warp_launch(k);
  const dim3 qgrid(static_cast<unsigned>(blocks_for(max_m, wl.warps)), static_cast<unsigned>(C));
  detail::launch(ctx, grid_query_kernel, qgrid, dim3(32 * wl.warps), wl.smem, query, d_clouds,
                 params, start, GridPoints{sx, sy, sz, sid}, k, wl.half, dist, idx);
}

void sort_path(const CudaContext& ctx, const PointsView& query, const PointsView& ref,
               const std::vector<int64_t>& qlen, const std::vector<int64_t>& rlen, int64_t k,
               float* dist, int64_t* idx) {
  const cudaStream_t stream = detail::stream_of(ctx);
  const int64_t M = query.count;
  constexpr int T = 256;
  for (int64_t b = 0; b < query.batch; ++b) {
    const int64_t mq = qlen[b], n = rlen[b];
    if (mq == 0 || n == 0) continue;  // padded
    detail::Workspace ws(ctx);
    int ib = 1;
    while ((int64_t{1} << ib) < n) ++ib;  // index bits
    const int end_bit = 31 + ib;          // a key is a non-negative float: its sign bit is 0
    const bool segmented = n <= (int64_t{1} << 30);
    const int64_t qc_max = segmented ? std::clamp<int64_t>(KnnPolicy::kSortBudgetItems / n, 1, mq) : 1;
    uint64_t* keys = ws.alloc<uint64_t>(qc_max * n);
    uint64_t* sorted = ws.alloc<uint64_t>(qc_max * n);
    int* offsets = segmented ? ws.alloc<int>(qc_max + 1) : nullptr;
    if (segmented)
      detail::launch(ctx, segment_offsets_kernel, dim3(static_cast<unsigned>(blocks_for(qc_max + 1, T))),
                     dim3(T), 0, offsets, qc_max, n);
    size_t have = 0;
    void* temp = nullptr;
    for (int64_t m0 = 0; m0 < mq; m0 += qc_max) {
      const int64_t qc = std::min(qc_max, mq - m0);
      detail::launch(ctx, sort_keys_kernel, dim3(static_cast<unsigned>(blocks_for(qc * n, T, 1 << 20))),
                     dim3(T), 0, query, ref, b, m0, qc, n, ib, keys);
      size_t need = 0;
      if (segmented)
        PCOPS_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortKeys(
            nullptr, need, keys, sorted, static_cast<int>(qc * n), static_cast<int>(qc), offsets,
            offsets + 1, 0, end_bit, stream));
      else
        PCOPS_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(nullptr, need, keys, sorted, n, 0, end_bit, stream));
      if (need > have || temp == nullptr) {
        temp = ws.bytes(need);
        have = need;
      }
      if (segmented)
        PCOPS_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortKeys(
            temp, need, keys, sorted, static_cast<int>(qc * n), static_cast<int>(qc), offsets,
            offsets + 1, 0, end_bit, stream));
      else
        PCOPS_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(temp, need, keys, sorted, n, 0, end_bit, stream));
      const int64_t out = (b * M + m0) * k;
      detail::launch(ctx, sort_out_kernel, dim3(static_cast<unsigned>(blocks_for(qc * k, T, 1 << 20))),
                     dim3(T), 0, sorted, qc, n, k, ib, dist + out, idx + out);
    }
  }
}

}  // namespace

void knn(const CudaContext& ctx, PointsView query, PointsView ref, LengthsView query_lengths,
         LengthsView ref_lengths, const KnnParams& params, float* dist, int64_t* idx) {
  core::validate_knn(query, ref, query_lengths, ref_lengths, params);
  const int64_t k = params.k, M = query.count, B = query.batch, N = ref.count;
  if (k == 0 || B * M == 0) return;
  PCOPS_CHECK(N <= int64_t{0xFFFFFFFF}, Value,
              "ref: at most 2^32 - 1 points per cloud are supported, got ", N);
  // 3-D, k <= 32, a cloud of at least 100k points queried densely: a SpatialIndex built for the
  // call, whose adaptive leaves win on uneven clouds (12.5x on clusters at 1M points) and stay
  // within 0.8x-1.2x of the grid on even ones (H200, docs/ops/spatial_index.md). Same results.
  if (ref.dim == 3 && detail::IndexRoute("PCOPS_CUDA_KNN_INDEX")(k, query_lengths, M, ref_lengths, N, B)) {
    const CudaContext c = detail::stream_ordered(ctx);  // the index's memory as workspace
    SpatialIndex index;
    index.build(c, ref, ref_lengths, SpatialIndexParams{});
    index.knn(c, query, query_lengths, k, dist, idx);
    return;
  }
  std::vector<int64_t> qlen(static_cast<size_t>(B)), rlen(static_cast<size_t>(B));
  detail::Workspace ws(ctx);
  bool need_pad = false;
  for (int64_t b = 0; b < B; ++b) {
    qlen[b] = query_lengths.get(b, M);
    rlen[b] = ref_lengths.get(b, N);
    need_pad = need_pad || qlen[b] < M || (rlen[b] == 0 && qlen[b] > 0);
  }
  const int64_t* d_qlen = nullptr;
  const int64_t* d_rlen = nullptr;
  const auto device_lengths = [&] {  // only the padding and brute-force kernels read them
    if (d_qlen != nullptr) return;
    d_qlen = detail::upload_lengths(ctx, ws, query_lengths, B, M);
    d_rlen = detail::upload_lengths(ctx, ws, ref_lengths, B, N);
  };
  if (need_pad) {
    device_lengths();
    const int64_t total = B * M * k;
    detail::launch(ctx, pad_kernel, dim3(static_cast<unsigned>(blocks_for(total, 256, 1 << 20))),
                   dim3(256), 0, d_qlen, d_rlen, total, M, k, dist, idx);
  }

  if (k > KnnPolicy::kMaxWarpK) {
    sort_path(ctx, query, ref, qlen, rlen, k, dist, idx);
    return;
  }

  std::vector<int8_t> brute(static_cast<size_t>(B), 0);
  std::vector<int64_t> grid_clouds;
  bool any_brute = false;
  for (int64_t b = 0; b < B; ++b) {
    if (qlen[b] == 0 || rlen[b] == 0) continue;  // padded
    const int64_t n = rlen[b];
    if (ref.dim == 3 && n >= KnnPolicy::kGridMinPoints && n < KnnPolicy::kGridMaxPoints && 4 * k <= n) {
      grid_clouds.push_back(b);
    } else {
      brute[b] = 1;
      any_brute = true;
    }
  }
  if (any_brute) {
    device_lengths();
    const int8_t* d_brute = upload(ctx, ws, brute);
    const WarpLaunch wl = warp_launch(k);
    const dim3 grid(static_cast<unsigned>(blocks_for(B * M, wl.warps, 1 << 20)));
    if (ref.dim == 3)
      detail::launch(ctx, brute_kernel<true>, grid, dim3(32 * wl.warps), wl.smem, query, ref, d_qlen,
                     d_rlen, d_brute, M, k, wl.half, dist, idx);
    else
      detail::launch(ctx, brute_kernel<false>, grid, dim3(32 * wl.warps), wl.smem, query, ref, d_qlen,
                     d_rlen, d_brute, M, k, wl.half, dist, idx);
  }

  std::vector<detail::KnnGridCloud> clouds;
  clouds.reserve(grid_clouds.size());
  for (const int64_t b : grid_clouds)
    clouds.push_back(detail::KnnGridCloud{b * query.stride_batch, b * ref.stride_batch, rlen[b],
                                          qlen[b], b * M * k});
  detail::knn_grid(ctx, query, ref, clouds, k, dist, idx);
}

namespace detail {

bool knn_grid_eligible(int64_t dim, int64_t n, int64_t k) {
  return dim == 3 && k <= KnnPolicy::kMaxWarpK && n >= KnnPolicy::kGridMinPoints &&
         n < KnnPolicy::kGridMaxPoints && 4 * k <= n;
}

void knn_grid(const CudaContext& ctx, const PointsView& query, const PointsView& ref,
              const std::vector<KnnGridCloud>& grid_clouds, int64_t k, float* dist, int64_t* idx) {
  // Grid clouds in passes whose points and cells fit int32 positions.
  size_t i = 0;
  while (i < grid_clouds.size()) {
    std::vector<PassCloud> pass;
    int64_t points = 0, cells = 0;
    while (i < grid_clouds.size() && static_cast<int64_t>(pass.size()) < KnnPolicy::kMaxPassClouds) {
      const KnnGridCloud& c = grid_clouds[i];
      const int64_t n = c.n;
      const int64_t cap = std::min<int64_t>(
          KnnPolicy::kMaxCellsPerCloud, static_cast<int64_t>(KnnPolicy::kCellsPerPoint * static_cast<double>(n)) + 64);
      if (!pass.empty() && (points + n > KnnPolicy::kMaxPassPoints || cells + cap + 1 > KnnPolicy::kMaxPassCells))
        break;
      pass.push_back(PassCloud{c.qbase, c.rbase, n, c.mq, c.out, static_cast<int32_t>(cells),
                               static_cast<int32_t>(cap), 0});
      points += n;
      cells += cap + 1;
      ++i;
    }
    grid_pass(ctx, query, ref, pass, k, dist, idx);
  }
}

}  // namespace detail

}  // namespace pcops::cuda
