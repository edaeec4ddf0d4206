// CUDA point_conv and its backward against the CPU backend: bitwise equal outputs and gradients
// (sentinel-prefilled, so unwritten slots show), shuffled triplet order, duplicates, empty rows
// and empty triplet sets, channel counts around the thread-block size; out-of-range triplets are
// skipped without memory errors (run under compute-sanitizer). The tensor-core path (bfloat16)
// against a float64 reference of its 16-bit inputs, run to run equal, with long runs of one
// destination row, partial tiles, a weight gradient in slices and invalid triplets (skipped), under
// every compiled shape of the MVMR kernel (or only the one PCOPS_CUDA_POINT_CONV_CONFIG names, so
// that a sanitizer run can take one shape at a time); both groupings of the triplets (segmented
// and packed) give the same bits.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <tuple>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cuda_util.hpp"
#include "pcops/error.hpp"
#include "pcops/point_conv.hpp"
#include "triplet_cases.hpp"

namespace {

using pcops_cuda_test::DeviceBuffer;
using pcops_cuda_test::StreamContext;

struct Case {
  pcops::PointConvShape s;
  std::vector<float> f, w, g;
  std::vector<int64_t> t;
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
  // Output rows drawn from the first 90 % only, so the last rows have no triplet.
  std::uniform_int_distribution<int64_t> pi(0, std::max<int64_t>(n_out * 9 / 10 - 1, 0)), pj(0, n_in - 1),
      pk(0, K - 1);
  for (int64_t r = 0; r < T; ++r) {
    c.t.push_back(pi(rng));
    c.t.push_back(pj(rng));
    c.t.push_back(pk(rng));
  }
  for (int64_t r = 0; r + 1 < T; r += 5) std::copy_n(&c.t[r * 3], 3, &c.t[(r + 1) * 3]);
  return c;
}

// Inserts three invalid triplets (an output row, a source row and a kernel cell out of range; the
// kernels never visit them) before triplet `at`, or at the end (at < 0).
void add_invalid_triplets(Case& c, int64_t at = -1) {
  const int64_t junk[][3] = {{c.s.num_out, 0, 0}, {0, -1, 0}, {0, 0, c.s.kernels}};
  const auto where = [&] { return at < 0 ? c.t.end() : c.t.begin() + 3 * at; };
  for (const auto& b : junk) c.t.insert(where(), b, b + 3);
  c.s.triplets += 3;
}

struct Out {
  std::vector<float> out, gf, gw;
};

Out run_cpu(const Case& c) {
  Out r{std::vector<float>(c.s.num_out * c.s.channels_out), std::vector<float>(c.f.size()),
        std::vector<float>(c.w.size())};
  pcops::cpu::point_conv({}, c.s, c.f.data(), c.w.data(), c.t.data(), r.out.data());
  pcops::cpu::point_conv_backward({}, c.s, c.g.data(), c.f.data(), c.w.data(), c.t.data(), r.gf.data(),
                                  r.gw.data());
  return r;
}

// shift > 0: every float matrix starts `shift` floats into its allocation (rows not 16-byte
// aligned, so the kernels take their scalar-load paths).
std::vector<float> shifted(const std::vector<float>& v, int shift) {
  std::vector<float> r(shift, std::nanf(""));
  r.insert(r.end(), v.begin(), v.end());
  return r;
}

Out run_cuda(const Case& c, int shift = 0) {
  StreamContext sc;
  DeviceBuffer<float> f(shifted(c.f, shift)), w(shifted(c.w, shift)), g(shifted(c.g, shift));
  DeviceBuffer<int64_t> t(c.t);
  DeviceBuffer<float> out(c.s.num_out * c.s.channels_out + shift), gf(c.f.size() + shift), gw(c.w.size() + shift);
  out.fill(std::nanf(""));
  gf.fill(std::nanf(""));
  gw.fill(std::nanf(""));
  pcops::cuda::point_conv(sc.ctx, c.s, f.data() + shift, w.data() + shift, t.data(), out.data() + shift);
  pcops::cuda::point_conv_backward(sc.ctx, c.s, g.data() + shift, f.data() + shift, w.data() + shift, t.data(),
                                   gf.data() + shift, gw.data() + shift);
  Out r{out.download(), gf.download(), gw.download()};
  for (auto* v : {&r.out, &r.gf, &r.gw}) v->erase(v->begin(), v->begin() + shift);
  return r;
}

void expect_bitwise(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t n = 0; n < a.size(); ++n) {
    uint32_t x, y;
    std::memcpy(&x, &a[n], 4);
    std::memcpy(&y, &b[n], 4);
    ASSERT_EQ(x, y) << what << " differs at " << n << ": " << a[n] << " vs " << b[n];
  }
}

// PCOPS_CUDA_POINT_CONV_VVOR (chains per thread of the weight gradient: n or RO x RC, or "mixed":
// the heaviest cell in small tiles, the others in 2 x 4) for one scope.
struct VvorChains : pcops_cuda_test::ScopedEnv {
  explicit VvorChains(const char* chains) : ScopedEnv("PCOPS_CUDA_POINT_CONV_VVOR", chains) {}
};
// PCOPS_CUDA_POINT_CONV_MVMR (the forward / grad_features kernel: "slices", "slices-wide", "cells",
// "tiles" or "rows") for one scope.
struct MvmrKernel : pcops_cuda_test::ScopedEnv {
  explicit MvmrKernel(const char* name) : ScopedEnv("PCOPS_CUDA_POINT_CONV_MVMR", name) {}
};
constexpr const char* kMvmrKernels[] = {"slices", "slices-wide", "cells", "tiles", "rows"};
// PCOPS_CUDA_POINT_CONV_GROUPING ("segmented", the default: 32-bit keys placed by counting and
// sorted in their segments; "packed": one CUB sort of the packed columns; "columns": a stable pass
// per column; "wide": the triplet indices kept and read by the rows kernel, the path of keys past
// 31 bits) for one scope.
struct GroupingSort : pcops_cuda_test::ScopedEnv {
  explicit GroupingSort(const char* name) : ScopedEnv("PCOPS_CUDA_POINT_CONV_GROUPING", name) {}
};

// Shapes (n_in, n_out, C_in, C_out, K, T): channel counts around the kernels' tiles (16 output x 32
// input channels in the weight gradient, four channels per thread) and not multiples of 4, one
// kernel cell, and long runs of one kernel cell (K = 2: 20000 triplets each, many shared-memory
// stages); source widths that give the cells MVMR slices of 32, 64 and 128 channels (300, 200,
// 64 source channels) and one too wide for it (520); more kernel cells than the weight gradient
// ranks by size (1100); rows of up to 32, 128, 512 and 1024 triplets (the segmented grouping's
// warp sorts) and longer segments of the weight gradient (its block sorts). Aligned rows take the four-channel loads, shift 1 the
// scalar ones.
TEST(CudaPointConv, BitwiseEqualToCpu) {
  std::mt19937 rng(17);
  const std::vector<std::vector<int64_t>> shapes{
      {50, 40, 3, 5, 27, 600},          {64, 64, 16, 17, 8, 1000},    {30, 10, 1, 1, 1, 90},
      {20, 25, 33, 9, 27, 300},         {300, 260, 64, 257, 27, 5000}, {2000, 1500, 32, 32, 27, 30000},
      {500, 400, 36, 20, 3, 3000},      {1000, 1000, 8, 48, 2, 40000}, {200, 150, 64, 64, 27, 4000},
      {300, 260, 300, 36, 27, 4000},    {200, 180, 200, 64, 5, 3000},  {60, 50, 520, 8, 3, 400},
      {60, 50, 4, 8, 1100, 3000},       {100, 20, 8, 8, 3, 6000},     {100, 10, 8, 8, 3, 7000}};
  for (const auto& sh : shapes) {
    for (int shift : {0, 1}) {
      SCOPED_TRACE(testing::Message() << "shape " << sh[2] << "x" << sh[3] << " K " << sh[4] << " T " << sh[5]
                                      << " shift " << shift);
      Case c = random_case(rng, sh[0], sh[1], sh[2], sh[3], sh[4], sh[5]);
      const Out cpu = run_cpu(c);
      Out gpu = run_cuda(c, shift);
      expect_bitwise(gpu.out, cpu.out, "forward");
      expect_bitwise(gpu.gf, cpu.gf, "grad_features");
      expect_bitwise(gpu.gw, cpu.gw, "grad_weights");
      // Every weight-gradient tile, whatever the default.
      for (const char* chains : {"1", "2", "4", "2x4", "4x4", "mixed"}) {
        const VvorChains forced(chains);
        expect_bitwise(run_cuda(c, shift).gw, cpu.gw, chains);
      }
      // Every MVMR kernel, whatever the default.
      for (const char* mvmr : kMvmrKernels) {
        const MvmrKernel forced(mvmr);
        const Out st = run_cuda(c, shift);
        expect_bitwise(st.out, cpu.out, std::string("forward ") + mvmr);
        expect_bitwise(st.gf, cpu.gf, std::string("grad_features ") + mvmr);
      }
      for (const char* grouping : {"packed", "columns", "wide"}) {  // the other groupings: the same order
        const GroupingSort forced(grouping);
        const Out cg = run_cuda(c, shift);
        expect_bitwise(cg.out, cpu.out, std::string("forward, grouping ") + grouping);
        expect_bitwise(cg.gf, cpu.gf, std::string("grad_features, grouping ") + grouping);
        expect_bitwise(cg.gw, cpu.gw, std::string("grad_weights, grouping ") + grouping);
      }
      // Shuffled triplet rows: the same bits.
      std::vector<int64_t> perm(c.s.triplets);
      for (int64_t r = 0; r < c.s.triplets; ++r) perm[r] = r;
      std::shuffle(perm.begin(), perm.end(), rng);
      std::vector<int64_t> shuffled(c.t.size());
      for (int64_t r = 0; r < c.s.triplets; ++r) std::copy_n(&c.t[perm[r] * 3], 3, &shuffled[r * 3]);
      c.t = shuffled;
      gpu = run_cuda(c, shift);
      expect_bitwise(gpu.out, cpu.out, "forward shuffled");
      expect_bitwise(gpu.gf, cpu.gf, "grad_features shuffled");
      expect_bitwise(gpu.gw, cpu.gw, "grad_weights shuffled");
      const MvmrKernel tiles("tiles");
      const VvorChains ring("4");
      gpu = run_cuda(c, shift);
      expect_bitwise(gpu.out, cpu.out, "forward shuffled, tiles");
      expect_bitwise(gpu.gf, cpu.gf, "grad_features shuffled, tiles");
      expect_bitwise(gpu.gw, cpu.gw, "grad_weights shuffled, 4 chains");
    }
  }
}

// Small cases for compute-sanitizer (racecheck of the shared-memory stages of the weight gradient
// and of the cells MVMR): several stages per kernel cell, partial channel tiles (slices of
// 32, 64 and 128 channels), vector and scalar loads.
TEST(CudaPointConv, ShortCasesForSanitizers) {
  std::mt19937 rng(29);
  // (shape, shift): three cells of about 230 triplets (a few stages each), and two cells of 1500
  // (24 stages: the weight gradient's ring of stages wraps around several times), and 72 output
  // channels from 24 (the cells slice 128 channels wide).
  const std::vector<std::vector<int64_t>> shapes{{120, 100, 36, 20, 3, 700, 0}, {120, 100, 36, 20, 3, 700, 1},
                                                 {200, 150, 20, 12, 2, 3000, 0}, {80, 60, 24, 72, 3, 500, 0}};
  for (const auto& sh : shapes) {
    const int shift = static_cast<int>(sh[6]);
    const Case c = random_case(rng, sh[0], sh[1], sh[2], sh[3], sh[4], sh[5]);
    const Out cpu = run_cpu(c);
    const Out gpu = run_cuda(c, shift);
    expect_bitwise(gpu.out, cpu.out, "forward");
    expect_bitwise(gpu.gf, cpu.gf, "grad_features");
    expect_bitwise(gpu.gw, cpu.gw, "grad_weights");
    for (const char* chains : {"1", "2", "4", "2x4", "4x4", "mixed"}) {
      const VvorChains forced(chains);
      expect_bitwise(run_cuda(c, shift).gw, cpu.gw, chains);
    }
    for (const char* mvmr : kMvmrKernels) {
      const MvmrKernel forced(mvmr);
      const Out st = run_cuda(c, shift);
      expect_bitwise(st.out, cpu.out, std::string("forward ") + mvmr);
      expect_bitwise(st.gf, cpu.gf, std::string("grad_features ") + mvmr);
    }
  }
}

// Kernel cells longer than the weight gradient's piece length (core::vvor_piece_length: 4096
// here): the pieces' partial matrices and their ordered sums, for the heaviest cell (the mixed
// kernel's small tiles) and the others, with every tile shape, aligned and unaligned rows.
TEST(CudaPointConv, WeightGradientPiecesEqualToCpu) {
  std::mt19937 rng(37);
  // (C_in, C_out, K): K = 1100 is more cells than the weight gradient ranks (uniform tiles, the
  // pieces listed in cell order).
  for (const auto& [ci, co, K] : {std::array<int64_t, 3>{3, 5, 4}, {36, 20, 4}, {4, 8, 1100}}) {
    Case c = random_case(rng, 400, 300, ci, co, K, 0);
    std::uniform_int_distribution<int64_t> pi(0, 299), pj(0, 399), pk(0, K - 1);
    const auto add = [&](int64_t k, int64_t n) {
      for (int64_t r = 0; r < n; ++r) c.t.insert(c.t.end(), {pi(rng), pj(rng), k < 0 ? pk(rng) : k});
    };
    add(2, 3 * 4096 + 700);  // three full pieces and a rest
    add(0, 4097);            // one full piece and one triplet
    add(3, 4096);            // exactly one piece
    if (K > 4) add(-1, 3000);  // a few in random cells
    c.s.triplets = static_cast<int64_t>(c.t.size() / 3);  // cell 1: empty (K = 4)
    ASSERT_EQ(pcops::core::vvor_piece_length(c.s), 4096);
    const Out cpu = run_cpu(c);
    for (int shift : {0, 1}) {
      SCOPED_TRACE(testing::Message() << ci << " x " << co << " K " << K << " shift " << shift);
      expect_bitwise(run_cuda(c, shift).gw, cpu.gw, "grad_weights");
      for (const char* chains : {"1", "2", "4", "2x4", "4x4", "mixed"}) {
        const VvorChains forced(chains);
        expect_bitwise(run_cuda(c, shift).gw, cpu.gw, chains);
      }
    }
  }
}

// A kernel the variables do not name is an error, not a silent default.
// Triplet construction on the device: the CPU's rows bit for bit (padding, offsets on the cells'
// borders and outside the cube, several grids), nothing written past the T rows it asks for;
// entries outside [-1, N) are skipped unchecked.
TEST(CudaPointConv, TripletsEqualTheCpuRows) {
  std::mt19937 rng(43);
  const pcops::CpuContext cpu;
  pcops::CudaContext ctx;
  // The device triplets of (s, c, p, nb) into a buffer 3 rows longer than asked, prefilled with -7.
  const auto device_triplets = [&](const pcops::TripletShape& s, const std::vector<float>& c,
                                   const std::vector<float>& p, const std::vector<int64_t>& nb) {
    DeviceBuffer<float> dc(c), dp(p);
    DeviceBuffer<int64_t> dn(nb), out;
    const int64_t T = pcops::cuda::point_conv_triplets(ctx, s, dc.data(), dp.data(), dn.data(), [&](int64_t n) {
      out.resize(static_cast<size_t>(n * 3 + 9));
      out.fill(-7);
      return out.data();
    });
    std::vector<int64_t> got = out.download();
    EXPECT_EQ(static_cast<int64_t>(got.size()), T * 3 + 9);
    EXPECT_TRUE(std::all_of(got.end() - 9, got.end(), [](int64_t v) { return v == -7; }));
    got.resize(static_cast<size_t>(T * 3));
    return got;
  };
  for (const int64_t t : {1, 2, 3, 5}) {
    pcops::TripletShape s;
    s.centres = 3000, s.points = 2000, s.slots = 10, s.extent = 0.25f, s.cells = t;
    const pcops_test::TripletInputs in = pcops_test::triplet_inputs(rng, s);
    std::vector<int64_t> want;
    pcops::cpu::point_conv_triplets(cpu, s, in.centres.data(), in.points.data(), in.neighbours.data(),
                                    [&](int64_t n) {
                                      want.resize(static_cast<size_t>(n * 3));
                                      return want.data();
                                    });
    EXPECT_EQ(device_triplets(s, in.centres, in.points, in.neighbours), want) << "t " << t;
  }
  // Entries outside [-1, N) are left out (the CPU function and the binding reject them first).
  pcops::TripletShape s;
  s.centres = 2, s.points = 3, s.slots = 3, s.extent = 0.5f, s.cells = 3;
  const std::vector<float> c(6, 0.0f), p(9, 0.1f);
  EXPECT_EQ(device_triplets(s, c, p, {0, 7, -1, -5, 2, 1}), (std::vector<int64_t>{0, 0, 13, 1, 2, 13, 1, 1, 13}));
  s.centres = 0;
  EXPECT_TRUE(device_triplets(s, {}, p, {}).empty());
  s.cells = 0;
  EXPECT_THROW(pcops::cuda::point_conv_triplets(ctx, s, nullptr, nullptr, nullptr, [](int64_t) { return nullptr; }),
               pcops::Error);
}

TEST(CudaPointConv, UnknownKernelNamesThrow) {
  std::mt19937 rng(31);
  const Case c = random_case(rng, 40, 30, 8, 8, 3, 200);
  for (const char* bad : {"3", "0", "ring2", "1d", "d", "12", "x", "split", "4x2", "2x2", "x4", "4X4", "Mixed"}) {
    const VvorChains forced(bad);
    EXPECT_THROW(run_cuda(c), std::invalid_argument) << bad;
  }
  for (const char* bad : {"staged", "shared", "row", "Tiles", "cell", "segments", "slice", "slices-", "slices-ahead", "wide", "slices-gather", "1"}) {
    const MvmrKernel forced(bad);
    EXPECT_THROW(run_cuda(c), std::invalid_argument) << bad;
  }
  for (const char* bad : {"column", "tuples", "Packed", "1"}) {
    const GroupingSort forced(bad);
    EXPECT_THROW(run_cuda(c), std::invalid_argument) << bad;
  }
}

TEST(CudaPointConv, EmptyTripletsGiveZeros) {
  std::mt19937 rng(3);
  const Case c = random_case(rng, 6, 4, 3, 2, 27, 0);
  const Out gpu = run_cuda(c);
  for (float v : gpu.out) EXPECT_EQ(v, 0.0f);
  for (float v : gpu.gf) EXPECT_EQ(v, 0.0f);
  for (float v : gpu.gw) EXPECT_EQ(v, 0.0f);
}

TEST(CudaPointConv, OutOfRangeTripletsAreSkipped) {
  std::mt19937 rng(5);
  Case c = random_case(rng, 40, 30, 4, 6, 8, 200);
  Case valid = c;
  // Corrupt some rows; the CPU oracle gets the same set without them.
  const int64_t bad[][3] = {{30, 0, 0}, {-1, 0, 0}, {0, 40, 0}, {0, -5, 0}, {0, 0, 8}, {0, 0, -1}};
  for (const auto& b : bad) c.t.insert(c.t.end(), b, b + 3);
  c.s.triplets += 6;
  const Out cpu = run_cpu(valid);
  const Out gpu = run_cuda(c);
  expect_bitwise(gpu.out, cpu.out, "forward");
  expect_bitwise(gpu.gf, cpu.gf, "grad_features");
  expect_bitwise(gpu.gw, cpu.gw, "grad_weights");
}

// The exact path's kept groupings (point_conv_group, handed to the calls through PointConvKept)
// give the bits of the calls that sort (the CPU's: BitwiseEqualToCpu), out-of-range triplets among
// the rows; ones made from other triplets of the same shape give those triplets' results (the
// calls read the kept keys, not the triplets); only the default segmented grouping is kept (0
// bytes for the others), and no step of an empty product keeps one.
TEST(CudaPointConv, KeptGroupingsGiveTheSameBits) {
  std::mt19937 rng(59);
  using pcops::PointConvStep;
  const PointConvStep steps[] = {PointConvStep::kForward, PointConvStep::kGradFeatures, PointConvStep::kGradWeights};
  for (const auto& sh : std::vector<std::vector<int64_t>>{{300, 260, 64, 36, 27, 5000}, {2000, 1500, 32, 32, 27, 30000},
                                                          {60, 50, 4, 8, 1100, 3000}}) {
    SCOPED_TRACE(testing::Message() << "shape " << sh[2] << "x" << sh[3] << " K " << sh[4]);
    Case c = random_case(rng, sh[0], sh[1], sh[2], sh[3], sh[4], sh[5]);
    add_invalid_triplets(c, 5);
    Case other = random_case(rng, sh[0], sh[1], sh[2], sh[3], sh[4], sh[5] + 3);
    other.f = c.f, other.w = c.w, other.g = c.g;
    for (const Case* from : {&c, &other}) {
      const Out want = run_cuda(*from);
      StreamContext sc;
      DeviceBuffer<float> f(c.f), w(c.w), g(c.g);
      DeviceBuffer<int64_t> t(c.t), t_from(from->t);
      std::vector<DeviceBuffer<unsigned char>> kept;
      const void* ptr[3] = {nullptr, nullptr, nullptr};
      for (int n = 0; n < 3; ++n) {
        const pcops::PointConvGrouping info = pcops::cuda::point_conv_grouping(c.s, steps[n]);
        ASSERT_GT(info.bytes, 0u) << "step " << n;
        EXPECT_NE(info.id, pcops::cuda::point_conv_grouping(c.s, steps[(n + 1) % 3]).id);
        EXPECT_THROW(pcops::cuda::point_conv_group(sc.ctx, c.s, steps[n], t_from.data(), nullptr),
                     std::invalid_argument);
        kept.emplace_back(info.bytes);
        pcops::cuda::point_conv_group(sc.ctx, c.s, steps[n], t_from.data(), kept.back().data());
        ptr[n] = kept.back().data();
      }
      DeviceBuffer<float> out(c.s.num_out * c.s.channels_out), gf(c.f.size()), gw(c.w.size());
      for (DeviceBuffer<float>* b : {&out, &gf, &gw}) b->fill(std::nanf(""));
      const auto into = [](DeviceBuffer<float>& b) {
        return pcops::cuda::OutputAllocator([&b] { return static_cast<void*>(b.data()); });
      };
      const pcops::PointConvKept k{ptr[0], ptr[1], ptr[2]};
      pcops::cuda::point_conv(sc.ctx, c.s, f.data(), w.data(), t.data(), into(out), k);
      pcops::cuda::point_conv_backward(sc.ctx, c.s, g.data(), f.data(), w.data(), t.data(), into(gf), into(gw), k);
      const std::string which = from == &c ? "own triplets" : "other triplets";
      expect_bitwise(out.download(), want.out, "forward, " + which);
      expect_bitwise(gf.download(), want.gf, "grad_features, " + which);
      expect_bitwise(gw.download(), want.gw, "grad_weights, " + which);
    }
    for (const char* grouping : {"packed", "columns", "wide"}) {
      const GroupingSort forced(grouping);
      for (const PointConvStep step : steps) EXPECT_EQ(pcops::cuda::point_conv_grouping(c.s, step).bytes, 0u);
    }
  }
  const pcops::PointConvShape empty{100, 80, 8, 0, 27, 500};
  for (const PointConvStep step : steps) EXPECT_EQ(pcops::cuda::point_conv_grouping(empty, step).bytes, 0u);
}

// The exact path's outputs allocated on request: each requested output is asked for exactly once
// (an empty one too), an unrequested gradient never, and the results are the CPU backend's bits,
// under every grouping.
TEST(CudaPointConv, OutputsOnRequest) {
  std::mt19937 rng(47);
  using Shape = std::array<int64_t, 6>;  // n_in, n_out, C_in, C_out, K, T
  for (const char* grouping : {"segmented", "packed", "wide"}) {
    const GroupingSort forced(grouping);
    for (const Shape& sh : {Shape{300, 200, 40, 24, 27, 5000}, Shape{300, 200, 16, 0, 27, 500},
                            Shape{120, 0, 8, 16, 27, 0}, Shape{50, 40, 0, 8, 27, 300}}) {
      SCOPED_TRACE(testing::Message() << grouping << " shape " << sh[2] << "x" << sh[3] << " rows " << sh[0]
                                      << " / " << sh[1]);
      const Case c = random_case(rng, sh[0], sh[1], sh[2], sh[3], sh[4], sh[5]);
      const Out cpu = run_cpu(c);
      StreamContext sc;
      DeviceBuffer<float> f(c.f), w(c.w), g(c.g);
      DeviceBuffer<int64_t> t(c.t);
      DeviceBuffer<float> out(c.s.num_out * c.s.channels_out), gf(c.f.size()), gw(c.w.size()), gw_alone(c.w.size());
      for (DeviceBuffer<float>* b : {&out, &gf, &gw, &gw_alone}) b->fill(std::nanf(""));
      int calls[4] = {0, 0, 0, 0};
      const auto into = [&calls](int n, DeviceBuffer<float>& b) {
        return pcops::cuda::OutputAllocator([&calls, n, &b] {
          ++calls[n];
          return static_cast<void*>(b.data());
        });
      };
      pcops::cuda::point_conv(sc.ctx, c.s, f.data(), w.data(), t.data(), into(0, out));
      pcops::cuda::point_conv_backward(sc.ctx, c.s, g.data(), f.data(), w.data(), t.data(), into(1, gf), into(2, gw));
      pcops::cuda::point_conv_backward(sc.ctx, c.s, g.data(), f.data(), w.data(), t.data(),
                                       pcops::cuda::OutputAllocator(), into(3, gw_alone));
      for (int n = 0; n < 4; ++n) EXPECT_EQ(calls[n], 1) << "output " << n;
      expect_bitwise(out.download(), cpu.out, "forward");
      expect_bitwise(gf.download(), cpu.gf, "grad_features");
      expect_bitwise(gw.download(), cpu.gw, "grad_weights");
      expect_bitwise(gw_alone.download(), cpu.gw, "grad_weights alone");
    }
  }
}

using Bf16 = __nv_bfloat16;

std::vector<Bf16> to_bf16(const std::vector<float>& v) {
  std::vector<Bf16> r(v.size());
  for (size_t n = 0; n < v.size(); ++n) r[n] = __float2bfloat16_rn(v[n]);
  return r;
}

std::vector<double> to_double(const std::vector<Bf16>& v) {
  std::vector<double> r(v.size());
  for (size_t n = 0; n < v.size(); ++n) r[n] = static_cast<double>(__bfloat162float(v[n]));
  return r;
}

struct Mma {
  std::vector<Bf16> out, gf, gw;
};

Mma run_mma(const Case& c, const std::vector<Bf16>& f, const std::vector<Bf16>& w,
            const std::vector<Bf16>& g) {
  StreamContext sc;
  DeviceBuffer<Bf16> df(f), dw(w), dg(g);
  DeviceBuffer<int64_t> t(c.t);
  DeviceBuffer<Bf16> out(c.s.num_out * c.s.channels_out), gf(f.size()), gw(w.size());
  // Sentinels: every element must be written.
  for (DeviceBuffer<Bf16>* b : {&out, &gf, &gw}) b->fill(__float2bfloat16_rn(7.0f));
  pcops::cuda::point_conv_mma(sc.ctx, c.s, pcops::Half16::kBFloat16, df.data(), dw.data(), t.data(),
                              out.data());
  pcops::cuda::point_conv_mma_backward(sc.ctx, c.s, pcops::Half16::kBFloat16, dg.data(), df.data(), dw.data(),
                                       t.data(), gf.data(), gw.data());
  return Mma{out.download(), gf.download(), gw.download()};
}

// |got - ref| <= 2^-8 |ref| (one bfloat16 rounding) + terms * 2^-23 * sum |term| (float32 sums).
void expect_close(const std::vector<Bf16>& got, const std::vector<double>& ref,
                  const std::vector<double>& mag, double terms, const char* what) {
  ASSERT_EQ(got.size(), ref.size());
  for (size_t n = 0; n < got.size(); ++n) {
    const double v = static_cast<double>(__bfloat162float(got[n]));
    ASSERT_LE(std::abs(v - ref[n]), std::ldexp(std::abs(ref[n]), -8) + terms * std::ldexp(mag[n], -23))
        << what << " at " << n << ": " << v << " vs " << ref[n];
  }
}

constexpr const char* kConfigVar = "PCOPS_CUDA_POINT_CONV_CONFIG";
constexpr const char* kVvorVar = "PCOPS_CUDA_POINT_CONV_FAST_VVOR";
// Every compiled MVMR shape (the default first; "w": wgmma, which falls back to mma.sync where
// the library has no sm_90a code or the device is not of compute capability 9.0).
const char* const kMvmrShapes[] = {"", "128x128x64x64x2", "128x64x64x64x2", "128x128x64x32x3", "128x64x64x32x3",
                                   "128x128x64x64x2w", "128x128x64x32x4w", "128x256x64x64x2w"};

// The compiled MVMR shapes (the wgmma ones alone with wgmma_only), or only the one
// PCOPS_CUDA_POINT_CONV_CONFIG names where it is set (for sanitizer runs one shape at a time).
std::vector<std::string> mvmr_shapes(bool wgmma_only = false) {
  const char* pinned = std::getenv(kConfigVar);
  if (pinned != nullptr && *pinned != 0) return {std::string(pinned)};
  std::vector<std::string> shapes;
  for (const std::string_view shape : kMvmrShapes)
    if (!wgmma_only || shape.ends_with('w')) shapes.emplace_back(shape);
  return shapes;
}
std::vector<std::string> wgmma_shapes() { return mvmr_shapes(true); }

TEST(CudaPointConvMma, BFloat16AgainstFloat64) {
  std::mt19937 rng(23);
  for (const auto& sh : std::vector<std::vector<int64_t>>{
           {300, 200, 40, 24, 27, 5000}, {90, 70, 8, 136, 4, 2000}, {400, 300, 16, 16, 1, 9000},
           // The last two: several tiles and chunks; 72 x 136: 128-channel blocks with stages of
           // 64 channels both ways.
           {1500, 1300, 32, 136, 27, 40000}, {1500, 1300, 72, 136, 27, 30000},
           // More kernel cells than the tile's segment offsets kept in shared memory (128).
           {700, 600, 24, 40, 200, 20000},
           // More than 128 feature channels: the weight gradient's 256-channel wgmma blocks
           // (partial) beside a partial 128-channel block of the other side.
           {600, 500, 200, 72, 27, 12000}}) {
    Case c = random_case(rng, sh[0], sh[1], sh[2], sh[3], sh[4], sh[5]);
    const pcops::PointConvShape s = c.s;
    ASSERT_TRUE(pcops::cuda::point_conv_mma_supported(s));
    for (int64_t r = 0; r < 150; ++r)
      c.t[r * 3] = 5, c.t[r * 3 + 2] = s.kernels - 1;  // a run over three chunks
    Case bad = c;                                      // invalid triplets are never visited
    add_invalid_triplets(bad);
    const auto f = to_bf16(c.f), w = to_bf16(c.w), g = to_bf16(c.g);
    const auto F = to_double(f), W = to_double(w), G = to_double(g);
    const int64_t ci = s.channels_in, co = s.channels_out;
    std::vector<double> out(s.num_out * co), om(out.size()), gf(F.size()), gfm(F.size()), gw(W.size()),
        gwm(W.size());
    std::vector<int64_t> per_i(s.num_out), per_j(s.num_in), per_k(s.kernels);
    for (int64_t r = 0; r < s.triplets; ++r) {
      const int64_t i = c.t[r * 3], j = c.t[r * 3 + 1], k = c.t[r * 3 + 2];
      ++per_i[i], ++per_j[j], ++per_k[k];
      for (int64_t o = 0; o < co; ++o)
        for (int64_t ch = 0; ch < ci; ++ch) {
          const double wv = W[(k * co + o) * ci + ch], fv = F[j * ci + ch], gv = G[i * co + o];
          out[i * co + o] += wv * fv, om[i * co + o] += std::abs(wv * fv);
          gf[j * ci + ch] += wv * gv, gfm[j * ci + ch] += std::abs(wv * gv);
          gw[(k * co + o) * ci + ch] += gv * fv, gwm[(k * co + o) * ci + ch] += std::abs(gv * fv);
        }
    }
    const auto longest = [](const std::vector<int64_t>& v) {
      return static_cast<double>(*std::max_element(v.begin(), v.end()));
    };
    for (const std::string& cfg : mvmr_shapes()) {
      SCOPED_TRACE("MVMR shape '" + cfg + "'");
      const pcops_cuda_test::ScopedEnv use(kConfigVar, cfg.c_str());
      const Mma a = run_mma(c, f, w, g), b = run_mma(bad, f, w, g);
      EXPECT_EQ(std::memcmp(a.out.data(), b.out.data(), a.out.size() * 2), 0);
      EXPECT_EQ(std::memcmp(a.gf.data(), b.gf.data(), a.gf.size() * 2), 0);
      EXPECT_EQ(std::memcmp(a.gw.data(), b.gw.data(), a.gw.size() * 2), 0);
      {  // The tile sums swizzled in shared memory (the default) or not: the same sums, the same bits.
        const pcops_cuda_test::ScopedEnv swizzle("PCOPS_CUDA_POINT_CONV_SUM_SWIZZLE", "0");
        const Mma sw = run_mma(c, f, w, g);
        EXPECT_EQ(std::memcmp(a.out.data(), sw.out.data(), a.out.size() * 2), 0);
        EXPECT_EQ(std::memcmp(a.gf.data(), sw.gf.data(), a.gf.size() * 2), 0);
      }
      {  // The crossing runs' sums in the block's turns instead of by pairs of warps (wgmma shapes;
         // the others always take turns): the same adds in the same order, the same bits.
        const pcops_cuda_test::ScopedEnv turns("PCOPS_CUDA_POINT_CONV_SUM_PAIRS", "0");
        const Mma tu = run_mma(c, f, w, g);
        EXPECT_EQ(std::memcmp(a.out.data(), tu.out.data(), a.out.size() * 2), 0);
        EXPECT_EQ(std::memcmp(a.gf.data(), tu.gf.data(), a.gf.size() * 2), 0);
      }
      for (const char* on : {"0", "1"}) {  // The weight stages bulk-copied from images packed
        // ahead or loaded row by row (wgmma shapes; the others ignore the switch): the same stage
        // buffers, the same bits.
        SCOPED_TRACE(std::string("PCOPS_CUDA_POINT_CONV_BULK_W=") + on);
        const pcops_cuda_test::ScopedEnv bulk("PCOPS_CUDA_POINT_CONV_BULK_W", on);
        const Mma bu = run_mma(c, f, w, g), bb = run_mma(bad, f, w, g);
        EXPECT_EQ(std::memcmp(a.out.data(), bu.out.data(), a.out.size() * 2), 0);
        EXPECT_EQ(std::memcmp(a.gf.data(), bu.gf.data(), a.gf.size() * 2), 0);
        EXPECT_EQ(std::memcmp(a.out.data(), bb.out.data(), a.out.size() * 2), 0);
        EXPECT_EQ(std::memcmp(a.gf.data(), bb.gf.data(), a.gf.size() * 2), 0);
      }
      expect_close(a.out, out, om, longest(per_i) + ci, "forward");
      expect_close(a.gf, gf, gfm, longest(per_j) + co, "grad_features");
      expect_close(a.gw, gw, gwm, longest(per_k), "grad_weights");
    }
    // The weight gradient's choices: mma.sync, wgmma in blocks of 128 x 128 channels, or of 128 x
    // 256 (the default "wgmma256") where the features have more than 128, wherever a layer has
    // more than 64 (mma.sync elsewhere and where wgmma cannot run): the same bound, invalid
    // triplets skipped, the other results untouched.
    const Mma base = run_mma(c, f, w, g);
    for (const char* choice : {"mma", "wgmma", "wgmma256"}) {
      SCOPED_TRACE(std::string("weight gradient on ") + choice);
      const pcops_cuda_test::ScopedEnv use(kVvorVar, choice);
      const Mma a = run_mma(c, f, w, g), b = run_mma(bad, f, w, g);
      EXPECT_EQ(std::memcmp(a.gw.data(), b.gw.data(), a.gw.size() * 2), 0);
      EXPECT_EQ(std::memcmp(a.out.data(), base.out.data(), a.out.size() * 2), 0);
      EXPECT_EQ(std::memcmp(a.gf.data(), base.gf.data(), a.gf.size() * 2), 0);
      expect_close(a.gw, gw, gwm, longest(per_k), "grad_weights (by choice)");
    }
  }
}

// Chunks of the MVMR's default grouping (tiles of 128 destination rows, a segment a tile and
// kernel cell, (row, source) order, chunks of 64 from each segment's start) whose runs of equal
// rows cross between the wgmma warps' 16-row groups: {crossed without a run covering a group,
// covered}.
std::array<int64_t, 2> crossing_chunks(const Case& c) {
  std::vector<std::array<int64_t, 4>> keys;  // tile, k, row, source
  for (int64_t r = 0; r < c.s.triplets; ++r) {
    const int64_t i = c.t[r * 3], j = c.t[r * 3 + 1], k = c.t[r * 3 + 2];
    if (i >= 0 && i < c.s.num_out && j >= 0 && j < c.s.num_in && k >= 0 && k < c.s.kernels)
      keys.push_back({i / 128, k, i, j});
  }
  std::sort(keys.begin(), keys.end());
  std::array<int64_t, 2> n{0, 0};
  for (size_t a = 0, b = 0; a < keys.size(); a = b) {
    while (b < keys.size() && keys[b][0] == keys[a][0] && keys[b][1] == keys[a][1]) ++b;
    for (size_t q = a; q < b; q += 64) {
      const auto row = [&](size_t x) { return q + x < b ? keys[q + x][2] : -1 - static_cast<int64_t>(x); };
      bool crossed = false, covered = false;
      for (size_t g = 1; g < 4; ++g) crossed |= row(16 * g - 1) == row(16 * g);
      for (size_t g = 1; g < 3; ++g) covered |= row(16 * g - 1) == row(16 * g + 16);
      n[covered ? 1 : 0] += crossed ? 1 : 0;
    }
  }
  return n;
}

// The wgmma MVMR's sums of runs that cross between warps (PCOPS_CUDA_POINT_CONV_SUM_PAIRS): an
// mbarrier of the two warps of each crossed boundary (the default) or the turns of the whole
// block give the same bits, for the wgmma shapes (two and four warpgroups), forward and
// grad_features, in chunks with crossing runs and with runs that cover a warp's rows (the turns
// then), across several tiles, with invalid triplets. Small enough for the sanitizers
// (tests/cuda/run_gpu.sh races it).
TEST(CudaPointConvMma, SumPairsGiveTheTurnsBits) {
  std::mt19937 rng(71);
  using Shape = std::array<int64_t, 6>;  // n_in, n_out, C_in, C_out, K, T
  for (const Shape& sh : {Shape{400, 300, 136, 144, 5, 6000}, Shape{300, 260, 200, 136, 27, 3000},
                          Shape{150, 140, 264, 136, 3, 4000}}) {
    SCOPED_TRACE(testing::Message() << "shape " << sh[2] << "x" << sh[3] << ", " << sh[5] << " triplets");
    Case c = random_case(rng, sh[0], sh[1], sh[2], sh[3], sh[4], sh[5]);
    for (int64_t r = 0; r < 90; ++r) c.t[r * 3] = 7, c.t[r * 3 + 2] = 0;  // a run covering warps
    const auto [crossed, covered] = crossing_chunks(c);
    EXPECT_GT(crossed, 0);
    EXPECT_GT(covered, 0);
    add_invalid_triplets(c);
    const auto f = to_bf16(c.f), w = to_bf16(c.w), g = to_bf16(c.g);
    for (const std::string& cfg : wgmma_shapes()) {
      SCOPED_TRACE(cfg);
      const pcops_cuda_test::ScopedEnv use(kConfigVar, cfg.c_str());
      const Mma a = run_mma(c, f, w, g);
      const pcops_cuda_test::ScopedEnv turns("PCOPS_CUDA_POINT_CONV_SUM_PAIRS", "0");
      const Mma b = run_mma(c, f, w, g);
      EXPECT_EQ(std::memcmp(a.out.data(), b.out.data(), a.out.size() * 2), 0);
      EXPECT_EQ(std::memcmp(a.gf.data(), b.gf.data(), a.gf.size() * 2), 0);
    }
  }
}

// The wgmma MVMR's weight stages bulk-copied from images packed ahead
// (PCOPS_CUDA_POINT_CONV_BULK_W=1; the default for stages of 64 channels) or loaded row by row by
// every thread (0; the default for stages of 32): the same bits, forward and grad_features (whose
// images are packed from the weights read transposed), at every wgmma shape, with partial channel
// blocks and stages (136 and 144 channels), invalid triplets and a run over several chunks. Small
// enough for the sanitizers (tests/cuda/run_gpu.sh races it).
TEST(CudaPointConvMma, BulkWeightStagesGiveTheSameBits) {
  std::mt19937 rng(79);
  using Shape = std::array<int64_t, 6>;  // n_in, n_out, C_in, C_out, K, T
  for (const Shape& sh : {Shape{400, 300, 136, 144, 5, 6000}, Shape{300, 260, 264, 200, 27, 3000}}) {
    SCOPED_TRACE(testing::Message() << "shape " << sh[2] << "x" << sh[3] << ", " << sh[5] << " triplets");
    Case c = random_case(rng, sh[0], sh[1], sh[2], sh[3], sh[4], sh[5]);
    for (int64_t r = 0; r < 150; ++r) c.t[r * 3] = 5, c.t[r * 3 + 2] = 1;  // a run over three chunks
    add_invalid_triplets(c);
    const auto f = to_bf16(c.f), w = to_bf16(c.w), g = to_bf16(c.g);
    for (const std::string& cfg : wgmma_shapes()) {
      SCOPED_TRACE(cfg);
      const pcops_cuda_test::ScopedEnv use(kConfigVar, cfg.c_str());
      const Mma a = [&] {
        const pcops_cuda_test::ScopedEnv rows("PCOPS_CUDA_POINT_CONV_BULK_W", "0");
        return run_mma(c, f, w, g);
      }();
      const pcops_cuda_test::ScopedEnv bulk("PCOPS_CUDA_POINT_CONV_BULK_W", "1");
      const Mma b = run_mma(c, f, w, g);
      EXPECT_EQ(std::memcmp(a.out.data(), b.out.data(), a.out.size() * 2), 0);
      EXPECT_EQ(std::memcmp(a.gf.data(), b.gf.data(), a.gf.size() * 2), 0);
      EXPECT_EQ(std::memcmp(a.gw.data(), b.gw.data(), a.gw.size() * 2), 0);
    }
  }
}

// The fast path's switches with a value they do not know: std::invalid_argument, and the library
// works as before after it; their known values give the default's bits.
TEST(CudaPointConvMma, SwitchesWithBadValuesThrow) {
  std::mt19937 rng(73);
  const Case c = random_case(rng, 300, 200, 40, 24, 27, 2000);
  const auto f = to_bf16(c.f), w = to_bf16(c.w), g = to_bf16(c.g);
  const Mma base = run_mma(c, f, w, g);
  for (const auto& [var, bad] : {std::pair{"PCOPS_CUDA_POINT_CONV_SUM_SWIZZLE", "2"},
                                 std::pair{"PCOPS_CUDA_POINT_CONV_SUM_PAIRS", "yes"},
                                 std::pair{"PCOPS_CUDA_POINT_CONV_BULK_W", "on"}}) {
    SCOPED_TRACE(std::string(var) + "=" + bad);
    {
      const pcops_cuda_test::ScopedEnv use(var, bad);
      EXPECT_THROW(run_mma(c, f, w, g), std::invalid_argument);
    }
    const Mma again = run_mma(c, f, w, g);  // and the library still works
    EXPECT_EQ(std::memcmp(base.out.data(), again.out.data(), base.out.size() * 2), 0);
  }
  for (const auto& [var, good] : {std::pair{"PCOPS_CUDA_POINT_CONV_SUM_SWIZZLE", "1"},
                                  std::pair{"PCOPS_CUDA_POINT_CONV_SUM_PAIRS", "1"},
                                  std::pair{"PCOPS_CUDA_POINT_CONV_BULK_W", "1"},
                                  std::pair{"PCOPS_CUDA_POINT_CONV_BULK_W", "0"}}) {
    const pcops_cuda_test::ScopedEnv use(var, good);
    const Mma a = run_mma(c, f, w, g);
    EXPECT_EQ(std::memcmp(base.out.data(), a.out.data(), base.out.size() * 2), 0) << var;
  }
}

// The forward reads the weight gradient's grouping where both are segmented (the same keys, the
// segments in (k, block of 128 rows) order): handed the weight gradient's kept grouping, it gives
// the bits of a forward that sorts its own, with the tiles' segment bounds in shared memory (27
// cells) and past them (200 cells: 64 cached), over several tiles and one. Small enough for the
// sanitizers (tests/cuda/run_gpu.sh races it).
TEST(CudaPointConvMma, ForwardReadsTheWeightGradientsGrouping) {
  std::mt19937 rng(59);
  using pcops::PointConvStep;
  const pcops_cuda_test::ScopedEnv use("PCOPS_CUDA_POINT_CONV_FAST_GROUPING", "segmented");
  using Shape = std::array<int64_t, 6>;  // n_in, n_out, C_in, C_out, K, T
  // The last: 2^17 to 2^18 source rows, keys of 25 bits, the 25th from the segments' mids.
  for (const Shape& sh : {Shape{300, 400, 16, 24, 27, 3000}, Shape{200, 300, 8, 16, 200, 4000},
                          Shape{200, 50, 16, 8, 27, 1500}, Shape{200000, 400, 16, 24, 27, 3000}}) {
    SCOPED_TRACE(testing::Message() << "rows " << sh[0] << " / " << sh[1] << ", K " << sh[4]);
    Case c = random_case(rng, sh[0], sh[1], sh[2], sh[3], sh[4], sh[5]);
    const int64_t junk[][3] = {{c.s.num_out, 0, 0}, {0, -1, 0}};
    for (const auto& b : junk) c.t.insert(c.t.begin() + 3 * 4, b, b + 3);
    c.s.triplets += 2;
    const pcops::PointConvGrouping fwd = pcops::cuda::point_conv_mma_grouping(c.s, PointConvStep::kForward),
                                   vv = pcops::cuda::point_conv_mma_grouping(c.s, PointConvStep::kGradWeights);
    ASSERT_EQ(fwd.id, vv.id);
    ASSERT_EQ(fwd.bytes, vv.bytes);
    const auto f = to_bf16(c.f), w = to_bf16(c.w), g = to_bf16(c.g);
    const Mma ref = run_mma(c, f, w, g);
    StreamContext sc;
    DeviceBuffer<int64_t> t(c.t);
    DeviceBuffer<unsigned char> kept(vv.bytes);
    pcops::cuda::point_conv_mma_group(sc.ctx, c.s, PointConvStep::kGradWeights, t.data(), kept.data());
    DeviceBuffer<Bf16> df(f), dw(w), dg(g), out(c.s.num_out * c.s.channels_out), gw(w.size());
    out.fill(__float2bfloat16_rn(7.0f));
    const pcops::PointConvKept k{kept.data(), nullptr, kept.data()};
    pcops::cuda::point_conv_mma(sc.ctx, c.s, pcops::Half16::kBFloat16, df.data(), dw.data(), t.data(),
                                pcops::cuda::OutputAllocator([&] { return static_cast<void*>(out.data()); }), k);
    pcops::cuda::point_conv_mma_backward(sc.ctx, c.s, pcops::Half16::kBFloat16, dg.data(), df.data(), dw.data(),
                                         t.data(), pcops::cuda::OutputAllocator(),
                                         pcops::cuda::OutputAllocator([&] { return static_cast<void*>(gw.data()); }),
                                         k);
    const std::vector<Bf16> got = out.download(), got_gw = gw.download();
    EXPECT_EQ(std::memcmp(got.data(), ref.out.data(), got.size() * sizeof(Bf16)), 0);
    EXPECT_EQ(std::memcmp(got_gw.data(), ref.gw.data(), got_gw.size() * sizeof(Bf16)), 0);
  }
}

// The segmented grouping (32-bit keys placed into their segments, each segment then sorted) puts
// every triplet where the packed one (one radix sort of 64-bit keys) does, so both give the same
// bits. Shapes: one whose weight gradient splits the output rows into blocks (2^20 source rows: j
// takes 20 bits of the key, leaving 11 for i, but the blocks take at most 128 rows: 5,000 output
// rows in 40 blocks, crossed by the weight gradient's slices of 4,096 triplets), many kernel
// cells, one cell, one cell and one tile of output rows (30,000 triplets in one segment of the
// MVMR and of the weight gradient: longer than one block sort, 4,096 keys), segments of 129-512
// and 513-1,024 keys (9 and 3 cells over 8 tiles: the warp sorts of 16 and 32 keys a lane);
// invalid triplets in every one; one slice of the weight gradient crossing 2,344 blocks of output
// rows. The keys are kept in 3 bytes where they take at most 25 bits (the 25th from each segment's
// mid), else 4: 2^20 and 300,000 rows (26 and more bits) and 200,000 source rows (25 bits: the
// forward's and the weight gradient's keys; then the features gradient's).
TEST(CudaPointConvMma, SegmentedGroupingGivesThePackedBits) {
  constexpr const char* kVar = "PCOPS_CUDA_POINT_CONV_FAST_GROUPING";
  std::mt19937 rng(47);
  using Shape = std::array<int64_t, 6>;  // n_in, n_out, C_in, C_out, K, T
  for (const Shape& sh : {Shape{300, 200, 40, 24, 27, 5000}, Shape{int64_t{1} << 20, 5000, 8, 16, 27, 30000},
                          Shape{700, 600, 24, 40, 200, 20000}, Shape{2000, 1500, 24, 40, 1, 20000},
                          Shape{500, 100, 8, 16, 1, 30000}, Shape{1200, 1000, 8, 16, 9, 20000},
                          Shape{1200, 1000, 8, 16, 3, 20000}, Shape{200000, 5000, 8, 16, 27, 30000},
                          Shape{5000, 200000, 8, 16, 27, 30000},
                          // One slice of the weight gradient (one block a kernel cell) over 2,344
                          // blocks of 128 output rows.
                          Shape{2000, 300000, 8, 16, 1, 4000}}) {
    SCOPED_TRACE(testing::Message() << "rows " << sh[0] << " / " << sh[1] << ", K " << sh[4]);
    Case c = random_case(rng, sh[0], sh[1], sh[2], sh[3], sh[4], sh[5]);
    const int64_t junk[][3] = {{c.s.num_out, 0, 0}, {0, -1, 0}, {0, 0, c.s.kernels}, {-1, c.s.num_in, -1}};
    for (const auto& b : junk) c.t.insert(c.t.begin() + 3 * 7, b, b + 3);
    c.s.triplets += 4;
    ASSERT_TRUE(pcops::cuda::point_conv_mma_supported(c.s));
    const auto f = to_bf16(c.f), w = to_bf16(c.w), g = to_bf16(c.g);
    const auto run = [&](const char* grouping) {
      const pcops_cuda_test::ScopedEnv use(kVar, grouping);
      return run_mma(c, f, w, g);
    };
    const Mma seg = run("segmented"), packed = run("packed"), dflt = run("");
    for (const auto& [a, b, what] :
         {std::tuple{&seg.out, &packed.out, "forward"}, std::tuple{&seg.gf, &packed.gf, "grad_features"},
          std::tuple{&seg.gw, &packed.gw, "grad_weights"}}) {
      ASSERT_EQ(a->size(), b->size()) << what;
      EXPECT_EQ(std::memcmp(a->data(), b->data(), a->size() * sizeof(Bf16)), 0) << what;
    }
    EXPECT_EQ(std::memcmp(dflt.out.data(), seg.out.data(), seg.out.size() * sizeof(Bf16)), 0);
    EXPECT_EQ(std::memcmp(dflt.gw.data(), seg.gw.data(), seg.gw.size() * sizeof(Bf16)), 0);
  }
  const Case c = random_case(rng, 50, 40, 8, 8, 27, 300);
  const pcops_cuda_test::ScopedEnv use(kVar, "radix");
  EXPECT_THROW(run_mma(c, to_bf16(c.f), to_bf16(c.w), to_bf16(c.g)), std::invalid_argument);
}

// No source channels for the forward (C_in = 0) or for grad_features (C_out = 0): every sum is
// empty, so +0 everywhere (the MVMR kernel is not launched: it needs at least one stage a chunk),
// and the weight gradient has no element.
TEST(CudaPointConvMma, NoSourceChannelsGiveZeros) {
  std::mt19937 rng(41);
  for (const auto& [ci, co] : {std::pair<int64_t, int64_t>{0, 16}, {16, 0}}) {
    const Case c = random_case(rng, 300, 200, ci, co, 27, 4000);
    ASSERT_TRUE(pcops::cuda::point_conv_mma_supported(c.s));
    const Mma r = run_mma(c, to_bf16(c.f), to_bf16(c.w), to_bf16(c.g));
    ASSERT_EQ(r.out.size(), static_cast<size_t>(c.s.num_out * co));
    ASSERT_EQ(r.gf.size(), static_cast<size_t>(c.s.num_in * ci));
    EXPECT_TRUE(r.gw.empty());
    const auto bits = [](const Bf16& v) {
      uint16_t b = 0;
      std::memcpy(&b, &v, 2);
      return b;
    };
    for (const Bf16& v : r.out) EXPECT_EQ(bits(v), 0) << "forward, C_in = " << ci;
    for (const Bf16& v : r.gf) EXPECT_EQ(bits(v), 0) << "grad_features, C_out = " << co;
  }
}

// Outputs allocated on request (pcops::cuda::OutputAllocator): each requested output is asked for
// exactly once (an empty one too), an unrequested gradient never, and the results are the bits of
// the same calls into caller buffers.
TEST(CudaPointConvMma, OutputsOnRequest) {
  std::mt19937 rng(43);
  using Shape = std::array<int64_t, 6>;  // n_in, n_out, C_in, C_out, K, T
  for (const Shape& sh :
       {Shape{300, 200, 40, 24, 27, 5000}, Shape{300, 200, 16, 0, 27, 500}, Shape{120, 0, 8, 16, 27, 0},
        // Wide enough for the 128-channel blocks of every kernel (and the weight gradient's
        // 256-channel ones with PCOPS_CUDA_POINT_CONV_FAST_VVOR=wgmma256: tests/cuda/run_gpu.sh
        // races them).
        Shape{300, 200, 136, 72, 27, 3000}}) {
    SCOPED_TRACE(testing::Message() << "shape " << sh[2] << "x" << sh[3] << " rows " << sh[0] << " / " << sh[1]);
    const Case c = random_case(rng, sh[0], sh[1], sh[2], sh[3], sh[4], sh[5]);
    ASSERT_TRUE(pcops::cuda::point_conv_mma_supported(c.s));
    const auto f = to_bf16(c.f), w = to_bf16(c.w), g = to_bf16(c.g);
    const Mma ref = run_mma(c, f, w, g);
    StreamContext sc;
    DeviceBuffer<Bf16> df(f), dw(w), dg(g);
    DeviceBuffer<int64_t> t(c.t);
    DeviceBuffer<Bf16> out(c.s.num_out * c.s.channels_out), gf(f.size()), gw(w.size()), gw_alone(w.size());
    int calls[4] = {0, 0, 0, 0};
    const auto into = [&calls](int n, DeviceBuffer<Bf16>& b) {
      return pcops::cuda::OutputAllocator([&calls, n, &b] {
        ++calls[n];
        return static_cast<void*>(b.data());
      });
    };
    pcops::cuda::point_conv_mma(sc.ctx, c.s, pcops::Half16::kBFloat16, df.data(), dw.data(), t.data(), into(0, out));
    pcops::cuda::point_conv_mma_backward(sc.ctx, c.s, pcops::Half16::kBFloat16, dg.data(), df.data(), dw.data(),
                                         t.data(), into(1, gf), into(2, gw));
    pcops::cuda::point_conv_mma_backward(sc.ctx, c.s, pcops::Half16::kBFloat16, dg.data(), df.data(), dw.data(),
                                         t.data(), pcops::cuda::OutputAllocator(), into(3, gw_alone));
    for (int n = 0; n < 4; ++n) EXPECT_EQ(calls[n], 1) << "output " << n;
    const auto same = [](const std::vector<Bf16>& a, const std::vector<Bf16>& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(Bf16)) == 0;
    };
    EXPECT_TRUE(same(out.download(), ref.out));
    EXPECT_TRUE(same(gf.download(), ref.gf));
    EXPECT_TRUE(same(gw.download(), ref.gw));
    EXPECT_TRUE(same(gw_alone.download(), ref.gw));
  }
}

// Groupings made ahead (point_conv_mma_group) and handed to the calls give the bits of the calls
// that sort on their own, in both forms (segmented, packed), with out-of-range triplets among the
// rows; a step with an empty product has none (0 bytes); and the calls do read the kept
// groupings: ones made from other triplets of the same shape give those triplets' results.
TEST(CudaPointConvMma, KeptGroupingsGiveTheSameBits) {
  std::mt19937 rng(53);
  using pcops::PointConvStep;
  constexpr const char* kVar = "PCOPS_CUDA_POINT_CONV_FAST_GROUPING";
  const PointConvStep steps[] = {PointConvStep::kForward, PointConvStep::kGradFeatures, PointConvStep::kGradWeights};
  using Shape = std::array<int64_t, 6>;  // n_in, n_out, C_in, C_out, K, T
  for (const Shape& sh : {Shape{300, 200, 40, 24, 27, 5000}, Shape{1500, 1300, 72, 136, 27, 30000},
                          Shape{700, 600, 24, 40, 200, 20000}, Shape{300, 50, 24, 16, 27, 3000},
                          Shape{300, 200, 16, 0, 27, 500}}) {
    for (const char* form : {"segmented", "packed"}) {
      SCOPED_TRACE(testing::Message() << "shape " << sh[2] << "x" << sh[3] << ", K " << sh[4] << ", " << form);
      const pcops_cuda_test::ScopedEnv use(kVar, form);
      Case c = random_case(rng, sh[0], sh[1], sh[2], sh[3], sh[4], sh[5]);
      add_invalid_triplets(c, 5);
      Case other = random_case(rng, sh[0], sh[1], sh[2], sh[3], sh[4], sh[5]);
      other.t.insert(other.t.end(), c.t.end() - 9, c.t.end());  // same shape (T + 3 rows)
      other.s.triplets += 3;
      ASSERT_TRUE(pcops::cuda::point_conv_mma_supported(c.s));
      const auto f = to_bf16(c.f), w = to_bf16(c.w), g = to_bf16(c.g);
      const Mma ref = run_mma(c, f, w, g), ref_other = run_mma(other, f, w, g);
      for (const auto& [from, want] : {std::pair{&c, &ref}, std::pair{&other, &ref_other}}) {
        StreamContext sc;
        DeviceBuffer<int64_t> t(c.t), t_from(from->t);
        std::vector<DeviceBuffer<unsigned char>> kept;
        const void* ptr[3] = {nullptr, nullptr, nullptr};
        for (int n = 0; n < 3; ++n) {
          const pcops::PointConvGrouping info = pcops::cuda::point_conv_mma_grouping(c.s, steps[n]);
          EXPECT_EQ(info.bytes == 0, c.s.channels_out == 0) << "step " << n;  // every product empty
          if (info.bytes == 0) continue;
          EXPECT_THROW(pcops::cuda::point_conv_mma_group(sc.ctx, c.s, steps[n], t_from.data(), nullptr),
                       std::invalid_argument);
          kept.emplace_back(info.bytes);
          pcops::cuda::point_conv_mma_group(sc.ctx, c.s, steps[n], t_from.data(), kept.back().data());
          ptr[n] = kept.back().data();
        }
        const pcops::PointConvKept k{ptr[0], ptr[1], ptr[2]};
        DeviceBuffer<Bf16> df(f), dw(w), dg(g);
        DeviceBuffer<Bf16> out(c.s.num_out * c.s.channels_out), gf(f.size()), gw(w.size());
        for (DeviceBuffer<Bf16>* b : {&out, &gf, &gw}) b->fill(__float2bfloat16_rn(7.0f));
        const auto into = [](DeviceBuffer<Bf16>& b) {
          return pcops::cuda::OutputAllocator([&b] { return static_cast<void*>(b.data()); });
        };
        pcops::cuda::point_conv_mma(sc.ctx, c.s, pcops::Half16::kBFloat16, df.data(), dw.data(), t.data(),
                                    into(out), k);
        pcops::cuda::point_conv_mma_backward(sc.ctx, c.s, pcops::Half16::kBFloat16, dg.data(), df.data(),
                                             dw.data(), t.data(), into(gf), into(gw), k);
        const auto same = [](const std::vector<Bf16>& a, const std::vector<Bf16>& b) {
          return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(Bf16)) == 0;
        };
        const char* which = from == &c ? "own triplets" : "other triplets";
        EXPECT_TRUE(same(out.download(), want->out)) << which;
        EXPECT_TRUE(same(gf.download(), want->gf)) << which;
        EXPECT_TRUE(same(gw.download(), want->gw)) << which;
      }
      if (c.s.channels_out > 0) {  // the other triplets do give other results
        EXPECT_FALSE(std::memcmp(ref.out.data(), ref_other.out.data(), ref.out.size() * sizeof(Bf16)) == 0);
        EXPECT_FALSE(std::memcmp(ref.gw.data(), ref_other.gw.data(), ref.gw.size() * sizeof(Bf16)) == 0);
      }
    }
  }
  // One grouping a step and form: the forward's and the features gradient's differ where the rows
  // of i and j do; the same step of another channel count with the same form is the same one; the
  // forward reads the weight gradient's where both are segmented (blocks of 128 rows i, or all rows
  // in one block), not where the weight gradient's keys are packed.
  const auto id = [](const pcops::PointConvShape& s, PointConvStep step) {
    return pcops::cuda::point_conv_mma_grouping(s, step).id;
  };
  const pcops::PointConvShape a{300, 200, 40, 24, 27, 5000}, b{300, 200, 40, 32, 27, 5000},
      one_block{300, 50, 40, 24, 27, 5000};
  {
    const pcops_cuda_test::ScopedEnv use(kVar, "segmented");
    EXPECT_NE(id(a, PointConvStep::kForward), id(a, PointConvStep::kGradFeatures));
    EXPECT_EQ(id(a, PointConvStep::kForward), id(b, PointConvStep::kForward));
    for (const pcops::PointConvShape& s : {a, one_block}) {
      EXPECT_EQ(id(s, PointConvStep::kForward), id(s, PointConvStep::kGradWeights));
      EXPECT_EQ(pcops::cuda::point_conv_mma_grouping(s, PointConvStep::kForward).bytes,
                pcops::cuda::point_conv_mma_grouping(s, PointConvStep::kGradWeights).bytes);
    }
  }
  const pcops_cuda_test::ScopedEnv use(kVar, "packed");
  EXPECT_NE(id(a, PointConvStep::kForward), id(a, PointConvStep::kGradWeights));
  EXPECT_NE(id(a, PointConvStep::kForward), id(a, PointConvStep::kGradFeatures));
}

}  // namespace
