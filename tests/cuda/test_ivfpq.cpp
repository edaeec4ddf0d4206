// CUDA IVF-PQ search against the CPU index (the oracle), bitwise: distances and labels for L2 and
// inner product, with and without residuals, k past the candidate count (padding), nprobe up to
// nlist, empty lists, duplicate vectors (id ties), look-up tables beyond 48 KiB of shared memory
// (M = 64, 128) and query batches larger than one grid pass.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "cuda_util.hpp"
#include "clustered_vectors.hpp"
#include "pcops/ivfpq.hpp"

namespace {

using pcops::IvfPqIndex;
using pcops::IvfPqMetric;
using pcops::IvfPqParams;
using pcops_cuda_test::DeviceBuffer;
using pcops_cuda_test::StreamContext;

using pcops_test::clustered;

// The index's lists concatenated (CSR) on the device.
struct DeviceIndex {
  DeviceBuffer<float> centroids, codebooks;
  DeviceBuffer<int64_t> offsets, ids;
  DeviceBuffer<uint8_t> codes;
  std::vector<int64_t> sizes;
  pcops::IvfPqDeviceView view;
  explicit DeviceIndex(const IvfPqIndex& index) : centroids(index.centroids()), codebooks(index.codebooks()) {
    const int64_t nlist = index.params().nlist;
    std::vector<int64_t> off{0}, all_ids;
    std::vector<uint8_t> all_codes;
    for (int64_t l = 0; l < nlist; ++l) {
      sizes.push_back(index.list_size(l));
      off.push_back(off.back() + index.list_size(l));
      all_ids.insert(all_ids.end(), index.list_ids(l).begin(), index.list_ids(l).end());
      all_codes.insert(all_codes.end(), index.list_codes(l).begin(), index.list_codes(l).end());
    }
    offsets = DeviceBuffer<int64_t>(off);
    ids = DeviceBuffer<int64_t>(all_ids);
    codes = DeviceBuffer<uint8_t>(all_codes);
    view.params = index.params();
    view.centroids = centroids.data();
    view.codebooks = codebooks.data();
    view.list_offsets = offsets.data();
    view.ids = ids.data();
    view.codes = codes.data();
    view.list_sizes_host = sizes.data();
  }
};

void expect_bitwise(const IvfPqIndex& index, const std::vector<float>& q, int64_t k, int64_t nprobe) {
  const int64_t dim = index.params().dim, nq = static_cast<int64_t>(q.size()) / dim;
  std::vector<float> cd(static_cast<size_t>(nq * k));
  std::vector<int64_t> cl(static_cast<size_t>(nq * k));
  pcops::CpuContext cpu;
  index.search(cpu, q.data(), nq, k, nprobe, cd.data(), cl.data());
  DeviceIndex dev(index);
  DeviceBuffer<float> dq(q), dd(static_cast<size_t>(nq * k));
  DeviceBuffer<int64_t> dl(static_cast<size_t>(nq * k));
  dd.fill(-12345.0f);
  dl.fill(-7);
  StreamContext s;
  pcops::cuda::ivfpq_search(s.ctx, dev.view, dq.data(), nq, k, nprobe, dd.data(), dl.data());
  const auto gd = dd.download();
  const auto gl = dl.download();
  for (size_t i = 0; i < cd.size(); ++i) {
    ASSERT_EQ(gl[i], cl[i]) << "slot " << i << " (k " << k << ", nprobe " << nprobe << ")";
    uint32_t a, b;
    std::memcpy(&a, &gd[i], 4);
    std::memcpy(&b, &cd[i], 4);
    ASSERT_EQ(a, b) << "slot " << i << ": " << gd[i] << " vs " << cd[i];
  }
}

IvfPqIndex build(IvfPqParams p, int64_t n, uint32_t seed) {
  const auto x = clustered(n, p.dim, 10, seed);
  IvfPqIndex index(p);
  pcops::CpuContext cpu;
  cpu.seed = seed;
  pcops::IvfPqTrainParams tp;
  tp.niter = 4;
  index.train(cpu, x.data(), n, tp);
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = (i * 7919) % n;  // shuffled ids
  index.add(cpu, x.data(), n, ids.data());
  // Duplicates of the first vectors under new ids: exact distance ties.
  index.add(cpu, x.data(), 20);
  return index;
}

class CudaIvfPq : public ::testing::TestWithParam<std::tuple<IvfPqMetric, bool>> {};

TEST_P(CudaIvfPq, SearchBitwiseEqualToCpu) {
  const auto [metric, by_residual] = GetParam();
  const IvfPqIndex index = build(IvfPqParams{32, 24, 8, 8, metric, by_residual}, 2000, 3);
  const auto q = clustered(70, 32, 10, 4);
  for (int64_t nprobe : {1, 5, 24})
    for (int64_t k : {1, 10, 300, 3000}) expect_bitwise(index, q, k, nprobe);
}

INSTANTIATE_TEST_SUITE_P(Metrics, CudaIvfPq,
                         ::testing::Combine(::testing::Values(IvfPqMetric::L2, IvfPqMetric::InnerProduct),
                                            ::testing::Bool()));

TEST(CudaIvfPq, LargeTablesAndEmptyLists) {
  // M = 64: a 64 KiB table (opt-in shared memory); M = 128 with dim 256: 128 KiB.
  expect_bitwise(build(IvfPqParams{128, 8, 64}, 600, 5), clustered(9, 128, 10, 6), 20, 3);
  expect_bitwise(build(IvfPqParams{256, 4, 128}, 400, 7), clustered(5, 256, 10, 8), 20, 2);
  // More lists than clusters: some lists stay empty.
  IvfPqIndex sparse(IvfPqParams{16, 64, 4});
  const auto x = clustered(300, 16, 2, 9);
  pcops::CpuContext cpu;
  pcops::IvfPqTrainParams tp;
  tp.niter = 2;
  sparse.train(cpu, x.data(), 300, tp);
  sparse.add(cpu, x.data(), 50);
  expect_bitwise(sparse, clustered(30, 16, 2, 10), 60, 64);
}

TEST(CudaIvfPq, ManyQueriesRunInPasses) {
  const IvfPqIndex index = build(IvfPqParams{8, 4, 2}, 500, 11);
  expect_bitwise(index, clustered(70000, 8, 10, 12), 3, 2);
}

}  // namespace
