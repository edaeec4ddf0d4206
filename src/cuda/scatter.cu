// CUDA scatter / segment reductions and gathers, bitwise equal to the CPU backend (contract:
// include/pcops/scatter.hpp): every output element folds its contributions in ascending source
// order from the start value (lists longer than kScatterChunk by the contract's chunk rule),
// without float atomics (run-to-run deterministic).
//
// - Grouping. Destinations per (o, e) (index_inner == 1): the inverse index
//   (primitives/inverse_index.cuh: a stable radix sort of (row, destination) keys) lists the
//   sources of every (index row, m) in ascending e. Destinations per (o, e, k): the index is first
//   transposed to [index_outer, inner, E] so that each (o, k) is one segment of the inverse index.
//   Sorted indices (segment_coo) need no sort: the offsets of row m are lower bounds of m in the
//   index row (one binary search per (row, m)). segment_csr reads its offsets directly.
// - Reduction. One thread per output element (o, m, k), k fastest, so neighbouring threads of a
//   row read neighbouring source columns; it folds its list in order with the CPU's arithmetic
//   (float/double add and multiply without contraction, two's-complement wrap for integers,
//   strict compares for max / min, mean = sum / count with the same integer rounding).
//   A list of kLongList + 1 .. kScatterChunk sources is appended to a work list (an integer
//   atomic counter: the order of the work list does not matter) and folded by a warp: the lanes
//   load the sources, coalesced and many in flight, and every lane folds them in ascending order
//   from shuffles, so the fold is the same sequence of operations.
//   A longer list (a concentrated destination) follows the chunk rule: the warp's long elements
//   reserve one task per (element, chunk) with one atomic per warp (tasks of neighbouring columns
//   side by side when their chunk counts agree); chunk_kernel folds each chunk serially (one
//   thread, sixteen loads in flight; lanes on neighbouring columns read the same source rows) into
//   a partial, and combine_kernel joins each element's partials in chunk order.
// - gather_csr: one thread per (o, e, k) finds e's segment by binary search in the offsets;
//   gather_coo: one thread per (o, e, k) copies its source.
// No atomic fast path: integer sums and NaN-free max / min could use atomics without changing the
// result, but the sorted fold is deterministic for every type and keeps one code path (the only
// atomics are the work-list counters).
// index / indptr values are device memory and are not checked here (the header): an index outside
// [0, M) is left out of every list and offsets are clamped to [0, rows].
#include "pcops/scatter.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "common/scatter_chunk.hpp"
#include "core/validate.hpp"
#include "cuda/common.cuh"
#include "cuda/primitives/inverse_index.cuh"
#include "pcops/error.hpp"

namespace pcops::cuda {
namespace {

using common::kScatterChunk;

struct ScatterPolicy {
  static constexpr int kThreads = 256;
  static constexpr int kUnroll = 8;  // source loads in flight per thread
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

// Where the sources of output element (o, m, k) are: list [ptr[b + m], ptr[b + m + 1]) with
// b = oi * row_stride + k * k_stride (oi = 0 when the lists are shared by every o); the source of
// list slot j is perm[j], or j itself when perm is null.
struct Groups {
  const int64_t* ptr = nullptr;
  const int64_t* perm = nullptr;
  int64_t row_stride = 0;
  int64_t k_stride = 0;
  int64_t limit = 0;  // list slots lie in [0, limit): offsets are clamped to it
  bool shared = false;
};

// Where the chunked elements and their chunk tasks are (device memory, filled by reduce_kernel).
struct ChunkedElem {
  int64_t i;       // the output element
  int64_t first;   // its chunk c is task first + c * stride
  int64_t stride;
};

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
__device__ __forceinline__ void fold_range(T& acc, int64_t& best, const T* s, int64_t K, const int64_t* perm,
                                           int64_t j, int64_t hi) {
  for (; j + U <= hi; j += U) {
    int64_t ev[U];
    T xv[U];
#pragma unroll
    for (int u = 0; u < U; ++u) ev[u] = perm ? perm[j + u] : j + u;
#pragma unroll
    for (int u = 0; u < U; ++u) xv[u] = s[ev[u] * K];
#pragma unroll
    for (int u = 0; u < U; ++u) fold<T, R>(acc, best, xv[u], ev[u]);
  }
  for (; j < hi; ++j) {
    const int64_t e = perm ? perm[j] : j;
    fold<T, R>(acc, best, s[e * K], e);
  }
}

// One thread per output element i = (o * M + m) * K + k, in warp-uniform passes (every lane of a
// warp takes part in each pass, so the warp-wide votes below are safe). A list of at most
// kLongList sources is folded here. A longer one is set aside: up to kScatterChunk sources to
// medium_ids (folded by medium_reduce_kernel: one warp per list), beyond that to the chunk path
// (the contract's chunk rule): the warp's long elements reserve their chunk tasks with one atomic
// per warp. When all of them have the same number of chunks (the lists of a row of neighbouring
// columns), the tasks of one chunk for neighbouring elements are neighbours, so chunk_kernel's
// lanes read neighbouring columns of the same source rows (coalesced).
template <class T, Reduce R>
__global__ void __launch_bounds__(ScatterPolicy::kThreads)
    reduce_kernel(const T* src, Groups g, int64_t outer, int64_t E, int64_t M, int64_t K, bool init,
                  bool empty_rule, IntegerMean rounding, T* out, int64_t* arg, LongLists ll) {
  const int64_t total = outer * M * K;
  const int lane = static_cast<int>(threadIdx.x & 31u);
  for (int64_t base = blockIdx.x * int64_t{blockDim.x}; base < total; base += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = base + threadIdx.x;
    const bool valid = i < total;
    int64_t lo = 0, hi = 0, k = 0, o = 0;
    if (valid) {
      k = i % K;
      const int64_t r = i / K, m = r % M;
      o = r / M;
      const int64_t b = (g.shared ? 0 : o) * g.row_stride + k * g.k_stride + m;
      lo = max(g.ptr[b], int64_t{0});
      hi = max(min(g.ptr[b + 1], g.limit), lo);
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
        ll.chunk_elems[w] = ChunkedElem{i, first, stride};
        for (int64_t c = 0; c < nc; ++c) ll.task_elem[first + c * stride] = w;
      }
    }
    if (!valid || medium || chunked) continue;
    const T* s = src + o * E * K + k;
    T acc = init ? identity<T, R>() : out[i];
    int64_t best = E;
    int64_t j = lo;
    fold_range<T, R, ScatterPolicy::kUnroll>(acc, best, s, K, g.perm, j, hi);
    finish<T, R>(acc, best, n, E, empty_rule, rounding, i, out, arg);
  }
}

// One thread per chunk task t (chunk c of chunked element w): the serial fold of list slots
// [lo + c * kScatterChunk, min(hi, lo + (c + 1) * kScatterChunk)): chunk 0 from the start value,
// a later sum / mean / mul chunk from its first source, a later max / min chunk from the identity
// with no arg (the strict-compare fold with smallest-index ties is associative). The partial goes
// to part[t] (its source index to part_arg[t] for max / min).
template <class T, Reduce R>
__global__ void __launch_bounds__(ScatterPolicy::kThreads)
    chunk_kernel(const T* src, Groups g, int64_t E, int64_t M, int64_t K, bool init, const T* out, LongLists ll,
                 T* part, int64_t* part_arg) {
  const int64_t tasks = min(static_cast<int64_t>(ll.counters[1]), ll.task_cap);
  const int64_t elems = min(static_cast<int64_t>(ll.counters[2]), ll.elem_cap);
  PCOPS_CUDA_GRID_STRIDE(t, tasks) {
    const int64_t w = ll.task_elem[t];
    if (w < 0 || w >= elems) continue;  // only for dropped reservations (bad offsets)
    const ChunkedElem ce = ll.chunk_elems[w];
    if (ce.stride <= 0 || t < ce.first || (t - ce.first) % ce.stride != 0) continue;
    const int64_t c = (t - ce.first) / ce.stride;
    const int64_t i = ce.i;
    const int64_t k = i % K, r = i / K, m = r % M, o = r / M;
    const int64_t b = (g.shared ? 0 : o) * g.row_stride + k * g.k_stride + m;
    const int64_t lo = max(g.ptr[b], int64_t{0}), hi = max(min(g.ptr[b + 1], g.limit), lo);
    const int64_t j0 = lo + c * kScatterChunk, j1 = min(hi, j0 + kScatterChunk);
    if (j0 >= j1) continue;
    const T* s = src + o * E * K + k;
    T acc;
    int64_t best = E;
    int64_t j = j0;
    if (c == 0) {
      acc = init ? identity<T, R>() : out[i];
    } else if constexpr (R == Reduce::Min || R == Reduce::Max) {
      acc = identity<T, R>();
    } else {
      acc = s[(g.perm ? g.perm[j] : j) * K];
      ++j;
    }
    fold_range<T, R, ScatterPolicy::kChunkUnroll>(acc, best, s, K, g.perm, j, j1);
    part[t] = acc;
    if constexpr (R == Reduce::Min || R == Reduce::Max) part_arg[t] = best;
  }
}

// One thread per chunked element: its chunk partials combined left to right (sum / mean: add;
// mul: multiply; max / min: a later partial replaces on a strict compare, so ties keep the left),
// then the element's final value (mean division, empty-slot rule).
template <class T, Reduce R>
__global__ void __launch_bounds__(ScatterPolicy::kThreads)
    combine_kernel(Groups g, int64_t E, int64_t M, int64_t K, bool empty_rule, IntegerMean rounding,
                   int64_t total, LongLists ll, const T* part, const int64_t* part_arg, T* out, int64_t* arg) {
  const int64_t elems = min(static_cast<int64_t>(ll.counters[2]), ll.elem_cap);
  PCOPS_CUDA_GRID_STRIDE(w, elems) {
    const ChunkedElem ce = ll.chunk_elems[w];
    const int64_t i = ce.i;
    if (i < 0 || i >= total || ce.stride <= 0 || ce.first < 0) continue;  // dropped reservations only
    const int64_t k = i % K, r = i / K, m = r % M, o = r / M;
    const int64_t b = (g.shared ? 0 : o) * g.row_stride + k * g.k_stride + m;
    const int64_t lo = max(g.ptr[b], int64_t{0}), hi = max(min(g.ptr[b + 1], g.limit), lo);
    const int64_t nc = common::scatter_chunks(hi - lo);
    if (ce.first + (nc - 1) * ce.stride >= ll.task_cap) continue;
    T acc = part[ce.first];
    int64_t best = E;
    if constexpr (R == Reduce::Min || R == Reduce::Max) best = part_arg[ce.first];
    for (int64_t c = 1; c < nc; ++c) {
      const int64_t t = ce.first + c * ce.stride;
      const T x = part[t];
      if constexpr (R == Reduce::Sum || R == Reduce::Mean) {
        acc = add(acc, x);
      } else if constexpr (R == Reduce::Mul) {
        acc = mul(acc, x);
      } else {
        const int64_t a = part_arg[t];
        const bool take = a != E && ((R == Reduce::Max) ? (x > acc) : (x < acc));
        acc = take ? x : acc;
        best = take ? a : best;
      }
    }
    finish<T, R>(acc, best, hi - lo, E, empty_rule, rounding, i, out, arg);
  }
}

// One warp per medium list (kLongList < n <= kScatterChunk: a single chunk; the elements
// reduce_kernel set aside in medium_ids): lane l loads sources
// j0 + u * 32 + l (coalesced list reads, kWarpUnroll loads in flight), then every lane folds the
// 32 x kWarpUnroll values in ascending j from shuffles, so the result is the sequential fold's.
template <class T, Reduce R>
__global__ void __launch_bounds__(ScatterPolicy::kThreads)
    medium_reduce_kernel(const T* src, Groups g, int64_t E, int64_t M, int64_t K, bool init, bool empty_rule,
                         IntegerMean rounding, LongLists ll, T* out, int64_t* arg) {
  constexpr int U = ScatterPolicy::kWarpUnroll;
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const int64_t warps = (int64_t{gridDim.x} * blockDim.x) >> 5;
  const int64_t count = min(static_cast<int64_t>(ll.counters[0]), ll.medium_cap);
  for (int64_t w = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) >> 5; w < count; w += warps) {
    const int64_t i = ll.medium_ids[w];
    const int64_t k = i % K, r = i / K, m = r % M, o = r / M;
    const int64_t b = (g.shared ? 0 : o) * g.row_stride + k * g.k_stride + m;
    const int64_t lo = max(g.ptr[b], int64_t{0}), hi = min(g.ptr[b + 1], g.limit);
    const T* s = src + o * E * K + k;
    T acc = init ? identity<T, R>() : out[i];
    int64_t best = E;
    for (int64_t j0 = lo; j0 < hi; j0 += 32 * U) {
      int64_t ev[U];
      T xv[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t j = j0 + u * 32 + lane;
        ev[u] = j < hi ? (g.perm ? g.perm[j] : j) : 0;
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
          if constexpr (R == Reduce::Min || R == Reduce::Max) {
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

// Sorted index rows [rows, E]: ptr[o * (M + 1) + m] = first e of row o with index >= m.
__global__ void __launch_bounds__(ScatterPolicy::kThreads)
    lower_bounds_kernel(const int64_t* index, int64_t rows, int64_t E, int64_t M, int64_t* ptr) {
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

// Statistics of index / offset rows [rows, len] for the torch binding's value checks, each
// reduced with unsigned max (zero is the identity): [0] ~biased(min), [1] biased(max),
// [2] ~biased(min of column 0), [3] biased(max of column len - 1), [4] 1 where some row
// decreases. biased(v) = v with its sign bit flipped (signed order as unsigned order).
constexpr int kIndexStats = 5;

__device__ __forceinline__ unsigned long long biased(int64_t v) {
  return static_cast<unsigned long long>(v) ^ (1ull << 63);
}

__global__ void __launch_bounds__(ScatterPolicy::kThreads)
    index_stats_kernel(const int64_t* values, int64_t rows, int64_t len, unsigned long long* stats) {
  __shared__ unsigned long long block_stats[kIndexStats];
  if (threadIdx.x < kIndexStats) block_stats[threadIdx.x] = 0;
  __syncthreads();
  unsigned long long acc[kIndexStats] = {0, 0, 0, 0, 0};
  PCOPS_CUDA_GRID_STRIDE(q, rows * len) {
    const int64_t j = q % len, v = values[q];
    acc[0] = max(acc[0], ~biased(v));
    acc[1] = max(acc[1], biased(v));
    if (j == 0) acc[2] = max(acc[2], ~biased(v));
    if (j == len - 1) acc[3] = max(acc[3], biased(v));
    if (j > 0 && v < values[q - 1]) acc[4] = 1;
  }
#pragma unroll
  for (int s = 0; s < kIndexStats; ++s) {
    unsigned long long v = acc[s];
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, d));
    if ((threadIdx.x & 31u) == 0 && v != 0) atomicMax(block_stats + s, v);
  }
  __syncthreads();
  if (threadIdx.x < kIndexStats && block_stats[threadIdx.x] != 0)
    atomicMax(stats + threadIdx.x, block_stats[threadIdx.x]);
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

template <class T>
void launch_reduce(const CudaContext& ctx, detail::Workspace& ws, Reduce reduce, const T* src, const Groups& g,
                   const ReduceShape& s, bool init, bool empty_rule, IntegerMean rounding, T* out,
                   int64_t* arg) {
  const int64_t total = s.outer * s.out_rows * s.inner;
  const int64_t E = s.src_rows;
  // Bounds (valid lists of one (o, k) partition at most E sources): at most E / (kLongList + 1)
  // medium lists, E / (kScatterChunk + 1) chunked ones with fewer than 2 E / kScatterChunk + 1
  // chunks in all, per (o, k). Bad offsets can overlap lists: reservations past a cap are dropped.
  LongLists ll;
  T* part = nullptr;
  int64_t* part_arg = nullptr;
  const bool minmax = reduce == Reduce::Min || reduce == Reduce::Max;
  if (E > ScatterPolicy::kLongList) {
    const int64_t lists = s.outer * s.inner;
    ll.counters = ws.alloc<unsigned long long>(3);
    ll.medium_cap = std::min(total, lists * (E / (ScatterPolicy::kLongList + 1)));
    ll.medium_ids = ws.alloc<int64_t>(ll.medium_cap);
    if (E > kScatterChunk) {
      ll.elem_cap = std::min(total, lists * (E / (kScatterChunk + 1)));
      ll.task_cap = lists * (2 * (E / kScatterChunk) + 1);
      ll.chunk_elems = ws.alloc<ChunkedElem>(ll.elem_cap);
      ll.task_elem = ws.alloc<int64_t>(ll.task_cap);
      part = ws.alloc<T>(ll.task_cap);
      if (minmax) part_arg = ws.alloc<int64_t>(ll.task_cap);
    }
    PCOPS_CUDA_CHECK(cudaMemsetAsync(ll.counters, 0, 3 * sizeof(unsigned long long), detail::stream_of(ctx)));
  }
  const int64_t sms = detail::device_properties().multiProcessorCount;
  dispatch_reduce(reduce, [&](auto red) {
    constexpr Reduce R = decltype(red)::value;
    detail::launch(ctx, reduce_kernel<T, R>, dim3(blocks_for(total)), dim3(ScatterPolicy::kThreads), 0, src, g,
                   s.outer, s.src_rows, s.out_rows, s.inner, init, empty_rule, rounding, out, arg, ll);
    if (ll.medium_ids == nullptr) return;
    // The counts stay on the device (no sync): fixed grids walk the work lists.
    const int64_t warps_per_block = ScatterPolicy::kThreads / 32;
    const int64_t medium_blocks =
        std::clamp<int64_t>(detail::ceil_div(ll.medium_cap, warps_per_block), 1, sms * ScatterPolicy::kWarpBlocksPerSm);
    detail::launch(ctx, medium_reduce_kernel<T, R>, dim3(static_cast<unsigned>(medium_blocks)),
                   dim3(ScatterPolicy::kThreads), 0, src, g, s.src_rows, s.out_rows, s.inner, init, empty_rule,
                   rounding, ll, out, arg);
    if (ll.chunk_elems == nullptr) return;
    const int64_t task_blocks = std::clamp<int64_t>(detail::ceil_div(ll.task_cap, ScatterPolicy::kThreads), 1,
                                                    sms * ScatterPolicy::kChunkBlocksPerSm);
    detail::launch(ctx, chunk_kernel<T, R>, dim3(static_cast<unsigned>(task_blocks)), dim3(ScatterPolicy::kThreads),
                   0, src, g, s.src_rows, s.out_rows, s.inner, init, static_cast<const T*>(out), ll, part, part_arg);
    const int64_t elem_blocks = std::clamp<int64_t>(detail::ceil_div(ll.elem_cap, ScatterPolicy::kThreads), 1,
                                                    sms * ScatterPolicy::kChunkBlocksPerSm);
    detail::launch(ctx, combine_kernel<T, R>, dim3(static_cast<unsigned>(elem_blocks)), dim3(ScatterPolicy::kThreads),
                   0, g, s.src_rows, s.out_rows, s.inner, empty_rule, rounding, total, ll,
                   static_cast<const T*>(part), static_cast<const int64_t*>(part_arg), out, arg);
  });
}

void check_rows(int64_t rows, int64_t outer, const char* name) {
  PCOPS_CHECK(rows == 1 || rows == outer, Value, name, ": expected 1 or ", outer, " leading rows, got ", rows);
}

template <class T>
void scatter_impl(const CudaContext& ctx, const ScatterParams& params, const ReduceShape& s, const T* src,
                  const int64_t* index, int64_t index_outer, int64_t index_inner, T* out, int64_t* arg) {
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
  if (s.outer == 0 || M == 0 || K == 0) return;
  detail::Workspace ws(ctx);
  Groups g;
  g.shared = index_outer == 1;
  constexpr unsigned T_ = ScatterPolicy::kThreads;
  if (index_inner != 1) {  // a destination per (o, e, k): one segment per (index row, k)
    int64_t* t = ws.alloc<int64_t>(n);
    detail::launch(ctx, transpose_kernel, dim3(blocks_for(n)), dim3(T_), 0, index, index_outer, E, K, t);
    const primitives::InverseIndex inv = primitives::inverse_index(ctx, ws, t, index_outer * K, E, M);
    g.ptr = inv.offsets;
    g.perm = inv.positions;
    g.row_stride = K * M;
    g.k_stride = M;
    g.limit = n;
  } else if (params.sorted) {  // consecutive ranges: lower bounds, no sort
    int64_t* ptr = ws.alloc<int64_t>(index_outer * (M + 1));
    detail::launch(ctx, lower_bounds_kernel, dim3(blocks_for(index_outer * (M + 1))), dim3(T_), 0, index,
                   index_outer, E, M, ptr);
    g.ptr = ptr;
    g.row_stride = M + 1;
    g.limit = E;
  } else {
    const primitives::InverseIndex inv = primitives::inverse_index(ctx, ws, index, index_outer, E, M);
    g.ptr = inv.offsets;
    g.perm = inv.positions;
    g.row_stride = M;
    g.limit = n;
  }
  const bool init = !params.accumulate;
  launch_reduce<T>(ctx, ws, params.reduce, src, g, s, init, init, params.integer_mean, out, arg);
}

template <class T>
void segment_csr_impl(const CudaContext& ctx, Reduce reduce, const ReduceShape& s, const T* src,
                      const int64_t* indptr, int64_t indptr_outer, T* out, int64_t* arg) {
  core::validate_reduce_shape(s, "src");
  check_rows(indptr_outer, s.outer, "indptr");
  PCOPS_CHECK(indptr != nullptr || indptr_outer == 0, Value, "indptr: data is null for a non-empty view");
  const bool minmax = reduce == Reduce::Min || reduce == Reduce::Max;
  PCOPS_CHECK(!minmax || arg != nullptr || s.outer * s.out_rows * s.inner == 0, Value,
              "arg: an output buffer is required for min / max");
  PCOPS_CHECK(reduce != Reduce::Mul, Value, "reduce: segment_csr supports sum, mean, min and max, got mul");
  if (s.outer == 0 || s.out_rows == 0 || s.inner == 0) return;
  Groups g;
  g.ptr = indptr;
  g.row_stride = s.out_rows + 1;
  g.limit = s.src_rows;
  g.shared = indptr_outer == 1;
  detail::Workspace ws(ctx);
  launch_reduce<T>(ctx, ws, reduce, src, g, s, true, true, IntegerMean::Trunc, out, arg);
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

// Declared by the torch binding (bindings/torch/scatter.cpp), which reads the statistics after
// the reduction's kernels: stats[5] device memory, zeroed here; stream order, no wait.
void index_value_stats(const CudaContext& ctx, const int64_t* values, int64_t rows, int64_t len,
                       unsigned long long* stats) {
  PCOPS_CUDA_CHECK(cudaMemsetAsync(stats, 0, kIndexStats * sizeof(unsigned long long), detail::stream_of(ctx)));
  if (rows <= 0 || len <= 0) return;
  const int64_t sms = detail::device_properties().multiProcessorCount;
  const int64_t blocks = std::clamp<int64_t>(detail::ceil_div(rows * len, int64_t{ScatterPolicy::kThreads}), 1, sms * 4);
  detail::launch(ctx, index_stats_kernel, dim3(static_cast<unsigned>(blocks)), dim3(ScatterPolicy::kThreads), 0,
                 values, rows, len, stats);
}

#define PCOPS_SCATTER_DEFINE_CUDA(T)                                                                  \
  void scatter(const CudaContext& ctx, const ScatterParams& params, const ReduceShape& shape,         \
               const T* src, const int64_t* index, int64_t index_outer, int64_t index_inner, T* out, \
               int64_t* arg) {                                                                        \
    scatter_impl<T>(ctx, params, shape, src, index, index_outer, index_inner, out, arg);             \
  }                                                                                                   \
  void segment_csr(const CudaContext& ctx, Reduce reduce, const ReduceShape& shape, const T* src,     \
                   const int64_t* indptr, int64_t indptr_outer, T* out, int64_t* arg) {               \
    segment_csr_impl<T>(ctx, reduce, shape, src, indptr, indptr_outer, out, arg);                    \
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
