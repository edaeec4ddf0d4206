#include "pcops/nearest_neighbor.hpp"

#include "core/validate.hpp"

namespace pcops::core {
namespace {

void validate(const PointsView& x, const PointsView& y, const LengthsView& x_lengths,
              const LengthsView& y_lengths, const NearestNeighborParams& params) {
  check_points(x, "x");
  check_points(y, "y");
  PCOPS_CHECK(x.batch == y.batch, Value, "y: expected batch size ", x.batch, " (as x), got ", y.batch);
  PCOPS_CHECK(x.dim == y.dim, Value, "y: expected dimension ", x.dim, " (as x), got ", y.dim);
  check_lengths(x_lengths, x.batch, x.count, "x_lengths");
  check_lengths(y_lengths, y.batch, y.count, "y_lengths");
  PCOPS_CHECK(params.norm == 1 || params.norm == 2, Value, "norm: expected 1 or 2, got ", params.norm);
  checked_mul(x.batch, x.count, "nearest_neighbor output");
  checked_mul(checked_mul(y.batch, y.count, "y"), y.dim, "y");
}

}  // namespace

void validate_nearest_neighbor(const PointsView& x, const PointsView& y, const LengthsView& x_lengths,
                               const LengthsView& y_lengths, const NearestNeighborParams& params) {
  validate(x, y, x_lengths, y_lengths, params);
}

void validate_nearest_neighbor(const PointsView64& x, const PointsView64& y, const LengthsView& x_lengths,
                               const LengthsView& y_lengths, const NearestNeighborParams& params) {
  validate(shape_of(x), shape_of(y), x_lengths, y_lengths, params);
}

void validate_ordered_sum(const void* values, int64_t rows, int64_t length) {
  const int64_t n = checked_mul(rows, length, "values");
  PCOPS_CHECK(values != nullptr || n == 0, Value, "values: data is null for a non-empty view");
}

void validate_gather_rows_backward(const void* grad, const int64_t* idx, int64_t batch, int64_t num_idx,
                                   int64_t width, int64_t count) {
  const int64_t n = checked_mul(checked_mul(batch, num_idx, "grad"), width, "grad");
  checked_mul(checked_mul(batch, count, "grad output"), width, "grad output");
  PCOPS_CHECK(grad != nullptr || n == 0, Value, "grad: data is null for a non-empty view");
  PCOPS_CHECK(idx != nullptr || batch * num_idx == 0, Value, "idx: data is null for a non-empty view");
}

}  // namespace pcops::core
