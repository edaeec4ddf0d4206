#pragma once
// radius(x [N,D], y [M,D], ptr_x, ptr_y, r, max_num_neighbors, ignore_same_index)
//   -> edges int64 [2, E] (ragged, torch_cluster convention)
//
// Contract (docs/ops/radius.md, CONTRACTS.md "radius (flat, torch_cluster convention)"):
// - R2 = fl32(r * r) with the product in float64 (torch_cluster's rule; the dense ball_query
//   uses fl32(fl32(r) * fl32(r)), which differs by one ULP for some r, e.g. 0.1).
// - Reference j of cloud b matches query i of cloud b when s(y_i, x_j) < R2 (strict; NaN never
//   matches), s summed in coordinate order without FMA (any D >= 1).
// - ignore_same_index: the pair with equal global indices (i == j) is skipped before counting.
// - Each query keeps its first max_num_neighbors matches in reference order (torch_cluster's
//   CUDA behaviour), i.e. the matches of smallest index.
// - Edges: row 0 = global query index into y, row 1 = global reference index into x; grouped by
//   query ascending, references ascending within a query.
// - r finite and >= 0 (r = 0 matches nothing); max_num_neighbors >= 0.
// - Exact: 3-D clouds go through a uniform grid that returns exactly what brute force returns.
//   Deterministic, thread-safe.
#include <cstdint>

#include "pcops/context.hpp"
#include "pcops/ragged.hpp"

namespace pcops {

struct RadiusParams {
  double r = 0.0;
  int64_t max_num_neighbors = 32;
  bool ignore_same_index = false;
};

namespace core {
void validate_radius(const RaggedPointsView& x, const RaggedPointsView& y, const OffsetsView& ptr_x,
                     const OffsetsView& ptr_y, const RadiusParams& params);
// The squared-radius threshold of the contract: fl32(r * r), the product in float64.
float radius_threshold(double r);
}  // namespace core

namespace cpu {
// Count-then-fill: calls allocate(E) once, writes [2, E] edges there, returns E.
int64_t radius(const CpuContext& ctx, RaggedPointsView x, RaggedPointsView y, OffsetsView ptr_x,
               OffsetsView ptr_y, const RadiusParams& params, const EdgeAllocator& allocate);
}  // namespace cpu

namespace cuda {
// Same contract and parameters as cpu::radius; x and y in device memory, ptr_x / ptr_y in host
// memory, `allocate` returns device memory (see ragged.hpp). Bitwise equal to the CPU backend.
int64_t radius(const CudaContext& ctx, RaggedPointsView x, RaggedPointsView y, OffsetsView ptr_x,
               OffsetsView ptr_y, const RadiusParams& params, const EdgeAllocator& allocate);
}  // namespace cuda

}  // namespace pcops
