#include "pcops/nearest_neighbor.hpp"

#include "common.hpp"

// torch.ops.pcops.nearest_neighbor and the two deterministic helpers of chamfer_distance's
// autograd (_ordered_sum, _ordered_norm, _gather_rows_backward). float32 and float64 run in their own precision;
// float16 / bfloat16 are converted exactly to float32.
namespace pcops::torch_binding {
namespace {

bool is_half(at::ScalarType st) { return st == at::kHalf || st == at::kBFloat16; }

// Coordinates or values in float32 or float64 (half precision converted exactly to float32); the
// strides are kept (the kernels take strided views).
at::Tensor as_float_or_double(const at::Tensor& t, const char* name, int64_t rank) {
  TORCH_CHECK_VALUE(t.dim() == rank, name, ": expected a ", rank, "-D tensor, got shape ", t.sizes());
  const auto st = t.scalar_type();
  TORCH_CHECK_TYPE(st == at::kFloat || st == at::kDouble || is_half(st), name,
                   ": expected float32, float64, float16 or bfloat16 values, got ", st);
  return is_half(st) ? t.to(at::kFloat) : t;
}

template <class View, class T>
View typed_view(const at::Tensor& t) {
  return View{t.data_ptr<T>(), t.size(0), t.size(1), t.size(2), t.stride(0), t.stride(1), t.stride(2)};
}

template <class Run>
at::Tensor nearest_neighbor_impl(const at::Tensor& x_in, const at::Tensor& y_in,
                                 const std::optional<at::Tensor>& x_lengths_in,
                                 const std::optional<at::Tensor>& y_lengths_in, int64_t norm, Run run) {
  check_same_device(x_in, "x", y_in, "y");
  const at::Tensor x = as_float_or_double(x_in, "x", 3);
  const at::Tensor y = as_float_or_double(y_in, "y", 3);
  TORCH_CHECK_TYPE(x_in.scalar_type() == y_in.scalar_type(), "y: expected dtype ", x_in.scalar_type(), " (as x), got ",
                   y_in.scalar_type());
  const auto xl = as_lengths(x_lengths_in, x_in, "x_lengths");
  const auto yl = as_lengths(y_lengths_in, x_in, "y_lengths");
  at::Tensor idx = at::empty({x.size(0), x.size(1)}, x.options().dtype(at::kLong));
  const NearestNeighborParams params{norm};
  translate_errors([&] {
    if (x.scalar_type() == at::kDouble)
      run(x, typed_view<PointsView64, double>(x), typed_view<PointsView64, double>(y), lengths_of(xl), lengths_of(yl),
          params, idx.data_ptr<int64_t>());
    else
      run(x, typed_view<PointsView, float>(x), typed_view<PointsView, float>(y), lengths_of(xl), lengths_of(yl),
          params, idx.data_ptr<int64_t>());
  });
  return idx;
}

// Sums over the last dimension in the written order of cpu::ordered_sum.
template <class Run>
at::Tensor ordered_sum_impl(const at::Tensor& values_in, Run run) {
  TORCH_CHECK_VALUE(values_in.dim() >= 1, "values: expected at least one dimension, got a scalar");
  const auto st = values_in.scalar_type();
  TORCH_CHECK_TYPE(st == at::kFloat || st == at::kDouble || is_half(st),
                   "values: expected float32, float64, float16 or bfloat16 values, got ", st);
  const at::Tensor values = (is_half(st) ? values_in.to(at::kFloat) : values_in).contiguous();
  const int64_t length = values.size(-1);
  auto out_sizes = values.sizes().vec();
  out_sizes.pop_back();
  at::Tensor out = at::empty(out_sizes, values.options());
  const int64_t rows = out.numel();
  translate_errors([&] {
    if (values.scalar_type() == at::kDouble)
      run(values, values.data_ptr<double>(), rows, length, out.data_ptr<double>());
    else
      run(values, values.data_ptr<float>(), rows, length, out.data_ptr<float>());
  });
  return out.to(st);
}

template <class Run>
at::Tensor gather_rows_backward_impl(const at::Tensor& grad_in, const at::Tensor& idx_in, int64_t count, Run run) {
  check_same_device(grad_in, "grad", idx_in, "idx");
  const auto st = grad_in.scalar_type();
  const at::Tensor grad = as_float_or_double(grad_in, "grad", 3).contiguous();
  TORCH_CHECK_TYPE(idx_in.scalar_type() == at::kLong, "idx: expected an int64 tensor, got ", idx_in.scalar_type());
  TORCH_CHECK_VALUE(idx_in.dim() == 2 && idx_in.size(0) == grad.size(0) && idx_in.size(1) == grad.size(1),
                    "idx: expected shape [", grad.size(0), ", ", grad.size(1), "], got ", idx_in.sizes());
  TORCH_CHECK_VALUE(count >= 0, "count: expected >= 0, got ", count);
  check_output_size("count", count, grad.size(0), count, grad.size(2));
  // The CPU kernel range-checks idx (IndexError); the CUDA kernels treat an index outside [-1, count)
  // as -1 rather than synchronising to read it on the host (the indices come from nearest_neighbor).
  const at::Tensor idx = idx_in.contiguous();
  at::Tensor out = at::empty({grad.size(0), count, grad.size(2)}, grad.options());
  translate_errors([&] {
    if (grad.scalar_type() == at::kDouble)
      run(grad, grad.data_ptr<double>(), idx.data_ptr<int64_t>(), grad.size(0), grad.size(1), grad.size(2), count,
          out.data_ptr<double>());
    else
      run(grad, grad.data_ptr<float>(), idx.data_ptr<int64_t>(), grad.size(0), grad.size(1), grad.size(2), count,
          out.data_ptr<float>());
  });
  return out.to(st);
}

at::Tensor nearest_neighbor_cpu(const at::Tensor& x, const at::Tensor& y, const std::optional<at::Tensor>& x_lengths,
                                const std::optional<at::Tensor>& y_lengths, int64_t norm) {
  return nearest_neighbor_impl(x, y, x_lengths, y_lengths, norm, [](const at::Tensor&, auto&&... a) {
    cpu::nearest_neighbor(cpu_context(), a...);
  });
}

at::Tensor ordered_sum_cpu(const at::Tensor& values) {
  return ordered_sum_impl(values, [](const at::Tensor&, auto&&... a) { cpu::ordered_sum(cpu_context(), a...); });
}

at::Tensor ordered_norm_cpu(const at::Tensor& values) {
  return ordered_sum_impl(values, [](const at::Tensor&, auto&&... a) { cpu::ordered_norm(cpu_context(), a...); });
}

at::Tensor gather_rows_backward_cpu(const at::Tensor& grad, const at::Tensor& idx, int64_t count) {
  return gather_rows_backward_impl(grad, idx, count, [](const at::Tensor&, auto&&... a) {
    cpu::gather_rows_backward(cpu_context(), a...);
  });
}

#if PCOPS_TORCH_CUDA
at::Tensor nearest_neighbor_cuda(const at::Tensor& x, const at::Tensor& y, const std::optional<at::Tensor>& x_lengths,
                                 const std::optional<at::Tensor>& y_lengths, int64_t norm) {
  const c10::cuda::CUDAGuard guard(x.device());
  return nearest_neighbor_impl(x, y, x_lengths, y_lengths, norm, [](const at::Tensor& t, auto&&... a) {
    cuda::nearest_neighbor(cuda_context(t), a...);
  });
}

at::Tensor ordered_sum_cuda(const at::Tensor& values) {
  const c10::cuda::CUDAGuard guard(values.device());
  return ordered_sum_impl(values, [](const at::Tensor& t, auto&&... a) { cuda::ordered_sum(cuda_context(t), a...); });
}

at::Tensor ordered_norm_cuda(const at::Tensor& values) {
  const c10::cuda::CUDAGuard guard(values.device());
  return ordered_sum_impl(values, [](const at::Tensor& t, auto&&... a) { cuda::ordered_norm(cuda_context(t), a...); });
}

at::Tensor gather_rows_backward_cuda(const at::Tensor& grad, const at::Tensor& idx, int64_t count) {
  const c10::cuda::CUDAGuard guard(grad.device());
  return gather_rows_backward_impl(grad, idx, count, [](const at::Tensor& t, auto&&... a) {
    cuda::gather_rows_backward(cuda_context(t), a...);
  });
}
#endif

}  // namespace

TORCH_LIBRARY_FRAGMENT(pcops, m) {
  m.def("nearest_neighbor(Tensor x, Tensor y, Tensor? x_lengths=None, Tensor? y_lengths=None, int norm=2) -> Tensor");
  m.def("_ordered_sum(Tensor values) -> Tensor");
  m.def("_ordered_norm(Tensor values) -> Tensor");
  m.def("_gather_rows_backward(Tensor grad, Tensor idx, SymInt count) -> Tensor");
}

TORCH_LIBRARY_IMPL(pcops, CPU, m) {
  m.impl("nearest_neighbor", &nearest_neighbor_cpu);
  m.impl("_ordered_sum", &ordered_sum_cpu);
  m.impl("_ordered_norm", &ordered_norm_cpu);
  m.impl("_gather_rows_backward", &gather_rows_backward_cpu);
}

#if PCOPS_TORCH_CUDA
TORCH_LIBRARY_IMPL(pcops, CUDA, m) {
  m.impl("nearest_neighbor", &nearest_neighbor_cuda);
  m.impl("_ordered_sum", &ordered_sum_cuda);
  m.impl("_ordered_norm", &ordered_norm_cuda);
  m.impl("_gather_rows_backward", &gather_rows_backward_cuda);
}
#endif

}  // namespace pcops::torch_binding
