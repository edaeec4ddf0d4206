// CUDA nearest_neighbor, ordered_sum, ordered_norm and gather_rows_backward against the CPU backend: bitwise
// equal (sentinel-prefilled outputs, so unwritten slots show), on inputs that take every path
// (the kNN route for float32 squared-L2 3-D, the shared-memory tiles for D <= 4, the L1 path for
// larger D, y split into ranges when queries are few) and cross their boundaries (256-query tiles,
// 32^3-value sum chunks, multi-pass sums); plus the validation errors, raised before any kernel.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "cuda_util.hpp"
#include "oracle.hpp"
#include "pcops/error.hpp"
#include "pcops/nearest_neighbor.hpp"

namespace {

using pcops_cuda_test::DeviceBuffer;
using pcops_cuda_test::StreamContext;

template <class T>
using ViewOf = std::conditional_t<std::is_same_v<T, float>, pcops::PointsView, pcops::PointsView64>;

// A [batch, count, dim] cloud on the host and on the device (contiguous, and a strided copy laid
// out [batch][dim][count + 3]).
template <class T>
struct Cloud {
  int64_t batch, count, dim;
  std::vector<T> host, alt;
  DeviceBuffer<T> dev, dev_alt;
  Cloud(std::vector<T> data, int64_t b, int64_t n, int64_t d)
      : batch(b), count(n), dim(d), host(std::move(data)), dev(host) {
    const int64_t ld = n + 3;
    alt.assign(static_cast<size_t>(b * d * ld + 1), std::numeric_limits<T>::quiet_NaN());
    for (int64_t bb = 0; bb < b; ++bb)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < d; ++k) alt[(bb * d + k) * ld + i] = host[(bb * n + i) * d + k];
    dev_alt = DeviceBuffer<T>(alt);
  }
  ViewOf<T> host_view() const { return ViewOf<T>::contiguous(host.empty() ? nullptr : host.data(), batch, count, dim); }
  ViewOf<T> device_view() const { return ViewOf<T>::contiguous(host.empty() ? nullptr : dev.data(), batch, count, dim); }
  ViewOf<T> device_strided() const {
    const int64_t ld = count + 3;
    return ViewOf<T>{dev_alt.data(), batch, count, dim, dim * ld, 1, ld};
  }
};

template <class T>
Cloud<T> random_cloud(std::mt19937& rng, int64_t b, int64_t n, int64_t d, int levels = 0) {
  std::vector<T> v(static_cast<size_t>(b * n * d));
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::uniform_int_distribution<int> q(0, levels > 0 ? levels - 1 : 0);
  for (T& e : v) e = levels > 0 ? static_cast<T>(q(rng)) : static_cast<T>(u(rng));
  return Cloud<T>(std::move(v), b, n, d);
}

pcops::LengthsView lengths(const std::vector<int64_t>& l) {
  return pcops::LengthsView{l.empty() ? nullptr : l.data(), static_cast<int64_t>(l.size())};
}

template <class T>
std::vector<int64_t> cpu_nn(const Cloud<T>& x, const Cloud<T>& y, const std::vector<int64_t>& xl,
                            const std::vector<int64_t>& yl, int norm) {
  std::vector<int64_t> out(static_cast<size_t>(x.batch * x.count), pcops_test::kSentinelIdx);
  pcops::cpu::nearest_neighbor({}, x.host_view(), y.host_view(), lengths(xl), lengths(yl),
                               pcops::NearestNeighborParams{norm}, out.data());
  return out;
}

template <class T>
std::vector<int64_t> cuda_nn(const ViewOf<T>& x, const ViewOf<T>& y, const std::vector<int64_t>& xl,
                             const std::vector<int64_t>& yl, int norm) {
  StreamContext sc;
  DeviceBuffer<int64_t> out(static_cast<size_t>(x.batch * x.count));
  out.fill(pcops_test::kSentinelIdx);
  pcops::cuda::nearest_neighbor(sc.ctx, x, y, lengths(xl), lengths(yl), pcops::NearestNeighborParams{norm},
                                out.data());
  return out.download();
}

template <class T>
void expect_same(const Cloud<T>& x, const Cloud<T>& y, int norm, const std::vector<int64_t>& xl = {},
                 const std::vector<int64_t>& yl = {}, bool strided_too = true) {
  const auto want = cpu_nn(x, y, xl, yl, norm);
  EXPECT_EQ(cuda_nn<T>(x.device_view(), y.device_view(), xl, yl, norm), want)
      << "norm=" << norm << " D=" << x.dim << " B=" << x.batch << " P1=" << x.count << " P2=" << y.count
      << " T=" << sizeof(T);
  if (strided_too)
    EXPECT_EQ(cuda_nn<T>(x.device_strided(), y.device_strided(), xl, yl, norm), want) << "strided";
}

template <class T>
void all_dims_both_norms() {
  std::mt19937 rng(1);
  for (int64_t d : {1, 2, 3, 4, 5, 7})
    for (int norm : {1, 2}) {
      // 300 queries: one full tile of 256 plus a partial one; 700 y points: two full tiles and a
      // partial one (and few queries, so y is split into ranges).
      auto x = random_cloud<T>(rng, 2, 300, d);
      auto y = random_cloud<T>(rng, 2, 700, d);
      expect_same(x, y, norm);
    }
}

TEST(CudaNearestNeighbor, Float32AllDimsBothNorms) { all_dims_both_norms<float>(); }
TEST(CudaNearestNeighbor, Float64AllDimsBothNorms) { all_dims_both_norms<double>(); }

template <class T>
void ties() {
  std::mt19937 rng(2);
  for (int64_t d : {1, 3, 6})
    for (int norm : {1, 2}) {
      auto x = random_cloud<T>(rng, 2, 513, d, 3);  // lattice: exact ties everywhere
      auto y = random_cloud<T>(rng, 2, 5000, d, 3);
      expect_same(x, y, norm, {}, {}, false);
    }
}

TEST(CudaNearestNeighbor, ExactTiesAndDuplicates) {
  ties<float>();
  ties<double>();
}

template <class T>
void non_finite() {
  std::mt19937 rng(3);
  const T nan = std::numeric_limits<T>::quiet_NaN(), inf = std::numeric_limits<T>::infinity();
  for (int norm : {1, 2})
    for (int64_t d : {3, 5}) {
      auto x = random_cloud<T>(rng, 2, 100, d);
      auto y = random_cloud<T>(rng, 2, 3000, d);
      x.host[0] = nan;
      x.host[d + 1] = inf;
      x.host[2 * d + 2 % d] = std::numeric_limits<T>::max();
      y.host[1] = nan;
      y.host[5 * d] = inf;
      for (int64_t j = 0; j < 3000; ++j)
        if (j % 3 == 0) y.host[(3000 + j) * d] = nan;
      Cloud<T> xc(x.host, 2, 100, d), yc(y.host, 2, 3000, d);
      expect_same(xc, yc, norm);
    }
}

TEST(CudaNearestNeighbor, NanAndInf) {
  non_finite<float>();
  non_finite<double>();
}

template <class T>
void lengths_and_empty() {
  std::mt19937 rng(4);
  for (int64_t d : {2, 3})
    for (int norm : {1, 2}) {
      auto x = random_cloud<T>(rng, 6, 600, d);
      auto y = random_cloud<T>(rng, 6, 5000, d);
      expect_same(x, y, norm, {600, 0, 17, 600, 1, 256}, {5000, 5000, 0, 1, 33, 4096});
      Cloud<T> empty(std::vector<T>{}, 6, 0, d);
      expect_same(x, empty, norm, {}, {}, false);
      Cloud<T> none(std::vector<T>{}, 0, 600, d);
      EXPECT_TRUE(cuda_nn<T>(none.device_view(), none.device_view(), {}, {}, norm).empty());
    }
}

TEST(CudaNearestNeighbor, LengthsAndEmptyClouds) {
  lengths_and_empty<float>();
  lengths_and_empty<double>();
}

// Few queries against many points: y is split into up to 64 ranges whose bests are combined.
TEST(CudaNearestNeighbor, FewQueriesManyPoints) {
  std::mt19937 rng(5);
  for (int norm : {1, 2}) {
    auto x = random_cloud<double>(rng, 1, 37, 3);
    auto y = random_cloud<double>(rng, 1, 300000, 3);
    expect_same(x, y, norm, {}, {}, false);
    auto xf = random_cloud<float>(rng, 1, 37, 4, 4);
    auto yf = random_cloud<float>(rng, 1, 300000, 4, 4);  // ties across the ranges
    expect_same(xf, yf, norm, {}, {}, false);
  }
}

// Large clouds: the kNN grid (float32 squared L2) and the float64 / L1 brute force.
TEST(CudaNearestNeighbor, LargeClouds) {
  std::mt19937 rng(6);
  auto x = random_cloud<float>(rng, 1, 200000, 3);
  auto y = random_cloud<float>(rng, 1, 250000, 3);
  expect_same(x, y, 2, {}, {}, false);
  auto y1 = random_cloud<float>(rng, 1, 50000, 3);  // L1: brute force, kept small for the CPU oracle
  expect_same(x, y1, 1, {}, {}, false);
  auto xd = random_cloud<double>(rng, 2, 40000, 3);
  auto yd = random_cloud<double>(rng, 2, 40000, 3);
  expect_same(xd, yd, 2, {}, {}, false);
  // A real cloud (or its synthetic stand-in) against a jittered copy of itself.
  std::mt19937 rng2(7);
  const pcops_test::Cloud& real = pcops_test::cached_cloud("bunny00.off", rng2);
  pcops_test::Cloud q = pcops_test::pick_queries(rng2, real, 20000, 1e-3f);
  Cloud<float> rx(q.data, 1, q.count, 3), ry(real.data, 1, real.count, 3);
  expect_same(rx, ry, 2, {}, {}, false);
  expect_same(rx, ry, 1, {}, {}, false);
  std::vector<double> qd(q.data.begin(), q.data.end()), rd(real.data.begin(), real.data.end());
  Cloud<double> dx(qd, 1, q.count, 3), dy(rd, 1, real.count, 3);
  expect_same(dx, dy, 2, {}, {}, false);
}

TEST(CudaNearestNeighbor, Errors) {
  std::mt19937 rng(8);
  auto x = random_cloud<float>(rng, 2, 4, 3);
  auto y = random_cloud<float>(rng, 3, 5, 3);
  auto y2 = random_cloud<float>(rng, 2, 5, 2);
  StreamContext sc;
  DeviceBuffer<int64_t> out(8);
  EXPECT_THROW(pcops::cuda::nearest_neighbor(sc.ctx, x.device_view(), y.device_view(), {}, {}, {}, out.data()),
               pcops::Error);
  EXPECT_THROW(pcops::cuda::nearest_neighbor(sc.ctx, x.device_view(), y2.device_view(), {}, {}, {}, out.data()),
               pcops::Error);
  EXPECT_THROW(pcops::cuda::nearest_neighbor(sc.ctx, x.device_view(), x.device_view(), {}, {},
                                             pcops::NearestNeighborParams{3}, out.data()),
               pcops::Error);
  const std::vector<int64_t> too_long{5, 1};
  EXPECT_THROW(pcops::cuda::nearest_neighbor(sc.ctx, x.device_view(), x.device_view(), lengths(too_long), {}, {},
                                             out.data()),
               pcops::Error);
}

// ---------------------------------------------------------------------------------------------
// ordered_sum and gather_rows_backward

template <class T>
void ordered_sums() {
  std::mt19937 rng(9);
  std::normal_distribution<double> g(0.0, 1.0);
  StreamContext sc;
  // Around the 32-value groups, the 32^3-value chunk of one block, and two passes.
  for (int64_t len : {0, 1, 31, 33, 1024, 1025, 32768, 32769, 65536 + 7, 1048576, 3000001}) {
    const int64_t rows = len > 100000 ? 2 : 5;
    std::vector<T> v(static_cast<size_t>(rows * len));
    for (T& e : v) e = static_cast<T>(g(rng) * 10.0);
    if (!v.empty()) v[v.size() / 2] = T(-0.0);
    std::vector<T> want(static_cast<size_t>(rows), T(-7));
    pcops::cpu::ordered_sum({}, v.data(), rows, len, want.data());
    DeviceBuffer<T> dv(v), dout(static_cast<size_t>(rows));
    dout.fill(T(-7));
    pcops::cuda::ordered_sum(sc.ctx, dv.data(), rows, len, dout.data());
    const std::vector<T> got = dout.download();
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(T)), 0) << "len=" << len;
  }
  // -0.0 and +inf keep their bits (NaN payloads are device-specific: not compared).
  std::vector<T> special{T(-0.0), T(-0.0), std::numeric_limits<T>::infinity(), T(1)};
  for (int64_t len : {1, 2, 4}) {
    std::vector<T> want(1);
    pcops::cpu::ordered_sum({}, special.data(), 1, len, want.data());
    DeviceBuffer<T> dv(special), dout(1);
    pcops::cuda::ordered_sum(sc.ctx, dv.data(), 1, len, dout.data());
    const std::vector<T> got = dout.download();
    EXPECT_EQ(std::memcmp(got.data(), want.data(), sizeof(T)), 0) << "special len=" << len;
  }
}

TEST(CudaNearestNeighbor, OrderedSumBitwiseEqual) {
  ordered_sums<float>();
  ordered_sums<double>();
}

template <class T>
void ordered_norms() {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> q(-8, 8);
  std::normal_distribution<double> g(0.0, 1.0);
  StreamContext sc;
  for (int64_t len : {0, 1, 3, 6}) {
    const int64_t rows = 70000;  // several blocks
    std::vector<T> v(static_cast<size_t>(rows * len));
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = (i / std::max<int64_t>(len, 1)) % 2 ? static_cast<T>(q(rng) / 4.0) : static_cast<T>(g(rng));
    if (len) v[3 * len] = std::numeric_limits<T>::infinity();
    std::vector<T> want(static_cast<size_t>(rows), T(-7));
    pcops::cpu::ordered_norm({}, v.data(), rows, len, want.data());
    DeviceBuffer<T> dv(v), dout(static_cast<size_t>(rows));
    dout.fill(T(-7));
    pcops::cuda::ordered_norm(sc.ctx, dv.data(), rows, len, dout.data());
    const std::vector<T> got = dout.download();
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(T)), 0) << "len=" << len;
  }
}

TEST(CudaNearestNeighbor, OrderedNormBitwiseEqual) {
  ordered_norms<float>();
  ordered_norms<double>();
}

template <class T>
void gather_backward(int64_t B, int64_t P, int64_t U, int64_t M) {
  std::mt19937 rng(10);
  std::normal_distribution<double> g(0.0, 1.0);
  std::vector<T> grad(static_cast<size_t>(B * P * U));
  for (T& e : grad) e = static_cast<T>(g(rng));
  std::vector<int64_t> idx(static_cast<size_t>(B * P));
  std::uniform_int_distribution<int64_t> pick(-1, M - 1);
  for (int64_t& i : idx) i = pick(rng);
  std::vector<T> want(static_cast<size_t>(B * M * U), T(-7));
  pcops::cpu::gather_rows_backward({}, grad.data(), idx.data(), B, P, U, M, want.data());
  StreamContext sc;
  DeviceBuffer<T> dg(grad), dout(want.size());
  DeviceBuffer<int64_t> di(idx);
  dout.fill(T(-7));
  pcops::cuda::gather_rows_backward(sc.ctx, dg.data(), di.data(), B, P, U, M, dout.data());
  const std::vector<T> got = dout.download();
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(T)), 0)
      << "B=" << B << " P=" << P << " U=" << U << " M=" << M;
}

TEST(CudaNearestNeighbor, GatherRowsBackwardBitwiseEqual) {
  for (auto [B, P, U, M] : std::vector<std::array<int64_t, 4>>{
           {1, 1, 1, 1}, {3, 5000, 3, 70}, {4, 16384, 3, 16384}, {1, 1000000, 3, 1000}, {2, 0, 3, 10}, {2, 100, 3, 0}}) {
    gather_backward<float>(B, P, U, M);
    gather_backward<double>(B, P, U, M);
  }
}

}  // namespace
