#pragma once
// Helpers of the ragged (flat, CSR offsets) operators' bindings.
#include "common.hpp"
#include "pcops/ragged.hpp"

namespace pcops::torch_binding {

// Flat [N, D] coordinates in float32 (float16 / bfloat16 converted exactly), contiguous.
inline at::Tensor as_flat_points(const at::Tensor& t, const char* name) { return as_points(t, name, 2); }

inline RaggedPointsView ragged_view_of(const at::Tensor& t) {
  return RaggedPointsView{t.data_ptr<float>(), t.size(0), t.size(1), t.stride(0), t.stride(1)};
}

// CSR offsets: a 1-D int64 (int32 accepted) tensor, read on the host.
inline at::Tensor as_offsets(const at::Tensor& t, const at::Tensor& points, const char* name) {
  TORCH_CHECK_VALUE(t.device() == points.device(), name, ": expected device ", points.device(),
                    " (as the points), got ", t.device());
  TORCH_CHECK_TYPE(t.scalar_type() == at::kLong || t.scalar_type() == at::kInt, name,
                   ": expected an int64 tensor, got ", t.scalar_type());
  TORCH_CHECK_VALUE(t.dim() == 1, name, ": expected a 1-D tensor, got shape ", t.sizes());
  return t.to(at::kLong).contiguous().cpu();
}

inline OffsetsView offsets_of(const at::Tensor& t) {
  return OffsetsView{t.data_ptr<int64_t>(), t.numel()};
}

// An EdgeAllocator that allocates the [2, E] int64 result tensor.
struct EdgeTensor {
  at::Tensor out;
  at::TensorOptions options;
  EdgeAllocator allocator() {
    return [this](int64_t e) {
      out = at::empty({2, e}, options.dtype(at::kLong));
      return out.data_ptr<int64_t>();
    };
  }
};

}  // namespace pcops::torch_binding
