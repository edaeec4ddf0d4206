"""A spatial index built once and queried many times (docs/ops/spatial_index.md)."""

from __future__ import annotations

import math

import torch

from pcops.ops import _checks

__all__ = ["SpatialIndex"]


def _as_batch(t: torch.Tensor, name: str) -> tuple[torch.Tensor, bool]:
    """``t`` as ``[B, N, 3]`` and whether it came as one cloud ``[N, 3]``."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a tensor, got {type(t).__name__}")
    single = t.dim() == 2
    if single:
        t = t.unsqueeze(0)
    _checks.points(t, name)
    torch._check_value(t.shape[2] == 3, lambda: f"{name}: expected 3 coordinates per point, got {t.shape[2]}")
    return t, single


def _flat_to_padded(points, lengths, batch, batch_size, name: str = "points", batch_name: str = "batch",
                    clouds: int | None = None):
    """Stacked clouds ``[N, 3]`` with a sorted batch vector as a padded ``[B, Nmax, 3]`` batch: B
    from ``batch_size`` / the largest id, or exactly ``clouds`` (the queries of a built index).

    Returns ``(padded, lengths [B], (ptr [B + 1], cloud id per row, row within its cloud))``.
    """
    from pcops.flat import _batch_count, _num_clouds, _ptr

    if lengths is not None:
        raise ValueError("lengths: not used with flat clouds (give batch)")
    if not isinstance(points, torch.Tensor):
        raise TypeError(f"{name}: expected a tensor, got {type(points).__name__}")
    if points.dim() != 2:
        raise ValueError(f"{name}: expected [N, 3] stacked clouds with {batch_name}, got shape {tuple(points.shape)}")
    n = points.shape[0]
    needed = _num_clouds(batch, n, batch_name)
    if clouds is None:
        clouds = _batch_count(batch_size, max(needed, 1))
    elif needed > clouds:
        raise ValueError(f"{batch_name}: cloud ids up to {needed - 1}, the index holds {clouds} clouds")
    ptr = _ptr(batch, n, clouds, points.device)
    counts = ptr.diff()
    cloud = (torch.zeros(n, dtype=torch.int64, device=points.device) if batch is None
             else batch.to(device=points.device, dtype=torch.int64))
    pos = torch.arange(n, device=points.device) - ptr[cloud]
    width = int(counts.max()) if clouds > 0 else 0
    padded = points.new_zeros(clouds, width, points.shape[1])
    padded[cloud, pos] = points
    return padded, counts, (ptr, cloud, pos)


class SpatialIndex:
    """Exact nearest-neighbour and ball queries over clouds indexed once.

    The index sorts each cloud's points along a Morton curve and puts a binary tree of exact
    bounding boxes over them (leaves of at most ``leaf_size`` points, cut where the curve crosses
    octree cells, so dense and sparse regions, duplicates, planes and lines are all handled
    alike). Where a cloud's density is even, kNN searches the dense operator's uniform grid
    instead, kept beside the tree (``grid=True``). Queries return exactly what :func:`pcops.knn` and :func:`pcops.ball_query` return
    over the same points: the same indices and the same float32 distances.

    Args:
        points: ``[N, 3]`` (one cloud) or ``[B, N, 3]`` float32/float16/bfloat16 coordinates (half
            precision converted exactly to float32). The index keeps its own sorted copy.
        lengths: optional int64 ``[B]``: only the first ``lengths[b]`` points of cloud b are
            indexed (as ``ref_lengths`` of the dense operators).
        leaf_size: at most this many points per leaf (>= 1).
        grid: also keep, for kNN, the uniform grid of :func:`pcops.knn` on clouds whose density is
            even enough for it (faster than the tree there; about 16 more bytes per point). Clouds
            of strongly varying density use the tree either way.
        batch: flat (stacked) clouds, as :mod:`pcops.flat` / torch_cluster: ``points`` ``[N, 3]``
            and their sorted cloud ids ``[N]``; queries then come stacked too (``batch=`` of each
            query method) and results index the stacked points.
        batch_size: the number of flat clouds (at least the largest id + 1).

    Raises:
        ValueError: bad shapes, lengths or leaf size.
        TypeError: unsupported dtype.
        NotImplementedError: tensors on a device other than the CPU and CUDA.

    On CUDA the leaves always hold 32 points (a warp's width; ``leaf_size`` is checked but
    applies to the CPU index) and ``grid`` is unused: the tree adapts to any density.
    """

    def __init__(
        self,
        points: torch.Tensor,
        lengths: torch.Tensor | None = None,
        leaf_size: int = 128,
        grid: bool = True,
        *,
        batch: torch.Tensor | None = None,
        batch_size: int | None = None,
    ):
        self._flat = None  # flat (stacked) clouds: their CSR offsets
        if batch is not None or batch_size is not None:
            points, lengths, self._flat = _flat_to_padded(points, lengths, batch, batch_size)
        pts, self._single = _as_batch(points, "points")
        leaf_size = _checks.integer(leaf_size, "leaf_size")
        if not isinstance(grid, bool):
            raise TypeError(f"grid: expected a bool, got {type(grid).__name__}")
        if pts.device.type == "cuda":
            if not hasattr(torch.classes.pcops, "SpatialIndexCuda"):
                raise NotImplementedError("pcops.SpatialIndex: this build of pcops has no CUDA backend")
            holder = torch.classes.pcops.SpatialIndexCuda
        elif pts.device.type == "cpu":
            holder = torch.classes.pcops.SpatialIndexCpu
        else:
            raise NotImplementedError(f"pcops.SpatialIndex: {pts.device.type} tensors are not supported (CPU and CUDA)")
        if lengths is not None:
            _checks.lengths(lengths, pts, "points", "lengths")
            lengths = lengths.to(torch.int64)
        self._index = holder()
        self._index.build(pts, lengths, leaf_size, grid)
        self._device = pts.device

    @property
    def batch(self) -> int:
        """Number of indexed clouds."""
        return int(self._index.info()[0])

    @property
    def num_points(self) -> list[int]:
        """Points indexed per cloud (including points with a non-finite coordinate)."""
        return [int(n) for n in self._index.cloud_sizes()]

    @property
    def leaf_size(self) -> int:
        return int(self._index.info()[3])

    @property
    def memory_bytes(self) -> int:
        """Bytes held by the index (sorted coordinates, indices and tree)."""
        return int(self._index.info()[4])

    def _query(self, query: torch.Tensor, query_lengths: torch.Tensor | None, batch: torch.Tensor | None = None):
        """The query as the held index wants it: ``(q [B, M, 3], query_lengths, flat)``, flat =
        (CSR offsets of the flat queries, their cloud ids, their rows in the padded batch) or None."""
        if self._flat is not None:
            if query_lengths is not None:
                raise ValueError("query_lengths: not used by an index over flat clouds (give batch)")
            if not isinstance(query, torch.Tensor) or query.dim() != 2:
                raise ValueError("query: expected [M, 3] (the index holds flat clouds)"
                                 + (f", got shape {tuple(query.shape)}" if isinstance(query, torch.Tensor) else ""))
            if query.device != self._device:
                raise ValueError(f"query: expected device {self._device} (as the index), got {query.device}")
            return _flat_to_padded(query, None, batch, None, name="query", clouds=self.batch)
        if batch is not None:
            raise ValueError("batch: only for an index built over flat clouds (SpatialIndex(points, batch=...))")
        q, ql = self._padded_query(query, query_lengths)
        return q, ql, None

    def _padded_query(self, query: torch.Tensor, query_lengths: torch.Tensor | None):
        q, single = _as_batch(query, "query")
        torch._check_value(
            single == self._single,
            lambda: "query: expected "
            + ("[M, 3] (the index holds one cloud)" if self._single else f"[{self.batch}, M, 3] (as the index)")
            + f", got shape {tuple(query.shape)}",
        )
        if q.device != self._device:
            raise ValueError(f"query: expected device {self._device} (as the index), got {q.device}")
        if query_lengths is not None:
            _checks.lengths(query_lengths, q, "query", "query_lengths")
            query_lengths = query_lengths.to(torch.int64)
        return q, query_lengths

    def knn(
        self, query: torch.Tensor, k: int, query_lengths: torch.Tensor | None = None, *, batch=None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``k`` nearest indexed points of every query, as :func:`pcops.knn`.

        Args:
            query: ``[M, 3]`` (one-cloud index) or ``[B, M, 3]`` coordinates; ``[M, 3]`` stacked
                clouds with ``batch`` for an index over flat clouds.
            k: neighbours per query (0 <= k <= N; with build ``lengths`` or flat clouds a larger k
                pads).
            query_lengths: optional int64 ``[B]`` valid queries per cloud.
            batch: flat index only: the queries' sorted cloud ids ``[M]`` (None: all in cloud 0).

        Returns:
            ``(dist, idx)``: float32 Euclidean distances and int64 indices into the indexed
            points, ``[M, k]`` or ``[B, M, k]``, ordered by (squared distance, index); unfilled
            slots hold ``(inf, -1)``. Flat index: ``[M, k]`` with indices into the stacked points.
        """
        k = _checks.integer(k, "k")
        q, ql, flat = self._query(query, query_lengths, batch)
        dist, idx = self._index.knn(q, k, ql)
        if flat is not None:
            return self._unpad(flat, dist, idx)
        return (dist[0], idx[0]) if self._single else (dist, idx)

    def _unpad(self, flat, values: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows of the padded batch back in flat query order, indices into the stacked points."""
        _, qb, qpos = flat
        values, idx = values[qb, qpos], idx[qb, qpos]
        return values, torch.where(idx >= 0, idx + self._flat[0][qb][:, None], idx)

    def ball_query(
        self, query: torch.Tensor, radius: float, K: int, query_lengths: torch.Tensor | None = None, *, batch=None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The first ``K`` indexed points (in index order) within ``radius`` of every query, as
        :func:`pcops.ball_query`: ``(dist2, idx)`` with squared distances, slots after the
        matches ``(0, -1)``. ``batch`` as in :meth:`knn`."""
        K = _checks.integer(K, "K")
        if isinstance(radius, bool) or not isinstance(radius, (int, float)):
            raise TypeError(f"radius: expected a number, got {type(radius).__name__}")
        q, ql, flat = self._query(query, query_lengths, batch)
        dist2, idx = self._index.ball_query(q, float(radius), K, ql)
        if flat is not None:
            return self._unpad(flat, dist2, idx)
        return (dist2[0], idx[0]) if self._single else (dist2, idx)

    def nearest(
        self, query: torch.Tensor, query_lengths: torch.Tensor | None = None, *, batch=None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The nearest indexed point of every query: ``knn(query, 1)`` without its last axis,
        ``(dist, idx)`` of shape ``[M]`` or ``[B, M]`` (smallest (squared distance, index); ``(inf,
        -1)`` for a query past ``query_lengths`` or over an empty cloud)."""
        dist, idx = self.knn(query, 1, query_lengths, batch=batch)
        return dist[..., 0], idx[..., 0]

    def radius(
        self,
        query: torch.Tensor,
        r: float,
        max_num_neighbors: int = 32,
        query_lengths: torch.Tensor | None = None,
        ignore_same_index: bool = False,
        *,
        batch=None,
    ) -> torch.Tensor:
        """Radius search with the contract of :func:`pcops.flat.radius` (torch_cluster.radius):
        for each query, the indexed points with ``s < fl32(r * r)`` (the product in float64), the
        first ``max_num_neighbors`` in index order; ``ignore_same_index`` skips the point whose
        index equals the query's before counting (the radius graph of the indexed points).

        Returns:
            int64 ``[2, E]``: row 0 the query, row 1 the point, grouped by query, points ascending.
            For a batched index the indices are flattened: ``b * M + m`` and ``b * N + j``; over
            flat clouds they are rows of the stacked queries and points, and the result equals
            ``pcops.flat.radius(points, query, r, batch_points, batch, max_num_neighbors=...)``
            (``ignore_same_index`` then compares those stacked rows, as torch_cluster does).
        """
        max_num_neighbors = _checks.integer(max_num_neighbors, "max_num_neighbors")
        if isinstance(r, bool) or not isinstance(r, (int, float)):
            raise TypeError(f"r: expected a number, got {type(r).__name__}")
        if not (math.isfinite(r) and r >= 0):
            raise ValueError(f"r: expected a finite value >= 0, got {r}")
        if max_num_neighbors < 0:
            raise ValueError(f"max_num_neighbors: expected >= 0, got {max_num_neighbors}")
        if not isinstance(ignore_same_index, bool):
            raise TypeError(f"ignore_same_index: expected a bool, got {type(ignore_same_index).__name__}")
        q, ql, flat = self._query(query, query_lengths, batch)
        width = max_num_neighbors + (1 if ignore_same_index else 0)
        if max_num_neighbors == 0 or q.shape[0] * q.shape[1] == 0:
            return torch.empty(2, 0, dtype=torch.int64, device=q.device)
        R2 = torch.tensor(float(r) * float(r), dtype=torch.float64).float().item()  # fl32(r * r)
        _, idx = self._index.ball_query_below(q, R2, width, ql)
        # Numbers of the result's queries and points (flattened batch, or rows of the stacked
        # clouds), and the point each query skips with ignore_same_index (same number within its
        # cloud; over flat clouds the same stacked row, as torch_cluster).
        dev = q.device
        if flat is None:
            rows = torch.arange(q.shape[0] * q.shape[1], device=dev).view(q.shape[0], q.shape[1], 1)
            base = (torch.arange(q.shape[0], device=dev) * int(self._index.info()[1])).view(-1, 1, 1)
            same = torch.arange(q.shape[1], device=dev).view(1, -1, 1) + base
        else:
            rows = torch.full(q.shape[:2], -1, dtype=torch.int64, device=dev)
            rows[flat[1], flat[2]] = torch.arange(flat[1].shape[0], device=dev)
            rows = rows.unsqueeze(-1)
            base = self._flat[0][:-1].view(-1, 1, 1)
            same = rows
        point = idx + base
        valid = idx >= 0
        if ignore_same_index:
            valid &= point != same
        keep = valid & (valid.cumsum(-1) <= max_num_neighbors)
        b, m, t = keep.nonzero(as_tuple=True)
        return torch.stack([rows[b, m, 0], point[b, m, t]])

    def __repr__(self) -> str:
        return (f"SpatialIndex(batch={self.batch}, points={self.num_points}, leaf_size={self.leaf_size}, "
                f"memory_bytes={self.memory_bytes})")
