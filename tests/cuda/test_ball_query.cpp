// CUDA ball query against the CPU backend, bitwise: forward (dist2 bits and indices) and backward
// (grad_query / grad_ref bits). Covers the ordered-scan path (moderate query x reference pairs)
// and the grid path (>= 2^27 pairs, K <= 256), including the grid's in-kernel scan fallback for
// coarse grids, radius-boundary points, ties, duplicates, NaN/Inf, lengths, strides, sizes up to
// 1M references, and the validation errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cuda_util.hpp"
#include "oracle.hpp"
#include "pcops/ball_query.hpp"
#include "pcops/error.hpp"

namespace {

using pcops_cuda_test::DeviceBuffer;
using pcops_cuda_test::cpu_ball;
using pcops_cuda_test::DeviceCloud;
using pcops_cuda_test::DeviceResult;
using pcops_cuda_test::StreamContext;
using pcops_test::Cloud;
using pcops_test::Result;

Result cuda_ball(const DeviceCloud& q, const DeviceCloud& x, int64_t size, float r, int64_t K,
                 pcops::LengthsView ql = {}, pcops::LengthsView xl = {}, bool strided = false) {
  StreamContext sc;
  DeviceResult out(size);
  pcops::cuda::ball_query(sc.ctx, strided ? q.strided : q.view, strided ? x.strided : x.view, ql,
                          xl, pcops::BallQueryParams{r, K}, out.dist.data(), out.idx.data());
  return out.download();
}

// CUDA == CPU, bitwise; contiguous views and (optionally) strided ones.
void expect_same(const Cloud& q, const Cloud& x, float r, int64_t K, pcops::LengthsView ql = {},
                 pcops::LengthsView xl = {}, bool also_strided = false) {
  const Result want = cpu_ball(q.view(), x.view(), r, K, ql, xl);
  DeviceCloud dq(q), dx(x);
  const int64_t size = q.batch * q.count * K;
  EXPECT_TRUE(pcops_test::same_result(cuda_ball(dq, dx, size, r, K, ql, xl), want))
      << "r=" << r << " K=" << K << " N=" << x.count << " M=" << q.count << " B=" << q.batch;
  if (also_strided)
    EXPECT_TRUE(pcops_test::same_result(cuda_ball(dq, dx, size, r, K, ql, xl, true), want))
        << "strided r=" << r << " K=" << K << " N=" << x.count << " M=" << q.count;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b, std::string* why) {
  if (a.size() != b.size()) {
    *why = "size differs";
    return false;
  }
  int64_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (pcops_test::bits(a[i]) != pcops_test::bits(b[i])) {
      if (bad < 5) *why += " [" + std::to_string(i) + ": " + std::to_string(a[i]) + " vs " + std::to_string(b[i]) + "]";
      ++bad;
    }
  }
  if (bad) *why = std::to_string(bad) + " mismatches" + *why;
  return bad == 0;
}

// Runs the CPU forward for idx, then both backwards with an upstream gradient that is NaN in the
// padded slots (it must not leak) and compares the gradients bitwise.
void expect_same_backward(const Cloud& q, const Cloud& x, float r, int64_t K, uint32_t seed,
                          bool strided = false) {
  const Result fwd = cpu_ball(q.view(), x.view(), r, K);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  std::vector<float> G(fwd.idx.size());
  for (size_t e = 0; e < G.size(); ++e) G[e] = fwd.idx[e] >= 0 ? u(rng) : std::nanf("");
  const int64_t B = q.batch, M = q.count, N = x.count;
  std::vector<float> gq(static_cast<size_t>(B * M * 3), -12345.0f), gx(static_cast<size_t>(B * N * 3), -12345.0f);
  pcops::cpu::ball_query_backward({}, q.view(), x.view(), fwd.idx.data(), G.data(), K, gq.data(),
                                  gx.data());
  DeviceCloud dq(q), dx(x);
  DeviceBuffer<int64_t> didx(fwd.idx);
  DeviceBuffer<float> dG(G), dgq(gq.size()), dgx(gx.size());
  dgq.fill(-777.0f);
  dgx.fill(-777.0f);
  {
    StreamContext sc;
    pcops::cuda::ball_query_backward(sc.ctx, strided ? dq.strided : dq.view,
                                     strided ? dx.strided : dx.view, didx.data(), dG.data(), K,
                                     dgq.data(), dgx.data());
  }
  std::string why;
  EXPECT_TRUE(same_bits(dgq.download(), gq, &why)) << "grad_query: " << why;
  why.clear();
  EXPECT_TRUE(same_bits(dgx.download(), gx, &why)) << "grad_ref: " << why;
}

Cloud concat_queries(std::mt19937& rng, const Cloud& head, const Cloud& src, int64_t total) {
  Cloud rest = pcops_test::pick_queries(rng, src, total - head.count, 0.01f);
  Cloud q(1, total, 3);
  std::copy(head.data.begin(), head.data.end(), q.data.begin());
  std::copy(rest.data.begin(), rest.data.end(), q.data.begin() + head.data.size());
  return q;
}

// ---------------------------------------------------------------------------------------------
// Ordered-scan path

TEST(CudaBallQuery, UniformScanAllK) {
  std::mt19937 rng(101);
  Cloud x = pcops_test::uniform_cloud(rng, 1, 8000, 3);
  Cloud q = pcops_test::uniform_cloud(rng, 1, 100, 3, -0.1f, 1.1f);
  for (float r : {0.02f, 0.1f, 0.3f})
    for (int64_t K : {1, 31, 32, 33, 64, 1000}) expect_same(q, x, r, K);
}

TEST(CudaBallQuery, ScanSizesAroundStepBoundaries) {
  // The scan steps over 256 references (2 groups of 128); sizes around those and the float4 tail.
  std::mt19937 rng(102);
  for (int64_t n : {1, 3, 4, 5, 127, 128, 129, 255, 256, 257, 511, 513, 1023}) {
    Cloud x = pcops_test::uniform_cloud(rng, 1, n, 3);
    Cloud q = pcops_test::uniform_cloud(rng, 1, 33, 3);
    expect_same(q, x, 0.5f, 40);
    expect_same(q, x, 2.0f, 300);  // everything matches
  }
}

TEST(CudaBallQuery, SortedDuplicatesClustersShell) {
  std::mt19937 rng(103);
  Cloud s = pcops_test::uniform_cloud(rng, 1, 8000, 3);
  pcops_test::spatial_sort(s);
  expect_same(pcops_test::pick_queries(rng, s, 100, 0.0f), s, 0.08f, 32);
  Cloud d = pcops_test::duplicate_cloud(rng, 5000, 50);
  expect_same(pcops_test::pick_queries(rng, d, 64, 0.0f), d, 0.05f, 300);
  Cloud c = pcops_test::clustered_cloud(rng, 10000);
  Cloud qc = pcops_test::pick_queries(rng, c, 100, 0.01f);
  expect_same(qc, c, 0.2f, 40);
  expect_same(qc, c, 0.003f, 40);
  Cloud sh = pcops_test::shell_cloud(rng, 15000);
  expect_same(pcops_test::pick_queries(rng, sh, 150, 0.0f), sh, 0.1f, 64);
}

// The benchmark shape: 1024 queries, K = 64, r = 0.1 over 100k points of a unit-sphere shell.
TEST(CudaBallQuery, Shell100kBenchmarkShape) {
  std::mt19937 rng(104);
  Cloud x = pcops_test::shell_cloud(rng, 100000);
  expect_same(pcops_test::pick_queries(rng, x, 1024, 0.0f), x, 0.1f, 64);
}

// ---------------------------------------------------------------------------------------------
// Radius boundary (both paths)

// Reference points one float step inside and outside the radius around each query (built as in
// tests/cpp/test_ball_query.cpp), hidden in a background cloud.
Cloud boundary_cloud(std::mt19937& rng, const Cloud& bg, const Cloud& q, float r) {
  const float R2 = r * r;
  std::vector<float> pts(bg.data);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (int64_t m = 0; m < q.count; ++m) {
    const float qx = q.at(0, m, 0), qy = q.at(0, m, 1), qz = q.at(0, m, 2);
    for (int rep = 0; rep < 6; ++rep) {
      float u[3] = {g(rng), g(rng), g(rng)};
      u[0] = std::max(std::fabs(u[0]), 0.7f);
      const float len = std::sqrt(u[0] * u[0] + u[1] * u[1] + u[2] * u[2]);
      float p[3] = {qx + r * u[0] / len, qy + r * u[1] / len, qz + r * u[2] / len};
      const float dir = p[0] >= qx ? 1.0f : -1.0f;
      auto s_of = [&](float px) {
        const float dx = qx - px, dy = qy - p[1], dz = qz - p[2];
        return (dx * dx + dy * dy) + dz * dz;
      };
      float px = p[0];
      for (int it = 0; it < 10000 && s_of(px) < R2; ++it) px = std::nextafter(px, dir * INFINITY);
      for (int it = 0; it < 10000 && !(s_of(px) < R2); ++it) px = std::nextafter(px, qx);
      const float out_x = std::nextafter(px, dir * INFINITY);
      EXPECT_TRUE(s_of(px) < R2 && !(s_of(out_x) < R2));
      pts.insert(pts.end(), {px, p[1], p[2]});
      pts.insert(pts.end(), {out_x, p[1], p[2]});
    }
  }
  Cloud x(1, static_cast<int64_t>(pts.size() / 3), 3);
  x.data = pts;
  return x;
}

TEST(CudaBallQuery, RadiusBoundaryNextafterScan) {
  std::mt19937 rng(105);
  const float r = 0.1f;
  Cloud bg = pcops_test::uniform_cloud(rng, 1, 3000, 3, -1.0f, 1.0f);
  Cloud q = pcops_test::uniform_cloud(rng, 1, 32, 3, 0.2f, 0.8f);
  Cloud x = boundary_cloud(rng, bg, q, r);
  expect_same(q, x, r, 4000);
  expect_same(q, x, r, 33);
}

TEST(CudaBallQuery, RadiusBoundaryNextafterGrid) {
  std::mt19937 rng(106);
  const float r = 0.1f;
  Cloud bg = pcops_test::uniform_cloud(rng, 1, 65536, 3, -1.0f, 1.0f);
  Cloud head = pcops_test::uniform_cloud(rng, 1, 32, 3, 0.2f, 0.8f);
  Cloud x = boundary_cloud(rng, bg, head, r);
  Cloud q = concat_queries(rng, head, x, 2048);  // 2048 x 65920 > 2^27 pairs: grid
  for (int64_t K : {1, 32, 33, 64, 256}) expect_same(q, x, r, K);
}

// ---------------------------------------------------------------------------------------------
// Grid path

TEST(CudaBallQuery, ExactTiesLattice) {
  std::mt19937 rng(107);
  Cloud small = pcops_test::lattice_cloud(rng, 12);
  Cloud qs = pcops_test::pick_queries(rng, small, 40, 0.0f);
  expect_same(qs, small, 1.0f, 32);  // the 6 axis neighbours sit exactly at r: outside
  expect_same(qs, small, 2.0f, 64);
  Cloud big = pcops_test::lattice_cloud(rng, 64);  // 262144 points, 1024 queries: grid
  Cloud qb = pcops_test::pick_queries(rng, big, 1024, 0.0f);
  expect_same(qb, big, 1.0f, 32);
  expect_same(qb, big, 2.0f, 64);
  expect_same(qb, big, 3.0f, 100);
}

TEST(CudaBallQuery, GridUniformAndCellBoundaries) {
  std::mt19937 rng(108);
  Cloud x = pcops_test::uniform_cloud(rng, 1, 70000, 3);
  Cloud q = pcops_test::uniform_cloud(rng, 1, 2048, 3, -0.2f, 1.2f);  // some outside the box
  for (float r : {0.01f, 0.05f, 0.1f})
    for (int64_t K : {1, 31, 32, 33, 64, 65, 128, 129, 256}) expect_same(q, x, r, K);
}

TEST(CudaBallQuery, GridDuplicatesOverflowTheBuffer) {
  // Thousands of matches per query: the per-warp buffer is cut to K many times.
  std::mt19937 rng(109);
  Cloud d = pcops_test::duplicate_cloud(rng, 70000, 50);
  Cloud q = pcops_test::pick_queries(rng, d, 2048, 0.0f);
  for (int64_t K : {1, 32, 64, 200, 256}) expect_same(q, d, 0.05f, K);
  Cloud same(1, 70000, 3);  // one location: degenerate grid (1 cell), in-kernel scan fallback
  for (float& v : same.data) v = 0.25f;
  expect_same(pcops_test::pick_queries(rng, same, 2048, 0.0f), same, 0.01f, 64);
}

TEST(CudaBallQuery, GridCoarseFallsBackToScan) {
  // r comparable to the extent: < 64 cells, the grid kernel scans in order instead.
  std::mt19937 rng(110);
  Cloud x = pcops_test::uniform_cloud(rng, 1, 32768, 3);
  Cloud q = pcops_test::uniform_cloud(rng, 1, 4096, 3);
  expect_same(q, x, 0.5f, 64);
  expect_same(q, x, 0.3f, 256);
}

TEST(CudaBallQuery, GridSortedClusteredShell) {
  std::mt19937 rng(111);
  Cloud s = pcops_test::uniform_cloud(rng, 1, 100000, 3);
  pcops_test::spatial_sort(s);
  expect_same(pcops_test::pick_queries(rng, s, 2048, 0.0f), s, 0.03f, 32);
  Cloud c = pcops_test::clustered_cloud(rng, 100000);
  Cloud qc = pcops_test::pick_queries(rng, c, 2048, 0.01f);
  expect_same(qc, c, 0.2f, 64);
  expect_same(qc, c, 0.003f, 16);
  Cloud sh = pcops_test::shell_cloud(rng, 200000);
  expect_same(pcops_test::pick_queries(rng, sh, 1024, 0.0f), sh, 0.1f, 64);
}

TEST(CudaBallQuery, RealClouds) {
  std::mt19937 rng(112);
  const std::pair<const char*, float> cases[] = {
      {"radar.xyz", 2.0f}, {"b9_training.ply", 1.0f}, {"kitten.xyz", 0.02f}, {"building.ply", 0.5f}};
  for (const auto& [name, r] : cases) {
    const Cloud& x = pcops_test::cached_cloud(name, rng);
    ASSERT_GT(x.count, 1000) << name;
    expect_same(pcops_test::pick_queries(rng, x, 40, 0.0f), x, r, 64);  // scan
    // All points as queries (grid once N^2 >= 2^27), and a jittered copy.
    expect_same(x, x, r, 32);
    expect_same(pcops_test::pick_queries(rng, x, 4096, r * 0.3f), x, r, 64);
  }
}

// ---------------------------------------------------------------------------------------------
// Non-finite, extreme values, empty clouds, lengths, strides

void sprinkle_non_finite(Cloud& x) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  for (int64_t i = 0; i < x.count; i += 53) x.at(0, i, i % 3) = nan;
  for (int64_t i = 3; i < x.count; i += 71) x.at(0, i, 1) = (i % 2) ? inf : -inf;
  for (int64_t i = 9; i < x.count; i += 61) x.at(0, i, 2) = 1e30f;
}

TEST(CudaBallQuery, NonFiniteHugeAndSubnormal) {
  std::mt19937 rng(113);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  for (int64_t n : {3000, 70000}) {  // scan, then grid (with 2048 queries)
    Cloud x = pcops_test::uniform_cloud(rng, 1, n, 3);
    sprinkle_non_finite(x);
    Cloud q = pcops_test::pick_queries(rng, x, n > 10000 ? 2048 : 64, 0.0f);
    q.at(0, 0, 0) = nan;
    q.at(0, 1, 2) = inf;
    q.at(0, 2, 2) = 1e30f;
    q.at(0, 3, 1) = -inf;
    expect_same(q, x, 0.15f, 64);
    expect_same(q, x, 0.02f, 32);
    expect_same(q, x, 3e19f, 64);  // R2 overflows to +inf: every finite s matches (scan)
  }
  Cloud h = pcops_test::uniform_cloud(rng, 1, 70000, 3, -1e30f, 1e30f);
  Cloud qh = pcops_test::pick_queries(rng, h, 2048, 0.0f);
  expect_same(qh, h, 1e18f, 16);  // s overflows: only s = 0 matches
  expect_same(qh, h, 1e28f, 16);
  Cloud sub = pcops_test::uniform_cloud(rng, 1, 70000, 3, -1e-38f, 1e-38f);
  Cloud qsub = pcops_test::pick_queries(rng, sub, 2048, 0.0f);
  expect_same(qsub, sub, 3e-39f, 16);  // R2 underflows to 0: nothing matches
  expect_same(qsub, sub, 1e-20f, 16);
  expect_same(qsub, sub, 1e-39f * 4.0f, 16);
  Cloud all_nan(1, 65536, 3);
  for (float& v : all_nan.data) v = nan;
  expect_same(pcops_test::uniform_cloud(rng, 1, 2048, 3), all_nan, 0.1f, 8);  // empty grid
}

TEST(CudaBallQuery, EmptyZeroKZeroRadiusAndLengths) {
  std::mt19937 rng(114);
  Cloud x = pcops_test::uniform_cloud(rng, 3, 2000, 3);
  Cloud q = pcops_test::uniform_cloud(rng, 3, 50, 3);
  const int64_t xl[3] = {0, 1500, 7}, ql[3] = {50, 20, 0};
  expect_same(q, x, 0.1f, 16, {ql, 3}, {xl, 3}, true);
  expect_same(q, x, 0.1f, 0);
  expect_same(q, x, 0.0f, 8);     // radius 0 matches nothing
  expect_same(q, x, 0.05f, 5000);  // K far above any match count
  Cloud none(3, 0, 3);
  expect_same(q, none, 0.5f, 4);
  expect_same(none, x, 0.5f, 4);
  Cloud nob(0, 10, 3);
  expect_same(nob, nob, 0.5f, 4);
}

TEST(CudaBallQuery, GridLengthsBatchesStrides) {
  std::mt19937 rng(115);
  Cloud x = pcops_test::uniform_cloud(rng, 3, 100000, 3);
  Cloud q = pcops_test::uniform_cloud(rng, 3, 1024, 3);
  const int64_t xl[3] = {100000, 75000, 0}, ql[3] = {1024, 700, 1024};
  expect_same(q, x, 0.05f, 32, {ql, 3}, {xl, 3}, true);  // 1.55e8 pairs: grid
  const int64_t xl2[3] = {1, 100000, 37}, ql2[3] = {0, 1024, 1024};
  expect_same(q, x, 0.05f, 64, {ql2, 3}, {xl2, 3}, true);
  expect_same(q, x, 0.02f, 33, {}, {}, true);
}

TEST(CudaBallQuery, StridedScanAndManyBatches) {
  std::mt19937 rng(116);
  expect_same(pcops_test::uniform_cloud(rng, 4, 40, 3), pcops_test::uniform_cloud(rng, 4, 1500, 3),
              0.12f, 24, {}, {}, true);
  expect_same(pcops_test::uniform_cloud(rng, 16, 8, 3), pcops_test::uniform_cloud(rng, 16, 40, 3),
              0.3f, 10, {}, {}, true);
  // Many small batch entries whose pairs add up to the grid threshold.
  expect_same(pcops_test::uniform_cloud(rng, 512, 512, 3), pcops_test::uniform_cloud(rng, 512, 600, 3),
              0.1f, 16, {}, {}, true);
}

TEST(CudaBallQuery, MillionReferences) {
  std::mt19937 rng(117);
  Cloud x = pcops_test::uniform_cloud(rng, 1, 1000000, 3);
  expect_same(pcops_test::pick_queries(rng, x, 4096, 0.0f), x, 0.02f, 32);  // grid
  expect_same(pcops_test::uniform_cloud(rng, 1, 64, 3), x, 0.05f, 1000);   // scan, K > grid max
  Cloud sh = pcops_test::shell_cloud(rng, 1000000);
  expect_same(pcops_test::pick_queries(rng, sh, 1024, 0.0f), sh, 0.1f, 64);
}

TEST(CudaBallQuery, AllPointsQueries) {
  std::mt19937 rng(118);
  Cloud x = pcops_test::uniform_cloud(rng, 1, 300000, 3);
  expect_same(x, x, 0.015f, 32);
  Cloud sh = pcops_test::shell_cloud(rng, 300000);
  expect_same(sh, sh, 0.02f, 32);
}

// ---------------------------------------------------------------------------------------------
// Backward

TEST(CudaBallQuery, BackwardMatchesCpuBits) {
  std::mt19937 rng(119);
  Cloud x = pcops_test::uniform_cloud(rng, 1, 700, 3);
  Cloud q = pcops_test::uniform_cloud(rng, 1, 20, 3);
  for (int64_t K : {0, 1, 6, 33, 64}) expect_same_backward(q, x, 0.2f, K, 1 + K);
  expect_same_backward(q, x, 0.2f, 6, 2, true);
  // Many queries hitting the same references: long ordered sums per reference.
  Cloud d = pcops_test::duplicate_cloud(rng, 5000, 20);
  expect_same_backward(pcops_test::pick_queries(rng, d, 500, 0.01f), d, 0.1f, 200, 3);
  // Batches and padding everywhere (radius 0: every slot is -1).
  Cloud xb = pcops_test::uniform_cloud(rng, 3, 900, 3);
  Cloud qb = pcops_test::uniform_cloud(rng, 3, 70, 3);
  expect_same_backward(qb, xb, 0.15f, 40, 4, true);
  expect_same_backward(qb, xb, 0.0f, 8, 5);
  Cloud none(3, 0, 3);
  expect_same_backward(none, xb, 0.15f, 8, 6);
}

TEST(CudaBallQuery, BackwardLarge) {
  std::mt19937 rng(120);
  Cloud x = pcops_test::shell_cloud(rng, 100000);
  expect_same_backward(pcops_test::pick_queries(rng, x, 1024, 0.0f), x, 0.1f, 64, 7);
  Cloud u = pcops_test::uniform_cloud(rng, 1, 200000, 3);
  expect_same_backward(u, u, 0.02f, 32, 8);
}

// ---------------------------------------------------------------------------------------------
// Validation (same checks as the CPU backend, before any device work)

void expect_value_error(const pcops::PointsView& q, const pcops::PointsView& x, float r, int64_t K,
                        pcops::LengthsView ql = {}, pcops::LengthsView xl = {}) {
  StreamContext sc;
  DeviceBuffer<float> d(16);
  DeviceBuffer<int64_t> i(16);
  try {
    pcops::cuda::ball_query(sc.ctx, q, x, ql, xl, pcops::BallQueryParams{r, K}, d.data(), i.data());
    ADD_FAILURE() << "expected pcops::Error";
  } catch (const pcops::Error& e) {
    EXPECT_EQ(e.kind(), pcops::ErrorKind::Value) << e.what();
  }
}

TEST(CudaBallQuery, RejectsBadInput) {
  DeviceBuffer<float> buf(64);
  buf.fill(0.0f);
  const auto v = [&](int64_t b, int64_t n, int64_t d) {
    return pcops::PointsView::contiguous(buf.data(), b, n, d);
  };
  expect_value_error(v(1, 2, 2), v(1, 2, 3), 0.1f, 1);
  expect_value_error(v(1, 2, 3), v(1, 2, 4), 0.1f, 1);
  expect_value_error(v(1, 2, 0), v(1, 2, 3), 0.1f, 1);
  expect_value_error(v(1, -1, 3), v(1, 2, 3), 0.1f, 1);
  expect_value_error(pcops::PointsView::contiguous(nullptr, 1, 2, 3), v(1, 2, 3), 0.1f, 1);
  expect_value_error(v(1, 2, 3), v(2, 2, 3), 0.1f, 1);
  expect_value_error(v(1, 2, 3), v(1, 2, 3), -0.1f, 1);
  expect_value_error(v(1, 2, 3), v(1, 2, 3), std::nanf(""), 1);
  expect_value_error(v(1, 2, 3), v(1, 2, 3), std::numeric_limits<float>::infinity(), 1);
  expect_value_error(v(1, 2, 3), v(1, 2, 3), 0.1f, -1);
  const int64_t two[2] = {1, 1}, bad[1] = {3};
  expect_value_error(v(1, 2, 3), v(1, 2, 3), 0.1f, 1, {two, 2}, {});
  expect_value_error(v(1, 2, 3), v(1, 2, 3), 0.1f, 1, {}, {bad, 1});
  const int64_t big = int64_t{1} << 40;
  expect_value_error(v(1, big, 3), v(1, 2, 3), 0.1f, big);
}

}  // namespace
