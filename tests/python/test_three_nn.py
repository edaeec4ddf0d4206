"""pcops.three_nn against the exact oracle (contract: docs/ops/three_nn.md)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import pcops
from conftest import with_threads
from pcops import testing as oracle


def assert_three_nn_equal(unknown, known, unknown_lengths=None, known_lengths=None):
    dist, idx = pcops.three_nn(unknown, known, unknown_lengths, known_lengths)
    odist, oidx = oracle.three_nn(unknown, known, unknown_lengths, known_lengths)
    assert dist.dtype == torch.float32 and idx.dtype == torch.int64
    assert dist.shape == (unknown.shape[0], unknown.shape[1], 3) and idx.shape == dist.shape
    assert torch.equal(idx, oidx), (idx != oidx).nonzero()[:5]
    assert torch.equal(dist, odist), (dist != odist).nonzero()[:5]
    return dist, idx


def test_synthetic_clouds_match_oracle(cloud_factory, cloud_kind):
    known = torch.stack([cloud_factory(cloud_kind, 1200, 1), cloud_factory(cloud_kind, 1200, 2)])
    unknown = torch.stack([cloud_factory(cloud_kind, 300, 3), cloud_factory(cloud_kind, 300, 4)])
    assert_three_nn_equal(unknown, known)


def test_real_clouds_match_oracle(real_cloud):
    known = real_cloud.unsqueeze(0)[:, ::4]
    g = torch.Generator().manual_seed(3)
    unknown = real_cloud.unsqueeze(0) + 1e-3 * torch.randn(known.shape[0], real_cloud.shape[0], 3, generator=g)
    assert_three_nn_equal(unknown, known)


@pytest.mark.parametrize("m", [3, 4, 7, 64])
def test_small_known_clouds(m, gen):
    assert_three_nn_equal(torch.rand(2, 40, 3, generator=gen), torch.rand(2, m, 3, generator=gen))


def test_equal_distances_keep_index_order():
    # mmcv's fixture pattern: the unknown point coincides with known points 0, 3 and 4.
    p = [0.5, -0.25, 1.0]
    known = torch.tensor([[p, [2.0, 2, 2], [1.0, 0, 0], p, p, [0.0, 0, 0]]])
    unknown = torch.tensor([[p]])
    dist, idx = assert_three_nn_equal(unknown, known)
    assert idx[0, 0].tolist() == [0, 3, 4] and (dist == 0).all()
    # Six points at squared distance exactly 1, scrambled: the three lowest indices win.
    unit = torch.tensor([[0, 0, 1], [1, 0, 0], [0, -1, 0], [-1, 0, 0], [0, 1, 0], [0, 0, -1]], dtype=torch.float32)
    known = torch.cat([torch.full((2, 3), 5.0), unit]).unsqueeze(0)
    dist, idx = assert_three_nn_equal(torch.zeros(1, 1, 3), known)
    assert idx[0, 0].tolist() == [2, 3, 4] and (dist == 1).all()


def test_distances_are_euclidean_and_the_knn_result(gen):
    unknown = torch.rand(2, 50, 3, generator=gen)
    known = torch.rand(2, 80, 3, generator=gen)
    dist, idx = pcops.three_nn(unknown, known)
    kd, ki = pcops.knn(unknown, known, 3)
    assert torch.equal(dist, kd) and torch.equal(idx, ki)
    gathered = torch.stack([known[b][idx[b]] for b in range(2)])
    expect = (unknown[:, :, None, :] - gathered).double().norm(dim=-1)
    torch.testing.assert_close(dist.double(), expect, rtol=1e-6, atol=0)
    assert (dist[..., 1:] >= dist[..., :-1]).all()
    d1, _ = pcops.three_nn(torch.zeros(1, 1, 3), torch.tensor([[[1.0, 1.0, 0.0], [3, 0, 0], [0, 3, 0]]]))
    assert d1[0, 0, 0].item() == np.float32(math.sqrt(2.0))  # sqrt(s), correctly rounded


def test_nan_sorts_last_as_inf():
    known = torch.tensor([[[0.0, 0, 0], [float("nan"), 0, 0], [1, 0, 0], [0, 2, 0]]])
    dist, idx = pcops.three_nn(torch.zeros(1, 1, 3), known)
    assert idx[0, 0].tolist() == [0, 2, 3]
    dist, idx = pcops.three_nn(torch.zeros(1, 1, 3), known[:, :3])
    assert idx[0, 0].tolist() == [0, 2, 1] and math.isinf(dist[0, 0, 2].item())


def test_lengths_pad_with_inf_and_minus_one(gen):
    unknown = torch.rand(3, 10, 3, generator=gen)
    known = torch.rand(3, 6, 3, generator=gen)
    kl = torch.tensor([6, 2, 0])
    ul = torch.tensor([10, 10, 4])
    dist, idx = assert_three_nn_equal(unknown, known, ul, kl)
    assert (idx[1, :, 2] == -1).all() and torch.isinf(dist[1, :, 2]).all() and (idx[1, :, :2] >= 0).all()
    assert (idx[2] == -1).all() and torch.isinf(dist[2]).all()
    d32, i32 = pcops.three_nn(unknown, known, ul.int(), kl.int())
    assert torch.equal(i32, idx) and torch.equal(d32, dist)


def test_fewer_than_three_known_points_is_an_error(gen):
    for m in (0, 1, 2):
        with pytest.raises(ValueError, match="known"):
            pcops.three_nn(torch.rand(1, 4, 3, generator=gen), torch.rand(1, m, 3, generator=gen))
    with pytest.raises(ValueError, match="known"):
        pcops.three_nn(torch.rand(1, 4, 3), torch.rand(1, 2, 3), known_lengths=torch.tensor([2]))


def test_empty_inputs():
    dist, idx = pcops.three_nn(torch.rand(0, 5, 3), torch.rand(0, 4, 3))
    assert dist.shape == (0, 5, 3) and idx.shape == (0, 5, 3)
    dist, idx = pcops.three_nn(torch.rand(2, 0, 3), torch.rand(2, 4, 3))
    assert dist.shape == (2, 0, 3)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_inputs(dtype, gen):
    unknown = torch.randn(2, 40, 3, generator=gen).to(dtype)
    known = torch.randn(2, 70, 3, generator=gen).to(dtype)
    dist, idx = assert_three_nn_equal(unknown, known)
    d32, i32 = pcops.three_nn(unknown.float(), known.float())
    assert torch.equal(i32, idx) and torch.equal(d32, dist)


def test_non_contiguous_inputs(gen):
    unknown = torch.rand(2, 3, 30, generator=gen).transpose(1, 2)
    known = torch.rand(4, 50, 3, generator=gen)[::2]
    assert not unknown.is_contiguous() and not known.is_contiguous()
    assert_three_nn_equal(unknown, known)


def test_errors(gen):
    u, k = torch.rand(2, 5, 3), torch.rand(2, 6, 3)
    with pytest.raises(ValueError, match="unknown"):
        pcops.three_nn(torch.rand(5, 3), k)
    with pytest.raises(ValueError, match="known"):
        pcops.three_nn(u, torch.rand(2, 6, 3, 1))
    with pytest.raises(ValueError, match="unknown"):
        pcops.three_nn(torch.rand(2, 5, 2), torch.rand(2, 6, 2))
    with pytest.raises(ValueError, match="known"):
        pcops.three_nn(u, torch.rand(3, 6, 3))
    with pytest.raises(ValueError, match="known_lengths"):
        pcops.three_nn(u, k, known_lengths=torch.tensor([7, 1]))
    for dtype in (torch.float64, torch.int64):
        with pytest.raises(TypeError, match="unknown"):
            pcops.three_nn(u.to(dtype), k)
        with pytest.raises(TypeError, match="known"):
            pcops.three_nn(u, k.to(dtype))


def test_not_differentiable(gen):
    unknown = torch.rand(1, 5, 3, generator=gen, requires_grad=True)
    dist, idx = pcops.three_nn(unknown, torch.rand(1, 9, 3, generator=gen))
    assert not dist.requires_grad and not idx.requires_grad


def test_independent_of_thread_count(gen):
    known = torch.rand(2, 4000, 3, generator=gen)
    unknown = torch.rand(2, 3000, 3, generator=gen)
    one = with_threads(1, lambda: pcops.three_nn(unknown, known))
    two = with_threads(2, lambda: pcops.three_nn(unknown, known))
    assert torch.equal(one[0], two[0]) and torch.equal(one[1], two[1])


@pytest.mark.parametrize("lengths", [False, True])
def test_opcheck(lengths, gen):
    unknown = torch.rand(2, 7, 3, generator=gen).requires_grad_()
    known = torch.rand(2, 11, 3, generator=gen)
    args = (unknown, known, torch.tensor([7, 3]), torch.tensor([11, 2])) if lengths else (unknown, known, None, None)
    torch.library.opcheck(torch.ops.pcops.three_nn.default, args)
