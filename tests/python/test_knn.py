"""pcops.knn against the exact oracle (contract: docs/ops/knn.md)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import pcops
from conftest import degenerate_clouds, with_threads
from pcops import testing as oracle


def assert_knn_equal(query, ref, k, query_lengths=None, ref_lengths=None):
    dist, idx = pcops.knn(query, ref, k, query_lengths, ref_lengths)
    odist, oidx = oracle.knn(query, ref, k, query_lengths, ref_lengths)
    assert dist.dtype == torch.float32 and idx.dtype == torch.int64
    assert dist.shape == odist.shape and idx.shape == oidx.shape
    assert torch.equal(idx, oidx), (idx != oidx).nonzero()[:5]
    # Bitwise: same float32 values (NaN never appears in a valid result; see test_nan).
    assert torch.equal(dist, odist), (dist != odist).nonzero()[:5]
    return dist, idx


@pytest.mark.parametrize("k", [1, 5, 16])
def test_synthetic_clouds_match_oracle(cloud_factory, cloud_kind, k):
    # 1200 references and 150 queries: large enough for the accelerated (grid) paths.
    ref = torch.stack([cloud_factory(cloud_kind, 1200, 1), cloud_factory(cloud_kind, 1200, 2)])
    query = torch.stack([cloud_factory(cloud_kind, 150, 3), cloud_factory(cloud_kind, 150, 4)])
    assert_knn_equal(query, ref, k)
    # Self-query: every point finds itself (distance 0) unless an earlier duplicate wins the tie.
    dist, idx = assert_knn_equal(ref, ref, k)
    assert (dist[..., 0] == 0).all()


def test_real_clouds_match_oracle(real_cloud):
    ref = real_cloud.unsqueeze(0)
    g = torch.Generator().manual_seed(7)
    query = ref[:, torch.randperm(ref.shape[1], generator=g)[:300]]
    query = query + 1e-3 * torch.randn(query.shape, generator=g)
    assert_knn_equal(query, ref, 16)


@pytest.mark.parametrize("dim", [1, 2, 5, 8])
def test_other_dimensions(dim, gen):
    query = torch.rand(2, 60, dim, generator=gen)
    ref = torch.rand(2, 90, dim, generator=gen)
    assert_knn_equal(query, ref, 7)


@pytest.mark.parametrize("k", [1, 31, 32, 33, 64, 127, 128, 129, 256])
def test_k_at_tile_boundaries(k, gen):
    ref = torch.rand(1, 300, 3, generator=gen)
    query = torch.rand(1, 20, 3, generator=gen)
    assert_knn_equal(query, ref, k)


def test_k_zero(gen):
    dist, idx = pcops.knn(torch.rand(2, 5, 3, generator=gen), torch.rand(2, 6, 3, generator=gen), 0)
    assert dist.shape == (2, 5, 0) and idx.shape == (2, 5, 0)


def test_k_equals_n_is_a_full_sort(gen):
    query = torch.rand(2, 10, 3, generator=gen)
    ref = torch.rand(2, 33, 3, generator=gen)
    dist, idx = assert_knn_equal(query, ref, 33)
    assert torch.equal(idx.sort(dim=-1).values, torch.arange(33).expand(2, 10, 33))
    assert (dist[..., 1:] >= dist[..., :-1]).all()


def test_k_greater_than_n_without_lengths_is_an_error(gen):
    with pytest.raises(ValueError, match="k"):
        pcops.knn(torch.rand(1, 4, 3, generator=gen), torch.rand(1, 3, 3, generator=gen), 4)


def test_k_greater_than_n_with_lengths_pads(gen):
    query = torch.rand(2, 6, 3, generator=gen)
    ref = torch.rand(2, 5, 3, generator=gen)
    lengths = torch.tensor([5, 2])
    dist, idx = assert_knn_equal(query, ref, 8, ref_lengths=lengths)
    assert (idx[0, :, 5:] == -1).all() and torch.isinf(dist[0, :, 5:]).all()
    assert (idx[1, :, 2:] == -1).all() and torch.isinf(dist[1, :, 2:]).all()
    assert (idx[1, :, :2] >= 0).all() and (idx[1, :, :2] < 2).all()


def test_query_and_ref_lengths(gen):
    query = torch.rand(3, 12, 3, generator=gen)
    ref = torch.rand(3, 20, 3, generator=gen)
    ql = torch.tensor([12, 0, 5])
    rl = torch.tensor([7, 20, 0])
    dist, idx = assert_knn_equal(query, ref, 4, ql, rl)
    assert (idx[1] == -1).all() and (idx[0] < 7).all() and (idx[2] == -1).all()
    # int32 lengths are accepted and mean the same.
    d32, i32 = pcops.knn(query, ref, 4, ql.int(), rl.int())
    assert torch.equal(i32, idx) and torch.equal(d32, dist)


def test_empty_batch_and_empty_clouds():
    dist, idx = pcops.knn(torch.rand(0, 5, 3), torch.rand(0, 7, 3), 3)
    assert dist.shape == (0, 5, 3) and idx.shape == (0, 5, 3)
    dist, idx = pcops.knn(torch.rand(2, 0, 3), torch.rand(2, 7, 3), 3)
    assert dist.shape == (2, 0, 3)
    dist, idx = pcops.knn(torch.rand(2, 4, 3), torch.rand(2, 0, 3), 0)
    assert dist.shape == (2, 4, 0)
    with pytest.raises(ValueError, match="k"):
        pcops.knn(torch.rand(2, 4, 3), torch.rand(2, 0, 3), 1)
    dist, idx = pcops.knn(torch.rand(2, 4, 3), torch.rand(2, 0, 3), 2, ref_lengths=torch.tensor([0, 0]))
    assert (idx == -1).all() and torch.isinf(dist).all()


def test_exact_ties_are_broken_by_index():
    # Reference points at the 6 axis neighbours of the origin, listed in a scrambled order,
    # and copies: all 12 at squared distance exactly 1.
    unit = torch.tensor(
        [[0, 0, 1], [1, 0, 0], [0, -1, 0], [-1, 0, 0], [0, 1, 0], [0, 0, -1]], dtype=torch.float32
    )
    ref = torch.cat([torch.full((1, 3), 5.0), unit, unit]).unsqueeze(0)
    query = torch.zeros(1, 1, 3)
    dist, idx = assert_knn_equal(query, ref, 12)
    assert idx[0, 0].tolist() == list(range(1, 13))
    assert (dist[0, 0] == 1).all()


def test_duplicates_rank_by_index(gen):
    base = torch.rand(1, 8, 3, generator=gen)
    ref = torch.cat([base, base, base], dim=1)  # point j, j+8, j+16 coincide
    dist, idx = assert_knn_equal(base, ref, 3)
    assert torch.equal(idx[0], torch.arange(8)[:, None] + torch.tensor([0, 8, 16]))
    assert (dist == 0).all()


def test_ordering_not_from_matmul_identity():
    # Near-duplicate far-from-origin points: the |q|^2+|x|^2-2q.x identity cannot separate these,
    # the contract's difference-first arithmetic can.
    base = torch.tensor([1000.0, 1000.0, 1000.0])
    offsets = torch.tensor([[3, 0, 0], [1, 0, 0], [2, 0, 0], [0, 0, 0]], dtype=torch.float32) * 2**-13
    ref = (base + offsets).unsqueeze(0)
    query = base.reshape(1, 1, 3)
    dist, idx = assert_knn_equal(query, ref, 4)
    assert idx[0, 0].tolist() == [3, 1, 2, 0]


def test_nan_coordinates_sort_last():
    ref = torch.tensor([[[0.0, 0, 0], [float("nan"), 0, 0], [1, 0, 0], [0, 2, 0], [0, 0, float("nan")]]])
    query = torch.tensor([[[0.1, 0, 0], [float("nan"), 0, 0]]])
    dist, idx = pcops.knn(query, ref, 5)
    odist, oidx = oracle.knn(query, ref, 5)
    assert torch.equal(idx, oidx)
    assert idx[0, 0].tolist() == [0, 2, 3, 1, 4]
    assert idx[0, 1].tolist() == [0, 1, 2, 3, 4]  # every s is NaN: index order
    finite = torch.isfinite(odist)
    assert torch.equal(dist[finite], odist[finite])
    # A NaN candidate ranks as +inf; its distance is reported as +inf or NaN, never finite.
    assert not torch.isfinite(dist[~finite]).any()


def test_infinite_and_huge_coordinates():
    big = 3e38
    ref = torch.tensor([[[big, 0, 0], [float("inf"), 0, 0], [1e20, 0, 0], [0, 0, 0], [-1e19, 1e19, 0]]])
    query = torch.tensor([[[0.0, 0, 0], [-big, 0, 0]]])
    dist, idx = pcops.knn(query, ref, 5)
    odist, oidx = oracle.knn(query, ref, 5)
    assert torch.equal(idx, oidx)
    finite = ~torch.isnan(odist)
    assert torch.equal(dist[finite], odist[finite])
    # Overflowed squared distances (+inf) are ranked by index, not dropped.
    # Query 0: s = inf, inf, inf (1e40 overflows), 0, 2e38: the overflows keep index order.
    assert idx[0, 0].tolist() == [3, 4, 0, 1, 2]
    assert torch.isinf(dist[0, 0, 2:]).all()
    # Query 1 at -3e38: every s overflows, so pure index order.
    assert idx[0, 1].tolist() == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_inputs(dtype, gen):
    query = torch.randn(2, 40, 3, generator=gen).to(dtype)
    ref = torch.randn(2, 100, 3, generator=gen).to(dtype)
    dist, idx = assert_knn_equal(query, ref, 10)
    assert dist.dtype == torch.float32
    # The conversion is exact: the same as passing the float32 copy.
    d32, i32 = pcops.knn(query.float(), ref.float(), 10)
    assert torch.equal(i32, idx) and torch.equal(d32, dist)


def test_mixed_half_and_float_inputs(gen):
    query = torch.randn(1, 30, 3, generator=gen)
    ref = torch.randn(1, 50, 3, generator=gen).half()
    assert_knn_equal(query, ref, 5)


def test_non_contiguous_inputs(gen):
    base_q = torch.rand(3, 3, 40, generator=gen)
    base_r = torch.rand(60, 3, 6, generator=gen)
    query = base_q.transpose(1, 2)[::2]  # [2, 40, 3], strided
    ref = base_r.permute(2, 0, 1)[1::3]  # [2, 60, 3]
    assert not query.is_contiguous() and not ref.is_contiguous()
    dist, idx = assert_knn_equal(query, ref, 9)
    d2, i2 = pcops.knn(query.contiguous(), ref.contiguous(), 9)
    assert torch.equal(idx, i2) and torch.equal(dist, d2)
    # Expanded (stride 0) batch.
    one = torch.rand(1, 20, 3, generator=gen)
    assert_knn_equal(one.expand(3, 20, 3), torch.rand(3, 25, 3, generator=gen), 4)


def test_distances_are_euclidean_and_sorted(gen):
    query = torch.rand(1, 50, 3, generator=gen)
    ref = torch.rand(1, 80, 3, generator=gen)
    dist, idx = pcops.knn(query, ref, 6)
    gathered = ref[0][idx[0]]
    expect = (query[0, :, None, :] - gathered).double().norm(dim=-1)
    assert torch.allclose(dist[0].double(), expect, rtol=1e-6, atol=0)
    assert (dist[..., 1:] >= dist[..., :-1]).all()


def test_outputs_do_not_require_grad(gen):
    query = torch.rand(1, 5, 3, generator=gen, requires_grad=True)
    dist, idx = pcops.knn(query, torch.rand(1, 9, 3, generator=gen), 3)
    assert not dist.requires_grad and not idx.requires_grad


def test_sqrt_is_correctly_rounded():
    # s = 2 exactly: the returned distance is fl32(sqrt(2)).
    dist, _ = pcops.knn(torch.zeros(1, 1, 3), torch.tensor([[[1.0, 1.0, 0.0]]]), 1)
    assert dist.item() == np.float32(math.sqrt(2.0))


# ------------------------------------------------ adversarial inputs on large clouds


def _assert_knn_indices_and_finite_dists(query, ref, k, **kw):
    dist, idx = pcops.knn(query, ref, k, **kw)
    odist, oidx = oracle.knn(query, ref, k, **kw)
    assert torch.equal(idx, oidx), (idx != oidx).nonzero()[:5]
    finite = torch.isfinite(odist)
    assert torch.equal(dist[finite], odist[finite])
    assert not torch.isfinite(dist[~finite]).any()


@pytest.mark.parametrize("scale", [1e-30, 1e-20, 1e-6, 1e18, 3e37])
def test_large_clouds_at_extreme_scales(scale, gen):
    # Underflow to 0 or subnormal squared distances (many exact ties) and overflow to +inf.
    ref = (torch.rand(2, 1500, 3, generator=gen) * 2 - 1) * scale
    query = (torch.rand(2, 64, 3, generator=gen) * 2 - 1) * scale
    _assert_knn_indices_and_finite_dists(query, ref, 8)


def test_large_cloud_with_non_finite_points(gen):
    ref = torch.rand(2, 1500, 3, generator=gen)
    ref[0, ::97] = float("nan")
    ref[1, ::89, 1] = float("inf")
    ref[1, 5::101, 2] = -float("inf")
    query = torch.rand(2, 64, 3, generator=gen)
    query[0, ::9, 0] = float("nan")
    query[1, ::7, 2] = float("inf")
    _assert_knn_indices_and_finite_dists(query, ref, 12)
    _assert_knn_indices_and_finite_dists(query, ref, 12, ref_lengths=torch.tensor([1000, 700]))


def test_large_degenerate_clouds(gen):
    cluster, same, plane = degenerate_clouds(gen)
    for ref in (cluster, same, plane):
        query = torch.cat([ref[:, ::25], torch.rand(1, 20, 3, generator=gen)], dim=1)
        _assert_knn_indices_and_finite_dists(query, ref, 16)


def test_independent_of_thread_count(gen):
    ref = torch.rand(3, 3000, 3, generator=gen)
    query = torch.rand(3, 700, 3, generator=gen)
    one = with_threads(1, lambda: pcops.knn(query, ref, 16))
    two = with_threads(2, lambda: pcops.knn(query, ref, 16))
    assert torch.equal(one[0], two[0]) and torch.equal(one[1], two[1])
