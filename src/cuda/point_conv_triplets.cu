// CUDA triplet construction for point_conv (include/pcops/point_conv.hpp), the CPU backend's rows
// bit for bit: a flag per slot (its entry names a point), an inclusive scan of the flags for each
// valid slot's row, then one thread per slot writes (i, j, k) with the same float32 steps
// (__fsub_rn, __fadd_rn, __fdiv_rn: one IEEE rounding each, nothing contracted).
#include <cub/cub.cuh>

#include <algorithm>
#include <cstdint>

#include "cuda/common.cuh"
#include "pcops/error.hpp"
#include "pcops/point_conv.hpp"

namespace pcops::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>(detail::ceil_div(n, int64_t{kThreads}), 1),
                                                 int64_t{1} << 20));
}

// flags[x] = 1 where slot x names a point (an entry in [0, N)), else 0.
__global__ void slot_flags_kernel(const int64_t* __restrict__ nb, int64_t total, int64_t n, int64_t* __restrict__ flags) {
  PCOPS_CUDA_GRID_STRIDE(x, total) {
    const int64_t v = nb[x];
    flags[x] = v >= 0 && v < n ? 1 : 0;
  }
}

// Slot x's row (rows[x] - 1: the inclusive scan of the flags), where it names a point and the row
// is below T.
__global__ void write_triplets_kernel(const float* __restrict__ c, const float* __restrict__ p,
                                      const int64_t* __restrict__ nb, int64_t slots, int64_t total, int64_t n,
                                      const int64_t* __restrict__ rows, int64_t T, float ext, float h, float top,
                                      int64_t t, int64_t* __restrict__ out) {
  PCOPS_CUDA_GRID_STRIDE(x, total) {
    const int64_t j = nb[x];
    if (j < 0 || j >= n) continue;
    const int64_t r = rows[x] - 1;
    if (r >= T) continue;
    const int64_t i = x / slots;
    int64_t q[3];
#pragma unroll
    for (int a = 0; a < 3; ++a) {
      const float d = __fsub_rn(p[j * 3 + a], c[i * 3 + a]);
      const float v = floorf(__fdiv_rn(__fadd_rn(d, ext), h));
      q[a] = static_cast<int64_t>(v < 0.0f ? 0.0f : v > top ? top : v);
    }
    out[r * 3] = i, out[r * 3 + 1] = j, out[r * 3 + 2] = (q[0] * t + q[1]) * t + q[2];
  }
}

// rows = the inclusive scan of the slots' flags ([M * S], from ws; M * S > 0).
int64_t* slot_rows(const CudaContext& ctx, detail::Workspace& ws, const TripletShape& s, const int64_t* nb) {
  const int64_t total = s.centres * s.slots;
  cudaStream_t stream = detail::stream_of(ctx);
  int64_t* flags = ws.alloc<int64_t>(total);
  int64_t* rows = ws.alloc<int64_t>(total);
  detail::launch(ctx, slot_flags_kernel, dim3(blocks_for(total)), dim3(kThreads), 0, nb, total, s.points, flags);
  size_t temp_bytes = 0;
  PCOPS_CUDA_CHECK(cub::DeviceScan::InclusiveSum(nullptr, temp_bytes, flags, rows, total, stream));
  void* temp = ws.bytes(temp_bytes);
  PCOPS_CUDA_CHECK(cub::DeviceScan::InclusiveSum(temp, temp_bytes, flags, rows, total, stream));
  return rows;
}

}  // namespace

int64_t point_conv_triplet_count(const CudaContext& ctx, const TripletShape& s, const int64_t* neighbours) {
  core::validate_triplet_shape(s);
  const int64_t total = s.centres * s.slots;
  if (total == 0) return 0;
  detail::Workspace ws(ctx);
  const int64_t* rows = slot_rows(ctx, ws, s, neighbours);
  int64_t count = 0;
  cudaStream_t stream = detail::stream_of(ctx);
  PCOPS_CUDA_CHECK(cudaMemcpyAsync(&count, rows + total - 1, sizeof(int64_t), cudaMemcpyDeviceToHost, stream));
  // SYNC: the count sizes the caller's output.
  PCOPS_CUDA_CHECK(cudaStreamSynchronize(stream));
  return count;
}

void point_conv_triplets(const CudaContext& ctx, const TripletShape& s, const float* centres, const float* points,
                         const int64_t* neighbours, int64_t triplets, int64_t* out) {
  core::validate_triplet_shape(s);
  PCOPS_CHECK(triplets >= 0, Value, "point_conv_triplets: expected a non-negative triplet count, got ", triplets);
  const int64_t total = s.centres * s.slots;
  if (total == 0 || triplets == 0) return;
  detail::Workspace ws(ctx);
  const int64_t* rows = slot_rows(ctx, ws, s, neighbours);
  const float ext = s.extent, h = (ext * 2.0f) / static_cast<float>(s.cells);
  detail::launch(ctx, write_triplets_kernel, dim3(blocks_for(total)), dim3(kThreads), 0, centres, points, neighbours,
                 s.slots, total, s.points, rows, triplets, ext, h, static_cast<float>(s.cells - 1), s.cells, out);
}

}  // namespace pcops::cuda
