#pragma once
// The CPU voxelize with every output in host vectors (sentinel-prefilled), shared by the CPU tests
// and the CUDA tests' oracle.
#include <cstdint>
#include <vector>

#include "pcops/voxelize.hpp"

namespace pcops_test {

struct VoxelResult {
  int64_t V = 0;
  std::vector<int64_t> id, perm, coords, batch, counts, ptr;
};

template <class T>
VoxelResult voxelize_cpu(const std::vector<T>& pts, int64_t D, const std::vector<T>& size, const T* start,
                         const T* end, const std::vector<int64_t>* ptr) {
  VoxelResult r;
  const int64_t N = static_cast<int64_t>(pts.size()) / D;
  r.id.assign(N, -7);
  r.perm.assign(N, -7);
  const int64_t B = ptr ? static_cast<int64_t>(ptr->size()) - 1 : 1;
  r.V = pcops::cpu::voxelize({}, pts.data(), N, D, size.data(), start, end, ptr ? ptr->data() : nullptr, B,
                             r.id.data(), r.perm.data(), [&](int64_t V) {
                               r.coords.assign(V * D, -7);
                               r.batch.assign(V, -7);
                               r.counts.assign(V, -7);
                               r.ptr.assign(V + 1, -7);
                               return pcops::VoxelBuffers{r.coords.data(), r.batch.data(), r.counts.data(),
                                                          r.ptr.data()};
                             });
  return r;
}

}  // namespace pcops_test
