#pragma once
// Segmented 32-bit keys: items placed into segments by counting, then each segment's keys sorted
// ascending (docs/cuda.md). group_segmented(ctx, ws, t, T, segments, key_bits, place) takes T items
// (place(t, p, seg, key): item p's segment, `segments` for an item to set aside, and its key below
// 2^key_bits, key_bits <= 31) and returns the keys in (segment, key) order with the offsets of the
// segments + 1 segments (segments + 2 offsets). Equal keys of one segment are interchangeable, so
// the arbitrary placement order inside a segment leaves no trace. 8 bytes an item during the sort,
// 4 after it (the second buffer goes back to the workspace once the sort is enqueued).
#include <cub/cub.cuh>

#include <algorithm>
#include <cstdint>

#include "cuda/common.cuh"

namespace pcops::cuda::primitives {

// Placement: each block takes one contiguous chunk of the triplets. With few segments
// (kShared: at most kPlaceShared) the block counts its chunk's triplets per segment in shared
// memory and touches each segment's global counter once, which keeps many blocks off the same few
// counters (a handful of kernel cells); otherwise one global atomic a triplet.
inline constexpr int kPlaceThreads = 256;
inline constexpr int64_t kPlaceShared = 8192;

__device__ __forceinline__ void place_chunk(int64_t T, int64_t& c0, int64_t& c1) {
  const int64_t per = (T + gridDim.x - 1) / gridDim.x;
  c0 = min(T, int64_t{blockIdx.x} * per), c1 = min(T, c0 + per);
}

// The warp's lanes with the same segment as this lane (invalid lanes, past the chunk, match none
// of the others): mask; the lowest of them is the one that touches the global counter.
__device__ __forceinline__ unsigned same_segment(bool ok, int64_t seg) {
  const unsigned lane = threadIdx.x & 31;
  return __match_any_sync(0xffffffffu, ok ? static_cast<unsigned long long>(seg) : ~0ull - lane);
}

template <class Place, bool kShared>
__global__ void __launch_bounds__(kPlaceThreads)
    place_count_kernel(const int64_t* __restrict__ t, int64_t T, Place place, int64_t S,
                       unsigned* __restrict__ counts) {
  extern __shared__ unsigned h[];  // [S] where kShared
  int64_t c0, c1;
  place_chunk(T, c0, c1);
  if constexpr (kShared) {
    for (int64_t e = threadIdx.x; e < S; e += kPlaceThreads) h[e] = 0;
    __syncthreads();
  }
  const int lane = threadIdx.x & 31;
  for (int64_t q = c0 + (threadIdx.x & ~31); q < c1; q += kPlaceThreads) {  // warp-uniform
    const int64_t p = q + lane;
    const bool ok = p < c1;
    int64_t seg = 0;
    uint64_t key;
    if (ok) place(t, p, seg, key);
    const unsigned same = same_segment(ok, seg);
    if (ok && lane == __ffs(same) - 1) {
      if constexpr (kShared) atomicAdd(&h[seg], static_cast<unsigned>(__popc(same)));
      else atomicAdd(&counts[seg], static_cast<unsigned>(__popc(same)));
    }
  }
  if constexpr (kShared) {
    __syncthreads();
    for (int64_t e = threadIdx.x; e < S; e += kPlaceThreads)
      if (h[e] != 0) atomicAdd(&counts[e], h[e]);
  }
}

// keys[offsets[seg] + a place of seg not taken yet] = key, for every triplet; cursor (zeros) counts
// the places taken. Each warp takes the places of its lanes of one segment at once; kShared: the
// block's chunk is counted first and each of its segments takes a range of places at once.
template <class Place, bool kShared>
__global__ void __launch_bounds__(kPlaceThreads)
    place_fill_kernel(const int64_t* __restrict__ t, int64_t T, Place place, int64_t S,
                      const int64_t* __restrict__ offsets, unsigned* __restrict__ cursor, uint32_t* __restrict__ keys) {
  extern __shared__ unsigned h[];  // [S] where kShared: counts, then each segment's next place
  int64_t c0, c1;
  place_chunk(T, c0, c1);
  const int lane = threadIdx.x & 31;
  if constexpr (kShared) {
    for (int64_t e = threadIdx.x; e < S; e += kPlaceThreads) h[e] = 0;
    __syncthreads();
    for (int64_t p = c0 + threadIdx.x; p < c1; p += kPlaceThreads) {
      int64_t seg;
      uint64_t key;
      place(t, p, seg, key);
      atomicAdd(&h[seg], 1u);
    }
    __syncthreads();
    for (int64_t e = threadIdx.x; e < S; e += kPlaceThreads)
      if (h[e] != 0) h[e] = static_cast<unsigned>(offsets[e]) + atomicAdd(&cursor[e], h[e]);
    __syncthreads();
  }
  for (int64_t q = c0 + (threadIdx.x & ~31); q < c1; q += kPlaceThreads) {  // warp-uniform
    const int64_t p = q + lane;
    const bool ok = p < c1;
    int64_t seg = 0;
    uint64_t key = 0;
    if (ok) place(t, p, seg, key);
    const unsigned same = same_segment(ok, seg);
    const int first = __ffs(same) - 1;
    unsigned base = 0;
    if (ok && lane == first) {
      if constexpr (kShared) base = atomicAdd(&h[seg], static_cast<unsigned>(__popc(same)));
      else base = static_cast<unsigned>(offsets[seg]) + atomicAdd(&cursor[seg], static_cast<unsigned>(__popc(same)));
    }
    base = __shfl_sync(0xffffffffu, base, first);
    if (ok) keys[base + __popc(same & ((1u << lane) - 1))] = static_cast<uint32_t>(key);
  }
}

// Sorts the keys of every segment ascending, in place (alt: scratch as long as keys). Window b
// holds the segments that start in positions [b W, (b + 1) W) (W = kSortWindow). If they hold at
// most kSortCap keys (a segment past the window's end at most kSortCap - W long),
// segment_sort_window_kernel sorts them all in one block radix sort of (the segment's ordinal in
// the window, key); otherwise segment_sort_long_kernel takes them one by one, a segment of at most
// kSortCap keys in one block radix sort, a longer one by four stable passes of 8 bits through alt
// (back in keys after the fourth). Both run over every window (each leaves the other's at once).
// Before them segment_sort_small_kernel sorts every segment of at most kSmallSort keys in one warp
// (a bitonic network in registers), and the other two leave a window whose segments are all that
// short. Keys are below 2^key_bits (key_bits <= 31).
inline constexpr int kSortThreads = 256, kSortItems = 16, kSortCap = kSortThreads * kSortItems, kSortWindow = 2048;
inline constexpr int kSmallSort = 1024;

// v: N keys striped over the warp (key r * 32 + lane in v[r]), sorted ascending by a bitonic
// network (compare-exchanges across lanes by shuffles, across registers in place).
template <int R>
__device__ __forceinline__ void warp_bitonic_sort(uint32_t (&v)[R], int lane) {
  constexpr int N = 32 * R;
#pragma unroll
  for (int k = 2; k <= N; k <<= 1) {
#pragma unroll
    for (int j = k >> 1; j > 0; j >>= 1) {
      if (j >= 32) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const int p = r ^ (j >> 5);
          if (r < p) {
            const bool up = ((r * 32 + lane) & k) == 0;
            const uint32_t lo = min(v[r], v[p]), hi = max(v[r], v[p]);
            v[r] = up ? lo : hi;
            v[p] = up ? hi : lo;
          }
        }
      } else {
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const uint32_t o = __shfl_xor_sync(0xffffffffu, v[r], j);
          const bool up = ((r * 32 + lane) & k) == 0, lower = (lane & j) == 0;
          v[r] = lower == up ? min(v[r], o) : max(v[r], o);
        }
      }
    }
  }
}

// The n (2 .. 32 R) keys at keys[a ..] sorted by one warp: 32 R keys (padded with the largest key,
// above every real one) in registers.
template <int R>
__device__ __forceinline__ void warp_sort_segment(uint32_t* __restrict__ keys, int64_t a, int64_t n, int lane) {
  uint32_t v[R];
#pragma unroll
  for (int r = 0; r < R; ++r) v[r] = r * 32 + lane < n ? keys[a + r * 32 + lane] : ~0u;
  warp_bitonic_sort<R>(v, lane);
#pragma unroll
  for (int r = 0; r < R; ++r)
    if (r * 32 + lane < n) keys[a + r * 32 + lane] = v[r];
}

// Segments of 2 .. kSmallSort keys, a warp each, padded to 32, 128, 512 or 1024 keys.
template <int NT = kSortThreads>
__global__ void __launch_bounds__(NT)
    segment_sort_small_kernel(uint32_t* __restrict__ keys, const int64_t* __restrict__ off, int64_t S) {
  static_assert(kSmallSort == 1024, "the paddings below");
  constexpr int W = NT / 32;
  const int lane = threadIdx.x & 31;
  for (int64_t sg = int64_t{blockIdx.x} * W + threadIdx.x / 32; sg < S; sg += int64_t{gridDim.x} * W) {
    const int64_t a = off[sg], n = off[sg + 1] - a;  // warp-uniform
    if (n <= 1 || n > kSmallSort) continue;
    if (n <= 32) warp_sort_segment<1>(keys, a, n, lane);
    else if (n <= 128) warp_sort_segment<4>(keys, a, n, lane);
    else if (n <= 512) warp_sort_segment<16>(keys, a, n, lane);
    else warp_sort_segment<32>(keys, a, n, lane);
  }
}

// The first of off[0..n) at or above v (n if none).
__device__ __forceinline__ int64_t lower_bound_offsets(const int64_t* off, int64_t n, int64_t v) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (off[mid] < v) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// This block's window: segments [sf, se) starting in it, and their keys [a, b).
__device__ __forceinline__ void sort_window(const int64_t* off, int64_t S, int64_t T, int64_t& sf, int64_t& se,
                                            int64_t& a, int64_t& b) {
  __shared__ int64_t range[2];
  const int64_t w0 = int64_t{blockIdx.x} * kSortWindow, w1 = min(w0 + kSortWindow, T);
  if (threadIdx.x < 2) range[threadIdx.x] = lower_bound_offsets(off, S, threadIdx.x == 0 ? w0 : w1);
  __syncthreads();
  sf = range[0], se = range[1];
  a = sf < se ? off[sf] : 0, b = sf < se ? off[se] : 0;
}

template <int NT = kSortThreads>
__global__ void __launch_bounds__(NT)
    segment_sort_window_kernel(uint32_t* __restrict__ keys, const int64_t* __restrict__ off, int64_t S, int64_t T,
                               int key_bits) {
  static_assert(NT == kSortThreads, "the window's shape");
  using Sort64 = cub::BlockRadixSort<uint64_t, kSortThreads, kSortItems, cub::NullType, 6>;
  using Scan = cub::BlockScan<int, kSortThreads>;
  __shared__ union {
    typename Sort64::TempStorage sort;
    typename Scan::TempStorage scan;
  } tmp;
  __shared__ uint8_t starts[kSortCap];
  int64_t sf, se, a, b;
  sort_window(off, S, T, sf, se, a, b);
  if (b - a <= 1 || b - a > kSortCap) return;  // block-uniform
  const int tid = threadIdx.x, n = static_cast<int>(b - a);
  bool big = false;
  for (int64_t q = sf + tid; q < se; q += kSortThreads) big |= off[q + 1] - off[q] > kSmallSort;
  if (!__syncthreads_or(big)) return;  // every segment of the window: the small kernel's
  for (int e = tid; e < kSortCap; e += kSortThreads) starts[e] = 0;
  __syncthreads();
  for (int64_t q = sf + 1 + tid; q < se; q += kSortThreads) starts[off[q] - a] = 1;  // an empty one: the next's start
  __syncthreads();
  // Each key's segment ordinal (below 2^13): the segment starts at or before it, a scan over the
  // blocked items.
  int flags = 0;
#pragma unroll
  for (int i = 0; i < kSortItems; ++i) {
    const int r = tid * kSortItems + i;
    flags += r < n ? starts[r] : 0;
  }
  int before = 0;
  Scan(tmp.scan).ExclusiveSum(flags, before);
  __syncthreads();  // tmp reused
  uint64_t it[kSortItems];
#pragma unroll
  for (int i = 0; i < kSortItems; ++i) {
    const int r = tid * kSortItems + i;
    it[i] = ~uint64_t{0};
    if (r < n) {
      before += starts[r];
      it[i] = (static_cast<uint64_t>(before) << key_bits) | keys[a + r];
    }
  }
  Sort64(tmp.sort).Sort(it, 0, key_bits + 13);
  const uint64_t mask = (uint64_t{1} << key_bits) - 1;
#pragma unroll
  for (int i = 0; i < kSortItems; ++i) {
    const int r = tid * kSortItems + i;
    if (r < n) keys[a + r] = static_cast<uint32_t>(it[i] & mask);
  }
}

template <int NT = kSortThreads>
__global__ void __launch_bounds__(NT)
    segment_sort_long_kernel(uint32_t* __restrict__ keys, uint32_t* __restrict__ alt, const int64_t* __restrict__ off,
                             int64_t S, int64_t T, int key_bits) {
  static_assert(NT == kSortThreads, "the window's shape");
  using Sort32 = cub::BlockRadixSort<uint32_t, kSortThreads, kSortItems>;
  using Scan = cub::BlockScan<int, kSortThreads>;
  __shared__ union {
    typename Sort32::TempStorage sort;
    typename Scan::TempStorage scan;
  } tmp;
  __shared__ int hist[256], start[256];
  __shared__ int64_t run[256];
  int64_t sf, se, a, b;
  sort_window(off, S, T, sf, se, a, b);
  if (b - a <= kSortCap) return;  // block-uniform: the window kernel's
  const int tid = threadIdx.x;
  for (int64_t sg = sf; sg < se; ++sg) {
    const int64_t sa = off[sg], n = off[sg + 1] - sa;
    if (n <= kSmallSort) continue;  // block-uniform; the small kernel's
    if (n <= kSortCap) {
      uint32_t it[kSortItems];
#pragma unroll
      for (int i = 0; i < kSortItems; ++i) {
        const int64_t p = tid * kSortItems + i;
        it[i] = p < n ? keys[sa + p] : ~0u;
      }
      __syncthreads();  // tmp reused
      Sort32(tmp.sort).Sort(it, 0, key_bits);
#pragma unroll
      for (int i = 0; i < kSortItems; ++i) {
        const int64_t p = tid * kSortItems + i;
        if (p < n) keys[sa + p] = it[i];
      }
      continue;
    }
    uint32_t* src = keys + sa;
    uint32_t* dst = alt + sa;
    for (int bit = 0; bit < 31; bit += 8) {
      const int nb = min(8, 31 - bit);
      const uint32_t dmask = (1u << nb) - 1;
      hist[tid] = 0;
      __syncthreads();
      for (int64_t p = tid; p < n; p += kSortThreads) atomicAdd(&hist[(src[p] >> bit) & dmask], 1);
      __syncthreads();
      int x = hist[tid], ex = 0;
      Scan(tmp.scan).ExclusiveSum(x, ex);
      run[tid] = ex;
      __syncthreads();
      for (int64_t base = 0; base < n; base += kSortCap) {
        const int64_t m = min(static_cast<int64_t>(kSortCap), n - base);
        uint32_t it[kSortItems];
#pragma unroll
        for (int i = 0; i < kSortItems; ++i) {
          const int64_t p = tid * kSortItems + i;
          it[i] = p < m ? src[base + p] : ~0u;  // past the tile: the largest digit, after the tile's own
        }
        hist[tid] = 0;
        __syncthreads();
        Sort32(tmp.sort).Sort(it, bit, bit + nb);  // stable: equal digits keep their order
#pragma unroll
        for (int i = 0; i < kSortItems; ++i)
          if (tid * kSortItems + i < m) atomicAdd(&hist[(it[i] >> bit) & dmask], 1);
        __syncthreads();
        x = hist[tid];
        Scan(tmp.scan).ExclusiveSum(x, ex);
        start[tid] = ex;
        __syncthreads();
#pragma unroll
        for (int i = 0; i < kSortItems; ++i) {
          const int r = tid * kSortItems + i;
          if (r < m) {
            const int d = (it[i] >> bit) & dmask;
            dst[run[d] + (r - start[d])] = it[i];
          }
        }
        __syncthreads();
        run[tid] += hist[tid];
        __syncthreads();
      }
      uint32_t* sw = src;
      src = dst, dst = sw;
      __syncthreads();
    }
  }
}

struct SegmentedKeys {
  uint32_t* keys;    // [T]
  int64_t* offsets;  // [segments + 2]
};

// "segmented": T keys placed into segments + 1 segments and sorted within each. The second key
// buffer, the counts and the scratch go back to the allocator once the sort is enqueued.
// Placement by counting into S segments: count(counts) adds each item's segment to counts (zeros,
// S + 1 of them), offsets [S + 1] become their exclusive scan, then place(offsets, cursor) puts
// each item at offsets[seg] + a place of seg not taken yet (cursor: zeros, counting the places
// taken). The counts and the scan's scratch go back to the workspace once enqueued.
template <class Count, class Place>
void count_and_place(const CudaContext& ctx, detail::Workspace& ws, int64_t S, int64_t* offsets, Count count,
                     Place place) {
  const cudaStream_t stream = detail::stream_of(ctx);
  auto* counts = ws.alloc<unsigned>(S + 1);
  PCOPS_CUDA_CHECK(cudaMemsetAsync(counts, 0, sizeof(unsigned) * (S + 1), stream));
  count(counts);
  size_t scan_bytes = 0;
  PCOPS_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, counts, offsets, S + 1, stream));
  void* temp = ws.bytes(scan_bytes);
  PCOPS_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(temp, scan_bytes, counts, offsets, S + 1, stream));
  ws.release(temp);
  PCOPS_CUDA_CHECK(cudaMemsetAsync(counts, 0, sizeof(unsigned) * S, stream));
  place(static_cast<const int64_t*>(offsets), counts);
  ws.release(counts);
}

template <class Place>
SegmentedKeys group_segmented(const CudaContext& ctx, detail::Workspace& ws, const int64_t* t, int64_t T_,
                              int64_t segments, int key_bits, const Place& place) {
  const int64_t S = segments + 1;
  auto* keys = ws.alloc<uint32_t>(std::max<int64_t>(T_, 1));
  auto* alt = ws.alloc<uint32_t>(std::max<int64_t>(T_, 1));
  int64_t* offsets = ws.alloc<int64_t>(S + 1);
  // With few segments the placement counts in shared memory (at most 32 KB: no opt-in needed).
  const bool shared = S <= kPlaceShared;
  const dim3 grid(detail::grid_blocks(T_, kPlaceThreads * 16, shared ? 2048 : int64_t{1} << 20));
  const size_t smem = shared ? sizeof(unsigned) * S : 0;
  count_and_place(
      ctx, ws, S, offsets,
      [&](unsigned* counts) {
        if (T_ > 0)
          detail::launch(ctx, shared ? place_count_kernel<Place, true> : place_count_kernel<Place, false>, grid,
                         dim3(kPlaceThreads), smem, t, T_, place, S, counts);
      },
      [&](const int64_t* off, unsigned* cursor) {
        if (T_ > 0)
          detail::launch(ctx, shared ? place_fill_kernel<Place, true> : place_fill_kernel<Place, false>, grid,
                         dim3(kPlaceThreads), smem, t, T_, place, S, off, cursor, keys);
      });
  if (T_ > 0) {
    const int64_t* off = offsets;
    detail::launch(ctx, segment_sort_small_kernel<>, dim3(detail::grid_blocks(S, kSortThreads / 32)),
                   dim3(kSortThreads), 0, keys, off, S);
    const dim3 windows(static_cast<unsigned>(detail::ceil_div(T_, kSortWindow)));
    detail::launch(ctx, segment_sort_window_kernel<>, windows, dim3(kSortThreads), 0, keys, off, S, T_, key_bits);
    detail::launch(ctx, segment_sort_long_kernel<>, windows, dim3(kSortThreads), 0, keys, alt, off, S, T_,
                   key_bits);
  }
  ws.release(alt);
  return {keys, offsets};
}

}  // namespace pcops::cuda::primitives
