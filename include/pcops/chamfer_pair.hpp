#pragma once
// chamfer_pair_distance(x [B,P,D], y [B,Q,D], idx [B,P], norm) -> out [B,P] and its backward:
// chamfer_distance's per-point distance to the selected neighbour, fused (one pass instead of a
// gather and one elementwise operation per coordinate), with the bits of the unfused formula.
//
// Contract (docs/ops/chamfer_distance.md, "Fused pair distance"):
// - Forward: out[b,p] = +0 where idx[b,p] == -1; otherwise, with d_i = fl(x[b,p,i] - y[b,j,i]),
//   j = idx[b,p], summed in coordinate order without FMA in the input precision:
//     norm 2: s_0 = fl(d_0 * d_0), s_i = fl(s_{i-1} + fl(d_i * d_i));
//     norm 1: t_i = fl(d_i * sgn_i) with sgn_i = +1 if d_i > 0 else -1 (PyTorch3D's sign rule;
//             d = +0 gives -0), s_0 = t_0, s_i = fl(s_{i-1} + t_i).
// - Backward, for the upstream gradient g [B,P] (any strides): with g' = +0 where idx == -1 and
//   d_i computed against y[b,0] (or against +0 when Q == 0) in those rows,
//     norm 2: e_i = fl(fl(g' * d_i) + fl(g' * d_i));  norm 1: e_i = fl(g' * sgn_i);
//   grad_x[b,p,i] = e_i (fl(e_i + 0) when D > 1: the unfused formula's per-coordinate gradients
//   meet zeros there), and grad_y[b,j,i] = +0 + the sum, over p ascending with idx[b,p] == j, of
//   -e_i (gather_rows_backward's order).
// - Deterministic and device independent (no atomics); x and y may be strided, idx and the
//   outputs are contiguous.
#include <cstdint>

#include "pcops/context.hpp"
#include "pcops/nearest_neighbor.hpp"
#include "pcops/view.hpp"

namespace pcops {

struct ChamferPairParams {
  int64_t norm = 2;  // 1 (L1 sum with PyTorch3D's sign rule) or 2 (squared L2)
};

// The upstream gradient of the backward: [batch, count] values with element strides.
template <class T>
struct RowsGradView {
  const T* data = nullptr;
  int64_t stride_batch = 0;
  int64_t stride_point = 0;
};

// chamfer_reduce(cham_x [B,P1], cham_y [B,P2] or absent, x_lengths, y_lengths) -> out: the point
// and batch reductions of chamfer_distance's common case (no weights, no normals), fused:
//   r_x[b] = ordered_sum(cham_x[b, :])  (pcops::ordered_sum's written order over all P1 values),
//            then, for point_mean, fl(r_x[b] / c_x[b]) with c_x[b] = max(x_lengths[b], 1) (or
//            max(P1, 1) without lengths) converted to the value type;
//   l[b]   = r_x[b], or fl(r_x[b] + r_y[b]) with cham_y;
//   out    = l [B] (batch_mode 0), ordered_sum(l) (1), or fl(ordered_sum(l) / max(B, 1)) (2).
// Backward, for the upstream gradient g ([B] with a stride for batch_mode 0, else one value):
//   h[b] = g[b] (0), g (1) or fl(g / max(B, 1)) (2); grad_x[b] = h[b], or fl(h[b] / c_x[b]) for
//   point_mean (likewise grad_y): the gradient of every element of row b of cham_x.
// The lengths are read where the values live (host for cpu::, device for cuda::); values in
// [0, P] are the caller's responsibility (chamfer_distance checked them).
struct ChamferReduceParams {
  bool point_mean = true;  // false: point sum
  int64_t batch_mode = 2;  // 0: none, 1: sum, 2: mean
};

namespace core {
// x [B,P,D], y [B,Q,D] (same B and D), idx present when B*P > 0, norm 1 or 2.
void validate_chamfer_pair(const PointsView& x, const PointsView& y, const int64_t* idx,
                           const ChamferPairParams& params);
void validate_chamfer_pair(const PointsView64& x, const PointsView64& y, const int64_t* idx,
                           const ChamferPairParams& params);
}  // namespace core

namespace cpu {
// idx: contiguous [B,P] in [-1, Q) (checked: host memory). out: caller-owned contiguous [B,P].
void chamfer_pair_distance(const CpuContext& ctx, PointsView x, PointsView y, const int64_t* idx,
                           const ChamferPairParams& params, float* out);
void chamfer_pair_distance(const CpuContext& ctx, PointsView64 x, PointsView64 y, const int64_t* idx,
                           const ChamferPairParams& params, double* out);
// grad_x: caller-owned contiguous [B,P,D]; grad_y: caller-owned contiguous [B,Q,D] (overwritten).
void chamfer_pair_distance_backward(const CpuContext& ctx, RowsGradView<float> grad, PointsView x, PointsView y,
                                    const int64_t* idx, const ChamferPairParams& params, float* grad_x,
                                    float* grad_y);
void chamfer_pair_distance_backward(const CpuContext& ctx, RowsGradView<double> grad, PointsView64 x,
                                    PointsView64 y, const int64_t* idx, const ChamferPairParams& params,
                                    double* grad_x, double* grad_y);
// cham_y may be null (single direction; count_y ignored); out: [batch] or [1].
void chamfer_reduce(const CpuContext& ctx, const float* cham_x, int64_t count_x, const float* cham_y, int64_t count_y,
                    int64_t batch, const int64_t* x_lengths, const int64_t* y_lengths,
                    const ChamferReduceParams& params, float* out);
void chamfer_reduce_backward(const CpuContext& ctx, const float* grad, int64_t grad_stride, int64_t count_x, bool has_y,
                             int64_t count_y, int64_t batch, const int64_t* x_lengths, const int64_t* y_lengths,
                             const ChamferReduceParams& params, float* grad_x, float* grad_y);
void chamfer_reduce(const CpuContext& ctx, const double* cham_x, int64_t count_x, const double* cham_y, int64_t count_y,
                    int64_t batch, const int64_t* x_lengths, const int64_t* y_lengths,
                    const ChamferReduceParams& params, double* out);
void chamfer_reduce_backward(const CpuContext& ctx, const double* grad, int64_t grad_stride, int64_t count_x, bool has_y,
                             int64_t count_y, int64_t batch, const int64_t* x_lengths, const int64_t* y_lengths,
                             const ChamferReduceParams& params, double* grad_x, double* grad_y);
}  // namespace cpu

namespace cuda {
// Same contracts; device memory. An index outside [-1, Q) is treated as -1 (not range-checked:
// reading device indices on the host would synchronise). Bitwise equal to the CPU backend.
void chamfer_pair_distance(const CudaContext& ctx, PointsView x, PointsView y, const int64_t* idx,
                           const ChamferPairParams& params, float* out);
void chamfer_pair_distance(const CudaContext& ctx, PointsView64 x, PointsView64 y, const int64_t* idx,
                           const ChamferPairParams& params, double* out);
void chamfer_pair_distance_backward(const CudaContext& ctx, RowsGradView<float> grad, PointsView x, PointsView y,
                                    const int64_t* idx, const ChamferPairParams& params, float* grad_x,
                                    float* grad_y);
void chamfer_pair_distance_backward(const CudaContext& ctx, RowsGradView<double> grad, PointsView64 x,
                                    PointsView64 y, const int64_t* idx, const ChamferPairParams& params,
                                    double* grad_x, double* grad_y);
// cham_y may be null (single direction; count_y ignored); out: [batch] or [1].
void chamfer_reduce(const CudaContext& ctx, const float* cham_x, int64_t count_x, const float* cham_y, int64_t count_y,
                    int64_t batch, const int64_t* x_lengths, const int64_t* y_lengths,
                    const ChamferReduceParams& params, float* out);
void chamfer_reduce_backward(const CudaContext& ctx, const float* grad, int64_t grad_stride, int64_t count_x, bool has_y,
                             int64_t count_y, int64_t batch, const int64_t* x_lengths, const int64_t* y_lengths,
                             const ChamferReduceParams& params, float* grad_x, float* grad_y);
void chamfer_reduce(const CudaContext& ctx, const double* cham_x, int64_t count_x, const double* cham_y, int64_t count_y,
                    int64_t batch, const int64_t* x_lengths, const int64_t* y_lengths,
                    const ChamferReduceParams& params, double* out);
void chamfer_reduce_backward(const CudaContext& ctx, const double* grad, int64_t grad_stride, int64_t count_x, bool has_y,
                             int64_t count_y, int64_t batch, const int64_t* x_lengths, const int64_t* y_lengths,
                             const ChamferReduceParams& params, double* grad_x, double* grad_y);
}  // namespace cuda

}  // namespace pcops
