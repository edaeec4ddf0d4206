// Validation of ragged (CSR offsets) inputs, shared by the ragged operators.
#include "pcops/ragged.hpp"

#include "core/validate.hpp"
#include "pcops/furthest_point_sample.hpp"
#include "pcops/knn.hpp"

namespace pcops::core {

void check_ragged_points(const RaggedPointsView& p, const char* name) {
  PCOPS_CHECK(p.count >= 0, Value, name, ": sizes must be non-negative, got [", p.count, ", ",
              p.dim, "]");
  PCOPS_CHECK(p.dim >= 1, Value, name, ": expected at least one coordinate (dim >= 1), got dim ",
              p.dim);
  PCOPS_CHECK(p.data != nullptr || p.count == 0, Value, name, ": data is null for a non-empty view");
}

void check_offsets(const OffsetsView& ptr, int64_t count, const char* name) {
  PCOPS_CHECK(ptr.size >= 1, Value, name, ": expected B + 1 >= 1 offsets, got ", ptr.size);
  PCOPS_CHECK(ptr.data != nullptr, Value, name, ": data is null");
  PCOPS_CHECK(ptr.data[0] == 0, Value, name, "[0]: expected 0, got ", ptr.data[0]);
  for (int64_t b = 0; b + 1 < ptr.size; ++b)
    PCOPS_CHECK(ptr.data[b + 1] >= ptr.data[b], Value, name,
                ": expected non-decreasing offsets, got ", name, "[", b, "] = ", ptr.data[b], " > ",
                name, "[", b + 1, "] = ", ptr.data[b + 1]);
  PCOPS_CHECK(ptr.data[ptr.size - 1] == count, Value, name, "[-1]: expected ", count,
              " (the number of points), got ", ptr.data[ptr.size - 1]);
}

namespace {
void check_pair(const RaggedPointsView& x, const RaggedPointsView& y, const OffsetsView& ptr_x,
                const OffsetsView& ptr_y, const char* xn, const char* yn, const char* pxn,
                const char* pyn) {
  check_ragged_points(x, xn);
  check_ragged_points(y, yn);
  PCOPS_CHECK(x.dim == y.dim, Value, yn, ": expected dimension ", x.dim, " (as ", xn, "), got ",
              y.dim);
  check_offsets(ptr_x, x.count, pxn);
  check_offsets(ptr_y, y.count, pyn);
  PCOPS_CHECK(ptr_x.size == ptr_y.size, Value, pyn, ": expected ", ptr_x.size,
              " offsets (as ", pxn, "), got ", ptr_y.size);
}
}  // namespace

void validate_knn_ragged(const RaggedPointsView& x, const RaggedPointsView& y,
                         const OffsetsView& ptr_x, const OffsetsView& ptr_y,
                         const KnnRaggedParams& params) {
  check_pair(x, y, ptr_x, ptr_y, "x", "y", "ptr_x", "ptr_y");
  PCOPS_CHECK(params.k >= 0, Value, "k: expected >= 0, got ", params.k);
}

void check_ragged_pair(const RaggedPointsView& x, const RaggedPointsView& y,
                       const OffsetsView& ptr_x, const OffsetsView& ptr_y) {
  check_pair(x, y, ptr_x, ptr_y, "x", "y", "ptr_x", "ptr_y");
}

void validate_furthest_point_sample_ragged(const RaggedPointsView& points, const OffsetsView& ptr,
                                           const int64_t* counts, const int64_t* starts) {
  check_ragged_points(points, "src");
  check_offsets(ptr, points.count, "ptr");
  const int64_t B = ptr.batch();
  PCOPS_CHECK(B == 0 || (counts != nullptr && starts != nullptr), Value,
              "counts, starts: expected one entry per cloud, got null");
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = ptr.length(b);
    PCOPS_CHECK(counts[b] >= 0, Value, "counts[", b, "]: expected >= 0, got ", counts[b]);
    if (counts[b] == 0) continue;
    PCOPS_CHECK(n > 0, Value, "counts[", b, "]: cloud ", b, " is empty but ", counts[b],
                " samples were asked for");
    PCOPS_CHECK(starts[b] >= 0 && starts[b] < n, Value, "starts[", b,
                "]: expected a start index in [0, ", n, "), got ", starts[b]);
  }
}

}  // namespace pcops::core
