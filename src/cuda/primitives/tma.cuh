#pragma once
// Tensor-memory-accelerator loads (sm_90): a box of a 3-D tensor copied global -> shared by one
// instruction, completing on a shared-memory mbarrier that counts the bytes, and the host side's
// tensor map. The kernels that use them keep the device code behind __CUDA_ARCH__ >= 900 and are
// only launched on such devices.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <cstdint>

namespace pcops::cuda::primitives {

// One mbarrier (8 bytes of shared memory, 8-byte aligned) expecting `count` arrivals a phase.
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, unsigned count) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(static_cast<unsigned>(__cvta_generic_to_shared(bar))),
               "r"(count)
               : "memory");
#endif
}

// Makes initialised barriers visible to the async proxy (the copy engine); a block barrier
// follows before any thread uses them.
__device__ __forceinline__ void mbarrier_init_fence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;\n\tfence.proxy.async.shared::cta;" ::: "memory");
#endif
}

// One arrival that also expects `bytes` more of transactions in the current phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(
                   static_cast<unsigned>(__cvta_generic_to_shared(bar))),
               "r"(bytes)
               : "memory");
#endif
}

// Waits until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, unsigned parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(bar));
  asm volatile(
      "{\n\t.reg .pred done;\n"
      "WAIT_%=:\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n\t"
      "@!done bra WAIT_%=;\n}" ::"r"(a),
      "r"(parity)
      : "memory");
#endif
}

// The box of `map` at coordinates (x0 innermost, x1, x2) into shared memory at dst (aligned as
// the map's swizzle needs), completing `bar`'s transactions. Coordinates past the tensor read
// zeros (still counted in the box's bytes).
__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, int x0, int x1, int x2,
                                            uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];" ::"r"(static_cast<unsigned>(__cvta_generic_to_shared(dst))),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x0), "r"(x1), "r"(x2),
      "r"(static_cast<unsigned>(__cvta_generic_to_shared(bar)))
      : "memory");
#endif
}

// Host: a tensor map of a dense 3-D array [d2][d1][d0] of 16-bit elements (rows of d0 contiguous,
// d0 * 2 bytes a multiple of 16, base 16-byte aligned) read in boxes of b0 x b1 x 1 with the
// 128-byte (b0 = 64) or 64-byte (b0 = 32) swizzle; false where the driver does not encode it.
inline bool encode_tensor_map_16bit(CUtensorMap* map, const void* base, bool bf16, uint64_t d0, uint64_t d1,
                                    uint64_t d2, unsigned b0, unsigned b1) {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      fn = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  if (encode == nullptr || (b0 != 64 && b0 != 32)) return false;
  const cuuint64_t dims[3] = {d0, d1, d2};
  const cuuint64_t strides[2] = {d0 * 2, d0 * d1 * 2};
  const cuuint32_t box[3] = {b0, b1, 1}, unit[3] = {1, 1, 1};
  return encode(map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 3,
                const_cast<void*>(base), dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
                b0 == 64 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace pcops::cuda::primitives
