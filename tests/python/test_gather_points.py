"""pcops.gather_points: exact copies, -1 padding, deterministic scatter-add gradient, errors
(contract: docs/ops/gather_points.md)."""

from __future__ import annotations

import warnings

import pytest
import torch

import pcops
from conftest import with_threads
from pcops import testing as oracle


def _inputs(gen, B=2, C=4, N=10, M=6, pad=0.0, dtype=torch.float32):
    features = (torch.rand(B, C, N, generator=gen) * 4 - 2).to(dtype)
    idx = torch.randint(0, max(N, 1), (B, M), generator=gen)
    if pad > 0 or N == 0:
        idx[torch.rand(B, M, generator=gen) < (1.0 if N == 0 else pad)] = -1
    return features, idx


@pytest.mark.parametrize("shape", [(2, 4, 10, 6), (3, 64, 1024, 256), (2, 5, 3, 500)])
def test_matches_oracle_and_torch_gather(shape, gen):
    B, C, N, M = shape
    features, idx = _inputs(gen, B, C, N, M)
    out = pcops.gather_points(features, idx)
    assert out.shape == (B, C, M) and out.dtype == torch.float32
    assert torch.equal(out, oracle.gather_points(features, idx))
    assert torch.equal(out, torch.gather(features, 2, idx.unsqueeze(1).expand(B, C, M)))


def test_fps_pipeline(gen):
    # PointNet++'s new_xyz = gather_operation(xyz^T, furthest_point_sample(xyz, npoint))^T.
    xyz = torch.rand(2, 100, 3, generator=gen)
    sel = pcops.furthest_point_sample(xyz, 16)
    new_xyz = pcops.gather_points(xyz.transpose(1, 2).contiguous(), sel).transpose(1, 2)
    assert torch.equal(new_xyz, torch.stack([xyz[b, sel[b]] for b in range(2)]))


def test_padding_gives_zero_and_no_gradient(gen):
    features, idx = _inputs(gen, pad=0.4)
    features[:] = float("nan")  # a padded slot never reads the features
    out = pcops.gather_points(features, idx)
    pad = (idx < 0).unsqueeze(1).expand_as(out)
    assert pad.any() and (out[pad] == 0).all() and not torch.signbit(out[pad]).any()
    features, idx = _inputs(gen, pad=0.4)
    features.requires_grad_()
    out = pcops.gather_points(features, idx)
    (g,) = torch.autograd.grad(out, features, torch.ones_like(out))
    counts = torch.zeros(2, 10).scatter_add_(1, idx.clamp(min=0), (idx >= 0).float())
    assert torch.equal(g, counts.unsqueeze(1).expand_as(g))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(dtype, gen):
    features, idx = _inputs(gen, dtype=dtype)
    features.requires_grad_()
    out = pcops.gather_points(features, idx)
    assert out.dtype == dtype and torch.equal(out, oracle.gather_points(features, idx).to(dtype))
    upstream = torch.randn(out.shape, generator=gen).to(dtype)
    (g,) = torch.autograd.grad(out, features, upstream)
    assert g.dtype == dtype
    assert torch.equal(g, oracle.gather_points_backward(upstream, idx, 10).to(dtype))


def test_non_contiguous_and_empty(gen):
    features, idx = _inputs(gen, B=2, C=4, N=10, M=6)
    f_nc = features.transpose(1, 2).contiguous().transpose(1, 2)
    i_nc = idx.t().contiguous().t()
    assert torch.equal(pcops.gather_points(f_nc, i_nc), pcops.gather_points(features, idx))
    for B, C, N, M in [(0, 3, 4, 5), (2, 0, 4, 5), (2, 3, 4, 0), (2, 3, 0, 5)]:
        features, idx = _inputs(gen, B, C, N, M)
        out = pcops.gather_points(features, idx)
        assert out.shape == (B, C, M)
        if N == 0:
            assert (out == 0).all()


def test_gradients_bitwise_and_gradcheck(gen):
    features, idx = _inputs(gen, B=2, C=3, N=5, M=40, pad=0.1)  # heavy repetition
    features.requires_grad_()
    out = pcops.gather_points(features, idx)
    upstream = torch.randn(out.shape, generator=gen)
    (g,) = torch.autograd.grad(out, features, upstream)
    assert torch.equal(g, oracle.gather_points_backward(upstream, idx, 5))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # float32 inputs: the op is linear
        op = lambda f: pcops.gather_points(f, idx)  # noqa: E731
        assert torch.autograd.gradcheck(op, (features,), eps=1e-2, atol=1e-3, rtol=1e-3)
        assert torch.autograd.gradgradcheck(op, (features,), eps=1e-2, atol=1e-3, rtol=1e-3)


def test_backward_is_thread_independent(gen):
    features, idx = _inputs(gen, B=3, C=64, N=50, M=4000, pad=0.05)
    features.requires_grad_()
    upstream = torch.randn(3, 64, 4000, generator=gen)

    def grad():
        return torch.autograd.grad(pcops.gather_points(features, idx), features, upstream)[0]

    a, b, c = with_threads(1, grad), with_threads(2, grad), grad()
    assert torch.equal(a, b) and torch.equal(a, c)


def test_errors(gen):
    features, idx = _inputs(gen)
    for bad in (10, -2):
        wrong = idx.clone()
        wrong[1, 2] = bad
        with pytest.raises(IndexError, match="idx"):
            pcops.gather_points(features, wrong)
        with pytest.raises(IndexError, match="idx"):
            torch.ops.pcops._gather_points_backward(torch.ones(2, 4, 6), wrong, 10)
    with pytest.raises(ValueError, match="features"):
        pcops.gather_points(features[0], idx)
    with pytest.raises(ValueError, match="idx"):
        pcops.gather_points(features, idx[0])
    with pytest.raises(ValueError, match="idx"):
        pcops.gather_points(features, idx[:1])
    with pytest.raises(TypeError, match="features"):
        pcops.gather_points(features.double(), idx)
    with pytest.raises(TypeError, match="features"):
        pcops.gather_points(features.long(), idx)
    with pytest.raises(TypeError, match="idx"):
        pcops.gather_points(features, idx.int())
    with pytest.raises(ValueError, match="count"):
        torch.ops.pcops._gather_points_backward(torch.ones(2, 4, 6), idx, -1)
    with pytest.raises(ValueError, match="idx"):
        torch.ops.pcops._gather_points_backward(torch.ones(2, 4, 5), idx, 10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opcheck(dtype, gen):
    features, idx = _inputs(gen, pad=0.2, dtype=dtype)
    features.requires_grad_()
    torch.library.opcheck(torch.ops.pcops.gather_points.default, (features, idx))
    grad = torch.rand(2, 4, 6, generator=gen).to(dtype).requires_grad_()
    torch.library.opcheck(torch.ops.pcops._gather_points_backward.default, (grad, idx, 10))


def test_expanded_and_strided_upstream_gradients(gen):
    features, idx = _inputs(gen, pad=0.2)
    features.requires_grad_()
    out = pcops.gather_points(features, idx)
    (g,) = torch.autograd.grad(out.sum(), features)
    assert torch.equal(g, oracle.gather_points_backward(torch.ones(out.shape), idx, 10))
    upstream = torch.randn(2, 6, 4, generator=gen).transpose(1, 2)
    direct = torch.ops.pcops._gather_points_backward(upstream, idx, 10)
    assert torch.equal(direct, oracle.gather_points_backward(upstream, idx, 10))


def test_index_cast(gen):
    """The stand-ins' index cast: a new tensor of the other integer width with the same values
    (the range bookkeeping it adds on CUDA is tested there), with its own errors."""
    from pcops.ops.gather_points import index_cast

    idx = torch.randint(-1, 1000, (3, 50), generator=gen)
    cases = ((idx, torch.int32), (idx.int(), torch.int64), (idx, torch.int64), (idx.t(), torch.int32))
    for src, dtype in cases:
        out = index_cast(src, dtype)
        assert out.dtype == dtype and out.shape == src.shape and torch.equal(out.long(), src.long())
        assert out.data_ptr() != src.data_ptr()  # always a new tensor (the op's schema: no alias)
    assert torch.equal(index_cast(idx.int(), torch.int64, idx), idx)
    with pytest.raises(TypeError, match="idx: expected an int32 or int64"):
        index_cast(idx.float(), torch.int64)
    with pytest.raises(TypeError, match="dtype: expected int32 or int64"):
        index_cast(idx, torch.int16)
    torch.library.opcheck(torch.ops.pcops._index_cast.default, (idx, torch.int32, None))
    torch.library.opcheck(torch.ops.pcops._index_cast.default, (idx.int(), torch.int64, idx))
