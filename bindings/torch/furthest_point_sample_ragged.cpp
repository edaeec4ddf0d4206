#include "pcops/furthest_point_sample.hpp"

#include "ragged.hpp"

namespace pcops::torch_binding {
namespace {

template <class Run>
at::Tensor fps_ragged_impl(const at::Tensor& src_in, const at::Tensor& ptr_in, const at::Tensor& counts_in,
                           const at::Tensor& starts_in, Run run) {
  const at::Tensor src = as_flat_points(src_in, "src");
  const at::Tensor ptr = as_offsets(ptr_in, src_in, "ptr");
  const at::Tensor counts = as_offsets(counts_in, src_in, "counts");
  const at::Tensor starts = as_offsets(starts_in, src_in, "starts");
  const int64_t B = ptr.numel() > 0 ? ptr.numel() - 1 : 0;
  TORCH_CHECK_VALUE(counts.numel() == B, "counts: expected ", B, " entries (one per cloud), got ",
                    counts.numel());
  TORCH_CHECK_VALUE(starts.numel() == B, "starts: expected ", B, " entries (one per cloud), got ",
                    starts.numel());
  int64_t total = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t c = counts.data_ptr<int64_t>()[b];
    TORCH_CHECK_VALUE(c >= 0, "counts[", b, "]: expected >= 0, got ", c);
    total += c;
  }
  at::Tensor out = at::empty({total}, src.options().dtype(at::kLong));
  translate_errors([&] {
    run(src, ragged_view_of(src), offsets_of(ptr), counts.data_ptr<int64_t>(), starts.data_ptr<int64_t>(),
        out.data_ptr<int64_t>());
  });
  return out;
}

at::Tensor fps_ragged_cpu(const at::Tensor& src, const at::Tensor& ptr, const at::Tensor& counts,
                          const at::Tensor& starts) {
  return fps_ragged_impl(src, ptr, counts, starts, [](const at::Tensor&, auto&&... a) {
    cpu::furthest_point_sample_ragged(cpu_context(), a...);
  });
}

#if PCOPS_TORCH_CUDA
at::Tensor fps_ragged_cuda(const at::Tensor& src, const at::Tensor& ptr, const at::Tensor& counts,
                           const at::Tensor& starts) {
  const c10::cuda::CUDAGuard guard(src.device());
  return fps_ragged_impl(src, ptr, counts, starts, [](const at::Tensor& t, auto&&... a) {
    cuda::furthest_point_sample_ragged(cuda_context(t), a...);
  });
}
#endif

}  // namespace

TORCH_LIBRARY_FRAGMENT(pcops, m) {
  m.def("furthest_point_sample_ragged(Tensor src, Tensor ptr, Tensor counts, Tensor starts) -> Tensor");
}

TORCH_LIBRARY_IMPL(pcops, CPU, m) { m.impl("furthest_point_sample_ragged", &fps_ragged_cpu); }

#if PCOPS_TORCH_CUDA
TORCH_LIBRARY_IMPL(pcops, CUDA, m) { m.impl("furthest_point_sample_ragged", &fps_ragged_cuda); }
#endif

}  // namespace pcops::torch_binding
