// gather_points and its backward against straightforward loops: exact copies, -1 padding (0, no
// gradient), repeated indices (scatter sums in ascending m), strides, thread counts; errors.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "oracle.hpp"
#include "pcops/error.hpp"
#include "pcops/gather_points.hpp"

namespace {

struct Case {
  int64_t B = 0, C = 0, N = 0, M = 0;
  std::vector<float> features;  // [B, C, N]
  std::vector<int64_t> idx;     // [B, M]
  std::vector<float> grad;      // [B, C, M]
  pcops::FeaturesView fview() const {
    return pcops::FeaturesView::contiguous(features.empty() ? nullptr : features.data(), B, C, N);
  }
  pcops::FeaturesView gview() const {
    return pcops::FeaturesView::contiguous(grad.empty() ? nullptr : grad.data(), B, C, M);
  }
};

Case random_case(std::mt19937& rng, int64_t B, int64_t C, int64_t N, int64_t M, double pad = 0.0) {
  Case c{B, C, N, M};
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  std::uniform_int_distribution<int64_t> pick(0, std::max<int64_t>(N - 1, 0));
  std::bernoulli_distribution hole(pad);
  c.features.resize(B * C * N);
  for (float& v : c.features) v = u(rng);
  c.idx.resize(B * M);
  for (int64_t& v : c.idx) v = (N == 0 || hole(rng)) ? -1 : pick(rng);
  c.grad.resize(B * C * M);
  for (float& v : c.grad) v = u(rng);
  return c;
}

std::vector<float> oracle_forward(const Case& c) {
  std::vector<float> out(c.B * c.C * c.M);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t ch = 0; ch < c.C; ++ch)
      for (int64_t m = 0; m < c.M; ++m) {
        const int64_t j = c.idx[b * c.M + m];
        out[(b * c.C + ch) * c.M + m] = j >= 0 ? c.features[(b * c.C + ch) * c.N + j] : 0.0f;
      }
  return out;
}

std::vector<float> oracle_backward(const Case& c) {
  std::vector<float> g(c.B * c.C * c.N, 0.0f);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t ch = 0; ch < c.C; ++ch)
      for (int64_t m = 0; m < c.M; ++m) {
        const int64_t j = c.idx[b * c.M + m];
        if (j >= 0) g[(b * c.C + ch) * c.N + j] = g[(b * c.C + ch) * c.N + j] + c.grad[(b * c.C + ch) * c.M + m];
      }
  return g;
}

void expect_matches(const Case& c, const pcops::CpuContext& ctx = {}) {
  std::vector<float> out(c.B * c.C * c.M, pcops_test::kSentinelDist);
  pcops::cpu::gather_points(ctx, c.fview(), c.idx.data(), c.M, out.data());
  EXPECT_TRUE(pcops_test::same_bits(out, oracle_forward(c)));
  std::vector<float> g(c.B * c.C * c.N, pcops_test::kSentinelDist);
  pcops::cpu::gather_points_backward(ctx, c.gview(), c.idx.data(), c.N, g.data());
  EXPECT_TRUE(pcops_test::same_bits(g, oracle_backward(c))) << "backward";
}

TEST(GatherPoints, MatchesOracleBitwise) {
  std::mt19937 rng(1);
  expect_matches(random_case(rng, 2, 3, 10, 4));
  expect_matches(random_case(rng, 3, 64, 1024, 256));
  expect_matches(random_case(rng, 2, 5, 3, 2000));  // every point repeated many times
}

TEST(GatherPoints, PaddingGivesZeroAndNoGradient) {
  std::mt19937 rng(2);
  Case c = random_case(rng, 2, 4, 30, 50, 0.4);
  expect_matches(c);
  std::vector<float> out(c.B * c.C * c.M);
  pcops::cpu::gather_points({}, c.fview(), c.idx.data(), c.M, out.data());
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t m = 0; m < c.M; ++m)
      if (c.idx[b * c.M + m] < 0)
        for (int64_t ch = 0; ch < c.C; ++ch) EXPECT_EQ(pcops_test::bits(out[(b * c.C + ch) * c.M + m]), 0u);
  expect_matches(random_case(rng, 2, 3, 0, 5));  // N = 0: every index -1
}

TEST(GatherPoints, NonFiniteValuesAreCopied) {
  std::mt19937 rng(3);
  Case c = random_case(rng, 1, 3, 8, 20);
  c.features[2] = std::nanf("");
  c.features[5] = -std::numeric_limits<float>::infinity();
  c.features[6] = -0.0f;
  c.grad[3] = std::numeric_limits<float>::infinity();
  expect_matches(c);
}

TEST(GatherPoints, StridedThreadsAndEmpty) {
  std::mt19937 rng(4);
  Case c = random_case(rng, 2, 6, 40, 25);
  const int64_t sb = c.N * c.C + 5;
  std::vector<float> alt(c.B * sb, std::nanf(""));
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t ch = 0; ch < c.C; ++ch)
      for (int64_t n = 0; n < c.N; ++n) alt[b * sb + n * c.C + ch] = c.features[(b * c.C + ch) * c.N + n];
  std::vector<float> out(c.B * c.C * c.M);
  pcops::cpu::gather_points({}, pcops::FeaturesView{alt.data(), c.B, c.C, c.N, sb, 1, c.C}, c.idx.data(), c.M,
                            out.data());
  EXPECT_TRUE(pcops_test::same_bits(out, oracle_forward(c)));
  pcops::CpuContext one;
  one.num_threads = 1;
  expect_matches(random_case(rng, 4, 16, 500, 3000, 0.1), one);
  const std::vector<std::array<int64_t, 4>> shapes = {{0, 3, 4, 5}, {2, 0, 4, 5}, {2, 3, 4, 0}};
  for (const auto& s : shapes) expect_matches(random_case(rng, s[0], s[1], s[2], s[3]));
}

using pcops_test::expect_error;

TEST(GatherPoints, RejectsBadInput) {
  std::mt19937 rng(5);
  Case c = random_case(rng, 2, 3, 6, 4);
  std::vector<float> out(c.B * c.C * c.M), g(c.B * c.C * c.N);
  for (int64_t bad : {int64_t{6}, int64_t{-2}}) {
    std::vector<int64_t> idx = c.idx;
    idx[5] = bad;
    expect_error(pcops::ErrorKind::Index, [&] { pcops::cpu::gather_points({}, c.fview(), idx.data(), c.M, out.data()); });
    expect_error(pcops::ErrorKind::Index,
                 [&] { pcops::cpu::gather_points_backward({}, c.gview(), idx.data(), c.N, g.data()); });
  }
  expect_error(pcops::ErrorKind::Value, [&] { pcops::cpu::gather_points({}, c.fview(), c.idx.data(), -1, out.data()); });
  expect_error(pcops::ErrorKind::Value,
               [&] { pcops::cpu::gather_points_backward({}, c.gview(), c.idx.data(), -1, g.data()); });
  const pcops::FeaturesView neg{c.features.data(), 2, 3, -6, 18, 6, 1};
  expect_error(pcops::ErrorKind::Value, [&] { pcops::cpu::gather_points({}, neg, c.idx.data(), c.M, out.data()); });
}

}  // namespace
