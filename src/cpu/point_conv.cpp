// CPU point_conv (MVMR) and its backward, in the contract's fixed order (no atomics).
// Parallel decomposition: the triplets are grouped by one radix sort of packed keys (tiles of
// output rows and k forward, of input rows and k for grad_features, k for grad_weights); each task
// owns whole tiles or kernels and walks their triplets in the contract's order, vectorised over
// the contiguous channel axis (the per-element order is unchanged by that).
#include "pcops/point_conv.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "common/bits.hpp"
#include "core/validate.hpp"
#include "cpu/radix_sort.hpp"

namespace pcops::cpu {
namespace {

// MVMR grouping: destination rows in tiles of kRowTile; triplets ordered by (tile, k, row,
// source row), offsets per (tile, k). Walking a tile k by k visits each row's triplets in
// ascending (k, source) order, the contract's, while W_k is reused by the whole tile.
constexpr int64_t kRowTile = 64;

// The triplets as the kernels walk them: group g's positions are [offsets[g], offsets[g + 1]),
// ordered by (group, a, b). tiled (the MVMR; a = destination row, b = source row): group =
// (a / kRowTile) * K + k. Otherwise (the VVOR; a = i, b = j): kernel cell k's triplets are groups
// k * tiles .. (k + 1) * tiles - 1, group k * tiles + h holding the rows a with a / kRowTile == h
// (tiles == 1 for the packed keys and the tuples, whose keys hold all of a). The keys: 32-bit
// (a's row in its block of kRowTile above b: "segmented"), 64-bit packed (a's low bits above b's),
// or, for keys wider than 64 bits, the pairs themselves; PairRef reads them all the same way.
struct Pairs {
  std::vector<int64_t> offsets;
  std::vector<uint32_t> keys32;
  std::vector<uint64_t> keys;
  std::vector<int64_t> ab;
  int lb = 0;
  uint64_t amask = 0, bmask = 0;
  int64_t tiles = 1;
};

struct PairRef {
  const uint32_t* keys32;
  const uint64_t* keys;
  const int64_t* ab;
  int lb;
  uint64_t amask, bmask;
  // a at position p (base: the first row of the block that p's group covers, for the MVMR's keys
  // and the segmented ones; 0 for the VVOR's packed keys and the tuples) and b.
  int64_t a(int64_t p, int64_t base) const {
    if (keys32 != nullptr) return base + static_cast<int64_t>((keys32[p] >> lb) & amask);
    return keys != nullptr ? base + static_cast<int64_t>((keys[p] >> lb) & amask) : ab[2 * p];
  }
  int64_t b(int64_t p) const {
    if (keys32 != nullptr) return static_cast<int64_t>(keys32[p] & bmask);
    return keys != nullptr ? static_cast<int64_t>(keys[p] & bmask) : ab[2 * p + 1];
  }
};

PairRef ref(const Pairs& g) {
  return PairRef{g.keys32.empty() ? nullptr : g.keys32.data(), g.keys.empty() ? nullptr : g.keys.data(),
                 g.ab.empty() ? nullptr : g.ab.data(), g.lb, g.amask, g.bmask};
}

// A grouping as the kernels read it: a Pairs' vectors, or a kept grouping's one buffer
// (point_conv_group).
struct PairsView {
  const int64_t* offsets;  // [groups + 1]
  int64_t groups, tiles;
  PairRef ij;
  bool cell_major = false;  // an MVMR reading the weight gradient's (k, tile) groups
};

PairsView view(const Pairs& g, bool cell_major = false) {
  return {g.offsets.data(), static_cast<int64_t>(g.offsets.size()) - 1, g.tiles, ref(g), cell_major};
}

// PCOPS_CPU_POINT_CONV_GROUPING: "segmented" (the default) where the keys fit 32 bits, else
// "packed" where they fit 64, else "tuples"; "packed" or "tuples" takes that one where it can (the
// tests compare all three).
enum class Grouping { kSegmented, kPacked, kTuples };
Grouping grouping_asked() {
  const char* e = std::getenv("PCOPS_CPU_POINT_CONV_GROUPING");
  if (e == nullptr || *e == 0 || std::strcmp(e, "segmented") == 0) return Grouping::kSegmented;
  if (std::strcmp(e, "packed") == 0) return Grouping::kPacked;
  if (std::strcmp(e, "tuples") == 0) return Grouping::kTuples;
  throw std::invalid_argument(
      "pcops point_conv: PCOPS_CPU_POINT_CONV_GROUPING must be segmented, packed or tuples");
}

// "segmented": every triplet's 32-bit key placed into its group by counting (contiguous chunks of
// the triplets, each counted on its own, so a chunk's triplets of one group land in order after
// the previous chunk's: the same places for any thread count), then each group's keys sorted
// (equal keys are equal triplets). 4 bytes a triplet and a count per (group, chunk), against the
// packed keys' 16 bytes a triplet during their radix sort, and about half its time.
template <class GroupOf, class KeyOf>
void place_and_sort(const CpuContext& ctx, int64_t T, int64_t groups, GroupOf group_of, KeyOf key_of,
                    Pairs& g) {
  // Up to 16 chunks of at least kChunk triplets, and at most one count per triplet (the counts
  // are walked once, group by group): a shape's own, whatever runs them.
  const int64_t chunks = std::clamp<int64_t>(
      std::min<int64_t>(T / RadixSortPolicy::kChunk, T / std::max<int64_t>(groups, 1)), 1, 16);
  const auto lo = [T, chunks](int64_t c) { return T * c / chunks; };
  std::vector<uint32_t> at(static_cast<size_t>(chunks * groups), 0);  // [chunk][group]
  parallel_for(ctx, 0, chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      uint32_t* h = at.data() + c * groups;
      for (int64_t p = lo(c); p < lo(c + 1); ++p) ++h[group_of(p)];
    }
  });
  int64_t sum = 0;
  for (int64_t v = 0; v < groups; ++v) {
    g.offsets[static_cast<size_t>(v)] = sum;
    for (int64_t c = 0; c < chunks; ++c) {
      uint32_t& h = at[static_cast<size_t>(c * groups + v)];
      const uint32_t n = h;
      h = static_cast<uint32_t>(sum);
      sum += n;
    }
  }
  g.offsets[static_cast<size_t>(groups)] = sum;
  g.keys32.resize(static_cast<size_t>(T));
  parallel_for(ctx, 0, chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      uint32_t* h = at.data() + c * groups;
      for (int64_t p = lo(c); p < lo(c + 1); ++p) g.keys32[h[group_of(p)]++] = key_of(p);
    }
  });
  // Each group's keys ascending: a few, or keys already in row order, by insertion; more by a
  // counting pass on the row's place in its block (the key's top bits, above lb) into scratch,
  // then insertion inside each row (its keys differ in b only, usually one to three of them), and
  // back.
  const int64_t per_group = std::max<int64_t>(T / std::max<int64_t>(groups, 1), 1);
  const int64_t grain = std::max<int64_t>(1, RadixSortPolicy::kChunk / per_group);
  const int lb = g.lb;
  parallel_for(ctx, 0, groups, grain, [&](int64_t v0, int64_t v1) {
    std::vector<uint32_t> scratch;
    const auto insertion = [](uint32_t* x, int64_t m) {
      for (int64_t i = 1; i < m; ++i) {
        const uint32_t key = x[i];
        int64_t j = i;
        for (; j > 0 && x[j - 1] > key; --j) x[j] = x[j - 1];
        x[j] = key;
      }
    };
    for (int64_t v = v0; v < v1; ++v) {
      uint32_t* x = g.keys32.data() + g.offsets[static_cast<size_t>(v)];
      const int64_t m = g.offsets[static_cast<size_t>(v) + 1] - g.offsets[static_cast<size_t>(v)];
      bool rows_in_order = true;  // triplets listed row by row (the forward's usual input)
      for (int64_t i = 1; i < m && rows_in_order; ++i) rows_in_order = (x[i] >> lb) >= (x[i - 1] >> lb);
      if (m <= 24 || rows_in_order) {
        insertion(x, m);
        continue;
      }
      uint32_t start[kRowTile + 1] = {};
      for (int64_t i = 0; i < m; ++i) ++start[(x[i] >> lb) + 1];
      for (int r = 0; r < kRowTile; ++r) start[r + 1] += start[r];
      scratch.resize(static_cast<size_t>(m));
      uint32_t next[kRowTile];
      std::copy(start, start + kRowTile, next);
      for (int64_t i = 0; i < m; ++i) scratch[next[x[i] >> lb]++] = x[i];
      for (int r = 0; r < kRowTile; ++r) insertion(scratch.data() + start[r], start[r + 1] - start[r]);
      std::copy(scratch.begin(), scratch.end(), x);
    }
  });
}

// A grouping's form and key layout, a function of the shape (and PCOPS_CPU_POINT_CONV_GROUPING):
// "segmented" where the keys fit 32 bits (and T < 2^32), else "packed" where they fit 64, else
// "tuples"; groups, tiles and the masks of PairRef.
struct PairsLayout {
  Grouping form;
  int64_t groups, tiles;
  int lb, la;
  uint64_t amask, bmask;
};

PairsLayout pairs_layout(int64_t T, int64_t na, int64_t nb, int64_t K, bool tiled) {
  using pcops::common::bits_for;
  static_assert(kRowTile == 64, "six bits of row in the tile");
  const Grouping asked = grouping_asked();
  const int lb = bits_for(static_cast<uint64_t>(std::max<int64_t>(nb - 1, 0)));
  const int64_t a_tiles = (na + kRowTile - 1) / kRowTile;
  const uint64_t bmask = (uint64_t{1} << lb) - 1;
  if (asked == Grouping::kSegmented && 6 + lb <= 32 && T < (int64_t{1} << 32)) {
    const int64_t tiles = tiled ? 1 : std::max<int64_t>(a_tiles, 1);
    return {Grouping::kSegmented, tiled ? a_tiles * K : K * tiles, tiles, lb, 6, kRowTile - 1, bmask};
  }
  const int64_t groups = tiled ? a_tiles * K : K;
  const int la = tiled ? 6 : bits_for(static_cast<uint64_t>(std::max<int64_t>(na - 1, 0)));
  const int lg = bits_for(static_cast<uint64_t>(std::max<int64_t>(groups - 1, 0)));
  if (lg + la + lb <= 64 && asked != Grouping::kTuples)
    return {Grouping::kPacked, groups, 1, lb, la, (uint64_t{1} << la) - 1, bmask};
  return {Grouping::kTuples, groups, 1, 0, 0, 0, 0};
}

Pairs group_pairs(const CpuContext& ctx, const int64_t* t, int64_t T, int a_col, int b_col, int64_t na, int64_t nb,
                  int64_t K, bool tiled) {
  Pairs g;
  const PairsLayout lay = pairs_layout(T, na, nb, K, tiled);
  const int lb = lay.lb;
  if (lay.form == Grouping::kSegmented) {
    g.tiles = lay.tiles;
    const int64_t groups = lay.groups;
    g.offsets.assign(static_cast<size_t>(groups) + 1, 0);
    g.lb = lb;
    g.amask = lay.amask;
    g.bmask = lay.bmask;
    if (T == 0) return g;
    const int64_t tiles = g.tiles;
    place_and_sort(
        ctx, T, groups,
        [&](int64_t p) {
          const int64_t a = t[p * 3 + a_col], k = t[p * 3 + 2];
          return tiled ? (a / kRowTile) * K + k : k * tiles + a / kRowTile;
        },
        [&](int64_t p) {
          const auto row = static_cast<uint32_t>(t[p * 3 + a_col] % kRowTile);
          return (row << lb) | static_cast<uint32_t>(t[p * 3 + b_col]);
        },
        g);
    return g;
  }
  const int64_t groups = lay.groups;
  const auto group_of = [&](int64_t p) {
    const int64_t a = t[p * 3 + a_col], k = t[p * 3 + 2];
    return tiled ? (a / kRowTile) * K + k : k;
  };
  const int la = lay.la;
  const int lg = pcops::common::bits_for(static_cast<uint64_t>(std::max<int64_t>(groups - 1, 0)));
  g.offsets.assign(static_cast<size_t>(groups) + 1, 0);
  if (T == 0) return g;
  if (lay.form == Grouping::kPacked) {
    // One radix sort of packed (group, a or a's row in the tile, b) keys; the group offsets from
    // the sorted keys (each offset written once, by the boundary that passes it).
    g.keys.resize(static_cast<size_t>(T));
    parallel_for(ctx, 0, T, 1 << 14, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t a = t[p * 3 + a_col], b = t[p * 3 + b_col];
        const uint64_t low = static_cast<uint64_t>(tiled ? a % kRowTile : a);
        g.keys[static_cast<size_t>(p)] =
            (static_cast<uint64_t>(group_of(p)) << (la + lb)) | (low << lb) | static_cast<uint64_t>(b);
      }
    });
    radix_sort(ctx, g.keys, lg + la + lb, [](uint64_t k) { return k; });
    const int shift = la + lb;
    const auto grp = [&](int64_t p) { return static_cast<int64_t>(g.keys[static_cast<size_t>(p)] >> shift); };
    parallel_for(ctx, 0, T + 1, 1 << 14, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t before = p == 0 ? -1 : grp(p - 1), at = p == T ? groups : grp(p);
        for (int64_t v = before + 1; v <= at; ++v) g.offsets[static_cast<size_t>(v)] = p;
      }
    });
    g.lb = lb;
    g.amask = lay.amask;
    g.bmask = lay.bmask;
    return g;
  }
  for (int64_t p = 0; p < T; ++p) ++g.offsets[static_cast<size_t>(group_of(p)) + 1];
  for (int64_t v = 0; v < groups; ++v) g.offsets[v + 1] += g.offsets[v];
  // Keys wider than 64 bits: a comparison sort of the positions (equal tuples are equal triplets).
  std::vector<int64_t> order(static_cast<size_t>(T));
  for (int64_t p = 0; p < T; ++p) order[static_cast<size_t>(p)] = p;
  const auto tuple = [&](int64_t p) { return std::make_tuple(group_of(p), t[p * 3 + a_col], t[p * 3 + b_col]); };
  std::sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return tuple(x) < tuple(y); });
  g.ab.resize(static_cast<size_t>(2 * T));
  for (int64_t p = 0; p < T; ++p) {
    const int64_t r = order[static_cast<size_t>(p)];
    g.ab[static_cast<size_t>(2 * p)] = t[r * 3 + a_col];
    g.ab[static_cast<size_t>(2 * p + 1)] = t[r * 3 + b_col];
  }
  return g;
}

int64_t grain_for(int64_t work_per_row) {
  return std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(work_per_row, 1));
}

// One triplet's contribution to destination channels [0, DB) of its row: the row's running sums
// (out) in registers, every source channel in order, then back. DB a multiple of 16: GCC vector
// types keep the DB / 16 accumulators in registers (a plain float[64] was left on the stack);
// a vector times a scalar broadcasts the scalar, element-wise IEEE operations as in the scalar
// loop (DB = 1).
typedef float Vec16 __attribute__((vector_size(64)));
typedef float Vec8 __attribute__((vector_size(32)));

template <int DB>
__attribute__((always_inline)) inline void mvmr_term(const float* m, const float* s, int64_t c_src, int64_t c_dst,
                                                     float* out) {
  if constexpr (DB == 1) {
    float acc = out[0];
    for (int64_t cs = 0; cs < c_src; ++cs) acc = acc + m[cs * c_dst] * s[cs];
    out[0] = acc;
  } else if constexpr (DB == 8) {
    Vec8 acc;
    __builtin_memcpy(&acc, out, sizeof(Vec8));
    for (int64_t cs = 0; cs < c_src; ++cs) {
      Vec8 wv;
      __builtin_memcpy(&wv, m + cs * c_dst, sizeof(Vec8));
      acc = acc + wv * s[cs];
    }
    __builtin_memcpy(out, &acc, sizeof(Vec8));
  } else {
    static_assert(DB % 16 == 0, "whole vectors");
    constexpr int NV = DB / 16;
    Vec16 acc[NV];
    for (int v = 0; v < NV; ++v) __builtin_memcpy(&acc[v], out + 16 * v, sizeof(Vec16));
    for (int64_t cs = 0; cs < c_src; ++cs) {
      const float x = s[cs];
      const float* w = m + cs * c_dst;
      for (int v = 0; v < NV; ++v) {
        Vec16 wv;
        __builtin_memcpy(&wv, w + 16 * v, sizeof(Vec16));
        acc[v] = acc[v] + wv * x;
      }
    }
    for (int v = 0; v < NV; ++v) __builtin_memcpy(out + 16 * v, &acc[v], sizeof(Vec16));
  }
}

// R triplets of different rows at once (DB a multiple of 16): each W_k vector loaded once serves
// the R rows' running sums, which stay independent, each in its own order.
template <int DB, int R>
__attribute__((always_inline)) inline void mvmr_terms(const float* m, const float* const (&s)[R], int64_t c_src,
                                                      int64_t c_dst, float* const (&out)[R]) {
  static_assert(DB % 16 == 0, "whole vectors");
  constexpr int NV = DB / 16;
  Vec16 acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) __builtin_memcpy(&acc[r][v], out[r] + 16 * v, sizeof(Vec16));
  for (int64_t cs = 0; cs < c_src; ++cs) {
    float x[R];
    for (int r = 0; r < R; ++r) x[r] = s[r][cs];
    const float* w = m + cs * c_dst;
    for (int v = 0; v < NV; ++v) {
      Vec16 wv;
      __builtin_memcpy(&wv, w + 16 * v, sizeof(Vec16));
      for (int r = 0; r < R; ++r) acc[r][v] = acc[r][v] + wv * x[r];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) __builtin_memcpy(out[r] + 16 * v, &acc[r][v], sizeof(Vec16));
}

// Destination channels [d0, c_dst) of one triplet: register blocks of 64, 32, 16 and 8, then one
// at a time.
__attribute__((always_inline)) inline void mvmr_rest(int64_t d0, const float* mk, const float* s, int64_t c_src,
                                                     int64_t c_dst, float* out) {
  for (; d0 + 64 <= c_dst; d0 += 64) mvmr_term<64>(mk + d0, s, c_src, c_dst, out + d0);
  if (d0 + 32 <= c_dst) mvmr_term<32>(mk + d0, s, c_src, c_dst, out + d0), d0 += 32;
  if (d0 + 16 <= c_dst) mvmr_term<16>(mk + d0, s, c_src, c_dst, out + d0), d0 += 16;
  if (d0 + 8 <= c_dst) mvmr_term<8>(mk + d0, s, c_src, c_dst, out + d0), d0 += 8;
  for (; d0 < c_dst; ++d0) mvmr_term<1>(mk + d0, s, c_src, c_dst, out + d0);
}

// Destination channels of R triplets of different rows: the blocks of 64, 32 and 16 together,
// the rest one triplet after the other.
template <int R>
__attribute__((always_inline)) inline void mvmr_group(const float* mk, const float* const (&s)[R], int64_t c_src,
                                                      int64_t c_dst, float* const (&o)[R]) {
  int64_t d0 = 0;
  float* od[R];  // the rows' outputs at channel d0
  const auto at = [&](int64_t d) -> float* const(&)[R] {
    for (int u = 0; u < R; ++u) od[u] = o[u] + d;
    return od;
  };
  for (; d0 + 64 <= c_dst; d0 += 64) mvmr_terms<64, R>(mk + d0, s, c_src, c_dst, at(d0));
  if (d0 + 32 <= c_dst) mvmr_terms<32, R>(mk + d0, s, c_src, c_dst, at(d0)), d0 += 32;
  if (d0 + 16 <= c_dst) mvmr_terms<16, R>(mk + d0, s, c_src, c_dst, at(d0)), d0 += 16;
  for (int u = 0; u < R; ++u) mvmr_rest(d0, mk, s[u], c_src, c_dst, o[u]);
}

// Tiles [t0, t1) of the MVMR: dst[r, d] = fl(dst[r, d] + fl(mat[k, s, d] * src[m, s])) over the
// triplets of row r in ascending (k, m) order, s ascending inside each; m = the triplet's source
// row, mat is [K, C_src, C_dst]. A tile's rows are zeroed, then its triplets are taken k by k
// (offsets per (tile, k); rm: (row, source row) per triplet in grouping order), so W_k's columns
// stay in cache for the whole tile. Inside a (tile, k) segment the runs of up to kRows rows go side
// by side: step u takes the u-th triplet of every run that has one, kRows (or 2) rows at a time
// with each W_k vector loaded once for all, so every row keeps its order. Destination channels
// in register blocks of 64, 32, 16 and 8, then one at a time. Cloned per ISA: the compiler
// vectorises over d; contraction stays off, so every clone computes the same bits.
constexpr int kRows = 4;  // (the loop below takes groups of 4, 2 and 1)
__attribute__((target_clones("avx512f", "avx2", "default")))
void mvmr_tiles(int64_t t0, int64_t t1, int64_t K, const int64_t* offsets, int64_t tile_stride, int64_t k_stride,
                PairRef rm, const float* src, int64_t c_src, const float* mat, int64_t c_dst, int64_t rows,
                float* dst) {
  for (int64_t tile = t0; tile < t1; ++tile) {
    const int64_t r_end = std::min(rows, (tile + 1) * kRowTile), row0 = tile * kRowTile;
    for (int64_t q = row0 * c_dst; q < r_end * c_dst; ++q) dst[q] = 0.0f;
    for (int64_t k = 0; k < K; ++k) {
      const float* mk = mat + k * c_src * c_dst;
      const int64_t seg = tile * tile_stride + k * k_stride;  // group (tile, k)
      const int64_t p1 = offsets[seg + 1];
      int64_t p = offsets[seg];
      // Up to kRows runs of one row each go side by side, in slots: run r = positions [pos[r],
      // end[r]); a slot whose run ends takes the segment's next run, so that kRows rows stay
      // busy until the segment's runs run out (each row has one run in the segment, so no two
      // slots hold the same row, and every row's triplets keep their order).
      int64_t pos[kRows], end[kRows];
      int active = 0;
      const auto take_run = [&](int r) {
        if (p >= p1) return false;
        const int64_t row = rm.a(p, row0);
        int64_t q = p + 1;
        while (q < p1 && rm.a(q, row0) == row) ++q;
        pos[r] = p, end[r] = q, p = q;
        return true;
      };
      while (active < kRows && take_run(active)) ++active;
      while (active > 0) {
        const float* s[kRows];
        float* o[kRows];
        for (int r = 0; r < active; ++r) s[r] = src + rm.b(pos[r]) * c_src, o[r] = dst + rm.a(pos[r], row0) * c_dst;
        int g = 0;
        if (active == 4) {
          mvmr_group<4>(mk, {s[0], s[1], s[2], s[3]}, c_src, c_dst, {o[0], o[1], o[2], o[3]}), g = 4;
        } else {
          for (; g + 2 <= active; g += 2) mvmr_group<2>(mk, {s[g], s[g + 1]}, c_src, c_dst, {o[g], o[g + 1]});
        }
        for (; g < active; ++g) mvmr_rest(0, mk, s[g], c_src, c_dst, o[g]);
        for (int r = active - 1; r >= 0; --r)  // slots past the runs close; the last slot fills the gap
          if (++pos[r] == end[r] && !take_run(r)) {
            --active;
            pos[r] = pos[active], end[r] = end[active];
          }
      }
    }
  }
}

// g: group_pairs over the destination rows, tiled ((tile, k) groups) or, cell_major, the weight
// gradient's segmented (k, tile) groups (the same keys and segments in another order).
void mvmr(const CpuContext& ctx, const PairsView& g, int64_t K, const float* src, int64_t c_src, const float* mat,
          int64_t c_dst, int64_t rows, float* dst) {
  const int64_t T = g.offsets[g.groups];
  const int64_t tiles = (rows + kRowTile - 1) / kRowTile;
  const int64_t per_tile = (T / std::max<int64_t>(tiles, 1) + 1) * c_src * c_dst;
  const int64_t tile_stride = g.cell_major ? 1 : K, k_stride = g.cell_major ? g.tiles : 1;
  parallel_for(ctx, 0, tiles, grain_for(per_tile), [&](int64_t t0, int64_t t1) {
    mvmr_tiles(t0, t1, K, g.offsets, tile_stride, k_stride, g.ij, src, c_src, mat, c_dst, rows, dst);
  });
}

// The weight gradient folds kernel k's triplets kVvorChunk at a time: their rows of G (the task's
// output channels) and F are first copied side by side into a scratch buffer, so that every
// register tile of the task reads them from cache instead of gathering them again.
constexpr int64_t kVvorChunk = 64;
constexpr int64_t kVvorRows = 64;  // output channels per task

// grad_weights tile [o, o + OB) x [c0, c0 + CB) over one chunk of n triplets: dw[o, c] =
// fl(dw[o, c] + fl(G[i, o] * F[j, c])) triplet after triplet, the OB x CB running sums in registers
// (read from dw and written back, exact float32 copies). gc: the chunk's G rows (ldg apart, the
// task's first output channel first), fc: its F rows (ci apart); dw: rows of W_k's gradient.
template <int OB, int CB>
__attribute__((always_inline)) inline void vvor_tile(int64_t n, const float* gc, int64_t ldg, const float* fc,
                                                     int64_t ci, int64_t o, int64_t c0, float* dw) {
  float acc[OB][CB];
  for (int r = 0; r < OB; ++r)
    for (int c = 0; c < CB; ++c) acc[r][c] = dw[(o + r) * ci + c0 + c];
  for (int64_t t = 0; t < n; ++t) {
    const float* go = gc + t * ldg + o;
    const float* f = fc + t * ci + c0;
    for (int r = 0; r < OB; ++r) {
      const float gv = go[r];
      for (int c = 0; c < CB; ++c) acc[r][c] = acc[r][c] + gv * f[c];
    }
  }
  for (int r = 0; r < OB; ++r)
    for (int c = 0; c < CB; ++c) dw[(o + r) * ci + c0 + c] = acc[r][c];
}

// Rows [0, rows) (relative to the task's first output channel) of one column block of width CB:
// tiles of OB rows, then single rows.
template <int OB, int CB>
__attribute__((always_inline)) inline void vvor_columns(int64_t n, const float* gc, int64_t ldg, const float* fc,
                                                        int64_t ci, int64_t rows, int64_t c0, float* dw) {
  int64_t o = 0;
  for (; o + OB <= rows; o += OB) vvor_tile<OB, CB>(n, gc, ldg, fc, ci, o, c0, dw);
  for (; o < rows; ++o) vvor_tile<1, CB>(n, gc, ldg, fc, ci, o, c0, dw);
}

// Rows [o0, o1) (o1 - o0 <= kVvorRows) of one piece's sums (m: a [co, ci] matrix, kernel k's
// gradient or a partial) from triplets [a, b) of kernel k in grouping order (ij: (i, j) per
// triplet): the rows are zeroed, then for each chunk of triplets (gathered into scratch:
// kVvorChunk x (kVvorRows + ci) floats) column blocks of 64, 32, 16 and 8 in register tiles of
// about 256 accumulators (4, 8, 16 and 16 rows), the last columns one at a time. Every element
// folds the piece's triplets in grouping order. Cloned per ISA like mvmr_tiles.
__attribute__((target_clones("avx512f", "avx2", "default")))
void vvor_piece(int64_t a, int64_t b, PairRef ij, const int64_t* sub, int64_t tiles, const float* grad_out,
                const float* features, int64_t co, int64_t ci, int64_t o0, int64_t o1, float* m,
                float* scratch) {
  const int64_t rows = o1 - o0;
  float* d = m + o0 * ci;
  for (int64_t q = 0; q < rows * ci; ++q) d[q] = 0.0f;
  float* gc = scratch;
  float* fc = scratch + kVvorChunk * kVvorRows;
  // The block of rows i of position q: group h of the cell (sub: the cell's group offsets), moved
  // on as q passes the group's end.
  int64_t h = std::upper_bound(sub, sub + tiles, a) - sub - 1, end = sub[h + 1];
  for (int64_t q0 = a; q0 < b; q0 += kVvorChunk) {
    const int64_t n = std::min(kVvorChunk, b - q0);
    for (int64_t r = 0; r < n; ++r) {
      while (q0 + r >= end) end = sub[++h + 1];
      std::memcpy(gc + r * kVvorRows, grad_out + ij.a(q0 + r, h * kRowTile) * co + o0, sizeof(float) * rows);
      std::memcpy(fc + r * ci, features + ij.b(q0 + r) * ci, sizeof(float) * ci);
    }
    int64_t c = 0;
    for (; c + 64 <= ci; c += 64) vvor_columns<4, 64>(n, gc, kVvorRows, fc, ci, rows, c, d);
    if (c + 32 <= ci) vvor_columns<8, 32>(n, gc, kVvorRows, fc, ci, rows, c, d), c += 32;
    if (c + 16 <= ci) vvor_columns<16, 16>(n, gc, kVvorRows, fc, ci, rows, c, d), c += 16;
    if (c + 8 <= ci) vvor_columns<16, 8>(n, gc, kVvorRows, fc, ci, rows, c, d), c += 8;
    for (; c < ci; ++c) vvor_columns<16, 1>(n, gc, kVvorRows, fc, ci, rows, c, d);
  }
}

// The weight gradient (the contract's pieces, core::vvor_piece_length): one task per (piece, block
// of kVvorRows output channels), so a long kernel cell spreads over the threads; a cell's first
// piece folds into its gradient, each later one into a partial matrix (at most floor(T / L) of
// them), and a second pass adds a cell's partials to its gradient in order.
void vvor(const CpuContext& ctx, const PairsView& g, int64_t K, int64_t T, int64_t L, const float* grad_out,
          const float* features, int64_t co, int64_t ci, float* grad_weights) {
  struct Piece {
    int64_t k, a, b, slot;  // slot < 0: the cell's first piece (into its gradient), else a partial
  };
  const int64_t M = co * ci, blocks = (co + kVvorRows - 1) / kVvorRows;
  std::vector<Piece> pieces;
  std::vector<int64_t> first_partial(static_cast<size_t>(K + 1), 0);  // cell k's: [first_partial[k], [k + 1])
  int64_t partials = 0;
  for (int64_t k = 0; k < K; ++k) {
    first_partial[k] = partials;
    const int64_t p0 = g.offsets[k * g.tiles], p1 = g.offsets[(k + 1) * g.tiles];
    pieces.push_back({k, p0, std::min(p1, p0 + L), -1});
    for (int64_t a = p0 + L; a < p1; a += L) pieces.push_back({k, a, std::min(p1, a + L), partials++});
  }
  first_partial[K] = partials;
  std::vector<float> part(static_cast<size_t>(partials * M));
  const PairRef ij = g.ij;
  const int64_t n_tasks = static_cast<int64_t>(pieces.size()) * blocks;
  parallel_for(ctx, 0, n_tasks, grain_for(std::min(L, T / std::max<int64_t>(K, 1) + 1) * kVvorRows * ci),
               [&](int64_t q0, int64_t q1) {
                 std::vector<float> scratch(static_cast<size_t>(kVvorChunk * (kVvorRows + ci)));
                 for (int64_t q = q0; q < q1; ++q) {
                   const Piece& pc = pieces[static_cast<size_t>(q / blocks)];
                   const int64_t o0 = (q % blocks) * kVvorRows, o1 = std::min(co, o0 + kVvorRows);
                   float* m = pc.slot < 0 ? grad_weights + pc.k * M : part.data() + pc.slot * M;
                   const int64_t* sub = g.offsets + pc.k * g.tiles;
                   vvor_piece(pc.a, pc.b, ij, sub, g.tiles, grad_out, features, co, ci, o0, o1, m, scratch.data());
                 }
               });
  if (partials == 0) return;
  // dw[k] = fl(... fl(dw[k] + partial 1) ... + partial last), element by element.
  parallel_for(ctx, 0, K * blocks, grain_for((partials / std::max<int64_t>(K, 1) + 1) * kVvorRows * ci),
               [&](int64_t q0, int64_t q1) {
                 for (int64_t q = q0; q < q1; ++q) {
                   const int64_t k = q / blocks, o0 = (q % blocks) * kVvorRows, o1 = std::min(co, o0 + kVvorRows);
                   float* d = grad_weights + k * M + o0 * ci;
                   for (int64_t s = first_partial[k]; s < first_partial[k + 1]; ++s) {
                     const float* p = part.data() + s * M + o0 * ci;
                     for (int64_t e = 0; e < (o1 - o0) * ci; ++e) d[e] = d[e] + p[e];
                   }
                 }
               });
}

}  // namespace

namespace {

// The grouping of a step: destination / source columns, rows, whether tiled (the MVMR's), and
// cell_major: the forward reads the weight gradient's grouping, where that one is segmented (the
// same keys, row in its block of 64 above j, in (k, tile) groups instead of (tile, k)), so one
// grouping serves both steps (one sort, one kept buffer).
struct StepPairs {
  int a_col, b_col;
  int64_t na, nb;
  bool tiled, empty, cell_major;
  PairsLayout layout(const PointConvShape& s) const { return pairs_layout(s.triplets, na, nb, s.kernels, tiled); }
};
StepPairs step_pairs(const PointConvShape& s, PointConvStep step) {
  const bool empty = s.channels_out * s.channels_in == 0;
  switch (step) {
    case PointConvStep::kForward: {
      const bool cells = pairs_layout(s.triplets, s.num_out, s.num_in, s.kernels, false).form == Grouping::kSegmented;
      return {0, 1, s.num_out, s.num_in, !cells, empty || s.num_out == 0, cells};
    }
    case PointConvStep::kGradFeatures:
      return {1, 0, s.num_in, s.num_out, true, empty || s.num_in == 0, false};
    case PointConvStep::kGradWeights:
      return {0, 1, s.num_out, s.num_in, false, empty || s.kernels == 0, false};
  }
  throw std::invalid_argument("pcops point_conv: unknown step");
}

// A kept grouping's buffer: offsets [groups + 1] int64, then the keys (uint32 segmented, uint64
// packed) or the (a, b) pairs (tuples) of the T triplets.
size_t kept_keys_at(const PairsLayout& lay) { return sizeof(int64_t) * static_cast<size_t>(lay.groups + 1); }
size_t kept_bytes(const PairsLayout& lay, int64_t T) {
  const size_t per = lay.form == Grouping::kSegmented ? 4 : lay.form == Grouping::kPacked ? 8 : 16;
  return kept_keys_at(lay) + per * static_cast<size_t>(T);
}

// The grouping of `step`: read from `kept` (point_conv_group) or made now into `own`.
PairsView step_view(const CpuContext& ctx, const PointConvShape& s, PointConvStep step, const int64_t* t,
                    const void* kept, Pairs& own) {
  const StepPairs sp = step_pairs(s, step);
  if (kept == nullptr) {
    own = group_pairs(ctx, t, s.triplets, sp.a_col, sp.b_col, sp.na, sp.nb, s.kernels, sp.tiled);
    return view(own, sp.cell_major);
  }
  const PairsLayout lay = sp.layout(s);
  const auto* base = static_cast<const unsigned char*>(kept);
  const void* keys = base + kept_keys_at(lay);
  PairRef ij{nullptr, nullptr, nullptr, lay.lb, lay.amask, lay.bmask};
  if (lay.form == Grouping::kSegmented) ij.keys32 = static_cast<const uint32_t*>(keys);
  else if (lay.form == Grouping::kPacked) ij.keys = static_cast<const uint64_t*>(keys);
  else ij.ab = static_cast<const int64_t*>(keys);
  return {reinterpret_cast<const int64_t*>(base), lay.groups, lay.tiles, ij, sp.cell_major};
}

}  // namespace

uint64_t point_conv_fingerprint(const CpuContext& ctx, const int64_t* triplets, int64_t T) {
  // sum over the values v_e (e = 3 r + c) of v_e (2 e + 1) mod 2^64: any one value changed, or two
  // values exchanged, changes it; chunk sums added in any order (the same for every thread count).
  constexpr int64_t kChunk = int64_t{1} << 16;
  const int64_t n = 3 * std::max<int64_t>(T, 0), chunks = (n + kChunk - 1) / kChunk;
  std::vector<uint64_t> part(static_cast<size_t>(chunks), 0);
  parallel_for(ctx, 0, chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      uint64_t sum = 0;
      for (int64_t e = c * kChunk; e < std::min(n, (c + 1) * kChunk); ++e)
        sum += static_cast<uint64_t>(triplets[e]) * static_cast<uint64_t>(2 * e + 1);
      part[static_cast<size_t>(c)] = sum;
    }
  });
  uint64_t h = static_cast<uint64_t>(T);
  for (const uint64_t v : part) h += v;
  return h;
}

PointConvGrouping point_conv_grouping(const PointConvShape& s, PointConvStep step) {
  core::validate_point_conv(s);
  const StepPairs sp = step_pairs(s, step);
  PointConvGrouping r;
  if (sp.empty) return r;
  const PairsLayout lay = sp.layout(s);
  r.bytes = kept_bytes(lay, s.triplets);
  // (The forward reading the weight gradient's grouping has that one's id: one kept buffer.)
  const PointConvStep as = sp.cell_major ? PointConvStep::kGradWeights : step;
  r.id = {20 + static_cast<int64_t>(as), static_cast<int64_t>(lay.form), s.triplets, sp.na, sp.nb, s.kernels,
          lay.groups, lay.tiles};
  return r;
}

void point_conv_group(const CpuContext& ctx, const PointConvShape& s, PointConvStep step, const int64_t* triplets,
                      void* grouping) {
  core::validate_point_conv(s);
  const StepPairs sp = step_pairs(s, step);
  if (sp.empty) return;
  if (grouping == nullptr || reinterpret_cast<uintptr_t>(grouping) % 8 != 0)
    throw std::invalid_argument("pcops point_conv: a grouping needs 8-byte aligned memory");
  core::validate_triplets(s, triplets, "triplets");
  const PairsLayout lay = sp.layout(s);
  const Pairs g = group_pairs(ctx, triplets, s.triplets, sp.a_col, sp.b_col, sp.na, sp.nb, s.kernels, sp.tiled);
  auto* base = static_cast<unsigned char*>(grouping);
  std::memcpy(base, g.offsets.data(), sizeof(int64_t) * g.offsets.size());
  const size_t T = static_cast<size_t>(s.triplets);
  unsigned char* keys = base + kept_keys_at(lay);
  if (T == 0) return;
  if (lay.form == Grouping::kSegmented) std::memcpy(keys, g.keys32.data(), 4 * T);
  else if (lay.form == Grouping::kPacked) std::memcpy(keys, g.keys.data(), 8 * T);
  else std::memcpy(keys, g.ab.data(), 16 * T);
}

void point_conv(const CpuContext& ctx, const PointConvShape& s, const float* features,
                const float* weights, const int64_t* triplets, float* out, const PointConvKept& kept) {
  core::validate_point_conv(s);
  // With a kept grouping the triplets are not read (point_conv_group checked them).
  if (kept.forward == nullptr || s.num_out * s.channels_out == 0) core::validate_triplets(s, triplets, "triplets");
  const int64_t Ci = s.channels_in, Co = s.channels_out, K = s.kernels;
  if (s.num_out * Co == 0) return;
  // W_k transposed to [C_in, C_out] so the inner loop runs over contiguous output channels.
  std::vector<float> wt(static_cast<size_t>(K * Ci * Co));
  for (int64_t k = 0; k < K; ++k)
    for (int64_t o = 0; o < Co; ++o)
      for (int64_t c = 0; c < Ci; ++c) wt[(k * Ci + c) * Co + o] = weights[(k * Co + o) * Ci + c];
  Pairs own;
  const PairsView g = step_view(ctx, s, PointConvStep::kForward, triplets, kept.forward, own);
  mvmr(ctx, g, K, features, Ci, wt.data(), Co, s.num_out, out);
}

void point_conv_backward(const CpuContext& ctx, const PointConvShape& s, const float* grad_out,
                         const float* features, const float* weights, const int64_t* triplets,
                         float* grad_features, float* grad_weights, const PointConvKept& kept) {
  core::validate_point_conv(s);
  const int64_t Ci = s.channels_in, Co = s.channels_out, K = s.kernels;
  // Checked unless every step that runs reads a kept grouping (point_conv_group checked them).
  const bool gf_runs = grad_features != nullptr && s.num_in * Ci > 0;
  const bool gw_runs = grad_weights != nullptr && K * Co * Ci > 0;
  const bool all_kept = (gf_runs || gw_runs) && (!gf_runs || kept.grad_features != nullptr) &&
                        (!gw_runs || kept.grad_weights != nullptr);
  if (!all_kept) core::validate_triplets(s, triplets, "triplets");
  if (grad_features != nullptr && s.num_in * Ci > 0) {
    Pairs own;
    const PairsView g = step_view(ctx, s, PointConvStep::kGradFeatures, triplets, kept.grad_features, own);
    mvmr(ctx, g, K, grad_out, Co, weights, Ci, s.num_in, grad_features);
  }
  if (grad_weights != nullptr && K * Co * Ci > 0) {
    Pairs own;
    const PairsView g = step_view(ctx, s, PointConvStep::kGradWeights, triplets, kept.grad_weights, own);
    vvor(ctx, g, K, s.triplets, core::vvor_piece_length(s), grad_out, features, Co, Ci, grad_weights);
  }
}

}  // namespace pcops::cpu
