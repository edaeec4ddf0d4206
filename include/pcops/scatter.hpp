#pragma once
// Scatter and segment reductions with torch_scatter 2.1.2 semantics (docs/ops/scatter.md,
// PEERS.md 6), deterministic.
//
// Layout: a reduction runs along one dimension of a tensor viewed as [outer, rows, inner]
// (outer = product of the sizes before the reduced dimension, inner = product after it), all
// contiguous. src is [outer, E, inner], out is [outer, M, inner].
//
// Contract, for every output element out[o, m, k]:
// - Its contributions are the src elements src[o, e, k] whose destination is m, taken in
//   ascending e; the reduction's start value is the identity (sum/mean 0, mul 1, max lowest(),
//   min max() of the type) or, with `accumulate`, the value out holds on entry (torch_scatter's
//   `out=`). Arithmetic is the type's own: float/double without contraction (IEEE, run to run and
//   thread count independent, bitwise), integers wrap (two's complement) as torch's do.
// - Chunk rule (sum, mean, mul). A list of n <= C contributions (C = 2048,
//   common::kScatterChunk, the same for both backends) is folded serially from the start value.
//   A longer list is split into consecutive chunks of C contributions in ascending e (the last
//   one shorter): chunk 0 is folded from the start value, every later chunk from its own first
//   contribution; the chunk partials p_0, p_1, ... are then combined left to right
//   (((p_0 + p_1) + p_2) + ...; mul: products). mean = that sum / n. The chunks of one element
//   can thus run in parallel with fixed bits. Integer sums / products wrap, so their bits are
//   those of any order.
// - mean = sum / count (count = number of contributions, 1 when there are none); integer means
//   round by `integer_mean` (scatter: floor, as torch_scatter's scatter_mean; segment: toward
//   zero, as its segment kernels).
// - max / min replace the running value only when a contribution compares strictly greater /
//   smaller, so ties keep the smallest e and NaN never wins (torch_scatter's CPU rule); this fold
//   is associative (a later chunk folded from the identity, combined with the same strict compare,
//   gives the same value and arg), so long lists run in chunks without any change. arg holds
//   that e, or the sentinel E when no contribution replaced the start value; without
//   `accumulate` such an element's value is 0 (an empty slot, or one whose contributions are all
//   NaN / -inf / lowest(): torch_scatter's `out == init -> 0` rule).
// - No float atomics and no dependence on the thread count: the work is split over output rows
//   (and column blocks of heavy rows, and the chunks of long lists), each element's result is one
//   fixed sequence of operations.
// Destinations: scatter takes an index per (o, e) broadcast over k (index_inner == 1; an index
// with index_outer == 1 is shared by every o), or one per (o, e, k) (index_inner == inner).
// Every index must lie in [0, M) (Index error otherwise, checked before any output is written);
// `sorted` additionally requires non-decreasing indices along e (segment_coo; Value error).
// segment_csr takes CSR offsets indptr [indptr_outer, M + 1] with
// 0 <= indptr[m] <= indptr[m + 1] <= E; out row m reduces src rows [indptr[m], indptr[m + 1]).
// gather_csr / gather_coo are the inverse broadcasts (out row e = src row of e's segment).
// Types: float, double, int64, int32, int16, int8, uint8. Thread-safe; no allocation beyond
// O(outer * (E + M)) scratch for the grouping and O(outer * inner * E / C) chunk partials.
#include <cstdint>

#include "pcops/context.hpp"

namespace pcops {

enum class Reduce : int { Sum = 0, Mean = 1, Mul = 2, Min = 3, Max = 4 };
enum class IntegerMean : int { Floor = 0, Trunc = 1 };

struct ReduceShape {
  int64_t outer = 1;     // product of the sizes before the reduced dimension
  int64_t src_rows = 0;  // E: src.size(dim)
  int64_t out_rows = 0;  // M: out.size(dim)
  int64_t inner = 1;     // product of the sizes after the reduced dimension
};

struct ScatterParams {
  Reduce reduce = Reduce::Sum;
  bool accumulate = false;  // out holds start values (torch_scatter's out=); no empty-slot rule
  IntegerMean integer_mean = IntegerMean::Floor;
  bool sorted = false;  // indices must be non-decreasing along e (segment_coo)
};

namespace core {
// Shape checks shared by the backends (Value errors); returns the number of output elements.
int64_t validate_reduce_shape(const ReduceShape& shape, const char* what);
// index [index_outer, E, index_inner] values in [0, M) (and sorted along E when asked); host memory.
void validate_scatter_index(const ReduceShape& shape, const int64_t* index, int64_t index_outer,
                            int64_t index_inner, bool sorted, const char* name);
// indptr [indptr_outer, segments + 1]: 0 <= indptr[m] <= indptr[m + 1] <= rows.
void validate_indptr(const int64_t* indptr, int64_t indptr_outer, int64_t segments, int64_t rows,
                     const char* name);
}  // namespace core

#define PCOPS_SCATTER_DECLARE(T)                                                                  \
  void scatter(const CpuContext& ctx, const ScatterParams& params, const ReduceShape& shape,      \
               const T* src, const int64_t* index, int64_t index_outer, int64_t index_inner,     \
               T* out, int64_t* arg);                                                             \
  void segment_csr(const CpuContext& ctx, Reduce reduce, const ReduceShape& shape, const T* src,  \
                   const int64_t* indptr, int64_t indptr_outer, T* out, int64_t* arg);           \
  void gather_csr(const CpuContext& ctx, const ReduceShape& shape, const T* src,                 \
                  const int64_t* indptr, int64_t indptr_outer, T* out);                          \
  void gather_coo(const CpuContext& ctx, const ReduceShape& shape, const T* src,                 \
                  const int64_t* index, int64_t index_outer, T* out);

namespace cpu {
// scatter: out [outer, M, inner] (start values on entry when params.accumulate); arg
// [outer, M, inner] for Min / Max (else may be nullptr). index: [index_outer, E, index_inner].
// segment_csr: out and arg as scatter (out's entry values are ignored: torch_scatter's
// segment_csr overwrites); mean rounds integers toward zero; empty segment: 0 / arg E.
// gather_csr: shape.src_rows = segments M, shape.out_rows = E; out row e = src row m for e in
// [indptr[m], indptr[m + 1]); rows of out covered by no segment keep their entry values.
// gather_coo: shape.src_rows = M, shape.out_rows = E; out row e = src row index[o, e]
// (index [index_outer, E], values in [0, M)).
PCOPS_SCATTER_DECLARE(float)
PCOPS_SCATTER_DECLARE(double)
PCOPS_SCATTER_DECLARE(int64_t)
PCOPS_SCATTER_DECLARE(int32_t)
PCOPS_SCATTER_DECLARE(int16_t)
PCOPS_SCATTER_DECLARE(int8_t)
PCOPS_SCATTER_DECLARE(uint8_t)
}  // namespace cpu

#define PCOPS_SCATTER_DECLARE_CUDA(T)                                                             \
  void scatter(const CudaContext& ctx, const ScatterParams& params, const ReduceShape& shape,     \
               const T* src, const int64_t* index, int64_t index_outer, int64_t index_inner,     \
               T* out, int64_t* arg, unsigned long long* index_stats = nullptr);                  \
  void segment_csr(const CudaContext& ctx, Reduce reduce, const ReduceShape& shape, const T* src, \
                   const int64_t* indptr, int64_t indptr_outer, T* out, int64_t* arg,            \
                   unsigned long long* indptr_stats = nullptr);                                   \
  void gather_csr(const CudaContext& ctx, const ReduceShape& shape, const T* src,                \
                  const int64_t* indptr, int64_t indptr_outer, T* out);                          \
  void gather_coo(const CudaContext& ctx, const ReduceShape& shape, const T* src,                \
                  const int64_t* index, int64_t index_outer, T* out);

namespace cuda {
// Same contract and parameters as the cpu:: functions, bitwise equal to them (NaN payloads
// aside); every pointer is device memory and the work is enqueued on ctx's stream. Deterministic:
// the sources of every output element are grouped stably by destination (a radix sort of
// (destination, source) keys; none for sorted indices and CSR offsets) and folded in ascending
// order by one thread (a warp for lists of 257 to C sources; one thread per chunk, then a combine,
// beyond C), without float atomics. Shapes are checked here (Value errors); the VALUES of
// index / indptr are NOT (that would need a device-to-host copy and a synchronisation: the torch
// binding checks them after launching, from statistics computed on the device). An index
// outside [0, M) is skipped and offsets are clamped to [0, rows], so bad values give wrong
// results, never out-of-bounds accesses.
// index_stats / indptr_stats (optional, device memory, kIndexStats = 5 words): the value
// statistics of index_value_stats below, computed in stream order by the call itself (any
// previous contents are ignored), fused with its own pass over the index where there is one:
// - scatter, index_inner == 1: those of the rows [index_outer, E] (index_value_stats(index,
//   index_outer, E)); index_inner == inner (a destination per element): words [0] and [1] (min
//   and max of every value) as index_value_stats gives for any rows, the row words unspecified.
// - segment_csr: those of the rows [indptr_outer, M + 1].
PCOPS_SCATTER_DECLARE_CUDA(float)
PCOPS_SCATTER_DECLARE_CUDA(double)
PCOPS_SCATTER_DECLARE_CUDA(int64_t)
PCOPS_SCATTER_DECLARE_CUDA(int32_t)
PCOPS_SCATTER_DECLARE_CUDA(int16_t)
PCOPS_SCATTER_DECLARE_CUDA(int8_t)
PCOPS_SCATTER_DECLARE_CUDA(uint8_t)
// Value statistics of int64 rows [rows, len] (index or indptr rows) into stats[5] (device memory,
// enqueued on ctx's stream, no wait; previous contents ignored): biased min, max, min of column
// 0, max of column len - 1 (biased: the sign bit flipped, min stored complemented), and 1 where a
// row decreases. The torch binding reads them after launching the reduction (one
// synchronisation) to raise the CPU's errors for bad values; the reductions themselves skip
// out-of-range values.
void index_value_stats(const CudaContext& ctx, const int64_t* values, int64_t rows, int64_t len,
                       unsigned long long* stats);
}  // namespace cuda

#undef PCOPS_SCATTER_DECLARE_CUDA

#undef PCOPS_SCATTER_DECLARE

}  // namespace pcops
