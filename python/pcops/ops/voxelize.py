"""Voxelization and voxel downsampling (contract: docs/ops/voxelize.md)."""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence, Union

import torch
from torch import Tensor

from pcops.ops import _checks
from pcops.ops.scatter import segment_csr

__all__ = ["Voxelization", "VoxelDownsample", "voxelize", "voxel_downsample"]

Grid = Union[float, Sequence[float], Tensor]


class Voxelization(NamedTuple):
    inverse: Tensor  # [N] voxel id of every point, -1 for dropped points
    coords: Tensor  # [V, D] int64 cells floor((p - start) / voxel_size)
    batch: Tensor  # [V] cloud of every voxel
    counts: Tensor  # [V] points per voxel
    ptr: Tensor  # [V + 1] CSR offsets into perm
    perm: Tensor  # [N] points grouped by voxel (stable), dropped points last


class VoxelDownsample(NamedTuple):
    points: Tensor  # [V, D] mean (or sum) of the positions of each voxel
    features: Optional[Tensor]  # [V, C] mean (or sum) of the features, None without features
    batch: Tensor  # [V]
    coords: Tensor  # [V, D]
    counts: Tensor  # [V]
    inverse: Tensor  # [N]


def _grid(value: Optional[Grid], points: Tensor, name: str) -> Optional[Tensor]:
    if value is None:
        return None
    if isinstance(value, Tensor):
        return value.to(points.device)
    if isinstance(value, (int, float)):
        value = [float(value)]
    # Python numbers stay on the host: the operator reads grid parameters there, and a device
    # copy would cost a round trip (host -> device -> host, with a synchronisation).
    return torch.tensor([float(v) for v in value], dtype=torch.float64)


def _ptr_of(points: Tensor, batch: Optional[Tensor], ptr: Optional[Tensor]) -> Optional[Tensor]:
    if ptr is not None:
        return ptr
    if batch is None:
        return None
    if not isinstance(batch, Tensor) or batch.dtype.is_floating_point or batch.dtype == torch.bool:
        raise TypeError("batch: expected an integer tensor")
    n = points.shape[0]
    if batch.dim() != 1 or batch.shape[0] != n:
        raise ValueError(f"batch: expected shape ({n},) (one entry per point), got {tuple(batch.shape)}")
    if n == 0:
        return torch.zeros(1, dtype=torch.int64, device=points.device)
    if n > 1 and bool((batch[1:] < batch[:-1]).any()):
        raise ValueError("'batch' is not sorted")
    if int(batch[0]) < 0:
        raise ValueError(f"batch: expected batch ids >= 0, got {int(batch[0])}")
    num = int(batch[-1]) + 1
    out = torch.zeros(num + 1, dtype=torch.int64, device=points.device)
    out[1:] = torch.bincount(batch.to(torch.int64), minlength=num).cumsum(0)
    return out


def voxelize(points: Tensor, voxel_size: Grid, batch: Optional[Tensor] = None, ptr: Optional[Tensor] = None,
             start: Optional[Grid] = None, end: Optional[Grid] = None) -> Voxelization:
    """Groups points into voxels of a regular grid.

    Cell of a point: ``floor((p - start) / voxel_size)`` per dimension, evaluated in the points'
    precision (float32; float64 stays float64). Voxels are the distinct (cloud, cell) pairs,
    numbered in lexicographic order of (cloud, c_0, ..., c_{D-1}); points inside a voxel keep
    their input order.

    Args:
        points: ``[N, D]`` coordinates (float32/float64; float16/bfloat16 converted exactly).
        voxel_size: one edge length or one per dimension, each finite and > 0.
        batch: sorted cloud id per point (``[N]``), or ``ptr``: CSR offsets ``[B + 1]``.
        start: grid origin (default 0: an absolute grid).
        end: with ``end``, points outside ``[start, end]`` (either bound inclusive) are
            dropped. Points with a NaN / infinite coordinate are always dropped.

    Returns:
        :class:`Voxelization` (inverse, coords, batch, counts, ptr, perm).

    Raises:
        ValueError: bad shapes, non-positive voxel size, unsorted batch, a cell index that does
            not fit in int64 (``|cell| >= 2^62``).
    """
    if not isinstance(points, Tensor):
        raise TypeError(f"points: expected a tensor, got {type(points).__name__}")
    size = _grid(voxel_size, points, "voxel_size")
    out = torch.ops.pcops.voxelize(points, size, _ptr_of(points, batch, ptr), _grid(start, points, "start"),
                                   _grid(end, points, "end"))
    return Voxelization(*out)


def voxel_downsample(points: Tensor, voxel_size: Grid, features: Optional[Tensor] = None,
                     batch: Optional[Tensor] = None, ptr: Optional[Tensor] = None,
                     start: Optional[Grid] = None, end: Optional[Grid] = None,
                     reduce: str = "mean") -> VoxelDownsample:
    """One point per voxel: the mean (or sum) of its points' positions and features.

    The sums run over a voxel's points in ascending point index (pcops.segment_csr), so results
    are deterministic; gradients flow to ``points`` and ``features``.
    """
    if reduce not in ("mean", "sum"):
        raise ValueError(f"reduce: expected 'mean' or 'sum', got {reduce!r}")
    if features is not None and (features.dim() == 1 or features.shape[0] != points.shape[0]):
        raise ValueError(f"features: expected shape [{points.shape[0]}, C], got {tuple(features.shape)}")
    vox = voxelize(points.detach(), voxel_size, batch=batch, ptr=ptr, start=start, end=end)
    # Rows in voxel order; the dropped points (perm's tail) lie after ptr[-1], in no segment, so
    # all of perm serves (no read of ptr[-1] on the host). Each output element is the fold of its
    # own column: positions and features of one dtype and device reduce in one call, with the
    # same bits as two.
    if features is not None and features.dim() == 2 and features.dtype == points.dtype \
            and features.device == points.device:
        d = points.shape[1]
        both = segment_csr(torch.cat([points, features], 1).index_select(0, vox.perm), vox.ptr, reduce=reduce)
        pos, feats = both[:, :d], both[:, d:]
    else:
        pos = segment_csr(points.index_select(0, vox.perm), vox.ptr, reduce=reduce)
        feats = None
        if features is not None:
            feats = segment_csr(features.index_select(0, vox.perm), vox.ptr, reduce=reduce)
    return VoxelDownsample(pos, feats, vox.batch, vox.coords, vox.counts, vox.inverse)


@torch.library.register_fake("pcops::voxelize")
def _voxelize_fake(points, voxel_size, ptr=None, start=None, end=None):
    torch._check_value(points.dim() == 2, lambda: f"points: expected a 2-D tensor [N, D], got shape {tuple(points.shape)}")
    if ptr is not None:
        _checks.same_device(points, "points", ptr, "ptr")
    ctx = torch.library.get_ctx()
    v = ctx.new_dynamic_size()
    n, d = points.shape
    long = dict(dtype=torch.int64, device=points.device)
    return (torch.empty(n, **long), torch.empty(v, d, **long), torch.empty(v, **long), torch.empty(v, **long),
            torch.empty(v + 1, **long), torch.empty(n, **long))
