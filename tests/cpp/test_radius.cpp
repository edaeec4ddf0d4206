// Ragged radius against a float32-exact brute force (first max_num_neighbors matches in
// reference order, strict s < fl32(r*r) with the product in double): grid (3-D, large clouds)
// and brute-force paths, empty clouds, ignore_same_index, caps; also ragged kNN / nearest / FPS
// smoke checks and validation errors.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "common/distance.hpp"
#include "pcops/error.hpp"
#include "pcops/furthest_point_sample.hpp"
#include "pcops/knn.hpp"
#include "pcops/nearest.hpp"
#include "pcops/radius.hpp"

namespace {

struct Edges {
  std::vector<int64_t> buf;
  int64_t E = -1;
  pcops::EdgeAllocator alloc() {
    return [this](int64_t e) {
      E = e;
      buf.assign(static_cast<size_t>(2 * e), -7);  // sentinel: an unwritten slot fails
      return buf.data();
    };
  }
  std::vector<std::pair<int64_t, int64_t>> pairs() const {
    std::vector<std::pair<int64_t, int64_t>> p;
    for (int64_t e = 0; e < E; ++e) p.emplace_back(buf[e], buf[E + e]);
    return p;
  }
};

std::vector<std::pair<int64_t, int64_t>> oracle(const std::vector<float>& x,
                                                const std::vector<float>& y, int64_t D,
                                                const std::vector<int64_t>& px,
                                                const std::vector<int64_t>& py, double r,
                                                int64_t cap, bool ignore) {
  const float R2 = static_cast<float>(r * r);
  std::vector<std::pair<int64_t, int64_t>> out;
  for (size_t b = 0; b + 1 < px.size(); ++b)
    for (int64_t i = py[b]; i < py[b + 1]; ++i) {
      int64_t c = 0;
      for (int64_t j = px[b]; j < px[b + 1] && c < cap; ++j) {
        if (ignore && i == j) continue;
        const float s = pcops::common::squared_distance(&y[i * D], 1, &x[j * D], 1, D);
        if (s < R2) {
          out.emplace_back(i, j);
          ++c;
        }
      }
    }
  return out;
}

std::vector<float> random_points(std::mt19937& rng, int64_t n, int64_t D, float scale = 1.0f) {
  std::uniform_real_distribution<float> u(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n * D));
  for (auto& f : v) f = u(rng);
  return v;
}

void expect_radius(const std::vector<float>& x, const std::vector<float>& y, int64_t D,
                   const std::vector<int64_t>& px, const std::vector<int64_t>& py, double r,
                   int64_t cap, bool ignore, const pcops::CpuContext& ctx = {}) {
  Edges e;
  const auto xv = pcops::RaggedPointsView::contiguous(x.data(), px.back(), D);
  const auto yv = pcops::RaggedPointsView::contiguous(y.data(), py.back(), D);
  const int64_t E = pcops::cpu::radius(ctx, xv, yv, {px.data(), (int64_t)px.size()},
                                       {py.data(), (int64_t)py.size()},
                                       pcops::RadiusParams{r, cap, ignore}, e.alloc());
  EXPECT_EQ(E, e.E);
  EXPECT_EQ(e.pairs(), oracle(x, y, D, px, py, r, cap, ignore))
      << "r=" << r << " cap=" << cap << " D=" << D;
}

// Tight clusters far smaller than the box: the grid stays overfull within its cell budget and
// the clouds go through a spatial index; the same edges as the oracle, with the self match
// skipped (the radius graph) or kept, caps below and above the matches, non-finite points.
TEST(Radius, TightClustersThroughTheIndexMatchOracle) {
  std::mt19937 rng(31);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  const std::vector<int64_t> px = {0, 6000, 6000, 13000};  // an empty cloud in the middle
  std::vector<float> x(static_cast<size_t>(px.back() * 3));
  for (size_t b = 0; b + 1 < px.size(); ++b) {
    float centres[4][3];
    for (auto& c : centres)
      for (float& v : c) v = u(rng);
    for (int64_t i = px[b]; i < px[b + 1]; ++i)
      for (int d = 0; d < 3; ++d) x[i * 3 + d] = (i % 25 == 0) ? u(rng) : centres[i % 4][d] + 1e-4f * g(rng);
  }
  x[3 * 777 + 1] = NAN;
  for (double r : {5e-5, 3e-4})
    for (int64_t cap : {4, 64})
      for (bool ignore : {true, false}) expect_radius(x, x, 3, px, px, r, cap, ignore);
}

TEST(Radius, GridAndBruteMatchOracle3D) {
  std::mt19937 rng(3);
  const std::vector<int64_t> px{0, 3000, 3000, 3400, 6400}, py{0, 500, 520, 520, 900};
  auto x = random_points(rng, px.back(), 3);
  auto y = random_points(rng, py.back(), 3);
  for (double r : {0.0, 0.01, 0.05, 0.1, 0.3, 2.0})
    for (int64_t cap : {0, 1, 7, 32, 100000}) expect_radius(x, y, 3, px, py, r, cap, false);
}

TEST(Radius, SelfQueryIgnoreSameIndex) {
  std::mt19937 rng(4);
  const std::vector<int64_t> p{0, 2000, 2000, 2600};
  auto x = random_points(rng, p.back(), 3);
  for (int64_t cap : {1, 5, 64}) {
    expect_radius(x, x, 3, p, p, 0.07, cap, true);
    expect_radius(x, x, 3, p, p, 0.07, cap, false);
  }
}

TEST(Radius, AnyDimensionAndThreads) {
  std::mt19937 rng(5);
  const std::vector<int64_t> px{0, 300, 700}, py{0, 50, 170};
  for (int64_t D : {1, 2, 5}) {
    auto x = random_points(rng, px.back(), D);
    auto y = random_points(rng, py.back(), D);
    pcops::CpuContext one;
    one.num_threads = 1;
    expect_radius(x, y, D, px, py, 0.2, 10, false);
    expect_radius(x, y, D, px, py, 0.2, 10, false, one);
  }
}

TEST(Radius, BoundaryIsStrictAndDoubleProduct) {
  const double r = 0.1;
  const float R2 = static_cast<float>(r * r);
  float at = std::sqrt(R2);
  while (at * at < R2) at = std::nextafter(at, 1.0f);
  float in = at;
  while (in * in >= R2) in = std::nextafter(in, 0.0f);
  std::vector<float> x{0, 0, 0};
  std::vector<float> y{in, 0, 0, at, 0, 0};
  expect_radius(x, y, 3, {0, 1}, {0, 2}, r, 4, false);
  Edges e;
  pcops::cpu::radius({}, pcops::RaggedPointsView::contiguous(x.data(), 1, 3),
                     pcops::RaggedPointsView::contiguous(y.data(), 2, 3),
                     {std::vector<int64_t>{0, 1}.data(), 2}, {std::vector<int64_t>{0, 2}.data(), 2},
                     pcops::RadiusParams{r, 4, false}, e.alloc());
  ASSERT_EQ(e.E, 1);
  EXPECT_EQ(e.buf[0], 0);
}

TEST(Radius, Errors) {
  std::vector<float> x(6, 0.0f);
  const std::vector<int64_t> p{0, 2}, bad{0, 3}, unsorted{0, 2, 1, 2};
  const auto v = pcops::RaggedPointsView::contiguous(x.data(), 2, 3);
  Edges e;
  EXPECT_THROW(pcops::cpu::radius({}, v, v, {p.data(), 2}, {p.data(), 2}, {-1.0, 4, false}, e.alloc()),
               pcops::Error);
  EXPECT_THROW(pcops::cpu::radius({}, v, v, {p.data(), 2}, {p.data(), 2}, {NAN, 4, false}, e.alloc()),
               pcops::Error);
  EXPECT_THROW(pcops::cpu::radius({}, v, v, {bad.data(), 2}, {p.data(), 2}, {1.0, 4, false}, e.alloc()),
               pcops::Error);
  EXPECT_THROW(pcops::cpu::radius({}, v, v, {unsorted.data(), 4}, {unsorted.data(), 4}, {1.0, 4, false},
                                  e.alloc()),
               pcops::Error);
  EXPECT_THROW(pcops::cpu::radius({}, v, v, {p.data(), 2}, {p.data(), 2}, {1.0, -1, false}, e.alloc()),
               pcops::Error);
}

TEST(RaggedKnn, MatchesOracleAndNearest) {
  std::mt19937 rng(6);
  const std::vector<int64_t> px{0, 200, 200, 2000}, py{0, 30, 40, 600};
  auto x = random_points(rng, px.back(), 3);
  auto y = random_points(rng, py.back(), 3);
  const auto xv = pcops::RaggedPointsView::contiguous(x.data(), px.back(), 3);
  const auto yv = pcops::RaggedPointsView::contiguous(y.data(), py.back(), 3);
  Edges e;
  const int64_t k = 6;
  pcops::cpu::knn_ragged({}, xv, yv, {px.data(), 4}, {py.data(), 4}, {k, false}, e.alloc());
  std::vector<std::pair<int64_t, int64_t>> want;
  for (int b = 0; b < 3; ++b)
    for (int64_t i = py[b]; i < py[b + 1]; ++i) {
      std::vector<std::pair<float, int64_t>> c;
      for (int64_t j = px[b]; j < px[b + 1]; ++j)
        c.emplace_back(pcops::common::squared_distance(&y[i * 3], 1, &x[j * 3], 1, 3), j);
      std::sort(c.begin(), c.end());
      for (int64_t t = 0; t < std::min<int64_t>(k, (int64_t)c.size()); ++t) want.emplace_back(i, c[t].second);
    }
  EXPECT_EQ(e.pairs(), want);

  // nearest: y as the query side against x; cloud 1 has y rows but no x rows -> error.
  std::vector<int64_t> out(static_cast<size_t>(py.back()), -7);
  EXPECT_THROW(pcops::cpu::nearest({}, yv, xv, {py.data(), 4}, {px.data(), 4}, out.data()), pcops::Error);
  const std::vector<int64_t> px2{0, 200, 2000}, py2{0, 40, 600};
  pcops::cpu::nearest({}, yv, xv, {py2.data(), 3}, {px2.data(), 3}, out.data());
  for (int b = 0; b < 2; ++b)
    for (int64_t i = py2[b]; i < py2[b + 1]; ++i) {
      std::pair<float, int64_t> best{INFINITY, -1};
      for (int64_t j = px2[b]; j < px2[b + 1]; ++j)
        best = std::min(best, {pcops::common::squared_distance(&y[i * 3], 1, &x[j * 3], 1, 3), j});
      EXPECT_EQ(out[i], best.second);
    }
}

TEST(RaggedFps, PerCloudCountsAndStarts) {
  std::vector<float> sq{-1, -1, -1, 1, 1, -1, 1, 1, -2, -2, -2, 2, 2, -2, 2, 2};
  const std::vector<int64_t> p{0, 4, 4, 8}, counts{2, 0, 3}, starts{0, 0, 1};
  std::vector<int64_t> out(5, -7);
  pcops::cpu::furthest_point_sample_ragged({}, pcops::RaggedPointsView::contiguous(sq.data(), 8, 2),
                                           {p.data(), 4}, counts.data(), starts.data(), out.data());
  EXPECT_EQ(out, (std::vector<int64_t>{0, 3, 5, 6, 4}));
  const std::vector<int64_t> bad_counts{2, 1, 3};
  EXPECT_THROW(pcops::cpu::furthest_point_sample_ragged(
                   {}, pcops::RaggedPointsView::contiguous(sq.data(), 8, 2), {p.data(), 4},
                   bad_counts.data(), starts.data(), out.data()),
               pcops::Error);
}

}  // namespace
