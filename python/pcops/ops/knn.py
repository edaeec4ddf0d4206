"""Exact k nearest neighbours (contract: docs/ops/knn.md)."""

from __future__ import annotations

import torch

from pcops.ops import _checks


def knn(
    query: torch.Tensor,
    ref: torch.Tensor,
    k: int,
    query_lengths: torch.Tensor | None = None,
    ref_lengths: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` nearest references of every query, exactly.

    Args:
        query: ``[B, M, D]`` float32/float16/bfloat16 coordinates (any D >= 1; half precision is
            converted exactly to float32). float64 and integer coordinates raise TypeError.
        ref: ``[B, N, D]`` coordinates on the same device.
        k: neighbours per query (0 <= k <= N; with ``ref_lengths`` a larger k pads).
        query_lengths, ref_lengths: optional int64 (or int32) ``[B]`` valid lengths per cloud.

    Returns:
        ``(dist, idx)``: float32 Euclidean distances and int64 indices, each ``[B, M, k]``,
        ordered by (squared distance, index) ascending; NaN squared distances sort as +inf.
        Unfilled slots hold ``(inf, -1)``. Neither output is differentiable: gather the
        coordinates with ``idx`` to differentiate distances.

    Raises:
        ValueError: bad shapes, k < 0 or k > N without lengths, bad lengths, mixed devices.
        TypeError: unsupported dtype (float64, integers), non-integer k.
    """
    k = _checks.integer(k, "k")
    return torch.ops.pcops.knn(query, ref, k, query_lengths, ref_lengths)


@torch.library.register_fake("pcops::knn")
def _fake(query, ref, k, query_lengths=None, ref_lengths=None):
    _checks.same_device(query, "query", ref, "ref")
    _checks.points(query, "query")
    _checks.points(ref, "ref")
    _checks.lengths(query_lengths, query, "query", "query_lengths")
    _checks.lengths(ref_lengths, query, "query", "ref_lengths")
    _checks.non_negative(k, "k")
    torch._check_value(
        query.shape[0] == ref.shape[0],
        lambda: f"ref: expected batch size {query.shape[0]} (as query), got {ref.shape[0]}",
    )
    torch._check_value(
        query.shape[2] == ref.shape[2],
        lambda: f"ref: expected dimension {query.shape[2]} (as query), got {ref.shape[2]}",
    )
    torch._check_value(query.shape[2] >= 1, lambda: "query: expected at least one coordinate (dim >= 1)")
    if ref_lengths is None:
        torch._check_value(
            k <= ref.shape[1],
            lambda: f"k: expected <= {ref.shape[1]} (the number of reference points), got {k}",
        )
    shape = (query.shape[0], query.shape[1], k)
    return (
        query.new_empty(shape, dtype=torch.float32),
        query.new_empty(shape, dtype=torch.int64),
    )


def _setup_context(ctx, inputs, output):
    ctx.mark_non_differentiable(*output)


def _backward(ctx, grad_dist, grad_idx):
    return None, None, None, None, None


# Not differentiable: registering the formula explicitly marks both outputs as such (instead of
# the autograd fallback, which would attach a grad_fn that only warns).
torch.library.register_autograd("pcops::knn", _backward, setup_context=_setup_context)
