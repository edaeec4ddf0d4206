#pragma once
// The grid searches of the CPU kNN (knn.cpp) and ball query (ball_query.cpp), shared with the
// spatial index (spatial_index.cpp).
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "cpu/spatial_grid.hpp"
#include "pcops/context.hpp"
#include "pcops/view.hpp"

namespace pcops::cpu {

// Queries processed out of input order (cell or Morton order) read their coordinates and write
// their output rows at random: fetch those of the query kPrefetch places ahead.
constexpr int64_t kPrefetch = 8;
// (An asm statement: GCC 12 drops __builtin_prefetch here, having judged the call side-effect free.)
inline void prefetch_line(const void* p) {
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
}
inline void prefetch_query_row(const PointsView& query, int64_t b, int64_t m, int64_t k, float* dist,
                               int64_t* idx) {
  prefetch_line(&query.at(b, m, 0));
  for (int64_t o = 0; o < k && o < 64; o += 16) prefetch_line(dist + m * k + o);
  for (int64_t o = 0; o < k && o < 64; o += 8) prefetch_line(idx + m * k + o);
}

// Whether the dense kNN, ball query and radius may hand uneven clouds to a spatial index
// (PCOPS_CPU_INDEX_ROUTES=never keeps them on their grid, for measurements; same results).
inline bool index_routes_enabled() {
  const char* e = std::getenv("PCOPS_CPU_INDEX_ROUTES");
  return e == nullptr || std::strcmp(e, "never") != 0;
}

// Cloud b of a batch view, alone (count points).
inline PointsView single_cloud(const PointsView& v, int64_t b, int64_t count) {
  PointsView one = v;
  one.data = &v.at(b, 0, 0);
  one.batch = 1;
  one.count = count;
  return one;
}

// Above this mean cell load (in units of the target points per cell) a grid counts as too uneven
// to search and the spatial index's tree serves instead (measurements in knn.cpp).
constexpr double kIndexLoad = 10.0;

// The grid that suits k neighbours (about k / 4 points per cell).
grid::BuildOptions knn_grid_options(int64_t k);

// Whether a built grid is too uneven to search: its mean cell load after refinement exceeds ten
// times the target (then the spatial index's tree is faster; knn.cpp has the measurements).
bool knn_grid_skewed(const grid::Grid& g, const grid::BuildOptions& opt);

// The contract's k nearest of queries [0, mq) of cloud b of `query` among the n points of the
// grid g (built over one cloud): row m of dist / idx at dist + m k / idx + m k.
void knn_grid_search(const CpuContext& ctx, const PointsView& query, int64_t b, int64_t mq, int64_t k,
                     const grid::Grid& g, int64_t n, float* dist, int64_t* idx);

// A radius search's reach for threshold R2 (finite): every match has exact distance below it (the
// float32 s is within a relative 1e-6 of the exact squared distance, up to an absolute underflow
// error far below 1e-30).
inline double radius_reach(float R2) { return std::sqrt(static_cast<double>(R2) + 1e-30) * (1.0 + 1e-5); }

// The grid of a radius search (ball query, radius) with threshold R2 (finite): cells of at least
// half the radius (padded for rounding), about 2 points per cell.
grid::BuildOptions radius_grid_options(float R2);

// Whether such a grid is too uneven to search: the cell budget kept its cells above 1.5x their
// floor and their mean load is above kIndexLoad times the target (tight clusters, dense cores).
bool radius_grid_skewed(const grid::Grid& g, const grid::BuildOptions& opt);

// The ball query (first K matches s < R2 by index, R2 finite) of queries [0, mq) of cloud b of
// `query` among the points of the grid g: row m of dist2 / idx at dist2 + m K / idx + m K.
// Shared by the dense ball query (ball_query.cpp) and the spatial index where it keeps a grid.
void ball_grid_search(const CpuContext& ctx, const PointsView& query, int64_t b, int64_t mq, int64_t K, float R2,
                      const grid::Grid& g, float* dist2, int64_t* idx);

}  // namespace pcops::cpu
