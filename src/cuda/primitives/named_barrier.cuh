#pragma once
// Named barriers (bar.sync / bar.arrive) for kernels whose warps take roles, such as producer warps
// that fill a shared buffer and consumer warps that read it: `count` threads (a multiple of 32,
// whole warps) take part in barrier `id` (1..15; 0 is __syncthreads). sync waits until all of them
// have arrived; arrive counts the calling warp without waiting. Shared-memory writes before a
// warp's arrive (or sync) are visible to the threads that return from that barrier's sync.
#include <cuda_runtime.h>

namespace pcops::cuda::primitives {

__device__ __forceinline__ void named_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(count) : "memory");
}

}  // namespace pcops::cuda::primitives
