"""pcops and the peer libraries doing the same work, each behind one small adapter.

Every adapter takes an :class:`Inputs` (NumPy arrays for the peers, tensors already on the device
for pcops and torch) and returns int64 indices (or, for Open3D's FPS, the selected points). Work
that a peer needs before it can answer (building a tree or an index) is inside the timed call.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

# Peers grouped by the operator they implement, fastest-to-import first. A peer whose package is
# missing is reported as unavailable, never silently dropped.


@dataclass
class Inputs:
    points: np.ndarray  # [N, 3] float32 (the reference cloud)
    query: np.ndarray | None  # [M, 3] float32 (knn / ball query)
    points_t: object = None  # torch [1, N, 3] on the benchmark device
    query_t: object = None
    params: dict = field(default_factory=dict)
    threads: int = 1
    sync: Callable[[], None] = lambda: None
    # Flat graph operators: CSR offsets of the stacked clouds, the batch vector (None: a single
    # cloud) and the centres to compute (None: every point, the measured case; a subset only in
    # the budget probes).
    ptr: np.ndarray | None = None
    batch: np.ndarray | None = None
    batch_t: object = None
    rows: np.ndarray | None = None
    # Interpolation operators (three_nn, three_interpolate): batched tensors on the benchmark
    # device, by name (unknown, known; features, idx, weight, grad).
    tensors: dict = field(default_factory=dict)


@dataclass
class Peer:
    name: str
    package: str  # distribution whose version is reported
    op: str  # fps | knn | ball_query
    fn: Callable[[Inputs], np.ndarray]
    returns: str = "indices"  # or "points"
    notes: str = ""
    is_pcops: bool = False
    slow: bool = False  # left out of --quick runs
    devices: tuple = ("cpu",)  # where it runs: CPU libraries only on "cpu"; pcops and torch anywhere
    kernel: str | None = None  # torch op it needs a kernel of on the benchmark device (pcops.flat)

    def missing_kernel(self, device: str) -> str | None:
        """Why the peer cannot run on ``device`` (no kernel of its op there), or None."""
        if self.kernel is None:
            return None
        import torch

        key = "CUDA" if device.startswith("cuda") else "CPU"
        try:
            import pcops  # noqa: F401 (registers the ops)

            if torch._C._dispatch_has_kernel_for_dispatch_key(self.kernel, key):
                return None
        except Exception as exc:  # noqa: BLE001
            return f"{type(exc).__name__}: {exc}"
        return f"{self.kernel} has no {key} kernel in this build (pcops.flat is CPU only for now)"

    def available(self) -> tuple[bool, str]:
        module = _MODULES.get(self.package, self.package)
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 (ImportError, OSError from missing system libraries)
            return False, f"{type(exc).__name__}: {exc}"
        return True, ""


_MODULES = {"faiss-cpu": "faiss", "scipy": "scipy.spatial", "pykdtree": "pykdtree.kdtree", "pcops": "pcops"}


def package_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        mod = _MODULES.get(dist, dist)
        try:
            return str(getattr(importlib.import_module(mod.split(".")[0]), "__version__", None))
        except Exception:  # noqa: BLE001
            return None


# ----------------------------------------------------------------------------------------------
# pcops
# ----------------------------------------------------------------------------------------------


def _pcops_fps(x: Inputs):
    import pcops

    out = pcops.furthest_point_sample(x.points_t, x.params["num_samples"], x.params.get("start_index", 0))
    x.sync()
    return out


def _pcops_knn(x: Inputs):
    import pcops

    _, idx = pcops.knn(x.query_t, x.points_t, x.params["k"])
    x.sync()
    return idx


def _pcops_ball(x: Inputs):
    import pcops

    _, idx = pcops.ball_query(x.query_t, x.points_t, x.params["radius"], x.params["K"])
    x.sync()
    return idx


# ----------------------------------------------------------------------------------------------
# FPS peers
# ----------------------------------------------------------------------------------------------


def _fpsample(method: str, **kw):
    def run(x: Inputs):
        import fpsample

        fn = getattr(fpsample, method)
        return fn(x.points, x.params["num_samples"], start_idx=x.params.get("start_index", 0), **kw)

    return run


def _open3d_fps(x: Inputs):
    import open3d as o3d

    pc = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(x.points.astype(np.float64)))
    down = pc.farthest_point_down_sample(x.params["num_samples"], x.params.get("start_index", 0))
    return np.asarray(down.points)


def _torch_fps(x: Inputs):
    """The usual pure-PyTorch loop (as in many point-cloud repositories)."""
    import torch

    p = x.points_t[0]
    m = x.params["num_samples"]
    out = torch.empty(m, dtype=torch.int64, device=p.device)
    best = torch.full((p.shape[0],), float("inf"), device=p.device)
    cur = int(x.params.get("start_index", 0))
    for t in range(m):
        out[t] = cur
        d = p - p[cur]
        best = torch.minimum(best, (d * d).sum(-1))
        cur = int(torch.argmax(best))
    x.sync()
    return out


# ----------------------------------------------------------------------------------------------
# kNN peers
# ----------------------------------------------------------------------------------------------


def _scipy_knn(x: Inputs):
    from scipy.spatial import cKDTree

    k = x.params["k"]
    _, idx = cKDTree(x.points).query(x.query, k=k, workers=-1)
    return np.asarray(idx).reshape(len(x.query), k)


def _pykdtree_knn(x: Inputs):
    from pykdtree.kdtree import KDTree

    k = x.params["k"]
    _, idx = KDTree(x.points).query(x.query, k=k)
    return np.asarray(idx, np.int64).reshape(len(x.query), k)


def _open3d_flann_knn(x: Inputs):
    import open3d as o3d

    pc = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(x.points.astype(np.float64)))
    tree = o3d.geometry.KDTreeFlann(pc)
    k = x.params["k"]
    q = x.query.astype(np.float64)
    out = np.empty((len(q), k), np.int64)
    for i in range(len(q)):
        _, idx, _ = tree.search_knn_vector_3d(q[i], k)
        out[i] = np.asarray(idx)
    return out


def _open3d_nns_knn(x: Inputs):
    import open3d.core as o3c

    nns = o3c.nns.NearestNeighborSearch(o3c.Tensor(x.points))
    nns.knn_index()
    idx, _ = nns.knn_search(o3c.Tensor(x.query), x.params["k"])
    return idx.numpy().astype(np.int64)


def _faiss_knn(x: Inputs):
    import faiss

    faiss.omp_set_num_threads(x.threads)
    index = faiss.IndexFlatL2(x.points.shape[1])
    index.add(x.points)
    _, idx = index.search(x.query, x.params["k"])
    return idx


def _torch_knn(x: Inputs):
    import torch

    q, r = x.query_t[0], x.points_t[0]
    k = x.params["k"]
    chunk = max(1, (1 << 25) // max(r.shape[0], 1))
    parts = [torch.cdist(q[i : i + chunk], r).topk(k, dim=1, largest=False, sorted=True).indices
             for i in range(0, q.shape[0], chunk)]
    out = torch.cat(parts) if parts else torch.empty((0, k), dtype=torch.int64)
    x.sync()
    return out


# ----------------------------------------------------------------------------------------------
# Ball-query peers (first K matches by reference index, -1 padded)
# ----------------------------------------------------------------------------------------------


def _first_k_from_csr(flat_idx: np.ndarray, splits: np.ndarray, m: int, K: int) -> np.ndarray:
    counts = np.diff(splits)
    rows = np.repeat(np.arange(m), counts)
    order = np.lexsort((flat_idx, rows))
    flat_idx = flat_idx[order]
    rank = np.arange(len(flat_idx)) - np.repeat(splits[:-1], counts)
    keep = rank < K
    out = np.full((m, K), -1, np.int64)
    out[rows[keep], rank[keep]] = flat_idx[keep]
    return out


def _scipy_ball(x: Inputs):
    from scipy.spatial import cKDTree

    lists = cKDTree(x.points).query_ball_point(x.query, x.params["radius"], workers=-1)
    K = x.params["K"]
    out = np.full((len(lists), K), -1, np.int64)
    for i, lst in enumerate(lists):
        hit = np.sort(np.asarray(lst, np.int64))[:K]
        out[i, : len(hit)] = hit
    return out


def _open3d_nns_ball(x: Inputs):
    import open3d.core as o3c

    nns = o3c.nns.NearestNeighborSearch(o3c.Tensor(x.points))
    nns.fixed_radius_index(x.params["radius"])
    idx, _, splits = nns.fixed_radius_search(o3c.Tensor(x.query), x.params["radius"], sort=False)
    return _first_k_from_csr(idx.numpy().astype(np.int64), splits.numpy().astype(np.int64),
                             len(x.query), x.params["K"])


def _open3d_flann_ball(x: Inputs):
    import open3d as o3d

    pc = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(x.points.astype(np.float64)))
    tree = o3d.geometry.KDTreeFlann(pc)
    K, r = x.params["K"], x.params["radius"]
    q = x.query.astype(np.float64)
    out = np.full((len(q), K), -1, np.int64)
    for i in range(len(q)):
        _, idx, _ = tree.search_radius_vector_3d(q[i], r)
        hit = np.sort(np.asarray(idx, np.int64))[:K]
        out[i, : len(hit)] = hit
    return out


def _torch_ball(x: Inputs):
    """Dense mask on squared distances, then the first K matches by index (cumulative count)."""
    import torch

    q, r = x.query_t[0], x.points_t[0]
    K = x.params["K"]
    r2 = float(np.float32(np.float32(x.params["radius"]) ** 2))
    out = torch.full((q.shape[0], K), -1, dtype=torch.int64, device=q.device)
    rt = r.t().contiguous()
    chunk = max(1, (1 << 24) // max(r.shape[0], 1))
    for i in range(0, q.shape[0], chunk):
        qc = q[i : i + chunk]
        d = qc[:, 0:1] - rt[0]
        s = d * d
        for c in range(1, q.shape[1]):
            d = qc[:, c : c + 1] - rt[c]
            s += d * d
        mask = s < r2
        cs = mask.to(torch.int32).cumsum(1, dtype=torch.int32)
        rows, cols = torch.nonzero(mask & (cs <= K), as_tuple=True)
        out[i + rows, (cs[rows, cols] - 1).long()] = cols
    x.sync()
    return out


# ----------------------------------------------------------------------------------------------
# Flat graph operators (torch_cluster semantics, source_to_target: row 0 = neighbour, row 1 =
# centre). Peers compute each cloud on its own (a tree per cloud) and return the same edge list:
# knn_graph asks for k + 1 and drops the self pair (a centre whose self is not among them keeps
# k + 1); radius_graph skips the self pair and keeps the first max_num_neighbors by index.
# ----------------------------------------------------------------------------------------------


def _clouds(x: Inputs):
    """(lo, hi, centres of that cloud) per cloud holding some of the centres to compute."""
    ptr = x.ptr if x.ptr is not None else np.array([0, len(x.points)], np.int64)
    if x.rows is None:
        for b in range(len(ptr) - 1):
            lo, hi = int(ptr[b]), int(ptr[b + 1])
            if hi > lo:
                yield lo, hi, None
        return
    cloud = np.searchsorted(ptr, x.rows, side="right") - 1
    for b in np.unique(cloud):
        yield int(ptr[b]), int(ptr[b + 1]), x.rows[cloud == b]


def _drop_self(idx, centres, xp=np):
    """[m, kk] neighbours of ``centres`` -> [2, E] edges without the self pairs."""
    if xp is np:
        mask = idx != centres[:, None]
        return np.stack([idx[mask], np.repeat(centres, mask.sum(1))])
    mask = idx != centres[:, None]
    return xp.stack([idx[mask], centres.repeat_interleave(mask.sum(1))])


def _cat_edges(parts, xp=np):
    if not parts:
        return np.zeros((2, 0), np.int64) if xp is np else xp.zeros((2, 0), dtype=xp.int64)
    return np.concatenate(parts, axis=1) if xp is np else xp.cat(parts, dim=1)


def _pcops_flat_knn_graph(x: Inputs):
    import torch

    import pcops.flat

    k, pts = x.params["k"], x.points_t[0]
    if x.rows is None:
        out = pcops.flat.knn_graph(pts, k, x.batch_t, loop=False)
    else:  # budget probe: the same search for a subset of the centres
        rows = torch.from_numpy(x.rows).to(pts.device)
        e = pcops.flat.knn(pts, pts[rows], k + 1, x.batch_t,
                           None if x.batch_t is None else x.batch_t[rows])
        out = _drop_self(e[1].view(len(x.rows), -1), rows, torch) if e.shape[1] == len(x.rows) * (k + 1) else e
    x.sync()
    return out


def _pcops_flat_radius_graph(x: Inputs):
    import torch

    import pcops.flat

    r, cap, pts = x.params["r"], x.params["max_num_neighbors"], x.points_t[0]
    if x.rows is None:
        out = pcops.flat.radius_graph(pts, r, x.batch_t, loop=False, max_num_neighbors=cap)
    else:  # budget probe
        rows = torch.from_numpy(x.rows).to(pts.device)
        out = pcops.flat.radius(pts, pts[rows], r, x.batch_t, None if x.batch_t is None else x.batch_t[rows],
                                cap + 1)
    x.sync()
    return out


def _tree_knn_graph(make_query):
    def run(x: Inputs):
        k = x.params["k"]
        parts = []
        for lo, hi, centres in _clouds(x):
            ref = x.points[lo:hi]
            c = np.arange(lo, hi) if centres is None else centres
            kk = min(k + 1, hi - lo)
            idx = np.asarray(make_query(ref)(x.points[c], kk), np.int64).reshape(len(c), kk) + lo
            parts.append(_drop_self(idx, c))
        return _cat_edges(parts)

    return run


def _scipy_query(ref):
    from scipy.spatial import cKDTree

    tree = cKDTree(ref)
    return lambda q, kk: tree.query(q, k=kk, workers=-1)[1]


def _pykdtree_query(ref):
    from pykdtree.kdtree import KDTree

    tree = KDTree(ref)
    return lambda q, kk: tree.query(q, k=kk)[1]


def _scipy_radius_graph(x: Inputs):
    """query_ball_point (distance <= r in float64) per cloud, sorted by index; the self pair
    skipped, the first max_num_neighbors kept."""
    from itertools import chain

    from scipy.spatial import cKDTree

    r, cap = x.params["r"], x.params["max_num_neighbors"]
    parts = []
    for lo, hi, centres in _clouds(x):
        c = np.arange(lo, hi) if centres is None else centres
        lists = cKDTree(x.points[lo:hi]).query_ball_point(x.points[c], r, workers=-1, return_sorted=True)
        counts = np.fromiter(map(len, lists), np.int64, count=len(lists))
        nbr = np.fromiter(chain.from_iterable(lists), np.int64, count=int(counts.sum())) + lo
        centre = np.repeat(c, counts)
        keep = nbr != centre
        nbr, centre = nbr[keep], centre[keep]
        # Edges are grouped by centre, centres ascending: the rank is the offset in the group.
        rank = np.arange(len(centre)) - np.searchsorted(centre, centre, side="left")
        keep = rank < cap
        parts.append(np.stack([nbr[keep], centre[keep]]))
    return _cat_edges(parts)


def _torch_knn_graph(x: Inputs):
    """Chunked torch.cdist + topk(k + 1) per cloud, self pair dropped."""
    import torch

    k, pts = x.params["k"], x.points_t[0]
    parts = []
    for lo, hi, centres in _clouds(x):
        ref = pts[lo:hi]
        c = torch.arange(lo, hi, device=pts.device) if centres is None else torch.from_numpy(centres).to(pts.device)
        kk = min(k + 1, hi - lo)
        chunk = max(1, (1 << 25) // max(hi - lo, 1))
        for i in range(0, len(c), chunk):
            cc = c[i : i + chunk]
            idx = torch.cdist(pts[cc], ref).topk(kk, dim=1, largest=False, sorted=True).indices + lo
            parts.append(_drop_self(idx, cc, torch))
    out = _cat_edges(parts, torch)
    x.sync()
    return out


def _torch_radius_graph(x: Inputs):
    """Dense mask of the contract's squared distances per cloud and chunk, self skipped, the first
    max_num_neighbors by index (cumulative count)."""
    import torch

    pts = x.points_t[0]
    r2 = float(np.float32(float(x.params["r"]) * float(x.params["r"])))
    cap = x.params["max_num_neighbors"]
    parts = []
    for lo, hi, centres in _clouds(x):
        rt = pts[lo:hi].t().contiguous()
        c = torch.arange(lo, hi, device=pts.device) if centres is None else torch.from_numpy(centres).to(pts.device)
        chunk = max(1, (1 << 24) // max(hi - lo, 1))
        for i in range(0, len(c), chunk):
            cc = c[i : i + chunk]
            q = pts[cc]
            d = q[:, 0:1] - rt[0]
            s = d * d
            for dim in range(1, q.shape[1]):
                d = q[:, dim : dim + 1] - rt[dim]
                s += d * d
            mask = s < r2
            mask[torch.arange(len(cc), device=pts.device), cc - lo] = False
            cs = mask.to(torch.int32).cumsum(1, dtype=torch.int32)
            rows, cols = torch.nonzero(mask & (cs <= cap), as_tuple=True)
            parts.append(torch.stack([cols + lo, cc[rows]]))
    out = _cat_edges(parts, torch)
    x.sync()
    return out


# ----------------------------------------------------------------------------------------------
# PointNet++ feature propagation: three_nn (indices [B, N, 3]) and three_interpolate (forward and
# features gradient, returned as (out, grad_features) and compared bit for bit with the contract).
# ----------------------------------------------------------------------------------------------


def _pcops_three_nn(x: Inputs):
    import pcops

    _, idx = pcops.three_nn(x.tensors["unknown"], x.tensors["known"])
    x.sync()
    return idx


def _torch_three_nn(x: Inputs):
    """Chunked batched torch.cdist + topk(3, largest=False) (cdist's matrix-product form may
    misorder near ties: the mismatch count shows it)."""
    import torch

    u, k = x.tensors["unknown"], x.tensors["known"]
    chunk = max(1, (1 << 25) // max(u.shape[0] * k.shape[1], 1))
    parts = [torch.cdist(u[:, i : i + chunk], k).topk(3, dim=2, largest=False, sorted=True).indices
             for i in range(0, u.shape[1], chunk)]
    out = torch.cat(parts, dim=1) if parts else torch.empty((u.shape[0], 0, 3), dtype=torch.int64)
    x.sync()
    return out


def _pcops_three_interpolate(x: Inputs):
    import torch

    import pcops

    f = x.tensors["features"]
    out = pcops.three_interpolate(f, x.tensors["idx"], x.tensors["weight"])
    (grad,) = torch.autograd.grad(out, f, x.tensors["grad"])
    x.sync()
    return out.detach(), grad


def _torch_three_interpolate(x: Inputs):
    """The usual PyTorch form: gather the three neighbours' features, multiply by the weights,
    sum over the slots; the gradient through autograd (a scatter-add)."""
    import torch

    f, idx, w = x.tensors["features"], x.tensors["idx"], x.tensors["weight"]
    b, c, _ = f.shape
    n = idx.shape[1]
    nb = torch.gather(f, 2, idx.reshape(b, 1, n * 3).expand(b, c, n * 3)).reshape(b, c, n, 3)
    out = (nb * w.unsqueeze(1)).sum(dim=3)
    (grad,) = torch.autograd.grad(out, f, x.tensors["grad"])
    x.sync()
    return out.detach(), grad


# ----------------------------------------------------------------------------------------------
# point_conv: forward + both gradients, returned as (out, grad_features, grad_weights) and compared
# bit for bit with the contract.
# ----------------------------------------------------------------------------------------------


def _pcops_point_conv_mode(x: Inputs, mode: str):
    """pcops.point_conv forward + both gradients with the triplets sorted inside the call, as the
    peer groups inside its own (no grouping kept across calls; docs/ops/point_conv.md, kept
    groupings)."""
    import torch

    import pcops
    from pcops.ops.point_conv import sorting_in_every_call

    f, w = x.tensors["features"], x.tensors["weights"]
    with sorting_in_every_call():
        out = pcops.point_conv(f, w, x.tensors["triplets"], f.shape[0], mode=mode)
        gf, gw = torch.autograd.grad(out, [f, w], x.tensors["grad"])
    x.sync()
    return out.detach(), gf, gw


def _pcops_point_conv(x: Inputs):
    return _pcops_point_conv_mode(x, "exact")


def _pcops_point_conv_bf16(x: Inputs):
    return _pcops_point_conv_mode(x, "fast")


def point_conv_cells(triplets, kernels: int) -> list:
    """(k, positions of k's triplets) for every non-empty kernel cell (a stable sort by k)."""
    import torch

    order = torch.argsort(triplets[:, 2], stable=True)
    counts = torch.bincount(triplets[:, 2], minlength=kernels).tolist()
    cells, start = [], 0
    for k, c in enumerate(counts):
        if c:
            cells.append((k, order[start:start + c]))
        start += c
    return cells


def gather_gemm_scatter(features, weights, triplets, num_out: int, cells):
    """point_conv as PyTorch code usually writes it: per kernel cell the input rows gathered, one
    GEMM with W_k and index_add into the output (``cells`` from point_conv_cells)."""
    out = features.new_zeros(num_out, weights.shape[1])
    for k, rows in cells:
        out = out.index_add(0, triplets[rows, 0], features[triplets[rows, 1]] @ weights[k].t())
    return out


def _torch_point_conv(x: Inputs):
    """Gather-GEMM-scatter (the cells' grouping inside the timed call); gradients by autograd."""
    import torch

    f, w, t = x.tensors["features"], x.tensors["weights"], x.tensors["triplets"]
    out = gather_gemm_scatter(f, w, t, f.shape[0], point_conv_cells(t, w.shape[0]))
    gf, gw = torch.autograd.grad(out, [f, w], x.tensors["grad"])
    x.sync()
    return out.detach(), gf, gw


ANY = ("cpu", "cuda")


def all_peers() -> list[Peer]:
    fps_note_bucket = "QuickFPS bucket method; in fpsample 1.0.2 it ignores start_idx and starts where it chooses"
    return [
        Peer("pcops", "pcops", "fps", _pcops_fps, is_pcops=True, devices=ANY),
        Peer("fpsample.fps_sampling", "fpsample", "fps", _fpsample("fps_sampling")),
        Peer("fpsample.bucket_fps_kdtree_sampling", "fpsample", "fps",
             _fpsample("bucket_fps_kdtree_sampling"), notes=fps_note_bucket),
        Peer("fpsample.bucket_fps_kdline_sampling(h=7)", "fpsample", "fps",
             _fpsample("bucket_fps_kdline_sampling", h=7), notes=fps_note_bucket, slow=True),
        Peer("open3d.farthest_point_down_sample", "open3d", "fps", _open3d_fps, returns="points",
             notes="returns the selected points in index order, not selection order: compared as a set"),
        Peer("torch loop", "torch", "fps", _torch_fps, slow=True, devices=ANY),
        Peer("pcops", "pcops", "knn", _pcops_knn, is_pcops=True, devices=ANY),
        Peer("scipy.cKDTree", "scipy", "knn", _scipy_knn, notes="build included, workers=-1"),
        Peer("pykdtree", "pykdtree", "knn", _pykdtree_knn, notes="build included"),
        Peer("open3d.KDTreeFlann", "open3d", "knn", _open3d_flann_knn, slow=True,
             notes="build included, one Python call per query"),
        Peer("open3d.nns", "open3d", "knn", _open3d_nns_knn, notes="core.nns knn_index + knn_search"),
        Peer("faiss.IndexFlatL2", "faiss-cpu", "knn", _faiss_knn),
        Peer("torch cdist+topk", "torch", "knn", _torch_knn, slow=True, devices=ANY),
        Peer("pcops", "pcops", "ball_query", _pcops_ball, is_pcops=True, devices=ANY),
        Peer("scipy.query_ball_point", "scipy", "ball_query", _scipy_ball,
             notes="build included, workers=-1, first K by index"),
        Peer("open3d.nns", "open3d", "ball_query", _open3d_nns_ball,
             notes="fixed_radius_index + search, first K by index"),
        Peer("open3d.KDTreeFlann", "open3d", "ball_query", _open3d_flann_ball, slow=True,
             notes="one Python call per query, first K by index"),
        Peer("torch mask", "torch", "ball_query", _torch_ball, slow=True, devices=ANY),
        Peer("pcops", "pcops", "flat_knn_graph", _pcops_flat_knn_graph, is_pcops=True, devices=ANY,
             kernel="pcops::knn_ragged", notes="pcops.flat.knn_graph(x, k, batch, loop=False)"),
        Peer("scipy.cKDTree", "scipy", "flat_knn_graph", _tree_knn_graph(_scipy_query),
             notes="a tree per cloud (build included), workers=-1, query k + 1 and drop self"),
        Peer("pykdtree", "pykdtree", "flat_knn_graph", _tree_knn_graph(_pykdtree_query),
             notes="a tree per cloud (build included), query k + 1 and drop self"),
        Peer("torch cdist+topk", "torch", "flat_knn_graph", _torch_knn_graph, slow=True, devices=ANY,
             notes="per cloud, chunked cdist + topk(k + 1), drop self"),
        Peer("pcops", "pcops", "radius_graph", _pcops_flat_radius_graph, is_pcops=True, devices=ANY,
             kernel="pcops::radius", notes="pcops.flat.radius_graph(x, r, batch, loop=False, max_num_neighbors)"),
        Peer("scipy.query_ball_point", "scipy", "radius_graph", _scipy_radius_graph,
             notes="a tree per cloud (build included), workers=-1, distance <= r in float64, "
                   "self skipped, first max_num_neighbors by index"),
        Peer("torch mask", "torch", "radius_graph", _torch_radius_graph, slow=True, devices=ANY,
             notes="per cloud, chunked dense mask of the contract's squared distance, self skipped, "
                   "first max_num_neighbors by index"),
        Peer("pcops", "pcops", "three_nn", _pcops_three_nn, is_pcops=True, devices=ANY),
        Peer("torch cdist+topk", "torch", "three_nn", _torch_three_nn, devices=ANY,
             notes="batched cdist, chunked over unknown points, topk(3, largest=False)"),
        Peer("pcops", "pcops", "three_interpolate", _pcops_three_interpolate, is_pcops=True, devices=ANY,
             notes="forward + features gradient (deterministic, no atomics)"),
        Peer("torch gather+sum", "torch", "three_interpolate", _torch_three_interpolate, devices=ANY,
             notes="gather [B, C, N, 3] * weight, sum over slots; gradient by autograd (scatter-add)"),
        Peer("pcops", "pcops", "point_conv", _pcops_point_conv, is_pcops=True, devices=ANY,
             notes="mode='exact': forward + grad_features + grad_weights in the contract's order"),
        Peer("torch gather-GEMM-scatter", "torch", "point_conv", _torch_point_conv, devices=ANY,
             notes="per kernel cell: gather the input rows, one GEMM with W_k, index_add_; autograd"),
        Peer("pcops", "pcops", "point_conv_bf16", _pcops_point_conv_bf16, is_pcops=True, devices=ANY,
             notes="mode='fast': the tensor cores on CUDA (float32 products and sums in a fixed order); "
                   "the exact float32 path elsewhere"),
        Peer("torch gather-GEMM-scatter", "torch", "point_conv_bf16", _torch_point_conv, devices=ANY,
             notes="the same in bfloat16 (its GEMMs on the tensor cores on CUDA); autograd"),
    ]


def peers_for(op: str, selected: list[str] | None = None, quick: bool = False, device: str = "cpu") -> list[Peer]:
    """Peers of ``op`` (knn_graph uses the knn peers) that run on ``device``; ``selected`` filters by
    name prefix (pcops is always kept)."""
    base = "knn" if op == "knn_graph" else op
    kind = device.split(":")[0]
    out = []
    for p in all_peers():
        if p.op != base or kind not in p.devices:
            continue
        if quick and p.slow:
            continue
        if selected and not p.is_pcops and not any(p.name.startswith(s) or p.package == s for s in selected):
            continue
        out.append(p)
    return out
