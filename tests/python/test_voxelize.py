"""pcops.voxelize / voxel_downsample against torch.unique oracles, on synthetic and real clouds."""

from __future__ import annotations

import pytest
import torch

import pcops
from conftest import with_threads


def unique_oracle(points, size, batch=None, start=None):
    s = torch.zeros(points.shape[1], dtype=points.dtype) if start is None else torch.as_tensor(start, dtype=points.dtype)
    cells = torch.floor((points - s) / torch.as_tensor(size, dtype=points.dtype)).long()
    b = torch.zeros(len(points), dtype=torch.long) if batch is None else batch
    keys = torch.cat([b[:, None], cells], 1)
    uniq, inverse, counts = torch.unique(keys, dim=0, return_inverse=True, return_counts=True)
    return uniq, inverse, counts


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_matches_unique(real_cloud, dtype):
    pts = real_cloud.to(dtype)
    size = (pts.max(0).values - pts.min(0).values).max() / 20
    batch = torch.repeat_interleave(torch.arange(3), torch.tensor([1000, 0, len(pts) - 1000]))
    vox = pcops.voxelize(pts, float(size), batch=batch)
    uniq, inverse, counts = unique_oracle(pts, float(size), batch)
    assert torch.equal(vox.batch, uniq[:, 0]) and torch.equal(vox.coords, uniq[:, 1:])
    assert torch.equal(vox.inverse, inverse) and torch.equal(vox.counts, counts)
    assert torch.equal(vox.ptr, torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)]))
    # Stable order: perm sorted by (voxel, index).
    assert torch.equal(vox.perm, torch.argsort(inverse, stable=True))


def test_drop_and_range():
    pts = torch.tensor([[0.1, 0.1], [float("nan"), 0.0], [2.0, 2.0], [-0.5, 0.2], [1.0, 1.0]])
    vox = pcops.voxelize(pts, 1.0, start=[-1.0, -1.0], end=[1.0, 1.0])
    assert vox.inverse.tolist() == [1, -1, -1, 0, 2]
    assert vox.perm.tolist() == [3, 0, 4, 1, 2] and vox.ptr.tolist() == [0, 1, 2, 3]
    assert vox.coords.tolist() == [[0, 1], [1, 1], [2, 2]]


def test_downsample_mean_and_gradients(gen):
    pts = torch.rand(500, 3, generator=gen, dtype=torch.float64)
    feats = torch.rand(500, 4, generator=gen, dtype=torch.float64)
    out = pcops.voxel_downsample(pts, 0.25, features=feats)
    _, inverse, counts = unique_oracle(pts, 0.25)
    ref = torch.zeros(len(counts), 3, dtype=torch.float64).index_add_(0, inverse, pts) / counts[:, None]
    torch.testing.assert_close(out.points, ref)
    assert out.features.shape == (len(counts), 4)
    p = pts.clone().requires_grad_()
    f = feats.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: pcops.voxel_downsample(a, 0.25, features=b)[:2], (p, f))
    s = pcops.voxel_downsample(pts, 0.25, reduce="sum")
    torch.testing.assert_close(s.points, ref * counts[:, None])


def test_deterministic_across_threads(gen):
    pts = torch.rand(200_000, 3, generator=gen) * 10
    a = with_threads(1, lambda: pcops.voxel_downsample(pts, 0.1))
    b = with_threads(2, lambda: pcops.voxel_downsample(pts, 0.1))
    assert torch.equal(a.points, b.points) and torch.equal(a.inverse, b.inverse)


def test_errors():
    pts = torch.rand(10, 3)
    with pytest.raises(ValueError):
        pcops.voxelize(pts, 0.0)
    with pytest.raises(ValueError):
        pcops.voxelize(pts, [0.1, 0.1])
    with pytest.raises(ValueError):
        pcops.voxelize(pts, 0.1, batch=torch.tensor([1, 0] * 5))
    with pytest.raises(ValueError):
        pcops.voxelize(torch.tensor([[3e38, 0.0, 0.0]]), 1e-30)
    with pytest.raises(TypeError):
        pcops.voxelize(pts, 0.1, batch=torch.zeros(10))
    empty = pcops.voxelize(torch.empty(0, 3), 0.1)
    assert empty.coords.shape == (0, 3) and empty.ptr.tolist() == [0]
