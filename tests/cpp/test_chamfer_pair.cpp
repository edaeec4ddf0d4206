// chamfer_pair_distance, its backward and chamfer_reduce (chamfer_distance's fused operators)
// against oracles written from the contract in pcops/chamfer_pair.hpp: float32 and float64, norm 1
// and 2, -1 indices, repeated targets, strided views, signed zeros, an empty y; and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "pcops/chamfer_pair.hpp"
#include "pcops/error.hpp"

namespace {

template <class T>
using ViewOf = std::conditional_t<std::is_same_v<T, float>, pcops::PointsView, pcops::PointsView64>;

template <class T>
bool same_bits(T a, T b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

template <class T>
T sgn(T d) {
  return d > T(0) ? T(1) : T(-1);
}

// Written from the contract (tests build with -ffp-contract=off).
template <class T>
void oracle(const std::vector<T>& x, const std::vector<T>& y, const std::vector<int64_t>& idx, const std::vector<T>& g,
            int64_t B, int64_t P, int64_t Q, int64_t D, int norm, std::vector<T>& out, std::vector<T>& gx,
            std::vector<T>& gy) {
  out.assign(B * P, T(0));
  gx.assign(B * P * D, T(0));
  gy.assign(B * Q * D, T(0));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t p = 0; p < P; ++p) {
      const int64_t r = b * P + p, j = idx[r];
      const T gp = j < 0 ? T(0) : g[r];
      const int64_t jj = j < 0 ? 0 : j;
      T s = T(0);
      for (int64_t i = 0; i < D; ++i) {
        const T yv = Q > 0 ? y[(b * Q + jj) * D + i] : T(0);
        const T d = x[r * D + i] - yv;
        const T t = norm == 2 ? d * d : d * sgn(d);
        s = i == 0 ? t : s + t;
        T e;
        if (norm == 2) {
          const T h = gp * d;
          e = h + h;
        } else {
          e = gp * sgn(d);
        }
        gx[r * D + i] = D > 1 ? e + T(0) : e;
      }
      if (j >= 0) out[r] = s;
    }
  for (int64_t b = 0; b < B; ++b)  // ascending p per target row, from +0
    for (int64_t p = 0; p < P; ++p) {
      const int64_t r = b * P + p, j = idx[r];
      if (j < 0) continue;
      for (int64_t i = 0; i < D; ++i) {
        const T d = x[r * D + i] - y[(b * Q + j) * D + i];
        T e;
        if (norm == 2) {
          const T h = g[r] * d;
          e = h + h;
        } else {
          e = g[r] * sgn(d);
        }
        gy[(b * Q + j) * D + i] = gy[(b * Q + j) * D + i] + (-e);
      }
    }
}

template <class T>
void check_case(std::mt19937& rng, int64_t B, int64_t P, int64_t Q, int64_t D, int norm) {
  std::uniform_int_distribution<int> lattice(0, 3);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<T> x(B * P * D), y(B * Q * D), g(B * P);
  for (T& v : x) v = static_cast<T>(lattice(rng)) * T(0.5);  // zero differences and ties
  for (T& v : y) v = static_cast<T>(lattice(rng)) * T(0.5);
  for (T& v : g) v = static_cast<T>(normal(rng));
  std::vector<int64_t> idx(B * P);
  std::uniform_int_distribution<int64_t> pick(-1, Q > 0 ? Q - 1 : -1);
  for (int64_t& j : idx) j = Q > 0 ? (pick(rng) % 3 == 0 ? 0 : pick(rng)) : -1;  // repeated targets
  // y strided: [B][D][Q + 2]
  const int64_t ld = Q + 2;
  std::vector<T> ys(B * D * ld + 1, T(7));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t q = 0; q < Q; ++q)
      for (int64_t i = 0; i < D; ++i) ys[(b * D + i) * ld + q] = y[(b * Q + q) * D + i];
  const ViewOf<T> xv = ViewOf<T>::contiguous(x.data(), B, P, D);
  const ViewOf<T> yv{ys.data(), B, Q, D, D * ld, 1, ld};
  std::vector<T> want, wgx, wgy;
  oracle(x, y, idx, g, B, P, Q, D, norm, want, wgx, wgy);
  std::vector<T> out(B * P, T(9)), gx(B * P * D, T(9)), gy(B * Q * D, T(9));
  const pcops::CpuContext ctx;
  const pcops::ChamferPairParams params{norm};
  pcops::cpu::chamfer_pair_distance(ctx, xv, yv, idx.data(), params, out.data());
  pcops::cpu::chamfer_pair_distance_backward(ctx, pcops::RowsGradView<T>{g.data(), P, 1}, xv, yv, idx.data(), params,
                                             gx.data(), gy.data());
  for (size_t k = 0; k < out.size(); ++k) ASSERT_TRUE(same_bits(out[k], want[k])) << "out " << k;
  for (size_t k = 0; k < gx.size(); ++k) ASSERT_TRUE(same_bits(gx[k], wgx[k])) << "grad_x " << k;
  for (size_t k = 0; k < gy.size(); ++k) ASSERT_TRUE(same_bits(gy[k], wgy[k])) << "grad_y " << k;
}

TEST(ChamferPair, MatchesContract) {
  std::mt19937 rng(11);
  for (int norm : {1, 2})
    for (int64_t D : {1, 3, 6}) {
      check_case<float>(rng, 3, 200, 37, D, norm);
      check_case<double>(rng, 2, 150, 5000, D, norm);
      check_case<float>(rng, 2, 20, 0, D, norm);  // empty y: every index -1
    }
}

TEST(ChamferPair, SignedZeros) {
  // norm 1, equal coordinates: the term is -0 (d * -1), the sum of -0 terms stays -0.
  const float x[2] = {1.f, 2.f}, y[2] = {1.f, 2.f};
  const int64_t idx[1] = {0};
  float out = 5.f;
  const pcops::CpuContext ctx;
  pcops::cpu::chamfer_pair_distance(ctx, pcops::PointsView::contiguous(x, 1, 1, 2),
                                    pcops::PointsView::contiguous(y, 1, 1, 2), idx, {1}, &out);
  EXPECT_TRUE(std::signbit(out) && out == 0.f);
}

template <class T>
void check_reduce(bool mean, int64_t mode, bool with_y, bool lengths) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const int64_t B = 3, P1 = 70, P2 = 40;
  std::vector<T> cx(B * P1), cy(B * P2);
  for (T& v : cx) v = static_cast<T>(u(rng));
  for (T& v : cy) v = static_cast<T>(u(rng));
  const int64_t xl[B] = {70, 0, 9}, yl[B] = {40, 3, 0};
  const pcops::CpuContext ctx;
  auto osum = [&](const T* v, int64_t n) {
    T s[1];
    pcops::cpu::ordered_sum(ctx, v, 1, n, s);
    return s[0];
  };
  std::vector<T> l(B);
  for (int64_t b = 0; b < B; ++b) {
    const T dx = static_cast<T>(std::max<int64_t>(lengths ? xl[b] : P1, 1));
    const T dy = static_cast<T>(std::max<int64_t>(lengths ? yl[b] : P2, 1));
    T v = mean ? osum(&cx[b * P1], P1) / dx : osum(&cx[b * P1], P1);
    if (with_y) v = v + (mean ? osum(&cy[b * P2], P2) / dy : osum(&cy[b * P2], P2));
    l[b] = v;
  }
  std::vector<T> want = l;
  if (mode > 0) want = {mode == 2 ? osum(l.data(), B) / T(B) : osum(l.data(), B)};
  std::vector<T> got(want.size());
  const pcops::ChamferReduceParams params{mean, mode};
  pcops::cpu::chamfer_reduce(ctx, cx.data(), P1, with_y ? cy.data() : nullptr, P2, B, lengths ? xl : nullptr,
                             lengths ? yl : nullptr, params, got.data());
  for (size_t k = 0; k < got.size(); ++k) ASSERT_TRUE(same_bits(got[k], want[k]));
  const T g[B] = {T(0.75), T(-1.5), T(3)};
  std::vector<T> gx(B), gy(B);
  pcops::cpu::chamfer_reduce_backward(ctx, g, 1, P1, with_y, P2, B, lengths ? xl : nullptr, lengths ? yl : nullptr,
                                      params, gx.data(), gy.data());
  for (int64_t b = 0; b < B; ++b) {
    T h = mode == 0 ? g[b] : g[0];
    if (mode == 2) h = h / T(B);
    const T dx = static_cast<T>(std::max<int64_t>(lengths ? xl[b] : P1, 1));
    ASSERT_TRUE(same_bits(gx[b], mean ? h / dx : h));
    if (with_y) {
      const T dy = static_cast<T>(std::max<int64_t>(lengths ? yl[b] : P2, 1));
      ASSERT_TRUE(same_bits(gy[b], mean ? h / dy : h));
    }
  }
}

TEST(ChamferReduce, MatchesContract) {
  for (bool mean : {false, true})
    for (int64_t mode : {0, 1, 2})
      for (bool with_y : {false, true})
        for (bool lengths : {false, true}) {
          check_reduce<float>(mean, mode, with_y, lengths);
          check_reduce<double>(mean, mode, with_y, lengths);
        }
}

TEST(ChamferPair, Errors) {
  const float x[6] = {0, 0, 0, 1, 1, 1}, y[3] = {0, 0, 0};
  const int64_t good[2] = {0, -1}, bad[2] = {0, 1};
  float out[2];
  const pcops::CpuContext ctx;
  const auto xv = pcops::PointsView::contiguous(x, 1, 2, 3), yv = pcops::PointsView::contiguous(y, 1, 1, 3);
  EXPECT_THROW(pcops::cpu::chamfer_pair_distance(ctx, xv, yv, bad, {2}, out), pcops::Error);
  EXPECT_THROW(pcops::cpu::chamfer_pair_distance(ctx, xv, yv, good, {3}, out), pcops::Error);
  EXPECT_THROW(pcops::cpu::chamfer_pair_distance(ctx, xv, pcops::PointsView::contiguous(y, 1, 1, 2), good, {2}, out),
               pcops::Error);
  EXPECT_THROW(pcops::cpu::chamfer_pair_distance(ctx, xv, yv, nullptr, {2}, out), pcops::Error);
  float r[1];
  EXPECT_THROW(pcops::cpu::chamfer_reduce(ctx, x, 2, nullptr, 0, 1, nullptr, nullptr, {true, 3}, r), pcops::Error);
}

}  // namespace
