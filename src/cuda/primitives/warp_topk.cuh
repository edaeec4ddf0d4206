#pragma once
// Warp-cooperative selection of the k smallest distinct uint64 values offered by one warp (kNN
// packs (key bits, index) into one value so that integer order is (key, index) order).
//
// Layout: a private shared-memory buffer of 2 * half values (half = a power of two >= max(k, 64)).
// buf[0, half) holds the best values kept so far, sorted ascending and padded with UINT64_MAX;
// buf[half, 2 * half) collects new candidates. When the candidate half could overflow on the next
// offer, it is bitonic-sorted descending and one bitonic merge of the whole buffer brings the
// smallest `half` values, sorted, back into the lower half. The k-th kept value is the admission
// threshold; since values are distinct, "v < threshold" admits exactly what may still belong to
// the result.
//
// Every member function is warp-collective: call it with all 32 lanes converged. The counters are
// kept identical in every lane (computed from ballots), so control flow stays warp-uniform.
#include <cstdint>

namespace pcops::cuda::primitives {

struct WarpTopK {
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static constexpr unsigned kFull = 0xFFFFFFFFu;

  uint64_t* buf;      // 2 * half values in shared memory, private to the warp
  int half;           // power of two, >= max(k, 64)
  int k;              // 1 <= k <= half
  int pending = 0;    // new candidates in buf[half, half + pending)
  uint64_t thr = kEmpty;  // values >= thr cannot enter (kEmpty until k values were kept)

  // Buffer size in values for a given k.
  __host__ __device__ static int half_for(int64_t k) {
    int h = 64;
    while (h < k) h <<= 1;
    return h;
  }

  __device__ static int lane() { return static_cast<int>(threadIdx.x & 31u); }

  __device__ void reset() {
    __syncwarp();  // earlier reads of the buffer (results) are done
    for (int i = lane(); i < half; i += 32) buf[i] = kEmpty;
    pending = 0;
    thr = kEmpty;
    __syncwarp();
  }

  // The key (high 32 bits, a non-negative float) of the k-th kept value; +inf while fewer than k
  // values are kept. Pruning bounds compare against it.
  __device__ float threshold_key() const {
    return thr == kEmpty ? __int_as_float(0x7f800000) : __uint_as_float(static_cast<uint32_t>(thr >> 32));
  }

  // Each lane offers v when `valid`.
  __device__ void offer(uint64_t v, bool valid) {
    const bool take = valid && v < thr;
    const unsigned mask = __ballot_sync(kFull, take);
    if (mask == 0u) return;
    if (take) buf[half + pending + __popc(mask & ((1u << lane()) - 1u))] = v;
    pending += __popc(mask);
    if (pending > half - 32) merge();  // the next offer (<= 32 values) must fit
  }

  // Folds the pending candidates into the kept half and updates the threshold.
  __device__ void merge() {
    if (pending == 0) return;
    const int ln = lane();
    __syncwarp();
    for (int i = half + pending + ln; i < 2 * half; i += 32) buf[i] = kEmpty;
    __syncwarp();
    // Bitonic sort of the candidate half, descending: [ascending kept | descending new] is then
    // one bitonic sequence.
    uint64_t* nb = buf + half;
    for (int size = 2; size <= half; size <<= 1) {
      for (int stride = size >> 1; stride > 0; stride >>= 1) {
        for (int i = ln; i < (half >> 1); i += 32) {
          const int a = 2 * i - (i & (stride - 1));
          const int b = a + stride;
          const bool desc = (a & size) == 0;
          const uint64_t x = nb[a], y = nb[b];
          if (desc ? (x < y) : (x > y)) {
            nb[a] = y;
            nb[b] = x;
          }
        }
        __syncwarp();
      }
    }
    // Bitonic merge of the whole buffer, ascending.
    for (int stride = half; stride > 0; stride >>= 1) {
      for (int i = ln; i < half; i += 32) {
        const int a = 2 * i - (i & (stride - 1));
        const int b = a + stride;
        const uint64_t x = buf[a], y = buf[b];
        if (x > y) {
          buf[a] = y;
          buf[b] = x;
        }
      }
      __syncwarp();
    }
    pending = 0;
    thr = buf[k - 1];
  }

  // After a final merge(): buf[0, k) holds the result, ascending, kEmpty where fewer than k values
  // were offered.
  __device__ const uint64_t* result() const { return buf; }
};

}  // namespace pcops::cuda::primitives
