"""pcops.ball_query against the exact oracle, radius boundaries and gradients
(contract: docs/ops/ball_query.md)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pcops
from conftest import degenerate_clouds, with_threads
from pcops import testing as oracle


def assert_ball_equal(query, ref, radius, K, query_lengths=None, ref_lengths=None):
    dist2, idx = pcops.ball_query(query, ref, radius, K, query_lengths, ref_lengths)
    odist2, oidx = oracle.ball_query(query, ref, radius, K, query_lengths, ref_lengths)
    assert dist2.dtype == torch.float32 and idx.dtype == torch.int64
    assert dist2.shape == odist2.shape
    assert torch.equal(idx, oidx), (idx != oidx).nonzero()[:5]
    assert torch.equal(dist2, odist2), (dist2 != odist2).nonzero()[:5]
    return dist2, idx


def f32(x) -> np.float32:
    return np.float32(x)


@pytest.mark.parametrize("radius,K", [(0.1, 8), (0.3, 32), (0.7, 5)])
def test_synthetic_clouds_match_oracle(cloud_factory, cloud_kind, radius, K):
    # 800 references and 200 queries: large enough for the accelerated (grid) paths.
    ref = torch.stack([cloud_factory(cloud_kind, 800, 11), cloud_factory(cloud_kind, 800, 12)])
    query = ref[:, ::4]
    dist2, idx = assert_ball_equal(query, ref, radius, K)
    if cloud_kind != "grid":
        assert (idx >= 0).any()  # the radii are meaningful for these clouds


def test_real_clouds_match_oracle(real_cloud):
    ref = real_cloud.unsqueeze(0)
    extent = (ref.max(1).values - ref.min(1).values).max().item()
    query = ref[:, ::20]
    assert_ball_equal(query, ref, 0.03 * extent, 16)
    assert_ball_equal(query, ref, 0.2 * extent, 64)


@pytest.mark.parametrize("K", [1, 31, 32, 33, 64, 127, 128, 129, 256])
def test_K_at_tile_boundaries(K, gen):
    ref = torch.rand(2, 400, 3, generator=gen)
    query = torch.rand(2, 12, 3, generator=gen)
    dist2, idx = assert_ball_equal(query, ref, 0.8, K)
    counts = (idx >= 0).sum(-1)
    assert (counts == K).any() or K > 256  # some query fills all K slots


def test_first_K_in_reference_order_not_nearest():
    query = torch.zeros(1, 1, 3)
    ref = torch.tensor([[[0.9, 0, 0], [5, 0, 0], [0.8, 0, 0], [0.1, 0, 0], [0, 0.05, 0]]])
    dist2, idx = assert_ball_equal(query, ref, 1.0, 2)
    assert idx[0, 0].tolist() == [0, 2]  # not the nearest (3, 4)
    dist2, idx = assert_ball_equal(query, ref, 1.0, 6)
    assert idx[0, 0].tolist() == [0, 2, 3, 4, -1, -1]
    assert dist2[0, 0, 4:].tolist() == [0.0, 0.0]


def _boundary_points(qx: float, radius: float):
    """x coordinates near qx + r whose s is just below, equal to and just above R2."""
    r2 = oracle.ball_query_threshold(radius)
    x0 = f32(f32(qx) + f32(radius))
    cands = [x0]
    up = down = x0
    for _ in range(64):
        up = np.nextafter(up, f32(np.inf))
        down = np.nextafter(down, f32(-np.inf))
        cands += [up, down]
    cands = np.array(cands, dtype=np.float32)
    d = cands - f32(qx)
    s = d * d
    below = cands[s < r2][np.argmax(s[s < r2])]
    above = cands[s > r2][np.argmin(s[s > r2])]
    equal = cands[s == r2]
    return r2, below, (equal[0] if equal.size else None), above


@pytest.mark.parametrize("radius", [0.1, 0.25, 1.0, 1.7, 3e-3, 123.456])
@pytest.mark.parametrize("qx", [0.0, 0.3, -2.5])
def test_radius_boundary(radius, qx):
    r2, below, equal, above = _boundary_points(qx, radius)
    xs = [below, above] + ([equal] if equal is not None else [])
    ref = torch.tensor([[[float(x), 0.0, 0.0] for x in xs]], dtype=torch.float32)
    query = torch.tensor([[[qx, 0.0, 0.0]]], dtype=torch.float32)
    dist2, idx = assert_ball_equal(query, ref, radius, 4)
    assert idx[0, 0].tolist() == [0, -1, -1, -1]  # just inside matches; equal and above do not
    assert dist2[0, 0, 0].item() < float(r2)


@pytest.mark.parametrize("radius", [0.1, 0.3, 0.7, 1.1, 2.9, 1e-3])
def test_point_exactly_at_threshold_does_not_match(radius):
    # From the origin, x = fl32(r) gives s = fl32(fl32(r)^2) = R2 exactly: must not match.
    r = f32(radius)
    below = np.nextafter(r, f32(0))
    ref = torch.tensor([[[float(r), 0, 0], [0, float(below), 0], [0, 0, -float(r)]]])
    dist2, idx = assert_ball_equal(torch.zeros(1, 1, 3), ref, radius, 3)
    s_below = f32(below * below)
    expect = [1, -1, -1] if s_below < oracle.ball_query_threshold(radius) else [-1, -1, -1]
    assert idx[0, 0].tolist() == expect


def _point_at_squared_distance(target: np.float32):
    """(a, b) with fl32(fl32(a*a) + fl32(b*b)) == target exactly (point (a, b, 0) from the origin)."""
    a = f32(np.sqrt(np.float64(target)))
    while f32(a * a) >= target:
        a = np.nextafter(a, f32(0))
    for _ in range(8):
        gap = np.float64(target) - np.float64(f32(a * a))
        b = f32(np.sqrt(gap))
        for _ in range(200):
            if f32(f32(a * a) + f32(b * b)) == target:
                return a, b
            b = np.nextafter(b, f32(1)) if f32(f32(a * a) + f32(b * b)) < target else np.nextafter(b, f32(0))
        a = np.nextafter(a, f32(0))
    raise AssertionError("no point found")


@pytest.mark.parametrize("radius", [0.1, 0.3, 0.7])
def test_threshold_is_the_float32_product(radius):
    # R2 = fl32(fl32(r) * fl32(r)); for r = 0.1 this is 0x3c23d70b, one ulp away from
    # fl32(r * r) computed in float64 (torch_cluster's rule).
    r2 = oracle.ball_query_threshold(radius)
    if radius == 0.1:
        assert r2.view(np.uint32) == 0x3C23D70B
    others = {r2, f32(radius * radius), np.nextafter(r2, f32(0)), np.nextafter(r2, f32(1))}
    targets = sorted(others)
    pts = [_point_at_squared_distance(t) for t in targets]
    ref = torch.tensor([[[float(a), float(b), 0.0] for a, b in pts]])
    dist2, idx = assert_ball_equal(torch.zeros(1, 1, 3), ref, radius, len(pts))
    matched = idx[0, 0][idx[0, 0] >= 0].tolist()
    assert matched == [i for i, t in enumerate(targets) if t < r2]
    assert dist2[0, 0, : len(matched)].tolist() == [float(targets[i]) for i in matched]


def test_radius_zero_matches_nothing_even_coincident(gen):
    ref = torch.rand(1, 20, 3, generator=gen)
    dist2, idx = assert_ball_equal(ref, ref, 0.0, 4)
    assert (idx == -1).all() and (dist2 == 0).all()


def test_coincident_points_match_with_positive_radius(gen):
    base = torch.rand(1, 6, 3, generator=gen)
    ref = torch.cat([base, base], dim=1)
    dist2, idx = assert_ball_equal(base, ref, 1e-6, 4)
    assert torch.equal(idx[0, :, :2], torch.arange(6)[:, None] + torch.tensor([0, 6]))
    assert (dist2[0, :, :2] == 0).all() and (idx[0, :, 2:] == -1).all()


def test_huge_radius_and_overflow():
    # fl32(1e20)^2 overflows: R2 = inf, so every finite s matches and an overflowed s does not.
    ref = torch.tensor([[[0.0, 0, 0], [3e38, 0, 0], [1e19, 0, 0], [float("inf"), 0, 0]]])
    query = torch.tensor([[[-3e38, 0, 0], [0.0, 0, 0]]])
    dist2, idx = assert_ball_equal(query, ref, 1e20, 4)
    assert idx[0, 1].tolist() == [0, 2, -1, -1]
    assert (idx[0, 0] == -1).all()


def test_nan_and_inf_coordinates_never_match():
    nan, inf = float("nan"), float("inf")
    ref = torch.tensor([[[nan, 0, 0], [0, 0, 0.1], [inf, 0, 0], [0, nan, 0], [0.2, 0, 0]]])
    query = torch.tensor([[[0.0, 0, 0], [nan, 0, 0], [inf, 0, 0]]])
    dist2, idx = assert_ball_equal(query, ref, 0.5, 5)
    assert idx[0, 0].tolist() == [1, 4, -1, -1, -1]
    assert (idx[0, 1:] == -1).all()


def test_lengths(gen):
    query = torch.rand(3, 10, 3, generator=gen)
    ref = torch.rand(3, 30, 3, generator=gen)
    ql = torch.tensor([10, 0, 4])
    rl = torch.tensor([5, 30, 0])
    dist2, idx = assert_ball_equal(query, ref, 0.6, 8, ql, rl)
    assert (idx[0] < 5).all() and (idx[1] == -1).all() and (idx[2] == -1).all()
    d32, i32 = pcops.ball_query(query, ref, 0.6, 8, ql.int(), rl.int())
    assert torch.equal(i32, idx) and torch.equal(d32, dist2)


def test_empty_inputs_and_K_zero(gen):
    d, i = pcops.ball_query(torch.rand(0, 4, 3), torch.rand(0, 5, 3), 0.5, 3)
    assert d.shape == (0, 4, 3) and i.shape == (0, 4, 3)
    d, i = pcops.ball_query(torch.rand(2, 0, 3), torch.rand(2, 5, 3), 0.5, 3)
    assert d.shape == (2, 0, 3)
    d, i = pcops.ball_query(torch.rand(2, 4, 3), torch.rand(2, 0, 3), 0.5, 3)
    assert (i == -1).all() and (d == 0).all() and d.shape == (2, 4, 3)
    d, i = pcops.ball_query(torch.rand(2, 4, 3), torch.rand(2, 5, 3), 0.5, 0)
    assert d.shape == (2, 4, 0) and i.shape == (2, 4, 0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_inputs(dtype, gen):
    query = torch.rand(2, 30, 3, generator=gen).to(dtype)
    ref = torch.rand(2, 80, 3, generator=gen).to(dtype)
    dist2, idx = assert_ball_equal(query, ref, 0.3, 16)
    d32, i32 = pcops.ball_query(query.float(), ref.float(), 0.3, 16)
    assert torch.equal(idx, i32) and torch.equal(dist2, d32) and dist2.dtype == torch.float32


def test_non_contiguous_inputs(gen):
    base = torch.rand(4, 3, 25, generator=gen)
    query = base.transpose(1, 2)[::2]  # [2, 25, 3]
    ref = torch.rand(2, 70, 6, generator=gen)[:, :, ::2]  # [2, 70, 3], stride 2 in the last dim
    assert not query.is_contiguous() and not ref.is_contiguous()
    dist2, idx = assert_ball_equal(query, ref, 0.4, 10)
    d2, i2 = pcops.ball_query(query.contiguous(), ref.contiguous(), 0.4, 10)
    assert torch.equal(idx, i2) and torch.equal(dist2, d2)


@pytest.mark.parametrize("scale", [1e-30, 1e-20, 1e-6, 1e18, 3e37])
def test_large_clouds_at_extreme_scales(scale, gen):
    ref = (torch.rand(2, 1500, 3, generator=gen) * 2 - 1) * scale
    query = (torch.rand(2, 64, 3, generator=gen) * 2 - 1) * scale
    assert_ball_equal(query, ref, 0.2 * scale, 24)


def test_large_cloud_with_non_finite_points(gen):
    ref = torch.rand(2, 1500, 3, generator=gen)
    ref[0, ::97] = float("nan")
    ref[1, ::89, 1] = float("inf")
    query = torch.rand(2, 64, 3, generator=gen)
    query[0, ::9, 0] = float("nan")
    query[1, ::7, 2] = -float("inf")
    assert_ball_equal(query, ref, 0.15, 32)
    assert_ball_equal(query, ref, 0.15, 32, ref_lengths=torch.tensor([1000, 700]))


def test_large_degenerate_clouds(gen):
    cluster, same, plane = degenerate_clouds(gen)
    for ref, radius in ((cluster, 2e-4), (same, 1e-3), (plane, 0.05)):
        query = torch.cat([ref[:, ::25], torch.rand(1, 20, 3, generator=gen)], dim=1)
        assert_ball_equal(query, ref, radius, 40)


# ---------------------------------------------------------------- gradients


def _grad_inputs(gen, dtype=torch.float32, B=2, M=15, N=40):
    query = torch.rand(B, M, 3, generator=gen).to(dtype).requires_grad_()
    ref = torch.rand(B, N, 3, generator=gen).to(dtype).requires_grad_()
    return query, ref


def test_gradients_match_pure_pytorch(gen):
    query, ref = _grad_inputs(gen)
    dist2, idx = pcops.ball_query(query, ref, 0.35, 8)
    assert (idx >= 0).any() and (idx < 0).any()  # both filled and padded slots
    upstream = torch.randn(dist2.shape, generator=gen)
    gq, gr = torch.autograd.grad(dist2, (query, ref), upstream)
    expect = oracle.ball_query_dist2_torch(query, ref, idx)
    assert torch.equal(expect.detach(), dist2.detach())
    eq, er = torch.autograd.grad(expect, (query, ref), upstream)
    torch.testing.assert_close(gq, eq, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(gr, er, rtol=1e-5, atol=1e-6)


def test_padded_slots_contribute_nothing(gen):
    query, ref = _grad_inputs(gen)
    dist2, idx = pcops.ball_query(query, ref, 0.3, 8, ref_lengths=torch.tensor([40, 3]))
    upstream = torch.ones(dist2.shape)
    upstream[idx < 0] = float("nan")  # would poison the gradients if padded slots were used
    gq, gr = torch.autograd.grad(dist2, (query, ref), upstream)
    assert torch.isfinite(gq).all() and torch.isfinite(gr).all()
    up_clean = torch.where(idx < 0, torch.zeros_like(upstream), upstream)
    eq, er = torch.autograd.grad(oracle.ball_query_dist2_torch(query, ref, idx), (query, ref), up_clean)
    torch.testing.assert_close(gq, eq, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(gr, er, rtol=1e-5, atol=1e-6)
    assert (gr[1, 3:] == 0).all()  # references past ref_lengths get no gradient


def test_gradients_with_no_matches_are_zero(gen):
    query, ref = _grad_inputs(gen)
    dist2, idx = pcops.ball_query(query, ref, 0.0, 4)
    dist2.sum().backward()
    assert (query.grad == 0).all() and (ref.grad == 0).all()


@pytest.mark.parametrize("which", ["query", "ref"])
def test_needs_input_grad_respected(which, gen):
    query = torch.rand(1, 10, 3, generator=gen, requires_grad=(which == "query"))
    ref = torch.rand(1, 20, 3, generator=gen, requires_grad=(which == "ref"))
    dist2, _ = pcops.ball_query(query, ref, 0.5, 6)
    dist2.sum().backward()
    assert (query.grad is not None) == (which == "query")
    assert (ref.grad is not None) == (which == "ref")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_gradients(dtype, gen):
    query, ref = _grad_inputs(gen, dtype)
    dist2, idx = pcops.ball_query(query, ref, 0.35, 8)
    upstream = torch.randn(dist2.shape, generator=gen)
    gq, gr = torch.autograd.grad(dist2, (query, ref), upstream)
    assert gq.dtype == dtype and gr.dtype == dtype
    eq, er = torch.autograd.grad(oracle.ball_query_dist2_torch(query, ref, idx), (query, ref), upstream)
    # The reference computes in float32 then rounds once to the input dtype, as the op does.
    torch.testing.assert_close(gq.float(), eq.float(), rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(gr.float(), er.float(), rtol=1e-2, atol=1e-2)


def test_non_contiguous_upstream_gradient(gen):
    query, ref = _grad_inputs(gen)
    dist2, idx = pcops.ball_query(query, ref, 0.35, 8)
    dist2.sum().backward()  # the upstream gradient is an expanded (stride 0) tensor
    eq, er = torch.autograd.grad(oracle.ball_query_dist2_torch(query, ref, idx).sum(), (query, ref))
    torch.testing.assert_close(query.grad, eq, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ref.grad, er, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("use", ["both", "query", "ref"])
def test_double_backward_matches_pure_pytorch(use, gen):
    query, ref = _grad_inputs(gen)
    dist2, idx = pcops.ball_query(query, ref, 0.35, 8)
    ref_dist2 = oracle.ball_query_dist2_torch(query, ref, idx)
    w = torch.randn(dist2.shape, generator=gen)
    lin = torch.randn(ref.shape, generator=gen)
    outs = []
    for d in (dist2, ref_dist2):
        loss = (w * d.square()).sum()  # a loss whose second derivative is not trivial
        gq, gr = torch.autograd.grad(loss, (query, ref), create_graph=True)
        second = {"both": gq.square().sum() + (gr * lin).sum(), "query": gq.square().sum(),
                  "ref": (gr * lin).sum() + gr.square().sum()}[use]
        outs.append(torch.autograd.grad(second, (query, ref)))
    for got, expect in zip(outs[0], outs[1]):
        torch.testing.assert_close(got, expect, rtol=1e-4, atol=1e-5)


def test_self_query_gradients_accumulate(gen):
    points = torch.rand(2, 30, 3, generator=gen, requires_grad=True)
    dist2, idx = pcops.ball_query(points, points, 0.4, 6)
    upstream = torch.randn(dist2.shape, generator=gen)
    (got,) = torch.autograd.grad(dist2, points, upstream)
    (expect,) = torch.autograd.grad(oracle.ball_query_dist2_torch(points, points, idx), points, upstream)
    torch.testing.assert_close(got, expect, rtol=1e-5, atol=1e-6)


def test_gradients_of_empty_outputs(gen):
    for B, M, N, K in [(2, 5, 7, 0), (0, 5, 7, 3), (2, 0, 7, 3), (2, 5, 0, 3)]:
        query = torch.rand(B, M, 3, generator=gen, requires_grad=True)
        ref = torch.rand(B, N, 3, generator=gen, requires_grad=True)
        dist2, _ = pcops.ball_query(query, ref, 0.5, K)
        gq, gr = torch.autograd.grad(dist2.sum(), (query, ref), allow_unused=True)
        assert gq.shape == query.shape and gr.shape == ref.shape
        assert (gq == 0).all() and (gr == 0).all()


def test_numpy_scalar_radius(gen):
    query = torch.rand(1, 6, 3, generator=gen)
    ref = torch.rand(1, 9, 3, generator=gen)
    a = pcops.ball_query(query, ref, np.float32(0.4), 3)
    b = pcops.ball_query(query, ref, float(np.float32(0.4)), 3)
    assert torch.equal(a[1], b[1]) and torch.equal(a[0], b[0])


def test_backward_op_validates_indices(gen):
    query = torch.rand(1, 4, 3, generator=gen)
    ref = torch.rand(1, 5, 3, generator=gen)
    grad = torch.ones(1, 4, 2)
    bad = torch.full((1, 4, 2), 5, dtype=torch.int64)
    with pytest.raises(IndexError, match="idx"):
        torch.ops.pcops._ball_query_backward(grad, query, ref, bad)
    with pytest.raises(IndexError, match="idx"):
        torch.ops.pcops._ball_query_backward(grad, query, ref, torch.full((1, 4, 2), -2))
    with pytest.raises(TypeError, match="idx"):
        torch.ops.pcops._ball_query_backward(grad, query, ref, torch.zeros(1, 4, 2, dtype=torch.int32))
    with pytest.raises(ValueError, match="grad_dist2"):
        good = torch.zeros(1, 4, 2, dtype=torch.int64)
        torch.ops.pcops._ball_query_backward(torch.ones(1, 4, 3), query, ref, good)


def test_independent_of_thread_count(gen):
    ref = torch.rand(3, 3000, 3, generator=gen)
    query = torch.rand(3, 700, 3, generator=gen)
    one = with_threads(1, lambda: pcops.ball_query(query, ref, 0.1, 48))
    two = with_threads(2, lambda: pcops.ball_query(query, ref, 0.1, 48))
    assert torch.equal(one[0], two[0]) and torch.equal(one[1], two[1])
