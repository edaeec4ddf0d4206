"""Chamfer distance with PyTorch3D 0.7.9's signature and semantics (contract:
docs/ops/chamfer_distance.md).

The nearest neighbour of every point is found natively, never through an ``N x M`` distance
matrix, by ``torch.ops.pcops.nearest_neighbor`` (CPU and CUDA): float32 squared-L2 3-D clouds run
the exact kNN grid, everything else (float64 in its own precision, L1, any D) an exact brute force
(tiled through shared memory on the GPU). All select the smallest ``(s, index)``, ``s`` summed in
coordinate order, NaN ranked as +inf.

Distances are then recomputed from the selected pairs by one fused operator
(``torch.ops.pcops._chamfer_pair_distance`` and its backward, CPU and CUDA) and, without weights
or normals, reduced by another (``_chamfer_reduce``); both give the bits of the unfused formulas
(``_masked_pair_distance``, ``_reduce_formula``: a gather and one elementwise operation per
coordinate, torch reductions), kept for higher derivatives and as the reference of the tests.
The gradients are PyTorch3D's: ``2 g (x - y_nn)`` for norm 2, ``g sign(x - y_nn)`` for norm 1 with
a zero difference counted as -1 on the query side; normals through the cosine. Every operation is
elementwise except three, which have one written order on every device so that CUDA gives the
CPU's bits: the gather's gradient (``pcops::_gather_rows_backward``: ascending index from +0, no
atomics), the sums of the reductions (``pcops::_ordered_sum``), and the normal term's norms
(``pcops::_ordered_norm``, with a correctly rounded square root) and dot products (summed channel
by channel). Divisions take a tensor divisor: torch's CUDA division by a
CPU scalar multiplies by its reciprocal, which the CPU does not.
"""

from __future__ import annotations

from typing import Optional, Tuple, Union

import torch

from pcops.ops.nearest_neighbor import GatherRows, OrderedSum

_FLOAT_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
_COSINE_EPS = 1e-6


# ---------------------------------------------------------------------------------------------
# Nearest-neighbour search (no gradients) and device-independent building blocks


def _nearest(x, y, x_lengths, y_lengths, norm: int) -> torch.Tensor:
    """int64 ``(N, P1)``: index of the smallest (s, index) in ``y[n, :y_lengths[n]]``; -1 where
    the row is padding or the cloud ``y[n]`` is empty. Exact in the input precision."""
    return torch.ops.pcops.nearest_neighbor(x, y, x_lengths, y_lengths, norm)


def _pair_distance(x: torch.Tensor, y_nn: torch.Tensor, norm: int) -> torch.Tensor:
    """Differentiable ``(N, P)`` distance in coordinate order with PyTorch3D's derivatives."""
    acc = None
    for i in range(x.shape[2]):
        diff = x[..., i] - y_nn[..., i]
        if norm == 2:
            term = diff * diff
        else:  # |diff| whose derivative is sign(diff) with 0 counted as -1 (PyTorch3D's rule)
            sign = torch.where(diff > 0, 1.0, -1.0).to(diff.dtype).detach()
            term = diff * sign
        acc = term if acc is None else acc + term
    return acc


def _masked_pair_distance(x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor, norm: int) -> torch.Tensor:
    """The unfused formula of ``_chamfer_pair_distance``: gather, per-coordinate distance, +0 where
    ``idx`` is -1 (differentiable to any order)."""
    return _pair_distance(x, GatherRows.apply(y, idx), norm).masked_fill(idx < 0, 0.0)


class _PairDistance(torch.autograd.Function):
    """``(N, P)`` distance of every point of ``x`` to ``y[idx]`` (+0 where idx is -1), fused: one
    native operator forward and one backward (grad_y summed per target in ascending source order),
    with the bits of ``_masked_pair_distance``. Under ``create_graph`` the backward runs the unfused
    formula instead, so that higher derivatives exist (same first-order bits)."""

    @staticmethod
    def forward(ctx, x, y, idx, norm):
        ctx.save_for_backward(x, y, idx)
        ctx.norm = norm
        return torch.ops.pcops._chamfer_pair_distance(x, y, idx, norm)

    @staticmethod
    def backward(ctx, grad):
        x, y, idx = ctx.saved_tensors
        need_x, need_y = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        if torch.is_grad_enabled():  # create_graph=True
            inputs = [t for t, need in ((x, need_x), (y, need_y)) if need]
            with torch.enable_grad():
                out = _masked_pair_distance(x, y, idx, ctx.norm)
                grads = list(torch.autograd.grad(out, inputs, grad, create_graph=True))
            gx = grads.pop(0) if need_x else None
            gy = grads.pop(0) if need_y else None
            return gx, gy, None, None
        gx, gy = torch.ops.pcops._chamfer_pair_distance_backward(grad, x, y, idx, ctx.norm)
        return (gx if need_x else None), (gy if need_y else None), None, None


def _reduce_formula(cham_x, cham_y, x_lengths, y_lengths, point_mean: bool, batch_mode: int):
    """The unfused formula of ``_chamfer_reduce`` (the point reduction of each direction, their
    sum, the batch reduction; differentiable to any order)."""
    def point(cham, lengths):
        total = _sum(cham)
        if not point_mean:
            return total
        if lengths is not None:
            clamped = lengths.clamp(min=1)
        else:
            clamped = torch.full((cham.shape[0],), max(cham.shape[1], 1), dtype=torch.int64, device=cham.device)
        return total / clamped

    loss = point(cham_x, x_lengths)
    if cham_y is not None:
        loss = loss + point(cham_y, y_lengths)
    if batch_mode == 0:
        return loss
    loss = _sum(loss.reshape(-1))
    return loss / _full(max(cham_x.shape[0], 1), loss) if batch_mode == 2 else loss


class _Reduce(torch.autograd.Function):
    """chamfer_distance's point and batch reductions without weights or normals, fused: one
    native operator forward and one backward (``pcops::_chamfer_reduce``), with the bits of
    ``_reduce_formula``; the row gradients are returned broadcast (no copy). Under
    ``create_graph`` the backward runs the unfused formula."""

    @staticmethod
    def forward(ctx, cham_x, cham_y, x_lengths, y_lengths, point_mean, batch_mode):
        ctx.save_for_backward(cham_x, cham_y, x_lengths, y_lengths)
        ctx.args = (point_mean, batch_mode)
        return torch.ops.pcops._chamfer_reduce(cham_x, cham_y, x_lengths, y_lengths, point_mean, batch_mode)

    @staticmethod
    def backward(ctx, grad):
        cham_x, cham_y, x_lengths, y_lengths = ctx.saved_tensors
        need = ctx.needs_input_grad[:2]
        if torch.is_grad_enabled():  # create_graph=True
            inputs = [t for t, n in zip((cham_x, cham_y), need) if n]
            with torch.enable_grad():
                out = _reduce_formula(cham_x, cham_y, x_lengths, y_lengths, *ctx.args)
                grads = list(torch.autograd.grad(out, inputs, grad, create_graph=True))
            gx = grads.pop(0) if need[0] else None
            gy = grads.pop(0) if need[1] else None
            return gx, gy, None, None, None, None
        gx, gy = torch.ops.pcops._chamfer_reduce_backward(grad, cham_x, cham_y, x_lengths, y_lengths, *ctx.args)
        gx = gx[:, None].expand(cham_x.shape) if need[0] else None
        gy = gy[:, None].expand(cham_y.shape) if need[1] else None
        return gx, gy, None, None, None, None


class _Chamfer(torch.autograd.Function):
    """The common case in one autograd node: both directions' fused pair distances and the fused
    reduction forward; backward, the reduction's backward and both pair-distance backwards, each
    point's two contributions added (two terms: the order cannot change the bits). Same values and
    first derivatives as composing ``_PairDistance`` and ``_Reduce`` (``_Composed``), with one
    node's host overhead instead of three. Under ``create_graph`` the backward runs the unfused
    formulas, so that higher derivatives exist."""

    @staticmethod
    def forward(ctx, x, y, idx_x, idx_y, x_lengths, y_lengths, norm, point_mean, batch_mode):
        cham_x = torch.ops.pcops._chamfer_pair_distance(x, y, idx_x, norm)
        cham_y = None if idx_y is None else torch.ops.pcops._chamfer_pair_distance(y, x, idx_y, norm)
        ctx.save_for_backward(x, y, idx_x, idx_y, cham_x, cham_y, x_lengths, y_lengths)
        ctx.args = (norm, point_mean, batch_mode)
        return torch.ops.pcops._chamfer_reduce(cham_x, cham_y, x_lengths, y_lengths, point_mean, batch_mode)

    @staticmethod
    def backward(ctx, grad):
        x, y, idx_x, idx_y, cham_x, cham_y, x_lengths, y_lengths = ctx.saved_tensors
        norm, point_mean, batch_mode = ctx.args
        need_x, need_y = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        if torch.is_grad_enabled():  # create_graph=True
            inputs = [t for t, need in ((x, need_x), (y, need_y)) if need]
            with torch.enable_grad():
                cx = _masked_pair_distance(x, y, idx_x, norm)
                cy = None if idx_y is None else _masked_pair_distance(y, x, idx_y, norm)
                out = _reduce_formula(cx, cy, x_lengths, y_lengths, point_mean, batch_mode)
                grads = list(torch.autograd.grad(out, inputs, grad, create_graph=True))
            gx = grads.pop(0) if need_x else None
            gy = grads.pop(0) if need_y else None
            return gx, gy, None, None, None, None, None, None, None
        gcx, gcy = torch.ops.pcops._chamfer_reduce_backward(grad, cham_x, cham_y, x_lengths, y_lengths, point_mean,
                                                           batch_mode)
        gx, gy = torch.ops.pcops._chamfer_pair_distance_backward(gcx[:, None].expand(cham_x.shape), x, y, idx_x, norm)
        if cham_y is not None:
            gy2, gx2 = torch.ops.pcops._chamfer_pair_distance_backward(gcy[:, None].expand(cham_y.shape), y, x,
                                                                       idx_y, norm)
            gx, gy = gx + gx2, gy + gy2
        return (gx if need_x else None), (gy if need_y else None), None, None, None, None, None, None, None


class _Composed:
    """``_Chamfer``'s computation as separate nodes (``_PairDistance`` twice, then ``_Reduce``),
    looked up at call time: with those replaced by the unfused formulas (tests, benchmarks), the
    whole common case runs unfused."""

    @staticmethod
    def apply(x, y, idx_x, idx_y, x_lengths, y_lengths, norm, point_mean, batch_mode):
        cham_x = _PairDistance.apply(x, y, idx_x, norm)
        cham_y = None if idx_y is None else _PairDistance.apply(y, x, idx_y, norm)
        return _Reduce.apply(cham_x, cham_y, x_lengths, y_lengths, point_mean, batch_mode)


@torch.library.register_fake("pcops::_chamfer_reduce")
def _fake_reduce(cham_x, cham_y, x_lengths, y_lengths, point_mean, batch_mode):
    torch._check_value(cham_x.dim() == 2, lambda: f"cham_x: expected a 2-D tensor, got shape {tuple(cham_x.shape)}")
    torch._check_value(batch_mode in (0, 1, 2), lambda: f"batch_mode: expected 0, 1 or 2, got {batch_mode}")
    return cham_x.new_empty((cham_x.shape[0],) if batch_mode == 0 else ())


@torch.library.register_fake("pcops::_chamfer_reduce_backward")
def _fake_reduce_backward(grad, cham_x, cham_y, x_lengths, y_lengths, point_mean, batch_mode):
    _fake_reduce(cham_x, cham_y, x_lengths, y_lengths, point_mean, batch_mode)
    n = cham_x.shape[0]
    return cham_x.new_empty((n,)), cham_x.new_empty((n if cham_y is not None else 0,))


def _fake_coords(t, name):
    torch._check_value(t.dim() == 3, lambda: f"{name}: expected a 3-D tensor, got shape {tuple(t.shape)}")
    torch._check_type(t.dtype in (torch.float32, torch.float64),
                      lambda: f"{name}: expected float32 or float64 values, got {t.dtype}")


@torch.library.register_fake("pcops::_chamfer_pair_distance")
def _fake_pair(x, y, idx, norm=2):
    _fake_coords(x, "x")
    _fake_coords(y, "y")
    torch._check_type(x.dtype == y.dtype, lambda: f"y: expected dtype {x.dtype} (as x), got {y.dtype}")
    torch._check_value(norm in (1, 2), lambda: f"norm: expected 1 or 2, got {norm}")
    return x.new_empty((x.shape[0], x.shape[1]))


@torch.library.register_fake("pcops::_chamfer_pair_distance_backward")
def _fake_pair_backward(grad, x, y, idx, norm=2):
    _fake_pair(x, y, idx, norm)
    return x.new_empty(x.shape), y.new_empty(y.shape)


def _sum(t: torch.Tensor) -> torch.Tensor:
    """Sum over the last dimension in one written order on every device (differentiable)."""
    return OrderedSum.apply(t)


class _StraightClamp(torch.autograd.Function):
    """``clamp_min(eps)`` whose gradient passes through unchanged (torch's cosine_similarity
    clamps the norms under no_grad, so its gradient is that of the unclamped norm)."""

    @staticmethod
    def forward(ctx, t, eps):
        return t.clamp_min(eps)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _Norm(torch.autograd.Function):
    """Euclidean norm over the last dimension, the squares summed channel by channel and the
    square root correctly rounded (``pcops::_ordered_norm``: torch's float64 sqrt on the CPU is
    not, so it would differ from the GPU's); gradient ``g * c / norm`` (0 where the norm is 0, as
    torch's vector norm)."""

    @staticmethod
    def forward(ctx, t):
        out = torch.ops.pcops._ordered_norm(t)
        ctx.save_for_backward(t, out)
        return out

    @staticmethod
    def backward(ctx, grad):
        t, out = ctx.saved_tensors
        zero = out == 0
        # Divide by a non-zero stand-in where the norm is 0, so that the second derivative holds no
        # 0/0 either (masking after the division would still differentiate through it).
        scale = (grad / out.masked_fill(zero, 1.0)).masked_fill(zero, 0.0)
        return t * scale[..., None]


def _cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """torch.nn.functional.cosine_similarity(a, b, dim=2, eps=1e-6)'s formula (each vector over
    its clamped norm, then the dot product), every sum in channel order."""
    na = _StraightClamp.apply(_Norm.apply(a), _COSINE_EPS)
    nb = _StraightClamp.apply(_Norm.apply(b), _COSINE_EPS)
    acc = None
    for c in range(a.shape[2]):
        term = (a[..., c] / na) * (b[..., c] / nb)
        acc = term if acc is None else acc + term
    return acc


def _full(value, like: torch.Tensor, shape=()) -> torch.Tensor:
    """A divisor on ``like``'s device (never a CPU scalar, see the module docstring)."""
    return torch.full(shape, value, dtype=like.dtype, device=like.device)


# ---------------------------------------------------------------------------------------------
# Argument handling (PyTorch3D's order of checks and messages)


def _validate_reductions(batch_reduction, point_reduction) -> None:
    if batch_reduction is not None and batch_reduction not in ["mean", "sum"]:
        raise ValueError('batch_reduction must be one of ["mean", "sum"] or None')
    if point_reduction is not None and point_reduction not in ["mean", "sum", "max"]:
        raise ValueError('point_reduction must be one of ["mean", "sum", "max"] or None')
    if point_reduction is None and batch_reduction is not None:
        raise ValueError("Batch reduction must be None if point_reduction is None")


def _is_pointclouds(obj) -> bool:
    return hasattr(obj, "points_padded") and hasattr(obj, "num_points_per_cloud")


def _handle_input(points, lengths, normals, name: str):
    if _is_pointclouds(points):
        X = points.points_padded()
        lengths = points.num_points_per_cloud()
        getter = getattr(points, "normals_padded", None)
        normals = getter() if getter is not None else None
    elif isinstance(points, torch.Tensor):
        if points.ndim != 3:
            raise ValueError(f"{name}: expected points of shape (N, P, D), got {tuple(points.shape)}")
        X = points
        if lengths is not None:
            if not isinstance(lengths, torch.Tensor):
                raise TypeError(f"{name}_lengths: expected a tensor, got {type(lengths).__name__}")
            if lengths.ndim != 1 or lengths.shape[0] != X.shape[0]:
                raise ValueError(
                    f"{name}_lengths: expected shape ({X.shape[0]},), got {tuple(lengths.shape)}")
    else:
        raise ValueError(
            "The input pointclouds should be either Pointclouds objects or torch.Tensor of shape "
            "(minibatch, num_points, 3)."
        )
    if not X.dtype.is_floating_point or X.dtype not in _FLOAT_DTYPES:
        raise TypeError(f"{name}: expected float32/float64/float16/bfloat16 points, got {X.dtype}")
    if X.shape[2] < 1:
        raise ValueError(f"{name}: expected at least one coordinate (D >= 1), got shape {tuple(X.shape)}")
    n, p = X.shape[0], X.shape[1]
    if lengths is not None:  # None stays None: full clouds need no lengths (and no host sync)
        if lengths.dtype.is_floating_point or lengths.dtype.is_complex or lengths.dtype == torch.bool:
            raise TypeError(f"{name}_lengths: expected an integer tensor, got {lengths.dtype}")
        if lengths.device != X.device:
            raise ValueError(f"{name}_lengths: expected device {X.device}, got {lengths.device}")
        lengths = lengths.to(torch.int64)
        if n:
            lo, hi = torch.stack([lengths.min(), lengths.max()]).tolist()  # one host sync
            if hi > p:
                raise ValueError(f"{name}_lengths: a length value was too long (max {hi} > P = {p})")
            if lo < 0:
                raise ValueError(f"{name}_lengths: expected values >= 0, got {lengths.tolist()}")
    if normals is not None:
        if not isinstance(normals, torch.Tensor):
            raise TypeError(f"{name}_normals: expected a tensor, got {type(normals).__name__}")
        if normals.ndim != 3 or normals.shape[:2] != X.shape[:2]:
            raise ValueError(f"{name}_normals: expected shape ({n}, {p}, C), got {tuple(normals.shape)}")
        if normals.device != X.device:
            raise ValueError(f"{name}_normals: expected device {X.device}, got {normals.device}")
    return X, lengths, normals


# ---------------------------------------------------------------------------------------------
# One direction and the batch reduction (PyTorch3D's structure)


def _check_pair(x, y) -> None:
    n, _, d = x.shape
    if y.shape[0] != n or y.shape[2] != d:
        raise ValueError(f"y does not have the correct shape: expected ({n}, P2, {d}), got {tuple(y.shape)}")
    if y.dtype != x.dtype:
        raise TypeError(f"y: expected dtype {x.dtype} (as x), got {y.dtype}")
    if y.device != x.device:
        raise ValueError(f"y: expected device {x.device} (as x), got {y.device}")


def _single_direction(x, y, x_lengths, y_lengths, x_normals, y_normals, weights,
                      point_reduction, norm: int, abs_cosine: bool):
    return_normals = x_normals is not None and y_normals is not None
    n, p1, d = x.shape
    _check_pair(x, y)
    if weights is not None:
        if weights.size(0) != n:
            raise ValueError("weights must be of shape (N,).")
        if not (weights >= 0).all():
            raise ValueError("weights cannot be negative.")
        if weights.sum() == 0.0:
            # Upstream's early return: zeros derived from x (graph kept), shape (N, N) by the
            # broadcast against weights.view(N, 1) (PyTorch3D QUIRK, reproduced).
            weights = weights.view(n, 1)
            total = _sum(x.reshape(n, p1 * d))
            return (total * weights) * 0.0, (total * weights) * 0.0

    with torch.no_grad():
        idx = _nearest(x.detach(), y.detach(), x_lengths, y_lengths, norm)  # (N, P1), -1 unmatched
    work = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    # Padding rows and empty y clouds (idx -1) give 0 (upstream).
    cham_x = _PairDistance.apply(x.to(work), y.to(work), idx, norm).to(x.dtype)
    if weights is not None:
        cham_x = cham_x * weights.view(n, 1)

    cham_norm_x = None
    if return_normals:
        unfilled = idx < 0
        # A neighbour slot past y's length reads a zero normal (knn_gather's padding).
        near = GatherRows.apply(y_normals, idx).masked_fill(unfilled[..., None], 0.0)
        cosine = _cosine(x_normals, near)
        cham_norm_x = 1 - (torch.abs(cosine) if abs_cosine else cosine)
        if x_lengths is not None:
            x_mask = torch.arange(p1, device=x.device)[None] >= x_lengths[:, None]  # (N, P1)
            cham_norm_x = cham_norm_x.masked_fill(x_mask, 0.0)
        if weights is not None:
            cham_norm_x = cham_norm_x * weights.view(n, 1)

    if point_reduction == "max":
        # Hausdorff-style; P1 == 0 gives 0 (upstream's max over an empty dim raises).
        cham_x = cham_x.max(1).values if p1 > 0 else _sum(cham_x)
    elif point_reduction is not None:
        cham_x = _sum(cham_x)
        if return_normals:
            cham_norm_x = _sum(cham_norm_x)
        if point_reduction == "mean":
            if x_lengths is not None:
                clamped = x_lengths.clamp(min=1)
            else:
                clamped = torch.full((n,), max(p1, 1), dtype=torch.int64, device=x.device)
            cham_x = cham_x / clamped
            if return_normals:
                cham_norm_x = cham_norm_x / clamped
    return cham_x, (cham_norm_x if return_normals else None)


def _batch_reduction(cham_x, cham_norm_x, weights, batch_reduction):
    if batch_reduction is None:
        return cham_x, cham_norm_x
    n = cham_x.shape[0]
    cham_x = _sum(cham_x.reshape(-1))
    if cham_norm_x is not None:
        cham_norm_x = _sum(cham_norm_x.reshape(-1))
    if batch_reduction == "mean":
        if weights is None:
            div = _full(max(n, 1), cham_x)
        elif weights.sum() == 0.0:
            div = _full(1, cham_x)
        else:
            div = _sum(weights)
        cham_x = cham_x / div
        if cham_norm_x is not None:
            cham_norm_x = cham_norm_x / div
    return cham_x, cham_norm_x


Result = Tuple[Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]],
               Optional[Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]]]


def chamfer_distance(
    x,
    y,
    x_lengths: Optional[torch.Tensor] = None,
    y_lengths: Optional[torch.Tensor] = None,
    x_normals: Optional[torch.Tensor] = None,
    y_normals: Optional[torch.Tensor] = None,
    weights: Optional[torch.Tensor] = None,
    batch_reduction: Optional[str] = "mean",
    point_reduction: Optional[str] = "mean",
    norm: int = 2,
    single_directional: bool = False,
    abs_cosine: bool = True,
) -> Result:
    """Chamfer distance between two batches of clouds (PyTorch3D 0.7.9 ``pytorch3d.loss``).

    Args:
        x: ``(N, P1, D)`` float32/float64 (float16/bfloat16 computed in float32) points, or a
            Pointclouds-like object (``points_padded``, ``num_points_per_cloud`` and optionally
            ``normals_padded``; its lengths and normals replace the arguments).
        y: ``(N, P2, D)`` points or Pointclouds-like, same dtype and device.
        x_lengths, y_lengths: optional integer ``(N,)`` valid lengths (zero allowed).
        x_normals, y_normals: optional ``(N, P, C)`` normals; the normal term is computed only
            when both are given.
        weights: optional ``(N,)`` non-negative per-cloud weights.
        batch_reduction: "mean" (divide by N, or by ``weights.sum()``, or 1 if that is 0), "sum"
            or None.
        point_reduction: "mean" (divide by the length, at least 1), "sum", "max" (Hausdorff-like,
            directions combined by ``torch.maximum``; no normals) or None (per-point tuples).
        norm: 2 (squared Euclidean) or 1 (L1 sum).
        single_directional: only the x -> y direction.
        abs_cosine: normal term ``1 - |cos|`` (True) or ``1 - cos``.

    Returns:
        ``(loss, loss_normals)`` as PyTorch3D: scalars, ``(N,)`` tensors, or with
        ``point_reduction=None`` the tuples ``(cham_x (N, P1), cham_y (N, P2))``;
        ``loss_normals`` is None without normals. Differentiable with respect to x, y and the
        normals (first and second order).

    Raises:
        ValueError: bad reductions, norm, shapes, lengths, weights, normals with "max", mixed
            devices. TypeError: non-floating points, mixed dtypes, non-integer lengths.
    """
    _validate_reductions(batch_reduction, point_reduction)
    if isinstance(norm, bool) or norm not in (1, 2):
        raise ValueError("Support for 1 or 2 norm.")
    norm = int(norm)
    if point_reduction == "max" and (x_normals is not None or y_normals is not None):
        raise ValueError('Normals must be None if point_reduction is "max"')
    x, x_lengths, x_normals = _handle_input(x, x_lengths, x_normals, "x")
    y, y_lengths, y_normals = _handle_input(y, y_lengths, y_normals, "y")
    if weights is not None:
        if not isinstance(weights, torch.Tensor):
            raise TypeError(f"weights: expected a tensor, got {type(weights).__name__}")
        if weights.dim() != 1:
            raise ValueError(f"weights must be of shape (N,), got {tuple(weights.shape)}")

    if (weights is None and point_reduction in ("mean", "sum") and (x_normals is None or y_normals is None)
            and x.dtype in (torch.float32, torch.float64)):
        # The common case: per-point distances and the reductions in one node (same bits).
        _check_pair(x, y)
        with torch.no_grad():
            idx_x = _nearest(x.detach(), y.detach(), x_lengths, y_lengths, norm)
            idx_y = None if single_directional else _nearest(y.detach(), x.detach(), y_lengths, x_lengths, norm)
        batch_mode = {None: 0, "sum": 1, "mean": 2}[batch_reduction]
        return _Chamfer.apply(x, y, idx_x, idx_y, x_lengths, y_lengths, norm, point_reduction == "mean",
                              batch_mode), None

    cham_x, cham_norm_x = _single_direction(x, y, x_lengths, y_lengths, x_normals, y_normals, weights,
                                            point_reduction, norm, abs_cosine)
    if single_directional:
        loss, loss_normals = cham_x, cham_norm_x
    else:
        cham_y, cham_norm_y = _single_direction(y, x, y_lengths, x_lengths, y_normals, x_normals, weights,
                                                point_reduction, norm, abs_cosine)
        if point_reduction == "max":
            loss, loss_normals = torch.maximum(cham_x, cham_y), None
        elif point_reduction is not None:
            loss = cham_x + cham_y
            loss_normals = cham_norm_x + cham_norm_y if cham_norm_x is not None else None
        else:
            loss = (cham_x, cham_y)
            loss_normals = (cham_norm_x, cham_norm_y) if cham_norm_x is not None else None
    return _batch_reduction(loss, loss_normals, weights, batch_reduction)
