"""The Pointcept pointops stand-in (pcops.compat.pointops).

Expected values are small hand-checked cases written from upstream's behaviour (PEERS.md section
7): offsets as cumulative cloud ends, int32 indices, float32 Euclidean distances ascending,
``-1`` / ``1e5`` padding, the ball-query annulus with its ``d2 <= 1e-5`` self rule and strided
subsample, FPS from each cloud's first point, grouping's zero row for idx -1 and interpolation's
padded neighbour reading ``feat[-1]``. Brute-force oracles cross-check knn_query, ball_query and
FPS on ragged batches (empty clouds included) on every path the stand-in has (pcops' ragged CPU
operators, and the dense / plain-PyTorch path that CUDA tensors take, run here on the CPU). The
upstream limits are absent: nsample 300 (upstream: <= 128) and 5000 ball-query candidates
(upstream: <= 2048).
"""

from __future__ import annotations

import importlib
import sys

import numpy as np
import pytest
import torch

import pcops.compat as compat
import pcops.compat.pointops as impl
from conftest import isolated_modules

BACKENDS = ("ragged", "dense")


def _ours(key: str) -> bool:
    return key.split(".")[0] in ("pointops",)


@pytest.fixture
def clean():
    with isolated_modules("pointops"):
        yield


ONLY = {n: n == "pointops" for n, s in compat.REGISTRY.items() if s.default}


@pytest.fixture
def po(clean):
    installed = compat.install(**ONLY)
    assert set(installed) == {"pointops"}
    import pointops

    assert installed["pointops"] is pointops and compat.is_stand_in(pointops)
    return pointops


def t(rows, dtype=torch.float32):
    return torch.tensor(rows, dtype=dtype)


def line(xs):
    """Points on the x axis."""
    return torch.tensor([[float(v), 0.0, 0.0] for v in xs], dtype=torch.float32)


def i32(rows):
    return torch.tensor(rows, dtype=torch.int32)


def ragged_cloud(sizes, seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    n = sum(sizes)
    xyz = torch.rand(n, 3, generator=g) * scale
    return xyz, torch.tensor(np.cumsum(sizes), dtype=torch.int32)


def segments(offset):
    ends = [int(v) for v in offset]
    return list(zip([0] + ends[:-1], ends))


def sqdist32(q, p):
    """float32 squared distance as upstream sums it (x, y, z in order)."""
    d = (q - p).numpy().astype(np.float32)
    return (d[..., 0] * d[..., 0] + d[..., 1] * d[..., 1]) + d[..., 2] * d[..., 2]


# --------------------------------------------------------------------------------------------
# layout and registry


def test_layout(po):
    import pointops.grouping
    import pointops.interpolation
    import pointops.query
    import pointops.sampling
    import pointops.utils
    from pointops import (  # noqa: F401
        ball_query, ball_query_and_group, batch2offset, farthest_point_sampling, grouping, grouping2,
        interpolation, interpolation2, knn_query, knn_query_and_group, offset2batch,
    )

    assert pointops.query.knn_query is knn_query is impl.knn_query
    assert pointops.sampling.farthest_point_sampling is farthest_point_sampling
    assert pointops.utils.knn_query_and_group is knn_query_and_group
    assert pointops.__version__.startswith("1.0+pcops")
    for name in ("query_and_group", "random_ball_query", "subtraction", "aggregation",
                 "attention_relation_step", "attention_fusion_step"):
        with pytest.raises(NotImplementedError, match=name):
            getattr(pointops, name)()


def test_registry_default_install_and_uninstall(clean):
    assert compat.REGISTRY["pointops"].default
    mods = compat.install()
    assert "pointops" in mods and compat.is_stand_in(sys.modules["pointops.query"])
    assert "pointops" in compat.installed()
    assert compat.install()["pointops"] is mods["pointops"]  # idempotent
    compat.uninstall("pointops")
    assert not any(_ours(k) for k in sys.modules)
    assert "pointops" not in compat.install(pointops=False)


def test_real_package_is_left_alone(clean, tmp_path, monkeypatch):
    pkg = tmp_path / "pointops"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("REAL = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    assert "pointops" not in compat.install(**ONLY)
    import pointops

    assert pointops.REAL
    ours = compat.install(**ONLY, force=True)["pointops"]
    assert compat.is_stand_in(ours) and sys.modules["pointops"] is ours
    assert compat.uninstall() == ["pointops"]
    assert sys.modules["pointops"] is pointops  # the real one is back


# --------------------------------------------------------------------------------------------
# knn_query


@pytest.mark.parametrize("backend", BACKENDS)
def test_knn_query_hand_checked(backend):
    xyz = line([0, 1, 3, 10, 11])  # clouds {0, 1, 3} and {10, 11}
    new_xyz = line([0.9, 10.25])
    idx, dist = impl._knn(4, xyz, i32([3, 5]), new_xyz, i32([1, 2]), backend)
    assert idx.dtype == torch.int32 and dist.dtype == torch.float32
    assert idx.tolist() == [[1, 0, 2, -1], [3, 4, -1, -1]]
    expected = t([[0.1, 0.9, 2.1, 1e5], [0.25, 0.75, 1e5, 1e5]])
    torch.testing.assert_close(dist, expected, rtol=1e-6, atol=1e-6)


def test_knn_query_public(po):
    xyz = line([0, 1, 3, 10, 11])
    idx, dist = po.knn_query(2, xyz, i32([3, 5]))  # self-query
    assert idx.tolist() == [[0, 1], [1, 0], [2, 1], [3, 4], [4, 3]]
    assert dist[:, 0].tolist() == [0.0] * 5 and dist[:, 1].tolist() == [1.0, 1.0, 2.0, 1.0, 1.0]
    # new_xyz without new_offset (or the reverse) also means a self-query, as upstream.
    assert torch.equal(po.knn_query(2, xyz, i32([3, 5]), line([7]), None)[0], idx)
    # Offsets as int64 tensors or lists; non-contiguous and float16 coordinates.
    assert torch.equal(po.knn_query(2, xyz, [3, 5])[0], idx)
    wide = torch.zeros(5, 6)
    wide[:, ::2] = xyz
    assert torch.equal(po.knn_query(2, wide[:, ::2], torch.tensor([3, 5]))[0], idx)
    assert torch.equal(po.knn_query(2, xyz.half(), i32([3, 5]))[0], idx)
    # Not differentiable.
    req = xyz.clone().requires_grad_()
    _, d = po.knn_query(2, req, i32([3, 5]))
    assert not d.requires_grad


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("k", [0, 1, 7, 40])
def test_knn_query_brute_force_ragged(backend, k):
    sizes, qsizes = [30, 0, 17, 25], [10, 4, 0, 12]  # an empty reference cloud: all padding
    xyz, off = ragged_cloud(sizes, 1)
    new_xyz, new_off = ragged_cloud(qsizes, 2)
    idx, dist = impl._knn(k, xyz, off, new_xyz, new_off, backend)
    assert idx.shape == (new_xyz.shape[0], k)
    for (xs, xe), (ys, ye) in zip(segments(off), segments(new_off)):
        for q in range(ys, ye):
            d2 = sqdist32(new_xyz[q], xyz[xs:xe])
            order = np.lexsort((np.arange(xe - xs), d2))[:k]
            want_idx = [xs + int(j) for j in order] + [-1] * (k - len(order))
            want_dist = [float(np.sqrt(d2[j])) for j in order] + [1e5] * (k - len(order))
            assert idx[q].tolist() == want_idx
            assert dist[q].tolist() == torch.tensor(want_dist, dtype=torch.float32).tolist()


@pytest.mark.parametrize("backend", BACKENDS)
def test_knn_query_no_128_cap(backend):
    xyz, off = ragged_cloud([500, 200], 3)
    idx, dist = impl._knn(300, xyz, off, None, None, backend)
    assert idx.shape == (700, 300)
    assert bool((idx[:500] >= 0).all()) and bool((idx[:500] < 500).all())
    assert bool((idx[500:, :200] >= 500).all()) and bool((idx[500:, 200:] == -1).all())
    assert bool((dist[500:, 200:] == 1e5).all())
    assert bool((dist[:, 1:] >= dist[:, :-1]).all())
    d2 = sqdist32(xyz[:500].unsqueeze(1), xyz[:500].unsqueeze(0))
    want = np.sort(d2, axis=1)[:, :300]
    assert np.array_equal(dist[:500].numpy(), np.sqrt(want).astype(np.float32))
    # Each row holds distinct indices.
    assert all(len(set(r)) == 300 for r in idx[:500].tolist())


def test_knn_query_empty_inputs(po):
    idx, dist = po.knn_query(3, torch.zeros(0, 3), i32([0, 0]), torch.zeros(2, 3), i32([1, 2]))
    assert idx.tolist() == [[-1] * 3] * 2 and dist.tolist() == [[1e5] * 3] * 2
    idx, dist = po.knn_query(3, line([1, 2]), i32([2]), torch.zeros(0, 3), i32([0]))
    assert idx.shape == (0, 3) and idx.dtype == torch.int32


# --------------------------------------------------------------------------------------------
# ball_query


@pytest.mark.parametrize("backend", BACKENDS)
def test_ball_query_annulus_hand_checked(backend):
    # d = 0 and 0.002 (d2 = 4e-6 <= 1e-5) are inside the "self" rule; 0.5 < min_r; 1.0 in the
    # annulus [0.6, 1.2); 1.5 outside. Sorted by distance: 0, 4, 2.
    xyz = line([0, 0.5, 1.0, 1.5, 0.002])
    idx, dist = impl._ball(5, 1.2, 0.6, xyz, i32([5]), line([0]), i32([1]), backend)
    assert idx.dtype == torch.int32 and dist.dtype == torch.float32
    assert idx.tolist() == [[0, 4, 2, -1, -1]]
    torch.testing.assert_close(dist, t([[0, 0.002, 1.0, 1e5, 1e5]]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_ball_query_boundaries(backend):
    xyz = line([0, 1, 2, 3])
    # max_r is strict (d = 2 excluded), min_r inclusive (d = 1 included).
    idx, _ = impl._ball(4, 2.0, 1.0, xyz, i32([4]), line([0]), i32([1]), backend)
    assert idx.tolist() == [[0, 1, -1, -1]]
    idx, _ = impl._ball(4, 2.0000002, 1.0000001, xyz, i32([4]), line([0]), i32([1]), backend)
    assert idx.tolist() == [[0, 2, -1, -1]]
    # A tiny max_radius still returns the point itself (d2 <= 1e-5 rule).
    idx, dist = impl._ball(2, 1e-6, 0.0, xyz, i32([4]), line([0.003]), i32([1]), backend)
    assert idx.tolist() == [[0, -1]] and abs(float(dist[0, 0]) - 0.003) < 1e-7


@pytest.mark.parametrize("backend", BACKENDS)
def test_ball_query_strided_subsample(backend):
    # 10 candidates, nsample 4: sorted positions floor(i * 10 / 4) = 0, 2, 5, 7. The distances
    # are the true ones (upstream writes the candidate's index into dist2 here, a bug).
    xyz = line(range(10))
    idx, dist = impl._ball(4, 100.0, 0.0, xyz, i32([10]), line([0]), i32([1]), backend)
    assert idx.tolist() == [[0, 2, 5, 7]]
    assert dist.tolist() == [[0.0, 2.0, 5.0, 7.0]]
    # Sorted by distance before striding: a query at 9.1 sees 9, 8, 7, ... 0.
    idx, _ = impl._ball(3, 100.0, 0.0, xyz, i32([10]), line([9.1]), i32([1]), backend)
    assert idx.tolist() == [[9, 6, 3]]  # positions 0, 3, 6 of [9, 8, ..., 0]


def _ball_oracle(nsample, max_r, min_r, xyz, off, new_xyz, new_off):
    r2 = np.float32(max_r) * np.float32(max_r)
    m2 = np.float32(min_r) * np.float32(min_r)
    out_idx, out_dist = [], []
    for (xs, xe), (ys, ye) in zip(segments(off), segments(new_off)):
        for q in range(ys, ye):
            d2 = sqdist32(new_xyz[q], xyz[xs:xe])
            cand = np.nonzero((d2 <= np.float32(1e-5)) | ((d2 >= m2) & (d2 < r2)))[0]
            cand = cand[np.lexsort((cand, d2[cand]))]
            cnt = len(cand)
            pick = cand if cnt <= nsample else cand[[i * cnt // nsample for i in range(nsample)]]
            out_idx.append([xs + int(j) for j in pick] + [-1] * (nsample - len(pick)))
            out_dist.append([float(np.sqrt(d2[j])) for j in pick] + [1e5] * (nsample - len(pick)))
    return out_idx, torch.tensor(out_dist, dtype=torch.float32).reshape(-1, nsample).tolist()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "nsample,max_r,min_r", [(8, 0.3, 0.0), (16, 0.5, 0.2), (1, 0.4, 0.0), (64, 2.0, 0.0)]
)
def test_ball_query_brute_force_ragged(backend, nsample, max_r, min_r):
    sizes, qsizes = [40, 0, 25, 33], [9, 3, 0, 11]
    xyz, off = ragged_cloud(sizes, 4)
    new_xyz, new_off = ragged_cloud(qsizes, 5)
    idx, dist = impl._ball(nsample, max_r, min_r, xyz, off, new_xyz, new_off, backend)
    want_idx, want_dist = _ball_oracle(nsample, max_r, min_r, xyz, off, new_xyz, new_off)
    assert idx.tolist() == want_idx
    assert dist.tolist() == want_dist


@pytest.mark.parametrize("backend", BACKENDS)
def test_ball_query_no_2048_candidate_limit(backend):
    # 5000 points, every one a candidate: upstream's kernel holds 2048 at most.
    xyz, off = ragged_cloud([5000, 100], 6)
    new_xyz, new_off = xyz[[0, 1, 5000]].clone(), i32([2, 3])
    idx, dist = impl._ball(3000, 10.0, 0.0, xyz, off, new_xyz, new_off, backend)
    want_idx, want_dist = _ball_oracle(3000, 10.0, 0.0, xyz, off, new_xyz, new_off)
    assert idx.tolist() == want_idx and dist.tolist() == want_dist
    assert bool((idx[:2] >= 0).all()) and int(idx[0, -1]) >= 0  # subsampled from 5000
    assert idx[2, :100].min() == 5000 and bool((idx[2, 100:] == -1).all())


def test_ball_query_public(po):
    xyz = line([0, 1, 2, 10, 10.5])
    idx, dist = po.ball_query(3, 1.5, 0.0, xyz, i32([3, 5]))
    assert idx.tolist() == [[0, 1, -1], [1, 0, 2], [2, 1, -1], [3, 4, -1], [4, 3, -1]]
    assert dist[3].tolist() == [0.0, 0.5, 1e5]


# --------------------------------------------------------------------------------------------
# farthest_point_sampling


def _fps_oracle(xyz, off, new_off):
    out = []
    for (s, e), (ns, ne) in zip(segments(off), segments(new_off)):
        count = ne - ns
        if count == 0:
            continue
        pts = xyz[s:e]
        mind = np.full(e - s, 1e10, dtype=np.float32)
        cur = 0
        picks = [0]
        for _ in range(count - 1):
            mind = np.minimum(mind, sqdist32(pts, pts[cur]))
            cur = int(np.argmax(mind))  # first maximum: the lower index wins ties
            picks.append(cur)
        out += [s + p for p in picks]
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_fps_hand_checked(backend):
    # Cloud 0: 0, 1, 5, 10 -> 0, then 10 (idx 3), then 5 (min(5, 5)), then 1; two more samples
    # than points repeat the first point. Cloud 1: 100, 100.1, 102 -> 4, then 6.
    xyz = line([0, 1, 5, 10, 100, 100.1, 102])
    out = impl._fps(xyz, i32([4, 7]), i32([6, 8]), backend)
    assert out.dtype == torch.int32
    assert out.tolist() == [0, 3, 2, 1, 0, 0, 4, 6]


@pytest.mark.parametrize("backend", BACKENDS)
def test_fps_brute_force_ragged(backend):
    xyz, off = ragged_cloud([50, 0, 31, 64], 7)
    new_off = torch.tensor(np.cumsum([12, 0, 31, 16]), dtype=torch.int32)
    out = impl._fps(xyz, off, new_off, backend)
    assert out.tolist() == _fps_oracle(xyz, off, new_off)


def test_fps_public(po):
    xyz, off = ragged_cloud([20, 30], 8)
    out = po.farthest_point_sampling(xyz, off, i32([5, 15]))
    assert out.shape == (15,) and out.dtype == torch.int32
    assert out[0] == 0 and out[5] == 20
    assert po.farthest_point_sampling(xyz, off, i32([0, 0])).shape == (0,)


# --------------------------------------------------------------------------------------------
# grouping, interpolation


def test_grouping_hand_checked(po):
    feat = t([[1, 2], [3, 4], [5, 6]])
    xyz = line([0, 1, 2])
    new_xyz = line([0.5, 2.5])
    idx = i32([[1, -1], [0, 2]])
    g = po.grouping(idx, feat, xyz, new_xyz)
    assert g.tolist() == [[[3, 4], [0, 0]], [[1, 2], [5, 6]]]
    gx = po.grouping(idx, feat, xyz, new_xyz, with_xyz=True)
    assert gx.shape == (2, 2, 5)
    assert gx.tolist() == [
        [[0.5, 0, 0, 3, 4], [0, 0, 0, 0, 0]],  # idx -1: relative xyz masked to 0, zero feature
        [[-2.5, 0, 0, 1, 2], [-0.5, 0, 0, 5, 6]],
    ]
    # new_xyz defaults to xyz; int64 idx works too.
    g2 = po.grouping(idx.long(), feat, xyz, with_xyz=False)
    assert torch.equal(g2, g)
    assert torch.equal(po.grouping2(feat, idx), g)


def test_grouping_gradients(po):
    g = torch.Generator().manual_seed(9)
    feat = torch.randn(6, 4, dtype=torch.float64, generator=g, requires_grad=True)
    xyz = torch.randn(6, 3, dtype=torch.float64, generator=g, requires_grad=True)
    new_xyz = torch.randn(3, 3, dtype=torch.float64, generator=g, requires_grad=True)
    idx = i32([[0, 5, -1, 5], [2, 2, 3, -1], [-1, -1, -1, 1]])
    assert torch.autograd.gradcheck(lambda f, x, c: po.grouping(idx, f, x, c, with_xyz=True),
                                    (feat, xyz, new_xyz))
    assert torch.autograd.gradcheck(lambda f: po.grouping2(f, idx), (feat,))
    # The feature gradient is a scatter-add of the output gradient; idx -1 contributes nothing.
    out = po.grouping(idx, feat, xyz, new_xyz)
    out.sum().backward()
    counts = torch.bincount(idx[idx >= 0].long(), minlength=6).to(torch.float64)
    assert torch.equal(feat.grad, counts.unsqueeze(1).expand(6, 4))


@pytest.mark.parametrize("backend", BACKENDS)
def test_interpolation_hand_checked(po, backend, monkeypatch):
    monkeypatch.setattr(impl, "_backend", lambda device: backend)
    xyz = line([0, 1])
    feat = t([[1.0, 10.0], [3.0, 30.0]])
    new_xyz = line([0.25])
    # Weights 1/0.25 : 1/0.75 = 3 : 1 -> 0.75 * 1 + 0.25 * 3 = 1.5.
    out = po.interpolation(xyz, new_xyz, feat, i32([2]), i32([1]), k=2)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, t([[1.5, 15.0]]))
    # k = 3 with two references: the padded neighbour (idx -1, dist 1e5) reads feat[-1] with
    # weight (1 / (1e5 + 1e-8)) / sum, as upstream.
    out3 = po.interpolation(xyz, new_xyz, feat, i32([2]), i32([1]), k=3)
    w = torch.tensor([1 / 0.25, 1 / 0.75, 1 / 1e5], dtype=torch.float32)
    w = w / w.sum()
    want = w[0] * feat[0] + w[1] * feat[1] + w[2] * feat[1]
    torch.testing.assert_close(out3, want.unsqueeze(0))
    assert torch.equal(po.interpolation2(xyz, new_xyz, feat, i32([2]), i32([1]), k=3), out3)


def test_interpolation_brute_force_and_gradient(po):
    xyz, off = ragged_cloud([20, 15], 10)
    new_xyz, new_off = ragged_cloud([7, 5], 11)
    g = torch.Generator().manual_seed(12)
    feat = torch.randn(35, 4, dtype=torch.float64, generator=g, requires_grad=True)
    out = po.interpolation(xyz, new_xyz, feat, off, new_off)
    assert out.shape == (12, 4) and out.dtype == torch.float64
    for (xs, xe), (ys, ye) in zip(segments(off), segments(new_off)):
        for q in range(ys, ye):
            d = torch.from_numpy(np.sqrt(sqdist32(new_xyz[q], xyz[xs:xe])))
            near = torch.argsort(d, stable=True)[:3]
            w = 1.0 / (d[near] + 1e-8)
            w = (w / w.sum()).to(torch.float64)
            want = (feat[xs + near] * w.unsqueeze(1)).sum(0)
            torch.testing.assert_close(out[q], want, rtol=1e-6, atol=1e-7)
    assert torch.autograd.gradcheck(lambda f: po.interpolation(xyz, new_xyz, f, off, new_off), (feat,))
    # xyz gets no gradient (upstream's query is not differentiable).
    x = xyz.clone().requires_grad_()
    assert not po.interpolation(x, new_xyz, feat.detach(), off, new_off).requires_grad


# --------------------------------------------------------------------------------------------
# utils


def test_query_and_group(po):
    xyz, off = ragged_cloud([12, 9], 13)
    feat = torch.randn(21, 5)
    grouped, idx = po.knn_query_and_group(feat, xyz, off, nsample=4, with_xyz=True)
    assert torch.equal(idx, po.knn_query(4, xyz, off)[0])
    assert torch.equal(grouped, po.grouping(idx, feat, xyz, None, True))
    grouped, idx2 = po.knn_query_and_group(feat, xyz, idx=idx)
    assert idx2 is idx and grouped.shape == (21, 4, 5)
    grouped, idx = po.ball_query_and_group(feat, xyz, off, max_radio=0.4, nsample=6)
    assert torch.equal(idx, po.ball_query(6, 0.4, 0, xyz, off)[0])
    assert torch.equal(grouped, po.grouping(idx, feat, xyz))
    with pytest.raises(ValueError, match="nsample"):
        po.knn_query_and_group(feat, xyz, off)


def test_batch_offset_helpers(po):
    batch = torch.tensor([0, 0, 1, 1, 1, 3])
    off = po.batch2offset(batch)
    assert off.dtype == torch.int32 and off.tolist() == [2, 5, 5, 6]
    back = po.offset2batch(off)
    assert back.dtype == torch.int64 and back.tolist() == batch.tolist()


# --------------------------------------------------------------------------------------------
# errors


def test_errors(po):
    xyz = line([0, 1, 2])
    with pytest.raises(ValueError, match="last offset"):
        po.knn_query(2, xyz, i32([2]))
    with pytest.raises(ValueError, match="non-decreasing"):
        po.knn_query(2, xyz, i32([2, 1, 3]))
    with pytest.raises(ValueError, match="clouds"):
        po.knn_query(2, xyz, i32([3]), line([0, 1]), i32([1, 2]))
    with pytest.raises(TypeError, match="float32"):
        po.knn_query(2, xyz.double(), i32([3]))
    with pytest.raises(TypeError, match="integer"):
        po.knn_query(2, xyz, torch.tensor([3.0]))
    with pytest.raises(ValueError, match=r"\(n, 3\)"):
        po.knn_query(2, torch.zeros(3, 2), i32([3]))
    with pytest.raises(ValueError, match="nsample"):
        po.knn_query(-1, xyz, i32([3]))
    with pytest.raises(TypeError, match="nsample"):
        po.knn_query(2.0, xyz, i32([3]))
    with pytest.raises(ValueError, match="min_radius"):
        po.ball_query(2, 0.5, 0.5, xyz, i32([3]))
    with pytest.raises(ValueError, match="empty cloud"):
        po.farthest_point_sampling(xyz, i32([0, 3]), i32([1, 2]))
    with pytest.raises(ValueError, match="clouds"):
        po.farthest_point_sampling(xyz, i32([3]), i32([1, 2]))
    with pytest.raises(ValueError, match="idx"):
        po.grouping(i32([[3]]), torch.zeros(3, 2), xyz)
    with pytest.raises(ValueError, match="feat"):
        po.grouping(i32([[0]]), torch.zeros(2, 2), xyz)


@pytest.mark.parametrize("backend", BACKENDS)
def test_ties_infinite_radius_and_integer_likes(backend):
    # Duplicates tie: the lower index first (upstream's heap order is unspecified there).
    xyz = line([2, 1, 2, 1, 2])
    idx, dist = impl._knn(5, xyz, [5], line([1.5]), [1], backend)
    assert idx.tolist() == [[0, 1, 2, 3, 4]] and dist.tolist() == [[0.5] * 5]
    idx, _ = impl._ball(3, 1.0, 0.0, xyz, [5], line([1.5]), [1], backend)
    assert idx.tolist() == [[0, 1, 3]]  # 5 candidates: positions floor(i * 5 / 3) = 0, 1, 3
    idx, _ = impl._ball(5, float("inf"), 0.0, xyz, [5], line([1.5]), [1], backend)
    assert idx.tolist() == [[0, 1, 2, 3, 4]]
    idx, _ = impl._knn(np.int64(2), xyz, torch.tensor([5]), None, None, backend)
    assert idx.tolist() == [[0, 2], [1, 3], [0, 2], [1, 3], [0, 2]]
    assert torch.equal(impl._knn(torch.tensor(2), xyz, [5], None, None, backend)[0], idx)
