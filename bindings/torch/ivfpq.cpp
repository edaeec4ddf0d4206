// torch.classes.pcops.IVFPQIndex: the IVF-PQ index (contract: include/pcops/ivfpq.hpp) as a
// TorchScript custom class over CPU tensors. The Python class pcops.IVFPQIndex wraps it and
// converts NumPy arrays.
#include <torch/custom_class.h>

#include <memory>
#include <string>

#include "common.hpp"
#include "pcops/ivfpq.hpp"

namespace pcops::torch_binding {
namespace {

IvfPqMetric parse_metric(const std::string& m) {
  if (m == "l2" || m == "L2") return IvfPqMetric::L2;
  if (m == "ip" || m == "inner_product") return IvfPqMetric::InnerProduct;
  TORCH_CHECK_VALUE(false, "metric: expected 'l2' or 'ip', got '", m, "'");
}

// A [n, dim] float32 contiguous CPU tensor (float16 / bfloat16 converted exactly).
at::Tensor as_vectors(const at::Tensor& t, const char* name, int64_t dim) {
  TORCH_CHECK_VALUE(t.device().is_cpu(), name, ": expected a CPU tensor (the IVF-PQ index runs on the CPU), got ",
                    t.device());
  TORCH_CHECK_VALUE(t.dim() == 2 && t.size(1) == dim, name, ": expected shape [n, ", dim, "], got ", t.sizes());
  return as_values(t, name, 2, "[n, dim]");
}

at::Tensor as_ids(const at::Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(t.device().is_cpu(), name, ": expected a CPU tensor, got ", t.device());
  TORCH_CHECK_TYPE(t.scalar_type() == at::kLong || t.scalar_type() == at::kInt, name,
                   ": expected an int64 tensor, got ", t.scalar_type());
  TORCH_CHECK_VALUE(t.dim() == 1, name, ": expected a 1-D tensor, got shape ", t.sizes());
  return t.to(at::kLong).contiguous();
}

struct IVFPQIndexHolder : torch::CustomClassHolder {
  std::unique_ptr<IvfPqIndex> index;

  IVFPQIndexHolder(int64_t dim, int64_t nlist, int64_t M, int64_t nbits, std::string metric, bool by_residual) {
    IvfPqParams p{dim, nlist, M, nbits, parse_metric(metric), by_residual};
    translate_errors([&] { index = std::make_unique<IvfPqIndex>(p); });
  }

  const IvfPqParams& p() const { return index->params(); }

  void train(const at::Tensor& x_in, int64_t seed, int64_t niter, int64_t max_points_per_centroid) {
    const at::Tensor x = as_vectors(x_in, "x", p().dim);
    CpuContext ctx = cpu_context();
    ctx.seed = static_cast<uint64_t>(seed);
    IvfPqTrainParams tp{niter, max_points_per_centroid};
    translate_errors([&] { index->train(ctx, x.data_ptr<float>(), x.size(0), tp); });
  }

  void set_quantizers(const at::Tensor& c_in, const at::Tensor& cb_in) {
    const at::Tensor c = as_vectors(c_in, "centroids", p().dim);
    TORCH_CHECK_VALUE(c.size(0) == p().nlist, "centroids: expected shape [", p().nlist, ", ", p().dim, "], got ",
                      c_in.sizes());
    const int64_t dsub = index->dsub();
    TORCH_CHECK_VALUE(cb_in.device().is_cpu(), "codebooks: expected a CPU tensor, got ", cb_in.device());
    TORCH_CHECK_VALUE(cb_in.dim() == 3 && cb_in.size(0) == p().M && cb_in.size(1) == IvfPqIndex::kCodewords &&
                          cb_in.size(2) == dsub,
                      "codebooks: expected shape [", p().M, ", 256, ", dsub, "], got ", cb_in.sizes());
    const at::Tensor cb = as_values(cb_in, "codebooks", 3, "[M, 256, dsub]");
    translate_errors([&] { index->set_quantizers(c.data_ptr<float>(), cb.data_ptr<float>()); });
  }

  at::Tensor centroids() const {
    TORCH_CHECK_VALUE(index->is_trained(), "centroids: the index is not trained");
    return at::tensor(index->centroids(), at::kFloat).reshape({p().nlist, p().dim});
  }
  at::Tensor codebooks() const {
    TORCH_CHECK_VALUE(index->is_trained(), "codebooks: the index is not trained");
    return at::tensor(index->codebooks(), at::kFloat).reshape({p().M, IvfPqIndex::kCodewords, index->dsub()});
  }

  std::tuple<at::Tensor, at::Tensor> encode(const at::Tensor& x_in) const {
    const at::Tensor x = as_vectors(x_in, "x", p().dim);
    at::Tensor lists = at::empty({x.size(0)}, at::kLong);
    at::Tensor codes = at::empty({x.size(0), p().M}, at::kByte);
    translate_errors([&] {
      index->encode(cpu_context(), x.data_ptr<float>(), x.size(0), lists.data_ptr<int64_t>(), codes.data_ptr<uint8_t>());
    });
    return {lists, codes};
  }

  void add(const at::Tensor& x_in, const std::optional<at::Tensor>& ids_in) {
    const at::Tensor x = as_vectors(x_in, "x", p().dim);
    at::Tensor ids;
    if (ids_in.has_value()) {
      ids = as_ids(*ids_in, "ids");
      TORCH_CHECK_VALUE(ids.size(0) == x.size(0), "ids: expected ", x.size(0), " ids (one per vector), got ",
                        ids.size(0));
    }
    translate_errors([&] {
      index->add(cpu_context(), x.data_ptr<float>(), x.size(0), ids.defined() ? ids.data_ptr<int64_t>() : nullptr);
    });
  }

  std::tuple<at::Tensor, at::Tensor> search(const at::Tensor& q_in, int64_t k, int64_t nprobe,
                                            bool precomputed_table) const {
    const at::Tensor q = as_vectors(q_in, "queries", p().dim);
    TORCH_CHECK_VALUE(k >= 0, "k: expected >= 0, got ", k);
    check_output_size("k", k, q.size(0), k);
    at::Tensor dist = at::empty({q.size(0), k}, at::kFloat);
    at::Tensor labels = at::empty({q.size(0), k}, at::kLong);
    translate_errors([&] {
      index->search(cpu_context(), q.data_ptr<float>(), q.size(0), k, nprobe, dist.data_ptr<float>(),
                    labels.data_ptr<int64_t>(), precomputed_table);
    });
    return {dist, labels};
  }

  int64_t remove_ids(const at::Tensor& ids_in) {
    const at::Tensor ids = as_ids(ids_in, "ids");
    return translate_errors([&] { return index->remove_ids(ids.data_ptr<int64_t>(), ids.size(0)); });
  }

  void reset() { index->reset(); }
  int64_t ntotal() const { return index->ntotal(); }
  bool is_trained() const { return index->is_trained(); }
  std::tuple<int64_t, int64_t, int64_t, int64_t, std::string, bool> params() const {
    return {p().dim, p().nlist, p().M, p().nbits, p().metric == IvfPqMetric::L2 ? "l2" : "ip", p().by_residual};
  }
  at::Tensor list_ids(int64_t list) const {
    const auto& v = translate_errors([&]() -> const std::vector<int64_t>& { return index->list_ids(list); });
    return at::tensor(v, at::kLong);
  }
  at::Tensor list_codes(int64_t list) const {
    const auto& v = translate_errors([&]() -> const std::vector<uint8_t>& { return index->list_codes(list); });
    at::Tensor t = at::empty({static_cast<int64_t>(v.size()) / p().M, p().M}, at::kByte);
    if (!v.empty()) std::memcpy(t.data_ptr<uint8_t>(), v.data(), v.size());
    return t;
  }
  void save(const std::string& path) const {
    translate_errors([&] { index->save(path); });
  }
  void load(const std::string& path) {
    translate_errors([&] { index = std::make_unique<IvfPqIndex>(IvfPqIndex::load(path)); });
  }
};

}  // namespace

TORCH_LIBRARY_FRAGMENT(pcops, m) {
  m.class_<IVFPQIndexHolder>("IVFPQIndex")
      .def(torch::init<int64_t, int64_t, int64_t, int64_t, std::string, bool>())
      .def("train", &IVFPQIndexHolder::train)
      .def("set_quantizers", &IVFPQIndexHolder::set_quantizers)
      .def("centroids", &IVFPQIndexHolder::centroids)
      .def("codebooks", &IVFPQIndexHolder::codebooks)
      .def("encode", &IVFPQIndexHolder::encode)
      .def("add", &IVFPQIndexHolder::add)
      .def("search", &IVFPQIndexHolder::search)
      .def("remove_ids", &IVFPQIndexHolder::remove_ids)
      .def("reset", &IVFPQIndexHolder::reset)
      .def("ntotal", &IVFPQIndexHolder::ntotal)
      .def("is_trained", &IVFPQIndexHolder::is_trained)
      .def("params", &IVFPQIndexHolder::params)
      .def("list_ids", &IVFPQIndexHolder::list_ids)
      .def("list_codes", &IVFPQIndexHolder::list_codes)
      .def("save", &IVFPQIndexHolder::save)
      .def("load", &IVFPQIndexHolder::load);
}

}  // namespace pcops::torch_binding
