// The selection helpers shared by kNN and ball query, against std:: algorithms on distinct keys
// of every small size (both sort paths: ranks up to 256 keys, merges above).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "cpu/topk_select.hpp"

namespace {

std::vector<uint64_t> distinct_keys(int64_t n, std::mt19937_64& rng) {
  std::vector<uint64_t> v;
  while (static_cast<int64_t>(v.size()) < n) {
    // Few distinct high words: ties in the distance, broken by the low word.
    v.push_back((rng() % 7) << 32 | (rng() & 0xFFFFFFFFu));
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  }
  std::shuffle(v.begin(), v.end(), rng);
  return v;
}

TEST(TopkSelect, SortMatchesStdSort) {
  std::mt19937_64 rng(7);
  for (int64_t n = 0; n <= 300; ++n) {
    std::vector<uint64_t> a = distinct_keys(n, rng), want = a, tmp(static_cast<size_t>(n));
    std::sort(want.begin(), want.end());
    pcops::cpu::select::sort(a.data(), n, tmp.data());
    ASSERT_EQ(a, want) << "n = " << n;
  }
  std::vector<uint64_t> extremes = {UINT64_MAX, 0, uint64_t{1} << 63, (uint64_t{1} << 63) - 1, 1};
  std::vector<uint64_t> want = extremes, tmp(extremes.size());
  std::sort(want.begin(), want.end());
  pcops::cpu::select::sort(extremes.data(), static_cast<int64_t>(extremes.size()), tmp.data());
  EXPECT_EQ(extremes, want);
}

TEST(TopkSelect, SmallestKMatchesNthElement) {
  std::mt19937_64 rng(11);
  for (int64_t n = 1; n <= 300; n += 7) {
    for (int64_t k = 1; k <= n; k += std::max<int64_t>(1, n / 5)) {
      std::vector<uint64_t> a = distinct_keys(n, rng), want = a, tmp(static_cast<size_t>(n));
      std::sort(want.begin(), want.end());
      pcops::cpu::select::smallest_k(a.data(), n, k, tmp.data());
      std::sort(a.begin(), a.begin() + k);
      ASSERT_TRUE(std::equal(a.begin(), a.begin() + k, want.begin())) << n << " " << k;
    }
  }
}

// The streaming selector, every k from 1 to 40 (k <= 16: the sorted 16-slot array on AVX-512
// machines; above: the buffer cut by smallest_k) and streams shorter and longer than k, reused
// after reset: the kept values are the k smallest, ascending, and the threshold is never below the
// true k-th smallest seen (so no value that belongs is refused).
TEST(TopkSelect, SmallestKStreamsMatchSorting) {
  std::mt19937_64 rng(13);
  for (int64_t k = 1; k <= 40; ++k) {
    pcops::cpu::select::SmallestK best(k);
    for (int64_t n : {int64_t{0}, int64_t{1}, k - 1, k, k + 1, 3 * k + 5, int64_t{400}}) {
      if (n < 0) continue;
      best.reset();
      EXPECT_EQ(best.threshold(), UINT64_MAX);
      const std::vector<uint64_t> a = distinct_keys(n, rng);
      std::vector<uint64_t> seen;
      for (const uint64_t v : a) {
        best.push(v);
        seen.push_back(v);
        if (static_cast<int64_t>(seen.size()) >= k) {
          std::nth_element(seen.begin(), seen.begin() + (k - 1), seen.end());
          ASSERT_GE(best.threshold(), seen[static_cast<size_t>(k - 1)]) << "k = " << k << ", n = " << n;
        } else {
          ASSERT_EQ(best.threshold(), UINT64_MAX) << "k = " << k << ", n = " << n;
        }
      }
      std::vector<uint64_t> want = a;
      std::sort(want.begin(), want.end());
      want.resize(static_cast<size_t>(std::min(k, n)));
      const int64_t got = best.finish();
      ASSERT_EQ(got, static_cast<int64_t>(want.size())) << "k = " << k << ", n = " << n;
      EXPECT_TRUE(std::equal(want.begin(), want.end(), best.data())) << "k = " << k << ", n = " << n;
    }
  }
}

}  // namespace
