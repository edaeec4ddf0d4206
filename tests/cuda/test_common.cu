// The CUDA backend's shared helpers: host-to-device copies through kernel arguments (every size
// around the 3840-byte argument blob and the 64 KiB switch to a pageable copy), in stream order
// behind earlier work, and the lengths upload with and without lengths.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "cuda/common.cuh"
#include "cuda_util.hpp"

namespace {

using pcops_cuda_test::DeviceBuffer;
using pcops_cuda_test::StreamContext;

TEST(CudaCommon, CopyToDeviceAsyncEverySize) {
  StreamContext sc;
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{3839}, size_t{3840}, size_t{3841}, size_t{7681}, size_t{65536},
                       size_t{65537}, size_t{200000}}) {
    SCOPED_TRACE(bytes);
    std::vector<unsigned char> host(bytes);
    for (size_t i = 0; i < bytes; ++i) host[i] = static_cast<unsigned char>((i * 131 + 7) & 0xff);
    DeviceBuffer<unsigned char> dev(bytes + 16);
    dev.fill(0xab);
    pcops::cuda::detail::copy_to_device_async(sc.ctx, dev.data(), host.data(), bytes);
    const std::vector<unsigned char> got = dev.download();
    for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(got[i], host[i]) << i;
    for (size_t i = bytes; i < bytes + 16; ++i) ASSERT_EQ(got[i], 0xab) << "past the end " << i;
  }
}

TEST(CudaCommon, UploadLengthsPresentAndAbsent) {
  StreamContext sc;
  for (int64_t batch : {0, 1, 5, 700}) {  // 700 x 8 bytes: two argument blobs
    SCOPED_TRACE(batch);
    std::vector<int64_t> lens(static_cast<size_t>(batch));
    std::iota(lens.begin(), lens.end(), int64_t{3});
    pcops::cuda::detail::Workspace ws(sc.ctx);
    const int64_t* with = pcops::cuda::detail::upload_lengths(sc.ctx, ws, pcops::LengthsView{lens.data(), batch},
                                                              batch, 99);
    const int64_t* without = pcops::cuda::detail::upload_lengths(sc.ctx, ws, pcops::LengthsView{}, batch, 99);
    const size_t n = static_cast<size_t>(batch > 0 ? batch : 1);
    std::vector<int64_t> a(n), b(n);
    ASSERT_EQ(cudaMemcpyAsync(a.data(), with, n * sizeof(int64_t), cudaMemcpyDeviceToHost, sc.stream), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(b.data(), without, n * sizeof(int64_t), cudaMemcpyDeviceToHost, sc.stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(sc.stream), cudaSuccess);
    for (int64_t i = 0; i < batch; ++i) EXPECT_EQ(a[i], i + 3);
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(b[i], 99);
  }
}

}  // namespace
