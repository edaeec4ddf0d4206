"""pcops.SpatialIndex on CUDA tensors: the same indices and float32 distances as the CPU dense
operators (and the CPU index), bit for bit, on every synthetic cloud kind, planes, lines, clusters
with far outliers, real clouds, non-finite coordinates, batches with lengths, half-precision
input; reuse across calls and streams; errors."""

from __future__ import annotations

import pytest
import torch

import pcops
from conftest import CLOUD_KINDS, load_real_cloud, make_cloud, same_bits

DEV = torch.device("cuda")


def dense_knn(q, pts, k):
    d, i = pcops.knn(q[None], pts[None], k)
    return d[0], i[0]


def dense_ball(q, pts, r, K):
    d, i = pcops.ball_query(q[None], pts[None], r, K)
    return d[0], i[0]


def extra_kinds(n: int, g: torch.Generator) -> dict[str, torch.Tensor]:
    p = torch.rand(n, 3, generator=g)
    plane = p.clone()
    plane[:, 2] = 0.5
    line = p.clone()
    line[:, 1:] = 2.0
    cluster = p * 1e-3
    cluster[::97] *= 1e6  # far outliers
    nonfinite = p.clone()
    nonfinite[7::61, 1] = float("nan")
    nonfinite[11::89, 0] = float("inf")
    return {"plane": plane, "line": line, "cluster": cluster, "nonfinite": nonfinite}


def queries_for(points: torch.Tensor, g: torch.Generator, extra: int = 300) -> torch.Tensor:
    finite = points[torch.isfinite(points).all(1)]
    lo, hi = finite.min(0).values, finite.max(0).values
    span = (hi - lo).clamp_min(1e-3)
    q = lo - span + torch.rand(extra, 3, generator=g) * 3 * span
    q[3] = float("nan")
    return torch.cat([points, q])


def check_cloud(pts: torch.Tensor, q: torch.Tensor, ks=(1, 7, 16, 32, 48), radii=(0.0, 0.05, 0.3), K=20):
    index = pcops.SpatialIndex(pts.to(DEV))
    qd = q.to(DEV)
    for k in ks:
        if k > pts.shape[0]:
            continue
        dist, idx = index.knn(qd, k)
        want_d, want_i = dense_knn(q, pts, k)
        assert same_bits(idx, want_i), f"k={k}"
        assert same_bits(dist, want_d), f"k={k}"
    for r in radii:
        d2, idx = index.ball_query(qd, r, K)
        want_d2, want_i = dense_ball(q, pts, r, K)
        assert same_bits(idx, want_i), f"r={r}"
        assert same_bits(d2, want_d2), f"r={r}"


@pytest.mark.parametrize("kind", CLOUD_KINDS)
def test_synthetic_kinds_equal_the_cpu(kind, gen):
    pts = make_cloud(kind, 6000, 3)
    check_cloud(pts, queries_for(pts, gen))


@pytest.mark.parametrize("kind", ["plane", "line", "cluster", "nonfinite"])
def test_degenerate_clouds_equal_the_cpu(kind, gen):
    pts = extra_kinds(5000, gen)[kind]
    check_cloud(pts, queries_for(pts, gen))


@pytest.mark.parametrize("name", ["building.ply", "bunny00.off", "b9_training.ply"])
def test_real_clouds_all_points(name):
    pts = load_real_cloud(name, max_points=40000)
    index = pcops.SpatialIndex(pts.to(DEV))
    for k in (8, 16, 40):
        dist, idx = index.knn(pts.to(DEV), k)
        want_d, want_i = dense_knn(pts, pts, k)
        assert same_bits(idx, want_i) and same_bits(dist, want_d), k
    d2, idx = index.ball_query(pts.to(DEV), 0.02, 24)
    want_d2, want_i = dense_ball(pts, pts, 0.02, 24)
    assert same_bits(idx, want_i) and same_bits(d2, want_d2)


def test_batches_lengths_and_the_cpu_index(gen):
    B, N, M = 3, 4000, 500
    pts = torch.rand(B, N, 3, generator=gen)
    q = torch.rand(B, M, 3, generator=gen)
    lengths = torch.tensor([4000, 17, 0])
    qlen = torch.tensor([500, 200, 100])
    gpu = pcops.SpatialIndex(pts.to(DEV), lengths.to(DEV))
    cpu = pcops.SpatialIndex(pts, lengths)
    assert gpu.batch == B and gpu.num_points == [4000, 17, 0] and gpu.leaf_size == 32
    assert gpu.memory_bytes >= 16 * 4017
    for k in (5, 20, 64):
        dist, idx = gpu.knn(q.to(DEV), k, qlen.to(DEV))
        want_d, want_i = cpu.knn(q, k, qlen)
        assert same_bits(idx, want_i) and same_bits(dist, want_d), k
        dense_d, dense_i = pcops.knn(q, pts, k, qlen, lengths)
        assert same_bits(idx, dense_i) and same_bits(dist, dense_d), k
    d2, idx = gpu.ball_query(q.to(DEV), 0.1, 40, qlen.to(DEV))
    want_d2, want_i = cpu.ball_query(q, 0.1, 40, qlen)
    assert same_bits(idx, want_i) and same_bits(d2, want_d2)


def test_half_precision_reuse_and_streams(gen):
    pts = torch.rand(3000, 3, generator=gen).half()
    q = torch.rand(400, 3, generator=gen)
    index = pcops.SpatialIndex(pts.to(DEV))
    want_d, want_i = dense_knn(q, pts.float(), 9)
    for _ in range(2):  # reusable
        dist, idx = index.knn(q.to(DEV), 9)
        assert same_bits(idx, want_i) and same_bits(dist, want_d)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        dist, idx = index.knn(q.to(DEV), 9)
    s.synchronize()
    assert same_bits(idx, want_i) and same_bits(dist, want_d)
    # The index keeps its own copy: changing the points afterwards changes nothing.
    p2 = pts.to(DEV)
    index2 = pcops.SpatialIndex(p2)
    p2.zero_()
    dist, idx = index2.knn(q.to(DEV), 9)
    assert same_bits(idx, want_i) and same_bits(dist, want_d)


def test_gradients_through_gathered_points(gen):
    pts = torch.rand(2000, 3, generator=gen).to(DEV).requires_grad_()
    q = torch.rand(100, 3, generator=gen).to(DEV)
    _, idx = pcops.SpatialIndex(pts.detach()).knn(q, 4)
    (pts[idx] - q[:, None]).square().sum().backward()
    assert pts.grad is not None and pts.grad.abs().sum() > 0


def test_errors(gen):
    pts = torch.rand(100, 3, generator=gen).to(DEV)
    index = pcops.SpatialIndex(pts)
    with pytest.raises(ValueError):
        index.knn(torch.rand(5, 3, device=DEV), 101)
    with pytest.raises(ValueError):
        index.knn(torch.rand(5, 3), 3)  # CPU query on a CUDA index
    with pytest.raises(ValueError):
        index.ball_query(torch.rand(5, 3, device=DEV), -1.0, 3)
    with pytest.raises(ValueError):
        index.knn(torch.rand(2, 5, 3, device=DEV), 3)  # batch shape of a one-cloud index
    with pytest.raises(ValueError):
        pcops.SpatialIndex(torch.rand(10, 2, device=DEV))
    with pytest.raises(TypeError):
        pcops.SpatialIndex(torch.rand(10, 3, device=DEV).double())


@pytest.mark.parametrize("kind", ["uniform", "duplicates", "varying"])
def test_radius_and_nearest_equal_the_cpu(kind, gen):
    from pcops import flat

    pts = make_cloud(kind, 5000, 3)
    q = queries_for(pts, gen)
    index = pcops.SpatialIndex(pts.to(DEV))
    for r, cap, ignore in [(0.05, 16, False), (0.2, 32, True), (0.01, 1000, False)]:
        got = index.radius(q.to(DEV), r, cap, ignore_same_index=ignore)
        assert same_bits(got, flat.radius(pts, q, r, max_num_neighbors=cap, ignore_same_index=ignore)), (r, cap)
    graph = index.radius(pts.to(DEV), 0.1, 24, ignore_same_index=True)
    assert same_bits(graph, flat.radius(pts, pts, 0.1, max_num_neighbors=24, ignore_same_index=True))
    dist, idx = index.nearest(q.to(DEV))
    want_d, want_i = dense_knn(q, pts, 1)
    assert same_bits(idx, want_i[:, 0]) and same_bits(dist, want_d[:, 0])


def test_flat_clouds_equal_the_cpu_index(gen):
    sizes, qsizes = [3000, 0, 40, 1200], [500, 20, 9, 0]
    pts = torch.cat([torch.rand(n, 3, generator=gen) * (i + 1) for i, n in enumerate(sizes)])
    q = torch.cat([torch.rand(m, 3, generator=gen) * (i + 1) for i, m in enumerate(qsizes)])
    bx = torch.repeat_interleave(torch.arange(4), torch.tensor(sizes))
    bq = torch.repeat_interleave(torch.arange(4), torch.tensor(qsizes))
    cpu = pcops.SpatialIndex(pts, batch=bx)
    gpu = pcops.SpatialIndex(pts.to(DEV), batch=bx.to(DEV))
    for k in (4, 16, 50):
        d, i = gpu.knn(q.to(DEV), k, batch=bq.to(DEV))
        wd, wi = cpu.knn(q, k, batch=bq)
        assert same_bits(i, wi) and same_bits(d, wd), k
    d2, i = gpu.ball_query(q.to(DEV), 0.2, 24, batch=bq.to(DEV))
    wd2, wi = cpu.ball_query(q, 0.2, 24, batch=bq)
    assert same_bits(i, wi) and same_bits(d2, wd2)
    assert same_bits(gpu.radius(q.to(DEV), 0.2, 8, batch=bq.to(DEV)), cpu.radius(q, 0.2, 8, batch=bq))


def test_flat_knn_routes_large_clouds_to_the_index(gen, monkeypatch):
    # A clustered cloud of 150k points (index route) beside small ones (grid and warp paths) in one
    # flat batch: knn / knn_graph / nearest on CUDA equal the CPU, and the route changes no bit.
    from pcops import flat

    big = torch.rand(20, 3, generator=gen)[torch.randint(0, 20, (150_000,), generator=gen)]
    big = big + 0.002 * torch.randn(150_000, 3, generator=gen)
    sizes = [150_000, 6000, 20]
    pts = torch.cat([big, torch.rand(6000, 3, generator=gen), torch.rand(20, 3, generator=gen)])
    batch = torch.repeat_interleave(torch.arange(3), torch.tensor(sizes))
    want = flat.knn(pts, pts, 16, batch, batch)
    got = flat.knn(pts.to(DEV), pts.to(DEV), 16, batch.to(DEV), batch.to(DEV))
    assert same_bits(got, want)
    monkeypatch.setenv("PCOPS_CUDA_KNN_INDEX", "never")
    assert same_bits(flat.knn(pts.to(DEV), pts.to(DEV), 16, batch.to(DEV), batch.to(DEV)), want)
    monkeypatch.setenv("PCOPS_CUDA_KNN_INDEX", "always")  # every cloud with n >= k, the 20-point one too
    assert same_bits(flat.knn(pts.to(DEV), pts.to(DEV), 16, batch.to(DEV), batch.to(DEV)), want)
    assert same_bits(flat.knn(pts.to(DEV), pts.to(DEV), 24, batch.to(DEV), batch.to(DEV)),
                     flat.knn(pts, pts, 24, batch, batch))  # 24 > 20 points: that cloud keeps its path
    monkeypatch.delenv("PCOPS_CUDA_KNN_INDEX")
    graph = flat.knn_graph(pts.to(DEV), 8, batch.to(DEV), loop=False)
    assert same_bits(graph, flat.knn_graph(pts, 8, batch, loop=False))
    q = torch.cat([big[::3] + 1e-4, torch.rand(500, 3, generator=gen)])
    bq = torch.repeat_interleave(torch.arange(2), torch.tensor([big[::3].shape[0], 500]))
    assert same_bits(flat.nearest(q.to(DEV), pts[:156_000].to(DEV), bq.to(DEV), batch[:156_000].to(DEV)),
                     flat.nearest(q, pts[:156_000], bq, batch[:156_000]))
