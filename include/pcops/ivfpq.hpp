#pragma once
// IVF-PQ approximate nearest-neighbour index with faiss IndexIVFPQ semantics (docs/ops/ivfpq.md),
// CPU backend.
//
// Structure: a coarse quantizer of `nlist` centroids [nlist, dim] and a product quantizer of
// `M` sub-quantizers, each 2^nbits = 256 codewords of dsub = dim / M coordinates (codebooks
// [M, 256, dsub]). A vector x is stored in the list of its coarse centroid c(x) as M one-byte
// codes; with `by_residual` the product quantizer encodes r = x - c(x), otherwise x itself.
// Vectors are float32, row-major [n, dim], and must be finite (Value error otherwise).
//
// Arithmetic (fixed, so another backend can reproduce it bit for bit; no FMA contraction):
// - L2 coarse distance: the contract's squared distance (CONTRACTS.md), coordinates in order.
//   Inner product: p_0 = fl(a_0*b_0), p_i = fl(p_{i-1} + fl(a_i*b_i)).
// - Coarse assignment (add): the centroid with the smallest L2 distance (largest inner product),
//   the smallest list number on ties. Residual r_i = fl(x_i - c_i).
// - Encoding (both metrics, as faiss): code_m = the codeword j with the smallest squared distance
//   to sub-vector m of r (or x), the smallest j on ties.
// - Search: the nprobe lists whose centroids rank first by (coarse distance, list) (ascending
//   for L2; descending inner product for IP, then ascending list). For a probed list with
//   centroid c, the look-up table is LUT[m][j] = squared distance between sub-vector m of
//   (q - c) (L2 with by_residual; q otherwise) and codeword j (L2), or the inner product of
//   sub-vector m of q with codeword j (IP). The approximate distance of a stored code is
//   d = fl(d0 + s), s = fl(...fl(LUT[0][code_0] + LUT[1][code_1]) ... + LUT[M-1][code_{M-1}]),
//   with d0 = <q, c> for IP with by_residual and d0 = 0 otherwise (so d = s). This is faiss's
//   scan without precomputed tables (use_precomputed_table = -1).
// - Result: per query the first k candidates of all probed lists ordered by (d ascending, id
//   ascending) for L2, (d descending, id ascending) for IP; exact over the scanned codes (no
//   cap on k, M or nprobe). Slots past the candidates hold (+inf, -1) for L2, (-inf, -1) for IP.
// - Training is deterministic for a given seed (independent of the thread count): k-means with
//   `niter` Lloyd iterations from distinct seeded samples, on at most max_points_per_centroid *
//   (number of centroids) seeded samples; an empty cluster takes half of the largest one (the
//   largest centroid is split by +-1/1024 relative perturbation, as faiss does).
//
// Thread-safety: const members (search, encode, accessors) may run concurrently; mutating ones
// (train, add, remove_ids, reset, set_quantizers) need exclusive access. Work is spread over
// queries / vectors through the context's parallel_for.
//
// File format (save/load), all little-endian:
//   char[8] "PCIVFPQ\0", uint32 version = 1,
//   int64 dim, nlist, M, nbits, uint32 metric (0 = L2, 1 = inner product), uint32 by_residual,
//   uint32 trained; when trained: float32 centroids[nlist * dim], float32 codebooks[M * 256 * dsub];
//   then for each list l in 0..nlist-1: int64 size, int64 ids[size], uint8 codes[size * M].
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "pcops/context.hpp"

namespace pcops {

enum class IvfPqMetric : int { L2 = 0, InnerProduct = 1 };

struct IvfPqParams {
  int64_t dim = 0;
  int64_t nlist = 1;
  int64_t M = 1;      // sub-quantizers; must divide dim
  int64_t nbits = 8;  // bits per code (8 only)
  IvfPqMetric metric = IvfPqMetric::L2;
  bool by_residual = true;
};

struct IvfPqTrainParams {
  int64_t niter = 25;                    // Lloyd iterations of each k-means
  int64_t max_points_per_centroid = 256; // training sample cap per k-means centroid
};

namespace core {
// Value errors for bad parameters (dim >= 1, nlist >= 1, M >= 1 dividing dim, nbits == 8).
void validate_ivfpq_params(const IvfPqParams& p);
// Value error naming `name` when any of the n * dim values is not finite.
void check_finite_vectors(const float* x, int64_t n, int64_t dim, const char* name);
}  // namespace core

class IvfPqIndex {
 public:
  static constexpr int64_t kCodewords = 256;

  explicit IvfPqIndex(const IvfPqParams& params);

  const IvfPqParams& params() const { return params_; }
  int64_t dsub() const { return params_.dim / params_.M; }
  int64_t code_size() const { return params_.M; }
  bool is_trained() const { return trained_; }
  int64_t ntotal() const { return ntotal_; }

  // Trains both quantizers on x [n, dim]; n >= max(nlist, 256). Replaces any earlier training;
  // the index must be empty (Value error otherwise).
  void train(const CpuContext& ctx, const float* x, int64_t n, const IvfPqTrainParams& tp = {});

  // The assignment step of training (every k-means iteration, and the coarse lists of the
  // residuals): assign[i] = the best of the k centroids [k, d] for row i of data [n, d] (host
  // memory), by encode's rule (smallest L2 / largest inner product in coordinate order, the first
  // centroid on ties). train() with an assigner that follows this contract (e.g. one running
  // cuda::ivfpq_assign on a GPU) gives the same quantizers, bit for bit; the updates stay on the
  // CPU (float64 sums in point order).
  using AssignFn = std::function<void(const float* data, int64_t n, int64_t d, const float* centroids, int64_t k,
                                      bool ip, int64_t* assign)>;
  void train(const CpuContext& ctx, const float* x, int64_t n, const IvfPqTrainParams& tp, const AssignFn& assign);
  // Installs trained quantizers: centroids [nlist, dim], codebooks [M, 256, dsub]; the index
  // must be empty.
  void set_quantizers(const float* centroids, const float* codebooks);
  const std::vector<float>& centroids() const { return centroids_; }
  const std::vector<float>& codebooks() const { return codebooks_; }

  // Coarse list [n] and codes [n, M] of x [n, dim], without adding them.
  void encode(const CpuContext& ctx, const float* x, int64_t n, int64_t* lists, uint8_t* codes) const;
  // Appends x [n, dim] with ids [n] (nullptr: ntotal, ntotal + 1, ... as faiss's add).
  void add(const CpuContext& ctx, const float* x, int64_t n, const int64_t* ids = nullptr);
  // Appends n vectors already encoded (lists [n] in [0, nlist), codes [n, M], e.g. by
  // cuda::ivfpq_encode) with ids [n] (nullptr: ntotal, ntotal + 1, ...). IndexError for a list
  // out of range (nothing is added then).
  void add_encoded(const int64_t* lists, const uint8_t* codes, int64_t n, const int64_t* ids = nullptr);
  // distances [nq, k], labels [nq, k]; 1 <= nprobe <= nlist, k >= 0.
  // precomputed_table (L2 with residuals; faiss's use_precomputed_table): the look-up table of
  // list l is term1[l] + term2(q) instead of the distances of the query's residual to the
  // codewords, where term1[l, m, j] = |r_mj|^2 + 2 <c_l,m, r_mj> is computed by the first such
  // search after the quantizers were set (then kept; thread-safe) and term2[m, j] =
  // -2 <q_m, r_mj> once per query; distances are then
  // |q - c_l|^2 + sum_m (term1 + term2). Same value up to rounding, far less work per list; off:
  // the residual tables, whose results equal faiss's with use_precomputed_table = -1. Ignored
  // (the tables do not depend on the list) for inner product or without residuals; a Value error
  // when nlist * M * 256 exceeds kMaxPrecomputed floats.
  // half_tables (faiss GPU's float16 look-up tables): every table entry, once computed in float32
  // (per list, or per query where the table does not depend on the list), is rounded to the
  // nearest float16 (ties to even; overflow to infinity); the code sums then add the rounded
  // entries in float32 in codeword order. Approximate distances, identical on CPU and CUDA.
  void search(const CpuContext& ctx, const float* queries, int64_t nq, int64_t k, int64_t nprobe,
              float* distances, int64_t* labels, bool precomputed_table = false, bool half_tables = false) const;
  static constexpr int64_t kMaxPrecomputed = int64_t{1} << 26;  // 256 MiB of floats
  // Removes every stored vector whose id is in ids [n]; the others keep their order. Returns the
  // number removed.
  int64_t remove_ids(const int64_t* ids, int64_t n);
  // Removes all vectors (keeps the training).
  void reset();

  int64_t list_size(int64_t list) const;
  const std::vector<int64_t>& list_ids(int64_t list) const;
  const std::vector<uint8_t>& list_codes(int64_t list) const;  // [list_size, M]

  void save(std::ostream& out) const;
  void save(const std::string& path) const;
  static IvfPqIndex load(std::istream& in);
  static IvfPqIndex load(const std::string& path);

 private:
  void check_trained(const char* what) const;
  // Appends encoded vectors whose lists are known to be in range (add, add_encoded).
  void append(const int64_t* lists, const uint8_t* codes, int64_t n, const int64_t* ids);
  void prepare_tables();

  IvfPqParams params_;
  bool trained_ = false;
  int64_t ntotal_ = 0;
  std::vector<float> centroids_;    // [nlist, dim]
  std::vector<float> codebooks_;    // [M, 256, dsub]
  // term1 [nlist, M, 256] of precomputed_table searches, built on first use (shared by copies
  // made before it is replaced: it depends only on the quantizers).
  struct Term1;
  std::shared_ptr<Term1> term1_;
  const std::vector<float>& term1() const;
  std::vector<std::vector<int64_t>> ids_;    // per list
  std::vector<std::vector<uint8_t>> codes_;  // per list, [size, M]
  // The lists' codes in blocks of 64 vectors, sub-quantizer-major ([blocks, M, 64] per list), for
  // the vectorised bound of the L2 scan; built by the first search that uses them and replaced
  // (not rebuilt) by every change of the lists.
  struct CodeBlocks;
  std::shared_ptr<CodeBlocks> blocks_;
  const std::vector<std::vector<uint8_t>>& code_blocks() const;
  void lists_changed();
};

// ---- CUDA search (libpcops_cuda) ----
// A searchable device copy of an index in CSR form. Every pointer is device memory:
// centroids [nlist, dim], codebooks [M, 256, dsub] (as IvfPqIndex::centroids / codebooks),
// list_offsets [nlist + 1] int64 (list l holds entries [list_offsets[l], list_offsets[l + 1])),
// ids [ntotal] int64 and codes [ntotal, M] uint8 (the lists concatenated in list order, each in
// its CPU order). list_sizes_host [nlist] is host memory (it sizes the candidate buffers).
struct IvfPqDeviceView {
  IvfPqParams params;
  const float* centroids = nullptr;
  const float* codebooks = nullptr;
  const int64_t* list_offsets = nullptr;
  const int64_t* ids = nullptr;
  const uint8_t* codes = nullptr;
  const int64_t* list_sizes_host = nullptr;
};

namespace cuda {
// The CPU search's contract, bitwise (distances and labels): queries [nq, dim] (device, finite:
// not checked on the device), distances / labels [nq, k] device outputs. Same arithmetic per
// candidate; k <= 1024 with the look-up table in shared memory: one block per query keeps the
// exact top-k (key, id) multiset while scanning; otherwise every scanned candidate is written
// (12 bytes each) and sorted stably by id, then by key, so any k and nprobe work. Enqueued on
// ctx.stream without host synchronisation (candidate segments sized from list_sizes_host).
// half_tables: IvfPqIndex::search's option, the same bits (the fused kernel then keeps its table
// in float16, half the shared memory).
void ivfpq_search(const CudaContext& ctx, const IvfPqDeviceView& index, const float* queries, int64_t nq,
                  int64_t k, int64_t nprobe, float* distances, int64_t* labels, bool half_tables = false);
// IvfPqIndex::encode's contract, bitwise: the coarse list [n] and codes [n, M] of x [n, dim]
// (device memory, finite: not checked on the device) under the quantizers centroids [nlist, dim]
// and codebooks [M, 256, dim / M] (device memory). Enqueued on ctx.stream without host
// synchronisation; the coarse distances run in passes of at most 2^26 (row, list) pairs.
void ivfpq_encode(const CudaContext& ctx, const IvfPqParams& params, const float* centroids, const float* codebooks,
                  const float* x, int64_t n, int64_t* lists, uint8_t* codes);
// IvfPqIndex::AssignFn's contract on device memory (data [n, d], centroids [k, d], assign [n]):
// the best centroid of every row, the CPU's bits; training's assigner on a GPU.
void ivfpq_assign(const CudaContext& ctx, const float* data, int64_t n, int64_t d, const float* centroids, int64_t k,
                  bool ip, int64_t* assign);
}  // namespace cuda

}  // namespace pcops
