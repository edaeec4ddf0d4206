// CUDA three_nn, three_interpolate, gather_points and group_points (with their backwards) against
// the CPU backend: bitwise equal outputs and gradients (sentinel-prefilled, so unwritten slots
// show), on inputs that take every path (three_nn: one tile / several tiles / split known range /
// cuda::knn; the inverse index with many sources per target, -1 and empty lists) and cross their
// boundaries; plus the validation errors, raised before any kernel runs.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "cuda_util.hpp"
#include "oracle.hpp"
#include "pcops/error.hpp"
#include "pcops/gather_points.hpp"
#include "pcops/group_points.hpp"
#include "pcops/three_interpolate.hpp"
#include "pcops/three_nn.hpp"

namespace {

using pcops_cuda_test::DeviceBuffer;
using pcops_cuda_test::DeviceCloud;
using pcops_cuda_test::DeviceResult;
using pcops_cuda_test::StreamContext;
using pcops_test::Cloud;
using pcops_test::Result;

constexpr float kSentinel = pcops_test::kSentinelDist;

using pcops_test::expect_error;

// ---------------------------------------------------------------------------------------------
// three_nn

Result cpu_three_nn(const pcops::PointsView& u, const pcops::PointsView& k, pcops::LengthsView ul,
                    pcops::LengthsView kl) {
  Result r = pcops_test::sentinel_result(u.batch * u.count * 3);
  pcops::cpu::three_nn({}, u, k, ul, kl, r.dist.data(), r.idx.data());
  return r;
}

Result cuda_three_nn(const pcops::PointsView& u, const pcops::PointsView& k, pcops::LengthsView ul,
                     pcops::LengthsView kl) {
  StreamContext sc;
  DeviceResult out(u.batch * u.count * 3);
  pcops::cuda::three_nn(sc.ctx, u, k, ul, kl, out.dist.data(), out.idx.data());
  return out.download();
}

void expect_three_nn(const Cloud& uc, const Cloud& kc, pcops::LengthsView ul = {},
                     pcops::LengthsView kl = {}, bool strided_too = false) {
  const Result want = cpu_three_nn(uc.view(), kc.view(), ul, kl);
  DeviceCloud u(uc), k(kc);
  EXPECT_TRUE(pcops_test::same_result(cuda_three_nn(u.view, k.view, ul, kl), want))
      << "B=" << uc.batch << " N=" << uc.count << " M=" << kc.count;
  if (strided_too) {
    EXPECT_TRUE(pcops_test::same_result(cuda_three_nn(u.strided, k.strided, ul, kl), want))
        << "strided: B=" << uc.batch << " N=" << uc.count << " M=" << kc.count;
  }
}

TEST(CudaThreeNn, UniformAcrossTileSplitAndKnnBoundaries) {
  std::mt19937 rng(101);
  // Tile 1024, chunk 2048 (splits), 8192 (cuda::knn beyond).
  for (int64_t m : {3, 4, 16, 1023, 1024, 1025, 2047, 2048, 2049, 4100, 8192, 8193, 20000}) {
    Cloud k = pcops_test::uniform_cloud(rng, 2, m, 3);
    Cloud u = pcops_test::uniform_cloud(rng, 2, 700, 3, -0.1f, 1.1f);
    expect_three_nn(u, k);
  }
  // Few unknown points (the known range is split over blocks) and many (one chunk).
  for (int64_t n : {1, 31, 257}) {
    Cloud k = pcops_test::uniform_cloud(rng, 1, 8000, 3);
    Cloud u = pcops_test::uniform_cloud(rng, 1, n, 3);
    expect_three_nn(u, k);
  }
}

TEST(CudaThreeNn, PointNetFeaturePropagationSizes) {
  std::mt19937 rng(102);
  for (auto [b, n, m] : {std::array<int64_t, 3>{16, 4096, 1024}, {32, 1024, 256}, {8, 256, 64},
                         {4, 16, 3}, {2, 16384, 4096}}) {
    Cloud u = pcops_test::uniform_cloud(rng, b, n, 3);
    Cloud k = pcops_test::uniform_cloud(rng, b, m, 3);
    expect_three_nn(u, k);
  }
}

TEST(CudaThreeNn, LargeClouds) {
  std::mt19937 rng(103);
  Cloud s = pcops_test::shell_cloud(rng, 100000);
  Cloud k = pcops_test::pick_queries(rng, s, 25000, 0.0f);  // cuda::knn path
  expect_three_nn(s, k);
  Cloud k2 = pcops_test::pick_queries(rng, s, 8192, 0.002f);  // the largest tiled size
  expect_three_nn(s, k2);
  pcops_test::spatial_sort(s);
  expect_three_nn(s, k2);
}

TEST(CudaThreeNn, TiesDuplicatesAndLattices) {
  std::mt19937 rng(104);
  for (int64_t side : {6, 12, 22}) {  // 216, 1728, 10648 known points: tiled, split, knn
    Cloud k = pcops_test::lattice_cloud(rng, side);
    Cloud u = pcops_test::pick_queries(rng, k, 500, 0.0f);
    for (int64_t i = 0; i < 250; ++i)  // half-integer queries: up to 8 equidistant neighbours
      for (int d = 0; d < 3; ++d) u.at(0, i, d) += (d == 0 || i % 2) ? 0.5f : 0.0f;
    expect_three_nn(u, k);
  }
  for (int64_t m : {50, 3000, 12000}) {
    Cloud k = pcops_test::duplicate_cloud(rng, m, 7);  // every point repeated: only ties
    Cloud u = pcops_test::pick_queries(rng, k, 300, 0.0f);
    expect_three_nn(u, k);
    Cloud k3 = pcops_test::duplicate_cloud(rng, m, 1);  // one location
    expect_three_nn(u, k3);
  }
}

TEST(CudaThreeNn, RealClouds) {
  std::mt19937 rng(105);
  for (const char* name : {"radar.xyz", "b9_training.ply", "ChineseDragon-10kv.off"}) {
    const Cloud& x = pcops_test::cached_cloud(name, rng);
    ASSERT_GT(x.count, 1000) << name;
    for (int64_t m : {256, 1024, 4096, 16384}) {
      if (m > x.count) continue;
      Cloud k(1, m, 3);  // an evenly strided subset, as FPS-like downsampling gives
      for (int64_t i = 0; i < m; ++i)
        for (int d = 0; d < 3; ++d) k.at(0, i, d) = x.at(0, i * (x.count / m), d);
      expect_three_nn(x, k);
    }
  }
}

TEST(CudaThreeNn, NonFiniteCoordinates) {
  std::mt19937 rng(106);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  for (int64_t m : {40, 3000, 10000}) {
    Cloud k = pcops_test::uniform_cloud(rng, 1, m, 3);
    for (int64_t i = 0; i < m; i += 7) k.at(0, i, i % 3) = nan;
    for (int64_t i = 3; i < m; i += 11) k.at(0, i, (i + 1) % 3) = (i % 2) ? inf : -inf;
    for (int64_t i = 5; i < m; i += 13) k.at(0, i, 0) = (i % 2) ? 1e30f : -3e38f;
    Cloud u = pcops_test::uniform_cloud(rng, 1, 200, 3);
    u.at(0, 0, 0) = nan;
    u.at(0, 1, 1) = inf;
    u.at(0, 2, 2) = -inf;
    u.at(0, 3, 0) = 2e38f;  // s overflows to +inf for most known points
    expect_three_nn(u, k);
  }
  // Only two finite known points: the third slot is an infinite one, smallest index first.
  Cloud k = pcops_test::uniform_cloud(rng, 1, 500, 3);
  for (int64_t i = 0; i < 500; ++i)
    if (i != 17 && i != 333) k.at(0, i, 1) = (i % 2) ? nan : inf;
  Cloud u = pcops_test::uniform_cloud(rng, 1, 64, 3);
  expect_three_nn(u, k);
}

TEST(CudaThreeNn, LengthsStridesAndEmpty) {
  std::mt19937 rng(107);
  Cloud k = pcops_test::uniform_cloud(rng, 5, 3000, 3);
  Cloud u = pcops_test::uniform_cloud(rng, 5, 400, 3);
  const int64_t kl[5] = {0, 1, 2, 3, 2999}, ul[5] = {400, 399, 0, 1, 257};
  expect_three_nn(u, k, {ul, 5}, {kl, 5}, true);
  expect_three_nn(u, k, {}, {kl, 5});
  expect_three_nn(u, k, {ul, 5}, {});
  expect_three_nn(u, k, {}, {}, true);
  const int64_t big[2] = {20000, 9000}, small[2] = {5, 8192};
  Cloud kb = pcops_test::uniform_cloud(rng, 2, 20000, 3);
  Cloud ub = pcops_test::uniform_cloud(rng, 2, 300, 3);
  expect_three_nn(ub, kb, {}, {big, 2}, true);  // cuda::knn path with lengths
  expect_three_nn(ub, kb, {}, {small, 2});      // tiled: the largest length decides
  expect_three_nn(Cloud(2, 0, 3), pcops_test::uniform_cloud(rng, 2, 10, 3));
  expect_three_nn(Cloud(0, 10, 3), Cloud(0, 5, 3));
}

TEST(CudaThreeNn, RejectsBadInput) {
  StreamContext sc;
  DeviceBuffer<float> pts(3 * 3 * 4 * 100), dist(3 * 100 * 3);
  DeviceBuffer<int64_t> idx(3 * 100 * 3);
  dist.fill(kSentinel);
  const auto P = [&](int64_t b, int64_t n, int64_t d) { return pcops::PointsView::contiguous(pts.data(), b, n, d); };
  auto run = [&](pcops::PointsView u, pcops::PointsView k, pcops::LengthsView ul = {}, pcops::LengthsView kl = {}) {
    return [=, &sc, &dist, &idx] { pcops::cuda::three_nn(sc.ctx, u, k, ul, kl, dist.data(), idx.data()); };
  };
  using pcops::ErrorKind;
  expect_error(ErrorKind::Value, run(P(1, 10, 3), P(1, 2, 3)), "M < 3");
  expect_error(ErrorKind::Value, run(P(1, 10, 2), P(1, 5, 2)), "dim 2");
  expect_error(ErrorKind::Value, run(P(1, 10, 3), P(1, 5, 4)), "known dim 4");
  expect_error(ErrorKind::Value, run(P(2, 10, 3), P(1, 5, 3)), "batch mismatch");
  expect_error(ErrorKind::Value, run(P(1, -1, 3), P(1, 5, 3)), "negative N");
  const int64_t bad[1] = {6}, neg[1] = {-1}, two[2] = {1, 1};
  expect_error(ErrorKind::Value, run(P(1, 10, 3), P(1, 5, 3), {}, {bad, 1}), "known length > M");
  expect_error(ErrorKind::Value, run(P(1, 10, 3), P(1, 5, 3), {neg, 1}, {}), "negative length");
  expect_error(ErrorKind::Value, run(P(1, 10, 3), P(1, 5, 3), {two, 2}, {}), "lengths size");
  expect_error(ErrorKind::Value,
               run(pcops::PointsView{nullptr, 1, 10, 3, 30, 3, 1}, P(1, 5, 3)), "null data");
  // Nothing was written.
  EXPECT_TRUE(pcops_test::same_bits(dist.download(), std::vector<float>(dist.size(), kSentinel)));
}

// ---------------------------------------------------------------------------------------------
// Feature maps: [B, C, count] host values, a contiguous and a strided ([B][count][C + 1] with a
// gap between clouds) device copy.

struct HostFeatures {
  int64_t B = 0, C = 0, count = 0;
  std::vector<float> data;

  pcops::FeaturesView view() const {
    return pcops::FeaturesView::contiguous(data.empty() ? nullptr : data.data(), B, C, count);
  }
  float at(int64_t b, int64_t c, int64_t n) const { return data[(b * C + c) * count + n]; }
};

HostFeatures random_features(std::mt19937& rng, int64_t B, int64_t C, int64_t count, bool specials = false) {
  HostFeatures f{B, C, count, std::vector<float>(static_cast<size_t>(B * C * count))};
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (float& v : f.data) v = u(rng);
  if (specials) {
    const float vals[] = {std::nanf(""), INFINITY, -INFINITY, -0.0f, 0.0f, 1e-45f, -1e-42f, 3e38f, -3e38f};
    for (size_t i = 0; i < f.data.size(); i += 5) f.data[i] = vals[(i / 5) % 9];
  }
  return f;
}

struct DeviceFeatures {
  DeviceBuffer<float> data, alt;
  pcops::FeaturesView view, strided;
  explicit DeviceFeatures(const HostFeatures& h) : data(h.data) {
    view = pcops::FeaturesView::contiguous(data.data(), h.B, h.C, h.count);
    const int64_t sp = h.C + 1, sb = h.count * sp + 7;
    std::vector<float> a(static_cast<size_t>(std::max<int64_t>(h.B * sb, 1)), std::nanf(""));
    for (int64_t b = 0; b < h.B; ++b)
      for (int64_t c = 0; c < h.C; ++c)
        for (int64_t n = 0; n < h.count; ++n) a[b * sb + n * sp + c] = h.at(b, c, n);
    alt = DeviceBuffer<float>(a);
    strided = pcops::FeaturesView{alt.data(), h.B, h.C, h.count, sb, 1, sp};
  }
};

// Indices in [-1, targets): uniform, with a fraction `pad` of -1 and a fraction `hot` of them on
// three hot targets (many sources per target).
std::vector<int64_t> random_indices(std::mt19937& rng, int64_t n, int64_t targets, double pad, double hot) {
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::uniform_int_distribution<int64_t> pick(0, std::max<int64_t>(targets - 1, 0));
  for (int64_t& v : idx) {
    const double r = u(rng);
    if (targets == 0 || r < pad) v = -1;
    else if (r < pad + hot) v = std::min<int64_t>(targets - 1, static_cast<int64_t>(r * 1000) % 3);
    else v = pick(rng);
  }
  return idx;
}

// ---------------------------------------------------------------------------------------------
// three_interpolate

struct InterpCase {
  HostFeatures features, grad;  // [B, C, M], [B, C, N]
  std::vector<int64_t> idx;     // [B, N, 3]
  Cloud weight;                 // [B, N, 3]
};

InterpCase interp_case(std::mt19937& rng, int64_t B, int64_t C, int64_t M, int64_t N, double pad = 0.1,
                       double hot = 0.0, bool specials = false) {
  InterpCase c;
  c.features = random_features(rng, B, C, M, specials);
  c.grad = random_features(rng, B, C, N, specials);
  c.idx = random_indices(rng, B * N * 3, M, pad, hot);
  c.weight = pcops_test::uniform_cloud(rng, B, N, 3, -1.0f, 1.0f);
  if (specials)
    for (size_t i = 3; i < c.weight.data.size(); i += 17) c.weight.data[i] = (i % 2) ? -0.0f : std::nanf("");
  return c;
}

// Forward and both gradients on the CPU and on the device (contiguous, then strided views).
void expect_interp(const InterpCase& c, bool strided_too = true) {
  const int64_t B = c.features.B, C = c.features.C, M = c.features.count, N = c.weight.count;
  const size_t out_n = static_cast<size_t>(B * C * N), gf_n = static_cast<size_t>(B * C * M),
               gw_n = static_cast<size_t>(B * N * 3);
  std::vector<float> out(out_n, kSentinel), gf(gf_n, kSentinel), gw(gw_n, kSentinel);
  pcops::cpu::three_interpolate({}, c.features.view(), c.idx.data(), c.weight.view(), out.data());
  pcops::cpu::three_interpolate_backward({}, c.grad.view(), c.features.view(), c.idx.data(), c.weight.view(),
                                         gf.data(), gw.data());
  DeviceFeatures f(c.features), g(c.grad);
  DeviceCloud w(c.weight);
  DeviceBuffer<int64_t> idx(c.idx);
  for (int pass = 0; pass < (strided_too ? 2 : 1); ++pass) {
    const pcops::FeaturesView fv = pass ? f.strided : f.view, gv = pass ? g.strided : g.view;
    const pcops::PointsView wv = pass ? w.strided : w.view;
    StreamContext sc;
    DeviceBuffer<float> d_out(out_n), d_gf(gf_n), d_gw(gw_n);
    d_out.fill(kSentinel);
    d_gf.fill(kSentinel);
    d_gw.fill(kSentinel);
    pcops::cuda::three_interpolate(sc.ctx, fv, idx.data(), wv, d_out.data());
    pcops::cuda::three_interpolate_backward(sc.ctx, gv, fv, idx.data(), wv, d_gf.data(), d_gw.data());
    const char* how = pass ? "strided" : "contiguous";
    EXPECT_TRUE(pcops_test::same_bits(d_out.download(), out)) << how << " forward B=" << B << " C=" << C
                                                              << " M=" << M << " N=" << N;
    EXPECT_TRUE(pcops_test::same_bits(d_gf.download(), gf)) << how << " grad_features B=" << B << " C=" << C
                                                            << " M=" << M << " N=" << N;
    EXPECT_TRUE(pcops_test::same_bits(d_gw.download(), gw)) << how << " grad_weight B=" << B << " C=" << C
                                                            << " M=" << M << " N=" << N;
  }
}

TEST(CudaThreeInterpolate, RandomAcrossChannelGroups) {
  std::mt19937 rng(201);
  for (int64_t C : {1, 7, 8, 9, 16, 33}) expect_interp(interp_case(rng, 2, C, 100, 300));
  for (int64_t M : {1, 3, 1000}) expect_interp(interp_case(rng, 3, 5, M, 257, 0.2));
}

TEST(CudaThreeInterpolate, ManySourcesPerTargetAndPadding) {
  std::mt19937 rng(202);
  expect_interp(interp_case(rng, 2, 12, 50, 4000, 0.05, 0.9));  // thousands of slots on 3 targets
  expect_interp(interp_case(rng, 1, 3, 10, 3000, 0.9, 0.0));    // mostly -1: empty lists
  InterpCase all = interp_case(rng, 2, 4, 20, 500);
  std::fill(all.idx.begin(), all.idx.end(), 7);  // every slot on one target
  expect_interp(all);
  std::fill(all.idx.begin(), all.idx.end(), -1);  // no slot at all
  expect_interp(all);
}

TEST(CudaThreeInterpolate, NonFiniteAndSignedZeros) {
  std::mt19937 rng(203);
  expect_interp(interp_case(rng, 2, 9, 64, 500, 0.1, 0.3, true));
  InterpCase z = interp_case(rng, 1, 2, 4, 8, 0.0);
  for (float& v : z.features.data) v = -0.0f;  // -0 * w: the +0 start decides the sign
  expect_interp(z);
}

TEST(CudaThreeInterpolate, EmptyShapes) {
  std::mt19937 rng(204);
  for (auto [b, c, m, n] : {std::array<int64_t, 4>{0, 4, 5, 6}, {2, 0, 5, 6}, {2, 4, 0, 6}, {2, 4, 5, 0},
                            {1, 0, 0, 0}})
    expect_interp(interp_case(rng, b, c, m, n, m == 0 ? 1.0 : 0.1));
}

TEST(CudaThreeInterpolate, OptionalGradients) {
  std::mt19937 rng(205);
  const InterpCase c = interp_case(rng, 2, 10, 40, 90);
  std::vector<float> gf(2 * 10 * 40, kSentinel), gw(2 * 90 * 3, kSentinel);
  pcops::cpu::three_interpolate_backward({}, c.grad.view(), c.features.view(), c.idx.data(), c.weight.view(),
                                         gf.data(), gw.data());
  DeviceFeatures f(c.features), g(c.grad);
  DeviceCloud w(c.weight);
  DeviceBuffer<int64_t> idx(c.idx);
  StreamContext sc;
  DeviceBuffer<float> d_gf(gf.size()), d_gw(gw.size());
  d_gf.fill(kSentinel);
  d_gw.fill(kSentinel);
  pcops::cuda::three_interpolate_backward(sc.ctx, g.view, f.view, idx.data(), w.view, d_gf.data(), nullptr);
  EXPECT_TRUE(pcops_test::same_bits(d_gf.download(), gf));
  EXPECT_TRUE(pcops_test::same_bits(d_gw.download(), std::vector<float>(gw.size(), kSentinel)));
  pcops::cuda::three_interpolate_backward(sc.ctx, g.view, f.view, idx.data(), w.view, nullptr, d_gw.data());
  EXPECT_TRUE(pcops_test::same_bits(d_gw.download(), gw));
}

TEST(CudaThreeInterpolate, PointNetSizesAndLarge) {
  std::mt19937 rng(206);
  // Feature propagation: indices from three_nn itself.
  for (auto [b, n, m, c] : {std::array<int64_t, 4>{16, 4096, 1024, 128}, {1, 100000, 25000, 32}}) {
    Cloud u = pcops_test::uniform_cloud(rng, b, n, 3), k = pcops_test::uniform_cloud(rng, b, m, 3);
    Result nn = cpu_three_nn(u.view(), k.view(), {}, {});
    InterpCase ic = interp_case(rng, b, c, m, n);
    ic.idx = nn.idx;
    expect_interp(ic, false);
  }
}

TEST(CudaThreeInterpolate, RejectsBadInput) {
  StreamContext sc;
  DeviceBuffer<float> buf(10000), out(10000);
  DeviceBuffer<int64_t> idx(std::vector<int64_t>(300, 0));
  const pcops::FeaturesView f = pcops::FeaturesView::contiguous(buf.data(), 2, 4, 10);
  const pcops::PointsView w = pcops::PointsView::contiguous(buf.data(), 2, 20, 3);
  using pcops::ErrorKind;
  auto fwd = [&](pcops::FeaturesView fv, pcops::PointsView wv, const int64_t* ip) {
    return [=, &sc, &out] { pcops::cuda::three_interpolate(sc.ctx, fv, ip, wv, out.data()); };
  };
  expect_error(ErrorKind::Value, fwd(f, pcops::PointsView::contiguous(buf.data(), 2, 20, 2), idx.data()), "weight dim");
  expect_error(ErrorKind::Value, fwd(f, pcops::PointsView::contiguous(buf.data(), 3, 20, 3), idx.data()), "batch");
  expect_error(ErrorKind::Value, fwd(pcops::FeaturesView::contiguous(buf.data(), 2, -1, 10), w, idx.data()), "C < 0");
  expect_error(ErrorKind::Value, fwd(f, w, nullptr), "null idx");
  expect_error(ErrorKind::Value, fwd(pcops::FeaturesView{nullptr, 2, 4, 10, 40, 10, 1}, w, idx.data()), "null features");
  const pcops::FeaturesView g_bad = pcops::FeaturesView::contiguous(buf.data(), 2, 4, 21);
  expect_error(ErrorKind::Value, [&] {
    pcops::cuda::three_interpolate_backward(sc.ctx, g_bad, f, idx.data(), w, out.data(), out.data());
  }, "grad_out shape");
}

// ---------------------------------------------------------------------------------------------
// gather_points, group_points

// Forward and backward, CPU and device (contiguous and strided features). idx [B, L]; for
// group_points L = M * S.
void expect_gather(const HostFeatures& feat, const std::vector<int64_t>& idx, int64_t L,
                   const pcops::GroupPointsParams* group = nullptr) {
  const int64_t B = feat.B, C = feat.C, N = feat.count;
  std::mt19937 rng(static_cast<unsigned>(B * 131 + C * 17 + N + L));
  const HostFeatures grad = random_features(rng, B, C, L, true);
  std::vector<float> out(static_cast<size_t>(B * C * L), kSentinel), gf(static_cast<size_t>(B * C * N), kSentinel);
  if (group) {
    pcops::cpu::group_points({}, feat.view(), idx.data(), *group, out.data());
    pcops::cpu::group_points_backward({}, grad.view(), idx.data(), *group, N, gf.data());
  } else {
    pcops::cpu::gather_points({}, feat.view(), idx.data(), L, out.data());
    pcops::cpu::gather_points_backward({}, grad.view(), idx.data(), N, gf.data());
  }
  DeviceFeatures f(feat), g(grad);
  DeviceBuffer<int64_t> d_idx(idx);
  for (int pass = 0; pass < 2; ++pass) {
    StreamContext sc;
    DeviceBuffer<float> d_out(out.size()), d_gf(gf.size());
    d_out.fill(kSentinel);
    d_gf.fill(kSentinel);
    const pcops::FeaturesView fv = pass ? f.strided : f.view;
    if (group) {
      pcops::cuda::group_points(sc.ctx, fv, d_idx.data(), *group, d_out.data());
      pcops::cuda::group_points_backward(sc.ctx, g.view, d_idx.data(), *group, N, d_gf.data());
    } else {
      pcops::cuda::gather_points(sc.ctx, fv, d_idx.data(), L, d_out.data());
      pcops::cuda::gather_points_backward(sc.ctx, pass ? g.strided : g.view, d_idx.data(), N, d_gf.data());
    }
    const char* what = group ? "group_points" : "gather_points";
    EXPECT_TRUE(pcops_test::same_bits(d_out.download(), out))
        << what << (pass ? " strided" : "") << " forward B=" << B << " C=" << C << " N=" << N << " L=" << L;
    EXPECT_TRUE(pcops_test::same_bits(d_gf.download(), gf))
        << what << (pass ? " strided" : "") << " backward B=" << B << " C=" << C << " N=" << N << " L=" << L;
  }
}

TEST(CudaGatherPoints, RandomDuplicatesAndPadding) {
  std::mt19937 rng(301);
  for (int64_t C : {1, 3, 8, 9, 64}) {
    const HostFeatures f = random_features(rng, 3, C, 500, C == 9);
    expect_gather(f, random_indices(rng, 3 * 128, 500, 0.1, 0.0), 128);
    expect_gather(f, random_indices(rng, 3 * 2000, 500, 0.05, 0.8), 2000);  // many per target
  }
  const HostFeatures f = random_features(rng, 2, 5, 40);
  expect_gather(f, std::vector<int64_t>(2 * 300, 39), 300);  // all on the last point
  expect_gather(f, std::vector<int64_t>(2 * 300, -1), 300);  // all padding
}

TEST(CudaGatherPoints, EmptyShapesAndLarge) {
  std::mt19937 rng(302);
  for (auto [b, c, n, m] : {std::array<int64_t, 4>{0, 3, 10, 5}, {2, 0, 10, 5}, {2, 3, 10, 0}, {2, 3, 0, 5}})
    expect_gather(random_features(rng, b, c, n), random_indices(rng, b * m, n, 0.2, 0.0), m);
  // FPS-like sizes: 16 clouds of 8192 points, 1024 samples, 64 channels; and 1M points, 4096.
  expect_gather(random_features(rng, 16, 64, 8192), random_indices(rng, 16 * 1024, 8192, 0.0, 0.0), 1024);
  expect_gather(random_features(rng, 1, 4, 1000000), random_indices(rng, 4096, 1000000, 0.01, 0.0), 4096);
}

TEST(CudaGroupPoints, BallQueryLikeNeighbourhoods) {
  std::mt19937 rng(303);
  for (auto [b, c, n, m, s] : {std::array<int64_t, 5>{2, 6, 300, 64, 32}, {1, 9, 1000, 100, 1},
                               {4, 16, 4096, 512, 64}, {1, 3, 50, 7, 0}, {2, 3, 0, 4, 2}}) {
    const HostFeatures f = random_features(rng, b, c, n, c == 9);
    // Ball query's padding: the first hit repeated, or -1.
    std::vector<int64_t> idx = random_indices(rng, b * m * s, n, 0.3, 0.2);
    const pcops::GroupPointsParams p{m, s};
    expect_gather(f, idx, m * s, &p);
  }
}

TEST(CudaGatherPoints, RejectsBadInput) {
  StreamContext sc;
  DeviceBuffer<float> buf(10000), out(10000);
  DeviceBuffer<int64_t> idx(std::vector<int64_t>(300, 0));
  const pcops::FeaturesView f = pcops::FeaturesView::contiguous(buf.data(), 2, 4, 10);
  using pcops::ErrorKind;
  expect_error(ErrorKind::Value, [&] { pcops::cuda::gather_points(sc.ctx, f, idx.data(), -1, out.data()); },
               "negative M");
  expect_error(ErrorKind::Value, [&] { pcops::cuda::gather_points(sc.ctx, f, nullptr, 5, out.data()); }, "null idx");
  expect_error(ErrorKind::Value, [&] {
    pcops::cuda::gather_points(sc.ctx, pcops::FeaturesView::contiguous(buf.data(), 2, -4, 10), idx.data(), 5, out.data());
  }, "negative C");
  expect_error(ErrorKind::Value, [&] { pcops::cuda::gather_points_backward(sc.ctx, f, idx.data(), -1, out.data()); },
               "negative count");
  expect_error(ErrorKind::Value, [&] {
    pcops::cuda::group_points(sc.ctx, f, idx.data(), pcops::GroupPointsParams{-2, 2}, out.data());
  }, "negative M");
  expect_error(ErrorKind::Value, [&] {
    pcops::cuda::group_points_backward(sc.ctx, f, idx.data(), pcops::GroupPointsParams{3, 3}, 10, out.data());
  }, "grad_out size");
  expect_error(ErrorKind::Value, [&] {
    pcops::cuda::group_points(sc.ctx, f, idx.data(), pcops::GroupPointsParams{int64_t{1} << 40, int64_t{1} << 40},
                              out.data());
  }, "M * S overflows");
}

}  // namespace
