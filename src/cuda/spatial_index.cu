// CUDA SpatialIndex (include/pcops/spatial_index.hpp, docs/ops/spatial_index.md).
//
// Build (per call, all clouds at once): the finite points' bounding box per cloud (ordered-int
// atomics), a key per point (cloud | non-finite flag | 48-bit Morton code), one CUB radix sort of
// (key, index) (stable: equal codes keep index order), the points gathered in that order as
// float4 (x, y, z, original index), then the tree level by level: leaves of 32 consecutive finite
// points, nodes of 32 children, each with its exact float32 box and its smallest original index.
// The levels are laid out for all points (the host never waits for the GPU); the count of finite
// points, known on the device after the sort, trims them there.
//
// Queries are sorted the same way (cloud, flag, Morton code of the cloud's box), so that queries
// near each other run together:
// - k <= 32 (ball query: K <= 32): one lane per query, a warp per 32 consecutive sorted queries.
//   Each lane keeps its best values sorted in registers. kNN first scans the three leaves around
//   the middle query's place in the sorted points (its Morton neighbours), so that every lane
//   starts with a bound near its k-th distance. The warp then walks the tree depth first,
//   nearest child (to the queries' centre) first, visiting a node only when its box meets the
//   union of the lanes' search boxes ([q - r, q + r], r from the lane's current threshold with a
//   margin that covers float32 rounding); a leaf is scanned when some lane cannot prove it beyond
//   its threshold (the rounding-safe double lower bound of the CPU), its 32 points staged in
//   shared memory for every lane.
// - larger k (and K): one warp per query, the same walk with the query's own bound, the warp's
//   lanes taking a node's 32 children or a leaf's 32 points, primitives::WarpTopK selecting.
// - k or K above 1024: the points are put back in index order and the dense operator runs.
// kNN values pack (key of s, index) and ball-query values (index, s), so integer order is the
// contract's order; a subtree is also skipped when its smallest index proves every value in it
// larger than the lane's k-th (kNN: only when that k-th key is 0, e.g. duplicates).
#include "pcops/spatial_index.hpp"

#include <cub/cub.cuh>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "common/distance.hpp"
#include "common/morton.hpp"
#include "cuda/common.cuh"
#include "cuda/primitives/ragged.cuh"
#include "cuda/primitives/warp_topk.cuh"
#include "pcops/ball_query.hpp"
#include "pcops/error.hpp"
#include "pcops/knn.hpp"

namespace pcops::cuda {
namespace {

using primitives::blocks_for;
using primitives::upload;
using primitives::WarpTopK;

constexpr int kLeaf = 32;          // points per leaf, children per node: a warp's width
constexpr int kMaxLevels = 8;      // 2^31 points: 2^26 leaves, 7 levels
constexpr int kLaneWarps = 4;      // warps per block of the lane-per-query kernels
constexpr int kMaxLaneK = 32;      // larger k: one warp per query
// One lane per query when queries * 8 >= points and queries >= 32768 (measured on an H200 at
// 20k-1M points: below that, one warp per query is faster).
constexpr int64_t kLaneDensity = 8;
constexpr int64_t kLaneMinQueries = 32768;
constexpr int64_t kMaxWarpK = 1024;  // larger k: the dense operators
constexpr int kThreads = 256;
constexpr uint64_t kEmpty = ~uint64_t{0};

// The rounding-safe pruning test of the CPU (src/cpu/knn_topk.hpp): every float32 s of a region
// whose exact squared distance is at least lb2 is > threshold (kNN) or >= R2 (ball query).
constexpr double kMargin = 1.0 - 1e-5;
constexpr double kTiny = 1e-30;
__device__ __forceinline__ bool beyond(double lb2, float threshold) {
  return lb2 > kTiny && lb2 * kMargin > static_cast<double>(threshold);
}
__device__ __forceinline__ bool beyond_radius(double lb2, float R2) {
  return lb2 > kTiny && lb2 * kMargin >= static_cast<double>(R2);
}
// A radius r with every point of float32 s <= t within r of the query on each axis (the exact
// squared distance is below t (1 + 2e-5) + 1e-30; float arithmetic rounded upwards).
__device__ __forceinline__ float search_radius(float t) {
  return __fadd_ru(__fsqrt_ru(__fmul_ru(t, 1.00004f)), 1.5e-15f);
}

__device__ __forceinline__ bool finite3(float a, float b, float c) {
  return (a - a) == 0.0f && (b - b) == 0.0f && (c - c) == 0.0f;
}

// Per cloud (device table).
struct CloudDesc {
  int64_t pbase;                 // its first sorted point
  int32_t n, finite;             // points; finite ones come first
  int32_t levels;                // tree levels (0: no finite point); the root is at levels - 1
  int32_t reserved;
  int64_t node[kMaxLevels];      // global node number of its first node of each level
  int32_t count[kMaxLevels];     // its nodes per level
};

// Morton quantisation of a cloud's box.
struct Quant {
  float lo[3], scale[3];
};

struct BoxScratch {
  int bmin[3], bmax[3];
};

__device__ __forceinline__ const float* point_ptr(const PointsView& v, int64_t b, int64_t n) {
  return v.data + b * v.stride_batch + n * v.stride_point;
}

// Key layout: cloud << (3 bits + 1) | non-finite << 3 bits | Morton code (bits per axis).
struct KeyLayout {
  int bits;   // per axis, <= 16
  int shift;  // 3 * bits + 1
  int end_bit;
};

__device__ __forceinline__ uint64_t point_key(const KeyLayout& L, const Quant& q, int64_t b, float x, float y,
                                              float z) {
  uint64_t key = static_cast<uint64_t>(b) << L.shift;
  if (!finite3(x, y, z)) return key | (uint64_t{1} << (3 * L.bits));
  const float v[3] = {x, y, z};
  const float top = static_cast<float>((1 << L.bits) - 1);
  uint64_t code = 0;
#pragma unroll
  for (int a = 0; a < 3; ++a) {
    float c = (v[a] - q.lo[a]) * q.scale[a];
    c = c > 0.0f ? (c < top ? c : top) : 0.0f;  // NaN (0 * inf) -> 0
    code |= common::spread_bits16(static_cast<uint64_t>(c)) << a;
  }
  return key | code;
}

// ---------------------------------------------------------------------------------------------
// Build kernels.

__global__ void init_box_kernel(BoxScratch* sc, int64_t B) {
  PCOPS_CUDA_GRID_STRIDE(b, B) {
    for (int a = 0; a < 3; ++a) {
      sc[b].bmin[a] = 0x7FFFFFFF;
      sc[b].bmax[a] = static_cast<int>(0x80000000u);
    }
  }
}

// Bounding box of each cloud's finite points: blockIdx.y strides over clouds, threads over points.
__global__ void bbox_kernel(PointsView pts, const int64_t* len, int64_t B, BoxScratch* sc) {
  for (int64_t b = blockIdx.y; b < B; b += gridDim.y) {
    const int64_t n = len[b];
    detail::OrderedBox3 box;
    for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < n; j += int64_t{gridDim.x} * blockDim.x) {
      const float* p = point_ptr(pts, b, j);
      const float x = p[0], y = p[pts.stride_dim], z = p[2 * pts.stride_dim];
      if (finite3(x, y, z)) box.add(x, y, z);
    }
    box.flush(sc[b].bmin, sc[b].bmax);
  }
}

__global__ void quant_kernel(const BoxScratch* sc, int64_t B, int bits, Quant* quant) {
  PCOPS_CUDA_GRID_STRIDE(b, B) {
    Quant q;
    const float cells = static_cast<float>(1 << bits);
    for (int a = 0; a < 3; ++a) {
      if (sc[b].bmin[a] <= sc[b].bmax[a]) {
        const float lo = detail::from_ordered_int(sc[b].bmin[a]), hi = detail::from_ordered_int(sc[b].bmax[a]);
        const float ext = hi - lo;  // may round to inf for huge boxes: scale 0, one cell
        q.lo[a] = lo;
        q.scale[a] = ext > 0.0f && ext < INFINITY ? cells / ext : 0.0f;
      } else {
        q.lo[a] = 0.0f;
        q.scale[a] = 0.0f;
      }
    }
    quant[b] = q;
  }
}

// Sort keys of rows (b, j < len[b]) at position base[b] + j: blockIdx.y strides over clouds. The
// build's points and a query call's queries alike.
__global__ void key_kernel(PointsView pts, const int64_t* len, const int64_t* base, int64_t B, KeyLayout L,
                           const Quant* quant, uint64_t* keys, uint32_t* vals) {
  for (int64_t b = blockIdx.y; b < B; b += gridDim.y) {
    const int64_t n = len[b];
    const Quant q = quant[b];
    for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < n; j += int64_t{gridDim.x} * blockDim.x) {
      const float* p = point_ptr(pts, b, j);
      keys[base[b] + j] = point_key(L, q, b, p[0], p[pts.stride_dim], p[2 * pts.stride_dim]);
      vals[base[b] + j] = static_cast<uint32_t>(j);
    }
  }
}

// The points in sorted order, and each cloud's count of finite points (where its non-finite run
// starts; clouds without one keep their n).
__global__ void gather_kernel(PointsView pts, const uint64_t* keys, const uint32_t* vals, int64_t P,
                              const int64_t* base, KeyLayout L, float4* out, CloudDesc* clouds) {
  PCOPS_CUDA_GRID_STRIDE(i, P) {
    const uint64_t key = keys[i];
    const int64_t b = static_cast<int64_t>(key >> L.shift);
    const uint32_t j = vals[i];
    const float* p = point_ptr(pts, b, j);
    out[i] = make_float4(p[0], p[pts.stride_dim], p[2 * pts.stride_dim], __uint_as_float(j));
    const bool nf = (key >> (3 * L.bits)) & 1u;
    if (nf && (i == base[b] || !((keys[i - 1] >> (3 * L.bits)) & 1u)))
      clouds[b].finite = static_cast<int32_t>(i - base[b]);
  }
}

// Node counts per level from the count of finite points (one thread per cloud). The host laid
// the levels out for all n points (no wait for the count); nodes past these counts stay unused.
__global__ void finalize_kernel(CloudDesc* clouds, int64_t B) {
  PCOPS_CUDA_GRID_STRIDE(b, B) {
    CloudDesc& d = clouds[b];
    int64_t cnt = (static_cast<int64_t>(d.finite) + kLeaf - 1) / kLeaf;
    int l = 0;
    while (cnt > 0) {
      d.count[l++] = static_cast<int32_t>(cnt);
      if (cnt == 1) break;
      cnt = (cnt + kLeaf - 1) / kLeaf;
    }
    for (int r = l; r < kMaxLevels; ++r) d.count[r] = 0;
    d.levels = l;
  }
}

__device__ __forceinline__ void warp_box(bool valid, float x, float y, float z, uint32_t id, float4& lo,
                                         float4& hi) {
  float l[3] = {valid ? x : INFINITY, valid ? y : INFINITY, valid ? z : INFINITY};
  float h[3] = {valid ? x : -INFINITY, valid ? y : -INFINITY, valid ? z : -INFINITY};
  uint32_t m = valid ? id : 0xFFFFFFFFu;
  for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
    for (int a = 0; a < 3; ++a) {
      l[a] = fminf(l[a], __shfl_xor_sync(0xFFFFFFFFu, l[a], o));
      h[a] = fmaxf(h[a], __shfl_xor_sync(0xFFFFFFFFu, h[a], o));
    }
    m = min(m, __shfl_xor_sync(0xFFFFFFFFu, m, o));
  }
  lo = make_float4(l[0], l[1], l[2], __uint_as_float(m));
  hi = make_float4(h[0], h[1], h[2], 0.0f);
}

// Leaf boxes: one warp per leaf of the level-0 numbering (prefix: the clouds' first leaves).
__global__ void leaf_box_kernel(const float4* pts, const CloudDesc* clouds, const int64_t* prefix, int64_t B,
                                int64_t leaves, float4* box) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t{gridDim.x} * (blockDim.x >> 5);
  for (int64_t g = blockIdx.x * int64_t{blockDim.x >> 5} + (threadIdx.x >> 5); g < leaves; g += warps) {
    const int64_t c = primitives::cloud_of(prefix, B, g);
    const CloudDesc& d = clouds[c];
    if (g - prefix[c] >= d.count[0]) continue;  // past the cloud's finite points (warp-uniform)
    const int64_t first = d.pbase + (g - prefix[c]) * kLeaf + lane;
    const bool valid = first < d.pbase + d.finite;
    float4 p = valid ? pts[first] : make_float4(0, 0, 0, 0);
    float4 lo, hi;
    warp_box(valid, p.x, p.y, p.z, __float_as_uint(p.w), lo, hi);
    if (lane == 0) {
      box[2 * (d.node[0] + g - prefix[c])] = lo;
      box[2 * (d.node[0] + g - prefix[c]) + 1] = hi;
    }
  }
}

// Boxes of level l >= 1 from level l - 1: one warp per node.
__global__ void node_box_kernel(const CloudDesc* clouds, const int64_t* prefix, int64_t B, int64_t nodes, int l,
                                float4* box) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t{gridDim.x} * (blockDim.x >> 5);
  for (int64_t g = blockIdx.x * int64_t{blockDim.x >> 5} + (threadIdx.x >> 5); g < nodes; g += warps) {
    const int64_t c = primitives::cloud_of(prefix, B, g);
    const CloudDesc& d = clouds[c];
    const int64_t i = g - prefix[c];
    if (i >= d.count[l]) continue;  // warp-uniform
    const int64_t child = i * kLeaf + lane;
    const bool valid = child < d.count[l - 1];
    float4 clo = make_float4(0, 0, 0, 0), chi = clo;
    if (valid) {
      clo = box[2 * (d.node[l - 1] + child)];
      chi = box[2 * (d.node[l - 1] + child) + 1];
    }
    float l3[3] = {valid ? clo.x : INFINITY, valid ? clo.y : INFINITY, valid ? clo.z : INFINITY};
    float h3[3] = {valid ? chi.x : -INFINITY, valid ? chi.y : -INFINITY, valid ? chi.z : -INFINITY};
    uint32_t m = valid ? __float_as_uint(clo.w) : 0xFFFFFFFFu;
    for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
      for (int a = 0; a < 3; ++a) {
        l3[a] = fminf(l3[a], __shfl_xor_sync(0xFFFFFFFFu, l3[a], o));
        h3[a] = fmaxf(h3[a], __shfl_xor_sync(0xFFFFFFFFu, h3[a], o));
      }
      m = min(m, __shfl_xor_sync(0xFFFFFFFFu, m, o));
    }
    if (lane == 0) {
      box[2 * (d.node[l] + i)] = make_float4(l3[0], l3[1], l3[2], __uint_as_float(m));
      box[2 * (d.node[l] + i) + 1] = make_float4(h3[0], h3[1], h3[2], 0.0f);
    }
  }
}

// Points back in index order ([B, N, 3] contiguous) for the dense fallback of large k.
__global__ void unsort_kernel(const float4* pts, const int64_t* base, int64_t B, int64_t P, int64_t N, float* out) {
  PCOPS_CUDA_GRID_STRIDE(i, P) {
    const int64_t b = primitives::cloud_of(base, B, i);
    const float4 p = pts[i];
    float* o = out + (b * N + __float_as_uint(p.w)) * 3;
    o[0] = p.x;
    o[1] = p.y;
    o[2] = p.z;
  }
}

// ---------------------------------------------------------------------------------------------
// Queries.

struct Tree {
  const float4* pts;
  const float4* box;
  const CloudDesc* clouds;
  const Quant* quant;
  KeyLayout layout;
};

struct QueryArgs {
  PointsView query;
  int64_t M, k, B;
  const int64_t* qoff;    // [B + 1]: each cloud's first sorted query
  const int64_t* cprefix; // [B + 1]: each cloud's first chunk of 32 sorted queries (lane kernels)
  int64_t chunks;
  const uint32_t* order;  // sorted queries' m
  float R2;               // ball query
  int64_t skip;           // ball query: query m never matches reference m + skip (kNoSkip: none)
  float* dist;
  int64_t* idx;
};

__device__ __forceinline__ double box_gap(const float4& lo, const float4& hi, double qx, double qy, double qz) {
  const double dx = qx < lo.x ? lo.x - qx : (qx > hi.x ? qx - hi.x : 0.0);
  const double dy = qy < lo.y ? lo.y - qy : (qy > hi.y ? qy - hi.y : 0.0);
  const double dz = qz < lo.z ? lo.z - qz : (qz > hi.z ? qz - hi.z : 0.0);
  return dx * dx + dy * dy + dz * dz;
}

__device__ __forceinline__ uint64_t knn_value(float s, uint32_t id) {
  return (static_cast<uint64_t>(__float_as_uint(common::knn_key(s))) << 32) | id;
}
__device__ __forceinline__ uint64_t ball_value(float s, uint32_t id) {
  return (static_cast<uint64_t>(id) << 32) | __float_as_uint(s);
}

// A lane's best values, ascending, in registers: slots [0, KC - k) hold 0 (a sentinel below
// every stored value, which are value + 1), the last slot is the admission threshold.
template <int KC>
struct LaneTop {
  uint64_t v[KC];
  __device__ __forceinline__ void init(int k) {
#pragma unroll
    for (int i = 0; i < KC; ++i) v[i] = i < KC - k ? 0 : kEmpty;
  }
  __device__ __forceinline__ void insert(uint64_t x) {  // x < v[KC - 1]
#pragma unroll
    for (int i = KC - 1; i > 0; --i) v[i] = x < v[i - 1] ? v[i - 1] : (x < v[i] ? x : v[i]);
    v[0] = x < v[0] ? x : v[0];
  }
  __device__ __forceinline__ uint64_t last() const { return v[KC - 1]; }
};

// Stack entries: level << 28 | node within the cloud's level.
__device__ __forceinline__ int entry(int level, int64_t i) { return (level << 28) | static_cast<int>(i); }

// Pushes the lanes' `need` children (lane = child), nearest (smallest key) on top.
__device__ __forceinline__ void push_children(int* stack, int& sp, bool need, float key, int e) {
  const int lane = threadIdx.x & 31;
  const unsigned m = __ballot_sync(0xFFFFFFFFu, need);
  int rank = 0;
  for (int j = 0; j < 32; ++j) {
    const float kj = __shfl_sync(0xFFFFFFFFu, key, j);
    if (((m >> j) & 1u) && (kj > key || (kj == key && j > lane))) ++rank;
  }
  if (need) stack[sp + rank] = e;
  sp += __popc(m);
  __syncwarp();
}

template <int KC, bool kBall>
__global__ void __launch_bounds__(32 * kLaneWarps) lane_kernel(QueryArgs a, Tree t) {
  __shared__ int stacks[kLaneWarps][kMaxLevels * 32];
  __shared__ float4 leaf_points[kLaneWarps][kLeaf];
  int* stack = stacks[threadIdx.x >> 5];
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t{gridDim.x} * kLaneWarps;
  const int k = static_cast<int>(a.k);
  for (int64_t w = blockIdx.x * int64_t{kLaneWarps} + (threadIdx.x >> 5); w < a.chunks; w += warps) {
    const int64_t b = primitives::cloud_of(a.cprefix, a.B, w);
    const CloudDesc& d = t.clouds[b];
    const int64_t first = (w - a.cprefix[b]) * 32 + lane;
    const bool in = first < a.qoff[b + 1] - a.qoff[b];
    const int64_t m = in ? a.order[a.qoff[b] + first] : 0;
    float qx = 0.0f, qy = 0.0f, qz = 0.0f;
    if (in) {
      const float* p = point_ptr(a.query, b, m);
      qx = p[0];
      qy = p[a.query.stride_dim];
      qz = p[2 * a.query.stride_dim];
    }
    const int64_t out = (b * a.M + m) * a.k;
    // Ball query: the reference this query must not match (its own row), as an index (or none).
    const int64_t own = kBall && a.skip != SpatialIndex::kNoSkip ? m + a.skip : -1;
    bool active = in && finite3(qx, qy, qz) && (!kBall || a.R2 > 0.0f);
    if (in && !active) {  // kNN: every key +inf, the first k by index; ball query: no match
      for (int s = 0; s < k; ++s) {
        a.dist[out + s] = kBall ? 0.0f : INFINITY;
        a.idx[out + s] = !kBall && s < d.n ? s : -1;
      }
    }
    LaneTop<KC> top;
    top.init(k);
    // The centre of the active queries (the walk's nearest-first order).
    double c[3];
    {
      float l[3] = {active ? qx : INFINITY, active ? qy : INFINITY, active ? qz : INFINITY};
      float h[3] = {active ? qx : -INFINITY, active ? qy : -INFINITY, active ? qz : -INFINITY};
      for (int o = 16; o > 0; o >>= 1)
        for (int x = 0; x < 3; ++x) {
          l[x] = fminf(l[x], __shfl_xor_sync(0xFFFFFFFFu, l[x], o));
          h[x] = fmaxf(h[x], __shfl_xor_sync(0xFFFFFFFFu, h[x], o));
        }
      for (int x = 0; x < 3; ++x) c[x] = 0.5 * (static_cast<double>(l[x]) + h[x]);
    }
    const unsigned any_active = __ballot_sync(0xFFFFFFFFu, active);
    // The lane's threshold: kNN, the key of its k-th value (+inf until k are kept); ball, R2.
    const auto thr_key = [&]() -> float {
      if (kBall) return a.R2;
      const uint64_t v = top.last();
      return v == kEmpty ? INFINITY : __uint_as_float(static_cast<uint32_t>((v - 1) >> 32));
    };
    // The largest index a lane still accepts at any distance: a subtree whose smallest index is
    // larger holds nothing for it (kNN: only once its k-th key is 0; ball: once K are kept).
    const auto id_limit = [&]() -> uint32_t {
      if (!active) return 0u;
      const uint64_t v = top.last();
      if (v == kEmpty) return 0xFFFFFFFFu;
      if (kBall) return static_cast<uint32_t>((v - 1) >> 32);
      return ((v - 1) >> 32) == 0 ? static_cast<uint32_t>(v - 1) : 0xFFFFFFFFu;
    };
    // The union of the lanes' search boxes (float, rounded outwards) and the largest id limit.
    float R[6];
    uint32_t idmax = 0;
    const auto region = [&] {
      const float r = active ? search_radius(thr_key()) : 0.0f;
      float v[6] = {active ? __fsub_rd(qx, r) : INFINITY, active ? __fsub_rd(qy, r) : INFINITY,
                    active ? __fsub_rd(qz, r) : INFINITY, active ? __fadd_ru(qx, r) : -INFINITY,
                    active ? __fadd_ru(qy, r) : -INFINITY, active ? __fadd_ru(qz, r) : -INFINITY};
      uint32_t lim = id_limit();
      for (int o = 16; o > 0; o >>= 1) {
        for (int x = 0; x < 3; ++x) {
          v[x] = fminf(v[x], __shfl_xor_sync(0xFFFFFFFFu, v[x], o));
          v[3 + x] = fmaxf(v[3 + x], __shfl_xor_sync(0xFFFFFFFFu, v[3 + x], o));
        }
        lim = max(lim, __shfl_xor_sync(0xFFFFFFFFu, lim, o));
      }
      for (int x = 0; x < 6; ++x) R[x] = v[x];
      idmax = lim;
    };
    const auto meets = [&](const float4& lo, const float4& hi) {
      return lo.x <= R[3] && lo.y <= R[4] && lo.z <= R[5] && hi.x >= R[0] && hi.y >= R[1] && hi.z >= R[2] &&
             __float_as_uint(lo.w) <= idmax;
    };
    // Scans points [p0, p0 + cnt) (cnt <= 32) for the lanes that `need` them, staged in shared
    // memory: first each lane marks the points that pass its threshold as it stands (a cheap,
    // uniform pass), then inserts only those (each lane its own few).
    float4* staged = leaf_points[threadIdx.x >> 5];
    // Returns whether any lane kept a new value.
    const auto scan = [&](int64_t p0, int cnt, bool need) -> bool {
      __syncwarp();
      if (lane < cnt) staged[lane] = t.pts[p0 + lane];
      __syncwarp();
      unsigned mask = 0;
      if (need) {
        const float tk = thr_key();
        for (int j = 0; j < cnt; ++j) {
          const float4 p = staged[j];
          const float s = common::squared_distance3(qx, qy, qz, p.x, p.y, p.z);
          const bool pass = kBall ? s < a.R2 && static_cast<int64_t>(__float_as_uint(p.w)) != own
                                  : !(s > tk);  // NaN passes; the insertion decides
          mask |= static_cast<unsigned>(pass) << j;
        }
      }
      bool kept = false;
      while (mask != 0u) {
        const int j = __ffs(mask) - 1;
        mask &= mask - 1u;
        const float4 p = staged[j];
        const float s = common::squared_distance3(qx, qy, qz, p.x, p.y, p.z);
        const uint64_t v = (kBall ? ball_value(s, __float_as_uint(p.w)) : knn_value(s, __float_as_uint(p.w))) + 1;
        if (v < top.last()) {
          top.insert(v);
          kept = true;
        }
      }
      return __ballot_sync(0xFFFFFFFFu, kept) != 0u;
    };
    // kNN: the warp first scans the leaves around one query's place in the sorted points (the
    // leaves holding the chunk's own neighbours when the queries are the points), so that every
    // lane starts the walk with a bound close to its k-th distance; the walk skips those leaves.
    int64_t seed0 = 0, seed1 = -1;
    if (any_active != 0u && d.levels > 0) {
      region();
      if (!kBall) {
        const int src = ((any_active >> 16) & 1u) ? 16 : __ffs(any_active) - 1;
        const uint64_t qk =
            point_key(t.layout, t.quant[b], b, __shfl_sync(0xFFFFFFFFu, qx, src), __shfl_sync(0xFFFFFFFFu, qy, src),
                      __shfl_sync(0xFFFFFFFFu, qz, src));
        const auto key_at = [&](int64_t i) {
          const float4 p = t.pts[d.pbase + i];
          return point_key(t.layout, t.quant[b], b, p.x, p.y, p.z);
        };
        // Its place: the first finite point whose key is not below qk, 32 probes a step.
        int64_t lo = 0, hi = d.finite;
        while (hi - lo > 32) {
          const int64_t step = (hi - lo + 31) / 32;
          const int64_t i = lo + lane * step;
          const int c = __popc(__ballot_sync(0xFFFFFFFFu, i < hi && key_at(i) < qk));
          if (c == 0) {
            hi = lo;
            break;
          }
          lo += (c - 1) * step;
          hi = min(hi, lo + step);
        }
        if (hi > lo) lo += __popc(__ballot_sync(0xFFFFFFFFu, lo + lane < hi && key_at(lo + lane) < qk));
        const int64_t leaves = d.count[0];
        const int64_t f = min(lo / kLeaf, leaves - 1);
        seed0 = max(int64_t{0}, f - 1);
        seed1 = min(leaves - 1, f + 1);
        for (int64_t s = seed0; s <= seed1; ++s) {
          const int64_t p0 = d.pbase + s * kLeaf;
          scan(p0, static_cast<int>(min(int64_t{kLeaf}, d.pbase + d.finite - p0)), active);
        }
        region();
      }
      int sp = 0;
      if (lane == 0) stack[0] = entry(d.levels - 1, 0);
      sp = 1;
      __syncwarp();
      while (sp > 0) {
        const int e = stack[--sp];
        __syncwarp();
        const int l = e >> 28;
        const int64_t i = e & 0x0FFFFFFF;
        if (l == 0 && i >= seed0 && i <= seed1) continue;  // scanned first
        const int64_t g = d.node[l] + i;
        const float4 lo = t.box[2 * g], hi = t.box[2 * g + 1];
        if (!meets(lo, hi)) continue;
        // Each lane's own test: the union box is loose when a chunk straddles a jump of the
        // Morton curve, and must not make the warp walk the space between its queries.
        const bool need = active && __float_as_uint(lo.w) <= id_limit() &&
                          !(kBall ? beyond_radius(box_gap(lo, hi, qx, qy, qz), a.R2)
                                  : beyond(box_gap(lo, hi, qx, qy, qz), thr_key()));
        if (__ballot_sync(0xFFFFFFFFu, need) == 0u) continue;
        if (l == 0) {
          const int64_t p0 = d.pbase + i * kLeaf;
          if (scan(p0, static_cast<int>(min(int64_t{kLeaf}, d.pbase + d.finite - p0)), need)) region();
          continue;
        }
        const int64_t child = i * kLeaf + lane;
        bool push = child < d.count[l - 1];
        float key = 0.0f;
        if (push) {
          const int64_t cg = d.node[l - 1] + child;
          const float4 clo = t.box[2 * cg], chi = t.box[2 * cg + 1];
          push = meets(clo, chi);
          key = static_cast<float>(box_gap(clo, chi, c[0], c[1], c[2]));
        }
        push_children(stack, sp, push, key, entry(l - 1, child));
      }
    }
    // kNN: points with a non-finite coordinate (key +inf, by index) while a lane has room.
    if (!kBall && d.finite < d.n) {
      // Finite points far apart may have s = +inf too: those rank by index among the rest.
      const uint64_t v = top.last();
      const bool room = active && (v == kEmpty || ((v - 1) >> 32) >= 0x7f800000u);
      if (__ballot_sync(0xFFFFFFFFu, room) != 0u)
        for (int64_t p0 = d.pbase + d.finite; p0 < d.pbase + d.n; p0 += kLeaf)
          scan(p0, static_cast<int>(min(int64_t{kLeaf}, d.pbase + d.n - p0)), room);
    }
    if (active) {
#pragma unroll
      for (int s = 0; s < KC; ++s) {
        if (s < KC - k) continue;
        const uint64_t v = top.v[s];
        const int64_t o = out + s - (KC - k);
        if (v == kEmpty) {
          a.dist[o] = kBall ? 0.0f : INFINITY;
          a.idx[o] = -1;
        } else if (kBall) {
          a.dist[o] = __uint_as_float(static_cast<uint32_t>(v - 1));
          a.idx[o] = static_cast<int64_t>((v - 1) >> 32);
        } else {
          a.dist[o] = __fsqrt_rn(__uint_as_float(static_cast<uint32_t>((v - 1) >> 32)));
          a.idx[o] = static_cast<int64_t>((v - 1) & 0xFFFFFFFFu);
        }
      }
    }
  }
}

// One warp per query (k or K in (32, 1024]): the same walk with the query's own bound.
template <bool kBall>
__global__ void __launch_bounds__(256) warp_kernel(QueryArgs a, Tree t, int half) {
  extern __shared__ uint64_t smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wpb = blockDim.x >> 5;
  uint64_t* buf = smem + static_cast<int64_t>(warp) * (2 * half + kMaxLevels * 16);
  int* stack = reinterpret_cast<int*>(buf + 2 * half);
  WarpTopK top{buf, half, static_cast<int>(a.k)};
  const int64_t Q = a.qoff[a.B];
  for (int64_t i = blockIdx.x * int64_t{wpb} + warp; i < Q; i += int64_t{gridDim.x} * wpb) {
    const int64_t b = primitives::cloud_of(a.qoff, a.B, i);
    const CloudDesc& d = t.clouds[b];
    const int64_t m = a.order[i];
    const float* qp = point_ptr(a.query, b, m);
    const float qx = qp[0], qy = qp[a.query.stride_dim], qz = qp[2 * a.query.stride_dim];
    const int64_t out = (b * a.M + m) * a.k;
    const int64_t own = kBall && a.skip != SpatialIndex::kNoSkip ? m + a.skip : -1;  // see lane_kernel
    if (!finite3(qx, qy, qz) || (kBall && !(a.R2 > 0.0f))) {
      for (int64_t s = lane; s < a.k; s += 32) {
        a.dist[out + s] = kBall ? 0.0f : INFINITY;
        a.idx[out + s] = !kBall && s < d.n ? s : -1;
      }
      continue;
    }
    top.reset();
    const auto thr_key = [&]() -> float { return kBall ? a.R2 : top.threshold_key(); };
    const auto id_limit = [&]() -> uint32_t {
      if (top.thr == WarpTopK::kEmpty) return 0xFFFFFFFFu;
      if (kBall) return static_cast<uint32_t>(top.thr >> 32);
      return (top.thr >> 32) == 0 ? static_cast<uint32_t>(top.thr) : 0xFFFFFFFFu;
    };
    const auto skip = [&](const float4& lo, const float4& hi) {
      const double gp = box_gap(lo, hi, qx, qy, qz);
      return __float_as_uint(lo.w) > id_limit() || (kBall ? beyond_radius(gp, a.R2) : beyond(gp, thr_key()));
    };
    const auto offer = [&](int64_t p0, int cnt) {
      const bool valid = lane < cnt;
      const float4 p = valid ? t.pts[p0 + lane] : make_float4(0, 0, 0, 0);
      const float s = common::squared_distance3(qx, qy, qz, p.x, p.y, p.z);
      const uint32_t id = __float_as_uint(p.w);
      if (kBall) top.offer(ball_value(s, id), valid && s < a.R2 && static_cast<int64_t>(id) != own);
      else top.offer(knn_value(s, id), valid);
    };
    if (d.levels > 0) {
      int sp = 1;
      if (lane == 0) stack[0] = entry(d.levels - 1, 0);
      __syncwarp();
      while (sp > 0) {
        const int e = stack[--sp];
        __syncwarp();
        const int l = e >> 28;
        const int64_t n = e & 0x0FFFFFFF;
        const int64_t g = d.node[l] + n;
        const float4 lo = t.box[2 * g], hi = t.box[2 * g + 1];
        if (skip(lo, hi)) continue;
        if (l == 0) {
          const int64_t p0 = d.pbase + n * kLeaf;
          offer(p0, static_cast<int>(min(int64_t{kLeaf}, d.pbase + d.finite - p0)));
          continue;
        }
        const int64_t child = n * kLeaf + lane;
        bool need = child < d.count[l - 1];
        float key = 0.0f;
        if (need) {
          const int64_t cg = d.node[l - 1] + child;
          const float4 clo = t.box[2 * cg], chi = t.box[2 * cg + 1];
          need = !skip(clo, chi);
          key = static_cast<float>(box_gap(clo, chi, qx, qy, qz));
        }
        push_children(stack, sp, need, key, entry(l - 1, child));
      }
    }
    if (!kBall && d.finite < d.n) {
      top.merge();
      if (isinf(top.threshold_key()))  // room left, or a k-th key of +inf (see lane_kernel)
        for (int64_t p0 = d.pbase + d.finite; p0 < d.pbase + d.n; p0 += kLeaf)
          offer(p0, static_cast<int>(min(int64_t{kLeaf}, d.pbase + d.n - p0)));
    }
    top.merge();
    const uint64_t* v = top.result();
    for (int64_t s = lane; s < a.k; s += 32) {
      const uint64_t e = v[s];
      if (e == WarpTopK::kEmpty) {
        a.dist[out + s] = kBall ? 0.0f : INFINITY;
        a.idx[out + s] = -1;
      } else if (kBall) {
        a.dist[out + s] = __uint_as_float(static_cast<uint32_t>(e));
        a.idx[out + s] = static_cast<int64_t>(e >> 32);
      } else {
        a.dist[out + s] = __fsqrt_rn(__uint_as_float(static_cast<uint32_t>(e >> 32)));
        a.idx[out + s] = static_cast<int64_t>(e & 0xFFFFFFFFu);
      }
    }
  }
}

// Slots of queries past query_lengths: one thread per slot.
__global__ void pad_kernel(const int64_t* qlen, int64_t total, int64_t M, int64_t k, float fill, float* dist,
                           int64_t* idx) {
  PCOPS_CUDA_GRID_STRIDE(s, total) {
    const int64_t row = s / k, b = row / M, m = row - b * M;
    if (m >= qlen[b]) {
      dist[s] = fill;
      idx[s] = -1;
    }
  }
}

KeyLayout key_layout(int64_t B) {
  int cb = 0;
  while ((int64_t{1} << cb) < B) ++cb;
  KeyLayout L;
  L.bits = std::min(16, (63 - cb) / 3);
  L.shift = 3 * L.bits + 1;
  L.end_bit = L.shift + cb;
  return L;
}

// Sorts a batch of key/value pairs (CUB radix sort, stable).
void sort_pairs(const CudaContext& ctx, detail::Workspace& ws, const uint64_t* keys, uint64_t* keys_out,
                const uint32_t* vals, uint32_t* vals_out, int64_t n, int end_bit) {
  const cudaStream_t stream = detail::stream_of(ctx);
  size_t bytes = 0;
  PCOPS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, keys, keys_out, vals, vals_out, n, 0, end_bit,
                                                   stream));
  void* temp = ws.bytes(bytes);
  PCOPS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, bytes, keys, keys_out, vals, vals_out, n, 0, end_bit,
                                                   stream));
}

}  // namespace

struct SpatialIndex::Impl {
  std::function<void(void*)> deallocate;
  std::vector<void*> blocks;
  float4* pts = nullptr;
  float4* box = nullptr;
  CloudDesc* clouds = nullptr;
  Quant* quant = nullptr;
  int64_t* base = nullptr;  // [B + 1] first sorted point of each cloud
  std::vector<int64_t> n, lengths;
  int64_t count = 0, points = 0, nodes = 0;
  bool has_lengths = false;
  KeyLayout layout{};

  void* alloc(const CudaContext& ctx, size_t bytes) {
    bytes = std::max<size_t>(bytes, 1);
    void* p = nullptr;
    if (ctx.allocate) {
      p = ctx.allocate(bytes);
      PCOPS_CHECK(p != nullptr, Value, "SpatialIndex: device allocation of ", bytes, " bytes failed");
    } else {
      PCOPS_CUDA_CHECK(cudaMalloc(&p, bytes));
    }
    blocks.push_back(p);
    return p;
  }
  void release() {
    for (void* p : blocks) {
      if (deallocate) deallocate(p);
      else cudaFree(p);
    }
    blocks.clear();
  }
  ~Impl() { release(); }
};

SpatialIndex::SpatialIndex() : impl_(std::make_unique<Impl>()) {}
SpatialIndex::~SpatialIndex() = default;
SpatialIndex::SpatialIndex(SpatialIndex&&) noexcept = default;
SpatialIndex& SpatialIndex::operator=(SpatialIndex&&) noexcept = default;

int64_t SpatialIndex::batch() const { return static_cast<int64_t>(impl_->n.size()); }
int64_t SpatialIndex::count() const { return impl_->count; }
bool SpatialIndex::has_lengths() const { return impl_->has_lengths; }
int64_t SpatialIndex::cloud_size(int64_t b) const { return impl_->n[static_cast<size_t>(b)]; }
int64_t SpatialIndex::memory_bytes() const {
  const int64_t B = batch();
  return impl_->points * 16 + impl_->nodes * 32 + B * static_cast<int64_t>(sizeof(CloudDesc) + sizeof(Quant)) +
         (B + 1) * 8;
}

void SpatialIndex::build(const CudaContext& ctx, PointsView points, LengthsView lengths,
                         const SpatialIndexParams& params) {
  core::validate_index_build(points, lengths, params);
  const int64_t B = points.batch;
  std::vector<int64_t> n(static_cast<size_t>(B)), base(static_cast<size_t>(B) + 1, 0);
  for (int64_t b = 0; b < B; ++b) {
    n[b] = lengths.get(b, points.count);
    base[b + 1] = base[b] + n[b];
  }
  const int64_t P = base[B];
  PCOPS_CHECK(P < (int64_t{1} << 40), Value, "points: too many points in all (", P, ")");

  auto fresh = std::make_unique<Impl>();
  Impl& I = *fresh;
  I.deallocate = ctx.deallocate;
  I.n = n;
  I.count = points.count;
  I.has_lengths = lengths.present();
  if (I.has_lengths) I.lengths.assign(lengths.data, lengths.data + B);
  I.points = P;
  I.layout = key_layout(std::max<int64_t>(B, 1));
  const KeyLayout L = I.layout;

  I.base = static_cast<int64_t*>(I.alloc(ctx, static_cast<size_t>(B + 1) * 8));
  I.quant = static_cast<Quant*>(I.alloc(ctx, static_cast<size_t>(std::max<int64_t>(B, 1)) * sizeof(Quant)));
  I.clouds = static_cast<CloudDesc*>(I.alloc(ctx, static_cast<size_t>(std::max<int64_t>(B, 1)) * sizeof(CloudDesc)));
  I.pts = static_cast<float4*>(I.alloc(ctx, static_cast<size_t>(std::max<int64_t>(P, 1)) * sizeof(float4)));
  detail::copy_to_device_async(ctx, I.base, base.data(), base.size() * 8);
  // Levels laid out for all n points of each cloud (leaves of 32, nodes of 32 children up to one
  // root): no wait for the count of finite points, which finalize_kernel applies on the device.
  std::vector<CloudDesc> desc(static_cast<size_t>(B));
  std::vector<std::vector<int64_t>> prefix(kMaxLevels, std::vector<int64_t>(static_cast<size_t>(B) + 1, 0));
  int levels = 0;
  for (int64_t b = 0; b < B; ++b) {
    CloudDesc& d = desc[b];
    d = CloudDesc{};
    d.pbase = base[b];
    d.n = static_cast<int32_t>(n[b]);
    d.finite = d.n;
    int64_t cnt = detail::ceil_div(n[b], kLeaf);
    int l = 0;
    while (cnt > 0) {
      d.count[l++] = static_cast<int32_t>(cnt);
      if (cnt == 1) break;
      cnt = detail::ceil_div(cnt, kLeaf);
    }
    d.levels = l;
    levels = std::max(levels, l);
  }
  int64_t total = 0;
  std::vector<int64_t> level_total(kMaxLevels, 0);
  for (int l = 0; l < kMaxLevels; ++l) {
    for (int64_t b = 0; b < B; ++b) {
      desc[b].node[l] = total + prefix[l][b];
      prefix[l][b + 1] = prefix[l][b] + (l < desc[b].levels ? desc[b].count[l] : 0);
    }
    level_total[l] = prefix[l][B];
    total += level_total[l];
  }
  I.nodes = total;
  I.box = static_cast<float4*>(I.alloc(ctx, static_cast<size_t>(std::max<int64_t>(total, 1)) * 2 * sizeof(float4)));
  if (B > 0) {
    detail::copy_to_device_async(ctx, I.clouds, desc.data(), desc.size() * sizeof(CloudDesc));
    detail::Workspace ws(ctx);
    const int64_t* d_len = upload(ctx, ws, n);
    BoxScratch* sc = ws.alloc<BoxScratch>(B);
    const int64_t max_n = *std::max_element(n.begin(), n.end());
    const dim3 pgrid(static_cast<unsigned>(blocks_for(max_n, kThreads, 4096)),
                     static_cast<unsigned>(std::min<int64_t>(B, 65535)));
    const dim3 cgrid(detail::grid_blocks(B, kThreads));
    detail::launch(ctx, init_box_kernel, cgrid, dim3(kThreads), 0, sc, B);
    detail::launch(ctx, bbox_kernel, pgrid, dim3(kThreads), 0, points, d_len, B, sc);
    detail::launch(ctx, quant_kernel, cgrid, dim3(kThreads), 0, sc, B, L.bits, I.quant);
    if (P > 0) {
      uint64_t* keys = ws.alloc<uint64_t>(P);
      uint64_t* keys_s = ws.alloc<uint64_t>(P);
      uint32_t* vals = ws.alloc<uint32_t>(P);
      uint32_t* vals_s = ws.alloc<uint32_t>(P);
      detail::launch(ctx, key_kernel, pgrid, dim3(kThreads), 0, points, d_len, I.base, B, L, I.quant, keys, vals);
      sort_pairs(ctx, ws, keys, keys_s, vals, vals_s, P, L.end_bit);
      detail::launch(ctx, gather_kernel, dim3(detail::grid_blocks(P, kThreads)), dim3(kThreads), 0, points,
                     keys_s, vals_s, P, I.base, L, I.pts, I.clouds);
    }
    detail::launch(ctx, finalize_kernel, cgrid, dim3(kThreads), 0, I.clouds, B);
    if (total > 0) {
      std::vector<int64_t> flat;
      for (int l = 0; l < levels; ++l) flat.insert(flat.end(), prefix[l].begin(), prefix[l].end());
      const int64_t* d_prefix = upload(ctx, ws, flat);
      const int wpb = kThreads / 32;
      detail::launch(ctx, leaf_box_kernel, dim3(static_cast<unsigned>(blocks_for(level_total[0], wpb))),
                     dim3(kThreads), 0, I.pts, I.clouds, d_prefix, B, level_total[0], I.box);
      for (int l = 1; l < levels; ++l)
        detail::launch(ctx, node_box_kernel, dim3(static_cast<unsigned>(blocks_for(level_total[l], wpb))),
                       dim3(kThreads), 0, I.clouds, d_prefix + l * (B + 1), B, level_total[l], l, I.box);
    }
  }
  impl_ = std::move(fresh);
}

namespace {

// The sorted queries of a call: order[i] = m of the i-th query, clouds' ranges qoff, chunks.
struct SortedQueries {
  uint32_t* order = nullptr;
  int64_t* qoff = nullptr;
  int64_t* cprefix = nullptr;
  int64_t total = 0, chunks = 0;
};

SortedQueries sort_queries(const CudaContext& ctx, detail::Workspace& ws, const SpatialIndex::Impl& I,
                           const PointsView& query, const std::vector<int64_t>& qlen) {
  const int64_t B = static_cast<int64_t>(qlen.size());
  std::vector<int64_t> qoff(static_cast<size_t>(B) + 1, 0), cprefix(static_cast<size_t>(B) + 1, 0);
  int64_t max_m = 0;
  for (int64_t b = 0; b < B; ++b) {
    qoff[b + 1] = qoff[b] + qlen[b];
    cprefix[b + 1] = cprefix[b] + detail::ceil_div(qlen[b], 32);
    max_m = std::max(max_m, qlen[b]);
  }
  SortedQueries s;
  s.total = qoff[B];
  s.chunks = cprefix[B];
  s.qoff = upload(ctx, ws, qoff);
  s.cprefix = upload(ctx, ws, cprefix);
  const int64_t* d_qlen = upload(ctx, ws, qlen);
  uint64_t* keys = ws.alloc<uint64_t>(s.total);
  uint64_t* keys_s = ws.alloc<uint64_t>(s.total);
  uint32_t* vals = ws.alloc<uint32_t>(s.total);
  s.order = ws.alloc<uint32_t>(s.total);
  const dim3 grid(static_cast<unsigned>(blocks_for(max_m, kThreads, 4096)),
                  static_cast<unsigned>(std::min<int64_t>(B, 65535)));
  detail::launch(ctx, key_kernel, grid, dim3(kThreads), 0, query, d_qlen, s.qoff, B, I.layout, I.quant, keys, vals);
  sort_pairs(ctx, ws, keys, keys_s, vals, s.order, s.total, I.layout.end_bit);
  return s;
}

template <bool kBall>
void run_search(const CudaContext& ctx, const SpatialIndex::Impl& I, const PointsView& query,
                const std::vector<int64_t>& qlen, int64_t k, float R2, int64_t skip, float* dist, int64_t* idx) {
  detail::Workspace ws(ctx);
  const SortedQueries s = sort_queries(ctx, ws, I, query, qlen);
  if (s.total == 0) return;
  QueryArgs a{query, query.count, k, static_cast<int64_t>(qlen.size()), s.qoff, s.cprefix, s.chunks, s.order,
              R2, skip, dist, idx};
  const Tree t{I.pts, I.box, I.clouds, I.quant, I.layout};
  // One lane per query when the queries are dense enough that a warp's 32 consecutive (sorted)
  // queries lie close together; sparse queries take one warp each. PCOPS_CUDA_INDEX_KERNEL=lane|warp
  // overrides (measured: docs/ops/spatial_index.md).
  bool lane = k <= kMaxLaneK && s.total * kLaneDensity >= I.points && s.total >= kLaneMinQueries;
  if (const char* e = std::getenv("PCOPS_CUDA_INDEX_KERNEL"); e != nullptr && *e != 0) {
    if (std::strcmp(e, "lane") == 0) lane = k <= kMaxLaneK;
    if (std::strcmp(e, "warp") == 0) lane = false;
  }
  if (lane) {
    const dim3 grid(static_cast<unsigned>(blocks_for(s.chunks, kLaneWarps)));
    const dim3 block(32 * kLaneWarps);
    if (k == 1) detail::launch(ctx, lane_kernel<1, kBall>, grid, block, 0, a, t);
    else if (k <= 4) detail::launch(ctx, lane_kernel<4, kBall>, grid, block, 0, a, t);
    else if (k <= 8) detail::launch(ctx, lane_kernel<8, kBall>, grid, block, 0, a, t);
    else if (k <= 16) detail::launch(ctx, lane_kernel<16, kBall>, grid, block, 0, a, t);
    else detail::launch(ctx, lane_kernel<32, kBall>, grid, block, 0, a, t);
    return;
  }
  const int half = WarpTopK::half_for(k);
  const int per_warp = (2 * half + kMaxLevels * 16) * static_cast<int>(sizeof(uint64_t));
  const int warps = std::clamp(32768 / per_warp, 1, 8);
  const dim3 grid(static_cast<unsigned>(blocks_for(s.total, warps)));
  detail::launch(ctx, warp_kernel<kBall>, grid, dim3(32 * warps), static_cast<size_t>(warps) * per_warp, a, t, half);
}

// The indexed points back in index order, [B, count, 3] (the dense fallback of large k).
float* unsorted_points(const CudaContext& ctx, detail::Workspace& ws, const SpatialIndex::Impl& I) {
  const int64_t B = static_cast<int64_t>(I.n.size());
  float* out = ws.alloc<float>(B * I.count * 3);
  detail::launch(ctx, unsort_kernel, dim3(detail::grid_blocks(I.points, kThreads)), dim3(kThreads), 0, I.pts,
                 I.base, B, I.points, I.count, out);
  return out;
}

void pad_rows(const CudaContext& ctx, detail::Workspace& ws, const std::vector<int64_t>& qlen, int64_t M,
              int64_t k, float fill, float* dist, int64_t* idx) {
  const int64_t B = static_cast<int64_t>(qlen.size());
  bool any = false;
  for (const int64_t l : qlen) any = any || l < M;
  if (!any) return;
  const int64_t* d_qlen = upload(ctx, ws, qlen);
  detail::launch(ctx, pad_kernel, dim3(detail::grid_blocks(B * M * k, kThreads)), dim3(kThreads), 0, d_qlen,
                 B * M * k, M, k, fill, dist, idx);
}

}  // namespace

void SpatialIndex::knn(const CudaContext& ctx, PointsView query, LengthsView query_lengths, int64_t k, float* dist,
                       int64_t* idx) const {
  core::validate_index_query(batch(), query, query_lengths);
  PCOPS_CHECK(k >= 0, Value, "k: expected >= 0, got ", k);
  PCOPS_CHECK(impl_->has_lengths || k <= impl_->count, Value, "k: expected <= ", impl_->count,
              " (the number of indexed points), got ", k);
  const int64_t M = query.count, B = query.batch;
  if (k == 0 || B * M == 0) return;
  std::vector<int64_t> qlen(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) qlen[b] = query_lengths.get(b, M);
  const Impl& I = *impl_;
  if (k > kMaxWarpK) {
    detail::Workspace ws(ctx);
    const float* ref = unsorted_points(ctx, ws, I);
    cuda::knn(ctx, query, PointsView::contiguous(ref, B, I.count, 3), query_lengths,
              I.has_lengths ? LengthsView{I.lengths.data(), B} : LengthsView{}, KnnParams{k}, dist, idx);
    return;
  }
  {
    detail::Workspace ws(ctx);
    pad_rows(ctx, ws, qlen, M, k, INFINITY, dist, idx);
  }
  run_search<false>(ctx, I, query, qlen, k, 0.0f, kNoSkip, dist, idx);
}

void SpatialIndex::ball_query(const CudaContext& ctx, PointsView query, LengthsView query_lengths, float radius,
                              int64_t K, float* dist2, int64_t* idx) const {
  PCOPS_CHECK(std::isfinite(radius) && radius >= 0.0f, Value, "radius: expected finite and >= 0, got ", radius);
  if (K > kMaxWarpK) {  // the dense operator, which takes the radius
    core::validate_index_query(batch(), query, query_lengths);
    PCOPS_CHECK(K >= 0, Value, "K: expected >= 0, got ", K);
    const int64_t B = query.batch;
    if (B * query.count == 0) return;
    const Impl& I = *impl_;
    detail::Workspace ws(ctx);
    const float* ref = unsorted_points(ctx, ws, I);
    BallQueryParams p;
    p.radius = radius;
    p.max_neighbors = K;
    cuda::ball_query(ctx, query, PointsView::contiguous(ref, B, I.count, 3), query_lengths,
                     I.has_lengths ? LengthsView{I.lengths.data(), B} : LengthsView{}, p, dist2, idx);
    return;
  }
  ball_query_below(ctx, query, query_lengths, core::ball_query_threshold(radius), K, dist2, idx);
}

void SpatialIndex::ball_query_below(const CudaContext& ctx, PointsView query, LengthsView query_lengths, float R2,
                                    int64_t K, float* dist2, int64_t* idx, int64_t skip_offset) const {
  core::validate_index_query(batch(), query, query_lengths);
  PCOPS_CHECK(R2 >= 0.0f, Value, "R2: expected >= 0, got ", R2);
  PCOPS_CHECK(K >= 0, Value, "K: expected >= 0, got ", K);
  PCOPS_CHECK(K <= kMaxWarpK, Value, "K: at most ", kMaxWarpK, " with a given threshold, got ", K);
  const int64_t M = query.count, B = query.batch;
  if (K == 0 || B * M == 0) return;
  std::vector<int64_t> qlen(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) qlen[b] = query_lengths.get(b, M);
  const Impl& I = *impl_;
  {
    detail::Workspace ws(ctx);
    pad_rows(ctx, ws, qlen, M, K, 0.0f, dist2, idx);
  }
  run_search<true>(ctx, I, query, qlen, K, R2, skip_offset, dist2, idx);
}

}  // namespace pcops::cuda
