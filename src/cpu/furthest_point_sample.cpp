// CPU furthest point sampling: two exact paths, both bitwise equal to the definition (one pass
// over the cloud per step, see include/pcops/furthest_point_sample.hpp).
//
// - Tree path (D = 3, every coordinate finite with |x| <= 2^60, so no squared distance can
//   overflow): the eligible points are sorted along a Morton curve and cut into leaves of kLeaf
//   points (structure of arrays); an implicit binary tree of bounding boxes sits over the leaves.
//   Every node keeps the largest m_j of its points and the smallest index attaining it. A new
//   centre descends only into nodes whose box lower bound is below the node's largest m_j: the
//   lower bound is computed with the contract's own operations in the same order on the box gap,
//   and rounding is monotone, so it never exceeds the s of a point inside the box and a skipped
//   node provably keeps every m_j. The next centre is the root's (largest m, smallest index).
// - Plain path (any D, any values): one vectorised pass over the eligible points per step.
// Parallel decomposition: the clouds of a batch run concurrently, one cloud per task; the steps
// of one cloud are sequential.
//
// Points that skip_near_origin makes ineligible are dropped up front: their m_j never influences
// a choice, and only eligible points (plus the start) ever become centres.
#include "pcops/furthest_point_sample.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "common/distance.hpp"

#pragma GCC diagnostic ignored "-Wpsabi"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(PCOPS_NO_MULTIVERSION)
#define PCOPS_FPS_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define PCOPS_FPS_CLONES
#endif

namespace pcops::cpu {
namespace {
#ifdef PCOPS_FPS_STATS
int64_t g_stats[4];
#endif

constexpr int kLanes = 16;
constexpr int kLeaf = 32;  // points per leaf, a multiple of kLanes
static_assert(kLeaf % kLanes == 0);
// Coordinates up to 2^60 in magnitude keep every squared distance finite:
// 3 * (2^61)^2 = 3 * 2^122 < FLT_MAX.
constexpr float kTreeMaxAbs = 1.152921504606846976e18f;  // 2^60
// Below this many eligible points the plain pass is as fast as building the tree.
constexpr int64_t kTreeMinPoints = 1024;

typedef float vfloat __attribute__((vector_size(kLanes * sizeof(float))));
typedef int32_t vint __attribute__((vector_size(kLanes * sizeof(int32_t))));

template <class T>
struct AlignedBuffer {
  std::vector<T> store;
  T* data = nullptr;
  void resize(size_t n) {
    store.assign(n + 64 / sizeof(T), T{});
    auto p = reinterpret_cast<uintptr_t>(store.data());
    data = reinterpret_cast<T*>((p + 63) & ~uintptr_t(63));
  }
  T& operator[](size_t i) { return data[i]; }
};

inline bool eligible_point(const PointsView& P, int64_t b, int64_t j) {
  const float x = P.at(b, j, 0), y = P.at(b, j, 1), z = P.at(b, j, 2);
  return ((x * x + y * y) + z * z) > 1e-3f;
}

// ---------------------------------------------------------------------------------------------
// Tree path.

struct Node {
  float lo[3];
  float hi[3];
  float maxm;   // largest m_j of the node's points (-1 for an empty node)
  int32_t arg;  // smallest original index attaining maxm
};
static_assert(sizeof(Node) == 32);

struct Tree {
  int64_t size = 0;         // eligible points
  int64_t leaves = 0;       // leaves holding points
  int64_t first_leaf = 1;   // heap index of leaf 0 (a power of two)
  AlignedBuffer<float> x, y, z, m;
  AlignedBuffer<int32_t> idx;
  std::vector<Node> nodes;  // heap order, nodes[1] is the root
  std::vector<int32_t> stack, visited;
};

inline uint32_t spread_bits10(uint32_t v) {
  v &= 0x3ffu;
  v = (v | (v << 16)) & 0x030000ffu;
  v = (v | (v << 8)) & 0x0300f00fu;
  v = (v | (v << 4)) & 0x030c30c3u;
  v = (v | (v << 2)) & 0x09249249u;
  return v;
}

// Builds the tree over the eligible points of cloud b (n points). Returns false when the cloud
// does not qualify (non-finite or huge coordinates, or too few eligible points).
bool build_tree(const PointsView& P, int64_t b, int64_t n, int64_t start, bool skip, Tree& T) {
  if (P.dim != 3 || n >= (int64_t{1} << 31) - 1) return false;
  for (int d = 0; d < 3; ++d) {
    const float v = P.at(b, start, d);
    if (!(std::fabs(v) <= kTreeMaxAbs)) return false;
  }
  // Pass 1: eligibility, bounds, finiteness.
  float lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
  std::vector<uint64_t> keys;
  keys.reserve(static_cast<size_t>(n));
  bool ok = true;
  for (int64_t j = 0; j < n; ++j) {
    if (skip && !eligible_point(P, b, j)) continue;
    const float v[3] = {P.at(b, j, 0), P.at(b, j, 1), P.at(b, j, 2)};
    for (int d = 0; d < 3; ++d) {
      ok &= std::fabs(v[d]) <= kTreeMaxAbs;
      lo[d] = std::min(lo[d], v[d]);
      hi[d] = std::max(hi[d], v[d]);
    }
    keys.push_back(static_cast<uint64_t>(j));
  }
  if (!ok) return false;
  const int64_t E = static_cast<int64_t>(keys.size());
  if (E < kTreeMinPoints) return false;

  // Morton codes (10 bits per axis) in the upper word, the original index in the lower word;
  // the codes only shape the buckets, exactness never depends on them.
  float scale[3];
  for (int d = 0; d < 3; ++d) {
    const double ext = static_cast<double>(hi[d]) - static_cast<double>(lo[d]);
    scale[d] = ext > 0 ? static_cast<float>(1023.99 / ext) : 0.0f;
  }
  for (auto& k : keys) {
    const int64_t j = static_cast<int64_t>(k);
    uint32_t code = 0;
    for (int d = 0; d < 3; ++d) {
      float q = (P.at(b, j, d) - lo[d]) * scale[d];
      q = std::min(std::max(q, 0.0f), 1023.0f);
      code |= spread_bits10(static_cast<uint32_t>(q)) << (2 - d);
    }
    k |= static_cast<uint64_t>(code) << 32;
  }
  // LSD radix sort on the 30 code bits, 3 passes of 10 bits (stable: equal codes keep index order).
  {
    std::vector<uint64_t> tmp(keys.size());
    std::vector<uint32_t> hist(3 * 1024, 0);
    for (uint64_t k : keys)
      for (int p = 0; p < 3; ++p) ++hist[p * 1024 + ((k >> (32 + 10 * p)) & 1023)];
    for (int p = 0; p < 3; ++p) {
      uint32_t* h = &hist[p * 1024];
      uint32_t sum = 0;
      for (int i = 0; i < 1024; ++i) {
        const uint32_t c = h[i];
        h[i] = sum;
        sum += c;
      }
      for (uint64_t k : keys) tmp[h[(k >> (32 + 10 * p)) & 1023]++] = k;
      keys.swap(tmp);
    }
  }

  // Leaves in structure-of-arrays form; padding slots repeat the last point with m = -1.
  T.size = E;
  T.leaves = (E + kLeaf - 1) / kLeaf;
  const int64_t padded = T.leaves * kLeaf;
  T.x.resize(padded);
  T.y.resize(padded);
  T.z.resize(padded);
  T.m.resize(padded);
  T.idx.resize(padded);
  for (int64_t p = 0; p < padded; ++p) {
    const int64_t j = static_cast<int64_t>(keys[std::min(p, E - 1)] & 0xffffffffu);
    T.x[p] = P.at(b, j, 0);
    T.y[p] = P.at(b, j, 1);
    T.z[p] = P.at(b, j, 2);
    T.m[p] = p < E ? INFINITY : -1.0f;
    T.idx[p] = p < E ? static_cast<int32_t>(j) : std::numeric_limits<int32_t>::max();
  }
  T.first_leaf = 1;
  int depth = 0;
  while (T.first_leaf < T.leaves) {
    T.first_leaf *= 2;
    ++depth;
  }
  T.nodes.assign(2 * T.first_leaf, Node{{INFINITY, INFINITY, INFINITY}, {-INFINITY, -INFINITY, -INFINITY},
                                        -1.0f, std::numeric_limits<int32_t>::max()});
  for (int64_t l = 0; l < T.leaves; ++l) {
    Node& nd = T.nodes[T.first_leaf + l];
    const int64_t e = std::min((l + 1) * kLeaf, E);
    for (int64_t p = l * kLeaf; p < e; ++p) {
      const float v[3] = {T.x[p], T.y[p], T.z[p]};
      for (int d = 0; d < 3; ++d) {
        nd.lo[d] = std::min(nd.lo[d], v[d]);
        nd.hi[d] = std::max(nd.hi[d], v[d]);
      }
    }
    nd.maxm = INFINITY;
    nd.arg = T.idx[l * kLeaf];  // smallest index of the leaf is found by the first update
  }
  for (int64_t i = T.first_leaf - 1; i >= 1; --i) {
    Node& nd = T.nodes[i];
    const Node &a = T.nodes[2 * i], &c = T.nodes[2 * i + 1];
    for (int d = 0; d < 3; ++d) {
      nd.lo[d] = std::min(a.lo[d], c.lo[d]);
      nd.hi[d] = std::max(a.hi[d], c.hi[d]);
    }
    nd.maxm = std::max(a.maxm, c.maxm);
  }
  T.stack.resize(2 * static_cast<size_t>(depth) + 4);
  T.visited.resize(static_cast<size_t>(T.first_leaf) + 1);
  return true;
}

// Runs the sampling steps on a built tree: o[0..steps) receives the centres.
PCOPS_FPS_CLONES
void tree_steps(Tree& T, const PointsView& P, int64_t b, int64_t start, int64_t steps, int64_t* o) {
  Node* nodes = T.nodes.data();
  int32_t* stack = T.stack.data();
  int32_t* visited = T.visited.data();
  const int64_t first_leaf = T.first_leaf;
  int64_t c = start;
  for (int64_t t = 0; t < steps; ++t) {
    o[t] = c;
    if (t + 1 == steps) break;
    const float cx = P.at(b, c, 0), cy = P.at(b, c, 1), cz = P.at(b, c, 2);
    int sp = 0, nv = 0;
    stack[sp++] = 1;
    while (sp > 0) {
      const int32_t i = stack[--sp];
      Node& nd = nodes[i];
      // Lower bound of s over the box: the contract's operations on the gap, same order.
      const float gx = std::max(std::max(nd.lo[0] - cx, cx - nd.hi[0]), 0.0f);
      const float gy = std::max(std::max(nd.lo[1] - cy, cy - nd.hi[1]), 0.0f);
      const float gz = std::max(std::max(nd.lo[2] - cz, cz - nd.hi[2]), 0.0f);
      const float lb = (gx * gx + gy * gy) + gz * gz;
      if (!(nd.maxm > lb)) continue;
#ifdef PCOPS_FPS_STATS
      ++g_stats[i < first_leaf ? 0 : 1];
#endif
      if (i < first_leaf) {
        visited[nv++] = i;
        stack[sp++] = 2 * i + 1;
        stack[sp++] = 2 * i;
        continue;
      }
      // Leaf: m_j = min(m_j, s_j), then (max m, smallest index attaining it).
      const int64_t base = (i - first_leaf) * kLeaf;
      const vfloat vcx = vfloat{} + cx, vcy = vfloat{} + cy, vcz = vfloat{} + cz;
      vfloat mv[kLeaf / kLanes];
      vfloat best = vfloat{} - 1.0f;
      for (int k = 0; k < kLeaf / kLanes; ++k) {
        const int64_t p = base + k * kLanes;
        const vfloat dx = vcx - *reinterpret_cast<const vfloat*>(T.x.data + p);
        const vfloat dy = vcy - *reinterpret_cast<const vfloat*>(T.y.data + p);
        const vfloat dz = vcz - *reinterpret_cast<const vfloat*>(T.z.data + p);
        const vfloat s = (dx * dx + dy * dy) + dz * dz;
        vfloat& mp = *reinterpret_cast<vfloat*>(T.m.data + p);
        const vfloat mm = s < mp ? s : mp;
        mp = mm;
        mv[k] = mm;
        best = mm > best ? mm : best;
      }
      float mx = best[0];
      for (int l = 1; l < kLanes; ++l) mx = std::max(mx, best[l]);
      vint bi = vint{} + std::numeric_limits<int32_t>::max();
      for (int k = 0; k < kLeaf / kLanes; ++k) {
        const vint id = *reinterpret_cast<const vint*>(T.idx.data + base + k * kLanes);
        bi = (mv[k] == mx) & (id < bi) ? id : bi;
      }
      int32_t arg = bi[0];
      for (int l = 1; l < kLanes; ++l) arg = std::min(arg, bi[l]);
      nd.maxm = mx;
      nd.arg = arg;
    }
    // Children before parents: the visited internal nodes in reverse order.
    for (int k = nv - 1; k >= 0; --k) {
      const int32_t i = visited[k];
      const Node &a = nodes[2 * i], &d = nodes[2 * i + 1];
      const bool take_a = a.maxm > d.maxm || (a.maxm == d.maxm && a.arg < d.arg);
      nodes[i].maxm = take_a ? a.maxm : d.maxm;
      nodes[i].arg = take_a ? a.arg : d.arg;
    }
    c = nodes[1].arg;
    if (nodes[1].maxm == 0.0f) {
      // Every m_j is 0: no later centre changes anything, so this index repeats.
      for (int64_t u = t + 1; u < steps; ++u) o[u] = c;
      break;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Plain path.

struct Plain {
  int64_t size = 0;
  int64_t padded = 0;
  AlignedBuffer<float> coords;  // D arrays of `padded` floats
  AlignedBuffer<float> m;
  std::vector<int64_t> idx;     // original index of each position (empty: identity)
};

void build_plain(const PointsView& P, int64_t b, int64_t n, bool skip, Plain& S) {
  std::vector<int64_t> keep;
  if (skip) {
    for (int64_t j = 0; j < n; ++j)
      if (eligible_point(P, b, j)) keep.push_back(j);
  }
  const bool identity = !skip;
  const int64_t E = identity ? n : static_cast<int64_t>(keep.size());
  S.size = E;
  S.padded = (E + kLanes - 1) / kLanes * kLanes;
  S.coords.resize(static_cast<size_t>(S.padded * P.dim));
  S.m.resize(static_cast<size_t>(S.padded));
  for (int64_t d = 0; d < P.dim; ++d) {
    float* dst = S.coords.data + d * S.padded;
    for (int64_t p = 0; p < E; ++p) dst[p] = P.at(b, identity ? p : keep[p], d);
    for (int64_t p = E; p < S.padded; ++p) dst[p] = 0.0f;
  }
  for (int64_t p = 0; p < S.padded; ++p) S.m[p] = p < E ? INFINITY : -1.0f;
  S.idx = identity ? std::vector<int64_t>{} : std::move(keep);
}

PCOPS_FPS_CLONES
void plain_steps(Plain& S, const PointsView& P, int64_t b, int64_t start, int64_t steps, int64_t* o) {
  const int64_t D = P.dim;
  const int64_t E = S.size, padded = S.padded;
  const float* X = S.coords.data;
  float* m = S.m.data;
  std::vector<float> q(static_cast<size_t>(D));
  int64_t c = start;
  for (int64_t t = 0; t < steps; ++t) {
    o[t] = c;
    if (t + 1 == steps) break;
    if (E == 0) {  // no eligible point: the definition's fallback index 0
      for (int64_t u = t + 1; u < steps; ++u) o[u] = 0;
      break;
    }
    for (int64_t d = 0; d < D; ++d) q[d] = P.at(b, c, d);
    vfloat best = vfloat{} - 1.0f;
    vint bpos = vint{};
    const vint lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    for (int64_t p = 0; p < padded; p += kLanes) {
      vfloat s;
      if (D == 3) {
        const vfloat dx = (vfloat{} + q[0]) - *reinterpret_cast<const vfloat*>(X + p);
        const vfloat dy = (vfloat{} + q[1]) - *reinterpret_cast<const vfloat*>(X + padded + p);
        const vfloat dz = (vfloat{} + q[2]) - *reinterpret_cast<const vfloat*>(X + 2 * padded + p);
        s = (dx * dx + dy * dy) + dz * dz;
      } else {
        vfloat dd = (vfloat{} + q[0]) - *reinterpret_cast<const vfloat*>(X + p);
        s = dd * dd;
        for (int64_t d = 1; d < D; ++d) {
          dd = (vfloat{} + q[d]) - *reinterpret_cast<const vfloat*>(X + d * padded + p);
          s = s + dd * dd;
        }
      }
      s = s < INFINITY ? s : vfloat{};  // non-finite s (NaN or +inf) counts as 0
      vfloat& mp = *reinterpret_cast<vfloat*>(m + p);
      const vfloat mm = s < mp ? s : mp;
      mp = mm;
      const auto gt = mm > best;
      best = gt ? mm : best;
      bpos = gt ? lane + static_cast<int32_t>(p) : bpos;
    }
    float mx = best[0];
    for (int l = 1; l < kLanes; ++l) mx = std::max(mx, best[l]);
    int32_t pos = std::numeric_limits<int32_t>::max();
    for (int l = 0; l < kLanes; ++l)
      if (best[l] == mx) pos = std::min(pos, bpos[l]);
    c = S.idx.empty() ? pos : S.idx[static_cast<size_t>(pos)];
  }
}

// Plain path for clouds too large for 32-bit positions: the definition, scalar.
void huge_steps(const PointsView& P, int64_t b, int64_t n, bool skip, int64_t start, int64_t steps,
                int64_t* o) {
  std::vector<float> mind(static_cast<size_t>(n), INFINITY);
  int64_t c = start;
  for (int64_t t = 0; t < steps; ++t) {
    o[t] = c;
    if (t + 1 == steps) break;
    float best = -1.0f;
    int64_t arg = 0;
    const float* q = &P.at(b, c, 0);
    for (int64_t j = 0; j < n; ++j) {
      float s = common::squared_distance(q, P.stride_dim, &P.at(b, j, 0), P.stride_dim, P.dim);
      if (!std::isfinite(s)) s = 0.0f;
      if (s < mind[j]) mind[j] = s;
      if ((!skip || eligible_point(P, b, j)) && mind[j] > best) {
        best = mind[j];
        arg = j;
      }
    }
    c = arg;
  }
}

void sample_cloud(const PointsView& P, int64_t b, int64_t n, const FpsParams& params, int64_t steps,
                  int64_t* o) {
  if (steps <= 0) return;
  const int64_t start = params.start_index;
  const bool skip = params.skip_near_origin;
  if (steps == 1) {
    o[0] = start;
    return;
  }
  {
    Tree T;
    if (build_tree(P, b, n, start, skip, T)) {
      tree_steps(T, P, b, start, steps, o);
      return;
    }
  }
  if (n >= (int64_t{1} << 31) - kLanes) {
    huge_steps(P, b, n, skip, start, steps, o);
    return;
  }
  Plain S;
  build_plain(P, b, n, skip, S);
  plain_steps(S, P, b, start, steps, o);
}

}  // namespace

void furthest_point_sample(const CpuContext& ctx, PointsView points, LengthsView lengths,
                           const FpsParams& params, int64_t* out) {
  core::validate_furthest_point_sample(points, lengths, params);
  const int64_t M = params.num_samples;
  if (M == 0 || points.batch == 0) return;
  parallel_for(ctx, 0, points.batch, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      int64_t* o = out + b * M;
      const int64_t n = lengths.get(b, points.count);
      // With lengths, slots past the cloud's length hold -1 (PyTorch3D's convention); without,
      // the rule continues and index 0 repeats.
      const int64_t steps = lengths.present() ? std::min(M, n) : M;
      for (int64_t t = std::max<int64_t>(steps, 0); t < M; ++t) o[t] = -1;
      sample_cloud(points, b, n, params, steps, o);
    }
  });
}

}  // namespace pcops::cpu
