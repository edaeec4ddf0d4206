// Parameter and input validation of the IVF-PQ index (include/pcops/ivfpq.hpp).
#include <cmath>

#include "pcops/error.hpp"
#include "pcops/ivfpq.hpp"

namespace pcops::core {

void validate_ivfpq_params(const IvfPqParams& p) {
  PCOPS_CHECK(p.dim >= 1, Value, "dim: expected >= 1, got ", p.dim);
  PCOPS_CHECK(p.nlist >= 1, Value, "nlist: expected >= 1, got ", p.nlist);
  PCOPS_CHECK(p.nlist <= (int64_t{1} << 31), Value, "nlist: expected <= 2^31, got ", p.nlist);
  PCOPS_CHECK(p.M >= 1, Value, "M: expected >= 1, got ", p.M);
  PCOPS_CHECK(p.dim % p.M == 0, Value, "M: expected a divisor of dim = ", p.dim, ", got ", p.M);
  PCOPS_CHECK(p.nbits == 8, Value, "nbits: expected 8 (one byte per sub-quantizer), got ", p.nbits);
  PCOPS_CHECK(p.metric == IvfPqMetric::L2 || p.metric == IvfPqMetric::InnerProduct, Value,
              "metric: expected L2 or inner product, got ", static_cast<int>(p.metric));
  PCOPS_CHECK(p.dim <= (int64_t{1} << 24), Value, "dim: expected <= 2^24, got ", p.dim);
}

void check_finite_vectors(const float* x, int64_t n, int64_t dim, const char* name) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t d = 0; d < dim; ++d)
      PCOPS_CHECK(std::isfinite(x[i * dim + d]), Value, name, ": expected finite values, got ",
                  x[i * dim + d], " at [", i, ", ", d, "]");
}

}  // namespace pcops::core
