// The tensor-core MVMR's chunk-sum flags (common/point_conv_runs.hpp), computed from the chunk's run
// mask, against their definitions on the chunk's destination rows: every fragment and lane of
// random chunks (runs of every length, chunks full, partial and empty), so that the kernel's sums
// take the same steps, and the same bits, as the scans written out row by row.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "common/point_conv_runs.hpp"

namespace {

namespace pr = pcops::point_conv_runs;
constexpr uint8_t kPast = 0xff;
constexpr int kRows = pr::kChunkRows;

// A chunk of n rows in ascending destination order (runs of 1 .. max_run rows), kPast after.
std::vector<uint8_t> chunk(std::mt19937& rng, int n, int max_run) {
  std::vector<uint8_t> rows(kRows, kPast);
  std::uniform_int_distribution<int> len(1, max_run), gap(1, 2);
  int r = 0, dest = std::uniform_int_distribution<int>(0, 1)(rng);  // at most 1 + 63 * 2 = 127
  while (r < n) {
    const int l = len(rng);
    for (int i = 0; i < l && r < n; ++i) rows[r++] = static_cast<uint8_t>(dest);
    dest += gap(rng);
  }
  return rows;
}

void check_chunk(const std::vector<uint8_t>& rows, int n) {
  const uint64_t cont = pr::continue_mask(rows.data(), kPast);
  for (int r = 0; r < kRows; ++r)
    ASSERT_EQ((cont >> r) & 1u, r >= 1 && r < n && rows[r] == rows[r - 1]) << "row " << r;
  for (int a = 0; a < kRows; ++a)
    for (int b = a + 1; b < kRows; ++b)
      ASSERT_EQ(pr::one_run(cont, a, b), rows[a] != kPast && rows[a] == rows[b]) << a << ".." << b;
  for (int f0 = 0; f0 + 16 <= kRows; f0 += 16) {
    bool need_l[3] = {}, need_h[3] = {}, need_join = false;
    for (int g = 0; g < 8; ++g) {
      const int rl = f0 + g, rh = f0 + 8 + g;
      const bool vl = rl < n, vh = rh < n;
      const pr::RunFlags f = pr::run_flags(cont, f0, g, vl, vh);
      for (int st = 0; st < 3; ++st) {
        const int d = 1 << st;
        const bool same_l = g >= d && vl && rows[rl - d] == rows[rl];
        const bool same_h = g >= d && vh && rows[rh - d] == rows[rh];
        ASSERT_EQ(f.same_l[st], same_l) << "f0 " << f0 << " g " << g << " step " << st;
        ASSERT_EQ(f.same_h[st], same_h) << "f0 " << f0 << " g " << g << " step " << st;
        need_l[st] |= same_l, need_h[st] |= same_h;
      }
      ASSERT_EQ(f.tail_l, vl && rows[rl + 1] != rows[rl]) << "f0 " << f0 << " g " << g;
      ASSERT_EQ(f.tail_h, vh && (g == 7 || rows[rh + 1] != rows[rh])) << "f0 " << f0 << " g " << g;
      const bool join = vh && rows[rh] == rows[f0 + 7];
      ASSERT_EQ(f.join, join) << "f0 " << f0 << " g " << g;
      need_join |= join;
    }
    for (int g = 0; g < 8; ++g) {  // the warp-wide flags, the same in every lane
      const pr::RunFlags f = pr::run_flags(cont, f0, g, f0 + g < n, f0 + 8 + g < n);
      for (int st = 0; st < 3; ++st) {
        ASSERT_EQ(f.need_l[st], need_l[st]) << "f0 " << f0 << " step " << st;
        ASSERT_EQ(f.need_h[st], need_h[st]) << "f0 " << f0 << " step " << st;
      }
      ASSERT_EQ(f.need_join, need_join) << "f0 " << f0;
    }
  }
}

TEST(PointConvRuns, FlagsFromTheMaskMatchTheRows) {
  std::mt19937 rng(20261202);
  int with_join = 0, with_step2 = 0, covering = 0;
  for (int max_run : {1, 2, 3, 5, 9, 17, 40, 64}) {
    for (int it = 0; it < 300; ++it) {
      const int n = it % 5 == 0 ? kRows : std::uniform_int_distribution<int>(0, kRows)(rng);
      const std::vector<uint8_t> rows = chunk(rng, n, max_run);
      ASSERT_NO_FATAL_FAILURE(check_chunk(rows, n));
      const uint64_t cont = pr::continue_mask(rows.data(), kPast);
      for (int f0 = 0; f0 < kRows; f0 += 16) {
        with_join += pr::run_flags(cont, f0, 0, true, true).need_join;
        with_step2 += pr::run_flags(cont, f0, 0, true, true).need_l[2];
      }
      covering += pr::one_run(cont, 15, 32);
    }
  }
  // The cases the flags exist for did occur.
  EXPECT_GT(with_join, 100);
  EXPECT_GT(with_step2, 100);
  EXPECT_GT(covering, 10);
}

TEST(PointConvRuns, EdgeChunks) {
  std::vector<uint8_t> rows(kRows, kPast);
  ASSERT_NO_FATAL_FAILURE(check_chunk(rows, 0));  // empty: no run, no tail
  EXPECT_EQ(pr::continue_mask(rows.data(), kPast), 0u);
  rows.assign(kRows, 7);  // one run over the whole chunk
  ASSERT_NO_FATAL_FAILURE(check_chunk(rows, kRows));
  EXPECT_EQ(pr::continue_mask(rows.data(), kPast), ~uint64_t{1});
  EXPECT_TRUE(pr::one_run(pr::continue_mask(rows.data(), kPast), 0, 63));
  for (int r = 0; r < kRows; ++r) rows[r] = static_cast<uint8_t>(r);  // 64 runs of one row
  ASSERT_NO_FATAL_FAILURE(check_chunk(rows, kRows));
  EXPECT_EQ(pr::continue_mask(rows.data(), kPast), 0u);
  rows.assign(kRows, kPast);  // one row, then past
  rows[0] = 3;
  ASSERT_NO_FATAL_FAILURE(check_chunk(rows, 1));
  EXPECT_TRUE(pr::run_flags(0, 0, 0, true, false).tail_l);
}

}  // namespace
