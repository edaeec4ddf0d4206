// point_conv (MVMR) and its backward against loops written from the contract's evaluation order
// (bitwise) and a float64 gather-GEMM-scatter reference; independence from the triplet order and
// the thread count; empty sets; every validation error.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <vector>

#include "pcops/error.hpp"
#include "pcops/point_conv.hpp"
#include "triplet_cases.hpp"

namespace {

using Triplet = std::array<int64_t, 3>;

struct Case {
  pcops::PointConvShape s;
  std::vector<float> f, w, g;  // features [N_in, C_in], weights [K, C_out, C_in], grad [N_out, C_out]
  std::vector<int64_t> t;      // [T, 3]
};

Case random_case(std::mt19937& rng, int64_t n_in, int64_t n_out, int64_t ci, int64_t co, int64_t K,
                 int64_t T) {
  Case c;
  c.s = pcops::PointConvShape{n_in, n_out, ci, co, K, T};
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  c.f.resize(n_in * ci);
  c.w.resize(K * co * ci);
  c.g.resize(n_out * co);
  for (auto* v : {&c.f, &c.w, &c.g})
    for (float& x : *v) x = u(rng);
  std::uniform_int_distribution<int64_t> pi(0, n_out - 1), pj(0, n_in - 1), pk(0, K - 1);
  for (int64_t r = 0; r < T; ++r) {
    c.t.push_back(pi(rng));
    c.t.push_back(pj(rng));
    c.t.push_back(pk(rng));
  }
  // Some duplicated triplets: each counts.
  for (int64_t r = 0; r + 1 < T; r += 7) std::copy_n(&c.t[r * 3], 3, &c.t[(r + 1) * 3]);
  return c;
}

std::vector<Triplet> rows_of(const Case& c) {
  std::vector<Triplet> v(c.s.triplets);
  for (int64_t r = 0; r < c.s.triplets; ++r) v[r] = {c.t[r * 3], c.t[r * 3 + 1], c.t[r * 3 + 2]};
  return v;
}

// The contract's orders, written directly.
std::vector<float> oracle_forward(const Case& c) {
  const auto& s = c.s;
  auto rows = rows_of(c);
  std::sort(rows.begin(), rows.end(), [](const Triplet& a, const Triplet& b) {
    return std::tie(a[0], a[2], a[1]) < std::tie(b[0], b[2], b[1]);
  });
  std::vector<float> out(s.num_out * s.channels_out, 0.0f);
  for (const auto& [i, j, k] : rows)
    for (int64_t o = 0; o < s.channels_out; ++o) {
      float acc = out[i * s.channels_out + o];
      for (int64_t ci = 0; ci < s.channels_in; ++ci) {
        const float p = c.w[(k * s.channels_out + o) * s.channels_in + ci] * c.f[j * s.channels_in + ci];
        acc = acc + p;
      }
      out[i * s.channels_out + o] = acc;
    }
  return out;
}

std::vector<float> oracle_grad_features(const Case& c) {
  const auto& s = c.s;
  auto rows = rows_of(c);
  std::sort(rows.begin(), rows.end(), [](const Triplet& a, const Triplet& b) {
    return std::tie(a[1], a[2], a[0]) < std::tie(b[1], b[2], b[0]);
  });
  std::vector<float> out(s.num_in * s.channels_in, 0.0f);
  for (const auto& [i, j, k] : rows)
    for (int64_t ci = 0; ci < s.channels_in; ++ci) {
      float acc = out[j * s.channels_in + ci];
      for (int64_t o = 0; o < s.channels_out; ++o) {
        const float p = c.w[(k * s.channels_out + o) * s.channels_in + ci] * c.g[i * s.channels_out + o];
        acc = acc + p;
      }
      out[j * s.channels_in + ci] = acc;
    }
  return out;
}

// Kernel k's triplets in (i, j) order, in pieces of L (pcops::core::vvor_piece_length, or `L` when
// given): each piece folded from +0, the pieces' sums folded in order from +0.
std::vector<float> oracle_grad_weights(const Case& c, int64_t L = 0) {
  const auto& s = c.s;
  if (L == 0) L = pcops::core::vvor_piece_length(s);
  auto rows = rows_of(c);
  std::sort(rows.begin(), rows.end(), [](const Triplet& a, const Triplet& b) {
    return std::tie(a[2], a[0], a[1]) < std::tie(b[2], b[0], b[1]);
  });
  const int64_t M = s.channels_out * s.channels_in;
  std::vector<float> out(s.kernels * M, 0.0f), piece(M, 0.0f);
  size_t r = 0;
  for (int64_t k = 0; k < s.kernels; ++k) {
    size_t end = r;
    while (end < rows.size() && rows[end][2] == k) ++end;
    for (size_t a = r; a < end; a += static_cast<size_t>(L)) {
      std::fill(piece.begin(), piece.end(), 0.0f);
      for (size_t q = a; q < std::min(end, a + static_cast<size_t>(L)); ++q) {
        const auto [i, j, kk] = rows[q];
        for (int64_t o = 0; o < s.channels_out; ++o)
          for (int64_t ci = 0; ci < s.channels_in; ++ci) {
            const float p = c.g[i * s.channels_out + o] * c.f[j * s.channels_in + ci];
            piece[o * s.channels_in + ci] = piece[o * s.channels_in + ci] + p;
          }
      }
      for (int64_t e = 0; e < M; ++e) out[k * M + e] = out[k * M + e] + piece[e];
    }
    r = end;
  }
  return out;
}

// float64 gather-GEMM-scatter: gather F rows per triplet, multiply by W_k, scatter-add.
struct Reference {
  std::vector<double> out, gf, gw;
  std::vector<double> abs_out, abs_gf, abs_gw;  // the same sums of absolute terms (error bounds)
};
Reference reference64(const Case& c) {
  const auto& s = c.s;
  Reference r;
  r.out.assign(s.num_out * s.channels_out, 0.0);
  r.gf.assign(s.num_in * s.channels_in, 0.0);
  r.gw.assign(s.kernels * s.channels_out * s.channels_in, 0.0);
  r.abs_out = r.out;
  r.abs_gf = r.gf;
  r.abs_gw = r.gw;
  for (const auto& [i, j, k] : rows_of(c))
    for (int64_t o = 0; o < s.channels_out; ++o)
      for (int64_t ci = 0; ci < s.channels_in; ++ci) {
        const double w = c.w[(k * s.channels_out + o) * s.channels_in + ci];
        const double f = c.f[j * s.channels_in + ci], g = c.g[i * s.channels_out + o];
        r.out[i * s.channels_out + o] += w * f;
        r.gf[j * s.channels_in + ci] += w * g;
        r.gw[(k * s.channels_out + o) * s.channels_in + ci] += g * f;
        r.abs_out[i * s.channels_out + o] += std::abs(w * f);
        r.abs_gf[j * s.channels_in + ci] += std::abs(w * g);
        r.abs_gw[(k * s.channels_out + o) * s.channels_in + ci] += std::abs(g * f);
      }
  return r;
}

void expect_bitwise(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t n = 0; n < a.size(); ++n) {
    uint32_t x, y;
    std::memcpy(&x, &a[n], 4);
    std::memcpy(&y, &b[n], 4);
    ASSERT_EQ(x, y) << what << " differs at " << n << ": " << a[n] << " vs " << b[n];
  }
}

// Recursive float32 summation of n terms: |error| <= n * 2^-24 * (sum of |terms|) (first order).
void expect_close(const std::vector<float>& a, const std::vector<double>& b, const std::vector<double>& abs_sum,
                  int64_t terms, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  const double u = std::ldexp(1.0, -24) * static_cast<double>(terms + 1);
  for (size_t n = 0; n < a.size(); ++n) ASSERT_LE(std::abs(a[n] - b[n]), u * abs_sum[n]) << what << " at " << n;
}

struct Result {
  std::vector<float> out, gf, gw;
};
Result run(const Case& c, int threads) {
  const auto& s = c.s;
  pcops::CpuContext ctx;
  ctx.num_threads = threads;
  Result r;
  r.out.assign(s.num_out * s.channels_out, std::nanf(""));  // sentinel: an unwritten slot fails
  r.gf.assign(s.num_in * s.channels_in, std::nanf(""));
  r.gw.assign(s.kernels * s.channels_out * s.channels_in, std::nanf(""));
  pcops::cpu::point_conv(ctx, s, c.f.data(), c.w.data(), c.t.data(), r.out.data());
  pcops::cpu::point_conv_backward(ctx, s, c.g.data(), c.f.data(), c.w.data(), c.t.data(), r.gf.data(),
                                  r.gw.data());
  return r;
}

TEST(PointConv, MatchesContractOrderAndFloat64Reference) {
  std::mt19937 rng(7);
  // Channel counts around the vectorisation widths and the grad-weights block of 32 output channels;
  // matrices past 32 KB, which the MVMR takes in blocks of 64 (100 x 90, and 90 x 100 for
  // grad_features) or 16 destination channels (300 x 40; 40 x 300 in 64s).
  const std::array<std::array<int64_t, 6>, 8> shapes{{
      {50, 40, 3, 5, 27, 600}, {64, 64, 16, 17, 8, 1000}, {30, 10, 1, 1, 1, 90},
      {20, 25, 33, 9, 27, 300}, {5, 7, 8, 16, 2, 3}, {40, 30, 7, 70, 3, 500},
      {60, 50, 100, 90, 5, 700}, {40, 45, 300, 40, 3, 300}}};
  for (const auto& sh : shapes) {
    const Case c = random_case(rng, sh[0], sh[1], sh[2], sh[3], sh[4], sh[5]);
    const Result r = run(c, 4);
    expect_bitwise(r.out, oracle_forward(c), "forward");
    expect_bitwise(r.gf, oracle_grad_features(c), "grad_features");
    expect_bitwise(r.gw, oracle_grad_weights(c), "grad_weights");
    const Reference ref = reference64(c);
    // Terms per element: at most T (triplets) times the channels folded per triplet.
    const int64_t terms = sh[5] * std::max(sh[2], sh[3]);
    expect_close(r.out, ref.out, ref.abs_out, terms, "forward vs float64");
    expect_close(r.gf, ref.gf, ref.abs_gf, terms, "grad_features vs float64");
    expect_close(r.gw, ref.gw, ref.abs_gw, terms, "grad_weights vs float64");
  }
}

TEST(PointConv, IndependentOfTripletOrderAndThreads) {
  std::mt19937 rng(11);
  Case c = random_case(rng, 200, 150, 12, 20, 27, 4000);
  const Result base = run(c, 1);
  for (int threads : {2, 3, 8}) {
    const Result r = run(c, threads);
    expect_bitwise(r.out, base.out, "forward threads");
    expect_bitwise(r.gf, base.gf, "grad_features threads");
    expect_bitwise(r.gw, base.gw, "grad_weights threads");
  }
  std::vector<Triplet> rows = rows_of(c);
  std::shuffle(rows.begin(), rows.end(), rng);
  for (size_t r = 0; r < rows.size(); ++r) std::copy_n(rows[r].begin(), 3, &c.t[r * 3]);
  const Result shuffled = run(c, 4);
  expect_bitwise(shuffled.out, base.out, "forward shuffled");
  expect_bitwise(shuffled.gf, base.gf, "grad_features shuffled");
  expect_bitwise(shuffled.gw, base.gw, "grad_weights shuffled");
}

// The grouping of keys wider than 64 bits (a comparison sort of the (group, a, b) tuples; shapes
// that need it hold about 2^31 points) forced by PCOPS_CPU_POINT_CONV_GROUPING=tuples on a small
// case: the contract's bits, for every thread count; a bad value of the variable is rejected.
struct GroupingEnv {  // PCOPS_CPU_POINT_CONV_GROUPING for one scope
  explicit GroupingEnv(const char* value) { setenv("PCOPS_CPU_POINT_CONV_GROUPING", value, 1); }
  ~GroupingEnv() { unsetenv("PCOPS_CPU_POINT_CONV_GROUPING"); }
};

TEST(PointConv, WideKeyGroupingGivesTheContract) {
  std::mt19937 rng(61);
  const Case c = random_case(rng, 300, 260, 9, 12, 27, 8000);
  const std::vector<float> out = oracle_forward(c), gf = oracle_grad_features(c), gw = oracle_grad_weights(c);
  {
    const GroupingEnv tuples("tuples");
    for (int threads : {1, 3}) {
      const Result r = run(c, threads);
      expect_bitwise(r.out, out, "forward");
      expect_bitwise(r.gf, gf, "grad_features");
      expect_bitwise(r.gw, gw, "grad_weights");
    }
  }
  const GroupingEnv bad("sorted");
  EXPECT_THROW(run(c, 1), std::invalid_argument);
}

// The three groupings (segmented 32-bit keys placed by counting, packed 64-bit keys in one radix
// sort, tuples) walk the triplets in the same order, so the same bits, for any thread count:
// many rows (the weight gradient's keys then hold i in blocks of 64 rows), groups longer than the
// insertion sort takes (one kernel cell), many cells.
TEST(PointConv, GroupingsGiveTheSameBits) {
  std::mt19937 rng(67);
  using Shape = std::array<int64_t, 6>;  // n_in, n_out, C_in, C_out, K, T
  for (const Shape& sh : {Shape{900, 700, 5, 7, 27, 20000}, Shape{300, 150, 4, 3, 1, 30000},
                          Shape{200, 2000, 3, 5, 125, 9000}}) {
    SCOPED_TRACE(testing::Message() << "rows " << sh[0] << " / " << sh[1] << ", K " << sh[4]);
    const Case c = random_case(rng, sh[0], sh[1], sh[2], sh[3], sh[4], sh[5]);
    const Result base = run(c, 1);
    for (const char* grouping : {"segmented", "packed", "tuples"})
      for (int threads : {1, 3}) {
        const GroupingEnv use(grouping);
        const Result r = run(c, threads);
        expect_bitwise(r.out, base.out, grouping);
        expect_bitwise(r.gf, base.gf, grouping);
        expect_bitwise(r.gw, base.gw, grouping);
      }
  }
}

// Groupings made ahead (point_conv_group) and handed to the calls give the bits of the calls that
// sort, in the three forms and for any thread count; ones made from other triplets of the same
// shape give those triplets' results (the calls read the kept keys); a step of an empty product
// keeps none; point_conv_group checks the triplets' ranges first (nothing written) and its memory.
TEST(PointConv, KeptGroupingsGiveTheSameBits) {
  std::mt19937 rng(71);
  using pcops::PointConvStep;
  const PointConvStep steps[] = {PointConvStep::kForward, PointConvStep::kGradFeatures, PointConvStep::kGradWeights};
  const Case c = random_case(rng, 900, 700, 5, 7, 27, 20000);
  Case other = random_case(rng, 900, 700, 5, 7, 27, 20000);
  other.f = c.f, other.w = c.w, other.g = c.g;
  for (const char* grouping : {"segmented", "packed", "tuples"}) {
    SCOPED_TRACE(grouping);
    const GroupingEnv use(grouping);
    for (const Case* from : {&c, static_cast<const Case*>(&other)}) {
      const Result want = run(*from, 1);
      std::vector<std::vector<uint64_t>> kept;  // 8-byte aligned
      const void* ptr[3] = {nullptr, nullptr, nullptr};
      for (int n = 0; n < 3; ++n) {
        const pcops::PointConvGrouping info = pcops::cpu::point_conv_grouping(c.s, steps[n]);
        ASSERT_GT(info.bytes, 0u);
        kept.emplace_back((info.bytes + 7) / 8, ~uint64_t{0});
        pcops::cpu::point_conv_group({}, c.s, steps[n], from->t.data(), kept.back().data());
        ptr[n] = kept.back().data();
      }
      // The forward reads the weight gradient's grouping where that one is segmented (one id, one
      // kept buffer); the features gradient has its own.
      const auto id = [&](PointConvStep step) { return pcops::cpu::point_conv_grouping(c.s, step).id; };
      EXPECT_EQ(id(PointConvStep::kForward) == id(PointConvStep::kGradWeights), std::strcmp(grouping, "segmented") == 0);
      EXPECT_NE(id(PointConvStep::kGradFeatures), id(PointConvStep::kForward));
      EXPECT_NE(id(PointConvStep::kGradFeatures), id(PointConvStep::kGradWeights));
      const pcops::PointConvKept k{ptr[0], ptr[1], ptr[2]};
      for (int threads : {1, 3}) {
        pcops::CpuContext ctx;
        ctx.num_threads = threads;
        Result r;
        r.out.assign(c.s.num_out * c.s.channels_out, std::nanf(""));
        r.gf.assign(c.f.size(), std::nanf(""));
        r.gw.assign(c.w.size(), std::nanf(""));
        pcops::cpu::point_conv(ctx, c.s, c.f.data(), c.w.data(), c.t.data(), r.out.data(), k);
        pcops::cpu::point_conv_backward(ctx, c.s, c.g.data(), c.f.data(), c.w.data(), c.t.data(), r.gf.data(),
                                        r.gw.data(), k);
        expect_bitwise(r.out, want.out, "forward");
        expect_bitwise(r.gf, want.gf, "grad_features");
        expect_bitwise(r.gw, want.gw, "grad_weights");
      }
    }
  }
  // The forms' sizes: offsets a group, then 4 / 8 / 16 bytes a triplet.
  const int64_t groups = (700 + 63) / 64 * 27;
  for (const auto& [grouping, per] : {std::pair{"segmented", 4}, std::pair{"packed", 8}, std::pair{"tuples", 16}}) {
    const GroupingEnv use(grouping);
    EXPECT_EQ(pcops::cpu::point_conv_grouping(c.s, PointConvStep::kForward).bytes,
              static_cast<size_t>(8 * (groups + 1) + per * 20000));
  }
  pcops::PointConvShape empty = c.s;
  empty.channels_in = 0;
  for (const PointConvStep step : steps) EXPECT_EQ(pcops::cpu::point_conv_grouping(empty, step).bytes, 0u);
  Case bad = c;
  bad.t[3 * 11 + 2] = 27;
  std::vector<uint64_t> buf(pcops::cpu::point_conv_grouping(c.s, PointConvStep::kForward).bytes / 8 + 1, 7);
  const std::vector<uint64_t> before = buf;
  try {
    pcops::cpu::point_conv_group({}, bad.s, PointConvStep::kForward, bad.t.data(), buf.data());
    ADD_FAILURE() << "no error for a kernel index out of range";
  } catch (const pcops::Error& e) {
    EXPECT_EQ(e.kind(), pcops::ErrorKind::Index);
  }
  EXPECT_EQ(buf, before);
  EXPECT_THROW(pcops::cpu::point_conv_group({}, c.s, PointConvStep::kForward, c.t.data(), nullptr),
               std::invalid_argument);
}

// The triplets' fingerprint: the same for any thread count, another for one value changed or two
// values exchanged (rows, or columns of one row), and for fewer triplets.
TEST(PointConv, FingerprintTellsChangedTriplets) {
  std::mt19937 rng(73);
  const Case c = random_case(rng, 900, 700, 5, 7, 27, 200000);
  const auto print = [&](const std::vector<int64_t>& t, int threads, int64_t T) {
    pcops::CpuContext ctx;
    ctx.num_threads = threads;
    return pcops::cpu::point_conv_fingerprint(ctx, t.data(), T);
  };
  const uint64_t base = print(c.t, 1, c.s.triplets);
  EXPECT_EQ(print(c.t, 3, c.s.triplets), base);
  EXPECT_NE(print(c.t, 1, c.s.triplets - 1), base);
  std::vector<int64_t> t = c.t;
  t[3 * 150001 + 2] += 1;
  EXPECT_NE(print(t, 2, c.s.triplets), base);
  t = c.t;
  std::swap(t[3 * 10], t[3 * 190000]);
  if (t != c.t) EXPECT_NE(print(t, 2, c.s.triplets), base);
  t = c.t;
  std::swap(t[3 * 5], t[3 * 5 + 1]);
  if (t != c.t) EXPECT_NE(print(t, 2, c.s.triplets), base);
}

TEST(PointConv, WeightGradientPieceLength) {
  const auto L = [](int64_t T, int64_t co, int64_t ci) {
    return pcops::core::vvor_piece_length(pcops::PointConvShape{10, 10, ci, co, 27, T});
  };
  EXPECT_EQ(L(0, 32, 32), 4096);
  EXPECT_EQ(L(1000, 32, 32), 4096);
  EXPECT_EQ(L(2640000, 128, 128), 4096);    // 644 partial matrices of 64 KiB
  EXPECT_EQ(L(2640000, 256, 256), 16384);   // 256 KiB each: at most 256 -> 161
  EXPECT_EQ(L(2640000, 512, 512), 65536);   // 1 MiB each: at most 64 -> 40
  EXPECT_EQ(L(2640000, 2048, 2048), int64_t{1} << 20);  // 16 MiB each: at most 4 -> 2
  EXPECT_GE(L(2640000, 8192, 8192), 2640000);  // 256 MiB each: one piece per cell
  EXPECT_EQ(L(2640000, 0, 0), 4096);
}

TEST(PointConv, WeightGradientFoldsLongCellsInPieces) {
  // Cell 0 gets three pieces of L = 4096 and a rest, cell 1 exactly L + 1, cell 2 a few: every
  // piece boundary, against the contract's loops, float64, and threads.
  std::mt19937 rng(17);
  Case c = random_case(rng, 400, 300, 3, 5, 3, 0);
  std::uniform_int_distribution<int64_t> pi(0, 299), pj(0, 399);
  const auto add = [&](int64_t k, int64_t n) {
    for (int64_t r = 0; r < n; ++r) c.t.insert(c.t.end(), {pi(rng), pj(rng), k});
  };
  add(0, 3 * 4096 + 1500);
  add(1, 4097);
  add(2, 7);
  c.s.triplets = static_cast<int64_t>(c.t.size() / 3);
  ASSERT_EQ(pcops::core::vvor_piece_length(c.s), 4096);
  const Result r = run(c, 3);
  expect_bitwise(r.gw, oracle_grad_weights(c), "grad_weights in pieces");
  const std::vector<float> one_piece = oracle_grad_weights(c, int64_t{1} << 40);
  EXPECT_FALSE(std::equal(r.gw.begin(), r.gw.end(), one_piece.begin()))
      << "the pieces change some sums (else this case does not test them)";
  expect_bitwise(run(c, 1).gw, r.gw, "grad_weights one thread");
  const Reference ref = reference64(c);
  expect_close(r.gw, ref.gw, ref.abs_gw, 3 * 4096 + 1500, "grad_weights in pieces vs float64");
}

TEST(PointConv, EmptyTripletsGiveZeros) {
  std::mt19937 rng(3);
  Case c = random_case(rng, 6, 4, 3, 2, 27, 0);
  const Result r = run(c, 2);
  for (float v : r.out) EXPECT_EQ(v, 0.0f);
  for (float v : r.gf) EXPECT_EQ(v, 0.0f);
  for (float v : r.gw) EXPECT_EQ(v, 0.0f);
  // Zero-sized everything.
  Case z;
  z.s = pcops::PointConvShape{0, 0, 0, 0, 0, 0};
  const Result rz = run(z, 1);
  EXPECT_TRUE(rz.out.empty());
}

TEST(PointConv, RejectsBadInput) {
  std::mt19937 rng(5);
  const Case good = random_case(rng, 6, 4, 3, 2, 5, 10);
  pcops::CpuContext ctx;
  std::vector<float> out(good.s.num_out * good.s.channels_out);
  const std::array<std::pair<int, int64_t>, 6> bad{{{0, 4}, {0, -1}, {1, 6}, {1, -3}, {2, 5}, {2, -1}}};
  for (const auto& [col, value] : bad) {
    Case c = good;
    c.t[9 * 3 + col] = value;
    try {
      pcops::cpu::point_conv(ctx, c.s, c.f.data(), c.w.data(), c.t.data(), out.data());
      FAIL() << "expected an Index error for column " << col << " value " << value;
    } catch (const pcops::Error& e) {
      EXPECT_EQ(e.kind(), pcops::ErrorKind::Index);
      EXPECT_NE(std::string(e.what()).find("row 9"), std::string::npos) << e.what();
    }
    EXPECT_THROW(pcops::cpu::point_conv_backward(ctx, c.s, c.g.data(), c.f.data(), c.w.data(), c.t.data(),
                                                 nullptr, nullptr),
                 pcops::Error);
  }
  Case neg = good;
  neg.s.channels_in = -1;
  try {
    pcops::cpu::point_conv(ctx, neg.s, neg.f.data(), neg.w.data(), neg.t.data(), out.data());
    FAIL() << "expected a Value error";
  } catch (const pcops::Error& e) {
    EXPECT_EQ(e.kind(), pcops::ErrorKind::Value);
  }
}

// Triplet construction: the valid slots in (i, s) order with the documented float32 steps,
// written out here one operation at a time (volatile: each step rounded to float32 as named).
std::vector<int64_t> oracle_triplets(const pcops::TripletShape& s, const std::vector<float>& c,
                                     const std::vector<float>& p, const std::vector<int64_t>& nb) {
  std::vector<int64_t> out;
  const volatile float two_ext = s.extent * 2.0f;
  const volatile float h = two_ext / static_cast<float>(s.cells);
  for (int64_t i = 0; i < s.centres; ++i) {
    for (int64_t x = 0; x < s.slots; ++x) {
      const int64_t j = nb[i * s.slots + x];
      if (j < 0) continue;
      int64_t q[3];
      for (int a = 0; a < 3; ++a) {
        const volatile float d = p[j * 3 + a] - c[i * 3 + a];
        const volatile float v = d + s.extent;
        const volatile float w = v / h;
        const float f = std::floor(w);
        q[a] = f < 0.0f ? 0 : f > static_cast<float>(s.cells - 1) ? s.cells - 1 : static_cast<int64_t>(f);
      }
      out.insert(out.end(), {i, j, (q[0] * s.cells + q[1]) * s.cells + q[2]});
    }
  }
  return out;
}

TEST(PointConv, TripletsFollowTheCellFormulaForAnyThreadCount) {
  std::mt19937 rng(41);
  for (const int64_t t : {1, 2, 3, 5}) {
    pcops::TripletShape s;
    s.centres = 5000, s.points = 3000, s.slots = 12, s.extent = 0.3f, s.cells = t;
    const pcops_test::TripletInputs in = pcops_test::triplet_inputs(rng, s);
    const std::vector<float>&c = in.centres, &p = in.points;
    const std::vector<int64_t>& nb = in.neighbours;
    const std::vector<int64_t> ref = oracle_triplets(s, c, p, nb);
    for (const int threads : {1, 2, 3, 7}) {
      pcops::CpuContext ctx;
      ctx.num_threads = threads;
      std::vector<int64_t> got;
      const int64_t T = pcops::cpu::point_conv_triplets(ctx, s, c.data(), p.data(), nb.data(), [&](int64_t n) {
        got.assign(n * 3, -7);
        return got.data();
      });
      ASSERT_EQ(T * 3, static_cast<int64_t>(ref.size()));
      EXPECT_EQ(got, ref) << "t " << t << " threads " << threads;
    }
  }
}

TEST(PointConv, TripletConstructionRejectsBadInput) {
  pcops::CpuContext ctx;
  pcops::TripletShape s;
  s.centres = 4, s.points = 5, s.slots = 3, s.extent = 0.5f, s.cells = 3;
  std::vector<float> c(12, 0.0f), p(15, 0.1f);
  std::vector<int64_t> nb(12, 0), out(36, -7);
  const auto kind_of = [&](const std::function<void()>& f) {
    try {
      f();
    } catch (const pcops::Error& e) {
      return e.kind();
    }
    ADD_FAILURE() << "expected an error";
    return pcops::ErrorKind::Value;
  };
  int allocations = 0;  // the allocator is called only once the input has passed every check
  const auto fill_with = [&](const pcops::TripletShape& shape) {
    return [&, shape] {
      pcops::cpu::point_conv_triplets(ctx, shape, c.data(), p.data(), nb.data(), [&](int64_t n) {
        ++allocations;
        EXPECT_LE(n * 3, static_cast<int64_t>(out.size()));
        return out.data();
      });
    };
  };
  const auto fill = fill_with(s);
  nb[7] = 5;  // past N
  EXPECT_EQ(kind_of(fill), pcops::ErrorKind::Index);
  nb[7] = -2;
  EXPECT_EQ(kind_of(fill), pcops::ErrorKind::Index);
  nb[7] = 0;
  p[4] = std::nanf("");
  EXPECT_EQ(kind_of(fill), pcops::ErrorKind::Value);
  p[4] = 0.1f;
  for (const auto& [extent, cells] : std::vector<std::pair<float, int64_t>>{
           {0.0f, 3}, {-1.0f, 3}, {INFINITY, 3}, {0.5f, 0}, {1e-45f, 1000}}) {
    pcops::TripletShape b = s;
    b.extent = extent, b.cells = cells;
    EXPECT_EQ(kind_of(fill_with(b)), pcops::ErrorKind::Value) << extent << " " << cells;
  }
  EXPECT_EQ(allocations, 0);
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](int64_t v) { return v == -7; }));  // nothing written
  fill();
  EXPECT_EQ(allocations, 1);
  EXPECT_EQ(out[2], 13);  // offset (0.1, 0.1, 0.1) in cells of 1/3: the centre cell
}

TEST(PointConv, BackwardComputesOnlyWhatIsAsked) {
  std::mt19937 rng(9);
  const Case c = random_case(rng, 30, 20, 4, 6, 8, 200);
  pcops::CpuContext ctx;
  std::vector<float> gw(c.w.size(), std::nanf(""));
  pcops::cpu::point_conv_backward(ctx, c.s, c.g.data(), c.f.data(), c.w.data(), c.t.data(), nullptr, gw.data());
  expect_bitwise(gw, oracle_grad_weights(c), "grad_weights only");
  std::vector<float> gf(c.f.size(), std::nanf(""));
  pcops::cpu::point_conv_backward(ctx, c.s, c.g.data(), c.f.data(), c.w.data(), c.t.data(), gf.data(), nullptr);
  expect_bitwise(gf, oracle_grad_features(c), "grad_features only");
}

}  // namespace
