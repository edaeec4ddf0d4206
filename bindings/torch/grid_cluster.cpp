#include "pcops/grid_cluster.hpp"

#include "common.hpp"

namespace pcops::torch_binding {
namespace {

// float32 / float64 run natively; float16 / bfloat16 are converted exactly to float32 and
// integers to float64 (docs/ops/grid_cluster.md: where this differs from upstream).
at::ScalarType compute_type(at::ScalarType st) {
  if (st == at::kDouble) return at::kDouble;
  if (at::isFloatingType(st)) return at::kFloat;
  TORCH_CHECK_TYPE(at::isIntegralType(st, /*includeBool=*/false), "pos: expected a real dtype, got ", st);
  return at::kDouble;
}

at::Tensor vec_of(const std::optional<at::Tensor>& t, const at::Tensor& pos, at::ScalarType st,
                  int64_t D, const char* name) {
  if (!t.has_value()) return at::Tensor();
  TORCH_CHECK_VALUE(t->device() == pos.device(), name, ": expected device ", pos.device(),
                    " (as pos), got ", t->device());
  TORCH_CHECK_VALUE(t->numel() == D, name, ": expected ", D, " values (one per dimension of pos), got ",
                    t->numel(), " (shape ", t->sizes(), ")");
  return t->reshape({D}).to(st).contiguous();
}

template <class Run>
at::Tensor grid_cluster_impl(const at::Tensor& pos_in, const at::Tensor& size_in,
                             const std::optional<at::Tensor>& start_in,
                             const std::optional<at::Tensor>& end_in, Run run) {
  TORCH_CHECK_VALUE(pos_in.dim() >= 1, "pos: expected at least 1-D, got a 0-D tensor");
  const at::ScalarType st = compute_type(pos_in.scalar_type());
  const at::Tensor pos = pos_in.reshape({pos_in.size(0), -1}).to(st).contiguous();
  const int64_t N = pos.size(0), D = pos.size(1);
  const at::Tensor size = vec_of(size_in, pos_in, st, D, "size");
  const at::Tensor start = vec_of(start_in, pos_in, st, D, "start");
  const at::Tensor end = vec_of(end_in, pos_in, st, D, "end");
  at::Tensor out = at::empty({N}, pos.options().dtype(at::kLong));
  translate_errors([&] {
    if (st == at::kDouble) {
      auto p = [](const at::Tensor& t) { return t.defined() ? t.data_ptr<double>() : nullptr; };
      run(pos, pos.data_ptr<double>(), N, D, p(size), p(start), p(end), out.data_ptr<int64_t>());
    } else {
      auto p = [](const at::Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; };
      run(pos, pos.data_ptr<float>(), N, D, p(size), p(start), p(end), out.data_ptr<int64_t>());
    }
  });
  return out;
}

at::Tensor grid_cluster_cpu(const at::Tensor& pos, const at::Tensor& size,
                            const std::optional<at::Tensor>& start,
                            const std::optional<at::Tensor>& end) {
  return grid_cluster_impl(pos, size, start, end, [](const at::Tensor&, auto&&... a) {
    cpu::grid_cluster(cpu_context(), a...);
  });
}

#if PCOPS_TORCH_CUDA
at::Tensor grid_cluster_cuda(const at::Tensor& pos, const at::Tensor& size,
                             const std::optional<at::Tensor>& start,
                             const std::optional<at::Tensor>& end) {
  const c10::cuda::CUDAGuard guard(pos.device());
  return grid_cluster_impl(pos, size, start, end, [](const at::Tensor& t, auto&&... a) {
    cuda::grid_cluster(cuda_context(t), a...);
  });
}
#endif

}  // namespace

TORCH_LIBRARY_FRAGMENT(pcops, m) {
  m.def("grid_cluster(Tensor pos, Tensor size, Tensor? start=None, Tensor? end=None) -> Tensor");
}

TORCH_LIBRARY_IMPL(pcops, CPU, m) { m.impl("grid_cluster", &grid_cluster_cpu); }

#if PCOPS_TORCH_CUDA
TORCH_LIBRARY_IMPL(pcops, CUDA, m) { m.impl("grid_cluster", &grid_cluster_cuda); }
#endif

}  // namespace pcops::torch_binding
