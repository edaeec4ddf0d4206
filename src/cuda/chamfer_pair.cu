// CUDA chamfer_pair_distance and its backward (contract: pcops/chamfer_pair.hpp), bitwise equal to
// the CPU backend: one thread per row computes the same common::chamfer arithmetic; grad_y goes
// through gather_rows_backward (sorted segments summed in ascending source order, no atomics).
#include "pcops/chamfer_pair.hpp"

#include <algorithm>
#include <cstdint>

#include "common/chamfer_pair.hpp"
#include "cuda/common.cuh"
#include "pcops/error.hpp"

namespace pcops::cuda {
namespace {

namespace nn = common::nn;
namespace ch = common::chamfer;

struct PairPolicy {
  static constexpr int kThreads = 256;
  static constexpr int64_t kMaxBlocks = int64_t{1} << 20;
};

template <class V>
__device__ __forceinline__ auto load(const V& v, int64_t b, int64_t n, int64_t d) {
  return v.data[b * v.stride_batch + n * v.stride_point + d * v.stride_dim];
}

// An index outside [-1, Q) is treated as -1.
__device__ __forceinline__ int64_t checked(int64_t j, int64_t count) { return j >= 0 && j < count ? j : -1; }

template <int Norm, class V, class T>
__global__ void __launch_bounds__(PairPolicy::kThreads)
    forward_kernel(V x, V y, const int64_t* idx, T* out) {
  const int64_t rows = x.batch * x.count, P = x.count, D = x.dim;
  for (int64_t r = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; r < rows; r += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = r / P, p = r % P, j = checked(idx[r], y.count);
    if (j < 0) {
      out[r] = T(0);
      continue;
    }
    out[r] = ch::pair_distance<Norm, T>(D, [&](int64_t i) { return load(x, b, p, i); },
                                        [&](int64_t i) { return load(y, b, j, i); });
  }
}

template <int Norm, class V, class T>
__global__ void __launch_bounds__(PairPolicy::kThreads)
    backward_kernel(RowsGradView<T> grad, V x, V y, const int64_t* idx, T* grad_x, T* grad_ynn) {
  const int64_t rows = x.batch * x.count, P = x.count, Q = y.count, D = x.dim;
  for (int64_t r = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; r < rows; r += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = r / P, p = r % P, j = checked(idx[r], Q);
    const T g = j < 0 ? T(0) : grad.data[b * grad.stride_batch + p * grad.stride_point];
    const int64_t jj = j < 0 ? 0 : j;
    for (int64_t i = 0; i < D; ++i) {
      const T yv = Q > 0 ? load(y, b, jj, i) : T(0);
      const T e = ch::term_grad<Norm>(g, nn::sub(load(x, b, p, i), yv));
      grad_x[r * D + i] = D > 1 ? nn::add(e, T(0)) : e;
      grad_ynn[r * D + i] = -e;
    }
  }
}

dim3 grid_for(int64_t rows) {
  return dim3(static_cast<unsigned>(
      std::max<int64_t>(1, std::min<int64_t>(detail::ceil_div(rows, PairPolicy::kThreads), PairPolicy::kMaxBlocks))));
}

template <class V, class T>
void run_forward(const CudaContext& ctx, const V& x, const V& y, const int64_t* idx, const ChamferPairParams& params,
                 T* out) {
  core::validate_chamfer_pair(x, y, idx, params);
  const int64_t rows = x.batch * x.count;
  if (rows == 0) return;
  const dim3 grid = grid_for(rows), block(PairPolicy::kThreads);
  if (params.norm == 1) detail::launch(ctx, forward_kernel<1, V, T>, grid, block, 0, x, y, idx, out);
  else detail::launch(ctx, forward_kernel<2, V, T>, grid, block, 0, x, y, idx, out);
}

template <class V, class T>
void run_backward(const CudaContext& ctx, const RowsGradView<T>& grad, const V& x, const V& y, const int64_t* idx,
                  const ChamferPairParams& params, T* grad_x, T* grad_y) {
  core::validate_chamfer_pair(x, y, idx, params);
  const int64_t B = x.batch, P = x.count, Q = y.count, D = x.dim;
  detail::Workspace ws(ctx);
  T* grad_ynn = ws.alloc<T>(B * P * D);
  if (B * P * D > 0) {
    const dim3 grid = grid_for(B * P), block(PairPolicy::kThreads);
    if (params.norm == 1) detail::launch(ctx, backward_kernel<1, V, T>, grid, block, 0, grad, x, y, idx, grad_x, grad_ynn);
    else detail::launch(ctx, backward_kernel<2, V, T>, grid, block, 0, grad, x, y, idx, grad_x, grad_ynn);
  }
  gather_rows_backward(ctx, grad_ynn, idx, B, P, D, Q, grad_y);
}

}  // namespace

void chamfer_pair_distance(const CudaContext& ctx, PointsView x, PointsView y, const int64_t* idx,
                           const ChamferPairParams& params, float* out) {
  run_forward(ctx, x, y, idx, params, out);
}
void chamfer_pair_distance(const CudaContext& ctx, PointsView64 x, PointsView64 y, const int64_t* idx,
                           const ChamferPairParams& params, double* out) {
  run_forward(ctx, x, y, idx, params, out);
}
void chamfer_pair_distance_backward(const CudaContext& ctx, RowsGradView<float> grad, PointsView x, PointsView y,
                                    const int64_t* idx, const ChamferPairParams& params, float* grad_x,
                                    float* grad_y) {
  run_backward(ctx, grad, x, y, idx, params, grad_x, grad_y);
}
void chamfer_pair_distance_backward(const CudaContext& ctx, RowsGradView<double> grad, PointsView64 x,
                                    PointsView64 y, const int64_t* idx, const ChamferPairParams& params,
                                    double* grad_x, double* grad_y) {
  run_backward(ctx, grad, x, y, idx, params, grad_x, grad_y);
}

}  // namespace pcops::cuda

namespace pcops::cuda {
namespace {

template <class T>
__global__ void combine_kernel(const T* sx, int64_t P1, const T* sy, int64_t P2, int64_t B, const int64_t* xl,
                               const int64_t* yl, bool point_mean, T* l) {
  for (int64_t b = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; b < B; b += int64_t{gridDim.x} * blockDim.x) {
    T v = point_mean ? ch::div(sx[b], ch::row_divisor<T>(xl, b, P1)) : sx[b];
    if (sy != nullptr) v = nn::add(v, point_mean ? ch::div(sy[b], ch::row_divisor<T>(yl, b, P2)) : sy[b]);
    l[b] = v;
  }
}

template <class T>
__global__ void batch_mean_kernel(T* out, int64_t B) {
  if (blockIdx.x == 0 && threadIdx.x == 0) out[0] = ch::div(out[0], static_cast<T>(B > 1 ? B : 1));
}

template <class T>
__global__ void reduce_backward_kernel(const T* grad, int64_t stride, int64_t P1, bool has_y, int64_t P2, int64_t B,
                                       const int64_t* xl, const int64_t* yl, bool point_mean, int64_t batch_mode,
                                       T* gx, T* gy) {
  for (int64_t b = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; b < B; b += int64_t{gridDim.x} * blockDim.x) {
    T h = batch_mode == 0 ? grad[b * stride] : grad[0];
    if (batch_mode == 2) h = ch::div(h, static_cast<T>(B > 1 ? B : 1));
    gx[b] = point_mean ? ch::div(h, ch::row_divisor<T>(xl, b, P1)) : h;
    if (has_y) gy[b] = point_mean ? ch::div(h, ch::row_divisor<T>(yl, b, P2)) : h;
  }
}

template <class T>
void reduce(const CudaContext& ctx, const T* cham_x, int64_t P1, const T* cham_y, int64_t P2, int64_t B,
            const int64_t* xl, const int64_t* yl, const ChamferReduceParams& p, T* out) {
  PCOPS_CHECK(B >= 0 && P1 >= 0 && P2 >= 0, Value, "chamfer_reduce: negative size");
  PCOPS_CHECK(p.batch_mode >= 0 && p.batch_mode <= 2, Value, "batch_mode: expected 0, 1 or 2, got ", p.batch_mode);
  detail::Workspace ws(ctx);
  T* sx = ws.alloc<T>(B);
  T* sy = cham_y != nullptr ? ws.alloc<T>(B) : nullptr;
  T* l = p.batch_mode == 0 ? out : ws.alloc<T>(B);
  if (B > 0) {
    ordered_sum(ctx, cham_x, B, P1, sx);
    if (cham_y != nullptr) ordered_sum(ctx, cham_y, B, P2, sy);
    detail::launch(ctx, combine_kernel<T>, grid_for(B), dim3(PairPolicy::kThreads), 0, sx, P1, sy, P2, B, xl, yl,
                   p.point_mean, l);
  }
  if (p.batch_mode == 0) return;
  ordered_sum(ctx, l, 1, B, out);
  if (p.batch_mode == 2) detail::launch(ctx, batch_mean_kernel<T>, dim3(1), dim3(1), 0, out, B);
}

}  // namespace

void chamfer_reduce(const CudaContext& ctx, const float* cham_x, int64_t count_x, const float* cham_y,
                    int64_t count_y, int64_t batch, const int64_t* x_lengths, const int64_t* y_lengths,
                    const ChamferReduceParams& params, float* out) {
  reduce(ctx, cham_x, count_x, cham_y, count_y, batch, x_lengths, y_lengths, params, out);
}
void chamfer_reduce(const CudaContext& ctx, const double* cham_x, int64_t count_x, const double* cham_y,
                    int64_t count_y, int64_t batch, const int64_t* x_lengths, const int64_t* y_lengths,
                    const ChamferReduceParams& params, double* out) {
  reduce(ctx, cham_x, count_x, cham_y, count_y, batch, x_lengths, y_lengths, params, out);
}
void chamfer_reduce_backward(const CudaContext& ctx, const float* grad, int64_t grad_stride, int64_t count_x,
                             bool has_y, int64_t count_y, int64_t batch, const int64_t* x_lengths,
                             const int64_t* y_lengths, const ChamferReduceParams& params, float* grad_x,
                             float* grad_y) {
  detail::launch(ctx, reduce_backward_kernel<float>, grid_for(batch), dim3(PairPolicy::kThreads), 0, grad,
                 grad_stride, count_x, has_y, count_y, batch, x_lengths, y_lengths, params.point_mean,
                 params.batch_mode, grad_x, grad_y);
}
void chamfer_reduce_backward(const CudaContext& ctx, const double* grad, int64_t grad_stride, int64_t count_x,
                             bool has_y, int64_t count_y, int64_t batch, const int64_t* x_lengths,
                             const int64_t* y_lengths, const ChamferReduceParams& params, double* grad_x,
                             double* grad_y) {
  detail::launch(ctx, reduce_backward_kernel<double>, grid_for(batch), dim3(PairPolicy::kThreads), 0, grad,
                 grad_stride, count_x, has_y, count_y, batch, x_lengths, y_lengths, params.point_mean,
                 params.batch_mode, grad_x, grad_y);
}

}  // namespace pcops::cuda
