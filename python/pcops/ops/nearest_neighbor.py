"""Exact nearest neighbour of chamfer_distance, and the two deterministic helpers of its autograd
(contract: docs/ops/chamfer_distance.md, "Nearest-neighbour search").

``torch.ops.pcops.nearest_neighbor`` runs in the input precision (float32 or float64; float16 and
bfloat16 are converted exactly to float32). ``_ordered_sum``, ``_ordered_norm`` and ``_gather_rows_backward`` give
every device the same summation order, so chamfer_distance's values and gradients do not depend on
the device (no order-dependent reduction, no atomics).
"""

from __future__ import annotations

import torch

from pcops.ops import _checks

_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def nearest_neighbor(
    x: torch.Tensor,
    y: torch.Tensor,
    x_lengths: torch.Tensor | None = None,
    y_lengths: torch.Tensor | None = None,
    norm: int = 2,
) -> torch.Tensor:
    """Index of the nearest valid point of ``y`` for every valid point of ``x``.

    Args:
        x: ``[B, P1, D]`` float32/float64 coordinates (float16/bfloat16 converted exactly to
            float32), any D >= 1.
        y: ``[B, P2, D]`` coordinates of the same dtype and device.
        x_lengths, y_lengths: optional int64 (or int32) ``[B]`` valid lengths.
        norm: 2 (squared L2) or 1 (L1 sum).

    Returns:
        int64 ``[B, P1]``: the smallest (s, index), s summed in coordinate order without FMA in the
        input precision, NaN ranked as +inf, ties to the lowest index; -1 for rows past
        ``x_lengths`` and for clouds whose ``y`` is empty. Not differentiable.
    """
    norm = _checks.integer(norm, "norm")
    return torch.ops.pcops.nearest_neighbor(x, y, x_lengths, y_lengths, norm)


def _coords(t, name):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a tensor, got {type(t).__name__}")
    torch._check_value(t.dim() == 3, lambda: f"{name}: expected a 3-D tensor, got shape {tuple(t.shape)}")
    torch._check_type(t.dtype in _DTYPES,
                      lambda: f"{name}: expected float32, float64, float16 or bfloat16 values, got {t.dtype}")


@torch.library.register_fake("pcops::nearest_neighbor")
def _fake(x, y, x_lengths=None, y_lengths=None, norm=2):
    _checks.same_device(x, "x", y, "y")
    _coords(x, "x")
    _coords(y, "y")
    torch._check_type(x.dtype == y.dtype, lambda: f"y: expected dtype {x.dtype} (as x), got {y.dtype}")
    _checks.lengths(x_lengths, x, "x", "x_lengths")
    _checks.lengths(y_lengths, x, "x", "y_lengths")
    torch._check_value(x.shape[0] == y.shape[0],
                       lambda: f"y: expected batch size {x.shape[0]} (as x), got {y.shape[0]}")
    torch._check_value(x.shape[2] == y.shape[2],
                       lambda: f"y: expected dimension {x.shape[2]} (as x), got {y.shape[2]}")
    torch._check_value(x.shape[2] >= 1, lambda: "x: expected at least one coordinate (dim >= 1)")
    torch._check_value(norm in (1, 2), lambda: f"norm: expected 1 or 2, got {norm}")
    return x.new_empty((x.shape[0], x.shape[1]), dtype=torch.int64)


@torch.library.register_fake("pcops::_ordered_sum")
def _fake_sum(values):
    torch._check_value(values.dim() >= 1, lambda: "values: expected at least one dimension, got a scalar")
    torch._check_type(values.dtype in _DTYPES, lambda: f"values: unsupported dtype {values.dtype}")
    return values.new_empty(values.shape[:-1])


@torch.library.register_fake("pcops::_ordered_norm")
def _fake_norm(values):
    return _fake_sum(values)


@torch.library.register_fake("pcops::_gather_rows_backward")
def _fake_gather_backward(grad, idx, count):
    _checks.same_device(grad, "grad", idx, "idx")
    _coords(grad, "grad")
    _checks.indices(idx, "idx")
    torch._check_value(
        idx.dim() == 2 and idx.shape[0] == grad.shape[0] and idx.shape[1] == grad.shape[1],
        lambda: f"idx: expected shape [{grad.shape[0]}, {grad.shape[1]}], got {tuple(idx.shape)}",
    )
    _checks.non_negative(count, "count")
    return grad.new_empty((grad.shape[0], count, grad.shape[2]))


def _setup_context(ctx, inputs, output):
    ctx.mark_non_differentiable(output)


def _backward(ctx, grad):
    return None, None, None, None, None


torch.library.register_autograd("pcops::nearest_neighbor", _backward, setup_context=_setup_context)


# ---------------------------------------------------------------------------------------------
# Autograd of the helpers (used by chamfer_distance)


class OrderedSum(torch.autograd.Function):
    """Sum over the last dimension in the written order of ``pcops::_ordered_sum``; the gradient
    is the upstream gradient broadcast back (exact)."""

    @staticmethod
    def forward(ctx, values):
        ctx.shape = values.shape
        return torch.ops.pcops._ordered_sum(values)

    @staticmethod
    def backward(ctx, grad):
        return grad.unsqueeze(-1).expand(ctx.shape)


class GatherRows(torch.autograd.Function):
    """``values [B, M, U]`` gathered by ``idx [B, P]`` (-1 reads row 0; the caller masks it) ->
    ``[B, P, U]``; the gradient sums into each row in ascending ``p`` from +0
    (``pcops::_gather_rows_backward``), so it is deterministic and device independent."""

    @staticmethod
    def forward(ctx, values, idx):
        ctx.save_for_backward(idx)
        ctx.count = values.shape[1]
        n, p = idx.shape
        u = values.shape[2]
        if values.shape[1] == 0:  # an empty cloud: every row is masked by the caller
            return values.new_zeros((n, p, u))
        safe = idx.clamp(min=0)
        return torch.gather(values, 1, safe[:, :, None].expand(n, p, u))

    @staticmethod
    def backward(ctx, grad):
        (idx,) = ctx.saved_tensors
        if not ctx.needs_input_grad[0]:
            return None, None
        return ScatterRows.apply(grad, idx, ctx.count), None


class ScatterRows(torch.autograd.Function):
    """The transposed gather (its own gradient is the gather again)."""

    @staticmethod
    def forward(ctx, grad, idx, count):
        ctx.save_for_backward(idx)
        return torch.ops.pcops._gather_rows_backward(grad, idx, count)

    @staticmethod
    def backward(ctx, grad_grad):
        (idx,) = ctx.saved_tensors
        if not ctx.needs_input_grad[0]:
            return None, None, None
        out = GatherRows.apply(grad_grad, idx)
        return out.masked_fill((idx < 0)[:, :, None], 0.0), None, None
