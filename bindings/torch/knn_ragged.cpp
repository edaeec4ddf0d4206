#include "pcops/knn.hpp"
#include "pcops/nearest.hpp"

#include "ragged.hpp"

namespace pcops::torch_binding {
namespace {

at::Tensor knn_ragged_cpu(const at::Tensor& x_in, const at::Tensor& y_in, const at::Tensor& ptr_x_in,
                          const at::Tensor& ptr_y_in, int64_t k, bool cosine) {
  check_same_device(x_in, "x", y_in, "y");
  const at::Tensor x = as_flat_points(x_in, "x"), y = as_flat_points(y_in, "y");
  const at::Tensor px = as_offsets(ptr_x_in, x_in, "ptr_x"), py = as_offsets(ptr_y_in, x_in, "ptr_y");
  EdgeTensor edges{at::Tensor(), x.options()};
  translate_errors([&] {
    cpu::knn_ragged(cpu_context(), ragged_view_of(x), ragged_view_of(y), offsets_of(px),
                    offsets_of(py), KnnRaggedParams{k, cosine}, edges.allocator());
  });
  return edges.out;
}

at::Tensor nearest_cpu(const at::Tensor& x_in, const at::Tensor& y_in, const at::Tensor& ptr_x_in,
                       const at::Tensor& ptr_y_in) {
  check_same_device(x_in, "x", y_in, "y");
  const at::Tensor x = as_flat_points(x_in, "x"), y = as_flat_points(y_in, "y");
  const at::Tensor px = as_offsets(ptr_x_in, x_in, "ptr_x"), py = as_offsets(ptr_y_in, x_in, "ptr_y");
  at::Tensor out = at::empty({x.size(0)}, x.options().dtype(at::kLong));
  translate_errors([&] {
    cpu::nearest(cpu_context(), ragged_view_of(x), ragged_view_of(y), offsets_of(px), offsets_of(py),
                 out.data_ptr<int64_t>());
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(pcops, m) {
  m.def("knn_ragged(Tensor x, Tensor y, Tensor ptr_x, Tensor ptr_y, int k, bool cosine=False) -> Tensor");
  m.def("nearest(Tensor x, Tensor y, Tensor ptr_x, Tensor ptr_y) -> Tensor");
}

TORCH_LIBRARY_IMPL(pcops, CPU, m) {
  m.impl("knn_ragged", &knn_ragged_cpu);
  m.impl("nearest", &nearest_cpu);
}

}  // namespace pcops::torch_binding
