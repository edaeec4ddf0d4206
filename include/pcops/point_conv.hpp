#pragma once
// point_conv: convolution on native points as a matrix-vector multiplication and reduction
// (MVMR, PointCNN++), and its backward (docs/ops/point_conv.md).
//
// Inputs: features [N_in, C_in] float32, weights [K, C_out, C_in] float32, triplets int64
// [T, 3] rows (i, j, k) with i in [0, N_out), j in [0, N_in), k in [0, K); all contiguous.
// A triplet says: output point i sees input point j through kernel matrix W_k.
//
// Contract, float32 throughout, no fused multiply-add, fl() = one rounding, acc starts at +0:
// - Forward: out[i, o] = the triplets of output i taken in ascending (k, j) order; for each,
//   c = 0 .. C_in-1 ascending: acc = fl(acc + fl(W[k, o, c] * F[j, c])). Rows with no triplet
//   are +0. The result does not depend on the order of the triplet rows (duplicate triplets
//   count twice).
// - grad_features[j, c] = the triplets of input j in ascending (k, i) order; for each,
//   o = 0 .. C_out-1 ascending: acc = fl(acc + fl(W[k, o, c] * G[i, o])) (the same MVMR with
//   W_k transposed and the roles of i and j swapped).
// - grad_weights[k, o, c] = the triplets of kernel k in ascending (i, j) order, in pieces of
//   core::vvor_piece_length(shape) triplets: each piece acc = fl(acc + fl(G[i, o] * F[j, c]))
//   from +0, then the pieces' sums in order from +0 (VVOR, an outer-product reduction).
// - Indices outside their range are an Index error, checked before any output is written.
// - Deterministic: bitwise equal run to run, across thread counts and (by the same arithmetic)
//   between the CPU and CUDA backends. Thread-safe. Extra memory: O(T + N_in + N_out + K) for
//   the triplet grouping, plus one transposed copy of the weights (K * C_in * C_out) forward.
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>

#include "pcops/context.hpp"
#include "pcops/ragged.hpp"

namespace pcops {

// The 16-bit element types of the CUDA tensor-core path.
enum class Half16 { kFloat16, kBFloat16 };

struct PointConvShape {
  int64_t num_in = 0;        // N_in: rows of features
  int64_t num_out = 0;       // N_out: rows of the output
  int64_t channels_in = 0;   // C_in
  int64_t channels_out = 0;  // C_out
  int64_t kernels = 0;       // K
  int64_t triplets = 0;      // T
};

// Groupings kept across calls. Each step (the forward, the features gradient, the weight
// gradient) sorts the triplets its own way, a function of the triplets and the shape alone; a
// network calls several layers on the same triplets, and a training step calls each layer's
// forward and backward on them, so the sorts can be made once and kept. point_conv_grouping
// (cpu::, cuda:: the exact path) and cuda::point_conv_mma_grouping (the tensor-core path) say how
// many bytes a step's grouping takes (0: the step keeps none: an empty product, or for CUDA's exact
// path a grouping other than the default segmented one) and what it is (two steps, of any shapes
// on the same triplets, with equal ids share one grouping; the paths' ids differ);
// point_conv_group and point_conv_mma_group write it (host memory for the CPU, device memory for
// CUDA), and PointConvKept hands it to the calls. A kept grouping must come
// from the same triplets, unchanged since; the results are bitwise the same as with the sorts made
// in the call (a sort gives the same keys every time), and the sorts' second buffers and temporary
// storage never exist in the call.
enum class PointConvStep { kForward, kGradFeatures, kGradWeights };
struct PointConvGrouping {
  size_t bytes = 0;
  std::array<int64_t, 8> id{};
};
// Groupings made ahead for the calls (nullptr: the step sorts in the call).
struct PointConvKept {
  const void* forward = nullptr;
  const void* grad_features = nullptr;
  const void* grad_weights = nullptr;
};
namespace core {
// Sizes non-negative and every buffer size representable (Value errors).
void validate_point_conv(const PointConvShape& shape);
// Host-memory triplets [T, 3]: i in [0, N_out), j in [0, N_in), k in [0, K) (Index errors).
void validate_triplets(const PointConvShape& shape, const int64_t* triplets, const char* name);
// The piece length L of the exact weight gradient (docs/ops/point_conv.md): a kernel cell's
// triplets, in (i, j) order, are folded in pieces of L (the last may be shorter), and the pieces'
// sums are folded in order. L = 2^12 * 2^e with the smallest e >= 0 such that floor(T / L) partial
// matrices of C_out x C_in float32 fit 64 MiB (the CUDA backend keeps one per piece after a cell's
// first). A function of the shape only, so every backend cuts at the same places.
int64_t vvor_piece_length(const PointConvShape& shape);
}  // namespace core

// Triplet construction (the kernel assignment of pcops.point_conv_triplets): neighbourhoods
// neighbours [M, S] int64, entries in [-1, N) (-1: a padding slot, left out), of centres [M, 3]
// among points [N, 3] (float32, finite), and a t x t x t grid of kernel cells over the cube
// [-extent, extent]^3 around each centre. The triplets are the valid slots in (i, s) order, row
// (i, j, k) for j = neighbours[i, s] with, in float32 and one rounding a step,
//   h = fl(fl(2 extent) / t),  q_a = clamp(floor(fl(fl(points[j, a] - centres[i, a]) + extent) / h)), 0, t - 1)
// (the division rounded too) per axis a, and k = (q_0 t + q_1) t + q_2: offsets outside the cube
// go to the border cells.
struct TripletShape {
  int64_t centres = 0;  // M
  int64_t points = 0;   // N
  int64_t slots = 0;    // S
  float extent = 0.0f;  // finite, > 0
  int64_t cells = 0;    // t >= 1 (K = t^3 kernel cells)
};

namespace core {
// Sizes non-negative, t >= 1 with t^3 and M * S * 3 representable, extent finite and > 0 with a
// positive cell side fl(fl(2 extent) / t) (Value errors).
void validate_triplet_shape(const TripletShape& shape);
}  // namespace core

namespace cpu {
// The triplets, count-then-fill (pcops::EdgeAllocator, pcops/ragged.hpp): checks the shape
// (core::validate_triplet_shape), every entry of neighbours in [-1, N) (Index error) and the
// coordinates' finiteness (Value error), then calls allocate(T) once with the number of triplets T
// and writes the [T, 3] rows there; returns T. Nothing is allocated or written on bad input.
// Deterministic and independent of the thread count.
int64_t point_conv_triplets(const CpuContext& ctx, const TripletShape& shape, const float* centres, const float* points,
                            const int64_t* neighbours, const EdgeAllocator& allocate);

// out: caller-owned [N_out, C_out], overwritten. kept: groupings made ahead (point_conv_group,
// which checked the triplets' ranges; a step that reads its kept grouping neither reads nor checks
// the triplets again).
void point_conv(const CpuContext& ctx, const PointConvShape& shape, const float* features,
                const float* weights, const int64_t* triplets, float* out, const PointConvKept& kept = {});

// grad_out: [N_out, C_out]. grad_features [N_in, C_in] and grad_weights [K, C_out, C_in] are
// caller-owned and overwritten; either may be nullptr (not computed).
void point_conv_backward(const CpuContext& ctx, const PointConvShape& shape, const float* grad_out,
                         const float* features, const float* weights, const int64_t* triplets,
                         float* grad_features, float* grad_weights, const PointConvKept& kept = {});

// The grouping of `step` for `shape` (above), and its writer: checks the triplets' ranges (Index
// errors, nothing written) and writes it into `grouping` (host memory of its bytes, 8-byte aligned).
PointConvGrouping point_conv_grouping(const PointConvShape& shape, PointConvStep step);
void point_conv_group(const CpuContext& ctx, const PointConvShape& shape, PointConvStep step,
                      const int64_t* triplets, void* grouping);
// A 64-bit fingerprint of the T triplets' values (one parallel pass; the same for any thread
// count): a caller that keeps groupings compares it to tell triplets rewritten in place (through
// any pointer) from the ones a grouping was made of.
uint64_t point_conv_fingerprint(const CpuContext& ctx, const int64_t* triplets, int64_t T);
}  // namespace cpu

namespace cuda {
// Triplet construction on device memory: the rows of cpu::point_conv_triplets, bit for bit, and
// allocate(T) returns device memory, called after one stream synchronisation (pcops/ragged.hpp).
// Entries of neighbours outside [-1, N) and the coordinates are not checked here (that needs a
// device-to-host copy; the CPU function and the torch binding check): such slots are left out,
// never dereferenced.
int64_t point_conv_triplets(const CudaContext& ctx, const TripletShape& shape, const float* centres, const float* points,
                            const int64_t* neighbours, const EdgeAllocator& allocate);

// Same contract and parameters as the cpu:: functions; every pointer is device memory.
// Bitwise equal to the CPU backend. The triplet ranges are NOT checked here (that needs a
// device-to-host copy; the torch binding checks them first); an out-of-range triplet is
// skipped, never dereferenced.
void point_conv(const CudaContext& ctx, const PointConvShape& shape, const float* features,
                const float* weights, const int64_t* triplets, float* out);

void point_conv_backward(const CudaContext& ctx, const PointConvShape& shape, const float* grad_out,
                         const float* features, const float* weights, const int64_t* triplets,
                         float* grad_features, float* grad_weights);

// The exact path's grouping of `step` for `shape`.
PointConvGrouping point_conv_grouping(const PointConvShape& shape, PointConvStep step);
// Writes that grouping of the device triplets into `grouping` (device memory of its bytes,
// 16-byte aligned), stream-ordered; its workspace is released before it returns.
void point_conv_group(const CudaContext& ctx, const PointConvShape& shape, PointConvStep step,
                      const int64_t* triplets, void* grouping);

// Device memory for one output (of the size the operator documents), requested by the operator
// when it is about to write it; called exactly once for each requested output, also an empty one.
using OutputAllocator = std::function<void*()>;

// The same with the outputs allocated on request, each once its grouping is sorted (an empty
// allocator: that gradient is not computed; the weight gradient is computed first). Extra memory
// (docs/ops/point_conv.md): 8 bytes a triplet during a grouping's sort and 4 after it (plus, for
// the "cells" MVMR from 64 destination channels, 8 bytes a triplet of run lists; for the weight
// gradient 4 bytes a triplet of rows and its piece partials), so with outputs allocated on request
// the second key buffer never exists beside the output.
void point_conv(const CudaContext& ctx, const PointConvShape& shape, const float* features,
                const float* weights, const int64_t* triplets, const OutputAllocator& out,
                const PointConvKept& kept = {});
void point_conv_backward(const CudaContext& ctx, const PointConvShape& shape, const float* grad_out,
                         const float* features, const float* weights, const int64_t* triplets,
                         const OutputAllocator& grad_features, const OutputAllocator& grad_weights,
                         const PointConvKept& kept = {});

// Tensor-core path (the "fast" mode): features, weights, grad_out and every output in one 16-bit
// type. Products are exact in float32 and every sum is float32 in a fixed order (MMA chains over
// the channels, then the triplets of a destination row in ascending (k, source row) order), so
// the results are deterministic run to run and do not depend on the order of the triplet rows;
// they are not bitwise equal to the exact path (other summation order, one rounding of the
// result to 16 bits). Needs point_conv_mma_supported(shape) (C_in and C_out multiples of 8, fewer
// than 2^31 rows and triplets) and 16-byte aligned buffers; std::invalid_argument otherwise.
// Extra memory: the grouping's sort keys, two buffers of 32-bit keys per triplet where the step's
// output is small beside them ("segmented") or else two of 64-bit keys ("packed", and the sort's
// temporary storage), one offset per (tile of 128 destination rows, k), and for grad_features a
// transposed copy of the weights. The second key buffer and the temporary storage are released
// once the keys are sorted, so with outputs allocated on request (OutputAllocator) they never
// exist beside the output: the peak beyond the output is max(8 bytes a triplet - output, 4 bytes a
// triplet) segmented, max(16 bytes a triplet + scratch - output, 8 bytes a triplet) packed.
bool point_conv_mma_supported(const PointConvShape& shape);

// The tensor-core path's grouping of `step` for `shape` (std::invalid_argument where
// !point_conv_mma_supported), and its writer (as point_conv_group).
PointConvGrouping point_conv_mma_grouping(const PointConvShape& shape, PointConvStep step);
void point_conv_mma_group(const CudaContext& ctx, const PointConvShape& shape, PointConvStep step,
                          const int64_t* triplets, void* grouping);

void point_conv_mma(const CudaContext& ctx, const PointConvShape& shape, Half16 type, const void* features,
                    const void* weights, const int64_t* triplets, void* out);
// The same with out [N_out, C_out] allocated on request (after the sort).
void point_conv_mma(const CudaContext& ctx, const PointConvShape& shape, Half16 type, const void* features,
                    const void* weights, const int64_t* triplets, const OutputAllocator& out,
                    const PointConvKept& kept = {});

// grad_features [N_in, C_in] and grad_weights [K, C_out, C_in] (either may be nullptr). The weight
// gradient is computed first, and its workspace released before grad_features' is taken.
void point_conv_mma_backward(const CudaContext& ctx, const PointConvShape& shape, Half16 type,
                             const void* grad_out, const void* features, const void* weights,
                             const int64_t* triplets, void* grad_features, void* grad_weights);
// The same with each gradient allocated on request, just before it is written (an empty
// allocator: that gradient is not computed), so grad_features does not exist during the weight
// gradient's step, nor either gradient beside its own sort's second buffer.
void point_conv_mma_backward(const CudaContext& ctx, const PointConvShape& shape, Half16 type,
                             const void* grad_out, const void* features, const void* weights,
                             const int64_t* triplets, const OutputAllocator& grad_features,
                             const OutputAllocator& grad_weights, const PointConvKept& kept = {});
}  // namespace cuda

}  // namespace pcops
