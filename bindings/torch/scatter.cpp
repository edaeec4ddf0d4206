// torch.ops.pcops.{scatter, segment_csr, segment_coo, gather_csr, gather_coo}: CPU and CUDA
// registrations (contract: include/pcops/scatter.hpp). The Python wrappers (pcops/ops/scatter.py)
// broadcast the index and compute the output sizes, so every schema's output shape follows from
// its arguments; `out` arguments here are start values (the ops never write their inputs).
// One implementation per op, templated on the backend: CpuBackend (the CPU operators validate
// index / indptr values themselves) or CudaBackend (values live on the device: checked here with
// torch reductions and one synchronisation before any kernel runs, as the cuda:: header asks).
#include "pcops/scatter.hpp"

#include <string>
#include <string_view>

#include "common.hpp"

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
template <class... A>
void scatter_on(const CpuContext& c, A... a) { cpu::scatter(c, a...); }
template <class... A>
void segment_csr_on(const CpuContext& c, A... a) { cpu::segment_csr(c, a...); }
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
  static void check_index(const at::Tensor&, int64_t, bool) {}
  static void check_indptr(const at::Tensor&, int64_t) {}
};

#if PCOPS_TORCH_CUDA
template <class... A>
void scatter_on(const CudaContext& c, A... a) { cuda::scatter(c, a...); }
template <class... A>
void segment_csr_on(const CudaContext& c, A... a) { cuda::segment_csr(c, a...); }
template <class... A>
void gather_csr_on(const CudaContext& c, A... a) { cuda::gather_csr(c, a...); }
template <class... A>
void gather_coo_on(const CudaContext& c, A... a) { cuda::gather_coo(c, a...); }

struct CudaBackend {
  using Guard = c10::cuda::CUDAGuard;  // src's device: allocations and the current stream
  static CudaContext context(const at::Tensor& t) { return cuda_context(t); }
  // index rows [rows, E] (or any shape): values in [0, size); with `sorted`, non-decreasing along
  // the last dim. The same errors as the CPU operators' (IndexError / ValueError).
  static void check_index(const at::Tensor& idx, int64_t size, bool sorted) {
    if (idx.numel() == 0) return;
    std::vector<at::Tensor> parts{idx.min(), idx.max()};
    if (sorted && idx.size(-1) > 1) {
      const at::Tensor d = idx.narrow(-1, 1, idx.size(-1) - 1) - idx.narrow(-1, 0, idx.size(-1) - 1);
      parts.push_back((d < 0).any().to(at::kLong));
    }
    // SYNC: index values are checked on the host before any kernel reads through them.
    const at::Tensor h = at::stack(parts).cpu();
    const int64_t* v = h.data_ptr<int64_t>();
    TORCH_CHECK_INDEX(v[0] >= 0 && v[1] < size, "index: expected indices in [0, ", size,
                      ") (the output size along dim), got values in [", v[0], ", ", v[1], "]");
    TORCH_CHECK_VALUE(h.numel() < 3 || v[2] == 0,
                      "index: expected indices sorted (non-decreasing) along the reduced dimension");
  }
  // indptr rows [rows, M + 1]: 0 <= first, last <= count, non-decreasing.
  static void check_indptr(const at::Tensor& ptr, int64_t count) {
    if (ptr.numel() == 0) return;
    const int64_t n = ptr.size(-1);
    std::vector<at::Tensor> parts{ptr.select(-1, 0).min(), ptr.select(-1, n - 1).max()};
    if (n > 1) parts.push_back((ptr.narrow(-1, 1, n - 1) < ptr.narrow(-1, 0, n - 1)).any().to(at::kLong));
    // SYNC: offsets are checked on the host before any kernel reads through them.
    const at::Tensor h = at::stack(parts).cpu();
    const int64_t* v = h.data_ptr<int64_t>();
    TORCH_CHECK_INDEX(v[0] >= 0 && v[1] <= count, "indptr: expected offsets in [0, ", count,
                      "] (the source size along dim), got first ", v[0], " and last ", v[1]);
    TORCH_CHECK_VALUE(h.numel() < 3 || v[2] == 0, "indptr: expected non-decreasing offsets");
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
  TORCH_CHECK_VALUE(index.sizes() == src_in.sizes(), "index: expected shape ", src_in.sizes(),
                    " (broadcast to src), got ", index.sizes());
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
    if (invariant(index, dim + 1, index.dim())) {
      std::tie(idx, index_outer) = leading_rows(index, dim);
    } else {
      idx = index.contiguous();
      index_outer = s.outer;
      index_inner = s.inner;
    }
    B::check_index(idx, dim_size, false);
    ScatterParams p;
    p.reduce = reduce;
    p.accumulate = out_in.has_value();
    p.integer_mean = IntegerMean::Floor;
    translate_errors([&] {
      with_type(ct, [&](auto tag) {
        using T = decltype(tag);
        scatter_on(B::context(src), p, s, src.data_ptr<T>(), idx.data_ptr<int64_t>(), index_outer, index_inner,
                     out.data_ptr<T>(), is_minmax(reduce) ? arg.data_ptr<int64_t>() : nullptr);
      });
    });
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
  at::Tensor out = at::zeros(out_sizes, src_in.options().dtype(ct));
  at::Tensor arg = is_minmax(reduce) ? at::full(out_sizes, s.src_rows, src_in.options().dtype(at::kLong))
                                     : at::empty({0}, src_in.options().dtype(at::kLong));
  if (s.outer > 0 && s.inner > 0 && M > 0) {
    const at::Tensor src = src_in.to(ct).contiguous();
    auto [ptr, rows] = expand_rows(indptr, src_in);
    B::check_indptr(ptr, s.src_rows);
    translate_errors([&] {
      with_type(ct, [&](auto tag) {
        using T = decltype(tag);
        segment_csr_on(B::context(src), reduce, s, src.data_ptr<T>(), ptr.data_ptr<int64_t>(), rows, out.data_ptr<T>(),
                         is_minmax(reduce) ? arg.data_ptr<int64_t>() : nullptr);
      });
    });
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
    B::check_index(idx, dim_size, true);
    ScatterParams p;
    p.reduce = reduce;
    p.accumulate = out_in.has_value();
    p.integer_mean = IntegerMean::Trunc;
    p.sorted = true;
    translate_errors([&] {
      with_type(ct, [&](auto tag) {
        using T = decltype(tag);
        scatter_on(B::context(src), p, s, src.data_ptr<T>(), idx.data_ptr<int64_t>(), rows, 1, out.data_ptr<T>(),
                     is_minmax(reduce) ? arg.data_ptr<int64_t>() : nullptr);
      });
    });
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
    B::check_indptr(ptr, size);
    translate_errors([&] {
      with_type(ct, [&](auto tag) {
        using T = decltype(tag);
        gather_csr_on(B::context(src), s, src.data_ptr<T>(), ptr.data_ptr<int64_t>(), rows, out.data_ptr<T>());
      });
    });
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
    B::check_index(idx, s.src_rows, false);
    translate_errors([&] {
      with_type(ct, [&](auto tag) {
        using T = decltype(tag);
        gather_coo_on(B::context(src), s, src.data_ptr<T>(), idx.data_ptr<int64_t>(), rows, out.data_ptr<T>());
      });
    });
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
