// CPU chamfer_pair_distance and its backward (contract: pcops/chamfer_pair.hpp). One task per
// range of rows; grad_y goes through gather_rows_backward (ascending source order, no atomics).
#include "pcops/chamfer_pair.hpp"

#include <algorithm>
#include <vector>

#include "common/chamfer_pair.hpp"
#include "core/validate.hpp"
#include "pcops/error.hpp"

namespace pcops::cpu {
namespace {

namespace nn = common::nn;
namespace ch = common::chamfer;

constexpr int64_t kGrain = 2048;  // rows per task

template <int Norm, class V, class T>
void forward(const CpuContext& ctx, const V& x, const V& y, const int64_t* idx, T* out) {
  const int64_t P = x.count, D = x.dim;
  parallel_for(ctx, 0, x.batch * P, kGrain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / P, p = r % P, j = idx[r];
      if (j < 0) {
        out[r] = T(0);
        continue;
      }
      out[r] = ch::pair_distance<Norm, T>(D, [&](int64_t i) { return x.at(b, p, i); },
                                          [&](int64_t i) { return y.at(b, j, i); });
    }
  });
}

template <int Norm, class V, class T>
void backward(const CpuContext& ctx, const RowsGradView<T>& grad, const V& x, const V& y, const int64_t* idx,
              T* grad_x, T* grad_ynn) {
  const int64_t P = x.count, Q = y.count, D = x.dim;
  parallel_for(ctx, 0, x.batch * P, kGrain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / P, p = r % P, j = idx[r];
      const T g = j < 0 ? T(0) : grad.data[b * grad.stride_batch + p * grad.stride_point];
      const int64_t jj = j < 0 ? 0 : j;
      for (int64_t i = 0; i < D; ++i) {
        const T yv = Q > 0 ? y.at(b, jj, i) : T(0);
        const T e = ch::term_grad<Norm>(g, nn::sub(x.at(b, p, i), yv));
        grad_x[r * D + i] = D > 1 ? nn::add(e, T(0)) : e;
        grad_ynn[r * D + i] = -e;
      }
    }
  });
}

template <class V, class T>
void run_forward(const CpuContext& ctx, const V& x, const V& y, const int64_t* idx, const ChamferPairParams& params,
                 T* out) {
  core::validate_chamfer_pair(x, y, idx, params);
  core::check_indices(idx, x.batch * x.count, y.count, "idx");
  if (x.batch * x.count == 0) return;
  if (x.dim == 0) {
    std::fill(out, out + x.batch * x.count, T(0));
    return;
  }
  if (params.norm == 1) forward<1>(ctx, x, y, idx, out);
  else forward<2>(ctx, x, y, idx, out);
}

template <class V, class T>
void run_backward(const CpuContext& ctx, const RowsGradView<T>& grad, const V& x, const V& y, const int64_t* idx,
                  const ChamferPairParams& params, T* grad_x, T* grad_y) {
  core::validate_chamfer_pair(x, y, idx, params);
  core::check_indices(idx, x.batch * x.count, y.count, "idx");
  const int64_t B = x.batch, P = x.count, Q = y.count, D = x.dim;
  std::vector<T> grad_ynn(static_cast<size_t>(B * P * D));
  if (B * P * D > 0) {
    if (params.norm == 1) backward<1>(ctx, grad, x, y, idx, grad_x, grad_ynn.data());
    else backward<2>(ctx, grad, x, y, idx, grad_x, grad_ynn.data());
  }
  gather_rows_backward(ctx, grad_ynn.data(), idx, B, P, D, Q, grad_y);
}

}  // namespace

void chamfer_pair_distance(const CpuContext& ctx, PointsView x, PointsView y, const int64_t* idx,
                           const ChamferPairParams& params, float* out) {
  run_forward(ctx, x, y, idx, params, out);
}
void chamfer_pair_distance(const CpuContext& ctx, PointsView64 x, PointsView64 y, const int64_t* idx,
                           const ChamferPairParams& params, double* out) {
  run_forward(ctx, x, y, idx, params, out);
}
void chamfer_pair_distance_backward(const CpuContext& ctx, RowsGradView<float> grad, PointsView x, PointsView y,
                                    const int64_t* idx, const ChamferPairParams& params, float* grad_x,
                                    float* grad_y) {
  run_backward(ctx, grad, x, y, idx, params, grad_x, grad_y);
}
void chamfer_pair_distance_backward(const CpuContext& ctx, RowsGradView<double> grad, PointsView64 x,
                                    PointsView64 y, const int64_t* idx, const ChamferPairParams& params,
                                    double* grad_x, double* grad_y) {
  run_backward(ctx, grad, x, y, idx, params, grad_x, grad_y);
}

}  // namespace pcops::cpu

namespace pcops::cpu {
namespace {

template <class T>
void reduce(const CpuContext& ctx, const T* cham_x, int64_t P1, const T* cham_y, int64_t P2, int64_t B,
            const int64_t* xl, const int64_t* yl, const ChamferReduceParams& p, T* out) {
  PCOPS_CHECK(B >= 0 && P1 >= 0 && P2 >= 0, Value, "chamfer_reduce: negative size");
  PCOPS_CHECK(p.batch_mode >= 0 && p.batch_mode <= 2, Value, "batch_mode: expected 0, 1 or 2, got ", p.batch_mode);
  std::vector<T> sx(static_cast<size_t>(B)), sy(static_cast<size_t>(cham_y != nullptr ? B : 0));
  std::vector<T> loss(static_cast<size_t>(B));
  ordered_sum(ctx, cham_x, B, P1, sx.data());
  if (cham_y != nullptr) ordered_sum(ctx, cham_y, B, P2, sy.data());
  T* l = p.batch_mode == 0 ? out : loss.data();
  for (int64_t b = 0; b < B; ++b) {
    T v = p.point_mean ? ch::div(sx[b], ch::row_divisor<T>(xl, b, P1)) : sx[b];
    if (cham_y != nullptr) v = nn::add(v, p.point_mean ? ch::div(sy[b], ch::row_divisor<T>(yl, b, P2)) : sy[b]);
    l[b] = v;
  }
  if (p.batch_mode == 0) return;
  ordered_sum(ctx, loss.data(), 1, B, out);
  if (p.batch_mode == 2) out[0] = ch::div(out[0], static_cast<T>(B > 1 ? B : 1));
}

template <class T>
void reduce_backward(const T* grad, int64_t stride, int64_t P1, bool has_y, int64_t P2, int64_t B, const int64_t* xl,
                     const int64_t* yl, const ChamferReduceParams& p, T* gx, T* gy) {
  for (int64_t b = 0; b < B; ++b) {
    T h = p.batch_mode == 0 ? grad[b * stride] : grad[0];
    if (p.batch_mode == 2) h = ch::div(h, static_cast<T>(B > 1 ? B : 1));
    gx[b] = p.point_mean ? ch::div(h, ch::row_divisor<T>(xl, b, P1)) : h;
    if (has_y) gy[b] = p.point_mean ? ch::div(h, ch::row_divisor<T>(yl, b, P2)) : h;
  }
}

}  // namespace

void chamfer_reduce(const CpuContext& ctx, const float* cham_x, int64_t count_x, const float* cham_y, int64_t count_y,
                    int64_t batch, const int64_t* x_lengths, const int64_t* y_lengths,
                    const ChamferReduceParams& params, float* out) {
  reduce(ctx, cham_x, count_x, cham_y, count_y, batch, x_lengths, y_lengths, params, out);
}
void chamfer_reduce(const CpuContext& ctx, const double* cham_x, int64_t count_x, const double* cham_y,
                    int64_t count_y, int64_t batch, const int64_t* x_lengths, const int64_t* y_lengths,
                    const ChamferReduceParams& params, double* out) {
  reduce(ctx, cham_x, count_x, cham_y, count_y, batch, x_lengths, y_lengths, params, out);
}
void chamfer_reduce_backward(const CpuContext&, const float* grad, int64_t grad_stride, int64_t count_x, bool has_y,
                             int64_t count_y, int64_t batch, const int64_t* x_lengths, const int64_t* y_lengths,
                             const ChamferReduceParams& params, float* grad_x, float* grad_y) {
  reduce_backward(grad, grad_stride, count_x, has_y, count_y, batch, x_lengths, y_lengths, params, grad_x, grad_y);
}
void chamfer_reduce_backward(const CpuContext&, const double* grad, int64_t grad_stride, int64_t count_x, bool has_y,
                             int64_t count_y, int64_t batch, const int64_t* x_lengths, const int64_t* y_lengths,
                             const ChamferReduceParams& params, double* grad_x, double* grad_y) {
  reduce_backward(grad, grad_stride, count_x, has_y, count_y, batch, x_lengths, y_lengths, params, grad_x, grad_y);
}

}  // namespace pcops::cpu
