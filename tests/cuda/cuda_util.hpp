#pragma once
// Helpers of the CUDA gtest suites: owned device buffers, clouds uploaded as device views, a
// context on a fresh stream, and download with sentinel-prefilled outputs. The CPU backend is the
// oracle (oracle.hpp from tests/cpp supplies clouds and comparisons).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "oracle.hpp"
#include "pcops/ball_query.hpp"
#include "pcops/context.hpp"
#include "pcops/knn.hpp"
#include "pcops/view.hpp"

namespace pcops_cuda_test {

#define PCOPS_TEST_CUDA(expr) ASSERT_EQ((expr), cudaSuccess) << #expr << ": " << cudaGetErrorString(expr)

// Sets an environment variable (a backend's tuning override, read at every call) for the scope
// ("" unsets it: the backend's default), then restores what it was.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* e = std::getenv(name)) saved_ = e, had_ = true;
    if (*value != 0) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_) setenv(name_.c_str(), saved_.c_str(), 1);
    else unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_, saved_;
  bool had_ = false;
};

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    ADD_FAILURE() << what << ": " << cudaGetErrorString(e);
  }
}

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) { resize(n); }
  explicit DeviceBuffer(const std::vector<T>& host) {
    resize(host.size());
    if (!host.empty()) check(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
    check(cudaDeviceSynchronize(), "upload");  // see fill()
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), n_(o.n_) { o.ptr_ = nullptr; o.n_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      if (ptr_) cudaFree(ptr_);
      ptr_ = o.ptr_;
      n_ = o.n_;
      o.ptr_ = nullptr;
      o.n_ = 0;
    }
    return *this;
  }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  void resize(size_t n) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
    n_ = n;
    check(cudaMalloc(&ptr_, (n ? n : 1) * sizeof(T)), "cudaMalloc");
  }
  // Prefill every element with `value` (sentinels), synchronously.
  void fill(const T& value) {
    std::vector<T> host(n_, value);
    if (n_) check(cudaMemcpy(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), "fill");
    // A pageable copy may return before its DMA lands: wait, or a kernel on a non-blocking
    // stream could write its results under the tail of the sentinels.
    check(cudaDeviceSynchronize(), "fill");
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    check(cudaDeviceSynchronize(), "kernel run");
    if (n_) check(cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return host;
  }
  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  size_t size() const { return n_; }

 private:
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

// A cloud resident on the device, with its contiguous view and (for stride tests) the view of a
// [batch][dim][count + 3] copy.
struct DeviceCloud {
  DeviceBuffer<float> data, alt;
  pcops::PointsView view, strided;
  explicit DeviceCloud(pcops_test::Cloud c) : data(c.data) {
    view = pcops::PointsView::contiguous(c.data.empty() ? nullptr : data.data(), c.batch, c.count, c.dim);
    const pcops::PointsView hs = c.strided_view();
    alt = DeviceBuffer<float>(c.alt);
    strided = hs;
    strided.data = alt.data() + (hs.data - c.alt.data());
  }
};

// A context on its own stream (not the legacy default stream), destroyed with the fixture.
struct StreamContext {
  cudaStream_t stream = nullptr;
  pcops::CudaContext ctx;
  StreamContext() {
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    ctx.stream = stream;
  }
  ~StreamContext() {
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
  }
};

// Output pair (dist, idx) on the device, prefilled with the oracle's sentinels.
struct DeviceResult {
  DeviceBuffer<float> dist;
  DeviceBuffer<int64_t> idx;
  explicit DeviceResult(int64_t size) : dist(static_cast<size_t>(size)), idx(static_cast<size_t>(size)) {
    dist.fill(pcops_test::kSentinelDist);
    idx.fill(pcops_test::kSentinelIdx);
  }
  pcops_test::Result download() const { return {dist.download(), idx.download()}; }
};

// The CPU backend's kNN and ball query (sentinel-prefilled outputs): the CUDA tests' references.
inline pcops_test::Result cpu_knn(const pcops::PointsView& q, const pcops::PointsView& x, int64_t k,
                                  pcops::LengthsView ql = {}, pcops::LengthsView xl = {}) {
  pcops_test::Result r = pcops_test::sentinel_result(q.batch * q.count * k);
  pcops::cpu::knn({}, q, x, ql, xl, pcops::KnnParams{k}, r.dist.data(), r.idx.data());
  return r;
}
inline pcops_test::Result cpu_ball(const pcops::PointsView& q, const pcops::PointsView& x, float radius, int64_t K,
                                   pcops::LengthsView ql = {}, pcops::LengthsView xl = {}) {
  pcops_test::Result r = pcops_test::sentinel_result(q.batch * q.count * K);
  pcops::cpu::ball_query({}, q, x, ql, xl, pcops::BallQueryParams{radius, K}, r.dist.data(), r.idx.data());
  return r;
}

}  // namespace pcops_cuda_test
