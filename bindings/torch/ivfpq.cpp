// torch.classes.pcops.IVFPQIndex: the IVF-PQ index (contract: include/pcops/ivfpq.hpp) as a
// TorchScript custom class over CPU tensors (training also from CUDA tensors: assignments on the
// GPU), torch.ops.pcops._ivfpq_search, the CUDA search over a device copy of its lists, and
// torch.ops.pcops._ivfpq_encode, the CUDA encoding. The Python class pcops.IVFPQIndex wraps both and converts
// NumPy arrays.
#include <torch/custom_class.h>

#include <cstring>
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
    CpuContext ctx = cpu_context();
    ctx.seed = static_cast<uint64_t>(seed);
    IvfPqTrainParams tp{niter, max_points_per_centroid};
#if PCOPS_TORCH_CUDA
    if (x_in.is_cuda()) {  // the assignments on x's GPU, the rest as on the CPU: the same quantizers
      TORCH_CHECK_VALUE(x_in.dim() == 2 && x_in.size(1) == p().dim, "x: expected shape [n, ", p().dim, "], got ",
                        x_in.sizes());
      const at::Tensor x = as_values(x_in, "x", 2, "[n, dim]").cpu();
      const c10::cuda::CUDAGuard guard(x_in.device());
      const at::TensorOptions dev = x_in.options().dtype(at::kFloat);
      const IvfPqIndex::AssignFn assign = [&](const float* data, int64_t n, int64_t d, const float* cent, int64_t k,
                                              bool ip, int64_t* out) {
        // Uploaded at every call: training reuses one host buffer for different rows.
        const at::Tensor rows_dev = at::from_blob(const_cast<float*>(data), {n, d}, at::kFloat).to(dev.device());
        const at::Tensor cent_dev = at::from_blob(const_cast<float*>(cent), {k, d}, at::kFloat).to(dev.device());
        at::Tensor out_dev = at::empty({n}, dev.dtype(at::kLong));
        cuda::ivfpq_assign(cuda_context(rows_dev), rows_dev.data_ptr<float>(), n, d, cent_dev.data_ptr<float>(), k,
                           ip, out_dev.data_ptr<int64_t>());
        const at::Tensor host = out_dev.cpu();
        std::memcpy(out, host.data_ptr<int64_t>(), static_cast<size_t>(n) * sizeof(int64_t));
      };
      translate_errors([&] { index->train(ctx, x.data_ptr<float>(), x.size(0), tp, assign); });
      return;
    }
#endif
    const at::Tensor x = as_vectors(x_in, "x", p().dim);
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

  // Vectors encoded elsewhere (the CUDA encoding): lists [n] int64, codes [n, M] uint8, CPU.
  void add_encoded(const at::Tensor& lists_in, const at::Tensor& codes_in, const std::optional<at::Tensor>& ids_in) {
    const at::Tensor lists = as_ids(lists_in, "lists");
    const int64_t n = lists.size(0);
    TORCH_CHECK_VALUE(codes_in.device().is_cpu() && codes_in.scalar_type() == at::kByte && codes_in.dim() == 2 &&
                          codes_in.size(0) == n && codes_in.size(1) == p().M,
                      "codes: expected a uint8 CPU tensor of shape [", n, ", ", p().M, "], got ", codes_in.sizes(),
                      " ", codes_in.scalar_type(), " on ", codes_in.device());
    const at::Tensor codes = codes_in.contiguous();
    at::Tensor ids;
    if (ids_in.has_value()) {
      ids = as_ids(*ids_in, "ids");
      TORCH_CHECK_VALUE(ids.size(0) == n, "ids: expected ", n, " ids (one per vector), got ", ids.size(0));
    }
    translate_errors([&] {
      index->add_encoded(lists.data_ptr<int64_t>(), codes.data_ptr<uint8_t>(), n,
                         ids.defined() ? ids.data_ptr<int64_t>() : nullptr);
    });
  }

  std::tuple<at::Tensor, at::Tensor> search(const at::Tensor& q_in, int64_t k, int64_t nprobe,
                                            bool precomputed_table, bool half_tables) const {
    const at::Tensor q = as_vectors(q_in, "queries", p().dim);
    TORCH_CHECK_VALUE(k >= 0, "k: expected >= 0, got ", k);
    check_output_size("k", k, q.size(0), k);
    at::Tensor dist = at::empty({q.size(0), k}, at::kFloat);
    at::Tensor labels = at::empty({q.size(0), k}, at::kLong);
    translate_errors([&] {
      index->search(cpu_context(), q.data_ptr<float>(), q.size(0), k, nprobe, dist.data_ptr<float>(),
                    labels.data_ptr<int64_t>(), precomputed_table, half_tables);
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
  // The lists in CSR form, as the CUDA search takes them: offsets [nlist + 1], ids [ntotal],
  // codes [ntotal, M] (lists concatenated in list order, each in its own order).
  std::tuple<at::Tensor, at::Tensor, at::Tensor> lists_csr() const {
    const int64_t nlist = p().nlist, M = p().M, total = index->ntotal();
    at::Tensor offsets = at::empty({nlist + 1}, at::kLong);
    at::Tensor ids = at::empty({total}, at::kLong);
    at::Tensor codes = at::empty({total, M}, at::kByte);
    int64_t* o = offsets.data_ptr<int64_t>();
    int64_t at_row = 0;
    for (int64_t l = 0; l < nlist; ++l) {
      o[l] = at_row;
      const std::vector<int64_t>& li = index->list_ids(l);
      const std::vector<uint8_t>& lc = index->list_codes(l);
      if (!li.empty()) {
        std::memcpy(ids.data_ptr<int64_t>() + at_row, li.data(), li.size() * sizeof(int64_t));
        std::memcpy(codes.data_ptr<uint8_t>() + at_row * M, lc.data(), lc.size());
      }
      at_row += static_cast<int64_t>(li.size());
    }
    o[nlist] = at_row;
    return {offsets, ids, codes};
  }
  void save(const std::string& path) const {
    translate_errors([&] { index->save(path); });
  }
  void load(const std::string& path) {
    translate_errors([&] { index = std::make_unique<IvfPqIndex>(IvfPqIndex::load(path)); });
  }
};

#if PCOPS_TORCH_CUDA
// The CUDA search (cuda::ivfpq_search, bitwise equal to the CPU search) over a device copy of an
// index: centroids [nlist, dim] float32, codebooks [M, 256, dsub] float32, list_offsets
// [nlist + 1] int64, ids [ntotal] int64, codes [ntotal, M] uint8 on the queries' device, and
// list_sizes [nlist] int64 on the CPU.
std::tuple<at::Tensor, at::Tensor> ivfpq_search_cuda(const at::Tensor& centroids, const at::Tensor& codebooks,
                                                     const at::Tensor& list_offsets, const at::Tensor& ids,
                                                     const at::Tensor& codes, const at::Tensor& list_sizes,
                                                     int64_t dim, int64_t nlist, int64_t M, const std::string& metric,
                                                     bool by_residual, const at::Tensor& queries_in, int64_t k,
                                                     int64_t nprobe, bool half_tables) {
  const c10::cuda::CUDAGuard guard(queries_in.device());
  IvfPqParams p{dim, nlist, M, 8, parse_metric(metric), by_residual};
  translate_errors([&] { core::validate_ivfpq_params(p); });
  TORCH_CHECK_VALUE(queries_in.dim() == 2 && queries_in.size(1) == dim, "queries: expected shape [n, ", dim,
                    "], got ", queries_in.sizes());
  TORCH_CHECK_VALUE(k >= 0, "k: expected >= 0, got ", k);
  TORCH_CHECK_VALUE(nprobe >= 1 && nprobe <= nlist, "nprobe: expected a value in [1, nlist = ", nlist, "], got ",
                    nprobe);
  const auto dev = queries_in.device();
  const auto check = [&](const at::Tensor& t, const char* name, at::ScalarType st, at::IntArrayRef shape) {
    TORCH_CHECK_VALUE(t.device() == dev, name, ": expected device ", dev, ", got ", t.device());
    TORCH_CHECK_TYPE(t.scalar_type() == st, name, ": expected ", st, ", got ", t.scalar_type());
    TORCH_CHECK_VALUE(t.sizes() == shape && t.is_contiguous(), name, ": expected a contiguous tensor of shape ",
                      shape, ", got ", t.sizes());
  };
  const int64_t total = ids.numel();
  check(centroids, "centroids", at::kFloat, {nlist, dim});
  check(codebooks, "codebooks", at::kFloat, {M, 256, dim / M});
  check(list_offsets, "list_offsets", at::kLong, {nlist + 1});
  check(ids, "ids", at::kLong, {total});
  check(codes, "codes", at::kByte, {total, M});
  TORCH_CHECK_VALUE(list_sizes.device().is_cpu() && list_sizes.scalar_type() == at::kLong &&
                        list_sizes.sizes() == at::IntArrayRef{nlist} && list_sizes.is_contiguous(),
                    "list_sizes: expected a contiguous int64 CPU tensor of shape [", nlist, "]");
  const at::Tensor q = as_values(queries_in, "queries", 2, "[n, dim]");
  TORCH_CHECK_VALUE(at::isfinite(q).all().item<bool>(), "queries: expected finite values");
  const int64_t nq = q.size(0);
  at::Tensor dist = at::empty({nq, k}, q.options().dtype(at::kFloat));
  at::Tensor labels = at::empty({nq, k}, q.options().dtype(at::kLong));
  IvfPqDeviceView view;
  view.params = p;
  view.centroids = centroids.data_ptr<float>();
  view.codebooks = codebooks.data_ptr<float>();
  view.list_offsets = list_offsets.data_ptr<int64_t>();
  view.ids = ids.data_ptr<int64_t>();
  view.codes = codes.data_ptr<uint8_t>();
  view.list_sizes_host = list_sizes.data_ptr<int64_t>();
  translate_errors([&] {
    cuda::ivfpq_search(cuda_context(q), view, q.data_ptr<float>(), nq, k, nprobe, dist.data_ptr<float>(),
                       labels.data_ptr<int64_t>(), half_tables);
  });
  return {dist, labels};
}

// The CUDA encoding (cuda::ivfpq_encode, bitwise equal to IVFPQIndex.encode): (lists [n] int64,
// codes [n, M] uint8) of x [n, dim] under centroids [nlist, dim] and codebooks [M, 256, dsub],
// all on x's device.
std::tuple<at::Tensor, at::Tensor> ivfpq_encode_cuda(const at::Tensor& centroids, const at::Tensor& codebooks,
                                                     int64_t dim, int64_t nlist, int64_t M, const std::string& metric,
                                                     bool by_residual, const at::Tensor& x_in) {
  const c10::cuda::CUDAGuard guard(x_in.device());
  IvfPqParams p{dim, nlist, M, 8, parse_metric(metric), by_residual};
  translate_errors([&] { core::validate_ivfpq_params(p); });
  TORCH_CHECK_VALUE(x_in.dim() == 2 && x_in.size(1) == dim, "x: expected shape [n, ", dim, "], got ", x_in.sizes());
  const auto dev = x_in.device();
  for (const auto& [t, name, shape] : {std::tuple{&centroids, "centroids", std::vector<int64_t>{nlist, dim}},
                                       std::tuple{&codebooks, "codebooks", std::vector<int64_t>{M, 256, dim / M}}}) {
    TORCH_CHECK_VALUE(t->device() == dev, name, ": expected device ", dev, ", got ", t->device());
    TORCH_CHECK_TYPE(t->scalar_type() == at::kFloat, name, ": expected float32, got ", t->scalar_type());
    TORCH_CHECK_VALUE(t->sizes() == at::IntArrayRef(shape) && t->is_contiguous(), name,
                      ": expected a contiguous tensor of shape ", at::IntArrayRef(shape), ", got ", t->sizes());
  }
  const at::Tensor x = as_values(x_in, "x", 2, "[n, dim]");
  TORCH_CHECK_VALUE(at::isfinite(x).all().item<bool>(), "x: expected finite values");
  const int64_t n = x.size(0);
  at::Tensor lists = at::empty({n}, x.options().dtype(at::kLong));
  at::Tensor codes = at::empty({n, M}, x.options().dtype(at::kByte));
  translate_errors([&] {
    cuda::ivfpq_encode(cuda_context(x), p, centroids.data_ptr<float>(), codebooks.data_ptr<float>(),
                       x.data_ptr<float>(), n, lists.data_ptr<int64_t>(), codes.data_ptr<uint8_t>());
  });
  return {lists, codes};
}
#endif

}  // namespace

TORCH_LIBRARY_FRAGMENT(pcops, m) {
  m.def(
      "_ivfpq_search(Tensor centroids, Tensor codebooks, Tensor list_offsets, Tensor ids, Tensor codes, "
      "Tensor list_sizes, int dim, int nlist, int M, str metric, bool by_residual, Tensor queries, int k, "
      "int nprobe, bool half_tables=False) -> (Tensor, Tensor)");
  m.def(
      "_ivfpq_encode(Tensor centroids, Tensor codebooks, int dim, int nlist, int M, str metric, bool by_residual, "
      "Tensor x) -> (Tensor, Tensor)");
  m.class_<IVFPQIndexHolder>("IVFPQIndex")
      .def(torch::init<int64_t, int64_t, int64_t, int64_t, std::string, bool>())
      .def("train", &IVFPQIndexHolder::train)
      .def("set_quantizers", &IVFPQIndexHolder::set_quantizers)
      .def("centroids", &IVFPQIndexHolder::centroids)
      .def("codebooks", &IVFPQIndexHolder::codebooks)
      .def("encode", &IVFPQIndexHolder::encode)
      .def("add", &IVFPQIndexHolder::add)
      .def("add_encoded", &IVFPQIndexHolder::add_encoded)
      .def("search", &IVFPQIndexHolder::search)
      .def("remove_ids", &IVFPQIndexHolder::remove_ids)
      .def("reset", &IVFPQIndexHolder::reset)
      .def("ntotal", &IVFPQIndexHolder::ntotal)
      .def("is_trained", &IVFPQIndexHolder::is_trained)
      .def("params", &IVFPQIndexHolder::params)
      .def("list_ids", &IVFPQIndexHolder::list_ids)
      .def("list_codes", &IVFPQIndexHolder::list_codes)
      .def("lists_csr", &IVFPQIndexHolder::lists_csr)
      .def("save", &IVFPQIndexHolder::save)
      .def("load", &IVFPQIndexHolder::load);
}

#if PCOPS_TORCH_CUDA
TORCH_LIBRARY_IMPL(pcops, CUDA, m) {
  m.impl("_ivfpq_search", &ivfpq_search_cuda);
  m.impl("_ivfpq_encode", &ivfpq_encode_cuda);
}
#endif

}  // namespace pcops::torch_binding
