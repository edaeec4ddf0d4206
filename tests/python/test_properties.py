"""Property tests (hypothesis) of the contracts: random small clouds, including integer grids
(exact ties), duplicates, half precision and lengths, checked against the exact oracle and
against the contract's invariants directly."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import pcops
from pcops import testing as oracle

SETTINGS = settings(max_examples=100, deadline=None)

_finite = st.floats(-8.0, 8.0, width=32, allow_nan=False, allow_infinity=False, allow_subnormal=True)
_grid = st.integers(-2, 2).map(float)


@st.composite
def clouds(draw, min_points=0, max_points=24, dim=3, batch=None):
    """[B, N, D] float32 clouds: arbitrary floats or a small integer grid (many exact ties),
    optionally with duplicated rows."""
    B = draw(st.integers(1, 2)) if batch is None else batch
    N = draw(st.integers(min_points, max_points))
    elements = draw(st.sampled_from([_finite, _grid]))
    arr = draw(hnp.arrays(np.float32, (B, N, dim), elements=elements))
    if N > 1 and draw(st.booleans()):
        src = draw(st.lists(st.integers(0, N - 1), min_size=N, max_size=N))
        arr = arr[:, src]
    return torch.from_numpy(np.ascontiguousarray(arr))


@st.composite
def lengths_for(draw, B, N):
    if not draw(st.booleans()):
        return None
    return torch.tensor(draw(st.lists(st.integers(0, N), min_size=B, max_size=B)), dtype=torch.int64)


# ------------------------------------------------------------------ knn


@SETTINGS
@given(data=st.data(), dim=st.integers(1, 4))
def test_knn_equals_oracle(data, dim):
    ref = data.draw(clouds(min_points=1, dim=dim))
    B, N, _ = ref.shape
    query = data.draw(clouds(dim=dim, batch=B))
    rl = data.draw(lengths_for(B, N))
    ql = data.draw(lengths_for(B, query.shape[1]))
    k = data.draw(st.integers(0, N if rl is None else N + 3))
    dist, idx = pcops.knn(query, ref, k, ql, rl)
    odist, oidx = oracle.knn(query, ref, k, ql, rl)
    assert torch.equal(idx, oidx)
    assert torch.equal(dist, odist)
    # Invariants: sorted by (s, index), indices distinct per query, padding at the end.
    valid = idx >= 0
    assert (valid[..., 1:] <= valid[..., :-1]).all()
    for b in range(B):
        for m in range(query.shape[1]):
            row = idx[b, m][valid[b, m]].tolist()
            assert len(set(row)) == len(row)
            s = oracle.squared_distances(query[b, m : m + 1], ref[b, row])[0] if row else np.zeros(0)
            keys = list(zip(s.tolist(), row))
            assert keys == sorted(keys)


# ------------------------------------------------------------------ ball_query


@SETTINGS
@given(data=st.data())
def test_ball_query_contract(data):
    ref = data.draw(clouds())
    B, N, _ = ref.shape
    query = data.draw(clouds(batch=B))
    radius = data.draw(
        st.one_of(st.just(0.0), st.floats(0.0, 12.0, allow_nan=False), st.sampled_from([1.0, 2.0]))
    )
    K = data.draw(st.integers(0, N + 2))
    rl = data.draw(lengths_for(B, N))
    ql = data.draw(lengths_for(B, query.shape[1]))
    dist2, idx = pcops.ball_query(query, ref, radius, K, ql, rl)
    odist2, oidx = oracle.ball_query(query, ref, radius, K, ql, rl)
    assert torch.equal(idx, oidx) and torch.equal(dist2, odist2)
    r2 = oracle.ball_query_threshold(radius)
    for b in range(B):
        n = N if rl is None else int(rl[b])
        mq = query.shape[1] if ql is None else int(ql[b])
        for m in range(query.shape[1]):
            row = idx[b, m]
            filled = row[row >= 0]
            count = filled.numel()
            assert (row[count:] == -1).all() and (dist2[b, m, count:] == 0).all()  # padding after
            assert (filled[1:] > filled[:-1]).all()  # ascending reference order
            assert (filled < n).all()
            s_all = oracle.squared_distances(query[b, m : m + 1], ref[b, :n])[0]
            matches = np.flatnonzero(s_all < r2) if m < mq else np.zeros(0, dtype=np.int64)
            assert count == min(K, matches.size)
            assert filled.tolist() == matches[:count].tolist()  # the first K matches
            assert (dist2[b, m, :count].numpy() < r2).all()
            assert dist2[b, m, :count].numpy().tobytes() == s_all[filled.numpy()].tobytes()


@SETTINGS
@given(data=st.data())
def test_half_precision_is_exact_conversion(data):
    ref = data.draw(clouds(min_points=1)).half()
    query = data.draw(clouds(batch=ref.shape[0])).half()
    k = data.draw(st.integers(0, ref.shape[1]))
    a = pcops.knn(query, ref, k)
    b = pcops.knn(query.float(), ref.float(), k)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    a = pcops.ball_query(query, ref, 1.5, 5)
    b = pcops.ball_query(query.float(), ref.float(), 1.5, 5)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


# ------------------------------------------------------------------ furthest_point_sample


@SETTINGS
@given(data=st.data(), dim=st.integers(1, 4))
def test_fps_contract(data, dim):
    points = data.draw(clouds(min_points=1, dim=dim))
    B, N, _ = points.shape
    lengths = data.draw(lengths_for(B, N))
    if lengths is not None and (lengths == 0).all():
        lengths[0] = N
    limit = int(lengths[lengths > 0].min()) if lengths is not None else N
    start = data.draw(st.integers(0, limit - 1))
    M = data.draw(st.integers(0, N + 3))
    out = pcops.furthest_point_sample(points, M, start, lengths)
    assert torch.equal(out, oracle.furthest_point_sample(points, M, start, lengths))
    for b in range(B):
        n = N if lengths is None else int(lengths[b])
        row = out[b].tolist()
        if n == 0:
            assert row == [-1] * M
            continue
        if M > 0:
            assert row[0] == start  # the first centre is the start
        steps = min(M, n) if lengths is not None else M
        assert all(i == -1 for i in row[steps:])
        assert all(0 <= i < n for i in row[:steps])
        # Distinct while points remain: each new centre is at s > 0 from every earlier centre,
        # unless every point already is at s = 0 from some centre (then index 0 repeats).
        x = points[b, :n]
        s = oracle.squared_distances(x, x)
        s[~np.isfinite(s)] = 0.0
        for t in range(1, steps):
            prior = row[:t]
            cover = s[:, prior].min(axis=1)
            if cover.max() > 0:
                assert cover[row[t]] == cover.max() and cover[row[t]] > 0
                assert row[t] == int(np.flatnonzero(cover == cover.max())[0])  # smallest index
            else:
                assert row[t] == 0


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_ball_query_gradients_equal_gathered_reimplementation(data):
    ref = data.draw(clouds(min_points=1, max_points=16))
    query = data.draw(clouds(min_points=1, max_points=12, batch=ref.shape[0]))
    if not (torch.isfinite(ref).all() and torch.isfinite(query).all()):
        return
    radius = data.draw(st.floats(0.0, 6.0, allow_nan=False))
    K = data.draw(st.integers(0, 10))
    q = query.clone().requires_grad_()
    r = ref.clone().requires_grad_()
    dist2, idx = pcops.ball_query(q, r, radius, K)
    upstream = torch.from_numpy(
        data.draw(hnp.arrays(np.float32, tuple(dist2.shape), elements=st.floats(-2, 2, width=32)))
    )
    upstream = torch.where(idx < 0, torch.full_like(upstream, float("nan")), upstream)  # must not leak
    got = torch.autograd.grad(dist2, (q, r), upstream, allow_unused=True)
    clean = torch.where(idx < 0, torch.zeros_like(upstream), upstream)
    expect = torch.autograd.grad(oracle.ball_query_dist2_torch(q, r, idx), (q, r), clean, allow_unused=True)
    for a, b in zip(got, expect):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-4)
