#pragma once
// The squared distance of the contract: d_i = fl(q_i - x_i), s_0 = fl(d_0*d_0),
// s_i = fl(s_{i-1} + fl(d_i*d_i)). Every file that includes this is compiled without FP
// contraction (-ffp-contract=off on the host; __fmul_rn/__fadd_rn on the device), so no FMA
// can merge a product into the sum.
#include <cmath>
#include <cstdint>

#include "common/macros.hpp"

namespace pcops::common {

#if defined(__CUDA_ARCH__)
PCOPS_HD float mul_rn(float a, float b) { return __fmul_rn(a, b); }
PCOPS_HD float add_rn(float a, float b) { return __fadd_rn(a, b); }
PCOPS_HD float sub_rn(float a, float b) { return __fsub_rn(a, b); }
#else
PCOPS_HD float mul_rn(float a, float b) { return a * b; }
PCOPS_HD float add_rn(float a, float b) { return a + b; }
PCOPS_HD float sub_rn(float a, float b) { return a - b; }
#endif

PCOPS_HD float squared_distance3(float qx, float qy, float qz, float x, float y, float z) {
  const float dx = sub_rn(qx, x), dy = sub_rn(qy, y), dz = sub_rn(qz, z);
  return add_rn(add_rn(mul_rn(dx, dx), mul_rn(dy, dy)), mul_rn(dz, dz));
}

// General D, strided operands.
PCOPS_HD float squared_distance(const float* q, int64_t q_stride, const float* x, int64_t x_stride,
                                int64_t dim) {
  float d = sub_rn(q[0], x[0]);
  float s = mul_rn(d, d);
  for (int64_t i = 1; i < dim; ++i) {
    d = sub_rn(q[i * q_stride], x[i * x_stride]);
    s = add_rn(s, mul_rn(d, d));
  }
  return s;
}

// Ordering key of kNN: NaN sorts as +inf, then by index.
PCOPS_HD float knn_key(float s) { return s != s ? INFINITY : s; }

PCOPS_HD bool knn_less(float s_a, int64_t i_a, float s_b, int64_t i_b) {
  return s_a < s_b || (s_a == s_b && i_a < i_b);
}

}  // namespace pcops::common
