"""pcops.group_points: exact copies, ball_query's -1 padding (0, no gradient), deterministic
scatter-add gradient, errors (contract: docs/ops/group_points.md)."""

from __future__ import annotations

import warnings

import pytest
import torch

import pcops
from conftest import with_threads
from pcops import testing as oracle


def _inputs(gen, B=2, C=4, N=10, M=5, S=3, pad=0.0, dtype=torch.float32):
    features = (torch.rand(B, C, N, generator=gen) * 4 - 2).to(dtype)
    idx = torch.randint(0, max(N, 1), (B, M, S), generator=gen)
    if pad > 0 or N == 0:
        idx[torch.rand(B, M, S, generator=gen) < (1.0 if N == 0 else pad)] = -1
    return features, idx


@pytest.mark.parametrize("shape", [(2, 4, 10, 5, 3), (2, 32, 500, 64, 16), (1, 3, 2, 50, 8)])
def test_matches_oracle(shape, gen):
    B, C, N, M, S = shape
    features, idx = _inputs(gen, B, C, N, M, S, pad=0.1)
    out = pcops.group_points(features, idx)
    assert out.shape == (B, C, M, S) and out.dtype == torch.float32
    assert torch.equal(out, oracle.group_points(features, idx))


def test_ball_query_padding_gives_zero_and_no_gradient(gen):
    xyz = torch.rand(2, 200, 3, generator=gen)
    centres = xyz[:, :16]
    _, idx = pcops.ball_query(centres, xyz, 0.15, 12)
    assert (idx < 0).any() and (idx >= 0).any()
    features = torch.rand(2, 5, 200, generator=gen, requires_grad=True)
    out = pcops.group_points(features, idx)
    pad = (idx < 0).unsqueeze(1).expand_as(out)
    assert (out[pad] == 0).all()
    upstream = torch.randn(out.shape, generator=gen)
    (g,) = torch.autograd.grad(out, features, upstream, retain_graph=True)
    assert torch.equal(g, oracle.group_points_backward(upstream, idx, 200))
    # The gradient of padded slots goes nowhere: the same as zeroing them upstream.
    (g0,) = torch.autograd.grad(out, features, upstream.masked_fill(pad, 0.0))
    assert torch.equal(g, g0)


def test_query_and_group_pipeline(gen):
    # pointnet2_ops' QueryAndGroup: grouped xyz minus the centre, then the features.
    xyz = torch.rand(2, 100, 3, generator=gen)
    new_xyz = xyz[:, :10]
    _, idx = pcops.ball_query(new_xyz, xyz, 0.3, 8)
    grouped = pcops.group_points(xyz.transpose(1, 2).contiguous(), idx)
    mask = idx >= 0
    safe = idx.clamp(min=0)
    expect = torch.stack([xyz[b][safe[b]] for b in range(2)]).permute(0, 3, 1, 2) * mask.unsqueeze(1)
    assert torch.equal(grouped, expect)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(dtype, gen):
    features, idx = _inputs(gen, dtype=dtype, pad=0.2)
    features.requires_grad_()
    out = pcops.group_points(features, idx)
    assert out.dtype == dtype and torch.equal(out, oracle.group_points(features, idx).to(dtype))
    upstream = torch.randn(out.shape, generator=gen).to(dtype)
    (g,) = torch.autograd.grad(out, features, upstream)
    assert g.dtype == dtype and torch.equal(g, oracle.group_points_backward(upstream, idx, 10).to(dtype))


def test_non_contiguous_and_empty(gen):
    features, idx = _inputs(gen)
    f_nc = features.transpose(1, 2).contiguous().transpose(1, 2)
    i_nc = idx.transpose(1, 2).contiguous().transpose(1, 2)
    assert torch.equal(pcops.group_points(f_nc, i_nc), pcops.group_points(features, idx))
    for B, C, N, M, S in [(0, 3, 4, 5, 2), (2, 0, 4, 5, 2), (2, 3, 4, 0, 2), (2, 3, 4, 5, 0), (2, 3, 0, 5, 2)]:
        features, idx = _inputs(gen, B, C, N, M, S)
        features.requires_grad_()
        out = pcops.group_points(features, idx)
        assert out.shape == (B, C, M, S)
        (g,) = torch.autograd.grad(out.sum(), features, allow_unused=True)
        assert g is None or g.shape == features.shape


def test_gradients_bitwise_and_gradcheck(gen):
    features, idx = _inputs(gen, B=2, C=3, N=4, M=10, S=5, pad=0.1)
    features.requires_grad_()
    out = pcops.group_points(features, idx)
    upstream = torch.randn(out.shape, generator=gen)
    (g,) = torch.autograd.grad(out, features, upstream)
    assert torch.equal(g, oracle.group_points_backward(upstream, idx, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # float32 inputs: the op is linear
        op = lambda f: pcops.group_points(f, idx)  # noqa: E731
        assert torch.autograd.gradcheck(op, (features,), eps=1e-2, atol=1e-3, rtol=1e-3)
        assert torch.autograd.gradgradcheck(op, (features,), eps=1e-2, atol=1e-3, rtol=1e-3)


def test_backward_is_thread_independent(gen):
    features, idx = _inputs(gen, B=3, C=32, N=40, M=256, S=32, pad=0.1)
    features.requires_grad_()
    upstream = torch.randn(3, 32, 256, 32, generator=gen)

    def grad():
        return torch.autograd.grad(pcops.group_points(features, idx), features, upstream)[0]

    a, b, c = with_threads(1, grad), with_threads(2, grad), grad()
    assert torch.equal(a, b) and torch.equal(a, c)


def test_errors(gen):
    features, idx = _inputs(gen)
    for bad in (10, -2):
        wrong = idx.clone()
        wrong[1, 2, 0] = bad
        with pytest.raises(IndexError, match="idx"):
            pcops.group_points(features, wrong)
        with pytest.raises(IndexError, match="idx"):
            torch.ops.pcops._group_points_backward(torch.ones(2, 4, 5, 3), wrong, 10)
    with pytest.raises(ValueError, match="features"):
        pcops.group_points(features.unsqueeze(0), idx)
    with pytest.raises(ValueError, match="idx"):
        pcops.group_points(features, idx[0])
    with pytest.raises(ValueError, match="idx"):
        pcops.group_points(features, idx[:1])
    with pytest.raises(TypeError, match="features"):
        pcops.group_points(features.double(), idx)
    with pytest.raises(TypeError, match="idx"):
        pcops.group_points(features, idx.int())
    with pytest.raises(ValueError, match="grad_out"):
        torch.ops.pcops._group_points_backward(torch.ones(2, 4, 15), idx, 10)
    with pytest.raises(ValueError, match="idx"):
        torch.ops.pcops._group_points_backward(torch.ones(2, 4, 5, 4), idx, 10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_opcheck(dtype, gen):
    features, idx = _inputs(gen, pad=0.2, dtype=dtype)
    features.requires_grad_()
    torch.library.opcheck(torch.ops.pcops.group_points.default, (features, idx))
    grad = torch.rand(2, 4, 5, 3, generator=gen).to(dtype).requires_grad_()
    torch.library.opcheck(torch.ops.pcops._group_points_backward.default, (grad, idx, 10))


def test_compile_fullgraph_matches_eager(gen):
    torch._dynamo.reset()

    def sa(xyz, feats):
        sel = pcops.furthest_point_sample(xyz, 8)
        centres = pcops.gather_points(xyz.transpose(1, 2).contiguous(), sel).transpose(1, 2)
        _, idx = pcops.ball_query(centres, xyz, 0.3, 6)
        return pcops.group_points(feats, idx).amax(-1)

    compiled = torch.compile(sa, fullgraph=True, dynamic=True, backend="aot_eager")
    for B, N in [(2, 40), (3, 57)]:
        xyz, feats = torch.rand(B, N, 3, generator=gen), torch.rand(B, 5, N, generator=gen)
        assert torch.equal(compiled(xyz, feats), sa(xyz, feats))


def test_expanded_and_strided_upstream_gradients(gen):
    # out.sum() hands the backward an expanded (stride 0) gradient; a transposed one is strided.
    features, idx = _inputs(gen, pad=0.2)
    features.requires_grad_()
    out = pcops.group_points(features, idx)
    (g,) = torch.autograd.grad(out.sum(), features)
    assert torch.equal(g, oracle.group_points_backward(torch.ones(out.shape), idx, 10))
    upstream = torch.randn(2, 4, 3, 5, generator=gen).transpose(2, 3)
    assert not upstream.is_contiguous()
    direct = torch.ops.pcops._group_points_backward(upstream, idx, 10)
    assert torch.equal(direct, oracle.group_points_backward(upstream, idx, 10))
