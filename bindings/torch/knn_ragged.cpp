#include "pcops/knn.hpp"
#include "pcops/nearest.hpp"

#include "ragged.hpp"

namespace pcops::torch_binding {
namespace {

template <class Run>
at::Tensor knn_ragged_impl(const at::Tensor& x_in, const at::Tensor& y_in, const at::Tensor& ptr_x_in,
                           const at::Tensor& ptr_y_in, int64_t k, bool cosine, Run run) {
  check_same_device(x_in, "x", y_in, "y");
  const at::Tensor x = as_flat_points(x_in, "x"), y = as_flat_points(y_in, "y");
  const at::Tensor px = as_offsets(ptr_x_in, x_in, "ptr_x"), py = as_offsets(ptr_y_in, x_in, "ptr_y");
  EdgeTensor edges{at::Tensor(), x.options()};
  translate_errors([&] {
    run(x, ragged_view_of(x), ragged_view_of(y), offsets_of(px), offsets_of(py),
        KnnRaggedParams{k, cosine}, edges.allocator());
  });
  return edges.out;
}

template <class Run>
at::Tensor nearest_impl(const at::Tensor& x_in, const at::Tensor& y_in, const at::Tensor& ptr_x_in,
                        const at::Tensor& ptr_y_in, Run run) {
  check_same_device(x_in, "x", y_in, "y");
  const at::Tensor x = as_flat_points(x_in, "x"), y = as_flat_points(y_in, "y");
  const at::Tensor px = as_offsets(ptr_x_in, x_in, "ptr_x"), py = as_offsets(ptr_y_in, x_in, "ptr_y");
  at::Tensor out = at::empty({x.size(0)}, x.options().dtype(at::kLong));
  translate_errors([&] {
    run(x, ragged_view_of(x), ragged_view_of(y), offsets_of(px), offsets_of(py),
        out.data_ptr<int64_t>());
  });
  return out;
}

at::Tensor knn_ragged_cpu(const at::Tensor& x, const at::Tensor& y, const at::Tensor& ptr_x,
                          const at::Tensor& ptr_y, int64_t k, bool cosine) {
  return knn_ragged_impl(x, y, ptr_x, ptr_y, k, cosine,
                         [](const at::Tensor&, auto&&... a) { cpu::knn_ragged(cpu_context(), a...); });
}

at::Tensor nearest_cpu(const at::Tensor& x, const at::Tensor& y, const at::Tensor& ptr_x,
                       const at::Tensor& ptr_y) {
  return nearest_impl(x, y, ptr_x, ptr_y,
                      [](const at::Tensor&, auto&&... a) { cpu::nearest(cpu_context(), a...); });
}

#if PCOPS_TORCH_CUDA
at::Tensor knn_ragged_cuda(const at::Tensor& x, const at::Tensor& y, const at::Tensor& ptr_x,
                           const at::Tensor& ptr_y, int64_t k, bool cosine) {
  const c10::cuda::CUDAGuard guard(x.device());
  return knn_ragged_impl(x, y, ptr_x, ptr_y, k, cosine, [](const at::Tensor& t, auto&&... a) {
    cuda::knn_ragged(cuda_context(t), a...);
  });
}

at::Tensor nearest_cuda(const at::Tensor& x, const at::Tensor& y, const at::Tensor& ptr_x,
                        const at::Tensor& ptr_y) {
  const c10::cuda::CUDAGuard guard(x.device());
  return nearest_impl(x, y, ptr_x, ptr_y,
                      [](const at::Tensor& t, auto&&... a) { cuda::nearest(cuda_context(t), a...); });
}
#endif

}  // namespace

TORCH_LIBRARY_FRAGMENT(pcops, m) {
  m.def("knn_ragged(Tensor x, Tensor y, Tensor ptr_x, Tensor ptr_y, int k, bool cosine=False) -> Tensor");
  m.def("nearest(Tensor x, Tensor y, Tensor ptr_x, Tensor ptr_y) -> Tensor");
}

TORCH_LIBRARY_IMPL(pcops, CPU, m) {
  m.impl("knn_ragged", &knn_ragged_cpu);
  m.impl("nearest", &nearest_cpu);
}

#if PCOPS_TORCH_CUDA
TORCH_LIBRARY_IMPL(pcops, CUDA, m) {
  m.impl("knn_ragged", &knn_ragged_cuda);
  m.impl("nearest", &nearest_cuda);
}
#endif

}  // namespace pcops::torch_binding
