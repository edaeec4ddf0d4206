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

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>

#include "common/distance.hpp"
#include "cuda/common.cuh"
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
};
static_assert(FpsClusterPolicy::kClusterThreads == 32 * 32, "one warp winner per lane of a warp");

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

// Shared-memory and cluster helpers of the st.async exchange (sm_90).
__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// The same shared::cta offset in the block of cluster rank `rank`, as a shared::cluster address.
__device__ __forceinline__ unsigned cluster_addr(unsigned addr, unsigned rank) {
  unsigned r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(arrivals) : "memory");
}
// Arrives once on the current phase and adds `bytes` expected transaction bytes to it.
__device__ __forceinline__ void mbar_arm(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
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
__device__ __forceinline__ void st_async(unsigned addr, int v, unsigned bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(addr), "r"(v), "r"(bar)
               : "memory");
}

// PointsView::at is host-only.
__device__ __forceinline__ const float* point_ptr(const PointsView& P, int64_t b, int64_t j) {
  return P.data + b * P.stride_batch + j * P.stride_point;
}
__device__ __forceinline__ float coord(const PointsView& P, int64_t b, int64_t j, int64_t d) {
  return point_ptr(P, b, j)[d * P.stride_dim];
}

struct alignas(16) WarpSlot {
  int key;
  unsigned idx;
  float x, y;
  float z, pad0, pad1, pad2;
};

struct CloudInfo {
  int64_t n;      // points of this cloud
  int64_t steps;  // centres to produce (the rest of the row is -1)
};

__device__ __forceinline__ CloudInfo cloud_info(const int64_t* lengths, bool has_lengths, int64_t M, int b) {
  const int64_t n = lengths[b];
  return {n, has_lengths ? (M < n ? M : n) : M};
}

// ---------------------------------------------------------------------------------------------
// Cluster path. Decomposition: cluster = one cloud (blockIdx.y), C blocks x (1024 / C) threads,
// thread (rank, tid) owns points rank * S + k * T + tid, k < PPT, in registers.

template <int C, int PPT>
__global__ void __cluster_dims__(C, 1, 1) __launch_bounds__(1024 / C, 1)
    fps_cluster_kernel(PointsView P, const int64_t* lengths, bool has_lengths, int64_t M,
                       int64_t start, bool skip, int64_t* out) {
  constexpr int T = FpsClusterPolicy::kClusterThreads / C;
  constexpr int W = T / 32;
  constexpr int S = T * PPT;  // points per block
  constexpr bool kAsync = C > 1 && FpsClusterPolicy::kAsyncExchange;
  // st.async exchange: slot bytes of one step that land in each block (key, idx, x, y | z).
  constexpr unsigned kStepBytes = C * W * 20;
  extern __shared__ float4 pts[];  // this block's points, for the coordinates of a warp winner
  __shared__ WarpSlot slots[2][C * W];
  __shared__ unsigned long long bars[2];  // st.async exchange: bars[t & 1] completes step t

  const int b = blockIdx.y;
  const int rank = blockIdx.x;  // == cluster rank: the cluster spans gridDim.x == C
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const CloudInfo info = cloud_info(lengths, has_lengths, M, b);
  int64_t* o = out + static_cast<int64_t>(b) * M;
  if (rank == 0) {
    for (int64_t t = (info.steps > 0 ? info.steps : 0) + tid; t < M; t += T) o[t] = -1;
  }
  if (info.steps <= 0) return;  // uniform over the cluster, before any remote access

  const int64_t base = static_cast<int64_t>(rank) * S;
  float px[PPT], py[PPT], pz[PPT], m[PPT];
#pragma unroll
  for (int k = 0; k < PPT; ++k) {
    const int64_t j = base + k * T + tid;
    float x = 0.0f, y = 0.0f, z = 0.0f, mk = -1.0f;
    if (j < info.n) {
      x = coord(P, b, j, 0);
      y = coord(P, b, j, 1);
      z = coord(P, b, j, 2);
      mk = (!skip || eligible(x, y, z)) ? INFINITY : -1.0f;
    }
    px[k] = x, py[k] = y, pz[k] = z, m[k] = mk;
    pts[k * T + tid] = make_float4(x, y, z, 0.0f);
  }
  float cx = coord(P, b, start, 0), cy = coord(P, b, start, 1), cz = coord(P, b, start, 2);
  if (rank == 0 && tid == 0) o[0] = start;
  if constexpr (kAsync) {
    // Phase k of bars[p] is step 2k + 1 (p = 1) or 2k + 2 (p = 0); each phase is armed once (one
    // arrival plus its bytes) by thread 0 after the previous phase of that barrier completed.
    if (tid == 0) {
      mbar_init(smem_addr(&bars[0]), 1);
      mbar_init(smem_addr(&bars[1]), 1);
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
      mbar_arm(smem_addr(&bars[1]), kStepBytes);  // step 1
      mbar_arm(smem_addr(&bars[0]), kStepBytes);  // step 2
    }
  }
  // Every block of the cluster has started (its shared memory may be written), its mbarriers are
  // initialised, and pts is ready.
  if constexpr (C > 1) cg::this_cluster().sync();
  else __syncthreads();

  for (int64_t t = 1; t < info.steps; ++t) {
    float bm = 0.0f;
    int bk = 0;
#pragma unroll
    for (int k = 0; k < PPT; ++k) {
      m[k] = fold(m[k], common::squared_distance3(cx, cy, cz, px[k], py[k], pz[k]));
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
    const unsigned local = widx - static_cast<unsigned>(base);
    const float4 p = local < static_cast<unsigned>(S) ? pts[local] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const int par = static_cast<int>(t & 1);
    if constexpr (kAsync) {
      // Lane l pushes this warp's winner into block l. bars[par] of a block completes step t once
      // all C * W records arrived (and thread 0 armed it). The slots of step t are rewritten at
      // step t + 2 only: a sender gets there after receiving every warp's step t + 1 record, which
      // each warp sends after its reads of step t (release by complete_tx, acquire by the wait).
      if (lane < C) {
        const unsigned dst = cluster_addr(smem_addr(&slots[par][rank * W + warp]), static_cast<unsigned>(lane));
        const unsigned bar = cluster_addr(smem_addr(&bars[par]), static_cast<unsigned>(lane));
        st_async(dst, make_int4(wkey, static_cast<int>(widx), __float_as_int(p.x), __float_as_int(p.y)), bar);
        st_async(dst + 16, __float_as_int(p.z), bar);
      }
      const unsigned mine = smem_addr(&bars[par]);
      const unsigned parity = static_cast<unsigned>((t - 1) >> 1) & 1u;
      const long long t0 = clock64();
      while (!mbar_try_wait(mine, parity)) {
        // A record that never arrives would be a bug: fail the launch instead of hanging.
        if (clock64() - t0 > FpsClusterPolicy::kWaitTrapCycles) __trap();
      }
      // The next phase of bars[par] (step t + 2) cannot complete before every warp of this block
      // has sent its step t + 1 record, so arming it now is safe even while other warps still
      // wait on this phase (their try_wait on `parity` stays true until then).
      if (tid == 0) mbar_arm(mine, kStepBytes);
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
    const int4 a = reinterpret_cast<const int4*>(&slots[par][lane])[0];
    const int az = reinterpret_cast<const int*>(&slots[par][lane])[4];  // z; the padding is never written
    warp_argmax(a.x, static_cast<unsigned>(a.y), wkey, widx);
    const int src = __ffs(__ballot_sync(kFull, a.x == wkey && static_cast<unsigned>(a.y) == widx)) - 1;
    cx = __shfl_sync(kFull, __int_as_float(a.z), src);
    cy = __shfl_sync(kFull, __int_as_float(a.w), src);
    cz = __shfl_sync(kFull, __int_as_float(az), src);
    if (rank == 0 && tid == 0) o[t] = static_cast<int64_t>(widx);
  }
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
    fps_grid_kernel(PointsView P, const int64_t* lengths, bool has_lengths, int64_t M,
                    int64_t start, bool skip, int64_t* out, int64_t span,
                    unsigned long long* xch, float* mglob) {
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
  const CloudInfo info = cloud_info(lengths, has_lengths, M, b);
  int64_t* o = out + static_cast<int64_t>(b) * M;
  if (r == 0) {
    for (int64_t t = (info.steps > 0 ? info.steps : 0) + tid; t < M; t += T) o[t] = -1;
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
        x = coord(P, b, j, 0);
        yv = coord(P, b, j, 1);
        z = coord(P, b, j, 2);
        mk = (!skip || eligible(x, yv, z)) ? INFINITY : -1.0f;
      }
      px[k] = x, py[k] = yv, pz[k] = z, m[k] = mk;
      pts[k * T + tid] = make_float4(x, yv, z, 0.0f);
    }
  }
  float* mrow = mglob + static_cast<int64_t>(y) * P.count;
  const int64_t sd = P.stride_dim;
  int64_t c = start;
  float cx = 0.0f, cy = 0.0f, cz = 0.0f;
  if constexpr (PPT > 0) cx = coord(P, b, start, 0), cy = coord(P, b, start, 1), cz = coord(P, b, start, 2);
  if (r == 0 && tid == 0) o[0] = start;
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
      const float* q = point_ptr(P, b, c);
      for (int64_t j = lo + tid; j < hi; j += T) {
        const float* x = point_ptr(P, b, j);
        const float s = common::squared_distance(q, sd, x, sd, P.dim);
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
    if (r == 0 && tid == 0) o[t] = c;
  }
}

// ---------------------------------------------------------------------------------------------
// Host side.

struct Launch {
  PointsView P;  // data already offset to the first cloud of the chunk
  const int64_t* lengths;
  bool has_lengths;
  int64_t M, start;
  bool skip;
  int64_t* out;
};

// Calls f(std::integral_constant<int, C>, std::integral_constant<int, PPT>) for runtime (C, ppt).
template <int C, class F>
void with_cluster_ppt(int ppt, F&& f) {
  using std::integral_constant;
  switch (ppt) {
    case 1: return f(integral_constant<int, C>{}, integral_constant<int, 1>{});
    case 2: return f(integral_constant<int, C>{}, integral_constant<int, 2>{});
    case 4: return f(integral_constant<int, C>{}, integral_constant<int, 4>{});
    case 8: return f(integral_constant<int, C>{}, integral_constant<int, 8>{});
    case 16:
      if constexpr (C >= 2) return f(integral_constant<int, C>{}, integral_constant<int, 16>{});
      break;
    case 32:
      if constexpr (C >= 4) return f(integral_constant<int, C>{}, integral_constant<int, 32>{});
      break;
  }
  throw std::logic_error("pcops fps: no cluster kernel for this shape");
}

template <class F>
void with_cluster_kernel(int C, int ppt, F&& f) {
  switch (C) {
    case 1: return with_cluster_ppt<1>(ppt, f);
    case 2: return with_cluster_ppt<2>(ppt, f);
    case 4: return with_cluster_ppt<4>(ppt, f);
    default: return with_cluster_ppt<8>(ppt, f);
  }
}

constexpr int min_cluster_for(int ppt) { return ppt >= 32 ? 4 : ppt >= 16 ? 2 : 1; }

// Clusters of this shape that can be resident at once (the GPCs bound clusters of 8).
int resident_clusters(int C, int ppt) {
  int clusters = 0;
  with_cluster_kernel(C, ppt, [&](auto c, auto p) {
    constexpr int T = FpsClusterPolicy::kClusterThreads / decltype(c)::value;
    const size_t smem = sizeof(float4) * T * decltype(p)::value;
    auto kernel = fps_cluster_kernel<decltype(c)::value, decltype(p)::value>;
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

void cluster_path(const CudaContext& ctx, Launch a, int64_t B, int64_t N, int sms) {
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
  while (C > min_cluster_for(ppt) && C > 1 && B > resident_clusters(C, ppt)) C /= 2;
  constexpr int64_t kMaxGridY = 65535;
  for (int64_t b0 = 0; b0 < B; b0 += kMaxGridY) {
    const int64_t clouds = std::min(kMaxGridY, B - b0);
    with_cluster_kernel(C, ppt, [&](auto c, auto p) {
      constexpr int kC = decltype(c)::value, kPpt = decltype(p)::value;
      constexpr int T = FpsClusterPolicy::kClusterThreads / kC;
      const size_t smem = sizeof(float4) * T * kPpt;
      auto kernel = fps_cluster_kernel<kC, kPpt>;
      PCOPS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(smem)));
      PointsView P = a.P;
      P.data = a.P.data + b0 * a.P.stride_batch;
      detail::launch(ctx, kernel, dim3(kC, static_cast<unsigned>(clouds)), dim3(T), smem, P,
                     a.lengths + b0, a.has_lengths, a.M, a.start, a.skip, a.out + b0 * a.M);
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
    PointsView P = a.P;
    P.data = a.P.data + b0 * a.P.stride_batch;
    const int64_t* lengths = a.lengths + b0;
    int64_t* out = a.out + b0 * a.M;
    int64_t M = a.M, start = a.start;
    bool has = a.has_lengths, skip = a.skip;
    int64_t sp = span;
    void* args[] = {&P, &lengths, &has, &M, &start, &skip, &out, &sp, &xch, &mglob};
    // Not detail::launch: blocks wait on each other at every step, so all of them must be
    // resident, which only a cooperative launch guarantees (it fails instead of deadlocking).
    PCOPS_CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(kernel),
                                                 dim3(static_cast<unsigned>(g), static_cast<unsigned>(clouds)),
                                                 dim3(T), args, smem, stream));
  }
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

}  // namespace

void furthest_point_sample(const CudaContext& ctx, PointsView points, LengthsView lengths,
                           const FpsParams& params, int64_t* out) {
  core::validate_furthest_point_sample(points, lengths, params);
  const int64_t M = params.num_samples, B = points.batch, N = points.count;
  if (M == 0 || B == 0) return;
  detail::Workspace ws(ctx);
  Launch a{points, detail::upload_lengths(ctx, ws, lengths, B, N), lengths.present(), M,
           params.start_index, params.skip_near_origin, out};
  const int sms = detail::device_properties().multiProcessorCount;
  constexpr int64_t T = FpsGridPolicy::kThreads;
  if (points.dim == 3 && N <= int64_t{FpsClusterPolicy::kClusterThreads} * FpsClusterPolicy::kMaxPpt) {
    cluster_path(ctx, a, B, N, sms);
    return;
  }
  const int64_t grid_sms = std::min<int64_t>(sms, FpsGridPolicy::kMaxBlocks);
  if (points.dim == 3 && N <= grid_sms * T * FpsGridPolicy::kMaxPpt) {
    // One block per SM, at least g_min blocks per cloud, as many clouds per launch as fit; a
    // cloud whose blocks would hold fewer than kTargetPpt points per thread gets fewer blocks.
    const int64_t g_min = detail::ceil_div(N, T * FpsGridPolicy::kMaxPpt);
    const int64_t clouds = std::min<int64_t>(B, grid_sms / g_min);
    const int64_t g_target = std::max(g_min, detail::ceil_div(N, T * FpsGridPolicy::kTargetPpt));
    const int g = static_cast<int>(std::min(grid_sms / clouds, g_target));
    const int64_t per_thread = detail::ceil_div(detail::ceil_div(N, g), T);
    int ppt = 1;
    while (ppt < per_thread) ppt *= 2;
    switch (ppt) {
      case 1: resident_blocks_per_sm<1>(); return run_grid<1>(ctx, ws, a, B, N, clouds, g);
      case 2: resident_blocks_per_sm<2>(); return run_grid<2>(ctx, ws, a, B, N, clouds, g);
      case 4: resident_blocks_per_sm<4>(); return run_grid<4>(ctx, ws, a, B, N, clouds, g);
      case 8: resident_blocks_per_sm<8>(); return run_grid<8>(ctx, ws, a, B, N, clouds, g);
      default: resident_blocks_per_sm<16>(); return run_grid<16>(ctx, ws, a, B, N, clouds, g);
    }
  }
  // Streaming: any D, any size.
  const int64_t resident = sms * std::min(resident_blocks_per_sm<0>(), FpsGridPolicy::kStreamBlocksPerSm);
  const int64_t clouds = std::min<int64_t>(B, resident);
  const int g = static_cast<int>(std::min<int64_t>(std::max<int64_t>(1, resident / clouds), FpsGridPolicy::kMaxBlocks));
  run_grid<0>(ctx, ws, a, B, N, clouds, g);
}

}  // namespace pcops::cuda
