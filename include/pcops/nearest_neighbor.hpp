#pragma once
// nearest_neighbor(x [B,P1,D], y [B,P2,D], x_lengths, y_lengths, norm) -> idx int64 [B,P1]
//
// Contract (docs/ops/chamfer_distance.md, "Nearest-neighbour search"):
// - For every valid row i of cloud b of x (i < x_lengths[b]), the index j < y_lengths[b] with the
//   smallest (key, j): key = s with NaN as +inf, s summed in coordinate order without FMA in the
//   precision of the input (float32 or float64, no conversion):
//     norm 2: d_i = fl(x_i - y_i), s_0 = fl(d_0 * d_0), s_i = fl(s_{i-1} + fl(d_i * d_i));
//     norm 1: s_0 = |d_0|,         s_i = fl(s_{i-1} + |d_i|).
//   Exact ties go to the lowest index; a cloud whose keys are all +inf gives index 0.
// - -1 for rows past x_lengths[b] and for every row of a cloud with y_lengths[b] == 0.
// - Any D >= 1. Exact (float32 squared-L2 3-D clouds run the kNN grid, which returns exactly what
//   brute force returns). Deterministic, thread-safe.
//
// The helpers below it serve chamfer_distance's autograd, whose values and gradients must not
// depend on the device: a row sum in one written order, and the transposed gather (scatter-add)
// in ascending order without atomics.
#include <cstdint>

#include "pcops/context.hpp"
#include "pcops/view.hpp"

namespace pcops {

struct NearestNeighborParams {
  int64_t norm = 2;  // 1 (L1 sum) or 2 (squared L2)
};

namespace core {
// Shapes, lengths and norm; the data pointers only for null checks.
void validate_nearest_neighbor(const PointsView& x, const PointsView& y, const LengthsView& x_lengths,
                               const LengthsView& y_lengths, const NearestNeighborParams& params);
void validate_nearest_neighbor(const PointsView64& x, const PointsView64& y, const LengthsView& x_lengths,
                               const LengthsView& y_lengths, const NearestNeighborParams& params);
// rows x length values; sizes non-negative, data present when non-empty.
void validate_ordered_sum(const void* values, int64_t rows, int64_t length);
// grad [batch, num_idx, width], idx [batch, num_idx], out [batch, count, width]: sizes only
// (index ranges are checked by the callers that can read idx on the host).
void validate_gather_rows_backward(const void* grad, const int64_t* idx, int64_t batch, int64_t num_idx,
                                   int64_t width, int64_t count);
}  // namespace core

namespace cpu {
// idx: caller-owned int64 [B, P1], contiguous.
void nearest_neighbor(const CpuContext& ctx, PointsView x, PointsView y, LengthsView x_lengths,
                      LengthsView y_lengths, const NearestNeighborParams& params, int64_t* idx);
void nearest_neighbor(const CpuContext& ctx, PointsView64 x, PointsView64 y, LengthsView x_lengths,
                      LengthsView y_lengths, const NearestNeighborParams& params, int64_t* idx);

// out[r] = the sum of values[r * length + 0 .. length) in the written order: groups of 32
// consecutive values are summed left to right (starting from the group's first value, no +0),
// and the same is repeated on the group sums until one value remains; an empty row gives +0.
// values: contiguous [rows, length]; out: [rows].
void ordered_sum(const CpuContext& ctx, const float* values, int64_t rows, int64_t length, float* out);
void ordered_sum(const CpuContext& ctx, const double* values, int64_t rows, int64_t length, double* out);

// out[r] = sqrt(((v0 * v0 + v1 * v1) + v2 * v2) + ...) over values[r * length + 0 .. length): the
// squares added left to right (no contraction), then the correctly rounded square root; an empty
// row gives +0. The Euclidean norm of chamfer_distance's normal term (torch's own float64 sqrt on
// the CPU is not correctly rounded, so it would differ from the GPU's). values: contiguous
// [rows, length]; out: [rows].
void ordered_norm(const CpuContext& ctx, const float* values, int64_t rows, int64_t length, float* out);
void ordered_norm(const CpuContext& ctx, const double* values, int64_t rows, int64_t length, double* out);

// The gradient of gathering rows: out[b, j, u] = +0 + the sum, over p ascending with
// idx[b, p] == j, of grad[b, p, u]; idx = -1 contributes nothing. grad contiguous
// [batch, num_idx, width], idx contiguous [batch, num_idx] with values in [-1, count) (checked
// here: host memory), out caller-owned [batch, count, width] (overwritten).
void gather_rows_backward(const CpuContext& ctx, const float* grad, const int64_t* idx, int64_t batch,
                          int64_t num_idx, int64_t width, int64_t count, float* out);
void gather_rows_backward(const CpuContext& ctx, const double* grad, const int64_t* idx, int64_t batch,
                          int64_t num_idx, int64_t width, int64_t count, double* out);
}  // namespace cpu

namespace cuda {
// Same contracts and parameters as the cpu:: functions; every pointer is device memory except the
// lengths (host). Bitwise equal to the CPU backend. gather_rows_backward does not range-check idx
// (device memory; reading it on the host would synchronise): an index outside [-1, count) is
// treated like -1 and never dereferenced.
void nearest_neighbor(const CudaContext& ctx, PointsView x, PointsView y, LengthsView x_lengths,
                      LengthsView y_lengths, const NearestNeighborParams& params, int64_t* idx);
void nearest_neighbor(const CudaContext& ctx, PointsView64 x, PointsView64 y, LengthsView x_lengths,
                      LengthsView y_lengths, const NearestNeighborParams& params, int64_t* idx);
void ordered_sum(const CudaContext& ctx, const float* values, int64_t rows, int64_t length, float* out);
void ordered_sum(const CudaContext& ctx, const double* values, int64_t rows, int64_t length, double* out);
void ordered_norm(const CudaContext& ctx, const float* values, int64_t rows, int64_t length, float* out);
void ordered_norm(const CudaContext& ctx, const double* values, int64_t rows, int64_t length, double* out);
void gather_rows_backward(const CudaContext& ctx, const float* grad, const int64_t* idx, int64_t batch,
                          int64_t num_idx, int64_t width, int64_t count, float* out);
void gather_rows_backward(const CudaContext& ctx, const double* grad, const int64_t* idx, int64_t batch,
                          int64_t num_idx, int64_t width, int64_t count, double* out);
}  // namespace cuda

}  // namespace pcops
