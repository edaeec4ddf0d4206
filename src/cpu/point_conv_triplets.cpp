// Triplet construction for point_conv (include/pcops/point_conv.hpp, docs/ops/point_conv.md):
// the valid slots of the neighbourhoods in (i, s) order with their kernel cells. Two passes over
// chunks of centres: count each chunk's valid slots, then (after an exclusive scan, so every chunk
// knows where its rows start) write them; the same rows for any thread count.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/validate.hpp"
#include "pcops/point_conv.hpp"

namespace pcops::cpu {
namespace {

constexpr int64_t kGrain = 2048;  // centres a chunk

// The chunks of [0, M) of kGrain centres: their valid-slot counts, after checking every entry is
// in [-1, N) (the first bad entry in slot order is reported).
std::vector<int64_t> chunk_counts(const CpuContext& ctx, const TripletShape& s, const int64_t* nb) {
  core::validate_triplet_shape(s);
  const int64_t total = s.centres * s.slots;
  PCOPS_CHECK(nb != nullptr || total == 0, Value, "neighbours: data is null for a non-empty view");
  const int64_t chunks = (s.centres + kGrain - 1) / kGrain;
  std::vector<int64_t> counts(static_cast<size_t>(chunks), 0), bad(static_cast<size_t>(chunks), -1);
  parallel_for(ctx, 0, chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t e = std::min(s.centres, (c + 1) * kGrain) * s.slots;
      int64_t n = 0;
      for (int64_t x = c * kGrain * s.slots; x < e; ++x) {
        const int64_t v = nb[x];
        if (v < -1 || v >= s.points) {
          bad[static_cast<size_t>(c)] = x;
          break;
        }
        n += v >= 0;
      }
      counts[static_cast<size_t>(c)] = n;
    }
  });
  for (const int64_t x : bad) {
    if (x >= 0) {
      PCOPS_CHECK(false, Index, "neighbours: expected indices in [-1, ", s.points, ") (-1: padding), got ", nb[x],
                  " at centre ", x / s.slots, ", slot ", x % s.slots);
    }
  }
  return counts;
}

}  // namespace

int64_t point_conv_triplet_count(const CpuContext& ctx, const TripletShape& s, const int64_t* neighbours) {
  int64_t n = 0;
  for (const int64_t c : chunk_counts(ctx, s, neighbours)) n += c;
  return n;
}

void point_conv_triplets(const CpuContext& ctx, const TripletShape& s, const float* centres, const float* points,
                         const int64_t* neighbours, int64_t triplets, int64_t* out) {
  std::vector<int64_t> start = chunk_counts(ctx, s, neighbours);
  int64_t expected = 0;
  for (const int64_t c : start) expected += c;
  PCOPS_CHECK(triplets == expected, Value, "point_conv_triplets: the output has room for ", triplets,
              " triplets, the neighbourhoods have ", expected);
  PCOPS_CHECK((centres != nullptr || s.centres == 0) && (points != nullptr || s.points == 0) &&
                  (out != nullptr || triplets == 0),
              Value, "point_conv_triplets: data is null for a non-empty view");
  for (int64_t x = 0; x < s.centres * 3; ++x)
    PCOPS_CHECK(std::isfinite(centres[x]), Value, "centres: expected finite coordinates, got ", centres[x],
                " in row ", x / 3);
  for (int64_t x = 0; x < s.points * 3; ++x)
    PCOPS_CHECK(std::isfinite(points[x]), Value, "points: expected finite coordinates, got ", points[x],
                " in row ", x / 3);
  if (triplets == 0) return;
  int64_t run = 0;
  for (int64_t& c : start) {
    const int64_t n = c;
    c = run;
    run += n;
  }
  const float ext = s.extent;
  const float h = (ext * 2.0f) / static_cast<float>(s.cells);
  const float top = static_cast<float>(s.cells - 1);
  const int64_t t = s.cells;
  const int64_t chunks = static_cast<int64_t>(start.size());
  parallel_for(ctx, 0, chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      int64_t* o = out + start[static_cast<size_t>(c)] * 3;
      const int64_t i1 = std::min(s.centres, (c + 1) * kGrain);
      for (int64_t i = c * kGrain; i < i1; ++i) {
        const float* ci = centres + i * 3;
        for (int64_t x = i * s.slots; x < (i + 1) * s.slots; ++x) {
          const int64_t j = neighbours[x];
          if (j < 0) continue;
          const float* pj = points + j * 3;
          int64_t q[3];
          for (int a = 0; a < 3; ++a) {
            // One rounding a step (no operation here could be fused into another).
            const float d = pj[a] - ci[a];
            const float v = std::floor((d + ext) / h);
            q[a] = static_cast<int64_t>(v < 0.0f ? 0.0f : v > top ? top : v);
          }
          o[0] = i, o[1] = j, o[2] = (q[0] * t + q[1]) * t + q[2];
          o += 3;
        }
      }
    }
  });
}

}  // namespace pcops::cpu
