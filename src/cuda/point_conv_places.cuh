#pragma once
// Placements of point_conv triplets for primitives::group_segmented (and the fast path's packed
// keys), shared by the exact and the tensor-core paths.
#include <cstdint>

namespace pcops::cuda::point_conv_places {

// Triplet p's entries in columns col_a and col_b and its kernel cell (column 2), and whether they
// lie in [0, n_a), [0, n_b) and [0, K).
struct TripletAt {
  int64_t a, b, k;
  bool ok;
};
__device__ __forceinline__ TripletAt triplet_at(const int64_t* t, int64_t p, int col_a, int64_t n_a, int col_b,
                                                int64_t n_b, int64_t K) {
  const int64_t a = t[p * 3 + col_a], b = t[p * 3 + col_b], k = t[p * 3 + 2];
  return {a, b, k, a >= 0 && a < n_a && b >= 0 && b < n_b && k >= 0 && k < K};
}

// The weight gradient's segments: triplet p's segment (k, block i >> i_bits; K tiles where the
// triplet is out of range, key 0) and key (i's low i_bits bits above j), so that each kernel
// cell's triplets come in (i, j) order.
struct CellBlock {
  int64_t n_out, n_in, K, tiles;
  int i_bits, j_bits;
  __device__ void operator()(const int64_t* t, int64_t p, int64_t& seg, uint64_t& key) const {
    const TripletAt x = triplet_at(t, p, 0, n_out, 1, n_in, K);
    seg = x.ok ? x.k * tiles + (x.a >> i_bits) : K * tiles;
    const uint64_t low_i = static_cast<uint64_t>(x.a & ((int64_t{1} << i_bits) - 1));
    key = x.ok ? (low_i << j_bits) | static_cast<uint64_t>(x.b) : 0;
  }
};

}  // namespace pcops::cuda::point_conv_places
