// three_interpolate and its backward against straightforward loops written from the contract's
// evaluation order: bitwise results, -1 slots, duplicate indices, non-finite values, strides,
// thread counts; plus every validation error.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "oracle.hpp"
#include "pcops/error.hpp"
#include "pcops/three_interpolate.hpp"

namespace {

struct Case {
  int64_t B = 0, C = 0, M = 0, N = 0;
  std::vector<float> features;  // [B, C, M]
  std::vector<int64_t> idx;     // [B, N, 3]
  std::vector<float> weight;    // [B, N, 3]
  std::vector<float> grad;      // [B, C, N]

  pcops::FeaturesView fview() const {
    return pcops::FeaturesView::contiguous(features.empty() ? nullptr : features.data(), B, C, M);
  }
  pcops::PointsView wview() const {
    return pcops::PointsView::contiguous(weight.empty() ? nullptr : weight.data(), B, N, 3);
  }
  pcops::FeaturesView gview() const {
    return pcops::FeaturesView::contiguous(grad.empty() ? nullptr : grad.data(), B, C, N);
  }
};

// Random case; `pad` is the probability of an index -1.
Case random_case(std::mt19937& rng, int64_t B, int64_t C, int64_t M, int64_t N, double pad = 0.0) {
  Case c{B, C, M, N};
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::uniform_int_distribution<int64_t> pick(0, std::max<int64_t>(M - 1, 0));
  std::bernoulli_distribution hole(pad);
  c.features.resize(B * C * M);
  for (float& v : c.features) v = u(rng);
  c.idx.resize(B * N * 3);
  for (int64_t& v : c.idx) v = (M == 0 || hole(rng)) ? -1 : pick(rng);
  c.weight.resize(B * N * 3);
  for (float& v : c.weight) v = u(rng);
  c.grad.resize(B * C * N);
  for (float& v : c.grad) v = u(rng);
  return c;
}

std::vector<float> oracle_forward(const Case& c) {
  std::vector<float> out(c.B * c.C * c.N);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t ch = 0; ch < c.C; ++ch)
      for (int64_t n = 0; n < c.N; ++n) {
        float acc = 0.0f;
        for (int t = 0; t < 3; ++t) {
          const int64_t j = c.idx[(b * c.N + n) * 3 + t];
          if (j < 0) continue;
          const float p = c.weight[(b * c.N + n) * 3 + t] * c.features[(b * c.C + ch) * c.M + j];
          acc = acc + p;
        }
        out[(b * c.C + ch) * c.N + n] = acc;
      }
  return out;
}

void oracle_backward(const Case& c, std::vector<float>& gf, std::vector<float>& gw) {
  gf.assign(c.B * c.C * c.M, 0.0f);
  gw.assign(c.B * c.N * 3, 0.0f);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t ch = 0; ch < c.C; ++ch)
      for (int64_t n = 0; n < c.N; ++n)  // ascending (n, t) per feature slot
        for (int t = 0; t < 3; ++t) {
          const int64_t j = c.idx[(b * c.N + n) * 3 + t];
          if (j < 0) continue;
          const float p = c.grad[(b * c.C + ch) * c.N + n] * c.weight[(b * c.N + n) * 3 + t];
          gf[(b * c.C + ch) * c.M + j] = gf[(b * c.C + ch) * c.M + j] + p;
        }
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t n = 0; n < c.N; ++n)
      for (int t = 0; t < 3; ++t) {
        const int64_t j = c.idx[(b * c.N + n) * 3 + t];
        float acc = 0.0f;
        for (int64_t ch = 0; j >= 0 && ch < c.C; ++ch) {  // ascending channels
          const float p = c.grad[(b * c.C + ch) * c.N + n] * c.features[(b * c.C + ch) * c.M + j];
          acc = acc + p;
        }
        gw[(b * c.N + n) * 3 + t] = acc;
      }
}

std::vector<float> run_forward(const Case& c, const pcops::CpuContext& ctx = {}) {
  std::vector<float> out(c.B * c.C * c.N, pcops_test::kSentinelDist);
  pcops::cpu::three_interpolate(ctx, c.fview(), c.idx.data(), c.wview(), out.data());
  return out;
}

void expect_matches(const Case& c, const pcops::CpuContext& ctx = {}) {
  EXPECT_TRUE(pcops_test::same_bits(run_forward(c, ctx), oracle_forward(c)));
  std::vector<float> gf(c.B * c.C * c.M, pcops_test::kSentinelDist), gw(c.B * c.N * 3, pcops_test::kSentinelDist);
  pcops::cpu::three_interpolate_backward(ctx, c.gview(), c.fview(), c.idx.data(), c.wview(), gf.data(), gw.data());
  std::vector<float> egf, egw;
  oracle_backward(c, egf, egw);
  EXPECT_TRUE(pcops_test::same_bits(gf, egf)) << "grad_features";
  EXPECT_TRUE(pcops_test::same_bits(gw, egw)) << "grad_weight";
}

TEST(ThreeInterpolate, MatchesOracleBitwise) {
  std::mt19937 rng(1);
  expect_matches(random_case(rng, 2, 5, 7, 11));
  expect_matches(random_case(rng, 3, 64, 128, 512));
  expect_matches(random_case(rng, 1, 3, 4, 1000));  // many (n, t) slots per feature: long scatter sums
  expect_matches(random_case(rng, 2, 1, 300, 700));
}

TEST(ThreeInterpolate, PaddingSlotsContributeNothing) {
  std::mt19937 rng(2);
  Case c = random_case(rng, 2, 6, 9, 40, 0.3);
  // Non-finite weights on padded slots must not leak into the result (the slot is skipped).
  for (size_t i = 0; i < c.idx.size(); ++i)
    if (c.idx[i] < 0) c.weight[i] = std::numeric_limits<float>::infinity();
  expect_matches(c);
  Case all = random_case(rng, 1, 3, 5, 8, 1.0);  // every slot padded: +0 everywhere
  const std::vector<float> out = run_forward(all);
  for (float v : out) EXPECT_EQ(pcops_test::bits(v), 0u);
  Case none = random_case(rng, 2, 4, 0, 6);  // M = 0: only -1 is a valid index
  expect_matches(none);
}

TEST(ThreeInterpolate, NonFiniteAndSignedZeros) {
  std::mt19937 rng(3);
  Case c = random_case(rng, 1, 4, 10, 30);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  c.features[3] = nan;
  c.features[7] = inf;
  c.weight[5] = -inf;
  c.weight[8] = -0.0f;
  c.features[12] = -0.0f;
  c.grad[4] = nan;
  expect_matches(c);
}

TEST(ThreeInterpolate, StridedFeaturesAndOptionalOutputs) {
  std::mt19937 rng(4);
  Case c = random_case(rng, 2, 5, 20, 30);
  // Features laid out [B][M][C] (channels innermost) with a gap between batches.
  const int64_t sb = c.M * c.C + 7;
  std::vector<float> alt(c.B * sb, std::nanf(""));
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t ch = 0; ch < c.C; ++ch)
      for (int64_t m = 0; m < c.M; ++m) alt[b * sb + m * c.C + ch] = c.features[(b * c.C + ch) * c.M + m];
  const pcops::FeaturesView strided{alt.data(), c.B, c.C, c.M, sb, 1, c.C};
  std::vector<float> out(c.B * c.C * c.N);
  pcops::cpu::three_interpolate({}, strided, c.idx.data(), c.wview(), out.data());
  EXPECT_TRUE(pcops_test::same_bits(out, oracle_forward(c)));
  std::vector<float> egf, egw;
  oracle_backward(c, egf, egw);
  std::vector<float> gw(c.B * c.N * 3);
  pcops::cpu::three_interpolate_backward({}, c.gview(), strided, c.idx.data(), c.wview(), nullptr, gw.data());
  EXPECT_TRUE(pcops_test::same_bits(gw, egw));
  std::vector<float> gf(c.B * c.C * c.M);
  pcops::cpu::three_interpolate_backward({}, c.gview(), c.fview(), c.idx.data(), c.wview(), gf.data(), nullptr);
  EXPECT_TRUE(pcops_test::same_bits(gf, egf));
}

TEST(ThreeInterpolate, SameResultWithOneThreadAndMany) {
  std::mt19937 rng(5);
  Case c = random_case(rng, 4, 32, 200, 2000, 0.05);
  pcops::CpuContext one;
  one.num_threads = 1;
  expect_matches(c, one);
  expect_matches(c);
}

TEST(ThreeInterpolate, EmptyShapes) {
  std::mt19937 rng(6);
  const std::vector<std::array<int64_t, 4>> shapes = {{0, 3, 4, 5}, {2, 0, 4, 5}, {2, 3, 4, 0}, {2, 3, 0, 0}};
  for (const auto& s : shapes) expect_matches(random_case(rng, s[0], s[1], s[2], s[3]));
}

using pcops_test::expect_error;

TEST(ThreeInterpolate, RejectsBadInput) {
  std::mt19937 rng(7);
  Case c = random_case(rng, 2, 3, 4, 5);
  std::vector<float> out(c.B * c.C * c.N), gf(c.B * c.C * c.M), gw(c.B * c.N * 3);
  using pcops::ErrorKind;
  for (int64_t bad : {int64_t{4}, int64_t{-2}, int64_t{1} << 40}) {
    std::vector<int64_t> idx = c.idx;
    idx[7] = bad;
    expect_error(ErrorKind::Index, [&] { pcops::cpu::three_interpolate({}, c.fview(), idx.data(), c.wview(), out.data()); });
    expect_error(ErrorKind::Index, [&] {
      pcops::cpu::three_interpolate_backward({}, c.gview(), c.fview(), idx.data(), c.wview(), gf.data(), gw.data());
    });
  }
  const pcops::PointsView w2 = pcops::PointsView::contiguous(c.weight.data(), c.B, c.N, 2);
  expect_error(ErrorKind::Value, [&] { pcops::cpu::three_interpolate({}, c.fview(), c.idx.data(), w2, out.data()); });
  const pcops::PointsView wb = pcops::PointsView::contiguous(c.weight.data(), 1, c.N, 3);
  expect_error(ErrorKind::Value, [&] { pcops::cpu::three_interpolate({}, c.fview(), c.idx.data(), wb, out.data()); });
  const pcops::FeaturesView fneg{c.features.data(), 2, -1, 4, 12, 4, 1};
  expect_error(ErrorKind::Value, [&] { pcops::cpu::three_interpolate({}, fneg, c.idx.data(), c.wview(), out.data()); });
  const pcops::FeaturesView g_bad = pcops::FeaturesView::contiguous(c.grad.data(), c.B, c.C, c.N - 1);
  expect_error(ErrorKind::Value, [&] {
    pcops::cpu::three_interpolate_backward({}, g_bad, c.fview(), c.idx.data(), c.wview(), gf.data(), gw.data());
  });
  expect_error(ErrorKind::Value, [&] {
    pcops::cpu::three_interpolate({}, pcops::FeaturesView::contiguous(nullptr, 2, 3, 4), c.idx.data(), c.wview(),
                                  out.data());
  });
}

}  // namespace
