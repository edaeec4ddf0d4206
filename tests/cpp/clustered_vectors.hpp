#pragma once
// Clustered float vectors for the IVF-PQ tests (CPU and CUDA): `clusters` Gaussian blobs
// (sigma 0.5) around centres in [0, 10)^dim, deterministic for a seed.
#include <cstdint>
#include <random>
#include <vector>

namespace pcops_test {

inline std::vector<float> clustered(int64_t n, int64_t dim, int64_t clusters, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 10.0f);
  std::normal_distribution<float> g(0.0f, 0.5f);
  std::vector<float> centres(static_cast<size_t>(clusters * dim));
  for (auto& c : centres) c = u(rng);
  std::vector<float> x(static_cast<size_t>(n * dim));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = static_cast<int64_t>(rng() % static_cast<uint32_t>(clusters));
    for (int64_t d = 0; d < dim; ++d)
      x[static_cast<size_t>(i * dim + d)] = centres[static_cast<size_t>(c * dim + d)] + g(rng);
  }
  return x;
}

}  // namespace pcops_test
