#pragma once
// The runs of equal destination rows in a chunk of the tensor-core MVMR (src/cuda/point_conv_mma.cu),
// as one 64-bit mask, and the flags of the chunk sums' segmented scans derived from it. Host code
// too, so that the CPU tests check the flags against their definitions on the chunk's rows.
#include <cstdint>

#include "common/macros.hpp"

namespace pcops::point_conv_runs {

// A chunk has 64 rows; rows[r] is row r's destination row in its tile, or `past` for the rows past
// the chunk's triplets (those come last). Bit r of the mask: row r continues the run of row r - 1
// (both inside the chunk, one destination row). The kernel forms it with two ballots.
constexpr int kChunkRows = 64;
PCOPS_HD bool continues(const uint8_t* rows, int r, uint8_t past) {
  return r >= 1 && rows[r] != past && rows[r] == rows[r - 1];
}
inline uint64_t continue_mask(const uint8_t* rows, uint8_t past) {
  uint64_t m = 0;
  for (int r = 0; r < kChunkRows; ++r) m |= static_cast<uint64_t>(continues(rows, r, past)) << r;
  return m;
}

// Rows a .. b (0 <= a < b < 64) in one run: bits a + 1 .. b of the mask.
PCOPS_HD bool one_run(uint64_t cont, int a, int b) {
  const uint64_t bits = (~uint64_t{0} >> (63 - (b - a - 1))) << (a + 1);
  return (cont & bits) == bits;
}

// The scan flags of a lane of an MMA fragment of 16 rows from row f0 (f0 + 16 <= 64): the lane
// holds rows f0 + g (the low half) and f0 + 8 + g (the high half), g = 0..7, valid_l / valid_h
// where they are inside the chunk.
// - same_*[st]: the lane's row and the row 2^st above it in its half lie in one run (g >= 2^st);
// - need_*[st]: same_*[st] holds for some g of the fragment (the warp's scan step st is needed);
// - tail_*: the lane's row ends its run inside the fragment (the next row does not continue it;
//   row 15 of the fragment always ends it);
// - join: the high half's row lies in the run of the fragment's row 7; need_join: some g's does.
struct RunFlags {
  bool same_l[3], same_h[3], need_l[3], need_h[3];
  bool tail_l, tail_h, join, need_join;
};
PCOPS_HD RunFlags run_flags(uint64_t cont, int f0, int g, bool valid_l, bool valid_h) {
  RunFlags f{};
  const uint32_t c_l = static_cast<uint32_t>(cont >> f0) & 0xffu;  // bit x: row f0 + x continues
  const uint32_t c_h = static_cast<uint32_t>(cont >> (f0 + 8)) & 0xffu;
  // w[st] bit x: bits x - 2^st + 1 .. x of the half set, x >= 2^st (bit 0 of w[0] dropped).
  uint32_t w_l = c_l & 0xfeu, w_h = c_h & 0xfeu;
  for (int st = 0; st < 3; ++st) {
    if (st > 0) w_l &= w_l << (1 << (st - 1)), w_h &= w_h << (1 << (st - 1));
    f.same_l[st] = (w_l >> g) & 1u;
    f.same_h[st] = (w_h >> g) & 1u;
    f.need_l[st] = (w_l & 0xffu) != 0;
    f.need_h[st] = (w_h & 0xffu) != 0;
  }
  f.tail_l = valid_l && !(((g < 7) ? c_l >> (g + 1) : c_h) & 1u);
  f.tail_h = valid_h && (g == 7 || !((c_h >> ((g + 1) & 7)) & 1u));
  const uint32_t upto = (2u << g) - 1u;  // bits 0 .. g
  f.join = (c_h & upto) == upto;
  f.need_join = (c_h & 1u) != 0;
  return f;
}

}  // namespace pcops::point_conv_runs
