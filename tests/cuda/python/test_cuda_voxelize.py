"""pcops.voxelize / voxel_downsample on CUDA tensors: every output equal to the CPU's (float32 and
float64, batches, start / end windows, dropped and non-finite points), gradients of the
downsampled means, and a real scan."""

from __future__ import annotations

import pytest
import torch

import pcops
from conftest import load_real_cloud, same_bits  # this directory's conftest

CUDA = torch.device("cuda")


def _same(a, b):
    for x, y in zip(a, b):
        if x is None or y is None:
            assert x is None and y is None
            continue
        assert y.device.type == "cuda"
        assert same_bits(x, y.cpu())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_voxelize_equals_cpu(gen, dtype):
    p = (torch.rand(30000, 3, generator=gen, dtype=torch.float64) * 4 - 1).to(dtype)
    p[5, 1] = float("nan")
    p[77, 0] = float("inf")
    ptr = torch.tensor([0, 0, 9000, 20000, 30000])
    for kw in (dict(), dict(ptr=ptr), dict(start=-0.5, end=2.0), dict(ptr=ptr, start=[-1.0, 0.0, 0.5])):
        for size in (0.05, [0.1, 0.2, 0.3], 10.0):
            want = pcops.voxelize(p, size, **kw)
            kwg = {k: (v.to(CUDA) if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
            got = pcops.voxelize(p.to(CUDA), size, **kwg)
            _same(want, got)


def test_voxel_downsample_equals_cpu_with_gradients(gen):
    p = torch.rand(20000, 3, generator=gen)
    f = torch.rand(20000, 8, generator=gen)
    for reduce in ("mean", "sum"):
        pc, fc = p.clone().requires_grad_(), f.clone().requires_grad_()
        pg, fg = p.to(CUDA).requires_grad_(), f.to(CUDA).requires_grad_()
        want = pcops.voxel_downsample(pc, 0.05, fc, reduce=reduce)
        got = pcops.voxel_downsample(pg, 0.05, fg, reduce=reduce)
        _same(want, got)
        (want.points.sum() + want.features.sum()).backward()
        (got.points.sum() + got.features.sum()).backward()
        assert same_bits(pc.grad, pg.grad.cpu()) and same_bits(fc.grad, fg.grad.cpu())


def test_real_scan():
    p = load_real_cloud("building.ply", 100_000)
    _same(pcops.voxelize(p, 0.02), pcops.voxelize(p.to(CUDA), 0.02))


def test_voxelize_long_runs_tiny_voxels_and_key_widths(gen):
    """One voxel holding every point, long runs of one cell, many tiny voxels, batches, cell
    ranges whose packed key needs 32, 64 or more than 64 bits (the per-dimension passes)."""
    p = torch.rand(50000, 3, generator=gen, dtype=torch.float64)
    p[:20000] = 0.5
    p[30000::7] = 0.5
    ptr = torch.tensor([0, 15000, 15000, 40000, 50000])
    cases = [(p, 100.0, {}), (p, 100.0, dict(start=0.0, end=0.6)), (p, 0.005, {}), (p, 0.005, dict(ptr=ptr)),
             (p.float(), 1e-5, dict(ptr=ptr)), (p * 2000 - 1000, 0.01, dict(ptr=ptr)),
             (p * 2e6 - 1e6, 1e-3, dict(ptr=ptr)), (p * 2e6 - 1e6, 1e-3, dict(start=-5e5, end=5e5))]
    for pts, size, kw in cases:
        want = pcops.voxelize(pts, size, **kw)
        kwg = {k: (v.to(CUDA) if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
        _same(want, pcops.voxelize(pts.to(CUDA), size, **kwg))


def test_voxelize_grid_parameters_as_host_tensors(gen):
    p = torch.rand(5000, 3, generator=gen)
    want = pcops.voxelize(p, torch.tensor([0.05, 0.1, 0.2]), start=torch.tensor(-0.1))
    _same(want, pcops.voxelize(p.to(CUDA), torch.tensor([0.05, 0.1, 0.2]), start=torch.tensor(-0.1)))
    _same(want, pcops.voxelize(p.to(CUDA), torch.tensor([0.05, 0.1, 0.2], device=CUDA), start=-0.1))


def test_voxel_downsample_features_of_another_dtype(gen):
    p = torch.rand(20000, 3, generator=gen)
    f = torch.rand(20000, 4, generator=gen, dtype=torch.float64)
    want = pcops.voxel_downsample(p, 0.05, f, start=0.1, end=0.9)
    _same(want, pcops.voxel_downsample(p.to(CUDA), 0.05, f.to(CUDA), start=0.1, end=0.9))
