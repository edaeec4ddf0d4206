#include "pcops/chamfer_pair.hpp"

#include "core/validate.hpp"

namespace pcops::core {
namespace {

void validate(const PointsView& x, const PointsView& y, const int64_t* idx, const ChamferPairParams& params) {
  check_points(x, "x");
  check_points(y, "y");
  PCOPS_CHECK(x.batch == y.batch, Value, "y: expected batch size ", x.batch, " (as x), got ", y.batch);
  PCOPS_CHECK(x.dim == y.dim, Value, "y: expected dimension ", x.dim, " (as x), got ", y.dim);
  PCOPS_CHECK(params.norm == 1 || params.norm == 2, Value, "norm: expected 1 or 2, got ", params.norm);
  const int64_t n = checked_mul(x.batch, x.count, "idx");
  checked_mul(n, x.dim, "grad_x");
  checked_mul(checked_mul(y.batch, y.count, "y"), y.dim, "y");
  PCOPS_CHECK(idx != nullptr || n == 0, Value, "idx: data is null for a non-empty view");
}

}  // namespace

void validate_chamfer_pair(const PointsView& x, const PointsView& y, const int64_t* idx,
                           const ChamferPairParams& params) {
  validate(x, y, idx, params);
}

void validate_chamfer_pair(const PointsView64& x, const PointsView64& y, const int64_t* idx,
                           const ChamferPairParams& params) {
  validate(shape_of(x), shape_of(y), idx, params);
}

}  // namespace pcops::core
