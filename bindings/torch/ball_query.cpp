#include "pcops/ball_query.hpp"

#include <cmath>

#include "common.hpp"

namespace pcops::torch_binding {
namespace {

float radius_to_float(double radius) {
  TORCH_CHECK_VALUE(std::isfinite(radius) && radius >= 0.0, "radius: expected a finite value >= 0, got ",
                    radius);
  const float r = static_cast<float>(radius);
  TORCH_CHECK_VALUE(std::isfinite(r), "radius: ", radius, " does not fit in float32");
  return r;
}

template <class Run>
std::tuple<at::Tensor, at::Tensor> ball_query_impl(const at::Tensor& query_in, const at::Tensor& ref_in,
                                                   double radius, int64_t K,
                                                   const std::optional<at::Tensor>& query_lengths_in,
                                                   const std::optional<at::Tensor>& ref_lengths_in, Run run) {
  check_same_device(query_in, "query", ref_in, "ref");
  TORCH_CHECK_TYPE(query_in.scalar_type() == ref_in.scalar_type(), "ref: expected dtype ",
                   query_in.scalar_type(), " (as query), got ", ref_in.scalar_type());
  const at::Tensor query = as_points(query_in, "query");
  const at::Tensor ref = as_points(ref_in, "ref");
  const auto ql = as_lengths(query_lengths_in, query_in, "query_lengths");
  const auto rl = as_lengths(ref_lengths_in, query_in, "ref_lengths");
  const float r = radius_to_float(radius);
  TORCH_CHECK_VALUE(K >= 0, "K: expected >= 0, got ", K);
  check_output_size("K", K, query.size(0), query.size(1), K);
  at::Tensor dist2 = at::empty({query.size(0), query.size(1), K}, query.options());
  at::Tensor idx = at::empty({query.size(0), query.size(1), K}, query.options().dtype(at::kLong));
  translate_errors([&] {
    run(query, view_of(query), view_of(ref), lengths_of(ql), lengths_of(rl), BallQueryParams{r, K},
        dist2.data_ptr<float>(), idx.data_ptr<int64_t>());
  });
  remember_bounds(idx, -1, ref.size(1) - 1);  // reference points or -1
  return {dist2, idx};
}

template <class Run>
std::tuple<at::Tensor, at::Tensor> ball_query_backward_impl(const at::Tensor& grad_dist2_in,
                                                            const at::Tensor& query_in, const at::Tensor& ref_in,
                                                            const at::Tensor& idx_in, Run run) {
  check_same_device(query_in, "query", ref_in, "ref");
  check_same_device(query_in, "query", idx_in, "idx");
  check_same_device(query_in, "query", grad_dist2_in, "grad_dist2");
  TORCH_CHECK_TYPE(query_in.scalar_type() == ref_in.scalar_type(), "ref: expected dtype ",
                   query_in.scalar_type(), " (as query), got ", ref_in.scalar_type());
  const at::Tensor query = as_points(query_in, "query");
  const at::Tensor ref = as_points(ref_in, "ref");
  TORCH_CHECK_VALUE(query.size(2) == 3, "query: expected 3-D points, got shape ", query_in.sizes());
  TORCH_CHECK_VALUE(ref.size(2) == 3, "ref: expected 3-D points, got shape ", ref_in.sizes());
  TORCH_CHECK_VALUE(ref.size(0) == query.size(0), "ref: expected batch size ", query.size(0),
                    " (as query), got ", ref.size(0));
  TORCH_CHECK_VALUE(idx_in.dim() == 3 && idx_in.size(0) == query.size(0) && idx_in.size(1) == query.size(1),
                    "idx: expected shape [", query.size(0), ", ", query.size(1), ", K], got ", idx_in.sizes());
  TORCH_CHECK_VALUE(grad_dist2_in.sizes() == idx_in.sizes(), "grad_dist2: expected shape ", idx_in.sizes(),
                    ", got ", grad_dist2_in.sizes());
  const auto gt = grad_dist2_in.scalar_type();
  TORCH_CHECK_TYPE(gt == at::kFloat || gt == at::kHalf || gt == at::kBFloat16,
                   "grad_dist2: expected float32, float16 or bfloat16, got ", gt);
  const at::Tensor idx = as_indices(idx_in, "idx", ref.size(1));
  const at::Tensor grad = grad_dist2_in.to(at::kFloat).contiguous();
  at::Tensor gq = at::empty(query.sizes(), query.options());
  at::Tensor gr = at::empty(ref.sizes(), ref.options());
  translate_errors([&] {
    run(query, view_of(query), view_of(ref), idx.data_ptr<int64_t>(), grad.data_ptr<float>(), idx.size(2),
        gq.data_ptr<float>(), gr.data_ptr<float>());
  });
  return {gq.to(query_in.scalar_type()), gr.to(ref_in.scalar_type())};
}

std::tuple<at::Tensor, at::Tensor> ball_query_cpu(const at::Tensor& query, const at::Tensor& ref, double radius,
                                                  int64_t K, const std::optional<at::Tensor>& query_lengths,
                                                  const std::optional<at::Tensor>& ref_lengths) {
  return ball_query_impl(query, ref, radius, K, query_lengths, ref_lengths,
                         [](const at::Tensor&, auto&&... a) { cpu::ball_query(cpu_context(), a...); });
}

std::tuple<at::Tensor, at::Tensor> ball_query_backward_cpu(const at::Tensor& grad_dist2, const at::Tensor& query,
                                                           const at::Tensor& ref, const at::Tensor& idx) {
  return ball_query_backward_impl(grad_dist2, query, ref, idx, [](const at::Tensor&, auto&&... a) {
    cpu::ball_query_backward(cpu_context(), a...);
  });
}

#if PCOPS_TORCH_CUDA
std::tuple<at::Tensor, at::Tensor> ball_query_cuda(const at::Tensor& query, const at::Tensor& ref, double radius,
                                                   int64_t K, const std::optional<at::Tensor>& query_lengths,
                                                   const std::optional<at::Tensor>& ref_lengths) {
  const c10::cuda::CUDAGuard guard(query.device());
  return ball_query_impl(query, ref, radius, K, query_lengths, ref_lengths, [](const at::Tensor& t, auto&&... a) {
    cuda::ball_query(cuda_context(t), a...);
  });
}

std::tuple<at::Tensor, at::Tensor> ball_query_backward_cuda(const at::Tensor& grad_dist2, const at::Tensor& query,
                                                            const at::Tensor& ref, const at::Tensor& idx) {
  const c10::cuda::CUDAGuard guard(query.device());
  return ball_query_backward_impl(grad_dist2, query, ref, idx, [](const at::Tensor& t, auto&&... a) {
    cuda::ball_query_backward(cuda_context(t), a...);
  });
}
#endif

}  // namespace

TORCH_LIBRARY_FRAGMENT(pcops, m) {
  m.def(
      "ball_query(Tensor query, Tensor ref, float radius, SymInt K, Tensor? query_lengths=None, "
      "Tensor? ref_lengths=None) -> (Tensor dist2, Tensor idx)");
  m.def("_ball_query_backward(Tensor grad_dist2, Tensor query, Tensor ref, Tensor idx) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(pcops, CPU, m) {
  m.impl("ball_query", &ball_query_cpu);
  m.impl("_ball_query_backward", &ball_query_backward_cpu);
}

#if PCOPS_TORCH_CUDA
TORCH_LIBRARY_IMPL(pcops, CUDA, m) {
  m.impl("ball_query", &ball_query_cuda);
  m.impl("_ball_query_backward", &ball_query_backward_cuda);
}
#endif

}  // namespace pcops::torch_binding
