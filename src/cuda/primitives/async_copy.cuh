#pragma once
// Asynchronous global -> shared copies (cp.async, sm_80 and later) shared by the CUDA kernels
// that stage gathered rows in shared memory: a copy of 16 or 4 bytes, zero-filling where the
// source size is 0, the commit / wait of copy groups, and mbarriers that the copies complete.
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


// mbarriers completed by cp.async copies (sm_90: the parity wait; elsewhere these trap and are
// never launched), shared-window addresses (smem_u32), 8-byte aligned.
// Initialises `bar` for `count` arrivals a phase (one thread; a barrier before any other use).
__device__ __forceinline__ void mbarrier_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
// One arrival on `bar` once every cp.async this thread issued before has completed; `noinc`: the
// barrier's count includes it.
__device__ __forceinline__ void cp_async_mbarrier_arrive_noinc(unsigned bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}
// Waits until the phase of `bar` with this parity has completed (acquire, CTA scope). A phase
// that has not completed after about 2^34 clock cycles (seconds) traps instead of hanging: a
// launch error rather than a stuck device where an arrival is missing.
__device__ __forceinline__ void mbarrier_wait_parity(unsigned bar, unsigned parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned done = 0;
  long long start = 0;
  for (;;) {
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n\t"
        "selp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
    if (done != 0) break;
    if (start == 0) start = clock64();
    else if (clock64() - start > (1ll << 34)) __trap();
  }
#else
  (void)bar, (void)parity;
  __trap();
#endif
}

}  // namespace pcops::cuda::primitives
