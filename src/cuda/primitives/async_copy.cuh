#pragma once
// Asynchronous global -> shared copies (cp.async, sm_80 and later) shared by the CUDA kernels
// that stage gathered rows in shared memory: a copy of 16 or 4 bytes, zero-filling where the
// source size is 0, and the commit / wait of copy groups.
#include <cuda_runtime.h>

namespace pcops::cuda::primitives {

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared to a shared-window address (smem_u32; both 16-byte aligned), for loops
// that keep their destinations as 32-bit offsets; src_bytes 0 fills zeros (src must still be a
// valid address).
__device__ __forceinline__ void cp_async16_shared(unsigned dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
// The same to a shared-memory pointer.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  cp_async16_shared(smem_u32(dst), src, src_bytes);
}
// 4 bytes global -> shared (both 4-byte aligned); src_bytes 0 fills zeros.
__device__ __forceinline__ void cp_async4(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(smem_u32(dst)), "l"(src), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Waits until at most N of this thread's committed groups are in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

}  // namespace pcops::cuda::primitives
