// CUDA ragged kNN (torch_cluster's knn on CSR offsets, Euclidean or cosine) and nearest; bitwise
// equal to the CPU backend (src/cpu/knn_ragged.cpp): per query the min(k, n_b) smallest
// (key, index) of its cloud, key = s with NaN as +inf (Euclidean) or 1 - cos with NaN as +inf
// (cosine).
//
// E is known from the offsets, so there is no host synchronisation: allocate(E) is called first.
// Paths, chosen per cloud on the host (offsets are host memory):
// - Euclidean, 3-D, k <= 32, a cloud of >= 100k references queried densely (the dense kNN's rule,
//   detail::IndexRoute, PCOPS_CUDA_KNN_INDEX): a SpatialIndex of the cloud built for the call.
// - Euclidean, 3-D, cloud eligible for the dense kNN grid (src/cuda/knn.cu: >= 4096 references,
//   4k <= n, k <= 1024): the dense grid kernels through detail::knn_grid, all such clouds in one
//   pass (blockIdx.y = cloud), writing local indices straight into row 1 of the edges.
// - k <= 1024 otherwise (small clouds, any D, cosine): one launch over every query of every such
//   cloud, one warp per query scanning its cloud with primitives::WarpTopK.
// - k > 1024: per cloud, the (key, index) pairs of chunks of queries are radix-sorted (CUB) and
//   the first min(k, n_b) taken.
// A last pass turns local indices into global ones and writes row 0 (nearest: only the indices).
// Deterministic: no atomics.
#include <cub/cub.cuh>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/distance.hpp"
#include "cuda/common.cuh"
#include "cuda/knn_grid.hpp"
#include "cuda/primitives/ragged.cuh"
#include "cuda/primitives/warp_topk.cuh"
#include "pcops/error.hpp"
#include "pcops/knn.hpp"
#include "pcops/nearest.hpp"
#include "pcops/spatial_index.hpp"

namespace pcops::cuda {
namespace {

using primitives::cloud_of;
using primitives::FlatPoints;
using primitives::WarpTopK;

struct RaggedKnnPolicy {
  static constexpr int64_t kMaxWarpK = 1024;   // larger k: radix sort per chunk of queries
  static constexpr int kSmemPerBlock = 32768;  // WarpTopK buffers of one block
  static constexpr int kMaxWarpsPerBlock = 8;
  static constexpr int kThreads = 256;         // elementwise kernels
  static constexpr int64_t kSortBudgetItems = int64_t{1} << 24;  // keys per sort chunk (x16 bytes)
};

enum class Metric : int { kL2Dim3 = 0, kL2 = 1, kCosine = 2 };

// Total order of float keys as unsigned integers (finite and infinite values; NaN was mapped to
// +inf before). Keys are never -0.0: s is a sum of squares and 1 - c is +0.0 when exact.
__device__ __forceinline__ uint32_t ordered_key(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// sqrt(sum of squares) of a row, in coordinate order without FMA (the CPU's norm).
__device__ __forceinline__ float norm_of(const FlatPoints& p, int64_t i, int64_t D) {
  float n = 0.0f;
  for (int64_t d = 0; d < D; ++d) {
    const float a = p.at(i, d);
    n = common::add_rn(n, common::mul_rn(a, a));
  }
  return __fsqrt_rn(n);
}

// The ordering key of reference j for query i (the CPU's arithmetic, operation for operation).
// qn is the query's norm (cosine only).
template <Metric kM>
__device__ __forceinline__ uint32_t pair_key(const FlatPoints& q, int64_t i, float qx, float qy,
                                             float qz, float qn, const FlatPoints& r, int64_t j,
                                             int64_t D) {
  float key;
  if constexpr (kM == Metric::kL2Dim3) {
    key = common::squared_distance3(qx, qy, qz, r.at(j, 0), r.at(j, 1), r.at(j, 2));
  } else if constexpr (kM == Metric::kL2) {
    key = common::squared_distance(q.row(i), q.sd, r.row(j), r.sd, D);
  } else {
    float dot = 0.0f, nx = 0.0f;
    for (int64_t d = 0; d < D; ++d) {
      const float a = r.at(j, d), c = q.at(i, d);
      dot = common::add_rn(dot, common::mul_rn(a, c));
      nx = common::add_rn(nx, common::mul_rn(a, a));
    }
    key = __fsub_rn(1.0f, __fdiv_rn(dot, common::mul_rn(__fsqrt_rn(nx), qn)));
  }
  return ordered_key(common::knn_key(key));
}

// Per-cloud tables on the device (B + 1 offsets each).
struct Clouds {
  const int64_t* qoff;  // query rows
  const int64_t* roff;  // reference rows
  const int64_t* eoff;  // first output slot of the cloud
  const int8_t* mine;   // 1: this kernel's cloud (brute kernel only)
  int64_t B;
};

// One warp per query of the selected clouds (grid-stride over all query rows); lanes take
// consecutive references of the query's cloud. Writes local reference indices to out.
template <Metric kM>
__global__ void __launch_bounds__(256) brute_kernel(FlatPoints q, FlatPoints r, int64_t M,
                                                    int64_t D, Clouds cl, int64_t k, int half,
                                                    int64_t* __restrict__ out) {
  extern __shared__ uint64_t smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wpb = blockDim.x >> 5;
  WarpTopK top{smem + static_cast<int64_t>(warp) * 2 * half, half, static_cast<int>(k)};
  for (int64_t i = int64_t{blockIdx.x} * wpb + warp; i < M; i += int64_t{gridDim.x} * wpb) {
    const int64_t b = cloud_of(cl.qoff, cl.B, i);
    if (!cl.mine[b]) continue;
    const int64_t r0 = cl.roff[b], n = cl.roff[b + 1] - r0;
    const int64_t kk = n < k ? n : k;
    float qx = 0.0f, qy = 0.0f, qz = 0.0f, qn = 0.0f;
    if constexpr (kM == Metric::kL2Dim3) {
      qx = q.at(i, 0);
      qy = q.at(i, 1);
      qz = q.at(i, 2);
    }
    if constexpr (kM == Metric::kCosine) qn = norm_of(q, i, D);
    top.reset();
    for (int64_t j0 = 0; j0 < n; j0 += 32) {
      const int64_t j = j0 + lane;
      const bool valid = j < n;
      uint64_t v = 0;
      if (valid)
        v = (static_cast<uint64_t>(pair_key<kM>(q, i, qx, qy, qz, qn, r, r0 + j, D)) << 32) |
            static_cast<uint32_t>(j);
      top.offer(v, valid);
    }
    top.merge();
    const uint64_t* res = top.result();
    int64_t* o = out + cl.eoff[b] + (i - cl.qoff[b]) * kk;
    for (int64_t t = lane; t < kk; t += 32) o[t] = static_cast<int64_t>(res[t] & 0xFFFFFFFFu);
  }
}

// Large k: keys (ordered key << ib | j) of queries [m0, m0 + qc) of one cloud; one thread per pair.
template <Metric kM>
__global__ void sort_keys_kernel(FlatPoints q, FlatPoints r, int64_t D, int64_t q0, int64_t r0,
                                 int64_t qc, int64_t n, int ib, uint64_t* __restrict__ keys) {
  const int64_t total = qc * n;
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < total;
       t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t qi = t / n, j = t - qi * n, i = q0 + qi;
    float qx = 0.0f, qy = 0.0f, qz = 0.0f, qn = 0.0f;
    if constexpr (kM == Metric::kL2Dim3) {
      qx = q.at(i, 0);
      qy = q.at(i, 1);
      qz = q.at(i, 2);
    }
    if constexpr (kM == Metric::kCosine) qn = norm_of(q, i, D);
    keys[t] = (static_cast<uint64_t>(pair_key<kM>(q, i, qx, qy, qz, qn, r, r0 + j, D)) << ib) |
              static_cast<uint64_t>(j);
  }
}

// Segment s of a chunk is [s * n, (s + 1) * n); one thread per offset.
__global__ void segment_offsets_kernel(int* offsets, int64_t count, int64_t n) {
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t <= count;
       t += int64_t{gridDim.x} * blockDim.x)
    offsets[t] = static_cast<int>(t * n);
}

// The first kk sorted keys of each query of the chunk, as local indices; one thread per slot.
__global__ void sort_out_kernel(const uint64_t* __restrict__ keys, int64_t qc, int64_t n,
                                int64_t kk, int ib, int64_t* __restrict__ out) {
  const int64_t total = qc * kk;
  const uint64_t low = (uint64_t{1} << ib) - 1;
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < total;
       t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t qi = t / kk, c = t - qi * kk;
    out[t] = static_cast<int64_t>(keys[qi * n + c] & low);
  }
}

// Local to global: row1 += the cloud's first reference row; row0 (when given) = the query's
// global row. One thread per slot; the slot's cloud by binary search over the output offsets.
__global__ void globalize_kernel(Clouds cl, int64_t k, int64_t E, int64_t* __restrict__ row0,
                                 int64_t* __restrict__ row1) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < E;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = cloud_of(cl.eoff, cl.B, e);
    const int64_t n = cl.roff[b + 1] - cl.roff[b];
    const int64_t kk = n < k ? n : k;
    row1[e] += cl.roff[b];
    if (row0 != nullptr) row0[e] = cl.qoff[b] + (e - cl.eoff[b]) / kk;
  }
}

struct WarpLaunch {
  int half, warps;
  size_t smem;
};
WarpLaunch warp_launch(int64_t k) {
  WarpLaunch w;
  w.half = WarpTopK::half_for(k);
  const int per_warp = 2 * w.half * static_cast<int>(sizeof(uint64_t));
  w.warps = std::clamp(RaggedKnnPolicy::kSmemPerBlock / per_warp, 1, RaggedKnnPolicy::kMaxWarpsPerBlock);
  w.smem = static_cast<size_t>(w.warps) * per_warp;
  return w;
}

template <Metric kM>
void launch_brute(const CudaContext& ctx, const FlatPoints& q, const FlatPoints& r, int64_t M,
                  int64_t D, const Clouds& cl, int64_t k, int64_t* out) {
  const WarpLaunch wl = warp_launch(k);
  detail::launch(ctx, brute_kernel<kM>,
                 dim3(static_cast<unsigned>(primitives::blocks_for(M, wl.warps))),
                 dim3(32 * wl.warps), wl.smem, q, r, M, D, cl, k, wl.half, out);
}

// Large k, one cloud: queries [q0, q0 + m), references [r0, r0 + n), output rows of kk = min(k, n).
template <Metric kM>
void sort_cloud(const CudaContext& ctx, const FlatPoints& q, const FlatPoints& r, int64_t D,
                int64_t q0, int64_t m, int64_t r0, int64_t n, int64_t kk, int64_t* out) {
  const cudaStream_t stream = detail::stream_of(ctx);
  constexpr int T = RaggedKnnPolicy::kThreads;
  detail::Workspace ws(ctx);
  int ib = 1;
  while ((int64_t{1} << ib) < n) ++ib;  // index bits
  const int end_bit = 32 + ib;
  const bool segmented = n <= (int64_t{1} << 30);
  const int64_t qc_max =
      segmented ? std::clamp<int64_t>(RaggedKnnPolicy::kSortBudgetItems / n, 1, m) : 1;
  uint64_t* keys = ws.alloc<uint64_t>(qc_max * n);
  uint64_t* sorted = ws.alloc<uint64_t>(qc_max * n);
  int* offsets = segmented ? ws.alloc<int>(qc_max + 1) : nullptr;
  if (segmented)
    detail::launch(ctx, segment_offsets_kernel,
                   dim3(static_cast<unsigned>(primitives::blocks_for(qc_max + 1, T))), dim3(T), 0,
                   offsets, qc_max, n);
  size_t have = 0;
  void* temp = nullptr;
  for (int64_t m0 = 0; m0 < m; m0 += qc_max) {
    const int64_t qc = std::min(qc_max, m - m0);
    detail::launch(ctx, sort_keys_kernel<kM>,
                   dim3(static_cast<unsigned>(primitives::blocks_for(qc * n, T))), dim3(T), 0, q, r,
                   D, q0 + m0, r0, qc, n, ib, keys);
    size_t need = 0;
    if (segmented)
      PCOPS_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortKeys(
          nullptr, need, keys, sorted, static_cast<int>(qc * n), static_cast<int>(qc), offsets,
          offsets + 1, 0, end_bit, stream));
    else
      PCOPS_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(nullptr, need, keys, sorted, n, 0, end_bit, stream));
    if (need > have || temp == nullptr) {
      temp = ws.bytes(need);
      have = need;
    }
    if (segmented)
      PCOPS_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortKeys(
          temp, need, keys, sorted, static_cast<int>(qc * n), static_cast<int>(qc), offsets,
          offsets + 1, 0, end_bit, stream));
    else
      PCOPS_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(temp, need, keys, sorted, n, 0, end_bit, stream));
    detail::launch(ctx, sort_out_kernel,
                   dim3(static_cast<unsigned>(primitives::blocks_for(qc * kk, T))), dim3(T), 0,
                   sorted, qc, n, kk, ib, out + m0 * kk);
  }
}

// The shared core: for every query row of `qv` (cloud b by qptr), the local indices of its
// min(k, n_b) nearest rows of `rv` (cloud b by rptr), at out[eoff[b] + m * kk_b + c]; then made
// global (row0 written when not null). eoff: host output offsets (B + 1).
void ragged_select(const CudaContext& ctx, const RaggedPointsView& rv, const RaggedPointsView& qv,
                   const OffsetsView& rptr, const OffsetsView& qptr, const std::vector<int64_t>& eoff,
                   int64_t k, bool cosine, int64_t* row0, int64_t* row1) {
  const int64_t B = rptr.batch(), D = rv.dim, E = eoff[static_cast<size_t>(B)];
  const FlatPoints q = primitives::flat_points(qv), r = primitives::flat_points(rv);
  const Metric metric = cosine ? Metric::kCosine : (D == 3 ? Metric::kL2Dim3 : Metric::kL2);
  detail::Workspace ws(ctx);
  const std::vector<int64_t> qoff(qptr.data, qptr.data + B + 1), roff(rptr.data, rptr.data + B + 1);
  Clouds cl{primitives::upload(ctx, ws, qoff), primitives::upload(ctx, ws, roff),
            primitives::upload(ctx, ws, eoff), nullptr, B};

  if (k > RaggedKnnPolicy::kMaxWarpK) {
    for (int64_t b = 0; b < B; ++b) {
      const int64_t n = rptr.length(b), m = qptr.length(b);
      if (n == 0 || m == 0) continue;
      const int64_t kk = std::min(k, n);
      int64_t* out = row1 + eoff[static_cast<size_t>(b)];
      if (metric == Metric::kCosine)
        sort_cloud<Metric::kCosine>(ctx, q, r, D, qptr.begin(b), m, rptr.begin(b), n, kk, out);
      else if (metric == Metric::kL2Dim3)
        sort_cloud<Metric::kL2Dim3>(ctx, q, r, D, qptr.begin(b), m, rptr.begin(b), n, kk, out);
      else
        sort_cloud<Metric::kL2>(ctx, q, r, D, qptr.begin(b), m, rptr.begin(b), n, kk, out);
    }
  } else {
    std::vector<int8_t> brute(static_cast<size_t>(std::max<int64_t>(B, 1)), 0);
    std::vector<detail::KnnGridCloud> grid;
    bool any_brute = false;
    const detail::IndexRoute index_route("PCOPS_CUDA_KNN_INDEX");
    for (int64_t b = 0; b < B; ++b) {
      const int64_t n = rptr.length(b), m = qptr.length(b);
      if (n == 0 || m == 0) continue;
      if (!cosine && D == 3 && n >= k && index_route(k, m, n)) {
        // The dense kNN's index route, per cloud: a SpatialIndex of this cloud built for the call,
        // its k local indices per query written straight into row 1 (n >= k: rows of k slots).
        const CudaContext c = detail::stream_ordered(ctx);
        SpatialIndex index;
        index.build(c, primitives::cloud_points(rv, rptr.begin(b), n), LengthsView{}, SpatialIndexParams{});
        index.knn(c, primitives::cloud_points(qv, qptr.begin(b), m), LengthsView{}, k, ws.alloc<float>(m * k),
                  row1 + eoff[static_cast<size_t>(b)]);
        continue;
      }
      if (!cosine && detail::knn_grid_eligible(D, n, k)) {
        // Eligible clouds have n >= 4k, so their rows hold exactly k slots.
        grid.push_back(detail::KnnGridCloud{qptr.begin(b) * qv.stride_point,
                                            rptr.begin(b) * rv.stride_point, n, m,
                                            eoff[static_cast<size_t>(b)]});
      } else {
        brute[static_cast<size_t>(b)] = 1;
        any_brute = true;
      }
    }
    if (any_brute) {
      cl.mine = primitives::upload(ctx, ws, brute);
      const int64_t M = qv.count;
      if (metric == Metric::kCosine) launch_brute<Metric::kCosine>(ctx, q, r, M, D, cl, k, row1);
      else if (metric == Metric::kL2Dim3) launch_brute<Metric::kL2Dim3>(ctx, q, r, M, D, cl, k, row1);
      else launch_brute<Metric::kL2>(ctx, q, r, M, D, cl, k, row1);
    }
    if (!grid.empty()) {
      // The grid kernels also write distances; the ragged result has none.
      float* dist = ws.alloc<float>(E);
      const PointsView qd{qv.data, 1, qv.count, D, 0, qv.stride_point, qv.stride_dim};
      const PointsView rd{rv.data, 1, rv.count, D, 0, rv.stride_point, rv.stride_dim};
      detail::knn_grid(ctx, qd, rd, grid, k, dist, row1);
    }
  }
  constexpr int T = RaggedKnnPolicy::kThreads;
  detail::launch(ctx, globalize_kernel, dim3(static_cast<unsigned>(primitives::blocks_for(E, T))),
                 dim3(T), 0, cl, k, E, row0, row1);
}

}  // namespace

int64_t knn_ragged(const CudaContext& ctx, RaggedPointsView x, RaggedPointsView y, OffsetsView ptr_x,
                   OffsetsView ptr_y, const KnnRaggedParams& params, const EdgeAllocator& allocate) {
  core::validate_knn_ragged(x, y, ptr_x, ptr_y, params);
  const int64_t B = ptr_x.batch(), k = params.k;
  std::vector<int64_t> e0(static_cast<size_t>(B) + 1, 0);
  for (int64_t b = 0; b < B; ++b)
    e0[b + 1] = e0[b] + ptr_y.length(b) * std::min(k, ptr_x.length(b));
  const int64_t E = e0[static_cast<size_t>(B)];
  int64_t* edges = allocate(E);
  if (E == 0) return 0;
  for (int64_t b = 0; b < B; ++b)
    PCOPS_CHECK(ptr_x.length(b) <= int64_t{0xFFFFFFFF}, Value,
                "x: at most 2^32 - 1 points per cloud are supported, got ", ptr_x.length(b),
                " in cloud ", b);
  ragged_select(ctx, x, y, ptr_x, ptr_y, e0, k, params.cosine, edges, edges + E);
  return E;
}

void nearest(const CudaContext& ctx, RaggedPointsView x, RaggedPointsView y, OffsetsView ptr_x,
             OffsetsView ptr_y, int64_t* out) {
  core::validate_nearest(x, y, ptr_x, ptr_y);
  const int64_t B = ptr_x.batch();
  if (x.count == 0) return;
  for (int64_t b = 0; b < B; ++b)
    PCOPS_CHECK(ptr_y.length(b) <= int64_t{0xFFFFFFFF}, Value,
                "y: at most 2^32 - 1 points per cloud are supported, got ", ptr_y.length(b),
                " in cloud ", b);
  // x is the query side: the kNN with k = 1 and y as the references; row b of the output starts
  // at ptr_x[b] (every cloud with x rows has y rows, so one slot per x row).
  const std::vector<int64_t> e0(ptr_x.data, ptr_x.data + B + 1);
  ragged_select(ctx, y, x, ptr_y, ptr_x, e0, 1, false, nullptr, out);
}

}  // namespace pcops::cuda
