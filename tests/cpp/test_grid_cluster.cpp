// grid_cluster against a direct evaluation of the torch_cluster formula (double brute force,
// trunc toward zero, mixed radix with dimension 0 fastest), float and double.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "pcops/error.hpp"
#include "pcops/grid_cluster.hpp"

namespace {

TEST(GridCluster, UpstreamExample) {
  const std::vector<float> pos{0, 0, 11, 9, 2, 8, 2, 2, 8, 3};
  const std::vector<float> size{5, 5}, end{19, 19};
  std::vector<int64_t> out(5, -7);
  pcops::cpu::grid_cluster({}, pos.data(), 5, 2, size.data(), nullptr, nullptr, out.data());
  EXPECT_EQ(out, (std::vector<int64_t>{0, 5, 3, 0, 1}));
  pcops::cpu::grid_cluster({}, pos.data(), 5, 2, size.data(), nullptr, end.data(), out.data());
  EXPECT_EQ(out, (std::vector<int64_t>{0, 6, 4, 0, 1}));
}

template <class T>
void check_random(int64_t N, int64_t D, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-5.0, 5.0), us(0.1, 2.0);
  std::vector<T> pos(static_cast<size_t>(N * D)), size(D), start(D), end(D);
  for (auto& p : pos) p = static_cast<T>(u(rng));
  for (int64_t d = 0; d < D; ++d) {
    size[d] = static_cast<T>(us(rng));
    start[d] = static_cast<T>(-3.0);  // some points lie below start: trunc toward zero
    end[d] = static_cast<T>(4.0);
  }
  std::vector<int64_t> out(static_cast<size_t>(N), -7);
  pcops::cpu::grid_cluster({}, pos.data(), N, D, size.data(), start.data(), end.data(), out.data());
  std::vector<int64_t> stride(D);
  int64_t acc = 1;
  for (int64_t d = 0; d < D; ++d) {
    stride[d] = acc;
    acc *= static_cast<int64_t>(std::trunc(static_cast<T>(end[d] - start[d]) / size[d])) + 1;
  }
  for (int64_t n = 0; n < N; ++n) {
    int64_t id = 0;
    for (int64_t d = 0; d < D; ++d)
      id += static_cast<int64_t>(std::trunc(static_cast<T>(pos[n * D + d] - start[d]) / size[d])) * stride[d];
    ASSERT_EQ(out[n], id) << "n=" << n;
  }
}

TEST(GridCluster, RandomMatchesFormula) {
  check_random<float>(20000, 3, 1);
  check_random<double>(5000, 4, 2);
  check_random<float>(100, 1, 3);
}

TEST(GridCluster, NaNAndEmpty) {
  const std::vector<float> pos{NAN, 0.0f};
  const std::vector<float> size{1.0f}, start{0.0f}, end{1.0f};
  std::vector<int64_t> out(2, -7);
  pcops::cpu::grid_cluster({}, pos.data(), 2, 1, size.data(), start.data(), end.data(), out.data());
  EXPECT_EQ(out[0], std::numeric_limits<int64_t>::min());
  EXPECT_EQ(out[1], 0);
  pcops::cpu::grid_cluster({}, pos.data(), 0, 1, size.data(), nullptr, nullptr, out.data());
  EXPECT_THROW(pcops::cpu::grid_cluster({}, pos.data(), 2, 0, size.data(), nullptr, nullptr, out.data()),
               pcops::Error);
}

}  // namespace
