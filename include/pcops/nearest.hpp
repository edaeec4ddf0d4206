#pragma once
// nearest(x [N,D], y [M,D], ptr_x, ptr_y) -> int64 [N]
//
// Contract (docs/ops/nearest.md): for every row i of x in cloud b, the global index of the
// nearest row of y in cloud b: the smallest (s, index), s the squared distance summed in
// coordinate order without FMA, NaN sorting as +inf (the kNN contract with k = 1, x as the
// queries). A cloud with x rows but no y rows is an error. Exact, deterministic, thread-safe.
#include <cstdint>

#include "pcops/context.hpp"
#include "pcops/ragged.hpp"

namespace pcops {

namespace core {
void validate_nearest(const RaggedPointsView& x, const RaggedPointsView& y, const OffsetsView& ptr_x,
                      const OffsetsView& ptr_y);
}

namespace cpu {
// out: caller-owned int64 [x.count].
void nearest(const CpuContext& ctx, RaggedPointsView x, RaggedPointsView y, OffsetsView ptr_x,
             OffsetsView ptr_y, int64_t* out);
}  // namespace cpu

namespace cuda {
// Same contract as cpu::nearest; x, y and out in device memory, ptr_x / ptr_y in host memory.
// Bitwise equal to the CPU backend.
void nearest(const CudaContext& ctx, RaggedPointsView x, RaggedPointsView y, OffsetsView ptr_x,
             OffsetsView ptr_y, int64_t* out);
}  // namespace cuda

}  // namespace pcops
