#pragma once
// Inverse of an index map, for deterministic scatter reductions without atomics.
//
// Input: `segments` segments (batch entries) of `length` int64 indices each, idx[s * length + p],
// every valid one naming a target in [0, targets); anything else (-1 padding, or an index
// outside the range) is left out. Output (CSR): for every (segment s, target t), the positions p
// with idx[s * length + p] == t, in ASCENDING order of p:
//   positions[offsets[s * targets + t] .. offsets[s * targets + t + 1]).
// A consumer then gives each (target, channel) one thread that folds its sources in that order,
// which reproduces a CPU loop "for p ascending: out[idx[p]] += value(p)" bit for bit (gather /
// group / interpolation backward, and scatter-sum / scatter-mean reductions).
//
// How: keys s * targets + idx (invalid entries: the key segments * targets, past every list) with
// values p are radix-sorted by CUB (stable, so equal keys keep ascending p; only the bits that
// can be set are sorted); offsets[k] is the lower bound of key k in the sorted keys (one binary
// search per k: no atomics, no memset). Cost: a sort of segments * length pairs plus
// (segments * targets + 1) binary searches. Every allocation comes from the caller's Workspace
// and everything runs on the context's stream.
#include <cub/cub.cuh>

#include <algorithm>
#include <cstdint>

#include "cuda/common.cuh"

namespace pcops::cuda::primitives {

struct InverseIndexPolicy {
  static constexpr int kThreads = 256;
  static constexpr int64_t kMaxBlocks = int64_t{1} << 20;  // grid-stride beyond
};

struct InverseIndex {
  const int64_t* offsets = nullptr;    // [segments * targets + 1]
  const int64_t* positions = nullptr;  // [segments * length]; only [0, offsets[last]) is used
};

namespace inverse_index_detail {

// One thread per entry (grid-stride): its key and its position inside the segment.
template <class Key>
__global__ void keys_kernel(const int64_t* idx, int64_t length, int64_t targets, int64_t total,
                            Key invalid, Key* keys, int64_t* values) {
  for (int64_t q = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; q < total;
       q += int64_t{gridDim.x} * blockDim.x) {
    const int64_t s = q / length, p = q - s * length;
    const int64_t t = idx[q];
    keys[q] = (t >= 0 && t < targets) ? static_cast<Key>(s * targets + t) : invalid;
    values[q] = p;
  }
}

// One thread per list boundary k in [0, lists]: the first sorted position whose key is >= k.
template <class Key>
__global__ void offsets_kernel(const Key* sorted, int64_t total, int64_t lists, int64_t* offsets) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k <= lists;
       k += int64_t{gridDim.x} * blockDim.x) {
    int64_t lo = 0, hi = total;
    const Key key = static_cast<Key>(k);
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (sorted[mid] < key) lo = mid + 1;
      else hi = mid;
    }
    offsets[k] = lo;
  }
}

inline unsigned blocks_for(int64_t items) {
  return static_cast<unsigned>(std::clamp<int64_t>(
      detail::ceil_div(items, InverseIndexPolicy::kThreads), 1, InverseIndexPolicy::kMaxBlocks));
}

template <class Key>
InverseIndex build(const CudaContext& ctx, detail::Workspace& ws, const int64_t* idx,
                   int64_t segments, int64_t length, int64_t targets) {
  const int64_t total = segments * length, lists = segments * targets;
  int64_t* offsets = ws.alloc<int64_t>(lists + 1);
  InverseIndex out{offsets, nullptr};
  constexpr int T = InverseIndexPolicy::kThreads;
  if (total > 0) {
    Key* keys = ws.alloc<Key>(total);
    Key* keys_alt = ws.alloc<Key>(total);
    int64_t* values = ws.alloc<int64_t>(total);
    int64_t* values_alt = ws.alloc<int64_t>(total);
    detail::launch(ctx, keys_kernel<Key>, dim3(blocks_for(total)), dim3(T), 0, idx, length, targets,
                   total, static_cast<Key>(lists), keys, values);
    int end_bit = 1;  // keys lie in [0, lists]
    while (end_bit < static_cast<int>(8 * sizeof(Key)) && (static_cast<uint64_t>(lists) >> end_bit) != 0)
      ++end_bit;
    cub::DoubleBuffer<Key> dk(keys, keys_alt);
    cub::DoubleBuffer<int64_t> dv(values, values_alt);
    size_t temp_bytes = 0;
    PCOPS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, dk, dv, total, 0, end_bit,
                                                     detail::stream_of(ctx)));
    void* temp = ws.bytes(temp_bytes);
    PCOPS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, dk, dv, total, 0, end_bit,
                                                     detail::stream_of(ctx)));
    out.positions = dv.Current();
    detail::launch(ctx, offsets_kernel<Key>, dim3(blocks_for(lists + 1)), dim3(T), 0,
                   static_cast<const Key*>(dk.Current()), total, lists, offsets);
  } else {
    PCOPS_CUDA_CHECK(cudaMemsetAsync(offsets, 0, static_cast<size_t>(lists + 1) * sizeof(int64_t),
                                     detail::stream_of(ctx)));
    out.positions = offsets;  // never read: every list is empty
  }
  return out;
}

}  // namespace inverse_index_detail

// Builds the inverse map of idx (device, contiguous [segments, length]); the arrays live in `ws`
// (valid until it is destroyed) and are ready in stream order. Keys are 32-bit when
// segments * targets fits, halving the sort's traffic.
inline InverseIndex inverse_index(const CudaContext& ctx, detail::Workspace& ws, const int64_t* idx,
                                  int64_t segments, int64_t length, int64_t targets) {
  if (segments * targets < int64_t{0xFFFFFFFF})
    return inverse_index_detail::build<uint32_t>(ctx, ws, idx, segments, length, targets);
  return inverse_index_detail::build<uint64_t>(ctx, ws, idx, segments, length, targets);
}

}  // namespace pcops::cuda::primitives
