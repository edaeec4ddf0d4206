// The CPU backend's stable LSD radix sort against std::stable_sort: every record (key and its
// original position) in the same place for sizes around the chunking, key widths that are and are
// not multiples of the digit, keys with few distinct digits (skipped passes) and any number of
// workers, including a parallel_for that runs the chunks in reverse order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "cpu/radix_sort.hpp"
#include "pcops/context.hpp"

namespace {

struct Rec {
  uint64_t key;
  int64_t pos;
};

// A parallel_for that runs the chunks one after the other, last chunk first.
pcops::CpuContext reversed_context(int threads) {
  pcops::CpuContext ctx;
  ctx.num_threads = threads;
  ctx.parallel_for = [](int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& body) {
    const int64_t g = std::max<int64_t>(grain, 1);
    std::vector<std::pair<int64_t, int64_t>> parts;
    for (int64_t b = begin; b < end; b += g) parts.emplace_back(b, std::min(end, b + g));
    for (auto it = parts.rbegin(); it != parts.rend(); ++it) body(it->first, it->second);
  };
  return ctx;
}

void expect_sorted_like_std(const pcops::CpuContext& ctx, int64_t n, int bits, uint64_t key_mask, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Rec> a(static_cast<size_t>(n));
  for (int64_t p = 0; p < n; ++p) a[static_cast<size_t>(p)] = Rec{rng() & key_mask, p};
  std::vector<Rec> want = a;
  std::stable_sort(want.begin(), want.end(), [](const Rec& x, const Rec& y) { return x.key < y.key; });
  pcops::cpu::radix_sort(ctx, a, bits, [](const Rec& r) { return r.key; });
  ASSERT_EQ(a.size(), want.size());
  for (size_t p = 0; p < a.size(); ++p) {
    ASSERT_EQ(a[p].key, want[p].key) << "n " << n << " bits " << bits << " at " << p;
    ASSERT_EQ(a[p].pos, want[p].pos) << "n " << n << " bits " << bits << " at " << p << " (not stable)";
  }
}

TEST(RadixSort, StableLikeStdStableSort) {
  constexpr int64_t kChunk = pcops::cpu::RadixSortPolicy::kChunk;
  const std::vector<int64_t> sizes{0, 1, 2, 3, 100, kChunk - 1, 2 * kChunk, 2 * kChunk + 1, 5 * kChunk + 77};
  for (int threads : {1, 2, 3, 8}) {
    pcops::CpuContext pool;
    pool.num_threads = threads;
    const pcops::CpuContext reversed = reversed_context(threads);
    for (const pcops::CpuContext* ctx : std::vector<const pcops::CpuContext*>{&pool, &reversed}) {
      for (int64_t n : sizes) {
        SCOPED_TRACE(testing::Message() << "threads " << threads << " n " << n);
        expect_sorted_like_std(*ctx, n, 35, (uint64_t{1} << 35) - 1, 11 + n);       // 11 + 11 + 11 + 2 bits
        expect_sorted_like_std(*ctx, n, 64, ~uint64_t{0}, 12 + n);                   // every bit
        expect_sorted_like_std(*ctx, n, 22, 0xF, 13 + n);                            // a digit with one value
        expect_sorted_like_std(*ctx, n, 33, uint64_t{0x3} << 31 | 0x7, 14 + n);      // few distinct keys, ties
      }
    }
  }
}

// Keys above `bits` are ignored: the records keep their order among equal low bits.
TEST(RadixSort, SortsOnlyTheLowBits) {
  pcops::CpuContext ctx;
  ctx.num_threads = 4;
  const int64_t n = 3 * pcops::cpu::RadixSortPolicy::kChunk + 5;
  std::mt19937_64 rng(3);
  std::vector<Rec> a(static_cast<size_t>(n));
  for (int64_t p = 0; p < n; ++p) a[static_cast<size_t>(p)] = Rec{rng(), p};
  std::vector<Rec> want = a;
  std::stable_sort(want.begin(), want.end(),
                   [](const Rec& x, const Rec& y) { return (x.key & 0xFFFFF) < (y.key & 0xFFFFF); });
  pcops::cpu::radix_sort(ctx, a, 20, [](const Rec& r) { return r.key; });
  for (size_t p = 0; p < a.size(); ++p) ASSERT_EQ(a[p].pos, want[p].pos) << p;
}

}  // namespace
