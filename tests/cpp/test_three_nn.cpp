// three_nn against the float32-exact kNN oracle with k = 3: exact indices, bitwise distances,
// ties, duplicates, non-finite values, lengths (padding), strides; plus every validation error.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "oracle.hpp"
#include "pcops/error.hpp"
#include "pcops/three_nn.hpp"

namespace {

using pcops_test::Cloud;
using pcops_test::Result;

Result run_three_nn(const pcops::PointsView& u, const pcops::PointsView& k, pcops::LengthsView ul = {},
                    pcops::LengthsView kl = {}, const pcops::CpuContext& ctx = {}) {
  Result r = pcops_test::sentinel_result(u.batch * u.count * 3);
  pcops::cpu::three_nn(ctx, u, k, ul, kl, r.dist.data(), r.idx.data());
  return r;
}

void expect_exact(const pcops::PointsView& u, const pcops::PointsView& k, pcops::LengthsView ul = {},
                  pcops::LengthsView kl = {}) {
  EXPECT_TRUE(pcops_test::same_result(run_three_nn(u, k, ul, kl), pcops_test::knn_oracle(u, k, ul, kl, 3)))
      << "N=" << u.count << " M=" << k.count;
}

TEST(ThreeNn, SmallAndLargeCloudsMatchOracle) {
  std::mt19937 rng(1);
  for (int64_t m : {3, 4, 17, 300, 5000}) {
    Cloud known = pcops_test::uniform_cloud(rng, 2, m, 3);
    Cloud unknown = pcops_test::uniform_cloud(rng, 2, 200, 3, -0.1f, 1.1f);
    expect_exact(unknown.view(), known.view());
  }
}

TEST(ThreeNn, TiesAreBrokenByIndex) {
  // Six known points at distance exactly 1 from the origin, then copies: the lowest indices win.
  Cloud known(1, 9, 3);
  const float unit[6][3] = {{0, 0, 1}, {1, 0, 0}, {0, -1, 0}, {-1, 0, 0}, {0, 1, 0}, {0, 0, -1}};
  for (int i = 0; i < 3; ++i) known.at(0, i, 0) = 5.0f;
  for (int i = 0; i < 6; ++i)
    for (int d = 0; d < 3; ++d) known.at(0, 3 + i, d) = unit[i][d];
  Cloud unknown(1, 1, 3);
  const Result r = run_three_nn(unknown.view(), known.view());
  EXPECT_EQ(r.idx, (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(r.dist, (std::vector<float>{1.0f, 1.0f, 1.0f}));
  // Duplicated points (mmcv's fixture pattern): equal distances keep index order.
  std::mt19937 rng(2);
  Cloud dup = pcops_test::duplicate_cloud(rng, 4000, 30);
  Cloud q = pcops_test::pick_queries(rng, dup, 100, 0.0f);
  expect_exact(q.view(), dup.view());
  Cloud lattice = pcops_test::lattice_cloud(rng, 10);
  Cloud lq = pcops_test::pick_queries(rng, lattice, 60, 0.0f);
  for (int64_t i = 0; i < 30; ++i)
    for (int d = 0; d < 3; ++d) lq.at(0, i, d) += 0.5f;
  expect_exact(lq.view(), lattice.view());
}

TEST(ThreeNn, NonFiniteValues) {
  std::mt19937 rng(3);
  Cloud known = pcops_test::uniform_cloud(rng, 1, 2000, 3);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  for (int64_t i = 0; i < 2000; i += 97) known.at(0, i, i % 3) = nan;
  for (int64_t i = 5; i < 2000; i += 131) known.at(0, i, 1) = (i % 2) ? inf : -inf;
  Cloud unknown = pcops_test::pick_queries(rng, known, 50, 0.0f);
  unknown.at(0, 0, 0) = nan;
  unknown.at(0, 1, 2) = inf;
  unknown.at(0, 2, 1) = 3e38f;
  expect_exact(unknown.view(), known.view());
  Cloud three(1, 3, 3);
  three.at(0, 1, 0) = nan;
  Cloud one(1, 1, 3);
  const Result r = run_three_nn(one.view(), three.view());
  EXPECT_EQ(r.idx, (std::vector<int64_t>{0, 2, 1}));  // NaN sorts last, reported as +inf
  EXPECT_TRUE(std::isinf(r.dist[2]));
}

TEST(ThreeNn, LengthsPadWithInfAndMinusOne) {
  std::mt19937 rng(4);
  Cloud known = pcops_test::uniform_cloud(rng, 4, 50, 3);
  Cloud unknown = pcops_test::uniform_cloud(rng, 4, 20, 3);
  const int64_t kl[4] = {50, 2, 0, 3}, ul[4] = {20, 20, 20, 7};
  expect_exact(unknown.view(), known.view(), {ul, 4}, {kl, 4});
  const Result r = run_three_nn(unknown.view(), known.view(), {ul, 4}, {kl, 4});
  EXPECT_EQ(r.idx[(1 * 20) * 3 + 2], -1);  // cloud 1 has two known points
  EXPECT_TRUE(std::isinf(r.dist[(1 * 20) * 3 + 2]));
  EXPECT_EQ(r.idx[(2 * 20) * 3], -1);
}

TEST(ThreeNn, StridedViewsEmptyAndThreads) {
  std::mt19937 rng(5);
  Cloud known = pcops_test::uniform_cloud(rng, 2, 3000, 3);
  Cloud unknown = pcops_test::uniform_cloud(rng, 2, 300, 3);
  const Result want = pcops_test::knn_oracle(unknown.view(), known.view(), {}, {}, 3);
  EXPECT_TRUE(pcops_test::same_result(run_three_nn(unknown.strided_view(), known.strided_view()), want));
  pcops::CpuContext one;
  one.num_threads = 1;
  EXPECT_TRUE(pcops_test::same_result(run_three_nn(unknown.view(), known.view(), {}, {}, one), want));
  Cloud none(2, 0, 3);
  EXPECT_TRUE(run_three_nn(none.view(), known.view()).idx.empty());
  Cloud empty_batch(0, 5, 3), empty_known(0, 4, 3);
  EXPECT_TRUE(run_three_nn(empty_batch.view(), empty_known.view()).idx.empty());
}

void expect_value_error(const pcops::PointsView& u, const pcops::PointsView& k, pcops::LengthsView ul = {},
                        pcops::LengthsView kl = {}) {
  std::vector<float> d(64);
  std::vector<int64_t> i(64);
  try {
    pcops::cpu::three_nn({}, u, k, ul, kl, d.data(), i.data());
    ADD_FAILURE() << "expected pcops::Error";
  } catch (const pcops::Error& e) {
    EXPECT_EQ(e.kind(), pcops::ErrorKind::Value) << e.what();
  }
}

TEST(ThreeNn, RejectsBadInput) {
  std::vector<float> buf(64, 0.0f);
  const auto v = [&](int64_t b, int64_t n, int64_t d) { return pcops::PointsView::contiguous(buf.data(), b, n, d); };
  expect_value_error(v(1, 2, 3), v(1, 2, 3));  // M < 3
  expect_value_error(v(1, 2, 3), v(1, 0, 3));  // M = 0
  const int64_t three[1] = {3};
  expect_value_error(v(1, 2, 3), v(1, 2, 3), {}, {three, 1});  // M < 3 even with lengths
  expect_value_error(v(1, 2, 2), v(1, 4, 2));                  // not 3-D points
  expect_value_error(v(1, 2, 3), v(1, 4, 4));
  expect_value_error(v(1, 2, 3), v(2, 4, 3));  // batch mismatch
  const int64_t bad[1] = {5}, two[2] = {1, 1};
  expect_value_error(v(1, 2, 3), v(1, 4, 3), {}, {bad, 1});  // length > count
  expect_value_error(v(1, 2, 3), v(1, 4, 3), {two, 2}, {});  // wrong number of lengths
  expect_value_error(pcops::PointsView::contiguous(nullptr, 1, 2, 3), v(1, 4, 3));
}

}  // namespace
