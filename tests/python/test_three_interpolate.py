"""pcops.three_interpolate: bitwise against the contract's evaluation order, gradients, errors
(contract: docs/ops/three_interpolate.md)."""

from __future__ import annotations

import warnings

import pytest
import torch

import pcops
from conftest import with_threads
from pcops import testing as oracle


def _inputs(gen, B=2, C=5, M=9, N=13, pad=0.0, dtype=torch.float32):
    features = (torch.rand(B, C, M, generator=gen) * 4 - 2).to(dtype)
    idx = torch.randint(0, max(M, 1), (B, N, 3), generator=gen)
    if pad > 0 or M == 0:
        idx[torch.rand(B, N, 3, generator=gen) < (1.0 if M == 0 else pad)] = -1
    weight = torch.rand(B, N, 3, generator=gen).to(dtype)
    return features, idx, weight


def _reference64(features, idx, weight):
    """Differentiable float64 reference (same maths, another evaluation order)."""
    mask = idx >= 0
    safe = torch.where(mask, idx, torch.zeros_like(idx))
    B, C, _ = features.shape
    N = idx.shape[1]
    g = torch.gather(features.double(), 2, safe.reshape(B, 1, N * 3).expand(B, C, N * 3)).reshape(B, C, N, 3)
    w = torch.where(mask, weight.double(), torch.zeros_like(weight, dtype=torch.float64))
    return (g * w.unsqueeze(1)).sum(-1)


@pytest.mark.parametrize("shape", [(2, 5, 9, 13), (3, 32, 64, 256), (1, 3, 4, 500), (2, 1, 300, 40)])
def test_matches_oracle_bitwise(shape, gen):
    B, C, M, N = shape
    features, idx, weight = _inputs(gen, B, C, M, N, pad=0.1)
    out = pcops.three_interpolate(features, idx, weight)
    assert out.dtype == torch.float32 and out.shape == (B, C, N)
    assert torch.equal(out, oracle.three_interpolate(features, idx, weight))
    torch.testing.assert_close(out.double(), _reference64(features, idx, weight), rtol=1e-6, atol=1e-5)


def test_slot_order_is_the_documented_expression():
    # fl(fl(fl(0 + w0 f0) + w1 f1) + w2 f2): 1e8 - 1e8 cancels first, then + 1; any other order
    # that adds 1 to 1e8 first would lose it.
    features = torch.tensor([[[1e8, -1e8, 1.0]]])
    weight = torch.ones(1, 2, 3)
    idx = torch.tensor([[[0, 1, 2], [0, 2, 1]]])
    out = pcops.three_interpolate(features, idx, weight)
    assert out[0, 0].tolist() == [1.0, 0.0]


def test_padding_slots_contribute_nothing(gen):
    features, idx, weight = _inputs(gen, pad=0.4)
    weight = torch.where(idx < 0, torch.full_like(weight, float("inf")), weight)  # never read
    out = pcops.three_interpolate(features, idx, weight)
    assert torch.isfinite(out).all()
    assert torch.equal(out, oracle.three_interpolate(features, idx, weight))
    all_pad = torch.full_like(idx, -1)
    zero = pcops.three_interpolate(features, all_pad, weight)
    assert torch.equal(zero, torch.zeros_like(zero)) and not torch.signbit(zero).any()


def test_three_nn_pipeline_with_lengths(gen):
    # PointNet++ feature propagation with three_nn's (inf, -1) padding: weights 1 / (d + 1e-8)
    # are 0 there and the -1 slots are skipped.
    unknown = torch.rand(2, 20, 3, generator=gen)
    known = torch.rand(2, 8, 3, generator=gen)
    features = torch.rand(2, 4, 8, generator=gen)
    dist, idx = pcops.three_nn(unknown, known, known_lengths=torch.tensor([8, 2]))
    recip = 1.0 / (dist + 1e-8)
    weight = recip / recip.sum(-1, keepdim=True)
    out = pcops.three_interpolate(features, idx, weight)
    assert torch.isfinite(out).all()
    assert torch.equal(out, oracle.three_interpolate(features, idx, weight))


def test_non_finite_values_propagate(gen):
    features, idx, weight = _inputs(gen)
    features[0, 1, idx[0, 2, 0]] = float("nan")
    out = pcops.three_interpolate(features, idx, weight)
    assert torch.isnan(out[0, 1, 2])
    assert torch.equal(out.isnan(), oracle.three_interpolate(features, idx, weight).isnan())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(dtype, gen):
    features, idx, weight = _inputs(gen, dtype=dtype)
    out = pcops.three_interpolate(features, idx, weight)
    assert out.dtype == dtype  # computed in float32, rounded once to the features' dtype
    assert torch.equal(out, oracle.three_interpolate(features, idx, weight).to(dtype))
    mixed = pcops.three_interpolate(features, idx, weight.float())
    assert mixed.dtype == dtype


def test_non_contiguous_inputs(gen):
    features, idx, weight = _inputs(gen, B=2, C=4, M=10, N=12)
    f_nc = features.transpose(1, 2).contiguous().transpose(1, 2)
    w_nc = weight.transpose(1, 2).contiguous().transpose(1, 2)
    i_nc = idx.transpose(1, 2).contiguous().transpose(1, 2)
    assert not f_nc.is_contiguous() and not w_nc.is_contiguous() and not i_nc.is_contiguous()
    assert torch.equal(pcops.three_interpolate(f_nc, i_nc, w_nc), pcops.three_interpolate(features, idx, weight))


def test_empty_shapes(gen):
    for B, C, M, N in [(0, 3, 4, 5), (2, 0, 4, 5), (2, 3, 4, 0), (2, 3, 0, 5)]:
        features, idx, weight = _inputs(gen, B, C, M, N)
        out = pcops.three_interpolate(features, idx, weight)
        assert out.shape == (B, C, N) and (out == 0).all()


# ------------------------------------------------------------------ gradients


def test_gradients_bitwise_and_against_float64(gen):
    features, idx, weight = _inputs(gen, B=2, C=6, M=7, N=40, pad=0.2)  # M < 3N: repeated indices
    features.requires_grad_()
    weight.requires_grad_()
    out = pcops.three_interpolate(features, idx, weight)
    upstream = torch.randn(out.shape, generator=gen)
    gf, gw = torch.autograd.grad(out, (features, weight), upstream)
    ogf, ogw = oracle.three_interpolate_backward(upstream, features, idx, weight)
    assert torch.equal(gf, ogf) and torch.equal(gw, ogw)
    ef, ew = torch.autograd.grad(_reference64(features, idx, weight), (features, weight), upstream.double())
    torch.testing.assert_close(gf, ef, rtol=1e-5, atol=1e-5)  # float32 grads of float32 inputs
    torch.testing.assert_close(gw, ew, rtol=1e-5, atol=1e-5)
    assert (gw[idx < 0] == 0).all()  # padded slots get no weight gradient


def test_gradcheck_and_gradgradcheck(gen):
    features, idx, weight = _inputs(gen, B=2, C=3, M=5, N=6, pad=0.2)
    features.requires_grad_()
    weight.requires_grad_()

    def op(f, w):
        return pcops.three_interpolate(f, idx, w)

    # float32 inputs (the op takes no float64): the op is bilinear, so central differences with a
    # large step are exact up to float32 rounding.
    kw = dict(eps=1e-2, atol=1e-3, rtol=1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert torch.autograd.gradcheck(op, (features, weight), **kw)
        assert torch.autograd.gradgradcheck(op, (features, weight), **kw)


@pytest.mark.parametrize("which", ["features", "weight"])
def test_needs_input_grad_respected(which, gen):
    features, idx, weight = _inputs(gen)
    features.requires_grad_(which == "features")
    weight.requires_grad_(which == "weight")
    pcops.three_interpolate(features, idx, weight).sum().backward()
    assert (features.grad is not None) == (which == "features")
    assert (weight.grad is not None) == (which == "weight")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_gradients(dtype, gen):
    features, idx, weight = _inputs(gen, dtype=dtype)
    features.requires_grad_()
    weight.requires_grad_()
    out = pcops.three_interpolate(features, idx, weight)
    upstream = torch.randn(out.shape, generator=gen).to(dtype)
    gf, gw = torch.autograd.grad(out, (features, weight), upstream)
    assert gf.dtype == dtype and gw.dtype == dtype
    ogf, ogw = oracle.three_interpolate_backward(upstream, features, idx, weight)
    assert torch.equal(gf, ogf.to(dtype)) and torch.equal(gw, ogw.to(dtype))


def test_backward_is_deterministic_and_thread_independent(gen):
    features, idx, weight = _inputs(gen, B=3, C=64, M=100, N=3000, pad=0.05)
    features.requires_grad_()
    weight.requires_grad_()
    upstream = torch.randn(3, 64, 3000, generator=gen)

    def grads():
        return torch.autograd.grad(pcops.three_interpolate(features, idx, weight), (features, weight), upstream)

    a = with_threads(1, grads)
    b = with_threads(2, grads)
    c = grads()
    for x, y, z in zip(a, b, c):
        assert torch.equal(x, y) and torch.equal(x, z)


def test_backward_op_optional_outputs(gen):
    features, idx, weight = _inputs(gen)
    grad = torch.rand(2, 5, 13, generator=gen)
    gf, gw = torch.ops.pcops._three_interpolate_backward(grad, features, idx, weight, True, False)
    assert torch.equal(gw, torch.zeros_like(weight))
    assert torch.equal(gf, oracle.three_interpolate_backward(grad, features, idx, weight)[0])
    gf, gw = torch.ops.pcops._three_interpolate_backward(grad, features, idx, weight, False, True)
    assert torch.equal(gf, torch.zeros_like(features))


def test_backward_op_idx_checked(gen):
    """idx_checked (the autograd backward's: the forward checked idx) skips the value check only:
    the same gradients, and without it a bad index still raises."""
    features, idx, weight = _inputs(gen, pad=0.2)
    grad = torch.rand(2, 5, 13, generator=gen)
    plain = torch.ops.pcops._three_interpolate_backward(grad, features, idx, weight, True, True)
    checked = torch.ops.pcops._three_interpolate_backward(grad, features, idx, weight, True, True, True)
    assert all(torch.equal(a, b) for a, b in zip(plain, checked))
    f = features.clone().requires_grad_()
    w = weight.clone().requires_grad_()
    gf, gw = torch.autograd.grad(pcops.three_interpolate(f, idx, w), (f, w), grad)
    assert torch.equal(gf, plain[0]) and torch.equal(gw, plain[1])
    bad = idx.clone()
    bad[0, 3, 1] = 9
    with pytest.raises(IndexError, match=r"idx: expected indices in \[-1, 9\)"):
        torch.ops.pcops._three_interpolate_backward(grad, features, bad, weight, True, True)


# ------------------------------------------------------------------ errors


def test_index_errors(gen):
    features, idx, weight = _inputs(gen)
    for bad in (9, -2, 1 << 40):
        wrong = idx.clone()
        wrong[1, 3, 2] = bad
        with pytest.raises(IndexError, match="idx"):
            pcops.three_interpolate(features, wrong, weight)
        with pytest.raises(IndexError, match="idx"):
            torch.ops.pcops._three_interpolate_backward(torch.ones(2, 5, 13), features, wrong, weight)


def test_shape_and_dtype_errors(gen):
    features, idx, weight = _inputs(gen)
    with pytest.raises(ValueError, match="features"):
        pcops.three_interpolate(features[0], idx, weight)
    with pytest.raises(ValueError, match="idx"):
        pcops.three_interpolate(features, idx[..., :2], weight[..., :2])
    with pytest.raises(ValueError, match="idx"):
        pcops.three_interpolate(features, idx[:1], weight[:1])
    with pytest.raises(ValueError, match="idx"):
        pcops.three_interpolate(features, idx[0], weight[0])
    with pytest.raises(ValueError, match="weight"):
        pcops.three_interpolate(features, idx, weight[:, :4])
    with pytest.raises(ValueError, match="weight"):
        pcops.three_interpolate(features, idx, weight[0])
    with pytest.raises(TypeError, match="features"):
        pcops.three_interpolate(features.double(), idx, weight)
    with pytest.raises(TypeError, match="weight"):
        pcops.three_interpolate(features, idx, weight.double())
    with pytest.raises(TypeError, match="idx"):
        pcops.three_interpolate(features, idx.int(), weight)
    with pytest.raises(TypeError, match="idx"):
        pcops.three_interpolate(features, idx.float(), weight)
    with pytest.raises(ValueError, match="grad_out"):
        torch.ops.pcops._three_interpolate_backward(torch.ones(2, 5, 12), features, idx, weight)
    with pytest.raises(ValueError, match="device"):
        pcops.three_interpolate(features.to("meta"), idx, weight)


# ------------------------------------------------------------------ torch.library


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_opcheck(dtype, gen):
    features, idx, weight = _inputs(gen, pad=0.2, dtype=dtype)
    features.requires_grad_()
    weight.requires_grad_()
    torch.library.opcheck(torch.ops.pcops.three_interpolate.default, (features, idx, weight))
    grad = torch.rand(2, 5, 13, generator=gen).to(dtype).requires_grad_()
    for need in [(True, True), (True, False), (False, True)]:
        torch.library.opcheck(
            torch.ops.pcops._three_interpolate_backward.default, (grad, features, idx, weight, *need)
        )


def test_compile_fullgraph_matches_eager(gen):
    torch._dynamo.reset()

    def fp(unknown, known, feats):
        dist, idx = pcops.three_nn(unknown, known)
        recip = 1.0 / (dist + 1e-8)
        return pcops.three_interpolate(feats, idx, recip / recip.sum(-1, keepdim=True))

    compiled = torch.compile(fp, fullgraph=True, dynamic=True, backend="aot_eager")
    for B, N, M in [(2, 20, 8), (3, 31, 5)]:
        args = (torch.rand(B, N, 3, generator=gen), torch.rand(B, M, 3, generator=gen), torch.rand(B, 4, M, generator=gen))
        assert torch.equal(compiled(*args), fp(*args))


def test_expanded_and_strided_upstream_gradients(gen):
    features, idx, weight = _inputs(gen, pad=0.2)
    features.requires_grad_()
    weight.requires_grad_()
    out = pcops.three_interpolate(features, idx, weight)
    gf, gw = torch.autograd.grad(out.sum(), (features, weight))
    ogf, ogw = oracle.three_interpolate_backward(torch.ones(out.shape), features, idx, weight)
    assert torch.equal(gf, ogf) and torch.equal(gw, ogw)
    upstream = torch.randn(2, 13, 5, generator=gen).transpose(1, 2)
    gf, gw = torch.ops.pcops._three_interpolate_backward(upstream, features, idx, weight)
    ogf, ogw = oracle.three_interpolate_backward(upstream, features, idx, weight)
    assert torch.equal(gf, ogf) and torch.equal(gw, ogw)
