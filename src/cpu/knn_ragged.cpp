// CPU ragged kNN (torch_cluster's knn on CSR offsets) and nearest. Euclidean: each cloud runs
// the dense exact cpu::knn on views into the flat arrays (grid or brute force, k' = min(k, n_b)),
// which writes the local indices straight into row 1 of the output; small clouds run side by
// side (one task per cloud, the inner kNN inline), large ones one after another with the
// parallelism inside. Cosine: brute force per query with an exact (distance, index) selection.
#include <algorithm>
#include <cmath>
#include <vector>

#include "common/distance.hpp"
#include "pcops/knn.hpp"
#include "pcops/nearest.hpp"

namespace pcops::cpu {
namespace {

constexpr int64_t kSmallCloudWork = int64_t{1} << 18;  // m_b * n_b below this: one task

PointsView cloud_view(const RaggedPointsView& p, const OffsetsView& ptr, int64_t b) {
  return PointsView{p.count > 0 ? p.row(ptr.begin(b)) : p.data, 1, ptr.length(b), p.dim, 0,
                    p.stride_point, p.stride_dim};
}

// Dense kNN of the queries of cloud b of `q` among the references of cloud b of `r`, k' <= n_b:
// local reference indices into idx [m_b, k'], distances into scratch.
void knn_cloud(const CpuContext& ctx, const RaggedPointsView& r, const RaggedPointsView& q,
               const OffsetsView& ptr_r, const OffsetsView& ptr_q, int64_t b, int64_t kk,
               int64_t* idx) {
  std::vector<float> dist(static_cast<size_t>(ptr_q.length(b) * kk));
  knn(ctx, cloud_view(q, ptr_q, b), cloud_view(r, ptr_r, b), {}, {}, KnnParams{kk}, dist.data(),
      idx);
}

// Runs fn(b) for every cloud with work: small ones in parallel (one task each), large ones in
// sequence (the parallelism inside). Small: little work, or at most a worker's share of all the
// queries (so that one task per cloud keeps the workers about equally busy without a parallel
// region per cloud).
template <class Fn>
void for_clouds(const CpuContext& ctx, const OffsetsView& ptr_r, const OffsetsView& ptr_q, Fn fn) {
  const int64_t B = ptr_r.batch();
  int64_t queries = 0;
  for (int64_t b = 0; b < B; ++b)
    if (ptr_r.length(b) > 0) queries += ptr_q.length(b);
  const int64_t share = queries / std::max<int64_t>(1, max_threads(ctx));
  std::vector<int64_t> small, large;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = ptr_r.length(b), m = ptr_q.length(b);
    if (n == 0 || m == 0) continue;
    ((n * m < kSmallCloudWork && m < 4096) || m <= share ? small : large).push_back(b);
  }
  if (small.size() == 1) {
    large.push_back(small[0]);
    small.clear();
  }
  parallel_for(ctx, 0, static_cast<int64_t>(small.size()), 1, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) fn(small[s]);
  });
  for (int64_t b : large) fn(b);
}

float cosine_distance(const RaggedPointsView& x, int64_t j, const RaggedPointsView& y, int64_t i) {
  using common::add_rn;
  using common::mul_rn;
  float dot = 0.0f, nx = 0.0f, ny = 0.0f;
  for (int64_t d = 0; d < x.dim; ++d) {
    const float a = x.at(j, d), c = y.at(i, d);
    dot = add_rn(dot, mul_rn(a, c));
    nx = add_rn(nx, mul_rn(a, a));
    ny = add_rn(ny, mul_rn(c, c));
  }
  return 1.0f - dot / mul_rn(std::sqrt(nx), std::sqrt(ny));
}

}  // namespace

int64_t knn_ragged(const CpuContext& ctx, RaggedPointsView x, RaggedPointsView y, OffsetsView ptr_x,
                   OffsetsView ptr_y, const KnnRaggedParams& params, const EdgeAllocator& allocate) {
  core::validate_knn_ragged(x, y, ptr_x, ptr_y, params);
  const int64_t B = ptr_x.batch(), k = params.k;
  // Edge offsets per cloud: E is known from the offsets alone.
  std::vector<int64_t> e0(static_cast<size_t>(B) + 1, 0);
  for (int64_t b = 0; b < B; ++b)
    e0[b + 1] = e0[b] + ptr_y.length(b) * std::min(k, ptr_x.length(b));
  const int64_t E = e0[B];
  int64_t* edges = allocate(E);
  if (E == 0) return 0;
  int64_t* row0 = edges;
  int64_t* row1 = edges + E;
  for_clouds(ctx, ptr_x, ptr_y, [&](int64_t b) {
    const int64_t n = ptr_x.length(b), m = ptr_y.length(b), kk = std::min(k, n);
    const int64_t xb = ptr_x.begin(b), yb = ptr_y.begin(b);
    int64_t* r0 = row0 + e0[b];
    int64_t* r1 = row1 + e0[b];
    if (!params.cosine) {
      knn_cloud(ctx, x, y, ptr_x, ptr_y, b, kk, r1);
    } else {
      parallel_for(ctx, 0, m, std::max<int64_t>(1, 4096 / std::max<int64_t>(n, 1)),
                   [&](int64_t m0, int64_t m1) {
        std::vector<std::pair<float, int64_t>> cand(static_cast<size_t>(n));
        for (int64_t t = m0; t < m1; ++t) {
          for (int64_t j = 0; j < n; ++j)
            cand[j] = {common::knn_key(cosine_distance(x, xb + j, y, yb + t)), j};
          std::partial_sort(cand.begin(), cand.begin() + kk, cand.end());
          for (int64_t c = 0; c < kk; ++c) r1[t * kk + c] = cand[c].second;
        }
      });
    }
    for (int64_t t = 0; t < m; ++t)
      for (int64_t c = 0; c < kk; ++c) {
        r0[t * kk + c] = yb + t;
        r1[t * kk + c] += xb;
      }
  });
  return E;
}

void nearest(const CpuContext& ctx, RaggedPointsView x, RaggedPointsView y, OffsetsView ptr_x,
             OffsetsView ptr_y, int64_t* out) {
  core::validate_nearest(x, y, ptr_x, ptr_y);
  // x is the query side here: the kNN of cloud b with k = 1, y as the references.
  for_clouds(ctx, ptr_y, ptr_x, [&](int64_t b) {
    int64_t* o = out + ptr_x.begin(b);
    knn_cloud(ctx, y, x, ptr_y, ptr_x, b, 1, o);
    for (int64_t t = 0, m = ptr_x.length(b); t < m; ++t) o[t] += ptr_y.begin(b);
  });
}

}  // namespace pcops::cpu
