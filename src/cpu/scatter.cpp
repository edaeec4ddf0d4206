// CPU scatter / segment reductions (contract: include/pcops/scatter.hpp).
// - Destinations per (o, e), unsorted (scatter): the direct path. The sources are walked in
//   ascending e and each source row is folded into its output row (tasks: (o, column block of
//   whole 128-byte line pairs)); no sort. Destinations with more than kScatterChunk sources are
//   taken out of the walk (their source lists gathered once by a parallel, stable pass) and go to
//   the chunk path below; the walk then visits a compacted, prefetched list of the other sources
//   and runs beside the chunk tasks. With many threads and few column blocks, the grouped path.
// - Grouped path (segment_csr, sorted indices, and the case above with many threads): output
//   rows grouped into tasks of similar cost (contributions x inner); a heavy row is split into
//   column blocks. Destinations given per (o, e) are grouped by a stable counting sort.
// - Chunk path: a list longer than kScatterChunk follows the contract's chunk rule: its chunks
//   are folded in parallel (tasks = chunk x column block, each a serial fold over whole source
//   rows, vectorised over the columns) into a partial buffer, then every element combines its
//   chunk partials left to right.
// - Destinations per (o, e, k): one task per (o, column block) in ascending e, the chunk rule
//   applied per element with a running partial.
// Every element's result is a fixed sequence of operations, independent of the thread count and
// of the path, without atomics.
#include "pcops/scatter.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "common/scatter_chunk.hpp"
#include "core/validate.hpp"

namespace pcops::cpu {
namespace {

template <class T>
inline T add(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return a + b;
  } else {  // two's-complement wrap without signed-overflow UB
    using W = std::conditional_t<(sizeof(T) < 4), uint32_t, std::make_unsigned_t<T>>;
    return static_cast<T>(static_cast<W>(static_cast<W>(a) + static_cast<W>(b)));
  }
}

template <class T>
inline T mul(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return a * b;
  } else {
    using W = std::conditional_t<(sizeof(T) < 4), uint32_t, std::make_unsigned_t<T>>;
    return static_cast<T>(static_cast<W>(static_cast<W>(a) * static_cast<W>(b)));
  }
}

template <class T>
inline T identity(Reduce r) {
  switch (r) {
    case Reduce::Mul: return T(1);
    case Reduce::Min: return std::numeric_limits<T>::max();
    case Reduce::Max: return std::numeric_limits<T>::lowest();
    default: return T(0);
  }
}

template <class T>
inline T mean_of(T sum, int64_t count, IntegerMean rounding) {
  const int64_t c = count > 0 ? count : 1;
  if constexpr (std::is_floating_point_v<T>) {
    return sum / static_cast<T>(c);
  } else {
    const int64_t a = static_cast<int64_t>(sum);
    int64_t q = a / c;  // c >= 1: no overflow
    if (rounding == IntegerMean::Floor && a % c != 0 && a < 0) --q;
    return static_cast<T>(q);
  }
}

// One task: rows [r0, r1) of the flattened [outer * rows] output, columns [k0, k1).
struct Task {
  int64_t r0, r1, k0, k1;
};

// Tasks of similar cost; cost(r) = (contributions(r) + 1) * inner.
template <class Count>
std::vector<Task> plan(const CpuContext& ctx, int64_t R, int64_t inner, Count count) {
  std::vector<Task> tasks;
  if (R == 0 || inner == 0) return tasks;
  double total = 0;
  for (int64_t r = 0; r < R; ++r) total += static_cast<double>(count(r) + 1) * static_cast<double>(inner);
  const double threads = std::max(1, max_threads(ctx));
  const double target = std::max(total / (threads * 8.0), 16384.0);
  int64_t start = 0;
  double acc = 0;
  for (int64_t r = 0; r < R; ++r) {
    const double c = static_cast<double>(count(r) + 1) * static_cast<double>(inner);
    if (c > target && inner >= 32) {
      if (start < r) tasks.push_back({start, r, 0, inner});
      const int64_t pieces = std::max<int64_t>(
          2, std::min<int64_t>(static_cast<int64_t>(c / target) + 1, inner / 16));
      const int64_t block = (inner + pieces - 1) / pieces;
      for (int64_t k0 = 0; k0 < inner; k0 += block) tasks.push_back({r, r + 1, k0, std::min(inner, k0 + block)});
      start = r + 1;
      acc = 0;
      continue;
    }
    acc += c;
    if (acc >= target) {
      tasks.push_back({start, r + 1, 0, inner});
      start = r + 1;
      acc = 0;
    }
  }
  if (start < R) tasks.push_back({start, R, 0, inner});
  return tasks;
}

template <class Fn>
void run_tasks(const CpuContext& ctx, const std::vector<Task>& tasks, Fn fn) {
  const int64_t n = static_cast<int64_t>(tasks.size());
  if (n == 0) return;
  if (n == 1) {
    fn(tasks[0]);
    return;
  }
  parallel_for(ctx, 0, n, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) fn(tasks[static_cast<size_t>(t)]);
  });
}

// Max / min of one output row over columns [k0, k1): blocks of kMinMaxBlock columns kept in local
// arrays (no aliasing with src or out), the running value and its source index (in lanes of type
// A) updated by branch-free selects with the contract's strict compare, so the column loop
// vectorises; out and arg are written once per block (the empty-slot rule applied there).
constexpr int64_t kMinMaxBlock = 64;

template <class T, class A, Reduce R>
void minmax_row(T* out, int64_t* arg, const T* src, int64_t inner, int64_t k0, int64_t k1,
                const int64_t* perm, int64_t j0, int64_t j1, bool init, bool empty_rule, int64_t sentinel) {
  alignas(64) T acc[kMinMaxBlock];
  alignas(64) A at[kMinMaxBlock];
  const T id = identity<T>(R);
  const A none = static_cast<A>(sentinel);
  for (int64_t b0 = k0; b0 < k1; b0 += kMinMaxBlock) {
    const int64_t n = std::min(kMinMaxBlock, k1 - b0);
    for (int64_t k = 0; k < n; ++k) {
      acc[k] = init ? id : out[b0 + k];
      at[k] = none;
    }
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t e = perm ? perm[j] : j;
      const T* __restrict s = src + e * inner + b0;
      const A ea = static_cast<A>(e);
      for (int64_t k = 0; k < n; ++k) {
        const bool take = (R == Reduce::Max) ? (s[k] > acc[k]) : (s[k] < acc[k]);
        // The index select as a mask (a ternary here leaves control flow GCC will not vectorise).
        const A mask = static_cast<A>(-static_cast<A>(take));
        acc[k] = take ? s[k] : acc[k];
        at[k] = static_cast<A>((ea & mask) | (at[k] & ~mask));
      }
    }
    for (int64_t k = 0; k < n; ++k) {
      const bool empty = at[k] == none;
      out[b0 + k] = (empty_rule && empty) ? T(0) : acc[k];
      arg[b0 + k] = static_cast<int64_t>(at[k]);
    }
  }
}

#if defined(__SSE2__)
// float with int32 arg lanes on SSE2 (baseline x86-64; GCC leaves the generic loop scalar for
// float): 16 columns at a time with the running values and indices in registers across the whole
// source list, the same strict compares (NaN compares false) and selects; the rest generic.
template <Reduce R>
void minmax_row_f32(float* out, int64_t* arg, const float* src, int64_t inner, int64_t k0, int64_t k1,
                    const int64_t* perm, int64_t j0, int64_t j1, bool init, bool empty_rule, int64_t sentinel) {
  constexpr int64_t W = 16;
  const __m128 id = _mm_set1_ps(identity<float>(R));
  const __m128i none = _mm_set1_epi32(static_cast<int32_t>(sentinel));
  int64_t k = k0;
  for (; k + W <= k1; k += W) {
    __m128 a[4];
    __m128i at[4];
    for (int v = 0; v < 4; ++v) {
      a[v] = init ? id : _mm_loadu_ps(out + k + 4 * v);
      at[v] = none;
    }
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t e = perm ? perm[j] : j;
      const float* s = src + e * inner + k;
      const __m128i ev = _mm_set1_epi32(static_cast<int32_t>(e));
      for (int v = 0; v < 4; ++v) {
        const __m128 x = _mm_loadu_ps(s + 4 * v);
        const __m128 m = (R == Reduce::Max) ? _mm_cmpgt_ps(x, a[v]) : _mm_cmplt_ps(x, a[v]);
        a[v] = _mm_or_ps(_mm_and_ps(m, x), _mm_andnot_ps(m, a[v]));
        const __m128i mi = _mm_castps_si128(m);
        at[v] = _mm_or_si128(_mm_and_si128(mi, ev), _mm_andnot_si128(mi, at[v]));
      }
    }
    alignas(16) float av[W];
    alignas(16) int32_t iv[W];
    for (int v = 0; v < 4; ++v) {
      _mm_store_ps(av + 4 * v, a[v]);
      _mm_store_si128(reinterpret_cast<__m128i*>(iv + 4 * v), at[v]);
    }
    for (int64_t c = 0; c < W; ++c) {
      const bool empty = iv[c] == static_cast<int32_t>(sentinel);
      out[k + c] = (empty_rule && empty) ? 0.0f : av[c];
      arg[k + c] = iv[c];
    }
  }
  if (k < k1) minmax_row<float, int32_t, R>(out, arg, src, inner, k, k1, perm, j0, j1, init, empty_rule, sentinel);
}
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#define PCOPS_SCATTER_AVX2 1
// The same on AVX2 (chosen at run time): 32 columns at a time, values and int32 indices in eight
// ymm registers across the whole source list, ordered compares (NaN false) and blends; the rest
// of the row on the SSE2 path. Same operations per element, so the same bits.
template <Reduce R>
__attribute__((target("avx2"))) void minmax_row_f32_avx2(float* out, int64_t* arg, const float* src, int64_t inner,
                                                         int64_t k0, int64_t k1, const int64_t* perm, int64_t j0,
                                                         int64_t j1, bool init, bool empty_rule, int64_t sentinel) {
  constexpr int64_t W = 32;
  const __m256 id = _mm256_set1_ps(identity<float>(R));
  const __m256 none = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int32_t>(sentinel)));
  int64_t k = k0;
  for (; k + W <= k1; k += W) {
    __m256 a[4], at[4];
    for (int v = 0; v < 4; ++v) {
      a[v] = init ? id : _mm256_loadu_ps(out + k + 8 * v);
      at[v] = none;
    }
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t e = perm ? perm[j] : j;
      const float* s = src + e * inner + k;
      const __m256 ev = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int32_t>(e)));
      for (int v = 0; v < 4; ++v) {
        const __m256 x = _mm256_loadu_ps(s + 8 * v);
        const __m256 m = (R == Reduce::Max) ? _mm256_cmp_ps(x, a[v], _CMP_GT_OQ) : _mm256_cmp_ps(x, a[v], _CMP_LT_OQ);
        a[v] = _mm256_blendv_ps(a[v], x, m);
        at[v] = _mm256_blendv_ps(at[v], ev, m);
      }
    }
    alignas(32) float av[W];
    alignas(32) int32_t iv[W];
    for (int v = 0; v < 4; ++v) {
      _mm256_store_ps(av + 8 * v, a[v]);
      _mm256_store_ps(reinterpret_cast<float*>(iv) + 8 * v, at[v]);
    }
    for (int64_t c = 0; c < W; ++c) {
      const bool empty = iv[c] == static_cast<int32_t>(sentinel);
      out[k + c] = (empty_rule && empty) ? 0.0f : av[c];
      arg[k + c] = iv[c];
    }
  }
  if (k < k1) minmax_row_f32<R>(out, arg, src, inner, k, k1, perm, j0, j1, init, empty_rule, sentinel);
}

bool has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}
#endif

// Reduces the sources of one output row into out[k0, k1) (and arg). Sources are perm[j] for j in
// [j0, j1), or j itself when perm is null, each a row of `inner` values at src + e * inner.
template <class T, Reduce R>
void reduce_row(T* out, int64_t* arg, const T* src, int64_t inner, int64_t k0, int64_t k1,
                const int64_t* perm, int64_t j0, int64_t j1, bool init, bool empty_rule,
                IntegerMean rounding, int64_t sentinel) {
  if constexpr (R == Reduce::Min || R == Reduce::Max) {
    // Arg lanes as wide as the values where the source index fits, so the select vectorises.
    if constexpr (sizeof(T) == 8) {
      minmax_row<T, int64_t, R>(out, arg, src, inner, k0, k1, perm, j0, j1, init, empty_rule, sentinel);
    } else {
      if (sentinel <= std::numeric_limits<int32_t>::max()) {
#if defined(__SSE2__)
        if constexpr (std::is_same_v<T, float>) {
#if defined(PCOPS_SCATTER_AVX2)
          if (k1 - k0 >= 32 && has_avx2()) {
            minmax_row_f32_avx2<R>(out, arg, src, inner, k0, k1, perm, j0, j1, init, empty_rule, sentinel);
            return;
          }
#endif
          minmax_row_f32<R>(out, arg, src, inner, k0, k1, perm, j0, j1, init, empty_rule, sentinel);
          return;
        }
#endif
        minmax_row<T, int32_t, R>(out, arg, src, inner, k0, k1, perm, j0, j1, init, empty_rule, sentinel);
      }
      else
        minmax_row<T, int64_t, R>(out, arg, src, inner, k0, k1, perm, j0, j1, init, empty_rule, sentinel);
    }
    return;
  }
  if (init) {
    const T id = identity<T>(R);
    for (int64_t k = k0; k < k1; ++k) out[k] = id;
  }
  for (int64_t j = j0; j < j1; ++j) {
    const int64_t e = perm ? perm[j] : j;
    const T* s = src + e * inner;
    if constexpr (R == Reduce::Sum || R == Reduce::Mean) {
      for (int64_t k = k0; k < k1; ++k) out[k] = add(out[k], s[k]);
    } else if constexpr (R == Reduce::Mul) {
      for (int64_t k = k0; k < k1; ++k) out[k] = mul(out[k], s[k]);
    }
  }
  if constexpr (R == Reduce::Mean) {
    for (int64_t k = k0; k < k1; ++k) out[k] = mean_of(out[k], j1 - j0, rounding);
  }
}

template <class Fn>
void dispatch_reduce(Reduce r, Fn fn) {
  switch (r) {
    case Reduce::Sum: fn(std::integral_constant<Reduce, Reduce::Sum>{}); break;
    case Reduce::Mean: fn(std::integral_constant<Reduce, Reduce::Mean>{}); break;
    case Reduce::Mul: fn(std::integral_constant<Reduce, Reduce::Mul>{}); break;
    case Reduce::Min: fn(std::integral_constant<Reduce, Reduce::Min>{}); break;
    case Reduce::Max: fn(std::integral_constant<Reduce, Reduce::Max>{}); break;
  }
}

using common::kScatterChunk;

// Where the sources of one output row are: list slots [lo, hi), slot j holding source perm[j]
// (j itself when perm is null), each a row of `inner` values at src + e * inner.
template <class T>
struct RowList {
  const T* src;
  const int64_t* perm;
  int64_t lo, hi;
  int64_t row;  // the output row (out + row * inner)
};

// The partial of one chunk of a sum / mean (as a sum) / mul list over columns [k0, k1) of part:
// chunk 0 folds from `start` (out's entry values; null: the identity), a later chunk from its own
// first source row.
template <class T, Reduce R>
void chunk_fold(T* __restrict part, const T* start, const T* src, int64_t inner, int64_t k0, int64_t k1,
                const int64_t* perm, int64_t j0, int64_t j1, bool first_chunk) {
  int64_t j = j0;
  if (first_chunk) {
    if (start != nullptr) {
      for (int64_t k = k0; k < k1; ++k) part[k] = start[k];
    } else {
      const T id = identity<T>(R);
      for (int64_t k = k0; k < k1; ++k) part[k] = id;
    }
  } else {
    const T* s = src + (perm ? perm[j] : j) * inner;
    for (int64_t k = k0; k < k1; ++k) part[k] = s[k];
    ++j;
  }
  for (; j < j1; ++j) {
    const T* __restrict s = src + (perm ? perm[j] : j) * inner;
    if constexpr (R == Reduce::Mul) {
      for (int64_t k = k0; k < k1; ++k) part[k] = mul(part[k], s[k]);
    } else {
      for (int64_t k = k0; k < k1; ++k) part[k] = add(part[k], s[k]);
    }
  }
}

// Reduces lists [0, rows) (list(r): its sources and its output row, at out + row * inner). Lists of at most
// kScatterChunk sources: one task per group of rows (or column block of a heavy row), a serial
// fold. Longer lists: the chunk rule, chunks x column blocks in parallel, then the combine.
// `extra` (optional, with its cost in source rows) runs concurrently with the chunk tasks: the
// first thread's share of the chunk tasks is cut by that cost.
template <class T, Reduce R, class List>
void reduce_rows(const CpuContext& ctx, int64_t rows, int64_t inner, int64_t sentinel, List list, T* out,
                 int64_t* arg, bool init, bool empty_rule, IntegerMean rounding,
                 const std::function<void()>& extra = nullptr, int64_t extra_rows = 0) {
  constexpr bool kMinMax = R == Reduce::Min || R == Reduce::Max;
  const int64_t K = inner;
  struct Long {
    int64_t r, c0, chunks;
  };
  std::vector<Long> longs;
  int64_t total_chunks = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const RowList<T> l = list(r);
    const int64_t n = l.hi - l.lo;
    if (n > kScatterChunk) {
      const int64_t c = common::scatter_chunks(n);
      longs.push_back({r, total_chunks, c});
      total_chunks += c;
    }
  }
  // Short lists.
  auto count = [&](int64_t r) {
    const RowList<T> l = list(r);
    return l.hi - l.lo > kScatterChunk ? int64_t{0} : l.hi - l.lo;
  };
  const std::vector<Task> tasks = plan(ctx, rows, K, count);
  run_tasks(ctx, tasks, [&](const Task& t) {
    for (int64_t r = t.r0; r < t.r1; ++r) {
      const RowList<T> l = list(r);
      if (l.hi - l.lo > kScatterChunk) continue;
      reduce_row<T, R>(out + l.row * K, arg ? arg + l.row * K : nullptr, l.src, K, t.k0, t.k1, l.perm, l.lo, l.hi,
                       init, empty_rule, rounding, sentinel);
    }
  });
  if (longs.empty()) return;
  // Long lists, phase 1: the partial of every chunk (c0 + c) in part[(c0 + c) * K + k] (and the
  // source index of a max / min partial in parg, the sentinel when no contribution replaced the
  // chunk's start value).
  std::vector<T> part(static_cast<size_t>(total_chunks * K));
  std::vector<int64_t> parg(kMinMax ? part.size() : 0);
  std::vector<std::pair<int64_t, int64_t>> chunk_of(static_cast<size_t>(total_chunks));  // (long row, chunk)
  for (size_t i = 0; i < longs.size(); ++i)
    for (int64_t c = 0; c < longs[i].chunks; ++c)
      chunk_of[static_cast<size_t>(longs[i].c0 + c)] = {static_cast<int64_t>(i), c};
  const int64_t threads = std::max(1, max_threads(ctx));
  const int64_t nb = std::max<int64_t>(1, std::min<int64_t>(K / 16, (4 * threads + total_chunks - 1) / total_chunks));
  const int64_t block = (K + nb - 1) / nb;
  auto chunk_tasks = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const auto [li, c] = chunk_of[static_cast<size_t>(t / nb)];
      const Long& lr = longs[static_cast<size_t>(li)];
      const int64_t k0 = (t % nb) * block, k1 = std::min(K, k0 + block);
      if (k0 >= k1) continue;
      const RowList<T> l = list(lr.r);
      const int64_t j0 = l.lo + c * kScatterChunk, j1 = std::min(l.hi, j0 + kScatterChunk);
      T* p = part.data() + (lr.c0 + c) * K;
      const bool first = c == 0;
      if constexpr (kMinMax) {
        // A later chunk starts from the identity with no arg: the strict-compare fold with
        // smallest-index ties is associative, so chunk + combine give the serial fold's result.
        if (first && !init)
          for (int64_t k = k0; k < k1; ++k) p[k] = out[l.row * K + k];
        reduce_row<T, R>(p, parg.data() + (lr.c0 + c) * K, l.src, K, k0, k1, l.perm, j0, j1, !first || init,
                         false, rounding, sentinel);
      } else {
        chunk_fold<T, R>(p, (first && !init) ? out + l.row * K : nullptr, l.src, K, k0, k1, l.perm, j0, j1, first);
      }
    }
  };
  const int64_t n_tasks = total_chunks * nb;
  if (extra) {
    // Lane 0: extra, then the chunk tasks left of its share; lanes 1..: the rest, evenly.
    const int64_t lanes = threads;
    const double task_rows = static_cast<double>(kScatterChunk) / static_cast<double>(nb);
    const double share = (static_cast<double>(n_tasks) * task_rows + static_cast<double>(extra_rows)) / lanes;
    const double left = (share - static_cast<double>(extra_rows)) / task_rows;
    const int64_t first = lanes == 1 ? n_tasks : std::clamp<int64_t>(static_cast<int64_t>(left), 0, n_tasks);
    const int64_t rest = n_tasks - first, per = lanes > 1 ? (rest + lanes - 2) / (lanes - 1) : 0;
    parallel_for(ctx, 0, lanes, 1, [&](int64_t l0, int64_t l1) {
      for (int64_t lane = l0; lane < l1; ++lane) {
        if (lane == 0) {
          extra();
          chunk_tasks(0, first);
        } else {
          const int64_t t0 = first + (lane - 1) * per;
          chunk_tasks(std::min(t0, n_tasks), std::min(t0 + per, n_tasks));
        }
      }
    });
  } else {
    parallel_for(ctx, 0, n_tasks, 1, chunk_tasks);
  }
  // Phase 2: combine the partials of each long list left to right, then finish the element.
  const int64_t n_long = static_cast<int64_t>(longs.size());
  const int64_t nb2 = std::max<int64_t>(1, std::min<int64_t>(K / 16, (4 * threads + n_long - 1) / n_long));
  const int64_t block2 = (K + nb2 - 1) / nb2;
  parallel_for(ctx, 0, static_cast<int64_t>(longs.size()) * nb2, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const Long& lr = longs[static_cast<size_t>(t / nb2)];
      const int64_t k0 = (t % nb2) * block2, k1 = std::min(K, k0 + block2);
      const RowList<T> l = list(lr.r);
      for (int64_t k = k0; k < k1; ++k) {
        T acc = part[static_cast<size_t>(lr.c0 * K + k)];
        int64_t best = kMinMax ? parg[static_cast<size_t>(lr.c0 * K + k)] : 0;
        for (int64_t c = 1; c < lr.chunks; ++c) {
          const size_t at = static_cast<size_t>((lr.c0 + c) * K + k);
          const T x = part[at];
          if constexpr (R == Reduce::Sum || R == Reduce::Mean) {
            acc = add(acc, x);
          } else if constexpr (R == Reduce::Mul) {
            acc = mul(acc, x);
          } else {
            const bool take = parg[at] != sentinel && ((R == Reduce::Max) ? (x > acc) : (x < acc));
            if (take) {
              acc = x;
              best = parg[at];
            }
          }
        }
        if constexpr (R == Reduce::Mean) acc = mean_of(acc, l.hi - l.lo, rounding);
        if constexpr (kMinMax) {
          if (empty_rule && best == sentinel) acc = T(0);
          arg[l.row * K + k] = best;
        }
        out[l.row * K + k] = acc;
      }
    }
  });
}

// Stable counting sort of the destinations of each index row: ptr [rows][M + 1], perm [rows][E].
void group_rows(const CpuContext& ctx, const int64_t* index, int64_t rows, int64_t E, int64_t M,
                std::vector<int64_t>& ptr, std::vector<int64_t>& perm) {
  ptr.assign(static_cast<size_t>(rows * (M + 1)), 0);
  perm.resize(static_cast<size_t>(rows * E));
  auto one = [&](int64_t o) {
    const int64_t* idx = index + o * E;
    int64_t* p = ptr.data() + o * (M + 1);
    int64_t* q = perm.data() + o * E;
    for (int64_t e = 0; e < E; ++e) ++p[idx[e] + 1];
    for (int64_t m = 0; m < M; ++m) p[m + 1] += p[m];
    // p[m] is now the start of bucket m; fill with a running cursor kept in a scratch copy.
    std::vector<int64_t> cursor(p, p + M);
    for (int64_t e = 0; e < E; ++e) q[cursor[static_cast<size_t>(idx[e])]++] = e;
  };
  if (rows == 1) {
    one(0);
  } else {
    parallel_for(ctx, 0, rows, 1, [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o) one(o);
    });
  }
}

// Destinations per (o, e, k): one task per (o, column block), sources in ascending e.
template <class T, Reduce R>
void scatter_elementwise(const CpuContext& ctx, const ScatterParams& params, const ReduceShape& s,
                         const T* src, const int64_t* index, int64_t index_outer, T* out, int64_t* arg) {
  const int64_t E = s.src_rows, M = s.out_rows, K = s.inner;
  const int64_t threads = std::max(1, max_threads(ctx));
  const int64_t blocks_per_outer = std::max<int64_t>(1, std::min<int64_t>(K / 16, (threads * 4 + s.outer - 1) / s.outer));
  const int64_t block = (K + blocks_per_outer - 1) / blocks_per_outer;
  const int64_t nb = (K + block - 1) / block;
  const bool init = !params.accumulate;
  // Float sum / mean / mul follow the chunk rule per element: contribution j (0-based) of an
  // element goes into the running value while j < kScatterChunk, else into the partial of its
  // chunk, which joins the running value when the next chunk starts and at the end (the left-to-
  // right combine). Integers wrap (any order gives the same bits); max / min are associative.
  constexpr bool kChunked = std::is_floating_point_v<T> && (R == Reduce::Sum || R == Reduce::Mean || R == Reduce::Mul);
  parallel_for(ctx, 0, s.outer * nb, 1, [&](int64_t t0, int64_t t1) {
    std::vector<int64_t> count;
    std::vector<T> part;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t o = t / nb, k0 = (t % nb) * block, k1 = std::min(K, k0 + block);
      T* out_o = out + o * M * K;
      int64_t* arg_o = arg ? arg + o * M * K : nullptr;
      const T* src_o = src + o * E * K;
      const int64_t* idx_o = index + (index_outer == 1 ? 0 : o) * E * K;
      if (init) {
        const T id = identity<T>(R);
        for (int64_t m = 0; m < M; ++m)
          for (int64_t k = k0; k < k1; ++k) out_o[m * K + k] = id;
      }
      if constexpr (R == Reduce::Min || R == Reduce::Max) {
        for (int64_t m = 0; m < M; ++m)
          for (int64_t k = k0; k < k1; ++k) arg_o[m * K + k] = E;
      }
      if constexpr (R == Reduce::Mean || kChunked) count.assign(static_cast<size_t>(M * (k1 - k0)), 0);
      if constexpr (kChunked) part.assign(static_cast<size_t>(M * (k1 - k0)), T(0));
      for (int64_t e = 0; e < E; ++e) {
        for (int64_t k = k0; k < k1; ++k) {
          const int64_t m = idx_o[e * K + k];
          T& v = out_o[m * K + k];
          const T x = src_o[e * K + k];
          if constexpr (kChunked) {
            const size_t at = static_cast<size_t>(m * (k1 - k0) + (k - k0));
            const int64_t j = count[at]++;
            auto op = [](T a, T b) { return R == Reduce::Mul ? mul(a, b) : add(a, b); };
            if (j < kScatterChunk) {
              v = op(v, x);
            } else if ((j & (kScatterChunk - 1)) == 0) {  // a new chunk starts from x
              if (j >= 2 * kScatterChunk) v = op(v, part[at]);
              part[at] = x;
            } else {
              part[at] = op(part[at], x);
            }
          } else if constexpr (R == Reduce::Sum) {
            v = add(v, x);
          } else if constexpr (R == Reduce::Mean) {
            v = add(v, x);
            ++count[static_cast<size_t>(m * (k1 - k0) + (k - k0))];
          } else if constexpr (R == Reduce::Mul) {
            v = mul(v, x);
          } else if constexpr (R == Reduce::Max) {
            if (x > v) {
              v = x;
              arg_o[m * K + k] = e;
            }
          } else {
            if (x < v) {
              v = x;
              arg_o[m * K + k] = e;
            }
          }
        }
      }
      for (int64_t m = 0; m < M; ++m) {
        for (int64_t k = k0; k < k1; ++k) {
          if constexpr (kChunked) {
            const size_t at = static_cast<size_t>(m * (k1 - k0) + (k - k0));
            if (count[at] > kScatterChunk)
              out_o[m * K + k] = R == Reduce::Mul ? mul(out_o[m * K + k], part[at]) : add(out_o[m * K + k], part[at]);
          }
          if constexpr (R == Reduce::Mean) {
            out_o[m * K + k] = mean_of(out_o[m * K + k], count[static_cast<size_t>(m * (k1 - k0) + (k - k0))],
                                       params.integer_mean);
          } else if constexpr (R == Reduce::Min || R == Reduce::Max) {
            if (init && arg_o[m * K + k] == E) out_o[m * K + k] = T(0);
          }
        }
      }
    }
  });
}

// Destinations per (o, e) without a full grouping: one task per (o, column block) walks the
// sources in ascending e and folds source row e's block into output row index[e] (an
// ascending-order fold per element by construction, vectorised over the block's columns).
// Destinations with more than kScatterChunk sources are left to the chunk path of reduce_rows
// (their source lists gathered once, in ascending e), so the walk is a plain serial fold; when
// there are such destinations, the walk visits only the sources of the others (`rows`, a
// compacted list, prefetched ahead: the sparse rows of a concentrated index would otherwise cost
// a memory latency each). Max / min keep their source indices in A lanes (as wide as the values
// where they fit). count: sources per destination (for mean); skip[m]: m is left to the chunk
// path.
template <class T, Reduce R, class A>
void scatter_direct_block(const ScatterParams& params, int64_t E, int64_t M, int64_t K, const T* src,
                          const int64_t* idx, const int64_t* count, const int32_t* skip, const int64_t* rows,
                          int64_t n_rows, T* out, int64_t* arg, int64_t k0, int64_t k1) {
  constexpr bool kMinMax = R == Reduce::Min || R == Reduce::Max;
  const int64_t w = k1 - k0;
  const bool init = !params.accumulate;
  if (init) {
    const T id = identity<T>(R);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = k0; k < k1; ++k) out[m * K + k] = id;
  }
  constexpr int64_t kAhead = 16;
  const int64_t lines = (w * static_cast<int64_t>(sizeof(T)) + 63) / 64;
  std::vector<A> at(kMinMax ? static_cast<size_t>(M * w) : 0, static_cast<A>(E));
  auto fold_source = [&](int64_t e) {
    const int64_t m = idx[e];
    const T* __restrict s = src + e * K + k0;
    T* __restrict o = out + m * K + k0;
    if constexpr (kMinMax) {
      A* __restrict a = at.data() + m * w;
      const A ea = static_cast<A>(e);
      for (int64_t k = 0; k < w; ++k) {
        const bool take = (R == Reduce::Max) ? (s[k] > o[k]) : (s[k] < o[k]);
        const A mask = static_cast<A>(-static_cast<A>(take));
        o[k] = take ? s[k] : o[k];
        a[k] = static_cast<A>((ea & mask) | (a[k] & ~mask));
      }
    } else if constexpr (R == Reduce::Mul) {
      for (int64_t k = 0; k < w; ++k) o[k] = mul(o[k], s[k]);
    } else {
      for (int64_t k = 0; k < w; ++k) o[k] = add(o[k], s[k]);
    }
  };
  if (rows == nullptr) {
    for (int64_t e = 0; e < E; ++e) fold_source(e);
  } else {
    for (int64_t i = 0; i < n_rows; ++i) {
      if (i + kAhead < n_rows) {
        const char* p = reinterpret_cast<const char*>(src + rows[i + kAhead] * K + k0);
        for (int64_t l = 0; l < lines; ++l) __builtin_prefetch(p + 64 * l);
      }
      fold_source(rows[i]);
    }
  }
  for (int64_t m = 0; m < M; ++m) {
    if (skip[m] >= 0) continue;
    if constexpr (kMinMax) {
      for (int64_t k = 0; k < w; ++k) {
        const int64_t best = static_cast<int64_t>(at[static_cast<size_t>(m * w + k)]);
        if (init && best == E) out[m * K + k0 + k] = T(0);
        arg[m * K + k0 + k] = best;
      }
    } else if constexpr (R == Reduce::Mean) {
      for (int64_t k = k0; k < k1; ++k) out[m * K + k] = mean_of(out[m * K + k], count[m], params.integer_mean);
    }
  }
}

// The sources of one index row by destination, for the direct path: count[m], skip[m] (the
// destination's place among the long ones, else -1), the long destinations' source lists
// (ascending e: long l has pos[start[l], start[l] + count[dest[l]])) and, when there are long
// ones, the other sources in ascending e (shorts[0, n_short)).
struct DirectRow {
  std::vector<int64_t> count;
  std::vector<int32_t> skip;
  std::vector<int64_t> dest, start;
  std::unique_ptr<int64_t[]> pos, shorts;
  int64_t n_short = 0;
};

template <class T, Reduce R>
void scatter_direct(const CpuContext& ctx, const ScatterParams& params, const ReduceShape& s, const T* src,
                    const int64_t* index, int64_t index_outer, T* out, int64_t* arg, int64_t block) {
  const int64_t E = s.src_rows, M = s.out_rows, K = s.inner;
  std::vector<DirectRow> rows(static_cast<size_t>(index_outer));
  // A shared index row is split into `parts` source ranges counted and listed in parallel
  // (histograms per range, then cursors per range keep every list in ascending e).
  const int64_t threads = std::max(1, max_threads(ctx));
  const int64_t parts = index_outer == 1 ? std::clamp<int64_t>(E / 65536, 1, threads) : 1;
  const int64_t range = (E + parts - 1) / parts;
  auto build = [&](int64_t r) {
    DirectRow& d = rows[static_cast<size_t>(r)];
    const int64_t* idx = index + r * E;
    std::vector<std::vector<int64_t>> hist(static_cast<size_t>(parts));
    parallel_for(ctx, 0, parts, 1, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        std::vector<int64_t>& h = hist[static_cast<size_t>(p)];
        h.assign(static_cast<size_t>(M), 0);
        for (int64_t e = p * range, e1 = std::min(E, e + range); e < e1; ++e) ++h[static_cast<size_t>(idx[e])];
      }
    });
    d.count = hist[0];
    for (int64_t p = 1; p < parts; ++p)
      for (int64_t m = 0; m < M; ++m)
        d.count[static_cast<size_t>(m)] += hist[static_cast<size_t>(p)][static_cast<size_t>(m)];
    d.skip.assign(static_cast<size_t>(M), -1);
    int64_t total = 0;
    for (int64_t m = 0; m < M; ++m) {
      if (d.count[static_cast<size_t>(m)] <= kScatterChunk) continue;
      d.skip[static_cast<size_t>(m)] = static_cast<int32_t>(d.dest.size());
      d.dest.push_back(m);
      d.start.push_back(total);
      total += d.count[static_cast<size_t>(m)];
    }
    if (d.dest.empty()) return;
    const size_t L = d.dest.size();
    d.n_short = E - total;
    // One extra slot in each array takes the writes a source does not make (branch-free fill).
    d.pos.reset(new int64_t[static_cast<size_t>(total) + 1]);
    d.shorts.reset(new int64_t[static_cast<size_t>(d.n_short) + 1]);
    std::vector<int64_t> cursor(static_cast<size_t>(parts) * (L + 1));  // range p: long l, then shorts
    std::vector<int64_t> at(d.start);
    int64_t short_at = 0;
    for (int64_t p = 0; p < parts; ++p) {
      const int64_t e0 = p * range, e1 = std::min(E, e0 + range);
      int64_t longs_here = 0;
      for (size_t l = 0; l < L; ++l) {
        const int64_t c = hist[static_cast<size_t>(p)][static_cast<size_t>(d.dest[l])];
        cursor[static_cast<size_t>(p) * (L + 1) + l] = at[l];
        at[l] += c;
        longs_here += c;
      }
      cursor[static_cast<size_t>(p) * (L + 1) + L] = short_at;
      short_at += std::max<int64_t>(0, e1 - e0) - longs_here;
    }
    parallel_for(ctx, 0, parts, 1, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        int64_t* c = cursor.data() + static_cast<size_t>(p) * (L + 1);
        int64_t ns = c[L];
        int64_t* pos = d.pos.get();
        int64_t* shorts = d.shorts.get();
        const int64_t sink = total;  // pos slot for short sources
        if (L == 1) {  // one long destination (the concentrated case): both cursors in registers
          int64_t nl = c[0];
          for (int64_t e = p * range, e1 = std::min(E, e + range); e < e1; ++e) {
            const bool is_long = d.skip[static_cast<size_t>(idx[e])] >= 0;
            pos[is_long ? nl : sink] = e;
            shorts[is_long ? d.n_short : ns] = e;
            nl += is_long;
            ns += !is_long;
          }
        } else {
          for (int64_t e = p * range, e1 = std::min(E, e + range); e < e1; ++e) {
            const int32_t l = d.skip[static_cast<size_t>(idx[e])];
            if (l >= 0) {
              pos[c[l]++] = e;
            } else {
              shorts[ns++] = e;
            }
          }
        }
      }
    });
  };
  if (index_outer == 1) {
    build(0);
  } else {
    parallel_for(ctx, 0, index_outer, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) build(r);
    });
  }
  const int64_t nb = (K + block - 1) / block;
  auto walk = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t o = t / nb, k0 = (t % nb) * block, k1 = std::min(K, k0 + block);
      const int64_t ir = index_outer == 1 ? 0 : o;
      const DirectRow& d = rows[static_cast<size_t>(ir)];
      const T* src_o = src + o * E * K;
      const int64_t* idx_o = index + ir * E;
      T* out_o = out + o * M * K;
      int64_t* arg_o = arg ? arg + o * M * K : nullptr;
      const int64_t* list = d.dest.empty() ? nullptr : d.shorts.get();
      if (sizeof(T) < 8 && E < std::numeric_limits<int32_t>::max()) {
        scatter_direct_block<T, R, int32_t>(params, E, M, K, src_o, idx_o, d.count.data(), d.skip.data(), list,
                                            d.n_short, out_o, arg_o, k0, k1);
      } else {
        scatter_direct_block<T, R, int64_t>(params, E, M, K, src_o, idx_o, d.count.data(), d.skip.data(), list,
                                            d.n_short, out_o, arg_o, k0, k1);
      }
    }
  };
  // A single walk task with long destinations runs beside their chunk tasks.
  const bool overlap = s.outer * nb == 1 && !rows[0].dest.empty();
  if (!overlap) parallel_for(ctx, 0, s.outer * nb, 1, walk);
  // Long destinations: the chunk path (chunks x column blocks in parallel, then the combine).
  std::vector<RowList<T>> longs;
  for (int64_t o = 0; o < s.outer; ++o) {
    const DirectRow& d = rows[static_cast<size_t>(index_outer == 1 ? 0 : o)];
    for (size_t l = 0; l < d.dest.size(); ++l) {
      const int64_t n = d.count[static_cast<size_t>(d.dest[l])];
      longs.push_back({src + o * E * K, d.pos.get(), d.start[l], d.start[l] + n, o * M + d.dest[l]});
    }
  }
  if (longs.empty()) return;
  const bool init = !params.accumulate;
  // Walk rows cost about three chunk rows (random rows, prefetched).
  reduce_rows<T, R>(
      ctx, static_cast<int64_t>(longs.size()), K, E, [&](int64_t r) { return longs[static_cast<size_t>(r)]; }, out,
      arg, init, init, params.integer_mean, overlap ? std::function<void()>([&] { walk(0, 1); }) : nullptr,
      overlap ? 3 * rows[0].n_short : 0);
}

template <class T>
void scatter_impl(const CpuContext& ctx, const ScatterParams& params, const ReduceShape& s, const T* src,
                  const int64_t* index, int64_t index_outer, int64_t index_inner, T* out, int64_t* arg) {
  core::validate_reduce_shape(s, "src");
  core::validate_scatter_index(s, index, index_outer, index_inner, params.sorted, "index");
  const bool minmax = params.reduce == Reduce::Min || params.reduce == Reduce::Max;
  PCOPS_CHECK(!minmax || arg != nullptr || s.outer * s.out_rows * s.inner == 0, Value,
              "arg: an output buffer is required for min / max");
  const int64_t E = s.src_rows, M = s.out_rows, K = s.inner;
  if (s.outer == 0 || M == 0 || K == 0) return;
  if (index_inner != 1) {  // == K > 1: a destination per element
    dispatch_reduce(params.reduce, [&](auto r) {
      scatter_elementwise<T, decltype(r)::value>(ctx, params, s, src, index, index_outer, out, arg);
    });
    return;
  }
  const int64_t threads = std::max(1, max_threads(ctx));
  // The direct path (no sort: sources walked in order) unless many threads would idle: its tasks
  // are (o, column block) with blocks of whole 128-byte line pairs (threads writing the two lines
  // of one pair fight over it through the adjacent-line prefetcher).
  const int64_t pair = std::max<int64_t>(1, 128 / static_cast<int64_t>(sizeof(T)));
  const int64_t col_blocks = std::max<int64_t>(1, K / pair);
  if (!params.sorted && (threads <= 4 || 2 * s.outer * col_blocks >= threads)) {
    const int64_t per_outer = std::min<int64_t>(col_blocks, std::max<int64_t>(1, (threads + s.outer - 1) / s.outer));
    const int64_t block = (K + per_outer - 1) / per_outer;
    dispatch_reduce(params.reduce, [&](auto r) {
      scatter_direct<T, decltype(r)::value>(ctx, params, s, src, index, index_outer, out, arg,
                                             per_outer == 1 ? K : (block + pair - 1) / pair * pair);
    });
    return;
  }
  // Destinations per (o, e): group once per index row, then reduce output rows.
  const int64_t rows = index_outer;
  std::vector<int64_t> ptr, perm;
  const bool identity_perm = params.sorted;
  if (identity_perm) {
    // Sorted destinations: the sources of row m are a consecutive range; offsets by one scan.
    ptr.assign(static_cast<size_t>(rows * (M + 1)), 0);
    for (int64_t o = 0; o < rows; ++o) {
      const int64_t* idx = index + o * E;
      int64_t* p = ptr.data() + o * (M + 1);
      for (int64_t e = 0; e < E; ++e) ++p[idx[e] + 1];
      for (int64_t m = 0; m < M; ++m) p[m + 1] += p[m];
    }
  } else {
    group_rows(ctx, index, rows, E, M, ptr, perm);
  }
  auto row_ptr = [&](int64_t o) { return ptr.data() + (rows == 1 ? 0 : o) * (M + 1); };
  auto list = [&](int64_t r) {
    const int64_t o = r / M, m = r % M;
    const int64_t* p = row_ptr(o);
    const int64_t* q = identity_perm ? nullptr : perm.data() + (rows == 1 ? 0 : o) * E;
    return RowList<T>{src + o * E * K, q, p[m], p[m + 1], r};
  };
  const bool init = !params.accumulate;
  dispatch_reduce(params.reduce, [&](auto red) {
    reduce_rows<T, decltype(red)::value>(ctx, s.outer * M, K, E, list, out, arg, init, init, params.integer_mean);
  });
}

template <class T>
void segment_csr_impl(const CpuContext& ctx, Reduce reduce, const ReduceShape& s, const T* src,
                      const int64_t* indptr, int64_t indptr_outer, T* out, int64_t* arg) {
  core::validate_reduce_shape(s, "src");
  PCOPS_CHECK(indptr_outer == 1 || indptr_outer == s.outer, Value, "indptr: expected 1 or ", s.outer,
              " leading rows, got ", indptr_outer);
  core::validate_indptr(indptr, indptr_outer, s.out_rows, s.src_rows, "indptr");
  const bool minmax = reduce == Reduce::Min || reduce == Reduce::Max;
  PCOPS_CHECK(!minmax || arg != nullptr || s.outer * s.out_rows * s.inner == 0, Value,
              "arg: an output buffer is required for min / max");
  PCOPS_CHECK(reduce != Reduce::Mul, Value, "reduce: segment_csr supports sum, mean, min and max, got mul");
  const int64_t E = s.src_rows, M = s.out_rows, K = s.inner;
  if (s.outer == 0 || M == 0 || K == 0) return;
  auto row_ptr = [&](int64_t o) { return indptr + (indptr_outer == 1 ? 0 : o) * (M + 1); };
  auto list = [&](int64_t r) {
    const int64_t o = r / M, m = r % M;
    const int64_t* p = row_ptr(o);
    return RowList<T>{src + o * E * K, nullptr, p[m], p[m + 1], r};
  };
  dispatch_reduce(reduce, [&](auto red) {
    reduce_rows<T, decltype(red)::value>(ctx, s.outer * M, K, E, list, out, arg, true, true, IntegerMean::Trunc);
  });
}

template <class T>
void gather_csr_impl(const CpuContext& ctx, const ReduceShape& s, const T* src, const int64_t* indptr,
                     int64_t indptr_outer, T* out) {
  core::validate_reduce_shape(s, "src");
  PCOPS_CHECK(indptr_outer == 1 || indptr_outer == s.outer, Value, "indptr: expected 1 or ", s.outer,
              " leading rows, got ", indptr_outer);
  // src rows are the segments; out rows the gathered positions.
  core::validate_indptr(indptr, indptr_outer, s.src_rows, s.out_rows, "indptr");
  const int64_t M = s.src_rows, E = s.out_rows, K = s.inner;
  if (s.outer == 0 || M == 0 || K == 0) return;
  auto row_ptr = [&](int64_t o) { return indptr + (indptr_outer == 1 ? 0 : o) * (M + 1); };
  auto count = [&](int64_t r) {
    const int64_t* p = row_ptr(r / M);
    const int64_t m = r % M;
    return p[m + 1] - p[m];
  };
  const std::vector<Task> tasks = plan(ctx, s.outer * M, K, count);
  run_tasks(ctx, tasks, [&](const Task& t) {
    for (int64_t r = t.r0; r < t.r1; ++r) {
      const int64_t o = r / M, m = r % M;
      const int64_t* p = row_ptr(o);
      const T* srow = src + r * K;
      for (int64_t e = p[m]; e < p[m + 1]; ++e) {
        T* orow = out + (o * E + e) * K;
        std::copy(srow + t.k0, srow + t.k1, orow + t.k0);
      }
    }
  });
}

template <class T>
void gather_coo_impl(const CpuContext& ctx, const ReduceShape& s, const T* src, const int64_t* index,
                     int64_t index_outer, T* out) {
  core::validate_reduce_shape(s, "src");
  // index values address src rows: validate against src_rows as the "output" size of a scatter.
  const ReduceShape as_scatter{s.outer, s.out_rows, s.src_rows, s.inner};
  core::validate_scatter_index(as_scatter, index, index_outer, 1, false, "index");
  const int64_t M = s.src_rows, E = s.out_rows, K = s.inner;
  if (s.outer == 0 || E == 0 || K == 0) return;
  const int64_t grain = std::max<int64_t>(1, 16384 / K);
  parallel_for(ctx, 0, s.outer * E, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t o = r / E, e = r % E;
      const int64_t m = index[(index_outer == 1 ? 0 : o) * E + e];
      const T* srow = src + (o * M + m) * K;
      std::copy(srow, srow + K, out + r * K);
    }
  });
}

}  // namespace

#define PCOPS_SCATTER_DEFINE(T)                                                                       \
  void scatter(const CpuContext& ctx, const ScatterParams& params, const ReduceShape& shape,          \
               const T* src, const int64_t* index, int64_t index_outer, int64_t index_inner, T* out, \
               int64_t* arg) {                                                                        \
    scatter_impl<T>(ctx, params, shape, src, index, index_outer, index_inner, out, arg);             \
  }                                                                                                   \
  void segment_csr(const CpuContext& ctx, Reduce reduce, const ReduceShape& shape, const T* src,      \
                   const int64_t* indptr, int64_t indptr_outer, T* out, int64_t* arg) {               \
    segment_csr_impl<T>(ctx, reduce, shape, src, indptr, indptr_outer, out, arg);                    \
  }                                                                                                   \
  void gather_csr(const CpuContext& ctx, const ReduceShape& shape, const T* src,                     \
                  const int64_t* indptr, int64_t indptr_outer, T* out) {                              \
    gather_csr_impl<T>(ctx, shape, src, indptr, indptr_outer, out);                                 \
  }                                                                                                   \
  void gather_coo(const CpuContext& ctx, const ReduceShape& shape, const T* src,                     \
                  const int64_t* index, int64_t index_outer, T* out) {                                \
    gather_coo_impl<T>(ctx, shape, src, index, index_outer, out);                                    \
  }

PCOPS_SCATTER_DEFINE(float)
PCOPS_SCATTER_DEFINE(double)
PCOPS_SCATTER_DEFINE(int64_t)
PCOPS_SCATTER_DEFINE(int32_t)
PCOPS_SCATTER_DEFINE(int16_t)
PCOPS_SCATTER_DEFINE(int8_t)
PCOPS_SCATTER_DEFINE(uint8_t)

#undef PCOPS_SCATTER_DEFINE

}  // namespace pcops::cpu
