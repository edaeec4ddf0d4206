// CUDA ball query and its backward; bitwise equal to the CPU backend (src/cpu/ball_query.cpp).
//
// Forward, two paths with identical results (the first K matches s < R2 in reference order):
// - ordered scan (default): one warp per query walks the packed SoA references in index order,
//   128 per float4 step, ballots the matches, places them with popc prefixes and stops at the
//   K-th. Exact by construction; taken when the query x reference pair count is moderate, when
//   K > GridPolicy::kMaxK, or when R2 is not finite.
// - uniform grid (many pairs): per batch entry, cells of edge >= the padded radius (computed on
//   the device from the bounding box, so no host sync), points sorted by cell with a stable CUB
//   radix sort (index order kept inside a cell); one warp per query filters the 3x3x3 cells and
//   keeps the K smallest matching indices in a shared-memory buffer (bitonic-sorted when full).
//   A batch entry whose grid would be too coarse to prune falls back to the ordered scan inside
//   the same kernel.
// Backward: grad_query, one thread per query row summing its slots in order; grad_ref, the filled
// slots stably sorted by (batch, ref index) and one thread per reference summing its contributions
// in (query, slot) order, exactly the CPU's sequence of roundings. No float atomics anywhere.
#include <cub/cub.cuh>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/distance.hpp"
#include "cuda/common.cuh"
#include "pcops/ball_query.hpp"
#include "pcops/spatial_index.hpp"

namespace pcops::cuda {
namespace {

using common::add_rn;
using common::mul_rn;
using common::squared_distance3;
using common::sub_rn;
using detail::ceil_div;

struct ScanPolicy {
  static constexpr int kWarpsPerBlock = 4;
  static constexpr int kGroups = 2;  // 128-reference float4 groups per warp step (loads in flight)
};

struct GridPolicy {
  static constexpr int kWarpsPerBlock = 4;
  static constexpr int kMinBlocksPerSm = 6;       // caps registers at 85 (a bare bound gives 64 + spills)
  static constexpr int64_t kMaxK = 256;           // buffer of 2 * pow2(K) entries per warp
  static constexpr int64_t kCellsPerPoint = 2;    // cell budget per batch entry: 2 n + 64
  static constexpr int64_t kExtraCells = 64;
  static constexpr int64_t kMinCells = 64;        // fewer cells: the grid cannot prune, scan
  static constexpr double kMaxDim = 2097152.0;    // cells per axis, keeps cell coords exact
  static constexpr double kMinPairs = 134217728.0;  // 2^27 query x reference pairs
  static constexpr double kMargin = 1e-5;         // radius padding of the cell edge
  static constexpr double kTiny = 1e-30;          // covers the underflow error of s
};

struct PackPolicy {
  static constexpr int kThreads = 256;
  static constexpr int kMaxBlocksX = 2048;
};

struct FlatPolicy {
  static constexpr int kThreads = 256;
  static constexpr int64_t kMaxBlocks = int64_t{1} << 20;
};

constexpr unsigned kFull = 0xFFFFFFFFu;

// A PointsView as the device reads it.
struct DevPoints {
  const float* data;
  int64_t sb, sp, sd;
  __device__ __forceinline__ float at(int64_t b, int64_t n, int d) const {
    return data[b * sb + n * sp + d * sd];
  }
};

DevPoints dev_points(const PointsView& v) {
  return DevPoints{v.data, v.stride_batch, v.stride_point, v.stride_dim};
}

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

__host__ __device__ inline int64_t round_up4(int64_t v) { return (v + 3) / 4 * 4; }

int bit_width(uint64_t v) {
  int w = 0;
  while (v) {
    ++w;
    v >>= 1;
  }
  return w < 1 ? 1 : w;
}

dim3 flat_grid(int64_t items, int threads) {
  return dim3(static_cast<unsigned>(std::min<int64_t>(ceil_div(items, threads), FlatPolicy::kMaxBlocks)));
}

// ------------------------------------------------------------------------------------------------
// Packing

// Copies the valid references of each batch entry into SoA rows X|Y|Z of length Np (a multiple
// of 4, for float4 loads), and optionally folds the bounding box of their finite points into
// bmin/bmax (order-independent integer atomics, so deterministic).
// Decomposition: blockIdx.y strides over batch entries, the x blocks stride over its points.
__global__ void pack_kernel(DevPoints ref, int64_t B, int64_t N, int64_t Np,
                            const int64_t* __restrict__ ref_len, float* __restrict__ packed,
                            unsigned* __restrict__ bmin, unsigned* __restrict__ bmax) {
  __shared__ float red[PackPolicy::kThreads / 32][6];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t b = blockIdx.y; b < B; b += gridDim.y) {
    const int64_t n = ref_len[b];
    float* X = packed + 3 * b * Np;
    float lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
    // The float4 loads of the scan read whole groups of 4: the tail up to a multiple of 4 is
    // written too (zeros, never matched: the scan masks j >= n), so no load reads unset memory.
    const int64_t n4 = round_up4(n);
    for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < n4;
         j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      if (j >= n) {
        X[j] = X[Np + j] = X[2 * Np + j] = 0.0f;
        continue;
      }
      const float x = ref.at(b, j, 0), y = ref.at(b, j, 1), z = ref.at(b, j, 2);
      X[j] = x;
      X[Np + j] = y;
      X[2 * Np + j] = z;
      if (finite3(x, y, z)) {
        lo[0] = fminf(lo[0], x), lo[1] = fminf(lo[1], y), lo[2] = fminf(lo[2], z);
        hi[0] = fmaxf(hi[0], x), hi[1] = fmaxf(hi[1], y), hi[2] = fmaxf(hi[2], z);
      }
    }
    if (bmin == nullptr) continue;  // uniform across the block
    for (int o = 16; o > 0; o >>= 1)
      for (int a = 0; a < 3; ++a) {
        lo[a] = fminf(lo[a], __shfl_xor_sync(kFull, lo[a], o));
        hi[a] = fmaxf(hi[a], __shfl_xor_sync(kFull, hi[a], o));
      }
    if (lane == 0)
      for (int a = 0; a < 3; ++a) red[warp][a] = lo[a], red[warp][3 + a] = hi[a];
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w)
        for (int a = 0; a < 3; ++a) lo[a] = fminf(lo[a], red[w][a]), hi[a] = fmaxf(hi[a], red[w][3 + a]);
      if (lo[0] <= hi[0]) {  // the block saw a finite point
        for (int a = 0; a < 3; ++a) {
          atomicMin(&bmin[3 * b + a], ordered_bits(lo[a]));
          atomicMax(&bmax[3 * b + a], ordered_bits(hi[a]));
        }
      }
    }
    __syncthreads();  // red is reused by the next batch entry
  }
}

// ------------------------------------------------------------------------------------------------
// Ordered scan

// One warp, one query: the first K matches of X|Y|Z[0, n) in index order. Lane l of a group holds
// references 4l..4l+3, so a match's rank is the matches of lower lanes plus its own earlier ones.
__device__ __forceinline__ void scan_row(const float* __restrict__ X, const float* __restrict__ Y,
                                         const float* __restrict__ Z, int64_t n, float qx, float qy,
                                         float qz, float R2, int64_t K, float* __restrict__ od,
                                         int64_t* __restrict__ oi, int lane) {
  constexpr int G = ScanPolicy::kGroups;
  const unsigned lt = (1u << lane) - 1u;
  int64_t filled = 0;
  for (int64_t j0 = 0; j0 < n && filled < K; j0 += 128 * G) {
    float s[G][4];
    unsigned msk[G][4];
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const int64_t jb = j0 + g * 128 + 4 * lane;
      float4 x = make_float4(NAN, NAN, NAN, NAN), y = x, z = x;
      if (jb < n) {
        x = __ldg(reinterpret_cast<const float4*>(X + jb));
        y = __ldg(reinterpret_cast<const float4*>(Y + jb));
        z = __ldg(reinterpret_cast<const float4*>(Z + jb));
      }
      const float xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w},
                  zs[4] = {z.x, z.y, z.z, z.w};
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        s[g][c] = squared_distance3(qx, qy, qz, xs[c], ys[c], zs[c]);
        msk[g][c] = __ballot_sync(kFull, jb + c < n && s[g][c] < R2);
      }
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {
      int before = 0, total = 0;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        before += __popc(msk[g][c] & lt);
        total += __popc(msk[g][c]);
      }
      int64_t pos = filled + before;
      const int64_t jb = j0 + g * 128 + 4 * lane;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        if ((msk[g][c] >> lane) & 1u) {
          if (pos < K) {
            od[pos] = s[g][c];
            oi[pos] = jb + c;
          }
          ++pos;
        }
      }
      filled += total;
    }
  }
  for (int64_t t = (filled < K ? filled : K) + lane; t < K; t += 32) {
    od[t] = 0.0f;
    oi[t] = -1;
  }
}

__device__ __forceinline__ void pad_row(int64_t K, float* od, int64_t* oi, int lane) {
  for (int64_t t = lane; t < K; t += 32) {
    od[t] = 0.0f;
    oi[t] = -1;
  }
}

// Decomposition: one warp per query row (b, m), warps stride over the B*M rows.
__global__ void __launch_bounds__(ScanPolicy::kWarpsPerBlock * 32)
    scan_kernel(DevPoints query, int64_t B, int64_t M, int64_t K, int64_t Np,
                const int64_t* __restrict__ query_len, const int64_t* __restrict__ ref_len,
                const float* __restrict__ packed, float R2, float* __restrict__ dist2,
                int64_t* __restrict__ idx) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * ScanPolicy::kWarpsPerBlock;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(ScanPolicy::kWarpsPerBlock) + (threadIdx.x >> 5);
       i < B * M; i += warps) {
    const int64_t b = i / M, m = i - b * M;
    float* od = dist2 + i * K;
    int64_t* oi = idx + i * K;
    const int64_t n = (R2 > 0.0f) ? ref_len[b] : 0;  // R2 <= 0: s < R2 never holds
    if (m >= query_len[b] || n == 0) {
      pad_row(K, od, oi, lane);
      continue;
    }
    const float* X = packed + 3 * b * Np;
    scan_row(X, X + Np, X + 2 * Np, n, query.at(b, m, 0), query.at(b, m, 1), query.at(b, m, 2), R2,
             K, od, oi, lane);
  }
}

// ------------------------------------------------------------------------------------------------
// Grid

enum GridMode : int { kEmpty = 0, kScan = 1, kGrid = 2 };

struct GridParams {
  double lo[3];
  double h;
  double inv_h;  // cells per unit length: a multiply, not a division, per coordinate
  int64_t dims[3];
  int64_t cell_off;
  int mode;
};

// Cell coordinate along one axis, in double: monotone in v and accurate enough (dims <= 2^21,
// relative error ~2^-52) that two values closer than h (1 - 1e-5) never land two cells apart.
// The same function serves points and queries.
__device__ __forceinline__ double cell_coord(float v, double lo, double inv_h) {
  return floor((static_cast<double>(v) - lo) * inv_h);
}

// Decomposition: one thread per batch entry (tiny).
__global__ void grid_params_kernel(int64_t B, const unsigned* __restrict__ bmin,
                                   const unsigned* __restrict__ bmax,
                                   const int64_t* __restrict__ cell_off, double rr,
                                   GridParams* __restrict__ out) {
  const int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (b >= B) return;
  GridParams g{};
  g.cell_off = cell_off[b];
  g.mode = kEmpty;
  g.h = 1.0;
  g.inv_h = 1.0;
  g.dims[0] = g.dims[1] = g.dims[2] = 1;
  if (bmin[3 * b] != 0xFFFFFFFFu) {  // some finite point
    double ext[3];
    for (int a = 0; a < 3; ++a) {
      g.lo[a] = static_cast<double>(from_ordered_bits(bmin[3 * b + a]));
      ext[a] = static_cast<double>(from_ordered_bits(bmax[3 * b + a])) - g.lo[a];
    }
    const double cap = static_cast<double>(cell_off[b + 1] - cell_off[b]);
    double h = rr;
    for (int a = 0; a < 3; ++a) h = fmax(h, ext[a] / (GridPolicy::kMaxDim - 1.0));
    h = fmax(h, cbrt(ext[0] * ext[1] * ext[2] / cap));
    for (;;) {
      double cells = 1.0;
      const double inv = 1.0 / h;
      for (int a = 0; a < 3; ++a) cells *= floor(ext[a] * inv) + 1.0;
      if (cells <= cap) break;
      h *= 1.25;
    }
    g.h = h;
    g.inv_h = 1.0 / h;
    double cells = 1.0;
    for (int a = 0; a < 3; ++a) {
      g.dims[a] = static_cast<int64_t>(floor(ext[a] * g.inv_h)) + 1;
      cells *= static_cast<double>(g.dims[a]);
    }
    g.mode = cells < static_cast<double>(GridPolicy::kMinCells) ? kScan : kGrid;
  }
  out[b] = g;
}

// Decomposition: one thread per reference slot p = b * N + j (grid-stride).
template <class KeyT>
__global__ void cell_keys_kernel(const float* __restrict__ packed, int64_t B, int64_t N, int64_t Np,
                                 const int64_t* __restrict__ ref_len,
                                 const GridParams* __restrict__ params, KeyT invalid,
                                 KeyT* __restrict__ keys, KeyT* __restrict__ vals) {
  const int64_t P = B * N;
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < P;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = p / N, j = p - b * N;
    KeyT key = invalid;
    if (j < ref_len[b] && params[b].mode == kGrid) {
      const GridParams& g = params[b];
      const float* X = packed + 3 * b * Np;
      const float v[3] = {X[j], X[Np + j], X[2 * Np + j]};
      if (finite3(v[0], v[1], v[2])) {  // a non-finite point never matches: left out
        int64_t c[3];
        for (int a = 0; a < 3; ++a) {
          const double t = fmin(fmax(cell_coord(v[a], g.lo[a], g.inv_h), 0.0),
                                static_cast<double>(g.dims[a] - 1));
          c[a] = static_cast<int64_t>(t);
        }
        key = static_cast<KeyT>(g.cell_off + (c[2] * g.dims[1] + c[1]) * g.dims[0] + c[0]);
      }
    }
    keys[p] = key;
    vals[p] = static_cast<KeyT>(p);
  }
}

// start[c] = first sorted position with key >= c, for c in [0, total].
// Decomposition: one thread per cell, binary search (cells may be far apart: no serial fill).
template <class KeyT>
__global__ void cell_start_kernel(const KeyT* __restrict__ keys, int64_t P, int64_t total,
                                  int64_t* __restrict__ start) {
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c <= total;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t lo = 0, hi = P;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (static_cast<int64_t>(keys[mid]) < c) lo = mid + 1;
      else hi = mid;
    }
    start[c] = lo;
  }
}

// Sorted points as (x, y, z, index bits), one 16-byte load per candidate.
// Decomposition: one thread per sorted position.
template <class KeyT>
__global__ void gather_kernel(const KeyT* __restrict__ keys, const KeyT* __restrict__ vals,
                              int64_t P, KeyT invalid, int64_t N, int64_t Np,
                              const float* __restrict__ packed, float4* __restrict__ pts) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < P;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (keys[i] == invalid) continue;
    const int64_t p = static_cast<int64_t>(vals[i]), b = p / N, j = p - b * N;
    const float* X = packed + 3 * b * Np;
    pts[i] = make_float4(X[j], X[Np + j], X[2 * Np + j], __int_as_float(static_cast<int>(j)));
  }
}

// Sorts buf[0, count) ascending (count <= CAP), padding to a power of two with ~0.
template <int CAP>
__device__ __forceinline__ void warp_bitonic_sort(uint64_t* buf, int count, int lane) {
  int L = 32;
  while (L < count) L <<= 1;
  for (int t = count + lane; t < L; t += 32) buf[t] = ~0ull;
  __syncwarp();
  for (int k = 2; k <= L; k <<= 1) {
    for (int jj = k >> 1; jj > 0; jj >>= 1) {
      for (int t = lane; t < (L >> 1); t += 32) {
        const int i = 2 * t - (t & (jj - 1)), l = i + jj;
        const uint64_t a = buf[i], c = buf[l];
        if ((a > c) == ((i & k) == 0)) {
          buf[i] = c;
          buf[l] = a;
        }
      }
      __syncwarp();
    }
  }
}

// One warp per query row: filter the 3x3x3 cells around the query's cell, keep the K smallest
// matching indices. A match packs as (index << 32 | bits of s) so integer order is index order.
// The buffer holds CAP >= K + 32 entries; when a ballot would overflow it, it is sorted and cut
// to K, and later candidates must beat the K-th index.
// Decomposition: one warp per query row (b, m), warps stride over the B*M rows.
template <int CAP>
__global__ void __launch_bounds__(GridPolicy::kWarpsPerBlock * 32, GridPolicy::kMinBlocksPerSm)
    grid_query_kernel(DevPoints query, int64_t B, int64_t M, int64_t K, int64_t Np,
                      const int64_t* __restrict__ query_len, const int64_t* __restrict__ ref_len,
                      const float* __restrict__ packed, const GridParams* __restrict__ params,
                      const int64_t* __restrict__ start, const float4* __restrict__ pts, float R2,
                      float* __restrict__ dist2, int64_t* __restrict__ idx) {
  __shared__ uint64_t smem[GridPolicy::kWarpsPerBlock][CAP];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned lt = (1u << lane) - 1u;
  uint64_t* buf = smem[warp];
  const int64_t warps = static_cast<int64_t>(gridDim.x) * GridPolicy::kWarpsPerBlock;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(GridPolicy::kWarpsPerBlock) + warp; i < B * M;
       i += warps) {
    const int64_t b = i / M, m = i - b * M;
    float* od = dist2 + i * K;
    int64_t* oi = idx + i * K;
    const int64_t n = ref_len[b];
    if (m >= query_len[b] || n == 0) {
      pad_row(K, od, oi, lane);
      continue;
    }
    const float qx = query.at(b, m, 0), qy = query.at(b, m, 1), qz = query.at(b, m, 2);
    const GridParams g = params[b];
    if (g.mode == kScan) {
      const float* X = packed + 3 * b * Np;
      scan_row(X, X + Np, X + 2 * Np, n, qx, qy, qz, R2, K, od, oi, lane);
      continue;
    }
    // R2 is finite here: a non-finite query gives s = inf or NaN, so nothing matches; and no
    // finite point means no match either.
    if (g.mode == kEmpty || !finite3(qx, qy, qz)) {
      pad_row(K, od, oi, lane);
      continue;
    }
    const float q[3] = {qx, qy, qz};
    int64_t c0[3], c1[3];
#pragma unroll
    for (int a = 0; a < 3; ++a) {
      const double t = fmin(fmax(cell_coord(q[a], g.lo[a], g.inv_h), -2.0),
                            static_cast<double>(g.dims[a] + 1));
      const int64_t c = static_cast<int64_t>(t);
      c0[a] = c - 1 > 0 ? c - 1 : 0;
      c1[a] = c + 1 < g.dims[a] - 1 ? c + 1 : g.dims[a] - 1;
    }
    int count = 0;
    uint32_t thr = 0x7FFFFFFFu;  // candidates need index < thr (indices < 2^31 - 1 here)
    for (int64_t z = c0[2]; z <= c1[2]; ++z) {
      for (int64_t y = c0[1]; y <= c1[1]; ++y) {
        const int64_t row = g.cell_off + (z * g.dims[1] + y) * g.dims[0];
        const int64_t p1 = start[row + c1[0] + 1];
        for (int64_t k0 = start[row + c0[0]]; k0 < p1; k0 += 32) {
          const int64_t k = k0 + lane;
          bool ok = false;
          float s = 0.0f;
          uint32_t j = 0;
          if (k < p1) {
            const float4 p = __ldg(pts + k);
            j = __float_as_uint(p.w);
            s = squared_distance3(qx, qy, qz, p.x, p.y, p.z);
            ok = s < R2 && j < thr;
          }
          unsigned msk = __ballot_sync(kFull, ok);
          if (count + __popc(msk) > CAP) {
            warp_bitonic_sort<CAP>(buf, count, lane);
            count = static_cast<int>(K);
            thr = static_cast<uint32_t>(buf[K - 1] >> 32);
            ok = ok && j < thr;
            msk = __ballot_sync(kFull, ok);
          }
          if (ok) buf[count + __popc(msk & lt)] = (static_cast<uint64_t>(j) << 32) | __float_as_uint(s);
          count += __popc(msk);
        }
      }
    }
    __syncwarp();
    warp_bitonic_sort<CAP>(buf, count, lane);
    const int64_t out = count < K ? count : K;
    for (int64_t t = lane; t < K; t += 32) {
      if (t < out) {
        const uint64_t v = buf[t];
        od[t] = __uint_as_float(static_cast<uint32_t>(v & 0xFFFFFFFFu));
        oi[t] = static_cast<int64_t>(v >> 32);
      } else {
        od[t] = 0.0f;
        oi[t] = -1;
      }
    }
    __syncwarp();  // buf is reused by the warp's next query
  }
}

template <int CAP>
void launch_grid_query(const CudaContext& ctx, const DevPoints& q, int64_t B, int64_t M, int64_t K,
                       int64_t Np, const int64_t* qlen, const int64_t* rlen, const float* packed,
                       const GridParams* params, const int64_t* start, const float4* pts, float R2,
                       float* dist2, int64_t* idx) {
  const dim3 grid(static_cast<unsigned>(
      std::min<int64_t>(ceil_div(B * M, GridPolicy::kWarpsPerBlock), FlatPolicy::kMaxBlocks)));
  detail::launch(ctx, grid_query_kernel<CAP>, grid, dim3(GridPolicy::kWarpsPerBlock * 32), 0, q, B,
                 M, K, Np, qlen, rlen, packed, params, start, pts, R2, dist2, idx);
}

template <class KeyT>
void grid_forward(const CudaContext& ctx, detail::Workspace& ws, const DevPoints& q, int64_t B,
                  int64_t M, int64_t N, int64_t Np, int64_t K, const LengthsView& ref_lengths,
                  const int64_t* qlen, const int64_t* rlen, const float* packed,
                  const unsigned* bmin, const unsigned* bmax, float R2, float* dist2,
                  int64_t* idx) {
  // Cell budget per batch entry, host-known so that every size is known without a sync.
  std::vector<int64_t> off(static_cast<size_t>(B + 1), 0);
  for (int64_t b = 0; b < B; ++b)
    off[b + 1] = off[b] + GridPolicy::kCellsPerPoint * ref_lengths.get(b, N) + GridPolicy::kExtraCells;
  const int64_t total = off[B], P = B * N;
  const int64_t* d_off = detail::upload_lengths(ctx, ws, LengthsView{off.data(), B + 1}, B + 1, 0);
  GridParams* params = ws.alloc<GridParams>(B);
  // Every match has exact distance below rr: s is within a relative 1e-6 of the exact squared
  // distance, up to an absolute underflow error far below kTiny.
  const double rr = std::sqrt(static_cast<double>(R2) + GridPolicy::kTiny) * (1.0 + GridPolicy::kMargin);
  detail::launch(ctx, grid_params_kernel, dim3(static_cast<unsigned>(ceil_div(B, 128))), dim3(128), 0,
                 B, bmin, bmax, d_off, rr, params);

  const KeyT invalid = static_cast<KeyT>(total);
  KeyT* keys = ws.alloc<KeyT>(P);
  KeyT* vals = ws.alloc<KeyT>(P);
  KeyT* keys_sorted = ws.alloc<KeyT>(P);
  KeyT* vals_sorted = ws.alloc<KeyT>(P);
  detail::launch(ctx, cell_keys_kernel<KeyT>, flat_grid(P, FlatPolicy::kThreads),
                 dim3(FlatPolicy::kThreads), 0, packed, B, N, Np, rlen, params, invalid, keys, vals);
  const int end_bit = bit_width(static_cast<uint64_t>(total));
  size_t temp_bytes = 0;
  PCOPS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys, keys_sorted, vals,
                                                   vals_sorted, P, 0, end_bit, detail::stream_of(ctx)));
  void* temp = ws.bytes(temp_bytes);
  PCOPS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys, keys_sorted, vals,
                                                   vals_sorted, P, 0, end_bit, detail::stream_of(ctx)));
  int64_t* start = ws.alloc<int64_t>(total + 1);
  detail::launch(ctx, cell_start_kernel<KeyT>, flat_grid(total + 1, FlatPolicy::kThreads),
                 dim3(FlatPolicy::kThreads), 0, keys_sorted, P, total, start);
  float4* pts = ws.alloc<float4>(P);
  detail::launch(ctx, gather_kernel<KeyT>, flat_grid(P, FlatPolicy::kThreads),
                 dim3(FlatPolicy::kThreads), 0, keys_sorted, vals_sorted, P, invalid, N, Np, packed,
                 pts);
  if (K <= 32)
    launch_grid_query<64>(ctx, q, B, M, K, Np, qlen, rlen, packed, params, start, pts, R2, dist2, idx);
  else if (K <= 64)
    launch_grid_query<128>(ctx, q, B, M, K, Np, qlen, rlen, packed, params, start, pts, R2, dist2, idx);
  else if (K <= 128)
    launch_grid_query<256>(ctx, q, B, M, K, Np, qlen, rlen, packed, params, start, pts, R2, dist2, idx);
  else
    launch_grid_query<512>(ctx, q, B, M, K, Np, qlen, rlen, packed, params, start, pts, R2, dist2, idx);
}

// ------------------------------------------------------------------------------------------------
// Backward

// Decomposition: one thread per query row, slots in order (the CPU's summation order).
__global__ void grad_query_kernel(DevPoints query, DevPoints ref, int64_t B, int64_t M, int64_t N,
                                  int64_t K, const int64_t* __restrict__ idx,
                                  const float* __restrict__ grad, float* __restrict__ grad_query) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < B * M;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = i / M, m = i - b * M;
    const float q[3] = {query.at(b, m, 0), query.at(b, m, 1), query.at(b, m, 2)};
    float g[3] = {0.0f, 0.0f, 0.0f};
    for (int64_t t = 0; t < K; ++t) {
      const int64_t j = idx[i * K + t];
      if (j < 0 || j >= N) continue;  // padding (j >= N is outside the contract: skipped)
      const float G2 = mul_rn(2.0f, grad[i * K + t]);
      for (int d = 0; d < 3; ++d) g[d] = add_rn(g[d], mul_rn(G2, sub_rn(q[d], ref.at(b, j, d))));
    }
    for (int d = 0; d < 3; ++d) grad_query[i * 3 + d] = g[d];
  }
}

// Key of a slot: b * N + j for a filled slot, `invalid` (= B * N) for padding.
// Decomposition: one thread per slot.
template <class KeyT>
__global__ void slot_keys_kernel(const int64_t* __restrict__ idx, int64_t E, int64_t M, int64_t N,
                                 int64_t K, KeyT invalid, KeyT* __restrict__ keys,
                                 KeyT* __restrict__ vals) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < E;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = idx[e];
    const int64_t b = (e / K) / M;
    keys[e] = (j >= 0 && j < N) ? static_cast<KeyT>(b * N + j) : invalid;
    vals[e] = static_cast<KeyT>(e);
  }
}

// Decomposition: one thread per reference p = b * N + j; its slots are a run of the stably sorted
// keys, already in (query, slot) order.
template <class KeyT>
__global__ void grad_ref_kernel(DevPoints query, DevPoints ref, int64_t B, int64_t M, int64_t N,
                                int64_t K, const KeyT* __restrict__ keys,
                                const KeyT* __restrict__ vals, int64_t E,
                                const float* __restrict__ grad, float* __restrict__ grad_ref) {
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < B * N;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t lo = 0, hi = E;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (static_cast<int64_t>(keys[mid]) < p) lo = mid + 1;
      else hi = mid;
    }
    const int64_t b = p / N, j = p - b * N;
    const float x[3] = {ref.at(b, j, 0), ref.at(b, j, 1), ref.at(b, j, 2)};
    float g[3] = {0.0f, 0.0f, 0.0f};
    for (int64_t k = lo; k < E && static_cast<int64_t>(keys[k]) == p; ++k) {
      const int64_t e = static_cast<int64_t>(vals[k]), m = e / K - b * M;
      const float G2 = mul_rn(2.0f, grad[e]);
      for (int d = 0; d < 3; ++d) g[d] = sub_rn(g[d], mul_rn(G2, sub_rn(query.at(b, m, d), x[d])));
    }
    for (int d = 0; d < 3; ++d) grad_ref[p * 3 + d] = g[d];
  }
}

template <class KeyT>
void grad_ref_sorted(const CudaContext& ctx, detail::Workspace& ws, const DevPoints& q,
                     const DevPoints& x, int64_t B, int64_t M, int64_t N, int64_t K,
                     const int64_t* idx, const float* grad, float* grad_ref) {
  const int64_t E = B * M * K, P = B * N;
  const KeyT invalid = static_cast<KeyT>(P);
  KeyT* keys = ws.alloc<KeyT>(E);
  KeyT* vals = ws.alloc<KeyT>(E);
  KeyT* keys_sorted = ws.alloc<KeyT>(E);
  KeyT* vals_sorted = ws.alloc<KeyT>(E);
  detail::launch(ctx, slot_keys_kernel<KeyT>, flat_grid(E, FlatPolicy::kThreads),
                 dim3(FlatPolicy::kThreads), 0, idx, E, M, N, K, invalid, keys, vals);
  const int end_bit = bit_width(static_cast<uint64_t>(P));
  size_t temp_bytes = 0;
  PCOPS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys, keys_sorted, vals,
                                                   vals_sorted, E, 0, end_bit, detail::stream_of(ctx)));
  void* temp = ws.bytes(temp_bytes);
  PCOPS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys, keys_sorted, vals,
                                                   vals_sorted, E, 0, end_bit, detail::stream_of(ctx)));
  detail::launch(ctx, grad_ref_kernel<KeyT>, flat_grid(P, FlatPolicy::kThreads),
                 dim3(FlatPolicy::kThreads), 0, q, x, B, M, N, K, keys_sorted, vals_sorted, E, grad,
                 grad_ref);
}

}  // namespace

void ball_query(const CudaContext& ctx, PointsView query, PointsView ref, LengthsView query_lengths,
                LengthsView ref_lengths, const BallQueryParams& params, float* dist2, int64_t* idx) {
  core::validate_ball_query(query, ref, query_lengths, ref_lengths, params);
  const int64_t K = params.max_neighbors, M = query.count, B = query.batch, N = ref.count;
  if (K == 0 || B * M == 0) return;
  const float R2 = core::ball_query_threshold(params.radius);
  // K <= 32, a cloud of at least 100k points queried densely: a SpatialIndex built for the call
  // (H200, all points querying, K = 32: 20 clusters + 10 % uniform at 1M points 120 -> 4.2 ms,
  // even clouds 0.8x-1.7x; docs/ops/spatial_index.md). Same results. PCOPS_CUDA_BALL_QUERY_INDEX
  // = always | never overrides.
  if (R2 > 0.0f && std::isfinite(R2) &&
      detail::IndexRoute("PCOPS_CUDA_BALL_QUERY_INDEX")(K, query_lengths, M, ref_lengths, N, B)) {
    const CudaContext c = detail::stream_ordered(ctx);
    SpatialIndex index;
    index.build(c, ref, ref_lengths, SpatialIndexParams{});
    index.ball_query(c, query, query_lengths, params.radius, K, dist2, idx);
    return;
  }
  detail::Workspace ws(ctx);
  const int64_t* qlen = detail::upload_lengths(ctx, ws, query_lengths, B, M);
  const int64_t* rlen = detail::upload_lengths(ctx, ws, ref_lengths, B, N);
  const DevPoints q = dev_points(query);

  double pairs = 0.0;
  int64_t refs = 0;
  for (int64_t b = 0; b < B; ++b) {
    pairs += static_cast<double>(query_lengths.get(b, M)) * static_cast<double>(ref_lengths.get(b, N));
    refs += ref_lengths.get(b, N);
  }
  const bool any = R2 > 0.0f && pairs > 0.0;
  const bool use_grid = any && std::isfinite(R2) && K <= GridPolicy::kMaxK &&
                        N < (int64_t{1} << 31) - 1 && pairs >= GridPolicy::kMinPairs;

  const int64_t Np = round_up4(std::max<int64_t>(N, 1));
  float* packed = nullptr;
  unsigned *bmin = nullptr, *bmax = nullptr;
  if (any) {
    packed = ws.alloc<float>(3 * B * Np);
    if (use_grid) {
      bmin = ws.alloc<unsigned>(3 * B);
      bmax = ws.alloc<unsigned>(3 * B);
      PCOPS_CUDA_CHECK(cudaMemsetAsync(bmin, 0xFF, 3 * B * sizeof(unsigned), detail::stream_of(ctx)));
      PCOPS_CUDA_CHECK(cudaMemsetAsync(bmax, 0x00, 3 * B * sizeof(unsigned), detail::stream_of(ctx)));
    }
    const int64_t per_batch = std::max<int64_t>(1, refs / std::max<int64_t>(B, 1));
    const dim3 grid(static_cast<unsigned>(std::clamp<int64_t>(
                        ceil_div(per_batch, PackPolicy::kThreads * 4), 1, PackPolicy::kMaxBlocksX)),
                    static_cast<unsigned>(std::min<int64_t>(B, 65535)));
    detail::launch(ctx, pack_kernel, grid, dim3(PackPolicy::kThreads), 0, dev_points(ref), B, N, Np,
                   rlen, packed, bmin, bmax);
  }
  if (use_grid) {
    const bool narrow = static_cast<uint64_t>(B * N) < 0xFFFFFFFFull &&
                        static_cast<uint64_t>(2 * refs + GridPolicy::kExtraCells * B) < 0xFFFFFFFFull;
    if (narrow)
      grid_forward<uint32_t>(ctx, ws, q, B, M, N, Np, K, ref_lengths, qlen, rlen, packed, bmin,
                             bmax, R2, dist2, idx);
    else
      grid_forward<uint64_t>(ctx, ws, q, B, M, N, Np, K, ref_lengths, qlen, rlen, packed, bmin,
                             bmax, R2, dist2, idx);
    return;
  }
  const dim3 grid(static_cast<unsigned>(
      std::min<int64_t>(ceil_div(B * M, ScanPolicy::kWarpsPerBlock), FlatPolicy::kMaxBlocks)));
  detail::launch(ctx, scan_kernel, grid, dim3(ScanPolicy::kWarpsPerBlock * 32), 0, q, B, M, K, Np,
                 qlen, rlen, packed, any ? R2 : 0.0f, dist2, idx);
}

void ball_query_backward(const CudaContext& ctx, PointsView query, PointsView ref,
                         const int64_t* idx, const float* grad_dist2, int64_t K, float* grad_query,
                         float* grad_ref) {
  const int64_t B = query.batch, M = query.count, N = ref.count;
  detail::Workspace ws(ctx);
  const DevPoints q = dev_points(query), x = dev_points(ref);
  const int64_t rows = B * M, E = rows * K, P = B * N;
  detail::launch(ctx, grad_query_kernel, flat_grid(rows, FlatPolicy::kThreads),
                 dim3(FlatPolicy::kThreads), 0, q, x, B, M, N, K, idx, grad_dist2, grad_query);
  if (P == 0) return;
  if (E == 0) {  // no slot: every reference gradient is +0.0f, as the CPU's initial value
    PCOPS_CUDA_CHECK(cudaMemsetAsync(grad_ref, 0, static_cast<size_t>(P) * 3 * sizeof(float),
                                     detail::stream_of(ctx)));
    return;
  }
  if (static_cast<uint64_t>(E) < 0xFFFFFFFFull && static_cast<uint64_t>(P) < 0xFFFFFFFFull)
    grad_ref_sorted<uint32_t>(ctx, ws, q, x, B, M, N, K, idx, grad_dist2, grad_ref);
  else
    grad_ref_sorted<uint64_t>(ctx, ws, q, x, B, M, N, K, idx, grad_dist2, grad_ref);
}

}  // namespace pcops::cuda
