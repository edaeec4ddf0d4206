// CUDA voxelize against the CPU backend: every output equal (voxel ids, stable point order,
// voxel cells, clouds, counts, offsets) on random clouds in float and double, 1 to 5 coordinates,
// negative coordinates, start / end windows that drop points, NaN / inf points, batches with
// empty clouds, one voxel and one point per voxel, and the same errors (cell overflow, bad
// parameters) as the CPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda_util.hpp"
#include "oracle.hpp"
#include "pcops/error.hpp"
#include "pcops/voxelize.hpp"
#include "voxelize_run.hpp"

namespace {

using pcops_cuda_test::DeviceBuffer;
using pcops_cuda_test::StreamContext;

using Result = pcops_test::VoxelResult;
using pcops_test::voxelize_cpu;

template <class T>
Result run_cuda(const std::vector<T>& pts, int64_t D, const std::vector<T>& size, const T* start,
                const T* end, const std::vector<int64_t>* ptr) {
  const int64_t N = static_cast<int64_t>(pts.size()) / D;
  const int64_t B = ptr ? static_cast<int64_t>(ptr->size()) - 1 : 1;
  StreamContext sc;
  DeviceBuffer<T> dp(pts.empty() ? std::vector<T>(1, T(0)) : pts);
  DeviceBuffer<int64_t> did(std::vector<int64_t>(std::max<int64_t>(N, 1), -7));
  DeviceBuffer<int64_t> dperm(std::vector<int64_t>(std::max<int64_t>(N, 1), -7));
  DeviceBuffer<int64_t> coords, batch, counts, vptr;
  Result r;
  r.V = pcops::cuda::voxelize(
      sc.ctx, dp.data(), N, D, size.data(), start, end, ptr ? ptr->data() : nullptr, B, did.data(),
      dperm.data(), [&](int64_t V) {
        coords = DeviceBuffer<int64_t>(std::vector<int64_t>(std::max<int64_t>(V * D, 1), -7));
        batch = DeviceBuffer<int64_t>(std::vector<int64_t>(std::max<int64_t>(V, 1), -7));
        counts = DeviceBuffer<int64_t>(std::vector<int64_t>(std::max<int64_t>(V, 1), -7));
        vptr = DeviceBuffer<int64_t>(std::vector<int64_t>(V + 1, -7));
        return pcops::VoxelBuffers{coords.data(), batch.data(), counts.data(), vptr.data()};
      });
  auto cut = [](std::vector<int64_t> v, int64_t n) {
    v.resize(static_cast<size_t>(n));
    return v;
  };
  r.id = cut(did.download(), N);
  r.perm = cut(dperm.download(), N);
  r.coords = cut(coords.download(), r.V * D);
  r.batch = cut(batch.download(), r.V);
  r.counts = cut(counts.download(), r.V);
  r.ptr = cut(vptr.download(), r.V + 1);
  return r;
}

template <class T>
void expect_same(const std::vector<T>& pts, int64_t D, const std::vector<T>& size,
                 std::type_identity_t<const T*> start = nullptr, std::type_identity_t<const T*> end = nullptr,
                 const std::vector<int64_t>* ptr = nullptr, const std::string& what = "") {
  const Result want = voxelize_cpu<T>(pts, D, size, start, end, ptr);
  const Result got = run_cuda(pts, D, size, start, end, ptr);
  EXPECT_EQ(got.V, want.V) << what;
  EXPECT_EQ(got.id, want.id) << what;
  EXPECT_EQ(got.perm, want.perm) << what;
  EXPECT_EQ(got.coords, want.coords) << what;
  EXPECT_EQ(got.batch, want.batch) << what;
  EXPECT_EQ(got.counts, want.counts) << what;
  EXPECT_EQ(got.ptr, want.ptr) << what;
}

template <class T>
std::vector<T> uniform(std::mt19937& rng, int64_t n, int64_t D, double lo, double hi) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<T> v(static_cast<size_t>(n * D));
  for (T& x : v) x = static_cast<T>(u(rng));
  return v;
}

template <class T>
void random_clouds() {
  std::mt19937 rng(5);
  for (int64_t D : {1, 2, 3, 5}) {
    for (int64_t n : {0, 1, 2, 1000, 60000}) {
      for (double cell : {0.013, 0.2, 5.0}) {
        const std::string what =
            "D=" + std::to_string(D) + " n=" + std::to_string(n) + " cell=" + std::to_string(cell);
        const std::vector<T> pts = uniform<T>(rng, n, D, -2.0, 3.0);
        const std::vector<T> size(static_cast<size_t>(D), static_cast<T>(cell));
        expect_same(pts, D, size, nullptr, nullptr, nullptr, what);
        std::vector<T> start(static_cast<size_t>(D), T(-0.5)), end(static_cast<size_t>(D), T(1.25));
        expect_same(pts, D, size, start.data(), nullptr, nullptr, what + " start");
        expect_same(pts, D, size, start.data(), end.data(), nullptr, what + " start+end");
      }
    }
  }
}

TEST(CudaVoxelize, RandomCloudsFloat) { random_clouds<float>(); }
TEST(CudaVoxelize, RandomCloudsDouble) { random_clouds<double>(); }

TEST(CudaVoxelize, NonFiniteBatchesAndExtremes) {
  std::mt19937 rng(6);
  std::vector<float> pts = uniform<float>(rng, 20000, 3, -1.0, 1.0);
  pts[3] = std::nanf("");
  pts[100] = INFINITY;
  pts[5001] = -INFINITY;
  const std::vector<float> size{0.05f, 0.1f, 0.2f};
  expect_same(pts, 3, size, nullptr, nullptr, nullptr, "non-finite");
  // Batches, with empty clouds at the start, middle and end.
  const std::vector<int64_t> ptr{0, 0, 5000, 5000, 12000, 20000, 20000};
  expect_same(pts, 3, size, nullptr, nullptr, &ptr, "batches");
  // Every point in one voxel; every point in its own voxel (a tiny cell).
  expect_same(pts, 3, std::vector<float>{100.0f, 100.0f, 100.0f}, nullptr, nullptr, &ptr, "one voxel");
  expect_same(pts, 3, std::vector<float>{1e-6f, 1e-6f, 1e-6f}, nullptr, nullptr, nullptr, "point voxels");
  // Exact cell boundaries (multiples of the cell size, negative too).
  std::vector<double> lattice;
  for (int i = -50; i < 50; ++i)
    for (int j = -3; j < 3; ++j) lattice.push_back(i * 0.25), lattice.push_back(j * 0.25);
  expect_same(lattice, 2, std::vector<double>{0.25, 0.5}, nullptr, nullptr, nullptr, "lattice");
  // Everything dropped.
  const std::vector<float> far{5.0f, 5.0f, 5.0f, 6.0f, 6.0f, 6.0f};
  const std::vector<float> start{0.0f, 0.0f, 0.0f}, end{1.0f, 1.0f, 1.0f};
  expect_same(far, 3, size, start.data(), end.data(), nullptr, "all dropped");
}

// The packed sort key takes every field's bits: no bits (one voxel, no sort), a lone cloud bit
// (dropped points), 32-bit keys, 64-bit keys, wider than 64 bits (the per-dimension passes);
// long runs of equal cells, many tiny voxels, batches, and up to 16 coordinates (the register
// statistics of the wide kernel).
TEST(CudaVoxelize, KeyWidthsAndLongRuns) {
  std::mt19937 rng(7);
  const std::vector<double> unit = uniform<double>(rng, 30000, 3, 0.0, 1.0);
  const std::vector<double> big(3, 100.0);
  expect_same(unit, 3, big, nullptr, nullptr, nullptr, "one voxel, no bits");
  const std::vector<double> s0(3, 0.0), e0(3, 0.5);
  expect_same(unit, 3, big, s0.data(), e0.data(), nullptr, "one voxel and dropped points");
  // Half of the points on one cell, in runs and interleaved with the others.
  std::vector<float> runs = uniform<float>(rng, 60000, 3, 0.0, 1.0);
  for (size_t i = 0; i < runs.size() / 2; ++i) runs[i] = 0.5f;
  for (size_t i = runs.size() / 2; i < runs.size(); i += 9) runs[i] = 0.5f;
  const std::vector<int64_t> ptr{0, 10000, 10000, 45000, 60000};
  expect_same(runs, 3, std::vector<float>(3, 0.005f), nullptr, nullptr, nullptr, "long runs");
  expect_same(runs, 3, std::vector<float>(3, 0.005f), nullptr, nullptr, &ptr, "long runs, batches");
  expect_same(runs, 3, std::vector<float>(3, 1e-5f), nullptr, nullptr, &ptr, "tiny voxels, batches");
  // 18 bits per cell (64-bit keys), then 31 (93 bits: the general path).
  const std::vector<int64_t> ptr20{0, 5000, 5000, 15000, 20000};
  const std::vector<double> wide = uniform<double>(rng, 20000, 3, -1000.0, 1000.0);
  expect_same(wide, 3, std::vector<double>(3, 0.01), nullptr, nullptr, &ptr20, "64-bit keys");
  const std::vector<double> wider = uniform<double>(rng, 20000, 3, -1e6, 1e6);
  expect_same(wider, 3, std::vector<double>(3, 1e-3), nullptr, nullptr, &ptr20, "general path");
  const std::vector<double> ws(3, -5e5), we(3, 5e5);
  expect_same(wider, 3, std::vector<double>(3, 1e-3), ws.data(), we.data(), nullptr, "general path, dropped");
  for (int64_t D : {6, 16}) {
    const std::vector<float> many = uniform<float>(rng, 20000, D, -2.0, 3.0);
    const std::string what = "D=" + std::to_string(D);
    expect_same(many, D, std::vector<float>(static_cast<size_t>(D), 1.0f), nullptr, nullptr, &ptr20, what);
    expect_same(many, D, std::vector<float>(static_cast<size_t>(D), 0.05f), nullptr, nullptr, nullptr, what + " fine");
  }
}

TEST(CudaVoxelize, ErrorsAsCpu) {
  StreamContext sc;
  const std::vector<float> pts{1e30f, 0.0f, 0.0f, 1.0f};
  DeviceBuffer<float> dp(pts);
  DeviceBuffer<int64_t> a(2), b(2);
  const std::vector<float> size{1e-20f, 1.0f};
  auto none = [](int64_t) { return pcops::VoxelBuffers{}; };
  pcops_test::expect_error(
      pcops::ErrorKind::Value,
      [&] {
        pcops::cuda::voxelize(sc.ctx, dp.data(), 2, 2, size.data(), nullptr, nullptr, nullptr, 1, a.data(),
                              b.data(), none);
      },
      "cell overflow");
  const std::vector<float> bad{0.0f, 1.0f};
  pcops_test::expect_error(
      pcops::ErrorKind::Value,
      [&] {
        pcops::cuda::voxelize(sc.ctx, dp.data(), 2, 2, bad.data(), nullptr, nullptr, nullptr, 1, a.data(),
                              b.data(), none);
      },
      "zero voxel size");
  const std::vector<int64_t> ptr{0, 3};
  pcops_test::expect_error(
      pcops::ErrorKind::Value,
      [&] {
        pcops::cuda::voxelize(sc.ctx, dp.data(), 2, 2, std::vector<float>{1.0f, 1.0f}.data(), nullptr,
                              nullptr, ptr.data(), 1, a.data(), b.data(), none);
      },
      "ptr past the points");
  std::vector<float> wide(17, 1.0f);
  DeviceBuffer<float> dw(wide);
  pcops_test::expect_error(
      pcops::ErrorKind::Value,
      [&] {
        pcops::cuda::voxelize(sc.ctx, dw.data(), 1, 17, wide.data(), nullptr, nullptr, nullptr, 1, a.data(),
                              b.data(), none);
      },
      "17 coordinates");
}

}  // namespace
