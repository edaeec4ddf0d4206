// CUDA nearest_neighbor (chamfer_distance's search) and the deterministic helpers of its autograd,
// bitwise equal to the CPU backend.
//
// Search paths (chosen on the host):
// - float32, norm 2, D = 3: cuda::knn with k = 1 (its GPU uniform grid for clouds of >= 4096
//   points, one warp per query otherwise); the same (key, index) rule gives the same index.
// - everything else (float64, norm 1, any D): brute force, one thread per query with a running
//   best (key, index) in registers; y streams through shared memory in tiles of 256 points (D <= 4)
//   or is read through L1 with warp-uniform addresses (larger D). When there are too few queries
//   to fill the GPU, y is cut into up to 64 contiguous ranges (grid.y), each range keeps its own
//   best, and a second kernel takes the smallest (key, index) over the ranges (a total order, so
//   the split never changes the result).
//
// ordered_sum: the written order of the contract (groups of 32 summed left to right, level by
// level); one block reduces an aligned chunk of 32^3 values through three levels, passes repeat
// on the chunk sums. gather_rows_backward: a stable radix sort of the (target row, source) pairs,
// then one thread per output element sums its sorted segment in ascending source order. No float
// atomics anywhere: run-to-run deterministic.
#include "pcops/nearest_neighbor.hpp"

#include <cub/cub.cuh>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/nearest_neighbor.hpp"
#include "cuda/common.cuh"
#include "pcops/error.hpp"
#include "pcops/knn.hpp"

namespace pcops::cuda {
namespace {

namespace nn = common::nn;

struct NearestPolicy {
  static constexpr int kThreads = 256;               // queries per block = y points per tile
  static constexpr int kMaxTiledDim = 4;             // larger D: y read through L1
  static constexpr int kMaxSplits = 64;              // y ranges per query (grid.y)
  static constexpr int64_t kMinSplitPoints = 1024;   // smallest y range worth a split
  static constexpr int64_t kResidentThreadsPerSm = 2048;
  static constexpr int64_t kMaxBlocksX = int64_t{1} << 20;
};

struct SumPolicy {
  static constexpr int kThreads = 1024;  // = kSumGroup^2: one thread per level-1 group of a chunk
  static constexpr int64_t kChunk = nn::kSumGroup * nn::kSumGroup * nn::kSumGroup;
  static constexpr int64_t kMaxBlocks = int64_t{1} << 20;
};

struct ElementwisePolicy {
  static constexpr int kThreads = 256;
  static constexpr int64_t kMaxBlocks = int64_t{1} << 20;
};

static_assert(SumPolicy::kThreads == nn::kSumGroup * nn::kSumGroup, "one thread per level-1 group");

__host__ __device__ __forceinline__ int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t blocks_for(int64_t items, int threads, int64_t cap) {
  return std::max<int64_t>(1, std::min<int64_t>(detail::ceil_div(items, threads), cap));
}

template <class T>
struct Candidate {
  T key;        // +inf when nothing finite was seen
  int64_t idx;  // -1: the range was empty
};

// ---------------------------------------------------------------------------------------------
// Brute-force search. Block = 256 consecutive queries of one cloud (grid-stride over all tiles of
// all clouds) x one y range (blockIdx.y); one thread per query, y ascending within the range.
template <class V, int Norm, int Dim>
__global__ void __launch_bounds__(NearestPolicy::kThreads)
    nearest_kernel(V x, V y, const int64_t* xlen, const int64_t* ylen, int64_t tiles_per_cloud,
                   int64_t* out, Candidate<typename V::value_type>* partial) {
  using T = typename V::value_type;
  constexpr int kTile = NearestPolicy::kThreads;
  constexpr bool kTiled = Dim > 0;
  __shared__ T tile[kTiled ? Dim : 1][kTile];
  const int64_t D = kTiled ? Dim : x.dim;
  const int64_t P1 = x.count, total_tiles = x.batch * tiles_per_cloud;
  const int splits = static_cast<int>(gridDim.y), split = static_cast<int>(blockIdx.y);
  for (int64_t t = blockIdx.x; t < total_tiles; t += gridDim.x) {
    const int64_t b = t / tiles_per_cloud;
    const int64_t m0 = (t - b * tiles_per_cloud) * kTile, m = m0 + threadIdx.x;
    const int64_t mq = xlen[b], n = ylen[b];
    if (m0 >= mq || n == 0) {  // block-uniform: nothing to search in this tile
      if (splits == 1 && m < P1) out[b * P1 + m] = -1;
      continue;
    }
    const bool active = m < mq;
    const T* qp = x.data + b * x.stride_batch + (active ? m : m0) * x.stride_point;
    T q[kTiled ? Dim : 1];
    if constexpr (kTiled) {
#pragma unroll
      for (int d = 0; d < Dim; ++d) q[d] = qp[d * x.stride_dim];
    }
    const int64_t chunk = ceil_div(n, splits);
    const int64_t j_begin = min(n, split * chunk), j_end = min(n, j_begin + chunk);
    // Strict `s < best` over ascending j keeps the lowest index on ties; NaN never compares less,
    // so it ranks as +inf, and a range whose keys are all +inf keeps its first index.
    T best = static_cast<T>(INFINITY);
    int64_t arg = j_begin < j_end ? j_begin : -1;
    const T* yb = y.data + b * y.stride_batch;
    for (int64_t jt = j_begin; jt < j_end; jt += kTile) {
      const int len = static_cast<int>(min(static_cast<int64_t>(kTile), j_end - jt));
      if constexpr (kTiled) {
        __syncthreads();  // the previous tile has been read by every thread
        for (int e = threadIdx.x; e < len * Dim; e += kTile) {
          const int jj = e / Dim, d = e - jj * Dim;
          tile[d][jj] = yb[(jt + jj) * y.stride_point + d * y.stride_dim];
        }
        __syncthreads();
        if (active) {
          for (int jj = 0; jj < len; ++jj) {
            T s = nn::term<Norm>(nn::sub(q[0], tile[0][jj]));
#pragma unroll
            for (int d = 1; d < Dim; ++d) s = nn::add(s, nn::term<Norm>(nn::sub(q[d], tile[d][jj])));
            if (s < best) {
              best = s;
              arg = jt + jj;
            }
          }
        }
      } else if (active) {
        for (int jj = 0; jj < len; ++jj) {
          const T* yp = yb + (jt + jj) * y.stride_point;  // the same address in every lane
          T s = nn::term<Norm>(nn::sub(qp[0], yp[0]));
          for (int64_t d = 1; d < D; ++d)
            s = nn::add(s, nn::term<Norm>(nn::sub(qp[d * x.stride_dim], yp[d * y.stride_dim])));
          if (s < best) {
            best = s;
            arg = jt + jj;
          }
        }
      }
    }
    if (splits == 1) {
      if (m < P1) out[b * P1 + m] = active ? arg : -1;
    } else if (active) {
      partial[static_cast<int64_t>(split) * x.batch * P1 + b * P1 + m] = Candidate<T>{best, arg};
    }
  }
}

// The smallest (key, index) over the y ranges of each query; -1 for padding rows and empty clouds.
// One thread per query.
template <class T>
__global__ void combine_kernel(const Candidate<T>* partial, const int64_t* xlen, const int64_t* ylen,
                               int64_t B, int64_t P1, int splits, int64_t* out) {
  const int64_t total = B * P1;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = i / P1, m = i - b * P1;
    if (m >= xlen[b] || ylen[b] == 0) {
      out[i] = -1;
      continue;
    }
    T best = static_cast<T>(INFINITY);
    int64_t arg = -1;
    for (int s = 0; s < splits; ++s) {  // ranges ascending: a later equal key has a larger index
      const Candidate<T> c = partial[s * total + i];
      if (c.idx >= 0 && (arg < 0 || c.key < best)) {
        best = c.key;
        arg = c.idx;
      }
    }
    out[i] = arg;
  }
}

template <class V, int Norm>
void launch_search(const CudaContext& ctx, const V& x, const V& y, const int64_t* d_xlen,
                   const int64_t* d_ylen, int64_t tiles_per_cloud, dim3 grid, int64_t* idx,
                   Candidate<typename V::value_type>* partial) {
  const dim3 block(NearestPolicy::kThreads);
  switch (x.dim) {
    case 1: detail::launch(ctx, nearest_kernel<V, Norm, 1>, grid, block, 0, x, y, d_xlen, d_ylen, tiles_per_cloud, idx, partial); break;
    case 2: detail::launch(ctx, nearest_kernel<V, Norm, 2>, grid, block, 0, x, y, d_xlen, d_ylen, tiles_per_cloud, idx, partial); break;
    case 3: detail::launch(ctx, nearest_kernel<V, Norm, 3>, grid, block, 0, x, y, d_xlen, d_ylen, tiles_per_cloud, idx, partial); break;
    case 4: detail::launch(ctx, nearest_kernel<V, Norm, 4>, grid, block, 0, x, y, d_xlen, d_ylen, tiles_per_cloud, idx, partial); break;
    default: detail::launch(ctx, nearest_kernel<V, Norm, 0>, grid, block, 0, x, y, d_xlen, d_ylen, tiles_per_cloud, idx, partial);
  }
  static_assert(NearestPolicy::kMaxTiledDim == 4, "the switch above instantiates D = 1..4");
}

template <class V>
void search(const CudaContext& ctx, const V& x, const V& y, const LengthsView& x_lengths,
            const LengthsView& y_lengths, int64_t norm, int64_t* idx) {
  using T = typename V::value_type;
  const int64_t B = x.batch, P1 = x.count, P2 = y.count;
  detail::Workspace ws(ctx);
  const int64_t* d_xlen = detail::upload_lengths(ctx, ws, x_lengths, B, P1);
  const int64_t* d_ylen = detail::upload_lengths(ctx, ws, y_lengths, B, P2);
  int64_t queries = 0, max_n = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = y_lengths.get(b, P2);
    if (n > 0) queries += x_lengths.get(b, P1);
    max_n = std::max(max_n, n);
  }
  // Few queries: split y so that about two waves of threads are resident.
  const int64_t target = 2 * NearestPolicy::kResidentThreadsPerSm * detail::device_properties().multiProcessorCount;
  int64_t splits = 1;
  if (queries > 0 && queries < target) {
    splits = std::min<int64_t>({NearestPolicy::kMaxSplits, detail::ceil_div(target, queries),
                                std::max<int64_t>(1, max_n / NearestPolicy::kMinSplitPoints)});
  }
  const int64_t tiles_per_cloud = detail::ceil_div(P1, NearestPolicy::kThreads);
  const dim3 grid(static_cast<unsigned>(std::min(B * tiles_per_cloud, NearestPolicy::kMaxBlocksX)),
                  static_cast<unsigned>(splits));
  Candidate<T>* partial = splits > 1 ? ws.alloc<Candidate<T>>(splits * B * P1) : nullptr;
  if (norm == 1) launch_search<V, 1>(ctx, x, y, d_xlen, d_ylen, tiles_per_cloud, grid, idx, partial);
  else launch_search<V, 2>(ctx, x, y, d_xlen, d_ylen, tiles_per_cloud, grid, idx, partial);
  if (splits > 1) {
    detail::launch(ctx, combine_kernel<T>,
                   dim3(static_cast<unsigned>(blocks_for(B * P1, ElementwisePolicy::kThreads, ElementwisePolicy::kMaxBlocks))),
                   dim3(ElementwisePolicy::kThreads), 0, partial, d_xlen, d_ylen, B, P1, static_cast<int>(splits), idx);
  }
}

// ---------------------------------------------------------------------------------------------
// ordered_sum. One block per aligned chunk of kChunk values of one row (grid-stride): thread t
// sums level-1 group t, the first warp sums the level-2 groups, thread 0 the level-3 group.
template <class T>
__global__ void __launch_bounds__(SumPolicy::kThreads)
    ordered_sum_kernel(const T* in, int64_t rows, int64_t length, int64_t chunks, T* out) {
  constexpr int64_t G = nn::kSumGroup;
  __shared__ T level1[SumPolicy::kThreads];
  __shared__ T level2[G];
  const int tid = static_cast<int>(threadIdx.x);
  for (int64_t w = blockIdx.x; w < rows * chunks; w += gridDim.x) {
    const int64_t r = w / chunks, c = w - r * chunks;
    const T* v = in + r * length + c * SumPolicy::kChunk;
    const int64_t clen = min(SumPolicy::kChunk, length - c * SumPolicy::kChunk);
    const int64_t n1 = ceil_div(clen, G), n2 = ceil_div(n1, G);
    __syncthreads();  // the previous chunk's shared values have been consumed
    if (tid < n1) {
      const T* g = v + tid * G;
      const int64_t len = min(G, clen - tid * G);
      T s = g[0];
      if (len == G) {
#pragma unroll
        for (int i = 1; i < G; ++i) s = nn::add(s, g[i]);
      } else {
        for (int64_t i = 1; i < len; ++i) s = nn::add(s, g[i]);
      }
      level1[tid] = s;
    }
    __syncthreads();
    if (tid < n2) {
      const T* g = level1 + tid * G;
      const int64_t len = min(G, n1 - tid * G);
      T s = g[0];
      for (int64_t i = 1; i < len; ++i) s = nn::add(s, g[i]);
      level2[tid] = s;
    }
    __syncthreads();
    if (tid == 0) {
      T s = level2[0];
      for (int64_t i = 1; i < n2; ++i) s = nn::add(s, level2[i]);
      out[w] = s;
    }
  }
}

template <class T>
void sum_rows(const CudaContext& ctx, const T* values, int64_t rows, int64_t length, T* out) {
  core::validate_ordered_sum(values, rows, length);
  if (rows == 0) return;
  if (length == 0) {
    PCOPS_CUDA_CHECK(cudaMemsetAsync(out, 0, static_cast<size_t>(rows) * sizeof(T), detail::stream_of(ctx)));
    return;
  }
  detail::Workspace ws(ctx);
  const T* cur = values;
  int64_t len = length;
  for (;;) {  // each pass computes three levels; chunks are aligned, so pass results are level nodes
    const int64_t chunks = detail::ceil_div(len, SumPolicy::kChunk);
    T* dst = chunks == 1 ? out : ws.alloc<T>(rows * chunks);
    detail::launch(ctx, ordered_sum_kernel<T>, dim3(static_cast<unsigned>(std::min(rows * chunks, SumPolicy::kMaxBlocks))),
                   dim3(SumPolicy::kThreads), 0, cur, rows, len, chunks, dst);
    if (chunks == 1) break;
    cur = dst;
    len = chunks;
  }
}

// ---------------------------------------------------------------------------------------------
// gather_rows_backward: sort key = target row b * count + j (padding -1, and any index outside
// [0, count), which is never dereferenced: the largest key), value = flattened source position; the
// sort is stable, so each segment lists its sources ascending.

// One thread per source position.
__global__ void scatter_keys_kernel(const int64_t* idx, int64_t n, int64_t num_idx, int64_t count,
                                    uint64_t padding_key, uint64_t* keys, int64_t* positions) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t j = idx[i];
    keys[i] = j >= 0 && j < count ? static_cast<uint64_t>((i / num_idx) * count + j) : padding_key;
    positions[i] = i;
  }
}

// starts[r] = the first sorted position whose key is >= r (a lower bound per target row, so no
// thread walks a long gap). One thread per target row.
__global__ void segment_starts_kernel(const uint64_t* keys, int64_t n, int64_t rows, int64_t* starts) {
  for (int64_t r = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; r <= rows; r += int64_t{gridDim.x} * blockDim.x) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (keys[mid] < static_cast<uint64_t>(r)) lo = mid + 1;
      else hi = mid;
    }
    starts[r] = lo;
  }
}

// out[r, u] = +0 + the segment's grad[source, u] in ascending source order. One thread per output
// element.
template <class T>
__global__ void segment_sum_kernel(const T* grad, const int64_t* positions, const int64_t* starts, int64_t rows,
                                   int64_t width, T* out) {
  const int64_t total = rows * width;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = e / width, u = e - r * width;
    T s = static_cast<T>(0);
    for (int64_t t = starts[r], t1 = starts[r + 1]; t < t1; ++t) s = nn::add(s, grad[positions[t] * width + u]);
    out[e] = s;
  }
}

template <class T>
void scatter_rows(const CudaContext& ctx, const T* grad, const int64_t* idx, int64_t batch, int64_t num_idx,
                  int64_t width, int64_t count, T* out) {
  core::validate_gather_rows_backward(grad, idx, batch, num_idx, width, count);
  const int64_t rows = batch * count, n = batch * num_idx;
  if (rows * width == 0) return;
  const cudaStream_t stream = detail::stream_of(ctx);
  if (n == 0 || width == 0) {
    PCOPS_CUDA_CHECK(cudaMemsetAsync(out, 0, static_cast<size_t>(rows * width) * sizeof(T), stream));
    return;
  }
  detail::Workspace ws(ctx);
  uint64_t* keys = ws.alloc<uint64_t>(n);
  uint64_t* keys_sorted = ws.alloc<uint64_t>(n);
  int64_t* pos = ws.alloc<int64_t>(n);
  int64_t* pos_sorted = ws.alloc<int64_t>(n);
  int64_t* starts = ws.alloc<int64_t>(rows + 1);
  const int E = ElementwisePolicy::kThreads;
  const int64_t cap = ElementwisePolicy::kMaxBlocks;
  detail::launch(ctx, scatter_keys_kernel, dim3(static_cast<unsigned>(blocks_for(n, E, cap))), dim3(E), 0, idx, n,
                 num_idx, count, static_cast<uint64_t>(rows), keys, pos);
  int end_bit = 1;  // keys lie in [0, rows]
  while (end_bit < 64 && (uint64_t{1} << end_bit) <= static_cast<uint64_t>(rows)) ++end_bit;
  size_t temp_bytes = 0;
  PCOPS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys, keys_sorted, pos, pos_sorted, n, 0,
                                                   end_bit, stream));
  void* temp = ws.bytes(temp_bytes);
  PCOPS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys, keys_sorted, pos, pos_sorted, n, 0,
                                                   end_bit, stream));
  detail::launch(ctx, segment_starts_kernel, dim3(static_cast<unsigned>(blocks_for(rows + 1, E, cap))), dim3(E), 0,
                 keys_sorted, n, rows, starts);
  detail::launch(ctx, segment_sum_kernel<T>, dim3(static_cast<unsigned>(blocks_for(rows * width, E, cap))), dim3(E),
                 0, grad, pos_sorted, starts, rows, width, out);
}

}  // namespace

void nearest_neighbor(const CudaContext& ctx, PointsView x, PointsView y, LengthsView x_lengths,
                      LengthsView y_lengths, const NearestNeighborParams& params, int64_t* idx) {
  core::validate_nearest_neighbor(x, y, x_lengths, y_lengths, params);
  const int64_t B = x.batch, P1 = x.count;
  if (B * P1 == 0) return;
  if (params.norm == 2 && x.dim == 3 && y.count > 0 && y.count <= int64_t{0xFFFFFFFF}) {
    detail::Workspace ws(ctx);
    float* dist = ws.alloc<float>(B * P1);
    knn(ctx, x, y, x_lengths, y_lengths, KnnParams{1}, dist, idx);
    return;
  }
  search(ctx, x, y, x_lengths, y_lengths, params.norm, idx);
}

void nearest_neighbor(const CudaContext& ctx, PointsView64 x, PointsView64 y, LengthsView x_lengths,
                      LengthsView y_lengths, const NearestNeighborParams& params, int64_t* idx) {
  core::validate_nearest_neighbor(x, y, x_lengths, y_lengths, params);
  if (x.batch * x.count == 0) return;
  search(ctx, x, y, x_lengths, y_lengths, params.norm, idx);
}

// ordered_norm: one thread per row (rows are short: the channels of a normal).
template <class T>
__global__ void __launch_bounds__(256) ordered_norm_kernel(const T* values, int64_t rows, int64_t length, T* out) {
  for (int64_t r = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; r < rows; r += int64_t{gridDim.x} * blockDim.x)
    out[r] = nn::ordered_norm(values + r * length, length);
}

template <class T>
void norm_rows(const CudaContext& ctx, const T* values, int64_t rows, int64_t length, T* out) {
  core::validate_ordered_sum(values, rows, length);
  if (rows == 0) return;
  const int64_t blocks = std::min<int64_t>(detail::ceil_div(rows, 256), int64_t{1} << 20);
  detail::launch(ctx, ordered_norm_kernel<T>, dim3(static_cast<unsigned>(blocks)), dim3(256), 0, values, rows,
                 length, out);
}

void ordered_sum(const CudaContext& ctx, const float* values, int64_t rows, int64_t length, float* out) {
  sum_rows(ctx, values, rows, length, out);
}
void ordered_sum(const CudaContext& ctx, const double* values, int64_t rows, int64_t length, double* out) {
  sum_rows(ctx, values, rows, length, out);
}

void ordered_norm(const CudaContext& ctx, const float* values, int64_t rows, int64_t length, float* out) {
  norm_rows(ctx, values, rows, length, out);
}
void ordered_norm(const CudaContext& ctx, const double* values, int64_t rows, int64_t length, double* out) {
  norm_rows(ctx, values, rows, length, out);
}

void gather_rows_backward(const CudaContext& ctx, const float* grad, const int64_t* idx, int64_t batch,
                          int64_t num_idx, int64_t width, int64_t count, float* out) {
  scatter_rows(ctx, grad, idx, batch, num_idx, width, count, out);
}
void gather_rows_backward(const CudaContext& ctx, const double* grad, const int64_t* idx, int64_t batch,
                          int64_t num_idx, int64_t width, int64_t count, double* out) {
  scatter_rows(ctx, grad, idx, batch, num_idx, width, count, out);
}

}  // namespace pcops::cuda
