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

OPS = ("fps", "knn", "ball_query", "knn_graph")
ORDERS = ("random", "morton")
CLOUDS = ("sphere", "scan", "mesh")
SIZES = (20_000, 100_000, 1_000_000)
GRAPH_SIZES = (100_000, 1_000_000)

# Operator parameters (DESIGN.md section 7).
PARAMS = {
    "fps": {"num_samples": 1024, "start_index": 0},
    "knn": {"num_queries": 1024, "k": 128},
    "ball_query": {"num_queries": 1024, "K": 64, "radius": 0.1},
    "knn_graph": {"k": 16},
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

    @property
    def key(self) -> str:
        return f"{self.op}/{self.cloud}/{format_size(self.n)}/{self.order}"

    @property
    def query(self) -> np.ndarray:
        return self.points if self.query_index is None else self.points[self.query_index]


def make_case(op: str, cloud: str, n: int, order: str, data_dir=None, params=None) -> Case | None:
    base = make_cloud(cloud, n, data_dir)
    if base is None:
        return None
    pts, desc = base
    pts = np.ascontiguousarray(reorder(pts, order))
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
