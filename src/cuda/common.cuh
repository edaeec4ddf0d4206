#pragma once
// Shared host-side helpers of the CUDA backend: error checks, the one launch helper, the
// stream-ordered workspace and the upload of host lengths.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "pcops/context.hpp"
#include "pcops/view.hpp"

// for (i = this thread's first item; i < total; i += all threads of the grid)
#define PCOPS_CUDA_GRID_STRIDE(i, total)                                                 \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (total);         \
       i += int64_t{gridDim.x} * blockDim.x)

namespace pcops::cuda::detail {

[[noreturn]] inline void fail(cudaError_t e, const char* what, const char* file, int line) {
  throw std::runtime_error(std::string("pcops CUDA error: ") + what + " failed at " + file + ":" +
                           std::to_string(line) + ": " + cudaGetErrorName(e) + " (" +
                           cudaGetErrorString(e) + ")");
}

#define PCOPS_CUDA_CHECK(expr)                                                        \
  do {                                                                                \
    const cudaError_t pcops_err_ = (expr);                                            \
    if (pcops_err_ != cudaSuccess) ::pcops::cuda::detail::fail(pcops_err_, #expr, __FILE__, __LINE__); \
  } while (0)

inline cudaStream_t stream_of(const CudaContext& ctx) { return static_cast<cudaStream_t>(ctx.stream); }

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Blocks for one thread per item, at least 1 and at most max_blocks (kernels loop grid-stride
// beyond: PCOPS_CUDA_GRID_STRIDE).
inline unsigned grid_blocks(int64_t items, int threads, int64_t max_blocks = int64_t{1} << 20) {
  const int64_t b = ceil_div(items, threads);
  return static_cast<unsigned>(b < 1 ? 1 : (b > max_blocks ? max_blocks : b));
}

// Every kernel launch goes through here: the context's stream, then the launch error check.
template <class... KernelArgs, class... Args>
void launch(const CudaContext& ctx, void (*kernel)(KernelArgs...), dim3 grid, dim3 block,
            size_t shared_bytes, Args&&... args) {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return;
  kernel<<<grid, block, shared_bytes, stream_of(ctx)>>>(std::forward<Args>(args)...);
  PCOPS_CUDA_CHECK(cudaGetLastError());
}

// Device properties of the current device, read once per device.
const cudaDeviceProp& device_properties();

// Temporary device memory for one operator call, released (stream-ordered) on destruction.
class Workspace {
 public:
  explicit Workspace(const CudaContext& ctx) : ctx_(ctx) {}
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  ~Workspace() {
    for (void* p : blocks_) {
      if (ctx_.deallocate) ctx_.deallocate(p);
      else cudaFreeAsync(p, stream_of(ctx_));
    }
  }
  void* bytes(size_t n) {
    if (n == 0) n = 1;
    void* p = nullptr;
    if (ctx_.allocate) {
      p = ctx_.allocate(n);
      if (p == nullptr) throw std::runtime_error("pcops CUDA workspace: allocation of " + std::to_string(n) + " bytes failed");
    } else {
      PCOPS_CUDA_CHECK(cudaMallocAsync(&p, n, stream_of(ctx_)));
    }
    blocks_.push_back(p);
    return p;
  }
  template <class T>
  T* alloc(int64_t count) {
    return static_cast<T*>(bytes(static_cast<size_t>(count < 0 ? 0 : count) * sizeof(T)));
  }

 private:
  const CudaContext& ctx_;
  std::vector<void*> blocks_;
};

// Per-cloud lengths on the device: lengths[b], or `fallback` for every cloud when absent.
// The source is host memory (validated already); the copy is enqueued on the stream.
inline const int64_t* upload_lengths(const CudaContext& ctx, Workspace& ws, const LengthsView& lengths,
                                     int64_t batch, int64_t fallback) {
  std::vector<int64_t> host(static_cast<size_t>(batch > 0 ? batch : 1), fallback);
  for (int64_t b = 0; b < batch; ++b) host[b] = lengths.get(b, fallback);
  int64_t* dev = ws.alloc<int64_t>(static_cast<int64_t>(host.size()));
  // Pageable source: the call returns once the source has been consumed, so `host` may go.
  PCOPS_CUDA_CHECK(cudaMemcpyAsync(dev, host.data(), host.size() * sizeof(int64_t),
                                   cudaMemcpyHostToDevice, stream_of(ctx)));
  return dev;
}

}  // namespace pcops::cuda::detail
