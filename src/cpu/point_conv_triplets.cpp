// Triplet construction for point_conv (include/pcops/point_conv.hpp, docs/ops/point_conv.md):
// the valid slots of the neighbourhoods in (i, s) order with their kernel cells. Two passes over
// chunks of centres: count each chunk's valid slots (checking the entries), then, after an
// exclusive scan so that every chunk knows where its rows start, write them; the same rows for
// any thread count.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/point_conv_cell.hpp"
#include "core/validate.hpp"
#include "pcops/ivfpq.hpp"  // core::check_finite_vectors
#include "pcops/point_conv.hpp"

namespace pcops::cpu {

int64_t point_conv_triplets(const CpuContext& ctx, const TripletShape& s, const float* centres, const float* points,
                            const int64_t* neighbours, const EdgeAllocator& allocate) {
  constexpr int64_t kGrain = 2048;  // centres a chunk
  core::validate_triplet_shape(s);
  PCOPS_CHECK((neighbours != nullptr || s.centres * s.slots == 0) && (centres != nullptr || s.centres == 0) &&
                  (points != nullptr || s.points == 0),
              Value, "point_conv_triplets: data is null for a non-empty view");
  // Each chunk's valid slots, and its first entry outside [-1, N) (reported in slot order).
  const int64_t chunks = (s.centres + kGrain - 1) / kGrain;
  std::vector<int64_t> start(static_cast<size_t>(chunks), 0), bad(static_cast<size_t>(chunks), -1);
  parallel_for(ctx, 0, chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t e = std::min(s.centres, (c + 1) * kGrain) * s.slots;
      int64_t n = 0;
      for (int64_t x = c * kGrain * s.slots; x < e; ++x) {
        const int64_t v = neighbours[x];
        if (v < -1 || v >= s.points) {
          bad[static_cast<size_t>(c)] = x;
          break;
        }
        n += v >= 0;
      }
      start[static_cast<size_t>(c)] = n;
    }
  });
  for (const int64_t x : bad) {
    if (x >= 0) {
      PCOPS_CHECK(false, Index, "neighbours: expected indices in [-1, ", s.points, ") (-1: padding), got ",
                  neighbours[x], " at centre ", x / s.slots, ", slot ", x % s.slots);
    }
  }
  core::check_finite_vectors(centres, s.centres, 3, "centres");
  core::check_finite_vectors(points, s.points, 3, "points");
  int64_t triplets = 0;
  for (int64_t& c : start) {  // counts -> first rows
    const int64_t n = c;
    c = triplets;
    triplets += n;
  }
  int64_t* out = allocate(triplets);
  if (triplets == 0) return 0;
  const float h = common::point_conv::cell_side(s.extent, s.cells);
  parallel_for(ctx, 0, chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      int64_t* o = out + start[static_cast<size_t>(c)] * 3;
      const int64_t i1 = std::min(s.centres, (c + 1) * kGrain);
      for (int64_t i = c * kGrain; i < i1; ++i) {
        for (int64_t x = i * s.slots; x < (i + 1) * s.slots; ++x) {
          const int64_t j = neighbours[x];
          if (j < 0) continue;
          o[0] = i, o[1] = j;
          o[2] = common::point_conv::kernel_cell(points + j * 3, centres + i * 3, s.extent, h, s.cells);
          o += 3;
        }
      }
    }
  });
  return triplets;
}

}  // namespace pcops::cpu
