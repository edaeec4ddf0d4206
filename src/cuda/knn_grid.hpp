#pragma once
// Internal entry of the exact grid kNN of src/cuda/knn.cu, shared by the dense kNN and the ragged
// kNN / nearest (src/cuda/knn_ragged.cu): the same kernels over clouds that start anywhere in the
// views' data.
#include <cstdint>
#include <vector>

#include "pcops/context.hpp"
#include "pcops/view.hpp"

namespace pcops::cuda::detail {

// One cloud: element offsets of its first query and first reference row in query.data /
// ref.data, n references, mq queries, and `out`, the slot of its first query's first neighbour
// (query m of the cloud writes slots [out + m * k, out + (m + 1) * k)).
struct KnnGridCloud {
  int64_t qbase, rbase, n, mq, out;
};

// Whether a cloud of n references in `dim` dimensions goes through the grid for this k.
bool knn_grid_eligible(int64_t dim, int64_t n, int64_t k);

// The k smallest (s, local reference index) of every query of every cloud (each eligible, mq >=
// 1): dist = sqrt(s), idx = the reference's index within its cloud. Only data, stride_point and
// stride_dim of the views are read.
void knn_grid(const CudaContext& ctx, const PointsView& query, const PointsView& ref,
              const std::vector<KnnGridCloud>& clouds, int64_t k, float* dist, int64_t* idx);

}  // namespace pcops::cuda::detail
