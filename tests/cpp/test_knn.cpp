// kNN against the float32-exact brute-force oracle: exact indices, bitwise distances, on inputs
// that exercise both the grid search and the brute force, ties, non-finite and extreme values,
// lengths, strides and thread counts; plus every validation error.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "oracle.hpp"
#include "pcops/error.hpp"
#include "pcops/knn.hpp"

namespace {

using pcops_test::Cloud;
using pcops_test::Result;

Result run_knn(const pcops::PointsView& q, const pcops::PointsView& x, int64_t k,
               pcops::LengthsView ql = {}, pcops::LengthsView xl = {},
               const pcops::CpuContext& ctx = {}) {
  Result r = pcops_test::sentinel_result(q.batch * q.count * k);
  pcops::cpu::knn(ctx, q, x, ql, xl, pcops::KnnParams{k}, r.dist.data(), r.idx.data());
  return r;
}

void expect_exact(const pcops::PointsView& q, const pcops::PointsView& x, int64_t k,
                  pcops::LengthsView ql = {}, pcops::LengthsView xl = {}) {
  EXPECT_TRUE(pcops_test::same_result(run_knn(q, x, k, ql, xl),
                                      pcops_test::knn_oracle(q, x, ql, xl, k)))
      << "k=" << k << " N=" << x.count << " M=" << q.count << " D=" << x.dim;
}

TEST(Knn, UniformMatchesOracle) {
  std::mt19937 rng(1);
  Cloud x = pcops_test::uniform_cloud(rng, 1, 6000, 3);
  Cloud q = pcops_test::uniform_cloud(rng, 1, 100, 3, -0.2f, 1.2f);  // some outside the box
  for (int64_t k : {1, 5, 16, 100}) expect_exact(q.view(), x.view(), k);
}

TEST(Knn, QueriesFarOutsideTheCloud) {
  std::mt19937 rng(2);
  Cloud x = pcops_test::uniform_cloud(rng, 1, 3000, 3);
  Cloud q = pcops_test::uniform_cloud(rng, 1, 40, 3, -50.0f, 50.0f);
  expect_exact(q.view(), x.view(), 9);
}

TEST(Knn, SpatiallySortedInput) {
  std::mt19937 rng(3);
  Cloud x = pcops_test::uniform_cloud(rng, 1, 8000, 3);
  pcops_test::spatial_sort(x);
  Cloud q = pcops_test::pick_queries(rng, x, 150, 0.0f);
  expect_exact(q.view(), x.view(), 32);
  // Every point a query (queries processed in cell order); 200 rows checked against the oracle.
  const Result graph = run_knn(x.view(), x.view(), 6);
  Cloud sub(1, 200, 3);
  std::vector<int64_t> rows(200);
  for (int64_t i = 0; i < 200; ++i) {
    rows[i] = (i * 7919) % x.count;
    for (int d = 0; d < 3; ++d) sub.at(0, i, d) = x.at(0, rows[i], d);
  }
  const Result want = pcops_test::knn_oracle(sub.view(), x.view(), {}, {}, 6);
  Result got = pcops_test::sentinel_result(200 * 6);
  for (int64_t i = 0; i < 200; ++i)
    for (int64_t t = 0; t < 6; ++t) {
      got.dist[i * 6 + t] = graph.dist[rows[i] * 6 + t];
      got.idx[i * 6 + t] = graph.idx[rows[i] * 6 + t];
    }
  EXPECT_TRUE(pcops_test::same_result(got, want));
}

TEST(Knn, GraphOfTiesAndNonFinitePoints) {
  // Every point a query: the queries of a cell share one gathered block of their near cells.
  std::mt19937 rng(18);
  Cloud x = pcops_test::duplicate_cloud(rng, 5000, 40);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  for (int64_t i = 0; i < 5000; i += 211) x.at(0, i, i % 3) = nan;
  for (int64_t i = 3; i < 5000; i += 307) x.at(0, i, (i + 1) % 3) = (i % 2) ? inf : -inf;
  for (int64_t k : {1, 16, 57}) expect_exact(x.view(), x.view(), k);
  Cloud s = pcops_test::shell_cloud(rng, 6000);
  pcops_test::spatial_sort(s);
  expect_exact(s.view(), s.view(), 16);
}

TEST(Knn, DuplicateHeavyTies) {
  std::mt19937 rng(4);
  Cloud x = pcops_test::duplicate_cloud(rng, 5000, 40);
  Cloud q = pcops_test::pick_queries(rng, x, 100, 0.0f);
  for (int64_t k : {1, 30, 200, 1000}) expect_exact(q.view(), x.view(), k);
}

TEST(Knn, IntegerLatticeExactTies) {
  std::mt19937 rng(5);
  Cloud x = pcops_test::lattice_cloud(rng, 14);  // 2744 points
  Cloud q = pcops_test::pick_queries(rng, x, 120, 0.0f);
  for (int64_t i = 0; i < 40; ++i)  // half-integer queries: up to 8 equidistant neighbours
    for (int d = 0; d < 3; ++d) q.at(0, i, d) += 0.5f;
  for (int64_t k : {1, 6, 7, 27, 100}) expect_exact(q.view(), x.view(), k);
}

TEST(Knn, SurfaceAndVaryingDensity) {
  std::mt19937 rng(6);
  Cloud s = pcops_test::shell_cloud(rng, 12000);
  Cloud qs = pcops_test::pick_queries(rng, s, 120, 0.0f);
  expect_exact(qs.view(), s.view(), 48);
  Cloud c = pcops_test::clustered_cloud(rng, 12000);
  Cloud qc = pcops_test::pick_queries(rng, c, 120, 0.01f);
  expect_exact(qc.view(), c.view(), 20);
}

TEST(Knn, RealClouds) {
  std::mt19937 rng(7);
  for (const char* name : {"radar.xyz", "b9_training.ply", "ChineseDragon-10kv.off"}) {
    const Cloud& x = pcops_test::cached_cloud(name, rng);
    ASSERT_GT(x.count, 1000) << name;
    Cloud q = pcops_test::pick_queries(rng, x, 40, 0.0f);
    expect_exact(q.view(), x.view(), 16);
  }
}

TEST(Knn, NonFiniteAndHugeCoordinates) {
  std::mt19937 rng(8);
  Cloud x = pcops_test::uniform_cloud(rng, 1, 3000, 3);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  for (int64_t i = 0; i < 3000; i += 97) x.at(0, i, i % 3) = nan;
  for (int64_t i = 5; i < 3000; i += 131) x.at(0, i, (i + 1) % 3) = (i % 2) ? inf : -inf;
  for (int64_t i = 7; i < 3000; i += 89) x.at(0, i, 0) = (i % 2 ? 1e30f : -3e38f);
  Cloud q = pcops_test::pick_queries(rng, x, 64, 0.0f);
  q.at(0, 0, 0) = nan;
  q.at(0, 1, 1) = inf;
  q.at(0, 2, 2) = -inf;
  q.at(0, 3, 0) = 2e38f;  // every s overflows to +inf for most references
  q.at(0, 4, 0) = 1e30f;
  expect_exact(q.view(), x.view(), 1);
  expect_exact(q.view(), x.view(), 24);
  expect_exact(q.view(), x.view(), 3000);  // k = N: every slot, +inf ties ordered by index
}

TEST(Knn, AllHugeValuesOverflow) {
  std::mt19937 rng(9);
  Cloud x = pcops_test::uniform_cloud(rng, 1, 2000, 3, -3e38f, 3e38f);
  Cloud q = pcops_test::uniform_cloud(rng, 1, 40, 3, -3e38f, 3e38f);
  expect_exact(q.view(), x.view(), 10);
}

TEST(Knn, SubnormalCoordinates) {
  std::mt19937 rng(10);
  Cloud x = pcops_test::uniform_cloud(rng, 1, 2000, 3, -1e-38f, 1e-38f);
  Cloud q = pcops_test::pick_queries(rng, x, 40, 1e-39f);
  expect_exact(q.view(), x.view(), 8);
}

TEST(Knn, EmptyCloudsAndZeroK) {
  std::mt19937 rng(11);
  Cloud x = pcops_test::uniform_cloud(rng, 2, 600, 3);
  Cloud q = pcops_test::uniform_cloud(rng, 2, 40, 3);
  const int64_t xl[2] = {0, 600}, ql[2] = {40, 0};
  expect_exact(q.view(), x.view(), 5, {}, {xl, 2});  // an empty reference cloud: all padding
  expect_exact(q.view(), x.view(), 5, {ql, 2}, {});  // an empty query cloud
  expect_exact(q.view(), x.view(), 0);               // k = 0: nothing to write
  Cloud none(2, 0, 3);
  Result r = run_knn(q.view(), none.view(), 0);
  EXPECT_TRUE(r.idx.empty());
  Result z = run_knn(none.view(), x.view(), 3);  // no queries at all
  EXPECT_TRUE(z.idx.empty());
}

TEST(Knn, LengthsAndKBeyondN) {
  std::mt19937 rng(12);
  Cloud x = pcops_test::uniform_cloud(rng, 3, 2500, 3);
  Cloud q = pcops_test::uniform_cloud(rng, 3, 40, 3);
  const int64_t xl[3] = {2500, 700, 3}, ql[3] = {40, 33, 40};
  for (int64_t k : {1, 3, 50, 800, 2500}) expect_exact(q.view(), x.view(), k, {ql, 3}, {xl, 3});
}

TEST(Knn, KEqualsN) {
  std::mt19937 rng(13);
  Cloud x = pcops_test::uniform_cloud(rng, 1, 700, 3);
  Cloud q = pcops_test::uniform_cloud(rng, 1, 40, 3);
  expect_exact(q.view(), x.view(), 700);
}

TEST(Knn, StridedViews) {
  std::mt19937 rng(14);
  Cloud x = pcops_test::uniform_cloud(rng, 2, 3000, 3);
  Cloud q = pcops_test::uniform_cloud(rng, 2, 50, 3);
  const Result want = pcops_test::knn_oracle(q.view(), x.view(), {}, {}, 12);
  EXPECT_TRUE(pcops_test::same_result(run_knn(q.strided_view(), x.strided_view(), 12), want));
  Cloud x8 = pcops_test::uniform_cloud(rng, 1, 300, 8);
  Cloud q8 = pcops_test::uniform_cloud(rng, 1, 50, 8);
  EXPECT_TRUE(pcops_test::same_result(run_knn(q8.strided_view(), x8.strided_view(), 7),
                                      pcops_test::knn_oracle(q8.view(), x8.view(), {}, {}, 7)));
}

TEST(Knn, GeneralDimensions) {
  std::mt19937 rng(15);
  for (int64_t d : {1, 2, 4, 8, 64}) {
    Cloud x = pcops_test::uniform_cloud(rng, 2, 700, d);
    Cloud q = pcops_test::uniform_cloud(rng, 2, 40, d);
    expect_exact(q.view(), x.view(), 10);
  }
  // D = 1 on a coarse lattice: many ties.
  Cloud x(1, 900, 1), q(1, 50, 1);
  for (int64_t i = 0; i < 900; ++i) x.at(0, i, 0) = static_cast<float>((i * 37) % 60);
  for (int64_t i = 0; i < 50; ++i) q.at(0, i, 0) = static_cast<float>(i) + 0.5f * (i % 2);
  expect_exact(q.view(), x.view(), 40);
}

TEST(Knn, BatchedSmallClouds) {
  std::mt19937 rng(16);
  Cloud x = pcops_test::uniform_cloud(rng, 8, 1024, 3);
  Cloud q = pcops_test::uniform_cloud(rng, 8, 64, 3);
  expect_exact(q.view(), x.view(), 16);
  Cloud xs = pcops_test::uniform_cloud(rng, 16, 30, 3);
  Cloud qs = pcops_test::uniform_cloud(rng, 16, 10, 3);
  expect_exact(qs.view(), xs.view(), 30);
}

TEST(Knn, SameResultWithOneThreadAndMany) {
  std::mt19937 rng(17);
  Cloud x = pcops_test::shell_cloud(rng, 20000);
  Cloud q = pcops_test::pick_queries(rng, x, 5000, 0.0f);  // sorted-query path (M >= 4096)
  pcops::CpuContext one;
  one.num_threads = 1;
  const Result a = run_knn(q.view(), x.view(), 8, {}, {}, one);
  const Result b = run_knn(q.view(), x.view(), 8);
  EXPECT_TRUE(pcops_test::same_result(a, b));
  // and a spot check of the many-query path against the oracle
  Cloud q1(1, 64, 3);
  for (int64_t i = 0; i < 64 * 3; ++i) q1.data[i] = q.data[i];
  Result head = pcops_test::sentinel_result(64 * 8);
  for (int64_t i = 0; i < 64 * 8; ++i) {
    head.dist[i] = b.dist[i];
    head.idx[i] = b.idx[i];
  }
  EXPECT_TRUE(pcops_test::same_result(head, pcops_test::knn_oracle(q1.view(), x.view(), {}, {}, 8)));
}

// ---------------------------------------------------------------------------------------------
// Validation

void expect_value_error(const pcops::PointsView& q, const pcops::PointsView& x, int64_t k,
                        pcops::LengthsView ql = {}, pcops::LengthsView xl = {}) {
  std::vector<float> d(16);
  std::vector<int64_t> i(16);
  try {
    pcops::cpu::knn({}, q, x, ql, xl, pcops::KnnParams{k}, d.data(), i.data());
    ADD_FAILURE() << "expected pcops::Error";
  } catch (const pcops::Error& e) {
    EXPECT_EQ(e.kind(), pcops::ErrorKind::Value) << e.what();
  }
}

TEST(Knn, RejectsBadInput) {
  std::vector<float> buf(64, 0.0f);
  const auto v = [&](int64_t b, int64_t n, int64_t d) {
    return pcops::PointsView::contiguous(buf.data(), b, n, d);
  };
  expect_value_error(v(1, 2, 0), v(1, 2, 0), 1);                 // dim 0
  expect_value_error(v(-1, 2, 3), v(-1, 2, 3), 1);               // negative batch
  expect_value_error(v(1, -2, 3), v(1, 2, 3), 1);                // negative count
  expect_value_error(pcops::PointsView::contiguous(nullptr, 1, 2, 3), v(1, 2, 3), 1);  // null
  expect_value_error(v(1, 2, 3), v(2, 2, 3), 1);                 // batch mismatch
  expect_value_error(v(1, 2, 3), v(1, 2, 2), 1);                 // dim mismatch
  expect_value_error(v(1, 2, 3), v(1, 2, 3), -1);                // k < 0
  expect_value_error(v(1, 2, 3), v(1, 2, 3), 3);                 // k > N without lengths
  const int64_t two[2] = {1, 1}, bad[1] = {5}, neg[1] = {-1};
  expect_value_error(v(1, 2, 3), v(1, 2, 3), 1, {two, 2}, {});   // wrong number of lengths
  expect_value_error(v(1, 2, 3), v(1, 2, 3), 1, {}, {bad, 1});   // length > count
  expect_value_error(v(1, 2, 3), v(1, 2, 3), 1, {neg, 1}, {});   // negative length
  const int64_t big = int64_t{1} << 40;
  const int64_t lens[1] = {0};
  expect_value_error(v(1, big, 3), v(1, 2, 3), big, {lens, 1}, {lens, 1});  // output overflows
}

}  // namespace
