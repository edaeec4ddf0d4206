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

// ordered_sum: groups of this many consecutive values are summed left to right, level by level.
constexpr int64_t kSumGroup = 32;

}  // namespace pcops::common::nn
