#include "pcops/three_interpolate.hpp"

#include "common.hpp"

namespace pcops::torch_binding {
namespace {

// features [B, C, M], idx int64 [B, N, 3], weight [B, N, 3]: framework checks, then float32
// contiguous copies (where needed) and the range-checked indices.
struct Inputs {
  at::Tensor features, idx, weight;
};

// idx_checked: the indices are a forward's, already range-checked (the autograd backward: a saved
// tensor cannot change unnoticed), so their values are not read again (no synchronisation on
// CUDA). The kernels skip indices outside [0, M) in any case: nothing out of bounds is read.
Inputs three_interpolate_inputs(const at::Tensor& features_in, const at::Tensor& idx_in,
                                const at::Tensor& weight_in, bool idx_checked = false) {
  check_same_device(features_in, "features", idx_in, "idx");
  check_same_device(features_in, "features", weight_in, "weight");
  Inputs in;
  in.features = as_values(features_in, "features", 3, "[B, C, M]");
  TORCH_CHECK_TYPE(idx_in.scalar_type() == at::kLong, "idx: expected an int64 tensor, got ", idx_in.scalar_type());
  TORCH_CHECK_VALUE(idx_in.dim() == 3 && idx_in.size(0) == in.features.size(0) && idx_in.size(2) == 3,
                    "idx: expected shape [", in.features.size(0), ", N, 3], got ", idx_in.sizes());
  in.weight = as_values(weight_in, "weight", 3, "[B, N, 3]");
  TORCH_CHECK_VALUE(weight_in.sizes() == idx_in.sizes(), "weight: expected shape ", idx_in.sizes(),
                    " (as idx), got ", weight_in.sizes());
  in.idx = idx_checked ? idx_in.contiguous() : as_indices(idx_in, "idx", in.features.size(2));
  return in;
}

template <class Run>
at::Tensor three_interpolate_impl(const at::Tensor& features_in, const at::Tensor& idx_in,
                                  const at::Tensor& weight_in, Run run) {
  const Inputs in = three_interpolate_inputs(features_in, idx_in, weight_in);
  at::Tensor out =
      at::empty({in.features.size(0), in.features.size(1), in.idx.size(1)}, in.features.options());
  translate_errors([&] {
    run(in.features, features_view_of(in.features), in.idx.data_ptr<int64_t>(), view_of(in.weight),
        out.data_ptr<float>());
  });
  return out.to(features_in.scalar_type());
}

template <class Run>
std::tuple<at::Tensor, at::Tensor> three_interpolate_backward_impl(const at::Tensor& grad_out_in,
                                                                   const at::Tensor& features_in,
                                                                   const at::Tensor& idx_in,
                                                                   const at::Tensor& weight_in, bool need_features,
                                                                   bool need_weight, bool idx_checked, Run run) {
  check_same_device(features_in, "features", grad_out_in, "grad_out");
  const Inputs in = three_interpolate_inputs(features_in, idx_in, weight_in, idx_checked);
  const at::Tensor grad_out = as_values(grad_out_in, "grad_out", 3, "[B, C, N]");
  TORCH_CHECK_VALUE(grad_out.size(0) == in.features.size(0) && grad_out.size(1) == in.features.size(1) &&
                        grad_out.size(2) == in.idx.size(1),
                    "grad_out: expected shape [", in.features.size(0), ", ", in.features.size(1), ", ",
                    in.idx.size(1), "], got ", grad_out_in.sizes());
  // A gradient that is not requested is returned as zeros (not computed).
  at::Tensor gf = need_features ? at::empty(in.features.sizes(), in.features.options())
                                : at::zeros(in.features.sizes(), in.features.options());
  at::Tensor gw = need_weight ? at::empty(in.weight.sizes(), in.weight.options())
                              : at::zeros(in.weight.sizes(), in.weight.options());
  translate_errors([&] {
    run(in.features, features_view_of(grad_out), features_view_of(in.features), in.idx.data_ptr<int64_t>(),
        view_of(in.weight), need_features ? gf.data_ptr<float>() : nullptr,
        need_weight ? gw.data_ptr<float>() : nullptr);
  });
  return {gf.to(features_in.scalar_type()), gw.to(weight_in.scalar_type())};
}

at::Tensor three_interpolate_cpu(const at::Tensor& features, const at::Tensor& idx, const at::Tensor& weight) {
  return three_interpolate_impl(features, idx, weight, [](const at::Tensor&, auto&&... a) {
    cpu::three_interpolate(cpu_context(), a...);
  });
}

std::tuple<at::Tensor, at::Tensor> three_interpolate_backward_cpu(const at::Tensor& grad_out,
                                                                  const at::Tensor& features, const at::Tensor& idx,
                                                                  const at::Tensor& weight, bool need_features,
                                                                  bool need_weight, bool idx_checked) {
  return three_interpolate_backward_impl(grad_out, features, idx, weight, need_features, need_weight, idx_checked,
                                         [](const at::Tensor&, auto&&... a) {
                                           cpu::three_interpolate_backward(cpu_context(), a...);
                                         });
}

#if PCOPS_TORCH_CUDA
at::Tensor three_interpolate_cuda(const at::Tensor& features, const at::Tensor& idx, const at::Tensor& weight) {
  const c10::cuda::CUDAGuard guard(features.device());
  return three_interpolate_impl(features, idx, weight, [](const at::Tensor& t, auto&&... a) {
    cuda::three_interpolate(cuda_context(t), a...);
  });
}

std::tuple<at::Tensor, at::Tensor> three_interpolate_backward_cuda(const at::Tensor& grad_out,
                                                                   const at::Tensor& features, const at::Tensor& idx,
                                                                   const at::Tensor& weight, bool need_features,
                                                                   bool need_weight, bool idx_checked) {
  const c10::cuda::CUDAGuard guard(features.device());
  return three_interpolate_backward_impl(grad_out, features, idx, weight, need_features, need_weight, idx_checked,
                                         [](const at::Tensor& t, auto&&... a) {
                                           cuda::three_interpolate_backward(cuda_context(t), a...);
                                         });
}
#endif

}  // namespace

TORCH_LIBRARY_FRAGMENT(pcops, m) {
  m.def("three_interpolate(Tensor features, Tensor idx, Tensor weight) -> Tensor");
  m.def(
      "_three_interpolate_backward(Tensor grad_out, Tensor features, Tensor idx, Tensor weight, "
      "bool need_features=True, bool need_weight=True, bool idx_checked=False) -> (Tensor grad_features, Tensor "
      "grad_weight)");
}

TORCH_LIBRARY_IMPL(pcops, CPU, m) {
  m.impl("three_interpolate", &three_interpolate_cpu);
  m.impl("_three_interpolate_backward", &three_interpolate_backward_cpu);
}

#if PCOPS_TORCH_CUDA
TORCH_LIBRARY_IMPL(pcops, CUDA, m) {
  m.impl("three_interpolate", &three_interpolate_cuda);
  m.impl("_three_interpolate_backward", &three_interpolate_backward_cuda);
}
#endif

}  // namespace pcops::torch_binding
