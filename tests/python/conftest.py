"""Shared fixtures of the pytest suite: seeded generators and point clouds.

Real clouds come from the shared data directory ($PCOPS_DATA_DIR, <repo>/../shared/data/cgal or
<repo>/data/cgal). When none is present the "real" clouds fall back to a synthetic cloud of
varying density, so the tests always run (never a silent skip).
"""

from __future__ import annotations

import contextlib
import os
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

import pcops  # noqa: F401  (loads the operator library)
from pcops.data import load as load_cloud

REPO = Path(__file__).resolve().parents[2]
SEED = 20240607


def data_dir() -> Path | None:
    candidates = []
    env = os.environ.get("PCOPS_DATA_DIR")
    if env:
        candidates.append(Path(env))
    candidates += [REPO.parent / "shared" / "data" / "cgal", REPO / "data" / "cgal"]
    for c in candidates:
        if c.is_dir() and any(c.iterdir()):
            return c
    return None


REAL_FILES = ("kitten.xyz", "bunny00.off", "hippo1.ply")


def synthetic_varying_density(n: int, seed: int) -> np.ndarray:
    """Dense core, sparse halo and a thin sheet: a stand-in for scanned data."""
    rng = np.random.default_rng(seed)
    a = rng.normal(0.0, 0.05, size=(n // 2, 3))
    b = rng.uniform(-1.0, 1.0, size=(n // 4, 3))
    c = np.column_stack([rng.uniform(-1, 1, n - n // 2 - n // 4), rng.uniform(-1, 1, n - n // 2 - n // 4),
                         np.full(n - n // 2 - n // 4, 0.25)])
    return np.concatenate([a, b, c])


def load_real_cloud(name: str, max_points: int = 6000) -> torch.Tensor:
    """A real cloud (float32 [N, 3]) subsampled deterministically, or the synthetic fallback."""
    root = data_dir()
    pts = None
    if root is not None and (root / name).is_file():
        pts = load_cloud(root / name).points
    if pts is None:
        pts = synthetic_varying_density(max_points, seed=zlib.crc32(name.encode()) % 1000)
    if len(pts) > max_points:
        keep = np.random.default_rng(SEED).choice(len(pts), max_points, replace=False)
        pts = pts[np.sort(keep)]  # keep the file's order (scans are often spatially sorted)
    return torch.from_numpy(pts.astype(np.float32))


def degenerate_clouds(gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A tight cluster plus one far outlier, a single repeated point, and a flat plane ([1, 1500, 3])."""
    cluster = torch.rand(1, 1500, 3, generator=gen) * 1e-3
    cluster[0, 777] = torch.tensor([1e6, -1e6, 1e6])
    same = torch.full((1, 1500, 3), 0.25)
    plane = torch.rand(1, 1500, 3, generator=gen)
    plane[..., 2] = 0.5
    return cluster, same, plane


def with_threads(threads: int, fn):
    """fn() with torch's (and so pcops') CPU thread count set to ``threads``, then restored."""
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        return fn()
    finally:
        torch.set_num_threads(before)


def make_cloud(kind: str, n: int, seed: int) -> torch.Tensor:
    """Synthetic float32 [n, 3] clouds covering the interesting geometry."""
    g = torch.Generator().manual_seed(seed)
    if kind == "uniform":
        return torch.rand(n, 3, generator=g) * 2 - 1
    if kind == "sphere":
        p = torch.randn(n, 3, generator=g)
        return p / p.norm(dim=1, keepdim=True)
    if kind == "sorted":
        p = torch.rand(n, 3, generator=g)
        return p[torch.argsort(p[:, 0])]
    if kind == "duplicates":
        base = torch.rand(max(1, n // 4), 3, generator=g)
        return base[torch.randint(0, base.shape[0], (n,), generator=g)]
    if kind == "grid":
        # Small integer coordinates: many exactly equal squared distances (ties by index).
        return torch.randint(-3, 4, (n, 3), generator=g).float()
    if kind == "varying":
        return torch.from_numpy(synthetic_varying_density(n, seed).astype(np.float32))
    raise ValueError(kind)


CLOUD_KINDS = ("uniform", "sphere", "sorted", "duplicates", "grid", "varying")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(SEED)


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(SEED)


@pytest.fixture(params=CLOUD_KINDS)
def cloud_kind(request) -> str:
    return request.param


@pytest.fixture(params=REAL_FILES)
def real_cloud(request) -> torch.Tensor:
    return load_real_cloud(request.param)


@pytest.fixture(scope="session")
def real_data_dir() -> Path | None:
    return data_dir()


@pytest.fixture
def cloud_factory():
    """make_cloud(kind, n, seed) -> float32 [n, 3]."""
    return make_cloud


@pytest.fixture
def real_cloud_factory():
    """load_real_cloud(name, max_points) -> float32 [N, 3] (synthetic fallback without data)."""
    return load_real_cloud


@contextlib.contextmanager
def isolated_modules(*packages: str):
    """No stand-in installed and none of ``packages`` (and their submodules) in sys.modules while
    the block runs; afterwards sys.modules holds exactly the entries of those packages it held
    before (whatever the block added, a stand-in or a fake real package, is removed)."""
    import importlib
    import sys

    import pcops.compat as compat

    def ours(key: str) -> bool:
        return key.split(".")[0] in packages

    compat.uninstall()
    saved = {k: m for k, m in sys.modules.items() if ours(k)}
    for key in saved:
        del sys.modules[key]
    importlib.invalidate_caches()
    try:
        yield
    finally:
        compat.uninstall()
        for key in [k for k in sys.modules if ours(k)]:
            del sys.modules[key]
        sys.modules.update(saved)
        importlib.invalidate_caches()
