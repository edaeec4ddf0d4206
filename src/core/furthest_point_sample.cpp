#include "pcops/furthest_point_sample.hpp"

#include "core/validate.hpp"

namespace pcops::core {

void validate_furthest_point_sample(const PointsView& points, const LengthsView& lengths,
                                    const FpsParams& params) {
  check_points(points, "points");
  check_lengths(lengths, points.batch, points.count, "lengths");
  PCOPS_CHECK(params.num_samples >= 0, Value, "num_samples: expected >= 0, got ", params.num_samples);
  checked_mul(points.batch, params.num_samples, "furthest_point_sample output");
  PCOPS_CHECK(!params.skip_near_origin || points.dim == 3, Value,
              "skip_near_origin: needs 3-D points, got dim ", points.dim);
  if (params.num_samples == 0 || points.batch == 0) return;
  if (!lengths.present()) {
    PCOPS_CHECK(points.count > 0, Value,
                "points: cannot draw num_samples=", params.num_samples, " from clouds of 0 points");
    PCOPS_CHECK(params.start_index >= 0 && params.start_index < points.count, Index,
                "start_index: expected in [0, ", points.count, "), got ", params.start_index);
  } else {
    PCOPS_CHECK(params.start_index >= 0, Index, "start_index: expected >= 0, got ", params.start_index);
    for (int64_t b = 0; b < points.batch; ++b) {
      const int64_t n = lengths.data[b];
      PCOPS_CHECK(n == 0 || params.start_index < n, Index, "start_index: expected in [0, ", n,
                  ") for cloud ", b, " (its length), got ", params.start_index);
    }
  }
}

}  // namespace pcops::core
