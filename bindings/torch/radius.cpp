#include "pcops/radius.hpp"

#include "ragged.hpp"

namespace pcops::torch_binding {
namespace {

template <class Run>
at::Tensor radius_impl(const at::Tensor& x_in, const at::Tensor& y_in, const at::Tensor& ptr_x_in,
                       const at::Tensor& ptr_y_in, double r, int64_t max_num_neighbors,
                       bool ignore_same_index, Run run) {
  check_same_device(x_in, "x", y_in, "y");
  const at::Tensor x = as_flat_points(x_in, "x"), y = as_flat_points(y_in, "y");
  const at::Tensor px = as_offsets(ptr_x_in, x_in, "ptr_x"), py = as_offsets(ptr_y_in, x_in, "ptr_y");
  EdgeTensor edges{at::Tensor(), x.options()};
  translate_errors([&] {
    run(x, ragged_view_of(x), ragged_view_of(y), offsets_of(px), offsets_of(py),
        RadiusParams{r, max_num_neighbors, ignore_same_index}, edges.allocator());
  });
  return edges.out;
}

at::Tensor radius_cpu(const at::Tensor& x, const at::Tensor& y, const at::Tensor& ptr_x,
                      const at::Tensor& ptr_y, double r, int64_t max_num_neighbors,
                      bool ignore_same_index) {
  return radius_impl(x, y, ptr_x, ptr_y, r, max_num_neighbors, ignore_same_index,
                     [](const at::Tensor&, auto&&... a) { cpu::radius(cpu_context(), a...); });
}

#if PCOPS_TORCH_CUDA
at::Tensor radius_cuda(const at::Tensor& x, const at::Tensor& y, const at::Tensor& ptr_x,
                       const at::Tensor& ptr_y, double r, int64_t max_num_neighbors,
                       bool ignore_same_index) {
  const c10::cuda::CUDAGuard guard(x.device());
  return radius_impl(x, y, ptr_x, ptr_y, r, max_num_neighbors, ignore_same_index,
                     [](const at::Tensor& t, auto&&... a) { cuda::radius(cuda_context(t), a...); });
}
#endif

}  // namespace

TORCH_LIBRARY_FRAGMENT(pcops, m) {
  m.def(
      "radius(Tensor x, Tensor y, Tensor ptr_x, Tensor ptr_y, float r, int max_num_neighbors=32, "
      "bool ignore_same_index=False) -> Tensor");
}

TORCH_LIBRARY_IMPL(pcops, CPU, m) { m.impl("radius", &radius_cpu); }

#if PCOPS_TORCH_CUDA
TORCH_LIBRARY_IMPL(pcops, CUDA, m) { m.impl("radius", &radius_cuda); }
#endif

}  // namespace pcops::torch_binding
