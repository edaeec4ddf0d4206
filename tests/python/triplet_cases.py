"""Inputs of point_conv_triplets shared by the CPU tests (tests/python) and the CUDA tests
(tests/cuda/python)."""

from __future__ import annotations

import torch

import pcops


def cube_cases(gen):
    """(centres, points, neighbours, extent, t) cases for the native constructions (CPU and CUDA):
    kNN and padded ball-query neighbourhoods of a real cloud, offsets exactly on the cells' borders
    and outside the cube, several grids, empty and all-padding inputs."""
    from pcops import data as pdata

    cases = []
    root = next(r for r in pdata._candidates() if (r / "bunny00.off").is_file())
    cloud = pdata.load(root / "bunny00.off")
    pts = torch.from_numpy(pdata.sample_mesh(cloud.points, cloud.faces, 5000, seed=3).astype("float32"))
    _, idx = pcops.knn(pts[None], pts[None], 16)
    for t in (1, 2, 3, 5):
        cases.append((pts, pts, idx[0], 0.01, t))
    centres = pts[::7].contiguous()
    _, bq = pcops.ball_query(centres[None], pts[None], 0.02, 24)
    cases.append((centres, pts, bq[0], 0.02, 3))
    # Offsets on the borders: a grid of points at multiples of the cell side h = 2 * 0.5 / 4.
    grid = torch.stack(torch.meshgrid(*[torch.arange(-4, 5, dtype=torch.float32) * 0.25] * 3, indexing="ij"), -1)
    grid = grid.reshape(-1, 3)
    origin = torch.zeros(1, 3)
    cases.append((origin, grid, torch.arange(grid.shape[0])[None], 0.5, 4))
    cases.append(_reciprocal_case())
    cases.append((torch.rand(4, 3, generator=gen), torch.rand(9, 3, generator=gen) * 40 - 20,
                  torch.randint(-1, 9, (4, 9), generator=gen), 0.7, 3))
    cases.append((torch.zeros(0, 3), pts, torch.zeros(0, 5, dtype=torch.int64), 0.1, 3))
    cases.append((pts[:3], pts, torch.zeros(3, 0, dtype=torch.int64), 0.1, 3))
    cases.append((pts[:3], pts, torch.full((3, 4), -1, dtype=torch.int64), 0.1, 3))
    return cases


def _reciprocal_case():
    """An extent whose cell side fl(fl(2 extent) / 3) is one unit below fl(fl(2 extent) * fl(1/3))
    (what a division by a number becomes in PyTorch's CUDA kernels) and offsets that land exactly
    on the first cell border with the right side: cell 1 per axis there, cell 0 with the other."""
    import numpy as np

    f = np.float32
    for e in np.linspace(0.05, 1.0, 2000, dtype=np.float32):
        h = f(f(2 * e) / f(3))
        d = f(h - e)
        if h != f(f(2 * e) * f(f(1) / f(3))) and f(d + e) == h:
            assert np.floor(f(d + e) / f(f(2 * e) * f(f(1) / f(3)))) == 0  # the other side
            points = torch.tensor([[d, d, d], [d, 0, 0], [0, 0, 0]], dtype=torch.float32)
            return torch.zeros(1, 3), points, torch.arange(3)[None], float(e), 3
    raise AssertionError("no such extent")
