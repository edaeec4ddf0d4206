// group_points and its backward against straightforward loops over (m, s): exact copies, -1
// padding from ball_query (0, no gradient), scatter sums in ascending (m, s) order; errors.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "oracle.hpp"
#include "pcops/ball_query.hpp"
#include "pcops/error.hpp"
#include "pcops/group_points.hpp"

namespace {

struct Grouped {
  std::vector<float> out, grad_features;
};

Grouped oracle(const std::vector<float>& f, const std::vector<int64_t>& idx, const std::vector<float>& grad,
               int64_t B, int64_t C, int64_t N, int64_t M, int64_t S) {
  Grouped r;
  r.out.assign(B * C * M * S, 0.0f);
  r.grad_features.assign(B * C * N, 0.0f);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t s = 0; s < S; ++s) {
          const int64_t j = idx[(b * M + m) * S + s];
          const int64_t o = ((b * C + c) * M + m) * S + s;
          if (j < 0) continue;
          r.out[o] = f[(b * C + c) * N + j];
          r.grad_features[(b * C + c) * N + j] = r.grad_features[(b * C + c) * N + j] + grad[o];
        }
  return r;
}

void expect_matches(const std::vector<float>& f, const std::vector<int64_t>& idx, const std::vector<float>& grad,
                    int64_t B, int64_t C, int64_t N, int64_t M, int64_t S) {
  const Grouped want = oracle(f, idx, grad, B, C, N, M, S);
  const pcops::GroupPointsParams p{M, S};
  std::vector<float> out(B * C * M * S, pcops_test::kSentinelDist), g(B * C * N, pcops_test::kSentinelDist);
  pcops::cpu::group_points({}, pcops::FeaturesView::contiguous(f.data(), B, C, N), idx.data(), p, out.data());
  EXPECT_TRUE(pcops_test::same_bits(out, want.out));
  pcops::cpu::group_points_backward({}, pcops::FeaturesView::contiguous(grad.data(), B, C, M * S), idx.data(), p, N,
                                    g.data());
  EXPECT_TRUE(pcops_test::same_bits(g, want.grad_features)) << "backward";
}

TEST(GroupPoints, BallQueryNeighbourhoodsMatchOracle) {
  std::mt19937 rng(1);
  const int64_t B = 2, C = 7, N = 800, M = 64, S = 32;
  pcops_test::Cloud x = pcops_test::uniform_cloud(rng, B, N, 3);
  pcops_test::Cloud q = pcops_test::uniform_cloud(rng, B, M, 3);
  std::vector<float> d2(B * M * S);
  std::vector<int64_t> idx(B * M * S);
  pcops::cpu::ball_query({}, q.view(), x.view(), {}, {}, pcops::BallQueryParams{0.12f, S}, d2.data(), idx.data());
  bool padded = false;
  for (int64_t v : idx) padded = padded || v < 0;
  ASSERT_TRUE(padded);  // the -1 padding is exercised
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> f(B * C * N), grad(B * C * M * S);
  for (float& v : f) v = u(rng);
  for (float& v : grad) v = u(rng);
  expect_matches(f, idx, grad, B, C, N, M, S);
}

TEST(GroupPoints, RepeatedIndicesAndEmptyShapes) {
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int64_t> pick(-1, 2);
  const int64_t B = 3, C = 4, N = 3, M = 50, S = 9;
  std::vector<float> f(B * C * N), grad(B * C * M * S);
  std::vector<int64_t> idx(B * M * S);
  for (float& v : f) v = u(rng);
  for (float& v : grad) v = u(rng);
  for (int64_t& v : idx) v = pick(rng);
  expect_matches(f, idx, grad, B, C, N, M, S);
  expect_matches({}, {}, {}, 0, 3, 4, 5, 6);
  expect_matches({}, std::vector<int64_t>(2 * 5 * 6, 1), {}, 2, 0, 4, 5, 6);
  expect_matches(std::vector<float>(2 * 3 * 4, 1.0f), {}, {}, 2, 3, 4, 0, 6);
  expect_matches(std::vector<float>(2 * 3 * 4, 1.0f), {}, {}, 2, 3, 4, 5, 0);
}

TEST(GroupPoints, RejectsBadInput) {
  std::vector<float> f(2 * 3 * 4, 0.0f), out(2 * 3 * 2 * 2), g(2 * 3 * 4);
  std::vector<int64_t> idx(2 * 2 * 2, 0);
  idx[3] = 4;
  const auto fv = pcops::FeaturesView::contiguous(f.data(), 2, 3, 4);
  const auto gv = pcops::FeaturesView::contiguous(out.data(), 2, 3, 4);
  auto expect_kind = [](pcops::ErrorKind kind, auto fn) {
    try {
      fn();
      ADD_FAILURE() << "expected pcops::Error";
    } catch (const pcops::Error& e) {
      EXPECT_EQ(e.kind(), kind) << e.what();
    }
  };
  expect_kind(pcops::ErrorKind::Index, [&] { pcops::cpu::group_points({}, fv, idx.data(), {2, 2}, out.data()); });
  expect_kind(pcops::ErrorKind::Index,
              [&] { pcops::cpu::group_points_backward({}, gv, idx.data(), {2, 2}, 4, g.data()); });
  idx[3] = 0;
  expect_kind(pcops::ErrorKind::Value, [&] { pcops::cpu::group_points({}, fv, idx.data(), {-2, 2}, out.data()); });
  expect_kind(pcops::ErrorKind::Value,
              [&] { pcops::cpu::group_points_backward({}, gv, idx.data(), {2, 3}, 4, g.data()); });  // M*S mismatch
}

}  // namespace
