#include "index_ranges.hpp"

#include <algorithm>
#include <mutex>
#include <vector>

namespace pcops::torch_binding {
namespace {

using WeakImpl = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;

class Registry {
 public:
  std::optional<IndexRanges> find(const at::Tensor& t, int cols) {
    if (t.is_inference()) return std::nullopt;
    const std::lock_guard<std::mutex> lock(mutex_);
    for (const Entry& e : entries_)
      if (e.ranges.cols == cols && same(e, t)) return e.ranges;
    return std::nullopt;
  }
  void add(const at::Tensor& t, const IndexRanges& r) {
    if (t.is_inference()) return;
    const std::lock_guard<std::mutex> lock(mutex_);
    std::erase_if(entries_, [&](const Entry& e) {
      return e.impl.expired() || (e.ranges.cols == r.cols && same(e, t));
    });
    if (entries_.size() >= kEntries) entries_.erase(entries_.begin());  // the oldest
    entries_.push_back(Entry{WeakImpl(t.getIntrusivePtr()), t._version(), t.data_ptr(),
                             t.sizes().vec(), t.strides().vec(), r});
  }

 private:
  static constexpr size_t kEntries = 64;
  struct Entry {
    WeakImpl impl;
    uint32_t version;
    const void* data;
    std::vector<int64_t> sizes, strides;
    IndexRanges ranges;
  };
  static bool same(const Entry& e, const at::Tensor& t) {
    return e.impl._unsafe_get_target() == t.unsafeGetTensorImpl() && !e.impl.expired() &&
           e.version == t._version() && e.data == t.data_ptr() && t.sizes().equals(e.sizes) &&
           t.strides().equals(e.strides);
  }
  std::mutex mutex_;
  std::vector<Entry> entries_;
};

// Never destroyed (nor the weak references it holds), so no exit-time order matters.
Registry& registry() {
  static Registry& r = *new Registry;
  return r;
}

}  // namespace

std::optional<IndexRanges> known_ranges(const at::Tensor& t, int cols) {
  if (!t.is_cuda()) return std::nullopt;
  return registry().find(t, cols);
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
