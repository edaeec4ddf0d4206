// CUDA three_nn: kNN with k = 3 on 3-D points, bitwise equal to the CPU backend (the three
// smallest (key, index), key = s with NaN as +inf, dist = sqrt(key) after selection, (+inf, -1)
// where fewer than three known points are available).
//
// Paths, chosen per call on the host (lengths are host memory):
// - known clouds of at most ThreeNnPolicy::kKnnMinKnown valid points (PointNet++ feature
//   propagation: M = 16..16k): brute force, tiled. One thread per unknown point keeps its sorted
//   top-3 in registers; the block stages the known points in shared memory, kTile at a time.
//   When there are too few unknown points to fill the GPU, the known range is split over
//   blockIdx.y into chunks; each chunk's top-3 goes to a workspace and a merge kernel combines
//   them in chunk order.
// - larger known clouds: cuda::knn with k = 3 (its GPU grid; same contract, same output layout).
//
// Order: known points are offered in ascending index order (chunks merged in ascending order), so
// "key < third key" (strict) is exactly the (key, index) lexicographic admission test and an equal
// key goes after the entries already kept. Deterministic: no atomics.
#include "pcops/three_nn.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/distance.hpp"
#include "cuda/common.cuh"
#include "pcops/error.hpp"
#include "pcops/knn.hpp"

namespace pcops::cuda {
namespace {

struct ThreeNnPolicy {
  static constexpr int kThreads = 256;                 // unknown points per block
  static constexpr int kTile = 1024;                   // known points per shared-memory stage (16 KiB)
  static constexpr int64_t kKnnMinKnown = 8192;        // more valid known points: cuda::knn (grid)
  static constexpr int64_t kMinChunk = 2 * kTile;      // known points per split, at least
  static constexpr int64_t kMaxSplits = 64;
  static constexpr int64_t kResidentThreadsPerSm = 2048;  // split until the GPU is about full
  static constexpr int64_t kMaxBlocks = int64_t{1} << 20;
};

constexpr uint32_t kEmptyKey = 0xFFFFFFFFu;  // above every key (keys are floats >= +0 or +inf)

// The best three (key bits, index) in ascending (key, index) order.
struct Top3 {
  uint32_t k0, k1, k2;
  int32_t i0, i1, i2;
};

__device__ __forceinline__ Top3 empty_top3() { return Top3{kEmptyKey, kEmptyKey, kEmptyKey, -1, -1, -1}; }

// Inserts (key, j); j must exceed every index already kept with the same key (ascending offers).
__device__ __forceinline__ void insert(Top3& t, uint32_t key, int32_t j) {
  if (key < t.k2) {
    if (key < t.k1) {
      t.k2 = t.k1;
      t.i2 = t.i1;
      if (key < t.k0) {
        t.k1 = t.k0;
        t.i1 = t.i0;
        t.k0 = key;
        t.i0 = j;
      } else {
        t.k1 = key;
        t.i1 = j;
      }
    } else {
      t.k2 = key;
      t.i2 = j;
    }
  }
}

__device__ __forceinline__ void write_slot(uint32_t key, int32_t j, float* d, int64_t* i) {
  if (key == kEmptyKey) {
    *d = INFINITY;
    *i = -1;
  } else {
    *d = __fsqrt_rn(__uint_as_float(key));
    *i = j;
  }
}

__device__ __forceinline__ void write_top3(const Top3& t, float* d, int64_t* i) {
  write_slot(t.k0, t.i0, d, i);
  write_slot(t.k1, t.i1, d + 1, i + 1);
  write_slot(t.k2, t.i2, d + 2, i + 2);
}

__device__ __forceinline__ void pad3(float* d, int64_t* i) {
  for (int t = 0; t < 3; ++t) {
    d[t] = INFINITY;
    i[t] = -1;
  }
}

// Tiled brute force. blockIdx.x = (cloud b, block of kThreads unknown points), blockIdx.y = chunk
// of known points [y * chunk, (y + 1) * chunk) (clipped to known_lengths[b]); one thread per
// unknown point. kFinal (one chunk): writes dist / idx (and the padding of unknown points past
// unknown_lengths[b]); otherwise writes the chunk's Top3 to partial[y][b * N + i].
template <bool kFinal>
__global__ void __launch_bounds__(ThreeNnPolicy::kThreads)
    tile_kernel(PointsView unknown, PointsView known, const int64_t* ulen, const int64_t* klen,
                int64_t blocks_per_cloud, int64_t chunk, float* dist, int64_t* idx, Top3* partial) {
  __shared__ float4 tile[ThreeNnPolicy::kTile];
  const int64_t N = unknown.count;
  const int64_t b = blockIdx.x / blocks_per_cloud;
  const int64_t first = (blockIdx.x - b * blocks_per_cloud) * int64_t{ThreeNnPolicy::kThreads};
  const int64_t i = first + threadIdx.x;
  const int64_t nu = ulen[b];
  const int64_t j0 = blockIdx.y * chunk, j1 = std::min(klen[b], j0 + chunk);
  const bool active = i < nu;
  float qx = 0.0f, qy = 0.0f, qz = 0.0f;
  if (active) {
    const float* q = unknown.data + b * unknown.stride_batch + i * unknown.stride_point;
    qx = q[0];
    qy = q[unknown.stride_dim];
    qz = q[2 * unknown.stride_dim];
  }
  Top3 top = empty_top3();
  if (first < nu) {  // block-uniform: the barriers below are reached by every thread or none
    const float* kb = known.data + b * known.stride_batch;
    for (int64_t t0 = j0; t0 < j1; t0 += ThreeNnPolicy::kTile) {
      const int cnt = static_cast<int>(std::min<int64_t>(ThreeNnPolicy::kTile, j1 - t0));
      __syncthreads();  // the previous tile has been read
      for (int u = threadIdx.x; u < cnt; u += blockDim.x) {
        const float* p = kb + (t0 + u) * known.stride_point;
        tile[u] = make_float4(p[0], p[known.stride_dim], p[2 * known.stride_dim], 0.0f);
      }
      __syncthreads();
      if (active) {
        const int32_t jb = static_cast<int32_t>(t0);
#pragma unroll 8
        for (int u = 0; u < cnt; ++u) {
          const float4 p = tile[u];
          const float s = common::squared_distance3(qx, qy, qz, p.x, p.y, p.z);
          const uint32_t key = __float_as_uint(common::knn_key(s));
          if (key < top.k2) insert(top, key, jb + u);
        }
      }
    }
  }
  if (i >= N) return;
  if (kFinal) {
    const int64_t o = (b * N + i) * 3;
    if (active) write_top3(top, dist + o, idx + o);
    else pad3(dist + o, idx + o);
  } else if (active) {
    partial[blockIdx.y * (unknown.batch * N) + b * N + i] = top;
  }
}

// Combines the chunks' Top3 in chunk order (ascending indices). One thread per unknown point.
__global__ void __launch_bounds__(ThreeNnPolicy::kThreads)
    merge_kernel(const Top3* partial, const int64_t* ulen, int64_t B, int64_t N, int64_t splits,
                 float* dist, int64_t* idx) {
  const int64_t total = B * N;
  for (int64_t g = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; g < total;
       g += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = g / N, i = g - b * N;
    if (i >= ulen[b]) {
      pad3(dist + g * 3, idx + g * 3);
      continue;
    }
    Top3 top = empty_top3();
    for (int64_t s = 0; s < splits; ++s) {
      const Top3 p = partial[s * total + g];
      insert(top, p.k0, p.i0);
      insert(top, p.k1, p.i1);
      insert(top, p.k2, p.i2);
    }
    write_top3(top, dist + g * 3, idx + g * 3);
  }
}

}  // namespace

void three_nn(const CudaContext& ctx, PointsView unknown, PointsView known,
              LengthsView unknown_lengths, LengthsView known_lengths, float* dist, int64_t* idx) {
  core::validate_three_nn(unknown, known, unknown_lengths, known_lengths);
  const int64_t B = unknown.batch, N = unknown.count, M = known.count;
  if (B * N == 0) return;

  int64_t max_known = 0;
  for (int64_t b = 0; b < B; ++b) max_known = std::max(max_known, known_lengths.get(b, M));
  if (max_known > ThreeNnPolicy::kKnnMinKnown) {
    knn(ctx, unknown, known, unknown_lengths, known_lengths, KnnParams{3}, dist, idx);
    return;
  }

  detail::Workspace ws(ctx);
  const int64_t* d_ulen = detail::upload_lengths(ctx, ws, unknown_lengths, B, N);
  const int64_t* d_klen = detail::upload_lengths(ctx, ws, known_lengths, B, M);

  // Split the known points when the unknown points alone leave most of the GPU idle.
  constexpr int64_t T = ThreeNnPolicy::kThreads;
  const int64_t blocks_per_cloud = detail::ceil_div(N, T);
  const int64_t threads = B * blocks_per_cloud * T;
  const int64_t resident =
      int64_t{detail::device_properties().multiProcessorCount} * ThreeNnPolicy::kResidentThreadsPerSm;
  int64_t splits = 1;
  if (threads < resident)
    splits = std::clamp<int64_t>(std::min(detail::ceil_div(resident, threads),
                                          max_known / ThreeNnPolicy::kMinChunk),
                                 1, ThreeNnPolicy::kMaxSplits);
  // Chunks are whole tiles; recount the splits that the rounded chunk needs.
  int64_t chunk = detail::ceil_div(std::max<int64_t>(max_known, 1), splits);
  chunk = detail::ceil_div(chunk, ThreeNnPolicy::kTile) * ThreeNnPolicy::kTile;
  splits = std::max<int64_t>(1, detail::ceil_div(max_known, chunk));

  PCOPS_CHECK(B * blocks_per_cloud <= int64_t{0x7FFFFFFF}, Value,
              "unknown: too many points for one launch (", B, " x ", N, ")");
  const dim3 grid(static_cast<unsigned>(B * blocks_per_cloud), static_cast<unsigned>(splits));
  if (splits == 1) {
    detail::launch(ctx, tile_kernel<true>, grid, dim3(T), 0, unknown, known, d_ulen, d_klen,
                   blocks_per_cloud, chunk, dist, idx, static_cast<Top3*>(nullptr));
    return;
  }
  Top3* partial = ws.alloc<Top3>(splits * B * N);
  detail::launch(ctx, tile_kernel<false>, grid, dim3(T), 0, unknown, known, d_ulen, d_klen,
                 blocks_per_cloud, chunk, dist, idx, partial);
  const int64_t mblocks = std::clamp<int64_t>(detail::ceil_div(B * N, T), 1, ThreeNnPolicy::kMaxBlocks);
  detail::launch(ctx, merge_kernel, dim3(static_cast<unsigned>(mblocks)), dim3(T), 0,
                 static_cast<const Top3*>(partial), d_ulen, B, N, splits, dist, idx);
}

}  // namespace pcops::cuda
