// IVF-PQ index, CPU backend (contract: include/pcops/ivfpq.hpp).
//
// Hot loops: distances from one vector to many columns (coarse centroids, codewords) run over a
// transposed [dim, columns] layout, blocked by kBlock columns so every block's accumulators stay in
// vector registers and each column keeps the contract's coordinate order (vectorised across
// columns, never within a sum). AVX-512 or AVX2 intrinsics (chosen at run time) or scalar code,
// never a fused multiply-add (the AVX-512 kernels issue some additions as fma(p, 1, acc), which
// rounds once, as the addition does): all compute the same bits.
// Search parallelises over queries, add/encode over vectors, k-means assignment over points.
#include "pcops/ivfpq.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <mutex>
#include <fstream>
#include <istream>
#include <limits>
#include <ostream>
#include <random>
#include <type_traits>
#include <utility>

#include "cpu/ivfpq_isa.hpp"
#include "pcops/error.hpp"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define PCOPS_IVFPQ_X86 1
#else
#define PCOPS_IVFPQ_X86 0
#endif

namespace pcops {
namespace {

constexpr int64_t kBlock = 16;
constexpr int64_t kTableBatch = 4;  // residual tables built at once by the search
constexpr int64_t kBoundTerms = 4;  // terms of each code summed before the bounded scan's test
constexpr int64_t kCodeBlock = 64;  // vectors per block of the sub-quantizer-major code copy
constexpr int64_t kK = IvfPqIndex::kCodewords;

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// out[j] = squared distance (contract order) between x [d] and column j of cT [d, stride],
// for every j < stride (stride a multiple of kBlock). Scalar version.
void l2_columns_generic(const float* x, int64_t d, const float* cT, int64_t stride, float* out) {
  for (int64_t j0 = 0; j0 < stride; j0 += kBlock) {
    float acc[kBlock];
    const float* col = cT + j0;
    const float x0 = x[0];
    for (int64_t j = 0; j < kBlock; ++j) {
      const float t = x0 - col[j];
      acc[j] = t * t;
    }
    for (int64_t i = 1; i < d; ++i) {
      const float xi = x[i];
      const float* row = col + i * stride;
      for (int64_t j = 0; j < kBlock; ++j) {
        const float t = xi - row[j];
        acc[j] = acc[j] + t * t;
      }
    }
    for (int64_t j = 0; j < kBlock; ++j) out[j0 + j] = acc[j];
  }
}

// out[j] = inner product (coordinate order) of x [d] with column j of cT [d, stride].
void ip_columns_generic(const float* x, int64_t d, const float* cT, int64_t stride, float* out) {
  for (int64_t j0 = 0; j0 < stride; j0 += kBlock) {
    float acc[kBlock];
    const float* col = cT + j0;
    const float x0 = x[0];
    for (int64_t j = 0; j < kBlock; ++j) acc[j] = x0 * col[j];
    for (int64_t i = 1; i < d; ++i) {
      const float xi = x[i];
      const float* row = col + i * stride;
      for (int64_t j = 0; j < kBlock; ++j) acc[j] = acc[j] + xi * row[j];
    }
    for (int64_t j = 0; j < kBlock; ++j) out[j0 + j] = acc[j];
  }
}

#if PCOPS_IVFPQ_X86
// The same arithmetic with AVX2 (separate multiply and add: no FMA), 16 columns per step.
__attribute__((target("avx2"))) void l2_columns_avx2(const float* x, int64_t d, const float* cT, int64_t stride,
                                                      float* out) {
  for (int64_t j0 = 0; j0 < stride; j0 += kBlock) {
    const float* col = cT + j0;
    __m256 xi = _mm256_set1_ps(x[0]);
    __m256 t0 = _mm256_sub_ps(xi, _mm256_loadu_ps(col));
    __m256 t1 = _mm256_sub_ps(xi, _mm256_loadu_ps(col + 8));
    __m256 a0 = _mm256_mul_ps(t0, t0), a1 = _mm256_mul_ps(t1, t1);
    for (int64_t i = 1; i < d; ++i) {
      const float* row = col + i * stride;
      xi = _mm256_set1_ps(x[i]);
      t0 = _mm256_sub_ps(xi, _mm256_loadu_ps(row));
      t1 = _mm256_sub_ps(xi, _mm256_loadu_ps(row + 8));
      a0 = _mm256_add_ps(a0, _mm256_mul_ps(t0, t0));
      a1 = _mm256_add_ps(a1, _mm256_mul_ps(t1, t1));
    }
    _mm256_storeu_ps(out + j0, a0);
    _mm256_storeu_ps(out + j0 + 8, a1);
  }
}

__attribute__((target("avx2"))) void ip_columns_avx2(const float* x, int64_t d, const float* cT, int64_t stride,
                                                      float* out) {
  for (int64_t j0 = 0; j0 < stride; j0 += kBlock) {
    const float* col = cT + j0;
    __m256 xi = _mm256_set1_ps(x[0]);
    __m256 a0 = _mm256_mul_ps(xi, _mm256_loadu_ps(col)), a1 = _mm256_mul_ps(xi, _mm256_loadu_ps(col + 8));
    for (int64_t i = 1; i < d; ++i) {
      const float* row = col + i * stride;
      xi = _mm256_set1_ps(x[i]);
      a0 = _mm256_add_ps(a0, _mm256_mul_ps(xi, _mm256_loadu_ps(row)));
      a1 = _mm256_add_ps(a1, _mm256_mul_ps(xi, _mm256_loadu_ps(row + 8)));
    }
    _mm256_storeu_ps(out + j0, a0);
    _mm256_storeu_ps(out + j0 + 8, a1);
  }
}

// Four vectors x[0..3] (row stride xs) against the same columns: out[r * stride + j]. Each
// (vector, column) sum is the single-vector one, so the bits are too; the column loads are shared.
__attribute__((target("avx2"))) void columns4_avx2(const float* x, int64_t xs, int64_t d, const float* cT,
                                                    int64_t stride, bool ip, float* out, int64_t os) {
  for (int64_t j0 = 0; j0 < stride; j0 += kBlock) {
    const float* col = cT + j0;
    __m256 a[4][2];
    {
      const __m256 c0 = _mm256_loadu_ps(col), c1 = _mm256_loadu_ps(col + 8);
      for (int r = 0; r < 4; ++r) {
        const __m256 xi = _mm256_set1_ps(x[r * xs]);
        if (ip) {
          a[r][0] = _mm256_mul_ps(xi, c0);
          a[r][1] = _mm256_mul_ps(xi, c1);
        } else {
          const __m256 t0 = _mm256_sub_ps(xi, c0), t1 = _mm256_sub_ps(xi, c1);
          a[r][0] = _mm256_mul_ps(t0, t0);
          a[r][1] = _mm256_mul_ps(t1, t1);
        }
      }
    }
    for (int64_t i = 1; i < d; ++i) {
      const float* row = col + i * stride;
      const __m256 c0 = _mm256_loadu_ps(row), c1 = _mm256_loadu_ps(row + 8);
      for (int r = 0; r < 4; ++r) {
        const __m256 xi = _mm256_set1_ps(x[r * xs + i]);
        if (ip) {
          a[r][0] = _mm256_add_ps(a[r][0], _mm256_mul_ps(xi, c0));
          a[r][1] = _mm256_add_ps(a[r][1], _mm256_mul_ps(xi, c1));
        } else {
          const __m256 t0 = _mm256_sub_ps(xi, c0), t1 = _mm256_sub_ps(xi, c1);
          a[r][0] = _mm256_add_ps(a[r][0], _mm256_mul_ps(t0, t0));
          a[r][1] = _mm256_add_ps(a[r][1], _mm256_mul_ps(t1, t1));
        }
      }
    }
    for (int r = 0; r < 4; ++r) {
      _mm256_storeu_ps(out + r * os + j0, a[r][0]);
      _mm256_storeu_ps(out + r * os + j0 + 8, a[r][1]);
    }
  }
}

// AVX-512 kernels. R vectors x[r * xs] against the same columns (their loads shared), out[r * os +
// j]; each (vector, column) sum is the single-vector one: coordinate order, separate multiply and
// add. Every other accumulation is issued as fma(p, 1, acc): p * 1 is exact, so its one rounding is
// that of the addition acc + p and the bits are the same, while the additions share the FMA pipes
// with the multiplications (otherwise the two add pipes bound these loops: a subtraction and an
// addition per term).
template <int R, int W, bool kIp>
__attribute__((target("avx512f"))) inline void multi_block_avx512(const float* x, int64_t xs, int64_t d,
                                                                   const float* col, int64_t stride, float* out,
                                                                   int64_t os) {
  const __m512 one = _mm512_set1_ps(1.0f);
  __m512 a[R][W];
  {
    __m512 c[W];
    for (int w = 0; w < W; ++w) c[w] = _mm512_loadu_ps(col + 16 * w);
    for (int r = 0; r < R; ++r) {
      const __m512 xi = _mm512_set1_ps(x[r * xs]);
      for (int w = 0; w < W; ++w) {
        if (kIp) {
          a[r][w] = _mm512_mul_ps(xi, c[w]);
        } else {
          const __m512 t = _mm512_sub_ps(xi, c[w]);
          a[r][w] = _mm512_mul_ps(t, t);
        }
      }
    }
  }
  for (int64_t i = 1; i < d; ++i) {
    const float* row = col + i * stride;
    __m512 c[W];
    for (int w = 0; w < W; ++w) c[w] = _mm512_loadu_ps(row + 16 * w);
    for (int r = 0; r < R; ++r) {
      const __m512 xi = _mm512_set1_ps(x[r * xs + i]);
      for (int w = 0; w < W; ++w) {
        __m512 p;
        if (kIp) {
          p = _mm512_mul_ps(xi, c[w]);
        } else {
          const __m512 t = _mm512_sub_ps(xi, c[w]);
          p = _mm512_mul_ps(t, t);
        }
        a[r][w] = ((r * W + w + i) & 1) ? _mm512_fmadd_ps(p, one, a[r][w]) : _mm512_add_ps(a[r][w], p);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int w = 0; w < W; ++w) _mm512_storeu_ps(out + r * os + 16 * w, a[r][w]);
}

// All columns of cT [d, stride] (stride a multiple of 16), 64 per step.
template <int R, bool kIp>
__attribute__((target("avx512f"))) void multi_avx512(const float* x, int64_t xs, int64_t d, const float* cT,
                                                      int64_t stride, float* out, int64_t os) {
  int64_t j0 = 0;
  for (; j0 + 64 <= stride; j0 += 64) multi_block_avx512<R, 4, kIp>(x, xs, d, cT + j0, stride, out + j0, os);
  for (; j0 < stride; j0 += 16) multi_block_avx512<R, 1, kIp>(x, xs, d, cT + j0, stride, out + j0, os);
}

// L2 with d = kD small (the sub-quantizers' dsub): the R vectors' coordinates are broadcast once,
// then 16 columns per step.
template <int R, int kD>
__attribute__((target("avx512f"))) void l2_small_avx512(const float* x, int64_t xs, const float* cT, int64_t stride,
                                                         float* out, int64_t os) {
  const __m512 one = _mm512_set1_ps(1.0f);
  __m512 xb[R][kD];
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < kD; ++i) xb[r][i] = _mm512_set1_ps(x[r * xs + i]);
  for (int64_t j0 = 0; j0 < stride; j0 += 16) {
    const float* col = cT + j0;
    __m512 a[R];
    {
      const __m512 c = _mm512_loadu_ps(col);
      for (int r = 0; r < R; ++r) {
        const __m512 t = _mm512_sub_ps(xb[r][0], c);
        a[r] = _mm512_mul_ps(t, t);
      }
    }
    for (int i = 1; i < kD; ++i) {
      const __m512 c = _mm512_loadu_ps(col + i * stride);
      for (int r = 0; r < R; ++r) {
        const __m512 t = _mm512_sub_ps(xb[r][i], c);
        const __m512 p = _mm512_mul_ps(t, t);
        a[r] = ((r + i) & 1) ? _mm512_fmadd_ps(p, one, a[r]) : _mm512_add_ps(a[r], p);
      }
    }
    for (int r = 0; r < R; ++r) _mm512_storeu_ps(out + r * os + j0, a[r]);
  }
}

template <int R>
void l2_many_avx512(const float* x, int64_t xs, int64_t d, const float* cT, int64_t stride, float* out, int64_t os) {
  switch (d) {
    case 1: return l2_small_avx512<R, 1>(x, xs, cT, stride, out, os);
    case 2: return l2_small_avx512<R, 2>(x, xs, cT, stride, out, os);
    case 4: return l2_small_avx512<R, 4>(x, xs, cT, stride, out, os);
    case 8: return l2_small_avx512<R, 8>(x, xs, cT, stride, out, os);
    default: return multi_avx512<R, false>(x, xs, d, cT, stride, out, os);
  }
}

std::atomic<bool> g_force_scalar{false};
std::atomic<bool> g_force_avx2{false};

bool has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes && !g_force_scalar.load(std::memory_order_relaxed);
}

bool has_avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f");
  return yes && !g_force_scalar.load(std::memory_order_relaxed) && !g_force_avx2.load(std::memory_order_relaxed);
}
#endif

void l2_columns(const float* x, int64_t d, const float* cT, int64_t stride, float* out) {
#if PCOPS_IVFPQ_X86
  if (has_avx2()) return l2_columns_avx2(x, d, cT, stride, out);
#endif
  l2_columns_generic(x, d, cT, stride, out);
}

void ip_columns(const float* x, int64_t d, const float* cT, int64_t stride, float* out) {
#if PCOPS_IVFPQ_X86
  if (has_avx2()) return ip_columns_avx2(x, d, cT, stride, out);
#endif
  ip_columns_generic(x, d, cT, stride, out);
}

// Columns of a row-major [n, d] matrix as a transposed [d, stride] one (stride = n rounded up
// to kBlock; padding columns are copies of column 0, never selected since ties go to the smaller
// column and only the first n are read).
struct Columns {
  int64_t n = 0, d = 0, stride = 0;
  std::vector<float> t;
  Columns() = default;
  Columns(const float* rows, int64_t n_, int64_t d_) : n(n_), d(d_), stride(round_up(n_, kBlock)) {
    t.assign(static_cast<size_t>(d * stride), 0.0f);
    for (int64_t j = 0; j < stride; ++j) {
      const float* r = rows + (j < n ? j : 0) * d;
      for (int64_t i = 0; i < d; ++i) t[static_cast<size_t>(i * stride + j)] = r[i];
    }
  }
  void distances(const float* x, bool ip, float* out) const {
#if PCOPS_IVFPQ_X86
    if (has_avx512()) return distances_upto4(x, 0, 1, ip, out);
#endif
    (ip ? ip_columns : l2_columns)(x, d, t.data(), stride, out);
  }
  // distances() of `count` <= 4 vectors (rows of stride xs) into out[r * os] (os: stride when
  // omitted); vectors at once share the column loads (the same bits as one at a time).
  void distances_upto4(const float* x, int64_t xs, int64_t count, bool ip, float* out, int64_t os = 0) const {
    if (os == 0) os = stride;
#if PCOPS_IVFPQ_X86
    if (has_avx512()) {
      // The coarse table (large d) four vectors at a time; small d (the sub-quantizers): broadcast
      // coordinates.
      const float* c = t.data();
      if (ip) {
        switch (count) {
          case 4: return multi_avx512<4, true>(x, xs, d, c, stride, out, os);
          case 3: return multi_avx512<3, true>(x, xs, d, c, stride, out, os);
          case 2: return multi_avx512<2, true>(x, xs, d, c, stride, out, os);
          case 1: return multi_avx512<1, true>(x, xs, d, c, stride, out, os);
          default: return;
        }
      }
      switch (count) {
        case 4: return l2_many_avx512<4>(x, xs, d, c, stride, out, os);
        case 3: return l2_many_avx512<3>(x, xs, d, c, stride, out, os);
        case 2: return l2_many_avx512<2>(x, xs, d, c, stride, out, os);
        case 1: return l2_many_avx512<1>(x, xs, d, c, stride, out, os);
        default: return;
      }
    }
    if (count == 4 && has_avx2()) return columns4_avx2(x, xs, d, t.data(), stride, ip, out, os);
#endif
    for (int64_t r = 0; r < count; ++r) distances(x + r * xs, ip, out + r * os);
  }
  int64_t best_of(const float* dist, bool ip) const {
    int64_t best = 0;
    float bv = dist[0];
    for (int64_t j = 1; j < n; ++j) {
      const float v = dist[j];
      if (ip ? v > bv : v < bv) {
        bv = v;
        best = j;
      }
    }
    return best;
  }
  // The best column: smallest distance (largest inner product), smallest column on ties.
  int64_t nearest(const float* x, bool ip, float* scratch) const {
    distances(x, ip, scratch);
    return best_of(scratch, ip);
  }
  // nearest() of `count` vectors (rows of stride xs) into out; scratch holds 4 * stride floats.
  void nearest_many(const float* x, int64_t xs, int64_t count, bool ip, float* scratch, int64_t* out) const {
    for (int64_t i = 0; i < count; i += 4) {
      const int64_t nb = std::min<int64_t>(4, count - i);
      distances_upto4(x + i * xs, xs, nb, ip, scratch);
      for (int64_t r = 0; r < nb; ++r) out[i + r] = best_of(scratch + r * stride, ip);
    }
  }
};

// Deterministic bounded draw (std::mt19937_64 is specified bit for bit by the standard; the
// distributions are not, so none is used).
uint64_t draw(std::mt19937_64& rng, uint64_t bound) { return rng() % bound; }

// k distinct indices out of [0, n) (partial Fisher-Yates).
std::vector<int64_t> sample_indices(int64_t n, int64_t k, uint64_t seed) {
  std::vector<int64_t> perm(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) perm[static_cast<size_t>(i)] = i;
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < k; ++i) {
    const int64_t j = i + static_cast<int64_t>(draw(rng, static_cast<uint64_t>(n - i)));
    std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
  }
  perm.resize(static_cast<size_t>(k));
  return perm;
}

uint64_t mix_seed(uint64_t seed, uint64_t salt) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (salt + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Lloyd k-means on data [n, d] (n >= k), returns centroids [k, d]. Assignment in parallel;
// the update is a serial float64 sum in point order, so the result does not depend on threads.
std::vector<float> kmeans(const IvfPqIndex::AssignFn& assign_fn, const float* data, int64_t n, int64_t d, int64_t k,
                          bool ip, const IvfPqTrainParams& tp, uint64_t seed) {
  std::vector<float> cent(static_cast<size_t>(k * d));
  const std::vector<int64_t> init = sample_indices(n, k, mix_seed(seed, 1));
  for (int64_t c = 0; c < k; ++c)
    std::memcpy(&cent[static_cast<size_t>(c * d)], data + init[static_cast<size_t>(c)] * d,
                sizeof(float) * static_cast<size_t>(d));
  std::vector<int64_t> assign(static_cast<size_t>(n));
  std::vector<double> sums(static_cast<size_t>(k * d));
  std::vector<int64_t> counts(static_cast<size_t>(k));
  for (int64_t it = 0; it < tp.niter; ++it) {
    assign_fn(data, n, d, cent.data(), k, ip, assign.data());
    std::fill(sums.begin(), sums.end(), 0.0);
    std::fill(counts.begin(), counts.end(), 0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t c = assign[static_cast<size_t>(i)];
      ++counts[static_cast<size_t>(c)];
      double* s = &sums[static_cast<size_t>(c * d)];
      const float* x = data + i * d;
      for (int64_t j = 0; j < d; ++j) s[j] += x[j];
    }
    for (int64_t c = 0; c < k; ++c) {
      const int64_t cnt = counts[static_cast<size_t>(c)];
      if (cnt == 0) continue;
      for (int64_t j = 0; j < d; ++j)
        cent[static_cast<size_t>(c * d + j)] = static_cast<float>(sums[static_cast<size_t>(c * d + j)] / double(cnt));
    }
    // Empty clusters: split the largest (first on ties) into two perturbed copies.
    constexpr float kEps = 1.0f / 1024.0f;
    for (int64_t c = 0; c < k; ++c) {
      if (counts[static_cast<size_t>(c)] != 0) continue;
      int64_t big = 0;
      for (int64_t j = 1; j < k; ++j)
        if (counts[static_cast<size_t>(j)] > counts[static_cast<size_t>(big)]) big = j;
      for (int64_t j = 0; j < d; ++j) {
        const float v = cent[static_cast<size_t>(big * d + j)];
        const float delta = (j % 2 == 0 ? kEps : -kEps);
        cent[static_cast<size_t>(c * d + j)] = v * (1.0f + delta);
        cent[static_cast<size_t>(big * d + j)] = v * (1.0f - delta);
      }
      const int64_t half = counts[static_cast<size_t>(big)] / 2;
      counts[static_cast<size_t>(c)] = half;
      counts[static_cast<size_t>(big)] -= half;
    }
  }
  return cent;
}

// Ranking key: smaller is better. IP negates (exact); NaN ranks last; zero is canonical (+0),
// which the CUDA backend's radix sort needs and the comparisons here do not notice.
inline float rank_key(float v, bool ip) {
  const float k = ip ? -v : v;
  if (k != k) return std::numeric_limits<float>::infinity();
  return k == 0.0f ? 0.0f : k;
}

struct Candidate {
  float key;
  int64_t id;
};
// Heap order, worst on top (a function object: the heap algorithms inline it).
constexpr auto worse_than = [](const Candidate& a, const Candidate& b) {
  return a.key < b.key || (a.key == b.key && a.id < b.id);
};

// Adds the table terms of bytes [0, kBytes) of the words w0..w3 (codewords kFirst .. kFirst +
// kBytes - 1 of four codes; lut points at sub-quantizer kFirst) to the four running sums, each in
// codeword order.
template <int kBytes, class W>
inline void add_terms4(W w0, W w1, W w2, W w3, const float* lut, float& s0, float& s1, float& s2, float& s3) {
  for (int j = 0; j < kBytes; ++j) {
    const float* lm = lut + j * kK;
    s0 = s0 + lm[(w0 >> (8 * j)) & 0xFF];
    s1 = s1 + lm[(w1 >> (8 * j)) & 0xFF];
    s2 = s2 + lm[(w2 >> (8 * j)) & 0xFF];
    s3 = s3 + lm[(w3 >> (8 * j)) & 0xFF];
  }
}

// The rest of four codes' sums, codewords kP .. kM - 1 (s0..s3 hold the sums of the first kP).
template <int64_t kM, int64_t kP>
inline void finish4(const uint8_t* c0, const uint8_t* c1, const uint8_t* c2, const uint8_t* c3, const float* lut,
                    float& s0, float& s1, float& s2, float& s3) {
  static_assert(kP == 4 || kP % 8 == 0);
  int64_t m = kP;
  if constexpr (kP % 8 == 4) {
    uint32_t w0, w1, w2, w3;
    std::memcpy(&w0, c0 + 4, 4);
    std::memcpy(&w1, c1 + 4, 4);
    std::memcpy(&w2, c2 + 4, 4);
    std::memcpy(&w3, c3 + 4, 4);
    add_terms4<4>(w0, w1, w2, w3, lut + 4 * kK, s0, s1, s2, s3);
    m = 8;
  }
  for (; m < kM; m += 8) {
    uint64_t w0, w1, w2, w3;
    std::memcpy(&w0, c0 + m, 8);
    std::memcpy(&w1, c1 + m, 8);
    std::memcpy(&w2, c2 + m, 8);
    std::memcpy(&w3, c3 + m, 8);
    add_terms4<8>(w0, w1, w2, w3, lut + m * kK, s0, s1, s2, s3);
  }
}

// The scan of L2 tables of squares with a bound: every table entry is +0 or more and correctly
// rounded addition is monotone, so the sum of a code's first kP terms is a lower bound of its
// full sum (and of its distance d = fl(+0 + sum) = sum). Once the heap holds k candidates, a code
// whose partial sum exceeds the heap's largest key (strictly: an equal key may still enter by id)
// cannot enter and is not finished. The others resume their sums where they stopped, so every
// distance computed has the contract's bits; the result is the unpruned scan's.
template <int64_t kM, int64_t kP>
void scan_list_bounded(const uint8_t* code, int64_t size, const float* lut, float d0, const int64_t* ids, int64_t k,
                       std::vector<Candidate>& heap) {
  constexpr int64_t kChunk = 64;
  float part[kChunk + 3], dist[kChunk];
  int32_t surv[kChunk + 4];
  for (int64_t i0 = 0; i0 < size; i0 += kChunk) {
    const int64_t n = std::min(kChunk, size - i0);
    const uint8_t* cc = code + i0 * kM;
    int64_t ns = 0;
    if (static_cast<int64_t>(heap.size()) < k) {  // filling: no bound yet, every code is finished
      for (int64_t i = 0; i < n; ++i) surv[i] = static_cast<int32_t>(i);
      ns = n;
    } else {
      const float thr = heap.front().key;
      int64_t i = 0;
      for (; i + 4 <= n; i += 4) {  // the first kP terms of four codes, their survivors kept
        const uint8_t* c = cc + i * kM;
        using W = std::conditional_t<kP == 4, uint32_t, uint64_t>;
        W w0, w1, w2, w3;
        std::memcpy(&w0, c, sizeof(W));
        std::memcpy(&w1, c + kM, sizeof(W));
        std::memcpy(&w2, c + 2 * kM, sizeof(W));
        std::memcpy(&w3, c + 3 * kM, sizeof(W));
        float s0 = lut[w0 & 0xFF], s1 = lut[w1 & 0xFF], s2 = lut[w2 & 0xFF], s3 = lut[w3 & 0xFF];
        constexpr int kRest = static_cast<int>(std::min<int64_t>(kP, 8)) - 1;
        add_terms4<kRest>(w0 >> 8, w1 >> 8, w2 >> 8, w3 >> 8, lut + kK, s0, s1, s2, s3);
        for (int64_t m = 8; m < kP; m += 8) {
          uint64_t v0, v1, v2, v3;
          std::memcpy(&v0, c + m, 8);
          std::memcpy(&v1, c + kM + m, 8);
          std::memcpy(&v2, c + 2 * kM + m, 8);
          std::memcpy(&v3, c + 3 * kM + m, 8);
          add_terms4<8>(v0, v1, v2, v3, lut + m * kK, s0, s1, s2, s3);
        }
        part[i] = s0;
        part[i + 1] = s1;
        part[i + 2] = s2;
        part[i + 3] = s3;
        surv[ns] = static_cast<int32_t>(i);
        ns += s0 <= thr;
        surv[ns] = static_cast<int32_t>(i + 1);
        ns += s1 <= thr;
        surv[ns] = static_cast<int32_t>(i + 2);
        ns += s2 <= thr;
        surv[ns] = static_cast<int32_t>(i + 3);
        ns += s3 <= thr;
      }
      for (; i < n; ++i) {
        const uint8_t* c = cc + i * kM;
        float s = lut[c[0]];
        for (int64_t m = 1; m < kP; ++m) s = s + lut[m * kK + c[m]];
        part[i] = s;
        surv[ns] = static_cast<int32_t>(i);
        ns += s <= thr;
      }
    }
    // The survivors' remaining terms (all their terms while filling).
    const bool fresh = ns > 0 && static_cast<int64_t>(heap.size()) < k;
    int64_t j = 0;
    if (fresh) {
      for (; j < ns; ++j) {
        const uint8_t* c = cc + surv[j] * kM;
        float s = lut[c[0]];
        for (int64_t m = 1; m < kM; ++m) s = s + lut[m * kK + c[m]];
        dist[j] = d0 + s;
      }
    } else {
      for (; j + 4 <= ns; j += 4) {
        const int32_t r0 = surv[j], r1 = surv[j + 1], r2 = surv[j + 2], r3 = surv[j + 3];
        float s0 = part[r0], s1 = part[r1], s2 = part[r2], s3 = part[r3];
        finish4<kM, kP>(cc + r0 * kM, cc + r1 * kM, cc + r2 * kM, cc + r3 * kM, lut, s0, s1, s2, s3);
        dist[j] = d0 + s0;
        dist[j + 1] = d0 + s1;
        dist[j + 2] = d0 + s2;
        dist[j + 3] = d0 + s3;
      }
      for (; j < ns; ++j) {
        const uint8_t* c = cc + surv[j] * kM;
        float s = part[surv[j]];
        for (int64_t m = kP; m < kM; ++m) s = s + lut[m * kK + c[m]];
        dist[j] = d0 + s;
      }
    }
    j = 0;
    for (; j < ns && static_cast<int64_t>(heap.size()) < k; ++j) {  // filling
      heap.push_back(Candidate{dist[j], ids[i0 + surv[j]]});
      std::push_heap(heap.begin(), heap.end(), worse_than);
    }
    if (j == ns) continue;
    float thr = heap.front().key;
    for (; j < ns; ++j) {
      if (!(dist[j] <= thr)) continue;
      const Candidate cand{dist[j], ids[i0 + surv[j]]};
      if (worse_than(cand, heap.front())) {
        std::pop_heap(heap.begin(), heap.end(), worse_than);
        heap.back() = cand;
        std::push_heap(heap.begin(), heap.end(), worse_than);
        thr = heap.front().key;
      }
    }
  }
}

// The exact sum of one code's table terms, in codeword order.
inline float code_sum(const uint8_t* c, int64_t M, const float* lut) {
  float s = lut[c[0]];
  for (int64_t m = 1; m < M; ++m) s = s + lut[m * kK + c[m]];
  return s;
}

// Offers (key, ids[i]) to the heap of the k best (worst on top); the id is read only when needed.
inline void offer(std::vector<Candidate>& heap, int64_t k, float key, const int64_t* ids, int64_t i) {
  if (static_cast<int64_t>(heap.size()) < k) {
    heap.push_back(Candidate{key, ids[i]});
    std::push_heap(heap.begin(), heap.end(), worse_than);
    return;
  }
  if (!(key <= heap.front().key)) return;
  const Candidate cand{key, ids[i]};
  if (worse_than(cand, heap.front())) {
    std::pop_heap(heap.begin(), heap.end(), worse_than);
    heap.back() = cand;
    std::push_heap(heap.begin(), heap.end(), worse_than);
  }
}

// A code waiting for its exact sum: its column in a sub-quantizer-major block (code byte m at
// col[m * kCodeBlock]) and its index in the list.
struct Pending {
  const uint8_t* col;
  int64_t index;
};

// The exact sums of the n pending codes, eight at a time (eight independent chains, each in
// codeword order), offered to the heap in order (as rank_key(d0 + sum) with kRankKey).
template <bool kRankKey>
inline void finish_pending(const Pending* pend, int64_t n, int64_t M, const float* lut, float d0, const int64_t* ids,
                           int64_t k, std::vector<Candidate>& heap) {
  for (int64_t g = 0; g < n; g += 8) {
    const int64_t cnt = std::min<int64_t>(8, n - g);
    const uint8_t* col[8];
    for (int r = 0; r < 8; ++r) col[r] = pend[g + (r < cnt ? r : 0)].col;
    float s[8];
    for (int r = 0; r < 8; ++r) s[r] = lut[col[r][0]];
    for (int64_t m = 1; m < M; ++m) {
      const float* lm = lut + m * kK;
      for (int r = 0; r < 8; ++r) s[r] = s[r] + lm[col[r][m * kCodeBlock]];
    }
    for (int64_t r = 0; r < cnt; ++r) {
      const float d = d0 + s[r];
      offer(heap, k, kRankKey ? rank_key(d, false) : d, ids, pend[g + r].index);
    }
  }
}

#if PCOPS_IVFPQ_X86
// A table's rows [M, 256]: their minima, the sum of the minima and of the rows' largest
// magnitudes (in double), and whether every entry is finite.
struct RowStats {
  float* mins;
  double min_sum = 0.0, abs_sum = 0.0;
  bool finite = true;
};

// The statistics of table rows; with t1 and t2, the table is first lut = t1 + t2 (per entry: the
// precomputed tables' sum), written as it is read. (x - x) sums to 0 only when every x is finite.
// (The maskz forms and the reductions through memory: GCC warns about the undefined vectors the
// plain forms pass.)
__attribute__((target("avx512f"))) void row_stats_avx512(float* lut, const float* t1, const float* t2, int64_t M,
                                                          RowStats& rows) {
  rows.min_sum = rows.abs_sum = 0.0;
  rows.finite = true;
  for (int64_t m = 0; m < M; ++m) {
    __m512 mn = _mm512_set1_ps(std::numeric_limits<float>::infinity()), mx = _mm512_setzero_ps();
    __m512 fin = _mm512_setzero_ps();
    for (int64_t j = m * kK; j < (m + 1) * kK; j += 16) {
      __m512 v;
      if (t1 != nullptr) {
        v = _mm512_add_ps(_mm512_loadu_ps(t1 + j), _mm512_loadu_ps(t2 + j));
        _mm512_storeu_ps(lut + j, v);
      } else {
        v = _mm512_loadu_ps(lut + j);
      }
      fin = _mm512_add_ps(fin, _mm512_sub_ps(v, v));
      mn = _mm512_maskz_min_ps(0xFFFF, mn, v);
      mx = _mm512_maskz_max_ps(0xFFFF, mx, _mm512_abs_ps(v));
    }
    float lo[16], hi[16], zero[16];
    _mm512_storeu_ps(lo, mn);
    _mm512_storeu_ps(hi, mx);
    _mm512_storeu_ps(zero, fin);
    float a = lo[0], c = hi[0];
    for (int r = 0; r < 16; ++r) {
      a = std::min(a, lo[r]);
      c = std::max(c, hi[r]);
      rows.finite = rows.finite && zero[r] == 0.0f;
    }
    rows.mins[m] = a;
    rows.min_sum += a;
    rows.abs_sum += c;
  }
}

// The L2 scan with a vectorised bound (AVX-512 VBMI). Once the heap holds k candidates, each
// table row m is quantised down to bytes, q = min(255, floor(fl(t * inv))), where t is the entry
// (kShift false: residual tables, every entry a sum of squares, +0 or more) or fl(entry - mn_m)
// (kShift true: precomputed tables, entries of either sign; mn_m the row's smallest), for a float
// inv that puts the k-th key's headroom near 252; 64 codes at a time add their M quantised terms
// with unsigned saturation (blocks: the list's codes sub-quantizer-major, [blocks, M, 64]). With u
// = 2^-24 (fl's rounding: fl(x) <= x (1 + u), fl(x) >= x / (1 + u) for x >= 0), the saturated sum
// B satisfies B / inv <= (1 + u) sum t <= (1 + u)^2 sum (entry - mn) (real sums). kShift false:
// the float sum in codeword order of M nonnegative terms is at least their real sum / (1 + u)^(M-1),
// so a code with B / inv > key * (1 + 4 (M + 1) u) has a distance strictly greater than the heap's
// largest key. kShift true: the distance fl(d0 + float sum) differs from d0 + the real sum by at
// most E = 2 gamma_(M+1) (d0 + sum_m max |entry|) (gamma_n = n u / (1 - n u)), so a code with B /
// inv > (key - d0 - sum mn + E) (1 + 2^-21) cannot enter; a list whose headroom key - d0 - sum mn + E
// is negative is skipped whole (the key only falls). Every other code's distance is computed
// exactly (the contract's sum), so the result is the unbounded scan's. qlut: M * 256 bytes of
// scratch; rows (kShift): the table's row statistics. Returns false (nothing done) for kShift
// tables with an entry or d0 that is not finite.
template <bool kShift>
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) bool scan_list_quantized(
    const uint8_t* blocks, const uint8_t* code, int64_t size, int64_t M, const float* lut, float d0,
    const int64_t* ids, int64_t k, std::vector<Candidate>& heap, uint8_t* qlut, const RowStats* rows) {
  constexpr double u = 0x1p-24;
  double smn = 0.0, err = 0.0;
  if constexpr (kShift) {
    smn = rows->min_sum;
    // (Sums far from float's range only: the error bound below assumes no overflow.)
    if (!rows->finite || !(d0 + rows->abs_sum < 0x1p100)) return false;
    const double gamma = static_cast<double>(M + 1) * u / (1.0 - static_cast<double>(M + 1) * u);
    err = 2.0 * gamma * (d0 + rows->abs_sum);
    err += 0x1p-50 * (d0 + rows->abs_sum + std::abs(smn));  // the double evaluation of the headroom
  }
  const auto key_of = [](float d) { return kShift ? rank_key(d, false) : d; };
  int64_t i = 0;
  for (; i < size && static_cast<int64_t>(heap.size()) < k; ++i)
    offer(heap, k, key_of(d0 + code_sum(code + i * M, M, lut)), ids, i);
  if (i == size) return true;
  // The headroom of the current k-th key, and the scale x = headroom * inv * margin (B > x: pruned).
  const auto headroom = [&](double key) { return kShift ? key - d0 - smn + err + 0x1p-50 * std::abs(key) : key; };
  const double margin = kShift ? 1.0 + 0x1p-21 : 1.0 + 4.0 * static_cast<double>(M + 1) * u;
  const double room0 = headroom(heap.front().key);
  if (room0 < 0.0) return true;  // kShift: no code of this list can enter
  // Units of 1 / inv with the headroom at about 252 units (inv clamped to [2^-100, 2^100]).
  const float inv = static_cast<float>(std::clamp(room0 > 0.0 ? 252.0 / room0 : 0x1p100, 0x1p-100, 0x1p100));
  // fl(t * inv) truncated to an integer, then narrowed with unsigned saturation: at most 255, and
  // values of 2^31 or more (+inf included) convert to 0x80000000, which saturates to 255 too.
  // (The maskz forms: the plain ones pass an undefined vector GCC warns about.)
  const __m512 vinv = _mm512_set1_ps(inv);
  for (int64_t m = 0; m < M; ++m) {
    const __m512 shift = _mm512_set1_ps(kShift ? rows->mins[m] : 0.0f);
    for (int64_t j = m * kK; j < (m + 1) * kK; j += 16) {
      __m512 t = _mm512_loadu_ps(lut + j);
      if (kShift) t = _mm512_sub_ps(t, shift);
      const __m512i q = _mm512_maskz_cvttps_epi32(0xFFFF, _mm512_mul_ps(t, vinv));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qlut + j), _mm512_maskz_cvtusepi32_epi8(0xFFFF, q));
    }
  }
  const int64_t nblocks = (size + kCodeBlock - 1) / kCodeBlock;
  Pending pending[kCodeBlock + 8];
  int64_t np = 0;
  for (int64_t b = i / kCodeBlock; b < nblocks; ++b) {
    const int64_t base = b * kCodeBlock;
    const int64_t lo = std::max(i, base) - base, hi = std::min(size - base, kCodeBlock);
    uint64_t live = (hi == 64 ? ~uint64_t{0} : (uint64_t{1} << hi) - 1) & ~((uint64_t{1} << lo) - 1);
    // B >= limit: pruned (limit > headroom * inv * margin).
    const double x = headroom(heap.front().key) * static_cast<double>(inv) * margin;
    if (x < 0.0) break;  // kShift: nothing left in this list can enter
    const int limit = x < 255.0 ? static_cast<int>(x) + 1 : 256;
    const uint8_t* blk = blocks + b * M * kCodeBlock;
    if (limit <= 255) {
      // Two blocks ahead stream in meanwhile (the lists are read once per query: from L3 or memory).
      const uint8_t* ahead = b + 2 < nblocks ? blk + 2 * M * kCodeBlock : blk;
      __m512i acc = _mm512_setzero_si512();
      for (int64_t m = 0; m < M; ++m) {
        const __m512i idx = _mm512_loadu_si512(blk + m * kCodeBlock);
        _mm_prefetch(reinterpret_cast<const char*>(ahead + m * kCodeBlock), _MM_HINT_T0);
        const uint8_t* qm = qlut + m * kK;
        const __m512i low = _mm512_permutex2var_epi8(_mm512_loadu_si512(qm), idx, _mm512_loadu_si512(qm + 64));
        const __m512i high = _mm512_permutex2var_epi8(_mm512_loadu_si512(qm + 128), idx, _mm512_loadu_si512(qm + 192));
        acc = _mm512_adds_epu8(acc, _mm512_mask_blend_epi8(_mm512_movepi8_mask(idx), low, high));
      }
      live &= _mm512_cmplt_epu8_mask(acc, _mm512_set1_epi8(static_cast<char>(limit)));
    }
    // The survivors wait (their ids prefetched) until eight or more are pending: their exact sums
    // then run eight at a time (independent chains) from their blocks, still in cache.
    for (; live != 0; live &= live - 1) {
      const int64_t j = std::countr_zero(live);
      _mm_prefetch(reinterpret_cast<const char*>(ids + base + j), _MM_HINT_T0);
      pending[np++] = Pending{blk + j, base + j};
    }
    if (np >= 8 || b + 1 == nblocks) {
      finish_pending<kShift>(pending, np, M, lut, d0, ids, k, heap);
      np = 0;
    }
  }
  if (np > 0) finish_pending<kShift>(pending, np, M, lut, d0, ids, k, heap);
  return true;
}

bool has_vbmi() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vbmi");
  return yes && !g_force_scalar.load(std::memory_order_relaxed) && !g_force_avx2.load(std::memory_order_relaxed);
}
#endif

// Scans one list's codes [size, M] into the (key, id) heap of the k best (worst on top).
// kM > 0: M known at compile time; 0: runtime M.
// kPlain: the keys need no rank_key (L2 tables of squares: every entry is +0 or more, d0 is +0,
// so every sum is +0 or more and never NaN: rank_key would return it unchanged).
template <int64_t kM, bool kPlain>
void scan_list(const uint8_t* code, int64_t size, int64_t M_rt, const float* lut, float d0, bool ip,
               const int64_t* ids, int64_t k, std::vector<Candidate>& heap) {
  if (k == 0) return;
  if constexpr (kPlain && kM > 0 && kM % 8 == 0) {
    return scan_list_bounded<kM, kBoundTerms>(code, size, lut, d0, ids, k, heap);
  }
  const auto key = [ip](float v) { return kPlain ? v : rank_key(v, ip); };
  const int64_t M = kM > 0 ? kM : M_rt;
  constexpr int64_t kChunk = 64;  // distances first (independent sums overlap), then the heap
  float dist[kChunk];
  for (int64_t i0 = 0; i0 < size; i0 += kChunk) {
    const int64_t n = std::min(kChunk, size - i0);
    int64_t i = 0;
    if constexpr (kM > 0 && kM % 8 == 0) {
      // Four codes at once (four independent chains, each summed in code order), their bytes
      // read as 64-bit words and split by shifts: one load per eight codewords instead of eight,
      // so the table loads have the load ports to themselves.
      for (; i + 4 <= n; i += 4) {
        const uint8_t* c = code + (i0 + i) * kM;
        uint64_t w0, w1, w2, w3;
        std::memcpy(&w0, c, 8);
        std::memcpy(&w1, c + kM, 8);
        std::memcpy(&w2, c + 2 * kM, 8);
        std::memcpy(&w3, c + 3 * kM, 8);
        float s0 = lut[w0 & 0xFF], s1 = lut[w1 & 0xFF], s2 = lut[w2 & 0xFF], s3 = lut[w3 & 0xFF];
        for (int j = 1; j < 8; ++j) {
          const float* lm = lut + j * kK;
          s0 = s0 + lm[(w0 >> (8 * j)) & 0xFF];
          s1 = s1 + lm[(w1 >> (8 * j)) & 0xFF];
          s2 = s2 + lm[(w2 >> (8 * j)) & 0xFF];
          s3 = s3 + lm[(w3 >> (8 * j)) & 0xFF];
        }
        for (int64_t wi = 1; wi < kM / 8; ++wi) {
          std::memcpy(&w0, c + 8 * wi, 8);
          std::memcpy(&w1, c + kM + 8 * wi, 8);
          std::memcpy(&w2, c + 2 * kM + 8 * wi, 8);
          std::memcpy(&w3, c + 3 * kM + 8 * wi, 8);
          for (int j = 0; j < 8; ++j) {
            const float* lm = lut + (8 * wi + j) * kK;
            s0 = s0 + lm[(w0 >> (8 * j)) & 0xFF];
            s1 = s1 + lm[(w1 >> (8 * j)) & 0xFF];
            s2 = s2 + lm[(w2 >> (8 * j)) & 0xFF];
            s3 = s3 + lm[(w3 >> (8 * j)) & 0xFF];
          }
        }
        dist[i] = key(d0 + s0);
        dist[i + 1] = key(d0 + s1);
        dist[i + 2] = key(d0 + s2);
        dist[i + 3] = key(d0 + s3);
      }
    }
    for (; i < n; ++i) {
      const uint8_t* c = code + (i0 + i) * M;
      float sum = lut[c[0]];
      for (int64_t m = 1; m < M; ++m) sum = sum + lut[m * kK + c[m]];
      dist[i] = key(d0 + sum);
    }
    int64_t j = 0;
    for (; j < n && static_cast<int64_t>(heap.size()) < k; ++j) {  // filling
      heap.push_back(Candidate{dist[j], ids[i0 + j]});
      std::push_heap(heap.begin(), heap.end(), worse_than);
    }
    if (j == n) continue;
    float thr = heap.front().key;  // the k-th key: larger keys cannot enter (ids read only past it)
    for (; j < n; ++j) {
      if (!(dist[j] <= thr)) continue;
      const Candidate cand{dist[j], ids[i0 + j]};
      if (worse_than(cand, heap.front())) {
        std::pop_heap(heap.begin(), heap.end(), worse_than);
        heap.back() = cand;
        std::push_heap(heap.begin(), heap.end(), worse_than);
        thr = heap.front().key;
      }
    }
  }
}

struct ListKey {
  float key;
  int64_t list;
};
// Heap order, the last-ranked on top (a function object, inlined).
constexpr auto ranks_before = [](const ListKey& a, const ListKey& b) {
  return a.key < b.key || (a.key == b.key && a.list < b.list);
};

// Replaces the last-ranked of the heap sel by (key, list); returns the new last-ranked key.
[[gnu::noinline]] float replace_last(std::vector<ListKey>& sel, float key, int64_t list) {
  std::pop_heap(sel.begin(), sel.end(), ranks_before);
  sel.back() = ListKey{key, list};
  std::push_heap(sel.begin(), sel.end(), ranks_before);
  return sel.front().key;
}

// The nprobe lists ranked first by (key, list), in that order, into sel: one pass over the lists in
// ascending order keeping the nprobe best. A later list ranks after an equal key, so once nprobe
// are kept only a strictly smaller key enters. Up to 64 are kept sorted (an entering list moves
// the larger keys up by one), more in a heap. keys [nlist] are never NaN.
void select_lists(const float* keys, int64_t nlist, int64_t nprobe, std::vector<ListKey>& sel) {
  sel.clear();
  int64_t l = 0;
  for (; l < nprobe; ++l) sel.push_back(ListKey{keys[l], l});
  if (nprobe <= 64) {
    std::sort(sel.begin(), sel.end(), ranks_before);
    ListKey* s = sel.data();
    float thr = s[nprobe - 1].key;
    for (; l < nlist; ++l) {
      const float v = keys[l];
      if (v < thr) [[unlikely]] {
        int64_t pos = nprobe - 1;
        for (; pos > 0 && s[pos - 1].key > v; --pos) s[pos] = s[pos - 1];
        s[pos] = ListKey{v, l};
        thr = s[nprobe - 1].key;
      }
    }
    return;
  }
  std::make_heap(sel.begin(), sel.end(), ranks_before);
  float thr = sel.front().key;
  for (; l < nlist; ++l)
    if (keys[l] < thr) [[unlikely]] thr = replace_last(sel, keys[l], l);
  std::sort_heap(sel.begin(), sel.end(), ranks_before);
}

// Quantizer tables derived from the trained parameters (rebuilt on training / loading).
struct Tables {
  Columns coarse;
  std::vector<Columns> sub;  // per sub-quantizer, [dsub, 256]
};

}  // namespace

IvfPqIndex::IvfPqIndex(const IvfPqParams& params) : params_(params) {
  core::validate_ivfpq_params(params_);
  ids_.resize(static_cast<size_t>(params_.nlist));
  codes_.resize(static_cast<size_t>(params_.nlist));
  lists_changed();
}

void IvfPqIndex::check_trained(const char* what) const {
  PCOPS_CHECK(trained_, Value, what, ": the index is not trained (call train or set_quantizers first)");
}

struct IvfPqIndex::Term1 {
  std::mutex mutex;
  bool ready = false;
  std::vector<float> table;
};

struct IvfPqIndex::CodeBlocks {
  std::mutex mutex;
  bool ready = false;
  std::vector<std::vector<uint8_t>> lists;
};

void IvfPqIndex::lists_changed() {
  blocks_ = std::make_shared<CodeBlocks>();  // copies made before keep theirs
}

const std::vector<std::vector<uint8_t>>& IvfPqIndex::code_blocks() const {
  const std::lock_guard<std::mutex> lock(blocks_->mutex);
  if (blocks_->ready) return blocks_->lists;
  const int64_t M = params_.M;
  blocks_->lists.resize(static_cast<size_t>(params_.nlist));
  for (size_t l = 0; l < codes_.size(); ++l) {
    const std::vector<uint8_t>& c = codes_[l];
    const int64_t size = static_cast<int64_t>(ids_[l].size());
    std::vector<uint8_t>& b = blocks_->lists[l];
    b.assign(static_cast<size_t>((size + kCodeBlock - 1) / kCodeBlock * M * kCodeBlock), 0);
    for (int64_t i = 0; i < size; ++i)
      for (int64_t m = 0; m < M; ++m)
        b[static_cast<size_t>(((i / kCodeBlock) * M + m) * kCodeBlock + i % kCodeBlock)] = c[static_cast<size_t>(i * M + m)];
  }
  blocks_->ready = true;
  return blocks_->lists;
}

void IvfPqIndex::prepare_tables() {
  trained_ = true;
  term1_ = std::make_shared<Term1>();  // built by the first precomputed_table search
}

const std::vector<float>& IvfPqIndex::term1() const {
  const std::lock_guard<std::mutex> lock(term1_->mutex);
  if (term1_->ready) return term1_->table;
  // term1[l, m, j] = |r_mj|^2 + 2 <c_l,m, r_mj>, each sum in coordinate order.
  const IvfPqParams& p = params_;
  const int64_t dsub = this->dsub();
  std::vector<float> norms(static_cast<size_t>(p.M * kK));
  for (int64_t m = 0; m < p.M; ++m)
    for (int64_t j = 0; j < kK; ++j) {
      const float* r = codebooks_.data() + (m * kK + j) * dsub;
      float s = 0.0f;
      for (int64_t i = 0; i < dsub; ++i) s = s + r[i] * r[i];
      norms[static_cast<size_t>(m * kK + j)] = s;
    }
  std::vector<float>& t1 = term1_->table;
  t1.resize(static_cast<size_t>(p.nlist * p.M * kK));
  for (int64_t l = 0; l < p.nlist; ++l)
    for (int64_t m = 0; m < p.M; ++m) {
      const float* c = centroids_.data() + l * p.dim + m * dsub;
      float* out = t1.data() + (l * p.M + m) * kK;
      for (int64_t j = 0; j < kK; ++j) {
        const float* r = codebooks_.data() + (m * kK + j) * dsub;
        float dot = 0.0f;
        for (int64_t i = 0; i < dsub; ++i) dot = dot + c[i] * r[i];
        out[j] = norms[static_cast<size_t>(m * kK + j)] + 2.0f * dot;
      }
    }
  term1_->ready = true;
  return t1;
}

namespace {

Tables make_tables(const IvfPqParams& p, const std::vector<float>& centroids, const std::vector<float>& codebooks) {
  Tables t;
  const int64_t dsub = p.dim / p.M;
  t.coarse = Columns(centroids.data(), p.nlist, p.dim);
  t.sub.reserve(static_cast<size_t>(p.M));
  for (int64_t m = 0; m < p.M; ++m) t.sub.emplace_back(codebooks.data() + m * kK * dsub, kK, dsub);
  return t;
}

// Codes [count, M] of vectors x [count, dim] already assigned to lists; scratch holds
// 4 * 256 floats, res count * dim floats.
void encode_codes(const IvfPqParams& p, const Tables& t, const std::vector<float>& centroids, const float* x,
                  int64_t count, const int64_t* lists, uint8_t* codes, float* scratch, float* res) {
  for (int64_t r = 0; r < count; ++r) {
    const float* xi = x + r * p.dim;
    float* ri = res + r * p.dim;
    if (p.by_residual) {
      const float* c = centroids.data() + lists[r] * p.dim;
      for (int64_t i = 0; i < p.dim; ++i) ri[i] = xi[i] - c[i];
    } else {
      std::memcpy(ri, xi, sizeof(float) * static_cast<size_t>(p.dim));
    }
  }
  const int64_t dsub = p.dim / p.M;
  int64_t best[4];
  for (int64_t r0 = 0; r0 < count; r0 += 4) {
    const int64_t nb = std::min<int64_t>(4, count - r0);
    for (int64_t m = 0; m < p.M; ++m) {
      t.sub[static_cast<size_t>(m)].nearest_many(res + r0 * p.dim + m * dsub, p.dim, nb, false, scratch, best);
      for (int64_t r = 0; r < nb; ++r) codes[(r0 + r) * p.M + m] = static_cast<uint8_t>(best[r]);
    }
  }
}

}  // namespace

void IvfPqIndex::train(const CpuContext& ctx, const float* x, int64_t n, const IvfPqTrainParams& tp) {
  train(ctx, x, n, tp, [&ctx](const float* data, int64_t rows, int64_t d, const float* cent, int64_t k, bool ip,
                              int64_t* assign) {
    const Columns cols(cent, k, d);
    parallel_for(ctx, 0, rows, 256, [&](int64_t b, int64_t e) {
      std::vector<float> scratch(static_cast<size_t>(4 * cols.stride));
      cols.nearest_many(data + b * d, d, e - b, ip, scratch.data(), assign + b);
    });
  });
}

void IvfPqIndex::train(const CpuContext& ctx, const float* x, int64_t n, const IvfPqTrainParams& tp,
                       const AssignFn& assign_fn) {
  const IvfPqParams& p = params_;
  PCOPS_CHECK(ntotal_ == 0, Value, "train: expected an empty index, it holds ", ntotal_, " vectors (call reset)");
  const int64_t need = std::max<int64_t>(p.nlist, kK);
  PCOPS_CHECK(n >= need, Value, "x: expected at least max(nlist, 256) = ", need, " training vectors, got ", n);
  PCOPS_CHECK(tp.niter >= 0, Value, "niter: expected >= 0, got ", tp.niter);
  PCOPS_CHECK(tp.max_points_per_centroid >= 1, Value, "max_points_per_centroid: expected >= 1, got ",
              tp.max_points_per_centroid);
  core::check_finite_vectors(x, n, p.dim, "x");
  const bool ip = p.metric == IvfPqMetric::InnerProduct;
  const uint64_t seed = ctx.seed;

  // Coarse quantizer on a seeded subsample (in input order).
  auto subsample = [&](int64_t cap, uint64_t salt) {
    std::vector<float> s;
    if (n <= cap) return s;
    std::vector<int64_t> idx = sample_indices(n, cap, mix_seed(seed, salt));
    std::sort(idx.begin(), idx.end());
    s.resize(static_cast<size_t>(cap * p.dim));
    for (int64_t i = 0; i < cap; ++i)
      std::memcpy(&s[static_cast<size_t>(i * p.dim)], x + idx[static_cast<size_t>(i)] * p.dim,
                  sizeof(float) * static_cast<size_t>(p.dim));
    return s;
  };
  const int64_t cap1 = p.nlist * std::min<int64_t>(tp.max_points_per_centroid, (int64_t{1} << 40) / p.nlist);
  std::vector<float> s1 = subsample(cap1, 2);
  const float* x1 = s1.empty() ? x : s1.data();
  const int64_t n1 = s1.empty() ? n : cap1;
  std::vector<float> centroids = kmeans(assign_fn, x1, n1, p.dim, p.nlist, ip, tp, seed);

  // Product quantizer on the residuals of its own subsample.
  const int64_t cap2 = kK * tp.max_points_per_centroid;
  std::vector<float> s2 = subsample(cap2, 3);
  const float* x2 = s2.empty() ? x : s2.data();
  const int64_t n2 = s2.empty() ? n : cap2;
  std::vector<float> res(static_cast<size_t>(n2 * p.dim));
  std::vector<int64_t> assign(static_cast<size_t>(p.by_residual ? n2 : 0));
  if (p.by_residual) assign_fn(x2, n2, p.dim, centroids.data(), p.nlist, ip, assign.data());
  parallel_for(ctx, 0, n2, 256, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float* xi = x2 + i * p.dim;
      float* ri = &res[static_cast<size_t>(i * p.dim)];
      if (p.by_residual) {
        const float* c = centroids.data() + assign[static_cast<size_t>(i)] * p.dim;
        for (int64_t j = 0; j < p.dim; ++j) ri[j] = xi[j] - c[j];
      } else {
        std::memcpy(ri, xi, sizeof(float) * static_cast<size_t>(p.dim));
      }
    }
  });
  const int64_t dsub = this->dsub();
  std::vector<float> codebooks(static_cast<size_t>(p.M * kK * dsub));
  std::vector<float> subv(static_cast<size_t>(n2 * dsub));
  for (int64_t m = 0; m < p.M; ++m) {
    for (int64_t i = 0; i < n2; ++i)
      std::memcpy(&subv[static_cast<size_t>(i * dsub)], &res[static_cast<size_t>(i * p.dim + m * dsub)],
                  sizeof(float) * static_cast<size_t>(dsub));
    const std::vector<float> cb =
        kmeans(assign_fn, subv.data(), n2, dsub, kK, false, tp, mix_seed(seed, 100 + static_cast<uint64_t>(m)));
    std::copy(cb.begin(), cb.end(), codebooks.begin() + m * kK * dsub);
  }
  centroids_ = std::move(centroids);
  codebooks_ = std::move(codebooks);
  prepare_tables();
}

void IvfPqIndex::set_quantizers(const float* centroids, const float* codebooks) {
  PCOPS_CHECK(ntotal_ == 0, Value, "set_quantizers: expected an empty index, it holds ", ntotal_,
              " vectors (call reset)");
  core::check_finite_vectors(centroids, params_.nlist, params_.dim, "centroids");
  core::check_finite_vectors(codebooks, params_.M * kK, dsub(), "codebooks");
  centroids_.assign(centroids, centroids + params_.nlist * params_.dim);
  codebooks_.assign(codebooks, codebooks + params_.M * kK * dsub());
  prepare_tables();
}

void IvfPqIndex::encode(const CpuContext& ctx, const float* x, int64_t n, int64_t* lists, uint8_t* codes) const {
  check_trained("encode");
  PCOPS_CHECK(n >= 0, Value, "n: expected >= 0, got ", n);
  core::check_finite_vectors(x, n, params_.dim, "x");
  const Tables t = make_tables(params_, centroids_, codebooks_);
  const bool ip = params_.metric == IvfPqMetric::InnerProduct;
  const int64_t scratch_size = 4 * std::max<int64_t>(t.coarse.stride, kK);
  constexpr int64_t kChunk = 64;
  parallel_for(ctx, 0, n, kChunk, [&](int64_t b, int64_t e) {
    std::vector<float> scratch(static_cast<size_t>(scratch_size));
    std::vector<float> res(static_cast<size_t>(kChunk * params_.dim));
    for (int64_t c0 = b; c0 < e; c0 += kChunk) {
      const int64_t cn = std::min(kChunk, e - c0);
      const float* xc = x + c0 * params_.dim;
      t.coarse.nearest_many(xc, params_.dim, cn, ip, scratch.data(), lists + c0);
      encode_codes(params_, t, centroids_, xc, cn, lists + c0, codes + c0 * params_.M, scratch.data(), res.data());
    }
  });
}

void IvfPqIndex::add(const CpuContext& ctx, const float* x, int64_t n, const int64_t* ids) {
  check_trained("add");
  PCOPS_CHECK(n >= 0, Value, "n: expected >= 0, got ", n);
  std::vector<int64_t> lists(static_cast<size_t>(n));
  std::vector<uint8_t> codes(static_cast<size_t>(n * params_.M));
  encode(ctx, x, n, lists.data(), codes.data());
  append(lists.data(), codes.data(), n, ids);  // encode's lists are in range
}

void IvfPqIndex::add_encoded(const int64_t* lists, const uint8_t* codes, int64_t n, const int64_t* ids) {
  check_trained("add_encoded");
  PCOPS_CHECK(n >= 0, Value, "n: expected >= 0, got ", n);
  for (int64_t i = 0; i < n; ++i)
    PCOPS_CHECK(lists[i] >= 0 && lists[i] < params_.nlist, Index, "lists: expected values in [0, nlist = ",
                params_.nlist, "), got ", lists[i], " at ", i);
  append(lists, codes, n, ids);
}

void IvfPqIndex::append(const int64_t* lists, const uint8_t* codes, int64_t n, const int64_t* ids) {
  for (int64_t i = 0; i < n; ++i) {
    const size_t l = static_cast<size_t>(lists[i]);
    ids_[l].push_back(ids ? ids[i] : ntotal_ + i);
    codes_[l].insert(codes_[l].end(), codes + i * params_.M, codes + (i + 1) * params_.M);
  }
  ntotal_ += n;
  lists_changed();
}

// Half tables: every entry rounded to the nearest float16 (ties to even, overflow to infinity)
// and read back exactly as float32.
static void round_to_half(float* v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(static_cast<_Float16>(v[i]));
}

void IvfPqIndex::search(const CpuContext& ctx, const float* queries, int64_t nq, int64_t k, int64_t nprobe,
                        float* distances, int64_t* labels, bool precomputed_table, bool half_tables) const {
  const IvfPqParams& p = params_;
  check_trained("search");
  PCOPS_CHECK(nq >= 0, Value, "nq: expected >= 0, got ", nq);
  PCOPS_CHECK(k >= 0, Value, "k: expected >= 0, got ", k);
  PCOPS_CHECK(nprobe >= 1 && nprobe <= p.nlist, Value, "nprobe: expected a value in [1, nlist = ", p.nlist,
              "], got ", nprobe);
  core::check_finite_vectors(queries, nq, p.dim, "queries");
  const bool ip = p.metric == IvfPqMetric::InnerProduct;
  // The table depends on the list only for L2 with residuals.
  const bool per_list_lut = !ip && p.by_residual;
  const bool use_term1 = precomputed_table && per_list_lut;
  PCOPS_CHECK(!use_term1 || p.nlist * p.M * kK <= kMaxPrecomputed, Value, "precomputed_table: nlist * M * 256 = ",
              p.nlist * p.M * kK,
              " floats exceed the limit of ", kMaxPrecomputed, " (search without it)");
  if (nq == 0 || k == 0) return;
  const float* term1_all = use_term1 ? term1().data() : nullptr;
  const Tables t = make_tables(p, centroids_, codebooks_);
  const int64_t M = p.M, dsub = this->dsub();
#if PCOPS_IVFPQ_X86
  // The L2 scans (residual or precomputed tables) bound their codes with vectorised quantised sums.
  const bool quantized_bound = !ip && has_vbmi();
#else
  const bool quantized_bound = false;
#endif
  [[maybe_unused]] const std::vector<std::vector<uint8_t>>* blocks = quantized_bound ? &code_blocks() : nullptr;
  const float pad = ip ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  parallel_for(ctx, 0, nq, 1, [&](int64_t b, int64_t e) {
    // Coarse distances of four queries at a time (the centroids stream through once per four).
    std::vector<float> coarse4(static_cast<size_t>(4 * t.coarse.stride));
    std::vector<ListKey> probe;
    probe.reserve(static_cast<size_t>(nprobe));
    std::vector<float> coarse_keys(static_cast<size_t>(ip ? p.nlist : 0));
    std::vector<uint8_t> qlut(static_cast<size_t>(quantized_bound ? M * kK : 0));
    std::vector<float> row_min(static_cast<size_t>(quantized_bound ? M : 0));
#if PCOPS_IVFPQ_X86
    RowStats row_stats{row_min.data()};
#endif
    std::vector<float> residual(static_cast<size_t>(kTableBatch * p.dim));
    std::vector<float> lut(static_cast<size_t>(kTableBatch * M * kK));
    std::vector<float> term2(static_cast<size_t>(use_term1 ? M * kK : 0));
    std::vector<Candidate> heap;
    heap.reserve(static_cast<size_t>(std::min<int64_t>(k, ntotal_) + 1));
    for (int64_t qi = b; qi < e; ++qi) {
      const float* q = queries + qi * p.dim;
      const int64_t slot = (qi - b) % 4;
      if (slot == 0) t.coarse.distances_upto4(q, p.dim, std::min<int64_t>(4, e - qi), ip, coarse4.data());
      const float* coarse = coarse4.data() + slot * t.coarse.stride;
      // The probed lists. L2 coarse distances are sums of squares (+0 or more, never NaN): their
      // own keys; inner products go through rank_key.
      const float* keys = coarse;
      if (ip) {
        for (int64_t l = 0; l < p.nlist; ++l) coarse_keys[static_cast<size_t>(l)] = rank_key(coarse[l], true);
        keys = coarse_keys.data();
      }
      select_lists(keys, p.nlist, nprobe, probe);
      heap.clear();
      if (!per_list_lut) {
        for (int64_t m = 0; m < M; ++m) t.sub[static_cast<size_t>(m)].distances(q + m * dsub, ip, lut.data() + m * kK);
        if (half_tables) round_to_half(lut.data(), M * kK);
      }
      if (use_term1) {  // term2 = -2 <q_m, r_mj>
        for (int64_t m = 0; m < M; ++m)
          t.sub[static_cast<size_t>(m)].distances(q + m * dsub, true, term2.data() + m * kK);
        for (float& v : term2) v = -2.0f * v;
      }
      // The residual tables of up to four probed lists at a time (the codebooks stream through
      // once per four; the same bits as one at a time), then their scans in probe order.
      const bool residual_tables = per_list_lut && !use_term1;
      const int64_t batch = residual_tables ? kTableBatch : 1;
      for (int64_t r = 0; r < nprobe;) {
        int64_t lists[kTableBatch];
        int64_t nb = 0;
        for (; r < nprobe && nb < batch; ++r) {
          const int64_t l = probe[static_cast<size_t>(r)].list;
          if (!ids_[static_cast<size_t>(l)].empty()) lists[nb++] = l;
        }
        if (residual_tables && nb > 0) {
          for (int64_t j = 0; j < nb; ++j) {
            const float* c = centroids_.data() + lists[j] * p.dim;
            float* res = residual.data() + j * p.dim;
            for (int64_t i = 0; i < p.dim; ++i) res[i] = q[i] - c[i];
          }
          for (int64_t m = 0; m < M; ++m)
            t.sub[static_cast<size_t>(m)].distances_upto4(residual.data() + m * dsub, p.dim, nb, false,
                                                          lut.data() + m * kK, M * kK);
          if (half_tables) round_to_half(lut.data(), nb * M * kK);
        }
        for (int64_t j = 0; j < nb; ++j) {
          const int64_t l = lists[j];
          const std::vector<int64_t>& lid = ids_[static_cast<size_t>(l)];
          const int64_t size = static_cast<int64_t>(lid.size());
          const float* table = residual_tables ? lut.data() + j * M * kK : lut.data();
          float d0 = ip && p.by_residual ? coarse[static_cast<size_t>(l)] : 0.0f;
          if (use_term1) {
            d0 = coarse[static_cast<size_t>(l)];  // |q - c_l|^2
            const float* t1 = term1_all + l * M * kK;
            if (r < nprobe) {  // the next list's table slab streams in while this list is scanned
              const float* next = term1_all + probe[static_cast<size_t>(r)].list * M * kK;
              for (int64_t i = 0; i < M * kK; i += 16) __builtin_prefetch(next + i, 0, 1);
            }
#if PCOPS_IVFPQ_X86
            if (quantized_bound && !half_tables) {  // the sum and the rows' statistics in one pass
              row_stats_avx512(lut.data(), t1, term2.data(), M, row_stats);
            } else
#endif
            {
              for (int64_t i = 0; i < M * kK; ++i) lut[static_cast<size_t>(i)] = t1[i] + term2[static_cast<size_t>(i)];
              if (half_tables) round_to_half(lut.data(), M * kK);
#if PCOPS_IVFPQ_X86
              if (quantized_bound) row_stats_avx512(lut.data(), nullptr, nullptr, M, row_stats);
#endif
            }
          }
          const uint8_t* code = codes_[static_cast<size_t>(l)].data();
          const auto scan = [&](auto plain) {
            constexpr bool kPlain = decltype(plain)::value;
            switch (M) {  // compile-time M for the common sizes (same arithmetic, unrolled)
              case 8: scan_list<8, kPlain>(code, size, M, table, d0, ip, lid.data(), k, heap); break;
              case 16: scan_list<16, kPlain>(code, size, M, table, d0, ip, lid.data(), k, heap); break;
              case 32: scan_list<32, kPlain>(code, size, M, table, d0, ip, lid.data(), k, heap); break;
              default: scan_list<0, kPlain>(code, size, M, table, d0, ip, lid.data(), k, heap); break;
            }
          };
#if PCOPS_IVFPQ_X86
          if (quantized_bound) {
            const uint8_t* blk = (*blocks)[static_cast<size_t>(l)].data();
            if (!use_term1) {
              scan_list_quantized<false>(blk, code, size, M, table, d0, lid.data(), k, heap, qlut.data(), nullptr);
              continue;
            }
            if (scan_list_quantized<true>(blk, code, size, M, table, d0, lid.data(), k, heap, qlut.data(),
                                          &row_stats))
              continue;
          }
#endif
          if (!ip && !use_term1) scan(std::true_type{});
          else scan(std::false_type{});
        }
      }
      std::sort_heap(heap.begin(), heap.end(), worse_than);
      float* dq = distances + qi * k;
      int64_t* lq = labels + qi * k;
      for (int64_t j = 0; j < k; ++j) {
        if (j < static_cast<int64_t>(heap.size())) {
          const float key = heap[static_cast<size_t>(j)].key;
          dq[j] = (ip ? -key : key) + 0.0f;  // a zero distance is reported as +0
          lq[j] = heap[static_cast<size_t>(j)].id;
        } else {
          dq[j] = pad;
          lq[j] = -1;
        }
      }
    }
  });
}

int64_t IvfPqIndex::remove_ids(const int64_t* ids, int64_t n) {
  PCOPS_CHECK(n >= 0, Value, "n: expected >= 0, got ", n);
  std::vector<int64_t> sorted(ids, ids + n);
  std::sort(sorted.begin(), sorted.end());
  const size_t M = static_cast<size_t>(params_.M);
  int64_t removed = 0;
  for (size_t l = 0; l < ids_.size(); ++l) {
    std::vector<int64_t>& lid = ids_[l];
    std::vector<uint8_t>& lc = codes_[l];
    size_t w = 0;
    for (size_t i = 0; i < lid.size(); ++i) {
      if (std::binary_search(sorted.begin(), sorted.end(), lid[i])) continue;
      if (w != i) {
        lid[w] = lid[i];
        std::memmove(&lc[w * M], &lc[i * M], M);
      }
      ++w;
    }
    removed += static_cast<int64_t>(lid.size() - w);
    lid.resize(w);
    lc.resize(w * M);
  }
  ntotal_ -= removed;
  if (removed > 0) lists_changed();
  return removed;
}

void IvfPqIndex::reset() {
  for (auto& v : ids_) v.clear();
  for (auto& v : codes_) v.clear();
  ntotal_ = 0;
  lists_changed();
}

int64_t IvfPqIndex::list_size(int64_t list) const {
  PCOPS_CHECK(list >= 0 && list < params_.nlist, Index, "list: expected a value in [0, ", params_.nlist, "), got ",
              list);
  return static_cast<int64_t>(ids_[static_cast<size_t>(list)].size());
}
const std::vector<int64_t>& IvfPqIndex::list_ids(int64_t list) const {
  list_size(list);
  return ids_[static_cast<size_t>(list)];
}
const std::vector<uint8_t>& IvfPqIndex::list_codes(int64_t list) const {
  list_size(list);
  return codes_[static_cast<size_t>(list)];
}

// ---- file format (little-endian; see the header) ----
namespace {

static_assert(std::endian::native == std::endian::little, "the IVF-PQ file writer assumes a little-endian host");
constexpr char kMagic[8] = {'P', 'C', 'I', 'V', 'F', 'P', 'Q', '\0'};
constexpr uint32_t kVersion = 1;

template <class T>
void put(std::ostream& out, const T* v, size_t n) {
  out.write(reinterpret_cast<const char*>(v), static_cast<std::streamsize>(sizeof(T) * n));
}
template <class T>
void put1(std::ostream& out, T v) {
  put(out, &v, 1);
}
template <class T>
void get(std::istream& in, T* v, size_t n) {
  in.read(reinterpret_cast<char*>(v), static_cast<std::streamsize>(sizeof(T) * n));
  PCOPS_CHECK(static_cast<bool>(in), Value, "load: truncated or unreadable IVF-PQ file");
}
template <class T>
T get1(std::istream& in) {
  T v{};
  get(in, &v, 1);
  return v;
}

}  // namespace

void IvfPqIndex::save(std::ostream& out) const {
  put(out, kMagic, 8);
  put1<uint32_t>(out, kVersion);
  put1<int64_t>(out, params_.dim);
  put1<int64_t>(out, params_.nlist);
  put1<int64_t>(out, params_.M);
  put1<int64_t>(out, params_.nbits);
  put1<uint32_t>(out, static_cast<uint32_t>(params_.metric));
  put1<uint32_t>(out, params_.by_residual ? 1u : 0u);
  put1<uint32_t>(out, trained_ ? 1u : 0u);
  if (trained_) {
    put(out, centroids_.data(), centroids_.size());
    put(out, codebooks_.data(), codebooks_.size());
  }
  for (size_t l = 0; l < ids_.size(); ++l) {
    put1<int64_t>(out, static_cast<int64_t>(ids_[l].size()));
    put(out, ids_[l].data(), ids_[l].size());
    put(out, codes_[l].data(), codes_[l].size());
  }
  PCOPS_CHECK(static_cast<bool>(out), Value, "save: writing the IVF-PQ file failed");
}

void IvfPqIndex::save(const std::string& path) const {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  PCOPS_CHECK(static_cast<bool>(f), Value, "path: cannot open '", path, "' for writing");
  save(f);
}

IvfPqIndex IvfPqIndex::load(std::istream& in) {
  char magic[8];
  get(in, magic, 8);
  PCOPS_CHECK(std::memcmp(magic, kMagic, 8) == 0, Value, "load: not a pcops IVF-PQ file (bad magic)");
  const uint32_t version = get1<uint32_t>(in);
  PCOPS_CHECK(version == kVersion, Value, "load: expected format version ", kVersion, ", got ", version);
  IvfPqParams p;
  p.dim = get1<int64_t>(in);
  p.nlist = get1<int64_t>(in);
  p.M = get1<int64_t>(in);
  p.nbits = get1<int64_t>(in);
  const uint32_t metric = get1<uint32_t>(in);
  PCOPS_CHECK(metric <= 1, Value, "load: bad metric code ", metric);
  p.metric = static_cast<IvfPqMetric>(metric);
  p.by_residual = get1<uint32_t>(in) != 0;
  IvfPqIndex index(p);
  const bool trained = get1<uint32_t>(in) != 0;
  if (trained) {
    std::vector<float> c(static_cast<size_t>(p.nlist * p.dim)), cb(static_cast<size_t>(p.M * kK * index.dsub()));
    get(in, c.data(), c.size());
    get(in, cb.data(), cb.size());
    index.set_quantizers(c.data(), cb.data());
  }
  for (int64_t l = 0; l < p.nlist; ++l) {
    const int64_t size = get1<int64_t>(in);
    PCOPS_CHECK(size >= 0 && size <= (int64_t{1} << 40), Value, "load: bad list size ", size);
    PCOPS_CHECK(trained || size == 0, Value, "load: an untrained index cannot hold vectors");
    auto& lid = index.ids_[static_cast<size_t>(l)];
    auto& lc = index.codes_[static_cast<size_t>(l)];
    lid.resize(static_cast<size_t>(size));
    lc.resize(static_cast<size_t>(size * p.M));
    get(in, lid.data(), lid.size());
    get(in, lc.data(), lc.size());
    index.ntotal_ += size;
  }
  index.lists_changed();
  return index;
}

IvfPqIndex IvfPqIndex::load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  PCOPS_CHECK(static_cast<bool>(f), Value, "path: cannot open '", path, "' for reading");
  return load(f);
}

namespace cpu::ivfpq_detail {
bool force_scalar(bool on) {
#if PCOPS_IVFPQ_X86
  return g_force_scalar.exchange(on);
#else
  (void)on;
  return true;
#endif
}
bool force_avx2(bool on) {
#if PCOPS_IVFPQ_X86
  return g_force_avx2.exchange(on);
#else
  (void)on;
  return true;
#endif
}
}  // namespace cpu::ivfpq_detail

}  // namespace pcops
