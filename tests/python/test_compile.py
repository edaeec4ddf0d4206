"""torch.library.opcheck for every operator and torch.compile(fullgraph=True) tracing, static and
dynamic shapes (the fake kernels registered in pcops.ops)."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.testing import CompileCounter

import pcops


def _inputs(B=2, M=7, N=11, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.rand(B, M, 3, generator=g).to(dtype).requires_grad_()
    r = torch.rand(B, N, 3, generator=g).to(dtype).requires_grad_()
    return q, r


def _opcheck_cases():
    q, r = _inputs()
    qh, rh = _inputs(dtype=torch.float16, seed=1)
    q5 = torch.rand(2, 9, 5).requires_grad_()
    nc = torch.rand(2, 3, 9).transpose(1, 2).requires_grad_()  # non-contiguous [2, 9, 3]
    fps = torch.ops.pcops.furthest_point_sample.default
    knn = torch.ops.pcops.knn.default
    ball = torch.ops.pcops.ball_query.default
    return [
        ("fps", fps, (q, 4, 1, None, False)),
        ("fps-lengths", fps, (r, 6, 0, torch.tensor([3, 11]), False)),
        ("fps-5d", fps, (q5, 3, 0, None, False)),
        ("fps-skip", fps, (nc, 5, 0, None, True)),
        ("knn", knn, (q, r, 3, None, None)),
        ("knn-lengths", knn, (q, r, 5, torch.tensor([7, 2]), torch.tensor([11, 3], dtype=torch.int32))),
        ("knn-half", knn, (qh, rh, 2, None, None)),
        ("knn-k0", knn, (q, r, 0, None, None)),
        ("ball", ball, (q, r, 0.5, 4, None, None)),
        ("ball-half-lengths", ball, (qh, rh, 0.5, 4, torch.tensor([7, 2]), torch.tensor([0, 11]))),
        ("ball-noncontig", ball, (nc, r[:, :, :], 0.4, 3, None, None)),
    ]


@pytest.mark.parametrize("case", _opcheck_cases(), ids=lambda c: c[0])
def test_opcheck(case):
    _, op, args = case
    torch.library.opcheck(op, args)  # schema, autograd registration, fake tensor, aot dispatch


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_opcheck_backward(dtype):
    q, r = _inputs(dtype=dtype)
    _, idx = pcops.ball_query(q, r, 0.6, 4)
    assert (idx >= 0).any() and (idx < 0).any()
    grad = torch.rand(idx.shape).requires_grad_()
    torch.library.opcheck(torch.ops.pcops._ball_query_backward.default, (grad, q, r, idx))


def _pipeline(q, r, k, K, M):
    d, i = pcops.knn(q, r, k)
    d2, j = pcops.ball_query(q, r, 0.4, K)
    s = pcops.furthest_point_sample(r, M)
    return d.sum(-1) + d2.sum(-1), i, j, s


SHAPES = [(2, 7, 11), (3, 9, 20), (1, 30, 40), (4, 5, 64)]


@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_fullgraph_matches_eager(dynamic):
    torch._dynamo.reset()
    compiled = torch.compile(_pipeline, fullgraph=True, dynamic=dynamic, backend="aot_eager")
    for B, M, N in SHAPES:
        g = torch.Generator().manual_seed(B * 100 + N)
        q, r = torch.rand(B, M, 3, generator=g), torch.rand(B, N, 3, generator=g)
        for got, expect in zip(compiled(q, r, 3, 4, 5), _pipeline(q, r, 3, 4, 5)):
            assert torch.equal(got, expect)


def test_compile_dynamic_does_not_recompile_per_shape():
    torch._dynamo.reset()
    counter = CompileCounter()
    compiled = torch.compile(_pipeline, fullgraph=True, dynamic=True, backend=counter)
    # Sizes >= 2 (0 and 1 are always specialised) and != 3: dynamo's duck sizing would give a
    # size equal to the coordinate count D = 3 the same symbol, which the D == 3 check fixes.
    for B, M, N, k, K, S in [(2, 7, 11, 2, 4, 5), (4, 9, 20, 5, 6, 7), (5, 12, 64, 4, 9, 8)]:
        q, r = torch.rand(B, M, 3), torch.rand(B, N, 3)
        for got, expect in zip(compiled(q, r, k, K, S), _pipeline(q, r, k, K, S)):
            assert torch.equal(got, expect)
    assert counter.frame_count == 1


def test_compile_dynamic_sizes_derived_from_shapes():
    # Counts computed from symbolic sizes stay symbolic (SymInt in the schemas): no recompile.
    def sample_and_group(points):
        centres = pcops.furthest_point_sample(points, points.shape[1] // 4)
        b = torch.arange(points.shape[0]).unsqueeze(1)
        new_xyz = points[b, centres]
        d, idx = pcops.knn(new_xyz, points, points.shape[1] // 8)
        return centres, idx

    torch._dynamo.reset()
    counter = CompileCounter()
    compiled = torch.compile(sample_and_group, fullgraph=True, dynamic=True, backend=counter)
    for B, N in [(2, 40), (4, 64), (5, 96)]:
        pts = torch.rand(B, N, 3)
        for got, expect in zip(compiled(pts), sample_and_group(pts)):
            assert torch.equal(got, expect)
    assert counter.frame_count == 1


def _loss(q, r):
    d2, idx = pcops.ball_query(q, r, 0.4, 6)
    d, _ = pcops.knn(q.detach(), r.detach(), 2)
    return (d2 * d2).sum() + d.sum()


def test_compile_dynamic_with_backward():
    torch._dynamo.reset()
    counter = CompileCounter()
    compiled = torch.compile(_loss, fullgraph=True, dynamic=True, backend="aot_eager")
    for B, M, N in [(2, 7, 11), (4, 9, 20), (5, 12, 40)]:
        q, r = _inputs(B, M, N, seed=N)
        got = torch.autograd.grad(compiled(q, r), (q, r))
        expect = torch.autograd.grad(_loss(q, r), (q, r))
        for a, b in zip(got, expect):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_compile_inductor_dynamic():
    # The default backend generates code around the operators (forward only: compiling the
    # backward with inductor as well doubles this test's time for no extra coverage of pcops).
    torch._dynamo.reset()

    def fn(q, r):
        d2, idx = pcops.ball_query(q, r, 0.4, 6)
        d, i = pcops.knn(q, r, 2)
        s = pcops.furthest_point_sample(r, r.shape[1] // 4)
        return (d2 * d2).sum(-1) + d.sum(-1), idx, i, s

    compiled = torch.compile(fn, fullgraph=True, dynamic=True)
    for B, M, N in [(2, 7, 11), (4, 9, 20)]:
        q, r = torch.rand(B, M, 3), torch.rand(B, N, 3)
        got, expect = compiled(q, r), fn(q, r)
        torch.testing.assert_close(got[0], expect[0], rtol=1e-6, atol=1e-7)
        for a, b in zip(got[1:], expect[1:]):
            assert torch.equal(a, b)


def test_compile_reports_bad_input_at_trace_time():
    torch._dynamo.reset()
    compiled = torch.compile(lambda q, r: pcops.knn(q, r, 4), fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match="k"):
        compiled(torch.rand(1, 3, 3), torch.rand(1, 2, 3))
