// CUDA furthest_point_sample: bitwise equal indices to the CPU backend on every kind of cloud, on
// sizes that select each CUDA path and cross its boundaries (cluster path: N <= 32768 with
// PPT = 1..32 and cluster sizes 1..8, st.async exchange for clusters of 2..8; big-cluster path:
// 32768 < N <= 131072 on clusters of 16 blocks (256 threads up to 65536 points, then 512), with
// and without the finite-coordinate fold; grid path: larger clouds, and batches whose clusters
// cannot all be resident, up to #SMs * 8192 points, about 2048 points per block up to one block
// per SM; sorted path: single clouds past 700000 points, Morton-sorted chunks folded only when
// the newest centre can reach them, forced down to a few points; streaming path: any D != 3 or
// larger clouds), long runs past the 16-bit exchange tags and many mbarrier phases, and the same
// errors as the CPU backend.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <random>
#include <vector>

#include "cuda_util.hpp"
#include "oracle.hpp"
#include "pcops/error.hpp"
#include "pcops/furthest_point_sample.hpp"

namespace {

using pcops::FpsParams;
using pcops::LengthsView;
using pcops::PointsView;
using pcops_cuda_test::DeviceBuffer;
using pcops_cuda_test::DeviceCloud;
using pcops_cuda_test::StreamContext;
using pcops_test::Cloud;
using pcops_test::kSentinelIdx;

// Forces a CUDA path (PCOPS_CUDA_FPS_CONFIG) for the scope's lifetime.
struct ForcePath : pcops_cuda_test::ScopedEnv {
  explicit ForcePath(const char* config) : ScopedEnv("PCOPS_CUDA_FPS_CONFIG", config) {}
};

FpsParams params_of(int64_t m, int64_t start = 0, bool skip = false) {
  FpsParams p;
  p.num_samples = m;
  p.start_index = start;
  p.skip_near_origin = skip;
  return p;
}

int num_sms() {
  int dev = 0, sms = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  return sms;
}

std::vector<int64_t> cpu_fps(const PointsView& v, const LengthsView& l, const FpsParams& p) {
  std::vector<int64_t> out(static_cast<size_t>(v.batch * p.num_samples), kSentinelIdx);
  pcops::cpu::furthest_point_sample({}, v, l, p, out.data());
  return out;
}

std::vector<int64_t> cuda_fps(const PointsView& dv, const LengthsView& l, const FpsParams& p) {
  StreamContext sc;
  DeviceBuffer<int64_t> out(static_cast<size_t>(dv.batch * p.num_samples));
  out.fill(kSentinelIdx);
  pcops::cuda::furthest_point_sample(sc.ctx, dv, l, p, out.data());
  return out.download();
}

::testing::AssertionResult same_idx(const std::vector<int64_t>& got, const std::vector<int64_t>& want) {
  // Indices only: same_result with zero distances on both sides.
  return pcops_test::same_result(pcops_test::Result{std::vector<float>(got.size(), 0.0f), got},
                                 pcops_test::Result{std::vector<float>(want.size(), 0.0f), want});
}

// CUDA == CPU on the contiguous view, and (optionally) on the strided copy.
std::vector<int64_t> expect_same(const Cloud& c, const FpsParams& p, LengthsView l = {},
                                 bool strided = false) {
  const std::vector<int64_t> want = cpu_fps(c.view(), l, p);
  DeviceCloud dc(c);
  const std::vector<int64_t> got = cuda_fps(dc.view, l, p);
  EXPECT_TRUE(same_idx(got, want)) << "B=" << c.batch << " N=" << c.count << " D=" << c.dim
                                   << " M=" << p.num_samples;
  if (strided) {
    EXPECT_TRUE(same_idx(cuda_fps(dc.strided, l, p), want)) << "strided view";
  }
  return got;
}

TEST(CudaFurthestPointSample, ClusterPathSizesAroundBoundaries) {
  std::mt19937 rng(1);
  // PPT steps at multiples of 1024; the cluster size grows with N / 1024.
  for (int64_t n : {1, 2, 3, 31, 33, 1000, 1023, 1024, 1025, 2047, 2048, 2049, 4096, 4097, 8191, 8192,
                    8193, 16384, 16385, 32767, 32768}) {
    SCOPED_TRACE(n);
    const Cloud c = pcops_test::uniform_cloud(rng, 1, n, 3, -1.0f, 1.0f);
    expect_same(c, params_of(std::min<int64_t>(n + 3, 300), n / 2));
  }
}

TEST(CudaFurthestPointSample, BigClusterPathSizesAroundBoundaries) {
  std::mt19937 rng(21);
  // 256 threads: PPT 2..16 (exact counts above 8); 512 threads from 65537 points; grid past 131072.
  for (int64_t n : {int64_t{32769}, int64_t{40000}, int64_t{49153}, int64_t{57344}, int64_t{65536},
                    int64_t{65537}, int64_t{90001}, int64_t{106497}, int64_t{131071}, int64_t{131072}}) {
    SCOPED_TRACE(n);
    const Cloud c = pcops_test::uniform_cloud(rng, 1, n, 3, -1.0f, 1.0f);
    expect_same(c, params_of(150, n / 3));
  }
  // Coordinates at the edge of the finite fold (|v| < 2^61) and just past it.
  for (float big : {0x1.fffffep60f, 0x1p61f, 3e38f}) {
    SCOPED_TRACE(big);
    Cloud c = pcops_test::uniform_cloud(rng, 1, 70000, 3, -1.0f, 1.0f);
    c.at(0, 100, 0) = big;
    c.at(0, 60000, 1) = -big;
    expect_same(c, params_of(100, 5));
    expect_same(c, params_of(100, 100));
  }
}

TEST(CudaFurthestPointSample, ShortRunsOfEveryPathForSanitizers) {
  // Few steps on every path (cluster path with st.async exchange, big-cluster path with both block
  // sizes and both folds, grid path, streaming path): short enough for racecheck.
  std::mt19937 rng(22);
  expect_same(pcops_test::uniform_cloud(rng, 2, 8192, 3), params_of(12, 1));
  expect_same(pcops_test::uniform_cloud(rng, 1, 131073, 3), params_of(12, 1));  // grid
  {
    const ForcePath sorted("sorted");
    Cloud c = pcops_test::uniform_cloud(rng, 1, 20000, 3, -1.0f, 1.0f);
    expect_same(c, params_of(12, 3));
    c.at(0, 9, 1) = std::nanf("");  // the generic fold, every chunk at every step
    expect_same(c, params_of(12, 3));
  }
  expect_same(pcops_test::uniform_cloud(rng, 1, 3000, 4), params_of(12, 1));
  for (int64_t n : {int64_t{32769}, int64_t{65537}}) {
    Cloud c = pcops_test::uniform_cloud(rng, 1, n, 3, -1.0f, 1.0f);
    expect_same(c, params_of(12, 3));
    c.at(0, 9, 1) = std::nanf("");
    expect_same(c, params_of(12, 3));
  }
}

TEST(CudaFurthestPointSample, GridPathSizesAroundBoundaries) {
  const ForcePath grid("grid");  // single clouds past 700000 points take the sorted path by default
  std::mt19937 rng(2);
  const int64_t cap = int64_t{num_sms()} * 512 * 16;  // last size of the register grid path
  for (int64_t n : {int64_t{32769}, int64_t{65537}, int64_t{100000}, cap / 2 + 1}) {
    SCOPED_TRACE(n);
    const Cloud c = pcops_test::uniform_cloud(rng, 1, n, 3, -1.0f, 1.0f);
    expect_same(c, params_of(200, 7));
  }
  // Block count = ceil(N / 2048) up to #SMs (kTargetPpt = 4): one more polling warp past 32 and 64
  // blocks, and the point where the block count stops growing (PPT 4 -> 8).
  const int64_t full = int64_t{num_sms()} * 512 * 4;
  for (int64_t n : {int64_t{65536}, int64_t{131072}, int64_t{131073}, full, full + 1}) {
    SCOPED_TRACE(n);
    const Cloud c = pcops_test::uniform_cloud(rng, 1, n, 3, -1.0f, 1.0f);
    expect_same(c, params_of(120, n / 5));
  }
  // The exact capacity (PPT 16, full blocks) and one point more (streaming path).
  for (int64_t n : {cap, cap + 1}) {
    SCOPED_TRACE(n);
    const Cloud c = pcops_test::uniform_cloud(rng, 1, n, 3, -1.0f, 1.0f);
    expect_same(c, params_of(40, n - 1));
  }
}

TEST(CudaFurthestPointSample, ExchangeTagsWrapAfter65536Steps) {
  // The grid exchange tags each word with the step mod 2^16 (register and streaming paths); the
  // cluster exchange alternates mbarrier phases. All runs continue past M > N (index 0 repeats).
  std::mt19937 rng(17);
  const FpsParams p = params_of(65536 + 300, 11);
  expect_same(pcops_test::uniform_cloud(rng, 1, 32769, 3), p);  // big cluster, 16 blocks
  expect_same(pcops_test::uniform_cloud(rng, 1, 131073, 3), p);  // grid, 65 blocks
  {
    const ForcePath sorted("sorted");
    expect_same(pcops_test::uniform_cloud(rng, 1, 131073, 3), p);  // 513 chunks of 256
  }
  expect_same(pcops_test::uniform_cloud(rng, 1, 3000, 2), p);   // streaming
  expect_same(pcops_test::uniform_cloud(rng, 2, 8192, 3), p);   // cluster of 8
}

TEST(CudaFurthestPointSample, MillionPointShell) {
  std::mt19937 rng(3);
  const Cloud c = pcops_test::shell_cloud(rng, 1000000);
  expect_same(c, params_of(1024));
}

TEST(CudaFurthestPointSample, SortedPathShortRunForSanitizers) {
  // The one-barrier kernel (every warp reduces the warp winners and sends to one block): the
  // default, chunks of 256 folded one at a time, chunks of 128 folded four at a time, the
  // placement by ranks.
  // PCOPS_TEST_FPS_SORTED_CONFIG=<config> runs that one alone (racecheck is slow).
  std::vector<std::string> configs = {"sorted", "sorted256:1", "sorted128:4", "sorted-atomic"};
  if (const char* only = std::getenv("PCOPS_TEST_FPS_SORTED_CONFIG"); only != nullptr && *only != 0) configs = {only};
  for (const std::string& config_s : configs) {
    const char* config = config_s.c_str();
    SCOPED_TRACE(config);
    std::mt19937 rng(32);
    const ForcePath sorted(config);
    Cloud c = pcops_test::uniform_cloud(rng, 1, 5000, 3, -1.0f, 1.0f);
    expect_same(c, params_of(10, 3));
    c.at(0, 9, 1) = std::nanf("");
    expect_same(c, params_of(10, 3));
  }
}

TEST(CudaFurthestPointSample, SortedKernelsEveryRoundAndFoldWidth) {
  // Chunk i of a block belongs to lane (i / W) % 32 of warp i % W, round i / (32 W), W = 16:
  // fewer chunks than warps, one partial round, two rounds (1.1M points: 269 chunks a block),
  // three of four rounds (4.5M: 1099 chunks of 256); one, two or four chunks per fold; chunks of
  // 128 points (the default while one round holds them) and 256; the list kernel; a coarser
  // bucketing grid (32 cells per axis); the placement by ranks (no atomics).
  std::mt19937 rng(33);
  std::vector<Cloud> clouds;
  for (int64_t n : {300, 70000, 1100000}) clouds.push_back(pcops_test::uniform_cloud(rng, 1, n, 3, -1.0f, 1.0f));
  clouds.push_back(pcops_test::duplicate_cloud(rng, 30000, 37));
  Cloud bad = pcops_test::uniform_cloud(rng, 1, 9000, 3, -1.0f, 1.0f);
  bad.at(0, 4321, 2) = INFINITY;
  clouds.push_back(bad);
  Cloud sorted_cloud = pcops_test::uniform_cloud(rng, 1, 50000, 3);
  pcops_test::spatial_sort(sorted_cloud);
  clouds.push_back(sorted_cloud);
  const Cloud huge = pcops_test::uniform_cloud(rng, 1, 4500000, 3, -1.0f, 1.0f);
  for (const char* config : {"sorted", "sorted:1", "sorted:4", "sorted256", "sorted256:1", "sorted-list", "sorted-cells:5", "sorted-atomic"}) {
    SCOPED_TRACE(config);
    const ForcePath sorted(config);
    for (const Cloud& c : clouds) expect_same(c, params_of(std::min<int64_t>(c.count, 400), c.count / 3));
    expect_same(huge, params_of(48, 5));
  }
}

TEST(CudaFurthestPointSample, SortedPathSizesTiesAndRules) {
  std::mt19937 rng(31);
  {
    const ForcePath sorted("sorted");
    // Fewer chunks than blocks (chunks of 256), partial last chunks, a few chunks per block.
    for (int64_t n : {1, 2, 63, 255, 256, 257, 4095, 4096, 4097, 20000, 70000}) {
      SCOPED_TRACE(n);
      const Cloud c = pcops_test::uniform_cloud(rng, 1, n, 3, -1.0f, 1.0f);
      expect_same(c, params_of(std::min<int64_t>(n + 5, 700), n / 2));
    }
    // Exact ties: duplicates (then all m = 0 and index 0 repeats), lattices with rounding ties,
    // a flat cloud (one axis of zero extent), a spatially sorted cloud.
    const auto dup = expect_same(pcops_test::duplicate_cloud(rng, 30000, 37), params_of(60));
    EXPECT_EQ(dup.back(), 0);
    for (int64_t side : {20, 40}) {
      Cloud c = pcops_test::lattice_cloud(rng, side);
      expect_same(c, params_of(600, 5));
      for (float& v : c.data) v = v * 0.1f + 0.3f;
      expect_same(c, params_of(600, 5));
    }
    Cloud flat = pcops_test::uniform_cloud(rng, 1, 9000, 3);
    for (int64_t j = 0; j < 9000; ++j) flat.at(0, j, 2) = 0.5f;
    expect_same(flat, params_of(300, 1));
    Cloud s = pcops_test::uniform_cloud(rng, 1, 12000, 3);
    pcops_test::spatial_sort(s);
    expect_same(s, params_of(400));
    // skip_near_origin, with an ineligible start; nothing eligible at all.
    Cloud e = pcops_test::uniform_cloud(rng, 1, 6000, 3, -1.0f, 1.0f);
    for (int64_t j = 0; j < 6000; j += 3) e.at(0, j, 0) = e.at(0, j, 1) = e.at(0, j, 2) = (j % 2) ? 0.0182574f : 0.0f;
    expect_same(e, params_of(300, 0, true));
    Cloud z(1, 3000, 3);
    EXPECT_TRUE(same_idx(expect_same(z, params_of(6, 17, true)), std::vector<int64_t>{17, 0, 0, 0, 0, 0}));
    // Lengths (one cloud shorter than its slots), start at the last point, M > n.
    const Cloud c = pcops_test::uniform_cloud(rng, 1, 10000, 3);
    const int64_t len[1] = {7001};
    expect_same(c, params_of(7100, 7000), LengthsView{len, 1}, true);
    const int64_t zero[1] = {0};
    expect_same(c, params_of(5, 0), LengthsView{zero, 1});
    // Non-finite and huge coordinates: the generic fold on every chunk (and the finite fold at the
    // edge of 2^61).
    for (float v : {std::nanf(""), INFINITY, 3e38f, 0x1p61f, 0x1.fffffep60f}) {
      SCOPED_TRACE(v);
      Cloud u = pcops_test::uniform_cloud(rng, 1, 8000, 3, -1.0f, 1.0f);
      u.at(0, 77, 1) = v;
      u.at(0, 5000, 0) = -v;
      expect_same(u, params_of(200, 3));
    }
    // Real scans (a building facade, an outdoor scan).
    for (const char* name : {"building.ply", "b9_training.ply"}) {
      SCOPED_TRACE(name);
      const Cloud& r = pcops_test::cached_cloud(name, rng);
      expect_same(r, params_of(1024, r.count / 3));
    }
  }
  // The default path of single clouds past 700000 points: a cloud beyond the grid path's
  // register capacity (it took the streaming path before), skip_near_origin.
  const int64_t big = int64_t{num_sms()} * 512 * 16 + 12345;
  expect_same(pcops_test::shell_cloud(rng, big), params_of(300, 11));
  // 4.5M points: 17578 chunks, 1099 per block (more chunks than threads of a block).
  expect_same(pcops_test::uniform_cloud(rng, 1, 4500000, 3, -1.0f, 1.0f), params_of(64, 2));
  Cloud sk = pcops_test::uniform_cloud(rng, 1, 750000, 3, -1.0f, 1.0f);
  for (int64_t j = 0; j < 750000; j += 7) sk.at(0, j, 0) = sk.at(0, j, 1) = sk.at(0, j, 2) = 0.0f;
  expect_same(sk, params_of(200, 0, true));
}

TEST(CudaFurthestPointSample, BatchesPickClusterSizes) {
  std::mt19937 rng(4);
  // 16 x 8192 (cluster of 8 per cloud), 40 x 4096 (cluster of 2), 300 x 200 (one block each).
  for (auto [b, n] : {std::pair<int64_t, int64_t>{16, 8192}, {40, 4096}, {300, 200}, {3, 30000}}) {
    SCOPED_TRACE(b);
    const Cloud c = pcops_test::uniform_cloud(rng, b, n, 3);
    expect_same(c, params_of(b >= 300 ? 250 : 512, 1));
  }
}

TEST(CudaFurthestPointSample, GridPathBatchesAndChunks) {
  std::mt19937 rng(5);
  // 4 clouds in one cooperative launch; 40 clouds of 40000 need several launches.
  for (auto [b, n] : {std::pair<int64_t, int64_t>{4, 50000}, {40, 40000}}) {
    SCOPED_TRACE(b);
    const Cloud c = pcops_test::uniform_cloud(rng, b, n, 3);
    expect_same(c, params_of(64, 3));
  }
}

TEST(CudaFurthestPointSample, SpatiallySortedDuplicatesAndLattices) {
  std::mt19937 rng(6);
  for (int64_t n : {5000, 60000}) {
    Cloud s = pcops_test::uniform_cloud(rng, 1, n, 3);
    pcops_test::spatial_sort(s);
    expect_same(s, params_of(400));
    // Duplicates: many exact ties, then all m_j = 0 and the smallest index repeats.
    const Cloud d = pcops_test::duplicate_cloud(rng, n, 37);
    const auto got = expect_same(d, params_of(60));
    EXPECT_EQ(got.back(), 0);
  }
  for (int64_t side : {12, 20, 40}) {  // 1728 / 8000 / 64000 points on an integer lattice
    SCOPED_TRACE(side);
    Cloud c = pcops_test::lattice_cloud(rng, side);
    expect_same(c, params_of(500, 5));
    for (float& v : c.data) v = v * 0.1f + 0.3f;  // rounding ties
    expect_same(c, params_of(500, 5));
  }
}

TEST(CudaFurthestPointSample, RealClouds) {
  std::mt19937 rng(7);
  for (const char* name : {"building.ply", "b9_training.ply", "kitten.xyz"}) {
    SCOPED_TRACE(name);
    const Cloud& c = pcops_test::cached_cloud(name, rng);
    expect_same(c, params_of(1024, c.count / 3));
  }
}

TEST(CudaFurthestPointSample, SamplesZeroOneAndMoreThanPoints) {
  std::mt19937 rng(8);
  for (int64_t n : {5, 1500, 40000}) {
    const Cloud c = pcops_test::uniform_cloud(rng, 2, n, 3);
    expect_same(c, params_of(1, n - 1));
    expect_same(c, params_of(n + 20, 1));
    // M = 0 writes nothing.
    DeviceCloud dc(c);
    StreamContext sc;
    DeviceBuffer<int64_t> guard(2);
    guard.fill(kSentinelIdx);
    pcops::cuda::furthest_point_sample(sc.ctx, dc.view, {}, params_of(0, 99), guard.data());
    for (int64_t v : guard.download()) EXPECT_EQ(v, kSentinelIdx);
  }
  // B = 0 is allowed.
  StreamContext sc;
  DeviceBuffer<float> one(3);
  pcops::cuda::furthest_point_sample(sc.ctx, PointsView::contiguous(one.data(), 0, 1, 3), {},
                                     params_of(4), nullptr);
}

TEST(CudaFurthestPointSample, LengthsPadWithMinusOne) {
  std::mt19937 rng(9);
  for (int64_t n : {7, 3000, 20000, 50000}) {
    SCOPED_TRACE(n);
    const Cloud c = pcops_test::uniform_cloud(rng, 5, n, 3);
    const int64_t lens[5] = {n, 0, 1, n / 2 + 1, n - 1};
    const LengthsView l{lens, 5};
    expect_same(c, params_of(n / 2 + 10, 0), l, true);
    expect_same(c, params_of(3, 0), l);
  }
  // Every cloud empty (N = 0 allowed with lengths).
  const Cloud empty(2, 0, 3);
  std::vector<float> dummy(3, 0.0f);
  DeviceBuffer<float> d(dummy);
  const int64_t zeros[2] = {0, 0};
  const auto got = cuda_fps(PointsView::contiguous(d.data(), 2, 0, 3), LengthsView{zeros, 2}, params_of(3));
  EXPECT_TRUE(same_idx(got, std::vector<int64_t>(6, -1)));
}

TEST(CudaFurthestPointSample, StartIndex) {
  std::mt19937 rng(10);
  for (int64_t n : {900, 9000, 90000}) {
    const Cloud c = pcops_test::uniform_cloud(rng, 1, n, 3);
    for (int64_t s : {int64_t{0}, int64_t{1}, n / 3, n - 1}) expect_same(c, params_of(100, s));
  }
}

TEST(CudaFurthestPointSample, SkipNearOrigin) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> coin(0, 3);
  for (int64_t n : {500, 6000, 45000, 1200000}) {
    SCOPED_TRACE(n);
    Cloud c = pcops_test::uniform_cloud(rng, 1, n, 3, -1.0f, 1.0f);
    for (int64_t j = 0; j < n; ++j) {
      if (coin(rng) == 0) {  // at, near, and just around the 1e-3 threshold
        const float r = (j % 3 == 0) ? 0.0f : (j % 3 == 1) ? 0.0182574f : 0.01826f;
        c.at(0, j, 0) = r, c.at(0, j, 1) = r, c.at(0, j, 2) = r;
      }
    }
    c.at(0, 0, 0) = c.at(0, 0, 1) = c.at(0, 0, 2) = 0.0f;  // ineligible start
    expect_same(c, params_of(n > 100000 ? 32 : 300, 0, true));
    expect_same(c, params_of(n > 100000 ? 32 : 300, 0, false));
  }
  // Nothing eligible: the start, then index 0 repeats.
  Cloud z(1, 3000, 3);
  const auto got = expect_same(z, params_of(6, 17, true));
  EXPECT_TRUE(same_idx(got, std::vector<int64_t>{17, 0, 0, 0, 0, 0}));
}

TEST(CudaFurthestPointSample, OtherDimensions) {
  std::mt19937 rng(12);
  for (int64_t d : {1, 2, 3, 5}) {
    for (int64_t n : {10, 4000, 70000}) {
      SCOPED_TRACE(d * 1000000 + n);
      const Cloud c = pcops_test::uniform_cloud(rng, 2, n, d);
      expect_same(c, params_of(120, 1), {}, true);
    }
  }
  Cloud grid(1, 4096, 2);  // exact ties in 2-D
  for (int64_t j = 0; j < 4096; ++j) grid.at(0, j, 0) = float(j % 64), grid.at(0, j, 1) = float(j / 64);
  expect_same(grid, params_of(300));
}

TEST(CudaFurthestPointSample, NonFiniteCoordinates) {
  std::mt19937 rng(13);
  for (int64_t n : {3000, 50000}) {
    for (int variant = 0; variant < 5; ++variant) {
      SCOPED_TRACE(variant);
      Cloud c = pcops_test::uniform_cloud(rng, 1, n, 3);
      switch (variant) {
        case 0: c.at(0, 17, 1) = std::nanf(""); c.at(0, 900, 0) = INFINITY; break;
        case 1: c.at(0, 5, 2) = -INFINITY; break;
        case 2: c.at(0, 123, 0) = 1e30f; c.at(0, 2000, 1) = -3e25f; break;  // s overflows
        case 3: c.at(0, 0, 0) = std::nanf(""); break;                          // the start
        case 4: c.at(0, 44, 2) = 1e18f; c.at(0, 45, 2) = -1e18f; break;
      }
      expect_same(c, params_of(200), {}, true);
      expect_same(c, params_of(50, 0, true));
    }
  }
  Cloud all_nan(1, 50, 3);
  for (float& v : all_nan.data) v = std::nanf("");
  EXPECT_TRUE(same_idx(expect_same(all_nan, params_of(5, 3)), std::vector<int64_t>{3, 0, 0, 0, 0}));
  Cloud nan5(1, 3000, 5);  // streaming path
  for (float& v : nan5.data) v = std::nanf("");
  expect_same(nan5, params_of(5, 3));
}

TEST(CudaFurthestPointSample, StridedViews) {
  std::mt19937 rng(14);
  for (int64_t n : {100, 10000, 40000}) {
    const Cloud c = pcops_test::uniform_cloud(rng, 3, n, 3);
    expect_same(c, params_of(128, 2), {}, true);
  }
}

TEST(CudaFurthestPointSample, RepeatedCallsAndStreams) {
  // Workspace reuse across calls: stale exchange tags must never be taken for fresh ones.
  std::mt19937 rng(15);
  const Cloud c = pcops_test::uniform_cloud(rng, 2, 70000, 3);
  const auto want = cpu_fps(c.view(), {}, params_of(100));
  DeviceCloud dc(c);
  StreamContext sc;
  DeviceBuffer<int64_t> out(200);
  for (int rep = 0; rep < 3; ++rep) {
    out.fill(kSentinelIdx);
    pcops::cuda::furthest_point_sample(sc.ctx, dc.view, {}, params_of(100), out.data());
    EXPECT_TRUE(same_idx(out.download(), want)) << rep;
  }
}

void expect_error(const PointsView& v, const LengthsView& l, const FpsParams& p, pcops::ErrorKind kind) {
  StreamContext sc;
  DeviceBuffer<int64_t> out(8);
  out.fill(kSentinelIdx);
  try {
    pcops::cuda::furthest_point_sample(sc.ctx, v, l, p, out.data());
    ADD_FAILURE() << "expected pcops::Error";
  } catch (const pcops::Error& e) {
    EXPECT_EQ(int(e.kind()), int(kind)) << e.what();
  }
  for (int64_t x : out.download()) EXPECT_EQ(x, kSentinelIdx) << "wrote output before validation failed";
}

TEST(CudaFurthestPointSample, ErrorsAsCpu) {
  using pcops::ErrorKind;
  std::mt19937 rng(16);
  DeviceCloud dc(pcops_test::uniform_cloud(rng, 2, 10, 3));
  const PointsView ok = dc.view;
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
  expect_error(ok, LengthsView{one_len, 1}, params_of(1), ErrorKind::Value);
  const int64_t bad_len[2] = {3, 11};
  expect_error(ok, LengthsView{bad_len, 2}, params_of(1), ErrorKind::Value);
  const int64_t neg_len[2] = {-1, 3};
  expect_error(ok, LengthsView{neg_len, 2}, params_of(1), ErrorKind::Value);
  expect_error(ok, {}, params_of(-1), ErrorKind::Value);
  PointsView huge_batch = ok;
  huge_batch.batch = std::numeric_limits<int64_t>::max() / 2;
  expect_error(huge_batch, {}, params_of(4), ErrorKind::Value);
  DeviceCloud d2(pcops_test::uniform_cloud(rng, 1, 10, 2));
  expect_error(d2.view, {}, params_of(2, 0, true), ErrorKind::Value);
  PointsView empty = ok;
  empty.batch = 1;
  empty.count = 0;
  expect_error(empty, {}, params_of(1), ErrorKind::Value);
  expect_error(ok, {}, params_of(2, 10), ErrorKind::Index);
  expect_error(ok, {}, params_of(2, -1), ErrorKind::Index);
  const int64_t lens[2] = {4, 0};
  expect_error(ok, LengthsView{lens, 2}, params_of(2, -1), ErrorKind::Index);
  expect_error(ok, LengthsView{lens, 2}, params_of(2, 4), ErrorKind::Index);
  // Allowed: an empty cloud ignores start_index.
  const Cloud host = pcops_test::uniform_cloud(rng, 2, 10, 3);
  expect_same(host, params_of(2, 3), LengthsView{lens, 2});
}

// ---------------------------------------------------------------------------------------------
// Ragged (CSR) batches: one launch over all clouds with samples, global indices, per-cloud
// starts and counts (counts above the cloud size repeat its first row), every path.

struct RaggedCase {
  std::vector<float> rows;  // [count, dim]
  std::vector<int64_t> ptr, counts, starts;
  int64_t dim = 3;
};

RaggedCase ragged_case(std::mt19937& rng, const std::vector<int64_t>& sizes, int64_t dim, double ratio) {
  RaggedCase c;
  c.dim = dim;
  c.ptr.push_back(0);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t n : sizes) {
    for (int64_t i = 0; i < n * dim; ++i) c.rows.push_back(u(rng));
    c.ptr.push_back(c.ptr.back() + n);
    c.counts.push_back(n == 0 ? 0 : static_cast<int64_t>(std::ceil(static_cast<double>(n) * ratio)));
    c.starts.push_back(n == 0 ? 0 : static_cast<int64_t>(rng() % static_cast<unsigned>(n)));
  }
  return c;
}

void expect_same_ragged(const RaggedCase& c, bool strided = false) {
  const int64_t count = c.ptr.back();
  const pcops::OffsetsView ptr{c.ptr.data(), static_cast<int64_t>(c.ptr.size())};
  int64_t total = 0;
  for (int64_t v : c.counts) total += v;
  std::vector<int64_t> want(static_cast<size_t>(total), kSentinelIdx);
  pcops::cpu::furthest_point_sample_ragged({}, pcops::RaggedPointsView::contiguous(c.rows.data(), count, c.dim),
                                           ptr, c.counts.data(), c.starts.data(), want.data());
  // Strided: every row padded to dim + 2 floats.
  const int64_t row = strided ? c.dim + 2 : c.dim;
  std::vector<float> host(static_cast<size_t>(std::max<int64_t>(count * row, 1)), 7.0f);
  for (int64_t i = 0; i < count; ++i)
    for (int64_t d = 0; d < c.dim; ++d) host[i * row + d] = c.rows[i * c.dim + d];
  DeviceBuffer<float> dev(host);
  StreamContext sc;
  DeviceBuffer<int64_t> out(static_cast<size_t>(std::max<int64_t>(total, 1)));
  out.fill(kSentinelIdx);
  pcops::cuda::furthest_point_sample_ragged(sc.ctx, pcops::RaggedPointsView{dev.data(), count, c.dim, row, 1}, ptr,
                                            c.counts.data(), c.starts.data(), out.data());
  std::vector<int64_t> got = out.download();
  got.resize(static_cast<size_t>(total));
  EXPECT_TRUE(same_idx(got, want)) << "clouds=" << c.counts.size() << " strided=" << strided;
}

TEST(CudaFurthestPointSample, RaggedEveryPathAndEmptyClouds) {
  std::mt19937 rng(31);
  // Small clouds (cluster path) with empty ones between them, the ends included.
  expect_same_ragged(ragged_case(rng, {0, 5, 1, 0, 300, 2048, 0, 7000, 0}, 3, 0.5), true);
  // Many small clouds: one launch with gridDim.y = clouds.
  std::vector<int64_t> many(300);
  for (auto& n : many) n = 1 + static_cast<int64_t>(rng() % 600);
  expect_same_ragged(ragged_case(rng, many, 3, 0.25));
  // Big-cluster (up to 131072 points), grid (larger) and mixed sizes in one batch.
  expect_same_ragged(ragged_case(rng, {40000, 100, 90000}, 3, 0.01), true);
  expect_same_ragged(ragged_case(rng, {200000, 3000}, 3, 0.002));
  // Other dimensions (streaming path) and ratios above 1 (the first row repeats).
  expect_same_ragged(ragged_case(rng, {50, 0, 700}, 5, 1.0));
  expect_same_ragged(ragged_case(rng, {9, 40, 3}, 3, 2.5), true);
  expect_same_ragged(ragged_case(rng, {1, 1, 2}, 2, 3.0));
}

TEST(CudaFurthestPointSample, RaggedZeroCountsAndErrors) {
  std::mt19937 rng(32);
  RaggedCase c = ragged_case(rng, {10, 20}, 3, 0.5);
  c.counts = {0, 0};
  expect_same_ragged(c);  // nothing to do, nothing written
  RaggedCase none;
  none.ptr = {0};
  expect_same_ragged(none);
  // The CPU checks: a start outside its cloud, samples from an empty cloud, bad offsets.
  StreamContext sc;
  DeviceBuffer<float> dev(std::vector<float>(30, 0.0f));
  DeviceBuffer<int64_t> out(16);
  const std::vector<int64_t> ptr_ok{0, 4, 10}, ptr_bad{0, 12, 10}, ptr_empty{0, 0, 10};
  const std::vector<int64_t> counts{2, 2}, bad_start{4, 0}, starts{0, 0};
  const auto call = [&](const std::vector<int64_t>& p, const std::vector<int64_t>& s) {
    pcops::cuda::furthest_point_sample_ragged(sc.ctx, pcops::RaggedPointsView::contiguous(dev.data(), 10, 3),
                                              pcops::OffsetsView{p.data(), 3}, counts.data(), s.data(), out.data());
  };
  EXPECT_THROW(call(ptr_ok, bad_start), pcops::Error);
  EXPECT_THROW(call(ptr_bad, starts), pcops::Error);
  EXPECT_THROW(call(ptr_empty, starts), pcops::Error);
}

}  // namespace
