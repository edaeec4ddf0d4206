#pragma once
// Inverse of an index map, for deterministic scatter reductions without atomics.
//
// Input: `segments` segments (batch entries) of `length` int64 indices each, idx[s * length + p],
// every valid one naming a target in [0, targets); anything else (-1 padding, or an index
// outside the range) is left out. Output (CSR): for every (segment s, target t), the positions p
// with idx[s * length + p] == t, in ASCENDING order of p:
//   position(j) for j in [offsets[s * targets + t], offsets[s * targets + t + 1]).
// A consumer then gives each (target, channel) one thread that folds its sources in that order,
// which reproduces a CPU loop "for p ascending: out[idx[p]] += value(p)" bit for bit (gather /
// group / interpolation backward, and scatter-sum / scatter-mean reductions).
//
// How: keys s * targets + idx (invalid entries: the key segments * targets, past every list) with
// values p are radix-sorted by CUB (stable, so equal keys keep ascending p; only the bits that
// can be set are sorted); offsets[k] is the lower bound of key k in the sorted keys (one binary
// search per k: no atomics, no memset). Keys and positions are 32-bit when they fit (the common
// case), which halves the sort's traffic against 64-bit ones. Cost: a sort of segments * length
// pairs plus (segments * targets + 1) binary searches. The keys pass can also compute the value
// statistics of idx (the binding's value checks, primitives/index_stats.cuh) on its one read of
// the index, and the offsets pass can zero a caller's counters (InverseIndexExtras): no separate
// kernel or memset for either. Every allocation comes from the caller's Workspace (one block)
// and everything runs on the context's stream.
#include <cub/cub.cuh>

#include <algorithm>
#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/primitives/index_stats.cuh"

namespace pcops::cuda::primitives {

struct InverseIndexPolicy {
  static constexpr int kThreads = 256;
  static constexpr int64_t kMaxBlocks = int64_t{1} << 20;  // grid-stride beyond
  // The keys pass: index loads in flight per thread, and its grid (blocks per SM): each block
  // leaves one set of partial statistics, folded by a single block of the offsets pass.
  static constexpr int kKeysUnroll = 4;
  static constexpr int kKeysBlocksPerSm = 4;
};

struct InverseIndex {
  const int64_t* offsets = nullptr;  // [segments * targets + 1]
  // The positions [segments * length] (only [0, offsets[last]) is used): positions32 when keys and
  // positions were sorted as 32-bit values, else positions64 (read through position()).
  const uint32_t* positions32 = nullptr;
  const int64_t* positions64 = nullptr;

  __device__ __forceinline__ int64_t position(int64_t j) const {
    return positions32 != nullptr ? static_cast<int64_t>(positions32[j]) : positions64[j];
  }
};

// Optional extra work of inverse_index (device pointers; done in stream order, ready with the
// returned arrays).
struct InverseIndexExtras {
  // kIndexStats words: the value statistics of idx as rows [segments, length], the same words
  // as cuda::index_value_stats(idx, segments, length) gives. Written, not accumulated: they need
  // no zeroing.
  unsigned long long* stats = nullptr;
  // zero_words (at most InverseIndexPolicy::kThreads) words set to 0: a caller's counters for
  // kernels that follow, sparing it a memset.
  unsigned long long* zero = nullptr;
  int zero_words = 0;
};

namespace inverse_index_detail {

// Entry q = s * length + p: its key and its position p. Block-uniform passes over
// kKeysUnroll * (grid size) entries, the loads first. With kStats, also the value statistics of
// the entries (the left neighbour from the next lower lane, or from memory for lane 0), one
// partial per block into partials[blockIdx.x * kIndexStats + s].
template <class Key, class Pos, bool kStats>
__global__ void __launch_bounds__(InverseIndexPolicy::kThreads)
    keys_kernel(const int64_t* idx, int64_t length, int64_t targets, int64_t total, Key invalid, Key* keys,
                Pos* values, unsigned long long* partials) {
  constexpr int U = InverseIndexPolicy::kKeysUnroll;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const bool one_segment = length == total;
  const int lane = static_cast<int>(threadIdx.x & 31u);
  IndexStats stats;
  for (int64_t first = blockIdx.x * int64_t{blockDim.x}; first < total; first += U * stride) {
    int64_t t[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t q = first + u * stride + threadIdx.x;
      t[u] = q < total ? idx[q] : 0;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t q = first + u * stride + threadIdx.x;
      const int64_t s = one_segment ? 0 : q / length, p = q - s * length;
      if constexpr (kStats) {
        int64_t prev = __shfl_up_sync(0xffffffffu, t[u], 1);
        if (lane == 0 && p > 0 && q < total) prev = idx[q - 1];
        if (q < total) stats.add(t[u], p, length, prev);
      }
      if (q < total) {
        keys[q] = (t[u] >= 0 && t[u] < targets) ? static_cast<Key>(s * targets + t[u]) : invalid;
        values[q] = static_cast<Pos>(p);
      }
    }
  }
  if constexpr (kStats) {
    __shared__ unsigned long long block[kIndexStats];
    stats.block_fold(block);
    if (threadIdx.x < kIndexStats) partials[blockIdx.x * int64_t{kIndexStats} + threadIdx.x] = block[threadIdx.x];
  }
}

// One thread per list boundary k in [0, lists]: the first sorted position whose key is >= k.
// With extras, the grid's last block does them instead of searching: it zeroes x.zero and folds
// the keys pass's partial statistics into x.stats.
template <class Key>
__global__ void __launch_bounds__(InverseIndexPolicy::kThreads)
    offsets_kernel(const Key* sorted, int64_t total, int64_t lists, int64_t* offsets,
                   const unsigned long long* partials, int64_t num_partials, InverseIndexExtras x) {
  const bool extra_block = x.stats != nullptr || x.zero_words > 0;
  if (extra_block && blockIdx.x == gridDim.x - 1) {
    if (static_cast<int>(threadIdx.x) < x.zero_words) x.zero[threadIdx.x] = 0;
    if (x.stats != nullptr) {
      IndexStats stats;
      for (int64_t b = threadIdx.x; b < num_partials; b += blockDim.x) stats.fold(partials + b * kIndexStats);
      __shared__ unsigned long long block[kIndexStats];
      stats.block_fold(block);
      if (threadIdx.x < kIndexStats) x.stats[threadIdx.x] = block[threadIdx.x];
    }
    return;
  }
  const int64_t searchers = int64_t{gridDim.x - (extra_block ? 1u : 0u)} * blockDim.x;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k <= lists; k += searchers) {
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

template <class Key, class Pos>
InverseIndex build(const CudaContext& ctx, detail::Workspace& ws, const int64_t* idx, int64_t segments,
                   int64_t length, int64_t targets, const InverseIndexExtras& x) {
  const int64_t total = segments * length, lists = segments * targets;
  const cudaStream_t stream = detail::stream_of(ctx);
  InverseIndex out;
  if (total == 0) {
    int64_t* offsets = ws.alloc<int64_t>(lists + 1);
    PCOPS_CUDA_CHECK(cudaMemsetAsync(offsets, 0, static_cast<size_t>(lists + 1) * sizeof(int64_t), stream));
    if (x.stats != nullptr)
      PCOPS_CUDA_CHECK(cudaMemsetAsync(x.stats, 0, kIndexStats * sizeof(unsigned long long), stream));
    if (x.zero_words > 0)
      PCOPS_CUDA_CHECK(
          cudaMemsetAsync(x.zero, 0, static_cast<size_t>(x.zero_words) * sizeof(unsigned long long), stream));
    out.offsets = offsets;
    out.positions64 = offsets;  // never read: every list is empty
    return out;
  }
  constexpr int T = InverseIndexPolicy::kThreads;
  const int64_t sms = detail::device_properties().multiProcessorCount;
  const int64_t key_blocks = std::clamp<int64_t>(detail::ceil_div(total, int64_t{T} * InverseIndexPolicy::kKeysUnroll),
                                                 1, sms * InverseIndexPolicy::kKeysBlocksPerSm);
  int end_bit = 1;  // keys lie in [0, lists]
  while (end_bit < static_cast<int>(8 * sizeof(Key)) && (static_cast<uint64_t>(lists) >> end_bit) != 0) ++end_bit;
  size_t temp_bytes = 0;
  {
    cub::DoubleBuffer<Key> dk(nullptr, nullptr);
    cub::DoubleBuffer<Pos> dv(nullptr, nullptr);
    PCOPS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, dk, dv, total, 0, end_bit, stream));
  }
  // One workspace block for every array of the pass.
  detail::WorkspaceLayout layout;
  const size_t at_offsets = layout.reserve<int64_t>(lists + 1);
  const size_t at_keys = layout.reserve<Key>(total), at_keys_alt = layout.reserve<Key>(total);
  const size_t at_values = layout.reserve<Pos>(total), at_values_alt = layout.reserve<Pos>(total);
  const size_t at_partials = layout.reserve<unsigned long long>(x.stats != nullptr ? key_blocks * kIndexStats : 0);
  const size_t at_temp = layout.reserve_bytes(temp_bytes);
  layout.allocate(ws);
  int64_t* offsets = layout.at<int64_t>(at_offsets);
  Key* keys = layout.at<Key>(at_keys);
  Pos* values = layout.at<Pos>(at_values);
  unsigned long long* partials = layout.at<unsigned long long>(at_partials);

  const Key invalid = static_cast<Key>(lists);
  if (x.stats != nullptr)
    detail::launch(ctx, keys_kernel<Key, Pos, true>, dim3(static_cast<unsigned>(key_blocks)), dim3(T), 0, idx,
                   length, targets, total, invalid, keys, values, partials);
  else
    detail::launch(ctx, keys_kernel<Key, Pos, false>, dim3(static_cast<unsigned>(key_blocks)), dim3(T), 0, idx,
                   length, targets, total, invalid, keys, values, partials);
  cub::DoubleBuffer<Key> dk(keys, layout.at<Key>(at_keys_alt));
  cub::DoubleBuffer<Pos> dv(values, layout.at<Pos>(at_values_alt));
  PCOPS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(layout.at<void>(at_temp), temp_bytes, dk, dv, total, 0,
                                                   end_bit, stream));
  const bool extra_block = x.stats != nullptr || x.zero_words > 0;
  detail::launch(ctx, offsets_kernel<Key>, dim3(blocks_for(lists + 1) + (extra_block ? 1u : 0u)), dim3(T), 0,
                 static_cast<const Key*>(dk.Current()), total, lists, offsets,
                 static_cast<const unsigned long long*>(partials), x.stats != nullptr ? key_blocks : int64_t{0}, x);
  out.offsets = offsets;
  if constexpr (sizeof(Pos) == 4) out.positions32 = dv.Current();
  else out.positions64 = dv.Current();
  return out;
}

}  // namespace inverse_index_detail

// Builds the inverse map of idx (device, contiguous [segments, length]); the arrays live in `ws`
// (valid until it is destroyed) and are ready in stream order, as are the extras. Keys and
// positions are 32-bit when segments * targets and length fit (positions < 2^32), else 64-bit.
inline InverseIndex inverse_index(const CudaContext& ctx, detail::Workspace& ws, const int64_t* idx,
                                  int64_t segments, int64_t length, int64_t targets,
                                  const InverseIndexExtras& extras = {}) {
  if (segments * targets < int64_t{0xFFFFFFFF} && length <= (int64_t{1} << 32))
    return inverse_index_detail::build<uint32_t, uint32_t>(ctx, ws, idx, segments, length, targets, extras);
  return inverse_index_detail::build<uint64_t, int64_t>(ctx, ws, idx, segments, length, targets, extras);
}

}  // namespace pcops::cuda::primitives
