// torch.classes.pcops.SpatialIndexCpu / SpatialIndexCuda: the CPU and CUDA SpatialIndex
// (pcops/spatial_index.hpp) held by Python's pcops.SpatialIndex. The index keeps its own copy of
// the points (sorted), so the build's tensors may change or go afterwards. The CUDA index's
// device memory comes from torch's caching allocator on the build's current stream; its queries
// run on the current stream.
#include "pcops/spatial_index.hpp"

#include <torch/custom_class.h>

#include "common.hpp"

namespace pcops::torch_binding {
namespace {

// One holder for both devices: Index is cpu::SpatialIndex or cuda::SpatialIndex.
template <class Index, bool kCuda>
struct SpatialIndexHolder : torch::CustomClassHolder {
  Index index;
  int64_t device = -1;  // CUDA: the build's device index

  static auto context(const at::Tensor& t) {
#if PCOPS_TORCH_CUDA
    if constexpr (kCuda) return cuda_context(t);
    else return cpu_context();
#else
    return cpu_context();
#endif
  }
  // A device guard on CUDA (nothing on the CPU) for the scope of a call.
  struct Guard {
#if PCOPS_TORCH_CUDA
    std::optional<c10::cuda::CUDAGuard> g;
    explicit Guard(const at::Tensor& t) {
      if constexpr (kCuda) g.emplace(t.device());
    }
#else
    explicit Guard(const at::Tensor&) {}
#endif
  };
  static void check_device(const at::Tensor& t, const char* name) {
    TORCH_CHECK_VALUE(kCuda ? t.device().is_cuda() : t.device().is_cpu(), name, ": the ", kCuda ? "CUDA" : "CPU",
                      " index needs ", kCuda ? "CUDA" : "CPU", " tensors, got ", t.device());
  }

  void build(const at::Tensor& points_in, const std::optional<at::Tensor>& lengths_in, int64_t leaf_size,
             bool grid) {
    check_device(points_in, "points");
    const Guard guard(points_in);
    const at::Tensor points = as_points(points_in, "points");
    TORCH_CHECK_VALUE(points.size(2) == 3, "points: expected 3 coordinates per point, got ", points.size(2));
    const auto lengths = as_lengths(lengths_in, points_in, "lengths");
    translate_errors([&] {
      index.build(context(points), view_of(points), lengths_of(lengths), SpatialIndexParams{leaf_size, grid});
    });
    device = points_in.device().index();
  }

  // The checked query, its lengths and the [B, M, width] outputs (float, int64) of a query.
  struct Query {
    at::Tensor points;
    std::optional<at::Tensor> lengths;
    at::Tensor values, idx;
  };
  Query prepare(const at::Tensor& query_in, const std::optional<at::Tensor>& lengths_in, int64_t width,
                const char* width_name) const {
    check_device(query_in, "query");
    if constexpr (kCuda)
      TORCH_CHECK_VALUE(query_in.device().index() == device, "query: expected a tensor on cuda:", device,
                        " (as the index), got ", query_in.device());
    Query q{as_points(query_in, "query"), as_lengths(lengths_in, query_in, "query_lengths"), {}, {}};
    TORCH_CHECK_VALUE(width >= 0, width_name, ": expected >= 0, got ", width);
    check_output_size(width_name, width, q.points.size(0), q.points.size(1), width);
    q.values = at::empty({q.points.size(0), q.points.size(1), width}, q.points.options());
    q.idx = at::empty({q.points.size(0), q.points.size(1), width}, q.points.options().dtype(at::kLong));
    return q;
  }

  // run(ctx, query view, query lengths, values, idx) on a prepared query.
  template <class Run>
  std::tuple<at::Tensor, at::Tensor> query(const at::Tensor& query_in, const std::optional<at::Tensor>& lengths_in,
                                           int64_t width, const char* width_name, Run run) const {
    const Guard guard(query_in);
    Query q = prepare(query_in, lengths_in, width, width_name);
    translate_errors([&] {
      run(context(q.points), view_of(q.points), lengths_of(q.lengths), q.values.template data_ptr<float>(),
          q.idx.template data_ptr<int64_t>());
    });
    return {q.values, q.idx};
  }

  std::tuple<at::Tensor, at::Tensor> knn(const at::Tensor& q, int64_t k, const std::optional<at::Tensor>& ql) const {
    return query(q, ql, k, "k", [&](const auto& ctx, auto view, auto lengths, float* d, int64_t* i) {
      index.knn(ctx, view, lengths, k, d, i);
    });
  }
  std::tuple<at::Tensor, at::Tensor> ball_query(const at::Tensor& q, double radius, int64_t K,
                                                const std::optional<at::Tensor>& ql) const {
    return query(q, ql, K, "K", [&](const auto& ctx, auto view, auto lengths, float* d, int64_t* i) {
      index.ball_query(ctx, view, lengths, static_cast<float>(radius), K, d, i);
    });
  }
  // The ball query with the threshold given (radius search: fl32(r * r) in double).
  std::tuple<at::Tensor, at::Tensor> ball_query_below(const at::Tensor& q, double R2, int64_t K,
                                                      const std::optional<at::Tensor>& ql) const {
    return query(q, ql, K, "K", [&](const auto& ctx, auto view, auto lengths, float* d, int64_t* i) {
      index.ball_query_below(ctx, view, lengths, static_cast<float>(R2), K, d, i);
    });
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

template <class Holder>
void register_holder(torch::Library& m, const char* name) {
  m.class_<Holder>(name)
      .def(torch::init<>())
      .def("build", &Holder::build)
      .def("knn", &Holder::knn)
      .def("ball_query", &Holder::ball_query)
      .def("ball_query_below", &Holder::ball_query_below)
      .def("info", &Holder::info)
      .def("cloud_sizes", &Holder::cloud_sizes);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(pcops, m) {
  register_holder<SpatialIndexHolder<cpu::SpatialIndex, false>>(m, "SpatialIndexCpu");
#if PCOPS_TORCH_CUDA
  register_holder<SpatialIndexHolder<cuda::SpatialIndex, true>>(m, "SpatialIndexCuda");
#endif
}

}  // namespace pcops::torch_binding
