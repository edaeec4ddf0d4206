#pragma once
// Branch-free selection and sorting of distinct uint64 keys, for the small candidate buffers of
// kNN and ball query (a few hundred keys per query). Comparison-driven std::nth_element and
// std::sort spend most of their time in mispredicted branches there; these versions move data
// with conditional increments instead.
#include <algorithm>
#include <cstdint>

namespace pcops::cpu::select {

// Moves the k smallest of a[0, n) into a[0, k) (in any order); 0 < k <= n. Keys must be
// distinct. tmp must hold n keys.
inline void smallest_k(uint64_t* a, int64_t n, int64_t k, uint64_t* tmp) {
  uint64_t* src = a;  // the live range is src[0, n); a[0, base) already holds selected keys
  int64_t base = 0;
  while (n > k) {
    if (n <= 24) {  // small: insertion sort the rest
      for (int64_t i = 1; i < n; ++i) {
        const uint64_t v = src[i];
        int64_t j = i;
        for (; j > 0 && src[j - 1] > v; --j) src[j] = src[j - 1];
        src[j] = v;
      }
      break;
    }
    uint64_t p0 = src[0], p1 = src[n / 2], p2 = src[n - 1];
    if (p0 > p1) std::swap(p0, p1);
    if (p1 > p2) std::swap(p1, p2);
    if (p0 > p1) std::swap(p0, p1);
    const uint64_t pivot = p1;
    // Out-of-place partition: smaller keys fill dst from the left, larger from the right, the
    // pivot (exactly one key equals it) lands in the slot left between them.
    uint64_t* dst = src == a + base ? tmp : a + base;
    int64_t l = 0, r = n - 1;
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t e = src[i];
      dst[l] = e;
      dst[r] = e;
      l += e < pivot;
      r -= e > pivot;
    }
    dst[l] = pivot;
    // dst[0, l) < pivot = dst[l] < dst(l, n)
    if (k <= l) {
      src = dst;
      n = l;
    } else {
      // dst[0, l] are selected: keep them in a, continue on the larger part.
      if (dst != a + base) std::copy(dst, dst + l + 1, a + base);
      base += l + 1;
      k -= l + 1;
      if (k == 0) return;
      src = dst + l + 1;
      n -= l + 1;
    }
  }
  if (src != a + base) std::copy(src, src + k, a + base);
}

// Sorts a[0, n) ascending; tmp must hold n keys.
inline void sort(uint64_t* a, int64_t n, uint64_t* tmp) {
  // Runs of 4 by insertion, then bottom-up branch-free merges.
  for (int64_t s = 0; s < n; s += 4) {
    const int64_t e = std::min<int64_t>(n, s + 4);
    for (int64_t i = s + 1; i < e; ++i) {
      const uint64_t v = a[i];
      int64_t j = i;
      for (; j > s && a[j - 1] > v; --j) a[j] = a[j - 1];
      a[j] = v;
    }
  }
  uint64_t* src = a;
  uint64_t* dst = tmp;
  for (int64_t w = 4; w < n; w *= 2) {
    for (int64_t s = 0; s < n; s += 2 * w) {
      const int64_t m = std::min(n, s + w), e = std::min(n, s + 2 * w);
      int64_t i = s, j = m, o = s;
      while (i < m && j < e) {
        const uint64_t x = src[i], y = src[j];
        const bool take_y = y < x;
        dst[o++] = take_y ? y : x;
        j += take_y;
        i += !take_y;
      }
      while (i < m) dst[o++] = src[i++];
      while (j < e) dst[o++] = src[j++];
    }
    std::swap(src, dst);
  }
  if (src != a) std::copy(src, src + n, a);
}

}  // namespace pcops::cpu::select
