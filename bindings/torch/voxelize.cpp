// torch.ops.pcops.voxelize: CPU and CUDA registrations (contract: include/pcops/voxelize.hpp). The
// grid parameters and ptr are read on the host (copied there for CUDA points; grid parameters
// may also be given as host tensors, as the Python wrapper does for numbers).
#include "pcops/voxelize.hpp"

#include "common.hpp"

namespace pcops::torch_binding {
namespace {

// float32 / float64 run natively; float16 / bfloat16 are converted exactly to float32 and
// integers to float64.
at::ScalarType compute_type(at::ScalarType st) {
  if (st == at::kDouble) return at::kDouble;
  if (at::isFloatingType(st)) return at::kFloat;
  TORCH_CHECK_TYPE(at::isIntegralType(st, /*includeBool=*/false), "points: expected a real dtype, got ", st);
  return at::kDouble;
}

at::Tensor grid_vec(const std::optional<at::Tensor>& t, const at::Tensor& points, at::ScalarType st, int64_t D,
                    const char* name) {
  if (!t.has_value()) return at::Tensor();
  // Grid parameters are read on the host: a host tensor is taken as it is (no device round
  // trip); a device tensor must be on points' device.
  if (!t->is_cpu()) check_same_device(points, "points", *t, name);
  at::Tensor v = *t;
  if (v.numel() == 1 && D > 1) v = v.reshape({1}).expand({D});
  TORCH_CHECK_VALUE(v.numel() == D, name, ": expected ", D, " values (one per dimension of points) or one, got ",
                    v.numel(), " (shape ", t->sizes(), ")");
  return v.reshape({D}).to(at::kCPU).to(st).contiguous();
}

using VoxelOutputs = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// run(points, N, D, size, start, end, ptr, B, voxel_id, perm, allocate) with typed pointers.
template <class Run>
VoxelOutputs voxelize_impl(const at::Tensor& points_in, const at::Tensor& voxel_size_in,
                           const std::optional<at::Tensor>& ptr_in, const std::optional<at::Tensor>& start_in,
                           const std::optional<at::Tensor>& end_in, Run run) {
  TORCH_CHECK_VALUE(points_in.dim() == 2, "points: expected a 2-D tensor [N, D], got shape ", points_in.sizes());
  const at::ScalarType st = compute_type(points_in.scalar_type());
  const at::Tensor points = points_in.to(st).contiguous();
  const int64_t N = points.size(0), D = points.size(1);
  TORCH_CHECK_VALUE(D >= 1, "points: expected at least one coordinate, got shape ", points_in.sizes());
  const at::Tensor size = grid_vec(voxel_size_in, points_in, st, D, "voxel_size");
  const at::Tensor start = grid_vec(start_in, points_in, st, D, "start");
  const at::Tensor end = grid_vec(end_in, points_in, st, D, "end");
  at::Tensor ptr;
  int64_t B = 1;
  if (ptr_in.has_value()) {
    check_same_device(points_in, "points", *ptr_in, "ptr");
    TORCH_CHECK_TYPE(ptr_in->scalar_type() == at::kLong || ptr_in->scalar_type() == at::kInt,
                     "ptr: expected an int64 tensor, got ", ptr_in->scalar_type());
    TORCH_CHECK_VALUE(ptr_in->dim() == 1 && ptr_in->size(0) >= 1, "ptr: expected a 1-D tensor of B + 1 offsets, got shape ",
                      ptr_in->sizes());
    ptr = ptr_in->to(at::kCPU).to(at::kLong).contiguous();
    B = ptr.size(0) - 1;
  }
  const auto lopt = points_in.options().dtype(at::kLong);
  at::Tensor voxel_id = at::empty({N}, lopt), perm = at::empty({N}, lopt);
  at::Tensor coords, batch, counts, voxel_ptr;
  translate_errors([&] {
    auto allocate = [&](int64_t V) {
      coords = at::empty({V, D}, lopt);
      batch = at::empty({V}, lopt);
      counts = at::empty({V}, lopt);
      voxel_ptr = at::empty({V + 1}, lopt);
      return VoxelBuffers{coords.data_ptr<int64_t>(), batch.data_ptr<int64_t>(), counts.data_ptr<int64_t>(),
                          voxel_ptr.data_ptr<int64_t>()};
    };
    const int64_t* p = ptr.defined() ? ptr.data_ptr<int64_t>() : nullptr;
    if (st == at::kDouble) {
      auto g = [](const at::Tensor& t) { return t.defined() ? t.data_ptr<double>() : nullptr; };
      run(points.data_ptr<double>(), N, D, g(size), g(start), g(end), p, B, voxel_id.data_ptr<int64_t>(),
          perm.data_ptr<int64_t>(), allocate);
    } else {
      auto g = [](const at::Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; };
      run(points.data_ptr<float>(), N, D, g(size), g(start), g(end), p, B, voxel_id.data_ptr<int64_t>(),
          perm.data_ptr<int64_t>(), allocate);
    }
  });
  return {voxel_id, coords, batch, counts, voxel_ptr, perm};
}

VoxelOutputs voxelize_cpu(const at::Tensor& points, const at::Tensor& voxel_size, const std::optional<at::Tensor>& ptr,
                          const std::optional<at::Tensor>& start, const std::optional<at::Tensor>& end) {
  return voxelize_impl(points, voxel_size, ptr, start, end,
                       [](auto&&... a) { return cpu::voxelize(cpu_context(), a...); });
}

#if PCOPS_TORCH_CUDA
VoxelOutputs voxelize_cuda(const at::Tensor& points, const at::Tensor& voxel_size,
                           const std::optional<at::Tensor>& ptr, const std::optional<at::Tensor>& start,
                           const std::optional<at::Tensor>& end) {
  const c10::cuda::CUDAGuard guard(points.device());
  const CudaContext ctx = cuda_context(points);
  return voxelize_impl(points, voxel_size, ptr, start, end,
                       [&](auto&&... a) { return cuda::voxelize(ctx, a...); });
}
#endif

}  // namespace

TORCH_LIBRARY_FRAGMENT(pcops, m) {
  m.def("voxelize(Tensor points, Tensor voxel_size, Tensor? ptr=None, Tensor? start=None, Tensor? end=None) -> "
        "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(pcops, CPU, m) { m.impl("voxelize", &voxelize_cpu); }

#if PCOPS_TORCH_CUDA
TORCH_LIBRARY_IMPL(pcops, CUDA, m) { m.impl("voxelize", &voxelize_cuda); }
#endif

}  // namespace pcops::torch_binding
