#pragma once
// The arithmetic of nearest_neighbor's contract in float32 and float64, shared by the CPU and
// CUDA backends: one rounding per operation (the device intrinsics name the rounding; host code
// is compiled with -ffp-contract=off), so both backends compute the same bits.
#include <cmath>
#include <cstdint>

#include "common/distance.hpp"
#include "common/macros.hpp"

namespace pcops::common::nn {

PCOPS_HD float sub(float a, float b) { return sub_rn(a, b); }
PCOPS_HD float mul(float a, float b) { return mul_rn(a, b); }
PCOPS_HD float add(float a, float b) { return add_rn(a, b); }
PCOPS_HD float abs(float a) { return fabsf(a); }

#if defined(__CUDA_ARCH__)
PCOPS_HD double sub(double a, double b) { return __dsub_rn(a, b); }
PCOPS_HD double mul(double a, double b) { return __dmul_rn(a, b); }
PCOPS_HD double add(double a, double b) { return __dadd_rn(a, b); }
#else
PCOPS_HD double sub(double a, double b) { return a - b; }
PCOPS_HD double mul(double a, double b) { return a * b; }
PCOPS_HD double add(double a, double b) { return a + b; }
#endif
PCOPS_HD double abs(double a) { return fabs(a); }

// Correctly rounded square roots (IEEE; the device intrinsics name the rounding).
#if defined(__CUDA_ARCH__)
PCOPS_HD float sqrt_rn(float a) { return __fsqrt_rn(a); }
PCOPS_HD double sqrt_rn(double a) { return __dsqrt_rn(a); }
#else
PCOPS_HD float sqrt_rn(float a) { return std::sqrt(a); }
PCOPS_HD double sqrt_rn(double a) { return std::sqrt(a); }
#endif

// One coordinate's term of s: d*d (norm 2) or |d| (norm 1).
template <int Norm, class T>
PCOPS_HD T term(T d) {
  if constexpr (Norm == 2) return mul(d, d);
  else return abs(d);
}

// The selection key: NaN ranks as +inf.
template <class T>
PCOPS_HD T key(T s) {
  return s != s ? static_cast<T>(INFINITY) : s;
}

// ordered_norm: the squares of v[0 .. n) added left to right, then the rounded square root.
template <class T>
PCOPS_HD T ordered_norm(const T* v, int64_t n) {
  if (n == 0) return T(0);
  T acc = mul(v[0], v[0]);
  for (int64_t c = 1; c < n; ++c) acc = add(acc, mul(v[c], v[c]));
  return sqrt_rn(acc);
}

// ordered_sum: groups of this many consecutive values are summed left to right, level by level.
constexpr int64_t kSumGroup = 32;

}  // namespace pcops::common::nn
