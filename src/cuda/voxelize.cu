// CUDA voxelize, equal to the CPU backend (contract: include/pcops/voxelize.hpp).
// - cells_kernel: per point its cells (the contract's operations with explicit round-to-nearest
//   intrinsics), whether it is kept, its cloud (binary search of ptr), and, reduced per block
//   (registers, warp shuffles, shared memory) before one global atomic per block and value: the
//   smallest index of a kept point whose cell overflows (the CPU's error), the number of kept
//   points K, and per dimension (the cloud as dimension D) the smallest and largest value over
//   the kept points. All of them are read on the host in one copy. (One atomic per point and
//   value on the same few addresses serialised: milliseconds for a million points.)
// - Order: one key per point packs the offsets of its (cloud, c_0, ..., c_{D-1}) from the kept
//   minima, each field only as wide as its range needs (the cloud most significant; a dropped
//   point has the cloud field "range + 1" and zero cells). When the fields fit in 64 bits (32:
//   32-bit keys), one stable CUB radix sort of (key, point index) pairs on exactly those bits
//   gives the order: voxels ascending by (cloud, cells), ascending point index inside a voxel,
//   dropped points last in ascending index, as on the CPU. Kept points are then the first K
//   sorted positions and a voxel starts where the key changes; voxel coordinates and cloud are
//   decoded from the key (no gather through the order). Wider fields (huge cell ranges) take
//   the general path: stable LSD passes of 64-bit keys, one per dimension from the last to the
//   first and a final one by cloud, each on only the bits its range needs.
// - Voxels: an inclusive scan of the start flags gives every sorted position its voxel; V is
//   read on the host (it sizes the outputs), then one kernel writes voxel_id, perm, voxel_ptr,
//   coords and batch, and another the counts. Two synchronisations in all.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cub/cub.cuh>
#include <limits>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <type_traits>
#include <vector>

#include "core/validate.hpp"
#include "common/bits.hpp"
#include "cuda/common.cuh"
#include "pcops/error.hpp"
#include "pcops/voxelize.hpp"

namespace pcops::cuda {
namespace {

struct VoxelPolicy {
  static constexpr int kThreads = 256;
  static constexpr int64_t kMaxBlocks = int64_t{1} << 20;
  static constexpr int kMaxDim = 16;  // grid parameters passed by value
  static constexpr int kStatsBlocksPerSm = 8;  // cells_kernel: few blocks, few global atomics
};

unsigned blocks_for(int64_t items) {
  return detail::grid_blocks(items, VoxelPolicy::kThreads, VoxelPolicy::kMaxBlocks);
}

template <class T>
struct Grid {
  T size[VoxelPolicy::kMaxDim];
  T start[VoxelPolicy::kMaxDim];
  T end[VoxelPolicy::kMaxDim];
  bool has_end;
};

__device__ __forceinline__ float sub_rn(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ double sub_rn(double a, double b) { return __dsub_rn(a, b); }
__device__ __forceinline__ float div_rn(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ double div_rn(double a, double b) { return __ddiv_rn(a, b); }

constexpr double kCellLimit = 4611686018427387904.0;  // 2^62

// The statistics of cells_kernel, each reduced with unsigned max so that zero is the identity
// (one memset initialises them): [0] ~(first overflowing kept point), [1] kept count (a sum),
// [2 + 2 d] ~biased(min of field d), [3 + 2 d] biased(max of field d), d in [0, D].
constexpr unsigned long long kSignBit = 1ull << 63;
__host__ __device__ __forceinline__ unsigned long long enc_max(long long v) {
  return static_cast<unsigned long long>(v) ^ kSignBit;  // signed order as unsigned order
}
__host__ __device__ __forceinline__ unsigned long long enc_min(long long v) { return ~enc_max(v); }
inline long long dec_max(unsigned long long u) { return static_cast<long long>(u ^ kSignBit); }
inline long long dec_min(unsigned long long u) { return dec_max(~u); }

__device__ __forceinline__ unsigned long long warp_max(unsigned long long v) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, d));
  return v;
}
__device__ __forceinline__ unsigned long long warp_sum(unsigned long long v) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(0xffffffffu, v, d);
  return v;
}

// MD >= D: the per-dimension values live in registers (loops unrolled to MD).
template <class T, int MD>
__global__ void __launch_bounds__(VoxelPolicy::kThreads)
    cells_kernel(const T* points, int64_t N, int64_t D, Grid<T> g, const int64_t* ptr, int64_t B,
                 int64_t* cells, uint8_t* kept, int64_t* batch, unsigned long long* stats) {
  constexpr int kValues = 2 + 2 * (MD + 1);
  __shared__ unsigned long long block_stats[kValues];
  if (threadIdx.x < kValues) block_stats[threadIdx.x] = 0;
  __syncthreads();
  unsigned long long acc[kValues];
#pragma unroll
  for (int j = 0; j < kValues; ++j) acc[j] = 0;
  PCOPS_CUDA_GRID_STRIDE(n, N) {
    bool keep = true, overflow = false;
    long long c[MD];
#pragma unroll
    for (int d = 0; d < MD; ++d) {
      c[d] = 0;
      if (d < D && keep) {
        const T p = points[n * D + d];
        const T s = g.start[d];
        if (!isfinite(p) || (g.has_end && !(p >= s && p <= g.end[d]))) {
          keep = false;
        } else {
          T q;
          if constexpr (std::is_same_v<T, float>)
            q = floorf(div_rn(sub_rn(p, s), g.size[d]));
          else
            q = ::floor(div_rn(sub_rn(p, s), g.size[d]));
          if (!(static_cast<double>(q) >= -kCellLimit && static_cast<double>(q) < kCellLimit))
            overflow = true;  // its cell stays 0
          else
            c[d] = static_cast<long long>(q);
        }
      }
    }
#pragma unroll
    for (int d = 0; d < MD; ++d)
      if (d < D) cells[n * D + d] = keep ? c[d] : 0;
    kept[n] = keep ? 1 : 0;
    int64_t b = 0;
    if (ptr != nullptr && B > 1) {  // the last cloud whose offset is <= n
      int64_t lo = 0, hi = B;
      while (hi - lo > 1) {
        const int64_t mid = (lo + hi) / 2;
        if (ptr[mid] <= n)
          lo = mid;
        else
          hi = mid;
      }
      b = lo;
    }
    batch[n] = b;
    if (keep) {
      if (overflow) acc[0] = max(acc[0], ~static_cast<unsigned long long>(n));
      acc[1] += 1;
#pragma unroll
      for (int d = 0; d <= MD; ++d) {
        if (d <= D) {
          const long long v = d < D ? c[d] : b;
          acc[2 + 2 * d] = max(acc[2 + 2 * d], enc_min(v));
          acc[3 + 2 * d] = max(acc[3 + 2 * d], enc_max(v));
        }
      }
    }
  }
  const int lane = static_cast<int>(threadIdx.x & 31u);
#pragma unroll
  for (int j = 0; j < kValues; ++j) {
    const unsigned long long v = j == 1 ? warp_sum(acc[j]) : warp_max(acc[j]);
    if (lane == 0 && v != 0) {
      if (j == 1)
        atomicAdd(block_stats + j, v);
      else
        atomicMax(block_stats + j, v);
    }
  }
  __syncthreads();
  const int used = 2 + 2 * (static_cast<int>(D) + 1);
  if (static_cast<int>(threadIdx.x) < used) {
    const unsigned long long v = block_stats[threadIdx.x];
    if (v != 0) {
      if (threadIdx.x == 1)
        atomicAdd(stats + 1, v);
      else
        atomicMax(stats + threadIdx.x, v);
    }
  }
}

// The packed key: field d (d == D: the cloud) holds `bits[d]` bits at `shift[d]`; a kept point's
// field is its value minus lo[d], a dropped point's cloud field is `dropped` and its cells 0.
struct KeyLayout {
  int shift[VoxelPolicy::kMaxDim + 1];
  int bits[VoxelPolicy::kMaxDim + 1];
  long long lo[VoxelPolicy::kMaxDim + 1];
  unsigned long long dropped;
};

template <class Key>
__device__ __forceinline__ long long field_of(Key key, const KeyLayout& L, int64_t d) {
  if (L.bits[d] == 0) return L.lo[d];
  const unsigned long long f = (static_cast<unsigned long long>(key) >> L.shift[d]) & ((1ull << L.bits[d]) - 1ull);
  return static_cast<long long>(f) + L.lo[d];
}

template <class Key>
__global__ void __launch_bounds__(VoxelPolicy::kThreads)
    packed_keys_kernel(const int64_t* cells, const int64_t* batch, const uint8_t* kept, int64_t N, int64_t D,
                       KeyLayout L, Key* keys, int64_t* order) {
  PCOPS_CUDA_GRID_STRIDE(n, N) {
    unsigned long long k;
    if (!kept[n]) {
      k = L.bits[D] == 0 ? 0ull : L.dropped << L.shift[D];
    } else {
      k = L.bits[D] == 0 ? 0ull : static_cast<unsigned long long>(batch[n] - L.lo[D]) << L.shift[D];
      for (int64_t d = 0; d < D; ++d)
        if (L.bits[d] != 0) k |= static_cast<unsigned long long>(cells[n * D + d] - L.lo[d]) << L.shift[d];
    }
    keys[n] = static_cast<Key>(k);
    order[n] = n;
  }
}

// 1 where sorted position i starts a voxel: a kept position (i < K) whose key differs from the
// previous one.
template <class Key>
struct StartFlag {
  const Key* keys;
  int64_t K;
  __host__ __device__ int64_t operator()(int64_t i) const {
    return (i < K && (i == 0 || keys[i] != keys[i - 1])) ? 1 : 0;
  }
};

template <class Key>
__global__ void __launch_bounds__(VoxelPolicy::kThreads)
    packed_outputs_kernel(const Key* keys, const int64_t* order, const int64_t* scan, int64_t N, int64_t D,
                          int64_t K, int64_t V, KeyLayout L, int64_t* voxel_id, int64_t* perm, int64_t* coords,
                          int64_t* vbatch, int64_t* voxel_ptr) {
  PCOPS_CUDA_GRID_STRIDE(i, N) {
    const int64_t n = order[i];
    perm[i] = n;
    if (i >= K) {
      voxel_id[n] = -1;
      continue;
    }
    const int64_t v = scan[i] - 1;
    voxel_id[n] = v;
    const Key key = keys[i];
    if (i == 0 || keys[i - 1] != key) {
      voxel_ptr[v] = i;
      vbatch[v] = field_of(key, L, D);
      for (int64_t d = 0; d < D; ++d) coords[v * D + d] = field_of(key, L, d);
    }
    if (i == 0) voxel_ptr[V] = K;
  }
}

// Pass keys in the current order: dimension d (d == D: the cloud) of point order[i], offset by
// the kept minimum; dropped points: 0 for cells, `dropped_key` for the cloud pass.
__global__ void __launch_bounds__(VoxelPolicy::kThreads)
    pass_keys_kernel(const int64_t* cells, const int64_t* batch, const uint8_t* kept, const int64_t* order,
                     int64_t N, int64_t D, int64_t d, const long long* lo, unsigned long long dropped_key,
                     unsigned long long* keys) {
  PCOPS_CUDA_GRID_STRIDE(i, N) {
    const int64_t n = order[i];
    unsigned long long k;
    if (!kept[n])
      k = d < D ? 0ull : dropped_key;
    else
      k = static_cast<unsigned long long>((d < D ? cells[n * D + d] : batch[n]) - lo[d]);
    keys[i] = k;
  }
}

__global__ void __launch_bounds__(VoxelPolicy::kThreads) iota_kernel(int64_t* order, int64_t N) {
  PCOPS_CUDA_GRID_STRIDE(i, N) order[i] = i;
}

// flags[i] = 1 where sorted position i starts a voxel (kept points only).
__global__ void __launch_bounds__(VoxelPolicy::kThreads)
    flags_kernel(const int64_t* cells, const int64_t* batch, const uint8_t* kept, const int64_t* order,
                 int64_t N, int64_t D, int64_t* flags) {
  PCOPS_CUDA_GRID_STRIDE(i, N) {
    const int64_t n = order[i];
    int64_t f = 0;
    if (kept[n]) {
      if (i == 0) {
        f = 1;
      } else {
        const int64_t m = order[i - 1];
        f = batch[m] != batch[n] ? 1 : 0;
        for (int64_t d = 0; d < D && !f; ++d) f = cells[m * D + d] != cells[n * D + d] ? 1 : 0;
      }
    }
    flags[i] = f;
  }
}

__global__ void __launch_bounds__(VoxelPolicy::kThreads)
    outputs_general_kernel(const int64_t* cells, const int64_t* batch, const uint8_t* kept, const int64_t* order,
                   const int64_t* flags, const int64_t* scan, int64_t N, int64_t D, int64_t K, int64_t V,
                   int64_t* voxel_id, int64_t* perm, int64_t* coords, int64_t* vbatch, int64_t* voxel_ptr) {
  PCOPS_CUDA_GRID_STRIDE(i, N) {
    const int64_t n = order[i];
    perm[i] = n;
    if (!kept[n]) {
      voxel_id[n] = -1;
      continue;
    }
    const int64_t v = scan[i] - 1;
    voxel_id[n] = v;
    if (flags[i]) {
      voxel_ptr[v] = i;
      vbatch[v] = batch[n];
      for (int64_t d = 0; d < D; ++d) coords[v * D + d] = cells[n * D + d];
    }
    if (i == 0) voxel_ptr[V] = K;
  }
}

__global__ void __launch_bounds__(VoxelPolicy::kThreads)
    counts_kernel(const int64_t* voxel_ptr, int64_t V, int64_t* counts) {
  PCOPS_CUDA_GRID_STRIDE(v, V) counts[v] = voxel_ptr[v + 1] - voxel_ptr[v];
}

// counts[v] from the voxel offsets (voxel_ptr [0] = 0 when there is no voxel).
void finish_counts(const CudaContext& ctx, const VoxelBuffers& out, int64_t V) {
  if (V == 0 && out.voxel_ptr)
    PCOPS_CUDA_CHECK(cudaMemsetAsync(out.voxel_ptr, 0, sizeof(int64_t), detail::stream_of(ctx)));
  if (V > 0)
    detail::launch(ctx, counts_kernel, dim3(blocks_for(V)), dim3(VoxelPolicy::kThreads), 0,
                   static_cast<const int64_t*>(out.voxel_ptr), V, out.counts);
}

using common::bits_for;

// Sorts (packed key, point index) on the layout's bits; returns the sorted keys and order.
template <class Key>
void sort_packed(const CudaContext& ctx, detail::Workspace& ws, const int64_t* cells, const int64_t* batch,
                 const uint8_t* kept, int64_t N, int64_t D, const KeyLayout& L, int total_bits, const Key*& keys_out,
                 const int64_t*& order_out) {
  const cudaStream_t stream = detail::stream_of(ctx);
  Key* keys = ws.alloc<Key>(N);
  int64_t* order = ws.alloc<int64_t>(N);
  detail::launch(ctx, packed_keys_kernel<Key>, dim3(blocks_for(N)), dim3(VoxelPolicy::kThreads), 0, cells, batch,
                 kept, N, D, L, keys, order);
  keys_out = keys;
  order_out = order;
  if (total_bits == 0) return;  // one key: the index order is the order
  Key* keys_alt = ws.alloc<Key>(N);
  int64_t* order_alt = ws.alloc<int64_t>(N);
  cub::DoubleBuffer<Key> dk(keys, keys_alt);
  cub::DoubleBuffer<int64_t> dv(order, order_alt);
  size_t need = 0;
  PCOPS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, need, dk, dv, N, 0, total_bits, stream));
  void* temp = ws.bytes(need);
  PCOPS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, need, dk, dv, N, 0, total_bits, stream));
  keys_out = dk.Current();
  order_out = dv.Current();
}

template <class Key>
int64_t packed_voxels(const CudaContext& ctx, detail::Workspace& ws, const int64_t* cells, const int64_t* batch,
                      const uint8_t* kept, int64_t N, int64_t D, int64_t K, const KeyLayout& L, int total_bits,
                      int64_t* voxel_id, int64_t* perm, const VoxelAllocator& allocate) {
  const cudaStream_t stream = detail::stream_of(ctx);
  const Key* keys = nullptr;
  const int64_t* order = nullptr;
  sort_packed<Key>(ctx, ws, cells, batch, kept, N, D, L, total_bits, keys, order);
  int64_t* scan = ws.alloc<int64_t>(N);
  int64_t V = 0;
  if (K > 0) {
    auto flags = thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(0), StartFlag<Key>{keys, K});
    size_t scan_bytes = 0;
    PCOPS_CUDA_CHECK(cub::DeviceScan::InclusiveSum(nullptr, scan_bytes, flags, scan, K, stream));
    void* scan_temp = ws.bytes(scan_bytes);
    PCOPS_CUDA_CHECK(cub::DeviceScan::InclusiveSum(scan_temp, scan_bytes, flags, scan, K, stream));
    PCOPS_CUDA_CHECK(cudaMemcpyAsync(&V, scan + (K - 1), sizeof(int64_t), cudaMemcpyDeviceToHost, stream));
    PCOPS_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  const VoxelBuffers out = allocate(V);
  detail::launch(ctx, packed_outputs_kernel<Key>, dim3(blocks_for(N)), dim3(VoxelPolicy::kThreads), 0, keys, order,
                 static_cast<const int64_t*>(scan), N, D, K, V, L, voxel_id, perm, out.coords, out.batch,
                 out.voxel_ptr);
  finish_counts(ctx, out, V);
  return V;
}

// The general path (fields wider than 64 bits in all): one stable sort pass per dimension.
int64_t general_voxels(const CudaContext& ctx, detail::Workspace& ws, const int64_t* cells, const int64_t* batch,
                       const uint8_t* kept, int64_t N, int64_t D, int64_t K, const std::vector<long long>& hlo,
                       const std::vector<long long>& hhi, int64_t* voxel_id, int64_t* perm,
                       const VoxelAllocator& allocate) {
  const cudaStream_t stream = detail::stream_of(ctx);
  long long* lo = ws.alloc<long long>(D + 1);
  detail::copy_to_device_async(ctx, lo, hlo.data(), hlo.size() * sizeof(long long));
  // Stable LSD passes: dimensions D-1 .. 0, then the cloud.
  int64_t* order = ws.alloc<int64_t>(N);
  int64_t* order_alt = ws.alloc<int64_t>(N);
  auto* keys = ws.alloc<unsigned long long>(N);
  auto* keys_alt = ws.alloc<unsigned long long>(N);
  detail::launch(ctx, iota_kernel, dim3(blocks_for(N)), dim3(VoxelPolicy::kThreads), 0, order, N);
  size_t temp_bytes = 0;
  void* temp = nullptr;
  for (int64_t step = 0; step <= D; ++step) {
    const int64_t d = step < D ? D - 1 - step : D;  // cells from the last dimension, then the cloud
    const unsigned long long range = static_cast<unsigned long long>(hhi[d] - hlo[d]);
    const unsigned long long dropped_key = range + 1;  // the cloud pass: after every kept cloud
    const bool cloud_pass = d == D;
    if (!cloud_pass && range == 0) continue;  // one value: the pass would not move anything
    const int bits = bits_for(cloud_pass ? dropped_key : range);
    detail::launch(ctx, pass_keys_kernel, dim3(blocks_for(N)), dim3(VoxelPolicy::kThreads), 0, cells, batch, kept,
                   static_cast<const int64_t*>(order), N, D, d, static_cast<const long long*>(lo), dropped_key,
                   keys);
    cub::DoubleBuffer<unsigned long long> dk(keys, keys_alt);
    cub::DoubleBuffer<int64_t> dv(order, order_alt);
    size_t need = 0;
    PCOPS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, need, dk, dv, N, 0, bits, stream));
    if (need > temp_bytes) {
      temp = ws.bytes(need);
      temp_bytes = need;
    }
    PCOPS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, dk, dv, N, 0, bits, stream));
    if (dv.Current() != order) std::swap(order, order_alt);
    if (dk.Current() != keys) std::swap(keys, keys_alt);
  }
  int64_t* flags = ws.alloc<int64_t>(N);
  int64_t* scan = ws.alloc<int64_t>(N);
  detail::launch(ctx, flags_kernel, dim3(blocks_for(N)), dim3(VoxelPolicy::kThreads), 0, cells, batch, kept,
                 static_cast<const int64_t*>(order), N, D, flags);
  size_t scan_bytes = 0;
  PCOPS_CUDA_CHECK(cub::DeviceScan::InclusiveSum(nullptr, scan_bytes, flags, scan, N, stream));
  void* scan_temp = ws.bytes(scan_bytes);
  PCOPS_CUDA_CHECK(cub::DeviceScan::InclusiveSum(scan_temp, scan_bytes, flags, scan, N, stream));
  int64_t V = 0;
  PCOPS_CUDA_CHECK(cudaMemcpyAsync(&V, scan + (N - 1), sizeof(int64_t), cudaMemcpyDeviceToHost, stream));
  PCOPS_CUDA_CHECK(cudaStreamSynchronize(stream));
  const VoxelBuffers out = allocate(V);
  detail::launch(ctx, outputs_general_kernel, dim3(blocks_for(N)), dim3(VoxelPolicy::kThreads), 0, cells, batch,
                 kept, static_cast<const int64_t*>(order), static_cast<const int64_t*>(flags),
                 static_cast<const int64_t*>(scan), N, D, K, V, voxel_id, perm, out.coords, out.batch,
                 out.voxel_ptr);
  finish_counts(ctx, out, V);
  return V;
}

template <class T>
int64_t voxelize_impl(const CudaContext& ctx, const T* points, int64_t N, int64_t D, const T* size,
                      const T* start, const T* end, const int64_t* ptr, int64_t B, int64_t* voxel_id,
                      int64_t* perm, const VoxelAllocator& allocate) {
  core::validate_voxelize<T>(N, D, size, start, end, ptr, B);
  PCOPS_CHECK(D <= VoxelPolicy::kMaxDim, Value, "points: the CUDA voxelize takes at most ",
              VoxelPolicy::kMaxDim, " coordinates, got ", D);
  const cudaStream_t stream = detail::stream_of(ctx);
  detail::Workspace ws(ctx);
  Grid<T> g{};
  for (int64_t d = 0; d < D; ++d) {
    g.size[d] = size[d];
    g.start[d] = start ? start[d] : T(0);
    g.end[d] = end ? end[d] : T(0);
  }
  g.has_end = end != nullptr;
  if (N == 0) {
    const VoxelBuffers out = allocate(0);
    if (out.voxel_ptr) PCOPS_CUDA_CHECK(cudaMemsetAsync(out.voxel_ptr, 0, sizeof(int64_t), stream));
    return 0;
  }
  const int64_t* dptr = nullptr;
  if (ptr != nullptr && B > 1) {
    int64_t* p = ws.alloc<int64_t>(B + 1);
    detail::copy_to_device_async(ctx, p, ptr, static_cast<size_t>(B + 1) * sizeof(int64_t));
    dptr = p;
  }
  int64_t* cells = ws.alloc<int64_t>(N * D);
  uint8_t* kept = ws.alloc<uint8_t>(N);
  int64_t* batch = ws.alloc<int64_t>(N);
  const int64_t nstats = 2 + 2 * (D + 1);
  auto* stats = ws.alloc<unsigned long long>(nstats);
  PCOPS_CUDA_CHECK(cudaMemsetAsync(stats, 0, static_cast<size_t>(nstats) * sizeof(unsigned long long), stream));
  const int64_t sms = detail::device_properties().multiProcessorCount;
  const dim3 cgrid(static_cast<unsigned>(std::min<int64_t>(blocks_for(N), sms * VoxelPolicy::kStatsBlocksPerSm)));
  if (D <= 4)
    detail::launch(ctx, cells_kernel<T, 4>, cgrid, dim3(VoxelPolicy::kThreads), 0, points, N, D, g, dptr, B, cells,
                   kept, batch, stats);
  else
    detail::launch(ctx, cells_kernel<T, VoxelPolicy::kMaxDim>, cgrid, dim3(VoxelPolicy::kThreads), 0, points, N, D,
                   g, dptr, B, cells, kept, batch, stats);
  std::vector<unsigned long long> hs(static_cast<size_t>(nstats));
  PCOPS_CUDA_CHECK(cudaMemcpyAsync(hs.data(), stats, hs.size() * sizeof(unsigned long long),
                                   cudaMemcpyDeviceToHost, stream));
  PCOPS_CUDA_CHECK(cudaStreamSynchronize(stream));
  PCOPS_CHECK(hs[0] == 0, Value, "points[", static_cast<int64_t>(~hs[0]),
              "]: its cell index (coordinate - start) / voxel_size does not fit in ",
              "[-2^62, 2^62); use a larger voxel_size or give start");
  const int64_t K = static_cast<int64_t>(hs[1]);
  std::vector<long long> hlo(static_cast<size_t>(D + 1), 0), hhi(static_cast<size_t>(D + 1), 0);
  if (K > 0)
    for (int64_t d = 0; d <= D; ++d) {
      hlo[d] = dec_min(hs[2 + 2 * d]);
      hhi[d] = dec_max(hs[3 + 2 * d]);
    }
  // Packed layout: cells from the last dimension (least significant) to the first, then the
  // cloud, whose field also holds "range + 1" for dropped points.
  KeyLayout L{};
  int total = 0;
  for (int64_t step = 0; step <= D; ++step) {
    const int64_t d = step < D ? D - 1 - step : D;
    L.lo[d] = hlo[d];
    unsigned long long top = static_cast<unsigned long long>(hhi[d] - hlo[d]);
    if (d == D && K < N) top += 1;  // dropped points: "range + 1"
    L.bits[d] = top == 0 ? 0 : bits_for(top);
    L.shift[d] = total;
    total += L.bits[d];
  }
  L.dropped = static_cast<unsigned long long>(hhi[D] - hlo[D]) + 1;
  if (total <= 32)
    return packed_voxels<uint32_t>(ctx, ws, cells, batch, kept, N, D, K, L, total, voxel_id, perm, allocate);
  if (total <= 64)
    return packed_voxels<unsigned long long>(ctx, ws, cells, batch, kept, N, D, K, L, total, voxel_id, perm,
                                             allocate);
  return general_voxels(ctx, ws, cells, batch, kept, N, D, K, hlo, hhi, voxel_id, perm, allocate);
}

}  // namespace

int64_t voxelize(const CudaContext& ctx, const float* points, int64_t count, int64_t dim,
                 const float* voxel_size, const float* start, const float* end, const int64_t* ptr,
                 int64_t num_clouds, int64_t* voxel_id, int64_t* perm, const VoxelAllocator& allocate) {
  return voxelize_impl(ctx, points, count, dim, voxel_size, start, end, ptr, num_clouds, voxel_id, perm,
                       allocate);
}

int64_t voxelize(const CudaContext& ctx, const double* points, int64_t count, int64_t dim,
                 const double* voxel_size, const double* start, const double* end, const int64_t* ptr,
                 int64_t num_clouds, int64_t* voxel_id, int64_t* perm, const VoxelAllocator& allocate) {
  return voxelize_impl(ctx, points, count, dim, voxel_size, start, end, ptr, num_clouds, voxel_id, perm,
                       allocate);
}

}  // namespace pcops::cuda
