// CPU kNN. Baseline: brute force with a bounded max-heap ordered by (s, index).
#include "pcops/knn.hpp"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "common/distance.hpp"

namespace pcops::cpu {

void knn(const CpuContext& ctx, PointsView query, PointsView ref, LengthsView query_lengths,
         LengthsView ref_lengths, const KnnParams& params, float* dist, int64_t* idx) {
  core::validate_knn(query, ref, query_lengths, ref_lengths, params);
  const int64_t K = params.k, M = query.count, B = query.batch;
  parallel_for(ctx, 0, B * M, 16, [&](int64_t i0, int64_t i1) {
    std::vector<std::pair<float, int64_t>> cand;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t b = i / M, m = i % M;
      float* od = dist + i * K;
      int64_t* oi = idx + i * K;
      const int64_t n = ref_lengths.get(b, ref.count);
      int64_t filled = 0;
      if (m < query_lengths.get(b, M)) {
        cand.clear();
        const float* q = &query.at(b, m, 0);
        for (int64_t j = 0; j < n; ++j)
          cand.emplace_back(common::knn_key(common::squared_distance(q, query.stride_dim, &ref.at(b, j, 0),
                                                                     ref.stride_dim, ref.dim)),
                            j);
        filled = std::min<int64_t>(K, n);
        std::partial_sort(cand.begin(), cand.begin() + filled, cand.end());
        for (int64_t t = 0; t < filled; ++t) {
          od[t] = std::sqrt(cand[t].first);
          oi[t] = cand[t].second;
        }
      }
      for (int64_t t = filled; t < K; ++t) {
        od[t] = INFINITY;
        oi[t] = -1;
      }
    }
  });
}

}  // namespace pcops::cpu
