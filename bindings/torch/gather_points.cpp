#include "pcops/gather_points.hpp"

#include "common.hpp"

namespace pcops::torch_binding {
namespace {

template <class Run>
at::Tensor gather_points_impl(const at::Tensor& features_in, const at::Tensor& idx_in, Run run) {
  check_same_device(features_in, "features", idx_in, "idx");
  const at::Tensor features = as_values(features_in, "features", 3, "[B, C, N]");
  TORCH_CHECK_TYPE(idx_in.scalar_type() == at::kLong, "idx: expected an int64 tensor, got ", idx_in.scalar_type());
  TORCH_CHECK_VALUE(idx_in.dim() == 2 && idx_in.size(0) == features.size(0), "idx: expected shape [",
                    features.size(0), ", M], got ", idx_in.sizes());
  const at::Tensor idx = as_indices(idx_in, "idx", features.size(2));
  at::Tensor out = at::empty({features.size(0), features.size(1), idx.size(1)}, features.options());
  translate_errors([&] {
    run(features, features_view_of(features), idx.data_ptr<int64_t>(), idx.size(1), out.data_ptr<float>());
  });
  return out.to(features_in.scalar_type());
}

template <class Run>
at::Tensor gather_points_backward_impl(const at::Tensor& grad_out_in, const at::Tensor& idx_in, int64_t count,
                                       Run run) {
  check_same_device(grad_out_in, "grad_out", idx_in, "idx");
  const at::Tensor grad_out = as_values(grad_out_in, "grad_out", 3, "[B, C, M]");
  TORCH_CHECK_TYPE(idx_in.scalar_type() == at::kLong, "idx: expected an int64 tensor, got ", idx_in.scalar_type());
  TORCH_CHECK_VALUE(idx_in.dim() == 2 && idx_in.size(0) == grad_out.size(0) && idx_in.size(1) == grad_out.size(2),
                    "idx: expected shape [", grad_out.size(0), ", ", grad_out.size(2), "], got ", idx_in.sizes());
  TORCH_CHECK_VALUE(count >= 0, "count: expected >= 0, got ", count);
  check_output_size("count", count, grad_out.size(0), grad_out.size(1), count);
  const at::Tensor idx = as_indices(idx_in, "idx", count);
  at::Tensor gf = at::empty({grad_out.size(0), grad_out.size(1), count}, grad_out.options());
  translate_errors([&] {
    run(grad_out, features_view_of(grad_out), idx.data_ptr<int64_t>(), count, gf.data_ptr<float>());
  });
  return gf.to(grad_out_in.scalar_type());
}

at::Tensor gather_points_cpu(const at::Tensor& features, const at::Tensor& idx) {
  return gather_points_impl(features, idx, [](const at::Tensor&, auto&&... a) {
    cpu::gather_points(cpu_context(), a...);
  });
}

at::Tensor gather_points_backward_cpu(const at::Tensor& grad_out, const at::Tensor& idx, int64_t count) {
  return gather_points_backward_impl(grad_out, idx, count, [](const at::Tensor&, auto&&... a) {
    cpu::gather_points_backward(cpu_context(), a...);
  });
}

#if PCOPS_TORCH_CUDA
at::Tensor gather_points_cuda(const at::Tensor& features, const at::Tensor& idx) {
  const c10::cuda::CUDAGuard guard(features.device());
  return gather_points_impl(features, idx, [](const at::Tensor& t, auto&&... a) {
    cuda::gather_points(cuda_context(t), a...);
  });
}

at::Tensor gather_points_backward_cuda(const at::Tensor& grad_out, const at::Tensor& idx, int64_t count) {
  const c10::cuda::CUDAGuard guard(grad_out.device());
  return gather_points_backward_impl(grad_out, idx, count, [](const at::Tensor& t, auto&&... a) {
    cuda::gather_points_backward(cuda_context(t), a...);
  });
}
#endif

}  // namespace

TORCH_LIBRARY_FRAGMENT(pcops, m) {
  m.def("gather_points(Tensor features, Tensor idx) -> Tensor");
  m.def("_gather_points_backward(Tensor grad_out, Tensor idx, SymInt count) -> Tensor");
}

TORCH_LIBRARY_IMPL(pcops, CPU, m) {
  m.impl("gather_points", &gather_points_cpu);
  m.impl("_gather_points_backward", &gather_points_backward_cpu);
}

#if PCOPS_TORCH_CUDA
TORCH_LIBRARY_IMPL(pcops, CUDA, m) {
  m.impl("gather_points", &gather_points_cuda);
  m.impl("_gather_points_backward", &gather_points_backward_cuda);
}
#endif

}  // namespace pcops::torch_binding
