#pragma once
// knn(query [B,M,D], ref [B,N,D], k, query_lengths, ref_lengths) -> dist float32 [B,M,k] (Euclidean),
// idx int64 [B,M,k]
//
// Contract (docs/ops/knn.md):
// - s = squared distance summed in coordinate order without FMA (any D >= 1).
// - For each query, references are ordered by (s, index) ascending and the first k are returned;
//   NaN s sorts as +inf (after every finite candidate, then by index).
// - dist = sqrt(s) correctly rounded, taken after selection (a NaN s is reported as +inf).
// - k > N without ref_lengths is an error; with ref_lengths, slots past the available references
//   hold (+inf, -1). Queries past query_lengths[b] hold (+inf, -1) in every slot.
// - Exact: the spatial acceleration returns exactly what brute force returns. Deterministic,
//   thread-safe.
#include <cstdint>

#include "pcops/context.hpp"
#include "pcops/ragged.hpp"
#include "pcops/view.hpp"

namespace pcops {

struct KnnParams {
  int64_t k = 1;
};

namespace core {
void validate_knn(const PointsView& query, const PointsView& ref, const LengthsView& query_lengths,
                  const LengthsView& ref_lengths, const KnnParams& params);
}

namespace cpu {
// dist, idx: caller-owned [B, M, k], contiguous.
void knn(const CpuContext& ctx, PointsView query, PointsView ref, LengthsView query_lengths,
         LengthsView ref_lengths, const KnnParams& params, float* dist, int64_t* idx);
}  // namespace cpu

// Ragged kNN (torch_cluster's knn on CSR offsets, docs/ops/knn.md "ragged"): for every row i
// of y in cloud b, the min(k, |x_b|) rows of x in cloud b ordered by (s, index) ascending as
// above; with `cosine`, by (1 - dot(x, y) / (|x| * |y|), index) instead, all in float32 without
// FMA, norms sqrt of the coordinate-order sum of squares (a zero norm gives NaN, sorted last).
// Edges [2, E]: row 0 = global y index, row 1 = global x index, grouped by query ascending,
// E = sum_b |y_b| * min(k, |x_b|). Count-then-fill through `allocate`; returns E.
struct KnnRaggedParams {
  int64_t k = 1;
  bool cosine = false;
};

namespace core {
void validate_knn_ragged(const RaggedPointsView& x, const RaggedPointsView& y,
                         const OffsetsView& ptr_x, const OffsetsView& ptr_y,
                         const KnnRaggedParams& params);
}

namespace cpu {
int64_t knn_ragged(const CpuContext& ctx, RaggedPointsView x, RaggedPointsView y, OffsetsView ptr_x,
                   OffsetsView ptr_y, const KnnRaggedParams& params, const EdgeAllocator& allocate);
}  // namespace cpu

namespace cuda {
// Same contract and parameters as cpu::knn; query, ref, dist and idx in device memory, lengths in
// host memory. Bitwise equal to the CPU backend.
void knn(const CudaContext& ctx, PointsView query, PointsView ref, LengthsView query_lengths,
         LengthsView ref_lengths, const KnnParams& params, float* dist, int64_t* idx);

// Same contract and parameters as cpu::knn_ragged; x and y in device memory, ptr_x / ptr_y in
// host memory, `allocate` returns device memory (see ragged.hpp). E is known from the offsets,
// so no stream synchronisation is needed. Bitwise equal to the CPU backend.
int64_t knn_ragged(const CudaContext& ctx, RaggedPointsView x, RaggedPointsView y, OffsetsView ptr_x,
                   OffsetsView ptr_y, const KnnRaggedParams& params, const EdgeAllocator& allocate);
}  // namespace cuda

}  // namespace pcops
