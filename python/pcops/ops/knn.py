"""Exact k nearest neighbours (contract: docs/ops/knn.md)."""

from __future__ import annotations

import torch


def knn(
    query: torch.Tensor,
    ref: torch.Tensor,
    k: int,
    query_lengths: torch.Tensor | None = None,
    ref_lengths: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` nearest references of every query, exactly.

    Args:
        query: ``[B, M, D]`` float coordinates (any D >= 1).
        ref: ``[B, N, D]`` float coordinates.
        k: neighbours per query (0 <= k <= N; with ``ref_lengths`` larger k pads).
        query_lengths, ref_lengths: optional int64 ``[B]`` valid lengths per cloud.

    Returns:
        ``(dist, idx)``: float32 Euclidean distances and int64 indices, each ``[B, M, k]``,
        ordered by (squared distance, index) ascending; NaN distances sort as +inf. Unfilled
        slots hold ``(inf, -1)``.

    Raises:
        ValueError: bad shapes, k < 0 or k > N without lengths, bad lengths.
        TypeError: unsupported dtype.
    """
    return torch.ops.pcops.knn(query, ref, int(k), query_lengths, ref_lengths)


@torch.library.register_fake("pcops::knn")
def _fake(query, ref, k, query_lengths=None, ref_lengths=None):
    shape = (query.shape[0], query.shape[1], k)
    return (
        query.new_empty(shape, dtype=torch.float32),
        query.new_empty(shape, dtype=torch.int64),
    )
