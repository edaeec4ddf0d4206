#include "pcops/chamfer_pair.hpp"

#include "common.hpp"

// torch.ops.pcops._chamfer_pair_distance, _chamfer_reduce and their backwards: chamfer_distance's
// fused per-point distance and reductions (contract: pcops/chamfer_pair.hpp). float32 and float64 only (chamfer_distance computes
// half precision in float32); x and y may be strided, idx is int64.
namespace pcops::torch_binding {
namespace {

at::Tensor coords(const at::Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(t.dim() == 3, name, ": expected a 3-D tensor, got shape ", t.sizes());
  TORCH_CHECK_TYPE(t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble, name,
                   ": expected float32 or float64 values, got ", t.scalar_type());
  return t;
}

template <class View, class T>
View typed_view(const at::Tensor& t) {
  return View{t.data_ptr<T>(), t.size(0), t.size(1), t.size(2), t.stride(0), t.stride(1), t.stride(2)};
}

at::Tensor checked_idx(const at::Tensor& x, const at::Tensor& idx) {
  check_same_device(x, "x", idx, "idx");
  TORCH_CHECK_TYPE(idx.scalar_type() == at::kLong, "idx: expected an int64 tensor, got ", idx.scalar_type());
  TORCH_CHECK_VALUE(idx.dim() == 2 && idx.size(0) == x.size(0) && idx.size(1) == x.size(1), "idx: expected shape [",
                    x.size(0), ", ", x.size(1), "], got ", idx.sizes());
  return idx.contiguous();
}

void check_pair(const at::Tensor& x, const at::Tensor& y, int64_t norm) {
  coords(x, "x");
  coords(y, "y");
  check_same_device(x, "x", y, "y");
  TORCH_CHECK_TYPE(x.scalar_type() == y.scalar_type(), "y: expected dtype ", x.scalar_type(), " (as x), got ",
                   y.scalar_type());
  TORCH_CHECK_VALUE(norm == 1 || norm == 2, "norm: expected 1 or 2, got ", norm);
}

template <class Run>
at::Tensor forward_impl(const at::Tensor& x, const at::Tensor& y, const at::Tensor& idx_in, int64_t norm, Run run) {
  check_pair(x, y, norm);
  const at::Tensor idx = checked_idx(x, idx_in);
  at::Tensor out = at::empty({x.size(0), x.size(1)}, x.options());
  const ChamferPairParams params{norm};
  translate_errors([&] {
    if (x.scalar_type() == at::kDouble)
      run(x, typed_view<PointsView64, double>(x), typed_view<PointsView64, double>(y), idx.data_ptr<int64_t>(),
          params, out.data_ptr<double>());
    else
      run(x, typed_view<PointsView, float>(x), typed_view<PointsView, float>(y), idx.data_ptr<int64_t>(), params,
          out.data_ptr<float>());
  });
  return out;
}

template <class Run>
std::tuple<at::Tensor, at::Tensor> backward_impl(const at::Tensor& grad_in, const at::Tensor& x, const at::Tensor& y,
                                                 const at::Tensor& idx_in, int64_t norm, Run run) {
  check_pair(x, y, norm);
  const at::Tensor idx = checked_idx(x, idx_in);
  check_same_device(x, "x", grad_in, "grad");
  TORCH_CHECK_VALUE(grad_in.dim() == 2 && grad_in.size(0) == x.size(0) && grad_in.size(1) == x.size(1),
                    "grad: expected shape [", x.size(0), ", ", x.size(1), "], got ", grad_in.sizes());
  // The upstream gradient keeps its strides (a broadcast reduction gradient is not copied).
  const at::Tensor grad = grad_in.to(x.scalar_type());
  at::Tensor grad_x = at::empty(x.sizes(), x.options());
  at::Tensor grad_y = at::empty(y.sizes(), y.options());
  const ChamferPairParams params{norm};
  translate_errors([&] {
    if (x.scalar_type() == at::kDouble)
      run(x, RowsGradView<double>{grad.data_ptr<double>(), grad.stride(0), grad.stride(1)},
          typed_view<PointsView64, double>(x), typed_view<PointsView64, double>(y), idx.data_ptr<int64_t>(), params,
          grad_x.data_ptr<double>(), grad_y.data_ptr<double>());
    else
      run(x, RowsGradView<float>{grad.data_ptr<float>(), grad.stride(0), grad.stride(1)},
          typed_view<PointsView, float>(x), typed_view<PointsView, float>(y), idx.data_ptr<int64_t>(), params,
          grad_x.data_ptr<float>(), grad_y.data_ptr<float>());
  });
  return {grad_x, grad_y};
}

// chamfer_reduce: cham_x [B,P1], optional cham_y [B,P2] (same dtype and device), optional int64
// lengths [B] on the same device (never synchronised: the kernels read them where they live).
struct ReduceArgs {
  at::Tensor x, y, xl, yl;
  bool has_y = false;
};

ReduceArgs reduce_args(const at::Tensor& cham_x, const std::optional<at::Tensor>& cham_y,
                       const std::optional<at::Tensor>& x_lengths, const std::optional<at::Tensor>& y_lengths,
                       int64_t batch_mode) {
  TORCH_CHECK_VALUE(cham_x.dim() == 2, "cham_x: expected a 2-D tensor, got shape ", cham_x.sizes());
  TORCH_CHECK_TYPE(cham_x.scalar_type() == at::kFloat || cham_x.scalar_type() == at::kDouble,
                   "cham_x: expected float32 or float64 values, got ", cham_x.scalar_type());
  TORCH_CHECK_VALUE(batch_mode >= 0 && batch_mode <= 2, "batch_mode: expected 0, 1 or 2, got ", batch_mode);
  ReduceArgs a;
  a.x = cham_x.contiguous();
  const int64_t B = cham_x.size(0);
  if (cham_y.has_value()) {
    check_same_device(cham_x, "cham_x", *cham_y, "cham_y");
    TORCH_CHECK_VALUE(cham_y->dim() == 2 && cham_y->size(0) == B, "cham_y: expected shape [", B, ", P2], got ",
                      cham_y->sizes());
    TORCH_CHECK_TYPE(cham_y->scalar_type() == cham_x.scalar_type(), "cham_y: expected dtype ", cham_x.scalar_type(),
                     " (as cham_x), got ", cham_y->scalar_type());
    a.y = cham_y->contiguous();
    a.has_y = true;
  }
  auto lengths = [&](const std::optional<at::Tensor>& t, const char* name) {
    if (!t.has_value()) return at::Tensor();
    check_same_device(cham_x, "cham_x", *t, name);
    TORCH_CHECK_TYPE(t->scalar_type() == at::kLong || t->scalar_type() == at::kInt, name,
                     ": expected an int64 tensor, got ", t->scalar_type());
    TORCH_CHECK_VALUE(t->dim() == 1 && t->size(0) == B, name, ": expected shape [", B, "], got ", t->sizes());
    return t->to(at::kLong).contiguous();
  };
  a.xl = lengths(x_lengths, "x_lengths");
  a.yl = lengths(y_lengths, "y_lengths");
  return a;
}

const int64_t* ptr_or_null(const at::Tensor& t) { return t.defined() ? t.data_ptr<int64_t>() : nullptr; }

template <class Run>
at::Tensor reduce_impl(const at::Tensor& cham_x, const std::optional<at::Tensor>& cham_y,
                       const std::optional<at::Tensor>& x_lengths, const std::optional<at::Tensor>& y_lengths,
                       bool point_mean, int64_t batch_mode, Run run) {
  const ReduceArgs a = reduce_args(cham_x, cham_y, x_lengths, y_lengths, batch_mode);
  const int64_t B = a.x.size(0), P1 = a.x.size(1), P2 = a.has_y ? a.y.size(1) : 0;
  at::Tensor out = batch_mode == 0 ? at::empty({B}, a.x.options()) : at::empty({}, a.x.options());
  const ChamferReduceParams params{point_mean, batch_mode};
  translate_errors([&] {
    if (a.x.scalar_type() == at::kDouble)
      run(a.x, a.x.data_ptr<double>(), P1, a.has_y ? a.y.data_ptr<double>() : nullptr, P2, B, ptr_or_null(a.xl),
          ptr_or_null(a.yl), params, out.data_ptr<double>());
    else
      run(a.x, a.x.data_ptr<float>(), P1, a.has_y ? a.y.data_ptr<float>() : nullptr, P2, B, ptr_or_null(a.xl),
          ptr_or_null(a.yl), params, out.data_ptr<float>());
  });
  return out;
}

// Returns (grad_x [B], grad_y [B] or empty): the gradient of every element of a row.
template <class Run>
std::tuple<at::Tensor, at::Tensor> reduce_backward_impl(const at::Tensor& grad_in, const at::Tensor& cham_x,
                                                        const std::optional<at::Tensor>& cham_y,
                                                        const std::optional<at::Tensor>& x_lengths,
                                                        const std::optional<at::Tensor>& y_lengths, bool point_mean,
                                                        int64_t batch_mode, Run run) {
  const ReduceArgs a = reduce_args(cham_x, cham_y, x_lengths, y_lengths, batch_mode);
  const int64_t B = a.x.size(0), P1 = a.x.size(1), P2 = a.has_y ? a.y.size(1) : 0;
  check_same_device(cham_x, "cham_x", grad_in, "grad");
  if (batch_mode == 0) {
    TORCH_CHECK_VALUE(grad_in.dim() == 1 && grad_in.size(0) == B, "grad: expected shape [", B, "], got ",
                      grad_in.sizes());
  } else {
    TORCH_CHECK_VALUE(grad_in.numel() == 1, "grad: expected one value, got shape ", grad_in.sizes());
  }
  const at::Tensor grad = grad_in.to(a.x.scalar_type());
  const int64_t stride = batch_mode == 0 ? grad.stride(0) : 0;
  at::Tensor gx = at::empty({B}, a.x.options());
  at::Tensor gy = at::empty({a.has_y ? B : 0}, a.x.options());
  const ChamferReduceParams params{point_mean, batch_mode};
  if (B == 0) return {gx, gy};
  translate_errors([&] {
    if (a.x.scalar_type() == at::kDouble)
      run(a.x, grad.data_ptr<double>(), stride, P1, a.has_y, P2, B, ptr_or_null(a.xl), ptr_or_null(a.yl), params,
          gx.data_ptr<double>(), a.has_y ? gy.data_ptr<double>() : nullptr);
    else
      run(a.x, grad.data_ptr<float>(), stride, P1, a.has_y, P2, B, ptr_or_null(a.xl), ptr_or_null(a.yl), params,
          gx.data_ptr<float>(), a.has_y ? gy.data_ptr<float>() : nullptr);
  });
  return {gx, gy};
}

at::Tensor reduce_cpu(const at::Tensor& cham_x, const std::optional<at::Tensor>& cham_y,
                      const std::optional<at::Tensor>& x_lengths, const std::optional<at::Tensor>& y_lengths,
                      bool point_mean, int64_t batch_mode) {
  return reduce_impl(cham_x, cham_y, x_lengths, y_lengths, point_mean, batch_mode,
                     [](const at::Tensor&, auto&&... a) { cpu::chamfer_reduce(cpu_context(), a...); });
}

std::tuple<at::Tensor, at::Tensor> reduce_backward_cpu(const at::Tensor& grad, const at::Tensor& cham_x,
                                                       const std::optional<at::Tensor>& cham_y,
                                                       const std::optional<at::Tensor>& x_lengths,
                                                       const std::optional<at::Tensor>& y_lengths, bool point_mean,
                                                       int64_t batch_mode) {
  return reduce_backward_impl(grad, cham_x, cham_y, x_lengths, y_lengths, point_mean, batch_mode,
                              [](const at::Tensor&, auto&&... a) { cpu::chamfer_reduce_backward(cpu_context(), a...); });
}

#if PCOPS_TORCH_CUDA
at::Tensor reduce_cuda(const at::Tensor& cham_x, const std::optional<at::Tensor>& cham_y,
                       const std::optional<at::Tensor>& x_lengths, const std::optional<at::Tensor>& y_lengths,
                       bool point_mean, int64_t batch_mode) {
  const c10::cuda::CUDAGuard guard(cham_x.device());
  return reduce_impl(cham_x, cham_y, x_lengths, y_lengths, point_mean, batch_mode,
                     [](const at::Tensor& t, auto&&... a) { cuda::chamfer_reduce(cuda_context(t), a...); });
}

std::tuple<at::Tensor, at::Tensor> reduce_backward_cuda(const at::Tensor& grad, const at::Tensor& cham_x,
                                                        const std::optional<at::Tensor>& cham_y,
                                                        const std::optional<at::Tensor>& x_lengths,
                                                        const std::optional<at::Tensor>& y_lengths, bool point_mean,
                                                        int64_t batch_mode) {
  const c10::cuda::CUDAGuard guard(cham_x.device());
  return reduce_backward_impl(grad, cham_x, cham_y, x_lengths, y_lengths, point_mean, batch_mode,
                              [](const at::Tensor& t, auto&&... a) {
                                cuda::chamfer_reduce_backward(cuda_context(t), a...);
                              });
}
#endif

at::Tensor forward_cpu(const at::Tensor& x, const at::Tensor& y, const at::Tensor& idx, int64_t norm) {
  return forward_impl(x, y, idx, norm, [](const at::Tensor&, auto&&... a) {
    cpu::chamfer_pair_distance(cpu_context(), a...);
  });
}

std::tuple<at::Tensor, at::Tensor> backward_cpu(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& y,
                                                const at::Tensor& idx, int64_t norm) {
  return backward_impl(grad, x, y, idx, norm, [](const at::Tensor&, auto&&... a) {
    cpu::chamfer_pair_distance_backward(cpu_context(), a...);
  });
}

#if PCOPS_TORCH_CUDA
at::Tensor forward_cuda(const at::Tensor& x, const at::Tensor& y, const at::Tensor& idx, int64_t norm) {
  const c10::cuda::CUDAGuard guard(x.device());
  return forward_impl(x, y, idx, norm, [](const at::Tensor& t, auto&&... a) {
    cuda::chamfer_pair_distance(cuda_context(t), a...);
  });
}

std::tuple<at::Tensor, at::Tensor> backward_cuda(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& y,
                                                 const at::Tensor& idx, int64_t norm) {
  const c10::cuda::CUDAGuard guard(x.device());
  return backward_impl(grad, x, y, idx, norm, [](const at::Tensor& t, auto&&... a) {
    cuda::chamfer_pair_distance_backward(cuda_context(t), a...);
  });
}
#endif

}  // namespace

TORCH_LIBRARY_FRAGMENT(pcops, m) {
  m.def("_chamfer_pair_distance(Tensor x, Tensor y, Tensor idx, int norm=2) -> Tensor");
  m.def("_chamfer_pair_distance_backward(Tensor grad, Tensor x, Tensor y, Tensor idx, int norm=2) -> (Tensor, Tensor)");
  m.def("_chamfer_reduce(Tensor cham_x, Tensor? cham_y, Tensor? x_lengths, Tensor? y_lengths, bool point_mean, "
        "int batch_mode) -> Tensor");
  m.def("_chamfer_reduce_backward(Tensor grad, Tensor cham_x, Tensor? cham_y, Tensor? x_lengths, "
        "Tensor? y_lengths, bool point_mean, int batch_mode) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(pcops, CPU, m) {
  m.impl("_chamfer_pair_distance", &forward_cpu);
  m.impl("_chamfer_pair_distance_backward", &backward_cpu);
  m.impl("_chamfer_reduce", &reduce_cpu);
  m.impl("_chamfer_reduce_backward", &reduce_backward_cpu);
}

#if PCOPS_TORCH_CUDA
TORCH_LIBRARY_IMPL(pcops, CUDA, m) {
  m.impl("_chamfer_pair_distance", &forward_cuda);
  m.impl("_chamfer_pair_distance_backward", &backward_cuda);
  m.impl("_chamfer_reduce", &reduce_cuda);
  m.impl("_chamfer_reduce_backward", &reduce_backward_cuda);
}
#endif

}  // namespace pcops::torch_binding
