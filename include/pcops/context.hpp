#pragma once
// Execution context of the CPU backend: the one threading seam and the seed.
#include <cstddef>
#include <cstdint>
#include <functional>

namespace pcops {

// parallel_for(begin, end, grain, body): calls body(chunk_begin, chunk_end) over disjoint chunks
// that cover [begin, end), each at least `grain` long except possibly the last. Chunks may run
// concurrently; body must not throw.
using ParallelFor = std::function<void(int64_t begin, int64_t end, int64_t grain,
                                       const std::function<void(int64_t, int64_t)>& body)>;

struct CpuContext {
  ParallelFor parallel_for;   // empty: the built-in std::thread pool
  int num_threads = 0;        // 0: hardware concurrency (built-in pool only)
  uint64_t seed = 0;          // the only source of randomness
};

// Execution context of the CUDA backend (libpcops_cuda). Every pointer handed to a cuda::
// operator is device memory, except LengthsView, which is host memory (validated on the host
// before any kernel runs, then uploaded). Work is enqueued on `stream` and is asynchronous:
// results are ready when the stream reaches that point.
struct CudaContext {
  void* stream = nullptr;  // a cudaStream_t; nullptr is the legacy default stream
  // Workspace: temporary device memory, released when the operator returns (stream-ordered,
  // so it may be reused by later work on the same stream). Both empty: cudaMallocAsync /
  // cudaFreeAsync on `stream`.
  std::function<void*(size_t bytes)> allocate;
  std::function<void(void* ptr)> deallocate;
};

// Runs body over [begin, end) through ctx.parallel_for, or the built-in pool when unset.
void parallel_for(const CpuContext& ctx, int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& body);

// Number of workers the context will use (for sizing per-worker scratch).
int max_threads(const CpuContext& ctx);

}  // namespace pcops
