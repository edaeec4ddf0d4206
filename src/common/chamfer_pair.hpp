#pragma once
// The arithmetic of chamfer_pair_distance's contract (pcops/chamfer_pair.hpp), shared by the CPU
// and CUDA backends: one rounding per operation through common::nn, so both compute the same bits.
#include <cstdint>

#include "common/nearest_neighbor.hpp"

namespace pcops::common::chamfer {

#if defined(__CUDA_ARCH__)
PCOPS_HD float div(float a, float b) { return __fdiv_rn(a, b); }
PCOPS_HD double div(double a, double b) { return __ddiv_rn(a, b); }
#else
PCOPS_HD float div(float a, float b) { return a / b; }
PCOPS_HD double div(double a, double b) { return a / b; }
#endif

// chamfer_reduce's divisor of a row: max(length, 1) (the row count without lengths), converted to
// the value type (round to nearest).
template <class T>
PCOPS_HD T row_divisor(const int64_t* lengths, int64_t b, int64_t count) {
  const int64_t n = lengths != nullptr ? lengths[b] : count;
  return static_cast<T>(n > 1 ? n : int64_t{1});
}

// PyTorch3D's sign of an L1 difference: +1 if d > 0, else -1 (0 and NaN count as -1).
template <class T>
PCOPS_HD T sign(T d) {
  return d > T(0) ? T(1) : T(-1);
}

// One coordinate's term of the distance.
template <int Norm, class T>
PCOPS_HD T term(T d) {
  if constexpr (Norm == 2) return nn::mul(d, d);
  else return nn::mul(d, sign(d));
}

// The gradient of one coordinate's term for the upstream gradient g.
template <int Norm, class T>
PCOPS_HD T term_grad(T g, T d) {
  if constexpr (Norm == 2) {
    const T t = nn::mul(g, d);
    return nn::add(t, t);
  } else {
    return nn::mul(g, sign(d));
  }
}

// The row's distance: +0 for idx = -1, else the coordinate-order sum (Get(i) -> (x_i, y_i)).
template <int Norm, class T, class XAt, class YAt>
PCOPS_HD T pair_distance(int64_t dim, XAt x_at, YAt y_at) {
  T s = term<Norm>(nn::sub(x_at(0), y_at(0)));
  for (int64_t i = 1; i < dim; ++i) s = nn::add(s, term<Norm>(nn::sub(x_at(i), y_at(i))));
  return s;
}

}  // namespace pcops::common::chamfer
