#pragma once
// Segment offsets of sorted keys: for q = 0..count, offsets[q] = the first position p of
// sorted[0 .. n) (ascending) whose high part sorted[p] >> shift is at least q (n where none is), so
// segment q's keys are the positions offsets[q] .. offsets[q + 1] - 1. One binary search per q:
// no atomics and no memset; keys past every segment (sentinels above count) end up after
// offsets[count].
#include <cstdint>

#include "cuda/common.cuh"

namespace pcops::cuda::primitives {

template <class Key>
__global__ void sorted_offsets_kernel(const Key* __restrict__ sorted, int64_t n, int shift, int64_t count,
                                      int64_t* __restrict__ offsets) {
  PCOPS_CUDA_GRID_STRIDE(q, count + 1) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (static_cast<uint64_t>(sorted[mid] >> shift) < static_cast<uint64_t>(q)) lo = mid + 1;
      else hi = mid;
    }
    offsets[q] = lo;
  }
}

}  // namespace pcops::cuda::primitives
