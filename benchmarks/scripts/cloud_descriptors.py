#!/usr/bin/env python3
"""Real point-cloud descriptors for the IVF-PQ benchmarks: a 32-d local shape histogram of every
point of the project's real clouds (meshes sampled on their faces), written as one float32
[n, 32] .npy file.

Per point, from its k nearest neighbours (pcops.knn, the point itself excluded): a local frame
from the neighbourhood's covariance (the normal is the eigenvector of the smallest eigenvalue),
then three normalised histograms of the neighbours, scaled by the neighbourhood radius:
  - 16 bins: distance in the tangent plane (4) x height along the normal (4, signed);
  - 8 bins: |cos| of the angle between the neighbour's normal and the point's;
  - 8 bins: distance to the point.
Rotation invariant: the normal's sign is chosen so that the neighbours' mean height is >= 0.

    python benchmarks/scripts/cloud_descriptors.py --out data/cloud_desc.npy [--mesh-points 200000]
    python benchmarks/scripts/ivfpq_probe.py --vectors data/cloud_desc.npy --M 16 --nlist 1024
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

import pcops
from pcops import data as pdata


def frames(nbr: np.ndarray) -> np.ndarray:
    """Normals [n, 3] of neighbourhoods nbr [n, k, 3] (relative coordinates)."""
    cov = np.einsum("nki,nkj->nij", nbr, nbr) / nbr.shape[1]
    _, vecs = np.linalg.eigh(cov.astype(np.float64))
    return vecs[:, :, 0].astype(np.float32)  # eigenvalues ascending: the normal first


def histogram(values: np.ndarray, bins: int) -> np.ndarray:
    """Rows of values in [0, 1] -> normalised histograms [n, bins]."""
    b = np.clip((values * bins).astype(np.int64), 0, bins - 1)
    rows = np.repeat(np.arange(values.shape[0]), values.shape[1])
    out = np.bincount(rows * bins + b.ravel(), minlength=values.shape[0] * bins).reshape(-1, bins)
    return out.astype(np.float32) / values.shape[1]


def describe(points: np.ndarray, k: int) -> np.ndarray:
    p = torch.from_numpy(np.ascontiguousarray(points, dtype=np.float32))
    _, idx = pcops.knn(p[None], p[None], k + 1)
    idx = idx[0, :, 1:].numpy()  # drop the point itself
    rel = points[idx] - points[:, None, :]
    radius = np.linalg.norm(rel, axis=2).max(axis=1) + 1e-12
    normal = frames(rel)
    height = np.einsum("nki,ni->nk", rel, normal)
    flip = np.where(height.mean(axis=1) < 0, -1.0, 1.0).astype(np.float32)
    height *= flip[:, None]
    planar = np.sqrt(np.maximum((rel ** 2).sum(axis=2) - height ** 2, 0.0))
    r = radius[:, None]
    hb = np.clip(((height / r + 1) * 2).astype(np.int64), 0, 3)  # signed height: 4 bins
    pb = np.clip((planar / r * 4).astype(np.int64), 0, 3)
    joint = histogram((pb * 4 + hb).astype(np.float32) / 16 + 1e-6, 16)
    cos = np.abs(np.einsum("nki,ni->nk", normal[idx], normal))
    dist = np.linalg.norm(rel, axis=2) / r
    return np.concatenate([joint, histogram(cos, 8), histogram(dist, 8)], axis=1).astype(np.float32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None, help="the real clouds' directory (default: found as the tests do)")
    ap.add_argument("--out", default="data/cloud_desc.npy")
    ap.add_argument("--mesh-points", type=int, default=200_000, help="points sampled on each mesh's faces")
    ap.add_argument("--k", type=int, default=32)
    args = ap.parse_args()
    d = pdata.data_dir(args.data)
    if d is None:
        raise SystemExit("no real clouds found (see pcops.data.ensure_data)")
    parts = []
    for path in pdata.list_clouds(d):
        cloud = pdata.load(path)
        pts = cloud.points
        if cloud.faces is not None and len(cloud.faces):
            pts = pdata.sample_mesh(cloud.points, cloud.faces, args.mesh_points, seed=0)
        pts = np.asarray(pts, dtype=np.float32)
        pts = pts[np.isfinite(pts).all(axis=1)]
        pts = (pts - pts.mean(axis=0)) / (np.linalg.norm(pts.max(axis=0) - pts.min(axis=0)) + 1e-12)
        desc = describe(pts, args.k)
        print(f"{path.name}: {len(desc)} descriptors")
        parts.append(desc)
    out = np.concatenate(parts)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    np.save(args.out, out)
    print(f"wrote {args.out}: {out.shape}")


if __name__ == "__main__":
    main()
