// The C++ SpatialIndex (no PyTorch): kNN and ball query equal to cpu::knn / cpu::ball_query bit for
// bit on a uniform cloud, a cluster with far outliers, a plane, duplicates and non-finite points,
// every leaf size, batches with lengths; a rebuild replaces the index; bad input raises.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "oracle.hpp"
#include "pcops/ball_query.hpp"
#include "pcops/error.hpp"
#include "pcops/knn.hpp"
#include "pcops/spatial_index.hpp"

namespace {

using pcops::PointsView;

std::vector<float> cloud(const char* kind, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> p(3 * n);
  for (int64_t i = 0; i < n; ++i) {
    float* x = &p[3 * i];
    for (int d = 0; d < 3; ++d) x[d] = u(rng);
    if (std::strcmp(kind, "cluster") == 0) {
      for (int d = 0; d < 3; ++d) x[d] *= (i % 97 == 0) ? 1000.0f : 1e-3f;
    } else if (std::strcmp(kind, "plane") == 0) {
      x[2] = 0.5f;
    } else if (std::strcmp(kind, "duplicates") == 0) {
      std::mt19937 r2(static_cast<uint32_t>(i % 50));
      for (int d = 0; d < 3; ++d) x[d] = u(r2);
    } else if (std::strcmp(kind, "nonfinite") == 0 && i % 113 == 5) {
      x[i % 3] = (i % 2) ? NAN : INFINITY;
    }
  }
  return p;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(SpatialIndex, KnnAndBallQueryEqualTheDenseOperators) {
  const int64_t n = 2500, m = 700;
  for (const char* kind : {"uniform", "cluster", "plane", "duplicates", "nonfinite"}) {
    const std::vector<float> pts = cloud(kind, n, 3);
    std::vector<float> q = cloud("uniform", m, 9);
    for (int64_t i = 0; i < 200; ++i) std::memcpy(&q[3 * i], &pts[3 * i], 3 * sizeof(float));
    const PointsView P = PointsView::contiguous(pts.data(), 1, n, 3),
                     Q = PointsView::contiguous(q.data(), 1, m, 3);
    for (int64_t leaf : {1, 7, 32, 4096}) {
      for (bool grid : {false, true}) {
        SCOPED_TRACE(testing::Message() << kind << " leaf " << leaf << " grid " << grid);
        pcops::cpu::SpatialIndex index;
        index.build({}, P, {}, pcops::SpatialIndexParams{leaf, grid});
        EXPECT_EQ(index.cloud_size(0), n);
        EXPECT_GE(index.memory_bytes(), 16 * index.cloud(0).finite);
        for (int64_t k : {1, 16, 64}) {
          std::vector<float> d(m * k), rd(m * k);
          std::vector<int64_t> i(m * k), ri(m * k);
          index.knn({}, Q, {}, k, d.data(), i.data());
          pcops::cpu::knn({}, Q, P, {}, {}, pcops::KnnParams{k}, rd.data(), ri.data());
          EXPECT_EQ(i, ri) << "k " << k;
          EXPECT_TRUE(same_bits(d, rd)) << "k " << k;
        }
        for (float r : {0.0f, 0.01f, 0.2f}) {
          const int64_t K = 24;
          std::vector<float> d(m * K), rd(m * K);
          std::vector<int64_t> i(m * K), ri(m * K);
          index.ball_query({}, Q, {}, r, K, d.data(), i.data());
          pcops::cpu::ball_query({}, Q, P, {}, {}, pcops::BallQueryParams{r, K}, rd.data(), ri.data());
          EXPECT_EQ(i, ri) << "r " << r;
          EXPECT_TRUE(same_bits(d, rd)) << "r " << r;
        }
      }
    }
  }
}

TEST(SpatialIndex, BatchesWithLengthsAndRebuild) {
  const int64_t B = 3, n = 600, m = 200, k = 10;
  std::vector<float> pts = cloud("uniform", B * n, 5), q = cloud("uniform", B * m, 6);
  const int64_t lengths[B] = {600, 0, 7};
  const int64_t qlen[B] = {200, 50, 0};
  const PointsView P = PointsView::contiguous(pts.data(), B, n, 3),
                   Q = PointsView::contiguous(q.data(), B, m, 3);
  const pcops::LengthsView L{lengths, B}, QL{qlen, B};
  for (bool grid : {false, true}) {
    pcops::cpu::SpatialIndex index;
    index.build({}, PointsView::contiguous(pts.data(), 1, 50, 3), {}, {});  // replaced below
    index.build({}, P, L, pcops::SpatialIndexParams{32, grid});
    ASSERT_EQ(index.batch(), B);
    std::vector<float> d(B * m * k), rd(B * m * k);
    std::vector<int64_t> i(B * m * k), ri(B * m * k);
    index.knn({}, Q, QL, k, d.data(), i.data());
    pcops::cpu::knn({}, Q, P, QL, L, pcops::KnnParams{k}, rd.data(), ri.data());
    EXPECT_EQ(i, ri);
    EXPECT_TRUE(same_bits(d, rd));
  }
}

// With a grid, ball queries of a finite threshold search the grid (no tree); the tree is built on
// the first query that needs it (here an infinite threshold: every finite point matches), once,
// whatever the threads, and every query gets the dense operator's result.
TEST(SpatialIndex, GridBallQueriesAndConcurrentFirstTreeQueries) {
  const int64_t n = 20000, m = 500, K = 12;
  const std::vector<float> pts = cloud("uniform", n, 8);
  const PointsView P = PointsView::contiguous(pts.data(), 1, n, 3);
  const PointsView Q = PointsView::contiguous(pts.data(), 1, m, 3);
  pcops::cpu::SpatialIndex index;
  index.build({}, P, {}, {});
  ASSERT_TRUE(index.cloud(0).grid != nullptr);  // an even cloud keeps the grid
  const int64_t grid_only = index.memory_bytes();
  for (float r : {0.03f, 1e20f}) {  // R2 = fl32(1e40) = +inf: the tree
    std::vector<float> rd(m * K);
    std::vector<int64_t> ri(m * K);
    pcops::cpu::ball_query({}, Q, P, {}, {}, pcops::BallQueryParams{r, K}, rd.data(), ri.data());
    std::vector<std::vector<float>> d(4, std::vector<float>(m * K));
    std::vector<std::vector<int64_t>> i(4, std::vector<int64_t>(m * K));
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&, t] { index.ball_query({}, Q, {}, r, K, d[t].data(), i[t].data()); });
    for (auto& th : threads) th.join();
    for (int t = 0; t < 4; ++t) {
      EXPECT_EQ(i[t], ri) << r;
      EXPECT_TRUE(same_bits(d[t], rd)) << r;
    }
    if (r < 1.0f) EXPECT_EQ(index.memory_bytes(), grid_only);  // no tree yet
  }
  EXPECT_GT(index.memory_bytes(), grid_only);
}

TEST(SpatialIndex, Errors) {
  const std::vector<float> pts = cloud("uniform", 100, 1);
  const PointsView P = PointsView::contiguous(pts.data(), 1, 100, 3);
  pcops::cpu::SpatialIndex index;
  EXPECT_THROW(index.build({}, P, {}, pcops::SpatialIndexParams{0}), pcops::Error);
  EXPECT_THROW(index.build({}, PointsView::contiguous(pts.data(), 1, 50, 2), {}, {}), pcops::Error);
  const int64_t bad[1] = {101};
  EXPECT_THROW(index.build({}, P, pcops::LengthsView{bad, 1}, {}), pcops::Error);
  index.build({}, P, {}, {});
  std::vector<float> d(100 * 101);
  std::vector<int64_t> i(100 * 101);
  EXPECT_THROW(index.knn({}, P, {}, 101, d.data(), i.data()), pcops::Error);
  EXPECT_THROW(index.ball_query({}, P, {}, -1.0f, 3, d.data(), i.data()), pcops::Error);
  EXPECT_THROW(index.knn({}, PointsView::contiguous(pts.data(), 2, 50, 3), {}, 1, d.data(), i.data()),
               pcops::Error);
}

// The dense ball query hands clouds whose grid stays overfull within its cell budget (tight
// clusters far smaller than the box) to the spatial index: the float32 brute force of the contract
// decides, for K below and above the matches per query, with batches and non-finite points.
TEST(SpatialIndex, DenseBallQueryOnTightClustersEqualsTheContract) {
  std::mt19937 rng(21);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  const int64_t B = 2, n = 30000, m = 1500;
  std::vector<float> pts(B * n * 3), q(B * m * 3);
  for (int64_t b = 0; b < B; ++b) {
    float centres[10][3];
    for (auto& c : centres)
      for (float& v : c) v = u(rng);
    for (int64_t i = 0; i < n; ++i) {
      float* x = &pts[(b * n + i) * 3];
      for (int d = 0; d < 3; ++d) x[d] = (i % 20 == 0) ? u(rng) : centres[i % 10][d] + 1e-4f * g(rng);
      if (i % 997 == 3) x[1] = NAN;
    }
    for (int64_t i = 0; i < m; ++i)
      for (int d = 0; d < 3; ++d) q[(b * m + i) * 3 + d] = pts[(b * n + i * 19) * 3 + d];
  }
  const PointsView P = PointsView::contiguous(pts.data(), B, n, 3), Q = PointsView::contiguous(q.data(), B, m, 3);
  const int64_t lengths[B] = {30000, 21111};
  const pcops::LengthsView L{lengths, B};
  for (float r : {5e-5f, 2e-4f}) {
    for (int64_t K : {8, 200}) {
      pcops_test::Result got = pcops_test::sentinel_result(B * m * K);
      pcops::cpu::ball_query({}, Q, P, {}, L, pcops::BallQueryParams{r, K}, got.dist.data(), got.idx.data());
      EXPECT_TRUE(pcops_test::same_result(got, pcops_test::ball_oracle(Q, P, {}, L, r, K))) << "r " << r << " K " << K;
    }
  }
}

}  // namespace
