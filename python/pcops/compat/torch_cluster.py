"""Stand-in for ``torch_cluster`` 1.6.3 (rusty1s/pytorch_cluster) on top of ``pcops.flat``.

The point operators (fps, knn, knn_graph, radius, radius_graph, nearest, grid_cluster) keep
torch_cluster's signatures and forward to :mod:`pcops.flat`, which implements torch_cluster's
semantics (edge layout ``[query (y) index, reference (x) index]``, global int64 indices, strict
``d^2 < r^2``, FPS sample counts ``ceil(float32(N_b) * ratio)``). Only arguments are translated
here: a ``ptr`` list becomes a tensor and a float ``ratio`` becomes a 0-d tensor of ``src.dtype``
(as upstream, so half inputs count samples with a half-precision ratio). pcops.flat's dtype
policy applies: float32/float16/bfloat16 coordinates; float64 and integer coordinates raise
TypeError rather than being rounded silently (grid_cluster takes every real dtype).

The graph extras are implemented here in plain PyTorch with upstream's CPU semantics:

- ``graclus_cluster``: the same sequence of ``torch.randperm`` draws and the same greedy matching
  (weighted: the heaviest unmatched neighbour with weight >= 0, the last one on ties, in CSR
  order after ``argsort(row)``), so on CPU the cluster ids equal upstream's for the same seed.
- ``random_walk``: with ``p == q == 1`` the uniform sampler, one ``torch.rand((S, L))`` draw and
  ``e = rowptr[v] + int(float32(u) * float32(deg))``, equal to upstream's CPU walks for the same
  seed; a node without out-edges repeats itself with edge index -1. With ``p != 1`` or
  ``q != 1`` upstream's node2vec rejection rule, drawn from torch's generator (upstream draws
  from C ``rand()``, which torch.manual_seed does not seed, so no stream can match there).
  Returned edge indices refer to the edge order after the ``coalesced`` sort, as upstream.

Inputs on CUDA are computed on the CPU for the two extras and returned on the input's device.
``neighbor_sampler`` exists for namespace completeness and raises NotImplementedError.

Every public function can be compiled by ``torch.jit.script`` (upstream's tests script knn,
knn_graph, radius, radius_graph, grid_cluster, graclus_cluster and FPS callers): the bodies call
``@torch.jit.ignore`` helpers, so scripted callers run in-process (they cannot be exported with
``torch.jit.save`` because the helpers stay Python calls).
"""

# No `from __future__ import annotations`: TorchScript reads the annotations as objects.

import functools
import sys
from pathlib import Path
from typing import Any, List, Optional, Tuple, Union

import torch
from torch import Tensor

from pcops._stand_in import stand_in_module

UPSTREAM_VERSION = "1.6.3"


def _pcops_version() -> str:
    module = sys.modules.get("pcops")
    return getattr(module, "__version__", "0")


# PEP 440 local version: compares equal to 1.6.3 in every release-segment check callers make.
__version__ = f"{UPSTREAM_VERSION}+pcops.{_pcops_version()}"


def _flat() -> Any:
    from pcops import flat  # imported on first use: the stand-in can be installed before it loads

    return flat


# --------------------------------------------------------------------------------------------
# fps


@torch.jit.ignore
def _fps_impl(
    src: Tensor,
    batch: Optional[Tensor],
    ratio: Tensor,
    random_start: bool,
    batch_size: Optional[int],
    ptr: Optional[Tensor],
) -> Tensor:
    return _flat().fps(src, batch, ratio, random_start, batch_size, ptr)


@torch.jit._overload  # noqa: F811
def fps(src, batch=None, ratio=None, random_start=True, batch_size=None, ptr=None):  # noqa: F811
    # type: (Tensor, Optional[Tensor], Optional[float], bool, Optional[int], Optional[Tensor]) -> Tensor  # noqa: E501
    pass


@torch.jit._overload  # noqa: F811
def fps(src, batch=None, ratio=None, random_start=True, batch_size=None, ptr=None):  # noqa: F811
    # type: (Tensor, Optional[Tensor], Optional[Tensor], bool, Optional[int], Optional[Tensor]) -> Tensor  # noqa: E501
    pass


@torch.jit._overload  # noqa: F811
def fps(src, batch=None, ratio=None, random_start=True, batch_size=None, ptr=None):  # noqa: F811
    # type: (Tensor, Optional[Tensor], Optional[float], bool, Optional[int], Optional[List[int]]) -> Tensor  # noqa: E501
    pass


@torch.jit._overload  # noqa: F811
def fps(src, batch=None, ratio=None, random_start=True, batch_size=None, ptr=None):  # noqa: F811
    # type: (Tensor, Optional[Tensor], Optional[Tensor], bool, Optional[int], Optional[List[int]]) -> Tensor  # noqa: E501
    pass


def fps(  # noqa: F811
    src: Tensor,
    batch: Optional[Tensor] = None,
    ratio=None,
    random_start: bool = True,
    batch_size: Optional[int] = None,
    ptr=None,
):
    r"""Farthest point sampling (PointNet++): repeatedly picks the point farthest from the picks.

    Args:
        src (Tensor): point features ``[N, F]``.
        batch (LongTensor, optional): sorted example id per point ``[N]``.
        ratio (float or Tensor, optional): fraction of each example to keep (default 0.5); a
            float is rounded to ``src.dtype`` first; a ``[B]`` tensor gives a ratio per example.
        random_start (bool, optional): start at a random point of each example (drawn from
            torch's generator) instead of the first one. (default: :obj:`True`)
        batch_size (int, optional): the number of examples; ``batch.max() + 1`` if not given.
        ptr (LongTensor or list of int, optional): CSR example boundaries; wins over ``batch``.

    Returns:
        LongTensor: global indices into ``src``, per example in selection order,
        ``ceil(N_b * ratio)`` of them for example ``b``.
    """
    r: Optional[Tensor] = None
    if ratio is None:
        r = torch.tensor(0.5, dtype=src.dtype, device=src.device)
    elif isinstance(ratio, float):
        r = torch.tensor(ratio, dtype=src.dtype, device=src.device)
    else:
        r = ratio
    assert r is not None
    ptr_t: Optional[Tensor] = None
    if ptr is not None:
        if isinstance(ptr, list):
            ptr_t = torch.tensor(ptr, dtype=torch.long, device=src.device)
        else:
            ptr_t = ptr
        batch = None  # ptr takes precedence over batch
    return _fps_impl(src, batch, r, random_start, batch_size, ptr_t)


# --------------------------------------------------------------------------------------------
# knn, knn_graph


@torch.jit.ignore
def _knn_impl(
    x: Tensor,
    y: Tensor,
    k: int,
    batch_x: Optional[Tensor],
    batch_y: Optional[Tensor],
    cosine: bool,
    num_workers: int,
    batch_size: Optional[int],
) -> Tensor:
    return _flat().knn(x, y, k, batch_x, batch_y, cosine, num_workers, batch_size)


def knn(
    x: Tensor,
    y: Tensor,
    k: int,
    batch_x: Optional[Tensor] = None,
    batch_y: Optional[Tensor] = None,
    cosine: bool = False,
    num_workers: int = 1,
    batch_size: Optional[int] = None,
) -> Tensor:
    r"""For every row of ``y``, the ``k`` nearest rows of ``x`` in the same example.

    Args:
        x (Tensor): reference features ``[N, F]``.
        y (Tensor): query features ``[M, F]``.
        k (int): neighbours per query (fewer where an example has fewer points).
        batch_x (LongTensor, optional): sorted example id per row of ``x``.
        batch_y (LongTensor, optional): sorted example id per row of ``y``.
        cosine (bool, optional): cosine distance instead of Euclidean. (default: :obj:`False`)
        num_workers (int, optional): accepted for compatibility; pcops uses torch's threads.
        batch_size (int, optional): the number of examples; computed from the batch vectors if
            not given.

    Returns:
        LongTensor ``[2, E]``: row 0 the query index into ``y``, row 1 the reference index into
        ``x``; grouped by query ascending, nearest first.
    """
    return _knn_impl(x, y, k, batch_x, batch_y, cosine, num_workers, batch_size)


@torch.jit.ignore
def _knn_graph_impl(
    x: Tensor,
    k: int,
    batch: Optional[Tensor],
    loop: bool,
    flow: str,
    cosine: bool,
    num_workers: int,
    batch_size: Optional[int],
) -> Tensor:
    return _flat().knn_graph(x, k, batch, loop, flow, cosine, num_workers, batch_size)


def knn_graph(
    x: Tensor,
    k: int,
    batch: Optional[Tensor] = None,
    loop: bool = False,
    flow: str = "source_to_target",
    cosine: bool = False,
    num_workers: int = 1,
    batch_size: Optional[int] = None,
) -> Tensor:
    r"""The k-nearest-neighbour graph of ``x``.

    Args:
        x (Tensor): node features ``[N, F]``.
        k (int): neighbours per node.
        batch (LongTensor, optional): sorted example id per node.
        loop (bool, optional): keep self-loops. (default: :obj:`False`)
        flow (str, optional): ``"source_to_target"`` gives ``[neighbour, centre]``,
            ``"target_to_source"`` gives ``[centre, neighbour]``.
        cosine (bool, optional): cosine distance instead of Euclidean.
        num_workers (int, optional): accepted for compatibility.
        batch_size (int, optional): the number of examples.

    Returns:
        LongTensor ``[2, E]`` grouped by centre node ascending.
    """
    return _knn_graph_impl(x, k, batch, loop, flow, cosine, num_workers, batch_size)


# --------------------------------------------------------------------------------------------
# radius, radius_graph


@torch.jit.ignore
def _radius_impl(
    x: Tensor,
    y: Tensor,
    r: float,
    batch_x: Optional[Tensor],
    batch_y: Optional[Tensor],
    max_num_neighbors: int,
    num_workers: int,
    batch_size: Optional[int],
    ignore_same_index: bool,
) -> Tensor:
    return _flat().radius(
        x, y, r, batch_x, batch_y, max_num_neighbors, num_workers, batch_size, ignore_same_index
    )


def radius(
    x: Tensor,
    y: Tensor,
    r: float,
    batch_x: Optional[Tensor] = None,
    batch_y: Optional[Tensor] = None,
    max_num_neighbors: int = 32,
    num_workers: int = 1,
    batch_size: Optional[int] = None,
    ignore_same_index: bool = False,
) -> Tensor:
    r"""For every row of ``y``, the rows of ``x`` in the same example with distance < ``r``.

    Args:
        x (Tensor): reference features ``[N, F]``.
        y (Tensor): query features ``[M, F]``.
        r (float): radius; membership is strict, ``d^2 < r^2``.
        batch_x (LongTensor, optional): sorted example id per row of ``x``.
        batch_y (LongTensor, optional): sorted example id per row of ``y``.
        max_num_neighbors (int, optional): at most this many per query: the first ones in
            reference order (upstream's CPU kernel keeps the first in its kd-tree order).
        num_workers (int, optional): accepted for compatibility.
        batch_size (int, optional): the number of examples.
        ignore_same_index (bool, optional): skip the reference with the query's own index
            (before counting). (default: :obj:`False`)

    Returns:
        LongTensor ``[2, E]``: row 0 index into ``y``, row 1 index into ``x``.
    """
    return _radius_impl(
        x, y, r, batch_x, batch_y, max_num_neighbors, num_workers, batch_size, ignore_same_index
    )


@torch.jit.ignore
def _radius_graph_impl(
    x: Tensor,
    r: float,
    batch: Optional[Tensor],
    loop: bool,
    max_num_neighbors: int,
    flow: str,
    num_workers: int,
    batch_size: Optional[int],
) -> Tensor:
    return _flat().radius_graph(x, r, batch, loop, max_num_neighbors, flow, num_workers, batch_size)


def radius_graph(
    x: Tensor,
    r: float,
    batch: Optional[Tensor] = None,
    loop: bool = False,
    max_num_neighbors: int = 32,
    flow: str = "source_to_target",
    num_workers: int = 1,
    batch_size: Optional[int] = None,
) -> Tensor:
    r"""The graph of all node pairs of one example closer than ``r``.

    Args:
        x (Tensor): node features ``[N, F]``.
        r (float): radius (strict).
        batch (LongTensor, optional): sorted example id per node.
        loop (bool, optional): keep self-loops. (default: :obj:`False`)
        max_num_neighbors (int, optional): at most this many neighbours per node.
        flow (str, optional): ``"source_to_target"`` or ``"target_to_source"``.
        num_workers (int, optional): accepted for compatibility.
        batch_size (int, optional): the number of examples.

    Returns:
        LongTensor ``[2, E]``.
    """
    return _radius_graph_impl(x, r, batch, loop, max_num_neighbors, flow, num_workers, batch_size)


# --------------------------------------------------------------------------------------------
# nearest, grid_cluster


@torch.jit.ignore
def _nearest_impl(x: Tensor, y: Tensor, batch_x: Optional[Tensor], batch_y: Optional[Tensor]) -> Tensor:
    return _flat().nearest(x, y, batch_x, batch_y)


def nearest(
    x: Tensor,
    y: Tensor,
    batch_x: Optional[Tensor] = None,
    batch_y: Optional[Tensor] = None,
) -> Tensor:
    r"""For every row of ``x``, the global index of the nearest row of ``y`` in the same example.

    Args:
        x (Tensor): features ``[N, F]``.
        y (Tensor): features ``[M, F]``.
        batch_x (LongTensor, optional): sorted example id per row of ``x``.
        batch_y (LongTensor, optional): sorted example id per row of ``y``.

    Returns:
        LongTensor ``[N]``.

    Raises:
        ValueError: an unsorted batch vector, or an example with points in ``x`` and none in ``y``.
    """
    return _nearest_impl(x, y, batch_x, batch_y)


@torch.jit.ignore
def _grid_cluster_impl(pos: Tensor, size: Tensor, start: Optional[Tensor], end: Optional[Tensor]) -> Tensor:
    return _flat().grid_cluster(pos, size, start, end)


def grid_cluster(
    pos: Tensor,
    size: Tensor,
    start: Optional[Tensor] = None,
    end: Optional[Tensor] = None,
) -> Tensor:
    r"""Voxel-grid cluster id per point: ``trunc((pos - start) / size)`` per dimension, combined
    mixed-radix with dimension 0 the fastest axis.

    Args:
        pos (Tensor): positions ``[N, D]``.
        size (Tensor): voxel size per dimension ``[D]``.
        start (Tensor, optional): grid origin ``[D]`` (default: the minimum of ``pos``).
        end (Tensor, optional): grid end ``[D]`` (default: the maximum of ``pos``).

    Returns:
        LongTensor ``[N]``.
    """
    return _grid_cluster_impl(pos, size, start, end)


# --------------------------------------------------------------------------------------------
# graclus_cluster


def _graclus_match(rowptr: List[int], col: List[int], node_perm: List[int], out: List[int]) -> None:
    """Unweighted greedy matching; each unmatched node draws its own edge permutation."""
    for u in node_perm:
        if out[u] >= 0:
            continue
        out[u] = u
        lo, hi = rowptr[u], rowptr[u + 1]
        edge_perm = torch.randperm(hi - lo).tolist()
        for e in edge_perm:
            v = col[lo + e]
            if out[v] >= 0:
                continue
            out[u] = out[v] = min(u, v)
            break


def _graclus_match_weighted(
    rowptr: List[int], col: List[int], weight: List[Any], node_perm: List[int], out: List[int]
) -> None:
    """Heaviest unmatched neighbour (weight >= 0, the last one on ties) in CSR order."""
    for u in node_perm:
        if out[u] >= 0:
            continue
        v_max, w_max = u, 0
        for e in range(rowptr[u], rowptr[u + 1]):
            v = col[e]
            if out[v] >= 0:
                continue
            if weight[e] >= w_max:
                v_max, w_max = v, weight[e]
        out[u] = out[v_max] = min(u, v_max)


@torch.jit.ignore
def _graclus_impl(row: Tensor, col: Tensor, weight: Optional[Tensor], num_nodes: Optional[int]) -> Tensor:
    device = row.device
    row, col = row.cpu().long(), col.cpu().long()
    if row.dim() != 1 or col.dim() != 1 or row.numel() != col.numel():
        raise ValueError(f"row, col: expected two 1-D tensors of one length, got {tuple(row.shape)} "
                         f"and {tuple(col.shape)}")
    if weight is not None:
        weight = weight.cpu()
        if weight.dim() != 1 or weight.numel() != row.numel():
            raise ValueError(f"weight: expected shape [{row.numel()}], got {tuple(weight.shape)}")
    if num_nodes is None:
        if row.numel() == 0:
            raise ValueError("graclus_cluster: num_nodes is required for a graph without edges")
        num_nodes = max(int(row.max()), int(col.max())) + 1

    mask = row != col  # self-loops never match
    row, col = row[mask], col[mask]
    if weight is not None:
        weight = weight[mask]
    if weight is None:  # the edge order decides the matching: shuffle it, as upstream does
        perm = torch.randperm(row.size(0), dtype=torch.long)
        row, col = row[perm], col[perm]
    perm = torch.argsort(row)
    row, col = row[perm], col[perm]
    if weight is not None:
        weight = weight[perm]

    deg = torch.bincount(row, minlength=num_nodes)
    rowptr = torch.cat([deg.new_zeros(1), deg.cumsum(0)])

    out = [-1] * num_nodes
    node_perm = torch.randperm(num_nodes).tolist()
    if weight is None:
        _graclus_match(rowptr.tolist(), col.tolist(), node_perm, out)
    else:
        _graclus_match_weighted(rowptr.tolist(), col.tolist(), weight.tolist(), node_perm, out)
    return torch.tensor(out, dtype=torch.long, device=device)


def graclus_cluster(
    row: Tensor,
    col: Tensor,
    weight: Optional[Tensor] = None,
    num_nodes: Optional[int] = None,
) -> Tensor:
    r"""Greedy Graclus matching: visits the nodes in random order and pairs each unmatched node
    with an unmatched neighbour (a random one, or the heaviest edge when ``weight`` is given).

    Args:
        row (LongTensor): source nodes ``[E]``.
        col (LongTensor): target nodes ``[E]``.
        weight (Tensor, optional): edge weights ``[E]``; edges of negative weight never match.
        num_nodes (int, optional): the number of nodes (default: the largest id + 1).

    Returns:
        LongTensor ``[num_nodes]``: the cluster id of each node, the smaller node id of its pair
        (its own id when unmatched).
    """
    return _graclus_impl(row, col, weight, num_nodes)


# --------------------------------------------------------------------------------------------
# random_walk


def _walk_uniform(rowptr: Tensor, col: Tensor, start: Tensor, walk_length: int) -> Tuple[Tensor, Tensor]:
    count = start.numel()
    rand = torch.rand((count, walk_length), device=start.device)  # one draw for all steps
    nodes = start.new_empty((count, walk_length + 1))
    edges = start.new_empty((count, walk_length))
    cur = start.clone()
    nodes[:, 0] = cur
    for step in range(walk_length):
        lo = rowptr[cur]
        deg = rowptr[cur + 1] - lo
        # float32 product then truncation, as upstream's `float * int64_t` -> int64_t.
        offset = (rand[:, step] * deg.to(torch.float32)).to(torch.long)
        moves = deg > 0
        edge = torch.where(moves, lo + torch.minimum(offset, (deg - 1).clamp(min=0)), -1)
        if col.numel() > 0:
            cur = torch.where(moves, col[edge.clamp(min=0)], cur)
        nodes[:, step + 1] = cur
        edges[:, step] = edge
    return nodes, edges


def _walk_node2vec(
    rowptr: Tensor, col: Tensor, start: Tensor, walk_length: int, p: float, q: float
) -> Tuple[Tensor, Tensor]:
    """Upstream's rejection sampler: accept x if (x == t and r < 1/p/m) or (x adjacent to t and
    r < 1/m) or r < 1/q/m, with m = max(1/p, 1, 1/q) and r uniform in [0, 1)."""
    num_nodes = rowptr.numel() - 1
    max_prob = max(1.0 / p, 1.0, 1.0 / q)
    prob_0, prob_1, prob_2 = 1.0 / p / max_prob, 1.0 / max_prob, 1.0 / q / max_prob
    src = torch.repeat_interleave(torch.arange(num_nodes, device=rowptr.device), rowptr.diff())
    keys = torch.sort(src * num_nodes + col).values  # edge (a, b) -> a * num_nodes + b

    def adjacent(a: Tensor, b: Tensor) -> Tensor:
        if keys.numel() == 0:
            return torch.zeros_like(a, dtype=torch.bool)
        key = a * num_nodes + b
        at = torch.searchsorted(keys, key).clamp(max=keys.numel() - 1)
        return keys[at] == key

    def pick(lo: Tensor, deg: Tensor) -> Tensor:
        u = torch.rand(lo.shape, dtype=torch.float64, device=lo.device)
        return lo + torch.minimum((u * deg.to(torch.float64)).to(torch.long), deg - 1)

    count = start.numel()
    nodes = start.new_empty((count, walk_length + 1))
    edges = start.new_empty((count, walk_length))
    nodes[:, 0] = start
    if walk_length == 0:
        return nodes, edges
    t = start.clone()
    lo = rowptr[t]
    deg = rowptr[t + 1] - lo
    moves = deg > 0
    edge = torch.full_like(t, -1)
    if moves.any():
        edge[moves] = pick(lo[moves], deg[moves])
    v = torch.where(moves, col[edge.clamp(min=0)] if col.numel() else t, t)
    nodes[:, 1] = v
    edges[:, 0] = edge
    for step in range(1, walk_length):
        lo = rowptr[v]
        deg = rowptr[v + 1] - lo
        edge = torch.where(deg == 1, lo, torch.full_like(lo, -1))
        pending = torch.nonzero(deg >= 2).flatten()
        while pending.numel() > 0:
            e = pick(lo[pending], deg[pending])
            x = col[e]
            r = torch.rand(pending.shape, dtype=torch.float64, device=v.device)
            tp = t[pending]
            accept = ((x == tp) & (r < prob_0)) | (adjacent(x, tp) & (r < prob_1)) | (r < prob_2)
            edge[pending[accept]] = e[accept]
            pending = pending[~accept]
        x = torch.where(edge >= 0, col[edge.clamp(min=0)] if col.numel() else v, v)
        nodes[:, step + 1] = x
        edges[:, step] = edge
        t, v = v, x
    return nodes, edges


def _walk_csr(
    rowptr: Tensor, col: Tensor, start: Tensor, walk_length: int, p: float, q: float
) -> Tuple[Tensor, Tensor]:
    if rowptr.dim() != 1 or col.dim() != 1 or start.dim() != 1:
        raise ValueError("random_walk: rowptr, col and start must be 1-D")
    if walk_length < 0:
        raise ValueError(f"walk_length: expected >= 0, got {walk_length}")
    if not (p > 0 and q > 0):
        raise ValueError(f"p, q: expected > 0, got p={p}, q={q}")
    device = start.device
    rowptr, col, start = rowptr.cpu().long(), col.cpu().long(), start.cpu().long()
    if start.numel() > 0 and (int(start.min()) < 0 or int(start.max()) >= rowptr.numel() - 1):
        raise IndexError(f"start: expected node ids in [0, {rowptr.numel() - 1}), got "
                         f"[{int(start.min())}, {int(start.max())}]")
    if p == 1.0 and q == 1.0:
        nodes, edges = _walk_uniform(rowptr, col, start, walk_length)
    else:
        nodes, edges = _walk_node2vec(rowptr, col, start, walk_length, p, q)
    return nodes.to(device), edges.to(device)


@torch.jit.ignore
def _random_walk_impl(
    row: Tensor,
    col: Tensor,
    start: Tensor,
    walk_length: int,
    p: float,
    q: float,
    coalesced: bool,
    num_nodes: Optional[int],
) -> Tuple[Tensor, Tensor]:
    if num_nodes is None:
        num_nodes = max(int(row.max()), int(col.max()), int(start.max())) + 1
    if row.numel() > 0 and max(int(row.max()), int(col.max())) >= num_nodes:
        raise IndexError(f"num_nodes: {num_nodes} is smaller than the largest node id + 1 of row/col")
    if coalesced:
        perm = torch.argsort(row * num_nodes + col)
        row, col = row[perm], col[perm]
    deg = torch.bincount(row.cpu().long(), minlength=num_nodes)[:num_nodes]
    rowptr = torch.cat([deg.new_zeros(1), deg.cumsum(0)])
    return _walk_csr(rowptr, col, start, walk_length, float(p), float(q))


def random_walk(
    row: Tensor,
    col: Tensor,
    start: Tensor,
    walk_length: int,
    p: float = 1,
    q: float = 1,
    coalesced: bool = True,
    num_nodes: Optional[int] = None,
    return_edge_indices: bool = False,
) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    r"""Random walks of ``walk_length`` steps from every node in ``start`` (node2vec).

    Args:
        row (LongTensor): source nodes ``[E]``.
        col (LongTensor): target nodes ``[E]``.
        start (LongTensor): start nodes ``[S]``.
        walk_length (int): steps per walk.
        p (float, optional): return parameter of node2vec. (default: :obj:`1`)
        q (float, optional): in-out parameter of node2vec. (default: :obj:`1`)
        coalesced (bool, optional): sort the edges by ``(row, col)`` first; without it the
            edges must already be sorted by ``row``. (default: :obj:`True`)
        num_nodes (int, optional): the number of nodes.
        return_edge_indices (bool, optional): also return the edge taken at each step (an index
            into the edges after the optional sort; -1 where a node has no out-edge).

    Returns:
        LongTensor ``[S, walk_length + 1]`` of node ids, and with ``return_edge_indices`` the
        LongTensor ``[S, walk_length]`` of edge indices too.
    """
    node_seq, edge_seq = _random_walk_impl(row, col, start, walk_length, p, q, coalesced, num_nodes)
    if return_edge_indices:
        return node_seq, edge_seq
    return node_seq


def neighbor_sampler(start: Tensor, rowptr: Tensor, size: float) -> Tensor:
    """Not provided by the pcops stand-in (upstream's result depends on its own RNG stream)."""
    raise NotImplementedError("torch_cluster.neighbor_sampler is not provided by the pcops stand-in")


__all__ = [
    "graclus_cluster",
    "grid_cluster",
    "fps",
    "nearest",
    "knn",
    "knn_graph",
    "radius",
    "radius_graph",
    "random_walk",
    "neighbor_sampler",
    "__version__",
]


# --------------------------------------------------------------------------------------------
# Module layout under the upstream names (used by pcops.compat.install)

_TESTING_SOURCE = '''\
"""Test helpers of torch_cluster (pcops stand-in), as upstream's torch_cluster/testing.py."""
from typing import Any

import torch

dtypes = [torch.half, torch.bfloat16, torch.float, torch.double, torch.int, torch.long]
if hasattr(torch.backends, "mps") and torch.backends.mps.is_available():
    grad_dtypes = [torch.float, torch.double]
else:
    grad_dtypes = [torch.half, torch.float, torch.double]
floating_dtypes = grad_dtypes + [torch.bfloat16]

devices = [torch.device("cpu")]
if torch.cuda.is_available():
    devices += [torch.device("cuda:0")]


def tensor(x: Any, dtype: torch.dtype, device: torch.device):
    return None if x is None else torch.tensor(x, dtype=dtype, device=device)
'''

# submodule -> public names it holds upstream
_SUBMODULES = {
    "fps": ["fps"],
    "knn": ["knn", "knn_graph"],
    "radius": ["radius", "radius_graph"],
    "nearest": ["nearest"],
    "grid": ["grid_cluster"],
    "graclus": ["graclus_cluster"],
    "rw": ["random_walk"],
    "sampler": ["neighbor_sampler"],
}


_module = functools.partial(stand_in_module, origin=__file__)  # module objects of this stand-in


def build_modules(name: str = "torch_cluster") -> dict:
    """``{dotted name: module}`` for the package and its submodules, package first."""
    this = sys.modules[__name__]
    package = _module(name, __doc__, package=True)
    package.__package__ = name
    modules = {name: package}
    for sub, names in _SUBMODULES.items():
        module = _module(f"{name}.{sub}", f"torch_cluster.{sub} (pcops stand-in)")
        for attr in names:
            setattr(module, attr, getattr(this, attr))
        modules[module.__name__] = module
    testing = _module(f"{name}.testing", "torch_cluster.testing (pcops stand-in)")
    exec(compile(_TESTING_SOURCE, str(Path(__file__)) + ":testing", "exec"), testing.__dict__)
    modules[testing.__name__] = testing
    typing_mod = _module(f"{name}.typing", "torch_cluster.typing (pcops stand-in)")
    typing_mod.WITH_PTR_LIST = False
    modules[typing_mod.__name__] = typing_mod
    # As after upstream's imports: the submodules whose names are not also functions are
    # attributes of the package; fps, knn, radius and nearest are the functions.
    for sub in ("grid", "graclus", "rw", "sampler", "testing", "typing"):
        setattr(package, sub, modules[f"{name}.{sub}"])
    for attr in __all__:
        setattr(package, attr, getattr(this, attr))
    package.__all__ = list(__all__)
    return modules


# --------------------------------------------------------------------------------------------
# torch.ops.torch_cluster.random_walk: PyG <= 2.7 (Node2Vec, utils.dropout_path) calls it directly


def _random_walk_op(rowptr: Tensor, col: Tensor, start: Tensor, walk_length: int, p: float, q: float):
    return _walk_csr(rowptr, col, start, walk_length, p, q)


def register_ops() -> list:
    """Defines ``torch.ops.torch_cluster.random_walk`` unless that operator already exists."""
    try:
        getattr(torch.ops.torch_cluster, "random_walk")
        return []  # a real torch_cluster library is loaded: leave its operator alone
    except (AttributeError, RuntimeError):
        pass
    lib = torch.library.Library("torch_cluster", "FRAGMENT")
    lib.define(
        "random_walk(Tensor rowptr, Tensor col, Tensor start, int walk_length, float p, float q)"
        " -> (Tensor, Tensor)"
    )
    lib.impl("random_walk", _random_walk_op, "CompositeExplicitAutograd")
    return [lib]
