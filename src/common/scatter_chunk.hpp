#pragma once
// The chunk rule of the scatter / segment contract (include/pcops/scatter.hpp), one constant for
// the CPU and CUDA backends: a sum / mean / mul element whose list has more than kScatterChunk
// contributions folds it as consecutive chunks of kScatterChunk contributions (ascending source
// order), each chunk a serial fold (chunk 0 from the start value, every later one from its own
// first contribution), then combines the chunk partials left to right. Lists of at most
// kScatterChunk contributions are one chunk: a plain serial fold. Max / min give the serial
// fold's result whatever the split (backends fold their later chunks from the identity).
#include <cstdint>

#include "common/macros.hpp"

namespace pcops::common {

inline constexpr int64_t kScatterChunk = 2048;  // a power of two
static_assert((kScatterChunk & (kScatterChunk - 1)) == 0, "kScatterChunk must be a power of two");

// Number of chunks of a list of n contributions (1 for n <= kScatterChunk, also for n == 0).
constexpr PCOPS_HD int64_t scatter_chunks(int64_t n) {
  return n <= kScatterChunk ? 1 : (n + kScatterChunk - 1) / kScatterChunk;
}

}  // namespace pcops::common
