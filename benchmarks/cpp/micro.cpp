// C++ micro-benchmarks of the CPU operators (no PyTorch): unit-sphere-shell clouds, batch 1.
// Peer comparisons live in the Python harness (`pcops bench`); these track the C++ API alone.
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <vector>

#include "pcops/pcops.hpp"

namespace {

std::vector<float> sphere_shell(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> p(3 * n);
  for (int64_t i = 0; i < n; ++i) {
    float x = g(rng), y = g(rng), z = g(rng);
    const float r = std::sqrt(x * x + y * y + z * z);
    p[3 * i] = x / r + 0.01f * g(rng);
    p[3 * i + 1] = y / r + 0.01f * g(rng);
    p[3 * i + 2] = z / r + 0.01f * g(rng);
  }
  return p;
}

std::vector<float> first_points(const std::vector<float>& p, int64_t m) {
  return std::vector<float>(p.begin(), p.begin() + 3 * m);
}

void BM_FurthestPointSample(benchmark::State& state) {
  const int64_t n = state.range(0), m = 1024;
  const auto pts = sphere_shell(n, 1);
  std::vector<int64_t> out(m);
  pcops::CpuContext ctx;
  for (auto _ : state) {
    pcops::cpu::furthest_point_sample(ctx, pcops::PointsView::contiguous(pts.data(), 1, n, 3), {},
                                      pcops::FpsParams{m, 0, false}, out.data());
    benchmark::DoNotOptimize(out.data());
  }
}

void BM_Knn(benchmark::State& state) {
  const int64_t n = state.range(0), m = 1024, k = 128;
  const auto pts = sphere_shell(n, 2);
  const auto q = first_points(pts, m);
  std::vector<float> dist(m * k);
  std::vector<int64_t> idx(m * k);
  pcops::CpuContext ctx;
  for (auto _ : state) {
    pcops::cpu::knn(ctx, pcops::PointsView::contiguous(q.data(), 1, m, 3),
                    pcops::PointsView::contiguous(pts.data(), 1, n, 3), {}, {}, pcops::KnnParams{k},
                    dist.data(), idx.data());
    benchmark::DoNotOptimize(idx.data());
  }
}

void BM_BallQuery(benchmark::State& state) {
  const int64_t n = state.range(0), m = 1024, K = 64;
  const auto pts = sphere_shell(n, 3);
  const auto q = first_points(pts, m);
  std::vector<float> dist2(m * K);
  std::vector<int64_t> idx(m * K);
  pcops::CpuContext ctx;
  for (auto _ : state) {
    pcops::cpu::ball_query(ctx, pcops::PointsView::contiguous(q.data(), 1, m, 3),
                           pcops::PointsView::contiguous(pts.data(), 1, n, 3), {}, {},
                           pcops::BallQueryParams{0.1f, K}, dist2.data(), idx.data());
    benchmark::DoNotOptimize(idx.data());
  }
}

}  // namespace

BENCHMARK(BM_FurthestPointSample)->Arg(20000)->Arg(100000)->Arg(1000000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Knn)->Arg(20000)->Arg(100000)->Arg(1000000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_BallQuery)->Arg(20000)->Arg(100000)->Arg(1000000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
