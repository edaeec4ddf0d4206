"""The three nearest known points of every unknown point (contract: docs/ops/three_nn.md)."""

from __future__ import annotations

import torch

from pcops.ops import _checks


def three_nn(
    unknown: torch.Tensor,
    known: torch.Tensor,
    unknown_lengths: torch.Tensor | None = None,
    known_lengths: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The three nearest ``known`` points of every ``unknown`` point, exactly (kNN with k = 3).

    Args:
        unknown: ``[B, N, 3]`` float32/float16/bfloat16 coordinates (half precision is converted
            exactly to float32). float64 and integer coordinates raise TypeError.
        known: ``[B, M, 3]`` coordinates on the same device, ``M >= 3``.
        unknown_lengths, known_lengths: optional int64 (or int32) ``[B]`` valid lengths per
            cloud, as in :func:`pcops.knn`.

    Returns:
        ``(dist, idx)``: float32 Euclidean distances ``sqrt(s)`` (taken after selection) and
        int64 indices, each ``[B, N, 3]``, ordered by (squared distance, index) ascending, so
        among equal distances the lower index comes first; NaN squared distances sort as +inf.
        With ``known_lengths`` below 3, the missing slots hold ``(inf, -1)`` (and
        :func:`pcops.three_interpolate` skips index -1). Not differentiable.

    Raises:
        ValueError: bad shapes (not 3-D points, batch mismatch), ``M < 3``, bad lengths, mixed
            devices.
        TypeError: unsupported dtype.
    """
    return torch.ops.pcops.three_nn(unknown, known, unknown_lengths, known_lengths)


@torch.library.register_fake("pcops::three_nn")
def _fake(unknown, known, unknown_lengths=None, known_lengths=None):
    _checks.same_device(unknown, "unknown", known, "known")
    _checks.points(unknown, "unknown")
    _checks.points(known, "known")
    _checks.lengths(unknown_lengths, unknown, "unknown", "unknown_lengths")
    _checks.lengths(known_lengths, unknown, "unknown", "known_lengths")
    torch._check_value(unknown.shape[2] == 3, lambda: f"unknown: expected 3-D points, got dim {unknown.shape[2]}")
    torch._check_value(known.shape[2] == 3, lambda: f"known: expected 3-D points, got dim {known.shape[2]}")
    torch._check_value(
        unknown.shape[0] == known.shape[0],
        lambda: f"known: expected batch size {unknown.shape[0]} (as unknown), got {known.shape[0]}",
    )
    torch._check_value(
        known.shape[1] >= 3, lambda: f"known: expected at least 3 points (M >= 3), got M = {known.shape[1]}"
    )
    shape = (unknown.shape[0], unknown.shape[1], 3)
    return (
        unknown.new_empty(shape, dtype=torch.float32),
        unknown.new_empty(shape, dtype=torch.int64),
    )


def _setup_context(ctx, inputs, output):
    ctx.mark_non_differentiable(*output)


def _backward(ctx, grad_dist, grad_idx):
    return None, None, None, None


# Not differentiable (as pointnet2_ops marks both outputs): registered explicitly so that the
# outputs carry no grad_fn.
torch.library.register_autograd("pcops::three_nn", _backward, setup_context=_setup_context)
