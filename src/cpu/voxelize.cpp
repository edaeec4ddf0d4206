// CPU voxelize (contract: include/pcops/voxelize.hpp).
// Parallel decomposition: cells are computed over point chunks; the kept points are then sorted
// by one stable LSD radix sort of a linearised (batch, cell) key (a stable comparison sort when
// the key range does not fit in 63 bits), and voxels are read off the sorted order.
#include "pcops/voxelize.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/validate.hpp"
#include "cpu/radix_sort.hpp"

namespace pcops::cpu {
namespace {

constexpr double kCellLimit = 4611686018427387904.0;  // 2^62

struct KeyIndex {
  uint64_t key;
  int64_t index;
};

template <class T>
int64_t voxelize_impl(const CpuContext& ctx, const T* points, int64_t N, int64_t D, const T* size,
                      const T* start, const T* end, const int64_t* ptr, int64_t B, int64_t* voxel_id,
                      int64_t* perm, const VoxelAllocator& allocate) {
  core::validate_voxelize<T>(N, D, size, start, end, ptr, B);
  std::vector<int64_t> cells(static_cast<size_t>(N * D));
  std::vector<uint8_t> kept(static_cast<size_t>(N));
  std::atomic<int64_t> first_overflow{std::numeric_limits<int64_t>::max()};
  parallel_for(ctx, 0, N, 4096, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      bool keep = true, overflow = false;
      for (int64_t d = 0; d < D; ++d) {
        const T p = points[n * D + d];
        const T s = start ? start[d] : T(0);
        if (!std::isfinite(p) || (end && !(p >= s && p <= end[d]))) {
          keep = false;
          break;
        }
        const T q = std::floor(static_cast<T>(p - s) / size[d]);
        if (!(static_cast<double>(q) >= -kCellLimit && static_cast<double>(q) < kCellLimit)) {
          overflow = true;
          cells[n * D + d] = 0;
        } else {
          cells[n * D + d] = static_cast<int64_t>(q);
        }
      }
      kept[n] = keep;
      if (keep && overflow) {
        int64_t cur = first_overflow.load();
        while (n < cur && !first_overflow.compare_exchange_weak(cur, n)) {
        }
      }
    }
  });
  if (first_overflow.load() != std::numeric_limits<int64_t>::max()) {
    const int64_t n = first_overflow.load();
    PCOPS_CHECK(false, Value, "points[", n, "]: its cell index (coordinate - start) / voxel_size does not fit in ",
                "[-2^62, 2^62); use a larger voxel_size or give start");
  }
  // Batch of every point.
  std::vector<int64_t> batch_of;
  if (ptr && B > 1) {
    batch_of.resize(static_cast<size_t>(N));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t n = ptr[b]; n < ptr[b + 1]; ++n) batch_of[n] = b;
  }
  auto batch = [&](int64_t n) -> int64_t { return batch_of.empty() ? 0 : batch_of[n]; };

  // Kept points in ascending index; per-dimension cell ranges.
  std::vector<KeyIndex> order;
  order.reserve(static_cast<size_t>(N));
  std::vector<int64_t> lo(static_cast<size_t>(D), std::numeric_limits<int64_t>::max());
  std::vector<int64_t> hi(static_cast<size_t>(D), std::numeric_limits<int64_t>::min());
  int64_t blo = std::numeric_limits<int64_t>::max(), bhi = std::numeric_limits<int64_t>::min();
  for (int64_t n = 0; n < N; ++n) {
    if (!kept[n]) continue;
    order.push_back({0, n});
    for (int64_t d = 0; d < D; ++d) {
      lo[d] = std::min(lo[d], cells[n * D + d]);
      hi[d] = std::max(hi[d], cells[n * D + d]);
    }
    blo = std::min(blo, batch(n));
    bhi = std::max(bhi, batch(n));
  }
  const int64_t K = static_cast<int64_t>(order.size());
  // Linearised key when (batch range) x prod(cell ranges) < 2^63.
  bool linear = K > 0;
  uint64_t total = 1;
  std::vector<uint64_t> range(static_cast<size_t>(D));
  if (linear) {
    total = static_cast<uint64_t>(bhi - blo) + 1;
    for (int64_t d = 0; d < D && linear; ++d) {
      range[d] = static_cast<uint64_t>(hi[d] - lo[d]) + 1;  // < 2^63 since cells are in [-2^62, 2^62)
      uint64_t next;
      if (__builtin_mul_overflow(total, range[d], &next) || next > (uint64_t{1} << 63)) linear = false;
      total = next;
    }
  }
  auto same_voxel = [&](int64_t a, int64_t b) {
    if (batch(a) != batch(b)) return false;
    for (int64_t d = 0; d < D; ++d)
      if (cells[a * D + d] != cells[b * D + d]) return false;
    return true;
  };
  if (linear) {
    parallel_for(ctx, 0, K, 8192, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t n = order[i].index;
        uint64_t key = static_cast<uint64_t>(batch(n) - blo);
        for (int64_t d = 0; d < D; ++d) key = key * range[d] + static_cast<uint64_t>(cells[n * D + d] - lo[d]);
        order[i].key = key;
      }
    });
    int bits = 0;
    while (bits < 64 && (total - 1) >> bits) ++bits;
    radix_sort(ctx, order, bits, [](const KeyIndex& x) { return x.key; });
  } else if (K > 0) {
    std::stable_sort(order.begin(), order.end(), [&](const KeyIndex& x, const KeyIndex& y) {
      const int64_t a = x.index, b = y.index;
      if (batch(a) != batch(b)) return batch(a) < batch(b);
      for (int64_t d = 0; d < D; ++d)
        if (cells[a * D + d] != cells[b * D + d]) return cells[a * D + d] < cells[b * D + d];
      return false;
    });
  }
  // Voxels.
  int64_t V = 0;
  for (int64_t i = 0; i < K; ++i)
    if (i == 0 || !same_voxel(order[i - 1].index, order[i].index)) ++V;
  const VoxelBuffers out = allocate(V);
  int64_t v = -1;
  for (int64_t i = 0; i < K; ++i) {
    const int64_t n = order[i].index;
    if (i == 0 || !same_voxel(order[i - 1].index, n)) {
      ++v;
      out.voxel_ptr[v] = i;
      out.batch[v] = batch(n);
      for (int64_t d = 0; d < D; ++d) out.coords[v * D + d] = cells[n * D + d];
    }
    perm[i] = n;
    voxel_id[n] = v;
  }
  if (V > 0 || out.voxel_ptr) out.voxel_ptr[V] = K;
  for (int64_t w = 0; w < V; ++w) out.counts[w] = out.voxel_ptr[w + 1] - out.voxel_ptr[w];
  int64_t j = K;
  for (int64_t n = 0; n < N; ++n) {
    if (!kept[n]) {
      perm[j++] = n;
      voxel_id[n] = -1;
    }
  }
  return V;
}

}  // namespace

int64_t voxelize(const CpuContext& ctx, const float* points, int64_t count, int64_t dim,
                 const float* voxel_size, const float* start, const float* end, const int64_t* ptr,
                 int64_t num_clouds, int64_t* voxel_id, int64_t* perm, const VoxelAllocator& allocate) {
  return voxelize_impl(ctx, points, count, dim, voxel_size, start, end, ptr, num_clouds, voxel_id, perm,
                       allocate);
}

int64_t voxelize(const CpuContext& ctx, const double* points, int64_t count, int64_t dim,
                 const double* voxel_size, const double* start, const double* end, const int64_t* ptr,
                 int64_t num_clouds, int64_t* voxel_id, int64_t* perm, const VoxelAllocator& allocate) {
  return voxelize_impl(ctx, points, count, dim, voxel_size, start, end, ptr, num_clouds, voxel_id, perm,
                       allocate);
}

}  // namespace pcops::cpu
