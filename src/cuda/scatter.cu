// CUDA scatter / segment reductions and gathers, bitwise equal to the CPU backend (contract:
// include/pcops/scatter.hpp): every output element folds its contributions in ascending source
// order from the start value (lists longer than kScatterChunk by the contract's chunk rule),
// without float atomics (run-to-run deterministic).
//
// - Grouping. Destinations per (o, e) (index_inner == 1): the inverse index
//   (primitives/inverse_index.cuh: a stable radix sort of (row, destination) keys with 32-bit
//   source positions) lists the sources of every (index row, m) in ascending e. Destinations per
//   (o, e, k): the index is first transposed to [index_outer, inner, E] so that each (o, k) is one
//   segment of the inverse index. Sorted indices (segment_coo) need no sort: the offsets of row m
//   are lower bounds of m in the index row (one binary search per (row, m)). segment_csr reads
//   its offsets directly. The grouping's first kernel also zeroes the reduction's work-list
//   counters, and the inverse index computes the binding's index statistics on its one read of
//   the index (no separate statistics kernel or memset).
// - Reduction. One thread per output element (o, m, k), k fastest, so neighbouring threads of a
//   row read neighbouring source columns; it folds its list in order with the CPU's arithmetic
//   (float/double add and multiply without contraction, two's-complement wrap for integers,
//   strict compares for max / min, mean = sum / count with the same integer rounding). When K is
//   a multiple of 32 and destinations are per (o, e), a warp's 32 lanes share one list: they read
//   its source positions 32 at a time (coalesced, read ahead) and share them by shuffles, sixteen
//   source rows in flight.
//   A list of kLongList + 1 .. kScatterChunk sources is appended to a work list (an integer
//   atomic counter: the order of the work list does not matter) and folded by a warp: the lanes
//   load the sources, coalesced and many in flight, and every lane folds them in ascending order
//   from shuffles, so the fold is the same sequence of operations.
//   A longer list (a concentrated destination) follows the chunk rule: the warp's long elements
//   reserve one task per (element, chunk) with one atomic per warp (tasks of neighbouring columns
//   side by side when their chunk counts agree); one thread per task folds its chunk serially
//   (sixteen loads in flight; lanes on neighbouring columns read the same source rows) into a
//   partial, and the element's last task to finish (an integer completion count) joins its
//   partials in chunk order. Medium lists and chunk tasks share one launch (long_lists_kernel).
// - gather_csr: one thread per (o, e, k) finds e's segment by binary search in the offsets;
//   gather_coo: one thread per (o, e, k) copies its source.
// No atomic fast path: integer sums and NaN-free max / min could use atomics without changing the
// result, but the sorted fold is deterministic for every type and keeps one code path (the only
// atomics are integer work-list and completion counters, and the statistics' integer max).
// index / indptr values are device memory and are not checked here (the header): an index outside
// [0, M) is left out of every list and offsets are clamped to [0, rows]; the statistics the
// binding checks are computed on request (index_stats / indptr_stats).
#include "pcops/scatter.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "common/scatter_chunk.hpp"
#include "core/validate.hpp"
#include "cuda/common.cuh"
#include "cuda/primitives/index_stats.cuh"
#include "cuda/primitives/inverse_index.cuh"
#include "pcops/error.hpp"

namespace pcops::cuda {
namespace {

using common::kScatterChunk;

struct ScatterPolicy {
  static constexpr int kThreads = 256;
  static constexpr int kUnroll = 8;  // source loads in flight per thread
  // Lists shared by the 32 lanes of a warp (K % 32 == 0): source loads in flight per lane.
  static constexpr int kRowUnroll = 16;
  static constexpr int64_t kMaxBlocks = int64_t{1} << 20;  // grid-stride beyond
  // Lists longer than this, up to kScatterChunk, are folded by a warp: its lanes load 32 x
  // kWarpUnroll sources at a time and every lane folds them in order from register shuffles.
  static constexpr int64_t kLongList = 256;
  static constexpr int kWarpUnroll = 4;
  static constexpr int kWarpBlocksPerSm = 8;
  // Lists longer than kScatterChunk: one thread per (element, chunk) task, this many loads in
  // flight (a serial chain of at most kScatterChunk folds each).
  static constexpr int kChunkUnroll = 16;
  static constexpr int kChunkBlocksPerSm = 16;
};

unsigned blocks_for(int64_t items) {
  return detail::grid_blocks(items, ScatterPolicy::kThreads, ScatterPolicy::kMaxBlocks);
}

template <class T>
__device__ __forceinline__ T add(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return a + b;  // --fmad=false: an IEEE add, as the CPU's
  } else {
    using W = std::conditional_t<(sizeof(T) < 4), uint32_t, std::make_unsigned_t<T>>;
    return static_cast<T>(static_cast<W>(static_cast<W>(a) + static_cast<W>(b)));
  }
}

template <class T>
__device__ __forceinline__ T mul(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return a * b;
  } else {
    using W = std::conditional_t<(sizeof(T) < 4), uint32_t, std::make_unsigned_t<T>>;
    return static_cast<T>(static_cast<W>(static_cast<W>(a) * static_cast<W>(b)));
  }
}

template <class T, Reduce R>
__device__ __forceinline__ T identity() {
  if constexpr (R == Reduce::Mul) return T(1);
  else if constexpr (R == Reduce::Min) return std::numeric_limits<T>::max();
  else if constexpr (R == Reduce::Max) return std::numeric_limits<T>::lowest();
  else return T(0);
}

template <class T>
__device__ __forceinline__ T mean_of(T sum, int64_t count, IntegerMean rounding) {
  const int64_t c = count > 0 ? count : 1;
  if constexpr (std::is_floating_point_v<T>) {
    return sum / static_cast<T>(c);  // --prec-div=true: IEEE division
  } else {
    const int64_t a = static_cast<int64_t>(sum);
    int64_t q = a / c;
    if (rounding == IntegerMean::Floor && a % c != 0 && a < 0) --q;
    return static_cast<T>(q);
  }
}

// One step of the contract's fold: acc (and best, the source index of a max / min) after x of e.
template <class T, Reduce R>
__device__ __forceinline__ void fold(T& acc, int64_t& best, T x, int64_t e) {
  if constexpr (R == Reduce::Sum || R == Reduce::Mean) {
    acc = add(acc, x);
  } else if constexpr (R == Reduce::Mul) {
    acc = mul(acc, x);
  } else {
    const bool take = (R == Reduce::Max) ? (x > acc) : (x < acc);
    acc = take ? x : acc;
    best = take ? e : best;
  }
}

// The element's final value (mean division, empty-slot rule) and arg.
template <class T, Reduce R>
__device__ __forceinline__ void finish(T acc, int64_t best, int64_t count, int64_t E, bool empty_rule,
                                       IntegerMean rounding, int64_t i, T* out, int64_t* arg) {
  if constexpr (R == Reduce::Mean) acc = mean_of(acc, count, rounding);
  if constexpr (R == Reduce::Min || R == Reduce::Max) {
    if (empty_rule && best == E) acc = T(0);
    arg[i] = best;
  }
  out[i] = acc;
}

template <class T>
__device__ __forceinline__ T shfl(T v, int lane) {
  if constexpr (sizeof(T) < 4) return static_cast<T>(__shfl_sync(0xffffffffu, static_cast<int>(v), lane));
  else return __shfl_sync(0xffffffffu, v, lane);
}

// Where the sources of output element (o, m, k) are: list slots [ptr[b + m], ptr[b + m + 1]) with
// b = oi * row_stride + k * k_stride (oi = 0 when the lists are shared by every o), clamped to
// [0, limit); the source of list slot j is perm32[j] or perm64[j] (the inverse index's positions),
// or j itself when both are null.
struct Groups {
  const int64_t* ptr = nullptr;
  const uint32_t* perm32 = nullptr;
  const int64_t* perm64 = nullptr;
  int64_t row_stride = 0;
  int64_t k_stride = 0;
  int64_t limit = 0;  // list slots lie in [0, limit): offsets are clamped to it
  bool shared = false;

  __device__ __forceinline__ int64_t source(int64_t j) const {
    return perm32 != nullptr ? static_cast<int64_t>(perm32[j]) : (perm64 != nullptr ? perm64[j] : j);
  }
  // The list of element (o, m, k): [lo, hi), hi >= lo.
  __device__ __forceinline__ void bounds(int64_t o, int64_t m, int64_t k, int64_t& lo, int64_t& hi) const {
    const int64_t b = (shared ? 0 : o) * row_stride + k * k_stride + m;
    lo = max(ptr[b], int64_t{0});
    hi = max(min(ptr[b + 1], limit), lo);
  }
};

// Where the chunked elements and their chunk tasks are (device memory, filled by reduce_kernel).
struct ChunkedElem {
  int64_t i;       // the output element
  int64_t first;   // its chunk c is task first + c * stride
  int64_t stride;
  unsigned long long done;  // chunk tasks finished (the last one combines the partials)
};

constexpr int kCounters = 3;

struct LongLists {
  unsigned long long* counters = nullptr;  // [0] medium lists, [1] chunk tasks, [2] chunked elements
  int64_t* medium_ids = nullptr;
  int64_t medium_cap = 0;
  ChunkedElem* chunk_elems = nullptr;
  int64_t elem_cap = 0;
  int64_t* task_elem = nullptr;  // task -> index into chunk_elems
  int64_t task_cap = 0;
};

// Folds list slots [j, hi) into acc (and best), U loads in flight before their folds.
template <class T, Reduce R, int U>
__device__ __forceinline__ void fold_range(T& acc, int64_t& best, const T* s, int64_t K, const Groups& g, int64_t j,
                                           int64_t hi) {
  for (; j + U <= hi; j += U) {
    int64_t ev[U];
    T xv[U];
#pragma unroll
    for (int u = 0; u < U; ++u) ev[u] = g.source(j + u);
#pragma unroll
    for (int u = 0; u < U; ++u) xv[u] = s[ev[u] * K];
#pragma unroll
    for (int u = 0; u < U; ++u) fold<T, R>(acc, best, xv[u], ev[u]);
  }
  for (; j < hi; ++j) {
    const int64_t e = g.source(j);
    fold<T, R>(acc, best, s[e * K], e);
  }
}

// Folds list slots [lo, hi) into acc (and best) when every lane of the warp folds the same list
// (its own column of the same source rows): the lanes read the list's sources 32 at a time (one
// coalesced read, the next 32 read ahead) and share them by shuffles, and every lane keeps
// kRowUnroll source loads in flight (each load instruction of the warp reads one source row,
// coalesced). The same folds in the same ascending order as fold_range.
template <class T, Reduce R>
__device__ __forceinline__ void fold_row_list(T& acc, int64_t& best, const T* s, int64_t K, const Groups& g,
                                              int64_t lo, int64_t hi, int lane) {
  constexpr int U = ScatterPolicy::kRowUnroll;
  static_assert(32 % U == 0, "kRowUnroll must divide the warp size");
  int64_t ahead = lo + lane < hi ? g.source(lo + lane) : 0;
  for (int64_t j0 = lo; j0 < hi; j0 += 32) {
    const int64_t mine = ahead;
    ahead = j0 + 32 + lane < hi ? g.source(j0 + 32 + lane) : 0;
    const int n = static_cast<int>(min(int64_t{32}, hi - j0));  // warp-uniform
#pragma unroll
    for (int t0 = 0; t0 < 32; t0 += U) {
      if (t0 >= n) break;
      int64_t ev[U];
      T xv[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        ev[u] = shfl(mine, t0 + u);
        xv[u] = t0 + u < n ? s[ev[u] * K] : T(0);
      }
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (t0 + u < n) fold<T, R>(acc, best, xv[u], ev[u]);
    }
  }
}

// One thread per output element i = (o * M + m) * K + k, in warp-uniform passes (every lane of a
// warp takes part in each pass, so the warp-wide votes below are safe). A list of at most
// kLongList sources is folded here: when K is a multiple of 32 and the lists do not depend on k,
// the 32 lanes of a warp are the neighbouring columns of one (o, m) and fold the same list
// together (fold_row_list), else each lane folds its own (fold_range). A longer list is set
// aside for long_lists_kernel: up to kScatterChunk sources to medium_ids (one warp per list),
// beyond that to the chunk path (the contract's chunk rule): the warp's long elements reserve
// their chunk tasks with one atomic per warp. When all of them have the same number of chunks
// (the lists of a row of neighbouring columns), the tasks of one chunk for neighbouring elements
// are neighbours, so the chunk tasks' lanes read neighbouring columns of the same source rows
// (coalesced).
template <class T, Reduce R>
__global__ void __launch_bounds__(ScatterPolicy::kThreads)
    reduce_kernel(const T* src, Groups g, int64_t outer, int64_t E, int64_t M, int64_t K, bool init,
                  bool empty_rule, IntegerMean rounding, T* out, int64_t* arg, LongLists ll) {
  const int64_t total = outer * M * K;
  const int lane = static_cast<int>(threadIdx.x & 31u);
  // Every lane of a warp on the same list: the i of a warp are 32 consecutive elements from a
  // multiple of 32, so one (o, m) when K % 32 == 0 (and total % 32 == 0: all lanes valid or
  // none), and one list when the lists do not depend on k (k_stride == 0: not per-element
  // destinations).
  const bool row_lists = g.k_stride == 0 && K % 32 == 0;
  for (int64_t base = blockIdx.x * int64_t{blockDim.x}; base < total; base += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = base + threadIdx.x;
    const bool valid = i < total;
    int64_t lo = 0, hi = 0, k = 0, o = 0;
    if (valid) {
      k = i % K;
      const int64_t r = i / K, m = r % M;
      o = r / M;
      g.bounds(o, m, k, lo, hi);
    }
    const int64_t n = hi - lo;
    const bool chunked = valid && ll.chunk_elems != nullptr && n > kScatterChunk;
    const bool medium = valid && ll.medium_ids != nullptr && n > ScatterPolicy::kLongList && !chunked;
    if (medium) {
      const unsigned long long slot = atomicAdd(ll.counters + 0, 1ull);  // order-free: a work list
      if (slot < static_cast<unsigned long long>(ll.medium_cap)) ll.medium_ids[slot] = i;
    }
    const unsigned mask = __ballot_sync(0xffffffffu, chunked);
    if (mask != 0) {
      const int64_t nc = chunked ? common::scatter_chunks(n) : 0;
      const unsigned ncu = static_cast<unsigned>(min(nc, int64_t{0xFFFFFFFF}));
      unsigned lo_nc = chunked ? ncu : 0xFFFFFFFFu, hi_nc = chunked ? ncu : 0u;
#pragma unroll
      for (int d = 16; d > 0; d >>= 1) {
        lo_nc = min(lo_nc, __shfl_xor_sync(0xffffffffu, lo_nc, d));
        hi_nc = max(hi_nc, __shfl_xor_sync(0xffffffffu, hi_nc, d));
      }
      const bool uniform = lo_nc == hi_nc && hi_nc != 0xFFFFFFFFu;
      int64_t incl = nc;  // inclusive scan of the chunk counts over the lanes
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const int64_t y = __shfl_up_sync(0xffffffffu, incl, d);
        if (lane >= d) incl += y;
      }
      const int64_t tasks = __shfl_sync(0xffffffffu, incl, 31);
      const int nl = __popc(mask);
      const int rank = __popc(mask & ((1u << lane) - 1u));
      const int leader = __ffs(static_cast<int>(mask)) - 1;
      unsigned long long t_base = 0, e_base = 0;
      if (lane == leader) {
        t_base = atomicAdd(ll.counters + 1, static_cast<unsigned long long>(tasks));
        e_base = atomicAdd(ll.counters + 2, static_cast<unsigned long long>(nl));
      }
      t_base = __shfl_sync(0xffffffffu, t_base, leader);
      e_base = __shfl_sync(0xffffffffu, e_base, leader);
      // Written only when the whole reservation fits (it always does for valid lists: the caps
      // are bounds; bad offsets may overlap lists and are dropped, never written out of bounds).
      using U64 = unsigned long long;
      const bool fits = t_base + static_cast<U64>(tasks) <= static_cast<U64>(ll.task_cap) &&
                        e_base + static_cast<U64>(nl) <= static_cast<U64>(ll.elem_cap);
      if (chunked && fits) {
        const int64_t w = static_cast<int64_t>(e_base) + rank;
        const int64_t first = static_cast<int64_t>(t_base) + (uniform ? rank : incl - nc);
        const int64_t stride = uniform ? nl : 1;
        ll.chunk_elems[w] = ChunkedElem{i, first, stride, 0ull};
        for (int64_t c = 0; c < nc; ++c) ll.task_elem[first + c * stride] = w;
      }
    }
    // With row_lists, valid, medium and chunked are the same for every lane of the warp.
    if (!valid || medium || chunked) continue;
    const T* s = src + o * E * K + k;
    T acc = init ? identity<T, R>() : out[i];
    int64_t best = E;
    if (row_lists) fold_row_list<T, R>(acc, best, s, K, g, lo, hi, lane);
    else fold_range<T, R, ScatterPolicy::kUnroll>(acc, best, s, K, g, lo, hi);
    finish<T, R>(acc, best, n, E, empty_rule, rounding, i, out, arg);
  }
}

// A value another thread wrote before a fence this thread has synchronised with (not from L1).
template <class T>
__device__ __forceinline__ T load_fresh(const T* p) {
  return *static_cast<const volatile T*>(p);
}

// The lists reduce_kernel set aside, in one launch after it (stream order):
// - Medium lists (kLongList < n <= kScatterChunk: a single chunk), one warp each: lane l loads
//   sources j0 + u * 32 + l (coalesced list reads, kWarpUnroll loads in flight), then every lane
//   folds the 32 x kWarpUnroll values in ascending j from shuffles, so the result is the
//   sequential fold's.
// - Chunk tasks (lists longer than kScatterChunk, the contract's chunk rule), one thread each:
//   task t (chunk c of chunked element w) folds list slots [lo + c * kScatterChunk,
//   min(hi, lo + (c + 1) * kScatterChunk)) serially: chunk 0 from the start value, a later sum /
//   mean / mul chunk from its first source, a later max / min chunk from the identity with no arg
//   (the strict-compare fold with smallest-index ties is associative), into part[t] (its source
//   index into part_arg[t] for max / min). It then counts itself done on its element (an integer
//   atomic after a fence); the task that completes the count, whichever it is, joins the
//   element's partials in chunk order (sum / mean: add; mul: multiply; max / min: a later partial
//   replaces on a strict compare, so ties keep the left) and writes the final value (mean
//   division, empty-slot rule). Which thread joins them does not change the bits.
template <class T, Reduce R>
__global__ void __launch_bounds__(ScatterPolicy::kThreads)
    long_lists_kernel(const T* src, Groups g, int64_t E, int64_t M, int64_t K, bool init, bool empty_rule,
                      IntegerMean rounding, int64_t total, LongLists ll, T* part, int64_t* part_arg, T* out,
                      int64_t* arg) {
  constexpr bool kMinMax = R == Reduce::Min || R == Reduce::Max;
  {
    constexpr int U = ScatterPolicy::kWarpUnroll;
    const int lane = static_cast<int>(threadIdx.x & 31u);
    const int64_t warps = (int64_t{gridDim.x} * blockDim.x) >> 5;
    const int64_t count = min(static_cast<int64_t>(ll.counters[0]), ll.medium_cap);
    for (int64_t w = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) >> 5; w < count; w += warps) {
      const int64_t i = ll.medium_ids[w];
      const int64_t k = i % K, r = i / K, m = r % M, o = r / M;
      int64_t lo, hi;
      g.bounds(o, m, k, lo, hi);
      const T* s = src + o * E * K + k;
      T acc = init ? identity<T, R>() : out[i];
      int64_t best = E;
      for (int64_t j0 = lo; j0 < hi; j0 += 32 * U) {
        int64_t ev[U];
        T xv[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int64_t j = j0 + u * 32 + lane;
          ev[u] = j < hi ? g.source(j) : 0;
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int64_t j = j0 + u * 32 + lane;
          xv[u] = j < hi ? s[ev[u] * K] : T(0);
        }
        const int64_t n = min(int64_t{32 * U}, hi - j0);  // warp-uniform
#pragma unroll
        for (int u = 0; u < U; ++u) {
          for (int t = 0; t < 32; ++t) {
            if (u * 32 + t >= n) break;
            const T x = shfl(xv[u], t);
            if constexpr (kMinMax) {
              fold<T, R>(acc, best, x, shfl(ev[u], t));
            } else {
              fold<T, R>(acc, best, x, 0);
            }
          }
        }
      }
      if (lane == 0) finish<T, R>(acc, best, hi - lo, E, empty_rule, rounding, i, out, arg);
    }
  }
  if (ll.chunk_elems == nullptr) return;
  const int64_t tasks = min(static_cast<int64_t>(ll.counters[1]), ll.task_cap);
  const int64_t elems = min(static_cast<int64_t>(ll.counters[2]), ll.elem_cap);
  PCOPS_CUDA_GRID_STRIDE(t, tasks) {
    const int64_t w = ll.task_elem[t];
    if (w < 0 || w >= elems) continue;  // only for dropped reservations (bad offsets)
    ChunkedElem* ce = ll.chunk_elems + w;
    const int64_t i = ce->i, first = ce->first, stride = ce->stride;
    if (i < 0 || i >= total || first < 0 || stride <= 0 || t < first || (t - first) % stride != 0) continue;
    const int64_t c = (t - first) / stride;
    const int64_t k = i % K, r = i / K, m = r % M, o = r / M;
    int64_t lo, hi;
    g.bounds(o, m, k, lo, hi);
    const int64_t nc = common::scatter_chunks(hi - lo);
    // Bad offsets only (every task of the element skips alike: it is never joined).
    if (c >= nc || first + (nc - 1) * stride >= ll.task_cap) continue;
    const int64_t j1 = min(hi, lo + (c + 1) * kScatterChunk);
    const T* s = src + o * E * K + k;
    T acc;
    int64_t best = E;
    int64_t j = lo + c * kScatterChunk;
    if (c == 0) {
      acc = init ? identity<T, R>() : out[i];
    } else if constexpr (kMinMax) {
      acc = identity<T, R>();
    } else {
      acc = s[g.source(j) * K];
      ++j;
    }
    fold_range<T, R, ScatterPolicy::kChunkUnroll>(acc, best, s, K, g, j, j1);
    part[t] = acc;
    if constexpr (kMinMax) part_arg[t] = best;
    __threadfence();  // the partial is visible before the count says so
    if (atomicAdd(&ce->done, 1ull) + 1ull != static_cast<unsigned long long>(nc)) continue;
    __threadfence();  // every other task's partial is visible after the count
    acc = load_fresh(part + first);
    best = E;
    if constexpr (kMinMax) best = load_fresh(part_arg + first);
    for (int64_t cc = 1; cc < nc; ++cc) {
      const int64_t tc = first + cc * stride;
      const T x = load_fresh(part + tc);
      if constexpr (R == Reduce::Sum || R == Reduce::Mean) {
        acc = add(acc, x);
      } else if constexpr (R == Reduce::Mul) {
        acc = mul(acc, x);
      } else {
        const int64_t a = load_fresh(part_arg + tc);
        const bool take = a != E && ((R == Reduce::Max) ? (x > acc) : (x < acc));
        acc = take ? x : acc;
        best = take ? a : best;
      }
    }
    finish<T, R>(acc, best, hi - lo, E, empty_rule, rounding, i, out, arg);
  }
}

// Sorted index rows [rows, E]: ptr[o * (M + 1) + m] = first e of row o with index >= m. Block 0
// also sets zero[0, zero_words) to 0 (the reduction's counters: this kernel runs before it).
__global__ void __launch_bounds__(ScatterPolicy::kThreads)
    lower_bounds_kernel(const int64_t* index, int64_t rows, int64_t E, int64_t M, int64_t* ptr,
                        unsigned long long* zero, int zero_words) {
  if (blockIdx.x == 0 && static_cast<int>(threadIdx.x) < zero_words) zero[threadIdx.x] = 0;
  const int64_t total = rows * (M + 1);
  PCOPS_CUDA_GRID_STRIDE(i, total) {
    const int64_t o = i / (M + 1), m = i - o * (M + 1);
    const int64_t* row = index + o * E;
    int64_t lo = 0, hi = E;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (row[mid] < m) lo = mid + 1;
      else hi = mid;
    }
    ptr[i] = lo;
  }
}

// [rows, E, K] -> [rows, K, E]: each (row, k) becomes one contiguous segment of destinations.
__global__ void __launch_bounds__(ScatterPolicy::kThreads)
    transpose_kernel(const int64_t* index, int64_t rows, int64_t E, int64_t K, int64_t* out) {
  const int64_t total = rows * E * K;
  PCOPS_CUDA_GRID_STRIDE(i, total) {
    const int64_t e = i % E, r = i / E, k = r % K, o = r / K;
    out[i] = index[(o * E + e) * K + k];
  }
}

// out[o, e, k] = src[o, m, k] for e in segment m (the last m with indptr[m] <= e < indptr[m + 1]);
// rows in no segment are left as they are.
template <class T>
__global__ void __launch_bounds__(ScatterPolicy::kThreads)
    gather_csr_kernel(const T* src, const int64_t* indptr, bool shared, int64_t outer, int64_t M,
                      int64_t E, int64_t K, T* out) {
  const int64_t total = outer * E * K;
  PCOPS_CUDA_GRID_STRIDE(i, total) {
    const int64_t k = i % K, r = i / K, e = r % E, o = r / E;
    const int64_t* p = indptr + (shared ? 0 : o) * (M + 1);
    // upper bound: the first u in [0, M + 1) with p[u] > e
    int64_t lo = 0, hi = M + 1;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (p[mid] <= e) lo = mid + 1;
      else hi = mid;
    }
    const int64_t m = lo - 1;
    if (m >= 0 && lo <= M) out[i] = src[(o * M + m) * K + k];
  }
}

template <class T>
__global__ void __launch_bounds__(ScatterPolicy::kThreads)
    gather_coo_kernel(const T* src, const int64_t* index, bool shared, int64_t outer, int64_t M,
                      int64_t E, int64_t K, T* out) {
  const int64_t total = outer * E * K;
  PCOPS_CUDA_GRID_STRIDE(i, total) {
    const int64_t k = i % K, r = i / K, e = r % E, o = r / E;
    const int64_t m = index[(shared ? 0 : o) * E + e];
    if (m >= 0 && m < M) out[i] = src[(o * M + m) * K + k];
  }
}

// Value statistics of index / offset rows [rows, len] (primitives/index_stats.cuh), U loads in
// flight per thread. One block (gridDim.x == 1) writes them to stats (no zeroing needed); more
// blocks fold theirs into stats with atomicMax (zeroed before). Block 0 also sets
// zero[0, zero_words) to 0 (the reduction's counters: this kernel runs before it).
template <int Threads, int U>
__global__ void __launch_bounds__(Threads)
    index_stats_kernel(const int64_t* values, int64_t rows, int64_t len, unsigned long long* stats,
                       unsigned long long* zero, int zero_words) {
  if (blockIdx.x == 0 && static_cast<int>(threadIdx.x) < zero_words) zero[threadIdx.x] = 0;
  primitives::IndexStats acc;
  const int64_t n = rows * len, stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; first < n; first += U * stride) {
    int64_t v[U], prev[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t q = first + u * stride;
      v[u] = q < n ? values[q] : 0;
      prev[u] = q < n && q > 0 ? values[q - 1] : 0;  // used only inside a row
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t q = first + u * stride;
      if (q < n) acc.add(v[u], q % len, len, prev[u]);
    }
  }
  __shared__ unsigned long long block[primitives::kIndexStats];
  acc.block_fold(block);
  if (threadIdx.x < primitives::kIndexStats) {
    if (gridDim.x == 1) stats[threadIdx.x] = block[threadIdx.x];
    else if (block[threadIdx.x] != 0) atomicMax(stats + threadIdx.x, block[threadIdx.x]);
  }
}

struct StatsPolicy {
  // Up to this many values one block of kSmallThreads threads (kSmallUnroll loads in flight
  // each) does all: no memset of the statistics. Beyond, a memset and up to kBlocksPerSm blocks
  // per SM of kThreads threads.
  static constexpr int64_t kSmall = int64_t{1} << 14;
  static constexpr int kSmallThreads = 1024;
  static constexpr int kSmallUnroll = 8;
  static constexpr int kThreads = 256;
  static constexpr int kUnroll = 4;
  static constexpr int kBlocksPerSm = 4;
};

// Statistics of rows [rows, len] into stats (kIndexStats words) in stream order; zero[0,
// zero_words) is set to 0 on the way (before any later kernel).
void launch_index_stats(const CudaContext& ctx, const int64_t* values, int64_t rows, int64_t len,
                        unsigned long long* stats, unsigned long long* zero, int zero_words) {
  const cudaStream_t stream = detail::stream_of(ctx);
  const int64_t n = rows > 0 && len > 0 ? rows * len : 0;
  if (n == 0) {
    PCOPS_CUDA_CHECK(cudaMemsetAsync(stats, 0, primitives::kIndexStats * sizeof(unsigned long long), stream));
    if (zero_words > 0)
      PCOPS_CUDA_CHECK(cudaMemsetAsync(zero, 0, static_cast<size_t>(zero_words) * sizeof(unsigned long long), stream));
    return;
  }
  if (n <= StatsPolicy::kSmall) {
    detail::launch(ctx, index_stats_kernel<StatsPolicy::kSmallThreads, StatsPolicy::kSmallUnroll>, dim3(1),
                   dim3(StatsPolicy::kSmallThreads), 0, values, rows, len, stats, zero, zero_words);
    return;
  }
  PCOPS_CUDA_CHECK(cudaMemsetAsync(stats, 0, primitives::kIndexStats * sizeof(unsigned long long), stream));
  const int64_t sms = detail::device_properties().multiProcessorCount;
  // At least two blocks: a single block would write instead of fold.
  const int64_t blocks = std::clamp<int64_t>(
      detail::ceil_div(n, int64_t{StatsPolicy::kThreads} * StatsPolicy::kUnroll), 2, sms * StatsPolicy::kBlocksPerSm);
  detail::launch(ctx, index_stats_kernel<StatsPolicy::kThreads, StatsPolicy::kUnroll>,
                 dim3(static_cast<unsigned>(blocks)), dim3(StatsPolicy::kThreads), 0, values, rows, len, stats, zero,
                 zero_words);
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

// The work lists and chunk partials of a reduction (one workspace block), planned before the
// grouping so that the grouping's first kernel can zero the counters (no memset).
template <class T>
struct ReducePlan {
  LongLists ll;
  T* part = nullptr;
  int64_t* part_arg = nullptr;
  // The counters to zero before reduce_kernel (null when there are none), kCounters words.
  unsigned long long* counters() const { return ll.counters; }
  int counter_words() const { return ll.counters != nullptr ? kCounters : 0; }
};

template <class T>
ReducePlan<T> plan_reduce(detail::Workspace& ws, Reduce reduce, const ReduceShape& s) {
  ReducePlan<T> p;
  const int64_t total = s.outer * s.out_rows * s.inner;
  const int64_t E = s.src_rows;
  if (E <= ScatterPolicy::kLongList) return p;  // no list can be long
  // Bounds (valid lists of one (o, k) partition at most E sources): at most E / (kLongList + 1)
  // medium lists, E / (kScatterChunk + 1) chunked ones with fewer than 2 E / kScatterChunk + 1
  // chunks in all, per (o, k). Bad offsets can overlap lists: reservations past a cap are dropped.
  const int64_t lists = s.outer * s.inner;
  detail::WorkspaceLayout layout;
  const size_t at_counters = layout.reserve<unsigned long long>(kCounters);
  p.ll.medium_cap = std::min(total, lists * (E / (ScatterPolicy::kLongList + 1)));
  const size_t at_medium = layout.reserve<int64_t>(p.ll.medium_cap);
  size_t at_elems = 0, at_tasks = 0, at_part = 0, at_part_arg = 0;
  const bool chunks = E > kScatterChunk;
  const bool minmax = reduce == Reduce::Min || reduce == Reduce::Max;
  if (chunks) {
    p.ll.elem_cap = std::min(total, lists * (E / (kScatterChunk + 1)));
    p.ll.task_cap = lists * (2 * (E / kScatterChunk) + 1);
    at_elems = layout.reserve<ChunkedElem>(p.ll.elem_cap);
    at_tasks = layout.reserve<int64_t>(p.ll.task_cap);
    at_part = layout.reserve<T>(p.ll.task_cap);
    if (minmax) at_part_arg = layout.reserve<int64_t>(p.ll.task_cap);
  }
  layout.allocate(ws);
  p.ll.counters = layout.at<unsigned long long>(at_counters);
  p.ll.medium_ids = layout.at<int64_t>(at_medium);
  if (chunks) {
    p.ll.chunk_elems = layout.at<ChunkedElem>(at_elems);
    p.ll.task_elem = layout.at<int64_t>(at_tasks);
    p.part = layout.at<T>(at_part);
    if (minmax) p.part_arg = layout.at<int64_t>(at_part_arg);
  }
  return p;
}

// reduce_kernel, then (when lists can be long) long_lists_kernel. The plan's counters are zero in
// stream order already when counters_zeroed (set by the grouping's first kernel), else a memset
// zeroes them here.
template <class T>
void launch_reduce(const CudaContext& ctx, const ReducePlan<T>& plan, Reduce reduce, const T* src, const Groups& g,
                   const ReduceShape& s, bool init, bool empty_rule, IntegerMean rounding, T* out, int64_t* arg,
                   bool counters_zeroed) {
  const LongLists& ll = plan.ll;
  const int64_t total = s.outer * s.out_rows * s.inner;
  if (ll.counters != nullptr && !counters_zeroed)
    PCOPS_CUDA_CHECK(cudaMemsetAsync(ll.counters, 0, kCounters * sizeof(unsigned long long), detail::stream_of(ctx)));
  const int64_t sms = detail::device_properties().multiProcessorCount;
  dispatch_reduce(reduce, [&](auto red) {
    constexpr Reduce R = decltype(red)::value;
    detail::launch(ctx, reduce_kernel<T, R>, dim3(blocks_for(total)), dim3(ScatterPolicy::kThreads), 0, src, g,
                   s.outer, s.src_rows, s.out_rows, s.inner, init, empty_rule, rounding, out, arg, ll);
    if (ll.medium_ids == nullptr) return;
    // The counts stay on the device (no sync): a fixed grid walks the work lists, sized for the
    // medium lists' warps and the chunk tasks' threads.
    const int64_t warps_per_block = ScatterPolicy::kThreads / 32;
    int64_t blocks = std::clamp<int64_t>(detail::ceil_div(ll.medium_cap, warps_per_block), 1,
                                         sms * ScatterPolicy::kWarpBlocksPerSm);
    if (ll.chunk_elems != nullptr)
      blocks = std::max(blocks, std::clamp<int64_t>(detail::ceil_div(ll.task_cap, ScatterPolicy::kThreads), 1,
                                                    sms * ScatterPolicy::kChunkBlocksPerSm));
    detail::launch(ctx, long_lists_kernel<T, R>, dim3(static_cast<unsigned>(blocks)), dim3(ScatterPolicy::kThreads),
                   0, src, g, s.src_rows, s.out_rows, s.inner, init, empty_rule, rounding, total, ll, plan.part,
                   plan.part_arg, out, arg);
  });
}

void check_rows(int64_t rows, int64_t outer, const char* name) {
  PCOPS_CHECK(rows == 1 || rows == outer, Value, name, ": expected 1 or ", outer, " leading rows, got ", rows);
}

void use_positions(Groups& g, const primitives::InverseIndex& inv) {
  g.ptr = inv.offsets;
  g.perm32 = inv.positions32;
  g.perm64 = inv.positions64;
}

template <class T>
void scatter_impl(const CudaContext& ctx, const ScatterParams& params, const ReduceShape& s, const T* src,
                  const int64_t* index, int64_t index_outer, int64_t index_inner, T* out, int64_t* arg,
                  unsigned long long* stats) {
  core::validate_reduce_shape(s, "src");
  check_rows(index_outer, s.outer, "index");
  PCOPS_CHECK(index_inner == 1 || index_inner == s.inner, Value, "index: expected 1 or ", s.inner,
              " trailing elements, got ", index_inner);
  const int64_t n = core::checked_mul(core::checked_mul(index_outer, s.src_rows, "index"), index_inner, "index");
  PCOPS_CHECK(index != nullptr || n == 0, Value, "index: data is null for a non-empty view");
  const bool minmax = params.reduce == Reduce::Min || params.reduce == Reduce::Max;
  PCOPS_CHECK(!minmax || arg != nullptr || s.outer * s.out_rows * s.inner == 0, Value,
              "arg: an output buffer is required for min / max");
  const int64_t E = s.src_rows, M = s.out_rows, K = s.inner;
  if (s.outer == 0 || M == 0 || K == 0) {
    if (stats != nullptr) launch_index_stats(ctx, index, index_outer, E * index_inner, stats, nullptr, 0);
    return;
  }
  detail::Workspace ws(ctx);
  const ReducePlan<T> plan = plan_reduce<T>(ws, params.reduce, s);
  // The grouping's first kernel zeroes the plan's counters (and, when asked, computes the
  // statistics of the index on its own read of it).
  const primitives::InverseIndexExtras extras{stats, plan.counters(), plan.counter_words()};
  Groups g;
  g.shared = index_outer == 1;
  constexpr unsigned T_ = ScatterPolicy::kThreads;
  if (index_inner != 1) {  // a destination per (o, e, k): one segment per (index row, k)
    int64_t* t = ws.alloc<int64_t>(n);
    detail::launch(ctx, transpose_kernel, dim3(blocks_for(n)), dim3(T_), 0, index, index_outer, E, K, t);
    use_positions(g, primitives::inverse_index(ctx, ws, t, index_outer * K, E, M, extras));
    g.row_stride = K * M;
    g.k_stride = M;
    g.limit = n;
  } else if (params.sorted) {  // consecutive ranges: lower bounds, no sort
    if (stats != nullptr) launch_index_stats(ctx, index, index_outer, E, stats, nullptr, 0);
    int64_t* ptr = ws.alloc<int64_t>(index_outer * (M + 1));
    detail::launch(ctx, lower_bounds_kernel, dim3(blocks_for(index_outer * (M + 1))), dim3(T_), 0, index,
                   index_outer, E, M, ptr, plan.counters(), plan.counter_words());
    g.ptr = ptr;
    g.row_stride = M + 1;
    g.limit = E;
  } else {
    use_positions(g, primitives::inverse_index(ctx, ws, index, index_outer, E, M, extras));
    g.row_stride = M;
    g.limit = n;
  }
  const bool init = !params.accumulate;
  launch_reduce<T>(ctx, plan, params.reduce, src, g, s, init, init, params.integer_mean, out, arg, true);
}

template <class T>
void segment_csr_impl(const CudaContext& ctx, Reduce reduce, const ReduceShape& s, const T* src,
                      const int64_t* indptr, int64_t indptr_outer, T* out, int64_t* arg, unsigned long long* stats) {
  core::validate_reduce_shape(s, "src");
  check_rows(indptr_outer, s.outer, "indptr");
  PCOPS_CHECK(indptr != nullptr || indptr_outer == 0, Value, "indptr: data is null for a non-empty view");
  const bool minmax = reduce == Reduce::Min || reduce == Reduce::Max;
  PCOPS_CHECK(!minmax || arg != nullptr || s.outer * s.out_rows * s.inner == 0, Value,
              "arg: an output buffer is required for min / max");
  PCOPS_CHECK(reduce != Reduce::Mul, Value, "reduce: segment_csr supports sum, mean, min and max, got mul");
  if (s.outer == 0 || s.out_rows == 0 || s.inner == 0) {
    if (stats != nullptr) launch_index_stats(ctx, indptr, indptr_outer, s.out_rows + 1, stats, nullptr, 0);
    return;
  }
  Groups g;
  g.ptr = indptr;
  g.row_stride = s.out_rows + 1;
  g.limit = s.src_rows;
  g.shared = indptr_outer == 1;
  detail::Workspace ws(ctx);
  const ReducePlan<T> plan = plan_reduce<T>(ws, reduce, s);
  // The statistics kernel, when asked for, runs first and zeroes the counters.
  if (stats != nullptr)
    launch_index_stats(ctx, indptr, indptr_outer, s.out_rows + 1, stats, plan.counters(), plan.counter_words());
  launch_reduce<T>(ctx, plan, reduce, src, g, s, true, true, IntegerMean::Trunc, out, arg, stats != nullptr);
}

template <class T>
void gather_csr_impl(const CudaContext& ctx, const ReduceShape& s, const T* src, const int64_t* indptr,
                     int64_t indptr_outer, T* out) {
  core::validate_reduce_shape(s, "src");
  check_rows(indptr_outer, s.outer, "indptr");
  PCOPS_CHECK(indptr != nullptr || indptr_outer == 0, Value, "indptr: data is null for a non-empty view");
  const int64_t M = s.src_rows, E = s.out_rows, K = s.inner;
  if (s.outer == 0 || M == 0 || K == 0) return;
  const int64_t total = s.outer * E * K;
  detail::launch(ctx, gather_csr_kernel<T>, dim3(blocks_for(total)), dim3(ScatterPolicy::kThreads), 0, src,
                 indptr, indptr_outer == 1, s.outer, M, E, K, out);
}

template <class T>
void gather_coo_impl(const CudaContext& ctx, const ReduceShape& s, const T* src, const int64_t* index,
                     int64_t index_outer, T* out) {
  core::validate_reduce_shape(s, "src");
  check_rows(index_outer, s.outer, "index");
  const int64_t M = s.src_rows, E = s.out_rows, K = s.inner;
  const int64_t n = core::checked_mul(index_outer, E, "index");
  PCOPS_CHECK(index != nullptr || n == 0, Value, "index: data is null for a non-empty view");
  if (s.outer == 0 || E == 0 || K == 0) return;
  const int64_t total = s.outer * E * K;
  detail::launch(ctx, gather_coo_kernel<T>, dim3(blocks_for(total)), dim3(ScatterPolicy::kThreads), 0, src,
                 index, index_outer == 1, s.outer, M, E, K, out);
}

}  // namespace

void index_value_stats(const CudaContext& ctx, const int64_t* values, int64_t rows, int64_t len,
                       unsigned long long* stats) {
  launch_index_stats(ctx, values, rows, len, stats, nullptr, 0);
}

#define PCOPS_SCATTER_DEFINE_CUDA(T)                                                                  \
  void scatter(const CudaContext& ctx, const ScatterParams& params, const ReduceShape& shape,         \
               const T* src, const int64_t* index, int64_t index_outer, int64_t index_inner, T* out, \
               int64_t* arg, unsigned long long* index_stats) {                                       \
    scatter_impl<T>(ctx, params, shape, src, index, index_outer, index_inner, out, arg, index_stats); \
  }                                                                                                   \
  void segment_csr(const CudaContext& ctx, Reduce reduce, const ReduceShape& shape, const T* src,     \
                   const int64_t* indptr, int64_t indptr_outer, T* out, int64_t* arg,                 \
                   unsigned long long* indptr_stats) {                                                \
    segment_csr_impl<T>(ctx, reduce, shape, src, indptr, indptr_outer, out, arg, indptr_stats);      \
  }                                                                                                   \
  void gather_csr(const CudaContext& ctx, const ReduceShape& shape, const T* src,                    \
                  const int64_t* indptr, int64_t indptr_outer, T* out) {                              \
    gather_csr_impl<T>(ctx, shape, src, indptr, indptr_outer, out);                                 \
  }                                                                                                   \
  void gather_coo(const CudaContext& ctx, const ReduceShape& shape, const T* src,                    \
                  const int64_t* index, int64_t index_outer, T* out) {                                \
    gather_coo_impl<T>(ctx, shape, src, index, index_outer, out);                                    \
  }

PCOPS_SCATTER_DEFINE_CUDA(float)
PCOPS_SCATTER_DEFINE_CUDA(double)
PCOPS_SCATTER_DEFINE_CUDA(int64_t)
PCOPS_SCATTER_DEFINE_CUDA(int32_t)
PCOPS_SCATTER_DEFINE_CUDA(int16_t)
PCOPS_SCATTER_DEFINE_CUDA(int8_t)
PCOPS_SCATTER_DEFINE_CUDA(uint8_t)

#undef PCOPS_SCATTER_DEFINE_CUDA
#undef PCOPS_GRID_STRIDE

}  // namespace pcops::cuda
