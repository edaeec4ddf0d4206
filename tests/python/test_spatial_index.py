"""pcops.SpatialIndex: built once, queried many times, exactly the dense operators' results
(indices and float32 distances, bit for bit) on uniform, spherical, sorted, duplicate-heavy,
lattice (exact ties), varying-density, planar, linear and clustered-with-outlier clouds, real
clouds, non-finite coordinates, batches with lengths, every leaf size; a float32 brute force of
the contract for small clouds; errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pcops
from conftest import degenerate_clouds, with_threads


def dense_knn(points: torch.Tensor, query: torch.Tensor, k: int, lengths=None, query_lengths=None):
    return pcops.knn(query, points, k, query_lengths, lengths)


def queries_for(points: torch.Tensor, gen: torch.Generator, extra: int = 300) -> torch.Tensor:
    """The points themselves plus random queries around and beyond the cloud's box."""
    lo, hi = points.min(0).values, points.max(0).values
    span = (hi - lo).clamp_min(1e-3)
    q = lo - span + torch.rand(extra, 3, generator=gen) * 3 * span
    return torch.cat([points, q])


def brute_knn(points: torch.Tensor, query: torch.Tensor, k: int):
    """The contract in float32: s = ((dx*dx + dy*dy) + dz*dz), ordered by (s, index), NaN as +inf."""
    d = query[:, None, :] - points[None, :, :]
    sq = d * d
    s = (sq[..., 0] + sq[..., 1]) + sq[..., 2]
    key = torch.where(torch.isnan(s), torch.full_like(s, float("inf")), s)
    order = torch.argsort(key, dim=1, stable=True)[:, :k]  # stable: equal keys stay in index order
    # NumPy's float32 sqrt is correctly rounded (torch's vectorised one can be off by one unit).
    return torch.from_numpy(np.sqrt(torch.gather(key, 1, order).numpy())), order


@pytest.mark.parametrize("grid", [False, True])
@pytest.mark.parametrize("leaf", [1, 4, 32])
@pytest.mark.parametrize("k", [1, 16, 50])
def test_knn_equals_dense_on_every_cloud_kind(cloud_factory, cloud_kind, leaf, k, grid, gen):
    pts = cloud_factory(cloud_kind, 3000, seed=7)
    q = queries_for(pts, gen)
    index = pcops.SpatialIndex(pts, leaf_size=leaf, grid=grid)
    dist, idx = index.knn(q, k)
    ref_d, ref_i = dense_knn(pts[None], q[None], k)
    assert torch.equal(idx, ref_i[0])
    assert torch.equal(dist, ref_d[0])


def test_knn_equals_float32_brute_force(cloud_factory, cloud_kind, gen):
    pts = cloud_factory(cloud_kind, 700, seed=11)
    q = queries_for(pts, gen, extra=100)
    dist, idx = pcops.SpatialIndex(pts, leaf_size=8, grid=False).knn(q, 12)
    bd, bi = brute_knn(pts, q, 12)
    assert torch.equal(idx, bi)
    assert torch.equal(dist, bd)


def test_degenerate_clouds_planes_lines_and_outliers(gen):
    cluster, same, plane = degenerate_clouds(gen)
    line = torch.zeros(1, 2000, 3)
    line[0, :, 0] = torch.rand(2000, generator=gen)
    steep = torch.cat([torch.rand(1, 1500, 3, generator=gen) * 1e-4, torch.rand(1, 500, 3, generator=gen) * 100], 1)
    for cloud in (cluster, same, plane, line, steep):
        pts = cloud[0]
        q = queries_for(pts, gen, extra=200)
        for k, grid in ((1, False), (8, False), (40, False), (8, True)):
            dist, idx = pcops.SpatialIndex(pts, leaf_size=16, grid=grid).knn(q, k)
            ref_d, ref_i = dense_knn(pts[None], q[None], k)
            assert torch.equal(idx, ref_i[0]) and torch.equal(dist, ref_d[0])
        d2, bi = pcops.SpatialIndex(pts).ball_query(q, 0.01, 20)
        ref_d2, ref_bi = pcops.ball_query(q[None], pts[None], 0.01, 20)
        assert torch.equal(bi, ref_bi[0]) and torch.equal(d2, ref_d2[0])


def test_real_clouds(real_cloud, gen):
    pts = real_cloud
    q = queries_for(pts, gen)
    index = pcops.SpatialIndex(pts)
    tree = pcops.SpatialIndex(pts, grid=False)
    for k in (1, 16):
        dist, idx = index.knn(q, k)
        assert torch.equal(idx, tree.knn(q, k)[1])
        ref_d, ref_i = dense_knn(pts[None], q[None], k)
        assert torch.equal(idx, ref_i[0]) and torch.equal(dist, ref_d[0])
    extent = float((pts.max(0).values - pts.min(0).values).max())
    for radius in (0.01 * extent, 0.05 * extent):
        d2, bi = index.ball_query(q, radius, 32)
        ref_d2, ref_bi = pcops.ball_query(q[None], pts[None], radius, 32)
        assert torch.equal(bi, ref_bi[0]) and torch.equal(d2, ref_d2[0])
        assert (bi >= 0).any()


@pytest.mark.parametrize("radius", [0.0, 0.02, 0.1, 0.5, 5.0])
@pytest.mark.parametrize("K", [1, 16, 100])
def test_ball_query_equals_dense(cloud_factory, cloud_kind, radius, K, gen):
    pts = cloud_factory(cloud_kind, 2500, seed=3)
    q = queries_for(pts, gen)
    d2, idx = pcops.SpatialIndex(pts, leaf_size=8).ball_query(q, radius, K)
    ref_d2, ref_i = pcops.ball_query(q[None], pts[None], radius, K)
    assert torch.equal(idx, ref_i[0])
    assert torch.equal(d2, ref_d2[0])


def test_lattice_ties_at_the_radius():
    # Integer lattice: many squared distances equal R2 exactly (s < R2 is strict) and many ties.
    g = torch.stack(torch.meshgrid(*[torch.arange(12.0)] * 3, indexing="ij"), -1).reshape(-1, 3)
    index = pcops.SpatialIndex(g, leaf_size=5, grid=False)
    for radius in (1.0, 2.0 ** 0.5, 3.0 ** 0.5, 2.0):
        d2, idx = index.ball_query(g, radius, 30)
        ref_d2, ref_i = pcops.ball_query(g[None], g[None], radius, 30)
        assert torch.equal(idx, ref_i[0]) and torch.equal(d2, ref_d2[0])
    dist, idx = index.knn(g + 0.5, 27)
    ref_d, ref_i = dense_knn(g[None], (g + 0.5)[None], 27)
    assert torch.equal(idx, ref_i[0]) and torch.equal(dist, ref_d[0])


def test_non_finite_points_and_queries(gen):
    pts = torch.rand(1500, 3, generator=gen)
    pts[5] = float("nan")
    pts[77, 1] = float("inf")
    pts[300, 2] = -float("inf")
    pts[1200] = torch.tensor([3e38, -3e38, 3e38])  # finite, its squared distances overflow
    q = queries_for(pts[torch.isfinite(pts).all(1)], gen, extra=50)
    q = torch.cat([q, torch.tensor([[float("nan"), 0.0, 0.0], [float("inf"), 1.0, 2.0], [1e38, 1e38, 1e38]])])
    index = pcops.SpatialIndex(pts, leaf_size=8, grid=False)
    gridded = pcops.SpatialIndex(pts)
    for k in (1, 10, 300, 1500):
        assert torch.equal(gridded.knn(q, k)[1], dense_knn(pts[None], q[None], k)[1][0]), k
        dist, idx = index.knn(q, k)
        ref_d, ref_i = dense_knn(pts[None], q[None], k)
        assert torch.equal(idx, ref_i[0]), k
        assert torch.equal(dist, ref_d[0]), k
    d2, bi = index.ball_query(q, 0.1, 20)
    ref_d2, ref_bi = pcops.ball_query(q[None], pts[None], 0.1, 20)
    assert torch.equal(bi, ref_bi[0]) and torch.equal(d2, ref_d2[0])
    all_nan = torch.full((50, 3), float("nan"))
    dist, idx = pcops.SpatialIndex(all_nan).knn(q, 5)
    assert torch.equal(idx, torch.arange(5).expand(q.shape[0], 5))
    assert torch.isinf(dist).all()


def test_batches_with_lengths_and_query_lengths(gen):
    B, N, M = 4, 900, 500
    pts = torch.rand(B, N, 3, generator=gen)
    q = torch.rand(B, M, 3, generator=gen)
    lengths = torch.tensor([900, 0, 17, 450])
    qlen = torch.tensor([500, 30, 0, 499])
    index = pcops.SpatialIndex(pts, lengths=lengths, leaf_size=16)
    tree = pcops.SpatialIndex(pts, lengths=lengths, leaf_size=16, grid=False)
    assert torch.equal(tree.knn(q, 20, query_lengths=qlen)[1], dense_knn(pts, q, 20, lengths, qlen)[1])
    assert index.batch == B and index.num_points == [900, 0, 17, 450]
    for k in (1, 20, 900):
        dist, idx = index.knn(q, k, query_lengths=qlen)
        ref_d, ref_i = dense_knn(pts, q, k, lengths, qlen)
        assert torch.equal(idx, ref_i) and torch.equal(dist, ref_d)
    d2, bi = index.ball_query(q, 0.15, 40, query_lengths=qlen)
    ref_d2, ref_bi = pcops.ball_query(q, pts, 0.15, 40, qlen, lengths)
    assert torch.equal(bi, ref_bi) and torch.equal(d2, ref_d2)
    # k larger than a cloud pads with (inf, -1).
    dist, idx = index.knn(q, 18)
    assert (idx[2, :, 17] == -1).all() and torch.isinf(dist[2, :, 17]).all()
    assert (idx[1] == -1).all()


def test_reuse_copy_threads_and_half_precision(gen):
    pts = torch.rand(4000, 3, generator=gen)
    q = torch.rand(800, 3, generator=gen)
    index = pcops.SpatialIndex(pts)
    first = index.knn(q, 9)
    orig = pts.clone()
    pts.add_(10.0)  # the index holds its own copy
    second = index.knn(q, 9)
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])
    one = with_threads(1, lambda: index.knn(q, 9))
    assert torch.equal(one[1], first[1]) and torch.equal(one[0], first[0])
    tree = pcops.SpatialIndex(orig, grid=False)
    assert torch.equal(tree.knn(q, 9)[1], first[1])
    # With the grid, ball queries search it; the tree is built on the first query that needs it
    # (kNN with 4 k > n), from the grid's copy of the points (the source tensor has changed
    # since), and then held too.
    grid_only = index.memory_bytes
    d2, bi = index.ball_query(q, 0.05, 12)
    ref_d2, ref_bi = pcops.ball_query(q[None], orig[None], 0.05, 12)
    assert torch.equal(bi, ref_bi[0]) and torch.equal(d2, ref_d2[0])
    assert index.memory_bytes == grid_only
    big = index.knn(q, 1001)
    ref_big = dense_knn(orig[None], q[None], 1001)
    assert torch.equal(big[1], ref_big[1][0]) and torch.equal(big[0], ref_big[0][0])
    assert index.memory_bytes == grid_only + tree.memory_bytes
    assert torch.equal(index.knn(q, 9)[1], first[1])
    half = torch.rand(1000, 3, generator=gen).to(torch.bfloat16)
    dist, idx = pcops.SpatialIndex(half).knn(half, 4)
    ref_d, ref_i = dense_knn(half.float()[None], half.float()[None], 4)
    assert torch.equal(idx, ref_i[0]) and torch.equal(dist, ref_d[0])
    assert index.memory_bytes >= 16 * 4000
    assert "SpatialIndex(batch=1" in repr(index)


def test_k_zero_empty_queries_and_empty_cloud(gen):
    pts = torch.rand(100, 3, generator=gen)
    index = pcops.SpatialIndex(pts)
    dist, idx = index.knn(torch.empty(0, 3), 5)
    assert dist.shape == (0, 5) and idx.shape == (0, 5)
    dist, idx = index.knn(pts, 0)
    assert dist.shape == (100, 0)
    empty = pcops.SpatialIndex(torch.empty(0, 3))
    dist, idx = empty.knn(pts, 0)
    assert dist.shape == (100, 0)
    d2, bi = empty.ball_query(pts, 0.5, 3)
    assert (bi == -1).all() and (d2 == 0).all()


def test_errors(gen):
    pts = torch.rand(100, 3, generator=gen)
    with pytest.raises(TypeError, match="float32"):
        pcops.SpatialIndex(pts.double())
    with pytest.raises(ValueError, match="3 coordinates"):
        pcops.SpatialIndex(torch.rand(10, 2))
    with pytest.raises(ValueError, match="leaf_size"):
        pcops.SpatialIndex(pts, leaf_size=0)
    with pytest.raises(TypeError, match="leaf_size"):
        pcops.SpatialIndex(pts, leaf_size=2.5)
    with pytest.raises(TypeError, match="grid"):
        pcops.SpatialIndex(pts, grid=1)
    with pytest.raises(ValueError, match="lengths"):
        pcops.SpatialIndex(pts[None], lengths=torch.tensor([101]))
    index = pcops.SpatialIndex(pts)
    with pytest.raises(ValueError, match="k"):
        index.knn(pts, 101)
    with pytest.raises(ValueError, match="k"):
        index.knn(pts, -1)
    with pytest.raises(ValueError, match="query"):
        index.knn(pts[None], 3)
    with pytest.raises(ValueError, match="radius"):
        index.ball_query(pts, -1.0, 3)
    with pytest.raises(ValueError, match="radius"):
        index.ball_query(pts, float("nan"), 3)
    with pytest.raises(ValueError, match="K"):
        index.ball_query(pts, 0.1, -2)
    with pytest.raises(TypeError, match="radius"):
        index.ball_query(pts, "0.1", 3)
    batched = pcops.SpatialIndex(torch.rand(2, 50, 3, generator=gen))
    with pytest.raises(ValueError, match="batch"):
        batched.knn(torch.rand(3, 5, 3), 2)


def clustered_cloud(n: int, seed: int) -> torch.Tensor:
    """90 % of the points in 20 tight gaussian clusters, 10 % uniform: a grid's cells there stay
    overfull, so the dense kNN hands such clouds to the spatial index."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.rand(20, 3, generator=g)
    p = torch.rand(n, 3, generator=g)
    i = torch.arange(n)
    m = i % 10 != 0
    p[m] = centres[i[m] % 20] + 0.002 * torch.randn(int(m.sum()), 3, generator=g)
    return p


def test_dense_knn_on_clustered_clouds_is_exact(gen):
    # The dense operator routes this cloud through the index (its grid load is far above the
    # threshold): still the contract's result, checked against the float32 brute force.
    pts = clustered_cloud(60000, seed=4)
    dist, idx = pcops.knn(pts[None], pts[None], 16)
    sub = torch.randperm(pts.shape[0], generator=gen)[:400]
    bd, bi = brute_knn(pts, pts[sub], 16)
    assert torch.equal(idx[0, sub], bi)
    assert torch.equal(dist[0, sub], bd)
    ix_d, ix_i = pcops.SpatialIndex(pts).knn(pts, 16)
    assert torch.equal(ix_i, idx[0]) and torch.equal(ix_d, dist[0])
    # Batches: each cloud decides on its own.
    both = torch.stack([pts[:20000], torch.rand(20000, 3, generator=gen)])
    d2, i2 = pcops.knn(both, both, 8)
    for b in range(2):
        bd, bi = brute_knn(both[b], both[b, :300], 8)
        assert torch.equal(i2[b, :300], bi) and torch.equal(d2[b, :300], bd)


@pytest.mark.parametrize("r", [0.0, 0.03, 0.2, 1e30])
@pytest.mark.parametrize("cap", [0, 1, 16, 200])
@pytest.mark.parametrize("ignore", [False, True])
def test_radius_equals_flat_radius(cloud_factory, cloud_kind, r, cap, ignore, gen):
    """index.radius is pcops.flat.radius over the indexed points (edges, order and the self skip);
    with the queries being the points and ignore_same_index, the radius graph's pairs."""
    from pcops import flat

    pts = cloud_factory(cloud_kind, 1200, seed=5)
    q = queries_for(pts, gen, extra=200)
    index = pcops.SpatialIndex(pts, leaf_size=8)
    got = index.radius(q, r, cap, ignore_same_index=ignore)
    want = flat.radius(pts, q, r, max_num_neighbors=cap, ignore_same_index=ignore)
    assert torch.equal(got, want), (cloud_kind, r, cap, ignore)
    graph = index.radius(pts, r, cap, ignore_same_index=True)
    assert torch.equal(graph, flat.radius(pts, pts, r, max_num_neighbors=cap, ignore_same_index=True))


def test_radius_batched_flattened_and_nearest(gen):
    from pcops import flat

    B, N, M = 3, 700, 90
    pts = torch.rand(B, N, 3, generator=gen)
    q = torch.rand(B, M, 3, generator=gen)
    lengths, qlen = torch.tensor([700, 0, 33]), torch.tensor([90, 50, 7])
    index = pcops.SpatialIndex(pts, lengths)
    edges = index.radius(q, 0.15, 9, qlen)
    want = []
    for b in range(B):
        e = flat.radius(pts[b, : lengths[b]], q[b, : qlen[b]], 0.15, max_num_neighbors=9)
        want.append(torch.stack([e[0] + b * M, e[1] + b * N]))
    assert torch.equal(edges, torch.cat(want, dim=1))
    dist, idx = index.nearest(q, qlen)
    kd, ki = pcops.knn(q, pts, 1, qlen, lengths)
    assert torch.equal(idx, ki[..., 0]) and torch.equal(dist, kd[..., 0])
    one = pcops.SpatialIndex(pts[0])
    d1, i1 = one.nearest(q[0])
    assert i1.shape == (M,) and torch.equal(i1, flat.nearest(q[0], pts[0]))


def test_radius_errors(gen):
    index = pcops.SpatialIndex(torch.rand(50, 3, generator=gen))
    q = torch.rand(5, 3, generator=gen)
    with pytest.raises(ValueError, match="r"):
        index.radius(q, -0.1)
    with pytest.raises(ValueError, match="r"):
        index.radius(q, float("inf"))
    with pytest.raises(TypeError, match="r"):
        index.radius(q, "0.1")
    with pytest.raises(ValueError, match="max_num_neighbors"):
        index.radius(q, 0.1, -1)
    with pytest.raises(TypeError, match="ignore_same_index"):
        index.radius(q, 0.1, 4, ignore_same_index=1)
    assert index.radius(q[:0], 0.3).shape == (2, 0)


def test_flat_clouds_with_batch_vectors(gen):
    """An index over stacked clouds (sorted batch vector, an empty cloud in the middle): kNN,
    ball query, radius and nearest equal pcops.flat / the dense operators per cloud, with indices
    into the stacked points."""
    from pcops import flat

    sizes, qsizes = [700, 0, 1, 350], [200, 30, 5, 0]
    pts = torch.cat([torch.rand(n, 3, generator=gen) * (i + 1) for i, n in enumerate(sizes)])
    q = torch.cat([torch.rand(m, 3, generator=gen) * (i + 1) for i, m in enumerate(qsizes)])
    bx = torch.repeat_interleave(torch.arange(4), torch.tensor(sizes))
    bq = torch.repeat_interleave(torch.arange(4), torch.tensor(qsizes))
    index = pcops.SpatialIndex(pts, batch=bx, leaf_size=16)
    assert index.batch == 4 and index.num_points == sizes
    for k in (1, 5, 40):
        dist, idx = index.knn(q, k, batch=bq)
        assert dist.shape == (q.shape[0], k)
        rows = torch.arange(q.shape[0])[:, None].expand(-1, k)
        got = torch.stack([rows[idx >= 0], idx[idx >= 0]])
        assert torch.equal(got, flat.knn(pts, q, k, bx, bq)), k
        ptr = [0, 700, 700, 701, 1051]
        qptr = [0, 200, 230, 235, 235]
        for c in range(4):  # distances and padding per cloud, against the dense operator
            rows_c = slice(qptr[c], qptr[c + 1])
            if qptr[c + 1] == qptr[c]:
                continue
            dd, di = pcops.knn(q[None, rows_c], pts[None, ptr[c]:ptr[c + 1]], k,
                               None, torch.tensor([ptr[c + 1] - ptr[c]]))
            assert torch.equal(dist[rows_c], dd[0])
            assert torch.equal(idx[rows_c], torch.where(di[0] >= 0, di[0] + ptr[c], di[0]))
    d2, bi = index.ball_query(q, 0.3, 12, batch=bq)
    for c in range(4):
        rows_c = slice(qptr[c], qptr[c + 1])
        if qptr[c + 1] == qptr[c]:
            continue
        rd2, ri = pcops.ball_query(q[None, rows_c], pts[None, ptr[c]:ptr[c + 1]], 0.3, 12,
                                   None, torch.tensor([ptr[c + 1] - ptr[c]]))
        assert torch.equal(d2[rows_c], rd2[0]) and torch.equal(bi[rows_c], torch.where(ri[0] >= 0, ri[0] + ptr[c], ri[0]))
    for ignore in (False, True):
        assert torch.equal(index.radius(q, 0.3, 9, batch=bq, ignore_same_index=ignore),
                           flat.radius(pts, q, 0.3, bx, bq, max_num_neighbors=9, ignore_same_index=ignore))
    assert torch.equal(index.radius(pts, 0.2, 7, batch=bx, ignore_same_index=True),
                       flat.radius(pts, pts, 0.2, bx, bx, max_num_neighbors=7, ignore_same_index=True))
    sel = bq != 1
    _, ni = index.nearest(q[sel], batch=bq[sel])
    assert torch.equal(ni, flat.nearest(q[sel], pts, bq[sel], bx))
    nd, ni = index.nearest(q[~sel], batch=bq[~sel])  # cloud 1 is empty
    assert bool((ni == -1).all()) and bool(torch.isinf(nd).all())
    with pytest.raises(ValueError, match="query_lengths"):
        index.knn(q, 3, torch.tensor([1, 1, 1, 1]), batch=bq)
    with pytest.raises(ValueError, match="batch"):
        index.knn(q, 3, batch=torch.full((q.shape[0],), 4))
    with pytest.raises(ValueError, match="batch"):
        pcops.SpatialIndex(pts).knn(q, 3, batch=bq)
    with pytest.raises(ValueError, match="lengths"):
        pcops.SpatialIndex(pts, torch.tensor([3]), batch=bx)


def test_cpu_index_routes_change_no_result(gen, monkeypatch):
    """Tight clusters send the dense kNN, ball query and radius through a spatial index;
    PCOPS_CPU_INDEX_ROUTES=never keeps them on their grids: the same bits either way."""
    from pcops import flat

    centres = torch.rand(6, 3, generator=gen)
    p = centres[torch.arange(6000) % 6] + 1e-4 * torch.randn(6000, 3, generator=gen)
    p[::37] = torch.rand(p[::37].shape, generator=gen)

    def run():
        return (pcops.knn(p[None], p[None], 16), pcops.ball_query(p[None], p[None], 3e-4, 40),
                flat.radius_graph(p, 3e-4, max_num_neighbors=20))

    routed = run()
    monkeypatch.setenv("PCOPS_CPU_INDEX_ROUTES", "never")
    grid = run()
    for a, b in zip(routed, grid):
        if isinstance(a, tuple):
            assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
        else:
            assert torch.equal(a, b)
