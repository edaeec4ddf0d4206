// CUDA point_conv (MVMR) and its backward, bitwise equal to the CPU backend (docs/ops/point_conv.md).
//
// Grouping: three stable CUB radix passes (least significant column first) order the triplets
// by (key, second, third), exactly as the CPU's counting sorts; a binary search per row gives the
// CSR offsets. Triplets with any column out of range get sentinel keys past every row, so they
// are never visited (the binding range-checks first; this only keeps bad input memory-safe).
// MVMR kernel: one thread per (row, V destination channels), folding the row's triplets in order
// and the source channels ascending with __fmul_rn / __fadd_rn; neighbouring threads read
// neighbouring channels of the matrix (coalesced, V = 4 as one vector load), the source value is a
// broadcast shared by the V chains.
// VVOR kernel (grad_weights): one block per (k, 16 output x 16 input channels), each thread two
// chains (one o, two c); kernel k's triplets pass through shared memory 64 at a time (the next
// stage's loads in flight while this one is folded), and every chain folds them in order.
// Deterministic: no atomics anywhere.
#include <cub/cub.cuh>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "common/bits.hpp"
#include "cuda/common.cuh"
#include "cuda/primitives/async_copy.cuh"
#include "pcops/point_conv.hpp"

namespace pcops::cuda {
namespace {

struct PointConvPolicy {
  static constexpr int kThreads = 256;
  static constexpr int64_t kMaxBlocks = int64_t{1} << 20;  // grid-stride beyond
};

unsigned blocks_for(int64_t items) {
  return static_cast<unsigned>(std::clamp<int64_t>(detail::ceil_div(items, PointConvPolicy::kThreads), 1,
                                                   PointConvPolicy::kMaxBlocks));
}

using common::bits_for;

__device__ __forceinline__ bool triplet_valid(const int64_t* t, int64_t r, int64_t n_out, int64_t n_in,
                                              int64_t K) {
  const int64_t i = t[r * 3], j = t[r * 3 + 1], k = t[r * 3 + 2];
  return i >= 0 && i < n_out && j >= 0 && j < n_in && k >= 0 && k < K;
}

__global__ void iota_kernel(int64_t* order, int64_t T) {
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < T; p += int64_t{gridDim.x} * blockDim.x)
    order[p] = p;
}

// keys[p] = column `col` of triplet order[p], or `count` (past every row) for an invalid triplet.
__global__ void column_keys_kernel(const int64_t* t, const int64_t* order, int64_t T, int col, int64_t count,
                                   int64_t n_out, int64_t n_in, int64_t K, uint64_t* keys) {
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < T; p += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = order[p];
    keys[p] = triplet_valid(t, r, n_out, n_in, K) ? static_cast<uint64_t>(t[r * 3 + col])
                                                  : static_cast<uint64_t>(count);
  }
}

__global__ void offsets_kernel(const uint64_t* sorted, int64_t T, int64_t rows, int64_t* offsets) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k <= rows; k += int64_t{gridDim.x} * blockDim.x) {
    int64_t lo = 0, hi = T;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (sorted[mid] < static_cast<uint64_t>(k)) lo = mid + 1;
      else hi = mid;
    }
    offsets[k] = lo;
  }
}

struct Grouping {
  const int64_t* offsets = nullptr;  // [rows + 1]
  const int64_t* order = nullptr;    // [T]
};

Grouping group_triplets(const CudaContext& ctx, detail::Workspace& ws, const PointConvShape& s, const int64_t* t,
                        int key, int second, int third) {
  const int64_t T = s.triplets;
  const int64_t counts[3] = {s.num_out, s.num_in, s.kernels};
  const int64_t rows = counts[key];
  int64_t* offsets = ws.alloc<int64_t>(rows + 1);
  Grouping g{offsets, offsets};
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
  detail::launch(ctx, iota_kernel, dim3(blocks_for(T)), dim3(NT), 0, order, T);
  size_t temp_bytes = 0;
  {
    cub::DoubleBuffer<uint64_t> dk(keys, keys_alt);
    cub::DoubleBuffer<int64_t> dv(order, order_alt);
    PCOPS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, dk, dv, T, 0, 64, detail::stream_of(ctx)));
  }
  void* temp = ws.bytes(temp_bytes);
  const int cols[3] = {third, second, key};
  const uint64_t* sorted_keys = keys;
  for (int col : cols) {
    detail::launch(ctx, column_keys_kernel, dim3(blocks_for(T)), dim3(NT), 0, t,
                   static_cast<const int64_t*>(order), T, col, counts[col], s.num_out, s.num_in, s.kernels, keys);
    cub::DoubleBuffer<uint64_t> dk(keys, keys_alt);
    cub::DoubleBuffer<int64_t> dv(order, order_alt);
    PCOPS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, dk, dv, T, 0, bits_for(counts[col]),
                                                     detail::stream_of(ctx)));  // stable
    if (dv.Current() != order) std::swap(order, order_alt);
    if (dk.Current() != keys) std::swap(keys, keys_alt);
    sorted_keys = keys;
  }
  detail::launch(ctx, offsets_kernel, dim3(blocks_for(rows + 1)), dim3(NT), 0, sorted_keys, T, rows, offsets);
  g.order = order;
  return g;
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
// acc = fl(acc + fl(mat[k, s, d] * src[m, s])), m = the triplet's src_col entry. mat [K, C_src, C_dst].
// Thread q: row q / (c_dst / V), channels d .. d + V (V = 4 needs c_dst % 4 == 0 and an aligned mat).
template <int V>
__global__ void mvmr_kernel(const int64_t* offsets, const int64_t* order, const int64_t* t, int src_col,
                            const float* __restrict__ src, int64_t c_src, const float* __restrict__ mat,
                            int64_t c_dst, int64_t rows, float* __restrict__ dst) {
  const int64_t groups = c_dst / V;
  PCOPS_CUDA_GRID_STRIDE(q, rows * groups) {
    const int64_t r = q / groups, d = (q - r * groups) * V;
    float acc[V];
#pragma unroll
    for (int u = 0; u < V; ++u) acc[u] = 0.0f;
    for (int64_t p = offsets[r]; p < offsets[r + 1]; ++p) {
      const int64_t row = order[p];
      const float* m = mat + t[row * 3 + 2] * c_src * c_dst + d;
      const float* sv = src + t[row * 3 + src_col] * c_src;
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

// The MVMR with the matrix staged in shared memory: dst as mvmr_kernel (the same fold for every
// element, so the same bits) for a tile of kRows destination rows x kCols destination channels a
// block. For each kernel cell k that one of the tile's rows has next (the smallest such k first),
// mat[k, :, d0 .. d0 + kCols] is copied into shared memory once and every row's triplets of cell k
// fold from it: a warp takes its rows (warp + 8 q) one after the other, a lane four channels, the
// source value a broadcast. mvmr_kernel instead reads mat[k] from L1 / L2 for every (row,
// triplet). kVec: 16-byte loads of mat (rows 16-byte aligned).
struct MvmrStagedPolicy {
  static constexpr int kThreads = 256;
  static constexpr int kRows = 64;    // destination rows per block (8 per warp)
  static constexpr int kCols = 128;   // destination channels per block (4 per lane)
  static constexpr int64_t kMaxSrc = 400;  // source channels staged at most (200 KB)
};

template <bool kVec>
__global__ void __launch_bounds__(MvmrStagedPolicy::kThreads)
    mvmr_staged_kernel(const int64_t* __restrict__ offsets, const int64_t* __restrict__ order,
                       const int64_t* __restrict__ t, int src_col, const float* __restrict__ src, int64_t c_src,
                       const float* __restrict__ mat, int64_t c_dst, int64_t rows, int64_t K,
                       float* __restrict__ dst) {
  using P = MvmrStagedPolicy;
  constexpr int NW = P::kThreads / 32, RW = P::kRows / NW, NC = P::kCols;
  extern __shared__ __align__(16) float ws[];  // [c_src][kCols]
  __shared__ int64_t k_min[NW];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t col_blocks = (c_dst + NC - 1) / NC;
  const int64_t r0 = int64_t{blockIdx.x} / col_blocks * P::kRows, d0 = int64_t{blockIdx.x} % col_blocks * NC;
  const int64_t d = d0 + lane * 4;  // the lane's four channels
  float acc[RW][4];
  int64_t p[RW], end[RW], nk[RW];  // each row's cursor, end and the cell of its next triplet (K: none)
#pragma unroll
  for (int q = 0; q < RW; ++q) {
    const int64_t r = r0 + warp + NW * q;
    p[q] = r < rows ? offsets[r] : 0;
    end[q] = r < rows ? offsets[r + 1] : 0;
    nk[q] = p[q] < end[q] ? t[order[p[q]] * 3 + 2] : K;
#pragma unroll
    for (int u = 0; u < 4; ++u) acc[q][u] = 0.0f;
  }
  for (;;) {
    int64_t m = K;
#pragma unroll
    for (int q = 0; q < RW; ++q) m = nk[q] < m ? nk[q] : m;
    if (lane == 0) k_min[warp] = m;  // the warp's lanes share their rows
    __syncthreads();
    int64_t k = k_min[0];
#pragma unroll
    for (int w = 1; w < NW; ++w) k = k_min[w] < k ? k_min[w] : k;
    if (k >= K) break;  // block-uniform
    for (int64_t e = threadIdx.x; e < c_src * (NC / 4); e += P::kThreads) {
      const int64_t sr = e / (NC / 4), col = d0 + (e % (NC / 4)) * 4;
      const float* m_row = mat + (k * c_src + sr) * c_dst;
      float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (kVec && col < c_dst) {
        v = __ldg(reinterpret_cast<const float4*>(m_row + col));
      } else if (!kVec) {
        v.x = col < c_dst ? __ldg(m_row + col) : 0.0f;
        v.y = col + 1 < c_dst ? __ldg(m_row + col + 1) : 0.0f;
        v.z = col + 2 < c_dst ? __ldg(m_row + col + 2) : 0.0f;
        v.w = col + 3 < c_dst ? __ldg(m_row + col + 3) : 0.0f;
      }
      *reinterpret_cast<float4*>(ws + sr * NC + (e % (NC / 4)) * 4) = v;
    }
    __syncthreads();
#pragma unroll
    for (int q = 0; q < RW; ++q) {
      while (nk[q] == k) {  // warp-uniform
        const int64_t row = order[p[q]];
        const float* sv = src + t[row * 3 + src_col] * c_src;
        for (int64_t cs = 0; cs < c_src; ++cs) {
          const float x = __ldg(sv + cs);
          const float4 w = *reinterpret_cast<const float4*>(ws + cs * NC + lane * 4);
          acc[q][0] = __fadd_rn(acc[q][0], __fmul_rn(w.x, x));
          acc[q][1] = __fadd_rn(acc[q][1], __fmul_rn(w.y, x));
          acc[q][2] = __fadd_rn(acc[q][2], __fmul_rn(w.z, x));
          acc[q][3] = __fadd_rn(acc[q][3], __fmul_rn(w.w, x));
        }
        ++p[q];
        nk[q] = p[q] < end[q] ? t[order[p[q]] * 3 + 2] : K;
      }
    }
    __syncthreads();  // the stage is read; k_min is free
  }
#pragma unroll
  for (int q = 0; q < RW; ++q) {
    const int64_t r = r0 + warp + NW * q;
    if (r >= rows) continue;
#pragma unroll
    for (int u = 0; u < 4; ++u)
      if (d + u < c_dst) dst[r * c_dst + d + u] = acc[q][u];
  }
}

// ii[p], jj[p] = the i and j of the triplet at grouping position p (the VVOR's operands without
// the order -> triplet indirection; positions past the valid triplets are never read).
__global__ void gather_ij_kernel(const int64_t* order, const int64_t* t, int64_t T, int64_t* ii, int64_t* jj) {
  PCOPS_CUDA_GRID_STRIDE(p, T) {
    const int64_t r = order[p];
    ii[p] = t[r * 3];
    jj[p] = t[r * 3 + 1];
  }
}

struct VvorPolicy {
  static constexpr int kThreads = 128;
  static constexpr int kO = 16;    // output channels per block (one per 8 threads)
  static constexpr int kS = 64;    // triplets per shared-memory stage
  static constexpr int kRing = 4;  // vvor_ring_kernel: stage buffers (kRing - 1 stages in flight)
};

// Block blockIdx.x's tile of the weight gradient (kernel k, kO output x 8 R input channels from
// o0, c0; blocks in (k, o tile, c tile) order) and thread tid's R chains in it: o = o0 + tid / 8,
// c = c0 + R (tid % 8) .. + R - 1.
template <int R>
struct VvorTile {
  static constexpr int KO = VvorPolicy::kO, KC = 8 * R;
  int64_t k, o0, c0;
  int my_o, my_c;
  float acc[R];
  __device__ __forceinline__ VvorTile(int64_t o_tiles, int64_t c_tiles, int tid) {
    const int64_t b = blockIdx.x;
    k = b / (c_tiles * o_tiles);
    o0 = (b / c_tiles) % o_tiles * KO;
    c0 = b % c_tiles * KC;
    my_o = tid / 8, my_c = (tid % 8) * R;
#pragma unroll
    for (int x = 0; x < R; ++x) acc[x] = 0.0f;
  }
  // One triplet from its staged rows (g: G[i, o0 ..], f: F[j, c0 ..]): acc = fl(acc + fl(g * f)).
  __device__ __forceinline__ void fold(const float* g_row, const float* f_row) {
    const float g = g_row[my_o];
    float f[R];
#pragma unroll
    for (int x = 0; x < R; ++x) f[x] = f_row[my_c + x];
#pragma unroll
    for (int x = 0; x < R; ++x) acc[x] = __fadd_rn(acc[x], __fmul_rn(g, f[x]));
  }
  // The chains inside the matrix into grad_weights [K, co, ci].
  __device__ __forceinline__ void store(float* __restrict__ gw, int64_t co, int64_t ci) const {
    const int64_t o = o0 + my_o;
    if (o >= co) return;
#pragma unroll
    for (int x = 0; x < R; ++x)
      if (c0 + my_c + x < ci) gw[(k * co + o) * ci + c0 + my_c + x] = acc[x];
  }
};

// The stages of a weight-gradient block (both kernels): kS rows of kO values of G and KC = 8 R of F,
// moved in units of V floats (V = 4: 16 bytes); GV / FV units a stage row, GU / FU units a thread
// and stage.
template <int V, int R>
struct VvorStage {
  static constexpr int NT = VvorPolicy::kThreads, S = VvorPolicy::kS, KO = VvorPolicy::kO, KC = 8 * R;
  static constexpr int GV = KO / V, FV = KC / V, GU = S * GV / NT, FU = S * FV / NT;
  static_assert(KO % V == 0 && KC % V == 0, "whole units inside the tile");
  static_assert(GU >= 1 && FU >= 1 && S * GV % NT == 0 && S * FV % NT == 0, "whole units per thread");
};

// The stage units of the weight gradient's block: thread tid's unit u covers stage row
// (tid + NT u) / W and the V columns from V ((tid + NT u) % W) of a tile W V columns wide.
// rows[u] = the matrix row of that stage row (from src[p0 + stage row]), or -1 past `end`.
template <int U, int W, int NT>
__device__ __forceinline__ void stage_rows(int64_t (&rows)[U], const int64_t* __restrict__ src, int64_t p0,
                                           int64_t end, int tid) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int r = (tid + NT * u) / W;
    rows[u] = p0 + r < end ? src[p0 + r] : -1;
  }
}

// reg[u] = the unit's V values of matrix m (row stride ld) from column col0 + V ((tid + NT u) % W);
// columns at or past ld read as 0, a row of -1 leaves the unit unchanged.
template <int V, int U, int W, int NT>
__device__ __forceinline__ void load_units(Vec<V> (&reg)[U], const int64_t (&rows)[U], const float* __restrict__ m,
                                           int64_t ld, int64_t col0, int tid) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t col = col0 + ((tid + NT * u) % W) * V;
    if (rows[u] < 0) continue;
    const float* p = m + rows[u] * ld + col;
    if (V == 4 && col < ld) {
      reg[u] = load_vec<V>(p);
    } else {
#pragma unroll
      for (int x = 0; x < V; ++x) reg[u].v[x] = col + x < ld ? __ldg(p + x) : 0.0f;
    }
  }
}

// The units into a shared-memory stage of rows W V floats wide.
template <int V, int U, int W, int NT>
__device__ __forceinline__ void store_units(float* stage, const Vec<V> (&reg)[U], int tid) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int e = tid + NT * u;
#pragma unroll
    for (int x = 0; x < V; ++x) stage[(e / W) * (W * V) + (e % W) * V + x] = reg[u].v[x];
  }
}

// grad_weights[k, o, c] = fold of kernel k's triplets (grouping order (i, j)):
// acc = fl(acc + fl(G[i, o] * F[j, c])). Block (k, o tile, c tile) of 16 x 8 R elements; thread
// tid holds the R chains o = o0 + tid / 8, c = c0 + R (tid % 8) .. + R (R = 1, 2 or 4: fewer
// chains per thread put more blocks, so more SMs, on each kernel cell, whose fold is sequential;
// more chains share each shared-memory load).
// Each stage, the block copies the G[i, o0 .. o0 + 16] and F[j, c0 .. c0 + 8 R] rows of 64
// triplets into shared memory (V floats per load: V = 4 when both matrices have aligned rows);
// the next stage's rows are loaded into registers while this one is folded, and the stage after
// that's (i, j) before them. Channels past co / ci read as 0 and are not stored.
template <int V, int R>
__global__ void __launch_bounds__(VvorPolicy::kThreads)
    vvor_tiled_kernel(const int64_t* __restrict__ offsets, const int64_t* __restrict__ ii,
                      const int64_t* __restrict__ jj, const float* __restrict__ grad_out,
                      const float* __restrict__ features, int64_t co, int64_t ci, int64_t o_tiles, int64_t c_tiles,
                      float* __restrict__ grad_weights) {
  using St = VvorStage<V, R>;
  constexpr int NT = St::NT, S = St::S, KO = St::KO, KC = St::KC, GV = St::GV, FV = St::FV, GU = St::GU,
                FU = St::FU;
  __shared__ __align__(16) float gs[2][S][KO];
  __shared__ __align__(16) float fs[2][S][KC];
  const int tid = threadIdx.x;
  VvorTile<R> tile(o_tiles, c_tiles, tid);
  const int64_t o0 = tile.o0, c0 = tile.c0;
  const int64_t begin = offsets[tile.k], end = offsets[tile.k + 1];
  Vec<V> greg[GU] = {}, freg[FU] = {};
  int64_t gi[GU], fj[FU];  // the rows of the next stage to load
  const auto index = [&](int64_t p0) {
    stage_rows<GU, GV, NT>(gi, ii, p0, end, tid);
    stage_rows<FU, FV, NT>(fj, jj, p0, end, tid);
  };
  const auto load = [&]() {
    load_units<V, GU, GV, NT>(greg, gi, grad_out, co, o0, tid);
    load_units<V, FU, FV, NT>(freg, fj, features, ci, c0, tid);
  };
  const auto store = [&](int buf) {
    store_units<V, GU, GV, NT>(&gs[buf][0][0], greg, tid);
    store_units<V, FU, FV, NT>(&fs[buf][0][0], freg, tid);
  };
  const auto fold = [&](int buf, int r) { tile.fold(gs[buf][r], fs[buf][r]); };
  if (begin < end) {
    index(begin);
    load();
    store(0);
    index(begin + S);
    __syncthreads();
  }
  int buf = 0;
  for (int64_t p0 = begin; p0 < end; p0 += S) {
    const bool more = p0 + S < end;
    if (more) {
      load();              // stage p0 + S, whose rows were indexed last time
      index(p0 + 2 * S);   // the stage after it
    }
    if (end - p0 >= S) {
#pragma unroll 16
      for (int r = 0; r < S; ++r) fold(buf, r);
    } else {
      const int n = static_cast<int>(end - p0);
      for (int r = 0; r < n; ++r) fold(buf, r);
    }
    if (more) store(buf ^ 1);  // that buffer's last reads were before the previous barrier
    __syncthreads();
    buf ^= 1;
  }
  tile.store(grad_weights, co, ci);
}

// The units of copy_units (as stage_rows / load_units) straight into a shared-memory stage of rows
// W V floats wide by cp.async (16 bytes a unit for V = 4, 4 bytes for V = 1); columns at or past
// ld are zero-filled, a row of -1 is skipped.
template <int V, int U, int W, int NT>
__device__ __forceinline__ void copy_units(float* stage, const int64_t (&rows)[U], const float* __restrict__ m,
                                           int64_t ld, int64_t col0, int tid) {
  static_assert(V == 4 || V == 1, "16- or 4-byte units");
#pragma unroll
  for (int u = 0; u < U; ++u) {
    if (rows[u] < 0) continue;
    const int e = tid + NT * u;
    const int64_t col = col0 + (e % W) * V;
    float* d = stage + (e / W) * (W * V) + (e % W) * V;
    const bool in = col < ld;  // V = 4: ld % 4 == 0, so the unit is wholly in or out
    if constexpr (V == 4) primitives::cp_async16(d, in ? m + rows[u] * ld + col : m, in ? 16 : 0);
    else primitives::cp_async4(d, in ? m + rows[u] * ld + col : m, in ? 4 : 0);
  }
}

// The weight gradient as vvor_tiled_kernel (same blocks, chains and order of every fold, so the
// same bits), with the stages copied by cp.async into a ring of kRing buffers, kRing - 1 stages
// ahead of the fold (the tiled kernel has one stage in flight, in registers): the rows of a stage
// are (i, j) pairs of a kernel cell in sorted order, gathered from anywhere in G and F, and the
// fold of one stage (64 triplets) is shorter than their latency. The (i, j) of the next stage to
// copy are read one stage ahead. One barrier a stage.
template <int V, int R>
__global__ void __launch_bounds__(VvorPolicy::kThreads)
    vvor_ring_kernel(const int64_t* __restrict__ offsets, const int64_t* __restrict__ ii,
                     const int64_t* __restrict__ jj, const float* __restrict__ grad_out,
                     const float* __restrict__ features, int64_t co, int64_t ci, int64_t o_tiles, int64_t c_tiles,
                     float* __restrict__ grad_weights) {
  using St = VvorStage<V, R>;
  constexpr int NT = St::NT, S = St::S, KO = St::KO, KC = St::KC, GV = St::GV, FV = St::FV, GU = St::GU,
                FU = St::FU, NB = VvorPolicy::kRing;
  static_assert(NB >= 2, "a ring");
  __shared__ __align__(16) float gs[NB][S][KO];
  __shared__ __align__(16) float fs[NB][S][KC];
  const int tid = threadIdx.x;
  VvorTile<R> tile(o_tiles, c_tiles, tid);
  const int64_t o0 = tile.o0, c0 = tile.c0;
  const int64_t begin = offsets[tile.k], end = offsets[tile.k + 1];
  int64_t gi[GU], fj[FU];  // the rows of the next stage to copy
  int64_t next = begin;    // its first position
  const auto index = [&] {
    stage_rows<GU, GV, NT>(gi, ii, next, end, tid);
    stage_rows<FU, FV, NT>(fj, jj, next, end, tid);
  };
  const auto copy = [&](int buf) {  // the next stage into buffer buf, then the (i, j) of the one after
    if (next < end) {
      copy_units<V, GU, GV, NT>(&gs[buf][0][0], gi, grad_out, co, o0, tid);
      copy_units<V, FU, FV, NT>(&fs[buf][0][0], fj, features, ci, c0, tid);
      next += S;
      index();
    }
    primitives::cp_async_commit();  // an empty group past the end
  };
  const auto fold = [&](int buf, int r) { tile.fold(gs[buf][r], fs[buf][r]); };
  index();
#pragma unroll
  for (int st = 0; st < NB - 1; ++st) copy(st);
  int buf = 0, cbuf = NB - 1;
  for (int64_t p0 = begin; p0 < end; p0 += S) {
    primitives::cp_async_wait<NB - 2>();  // this thread's copies of stage p0
    __syncthreads();                      // everyone's; and the buffer folded last is free
    copy(cbuf);
    cbuf = cbuf + 1 == NB ? 0 : cbuf + 1;
    if (end - p0 >= S) {
#pragma unroll 16
      for (int r = 0; r < S; ++r) fold(buf, r);
    } else {
      const int n = static_cast<int>(end - p0);
      for (int r = 0; r < n; ++r) fold(buf, r);
    }
    buf = buf + 1 == NB ? 0 : buf + 1;
  }
  primitives::cp_async_wait<0>();
  tile.store(grad_weights, co, ci);
}

// wt[k, c, o] = w[k, o, c].
__global__ void transpose_kernel(const float* w, int64_t K, int64_t co, int64_t ci, float* wt) {
  const int64_t total = K * co * ci;
  for (int64_t q = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; q < total; q += int64_t{gridDim.x} * blockDim.x) {
    const int64_t k = q / (ci * co), rem = q - k * ci * co, c = rem / co, o = rem - c * co;
    wt[q] = w[(k * co + o) * ci + c];
  }
}

// The MVMR into dst [rows, c_dst], four destination channels per thread where the shapes allow.
// PCOPS_CUDA_POINT_CONV_MVMR=staged takes mvmr_staged_kernel where the source channels fit its
// shared memory (not yet the default: not yet measured on a GPU); "rows" (the default) mvmr_kernel.
void launch_mvmr(const CudaContext& ctx, const Grouping& g, const int64_t* t, int src_col, const float* src,
                 int64_t c_src, const float* mat, int64_t c_dst, int64_t rows, int64_t K, float* dst) {
  constexpr int NT = PointConvPolicy::kThreads;
  bool staged = false;
  if (const char* e = std::getenv("PCOPS_CUDA_POINT_CONV_MVMR"); e != nullptr && *e != 0) {
    staged = std::strcmp(e, "staged") == 0;
    if (!staged && std::strcmp(e, "rows") != 0)
      throw std::invalid_argument("pcops point_conv: PCOPS_CUDA_POINT_CONV_MVMR must be rows or staged");
  }
  using SP = MvmrStagedPolicy;
  if (staged && c_src <= SP::kMaxSrc && rows > 0) {
    const int64_t blocks = detail::ceil_div(rows, int64_t{SP::kRows}) * detail::ceil_div(c_dst, int64_t{SP::kCols});
    if (blocks >= (int64_t{1} << 31)) throw std::invalid_argument("pcops point_conv: too many rows x channels");
    const size_t smem = sizeof(float) * static_cast<size_t>(std::max<int64_t>(c_src, 1)) * SP::kCols;
    auto kernel = rows_aligned16(mat, c_dst) ? mvmr_staged_kernel<true> : mvmr_staged_kernel<false>;
    PCOPS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    detail::launch(ctx, kernel, dim3(static_cast<unsigned>(blocks)), dim3(SP::kThreads), smem, g.offsets, g.order, t,
                   src_col, src, c_src, mat, c_dst, rows, K, dst);
    return;
  }
  if (rows_aligned16(mat, c_dst) && rows_aligned16(dst, c_dst)) {
    detail::launch(ctx, mvmr_kernel<4>, dim3(blocks_for(rows * c_dst / 4)), dim3(NT), 0, g.offsets, g.order, t,
                   src_col, src, c_src, mat, c_dst, rows, dst);
  } else {
    detail::launch(ctx, mvmr_kernel<1>, dim3(blocks_for(rows * c_dst)), dim3(NT), 0, g.offsets, g.order, t, src_col,
                   src, c_src, mat, c_dst, rows, dst);
  }
}

}  // namespace

void point_conv(const CudaContext& ctx, const PointConvShape& s, const float* features, const float* weights,
                const int64_t* triplets, float* out) {
  core::validate_point_conv(s);
  const int64_t Ci = s.channels_in, Co = s.channels_out, K = s.kernels;
  if (s.num_out * Co == 0) return;
  detail::Workspace ws(ctx);
  constexpr int NT = PointConvPolicy::kThreads;
  float* wt = ws.alloc<float>(K * Ci * Co);
  detail::launch(ctx, transpose_kernel, dim3(blocks_for(K * Ci * Co)), dim3(NT), 0, weights, K, Co, Ci, wt);
  const Grouping g = group_triplets(ctx, ws, s, triplets, /*key=*/0, /*second=*/2, /*third=*/1);
  launch_mvmr(ctx, g, triplets, 1, features, Ci, wt, Co, s.num_out, K, out);
}

void point_conv_backward(const CudaContext& ctx, const PointConvShape& s, const float* grad_out,
                         const float* features, const float* weights, const int64_t* triplets,
                         float* grad_features, float* grad_weights) {
  core::validate_point_conv(s);
  const int64_t Ci = s.channels_in, Co = s.channels_out, K = s.kernels;
  detail::Workspace ws(ctx);
  constexpr int NT = PointConvPolicy::kThreads;
  if (grad_features != nullptr && s.num_in * Ci > 0) {
    const Grouping g = group_triplets(ctx, ws, s, triplets, /*key=*/1, /*second=*/2, /*third=*/0);
    launch_mvmr(ctx, g, triplets, 0, grad_out, Co, weights, Ci, s.num_in, K, grad_features);
  }
  if (grad_weights != nullptr && K * Co * Ci > 0) {
    const Grouping g = group_triplets(ctx, ws, s, triplets, /*key=*/2, /*second=*/0, /*third=*/1);
    int64_t* ii = ws.alloc<int64_t>(std::max<int64_t>(s.triplets, 1));
    int64_t* jj = ws.alloc<int64_t>(std::max<int64_t>(s.triplets, 1));
    if (s.triplets > 0)
      detail::launch(ctx, gather_ij_kernel, dim3(blocks_for(s.triplets)), dim3(NT), 0, g.order, triplets, s.triplets,
                     ii, jj);
    using P = VvorPolicy;
    const int64_t o_tiles = detail::ceil_div(Co, int64_t{P::kO});
    // Two chains per thread: measured on one H200 (bunny00 at 20k and 165k points, C = 32, 64,
    // 128), two beat one and four at every size (165k, C = 32: 17.1 ms forward + backward against
    // 19.2 and 27.6). PCOPS_CUDA_POINT_CONV_VVOR=1|2|4 forces it; ring1|ring2|ring4 the same
    // chains on vvor_ring_kernel (stages in flight by cp.async; not yet the default).
    int R = 2;
    bool ring = false;
    if (const char* e = std::getenv("PCOPS_CUDA_POINT_CONV_VVOR"); e != nullptr && *e != 0) {
      ring = std::strncmp(e, "ring", 4) == 0;
      const char* n = ring ? e + 4 : e;
      R = (n[0] != 0 && n[1] == 0) ? n[0] - '0' : 0;
    }
    if (R != 1 && R != 2 && R != 4)
      throw std::invalid_argument("pcops point_conv: PCOPS_CUDA_POINT_CONV_VVOR must be 1, 2, 4, ring1, ring2 or ring4");
    const int64_t c_tiles = detail::ceil_div(Ci, int64_t{8} * R);
    const int64_t blocks = K * o_tiles * c_tiles;
    if (blocks >= (int64_t{1} << 31)) throw std::invalid_argument("pcops point_conv: too many kernels x channels");
    const bool vec = rows_aligned16(grad_out, Co) && rows_aligned16(features, Ci);
    auto kernel = vec ? (R == 4 ? vvor_tiled_kernel<4, 4> : R == 2 ? vvor_tiled_kernel<4, 2> : vvor_tiled_kernel<4, 1>)
                      : (R == 4 ? vvor_tiled_kernel<1, 4> : R == 2 ? vvor_tiled_kernel<1, 2> : vvor_tiled_kernel<1, 1>);
    if (ring)
      kernel = vec ? (R == 4 ? vvor_ring_kernel<4, 4> : R == 2 ? vvor_ring_kernel<4, 2> : vvor_ring_kernel<4, 1>)
                   : (R == 4 ? vvor_ring_kernel<1, 4> : R == 2 ? vvor_ring_kernel<1, 2> : vvor_ring_kernel<1, 1>);
    detail::launch(ctx, kernel, dim3(static_cast<unsigned>(blocks)), dim3(P::kThreads), 0, g.offsets,
                   static_cast<const int64_t*>(ii), static_cast<const int64_t*>(jj), grad_out, features, Co, Ci,
                   o_tiles, c_tiles, grad_weights);
  }
}

}  // namespace pcops::cuda
