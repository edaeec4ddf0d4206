#pragma once
// The kernel cell of point_conv's triplet construction (pcops/point_conv.hpp), shared by the CPU
// and CUDA backends: one IEEE rounding per operation and nothing contracted, so both compute the
// same cells.
#include <cmath>
#include <cstdint>

#include "common/macros.hpp"

namespace pcops::common::point_conv {

// The side of a kernel cell: fl(fl(2 extent) / t).
PCOPS_HD float cell_side(float extent, int64_t t) { return (extent * 2.0f) / static_cast<float>(t); }

// The kernel cell of offset p - c in the cube [-extent, extent]^3 with t cells of side h per axis:
// per axis q = clamp(floor(fl(fl(fl(p - c) + extent) / h)), 0, t - 1), then (q_0 t + q_1) t + q_2.
PCOPS_HD int64_t kernel_cell(const float* p, const float* c, float extent, float h, int64_t t) {
  const float top = static_cast<float>(t - 1);
  int64_t cell = 0;
  for (int a = 0; a < 3; ++a) {
#if defined(__CUDA_ARCH__)
    const float v = floorf(__fdiv_rn(__fadd_rn(__fsub_rn(p[a], c[a]), extent), h));
#else
    const float v = std::floor(((p[a] - c[a]) + extent) / h);
#endif
    cell = cell * t + static_cast<int64_t>(v < 0.0f ? 0.0f : v > top ? top : v);
  }
  return cell;
}

}  // namespace pcops::common::point_conv
