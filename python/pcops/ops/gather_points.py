"""Gather per-point features by index (contract: docs/ops/gather_points.md)."""

from __future__ import annotations

import torch

from pcops.ops import _checks, _gather_autograd


def gather_points(features: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``out[b, c, m] = features[b, c, idx[b, m]]`` (pointnet2_ops' ``gather_operation``).

    Args:
        features: ``[B, C, N]`` float32/float16/bfloat16 values (channels first).
        idx: ``[B, M]`` int64 indices, each in ``[-1, N)`` (for example from
            :func:`pcops.furthest_point_sample`); -1 (padding) gives 0 and gets no gradient.

    Returns:
        ``[B, C, M]`` in the dtype of ``features`` (an exact copy). Differentiable with respect
        to ``features``: the gradient is a scatter-add in ascending ``m`` order (no atomics,
        deterministic), in the dtype of ``features``; second derivatives are supported.

    Raises:
        ValueError: bad ranks or shapes, mixed devices.
        TypeError: unsupported dtypes (float64 or integer values, idx not int64).
        IndexError: an index outside ``[-1, N)``.
    """
    return torch.ops.pcops.gather_points(features, idx)


@torch.library.register_fake("pcops::gather_points")
def _fake(features, idx):
    _checks.same_device(features, "features", idx, "idx")
    _checks.values(features, "features", 3, "[B, C, N]")
    _checks.indices(idx, "idx")
    torch._check_value(
        idx.dim() == 2 and idx.shape[0] == features.shape[0],
        lambda: f"idx: expected shape [{features.shape[0]}, M], got {tuple(idx.shape)}",
    )
    return features.new_empty((features.shape[0], features.shape[1], idx.shape[1]))


@torch.library.register_fake("pcops::_gather_points_backward")
def _fake_backward(grad_out, idx, count):
    _checks.same_device(grad_out, "grad_out", idx, "idx")
    _checks.values(grad_out, "grad_out", 3, "[B, C, M]")
    _checks.indices(idx, "idx")
    torch._check_value(
        idx.dim() == 2 and idx.shape[0] == grad_out.shape[0] and idx.shape[1] == grad_out.shape[2],
        lambda: f"idx: expected shape [{grad_out.shape[0]}, {grad_out.shape[2]}], got {tuple(idx.shape)}",
    )
    _checks.non_negative(count, "count")
    return grad_out.new_empty((grad_out.shape[0], grad_out.shape[1], count))


_gather_autograd.register("gather_points", gather_points)


def index_cast(idx: torch.Tensor, dtype: torch.dtype,
               bounds_from: torch.Tensor | None = None) -> torch.Tensor:
    """``idx`` as a new int32 / int64 tensor that keeps the index range the library knows for
    ``bounds_from`` (default ``idx``), so that the CUDA index checks of later calls need no stream
    sync (docs/cuda.md). The stand-ins' casts of their upstream int32 indices go through it; the
    caller vouches that ``idx``'s values lie inside ``bounds_from``'s range."""
    return torch.ops.pcops._index_cast(idx, dtype, bounds_from)


@torch.library.register_fake("pcops::_index_cast")
def _fake_index_cast(idx, dtype, bounds_from=None):
    torch._check_type(idx.dtype in (torch.int32, torch.int64),
                      lambda: f"idx: expected an int32 or int64 tensor, got {idx.dtype}")
    torch._check_type(dtype in (torch.int32, torch.int64),
                      lambda: f"dtype: expected int32 or int64, got {dtype}")
    return torch.empty_like(idx, dtype=dtype)
