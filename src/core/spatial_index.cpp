#include "pcops/spatial_index.hpp"

#include "core/validate.hpp"

namespace pcops::core {

void validate_index_build(const PointsView& points, const LengthsView& lengths, const SpatialIndexParams& params) {
  PCOPS_CHECK(points.data != nullptr || points.batch * points.count == 0, Value, "points: null data");
  PCOPS_CHECK(points.dim == 3, Value, "points: expected 3 coordinates per point, got ", points.dim);
  PCOPS_CHECK(points.batch >= 0 && points.count >= 0, Value, "points: negative shape");
  PCOPS_CHECK(params.leaf_size >= 1 && params.leaf_size <= (int64_t{1} << 20), Value,
              "leaf_size: expected in [1, 2^20], got ", params.leaf_size);
  PCOPS_CHECK(points.count < (int64_t{1} << 31), Value, "points: at most 2^31 - 1 points per cloud, got ",
              points.count);
  if (lengths.present()) {
    PCOPS_CHECK(lengths.size == points.batch, Value, "lengths: expected ", points.batch, " entries, got ",
                lengths.size);
    for (int64_t b = 0; b < points.batch; ++b)
      PCOPS_CHECK(lengths.data[b] >= 0 && lengths.data[b] <= points.count, Value, "lengths: entry ", b, " is ",
                  lengths.data[b], ", expected in [0, ", points.count, "]");
  }
}

void validate_index_query(int64_t batch, const PointsView& query, const LengthsView& query_lengths) {
  PCOPS_CHECK(query.batch == batch, Value, "query: expected batch size ", batch, " (as the index), got ",
              query.batch);
  PCOPS_CHECK(query.dim == 3, Value, "query: expected 3 coordinates per point, got ", query.dim);
  PCOPS_CHECK(query.data != nullptr || query.batch * query.count == 0, Value, "query: null data");
  PCOPS_CHECK(query.count < (int64_t{1} << 31), Value, "query: at most 2^31 - 1 queries per cloud, got ",
              query.count);
  if (query_lengths.present()) {
    PCOPS_CHECK(query_lengths.size == query.batch, Value, "query_lengths: expected ", query.batch,
                " entries, got ", query_lengths.size);
    for (int64_t b = 0; b < query.batch; ++b)
      PCOPS_CHECK(query_lengths.data[b] >= 0 && query_lengths.data[b] <= query.count, Value,
                  "query_lengths: entry ", b, " is ", query_lengths.data[b], ", expected in [0, ", query.count,
                  "]");
  }
}

}  // namespace pcops::core
