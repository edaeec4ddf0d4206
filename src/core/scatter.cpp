#include "pcops/scatter.hpp"

#include "core/validate.hpp"

namespace pcops::core {

int64_t validate_reduce_shape(const ReduceShape& s, const char* what) {
  PCOPS_CHECK(s.outer >= 0 && s.src_rows >= 0 && s.out_rows >= 0 && s.inner >= 0, Value, what,
              ": sizes must be non-negative, got outer ", s.outer, ", src rows ", s.src_rows,
              ", out rows ", s.out_rows, ", inner ", s.inner);
  checked_mul(checked_mul(s.outer, s.src_rows, what), s.inner, what);
  return checked_mul(checked_mul(s.outer, s.out_rows, what), s.inner, what);
}

void validate_scatter_index(const ReduceShape& s, const int64_t* index, int64_t index_outer,
                            int64_t index_inner, bool sorted, const char* name) {
  PCOPS_CHECK(index_outer == 1 || index_outer == s.outer, Value, name, ": expected 1 or ", s.outer,
              " leading rows, got ", index_outer);
  PCOPS_CHECK(index_inner == 1 || index_inner == s.inner, Value, name, ": expected 1 or ", s.inner,
              " trailing elements, got ", index_inner);
  const int64_t n = checked_mul(checked_mul(index_outer, s.src_rows, name), index_inner, name);
  PCOPS_CHECK(index != nullptr || n == 0, Value, name, ": data is null for a non-empty view");
  const int64_t M = s.out_rows;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = index[i];
    if (v < 0 || v >= M) {
      PCOPS_CHECK(false, Index, name, ": expected indices in [0, ", M, ") (the output size along dim), got ",
                  v, " at flat position ", i);
    }
  }
  if (!sorted) return;
  for (int64_t o = 0; o < index_outer; ++o) {
    for (int64_t k = 0; k < index_inner; ++k) {
      const int64_t* row = index + o * s.src_rows * index_inner + k;
      for (int64_t e = 1; e < s.src_rows; ++e) {
        PCOPS_CHECK(row[(e - 1) * index_inner] <= row[e * index_inner], Value, name,
                    ": expected indices sorted (non-decreasing) along the reduced dimension, got ",
                    row[(e - 1) * index_inner], " before ", row[e * index_inner], " at position ", e,
                    " of row ", o);
      }
    }
  }
}

void validate_indptr(const int64_t* indptr, int64_t indptr_outer, int64_t segments, int64_t rows,
                     const char* name) {
  PCOPS_CHECK(indptr_outer >= 0 && segments >= 0, Value, name, ": negative size");
  PCOPS_CHECK(indptr != nullptr || indptr_outer == 0, Value, name, ": data is null for a non-empty view");
  for (int64_t o = 0; o < indptr_outer; ++o) {
    const int64_t* p = indptr + o * (segments + 1);
    PCOPS_CHECK(p[0] >= 0 && p[segments] <= rows, Index, name, ": expected offsets in [0, ", rows,
                "] (the source size along dim), got first ", p[0], " and last ", p[segments],
                " in row ", o);
    for (int64_t m = 0; m < segments; ++m) {
      PCOPS_CHECK(p[m] <= p[m + 1], Value, name, ": expected non-decreasing offsets, got ", p[m],
                  " then ", p[m + 1], " at position ", m, " of row ", o);
    }
  }
}

}  // namespace pcops::core
