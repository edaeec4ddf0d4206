#include "pcops/voxelize.hpp"

#include <cmath>

#include "core/validate.hpp"

namespace pcops::core {

template <class T>
void validate_voxelize(int64_t count, int64_t dim, const T* voxel_size, const T* start, const T* end,
                       const int64_t* ptr, int64_t num_clouds) {
  PCOPS_CHECK(count >= 0, Value, "points: expected a non-negative number of points, got ", count);
  PCOPS_CHECK(dim >= 1, Value, "points: expected at least one coordinate (dim >= 1), got ", dim);
  checked_mul(count, dim, "points");
  for (int64_t d = 0; d < dim; ++d) {
    PCOPS_CHECK(std::isfinite(voxel_size[d]) && voxel_size[d] > 0, Value, "voxel_size[", d,
                "]: expected a finite value > 0, got ", voxel_size[d]);
    if (start)
      PCOPS_CHECK(std::isfinite(start[d]), Value, "start[", d, "]: expected a finite value, got ", start[d]);
    if (end) {
      PCOPS_CHECK(std::isfinite(end[d]), Value, "end[", d, "]: expected a finite value, got ", end[d]);
      const T s = start ? start[d] : T(0);
      PCOPS_CHECK(end[d] >= s, Value, "end[", d, "]: expected >= start (", s, "), got ", end[d]);
    }
  }
  if (!ptr) return;
  PCOPS_CHECK(num_clouds >= 0, Value, "ptr: expected at least one offset");
  PCOPS_CHECK(ptr[0] == 0, Value, "ptr: expected ptr[0] == 0, got ", ptr[0]);
  PCOPS_CHECK(ptr[num_clouds] == count, Value, "ptr: expected the last offset to equal the number of points (",
              count, "), got ", ptr[num_clouds]);
  for (int64_t b = 0; b < num_clouds; ++b)
    PCOPS_CHECK(ptr[b] <= ptr[b + 1], Value, "ptr: expected non-decreasing offsets, got ", ptr[b], " then ",
                ptr[b + 1], " at position ", b);
}

template void validate_voxelize<float>(int64_t, int64_t, const float*, const float*, const float*,
                                       const int64_t*, int64_t);
template void validate_voxelize<double>(int64_t, int64_t, const double*, const double*, const double*,
                                        const int64_t*, int64_t);

}  // namespace pcops::core
