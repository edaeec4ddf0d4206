// Development probe of the sorted FPS path (not part of the build): where a step's time goes.
// The kernel is compiled with PCOPS_FPS_TRACE, which stamps clock64() at every phase of steps
// 512..575 in each of the 16 blocks; the probe prints per phase the median over steps of the
// slowest block's duration (SM cycles).
//
//   nvcc -std=c++20 -O3 -arch=sm_90 -DPCOPS_FPS_TRACE -Iinclude -Isrc benchmarks/scripts/fps_trace.cu \
//        <build>/libpcops_cuda.a <build>/libpcops.a -o fps_trace && PCOPS_CUDA_FPS_CONFIG=sorted ./fps_trace
#include "cuda/furthest_point_sample.cu"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

int main(int argc, char** argv) {
  using namespace pcops;
  namespace pc = pcops::cuda;
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 1000000;
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> h(static_cast<size_t>(3 * n));
  for (int64_t i = 0; i < n; ++i) {
    float v[3] = {g(rng), g(rng), g(rng)};
    const float r = std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
    for (int d = 0; d < 3; ++d) h[static_cast<size_t>(3 * i + d)] = v[d] / r + 0.01f * g(rng);
  }
  float* dp = nullptr;
  int64_t* dout = nullptr;
  if (cudaMalloc(&dp, h.size() * sizeof(float)) != cudaSuccess || cudaMalloc(&dout, 1024 * sizeof(int64_t)) != cudaSuccess) {
    std::fprintf(stderr, "fps_trace: no CUDA device memory (%s)\n", cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  cudaMemcpy(dp, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice);
  const PointsView view{dp, 1, n, 3, 3 * n, 3, 1};
  FpsParams p;
  p.num_samples = 1024;
  CudaContext ctx;
  for (int rep = 0; rep < 3; ++rep) pc::furthest_point_sample(ctx, view, LengthsView{}, p, dout);
  cudaDeviceSynchronize();
  using pc::kTraceSlots;
  using pc::kTraceSteps;
  std::vector<long long> tr(16 * kTraceSteps * kTraceSlots);
  cudaMemcpyFromSymbol(tr.data(), pc::g_fps_trace, tr.size() * sizeof(long long));
  constexpr int kPhases = 6;
  const char* names[kPhases] = {"test + fold (slowest warp)", "barrier after the slowest warp", "warp 0: reduce",
                                "warp 0: send", "wait for the cluster winner", "whole step (slowest block)"};
  std::vector<std::vector<double>> ph(kPhases);
  for (int s = 0; s + 1 < kTraceSteps; ++s) {
    double worst[kPhases] = {};
    for (int b = 0; b < 16; ++b) {
      const long long* t = &tr[static_cast<size_t>((b * kTraceSteps + s) * kTraceSlots)];
      const long long* next = t + kTraceSlots;
      long long fold = 0;
      for (int w = 1; w <= 32; ++w) fold = std::max(fold, t[w]);  // unwritten slots stay 0
      const double d[kPhases] = {double(fold - t[0]),    double(t[33] - fold),    double(t[36] - t[33]),
                                 double(t[34] - t[36]), double(t[35] - t[34]), double(next[0] - t[0])};
      for (int k = 0; k < kPhases; ++k) worst[k] = std::max(worst[k], d[k]);
    }
    for (int k = 0; k < kPhases; ++k) ph[static_cast<size_t>(k)].push_back(worst[k]);
  }
  for (int k = 0; k < kPhases; ++k) {
    auto v = ph[static_cast<size_t>(k)];
    std::sort(v.begin(), v.end());
    std::printf("%-34s median %7.0f  p90 %7.0f cycles\n", names[k], v[v.size() / 2], v[v.size() * 9 / 10]);
  }
  return 0;
}
