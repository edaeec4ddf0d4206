// IVF-PQ search, CUDA backend (contract: include/pcops/ivfpq.hpp; bitwise equal to the CPU).
//
// Pipeline, all on ctx.stream, no host synchronisation:
// 1. coarse_kernel: 64 queries x 64 lists per block, coordinates staged through shared memory in
//    chunks of 32; every thread owns 4 x 4 (query, list) pairs and accumulates each one in
//    coordinate order from -0 (the additive identity, so the sum equals the contract's).
// 2. The probed lists: select_kernel (nprobe <= kMaxSelect), one warp per query selects the
//    nprobe smallest (key bits, list) values with primitives::WarpTopK (distinct: lists differ);
//    larger nprobe: a stable segmented sort of every (key, list) of the query.
// Half tables (search option): table entries rounded to float16 as they are built (the fused
// kernel stores them as __half, half the shared memory; the general path keeps float storage of
// the rounded values); sums in float32 as always, so the CPU's half tables give the same bits.
// 3. search_kernel (k <= kMaxFusedK and its shared memory fits): one block per query. For every
//    probed non-empty list it stages the query (or its residual) and builds the list's look-up
//    table in shared memory (once per query when the table does not depend on the list), scans
//    the codes (one per thread) and offers (key bits, id) to a per-warp top-k (PairTopK); the
//    warps' results are merged by warp 0, which writes the first k or the padding. PairTopK keeps
//    the k smallest (key, id) pairs as a multiset: a value equal to the k-th kept one is
//    rejected, which does not change the multiset of the k smallest (equal pairs are
//    indistinguishable), so duplicate ids and vectors give the CPU's result.
// 4. Otherwise (k > kMaxFusedK, or a table too large for shared memory) the general path:
//    plan_kernel lays out every candidate of a query in a segment, scan_kernel writes all
//    (key, id), and two stable segmented sorts (by id, then by key) give the exact order for any
//    k; finish_kernel writes the first k or the padding.
#include <cub/device/device_segmented_sort.cuh>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <type_traits>
#include <vector>

#include "common/distance.hpp"
#include "core/validate.hpp"
#include "cuda/common.cuh"
#include "cuda/primitives/warp_topk.cuh"
#include "pcops/error.hpp"
#include "pcops/ivfpq.hpp"

namespace pcops::cuda {
namespace {

using common::add_rn;
using common::mul_rn;
using common::sub_rn;
using primitives::WarpTopK;

constexpr int kThreads = 256;
constexpr int kK = 256;
constexpr int64_t kMaxSelect = 256;   // nprobe up to which the probed lists are selected, not sorted
constexpr int64_t kMaxFusedK = 1024;  // k up to which search_kernel keeps the top-k in shared memory
constexpr int kSelectWarps = 4;       // queries per select_kernel block
constexpr int kTile = 64;             // queries and lists per coarse_kernel block
constexpr int kChunk = 32;            // coordinates per coarse_kernel stage
constexpr int kPad = kTile + 4;       // shared row length (float4 aligned)

// Ranking key (smaller is better): IP negated, NaN as +inf, zero canonical (+0) so the radix
// sort orders exactly as the CPU's comparisons.
__device__ __forceinline__ float rank_key(float v, bool ip) {
  float k = ip ? -v : v;
  if (k != k) k = INFINITY;
  return k == 0.0f ? 0.0f : k;
}

// Order-preserving bits of a rank key (never NaN, zero is +0): unsigned order = float order.
__device__ __forceinline__ uint32_t key_bits(float key) {
  const uint32_t u = __float_as_uint(key);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float key_of_bits(uint32_t b) {
  return __uint_as_float((b & 0x80000000u) ? (b ^ 0x80000000u) : ~b);
}

// Coarse distances raw[q, l] (contract order: coordinates 0, 1, ... of each pair).
template <bool kIp>
__global__ void __launch_bounds__(256) coarse_kernel(const float* __restrict__ queries,
                                                     const float* __restrict__ centroids, int64_t nq,
                                                     int64_t nlist, int64_t dim, float* __restrict__ raw) {
  __shared__ __align__(16) float sq[kChunk][kPad];
  __shared__ __align__(16) float sc[kChunk][kPad];
  const int tid = static_cast<int>(threadIdx.x), tx = tid & 15, ty = tid >> 4;
  const int64_t q0 = int64_t{blockIdx.y} * kTile, l0 = int64_t{blockIdx.x} * kTile;
  float acc[4][4];
#pragma unroll
  for (int u = 0; u < 4; ++u)
#pragma unroll
    for (int v = 0; v < 4; ++v) acc[u][v] = -0.0f;  // -0 + s == s for every s
  for (int64_t d0 = 0; d0 < dim; d0 += kChunk) {
    const int n = static_cast<int>(dim - d0 < kChunk ? dim - d0 : kChunk);
#pragma unroll
    for (int j = 0; j < kTile * kChunk / 256; ++j) {
      const int e = tid + 256 * j, row = e / kChunk, col = e % kChunk;
      const bool in = col < n;
      sq[col][row] = in && q0 + row < nq ? queries[(q0 + row) * dim + d0 + col] : 0.0f;
      sc[col][row] = in && l0 + row < nlist ? centroids[(l0 + row) * dim + d0 + col] : 0.0f;
    }
    __syncthreads();
    for (int i = 0; i < n; ++i) {
      const float4 a4 = *reinterpret_cast<const float4*>(&sq[i][ty * 4]);
      const float4 b4 = *reinterpret_cast<const float4*>(&sc[i][tx * 4]);
      const float a[4] = {a4.x, a4.y, a4.z, a4.w}, b[4] = {b4.x, b4.y, b4.z, b4.w};
#pragma unroll
      for (int u = 0; u < 4; ++u)
#pragma unroll
        for (int v = 0; v < 4; ++v) {
          if constexpr (kIp) {
            acc[u][v] = add_rn(acc[u][v], mul_rn(a[u], b[v]));
          } else {
            const float t = sub_rn(a[u], b[v]);
            acc[u][v] = add_rn(acc[u][v], mul_rn(t, t));
          }
        }
    }
    __syncthreads();
  }
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    const int64_t q = q0 + ty * 4 + u;
    if (q >= nq) continue;
#pragma unroll
    for (int v = 0; v < 4; ++v) {
      const int64_t l = l0 + tx * 4 + v;
      if (l < nlist) raw[q * nlist + l] = acc[u][v];
    }
  }
}

// raw[q, l] for rows x [rows, dim] against centroids [nlist, dim] (coarse_kernel's tiles).
void launch_coarse(const CudaContext& ctx, bool ip, const float* x, const float* centroids, int64_t rows,
                   int64_t nlist, int64_t dim, float* raw) {
  const dim3 grid(static_cast<unsigned>(detail::ceil_div(nlist, kTile)), static_cast<unsigned>(detail::ceil_div(rows, kTile)));
  if (ip) detail::launch(ctx, coarse_kernel<true>, grid, dim3(256), 0, x, centroids, rows, nlist, dim, raw);
  else detail::launch(ctx, coarse_kernel<false>, grid, dim3(256), 0, x, centroids, rows, nlist, dim, raw);
}

// The nprobe first lists of each query by (coarse key, list): probe[q, r], r < nprobe.
__global__ void __launch_bounds__(kSelectWarps * 32) select_kernel(const float* __restrict__ raw, int64_t nq,
                                                                   int64_t nlist, int nprobe, bool ip,
                                                                   int32_t* __restrict__ probe) {
  extern __shared__ uint64_t select_buf[];
  const int w = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31u);
  const int64_t q = int64_t{blockIdx.x} * kSelectWarps + w;
  if (q >= nq) return;  // warp-uniform; no block barrier follows
  const int half = WarpTopK::half_for(nprobe);
  WarpTopK top{select_buf + 2 * half * w, half, nprobe};
  top.reset();
  const float* row = raw + q * nlist;
  for (int64_t l0 = 0; l0 < nlist; l0 += 32) {
    const int64_t l = l0 + lane;
    const bool valid = l < nlist;
    const uint64_t v =
        valid ? (uint64_t{key_bits(rank_key(row[l], ip))} << 32) | static_cast<uint32_t>(l) : WarpTopK::kEmpty;
    top.offer(v, valid);
  }
  top.merge();
  for (int r = lane; r < nprobe; r += 32)
    probe[q * nprobe + r] = static_cast<int32_t>(top.result()[r] & 0xFFFFFFFFu);
}

// Per-warp selection of the k smallest (key bits, id) pairs, a multiset (ids and pairs may
// repeat). Same scheme as primitives::WarpTopK with two arrays: key[0, half) / id[0, half) keep
// the best pairs sorted ascending (padded with (kNoKey, kNoId)); [half, 2 * half) collects new
// ones; a bitonic sort of the new half (descending) and one bitonic merge of the whole buffer
// bring the smallest half back into the lower half. A pair is admitted only when it is smaller
// than the k-th kept pair: an equal pair would not change the multiset of the k smallest. Real
// keys are below kNoKey (the bits of NaN), so padding never ranks before a candidate. Every
// member is warp-collective (all 32 lanes converged; counters identical in every lane).
struct PairTopK {
  static constexpr uint32_t kNoKey = 0xFFFFFFFFu;
  static constexpr int64_t kNoId = INT64_MAX;

  uint32_t* key;  // 2 * half, shared memory private to the warp
  int64_t* id;    // 2 * half
  int half;       // power of two >= max(k, 64)
  int k;          // 1 <= k <= half
  int pending = 0;
  uint32_t thr_key = kNoKey;  // the k-th kept pair
  int64_t thr_id = kNoId;

  __host__ __device__ static int half_for(int64_t k) { return WarpTopK::half_for(k); }
  __device__ static int lane() { return WarpTopK::lane(); }

  __device__ void reset() {
    __syncwarp();
    for (int i = lane(); i < half; i += 32) {
      key[i] = kNoKey;
      id[i] = kNoId;
    }
    pending = 0;
    thr_key = kNoKey;
    thr_id = kNoId;
    __syncwarp();
  }

  // Appends the admitted pairs of the warp; returns whether any lane's pair was admitted.
  __device__ bool push(bool take, uint32_t kb, int64_t v) {
    const unsigned mask = __ballot_sync(WarpTopK::kFull, take);
    if (mask == 0u) return false;
    if (take) {
      const int at = half + pending + __popc(mask & ((1u << lane()) - 1u));
      key[at] = kb;
      id[at] = v;
    }
    pending += __popc(mask);
    if (pending > half - 32) merge();  // the next offer (<= 32 pairs) must fit
    return true;
  }

  // Each lane offers (kb, *idp) when valid; the id is read only when the key can compete.
  __device__ void offer(uint32_t kb, const int64_t* idp, bool valid) {
    bool take = valid && kb <= thr_key;
    int64_t v = 0;
    if (take) {
      v = *idp;
      take = kb < thr_key || v < thr_id;
    }
    push(take, kb, v);
  }

  __device__ bool offer_pair(uint32_t kb, int64_t v, bool valid) {
    return push(valid && (kb < thr_key || (kb == thr_key && v < thr_id)), kb, v);
  }

  // Orders positions a < b: ascending (or descending) by (key, id).
  __device__ void exchange(int a, int b, bool descending) {
    const uint32_t ka = key[a], kb = key[b];
    const int64_t ia = id[a], ib = id[b];
    const bool a_greater = ka > kb || (ka == kb && ia > ib);
    const bool b_greater = kb > ka || (kb == ka && ib > ia);
    if (descending ? b_greater : a_greater) {
      key[a] = kb;
      key[b] = ka;
      id[a] = ib;
      id[b] = ia;
    }
  }

  // Folds the pending pairs into the kept half and updates the threshold.
  __device__ void merge() {
    if (pending == 0) return;
    const int ln = lane();
    __syncwarp();
    for (int i = half + pending + ln; i < 2 * half; i += 32) {
      key[i] = kNoKey;
      id[i] = kNoId;
    }
    __syncwarp();
    for (int size = 2; size <= half; size <<= 1) {  // bitonic sort of the new half, descending
      for (int stride = size >> 1; stride > 0; stride >>= 1) {
        for (int i = ln; i < (half >> 1); i += 32) {
          const int a = 2 * i - (i & (stride - 1));
          exchange(half + a, half + a + stride, (a & size) == 0);
        }
        __syncwarp();
      }
    }
    for (int stride = half; stride > 0; stride >>= 1) {  // bitonic merge of the buffer, ascending
      for (int i = ln; i < half; i += 32) {
        const int a = 2 * i - (i & (stride - 1));
        exchange(a, a + stride, false);
      }
      __syncwarp();
    }
    pending = 0;
    thr_key = key[k - 1];
    thr_id = id[k - 1];
  }
};

// Shared memory of search_kernel: the warps' top-k buffers, the table and the staged sub-vectors.
size_t search_shared_bytes(int warps, int half, int64_t M, int64_t dim, size_t lut_entry) {
  return static_cast<size_t>(warps) * 2 * static_cast<size_t>(half) * (sizeof(int64_t) + sizeof(uint32_t)) +
         static_cast<size_t>(M * kK) * lut_entry + static_cast<size_t>(dim) * sizeof(float);
}

// Sum of the table entries of one code, m = 0, 1, ... (kM > 0: M known, code aligned to
// min(kM, 16) bytes, read in words).
// Table entries: float32, or float16 (half tables: entries rounded to nearest, read back exactly).
template <class LutT>
__device__ __forceinline__ LutT to_lut(float v) {
  if constexpr (std::is_same_v<LutT, __half>) return __float2half_rn(v);
  else return v;
}
__device__ __forceinline__ float lut_value(float v) { return v; }
__device__ __forceinline__ float lut_value(__half v) { return __half2float(v); }

template <int kM, class LutT>
__device__ __forceinline__ float code_sum(const uint8_t* __restrict__ code, int64_t M, const LutT* lut) {
  if constexpr (kM == 0) {
    float s = lut_value(lut[code[0]]);
    for (int64_t m = 1; m < M; ++m) s = add_rn(s, lut_value(lut[m * kK + code[m]]));
    return s;
  } else {
    uint32_t w[kM / 4];
    if constexpr (kM % 16 == 0) {
#pragma unroll
      for (int j = 0; j < kM / 16; ++j) {
        const uint4 v = reinterpret_cast<const uint4*>(code)[j];
        w[4 * j] = v.x;
        w[4 * j + 1] = v.y;
        w[4 * j + 2] = v.z;
        w[4 * j + 3] = v.w;
      }
    } else {
      static_assert(kM % 8 == 0, "code_sum: kM must be a multiple of 8");
#pragma unroll
      for (int j = 0; j < kM / 8; ++j) {
        const uint2 v = reinterpret_cast<const uint2*>(code)[j];
        w[2 * j] = v.x;
        w[2 * j + 1] = v.y;
      }
    }
    float s = lut_value(lut[w[0] & 0xFFu]);
#pragma unroll
    for (int m = 1; m < kM; ++m) s = add_rn(s, lut_value(lut[m * kK + ((w[m >> 2] >> (8 * (m & 3))) & 0xFFu)]));
    return s;
  }
}

// lut[m, j] from the staged sub-vectors x (the query, or its residual for L2 with residuals).
template <class LutT>
__device__ __forceinline__ void build_lut(const float* x, const float* __restrict__ codebooks, int64_t M,
                                          int64_t dsub, bool ip, bool vec4, LutT* lut) {
  for (int64_t e = threadIdx.x; e < M * kK; e += blockDim.x) {
    const float* cw = codebooks + e * dsub;
    const float* xs = x + (e / kK) * dsub;
    float s = -0.0f;  // -0 + s == s: the first term is the product itself
    if (vec4) {
      for (int64_t i = 0; i < dsub; i += 4) {
        const float4 c4 = *reinterpret_cast<const float4*>(cw + i);
        const float c[4] = {c4.x, c4.y, c4.z, c4.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (ip) {
            s = add_rn(s, mul_rn(xs[i + j], c[j]));
          } else {
            const float t = sub_rn(xs[i + j], c[j]);
            s = add_rn(s, mul_rn(t, t));
          }
        }
      }
    } else {
      for (int64_t i = 0; i < dsub; ++i) {
        if (ip) {
          s = add_rn(s, mul_rn(xs[i], cw[i]));
        } else {
          const float t = sub_rn(xs[i], cw[i]);
          s = add_rn(s, mul_rn(t, t));
        }
      }
    }
    lut[e] = to_lut<LutT>(s);
  }
}

// One block per query: scans the probed lists and writes the first k by (key, id). LutT: the
// table's entries (float, or __half for half tables: half the shared memory).
template <int kM, class LutT>
__global__ void __launch_bounds__(kThreads) search_kernel(const float* __restrict__ queries, IvfPqDeviceView index,
                                                          int64_t nprobe, const int32_t* __restrict__ probe,
                                                          int64_t pstride, const float* __restrict__ raw, int k,
                                                          int half, bool vec4, float* __restrict__ distances,
                                                          int64_t* __restrict__ labels) {
  extern __shared__ __align__(16) unsigned char search_shared[];
  const IvfPqParams& p = index.params;
  const int64_t M = kM > 0 ? kM : p.M, dim = p.dim, dsub = dim / M, nlist = p.nlist;
  const bool ip = p.metric == IvfPqMetric::InnerProduct;
  const bool per_list = !ip && p.by_residual;  // the table depends on the list
  const int warps = static_cast<int>(blockDim.x >> 5), w = static_cast<int>(threadIdx.x >> 5);
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const int64_t q = blockIdx.x;
  const size_t per_warp = 2 * static_cast<size_t>(half);
  int64_t* sid = reinterpret_cast<int64_t*>(search_shared);
  uint32_t* skey = reinterpret_cast<uint32_t*>(sid + per_warp * warps);
  LutT* lut = reinterpret_cast<LutT*>(skey + per_warp * warps);
  float* xs = reinterpret_cast<float*>(lut + M * kK);  // M * 256 entries: a multiple of 4 bytes
  PairTopK top{skey + per_warp * w, sid + per_warp * w, half, k};
  top.reset();
  const float* x = queries + q * dim;
  bool built = false;
  for (int64_t r = 0; r < nprobe; ++r) {
    const int32_t l = probe[q * pstride + r];
    const int64_t begin = index.list_offsets[l], size = index.list_offsets[l + 1] - begin;
    if (size == 0) continue;  // block-uniform
    if (per_list || !built) {
      __syncthreads();  // the previous list's scan is done with lut and xs
      const float* c = index.centroids + static_cast<int64_t>(l) * dim;
      for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) xs[i] = per_list ? sub_rn(x[i], c[i]) : x[i];
      __syncthreads();
      build_lut(xs, index.codebooks, M, dsub, ip, vec4, lut);
      __syncthreads();
      built = true;
    }
    const float d0 = ip && p.by_residual ? raw[q * nlist + l] : 0.0f;
    const uint8_t* codes = index.codes + begin * M;
    const int64_t* ids = index.ids + begin;
    for (int64_t i0 = 0; i0 < size; i0 += blockDim.x) {
      const int64_t i = i0 + threadIdx.x;
      const bool valid = i < size;
      uint32_t kb = PairTopK::kNoKey;
      if (valid) kb = key_bits(rank_key(add_rn(d0, code_sum<kM, LutT>(codes + i * M, M, lut)), ip));
      top.offer(kb, ids + i, valid);
    }
  }
  top.merge();
  __syncthreads();
  if (w != 0) return;  // no block barrier follows
  for (int o = 1; o < warps; ++o) {  // the other warps' k best, ascending: stop at the first miss
    const uint32_t* ok = skey + per_warp * o;
    const int64_t* oi = sid + per_warp * o;
    for (int j0 = 0; j0 < k; j0 += 32) {
      const int j = j0 + lane;
      const bool valid = j < k;
      if (!top.offer_pair(valid ? ok[j] : PairTopK::kNoKey, valid ? oi[j] : PairTopK::kNoId, valid)) break;
    }
  }
  top.merge();
  __syncwarp();
  for (int j = lane; j < k; j += 32) {
    const uint32_t kb = top.key[j];
    const int64_t at = q * k + j;
    if (kb == PairTopK::kNoKey) {
      distances[at] = ip ? -INFINITY : INFINITY;
      labels[at] = -1;
    } else {
      const float key = key_of_bits(kb);
      distances[at] = add_rn(ip ? -key : key, 0.0f);
      labels[at] = top.id[j];
    }
  }
}

// ---- general path (any k, any table size) ----

__global__ void coarse_keys_kernel(const float* __restrict__ raw, int64_t nlist, int64_t cells, bool ip,
                                   float* __restrict__ keys, int32_t* __restrict__ lists) {
  PCOPS_CUDA_GRID_STRIDE(t, cells) {
    keys[t] = rank_key(raw[t], ip);
    lists[t] = static_cast<int32_t>(t % nlist);
  }
}

__global__ void segment_offsets_kernel(int64_t nq, int64_t size, int64_t* __restrict__ begin,
                                       int64_t* __restrict__ end) {
  const int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (q >= nq) return;
  begin[q] = q * size;
  end[q] = (q + 1) * size;
}

__global__ void plan_kernel(int64_t nq, int64_t nprobe, int64_t bound, const int32_t* __restrict__ probe,
                            int64_t pstride, const int64_t* __restrict__ list_offsets,
                            int64_t* __restrict__ write_at, int64_t* __restrict__ seg_begin,
                            int64_t* __restrict__ seg_end) {
  const int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (q >= nq) return;
  int64_t at = q * bound;
  seg_begin[q] = at;
  for (int64_t r = 0; r < nprobe; ++r) {
    const int32_t l = probe[q * pstride + r];
    write_at[q * nprobe + r] = at;
    at += list_offsets[l + 1] - list_offsets[l];
  }
  seg_end[q] = at;
}

__global__ void scan_kernel(const float* __restrict__ queries, IvfPqDeviceView index, int64_t nprobe,
                            const int32_t* __restrict__ probe, int64_t pstride, const float* __restrict__ raw,
                            const int64_t* __restrict__ write_at, float* __restrict__ lut_global, bool half_tables,
                            float* __restrict__ cand_keys, int64_t* __restrict__ cand_ids) {
  extern __shared__ float lut_shared[];
  const IvfPqParams& p = index.params;
  const int64_t r = blockIdx.x, q = blockIdx.y;
  const int64_t nlist = p.nlist, dim = p.dim, M = p.M, dsub = dim / M;
  const bool ip = p.metric == IvfPqMetric::InnerProduct;
  const int32_t l = probe[q * pstride + r];
  const int64_t begin = index.list_offsets[l], size = index.list_offsets[l + 1] - begin;
  if (size == 0) return;
  float* lut = lut_global ? lut_global + (q * nprobe + r) * M * kK : lut_shared;
  const float* x = queries + q * dim;
  const float* c = index.centroids + static_cast<int64_t>(l) * dim;
  const bool residual = !ip && p.by_residual;
  for (int64_t e = threadIdx.x; e < M * kK; e += blockDim.x) {
    const int64_t m = e / kK;
    const float* cw = index.codebooks + e * dsub;
    const float* xs = x + m * dsub;
    const float* cs = c + m * dsub;
    float s;
    if (ip) {
      s = mul_rn(xs[0], cw[0]);
      for (int64_t i = 1; i < dsub; ++i) s = add_rn(s, mul_rn(xs[i], cw[i]));
    } else {
      float t = sub_rn(residual ? sub_rn(xs[0], cs[0]) : xs[0], cw[0]);
      s = mul_rn(t, t);
      for (int64_t i = 1; i < dsub; ++i) {
        t = sub_rn(residual ? sub_rn(xs[i], cs[i]) : xs[i], cw[i]);
        s = add_rn(s, mul_rn(t, t));
      }
    }
    lut[e] = half_tables ? __half2float(__float2half_rn(s)) : s;  // float storage on this path
  }
  __syncthreads();
  const float d0 = ip && p.by_residual ? raw[q * nlist + l] : 0.0f;
  const int64_t out = write_at[q * nprobe + r];
  for (int64_t i = threadIdx.x; i < size; i += blockDim.x) {
    const uint8_t* code = index.codes + (begin + i) * M;
    float sum = lut[code[0]];
    for (int64_t m = 1; m < M; ++m) sum = add_rn(sum, lut[m * kK + code[m]]);
    cand_keys[out + i] = rank_key(add_rn(d0, sum), ip);
    cand_ids[out + i] = index.ids[begin + i];
  }
}

__global__ void finish_kernel(int64_t nq, int64_t k, bool ip, const int64_t* __restrict__ seg_begin,
                              const int64_t* __restrict__ seg_end, const float* __restrict__ keys,
                              const int64_t* __restrict__ ids, float* __restrict__ distances,
                              int64_t* __restrict__ labels) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= nq * k) return;
  const int64_t q = t / k, j = t % k;
  const int64_t at = seg_begin[q] + j;
  if (at < seg_end[q]) {
    const float key = keys[at];
    distances[t] = add_rn(ip ? -key : key, 0.0f);
    labels[t] = ids[at];
  } else {
    distances[t] = ip ? -INFINITY : INFINITY;
    labels[t] = -1;
  }
}

template <class Key, class Value, class Begin, class End>
void stable_segmented_sort(const CudaContext& ctx, detail::Workspace& ws, const Key* kin, Key* kout, const Value* vin,
                           Value* vout, int64_t items, int64_t segments, Begin begin, End end) {
  size_t bytes = 0;
  PCOPS_CUDA_CHECK(cub::DeviceSegmentedSort::StableSortPairs(nullptr, bytes, kin, kout, vin, vout, items, segments,
                                                             begin, end, detail::stream_of(ctx)));
  void* temp = ws.bytes(bytes);
  PCOPS_CUDA_CHECK(cub::DeviceSegmentedSort::StableSortPairs(temp, bytes, kin, kout, vin, vout, items, segments,
                                                             begin, end, detail::stream_of(ctx)));
}

using SearchKernel = void (*)(const float*, IvfPqDeviceView, int64_t, const int32_t*, int64_t, const float*, int, int,
                              bool, float*, int64_t*);

// The instance for M (word-wise code reads need codes aligned to 16 bytes).
template <class LutT>
SearchKernel search_kernel_for(int64_t M, bool aligned) {
  if (aligned) {
    switch (M) {
      case 8: return search_kernel<8, LutT>;
      case 16: return search_kernel<16, LutT>;
      case 32: return search_kernel<32, LutT>;
      case 64: return search_kernel<64, LutT>;
      default: break;
    }
  }
  return search_kernel<0, LutT>;
}


// ---------------------------------------------------------------------------------------------
// Encoding (add with CUDA vectors): the CPU's coarse assignment and product quantisation.

// lists[r] = the best column of raw[r, :] by the CPU's running rule (Columns::best_of): start at
// column 0, replace on a strictly better value (smaller L2, larger inner product). So a NaN at
// column 0 keeps column 0, later NaNs never win, and ties keep the smallest column. One warp per
// row: every lane keeps the best of its columns, then (key, column) minima are combined.
__global__ void __launch_bounds__(256) assign_kernel(const float* __restrict__ raw, int64_t rows, int64_t nlist,
                                                     bool ip, int64_t* __restrict__ lists) {
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const int64_t warps = int64_t{gridDim.x} * (blockDim.x >> 5);
  for (int64_t r = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) >> 5; r < rows; r += warps) {
    const float* row = raw + r * nlist;
    const float first = row[0];
    if (first != first) {  // NaN at column 0: nothing compares better
      if (lane == 0) lists[r] = 0;
      continue;
    }
    float best = INFINITY;
    int64_t arg = INT64_MAX;
    for (int64_t l = lane; l < nlist; l += 32) {
      const float v = row[l];
      if (v != v) continue;
      const float key = ip ? -v : v;  // negation is exact
      if (key < best || arg == INT64_MAX) {
        best = key;
        arg = l;
      }
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      const float ob = __shfl_xor_sync(0xFFFFFFFFu, best, off);
      const int64_t oa = __shfl_xor_sync(0xFFFFFFFFu, arg, off);
      if (oa != INT64_MAX && (arg == INT64_MAX || ob < best || (ob == best && oa < arg))) {
        best = ob;
        arg = oa;
      }
    }
    if (lane == 0) lists[r] = arg;
  }
}

// codes[r, m] = the nearest of the 256 codewords of sub-quantizer m to the residual (or the
// vector) sub-vector m: L2 in coordinate order, the CPU's running rule. One thread per (row, m).
__global__ void __launch_bounds__(256) codes_kernel(const float* __restrict__ x, const float* __restrict__ centroids,
                                                    const float* __restrict__ codebooks,
                                                    const int64_t* __restrict__ lists, int64_t rows, int64_t dim,
                                                    int64_t M, bool residual, uint8_t* __restrict__ codes) {
  const int64_t dsub = dim / M;
  PCOPS_CUDA_GRID_STRIDE(t, rows * M) {
    const int64_t r = t / M, m = t - r * M;
    const float* xs = x + r * dim + m * dsub;
    const float* cs = centroids + lists[r] * dim + m * dsub;
    const float* cw = codebooks + m * kK * dsub;
    int best = 0;
    float bv = 0.0f;
    for (int j = 0; j < kK; ++j) {
      const float* w = cw + j * dsub;
      float d = sub_rn(residual ? sub_rn(xs[0], cs[0]) : xs[0], w[0]);
      float s = mul_rn(d, d);
      for (int64_t i = 1; i < dsub; ++i) {
        d = sub_rn(residual ? sub_rn(xs[i], cs[i]) : xs[i], w[i]);
        s = add_rn(s, mul_rn(d, d));
      }
      if (j == 0) {
        bv = s;
      } else if (s < bv) {
        bv = s;
        best = j;
      }
    }
    codes[t] = static_cast<uint8_t>(best);
  }
}

}  // namespace

void ivfpq_search(const CudaContext& ctx, const IvfPqDeviceView& index, const float* queries, int64_t nq, int64_t k,
                  int64_t nprobe, float* distances, int64_t* labels, bool half_tables) {
  const IvfPqParams& p = index.params;
  core::validate_ivfpq_params(p);
  PCOPS_CHECK(nq >= 0, Value, "nq: expected >= 0, got ", nq);
  PCOPS_CHECK(k >= 0, Value, "k: expected >= 0, got ", k);
  PCOPS_CHECK(nprobe >= 1 && nprobe <= p.nlist, Value, "nprobe: expected a value in [1, nlist = ", p.nlist,
              "], got ", nprobe);
  PCOPS_CHECK(index.list_sizes_host != nullptr, Value, "list_sizes_host: expected the host list sizes");
  if (nq == 0 || k == 0) return;
  constexpr int64_t kMaxGridY = 65535;  // queries per pass; larger batches run in passes
  if (nq > kMaxGridY) {
    for (int64_t b = 0; b < nq; b += kMaxGridY) {
      const int64_t n = std::min(kMaxGridY, nq - b);
      ivfpq_search(ctx, index, queries + b * p.dim, n, k, nprobe, distances + b * k, labels + b * k, half_tables);
    }
    return;
  }
  const bool ip = p.metric == IvfPqMetric::InnerProduct;
  const int64_t cells = core::checked_mul(nq, p.nlist, "nq * nlist");
  detail::Workspace ws(ctx);

  // 1. Coarse distances.
  float* raw = ws.alloc<float>(cells);
  launch_coarse(ctx, ip, queries, index.centroids, nq, p.nlist, p.dim, raw);

  // 2. The probed lists of each query: probe[q * pstride + r], r < nprobe.
  const int32_t* probe = nullptr;
  int64_t pstride = nprobe;
  const unsigned qblocks = static_cast<unsigned>(detail::ceil_div(nq, kThreads));
  if (nprobe <= kMaxSelect) {
    int32_t* selected = ws.alloc<int32_t>(core::checked_mul(nq, nprobe, "nq * nprobe"));
    const int half = WarpTopK::half_for(nprobe);
    detail::launch(ctx, select_kernel, dim3(static_cast<unsigned>(detail::ceil_div(nq, kSelectWarps))),
                   dim3(kSelectWarps * 32), static_cast<size_t>(kSelectWarps) * 2 * half * sizeof(uint64_t), raw, nq,
                   p.nlist, static_cast<int>(nprobe), ip, selected);
    probe = selected;
  } else {
    float* keys = ws.alloc<float>(cells);
    float* keys_sorted = ws.alloc<float>(cells);
    int32_t* lists = ws.alloc<int32_t>(cells);
    int32_t* order = ws.alloc<int32_t>(cells);
    int64_t* coarse_begin = ws.alloc<int64_t>(nq);
    int64_t* coarse_end = ws.alloc<int64_t>(nq);
    detail::launch(ctx, coarse_keys_kernel, dim3(detail::grid_blocks(cells, kThreads)), dim3(kThreads), 0, raw,
                   p.nlist, cells, ip, keys, lists);
    detail::launch(ctx, segment_offsets_kernel, dim3(qblocks), dim3(kThreads), 0, nq, p.nlist, coarse_begin,
                   coarse_end);
    stable_segmented_sort(ctx, ws, keys, keys_sorted, lists, order, cells, nq, coarse_begin, coarse_end);
    probe = order;
    pstride = p.nlist;
  }

  // 3. Fused scan and top-k.
  const cudaDeviceProp& prop = detail::device_properties();
  if (k <= kMaxFusedK) {
    const int half = PairTopK::half_for(k);
    const int warps = half <= 256 ? 8 : (half <= 512 ? 4 : 2);  // top-k buffers <= 48 KiB
    const size_t shared = search_shared_bytes(warps, half, p.M, p.dim, half_tables ? sizeof(__half) : sizeof(float));
    if (shared <= prop.sharedMemPerBlockOptin) {
      const bool codes_aligned = reinterpret_cast<uintptr_t>(index.codes) % 16 == 0;
      const bool vec4 = (p.dim / p.M) % 4 == 0 && reinterpret_cast<uintptr_t>(index.codebooks) % 16 == 0;
      const SearchKernel kernel = half_tables ? search_kernel_for<__half>(p.M, codes_aligned)
                                              : search_kernel_for<float>(p.M, codes_aligned);
      if (shared > 48 * 1024)
        PCOPS_CUDA_CHECK(
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared)));
      detail::launch(ctx, kernel, dim3(static_cast<unsigned>(nq)), dim3(warps * 32), shared, queries, index, nprobe,
                     probe, pstride, raw, static_cast<int>(k), half, vec4, distances, labels);
      return;
    }
  }

  // 4. General path: every candidate, sorted.
  // Candidate segment length: the nprobe largest lists (host sizes; no device round trip).
  std::vector<int64_t> sizes(index.list_sizes_host, index.list_sizes_host + p.nlist);
  std::partial_sort(sizes.begin(), sizes.begin() + nprobe, sizes.end(), std::greater<int64_t>());
  int64_t bound = 0;
  for (int64_t r = 0; r < nprobe; ++r) bound += sizes[static_cast<size_t>(r)];
  const int64_t items = core::checked_mul(nq, std::max<int64_t>(bound, 1), "nq * candidates");
  int64_t* write_at = ws.alloc<int64_t>(core::checked_mul(nq, nprobe, "nq * nprobe"));
  int64_t* seg_begin = ws.alloc<int64_t>(nq);
  int64_t* seg_end = ws.alloc<int64_t>(nq);
  detail::launch(ctx, plan_kernel, dim3(qblocks), dim3(kThreads), 0, nq, nprobe, bound, probe, pstride,
                 index.list_offsets, write_at, seg_begin, seg_end);

  float* cand_keys = ws.alloc<float>(items);
  int64_t* cand_ids = ws.alloc<int64_t>(items);
  const size_t lut_bytes = static_cast<size_t>(p.M) * kK * sizeof(float);
  float* lut_global = nullptr;
  size_t shared = lut_bytes;
  if (lut_bytes > prop.sharedMemPerBlockOptin) {
    lut_global = ws.alloc<float>(core::checked_mul(core::checked_mul(nq, nprobe, "nq * nprobe"), p.M * kK, "LUT size"));
    shared = 0;
  } else if (lut_bytes > 48 * 1024) {
    PCOPS_CUDA_CHECK(cudaFuncSetAttribute(scan_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(lut_bytes)));
  }
  detail::launch(ctx, scan_kernel, dim3(static_cast<unsigned>(nprobe), static_cast<unsigned>(nq)), dim3(kThreads),
                 shared, queries, index, nprobe, probe, pstride, raw, write_at, lut_global, half_tables, cand_keys,
                 cand_ids);

  // (key, id) order: stable by id, then stable by key.
  float* k2 = ws.alloc<float>(items);
  int64_t* i2 = ws.alloc<int64_t>(items);
  stable_segmented_sort(ctx, ws, cand_ids, i2, cand_keys, k2, items, nq, seg_begin, seg_end);
  stable_segmented_sort(ctx, ws, k2, cand_keys, i2, cand_ids, items, nq, seg_begin, seg_end);
  detail::launch(ctx, finish_kernel, dim3(static_cast<unsigned>(detail::ceil_div(nq * k, kThreads))), dim3(kThreads), 0,
                 nq, k, ip, seg_begin, seg_end, cand_keys, cand_ids, distances, labels);
}


void ivfpq_assign(const CudaContext& ctx, const float* data, int64_t n, int64_t d, const float* centroids, int64_t k,
                  bool ip, int64_t* assign) {
  PCOPS_CHECK(n >= 0 && d >= 1 && k >= 1, Value, "ivfpq_assign: expected n >= 0, d >= 1 and k >= 1, got ", n, ", ",
              d, ", ", k);
  if (n == 0) return;
  // Rows per pass: the distances of a pass take at most 2^26 floats (256 MiB).
  const int64_t chunk = std::clamp<int64_t>((int64_t{1} << 26) / k, 1, 65535 * int64_t{kTile});
  detail::Workspace ws(ctx);
  float* raw = ws.alloc<float>(std::min(chunk, n) * k);
  for (int64_t r0 = 0; r0 < n; r0 += chunk) {
    const int64_t rows = std::min(chunk, n - r0);
    const float* xr = data + r0 * d;
    launch_coarse(ctx, ip, xr, centroids, rows, k, d, raw);
    detail::launch(ctx, assign_kernel, dim3(detail::grid_blocks(rows * 32, 256)), dim3(256), 0, raw, rows, k, ip,
                   assign + r0);
  }
}

void ivfpq_encode(const CudaContext& ctx, const IvfPqParams& p, const float* centroids, const float* codebooks,
                  const float* x, int64_t n, int64_t* lists, uint8_t* codes) {
  core::validate_ivfpq_params(p);
  PCOPS_CHECK(n >= 0, Value, "n: expected >= 0, got ", n);
  if (n == 0) return;
  ivfpq_assign(ctx, x, n, p.dim, centroids, p.nlist, p.metric == IvfPqMetric::InnerProduct, lists);
  detail::launch(ctx, codes_kernel, dim3(detail::grid_blocks(n * p.M, 256)), dim3(256), 0, x, centroids, codebooks,
                 lists, n, p.dim, p.M, p.by_residual, codes);
}

}  // namespace pcops::cuda
