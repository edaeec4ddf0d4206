// CUDA scatter / segment_csr / segment_coo (sorted scatter) / gather_csr / gather_coo against the
// CPU backend: bitwise equal values and arg outputs for every reduction and type, on uniform,
// concentrated (one destination receives most sources), empty and NaN inputs, destinations per
// row and per element, shared and per-row index / offsets, with and without start values (out=);
// outputs are sentinel-prefilled so an unwritten slot shows; lists around and far beyond the chunk
// length of the contract's chunk rule. Plus the shape errors, raised before any kernel runs.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include "cuda_util.hpp"
#include "pcops/error.hpp"
#include "pcops/scatter.hpp"

namespace {

using pcops::Reduce;
using pcops::ReduceShape;
using pcops::ScatterParams;
using pcops_cuda_test::DeviceBuffer;
using pcops_cuda_test::StreamContext;

constexpr Reduce kReduces[] = {Reduce::Sum, Reduce::Mean, Reduce::Mul, Reduce::Min, Reduce::Max};
constexpr int64_t kArgSentinel = -7;

const char* name_of(Reduce r) {
  switch (r) {
    case Reduce::Sum: return "sum";
    case Reduce::Mean: return "mean";
    case Reduce::Mul: return "mul";
    case Reduce::Min: return "min";
    default: return "max";
  }
}

bool minmax(Reduce r) { return r == Reduce::Min || r == Reduce::Max; }

template <class Fn>
void for_each_type(Fn fn) {
  fn(float{});
  fn(double{});
  fn(int64_t{});
  fn(int32_t{});
  fn(int16_t{});
  fn(int8_t{});
  fn(uint8_t{});
}

// Bitwise, except that any NaN equals any NaN (payloads are outside the contract).
template <class T>
int64_t mismatches(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return -1;
  int64_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    }
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) ++bad;
  }
  return bad;
}

// Values with ties (a quarter of them on a coarse grid), some NaN / infinities when asked, and
// small integers for the integer types (products wrap as on the CPU).
template <class T>
std::vector<T> random_values(int64_t n, std::mt19937& rng, double nan_fraction = 0.0) {
  std::vector<T> v(static_cast<size_t>(n));
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::normal_distribution<double> g(0.0, 3.0);
  for (auto& x : v) {
    if constexpr (std::is_floating_point_v<T>) {
      double y = g(rng);
      if (u(rng) < 0.25) y = std::round(y * 2.0) / 2.0;
      x = static_cast<T>(y);
      const double r = u(rng);
      if (r < nan_fraction) x = std::numeric_limits<T>::quiet_NaN();
      else if (r < 1.5 * nan_fraction) x = (r < 1.25 * nan_fraction ? 1 : -1) * std::numeric_limits<T>::infinity();
    } else if constexpr (std::is_signed_v<T>) {
      x = static_cast<T>(std::uniform_int_distribution<int>(-6, 6)(rng));
    } else {
      x = static_cast<T>(std::uniform_int_distribution<int>(0, 12)(rng));
    }
  }
  return v;
}

// n indices in [0, M); a fraction `hot` of them on destination 0 (concentrated).
std::vector<int64_t> random_index(int64_t n, int64_t M, double hot, std::mt19937& rng) {
  std::vector<int64_t> v(static_cast<size_t>(n), 0);
  if (M == 0) return v;
  std::uniform_int_distribution<int64_t> d(0, M - 1);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (auto& x : v) x = u(rng) < hot ? 0 : d(rng);
  return v;
}

struct Case {
  int64_t outer, E, M, K;
  bool shared_index;  // index_outer == 1
  bool elementwise;   // a destination per (o, e, k)
  double hot = 0.0;
  double nan = 0.0;
};

std::string describe(const Case& c, const ScatterParams& p, const char* type) {
  return std::string(type) + " " + name_of(p.reduce) + " outer=" + std::to_string(c.outer) + " E=" +
         std::to_string(c.E) + " M=" + std::to_string(c.M) + " K=" + std::to_string(c.K) +
         (c.shared_index ? " shared" : "") + (c.elementwise ? " elementwise" : "") +
         (p.accumulate ? " accumulate" : "") + (p.sorted ? " sorted" : "") + " hot=" + std::to_string(c.hot);
}

// CPU vs CUDA scatter on a given index (index_outer x E x index_inner).
template <class T>
void expect_scatter_with(const ReduceShape& s, const ScatterParams& p, const std::vector<int64_t>& index,
                         int64_t index_outer, int64_t index_inner, std::mt19937& rng) {
  const std::vector<T> src = random_values<T>(s.outer * s.src_rows * s.inner, rng, 0.01);
  const int64_t n = s.outer * s.out_rows * s.inner;
  const std::vector<T> start =
      p.accumulate ? random_values<T>(n, rng, 0.01) : std::vector<T>(static_cast<size_t>(n), T(77));
  const bool mm = minmax(p.reduce);
  std::vector<T> want = start;
  std::vector<int64_t> want_arg(static_cast<size_t>(mm ? n : 0), kArgSentinel);
  pcops::cpu::scatter({}, p, s, src.data(), index.data(), index_outer, index_inner, want.data(),
                      mm ? want_arg.data() : nullptr);
  StreamContext sc;
  DeviceBuffer<T> dsrc(src), dout(start);
  DeviceBuffer<int64_t> didx(index), darg(std::vector<int64_t>(want_arg.size(), kArgSentinel));
  pcops::cuda::scatter(sc.ctx, p, s, dsrc.data(), didx.data(), index_outer, index_inner, dout.data(),
                       mm ? darg.data() : nullptr);
  const std::string what = std::string(typeid(T).name()) + " " + name_of(p.reduce) + " E=" +
                           std::to_string(s.src_rows) + " K=" + std::to_string(s.inner);
  EXPECT_EQ(mismatches(dout.download(), want), 0) << what;
  if (mm) {
    EXPECT_EQ(darg.download(), want_arg) << what;
  }
}

// CPU vs CUDA segment_csr (sum, mean, min, max) on given offsets shared by every outer row.
template <class T>
void expect_segment_csr_with(const ReduceShape& s, const std::vector<int64_t>& indptr, std::mt19937& rng) {
  const std::vector<T> src = random_values<T>(s.outer * s.src_rows * s.inner, rng, 0.01);
  const int64_t n = s.outer * s.out_rows * s.inner;
  for (Reduce r : {Reduce::Sum, Reduce::Mean, Reduce::Min, Reduce::Max}) {
    const bool mm = minmax(r);
    std::vector<T> want(static_cast<size_t>(n), T(77));
    std::vector<int64_t> want_arg(static_cast<size_t>(mm ? n : 0), kArgSentinel);
    pcops::cpu::segment_csr({}, r, s, src.data(), indptr.data(), 1, want.data(), mm ? want_arg.data() : nullptr);
    StreamContext sc;
    DeviceBuffer<T> dsrc(src), dout(std::vector<T>(static_cast<size_t>(n), T(77)));
    DeviceBuffer<int64_t> dptr(indptr), darg(std::vector<int64_t>(want_arg.size(), kArgSentinel));
    pcops::cuda::segment_csr(sc.ctx, r, s, dsrc.data(), dptr.data(), 1, dout.data(), mm ? darg.data() : nullptr);
    const std::string what = std::string("segment_csr ") + typeid(T).name() + " " + name_of(r) + " K=" +
                             std::to_string(s.inner);
    EXPECT_EQ(mismatches(dout.download(), want), 0) << what;
    if (mm) {
      EXPECT_EQ(darg.download(), want_arg) << what;
    }
  }
}

template <class T>
void expect_scatter(const Case& c, const ScatterParams& p, std::mt19937& rng) {
  const ReduceShape s{c.outer, c.E, c.M, c.K};
  const int64_t index_outer = c.shared_index ? 1 : c.outer, index_inner = c.elementwise ? c.K : 1;
  const std::vector<T> src = random_values<T>(c.outer * c.E * c.K, rng, c.nan);
  std::vector<int64_t> index = random_index(index_outer * c.E * index_inner, c.M, c.hot, rng);
  if (p.sorted) {
    for (int64_t o = 0; o < index_outer; ++o) std::sort(index.begin() + o * c.E, index.begin() + (o + 1) * c.E);
  }
  const int64_t n = c.outer * c.M * c.K;
  std::vector<T> start = p.accumulate ? random_values<T>(n, rng, c.nan) : std::vector<T>(static_cast<size_t>(n), T(77));
  const bool mm = minmax(p.reduce);
  std::vector<T> want = start;
  std::vector<int64_t> want_arg(static_cast<size_t>(mm ? n : 0), kArgSentinel);
  pcops::cpu::scatter({}, p, s, src.data(), index.data(), index_outer, index_inner, want.data(),
                      mm ? want_arg.data() : nullptr);

  StreamContext sc;
  DeviceBuffer<T> dsrc(src), dout(start);
  DeviceBuffer<int64_t> didx(index), darg(std::vector<int64_t>(want_arg.size(), kArgSentinel));
  pcops::cuda::scatter(sc.ctx, p, s, dsrc.data(), didx.data(), index_outer, index_inner, dout.data(),
                       mm ? darg.data() : nullptr);
  const auto got = dout.download();
  const auto got_arg = darg.download();
  const std::string what = describe(c, p, typeid(T).name());
  EXPECT_EQ(mismatches(got, want), 0) << what;
  if (mm) {
    EXPECT_EQ(got_arg, want_arg) << what;
  }
}

template <class T>
void scatter_matrix(const std::vector<Case>& cases, bool sorted, std::mt19937& rng) {
  for (const Case& c : cases) {
    for (Reduce r : kReduces) {
      for (bool acc : {false, true}) {
        ScatterParams p;
        p.reduce = r;
        p.accumulate = acc;
        p.sorted = sorted;
        p.integer_mean = sorted ? pcops::IntegerMean::Trunc : pcops::IntegerMean::Floor;
        expect_scatter<T>(c, p, rng);
      }
    }
  }
}

TEST(CudaScatter, EveryReductionAndTypeUniform) {
  std::mt19937 rng(801);
  const std::vector<Case> cases = {
      {1, 1000, 37, 1, true, false},    {3, 257, 16, 5, false, false}, {3, 257, 16, 5, true, false},
      {2, 300, 7, 33, false, true},     {1, 1, 1, 1, true, false},     {2, 0, 5, 3, false, false},
      {1, 64, 200, 2, true, false},  // most destinations empty
  };
  for_each_type([&](auto tag) { scatter_matrix<decltype(tag)>(cases, false, rng); });
}

TEST(CudaScatter, ConcentratedDestinations) {
  std::mt19937 rng(802);
  const std::vector<Case> cases = {
      {1, 20000, 50, 1, true, false, 0.95},
      {2, 5000, 9, 17, false, false, 0.9},
      {1, 3000, 4, 40, true, true, 0.9},
  };
  scatter_matrix<float>(cases, false, rng);
  scatter_matrix<double>(cases, false, rng);
  scatter_matrix<int32_t>(cases, false, rng);
  scatter_matrix<int8_t>(cases, false, rng);
}

TEST(CudaScatter, NanAndInfinities) {
  std::mt19937 rng(803);
  Case a{2, 800, 13, 3, false, false, 0.3, 0.1}, b{1, 400, 5, 9, true, true, 0.0, 0.2};
  scatter_matrix<float>({a, b}, false, rng);
  scatter_matrix<double>({a, b}, false, rng);
  scatter_matrix<float>({a}, true, rng);
}

TEST(CudaScatter, SortedIndicesSegmentCoo) {
  std::mt19937 rng(804);
  const std::vector<Case> cases = {
      {1, 5000, 300, 1, true, false}, {3, 400, 20, 6, false, false, 0.5}, {2, 100, 1000, 2, true, false},
      {2, 0, 4, 2, false, false},
  };
  for_each_type([&](auto tag) { scatter_matrix<decltype(tag)>(cases, true, rng); });
}

// indptr rows [rows, M + 1] with empty segments (a fraction of zero lengths, one long segment).
std::vector<int64_t> random_indptr(int64_t rows, int64_t M, int64_t E, std::mt19937& rng) {
  std::vector<int64_t> p(static_cast<size_t>(rows * (M + 1)));
  std::uniform_int_distribution<int64_t> d(0, E);
  for (int64_t o = 0; o < rows; ++o) {
    int64_t* q = p.data() + o * (M + 1);
    q[0] = 0;
    std::vector<int64_t> cuts(static_cast<size_t>(M > 0 ? M - 1 : 0));
    for (auto& x : cuts) x = d(rng) / 3;  // most cuts early: a long last segment, many empty ones
    std::sort(cuts.begin(), cuts.end());
    for (int64_t m = 1; m < M; ++m) q[m] = cuts[static_cast<size_t>(m - 1)];
    if (M > 0) q[M] = o % 2 ? E : E - E / 4;  // rows past the last offset are in no segment
  }
  return p;
}

template <class T>
void expect_segment_csr(int64_t outer, int64_t E, int64_t M, int64_t K, bool shared, std::mt19937& rng) {
  const ReduceShape s{outer, E, M, K};
  const int64_t rows = shared ? 1 : outer;
  const std::vector<T> src = random_values<T>(outer * E * K, rng, std::is_floating_point_v<T> ? 0.02 : 0.0);
  const std::vector<int64_t> indptr = random_indptr(rows, M, E, rng);
  const int64_t n = outer * M * K;
  for (Reduce r : {Reduce::Sum, Reduce::Mean, Reduce::Min, Reduce::Max}) {
    const bool mm = minmax(r);
    std::vector<T> want(static_cast<size_t>(n), T(77));
    std::vector<int64_t> want_arg(static_cast<size_t>(mm ? n : 0), kArgSentinel);
    pcops::cpu::segment_csr({}, r, s, src.data(), indptr.data(), rows, want.data(), mm ? want_arg.data() : nullptr);
    StreamContext sc;
    DeviceBuffer<T> dsrc(src), dout(std::vector<T>(static_cast<size_t>(n), T(77)));
    DeviceBuffer<int64_t> dptr(indptr), darg(std::vector<int64_t>(want_arg.size(), kArgSentinel));
    pcops::cuda::segment_csr(sc.ctx, r, s, dsrc.data(), dptr.data(), rows, dout.data(), mm ? darg.data() : nullptr);
    const std::string what = std::string(typeid(T).name()) + " " + name_of(r) + " outer=" + std::to_string(outer) +
                             " E=" + std::to_string(E) + " M=" + std::to_string(M) + " K=" + std::to_string(K);
    EXPECT_EQ(mismatches(dout.download(), want), 0) << what;
    if (mm) {
      EXPECT_EQ(darg.download(), want_arg) << what;
    }
  }
}

TEST(CudaScatter, SegmentCsrEmptyAndLongSegments) {
  std::mt19937 rng(805);
  for_each_type([&](auto tag) {
    using T = decltype(tag);
    expect_segment_csr<T>(1, 3000, 40, 1, true, rng);
    expect_segment_csr<T>(3, 500, 17, 6, false, rng);
    expect_segment_csr<T>(3, 500, 17, 6, true, rng);
    expect_segment_csr<T>(2, 0, 5, 2, false, rng);
    expect_segment_csr<T>(1, 50, 1, 33, true, rng);
  });
}

// Lists of the given lengths, one after the other: their offsets (indptr) and each source's list
// (grouped, non-decreasing).
struct Lists {
  std::vector<int64_t> indptr{0};
  std::vector<int64_t> grouped;
  int64_t M = 0, E = 0;
};
Lists lists_of(const std::vector<int64_t>& lengths) {
  Lists l;
  for (int64_t n : lengths) l.indptr.push_back(l.indptr.back() + n);
  l.M = static_cast<int64_t>(lengths.size());
  l.E = l.indptr.back();
  l.grouped.resize(static_cast<size_t>(l.E));
  for (int64_t m = 0; m < l.M; ++m)
    for (int64_t e = l.indptr[m]; e < l.indptr[m + 1]; ++e) l.grouped[e] = m;
  return l;
}

// Lists around the warp path's threshold (256 sources) and its 128-source load rounds, every
// reduction, through segment_csr (explicit lengths) and scatter (the same groups, shuffled order
// of sources with accumulate).
template <class T>
void expect_long_lists(std::mt19937& rng) {
  const auto [indptr, grouped, M, E] = lists_of({0, 1, 255, 256, 257, 383, 384, 385, 1000, 2049});
  for (int64_t K : {1, 3, 32}) {
    const ReduceShape s{2, E, M, K};
    expect_segment_csr_with<T>(s, indptr, rng);
    std::vector<int64_t> index = grouped;
    std::shuffle(index.begin(), index.end(), rng);
    for (Reduce r : kReduces) {
      ScatterParams p;
      p.reduce = r;
      p.accumulate = K == 3;
      expect_scatter_with<T>(s, p, index, 1, 1, rng);
    }
  }
}

TEST(CudaScatter, LongListThresholdsAndRounds) {
  std::mt19937 rng(807);
  expect_long_lists<float>(rng);
  expect_long_lists<double>(rng);
  expect_long_lists<int64_t>(rng);
  expect_long_lists<int8_t>(rng);
  expect_long_lists<uint8_t>(rng);
}

// The chunk rule (lists longer than the chunk length C = 2048 fold as chunks combined left to right)
// on the CUDA chunk path, against the CPU (itself tested against an independent chunked oracle):
// lists of C - 1, C, C + 1, 2C, 3C + 5 and 4C + 1 sources, through segment_csr, scatter with a
// shuffled index (with and without start values), sorted scatter (segment_coo) and per-element
// destinations (neighbouring columns with different chunk counts); NaN / inf inside the lists
// (random_values), several outer rows with their own index rows, column counts around the warp
// width.
constexpr int64_t kChunk = 2048;

template <class T>
void expect_chunked_lists(std::mt19937& rng) {
  const auto [indptr, grouped, M, E] =
      lists_of({kChunk - 1, kChunk, kChunk + 1, 2 * kChunk, 3 * kChunk + 5, 4 * kChunk + 1, 7, 0});
  for (int64_t K : {1, 3, 33}) {
    const ReduceShape s{K > 3 ? 1 : 2, E, M, K};
    expect_segment_csr_with<T>(s, indptr, rng);
    std::vector<int64_t> index = grouped;
    std::shuffle(index.begin(), index.end(), rng);
    for (Reduce r : kReduces) {
      for (bool acc : {false, true}) {
        ScatterParams p;
        p.reduce = r;
        p.accumulate = acc;
        expect_scatter_with<T>(s, p, index, 1, 1, rng);
        p.sorted = true;  // segment_coo: the grouped (sorted) index
        p.integer_mean = pcops::IntegerMean::Trunc;
        expect_scatter_with<T>(s, p, grouped, 1, 1, rng);
      }
    }
  }
  // Per-element destinations: column k shifts every destination by k (mod M), so neighbouring
  // columns have lists of different lengths and chunk counts; two outer rows, own index rows.
  const int64_t K = 5;
  const ReduceShape s{2, E, M, K};
  std::vector<int64_t> index(static_cast<size_t>(2 * E * K));
  for (int64_t o = 0; o < 2; ++o) {
    std::vector<int64_t> row = grouped;
    std::shuffle(row.begin(), row.end(), rng);
    for (int64_t e = 0; e < E; ++e)
      for (int64_t k = 0; k < K; ++k) index[(o * E + e) * K + k] = (row[e] + k + o) % M;
  }
  for (Reduce r : kReduces) {
    for (bool acc : {false, true}) {
      ScatterParams p;
      p.reduce = r;
      p.accumulate = acc;
      expect_scatter_with<T>(s, p, index, 2, K, rng);
    }
  }
}

TEST(CudaScatter, ChunkRuleListsAroundTheChunkLength) {
  std::mt19937 rng(809);
  expect_chunked_lists<float>(rng);
  expect_chunked_lists<double>(rng);
  expect_chunked_lists<int32_t>(rng);
  expect_chunked_lists<int64_t>(rng);
  expect_chunked_lists<int8_t>(rng);
}

// About a million sources on one destination (about 500 chunks per element), every reduction,
// with and without start values; float with NaN / inf inside the list, and int32 (wraps).
TEST(CudaScatter, ChunkRuleMillionSourceDestination) {
  std::mt19937 rng(810);
  const Case big{1, int64_t{1} << 20, 64, 4, true, false, 0.95, 0.001};
  scatter_matrix<float>({big}, false, rng);
  scatter_matrix<int32_t>({big}, false, rng);
  const Case wide{2, 40000, 16, 33, false, false, 0.9, 0.001};  // 33 columns: a partial second warp
  scatter_matrix<float>({wide}, false, rng);
  scatter_matrix<double>({wide}, true, rng);
}

// Lists shared by the 32 lanes of a warp (K a multiple of 32, destinations per (o, e): the lanes
// read the list's positions 32 at a time and keep 16 source loads in flight): lengths around
// those rounds, through segment_csr (positions are the slots), scatter with a shuffled shared
// index and with per-row index rows, with and without start values.
template <class T>
void expect_row_lists(std::mt19937& rng) {
  const auto [indptr, grouped, M, E] =
      lists_of({0, 1, 2, 15, 16, 17, 31, 32, 33, 47, 48, 63, 64, 65, 100, 255, 256, 0, 3});
  for (int64_t K : {32, 64, 96}) {
    const int64_t outer = K == 64 ? 3 : 2;
    const ReduceShape s{outer, E, M, K};
    expect_segment_csr_with<T>(s, indptr, rng);
    std::vector<int64_t> shared = grouped, rows;
    std::shuffle(shared.begin(), shared.end(), rng);
    for (int64_t o = 0; o < outer; ++o) {
      std::vector<int64_t> row = grouped;
      std::shuffle(row.begin(), row.end(), rng);
      rows.insert(rows.end(), row.begin(), row.end());
    }
    for (Reduce r : kReduces) {
      for (bool acc : {false, true}) {
        ScatterParams p;
        p.reduce = r;
        p.accumulate = acc;
        expect_scatter_with<T>(s, p, shared, 1, 1, rng);
        expect_scatter_with<T>(s, p, rows, outer, 1, rng);
      }
    }
  }
}

TEST(CudaScatter, RowListsOfWarpWideColumns) {
  std::mt19937 rng(811);
  for_each_type([&](auto tag) { expect_row_lists<decltype(tag)>(rng); });
}

// Per-element destinations with K a multiple of 32: the lanes of a warp have different lists
// there (the per-lane fold, not the shared-list one), short, medium and chunked lists.
TEST(CudaScatter, PerElementDestinationsWarpWideColumns) {
  std::mt19937 rng(812);
  const std::vector<Case> cases = {
      {2, 300, 7, 32, false, true},
      {1, 700, 40, 64, true, true},
      {2, 5000, 3, 32, true, true, 0.9},  // a concentrated destination: medium and chunked lists
  };
  scatter_matrix<float>(cases, false, rng);
  scatter_matrix<double>(cases, false, rng);
  scatter_matrix<int32_t>(cases, false, rng);
  scatter_matrix<uint8_t>(cases, false, rng);
}

// ---------------------------------------------------------------------------------------------
// The value statistics the torch binding checks (index_value_stats's five words), computed by
// scatter / segment_csr themselves when asked (fused into the inverse index's keys pass for
// unsorted destinations; a statistics kernel for sorted indices and offsets), against a host
// computation of the same words, with good and bad values; the words are written whatever the
// buffer held before (prefilled with garbage here).

using Stats = std::array<unsigned long long, 5>;

Stats host_stats(const std::vector<int64_t>& v, int64_t rows, int64_t len) {
  Stats w{};
  auto biased = [](int64_t x) { return static_cast<unsigned long long>(x) ^ (1ull << 63); };
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < len; ++j) {
      const int64_t x = v[static_cast<size_t>(r * len + j)];
      w[0] = std::max(w[0], ~biased(x));
      w[1] = std::max(w[1], biased(x));
      if (j == 0) w[2] = std::max(w[2], ~biased(x));
      if (j == len - 1) w[3] = std::max(w[3], biased(x));
      if (j > 0 && x < v[static_cast<size_t>(r * len + j - 1)]) w[4] = 1;
    }
  }
  return w;
}

// A device buffer for the five words, prefilled with garbage.
DeviceBuffer<unsigned long long> stats_buffer() {
  DeviceBuffer<unsigned long long> d(5);
  d.fill(0xABABABABABABABABull);
  return d;
}

Stats stats_of(const DeviceBuffer<unsigned long long>& d) {
  const std::vector<unsigned long long> h = d.download();
  Stats w{};
  std::copy(h.begin(), h.end(), w.begin());
  return w;
}

std::string stats_text(const Stats& w) {
  std::string t;
  for (unsigned long long x : w) t += std::to_string(x) + " ";
  return t;
}

// rows x E indices in [0, M), with bad values planted when asked: negative and >= M ones at the
// start, the end and in the middle of a row.
std::vector<int64_t> stats_index(int64_t rows, int64_t E, int64_t M, bool bad, std::mt19937& rng) {
  std::vector<int64_t> v = random_index(rows * E, M, 0.0, rng);
  if (bad && !v.empty()) {
    v.front() = -3;
    v.back() = M + 7;
    v[v.size() / 2] = std::numeric_limits<int64_t>::min();
    v[v.size() / 3] = std::numeric_limits<int64_t>::max();
  }
  return v;
}

TEST(CudaScatterStats, FusedIntoTheUnsortedGrouping) {
  std::mt19937 rng(820);
  // Small and large rows: one keys block; several; more than the keys pass's grid (every block
  // folds several passes), whose partials the offsets pass folds.
  struct Shape {
    int64_t outer, index_outer, E, M, K;
  };
  const std::vector<Shape> shapes = {{1, 1, 7, 3, 1},        {3, 3, 1000, 17, 2},   {2, 1, 300000, 500, 1},
                                     {1, 1, 3000000, 10000, 1}, {2, 2, 40000, 64, 32}, {1, 1, 1, 1, 1}};
  for (const Shape& sh : shapes) {
    for (bool bad : {false, true}) {
      const ReduceShape s{sh.outer, sh.E, sh.M, sh.K};
      const std::vector<int64_t> index = stats_index(sh.index_outer, sh.E, sh.M, bad && sh.E > 1, rng);
      const std::vector<float> src = random_values<float>(sh.outer * sh.E * sh.K, rng);
      StreamContext sc;
      DeviceBuffer<float> dsrc(src), dout(static_cast<size_t>(sh.outer * sh.M * sh.K));
      DeviceBuffer<int64_t> didx(index);
      DeviceBuffer<unsigned long long> dstats = stats_buffer();
      ScatterParams p;
      pcops::cuda::scatter(sc.ctx, p, s, dsrc.data(), didx.data(), sh.index_outer, 1, dout.data(), nullptr,
                           dstats.data());
      const Stats want = host_stats(index, sh.index_outer, sh.E), got = stats_of(dstats);
      const std::string what = "E=" + std::to_string(sh.E) + " rows=" + std::to_string(sh.index_outer) +
                               (bad ? " bad" : " good") + ": " + stats_text(got) + "vs " + stats_text(want);
      EXPECT_EQ(got, want) << what;
      // The same words as the standalone statistics kernel.
      DeviceBuffer<unsigned long long> alone = stats_buffer();
      pcops::cuda::index_value_stats(sc.ctx, didx.data(), sh.index_outer, sh.E, alone.data());
      EXPECT_EQ(stats_of(alone), want) << what;
      if (!bad) {
        std::vector<float> cpu(static_cast<size_t>(sh.outer * sh.M * sh.K));
        pcops::cpu::scatter({}, p, s, src.data(), index.data(), sh.index_outer, 1, cpu.data(), nullptr);
        EXPECT_EQ(mismatches(dout.download(), cpu), 0) << what;
      }
    }
  }
}

TEST(CudaScatterStats, SortedAndPerElementIndices) {
  std::mt19937 rng(821);
  for (int64_t E : {int64_t{50}, int64_t{20000}}) {  // the one-block and the many-block statistics kernel
    for (int variant = 0; variant < 3; ++variant) {  // sorted rows; one row decreasing; bad values
      const int64_t rows = 3, M = 40;
      std::vector<int64_t> index = stats_index(rows, E, M, variant == 2, rng);
      for (int64_t o = 0; o < rows; ++o) std::sort(index.begin() + o * E, index.begin() + (o + 1) * E);
      if (variant == 1) index[E + 3] = index[E + 4] + 1;  // row 1 decreases after column 3
      const ReduceShape s{rows, E, M, 2};
      const std::vector<double> src = random_values<double>(rows * E * 2, rng);
      StreamContext sc;
      DeviceBuffer<double> dsrc(src), dout(static_cast<size_t>(rows * M * 2));
      DeviceBuffer<int64_t> didx(index);
      DeviceBuffer<unsigned long long> dstats = stats_buffer();
      ScatterParams p;
      p.sorted = true;
      p.integer_mean = pcops::IntegerMean::Trunc;
      pcops::cuda::scatter(sc.ctx, p, s, dsrc.data(), didx.data(), rows, 1, dout.data(), nullptr, dstats.data());
      const Stats want = host_stats(index, rows, E), got = stats_of(dstats);
      EXPECT_EQ(got, want) << "sorted E=" << E << " variant " << variant << ": " << stats_text(got);
      EXPECT_EQ(got[4], variant == 1 ? 1u : 0u) << "sorted E=" << E << " variant " << variant;
      if (variant == 0) {
        std::vector<double> cpu(static_cast<size_t>(rows * M * 2));
        pcops::cpu::scatter({}, p, s, src.data(), index.data(), rows, 1, cpu.data(), nullptr);
        EXPECT_EQ(mismatches(dout.download(), cpu), 0) << "sorted E=" << E;
      }
    }
  }
  // Per-element destinations (index_inner == inner): words 0 and 1 (min and max) only.
  for (bool bad : {false, true}) {
    const int64_t outer = 2, E = 3000, M = 11, K = 32;
    const ReduceShape s{outer, E, M, K};
    const std::vector<int64_t> index = stats_index(outer * E, K, M, bad, rng);
    const std::vector<float> src = random_values<float>(outer * E * K, rng);
    StreamContext sc;
    DeviceBuffer<float> dsrc(src), dout(static_cast<size_t>(outer * M * K));
    DeviceBuffer<int64_t> didx(index);
    DeviceBuffer<unsigned long long> dstats = stats_buffer();
    ScatterParams p;
    pcops::cuda::scatter(sc.ctx, p, s, dsrc.data(), didx.data(), outer, K, dout.data(), nullptr, dstats.data());
    const Stats want = host_stats(index, 1, static_cast<int64_t>(index.size())), got = stats_of(dstats);
    EXPECT_EQ(got[0], want[0]) << "per element" << (bad ? " bad" : "");
    EXPECT_EQ(got[1], want[1]) << "per element" << (bad ? " bad" : "");
    if (!bad) {
      std::vector<float> cpu(static_cast<size_t>(outer * M * K));
      pcops::cpu::scatter({}, p, s, src.data(), index.data(), outer, K, cpu.data(), nullptr);
      EXPECT_EQ(mismatches(dout.download(), cpu), 0) << "per element";
    }
  }
}

TEST(CudaScatterStats, EmptyIndexAndNoOutputRows) {
  std::mt19937 rng(822);
  StreamContext sc;
  DeviceBuffer<float> src(8), out(8);
  src.fill(1.0f);
  ScatterParams p;
  {  // E == 0: no values, the identity words (zeros)
    DeviceBuffer<int64_t> idx(1);
    DeviceBuffer<unsigned long long> dstats = stats_buffer();
    pcops::cuda::scatter(sc.ctx, p, ReduceShape{2, 0, 4, 1}, src.data(), idx.data(), 2, 1, out.data(), nullptr,
                         dstats.data());
    EXPECT_EQ(stats_of(dstats), Stats{}) << "empty index";
  }
  {  // segment_csr without segments (M == 0): the one offset per row is still described
    const std::vector<int64_t> indptr = {0, 9};
    DeviceBuffer<int64_t> ptr(indptr);
    DeviceBuffer<unsigned long long> dstats = stats_buffer();
    pcops::cuda::segment_csr(sc.ctx, Reduce::Sum, ReduceShape{2, 4, 0, 1}, src.data(), ptr.data(), 2, out.data(),
                             nullptr, dstats.data());
    EXPECT_EQ(stats_of(dstats), host_stats(indptr, 2, 1)) << "no segments";
  }
  {  // M == 0 (nothing to reduce): the index is still described (here: every value bad)
    const std::vector<int64_t> index = stats_index(1, 6, 1, true, rng);
    DeviceBuffer<int64_t> idx(index);
    DeviceBuffer<unsigned long long> dstats = stats_buffer();
    pcops::cuda::scatter(sc.ctx, p, ReduceShape{1, 6, 0, 1}, src.data(), idx.data(), 1, 1, out.data(), nullptr,
                         dstats.data());
    EXPECT_EQ(stats_of(dstats), host_stats(index, 1, 6)) << "M == 0";
  }
}

TEST(CudaScatterStats, SegmentCsrOffsets) {
  std::mt19937 rng(823);
  for (int64_t M : {int64_t{40}, int64_t{40000}}) {  // one block; a memset and many blocks
    for (int variant = 0; variant < 4; ++variant) {  // good; decreasing; last past E; first negative
      const int64_t rows = 2, E = 5000, K = 3;
      std::vector<int64_t> indptr = random_indptr(rows, M, E, rng);
      if (variant == 1) indptr[M / 2] = indptr[M / 2 + 1] + 1;  // row 0 decreases after column M / 2
      if (variant == 2) indptr[2 * M + 1] = E + 1;
      if (variant == 3) indptr[M + 1] = -1;
      const ReduceShape s{rows, E, M, K};
      const std::vector<float> src = random_values<float>(rows * E * K, rng);
      StreamContext sc;
      DeviceBuffer<float> dsrc(src), dout(static_cast<size_t>(rows * M * K));
      DeviceBuffer<int64_t> dptr(indptr);
      DeviceBuffer<unsigned long long> dstats = stats_buffer();
      pcops::cuda::segment_csr(sc.ctx, Reduce::Sum, s, dsrc.data(), dptr.data(), rows, dout.data(), nullptr,
                               dstats.data());
      const Stats want = host_stats(indptr, rows, M + 1), got = stats_of(dstats);
      EXPECT_EQ(got, want) << "M=" << M << " variant " << variant << ": " << stats_text(got);
      DeviceBuffer<unsigned long long> alone = stats_buffer();
      pcops::cuda::index_value_stats(sc.ctx, dptr.data(), rows, M + 1, alone.data());
      EXPECT_EQ(stats_of(alone), want) << "M=" << M << " variant " << variant;
      if (variant == 0) {
        std::vector<float> cpu(static_cast<size_t>(rows * M * K));
        pcops::cpu::segment_csr({}, Reduce::Sum, s, src.data(), indptr.data(), rows, cpu.data(), nullptr);
        EXPECT_EQ(mismatches(dout.download(), cpu), 0) << "M=" << M;
      }
    }
  }
}

template <class T>
void expect_gathers(int64_t outer, int64_t M, int64_t E, int64_t K, bool shared, std::mt19937& rng) {
  const int64_t rows = shared ? 1 : outer;
  const std::vector<T> src = random_values<T>(outer * M * K, rng);
  const int64_t n = outer * E * K;
  const std::string what = std::string(typeid(T).name()) + " outer=" + std::to_string(outer) + " M=" +
                           std::to_string(M) + " E=" + std::to_string(E) + " K=" + std::to_string(K);
  {  // gather_csr: shape.src_rows = M segments, out_rows = E
    const ReduceShape s{outer, M, E, K};
    const std::vector<int64_t> indptr = random_indptr(rows, M, E, rng);
    std::vector<T> want(static_cast<size_t>(n), T(77));
    pcops::cpu::gather_csr({}, s, src.data(), indptr.data(), rows, want.data());
    StreamContext sc;
    DeviceBuffer<T> dsrc(src), dout(std::vector<T>(static_cast<size_t>(n), T(77)));
    DeviceBuffer<int64_t> dptr(indptr);
    pcops::cuda::gather_csr(sc.ctx, s, dsrc.data(), dptr.data(), rows, dout.data());
    EXPECT_EQ(mismatches(dout.download(), want), 0) << "gather_csr " << what;
  }
  {  // gather_coo: index [rows, E] in [0, M)
    const ReduceShape s{outer, M, E, K};
    const std::vector<int64_t> index = random_index(rows * E, M, 0.3, rng);
    std::vector<T> want(static_cast<size_t>(n), T(77));
    pcops::cpu::gather_coo({}, s, src.data(), index.data(), rows, want.data());
    StreamContext sc;
    DeviceBuffer<T> dsrc(src), dout(std::vector<T>(static_cast<size_t>(n), T(77)));
    DeviceBuffer<int64_t> didx(index);
    pcops::cuda::gather_coo(sc.ctx, s, dsrc.data(), didx.data(), rows, dout.data());
    EXPECT_EQ(mismatches(dout.download(), want), 0) << "gather_coo " << what;
  }
}

TEST(CudaScatter, GatherCsrAndCoo) {
  std::mt19937 rng(806);
  for_each_type([&](auto tag) {
    using T = decltype(tag);
    expect_gathers<T>(1, 40, 3000, 1, true, rng);
    expect_gathers<T>(3, 17, 500, 6, false, rng);
    expect_gathers<T>(3, 17, 500, 6, true, rng);
    expect_gathers<T>(2, 1, 7, 33, false, rng);
  });
}

using pcops_test::expect_error;

TEST(CudaScatter, ShapeErrorsBeforeAnyKernel) {
  StreamContext sc;
  DeviceBuffer<float> src(24), out(24);
  DeviceBuffer<int64_t> idx(24), arg(24);
  idx.fill(0);
  const ReduceShape s{2, 4, 4, 3};
  ScatterParams p;
  using pcops::ErrorKind;
  expect_error(ErrorKind::Value, [&] {
    pcops::cuda::scatter(sc.ctx, p, ReduceShape{-1, 4, 4, 3}, src.data(), idx.data(), 1, 1, out.data(), nullptr);
  }, "negative outer");
  expect_error(ErrorKind::Value, [&] {
    pcops::cuda::scatter(sc.ctx, p, s, src.data(), idx.data(), 3, 1, out.data(), nullptr);
  }, "index rows");
  expect_error(ErrorKind::Value, [&] {
    pcops::cuda::scatter(sc.ctx, p, s, src.data(), idx.data(), 2, 2, out.data(), nullptr);
  }, "index inner");
  expect_error(ErrorKind::Value, [&] {
    pcops::cuda::scatter(sc.ctx, p, s, src.data(), nullptr, 2, 1, out.data(), nullptr);
  }, "null index");
  p.reduce = Reduce::Max;
  expect_error(ErrorKind::Value, [&] {
    pcops::cuda::scatter(sc.ctx, p, s, src.data(), idx.data(), 2, 1, out.data(), nullptr);
  }, "max without arg");
  expect_error(ErrorKind::Value, [&] {
    pcops::cuda::segment_csr(sc.ctx, Reduce::Mul, s, src.data(), idx.data(), 1, out.data(), nullptr);
  }, "segment_csr mul");
  expect_error(ErrorKind::Value, [&] {
    pcops::cuda::segment_csr(sc.ctx, Reduce::Sum, s, src.data(), idx.data(), 3, out.data(), nullptr);
  }, "indptr rows");
  expect_error(ErrorKind::Value, [&] {
    pcops::cuda::gather_csr(sc.ctx, s, src.data(), idx.data(), 5, out.data());
  }, "gather_csr rows");
  expect_error(ErrorKind::Value, [&] {
    pcops::cuda::gather_coo(sc.ctx, s, src.data(), nullptr, 2, out.data());
  }, "gather_coo null index");
  // Nothing ran: the output still holds its sentinels.
  out.fill(5.0f);
  expect_error(ErrorKind::Value, [&] {
    pcops::cuda::scatter(sc.ctx, p, s, src.data(), idx.data(), 2, 1, out.data(), nullptr);
  }, "max without arg");
  for (float v : out.download()) EXPECT_EQ(v, 5.0f);
}

// Out-of-range indices are the binding's to reject; here they must only never be dereferenced
// (compute-sanitizer memcheck on the GPU run): such sources are left out.
TEST(CudaScatter, OutOfRangeIndicesAreSkipped) {
  StreamContext sc;
  const ReduceShape s{1, 4, 2, 1};
  DeviceBuffer<float> src(std::vector<float>{1, 2, 3, 4}), out(2);
  DeviceBuffer<int64_t> idx(std::vector<int64_t>{0, -5, 1, 9}), arg(2);
  ScatterParams p;
  pcops::cuda::scatter(sc.ctx, p, s, src.data(), idx.data(), 1, 1, out.data(), nullptr);
  EXPECT_EQ(out.download(), (std::vector<float>{1, 3}));
  DeviceBuffer<int64_t> ptr(std::vector<int64_t>{-3, 2, 99});
  pcops::cuda::segment_csr(sc.ctx, Reduce::Sum, s, src.data(), ptr.data(), 1, out.data(), nullptr);
  EXPECT_EQ(out.download(), (std::vector<float>{3, 7}));
}

}  // namespace
