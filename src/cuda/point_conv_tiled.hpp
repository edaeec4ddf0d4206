#pragma once
// Internal to the CUDA backend: the exact MVMR of point_conv over tiles of destination rows
// (src/cuda/point_conv_mma.cu), the same bits as the per-element kernel of point_conv.cu with
// W_k read once per (tile, k). An experiment, selected by PCOPS_CUDA_POINT_CONV_CONFIG=mvmr-tiled.
#include <cstdint>

#include "pcops/context.hpp"

namespace pcops::cuda {

// dst[r, d] (n_dst x c_dst) = the contract's fold over the triplets whose column dst_col is r
// (source rows in column src_col, kernels in column 2) of mat[k, s, d] * src[m, s]; mat is
// [K, c_src, c_dst]. Returns false (nothing launched) when the shape is not supported.
bool point_conv_exact_tiled(const CudaContext& ctx, const int64_t* triplets, int64_t T, int dst_col, int src_col,
                            int64_t n_dst, int64_t n_src, int64_t K, const float* src, int64_t c_src, const float* mat,
                            int64_t c_dst, float* dst);

}  // namespace pcops::cuda
