#include "core/validate.hpp"

#include <limits>

namespace pcops::core {

void check_points(const PointsView& p, const char* name) {
  PCOPS_CHECK(p.batch >= 0 && p.count >= 0, Value, name, ": sizes must be non-negative, got [",
              p.batch, ", ", p.count, ", ", p.dim, "]");
  PCOPS_CHECK(p.dim >= 1, Value, name, ": expected at least one coordinate (dim >= 1), got dim ",
              p.dim);
  PCOPS_CHECK(p.data != nullptr || p.batch * p.count == 0, Value, name,
              ": data is null for a non-empty view");
}

void check_lengths(const LengthsView& lengths, int64_t batch, int64_t count, const char* name) {
  if (!lengths.present()) return;
  PCOPS_CHECK(lengths.size == batch, Value, name, ": expected ", batch, " lengths (one per cloud), got ",
              lengths.size);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t n = lengths.data[b];
    PCOPS_CHECK(n >= 0 && n <= count, Value, name, "[", b, "]: expected a length in [0, ", count,
                "], got ", n);
  }
}

void check_features(const FeaturesView& f, const char* name) {
  PCOPS_CHECK(f.batch >= 0 && f.channels >= 0 && f.count >= 0, Value, name,
              ": sizes must be non-negative, got [", f.batch, ", ", f.channels, ", ", f.count, "]");
  checked_mul(checked_mul(f.batch, f.channels, name), f.count, name);
  PCOPS_CHECK(f.data != nullptr || f.batch * f.channels * f.count == 0, Value, name,
              ": data is null for a non-empty view");
}

void check_indices(const int64_t* idx, int64_t n, int64_t count, const char* name) {
  PCOPS_CHECK(n >= 0, Value, name, ": negative size");
  PCOPS_CHECK(idx != nullptr || n == 0, Value, name, ": data is null for a non-empty view");
  int64_t lo = -1, hi = -1;
  for (int64_t i = 0; i < n; ++i) {
    lo = idx[i] < lo ? idx[i] : lo;
    hi = idx[i] > hi ? idx[i] : hi;
  }
  PCOPS_CHECK(lo >= -1 && hi < count, Index, name, ": expected indices in [-1, ", count,
              "), got values in [", lo, ", ", hi, "]");
}

int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  PCOPS_CHECK(a >= 0 && b >= 0, Value, what, ": negative size");
  PCOPS_CHECK(a == 0 || b <= std::numeric_limits<int64_t>::max() / a, Value, what,
              ": size overflows int64 (", a, " x ", b, ")");
  return a * b;
}

}  // namespace pcops::core
