#pragma once
// Ragged (flat) batches: the one representation inside pcops is CSR offsets.
//
// A ragged cloud set is a flat [count, dim] float32 array plus int64 offsets ptr of length B+1
// with 0 = ptr[0] <= ptr[1] <= ... <= ptr[B] = count; cloud b holds rows [ptr[b], ptr[b+1]).
// Empty clouds (ptr[b] == ptr[b+1]) are allowed everywhere. Sorted batch vectors and
// padded-plus-lengths batches are converted to offsets at the edges (Python), never in kernels.
// Indices returned by the ragged operators are global row indices into the flat arrays.
#include <cstdint>
#include <functional>

namespace pcops {

// A flat [count, dim] float32 point array (strides in elements).
struct RaggedPointsView {
  const float* data = nullptr;
  int64_t count = 0;
  int64_t dim = 0;
  int64_t stride_point = 0;
  int64_t stride_dim = 1;

  const float& at(int64_t n, int64_t d) const { return data[n * stride_point + d * stride_dim]; }
  const float* row(int64_t n) const { return data + n * stride_point; }
  static RaggedPointsView contiguous(const float* data, int64_t count, int64_t dim) {
    return RaggedPointsView{data, count, dim, dim, 1};
  }
};

// CSR offsets, host memory, `size` = B + 1 entries (size 0 is read as B = 0).
struct OffsetsView {
  const int64_t* data = nullptr;
  int64_t size = 0;
  int64_t batch() const { return size > 0 ? size - 1 : 0; }
  int64_t begin(int64_t b) const { return data[b]; }
  int64_t end(int64_t b) const { return data[b + 1]; }
  int64_t length(int64_t b) const { return data[b + 1] - data[b]; }
};

// Output of a data-dependent size (count-then-fill): called once with the number of edges E;
// returns a caller-owned int64 buffer of 2 * E entries, row-major [2, E] (row 0, then row 1).
// On the CUDA backend (cuda:: operators) the buffer it returns is DEVICE memory, written on the
// context's stream; the call happens on the host after the operator has read E back from the
// device (one stream synchronisation), and the edges are ready when the stream reaches the end
// of the operator's work. Offsets (OffsetsView) stay host memory on both backends.
using EdgeAllocator = std::function<int64_t*(int64_t num_edges)>;

namespace core {
// Throws pcops::Error unless `ptr` is a valid offsets array over `count` rows (see above).
void check_offsets(const OffsetsView& ptr, int64_t count, const char* name);
void check_ragged_points(const RaggedPointsView& p, const char* name);
}  // namespace core

}  // namespace pcops
