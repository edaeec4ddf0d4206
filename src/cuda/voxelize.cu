// CUDA voxelize, equal to the CPU backend (contract: include/pcops/voxelize.hpp).
// - cells_kernel: per point its cells (the contract's operations with explicit round-to-nearest
//   intrinsics), whether it is kept, its cloud (binary search of ptr), and the smallest index of a
//   kept point whose cell overflows (atomicMin; read once on the host, the CPU's error).
// - Order: stable LSD passes of CUB's radix sort over (point index) values, one pass per
//   dimension from the last to the first and a final pass by cloud; each pass sorts the 64-bit
//   offset of the cell from the dimension's minimum over the kept points, on only the bits that
//   range needs. Dropped points carry key 0 in every cell pass and the largest key in the cloud
//   pass, so they end up last in ascending index, as on the CPU; a stable sort keeps ascending
//   index inside a voxel.
// - Voxels: a flag where the (cloud, cells) tuple changes, an inclusive scan gives every sorted
//   position its voxel; V and the kept count are read on the host (they size the outputs), then
//   one kernel writes voxel_id, voxel_ptr, coords and batch, and another the counts.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cub/cub.cuh>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/validate.hpp"
#include "cuda/common.cuh"
#include "pcops/error.hpp"
#include "pcops/voxelize.hpp"

namespace pcops::cuda {
namespace {

struct VoxelPolicy {
  static constexpr int kThreads = 256;
  static constexpr int64_t kMaxBlocks = int64_t{1} << 20;
  static constexpr int kMaxDim = 16;  // grid parameters passed by value
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

template <class T>
__global__ void __launch_bounds__(VoxelPolicy::kThreads)
    cells_kernel(const T* points, int64_t N, int64_t D, Grid<T> g, const int64_t* ptr, int64_t B,
                 int64_t* cells, uint8_t* kept, int64_t* batch, unsigned long long* first_overflow) {
  PCOPS_CUDA_GRID_STRIDE(n, N) {
    bool keep = true, overflow = false;
    for (int64_t d = 0; d < D; ++d) {
      const T p = points[n * D + d];
      const T s = g.start[d];
      if (!isfinite(p) || (g.has_end && !(p >= s && p <= g.end[d]))) {
        keep = false;
        break;
      }
      T q;
      if constexpr (std::is_same_v<T, float>)
        q = floorf(div_rn(sub_rn(p, s), g.size[d]));
      else
        q = ::floor(div_rn(sub_rn(p, s), g.size[d]));
      if (!(static_cast<double>(q) >= -kCellLimit && static_cast<double>(q) < kCellLimit)) {
        overflow = true;
        cells[n * D + d] = 0;
      } else {
        cells[n * D + d] = static_cast<int64_t>(q);
      }
    }
    if (!keep)
      for (int64_t d = 0; d < D; ++d) cells[n * D + d] = 0;
    kept[n] = keep ? 1 : 0;
    if (keep && overflow) atomicMin(first_overflow, static_cast<unsigned long long>(n));
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
  }
}

// Per dimension (and the cloud as dimension D) the smallest and largest value over kept points.
__global__ void __launch_bounds__(VoxelPolicy::kThreads)
    range_kernel(const int64_t* cells, const int64_t* batch, const uint8_t* kept, int64_t N, int64_t D,
                 long long* lo, long long* hi) {
  PCOPS_CUDA_GRID_STRIDE(n, N) {
    if (!kept[n]) continue;
    for (int64_t d = 0; d <= D; ++d) {
      const long long v = d < D ? cells[n * D + d] : batch[n];
      atomicMin(lo + d, v);
      atomicMax(hi + d, v);
    }
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
    outputs_kernel(const int64_t* cells, const int64_t* batch, const uint8_t* kept, const int64_t* order,
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

int bits_for(unsigned long long range) {  // bits of values in [0, range]
  int bits = 1;
  while (bits < 64 && (range >> bits) != 0) ++bits;
  return bits;
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
    PCOPS_CUDA_CHECK(cudaMemcpyAsync(p, ptr, static_cast<size_t>(B + 1) * sizeof(int64_t),
                                     cudaMemcpyHostToDevice, stream));
    dptr = p;
  }
  int64_t* cells = ws.alloc<int64_t>(N * D);
  uint8_t* kept = ws.alloc<uint8_t>(N);
  int64_t* batch = ws.alloc<int64_t>(N);
  // Scalars read back once: first overflow, then (lo, hi) per dimension and the cloud.
  auto* first_overflow = ws.alloc<unsigned long long>(1);
  long long* lo = ws.alloc<long long>(D + 1);
  long long* hi = ws.alloc<long long>(D + 1);
  {
    std::vector<unsigned long long> init{~0ull};
    std::vector<long long> lo0(static_cast<size_t>(D + 1), std::numeric_limits<long long>::max());
    std::vector<long long> hi0(static_cast<size_t>(D + 1), std::numeric_limits<long long>::min());
    PCOPS_CUDA_CHECK(cudaMemcpyAsync(first_overflow, init.data(), sizeof(unsigned long long),
                                     cudaMemcpyHostToDevice, stream));
    PCOPS_CUDA_CHECK(
        cudaMemcpyAsync(lo, lo0.data(), lo0.size() * sizeof(long long), cudaMemcpyHostToDevice, stream));
    PCOPS_CUDA_CHECK(
        cudaMemcpyAsync(hi, hi0.data(), hi0.size() * sizeof(long long), cudaMemcpyHostToDevice, stream));
    detail::launch(ctx, cells_kernel<T>, dim3(blocks_for(N)), dim3(VoxelPolicy::kThreads), 0, points, N, D, g,
                   dptr, B, cells, kept, batch, first_overflow);
    detail::launch(ctx, range_kernel, dim3(blocks_for(N)), dim3(VoxelPolicy::kThreads), 0,
                   static_cast<const int64_t*>(cells), static_cast<const int64_t*>(batch),
                   static_cast<const uint8_t*>(kept), N, D, lo, hi);
  }
  unsigned long long overflow_at = 0;
  std::vector<long long> hlo(static_cast<size_t>(D + 1)), hhi(static_cast<size_t>(D + 1));
  PCOPS_CUDA_CHECK(cudaMemcpyAsync(&overflow_at, first_overflow, sizeof(unsigned long long),
                                   cudaMemcpyDeviceToHost, stream));
  PCOPS_CUDA_CHECK(
      cudaMemcpyAsync(hlo.data(), lo, hlo.size() * sizeof(long long), cudaMemcpyDeviceToHost, stream));
  PCOPS_CUDA_CHECK(
      cudaMemcpyAsync(hhi.data(), hi, hhi.size() * sizeof(long long), cudaMemcpyDeviceToHost, stream));
  PCOPS_CUDA_CHECK(cudaStreamSynchronize(stream));
  PCOPS_CHECK(overflow_at == ~0ull, Value, "points[", static_cast<int64_t>(overflow_at),
              "]: its cell index (coordinate - start) / voxel_size does not fit in ",
              "[-2^62, 2^62); use a larger voxel_size or give start");
  const bool any_kept = hlo[0] <= hhi[0];
  // Stable LSD passes: dimensions D-1 .. 0, then the cloud.
  int64_t* order = ws.alloc<int64_t>(N);
  int64_t* order_alt = ws.alloc<int64_t>(N);
  auto* keys = ws.alloc<unsigned long long>(N);
  auto* keys_alt = ws.alloc<unsigned long long>(N);
  detail::launch(ctx, iota_kernel, dim3(blocks_for(N)), dim3(VoxelPolicy::kThreads), 0, order, N);
  size_t temp_bytes = 0;
  void* temp = nullptr;
  if (any_kept) {
    for (int64_t step = 0; step <= D; ++step) {
      const int64_t d = step < D ? D - 1 - step : D;  // cells from the last dimension, then the cloud
      const unsigned long long range = static_cast<unsigned long long>(hhi[d] - hlo[d]);
      const unsigned long long dropped_key = range + 1;  // the cloud pass: after every kept cloud
      const bool cloud_pass = d == D;
      if (!cloud_pass && range == 0) continue;  // one value: the pass would not move anything
      const int bits = bits_for(cloud_pass ? dropped_key : range);
      detail::launch(ctx, pass_keys_kernel, dim3(blocks_for(N)), dim3(VoxelPolicy::kThreads), 0,
                     static_cast<const int64_t*>(cells), static_cast<const int64_t*>(batch),
                     static_cast<const uint8_t*>(kept), static_cast<const int64_t*>(order), N, D, d,
                     static_cast<const long long*>(lo), dropped_key, keys);
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
  }
  // Voxels.
  int64_t* flags = ws.alloc<int64_t>(N);
  int64_t* scan = ws.alloc<int64_t>(N);
  detail::launch(ctx, flags_kernel, dim3(blocks_for(N)), dim3(VoxelPolicy::kThreads), 0,
                 static_cast<const int64_t*>(cells), static_cast<const int64_t*>(batch),
                 static_cast<const uint8_t*>(kept), static_cast<const int64_t*>(order), N, D, flags);
  size_t scan_bytes = 0;
  PCOPS_CUDA_CHECK(cub::DeviceScan::InclusiveSum(nullptr, scan_bytes, flags, scan, N, stream));
  void* scan_temp = ws.bytes(scan_bytes);
  PCOPS_CUDA_CHECK(cub::DeviceScan::InclusiveSum(scan_temp, scan_bytes, flags, scan, N, stream));
  // V = scan[N - 1]; K = the number of kept points.
  int64_t V = 0;
  PCOPS_CUDA_CHECK(cudaMemcpyAsync(&V, scan + (N - 1), sizeof(int64_t), cudaMemcpyDeviceToHost, stream));
  int64_t* kept_count = ws.alloc<int64_t>(1);
  size_t red_bytes = 0;
  PCOPS_CUDA_CHECK(cub::DeviceReduce::Sum(nullptr, red_bytes, kept, kept_count, N, stream));
  void* red_temp = ws.bytes(red_bytes);
  PCOPS_CUDA_CHECK(cub::DeviceReduce::Sum(red_temp, red_bytes, kept, kept_count, N, stream));
  int64_t K = 0;
  PCOPS_CUDA_CHECK(cudaMemcpyAsync(&K, kept_count, sizeof(int64_t), cudaMemcpyDeviceToHost, stream));
  PCOPS_CUDA_CHECK(cudaStreamSynchronize(stream));
  const VoxelBuffers out = allocate(V);
  detail::launch(ctx, outputs_kernel, dim3(blocks_for(N)), dim3(VoxelPolicy::kThreads), 0,
                 static_cast<const int64_t*>(cells), static_cast<const int64_t*>(batch),
                 static_cast<const uint8_t*>(kept), static_cast<const int64_t*>(order),
                 static_cast<const int64_t*>(flags), static_cast<const int64_t*>(scan), N, D, K, V, voxel_id,
                 perm, out.coords, out.batch, out.voxel_ptr);
  if (V == 0 && out.voxel_ptr) PCOPS_CUDA_CHECK(cudaMemsetAsync(out.voxel_ptr, 0, sizeof(int64_t), stream));
  if (V > 0)
    detail::launch(ctx, counts_kernel, dim3(blocks_for(V)), dim3(VoxelPolicy::kThreads), 0,
                   static_cast<const int64_t*>(out.voxel_ptr), V, out.counts);
  return V;
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
