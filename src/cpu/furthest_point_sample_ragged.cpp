// CPU ragged furthest point sampling (torch_cluster's fps on CSR offsets): each cloud runs the
// dense exact cpu::furthest_point_sample on a view into the flat array and writes its samples
// straight into its slice of the output. Small clouds run side by side (one task per cloud, the
// inner sampler inline), large ones one after another with the parallelism inside.
#include <algorithm>
#include <vector>

#include "pcops/furthest_point_sample.hpp"

namespace pcops::cpu {

void furthest_point_sample_ragged(const CpuContext& ctx, RaggedPointsView points, OffsetsView ptr,
                                  const int64_t* counts, const int64_t* starts, int64_t* out) {
  core::validate_furthest_point_sample_ragged(points, ptr, counts, starts);
  const int64_t B = ptr.batch();
  std::vector<int64_t> o0(static_cast<size_t>(B) + 1, 0);
  std::vector<int64_t> small, large;
  for (int64_t b = 0; b < B; ++b) {
    o0[b + 1] = o0[b] + counts[b];
    if (counts[b] == 0) continue;
    (ptr.length(b) * counts[b] < (int64_t{1} << 20) ? small : large).push_back(b);
  }
  auto run = [&](int64_t b) {
    const PointsView cloud{points.row(ptr.begin(b)), 1, ptr.length(b), points.dim, 0,
                           points.stride_point, points.stride_dim};
    int64_t* o = out + o0[b];
    furthest_point_sample(ctx, cloud, {}, FpsParams{counts[b], starts[b], false}, o);
    for (int64_t t = 0; t < counts[b]; ++t) o[t] += ptr.begin(b);
  };
  parallel_for(ctx, 0, static_cast<int64_t>(small.size()), 1, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) run(small[s]);
  });
  for (int64_t b : large) run(b);
}

}  // namespace pcops::cpu
