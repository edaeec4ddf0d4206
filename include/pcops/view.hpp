#pragma once
// Non-owning views passed by value into kernels. Strides are in elements.
#include <cstdint>

namespace pcops {

// A dense batch of point sets: [batch, count, dim] of T (float32 coordinates everywhere; float64
// where an operator supports it, e.g. nearest_neighbor).
template <class T>
struct BasicPointsView {
  using value_type = T;
  const T* data = nullptr;
  int64_t batch = 0;
  int64_t count = 0;
  int64_t dim = 0;
  int64_t stride_batch = 0;
  int64_t stride_point = 0;
  int64_t stride_dim = 1;

  const T& at(int64_t b, int64_t n, int64_t d) const {
    return data[b * stride_batch + n * stride_point + d * stride_dim];
  }
  // A contiguous [batch, count, dim] view.
  static BasicPointsView contiguous(const T* data, int64_t batch, int64_t count, int64_t dim) {
    return BasicPointsView{data, batch, count, dim, count * dim, dim, 1};
  }
};
using PointsView = BasicPointsView<float>;
using PointsView64 = BasicPointsView<double>;

// A dense batch of per-point feature maps, channels first as in PointNet++:
// [batch, channels, count] float32.
struct FeaturesView {
  const float* data = nullptr;
  int64_t batch = 0;
  int64_t channels = 0;
  int64_t count = 0;
  int64_t stride_batch = 0;
  int64_t stride_channel = 0;
  int64_t stride_point = 1;

  const float& at(int64_t b, int64_t c, int64_t n) const {
    return data[b * stride_batch + c * stride_channel + n * stride_point];
  }
  // A contiguous [batch, channels, count] view.
  static FeaturesView contiguous(const float* data, int64_t batch, int64_t channels, int64_t count) {
    return FeaturesView{data, batch, channels, count, channels * count, count, 1};
  }
};

// Optional per-cloud lengths (int64, one per batch entry). nullptr means "all points".
struct LengthsView {
  const int64_t* data = nullptr;
  int64_t size = 0;
  bool present() const { return data != nullptr; }
  int64_t get(int64_t b, int64_t fallback) const { return data ? data[b] : fallback; }
};

}  // namespace pcops
