#include "pcops/ball_query.hpp"

#include <cmath>

#include "core/validate.hpp"

namespace pcops::core {

float ball_query_threshold(float radius) { return radius * radius; }

void validate_ball_query(const PointsView& query, const PointsView& ref,
                         const LengthsView& query_lengths, const LengthsView& ref_lengths,
                         const BallQueryParams& params) {
  check_points(query, "query");
  check_points(ref, "ref");
  PCOPS_CHECK(query.dim == 3, Value, "query: expected 3-D points, got dim ", query.dim);
  PCOPS_CHECK(ref.dim == 3, Value, "ref: expected 3-D points, got dim ", ref.dim);
  PCOPS_CHECK(query.batch == ref.batch, Value, "ref: expected batch size ", query.batch,
              " (as query), got ", ref.batch);
  check_lengths(query_lengths, query.batch, query.count, "query_lengths");
  check_lengths(ref_lengths, ref.batch, ref.count, "ref_lengths");
  PCOPS_CHECK(std::isfinite(params.radius) && params.radius >= 0.0f, Value,
              "radius: expected a finite value >= 0, got ", params.radius);
  PCOPS_CHECK(params.max_neighbors >= 0, Value, "K: expected >= 0, got ", params.max_neighbors);
  checked_mul(checked_mul(query.batch, query.count, "ball_query output"), params.max_neighbors,
              "ball_query output");
}

}  // namespace pcops::core
