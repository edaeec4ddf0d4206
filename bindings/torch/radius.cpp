#include "pcops/radius.hpp"

#include "ragged.hpp"

namespace pcops::torch_binding {
namespace {

at::Tensor radius_cpu(const at::Tensor& x_in, const at::Tensor& y_in, const at::Tensor& ptr_x_in,
                      const at::Tensor& ptr_y_in, double r, int64_t max_num_neighbors,
                      bool ignore_same_index) {
  check_same_device(x_in, "x", y_in, "y");
  const at::Tensor x = as_flat_points(x_in, "x"), y = as_flat_points(y_in, "y");
  const at::Tensor px = as_offsets(ptr_x_in, x_in, "ptr_x"), py = as_offsets(ptr_y_in, x_in, "ptr_y");
  EdgeTensor edges{at::Tensor(), x.options()};
  translate_errors([&] {
    cpu::radius(cpu_context(), ragged_view_of(x), ragged_view_of(y), offsets_of(px), offsets_of(py),
                RadiusParams{r, max_num_neighbors, ignore_same_index}, edges.allocator());
  });
  return edges.out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(pcops, m) {
  m.def(
      "radius(Tensor x, Tensor y, Tensor ptr_x, Tensor ptr_y, float r, int max_num_neighbors=32, "
      "bool ignore_same_index=False) -> Tensor");
}

TORCH_LIBRARY_IMPL(pcops, CPU, m) { m.impl("radius", &radius_cpu); }

}  // namespace pcops::torch_binding
