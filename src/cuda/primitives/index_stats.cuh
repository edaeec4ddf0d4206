#pragma once
// Value statistics of int64 index / offset rows [rows, len], for the torch binding's value checks
// (bindings/torch/scatter.cpp decodes them; the layout is cuda::index_value_stats's, declared in
// include/pcops/scatter.hpp). kIndexStats words, each the unsigned max of its terms (zero is the
// identity, so partial statistics fold by max in any order):
//   [0] ~biased(min)  [1] biased(max)  [2] ~biased(min of column 0)  [3] biased(max of column
//   len - 1)  [4] 1 where some row decreases (a value below its left neighbour),
// biased(v) = v with its sign bit flipped (signed order as unsigned order). Integer max only:
// deterministic. Used by the statistics kernel (cuda/scatter.cu) and, fused, by the keys pass of
// the inverse index (primitives/inverse_index.cuh), which reads every index value anyway.
#include <cstdint>

namespace pcops::cuda::primitives {

constexpr int kIndexStats = 5;

__device__ __forceinline__ unsigned long long biased(int64_t v) {
  return static_cast<unsigned long long>(v) ^ (1ull << 63);
}

struct IndexStats {
  unsigned long long w[kIndexStats] = {0, 0, 0, 0, 0};

  // Value v at column j of a row of len values; prev is its left neighbour (read when j > 0).
  __device__ __forceinline__ void add(int64_t v, int64_t j, int64_t len, int64_t prev) {
    w[0] = max(w[0], ~biased(v));
    w[1] = max(w[1], biased(v));
    if (j == 0) w[2] = max(w[2], ~biased(v));
    if (j == len - 1) w[3] = max(w[3], biased(v));
    if (j > 0 && v < prev) w[4] = 1;
  }

  __device__ __forceinline__ void fold(const unsigned long long* other) {
#pragma unroll
    for (int s = 0; s < kIndexStats; ++s) w[s] = max(w[s], other[s]);
  }

  // The block's statistics into shared[0, kIndexStats), valid for every thread on return. Every
  // thread of the block calls it (it synchronises the block); blockDim.x is a multiple of 32.
  __device__ __forceinline__ void block_fold(unsigned long long* shared) const {
    if (threadIdx.x < kIndexStats) shared[threadIdx.x] = 0;
    __syncthreads();
#pragma unroll
    for (int s = 0; s < kIndexStats; ++s) {
      unsigned long long v = w[s];
#pragma unroll
      for (int d = 16; d > 0; d >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, d));
      if ((threadIdx.x & 31u) == 0 && v != 0) atomicMax(shared + s, v);
    }
    __syncthreads();
  }
};

}  // namespace pcops::cuda::primitives
