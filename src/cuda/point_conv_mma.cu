// CUDA point_conv, tensor-core path (the "fast" mode of docs/ops/point_conv.md): float16 or
// bfloat16 features and weights, products exact in float32 (mma.sync m16n8k16 with float32
// accumulators), sums in float32 in a fixed order per output element, so the result is
// deterministic run to run and independent of the order of the triplet rows, but not bitwise
// equal to the exact path (the tensor cores group the channel sums their own way).
//
// MVMR (forward; grad_features is the same kernel with W transposed and the roles of i and j
// exchanged), output-stationary with no atomics and no extra global memory beyond the sort:
// - The triplets are grouped once by (tile of BM destination rows, k, destination row, source
//   row): segments (tile, k) with their offsets, each holding its keys (local destination row,
//   source row) ascending, no values (the key holds everything the kernel needs); either one CUB
//   radix sort of packed 64-bit keys or 32-bit keys placed into their segments and sorted there,
//   then kept in 3 bytes a key where they have at most 25 bits (the groupings below, SplitKeys).
// - One block per (tile of BM destination rows, block of BN destination channels) keeps the
//   tile's float32 sums in shared memory. For each k it takes the segment's triplets in chunks of
//   MC rows: the chunk's source rows are gathered (cp.async, BK channels a stage, S stages in
//   flight) and multiplied with W_k (BN x BK) on the tensor cores, so every MMA row is a triplet,
//   never padding for an absent neighbour. At the chunk's end each 16-row MMA fragment sums its
//   runs of equal destination rows in registers (a segmented scan through warp shuffles) and the
//   run's last row adds the sum into the tile's sums (the row groups of the warps at once, or in
//   turns where a run crosses between them, as the chunk's rows decide). k ascending, chunks in
//   order, each sum's turn fixed by the sorted triplets: a fixed order for every element.
// VVOR (grad_weights): one block per (k, BO x BC block of W_k, cut of the sorted triplets) folds
// kernel k's triplets in (i, j) order, 32 at a time, as one MMA chain: gathered rows of grad_out
// and features, both loaded transposed by ldmatrix.trans; the cuts' float32 partials are summed in
// order.
#include <cub/cub.cuh>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <iterator>

#include "common/bits.hpp"
#include "common/point_conv_runs.hpp"
#include "cuda/common.cuh"
#include "cuda/point_conv_places.cuh"
#include "cuda/primitives/async_copy.cuh"
#include "cuda/primitives/ragged.cuh"
#include "cuda/primitives/segmented_keys.cuh"
#include "cuda/primitives/sorted_offsets.cuh"
#include "pcops/point_conv.hpp"

namespace pcops::cuda {
namespace {

using point_conv_places::triplet_at;
using point_conv_places::TripletAt;

// The MVMR kernel's warps: 2 (chunk rows: 32 of every 64 each) x 4 (destination channels, BN / 4
// each); wgmma: two warpgroups.
struct MvmrPolicy {
  static constexpr int kThreads = 256;
};
// The MVMR kernel's threads: 256, or 512 for the wgmma blocks of 256 channels (four warpgroups).
__host__ __device__ constexpr int mvmr_threads(int bn, bool wg) {
  return wg && bn == 256 ? 512 : MvmrPolicy::kThreads;
}

struct VvorPolicy {
  static constexpr int kThreads = 256;  // 8 warps: 2 (o) x 4 (c)
  static constexpr int KT = 32;         // triplets per stage
  static constexpr int kPad = 8;
  static constexpr int kStages = 3;
  // The segmented keys' shared memory (vvor_mma_kernel): a ring of this many stages of keys (the
  // 4-byte words around a stage's split keys: 17 of the low halves, 17 of the high parts) and the
  // ends and mids of up to kSegEnds segments (2,048 blocks of 128 rows i cover 262,144 output
  // rows).
  static constexpr int kKeySlots = 4;
  static constexpr int kKeyWords = 2 * (KT / 2 + 1);
  static constexpr int kSegEnds = 2048;
  static constexpr size_t kSegmentedBytes = sizeof(uint32_t) * (kKeySlots * kKeyWords + 2 * kSegEnds);
  // Slices of the sorted triplets (float32 partials, summed in order): cuts of at least kMinSlice
  // triplets, as many as kPartialBytes of partials allow. Fixed by the shape alone, so the
  // result does not depend on the device.
  static constexpr int64_t kMinSlice = 4096;
  static constexpr int64_t kPartialBytes = int64_t{64} << 20;
};

using common::bits_for;

// Segment offsets of an MVMR tile kept in shared memory (the rest, for K > kSegCache, read from
// global memory).
constexpr int kSegCache = 128;

// The segmented groupings' keys as the kernels read them (3 bytes a triplet where the key has at
// most 25 bits, as for clouds of up to 2^18 points; 4 beyond): the low 16 bits (lo), the next 8
// (hb 1) or 16 (hb 2) bits (hi), and, with hb 1, bit 24 from the segment's `mid`, the first
// position of the segment whose key has it (the keys of a segment are sorted, so the bit is 0
// before mid and 1 from it; mid is the segment's end where no key has it, and always with hb 2).
// Each array is padded by kSplitPad bytes past T (the weight-gradient kernel copies whole 4-byte
// words around a stage's keys).
struct SplitKeys {
  const uint16_t* lo;
  const unsigned char* hi;
  const int* mid;  // [segments + 1]
  int hb;
};
constexpr size_t kSplitPad = 128;
__device__ __forceinline__ uint32_t split_key(const SplitKeys& sk, int p, int mid) {
  const uint32_t h = sk.hb == 1 ? sk.hi[p] : reinterpret_cast<const uint16_t*>(sk.hi)[p];
  return sk.lo[p] | h << 16 | (p >= mid ? 1u << 24 : 0u);
}

// Key layout of the MVMR sort: (segment = tile * K + k, local destination row, source row).
// The tile holds bm = 1 << local_bits destination rows.
struct MvmrKey {
  int src_bits, seg_bits, local_bits, bm;
  int64_t tiles, segments;  // segments = tiles * K; key segment `segments`: an invalid triplet
};

// The MVMR kernel's shape: destination rows per tile (bm), destination channels per block (bn),
// triplet rows per chunk (mc; the block has 256 threads, 512 for wgmma blocks of 256 channels),
// source channels per stage (bk), pipeline stages, and whether the products run on wgmma (sm_90a;
// otherwise mma.sync). PCOPS_CUDA_POINT_CONV_CONFIG=<bm>x<bn>x<mc>x<bk>x<stages>[w] picks one of
// the compiled ones (w: wgmma, taken only where it can run; elsewhere the mma.sync default). The
// wgmma shape of 256 channels (128x256x64x64x2w: four warpgroups, one block a multiprocessor, each
// chunk's source rows gathered once for 256 output channels) is the default from 193 to 256
// channels (mvmr_config); it was 3-5 % slower at 512 (docs/point_conv_kernels.md; with stages of
// 32 channels in 4 it was slower at both, and that shape is no longer compiled).
struct MvmrConfig {
  int bm, bn, mc, bk, stages;
  bool wg;
  // Not part of the shape (set by mvmr_config from the environment): the tile sums' swizzle
  // (mvmr_mma_kernel's swz) and how the wgmma shapes order the sums of runs that cross between
  // warps (its pairs).
  int swz = 0;
  bool pairs = true;
  // wgmma shapes: the weight stages as images packed ahead (pack_stages_kernel), each stage one
  // bulk copy on an mbarrier instead of every thread's cp.async of weight rows (mvmr_config).
  bool bulk = false;
};

// wgmma runs where this library carries sm_90a code (CMAKE_CUDA_ARCHITECTURES with 90a; the
// build defines PCOPS_CUDA_SM90A) and the current device is of compute capability 9.0, which
// loads that code. The capability is read once per device.
bool wgmma_usable() {
#if defined(PCOPS_CUDA_SM90A)
  constexpr int kDevices = 64;
  static std::atomic<int8_t> known[kDevices] = {};  // 0: not read yet, 1: yes, -1: no
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  if (dev >= 0 && dev < kDevices && known[dev].load(std::memory_order_relaxed) != 0) return known[dev] > 0;
  int major = 0, minor = 0;
  const bool yes = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
                   cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess &&
                   major == 9 && minor == 0;
  if (dev >= 0 && dev < kDevices) known[dev].store(yes ? 1 : -1, std::memory_order_relaxed);
  return yes;
#else
  return false;
#endif
}
// A switch of the fast path: 1 on, 0 off, unset or empty `dflt` (other values throw).
bool switch_on(const char* var, bool dflt = true) {
  const char* e = std::getenv(var);
  const std::string_view v = e == nullptr ? "" : e;
  if (v.empty()) return dflt;
  if (v == "1") return true;
  if (v == "0") return false;
  throw std::invalid_argument(std::string("pcops point_conv: ") + var + " must be 0 or 1");
}

// The default: tiles of 128 rows, chunks of 64; 128 destination channels a block (64 for at most
// 64), 64 source channels a stage in 2 stages (32 in 3 for at most 32 source channels). Both fit
// two blocks per multiprocessor. Measured on an H200 (bf16, 165k points, 2.64M triplets, forward
// at C = 128 / 256 / 512): 128x128x64x64x2 1.54 / 3.78 / 11.6 ms; 128x128x64x32x3 1.83 / 4.64 /
// 13.8 ms. Slower: 128x64 at C >= 128 (x64x2: 1.85 / 4.77 / 14.9 ms), 3 stages of 64 channels
// with 64 channels a block (17.3 ms at C = 512), chunks of 128 rows (17.5 ms); and, measured with
// the earlier padded stages of 32 channels, tiles of 64 rows (21.0 ms) or 256 rows (16.1 ms) and
// pipelines of 4 to 10 stages; chunks of 128 rows on 256 threads (MI = 4; 31.4 ms with stages of
// 32 channels in 3, spilling, 20.5 ms with 64 in 2, one block per multiprocessor).
constexpr MvmrConfig kMvmrConfigs[] = {{128, 128, 64, 64, 2, false}, {128, 64, 64, 64, 2, false},
                                       {128, 128, 64, 32, 3, false}, {128, 64, 64, 32, 3, false},
                                       {128, 128, 64, 64, 2, true},   {128, 128, 64, 32, 4, true},
                                       {128, 256, 64, 64, 2, true}};

// wgmma where both channel counts exceed 128: with stages of 32 channels in 4 (one stage's products
// in flight across the next step) up to 256 channels, of 64 in 2 beyond. Forward at C = 128 / 256 /
// 512, same run (point-conv-probe-cuda-20261130-211400-*.json): 128x128x64x32x4w 1.52 / 3.46 /
// 9.39 ms, 128x128x64x64x2w 9.22 ms at 512, mma.sync (128x128x64x64x2) 1.62 / 3.74 ms at 128 / 256.
// Before the chunk's sums ran at once (they took four turns), wgmma was slower below 512. From 193
// to 256 destination channels one block covers them all (four warpgroups, stages of 64 channels
// bulk-copied): at C = 256 forward 2.77-2.80 against 2.83-2.84 ms for 128x128x64x32x4w,
// grad_features 2.76-2.81 against 2.84-2.85 (point-conv-kernels-cuda-20261202-103500-a1e5ffc-mvmr256.json).
MvmrConfig mvmr_config(int64_t n_out_c, int64_t n_in_c) {
  const bool wide = n_in_c > 32;
  const MvmrConfig sync{128, n_out_c <= 64 ? 64 : 128, 64, wide ? 64 : 32, wide ? 2 : 3, false};
  MvmrConfig c = sync;
  if (n_out_c > 128 && n_in_c > 128 && wgmma_usable()) {
    if (std::max(n_out_c, n_in_c) > 256)
      c = MvmrConfig{128, 128, 64, 64, 2, true};
    else if (n_out_c > 192)
      c = MvmrConfig{128, 256, 64, 64, 2, true};
    else
      c = MvmrConfig{128, 128, 64, 32, 4, true};
  }
  if (const char* e = std::getenv("PCOPS_CUDA_POINT_CONV_CONFIG"); e != nullptr && *e != 0) {
    int bm = 0, bn = 0, mc = 0, bk = 0, st = 0;
    char w = 0;
    const int got = std::sscanf(e, "%dx%dx%dx%dx%d%c", &bm, &bn, &mc, &bk, &st, &w);
    if (got >= 5)
      for (const MvmrConfig& k : kMvmrConfigs)
        if (k.bm == bm && k.bn == bn && k.mc == mc && k.bk == bk && k.stages == st && k.wg == (got == 6 && w == 'w'))
          c = k;
    if (c.wg && !wgmma_usable()) c = sync;  // the mma.sync default
  }
  // The MVMR's tile sums swizzled against bank conflicts (mvmr_mma_kernel's swz), unless
  // PCOPS_CUDA_POINT_CONV_SUM_SWIZZLE=0; the wgmma MVMR's runs that cross between two warps' rows
  // summed by the two warps at a barrier of their own (its pairs), unless
  // PCOPS_CUDA_POINT_CONV_SUM_PAIRS=0 (the whole block's turns). The same bits either way
  // (docs/point_conv_kernels.md has the times; point_conv_kernels.py --sum-swizzle / --sum-pairs 0,1).
  c.swz = switch_on("PCOPS_CUDA_POINT_CONV_SUM_SWIZZLE") ? 24 : 0;
  c.pairs = switch_on("PCOPS_CUDA_POINT_CONV_SUM_PAIRS");
  // The weight stages bulk-copied: by default on the wgmma shapes with stages of 64 channels (the
  // defaults beyond 192 channels), PCOPS_CUDA_POINT_CONV_BULK_W=0 / 1 off / on for every wgmma shape.
  c.bulk = switch_on("PCOPS_CUDA_POINT_CONV_BULK_W", c.bk == 64) && c.wg;
  return c;
}

MvmrKey mvmr_key(int64_t n_dst, int64_t n_src, int64_t K, int bm) {
  MvmrKey m;
  m.bm = bm;
  m.local_bits = bits_for(bm - 1);
  m.tiles = detail::ceil_div(n_dst, bm);
  m.segments = m.tiles * K;
  m.src_bits = bits_for(std::max<int64_t>(n_src - 1, 1));
  m.seg_bits = bits_for(m.segments);  // one more value: the invalid triplets
  return m;
}

// The packed keys fit 64 bits and the blocks (tiles x channel blocks of 64 or more) the grid.
bool mvmr_key_fits(const MvmrKey& m, int64_t n_out_c) {
  return m.tiles * detail::ceil_div(n_out_c, 64) < (int64_t{1} << 31) && m.seg_bits + m.local_bits + m.src_bits <= 64;
}

// Key layout of the VVOR sort: (k, i, j); k = K marks an invalid triplet.
struct VvorKey {
  int i_bits, j_bits, bits;
};

VvorKey vvor_key(const PointConvShape& s) {
  VvorKey v;
  v.i_bits = bits_for(std::max<int64_t>(s.num_out - 1, 1));
  v.j_bits = bits_for(std::max<int64_t>(s.num_in - 1, 1));
  v.bits = bits_for(s.kernels) + v.i_bits + v.j_bits;
  return v;
}

template <class T>
struct Elem;
template <>
struct Elem<__half> {
  static __device__ __forceinline__ __half from(float v) { return __float2half_rn(v); }
};
template <>
struct Elem<__nv_bfloat16> {
  static __device__ __forceinline__ __nv_bfloat16 from(float v) { return __float2bfloat16_rn(v); }
};

using primitives::cp_async16;
using primitives::cp_async_commit;
using primitives::cp_async_wait;
using primitives::cp_async16_shared;
using primitives::cp_async4;
using primitives::smem_u32;
using primitives::bulk_copy_to_shared;
using primitives::mbarrier_arrive;
using primitives::mbarrier_init;
using primitives::mbarrier_init_fence;
using primitives::mbarrier_wait;

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}

// The head of one pipeline step: the current stage has landed for every thread (wait and
// barrier, which also frees the buffer of the stage S - A steps back), then `load(buffer)` issues
// the stage A ahead into that buffer and commits it (an empty group past the end). A = S - 1
// unless the buffers are still read after the step (wgmma in flight). kAsyncRead: the stage is
// read by wgmma (the async proxy), so each thread's landed cp.async writes are fenced into that
// proxy before the barrier.
template <int S, int A = S - 1, bool kAsyncRead = false, class Load>
__device__ __forceinline__ void pipeline_step(int& ldbuf, Load&& load) {
  cp_async_wait<A - 1>();
  if constexpr (kAsyncRead) asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  load(ldbuf);
  cp_async_commit();
  ldbuf = ldbuf + 1 == S ? 0 : ldbuf + 1;
}

template <class T>
__device__ __forceinline__ void mma16816(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// wgmma (sm_90a): one warpgroup multiplies a 64 x 16 slice of A by a 16 x 64 slice of B, both K-major
// in shared memory with the 128-byte swizzle (rows of 64 16-bit elements, the 16-byte chunks of
// row r XORed with r % 8: swizzled<64>) or the 64-byte one (rows of 32, chunks XORed with
// (r / 2) % 4: swizzled<32>), into 64 x 64 float32 accumulators: warp w of the group holds rows
// 16 w .. 16 w + 15 as mma.sync's m16n8 accumulator fragments, d[j] for columns 8 j.
// The descriptor: start address / 16, leading offset unused (1), stride between groups of 8 rows
// (8 rows of BK elements), swizzle mode 1 (128 bytes) or 2 (64 bytes). A k16 step moves the start
// address by 32 bytes.
// MN-major with the 128-byte swizzle (rows of 64 16-bit elements along M or N, one row a k, 8-row
// atoms of 1024 bytes stacked along k): both byte offsets 1024. An instruction of N = 64 spans one
// atom along M and N, so only the stride between its two 8-row groups along k is read, and with
// both offsets equal it does not matter which of the two fields the hardware takes for it.
__device__ __forceinline__ uint64_t swizzled_desc_mn(uint32_t addr) {
  constexpr uint64_t kOff = 1024 >> 4;
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (kOff << 16) | (kOff << 32) | (uint64_t{1} << 62);
}
template <int BK>
__device__ __forceinline__ uint64_t swizzled_desc(uint32_t addr) {
  static_assert(BK == 64 || BK == 32, "128- or 64-byte rows");
  constexpr uint64_t kStride = 8 * BK * 2, kMode = BK == 64 ? 1 : 2;
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (uint64_t{1} << 16) | ((kStride >> 4) << 32) | (kMode << 62);
}
// The instruction for 16-bit type TY ("f16" or "bf16") and the transpose immediates TRANS of A
// and B ("0, 0": both K-major); operands 0-31 the accumulators d[8][4].
#define PCOPS_WGMMA_64X64(TY, TRANS, d, da, db)                                                             \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                         \
               "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, " TRANS ";\n}\n" \
               : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])                                                                                   \
               : "l"(da), "l"(db))
// kMN: both operands MN-major (A: M contiguous, B: N contiguous; the transpose immediates 1, 1),
// as the weight gradient's gathered rows lie: 64 channels (128 bytes) a row, one row a triplet,
// 8-row atoms of the 128-byte swizzle. Otherwise both K-major.
template <class T, bool kMN = false>
__device__ __forceinline__ void wgmma_64x64(float (&d)[8][4], uint64_t da, uint64_t db) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr bool kHalf = std::is_same_v<T, __half>;
  if constexpr (kHalf && kMN) PCOPS_WGMMA_64X64("f16", "1, 1", d, da, db);
  else if constexpr (kHalf) PCOPS_WGMMA_64X64("f16", "0, 0", d, da, db);
  else if constexpr (kMN) PCOPS_WGMMA_64X64("bf16", "1, 1", d, da, db);
  else PCOPS_WGMMA_64X64("bf16", "0, 0", d, da, db);
#else
  (void)d, (void)da, (void)db;
  __trap();  // never launched: the host picks wgmma only for sm_90a code on a 9.0 device
#endif
}
#undef PCOPS_WGMMA_64X64
// The accumulators' registers are pinned around the asynchronous MMAs (no read or write of them
// is moved across the fence / wait).
template <int N>
__device__ __forceinline__ void pin_registers(float (&d)[N][4]) {
#pragma unroll
  for (int j = 0; j < N; ++j)
#pragma unroll
    for (int x = 0; x < 4; ++x) asm volatile("" : "+f"(d[j][x])::"memory");
}
__device__ __forceinline__ void wgmma_fence() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#endif
}
// Waits until at most N of the warpgroup's committed groups are in flight.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
#endif
}

// The MVMR kernel's blocks a multiprocessor (its launch bounds): one for the 512-thread wgmma
// blocks, three for the mma.sync blocks of 64 channels (57-66 KB of shared memory; at most 80
// registers, no spills: with the run mask's flags they took 94-101, so two blocks, and the C = 32
// forward 0.70 instead of 0.61 ms on an H200; docs/point_conv_kernels.md), two for the others.
constexpr int mvmr_min_blocks(int bn, bool wg) { return wg && bn == 256 ? 1 : !wg && bn == 64 ? 3 : 2; }
// An H200's (sm_90) shared memory a multiprocessor and what it reserves a block.
constexpr size_t kSmemPerSm = 228 * 1024, kSmemReservedPerBlock = 1024;

// The offset (in elements) of 16-byte chunk `chunk` of row `row` in a stage buffer of rows of BK
// 16-bit elements, unpadded: the chunk index is XORed with the row's place in its 128 bytes of rows,
// so that the 8 rows an ldmatrix reads (one chunk each) and a warp's 16-byte cp.async writes fall
// in distinct banks.
template <int BK>
__device__ __forceinline__ int swizzled(int row, int chunk) {
  constexpr int CH = BK / 8, R = 8 / CH;  // chunks per row, rows per 128 bytes
  return row * BK + ((chunk ^ ((row / R) & (CH - 1))) << 3);
}

// The wgmma MVMR's mbarriers of its sums' pairs of warps: one a boundary between two of a
// warpgroup's four 16-row groups.
constexpr int mvmr_pair_bars(int bn, bool wg) { return wg ? 3 * (mvmr_threads(bn, wg) / 128) : 0; }
// Stage buffers, the tile's sums, the weight stages' mbarriers (kBulk) and the sums' pairs'
// (wgmma), the chunk rows' local rows (4 chunks) and the tile's first segment offsets.
template <class T, int BN, int BM, int MC, int BK, int S, bool WG, bool kBulk = false>
constexpr size_t mvmr_smem() {
  return sizeof(T) * S * (MC + BN) * BK + sizeof(float) * BM * BN +
         sizeof(uint64_t) * ((kBulk ? S : 0) + mvmr_pair_bars(BN, WG)) + sizeof(uint8_t) * 4 * MC +
         sizeof(int) * (kSegCache + 1);
}
// The weight gradient's stage buffers (G and F rows, padded on mma.sync) and the segmented keys'
// part (split keys).
template <class T, class Keys, int BO, int WGN>
constexpr size_t vvor_smem() {
  using P = VvorPolicy;
  constexpr int BC = WGN == 4 ? 256 : BO, kPad = WGN > 0 ? 0 : P::kPad;
  return sizeof(T) * P::kStages * P::KT * (BO + BC + 2 * kPad) +
         (std::is_same_v<Keys, SplitKeys> ? P::kSegmentedBytes : 0);
}

// dst[r, o] = sum over the triplets of r (sorted keys) of mat[k, o, :] . src[s, :]; mat [K, n_out_c,
// n_in_c] (rows contiguous over the source channels). Grid: tiles * ceil(n_out_c / BN) blocks, the
// channel blocks of a tile adjacent (they gather the same source rows, so they meet in L2).
// Pipeline: the stages (chunk, BK channels) run kAhead ahead through cp.async (S - 1, or S - 2
// where wgmma keeps a stage's products in flight), one __syncthreads per stage. WG: the products by
// wgmma (two warpgroups of 64 rows x 64 channels) instead of mma.sync (warps of 32 rows x BN / 4
// channels).
template <class T, class Keys, int BN, int BM, int MC, int BK, int S, bool WG, bool kBulk = false>
__global__ void __launch_bounds__(mvmr_threads(BN, WG), mvmr_min_blocks(BN, WG))
    mvmr_mma_kernel(Keys keys, const int64_t* __restrict__ seg_off, int64_t tile_stride,
                    int64_t k_stride, MvmrKey m, int64_t K, const T* __restrict__ src, int64_t n_in_c,
                    const T* __restrict__ mat, int64_t n_out_c, int64_t n_dst, T* __restrict__ dst, int swz,
                    bool pairs) {
  using P = MvmrPolicy;
  // Keys: SplitKeys (the segmented grouping, read as 32-bit keys) or const uint64_t* (packed).
  constexpr bool kSplit = std::is_same_v<Keys, SplitKeys>;
  using Key = std::conditional_t<kSplit, uint32_t, uint64_t>;
  constexpr int NT = mvmr_threads(BN, WG);
  constexpr int kSegs = BK / 8;                     // 16-byte chunks per stage row
  constexpr int kRowStep = NT / kSegs;              // stage rows loaded by the block per round
  constexpr int kAL = MC / kRowStep, kBL = BN / kRowStep;  // source / weight rows per thread
  static_assert(MC % kRowStep == 0 && BN % kRowStep == 0 && kRowStep % 8 == 0, "whole loads per thread");
  constexpr int NF = BN / 32;  // n8 fragments per warp (mma.sync: a warp covers BN / 4 channels)
  static_assert(BN == 64 || BN == 128 || (WG && BN == 256), "BN");
  static_assert(BK == 32 || BK == 64, "BK");
  static_assert(MC == 64 && MC <= BM && BM <= 128, "MC, BM (local rows fit a byte beside kPast)");
  // Stages loaded ahead: S - 1, or S - 2 where wgmma keeps one stage's products in flight across
  // the next step (S >= 3: its buffer is not reloaded until that step's end).
  constexpr int kWgInFlight = WG && S >= 3 ? 1 : 0, kAhead = S - 1 - kWgInFlight;
  static_assert(S >= 2 && S <= 4 && kAhead <= 3, "the chunk row buffers (4) cover kAhead <= 3 stages ahead");
  static_assert(!WG || ((BN == 128 || BN == 256) && MC == 64), "wgmma: BN / 64 warpgroups of 64 x 64");
  // kBulk: `mat` is the weights' stage images (pack_stages_kernel), one bulk copy a stage.
  static_assert(!kBulk || WG, "bulk weight stages: the wgmma shapes");
  constexpr uint8_t kPast = 0xff;
  extern __shared__ __align__(16) unsigned char smem[];
  T* As = reinterpret_cast<T*>(smem);                    // [S][MC][BK], swizzled
  T* Bs = As + S * MC * BK;                              // [S][BN][BK], swizzled
  // The tile's sums [BM][BN]; swz 24: row r's 8-column groups XORed with r % 4 (within each 32
  // columns, so a float2 stays aligned), so that the chunk sums' float2 adds of four rows of a
  // column fall in distinct banks (rows are 128 or 64 floats apart: the same banks); swz 0: none.
  float* Os = reinterpret_cast<float*>(Bs + S * BN * BK);
  const auto swizzle = [swz](int r) { return (r << 3) & swz; };  // row r's column XOR
  // kBulk: [S] mbarriers, one a stage buffer, on which its weight stage's bulk copy completes;
  // wgmma: the sums' pairs' mbarriers, 3 a warpgroup (PairBars[3 h + q - 1]: boundary q of h).
  uint64_t* Bars = reinterpret_cast<uint64_t*>(Os + BM * BN);
  constexpr int kBars = kBulk ? S : 0, kPairBars = mvmr_pair_bars(BN, WG);
  uint64_t* PairBars = Bars + kBars;
  uint8_t* Rs = reinterpret_cast<uint8_t*>(PairBars + kPairBars);  // [4][MC]: chunk rows' local rows
                                                                    // (kPast past)
  int* Ss = reinterpret_cast<int*>(Rs + 4 * MC);             // [kSegCache + 1]: the tile's segment bounds

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 2, wn = warp & 3;
  if constexpr (WG) {
    if ((smem_u32(smem) & 1023) != 0) __trap();  // the 128-byte swizzle repeats every 1024 bytes
  }
  const int64_t n_cb = (n_out_c + BN - 1) / BN;
  const int64_t tile = blockIdx.x / n_cb;
  const int64_t o0 = (blockIdx.x % n_cb) * BN;
  const int nb = static_cast<int>((n_in_c + BK - 1) / BK);
  const Key src_mask = static_cast<Key>((uint64_t{1} << m.src_bits) - 1);
  const int Ki = static_cast<int>(K);

  for (int e = tid; e < BM * BN; e += NT) Os[e] = 0.0f;
  // The tile's segment bounds (sorted positions fit 31 bits, point_conv_mma_supported): segment k
  // from so[k * k_stride] to so[k * k_stride + 1]; the segments in (tile, k) order (tile_stride K,
  // k_stride 1: each segment ends where the next begins) or in the weight gradient's (k, tile) order
  // (tile_stride 1, k_stride tiles). The first ones in shared memory (the stage sequence reads one at
  // every chunk, on the loads' path): kSegCache + 1 offsets, or kSegCache / 2 (begin, end) pairs;
  // split keys: kSegCache / 3 (begin, end, mid) triples (mid: SplitKeys, segment tile_stride tile +
  // k_stride k).
  const int64_t* so = seg_off + tile * tile_stride;
  const auto mid_of = [&](int k) {
    if constexpr (kSplit) return keys.mid[tile * tile_stride + k * k_stride];
    else return 0;
  };
  const int cs = kSplit ? 3 : k_stride == 1 ? 1 : 2, kc = Ki < kSegCache / cs ? Ki : kSegCache / cs;
  for (int e = tid; e < kc * cs + (cs == 1 ? 1 : 0); e += NT) {
    const int k = e / cs, f = e % cs;
    Ss[e] = kSplit && f == 2 ? mid_of(k) : static_cast<int>(so[k * k_stride + f]);
  }
  if constexpr (WG) {
    if (tid == 0) {
      for (int b = 0; b < kBars; ++b) mbarrier_init(smem_u32(Bars + b), 1);
      for (int b = 0; b < kPairBars; ++b) mbarrier_init(smem_u32(PairBars + b), 32);  // a warp's lanes
      mbarrier_init_fence();
    }
  }
  __syncthreads();
  const auto begin_at = [&](int k) { return k < kc ? Ss[k * cs] : static_cast<int>(so[k * k_stride]); };
  const auto end_at = [&](int k) {
    return k < kc ? Ss[k * cs + 1] : static_cast<int>(so[k * k_stride + 1]);
  };
  const auto mid_at = [&](int k) { return k < kc ? Ss[k * cs + 2] : mid_of(k); };

  // The stage sequence: segments k = 0..K-1 of this tile, MC triplets a chunk, nb stages a chunk;
  // c counts the chunks. 32-bit cursors.
  struct Stage {
    int k, q, n, b, c;  // k == K: past the end
    int md;             // split keys: the segment's mid
  };
  const auto first_chunk = [&](int k, int c) {
    int q = 0, e = 0;
    if (k < Ki) q = begin_at(k), e = end_at(k);
    while (k < Ki && e == q) {
      ++k;
      if (k < Ki) q = begin_at(k), e = end_at(k);
    }
    return Stage{k, q, e - q < MC ? e - q : MC, 0, c, kSplit && k < Ki ? mid_at(k) : 0};
  };
  // The chunk after s's (s.b ignored).
  const auto next_chunk = [&](const Stage& s) {
    const int q = s.q + s.n, e = end_at(s.k);
    if (q < e) return Stage{s.k, q, e - q < MC ? e - q : MC, 0, s.c + 1, s.md};
    return first_chunk(s.k + 1, s.c + 1);
  };

  // Every stage of a chunk loads the same rows through the same threads: source rows
  // a_row0 + u * kRowStep of the chunk and weight rows a_row0 + v * kRowStep of W_k, 16 bytes each
  // (chunk `seg` of the stage's BK channels). Their shared offsets are fixed (kRowStep is a multiple
  // of 8, so every row of the thread has the same swizzle); the global pointers are set when the
  // loads reach a new chunk, from the chunk's keys read one stage ahead (next_key), and move on by
  // BK channels a stage, so a stage's loads are a pointer step each. Rows past the chunk or past
  // the channels load zeros (0 bytes read) from a pointer that stays inside the source or weight
  // rows' first row. The same step stores the chunk rows' local destination rows in Rs for the
  // sums.
  const int ci = static_cast<int>(n_in_c);
  const bool full_k = ci % BK == 0;  // no stage reaches past the channels
  const int seg = tid % kSegs, seg8 = seg * 8, a_row0 = tid / kSegs;
  const uint32_t s_off = smem_u32(As) + 2 * swizzled<BK>(a_row0, seg);  // + u * kRowStep * BK * 2 per row
  constexpr uint32_t kAStage = MC * BK * 2, kBStage = BN * BK * 2, kABytes = S * kAStage;
  Key next_key[kAL];
  const T* a_cur[kAL];
  int a_sz[kAL];
  const T* b_cur[kBL];
  int b_sz[kBL];  // 16 for a weight row of the thread inside the channels (fixed for the block), else 0
  if constexpr (!kBulk) {
#pragma unroll
    for (int v = 0; v < kBL; ++v) b_sz[v] = o0 + a_row0 + v * kRowStep < n_out_c ? 16 : 0;
  }
  // kBulk: the block's weight stages, (k, b) at mat_cb + (k * n_cb * nb + b) * BN * BK.
  [[maybe_unused]] const T* mat_cb = mat + (blockIdx.x % n_cb) * nb * (BN * BK);
  const auto fetch_keys = [&](const Stage& s) {
#pragma unroll
    for (int u = 0; u < kAL; ++u) {
      const int r = a_row0 + u * kRowStep;
      if constexpr (kSplit) next_key[u] = s.k < Ki && r < s.n ? split_key(keys, s.q + r, s.md) : ~Key{0};
      else next_key[u] = s.k < Ki && r < s.n ? keys[s.q + r] : ~Key{0};
    }
  };
  const auto load_stage = [&](const Stage& s, int buf) {
    if (s.b == 0) {
      uint8_t* rs = Rs + (s.c & 3) * MC;
#pragma unroll
      for (int u = 0; u < kAL; ++u) {
        const bool ok = next_key[u] != ~Key{0};
        a_cur[u] = src + (ok ? static_cast<int64_t>(next_key[u] & src_mask) * n_in_c : 0) + seg8;
        a_sz[u] = ok ? 16 : 0;
        if (seg == 0) {
          const uint8_t local = static_cast<uint8_t>((next_key[u] >> m.src_bits) & (BM - 1));
          rs[a_row0 + u * kRowStep] = ok ? local : kPast;
        }
      }
      if constexpr (!kBulk) {
#pragma unroll
        for (int v = 0; v < kBL; ++v)
          b_cur[v] = mat +
                     (b_sz[v] != 0 ? (static_cast<int64_t>(s.k) * n_out_c + o0 + a_row0 + v * kRowStep) * n_in_c
                                   : 0) +
                     seg8;
      }
    }
    const uint32_t as = s_off + buf * kAStage, bs = s_off + kABytes + buf * kBStage;
    if constexpr (kBulk) {
      if (tid == 0)
        bulk_copy_to_shared(smem_u32(Bs) + buf * kBStage,
                            mat_cb + (static_cast<int64_t>(s.k) * n_cb * nb + s.b) * (BN * BK), kBStage,
                            smem_u32(Bars + buf));
    }
    if (full_k) {
#pragma unroll
      for (int u = 0; u < kAL; ++u) cp_async16_shared(as + u * kRowStep * BK * 2, a_cur[u], a_sz[u]);
      if constexpr (!kBulk) {
#pragma unroll
        for (int v = 0; v < kBL; ++v) cp_async16_shared(bs + v * kRowStep * BK * 2, b_cur[v], b_sz[v]);
      }
    } else {
      const bool ch_ok = s.b * BK + seg8 < ci;
#pragma unroll
      for (int u = 0; u < kAL; ++u)
        cp_async16_shared(as + u * kRowStep * BK * 2, ch_ok ? a_cur[u] : src, ch_ok ? a_sz[u] : 0);
      if constexpr (!kBulk) {
#pragma unroll
        for (int v = 0; v < kBL; ++v)
          cp_async16_shared(bs + v * kRowStep * BK * 2, ch_ok ? b_cur[v] : mat, ch_ok ? b_sz[v] : 0);
      }
    }
#pragma unroll
    for (int u = 0; u < kAL; ++u) a_cur[u] += BK;
    if constexpr (!kBulk) {
#pragma unroll
      for (int v = 0; v < kBL; ++v) b_cur[v] += BK;
    }
  };
  // Issues the loads of stage `ld` into buffer `b` and moves `ld` on; entering a new chunk, its
  // keys are requested now and used by the next call.
  const auto load_and_advance = [&](Stage& ld, int b) {
    if (ld.k < Ki) {
      load_stage(ld, b);
      if (++ld.b == nb) {
        ld = next_chunk(ld);
        fetch_keys(ld);
      }
    }
  };

  // The accumulators: MI fragments of 16 rows x NFA n8 blocks per warp. mma.sync: warp (wm, wn)
  // holds rows 32 wm + 16 mi x channels wn * BN / 4 + 8 ni; wgmma: warp w of warpgroup h holds
  // rows 16 (w % 4) x channels 64 h + 8 ni. rg: the warp's group of rows (NG groups of GR rows);
  // ccol: its first channel.
  constexpr int MI = WG ? 1 : 2, NFA = WG ? 8 : NF, NG = WG ? 4 : 2, GR = MC / NG;
  const int rg = WG ? (warp & 3) : wm, ccol = WG ? (warp >> 2) * 64 : wn * (BN / 4);
  const auto frag_row = [&](int mi) { return rg * GR + mi * 16; };
  float acc[MI][NFA][4];
  const auto zero_acc = [&] {
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < NFA; ++ni)
#pragma unroll
        for (int x = 0; x < 4; ++x) acc[mi][ni][x] = 0.0f;
  };
  zero_acc();

  Stage cur = first_chunk(0, 0), ld = cur;
  fetch_keys(ld);
#pragma unroll
  for (int st = 0; st < kAhead; ++st) {
    load_and_advance(ld, st);
    cp_async_commit();
  }
  int buf = 0, ldbuf = kAhead;
  const int g = lane >> 2, q4 = lane & 3;
  // The ldmatrix rows of the lane: weight row (lane & 7) + 8 (lane >> 4) of an n16 pair, chunk
  // ((lane >> 3) & 1); source row (lane & 15) of a fragment, chunk (lane >> 4).
  const int b_lrow = (lane & 7) + ((lane >> 4) << 3), b_lch = (lane >> 3) & 1;
  const int a_lrow = lane & 15, a_lch = lane >> 4;
  [[maybe_unused]] const uint64_t desc_a0 = swizzled_desc<BK>(smem_u32(As));
  [[maybe_unused]] const uint64_t desc_b0 = swizzled_desc<BK>(smem_u32(Bs + (warp >> 2) * 64 * BK));
  [[maybe_unused]] uint32_t phases = 0;  // kBulk: bit b, the parity of buffer b's next weight stage
  [[maybe_unused]] uint32_t pair_ph = 0;  // wgmma pairs: bit q, the parity of boundary q's next phase
  while (cur.k < Ki) {  // a chunk: nb stages, then its sums
    for (int sb = 0; sb < nb; ++sb) {
      pipeline_step<S, kAhead, WG>(ldbuf, [&](int b) { load_and_advance(ld, b); });
      if constexpr (kBulk) {
        mbarrier_wait(smem_u32(Bars + buf), (phases >> buf) & 1);
        phases ^= 1u << buf;
      }
      if constexpr (WG) {
        // The whole chunk (rows past it are zeros) times the warpgroup's 64 channels of W_k; the
        // products of the previous stage may still be in flight (kWgInFlight), and all are done
        // before the chunk's sums.
        // The descriptors of buffer 0 moved on by the buffer's and the k16 step's address / 16
        // (the start address field: shared addresses stay below 2^18 bytes, so no carry leaves it).
        const uint64_t da = desc_a0 + buf * (kAStage >> 4), db = desc_b0 + buf * (kBStage >> 4);
        wgmma_fence();
        pin_registers(acc[0]);
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) wgmma_64x64<T>(acc[0], da + (kk * 2 >> 4), db + (kk * 2 >> 4));
        wgmma_commit();
        wgmma_wait<kWgInFlight>();
        pin_registers(acc[0]);
      } else {
        const T* as = As + buf * MC * BK;
        const T* bs = Bs + buf * BN * BK;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
          unsigned bf[NF][2];
#pragma unroll
          for (int nj = 0; nj < NF; nj += 2) {
            unsigned r[4];
            ldmatrix_x4(r, bs + swizzled<BK>(wn * (BN / 4) + nj * 8 + b_lrow, kk / 8 + b_lch));
            bf[nj][0] = r[0], bf[nj][1] = r[1], bf[nj + 1][0] = r[2], bf[nj + 1][1] = r[3];
          }
#pragma unroll
          for (int mi = 0; mi < MI; ++mi) {
            const int row0 = frag_row(mi);
            if (row0 < cur.n) {  // warp-uniform: fragments wholly past the chunk are skipped
              unsigned a[4];
              ldmatrix_x4(a, as + swizzled<BK>(row0 + a_lrow, kk / 8 + a_lch));
#pragma unroll
              for (int ni = 0; ni < NF; ++ni) mma16816<T>(acc[mi][ni], a, bf[ni][0], bf[ni][1]);
            }
          }
        }
      }
      buf = buf + 1 == S ? 0 : buf + 1;
    }
    if constexpr (WG) {
      wgmma_wait<0>();  // the chunk's last products
      pin_registers(acc[0]);
    }
    // The chunk's products into the tile's sums, fragment by fragment (16 chunk rows; a warp's
    // fragments mi in order, the row groups at once or in turns, below): inside a fragment each
    // run of equal destination rows is summed by a segmented scan over its rows (shuffles across
    // the lane groups g, then the low half's last partial joins the high half), and the run's last
    // row adds the sum into the tile's sums. The order is fixed by the sorted triplets alone. A scan
    // step that adds nothing in the whole warp (no run of the fragment's half reaches that far: most
    // runs are one or two rows long) is skipped, which leaves every sum's bits as they are.
    const uint8_t* rs = Rs + (cur.c & 3) * MC;
    // Two groups write the same sums only where a run of rows crosses the boundary between them
    // (or, for groups two apart, covers the group between). Without such a run all groups add at
    // once; otherwise the even groups' adds of a shared row come first, the odd groups' after
    // them: in phases, a barrier of the block between (groups rg % nph == p in phase p: two
    // phases, even groups then odd, unless a run covers a whole group; then one per group), or,
    // on wgmma where no run covers a group (`pair`), all at once with an mbarrier of the two warps
    // for each crossed boundary, on which the even warp's lanes arrive once they have added their
    // crossing rows, and whose phase the odd warp's lanes wait for after their other rows, before
    // they add their crossing rows. The order follows from the chunk's rows alone (block-uniform),
    // so it stays fixed, and both ways give the same bits.
    // The chunk's runs in one mask, the same in every warp (common/point_conv_runs.hpp): bit r
    // where row r continues the run of row r - 1. The scans' flags are bit operations on it (two
    // ballots a chunk instead of a warp's shuffles and votes of the rows in every fragment).
    static_assert(MC == point_conv_runs::kChunkRows, "one 64-bit mask a chunk");
    const uint32_t cont_lo = __ballot_sync(0xffffffffu, point_conv_runs::continues(rs, lane, kPast));
    const uint32_t cont_hi = __ballot_sync(0xffffffffu, point_conv_runs::continues(rs, lane + 32, kPast));
    const uint64_t cont = cont_lo | static_cast<uint64_t>(cont_hi) << 32;
    const auto one_run = [cont](int a, int b) { return point_conv_runs::one_run(cont, a, b); };
    bool crossed = false;
#pragma unroll
    for (int q = 1; q < NG; ++q) crossed |= one_run(q * GR - 1, q * GR);
    int nph = crossed ? 2 : 1;
    bool pair = false;
    if constexpr (NG > 2) {
      bool covered = false;
#pragma unroll
      for (int q = 1; q + 1 < NG; ++q) covered |= one_run(q * GR - 1, (q + 1) * GR);
      if (covered) nph = NG;
      else if (WG && crossed && pairs) pair = true, nph = 1;
    }
    const auto add_fragment = [&](int mi) {
      const unsigned full = 0xffffffffu;
      const int f0 = frag_row(mi), r0 = f0 + g;
      const int rl = rs[r0] == kPast ? -1 : rs[r0], rh = rs[r0 + 8] == kPast ? -1 : rs[r0 + 8];
      // The scans' flags of the lane's rows (point_conv_runs::run_flags says what each means).
      const point_conv_runs::RunFlags fl = point_conv_runs::run_flags(cont, f0, g, rl >= 0, rh >= 0);
      const bool(&same_l)[3] = fl.same_l, (&same_h)[3] = fl.same_h;
      const bool(&need_l)[3] = fl.need_l, (&need_h)[3] = fl.need_h;
      const bool tail_l = fl.tail_l, tail_h = fl.tail_h, join = fl.join, need_join = fl.need_join;
      float(&v)[NFA][4] = acc[mi];
#pragma unroll
      for (int st = 0; st < 3; ++st) {
        if (need_l[st]) {
#pragma unroll
          for (int ni = 0; ni < NFA; ++ni)
#pragma unroll
            for (int x = 0; x < 2; ++x) {
              const float t = __shfl_up_sync(full, v[ni][x], 4 << st);
              if (same_l[st]) v[ni][x] += t;
            }
        }
        if (need_h[st]) {
#pragma unroll
          for (int ni = 0; ni < NFA; ++ni)
#pragma unroll
            for (int x = 2; x < 4; ++x) {
              const float t = __shfl_up_sync(full, v[ni][x], 4 << st);
              if (same_h[st]) v[ni][x] += t;
            }
        }
      }
      if (need_join) {
#pragma unroll
        for (int ni = 0; ni < NFA; ++ni)
#pragma unroll
          for (int x = 0; x < 2; ++x) {
            const float c7 = __shfl_sync(full, v[ni][x], 28 + q4);
            if (join) v[ni][2 + x] += c7;
          }
      }
      // The sums' addresses of the lane's columns ccol + 8 ni + 2 q4 in rows rl and rh, swizzled:
      // one per n8 block b = ni % kB of the first 32 columns (the swizzle stays inside each 32),
      // the later blocks at immediate offsets from them, so that the adds below stay predicated
      // loads and stores (with the swizzle computed per access they became a branch each, ~15 %
      // slower at C = 256).
      constexpr int kB = NFA < 4 ? NFA : 4;
      float* at_l[kB];
      float* at_h[kB];
      const int sw_l = swizzle(rl), sw_h = swizzle(rh);
#pragma unroll
      for (int b = 0; b < kB; ++b) {
        at_l[b] = Os + rl * BN + ((ccol + b * 8 + 2 * q4) ^ sw_l);
        at_h[b] = Os + rh * BN + ((ccol + b * 8 + 2 * q4) ^ sw_h);
      }
      const auto add_rows = [&](bool add_l, bool add_h) {
#pragma unroll
        for (int ni = 0; ni < NFA; ++ni) {
          if (add_l) {
            float2* o = reinterpret_cast<float2*>(at_l[ni % kB] + ni / kB * (kB * 8));
            const float2 cur_o = *o;
            *o = make_float2(cur_o.x + v[ni][0], cur_o.y + v[ni][1]);
          }
          if (add_h) {
            float2* o = reinterpret_cast<float2*>(at_h[ni % kB] + ni / kB * (kB * 8));
            const float2 cur_o = *o;
            *o = make_float2(cur_o.x + v[ni][2], cur_o.y + v[ni][3]);
          }
        }
      };
      if constexpr (WG) {
        static_assert(MI == 1 && GR == 16 && NG == 4, "pairs: a warp's fragment is its 16-row group");
        if (pair) {
          // The warp's fragment is its group (16 rows): the run of its first row crosses from
          // the warp before (hx: boundary rg), the run of its last row into the warp after (tx:
          // boundary rg + 1); x_l / x_h: the lane's rows that end such a run. Boundary q of
          // warpgroup h: the mbarrier PairBars[3 h + q - 1], on which the even warp's 32 lanes
          // arrive once they have added their crossing rows (release) and for whose phase the
          // odd warp's lanes wait before they add theirs (acquire); bit q of pair_ph, kept alike
          // by both warps (they see the same crossings), is the parity of its next phase. A phase
          // is waited for before the next chunk's stage barrier, so it never runs two ahead.
          const bool hx = rg > 0 && one_run(rg * GR - 1, rg * GR);
          const bool tx = rg + 1 < NG && one_run(rg * GR + GR - 1, (rg + 1) * GR);
          const int hrow = hx ? rs[rg * GR] : -3, trow = tx ? rs[rg * GR + GR - 1] : -3;
          const bool x_l = tail_l && (rl == hrow || rl == trow), x_h = tail_h && (rh == hrow || rh == trow);
          const uint32_t bar_t = smem_u32(PairBars + 3 * (warp >> 2) + rg), bar_h = bar_t - 8;
          const uint32_t ph_h = (pair_ph >> rg) & 1, ph_t = (pair_ph >> (rg + 1)) & 1;
          if ((rg & 1) == 0) {
            add_rows(x_l, x_h);
            if (hx) mbarrier_arrive(bar_h);
            if (tx) mbarrier_arrive(bar_t);
            add_rows(tail_l && !x_l, tail_h && !x_h);
          } else {
            add_rows(tail_l && !x_l, tail_h && !x_h);
            if (hx) mbarrier_wait(bar_h, ph_h);
            if (tx) mbarrier_wait(bar_t, ph_t);
            add_rows(x_l, x_h);
          }
          pair_ph ^= (hx ? 1u << rg : 0u) | (tx ? 1u << (rg + 1) : 0u);
          return;
        }
      }
      add_rows(tail_l, tail_h);
    };
    for (int phase = 0; phase < nph; ++phase) {
      if (phase * GR >= cur.n) break;  // block-uniform: the rest is past the chunk
      if (phase > 0) __syncthreads();
      if (rg % nph == phase) {
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
          if (frag_row(mi) < cur.n) add_fragment(mi);  // warp-uniform
          __syncwarp();
        }
      }
    }
    zero_acc();
    cur = next_chunk(cur);
  }
  cp_async_wait<0>();
  __syncthreads();
  for (int e = tid; e < BM * BN; e += NT) {
    const int r = e / BN, col = e % BN;
    const int64_t row = tile * BM + r, o = o0 + col;
    if (row < n_dst && o < n_out_c)
      dst[row * n_out_c + o] = Elem<T>::from(Os[r * BN + (col ^ swizzle(r))]);
  }
}

// The weights as the bulk-copied MVMR reads them (kBulk): for each (k, block cb of BN output
// channels, stage b of BK input channels) the stage buffer's image, BN rows of BK channels
// swizzled as the kernel's stage rows (swizzled<BK>), zeros past the channels. Weight (k, o, c) is
// mat[k * n_out_c * n_in_c + o * o_stride + c * c_stride] (forward: o_stride n_in_c, c_stride 1;
// the feature gradient's transposed weights read from w [K, n_in_c, n_out_c]: 1, n_out_c).
template <class T, int BN, int BK>
__global__ void pack_stages_kernel(const T* __restrict__ mat, int64_t n_out_c, int64_t n_in_c,
                                   int64_t o_stride, int64_t c_stride, int64_t n_cb, int64_t nb,
                                   int64_t chunks, T* __restrict__ out) {
  constexpr int CH = BK / 8;
  for (int64_t q = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; q < chunks;
       q += int64_t{gridDim.x} * blockDim.x) {
    const int ch = static_cast<int>(q % CH);
    int64_t r = q / CH;
    const int row = static_cast<int>(r % BN);
    r /= BN;
    const int64_t b = r % nb, kc = r / nb, cb = kc % n_cb, k = kc / n_cb;
    T* d = out + r * (BN * BK) + swizzled<BK>(row, ch);
    const int64_t o = cb * BN + row, c0 = b * BK + ch * 8;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int64_t c = c0 + e;
      d[e] = o < n_out_c && c < n_in_c ? mat[k * n_out_c * n_in_c + o * o_stride + c * c_stride]
                                       : Elem<T>::from(0.0f);
    }
  }
}

// wt[k, c, o] = w[k, o, c] (16-bit, bit copies).
template <class T>
__global__ void transpose16_kernel(const T* __restrict__ w, int64_t K, int64_t co, int64_t ci, T* __restrict__ wt) {
  PCOPS_CUDA_GRID_STRIDE(q, K * co * ci) {
    const int64_t k = q / (ci * co), rem = q - k * ci * co, c = rem / co, o = rem - c * co;
    wt[q] = w[(k * co + o) * ci + c];
  }
}

// grad_w[k, o, c] = sum over kernel k's triplets (i, j order) of G[i, o] F[j, c], over slice z.
// Grid (K, ceil(co / BO) * ceil(ci / BO), Z). The sorted keys hold (low i bits, j): kernel k's
// triplets are segments k * tiles .. (k + 1) * tiles - 1 of seg_off, segment k * tiles + h holding
// the rows i with i >> i_bits == h (64-bit keys: tiles == 1, all of i in the key, the k above it
// ignored). cut == 0: one slice (Z == 1), the block writes gw (16-bit). cut > 0: the sorted
// triplets cut every `cut` positions, slice z being kernel k's share of cut z (a cut without k's
// triplets ends the block at once), written as float32 partials part[z + k][o][c] and summed in
// cut order by vvor_sum_cuts_kernel. Pipeline as the MVMR kernel's: kStages - 1 stages ahead, one
// barrier a stage. WGN warpgroups on wgmma instead of mma.sync (0: mma.sync; BO = 128, sm_90a):
// 2: blocks of 128 x 128 channels, warpgroup h taking channels o 64 h .. 64 h + 63 against all
// 128 channels c; 4 (512 threads): blocks of 128 x 256, warpgroup h taking o 64 (h % 2) ..
// against c 128 (h / 2) .. + 127. Each warpgroup two m64n64k16 a k16 step, both operands read
// MN-major from unpadded stage buffers of 64-channel parts, each [KT][64] with the 128-byte
// swizzle.
template <class T, class Keys, int BO, int WGN>
__global__ void __launch_bounds__(WGN == 4 ? 512 : VvorPolicy::kThreads)
    vvor_mma_kernel(Keys keys, const int64_t* __restrict__ seg_off, int64_t tiles, int i_bits,
                    int j_bits, const T* __restrict__ G, int64_t co, const T* __restrict__ F, int64_t ci, int64_t K,
                    int64_t cut, T* __restrict__ gw, float* __restrict__ part) {
  using P = VvorPolicy;
  constexpr bool WG = WGN > 0;
  constexpr int NT = WGN == 4 ? 512 : P::kThreads, BC = WGN == 4 ? 256 : BO, KT = P::KT, S = P::kStages;
  constexpr int LDG = BO + P::kPad, LDF = BC + P::kPad;
  constexpr int MF = BO / 2 / 16, NF = BC / 4 / 8;  // warp tile (BO / 2) x (BC / 4)
  static_assert(NF % 2 == 0, "pairs of n8 fragments");
  static_assert(!WG || (BO == 128 && KT % 16 == 0 && (WGN == 2 || WGN == 4)), "wgmma: 128 x 128 or 256 blocks");
  // A stage row's bytes and a stage buffer's elements (WG: parts of KT rows of 64 channels).
  constexpr int kGRow = WG ? 128 : LDG * 2, kFRow = WG ? 128 : LDF * 2;
  constexpr int kGStage = WG ? KT * BO : KT * LDG, kFStage = WG ? KT * BC : KT * LDF;
  extern __shared__ __align__(16) unsigned char smem[];
  T* Gs = reinterpret_cast<T*>(smem);  // [S][KT][LDG] (WG: [S][2][KT][64], swizzled)
  T* Fs = Gs + S * kGStage;            // [S][KT][LDF] (WG: [S][BC / 64][KT][64], swizzled)
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  [[maybe_unused]] const int wm = warp >> 2, wn = warp & 3;
  const int64_t k = blockIdx.x;
  const int64_t ctiles = (ci + BC - 1) / BC;
  const int64_t oo = int64_t{blockIdx.y / ctiles} * BO, cc = int64_t{blockIdx.y % ctiles} * BC;
  const int64_t seg0 = k * tiles;
  int64_t p0 = seg_off[seg0], p1 = seg_off[seg0 + tiles];
  const int64_t slot = int64_t{blockIdx.z} + k;
  if (cut > 0) {
    p0 = max(p0, int64_t{blockIdx.z} * cut), p1 = min(p1, (int64_t{blockIdx.z} + 1) * cut);
    if (p0 >= p1) return;  // the whole block, before any barrier
  }
  // Sorted positions and rows fit 31 bits (point_conv_mma_supported): 32-bit cursors and rows, a
  // row's address one wide multiply-add from the thread's column base.
  const int pos0 = static_cast<int>(p0), pos1 = static_cast<int>(p1);
  uint32_t jm = (1u << j_bits) - 1, im = static_cast<uint32_t>((uint64_t{1} << i_bits) - 1);
  // The segment of the block's first position (the last of k's whose offset is <= pos0): each
  // stage row's segment moves on from it as its position grows.
  const int64_t first = seg0 + primitives::cloud_of(seg_off + seg0, tiles, p0);

  // Each thread loads the same stage rows r_u in every stage: 8 channels of G and kFC x 8 of F
  // (channels BO apart) in each, at the rows' keys, which it reads from shared memory (below).
  constexpr int kSegs = BO / 8, kRL = KT * kSegs / NT, kFC = BC / BO;
  static_assert(KT * kSegs % NT == 0, "whole loads per thread");
  const int seg8 = (tid % kSegs) * 8;
  const bool g_col = oo + seg8 < co;  // the thread's 8 columns inside the rows
  int g_sz = g_col ? 16 : 0, f_sz[kFC];  // bytes a row of the thread copies
  const char* g_base = reinterpret_cast<const char*>(G + (g_col ? oo + seg8 : 0));
  const char* f_base[kFC];
  const uint32_t g_row = static_cast<uint32_t>(co * sizeof(T)), f_row = static_cast<uint32_t>(ci * sizeof(T));
  // The thread's place in a stage row: its 8 channels (WG: in their 64-channel part, the 16-byte
  // chunk XORed with the row's place in its 8-row atom, the same for all the thread's rows: they
  // are a multiple of 16 apart).
  const auto in_row = [&](int col) -> uint32_t {
    if constexpr (WG) return (col / 64) * (KT * 128) + ((((col % 64) / 8) ^ ((tid / kSegs) & 7)) << 4);
    return 2 * col;
  };
  const uint32_t gs0 = smem_u32(Gs) + in_row(seg8);
  uint32_t fs0[kFC];
#pragma unroll
  for (int v = 0; v < kFC; ++v) {
    const bool f_col = cc + seg8 + v * BO < ci;
    f_sz[v] = f_col ? 16 : 0;
    f_base[v] = reinterpret_cast<const char*>(F + (f_col ? cc + seg8 + v * BO : 0));
    fs0[v] = smem_u32(Fs) + in_row(seg8 + v * BO);
  }
  // Kept in registers (the compiler would rebuild them from the parameters at every stage).
  asm volatile("" : "+r"(jm), "+r"(im), "+r"(g_sz));
#pragma unroll
  for (int v = 0; v < kFC; ++v) asm volatile("" : "+r"(f_sz[v]));
  // The segmented keys (split, SplitKeys: i's place in its block of rows above j; the block from
  // the segment, bit 24 from the segment's mid) pass through shared memory twice over, where the
  // packed keys (64 bits: all of i above j, one segment a kernel cell) are read straight into
  // registers one stage ahead:
  // - a stage's keys are copied into shared memory (cp.async, the 4-byte words around its low
  //   halves and its high parts, a thread a word; slot: the stage's index mod kKeySlots) together
  //   with the data of the stage S - 1 before it, so they have
  //   landed under the same wait and barrier by the time the stage's gathers need them. Loaded
  //   into registers, they went through one more register move at the end of the stage loop,
  //   which waited there for the load just issued (30 % of the kernel's stall samples at C = 128;
  //   Nsight Compute). The packed keys' registers are not moved, and through shared memory they
  //   were slower at 256 and 512 channels (1.20 -> 1.30 ms, 4.20 -> 4.66 ms);
  // - the ends and mids of the block's segments (P::kSegEnds of them at most; a block past them
  //   reads the rest from global memory), which a stage row steps through as its position grows.
  constexpr bool kSegmented = std::is_same_v<Keys, SplitKeys>;
  using Key = std::conditional_t<kSegmented, uint32_t, uint64_t>;
  constexpr int kKS = P::kKeySlots, kKW = P::kKeyWords, kHalfW = kKW / 2;
  static_assert(2 * (S - 1) <= kKS && kKW <= NT, "the key slots in use: S - 1 loading, S - 1 read");
  uint32_t* Ks = reinterpret_cast<uint32_t*>(Fs + S * kFStage);  // [kKS][kKW] (segmented)
  int* Se = reinterpret_cast<int*>(Ks + kKS * kKW);                // [2][P::kSegEnds] (segmented)
  const auto request_keys = [&](int q, int slot) {
    if constexpr (kSegmented) {
      // Word w of the 4-byte words from the one holding the stage's first low half (w < kHalfW) or
      // high part; the arrays are 4-byte aligned and padded past T.
      if (tid < kKW && q < pos1) {
        const bool high = tid >= kHalfW;
        const uintptr_t at = high ? reinterpret_cast<uintptr_t>(keys.hi) + static_cast<uintptr_t>(keys.hb) * q
                                  : reinterpret_cast<uintptr_t>(keys.lo) + 2 * static_cast<uintptr_t>(q);
        const void* word =
            reinterpret_cast<const void*>((at & ~uintptr_t{3}) + 4 * (high ? tid - kHalfW : tid));
        cp_async4(Ks + slot * kKW + tid, word, 4);
      }
    }
  };
  // The key of stage row r of the stage at q (slot), without bit 24 (from the mid, in next_hi).
  [[maybe_unused]] const auto slot_key = [&](int q, int slot, int r) -> uint32_t {
    if constexpr (kSegmented) {
      const unsigned char* kb = reinterpret_cast<const unsigned char*>(Ks + slot * kKW);
      const uint32_t lo = *reinterpret_cast<const uint16_t*>(kb + ((2 * q) & 3) + 2 * r);
      const unsigned char* hb = kb + 4 * kHalfW;
      const uint32_t hi =
          keys.hb == 1 ? hb[(q & 3) + r] : *reinterpret_cast<const uint16_t*>(hb + ((2 * q) & 3) + 2 * r);
      return lo | hi << 16;
    } else {
      return 0;
    }
  };
  const int nc = kSegmented ? static_cast<int>(min(int64_t{P::kSegEnds}, seg0 + tiles - first)) : 0;
  int* Sm = Se + P::kSegEnds;
  for (int e = tid; e < nc; e += NT) {  // (barrier below)
    Se[e] = static_cast<int>(seg_off[first + 1 + e]);
    if constexpr (kSegmented) Sm[e] = keys.mid[first + e];
  }
  const auto seg_end = [&](int64_t sg) {
    return sg - first < nc ? Se[sg - first] : static_cast<int>(seg_off[sg + 1]);
  };
  const auto seg_mid = [&](int64_t sg) {
    if constexpr (kSegmented) return sg - first < nc ? Sm[sg - first] : keys.mid[sg];
    else return 0;
  };
  // i's bit that the split keys' bit 24 becomes (where j takes at most 24 bits).
  const uint32_t top_i = j_bits <= 24 ? 1u << (24 - j_bits) : 0u;
  // Each stage row's segment (sc), its end (se) and mid (sm), the high bits of i it gives (next_hi),
  // and (packed) its key, one stage ahead of the gathers.
  Key next_key[kRL];
  bool next_ok[kRL];
  int64_t sc[kRL];
  int se[kRL], sm[kRL];
  uint32_t next_hi[kRL];
#pragma unroll
  for (int u = 0; u < kRL; ++u) {  // (from global memory: the shared copies are complete after the barrier)
    sc[u] = first, se[u] = static_cast<int>(seg_off[first + 1]);
    if constexpr (kSegmented) sm[u] = keys.mid[first];
  }
  const auto fetch_rows = [&](int q) {
#pragma unroll
    for (int u = 0; u < kRL; ++u) {
      const int r = (tid + u * NT) / kSegs, p = q + r;
      next_ok[u] = p < pos1;
      if constexpr (!kSegmented) next_key[u] = next_ok[u] ? keys[p] : 0;
      if (next_ok[u])
        while (p >= se[u]) {
          se[u] = seg_end(++sc[u]);
          if constexpr (kSegmented) sm[u] = seg_mid(sc[u]);
        }
      uint32_t hi = static_cast<uint32_t>(sc[u] - seg0) << i_bits;
      if constexpr (kSegmented) hi |= p >= sm[u] ? top_i : 0u;
      next_hi[u] = next_ok[u] ? hi : 0;
    }
  };
  const auto load_stage = [&](int q, int buf, int slot) {
    const uint32_t gs = gs0 + buf * (kGStage * 2);
#pragma unroll
    for (int u = 0; u < kRL; ++u) {
      const int r = (tid + u * NT) / kSegs;
      // A row past the slice reads row 0 with 0 bytes.
      Key key;
      if constexpr (kSegmented) key = slot_key(q, slot, r);
      else key = next_key[u];
      const uint32_t i = next_ok[u] ? next_hi[u] | (static_cast<uint32_t>(key >> j_bits) & im) : 0u;
      const uint32_t j = next_ok[u] ? static_cast<uint32_t>(key) & jm : 0u;
      cp_async16_shared(gs + r * kGRow, g_base + static_cast<uint64_t>(i) * g_row, next_ok[u] ? g_sz : 0);
#pragma unroll
      for (int v = 0; v < kFC; ++v)
        cp_async16_shared(fs0[v] + buf * (kFStage * 2) + r * kFRow, f_base[v] + static_cast<uint64_t>(j) * f_row,
                          next_ok[u] ? f_sz[v] : 0);
    }
    fetch_rows(q + KT);
  };

  // mma.sync: acc[mi][ni] of the warp's tile; WG: acc[nb][j], channels c 64 nb + 8 j.
  constexpr int AM = WG ? 2 : MF, AN = WG ? 8 : NF;
  float acc[AM][AN][4];
#pragma unroll
  for (int mi = 0; mi < AM; ++mi)
#pragma unroll
    for (int ni = 0; ni < AN; ++ni)
#pragma unroll
      for (int x = 0; x < 4; ++x) acc[mi][ni][x] = 0.0f;

  // lq, ls: the next stage to load and its index. Segmented, the keys of the first S - 1 stages
  // before anything else; each stage's loads request the keys of the stage S - 1 after it.
  int lq = pos0, ls = 0;
  if constexpr (kSegmented) {  // (and the segment ends above: one barrier for both)
    for (int st = 0; st < S - 1; ++st) request_keys(pos0 + st * KT, st);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
  }
  fetch_rows(lq);
  const auto load_next = [&](int b) {
    if (lq < pos1) {
      load_stage(lq, b, ls % kKS);
      request_keys(lq + (S - 1) * KT, (ls + S - 1) % kKS);
      lq += KT, ++ls;
    }
  };
#pragma unroll
  for (int st = 0; st < S - 1; ++st) {
    load_next(st);
    cp_async_commit();
  }
  int buf = 0, ldbuf = S - 1;
  if constexpr (WG) {
    if ((smem_u32(smem) & 1023) != 0) __trap();  // the 128-byte swizzle repeats every 1024 bytes
  }
  for (int q = pos0; q < pos1; q += KT) {
    pipeline_step<S, S - 1, WG>(ldbuf, load_next);
    if constexpr (WG) {
      // Warpgroup h: its 64 channels o of G (A, MN-major) against its two 64-channel parts of F
      // (B); a k16 step is two 8-row atoms, 2048 bytes. Done before the next barrier frees the
      // buffer.
      const int h = warp >> 2;
      const uint32_t ga = smem_u32(Gs + buf * kGStage) + (h & 1) * (KT * 128);
      const uint32_t fa = smem_u32(Fs + buf * kFStage) + (h >> 1) * (2 * KT * 128);
      wgmma_fence();
      pin_registers(acc[0]);
      pin_registers(acc[1]);
#pragma unroll
      for (int kk = 0; kk < KT; kk += 16) {
        const uint64_t da = swizzled_desc_mn(ga + kk * 128);
#pragma unroll
        for (int nb = 0; nb < 2; ++nb) wgmma_64x64<T, true>(acc[nb], da, swizzled_desc_mn(fa + nb * (KT * 128) + kk * 128));
      }
      wgmma_commit();
      wgmma_wait<0>();
      pin_registers(acc[0]);
      pin_registers(acc[1]);
    } else {
      const T* gs = Gs + buf * KT * LDG;
      const T* fs = Fs + buf * KT * LDF;
#pragma unroll
      for (int kk = 0; kk < KT; kk += 16) {
        unsigned bf[NF][2];
#pragma unroll
        for (int nj = 0; nj < NF; nj += 2) {
          // Matrices (t 0-7, c 0-7), (t 8-15, c 0-7), (t 0-7, c 8-15), (t 8-15, c 8-15), transposed.
          unsigned r[4];
          const int mi4 = lane >> 3;
          const int t = kk + (lane & 7) + ((mi4 & 1) << 3);
          const int c = wn * (BC / 4) + nj * 8 + ((mi4 >> 1) << 3);
          ldmatrix_x4_trans(r, fs + t * LDF + c);
          bf[nj][0] = r[0], bf[nj][1] = r[1], bf[nj + 1][0] = r[2], bf[nj + 1][1] = r[3];
        }
#pragma unroll
        for (int mi = 0; mi < MF; ++mi) {
          // Matrices (o 0-7, t 0-7), (o 8-15, t 0-7), (o 0-7, t 8-15), (o 8-15, t 8-15), transposed.
          unsigned a[4];
          const int mi4 = lane >> 3;
          const int t = kk + (lane & 7) + ((mi4 >> 1) << 3);
          const int o = wm * (BO / 2) + mi * 16 + ((mi4 & 1) << 3);
          ldmatrix_x4_trans(a, gs + t * LDG + o);
#pragma unroll
          for (int ni = 0; ni < NF; ++ni) mma16816<T>(acc[mi][ni], a, bf[ni][0], bf[ni][1]);
        }
      }
    }
    buf = buf + 1 == S ? 0 : buf + 1;
  }
  cp_async_wait<0>();
  const int g = lane >> 2, q4 = lane & 3;
  // Elements (o, c) and (o, c + 1) of the block's result, those inside W_k: into gw (one slice) or
  // the slice's partials.
  const auto put = [&](int64_t o, int64_t c, float v0, float v1) {
    const int64_t at = (k * co + o) * ci;
    for (int x = 0; x < 2; ++x) {
      if (o >= co || c + x >= ci) continue;
      if (cut == 0) gw[at + c + x] = Elem<T>::from(x == 0 ? v0 : v1);
      else part[slot * co * ci + (o * ci + c + x)] = x == 0 ? v0 : v1;
    }
  };
  if constexpr (WG) {
#pragma unroll
    for (int nb = 0; nb < 2; ++nb)
#pragma unroll
      for (int jn = 0; jn < 8; ++jn)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t o = oo + ((warp >> 2) & 1) * 64 + (warp & 3) * 16 + g + 8 * h;
          const int64_t c = cc + (warp >> 3) * 128 + nb * 64 + jn * 8 + 2 * q4;
          put(o, c, acc[nb][jn][2 * h], acc[nb][jn][2 * h + 1]);
        }
  } else {
#pragma unroll
    for (int mi = 0; mi < MF; ++mi)
#pragma unroll
      for (int ni = 0; ni < NF; ++ni)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t o = oo + wm * (BO / 2) + mi * 16 + g + 8 * h;
          const int64_t c = cc + wn * (BC / 4) + ni * 8 + 2 * q4;
          put(o, c, acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]);
        }
  }
}

// gw[e] = the partials of the cuts of `cut` sorted positions, summed in order (float32) and rounded
// once: element e of kernel k (per = co * ci elements a kernel; k's triplets at seg_off[k * tiles]
// to seg_off[(k + 1) * tiles]) sums the partials of the cuts its triplets reach, z0 = lo / cut to
// (hi - 1) / cut, in order (slots z + k); a kernel without triplets gets 0.
template <class T>
__global__ void vvor_sum_cuts_kernel(const float* __restrict__ part, const int64_t* __restrict__ seg_off,
                                     int64_t tiles, int64_t cut, int64_t per, int64_t count, T* __restrict__ gw) {
  PCOPS_CUDA_GRID_STRIDE(e, count) {
    const int64_t k = e / per, r = e - k * per, lo = seg_off[k * tiles], hi = seg_off[(k + 1) * tiles];
    float acc = 0.0f;
    if (hi > lo) {
      const int64_t z0 = lo / cut, z1 = (hi - 1) / cut;
      acc = part[(z0 + k) * per + r];
      for (int64_t z = z0 + 1; z <= z1; ++z) acc += part[(z + k) * per + r];
    }
    gw[e] = Elem<T>::from(acc);
  }
}

// The fast path's groupings: the triplets in segments (MVMR: tile of destination rows x kernel
// cell; VVOR: kernel cell x block of output rows, one block for the packed keys), each segment's
// keys ascending, and the segments' offsets (segments + 1 of them; invalid triplets, in a segment
// of their own, after the last). Either way the order is (segment, key), so both give the same
// positions and the same bits.
// - "segmented": each triplet is placed into its segment with a 32-bit key by counting (a count a
//   triplet, an exclusive scan of the counts, a cursor a triplet; a warp's lanes of one segment
//   take their places at once), then each segment's keys are sorted (segment_sort_window_kernel,
//   segment_sort_long_kernel; equal keys are equal triplets, so the arbitrary placement order
//   inside a segment leaves no trace). 8 bytes a triplet during the sort; then the keys are split
//   (SplitKeys: the low 16 bits, the next 8, and the 25th bit from the segment's mid, where a key
//   has at most 25 bits, as up to 2^18 source points; the next 16 bits beyond), 3 bytes a triplet
//   (4 beyond) and a mid a segment, and the 32-bit keys released (7 bytes a triplet meanwhile).
// - "packed": one radix sort of 64-bit keys (segment above key), 16 bytes a triplet during the
//   sort, 8 after it.
// Both take about the same time at 2.64M triplets (0.21 ms for the MVMR's, 0.2-0.25 ms for the
// weight gradient's on an H200), but the weight-gradient kernel finds the row blocks of the
// segmented keys on its own (a search at each block's start, a step at each block boundary), and
// on them it takes 0.31 / 0.49 / 1.39 / 4.82 ms against 0.28 / 0.44 / 1.20 / 4.20 ms on the
// packed keys at C = 64 / 128 / 256 / 512. So the default takes "segmented" where its memory
// matters and where a key fits 31 bits: for the MVMR where the sort's second buffer (8 bytes a
// triplet) would be at least as large as the step's 16-bit output (its destination), or where
// the grouping is kept; for the weight gradient where the packed keys (8 bytes a triplet, kept or
// the sort's second buffer) would be at least half the 16-bit features (the gradient that
// follows it): C <= 128 at 16 triplets a point, which halves the kept grouping there (and the
// forward shares it) for a tenth more of the weight gradient's time; "packed" otherwise.
// PCOPS_CUDA_POINT_CONV_FAST_GROUPING=segmented / packed takes one of them wherever it can (the
// tests compare both).
enum class FastGrouping { kAuto, kSegmented, kPacked };
FastGrouping fast_grouping() {
  const char* e = std::getenv("PCOPS_CUDA_POINT_CONV_FAST_GROUPING");
  if (e == nullptr || *e == 0) return FastGrouping::kAuto;
  if (std::strcmp(e, "segmented") == 0) return FastGrouping::kSegmented;
  if (std::strcmp(e, "packed") == 0) return FastGrouping::kPacked;
  throw std::invalid_argument("pcops point_conv: PCOPS_CUDA_POINT_CONV_FAST_GROUPING must be segmented or packed");
}

// The weight gradient's products on wgmma (vvor_mma_kernel's WGN warpgroups): the most
// warpgroups PCOPS_CUDA_POINT_CONV_FAST_VVOR asks for, taken where wgmma can run: "wgmma256" or
// unset 4 (blocks of 128 x 256 channels, where the features have more than 128 channels; 128 x
// 128 below), "wgmma" 2 (128 x 128), "mma" 0 (mma.sync, as everywhere wgmma cannot run). On the
// H200 at 2.64M triplets, grad_weights alone, the same bits from all three
// (point-conv-vvor-choices-cuda-20261202-013800-77fca3a.json): 0.47 / 0.42 / 0.42 ms at C =
// 128, 1.37 / 1.19 / 1.12 ms at 256, 5.5 / 4.9 / 4.45 ms at 512 (mma, wgmma, wgmma256).
int vvor_wgmma() {
  const char* e = std::getenv("PCOPS_CUDA_POINT_CONV_FAST_VVOR");
  const std::string_view v = e == nullptr ? "" : e;
  if (v == "mma") return 0;
  if (v.empty() || v == "wgmma256") return wgmma_usable() ? 4 : 0;
  if (v == "wgmma") return wgmma_usable() ? 2 : 0;
  throw std::invalid_argument("pcops point_conv: PCOPS_CUDA_POINT_CONV_FAST_VVOR must be mma, wgmma or wgmma256");
}

// Whether a step whose 16-bit output has `out_elems` elements groups its T triplets "segmented"
// (where the keys fit 31 bits): where `bytes` a triplet are at least as large as 2 bytes an
// element; `kept`: a grouping kept across calls, where the smaller form is taken for the MVMR (its
// sort's memory no longer meets the output; the MVMR kernel runs as fast).
bool take_segmented(int64_t T_, int64_t out_elems, int64_t bytes, bool kept = false) {
  const FastGrouping g = fast_grouping();
  return g == FastGrouping::kSegmented || (g == FastGrouping::kAuto && (kept || bytes * T_ >= 2 * out_elems));
}

struct Grouped {
  SplitKeys sk{};  // one of the two (segmented: sk.lo set)
  const uint64_t* k64 = nullptr;
  const int64_t* offsets = nullptr;
};

// Triplet p's segment (`segments` where invalid, key 0) and key: MVMR (local destination row,
// source row); VVOR (low i_bits bits of i, j; i_bits covers all of i for the packed keys). The
// segmented grouping keeps keys below 2^31, the packed one puts the segment above them.
struct MvmrPlace {
  int dst_col, src_col;
  int64_t n_dst, n_src, K;
  MvmrKey m;
  __device__ void operator()(const int64_t* t, int64_t p, int64_t& seg, uint64_t& key) const {
    const TripletAt x = triplet_at(t, p, dst_col, n_dst, src_col, n_src, K);
    seg = x.ok ? (x.a / m.bm) * K + x.k : m.segments;
    key = x.ok ? (static_cast<uint64_t>(x.a % m.bm) << m.src_bits) | static_cast<uint64_t>(x.b) : 0;
  }
};
using VvorPlace = point_conv_places::CellBlock;

// keys[p] = (segment << key_bits) | key of triplet p (the packed grouping's keys).
template <class Place>
__global__ void packed_keys_kernel(const int64_t* __restrict__ t, int64_t T, Place place, int key_bits,
                                   uint64_t* __restrict__ keys) {
  PCOPS_CUDA_GRID_STRIDE(p, T) {
    int64_t seg;
    uint64_t key;
    place(t, p, seg, key);
    keys[p] = (static_cast<uint64_t>(seg) << key_bits) | key;
  }
}

// The split form of sorted 32-bit keys (SplitKeys): lo[p], hi[p] (hb bytes) of keys[p], and zeros in
// the kSplitPad bytes past each array's T entries.
__global__ void split_keys_kernel(const uint32_t* __restrict__ keys, int64_t T, int hb,
                                  uint16_t* __restrict__ lo, unsigned char* __restrict__ hi) {
  PCOPS_CUDA_GRID_STRIDE(p, T + static_cast<int64_t>(kSplitPad)) {
    const uint32_t key = p < T ? keys[p] : 0u;
    const bool half = p < T + static_cast<int64_t>(kSplitPad / 2);  // inside the 16-bit arrays
    if (half) lo[p] = static_cast<uint16_t>(key);
    if (hb == 1) hi[p] = static_cast<unsigned char>(key >> 16);
    else if (half) reinterpret_cast<uint16_t*>(hi)[p] = static_cast<uint16_t>(key >> 16);
  }
}
// mid[s] of segments 0..n (offsets[s] to offsets[s + 1]): with `find`, the first position whose
// key has bit 24 (the keys of a segment ascend, so they form its tail), else the segment's end.
__global__ void split_mids_kernel(const uint32_t* __restrict__ keys, const int64_t* __restrict__ offsets,
                                  int64_t n, bool find, int* __restrict__ mid) {
  PCOPS_CUDA_GRID_STRIDE(s, n + 1) {
    int64_t lo = offsets[s], hi = offsets[s + 1];
    if (!find) lo = hi;
    while (lo < hi) {
      const int64_t m = lo + (hi - lo) / 2;
      if (keys[m] >> 24) hi = m;
      else lo = m + 1;
    }
    mid[s] = static_cast<int>(lo);
  }
}

// "packed": T keys (segment << key_bits) | key, segments + 1 segments, sorted by one radix sort on
// their low bits_for(segments) + key_bits bits; the segments' offsets from the sorted keys. The
// radix sort runs on two buffers, the keys and a second one (CUB's double-buffer form needs no
// third copy in its temporary storage); the buffer that does not hold the result and the
// temporary storage go back to the allocator once the sort is enqueued, before the caller
// allocates its output.
template <class Place>
Grouped group_packed(const CudaContext& ctx, detail::Workspace& ws, const int64_t* t, int64_t T_, int64_t segments,
                     int key_bits, const Place& place) {
  const cudaStream_t stream = detail::stream_of(ctx);
  auto* keys = ws.alloc<uint64_t>(std::max<int64_t>(T_, 1));
  auto* alt = ws.alloc<uint64_t>(std::max<int64_t>(T_, 1));
  int64_t* offsets = ws.alloc<int64_t>(segments + 1);
  const uint64_t* sorted = keys;
  const int bits = bits_for(segments) + key_bits;
  constexpr int NT = 256;
  if (T_ > 0) {
    detail::launch(ctx, packed_keys_kernel<Place>, dim3(detail::grid_blocks(T_, NT)), dim3(NT), 0, t, T_, place,
                   key_bits, keys);
    cub::DoubleBuffer<uint64_t> db(keys, alt);
    size_t temp_bytes = 0;
    PCOPS_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(nullptr, temp_bytes, db, T_, 0, bits, stream));
    void* temp = ws.bytes(temp_bytes);
    PCOPS_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(temp, temp_bytes, db, T_, 0, bits, stream));
    sorted = db.Current();
    ws.release(temp);
  }
  ws.release(sorted == keys ? alt : keys);
  detail::launch(ctx, primitives::sorted_offsets_kernel<uint64_t>, dim3(detail::grid_blocks(segments + 1, NT)),
                 dim3(NT), 0, sorted, T_, key_bits, segments, offsets);
  Grouped g;
  g.k64 = sorted, g.offsets = offsets;
  return g;
}

// One step's grouping of the triplets: what it sorts and how (the key layout of its placement
// and the form, segmented 32-bit or packed 64-bit keys). A function of the shape alone (and of
// PCOPS_CUDA_POINT_CONV_FAST_GROUPING), so a grouping made ahead (point_conv_mma_group) is the one
// the step would make.
struct GroupSpec {
  bool none = true;  // the step groups nothing (an empty product)
  bool vvor = false;
  bool packed = false;
  int64_t T = 0, segments = 0;  // segments: the valid ones (one more holds the invalid triplets)
  int key_bits = 0;
  MvmrPlace mp{};
  VvorPlace vp{};
  MvmrConfig cfg{};  // MVMR
  // MVMR: the segments in the weight gradient's (k, tile) order, grouped by vp: the forward reading
  // the weight gradient's grouping (vvor_spec), whose keys are its own (forward_spec).
  bool cell_major = false;
  // The form kept and read (one buffer, each part at a 256-byte boundary): offsets [segments + 2]
  // int64, then the packed keys [T] uint64, or the split keys' mids [segments + 1] int32, low
  // halves [T] uint16 and high parts [T] of hb bytes (SplitKeys; these two padded by kSplitPad).
  static size_t up256(size_t b) { return (b + 255) / 256 * 256; }
  int hb() const { return key_bits <= 25 ? 1 : 2; }
  size_t keys_at() const { return up256(sizeof(int64_t) * static_cast<size_t>(segments + 2)); }
  size_t lo_at() const { return keys_at() + up256(sizeof(int) * static_cast<size_t>(segments + 1)); }
  size_t hi_at() const { return lo_at() + up256(2 * static_cast<size_t>(T) + kSplitPad); }
  size_t bytes() const {
    if (none) return 0;
    if (packed) return keys_at() + 8 * static_cast<size_t>(std::max<int64_t>(T, 1));
    return hi_at() + static_cast<size_t>(hb()) * static_cast<size_t>(T) + kSplitPad;
  }
};

// The MVMR's grouping: segments (tile of bm destination rows, k), keys (local row, source row);
// n_out_c: the destination's channels, n_in_c the source's.
GroupSpec mvmr_spec(int64_t T_, int dst_col, int src_col, int64_t n_dst, int64_t n_src, int64_t K, int64_t n_out_c,
                    int64_t n_in_c, bool kept) {
  GroupSpec g;
  g.none = n_dst * n_out_c == 0 || n_in_c == 0;
  g.cfg = mvmr_config(n_out_c, n_in_c);
  const MvmrKey m = mvmr_key(n_dst, n_src, K, g.cfg.bm);
  g.mp = MvmrPlace{dst_col, src_col, n_dst, n_src, K, m};
  g.T = T_, g.segments = m.segments, g.key_bits = m.local_bits + m.src_bits;
  g.packed = !(g.key_bits <= 31 && m.segments < (int64_t{1} << 31) &&
               take_segmented(T_, n_dst * n_out_c, 8, kept));
  return g;
}

// The weight gradient's grouping. Segmented: kernel cell x blocks of 2^key_i rows i (at most
// 128), the low key_i bits of i beside j in 31 bits (at most as many segments as triplets, or
// 2^16); packed: one segment a kernel cell, (k, i, j).
GroupSpec vvor_spec(const PointConvShape& s) {
  GroupSpec g;
  const int64_t K = s.kernels, T_ = s.triplets;
  g.none = K * s.channels_out * s.channels_in == 0;
  g.vvor = true;
  const VvorKey vk = vvor_key(s);
  const int key_i = std::min({vk.i_bits, 31 - vk.j_bits, 7});
  const int64_t tiles_seg = key_i >= 0 ? detail::ceil_div(std::max<int64_t>(s.num_out, 1), int64_t{1} << key_i) : 0;
  const bool segmented = key_i >= 0 && K * tiles_seg <= std::max<int64_t>(T_, int64_t{1} << 16) &&
                         take_segmented(T_, s.num_in * s.channels_in, 16);
  g.packed = !segmented;
  // vp.tiles: row blocks a kernel cell (1: packed); vp.i_bits: the bits of i in a key.
  g.vp = VvorPlace{s.num_out, s.num_in, K, segmented ? tiles_seg : 1, segmented ? key_i : vk.i_bits,
                   vk.j_bits};
  g.T = T_, g.segments = K * g.vp.tiles, g.key_bits = g.vp.i_bits + vk.j_bits;
  return g;
}

// The forward's grouping. Kept across calls, it is the weight gradient's where that is segmented
// too: then a segment (k, block of 128 rows i) holds the triplets of the MVMR's segment (tile of 128
// rows i, k) with the same keys (i's place in its 128 rows above j; where the rows fit one block,
// i itself, its bits fewer than 7), only the segments' order differs, which the MVMR kernel takes
// as strides. A layer then keeps and sorts two groupings, not three.
GroupSpec forward_spec(const PointConvShape& s, bool kept) {
  GroupSpec g = mvmr_spec(s.triplets, 0, 1, s.num_out, s.num_in, s.kernels, s.channels_out, s.channels_in, kept);
  if (!kept || g.none || g.packed) return g;
  const GroupSpec v = vvor_spec(s);
  // The same blocks of rows (or one block holding all of them) and the same source-row bits.
  const bool same_blocks = (int64_t{1} << v.vp.i_bits) == g.cfg.bm || v.vp.tiles == 1;
  if (v.none || v.packed || v.vp.tiles != g.mp.m.tiles || !same_blocks || v.vp.j_bits != g.mp.m.src_bits)
    return g;
  g.cell_major = true;
  g.vp = v.vp, g.segments = v.segments, g.key_bits = v.key_bits;
  return g;
}

// `kept`: the form of a grouping kept across calls (point_conv_mma_group), else the call's own.
GroupSpec step_spec(const PointConvShape& s, PointConvStep step, bool kept) {
  switch (step) {
    case PointConvStep::kForward:
      return forward_spec(s, kept);
    case PointConvStep::kGradFeatures:
      return mvmr_spec(s.triplets, 1, 0, s.num_in, s.num_out, s.kernels, s.channels_in, s.channels_out, kept);
    case PointConvStep::kGradWeights:
      return vvor_spec(s);
  }
  throw std::invalid_argument("pcops point_conv: unknown step");
}

// f(place) with the placement spec g sorts by: the weight gradient's (also where the forward reads
// its grouping) or the MVMR's.
template <class F>
auto with_place(const GroupSpec& g, F&& f) {
  return g.vvor || g.cell_major ? f(g.vp) : f(g.mp);
}

// The grouping of spec g in its form (GroupSpec::bytes) at `base`.
Grouped grouping_at(const GroupSpec& g, const void* base_) {
  const auto* base = static_cast<const unsigned char*>(base_);
  Grouped gr;
  gr.offsets = reinterpret_cast<const int64_t*>(base);
  if (g.packed) gr.k64 = reinterpret_cast<const uint64_t*>(base + g.keys_at());
  else
    gr.sk = SplitKeys{reinterpret_cast<const uint16_t*>(base + g.lo_at()), base + g.hi_at(),
                      reinterpret_cast<const int*>(base + g.keys_at()), g.hb()};
  return gr;
}

// The segmented grouping of spec g (not packed) written in its form at `base` (g.bytes() bytes; null:
// taken from ws once the sort's second buffer is gone): sorted as 32-bit keys in ws
// (primitives::group_segmented), then split; the 32-bit keys and their offsets go back to ws.
unsigned char* group_split(const CudaContext& ctx, detail::Workspace& ws, const GroupSpec& g,
                           const int64_t* t, unsigned char* base) {
  const primitives::SegmentedKeys sk = with_place(g, [&](const auto& place) {
    return primitives::group_segmented(ctx, ws, t, g.T, g.segments, g.key_bits, place);
  });
  if (base == nullptr) base = static_cast<unsigned char*>(ws.bytes(g.bytes()));
  const cudaStream_t stream = detail::stream_of(ctx);
  PCOPS_CUDA_CHECK(cudaMemcpyAsync(base, sk.offsets, sizeof(int64_t) * (g.segments + 2),
                                   cudaMemcpyDeviceToDevice, stream));
  constexpr int NT = 256;
  const int hb = g.hb();
  detail::launch(ctx, split_keys_kernel, dim3(detail::grid_blocks(g.T + static_cast<int64_t>(kSplitPad), NT)),
                 dim3(NT), 0, static_cast<const uint32_t*>(sk.keys), g.T, hb,
                 reinterpret_cast<uint16_t*>(base + g.lo_at()), base + g.hi_at());
  detail::launch(ctx, split_mids_kernel, dim3(detail::grid_blocks(g.segments + 1, NT)), dim3(NT), 0,
                 static_cast<const uint32_t*>(sk.keys), static_cast<const int64_t*>(sk.offsets), g.segments,
                 hb == 1 && g.key_bits == 25, reinterpret_cast<int*>(base + g.keys_at()));
  ws.release(sk.keys);
  ws.release(sk.offsets);
  return base;
}

// The grouping of spec: read from `kept` (made ahead) or sorted now in ws.
Grouped group_step(const CudaContext& ctx, detail::Workspace& ws, const GroupSpec& g, const int64_t* t,
                   const void* kept) {
  if (kept != nullptr) return grouping_at(g, kept);
  if (g.packed) {
    return with_place(g, [&](const auto& place) {
      return group_packed(ctx, ws, t, g.T, g.segments, g.key_bits, place);
    });
  }
  return grouping_at(g, group_split(ctx, ws, g, t, nullptr));
}

// One MVMR (spec g): dst [n_dst, n_out_c] comes from dst_alloc once the keys are sorted (their
// second buffer released). mat: the weights [K, n_out_c, n_in_c], or with mat_transposed [K,
// n_in_c, n_out_c] (the feature gradient's, read transposed).
template <class T>
void run_mvmr(const CudaContext& ctx, detail::Workspace& ws, const GroupSpec& g, const int64_t* triplets,
              const void* kept, const T* src, int64_t n_in_c, const T* mat, int64_t n_out_c,
              const OutputAllocator& dst_alloc, bool mat_transposed = false) {
  const int64_t n_dst = g.mp.n_dst, K = g.mp.K;
  if (n_in_c == 0) {  // every sum empty: +0 (the kernel needs at least one stage a chunk)
    PCOPS_CUDA_CHECK(cudaMemsetAsync(dst_alloc(), 0, sizeof(T) * n_dst * n_out_c, detail::stream_of(ctx)));
    return;
  }
  const MvmrConfig& cfg = g.cfg;
  const MvmrKey& m = g.mp.m;
  constexpr int NT = 256;
  if (cfg.bulk) {  // the weight stages' images (pack_stages_kernel)
    const int64_t n_cb = detail::ceil_div(n_out_c, cfg.bn), nb = detail::ceil_div(n_in_c, cfg.bk);
    const int64_t chunks = K * n_cb * nb * cfg.bn * (cfg.bk / 8);
    T* packed = ws.alloc<T>(chunks * 8);
    const int64_t os = mat_transposed ? 1 : n_in_c, cs = mat_transposed ? n_out_c : 1;
    const dim3 grid(static_cast<unsigned>(std::min<int64_t>(detail::grid_blocks(chunks, NT), 65535)));
    const bool wide = cfg.bn == 256;
    const auto pack = cfg.bk == 64 ? (wide ? pack_stages_kernel<T, 256, 64> : pack_stages_kernel<T, 128, 64>)
                                   : (wide ? pack_stages_kernel<T, 256, 32> : pack_stages_kernel<T, 128, 32>);
    detail::launch(ctx, pack, grid, dim3(NT), 0, mat, n_out_c, n_in_c, os, cs, n_cb, nb, chunks, packed);
    mat = packed;
  } else if (mat_transposed) {  // wt[k, o, c] = mat[k, c, o]
    T* wt = ws.alloc<T>(std::max<int64_t>(K * n_in_c * n_out_c, 1));
    const int64_t n = K * n_in_c * n_out_c;
    detail::launch(ctx, transpose16_kernel<T>, dim3(detail::grid_blocks(n, NT)), dim3(NT), 0, mat, K, n_in_c,
                   n_out_c, wt);
    mat = wt;
  }
  const Grouped gr = group_step(ctx, ws, g, triplets, kept);
  T* dst = static_cast<T*>(dst_alloc());
  bool launched = false;
  const auto go = [&](auto cfg_c, auto keys) {
    constexpr MvmrConfig C = kMvmrConfigs[decltype(cfg_c)::value];
    using Keys = decltype(keys);
    if (C.bm != cfg.bm || C.bn != cfg.bn || C.mc != cfg.mc || C.bk != cfg.bk || C.stages != cfg.stages ||
        C.wg != cfg.wg)
      return;
    launched = true;
    const auto with_bulk = [&](auto bulk_c) {
      constexpr bool kBulk = decltype(bulk_c)::value;
      constexpr size_t smem = mvmr_smem<T, C.bn, C.bm, C.mc, C.bk, C.stages, C.wg, kBulk>();
      static_assert(mvmr_min_blocks(C.bn, C.wg) * (smem + kSmemReservedPerBlock) <= kSmemPerSm,
                    "the launch bounds' blocks fit the shared memory");
      auto kernel = mvmr_mma_kernel<T, Keys, C.bn, C.bm, C.mc, C.bk, C.stages, C.wg, kBulk>;
      PCOPS_CUDA_CHECK(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
      detail::launch(ctx, kernel, dim3(static_cast<unsigned>(m.tiles * detail::ceil_div(n_out_c, C.bn))),
                     dim3(mvmr_threads(C.bn, C.wg)), smem, keys, gr.offsets, g.cell_major ? int64_t{1} : K,
                     g.cell_major ? m.tiles : int64_t{1}, m, K, src, n_in_c, mat, n_out_c, n_dst, dst, cfg.swz,
                     cfg.pairs);
    };
    if constexpr (C.wg) {
      if (cfg.bulk) with_bulk(std::true_type{});
      else with_bulk(std::false_type{});
    } else {
      with_bulk(std::false_type{});
    }
  };
  [&]<size_t... I>(std::index_sequence<I...>) {
    if (gr.sk.lo != nullptr) (go(std::integral_constant<size_t, I>{}, gr.sk), ...);
    else (go(std::integral_constant<size_t, I>{}, gr.k64), ...);
  }(std::make_index_sequence<std::size(kMvmrConfigs)>{});
  if (!launched) throw std::logic_error("pcops point_conv: no compiled MVMR kernel for the chosen shape");
}

template <class T>
void forward_t(const CudaContext& ctx, const PointConvShape& s, const T* f, const T* w, const int64_t* t,
               const OutputAllocator& out, const PointConvKept& kept) {
  detail::Workspace ws(ctx);
  run_mvmr<T>(ctx, ws, step_spec(s, PointConvStep::kForward, kept.forward != nullptr), t, kept.forward, f,
              s.channels_in, w, s.channels_out, out);
}

template <class T>
void backward_t(const CudaContext& ctx, const PointConvShape& s, const T* g, const T* f, const T* w, const int64_t* t,
                const OutputAllocator& gf_alloc, const OutputAllocator& gw_alloc, const PointConvKept& kept) {
  const int64_t K = s.kernels, Co = s.channels_out, Ci = s.channels_in;
  constexpr int NT = 256;
  // The weight gradient first; each gradient's workspace is released before the other's is taken
  // (stream-ordered), so the backward's peak is the larger of the two steps, not their sum, and
  // each gradient is allocated only after its sort's second buffer is gone.
  if (gw_alloc && K * Co * Ci == 0) {
    gw_alloc();
  } else if (gw_alloc) {
    detail::Workspace ws(ctx);
    const GroupSpec spec = vvor_spec(s);
    const int64_t T_ = s.triplets, tiles = spec.vp.tiles;
    const int key_i_bits = spec.vp.i_bits, j_bits = spec.vp.j_bits;
    const Grouped gr = group_step(ctx, ws, spec, t, kept.grad_weights);
    T* gw = static_cast<T*>(gw_alloc());
    using P = VvorPolicy;
    const int64_t count = K * Co * Ci, per = Co * Ci;
    // Slices: the sorted triplets cut into equal lengths across the kernels (each kernel's share of
    // a cut one partial), as many as kPartialBytes of partials allow, so that the largest kernel
    // cell is not one long chain per block. One slice: the blocks write gw directly.
    const int64_t fit = P::kPartialBytes / (per * static_cast<int64_t>(sizeof(float)));  // partials that fit
    int64_t cut = 0, slices = 1;
    if (fit > K + 1 && T_ > 0) {
      cut = std::max({P::kMinSlice, detail::ceil_div(T_, fit - K), detail::ceil_div(T_, int64_t{65535})});
      slices = detail::ceil_div(T_, cut);  // cuts
      if (slices == 1) cut = 0;
    }
    float* part = cut > 0 ? ws.alloc<float>((slices + K) * per) : nullptr;
    const auto go = [&](auto bo_c, auto wgn_c, auto keys) {
      constexpr int BO = decltype(bo_c)::value, WGN = decltype(wgn_c)::value, BC = WGN == 4 ? 256 : BO;
      constexpr int NT = WGN == 4 ? 512 : P::kThreads;
      using Keys = decltype(keys);
      constexpr size_t smem = vvor_smem<T, Keys, BO, WGN>();
      auto kernel = vvor_mma_kernel<T, Keys, BO, WGN>;
      PCOPS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
      const int64_t ctiles = detail::ceil_div(Co, BO) * detail::ceil_div(Ci, BC);
      const dim3 grid(static_cast<unsigned>(K), static_cast<unsigned>(ctiles), static_cast<unsigned>(slices));
      detail::launch(ctx, kernel, grid, dim3(NT), smem, keys, gr.offsets, tiles, key_i_bits, j_bits, g, Co, f, Ci, K,
                     cut, gw, part);
    };
    const bool narrow = std::max(Co, Ci) <= 64;
    // Warpgroups of the wgmma kernel (0: mma.sync): 256-channel blocks only where F has more
    // than 128 channels.
    const int wgn = narrow ? 0 : std::min(vvor_wgmma(), Ci > 128 ? 4 : 2);
    const std::integral_constant<int, 64> b64;
    const std::integral_constant<int, 128> b128;
    const auto with_keys = [&](auto keys) {
      if (narrow) go(b64, std::integral_constant<int, 0>{}, keys);
      else if (wgn == 4) go(b128, std::integral_constant<int, 4>{}, keys);
      else if (wgn == 2) go(b128, std::integral_constant<int, 2>{}, keys);
      else go(b128, std::integral_constant<int, 0>{}, keys);
    };
    if (gr.sk.lo != nullptr) with_keys(gr.sk);
    else with_keys(gr.k64);
    if (cut > 0)
      detail::launch(ctx, vvor_sum_cuts_kernel<T>, dim3(detail::grid_blocks(count, NT)), dim3(NT), 0,
                     static_cast<const float*>(part), gr.offsets, tiles, cut, per, count, gw);
  }
  if (gf_alloc && s.num_in * Ci == 0) {
    gf_alloc();
  } else if (gf_alloc) {
    detail::Workspace ws(ctx);
    run_mvmr<T>(ctx, ws, step_spec(s, PointConvStep::kGradFeatures, kept.grad_features != nullptr), t,
                kept.grad_features, g, Co, w, Ci, gf_alloc, true);
  }
}

// The kept form of step's grouping, after the shape checks of the tensor-core path.
GroupSpec kept_spec(const PointConvShape& s, PointConvStep step) {
  core::validate_point_conv(s);
  if (!point_conv_mma_supported(s)) throw std::invalid_argument("pcops point_conv: shape not supported by the tensor-core path");
  return step_spec(s, step, /*kept=*/true);
}

}  // namespace

bool point_conv_mma_supported(const PointConvShape& s) {
  if (s.channels_in % 8 != 0 || s.channels_out % 8 != 0) return false;
  // 32-bit rows and sorted positions (the weight gradient's cursors run up to two stages past T).
  if (s.num_in >= (int64_t{1} << 31) || s.num_out >= (int64_t{1} << 31) || s.triplets >= (int64_t{1} << 31) - 64)
    return false;
  // Grid limits of the weight-gradient kernel (K blocks in x, channel tiles of 64 in y).
  if (s.kernels >= (int64_t{1} << 31) || detail::ceil_div(s.channels_out, 64) * detail::ceil_div(s.channels_in, 64) > 65535)
    return false;
  return mvmr_key_fits(mvmr_key(s.num_out, s.num_in, s.kernels, mvmr_config(s.channels_out, s.channels_in).bm), s.channels_out) &&
         mvmr_key_fits(mvmr_key(s.num_in, s.num_out, s.kernels, mvmr_config(s.channels_in, s.channels_out).bm), s.channels_in) &&
         vvor_key(s).bits <= 64;
}

PointConvGrouping point_conv_mma_grouping(const PointConvShape& s, PointConvStep step) {
  const GroupSpec g = kept_spec(s, step);
  PointConvGrouping r;
  r.bytes = g.bytes();
  if (g.none) return r;
  // What the keys are: step kind, form, the segments and the key layout's parameters (a forward
  // reading the weight gradient's grouping has the weight gradient's).
  const bool vv = g.vvor || g.cell_major;
  r.id = {vv ? 2 : g.mp.dst_col, g.packed ? 1 : 0, g.T, g.segments, g.key_bits,
          vv ? g.vp.n_out : g.mp.n_dst, vv ? g.vp.n_in : g.mp.n_src, vv ? g.vp.tiles : g.mp.m.bm};
  return r;
}

void point_conv_mma_group(const CudaContext& ctx, const PointConvShape& s, PointConvStep step,
                          const int64_t* triplets, void* grouping) {
  const GroupSpec g = kept_spec(s, step);
  if (g.none) return;
  if (grouping == nullptr || reinterpret_cast<uintptr_t>(grouping) % 16 != 0)
    throw std::invalid_argument("pcops point_conv: a grouping needs 16-byte aligned device memory");
  detail::Workspace ws(ctx);
  auto* base = static_cast<unsigned char*>(grouping);
  if (!g.packed) {  // sorted and split into place
    group_split(ctx, ws, g, triplets, base);
    return;
  }
  const Grouped gr = group_step(ctx, ws, g, triplets, nullptr);
  const cudaStream_t stream = detail::stream_of(ctx);
  // The packed form has segments + 1 offsets.
  PCOPS_CUDA_CHECK(cudaMemcpyAsync(base, gr.offsets, sizeof(int64_t) * (g.segments + 1),
                                   cudaMemcpyDeviceToDevice, stream));
  if (g.T > 0)
    PCOPS_CUDA_CHECK(cudaMemcpyAsync(base + g.keys_at(), gr.k64, 8 * static_cast<size_t>(g.T),
                                     cudaMemcpyDeviceToDevice, stream));
}

void point_conv_mma(const CudaContext& ctx, const PointConvShape& s, Half16 type, const void* features,
                    const void* weights, const int64_t* triplets, const OutputAllocator& out,
                    const PointConvKept& kept) {
  core::validate_point_conv(s);
  if (!point_conv_mma_supported(s)) throw std::invalid_argument("pcops point_conv: shape not supported by the tensor-core path");
  if (!out) throw std::invalid_argument("pcops point_conv: no output allocator");
  if (s.num_out * s.channels_out == 0) {
    out();
    return;
  }
  if (type == Half16::kFloat16) {
    forward_t(ctx, s, static_cast<const __half*>(features), static_cast<const __half*>(weights), triplets, out,
              kept);
  } else {
    forward_t(ctx, s, static_cast<const __nv_bfloat16*>(features), static_cast<const __nv_bfloat16*>(weights),
              triplets, out, kept);
  }
}

void point_conv_mma(const CudaContext& ctx, const PointConvShape& s, Half16 type, const void* features,
                    const void* weights, const int64_t* triplets, void* out) {
  point_conv_mma(ctx, s, type, features, weights, triplets, OutputAllocator([out] { return out; }));
}

void point_conv_mma_backward(const CudaContext& ctx, const PointConvShape& s, Half16 type, const void* grad_out,
                             const void* features, const void* weights, const int64_t* triplets,
                             const OutputAllocator& grad_features, const OutputAllocator& grad_weights,
                             const PointConvKept& kept) {
  core::validate_point_conv(s);
  if (!point_conv_mma_supported(s)) throw std::invalid_argument("pcops point_conv: shape not supported by the tensor-core path");
  if (type == Half16::kFloat16) {
    backward_t(ctx, s, static_cast<const __half*>(grad_out), static_cast<const __half*>(features),
               static_cast<const __half*>(weights), triplets, grad_features, grad_weights, kept);
  } else {
    using B = __nv_bfloat16;
    backward_t(ctx, s, static_cast<const B*>(grad_out), static_cast<const B*>(features), static_cast<const B*>(weights),
               triplets, grad_features, grad_weights, kept);
  }
}

void point_conv_mma_backward(const CudaContext& ctx, const PointConvShape& s, Half16 type, const void* grad_out,
                             const void* features, const void* weights, const int64_t* triplets,
                             void* grad_features, void* grad_weights) {
  const auto given = [](void* p) { return p == nullptr ? OutputAllocator() : OutputAllocator([p] { return p; }); };
  point_conv_mma_backward(ctx, s, type, grad_out, features, weights, triplets, given(grad_features),
                          given(grad_weights));
}

}  // namespace pcops::cuda
