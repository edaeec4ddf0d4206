#pragma once
// Placements of point_conv triplets for primitives::group_segmented (and the fast path's packed
// keys), shared by the exact and the tensor-core paths.
#include <cstdint>

namespace pcops::cuda::point_conv_places {

// The weight gradient's segments: triplet p's segment (k, block i >> i_bits; K tiles where the
// triplet is out of range, key 0) and key (i's low i_bits bits above j), so that each kernel
// cell's triplets come in (i, j) order.
struct CellBlock {
  int64_t n_out, n_in, K, tiles;
  int i_bits, j_bits;
  __device__ void operator()(const int64_t* t, int64_t p, int64_t& seg, uint64_t& key) const {
    const int64_t i = t[p * 3], j = t[p * 3 + 1], k = t[p * 3 + 2];
    const bool ok = i >= 0 && i < n_out && j >= 0 && j < n_in && k >= 0 && k < K;
    seg = ok ? k * tiles + (i >> i_bits) : K * tiles;
    key = ok ? (static_cast<uint64_t>(i & ((int64_t{1} << i_bits) - 1)) << j_bits) | static_cast<uint64_t>(j) : 0;
  }
};

}  // namespace pcops::cuda::point_conv_places
