// voxelize against a brute-force oracle (std::map keyed by (batch, cells)): floor cells, voxel
// order, stable point order, dropped points, both sort paths, bad input and overflow guards.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "pcops/error.hpp"
#include "pcops/voxelize.hpp"
#include "voxelize_run.hpp"

namespace {

using Result = pcops_test::VoxelResult;

template <class T>
Result run(const std::vector<T>& pts, int64_t D, const std::vector<T>& size, const T* start, const T* end,
           const std::vector<int64_t>* ptr) {
  return pcops_test::voxelize_cpu(pts, D, size, start, end, ptr);
}

template <class T>
void check_oracle(const std::vector<T>& pts, int64_t D, const std::vector<T>& size, const T* start, const T* end,
                  const std::vector<int64_t>* ptr) {
  const int64_t N = static_cast<int64_t>(pts.size()) / D;
  const Result r = run(pts, D, size, start, end, ptr);
  std::map<std::vector<int64_t>, std::vector<int64_t>> groups;  // (batch, cells) -> points
  std::vector<int64_t> dropped;
  for (int64_t n = 0; n < N; ++n) {
    int64_t b = 0;
    if (ptr)
      while ((*ptr)[b + 1] <= n) ++b;
    std::vector<int64_t> key{b};
    bool keep = true;
    for (int64_t d = 0; d < D; ++d) {
      const T p = pts[n * D + d], s = start ? start[d] : T(0);
      if (!std::isfinite(p) || (end && (p < s || p > end[d]))) keep = false;
      key.push_back(keep ? static_cast<int64_t>(std::floor(static_cast<T>(p - s) / size[d])) : 0);
    }
    if (keep) groups[key].push_back(n);
    else dropped.push_back(n);
  }
  ASSERT_EQ(r.V, static_cast<int64_t>(groups.size()));
  int64_t v = 0, j = 0;
  for (const auto& [key, members] : groups) {
    EXPECT_EQ(r.batch[v], key[0]);
    for (int64_t d = 0; d < D; ++d) EXPECT_EQ(r.coords[v * D + d], key[d + 1]);
    EXPECT_EQ(r.counts[v], static_cast<int64_t>(members.size()));
    EXPECT_EQ(r.ptr[v], j);
    for (int64_t n : members) {
      EXPECT_EQ(r.perm[j++], n);
      EXPECT_EQ(r.id[n], v);
    }
    ++v;
  }
  EXPECT_EQ(r.ptr[r.V], j);
  for (int64_t n : dropped) {
    EXPECT_EQ(r.perm[j++], n);
    EXPECT_EQ(r.id[n], -1);
  }
}

TEST(Voxelize, RandomCloudsMatchOracle) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-3.f, 3.f);
  std::vector<float> pts(3000 * 3);
  for (auto& x : pts) x = u(rng);
  pts[5] = std::numeric_limits<float>::quiet_NaN();
  pts[9] = std::numeric_limits<float>::infinity();
  const std::vector<float> size{0.5f, 0.25f, 1.0f};
  check_oracle<float>(pts, 3, size, nullptr, nullptr, nullptr);
  const std::vector<float> start{-1.f, -2.f, -0.5f}, end{2.f, 1.f, 2.5f};
  check_oracle<float>(pts, 3, size, start.data(), end.data(), nullptr);
  const std::vector<int64_t> ptr{0, 1000, 1000, 2999, 3000};
  check_oracle<float>(pts, 3, size, start.data(), nullptr, &ptr);
  std::vector<double> pd(pts.begin(), pts.end());
  check_oracle<double>(pd, 3, {0.3, 0.3, 0.3}, nullptr, nullptr, &ptr);
  // 2-D and 1-D points.
  check_oracle<float>(pts, 2, {0.7f, 0.1f}, nullptr, nullptr, nullptr);
  check_oracle<float>(pts, 1, {0.05f}, nullptr, nullptr, nullptr);
}

TEST(Voxelize, WideRangesUseTheComparisonSort) {
  // Cells spanning ~2^61 in each of three dims do not fit one 63-bit key.
  std::vector<double> pts{1e18, -1e18, 3, -1e18, 1e18, 3, 1e18, -1e18, 3, 0, 0, 0};
  check_oracle<double>(pts, 3, {1.0, 1.0, 1.0}, nullptr, nullptr, nullptr);
}

TEST(Voxelize, FloorNotTrunc) {
  const std::vector<float> pts{-0.1f, 0.1f, -1.0f, 0.99f};
  const Result r = run<float>(pts, 1, {1.0f}, nullptr, nullptr, nullptr);
  EXPECT_EQ(r.V, 2);
  EXPECT_EQ(r.coords, (std::vector<int64_t>{-1, 0}));
  EXPECT_EQ(r.id, (std::vector<int64_t>{0, 1, 0, 1}));
  EXPECT_EQ(r.perm, (std::vector<int64_t>{0, 2, 1, 3}));
}

TEST(Voxelize, BadInputAndOverflow) {
  const std::vector<float> pts{0, 0, 1, 1};
  const std::vector<float> zero{0.f, 1.f}, ok{1.f, 1.f};
  EXPECT_THROW(run<float>(pts, 2, zero, nullptr, nullptr, nullptr), pcops::Error);
  const std::vector<float> start{2.f, 2.f}, end{1.f, 1.f};
  EXPECT_THROW(run<float>(pts, 2, ok, start.data(), end.data(), nullptr), pcops::Error);
  const std::vector<int64_t> bad_ptr{0, 3};
  EXPECT_THROW(run<float>(pts, 2, ok, nullptr, nullptr, &bad_ptr), pcops::Error);
  const std::vector<float> huge{3e38f, 0.f};
  EXPECT_THROW(run<float>(huge, 2, {1e-10f, 1.f}, nullptr, nullptr, nullptr), pcops::Error);
  const Result empty = run<float>({}, 3, {1.f, 1.f, 1.f}, nullptr, nullptr, nullptr);
  EXPECT_EQ(empty.V, 0);
  EXPECT_EQ(empty.ptr, (std::vector<int64_t>{0}));
}

}  // namespace
