// CUDA scatter / segment reductions and gathers, bitwise equal to the CPU backend (contract:
// include/pcops/scatter.hpp): every output element folds its contributions in ascending source
// order from the start value, by one thread (a warp for long lists), without float atomics
// (run-to-run deterministic).
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
//   A list longer than kLongList (a concentrated destination) is appended to a work list (an
//   integer atomic counter: the order of the work list does not matter) and folded by a warp:
//   the lanes load the sources, coalesced and many in flight, and every lane folds them in
//   ascending order from shuffles, so the fold is the same sequence of operations.
// - gather_csr: one thread per (o, e, k) finds e's segment by binary search in the offsets;
//   gather_coo: one thread per (o, e, k) copies its source.
// No atomic fast path: integer sums and NaN-free max / min could use atomics without changing the
// result, but the sorted fold is deterministic for every type and keeps one code path (the only
// atomic is the work-list counter of long lists).
// index / indptr values are device memory and are not checked here (the header): an index outside
// [0, M) is left out of every list and offsets are clamped to [0, rows].
#include "pcops/scatter.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/validate.hpp"
#include "cuda/common.cuh"
#include "cuda/primitives/inverse_index.cuh"
#include "pcops/error.hpp"

namespace pcops::cuda {
namespace {

struct ScatterPolicy {
  static constexpr int kThreads = 256;
  static constexpr int kUnroll = 8;  // source loads in flight per thread
  static constexpr int64_t kMaxBlocks = int64_t{1} << 20;  // grid-stride beyond
  // Lists longer than this (concentrated destinations) are folded by a warp: its lanes load 32 x
  // kWarpUnroll sources at a time and every lane folds them in order from register shuffles.
  static constexpr int64_t kLongList = 256;
  static constexpr int kWarpUnroll = 4;
  static constexpr int kWarpBlocksPerSm = 8;
};

unsigned blocks_for(int64_t items) {
  return static_cast<unsigned>(
      std::clamp<int64_t>(detail::ceil_div(items, ScatterPolicy::kThreads), 1, ScatterPolicy::kMaxBlocks));
}

#define PCOPS_GRID_STRIDE(i, total)                                                      \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (total);         \
       i += int64_t{gridDim.x} * blockDim.x)

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
  bool shared = false;
};

// One thread per output element i = (o * M + m) * K + k. A list longer than kLongList is not
// folded here: i is appended to long_ids (when given; capacity long_cap) for long_reduce_kernel.
template <class T, Reduce R>
__global__ void __launch_bounds__(ScatterPolicy::kThreads)
    reduce_kernel(const T* src, Groups g, int64_t outer, int64_t E, int64_t M, int64_t K, bool init,
                  bool empty_rule, IntegerMean rounding, T* out, int64_t* arg, int64_t* long_ids,
                  int64_t long_cap, unsigned long long* long_count) {
  const int64_t total = outer * M * K;
  PCOPS_GRID_STRIDE(i, total) {
    const int64_t k = i % K, r = i / K, m = r % M, o = r / M;
    const int64_t b = (g.shared ? 0 : o) * g.row_stride + k * g.k_stride + m;
    const int64_t lo = max(g.ptr[b], int64_t{0}), hi = min(g.ptr[b + 1], E);
    if (long_ids != nullptr && hi - lo > ScatterPolicy::kLongList) {
      const unsigned long long slot = atomicAdd(long_count, 1ull);  // order-free: a work list
      if (slot < static_cast<unsigned long long>(long_cap)) long_ids[slot] = i;
      continue;
    }
    const T* s = src + o * E * K + k;
    T acc = init ? identity<T, R>() : out[i];
    int64_t best = E;
    // kUnroll loads in flight before their folds.
    constexpr int U = ScatterPolicy::kUnroll;
    int64_t j = lo;
    for (; j + U <= hi; j += U) {
      int64_t ev[U];
      T xv[U];
#pragma unroll
      for (int u = 0; u < U; ++u) ev[u] = g.perm ? g.perm[j + u] : j + u;
#pragma unroll
      for (int u = 0; u < U; ++u) xv[u] = s[ev[u] * K];
#pragma unroll
      for (int u = 0; u < U; ++u) fold<T, R>(acc, best, xv[u], ev[u]);
    }
    for (; j < hi; ++j) {
      const int64_t e = g.perm ? g.perm[j] : j;
      fold<T, R>(acc, best, s[e * K], e);
    }
    finish<T, R>(acc, best, hi > lo ? hi - lo : 0, E, empty_rule, rounding, i, out, arg);
  }
}

// One warp per long list (the elements reduce_kernel set aside): lane l loads sources
// j0 + u * 32 + l (coalesced list reads, kWarpUnroll loads in flight), then every lane folds the
// 32 x kWarpUnroll values in ascending j from shuffles, so the result is the sequential fold's.
template <class T, Reduce R>
__global__ void __launch_bounds__(ScatterPolicy::kThreads)
    long_reduce_kernel(const T* src, Groups g, int64_t E, int64_t M, int64_t K, bool init, bool empty_rule,
                       IntegerMean rounding, const int64_t* long_ids, int64_t long_cap,
                       const unsigned long long* long_count, T* out, int64_t* arg) {
  constexpr int U = ScatterPolicy::kWarpUnroll;
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const int64_t warps = (int64_t{gridDim.x} * blockDim.x) >> 5;
  const int64_t count = min(static_cast<int64_t>(*long_count), long_cap);
  for (int64_t w = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) >> 5; w < count; w += warps) {
    const int64_t i = long_ids[w];
    const int64_t k = i % K, r = i / K, m = r % M, o = r / M;
    const int64_t b = (g.shared ? 0 : o) * g.row_stride + k * g.k_stride + m;
    const int64_t lo = max(g.ptr[b], int64_t{0}), hi = min(g.ptr[b + 1], E);
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
  PCOPS_GRID_STRIDE(i, total) {
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
  PCOPS_GRID_STRIDE(i, total) {
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
  PCOPS_GRID_STRIDE(i, total) {
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
  PCOPS_GRID_STRIDE(i, total) {
    const int64_t k = i % K, r = i / K, e = r % E, o = r / E;
    const int64_t m = index[(shared ? 0 : o) * E + e];
    if (m >= 0 && m < M) out[i] = src[(o * M + m) * K + k];
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

template <class T>
void launch_reduce(const CudaContext& ctx, detail::Workspace& ws, Reduce reduce, const T* src, const Groups& g,
                   const ReduceShape& s, bool init, bool empty_rule, IntegerMean rounding, T* out,
                   int64_t* arg) {
  const int64_t total = s.outer * s.out_rows * s.inner;
  // Long lists exist only when E > kLongList; the lists of one (o, k) partition at most E
  // sources, so at most outer * K * (E / (kLongList + 1)) of them (a bound, also for bad offsets:
  // the work list never overflows, extra entries are dropped).
  int64_t* long_ids = nullptr;
  unsigned long long* long_count = nullptr;
  int64_t long_cap = 0;
  if (s.src_rows > ScatterPolicy::kLongList) {
    long_cap = std::min(total, s.outer * s.inner * (s.src_rows / (ScatterPolicy::kLongList + 1)));
    long_ids = ws.alloc<int64_t>(long_cap);
    long_count = ws.alloc<unsigned long long>(1);
    PCOPS_CUDA_CHECK(cudaMemsetAsync(long_count, 0, sizeof(unsigned long long), detail::stream_of(ctx)));
  }
  dispatch_reduce(reduce, [&](auto red) {
    constexpr Reduce R = decltype(red)::value;
    detail::launch(ctx, reduce_kernel<T, R>, dim3(blocks_for(total)), dim3(ScatterPolicy::kThreads), 0, src, g,
                   s.outer, s.src_rows, s.out_rows, s.inner, init, empty_rule, rounding, out, arg, long_ids,
                   long_cap, long_count);
    if (long_ids != nullptr) {
      // The count stays on the device (no sync): a fixed grid of warps walks the work list.
      const int64_t warps_per_block = ScatterPolicy::kThreads / 32;
      const int64_t blocks = std::clamp<int64_t>(
          detail::ceil_div(long_cap, warps_per_block), 1,
          int64_t{detail::device_properties().multiProcessorCount} * ScatterPolicy::kWarpBlocksPerSm);
      detail::launch(ctx, long_reduce_kernel<T, R>, dim3(static_cast<unsigned>(blocks)),
                     dim3(ScatterPolicy::kThreads), 0, src, g, s.src_rows, s.out_rows, s.inner, init, empty_rule,
                     rounding, static_cast<const int64_t*>(long_ids), long_cap,
                     static_cast<const unsigned long long*>(long_count), out, arg);
    }
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
  } else if (params.sorted) {  // consecutive ranges: lower bounds, no sort
    int64_t* ptr = ws.alloc<int64_t>(index_outer * (M + 1));
    detail::launch(ctx, lower_bounds_kernel, dim3(blocks_for(index_outer * (M + 1))), dim3(T_), 0, index,
                   index_outer, E, M, ptr);
    g.ptr = ptr;
    g.row_stride = M + 1;
  } else {
    const primitives::InverseIndex inv = primitives::inverse_index(ctx, ws, index, index_outer, E, M);
    g.ptr = inv.offsets;
    g.perm = inv.positions;
    g.row_stride = M;
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
