// Ball query against the float32-exact brute-force oracle (first K matches in reference order,
// strict s < R2): grid and brute-force paths, radius-boundary points one float step inside and
// outside, non-finite and extreme values, lengths, strides, thread counts; validation errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "oracle.hpp"
#include "pcops/ball_query.hpp"
#include "pcops/error.hpp"

namespace {

using pcops_test::Cloud;
using pcops_test::Result;

Result run_ball(const pcops::PointsView& q, const pcops::PointsView& x, float r, int64_t K,
                pcops::LengthsView ql = {}, pcops::LengthsView xl = {},
                const pcops::CpuContext& ctx = {}) {
  Result res = pcops_test::sentinel_result(q.batch * q.count * K);
  pcops::cpu::ball_query(ctx, q, x, ql, xl, pcops::BallQueryParams{r, K}, res.dist.data(),
                         res.idx.data());
  return res;
}

void expect_exact(const pcops::PointsView& q, const pcops::PointsView& x, float r, int64_t K,
                  pcops::LengthsView ql = {}, pcops::LengthsView xl = {}) {
  EXPECT_TRUE(pcops_test::same_result(run_ball(q, x, r, K, ql, xl),
                                      pcops_test::ball_oracle(q, x, ql, xl, r, K)))
      << "r=" << r << " K=" << K << " N=" << x.count << " M=" << q.count;
}

TEST(BallQuery, UniformMatchesOracle) {
  std::mt19937 rng(21);
  Cloud x = pcops_test::uniform_cloud(rng, 1, 8000, 3);
  Cloud q = pcops_test::uniform_cloud(rng, 1, 100, 3, -0.1f, 1.1f);
  for (float r : {0.02f, 0.1f, 0.3f})
    for (int64_t K : {1, 64, 500}) expect_exact(q.view(), x.view(), r, K);
}

TEST(BallQuery, FirstMatchesInInputOrderNotNearest) {
  std::mt19937 rng(22);
  Cloud x = pcops_test::uniform_cloud(rng, 1, 4000, 3);
  Cloud q = pcops_test::pick_queries(rng, x, 64, 0.0f);
  const Result got = run_ball(q.view(), x.view(), 0.25f, 8);
  EXPECT_TRUE(pcops_test::same_result(got, pcops_test::ball_oracle(q.view(), x.view(), {}, {}, 0.25f, 8)));
  // Indices ascend within each query, and some slot is not among the 8 nearest.
  bool some_not_nearest = false;
  for (int64_t m = 0; m < 64; ++m) {
    for (int64_t t = 1; t < 8; ++t) EXPECT_LT(got.idx[m * 8 + t - 1], got.idx[m * 8 + t]);
    for (int64_t t = 0; t < 8; ++t) some_not_nearest |= got.dist[m * 8 + t] > 0.01f;
  }
  EXPECT_TRUE(some_not_nearest);
}

// Points one float step inside and outside the radius, in random directions around each query,
// hidden among a uniform cloud so that the grid search handles them.
TEST(BallQuery, RadiusBoundaryNextafter) {
  std::mt19937 rng(23);
  const float r = 0.1f;
  const float R2 = r * r;
  Cloud bg = pcops_test::uniform_cloud(rng, 1, 3000, 3, -1.0f, 1.0f);
  Cloud q = pcops_test::uniform_cloud(rng, 1, 32, 3, 0.2f, 0.8f);  // float steps of p_x ~ 3e-8
  std::vector<float> pts(bg.data);
  std::vector<int64_t> inside, outside;  // (query, reference) pairs flattened
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (int64_t m = 0; m < q.count; ++m) {
    const float qx = q.at(0, m, 0), qy = q.at(0, m, 1), qz = q.at(0, m, 2);
    for (int rep = 0; rep < 6; ++rep) {
      float u[3] = {g(rng), g(rng), g(rng)};
      u[0] = std::max(std::fabs(u[0]), 0.7f);  // +x carries the distance
      const float len = std::sqrt(u[0] * u[0] + u[1] * u[1] + u[2] * u[2]);
      // Walk the x coordinate by single float steps until s crosses R2.
      float p[3] = {qx + r * u[0] / len, qy + r * u[1] / len, qz + r * u[2] / len};
      const float dir = p[0] >= qx ? 1.0f : -1.0f;
      auto s_of = [&](float px) {
        const float dx = qx - px, dy = qy - p[1], dz = qz - p[2];
        return (dx * dx + dy * dy) + dz * dz;
      };
      float px = p[0];
      for (int it = 0; it < 10000 && s_of(px) < R2; ++it) px = std::nextafter(px, dir * INFINITY);
      for (int it = 0; it < 10000 && !(s_of(px) < R2); ++it) px = std::nextafter(px, qx);
      ASSERT_LT(s_of(px), R2) << "q=" << qx << "," << qy << "," << qz << " p=" << px << "," << p[1] << "," << p[2];
      const float out_x = std::nextafter(px, dir * INFINITY);
      ASSERT_FALSE(s_of(out_x) < R2);
      ASSERT_NEAR(std::sqrt(static_cast<double>(s_of(px))), r, 1e-6);
      inside.push_back(m);
      inside.push_back(static_cast<int64_t>(pts.size() / 3));
      pts.insert(pts.end(), {px, p[1], p[2]});
      outside.push_back(m);
      outside.push_back(static_cast<int64_t>(pts.size() / 3));
      pts.insert(pts.end(), {out_x, p[1], p[2]});
    }
  }
  Cloud x(1, static_cast<int64_t>(pts.size() / 3), 3);
  x.data = pts;
  const int64_t K = 4000;
  const Result got = run_ball(q.view(), x.view(), r, K);
  EXPECT_TRUE(pcops_test::same_result(got, pcops_test::ball_oracle(q.view(), x.view(), {}, {}, r, K)));
  auto has = [&](int64_t m, int64_t j) {
    for (int64_t t = 0; t < K && got.idx[m * K + t] >= 0; ++t)
      if (got.idx[m * K + t] == j) return true;
    return false;
  };
  for (size_t t = 0; t < inside.size(); t += 2) EXPECT_TRUE(has(inside[t], inside[t + 1]));
  for (size_t t = 0; t < outside.size(); t += 2) EXPECT_FALSE(has(outside[t], outside[t + 1]));
}

TEST(BallQuery, ExactRadiusIsOutside) {
  // s == R2 exactly on an integer lattice: strict comparison excludes it.
  std::mt19937 rng(24);
  Cloud x = pcops_test::lattice_cloud(rng, 12);
  Cloud q = pcops_test::pick_queries(rng, x, 40, 0.0f);
  expect_exact(q.view(), x.view(), 1.0f, 32);  // the 6 axis neighbours sit exactly at r
  expect_exact(q.view(), x.view(), 2.0f, 64);
  const Result got = run_ball(q.view(), x.view(), 1.0f, 32);
  for (int64_t m = 0; m < 40; ++m) {
    EXPECT_GE(got.idx[m * 32], 0);       // the query point itself (s = 0)
    EXPECT_EQ(got.idx[m * 32 + 1], -1);  // nothing else: the neighbours have s == R2
  }
}

TEST(BallQuery, SurfaceDuplicatesAndVaryingDensity) {
  std::mt19937 rng(25);
  Cloud s = pcops_test::shell_cloud(rng, 15000);
  Cloud qs = pcops_test::pick_queries(rng, s, 150, 0.0f);
  expect_exact(qs.view(), s.view(), 0.1f, 64);
  Cloud d = pcops_test::duplicate_cloud(rng, 5000, 50);
  Cloud qd = pcops_test::pick_queries(rng, d, 64, 0.0f);
  expect_exact(qd.view(), d.view(), 0.05f, 300);
  Cloud c = pcops_test::clustered_cloud(rng, 10000);
  Cloud qc = pcops_test::pick_queries(rng, c, 100, 0.01f);
  expect_exact(qc.view(), c.view(), 0.2f, 40);
  expect_exact(qc.view(), c.view(), 0.003f, 40);
}

TEST(BallQuery, SpatiallySortedInput) {
  std::mt19937 rng(26);
  Cloud x = pcops_test::uniform_cloud(rng, 1, 8000, 3);
  pcops_test::spatial_sort(x);
  Cloud q = pcops_test::pick_queries(rng, x, 100, 0.0f);
  expect_exact(q.view(), x.view(), 0.08f, 32);
}

TEST(BallQuery, RealClouds) {
  std::mt19937 rng(27);
  const std::pair<const char*, float> cases[] = {
      {"radar.xyz", 2.0f}, {"b9_training.ply", 1.0f}, {"kitten.xyz", 0.02f}};
  for (const auto& [name, r] : cases) {
    const Cloud& x = pcops_test::cached_cloud(name, rng);
    ASSERT_GT(x.count, 1000) << name;
    Cloud q = pcops_test::pick_queries(rng, x, 40, 0.0f);
    expect_exact(q.view(), x.view(), r, 64);
  }
}

TEST(BallQuery, NonFiniteHugeAndSubnormal) {
  std::mt19937 rng(28);
  Cloud x = pcops_test::uniform_cloud(rng, 1, 3000, 3);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  for (int64_t i = 0; i < 3000; i += 53) x.at(0, i, i % 3) = nan;
  for (int64_t i = 3; i < 3000; i += 71) x.at(0, i, 1) = (i % 2) ? inf : -inf;
  for (int64_t i = 9; i < 3000; i += 61) x.at(0, i, 2) = 1e30f;
  Cloud q = pcops_test::pick_queries(rng, x, 64, 0.0f);
  q.at(0, 0, 0) = nan;
  q.at(0, 1, 2) = inf;
  q.at(0, 2, 2) = 1e30f;  // matches the 1e30 points with s = 0 only if x, y agree
  expect_exact(q.view(), x.view(), 0.15f, 64);
  expect_exact(q.view(), x.view(), 3e19f, 64);  // R2 overflows to +inf: finite s all match
  Cloud h = pcops_test::uniform_cloud(rng, 1, 2000, 3, -1e30f, 1e30f);
  Cloud qh = pcops_test::pick_queries(rng, h, 32, 0.0f);
  expect_exact(qh.view(), h.view(), 1e18f, 16);  // s overflows: only s = 0 matches
  Cloud sub = pcops_test::uniform_cloud(rng, 1, 2000, 3, -1e-38f, 1e-38f);
  Cloud qsub = pcops_test::pick_queries(rng, sub, 32, 0.0f);
  expect_exact(qsub.view(), sub.view(), 3e-39f, 16);
  expect_exact(qsub.view(), sub.view(), 1e-20f, 16);
}

TEST(BallQuery, EmptyZeroKZeroRadiusAndLengths) {
  std::mt19937 rng(29);
  Cloud x = pcops_test::uniform_cloud(rng, 3, 2000, 3);
  Cloud q = pcops_test::uniform_cloud(rng, 3, 50, 3);
  const int64_t xl[3] = {0, 1500, 7}, ql[3] = {50, 20, 0};
  expect_exact(q.view(), x.view(), 0.1f, 16, {ql, 3}, {xl, 3});
  expect_exact(q.view(), x.view(), 0.1f, 0);
  expect_exact(q.view(), x.view(), 0.0f, 8);  // radius 0 matches nothing
  expect_exact(q.view(), x.view(), 0.05f, 5000);  // K far above any match count
  Cloud none(3, 0, 3);
  expect_exact(q.view(), none.view(), 0.5f, 4);
  Result z = run_ball(none.view(), x.view(), 0.5f, 4);
  EXPECT_TRUE(z.idx.empty());
}

TEST(BallQuery, StridedViewsAndBatches) {
  std::mt19937 rng(30);
  Cloud x = pcops_test::uniform_cloud(rng, 4, 1500, 3);
  Cloud q = pcops_test::uniform_cloud(rng, 4, 40, 3);
  const Result want = pcops_test::ball_oracle(q.view(), x.view(), {}, {}, 0.12f, 24);
  EXPECT_TRUE(pcops_test::same_result(run_ball(q.strided_view(), x.strided_view(), 0.12f, 24), want));
  Cloud xs = pcops_test::uniform_cloud(rng, 16, 40, 3);
  Cloud qs = pcops_test::uniform_cloud(rng, 16, 8, 3);
  expect_exact(qs.view(), xs.view(), 0.3f, 10);
}

TEST(BallQuery, SameResultWithOneThreadAndMany) {
  std::mt19937 rng(31);
  Cloud x = pcops_test::shell_cloud(rng, 20000);
  Cloud q = pcops_test::pick_queries(rng, x, 3000, 0.0f);
  pcops::CpuContext one;
  one.num_threads = 1;
  EXPECT_TRUE(pcops_test::same_result(run_ball(q.view(), x.view(), 0.1f, 32, {}, {}, one),
                                      run_ball(q.view(), x.view(), 0.1f, 32)));
}

TEST(BallQuery, BackwardMatchesDefinition) {
  std::mt19937 rng(32);
  Cloud x = pcops_test::uniform_cloud(rng, 1, 700, 3);
  Cloud q = pcops_test::uniform_cloud(rng, 1, 20, 3);
  const int64_t K = 6;
  const Result fwd = run_ball(q.view(), x.view(), 0.2f, K);
  std::vector<float> G(20 * K);
  for (size_t i = 0; i < G.size(); ++i) G[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  std::vector<float> gq(20 * 3, -1.0f), gx(700 * 3, -1.0f);
  pcops::cpu::ball_query_backward({}, q.view(), x.view(), fwd.idx.data(), G.data(), K, gq.data(),
                                  gx.data());
  std::vector<double> wq(20 * 3, 0.0), wx(700 * 3, 0.0);
  for (int64_t m = 0; m < 20; ++m)
    for (int64_t t = 0; t < K; ++t) {
      const int64_t j = fwd.idx[m * K + t];
      if (j < 0) continue;
      for (int d = 0; d < 3; ++d) {
        const double v = 2.0 * G[m * K + t] * (q.at(0, m, d) - x.at(0, j, d));
        wq[m * 3 + d] += v;
        wx[j * 3 + d] -= v;
      }
    }
  for (size_t i = 0; i < wq.size(); ++i) EXPECT_NEAR(gq[i], wq[i], 1e-5);
  for (size_t i = 0; i < wx.size(); ++i) EXPECT_NEAR(gx[i], wx[i], 1e-5);
}

// ---------------------------------------------------------------------------------------------
// Validation

void expect_value_error(const pcops::PointsView& q, const pcops::PointsView& x, float r, int64_t K,
                        pcops::LengthsView ql = {}, pcops::LengthsView xl = {}) {
  std::vector<float> d(16);
  std::vector<int64_t> i(16);
  try {
    pcops::cpu::ball_query({}, q, x, ql, xl, pcops::BallQueryParams{r, K}, d.data(), i.data());
    ADD_FAILURE() << "expected pcops::Error";
  } catch (const pcops::Error& e) {
    EXPECT_EQ(e.kind(), pcops::ErrorKind::Value) << e.what();
  }
}

TEST(BallQuery, RejectsBadInput) {
  std::vector<float> buf(64, 0.0f);
  const auto v = [&](int64_t b, int64_t n, int64_t d) {
    return pcops::PointsView::contiguous(buf.data(), b, n, d);
  };
  expect_value_error(v(1, 2, 2), v(1, 2, 3), 0.1f, 1);   // query not 3-D
  expect_value_error(v(1, 2, 3), v(1, 2, 4), 0.1f, 1);   // ref not 3-D
  expect_value_error(v(1, 2, 0), v(1, 2, 3), 0.1f, 1);   // dim 0
  expect_value_error(v(1, -1, 3), v(1, 2, 3), 0.1f, 1);  // negative count
  expect_value_error(pcops::PointsView::contiguous(nullptr, 1, 2, 3), v(1, 2, 3), 0.1f, 1);
  expect_value_error(v(1, 2, 3), v(2, 2, 3), 0.1f, 1);   // batch mismatch
  expect_value_error(v(1, 2, 3), v(1, 2, 3), -0.1f, 1);  // negative radius
  expect_value_error(v(1, 2, 3), v(1, 2, 3), std::nanf(""), 1);
  expect_value_error(v(1, 2, 3), v(1, 2, 3), std::numeric_limits<float>::infinity(), 1);
  expect_value_error(v(1, 2, 3), v(1, 2, 3), 0.1f, -1);  // K < 0
  const int64_t two[2] = {1, 1}, bad[1] = {3};
  expect_value_error(v(1, 2, 3), v(1, 2, 3), 0.1f, 1, {two, 2}, {});
  expect_value_error(v(1, 2, 3), v(1, 2, 3), 0.1f, 1, {}, {bad, 1});
  const int64_t big = int64_t{1} << 40;
  expect_value_error(v(1, big, 3), v(1, 2, 3), 0.1f, big);  // output size overflows
}

}  // namespace
