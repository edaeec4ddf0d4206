#include "pcops/three_nn.hpp"

#include "core/validate.hpp"

namespace pcops::core {

void validate_three_nn(const PointsView& unknown, const PointsView& known,
                       const LengthsView& unknown_lengths, const LengthsView& known_lengths) {
  check_points(unknown, "unknown");
  check_points(known, "known");
  PCOPS_CHECK(unknown.dim == 3, Value, "unknown: expected 3-D points, got dim ", unknown.dim);
  PCOPS_CHECK(known.dim == 3, Value, "known: expected 3-D points, got dim ", known.dim);
  PCOPS_CHECK(unknown.batch == known.batch, Value, "known: expected batch size ", unknown.batch,
              " (as unknown), got ", known.batch);
  PCOPS_CHECK(known.count >= 3, Value, "known: expected at least 3 points (M >= 3), got M = ",
              known.count);
  check_lengths(unknown_lengths, unknown.batch, unknown.count, "unknown_lengths");
  check_lengths(known_lengths, known.batch, known.count, "known_lengths");
  checked_mul(checked_mul(unknown.batch, unknown.count, "three_nn output"), 3, "three_nn output");
}

}  // namespace pcops::core
