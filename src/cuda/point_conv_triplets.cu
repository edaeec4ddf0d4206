// CUDA triplet construction for point_conv (include/pcops/point_conv.hpp), the CPU backend's rows
// bit for bit (common/point_conv_cell.hpp): a flag per slot (its entry names a point), an inclusive
// scan of the flags for each valid slot's row, the count read back to size the output, then one
// thread per slot writes (i, j, k).
#include <cub/cub.cuh>

#include <cstdint>

#include "common/point_conv_cell.hpp"
#include "cuda/common.cuh"
#include "pcops/error.hpp"
#include "pcops/point_conv.hpp"

namespace pcops::cuda {
namespace {

constexpr int kThreads = 256;

// flags[x] = 1 where slot x names a point (an entry in [0, N)), else 0.
__global__ void slot_flags_kernel(const int64_t* __restrict__ nb, int64_t total, int64_t n, int64_t* __restrict__ flags) {
  PCOPS_CUDA_GRID_STRIDE(x, total) {
    const int64_t v = nb[x];
    flags[x] = v >= 0 && v < n ? 1 : 0;
  }
}

// Slot x's row rows[x] - 1 (the inclusive scan of the flags), where it names a point.
__global__ void write_triplets_kernel(const float* __restrict__ c, const float* __restrict__ p,
                                      const int64_t* __restrict__ nb, int64_t slots, int64_t total, int64_t n,
                                      const int64_t* __restrict__ rows, float extent, float h, int64_t t,
                                      int64_t* __restrict__ out) {
  PCOPS_CUDA_GRID_STRIDE(x, total) {
    const int64_t j = nb[x];
    if (j < 0 || j >= n) continue;
    const int64_t r = rows[x] - 1, i = x / slots;
    out[r * 3] = i, out[r * 3 + 1] = j;
    out[r * 3 + 2] = common::point_conv::kernel_cell(p + j * 3, c + i * 3, extent, h, t);
  }
}

}  // namespace

int64_t point_conv_triplets(const CudaContext& ctx, const TripletShape& s, const float* centres, const float* points,
                            const int64_t* neighbours, const EdgeAllocator& allocate) {
  core::validate_triplet_shape(s);
  const int64_t total = s.centres * s.slots;
  if (total == 0) {
    allocate(0);
    return 0;
  }
  cudaStream_t stream = detail::stream_of(ctx);
  detail::Workspace ws(ctx);
  int64_t* flags = ws.alloc<int64_t>(total);
  int64_t* rows = ws.alloc<int64_t>(total);
  detail::launch(ctx, slot_flags_kernel, dim3(detail::grid_blocks(total, kThreads)), dim3(kThreads), 0, neighbours, total, s.points,
                 flags);
  size_t temp_bytes = 0;
  PCOPS_CUDA_CHECK(cub::DeviceScan::InclusiveSum(nullptr, temp_bytes, flags, rows, total, stream));
  void* temp = ws.bytes(temp_bytes);
  PCOPS_CUDA_CHECK(cub::DeviceScan::InclusiveSum(temp, temp_bytes, flags, rows, total, stream));
  int64_t triplets = 0;
  PCOPS_CUDA_CHECK(cudaMemcpyAsync(&triplets, rows + total - 1, sizeof(int64_t), cudaMemcpyDeviceToHost, stream));
  // SYNC: the count sizes the caller's output.
  PCOPS_CUDA_CHECK(cudaStreamSynchronize(stream));
  int64_t* out = allocate(triplets);
  if (triplets == 0) return 0;
  detail::launch(ctx, write_triplets_kernel, dim3(detail::grid_blocks(total, kThreads)), dim3(kThreads), 0, centres, points, neighbours,
                 s.slots, total, s.points, static_cast<const int64_t*>(rows), s.extent,
                 common::point_conv::cell_side(s.extent, s.cells), s.cells, out);
  return triplets;
}

}  // namespace pcops::cuda
