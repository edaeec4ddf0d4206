// IVF-PQ search, CUDA backend (contract: include/pcops/ivfpq.hpp; bitwise equal to the CPU).
//
// Pipeline, all on ctx.stream, no host synchronisation:
// 1. coarse_kernel: one thread per (query, list) computes the coarse distance (contract order).
// 2. Stable segmented sort of the lists of each query by key (ties keep the smaller list).
// 3. plan_kernel: one thread per query sums the sizes of its first nprobe lists and the write
//    offset of each probed list inside the query's candidate segment. Segments are laid out at
//    query * bound, bound = the sum of the nprobe largest list sizes (known on the host).
// 4. scan_kernel: one block per (probed list, query) builds the list's look-up table in shared
//    memory (global workspace when M * 256 floats exceed the shared-memory limit) and writes the
//    (key, id) of every code of the list.
// 5. Two stable segmented sorts (by id, then by key) give the exact (key, id) order of every
//    candidate, for any k and nprobe; finish_kernel writes the first k or the padding.
#include <cub/device/device_segmented_sort.cuh>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "common/distance.hpp"
#include "core/validate.hpp"
#include "cuda/common.cuh"
#include "pcops/error.hpp"
#include "pcops/ivfpq.hpp"

namespace pcops::cuda {
namespace {

using common::add_rn;
using common::mul_rn;
using common::sub_rn;

constexpr int kThreads = 256;
constexpr int kK = 256;

// Ranking key (smaller is better): IP negated, NaN as +inf, zero canonical (+0) so the radix
// sort orders exactly as the CPU's comparisons.
__device__ __forceinline__ float rank_key(float v, bool ip) {
  float k = ip ? -v : v;
  if (k != k) k = INFINITY;
  return k == 0.0f ? 0.0f : k;
}

__global__ void coarse_kernel(const float* __restrict__ queries, const float* __restrict__ centroids, int64_t nlist,
                              int64_t dim, bool ip, float* __restrict__ raw, float* __restrict__ keys,
                              int32_t* __restrict__ lists) {
  const int64_t l = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t q = blockIdx.y;
  if (l >= nlist) return;
  const float* x = queries + q * dim;
  const float* c = centroids + l * dim;
  float s;
  if (ip) {
    s = mul_rn(x[0], c[0]);
    for (int64_t i = 1; i < dim; ++i) s = add_rn(s, mul_rn(x[i], c[i]));
  } else {
    s = common::squared_distance(x, 1, c, 1, dim);
  }
  raw[q * nlist + l] = s;
  keys[q * nlist + l] = rank_key(s, ip);
  lists[q * nlist + l] = static_cast<int32_t>(l);
}

__global__ void segment_offsets_kernel(int64_t nq, int64_t size, int64_t* __restrict__ begin,
                                       int64_t* __restrict__ end) {
  const int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (q >= nq) return;
  begin[q] = q * size;
  end[q] = (q + 1) * size;
}

__global__ void plan_kernel(int64_t nq, int64_t nlist, int64_t nprobe, int64_t bound,
                            const int32_t* __restrict__ order, const int64_t* __restrict__ list_offsets,
                            int64_t* __restrict__ write_at, int64_t* __restrict__ seg_begin,
                            int64_t* __restrict__ seg_end) {
  const int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (q >= nq) return;
  int64_t at = q * bound;
  seg_begin[q] = at;
  for (int64_t r = 0; r < nprobe; ++r) {
    const int32_t l = order[q * nlist + r];
    write_at[q * nprobe + r] = at;
    at += list_offsets[l + 1] - list_offsets[l];
  }
  seg_end[q] = at;
}

__global__ void scan_kernel(const float* __restrict__ queries, IvfPqDeviceView index, int64_t nprobe,
                            const int32_t* __restrict__ order, const float* __restrict__ raw,
                            const int64_t* __restrict__ write_at, float* __restrict__ lut_global,
                            float* __restrict__ cand_keys, int64_t* __restrict__ cand_ids) {
  extern __shared__ float lut_shared[];
  const IvfPqParams& p = index.params;
  const int64_t r = blockIdx.x, q = blockIdx.y;
  const int64_t nlist = p.nlist, dim = p.dim, M = p.M, dsub = dim / M;
  const bool ip = p.metric == IvfPqMetric::InnerProduct;
  const int32_t l = order[q * nlist + r];
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
    lut[e] = s;
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

}  // namespace

void ivfpq_search(const CudaContext& ctx, const IvfPqDeviceView& index, const float* queries, int64_t nq, int64_t k,
                  int64_t nprobe, float* distances, int64_t* labels) {
  const IvfPqParams& p = index.params;
  core::validate_ivfpq_params(p);
  PCOPS_CHECK(nq >= 0, Value, "nq: expected >= 0, got ", nq);
  PCOPS_CHECK(k >= 0, Value, "k: expected >= 0, got ", k);
  PCOPS_CHECK(nprobe >= 1 && nprobe <= p.nlist, Value, "nprobe: expected a value in [1, nlist = ", p.nlist,
              "], got ", nprobe);
  PCOPS_CHECK(index.list_sizes_host != nullptr, Value, "list_sizes_host: expected the host list sizes");
  if (nq == 0 || k == 0) return;
  constexpr int64_t kMaxGridY = 65535;  // queries per pass (grid y); larger batches run in passes
  if (nq > kMaxGridY) {
    for (int64_t b = 0; b < nq; b += kMaxGridY) {
      const int64_t n = std::min(kMaxGridY, nq - b);
      ivfpq_search(ctx, index, queries + b * p.dim, n, k, nprobe, distances + b * k, labels + b * k);
    }
    return;
  }
  const bool ip = p.metric == IvfPqMetric::InnerProduct;
  // Candidate segment length: the nprobe largest lists (host sizes; no device round trip).
  std::vector<int64_t> sizes(index.list_sizes_host, index.list_sizes_host + p.nlist);
  std::partial_sort(sizes.begin(), sizes.begin() + nprobe, sizes.end(), std::greater<int64_t>());
  int64_t bound = 0;
  for (int64_t r = 0; r < nprobe; ++r) bound += sizes[static_cast<size_t>(r)];
  const int64_t items = core::checked_mul(nq, std::max<int64_t>(bound, 1), "nq * candidates");
  const int64_t cells = core::checked_mul(nq, p.nlist, "nq * nlist");

  detail::Workspace ws(ctx);
  float* raw = ws.alloc<float>(cells);
  float* keys = ws.alloc<float>(cells);
  float* keys_sorted = ws.alloc<float>(cells);
  int32_t* lists = ws.alloc<int32_t>(cells);
  int32_t* order = ws.alloc<int32_t>(cells);
  int64_t* coarse_begin = ws.alloc<int64_t>(nq);
  int64_t* coarse_end = ws.alloc<int64_t>(nq);
  detail::launch(ctx, coarse_kernel, dim3(static_cast<unsigned>(detail::ceil_div(p.nlist, kThreads)), static_cast<unsigned>(nq)),
                 dim3(kThreads), 0, queries, index.centroids, p.nlist, p.dim, ip, raw, keys, lists);
  const unsigned qblocks = static_cast<unsigned>(detail::ceil_div(nq, kThreads));
  detail::launch(ctx, segment_offsets_kernel, dim3(qblocks), dim3(kThreads), 0, nq, p.nlist, coarse_begin, coarse_end);
  stable_segmented_sort(ctx, ws, keys, keys_sorted, lists, order, cells, nq, coarse_begin, coarse_end);

  int64_t* write_at = ws.alloc<int64_t>(core::checked_mul(nq, nprobe, "nq * nprobe"));
  int64_t* seg_begin = ws.alloc<int64_t>(nq);
  int64_t* seg_end = ws.alloc<int64_t>(nq);
  detail::launch(ctx, plan_kernel, dim3(qblocks), dim3(kThreads), 0, nq, p.nlist, nprobe, bound, order,
                 index.list_offsets, write_at, seg_begin, seg_end);

  float* cand_keys = ws.alloc<float>(items);
  int64_t* cand_ids = ws.alloc<int64_t>(items);
  const size_t lut_bytes = static_cast<size_t>(p.M) * kK * sizeof(float);
  const cudaDeviceProp& prop = detail::device_properties();
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
                 shared, queries, index, nprobe, order, raw, write_at, lut_global, cand_keys, cand_ids);

  // (key, id) order: stable by id, then stable by key.
  float* k2 = ws.alloc<float>(items);
  int64_t* i2 = ws.alloc<int64_t>(items);
  stable_segmented_sort(ctx, ws, cand_ids, i2, cand_keys, k2, items, nq, seg_begin, seg_end);
  stable_segmented_sort(ctx, ws, k2, cand_keys, i2, cand_ids, items, nq, seg_begin, seg_end);
  detail::launch(ctx, finish_kernel, dim3(static_cast<unsigned>(detail::ceil_div(nq * k, kThreads))), dim3(kThreads), 0,
                 nq, k, ip, seg_begin, seg_end, cand_keys, cand_ids, distances, labels);
}

}  // namespace pcops::cuda
