#pragma once
// Shared validation helpers of the host-side core.
#include <cstdint>

#include "pcops/error.hpp"
#include "pcops/ragged.hpp"
#include "pcops/view.hpp"

namespace pcops::core {

void check_points(const PointsView& p, const char* name);
// The sizes and nullness of a float32 or float64 view as a PointsView (the shape checks read
// nothing else; the data pointer is only compared with null).
template <class T>
PointsView shape_of(const BasicPointsView<T>& v) {
  return PointsView{v.data == nullptr ? nullptr : reinterpret_cast<const float*>(v.data),
                    v.batch, v.count, v.dim, v.stride_batch, v.stride_point, v.stride_dim};
}
void check_lengths(const LengthsView& lengths, int64_t batch, int64_t count, const char* name);
// x and y of one ragged pair: same dimension, valid offsets of the same size (ptr_x, ptr_y).
void check_ragged_pair(const RaggedPointsView& x, const RaggedPointsView& y,
                       const OffsetsView& ptr_x, const OffsetsView& ptr_y);
int64_t checked_mul(int64_t a, int64_t b, const char* what);
void check_features(const FeaturesView& f, const char* name);
// Host-memory indices: every one of the n values in [-1, count), else an Index error naming
// `name` with the observed range.
void check_indices(const int64_t* idx, int64_t n, int64_t count, const char* name);

}  // namespace pcops::core
