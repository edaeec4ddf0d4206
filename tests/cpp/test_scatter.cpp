// scatter / segment_csr / gather against a serial brute-force evaluation of the contract
// (ascending source order from the identity, long lists by the chunk rule), compared bitwise;
// ties, NaN, empty slots, integer wrap-around, bad input, and independence from the thread
// decomposition.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "pcops/error.hpp"
#include "pcops/scatter.hpp"

namespace {

using pcops::Reduce;
using pcops::ReduceShape;

template <class T>
struct Ref {
  std::vector<T> out;
  std::vector<int64_t> arg;
};

// The contract's chunk length (include/pcops/scatter.hpp), written out here so that the oracle
// does not depend on the library's code.
constexpr int64_t kChunk = 2048;

template <class T>
T plain_op(Reduce r, T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return r == Reduce::Mul ? a * b : a + b;
  } else {  // wrap
    using U = std::make_unsigned_t<std::conditional_t<(sizeof(T) < 4), int32_t, T>>;
    return static_cast<T>(r == Reduce::Mul ? static_cast<U>(static_cast<U>(a) * static_cast<U>(b))
                                           : static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  }
}

// One element's fold of contributions xs (from sources es, ascending) from `start`: sum / mean (the
// sum; the division is the caller's) / mul by the chunk rule (chunks of kChunk: chunk 0 from start,
// each later chunk from its first value, partials combined left to right); max / min the strict
// sequential rule (arg E when nothing replaced the start).
template <class T>
std::pair<T, int64_t> fold_list(Reduce r, T start, const std::vector<T>& xs, const std::vector<int64_t>& es, int64_t E) {
  const size_t n = xs.size();
  if (r == Reduce::Max || r == Reduce::Min) {
    T v = start;
    int64_t arg = E;
    for (size_t i = 0; i < n; ++i)
      if (r == Reduce::Max ? xs[i] > v : xs[i] < v) v = xs[i], arg = es[i];
    return {v, arg};
  }
  T acc = start;
  for (size_t i = 0; i < n && i < static_cast<size_t>(kChunk); ++i) acc = plain_op(r, acc, xs[i]);
  for (size_t c0 = kChunk; c0 < n; c0 += kChunk) {
    T part = xs[c0];
    for (size_t i = c0 + 1; i < n && i < c0 + kChunk; ++i) part = plain_op(r, part, xs[i]);
    acc = plain_op(r, acc, part);
  }
  return {acc, E};
}

template <class T>
T identity_of(Reduce r) {
  return r == Reduce::Mul   ? T(1)
         : r == Reduce::Max ? std::numeric_limits<T>::lowest()
         : r == Reduce::Min ? std::numeric_limits<T>::max()
                            : T(0);
}

// The contract, one element at a time. index: [io, E, ii]; start: out's entry values with
// accumulate (nullptr: the identity, and the empty-slot rule).
template <class T>
Ref<T> brute(Reduce r, const ReduceShape& s, const std::vector<T>& src, const std::vector<int64_t>& index,
             int64_t io, int64_t ii, bool floor_mean = true, const std::vector<T>* start = nullptr) {
  const int64_t E = s.src_rows, M = s.out_rows, K = s.inner;
  Ref<T> ref;
  ref.out.assign(static_cast<size_t>(s.outer * M * K), T(0));
  ref.arg.assign(ref.out.size(), E);
  std::vector<T> xs;
  std::vector<int64_t> es;
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = 0; k < K; ++k) {
        const size_t at = static_cast<size_t>((o * M + m) * K + k);
        xs.clear();
        es.clear();
        for (int64_t e = 0; e < E; ++e) {
          const int64_t dst = index[((io == 1 ? 0 : o) * E + e) * ii + (ii == 1 ? 0 : k)];
          if (dst != m) continue;
          xs.push_back(src[(o * E + e) * K + k]);
          es.push_back(e);
        }
        auto [v, arg] = fold_list<T>(r, start ? (*start)[at] : identity_of<T>(r), xs, es, E);
        const int64_t cnt = static_cast<int64_t>(xs.size());
        if (r == Reduce::Mean) {
          if constexpr (std::is_floating_point_v<T>) {
            v = v / static_cast<T>(cnt > 0 ? cnt : 1);
          } else {
            const long double q = static_cast<long double>(v) / (cnt > 0 ? cnt : 1);
            v = static_cast<T>(floor_mean ? std::floor(q) : std::trunc(q));
          }
        }
        if (!start && (r == Reduce::Max || r == Reduce::Min) && arg == E) v = T(0);
        ref.out[at] = v;
        ref.arg[at] = arg;
      }
  return ref;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// A context whose parallel_for runs chunks of the given grain in reverse order.
pcops::CpuContext reversed_ctx() {
  pcops::CpuContext ctx;
  ctx.num_threads = 7;
  ctx.parallel_for = [](int64_t b, int64_t e, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    const int64_t g = std::max<int64_t>(grain, 1);
    for (int64_t hi = e; hi > b;) {
      const int64_t lo = std::max(b, hi - g);
      fn(lo, hi);
      hi = lo;
    }
  };
  return ctx;
}

// One thread: scatter takes its ungrouped path (sources walked in order, one task per column block).
pcops::CpuContext single_ctx() {
  pcops::CpuContext ctx;
  ctx.num_threads = 1;
  return ctx;
}

pcops::CpuContext variant_ctx(int variant) {
  return variant == 0 ? pcops::CpuContext{} : variant == 1 ? reversed_ctx() : single_ctx();
}

template <class T>
void run_case(Reduce r, const ReduceShape& s, int64_t io, int64_t ii, unsigned seed, bool concentrated) {
  std::mt19937 rng(seed);
  std::vector<T> src(static_cast<size_t>(s.outer * s.src_rows * s.inner));
  std::uniform_int_distribution<int> small(-4, 4);  // many exact ties
  for (auto& x : src) x = static_cast<T>(small(rng)) / T(2) + (std::is_floating_point_v<T> ? T(0.1) * small(rng) : T(0));
  std::vector<int64_t> index(static_cast<size_t>(io * s.src_rows * ii));
  std::uniform_int_distribution<int64_t> dst(0, s.out_rows - 1);
  for (auto& v : index) v = (concentrated && rng() % 10 != 0) ? 1 : dst(rng);
  const Ref<T> ref = brute<T>(r, s, src, index, io, ii);
  for (int variant = 0; variant < 3; ++variant) {
    std::vector<T> out(ref.out.size(), T(77));  // sentinel
    std::vector<int64_t> arg(ref.out.size(), -9);
    pcops::ScatterParams p;
    p.reduce = r;
    const pcops::CpuContext ctx = variant_ctx(variant);
    pcops::cpu::scatter(ctx, p, s, src.data(), index.data(), io, ii, out.data(), arg.data());
    EXPECT_TRUE(same_bits(out, ref.out)) << "reduce " << int(r) << " variant " << variant;
    if (r == Reduce::Max || r == Reduce::Min) EXPECT_EQ(arg, ref.arg);
  }
}

TEST(Scatter, AllReductionsMatchBruteForce) {
  const Reduce all[] = {Reduce::Sum, Reduce::Mean, Reduce::Mul, Reduce::Min, Reduce::Max};
  unsigned seed = 1;
  for (Reduce r : all) {
    for (bool conc : {false, true}) {
      // 1-D index shared by all outer rows; per-outer index; per-element index.
      run_case<float>(r, {3, 200, 17, 5}, 1, 1, seed++, conc);
      run_case<double>(r, {2, 500, 9, 40}, 2, 1, seed++, conc);
      run_case<float>(r, {2, 300, 11, 33}, 2, 33, seed++, conc);
      run_case<int64_t>(r, {1, 400, 13, 3}, 1, 1, seed++, conc);
      run_case<int32_t>(r, {2, 100, 7, 20}, 2, 20, seed++, conc);
      run_case<float>(r, {1, 20000, 3, 64}, 1, 1, seed++, conc);  // heavy rows split by columns
      // Lists past the chunk length with several outer rows (own / shared index rows).
      run_case<float>(r, {2, 5000, 4, 20}, 2, 1, seed++, conc);
      run_case<double>(r, {3, 4200, 3, 2}, 1, 1, seed++, conc);
    }
  }
}

TEST(Scatter, TiesTakeSmallestIndexAndNanNeverWins) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> src{1, nan, 3, 3, nan, -std::numeric_limits<float>::infinity()};
  const std::vector<int64_t> idx{0, 0, 0, 0, 1, 2};
  std::vector<float> out(4);
  std::vector<int64_t> arg(4);
  pcops::ScatterParams p;
  p.reduce = Reduce::Max;
  pcops::cpu::scatter({}, p, {1, 6, 4, 1}, src.data(), idx.data(), 1, 1, out.data(), arg.data());
  EXPECT_EQ(out, (std::vector<float>{3, 0, 0, 0}));
  EXPECT_EQ(arg, (std::vector<int64_t>{2, 6, 6, 6}));  // NaN-only, -inf-only and empty slots: sentinel
}

TEST(Scatter, AccumulateStartsFromOut) {
  const std::vector<double> src{1, 2, 3};
  const std::vector<int64_t> idx{0, 0, 1};
  std::vector<double> out{10, 2.5, -1};
  std::vector<int64_t> arg(3);
  pcops::ScatterParams p;
  p.reduce = Reduce::Max;
  p.accumulate = true;
  pcops::cpu::scatter({}, p, {1, 3, 3, 1}, src.data(), idx.data(), 1, 1, out.data(), arg.data());
  EXPECT_EQ(out, (std::vector<double>{10, 3, -1}));  // no empty-slot rule with accumulate
  EXPECT_EQ(arg, (std::vector<int64_t>{3, 2, 3}));
}

TEST(Scatter, IntegerWrapAndMeanRounding) {
  const std::vector<int8_t> src{100, 100, -7, 2};
  const std::vector<int64_t> idx{0, 0, 1, 1};
  std::vector<int8_t> out(2);
  pcops::ScatterParams p;
  pcops::cpu::scatter({}, p, {1, 4, 2, 1}, src.data(), idx.data(), 1, 1, out.data(), nullptr);
  EXPECT_EQ(out[0], static_cast<int8_t>(-56));  // 200 wraps
  p.reduce = Reduce::Mean;
  const std::vector<int64_t> s64{-7, 2, 5};
  const std::vector<int64_t> i64{0, 0, 1};
  std::vector<int64_t> o64(2);
  pcops::cpu::scatter({}, p, {1, 3, 2, 1}, s64.data(), i64.data(), 1, 1, o64.data(), nullptr);
  EXPECT_EQ(o64, (std::vector<int64_t>{-3, 5}));  // floor(-5 / 2)
  p.integer_mean = pcops::IntegerMean::Trunc;
  pcops::cpu::scatter({}, p, {1, 3, 2, 1}, s64.data(), i64.data(), 1, 1, o64.data(), nullptr);
  EXPECT_EQ(o64, (std::vector<int64_t>{-2, 5}));
  const std::vector<int64_t> big{std::numeric_limits<int64_t>::max(), 1};
  p.reduce = Reduce::Sum;
  std::vector<int64_t> ob(1);
  pcops::cpu::scatter({}, p, {1, 2, 1, 1}, big.data(), std::vector<int64_t>{0, 0}.data(), 1, 1, ob.data(), nullptr);
  EXPECT_EQ(ob[0], std::numeric_limits<int64_t>::min());
}

TEST(Scatter, BadInput) {
  const std::vector<float> src{1, 2};
  std::vector<float> out(2);
  pcops::ScatterParams p;
  const std::vector<int64_t> neg{0, -1}, big{0, 2}, unsorted{1, 0};
  EXPECT_THROW(pcops::cpu::scatter({}, p, {1, 2, 2, 1}, src.data(), neg.data(), 1, 1, out.data(), nullptr),
               pcops::Error);
  EXPECT_THROW(pcops::cpu::scatter({}, p, {1, 2, 2, 1}, src.data(), big.data(), 1, 1, out.data(), nullptr),
               pcops::Error);
  p.sorted = true;
  EXPECT_THROW(pcops::cpu::scatter({}, p, {1, 2, 2, 1}, src.data(), unsorted.data(), 1, 1, out.data(), nullptr),
               pcops::Error);
  try {
    pcops::cpu::scatter({}, {}, {1, 2, 2, 1}, src.data(), big.data(), 1, 1, out.data(), nullptr);
  } catch (const pcops::Error& e) {
    EXPECT_EQ(e.kind(), pcops::ErrorKind::Index);
  }
  // Output sizes that overflow int64.
  EXPECT_THROW(pcops::cpu::scatter({}, {}, {int64_t{1} << 40, 0, int64_t{1} << 40, 1}, src.data(), nullptr, 1, 1,
                                   out.data(), nullptr),
               pcops::Error);
  const std::vector<int64_t> ptr_bad{0, 2, 1};
  EXPECT_THROW(pcops::cpu::segment_csr({}, Reduce::Sum, {1, 2, 2, 1}, src.data(), ptr_bad.data(), 1, out.data(),
                                       nullptr),
               pcops::Error);
}

TEST(SegmentCsr, MatchesScatterOfTheSameGroups) {
  std::mt19937 rng(5);
  const int64_t E = 1000, M = 60, K = 7;
  std::vector<int64_t> ptr(M + 1, 0);
  for (int64_t m = 1; m <= M; ++m) ptr[m] = ptr[m - 1] + (m % 7 == 0 ? 0 : static_cast<int64_t>(rng() % 30));
  ptr[M] = std::min<int64_t>(ptr[M], E);
  for (int64_t m = 1; m <= M; ++m) ptr[m] = std::min(ptr[m], E);
  std::vector<double> src(E * K);
  std::normal_distribution<double> nd;
  for (auto& x : src) x = nd(rng);
  // Equivalent index for the covered rows (rows past ptr[M] contribute nowhere: give them their
  // own trailing output row and drop it).
  std::vector<int64_t> idx(E, M);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t e = ptr[m]; e < ptr[m + 1]; ++e) idx[e] = m;
  for (Reduce r : {Reduce::Sum, Reduce::Mean, Reduce::Min, Reduce::Max}) {
    const Ref<double> ref = brute<double>(r, {1, E, M + 1, K}, src, idx, 1, 1);
    std::vector<double> out(M * K, -5);
    std::vector<int64_t> arg(M * K, -5);
    pcops::cpu::segment_csr(reversed_ctx(), r, {1, E, M, K}, src.data(), ptr.data(), 1, out.data(), arg.data());
    EXPECT_TRUE(same_bits(out, std::vector<double>(ref.out.begin(), ref.out.begin() + M * K)));
    if (r == Reduce::Min || r == Reduce::Max)
      EXPECT_EQ(arg, std::vector<int64_t>(ref.arg.begin(), ref.arg.begin() + M * K));
  }
  // gather_csr is the inverse broadcast.
  std::vector<double> seg(M * K);
  for (size_t i = 0; i < seg.size(); ++i) seg[i] = static_cast<double>(i);
  std::vector<double> g(E * K, -1);
  pcops::cpu::gather_csr({}, {1, M, E, K}, seg.data(), ptr.data(), 1, g.data());
  for (int64_t m = 0; m < M; ++m)
    for (int64_t e = ptr[m]; e < ptr[m + 1]; ++e)
      for (int64_t k = 0; k < K; ++k) EXPECT_EQ(g[e * K + k], seg[m * K + k]);
  for (int64_t e = ptr[M]; e < E; ++e) EXPECT_EQ(g[e * K], -1);  // uncovered rows untouched
  std::vector<double> gc(E * K, -1);
  pcops::cpu::gather_coo({}, {1, M + 1, E, K}, [&] {
    std::vector<double> s2(seg);
    s2.resize((M + 1) * K, 0);
    return s2;
  }().data(), idx.data(), 1, gc.data());
  for (int64_t e = 0; e < ptr[M]; ++e) EXPECT_EQ(gc[e * K], g[e * K]);
}

// The vectorised max / min row (16-column register blocks plus a generic tail): every column count
// around the block width, NaN / +-0 / +-inf / lowest() contributions and NaN / finite start values
// against the contract's sequential rule written out here.
TEST(Scatter, MaxMinColumnBlocksFollowTheSequentialRule) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const float specials[] = {nan, 0.0f, -0.0f, inf, -inf, std::numeric_limits<float>::lowest(), 1.5f, -1.5f};
  std::mt19937 rng(4242);
  for (int64_t K : {1, 4, 15, 16, 17, 31, 32, 33, 48, 70}) {
    for (Reduce r : {Reduce::Max, Reduce::Min}) {
      for (bool acc : {false, true}) {
        const int64_t E = 300, M = 7;
        std::vector<float> src(static_cast<size_t>(E * K));
        for (auto& x : src) x = rng() % 3 == 0 ? specials[rng() % 8] : static_cast<float>(static_cast<int>(rng() % 9) - 4);
        std::vector<int64_t> idx(static_cast<size_t>(E));
        for (auto& v : idx) v = static_cast<int64_t>(rng() % (M - 1));  // row M - 1 stays empty
        std::vector<float> start(static_cast<size_t>(M * K));
        for (auto& x : start) x = rng() % 4 == 0 ? nan : static_cast<float>(static_cast<int>(rng() % 5) - 2);
        // The rule: ascending e, replace on a strict compare; no replacement: arg E, value 0
        // (without a start) or the start value.
        std::vector<float> want(start.size());
        std::vector<int64_t> want_arg(start.size());
        for (int64_t m = 0; m < M; ++m) {
          for (int64_t k = 0; k < K; ++k) {
            float v = acc ? start[m * K + k]
                          : (r == Reduce::Max ? std::numeric_limits<float>::lowest() : std::numeric_limits<float>::max());
            int64_t a = E;
            for (int64_t e = 0; e < E; ++e) {
              if (idx[e] != m) continue;
              const float x = src[e * K + k];
              if (r == Reduce::Max ? x > v : x < v) {
                v = x;
                a = e;
              }
            }
            want[m * K + k] = (!acc && a == E) ? 0.0f : v;
            want_arg[m * K + k] = a;
          }
        }
        for (int variant : {0, 1, 2}) {  // direct (two threads, one thread) and grouped (7 threads) paths
          std::vector<float> out = acc ? start : std::vector<float>(start.size(), 77.0f);
          std::vector<int64_t> arg(start.size(), -9);
          pcops::ScatterParams p;
          p.reduce = r;
          p.accumulate = acc;
          pcops::cpu::scatter(variant_ctx(variant), p, {1, E, M, K}, src.data(), idx.data(), 1, 1, out.data(),
                              arg.data());
          EXPECT_TRUE(same_bits(out, want)) << "K " << K << " reduce " << int(r) << " accumulate " << acc;
          EXPECT_EQ(arg, want_arg) << "K " << K << " reduce " << int(r) << " accumulate " << acc;
        }
      }
    }
  }
}

// Lists around and far beyond the chunk length: C - 1, C, C + 1, 3C + 5 and ~100k contributions to
// one destination (interleaved with others), every reduction, with and without start values,
// shared / per-element / sorted (segment_csr) destinations, NaN inside a long list, against the
// chunked oracle; the default, a reversed 7-thread (grouped path) and a 1-thread (ungrouped path)
// decomposition.
template <class T>
void long_list_case(Reduce r, int64_t n_long, int64_t K, bool accumulate, unsigned seed) {
  std::mt19937 rng(seed);
  const int64_t M = 5, E = n_long + n_long / 3 + 7;
  std::vector<int64_t> idx(static_cast<size_t>(E));
  // Destination 2 takes exactly n_long sources spread over [0, E); the others share the rest.
  std::vector<int64_t> order(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) order[e] = e;
  std::shuffle(order.begin(), order.end(), rng);
  for (int64_t i = 0; i < E; ++i) idx[order[i]] = i < n_long ? 2 : (i % 2 == 0 ? 0 : 4);
  std::vector<T> src(static_cast<size_t>(E * K));
  std::uniform_real_distribution<double> u(-1, 1);
  for (auto& x : src) {
    if constexpr (std::is_floating_point_v<T>) {
      // Mixed magnitudes (so the order of the adds shows in the bits); mul: factors near 1.
      const int scale = static_cast<int>(rng() % 20);
      x = r == Reduce::Mul ? static_cast<T>(1 + u(rng) / 256) : static_cast<T>(std::ldexp(u(rng), scale));
      if (r != Reduce::Mul && rng() % 97 == 0) x = static_cast<T>(rng() % 5) - T(2);  // exact ties
    } else {
      x = static_cast<T>(static_cast<int>(rng() % 201) - 100);
    }
  }
  if constexpr (std::is_floating_point_v<T>) {
    if (r == Reduce::Max || r == Reduce::Min) {  // NaN at a chunk start and inside the long list
      for (int64_t i = 0, seen = 0; i < E; ++i)
        if (idx[i] == 2 && (seen++ == kChunk || seen == 7)) src[i * K] = std::numeric_limits<T>::quiet_NaN();
    }
  }
  std::vector<T> start(static_cast<size_t>(M * K));
  for (auto& x : start) x = static_cast<T>(static_cast<int>(rng() % 7) - 3);
  const ReduceShape s{1, E, M, K};
  for (int per_element = 0; per_element < 2; ++per_element) {
    // Per-element destinations: the same index for every column but column 0, which is rotated.
    std::vector<int64_t> index = idx;
    int64_t ii = 1;
    if (per_element) {
      ii = K;
      index.assign(static_cast<size_t>(E * K), 0);
      for (int64_t e = 0; e < E; ++e)
        for (int64_t k = 0; k < K; ++k) index[e * K + k] = k == 0 ? (idx[e] + 1) % M : idx[e];
    }
    const Ref<T> ref = brute<T>(r, s, src, index, 1, ii, true, accumulate ? &start : nullptr);
    for (int variant = 0; variant < 3; ++variant) {
      std::vector<T> out = accumulate ? start : std::vector<T>(start.size(), T(77));
      std::vector<int64_t> arg(start.size(), -9);
      pcops::ScatterParams p;
      p.reduce = r;
      p.accumulate = accumulate;
      const pcops::CpuContext ctx = variant_ctx(variant);
      pcops::cpu::scatter(ctx, p, s, src.data(), index.data(), 1, ii, out.data(), arg.data());
      EXPECT_TRUE(same_bits(out, ref.out)) << "reduce " << int(r) << " n " << n_long << " K " << K << " accumulate "
                                           << accumulate << " per_element " << per_element << " variant " << variant;
      if (r == Reduce::Max || r == Reduce::Min) EXPECT_EQ(arg, ref.arg);
    }
  }
  // segment_csr of the same groups sorted (stable: ascending e inside each destination).
  if (r != Reduce::Mul && !accumulate) {
    std::vector<int64_t> perm(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) perm[e] = e;
    std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return idx[a] < idx[b]; });
    std::vector<T> sorted_src(src.size());
    std::vector<int64_t> sorted_idx(static_cast<size_t>(E)), ptr(M + 1, 0);
    for (int64_t i = 0; i < E; ++i) {
      sorted_idx[i] = idx[perm[i]];
      std::copy_n(src.begin() + perm[i] * K, K, sorted_src.begin() + i * K);
      ++ptr[sorted_idx[i] + 1];
    }
    for (int64_t m = 0; m < M; ++m) ptr[m + 1] += ptr[m];
    const Ref<T> ref = brute<T>(r, s, sorted_src, sorted_idx, 1, 1, false);
    std::vector<T> out(start.size(), T(77));
    std::vector<int64_t> arg(start.size(), -9);
    pcops::cpu::segment_csr(reversed_ctx(), r, s, sorted_src.data(), ptr.data(), 1, out.data(), arg.data());
    EXPECT_TRUE(same_bits(out, ref.out)) << "segment_csr reduce " << int(r) << " n " << n_long;
    if (r == Reduce::Max || r == Reduce::Min) EXPECT_EQ(arg, ref.arg);
  }
}

TEST(Scatter, LongListsFollowTheChunkRule) {
  const Reduce all[] = {Reduce::Sum, Reduce::Mean, Reduce::Mul, Reduce::Min, Reduce::Max};
  unsigned seed = 100;
  for (Reduce r : all) {
    for (int64_t n : {kChunk - 1, kChunk, kChunk + 1, 3 * kChunk + 5}) {
      for (bool acc : {false, true}) {
        long_list_case<float>(r, n, 3, acc, seed++);
        long_list_case<double>(r, n, 2, acc, seed++);
      }
    }
    long_list_case<int32_t>(r, 2 * kChunk + 3, 2, false, seed++);
    long_list_case<float>(r, 100000, 33, false, seed++);  // many chunks, column blocks
  }
}

// The chunk rule is visible in the bits: 1e8 followed by ones. A serial float fold loses every 1
// (1e8 + 1 rounds back to 1e8); the chunked fold adds chunk 1's exact partial 2048.
TEST(Scatter, ChunkRuleExample) {
  const int64_t E = 2 * kChunk;
  std::vector<float> src(static_cast<size_t>(E), 1.0f);
  src[0] = 1e8f;
  const std::vector<int64_t> idx(static_cast<size_t>(E), 0);
  float out = 0;
  pcops::cpu::scatter({}, {}, {1, E, 1, 1}, src.data(), idx.data(), 1, 1, &out, nullptr);
  EXPECT_EQ(out, 1e8f + 2048.0f);
  float serial = 0;
  for (float x : src) serial += x;
  EXPECT_EQ(serial, 1e8f);
  EXPECT_NE(out, serial);
}

}  // namespace
