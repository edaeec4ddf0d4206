// torch.classes.pcops.SpatialIndexCpu / SpatialIndexCuda: the CPU and CUDA SpatialIndex
// (pcops/spatial_index.hpp) held by Python's pcops.SpatialIndex. The index keeps its own copy of the points (sorted), so the
// build's tensors may change or go afterwards.
#include "pcops/spatial_index.hpp"

#include <torch/custom_class.h>

#include "common.hpp"

namespace pcops::torch_binding {
namespace {

struct SpatialIndexCpu : torch::CustomClassHolder {
  cpu::SpatialIndex index;

  void build(const at::Tensor& points_in, const std::optional<at::Tensor>& lengths_in, int64_t leaf_size,
             bool grid) {
    TORCH_CHECK_VALUE(points_in.device().is_cpu(), "points: the CPU index needs CPU tensors, got ",
                      points_in.device());
    const at::Tensor points = as_points(points_in, "points");
    TORCH_CHECK_VALUE(points.size(2) == 3, "points: expected 3 coordinates per point, got ", points.size(2));
    const auto lengths = as_lengths(lengths_in, points_in, "lengths");
    translate_errors([&] {
      index.build(cpu_context(), view_of(points), lengths_of(lengths), SpatialIndexParams{leaf_size, grid});
    });
  }

  // The checked query, its lengths and the [B, M, width] outputs (float, int64) of a query.
  struct Query {
    at::Tensor points;
    std::optional<at::Tensor> lengths;
    at::Tensor values, idx;
  };
  static Query prepare(const at::Tensor& query_in, const std::optional<at::Tensor>& lengths_in, int64_t width,
                       const char* width_name) {
    TORCH_CHECK_VALUE(query_in.device().is_cpu(), "query: the CPU index needs CPU tensors, got ",
                      query_in.device());
    Query q{as_points(query_in, "query"), as_lengths(lengths_in, query_in, "query_lengths"), {}, {}};
    TORCH_CHECK_VALUE(width >= 0, width_name, ": expected >= 0, got ", width);
    check_output_size(width_name, width, q.points.size(0), q.points.size(1), width);
    q.values = at::empty({q.points.size(0), q.points.size(1), width}, q.points.options());
    q.idx = at::empty({q.points.size(0), q.points.size(1), width}, q.points.options().dtype(at::kLong));
    return q;
  }

  std::tuple<at::Tensor, at::Tensor> knn(const at::Tensor& query_in, int64_t k,
                                         const std::optional<at::Tensor>& query_lengths_in) const {
    Query q = prepare(query_in, query_lengths_in, k, "k");
    translate_errors([&] {
      index.knn(cpu_context(), view_of(q.points), lengths_of(q.lengths), k, q.values.data_ptr<float>(),
                q.idx.data_ptr<int64_t>());
    });
    return {q.values, q.idx};
  }

  std::tuple<at::Tensor, at::Tensor> ball_query(const at::Tensor& query_in, double radius, int64_t K,
                                                const std::optional<at::Tensor>& query_lengths_in) const {
    Query q = prepare(query_in, query_lengths_in, K, "K");
    translate_errors([&] {
      index.ball_query(cpu_context(), view_of(q.points), lengths_of(q.lengths), static_cast<float>(radius), K,
                       q.values.data_ptr<float>(), q.idx.data_ptr<int64_t>());
    });
    return {q.values, q.idx};
  }

  // The ball query with the threshold given (radius search: fl32(r * r) in double).
  std::tuple<at::Tensor, at::Tensor> ball_query_below(const at::Tensor& query_in, double R2, int64_t K,
                                                      const std::optional<at::Tensor>& query_lengths_in) const {
    Query q = prepare(query_in, query_lengths_in, K, "K");
    translate_errors([&] {
      index.ball_query_below(cpu_context(), view_of(q.points), lengths_of(q.lengths), static_cast<float>(R2), K,
                             q.values.data_ptr<float>(), q.idx.data_ptr<int64_t>());
    });
    return {q.values, q.idx};
  }

  // (batch, count, has_lengths, leaf_size, memory_bytes)
  std::tuple<int64_t, int64_t, bool, int64_t, int64_t> info() const {
    return {index.batch(), index.count(), index.has_lengths(), index.leaf_size(), index.memory_bytes()};
  }
  std::vector<int64_t> cloud_sizes() const {
    std::vector<int64_t> n(static_cast<size_t>(index.batch()));
    for (int64_t b = 0; b < index.batch(); ++b) n[static_cast<size_t>(b)] = index.cloud_size(b);
    return n;
  }
};

#if PCOPS_TORCH_CUDA
// torch.classes.pcops.SpatialIndexCuda: the CUDA index. Its device memory comes from torch's
// caching allocator on the build's current stream; queries run on the current stream.
struct SpatialIndexCuda : torch::CustomClassHolder {
  cuda::SpatialIndex index;
  int64_t device = -1;

  void build(const at::Tensor& points_in, const std::optional<at::Tensor>& lengths_in, int64_t leaf_size,
             bool grid) {
    TORCH_CHECK_VALUE(points_in.device().is_cuda(), "points: the CUDA index needs CUDA tensors, got ",
                      points_in.device());
    const c10::cuda::CUDAGuard guard(points_in.device());
    const at::Tensor points = as_points(points_in, "points");
    TORCH_CHECK_VALUE(points.size(2) == 3, "points: expected 3 coordinates per point, got ", points.size(2));
    const auto lengths = as_lengths(lengths_in, points_in, "lengths");
    translate_errors([&] {
      index.build(cuda_context(points), view_of(points), lengths_of(lengths), SpatialIndexParams{leaf_size, grid});
    });
    device = points_in.device().index();
  }

  SpatialIndexCpu::Query prepare(const at::Tensor& query_in, const std::optional<at::Tensor>& lengths_in,
                                 int64_t width, const char* width_name) const {
    TORCH_CHECK_VALUE(query_in.device().is_cuda() && query_in.device().index() == device,
                      "query: expected a tensor on cuda:", device, " (as the index), got ", query_in.device());
    SpatialIndexCpu::Query q{as_points(query_in, "query"), as_lengths(lengths_in, query_in, "query_lengths"), {},
                             {}};
    TORCH_CHECK_VALUE(width >= 0, width_name, ": expected >= 0, got ", width);
    check_output_size(width_name, width, q.points.size(0), q.points.size(1), width);
    q.values = at::empty({q.points.size(0), q.points.size(1), width}, q.points.options());
    q.idx = at::empty({q.points.size(0), q.points.size(1), width}, q.points.options().dtype(at::kLong));
    return q;
  }

  std::tuple<at::Tensor, at::Tensor> knn(const at::Tensor& query_in, int64_t k,
                                         const std::optional<at::Tensor>& query_lengths_in) const {
    const c10::cuda::CUDAGuard guard(query_in.device());
    SpatialIndexCpu::Query q = prepare(query_in, query_lengths_in, k, "k");
    translate_errors([&] {
      index.knn(cuda_context(q.points), view_of(q.points), lengths_of(q.lengths), k, q.values.data_ptr<float>(),
                q.idx.data_ptr<int64_t>());
    });
    return {q.values, q.idx};
  }

  std::tuple<at::Tensor, at::Tensor> ball_query(const at::Tensor& query_in, double radius, int64_t K,
                                                const std::optional<at::Tensor>& query_lengths_in) const {
    const c10::cuda::CUDAGuard guard(query_in.device());
    SpatialIndexCpu::Query q = prepare(query_in, query_lengths_in, K, "K");
    translate_errors([&] {
      index.ball_query(cuda_context(q.points), view_of(q.points), lengths_of(q.lengths), static_cast<float>(radius),
                       K, q.values.data_ptr<float>(), q.idx.data_ptr<int64_t>());
    });
    return {q.values, q.idx};
  }

  std::tuple<at::Tensor, at::Tensor> ball_query_below(const at::Tensor& query_in, double R2, int64_t K,
                                                      const std::optional<at::Tensor>& query_lengths_in) const {
    const c10::cuda::CUDAGuard guard(query_in.device());
    SpatialIndexCpu::Query q = prepare(query_in, query_lengths_in, K, "K");
    translate_errors([&] {
      index.ball_query_below(cuda_context(q.points), view_of(q.points), lengths_of(q.lengths),
                             static_cast<float>(R2), K, q.values.data_ptr<float>(), q.idx.data_ptr<int64_t>());
    });
    return {q.values, q.idx};
  }

  std::tuple<int64_t, int64_t, bool, int64_t, int64_t> info() const {
    return {index.batch(), index.count(), index.has_lengths(), index.leaf_size(), index.memory_bytes()};
  }
  std::vector<int64_t> cloud_sizes() const {
    std::vector<int64_t> n(static_cast<size_t>(index.batch()));
    for (int64_t b = 0; b < index.batch(); ++b) n[static_cast<size_t>(b)] = index.cloud_size(b);
    return n;
  }
};
#endif

}  // namespace

TORCH_LIBRARY_FRAGMENT(pcops, m) {
  m.class_<SpatialIndexCpu>("SpatialIndexCpu")
      .def(torch::init<>())
      .def("build", &SpatialIndexCpu::build)
      .def("knn", &SpatialIndexCpu::knn)
      .def("ball_query", &SpatialIndexCpu::ball_query)
      .def("ball_query_below", &SpatialIndexCpu::ball_query_below)
      .def("info", &SpatialIndexCpu::info)
      .def("cloud_sizes", &SpatialIndexCpu::cloud_sizes);
#if PCOPS_TORCH_CUDA
  m.class_<SpatialIndexCuda>("SpatialIndexCuda")
      .def(torch::init<>())
      .def("build", &SpatialIndexCuda::build)
      .def("knn", &SpatialIndexCuda::knn)
      .def("ball_query", &SpatialIndexCuda::ball_query)
      .def("ball_query_below", &SpatialIndexCuda::ball_query_below)
      .def("info", &SpatialIndexCuda::info)
      .def("cloud_sizes", &SpatialIndexCuda::cloud_sizes);
#endif
}

}  // namespace pcops::torch_binding
