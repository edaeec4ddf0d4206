"""Shared fixtures of the pytest suite: seeded generators and point clouds.

Real clouds come from the shared data directory ($PCOPS_DATA_DIR, <repo>/../shared/data/cgal or
<repo>/data/cgal). When none is present the "real" clouds fall back to a synthetic cloud of
varying density, so the tests always run (never a silent skip).
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

import pcops  # noqa: F401  (loads the operator library)

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


def _read_xyz(path: Path) -> np.ndarray:
    return np.loadtxt(path, dtype=np.float64, usecols=(0, 1, 2), ndmin=2)


def _read_off(path: Path) -> np.ndarray:
    with open(path) as f:
        tokens = []
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            tokens.append(line)
            if len(tokens) == 2:
                break
        header = tokens[0]
        counts = tokens[1] if header.strip() == "OFF" else header[3:]
        n = int(counts.split()[0])
        rows = []
        for line in f:
            fields = line.split()
            if fields:
                rows.append([float(v) for v in fields[:3]])
                if len(rows) == n:
                    break
    return np.asarray(rows, dtype=np.float64).reshape(-1, 3)


def _read_ascii_ply(path: Path) -> np.ndarray:
    with open(path, "rb") as f:
        n = None
        while True:
            line = f.readline().decode("ascii", "replace").strip()
            if line.startswith("format") and "ascii" not in line:
                raise ValueError("binary ply")
            if line.startswith("element vertex"):
                n = int(line.split()[-1])
            if line == "end_header":
                break
        return np.loadtxt(f, dtype=np.float64, usecols=(0, 1, 2), max_rows=n, ndmin=2)


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
        path = root / name
        if path.suffix == ".xyz":
            pts = _read_xyz(path)
        elif path.suffix == ".off":
            pts = _read_off(path)
        elif path.suffix == ".ply":
            try:
                pts = _read_ascii_ply(path)
            except ValueError:
                pts = None
    if pts is None:
        pts = synthetic_varying_density(max_points, seed=zlib.crc32(name.encode()) % 1000)
    if len(pts) > max_points:
        keep = np.random.default_rng(SEED).choice(len(pts), max_points, replace=False)
        pts = pts[np.sort(keep)]  # keep the file's order (scans are often spatially sorted)
    return torch.from_numpy(pts.astype(np.float32))


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
