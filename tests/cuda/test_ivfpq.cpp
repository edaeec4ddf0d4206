// CUDA IVF-PQ search against the CPU index (the oracle), bitwise: distances and labels for L2 and
// inner product, with and without residuals, k past the candidate count (padding), nprobe up to
// nlist, empty lists, duplicate vectors (id ties), look-up tables beyond 48 KiB of shared memory
// (M = 64, 128) and query batches larger than one grid pass. Every path of the search is covered:
// the warp selection of the probed lists (nprobe <= 256) and the sorted lists beyond, the fused
// scan + top-k (k <= 1024, every top-k buffer size) and the sorted-candidates path (k > 1024, or
// a look-up table larger than shared memory), word-wise (M = 8, 16, 32, 64) and byte-wise code
// reads, many exact ties at the k-th key, ties between coarse distances, and a single query.
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

void expect_bitwise(const IvfPqIndex& index, const std::vector<float>& q, int64_t k, int64_t nprobe,
                    bool half_tables = false) {
  const int64_t dim = index.params().dim, nq = static_cast<int64_t>(q.size()) / dim;
  std::vector<float> cd(static_cast<size_t>(nq * k));
  std::vector<int64_t> cl(static_cast<size_t>(nq * k));
  pcops::CpuContext cpu;
  index.search(cpu, q.data(), nq, k, nprobe, cd.data(), cl.data(), false, half_tables);
  DeviceIndex dev(index);
  DeviceBuffer<float> dq(q), dd(static_cast<size_t>(nq * k));
  DeviceBuffer<int64_t> dl(static_cast<size_t>(nq * k));
  dd.fill(-12345.0f);
  dl.fill(-7);
  StreamContext s;
  pcops::cuda::ivfpq_search(s.ctx, dev.view, dq.data(), nq, k, nprobe, dd.data(), dl.data(), half_tables);
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
  const auto sq = clustered(30, 16, 2, 10);
  expect_bitwise(sparse, sq, 60, 64);
  expect_bitwise(sparse, sq, 5, 3);
  expect_bitwise(sparse, sq, 1025, 64);
}

// Many exact (key, id) and key ties at the k-th key: 600 copies of each of three stored vectors
// (one code, one key) under repeated ids, distinct ids and ids repeating in pairs; the queries are
// the copied vectors themselves and others.
TEST_P(CudaIvfPq, ManyTiesAtTheKthKey) {
  const auto [metric, by_residual] = GetParam();
  IvfPqIndex index = build(IvfPqParams{16, 8, 4, 8, metric, by_residual}, 1000, 25);
  const auto x = clustered(1000, 16, 10, 25);
  pcops::CpuContext cpu;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<float> copies;
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < 600; ++i) {
      copies.insert(copies.end(), x.begin() + rep * 16, x.begin() + rep * 16 + 16);
      ids.push_back(rep == 0 ? i % 7 : (rep == 1 ? 5000 + (599 - i) : 7000 + i % 300));
    }
    index.add(cpu, copies.data(), 600, ids.data());
  }
  std::vector<float> q(x.begin(), x.begin() + 3 * 16);
  const auto more = clustered(10, 16, 10, 26);
  q.insert(q.end(), more.begin(), more.end());
  for (int64_t nprobe : {1, 3, 8})
    for (int64_t k : {1, 5, 10, 64, 65, 100, 600, 1024, 1025, 2000}) expect_bitwise(index, q, k, nprobe);
}

// k around the fused top-k's buffer sizes (64, 128, 256, 512, 1024 pairs; 1024 = its limit),
// k = 1025 (sorted candidates) and k past the candidate count.
TEST(CudaIvfPq, TopKAroundSelectionLimits) {
  for (IvfPqMetric metric : {IvfPqMetric::L2, IvfPqMetric::InnerProduct}) {
    const IvfPqIndex index = build(IvfPqParams{16, 16, 4, 8, metric, true}, 3000, 21);
    const auto q = clustered(40, 16, 10, 22);
    for (int64_t nprobe : {1, 4, 16})
      for (int64_t k : {1, 10, 32, 33, 64, 65, 128, 129, 256, 257, 512, 513, 1023, 1024, 1025, 4000})
        expect_bitwise(index, q, k, nprobe);
  }
}

// nprobe around the warp selection's limit (256: selected; 257 and nlist: sorted), with both
// the fused top-k and the sorted candidates.
TEST(CudaIvfPq, NprobeAroundSelectionLimit) {
  for (IvfPqMetric metric : {IvfPqMetric::L2, IvfPqMetric::InnerProduct}) {
    const IvfPqIndex index = build(IvfPqParams{8, 300, 2, 8, metric, true}, 3000, 23);
    const auto q = clustered(20, 8, 10, 24);
    for (int64_t nprobe : {1, 31, 32, 33, 64, 65, 255, 256, 257, 299, 300})
      for (int64_t k : {10, 1025}) expect_bitwise(index, q, k, nprobe);
  }
}

// Every centroid equally far (L2) or equally aligned (inner product) from the query: the probed
// lists are the smallest list numbers among the tied ones.
TEST(CudaIvfPq, CoarseTiesByListNumber) {
  for (IvfPqMetric metric : {IvfPqMetric::L2, IvfPqMetric::InnerProduct})
    for (bool by_residual : {false, true}) {
      IvfPqIndex index(IvfPqParams{4, 8, 2, 8, metric, by_residual});
      std::vector<float> centroids(8 * 4, 0.0f);
      for (int64_t l = 0; l < 8; ++l) centroids[static_cast<size_t>(l * 4 + l / 2)] = l % 2 ? -1.0f : 1.0f;
      std::mt19937 rng(31);
      std::uniform_real_distribution<float> u(-2.0f, 2.0f);
      std::vector<float> codebooks(2 * 256 * 2);
      for (float& v : codebooks) v = u(rng);
      index.set_quantizers(centroids.data(), codebooks.data());
      std::normal_distribution<float> g(0.0f, 0.1f);
      std::vector<float> x;
      for (int64_t i = 0; i < 240; ++i)
        for (int64_t d = 0; d < 4; ++d) x.push_back(2.0f * centroids[static_cast<size_t>((i % 8) * 4 + d)] + g(rng));
      pcops::CpuContext cpu;
      index.add(cpu, x.data(), 240);
      const std::vector<float> q{0.0f, 0.0f, 0.0f, 0.0f, 0.5f, 0.5f, 0.5f, 0.5f, -0.5f, 0.5f, -0.5f, 0.5f};
      for (int64_t nprobe : {1, 2, 3, 5, 8})
        for (int64_t k : {5, 50, 1025}) expect_bitwise(index, q, k, nprobe);
    }
}

// One query, and the code widths: word-wise reads (M = 8, 16, 32) and byte-wise ones (M = 3 with
// 3-float sub-vectors, M = 12).
TEST(CudaIvfPq, SingleQueryAndCodeWidths) {
  struct Shape {
    int64_t dim, M;
  };
  for (const Shape s : {Shape{24, 8}, Shape{32, 16}, Shape{64, 32}, Shape{9, 3}, Shape{12, 12}})
    for (IvfPqMetric metric : {IvfPqMetric::L2, IvfPqMetric::InnerProduct}) {
      const IvfPqIndex index = build(IvfPqParams{s.dim, 8, s.M, 8, metric, true}, 800, 27 + static_cast<uint32_t>(s.dim));
      const auto one = clustered(1, s.dim, 10, 28);
      for (int64_t nprobe : {1, 8})
        for (int64_t k : {1, 10, 2000}) expect_bitwise(index, one, k, nprobe);
      expect_bitwise(index, clustered(33, s.dim, 10, 29), 10, 3);
    }
}

// Look-up tables around the shared-memory limit: M = 128 with k = 1024 still runs fused (128 KiB
// table + 48 KiB of top-k buffers); M = 256 (256 KiB) runs on the sorted path with tables in
// global memory.
TEST(CudaIvfPq, TablesAroundTheSharedMemoryLimit) {
  const IvfPqIndex m128 = build(IvfPqParams{256, 4, 128}, 400, 7);
  const auto q = clustered(5, 256, 10, 8);
  for (int64_t k : {10, 1024, 1025}) expect_bitwise(m128, q, k, 2);
  const IvfPqIndex m256 = build(IvfPqParams{256, 4, 256}, 400, 33);
  for (int64_t k : {10, 1024}) expect_bitwise(m256, q, k, 3);
}

// Thousands of candidates per query: every warp's top-k merges many times.
TEST(CudaIvfPq, ManyCandidatesPerQuery) {
  for (IvfPqMetric metric : {IvfPqMetric::L2, IvfPqMetric::InnerProduct}) {
    const IvfPqIndex index = build(IvfPqParams{16, 8, 8, 8, metric, true}, 20000, 35);
    const auto q = clustered(50, 16, 10, 36);
    for (int64_t k : {10, 100, 1000}) expect_bitwise(index, q, k, 8);
  }
}

TEST(CudaIvfPq, ManyQueriesRunInPasses) {
  const IvfPqIndex index = build(IvfPqParams{8, 4, 2}, 500, 11);
  expect_bitwise(index, clustered(70000, 8, 10, 12), 3, 2);
}

}  // namespace

namespace {

// cuda::ivfpq_encode against IvfPqIndex::encode: lists and codes equal, element by element.
void expect_same_encoding(const IvfPqIndex& index, const std::vector<float>& x) {
  const IvfPqParams& p = index.params();
  const int64_t n = static_cast<int64_t>(x.size()) / p.dim;
  std::vector<int64_t> lists(static_cast<size_t>(n));
  std::vector<uint8_t> codes(static_cast<size_t>(n * p.M));
  pcops::CpuContext cpu;
  index.encode(cpu, x.data(), n, lists.data(), codes.data());
  DeviceBuffer<float> dx(x), dc(index.centroids()), dcb(index.codebooks());
  DeviceBuffer<int64_t> dl(static_cast<size_t>(std::max<int64_t>(n, 1)));
  DeviceBuffer<uint8_t> dcodes(static_cast<size_t>(std::max<int64_t>(n * p.M, 1)));
  dl.fill(-3);
  StreamContext s;
  pcops::cuda::ivfpq_encode(s.ctx, p, dc.data(), dcb.data(), dx.data(), n, dl.data(), dcodes.data());
  const auto gl = dl.download();
  const auto gc = dcodes.download();
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(gl[static_cast<size_t>(i)], lists[static_cast<size_t>(i)]) << "vector " << i;
    for (int64_t m = 0; m < p.M; ++m)
      ASSERT_EQ(gc[static_cast<size_t>(i * p.M + m)], codes[static_cast<size_t>(i * p.M + m)])
          << "vector " << i << ", sub-quantizer " << m;
  }
}

}  // namespace

// Both metrics, with and without residuals, several shapes (M = 1 .. dim), vectors equal to
// centroids and codewords (zero distances), and duplicated centroids (coarse ties go to the
// smaller list).
TEST(CudaIvfPq, EncodeEqualsCpu) {
  struct Shape {
    int64_t dim, nlist, M;
  };
  for (const Shape s : {Shape{16, 8, 8}, Shape{32, 40, 16}, Shape{9, 5, 3}, Shape{12, 300, 12}, Shape{8, 4, 1}})
    for (IvfPqMetric metric : {IvfPqMetric::L2, IvfPqMetric::InnerProduct})
      for (bool residual : {true, false}) {
        const IvfPqParams p{s.dim, s.nlist, s.M, 8, metric, residual};
        const IvfPqIndex index = build(p, std::max<int64_t>(600, s.nlist), 41 + static_cast<uint32_t>(s.dim));
        auto x = clustered(777, s.dim, 10, 42);
        const std::vector<float>& c = index.centroids();
        x.insert(x.end(), c.begin(), c.begin() + std::min<int64_t>(3, s.nlist) * s.dim);  // on a centroid
        expect_same_encoding(index, x);
      }
  // Duplicated centroids: every vector ties between lists 0 and 2 (and 1 and 3).
  const IvfPqIndex base = build(IvfPqParams{8, 4, 4}, 600, 43);
  std::vector<float> c = base.centroids();
  std::copy(c.begin(), c.begin() + 16, c.begin() + 16);
  IvfPqIndex dup(IvfPqParams{8, 4, 4});
  dup.set_quantizers(c.data(), base.codebooks().data());
  expect_same_encoding(dup, clustered(500, 8, 10, 44));
  IvfPqIndex dup_ip(IvfPqParams{8, 4, 4, 8, IvfPqMetric::InnerProduct, true});
  dup_ip.set_quantizers(c.data(), base.codebooks().data());
  expect_same_encoding(dup_ip, clustered(500, 8, 10, 45));
}

// More rows than one pass of coarse distances (2^26 / nlist rows), and no rows at all.
TEST(CudaIvfPq, EncodeInPasses) {
  const IvfPqIndex index = build(IvfPqParams{8, 4096, 4}, 4096, 46);
  expect_same_encoding(index, clustered(16384 + 1000, 8, 10, 47));
  expect_same_encoding(index, {});
}

// Training with cuda::ivfpq_assign as the assigner gives the CPU training's quantizers bit for
// bit (both metrics, with and without residuals; duplicated points make empty clusters).
TEST(CudaIvfPq, TrainWithGpuAssignmentsEqualsCpu) {
  StreamContext s;
  const IvfPqIndex::AssignFn gpu = [&s](const float* data, int64_t n, int64_t d, const float* cent, int64_t k,
                                         bool ip, int64_t* out) {
    DeviceBuffer<float> dd(std::vector<float>(data, data + n * d)), dc(std::vector<float>(cent, cent + k * d));
    DeviceBuffer<int64_t> da(static_cast<size_t>(n));
    pcops::cuda::ivfpq_assign(s.ctx, dd.data(), n, d, dc.data(), k, ip, da.data());
    const auto host = da.download();
    std::copy(host.begin(), host.end(), out);
  };
  auto x = clustered(3000, 16, 10, 61);
  for (int i = 0; i < 400; ++i) std::copy(x.begin(), x.begin() + 16, x.begin() + 16 * (1000 + i));
  for (IvfPqMetric metric : {IvfPqMetric::L2, IvfPqMetric::InnerProduct})
    for (bool residual : {true, false}) {
      const IvfPqParams p{16, 40, 8, 8, metric, residual};
      pcops::IvfPqTrainParams tp;
      tp.niter = 6;
      pcops::CpuContext cpu;
      cpu.seed = 62;
      IvfPqIndex a(p), b(p);
      a.train(cpu, x.data(), 3000, tp);
      b.train(cpu, x.data(), 3000, tp, gpu);
      EXPECT_EQ(a.centroids(), b.centroids());
      EXPECT_EQ(a.codebooks(), b.codebooks());
    }
}

// Half tables: the fused kernel's float16 tables (word and byte code reads, every top-k buffer
// size) and the general path's rounded float tables give the CPU's half-table bits; M = 256 fits
// the fused kernel only with half tables (128 KiB instead of 256 KiB).
TEST(CudaIvfPq, HalfTablesEqualCpu) {
  for (IvfPqMetric metric : {IvfPqMetric::L2, IvfPqMetric::InnerProduct})
    for (bool residual : {true, false}) {
      const IvfPqIndex index = build(IvfPqParams{32, 12, 16, 8, metric, residual}, 2500, 71);
      const auto q = clustered(40, 32, 10, 72);
      for (int64_t k : {1, 10, 300, 1025}) expect_bitwise(index, q, k, 5, true);
      const IvfPqIndex bytes = build(IvfPqParams{36, 6, 12, 8, metric, residual}, 900, 73);
      expect_bitwise(bytes, clustered(20, 36, 10, 74), 20, 6, true);
    }
  const IvfPqIndex m256 = build(IvfPqParams{256, 4, 256}, 400, 75);
  const auto q = clustered(5, 256, 10, 76);
  for (int64_t k : {10, 1025}) expect_bitwise(m256, q, k, 3, true);
}
