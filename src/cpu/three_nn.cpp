// CPU three_nn: the exact kNN with k = 3 (src/cpu/knn.cpp), whose contract is this one's:
// (s, index) order, NaN as +inf, sqrt after selection, (+inf, -1) padding with lengths.
// Parallel decomposition: that of knn (queries, one chunk per task).
#include "pcops/three_nn.hpp"

#include "pcops/knn.hpp"

namespace pcops::cpu {

void three_nn(const CpuContext& ctx, PointsView unknown, PointsView known,
              LengthsView unknown_lengths, LengthsView known_lengths, float* dist, int64_t* idx) {
  core::validate_three_nn(unknown, known, unknown_lengths, known_lengths);
  knn(ctx, unknown, known, unknown_lengths, known_lengths, KnnParams{3}, dist, idx);
}

}  // namespace pcops::cpu
