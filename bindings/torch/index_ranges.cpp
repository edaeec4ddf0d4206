#include "index_ranges.hpp"

#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <mutex>
#include <optional>
#include <vector>

namespace pcops::torch_binding {
namespace {

class Registry {
 public:
  std::optional<IndexRanges> find(const at::Tensor& t, int cols) {
    if (t.is_inference()) return std::nullopt;
    const std::lock_guard<std::mutex> lock(mutex_);
    for (const Entry& e : entries_)
      if (e.ranges.cols == cols && e.stamp.same(t)) return e.ranges;
    return std::nullopt;
  }
  void add(const at::Tensor& t, const IndexRanges& r) {
    if (t.is_inference()) return;
    const std::lock_guard<std::mutex> lock(mutex_);
    std::erase_if(entries_, [&](const Entry& e) {
      return e.stamp.expired() || (e.ranges.cols == r.cols && e.stamp.same(t));
    });
    if (entries_.size() >= kEntries) entries_.erase(entries_.begin());  // the oldest
    entries_.push_back(Entry{TensorStamp(t), r});
  }

 private:
  static constexpr size_t kEntries = 64;
  struct Entry {
    TensorStamp stamp;
    IndexRanges ranges;
  };
  std::mutex mutex_;
  std::vector<Entry> entries_;
};

// Never destroyed (nor the weak references it holds), so no exit-time order matters.
Registry& registry() {
  static Registry& r = *new Registry;
  return r;
}

}  // namespace

TensorStamp::TensorStamp(const at::Tensor& t)
    : impl_(t.getIntrusivePtr()),
      version_(t._version()),
      data_(t.data_ptr()),
      sizes_(t.sizes().vec()),
      strides_(t.strides().vec()) {}

bool TensorStamp::of(const at::Tensor& t) const {
  return impl_._unsafe_get_target() == t.unsafeGetTensorImpl() && !impl_.expired();
}

bool TensorStamp::same(const at::Tensor& t) const {
  return of(t) && version_ == t._version() && data_ == t.data_ptr() && t.sizes().equals(sizes_) &&
         t.strides().equals(strides_);
}

std::optional<IndexRanges> known_ranges(const at::Tensor& t, int cols) {
  if (!t.is_cuda()) return std::nullopt;
  if (std::optional<IndexRanges> r = registry().find(t, cols)) return r;
  // A view's values are some of its base's, and a write through either moves the version
  // counter they share: the base's range bounds the view's (for the whole tensor; a view's
  // columns need not be the base's). An as_strided view reaching storage past its base's elements
  // is outside this; its indices are still checked by every kernel that reads them.
  if (cols == 1 && t.is_view()) {
    const at::Tensor base(t._base());
    if (base.defined() && base.is_cuda()) return registry().find(base, 1);
  }
  return std::nullopt;
}

void remember_ranges(const at::Tensor& t, const IndexRanges& r) {
  if (t.is_cuda()) registry().add(t, r);
}

IndexRanges read_ranges(const at::Tensor& t, int cols) {
  IndexRanges r;
  r.cols = cols;
  // SYNC: the bounds are read on the host before any kernel reads through the indices.
  const at::Tensor v = cols == 1 ? t.reshape({-1}) : t.reshape({-1, cols});
  const auto [lo_t, hi_t] = at::aminmax(v, 0);  // one pass over the values
  const at::Tensor mm = at::stack({lo_t.reshape({-1}), hi_t.reshape({-1})}).cpu();
  const int64_t* p = mm.data_ptr<int64_t>();
  for (int c = 0; c < cols; ++c) r.lo[c] = p[c], r.hi[c] = p[cols + c];
  registry().add(t, r);
  return r;
}

}  // namespace pcops::torch_binding

namespace pcops::torch_binding {
namespace {

// idx converted to int32 or int64 (always a new tensor), carrying over the range known for
// bounds_from (default idx itself) where it fits the new dtype: for the stand-ins, whose upstream
// APIs take and return int32 indices, so that a layer on the library's own indices stays
// sync-free through the casts. The caller vouches that idx's values lie inside bounds_from's
// range (a stale range only loses an IndexError: every kernel checks each index it reads).
at::Tensor index_cast(const at::Tensor& idx, at::ScalarType dtype,
                      const std::optional<at::Tensor>& bounds_from) {
  TORCH_CHECK_TYPE(idx.scalar_type() == at::kInt || idx.scalar_type() == at::kLong,
                   "idx: expected an int32 or int64 tensor, got ", idx.scalar_type());
  TORCH_CHECK_TYPE(dtype == at::kInt || dtype == at::kLong, "dtype: expected int32 or int64, got ", dtype);
  at::Tensor out = idx.to(dtype, /*non_blocking=*/false, /*copy=*/true);
  const at::Tensor& src = bounds_from.has_value() ? *bounds_from : idx;
  if (out.is_cuda() && out.numel() > 0)
    if (const std::optional<IndexRanges> r = known_ranges(src, 1)) {
      const bool narrow = dtype == at::kInt;
      const int64_t lo = narrow ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int64_t>::min();
      const int64_t hi = narrow ? std::numeric_limits<int32_t>::max() : std::numeric_limits<int64_t>::max();
      if (r->lo[0] >= lo && r->hi[0] <= hi) remember_ranges(out, *r);
    }
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(pcops, m) {
  m.def("_index_cast(Tensor idx, ScalarType dtype, Tensor? bounds_from=None) -> Tensor");
}
TORCH_LIBRARY_IMPL(pcops, CPU, m) { m.impl("_index_cast", &index_cast); }
#if PCOPS_TORCH_CUDA
TORCH_LIBRARY_IMPL(pcops, CUDA, m) { m.impl("_index_cast", &index_cast); }
#endif

}  // namespace pcops::torch_binding
