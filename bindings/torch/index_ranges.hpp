#pragma once
// Value ranges of CUDA index tensors known on the host, so that the IndexError checks of the
// operators that read through indices (gather_points, group_points, three_interpolate, the
// ball-query backward, point_conv's triplets) do not wait for the stream every call. A range is
// known for a tensor while it lives unchanged: the same TensorImpl (held by a weak reference, so
// its address is not reused meanwhile), version counter, data pointer, sizes and strides. It is
// known either because the values were read back once (exact minima and maxima, a stream sync)
// or because an operator of this library wrote them (bounds that hold by construction: kNN, ball
// query, three_nn and FPS indices, point_conv_triplets' rows). A check against bounds that do
// not settle it reads the exact values. Inference tensors have no version counter and are always
// read. A tensor written past its version counter (through .data or a pointer handed to foreign
// code) keeps the range recorded before; every kernel still checks each index it reads, so
// nothing is read or written out of bounds, but an out-of-range index may then be skipped instead
// of reported.
#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace pcops::torch_binding {

// A tensor's values as they are now, recognised later while it lives unchanged: the same
// TensorImpl (held by a weak reference, so its address is not reused meanwhile), version counter,
// data pointer, sizes and strides. Not for inference tensors (no version counter).
class TensorStamp {
 public:
  explicit TensorStamp(const at::Tensor& t);
  bool same(const at::Tensor& t) const;
  // Whether t is the stamped tensor (alive), whatever its values now.
  bool of(const at::Tensor& t) const;
  bool expired() const { return impl_.expired(); }

 private:
  c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> impl_;
  int64_t version_;
  const void* data_;
  std::vector<int64_t> sizes_, strides_;
};

// Bounds of an index tensor: column c (of the last dimension, cols of them) lies in [lo[c],
// hi[c]]; cols == 1: the whole tensor.
struct IndexRanges {
  int cols = 1;
  int64_t lo[3] = {0, 0, 0}, hi[3] = {0, 0, 0};
};

// The bounds recorded for t (with the same column count), if t is unchanged since; for a view
// without a range of its own (cols == 1), its base's.
std::optional<IndexRanges> known_ranges(const at::Tensor& t, int cols);
// Records bounds that hold for every value of t (a CUDA tensor written by this library).
void remember_ranges(const at::Tensor& t, const IndexRanges& r);
// The exact per-column minima and maxima of a non-empty CUDA int64 tensor (contiguous; cols
// columns in its last dimension): one aminmax pass and a stream sync; recorded for later calls.
IndexRanges read_ranges(const at::Tensor& t, int cols);
// Bounds [lo, hi] for every value of an index tensor just written by an operator.
inline void remember_bounds(const at::Tensor& t, int64_t lo, int64_t hi) {
  if (!t.is_cuda() || t.numel() == 0) return;
  IndexRanges r;
  r.lo[0] = lo, r.hi[0] = hi;
  remember_ranges(t, r);
}

}  // namespace pcops::torch_binding
