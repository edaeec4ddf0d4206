"""Flat (ragged) point-cloud operators with torch_cluster 1.6.3 signatures and semantics.

Points of all clouds are stacked in one ``[N, D]`` tensor; cloud membership is given by a
**sorted** batch vector (``[N]`` int64, values in ``[0, B)``) or, for :func:`fps`, by CSR offsets
``ptr``. Missing batch ids are empty clouds. Returned indices are global rows of the stacked
tensors. Edges are ``[2, E]`` int64 with row 0 = query index into ``y`` and row 1 = reference
index into ``x`` (torch_cluster's layout), grouped by query ascending.

Differences from torch_cluster, all deliberate (docs/ops/flat.md):

- Results are exact and deterministic (pcops' contracts): kNN neighbours in (squared distance,
  index) order; radius keeps the first ``max_num_neighbors`` matches in reference index order
  (torch_cluster's CUDA behaviour; its CPU kd-tree keeps a spatially biased subset); nearest
  ties go to the lowest index.
- Coordinates are float32 (float16 / bfloat16 converted exactly); float64 and integer
  coordinates raise TypeError (grid_cluster accepts every real dtype).
- ``cosine=True`` works on CPU (torch_cluster: CUDA only).
- Bad input raises ValueError / TypeError with a message (unsorted batch vectors, mismatched
  dimensions, bad ``flow``) instead of silently wrong results or AssertionError.
- ``fps``: empty clouds are allowed (they get no samples); the random start is drawn from torch's
  default generator (``torch.manual_seed`` makes it reproducible), not C ``rand()``.
- ``num_workers`` is accepted and ignored (torch's thread settings apply), as upstream.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Union

import torch

import pcops.ops.ragged  # noqa: F401  (fake kernels and autograd markers)
from pcops.ops import _checks

__all__ = ["fps", "knn", "knn_graph", "radius", "radius_graph", "nearest", "grid_cluster"]

_FLOWS = ("source_to_target", "target_to_source")


def _as_2d(t: torch.Tensor, name: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a tensor, got {type(t).__name__}")
    if t.dim() == 1:
        return t.view(-1, 1)
    if t.dim() != 2:
        raise ValueError(f"{name}: expected a 1-D or 2-D tensor, got shape {tuple(t.shape)}")
    return t


def _num_clouds(batch: Optional[torch.Tensor], n: int, name: str) -> int:
    """Checks a batch vector (1-D, integer, length n, sorted, non-negative); returns max + 1."""
    if batch is None:
        return 1
    if not isinstance(batch, torch.Tensor):
        raise TypeError(f"{name}: expected a tensor, got {type(batch).__name__}")
    if batch.dtype.is_floating_point or batch.dtype.is_complex or batch.dtype == torch.bool:
        raise TypeError(f"{name}: expected an integer tensor, got {batch.dtype}")
    if batch.dim() != 1 or batch.shape[0] != n:
        raise ValueError(f"{name}: expected shape ({n},) (one entry per point), got {tuple(batch.shape)}")
    if n == 0:
        return 0
    if n > 1 and bool((batch[1:] < batch[:-1]).any()):
        raise ValueError(f"'{name}' is not sorted")
    if int(batch[0]) < 0:
        raise ValueError(f"{name}: expected batch ids >= 0, got {int(batch[0])}")
    return int(batch[-1]) + 1


def _ptr(batch: Optional[torch.Tensor], n: int, num_clouds: int, device) -> torch.Tensor:
    """CSR offsets [B + 1] of a (checked) sorted batch vector; None means every point in cloud 0."""
    ptr = torch.zeros(num_clouds + 1, dtype=torch.int64, device=device)
    if batch is None:
        ptr[1:] = n
        return ptr
    if n > 0:
        counts = torch.bincount(batch.to(torch.int64), minlength=num_clouds)
        ptr[1:] = counts.cumsum(0)
    return ptr


def _batch_count(batch_size: Optional[int], needed: int) -> int:
    if batch_size is None:
        return needed
    batch_size = int(_checks.integer(batch_size, "batch_size"))
    if batch_size < needed:
        raise ValueError(f"batch_size: expected >= {needed} (the largest batch id + 1), got {batch_size}")
    return batch_size


def _pair_ptrs(x, y, batch_x, batch_y, batch_size):
    nx, ny = x.shape[0], y.shape[0]
    needed = max(_num_clouds(batch_x, nx, "batch_x"), _num_clouds(batch_y, ny, "batch_y"), 1)
    b = _batch_count(batch_size, needed)
    return _ptr(batch_x, nx, b, x.device), _ptr(batch_y, ny, b, x.device)


def _check_flow(flow: str) -> None:
    if flow not in _FLOWS:
        raise ValueError(f"flow: expected 'source_to_target' or 'target_to_source', got {flow!r}")


def _check_dims(x, y) -> None:
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"y: expected {x.shape[1]} features (as x), got {y.shape[1]}")


def fps(
    src: torch.Tensor,
    batch: Optional[torch.Tensor] = None,
    ratio: Union[float, torch.Tensor, None] = 0.5,
    random_start: bool = True,
    batch_size: Optional[int] = None,
    ptr: Union[torch.Tensor, List[int], None] = None,
) -> torch.Tensor:
    """Furthest point sampling per cloud (torch_cluster.fps).

    Args:
        src: ``[N, F]`` points (any rank >= 1; flattened to ``[N, -1]``).
        batch: sorted ``[N]`` batch vector (ignored when ``ptr`` is given).
        ratio: sampling ratio (float, 0-d, 1-element or per-cloud ``[B]`` tensor; None = 0.5).
            Cloud b gets ``ceil(N_b * ratio)`` samples, computed as torch_cluster does on the
            device: in float32 on the CPU, in the ratio's dtype on CUDA (a float ratio becomes a
            tensor of ``src.dtype`` first).
        random_start: start each cloud at a random point (drawn with ``torch.randint`` from
            torch's default generator) instead of its first point.
        batch_size: number of clouds B (default ``batch.max() + 1``).
        ptr: CSR offsets ``[B + 1]`` (tensor or list), taking precedence over ``batch``.

    Returns:
        int64 ``[sum_b count_b]`` global indices, cloud by cloud, in selection order. Ratios
        above 1 repeat the cloud's first point once the cloud is exhausted.
    """
    if ratio is None:
        ratio = 0.5
    if not isinstance(src, torch.Tensor):
        raise TypeError(f"src: expected a tensor, got {type(src).__name__}")
    if src.dim() == 0:
        raise ValueError("src: expected at least 1-D, got a 0-D tensor")
    n = src.shape[0]
    pts = src.reshape(n, -1)
    if ptr is not None:
        if isinstance(ptr, (list, tuple)):
            ptr = torch.tensor(ptr, dtype=torch.int64, device=src.device)
        if ptr.dim() != 1 or ptr.numel() < 1:
            raise ValueError(f"ptr: expected a 1-D tensor of B + 1 >= 1 offsets, got shape {tuple(ptr.shape)}")
        ptr = ptr.to(torch.int64)
    else:
        needed = _num_clouds(batch, n, "batch")
        b = _batch_count(batch_size, max(needed, 1) if batch is None else needed)
        ptr = _ptr(batch, n, b, src.device)
    deg = ptr[1:] - ptr[:-1]
    if isinstance(ratio, torch.Tensor):
        ratio_t = ratio.to(src.device)
    else:
        r = float(ratio)
        ratio_t = torch.tensor(r, dtype=src.dtype if src.dtype.is_floating_point else torch.float32,
                               device=src.device)
    if ratio_t.numel() not in (1, deg.numel()):
        raise ValueError(f"ratio: expected a scalar or {deg.numel()} ratios (one per cloud), got {ratio_t.numel()}")
    if ratio_t.numel() == 1:
        ratio_t = ratio_t.reshape(())
    if bool((ratio_t < 0).any()) or not bool(torch.isfinite(ratio_t).all()):
        raise ValueError(f"ratio: expected finite ratios >= 0, got {ratio_t.tolist()}")
    # torch_cluster's count rule per device: its CPU kernel multiplies in float32, its CUDA kernel
    # in the ratio's dtype (src.dtype for a float ratio, so float16 clouds round in half).
    count_dtype = ratio_t.dtype if src.is_cuda else torch.float32
    counts = torch.ceil(deg.to(count_dtype) * ratio_t).to(torch.int64)
    if random_start:
        draw = torch.randint(0, 2**62, (deg.numel(),), dtype=torch.int64)
        starts = draw.to(deg.device) % deg.clamp(min=1)
    else:
        starts = torch.zeros_like(deg)
    return torch.ops.pcops.furthest_point_sample_ragged(pts, ptr, counts, starts)


def knn(
    x: torch.Tensor,
    y: torch.Tensor,
    k: int,
    batch_x: Optional[torch.Tensor] = None,
    batch_y: Optional[torch.Tensor] = None,
    cosine: bool = False,
    num_workers: int = 1,
    batch_size: Optional[int] = None,
) -> torch.Tensor:
    """For each row of ``y``, its ``k`` nearest rows of ``x`` in the same cloud (torch_cluster.knn).

    Args:
        x: ``[N, F]`` references (1-D becomes ``[N, 1]``).
        y: ``[M, F]`` queries.
        k: neighbours per query; a cloud with fewer references gives them all (no padding).
        batch_x, batch_y: sorted batch vectors (a missing one means all zeros).
        cosine: use the cosine distance ``1 - x.y / (|x| |y|)`` instead of Euclidean.
        num_workers: ignored (torch's thread settings apply).
        batch_size: number of clouds B (default: the largest batch id + 1).

    Returns:
        int64 ``[2, E]``: row 0 = index into ``y``, row 1 = index into ``x``; grouped by query
        ascending, neighbours by (distance, index) ascending.
    """
    k = _checks.integer(k, "k")
    x, y = _as_2d(x, "x"), _as_2d(y, "y")
    if x.numel() == 0 or y.numel() == 0:
        return torch.empty(2, 0, dtype=torch.int64, device=x.device)
    _check_dims(x, y)
    if k < 0:
        raise ValueError(f"k: expected >= 0, got {k}")
    ptr_x, ptr_y = _pair_ptrs(x, y, batch_x, batch_y, batch_size)
    return torch.ops.pcops.knn_ragged(x, y, ptr_x, ptr_y, k, bool(cosine))


def knn_graph(
    x: torch.Tensor,
    k: int,
    batch: Optional[torch.Tensor] = None,
    loop: bool = False,
    flow: str = "source_to_target",
    cosine: bool = False,
    num_workers: int = 1,
    batch_size: Optional[int] = None,
) -> torch.Tensor:
    """The k-nearest-neighbour graph of ``x`` (torch_cluster.knn_graph).

    ``flow='source_to_target'`` returns ``[neighbour, centre]``, ``'target_to_source'``
    ``[centre, neighbour]``; grouped by centre ascending. Without ``loop`` the search asks for
    k + 1 neighbours and drops self pairs (with duplicates a centre may keep k + 1).
    """
    _check_flow(flow)
    k = _checks.integer(k, "k")
    edge_index = knn(x, x, k if loop else k + 1, batch, batch, cosine, num_workers, batch_size)
    if not loop:
        m, k1 = x.shape[0], k + 1
        if edge_index.shape[1] == m * k1:
            # Every centre got k + 1 neighbours; where each list starts with the centre itself
            # (distance 0 and, among duplicates, the lowest index), dropping the self pairs is
            # dropping the first column: one strided copy instead of a mask.
            centre, nb = edge_index[0].view(m, k1), edge_index[1].view(m, k1)
            if torch.equal(nb[:, 0], centre[:, 0]):
                first = (nb, centre) if flow == "source_to_target" else (centre, nb)
                return torch.stack([first[0][:, 1:], first[1][:, 1:]]).reshape(2, -1)
        # One masked copy of both rows (two masked rows and a stack cost more).
        edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    return edge_index.flip(0) if flow == "source_to_target" else edge_index


def radius(
    x: torch.Tensor,
    y: torch.Tensor,
    r: float,
    batch_x: Optional[torch.Tensor] = None,
    batch_y: Optional[torch.Tensor] = None,
    max_num_neighbors: int = 32,
    num_workers: int = 1,
    batch_size: Optional[int] = None,
    ignore_same_index: bool = False,
) -> torch.Tensor:
    """For each row of ``y``, the rows of ``x`` in the same cloud closer than ``r`` (torch_cluster.radius).

    Membership is strict: ``s < fl32(r * r)`` (the product in float64). Each query keeps its first
    ``max_num_neighbors`` matches in reference index order. ``ignore_same_index`` skips the pair
    with equal indices before counting. Returns int64 ``[2, E]`` (row 0 = index into ``y``, row
    1 = index into ``x``), grouped by query, references ascending. ``batch_size`` as in :func:`knn`.
    """
    max_num_neighbors = _checks.integer(max_num_neighbors, "max_num_neighbors")
    x, y = _as_2d(x, "x"), _as_2d(y, "y")
    if x.numel() == 0 or y.numel() == 0:
        return torch.empty(2, 0, dtype=torch.int64, device=x.device)
    _check_dims(x, y)
    ptr_x, ptr_y = _pair_ptrs(x, y, batch_x, batch_y, batch_size)
    return torch.ops.pcops.radius(x, y, ptr_x, ptr_y, float(r), max_num_neighbors, bool(ignore_same_index))


def radius_graph(
    x: torch.Tensor,
    r: float,
    batch: Optional[torch.Tensor] = None,
    loop: bool = False,
    max_num_neighbors: int = 32,
    flow: str = "source_to_target",
    num_workers: int = 1,
    batch_size: Optional[int] = None,
) -> torch.Tensor:
    """The radius graph of ``x`` (torch_cluster.radius_graph): ``radius(x, x, ...,
    ignore_same_index=not loop)``, so the self pair never uses one of the ``max_num_neighbors``
    slots. ``flow`` as in :func:`knn_graph`."""
    _check_flow(flow)
    # Without loop, ignore_same_index already leaves out every self pair: no mask to apply.
    edge_index = radius(x, x, r, batch, batch, max_num_neighbors, num_workers, batch_size, not loop)
    return edge_index.flip(0) if flow == "source_to_target" else edge_index


def nearest(
    x: torch.Tensor,
    y: torch.Tensor,
    batch_x: Optional[torch.Tensor] = None,
    batch_y: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """For each row of ``x``, the global index of the nearest row of ``y`` in the same cloud
    (torch_cluster.nearest): smallest (squared distance, index). A missing batch vector means all
    zeros. Raises ValueError for unsorted batch vectors, mismatched features and clouds that have
    points in ``x`` but none in ``y``."""
    x, y = _as_2d(x, "x"), _as_2d(y, "y")
    _check_dims(x, y)
    ptr_x, ptr_y = _pair_ptrs(x, y, batch_x, batch_y, None)
    return torch.ops.pcops.nearest(x, y, ptr_x, ptr_y)


def grid_cluster(
    pos: torch.Tensor,
    size: Union[torch.Tensor, Sequence[float]],
    start: Union[torch.Tensor, Sequence[float], None] = None,
    end: Union[torch.Tensor, Sequence[float], None] = None,
) -> torch.Tensor:
    """Voxel-grid cluster ids (torch_cluster.grid_cluster): ``c_d = trunc((pos_d - start_d) /
    size_d)``, id = mixed radix with dimension 0 fastest and ``trunc((end_d - start_d) / size_d)
    + 1`` voxels per dimension; ``start`` / ``end`` default to the per-dimension min / max."""

    def vec(v):
        if v is None or isinstance(v, torch.Tensor):
            return v
        return torch.as_tensor(v, device=pos.device)

    return torch.ops.pcops.grid_cluster(pos, vec(size), vec(start), vec(end))
