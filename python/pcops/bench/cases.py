"""Benchmark inputs: clouds (synthetic sphere shell, a real scan, a real mesh sampled on its faces),
point orders (random, Morton-sorted) and the cases (operator x cloud x size x order)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from pcops import data as pdata

SEED = 20240601

# Default real inputs: the largest scan of the data set, and the largest mesh.
SCAN_FILE = "building.ply"
MESH_FILE = "refined_elephant.off"

OPS = ("fps", "knn", "ball_query", "knn_graph", "flat_knn_graph", "radius_graph")
# Operators whose every point is a query; their sizes follow --graph-sizes.
GRAPH_OPS = ("knn_graph", "flat_knn_graph", "radius_graph")
# The ragged operators of pcops.flat (torch_cluster semantics), run on one cloud and on a batch.
FLAT_OPS = ("flat_knn_graph", "radius_graph")
# Clouds in a flat case: 1 = a single cloud (batch=None), 16 = the same N split into 16 clouds.
BATCHES = (1, 16)
# Clouds of the flat operators (the mesh only where it is asked for alone).
FLAT_CLOUDS = ("sphere", "scan")
ORDERS = ("random", "morton")
CLOUDS = ("sphere", "scan", "mesh")
SIZES = (20_000, 100_000, 1_000_000)
GRAPH_SIZES = (100_000, 1_000_000)
# PointNet++ feature propagation, opt-in (not part of the default OPS run): B clouds of N unknown
# points, each interpolating from M = N / known_ratio known points (a random subset of its
# cloud); three_interpolate is timed forward + features gradient.
INTERP_OPS = ("three_nn", "three_interpolate")
INTERP_LAYOUTS = ((16, 4096), (1, 100_000))  # (clouds B, unknown points N per cloud)
# Point convolution (PointCNN++ MVMR), opt-in: every point of the cloud is an output and an input,
# the triplets from its k nearest neighbours (itself included) in a t x t x t grid of kernel cells
# sized by the 90 % quantile of the k-th neighbour distance (as benchmarks/scripts/point_conv_probe.py),
# C channels in and out; timed forward + both gradients. point_conv_bf16: the same in bfloat16
# (pcops with mode="fast": the tensor cores on CUDA), checked against float64 within the bound of
# one bfloat16 rounding of the result and float32 sums.
CONV_OPS = ("point_conv", "point_conv_bf16")
CONV_SIZES = (20_000,)
ALL_OPS = OPS + INTERP_OPS + CONV_OPS

# Operator parameters (DESIGN.md section 7).
PARAMS = {
    "fps": {"num_samples": 1024, "start_index": 0},
    "knn": {"num_queries": 1024, "k": 128},
    "ball_query": {"num_queries": 1024, "K": 64, "radius": 0.1},
    "knn_graph": {"k": 16},
    # pcops.flat.knn_graph(x, k, batch, loop=False); check_rows: centres checked against the
    # float32 brute-force oracle (a random subset, all of them below that size).
    "flat_knn_graph": {"k": 16, "loop": False, "check_rows": 1024},
    # pcops.flat.radius_graph(x, r, batch, loop=False, max_num_neighbors); r is chosen per case
    # (cloud, size, order, clouds in the batch) for about target_degree neighbours on average.
    "radius_graph": {"r": None, "target_degree": 16, "max_num_neighbors": 32, "loop": False,
                     "check_rows": 1024},
    # M = N // known_ratio known points per cloud; three_interpolate: C channels, weights from the
    # exact three nearest known points (1 / (d + 1e-8), normalised, as PointNet++).
    "three_nn": {"known_ratio": 4},
    "three_interpolate": {"known_ratio": 4, "channels": 128},
    "point_conv": {"k": 16, "kernel_size": 3, "channels": 32},
    "point_conv_bf16": {"k": 16, "kernel_size": 3, "channels": 32},
}


def parse_size(text: str) -> int:
    text = text.strip().lower().replace("_", "")
    mult = 1
    if text.endswith("k"):
        mult, text = 1_000, text[:-1]
    elif text.endswith("m"):
        mult, text = 1_000_000, text[:-1]
    return int(float(text) * mult)


def format_size(n: int) -> str:
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n >= 1_000 and n % 1_000 == 0:
        return f"{n // 1_000}k"
    return str(n)


def sphere_shell(n: int, seed: int = SEED) -> np.ndarray:
    """Points on the unit sphere plus 0.01 gaussian noise."""
    rng = np.random.default_rng(seed)
    p = rng.standard_normal((n, 3))
    p /= np.linalg.norm(p, axis=1, keepdims=True)
    p += 0.01 * rng.standard_normal((n, 3))
    return p.astype(np.float32)


def normalise(points: np.ndarray) -> np.ndarray:
    """Centre on the bounding box and scale into the unit ball, so radius 0.1 means the same
    fraction of every cloud."""
    p = points.astype(np.float64)
    centre = 0.5 * (p.min(axis=0) + p.max(axis=0))
    p -= centre
    scale = np.sqrt((p * p).sum(axis=1)).max()
    return (p / (scale if scale > 0 else 1.0)).astype(np.float32)


def _spread_bits(v: np.ndarray) -> np.ndarray:
    v = v.astype(np.uint64) & np.uint64(0x1FFFFF)
    v = (v | (v << np.uint64(32))) & np.uint64(0x1F00000000FFFF)
    v = (v | (v << np.uint64(16))) & np.uint64(0x1F0000FF0000FF)
    v = (v | (v << np.uint64(8))) & np.uint64(0x100F00F00F00F00F)
    v = (v | (v << np.uint64(4))) & np.uint64(0x10C30C30C30C30C3)
    v = (v | (v << np.uint64(2))) & np.uint64(0x1249249249249249)
    return v


def morton_order(points: np.ndarray) -> np.ndarray:
    """Permutation sorting the points along a 21-bit-per-axis Morton (Z-order) curve."""
    p = points.astype(np.float64)
    lo, hi = p.min(axis=0), p.max(axis=0)
    q = ((p - lo) / np.where(hi > lo, hi - lo, 1.0) * ((1 << 21) - 1)).astype(np.uint64)
    code = _spread_bits(q[:, 0]) | (_spread_bits(q[:, 1]) << np.uint64(1)) | (_spread_bits(q[:, 2]) << np.uint64(2))
    return np.argsort(code, kind="stable")


def reorder(points: np.ndarray, order: str, seed: int = SEED) -> np.ndarray:
    if order == "random":
        return points[np.random.default_rng(seed + 1).permutation(len(points))]
    if order in ("morton", "sorted"):
        return points[morton_order(points)]
    raise ValueError(f"order: expected one of {ORDERS}, got {order!r}")


@lru_cache(maxsize=4)
def _load_real(path: str) -> pdata.Cloud:
    return pdata.load(path)


def real_file(name: str, data_dir: str | Path | None) -> Path | None:
    d = pdata.data_dir(data_dir)
    if d is None or not (d / name).is_file():
        return None
    return d / name


def make_cloud(kind: str, n: int, data_dir=None, seed: int = SEED) -> tuple[np.ndarray, str] | None:
    """Base cloud of ``n`` points (before ordering) and a description; None if not available
    (a real scan smaller than ``n``)."""
    if kind == "sphere":
        return sphere_shell(n, seed), f"unit sphere shell + 0.01 noise, {n} points"
    if kind == "scan":
        path = real_file(SCAN_FILE, data_dir)
        if path is None:
            return None
        pts = _load_real(str(path)).points
        if n > len(pts):
            return None
        if n < len(pts):
            pts = pts[np.sort(np.random.default_rng(seed).choice(len(pts), n, replace=False))]
        return normalise(pts), f"{SCAN_FILE} ({n} of {len(_load_real(str(path)).points)} scanned points)"
    if kind == "mesh":
        path = real_file(MESH_FILE, data_dir)
        if path is None:
            return None
        mesh = _load_real(str(path))
        pts = pdata.sample_mesh(mesh.points, mesh.faces, n, seed=seed)
        return normalise(pts), f"{MESH_FILE} sampled on its faces (area-weighted), {n} points"
    raise ValueError(f"cloud: expected one of {CLOUDS}, got {kind!r}")


@dataclass
class Case:
    op: str
    cloud: str
    order: str
    n: int
    points: np.ndarray
    query_index: np.ndarray | None
    params: dict
    description: str
    extra: dict = field(default_factory=dict)
    batches: int = 1  # clouds in the stacked input (flat operators)
    batch: np.ndarray | None = None  # sorted [N] int64 batch vector; None: a single cloud

    @property
    def key(self) -> str:
        key = f"{self.op}/{self.cloud}/{format_size(self.n)}/{self.order}"
        return key + (f"/x{self.batches}" if self.batches > 1 else "")

    @property
    def ptr(self) -> np.ndarray:
        """CSR offsets [B + 1] of the clouds (one cloud without a batch vector)."""
        if self.batch is None:
            return np.array([0, self.n], np.int64)
        counts = np.bincount(self.batch, minlength=self.batches)
        return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

    @property
    def query(self) -> np.ndarray:
        return self.points if self.query_index is None else self.points[self.query_index]


def split_batch(points: np.ndarray, batches: int, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """The points as ``batches`` stacked clouds: each point is dealt to a cloud at random (equal
    sizes within one), the clouds are stacked in cloud order and each keeps the input order (so a
    Morton-sorted input gives Morton-sorted clouds). Returns (points, sorted int64 batch vector)."""
    n = len(points)
    cloud = np.random.default_rng(seed + 3).permutation(n) % batches
    perm = np.argsort(cloud, kind="stable")
    return np.ascontiguousarray(points[perm]), cloud[perm].astype(np.int64)


def choose_radius(points: np.ndarray, ptr: np.ndarray, target: float, samples: int = 2048,
                  seed: int = SEED) -> float:
    """A radius with about ``target`` neighbours (self excluded, within the point's own cloud) on
    average over a random sample of points, rounded to 3 significant digits."""
    n = len(points)
    m = min(samples, n)
    rows = np.sort(np.random.default_rng(seed + 5).choice(n, m, replace=False))
    cloud = np.searchsorted(ptr, rows, side="right") - 1
    kq = int(4 * target) + 1
    dists = []
    used = 0
    try:
        from scipy.spatial import cKDTree
    except ImportError:  # brute force on fewer rows
        cKDTree = None
    for b in np.unique(cloud):
        lo, hi = int(ptr[b]), int(ptr[b + 1])
        sel = rows[cloud == b]
        if cKDTree is None:
            sel = sel[: max(1, 256 * len(sel) // m)]
        kk = min(kq, hi - lo)
        if kk < 2:
            continue
        ref = points[lo:hi].astype(np.float64)
        if cKDTree is not None:
            d, _ = cKDTree(ref).query(points[sel].astype(np.float64), k=kk)
        else:
            diff = points[sel].astype(np.float64)[:, None, :] - ref[None]
            d = np.sort(np.sqrt((diff * diff).sum(-1)), axis=1)[:, :kk]
        dists.append(np.asarray(d).reshape(len(sel), kk)[:, 1:].ravel())  # column 0: the point itself
        used += len(sel)
    if not used:
        return 0.0
    pool = np.sort(np.concatenate(dists))
    # The (target * rows)-th smallest distance: that many pairs lie strictly closer (no ties).
    r = float(pool[min(len(pool) - 1, int(round(target * used)))])
    return float(f"{r:.3g}")


def make_case(op: str, cloud: str, n: int, order: str, data_dir=None, params=None,
              batches: int = 1) -> Case | None:
    if op in INTERP_OPS:
        return _make_interp_case(op, cloud, n, order, data_dir, params, batches)
    if op in CONV_OPS:
        return _make_conv_case(op, cloud, n, order, data_dir, params)
    base = make_cloud(cloud, n, data_dir)
    if base is None:
        return None
    pts, desc = base
    pts = np.ascontiguousarray(reorder(pts, order))
    if op in FLAT_OPS:
        return _make_flat_case(op, cloud, n, order, pts, desc, params, batches)
    p = dict(PARAMS[op])
    if params:
        p.update({k: v for k, v in params.items() if k in p})
    qidx = None
    if "num_queries" in p:
        m = min(p["num_queries"], n)
        qidx = np.sort(np.random.default_rng(SEED + 2).choice(n, m, replace=False))
    if op == "fps":
        p["num_samples"] = min(p["num_samples"], n)
    if "k" in p:
        p["k"] = min(p["k"], n)
    return Case(op, cloud, order, n, pts, qidx, p, desc)


def _make_flat_case(op, cloud, n, order, pts, desc, params, batches) -> Case:
    p = dict(PARAMS[op])
    if params:
        p.update({k: v for k, v in params.items() if k in p and k != "r"})
    batches = max(1, int(batches))
    batch = None
    if batches > 1:
        pts, batch = split_batch(pts, batches)
        desc += f", split into {batches} clouds (sorted batch vector)"
    case = Case(op, cloud, order, n, pts, None, p, desc, batches=batches, batch=batch)
    p["batches"] = batches
    p["check_rows"] = min(int(p["check_rows"]), n)
    case.extra["check_rows"] = np.sort(np.random.default_rng(SEED + 4).choice(n, p["check_rows"], replace=False))
    if op == "radius_graph":
        p["r"] = choose_radius(pts, case.ptr, p["target_degree"])
    return case


def three_nn_indices(unknown: np.ndarray, known: np.ndarray) -> np.ndarray:
    """int64 [B, N, 3]: the exact three nearest known points of every unknown point (the
    float32 oracle, per cloud)."""
    from pcops.bench import oracle

    out = []
    for u, k in zip(unknown, known):
        try:  # a k-d tree with exact float32 re-ranking (fast for large clouds)
            out.append(oracle._knn_tree(u, k, 3) if np.isfinite(u).all() and np.isfinite(k).all()
                       else oracle.knn(u, k, 3))
        except ImportError:
            out.append(oracle.knn(u, k, 3))
    return np.stack(out).astype(np.int64)


def _make_interp_case(op, cloud, n, order, data_dir, params, batches) -> Case | None:
    p = dict(PARAMS[op])
    if params:
        p.update({k: v for k, v in params.items() if k in p})
    batches = max(1, int(batches))
    base = make_cloud(cloud, n * batches, data_dir)
    if base is None:
        return None
    pts, desc = base
    pts = np.ascontiguousarray(reorder(pts, order))
    if batches > 1:
        pts, _ = split_batch(pts, batches)
    unknown = pts.reshape(batches, n, 3)
    m = max(3, n // int(p["known_ratio"]))
    rng = np.random.default_rng(SEED + 6)
    known = np.stack([unknown[b, np.sort(rng.choice(n, m, replace=False))] for b in range(batches)])
    p.update(batches=batches, unknown=n, known=m)
    desc += f", {batches} cloud(s) of {n} unknown points, {m} known points each (a random subset)"
    case = Case(op, cloud, order, n, pts, None, p, desc, batches=batches)
    case.extra.update(unknown=unknown, known=np.ascontiguousarray(known))
    if op == "three_interpolate":
        c = int(p["channels"])
        g = np.random.default_rng(SEED + 7)
        idx = three_nn_indices(unknown, known)
        b_ix = np.arange(batches)[:, None, None]
        d = unknown[:, :, None, :] - known[b_ix, idx]  # [B, N, 3, 3] float32
        dist = np.sqrt(d[..., 0] * d[..., 0] + d[..., 1] * d[..., 1] + d[..., 2] * d[..., 2])
        w = np.float32(1.0) / (dist + np.float32(1e-8))
        case.extra.update(idx=idx, weight=(w / w.sum(axis=2, keepdims=True)).astype(np.float32),
                          features=g.standard_normal((batches, c, m), dtype=np.float32),
                          grad=g.standard_normal((batches, c, n), dtype=np.float32))
    return case


def conv_triplets(points: np.ndarray, k: int, kernel_size: int):
    """point_conv triplets of a cloud onto itself (int64 tensor [T, 3]): every point's k nearest
    neighbours (itself included) in a kernel_size^3 grid of cells sized by the 90 % quantile of the
    k-th neighbour distance, built by pcops (an input of the benchmark, like the points)."""
    import torch

    import pcops

    x = torch.from_numpy(np.ascontiguousarray(points, np.float32))
    dist, idx = pcops.knn(x[None], x[None], k)
    extent = float(torch.quantile(dist[0, :, -1], 0.9))
    return pcops.point_conv_triplets(x, x, idx[0], extent, kernel_size)


def bfloat16_values(a: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), kept as float32."""
    import torch

    return torch.from_numpy(np.ascontiguousarray(a, np.float32)).bfloat16().float().numpy()


def _make_conv_case(op, cloud, n, order, data_dir, params) -> Case | None:
    """point_conv on one cloud: its triplets (conv_triplets), random float32 features [N, C],
    weights [t^3, C, C] scaled by 1 / sqrt(C k) and an upstream gradient (point_conv_bf16: each
    rounded to bfloat16, so that both sides and the float64 reference see the same values)."""
    p = dict(PARAMS[op])
    if params:
        p.update({k: v for k, v in params.items() if k in p})
    base = make_cloud(cloud, n, data_dir)
    if base is None:
        return None
    pts, desc = base
    pts = np.ascontiguousarray(reorder(pts, order))
    k, t, c = min(int(p["k"]), n), int(p["kernel_size"]), int(p["channels"])
    triplets = conv_triplets(pts, k, t).numpy()
    kernels = t ** 3
    g = np.random.default_rng(SEED + 8)
    p.update(k=k, kernels=kernels, triplets=int(len(triplets)))
    desc += f", {len(triplets)} triplets (kNN {k}, {t}^3 kernel cells), C = {c}"
    values = bfloat16_values if op == "point_conv_bf16" else (lambda a: a)
    if op == "point_conv_bf16":
        desc += ", bfloat16"
    case = Case(op, cloud, order, n, pts, None, p, desc)
    case.extra.update(
        triplets=np.ascontiguousarray(triplets, np.int64),
        features=values(g.uniform(-1, 1, (n, c)).astype(np.float32)),
        weights=values((g.uniform(-1, 1, (kernels, c, c)) / np.sqrt(c * k)).astype(np.float32)),
        grad=values(g.uniform(-1, 1, (n, c)).astype(np.float32)))
    return case
