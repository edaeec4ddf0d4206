// The CUDA SpatialIndex against the CPU dense operators, bit for bit (sentinel-prefilled outputs,
// so unwritten slots show): uniform, clustered (spreads over four orders of magnitude), a sphere
// shell, a tie-heavy lattice, duplicates, a plane, a line, non-finite points and queries, and
// coordinates whose squared distances overflow to +inf; every search kernel (one lane per query,
// k <= 32; one warp per query, k <= 1024; the dense fallback above); batches with lengths and
// query lengths, strided views, a rebuild, and every validation error.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "cuda_util.hpp"
#include "oracle.hpp"
#include "pcops/ball_query.hpp"
#include "pcops/error.hpp"
#include "pcops/knn.hpp"
#include "pcops/spatial_index.hpp"

namespace {

using pcops_cuda_test::cpu_ball;
using pcops_cuda_test::cpu_knn;
using pcops_cuda_test::DeviceCloud;
using pcops_cuda_test::DeviceResult;
using pcops_cuda_test::StreamContext;
using pcops_test::Cloud;
using pcops_test::Result;

Result index_knn(const StreamContext& sc, const pcops::cuda::SpatialIndex& index, const pcops::PointsView& q,
                 int64_t k, pcops::LengthsView ql = {}) {
  DeviceResult out(q.batch * q.count * k);
  index.knn(sc.ctx, q, ql, k, out.dist.data(), out.idx.data());
  return out.download();
}

Result index_ball(const StreamContext& sc, const pcops::cuda::SpatialIndex& index, const pcops::PointsView& q,
                  float radius, int64_t K, pcops::LengthsView ql = {}) {
  DeviceResult out(q.batch * q.count * K);
  index.ball_query(sc.ctx, q, ql, radius, K, out.dist.data(), out.idx.data());
  return out.download();
}

Cloud shaped(const std::string& kind, std::mt19937& rng, int64_t n) {
  if (kind == "uniform") return pcops_test::uniform_cloud(rng, 1, n, 3);
  if (kind == "clustered") return pcops_test::clustered_cloud(rng, n);
  if (kind == "shell") return pcops_test::shell_cloud(rng, n);
  if (kind == "lattice") return pcops_test::lattice_cloud(rng, static_cast<int64_t>(std::cbrt(double(n))));
  if (kind == "duplicates") return pcops_test::duplicate_cloud(rng, n, 40);
  Cloud c = pcops_test::uniform_cloud(rng, 1, n, 3);
  for (int64_t i = 0; i < n; ++i) {
    if (kind == "plane") c.at(0, i, 2) = 0.25f;
    if (kind == "line") c.at(0, i, 1) = c.at(0, i, 2) = -3.0f;
    if (kind == "huge") c.at(0, i, i % 3) *= 3e19f;  // s overflows to +inf between far points
    if (kind == "nonfinite" && i % 61 == 7) c.at(0, i, i % 3) = (i % 2) ? NAN : -INFINITY;
  }
  return c;
}

// Queries: points of the cloud (exact hits), jittered points, uniform ones beyond the box, and a
// few non-finite ones.
Cloud queries_for(const Cloud& x, std::mt19937& rng, int64_t m) {
  Cloud q = pcops_test::pick_queries(rng, x, m, 0.0f);
  const Cloud j = pcops_test::pick_queries(rng, x, m, 1e-3f);
  const Cloud u = pcops_test::uniform_cloud(rng, 1, m, 3, -0.5f, 1.5f);
  for (int64_t i = 0; i < m; ++i)
    for (int d = 0; d < 3; ++d) {
      if (i % 3 == 1) q.at(0, i, d) = j.at(0, i, d);
      if (i % 3 == 2) q.at(0, i, d) = u.at(0, i, d);
    }
  q.at(0, 5, 0) = NAN;
  q.at(0, 9, 2) = INFINITY;
  return q;
}

TEST(CudaSpatialIndex, AdversarialShapesEqualTheDenseOperators) {
  std::mt19937 rng(7);
  for (const std::string kind :
       {"uniform", "clustered", "shell", "lattice", "duplicates", "plane", "line", "huge", "nonfinite"}) {
    Cloud x = shaped(kind, rng, 12000);
    Cloud q = queries_for(x, rng, 900);
    DeviceCloud dx(x), dq(q);
    StreamContext sc;
    pcops::cuda::SpatialIndex index;
    index.build(sc.ctx, dx.view, {}, {});
    EXPECT_EQ(index.batch(), 1);
    EXPECT_EQ(index.cloud_size(0), x.count);
    EXPECT_GE(index.memory_bytes(), 16 * x.count);
    for (int64_t k : {1, 3, 16, 32, 33, 100}) {
      const Result want = cpu_knn(q.view(), x.view(), k);
      EXPECT_TRUE(pcops_test::same_result(index_knn(sc, index, dq.view, k), want)) << kind << " k=" << k;
      if (k == 16)
        EXPECT_TRUE(pcops_test::same_result(index_knn(sc, index, dq.strided, k), want)) << kind << " strided";
    }
    // All points querying (the kNN graph).
    EXPECT_TRUE(pcops_test::same_result(index_knn(sc, index, dx.view, 8), cpu_knn(x.view(), x.view(), 8))) << kind;
    for (float r : {0.0f, 0.01f, 0.08f}) {
      for (int64_t K : {1, 16, 32, 40}) {
        EXPECT_TRUE(pcops_test::same_result(index_ball(sc, index, dq.view, r, K), cpu_ball(q.view(), x.view(), r, K)))
            << kind << " r=" << r << " K=" << K;
      }
    }
  }
}

TEST(CudaSpatialIndex, LargeKTakesTheDenseFallback) {
  std::mt19937 rng(3);
  Cloud x = shaped("nonfinite", rng, 3000);
  Cloud q = queries_for(x, rng, 60);
  DeviceCloud dx(x), dq(q);
  StreamContext sc;
  pcops::cuda::SpatialIndex index;
  index.build(sc.ctx, dx.view, {}, {});
  for (int64_t k : {1024, 1100})
    EXPECT_TRUE(pcops_test::same_result(index_knn(sc, index, dq.view, k), cpu_knn(q.view(), x.view(), k))) << "k=" << k;
  for (int64_t K : {1024, 1500})
    EXPECT_TRUE(pcops_test::same_result(index_ball(sc, index, dq.view, 0.3f, K), cpu_ball(q.view(), x.view(), 0.3f, K)))
        << "K=" << K;
}

TEST(CudaSpatialIndex, BatchesWithLengthsQueryLengthsAndRebuild) {
  std::mt19937 rng(11);
  const int64_t B = 4, n = 5000, m = 700;
  Cloud x = pcops_test::uniform_cloud(rng, B, n, 3);
  Cloud q = pcops_test::uniform_cloud(rng, B, m, 3);
  for (int64_t i = 0; i < n; i += 17) x.at(2, i, 1) = NAN;
  const std::vector<int64_t> len = {5000, 0, 20, 4321}, qlen = {700, 30, 700, 0};
  const pcops::LengthsView L{len.data(), B}, QL{qlen.data(), B};
  DeviceCloud dx(x), dq(q);
  StreamContext sc;
  pcops::cuda::SpatialIndex index;
  {
    Cloud small = pcops_test::uniform_cloud(rng, 1, 50, 3);
    DeviceCloud ds(small);
    index.build(sc.ctx, ds.view, {}, {});  // replaced below
    EXPECT_EQ(index.batch(), 1);
  }
  index.build(sc.ctx, dx.strided, L, {});
  ASSERT_EQ(index.batch(), B);
  EXPECT_TRUE(index.has_lengths());
  EXPECT_EQ(index.cloud_size(2), 20);
  for (int64_t k : {1, 16, 25, 40})  // k > 20 pads the third cloud
    EXPECT_TRUE(pcops_test::same_result(index_knn(sc, index, dq.view, k, QL), cpu_knn(q.view(), x.view(), k, QL, L))) << k;
  EXPECT_TRUE(pcops_test::same_result(index_knn(sc, index, dq.view, 9), cpu_knn(q.view(), x.view(), 9, {}, L)));
  for (int64_t K : {8, 64})
    EXPECT_TRUE(
        pcops_test::same_result(index_ball(sc, index, dq.view, 0.05f, K, QL), cpu_ball(q.view(), x.view(), 0.05f, K, QL, L)))
        << K;
}

TEST(CudaSpatialIndex, RealCloudsAllPoints) {
  std::mt19937 rng(5);
  for (const char* name : {"building.ply", "bunny00.off", "radar.xyz"}) {
    const Cloud& x = pcops_test::cached_cloud(name, rng);
    DeviceCloud dx(x);
    StreamContext sc;
    pcops::cuda::SpatialIndex index;
    index.build(sc.ctx, dx.view, {}, {});
    for (int64_t k : {16, 64})
      EXPECT_TRUE(pcops_test::same_result(index_knn(sc, index, dx.view, k), cpu_knn(x.view(), x.view(), k))) << name << " " << k;
    EXPECT_TRUE(pcops_test::same_result(index_ball(sc, index, dx.view, 0.02f, 32), cpu_ball(x.view(), x.view(), 0.02f, 32)))
        << name;
  }
}

// Clouds of a million points (clustered and uniform), every point querying, against the CPU.
TEST(CudaSpatialIndex, MillionPointsAllPoints) {
  std::mt19937 rng(9);
  for (const std::string kind : {"clustered", "uniform"}) {
    Cloud x = shaped(kind, rng, 1000000);
    DeviceCloud dx(x);
    StreamContext sc;
    pcops::cuda::SpatialIndex index;
    index.build(sc.ctx, dx.view, {}, {});
    EXPECT_TRUE(pcops_test::same_result(index_knn(sc, index, dx.view, 16), cpu_knn(x.view(), x.view(), 16))) << kind;
  }
}

TEST(CudaSpatialIndex, ShortCasesForSanitizers) {
  std::mt19937 rng(2);
  for (const std::string kind : {"clustered", "duplicates", "nonfinite"}) {
    Cloud x = shaped(kind, rng, 3000);
    Cloud q = queries_for(x, rng, 100);
    DeviceCloud dx(x), dq(q);
    StreamContext sc;
    pcops::cuda::SpatialIndex index;
    index.build(sc.ctx, dx.view, {}, {});
    for (int64_t k : {5, 32, 70})
      EXPECT_TRUE(pcops_test::same_result(index_knn(sc, index, dq.view, k), cpu_knn(q.view(), x.view(), k))) << kind << k;
    for (int64_t K : {16, 48})
      EXPECT_TRUE(pcops_test::same_result(index_ball(sc, index, dq.view, 0.1f, K), cpu_ball(q.view(), x.view(), 0.1f, K)))
          << kind << K;
  }
}

TEST(CudaSpatialIndex, EmptyAndErrors) {
  std::mt19937 rng(4);
  Cloud x = pcops_test::uniform_cloud(rng, 2, 100, 3);
  Cloud q = pcops_test::uniform_cloud(rng, 2, 10, 3);
  DeviceCloud dx(x), dq(q);
  StreamContext sc;
  pcops::cuda::SpatialIndex index;
  index.build(sc.ctx, dx.view, {}, {});
  using pcops::ErrorKind;
  float* d = nullptr;
  int64_t* i = nullptr;
  pcops_test::expect_error(ErrorKind::Value, [&] { index.knn(sc.ctx, dq.view, {}, 101, d, i); }, "k > N");
  pcops_test::expect_error(ErrorKind::Value, [&] { index.knn(sc.ctx, dq.view, {}, -1, d, i); }, "k < 0");
  pcops_test::expect_error(ErrorKind::Value, [&] { index.ball_query(sc.ctx, dq.view, {}, -1.0f, 4, d, i); }, "r");
  pcops_test::expect_error(ErrorKind::Value, [&] { index.ball_query(sc.ctx, dq.view, {}, NAN, 4, d, i); }, "nan");
  pcops::PointsView one = dq.view;
  one.batch = 1;
  pcops_test::expect_error(ErrorKind::Value, [&] { index.knn(sc.ctx, one, {}, 3, d, i); }, "batch");
  const std::vector<int64_t> bad = {5, 11};
  pcops_test::expect_error(ErrorKind::Value, [&] { index.knn(sc.ctx, dq.view, {bad.data(), 2}, 3, d, i); }, "ql");
  pcops::PointsView d2 = dx.view;
  d2.dim = 2;
  pcops_test::expect_error(ErrorKind::Value, [&] { index.build(sc.ctx, d2, {}, {}); }, "dim");
  const std::vector<int64_t> badlen = {100, 101};
  pcops_test::expect_error(ErrorKind::Value, [&] { index.build(sc.ctx, dx.view, {badlen.data(), 2}, {}); }, "len");
  // The failed builds left the index as it was.
  EXPECT_EQ(index.batch(), 2);
  EXPECT_TRUE(pcops_test::same_result(index_knn(sc, index, dq.view, 4), cpu_knn(q.view(), x.view(), 4)));
  // An empty index answers with padding.
  pcops::cuda::SpatialIndex empty;
  const std::vector<int64_t> zero = {0, 0};
  empty.build(sc.ctx, dx.view, {zero.data(), 2}, {});
  const Result r = index_knn(sc, empty, dq.view, 3);
  for (size_t t = 0; t < r.idx.size(); ++t) {
    EXPECT_EQ(r.idx[t], -1);
    EXPECT_TRUE(std::isinf(r.dist[t]));
  }
  const Result rb = index_ball(sc, empty, dq.view, 0.5f, 3);
  for (size_t t = 0; t < rb.idx.size(); ++t) {
    EXPECT_EQ(rb.idx[t], -1);
    EXPECT_EQ(rb.dist[t], 0.0f);
  }
}

}  // namespace

namespace {

// The dense cuda::knn and cuda::ball_query paths (a SpatialIndex built per call, the grid and
// scan paths) agree with the CPU whatever the overrides pick.
TEST(CudaSpatialIndex, DenseOperatorPathsAgree) {
  std::mt19937 rng(13);
  for (const std::string kind : {"uniform", "clustered", "duplicates", "nonfinite"}) {
    Cloud x = shaped(kind, rng, 9000);
    Cloud q = queries_for(x, rng, 500);
    DeviceCloud dx(x), dq(q);
    for (const char* mode : {"never", "always", ""}) {
      pcops_cuda_test::ScopedEnv knn_env("PCOPS_CUDA_KNN_INDEX", mode);
      pcops_cuda_test::ScopedEnv ball_env("PCOPS_CUDA_BALL_QUERY_INDEX", mode);
      StreamContext sc;
      for (int64_t k : {1, 16, 32}) {
        DeviceResult out(q.count * k);
        pcops::cuda::knn(sc.ctx, dq.view, dx.view, {}, {}, pcops::KnnParams{k}, out.dist.data(), out.idx.data());
        EXPECT_TRUE(pcops_test::same_result(out.download(), cpu_knn(q.view(), x.view(), k))) << kind << " k=" << k << " " << mode;
      }
      for (float r : {0.02f, 0.2f}) {
        for (int64_t K : {1, 16, 32}) {
          DeviceResult out(q.count * K);
          pcops::cuda::ball_query(sc.ctx, dq.view, dx.view, {}, {}, pcops::BallQueryParams{r, K}, out.dist.data(),
                                  out.idx.data());
          EXPECT_TRUE(pcops_test::same_result(out.download(), cpu_ball(q.view(), x.view(), r, K)))
              << kind << " r=" << r << " K=" << K << " " << mode;
        }
      }
    }
  }
}

}  // namespace
