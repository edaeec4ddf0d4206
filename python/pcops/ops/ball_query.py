"""Ball query, first K matches in reference order (contract: docs/ops/ball_query.md)."""

from __future__ import annotations

import math
import numbers

import torch

from pcops.ops import _checks

_FLOAT32_MAX = 3.4028234663852886e38


def ball_query(
    query: torch.Tensor,
    ref: torch.Tensor,
    radius: float,
    K: int,
    query_lengths: torch.Tensor | None = None,
    ref_lengths: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``K`` references (in input order) strictly inside ``radius`` of each query.

    Args:
        query: ``[B, M, 3]`` float32/float16/bfloat16 coordinates (half precision is converted
            exactly to float32). float64 and integer coordinates raise TypeError.
        ref: ``[B, N, 3]`` coordinates of the same dtype and on the same device.
        radius: finite real number >= 0 (Python or NumPy scalar, not a tensor); the threshold
            is ``fl32(fl32(r) * fl32(r))`` and a match needs ``s < threshold`` (radius 0
            matches nothing).
        K: maximum matches per query (>= 0).
        query_lengths, ref_lengths: optional int64 (or int32) ``[B]`` valid lengths per cloud.

    Returns:
        ``(dist2, idx)``: float32 squared distances and int64 indices, each ``[B, M, K]``. Slots
        after the matches hold ``(0, -1)``; test ``idx >= 0``. ``dist2`` is differentiable with
        respect to ``query`` and ``ref`` (gradients in their dtypes; padded slots contribute
        nothing); second derivatives are supported.

    Raises:
        ValueError: bad shapes, radius negative or not finite, K < 0, bad lengths, mixed devices.
        TypeError: unsupported or mismatched dtypes, radius not a real number (a tensor or a
            bool), K not an int.
    """
    if isinstance(radius, bool) or not isinstance(radius, numbers.Real):
        raise TypeError(f"radius: expected a real number, got {type(radius).__name__}")
    K = _checks.integer(K, "K")
    return torch.ops.pcops.ball_query(query, ref, float(radius), K, query_lengths, ref_lengths)


@torch.library.register_fake("pcops::ball_query")
def _fake(query, ref, radius, K, query_lengths=None, ref_lengths=None):
    _checks.same_device(query, "query", ref, "ref")
    torch._check_type(
        query.dtype == ref.dtype, lambda: f"ref: expected dtype {query.dtype} (as query), got {ref.dtype}"
    )
    _checks.points(query, "query")
    _checks.points(ref, "ref")
    _checks.lengths(query_lengths, query, "query", "query_lengths")
    _checks.lengths(ref_lengths, query, "query", "ref_lengths")
    torch._check_value(
        math.isfinite(radius) and 0.0 <= radius <= _FLOAT32_MAX,
        lambda: f"radius: expected a finite value >= 0 that fits float32, got {radius}",
    )
    _checks.non_negative(K, "K")
    torch._check_value(query.shape[2] == 3, lambda: f"query: expected 3-D points, got dim {query.shape[2]}")
    torch._check_value(ref.shape[2] == 3, lambda: f"ref: expected 3-D points, got dim {ref.shape[2]}")
    torch._check_value(
        query.shape[0] == ref.shape[0],
        lambda: f"ref: expected batch size {query.shape[0]} (as query), got {ref.shape[0]}",
    )
    shape = (query.shape[0], query.shape[1], K)
    return (
        query.new_empty(shape, dtype=torch.float32),
        query.new_empty(shape, dtype=torch.int64),
    )


@torch.library.register_fake("pcops::_ball_query_backward")
def _fake_backward(grad_dist2, query, ref, idx):
    _checks.same_device(query, "query", ref, "ref")
    _checks.same_device(query, "query", idx, "idx")
    _checks.same_device(query, "query", grad_dist2, "grad_dist2")
    torch._check_type(
        query.dtype == ref.dtype, lambda: f"ref: expected dtype {query.dtype} (as query), got {ref.dtype}"
    )
    _checks.points(query, "query")
    _checks.points(ref, "ref")
    torch._check_type(idx.dtype == torch.int64, lambda: f"idx: expected an int64 tensor, got {idx.dtype}")
    torch._check_type(
        grad_dist2.dtype in _checks.FLOAT_DTYPES,
        lambda: f"grad_dist2: expected float32, float16 or bfloat16, got {grad_dist2.dtype}",
    )
    torch._check_value(query.shape[2] == 3, lambda: f"query: expected 3-D points, got dim {query.shape[2]}")
    torch._check_value(ref.shape[2] == 3, lambda: f"ref: expected 3-D points, got dim {ref.shape[2]}")
    torch._check_value(
        query.shape[0] == ref.shape[0],
        lambda: f"ref: expected batch size {query.shape[0]} (as query), got {ref.shape[0]}",
    )
    torch._check_value(
        idx.dim() == 3 and idx.shape[0] == query.shape[0] and idx.shape[1] == query.shape[1],
        lambda: f"idx: expected shape [{query.shape[0]}, {query.shape[1]}, K], got {tuple(idx.shape)}",
    )
    torch._check_value(
        grad_dist2.shape == idx.shape,
        lambda: f"grad_dist2: expected shape {tuple(idx.shape)}, got {tuple(grad_dist2.shape)}",
    )
    return query.new_empty(query.shape), ref.new_empty(ref.shape)


def _setup_context(ctx, inputs, output):
    query, ref = inputs[0], inputs[1]
    _, idx = output
    ctx.save_for_backward(query, ref, idx)
    ctx.mark_non_differentiable(idx)
    ctx.set_materialize_grads(False)  # no zero-filled gradient for idx (or an unused dist2)


def _backward(ctx, grad_dist2, grad_idx):
    query, ref, idx = ctx.saved_tensors
    need_query, need_ref = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    if grad_dist2 is None or not (need_query or need_ref):
        return None, None, None, None, None, None
    gq, gr = torch.ops.pcops._ball_query_backward(grad_dist2, query, ref, idx)
    return (gq if need_query else None), (gr if need_ref else None), None, None, None, None


torch.library.register_autograd("pcops::ball_query", _backward, setup_context=_setup_context)


# Double backward. The first-order gradients are linear in the upstream gradient G:
#   gq_i = sum_t W_it d_it,  gr_j = -sum_{(i,t): idx_it = j} W_it d_it,
# with d_it = q_i - x_{idx_it} and W_it = 2 G_it on filled slots, 0 on padded ones. With
# upstream gradients A (of gq) and C (of gr) and E_it = A_i - C_{idx_it}:
#   dL/dG_it = 2 d_it . E_it (filled slots),  dL/dq_i = sum_t W_it E_it,
#   dL/dx_j = -sum_{(i,t): idx_it = j} W_it E_it.
# Written with differentiable PyTorch operations, so higher orders work too.
def _gather_rows(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    b, m, k = idx.shape
    flat = idx.reshape(b, m * k, 1).expand(b, m * k, x.shape[2])
    return torch.gather(x, 1, flat).reshape(b, m, k, x.shape[2])


def _scatter_rows(values: torch.Tensor, idx: torch.Tensor, n: int) -> torch.Tensor:
    b, m, k, d = values.shape
    out = values.new_zeros((b, n, d))
    flat = idx.reshape(b, m * k, 1).expand(b, m * k, d)
    return out.scatter_add(1, flat, values.reshape(b, m * k, d))


def _setup_context_backward(ctx, inputs, output):
    grad_dist2, query, ref, idx = inputs
    ctx.save_for_backward(grad_dist2, query, ref, idx)
    ctx.set_materialize_grads(False)


def _backward_backward(ctx, grad_gq, grad_gr):
    grad_dist2, query, ref, idx = ctx.saved_tensors
    need = ctx.needs_input_grad
    if grad_gq is None and grad_gr is None:
        return None, None, None, None
    mask = idx >= 0
    safe = torch.where(mask, idx, torch.zeros_like(idx))
    q = query.float()
    x = ref.float()
    diff = q.unsqueeze(2) - _gather_rows(x, safe)  # [B, M, K, 3]
    e = grad_gq.float().unsqueeze(2) if grad_gq is not None else q.new_zeros(q.shape).unsqueeze(2)
    if grad_gr is not None:
        e = e - _gather_rows(grad_gr.float(), safe)
    else:
        e = e.expand(diff.shape)
    w = torch.where(mask, 2.0 * grad_dist2.float(), torch.zeros_like(grad_dist2, dtype=torch.float32))
    d_grad = d_query = d_ref = None
    if need[0]:
        d_grad = torch.where(mask, 2.0 * (diff * e).sum(-1), torch.zeros_like(w)).to(grad_dist2.dtype)
    we = torch.where(mask.unsqueeze(-1), w.unsqueeze(-1) * e, torch.zeros_like(diff))
    if need[1]:
        d_query = we.sum(2).to(query.dtype)
    if need[2]:
        d_ref = (-_scatter_rows(we, safe, ref.shape[1])).to(ref.dtype)
    return d_grad, d_query, d_ref, None


torch.library.register_autograd(
    "pcops::_ball_query_backward", _backward_backward, setup_context=_setup_context_backward
)
