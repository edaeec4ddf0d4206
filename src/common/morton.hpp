#pragma once
// Morton (Z-order) helpers shared by the CPU and CUDA backends.
#include <cstdint>

#include "common/macros.hpp"

namespace pcops::common {

// Spreads the low 10 bits of v to every third bit (bit i goes to bit 3 i): one coordinate of a
// 30-bit 3-D Morton code.
PCOPS_HD uint32_t spread_bits10(uint32_t v) {
  v &= 0x3ffu;
  v = (v | (v << 16)) & 0x030000ffu;
  v = (v | (v << 8)) & 0x0300f00fu;
  v = (v | (v << 4)) & 0x030c30c3u;
  v = (v | (v << 2)) & 0x09249249u;
  return v;
}

}  // namespace pcops::common
