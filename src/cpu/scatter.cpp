// CPU scatter / segment reductions (contract: include/pcops/scatter.hpp).
// Parallel decomposition: output rows, grouped into tasks of similar cost (contributions x
// inner); a heavy row (a concentrated destination) is split into column blocks. Every output
// element is reduced by exactly one task, in ascending source order, so no atomics are needed
// and the result does not depend on the thread count. Destinations given per (o, e) are grouped
// once per call by a stable counting sort (CSR offsets + source permutation).
#include "pcops/scatter.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

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
  parallel_for(ctx, 0, s.outer * nb, 1, [&](int64_t t0, int64_t t1) {
    std::vector<int64_t> count;
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
      if constexpr (R == Reduce::Mean) count.assign(static_cast<size_t>(M * (k1 - k0)), 0);
      for (int64_t e = 0; e < E; ++e) {
        for (int64_t k = k0; k < k1; ++k) {
          const int64_t m = idx_o[e * K + k];
          T& v = out_o[m * K + k];
          const T x = src_o[e * K + k];
          if constexpr (R == Reduce::Sum) {
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
  auto count = [&](int64_t r) {
    const int64_t* p = row_ptr(r / M);
    const int64_t m = r % M;
    return p[m + 1] - p[m];
  };
  const std::vector<Task> tasks = plan(ctx, s.outer * M, K, count);
  const bool init = !params.accumulate;
  dispatch_reduce(params.reduce, [&](auto red) {
    constexpr Reduce R = decltype(red)::value;
    run_tasks(ctx, tasks, [&](const Task& t) {
      for (int64_t r = t.r0; r < t.r1; ++r) {
        const int64_t o = r / M, m = r % M;
        const int64_t* p = row_ptr(o);
        const int64_t* q = identity_perm ? nullptr : perm.data() + (rows == 1 ? 0 : o) * E;
        reduce_row<T, R>(out + r * K, arg ? arg + r * K : nullptr, src + o * E * K, K, t.k0, t.k1, q, p[m],
                         p[m + 1], init, init, params.integer_mean, E);
      }
    });
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
  auto count = [&](int64_t r) {
    const int64_t* p = row_ptr(r / M);
    const int64_t m = r % M;
    return p[m + 1] - p[m];
  };
  const std::vector<Task> tasks = plan(ctx, s.outer * M, K, count);
  dispatch_reduce(reduce, [&](auto red) {
    constexpr Reduce R = decltype(red)::value;
    run_tasks(ctx, tasks, [&](const Task& t) {
      for (int64_t r = t.r0; r < t.r1; ++r) {
        const int64_t o = r / M, m = r % M;
        const int64_t* p = row_ptr(o);
        reduce_row<T, R>(out + r * K, arg ? arg + r * K : nullptr, src + o * E * K, K, t.k0, t.k1, nullptr,
                         p[m], p[m + 1], true, true, IntegerMean::Trunc, E);
      }
    });
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
