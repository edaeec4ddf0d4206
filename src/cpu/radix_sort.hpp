#pragma once
// Stable LSD radix sort of records by the low `bits` bits of a 64-bit key (CPU backend).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "pcops/context.hpp"

namespace pcops::cpu {

struct RadixSortPolicy {
  static constexpr int kDigit = 11;               // 2048 buckets: histograms and scatter targets stay in cache
  static constexpr int64_t kChunk = int64_t{1} << 15;  // records per worker chunk at least
};

// key(record) -> uint64_t; bits at or above `bits` are ignored. The records are cut into at most
// max_threads(ctx) contiguous chunks of at least kChunk; each pass counts the digits of every
// chunk, then every chunk scatters its records to (digit, chunk) offsets, so records of one digit
// keep their order: the same stable order for any number of chunks. A pass whose digit is the
// same for every record is skipped.
template <class T, class Key>
void radix_sort(const CpuContext& ctx, std::vector<T>& a, int bits, Key key) {
  constexpr int kDigit = RadixSortPolicy::kDigit;
  constexpr size_t R = size_t{1} << kDigit;
  const int64_t n = static_cast<int64_t>(a.size());
  if (n < 2) return;
  const int64_t chunks =
      std::clamp<int64_t>(n / RadixSortPolicy::kChunk, 1, std::max<int64_t>(1, max_threads(ctx)));
  const auto lo = [n, chunks](int64_t c) { return n * c / chunks; };
  std::vector<T> tmp(a.size());
  std::vector<size_t> hist(static_cast<size_t>(chunks) * R);
  for (int shift = 0; shift < bits; shift += kDigit) {
    const uint64_t mask = (uint64_t{1} << std::min(kDigit, bits - shift)) - 1;  // the last: what `bits` leaves
    const T* src = a.data();
    T* dst = tmp.data();
    size_t* hp = hist.data();
    const auto count = [=](int64_t c) {
      size_t* h = hp + static_cast<size_t>(c) * R;
      std::fill(h, h + R, 0);
      const int64_t e = lo(c + 1);
      for (int64_t p = lo(c); p < e; ++p) ++h[(key(src[p]) >> shift) & mask];
    };
    const auto scatter = [=](int64_t c) {
      size_t* h = hp + static_cast<size_t>(c) * R;
      const int64_t e = lo(c + 1);
      for (int64_t p = lo(c); p < e; ++p) dst[h[(key(src[p]) >> shift) & mask]++] = src[p];
    };
    const auto each_chunk = [&](const auto& fn) {  // one chunk runs inline
      parallel_for(ctx, 0, chunks, 1, [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) fn(c);
      });
    };
    each_chunk(count);
    // Offsets digit-major, chunk-minor; a digit holding every record makes the pass a no-op.
    size_t sum = 0;
    bool trivial = false;
    for (size_t d = 0; d <= mask; ++d) {
      const size_t start = sum;
      for (int64_t c = 0; c < chunks; ++c) {
        size_t& h = hp[static_cast<size_t>(c) * R + d];
        const size_t in_chunk = h;
        h = sum;
        sum += in_chunk;
      }
      trivial = trivial || sum - start == static_cast<size_t>(n);
    }
    if (trivial) continue;
    each_chunk(scatter);
    a.swap(tmp);
  }
}

}  // namespace pcops::cpu
