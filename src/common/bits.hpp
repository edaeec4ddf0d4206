#pragma once
// Bit widths of packed sort keys, shared by the CPU and CUDA backends (host code).
#include <algorithm>
#include <bit>
#include <cstdint>

namespace pcops::common {

// Bits that hold every value in [0, max_value] (at least 1).
inline int bits_for(uint64_t max_value) { return std::max(1, static_cast<int>(std::bit_width(max_value))); }

}  // namespace pcops::common
