// CUDA kNN against the CPU backend: bitwise equal indices and distances (sentinel-prefilled
// outputs, so unwritten slots show), on inputs that take every path of the CUDA operator (warp
// brute force, GPU grid, per-query radix sort for large k) and cross their boundaries; plus every
// validation error, raised before any kernel runs.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "cuda_util.hpp"
#include "oracle.hpp"
#include "pcops/error.hpp"
#include "pcops/knn.hpp"

namespace {

using pcops_cuda_test::cpu_knn;
using pcops_cuda_test::DeviceCloud;
using pcops_cuda_test::DeviceResult;
using pcops_cuda_test::StreamContext;
using pcops_test::Cloud;
using pcops_test::Result;

Result cuda_knn(const pcops::PointsView& q, const pcops::PointsView& x, int64_t k,
                pcops::LengthsView ql = {}, pcops::LengthsView xl = {}) {
  StreamContext sc;
  DeviceResult out(q.batch * q.count * k);
  pcops::cuda::knn(sc.ctx, q, x, ql, xl, pcops::KnnParams{k}, out.dist.data(), out.idx.data());
  return out.download();
}

// CUDA (contiguous and strided device views) == CPU, bitwise.
void expect_same(const Cloud& qc, const Cloud& xc, int64_t k, pcops::LengthsView ql = {},
                 pcops::LengthsView xl = {}, bool strided_too = false) {
  const Result want = cpu_knn(qc.view(), xc.view(), k, ql, xl);
  DeviceCloud q(qc), x(xc);
  EXPECT_TRUE(pcops_test::same_result(cuda_knn(q.view, x.view, k, ql, xl), want))
      << "k=" << k << " N=" << xc.count << " M=" << qc.count << " D=" << xc.dim << " B=" << xc.batch;
  if (strided_too)
    EXPECT_TRUE(pcops_test::same_result(cuda_knn(q.strided, x.strided, k, ql, xl), want))
        << "strided: k=" << k << " N=" << xc.count << " M=" << qc.count << " D=" << xc.dim;
}

TEST(CudaKnn, UniformBothPaths) {
  std::mt19937 rng(1);
  for (int64_t n : {3000, 20000}) {  // brute force, grid
    Cloud x = pcops_test::uniform_cloud(rng, 1, n, 3);
    Cloud q = pcops_test::uniform_cloud(rng, 1, 300, 3, -0.2f, 1.2f);  // some outside the box
    for (int64_t k : {1, 16, 64, 65, 128}) expect_same(q, x, k);
  }
}

TEST(CudaKnn, QueriesFarOutsideTheCloud) {
  std::mt19937 rng(2);
  Cloud x = pcops_test::uniform_cloud(rng, 1, 10000, 3);
  Cloud q = pcops_test::uniform_cloud(rng, 1, 40, 3, -50.0f, 50.0f);
  expect_same(q, x, 9);
}

TEST(CudaKnn, SpatiallySortedAndGraph) {
  std::mt19937 rng(3);
  Cloud x = pcops_test::uniform_cloud(rng, 1, 30000, 3);
  pcops_test::spatial_sort(x);
  Cloud q = pcops_test::pick_queries(rng, x, 500, 0.0f);
  expect_same(q, x, 32);
  expect_same(x, x, 6);  // every point a query
}

TEST(CudaKnn, GraphOnShell200k) {
  std::mt19937 rng(4);
  Cloud x = pcops_test::shell_cloud(rng, 200000);
  expect_same(x, x, 16);
  pcops_test::spatial_sort(x);
  expect_same(x, x, 16);
}

TEST(CudaKnn, DuplicateHeavyTies) {
  std::mt19937 rng(5);
  for (int64_t n : {3000, 20000}) {
    Cloud x = pcops_test::duplicate_cloud(rng, n, 40);
    Cloud q = pcops_test::pick_queries(rng, x, 100, 0.0f);
    for (int64_t k : {1, 30, 200, 1000}) expect_same(q, x, k);
  }
}

TEST(CudaKnn, IntegerLatticeExactTies) {
  std::mt19937 rng(6);
  for (int64_t side : {14, 24}) {  // 2744 points (brute force), 13824 points (grid)
    Cloud x = pcops_test::lattice_cloud(rng, side);
    Cloud q = pcops_test::pick_queries(rng, x, 160, 0.0f);
    for (int64_t i = 0; i < 60; ++i)  // half-integer queries: up to 8 equidistant neighbours
      for (int d = 0; d < 3; ++d) q.at(0, i, d) += (d == 0 || i % 2) ? 0.5f : 0.0f;
    for (int64_t k : {1, 6, 7, 27, 100, 129}) expect_same(q, x, k);
    expect_same(x, x, 27);  // graph of a lattice: every query has exact ties
  }
}

TEST(CudaKnn, SurfaceAndVaryingDensity) {
  std::mt19937 rng(7);
  Cloud s = pcops_test::shell_cloud(rng, 50000);
  Cloud qs = pcops_test::pick_queries(rng, s, 400, 0.0f);
  for (int64_t k : {1, 48, 256}) expect_same(qs, s, k);
  Cloud c = pcops_test::clustered_cloud(rng, 50000);
  Cloud qc = pcops_test::pick_queries(rng, c, 400, 0.01f);
  for (int64_t k : {1, 20, 300}) expect_same(qc, c, k);
  expect_same(c, c, 8);
}

TEST(CudaKnn, RealClouds) {
  std::mt19937 rng(8);
  for (const char* name : {"radar.xyz", "b9_training.ply", "ChineseDragon-10kv.off"}) {
    const Cloud& x = pcops_test::cached_cloud(name, rng);
    ASSERT_GT(x.count, 1000) << name;
    Cloud q = pcops_test::pick_queries(rng, x, 200, 0.0f);
    for (int64_t k : {1, 16, 64}) expect_same(q, x, k);
    expect_same(x, x, 8);
  }
}

TEST(CudaKnn, NonFiniteAndHugeCoordinates) {
  std::mt19937 rng(9);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  for (int64_t n : {3000, 20000}) {
    Cloud x = pcops_test::uniform_cloud(rng, 1, n, 3);
    for (int64_t i = 0; i < n; i += 97) x.at(0, i, i % 3) = nan;
    for (int64_t i = 5; i < n; i += 131) x.at(0, i, (i + 1) % 3) = (i % 2) ? inf : -inf;
    for (int64_t i = 7; i < n; i += 89) x.at(0, i, 0) = (i % 2 ? 1e30f : -3e38f);
    Cloud q = pcops_test::pick_queries(rng, x, 64, 0.0f);
    q.at(0, 0, 0) = nan;
    q.at(0, 1, 1) = inf;
    q.at(0, 2, 2) = -inf;
    q.at(0, 3, 0) = 2e38f;  // every s overflows to +inf for most references
    q.at(0, 4, 0) = 1e30f;
    for (int64_t k : {1, 24, 700}) expect_same(q, x, k);
    expect_same(q, x, n);  // k = N (radix-sort path): every slot, +inf ties ordered by index
    expect_same(x, x, 5);  // graph with non-finite queries and references
  }
  // Almost every reference non-finite: the finite few, then +inf by index.
  Cloud x = pcops_test::uniform_cloud(rng, 1, 8000, 3);
  for (int64_t i = 0; i < 8000; ++i)
    if (i % 1000 != 3) x.at(0, i, 1) = (i % 2) ? nan : inf;
  Cloud q = pcops_test::uniform_cloud(rng, 1, 50, 3);
  expect_same(q, x, 20);
}

TEST(CudaKnn, AllHugeValuesOverflow) {
  std::mt19937 rng(10);
  for (int64_t n : {2000, 10000}) {
    Cloud x = pcops_test::uniform_cloud(rng, 1, n, 3, -3e38f, 3e38f);
    Cloud q = pcops_test::uniform_cloud(rng, 1, 40, 3, -3e38f, 3e38f);
    expect_same(q, x, 10);
    expect_same(q, x, 1);  // one thread per query (k = 1 grid path)
  }
}

TEST(CudaKnn, SubnormalCoordinates) {
  std::mt19937 rng(11);
  for (int64_t n : {2000, 10000}) {
    Cloud x = pcops_test::uniform_cloud(rng, 1, n, 3, -1e-38f, 1e-38f);
    Cloud q = pcops_test::pick_queries(rng, x, 40, 1e-39f);
    expect_same(q, x, 8);
    expect_same(q, x, 1);
  }
}

TEST(CudaKnn, EmptyCloudsAndZeroK) {
  std::mt19937 rng(12);
  Cloud x = pcops_test::uniform_cloud(rng, 2, 6000, 3);
  Cloud q = pcops_test::uniform_cloud(rng, 2, 40, 3);
  const int64_t xl[2] = {0, 6000}, ql[2] = {40, 0};
  expect_same(q, x, 5, {}, {xl, 2});     // an empty reference cloud: all padding
  expect_same(q, x, 5, {ql, 2}, {});     // an empty query cloud
  expect_same(q, x, 1500, {}, {xl, 2});  // the same through the radix-sort path
  expect_same(q, x, 0);                  // k = 0: nothing to write
  Cloud none(2, 0, 3);
  expect_same(q, none, 0);
  expect_same(none, x, 3);  // no queries at all
  const int64_t zero[2] = {0, 0};
  expect_same(q, none, 4, {}, {zero, 2});  // N = 0 with lengths: every slot padded
  Cloud b0(0, 10, 3);
  expect_same(b0, b0, 2);  // B = 0
}

TEST(CudaKnn, LengthsAndKBeyondN) {
  std::mt19937 rng(13);
  Cloud x = pcops_test::uniform_cloud(rng, 3, 10000, 3);
  Cloud q = pcops_test::uniform_cloud(rng, 3, 60, 3);
  const int64_t xl[3] = {10000, 700, 3}, ql[3] = {60, 33, 0};
  for (int64_t k : {1, 3, 50, 800, 2500}) expect_same(q, x, k, {ql, 3}, {xl, 3}, k == 50);
  const int64_t xl2[3] = {4096, 4095, 5000}, ql2[3] = {17, 60, 60};  // the grid threshold
  for (int64_t k : {16, 1024, 1025, 1250}) expect_same(q, x, k, {ql2, 3}, {xl2, 3});
}

TEST(CudaKnn, KEqualsNAndPathBoundaries) {
  std::mt19937 rng(14);
  Cloud x = pcops_test::uniform_cloud(rng, 1, 700, 3);
  Cloud q = pcops_test::uniform_cloud(rng, 1, 40, 3);
  expect_same(q, x, 700);
  Cloud y = pcops_test::uniform_cloud(rng, 1, 4100, 3);
  Cloud qy = pcops_test::pick_queries(rng, y, 64, 0.001f);
  // 4k <= N decides grid vs brute force; 64/65, 128/129 and 1024/1025 change the buffer or path.
  for (int64_t k : {1024, 1025, 1026, 63, 64, 65, 128, 129, 4100}) expect_same(qy, y, k);
}

TEST(CudaKnn, KEqualsNLarge) {
  std::mt19937 rng(15);
  Cloud x = pcops_test::uniform_cloud(rng, 1, 100000, 3);
  Cloud q = pcops_test::uniform_cloud(rng, 1, 6, 3);
  expect_same(q, x, 100000);
}

TEST(CudaKnn, StridedViews) {
  std::mt19937 rng(16);
  for (int64_t n : {3000, 20000}) {
    Cloud x = pcops_test::uniform_cloud(rng, 2, n, 3);
    Cloud q = pcops_test::uniform_cloud(rng, 2, 50, 3);
    expect_same(q, x, 12, {}, {}, true);
    expect_same(q, x, 1, {}, {}, true);
    expect_same(q, x, 1100, {}, {}, true);
  }
  Cloud x8 = pcops_test::uniform_cloud(rng, 1, 300, 8);
  Cloud q8 = pcops_test::uniform_cloud(rng, 1, 50, 8);
  expect_same(q8, x8, 7, {}, {}, true);
  expect_same(q8, x8, 300, {}, {}, true);
}

TEST(CudaKnn, GeneralDimensions) {
  std::mt19937 rng(17);
  for (int64_t d : {1, 2, 4, 7, 64}) {
    Cloud x = pcops_test::uniform_cloud(rng, 2, 3000, d);
    Cloud q = pcops_test::uniform_cloud(rng, 2, 40, d);
    for (int64_t k : {1, 10, 100}) expect_same(q, x, k);
  }
  // D = 1 on a coarse lattice: many ties.
  Cloud x(1, 900, 1), q(1, 50, 1);
  for (int64_t i = 0; i < 900; ++i) x.at(0, i, 0) = static_cast<float>((i * 37) % 60);
  for (int64_t i = 0; i < 50; ++i) q.at(0, i, 0) = static_cast<float>(i) + 0.5f * (i % 2);
  for (int64_t k : {40, 900}) expect_same(q, x, k);
  // D = 2 and 4 with non-finite values.
  for (int64_t d : {2, 4}) {
    Cloud xd = pcops_test::uniform_cloud(rng, 1, 2000, d);
    Cloud qd = pcops_test::uniform_cloud(rng, 1, 30, d);
    for (int64_t i = 0; i < 2000; i += 37) xd.at(0, i, i % d) = (i % 2) ? std::nanf("") : INFINITY;
    qd.at(0, 0, 0) = std::nanf("");
    expect_same(qd, xd, 50);
  }
}

TEST(CudaKnn, BatchedClouds) {
  std::mt19937 rng(18);
  Cloud x = pcops_test::uniform_cloud(rng, 8, 5000, 3);
  Cloud q = pcops_test::uniform_cloud(rng, 8, 64, 3);
  const int64_t xl[8] = {5000, 4096, 1, 4095, 0, 2500, 5000, 4500};
  const int64_t ql[8] = {64, 64, 64, 10, 64, 0, 1, 63};
  expect_same(q, x, 16);
  expect_same(q, x, 16, {ql, 8}, {xl, 8}, true);  // grid and brute-force clouds in one call
  expect_same(q, x, 1, {ql, 8}, {xl, 8}, true);
  Cloud xs = pcops_test::uniform_cloud(rng, 16, 30, 3);
  Cloud qs = pcops_test::uniform_cloud(rng, 16, 10, 3);
  expect_same(qs, xs, 30);
}

// 1024 queries over 1M references (k = 64) and the all-points graph (k = 16): checked against
// the CPU on a subset of rows; times printed (CUDA events, second run).
TEST(CudaKnn, LargeCloudsAndTiming) {
  std::mt19937 rng(19);
  Cloud x = pcops_test::shell_cloud(rng, 1000000);
  Cloud q = pcops_test::pick_queries(rng, x, 1024, 0.001f);
  DeviceCloud dx(x), dq(q);
  StreamContext sc;
  auto timed = [&](const pcops::PointsView& qv, const pcops::PointsView& xv, int64_t k,
                   DeviceResult& out) {
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    float best = 1e30f;
    for (int rep = 0; rep < 3; ++rep) {
      cudaEventRecord(a, sc.stream);
      pcops::cuda::knn(sc.ctx, qv, xv, {}, {}, pcops::KnnParams{k}, out.dist.data(), out.idx.data());
      cudaEventRecord(b, sc.stream);
      cudaEventSynchronize(b);
      float ms = 0.0f;
      cudaEventElapsedTime(&ms, a, b);
      best = std::min(best, ms);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return best;
  };
  {
    DeviceResult out(1024 * 64);
    const float ms = timed(dq.view, dx.view, 64, out);
    std::printf("knn 1024 queries, 1M refs, k=64: %.3f ms\n", ms);
    EXPECT_TRUE(pcops_test::same_result(out.download(), cpu_knn(q.view(), x.view(), 64)));
  }
  {
    Cloud x100 = pcops_test::shell_cloud(rng, 100000);
    Cloud q100 = pcops_test::pick_queries(rng, x100, 1024, 0.001f);
    DeviceCloud d100(x100), dq100(q100);
    DeviceResult out(1024 * 64);
    const float ms = timed(dq100.view, d100.view, 64, out);
    std::printf("knn 1024 queries, 100k refs, k=64: %.3f ms\n", ms);
    EXPECT_TRUE(pcops_test::same_result(out.download(), cpu_knn(q100.view(), x100.view(), 64)));
  }
  {
    DeviceResult out(1000000 * int64_t{16});
    const float ms = timed(dx.view, dx.view, 16, out);
    std::printf("knn graph, 1M points, k=16: %.3f ms\n", ms);
    const Result got = out.download();
    // 4096 rows against the CPU.
    Cloud sub(1, 4096, 3);
    std::vector<int64_t> rows(4096);
    for (int64_t i = 0; i < 4096; ++i) {
      rows[i] = (i * 244141) % x.count;
      for (int d = 0; d < 3; ++d) sub.at(0, i, d) = x.at(0, rows[i], d);
    }
    const Result want = cpu_knn(sub.view(), x.view(), 16);
    Result part = pcops_test::sentinel_result(4096 * 16);
    for (int64_t i = 0; i < 4096; ++i)
      for (int64_t t = 0; t < 16; ++t) {
        part.dist[i * 16 + t] = got.dist[rows[i] * 16 + t];
        part.idx[i * 16 + t] = got.idx[rows[i] * 16 + t];
      }
    EXPECT_TRUE(pcops_test::same_result(part, want));
  }
}

// ---------------------------------------------------------------------------------------------
// Validation: the same pcops::Error (kind Value) as the CPU backend, before any kernel runs.

void expect_value_error(const pcops::PointsView& q, const pcops::PointsView& x, int64_t k,
                        pcops::LengthsView ql = {}, pcops::LengthsView xl = {}) {
  pcops::CudaContext ctx;
  for (int backend = 0; backend < 2; ++backend) {
    try {
      if (backend == 0)
        pcops::cuda::knn(ctx, q, x, ql, xl, pcops::KnnParams{k}, nullptr, nullptr);
      else {
        std::vector<float> d(16);
        std::vector<int64_t> i(16);
        pcops::cpu::knn({}, q, x, ql, xl, pcops::KnnParams{k}, d.data(), i.data());
      }
      ADD_FAILURE() << "expected pcops::Error from the " << (backend == 0 ? "CUDA" : "CPU") << " backend";
    } catch (const pcops::Error& e) {
      EXPECT_EQ(e.kind(), pcops::ErrorKind::Value) << e.what();
    }
  }
}

TEST(CudaKnn, RejectsBadInput) {
  pcops_cuda_test::DeviceBuffer<float> buf(64);
  const auto v = [&](int64_t b, int64_t n, int64_t d) {
    return pcops::PointsView::contiguous(buf.data(), b, n, d);
  };
  expect_value_error(v(1, 2, 0), v(1, 2, 0), 1);                 // dim 0
  expect_value_error(v(-1, 2, 3), v(-1, 2, 3), 1);               // negative batch
  expect_value_error(v(1, -2, 3), v(1, 2, 3), 1);                // negative count
  expect_value_error(pcops::PointsView::contiguous(nullptr, 1, 2, 3), v(1, 2, 3), 1);  // null
  expect_value_error(v(1, 2, 3), v(2, 2, 3), 1);                 // batch mismatch
  expect_value_error(v(1, 2, 3), v(1, 2, 2), 1);                 // dim mismatch
  expect_value_error(v(1, 2, 3), v(1, 2, 3), -1);                // k < 0
  expect_value_error(v(1, 2, 3), v(1, 2, 3), 3);                 // k > N without lengths
  const int64_t two[2] = {1, 1}, bad[1] = {5}, neg[1] = {-1};
  expect_value_error(v(1, 2, 3), v(1, 2, 3), 1, {two, 2}, {});   // wrong number of lengths
  expect_value_error(v(1, 2, 3), v(1, 2, 3), 1, {}, {bad, 1});   // length > count
  expect_value_error(v(1, 2, 3), v(1, 2, 3), 1, {neg, 1}, {});   // negative length
  const int64_t big = int64_t{1} << 40;
  const int64_t lens[1] = {0};
  expect_value_error(v(1, big, 3), v(1, 2, 3), big, {lens, 1}, {lens, 1});  // output overflows
  const int64_t five[1] = {5};
  expect_value_error(v(1, 2, 3), v(1, int64_t{1} << 32, 3), 1, {}, {five, 1});  // N >= 2^32
}

}  // namespace
