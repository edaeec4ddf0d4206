// CUDA point_conv (MVMR) and its backward, bitwise equal to the CPU backend (docs/ops/point_conv.md).
//
// Grouping (group_rows, group_cells): by default 32-bit keys placed into their segments by
// counting and sorted in each (primitives::group_segmented): per destination row (k, source row)
// for the MVMR, per (k, block of 128 output rows) (i's low bits, j) for the VVOR, so the triplets
// come in the CPU's counting sorts' order; CUB radix sorts of packed 64-bit keys with the triplet
// indices as values on request (PCOPS_CUDA_POINT_CONV_GROUPING) and where a key would not fit.
// Triplets with any column out of range go to a segment past every row, so they are never
// visited (the binding range-checks first; this only keeps bad input memory-safe).
// MVMR (forward, grad_features), by default mvmr_cells_kernel from 64 destination channels: the
// runs of every row (its triplets of one kernel cell) are placed by (cell, length), then
// one launch per cell folds all rows' runs of that cell into the destination rows, a block per
// slice of the cell's matrix held in shared memory, warps folding two or four runs side by side; for
// narrow destinations mvmr_slices_kernel, every cell's slice staged once a block and the rows
// folded with the sums in registers (else mvmr_kernel, one thread per (row, V destination channels),
// the matrices read from global memory); mvmr_tile_kernel (64 rows x 128 channels a block, sums in
// shared memory, a barrier per cell) on request.
// Every element folds its triplets in order and the source channels ascending with __fmul_rn /
// __fadd_rn.
// VVOR kernel (grad_weights): one block per (piece of a kernel cell's triplets, 16 RO output x 8 RC
// input channels), each thread RO x RC chains (2 x 4, or 4 x 4 beyond 64 x 64 channels), the
// pieces of the cells with the most triplets first; a piece's triplets pass through shared memory
// 64 at a time (a cp.async ring of stages in flight), every chain folds them in order, and a
// cell's later pieces go to partial matrices added in order by one more kernel.
// Deterministic: atomics only count and place keys (the sort then fixes their order inside a
// segment) and runs (whose order inside a cell changes no bit); none in any sum.
#include <cub/cub.cuh>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "common/bits.hpp"
#include "cuda/common.cuh"
#include "cuda/point_conv_places.cuh"
#include "cuda/primitives/async_copy.cuh"
#include "cuda/primitives/segmented_keys.cuh"
#include "cuda/primitives/sorted_offsets.cuh"
#include "pcops/point_conv.hpp"

namespace pcops::cuda {
namespace {

using point_conv_places::triplet_at;
using point_conv_places::TripletAt;

struct PointConvPolicy {
  static constexpr int kThreads = 256;
  static constexpr int64_t kMaxBlocks = int64_t{1} << 20;  // grid-stride beyond
};

unsigned blocks_for(int64_t items) {
  return static_cast<unsigned>(std::clamp<int64_t>(detail::ceil_div(items, PointConvPolicy::kThreads), 1,
                                                   PointConvPolicy::kMaxBlocks));
}

using common::bits_for;


template <typename I>
__global__ void iota_kernel(I* v, int64_t n) {
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < n; p += int64_t{gridDim.x} * blockDim.x)
    v[p] = static_cast<I>(p);
}

// keys[p] = column `col` of triplet order[p], or `count` (past every row) for an invalid triplet.
__global__ void column_keys_kernel(const int64_t* t, const int64_t* order, int64_t T, int col, int64_t count,
                                   int64_t n_out, int64_t n_in, int64_t K, uint64_t* keys) {
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < T; p += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = order[p];
    const bool ok = triplet_at(t, r, 0, n_out, 1, n_in, K).ok;
    keys[p] = ok ? static_cast<uint64_t>(t[r * 3 + col]) : static_cast<uint64_t>(count);
  }
}

// keys[p] = triplet p's columns (key, second, third) packed, the lower two in b2 and b3 bits (each
// column at its count, past every row, for an invalid triplet), and order[p] = p.
__global__ void packed_keys_kernel(const int64_t* t, int64_t T, int key, int second, int third, int b2, int b3,
                                   int64_t n_out, int64_t n_in, int64_t K, uint64_t* keys, int64_t* order) {
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < T; p += int64_t{gridDim.x} * blockDim.x) {
    const bool ok = triplet_at(t, p, 0, n_out, 1, n_in, K).ok;
    const auto col = [&](int c) {
      return static_cast<uint64_t>(ok ? t[p * 3 + c] : (c == 0 ? n_out : c == 1 ? n_in : K));
    };
    keys[p] = (col(key) << (b2 + b3)) | (col(second) << b3) | col(third);
    order[p] = p;
  }
}

struct Grouping {
  const int64_t* offsets = nullptr;  // [rows + 1]
  int64_t* order = nullptr;          // [T]
  // [T] each: the sort's two key buffers, free for the caller once the grouping is done (stream
  // order); null without triplets.
  uint64_t* spare[2] = {nullptr, nullptr};
};

Grouping group_triplets(const CudaContext& ctx, detail::Workspace& ws, const PointConvShape& s, const int64_t* t,
                        int key, int second, int third, bool columns) {
  const int64_t T = s.triplets;
  const int64_t counts[3] = {s.num_out, s.num_in, s.kernels};
  const int64_t rows = counts[key];
  int64_t* offsets = ws.alloc<int64_t>(rows + 1);
  Grouping g{offsets, offsets};  // order: never read without triplets
  constexpr int NT = PointConvPolicy::kThreads;
  if (T == 0) {
    PCOPS_CUDA_CHECK(cudaMemsetAsync(offsets, 0, static_cast<size_t>(rows + 1) * sizeof(int64_t),
                                     detail::stream_of(ctx)));
    return g;
  }
  uint64_t* keys = ws.alloc<uint64_t>(T);
  uint64_t* keys_alt = ws.alloc<uint64_t>(T);
  int64_t* order = ws.alloc<int64_t>(T);
  int64_t* order_alt = ws.alloc<int64_t>(T);
  const int b2 = bits_for(counts[second]), b3 = bits_for(counts[third]), bits = bits_for(rows) + b2 + b3;
  // Stable key-value sorts on the low `sort_bits` bits of keys (values: order); afterwards keys and
  // order name the buffers that hold the result.
  size_t temp_bytes = 0;
  void* temp = nullptr;
  const auto sort_pairs = [&](int sort_bits) {
    cub::DoubleBuffer<uint64_t> dk(keys, keys_alt);
    cub::DoubleBuffer<int64_t> dv(order, order_alt);
    PCOPS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, dk, dv, T, 0, sort_bits,
                                                     detail::stream_of(ctx)));  // stable
    if (dv.Current() != order) std::swap(order, order_alt);
    if (dk.Current() != keys) std::swap(keys, keys_alt);
  };
  const auto reserve = [&](int sort_bits) {  // the scratch for sorts of up to sort_bits bits
    cub::DoubleBuffer<uint64_t> dk(keys, keys_alt);
    cub::DoubleBuffer<int64_t> dv(order, order_alt);
    PCOPS_CUDA_CHECK(
        cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, dk, dv, T, 0, sort_bits, detail::stream_of(ctx)));
    temp = ws.bytes(temp_bytes);
  };
  int shift = 0;  // the row's place in the sorted keys
  if (bits <= 64 && !columns) {  // one sort of the packed columns
    detail::launch(ctx, packed_keys_kernel, dim3(blocks_for(T)), dim3(NT), 0, t, T, key, second, third, b2, b3,
                   s.num_out, s.num_in, s.kernels, keys, order);
    reserve(bits);
    sort_pairs(bits);
    shift = b2 + b3;
  } else {  // a pass per column, least significant first
    detail::launch(ctx, iota_kernel<int64_t>, dim3(blocks_for(T)), dim3(NT), 0, order, T);
    reserve(64);
    for (int col : {third, second, key}) {
      detail::launch(ctx, column_keys_kernel, dim3(blocks_for(T)), dim3(NT), 0, t,
                     static_cast<const int64_t*>(order), T, col, counts[col], s.num_out, s.num_in, s.kernels, keys);
      sort_pairs(bits_for(counts[col]));
    }
  }
  detail::launch(ctx, primitives::sorted_offsets_kernel<uint64_t>, dim3(blocks_for(rows + 1)), dim3(NT), 0,
                 static_cast<const uint64_t*>(keys), T, shift, rows, offsets);
  g.order = order;
  g.spare[0] = keys, g.spare[1] = keys_alt;
  return g;
}

// The exact path's groupings (docs/ops/point_conv.md): by default ("segmented") a 32-bit key per
// triplet placed into its segment by counting and sorted there (primitives::group_segmented): for
// the MVMR the segments are the destination rows and the keys (k << src_bits) | source row, for
// the weight gradient the segments are (k, block of 2^i_bits output rows) and the keys
// (i mod 2^i_bits) << j_bits | j. Either way the triplets come in the CPU backend's order (row,
// then k, then source row; or k, then i, then j), and 4 bytes a triplet stay after the sort (8
// during it). PCOPS_CUDA_POINT_CONV_GROUPING=packed or columns takes CUB radix sorts of 64-bit
// keys with the triplet indices as values instead (one sort, or one a column) and packs the same
// 32-bit keys from them; "wide" (taken where a key needs more than 31 bits) keeps the indices and
// folds with the rows kernel, which reads the triplets through them. The tests compare them all.
enum class ExactGrouping { kSegmented, kPacked, kColumns, kWide };
ExactGrouping exact_grouping() {
  const char* e = std::getenv("PCOPS_CUDA_POINT_CONV_GROUPING");
  if (e == nullptr || *e == 0 || std::strcmp(e, "segmented") == 0) return ExactGrouping::kSegmented;
  if (std::strcmp(e, "packed") == 0) return ExactGrouping::kPacked;
  if (std::strcmp(e, "columns") == 0) return ExactGrouping::kColumns;
  if (std::strcmp(e, "wide") == 0) return ExactGrouping::kWide;
  throw std::invalid_argument("pcops point_conv: PCOPS_CUDA_POINT_CONV_GROUPING must be segmented, packed, columns or wide");
}

// The MVMR's 32-bit keys: (k << src_bits) | m at each grouping position (k the triplet's kernel
// cell, m its source row).
struct PackedKeys {
  const uint32_t* __restrict__ p;
  int src_bits;
  __device__ __forceinline__ uint32_t at(int64_t q) const { return p[q]; }
  __device__ __forceinline__ int64_t cell_of(uint32_t v) const { return static_cast<int64_t>(v >> src_bits); }
  __device__ __forceinline__ int64_t src_of(uint32_t v) const {
    return static_cast<int64_t>(v & ((1u << src_bits) - 1u));
  }
  __device__ __forceinline__ void get(int64_t q, int64_t& k, int64_t& m) const {
    const uint32_t v = at(q);
    k = cell_of(v), m = src_of(v);
  }
};

// The wide grouping's view for the rows kernel: the triplet at each position, read from t.
struct TripletOrder {
  const int64_t* order;
  const int64_t* t;
  int src_col;
  __device__ __forceinline__ void get(int64_t q, int64_t& k, int64_t& m) const {
    const int64_t r = order[q];
    k = t[r * 3 + 2], m = t[r * 3 + src_col];
  }
};

// Triplet p's segment (the destination row; `n_dst` where invalid, key 0) and key.
struct RowPlace {
  int dst_col, src_col;
  int64_t n_dst, n_src, K;
  int src_bits;
  __device__ void operator()(const int64_t* t, int64_t p, int64_t& seg, uint64_t& key) const {
    const TripletAt x = triplet_at(t, p, dst_col, n_dst, src_col, n_src, K);
    seg = x.ok ? x.a : n_dst;
    key = x.ok ? (static_cast<uint64_t>(x.k) << src_bits) | static_cast<uint64_t>(x.b) : 0;
  }
};

using CellBlockPlace = point_conv_places::CellBlock;  // (k, block of rows), keys (i's low bits, j)

// keys[p] = (k << src_bits) | m of the triplet at grouping position p (CUB's order).
__global__ void pack_keys32_kernel(const int64_t* __restrict__ order, const int64_t* __restrict__ t, int64_t T,
                                   int src_col, int src_bits, uint32_t* __restrict__ keys) {
  PCOPS_CUDA_GRID_STRIDE(p, T) {
    const int64_t r = order[p];
    keys[p] = static_cast<uint32_t>((static_cast<uint64_t>(t[r * 3 + 2]) << src_bits) |
                                    static_cast<uint64_t>(t[r * 3 + src_col]));
  }
}

// An MVMR's grouping: offsets [rows + 1] (at least) and either the 32-bit keys or (keys.p null, the
// wide grouping) the triplet at each position.
struct RowGrouping {
  const int64_t* offsets;
  PackedKeys keys;
  TripletOrder order;
};

// An MVMR grouping's rows and keys: destination rows n_dst (column dst_col), keys (k, source row)
// of src_bits + k's bits, and the form it takes.
struct RowKeys {
  int64_t n_dst, n_src;
  int src_bits, key_bits;
  ExactGrouping mode;
};
RowKeys row_keys(const PointConvShape& s, int dst_col, int src_col) {
  const int64_t counts[3] = {s.num_out, s.num_in, s.kernels};
  RowKeys r{counts[dst_col], counts[src_col], 0, 0, exact_grouping()};
  r.src_bits = bits_for(static_cast<uint64_t>(std::max<int64_t>(r.n_src - 1, 0)));
  r.key_bits = r.src_bits + bits_for(static_cast<uint64_t>(std::max<int64_t>(s.kernels - 1, 0)));
  // The placement's positions are 32-bit: from 2^31 triplets on, CUB's sort and its 64-bit order.
  if (r.mode == ExactGrouping::kSegmented && s.triplets >= (int64_t{1} << 31)) r.mode = ExactGrouping::kPacked;
  if (r.key_bits > 31) r.mode = ExactGrouping::kWide;
  return r;
}

// The triplets by destination row (column dst_col), then k, then source row (src_col).
RowGrouping group_rows(const CudaContext& ctx, detail::Workspace& ws, const PointConvShape& s, const int64_t* t,
                       int dst_col, int src_col) {
  const RowKeys rk = row_keys(s, dst_col, src_col);
  const int64_t n_dst = rk.n_dst, n_src = rk.n_src, K = s.kernels, T = s.triplets;
  const int src_bits = rk.src_bits, key_bits = rk.key_bits;
  const ExactGrouping mode = rk.mode;
  if (mode == ExactGrouping::kSegmented) {
    const RowPlace place{dst_col, src_col, n_dst, n_src, K, src_bits};
    const primitives::SegmentedKeys sk = primitives::group_segmented(ctx, ws, t, T, n_dst, key_bits, place);
    return {sk.offsets, {sk.keys, src_bits}, {nullptr, t, src_col}};
  }
  const Grouping g = group_triplets(ctx, ws, s, t, dst_col, 2, src_col, mode == ExactGrouping::kColumns);
  if (mode == ExactGrouping::kWide) return {g.offsets, {nullptr, 0}, {g.order, t, src_col}};
  uint32_t* keys = ws.alloc<uint32_t>(std::max<int64_t>(T, 1));
  if (T > 0)
    detail::launch(ctx, pack_keys32_kernel, dim3(blocks_for(T)), dim3(PointConvPolicy::kThreads), 0,
                   static_cast<const int64_t*>(g.order), t, T, src_col, src_bits, keys);
  return {g.offsets, {keys, src_bits}, {nullptr, t, src_col}};
}

// jj[p] = j and ii[p] = i of the triplet at position p of the (k, block) grouping (keys: i's low
// i_bits above j; jj may be the keys themselves): a warp a segment, its lanes over the segment's
// positions; positions from seg_off[segs] on (invalid triplets) are left alone.
__global__ void expand_ij_kernel(const uint32_t* keys, const int64_t* __restrict__ seg_off, int64_t segs,
                                 int64_t tiles, int i_bits, int j_bits, int* ii, int* jj) {
  const int lane = threadIdx.x & 31;
  const int64_t W = blockDim.x / 32;
  for (int64_t sg = int64_t{blockIdx.x} * W + threadIdx.x / 32; sg < segs; sg += int64_t{gridDim.x} * W) {
    const int64_t e = seg_off[sg + 1], base = (sg % tiles) << i_bits;
    for (int64_t p = seg_off[sg] + lane; p < e; p += 32) {
      const uint32_t v = keys[p];
      ii[p] = static_cast<int>(base | static_cast<int64_t>(v >> j_bits));
      jj[p] = static_cast<int>(v & ((1u << j_bits) - 1u));
    }
  }
}

// cell_off[k] = seg_off[k tiles] for k = 0..K.
__global__ void cell_offsets_kernel(const int64_t* __restrict__ seg_off, int64_t K, int64_t tiles,
                                    int64_t* __restrict__ cell_off) {
  PCOPS_CUDA_GRID_STRIDE(k, K + 1) cell_off[k] = seg_off[k * tiles];
}

// ii[p], jj[p] = i and j of the triplet at grouping position p (CUB's order; positions past the
// valid triplets are never read).
__global__ void gather_ij_kernel(const int64_t* order, const int64_t* t, int64_t T, int* ii, int* jj) {
  PCOPS_CUDA_GRID_STRIDE(p, T) {
    const int64_t r = order[p];
    ii[p] = static_cast<int>(t[r * 3]);
    jj[p] = static_cast<int>(t[r * 3 + 1]);
  }
}

// The weight gradient's grouping: each kernel cell's triplets [cell_off[k], cell_off[k + 1]) in
// (i, j) order, ii and jj their rows.
struct CellGrouping {
  const int64_t* cell_off;
  const int* ii;
  const int* jj;
};

// The weight gradient's segmented keys: (k, block of 2^i_bits rows i), keys (i's low bits, j);
// segmented where a key fits 31 bits and the segments are not far more than the triplets.
struct CellKeys {
  int j_bits, i_bits;
  int64_t tiles;
  ExactGrouping mode;
};
CellKeys cell_keys(const PointConvShape& s) {
  CellKeys c;
  c.j_bits = bits_for(static_cast<uint64_t>(std::max<int64_t>(s.num_in - 1, 0)));
  c.i_bits = std::min(7, 31 - c.j_bits);
  c.tiles = c.i_bits >= 0 ? detail::ceil_div(std::max<int64_t>(s.num_out, 1), int64_t{1} << c.i_bits) : 0;
  c.mode = exact_grouping();
  if (c.i_bits < 0 || s.kernels * c.tiles > std::max<int64_t>(s.triplets, int64_t{1} << 16) ||
      s.triplets >= (int64_t{1} << 31))
    c.mode = ExactGrouping::kPacked;
  return c;
}

CellGrouping group_cells(const CudaContext& ctx, detail::Workspace& ws, const PointConvShape& s, const int64_t* t) {
  const int64_t K = s.kernels, T = s.triplets;
  constexpr int NT = PointConvPolicy::kThreads;
  const CellKeys ck = cell_keys(s);
  const int j_bits = ck.j_bits, i_bits = ck.i_bits;
  const int64_t tiles = ck.tiles;
  const ExactGrouping mode = ck.mode;
  if (mode == ExactGrouping::kSegmented) {
    const CellBlockPlace place{s.num_out, s.num_in, K, tiles, i_bits, j_bits};
    const primitives::SegmentedKeys sk = primitives::group_segmented(ctx, ws, t, T, K * tiles, i_bits + j_bits, place);
    int* ii = ws.alloc<int>(std::max<int64_t>(T, 1));
    int64_t* cell_off = ws.alloc<int64_t>(K + 1);
    detail::launch(ctx, cell_offsets_kernel, dim3(blocks_for(K + 1)), dim3(NT), 0,
                   static_cast<const int64_t*>(sk.offsets), K, tiles, cell_off);
    if (T > 0)
      detail::launch(ctx, expand_ij_kernel, dim3(detail::grid_blocks(K * tiles, NT / 32)), dim3(NT), 0,
                     static_cast<const uint32_t*>(sk.keys),
                     static_cast<const int64_t*>(sk.offsets), K * tiles, tiles, i_bits, j_bits, ii,
                     reinterpret_cast<int*>(sk.keys));
    return {cell_off, ii, reinterpret_cast<const int*>(sk.keys)};
  }
  const Grouping g = group_triplets(ctx, ws, s, t, /*key=*/2, /*second=*/0, /*third=*/1,
                                    mode == ExactGrouping::kColumns);
  // The grouping's spare key buffers (null without triplets, when the kernels read neither).
  int* ii = reinterpret_cast<int*>(g.spare[0]);
  int* jj = reinterpret_cast<int*>(g.spare[1]);
  if (T > 0)
    detail::launch(ctx, gather_ij_kernel, dim3(blocks_for(T)), dim3(NT), 0, g.order, t, T, ii, jj);
  return {g.offsets, ii, jj};
}

// The groupings kept across calls (point_conv_grouping): the segmented ones (the default), whose
// keys are a function of the triplets and the shape; in the other forms (past 31 key bits or 2^31
// triplets, or forced by PCOPS_CUDA_POINT_CONV_GROUPING) a step sorts in every call. Layouts, each
// part at a 256-byte boundary: an MVMR's row offsets [n_dst + 2] int64 and keys [T] uint32; the
// weight gradient's cell offsets [K + 1] int64, ii [T] and jj [T] int32.
struct ExactKept {
  bool cells = false;
  int dst_col = 0, src_col = 1, src_bits = 0;  // an MVMR's columns and its keys' source-row bits
  int64_t offsets = 0;                          // offsets kept
  size_t second = 0, third = 0, bytes = 0;  // byte offsets of the parts, total (0: none kept)
};
size_t at256(size_t b) { return (b + 255) / 256 * 256; }

ExactKept exact_kept(const PointConvShape& s, PointConvStep step) {
  ExactKept e;
  const size_t T = static_cast<size_t>(std::max<int64_t>(s.triplets, 1));
  if (step == PointConvStep::kGradWeights) {
    if (s.kernels * s.channels_out * s.channels_in == 0 || cell_keys(s).mode != ExactGrouping::kSegmented) return e;
    e.cells = true, e.offsets = s.kernels + 1;
    e.second = at256(8 * static_cast<size_t>(e.offsets));
    e.third = e.second + at256(4 * T);
    e.bytes = e.third + 4 * T;
    return e;
  }
  const bool fwd = step == PointConvStep::kForward;
  e.dst_col = fwd ? 0 : 1, e.src_col = fwd ? 1 : 0;
  const RowKeys rk = row_keys(s, e.dst_col, e.src_col);
  // An empty product (no destination element, or no source channel: zeros) keeps none.
  if (rk.n_dst * s.channels_out * s.channels_in == 0 || rk.mode != ExactGrouping::kSegmented) return e;
  e.offsets = rk.n_dst + 2, e.src_bits = rk.src_bits;
  e.second = at256(8 * static_cast<size_t>(e.offsets));
  e.bytes = e.second + 4 * T;
  return e;
}

RowGrouping kept_rows(const ExactKept& e, const int64_t* t, const void* kept) {
  const auto* base = static_cast<const unsigned char*>(kept);
  return {reinterpret_cast<const int64_t*>(base), {reinterpret_cast<const uint32_t*>(base + e.second), e.src_bits},
          {nullptr, t, e.src_col}};
}

CellGrouping kept_cells(const ExactKept& e, const void* kept) {
  const auto* base = static_cast<const unsigned char*>(kept);
  return {reinterpret_cast<const int64_t*>(base), reinterpret_cast<const int*>(base + e.second),
          reinterpret_cast<const int*>(base + e.third)};
}

// V consecutive floats (V = 4: one 16-byte load; the caller guarantees the alignment).
template <int V>
struct Vec {
  float v[V];
};
template <int V>
__device__ __forceinline__ Vec<V> load_vec(const float* p) {
  Vec<V> r;
  if constexpr (V == 4) {
    const float4 x = __ldg(reinterpret_cast<const float4*>(p));
    r.v[0] = x.x, r.v[1] = x.y, r.v[2] = x.z, r.v[3] = x.w;
  } else {
#pragma unroll
    for (int u = 0; u < V; ++u) r.v[u] = __ldg(p + u);
  }
  return r;
}

// True when every row of a [rows, c] float matrix starts on a 16-byte boundary.
bool rows_aligned16(const void* p, int64_t c) {
  return c % 4 == 0 && reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// dst[r, d] for r < rows, d < c_dst: fold the triplets of row r (grouping order), then s ascending:
// acc = fl(acc + fl(mat[k, s, d] * src[m, s])), (k, m) = the triplet's kernel cell and source row
// (Order: PackedKeys or TripletOrder). mat [K, C_src, C_dst]. Thread q: row q / (c_dst / V),
// channels d .. d + V (V = 4 needs c_dst % 4 == 0 and an aligned mat).
template <int V, class Order>
__global__ void mvmr_kernel(const int64_t* offsets, Order order, const float* __restrict__ src, int64_t c_src,
                            const float* __restrict__ mat, int64_t c_dst, int64_t rows, float* __restrict__ dst) {
  const int64_t groups = c_dst / V;
  PCOPS_CUDA_GRID_STRIDE(q, rows * groups) {
    const int64_t r = q / groups, d = (q - r * groups) * V;
    float acc[V];
#pragma unroll
    for (int u = 0; u < V; ++u) acc[u] = 0.0f;
    for (int64_t p = offsets[r]; p < offsets[r + 1]; ++p) {
      int64_t k, ms;
      order.get(p, k, ms);
      const float* m = mat + k * c_src * c_dst + d;
      const float* sv = src + ms * c_src;
      for (int64_t cs = 0; cs < c_src; ++cs) {
        const float x = __ldg(sv + cs);
        const Vec<V> w = load_vec<V>(m + cs * c_dst);
#pragma unroll
        for (int u = 0; u < V; ++u) acc[u] = __fadd_rn(acc[u], __fmul_rn(w.v[u], x));
      }
    }
#pragma unroll
    for (int u = 0; u < V; ++u) dst[r * c_dst + d + u] = acc[u];
  }
}

struct MvmrTilePolicy {
  static constexpr int kThreads = 256;
  static constexpr int kRows = 64;   // destination rows per block; their sums stay in shared memory
  static constexpr int kGroup = 4;   // rows a warp folds side by side
  // The cells kernel's slice of mat[k] (c_src x 32 VC floats) in shared memory, at most this.
  static constexpr int64_t kStageFloats = 16384;
};

// VC consecutive floats: plain loads (kShared: shared memory, or global data the kernel itself or
// an earlier launch wrote) or by __ldg (VC = 4: 16 bytes; the caller guarantees the alignment).
template <int VC, bool kShared>
__device__ __forceinline__ Vec<VC> load_floats(const float* p) {
  if constexpr (!kShared) {
    return load_vec<VC>(p);
  } else {
    Vec<VC> r;
    if constexpr (VC == 4) {
      const float4 x = *reinterpret_cast<const float4*>(p);
      r.v[0] = x.x, r.v[1] = x.y, r.v[2] = x.z, r.v[3] = x.w;
    } else if constexpr (VC == 2) {
      const float2 x = *reinterpret_cast<const float2*>(p);
      r.v[0] = x.x, r.v[1] = x.y;
    } else {
      r.v[0] = *p;
    }
    return r;
  }
}

// NR rows' next triplet (source rows m[x]) of kernel cell k into their sums a[x] (VC channels a
// lane): for every source channel s ascending, a[x][u] = fl(a[x][u] + fl(w[s, u] * src[m[x], s]));
// one load of w serves the NR rows. w: the lane's first channel in row 0 of mat[k]'s block, rows ld
// floats apart (in shared memory where kShared). kVec: 16-byte loads of src (c_src a multiple of 4,
// rows aligned), each row's next four channels loaded before the current four are folded. valid:
// the lane's channels inside c_dst (unstaged; the others read 0, never stored). a, m: NG rows' room.
template <int NR, int VC, bool kVec, bool kShared, int NG>
__device__ __forceinline__ void mvmr_fold(float (&a)[NG][VC], const int64_t (&m)[NG], const float* __restrict__ src,
                                          int64_t c_src, const float* __restrict__ w, int64_t ld, int64_t valid) {
  static_assert(!kShared || kVec, "the staged slice is read with the vector path");
  const float* sv[NR];
#pragma unroll
  for (int x = 0; x < NR; ++x) sv[x] = src + m[x] * c_src;
  const auto fold = [&](float xv, const Vec<VC>& wv, int x) {
#pragma unroll
    for (int u = 0; u < VC; ++u) a[x][u] = __fadd_rn(a[x][u], __fmul_rn(wv.v[u], xv));
  };
  if constexpr (kVec) {
    // The next four channels of every row are loaded before the current four are folded (the
    // last chunk loads itself again), so each load has a chunk of folds to arrive in.
    float4 f[NR];
#pragma unroll
    for (int x = 0; x < NR; ++x) f[x] = __ldg(reinterpret_cast<const float4*>(sv[x]));
#pragma unroll 2
    for (int64_t cs = 0; cs < c_src; cs += 4) {
      const int64_t cn = cs + 4 < c_src ? cs + 4 : cs;
      float4 fn[NR];
#pragma unroll
      for (int x = 0; x < NR; ++x) fn[x] = __ldg(reinterpret_cast<const float4*>(sv[x] + cn));
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        Vec<VC> wv{};
        if (kShared || valid > 0) wv = load_floats<VC, kShared>(w + (cs + v) * ld);
#pragma unroll
        for (int x = 0; x < NR; ++x) fold(v == 0 ? f[x].x : v == 1 ? f[x].y : v == 2 ? f[x].z : f[x].w, wv, x);
      }
#pragma unroll
      for (int x = 0; x < NR; ++x) f[x] = fn[x];
    }
  } else {
    static_assert(kVec || VC == 4, "scalar loads: the unstaged tile");
    for (int64_t cs = 0; cs < c_src; ++cs) {
      Vec<VC> wv;
#pragma unroll
      for (int u = 0; u < VC; ++u) wv.v[u] = u < valid ? __ldg(w + cs * ld + u) : 0.0f;
#pragma unroll
      for (int x = 0; x < NR; ++x) fold(__ldg(sv[x] + cs), wv, x);
    }
  }
}

// mat[k]'s columns d0 .. d0 + NC - 1 of every source row into stage [c_src][NC] by cp.async, 16
// bytes a unit (c_dst % 4 == 0, rows aligned: a unit is wholly in or past c_dst, zero-filled
// there); one commit group.
template <int NC, int NT>
__device__ __forceinline__ void copy_slice(float* stage, const float* __restrict__ mat, int64_t k, int64_t c_src,
                                           int64_t c_dst, int64_t d0, int tid) {
  constexpr int U = NC / 4;
  const float* mk = mat + k * c_src * c_dst;
  for (int64_t q = tid; q < c_src * U; q += NT) {
    const int64_t s = q / U, col = d0 + (q % U) * 4;
    const bool in = col < c_dst;
    primitives::cp_async16(stage + s * NC + (q % U) * 4, in ? mk + s * c_dst + col : mat, in ? 16 : 0);
  }
  primitives::cp_async_commit();
}

// mvmr_fold of the first na (1 .. NR) rows.
template <int NR, int VC, bool kVec, bool kShared, int NG>
__device__ __forceinline__ void dispatch_fold(int na, float (&a)[NG][VC], const int64_t (&m)[NG],
                                              const float* __restrict__ src, int64_t c_src,
                                              const float* __restrict__ w, int64_t ld, int64_t valid) {
  if constexpr (NR == 1) {
    mvmr_fold<1, VC, kVec, kShared>(a, m, src, c_src, w, ld, valid);
  } else {
    if (na == NR) mvmr_fold<NR, VC, kVec, kShared>(a, m, src, c_src, w, ld, valid);
    else dispatch_fold<NR - 1, VC, kVec, kShared>(na, a, m, src, c_src, w, ld, valid);
  }
}

// Up to NG runs of one kernel cell that a warp folds side by side: run x is the triplets at
// grouping positions pp[x] .. pp[x] + ll[x] - 1 of destination row rr[x] (x < cnt); I: the
// positions' and rows' type.
template <int NG, typename I>
struct RunGroup {
  I rr[NG], pp[NG];
  int ll[NG];
  int cnt;
  // The n (1..NG) runs at run_pos[first ..], run_row[first ..] (the cells MVMR's run lists, cell
  // k's): each run's first grouping position and its row; its length counted from the keys (the
  // positions of the row that follow with cell k); then longest first.
  __device__ __forceinline__ void take(const int* __restrict__ run_pos, const int* __restrict__ run_row,
                                       int64_t first, int n, const PackedKeys& keys,
                                       const int64_t* __restrict__ offsets, int64_t k) {
    cnt = n;
#pragma unroll
    for (int x = 0; x < NG; ++x) {
      pp[x] = x < cnt ? run_pos[first + x] : 0;
      rr[x] = x < cnt ? run_row[first + x] : 0;
    }
#pragma unroll
    for (int x = 0; x < NG; ++x) {
      int l = 0;
      if (x < cnt) {
        const int64_t e = offsets[rr[x] + 1];
        do ++l;
        while (pp[x] + l < e && keys.cell_of(keys.at(pp[x] + l)) == k);
      }
      ll[x] = l;
    }
    sort();
  }
  // Longest run first, so the rows still folding at step u are the first ones.
  __device__ __forceinline__ void sort() {
    const auto cswap = [&](int x, int y) {
      if (ll[x] < ll[y]) {
        const int tl = ll[x]; ll[x] = ll[y]; ll[y] = tl;
        I t = rr[x]; rr[x] = rr[y]; rr[y] = t;
        t = pp[x]; pp[x] = pp[y]; pp[y] = t;
      }
    };
    if constexpr (NG == 4) {
      cswap(0, 1), cswap(2, 3), cswap(0, 2), cswap(1, 3), cswap(1, 2);
    } else {  // odd-even transposition: NG rounds
#pragma unroll
      for (int r = 0; r < NG; ++r)
#pragma unroll
        for (int x = r & 1; x + 1 < NG; x += 2) cswap(x, x + 1);
    }
  }
  // The runs' triplets into the rows' sums a[x] (sorted first): step u folds the u-th triplet of
  // every run that long (source rows from the keys), one load of the matrix for them all.
  template <int VC, bool kVec, bool kShared>
  __device__ __forceinline__ void fold(float (&a)[NG][VC], const PackedKeys& keys, const float* __restrict__ src,
                                       int64_t c_src, const float* __restrict__ w, int64_t ld, int64_t valid) const {
    for (int u = 0; u < ll[0]; ++u) {
      int na = 0;
      int64_t m[NG];
#pragma unroll
      for (int x = 0; x < NG; ++x) {
        na += ll[x] > u;
        m[x] = ll[x] > u ? keys.src_of(keys.at(pp[x] + u)) : 0;
      }
      dispatch_fold<NG, VC, kVec, kShared>(na, a, m, src, c_src, w, ld, valid);
    }
  }
};

// The MVMR for a tile of kRows destination rows x NC = 128 destination channels a block (dst as
// mvmr_kernel: the same fold for every element, so the same bits). The tile's running sums stay in
// shared memory; the block walks the kernel cells that its rows have (ascending), and for cell k
// takes every row's run of k-triplets (rows in order, so the runs are consecutive positions of
// the grouping, sorted by j): a warp folds the runs of up to kGroup rows side by side, their u-th
// triplets together, so each value of mat[k] it loads serves up to kGroup rows (mvmr_kernel loads
// it once per row and triplet). The warps of the block work on one cell at a time (a barrier per
// cell), so mat[k]'s block is read from L1 by all of them.
template <bool kVec>
__global__ void __launch_bounds__(MvmrTilePolicy::kThreads, 2)
    mvmr_tile_kernel(const int64_t* __restrict__ offsets, PackedKeys keys,
                     const float* __restrict__ src, int64_t c_src, const float* __restrict__ mat, int64_t c_dst,
                     int64_t rows, int64_t K, float* __restrict__ dst) {
  using P = MvmrTilePolicy;
  constexpr int VC = 4, NT = P::kThreads, TR = P::kRows, NC = 32 * VC, NG = P::kGroup, NW = NT / 32;
  static_assert(TR == 64 && NG == 4, "two warps of row cursors, groups of 4");
  __shared__ __align__(16) float sums[TR][NC];
  __shared__ int64_t run_p[TR];
  __shared__ int run_row[TR], run_len[TR];
  __shared__ int half_runs[2];     // runs of rows 0..31 (slots 0..) and 32..63 (slots 32..)
  __shared__ int64_t half_next[2];  // the smallest next cell of each half
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t col_blocks = (c_dst + NC - 1) / NC;
  const int64_t r0 = int64_t{blockIdx.x} / col_blocks * TR, d0 = int64_t{blockIdx.x} % col_blocks * NC;
  const int64_t d = d0 + lane * VC;
  for (int e = tid; e < TR * NC / 4; e += NT) reinterpret_cast<float4*>(&sums[0][0])[e] = make_float4(0, 0, 0, 0);
  // Threads 0..63 keep the cursor of row r0 + tid: its next position p (of end e) and that
  // triplet's cell nk (K: none left).
  int64_t p = 0, e = 0, nk = K;
  const auto cell = [&](int64_t q) { return keys.cell_of(keys.at(q)); };
  const auto publish_next = [&] {  // half_next[warp] = min nk over the warp's rows (warps 0, 1)
    int64_t mk = nk;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      const int64_t o = __shfl_xor_sync(0xffffffffu, mk, off);
      mk = o < mk ? o : mk;
    }
    if (lane == 0) half_next[warp] = mk;
  };
  if (tid < TR) {
    const int64_t r = r0 + tid;
    if (r < rows) p = offsets[r], e = offsets[r + 1];
    nk = p < e ? cell(p) : K;
    publish_next();
  }
  __syncthreads();
  int64_t k = half_next[0] < half_next[1] ? half_next[0] : half_next[1];
  while (k < K) {  // block-uniform
    __syncthreads();  // everyone has read half_next, run_* and the sums of the last cell
    if (tid < TR) {
      const bool act = nk == k;
      int64_t q = p;
      if (act) {
        do ++q;
        while (q < e && cell(q) == k);
      }
      const unsigned bal = __ballot_sync(0xffffffffu, act);
      if (act) {
        const int slot = warp * 32 + __popc(bal & ((1u << lane) - 1u));
        run_row[slot] = tid, run_p[slot] = p, run_len[slot] = static_cast<int>(q - p);
        p = q;
        nk = q < e ? cell(q) : K;
      }
      if (lane == 0) half_runs[warp] = __popc(bal);
      publish_next();
    }
    __syncthreads();
    const int n0 = half_runs[0], n1 = half_runs[1], g0 = (n0 + NG - 1) / NG, groups = g0 + (n1 + NG - 1) / NG;
    const int64_t valid = c_dst - d;
    const float* w = mat + k * c_src * c_dst + (valid > 0 ? d : 0);
    for (int g = warp; g < groups; g += NW) {  // warp-uniform
      const int base = g < g0 ? NG * g : 32 + NG * (g - g0);
      const int cnt = g < g0 ? min(NG, n0 - NG * g) : min(NG, n1 - NG * (g - g0));
      RunGroup<NG, int64_t> grp;
      grp.cnt = cnt;
#pragma unroll
      for (int x = 0; x < NG; ++x) {
        grp.rr[x] = x < cnt ? run_row[base + x] : 0;
        grp.ll[x] = x < cnt ? run_len[base + x] : 0;
        grp.pp[x] = x < cnt ? run_p[base + x] : 0;
      }
      grp.sort();
      float a[NG][VC];
#pragma unroll
      for (int x = 0; x < NG; ++x) {
        const Vec<VC> v = x < cnt ? load_floats<VC, true>(&sums[grp.rr[x]][lane * VC]) : Vec<VC>{};
#pragma unroll
        for (int u = 0; u < VC; ++u) a[x][u] = v.v[u];
      }
      grp.fold<VC, kVec, false>(a, keys, src, c_src, w, c_dst, valid);
#pragma unroll
      for (int x = 0; x < NG; ++x) {
        if (x >= cnt) continue;
#pragma unroll
        for (int u = 0; u < VC; ++u) sums[grp.rr[x]][lane * VC + u] = a[x][u];
      }
    }
    k = half_next[0] < half_next[1] ? half_next[0] : half_next[1];
  }
  __syncthreads();
  for (int q = tid; q < TR * NC; q += NT) {
    const int r = q / NC, c = q % NC;
    if (r0 + r < rows && d0 + c < c_dst) dst[(r0 + r) * c_dst + d0 + c] = sums[r][c];
  }
}

// The MVMR cell by cell ("cells"): dst is the rows' running sums in global memory, and one launch
// per kernel cell k, in order, folds every row's run of k-triplets into them, so that no block
// waits for another's rows (the tiles wait at a barrier per cell for their slowest warp). The
// runs of all rows (maximal stretches of one row and one cell in the grouping's order) are listed
// once and placed by (cell, length descending: one bucket a length below kBuckets - 1, the rest
// in one); in cell k's launch, each block copies mat[k]'s slice of 32 VC destination channels into
// shared memory and its warps take groups of NG (2 or 4) consecutive runs (about equally long),
// row sums from dst and back. Each run is the only one of its row and cell, so the order of the
// runs inside a cell does not change a bit.
struct MvmrCellsPolicy {
  static constexpr int kBuckets = 32;  // run lengths a cell
  static constexpr int kThreads = 256;  // of the listing kernels
};

// The cells kernel's shape for VC channels a lane: NG runs a warp group, at least MB blocks of
// 256 threads a multiprocessor (the register budget: 128 / 85 / 64 a thread for MB = 2 / 3 / 4),
// and the grid MB blocks a multiprocessor. Measured on one H200 (165k points, kNN 16, 27 cells,
// float32, forward / grad_features alone, CUDA events, medians of 9,
// benchmarks/results/point-conv-cells-cuda-20261201-085600-97fbcc9.json): VC = 2 (C = 64) 4 runs
// with 3 blocks 2.70 / 2.78 ms, against 8 runs with 2 blocks (the earlier choice, 56 bytes of
// spilled registers) 3.07 / 3.09, 4 with 4 blocks 2.86 / 2.89, 2 with 4 blocks 2.92 / 2.93 and
// the rows kernel 3.03 / 3.38; VC = 1 (C = 32) 2 runs with 4 blocks 1.72 / 1.76 ms against 8 with
// 2 (72 bytes spilled) 2.08 / 2.13 (the rows kernel: 1.15 / 1.23, the default there); VC = 4 (C =
// 128 / 256) 4 runs with 2 blocks 6.04 / 21.0 ms forward, with 3 blocks 6.24 / 20.7, with 4
// blocks 6.23 / 27.1.
template <int VC>
struct CellsShape;
template <>
struct CellsShape<4> {
  static constexpr int kGroup = 4, kBlocksPerSm = 2;
};
template <>
struct CellsShape<2> {
  static constexpr int kGroup = 4, kBlocksPerSm = 3;
};
template <>
struct CellsShape<1> {
  static constexpr int kGroup = 2, kBlocksPerSm = 4;
};

// The runs of the grouping (maximal stretches of one row and one kernel cell), each in segment
// k kBuckets + (kBuckets - 1 - min(length, kBuckets - 1)) of S = K kBuckets: kFill false counts
// them (counts[seg]), kFill true writes each run's first position and row at a place of its
// segment not taken yet (seg_off[seg] + cursor[seg], then cursor[seg] moves on). Each block takes
// a contiguous chunk of the rows; kShared (S <= primitives::kPlaceShared): it counts its chunk in
// shared memory first and touches each segment's global counter once.
template <bool kShared, bool kFill>
__global__ void __launch_bounds__(MvmrCellsPolicy::kThreads)
    list_runs_kernel(const int64_t* __restrict__ offsets, PackedKeys keys, int64_t rows, int64_t S,
                     unsigned* __restrict__ counts, const int64_t* __restrict__ seg_off, int* __restrict__ run_pos,
                     int* __restrict__ run_row) {
  constexpr int NT = MvmrCellsPolicy::kThreads, B = MvmrCellsPolicy::kBuckets;
  extern __shared__ unsigned h[];  // [S] where kShared
  const int64_t per = (rows + gridDim.x - 1) / gridDim.x;
  const int64_t r0 = min(rows, int64_t{blockIdx.x} * per), r1 = min(rows, r0 + per);
  // f(seg, p, r) for every run of the chunk's rows.
  const auto each_run = [&](auto f) {
    for (int64_t r = r0 + threadIdx.x; r < r1; r += NT) {
      const int64_t e = offsets[r + 1];
      for (int64_t p = offsets[r]; p < e;) {
        const int64_t k = keys.cell_of(keys.at(p)), p0 = p;
        do ++p;
        while (p < e && keys.cell_of(keys.at(p)) == k);
        const int64_t len = p - p0;
        f(k * B + (B - 1 - (len < B - 1 ? len : B - 1)), p0, r);
      }
    }
  };
  if constexpr (kShared) {
    for (int64_t e = threadIdx.x; e < S; e += NT) h[e] = 0;
    __syncthreads();
    each_run([&](int64_t seg, int64_t, int64_t) { atomicAdd(&h[seg], 1u); });
    __syncthreads();
    for (int64_t e = threadIdx.x; e < S; e += NT) {
      if (h[e] == 0) continue;
      if constexpr (kFill) h[e] = static_cast<unsigned>(seg_off[e]) + atomicAdd(&counts[e], h[e]);
      else atomicAdd(&counts[e], h[e]);
    }
    if constexpr (kFill) {
      __syncthreads();
      each_run([&](int64_t seg, int64_t p0, int64_t r) {
        const unsigned q = atomicAdd(&h[seg], 1u);
        run_pos[q] = static_cast<int>(p0), run_row[q] = static_cast<int>(r);
      });
    }
  } else {
    each_run([&](int64_t seg, int64_t p0, int64_t r) {
      const unsigned q = atomicAdd(&counts[seg], 1u);
      if constexpr (kFill) {
        const int64_t at = seg_off[seg] + q;
        run_pos[at] = static_cast<int>(p0), run_row[at] = static_cast<int>(r);
      }
    });
  }
}

// Cell k's runs (entries seg_off[k B] .. seg_off[(k + 1) B] - 1 of the run lists, B = kBuckets)
// into dst. Blocks: (part, column block) with the column blocks innermost.
template <int VC, int NG>
__global__ void __launch_bounds__(MvmrTilePolicy::kThreads, CellsShape<VC>::kBlocksPerSm)
    mvmr_cells_kernel(int64_t k, const int64_t* __restrict__ seg_off, const int* __restrict__ run_pos,
                      const int* __restrict__ run_row, const int64_t* __restrict__ offsets, PackedKeys keys,
                      const float* __restrict__ src, int64_t c_src, const float* __restrict__ mat, int64_t c_dst,
                      float* __restrict__ dst) {
  constexpr int NT = MvmrTilePolicy::kThreads, NC = 32 * VC, NW = NT / 32, B = MvmrCellsPolicy::kBuckets;
  extern __shared__ __align__(16) float stage[];  // [c_src][NC]
  const int64_t begin = seg_off[k * B], end = seg_off[(k + 1) * B];
  if (begin == end) return;  // block-uniform
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t col_blocks = (c_dst + NC - 1) / NC, parts = gridDim.x / col_blocks;
  const int64_t d0 = blockIdx.x % col_blocks * NC, part = blockIdx.x / col_blocks;
  const int64_t d = d0 + lane * VC, valid = c_dst - d;
  copy_slice<NC, NT>(stage, mat, k, c_src, c_dst, d0, tid);
  primitives::cp_async_wait<0>();
  __syncthreads();
  const int64_t groups = (end - begin + NG - 1) / NG;
  for (int64_t g = part * NW + warp; g < groups; g += parts * NW) {  // warp-uniform
    RunGroup<NG, int> grp;
    grp.take(run_pos, run_row, begin + g * NG, static_cast<int>(min(int64_t{NG}, end - begin - g * NG)), keys, offsets,
             k);
    float a[NG][VC];
#pragma unroll
    for (int x = 0; x < NG; ++x) {
      const Vec<VC> v = x < grp.cnt && valid > 0 ? load_floats<VC, true>(dst + grp.rr[x] * c_dst + d) : Vec<VC>{};
#pragma unroll
      for (int u = 0; u < VC; ++u) a[x][u] = v.v[u];
    }
    grp.fold<VC, true, true>(a, keys, src, c_src, stage + lane * VC, NC, valid);
    if (valid <= 0) continue;
#pragma unroll
    for (int x = 0; x < NG; ++x) {
      if (x >= grp.cnt) continue;
#pragma unroll
      for (int u = 0; u < VC; ++u) dst[grp.rr[x] * c_dst + d + u] = a[x][u];
    }
  }
}

// The MVMR by rows from every kernel cell's staged slice ("slices"): a block copies the columns d0
// .. d0 + NC - 1 of all K matrices mat[k] into shared memory once, then its threads take rows, NC / 4
// threads a row and four destination channels a thread, and fold each row's triplets in grouping
// order from the staged slices: the rows kernel's order and sums (in registers), without its
// loads of mat from global memory a triplet. The grid is kBlocksPerSm blocks a multiprocessor
// (rounded to whole column blocks), each block striding over the rows. The next triplet's packed
// entry and first source chunk are requested before the current triplet's folds, each source chunk
// of four channels one chunk ahead (the loads are not what it waits on: a variant whose eight
// threads of a row loaded the next triplet's row together, a whole triplet ahead, and shared it by
// shuffles ran at the same speed, point-conv-kernels-cuda-20261201-130000-db1d40d-*.json). The
// slices lie kSliceStride floats apart: below 32 channels a block, a warp's 16-byte loads serve
// 32 / NC rows a phase, whose cells differ, and the padding of NC floats puts neighbouring cells'
// slices on other banks.
struct MvmrSlicesPolicy {
  static constexpr int kThreads = 256;
  static constexpr int kBlocksPerSm = 2;
  static constexpr int64_t kStageBytes = 113 * 1024;  // two blocks a multiprocessor (with 1 KB reserved each)
  static constexpr int64_t slice_stride(int64_t c_src, int nc) { return c_src * nc + (nc < 32 ? nc : 0); }
};
// "slices-wide": one block of 768 threads a multiprocessor (24 warps, at most 80 registers a
// thread: the kernel's 78 without spilling), whose stage may take all the shared memory a block
// can have (the device's opt-in limit, 227 KB on an H100 / H200), so that slices of twice the
// channels fit (C = 64: 32 channels a block instead of 16, each source row read by two blocks
// instead of four).
struct MvmrSlicesWidePolicy : MvmrSlicesPolicy {
  static constexpr int kThreads = 768;
  static constexpr int kBlocksPerSm = 1;
};

template <int NC, class Policy>
__global__ void __launch_bounds__(Policy::kThreads, Policy::kBlocksPerSm)
    mvmr_slices_kernel(const int64_t* __restrict__ offsets, PackedKeys keys,
                       const float* __restrict__ src, int64_t c_src, const float* __restrict__ mat, int64_t c_dst,
                       int64_t rows, int64_t K, float* __restrict__ dst) {
  constexpr int NT = Policy::kThreads, TPR = NC / 4, RPB = NT / TPR;
  extern __shared__ __align__(16) float stage[];  // [K][c_src][NC], slices `stride` floats apart
  const int tid = threadIdx.x;
  const int64_t stride = MvmrSlicesPolicy::slice_stride(c_src, NC);
  const int64_t col_blocks = (c_dst + NC - 1) / NC, parts = gridDim.x / col_blocks;
  const int64_t d0 = blockIdx.x % col_blocks * NC, part = blockIdx.x / col_blocks;
  for (int64_t k = 0; k < K; ++k) copy_slice<NC, NT>(stage + k * stride, mat, k, c_src, c_dst, d0, tid);
  primitives::cp_async_wait<0>();
  __syncthreads();
  const int li = tid % TPR;
  const int64_t d = d0 + li * 4;
  const float* wl = stage + li * 4;
  const auto fold4 = [](float (&acc)[4], const float4& wv, float x) {
    acc[0] = __fadd_rn(acc[0], __fmul_rn(wv.x, x));
    acc[1] = __fadd_rn(acc[1], __fmul_rn(wv.y, x));
    acc[2] = __fadd_rn(acc[2], __fmul_rn(wv.z, x));
    acc[3] = __fadd_rn(acc[3], __fmul_rn(wv.w, x));
  };
  for (int64_t r = part * RPB + tid / TPR; r < rows; r += parts * RPB) {
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const int64_t b = offsets[r], e = offsets[r + 1];
    uint32_t pk_next = b < e ? keys.at(b) : 0;
    float4 f_next = b < e ? __ldg(reinterpret_cast<const float4*>(src + keys.src_of(pk_next) * c_src))
                          : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int64_t p = b; p < e; ++p) {
      const uint32_t pk = pk_next;
      const float* sv = src + keys.src_of(pk) * c_src;
      const float* w = wl + keys.cell_of(pk) * stride;
      float4 f = f_next;
      if (p + 1 < e) {
        pk_next = keys.at(p + 1);
        f_next = __ldg(reinterpret_cast<const float4*>(src + keys.src_of(pk_next) * c_src));
      }
#pragma unroll 2
      for (int64_t cs = 0; cs < c_src; cs += 4) {
        const int64_t cn = cs + 4 < c_src ? cs + 4 : cs;
        const float4 fn = __ldg(reinterpret_cast<const float4*>(sv + cn));
        const float x[4] = {f.x, f.y, f.z, f.w};
#pragma unroll
        for (int v = 0; v < 4; ++v) fold4(acc, *reinterpret_cast<const float4*>(w + (cs + v) * NC), x[v]);
        f = fn;
      }
    }
    if (d < c_dst) *reinterpret_cast<float4*>(dst + r * c_dst + d) = make_float4(acc[0], acc[1], acc[2], acc[3]);
  }
}

struct VvorPolicy {
  static constexpr int kThreads = 128;  // 16 rows of output channels x 8 columns of input channels
  static constexpr int kS = 64;         // triplets per shared-memory stage
  static constexpr int kRingBytes = 48 * 1024;  // the ring of stage buffers at most
  static constexpr int64_t kMaxRankedCells = 1024;  // cells ordered heaviest first up to this many
};

// The ring of a weight-gradient block of RO x RC chains a thread: as many stage buffers (kS rows
// of 16 RO values of G and 8 RC of F) as fit kRingBytes, kBuffers - 1 of them in flight.
template <int RO, int RC>
struct VvorRing {
  static constexpr int kBuffers =
      VvorPolicy::kRingBytes / (VvorPolicy::kS * (16 * RO + 8 * RC) * static_cast<int>(sizeof(float)));
  static_assert(kBuffers >= 2, "a ring");
};

// Block b's tile of the weight gradient (kernel k, KO = 16 RO output x KC = 8 RC input channels
// from o0, c0; blocks in (cell rank, o tile, c tile) order, k = cells[rank] where the cells are
// ranked, else the rank) and thread tid's RO x RC chains in it: o = o0 + RO (tid / 8) ..
// + RO - 1, c = c0 + RC (tid % 8) .. + RC - 1.
template <int RO, int RC>
struct VvorTile {
  static constexpr int KO = 16 * RO, KC = 8 * RC;
  static constexpr int kAhead = RO * RC >= 8 ? 2 : 8 / (RO * RC);  // products in flight, in triplets
  int64_t k, o0, c0;
  int my_o, my_c;
  float acc[RO][RC];
  // Tile t (of o_tiles x c_tiles, c fastest) of kernel k's matrix.
  __device__ __forceinline__ VvorTile(int64_t k_, int64_t t, int64_t o_tiles, int64_t c_tiles, int tid) {
    k = k_;
    o0 = t / c_tiles % o_tiles * KO;
    c0 = t % c_tiles * KC;
    my_o = (tid / 8) * RO, my_c = (tid % 8) * RC;
#pragma unroll
    for (int x = 0; x < RO; ++x)
#pragma unroll
      for (int y = 0; y < RC; ++y) acc[x][y] = 0.0f;
  }
  // q = fl(g * f) of one triplet from its staged rows (g: G[i, o0 ..], f: F[j, c0 ..]).
  __device__ __forceinline__ void products(float (&q)[RO][RC], const float* g_row, const float* f_row) const {
    const Vec<RO> g = load_floats<RO, true>(g_row + my_o);
    const Vec<RC> f = load_floats<RC, true>(f_row + my_c);
#pragma unroll
    for (int x = 0; x < RO; ++x)
#pragma unroll
      for (int y = 0; y < RC; ++y) q[x][y] = __fmul_rn(g.v[x], f.v[y]);
  }
  // acc = fl(acc + q).
  __device__ __forceinline__ void add(const float (&q)[RO][RC]) {
#pragma unroll
    for (int x = 0; x < RO; ++x)
#pragma unroll
      for (int y = 0; y < RC; ++y) acc[x][y] = __fadd_rn(acc[x][y], q[x][y]);
  }
  // One triplet: acc = fl(acc + fl(g * f)).
  __device__ __forceinline__ void fold(const float* g_row, const float* f_row) {
    float q[RO][RC];
    products(q, g_row, f_row);
    add(q);
  }
  // A full stage of S triplets (rows g[r], f[r]), the products D triplets ahead of the adds, so that
  // no add waits for its multiply and the loads and multiplies fill the adds' latency (the same
  // operations in the same order for every chain).
  template <int S, int D>
  __device__ __forceinline__ void fold_stage(const float (*g_rows)[KO], const float (*f_rows)[KC]) {
    static_assert(D >= 1 && D <= S, "a distance inside the stage");
    float p[D][RO][RC];
#pragma unroll
    for (int r = 0; r < D; ++r) products(p[r], g_rows[r], f_rows[r]);
#pragma unroll
    for (int r = 0; r < S; ++r) {
      add(p[r % D]);
      if (r + D < S) products(p[r % D], g_rows[r + D], f_rows[r + D]);
    }
  }
  // The chains inside the matrix into m ([co, ci]: kernel k's gradient or a piece's partial sums).
  __device__ __forceinline__ void store(float* __restrict__ m, int64_t co, int64_t ci) const {
#pragma unroll
    for (int x = 0; x < RO; ++x) {
      const int64_t o = o0 + my_o + x;
      if (o >= co) continue;
#pragma unroll
      for (int y = 0; y < RC; ++y)
        if (c0 + my_c + y < ci) m[o * ci + c0 + my_c + y] = acc[x][y];
    }
  }
};

// cells[rank] = the kernel cells by triplet count, most first (ties: lower cell first), so that
// the weight gradient's blocks of the longest folds start first. One block; K <= kMaxRankedCells.
__global__ void rank_cells_kernel(const int64_t* __restrict__ offsets, int64_t K, int* __restrict__ cells) {
  for (int64_t k = threadIdx.x; k < K; k += blockDim.x) {
    const int64_t n = offsets[k + 1] - offsets[k];
    int64_t rank = 0;
    for (int64_t q = 0; q < K; ++q) {
      const int64_t m = offsets[q + 1] - offsets[q];
      rank += m > n || (m == n && q < k);
    }
    cells[rank] = static_cast<int>(k);
  }
}

// A piece of the weight gradient's folds (core::vvor_piece_length): kernel cell k's triplets
// [begin, end) of the grouping; its sums go to grad_weights (slot < 0: the cell's first piece) or
// to partial matrix `slot`. k < 0: no piece (the table's padding).
struct VvorPiece {
  int64_t begin, end;
  int k, slot;
};

// The pieces in rank order (k = cells[r] where ranked, else r): rank r's cell has max(1, ceil(n /
// L)) pieces of L triplets (the last shorter). Ranks below `split` go to table a, the others to
// table b, each padded with k = -1 up to its capacity. The pieces after a cell's first get
// consecutive partial slots: fold_base[k] the first, fold_count[k] how many. One thread (K is
// the number of kernel cells: small).
__global__ void vvor_pieces_kernel(const int64_t* __restrict__ offsets, const int* __restrict__ cells, int64_t K,
                                   int64_t L, int64_t split, VvorPiece* __restrict__ a, int64_t a_cap,
                                   VvorPiece* __restrict__ b, int64_t b_cap, int64_t* __restrict__ fold_base,
                                   int* __restrict__ fold_count) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  int64_t na = 0, nb = 0, slot = 0;
  for (int64_t r = 0; r < K; ++r) {
    const int k = cells != nullptr ? cells[r] : static_cast<int>(r);
    const int64_t begin = offsets[k], end = offsets[k + 1];
    const int64_t n = end > begin ? (end - begin + L - 1) / L : 1;
    fold_base[k] = slot;
    fold_count[k] = static_cast<int>(n - 1);
    for (int64_t q = 0; q < n; ++q) {
      const VvorPiece e{begin + q * L, q + 1 < n ? begin + (q + 1) * L : end, k,
                        q == 0 ? -1 : static_cast<int>(slot + q - 1)};
      if (r < split) a[na++] = e;
      else b[nb++] = e;
    }
    slot += n - 1;
  }
  for (; na < a_cap; ++na) a[na] = VvorPiece{0, 0, -1, -1};
  for (; nb < b_cap; ++nb) b[nb] = VvorPiece{0, 0, -1, -1};
}

// grad_weights[k] = fl(... fl(grad_weights[k] + partial[fold_base[k]]) ... + partial[last]): the
// pieces after each cell's first, added in order. m counts the elements of one matrix.
__global__ void vvor_fold_pieces_kernel(const float* __restrict__ partials, const int64_t* __restrict__ fold_base,
                                        const int* __restrict__ fold_count, int64_t K, int64_t m,
                                        float* __restrict__ grad_weights) {
  PCOPS_CUDA_GRID_STRIDE(e, K * m) {
    const int64_t k = e / m, n = fold_count[k];
    if (n == 0) continue;
    const float* p = partials + fold_base[k] * m + (e - k * m);
    float acc = grad_weights[e];
    for (int64_t q = 0; q < n; ++q) acc = __fadd_rn(acc, p[q * m]);
    grad_weights[e] = acc;
  }
}

// A thread's U units of one matrix in the weight gradient's stages (rows W V floats wide, from
// column col0): unit u is stage row (tid + NT u) / W, columns col0 + V ((tid + NT u) % W) onwards.
// Units that lie past the row's end (bit u of `out`) are never copied: those columns feed only
// chains that are not stored.
template <int V, int U, int W, int NT>
struct FeedUnits {
  static_assert(V == 4 || V == 1, "16- or 4-byte units");
  static_assert((W & (W - 1)) == 0 && U <= 32, "stage rows a power of two units wide");
  const float* mc;  // the matrix from column col0
  int64_t ld;
  uint32_t out;
  __device__ __forceinline__ void init(const float* __restrict__ m, int64_t ld_, int64_t col0, int tid) {
    mc = m + col0;
    ld = ld_;
    out = 0;
#pragma unroll
    for (int u = 0; u < U; ++u) out |= static_cast<uint32_t>(col0 + (tid + NT * u) % W * V >= ld) << u;
  }
  // off[u] = the element offset of unit u's matrix row (row src[p0 + stage row], times ld), -1 past
  // the end.
  __device__ __forceinline__ void rows(int64_t (&off)[U], const int* __restrict__ src, int64_t p0, int64_t end,
                                       int tid) const {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int r = (tid + NT * u) / W;
      off[u] = p0 + r < end ? static_cast<int64_t>(src[p0 + r]) * ld : -1;
    }
  }
  // The units into a stage buffer by cp.async (16 or 4 bytes each).
  __device__ __forceinline__ void copy(float* stage, const int64_t (&off)[U], int tid) const {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (off[u] < 0 || (out >> u & 1u)) continue;
      const int e = tid + NT * u;
      float* d = stage + e / W * (W * V) + e % W * V;
      const float* src = mc + off[u] + e % W * V;
      if constexpr (V == 4) primitives::cp_async16(d, src, 16);
      else primitives::cp_async4(d, src, 4);
    }
  }
};

// The stage feed of a weight-gradient block: NT threads copy the stages, kS triplets' rows of KO
// values of G (from column o0) and KC of F (from c0), in units of V floats (V = 4: 16 bytes; GV /
// FV units a stage row, GU / FU units a thread). It keeps the next stage to copy (its first
// position and its units' row offsets, read one stage ahead); copy() issues that stage into a pair
// of buffers by cp.async and reads the offsets of the one after, one commit group a call (an empty
// group past the cell's end). gi, fj: the triplets' rows of G and F (the grouping's ii, jj).
template <int V, int KO, int KC, int NT>
struct VvorFeed {
  static constexpr int S = VvorPolicy::kS, GV = KO / V, FV = KC / V, GU = S * GV / NT, FU = S * FV / NT;
  static_assert(KO % V == 0 && KC % V == 0, "whole units inside the tile");
  static_assert(GU >= 1 && FU >= 1 && S * GV % NT == 0 && S * FV % NT == 0, "whole units per thread");
  const int* __restrict__ gi;
  const int* __restrict__ fj;
  int64_t next, end;
  int tid;
  FeedUnits<V, GU, GV, NT> g_units;
  FeedUnits<V, FU, FV, NT> f_units;
  int64_t g_off[GU], f_off[FU];
  __device__ __forceinline__ VvorFeed(const int* gi_, const int* fj_, int64_t begin, int64_t end_,
                                      const float* __restrict__ grad_out, int64_t co, int64_t o0,
                                      const float* __restrict__ features, int64_t ci, int64_t c0, int tid_)
      : gi(gi_), fj(fj_), next(begin), end(end_), tid(tid_) {
    g_units.init(grad_out, co, o0, tid);
    f_units.init(features, ci, c0, tid);
    index();
  }
  __device__ __forceinline__ void index() {
    g_units.rows(g_off, gi, next, end, tid);
    f_units.rows(f_off, fj, next, end, tid);
  }
  __device__ __forceinline__ void copy(float* g_stage, float* f_stage) {
    if (next < end) {
      g_units.copy(g_stage, g_off, tid);
      f_units.copy(f_stage, f_off, tid);
      next += S;
      index();
    }
    primitives::cp_async_commit();
  }
};

// grad_weights[k, o, c] = fold of kernel k's triplets (grouping order (i, j)):
// acc = fl(acc + fl(G[i, o] * F[j, c])). Block (k, o tile, c tile) of 16 RO x 8 RC elements
// (VvorTile); thread tid holds RO x RC chains (fewer chains per thread put more blocks, so more
// SMs, on each kernel cell, whose fold is sequential; more chains share each shared-memory load).
// The rows of a stage (G[i, o0 .. o0 + 16 RO] and F[j, c0 .. c0 + 8 RC] of 64 triplets, V floats
// per copy: V = 4 when both matrices have aligned rows) are (i, j) pairs of a kernel cell in
// sorted order, gathered from anywhere in G and F, and the fold of one stage is shorter than
// their latency: they are copied by cp.async into a ring of NB buffers, NB - 1 stages ahead of
// the fold; the (i, j) of the next stage to copy are read one stage ahead. One barrier a stage.
// Channels past co / ci are not copied (their stage columns hold whatever was there; they feed only
// chains that are not stored). cells: rank_cells_kernel's order, or null.
// The ring's shared memory for RO x RC chains a thread and NB buffers, in floats.
template <int RO, int RC, int NB>
constexpr int kVvorRingFloats = NB * VvorPolicy::kS * (16 * RO + 8 * RC);

// Tile t (of o_tiles x c_tiles) of piece `pc`, in smem (kVvorRingFloats<RO, RC, NB> floats,
// 16-byte aligned): the piece's fold into grad_weights or its partial slot.
template <int V, int RO, int RC, int NB>
__device__ __forceinline__ void vvor_ring_block(float* smem, const VvorPiece& pc, int64_t t,
                                                const int* __restrict__ ii, const int* __restrict__ jj,
                                                const float* __restrict__ grad_out,
                                                const float* __restrict__ features, int64_t co, int64_t ci,
                                                int64_t o_tiles, int64_t c_tiles, float* __restrict__ grad_weights,
                                                float* __restrict__ partials) {
  constexpr int NT = VvorPolicy::kThreads, S = VvorPolicy::kS, KO = 16 * RO, KC = 8 * RC;
  static_assert(NB >= 2, "a ring");
  if (pc.k < 0) return;  // the table's padding (the whole block)
  float(&gs)[NB][S][KO] = *reinterpret_cast<float(*)[NB][S][KO]>(smem);
  float(&fs)[NB][S][KC] = *reinterpret_cast<float(*)[NB][S][KC]>(smem + NB * S * KO);
  const int tid = threadIdx.x;
  VvorTile<RO, RC> tile(pc.k, t, o_tiles, c_tiles, tid);
  const int64_t o0 = tile.o0, c0 = tile.c0;
  const int64_t begin = pc.begin, end = pc.end;
  VvorFeed<V, KO, KC, NT> feed(ii, jj, begin, end, grad_out, co, o0, features, ci, c0, tid);
  const auto copy = [&](int buf) { feed.copy(&gs[buf][0][0], &fs[buf][0][0]); };
  const auto fold = [&](int buf, int r) { tile.fold(gs[buf][r], fs[buf][r]); };
#pragma unroll
  for (int st = 0; st < NB - 1; ++st) copy(st);
  int buf = 0, cbuf = NB - 1;
  for (int64_t p0 = begin; p0 < end; p0 += S) {
    primitives::cp_async_wait<NB - 2>();  // this thread's copies of stage p0
    __syncthreads();                      // everyone's; and the buffer folded last is free
    copy(cbuf);
    cbuf = cbuf + 1 == NB ? 0 : cbuf + 1;
    if (end - p0 >= S) {
      tile.template fold_stage<S, VvorTile<RO, RC>::kAhead>(gs[buf], fs[buf]);
    } else {
      const int n = static_cast<int>(end - p0);
      for (int r = 0; r < n; ++r) fold(buf, r);
    }
    buf = buf + 1 == NB ? 0 : buf + 1;
  }
  primitives::cp_async_wait<0>();
  tile.store(pc.slot < 0 ? grad_weights + pc.k * co * ci : partials + pc.slot * co * ci, co, ci);
}

// One block per (piece of `pieces`, tile): blocks q * tiles .. q * tiles + tiles - 1 take piece q.
template <int V, int RO, int RC, int NB>
__global__ void __launch_bounds__(VvorPolicy::kThreads)
    vvor_ring_kernel(const VvorPiece* __restrict__ pieces, const int* __restrict__ ii,
                     const int* __restrict__ jj, const float* __restrict__ grad_out,
                     const float* __restrict__ features, int64_t co, int64_t ci, int64_t o_tiles, int64_t c_tiles,
                     float* __restrict__ grad_weights, float* __restrict__ partials) {
  __shared__ __align__(16) float smem[kVvorRingFloats<RO, RC, NB>];
  const int64_t tiles = o_tiles * c_tiles;
  vvor_ring_block<V, RO, RC, NB>(smem, pieces[blockIdx.x / tiles], blockIdx.x % tiles, ii, jj, grad_out, features,
                                 co, ci, o_tiles, c_tiles, grad_weights, partials);
}

// The weight gradient with two tile shapes in one grid (the default): the pieces of the cell with
// the most triplets (rank 0; with kNN neighbourhoods the centre cell, about a quarter of them) in
// small tiles (A: RO1 x RC1 chains a thread, so many warps share its long sequential folds), every
// other cell's in large ones (B: RO2 x RC2, fewer instructions per chain step). The first
// a_pieces x (o_tiles1 x c_tiles1) blocks take table a's pieces, the rest table b's. The same folds
// in the same order: the same bits.
template <int V, int RO1, int RC1, int NB1, int RO2, int RC2, int NB2>
__global__ void __launch_bounds__(VvorPolicy::kThreads)
    vvor_mixed_kernel(const VvorPiece* __restrict__ a, int64_t a_pieces, const VvorPiece* __restrict__ b,
                      const int* __restrict__ ii, const int* __restrict__ jj,
                      const float* __restrict__ grad_out, const float* __restrict__ features, int64_t co,
                      int64_t ci, int64_t o_tiles1, int64_t c_tiles1, int64_t o_tiles2, int64_t c_tiles2,
                      float* __restrict__ grad_weights, float* __restrict__ partials) {
  constexpr int kA = kVvorRingFloats<RO1, RC1, NB1>, kB = kVvorRingFloats<RO2, RC2, NB2>;
  __shared__ __align__(16) float smem[kA > kB ? kA : kB];
  const int64_t tiles1 = o_tiles1 * c_tiles1, tiles2 = o_tiles2 * c_tiles2, a_blocks = a_pieces * tiles1;
  if (blockIdx.x < a_blocks)
    vvor_ring_block<V, RO1, RC1, NB1>(smem, a[blockIdx.x / tiles1], blockIdx.x % tiles1, ii, jj, grad_out, features,
                                      co, ci, o_tiles1, c_tiles1, grad_weights, partials);
  else
    vvor_ring_block<V, RO2, RC2, NB2>(smem, b[(blockIdx.x - a_blocks) / tiles2], (blockIdx.x - a_blocks) % tiles2,
                                      ii, jj, grad_out, features, co, ci, o_tiles2, c_tiles2, grad_weights, partials);
}

// wt[k, c, o] = w[k, o, c].
__global__ void transpose_kernel(const float* w, int64_t K, int64_t co, int64_t ci, float* wt) {
  const int64_t total = K * co * ci;
  for (int64_t q = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; q < total; q += int64_t{gridDim.x} * blockDim.x) {
    const int64_t k = q / (ci * co), rem = q - k * ci * co, c = rem / co, o = rem - c * co;
    wt[q] = w[(k * co + o) * ci + c];
  }
}

// The MVMR into dst [rows, c_dst]. PCOPS_CUDA_POINT_CONV_MVMR=slices|slices-wide|cells|tiles|rows
// picks the kernel (default, mvmr_choice: slices up to kWideCols destination channels, else cells):
// mvmr_slices_kernel (two blocks a multiprocessor, or one wide one) where the rows are aligned and
// every cell's slice fits (slices_width), else mvmr_kernel; mvmr_cells_kernel where the rows are
// aligned, a slice of 32 channels of mat[k] fits kStageFloats and the sizes fit its 32-bit run
// fields; mvmr_tile_kernel where the grid fits; else mvmr_kernel, four destination channels per
// thread where the shapes allow (the only one on the wide grouping). Cells or tiles that cannot
// run take the next one in that order. Measured on one H200 (165k points, kNN 16, 27 cells,
// float32 forward, C = 32 / 64 / 128 / 256, point-conv-cells-cuda-20261201-085600-97fbcc9.json,
// the CUB grouping then): cells 1.72 / 2.70 / 6.04 / 21.0 ms, rows 1.15 / 3.03 / 12.1 / 53.5 ms;
// earlier C = 512: cells 113 ms, tiles 165; at C = 32 / 64 / 128
// (point-conv-kernels-cuda-20261201-123300-972aa61.json) slices 0.94 / 2.92 / 14.3 ms, wide
// slices 0.97 / 2.31 / 10.4, cells 1.66 / 2.63 / 5.91 (grad_features 1.06 / 3.21 / 14.9, 1.06 /
// 2.67 / 11.4, 1.70 / 2.68 / 5.93).
constexpr int64_t kWideCols = 64;

enum class Mvmr { kSlices, kSlicesWide, kCells, kTiles, kRows };

// The slices MVMR's destination channels a block: the widest of 32, 16, 8, 4 whose slices of all
// K cells fit stage_bytes and that the destination fills at least half of (0: none fits).
int slices_width(int64_t c_src, int64_t c_dst, int64_t K, int64_t stage_bytes) {
  for (int nc = 32; nc >= 4; nc /= 2)
    if (K * MvmrSlicesPolicy::slice_stride(c_src, nc) * static_cast<int64_t>(sizeof(float)) <= stage_bytes &&
        (nc == 4 || c_dst > nc / 2))
      return nc;
  return 0;
}

// The wide slices' stage: all the shared memory a block of the current device may have.
int64_t wide_stage_bytes() { return static_cast<int64_t>(detail::device_properties().sharedMemPerBlockOptin); }

// By default the slices below kWideCols destination channels (the wide ones where their slices are
// wider: at C_in = 64 32 channels a block instead of 16) and at kWideCols where the wide slices are
// 32 channels wide (C = 64: every source row read by two blocks); else cells.
Mvmr mvmr_choice(int64_t c_src, int64_t c_dst, int64_t K) {
  const char* e = std::getenv("PCOPS_CUDA_POINT_CONV_MVMR");
  if (e == nullptr || *e == 0) {
    if (c_dst > kWideCols) return Mvmr::kCells;
    const int narrow = slices_width(c_src, c_dst, K, MvmrSlicesPolicy::kStageBytes);
    const int wide = slices_width(c_src, c_dst, K, wide_stage_bytes());
    if (c_dst < kWideCols) return wide > narrow ? Mvmr::kSlicesWide : Mvmr::kSlices;
    return wide == 32 ? Mvmr::kSlicesWide : Mvmr::kCells;
  }
  if (std::strcmp(e, "slices") == 0) return Mvmr::kSlices;
  if (std::strcmp(e, "slices-wide") == 0) return Mvmr::kSlicesWide;
  if (std::strcmp(e, "cells") == 0) return Mvmr::kCells;
  if (std::strcmp(e, "tiles") == 0) return Mvmr::kTiles;
  if (std::strcmp(e, "rows") == 0) return Mvmr::kRows;
  throw std::invalid_argument(
      "pcops point_conv: PCOPS_CUDA_POINT_CONV_MVMR must be slices, slices-wide, cells, tiles or rows");
}

// The grid of an MVMR whose blocks (column block innermost) stride over the rows: blocks_per_sm
// blocks a multiprocessor in whole sets of col_blocks; returns the sets (row parts), at least one.
int64_t row_parts(int64_t col_blocks, int blocks_per_sm) {
  const int64_t target = int64_t{blocks_per_sm} * detail::device_properties().multiProcessorCount;
  const int64_t parts = std::max<int64_t>(1, target / col_blocks);
  if (parts * col_blocks >= (int64_t{1} << 31)) throw std::invalid_argument("pcops point_conv: too many channels");
  return parts;
}

template <int NC, class Policy>
void launch_mvmr_slices(const CudaContext& ctx, const RowGrouping& g, const float* src, int64_t c_src,
                        const float* mat, int64_t c_dst, int64_t rows, int64_t K, float* dst) {
  constexpr int NT = Policy::kThreads;
  const int64_t col_blocks = detail::ceil_div(c_dst, int64_t{NC});
  const int64_t parts = row_parts(col_blocks, Policy::kBlocksPerSm);
  const auto kernel = mvmr_slices_kernel<NC, Policy>;
  const size_t smem = static_cast<size_t>(K * MvmrSlicesPolicy::slice_stride(c_src, NC)) * sizeof(float);
  PCOPS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  detail::launch(ctx, kernel, dim3(static_cast<unsigned>(parts * col_blocks)), dim3(NT), smem, g.offsets, g.keys, src,
                 c_src, mat, c_dst, rows, K, dst);
}

// The runs of a grouping for the cells MVMR (list_runs_kernel): entries seg_off[k kBuckets] ..
// seg_off[(k + 1) kBuckets] - 1 of pos and row are cell k's runs, longer ones first (T > 0). Two
// ints a triplet at most (there are at most T runs), beside the grouping's keys.
struct RunLists {
  const int* pos;
  const int* row;
  const int64_t* seg_off;
};

RunLists list_runs(const CudaContext& ctx, detail::Workspace& ws, const RowGrouping& g, int64_t rows, int64_t T,
                   int64_t K) {
  constexpr int NT = MvmrCellsPolicy::kThreads;
  const int64_t S = K * MvmrCellsPolicy::kBuckets;
  int* pos = ws.alloc<int>(T);
  int* row = ws.alloc<int>(T);
  int64_t* seg_off = ws.alloc<int64_t>(S + 1);
  const bool shared = S <= primitives::kPlaceShared;
  const dim3 grid(detail::grid_blocks(rows, NT * 8, shared ? 2048 : int64_t{1} << 20));
  const size_t smem = shared ? sizeof(unsigned) * S : 0;
  primitives::count_and_place(
      ctx, ws, S, seg_off,
      [&](unsigned* counts) {
        detail::launch(ctx, shared ? list_runs_kernel<true, false> : list_runs_kernel<false, false>, grid, dim3(NT),
                       smem, g.offsets, g.keys, rows, S, counts, static_cast<const int64_t*>(nullptr),
                       static_cast<int*>(nullptr), static_cast<int*>(nullptr));
      },
      [&](const int64_t* off, unsigned* cursor) {
        detail::launch(ctx, shared ? list_runs_kernel<true, true> : list_runs_kernel<false, true>, grid, dim3(NT),
                       smem, g.offsets, g.keys, rows, S, cursor, off, pos, row);
      });
  return {pos, row, seg_off};
}

// Whether the run lists take these sizes: 32-bit positions and rows (T and rows below 2^31).
bool runs_fit(int64_t rows, int64_t T) { return T < (int64_t{1} << 31) && rows < (int64_t{1} << 31); }

// The "cells" MVMR (runs_fit holds; VC channels a lane, aligned rows, the slice within the stage
// budget): list the runs, then a launch per kernel cell (empty cells' blocks return at once),
// CellsShape<VC>'s groups and blocks. Earlier, with slices of 128 channels (forward, 165k points),
// groups of four / eight runs: 6.28 / 7.06 ms at C = 128, 22.8 / 21.3 ms at 256, 131 / 113 ms at
// 512.
template <int VC>
void launch_mvmr_cells(const CudaContext& ctx, detail::Workspace& ws, const RowGrouping& g, const float* src,
                       int64_t c_src, const float* mat, int64_t c_dst, int64_t rows, int64_t K, int64_t T,
                       float* dst) {
  using Shape = CellsShape<VC>;
  PCOPS_CUDA_CHECK(cudaMemsetAsync(dst, 0, static_cast<size_t>(rows * c_dst) * sizeof(float), detail::stream_of(ctx)));
  if (T == 0) return;
  const RunLists runs = list_runs(ctx, ws, g, rows, T, K);
  const int64_t NC = 32 * VC, col_blocks = detail::ceil_div(c_dst, NC);
  const int64_t parts = row_parts(col_blocks, Shape::kBlocksPerSm);
  const auto kernel = mvmr_cells_kernel<VC, Shape::kGroup>;
  const size_t smem = static_cast<size_t>(c_src * NC) * sizeof(float);
  PCOPS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  for (int64_t k = 0; k < K; ++k)
    detail::launch(ctx, kernel, dim3(static_cast<unsigned>(parts * col_blocks)), dim3(MvmrTilePolicy::kThreads), smem,
                   k, runs.seg_off, runs.pos, runs.row, g.offsets, g.keys, src, c_src, mat, c_dst, dst);
}

void launch_mvmr(const CudaContext& ctx, detail::Workspace& ws, const RowGrouping& g, const float* src, int64_t c_src,
                 const float* mat, int64_t c_dst, int64_t rows, int64_t K, int64_t T, float* dst) {
  constexpr int NT = PointConvPolicy::kThreads;
  using TP = MvmrTilePolicy;
  const Mvmr choice = mvmr_choice(c_src, c_dst, K);
  const bool vec = rows_aligned16(src, c_src) && rows_aligned16(mat, c_dst);
  const bool aligned = vec && rows_aligned16(dst, c_dst);  // 16-byte rows of src, mat and dst
  const bool keyed = g.keys.p != nullptr;  // not the wide grouping
  if ((choice == Mvmr::kSlices || choice == Mvmr::kSlicesWide) && c_src > 0 && aligned && keyed) {
    const bool wide = choice == Mvmr::kSlicesWide;
    const auto go = [&](auto nc_c) {
      constexpr int NC = decltype(nc_c)::value;
      (wide ? launch_mvmr_slices<NC, MvmrSlicesWidePolicy> : launch_mvmr_slices<NC, MvmrSlicesPolicy>)(
          ctx, g, src, c_src, mat, c_dst, rows, K, dst);
    };
    const int64_t stage_bytes = wide ? wide_stage_bytes() : MvmrSlicesPolicy::kStageBytes;
    switch (slices_width(c_src, c_dst, K, stage_bytes)) {
      case 32: return go(std::integral_constant<int, 32>{});
      case 16: return go(std::integral_constant<int, 16>{});
      case 8: return go(std::integral_constant<int, 8>{});
      case 4: return go(std::integral_constant<int, 4>{});
      default: break;  // the slices do not fit: the next kernel
    }
  }
  if (choice == Mvmr::kCells && aligned && keyed && runs_fit(rows, T) && c_src * 32 <= TP::kStageFloats) {
    // Lanes' channels: the widest slice (32 VC channels) that fits and that the destination fills.
    int VC = 4;
    while (VC > 1 && (c_src * 32 * VC > TP::kStageFloats || 32 * VC / 2 >= c_dst)) VC /= 2;
    (VC == 4   ? launch_mvmr_cells<4>
     : VC == 2 ? launch_mvmr_cells<2>
               : launch_mvmr_cells<1>)(ctx, ws, g, src, c_src, mat, c_dst, rows, K, T, dst);
    return;
  }
  const int64_t tile_blocks = detail::ceil_div(rows, int64_t{TP::kRows}) * detail::ceil_div(c_dst, int64_t{128});
  if ((choice == Mvmr::kCells || choice == Mvmr::kTiles) && keyed && tile_blocks < (int64_t{1} << 31)) {
    detail::launch(ctx, vec ? mvmr_tile_kernel<true> : mvmr_tile_kernel<false>, dim3(static_cast<unsigned>(tile_blocks)),
                   dim3(TP::kThreads), 0, g.offsets, g.keys, src, c_src, mat, c_dst, rows, K, dst);
    return;
  }
  const bool v4 = rows_aligned16(mat, c_dst) && rows_aligned16(dst, c_dst);
  const int64_t items = rows * (v4 ? c_dst / 4 : c_dst);
  if (keyed)
    detail::launch(ctx, v4 ? mvmr_kernel<4, PackedKeys> : mvmr_kernel<1, PackedKeys>, dim3(blocks_for(items)),
                   dim3(NT), 0, g.offsets, g.keys, src, c_src, mat, c_dst, rows, dst);
  else
    detail::launch(ctx, v4 ? mvmr_kernel<4, TripletOrder> : mvmr_kernel<1, TripletOrder>, dim3(blocks_for(items)),
                   dim3(NT), 0, g.offsets, g.order, src, c_src, mat, c_dst, rows, dst);
}

}  // namespace

PointConvGrouping point_conv_grouping(const PointConvShape& s, PointConvStep step) {
  core::validate_point_conv(s);
  const ExactKept e = exact_kept(s, step);
  PointConvGrouping r;
  r.bytes = e.bytes;
  if (e.bytes > 0) r.id = {10 + static_cast<int64_t>(step), s.triplets, s.num_out, s.num_in, s.kernels, 0, 0, 0};
  return r;
}

void point_conv_group(const CudaContext& ctx, const PointConvShape& s, PointConvStep step, const int64_t* triplets,
                      void* grouping) {
  const ExactKept e = exact_kept(s, step);
  if (e.bytes == 0) return;
  if (grouping == nullptr || reinterpret_cast<uintptr_t>(grouping) % 16 != 0)
    throw std::invalid_argument("pcops point_conv: a grouping needs 16-byte aligned device memory");
  const cudaStream_t stream = detail::stream_of(ctx);
  auto* base = static_cast<unsigned char*>(grouping);
  const auto copy = [&](size_t at, const void* src, size_t bytes) {
    if (bytes > 0) PCOPS_CUDA_CHECK(cudaMemcpyAsync(base + at, src, bytes, cudaMemcpyDeviceToDevice, stream));
  };
  const size_t T = static_cast<size_t>(s.triplets), off = sizeof(int64_t) * static_cast<size_t>(e.offsets);
  detail::Workspace ws(ctx);
  if (e.cells) {
    const CellGrouping cg = group_cells(ctx, ws, s, triplets);
    copy(0, cg.cell_off, off), copy(e.second, cg.ii, 4 * T), copy(e.third, cg.jj, 4 * T);
  } else {
    const RowGrouping g = group_rows(ctx, ws, s, triplets, e.dst_col, e.src_col);
    copy(0, g.offsets, off), copy(e.second, g.keys.p, 4 * T);
  }
}

void point_conv(const CudaContext& ctx, const PointConvShape& s, const float* features, const float* weights,
                const int64_t* triplets, const OutputAllocator& out_alloc, const PointConvKept& kept) {
  core::validate_point_conv(s);
  const int64_t Ci = s.channels_in, Co = s.channels_out, K = s.kernels;
  if (s.num_out * Co == 0) {
    out_alloc();
    return;
  }
  detail::Workspace ws(ctx);
  constexpr int NT = PointConvPolicy::kThreads;
  float* wt = ws.alloc<float>(K * Ci * Co);
  detail::launch(ctx, transpose_kernel, dim3(blocks_for(K * Ci * Co)), dim3(NT), 0, weights, K, Co, Ci, wt);
  const ExactKept e = exact_kept(s, PointConvStep::kForward);
  const RowGrouping g = kept.forward != nullptr && e.bytes > 0 ? kept_rows(e, triplets, kept.forward)
                                                                : group_rows(ctx, ws, s, triplets, 0, 1);
  float* out = static_cast<float*>(out_alloc());
  launch_mvmr(ctx, ws, g, features, Ci, wt, Co, s.num_out, K, s.triplets, out);
}

void point_conv(const CudaContext& ctx, const PointConvShape& s, const float* features, const float* weights,
                const int64_t* triplets, float* out) {
  point_conv(ctx, s, features, weights, triplets, OutputAllocator([out] { return static_cast<void*>(out); }));
}

void point_conv_backward(const CudaContext& ctx, const PointConvShape& s, const float* grad_out,
                         const float* features, const float* weights, const int64_t* triplets,
                         const OutputAllocator& gf_alloc, const OutputAllocator& gw_alloc,
                         const PointConvKept& kept) {
  core::validate_point_conv(s);
  const int64_t Ci = s.channels_in, Co = s.channels_out, K = s.kernels;
  if (s.num_out >= (int64_t{1} << 31) || s.num_in >= (int64_t{1} << 31))
    throw std::invalid_argument("pcops point_conv: the CUDA backward takes fewer than 2^31 rows");
  constexpr int NT = PointConvPolicy::kThreads;
  // The weight gradient first, then grad_features, each allocated once its own grouping is sorted;
  // each step's workspace is released before the next one's is taken (stream-ordered), so the
  // backward's peak is the larger of the two steps, not their sum.
  if (gw_alloc && K * Co * Ci == 0) gw_alloc();
  if (gw_alloc && K * Co * Ci > 0) {
    detail::Workspace ws(ctx);
    const ExactKept e = exact_kept(s, PointConvStep::kGradWeights);
    const CellGrouping cg = kept.grad_weights != nullptr && e.bytes > 0 ? kept_cells(e, kept.grad_weights)
                                                                       : group_cells(ctx, ws, s, triplets);
    float* grad_weights = static_cast<float*>(gw_alloc());
    [&] {  // (returns once the chosen kernels are enqueued)
    // Chains per thread (output x input channels): by default 2 x 4 up to 64 x 64 channels, 4 x 4
    // beyond (uniform tiles; the pieces of the contract already spread the heaviest cell over many
    // blocks), the pieces of the cells with the most triplets first. Measured on one H200 (bunny00
    // sampled to 165k points, kNN 16, float32, grad_weights alone, C = 32 / 64 / 128 / 256, pieces
    // of 4096 / 4096 / 4096 / 16384 triplets; benchmarks/scripts/point_conv_kernels.py,
    // point-conv-kernels-cuda-20261201-052900-e4e757e-tiles.json): 2 x 4 1.27 / 2.05 / 5.20 / 17.7 ms,
    // 4 x 4 1.54 / 2.02 / 5.04 / 16.9 ms, mixed (the heaviest cell in 1 x 1 or 1 x 2 tiles, the
    // others in 2 x 4: the default while that cell was one sequential fold) 1.39 / 2.63 / 6.41 /
    // 22.3 ms, 1 x 2 1.51 / 3.15 / 9.71 / 35.7 ms; with pieces of 65536 mixed took 2.35 / 3.41 /
    // 6.50 / 22.2 ms. PCOPS_CUDA_POINT_CONV_VVOR=1|2|4|2x4|4x4|mixed forces the chains (n: 1 x n).
    const bool one = Co * Ci <= 64 * 64;  // mixed: the heaviest cell in 1 x 1, else 1 x 2
    std::string chains = one ? "2x4" : "4x4";
    if (const char* e = std::getenv("PCOPS_CUDA_POINT_CONV_VVOR"); e != nullptr && *e != 0) chains = e;
    const bool vec = rows_aligned16(grad_out, Co) && rows_aligned16(features, Ci);
    using P = VvorPolicy;
    int* cells = nullptr;
    if (K <= P::kMaxRankedCells) {
      cells = ws.alloc<int>(K);
      detail::launch(ctx, rank_cells_kernel, dim3(1), dim3(1024), 0, cg.cell_off, K, cells);
    }
    // The folds in pieces of L triplets (core::vvor_piece_length): a block per (piece, tile); the
    // pieces after a cell's first write partial matrices (at most floor(T / L), 64 MiB at most),
    // added to the cell's gradient in order afterwards.
    const int64_t L = core::vvor_piece_length(s), M = Co * Ci, extra = s.triplets / L;
    float* partials = ws.alloc<float>(std::max<int64_t>(extra * M, 1));
    int64_t* fold_base = ws.alloc<int64_t>(K);
    int* fold_count = ws.alloc<int>(K);
    const auto make_pieces = [&](int64_t split, int64_t a_cap, int64_t b_cap) {
      VvorPiece* a = ws.alloc<VvorPiece>(std::max<int64_t>(a_cap, 1));
      VvorPiece* b = ws.alloc<VvorPiece>(std::max<int64_t>(b_cap, 1));
      detail::launch(ctx, vvor_pieces_kernel, dim3(1), dim3(32), 0, cg.cell_off, static_cast<const int*>(cells), K, L,
                     split, a, a_cap, b, b_cap, fold_base, fold_count);
      return std::pair{a, b};
    };
    const auto fold_pieces = [&] {
      if (extra > 0)
        detail::launch(ctx, vvor_fold_pieces_kernel, dim3(blocks_for(K * M)), dim3(NT), 0,
                       static_cast<const float*>(partials), static_cast<const int64_t*>(fold_base),
                       static_cast<const int*>(fold_count), K, M, grad_weights);
    };
    const auto tiles = [&](int ro, int rc) {
      return std::pair{detail::ceil_div(Co, int64_t{16} * ro), detail::ceil_div(Ci, int64_t{8} * rc)};
    };
    const auto check_blocks = [](int64_t blocks) {
      if (blocks >= (int64_t{1} << 31)) throw std::invalid_argument("pcops point_conv: too many kernels x channels");
      return dim3(static_cast<unsigned>(blocks));
    };
    // "mixed": the heaviest cell in the small tiles (1 x 1 or 1 x 2 as above), the others in 2 x 4;
    // the uniform small tiles where the cells are not ranked or there is one. Table a holds the
    // heaviest cell's pieces (at most floor(T / L) + 1), table b the others' (at most floor(T / L)
    // + K - 1).
    if (chains == "mixed") {
      if (cells != nullptr && K >= 2) {
        const auto [o1, c1] = tiles(1, one ? 1 : 2);
        const auto [o2, c2] = tiles(2, 4);
        const int64_t a_cap = extra + 1, b_cap = extra + K - 1;
        const auto [a, b] = make_pieces(1, a_cap, b_cap);
        constexpr int B11 = VvorRing<1, 1>::kBuffers, B12 = VvorRing<1, 2>::kBuffers, B24 = VvorRing<2, 4>::kBuffers;
        const auto kernel = vec ? (one ? vvor_mixed_kernel<4, 1, 1, B11, 2, 4, B24> : vvor_mixed_kernel<4, 1, 2, B12, 2, 4, B24>)
                                : (one ? vvor_mixed_kernel<1, 1, 1, B11, 2, 4, B24> : vvor_mixed_kernel<1, 1, 2, B12, 2, 4, B24>);
        detail::launch(ctx, kernel, check_blocks(a_cap * o1 * c1 + b_cap * o2 * c2), dim3(P::kThreads), 0,
                       static_cast<const VvorPiece*>(a), a_cap, static_cast<const VvorPiece*>(b),
                       cg.ii, cg.jj, grad_out, features, Co, Ci, o1,
                       c1, o2, c2, grad_weights, partials);
        fold_pieces();
        return;
      }
      chains = one ? "1" : "2";
    }
    using Kernel = void (*)(const VvorPiece*, const int*, const int*, const float*, const float*, int64_t,
                            int64_t, int64_t, int64_t, float*, float*);
    Kernel kernel = nullptr;
    int RO = 1, RC = 1;
    const auto pick = [&](auto ro, auto rc) {
      constexpr int O = decltype(ro)::value, C = decltype(rc)::value, NB = VvorRing<O, C>::kBuffers;
      kernel = vec ? vvor_ring_kernel<4, O, C, NB> : vvor_ring_kernel<1, O, C, NB>;
      RO = O, RC = C;
    };
    using I1 = std::integral_constant<int, 1>;
    using I2 = std::integral_constant<int, 2>;
    using I4 = std::integral_constant<int, 4>;
    if (chains == "1") pick(I1{}, I1{});
    else if (chains == "2") pick(I1{}, I2{});
    else if (chains == "4") pick(I1{}, I4{});
    else if (chains == "2x4") pick(I2{}, I4{});
    else if (chains == "4x4") pick(I4{}, I4{});
    else throw std::invalid_argument("pcops point_conv: PCOPS_CUDA_POINT_CONV_VVOR must be 1, 2, 4, 2x4, 4x4 or mixed");
    const auto [o_tiles, c_tiles] = tiles(RO, RC);
    const int64_t cap = extra + K;
    const VvorPiece* pieces = make_pieces(0, 0, cap).second;  // every cell in table b
    detail::launch(ctx, kernel, check_blocks(cap * o_tiles * c_tiles), dim3(P::kThreads), 0,
                   pieces, cg.ii, cg.jj,
                   grad_out, features, Co, Ci, o_tiles, c_tiles, grad_weights, partials);
    fold_pieces();
    }();
  }
  if (gf_alloc && s.num_in * Ci == 0) gf_alloc();
  if (gf_alloc && s.num_in * Ci > 0) {
    detail::Workspace ws(ctx);
    const ExactKept e = exact_kept(s, PointConvStep::kGradFeatures);
    const RowGrouping g = kept.grad_features != nullptr && e.bytes > 0
                              ? kept_rows(e, triplets, kept.grad_features)
                              : group_rows(ctx, ws, s, triplets, 1, 0);
    float* grad_features = static_cast<float*>(gf_alloc());
    launch_mvmr(ctx, ws, g, grad_out, Co, weights, Ci, s.num_in, K, s.triplets, grad_features);
  }
}

void point_conv_backward(const CudaContext& ctx, const PointConvShape& s, const float* grad_out,
                         const float* features, const float* weights, const int64_t* triplets,
                         float* grad_features, float* grad_weights) {
  const auto given = [](float* p) {
    return p == nullptr ? OutputAllocator() : OutputAllocator([p] { return static_cast<void*>(p); });
  };
  point_conv_backward(ctx, s, grad_out, features, weights, triplets, given(grad_features), given(grad_weights));
}

}  // namespace pcops::cuda
