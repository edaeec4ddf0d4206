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

// mbarriers (sm_90) at shared-window addresses (smem_u32): initialised by one thread with the
// arrivals a phase takes, then made visible to the other threads, the copy engine and the cluster
// (mbarrier_init_fence, before a block or cluster barrier).
__device__ __forceinline__ void mbarrier_init(unsigned bar, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(arrivals) : "memory");
}
__device__ __forceinline__ void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// Arrives once on the current phase and adds `bytes` expected transaction bytes to it.
__device__ __forceinline__ void mbarrier_arm(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}
// Bulk copy: `bytes` (a multiple of 16, both addresses 16-byte aligned) global -> shared by the
// copy engine, completing as transaction bytes on the mbarrier `bar`, which this thread arms; the
// readers wait on its phase (mbarrier_wait), which makes the copied bytes visible to them, the
// async proxy included.
__device__ __forceinline__ void bulk_copy_to_shared(unsigned dst, const void* src, unsigned bytes,
                                                    unsigned bar) {
  mbarrier_arm(bar, bytes);
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(dst), "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
// One arrival of the calling thread (release: its earlier accesses are visible to the threads
// that see the phase complete).
__device__ __forceinline__ void mbarrier_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// Waits until the barrier's phase of parity `parity` has completed (acquire).
__device__ __forceinline__ void mbarrier_wait(unsigned bar, unsigned parity) {
  asm volatile(
      "{\n.reg .pred p;\nWAIT:\n"  // the label is local to the braces' scope
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra WAIT;\n}" ::"r"(bar),
      "r"(parity)
      : "memory");
}

}  // namespace pcops::cuda::primitives
