"""Weighted interpolation from three neighbours (contract: docs/ops/three_interpolate.md)."""

from __future__ import annotations

import torch

from pcops.ops import _checks


def three_interpolate(features: torch.Tensor, idx: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``out[b, c, n] = sum_t weight[b, n, t] * features[b, c, idx[b, n, t]]`` for t = 0, 1, 2.

    The sum is evaluated in float32 without fused multiply-add in slot order:
    ``acc = +0; acc = fl(acc + fl(w_t * f_t))`` for t = 0, 1, 2, skipping slots whose index is -1
    (three_nn's padding), so results are bitwise reproducible.

    Args:
        features: ``[B, C, M]`` float32/float16/bfloat16 values (channels first).
        idx: ``[B, N, 3]`` int64 indices into the M points, each in ``[-1, M)``; -1 slots
            contribute nothing and get no gradient.
        weight: ``[B, N, 3]`` float32/float16/bfloat16 weights (for PointNet++:
            ``1 / (dist + 1e-8)`` normalised over the three slots).

    Returns:
        ``[B, C, N]`` in the dtype of ``features`` (computed in float32, rounded once).
        Differentiable with respect to ``features`` (deterministic scatter in ascending
        ``(n, t)`` order, no atomics) and ``weight`` (``sum_c grad_out[b, c, n] *
        features[b, c, idx[b, n, t]]``, channels in ascending order); gradients in the inputs'
        dtypes; second derivatives are supported. Note: pointnet2_ops returns zeros as the weight
        gradient; its stand-in (pcops.compat) does that itself.

    Raises:
        ValueError: bad ranks or shapes, mixed devices.
        TypeError: unsupported dtypes (float64 or integer values, idx not int64).
        IndexError: an index outside ``[-1, M)``.
    """
    return torch.ops.pcops.three_interpolate(features, idx, weight)


def _check_inputs(features, idx, weight):
    _checks.same_device(features, "features", idx, "idx")
    _checks.same_device(features, "features", weight, "weight")
    _checks.values(features, "features", 3, "[B, C, M]")
    _checks.indices(idx, "idx")
    torch._check_value(
        idx.dim() == 3 and idx.shape[0] == features.shape[0] and idx.shape[2] == 3,
        lambda: f"idx: expected shape [{features.shape[0]}, N, 3], got {tuple(idx.shape)}",
    )
    _checks.values(weight, "weight", 3, "[B, N, 3]")
    torch._check_value(
        weight.shape == idx.shape,
        lambda: f"weight: expected shape {tuple(idx.shape)} (as idx), got {tuple(weight.shape)}",
    )


@torch.library.register_fake("pcops::three_interpolate")
def _fake(features, idx, weight):
    _check_inputs(features, idx, weight)
    return features.new_empty((features.shape[0], features.shape[1], idx.shape[1]))


@torch.library.register_fake("pcops::_three_interpolate_backward")
def _fake_backward(grad_out, features, idx, weight, need_features=True, need_weight=True, idx_checked=False):
    _checks.same_device(features, "features", grad_out, "grad_out")
    _check_inputs(features, idx, weight)
    _checks.values(grad_out, "grad_out", 3, "[B, C, N]")
    torch._check_value(
        grad_out.shape[0] == features.shape[0]
        and grad_out.shape[1] == features.shape[1]
        and grad_out.shape[2] == idx.shape[1],
        lambda: f"grad_out: expected shape [{features.shape[0]}, {features.shape[1]}, {idx.shape[1]}], "
        f"got {tuple(grad_out.shape)}",
    )
    return features.new_empty(features.shape), weight.new_empty(weight.shape)


def _setup_context(ctx, inputs, output):
    features, idx, weight = inputs
    ctx.save_for_backward(features, idx, weight)
    ctx.set_materialize_grads(False)


def _backward(ctx, grad_out):
    features, idx, weight = ctx.saved_tensors
    need_features, need_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[2]
    if grad_out is None or not (need_features or need_weight):
        return None, None, None
    # idx_checked: idx is the forward's, whose values were checked there (a saved tensor cannot
    # change unnoticed), so the backward does not read them again (no synchronisation on CUDA).
    gf, gw = torch.ops.pcops._three_interpolate_backward(
        grad_out, features, idx, weight, need_features, need_weight, True
    )
    return (gf if need_features else None), None, (gw if need_weight else None)


torch.library.register_autograd("pcops::three_interpolate", _backward, setup_context=_setup_context)


# Double backward. With G = grad_out: gf = scatter of G * w (linear in G and w) and
# gw[n, t] = sum_c G[c, n] F[c, idx[n, t]] (bilinear in G and F). With upstream gradients A
# (of gf) and W (of gw):
#   dL/dG = three_interpolate(A, idx, w) + three_interpolate(F, idx, W),
#   dL/dF = the features gradient of the backward with weights W,
#   dL/dw = the weight gradient of the backward with features A.
# Written with the operators themselves, so higher orders work too. An output that was not
# requested (need_* false) is a constant zero tensor and gets no gradient.
def _setup_context_backward(ctx, inputs, output):
    grad_out, features, idx, weight, need_features, need_weight = inputs[:6]
    ctx.save_for_backward(grad_out, features, idx, weight)
    ctx.need = (need_features, need_weight)
    ctx.set_materialize_grads(False)


def _backward_backward(ctx, grad_gf, grad_gw):
    grad_out, features, idx, weight = ctx.saved_tensors
    need_features, need_weight = ctx.need
    a = grad_gf if need_features else None
    w2 = grad_gw if need_weight else None
    need = ctx.needs_input_grad
    d_grad = d_features = d_weight = None
    if need[0] and (a is not None or w2 is not None):
        parts = []
        if a is not None:
            parts.append(three_interpolate(a, idx, weight).float())
        if w2 is not None:
            parts.append(three_interpolate(features, idx, w2).float())
        d_grad = (parts[0] if len(parts) == 1 else parts[0] + parts[1]).to(grad_out.dtype)
    if need[1] and w2 is not None:
        d_features = torch.ops.pcops._three_interpolate_backward(grad_out, features, idx, w2, True, False, True)[0]
        d_features = d_features.to(features.dtype)
    if need[3] and a is not None:
        d_weight = torch.ops.pcops._three_interpolate_backward(grad_out, a, idx, weight, False, True, True)[1]
        d_weight = d_weight.to(weight.dtype)
    return d_grad, d_features, None, d_weight, None, None, None


torch.library.register_autograd(
    "pcops::_three_interpolate_backward", _backward_backward, setup_context=_setup_context_backward
)
