"""Convolution on native points, MVMR (contract: docs/ops/point_conv.md)."""

from __future__ import annotations

import contextlib
import os

import torch

from pcops.ops import _checks


MODES = ("exact", "fast")


def point_conv(
    features: torch.Tensor,
    weights: torch.Tensor,
    triplets: torch.Tensor,
    num_out: int | None = None,
    *,
    mode: str = "exact",
) -> torch.Tensor:
    """``out[i] = sum over triplets (i, j, k) of weights[k] @ features[j]``.

    Each triplet row ``(i, j, k)`` says that output point ``i`` sees input point ``j`` through
    the kernel matrix ``weights[k]``. No neighbourhood buffer is materialised. The sums are
    float32 without fused multiply-add in a fixed order (the triplets of row ``i`` in ascending
    ``(k, j)``, channels ascending inside each), so the result is bitwise reproducible, does not
    depend on the order of the triplet rows or on the thread count.

    Args:
        features: ``[N_in, C_in]`` float32/float16/bfloat16.
        weights: ``[K, C_out, C_in]`` float32/float16/bfloat16.
        triplets: ``[T, 3]`` int64 rows ``(i, j, k)`` with ``0 <= i < num_out``,
            ``0 <= j < N_in``, ``0 <= k < K`` (see :func:`point_conv_triplets`).
        num_out: number of output points ``N_out``; default ``N_in`` (same points in and out).
        mode: ``"exact"`` (default): the contract above, float32 arithmetic in a fixed order,
            bitwise equal on CPU and CUDA. ``"fast"``: on CUDA with float16 or bfloat16
            features and weights (one dtype, ``C_in`` and ``C_out`` multiples of 8), the tensor
            cores: products exact in float32, float32 sums in another fixed order (still
            deterministic run to run and independent of the triplet rows' order, not bitwise
            equal to ``"exact"``), the backward too. Any other case runs ``"exact"``.

    Both modes, on the CPU and on CUDA, sort the triplets once per step (forward, features
    gradient, weight gradient) and key layout and keep the sort with the triplet tensor while it
    lives unchanged, so later layers, forwards and backwards on the same triplets skip it; the
    results are bitwise the same (:func:`kept_grouping_bytes`; ``PCOPS_POINT_CONV_KEEP=0`` keeps
    none).

    Returns:
        ``[N_out, C_out]`` in the dtype of ``features``; rows without triplets are zero.
        Differentiable with respect to ``features`` (the same MVMR with transposed weights) and
        ``weights`` (an outer-product reduction), both deterministic; second derivatives are
        supported.

    Raises:
        ValueError: bad ranks or shapes, mixed devices, negative ``num_out``.
        TypeError: unsupported dtypes (float64 or integer values, triplets not int64).
        IndexError: a triplet entry outside its range.
    """
    if num_out is None:
        num_out = features.shape[0] if isinstance(features, torch.Tensor) and features.dim() >= 1 else 0
    num_out = _checks.integer(num_out, "num_out")
    _check_mode(mode)
    return torch.ops.pcops.point_conv(features, weights, triplets, num_out, mode)


def kept_grouping_bytes(release: bool = False) -> int:
    """Memory held by point_conv's kept groupings of triplets, in bytes (host memory for CPU
    triplets, device memory for CUDA ones).

    Each step of :func:`point_conv` keeps its sort of the triplets (4 to 8 bytes a triplet and an
    offset per segment; docs/ops/point_conv.md, "Kept groupings") with the triplet tensor, for the
    later calls on it; a grouping is let go at the next call once its triplets are freed or
    changed in place (on the CPU also when their values change behind the version counter, as
    through a NumPy view; on CUDA such writes need ``release=True``). ``release=True`` lets every
    grouping go now (later calls sort again). Bitwise the same results either way.
    """
    return int(torch.ops.pcops._point_conv_kept_bytes(bool(release)))


@contextlib.contextmanager
def sorting_in_every_call():
    """Within the block, point_conv keeps no grouping (``PCOPS_POINT_CONV_KEEP=0``, restored on
    exit) and holds none from before: every call sorts its triplets, as a peer that groups inside
    its calls does (the benchmarks' like-for-like timings)."""
    before = os.environ.get("PCOPS_POINT_CONV_KEEP")
    os.environ["PCOPS_POINT_CONV_KEEP"] = "0"
    kept_grouping_bytes(release=True)
    try:
        yield
    finally:
        if before is None:
            del os.environ["PCOPS_POINT_CONV_KEEP"]
        else:
            os.environ["PCOPS_POINT_CONV_KEEP"] = before


def _check_mode(mode):
    if mode not in MODES:
        raise ValueError(f'mode: expected "exact" or "fast", got {mode!r}')


def point_conv_triplets(
    centres: torch.Tensor, points: torch.Tensor, neighbours: torch.Tensor, extent: float, t: int = 3
) -> torch.Tensor:
    """Triplets ``(i, j, k)`` from neighbourhoods and a ``t x t x t`` grid of kernel cells.

    Neighbour ``j = neighbours[i, s]`` of centre ``i`` (slots holding -1, the padding of
    :func:`pcops.ball_query` and :func:`pcops.knn`, are dropped) gets the kernel cell of its
    offset in the cube ``[-extent, extent]^3`` around the centre, in float32 with one rounding
    per step: ``h = fl(fl(2 extent) / t)``, ``d = fl(points[j] - centres[i])``,
    ``q = clamp(floor(fl(fl(d + extent) / h)), 0, t - 1)`` per axis (offsets outside the cube
    go to the border cell), ``k = (q_x t + q_y) t + q_z``. Rows are ordered by ``(i, s)``.

    A batch of clouds (``centres [B, M, 3]``, ``points [B, N, 3]``, ``neighbours [B, M, S]``
    with each cloud's indices in ``[-1, N)``, as ``pcops.knn`` and ``pcops.ball_query`` return
    them) gives the triplets of the flattened clouds: centre ``b M + i``, point ``b N + j``, for
    features ``[B N, C]`` and outputs ``[B M, C_out]``, clouds in order.

    Args:
        centres: ``[M, 3]`` (or ``[B, M, 3]``) float32 output positions.
        points: ``[N, 3]`` (or ``[B, N, 3]``) float32 input positions.
        neighbours: ``[M, S]`` (or ``[B, M, S]``) int64 indices into ``points`` in ``[-1, N)``,
            e.g. ``idx`` of ``pcops.ball_query(centres, points, extent, S)`` or of ``pcops.knn``.
        extent: half the side of the kernel cube (the ball radius for ball-query neighbours);
            finite and > 0.
        t: kernel cells per axis (K = t^3 kernel matrices), >= 1.

    Returns:
        ``[T, 3]`` int64 triplets on the device of the inputs.
    """
    t = _checks.integer(t, "t")
    if isinstance(centres, torch.Tensor) and centres.dim() == 3:
        return _batched_triplets(centres, points, neighbours, extent, t)
    if not torch.compiler.is_compiling():  # (traced: the fake kernel checks)
        _check_triplet_inputs(centres, points, neighbours)
    # Native on CPU and CUDA (one float32 rounding a step, bit for bit the same; it checks t, the
    # extent, the indices and the coordinates itself); under torch.compile the same op with a
    # data-dependent number of rows.
    return torch.ops.pcops._point_conv_triplets(centres, points, neighbours, float(extent), t)


def _batched_triplets(centres, points, neighbours, extent, t):
    """point_conv_triplets of B clouds: each cloud's indices checked against its own N, offset by
    b N (padding stays -1), then one flat call."""
    for x, name in ((points, "points"), (neighbours, "neighbours")):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name}: expected a tensor, got {type(x).__name__}")
    if not (points.dim() == 3 and neighbours.dim() == 3 and points.shape[0] == centres.shape[0]
            and neighbours.shape[:2] == centres.shape[:2]):
        raise ValueError(f"expected centres [B, M, 3], points [B, N, 3] and neighbours [B, M, S] of one batch "
                         f"size, got {tuple(centres.shape)}, {tuple(points.shape)} and {tuple(neighbours.shape)}")
    B, M, N = centres.shape[0], centres.shape[1], points.shape[1]
    # Each cloud's own range (the flat call checks dtypes, devices and the flattened range).
    if not torch.compiler.is_compiling() and neighbours.numel() > 0:
        lo, hi = (int(v) for v in torch.aminmax(neighbours))
        if lo < -1 or hi >= N:
            raise IndexError(f"neighbours: expected each cloud's indices in [-1, {N}), got values in [{lo}, {hi}]")
    base = torch.arange(B, device=neighbours.device, dtype=torch.int64).view(B, 1, 1) * N
    flat = torch.where(neighbours >= 0, neighbours + base, neighbours)
    return point_conv_triplets(centres.reshape(B * M, centres.shape[2]), points.reshape(B * N, points.shape[2]),
                               flat.reshape(B * M, neighbours.shape[2]), extent, t)


def _check_triplet_inputs(centres, points, neighbours):
    for t_, name in ((centres, "centres"), (points, "points")):
        _checks.points(t_[None] if isinstance(t_, torch.Tensor) and t_.dim() == 2 else t_, name)
    torch._check_value(centres.dim() == 2 and centres.shape[1] == 3,
                       lambda: f"centres: expected shape [M, 3], got {tuple(centres.shape)}")
    torch._check_value(points.dim() == 2 and points.shape[1] == 3,
                       lambda: f"points: expected shape [N, 3], got {tuple(points.shape)}")
    _checks.same_device(centres, "centres", points, "points")
    _checks.same_device(centres, "centres", neighbours, "neighbours")
    _checks.indices(neighbours, "neighbours")
    torch._check_value(
        neighbours.dim() == 2 and neighbours.shape[0] == centres.shape[0],
        lambda: f"neighbours: expected shape [{centres.shape[0]}, S], got {tuple(neighbours.shape)}",
    )


def _triplets_reference(centres, points, neighbours, extent: float, t: int) -> torch.Tensor:
    """point_conv_triplets in elementwise tensor operations, each one correctly rounded float32 step
    (the tests' and the probe's reference for the native passes). Every division is by a tensor:
    PyTorch's CUDA division by a Python number multiplies by its rounded reciprocal."""
    slot_valid = neighbours >= 0
    i = torch.arange(centres.shape[0], device=centres.device).unsqueeze(1).expand_as(neighbours)[slot_valid]
    j = neighbours[slot_valid]
    ext = torch.tensor(extent, dtype=torch.float32, device=centres.device)
    h = (ext * 2) / torch.tensor(float(t), dtype=torch.float32, device=centres.device)
    q = torch.floor(((points[j] - centres[i]) + ext) / h).clamp_(0, t - 1).to(torch.int64)
    k = (q[:, 0] * t + q[:, 1]) * t + q[:, 2]
    return torch.stack([i, j, k], dim=1)


def _check_inputs(features, weights, triplets, num_out):
    _checks.same_device(features, "features", weights, "weights")
    _checks.same_device(features, "features", triplets, "triplets")
    _checks.values(features, "features", 2, "[N_in, C_in]")
    _checks.values(weights, "weights", 3, "[K, C_out, C_in]")
    torch._check_value(
        weights.shape[2] == features.shape[1],
        lambda: f"weights: expected shape [K, C_out, {features.shape[1]}] (C_in of features), "
        f"got {tuple(weights.shape)}",
    )
    _checks.indices(triplets, "triplets")
    torch._check_value(
        triplets.dim() == 2 and triplets.shape[1] == 3,
        lambda: f"triplets: expected shape [T, 3] (rows i, j, k), got {tuple(triplets.shape)}",
    )
    torch._check_value(num_out >= 0, lambda: f"num_out: expected a non-negative output size, got {num_out}")


@torch.library.register_fake("pcops::_point_conv_triplets")
def _fake_triplets(centres, points, neighbours, extent, t):
    _check_triplet_inputs(centres, points, neighbours)
    return neighbours.new_empty((torch.library.get_ctx().new_dynamic_size(), 3))


@torch.library.register_fake("pcops::point_conv")
def _fake(features, weights, triplets, num_out, mode="exact"):
    _check_mode(mode)
    _check_inputs(features, weights, triplets, num_out)
    return features.new_empty((num_out, weights.shape[1]))


@torch.library.register_fake("pcops::_point_conv_backward")
def _fake_backward(grad_out, features, weights, triplets, num_out, need_features=True, need_weights=True,
                   mode="exact"):
    _check_mode(mode)
    _checks.same_device(features, "features", grad_out, "grad_out")
    _check_inputs(features, weights, triplets, num_out)
    _checks.values(grad_out, "grad_out", 2, "[N_out, C_out]")
    torch._check_value(
        grad_out.shape[0] == num_out and grad_out.shape[1] == weights.shape[1],
        lambda: f"grad_out: expected shape [{num_out}, {weights.shape[1]}], got {tuple(grad_out.shape)}",
    )
    return features.new_empty(features.shape), weights.new_empty(weights.shape)


def _setup_context(ctx, inputs, output):
    features, weights, triplets, num_out, mode = inputs
    ctx.save_for_backward(features, weights, triplets)
    ctx.num_out = num_out
    ctx.mode = mode
    ctx.set_materialize_grads(False)


def _backward(ctx, grad_out):
    features, weights, triplets = ctx.saved_tensors
    need_features, need_weights = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    if grad_out is None or not (need_features or need_weights):
        return None, None, None, None, None
    gf, gw = torch.ops.pcops._point_conv_backward(
        grad_out, features, weights, triplets, ctx.num_out, need_features, need_weights, ctx.mode
    )
    return (gf if need_features else None), (gw if need_weights else None), None, None, None


torch.library.register_autograd("pcops::point_conv", _backward, setup_context=_setup_context)


# Double backward. With G = grad_out: gf[j] = sum over (i, j, k) of W_k^T G[i] (bilinear in G
# and W) and gw[k] = sum over (i, j, k) of G[i] F[j]^T (bilinear in G and F). With upstream
# gradients A (of gf) and B (of gw):
#   dL/dG = point_conv(A, W) + point_conv(F, B),
#   dL/dF = the features gradient of the backward with weights B,
#   dL/dW = the weights gradient of the backward with features A.
# Written with the operators themselves, so higher orders work too. An output that was not
# requested (need_* false) is a constant zero tensor and gets no gradient.
def _setup_context_backward(ctx, inputs, output):
    grad_out, features, weights, triplets, num_out, need_features, need_weights, mode = inputs
    ctx.save_for_backward(grad_out, features, weights, triplets)
    ctx.num_out = num_out
    ctx.mode = mode
    ctx.need = (need_features, need_weights)
    ctx.set_materialize_grads(False)


def _backward_backward(ctx, grad_gf, grad_gw):
    grad_out, features, weights, triplets = ctx.saved_tensors
    need_features, need_weights = ctx.need
    a = grad_gf if need_features else None
    b = grad_gw if need_weights else None
    need = ctx.needs_input_grad
    d_grad = d_features = d_weights = None
    if need[0] and (a is not None or b is not None):
        parts = []
        if a is not None:
            parts.append(point_conv(a, weights, triplets, ctx.num_out, mode=ctx.mode).float())
        if b is not None:
            parts.append(point_conv(features, b, triplets, ctx.num_out, mode=ctx.mode).float())
        d_grad = (parts[0] if len(parts) == 1 else parts[0] + parts[1]).to(grad_out.dtype)
    if need[1] and b is not None:
        d_features = torch.ops.pcops._point_conv_backward(
            grad_out, features, b, triplets, ctx.num_out, True, False, ctx.mode
        )[0].to(features.dtype)
    if need[2] and a is not None:
        d_weights = torch.ops.pcops._point_conv_backward(
            grad_out, a, weights, triplets, ctx.num_out, False, True, ctx.mode
        )[1].to(weights.dtype)
    return d_grad, d_features, d_weights, None, None, None, None, None


torch.library.register_autograd(
    "pcops::_point_conv_backward", _backward_backward, setup_context=_setup_context_backward
)
