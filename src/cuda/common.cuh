#pragma once
// Shared host-side helpers of the CUDA backend: error checks, the one launch helper, the
// stream-ordered workspace and the upload of host lengths.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
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
    for (void* p : blocks_) free_block(p);
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
  // Gives one block of this workspace back before the workspace ends, stream-ordered as at the end
  // (work already enqueued on the stream may still use it; later work may reuse it). A pointer not
  // from this workspace is ignored.
  void release(void* p) {
    const auto it = std::find(blocks_.begin(), blocks_.end(), p);
    if (it == blocks_.end()) return;
    blocks_.erase(it);
    free_block(p);
  }

 private:
  void free_block(void* p) {
    if (ctx_.deallocate) ctx_.deallocate(p);
    else cudaFreeAsync(p, stream_of(ctx_));
  }

  const CudaContext& ctx_;
  std::vector<void*> blocks_;
};

// Several workspace arrays in one allocation (one allocator call and one release instead of one
// per array, which is host time on every operator call): reserve() each array's size, allocate()
// once, then at() gives each array (every one starts on a 256-byte boundary).
class WorkspaceLayout {
 public:
  static constexpr size_t kAlign = 256;
  template <class T>
  size_t reserve(int64_t count) {
    return reserve_bytes(static_cast<size_t>(count < 0 ? 0 : count) * sizeof(T));
  }
  size_t reserve_bytes(size_t bytes) {
    const size_t offset = size_;
    size_ += (bytes + kAlign - 1) / kAlign * kAlign;
    return offset;
  }
  void allocate(Workspace& ws) { base_ = static_cast<unsigned char*>(ws.bytes(size_)); }
  template <class T>
  T* at(size_t offset) const {
    return reinterpret_cast<T*>(base_ + offset);
  }

 private:
  size_t size_ = 0;
  unsigned char* base_ = nullptr;
};

// Host-to-device copies of small tables through kernel arguments: a pageable cudaMemcpyAsync
// first waits for the stream (the caller would stop running ahead of the GPU), and a pinned
// staging buffer would need its own lifetime tracking; a launch's arguments are copied at launch.
struct ArgBlob {
  static constexpr int kBytes = 3840;  // with the other arguments under the 4 KB parameter limit
  unsigned char bytes[kBytes];
};

static __global__ void __launch_bounds__(256) arg_blob_kernel(ArgBlob blob, int n, unsigned char* dst) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = blob.bytes[i];
}

// Copies `bytes` bytes of host memory to device memory `dst` in stream order without waiting:
// through kernel arguments up to kBlobLimit bytes (a launch per 3840 bytes), else a pageable copy.
inline void copy_to_device_async(const CudaContext& ctx, void* dst, const void* src, size_t bytes) {
  constexpr size_t kBlobLimit = size_t{64} << 10;
  if (bytes == 0) return;
  if (bytes > kBlobLimit) {
    PCOPS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_of(ctx)));
    return;
  }
  const auto* in = static_cast<const unsigned char*>(src);
  auto* out = static_cast<unsigned char*>(dst);
  for (size_t off = 0; off < bytes; off += ArgBlob::kBytes) {
    const size_t n = std::min<size_t>(ArgBlob::kBytes, bytes - off);
    ArgBlob blob;
    std::memcpy(blob.bytes, in + off, n);
    launch(ctx, arg_blob_kernel, dim3(1), dim3(256), 0, blob, static_cast<int>(n), out + off);
  }
}

// ctx, or, when it has no allocator, ctx with stream-ordered cudaMallocAsync / cudaFreeAsync on
// its stream: for objects (a SpatialIndex built for one operator call) whose memory should be
// released in stream order like a Workspace.
inline CudaContext stream_ordered(const CudaContext& ctx) {
  CudaContext c = ctx;
  if (!c.allocate) {
    const cudaStream_t s = stream_of(ctx);
    c.allocate = [s](size_t bytes) {
      void* p = nullptr;
      return cudaMallocAsync(&p, bytes, s) == cudaSuccess ? p : nullptr;
    };
    c.deallocate = [s](void* p) { cudaFreeAsync(p, s); };
  }
  return c;
}

// Whether the CUDA operators' index route applies: PCOPS_CUDA_<op>_INDEX = always | never, else
// the measured rule (k <= 32, a cloud of at least 100k points, at least one query per 8 points).
// The override is read once, when the rule is made, so per-cloud decisions cost no getenv.
class IndexRoute {
 public:
  explicit IndexRoute(const char* env) {
    if (const char* e = std::getenv(env); e != nullptr && *e != 0) {
      if (std::strcmp(e, "always") == 0) force_ = 1;
      if (std::strcmp(e, "never") == 0) force_ = -1;
    }
  }
  bool operator()(int64_t k, const LengthsView& query_lengths, int64_t M, const LengthsView& ref_lengths,
                  int64_t N, int64_t B) const {
    if (k > 32 || N >= (int64_t{1} << 31)) return false;
    if (force_ != 0) return force_ > 0;
    int64_t queries = 0, points = 0, largest = 0;
    for (int64_t b = 0; b < B; ++b) {
      queries += query_lengths.get(b, M);
      const int64_t n = ref_lengths.get(b, N);
      points += n;
      largest = std::max(largest, n);
    }
    return largest >= 100000 && queries * 8 >= points;
  }
  // One cloud of n references and m queries.
  bool operator()(int64_t k, int64_t m, int64_t n) const { return (*this)(k, LengthsView{}, m, LengthsView{}, n, 1); }

 private:
  int force_ = 0;  // 1: always, -1: never, 0: the rule
};

template <class T>
__global__ void fill_kernel(T* p, int64_t n, T value) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    p[i] = value;
}

// Per-cloud lengths on the device: lengths[b], or `fallback` for every cloud when absent.
// Present lengths are host memory (validated already), copied without waiting for the stream;
// absent lengths are filled by a kernel.
inline const int64_t* upload_lengths(const CudaContext& ctx, Workspace& ws, const LengthsView& lengths,
                                     int64_t batch, int64_t fallback) {
  const int64_t n = batch > 0 ? batch : 1;
  int64_t* dev = ws.alloc<int64_t>(n);
  if (!lengths.present()) {
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(ceil_div(n, int64_t{256}), 1024));
    launch(ctx, fill_kernel<int64_t>, dim3(blocks), dim3(256), 0, dev, n, fallback);
    return dev;
  }
  std::vector<int64_t> host(static_cast<size_t>(n), fallback);
  for (int64_t b = 0; b < batch; ++b) host[b] = lengths.get(b, fallback);
  copy_to_device_async(ctx, dev, host.data(), host.size() * sizeof(int64_t));
  return dev;
}

// Ordered-int encoding of a float (integer order is float order), for boxes reduced with integer
// atomics, and back.
__device__ __forceinline__ int ordered_int(float f) {
  const int i = __float_as_int(f);
  return i < 0 ? i ^ 0x7FFFFFFF : i;
}
__device__ __forceinline__ float from_ordered_int(int i) { return __int_as_float(i < 0 ? i ^ 0x7FFFFFFF : i); }

// A thread's running box of finite 3-D points in ordered ints (the bounding-box kernels of the
// grid kNN and of the spatial index): add() each finite point, then flush() reduces the box over
// the warp (every lane calls it) and lane 0 applies one atomicMin / atomicMax per axis, unless the
// warp saw no point.
struct OrderedBox3 {
  int mn[3] = {0x7FFFFFFF, 0x7FFFFFFF, 0x7FFFFFFF};
  int mx[3] = {static_cast<int>(0x80000000u), static_cast<int>(0x80000000u), static_cast<int>(0x80000000u)};
  __device__ __forceinline__ void add(float x, float y, float z) {
    const int v[3] = {ordered_int(x), ordered_int(y), ordered_int(z)};
    for (int a = 0; a < 3; ++a) {
      mn[a] = min(mn[a], v[a]);
      mx[a] = max(mx[a], v[a]);
    }
  }
  __device__ __forceinline__ void flush(int* bmin, int* bmax) {
    for (int a = 0; a < 3; ++a) {
      mn[a] = __reduce_min_sync(0xFFFFFFFFu, mn[a]);
      mx[a] = __reduce_max_sync(0xFFFFFFFFu, mx[a]);
    }
    if ((threadIdx.x & 31) == 0 && mn[0] != 0x7FFFFFFF) {
      for (int a = 0; a < 3; ++a) {
        atomicMin(&bmin[a], mn[a]);
        atomicMax(&bmax[a], mx[a]);
      }
    }
  }
};

}  // namespace pcops::cuda::detail
