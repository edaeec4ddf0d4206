"""chamfer_distance's fused pair-distance operator (torch.ops.pcops._chamfer_pair_distance and
its backward) against the unfused formula it replaces (a gather and one elementwise operation per
coordinate): values and gradients bitwise equal, signed zeros included, on random, tie-heavy and
padded inputs, float32 and float64, both norms; higher derivatives through the unfused formula."""

from __future__ import annotations

import contextlib
import itertools

import pytest
import torch

import pcops
from pcops.ops import chamfer_distance as cd


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality (shape and dtype too); any NaN matches any NaN."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not a.dtype.is_floating_point:
        return torch.equal(a, b)
    view = {torch.float32: torch.int32, torch.float64: torch.int64, torch.float16: torch.int16,
            torch.bfloat16: torch.int16}[a.dtype]
    nan = torch.isnan(a)
    return torch.equal(nan, torch.isnan(b)) and torch.equal(a.view(view)[~nan], b.view(view)[~nan])


@contextlib.contextmanager
def unfused():
    """chamfer_distance with the unfused formula in place of the fused operator."""

    class Unfused:
        @staticmethod
        def apply(x, y, idx, norm):
            return cd._masked_pair_distance(x, y, idx, norm)

    class UnfusedReduce:
        @staticmethod
        def apply(*args):
            return cd._reduce_formula(*args)

    saved = cd._PairDistance, cd._Reduce, cd._Chamfer
    cd._PairDistance, cd._Reduce, cd._Chamfer = Unfused, UnfusedReduce, cd._Composed
    try:
        yield
    finally:
        cd._PairDistance, cd._Reduce, cd._Chamfer = saved


def _points(gen, n, p, d, dtype, kind):
    t = torch.rand(n, p, d, generator=gen, dtype=torch.float64)
    if kind == "ties":  # a coarse lattice: exact ties and zero differences everywhere
        t = (t * 3).round() / 2 - 0.5
    return t.to(dtype)


def _run(inputs, kw):
    leaves = [None if t is None else t.detach().clone().requires_grad_(True) for t in inputs]
    out = pcops.chamfer_distance(leaves[0], leaves[1], x_normals=leaves[2], y_normals=leaves[3], **kw)
    outs = []
    for part in out:
        if part is not None:
            outs.extend(part if isinstance(part, tuple) else (part,))
    total = sum((o * (1.0 + 0.25 * i)).sum() for i, o in enumerate(outs))
    if total.requires_grad:
        total.backward()
    return outs, [None if t is None else t.grad for t in leaves]


def assert_fused_matches(inputs, **kw):
    got_out, got_grad = _run(inputs, kw)
    with unfused():
        want_out, want_grad = _run(inputs, kw)
    assert len(got_out) == len(want_out)
    for g, w in zip(got_out, want_out):
        assert same_bits(g, w), f"values differ: {kw}"
    for name, g, w in zip(("x", "y", "x_normals", "y_normals"), got_grad, want_grad):
        assert (g is None) == (w is None), name
        if g is not None:
            assert same_bits(g, w), f"{name}.grad differs in {(g != w).sum().item()} elements: {kw}"


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(1234)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm", [1, 2])
@pytest.mark.parametrize("kind", ["random", "ties"])
def test_chamfer_fused_equals_unfused(gen, dtype, norm, kind):
    n, p1, p2 = 3, 70, 55
    x, y = _points(gen, n, p1, 3, dtype, kind), _points(gen, n, p2, 3, dtype, kind)
    nx, ny = _points(gen, n, p1, 3, dtype, "random") - 0.5, _points(gen, n, p2, 3, dtype, "random") - 0.5
    lx, ly = torch.tensor([p1, 0, 17]), torch.tensor([p2, 9, 0])  # padded and zero-length clouds
    weights = torch.tensor([0.5, 2.0, 1.0], dtype=dtype)
    profiles = [  # (single_directional, weights, normals, lengths)
        (False, None, False, False), (True, weights, False, True), (False, weights, True, True),
        (False, None, True, False), (True, None, False, True),
    ]
    for pr, br in itertools.product(["mean", "sum", "max", None], ["mean", "sum", None]):
        if pr is None and br is not None:
            continue
        for single, w, normals, lengths in profiles:
            if pr == "max" and normals:
                continue
            kw = dict(weights=w, batch_reduction=br, point_reduction=pr, norm=norm, single_directional=single)
            if lengths:
                kw.update(x_lengths=lx, y_lengths=ly)
            assert_fused_matches([x, y, nx, ny] if normals else [x, y, None, None], **kw)


@pytest.mark.parametrize("d", [1, 2, 5])
def test_chamfer_fused_any_dimension_and_half(gen, d):
    for dtype, norm, kind in itertools.product((torch.float32, torch.float64), (1, 2), ("random", "ties")):
        x, y = _points(gen, 2, 40, d, dtype, kind), _points(gen, 2, 33, d, dtype, kind)
        assert_fused_matches([x, y, None, None], norm=norm)
        assert_fused_matches([x, y, None, None], norm=norm, point_reduction=None, batch_reduction=None)
    for dtype in (torch.float16, torch.bfloat16):
        x, y = _points(gen, 2, 40, d, dtype, "ties"), _points(gen, 2, 33, d, dtype, "random")
        assert_fused_matches([x, y, None, None], point_reduction=None, batch_reduction=None)


def test_chamfer_fused_empty_and_non_finite(gen):
    x, y = _points(gen, 2, 20, 3, torch.float32, "random"), _points(gen, 2, 15, 3, torch.float32, "random")
    assert_fused_matches([x, y[:, :0], None, None])
    assert_fused_matches([x[:, :0], y[:, :0], None, None], point_reduction="max")
    assert_fused_matches([x[:0], y[:0], None, None])
    x[0, 3, 1] = float("inf")
    x[1, 5, 0] = float("nan")  # a padding row holding NaN: 0 in the value, NaN in the gradient
    for norm in (1, 2):
        assert_fused_matches([x, y, None, None], norm=norm, x_lengths=torch.tensor([20, 4]),
                             point_reduction="sum", batch_reduction=None)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm", [1, 2])
def test_pair_operator_and_backward(gen, dtype, norm):
    """The operator directly: idx with -1 and repeated targets, a strided (broadcast) upstream
    gradient, strided coordinates; against autograd of the unfused formula."""
    x = _points(gen, 3, 50, 4, dtype, "ties")
    y = _points(gen, 3, 12, 4, dtype, "ties").transpose(1, 2).contiguous().transpose(1, 2)
    idx = torch.randint(-1, 12, (3, 50), generator=gen)
    out = torch.ops.pcops._chamfer_pair_distance(x, y, idx, norm)
    a, b = x.clone().requires_grad_(True), y.clone().requires_grad_(True)
    want = cd._masked_pair_distance(a, b, idx, norm)
    assert same_bits(out, want.detach())
    for grad in (torch.randn(3, 50, generator=gen, dtype=dtype), torch.randn(3, 1, generator=gen,
                                                                               dtype=dtype).expand(3, 50)):
        ga, gb = torch.autograd.grad(want, (a, b), grad, retain_graph=True)
        gx, gy = torch.ops.pcops._chamfer_pair_distance_backward(grad, x, y, idx, norm)
        assert same_bits(gx, ga) and same_bits(gy, gb)
    # an empty y: every index is -1, distances +0, gradients from differences against +0
    e = torch.full((3, 50), -1)
    assert same_bits(torch.ops.pcops._chamfer_pair_distance(x, y[:, :0], e, norm), torch.zeros(3, 50, dtype=dtype))
    gx, gy = torch.ops.pcops._chamfer_pair_distance_backward(torch.ones(3, 50, dtype=dtype), x, y[:, :0], e, norm)
    assert gy.shape == (3, 0, 4) and not bool(gx.ne(0).any())


def test_pair_operator_errors():
    x, y = torch.rand(2, 5, 3), torch.rand(2, 4, 3)
    idx = torch.zeros(2, 5, dtype=torch.int64)
    with pytest.raises(IndexError, match="idx"):
        torch.ops.pcops._chamfer_pair_distance(x, y, torch.full((2, 5), 4), 2)
    with pytest.raises(ValueError, match="norm"):
        torch.ops.pcops._chamfer_pair_distance(x, y, idx, 3)
    with pytest.raises(TypeError, match="dtype"):
        torch.ops.pcops._chamfer_pair_distance(x, y.double(), idx, 2)
    with pytest.raises(TypeError, match="int64"):
        torch.ops.pcops._chamfer_pair_distance(x, y, idx.int(), 2)
    with pytest.raises(ValueError, match="idx: expected shape"):
        torch.ops.pcops._chamfer_pair_distance(x, y, idx[:, :3], 2)
    with pytest.raises(ValueError, match="dimension"):
        torch.ops.pcops._chamfer_pair_distance(x, torch.rand(2, 4, 2), idx, 2)
    with pytest.raises(ValueError, match="grad: expected shape"):
        torch.ops.pcops._chamfer_pair_distance_backward(torch.ones(2, 4), x, y, idx, 2)
    cx, cy = torch.rand(2, 5), torch.rand(2, 4)
    with pytest.raises(ValueError, match="batch_mode"):
        torch.ops.pcops._chamfer_reduce(cx, cy, None, None, True, 3)
    with pytest.raises(TypeError, match="dtype"):
        torch.ops.pcops._chamfer_reduce(cx, cy.double(), None, None, True, 2)
    with pytest.raises(ValueError, match="x_lengths"):
        torch.ops.pcops._chamfer_reduce(cx, cy, torch.tensor([1, 2, 3]), None, True, 2)
    with pytest.raises(ValueError, match="grad: expected one value"):
        torch.ops.pcops._chamfer_reduce_backward(torch.ones(2), cx, cy, None, None, True, 2)
    torch.library.opcheck(torch.ops.pcops._chamfer_reduce.default, (cx, cy, torch.tensor([5, 0]), None, True, 2))
    torch.library.opcheck(torch.ops.pcops._chamfer_reduce.default, (cx, None, None, None, False, 0))
    torch.library.opcheck(torch.ops.pcops._chamfer_reduce_backward.default,
                          (torch.rand(2), cx, cy, None, None, True, 0))
    torch.library.opcheck(torch.ops.pcops._chamfer_pair_distance.default, (x, y, idx, 2))
    torch.library.opcheck(torch.ops.pcops._chamfer_pair_distance_backward.default,
                          (torch.rand(2, 5), x, y, idx, 1))


def test_second_order_through_unfused_formula(gen):
    """create_graph: the backward runs the unfused formula, so first derivatives keep their bits
    and second derivatives equal the unfused path's (up to the order in which autograd sums their
    contributions)."""
    x, y = _points(gen, 2, 7, 3, torch.float64, "random"), _points(gen, 2, 6, 3, torch.float64, "random")
    lx = torch.tensor([7, 4])
    results = []
    for ctx in (contextlib.nullcontext(), unfused()):
        with ctx:
            a, b = x.clone().requires_grad_(True), y.clone().requires_grad_(True)
            loss, _ = pcops.chamfer_distance(a, b, x_lengths=lx)
            ga, gb = torch.autograd.grad(loss, (a, b), create_graph=True)
            (ga.square().sum() + (gb * b).sum()).backward()
            results.append((ga.detach(), gb.detach(), a.grad, b.grad))
    (ga, gb, _, _), (wa, wb, _, _) = results
    assert same_bits(ga, wa) and same_bits(gb, wb)
    for g, w in zip(results[0][2:], results[1][2:]):
        torch.testing.assert_close(g, w, rtol=1e-14, atol=1e-14)
    for norm in (1, 2):
        def f(p, q):
            return pcops.chamfer_distance(p, q, norm=norm, point_reduction="sum")[0]
        args = (x[:, :4, :2].clone().requires_grad_(True), y[:, :3, :2].clone().requires_grad_(True))
        assert torch.autograd.gradgradcheck(f, args)


@pytest.mark.parametrize("single", [False, True])
@pytest.mark.parametrize("lengths", [False, True])
def test_common_case_is_one_node_with_the_composed_bits(single, lengths):
    """The common case (no weights or normals, mean/sum) is one autograd node whose values and
    gradients equal the composition of the separate fused nodes (_Composed) bitwise."""
    gen = torch.Generator().manual_seed(5)
    x = _points(gen, 3, 40, 3, torch.float32, "ties")
    y = _points(gen, 3, 33, 3, torch.float32, "random")
    kw = dict(single_directional=single, point_reduction="sum", batch_reduction="mean")
    if lengths:
        kw.update(x_lengths=torch.tensor([40, 0, 17]), y_lengths=torch.tensor([33, 5, 0]))
    a, b = x.clone().requires_grad_(True), y.clone().requires_grad_(True)
    loss = pcops.chamfer_distance(a, b, **kw)[0]
    assert type(loss.grad_fn).__name__ == "_ChamferBackward"
    loss.backward()
    saved = cd._Chamfer
    cd._Chamfer = cd._Composed
    try:
        a2, b2 = x.clone().requires_grad_(True), y.clone().requires_grad_(True)
        loss2 = pcops.chamfer_distance(a2, b2, **kw)[0]
        assert type(loss2.grad_fn).__name__ != "_ChamferBackward"
        loss2.backward()
    finally:
        cd._Chamfer = saved
    assert same_bits(loss.detach(), loss2.detach())
    assert same_bits(a.grad, a2.grad) and same_bits(b.grad, b2.grad)
