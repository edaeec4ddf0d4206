#include "pcops/knn.hpp"

#include "common.hpp"

namespace pcops::torch_binding {
namespace {

template <class Run>
std::tuple<at::Tensor, at::Tensor> knn_impl(const at::Tensor& query_in, const at::Tensor& ref_in, int64_t k,
                                            const std::optional<at::Tensor>& query_lengths_in,
                                            const std::optional<at::Tensor>& ref_lengths_in, Run run) {
  check_same_device(query_in, "query", ref_in, "ref");
  const at::Tensor query = as_points(query_in, "query");
  const at::Tensor ref = as_points(ref_in, "ref");
  const auto ql = as_lengths(query_lengths_in, query_in, "query_lengths");
  const auto rl = as_lengths(ref_lengths_in, query_in, "ref_lengths");
  TORCH_CHECK_VALUE(k >= 0, "k: expected >= 0, got ", k);
  check_output_size("k", k, query.size(0), query.size(1), k);
  at::Tensor dist = at::empty({query.size(0), query.size(1), k}, query.options());
  at::Tensor idx = at::empty({query.size(0), query.size(1), k}, query.options().dtype(at::kLong));
  translate_errors([&] {
    run(query, view_of(query), view_of(ref), lengths_of(ql), lengths_of(rl), KnnParams{k},
        dist.data_ptr<float>(), idx.data_ptr<int64_t>());
  });
  remember_bounds(idx, -1, ref.size(1) - 1);  // reference points or -1
  return {dist, idx};
}

std::tuple<at::Tensor, at::Tensor> knn_cpu(const at::Tensor& query, const at::Tensor& ref, int64_t k,
                                           const std::optional<at::Tensor>& query_lengths,
                                           const std::optional<at::Tensor>& ref_lengths) {
  return knn_impl(query, ref, k, query_lengths, ref_lengths, [](const at::Tensor&, auto&&... a) {
    cpu::knn(cpu_context(), a...);
  });
}

#if PCOPS_TORCH_CUDA
std::tuple<at::Tensor, at::Tensor> knn_cuda(const at::Tensor& query, const at::Tensor& ref, int64_t k,
                                            const std::optional<at::Tensor>& query_lengths,
                                            const std::optional<at::Tensor>& ref_lengths) {
  const c10::cuda::CUDAGuard guard(query.device());
  return knn_impl(query, ref, k, query_lengths, ref_lengths, [](const at::Tensor& t, auto&&... a) {
    cuda::knn(cuda_context(t), a...);
  });
}
#endif

}  // namespace

TORCH_LIBRARY_FRAGMENT(pcops, m) {
  m.def(
      "knn(Tensor query, Tensor ref, SymInt k, Tensor? query_lengths=None, Tensor? ref_lengths=None) "
      "-> (Tensor dist, Tensor idx)");
}

TORCH_LIBRARY_IMPL(pcops, CPU, m) { m.impl("knn", &knn_cpu); }

#if PCOPS_TORCH_CUDA
TORCH_LIBRARY_IMPL(pcops, CUDA, m) { m.impl("knn", &knn_cuda); }
#endif

}  // namespace pcops::torch_binding
