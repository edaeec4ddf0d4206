// IVF-PQ index against a serial brute-force evaluation of its contract (coarse assignment,
// encoding, look-up-table distances, (distance, id) order), bitwise; training determinism,
// save/load, remove/reset, padding, ties and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <sstream>
#include <tuple>
#include <vector>

#include "cpu/ivfpq_isa.hpp"
#include "oracle.hpp"
#include "pcops/error.hpp"
#include "clustered_vectors.hpp"
#include "pcops/ivfpq.hpp"

namespace {

using pcops::IvfPqIndex;
using pcops::IvfPqMetric;
using pcops::IvfPqParams;

using pcops_test::clustered;

float l2(const float* a, const float* b, int64_t d) {
  float t = a[0] - b[0];
  float s = t * t;
  for (int64_t i = 1; i < d; ++i) {
    t = a[i] - b[i];
    s = s + t * t;
  }
  return s;
}
float ip(const float* a, const float* b, int64_t d) {
  float s = a[0] * b[0];
  for (int64_t i = 1; i < d; ++i) s = s + a[i] * b[i];
  return s;
}

pcops::CpuContext ctx(int threads = 0, uint64_t seed = 7) {
  pcops::CpuContext c;
  c.num_threads = threads;
  c.seed = seed;
  return c;
}

struct Brute {
  const IvfPqIndex& index;
  int64_t assign(const float* x) const {
    const auto& p = index.params();
    int64_t best = 0;
    float bv = 0;
    for (int64_t l = 0; l < p.nlist; ++l) {
      const float* c = index.centroids().data() + l * p.dim;
      const float v = p.metric == IvfPqMetric::L2 ? l2(x, c, p.dim) : ip(x, c, p.dim);
      if (l == 0 || (p.metric == IvfPqMetric::L2 ? v < bv : v > bv)) {
        bv = v;
        best = l;
      }
    }
    return best;
  }
  std::vector<uint8_t> encode(const float* x, int64_t list) const {
    const auto& p = index.params();
    const int64_t ds = index.dsub();
    std::vector<float> r(x, x + p.dim);
    if (p.by_residual)
      for (int64_t i = 0; i < p.dim; ++i) r[static_cast<size_t>(i)] = x[i] - index.centroids()[static_cast<size_t>(list * p.dim + i)];
    std::vector<uint8_t> code(static_cast<size_t>(p.M));
    for (int64_t m = 0; m < p.M; ++m) {
      int64_t best = 0;
      float bv = 0;
      for (int64_t j = 0; j < 256; ++j) {
        const float v = l2(r.data() + m * ds, index.codebooks().data() + (m * 256 + j) * ds, ds);
        if (j == 0 || v < bv) {
          bv = v;
          best = j;
        }
      }
      code[static_cast<size_t>(m)] = static_cast<uint8_t>(best);
    }
    return code;
  }
  // Every candidate of the probed lists, sorted by the contract.
  std::vector<std::pair<float, int64_t>> search(const float* q, int64_t nprobe) const {
    const auto& p = index.params();
    const bool isip = p.metric == IvfPqMetric::InnerProduct;
    const int64_t ds = index.dsub();
    std::vector<std::pair<float, int64_t>> lists;
    for (int64_t l = 0; l < p.nlist; ++l) {
      const float* c = index.centroids().data() + l * p.dim;
      lists.push_back({isip ? -ip(q, c, p.dim) : l2(q, c, p.dim), l});
    }
    std::sort(lists.begin(), lists.end());
    std::vector<std::pair<float, int64_t>> out;
    for (int64_t r = 0; r < nprobe; ++r) {
      const int64_t l = lists[static_cast<size_t>(r)].second;
      const float* c = index.centroids().data() + l * p.dim;
      const auto& ids = index.list_ids(l);
      const auto& codes = index.list_codes(l);
      for (size_t i = 0; i < ids.size(); ++i) {
        const float d0 = isip && p.by_residual ? ip(q, c, p.dim) : 0.0f;
        float d = 0.0f;
        for (int64_t m = 0; m < p.M; ++m) {
          const float* cw = index.codebooks().data() + (m * 256 + codes[i * static_cast<size_t>(p.M) + static_cast<size_t>(m)]) * ds;
          float t;
          if (isip) {
            t = ip(q + m * ds, cw, ds);
          } else {
            std::vector<float> r(static_cast<size_t>(ds));
            for (int64_t j = 0; j < ds; ++j) r[static_cast<size_t>(j)] = p.by_residual ? q[m * ds + j] - c[m * ds + j] : q[m * ds + j];
            t = l2(r.data(), cw, ds);
          }
          d = m == 0 ? t : d + t;
        }
        d = d0 + d;
        out.push_back({isip ? -d : d, ids[i]});
      }
    }
    std::sort(out.begin(), out.end());
    if (isip)
      for (auto& e : out) e.first = -e.first;
    return out;
  }
};

void expect_search_matches_brute(const IvfPqIndex& index, const std::vector<float>& q, int64_t k, int64_t nprobe) {
  const int64_t dim = index.params().dim, nq = static_cast<int64_t>(q.size()) / dim;
  std::vector<float> dist(static_cast<size_t>(nq * k), 12345.0f);
  std::vector<int64_t> lab(static_cast<size_t>(nq * k), -7);
  index.search(ctx(), q.data(), nq, k, nprobe, dist.data(), lab.data());
  const bool isip = index.params().metric == IvfPqMetric::InnerProduct;
  Brute b{index};
  for (int64_t i = 0; i < nq; ++i) {
    const auto all = b.search(q.data() + i * dim, nprobe);
    for (int64_t j = 0; j < k; ++j) {
      const size_t s = static_cast<size_t>(i * k + j);
      if (j < static_cast<int64_t>(all.size())) {
        ASSERT_EQ(lab[s], all[static_cast<size_t>(j)].second) << "query " << i << " rank " << j;
        ASSERT_EQ(dist[s], all[static_cast<size_t>(j)].first) << "query " << i << " rank " << j;
      } else {
        ASSERT_EQ(lab[s], -1);
        ASSERT_EQ(dist[s], isip ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity());
      }
    }
  }
}

// Distances and labels of a search, concatenated.
std::pair<std::vector<float>, std::vector<int64_t>> search_bits(const IvfPqIndex& index, const std::vector<float>& q,
                                                                int64_t k, int64_t nprobe, bool pre, bool half = false) {
  const int64_t nq = static_cast<int64_t>(q.size()) / index.params().dim;
  std::vector<float> d(static_cast<size_t>(nq * k));
  std::vector<int64_t> l(static_cast<size_t>(nq * k));
  index.search(ctx(), q.data(), nq, k, nprobe, d.data(), l.data(), pre, half);
  return {d, l};
}

// The precomputed-table searches (no brute force of their own) of the automatic kernels against
// the forced AVX2 ones, whose scan has no bound: the same bits.
void expect_precomputed_unbounded(const IvfPqIndex& index, const std::vector<float>& q, int64_t k, int64_t nprobe) {
  namespace isa = pcops::cpu::ivfpq_detail;
  const auto a = search_bits(index, q, k, nprobe, true);
  const bool before = isa::force_avx2(true);
  const auto b = search_bits(index, q, k, nprobe, true);
  isa::force_avx2(before);
  ASSERT_TRUE(a == b) << "k " << k << " nprobe " << nprobe;
}

IvfPqIndex trained(IvfPqParams p, const std::vector<float>& x, uint64_t seed = 7) {
  IvfPqIndex index(p);
  pcops::IvfPqTrainParams tp;
  tp.niter = 8;
  index.train(ctx(0, seed), x.data(), static_cast<int64_t>(x.size()) / p.dim, tp);
  return index;
}

class IvfPqVariants : public ::testing::TestWithParam<std::tuple<IvfPqMetric, bool>> {};

TEST_P(IvfPqVariants, EncodeAndSearchMatchBruteForce) {
  const auto [metric, by_residual] = GetParam();
  IvfPqParams p{16, 8, 8, 8, metric, by_residual};
  const auto x = clustered(1500, 16, 12, 1);
  IvfPqIndex index = trained(p, x);
  ASSERT_TRUE(index.is_trained());
  const int64_t n = 1500;
  std::vector<int64_t> lists(n);
  std::vector<uint8_t> codes(static_cast<size_t>(n * p.M));
  index.encode(ctx(), x.data(), n, lists.data(), codes.data());
  Brute b{index};
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(lists[static_cast<size_t>(i)], b.assign(x.data() + i * p.dim));
    const auto c = b.encode(x.data() + i * p.dim, lists[static_cast<size_t>(i)]);
    for (int64_t m = 0; m < p.M; ++m) ASSERT_EQ(codes[static_cast<size_t>(i * p.M + m)], c[static_cast<size_t>(m)]);
  }
  index.add(ctx(), x.data(), n);
  EXPECT_EQ(index.ntotal(), n);
  const auto q = clustered(40, 16, 12, 2);
  for (int64_t nprobe : {1, 3, 8})
    for (int64_t k : {1, 10, 257}) expect_search_matches_brute(index, q, k, nprobe);
}

// M = 16 and 32: the scan's word-split path for two and four words of codes per vector (and its
// tail of fewer than four codes), against the serial brute force.
TEST_P(IvfPqVariants, WideCodesMatchBruteForce) {
  const auto [metric, by_residual] = GetParam();
  for (int64_t M : {16, 32}) {
    IvfPqParams p{32, 8, M, 8, metric, by_residual};
    const auto x = clustered(1203, 32, 12, 21);
    IvfPqIndex index = trained(p, x);
    index.add(ctx(), x.data(), 1203);
    const auto q = clustered(25, 32, 12, 22);
    for (int64_t nprobe : {1, 5, 8})
      for (int64_t k : {1, 7, 300}) expect_search_matches_brute(index, q, k, nprobe);
  }
}

TEST_P(IvfPqVariants, ScalarKernelsGiveTheSameBits) {
  const auto [metric, by_residual] = GetParam();
  IvfPqParams p{24, 6, 6, 8, metric, by_residual};
  const auto x = clustered(800, 24, 8, 11);
  const auto q = clustered(30, 24, 8, 12);
  auto run = [&](bool scalar) {
    const bool before = pcops::cpu::ivfpq_detail::force_scalar(scalar);
    IvfPqIndex index = trained(p, x);
    index.add(ctx(), x.data(), 800);
    std::vector<float> d(30 * 15);
    std::vector<int64_t> l(30 * 15);
    index.search(ctx(), q.data(), 30, 15, 3, d.data(), l.data());
    pcops::cpu::ivfpq_detail::force_scalar(before);
    return std::make_tuple(index.centroids(), index.codebooks(), d, l);
  };
  EXPECT_EQ(run(true), run(false));
}

// Every kernel width (scalar, AVX2, AVX-512 where the CPU has them) gives the same quantizers,
// codes and search results, bit for bit: sub-quantizer widths with their own AVX-512 kernels
// (dsub 1, 2, 4, 8) and the generic one (3, 16), coarse tables that end in partial 64-column steps
// (nlist 37, 70), batches of one to four residual tables (nprobe 1 to 6), float16 and precomputed
// tables; the default width also against the brute force.
TEST_P(IvfPqVariants, EveryKernelWidthGivesTheSameBits) {
  namespace isa = pcops::cpu::ivfpq_detail;
  const auto [metric, by_residual] = GetParam();
  struct Shape {
    int64_t dim, nlist, M;
  };
  for (const Shape s : {Shape{16, 37, 16}, Shape{32, 70, 16}, Shape{24, 37, 8}, Shape{64, 70, 16}, Shape{64, 37, 16},
                        Shape{48, 37, 3}, Shape{32, 70, 2}}) {
    const IvfPqParams p{s.dim, s.nlist, s.M, 8, metric, by_residual};
    const auto x = clustered(900, s.dim, 9, 61);
    const auto q = clustered(13, s.dim, 9, 62);
    const int64_t nq = 13, k = 7;
    using Result = std::tuple<std::vector<float>, std::vector<float>, std::vector<float>, std::vector<int64_t>>;
    auto run = [&](bool scalar, bool avx2) {
      const bool s0 = isa::force_scalar(scalar), a0 = isa::force_avx2(avx2);
      IvfPqIndex index = trained(p, x);
      index.add(ctx(), x.data(), 900);
      std::vector<float> d;
      std::vector<int64_t> l;
      for (int64_t nprobe : {1, 2, 3, 4, 5, 6})
        for (bool pre : {false, true})
          for (bool half : {false, true}) {
            std::vector<float> dd(static_cast<size_t>(nq * k));
            std::vector<int64_t> ll(static_cast<size_t>(nq * k));
            index.search(ctx(), q.data(), nq, k, nprobe, dd.data(), ll.data(), pre, half);
            d.insert(d.end(), dd.begin(), dd.end());
            l.insert(l.end(), ll.begin(), ll.end());
          }
      if (!scalar && !avx2)
        for (int64_t nprobe : {1, 5}) expect_search_matches_brute(index, q, k, nprobe);
      isa::force_scalar(s0);
      isa::force_avx2(a0);
      return Result(index.centroids(), index.codebooks(), d, l);
    };
    const Result automatic = run(false, false);
    EXPECT_TRUE(run(true, false) == automatic) << "scalar, dim " << s.dim << " M " << s.M;
    EXPECT_TRUE(run(false, true) == automatic) << "AVX2, dim " << s.dim << " M " << s.M;
  }
}

INSTANTIATE_TEST_SUITE_P(Metrics, IvfPqVariants,
                         ::testing::Combine(::testing::Values(IvfPqMetric::L2, IvfPqMetric::InnerProduct),
                                            ::testing::Bool()));

TEST(IvfPq, TrainingIsDeterministicAcrossThreadCounts) {
  const auto x = clustered(3000, 8, 10, 3);
  IvfPqParams p{8, 16, 2};
  pcops::IvfPqTrainParams tp;
  tp.niter = 5;
  tp.max_points_per_centroid = 100;  // exercises the subsample
  IvfPqIndex a(p), b(p), c(p);
  a.train(ctx(1, 42), x.data(), 3000, tp);
  b.train(ctx(4, 42), x.data(), 3000, tp);
  c.train(ctx(4, 43), x.data(), 3000, tp);
  EXPECT_EQ(a.centroids(), b.centroids());
  EXPECT_EQ(a.codebooks(), b.codebooks());
  EXPECT_NE(a.centroids(), c.centroids());
}

TEST(IvfPq, RecallAgainstExactSearch) {
  const int64_t dim = 32, n = 4000, nq = 50;
  const auto x = clustered(n, dim, 20, 4);
  const auto q = clustered(nq, dim, 20, 5);
  IvfPqIndex index = trained(IvfPqParams{dim, 16, 16}, x);
  index.add(ctx(), x.data(), n);
  std::vector<float> dist(nq * 10);
  std::vector<int64_t> lab(nq * 10);
  index.search(ctx(), q.data(), nq, 10, 16, dist.data(), lab.data());
  int hits = 0;
  for (int64_t i = 0; i < nq; ++i) {
    int64_t best = 0;
    for (int64_t j = 1; j < n; ++j)
      if (l2(q.data() + i * dim, x.data() + j * dim, dim) < l2(q.data() + i * dim, x.data() + best * dim, dim)) best = j;
    hits += std::count(lab.begin() + i * 10, lab.begin() + (i + 1) * 10, best) > 0;
  }
  EXPECT_GE(hits, nq * 8 / 10);  // recall@10 of the true nearest neighbour
}

TEST(IvfPq, PrecomputedTableAgreesWithResidualTables) {
  const int64_t dim = 32, n = 4000, nq = 40, k = 10;
  const auto x = clustered(n, dim, 20, 6);
  const auto q = clustered(nq, dim, 20, 7);
  IvfPqIndex index = trained(IvfPqParams{dim, 16, 8}, x);
  index.add(ctx(), x.data(), n);
  std::vector<float> d0(nq * k), d1(nq * k);
  std::vector<int64_t> l0(nq * k), l1(nq * k);
  index.search(ctx(), q.data(), nq, k, 5, d0.data(), l0.data());
  index.search(ctx(), q.data(), nq, k, 5, d1.data(), l1.data(), true);
  int64_t same = 0;
  for (int64_t i = 0; i < nq * k; ++i) {
    EXPECT_NEAR(d1[i], d0[i], 1e-4 * std::max(1.0f, std::abs(d0[i])));
    same += l0[i] == l1[i];
  }
  EXPECT_GE(same, nq * k * 98 / 100);
  // Over the size limit of the precomputed term: a Value error, nothing written.
  const int64_t nlist = IvfPqIndex::kMaxPrecomputed / (16 * 256) + 1;
  IvfPqIndex big(IvfPqParams{16, nlist, 16});
  std::vector<float> cent(static_cast<size_t>(nlist * 16), 0.0f), books(16 * 256, 0.0f);
  for (int64_t l = 0; l < nlist; ++l) cent[static_cast<size_t>(l * 16)] = static_cast<float>(l);
  big.set_quantizers(cent.data(), books.data());
  std::vector<float> qd(16, 0.5f), out(3, -7.0f);
  std::vector<int64_t> lab(3, -7);
  pcops_test::expect_error(pcops::ErrorKind::Value, [&] {
    big.search(ctx(), qd.data(), 1, 3, 2, out.data(), lab.data(), true);
  }, "precomputed_table");
  EXPECT_EQ(out[0], -7.0f);
  big.search(ctx(), qd.data(), 1, 3, 2, out.data(), lab.data());  // the residual tables still work
  EXPECT_EQ(lab[0], -1);  // an empty index pads
}

TEST(IvfPq, TiesOrderByIdAndPadding) {
  IvfPqParams p{4, 2, 2};
  const auto x = clustered(600, 4, 3, 6);
  IvfPqIndex index = trained(p, x);
  // The same vector under three ids, added in descending id order: equal distances, id order.
  std::vector<float> v(x.begin(), x.begin() + 4), vs;
  for (int i = 0; i < 3; ++i) vs.insert(vs.end(), v.begin(), v.end());
  const std::vector<int64_t> ids{30, 20, 10};
  index.add(ctx(), vs.data(), 3, ids.data());
  std::vector<float> dist(5);
  std::vector<int64_t> lab(5);
  index.search(ctx(), v.data(), 1, 5, 2, dist.data(), lab.data());
  EXPECT_EQ(lab, (std::vector<int64_t>{10, 20, 30, -1, -1}));
  EXPECT_EQ(dist[0], dist[1]);
  EXPECT_EQ(dist[1], dist[2]);
  EXPECT_TRUE(std::isinf(dist[3]) && dist[3] > 0);
}

// The bounded L2 scans (a code whose first terms, or whose quantised terms, already exceed the
// k-th key is not finished; the scalar / AVX2 and the AVX-512 VBMI forms, the latter also over
// precomputed tables, against the unbounded scan) on exact small-integer
// distances full of ties: codewords (j / 4, 0) per sub-quantizer, the query at the only populated
// centroid, vectors that are exact codeword concatenations under shuffled ids. Partial sums equal
// to the threshold (later terms zero: equal keys decided by id), equal to it with later terms added
// (beyond it), every code with the same partial sum, a k-th key of zero (many codes at distance
// 0), and codes far beyond the quantised range (saturated sums).
TEST(IvfPq, BoundedScanKeepsTiesAtTheThreshold) {
  namespace isa = pcops::cpu::ivfpq_detail;
  for (const bool avx2 : {false, true})
  for (const int64_t M : {8, 16, 32})
    for (int variant = 0; variant < 4; ++variant) {
      const bool a0 = isa::force_avx2(avx2);
      const int64_t dim = 2 * M, n = 611;
      IvfPqIndex index(IvfPqParams{dim, 3, M});
      std::vector<float> cent(static_cast<size_t>(3 * dim), 0.0f), books(static_cast<size_t>(M * 256 * 2), 0.0f);
      for (int64_t i = 0; i < dim; ++i) {
        cent[static_cast<size_t>(dim + i)] = 1000.0f;  // list 1: far away, list 2: a duplicate of list 0
      }
      for (int64_t m = 0; m < M; ++m)
        for (int64_t j = 0; j < 256; ++j) books[static_cast<size_t>((m * 256 + j) * 2)] = 0.25f * static_cast<float>(j);
      index.set_quantizers(cent.data(), books.data());
      std::mt19937 rng(static_cast<uint32_t>(71 + variant));
      std::vector<float> x(static_cast<size_t>(n * dim), 0.0f);
      std::vector<int64_t> ids(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        ids[static_cast<size_t>(i)] = i;
        for (int64_t m = 0; m < M; ++m) {
          int64_t c;
          if (variant == 0) c = m < 4 ? rng() % 4 : (rng() % 8 == 0 ? rng() % 2 : 0);  // mostly zero tails
          else if (variant == 1) c = m < 4 ? 1 : rng() % 2;  // every partial sum equal
          else if (variant == 2) c = rng() % 3;
          else c = rng() % 3 == 0 ? 0 : (rng() % 2 == 0 ? 1 : 255);  // zeros and saturating terms
          x[static_cast<size_t>(i * dim + 2 * m)] = 0.25f * static_cast<float>(c);
        }
        if (i % 50 == 7)  // a few in the far list
          for (int64_t d = 0; d < dim; ++d) x[static_cast<size_t>(i * dim + d)] += 1000.0f;
      }
      std::shuffle(ids.begin(), ids.end(), rng);
      index.add(ctx(), x.data(), n, ids.data());
      ASSERT_EQ(index.list_size(2), 0);  // ties go to the smaller list
      const std::vector<float> q(static_cast<size_t>(dim), 0.0f);
      for (int64_t nprobe : {1, 2, 3})
        for (int64_t k : {1, 5, 10, 37, 200}) {
          expect_search_matches_brute(index, q, k, nprobe);
          if (!avx2) expect_precomputed_unbounded(index, q, k, nprobe);
        }
      isa::force_avx2(a0);
    }
}

// The bounded scans at the ends of float's range: distances that overflow to +inf (a k-th key of
// +inf: nothing can be pruned; precomputed tables with infinite entries: no bound) and subnormal
// ones (the quantisation's smallest unit), against the brute force (precomputed tables: against
// the unbounded scan).
TEST(IvfPq, BoundedScanAtTheEndsOfTheRange) {
  namespace isa = pcops::cpu::ivfpq_detail;
  for (const bool avx2 : {false, true})
    for (const float scale : {1e19f, 1e-21f, 1.0f}) {
      const bool a0 = isa::force_avx2(avx2);
      const int64_t dim = 32, n = 700;
      auto x = clustered(n, dim, 6, 81);
      for (float& v : x) v *= scale;
      IvfPqIndex index = trained(IvfPqParams{dim, 4, 16}, x);
      index.add(ctx(), x.data(), n);
      auto q = clustered(9, dim, 6, 82);
      for (float& v : q) v *= scale;
      for (int64_t k : {1, 10, 100}) {
        expect_search_matches_brute(index, q, k, 2);
        if (!avx2) expect_precomputed_unbounded(index, q, k, 3);
      }
      isa::force_avx2(a0);
    }
}

// List selection with the cut inside a group of equal coarse keys: 2 dim centroids +-4 e_i, all at
// the same distance (and inner product 0) from queries at the origin, every list populated; ties
// go to the smaller list, for nprobe up to nlist (kept sorted up to 64, in a heap beyond), both
// metrics.
TEST(IvfPq, ListSelectionTiesGoToTheSmallerList) {
  for (const int64_t dim : {16, 64}) {
  const int64_t nlist = 2 * dim;
  std::vector<float> cent(static_cast<size_t>(nlist * dim), 0.0f);
  for (int64_t l = 0; l < nlist; ++l) cent[static_cast<size_t>(l * dim + l / 2)] = l % 2 == 0 ? 4.0f : -4.0f;
  auto x = clustered(640, dim, 1, 93);  // noise around a centre, moved onto each centroid
  for (int64_t i = 0; i < 640; ++i)
    for (int64_t d = 0; d < dim; ++d)
      x[static_cast<size_t>(i * dim + d)] = 0.1f * (x[static_cast<size_t>(i * dim + d)] - 5.0f) +
                                            cent[static_cast<size_t>((i % nlist) * dim + d)];
  for (IvfPqMetric metric : {IvfPqMetric::L2, IvfPqMetric::InnerProduct}) {
    IvfPqIndex index = trained(IvfPqParams{dim, nlist, 8, 8, metric, true}, x);
    const std::vector<float> books(index.codebooks());
    index = IvfPqIndex(IvfPqParams{dim, nlist, 8, 8, metric, true});
    index.set_quantizers(cent.data(), books.data());
    index.add(ctx(), x.data(), 640);
    for (int64_t l = 0; l < nlist; ++l) ASSERT_GT(index.list_size(l), 0);
    std::vector<float> q(static_cast<size_t>(3 * dim), 0.0f);
    q[static_cast<size_t>(dim + 3)] = 1e-3f;  // a near tie
    for (int64_t nprobe : {1, 2, 5, 16, 31, 32, 64, 65, 100, 127, 128})
      if (nprobe <= nlist) expect_search_matches_brute(index, q, 25, nprobe);
  }
  }
}

// List selection over keys of a few repeated values in shuffled list order (centroids +-a e_i, a
// in 2..5: squared distances 4, 9, 16, 25 from the origin), so lists enter the kept set while equal
// keys sit inside it and at its end: the entering one ranks after them.
TEST(IvfPq, ListSelectionWithRepeatedKeys) {
  const int64_t dim = 16, nlist = 128;
  std::vector<int64_t> slot(nlist);
  for (int64_t l = 0; l < nlist; ++l) slot[static_cast<size_t>(l)] = l;
  std::mt19937 rng(95);
  std::shuffle(slot.begin(), slot.end(), rng);
  std::vector<float> cent(static_cast<size_t>(nlist * dim), 0.0f);
  for (int64_t l = 0; l < nlist; ++l) {
    const int64_t c = slot[static_cast<size_t>(l)];
    cent[static_cast<size_t>(l * dim + (c / 2) % dim)] = (c % 2 == 0 ? 1.0f : -1.0f) * static_cast<float>(2 + c / 32);
  }
  auto x = clustered(1024, dim, 1, 96);
  for (int64_t i = 0; i < 1024; ++i)
    for (int64_t d = 0; d < dim; ++d)
      x[static_cast<size_t>(i * dim + d)] = 0.01f * (x[static_cast<size_t>(i * dim + d)] - 5.0f) +
                                            cent[static_cast<size_t>((i % nlist) * dim + d)];
  IvfPqIndex index = trained(IvfPqParams{dim, nlist, 8}, x);
  const std::vector<float> books(index.codebooks());
  index = IvfPqIndex(IvfPqParams{dim, nlist, 8});
  index.set_quantizers(cent.data(), books.data());
  index.add(ctx(), x.data(), 1024);
  for (int64_t l = 0; l < nlist; ++l) ASSERT_GT(index.list_size(l), 0);
  const std::vector<float> q(static_cast<size_t>(dim), 0.0f);
  for (int64_t nprobe : {3, 10, 20, 31, 33, 40, 63, 64, 65, 70, 100, 127})
    expect_search_matches_brute(index, q, 1024, nprobe);  // every candidate: the probed lists show
}

// The lists' sub-quantizer-major copy follows every change of the lists (add, remove_ids, reset)
// and a copy of the index keeps its own.
TEST(IvfPq, CodeBlocksFollowTheLists) {
  const int64_t dim = 32, n = 900;
  const auto x = clustered(n, dim, 8, 91);
  const auto q = clustered(11, dim, 8, 92);
  IvfPqIndex index = trained(IvfPqParams{dim, 5, 16}, x);
  index.add(ctx(), x.data(), 300);
  expect_search_matches_brute(index, q, 10, 2);
  IvfPqIndex copy = index;
  index.add(ctx(), x.data() + 300 * dim, 600);
  expect_search_matches_brute(index, q, 10, 2);
  expect_search_matches_brute(copy, q, 10, 2);
  std::vector<int64_t> gone;
  for (int64_t i = 0; i < n; i += 3) gone.push_back(i);
  EXPECT_EQ(index.remove_ids(gone.data(), static_cast<int64_t>(gone.size())), 300);
  expect_search_matches_brute(index, q, 10, 3);
  index.reset();
  index.add(ctx(), x.data() + 100 * dim, 77);
  expect_search_matches_brute(index, q, 10, 5);
  expect_search_matches_brute(copy, q, 10, 2);
}

TEST(IvfPq, SaveLoadRoundTripRemoveReset) {
  const auto x = clustered(1000, 8, 6, 8);
  IvfPqIndex index = trained(IvfPqParams{8, 4, 4, 8, IvfPqMetric::InnerProduct, true}, x);
  std::vector<int64_t> ids(1000);
  for (int64_t i = 0; i < 1000; ++i) ids[static_cast<size_t>(i)] = 5000 + i;
  index.add(ctx(), x.data(), 1000, ids.data());
  std::stringstream ss;
  index.save(ss);
  IvfPqIndex back = IvfPqIndex::load(ss);
  EXPECT_EQ(back.ntotal(), 1000);
  EXPECT_EQ(back.centroids(), index.centroids());
  EXPECT_EQ(back.codebooks(), index.codebooks());
  for (int64_t l = 0; l < 4; ++l) {
    EXPECT_EQ(back.list_ids(l), index.list_ids(l));
    EXPECT_EQ(back.list_codes(l), index.list_codes(l));
  }
  const std::vector<int64_t> gone{5000, 5001, 5999, 77};
  EXPECT_EQ(back.remove_ids(gone.data(), 4), 3);
  EXPECT_EQ(back.ntotal(), 997);
  std::vector<float> d(1000);
  std::vector<int64_t> lab(1000);
  back.search(ctx(), x.data(), 1, 1000, 4, d.data(), lab.data());
  EXPECT_EQ(std::count(lab.begin(), lab.end(), -1), 3);
  EXPECT_EQ(std::count(lab.begin(), lab.end(), 5000), 0);
  expect_search_matches_brute(back, std::vector<float>(x.begin(), x.begin() + 80), 20, 2);
  back.reset();
  EXPECT_EQ(back.ntotal(), 0);
  EXPECT_TRUE(back.is_trained());
  // An untrained index round-trips too.
  std::stringstream s2;
  IvfPqIndex(IvfPqParams{8, 4, 4}).save(s2);
  EXPECT_FALSE(IvfPqIndex::load(s2).is_trained());
  std::stringstream bad("not an index");
  EXPECT_THROW(IvfPqIndex::load(bad), pcops::Error);
}

TEST(IvfPq, BadInput) {
  auto kind = [](auto fn) {
    try {
      fn();
    } catch (const pcops::Error& e) {
      return static_cast<int>(e.kind());
    }
    return -1;
  };
  const int value = static_cast<int>(pcops::ErrorKind::Value);
  EXPECT_EQ(kind([] { IvfPqIndex(IvfPqParams{10, 4, 3}); }), value);  // M does not divide dim
  EXPECT_EQ(kind([] { IvfPqIndex(IvfPqParams{8, 4, 2, 4}); }), value);  // nbits
  EXPECT_EQ(kind([] { IvfPqIndex(IvfPqParams{0, 4, 1}); }), value);
  EXPECT_EQ(kind([] { IvfPqIndex(IvfPqParams{8, 0, 1}); }), value);
  IvfPqIndex index(IvfPqParams{8, 4, 2});
  const auto x = clustered(300, 8, 3, 9);
  std::vector<float> d(4);
  std::vector<int64_t> l(4);
  EXPECT_EQ(kind([&] { index.add(ctx(), x.data(), 1); }), value);  // untrained
  EXPECT_EQ(kind([&] { index.train(ctx(), x.data(), 100); }), value);  // too few vectors
  auto nan = x;
  nan[5] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(kind([&] { index.train(ctx(), nan.data(), 300); }), value);
  index.train(ctx(), x.data(), 300);
  EXPECT_EQ(kind([&] { index.search(ctx(), x.data(), 1, 4, 0, d.data(), l.data()); }), value);
  EXPECT_EQ(kind([&] { index.search(ctx(), x.data(), 1, 4, 5, d.data(), l.data()); }), value);
  EXPECT_EQ(kind([&] { index.search(ctx(), x.data(), 1, -1, 1, d.data(), l.data()); }), value);
  EXPECT_EQ(kind([&] { index.list_size(4); }), static_cast<int>(pcops::ErrorKind::Index));
  index.add(ctx(), x.data(), 300);
  EXPECT_EQ(kind([&] { index.train(ctx(), x.data(), 300); }), value);  // not empty
}

}  // namespace

// add_encoded (the path of vectors encoded on a GPU) gives the index that add gives; a list out of
// range raises IndexError and adds nothing.
TEST(IvfPq, AddEncodedEqualsAdd) {
  const auto x = clustered(900, 8, 6, 31);
  IvfPqIndex a = trained(IvfPqParams{8, 6, 4}, x);
  IvfPqIndex b = trained(IvfPqParams{8, 6, 4}, x);
  std::vector<int64_t> ids(900), lists(900);
  for (int64_t i = 0; i < 900; ++i) ids[static_cast<size_t>(i)] = 3 * i + 1;
  std::vector<uint8_t> codes(900 * 4);
  a.add(ctx(), x.data(), 900, ids.data());
  b.encode(ctx(), x.data(), 900, lists.data(), codes.data());
  b.add_encoded(lists.data(), codes.data(), 600, ids.data());
  b.add_encoded(lists.data() + 600, codes.data() + 600 * 4, 300, ids.data() + 600);
  ASSERT_EQ(b.ntotal(), 900);
  for (int64_t l = 0; l < 6; ++l) {
    EXPECT_EQ(b.list_ids(l), a.list_ids(l));
    EXPECT_EQ(b.list_codes(l), a.list_codes(l));
  }
  IvfPqIndex c = trained(IvfPqParams{8, 6, 4}, x);
  c.add_encoded(lists.data(), codes.data(), 5);  // default ids 0..4
  EXPECT_EQ(c.ntotal(), 5);
  std::vector<int64_t> bad(lists.begin(), lists.begin() + 4);
  bad[2] = 6;
  pcops_test::expect_error(pcops::ErrorKind::Index, [&] { c.add_encoded(bad.data(), codes.data(), 4); }, "lists");
  bad[2] = -1;
  pcops_test::expect_error(pcops::ErrorKind::Index, [&] { c.add_encoded(bad.data(), codes.data(), 4); }, "lists");
  EXPECT_EQ(c.ntotal(), 5);
  IvfPqIndex untrained(IvfPqParams{8, 6, 4});
  pcops_test::expect_error(pcops::ErrorKind::Value, [&] { untrained.add_encoded(lists.data(), codes.data(), 1); },
                           "not trained");
}

// train() with an outside assigner (here a serial brute force of the assignment contract, as a
// GPU's would be) gives the same quantizers, bit for bit: both metrics, with and without
// residuals, and duplicated points (empty clusters, split).
TEST(IvfPq, TrainWithAnAssignerEqualsTrain) {
  const IvfPqIndex::AssignFn brute = [](const float* data, int64_t n, int64_t d, const float* cent, int64_t k, bool use_ip,
                                        int64_t* out) {
    for (int64_t i = 0; i < n; ++i) {
      int64_t best = 0;
      float bv = 0;
      for (int64_t c = 0; c < k; ++c) {
        const float v = use_ip ? ip(data + i * d, cent + c * d, d) : l2(data + i * d, cent + c * d, d);
        if (c == 0 || (use_ip ? v > bv : v < bv)) {
          bv = v;
          best = c;
        }
      }
      out[i] = best;
    }
  };
  auto x = clustered(700, 8, 5, 51);
  for (int i = 0; i < 200; ++i) std::copy(x.begin(), x.begin() + 8, x.begin() + 8 * (100 + i));  // duplicates
  for (IvfPqMetric metric : {IvfPqMetric::L2, IvfPqMetric::InnerProduct})
    for (bool residual : {true, false}) {
      const IvfPqParams p{8, 12, 4, 8, metric, residual};
      pcops::IvfPqTrainParams tp;
      tp.niter = 5;
      IvfPqIndex a(p), b(p);
      a.train(ctx(0, 9), x.data(), 700, tp);
      b.train(ctx(0, 9), x.data(), 700, tp, brute);
      EXPECT_EQ(a.centroids(), b.centroids());
      EXPECT_EQ(a.codebooks(), b.codebooks());
    }
}
