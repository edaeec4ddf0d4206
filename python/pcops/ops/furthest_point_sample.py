"""Furthest point sampling (contract: docs/ops/furthest_point_sample.md)."""

from __future__ import annotations

import torch

from pcops.ops import _checks


def furthest_point_sample(
    points: torch.Tensor,
    num_samples: int,
    start_index: int = 0,
    lengths: torch.Tensor | None = None,
    skip_near_origin: bool = False,
) -> torch.Tensor:
    """Select ``num_samples`` points of each cloud by furthest point sampling.

    Args:
        points: ``[B, N, D]`` float32/float16/bfloat16 coordinates (D >= 1; half precision is
            converted exactly to float32). float64 and integer coordinates raise TypeError.
        num_samples: number of samples M per cloud (>= 0).
        start_index: index of the first centre (must lie inside every non-empty cloud).
        lengths: optional int64 (or int32) ``[B]`` on the points' device; only the first
            ``lengths[b]`` points of cloud b are used, and slots past ``lengths[b]`` hold -1.
        skip_near_origin: pointnet2_ops rule, points with x^2+y^2+z^2 <= 1e-3 are never chosen
            after the start (3-D only).

    Returns:
        int64 ``[B, M]`` indices in selection order. Each step picks the smallest index among the
        points whose squared distance to the nearest chosen centre is largest; without
        ``lengths``, when M exceeds the available points, index 0 repeats.

    Raises:
        ValueError: bad shapes, negative ``num_samples``, bad lengths, mixed devices.
        IndexError: ``start_index`` out of range.
        TypeError: unsupported dtype (float64, integers), non-integer arguments.
    """
    num_samples = _checks.integer(num_samples, "num_samples")
    start_index = _checks.integer(start_index, "start_index")
    if not isinstance(skip_near_origin, bool):
        raise TypeError(f"skip_near_origin: expected a bool, got {type(skip_near_origin).__name__}")
    return torch.ops.pcops.furthest_point_sample(points, num_samples, start_index, lengths, skip_near_origin)


@torch.library.register_fake("pcops::furthest_point_sample")
def _fake(points, num_samples, start_index=0, lengths=None, skip_near_origin=False):
    _checks.points(points, "points")
    _checks.lengths(lengths, points, "points", "lengths")
    _checks.non_negative(num_samples, "num_samples")
    torch._check_value(points.shape[2] >= 1, lambda: "points: expected at least one coordinate (dim >= 1)")
    torch._check_value(
        not skip_near_origin or points.shape[2] == 3,
        lambda: f"skip_near_origin: needs 3-D points, got dim {points.shape[2]}",
    )
    torch._check_index(start_index >= 0, lambda: f"start_index: expected >= 0, got {start_index}")
    if lengths is None:
        # The real kernel checks these only when there is something to sample.
        torch._check_value(
            num_samples == 0 or points.shape[0] == 0 or points.shape[1] > 0,
            lambda: f"points: cannot draw num_samples={num_samples} from clouds of 0 points",
        )
        torch._check_index(
            num_samples == 0 or points.shape[0] == 0 or start_index < points.shape[1],
            lambda: f"start_index: expected in [0, {points.shape[1]}), got {start_index}",
        )
    return points.new_empty((points.shape[0], num_samples), dtype=torch.int64)
