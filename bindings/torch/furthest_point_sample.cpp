#include "pcops/furthest_point_sample.hpp"

#include "common.hpp"

namespace pcops::torch_binding {
namespace {

template <class Run>
at::Tensor furthest_point_sample_impl(const at::Tensor& points_in, int64_t num_samples, int64_t start_index,
                                      const std::optional<at::Tensor>& lengths_in, bool skip_near_origin,
                                      Run run) {
  const at::Tensor points = as_points(points_in, "points");
  const auto lengths = as_lengths(lengths_in, points_in, "lengths");
  TORCH_CHECK_VALUE(num_samples >= 0, "num_samples: expected >= 0, got ", num_samples);
  check_output_size("num_samples", num_samples, points.size(0), num_samples);
  at::Tensor out = at::empty({points.size(0), num_samples}, points.options().dtype(at::kLong));
  translate_errors([&] {
    run(points, view_of(points), lengths_of(lengths), FpsParams{num_samples, start_index, skip_near_origin},
        out.data_ptr<int64_t>());
  });
  remember_bounds(out, -1, points.size(1) - 1);  // points or -1
  return out;
}

at::Tensor furthest_point_sample_cpu(const at::Tensor& points, int64_t num_samples, int64_t start_index,
                                     const std::optional<at::Tensor>& lengths, bool skip_near_origin) {
  return furthest_point_sample_impl(points, num_samples, start_index, lengths, skip_near_origin,
                                    [](const at::Tensor&, auto&&... a) {
                                      cpu::furthest_point_sample(cpu_context(), a...);
                                    });
}

#if PCOPS_TORCH_CUDA
at::Tensor furthest_point_sample_cuda(const at::Tensor& points, int64_t num_samples, int64_t start_index,
                                      const std::optional<at::Tensor>& lengths, bool skip_near_origin) {
  const c10::cuda::CUDAGuard guard(points.device());
  return furthest_point_sample_impl(points, num_samples, start_index, lengths, skip_near_origin,
                                    [](const at::Tensor& t, auto&&... a) {
                                      cuda::furthest_point_sample(cuda_context(t), a...);
                                    });
}
#endif

}  // namespace

TORCH_LIBRARY_FRAGMENT(pcops, m) {
  m.def(
      "furthest_point_sample(Tensor points, SymInt num_samples, int start_index=0, Tensor? lengths=None, "
      "bool skip_near_origin=False) -> Tensor");
}

TORCH_LIBRARY_IMPL(pcops, CPU, m) { m.impl("furthest_point_sample", &furthest_point_sample_cpu); }

#if PCOPS_TORCH_CUDA
TORCH_LIBRARY_IMPL(pcops, CUDA, m) { m.impl("furthest_point_sample", &furthest_point_sample_cuda); }
#endif

}  // namespace pcops::torch_binding
