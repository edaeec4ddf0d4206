// CUDA furthest point sampling, bitwise equal to the CPU backend (the contract's definition: one
// pass over the cloud per step, m_j = min(m_j, s) with a non-finite s counting as 0, next centre =
// smallest index of the largest m_j among the points allowed to be chosen).
//
// Every path keeps the same per-step structure: fold the newest centre into m_j, argmax with
// (largest m, smallest index) semantics inside a warp, combine the warp winners into one winner
// for the whole cloud, broadcast (index, coordinates) of that winner. Paths, chosen on the host
// from (N, D, B):
// - Cluster path (D = 3, N <= 1024 * kMaxPpt): one thread-block cluster of C blocks per cloud,
//   1024 threads per cluster, PPT points per thread in registers. Every warp pushes its winner
//   into the shared memory of every block of the cluster with st.async, which also completes
//   transaction bytes on that block's mbarrier; each block waits on its own mbarrier (no cluster
//   barrier in the loop), after which each warp reduces the 32 warp winners itself. C grows with
//   the cloud size and shrinks with the batch so that the clusters fill the GPU.
// - Big-cluster path (D = 3, N <= 16 * 512 * 16, the batch's clusters resident at once): one
//   non-portable cluster of 16 blocks per cloud, 256 or 512 threads per block, up to 16 points
//   per thread in registers. Per step: block argmax (one __syncthreads), then warp 0 pushes the
//   block winner into every block with st.async; each block waits on its own mbarrier and every
//   warp reduces the 16 block winners itself.
// - Grid path (D = 3, N up to #SMs * 512 * 16 points per cloud): a persistent cooperative kernel,
//   g blocks per cloud (about 2048 points per block, at most one block per SM), PPT points per
//   thread in registers. Per step: block argmax (one __syncthreads), then warp 0 publishes the
//   block winner as three tagged 64-bit words (step mod 2^16 in the top bits, so every word
//   validates itself and no arrival counter or fence is needed); warps 0..ceil(g/32)-1 poll one
//   block per lane (all words of a block in one round trip) and reduce; one __syncthreads, then
//   every thread combines the polling warps' winners.
// - Streaming path (any D, or clouds too large for registers): the grid path with m_j in global
//   memory and the coordinates read from the strided view at every step.
//
// Ineligible points (skip_near_origin) and padding slots carry m = -1: min(-1, s >= 0) keeps -1,
// so they only win when nothing eligible exists, and then index 0 wins (point 0 always exists and
// has the smallest index), which is the CPU's fallback. The m values lie in {-1} U [+0, +inf], so
// their float bits compared as signed int32 order like the values.
#include <cooperative_groups.h>

#include <cub/cub.cuh>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "common/distance.hpp"
#include "common/morton.hpp"
#include "cuda/common.cuh"
#include "cuda/primitives/async_copy.cuh"
#include "pcops/furthest_point_sample.hpp"

namespace pcops::cuda {
namespace {

namespace cg = cooperative_groups;
using common::add_rn;
using common::mul_rn;

// Cluster path: 1024 threads per cloud spread over C blocks, at most kMaxPpt points per thread.
struct FpsClusterPolicy {
  static constexpr int kClusterThreads = 1024;
  static constexpr int kMaxPpt = 32;
  static constexpr int kMaxCluster = 8;            // the portable cluster size
  static constexpr int64_t kMinBlockPoints = 1024;  // fewer points per block: barrier-bound
  // C > 1: push the warp winners with st.async onto a transaction mbarrier of each block and wait
  // on the local mbarrier (one-way DSMEM latency), instead of a full cluster barrier per step
  // (remote stores acknowledged, then an all-to-all arrive/wait). false = the cluster barrier.
  static constexpr bool kAsyncExchange = true;
  static constexpr long long kWaitTrapCycles = 1ll << 35;  // ~17 s at 2 GHz
  // Clouds up to this size (C > 1): every block keeps a copy of the whole cloud in shared memory
  // (SoA, 12 bytes a point), so a record is (key, index) in one 8-byte st.async and the winner's
  // coordinates are read locally, instead of a 16 + 4-byte pair of st.async per record.
  static constexpr int64_t kCopyMaxPoints = 16384;
};
static_assert(FpsClusterPolicy::kClusterThreads == 32 * 32, "one warp winner per lane of a warp");

// Big-cluster path: single clouds (or a few) too large for the cluster path and small enough for
// the registers of 16 SMs. T threads per block: kThreadsSmall up to kSmallPoints points, else
// kThreads (measured on an H200: 60k points 1.01 ms with 256 threads vs 1.06 ms with 512; 100k
// 1.21 ms with 512 vs 1.56 ms with 1024; the grid path takes 1.41 ms and 1.64 ms).
struct FpsBigClusterPolicy {
  static constexpr int kCluster = 16;
  static constexpr int kThreadsSmall = 256;
  static constexpr int kThreads = 512;
  static constexpr int kMaxPpt = 16;
  static constexpr int64_t kSmallPoints = int64_t{kCluster} * kThreadsSmall * kMaxPpt;  // 65536
};

// Grid and streaming paths.
struct FpsGridPolicy {
  static constexpr int kThreads = 512;
  static constexpr int kMaxPpt = 16;  // 64 data registers per thread, 1 block per SM
  static constexpr int kRing = 4;     // exchange slots in flight (any value >= 2 is safe)
  static constexpr int kStreamBlocksPerSm = 2;
  // A lone cloud gets about this many points per thread (more blocks only while the SMs last):
  // the exchange grows with the block count, the per-step compute with the points per thread.
  static constexpr int kTargetPpt = 4;
  static constexpr int kMaxBlocks = 32 * (kThreads / 32);  // one polled block per lane of a warp
};

constexpr unsigned kFull = 0xffffffffu;
constexpr unsigned kNoIndex = 0xffffffffu;  // padding: never wins a tie against a real point
constexpr int kNoKey = INT_MIN;             // below the key of m = -1

__device__ __forceinline__ bool eligible(float x, float y, float z) {
  // The CPU's test, term for term: ((x*x + y*y) + z*z) > 1e-3f without contraction.
  return add_rn(add_rn(mul_rn(x, x), mul_rn(y, y)), mul_rn(z, z)) > 1e-3f;
}

// m_j update of the contract: a non-finite s (NaN or +inf) counts as 0.
__device__ __forceinline__ float fold(float m, float s) {
  s = s < INFINITY ? s : 0.0f;
  return fminf(m, s);
}

// When every coordinate of a cloud is finite and below 2^61 in magnitude, no s can be NaN or
// overflow (|dx| < 2^62, so s < 3 * 2^124), and the fold is a plain fminf; the cluster and
// big-cluster paths learn this once per cloud, before their loop.
template <bool kFinite>
__device__ __forceinline__ float fold_as(float m, float s) {
  if constexpr (kFinite) return fminf(m, s);
  else return fold(m, s);
}

__device__ __forceinline__ bool safe_coord(float v) { return fabsf(v) < 0x1p61f; }  // false for NaN

__device__ __forceinline__ int key_of(float m) { return __float_as_int(m); }

// Warp-wide (largest key, smallest index); the result is uniform over the warp.
__device__ __forceinline__ void warp_argmax(int key, unsigned idx, int& wkey, unsigned& widx) {
  wkey = __reduce_max_sync(kFull, key);
  widx = __reduce_min_sync(kFull, key == wkey ? idx : kNoIndex);
}

__device__ __forceinline__ unsigned long long ld_relaxed(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void st_relaxed(unsigned long long* p, unsigned long long v) {
  asm volatile("st.relaxed.gpu.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// Shared-memory and cluster helpers of the st.async exchange (sm_90; the mbarriers' init and arming
// from cuda/primitives/async_copy.cuh).
using primitives::mbarrier_arm;
using primitives::mbarrier_init;
using primitives::mbarrier_init_fence;
using primitives::smem_u32;
// The same shared::cta offset in the block of cluster rank `rank`, as a shared::cluster address.
__device__ __forceinline__ unsigned cluster_addr(unsigned addr, unsigned rank) {
  unsigned r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}
// True once the phase of parity `parity` has completed; acquire at cluster scope pairs with the
// release of the remote st.async's complete_tx.
__device__ __forceinline__ bool mbar_try_wait(unsigned bar, unsigned parity) {
  unsigned ok;
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n\t"
      "selp.u32 %0, 1, 0, p;\n\t}"
      : "=r"(ok)
      : "r"(bar), "r"(parity)
      : "memory");
  return ok != 0;
}
__device__ __forceinline__ void st_async(unsigned addr, int4 v, unsigned bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(addr),
               "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void st_async(unsigned addr, int2 v, unsigned bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [%0], {%1, %2}, [%3];" ::"r"(addr),
               "r"(v.x), "r"(v.y), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void st_async(unsigned addr, int v, unsigned bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(addr), "r"(v), "r"(bar)
               : "memory");
}

struct alignas(16) WarpSlot {
  int key;
  unsigned idx;
  float x, y;
  float z, pad0, pad1, pad2;
};

// Thread 0, before the loop: both step mbarriers (one arrival per phase), made visible to the
// cluster, and armed for steps 1 (bars[1]) and 2 (bars[0]) with step_bytes expected bytes.
__device__ __forceinline__ void init_step_barriers(unsigned long long (&bars)[2], unsigned step_bytes) {
  mbarrier_init(smem_u32(&bars[0]), 1);
  mbarrier_init(smem_u32(&bars[1]), 1);
  mbarrier_init_fence();
  mbarrier_arm(smem_u32(&bars[1]), step_bytes);  // step 1
  mbarrier_arm(smem_u32(&bars[0]), step_bytes);  // step 2
}

// Waits until the mbarrier `bar` completes the phase of step t (phases alternate per parity of
// (t - 1) / 2: each mbarrier serves every other step), then thread 0 arms the phase of step t + 2
// with `step_bytes` expected bytes. A record that never arrives would be a bug: the launch fails
// instead of hanging. Arming now is safe: that phase cannot complete before every sender has sent
// its step t + 1 record, which it does after this point, while other warps may still wait on the
// current phase (their try_wait on its parity stays true until then).
__device__ __forceinline__ void wait_step_and_rearm(unsigned bar, int64_t t, int tid, unsigned step_bytes) {
  const unsigned parity = static_cast<unsigned>((t - 1) >> 1) & 1u;
  const long long t0 = clock64();
  while (!mbar_try_wait(bar, parity)) {
    if (clock64() - t0 > FpsClusterPolicy::kWaitTrapCycles) __trap();
  }
  if (tid == 0) mbarrier_arm(bar, step_bytes);
}

// The block-winner exchange of the 16-block kernels (big-cluster and sorted paths). Every block
// owns slots[2][C] and two mbarriers; the records of step t go to slots[t & 1].
//
// send_block_winner: lane l < C of the calling warp writes this block's record (key, index and
// coordinates) into slot `rank` of block l with st.async, completing 20 transaction bytes on
// block l's mbarrier. The slots of step t are rewritten at step t + 2 only: a sender gets there
// after receiving every block's step t + 1 record, which each block sends after all its warps
// passed the step t + 1 barrier, i.e. after their reads of step t (release by complete_tx,
// acquire by the wait).
// Bytes of one block record (16 + 4 by st.async below), so C * kBlockRecordBytes per step.
constexpr unsigned kBlockRecordBytes = 20;

// send_block_record: the same record to block `dest` only (the caller covers every block).
template <int C>
__device__ __forceinline__ void send_block_record(WarpSlot (&slots)[2][C], unsigned long long (&bars)[2], int par,
                                                  int rank, int dest, int key, unsigned idx, float x, float y,
                                                  float z) {
  const unsigned dst = cluster_addr(smem_u32(&slots[par][rank]), static_cast<unsigned>(dest));
  const unsigned bar = cluster_addr(smem_u32(&bars[par]), static_cast<unsigned>(dest));
  st_async(dst, make_int4(key, static_cast<int>(idx), __float_as_int(x), __float_as_int(y)), bar);
  st_async(dst + 16, __float_as_int(z), bar);
}

template <int C>
__device__ __forceinline__ void send_block_winner(WarpSlot (&slots)[2][C], unsigned long long (&bars)[2], int par,
                                                  int rank, int lane, int key, unsigned idx, float x, float y,
                                                  float z) {
  if (lane < C) send_block_record<C>(slots, bars, par, rank, lane, key, idx, x, y, z);
}

// receive_cluster_winner: waits until all C records of step t arrived (wait_step_and_rearm) and
// returns in every warp the winner's index, with its coordinates in (cx, cy, cz).
template <int C>
__device__ __forceinline__ unsigned receive_cluster_winner(WarpSlot (&slots)[2][C], unsigned long long (&bars)[2],
                                                           int par, int64_t t, int tid, int lane, unsigned step_bytes,
                                                           float& cx, float& cy, float& cz) {
  wait_step_and_rearm(smem_u32(&bars[par]), t, tid, step_bytes);
  int4 a = make_int4(kNoKey, static_cast<int>(kNoIndex), 0, 0);
  int az = 0;
  if (lane < C) {
    a = reinterpret_cast<const int4*>(&slots[par][lane])[0];
    az = reinterpret_cast<const int*>(&slots[par][lane])[4];
  }
  int wkey;
  unsigned widx;
  warp_argmax(a.x, static_cast<unsigned>(a.y), wkey, widx);
  const int src = __ffs(__ballot_sync(kFull, a.x == wkey && static_cast<unsigned>(a.y) == widx)) - 1;
  cx = __shfl_sync(kFull, __int_as_float(a.z), src);
  cy = __shfl_sync(kFull, __int_as_float(a.w), src);
  cz = __shfl_sync(kFull, __int_as_float(az), src);
  return widx;
}

// The clouds of one launch: a dense batch (PointsView with its batch stride, optional lengths,
// M output slots per cloud, padded with -1) or a ragged set (CSR rows of one flat array; per
// cloud its first row, start, sample count and output offset; outputs are global row indices).
struct FpsArgs {
  PointsView P;            // dense: the batch; ragged: all rows, `count` = the longest cloud
  const int64_t* lengths;  // device, points per cloud
  bool has_lengths;
  int64_t M;  // dense: output slots per cloud; ragged: 0
  int64_t start;
  bool skip;
  int64_t* out;
  const int64_t* ragged;  // ragged: device [4][stride] (first row, start, count, output offset); else null
  int64_t ragged_stride;
};

struct CloudRef {
  const float* base;  // point 0 of the cloud
  int64_t n;          // points of this cloud
  int64_t steps;      // centres to produce (dense: the rest of the row is -1)
  int64_t start;
  int64_t first;  // added to every written index (ragged: the cloud's first row)
  int64_t* o;
};

__device__ __forceinline__ CloudRef cloud_ref(const FpsArgs& a, int b) {
  CloudRef c;
  c.n = a.lengths[b];
  if (a.ragged != nullptr) {
    const int64_t s = a.ragged_stride;
    c.first = a.ragged[b];
    c.start = a.ragged[s + b];
    c.steps = a.ragged[2 * s + b];
    c.o = a.out + a.ragged[3 * s + b];
    c.base = a.P.data + c.first * a.P.stride_point;
  } else {
    c.first = 0;
    c.start = a.start;
    c.steps = a.has_lengths ? (a.M < c.n ? a.M : c.n) : a.M;
    c.o = a.out + static_cast<int64_t>(b) * a.M;
    c.base = a.P.data + static_cast<int64_t>(b) * a.P.stride_batch;
  }
  return c;
}

// PointsView::at is host-only.
__device__ __forceinline__ const float* point_ptr(const FpsArgs& a, const CloudRef& c, int64_t j) {
  return c.base + j * a.P.stride_point;
}
__device__ __forceinline__ float coord(const FpsArgs& a, const CloudRef& c, int64_t j, int64_t d) {
  return point_ptr(a, c, j)[d * a.P.stride_dim];
}

// ---------------------------------------------------------------------------------------------
// Cluster path. Decomposition: cluster = one cloud (blockIdx.y), C blocks x (1024 / C) threads,
// thread (rank, tid) owns points rank * S + k * T + tid, k < PPT, in registers.

template <int C, int PPT, bool kCopy>
__global__ void __cluster_dims__(C, 1, 1) __launch_bounds__(1024 / C, 1)
    fps_cluster_kernel(FpsArgs A) {
  constexpr int T = FpsClusterPolicy::kClusterThreads / C;
  constexpr int W = T / 32;
  constexpr int S = T * PPT;  // points per block
  constexpr bool kAsync = C > 1 && FpsClusterPolicy::kAsyncExchange;
  static_assert(!kCopy || kAsync, "the cloud copy goes with the st.async exchange");
  // st.async exchange: slot bytes of one step that land in each block (key, idx[, x, y | z]).
  constexpr unsigned kStepBytes = C * W * (kCopy ? 8 : 20);
  // kCopy: the whole cloud as SoA x[cap], y[cap], z[cap] (cap = the launch's longest cloud, a
  // multiple of 4); otherwise this block's points, for the coordinates of a warp winner.
  extern __shared__ float4 pts[];
  __shared__ WarpSlot slots[2][C * W];
  __shared__ unsigned long long bars[2];  // st.async exchange: bars[t & 1] completes step t
  __shared__ int cluster_unsafe;

  const int b = blockIdx.y;
  const int rank = blockIdx.x;  // == cluster rank: the cluster spans gridDim.x == C
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const CloudRef info = cloud_ref(A, b);
  const bool skip = A.skip;
  const int64_t start = info.start;
  int64_t* o = info.o;
  if (rank == 0) {
    for (int64_t t = (info.steps > 0 ? info.steps : 0) + tid; t < A.M; t += T) o[t] = -1;
  }
  if (info.steps <= 0) return;  // uniform over the cluster, before any remote access

  const int64_t base = static_cast<int64_t>(rank) * S;
  float px[PPT], py[PPT], pz[PPT], m[PPT];
  bool safe = true;
#pragma unroll
  for (int k = 0; k < PPT; ++k) {
    const int64_t j = base + k * T + tid;
    float x = 0.0f, y = 0.0f, z = 0.0f, mk = -1.0f;
    if (j < info.n) {
      x = coord(A, info, j, 0);
      y = coord(A, info, j, 1);
      z = coord(A, info, j, 2);
      mk = (!skip || eligible(x, y, z)) ? INFINITY : -1.0f;
      safe = safe && safe_coord(x) && safe_coord(y) && safe_coord(z);
    }
    px[k] = x, py[k] = y, pz[k] = z, m[k] = mk;
    if constexpr (!kCopy) pts[k * T + tid] = make_float4(x, y, z, 0.0f);
  }
  const int64_t cap = (A.P.count + 3) & ~int64_t{3};
  float* const xs = reinterpret_cast<float*>(pts);
  float* const ys = xs + cap;
  float* const zs = ys + cap;
  if constexpr (kCopy) {
    for (int64_t j = tid; j < info.n; j += T) {
      xs[j] = coord(A, info, j, 0);
      ys[j] = coord(A, info, j, 1);
      zs[j] = coord(A, info, j, 2);
    }
  }
  float cx = coord(A, info, start, 0), cy = coord(A, info, start, 1), cz = coord(A, info, start, 2);
  if (rank == 0 && tid == 0) o[0] = info.first + start;
  if (tid == 0) cluster_unsafe = 0;
  if constexpr (kAsync) {
    // Phase k of bars[p] is step 2k + 1 (p = 1) or 2k + 2 (p = 0); each phase is armed once (one
    // arrival plus its bytes) by thread 0 after the previous phase of that barrier completed.
    if (tid == 0) {
      init_step_barriers(bars, kStepBytes);
    }
  }
  // Every block of the cluster has started (its shared memory may be written), its mbarriers are
  // initialised, and pts is ready.
  const bool block_unsafe = __syncthreads_or(!safe) != 0;
  bool finite = !block_unsafe;
  if constexpr (C > 1) {
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    if (block_unsafe && tid < C) atomicOr(cluster.map_shared_rank(&cluster_unsafe, tid), 1);
    cluster.sync();
    finite = cluster_unsafe == 0;
  }

  const auto run = [&](auto finite_c) {
    constexpr bool kFinite = decltype(finite_c)::value;
    for (int64_t t = 1; t < info.steps; ++t) {
      float bm = 0.0f;
      int bk = 0;
#pragma unroll
      for (int k = 0; k < PPT; ++k) {
        m[k] = fold_as<kFinite>(m[k], common::squared_distance3(cx, cy, cz, px[k], py[k], pz[k]));
        if (k == 0 || m[k] > bm) {  // strict: the smallest k (smallest index) among equals
          bm = m[k];
          bk = k;
        }
      }
      const int64_t jb = base + bk * T + tid;
      const unsigned idx = jb < info.n ? static_cast<unsigned>(jb) : kNoIndex;
      int wkey;
      unsigned widx;
      warp_argmax(key_of(bm), idx, wkey, widx);
      const int par = static_cast<int>(t & 1);
      float4 p = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if constexpr (!kCopy) {
        const unsigned local = widx - static_cast<unsigned>(base);
        if (local < static_cast<unsigned>(S)) p = pts[local];
      }
      if constexpr (kAsync) {
        // Lane l pushes this warp's winner into block l. bars[par] of a block completes step t once
        // all C * W records arrived (and thread 0 armed it). The slots of step t are rewritten at
        // step t + 2 only: a sender gets there after receiving every warp's step t + 1 record, which
        // each warp sends after its reads of step t (release by complete_tx, acquire by the wait).
        if (lane < C) {
          const unsigned dst = cluster_addr(smem_u32(&slots[par][rank * W + warp]), static_cast<unsigned>(lane));
          const unsigned bar = cluster_addr(smem_u32(&bars[par]), static_cast<unsigned>(lane));
          if constexpr (kCopy) {
            st_async(dst, make_int2(wkey, static_cast<int>(widx)), bar);
          } else {
            st_async(dst, make_int4(wkey, static_cast<int>(widx), __float_as_int(p.x), __float_as_int(p.y)), bar);
            st_async(dst + 16, __float_as_int(p.z), bar);
          }
        }
        wait_step_and_rearm(smem_u32(&bars[par]), t, tid, kStepBytes);
      } else {
        if (lane < C) {
          WarpSlot* dst = &slots[par][rank * W + warp];
          if constexpr (C > 1) dst = cg::this_cluster().map_shared_rank(dst, lane);
          int4* d4 = reinterpret_cast<int4*>(dst);
          d4[0] = make_int4(wkey, static_cast<int>(widx), __float_as_int(p.x), __float_as_int(p.y));
          d4[1] = make_int4(__float_as_int(p.z), 0, 0, 0);
        }
        // Release of the remote stores / acquire of the ones into this block.
        if constexpr (C > 1) cg::this_cluster().sync();
        else __syncthreads();
      }
      if constexpr (kCopy) {
        const int2 a = reinterpret_cast<const int2*>(&slots[par][lane])[0];
        warp_argmax(a.x, static_cast<unsigned>(a.y), wkey, widx);
        cx = xs[widx], cy = ys[widx], cz = zs[widx];  // a real point: index 0 at least exists
      } else {
        const int4 a = reinterpret_cast<const int4*>(&slots[par][lane])[0];
        const int az = reinterpret_cast<const int*>(&slots[par][lane])[4];  // z; the padding is never written
        warp_argmax(a.x, static_cast<unsigned>(a.y), wkey, widx);
        const int src = __ffs(__ballot_sync(kFull, a.x == wkey && static_cast<unsigned>(a.y) == widx)) - 1;
        cx = __shfl_sync(kFull, __int_as_float(a.z), src);
        cy = __shfl_sync(kFull, __int_as_float(a.w), src);
        cz = __shfl_sync(kFull, __int_as_float(az), src);
      }
      if (rank == 0 && tid == 0) o[t] = info.first + static_cast<int64_t>(widx);
    }
  };
  if (finite) run(std::true_type{});
  else run(std::false_type{});
  // No remote access follows the last exchange: every block received all records of the last
  // step before leaving its loop, so blocks may exit independently.
}

// ---------------------------------------------------------------------------------------------
// Big-cluster path (one cloud of up to C * T * kMaxPpt points on a cluster of C = 16 blocks, a
// non-portable size). Decomposition: cluster = one cloud (blockIdx.y), block `rank` owns indices
// [rank * span, (rank + 1) * span), thread tid owns rank * span + k * T + tid, k < PPT, in
// registers. Per step: block argmax (one __syncthreads), then warp 0 pushes the block winner
// into every block of the cluster with st.async (C records per block and step), and every warp
// waits on its own block's mbarrier and reduces the C records itself. (Pushing every warp's
// winner instead, as the cluster path does, measured slower here: C * W records to reduce.)
//
// When every coordinate of the cloud is finite and below 2^61 in magnitude, no s can be NaN or
// overflow, so the fold is a plain fminf (the cluster learns this once, before the loop).

template <int C, int T, int PPT>
__global__ void __launch_bounds__(T, 1)
    fps_bigcluster_kernel(FpsArgs A, int64_t span) {
  constexpr int W = T / 32;
  constexpr unsigned kStepBytes = C * kBlockRecordBytes;
  static_assert(W <= 32 && C <= 32, "one warp winner / block record per lane");
  extern __shared__ float4 pts[];
  __shared__ int red_key[2][W];
  __shared__ unsigned red_idx[2][W];
  __shared__ WarpSlot slots[2][C];
  __shared__ unsigned long long bars[2];
  __shared__ int cluster_unsafe;

  const int b = blockIdx.y;
  const int rank = blockIdx.x;  // == cluster rank: the cluster spans gridDim.x == C
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const CloudRef info = cloud_ref(A, b);
  const bool skip = A.skip;
  const int64_t start = info.start;
  int64_t* o = info.o;
  if (rank == 0) {
    for (int64_t t = (info.steps > 0 ? info.steps : 0) + tid; t < A.M; t += T) o[t] = -1;
  }
  if (info.steps <= 0) return;  // uniform over the cluster, before any remote access

  const int64_t lo = static_cast<int64_t>(rank) * span;
  const int64_t hi = lo + span < info.n ? lo + span : info.n;
  float px[PPT], py[PPT], pz[PPT], m[PPT];
  bool safe = true;
#pragma unroll
  for (int k = 0; k < PPT; ++k) {
    const int64_t j = lo + k * T + tid;
    float x = 0.0f, y = 0.0f, z = 0.0f, mk = -1.0f;
    if (j < hi) {
      x = coord(A, info, j, 0);
      y = coord(A, info, j, 1);
      z = coord(A, info, j, 2);
      mk = (!skip || eligible(x, y, z)) ? INFINITY : -1.0f;
      safe = safe && safe_coord(x) && safe_coord(y) && safe_coord(z);
    }
    px[k] = x, py[k] = y, pz[k] = z, m[k] = mk;
    pts[k * T + tid] = make_float4(x, y, z, 0.0f);
  }
  float cx = coord(A, info, start, 0), cy = coord(A, info, start, 1), cz = coord(A, info, start, 2);
  if (rank == 0 && tid == 0) o[0] = info.first + start;
  if (tid == 0) {
    cluster_unsafe = 0;
    init_step_barriers(bars, kStepBytes);
  }
  const bool block_unsafe = __syncthreads_or(!safe) != 0;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every block started, flags zeroed, mbarriers initialised, pts ready
  if (block_unsafe && tid < C) atomicOr(cluster.map_shared_rank(&cluster_unsafe, tid), 1);
  cluster.sync();
  const bool finite = cluster_unsafe == 0;

  const auto run = [&](auto finite_c) {
    constexpr bool kFinite = decltype(finite_c)::value;
    for (int64_t t = 1; t < info.steps; ++t) {
      float bm = 0.0f;
      int bk = 0;
#pragma unroll
      for (int k = 0; k < PPT; ++k) {
        m[k] = fold_as<kFinite>(m[k], common::squared_distance3(cx, cy, cz, px[k], py[k], pz[k]));
        if (k == 0 || m[k] > bm) {  // strict: the smallest k (smallest index) among equals
          bm = m[k];
          bk = k;
        }
      }
      const int64_t jb = lo + bk * T + tid;
      const unsigned idx = jb < hi ? static_cast<unsigned>(jb) : kNoIndex;
      int wkey;
      unsigned widx;
      warp_argmax(key_of(bm), idx, wkey, widx);
      const int par = static_cast<int>(t & 1);
      if (lane == 0) {
        red_key[par][warp] = wkey;
        red_idx[par][warp] = widx;
      }
      // red_*[par] is rewritten at step t + 2, after the step t + 1 barrier, which warp 0 reaches
      // only after reading it here.
      __syncthreads();
      if (warp == 0) {
        warp_argmax(lane < W ? red_key[par][lane] : kNoKey, lane < W ? red_idx[par][lane] : kNoIndex, wkey, widx);
        const unsigned local = widx - static_cast<unsigned>(lo);
        const float4 p = local < static_cast<unsigned>(T * PPT) ? pts[local] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        send_block_winner<C>(slots, bars, par, rank, lane, wkey, widx, p.x, p.y, p.z);
      }
      widx = receive_cluster_winner<C>(slots, bars, par, t, tid, lane, kStepBytes, cx, cy, cz);
      if (rank == 0 && tid == 0) o[t] = info.first + static_cast<int64_t>(widx);
    }
  };
  if (finite) run(std::true_type{});
  else run(std::false_type{});
  // No remote access follows the last exchange: every block received all records of the last
  // step before leaving its loop, so blocks may exit independently.
}

// ---------------------------------------------------------------------------------------------
// Grid and streaming paths. Decomposition: blockIdx.y = cloud, gridDim.x = g blocks per cloud,
// block r owns indices [r * span, (r + 1) * span); register mode (PPT > 0): thread tid owns
// r * span + k * T + tid, k < PPT, in registers; streaming mode (PPT = 0): the same range
// strided by T, m_j in global memory, any D. Needs all blocks resident (cooperative launch).

template <int PPT>
__global__ void __launch_bounds__(FpsGridPolicy::kThreads, 1)
    fps_grid_kernel(FpsArgs A, int64_t span, unsigned long long* xch, float* mglob) {
  constexpr int T = FpsGridPolicy::kThreads;
  constexpr int W = T / 32;
  constexpr int NW = PPT > 0 ? 3 : 2;  // exchanged 64-bit words per block and step
  constexpr int R = FpsGridPolicy::kRing;
  constexpr int KP = PPT > 0 ? PPT : 1;
  extern __shared__ float4 pts[];  // register mode: this block's points
  __shared__ int red_key[2][W];
  __shared__ unsigned red_idx[2][W];
  __shared__ WarpSlot win[2][W];  // winner of each polling warp

  const int g = gridDim.x, r = blockIdx.x, y = blockIdx.y;
  const int b = y;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const CloudRef info = cloud_ref(A, b);
  const bool skip = A.skip;
  const int64_t start = info.start;
  int64_t* o = info.o;
  if (r == 0) {
    for (int64_t t = (info.steps > 0 ? info.steps : 0) + tid; t < A.M; t += T) o[t] = -1;
  }
  if (info.steps <= 0) return;  // uniform over this cloud's blocks; no other cloud waits on them

  const int64_t lo = static_cast<int64_t>(r) * span;
  const int64_t hi = lo + span < info.n ? lo + span : info.n;  // may be <= lo
  float px[KP], py[KP], pz[KP], m[KP];
  if constexpr (PPT > 0) {
#pragma unroll
    for (int k = 0; k < PPT; ++k) {
      const int64_t j = lo + k * T + tid;
      float x = 0.0f, yv = 0.0f, z = 0.0f, mk = -1.0f;
      if (j < hi) {
        x = coord(A, info, j, 0);
        yv = coord(A, info, j, 1);
        z = coord(A, info, j, 2);
        mk = (!skip || eligible(x, yv, z)) ? INFINITY : -1.0f;
      }
      px[k] = x, py[k] = yv, pz[k] = z, m[k] = mk;
      pts[k * T + tid] = make_float4(x, yv, z, 0.0f);
    }
  }
  float* mrow = mglob + static_cast<int64_t>(y) * A.P.count;
  const int64_t sd = A.P.stride_dim;
  int64_t c = start;
  float cx = 0.0f, cy = 0.0f, cz = 0.0f;
  if constexpr (PPT > 0) cx = coord(A, info, start, 0), cy = coord(A, info, start, 1), cz = coord(A, info, start, 2);
  if (r == 0 && tid == 0) o[0] = info.first + start;
  __syncthreads();  // pts complete

  for (int64_t t = 1; t < info.steps; ++t) {
    int bkey = kNoKey;
    unsigned bidx = kNoIndex;
    if constexpr (PPT > 0) {
      float bm = 0.0f;
      int bk = 0;
#pragma unroll
      for (int k = 0; k < PPT; ++k) {
        m[k] = fold(m[k], common::squared_distance3(cx, cy, cz, px[k], py[k], pz[k]));
        if (k == 0 || m[k] > bm) {  // strict: the smallest index among equals
          bm = m[k];
          bk = k;
        }
      }
      const int64_t jb = lo + bk * T + tid;
      bkey = key_of(bm);
      bidx = jb < hi ? static_cast<unsigned>(jb) : kNoIndex;
    } else {
      const float* q = point_ptr(A, info, c);
      for (int64_t j = lo + tid; j < hi; j += T) {
        const float* x = point_ptr(A, info, j);
        const float s = common::squared_distance(q, sd, x, sd, A.P.dim);
        float mj = t == 1 ? ((!skip || eligible(x[0], x[sd], x[2 * sd])) ? INFINITY : -1.0f) : mrow[j];
        mj = fold(mj, s);
        mrow[j] = mj;
        if (key_of(mj) > bkey) {  // strict, ascending j: the smallest index among equals
          bkey = key_of(mj);
          bidx = static_cast<unsigned>(j);
        }
      }
    }
    int wkey;
    unsigned widx;
    warp_argmax(bkey, bidx, wkey, widx);
    const int par = static_cast<int>(t & 1);
    if (lane == 0) {
      red_key[par][warp] = wkey;
      red_idx[par][warp] = widx;
    }
    __syncthreads();
    // Exchange words of step t: slot[u * g + q] holds word u of block q, tag = t mod 2^16 in the
    // top 16 bits, so every word validates itself (no arrival counter, no fence). Slots of step t
    // are reused at t + R, by which time every block has read them (a block reaches step t + 1
    // only after all blocks published step t + 1, which each does after reading step t). A lane
    // always polls the same words, so read-read coherence keeps it from seeing anything older than
    // step t - R, whose tag differs from t's (R < 2^16); the zeros of the memset carry tag 0 and
    // are only read at steps 1..R.
    unsigned long long* slot = xch + (static_cast<int64_t>(y) * R + t % R) * NW * g;
    const unsigned tag = static_cast<unsigned>(t) & 0xffffu;
    const unsigned long long tag_bits = static_cast<unsigned long long>(tag) << 48;
    if (warp == 0) {
      warp_argmax(lane < W ? red_key[par][lane] : kNoKey, lane < W ? red_idx[par][lane] : kNoIndex,
                  wkey, widx);
      // Order-preserving unsigned key (m in {-1} U [+0, +inf] -> key >= 0x3F800000); 0 = a block
      // without points, below every real point.
      const unsigned ukey = widx == kNoIndex ? 0u : static_cast<unsigned>(wkey) ^ 0x80000000u;
      unsigned long long word = 0;
      if constexpr (PPT > 0) {
        // Words: [ukey | local index (16 bits, span <= T * PPT <= 65536)], [x | y low], [y high | z].
        const unsigned local = widx - static_cast<unsigned>(lo);
        float4 p = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (local < static_cast<unsigned>(T * PPT)) p = pts[local];
        const unsigned xb = __float_as_uint(p.x), yb = __float_as_uint(p.y), zb = __float_as_uint(p.z);
        word = lane == 0   ? (static_cast<unsigned long long>(ukey) << 16) | (widx == kNoIndex ? 0xffffu : local & 0xffffu)
               : lane == 1 ? (static_cast<unsigned long long>(xb) << 16) | (yb & 0xffffu)
                           : (static_cast<unsigned long long>(yb >> 16) << 32) | zb;
      } else {
        // Words: [ukey << 16], [global index].
        word = lane == 0 ? static_cast<unsigned long long>(ukey) << 16 : static_cast<unsigned long long>(widx);
      }
      if (lane < NW) st_relaxed(slot + static_cast<int64_t>(lane) * g + r, tag_bits | word);
    }
    // Polling: warp v reads blocks q = 32 v + lane, all NW words of a block in one round trip (the
    // loads are independent), and re-reads only the blocks not yet published.
    if (warp < (g + 31) / 32) {
      const int q = warp * 32 + lane;
      unsigned long long w[NW];
#pragma unroll
      for (int u = 0; u < NW; ++u) w[u] = 0;
      bool done = q >= g;
      while (!__all_sync(kFull, done)) {
        if (!done) {
#pragma unroll
          for (int u = 0; u < NW; ++u) w[u] = ld_relaxed(slot + static_cast<int64_t>(u) * g + q);
          done = true;
#pragma unroll
          for (int u = 0; u < NW; ++u) done &= static_cast<unsigned>(w[u] >> 48) == tag;
        }
      }
      unsigned ck = 0, ci = kNoIndex;
      float qx = 0.0f, qy = 0.0f, qz = 0.0f;
      if (q < g) {
        ck = static_cast<unsigned>(w[0] >> 16);
        if constexpr (PPT > 0) {
          if (ck != 0) ci = static_cast<unsigned>(q) * static_cast<unsigned>(span) + static_cast<unsigned>(w[0] & 0xffffu);
          qx = __uint_as_float(static_cast<unsigned>(w[1 % NW] >> 16));
          qy = __uint_as_float((static_cast<unsigned>(w[2 % NW] >> 32) << 16) | static_cast<unsigned>(w[1 % NW] & 0xffffu));
          qz = __uint_as_float(static_cast<unsigned>(w[2 % NW]));
        } else {
          if (ck != 0) ci = static_cast<unsigned>(w[1]);
        }
      }
      const unsigned mk = __reduce_max_sync(kFull, ck);
      const unsigned mi = __reduce_min_sync(kFull, ck == mk ? ci : kNoIndex);
      if constexpr (PPT > 0) {
        const int src = __ffs(__ballot_sync(kFull, ck == mk && ci == mi)) - 1;
        qx = __shfl_sync(kFull, qx, src);
        qy = __shfl_sync(kFull, qy, src);
        qz = __shfl_sync(kFull, qz, src);
      }
      if (lane == 0) win[par][warp] = WarpSlot{static_cast<int>(mk), mi, qx, qy, qz, 0.0f, 0.0f, 0.0f};
    }
    __syncthreads();
    // Every thread combines the polling warps' winners (at most W, usually 1 to 5).
    unsigned bk = static_cast<unsigned>(win[par][0].key), bi = win[par][0].idx;
    int bw = 0;
    for (int v = 1; v < (g + 31) / 32; ++v) {
      const unsigned kv = static_cast<unsigned>(win[par][v].key), iv = win[par][v].idx;
      if (kv > bk || (kv == bk && iv < bi)) bk = kv, bi = iv, bw = v;
    }
    c = static_cast<int64_t>(bi);
    if constexpr (PPT > 0) cx = win[par][bw].x, cy = win[par][bw].y, cz = win[par][bw].z;
    if (r == 0 && tid == 0) o[t] = info.first + c;
  }
}

// ---------------------------------------------------------------------------------------------
// Sorted path (D = 3, one dense cloud of more than kMinPoints points, or forced). The cloud is
// first bucketed into the cells of a 128^3 grid over its bounding box in Morton order of the cells
// (a counting sort into (x, y, z, index) records) and cut into chunks of kChunk consecutive
// points, dealt out to the 16 blocks of one non-portable cluster (chunk c to block c mod 16).
// Every chunk has a bounding box, a largest m and a winner (largest m, smallest original index,
// and the winner's coordinates); m itself lives in global memory (L2). Two kernels: the
// one-barrier kernel (fps_sorted2_kernel, below; the default up to kMaxRounds2 rounds of chunks
// per lane) keeps the summaries in the owning lanes' registers, the list kernel
// (fps_sorted_kernel, any chunk count) in shared memory. Per step, a
// chunk is folded only when the newest centre can change one of its m: the lower bound
// lb = squared_distance3(c, clamp(c, box)) is computed with the contract's own operations, and
// correctly rounded operations are monotone, so lb <= s_j for every point j of the chunk; when
// lb >= the chunk's largest m, fminf(m_j, s_j) == m_j for all of them and the chunk keeps its
// winner. A step of the list kernel: (a) every thread tests its chunks and appends the reachable
// ones to a list, (b) a warp folds each listed chunk, (c) a block argmax over the chunk winners, then the cluster
// exchange of the big-cluster path. Late in a run only the few chunks around the newest centre
// are folded. The fold is the same per point, so the result is the contract's bit for bit.
// Clouds with a coordinate that is not finite or not below 2^61 fold every chunk at every step
// (the generic fold).

struct FpsSortedPolicy {
  static constexpr int kCluster = 16;
  static constexpr int kThreads = 1024;  // the list kernel
  static constexpr int kThreads2 = 512;  // the one-barrier kernel
  static constexpr int kMaxRounds2 = 4;  // its chunks per lane (registers), else the list kernel
  static constexpr int kChunk = 256;  // points per chunk: 8 per lane of the warp that folds it
  static constexpr int kChunkSmall = 128;  // the one-barrier kernel's chunks while one round holds them
  static constexpr int kPerLane = kChunk / 32;
  static constexpr int kCellBits = 7;  // per axis: 2^21 cells (about 12 points a cell on a 1M shell)
  static constexpr int kBoxBlocks = 264;  // blocks of the bounding-box pass
  static constexpr size_t kMaxSmem = 200 * 1024;
  // Single clouds above this size take the sorted path by default. Measured on an H200 (1024
  // samples from a 1M-point shell): 2.30 ms sorted vs 3.01 ms on the grid path. A variant with
  // chunks of 64 points folded four per warp took 2.91 ms (200k: 2.66 ms vs 2.04 ms grid; 4M:
  // 6.9 ms vs 65 ms streaming): a sorted step costs about 2 us whatever the cloud size (the
  // chain of chunk test, fold, block argmax and cluster exchange), the grid path's step grows
  // with the points per thread.
  static constexpr int64_t kMinPoints = 700000;
};

struct alignas(16) ChunkMeta {
  float lo[3];
  float maxm;  // the largest m of the chunk (-inf: no point)
  float hi[3];
  int key;  // the winner's key (kNoKey: no point)
  float wx, wy, wz;
  unsigned idx;  // the winner's original index
};
static_assert(sizeof(ChunkMeta) == 48, "three 16-byte words");

struct SortedCloud {
  float lo[3], hi[3];
  int safe;  // every coordinate finite and below 2^61 in magnitude
};

__device__ __forceinline__ void box_merge(float (&lo)[3], float (&hi)[3], int& safe, unsigned mask) {
  for (int off = 16; off > 0; off >>= 1) {
#pragma unroll
    for (int d = 0; d < 3; ++d) {
      lo[d] = fminf(lo[d], __shfl_xor_sync(mask, lo[d], off));
      hi[d] = fmaxf(hi[d], __shfl_xor_sync(mask, hi[d], off));
    }
    safe &= __shfl_xor_sync(mask, safe, off);
  }
}

// Bounding box of the cloud's points (NaN ignored by fminf / fmaxf; `safe` records it): per block
// into partial[block], then the last kernel reduces the partials.
__global__ void __launch_bounds__(256) fps_box_kernel(FpsArgs A, float* partial) {
  const CloudRef info = cloud_ref(A, 0);
  float lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
  int safe = 1;
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < info.n; j += int64_t{gridDim.x} * blockDim.x) {
#pragma unroll
    for (int d = 0; d < 3; ++d) {
      const float v = coord(A, info, j, d);
      lo[d] = fminf(lo[d], v);
      hi[d] = fmaxf(hi[d], v);
      safe &= safe_coord(v) ? 1 : 0;
    }
  }
  box_merge(lo, hi, safe, kFull);
  __shared__ float part[8][7];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    for (int d = 0; d < 3; ++d) part[warp][d] = lo[d], part[warp][3 + d] = hi[d];
    part[warp][6] = static_cast<float>(safe);
  }
  __syncthreads();
  if (threadIdx.x < 7) {
    float v = part[0][threadIdx.x];
    for (int w = 1; w < 8; ++w) {
      const float u = part[w][threadIdx.x];
      v = threadIdx.x < 3 ? fminf(v, u) : threadIdx.x < 6 ? fmaxf(v, u) : fminf(v, u);
    }
    partial[blockIdx.x * 8 + threadIdx.x] = v;
  }
}

__global__ void __launch_bounds__(32) fps_box_final_kernel(const float* partial, int blocks, SortedCloud* cloud) {
  float lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
  int safe = 1;
  for (int b = threadIdx.x; b < blocks; b += 32) {
    for (int d = 0; d < 3; ++d) lo[d] = fminf(lo[d], partial[b * 8 + d]), hi[d] = fmaxf(hi[d], partial[b * 8 + 3 + d]);
    safe &= partial[b * 8 + 6] != 0.0f ? 1 : 0;
  }
  box_merge(lo, hi, safe, kFull);
  if (threadIdx.x == 0) {
    for (int d = 0; d < 3; ++d) cloud->lo[d] = lo[d], cloud->hi[d] = hi[d];
    cloud->safe = safe;
  }
}

// Bucketing of the cloud into the cells of a 2^kCellBits-per-axis grid over its bounding box,
// in Morton order of the cells (a counting sort: histogram, exclusive scan, placement). Only the
// chunks' compactness depends on the order, never a result (the fold and the tie rule do not
// depend on where a point sits), so points of one cell are placed in any order (atomics). A
// cloud that is not safe is folded in full at every step: its points stay in index order.
struct CellGrid {
  float lo[3], scale[3];
  float top;  // the last cell per axis, 2^bits - 1
};

// The grid of 2^bits cells per axis over the cloud's bounding box (once per thread).
__device__ __forceinline__ CellGrid fps_cell_grid(const SortedCloud* cloud, int bits) {
  CellGrid g;
  g.top = static_cast<float>((1 << bits) - 1);
#pragma unroll
  for (int d = 0; d < 3; ++d) {
    const float ext = cloud->hi[d] - cloud->lo[d];
    g.lo[d] = cloud->lo[d];
    g.scale[d] = ext > 0.0f ? g.top / ext : 0.0f;
  }
  return g;
}

__device__ __forceinline__ unsigned fps_cell_of(const FpsArgs& A, const CloudRef& info, const CellGrid& g, int64_t j) {
  unsigned code = 0;
#pragma unroll
  for (int d = 0; d < 3; ++d) {
    const float q = fminf(fmaxf((coord(A, info, j, d) - g.lo[d]) * g.scale[d], 0.0f), g.top);
    code |= common::spread_bits10(static_cast<unsigned>(q)) << d;
  }
  return code;
}

// Cell counts (safe clouds); the padding records past the cloud (index kNoIndex). kRank: the
// returning atomic also gives each point its rank in its cell (rank[j]), so the placement needs
// no atomics.
template <bool kRank>
__global__ void __launch_bounds__(256)
    fps_cell_count_kernel(FpsArgs A, const SortedCloud* cloud, int bits, int64_t padded, unsigned* counts,
                          float4* pts, unsigned* rank) {
  const CloudRef info = cloud_ref(A, 0);
  const bool safe = cloud->safe != 0;
  const CellGrid g = fps_cell_grid(cloud, bits);
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < padded; j += int64_t{gridDim.x} * blockDim.x) {
    if (j >= info.n) {
      pts[j] = make_float4(0.0f, 0.0f, 0.0f, __uint_as_float(kNoIndex));
    } else if (safe) {
      if constexpr (kRank) rank[j] = atomicAdd(counts + fps_cell_of(A, info, g, j), 1u);
      else atomicAdd(counts + fps_cell_of(A, info, g, j), 1u);
    }
  }
}

// Records (x, y, z, original index as bits) at their cell's next slot (cursor: the exclusive
// scan of the counts; kRank: at cursor + the point's rank, no atomics); a cloud that is not safe
// keeps index order.
template <bool kRank>
__global__ void __launch_bounds__(256)
    fps_cell_place_kernel(FpsArgs A, const SortedCloud* cloud, int bits, unsigned* cursor, float4* pts,
                          const unsigned* rank) {
  const CloudRef info = cloud_ref(A, 0);
  const bool safe = cloud->safe != 0;
  const CellGrid g = fps_cell_grid(cloud, bits);
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < info.n; j += int64_t{gridDim.x} * blockDim.x) {
    int64_t p = j;
    if (safe) {
      if constexpr (kRank) p = cursor[fps_cell_of(A, info, g, j)] + rank[j];
      else p = atomicAdd(cursor + fps_cell_of(A, info, g, j), 1u);
    }
    pts[p] = make_float4(coord(A, info, j, 0), coord(A, info, j, 1), coord(A, info, j, 2),
                         __uint_as_float(static_cast<unsigned>(j)));
  }
}

// A chunk's winner (largest m, smallest original index; key kNoKey: no point) with its
// coordinates, and (at step 0) the chunk's bounding box. Uniform over the folding warp.
struct ChunkWinner {
  int key;
  unsigned idx;
  float x, y, z;
  float lo[3], hi[3];
};

// One warp folds (or, at step 0, initialises) the NC chunks c[0..NC) at once: every load of all
// of them is issued before the first fold, so NC chunks cost about one memory round trip.
// kInitFold: the initial m (+inf, or -1 for a skipped point) is folded with the centre at once
// (step 0 and the fold of step 1 in one pass).
template <bool kFinite, bool kInit, int NC, bool kInitFold = false, int L = FpsSortedPolicy::kPerLane>
__device__ __forceinline__ void fps_fold_chunks(const float4* __restrict__ pts, float* __restrict__ mg,
                                                const int64_t (&c)[NC], float cx, float cy, float cz, bool skip,
                                                int lane, ChunkWinner (&w)[NC]) {
  // L points per lane: chunks of 32 L points.
  float4 v[NC][L];
  float mm[NC][L];
#pragma unroll
  for (int n = 0; n < NC; ++n) {
    const int64_t p0 = c[n] * (32 * L) + lane;
#pragma unroll
    for (int u = 0; u < L; ++u) v[n][u] = pts[p0 + u * 32];
    if constexpr (!kInit) {
#pragma unroll
      for (int u = 0; u < L; ++u) mm[n][u] = mg[p0 + u * 32];
    }
  }
#pragma unroll
  for (int n = 0; n < NC; ++n) {
    const int64_t p0 = c[n] * (32 * L) + lane;
    int bkey = kNoKey;
    unsigned bidx = kNoIndex;
    float bx = 0.0f, by = 0.0f, bz = 0.0f;
    float lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
#pragma unroll
    for (int u = 0; u < L; ++u) {
      const float4 q = v[n][u];
      const unsigned idx = __float_as_uint(q.w);
      if constexpr (kInit) {
        mm[n][u] = (!skip || eligible(q.x, q.y, q.z)) ? INFINITY : -1.0f;
        if constexpr (kInitFold) mm[n][u] = fold_as<kFinite>(mm[n][u], common::squared_distance3(cx, cy, cz, q.x, q.y, q.z));
        if (idx != kNoIndex) {
          lo[0] = fminf(lo[0], q.x), lo[1] = fminf(lo[1], q.y), lo[2] = fminf(lo[2], q.z);
          hi[0] = fmaxf(hi[0], q.x), hi[1] = fmaxf(hi[1], q.y), hi[2] = fmaxf(hi[2], q.z);
        }
      } else {
        mm[n][u] = fold_as<kFinite>(mm[n][u], common::squared_distance3(cx, cy, cz, q.x, q.y, q.z));
      }
      const int key = idx == kNoIndex ? kNoKey : key_of(mm[n][u]);
      if (key > bkey || (key == bkey && idx < bidx)) bkey = key, bidx = idx, bx = q.x, by = q.y, bz = q.z;
    }
#pragma unroll
    for (int u = 0; u < L; ++u) mg[p0 + u * 32] = mm[n][u];
    warp_argmax(bkey, bidx, w[n].key, w[n].idx);
    const int src = __ffs(__ballot_sync(kFull, bkey == w[n].key && bidx == w[n].idx)) - 1;
    w[n].x = __shfl_sync(kFull, bx, src);
    w[n].y = __shfl_sync(kFull, by, src);
    w[n].z = __shfl_sync(kFull, bz, src);
    if constexpr (kInit) {
      int safe = 1;
      box_merge(lo, hi, safe, kFull);
    }
#pragma unroll
    for (int d = 0; d < 3; ++d) w[n].lo[d] = lo[d], w[n].hi[d] = hi[d];
  }
}

// One warp folds (or, at step 0, initialises) chunk `c` and writes its summary into `meta`.
template <bool kFinite, bool kInit>
__device__ __forceinline__ void fps_sorted_chunk(const float4* __restrict__ pts, float* __restrict__ mg, int64_t c,
                                                 float cx, float cy, float cz, bool skip, int lane, ChunkMeta& meta) {
  const int64_t cs[1] = {c};
  ChunkWinner w[1];
  fps_fold_chunks<kFinite, kInit, 1>(pts, mg, cs, cx, cy, cz, skip, lane, w);
  if (lane == 0) {
    if constexpr (kInit) {
      for (int d = 0; d < 3; ++d) meta.lo[d] = w[0].lo[d], meta.hi[d] = w[0].hi[d];
    }
    meta.maxm = w[0].key == kNoKey ? -INFINITY : __int_as_float(w[0].key);
    meta.key = w[0].key;
    meta.idx = w[0].idx;
    meta.wx = w[0].x, meta.wy = w[0].y, meta.wz = w[0].z;
  }
}

// The sorted kernels' prologue: block 0 pads the output slots past the cloud's steps with -1;
// returns this block's chunk count (its chunks are rank + kCluster * i), or -1 when the cloud has
// no steps.
__device__ __forceinline__ int sorted_block_chunks(const FpsArgs& A, const CloudRef& info, int64_t chunks,
                                                   int threads) {
  constexpr int C = FpsSortedPolicy::kCluster;
  if (blockIdx.x == 0) {
    for (int64_t t = (info.steps > 0 ? info.steps : 0) + threadIdx.x; t < A.M; t += threads) info.o[t] = -1;
  }
  if (info.steps <= 0) return -1;
  return static_cast<int>((chunks - blockIdx.x + C - 1) / C);
}

// Step 0 and step 1's fold of the one-barrier kernel, over the whole GPU before it starts: one
// warp per chunk of 32 L points folds the start point into m (mg) and writes the chunk's box and
// winner into init[c] (the kernel's 16 blocks alone took about 25 us for this pass on 1M points).
template <int L>
__global__ void __launch_bounds__(256)
    fps_prefold_kernel(FpsArgs A, const float4* __restrict__ pts, float* __restrict__ mg, const SortedCloud* cloud,
                       int64_t chunks, ChunkMeta* __restrict__ init) {
  const CloudRef info = cloud_ref(A, 0);
  if (info.steps <= 0) return;
  const int lane = threadIdx.x & 31;
  const float cx = coord(A, info, info.start, 0), cy = coord(A, info, info.start, 1),
              cz = coord(A, info, info.start, 2);
  const auto run = [&](auto finite_c) {
    constexpr bool kFinite = decltype(finite_c)::value;
    for (int64_t c = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32; c < chunks;
         c += int64_t{gridDim.x} * blockDim.x / 32) {
      const int64_t cs[1] = {c};
      ChunkWinner w[1];
      fps_fold_chunks<kFinite, true, 1, true, L>(pts, mg, cs, cx, cy, cz, A.skip, lane, w);
      if (lane == 0) {
        ChunkMeta m;
        for (int d = 0; d < 3; ++d) m.lo[d] = w[0].lo[d], m.hi[d] = w[0].hi[d];
        m.maxm = w[0].key == kNoKey ? -INFINITY : __int_as_float(w[0].key);
        m.key = w[0].key;
        m.idx = w[0].idx;
        m.wx = w[0].x, m.wy = w[0].y, m.wz = w[0].z;
        init[c] = m;
      }
    }
  };
  if (cloud->safe != 0) run(std::true_type{});
  else run(std::false_type{});
}

// The list kernel (`init` unused: it takes the same arguments as the one-barrier kernel).
__global__ void __launch_bounds__(FpsSortedPolicy::kThreads, 1)
    fps_sorted_kernel(FpsArgs A, const float4* __restrict__ pts, float* __restrict__ mg, const SortedCloud* cloud,
                      int64_t chunks, const ChunkMeta* /*init*/) {
  constexpr int C = FpsSortedPolicy::kCluster;
  constexpr int T = FpsSortedPolicy::kThreads;
  constexpr int W = T / 32;
  constexpr unsigned kStepBytes = C * kBlockRecordBytes;
  static_assert(W <= 32 && C <= 32, "one warp winner / block record per lane");
  extern __shared__ float4 dyn[];
  __shared__ int red_key[2][W];
  __shared__ unsigned red_idx[2][W];
  __shared__ int red_pos[2][W];
  __shared__ WarpSlot slots[2][C];
  __shared__ unsigned long long bars[2];
  __shared__ int nact[2];

  const int rank = blockIdx.x;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const CloudRef info = cloud_ref(A, 0);
  int64_t* o = info.o;
  const int cpb = sorted_block_chunks(A, info, chunks, T);
  if (cpb < 0) return;  // uniform over the cluster, before any remote access
  ChunkMeta* meta = reinterpret_cast<ChunkMeta*>(dyn);
  int* list = reinterpret_cast<int*>(meta + ((chunks + C - 1) / C));
  const bool finite = cloud->safe != 0;
  const bool skip = A.skip;
  for (int i = warp; i < cpb; i += W)
    fps_sorted_chunk<true, true>(pts, mg, rank + static_cast<int64_t>(C) * i, 0.0f, 0.0f, 0.0f, skip, lane, meta[i]);
  float cx = coord(A, info, info.start, 0), cy = coord(A, info, info.start, 1), cz = coord(A, info, info.start, 2);
  if (rank == 0 && tid == 0) o[0] = info.first + info.start;
  if (tid == 0) {
    nact[0] = nact[1] = 0;
    init_step_barriers(bars, kStepBytes);
  }
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every block started, mbarriers initialised, chunk summaries ready

  const auto run = [&](auto finite_c) {
    constexpr bool kFinite = decltype(finite_c)::value;
    for (int64_t t = 1; t < info.steps; ++t) {
      const int par = static_cast<int>(t & 1);
      // (a) The chunks the newest centre can change, appended to `list` (any order).
      for (int i0 = 0; i0 < cpb; i0 += T) {
        const int i = i0 + tid;
        bool act = false;
        if (i < cpb) {
          const ChunkMeta& mt = meta[i];
          if constexpr (kFinite) {
            const float qx = fminf(fmaxf(cx, mt.lo[0]), mt.hi[0]);
            const float qy = fminf(fmaxf(cy, mt.lo[1]), mt.hi[1]);
            const float qz = fminf(fmaxf(cz, mt.lo[2]), mt.hi[2]);
            act = common::squared_distance3(cx, cy, cz, qx, qy, qz) < mt.maxm;
          } else {
            act = mt.key != kNoKey;
          }
        }
        const unsigned mask = __ballot_sync(kFull, act);
        if (mask != 0) {
          int base = 0;
          if (lane == 0) base = atomicAdd(&nact[par], __popc(mask));
          base = __shfl_sync(kFull, base, 0);
          if (act) list[base + __popc(mask & ((1u << lane) - 1u))] = i;
        }
      }
      __syncthreads();
      // (b) Fold them, a warp per chunk.
      const int na = nact[par];
      if (tid == 0) nact[par ^ 1] = 0;  // read last at step t - 1, before this step's barrier
      for (int a = warp; a < na; a += W) {
        const int i = list[a];
        fps_sorted_chunk<kFinite, false>(pts, mg, rank + static_cast<int64_t>(C) * i, cx, cy, cz, skip, lane, meta[i]);
      }
      __syncthreads();
      // (c) Block argmax over the chunk winners.
      int bkey = kNoKey, bpos = -1;
      unsigned bidx = kNoIndex;
      for (int i = tid; i < cpb; i += T) {
        const int key = meta[i].key;
        const unsigned idx = meta[i].idx;
        if (key > bkey || (key == bkey && idx < bidx)) bkey = key, bidx = idx, bpos = i;
      }
      int wkey;
      unsigned widx;
      warp_argmax(bkey, bidx, wkey, widx);
      int src = __ffs(__ballot_sync(kFull, bkey == wkey && bidx == widx)) - 1;
      const int wpos = __shfl_sync(kFull, bpos, src);
      if (lane == 0) {
        red_key[par][warp] = wkey;
        red_idx[par][warp] = widx;
        red_pos[par][warp] = wpos;
      }
      __syncthreads();
      if (warp == 0) {
        const int k = lane < W ? red_key[par][lane] : kNoKey;
        const unsigned x = lane < W ? red_idx[par][lane] : kNoIndex;
        warp_argmax(k, x, wkey, widx);
        src = __ffs(__ballot_sync(kFull, k == wkey && x == widx)) - 1;
        const int pos = __shfl_sync(kFull, lane < W ? red_pos[par][lane] : -1, src);
        float px = 0.0f, py = 0.0f, pz = 0.0f;
        if (pos >= 0) px = meta[pos].wx, py = meta[pos].wy, pz = meta[pos].wz;
        send_block_winner<C>(slots, bars, par, rank, lane, wkey, widx, px, py, pz);
      }
      widx = receive_cluster_winner<C>(slots, bars, par, t, tid, lane, kStepBytes, cx, cy, cz);
      if (rank == 0 && tid == 0) o[t] = info.first + static_cast<int64_t>(widx);
    }
  };
  if (finite) run(std::true_type{});
  else run(std::false_type{});
}

// Sorted path, one barrier a step: chunk i of a block belongs to lane (i / W) % 32 of warp i % W
// (round i / (32 W)), so the chunks around the newest centre, consecutive in i, spread over the
// warps. Every lane keeps its chunks' box and winner (key, index, coordinates) in registers, and
// no other warp reads them: per step a warp tests its chunks, folds the reachable ones itself (the
// whole warp, NC chunks at a time) and reduces its chunk winners into red_*[par]; one
// __syncthreads, then warp 0 reduces the W warp winners and sends the block winner (the exchange
// of the big-cluster path). No shared chunk summaries, list, atomics or scan.
#ifdef PCOPS_FPS_TRACE
// Development build only (benchmarks/scripts/fps_trace.cu): clock64 stamps of steps
// [kTraceFirst, kTraceFirst + kTraceSteps) per block: [0] loop top, [1 + w] warp w's fold done,
// [33] after the barrier, [34] block winner sent, [35] cluster winner received, [36] block winner
// reduced (before the send).
constexpr int kTraceFirst = 512, kTraceSteps = 64, kTraceSlots = 37;
__device__ long long g_fps_trace[16 * kTraceSteps * kTraceSlots];
#define PCOPS_FPS_STAMP(t, slot)                                                                      \
  do {                                                                                                \
    if ((t) >= kTraceFirst && (t) < kTraceFirst + kTraceSteps)                                        \
      g_fps_trace[(blockIdx.x * kTraceSteps + ((t) - kTraceFirst)) * kTraceSlots + (slot)] = clock64(); \
  } while (0)
#else
#define PCOPS_FPS_STAMP(t, slot) \
  do {                           \
  } while (0)
#endif

//
// The send is split: after the barrier every warp reduces the warp winners, and warp w alone
// sends the block record to block w (one st.async pair per warp). Measured on 1M points (H200,
// 1024 samples, six runs): 1.47-1.55 ms against 1.60-1.68 ms when warp 0 reduces and its lanes
// send to all 16 blocks. Tried and dropped: a 17th warp that owns no chunk and issues no global
// store sends the record (1.61 ms against 1.62); a fold keeping its new m in registers until the
// record is sent (1.64-1.70 ms; with the split send 1.51-1.57 ms).
template <int T, int R, int NC, int L>
__global__ void __launch_bounds__(T, 1)
    fps_sorted2_kernel(FpsArgs A, const float4* __restrict__ pts, float* __restrict__ mg, const SortedCloud* cloud,
                       int64_t chunks, const ChunkMeta* __restrict__ init) {
  constexpr int C = FpsSortedPolicy::kCluster;
  constexpr int W = T / 32;
  constexpr unsigned kStepBytes = C * kBlockRecordBytes;
  static_assert(W <= 32 && C <= 32, "one warp winner / block record per lane");
  static_assert(NC >= 1 && NC <= 4, "one to four chunks per fold");
  static_assert(W >= C, "a sending warp per block");
  __shared__ int red_key[2][W];
  __shared__ unsigned red_idx[2][W];
  __shared__ float red_xyz[2][3][W];
  __shared__ WarpSlot slots[2][C];
  __shared__ unsigned long long bars[2];

  const int rank = blockIdx.x;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const CloudRef info = cloud_ref(A, 0);
  int64_t* o = info.o;
  const int cpb = sorted_block_chunks(A, info, chunks, T);
  if (cpb < 0) return;  // uniform over the cluster, before any remote access
  const bool finite = cloud->safe != 0;
  const bool skip = A.skip;
  // This lane's chunks (round r: i = warp + W * (lane + 32 r)), initialised by this warp.
  float lo[R][3], hi[R][3], wx[R], wy[R], wz[R];
  int key[R];
  unsigned idx[R];
  const auto global_chunk = [&](int r, int owner) { return rank + int64_t{C} * (warp + W * (owner + 32 * r)); };
  const auto owns = [&](int r, int owner) { return warp + W * (owner + 32 * r) < cpb; };
  float cx = coord(A, info, info.start, 0), cy = coord(A, info, info.start, 1), cz = coord(A, info, info.start, 2);
  if (rank == 0 && tid == 0) o[0] = info.first + info.start;
  if (tid == 0) init_step_barriers(bars, kStepBytes);

  // Folds the chunks of round r owned by lanes sl[0..cnt) (cnt >= 1, the rest -1) in one memory
  // round trip; the owners keep the new summaries (and, in the initial pass, the boxes).
  const auto fold_group = [&](int r, const int (&sl)[NC], int cnt, auto init_c, auto finite_c) {
    constexpr bool kInitial = decltype(init_c)::value, kFinite = decltype(finite_c)::value;
    const auto go = [&](auto n_c) {
      constexpr int N = decltype(n_c)::value;
      if constexpr (N <= NC) {
        int64_t cs[N];
        ChunkWinner w[N];
#pragma unroll
        for (int n = 0; n < N; ++n) cs[n] = global_chunk(r, sl[n]);
        fps_fold_chunks<kFinite, kInitial, N, kInitial, L>(pts, mg, cs, cx, cy, cz, skip, lane, w);
#pragma unroll
        for (int n = 0; n < N; ++n) {
          if (lane == sl[n]) {
            key[r] = w[n].key, idx[r] = w[n].idx, wx[r] = w[n].x, wy[r] = w[n].y, wz[r] = w[n].z;
            if constexpr (kInitial) {
              for (int d = 0; d < 3; ++d) lo[r][d] = w[n].lo[d], hi[r][d] = w[n].hi[d];
            }
          }
        }
      }
    };
    using std::integral_constant;
    switch (cnt) {
      case 1: go(integral_constant<int, 1>{}); break;
      case 2: go(integral_constant<int, 2>{}); break;
      case 3: go(integral_constant<int, 3>{}); break;
      default: go(integral_constant<int, 4>{}); break;
    }
  };

  const auto run = [&](auto finite_c) {
    constexpr bool kFinite = decltype(finite_c)::value;
    // Step 0 and step 1's fold (with the start point): every chunk's box and winner from the
    // prefold kernel (m is in mg already).
#pragma unroll
    for (int r = 0; r < R; ++r) {
      key[r] = kNoKey;
      idx[r] = kNoIndex;
      wx[r] = wy[r] = wz[r] = 0.0f;
      for (int d = 0; d < 3; ++d) lo[r][d] = 0.0f, hi[r][d] = 0.0f;
      if (owns(r, lane)) {
        const ChunkMeta m = init[global_chunk(r, lane)];
        key[r] = m.key, idx[r] = m.idx, wx[r] = m.wx, wy[r] = m.wy, wz[r] = m.wz;
        for (int d = 0; d < 3; ++d) lo[r][d] = m.lo[d], hi[r][d] = m.hi[d];
      }
    }
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();  // every block started, mbarriers initialised

    for (int64_t t = 1; t < info.steps; ++t) {
      const int par = static_cast<int>(t & 1);
      int bkey = kNoKey;
      unsigned bidx = kNoIndex;
      float bx = 0.0f, by = 0.0f, bz = 0.0f;
      if (tid == 0) PCOPS_FPS_STAMP(t, 0);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        bool act = false;
        if (t > 1 && owns(r, lane)) {  // step 1's fold was the initial pass
          if constexpr (kFinite) {
            const float maxm = key[r] == kNoKey ? -INFINITY : __int_as_float(key[r]);
            const float qx = fminf(fmaxf(cx, lo[r][0]), hi[r][0]);
            const float qy = fminf(fmaxf(cy, lo[r][1]), hi[r][1]);
            const float qz = fminf(fmaxf(cz, lo[r][2]), hi[r][2]);
            act = common::squared_distance3(cx, cy, cz, qx, qy, qz) < maxm;
          } else {
            act = key[r] != kNoKey;
          }
        }
        unsigned mask = __ballot_sync(kFull, act);
        while (mask != 0) {  // uniform over the warp: the reachable chunks, NC at a time
          int sl[NC];
          int cnt = 0;
#pragma unroll
          for (int n = 0; n < NC; ++n) {
            sl[n] = -1;
            if (mask != 0) sl[n] = __ffs(mask) - 1, mask &= mask - 1, ++cnt;
          }
          fold_group(r, sl, cnt, std::false_type{}, finite_c);
        }
        if (owns(r, lane) && (key[r] > bkey || (key[r] == bkey && idx[r] < bidx)))
          bkey = key[r], bidx = idx[r], bx = wx[r], by = wy[r], bz = wz[r];
      }
      int wkey;
      unsigned widx;
      warp_argmax(bkey, bidx, wkey, widx);
      int src = __ffs(__ballot_sync(kFull, bkey == wkey && bidx == widx)) - 1;
      bx = __shfl_sync(kFull, bx, src);
      by = __shfl_sync(kFull, by, src);
      bz = __shfl_sync(kFull, bz, src);
      if (lane == 0) {
        red_key[par][warp] = wkey;
        red_idx[par][warp] = widx;
        red_xyz[par][0][warp] = bx, red_xyz[par][1][warp] = by, red_xyz[par][2][warp] = bz;
        PCOPS_FPS_STAMP(t, 1 + warp);
      }
      // red_*[par] is rewritten at step t + 2, after every block's step t + 1 record arrived,
      // which warp 0 of each block sends after this block's step t + 1 barrier.
      __syncthreads();
      if (tid == 0) PCOPS_FPS_STAMP(t, 33);
      {
        const int k = lane < W ? red_key[par][lane] : kNoKey;
        const unsigned x = lane < W ? red_idx[par][lane] : kNoIndex;
        warp_argmax(k, x, wkey, widx);
        src = __ffs(__ballot_sync(kFull, k == wkey && x == widx)) - 1;
        const float px = red_xyz[par][0][src], py = red_xyz[par][1][src], pz = red_xyz[par][2][src];
        if (tid == 0) PCOPS_FPS_STAMP(t, 36);
        if (lane == 0 && warp < C) send_block_record<C>(slots, bars, par, rank, warp, wkey, widx, px, py, pz);
        if (tid == 0) PCOPS_FPS_STAMP(t, 34);
      }
      // Every warp polls the mbarrier (measured on 1M points: 1.57 ms; warp 0 alone, with the
      // others at a second barrier reading the winner from shared memory: 1.63 ms).
      widx = receive_cluster_winner<C>(slots, bars, par, t, tid, lane, kStepBytes, cx, cy, cz);
      if (tid == 0) PCOPS_FPS_STAMP(t, 35);
      if (rank == 0 && tid == 0) o[t] = info.first + static_cast<int64_t>(widx);
    }
  };
  if (finite) run(std::true_type{});
  else run(std::false_type{});
}

// ---------------------------------------------------------------------------------------------
// Host side.

using Launch = FpsArgs;

// The clouds b0, b0 + 1, ... of a launch (gridDim.y counts from 0 in every launch).
FpsArgs shifted(FpsArgs a, int64_t b0) {
  a.lengths += b0;
  if (a.ragged != nullptr) {
    a.ragged += b0;  // the stride between the four arrays stays
  } else {
    a.P.data += b0 * a.P.stride_batch;
    a.out += b0 * a.M;
  }
  return a;
}

// Calls f(integral_constant<int, C>, integral_constant<int, PPT>, bool_constant<copy>) for the
// runtime (C, ppt, copy); the copy variant exists for C >= 2 and PPT <= 16 (N <= 16384).
template <int C, int PPT, class F>
void with_cluster_copy(bool copy, F&& f) {
  using std::integral_constant;
  if constexpr (C >= 2 && PPT <= 16) {
    if (copy) return f(integral_constant<int, C>{}, integral_constant<int, PPT>{}, std::true_type{});
  }
  return f(integral_constant<int, C>{}, integral_constant<int, PPT>{}, std::false_type{});
}

template <int C, class F>
void with_cluster_ppt(int ppt, bool copy, F&& f) {
  switch (ppt) {
    case 1: return with_cluster_copy<C, 1>(copy, f);
    case 2: return with_cluster_copy<C, 2>(copy, f);
    case 4: return with_cluster_copy<C, 4>(copy, f);
    case 8: return with_cluster_copy<C, 8>(copy, f);
    case 16:
      if constexpr (C >= 2) return with_cluster_copy<C, 16>(copy, f);
      break;
    case 32:
      if constexpr (C >= 4) return with_cluster_copy<C, 32>(copy, f);
      break;
  }
  throw std::logic_error("pcops fps: no cluster kernel for this shape");
}

template <class F>
void with_cluster_kernel(int C, int ppt, bool copy, F&& f) {
  switch (C) {
    case 1: return with_cluster_ppt<1>(ppt, copy, f);
    case 2: return with_cluster_ppt<2>(ppt, copy, f);
    case 4: return with_cluster_ppt<4>(ppt, copy, f);
    default: return with_cluster_ppt<8>(ppt, copy, f);
  }
}

template <int C, int PPT, bool kCopy>
size_t cluster_smem(int64_t N) {
  constexpr int T = FpsClusterPolicy::kClusterThreads / C;
  return kCopy ? sizeof(float) * 3 * static_cast<size_t>((N + 3) & ~int64_t{3}) : sizeof(float4) * T * PPT;
}

constexpr int min_cluster_for(int ppt) { return ppt >= 32 ? 4 : ppt >= 16 ? 2 : 1; }

// Clusters of this shape that can be resident at once (the GPCs bound clusters of 8).
int resident_clusters(int C, int ppt, bool copy, int64_t N) {
  int clusters = 0;
  with_cluster_kernel(C, ppt, copy, [&](auto c, auto p, auto k) {
    constexpr int T = FpsClusterPolicy::kClusterThreads / decltype(c)::value;
    const size_t smem = cluster_smem<decltype(c)::value, decltype(p)::value, decltype(k)::value>(N);
    auto kernel = fps_cluster_kernel<decltype(c)::value, decltype(p)::value, decltype(k)::value>;
    PCOPS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem)));
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(decltype(c)::value, 1);
    config.blockDim = dim3(T);
    config.dynamicSmemBytes = smem;
    PCOPS_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &config));
  });
  return clusters;
}

void cluster_path(const CudaContext& ctx, Launch a, int64_t B, int64_t N, int sms, int force_c = 0,
                  bool allow_copy = true) {
  int ppt = 1;
  while (static_cast<int64_t>(ppt) * FpsClusterPolicy::kClusterThreads < N) ppt *= 2;
  // Spread a cloud over more SMs while the batch leaves SMs idle and each block keeps enough
  // points to outweigh the dearer cluster barrier; at least as many blocks as the registers need.
  int C = 1;
  while (C < FpsClusterPolicy::kMaxCluster && B * (2 * C) <= sms &&
         2 * C * FpsClusterPolicy::kMinBlockPoints <= N)
    C *= 2;
  C = std::max(C, min_cluster_for(ppt));
  // A second wave of clusters would double the time: use smaller clusters when the batch's
  // clusters cannot all be resident at this size.
  const auto copy_for = [&](int c) { return allow_copy && c > 1 && N <= FpsClusterPolicy::kCopyMaxPoints; };
  while (C > min_cluster_for(ppt) && C > 1 && B > resident_clusters(C, ppt, copy_for(C), N)) C /= 2;
  if (force_c > 0) C = std::max(force_c, min_cluster_for(ppt));
  const bool copy = copy_for(C);
  constexpr int64_t kMaxGridY = 65535;
  for (int64_t b0 = 0; b0 < B; b0 += kMaxGridY) {
    const int64_t clouds = std::min(kMaxGridY, B - b0);
    with_cluster_kernel(C, ppt, copy, [&](auto c, auto p, auto k) {
      constexpr int kC = decltype(c)::value, kPpt = decltype(p)::value;
      constexpr int T = FpsClusterPolicy::kClusterThreads / kC;
      const size_t smem = cluster_smem<kC, kPpt, decltype(k)::value>(N);
      auto kernel = fps_cluster_kernel<kC, kPpt, decltype(k)::value>;
      PCOPS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(smem)));
      detail::launch(ctx, kernel, dim3(kC, static_cast<unsigned>(clouds)), dim3(T), smem, shifted(a, b0));
    });
  }
}

template <int PPT>
void run_grid(const CudaContext& ctx, detail::Workspace& ws, Launch a, int64_t B, int64_t N,
              int64_t clouds_per_launch, int g) {
  constexpr int T = FpsGridPolicy::kThreads;
  constexpr int NW = PPT > 0 ? 3 : 2;
  const size_t smem = PPT > 0 ? sizeof(float4) * T * PPT : 0;
  auto kernel = fps_grid_kernel<PPT>;
  PCOPS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(smem)));
  const int64_t span = detail::ceil_div(N, g);
  const int64_t xwords = clouds_per_launch * FpsGridPolicy::kRing * NW * g;
  auto* xch = ws.alloc<unsigned long long>(xwords);
  float* mglob = PPT > 0 ? ws.alloc<float>(1) : ws.alloc<float>(clouds_per_launch * N);
  const cudaStream_t stream = detail::stream_of(ctx);
  for (int64_t b0 = 0; b0 < B; b0 += clouds_per_launch) {
    const int64_t clouds = std::min(clouds_per_launch, B - b0);
    // Tags of an earlier launch must not be mistaken for this one's.
    PCOPS_CUDA_CHECK(cudaMemsetAsync(xch, 0, static_cast<size_t>(xwords) * sizeof(unsigned long long), stream));
    FpsArgs chunk = shifted(a, b0);
    int64_t sp = span;
    void* args[] = {&chunk, &sp, &xch, &mglob};
    // Not detail::launch: blocks wait on each other at every step, so all of them must be
    // resident, which only a cooperative launch guarantees (it fails instead of deadlocking).
    PCOPS_CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(kernel),
                                                 dim3(static_cast<unsigned>(g), static_cast<unsigned>(clouds)),
                                                 dim3(T), args, smem, stream));
  }
}

// Big-cluster path for B clouds of N points with T threads per block; returns false when the
// cloud needs more than FpsBigClusterPolicy::kMaxPpt points per thread or the batch's clusters
// cannot all be resident at once (the grid path takes the cloud then).
template <int T>
bool run_bigcluster(const CudaContext& ctx, Launch a, int64_t B, int64_t N) {
  constexpr int C = FpsBigClusterPolicy::kCluster;
  const int64_t span = detail::ceil_div(N, C);
  const int64_t per_thread = detail::ceil_div(span, T);
  if (per_thread > FpsBigClusterPolicy::kMaxPpt || B > 65535) return false;
  bool ok = false;
  const auto go = [&](auto ppt_c) {
    constexpr int kPpt = decltype(ppt_c)::value;
    auto kernel = fps_bigcluster_kernel<C, T, kPpt>;
    const size_t smem = sizeof(float4) * T * kPpt;
    PCOPS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    PCOPS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = C;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(C, 1);
    config.blockDim = dim3(T);
    config.dynamicSmemBytes = smem;
    config.stream = detail::stream_of(ctx);
    config.attrs = attr;
    config.numAttrs = 1;
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) != cudaSuccess) {
      (void)cudaGetLastError();  // e.g. a device without clusters of this size
      return;
    }
    // Blocks wait on each other at every step: a second wave of clusters would only start after
    // the first finished, which is correct but slower than the grid path.
    if (clusters < B) return;
    config.gridDim = dim3(C, static_cast<unsigned>(B));
    PCOPS_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, a, span));
    ok = true;
  };
  using std::integral_constant;
  // Exact counts above 8: one point more per thread is a whole extra pass over the registers.
  switch (per_thread) {
    case 1: case 2: go(integral_constant<int, 2>{}); break;
    case 3: case 4: go(integral_constant<int, 4>{}); break;
    case 5: case 6: go(integral_constant<int, 6>{}); break;
    case 7: case 8: go(integral_constant<int, 8>{}); break;
    case 9: case 10: go(integral_constant<int, 10>{}); break;
    case 11: go(integral_constant<int, 11>{}); break;
    case 12: go(integral_constant<int, 12>{}); break;
    case 13: go(integral_constant<int, 13>{}); break;
    case 14: go(integral_constant<int, 14>{}); break;
    case 15: go(integral_constant<int, 15>{}); break;
    default: go(integral_constant<int, 16>{}); break;
  }
  return ok;
}

// Launch configuration of one sorted-path kernel (cluster of kCluster blocks of `threads`).
struct SortedLaunch {
  cudaLaunchAttribute attr[1];
  cudaLaunchConfig_t config = {};
};

// Prepares the launch of `kernel` with `threads` threads and `smem` bytes; false when the cluster
// cannot be resident.
// The attributes and the residency check are made once per (kernel, device, shared memory size):
// the queries cost more host time than the launches of a whole run.
template <class K>
bool sorted_launch_config(const CudaContext& ctx, K kernel, int threads, size_t smem, SortedLaunch& L) {
  using P = FpsSortedPolicy;
  int dev = 0;
  PCOPS_CUDA_CHECK(cudaGetDevice(&dev));
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, size_t>, bool> known;
  const auto key = std::make_tuple(reinterpret_cast<const void*>(kernel), dev, smem);
  {
    std::lock_guard<std::mutex> lock(mu);
    const auto it = known.find(key);
    if (it != known.end() && !it->second) return false;
    if (it == known.end()) {
      PCOPS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
      PCOPS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    }
  }
  L.attr[0].id = cudaLaunchAttributeClusterDimension;
  L.attr[0].val.clusterDim.x = P::kCluster;
  L.attr[0].val.clusterDim.y = 1;
  L.attr[0].val.clusterDim.z = 1;
  L.config.gridDim = dim3(P::kCluster, 1);
  L.config.blockDim = dim3(static_cast<unsigned>(threads));
  L.config.dynamicSmemBytes = smem;
  L.config.stream = detail::stream_of(ctx);
  L.config.attrs = L.attr;
  L.config.numAttrs = 1;
  std::lock_guard<std::mutex> lock(mu);
  const auto it = known.find(key);
  if (it != known.end()) return it->second;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &L.config) != cudaSuccess) (void)cudaGetLastError();
  return known[key] = clusters >= 1;
}

// The one-barrier kernel for `per_block` chunks per block of 32 L points (at most kMaxRounds2
// rounds of kThreads2 chunks; false beyond); calls f(kernel, threads). nc: chunks per fold (0:
// the policy's, two per memory round trip; measured on 1M points with chunks of 128: 1.66 ms
// with two, 1.72 with one, 1.80 with four).
template <int L, class F>
bool with_sorted2_kernel(int64_t per_block, int nc, F&& f) {
  using P = FpsSortedPolicy;
  constexpr int T = P::kThreads2;
  const int64_t r = detail::ceil_div(per_block, int64_t{T});
  if (nc == 0) nc = 2;
  if (r <= 1) {
    if (nc == 1) return f(fps_sorted2_kernel<T, 1, 1, L>, T);
    if constexpr (L == 4) {  // four chunks of 128 points: the registers of two of 256
      if (nc != 2) return f(fps_sorted2_kernel<T, 1, 4, L>, T);
    }
    return f(fps_sorted2_kernel<T, 1, 2, L>, T);
  }
  if (r <= 2) return nc == 1 ? f(fps_sorted2_kernel<T, 2, 1, L>, T) : f(fps_sorted2_kernel<T, 2, 2, L>, T);
  if (r <= 4) return f(fps_sorted2_kernel<T, 4, 1, L>, T);
  return false;
}


// Sorted path for one cloud of N slots; returns false when its chunk summaries do not fit in
// shared memory (more than about 16M points) or the cluster cannot be resident (the grid or
// streaming path takes the cloud then). variant: -1 the list kernel; else the one-barrier kernel
// folding `variant` chunks at a time (0: the policy's), or the list kernel past its rounds.
// chunk: points per chunk of the one-barrier kernel (0: 128 while one round holds them, else 256;
// the list kernel: 256).
bool run_sorted(const CudaContext& ctx, detail::Workspace& ws, const FpsArgs& a, int64_t N, int variant,
                int chunk = 0, int cell_bits = FpsSortedPolicy::kCellBits, bool rank_place = true) {
  using P = FpsSortedPolicy;
  if (N >= int64_t{1} << 31) return false;
  const auto blocks_chunks = [&](int c) { return detail::ceil_div(detail::ceil_div(N, int64_t{c}), int64_t{P::kCluster}); };
  // 1M points: 1.66 ms with chunks of 128 (one round) vs 1.72 with 256; 4M: 3.40 ms with 128
  // (four rounds) vs 3.03 with 256 (two).
  if (chunk == 0) chunk = blocks_chunks(P::kChunkSmall) <= P::kThreads2 ? P::kChunkSmall : P::kChunk;
  const bool list = variant < 0 || blocks_chunks(P::kChunk) > int64_t{P::kThreads2} * P::kMaxRounds2;
  if (list || blocks_chunks(chunk) > int64_t{P::kThreads2} * P::kMaxRounds2) chunk = P::kChunk;
  const int64_t chunks = detail::ceil_div(N, int64_t{chunk});
  const int64_t per_block = detail::ceil_div(chunks, int64_t{P::kCluster});
  const size_t smem = list ? static_cast<size_t>(per_block) * (sizeof(ChunkMeta) + sizeof(int)) : 0;
  if (smem > P::kMaxSmem) return false;
  SortedLaunch L;
  const void* chosen = nullptr;
  const auto pick = [&](auto kernel, int t) {
    if (!sorted_launch_config(ctx, kernel, t, smem, L)) return false;
    chosen = reinterpret_cast<const void*>(kernel);
    return true;
  };
  const int nc = variant;
  const bool picked = list           ? pick(fps_sorted_kernel, P::kThreads)
                      : chunk == 128 ? with_sorted2_kernel<4>(per_block, nc, pick)
                                     : with_sorted2_kernel<8>(per_block, nc, pick);
  if (!picked) return false;
  const cudaStream_t stream = detail::stream_of(ctx);
  // Bounding box and safety flag.
  float* partial = ws.alloc<float>(P::kBoxBlocks * 8);
  auto* cloud = static_cast<SortedCloud*>(ws.bytes(sizeof(SortedCloud)));
  detail::launch(ctx, fps_box_kernel, dim3(P::kBoxBlocks), dim3(256), 0, a, partial);
  detail::launch(ctx, fps_box_final_kernel, dim3(1), dim3(32), 0, static_cast<const float*>(partial),
                 static_cast<int>(P::kBoxBlocks), cloud);
  // Counting sort into the cells (Morton order of the cells): counts, exclusive scan, placement.
  const int64_t kCells = int64_t{1} << (3 * cell_bits);
  const int64_t padded = chunks * chunk;
  auto* pts = static_cast<float4*>(ws.bytes(static_cast<size_t>(padded) * sizeof(float4)));
  float* mg = ws.alloc<float>(padded);
  unsigned* counts = ws.alloc<unsigned>(kCells);
  unsigned* cursor = ws.alloc<unsigned>(kCells);
  PCOPS_CUDA_CHECK(cudaMemsetAsync(counts, 0, kCells * sizeof(unsigned), stream));
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(detail::ceil_div(padded, int64_t{256}), 8192));
  unsigned* rank = rank_place ? ws.alloc<unsigned>(N) : nullptr;
  detail::launch(ctx, rank_place ? fps_cell_count_kernel<true> : fps_cell_count_kernel<false>, dim3(blocks),
                 dim3(256), 0, a, static_cast<const SortedCloud*>(cloud), cell_bits, padded, counts, pts, rank);
  size_t temp_bytes = 0;
  PCOPS_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, temp_bytes, counts, cursor, kCells, stream));
  void* temp = ws.bytes(temp_bytes);
  PCOPS_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(temp, temp_bytes, counts, cursor, kCells, stream));
  detail::launch(ctx, rank_place ? fps_cell_place_kernel<true> : fps_cell_place_kernel<false>, dim3(blocks),
                 dim3(256), 0, a, static_cast<const SortedCloud*>(cloud), cell_bits, cursor, pts,
                 static_cast<const unsigned*>(rank));
  ChunkMeta* init = nullptr;
  if (!list) {
    init = static_cast<ChunkMeta*>(ws.bytes(static_cast<size_t>(chunks) * sizeof(ChunkMeta)));
    const unsigned pre_blocks = static_cast<unsigned>(std::min<int64_t>(detail::ceil_div(chunks, int64_t{8}), 8192));
    detail::launch(ctx, chunk == 128 ? fps_prefold_kernel<4> : fps_prefold_kernel<8>, dim3(pre_blocks), dim3(256), 0,
                   a, static_cast<const float4*>(pts), mg, static_cast<const SortedCloud*>(cloud), chunks, init);
  }
  FpsArgs args = a;
  const float4* cpts = pts;
  const SortedCloud* ccloud = cloud;
  int64_t nchunks = chunks;
  const ChunkMeta* cinit = init;
  void* params[] = {&args, &cpts, &mg, &ccloud, &nchunks, &cinit};
  PCOPS_CUDA_CHECK(cudaLaunchKernelExC(&L.config, chosen, params));
  return true;
}

// Tuning override for benchmarks (environment PCOPS_CUDA_FPS_CONFIG, read at every call):
// "cluster:C" (cluster path with C blocks), "cluster-nocopy:C" (the same without the cloud copy), "big:T" (big-cluster path, T threads per block),
// "grid:G" (grid path, G blocks per cloud), "sorted" (sorted path, one cloud; "sorted:NC" the one-barrier
// kernel folding NC chunks at a time, "sorted128[:NC]" / "sorted256[:NC]" the same with chunks of 128 / 256
// points, "sorted-list" the list kernel, "sorted-cells:B" 2^B cells per axis in the bucketing,
// "sorted-atomic" the placement by atomic cursors instead of
// the counting pass's ranks), "stream". Unset: the measured choice below.
struct FpsOverride {
  std::string path;
  int value = 0;
};
FpsOverride fps_override() {
  FpsOverride o;
  const char* e = std::getenv("PCOPS_CUDA_FPS_CONFIG");
  if (e == nullptr || *e == 0) return o;
  const std::string s(e);
  const size_t c = s.find(':');
  o.path = s.substr(0, c);
  if (c != std::string::npos) o.value = std::atoi(s.c_str() + c + 1);
  return o;
}

template <int PPT>
int resident_blocks_per_sm() {
  constexpr int T = FpsGridPolicy::kThreads;
  const size_t smem = PPT > 0 ? sizeof(float4) * T * PPT : 0;
  auto kernel = fps_grid_kernel<PPT>;
  PCOPS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(smem)));
  int blocks = 0;
  PCOPS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, T, smem));
  if (blocks < 1) throw std::runtime_error("pcops fps: grid kernel cannot be resident");
  return blocks;
}

// Chooses the path for B clouds of at most N points of dimension D and launches it.
void dispatch(const CudaContext& ctx, detail::Workspace& ws, const FpsArgs& a, int64_t B, int64_t N, int64_t D) {
  const int sms = detail::device_properties().multiProcessorCount;
  constexpr int64_t T = FpsGridPolicy::kThreads;
  const FpsOverride ov = fps_override();
  if (D == 3 && N <= int64_t{FpsClusterPolicy::kClusterThreads} * FpsClusterPolicy::kMaxPpt &&
      (ov.path.empty() || ov.path == "cluster" || ov.path == "cluster-nocopy")) {
    cluster_path(ctx, a, B, N, sms, ov.path.empty() ? 0 : ov.value, ov.path != "cluster-nocopy");
    return;
  }
  if (D == 3 && (ov.path.empty() || ov.path == "big")) {
    const bool small = ov.path == "big" ? ov.value <= FpsBigClusterPolicy::kThreadsSmall : N <= FpsBigClusterPolicy::kSmallPoints;
    if (small ? run_bigcluster<FpsBigClusterPolicy::kThreadsSmall>(ctx, a, B, N)
              : run_bigcluster<FpsBigClusterPolicy::kThreads>(ctx, a, B, N)) {
      return;
    }
  }
  // Dense single clouds (a ragged single cloud would work the same way through cloud_ref, but has
  // not run on a GPU yet).
  if (D == 3 && B == 1 && a.ragged == nullptr &&
      (ov.path.empty() ? N > FpsSortedPolicy::kMinPoints
                       : ov.path == "sorted" || ov.path == "sorted128" || ov.path == "sorted256" ||
                             ov.path == "sorted-list" || ov.path == "sorted-cells" ||
                             ov.path == "sorted-atomic") &&
      run_sorted(ctx, ws, a, N,
                 ov.path == "sorted-list" ? -1 : ov.path == "sorted-cells" || ov.path == "sorted-atomic" ? 0 : ov.value,
                 ov.path == "sorted128" ? 128 : ov.path == "sorted256" ? 256 : 0,
                 ov.path == "sorted-cells" ? std::clamp(ov.value, 1, 8) : FpsSortedPolicy::kCellBits,
                 ov.path != "sorted-atomic")) {
    return;
  }
  const int64_t grid_sms = std::min<int64_t>(sms, FpsGridPolicy::kMaxBlocks);
  if (D == 3 && N <= grid_sms * T * FpsGridPolicy::kMaxPpt && ov.path != "stream") {
    // One block per SM, at least g_min blocks per cloud, as many clouds per launch as fit; a
    // cloud whose blocks would hold fewer than kTargetPpt points per thread gets fewer blocks.
    const int64_t g_min = detail::ceil_div(N, T * FpsGridPolicy::kMaxPpt);
    const int64_t clouds = std::min<int64_t>(B, grid_sms / g_min);
    const int64_t g_target = std::max(g_min, detail::ceil_div(N, T * FpsGridPolicy::kTargetPpt));
    int g = static_cast<int>(std::min(grid_sms / clouds, g_target));
    if (ov.path == "grid" && ov.value > 0) g = static_cast<int>(std::clamp<int64_t>(ov.value, g_min, grid_sms / clouds));
    const int64_t per_thread = detail::ceil_div(detail::ceil_div(N, g), T);
    int ppt = 1;
    while (ppt < per_thread) ppt *= 2;
    switch (ppt) {
      case 1: resident_blocks_per_sm<1>(); run_grid<1>(ctx, ws, a, B, N, clouds, g); break;
      case 2: resident_blocks_per_sm<2>(); run_grid<2>(ctx, ws, a, B, N, clouds, g); break;
      case 4: resident_blocks_per_sm<4>(); run_grid<4>(ctx, ws, a, B, N, clouds, g); break;
      case 8: resident_blocks_per_sm<8>(); run_grid<8>(ctx, ws, a, B, N, clouds, g); break;
      default: resident_blocks_per_sm<16>(); run_grid<16>(ctx, ws, a, B, N, clouds, g); break;
    }
    return;
  }
  // Streaming: any D, any size.
  const int64_t resident = sms * std::min(resident_blocks_per_sm<0>(), FpsGridPolicy::kStreamBlocksPerSm);
  const int64_t clouds = std::min<int64_t>(B, resident);
  const int g = static_cast<int>(std::min<int64_t>(std::max<int64_t>(1, resident / clouds), FpsGridPolicy::kMaxBlocks));
  run_grid<0>(ctx, ws, a, B, N, clouds, g);
}

}  // namespace

void furthest_point_sample(const CudaContext& ctx, PointsView points, LengthsView lengths,
                           const FpsParams& params, int64_t* out) {
  core::validate_furthest_point_sample(points, lengths, params);
  const int64_t M = params.num_samples, B = points.batch, N = points.count;
  if (M == 0 || B == 0) return;
  detail::Workspace ws(ctx);
  const FpsArgs a{points, detail::upload_lengths(ctx, ws, lengths, B, N), lengths.present(), M,
                  params.start_index, params.skip_near_origin, out, nullptr, 0};
  dispatch(ctx, ws, a, B, N, points.dim);
}

void furthest_point_sample_ragged(const CudaContext& ctx, RaggedPointsView points, OffsetsView ptr,
                                  const int64_t* counts, const int64_t* starts, int64_t* out) {
  core::validate_furthest_point_sample_ragged(points, ptr, counts, starts);
  // Only the clouds with samples take part: per cloud its length, first row, start, count and
  // output offset, uploaded in one copy.
  std::vector<int64_t> len, first, start, count, offset;
  int64_t total = 0, longest = 0;
  for (int64_t b = 0; b < ptr.batch(); ++b) {
    if (counts[b] > 0) {
      len.push_back(ptr.length(b));
      first.push_back(ptr.begin(b));
      start.push_back(starts[b]);
      count.push_back(counts[b]);
      offset.push_back(total);
      longest = std::max(longest, ptr.length(b));
    }
    total += counts[b];
  }
  const int64_t B = static_cast<int64_t>(len.size());
  if (B == 0) return;
  std::vector<int64_t> host;
  host.reserve(static_cast<size_t>(5 * B));
  for (const auto* v : {&len, &first, &start, &count, &offset}) host.insert(host.end(), v->begin(), v->end());
  detail::Workspace ws(ctx);
  int64_t* dev = ws.alloc<int64_t>(5 * B);
  detail::copy_to_device_async(ctx, dev, host.data(), host.size() * sizeof(int64_t));
  const PointsView view{points.data, B, longest, points.dim, 0, points.stride_point, points.stride_dim};
  const FpsArgs a{view, dev, true, 0, 0, false, out, dev + B, B};
  dispatch(ctx, ws, a, B, longest, points.dim);
}

}  // namespace pcops::cuda
