"""The PyTorch3D 0.7.9 point-op stand-in (pcops.pytorch3d, and pytorch3d.ops through pcops.compat).

Expected values are hand-checked from upstream's behaviour (PEERS.md section 5): squared L2 / L1
distances, (0, 0) padding of knn_points, (-1, 0) padding of ball_query, first-K-in-index-order
ball query with a strict radius, furthest point sampling in selection order with -1 padding,
float32 sampled points, and the gradients of upstream's knn backward (2 g (p1 - p2) for norm 2,
g sign(p1 - p2) with 0 counted as -1 for norm 1).
"""

from __future__ import annotations

import sys
from types import ModuleType

import pytest
import torch

import pcops.compat as compat
from pcops import pytorch3d as p3d
from conftest import isolated_modules


def _rand(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(*shape, generator=g, dtype=torch.float64).to(dtype)


# ---------------------------------------------------------------------------------------------
# Brute-force references (float64)


def _ref_knn(p1, p2, lengths1, lengths2, norm, K):
    """(dists, idx) with upstream's (0, 0) padding, ordered by (distance, index)."""
    p1, p2 = p1.double(), p2.double()
    n, m, _ = p1.shape
    dists = torch.zeros(n, m, K, dtype=torch.float64)
    idx = torch.zeros(n, m, K, dtype=torch.int64)
    for b in range(n):
        l2 = int(lengths2[b])
        for i in range(int(lengths1[b])):
            diff = p1[b, i] - p2[b, :l2]
            d = diff.abs().sum(-1) if norm == 1 else (diff * diff).sum(-1)
            order = sorted(range(l2), key=lambda j: (float(d[j]), j))[:K]
            for k, j in enumerate(order):
                dists[b, i, k] = d[j]
                idx[b, i, k] = j
    return dists, idx


def _ref_ball(p1, p2, lengths1, lengths2, K, radius):
    p1, p2 = p1.double(), p2.double()
    r2 = float(torch.tensor(radius, dtype=torch.float32) ** 2)
    n, m, _ = p1.shape
    dists = torch.zeros(n, m, K, dtype=torch.float64)
    idx = torch.full((n, m, K), -1, dtype=torch.int64)
    for b in range(n):
        for i in range(int(lengths1[b])):
            k = 0
            for j in range(int(lengths2[b])):
                d = float(((p1[b, i] - p2[b, j]) ** 2).sum())
                if d < r2 and k < K:
                    dists[b, i, k], idx[b, i, k] = d, j
                    k += 1
    return dists, idx


def _ref_fps(points, lengths, counts, starts):
    pts = points.double()
    n = pts.shape[0]
    width = max(counts) if n else 0
    idx = torch.full((n, width), -1, dtype=torch.int64)
    for b in range(n):
        L = int(lengths[b])
        take = min(L, counts[b])
        if take == 0:
            continue
        sel = starts[b]
        closest = torch.full((L,), float("inf"), dtype=torch.float64)
        for k in range(take):
            idx[b, k] = sel
            closest = torch.minimum(closest, ((pts[b, :L] - pts[b, sel]) ** 2).sum(-1))
            sel = int(torch.argmax(closest))  # first maximum: lowest index on ties
    return idx


# ---------------------------------------------------------------------------------------------
# knn_points


def test_knn_points_hand_checked():
    p1 = torch.tensor([[[0.0, 0.0], [3.0, 0.0]]])
    p2 = torch.tensor([[[1.0, 1.0], [0.0, 2.0], [3.0, 0.5], [-1.0, 0.0]]])
    out = p3d.knn_points(p1, p2, K=3)
    assert isinstance(out, p3d.KNN) and out._fields == ("dists", "idx", "knn") and out.knn is None
    # squared distances from (0,0): 2, 4, 9.25, 1 -> idx 3, 0, 1
    assert out.idx.tolist() == [[[3, 0, 1], [2, 0, 1]]]
    assert out.dists.tolist() == [[[1.0, 2.0, 4.0], [0.25, 5.0, 13.0]]]
    assert out.idx.dtype == torch.int64 and out.dists.dtype == torch.float32
    l1 = p3d.knn_points(p1, p2, K=2, norm=1)
    # L1 from (0,0): 2, 2, 3.5, 1 -> ties 0 and 1 at 2 (ascending index)
    assert l1.idx.tolist() == [[[3, 0], [2, 0]]]
    assert l1.dists.tolist() == [[[1.0, 2.0], [0.5, 3.0]]]


def test_knn_points_padding_is_zero_as_upstream():
    p1 = torch.tensor([[[0.0, 0.0], [5.0, 5.0]], [[1.0, 0.0], [9.0, 9.0]]])
    p2 = torch.tensor([[[2.0, 0.0], [0.0, 1.0], [7.0, 7.0]], [[1.0, 1.0], [9.0, 9.0], [0.0, 0.0]]])
    out = p3d.knn_points(p1, p2, lengths1=torch.tensor([2, 1]), lengths2=torch.tensor([2, 1]), K=3,
                         return_nn=True)
    assert out.idx.tolist() == [[[1, 0, 0], [0, 1, 0]], [[0, 0, 0], [0, 0, 0]]]
    assert out.dists.tolist() == [[[1.0, 4.0, 0.0], [34.0, 41.0, 0.0]], [[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]]
    # knn = knn_gather(p2, idx, lengths2): slots past lengths2 are 0.0
    assert out.knn[0, 0].tolist() == [[0.0, 1.0], [2.0, 0.0], [0.0, 0.0]]
    assert out.knn[1, 1].tolist() == [[1.0, 1.0], [0.0, 0.0], [0.0, 0.0]]
    # K larger than P2 pads too
    wide = p3d.knn_points(p1, p2, K=5)
    assert wide.idx.shape == (2, 2, 5) and wide.idx[:, :, 3:].eq(0).all() and wide.dists[:, :, 3:].eq(0).all()


def test_knn_points_ties_ascending_index():
    p2 = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0], [2.0, 0.0]]])
    p1 = torch.zeros(1, 1, 2)
    for norm in (1, 2):
        for sorted_ in (True, False):
            out = p3d.knn_points(p1, p2, K=5, norm=norm, return_sorted=sorted_)
            assert out.idx.tolist() == [[[0, 1, 2, 3, 4]]]
    out64 = p3d.knn_points(p1.double(), p2.double(), K=4)
    assert out64.idx.tolist() == [[[0, 1, 2, 3]]] and out64.dists.dtype == torch.float64


@pytest.mark.parametrize("norm", [1, 2])
@pytest.mark.parametrize("K", [1, 3, 10])
@pytest.mark.parametrize("ragged", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_knn_points_vs_brute_force(norm, K, ragged, dtype):
    n, m, p, d = 3, 17, 24, 5 if norm == 1 else 3
    p1 = _rand(n, m, d, seed=1, dtype=dtype)
    p2 = _rand(n, p, d, seed=2, dtype=dtype)
    if ragged:
        lengths1, lengths2 = torch.tensor([17, 9, 0]), torch.tensor([24, 2, 7])
    else:
        lengths1, lengths2 = torch.full((n,), m), torch.full((n,), p)
    ref_d, ref_i = _ref_knn(p1, p2, lengths1, lengths2, norm, K)
    for return_sorted in (True, False):
        out = p3d.knn_points(p1, p2, lengths1 if ragged else None, lengths2 if ragged else None,
                             norm=norm, K=K, return_nn=True, return_sorted=return_sorted)
        assert out.dists.dtype == dtype and out.idx.dtype == torch.int64
        assert torch.equal(out.idx, ref_i)
        tol = 1e-6 if dtype == torch.float32 else 1e-12
        torch.testing.assert_close(out.dists.double(), ref_d, rtol=tol, atol=tol)
        torch.testing.assert_close(out.knn, p3d.knn_gather(p2, ref_i, lengths2))


def test_knn_points_dims_and_half():
    for d in (1, 2, 8):
        p1, p2 = _rand(2, 6, d, seed=d), _rand(2, 9, d, seed=d + 10)
        out = p3d.knn_points(p1, p2, K=4)
        ref_d, ref_i = _ref_knn(p1, p2, [6, 6], [9, 9], 2, 4)
        assert torch.equal(out.idx, ref_i)
        torch.testing.assert_close(out.dists.double(), ref_d, rtol=1e-6, atol=1e-6)
    h1, h2 = _rand(1, 5, 3, seed=4).half(), _rand(1, 7, 3, seed=5).half()
    out = p3d.knn_points(h1, h2, K=2)
    assert out.dists.dtype == torch.float16
    assert torch.equal(out.idx, _ref_knn(h1, h2, [5], [7], 2, 2)[1])


@pytest.mark.parametrize("norm", [1, 2])
def test_knn_points_gradcheck(norm):
    p1 = _rand(2, 5, 3, seed=7, dtype=torch.float64).requires_grad_()
    p2 = _rand(2, 6, 3, seed=8, dtype=torch.float64).requires_grad_()
    l1, l2 = torch.tensor([5, 3]), torch.tensor([6, 2])
    torch.autograd.gradcheck(lambda a, b: p3d.knn_points(a, b, l1, l2, norm=norm, K=3).dists, (p1, p2))


@pytest.mark.parametrize("norm", [1, 2])
def test_knn_points_gradient_formula(norm):
    """float32 gradients equal upstream's knn_points_backward formula."""
    p1 = _rand(2, 4, 3, seed=11).requires_grad_()
    p2 = _rand(2, 5, 3, seed=12).requires_grad_()
    l2 = torch.tensor([5, 2])
    out = p3d.knn_points(p1, p2, lengths2=l2, norm=norm, K=3)
    g = _rand(2, 4, 3, seed=13)
    gp1, gp2 = torch.autograd.grad(out.dists, (p1, p2), g)
    e1, e2 = torch.zeros_like(p1), torch.zeros_like(p2)
    for b in range(2):
        for i in range(4):
            for k in range(min(int(l2[b]), 3)):
                j = int(out.idx[b, i, k])
                diff = p1[b, i].detach() - p2[b, j].detach()
                grad = 2 * g[b, i, k] * diff if norm == 2 else g[b, i, k] * torch.where(diff > 0, 1.0, -1.0)
                e1[b, i] += grad
                e2[b, j] -= grad
    torch.testing.assert_close(gp1, e1)
    torch.testing.assert_close(gp2, e2)


def test_knn_points_l1_zero_difference_counts_as_minus_one():
    p1 = torch.tensor([[[1.0, 2.0]]], requires_grad=True)
    p2 = torch.tensor([[[1.0, 0.0]]], requires_grad=True)
    out = p3d.knn_points(p1, p2, norm=1)
    assert out.dists.item() == 2.0
    out.dists.sum().backward()
    assert p1.grad.tolist() == [[[-1.0, 1.0]]] and p2.grad.tolist() == [[[1.0, -1.0]]]


def test_knn_gather():
    x = torch.arange(12.0).reshape(2, 3, 2)
    idx = torch.tensor([[[2, 0]], [[1, 2]]])
    assert p3d.knn_gather(x, idx).tolist() == [[[[4.0, 5.0], [0.0, 1.0]]], [[[8.0, 9.0], [10.0, 11.0]]]]
    masked = p3d.knn_gather(x, idx, lengths=torch.tensor([1, 3]))
    assert masked.tolist() == [[[[4.0, 5.0], [0.0, 0.0]]], [[[8.0, 9.0], [10.0, 11.0]]]]
    with pytest.raises(ValueError, match="same batch dimension"):
        p3d.knn_gather(x, idx[:1])


def test_knn_points_errors():
    a, b = torch.rand(2, 4, 3), torch.rand(2, 5, 3)
    with pytest.raises(ValueError, match="Support for 1 or 2 norm."):
        p3d.knn_points(a, b, norm=3)
    with pytest.raises(ValueError, match="batch dimension"):
        p3d.knn_points(a, b[:1])
    with pytest.raises(ValueError, match="point dimension"):
        p3d.knn_points(a, torch.rand(2, 5, 2))
    with pytest.raises(ValueError, match="K"):
        p3d.knn_points(a, b, K=-1)
    with pytest.raises(TypeError, match="K"):
        p3d.knn_points(a, b, K=2.0)
    with pytest.raises(ValueError, match="lengths2"):
        p3d.knn_points(a, b, lengths2=torch.tensor([6, 1]))
    with pytest.raises(ValueError, match="lengths1"):
        p3d.knn_points(a, b, lengths1=torch.tensor([1, 1, 1]))
    with pytest.raises(TypeError, match="dtype"):
        p3d.knn_points(a, b.double())
    with pytest.raises(ValueError, match="3-D"):
        p3d.knn_points(a[0], b[0])


def test_knn_points_empty():
    out = p3d.knn_points(torch.rand(2, 0, 3), torch.rand(2, 4, 3), K=2)
    assert out.dists.shape == (2, 0, 2) and out.idx.shape == (2, 0, 2)
    out = p3d.knn_points(torch.rand(2, 3, 3), torch.rand(2, 4, 3), lengths2=torch.tensor([0, 4]), K=2)
    assert out.idx[0].eq(0).all() and out.dists[0].eq(0).all() and out.dists[1].gt(0).all()
    for norm in (1, 2):  # no reference points at all, or no clouds
        out = p3d.knn_points(torch.rand(2, 3, 3), torch.rand(2, 0, 3), K=2, norm=norm, return_nn=True)
        assert out.idx.eq(0).all() and out.dists.eq(0).all() and out.knn.shape == (2, 3, 2, 3)
        assert p3d.knn_points(torch.rand(0, 3, 3), torch.rand(0, 4, 3), K=2, norm=norm).idx.shape == (0, 3, 2)
    ball = p3d.ball_query(torch.rand(2, 3, 3), torch.rand(2, 0, 3), K=2)
    assert ball.idx.eq(-1).all() and ball.knn.eq(0).all()
    sampled, idx = p3d.sample_farthest_points(torch.rand(2, 0, 3), K=2)
    assert idx.eq(-1).all() and sampled.shape == (2, 2, 3)


# ---------------------------------------------------------------------------------------------
# ball_query


def test_ball_query_hand_checked():
    p1 = torch.tensor([[[0.0, 0.0, 0.0]]])
    p2 = torch.tensor([[[0.3, 0.0, 0.0], [0.5, 0.0, 0.0], [0.1, 0.0, 0.0], [0.0, 0.25, 0.0],
                        [0.2, 0.0, 0.0]]])
    out = p3d.ball_query(p1, p2, K=3, radius=0.5)
    # first 3 in index order strictly inside: 0 (0.09), 2 (0.01), 3 (0.0625); 1 sits on the sphere
    assert out.idx.tolist() == [[[0, 2, 3]]]
    torch.testing.assert_close(out.dists, torch.tensor([[[0.09, 0.01, 0.0625]]]))
    assert out.knn.shape == (1, 1, 3, 3)  # return_nn defaults to True
    assert out.knn[0, 0, 1].tolist() == p2[0, 2].tolist()
    wide = p3d.ball_query(p1, p2, K=6, radius=0.5, return_nn=True)
    assert wide.idx.tolist() == [[[0, 2, 3, 4, -1, -1]]]
    assert wide.dists[0, 0, 4:].tolist() == [0.0, 0.0]
    assert wide.knn[0, 0, 4:].eq(0).all()
    assert p3d.ball_query(p1, p2, K=2, radius=0.5, return_nn=False).knn is None
    cube = p3d.ball_query(p1, p2, K=6, radius=0.5, skip_points_outside_cube=True)
    assert torch.equal(cube.idx, wide.idx)


@pytest.mark.parametrize("case", ["pcops3d", "dim2", "float64"])
def test_ball_query_vs_brute_force(case):
    d = 2 if case == "dim2" else 3
    dtype = torch.float64 if case == "float64" else torch.float32
    p1, p2 = _rand(3, 11, d, seed=21, dtype=dtype), _rand(3, 30, d, seed=22, dtype=dtype)
    lengths1, lengths2 = torch.tensor([11, 4, 0]), torch.tensor([30, 12, 5])
    ref_d, ref_i = _ref_ball(p1, p2, lengths1, lengths2, 6, 0.4)
    out = p3d.ball_query(p1, p2, lengths1, lengths2, K=6, radius=0.4)
    assert torch.equal(out.idx, ref_i)
    assert out.dists.dtype == dtype
    torch.testing.assert_close(out.dists.double(), ref_d, rtol=1e-6, atol=1e-7)
    assert torch.equal(out.knn, p3d.masked_gather(p2, ref_i))


@pytest.mark.parametrize("d", [3, 4])
def test_ball_query_gradients(d):
    p1 = _rand(2, 6, d, seed=31, dtype=torch.float64).requires_grad_()
    p2 = _rand(2, 9, d, seed=32, dtype=torch.float64).requires_grad_()
    l1, l2 = torch.tensor([6, 4]), torch.tensor([9, 5])
    torch.autograd.gradcheck(lambda a, b: p3d.ball_query(a, b, l1, l2, K=4, radius=0.7).dists, (p1, p2))
    # float32 (pcops' kernel for 3-D): upstream's 2 g (p1 - p2)
    a, b = p1.detach().float().requires_grad_(), p2.detach().float().requires_grad_()
    out = p3d.ball_query(a, b, l1, l2, K=4, radius=0.7)
    g = torch.ones_like(out.dists)
    ga, gb = torch.autograd.grad(out.dists, (a, b), g)
    ea, eb = torch.zeros_like(a), torch.zeros_like(b)
    for n in range(2):
        for i in range(6):
            for k in range(4):
                j = int(out.idx[n, i, k])
                if j >= 0:
                    ea[n, i] += 2 * (a[n, i] - b[n, j]).detach()
                    eb[n, j] -= 2 * (a[n, i] - b[n, j]).detach()
    torch.testing.assert_close(ga, ea)
    torch.testing.assert_close(gb, eb)


def test_ball_query_errors():
    a, b = torch.rand(2, 4, 3), torch.rand(2, 5, 3)
    with pytest.raises(ValueError, match="batch dimension"):
        p3d.ball_query(a, b[:1])
    with pytest.raises(ValueError, match="point dimension"):
        p3d.ball_query(a, torch.rand(2, 5, 2))
    with pytest.raises(ValueError, match="radius"):
        p3d.ball_query(a, b, radius=-0.1)
    with pytest.raises(TypeError, match="radius"):
        p3d.ball_query(a, b, radius=torch.tensor(0.2))
    with pytest.raises(ValueError, match="K"):
        p3d.ball_query(a, b, K=-2)
    with pytest.raises(ValueError, match="lengths2"):
        p3d.ball_query(a, b, lengths2=torch.tensor([9, 1]))


# ---------------------------------------------------------------------------------------------
# sample_farthest_points


def test_sample_farthest_points_hand_checked():
    pts = torch.tensor([[[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [3.0, 3.0]],
                        [[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [3.0, 3.0]]])
    sampled, idx = p3d.sample_farthest_points(pts, K=3)
    # from 0: (3,3) is furthest; then (1,1) has min distance 2, the largest
    assert idx.tolist() == [[0, 4, 3], [0, 4, 3]]
    assert sampled[0].tolist() == [[0.0, 0.0], [3.0, 3.0], [1.0, 1.0]]
    # ragged lengths and per-cloud K: cloud 1 sees only 3 points; ties (1,0)/(0,1) -> index 1
    sampled, idx = p3d.sample_farthest_points(pts, lengths=torch.tensor([5, 3]), K=[2, 4])
    assert idx.tolist() == [[0, 4, -1, -1], [0, 1, 2, -1]]
    assert sampled.shape == (2, 4, 2) and sampled[0, 2:].eq(0).all() and sampled[1, 3].eq(0).all()
    assert sampled[1, :3].tolist() == [[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]]
    _, idx = p3d.sample_farthest_points(pts, K=torch.tensor([1, 0]))
    assert idx.tolist() == [[0], [-1]]
    # K > P pads with -1
    _, idx = p3d.sample_farthest_points(pts, K=7)
    assert idx[:, 5:].eq(-1).all() and sorted(idx[0, :5].tolist()) == [0, 1, 2, 3, 4]


def test_sample_farthest_points_vs_reference():
    pts = _rand(4, 40, 5, seed=41)
    lengths = torch.tensor([40, 17, 1, 0])
    counts = [12, 20, 3, 5]
    sampled, idx = p3d.sample_farthest_points(pts, lengths=lengths, K=torch.tensor(counts))
    ref = _ref_fps(pts, lengths, counts, [0, 0, 0, 0])
    assert torch.equal(idx, ref)
    assert torch.equal(sampled, p3d.masked_gather(pts, ref))
    for b in range(4):  # no duplicates among valid entries
        valid = idx[b][idx[b] >= 0]
        assert valid.unique().numel() == valid.numel()


def test_sample_farthest_points_dtype_and_gradients():
    pts = _rand(2, 8, 3, seed=51, dtype=torch.float64).requires_grad_()
    sampled, idx = p3d.sample_farthest_points(pts, K=[3, 5])
    assert sampled.dtype == torch.float32 and idx.dtype == torch.int64
    sampled.sum().backward()
    expected = torch.zeros(2, 8, 3, dtype=torch.float64)
    for b in range(2):
        for j in idx[b][idx[b] >= 0].tolist():
            expected[b, j] += 1.0
    assert torch.equal(pts.grad, expected)


def test_sample_farthest_points_random_start():
    pts = _rand(3, 20, 3, seed=61)
    torch.manual_seed(5)
    _, a = p3d.sample_farthest_points(pts, K=6, random_start_point=True)
    torch.manual_seed(5)
    _, b = p3d.sample_farthest_points(pts, K=6, random_start_point=True)
    assert torch.equal(a, b)
    starts = a[:, 0].tolist()
    assert torch.equal(a, _ref_fps(pts, [20] * 3, [6] * 3, starts))
    seen = set()
    for seed in range(6):
        torch.manual_seed(seed)
        seen.add(tuple(p3d.sample_farthest_points(pts, K=2, random_start_point=True)[1][:, 0].tolist()))
    assert len(seen) > 1  # the start really varies with the generator
    # ragged: the start stays inside each cloud; an empty cloud gives -1 only
    lengths = torch.tensor([20, 3, 0])
    for seed in range(10):
        torch.manual_seed(seed)
        _, idx = p3d.sample_farthest_points(pts, lengths=lengths, K=4, random_start_point=True)
        assert 0 <= idx[0, 0] < 20 and 0 <= idx[1, 0] < 3 and idx[1, 3] == -1 and idx[2].eq(-1).all()
        assert torch.equal(idx, _ref_fps(pts, lengths, [4, 4, 4], [int(idx[0, 0]), int(idx[1, 0]), 0]))


def test_sample_farthest_points_errors():
    pts = torch.rand(2, 6, 3)
    with pytest.raises(ValueError, match="points and lengths must have same batch dimension."):
        p3d.sample_farthest_points(pts, lengths=torch.tensor([6]))
    with pytest.raises(ValueError, match="lengths"):
        p3d.sample_farthest_points(pts, lengths=torch.tensor([7, 6]))
    with pytest.raises(ValueError, match="K and points must have the same batch dimension"):
        p3d.sample_farthest_points(pts, K=[1, 2, 3])
    with pytest.raises(ValueError, match="K"):
        p3d.sample_farthest_points(pts, K=-1)
    with pytest.raises(TypeError, match="K"):
        p3d.sample_farthest_points(pts, K=2.5)
    with pytest.raises(TypeError, match="points"):
        p3d.sample_farthest_points([[0.0]])


def test_masked_gather():
    pts = torch.arange(8.0).reshape(1, 4, 2)
    got = p3d.masked_gather(pts, torch.tensor([[3, -1, 0]]))
    assert got.tolist() == [[[6.0, 7.0], [0.0, 0.0], [0.0, 1.0]]]
    assert p3d.masked_gather(pts, torch.tensor([[[1], [-1]]])).shape == (1, 2, 1, 2)
    with pytest.raises(ValueError, match="batch dimension"):
        p3d.masked_gather(pts, torch.zeros(2, 1, dtype=torch.int64))
    with pytest.raises(ValueError, match="not supported"):
        p3d.masked_gather(pts, torch.zeros(1, dtype=torch.int64))


# ---------------------------------------------------------------------------------------------
# pcops.compat registry entry


@pytest.fixture
def clean():
    with isolated_modules("pytorch3d"):
        yield


def _only_pytorch3d(**extra):
    selection = {name: False for name in compat.REGISTRY}
    selection["pytorch3d"] = True
    return compat.install(**selection, **extra)


def test_compat_off_by_default(clean):
    assert compat.REGISTRY["pytorch3d"].default is False
    installed = compat.install(**{name: False for name in compat.REGISTRY if name != "pytorch3d"})
    assert "pytorch3d" not in installed and "pytorch3d" not in sys.modules


def test_compat_install_uninstall(clean):
    installed = _only_pytorch3d()
    assert set(installed) == {"pytorch3d"}
    import pytorch3d
    import pytorch3d.ops
    from pytorch3d.ops import KNN, ball_query, knn_gather, knn_points, sample_farthest_points
    from pytorch3d.ops.ball_query import ball_query as bq
    from pytorch3d.ops.knn import _KNN
    from pytorch3d.ops.sample_farthest_points import sample_farthest_points as sfp
    from pytorch3d.ops.utils import masked_gather

    assert installed["pytorch3d"] is pytorch3d and compat.is_stand_in(pytorch3d)
    assert compat.is_stand_in(pytorch3d.ops) and pytorch3d.__version__.startswith("0.7.9")
    assert KNN is _KNN is p3d.KNN and bq is ball_query is p3d.ball_query and sfp is sample_farthest_points
    assert knn_points is p3d.knn_points and knn_gather is p3d.knn_gather
    assert masked_gather is p3d.masked_gather
    out = knn_points(torch.zeros(1, 1, 3), torch.ones(1, 2, 3), K=1)
    assert out.dists.item() == 3.0 and out.idx.item() == 0
    assert _only_pytorch3d()["pytorch3d"] is pytorch3d  # idempotent
    assert compat.uninstall("pytorch3d") == ["pytorch3d"]
    assert "pytorch3d" not in sys.modules and "pytorch3d.ops" not in sys.modules
    assert "pytorch3d" not in compat.installed()


def test_compat_real_package_left_alone_unless_forced(clean):
    real = ModuleType("pytorch3d")
    sys.modules["pytorch3d"] = real
    assert "pytorch3d" not in _only_pytorch3d()
    assert sys.modules["pytorch3d"] is real
    forced = _only_pytorch3d(force=True)
    assert sys.modules["pytorch3d"] is forced["pytorch3d"] is not real
    from pytorch3d.ops import knn_points

    assert knn_points is p3d.knn_points
    compat.uninstall()
    assert sys.modules["pytorch3d"] is real
    del sys.modules["pytorch3d"]


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
def test_devices_match_reference(device):
    p1, p2 = _rand(2, 50, 3, seed=71), _rand(2, 80, 3, seed=72)
    l1, l2 = torch.tensor([50, 20]), torch.tensor([80, 33])
    to = lambda *ts: [t.to(device) for t in ts]  # noqa: E731
    for norm in (1, 2):
        out = p3d.knn_points(*to(p1, p2, l1, l2), norm=norm, K=5)
        ref_d, ref_i = _ref_knn(p1, p2, l1, l2, norm, 5)
        assert out.idx.device.type == device and torch.equal(out.idx.cpu(), ref_i)
        torch.testing.assert_close(out.dists.cpu().double(), ref_d, rtol=1e-6, atol=1e-6)
    out = p3d.ball_query(*to(p1, p2, l1, l2), K=8, radius=0.3)
    assert torch.equal(out.idx.cpu(), _ref_ball(p1, p2, l1, l2, 8, 0.3)[1])
    idx = p3d.sample_farthest_points(*to(p2, l2), K=[10, 40])[1]
    assert torch.equal(idx.cpu(), _ref_fps(p2, l2, [10, 40], [0, 0]))
