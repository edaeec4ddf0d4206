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
