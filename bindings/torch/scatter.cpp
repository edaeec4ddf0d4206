// torch.ops.pcops.{scatter, segment_csr, segment_coo, gather_csr, gather_coo}: CPU and CUDA
// registrations (contract: include/pcops/scatter.hpp). The Python wrappers (pcops/ops/scatter.py)
// broadcast the index (scatter also takes a 1-D index along dim as it is) and compute the output
// sizes, so every schema's output shape follows from its arguments; `out` arguments here are
// start values (the ops never write their inputs).
// One implementation per op, templated on the backend: CpuBackend (the CPU operators validate
// index / indptr values themselves) or CudaBackend (values live on the device: their statistics
// are computed in stream order with the reduction (scatter, segment_coo and segment_csr compute
// them themselves, fused with their own read of the index where they have one; the gathers run
// one statistics kernel), whose kernels skip out-of-range indices and clamp offsets (memory-safe
// for any values) and write only fresh tensors; the call then reads the statistics with its one
// synchronisation and raises the CPU's error before returning, so the caller's tensors are never
// written and nothing of a bad call is returned).
#include "pcops/scatter.hpp"

#include <string>
#include <string_view>

#include "common.hpp"

#if PCOPS_TORCH_CUDA
#include <c10/cuda/CUDAException.h>
#endif

namespace pcops::torch_binding {
namespace {

Reduce parse_reduce(std::string_view r, bool allow_mul) {
  if (r == "sum" || r == "add") return Reduce::Sum;
  if (r == "mean") return Reduce::Mean;
  if (r == "min") return Reduce::Min;
  if (r == "max") return Reduce::Max;
  if (r == "mul" && allow_mul) return Reduce::Mul;
  TORCH_CHECK_VALUE(false, "reduce: expected one of ", allow_mul ? "sum, add, mean, mul, min, max" : "sum, add, mean, min, max",
                    ", got '", std::string(r), "'");
}

bool is_minmax(Reduce r) { return r == Reduce::Min || r == Reduce::Max; }

// float32 / float64 / int64 / int32 / int16 / int8 / uint8 run natively; float16 / bfloat16 in
// float32 (rounded once at the end).
at::ScalarType compute_type(const at::Tensor& src) {
  const auto st = src.scalar_type();
  switch (st) {
    case at::kFloat: case at::kDouble: case at::kLong: case at::kInt: case at::kShort: case at::kChar:
    case at::kByte:
      return st;
    case at::kHalf: case at::kBFloat16: return at::kFloat;
    default:
      TORCH_CHECK_TYPE(false, "src: expected a real floating or integer dtype, got ", st);
  }
}

template <class Fn>
void with_type(at::ScalarType st, Fn fn) {
  switch (st) {
    case at::kFloat: fn(float{}); break;
    case at::kDouble: fn(double{}); break;
    case at::kLong: fn(int64_t{}); break;
    case at::kInt: fn(int32_t{}); break;
    case at::kShort: fn(int16_t{}); break;
    case at::kChar: fn(int8_t{}); break;
    case at::kByte: fn(uint8_t{}); break;
    default: TORCH_CHECK_TYPE(false, "unsupported dtype ", st);
  }
}

void check_index(const at::Tensor& index, const char* name, const at::Tensor& src) {
  TORCH_CHECK_TYPE(index.scalar_type() == at::kLong, name, ": expected an int64 tensor, got ", index.scalar_type());
  check_same_device(src, "src", index, name);
}

// The backend's operator for a context type (cpu:: for CpuContext, cuda:: for CudaContext).
// scatter_on / segment_csr_on take the device statistics to compute (the Check's; the CPU
// operators check the values themselves).
template <class... A>
void scatter_on(const CpuContext& c, unsigned long long* /*stats*/, A... a) { cpu::scatter(c, a...); }
template <class... A>
void segment_csr_on(const CpuContext& c, unsigned long long* /*stats*/, A... a) { cpu::segment_csr(c, a...); }
template <class... A>
void gather_csr_on(const CpuContext& c, A... a) { cpu::gather_csr(c, a...); }
template <class... A>
void gather_coo_on(const CpuContext& c, A... a) { cpu::gather_coo(c, a...); }

struct CpuBackend {
  struct Guard {
    explicit Guard(c10::Device) {}
  };
  static CpuContext context(const at::Tensor&) { return cpu_context(); }
  // The CPU operators check index / indptr values themselves (pcops::Error).
  struct Check {
    unsigned long long* stats() const { return nullptr; }
    void finish() const {}
  };
  static Check check_index(const at::Tensor&, int64_t, bool) { return {}; }
  static Check check_indptr(const at::Tensor&, int64_t) { return {}; }
  static Check fused_index_check(const at::Tensor&, int64_t, bool) { return {}; }
  static Check fused_indptr_check(const at::Tensor&, int64_t) { return {}; }
};

#if PCOPS_TORCH_CUDA
template <class... A>
void scatter_on(const CudaContext& c, unsigned long long* stats, A... a) { cuda::scatter(c, a..., stats); }
template <class... A>
void segment_csr_on(const CudaContext& c, unsigned long long* stats, A... a) { cuda::segment_csr(c, a..., stats); }
template <class... A>
void gather_csr_on(const CudaContext& c, A... a) { cuda::gather_csr(c, a...); }
template <class... A>
void gather_coo_on(const CudaContext& c, A... a) { cuda::gather_coo(c, a...); }

}  // namespace
}  // namespace pcops::torch_binding

namespace pcops::torch_binding {
namespace {

struct CudaBackend {
  using Guard = c10::cuda::CUDAGuard;  // src's device: allocations and the current stream
  static CudaContext context(const at::Tensor& t) { return cuda_context(t); }
  // The value checks of index / indptr rows: statistics computed in stream order with the
  // reduction's kernels (by the operator itself when fused, else by one statistics kernel
  // launched before them), read after them with one synchronisation. The errors are the CPU
  // operators' (IndexError / ValueError).
  struct Check {
    static constexpr int kWords = 5;  // cuda::index_value_stats's statistics
    enum class Kind { None, Index, Indptr };
    Kind kind = Kind::None;
    c10::DataPtr words;  // kWords words on the device (torch's caching allocator)
    cudaStream_t stream = nullptr;
    int64_t bound = 0;
    bool sorted = false;
    unsigned long long* stats() const { return static_cast<unsigned long long*>(words.get()); }
    void finish() const {
      if (kind == Kind::None) return;
      // SYNC: the one read of the statistics (after the kernels; nothing has been returned): a
      // plain copy into host memory on the operator's stream, then a wait for it.
      uint64_t u[kWords];
      C10_CUDA_CHECK(cudaMemcpyAsync(u, words.get(), sizeof u, cudaMemcpyDeviceToHost, stream));
      C10_CUDA_CHECK(cudaStreamSynchronize(stream));
      constexpr uint64_t kSign = uint64_t{1} << 63;
      auto lo = [&](int s) { return static_cast<int64_t>(~u[s] ^ kSign); };
      auto hi = [&](int s) { return static_cast<int64_t>(u[s] ^ kSign); };
      if (kind == Kind::Index) {
        TORCH_CHECK_INDEX(lo(0) >= 0 && hi(1) < bound, "index: expected indices in [0, ", bound,
                          ") (the output size along dim), got values in [", lo(0), ", ", hi(1), "]");
        TORCH_CHECK_VALUE(!sorted || u[4] == 0,
                          "index: expected indices sorted (non-decreasing) along the reduced dimension");
      } else {
        TORCH_CHECK_INDEX(lo(2) >= 0 && hi(3) <= bound, "indptr: expected offsets in [0, ", bound,
                          "] (the source size along dim), got first ", lo(2), " and last ", hi(3));
        TORCH_CHECK_VALUE(u[4] == 0, "indptr: expected non-decreasing offsets");
      }
    }
  };
  // The statistics' storage; the operator fills it (fused) unless `launch`.
  static Check prepare(const at::Tensor& rows, Check::Kind kind, int64_t bound, bool sorted, bool launch) {
    Check c;
    if (rows.numel() == 0) return c;
    c.kind = kind;
    c.bound = bound;
    c.sorted = sorted;
    c.stream = c10::cuda::getCurrentCUDAStream(rows.device().index()).stream();
    c.words = c10::cuda::CUDACachingAllocator::get()->allocate(Check::kWords * sizeof(unsigned long long));
    if (launch) {
      const int64_t len = rows.dim() == 0 ? 1 : rows.size(-1);
      cuda::index_value_stats(cuda_context(rows), rows.data_ptr<int64_t>(), rows.numel() / len, len, c.stats());
    }
    return c;
  }
  // index rows [rows, E] (contiguous): values in [0, size); with `sorted`, non-decreasing along
  // the last dim. check_index launches the statistics kernel; the fused checks leave the
  // statistics to the operator (cuda::scatter's index_stats, cuda::segment_csr's indptr_stats).
  static Check check_index(const at::Tensor& idx, int64_t size, bool sorted) {
    return prepare(idx, Check::Kind::Index, size, sorted, true);
  }
  static Check fused_index_check(const at::Tensor& idx, int64_t size, bool sorted) {
    return prepare(idx, Check::Kind::Index, size, sorted, false);
  }
  // indptr rows [rows, M + 1] (contiguous): 0 <= first, last <= count, non-decreasing.
  static Check check_indptr(const at::Tensor& ptr, int64_t count) {
    return prepare(ptr, Check::Kind::Indptr, count, true, true);
  }
  static Check fused_indptr_check(const at::Tensor& ptr, int64_t count) {
    return prepare(ptr, Check::Kind::Indptr, count, true, false);
  }
};
#endif

int64_t norm_dim(int64_t dim, int64_t ndim) {
  TORCH_CHECK_INDEX(dim >= -ndim && dim < ndim, "dim: expected a value in [", -ndim, ", ", ndim, "), got ", dim);
  return dim < 0 ? dim + ndim : dim;
}

ReduceShape shape_of(const at::Tensor& t, int64_t dim, int64_t out_rows) {
  ReduceShape s;
  s.outer = 1;
  for (int64_t d = 0; d < dim; ++d) s.outer *= t.size(d);
  s.src_rows = t.size(dim);
  s.inner = 1;
  for (int64_t d = dim + 1; d < t.dim(); ++d) s.inner *= t.size(d);
  s.out_rows = out_rows;
  return s;
}

std::vector<int64_t> sizes_with(const at::Tensor& t, int64_t dim, int64_t size) {
  std::vector<int64_t> v(t.sizes().begin(), t.sizes().end());
  v[static_cast<size_t>(dim)] = size;
  return v;
}

// True when t does not vary along the dims in [d0, d1) (size 1 or stride 0).
bool invariant(const at::Tensor& t, int64_t d0, int64_t d1) {
  for (int64_t d = d0; d < d1; ++d)
    if (t.size(d) != 1 && t.stride(d) != 0) return false;
  return true;
}

// The [outer, rows] (or [rows] when shared by every outer position) index / offset rows of a
// tensor whose dims after `dim` do not vary: returns (contiguous tensor, number of rows).
std::pair<at::Tensor, int64_t> leading_rows(const at::Tensor& t, int64_t dim) {
  at::Tensor r = t;
  for (int64_t d = t.dim() - 1; d > dim; --d) r = r.select(d, 0);
  if (invariant(r, 0, dim)) {
    for (int64_t d = 0; d < dim; ++d) r = r.select(0, 0);
    return {r.contiguous(), 1};
  }
  const int64_t rows = r.numel() / std::max<int64_t>(r.size(dim), 1);
  return {r.contiguous().reshape({rows, r.size(dim)}), rows};
}

at::Tensor start_values(const std::optional<at::Tensor>& out, const at::Tensor& src, at::ScalarType ct,
                        const std::vector<int64_t>& sizes) {
  if (!out.has_value()) return at::empty(sizes, src.options().dtype(ct));
  check_same_device(src, "src", *out, "out");
  TORCH_CHECK_TYPE(out->scalar_type() == src.scalar_type(), "out: expected dtype ", src.scalar_type(),
                   " (as src), got ", out->scalar_type());
  TORCH_CHECK_VALUE(out->sizes() == at::IntArrayRef(sizes), "out: expected shape ", at::IntArrayRef(sizes),
                    ", got ", out->sizes());
  return out->to(ct).contiguous().clone();
}

template <class B>
std::tuple<at::Tensor, at::Tensor> scatter_op(const at::Tensor& src_in, const at::Tensor& index,
                                               int64_t dim, int64_t dim_size, c10::string_view reduce_s,
                                               const std::optional<at::Tensor>& out_in) {
  const typename B::Guard guard(src_in.device());
  const Reduce reduce = parse_reduce(std::string_view(reduce_s.data(), reduce_s.size()), true);
  TORCH_CHECK_VALUE(src_in.dim() >= 1, "src: expected at least 1-D, got a 0-D tensor");
  dim = norm_dim(dim, src_in.dim());
  check_index(index, "index", src_in);
  // A 1-D index of src.size(dim) entries runs along dim (torch_scatter's broadcast of a 1-D
  // index), taken as it is: the Python wrapper then builds no broadcast view.
  const bool along_dim = index.dim() == 1 && src_in.dim() > 1 && index.size(0) == src_in.size(dim);
  TORCH_CHECK_VALUE(along_dim || index.sizes() == src_in.sizes(), "index: expected shape ", src_in.sizes(),
                    " (broadcast to src) or [", src_in.size(dim), "] (along dim), got ", index.sizes());
  TORCH_CHECK_VALUE(dim_size >= 0, "dim_size: expected >= 0, got ", dim_size);
  const at::ScalarType ct = compute_type(src_in);
  const auto out_sizes = sizes_with(src_in, dim, dim_size);
  const ReduceShape s = shape_of(src_in, dim, dim_size);
  check_output_size("dim_size", dim_size, s.outer, dim_size, s.inner);
  at::Tensor out = start_values(out_in, src_in, ct, out_sizes);
  at::Tensor arg = at::empty(is_minmax(reduce) ? out_sizes : std::vector<int64_t>{0}, src_in.options().dtype(at::kLong));
  if (s.outer > 0 && s.inner > 0 && dim_size > 0) {
    const at::Tensor src = src_in.to(ct).contiguous();
    at::Tensor idx;
    int64_t index_outer = 1, index_inner = 1;
    if (along_dim) {
      idx = index.contiguous();
    } else if (invariant(index, dim + 1, index.dim())) {
      std::tie(idx, index_outer) = leading_rows(index, dim);
    } else {
      idx = index.contiguous();
      index_outer = s.outer;
      index_inner = s.inner;
    }
    const auto check = B::fused_index_check(idx, dim_size, false);
    ScatterParams p;
    p.reduce = reduce;
    p.accumulate = out_in.has_value();
    p.integer_mean = IntegerMean::Floor;
    translate_errors([&] {
      with_type(ct, [&](auto tag) {
        using T = decltype(tag);
        scatter_on(B::context(src), check.stats(), p, s, src.data_ptr<T>(), idx.data_ptr<int64_t>(), index_outer,
                   index_inner, out.data_ptr<T>(), is_minmax(reduce) ? arg.data_ptr<int64_t>() : nullptr);
      });
    });
    check.finish();
  } else if (!out_in.has_value() && out.numel() > 0) {
    out.zero_();  // no contributions anywhere: every slot is empty
    if (reduce == Reduce::Mul) out.fill_(1);
    if (is_minmax(reduce)) arg.fill_(s.src_rows);
  } else if (is_minmax(reduce)) {
    arg.fill_(s.src_rows);
  }
  return {out.to(src_in.scalar_type()), arg};
}

// indptr / index with leading dims broadcast to src's: validates and returns the reduced dim.
int64_t leading_dim(const at::Tensor& src, const at::Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(t.dim() >= 1, name, ": expected at least 1-D, got a 0-D tensor");
  TORCH_CHECK_VALUE(src.dim() >= t.dim(), "src: expected at least ", t.dim(), " dims (as ", name, "), got ",
                    src.dim());
  const int64_t dim = t.dim() - 1;
  for (int64_t d = 0; d < dim; ++d)
    TORCH_CHECK_VALUE(t.size(d) == src.size(d) || t.size(d) == 1, name, ": leading sizes ", t.sizes(),
                      " do not broadcast to src's ", src.sizes());
  return dim;
}

// [outer, n] rows of a tensor whose leading dims broadcast to src's: (contiguous, rows).
std::pair<at::Tensor, int64_t> expand_rows(const at::Tensor& t, const at::Tensor& src) {
  const int64_t dim = t.dim() - 1;
  if (invariant(t, 0, dim)) {
    at::Tensor r = t;
    for (int64_t d = 0; d < dim; ++d) r = r.select(0, 0);
    return {r.contiguous(), 1};
  }
  std::vector<int64_t> sizes(src.sizes().begin(), src.sizes().begin() + dim);
  sizes.push_back(t.size(dim));
  const at::Tensor e = t.expand(sizes).contiguous();
  const int64_t rows = e.numel() / std::max<int64_t>(t.size(dim), 1);
  return {e.reshape({rows, t.size(dim)}), rows};
}

template <class B>
std::tuple<at::Tensor, at::Tensor> segment_csr_op(const at::Tensor& src_in, const at::Tensor& indptr,
                                                   c10::string_view reduce_s) {
  const typename B::Guard guard(src_in.device());
  const Reduce reduce = parse_reduce(std::string_view(reduce_s.data(), reduce_s.size()), false);
  check_index(indptr, "indptr", src_in);
  const int64_t dim = leading_dim(src_in, indptr, "indptr");
  const at::ScalarType ct = compute_type(src_in);
  const int64_t M = std::max<int64_t>(indptr.size(dim) - 1, 0);
  const auto out_sizes = sizes_with(src_in, dim, M);
  const ReduceShape s = shape_of(src_in, dim, M);
  // The kernels write every element (value and arg) when they run; otherwise every slot is empty.
  const bool run = s.outer > 0 && s.inner > 0 && M > 0;
  at::Tensor out = run ? at::empty(out_sizes, src_in.options().dtype(ct)) : at::zeros(out_sizes, src_in.options().dtype(ct));
  at::Tensor arg = !is_minmax(reduce) ? at::empty({0}, src_in.options().dtype(at::kLong))
                   : run              ? at::empty(out_sizes, src_in.options().dtype(at::kLong))
                                      : at::full(out_sizes, s.src_rows, src_in.options().dtype(at::kLong));
  if (run) {
    const at::Tensor src = src_in.to(ct).contiguous();
    auto [ptr, rows] = expand_rows(indptr, src_in);
    const auto check = B::fused_indptr_check(ptr, s.src_rows);
    translate_errors([&] {
      with_type(ct, [&](auto tag) {
        using T = decltype(tag);
        segment_csr_on(B::context(src), check.stats(), reduce, s, src.data_ptr<T>(), ptr.data_ptr<int64_t>(), rows,
                       out.data_ptr<T>(), is_minmax(reduce) ? arg.data_ptr<int64_t>() : nullptr);
      });
    });
    check.finish();
  }
  return {out.to(src_in.scalar_type()), arg};
}

template <class B>
std::tuple<at::Tensor, at::Tensor> segment_coo_op(const at::Tensor& src_in, const at::Tensor& index,
                                                   int64_t dim_size, c10::string_view reduce_s,
                                                   const std::optional<at::Tensor>& out_in) {
  const typename B::Guard guard(src_in.device());
  const Reduce reduce = parse_reduce(std::string_view(reduce_s.data(), reduce_s.size()), false);
  check_index(index, "index", src_in);
  const int64_t dim = leading_dim(src_in, index, "index");
  TORCH_CHECK_VALUE(index.size(dim) == src_in.size(dim), "index: expected ", src_in.size(dim),
                    " entries along the last dim (as src), got ", index.size(dim));
  TORCH_CHECK_VALUE(dim_size >= 0, "dim_size: expected >= 0, got ", dim_size);
  const at::ScalarType ct = compute_type(src_in);
  const auto out_sizes = sizes_with(src_in, dim, dim_size);
  const ReduceShape s = shape_of(src_in, dim, dim_size);
  check_output_size("dim_size", dim_size, s.outer, dim_size, s.inner);
  at::Tensor out = start_values(out_in, src_in, ct, out_sizes);
  at::Tensor arg = at::empty(is_minmax(reduce) ? out_sizes : std::vector<int64_t>{0}, src_in.options().dtype(at::kLong));
  if (s.outer > 0 && s.inner > 0 && dim_size > 0) {
    const at::Tensor src = src_in.to(ct).contiguous();
    auto [idx, rows] = expand_rows(index, src_in);
    const auto check = B::fused_index_check(idx, dim_size, true);
    ScatterParams p;
    p.reduce = reduce;
    p.accumulate = out_in.has_value();
    p.integer_mean = IntegerMean::Trunc;
    p.sorted = true;
    translate_errors([&] {
      with_type(ct, [&](auto tag) {
        using T = decltype(tag);
        scatter_on(B::context(src), check.stats(), p, s, src.data_ptr<T>(), idx.data_ptr<int64_t>(), rows, 1,
                   out.data_ptr<T>(), is_minmax(reduce) ? arg.data_ptr<int64_t>() : nullptr);
      });
    });
    check.finish();
  } else {
    if (!out_in.has_value()) out.zero_();
    if (is_minmax(reduce)) arg.fill_(s.src_rows);
  }
  return {out.to(src_in.scalar_type()), arg};
}

template <class B>
at::Tensor gather_csr_op(const at::Tensor& src_in, const at::Tensor& indptr, int64_t size,
                          const std::optional<at::Tensor>& out_in) {
  const typename B::Guard guard(src_in.device());
  check_index(indptr, "indptr", src_in);
  const int64_t dim = leading_dim(src_in, indptr, "indptr");
  const int64_t M = std::max<int64_t>(indptr.size(dim) - 1, 0);
  TORCH_CHECK_VALUE(src_in.size(dim) == M, "src: expected ", M, " rows along dim ", dim,
                    " (one per segment of indptr), got ", src_in.size(dim));
  TORCH_CHECK_VALUE(size >= 0, "size: expected >= 0, got ", size);
  const at::ScalarType ct = compute_type(src_in);
  const auto out_sizes = sizes_with(src_in, dim, size);
  ReduceShape s = shape_of(src_in, dim, size);
  check_output_size("size", size, s.outer, size, s.inner);
  at::Tensor out = out_in.has_value() ? start_values(out_in, src_in, ct, out_sizes)
                                      : at::zeros(out_sizes, src_in.options().dtype(ct));
  if (s.outer > 0 && s.inner > 0 && M > 0) {
    const at::Tensor src = src_in.to(ct).contiguous();
    auto [ptr, rows] = expand_rows(indptr, src_in);
    const auto check = B::check_indptr(ptr, size);
    translate_errors([&] {
      with_type(ct, [&](auto tag) {
        using T = decltype(tag);
        gather_csr_on(B::context(src), s, src.data_ptr<T>(), ptr.data_ptr<int64_t>(), rows, out.data_ptr<T>());
      });
    });
    check.finish();
  }
  return out.to(src_in.scalar_type());
}

template <class B>
at::Tensor gather_coo_op(const at::Tensor& src_in, const at::Tensor& index) {
  const typename B::Guard guard(src_in.device());
  check_index(index, "index", src_in);
  const int64_t dim = leading_dim(src_in, index, "index");
  const at::ScalarType ct = compute_type(src_in);
  const int64_t E = index.size(dim);
  const auto out_sizes = sizes_with(src_in, dim, E);
  ReduceShape s = shape_of(src_in, dim, E);
  // Here src rows are the M gathered-from rows, out rows the E positions.
  s.src_rows = src_in.size(dim);
  s.out_rows = E;
  at::Tensor out = at::empty(out_sizes, src_in.options().dtype(ct));
  if (s.outer > 0 && s.inner > 0 && E > 0) {
    const at::Tensor src = src_in.to(ct).contiguous();
    auto [idx, rows] = expand_rows(index, src_in);
    const auto check = B::check_index(idx, s.src_rows, false);
    translate_errors([&] {
      with_type(ct, [&](auto tag) {
        using T = decltype(tag);
        gather_coo_on(B::context(src), s, src.data_ptr<T>(), idx.data_ptr<int64_t>(), rows, out.data_ptr<T>());
      });
    });
    check.finish();
  }
  return out.to(src_in.scalar_type());
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(pcops, m) {
  m.def("scatter(Tensor src, Tensor index, int dim, int dim_size, str reduce, Tensor? out=None) -> (Tensor, Tensor)");
  m.def("segment_csr(Tensor src, Tensor indptr, str reduce) -> (Tensor, Tensor)");
  m.def("segment_coo(Tensor src, Tensor index, int dim_size, str reduce, Tensor? out=None) -> (Tensor, Tensor)");
  m.def("gather_csr(Tensor src, Tensor indptr, int size, Tensor? out=None) -> Tensor");
  m.def("gather_coo(Tensor src, Tensor index) -> Tensor");
}

TORCH_LIBRARY_IMPL(pcops, CPU, m) {
  m.impl("scatter", &scatter_op<CpuBackend>);
  m.impl("segment_csr", &segment_csr_op<CpuBackend>);
  m.impl("segment_coo", &segment_coo_op<CpuBackend>);
  m.impl("gather_csr", &gather_csr_op<CpuBackend>);
  m.impl("gather_coo", &gather_coo_op<CpuBackend>);
}

#if PCOPS_TORCH_CUDA
TORCH_LIBRARY_IMPL(pcops, CUDA, m) {
  m.impl("scatter", &scatter_op<CudaBackend>);
  m.impl("segment_csr", &segment_csr_op<CudaBackend>);
  m.impl("segment_coo", &segment_coo_op<CudaBackend>);
  m.impl("gather_csr", &gather_csr_op<CudaBackend>);
  m.impl("gather_coo", &gather_coo_op<CudaBackend>);
}
#endif

}  // namespace pcops::torch_binding
