#include "pcops/point_conv.hpp"

#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <tuple>
#include <vector>

#include "common.hpp"
#include "index_ranges.hpp"

namespace pcops::torch_binding {
namespace {

// features [N_in, C_in], weights [K, C_out, C_in], triplets int64 [T, 3]: framework checks;
// features and weights stay as given (each path converts them once: float32 copies for the
// exact kernels, 16-bit dense rows for the tensor cores), triplets contiguous. Triplet ranges
// are checked by the core (CPU) or check_triplet_ranges (CUDA).
struct Inputs {
  at::Tensor features, weights, triplets;
  PointConvShape shape;
};

// Memory for one output, requested by the operator when it is about to write it (the type of
// cuda::OutputAllocator); empty: the output is not requested.
using Allocator = std::function<void*()>;

Inputs point_conv_inputs(const at::Tensor& features_in, const at::Tensor& weights_in,
                         const at::Tensor& triplets_in, int64_t num_out) {
  check_same_device(features_in, "features", weights_in, "weights");
  check_same_device(features_in, "features", triplets_in, "triplets");
  check_values(features_in, "features", 2, "[N_in, C_in]");
  check_values(weights_in, "weights", 3, "[K, C_out, C_in]");
  TORCH_CHECK_VALUE(weights_in.size(2) == features_in.size(1), "weights: expected shape [K, C_out, ",
                    features_in.size(1), "] (C_in of features), got ", weights_in.sizes());
  TORCH_CHECK_TYPE(triplets_in.scalar_type() == at::kLong, "triplets: expected an int64 tensor, got ",
                   triplets_in.scalar_type());
  TORCH_CHECK_VALUE(triplets_in.dim() == 2 && triplets_in.size(1) == 3,
                    "triplets: expected shape [T, 3] (rows i, j, k), got ", triplets_in.sizes());
  TORCH_CHECK_VALUE(num_out >= 0, "num_out: expected a non-negative output size, got ", num_out);
  Inputs in{features_in, weights_in, triplets_in.contiguous(), {}};
  in.shape = PointConvShape{features_in.size(0), num_out,           features_in.size(1),
                            weights_in.size(1),  weights_in.size(0), in.triplets.size(0)};
  check_output_size("num_out", num_out, num_out, weights_in.size(1));
  return in;
}

// grad_out [N_out, C_out] (rank, dtype and shape).
void check_grad_out(const at::Tensor& grad_out, const Inputs& in) {
  check_values(grad_out, "grad_out", 2, "[N_out, C_out]");
  TORCH_CHECK_VALUE(grad_out.size(0) == in.shape.num_out && grad_out.size(1) == in.shape.channels_out,
                    "grad_out: expected shape [", in.shape.num_out, ", ", in.shape.channels_out, "], got ",
                    grad_out.sizes());
}

at::Tensor as_float(const at::Tensor& t) { return t.to(at::kFloat).contiguous(); }

// "exact" (the contract's order, float32) or "fast" (CUDA tensor cores for 16-bit inputs).
bool fast_mode(c10::string_view mode) {
  TORCH_CHECK_VALUE(mode == "exact" || mode == "fast", "mode: expected \"exact\" or \"fast\", got \"",
                    std::string(mode), "\"");
  return mode == "fast";
}

// CUDA triplets are range-checked here, on the host, before any kernel runs (the CPU core
// checks its own), against the column ranges known on the host (index_ranges.hpp): read back once
// per unchanged tensor, or recorded by point_conv_triplets, so the forward, the backward and every
// layer on the same triplets run without waiting for the stream.
void check_triplet_ranges(const Inputs& in) {
  if (in.triplets.is_cpu() || in.shape.triplets == 0) return;
  const int64_t bound[3] = {in.shape.num_out, in.shape.num_in, in.shape.kernels};
  const auto inside = [&](const IndexRanges& r) {
    return r.lo[0] >= 0 && r.hi[0] < bound[0] && r.lo[1] >= 0 && r.hi[1] < bound[1] && r.lo[2] >= 0 &&
           r.hi[2] < bound[2];
  };
  if (const std::optional<IndexRanges> known = known_ranges(in.triplets, 3); known && inside(*known)) return;
  const IndexRanges r = read_ranges(in.triplets, 3);
  const char* what[3] = {"output index i", "input index j", "kernel index k"};
  for (int c = 0; c < 3; ++c)
    TORCH_CHECK_INDEX(r.lo[c] >= 0 && r.hi[c] < bound[c], "triplets: expected the ", what[c], " (column ", c,
                      ") in [0, ", bound[c], "), got values in [", r.lo[c], ", ", r.hi[c], "]");
}

// The groupings of the triplets kept with them (cpu:: and cuda::point_conv_group,
// cuda::point_conv_mma_group), so that the layers and the backward on one triplet tensor sort it
// once per step and key layout instead of every call. An entry lives while its triplets do,
// unchanged (TensorStamp), for CUDA on the stream that made it (so no other stream reads it); dead
// or changed ones are dropped at the next call, and beyond kEntries the oldest.
// PCOPS_POINT_CONV_KEEP=0 keeps none (every call sorts). Inference tensors (no version counter)
// are never kept. CPU triplets are also fingerprinted every call (cpu::point_conv_fingerprint,
// the one pass over them that the call's range check was before), so values rewritten past the
// version counter (a NumPy view, .data) are grouped again; on CUDA that would cost a stream sync
// a call, and such writes keep the grouping made before (as autograd's saved tensors miss them).
class KeptGroupings {
 public:
  // The grouping `info` of triplets (made by make(buffer) if not kept yet) whose values have the
  // fingerprint `print` (CUDA: 0); nullptr: none kept.
  template <class Make>
  const void* get(const at::Tensor& triplets, const PointConvGrouping& info, uint64_t print, Make make) {
    if (!enabled() || triplets.is_inference() || info.bytes == 0) return nullptr;
    int64_t stream = -1;
#if PCOPS_TORCH_CUDA
    if (triplets.is_cuda()) stream = c10::cuda::getCurrentCUDAStream(triplets.get_device()).id();
#endif
    const std::lock_guard<std::mutex> lock(mutex_);
    std::erase_if(entries_, [&](const Entry& e) {
      return e.stamp.expired() || (e.stamp.of(triplets) && (!e.stamp.same(triplets) || e.print != print));
    });
    for (const Entry& e : entries_)
      if (e.stream == stream && e.info.id == info.id && e.stamp.same(triplets))  // (the id sets the size)
        return e.grouping.data_ptr();
    at::Tensor g = at::empty({static_cast<int64_t>(info.bytes)}, triplets.options().dtype(at::kByte));
    make(g.data_ptr());
    if (entries_.size() >= kEntries) entries_.erase(entries_.begin());
    entries_.push_back(Entry{TensorStamp(triplets), stream, print, info, g});
    return g.data_ptr();
  }
  static bool enabled() {
    const char* e = std::getenv("PCOPS_POINT_CONV_KEEP");
    return e == nullptr || std::strcmp(e, "0") != 0;
  }
  // Bytes held (after dropping the dead and changed entries); clear: drops every entry.
  int64_t held(bool clear) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (clear) entries_.clear();
    std::erase_if(entries_, [](const Entry& e) { return e.stamp.expired(); });
    int64_t bytes = 0;
    for (const Entry& e : entries_) bytes += static_cast<int64_t>(e.info.bytes);
    return bytes;
  }

 private:
  // (A network keeps a few a triplet tensor; dead ones go at every call, so this bounds only many
  // live triplet tensors.)
  static constexpr size_t kEntries = 256;
  struct Entry {
    TensorStamp stamp;
    int64_t stream;  // CUDA: the stream's id; CPU: -1
    uint64_t print;  // CPU: the values' fingerprint; CUDA: 0
    PointConvGrouping info;
    at::Tensor grouping;
  };
  std::mutex mutex_;
  std::vector<Entry> entries_;
};

// Never destroyed (nor the tensors it holds), so no exit-time order with the CUDA context matters.
KeptGroupings& kept_groupings() {
  static KeptGroupings& k = *new KeptGroupings;
  return k;
}

// The kept groupings of the requested steps: the CPU's, or CUDA's (fast: the tensor-core path's,
// else the exact path's).
PointConvKept kept_for(const at::Tensor& triplets, const PointConvShape& s, bool fast, bool forward,
                       bool grad_features, bool grad_weights) {
  PointConvKept k;
  const int64_t* t = triplets.data_ptr<int64_t>();
  const bool cpu = triplets.is_cpu();
  const bool any = (forward || grad_features || grad_weights) && KeptGroupings::enabled() && !triplets.is_inference();
  const uint64_t print = cpu && any ? cpu::point_conv_fingerprint(cpu_context(), t, s.triplets) : 0;
  const auto one = [&](bool need, PointConvStep step) -> const void* {
    if (!need) return nullptr;
    if (cpu)
      return kept_groupings().get(triplets, cpu::point_conv_grouping(s, step), print, [&](void* dst) {
        cpu::point_conv_group(cpu_context(), s, step, t, dst);
      });
#if PCOPS_TORCH_CUDA
    const PointConvGrouping info = fast ? cuda::point_conv_mma_grouping(s, step) : cuda::point_conv_grouping(s, step);
    return kept_groupings().get(triplets, info, 0, [&](void* dst) {
      if (fast) cuda::point_conv_mma_group(cuda_context(triplets), s, step, t, dst);
      else cuda::point_conv_group(cuda_context(triplets), s, step, t, dst);
    });
#else
    (void)fast;
    return nullptr;
#endif
  };
  k.forward = one(forward, PointConvStep::kForward);
  k.grad_weights = one(grad_weights, PointConvStep::kGradWeights);
  k.grad_features = one(grad_features, PointConvStep::kGradFeatures);
  return k;
}

#if PCOPS_TORCH_CUDA
// The tensor-core path takes the call: fast mode, CUDA, features and weights of one 16-bit
// dtype and a supported shape.
bool use_mma(bool fast, const Inputs& in) {
  const auto st = in.features.scalar_type();
  return fast && in.features.is_cuda() && (st == at::kHalf || st == at::kBFloat16) &&
         in.weights.scalar_type() == st && cuda::point_conv_mma_supported(in.shape);
}

// Dense rows at a 16-byte aligned address (the kernels load 16 bytes at a time): a view at an
// odd offset is copied.
at::Tensor dense16(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  return reinterpret_cast<uintptr_t>(c.data_ptr()) % 16 == 0 ? c : c.clone();
}

Half16 half16_of(const at::Tensor& t) { return t.scalar_type() == at::kHalf ? Half16::kFloat16 : Half16::kBFloat16; }
#endif

template <class Run>
at::Tensor point_conv_impl(const at::Tensor& features_in, const at::Tensor& weights_in,
                           const at::Tensor& triplets_in, int64_t num_out, c10::string_view mode, Run run) {
  const bool fast = fast_mode(mode);
  const Inputs in = point_conv_inputs(features_in, weights_in, triplets_in, num_out);
  check_triplet_ranges(in);
#if PCOPS_TORCH_CUDA
  if (use_mma(fast, in)) {
    // The output is allocated when the operator asks for it: after its sort, whose second key
    // buffer is then gone.
    const at::Tensor f = dense16(in.features), w = dense16(in.weights);
    at::Tensor out;
    translate_errors([&] {
      const PointConvKept kept = kept_for(in.triplets, in.shape, true, true, false, false);
      cuda::point_conv_mma(cuda_context(f), in.shape, half16_of(f), f.data_ptr(), w.data_ptr(),
                           in.triplets.data_ptr<int64_t>(), cuda::OutputAllocator([&] {
                             out = at::empty({num_out, in.shape.channels_out}, f.options());
                             return out.data_ptr();
                           }),
                           kept);
    });
    return out;
  }
#else
  (void)fast;
#endif
  // The output is allocated when the operator asks for it (on CUDA after its grouping's sort).
  const at::Tensor f = as_float(in.features), w = as_float(in.weights);
  at::Tensor out;
  const Allocator alloc([&] {
    out = at::empty({num_out, in.shape.channels_out}, f.options());
    return out.data_ptr();
  });
  translate_errors([&] {
    run(in.triplets, in.shape, f.data_ptr<float>(), w.data_ptr<float>(), in.triplets.data_ptr<int64_t>(), alloc);
  });
  return out.to(features_in.scalar_type());
}

// The gradients of f and w: compute(gf, gw) gets an allocator for each requested one (empty for
// the other), which makes the gradient a tensor like f or w when the operator asks for it; an
// unrequested gradient is returned as zeros (not computed).
template <class Compute>
std::tuple<at::Tensor, at::Tensor> gradients_on_request(const at::Tensor& f, const at::Tensor& w, bool need_features,
                                                        bool need_weights, Compute compute) {
  at::Tensor gf, gw;
  const auto on_request = [](bool need, at::Tensor& dst, const at::Tensor& like) {
    if (!need) return Allocator();
    return Allocator([&dst, &like] {
      dst = at::empty(like.sizes(), like.options());
      return dst.data_ptr();
    });
  };
  translate_errors([&] { compute(on_request(need_features, gf, f), on_request(need_weights, gw, w)); });
  if (!need_features) gf = at::zeros(f.sizes(), f.options());
  if (!need_weights) gw = at::zeros(w.sizes(), w.options());
  return {gf, gw};
}

template <class Run>
std::tuple<at::Tensor, at::Tensor> point_conv_backward_impl(const at::Tensor& grad_out_in,
                                                            const at::Tensor& features_in,
                                                            const at::Tensor& weights_in,
                                                            const at::Tensor& triplets_in, int64_t num_out,
                                                            bool need_features, bool need_weights,
                                                            c10::string_view mode, Run run) {
  const bool fast = fast_mode(mode);
  check_same_device(features_in, "features", grad_out_in, "grad_out");
  const Inputs in = point_conv_inputs(features_in, weights_in, triplets_in, num_out);
  check_grad_out(grad_out_in, in);
  check_triplet_ranges(in);
#if PCOPS_TORCH_CUDA
  if (use_mma(fast, in)) {
    // grad_out in the features' 16-bit dtype (the forward's output dtype).
    const at::Tensor f = dense16(in.features), w = dense16(in.weights);
    const at::Tensor g = dense16(grad_out_in.to(f.scalar_type()));
    // Each gradient is allocated when the operator asks for it (the weights' first, each after its
    // sort's second key buffer is gone); an unrequested one is zeros.
    return gradients_on_request(f, w, need_features, need_weights, [&](const Allocator& gf, const Allocator& gw) {
      const PointConvKept kept = kept_for(in.triplets, in.shape, true, false, bool(gf), bool(gw));
      cuda::point_conv_mma_backward(cuda_context(f), in.shape, half16_of(f), g.data_ptr(), f.data_ptr(),
                                    w.data_ptr(), in.triplets.data_ptr<int64_t>(), gf, gw, kept);
    });
  }
#else
  (void)fast;
#endif
  // The weight gradient first, each gradient allocated when the operator asks for it (on CUDA
  // after its own grouping's sort), so grad_features (as large as the features) does not exist
  // while the weight gradient's workspace does: the backward's peak is the larger of the two
  // steps, not their sum. A gradient that is not requested is returned as zeros (not computed).
  const at::Tensor f = as_float(in.features), w = as_float(in.weights), g = as_float(grad_out_in);
  auto [gf, gw] =
      gradients_on_request(f, w, need_features, need_weights, [&](const Allocator& gf_a, const Allocator& gw_a) {
        run(in.triplets, in.shape, g.data_ptr<float>(), f.data_ptr<float>(), w.data_ptr<float>(),
            in.triplets.data_ptr<int64_t>(), gf_a, gw_a);
      });
  return {gf.to(features_in.scalar_type()), gw.to(weights_in.scalar_type())};
}

at::Tensor point_conv_cpu(const at::Tensor& features, const at::Tensor& weights, const at::Tensor& triplets,
                          int64_t num_out, c10::string_view mode) {
  return point_conv_impl(features, weights, triplets, num_out, mode,
                         [](const at::Tensor& tt, const PointConvShape& s, const float* f, const float* w,
                            const int64_t* t, const Allocator& out) {
                           const PointConvKept kept = kept_for(tt, s, false, true, false, false);
                           cpu::point_conv(cpu_context(), s, f, w, t, static_cast<float*>(out()), kept);
                         });
}

std::tuple<at::Tensor, at::Tensor> point_conv_backward_cpu(const at::Tensor& grad_out, const at::Tensor& features,
                                                           const at::Tensor& weights, const at::Tensor& triplets,
                                                           int64_t num_out, bool need_features, bool need_weights,
                                                           c10::string_view mode) {
  return point_conv_backward_impl(
      grad_out, features, weights, triplets, num_out, need_features, need_weights, mode,
      [](const at::Tensor& tt, const PointConvShape& s, const float* g, const float* f, const float* w,
         const int64_t* t, const Allocator& gf, const Allocator& gw) {
        const PointConvKept kept = kept_for(tt, s, false, false, bool(gf), bool(gw));
        if (gw) cpu::point_conv_backward(cpu_context(), s, g, f, w, t, nullptr, static_cast<float*>(gw()), kept);
        if (gf) cpu::point_conv_backward(cpu_context(), s, g, f, w, t, static_cast<float*>(gf()), nullptr, kept);
      });
}

#if PCOPS_TORCH_CUDA
at::Tensor point_conv_cuda(const at::Tensor& features, const at::Tensor& weights, const at::Tensor& triplets,
                           int64_t num_out, c10::string_view mode) {
  const c10::cuda::CUDAGuard guard(features.device());
  // The exact path (the run gets the contiguous triplets first), with its kept groupings.
  return point_conv_impl(features, weights, triplets, num_out, mode,
                         [](const at::Tensor& t, const PointConvShape& s, const float* f, const float* w,
                            const int64_t* tp, const Allocator& out) {
                           cuda::point_conv(cuda_context(t), s, f, w, tp, out,
                                            kept_for(t, s, false, true, false, false));
                         });
}

std::tuple<at::Tensor, at::Tensor> point_conv_backward_cuda(const at::Tensor& grad_out, const at::Tensor& features,
                                                            const at::Tensor& weights, const at::Tensor& triplets,
                                                            int64_t num_out, bool need_features, bool need_weights,
                                                            c10::string_view mode) {
  const c10::cuda::CUDAGuard guard(features.device());
  return point_conv_backward_impl(
      grad_out, features, weights, triplets, num_out, need_features, need_weights, mode,
      [](const at::Tensor& t, const PointConvShape& s, const float* g, const float* f, const float* w,
         const int64_t* tp, const Allocator& gf, const Allocator& gw) {
        cuda::point_conv_backward(cuda_context(t), s, g, f, w, tp, gf, gw,
                                  kept_for(t, s, false, false, bool(gf), bool(gw)));
      });
}
#endif

// The triplets of neighbourhoods (pcops::{cpu,cuda}::point_conv_triplets): centres [M, 3] and
// points [N, 3] float32, neighbours [M, S] int64 (the Python function checks dtypes and shapes
// first; this one is also safe on its own). Returns [T, 3] int64. The CPU core checks the
// neighbour range and the coordinates itself; for CUDA tensors they are checked here, on the
// host, in the same order and with the same errors, before the kernels run.
template <class Run>
at::Tensor point_conv_triplets_impl(const at::Tensor& centres_in, const at::Tensor& points_in,
                                    const at::Tensor& neighbours_in, double extent, int64_t t, Run run) {
  TORCH_CHECK_VALUE(centres_in.dim() == 2 && centres_in.size(1) == 3 && points_in.dim() == 2 &&
                        points_in.size(1) == 3 && neighbours_in.dim() == 2 &&
                        neighbours_in.size(0) == centres_in.size(0),
                    "point_conv_triplets: expected centres [M, 3], points [N, 3] and neighbours [M, S]");
  TORCH_CHECK_TYPE(neighbours_in.scalar_type() == at::kLong, "neighbours: expected int64");
  check_same_device(centres_in, "centres", points_in, "points");
  check_same_device(centres_in, "centres", neighbours_in, "neighbours");
  const at::Tensor centres = centres_in.to(at::kFloat).contiguous(), points = points_in.to(at::kFloat).contiguous();
  TripletShape shape;
  shape.centres = centres.size(0), shape.points = points.size(0), shape.slots = neighbours_in.size(1);
  shape.extent = static_cast<float>(extent), shape.cells = t;
  at::Tensor neighbours = neighbours_in.contiguous();
  if (centres.is_cuda()) {
    translate_errors([&] { core::validate_triplet_shape(shape); });
    neighbours = as_indices(neighbours_in, "neighbours", shape.points);  // the range, on the host
    const auto check_finite = [](const at::Tensor& c, const char* name) {
      // SYNC: one flag per tensor.
      const bool finite = c.numel() == 0 || at::isfinite(c).all().item<bool>();
      TORCH_CHECK_VALUE(finite, name, ": expected finite values");
    };
    check_finite(centres, "centres");
    check_finite(points, "points");
  }
  at::Tensor out;
  translate_errors([&] {
    run(centres, shape, centres.data_ptr<float>(), points.data_ptr<float>(), neighbours.data_ptr<int64_t>(),
        [&](int64_t T) {
          out = at::empty({T, 3}, neighbours.options());
          return out.data_ptr<int64_t>();
        });
  });
  // The rows (i, j, k) hold centres, points and cells by construction.
  if (out.is_cuda() && out.numel() > 0) {
    IndexRanges r;
    r.cols = 3;
    r.hi[0] = shape.centres - 1, r.hi[1] = shape.points - 1, r.hi[2] = t * t * t - 1;
    remember_ranges(out, r);
  }
  return out;
}

at::Tensor point_conv_triplets_cpu(const at::Tensor& centres, const at::Tensor& points, const at::Tensor& neighbours,
                                   double extent, int64_t t) {
  return point_conv_triplets_impl(centres, points, neighbours, extent, t, [](const at::Tensor&, auto&&... a) {
    cpu::point_conv_triplets(cpu_context(), a...);
  });
}

#if PCOPS_TORCH_CUDA
at::Tensor point_conv_triplets_cuda(const at::Tensor& centres, const at::Tensor& points, const at::Tensor& neighbours,
                                    double extent, int64_t t) {
  const c10::cuda::CUDAGuard guard(centres.device());
  return point_conv_triplets_impl(centres, points, neighbours, extent, t, [](const at::Tensor& c, auto&&... a) {
    cuda::point_conv_triplets(cuda_context(c), a...);
  });
}
#endif

// Bytes of the kept groupings (KeptGroupings); clear: release them first.
int64_t point_conv_kept_bytes(bool clear) { return kept_groupings().held(clear); }

}  // namespace

TORCH_LIBRARY_FRAGMENT(pcops, m) {
  m.def("_point_conv_kept_bytes(bool clear=False) -> int", &point_conv_kept_bytes);
  m.def("point_conv(Tensor features, Tensor weights, Tensor triplets, int num_out, str mode=\"exact\") -> Tensor");
  m.def("_point_conv_triplets(Tensor centres, Tensor points, Tensor neighbours, float extent, int t) -> Tensor");
  m.def(
      "_point_conv_backward(Tensor grad_out, Tensor features, Tensor weights, Tensor triplets, int num_out, "
      "bool need_features=True, bool need_weights=True, str mode=\"exact\") -> (Tensor grad_features, "
      "Tensor grad_weights)");
}

TORCH_LIBRARY_IMPL(pcops, CPU, m) {
  m.impl("point_conv", &point_conv_cpu);
  m.impl("_point_conv_backward", &point_conv_backward_cpu);
  m.impl("_point_conv_triplets", &point_conv_triplets_cpu);
}

#if PCOPS_TORCH_CUDA
TORCH_LIBRARY_IMPL(pcops, CUDA, m) {
  m.impl("point_conv", &point_conv_cuda);
  m.impl("_point_conv_backward", &point_conv_backward_cuda);
  m.impl("_point_conv_triplets", &point_conv_triplets_cuda);
}
#endif

}  // namespace pcops::torch_binding
