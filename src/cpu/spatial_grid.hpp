#pragma once
// A uniform grid over one 3-D cloud, shared by the exact kNN and ball query of the CPU backend.
//
// The finite points are copied in cell order (cells x-fastest, so the cells of one (y, z) row are
// one contiguous run of points) as structure-of-arrays floats plus their original indices,
// ascending within a cell. Points with a non-finite coordinate are kept aside (`special`): their
// squared distance to any query is +inf or NaN, so they only matter after every finite point.
//
// Exactness: the grid only decides which points are looked at. Searches prune a cell run only
// when a lower bound of its distance, computed in double and widened by `slack`, provably exceeds
// the current threshold with a relative margin that covers the float32 rounding of s.
#include <cstdint>
#include <vector>

#include "pcops/context.hpp"
#include "pcops/view.hpp"

namespace pcops::cpu::grid {

struct Grid {
  double lo[3] = {0, 0, 0};  // lower corner of the bounding box of the finite points
  double h = 1.0;            // cell edge
  double inv_h = 1.0;
  double slack = 0.0;        // absolute error bound of cell membership (double rounding)
  int64_t dims[3] = {1, 1, 1};
  int64_t num_cells = 1;
  int64_t num_finite = 0;
  double load = 0.0;  // mean over the finite points of their cell's count (search cost grows with it)
  std::vector<int32_t> cell_start;  // num_cells + 1 offsets into the arrays below
  std::vector<float> x, y, z;       // coordinates in cell order (first num_finite are valid)
  std::vector<int32_t> id;          // original indices in cell order
  std::vector<int64_t> special;     // indices of points with a non-finite coordinate, ascending

  // Build scratch, kept so that a reused Grid does not fault in fresh pages on every call.
  std::vector<uint32_t> scratch_cell;
  std::vector<std::vector<int32_t>> scratch_hist;

  // Cell coordinate of a value along axis a, clamped into the grid (NaN goes to 0).
  int64_t coord(int a, double v) const {
    const double t = (v - lo[a]) * inv_h;
    if (!(t >= 1.0)) return 0;
    if (t >= static_cast<double>(dims[a])) return dims[a] - 1;
    return static_cast<int64_t>(t);
  }
  int64_t cell(int64_t cx, int64_t cy, int64_t cz) const {
    return (cz * dims[1] + cy) * dims[0] + cx;
  }
  // Lower corner of cell c along axis a.
  double edge(int a, int64_t c) const { return lo[a] + static_cast<double>(c) * h; }
};

struct BuildOptions {
  double points_per_cell = 2.0;  // target mean occupancy of the non-empty cells
  double min_cell = 0.0;         // the cell edge is at least this
  double max_cells_per_point = 2.0;
};

// Builds the grid over the first n points of cloud b of `pts` (dim 3, any strides). A Grid may be
// rebuilt any number of times; its buffers only grow.
void build(const CpuContext& ctx, const PointsView& pts, int64_t b, int64_t n,
           const BuildOptions& opt, Grid& g);

// Squared distances of a structure-of-arrays block to q, summed as ((dx*dx + dy*dy) + dz*dz)
// with d = q - x (the contract's arithmetic); returns how many are <= limit (or < limit when
// `strict`). Vectorised with AVX2/AVX-512 clones.
int squared_distances3(const float* x, const float* y, const float* z, int n, float qx, float qy,
                       float qz, float limit, bool strict, float* out);

// Like squared_distances3, but writes only the passing points (s <= limit, or s < limit when
// `strict`): their s to out_s and their offsets in the block to out_i, in block order; returns
// their number. n <= kFilterBlock; out_s and out_i must hold n + 16 entries.
constexpr int kFilterBlock = 256;
int filter3(const float* x, const float* y, const float* z, int n, float qx, float qy, float qz,
            float limit, bool strict, float* out_s, int32_t* out_i);

// Compacts the values s[i] <= limit (NaN never passes) with their offsets; returns their number.
// out_s and out_i must hold n + 16 entries.
int filter_le(const float* s, int n, float limit, float* out_s, int32_t* out_i);

// General D on a coordinate-major block: out[i] = s(q, X[:, i]) with X[d][i] = xt[d * ld + i].
void squared_distances_nd(const float* xt, int64_t ld, int64_t dim, int n, const float* q,
                          float* out);

inline bool finite3(float a, float b, float c) {
  return (a - a) == 0.0f && (b - b) == 0.0f && (c - c) == 0.0f;
}

}  // namespace pcops::cpu::grid
