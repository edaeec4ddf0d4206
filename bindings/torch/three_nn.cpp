#include "pcops/three_nn.hpp"

#include "common.hpp"

namespace pcops::torch_binding {
namespace {

template <class Run>
std::tuple<at::Tensor, at::Tensor> three_nn_impl(const at::Tensor& unknown_in, const at::Tensor& known_in,
                                                 const std::optional<at::Tensor>& unknown_lengths_in,
                                                 const std::optional<at::Tensor>& known_lengths_in, Run run) {
  check_same_device(unknown_in, "unknown", known_in, "known");
  const at::Tensor unknown = as_points(unknown_in, "unknown");
  const at::Tensor known = as_points(known_in, "known");
  const auto ul = as_lengths(unknown_lengths_in, unknown_in, "unknown_lengths");
  const auto kl = as_lengths(known_lengths_in, unknown_in, "known_lengths");
  at::Tensor dist = at::empty({unknown.size(0), unknown.size(1), 3}, unknown.options());
  at::Tensor idx = at::empty({unknown.size(0), unknown.size(1), 3}, unknown.options().dtype(at::kLong));
  translate_errors([&] {
    run(unknown, view_of(unknown), view_of(known), lengths_of(ul), lengths_of(kl), dist.data_ptr<float>(),
        idx.data_ptr<int64_t>());
  });
  remember_bounds(idx, -1, known.size(1) - 1);  // known points or -1
  return {dist, idx};
}

std::tuple<at::Tensor, at::Tensor> three_nn_cpu(const at::Tensor& unknown, const at::Tensor& known,
                                                const std::optional<at::Tensor>& unknown_lengths,
                                                const std::optional<at::Tensor>& known_lengths) {
  return three_nn_impl(unknown, known, unknown_lengths, known_lengths, [](const at::Tensor&, auto&&... a) {
    cpu::three_nn(cpu_context(), a...);
  });
}

#if PCOPS_TORCH_CUDA
std::tuple<at::Tensor, at::Tensor> three_nn_cuda(const at::Tensor& unknown, const at::Tensor& known,
                                                 const std::optional<at::Tensor>& unknown_lengths,
                                                 const std::optional<at::Tensor>& known_lengths) {
  const c10::cuda::CUDAGuard guard(unknown.device());
  return three_nn_impl(unknown, known, unknown_lengths, known_lengths, [](const at::Tensor& t, auto&&... a) {
    cuda::three_nn(cuda_context(t), a...);
  });
}
#endif

}  // namespace

TORCH_LIBRARY_FRAGMENT(pcops, m) {
  m.def(
      "three_nn(Tensor unknown, Tensor known, Tensor? unknown_lengths=None, Tensor? known_lengths=None) "
      "-> (Tensor dist, Tensor idx)");
}

TORCH_LIBRARY_IMPL(pcops, CPU, m) { m.impl("three_nn", &three_nn_cpu); }

#if PCOPS_TORCH_CUDA
TORCH_LIBRARY_IMPL(pcops, CUDA, m) { m.impl("three_nn", &three_nn_cuda); }
#endif

}  // namespace pcops::torch_binding
