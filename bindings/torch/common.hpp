#pragma once
// Shared helpers of the torch binding: tensors to views, the CPU context that runs on
// at::parallel_for, and the translation of pcops::Error into Python's exception types.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <limits>
#include <optional>
#include <string>
#include <utility>

#if PCOPS_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "index_ranges.hpp"
#include "pcops/context.hpp"
#include "pcops/error.hpp"
#include "pcops/view.hpp"

namespace pcops::torch_binding {

// Coordinates in float32 (float16 / bfloat16 converted exactly), contiguous.
inline at::Tensor as_points(const at::Tensor& t, const char* name, int64_t rank = 3) {
  TORCH_CHECK_VALUE(t.dim() == rank, name, ": expected a ", rank, "-D tensor, got shape ", t.sizes());
  const auto st = t.scalar_type();
  TORCH_CHECK_TYPE(st == at::kFloat || st == at::kHalf || st == at::kBFloat16, name,
                   ": expected float32, float16 or bfloat16 coordinates, got ", st,
                   " (float64 and integer coordinates are not supported; convert with .float())");
  // One copy at most: converted and made contiguous together.
  return t.to(at::kFloat, /*non_blocking=*/false, /*copy=*/false, at::MemoryFormat::Contiguous);
}

// Per-point values (features, weights, gradients) in float32 (float16 / bfloat16 converted
// exactly), contiguous, of the given rank.
// The rank and dtype checks of as_values, without the conversion.
inline void check_values(const at::Tensor& t, const char* name, int64_t rank, const char* shape) {
  TORCH_CHECK_VALUE(t.dim() == rank, name, ": expected a ", rank, "-D tensor ", shape, ", got shape ", t.sizes());
  const auto st = t.scalar_type();
  TORCH_CHECK_TYPE(st == at::kFloat || st == at::kHalf || st == at::kBFloat16, name,
                   ": expected float32, float16 or bfloat16 values, got ", st,
                   " (float64 and integer tensors are not supported; convert with .float())");
}

inline at::Tensor as_values(const at::Tensor& t, const char* name, int64_t rank, const char* shape) {
  check_values(t, name, rank, shape);
  // .contiguous() after .to(): to() keeps a same-dtype tensor as it is when its suggested memory
  // format is already "contiguous", which includes expanded (stride 0) and transposed tensors.
  return t.to(at::kFloat).contiguous();
}

// Indices produced by a forward pass: int64, contiguous, every value in [-1, count).
inline at::Tensor as_indices(const at::Tensor& t, const char* name, int64_t count) {
  TORCH_CHECK_TYPE(t.scalar_type() == at::kLong, name, ": expected an int64 tensor, got ", t.scalar_type());
  at::Tensor c = t.contiguous();
  int64_t lo = -1, hi = -1;
  if (c.is_cpu()) {
    // A plain scan: cheaper than torch reductions here, and it keeps the backward memory-safe
    // when the op is called directly with indices that no forward produced.
    const int64_t* p = c.data_ptr<int64_t>();
    for (int64_t i = 0, n = c.numel(); i < n; ++i) {
      lo = p[i] < lo ? p[i] : lo;
      hi = p[i] > hi ? p[i] : hi;
    }
  } else if (c.numel() > 0) {
    // Bounds known on the host settle it without a sync (index_ranges.hpp); else the exact range.
    const std::optional<IndexRanges> known = known_ranges(c, 1);
    if (known && known->lo[0] >= -1 && known->hi[0] < count) return c;
    const IndexRanges r = read_ranges(c, 1);
    lo = std::min<int64_t>(lo, r.lo[0]);
    hi = std::max<int64_t>(hi, r.hi[0]);
  }
  TORCH_CHECK_INDEX(lo >= -1 && hi < count, name, ": expected indices in [-1, ", count, "), got values in [", lo,
                    ", ", hi, "]");
  return c;
}

// The byte size of an output [a, b, c] of 8-byte elements (zero sizes counted as 1, since the
// strides must fit too) must fit in int64; otherwise the count argument (named) is rejected as a
// ValueError before anything is allocated.
inline void check_output_size(const char* name, int64_t value, int64_t a, int64_t b, int64_t c = 1) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max() / 8;
  bool ok = true;
  int64_t n = 1;
  for (int64_t f : {a, b, c}) {
    f = f > 1 ? f : 1;
    if (n > kMax / f) {
      ok = false;
      break;
    }
    n *= f;
  }
  TORCH_CHECK_VALUE(ok, name, ": ", value, " gives an output of ", a, " x ", b, " x ", c,
                    " elements, which overflows int64");
}

inline PointsView view_of(const at::Tensor& t) {
  return PointsView{t.data_ptr<float>(), t.size(0), t.size(1), t.size(2),
                    t.stride(0),         t.stride(1), t.stride(2)};
}

// A [batch, channels, count] float32 tensor as a FeaturesView (a [B, C, M, S] tensor is passed
// flattened to [B, C, M*S]; it must be contiguous then).
inline FeaturesView features_view_of(const at::Tensor& t) {
  if (t.dim() == 4) {
    return FeaturesView::contiguous(t.data_ptr<float>(), t.size(0), t.size(1), t.size(2) * t.size(3));
  }
  return FeaturesView{t.data_ptr<float>(), t.size(0), t.size(1), t.size(2),
                      t.stride(0),         t.stride(1), t.stride(2)};
}

// Optional per-cloud lengths: int64 (int32 accepted) 1-D tensor on the points' device.
inline std::optional<at::Tensor> as_lengths(const std::optional<at::Tensor>& t, const at::Tensor& points,
                                            const char* name) {
  if (!t.has_value()) return std::nullopt;
  TORCH_CHECK_VALUE(t->device() == points.device(), name, ": expected device ", points.device(),
                    " (as the points), got ", t->device());
  TORCH_CHECK_TYPE(t->scalar_type() == at::kLong || t->scalar_type() == at::kInt, name,
                   ": expected an int64 tensor, got ", t->scalar_type());
  TORCH_CHECK_VALUE(t->dim() == 1, name, ": expected a 1-D tensor, got shape ", t->sizes());
  // The contract validates lengths on the host before any kernel runs (CUDA: SYNC, B values).
  return t->to(at::kLong).contiguous().cpu();
}

inline LengthsView lengths_of(const std::optional<at::Tensor>& t) {
  if (!t.has_value()) return {};
  return LengthsView{t->data_ptr<int64_t>(), t->numel()};
}

inline void check_same_device(const at::Tensor& a, const char* an, const at::Tensor& b, const char* bn) {
  TORCH_CHECK_VALUE(a.device() == b.device(), bn, ": expected device ", a.device(), " (as ", an,
                    "), got ", b.device());
}

inline CpuContext cpu_context() {
  CpuContext ctx;
  ctx.num_threads = at::get_num_threads();
  ctx.parallel_for = [](int64_t begin, int64_t end, int64_t grain,
                        const std::function<void(int64_t, int64_t)>& body) {
    at::parallel_for(begin, end, grain, body);
  };
  return ctx;
}

#if PCOPS_TORCH_CUDA
// The CUDA context of a tensor's device: torch's current stream, workspace from torch's caching
// allocator (stream-ordered on that stream).
inline CudaContext cuda_context(const at::Tensor& t) {
  CudaContext ctx;
  const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(t.device().index());
  ctx.stream = stream.stream();
  ctx.allocate = [stream](size_t bytes) {
    return c10::cuda::CUDACachingAllocator::raw_alloc_with_stream(bytes, stream.stream());
  };
  ctx.deallocate = [](void* ptr) { c10::cuda::CUDACachingAllocator::raw_delete(ptr); };
  return ctx;
}
#endif

// Runs fn, turning pcops::Error into the matching Python exception.
template <class Fn>
auto translate_errors(Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const pcops::Error& e) {
    switch (e.kind()) {
      case ErrorKind::Type: TORCH_CHECK_TYPE(false, e.what());
      case ErrorKind::Index: TORCH_CHECK_INDEX(false, e.what());
      default: TORCH_CHECK_VALUE(false, e.what());
    }
  }
}

}  // namespace pcops::torch_binding
