// CPU grid_cluster (torch_cluster / pyg-lib ids, see include/pcops/grid_cluster.hpp).
// Parallel decomposition: points, in chunks.
#include "pcops/grid_cluster.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace pcops::cpu {
namespace {

// torch's float -> int64 conversion on x86 (cvttsd2si): truncation, INT64_MIN when out of range
// or NaN.
template <class T>
int64_t to_int64(T v) {
  const double d = static_cast<double>(v);
  if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0))
    return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(d);
}

// Two's-complement wrapping arithmetic, as torch's int64 tensors.
inline int64_t wrap_mul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}
inline int64_t wrap_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}

template <class T>
void grid_cluster_impl(const CpuContext& ctx, const T* pos, int64_t N, int64_t D, const T* size,
                       const T* start_in, const T* end_in, int64_t* out) {
  core::validate_grid_cluster(N, D);
  if (N == 0) return;
  std::vector<T> start(static_cast<size_t>(D)), end(static_cast<size_t>(D));
  for (int64_t d = 0; d < D; ++d) {
    if (start_in) start[d] = start_in[d];
    if (end_in) end[d] = end_in[d];
  }
  if (!start_in || !end_in) {
    // torch's min / max reductions: NaN propagates.
    for (int64_t d = 0; d < D; ++d) {
      T lo = pos[d], hi = pos[d];
      for (int64_t n = 1; n < N; ++n) {
        const T v = pos[n * D + d];
        if (v != v || lo != lo) lo = (v != v) ? v : lo;
        else lo = std::min(lo, v);
        if (v != v || hi != hi) hi = (v != v) ? v : hi;
        else hi = std::max(hi, v);
      }
      if (!start_in) start[d] = lo;
      if (!end_in) end[d] = hi;
    }
  }
  std::vector<int64_t> stride(static_cast<size_t>(D));
  int64_t acc = 1;
  for (int64_t d = 0; d < D; ++d) {
    stride[d] = acc;
    const T q = static_cast<T>(end[d] - start[d]) / size[d];
    acc = wrap_mul(acc, wrap_add(to_int64(q), 1));
  }
  parallel_for(ctx, 0, N, 4096, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      int64_t id = 0;
      for (int64_t d = 0; d < D; ++d) {
        const T q = static_cast<T>(pos[n * D + d] - start[d]) / size[d];
        id = wrap_add(id, wrap_mul(to_int64(q), stride[d]));
      }
      out[n] = id;
    }
  });
}

}  // namespace

void grid_cluster(const CpuContext& ctx, const float* pos, int64_t count, int64_t dim,
                  const float* size, const float* start, const float* end, int64_t* out) {
  grid_cluster_impl(ctx, pos, count, dim, size, start, end, out);
}

void grid_cluster(const CpuContext& ctx, const double* pos, int64_t count, int64_t dim,
                  const double* size, const double* start, const double* end, int64_t* out) {
  grid_cluster_impl(ctx, pos, count, dim, size, start, end, out);
}

}  // namespace pcops::cpu
