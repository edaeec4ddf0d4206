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

// Spreads the low 16 bits of v to every third bit of a 48-bit value: one coordinate of a 48-bit
// 3-D Morton code.
PCOPS_HD uint64_t spread_bits16(uint64_t v) {
  v &= 0xFFFFu;
  v = (v | (v << 16)) & 0x0000FF0000FFull;
  v = (v | (v << 8)) & 0x00F00F00F00Full;
  v = (v | (v << 4)) & 0x0C30C30C30C3ull;
  v = (v | (v << 2)) & 0x249249249249ull;
  return v;
}

}  // namespace pcops::common
