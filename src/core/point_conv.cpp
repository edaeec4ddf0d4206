#include "pcops/point_conv.hpp"

#include <algorithm>
#include <cmath>

#include "common/point_conv_cell.hpp"
#include "core/validate.hpp"

namespace pcops::core {

void validate_point_conv(const PointConvShape& s) {
  PCOPS_CHECK(s.num_in >= 0 && s.num_out >= 0 && s.channels_in >= 0 && s.channels_out >= 0 &&
                  s.kernels >= 0 && s.triplets >= 0,
              Value, "point_conv: sizes must be non-negative, got N_in ", s.num_in, ", N_out ",
              s.num_out, ", C_in ", s.channels_in, ", C_out ", s.channels_out, ", K ", s.kernels,
              ", T ", s.triplets);
  checked_mul(s.num_in, s.channels_in, "features");
  checked_mul(s.num_out, s.channels_out, "point_conv output");
  checked_mul(checked_mul(s.kernels, s.channels_out, "weights"), s.channels_in, "weights");
  checked_mul(s.triplets, 3, "triplets");
}

void validate_triplets(const PointConvShape& s, const int64_t* t, const char* name) {
  PCOPS_CHECK(t != nullptr || s.triplets == 0, Value, name, ": data is null for a non-empty view");
  const int64_t bound[3] = {s.num_out, s.num_in, s.kernels};
  const char* what[3] = {"output index i", "input index j", "kernel index k"};
  const char* size[3] = {"N_out", "N_in", "K"};
  for (int64_t r = 0; r < s.triplets; ++r) {
    for (int c = 0; c < 3; ++c) {
      const int64_t v = t[r * 3 + c];
      if (v < 0 || v >= bound[c]) {
        PCOPS_CHECK(false, Index, name, ": expected the ", what[c], " (column ", c, ") in [0, ",
                    bound[c], ") (", size[c], "), got ", v, " in row ", r);
      }
    }
  }
}

void validate_triplet_shape(const TripletShape& s) {
  PCOPS_CHECK(s.centres >= 0 && s.points >= 0 && s.slots >= 0, Value,
              "point_conv_triplets: sizes must be non-negative, got M ", s.centres, ", N ", s.points, ", S ",
              s.slots);
  PCOPS_CHECK(s.cells >= 1 && s.cells <= 2097151, Value,
              "point_conv_triplets: t: expected at least 1 kernel cell per axis (and t^3 below 2^63), got ",
              s.cells);
  PCOPS_CHECK(std::isfinite(s.extent) && s.extent > 0.0f, Value,
              "point_conv_triplets: extent: expected a finite value > 0, got ", s.extent);
  PCOPS_CHECK(common::point_conv::cell_side(s.extent, s.cells) > 0.0f, Value, "point_conv_triplets: extent ",
              s.extent, " is too small for ", s.cells, " cells per axis (the cell side rounds to 0 in float32)");
  checked_mul(s.centres, 3, "centres");
  checked_mul(s.points, 3, "points");
  checked_mul(checked_mul(s.centres, s.slots, "neighbours"), 3, "triplets");
}

int64_t vvor_piece_length(const PointConvShape& s) {
  constexpr int64_t kBudget = int64_t{64} << 20;  // bytes of partials
  const int64_t matrix = std::max<int64_t>(s.channels_out * s.channels_in, 1) * 4;
  int64_t L = int64_t{1} << 12;
  while (L < s.triplets && s.triplets / L > kBudget / matrix) L *= 2;
  return L;
}

}  // namespace pcops::core
