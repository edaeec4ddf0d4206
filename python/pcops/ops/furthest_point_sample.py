"""Furthest point sampling (contract: docs/ops/furthest_point_sample.md)."""

from __future__ import annotations

import torch


def furthest_point_sample(
    points: torch.Tensor,
    num_samples: int,
    start_index: int = 0,
    lengths: torch.Tensor | None = None,
    skip_near_origin: bool = False,
) -> torch.Tensor:
    """Select ``num_samples`` points of each cloud by furthest point sampling.

    Args:
        points: ``[B, N, D]`` float32/float16/bfloat16 coordinates (D >= 1).
        num_samples: number of samples M per cloud (>= 0).
        start_index: index of the first centre (must lie inside every non-empty cloud).
        lengths: optional int64 ``[B]``; only the first ``lengths[b]`` points of cloud b are used,
            and slots past ``lengths[b]`` hold -1.
        skip_near_origin: pointnet2_ops rule, points with x^2+y^2+z^2 <= 1e-3 are never chosen
            after the start (3-D only).

    Returns:
        int64 ``[B, M]`` indices in selection order. Each step picks the smallest index among the
        points whose squared distance to the nearest chosen centre is largest; when M exceeds the
        available points, index 0 repeats.

    Raises:
        ValueError: bad shapes, negative ``num_samples``, bad lengths.
        IndexError: ``start_index`` out of range.
        TypeError: unsupported dtype.
    """
    return torch.ops.pcops.furthest_point_sample(
        points, int(num_samples), int(start_index), lengths, bool(skip_near_origin)
    )


@torch.library.register_fake("pcops::furthest_point_sample")
def _fake(points, num_samples, start_index=0, lengths=None, skip_near_origin=False):
    torch._check(points.dim() == 3, lambda: "points: expected a 3-D tensor")
    return points.new_empty((points.shape[0], num_samples), dtype=torch.int64)
