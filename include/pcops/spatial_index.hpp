#pragma once
// SpatialIndex: build once over a batch of 3-D clouds, query many times (docs/ops/spatial_index.md).
//
// Structure (per cloud): the finite points sorted by a 48-bit Morton code of the cloud's
// bounding box (16 bits per axis; equal codes keep index order), cut into leaves of `leaf_size`
// consecutive points, and an implicit complete binary tree over the leaves whose nodes hold the
// exact float32 bounding boxes of their points. Leaves are cut by count, not by space, so dense
// and sparse regions, duplicates, planes and lines all give leaves of the same size and a tree of
// depth log2(n / leaf_size): no cell-size choice, no pathological case. Points with a non-finite
// coordinate are kept aside (their squared distance is +inf or NaN).
//
// Queries return exactly what the dense operators return for the same cloud (knn and
// ball_query of pcops/knn.hpp and pcops/ball_query.hpp: same order, same bits): the tree only
// decides which points are looked at, and a subtree is skipped only when a lower bound of its
// distance, computed in double with a relative margin that covers the float32 rounding of s,
// provably exceeds the current threshold.
//
// Memory: 16 bytes per point (x, y, z and the original index) plus 24 bytes per node (two per
// leaf): about 17.5 bytes per point at leaf_size 32; memory_bytes() reports it. The build needs
// 32 bytes per point of scratch besides.
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "pcops/context.hpp"
#include "pcops/view.hpp"

namespace pcops {
namespace cpu::grid {
struct Grid;
}

struct SpatialIndexParams {
  // Points per leaf, >= 1. Measured at 1M points (2 cores, tree path): leaves of 128 beat 32 by
  // 1.2x (kNN) and 1.1x (ball query) on clusters and a sphere; 256 is no better.
  int64_t leaf_size = 128;
  // Also keep kNN's uniform grid for clouds whose density is even enough for it (faster than the
  // tree there; about 16 bytes per point more, plus the cell offsets).
  bool grid = true;
};

namespace core {
// The checks both indexes make (ValueError-kind pcops::Error): a build over points [B, N, 3] with
// optional lengths, and a query batch against an index of `batch` clouds.
void validate_index_build(const PointsView& points, const LengthsView& lengths, const SpatialIndexParams& params);
void validate_index_query(int64_t batch, const PointsView& query, const LengthsView& query_lengths);
}  // namespace core

namespace cpu {

class SpatialIndex {
 public:
  SpatialIndex() = default;
  // Builds over points [B, N, 3] (any strides; float32), the first lengths[b] points of cloud b
  // (all N without lengths). Replaces a previous build. At most 2^31 - 1 points per cloud.
  void build(const CpuContext& ctx, PointsView points, LengthsView lengths, const SpatialIndexParams& params);

  // knn over the indexed clouds: query [B, M, 3] (B as built), k >= 0, dist / idx caller-owned
  // contiguous [B, M, k]. The contract of pcops::cpu::knn with ref = the indexed points and
  // ref_lengths = the build's lengths: k larger than a cloud pads with (+inf, -1); k larger than
  // N without lengths is an error, as for knn.
  void knn(const CpuContext& ctx, PointsView query, LengthsView query_lengths, int64_t k, float* dist,
           int64_t* idx) const;

  // ball_query over the indexed clouds: the contract of pcops::cpu::ball_query (first K matches
  // in reference index order, s < R2 strictly; slots after the matches hold (0, -1)).
  void ball_query(const CpuContext& ctx, PointsView query, LengthsView query_lengths, float radius, int64_t K,
                  float* dist2, int64_t* idx) const;
  // The same with the threshold given: the points with s < R2 (R2 >= 0; +inf matches every
  // finite s). Radius search uses it with its own R2 (fl32 of r * r in double).
  void ball_query_below(const CpuContext& ctx, PointsView query, LengthsView query_lengths, float R2, int64_t K,
                        float* dist2, int64_t* idx) const;

  int64_t batch() const { return static_cast<int64_t>(clouds_.size()); }
  int64_t count() const { return count_; }  // N of the build (the padded size)
  bool has_lengths() const { return has_lengths_; }
  int64_t cloud_size(int64_t b) const { return clouds_[static_cast<size_t>(b)].n; }
  int64_t leaf_size() const { return leaf_; }
  // Bytes held by the index (not counting the vectors' spare capacity).
  int64_t memory_bytes() const;

  struct Node {
    int32_t begin, end;   // sorted points [begin, end)
    int32_t left, right;  // children (-1: a leaf)
  };
  struct Cloud {
    int64_t n = 0;       // points of the cloud (finite and not)
    int64_t finite = 0;  // finite points, in x/y/z/id[0, finite)
    int64_t leaves = 0;
    float lo[3] = {0, 0, 0}, scale[3] = {0, 0, 0};  // Morton quantisation of the bounding box
    std::vector<float> x, y, z;
    std::vector<int32_t> id;          // original index of each sorted point
    std::vector<Node> nodes;          // node 0 is the root (none without finite points)
    std::vector<float> box;           // [nodes][6]: lo xyz, hi xyz of the node's points
    std::vector<int32_t> leaf_nodes;  // the leaves in point order
    std::vector<int64_t> special;     // indices of points with a non-finite coordinate, ascending
    // kNN's uniform grid (the dense operator's), kept when the cloud's density is even enough
    // for it (its mean cell load at most ten times the target): faster than the tree there.
    std::shared_ptr<const grid::Grid> grid;
    // With a grid, the tree (above) is built from the grid's points on the first query that
    // needs it (ball query, or kNN with 4 k > n); once, whatever the threads.
    std::shared_ptr<std::once_flag> tree_once;
  };
  const Cloud& cloud(int64_t b) const { return clouds_[static_cast<size_t>(b)]; }

 private:
  mutable std::vector<Cloud> clouds_;  // the tree of a cloud with a grid is built lazily
  int64_t count_ = 0;
  int64_t leaf_ = 32;
  bool has_lengths_ = false;
};

}  // namespace cpu

namespace cuda {

// The CUDA index over device points (docs/ops/spatial_index.md). Per cloud: the points sorted by
// a 48-bit Morton code (equal codes keep index order), points with a non-finite coordinate last;
// leaves of 32 consecutive finite points (a warp's width) and an implicit 32-ary tree over them
// whose nodes hold the exact float32 bounding boxes (and the smallest original index) of their
// points. Queries return exactly what pcops::cuda::knn / ball_query (and the CPU) return.
//
// Device memory held: 16 bytes per point plus 32 per node (about 1/31 node per point) and a small
// per-cloud table; memory_bytes() reports it. It is allocated with the build context's allocator
// (cudaMalloc without one) and released by the destructor with that context's deallocate. Build
// and queries run asynchronously on their context's stream (the host never waits for the GPU);
// use the index from the stream it was built on, or synchronise.
class SpatialIndex {
 public:
  SpatialIndex();
  ~SpatialIndex();
  SpatialIndex(SpatialIndex&&) noexcept;
  SpatialIndex& operator=(SpatialIndex&&) noexcept;
  SpatialIndex(const SpatialIndex&) = delete;
  SpatialIndex& operator=(const SpatialIndex&) = delete;

  // points [B, N, 3] float32 device memory (any strides); lengths host memory. leaf_size must be
  // valid as for the CPU index but the CUDA leaves always hold 32 points; params.grid is unused.
  void build(const CudaContext& ctx, PointsView points, LengthsView lengths, const SpatialIndexParams& params);
  // As the CPU index's knn / ball_query: query device memory, lengths host memory, outputs
  // device memory [B, M, k].
  void knn(const CudaContext& ctx, PointsView query, LengthsView query_lengths, int64_t k, float* dist,
           int64_t* idx) const;
  void ball_query(const CudaContext& ctx, PointsView query, LengthsView query_lengths, float radius, int64_t K,
                  float* dist2, int64_t* idx) const;
  // The same with the threshold given (s < R2, R2 >= 0), as the CPU index's; K <= 1024.
  // skip_offset (CUDA only): when not kNoSkip, query row m never matches reference m + skip_offset
  // of its cloud (the radius search's ignore_same_index: the query's own row), which then takes
  // no slot of the K.
  static constexpr int64_t kNoSkip = INT64_MIN;
  void ball_query_below(const CudaContext& ctx, PointsView query, LengthsView query_lengths, float R2, int64_t K,
                        float* dist2, int64_t* idx, int64_t skip_offset = kNoSkip) const;

  int64_t batch() const;
  int64_t count() const;
  bool has_lengths() const;
  int64_t cloud_size(int64_t b) const;
  int64_t leaf_size() const { return 32; }
  int64_t memory_bytes() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace cuda
}  // namespace pcops
