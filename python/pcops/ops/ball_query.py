"""Ball query, first K matches in reference order (contract: docs/ops/ball_query.md)."""

from __future__ import annotations

import torch


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
        query: ``[B, M, 3]`` float32/float16/bfloat16 coordinates.
        ref: ``[B, N, 3]`` coordinates of the same dtype.
        radius: finite, >= 0; the threshold is ``fl32(fl32(r) * fl32(r))`` and a match needs
            ``s < threshold`` (radius 0 matches nothing).
        K: maximum matches per query (>= 0).
        query_lengths, ref_lengths: optional int64 ``[B]`` valid lengths per cloud.

    Returns:
        ``(dist2, idx)``: float32 squared distances and int64 indices, each ``[B, M, K]``. Slots
        after the matches hold ``(0, -1)``; test ``idx >= 0``. ``dist2`` is differentiable with
        respect to ``query`` and ``ref``.

    Raises:
        ValueError: bad shapes, radius negative or not finite, K < 0, bad lengths.
        TypeError: unsupported or mismatched dtypes.
    """
    if isinstance(radius, bool) or not isinstance(radius, (int, float)):
        raise TypeError(f"radius: expected a Python number, got {type(radius).__name__}")
    return torch.ops.pcops.ball_query(query, ref, float(radius), int(K), query_lengths, ref_lengths)


@torch.library.register_fake("pcops::ball_query")
def _fake(query, ref, radius, K, query_lengths=None, ref_lengths=None):
    shape = (query.shape[0], query.shape[1], K)
    return (
        query.new_empty(shape, dtype=torch.float32),
        query.new_empty(shape, dtype=torch.int64),
    )


@torch.library.register_fake("pcops::_ball_query_backward")
def _fake_backward(grad_dist2, query, ref, idx):
    return torch.empty_like(query), torch.empty_like(ref)


def _setup_context(ctx, inputs, output):
    query, ref = inputs[0], inputs[1]
    _, idx = output
    ctx.save_for_backward(query, ref, idx)
    ctx.mark_non_differentiable(idx)


def _backward(ctx, grad_dist2, grad_idx):
    query, ref, idx = ctx.saved_tensors
    if grad_dist2 is None:
        return None, None, None, None, None, None
    gq, gr = torch.ops.pcops._ball_query_backward(grad_dist2, query, ref, idx)
    return gq, gr, None, None, None, None


torch.library.register_autograd("pcops::ball_query", _backward, setup_context=_setup_context)
