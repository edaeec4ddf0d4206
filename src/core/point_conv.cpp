#include "pcops/point_conv.hpp"

#include <algorithm>

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

int64_t vvor_piece_length(const PointConvShape& s) {
  constexpr int64_t kBudget = int64_t{64} << 20;  // bytes of partials
  const int64_t matrix = std::max<int64_t>(s.channels_out * s.channels_in, 1) * 4;
  int64_t L = int64_t{1} << 12;
  while (L < s.triplets && s.triplets / L > kBudget / matrix) L *= 2;
  return L;
}

}  // namespace pcops::core
