// CPU ragged radius search (torch_cluster's radius, exact). 3-D clouds with enough points and
// queries get a uniform grid (spatial_grid.hpp, cells of about half the radius): the cells that
// overlap a query's ball, widened by a safety margin, are scanned and every match competes for
// the max_num_neighbors smallest reference indices. Other clouds (any D) use a brute force in
// reference order that stops at the cap. Clouds too uneven for the grid go through a spatial
// index (the radius graph of 20 clusters of sigma 0.002 + 10 % uniform, 1M points, r = the median
// 16th-neighbour distance, cap 32, 2 cores: 3.64 -> 1.59 s; benchmarks/scripts/index_routes_cpu.py).
// Count-then-fill: matches are gathered per block of queries, then the caller's [2, E] buffer is
// allocated and filled.
// Parallel decomposition: blocks of consecutive queries (across clouds), one task each.
#include "pcops/radius.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "common/distance.hpp"
#include "cpu/knn_grid.hpp"
#include "cpu/spatial_grid.hpp"
#include "pcops/spatial_index.hpp"

namespace pcops::cpu {
namespace {

constexpr int64_t kQueryBlock = 256;
constexpr int kBlock = grid::kFilterBlock;
constexpr double kMargin = 1.0 - 1e-5;
constexpr double kTiny = 1e-30;
// The largest cap (+1) the spatial-index route (see radius()) serves.
constexpr int64_t kIndexMaxWidth = 1024;

float sq_dist(const RaggedPointsView& x, const RaggedPointsView& y, int64_t i, int64_t j) {
  if (x.dim == 3)
    return common::squared_distance3(y.at(i, 0), y.at(i, 1), y.at(i, 2), x.at(j, 0), x.at(j, 1),
                                     x.at(j, 2));
  return common::squared_distance(y.row(i), y.stride_dim, x.row(j), x.stride_dim, x.dim);
}

// Matches of query i among references [j0, j1), in reference order, at most cap.
void brute(const RaggedPointsView& x, const RaggedPointsView& y, int64_t i, int64_t j0, int64_t j1,
           float R2, int64_t cap, bool ignore_same, std::vector<int64_t>& out) {
  int64_t found = 0;
  for (int64_t j = j0; j < j1 && found < cap; ++j) {
    if (ignore_same && j == i) continue;
    if (sq_dist(x, y, i, j) < R2) {
      out.push_back(j);
      ++found;
    }
  }
}

// Grid search of query i (finite, 3-D) in the cloud whose first row is j0.
void grid_search(const grid::Grid& g, const RaggedPointsView& y, int64_t i, int64_t j0, float R2,
                 int64_t cap, bool ignore_same, std::vector<int64_t>& tmp,
                 std::vector<int64_t>& out) {
  const double rr = radius_reach(R2);  // every match is closer
  const double lim = static_cast<double>(R2);
  auto gap = [&](int a, int64_t c, double v) {
    double d = std::max({0.0, g.edge(a, c) - v, v - g.edge(a, c + 1)}) - g.slack;
    return d > 0.0 ? d * d : 0.0;
  };
  auto beyond = [&](double lb2) { return lb2 > kTiny && lb2 * kMargin >= lim; };
  const float qx = y.at(i, 0), qy = y.at(i, 1), qz = y.at(i, 2);
  const double q[3] = {qx, qy, qz};
  int64_t c0[3], c1[3];
  for (int a = 0; a < 3; ++a) {
    c0[a] = g.coord(a, q[a] - rr - g.slack);
    c1[a] = g.coord(a, q[a] + rr + g.slack);
  }
  float s[kBlock + 16];
  int32_t off[kBlock + 16];
  tmp.clear();
  for (int64_t z = c0[2]; z <= c1[2]; ++z) {
    const double gz = gap(2, z, q[2]);
    if (beyond(gz)) continue;
    for (int64_t yy = c0[1]; yy <= c1[1]; ++yy) {
      const double gyz = gz + gap(1, yy, q[1]);
      if (beyond(gyz)) continue;
      const int64_t row = g.cell(0, yy, z);
      const int64_t p0 = g.cell_start[row + c0[0]], p1 = g.cell_start[row + c1[0] + 1];
      for (int64_t b0 = p0; b0 < p1; b0 += kBlock) {
        const int len = static_cast<int>(std::min<int64_t>(kBlock, p1 - b0));
        const int cnt = grid::filter3(g.x.data() + b0, g.y.data() + b0, g.z.data() + b0, len, qx,
                                      qy, qz, R2, true, s, off);
        const int32_t* ids = g.id.data() + b0;
        for (int c = 0; c < cnt; ++c) {
          const int64_t j = j0 + ids[off[c]];
          if (ignore_same && j == i) continue;
          tmp.push_back(j);
        }
      }
    }
  }
  // Points with a non-finite coordinate never match a finite query under a finite R2.
  if (static_cast<int64_t>(tmp.size()) > cap) {
    std::nth_element(tmp.begin(), tmp.begin() + cap, tmp.end());
    tmp.resize(static_cast<size_t>(cap));
  }
  std::sort(tmp.begin(), tmp.end());
  out.insert(out.end(), tmp.begin(), tmp.end());
}

}  // namespace

int64_t radius(const CpuContext& ctx, RaggedPointsView x, RaggedPointsView y, OffsetsView ptr_x,
               OffsetsView ptr_y, const RadiusParams& params, const EdgeAllocator& allocate) {
  core::validate_radius(x, y, ptr_x, ptr_y, params);
  const float R2 = core::radius_threshold(params.r);
  const int64_t cap = params.max_num_neighbors, M = y.count, B = ptr_x.batch();
  const bool ignore_same = params.ignore_same_index;
  if (cap == 0 || M == 0 || x.count == 0 || !(R2 > 0.0f)) {  // s < R2 <= 0 never holds
    allocate(0);
    return 0;
  }
  // Grids for the clouds where one pays (built one after another, each build in parallel). A
  // cloud whose grid stays overfull within its cell budget (tight clusters, dense cores: cells
  // kept above 1.5 r/2 by the budget, mean load above ten times the target) is searched through
  // a spatial index instead, as the dense ball query does: its first cap (+1 for the skipped
  // self match) matches in index order are the same matches.
  std::vector<std::unique_ptr<grid::Grid>> grids(static_cast<size_t>(B));
  std::vector<std::vector<int64_t>> index_hits(static_cast<size_t>(B));  // [m_b, width] per cloud
  const int64_t width = cap + (ignore_same ? 1 : 0);
  if (x.dim == 3 && std::isfinite(R2)) {
    const grid::BuildOptions opt = radius_grid_options(R2);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t n = ptr_x.length(b), m = ptr_y.length(b);
      if (n < 512 || m < 16 || n >= (int64_t{1} << 31)) continue;
      auto g = std::make_unique<grid::Grid>();
      const PointsView cloud{x.row(ptr_x.begin(b)), 1, n, 3, 0, x.stride_point, x.stride_dim};
      grid::build(ctx, cloud, 0, n, opt, *g);
      if (g->num_cells <= 8) continue;
      if (width <= kIndexMaxWidth && radius_grid_skewed(*g, opt) && index_routes_enabled()) {
        SpatialIndex index;
        index.build(ctx, cloud, LengthsView{}, SpatialIndexParams{SpatialIndexParams{}.leaf_size, false});
        const PointsView queries{y.row(ptr_y.begin(b)), 1, m, 3, 0, y.stride_point, y.stride_dim};
        std::vector<float> d2(static_cast<size_t>(m * width));
        std::vector<int64_t>& hits = index_hits[static_cast<size_t>(b)];
        hits.resize(static_cast<size_t>(m * width));
        index.ball_query_below(ctx, queries, LengthsView{}, R2, width, d2.data(), hits.data());
        continue;
      }
      grids[static_cast<size_t>(b)] = std::move(g);
    }
  }
  const int64_t num_blocks = (M + kQueryBlock - 1) / kQueryBlock;
  std::vector<std::vector<int64_t>> refs(static_cast<size_t>(num_blocks));
  std::vector<int64_t> counts(static_cast<size_t>(M), 0);
  parallel_for(ctx, 0, num_blocks, 1, [&](int64_t k0, int64_t k1) {
    std::vector<int64_t> tmp;
    for (int64_t blk = k0; blk < k1; ++blk) {
      std::vector<int64_t>& out = refs[static_cast<size_t>(blk)];
      const int64_t i0 = blk * kQueryBlock, i1 = std::min(M, i0 + kQueryBlock);
      // The cloud of query i0: the last b with ptr_y[b] <= i0 (and a non-empty cloud).
      int64_t b = std::upper_bound(ptr_y.data, ptr_y.data + ptr_y.size, i0) - ptr_y.data - 1;
      for (int64_t i = i0; i < i1; ++i) {
        while (i >= ptr_y.end(b)) ++b;
        const size_t before = out.size();
        const grid::Grid* g = grids[static_cast<size_t>(b)].get();
        const std::vector<int64_t>& hits = index_hits[static_cast<size_t>(b)];
        if (!hits.empty()) {
          const int64_t* row = hits.data() + (i - ptr_y.begin(b)) * width;
          int64_t found = 0;
          for (int64_t t = 0; t < width && row[t] >= 0 && found < cap; ++t) {
            const int64_t j = ptr_x.begin(b) + row[t];
            if (ignore_same && j == i) continue;
            out.push_back(j);
            ++found;
          }
        } else if (g != nullptr && grid::finite3(y.at(i, 0), y.at(i, 1), y.at(i, 2)))
          grid_search(*g, y, i, ptr_x.begin(b), R2, cap, ignore_same, tmp, out);
        else
          brute(x, y, i, ptr_x.begin(b), ptr_x.end(b), R2, cap, ignore_same, out);
        counts[static_cast<size_t>(i)] = static_cast<int64_t>(out.size() - before);
      }
    }
  });
  std::vector<int64_t> block_off(static_cast<size_t>(num_blocks) + 1, 0);
  for (int64_t blk = 0; blk < num_blocks; ++blk)
    block_off[blk + 1] = block_off[blk] + static_cast<int64_t>(refs[blk].size());
  const int64_t E = block_off[num_blocks];
  int64_t* edges = allocate(E);
  if (E == 0) return 0;
  parallel_for(ctx, 0, num_blocks, 1, [&](int64_t k0, int64_t k1) {
    for (int64_t blk = k0; blk < k1; ++blk) {
      int64_t e = block_off[blk];
      const std::vector<int64_t>& r = refs[blk];
      std::copy(r.begin(), r.end(), edges + E + e);
      const int64_t i0 = blk * kQueryBlock, i1 = std::min(M, i0 + kQueryBlock);
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t c = 0; c < counts[i]; ++c) edges[e++] = i;
    }
  });
  return E;
}

}  // namespace pcops::cpu
