// furthest_point_sample: bitwise agreement with the brute-force oracle on every kind of cloud
// (the tree path for 3-D finite clouds of >= 1024 eligible points, the plain path otherwise),
// padding, edge cases, thread-count independence and every validation error.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "cpu/fps_isa.hpp"
#include "fps_oracle.hpp"
#include "pcops/context.hpp"
#include "pcops/error.hpp"
#include "pcops/furthest_point_sample.hpp"

namespace {

using fps_test::FpsCloud;
using pcops::FpsParams;
using pcops::LengthsView;
using pcops::PointsView;

constexpr int64_t kSentinel = -777;

std::vector<int64_t> run(const PointsView& P, const LengthsView& L, const FpsParams& params,
                         const pcops::CpuContext& ctx = {}) {
  std::vector<int64_t> out(size_t(P.batch * params.num_samples) + 1, kSentinel);
  pcops::cpu::furthest_point_sample(ctx, P, L, params, out.data());
  EXPECT_EQ(out.back(), kSentinel) << "wrote past the output";
  out.pop_back();
  return out;
}

// Runs pcops and the oracle and requires identical indices; returns pcops' result.
std::vector<int64_t> expect_oracle(const PointsView& P, const FpsParams& params,
                                   const LengthsView& L = {}, const pcops::CpuContext& ctx = {}) {
  const auto got = run(P, L, params, ctx);
  const auto want = fps_test::fps_oracle(P, L, params);
  EXPECT_EQ(got.size(), want.size());
  int64_t first_diff = -1;
  for (size_t k = 0; k < std::min(got.size(), want.size()); ++k)
    if (got[k] != want[k]) {
      first_diff = int64_t(k);
      break;
    }
  EXPECT_EQ(first_diff, -1) << "first mismatch at slot " << first_diff << ": got "
                            << (first_diff >= 0 ? got[size_t(first_diff)] : 0) << ", want "
                            << (first_diff >= 0 ? want[size_t(first_diff)] : 0);
  for (int64_t v : got) EXPECT_NE(v, kSentinel);
  return got;
}

FpsParams params_of(int64_t M, int64_t start = 0, bool skip = false) { return FpsParams{M, start, skip}; }

TEST(FurthestPointSample, UniformCubeTreePath) {
  const FpsCloud c = fps_test::uniform_cube(1, 6000, 3, 1);
  expect_oracle(c.view(), params_of(400));
  expect_oracle(c.view(), params_of(300, 4321));
}

TEST(FurthestPointSample, SphereShell) {
  const FpsCloud c = fps_test::sphere_shell(1, 20000, 2);
  const auto got = expect_oracle(c.view(), params_of(512, 7));
  EXPECT_EQ(got[0], 7);
}

TEST(FurthestPointSample, SpatiallySortedInput) {
  FpsCloud c = fps_test::sphere_shell(1, 8000, 3);
  fps_test::sort_by_x(c);
  expect_oracle(c.view(), params_of(300));
}

TEST(FurthestPointSample, DuplicateHeavyIndexZeroRepeatsOnceAllAreZero) {
  // 5000 points on 60 positions: after the 60 distinct positions every m_j is 0.
  const FpsCloud c = fps_test::duplicate_heavy(5000, 60, 4);
  const auto got = expect_oracle(c.view(), params_of(100));
  EXPECT_EQ(got[99], 0);
}

TEST(FurthestPointSample, ExactTiesOnIntegerGrids) {
  for (uint32_t seed : {0u, 5u}) {
    const FpsCloud c = fps_test::integer_grid(16, seed);  // 4096 points, many equal maxima
    expect_oracle(c.view(), params_of(700, 100));
  }
  const FpsCloud small = fps_test::integer_grid(4, 6);  // plain path, M > N
  const auto got = expect_oracle(small.view(), params_of(80));
  for (int t = 64; t < 80; ++t) EXPECT_EQ(got[size_t(t)], 0);
}

TEST(FurthestPointSample, RoundingBoundaryOnScaledGrids) {
  // Grid coordinates k * 0.1f + 0.3f are not exact: distances equal in real arithmetic differ by
  // an ulp after rounding, so points often sit within an ulp of a box's lower bound while their
  // m_j is within an ulp of it too. An over-estimated bound skips such an update.
  for (uint32_t seed : {31u, 32u}) {
    FpsCloud c = fps_test::integer_grid(13, seed);
    for (auto& v : c.data) v = v * 0.1f + 0.3f;
    expect_oracle(c.view(), params_of(1400, 5));
  }
}

TEST(FurthestPointSample, RealClouds) {
  const std::string dir = PCOPS_DATA_DIR;
  int loaded = 0;
  for (const char* name : {"building.ply", "b9_training.ply"}) {
    FpsCloud c = fps_test::load_points(dir + "/" + name, 40000);
    if (c.count == 0) continue;
    ++loaded;
    SCOPED_TRACE(name);
    expect_oracle(c.view(), params_of(200, c.count / 3));
  }
  if (loaded == 0) {
    std::printf("note: %s not found; using a synthetic varying-density cloud instead\n", dir.c_str());
    const FpsCloud c = fps_test::varying_density(30000, 8);
    expect_oracle(c.view(), params_of(256));
  }
}

TEST(FurthestPointSample, VaryingDensity) {
  const FpsCloud c = fps_test::varying_density(20000, 9);
  expect_oracle(c.view(), params_of(300, 3));
}

TEST(FurthestPointSample, NonFiniteAndHugeCoordinates) {
  for (int variant = 0; variant < 5; ++variant) {
    SCOPED_TRACE(variant);
    FpsCloud c = fps_test::uniform_cube(1, 3000, 3, 10 + variant);
    switch (variant) {
      case 0: c.at(0, 17, 1) = std::nanf(""); c.at(0, 900, 0) = INFINITY; break;
      case 1: c.at(0, 5, 2) = -INFINITY; break;
      case 2: c.at(0, 123, 0) = 1e30f; c.at(0, 2000, 1) = -3e25f; break;  // s overflows to +inf
      case 3: c.at(0, 0, 0) = std::nanf(""); break;                          // the start itself
      case 4: c.at(0, 44, 2) = 1e18f; c.at(0, 45, 2) = -1e18f; break;        // large, still finite s
    }
    expect_oracle(c.view(), params_of(200));
  }
  FpsCloud all_nan(1, 50, 3);
  for (auto& v : all_nan.data) v = std::nanf("");
  const auto got = expect_oracle(all_nan.view(), params_of(5, 3));
  EXPECT_EQ(got, (std::vector<int64_t>{3, 0, 0, 0, 0}));
}

TEST(FurthestPointSample, MoreSamplesThanPointsRepeatsIndexZero) {
  const FpsCloud small = fps_test::uniform_cube(1, 5, 3, 11);
  const auto got = expect_oracle(small.view(), params_of(12, 2));
  for (int t = 5; t < 12; ++t) EXPECT_EQ(got[size_t(t)], 0);
  const FpsCloud big = fps_test::uniform_cube(1, 1100, 3, 12);  // tree path
  const auto g2 = expect_oracle(big.view(), params_of(1150, 9));
  for (int t = 1100; t < 1150; ++t) EXPECT_EQ(g2[size_t(t)], 0);
}

TEST(FurthestPointSample, ZeroSamplesWritesNothing) {
  const FpsCloud c = fps_test::uniform_cube(2, 10, 3, 13);
  int64_t guard[2] = {kSentinel, kSentinel};
  pcops::cpu::furthest_point_sample({}, c.view(), {}, params_of(0), guard);
  EXPECT_EQ(guard[0], kSentinel);
  EXPECT_EQ(guard[1], kSentinel);
}

TEST(FurthestPointSample, SinglePoint) {
  const FpsCloud c = fps_test::uniform_cube(1, 1, 3, 14);
  EXPECT_EQ(run(c.view(), {}, params_of(3)), (std::vector<int64_t>{0, 0, 0}));
}

TEST(FurthestPointSample, LengthsPadWithMinusOne) {
  FpsCloud c = fps_test::uniform_cube(5, 3000, 3, 15);
  const int64_t len[5] = {0, 1, 700, 3000, 1500};
  const LengthsView L{len, 5};
  const int64_t M = 900;
  const auto got = expect_oracle(c.view(), params_of(M), L);
  for (int b = 0; b < 5; ++b)
    for (int64_t t = 0; t < M; ++t) {
      const int64_t v = got[size_t(b * M + t)];
      if (t >= len[b]) {
        EXPECT_EQ(v, -1) << "cloud " << b << " slot " << t;
      } else {
        EXPECT_GE(v, 0);
        EXPECT_LT(v, len[b]);
      }
    }
  // start_index inside every non-empty cloud
  expect_oracle(c.view(), params_of(50, 1 - 1), L);
  const int64_t len2[5] = {0, 0, 0, 0, 0};
  const auto empty = run(c.view(), LengthsView{len2, 5}, params_of(4));
  for (int64_t v : empty) EXPECT_EQ(v, -1);
}

TEST(FurthestPointSample, StartIndexNonZero) {
  const FpsCloud big = fps_test::sphere_shell(1, 4000, 16);
  const auto g = expect_oracle(big.view(), params_of(128, 3999));
  EXPECT_EQ(g[0], 3999);
  const FpsCloud small = fps_test::uniform_cube(1, 300, 3, 17);
  expect_oracle(small.view(), params_of(64, 150));
}

TEST(FurthestPointSample, SkipNearOrigin) {
  for (int64_t n : {500, 6000}) {  // plain and tree path
    SCOPED_TRACE(n);
    FpsCloud c = fps_test::uniform_cube(1, n, 3, 18);
    // A third of the points within the excluded ball (x^2+y^2+z^2 <= 1e-3), the start among them.
    for (int64_t k = 0; k < n; k += 3)
      for (int d = 0; d < 3; ++d) c.at(0, k, d) *= 0.015f;
    const auto got = expect_oracle(c.view(), params_of(200, 0, true));
    for (size_t t = 1; t < got.size(); ++t) {
      const float x = c.at(0, got[t], 0), y = c.at(0, got[t], 1), z = c.at(0, got[t], 2);
      EXPECT_GT((x * x + y * y) + z * z, 1e-3f);
    }
  }
  FpsCloud near(1, 2000, 3);  // nothing eligible: the start, then index 0
  for (auto& v : near.data) v = 0.001f;
  EXPECT_EQ(expect_oracle(near.view(), params_of(4, 7, true)), (std::vector<int64_t>{7, 0, 0, 0}));
}

TEST(FurthestPointSample, OtherDimensions) {
  for (int64_t d : {1, 2, 5}) {
    SCOPED_TRACE(d);
    const FpsCloud c = fps_test::uniform_cube(2, 2500, d, 19 + uint32_t(d));
    expect_oracle(c.view(), params_of(200, 11));
  }
  FpsCloud line = fps_test::integer_grid(10, 20);  // D = 1 with ties: x coordinates only
  FpsCloud one(1, line.count, 1);
  for (int64_t k = 0; k < line.count; ++k) one.at(0, k, 0) = line.at(0, k, 0);
  expect_oracle(one.view(), params_of(30));
}

TEST(FurthestPointSample, BatchOfMixedClouds) {
  FpsCloud c(4, 3000, 3);
  const FpsCloud a = fps_test::sphere_shell(1, 3000, 21), g = fps_test::integer_grid(15, 22);  // 3375 points, the first 3000 used
  const FpsCloud u = fps_test::uniform_cube(1, 3000, 3, 23);
  for (int64_t k = 0; k < 3000; ++k)
    for (int d = 0; d < 3; ++d) {
      c.at(0, k, d) = a.at(0, k, d);
      c.at(1, k, d) = g.at(0, k, d);
      c.at(2, k, d) = u.at(0, k, d);
      c.at(3, k, d) = k == 10 ? std::nanf("") : u.at(0, k, d);  // plain path inside the batch
    }
  expect_oracle(c.view(), params_of(300, 5));
}

TEST(FurthestPointSample, StridedViewsMatchContiguous) {
  FpsCloud c = fps_test::sphere_shell(2, 3000, 24);
  const auto contiguous = expect_oracle(c.view(), params_of(256));
  const PointsView sv = c.strided_view();
  EXPECT_EQ(expect_oracle(sv, params_of(256)), contiguous);
  FpsCloud d5 = fps_test::uniform_cube(1, 400, 5, 25);
  expect_oracle(d5.strided_view(), params_of(64));
}

TEST(FurthestPointSample, ThreadCountIndependence) {
  FpsCloud c(6, 4000, 3);
  const FpsCloud s = fps_test::sphere_shell(6, 4000, 26);
  c.data = s.data;
  const auto ref = expect_oracle(c.view(), params_of(300, 1));
  pcops::CpuContext one;
  one.num_threads = 1;
  EXPECT_EQ(run(c.view(), {}, params_of(300, 1), one), ref);
  pcops::CpuContext many;
  many.num_threads = 4;
  EXPECT_EQ(run(c.view(), {}, params_of(300, 1), many), ref);
  // A custom seam that runs chunks of one element in reverse order.
  pcops::CpuContext custom;
  std::atomic<int> calls{0};
  custom.parallel_for = [&](int64_t b, int64_t e, int64_t, const std::function<void(int64_t, int64_t)>& body) {
    ++calls;
    for (int64_t i = e - 1; i >= b; --i) body(i, i + 1);
  };
  EXPECT_EQ(run(c.view(), {}, params_of(300, 1), custom), ref);
  EXPECT_GT(calls.load(), 0);
}

TEST(FurthestPointSample, EveryInstructionSetGivesTheSameBits) {
  using pcops::cpu::fps_detail::Isa;
  const Isa best = pcops::cpu::fps_detail::best_isa();
  FpsCloud grid = fps_test::integer_grid(12, 33);
  for (auto& v : grid.data) v = v * 0.1f + 0.3f;
  const FpsCloud shell = fps_test::sphere_shell(1, 5000, 34);
  const FpsCloud d5 = fps_test::uniform_cube(1, 700, 5, 35);
  FpsCloud nan = fps_test::uniform_cube(1, 2000, 3, 36);
  nan.at(0, 3, 1) = std::nanf("");
  for (Isa want : {Isa::Generic, Isa::Avx2, Isa::Avx512}) {
    if (static_cast<int>(want) > static_cast<int>(best)) continue;
    SCOPED_TRACE(static_cast<int>(want));
    const Isa before = pcops::cpu::fps_detail::force_isa(want);
    expect_oracle(grid.view(), params_of(900, 2));
    expect_oracle(shell.view(), params_of(300, 0, true));
    expect_oracle(d5.view(), params_of(100, 1));
    expect_oracle(nan.view(), params_of(100));
    pcops::cpu::fps_detail::force_isa(before);
  }
}

TEST(FurthestPointSample, LargeSingleCloudBuildsOverWorkers) {
  // >= 2^17 points: a single cloud builds its tree in chunks over the workers.
  FpsCloud c = fps_test::uniform_cube(1, 200000, 3, 37);
  for (int64_t k = 0; k < c.count; k += 7)
    for (int d = 0; d < 3; ++d) c.at(0, k, d) *= 0.01f;  // some points inside the skip ball
  for (bool skip : {false, true}) {
    SCOPED_TRACE(skip);
    const auto ref = expect_oracle(c.view(), params_of(40, 3, skip));
    for (int threads : {1, 2, 3}) {
      pcops::CpuContext ctx;
      ctx.num_threads = threads;
      EXPECT_EQ(run(c.view(), {}, params_of(40, 3, skip), ctx), ref) << threads << " threads";
    }
  }
}

// --- bad input ----------------------------------------------------------------------------

void expect_error(const PointsView& P, const LengthsView& L, const FpsParams& params,
                  pcops::ErrorKind kind) {
  // Validation must throw before writing: a small buffer is enough (ASan flags any write past it).
  std::vector<int64_t> out(64, kSentinel);
  try {
    pcops::cpu::furthest_point_sample({}, P, L, params, out.data());
    ADD_FAILURE() << "expected pcops::Error";
  } catch (const pcops::Error& e) {
    EXPECT_EQ(int(e.kind()), int(kind)) << e.what();
  }
  for (int64_t v : out) EXPECT_EQ(v, kSentinel) << "wrote output before validation failed";
}

TEST(FurthestPointSampleErrors, EveryCheck) {
  using pcops::ErrorKind;
  const FpsCloud c = fps_test::uniform_cube(2, 10, 3, 27);
  const PointsView ok = c.view();
  PointsView neg = ok;
  neg.count = -1;
  expect_error(neg, {}, params_of(1), ErrorKind::Value);
  PointsView d0 = ok;
  d0.dim = 0;
  expect_error(d0, {}, params_of(1), ErrorKind::Value);
  PointsView null = ok;
  null.data = nullptr;
  expect_error(null, {}, params_of(1), ErrorKind::Value);
  const int64_t one_len[1] = {3};
  expect_error(ok, LengthsView{one_len, 1}, params_of(1), ErrorKind::Value);  // wrong size
  const int64_t bad_len[2] = {3, 11};
  expect_error(ok, LengthsView{bad_len, 2}, params_of(1), ErrorKind::Value);  // > count
  const int64_t neg_len[2] = {-1, 3};
  expect_error(ok, LengthsView{neg_len, 2}, params_of(1), ErrorKind::Value);
  expect_error(ok, {}, params_of(-1), ErrorKind::Value);
  PointsView huge_batch = ok;
  huge_batch.batch = std::numeric_limits<int64_t>::max() / 2;
  expect_error(huge_batch, {}, params_of(4), ErrorKind::Value);  // output size overflows
  const FpsCloud d2 = fps_test::uniform_cube(1, 10, 2, 28);
  expect_error(d2.view(), {}, params_of(2, 0, true), ErrorKind::Value);  // skip needs 3-D
  const FpsCloud empty(1, 0, 3);
  expect_error(empty.view(), {}, params_of(1), ErrorKind::Value);  // no points, no lengths
  expect_error(ok, {}, params_of(2, 10), ErrorKind::Index);
  expect_error(ok, {}, params_of(2, -1), ErrorKind::Index);
  const int64_t lens[2] = {4, 0};
  expect_error(ok, LengthsView{lens, 2}, params_of(2, -1), ErrorKind::Index);
  expect_error(ok, LengthsView{lens, 2}, params_of(2, 4), ErrorKind::Index);  // start >= lengths[0]
  // Allowed: an empty cloud ignores start_index; M = 0 ignores it too.
  std::vector<int64_t> out(4, kSentinel);
  pcops::cpu::furthest_point_sample({}, ok, LengthsView{lens, 2}, params_of(2, 3), out.data());
  EXPECT_EQ(out[0], 3);
  EXPECT_EQ(out[2], -1);
  EXPECT_EQ(out[3], -1);
  pcops::cpu::furthest_point_sample({}, ok, {}, params_of(0, 99), out.data());
}

}  // namespace
