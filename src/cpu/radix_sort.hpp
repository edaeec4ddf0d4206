#pragma once
// Stable LSD radix sort of records by the low `bits` bits of a 64-bit key (CPU backend).
#include <cstdint>
#include <vector>

namespace pcops::cpu {

// key(record) -> uint64_t; 11-bit digits keep the histogram and the scatter targets cache-friendly.
template <class T, class Key>
void radix_sort(std::vector<T>& a, int bits, Key key) {
  constexpr int kDigit = 11;
  constexpr uint64_t kMask = (uint64_t{1} << kDigit) - 1;
  if (a.size() < 2) return;
  std::vector<T> tmp(a.size());
  std::vector<size_t> hist(size_t{1} << kDigit);
  for (int shift = 0; shift < bits; shift += kDigit) {
    std::fill(hist.begin(), hist.end(), 0);
    for (const T& x : a) ++hist[(key(x) >> shift) & kMask];
    size_t sum = 0;
    for (size_t& h : hist) {
      const size_t c = h;
      h = sum;
      sum += c;
    }
    for (const T& x : a) tmp[hist[(key(x) >> shift) & kMask]++] = x;
    a.swap(tmp);
  }
}

}  // namespace pcops::cpu
