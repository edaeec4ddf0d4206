// CPU furthest point sampling: two exact paths, both bitwise equal to the definition (one pass
// over the cloud per step, see include/pcops/furthest_point_sample.hpp).
//
// - Tree path (D = 3, every coordinate finite with |x| <= 2^60, so no squared distance can
//   overflow): the eligible points are sorted along a Morton curve and cut into leaves of
//   kFpsLeaf points (structure of arrays); a 16-ary tree of bounding boxes sits over the leaves.
//   Every node keeps the largest m_j of its points and the smallest index attaining it. A new
//   centre descends only into children whose box lower bound is below their largest m_j: the
//   bound applies the contract's own operations, in the same order, to the box gap, and rounding
//   is monotone, so it never exceeds the s of a point inside the box and a skipped child provably
//   keeps every m_j. The next centre is the root's (largest m, smallest index).
// - Plain path (any D, any values): one vectorised pass over the eligible points per step.
// Points that skip_near_origin makes ineligible are dropped up front: their m_j never influences
// a choice, and only eligible points (and the start) ever become centres.
// Parallel decomposition: the clouds of a batch run concurrently, one cloud per task; a single
// cloud builds its tree in chunks over the workers; the steps of one cloud are sequential.
// Points with non-finite or huge coordinates send their cloud to the plain path. The step kernels exist per instruction set (fps_kernels.hpp) and
// are picked once at run time; all of them compute the same bits.
#include "pcops/furthest_point_sample.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

#include "common/distance.hpp"
#include "common/morton.hpp"
#include "cpu/fps_isa.hpp"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PCOPS_FPS_X86 1
#include <immintrin.h>
#endif

namespace pcops::cpu {
namespace {

constexpr int kFpsLanes = 16;
constexpr int kFpsLeaf = 32;  // points per leaf, a multiple of kFpsLanes
static_assert(kFpsLeaf % kFpsLanes == 0);
// Coordinates up to 2^60 in magnitude keep every squared distance finite:
// 3 * (2^61)^2 = 3 * 2^122 < FLT_MAX.
constexpr float kTreeMaxAbs = 1.152921504606846976e18f;  // 2^60
// Smaller clouds take the plain path (a set threshold, not a tuned one).
constexpr int64_t kTreeMinPoints = 1024;

template <class T>
struct AlignedBuffer {
  std::vector<T> store;
  T* data = nullptr;
  void resize(size_t n) {
    store.resize(n + 64 / sizeof(T));
    auto p = reinterpret_cast<uintptr_t>(store.data());
    data = reinterpret_cast<T*>((p + 63) & ~uintptr_t(63));
  }
  T& operator[](size_t i) { return data[i]; }
};

inline bool eligible_point(const PointsView& P, int64_t b, int64_t j) {
  const float x = P.at(b, j, 0), y = P.at(b, j, 1), z = P.at(b, j, 2);
  return ((x * x + y * y) + z * z) > 1e-3f;
}

// One level of the tree: boxes and (largest m, smallest index) of its items, 16 slots per parent.
struct FpsLevel {
  int64_t count = 0;
  AlignedBuffer<float> lox, loy, loz, hix, hiy, hiz, maxm;
  AlignedBuffer<int32_t> arg;
  void resize(int64_t n) {
    count = n;
    const size_t padded = static_cast<size_t>((n + kFpsLanes - 1) / kFpsLanes * kFpsLanes);
    for (auto* a : {&lox, &loy, &loz}) a->resize(padded);
    for (auto* a : {&hix, &hiy, &hiz}) a->resize(padded);
    maxm.resize(padded);
    arg.resize(padded);
    // Empty slots: an empty box (its bound is +inf) and m = -1, so they are never entered.
    for (size_t k = static_cast<size_t>(n); k < padded; ++k) {
      lox[k] = loy[k] = loz[k] = INFINITY;
      hix[k] = hiy[k] = hiz[k] = -INFINITY;
      maxm[k] = -1.0f;
      arg[k] = INT32_MAX;
    }
  }
};

struct FpsTree {
  int64_t size = 0;  // eligible points
  int top = 0;       // level[top] holds the root alone
  AlignedBuffer<float> x, y, z, m;
  AlignedBuffer<int32_t> idx;  // original index of each slot (padding: INT32_MAX)
  std::vector<FpsLevel> level;
};

struct FpsPlain {
  int64_t size = 0;
  int64_t padded = 0;
  AlignedBuffer<float> coords;  // D arrays of `padded` floats
  AlignedBuffer<float> m;
  std::vector<int64_t> idx;  // original index of each position (empty: identity)
  std::vector<float> q;      // the current centre
};

// ---------------------------------------------------------------------------------------------
// Step kernels per instruction set.

namespace generic_ops {
struct vf {
  float v[kFpsLanes];
};
struct vi {
  int32_t v[kFpsLanes];
};
#define PCOPS_FPS_LANES for (int l = 0; l < kFpsLanes; ++l)
inline vf vload(const float* p) { vf r; PCOPS_FPS_LANES r.v[l] = p[l]; return r; }
inline vi viload(const int32_t* p) { vi r; PCOPS_FPS_LANES r.v[l] = p[l]; return r; }
inline void vstore(float* p, const vf& a) { PCOPS_FPS_LANES p[l] = a.v[l]; }
inline vf vset1(float a) { vf r; PCOPS_FPS_LANES r.v[l] = a; return r; }
inline vi viset1(int32_t a) { vi r; PCOPS_FPS_LANES r.v[l] = a; return r; }
inline vi viota() { vi r; PCOPS_FPS_LANES r.v[l] = l; return r; }
inline vi viadd(const vi& a, int32_t b) { vi r; PCOPS_FPS_LANES r.v[l] = a.v[l] + b; return r; }
inline vf vsub(const vf& a, const vf& b) { vf r; PCOPS_FPS_LANES r.v[l] = a.v[l] - b.v[l]; return r; }
inline vf vadd(const vf& a, const vf& b) { vf r; PCOPS_FPS_LANES r.v[l] = a.v[l] + b.v[l]; return r; }
inline vf vmul(const vf& a, const vf& b) { vf r; PCOPS_FPS_LANES r.v[l] = a.v[l] * b.v[l]; return r; }
inline vf vmin(const vf& a, const vf& b) { vf r; PCOPS_FPS_LANES r.v[l] = a.v[l] < b.v[l] ? a.v[l] : b.v[l]; return r; }
inline vf vmax(const vf& a, const vf& b) { vf r; PCOPS_FPS_LANES r.v[l] = a.v[l] > b.v[l] ? a.v[l] : b.v[l]; return r; }
inline uint32_t vcmpgt(const vf& a, const vf& b) { uint32_t r = 0; PCOPS_FPS_LANES r |= uint32_t(a.v[l] > b.v[l]) << l; return r; }
inline uint32_t vcmplt(const vf& a, const vf& b) { uint32_t r = 0; PCOPS_FPS_LANES r |= uint32_t(a.v[l] < b.v[l]) << l; return r; }
inline uint32_t vcmpeq(const vf& a, const vf& b) { uint32_t r = 0; PCOPS_FPS_LANES r |= uint32_t(a.v[l] == b.v[l]) << l; return r; }
inline vf vblend(uint32_t k, const vf& a, const vf& b) { vf r; PCOPS_FPS_LANES r.v[l] = (k >> l) & 1 ? a.v[l] : b.v[l]; return r; }
inline vi viblend(uint32_t k, const vi& a, const vi& b) { vi r; PCOPS_FPS_LANES r.v[l] = (k >> l) & 1 ? a.v[l] : b.v[l]; return r; }
inline float vreduce_max(const vf& a) { float r = a.v[0]; PCOPS_FPS_LANES r = a.v[l] > r ? a.v[l] : r; return r; }
inline int32_t vmasked_min(uint32_t k, const vi& a) {
  int32_t r = INT32_MAX;
  PCOPS_FPS_LANES if (((k >> l) & 1) && a.v[l] < r) r = a.v[l];
  return r;
}
#undef PCOPS_FPS_LANES
}  // namespace generic_ops

namespace generic {
using namespace generic_ops;
#include "cpu/fps_kernels.hpp"
}  // namespace generic

#if PCOPS_FPS_X86
#pragma GCC push_options
#pragma GCC target("avx2")
namespace avx2 {
using namespace generic_ops;
#include "cpu/fps_kernels.hpp"
}  // namespace avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512bw,avx512vl,avx2")
#pragma GCC diagnostic push
// GCC 12's _mm512_reduce_* start from _mm512_undefined_*; the warning is a false positive.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
namespace avx512 {
using vf = __m512;
using vi = __m512i;
inline vf vload(const float* p) { return _mm512_load_ps(p); }
inline vi viload(const int32_t* p) { return _mm512_load_si512(p); }
inline void vstore(float* p, vf a) { _mm512_store_ps(p, a); }
inline vf vset1(float a) { return _mm512_set1_ps(a); }
inline vi viset1(int32_t a) { return _mm512_set1_epi32(a); }
inline vi viota() { return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }
inline vi viadd(vi a, int32_t b) { return _mm512_add_epi32(a, _mm512_set1_epi32(b)); }
inline vf vsub(vf a, vf b) { return _mm512_sub_ps(a, b); }
inline vf vadd(vf a, vf b) { return _mm512_add_ps(a, b); }
inline vf vmul(vf a, vf b) { return _mm512_mul_ps(a, b); }
inline vf vmin(vf a, vf b) { return _mm512_min_ps(a, b); }  // a < b ? a : b
inline vf vmax(vf a, vf b) { return _mm512_max_ps(a, b); }  // a > b ? a : b
inline uint32_t vcmpgt(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
inline uint32_t vcmplt(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
inline uint32_t vcmpeq(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
inline vf vblend(uint32_t k, vf a, vf b) { return _mm512_mask_blend_ps(static_cast<__mmask16>(k), b, a); }
inline vi viblend(uint32_t k, vi a, vi b) { return _mm512_mask_blend_epi32(static_cast<__mmask16>(k), b, a); }
inline float vreduce_max(vf a) { return _mm512_reduce_max_ps(a); }
inline int32_t vmasked_min(uint32_t k, vi a) {
  return _mm512_mask_reduce_min_epi32(static_cast<__mmask16>(k), a);
}
#include "cpu/fps_kernels.hpp"
}  // namespace avx512
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif

using fps_detail::Isa;

Isa detect_isa() {
#if PCOPS_FPS_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
    return Isa::Avx512;
  if (__builtin_cpu_supports("avx2")) return Isa::Avx2;
#endif
  return Isa::Generic;
}

std::atomic<int>& isa_in_use() {
  static std::atomic<int> value{static_cast<int>(detect_isa())};
  return value;
}

Isa isa() { return static_cast<Isa>(isa_in_use().load(std::memory_order_relaxed)); }

void tree_steps(FpsTree& T, const PointsView& P, int64_t b, int64_t start, int64_t steps, int64_t* o) {
  switch (isa()) {
#if PCOPS_FPS_X86
    case Isa::Avx512: return avx512::fps_tree_steps(T, P, b, start, steps, o);
    case Isa::Avx2: return avx2::fps_tree_steps(T, P, b, start, steps, o);
#endif
    default: return generic::fps_tree_steps(T, P, b, start, steps, o);
  }
}

void plain_steps(FpsPlain& S, const PointsView& P, int64_t b, int64_t start, int64_t steps, int64_t* o) {
  switch (isa()) {
#if PCOPS_FPS_X86
    case Isa::Avx512: return avx512::fps_plain_steps(S, P, b, start, steps, o);
    case Isa::Avx2: return avx2::fps_plain_steps(S, P, b, start, steps, o);
#endif
    default: return generic::fps_plain_steps(S, P, b, start, steps, o);
  }
}

// ---------------------------------------------------------------------------------------------
// Tree construction.

using common::spread_bits10;

// Builds the tree over the eligible points of cloud b (n points). Returns false when the cloud
// does not qualify (non-finite or huge coordinates, or too few eligible points). The passes run
// over `chunks` contiguous chunks through ctx (1: inline); the result does not depend on it.
bool build_tree(const CpuContext& ctx, int64_t chunks, const PointsView& P, int64_t b, int64_t n,
                int64_t start, bool skip, FpsTree& T) {
  if (P.dim != 3 || n >= (int64_t{1} << 31) - kFpsLeaf) return false;
  for (int d = 0; d < 3; ++d) {
    if (!(std::fabs(P.at(b, start, d)) <= kTreeMaxAbs)) return false;
  }
  const float* base = &P.at(b, 0, 0);
  const int64_t sp = P.stride_point, sd = P.stride_dim;
  chunks = std::max<int64_t>(1, std::min<int64_t>(chunks, n / 65536));
  auto range = [&](int64_t total, int64_t c) {
    return std::pair<int64_t, int64_t>{total * c / chunks, total * (c + 1) / chunks};
  };
  auto for_chunks = [&](const std::function<void(int64_t)>& fn) {
    if (chunks == 1) {
      fn(0);
      return;
    }
    parallel_for(ctx, 0, chunks, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) fn(c);
    });
  };

  // Pass 1: eligibility, bounds, finiteness.
  struct Part {
    float lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
    bool ok = true;
    std::vector<int32_t> keep;
  };
  std::vector<Part> parts(static_cast<size_t>(chunks));
  for_chunks([&](int64_t c) {
    Part& pt = parts[static_cast<size_t>(c)];
    const auto [j0, j1] = range(n, c);
    for (int64_t j = j0; j < j1; ++j) {
      const float* q = base + j * sp;
      const float v[3] = {q[0], q[sd], q[2 * sd]};
      if (skip) {
        if (!(((v[0] * v[0] + v[1] * v[1]) + v[2] * v[2]) > 1e-3f)) continue;
        pt.keep.push_back(static_cast<int32_t>(j));
      }
      for (int d = 0; d < 3; ++d) {
        pt.ok &= std::fabs(v[d]) <= kTreeMaxAbs;
        pt.lo[d] = std::min(pt.lo[d], v[d]);
        pt.hi[d] = std::max(pt.hi[d], v[d]);
      }
    }
  });
  float lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
  std::vector<int32_t> keep;
  for (Part& pt : parts) {
    if (!pt.ok) return false;
    for (int d = 0; d < 3; ++d) {
      lo[d] = std::min(lo[d], pt.lo[d]);
      hi[d] = std::max(hi[d], pt.hi[d]);
    }
    if (skip) keep.insert(keep.end(), pt.keep.begin(), pt.keep.end());
  }
  std::vector<Part>().swap(parts);
  const int64_t E = skip ? static_cast<int64_t>(keep.size()) : n;
  if (E < kTreeMinPoints) return false;

  // Keys (Morton code << 32 | original index) sorted by an LSD radix sort on the code, which is
  // stable, so equal codes keep index order. The codes only shape the leaves; exactness never
  // depends on them. 9 bits per axis, one pass per 9 bits: 512 buckets keep the scatter
  // cache-friendly.
  constexpr int kBits = 9, kPasses = 3, kDigit = kBits;
  constexpr uint32_t kRadix = 1u << kDigit, kMask = kRadix - 1;
  const float cells = static_cast<float>(1 << kBits);
  float scale[3];
  for (int d = 0; d < 3; ++d) {
    const double ext = static_cast<double>(hi[d]) - static_cast<double>(lo[d]);
    scale[d] = ext > 0 ? static_cast<float>((cells - 0.01) / ext) : 0.0f;
  }
  std::vector<uint64_t> keys(static_cast<size_t>(E)), tmp(static_cast<size_t>(E));
  std::vector<uint32_t> hist(static_cast<size_t>(chunks) * kRadix);
  for_chunks([&](int64_t c) {
    const auto [i0, i1] = range(E, c);
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t j = skip ? keep[static_cast<size_t>(i)] : i;
      const float* q = base + j * sp;
      const float v[3] = {q[0], q[sd], q[2 * sd]};
      uint32_t code = 0;
      for (int d = 0; d < 3; ++d) {
        float x = (v[d] - lo[d]) * scale[d];
        x = std::min(std::max(x, 0.0f), cells - 1.0f);
        code |= spread_bits10(static_cast<uint32_t>(x)) << (2 - d);
      }
      keys[static_cast<size_t>(i)] = static_cast<uint64_t>(code) << 32 | static_cast<uint64_t>(j);
    }
  });
  for (int p = 0; p < kPasses; ++p) {
    const int shift = 32 + kDigit * p;
    for_chunks([&](int64_t c) {
      uint32_t* h = &hist[static_cast<size_t>(c) * kRadix];
      std::fill(h, h + kRadix, 0u);
      const auto [i0, i1] = range(E, c);
      for (int64_t i = i0; i < i1; ++i) ++h[(keys[static_cast<size_t>(i)] >> shift) & kMask];
    });
    // Bucket-major, chunk-minor offsets keep the sort stable for any number of chunks.
    uint32_t sum = 0;
    for (uint32_t r = 0; r < kRadix; ++r)
      for (int64_t c = 0; c < chunks; ++c) {
        uint32_t& h = hist[static_cast<size_t>(c) * kRadix + r];
        const uint32_t cnt = h;
        h = sum;
        sum += cnt;
      }
    for_chunks([&](int64_t c) {
      uint32_t* h = &hist[static_cast<size_t>(c) * kRadix];
      const auto [i0, i1] = range(E, c);
      for (int64_t i = i0; i < i1; ++i) {
        const uint64_t k = keys[static_cast<size_t>(i)];
        tmp[h[(k >> shift) & kMask]++] = k;
      }
    });
    keys.swap(tmp);
  }
  std::vector<uint64_t>().swap(tmp);

  // Leaves in structure-of-arrays form; padding slots repeat the last point with m = -1.
  T.size = E;
  const int64_t leaves = (E + kFpsLeaf - 1) / kFpsLeaf;
  const int64_t padded = leaves * kFpsLeaf;
  T.x.resize(padded);
  T.y.resize(padded);
  T.z.resize(padded);
  T.m.resize(padded);
  T.idx.resize(padded);
  for_chunks([&](int64_t c) {
    constexpr int64_t kAhead = 32;  // the gather is random access for unordered input: prefetch
    const auto [p0, p1] = range(padded, c);
    for (int64_t p = p0; p < p1; ++p) {
      if (p + kAhead < E)
        __builtin_prefetch(base + static_cast<int64_t>(keys[static_cast<size_t>(p + kAhead)] & 0xffffffffu) * sp);
      const int64_t j = static_cast<int64_t>(keys[static_cast<size_t>(std::min(p, E - 1))] & 0xffffffffu);
      const float* q = base + j * sp;
      T.x[p] = q[0];
      T.y[p] = q[sd];
      T.z[p] = q[2 * sd];
      T.m[p] = p < E ? INFINITY : -1.0f;
      T.idx[p] = p < E ? static_cast<int32_t>(j) : INT32_MAX;
    }
  });
  // Levels: level 0 holds the leaves, level k+1 one item per 16 items of level k, up to one root.
  T.level.clear();
  T.level.emplace_back();
  T.level[0].resize(leaves);
  {
    FpsLevel& L = T.level[0];
    for (int64_t l = 0; l < leaves; ++l) {
      float lo3[3] = {INFINITY, INFINITY, INFINITY}, hi3[3] = {-INFINITY, -INFINITY, -INFINITY};
      for (int64_t p = l * kFpsLeaf; p < (l + 1) * kFpsLeaf; ++p) {
        const float v[3] = {T.x[p], T.y[p], T.z[p]};
        for (int d = 0; d < 3; ++d) {
          lo3[d] = std::min(lo3[d], v[d]);
          hi3[d] = std::max(hi3[d], v[d]);
        }
      }
      L.lox[l] = lo3[0], L.loy[l] = lo3[1], L.loz[l] = lo3[2];
      L.hix[l] = hi3[0], L.hiy[l] = hi3[1], L.hiz[l] = hi3[2];
      L.maxm[l] = INFINITY;  // not yet updated: every leaf is entered by the first centre
      L.arg[l] = T.idx[l * kFpsLeaf];
    }
  }
  do {
    const FpsLevel& C = T.level.back();
    FpsLevel U;
    U.resize((C.count + kFpsLanes - 1) / kFpsLanes);
    for (int64_t i = 0; i < U.count; ++i) {
      float v[6] = {INFINITY, INFINITY, INFINITY, -INFINITY, -INFINITY, -INFINITY};
      for (int64_t k = i * kFpsLanes; k < (i + 1) * kFpsLanes; ++k) {
        v[0] = std::min(v[0], C.lox.data[k]);
        v[1] = std::min(v[1], C.loy.data[k]);
        v[2] = std::min(v[2], C.loz.data[k]);
        v[3] = std::max(v[3], C.hix.data[k]);
        v[4] = std::max(v[4], C.hiy.data[k]);
        v[5] = std::max(v[5], C.hiz.data[k]);
      }
      U.lox[i] = v[0], U.loy[i] = v[1], U.loz[i] = v[2];
      U.hix[i] = v[3], U.hiy[i] = v[4], U.hiz[i] = v[5];
      U.maxm[i] = INFINITY;
      U.arg[i] = C.arg.data[i * kFpsLanes];
    }
    T.level.push_back(std::move(U));
  } while (T.level.back().count > 1);
  T.top = static_cast<int>(T.level.size()) - 1;
  return true;
}

void build_plain(const PointsView& P, int64_t b, int64_t n, bool skip, FpsPlain& S) {
  std::vector<int64_t> keep;
  if (skip) {
    for (int64_t j = 0; j < n; ++j)
      if (eligible_point(P, b, j)) keep.push_back(j);
  }
  const int64_t E = skip ? static_cast<int64_t>(keep.size()) : n;
  S.size = E;
  S.padded = (E + kFpsLanes - 1) / kFpsLanes * kFpsLanes;
  S.coords.resize(static_cast<size_t>(S.padded * P.dim));
  S.m.resize(static_cast<size_t>(S.padded));
  for (int64_t d = 0; d < P.dim; ++d) {
    float* dst = S.coords.data + d * S.padded;
    for (int64_t p = 0; p < E; ++p) dst[p] = P.at(b, skip ? keep[p] : p, d);
    for (int64_t p = E; p < S.padded; ++p) dst[p] = 0.0f;
  }
  // Padding: m = -1 stays -1 (min with any s >= 0), below every real m_j >= 0.
  for (int64_t p = 0; p < S.padded; ++p) S.m[p] = p < E ? INFINITY : -1.0f;
  S.idx = skip ? std::move(keep) : std::vector<int64_t>{};
  S.q.assign(static_cast<size_t>(P.dim), 0.0f);
}

// Clouds too large for 32-bit positions: the definition, scalar.
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

void sample_cloud(const CpuContext& ctx, int64_t chunks, const PointsView& P, int64_t b, int64_t n,
                  const FpsParams& params, int64_t steps, int64_t* o) {
  if (steps <= 0) return;
  const int64_t start = params.start_index;
  const bool skip = params.skip_near_origin;
  if (steps == 1) {
    o[0] = start;
    return;
  }
  {
    FpsTree T;
    if (build_tree(ctx, chunks, P, b, n, start, skip, T)) {
      tree_steps(T, P, b, start, steps, o);
      return;
    }
  }
  if (n >= (int64_t{1} << 31) - kFpsLanes) {
    huge_steps(P, b, n, skip, start, steps, o);
    return;
  }
  FpsPlain S;
  build_plain(P, b, n, skip, S);
  plain_steps(S, P, b, start, steps, o);
}

}  // namespace

namespace fps_detail {
Isa best_isa() {
  static const Isa value = detect_isa();
  return value;
}
Isa force_isa(Isa want) {
  const int v = std::min(static_cast<int>(want), static_cast<int>(best_isa()));
  return static_cast<Isa>(isa_in_use().exchange(v));
}
}  // namespace fps_detail

void furthest_point_sample(const CpuContext& ctx, PointsView points, LengthsView lengths,
                           const FpsParams& params, int64_t* out) {
  core::validate_furthest_point_sample(points, lengths, params);
  const int64_t M = params.num_samples;
  if (M == 0 || points.batch == 0) return;
  // A single cloud builds its tree over the workers; a batch runs one cloud per worker.
  const int64_t chunks = points.batch == 1 ? std::max(1, max_threads(ctx)) : 1;
  parallel_for(ctx, 0, points.batch, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      int64_t* o = out + b * M;
      const int64_t n = lengths.get(b, points.count);
      // With lengths, slots past the cloud's length hold -1 (PyTorch3D's convention); without,
      // the rule continues and index 0 repeats.
      const int64_t steps = lengths.present() ? std::min(M, n) : M;
      for (int64_t t = std::max<int64_t>(steps, 0); t < M; ++t) o[t] = -1;
      sample_cloud(ctx, chunks, points, b, n, params, steps, o);
    }
  });
}

}  // namespace pcops::cpu
