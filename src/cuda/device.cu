// Device-wide facts shared by the CUDA operators.
#include <mutex>

#include "cuda/common.cuh"

namespace pcops::cuda::detail {

const cudaDeviceProp& device_properties() {
  constexpr int kMaxDevices = 64;
  static std::mutex mu;
  static cudaDeviceProp props[kMaxDevices];
  static bool known[kMaxDevices] = {};
  int dev = 0;
  PCOPS_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 0 || dev >= kMaxDevices) throw std::runtime_error("pcops CUDA: device ordinal out of range");
  std::lock_guard<std::mutex> lock(mu);
  if (!known[dev]) {
    PCOPS_CUDA_CHECK(cudaGetDeviceProperties(&props[dev], dev));
    known[dev] = true;
  }
  return props[dev];
}

}  // namespace pcops::cuda::detail
