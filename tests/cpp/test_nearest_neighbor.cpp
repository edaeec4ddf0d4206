// nearest_neighbor (chamfer_distance's search) against a brute-force oracle written from the
// contract, in float32 and float64, norm 1 and 2, D = 1..7: ties, NaN/Inf, lengths, empty clouds,
// strided views, the kNN-grid route (float32 squared L2 3-D); plus ordered_sum and
// gather_rows_backward against their written orders, and every validation error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "oracle.hpp"
#include "pcops/error.hpp"
#include "pcops/nearest_neighbor.hpp"

namespace {

using pcops_test::Cloud;

// A [batch, count, dim] cloud of element type T, contiguous, with a strided copy laid out
// [batch][dim][count + 3].
template <class T>
struct TCloud {
  int64_t batch = 0, count = 0, dim = 0;
  std::vector<T> data, alt;
  TCloud(int64_t b, int64_t n, int64_t d) : batch(b), count(n), dim(d), data(b * n * d, T(0)) {}
  T& at(int64_t b, int64_t n, int64_t d) { return data[(b * count + n) * dim + d]; }
  T at(int64_t b, int64_t n, int64_t d) const { return data[(b * count + n) * dim + d]; }
};

template <class T>
using ViewOf = std::conditional_t<std::is_same_v<T, float>, pcops::PointsView, pcops::PointsView64>;

template <class T>
ViewOf<T> view(const TCloud<T>& c) {
  return ViewOf<T>::contiguous(c.data.empty() ? nullptr : c.data.data(), c.batch, c.count, c.dim);
}

template <class T>
ViewOf<T> strided(TCloud<T>& c) {
  const int64_t ld = c.count + 3;
  c.alt.assign(static_cast<size_t>(c.batch * c.dim * ld + 1), std::numeric_limits<T>::quiet_NaN());
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t n = 0; n < c.count; ++n)
      for (int64_t d = 0; d < c.dim; ++d) c.alt[(b * c.dim + d) * ld + n] = c.at(b, n, d);
  return ViewOf<T>{c.alt.data(), c.batch, c.count, c.dim, c.dim * ld, 1, ld};
}

template <class T>
TCloud<T> random_cloud(std::mt19937& rng, int64_t b, int64_t n, int64_t d, int levels = 0) {
  TCloud<T> c(b, n, d);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::uniform_int_distribution<int> q(0, levels > 0 ? levels - 1 : 0);
  for (T& v : c.data) v = levels > 0 ? static_cast<T>(q(rng)) : static_cast<T>(u(rng));
  return c;
}

// The contract, written out: s in coordinate order (tests build with -ffp-contract=off), NaN as
// +inf, the smallest (key, index).
template <class T>
std::vector<int64_t> oracle(const TCloud<T>& x, const TCloud<T>& y, const std::vector<int64_t>& xl,
                            const std::vector<int64_t>& yl, int norm) {
  std::vector<int64_t> out(static_cast<size_t>(x.batch * x.count), -1);
  for (int64_t b = 0; b < x.batch; ++b) {
    const int64_t mq = xl.empty() ? x.count : xl[b], n = yl.empty() ? y.count : yl[b];
    for (int64_t i = 0; i < mq; ++i) {
      T best = 0;
      int64_t arg = -1;
      for (int64_t j = 0; j < n; ++j) {
        T s = 0;
        for (int64_t d = 0; d < x.dim; ++d) {
          const T diff = x.at(b, i, d) - y.at(b, j, d);
          const T term = norm == 2 ? diff * diff : std::fabs(diff);
          s = d == 0 ? term : s + term;
        }
        if (std::isnan(s)) s = std::numeric_limits<T>::infinity();
        if (arg < 0 || s < best) {
          best = s;
          arg = j;
        }
      }
      out[b * x.count + i] = arg;
    }
  }
  return out;
}

template <class T>
std::vector<int64_t> run(const ViewOf<T>& x, const ViewOf<T>& y, const std::vector<int64_t>& xl,
                         const std::vector<int64_t>& yl, int norm, const pcops::CpuContext& ctx = {}) {
  std::vector<int64_t> out(static_cast<size_t>(x.batch * x.count), pcops_test::kSentinelIdx);
  const pcops::LengthsView lx{xl.empty() ? nullptr : xl.data(), static_cast<int64_t>(xl.size())};
  const pcops::LengthsView ly{yl.empty() ? nullptr : yl.data(), static_cast<int64_t>(yl.size())};
  pcops::cpu::nearest_neighbor(ctx, x, y, lx, ly, pcops::NearestNeighborParams{norm}, out.data());
  return out;
}

template <class T>
void expect_exact(TCloud<T>& x, TCloud<T>& y, int norm, const std::vector<int64_t>& xl = {},
                  const std::vector<int64_t>& yl = {}) {
  const auto want = oracle(x, y, xl, yl, norm);
  EXPECT_EQ(run<T>(view(x), view(y), xl, yl, norm), want)
      << "norm=" << norm << " D=" << x.dim << " P1=" << x.count << " P2=" << y.count << " T=" << sizeof(T);
  EXPECT_EQ(run<T>(strided(x), strided(y), xl, yl, norm), want) << "strided";
}

template <class T>
void uniform_all_dims() {
  std::mt19937 rng(1);
  for (int64_t d = 1; d <= 7; ++d)
    for (int norm : {1, 2}) {
      auto x = random_cloud<T>(rng, 2, 150, d);
      auto y = random_cloud<T>(rng, 2, 700, d);
      expect_exact(x, y, norm);
    }
}

TEST(NearestNeighbor, Float32AllDimsBothNorms) { uniform_all_dims<float>(); }
TEST(NearestNeighbor, Float64AllDimsBothNorms) { uniform_all_dims<double>(); }

template <class T>
void ties_and_duplicates() {
  std::mt19937 rng(2);
  for (int64_t d : {1, 2, 3, 5})
    for (int norm : {1, 2}) {
      auto x = random_cloud<T>(rng, 2, 200, d, 3);  // integer lattice: many exact ties
      auto y = random_cloud<T>(rng, 2, 900, d, 3);
      expect_exact(x, y, norm);
    }
}

TEST(NearestNeighbor, ExactTiesPickLowestIndex) {
  ties_and_duplicates<float>();
  ties_and_duplicates<double>();
}

template <class T>
void non_finite() {
  std::mt19937 rng(3);
  const T nan = std::numeric_limits<T>::quiet_NaN(), inf = std::numeric_limits<T>::infinity();
  for (int norm : {1, 2}) {
    auto x = random_cloud<T>(rng, 2, 40, 3);
    auto y = random_cloud<T>(rng, 2, 300, 3);
    x.at(0, 0, 0) = nan;  // every key NaN: index 0
    x.at(0, 1, 1) = inf;  // every key +inf (or NaN): index 0
    x.at(0, 2, 2) = std::numeric_limits<T>::max();  // squares overflow for norm 2
    y.at(0, 0, 1) = nan;
    y.at(0, 5, 0) = inf;
    for (int64_t j = 0; j < 300; ++j) y.at(1, j, 2) = j % 3 == 0 ? nan : y.at(1, j, 2);
    expect_exact(x, y, norm);
    auto x1 = run<T>(view(x), view(y), {}, {}, norm);
    EXPECT_EQ(x1[0], 0);
    EXPECT_EQ(x1[1], 0);
  }
}

TEST(NearestNeighbor, NanAndInfRankLast) {
  non_finite<float>();
  non_finite<double>();
}

template <class T>
void lengths_and_empty() {
  std::mt19937 rng(4);
  for (int64_t d : {2, 3})
    for (int norm : {1, 2}) {
      auto x = random_cloud<T>(rng, 5, 60, d);
      auto y = random_cloud<T>(rng, 5, 80, d);
      expect_exact(x, y, norm, {60, 0, 17, 60, 1}, {80, 80, 0, 1, 33});
      // An empty y cloud without lengths: every row -1.
      TCloud<T> e(5, 0, d);
      for (const int64_t v : run<T>(view(x), view(e), {}, {}, norm)) EXPECT_EQ(v, -1);
      TCloud<T> none(0, 60, d);
      EXPECT_TRUE(run<T>(view(none), view(none), {}, {}, norm).empty());
    }
}

TEST(NearestNeighbor, LengthsAndEmptyClouds) {
  lengths_and_empty<float>();
  lengths_and_empty<double>();
}

// float32 squared-L2 3-D runs the kNN (its grid above 512 points): the same index as brute force.
TEST(NearestNeighbor, GridRouteMatchesOracle) {
  std::mt19937 rng(5);
  auto x = random_cloud<float>(rng, 2, 3000, 3);
  auto y = random_cloud<float>(rng, 2, 5000, 3);
  expect_exact(x, y, 2, {3000, 1200}, {5000, 4096});
  auto xq = random_cloud<float>(rng, 1, 2000, 3, 5);  // lattice ties through the grid
  auto yq = random_cloud<float>(rng, 1, 4000, 3, 5);
  expect_exact(xq, yq, 2);
  // The float64 brute force agrees with float32 on values exactly representable in both.
  TCloud<double> xd(1, 2000, 3), yd(1, 4000, 3);
  for (size_t i = 0; i < xq.data.size(); ++i) xd.data[i] = xq.data[i];
  for (size_t i = 0; i < yq.data.size(); ++i) yd.data[i] = yq.data[i];
  EXPECT_EQ(run<double>(view(xd), view(yd), {}, {}, 2), run<float>(view(xq), view(yq), {}, {}, 2));
}

TEST(NearestNeighbor, ThreadCountDoesNotMatter) {
  std::mt19937 rng(6);
  auto x = random_cloud<double>(rng, 3, 500, 4);
  auto y = random_cloud<double>(rng, 3, 2000, 4);
  pcops::CpuContext one;
  one.num_threads = 1;
  pcops::CpuContext many;
  many.num_threads = 7;
  EXPECT_EQ(run<double>(view(x), view(y), {}, {}, 1, one), run<double>(view(x), view(y), {}, {}, 1, many));
}

TEST(NearestNeighbor, Errors) {
  TCloud<float> x(2, 4, 3), y(2, 5, 3), y2(3, 5, 3), yd(2, 5, 2);
  std::vector<int64_t> out(8);
  const pcops::CpuContext ctx;
  auto call = [&](const pcops::PointsView& a, const pcops::PointsView& b, pcops::LengthsView la,
                  pcops::LengthsView lb, int64_t norm) {
    pcops::cpu::nearest_neighbor(ctx, a, b, la, lb, pcops::NearestNeighborParams{norm}, out.data());
  };
  EXPECT_THROW(call(view(x), view(y2), {}, {}, 2), pcops::Error);  // batch
  EXPECT_THROW(call(view(x), view(yd), {}, {}, 2), pcops::Error);  // dimension
  EXPECT_THROW(call(view(x), view(y), {}, {}, 3), pcops::Error);   // norm
  EXPECT_THROW(call(view(x), view(y), {}, {}, 0), pcops::Error);
  const int64_t too_long[2] = {5, 1}, negative[2] = {1, -1}, ok[2] = {1, 2};
  EXPECT_THROW(call(view(x), view(y), {too_long, 2}, {}, 2), pcops::Error);
  EXPECT_THROW(call(view(x), view(y), {}, {negative, 2}, 2), pcops::Error);
  EXPECT_THROW(call(view(x), view(y), {ok, 1}, {}, 2), pcops::Error);  // one length per cloud
  pcops::PointsView zero_dim = view(x);
  zero_dim.dim = 0;
  EXPECT_THROW(call(zero_dim, zero_dim, {}, {}, 2), pcops::Error);
  try {
    call(view(x), view(y), {}, {}, 3);
  } catch (const pcops::Error& e) {
    EXPECT_EQ(e.kind(), pcops::ErrorKind::Value);
    EXPECT_NE(std::string(e.what()).find("norm"), std::string::npos);
  }
  TCloud<double> xd(2, 4, 3), ydd(2, 5, 2);
  std::vector<int64_t> out2(8);
  EXPECT_THROW(pcops::cpu::nearest_neighbor(ctx, view(xd), view(ydd), {}, {}, {}, out2.data()), pcops::Error);
}

// ---------------------------------------------------------------------------------------------
// ordered_sum and gather_rows_backward

template <class T>
T written_order_sum(std::vector<T> v) {
  if (v.empty()) return T(0);
  while (v.size() > 1) {
    std::vector<T> next;
    for (size_t g = 0; g < v.size(); g += 32) {
      T s = v[g];
      for (size_t i = g + 1; i < std::min(v.size(), g + 32); ++i) s = s + v[i];
      next.push_back(s);
    }
    v = next;
  }
  return v[0];
}

template <class T>
void ordered_sum_lengths() {
  std::mt19937 rng(7);
  std::normal_distribution<double> g(0.0, 1.0);
  for (int64_t len : {0, 1, 2, 31, 32, 33, 1023, 1024, 1025, 32767, 32768, 32769, 100000, 1048577}) {
    const int64_t rows = len > 100000 ? 1 : 3;
    std::vector<T> v(static_cast<size_t>(rows * len));
    for (T& e : v) e = static_cast<T>(g(rng) * 1e3);
    std::vector<T> out(static_cast<size_t>(rows), T(-7));
    pcops::cpu::ordered_sum({}, v.data(), rows, len, out.data());
    for (int64_t r = 0; r < rows; ++r) {
      const T want = written_order_sum(std::vector<T>(v.begin() + r * len, v.begin() + (r + 1) * len));
      EXPECT_EQ(std::memcmp(&out[r], &want, sizeof(T)), 0) << "len=" << len << ": " << out[r] << " vs " << want;
    }
  }
  // -0.0 alone stays -0.0; an empty row is +0.
  std::vector<T> negzero{T(-0.0)};
  T one = 1;
  pcops::cpu::ordered_sum({}, negzero.data(), 1, 1, &one);
  EXPECT_TRUE(std::signbit(one));
  pcops::cpu::ordered_sum({}, negzero.data(), 1, 0, &one);
  EXPECT_FALSE(std::signbit(one));
  EXPECT_EQ(one, T(0));
}

TEST(NearestNeighbor, OrderedSumFollowsTheWrittenOrder) {
  ordered_sum_lengths<float>();
  ordered_sum_lengths<double>();
}

// ordered_norm: squares added left to right, then a correctly rounded square root (IEEE sqrt of
// the type).
template <class T>
void ordered_norm_rows() {
  std::mt19937 rng(17);
  std::uniform_int_distribution<int> q(-8, 8);
  std::normal_distribution<double> g(0.0, 1.0);
  for (int64_t len : {0, 1, 2, 3, 4, 7}) {
    const int64_t rows = 4000;
    std::vector<T> v(static_cast<size_t>(rows * len));
    // Half the rows on a quarter lattice (exact squares, square roots of small rationals: the
    // case where a faithful but not correctly rounded sqrt shows), half Gaussian.
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = (i / std::max<int64_t>(len, 1)) % 2 ? static_cast<T>(q(rng) / 4.0) : static_cast<T>(g(rng));
    std::vector<T> out(static_cast<size_t>(rows), T(-7));
    pcops::cpu::ordered_norm({}, v.data(), rows, len, out.data());
    for (int64_t r = 0; r < rows; ++r) {
      T acc = len ? v[r * len] * v[r * len] : T(0);
      for (int64_t c = 1; c < len; ++c) acc = acc + v[r * len + c] * v[r * len + c];
      const T want = std::sqrt(acc);
      ASSERT_EQ(std::memcmp(&out[r], &want, sizeof(T)), 0) << "len=" << len << " row " << r << ": " << out[r]
                                                            << " vs " << want;
    }
  }
  T got = 0;
  EXPECT_THROW(pcops::cpu::ordered_norm({}, static_cast<const T*>(nullptr), 2, 3, &got), pcops::Error);
}

TEST(NearestNeighbor, OrderedNormIsCorrectlyRounded) {
  ordered_norm_rows<float>();
  ordered_norm_rows<double>();
  // sqrt(0.25^2 + 0.25^2) = sqrt(0.125) = 0.35355339059327376... rounds to 0.3535533905932738 in
  // float64 (torch's CPU sqrt gives the neighbour below).
  const std::vector<double> row{0.25, 0.25, 0.0};
  double got = 0;
  pcops::cpu::ordered_norm({}, row.data(), 1, 3, &got);
  EXPECT_EQ(got, 0.3535533905932738);
  EXPECT_NE(got, 0.35355339059327373);
}

template <class T>
void gather_backward() {
  std::mt19937 rng(8);
  std::normal_distribution<double> g(0.0, 1.0);
  const int64_t B = 3, P = 5000, U = 3, M = 70;
  std::vector<T> grad(static_cast<size_t>(B * P * U));
  for (T& e : grad) e = static_cast<T>(g(rng));
  std::vector<int64_t> idx(static_cast<size_t>(B * P));
  std::uniform_int_distribution<int64_t> pick(-1, M - 1);
  for (int64_t& i : idx) i = pick(rng);
  std::vector<T> want(static_cast<size_t>(B * M * U), T(0));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t p = 0; p < P; ++p)
      if (idx[b * P + p] >= 0)
        for (int64_t u = 0; u < U; ++u) {
          T& w = want[(b * M + idx[b * P + p]) * U + u];
          w = w + grad[(b * P + p) * U + u];
        }
  for (int threads : {1, 5}) {
    pcops::CpuContext ctx;
    ctx.num_threads = threads;
    std::vector<T> out(want.size(), T(-7));
    pcops::cpu::gather_rows_backward(ctx, grad.data(), idx.data(), B, P, U, M, out.data());
    EXPECT_EQ(out, want);
  }
  idx[17] = M;  // out of range
  std::vector<T> out(want.size());
  EXPECT_THROW(pcops::cpu::gather_rows_backward({}, grad.data(), idx.data(), B, P, U, M, out.data()), pcops::Error);
  idx[17] = -2;
  EXPECT_THROW(pcops::cpu::gather_rows_backward({}, grad.data(), idx.data(), B, P, U, M, out.data()), pcops::Error);
}

TEST(NearestNeighbor, GatherRowsBackwardAscendingOrder) {
  gather_backward<float>();
  gather_backward<double>();
}

}  // namespace
