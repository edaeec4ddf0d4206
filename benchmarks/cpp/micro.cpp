// C++ micro-benchmarks of the CPU operators (no PyTorch): unit-sphere-shell clouds, batch 1.
// Peer comparisons live in the Python harness (`pcops bench`); these track the C++ API alone.
#include <benchmark/benchmark.h>

#include <algorithm>
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

// point_conv (exact) forward and backward on kNN neighbourhoods (k = 16) of the shell with a 3 x 3
// x 3 grid of kernel cells: state.range(0) points, state.range(1) channels in and out. The
// triplets' grouping is part of every call (PCOPS_CPU_POINT_CONV_GROUPING picks it).
std::vector<int64_t> conv_triplets(const std::vector<float>& pts, int64_t n, int64_t k) {
  std::vector<float> dist(n * k);
  std::vector<int64_t> idx(n * k), t;
  pcops::CpuContext ctx;
  const auto view = pcops::PointsView::contiguous(pts.data(), 1, n, 3);
  pcops::cpu::knn(ctx, view, view, {}, {}, pcops::KnnParams{k}, dist.data(), idx.data());
  std::vector<float> last(n);
  for (int64_t i = 0; i < n; ++i) last[i] = std::sqrt(dist[i * k + k - 1]);
  std::nth_element(last.begin(), last.begin() + n * 9 / 10, last.end());
  const pcops::TripletShape shape{n, n, k, last[n * 9 / 10], 3};
  pcops::cpu::point_conv_triplets(ctx, shape, pts.data(), pts.data(), idx.data(), [&t](int64_t T) {
    t.resize(3 * T);
    return t.data();
  });
  return t;
}

void point_conv_case(benchmark::State& state, bool backward) {
  const int64_t n = state.range(0), c = state.range(1), K = 27;
  const auto pts = sphere_shell(n, 4);
  const std::vector<int64_t> t = conv_triplets(pts, n, 16);
  const pcops::PointConvShape s{n, n, c, c, K, static_cast<int64_t>(t.size() / 3)};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> f(n * c), w(K * c * c), g(n * c), out(n * c), gf(n * c), gw(K * c * c);
  for (auto* v : {&f, &w, &g})
    for (float& x : *v) x = u(rng);
  pcops::CpuContext ctx;
  for (auto _ : state) {
    if (backward)
      pcops::cpu::point_conv_backward(ctx, s, g.data(), f.data(), w.data(), t.data(), gf.data(), gw.data());
    else
      pcops::cpu::point_conv(ctx, s, f.data(), w.data(), t.data(), out.data());
    benchmark::DoNotOptimize(backward ? gw.data() : out.data());
  }
  state.counters["triplets"] = static_cast<double>(s.triplets);
}

void BM_PointConv(benchmark::State& state) { point_conv_case(state, false); }
void BM_PointConvBackward(benchmark::State& state) { point_conv_case(state, true); }

}  // namespace

BENCHMARK(BM_FurthestPointSample)->Arg(20000)->Arg(100000)->Arg(1000000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Knn)->Arg(20000)->Arg(100000)->Arg(1000000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_BallQuery)->Arg(20000)->Arg(100000)->Arg(1000000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_PointConv)->Args({20000, 1})->Args({20000, 32})->Args({165000, 1})->Args({165000, 32})
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_PointConvBackward)->Args({20000, 1})->Args({20000, 32})->Args({165000, 1})
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
