"""pcops.flat: torch_cluster 1.6.3 signatures and semantics on ragged batches.

Expected values are hand-checked small cases (derived from upstream behaviour as written in
PEERS.md section 1) plus cross-checks against SciPy's cKDTree and float32-exact brute force.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.spatial import cKDTree

from pcops import flat

SQUARE = torch.tensor([[-1.0, -1.0], [-1.0, 1.0], [1.0, -1.0], [1.0, 1.0]])


def edge_set(e: torch.Tensor) -> set:
    return set(map(tuple, e.t().tolist()))


def sq_dist_f32(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The contract's float32 squared distance, summed in coordinate order."""
    a = a.astype(np.float32)
    b = b.astype(np.float32)
    s = np.zeros((a.shape[0], b.shape[0]), np.float32)
    for d in range(a.shape[1]):
        diff = (a[:, None, d] - b[None, :, d]).astype(np.float32)
        s = (s + (diff * diff).astype(np.float32)).astype(np.float32)
    return s


def ragged_batch(sizes, dim=3, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    n = sum(sizes)
    pos = torch.rand(n, dim, generator=g) * scale
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes, dtype=torch.int64))
    return pos, batch


# ----------------------------------------------------------------------------------------- fps


def test_fps_two_squares_fixed_start():
    src = torch.cat([SQUARE, 2 * SQUARE])
    batch = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    # From (-1,-1) the furthest corner is (1,1); then the other two tie at 4 -> lowest index.
    assert flat.fps(src, batch, 0.5, False).tolist() == [0, 3, 4, 7]
    assert flat.fps(src, batch, 0.75, False).tolist() == [0, 3, 1, 4, 7, 5]
    assert flat.fps(src, ptr=[0, 4, 8], ratio=0.5, random_start=False).tolist() == [0, 3, 4, 7]
    assert flat.fps(src, ptr=torch.tensor([0, 4, 8]), ratio=0.5, random_start=False).tolist() == [0, 3, 4, 7]
    # Per-cloud ratio tensor.
    out = flat.fps(src, batch, torch.tensor([0.25, 0.5]), False)
    assert out.tolist() == [0, 4, 7]
    # ratio None means 0.5.
    assert flat.fps(src, batch, None, False).tolist() == [0, 3, 4, 7]


def test_fps_counts_float32_ceil_and_empty_clouds():
    pos, batch = ragged_batch([10, 0, 7, 3], seed=1)
    out = flat.fps(pos, batch, 0.3, random_start=False)
    counts = [int(np.ceil(np.float32(n) * np.float32(0.3))) for n in (10, 0, 7, 3)]
    assert out.numel() == sum(counts)
    starts = [0, 10, 10, 17]
    o = 0
    for b, c in enumerate(counts):
        seg = out[o : o + c]
        if c == 0:
            continue
        assert seg[0].item() == starts[b]
        assert ((batch[seg] == b).all())
        o += c


def test_fps_random_start_seeded():
    pos, batch = ragged_batch([50, 30], seed=2)
    torch.manual_seed(5)
    a = flat.fps(pos, batch, 0.2)
    torch.manual_seed(5)
    b = flat.fps(pos, batch, 0.2)
    assert torch.equal(a, b)
    assert a.numel() == 10 + 6


def test_fps_ratio_above_one_repeats_first_point():
    out = flat.fps(SQUARE, ratio=1.5, random_start=False)
    assert out.tolist() == [0, 3, 1, 2, 0, 0]


def test_fps_unsorted_batch():
    with pytest.raises(ValueError, match="not sorted"):
        flat.fps(SQUARE, torch.tensor([0, 1, 0, 1]), 0.5)


# ----------------------------------------------------------------------------------------- knn


def test_knn_square_hand_checked():
    x = SQUARE
    y = torch.tensor([[-1.0, 0.0], [1.0, 0.0]])
    e = flat.knn(x, y, 2)
    # Query 0 at (-1,0): x0 and x1 tie at 1 -> index order; query 1: x2, x3.
    assert e.tolist() == [[0, 0, 1, 1], [0, 1, 2, 3]]
    assert e.dtype == torch.int64


def test_knn_order_by_distance_then_index():
    x = torch.tensor([[3.0], [1.0], [2.0], [1.0], [0.0]])
    y = torch.tensor([[0.0]])
    assert flat.knn(x, y, 5).tolist() == [[0] * 5, [4, 1, 3, 2, 0]]


def test_knn_batches_skipped_ids_and_k_over_n():
    x = torch.tensor([[-1.0, -1.0], [-1.0, 1.0], [1.0, -1.0], [1.0, 1.0]])
    batch_x = torch.tensor([0, 0, 2, 2])
    y = torch.tensor([[0.0, 0.0], [5.0, 5.0], [1.0, 0.9]])
    batch_y = torch.tensor([0, 1, 2])
    e = flat.knn(x, y, 3, batch_x, batch_y)  # cloud 1 has no x: skipped; k > n_b: all of them
    assert e.tolist() == [[0, 0, 2, 2], [0, 1, 3, 2]]


def test_knn_against_ckdtree():
    pos, batch = ragged_batch([300, 0, 500, 40], seed=3)
    e = flat.knn(pos, pos, 5, batch, batch)
    expected = set()
    start = 0
    for n in (300, 0, 500, 40):
        if n:
            p = pos[start : start + n].numpy()
            _, idx = cKDTree(p).query(p, k=min(5, n))
            for i in range(n):
                for j in idx[i]:
                    expected.add((start + i, start + int(j)))
        start += n
    assert edge_set(e) == expected
    # Grouped by query ascending.
    assert bool((e[0, 1:] >= e[0, :-1]).all())


def test_knn_exact_float32_oracle_high_dim():
    g = torch.Generator().manual_seed(4)
    x = torch.randint(0, 4, (60, 6), generator=g).float()  # many exact ties
    y = torch.randint(0, 4, (20, 6), generator=g).float()
    e = flat.knn(x, y, 7)
    s = sq_dist_f32(y.numpy(), x.numpy())
    for i in range(20):
        order = sorted(range(60), key=lambda j: (s[i, j], j))[:7]
        assert e[1, e[0] == i].tolist() == order


def test_knn_cosine():
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [2.0, 0.1]])
    y = torch.tensor([[1.0, 0.0]])
    e = flat.knn(x, y, 3, cosine=True)
    assert e.tolist() == [[0, 0, 0], [0, 3, 1]]


def test_knn_empty_inputs_and_1d():
    assert flat.knn(torch.empty(0, 3), torch.rand(4, 3), 2).shape == (2, 0)
    assert flat.knn(torch.rand(4, 3), torch.empty(0, 3), 2).shape == (2, 0)
    x = torch.tensor([0.0, 10.0, 1.0])
    assert flat.knn(x, torch.tensor([0.4]), 2).tolist() == [[0, 0], [0, 2]]


def test_knn_docstring_mentions_batch_size():
    assert "batch_size" in flat.knn.__doc__


def test_knn_graph_flow_and_loop():
    e = flat.knn_graph(SQUARE, 2)
    # source_to_target: [neighbour, centre], grouped by centre.
    assert e.tolist() == [[1, 2, 0, 3, 0, 3, 1, 2], [0, 0, 1, 1, 2, 2, 3, 3]]
    e2 = flat.knn_graph(SQUARE, 2, flow="target_to_source")
    assert e2.tolist() == [[0, 0, 1, 1, 2, 2, 3, 3], [1, 2, 0, 3, 0, 3, 1, 2]]
    e3 = flat.knn_graph(SQUARE, 2, loop=True)
    assert e3.tolist() == [[0, 1, 1, 0, 2, 0, 3, 1], [0, 0, 1, 1, 2, 2, 3, 3]]
    with pytest.raises(ValueError, match="flow"):
        flat.knn_graph(SQUARE, 2, flow="sideways")


def _knn_graph_by_mask(x, k, batch=None, flow="source_to_target"):
    e = flat.knn(x, x, k + 1, batch, batch)
    row, col = (e[1], e[0]) if flow == "source_to_target" else (e[0], e[1])
    keep = row != col
    return torch.stack([row[keep], col[keep]])


@pytest.mark.parametrize("flow", ["source_to_target", "target_to_source"])
def test_knn_graph_equals_the_masked_knn(flow):
    g = torch.Generator().manual_seed(5)
    x = torch.rand(500, 3, generator=g)
    # Distinct points: every list starts with its centre (the first-column path).
    assert torch.equal(flat.knn_graph(x, 8, flow=flow), _knn_graph_by_mask(x, 8, flow=flow))
    # Four copies of each point, k = 2: a list starts with the lowest-index copy, and the last
    # copy's list misses the centre itself, so that centre keeps k + 1 edges.
    xd = torch.cat([x[:100]] * 4)
    got = flat.knn_graph(xd, 2, flow=flow)
    assert torch.equal(got, _knn_graph_by_mask(xd, 2, flow=flow))
    assert got.shape[1] == 300 * 2 + 100 * 3
    # A cloud smaller than k + 1: fewer edges than centres x (k + 1).
    batch = torch.tensor([0] * 490 + [1] * 10)
    assert torch.equal(flat.knn_graph(x, 12, batch, flow=flow), _knn_graph_by_mask(x, 12, batch, flow=flow))
    # 1-D input.
    line = torch.rand(50, generator=g)
    assert torch.equal(flat.knn_graph(line, 3, flow=flow), _knn_graph_by_mask(line, 3, flow=flow))


# -------------------------------------------------------------------------------------- radius


def test_radius_hand_checked():
    x = SQUARE
    y = torch.tensor([[-1.0, 0.0], [1.0, 1.0]])
    e = flat.radius(x, y, 1.5)
    assert e.tolist() == [[0, 0, 1], [0, 1, 3]]
    # Strict: a reference exactly at distance r is excluded.
    assert flat.radius(x, y, 1.0).tolist() == [[1], [3]]


def test_radius_threshold_is_float64_product():
    r = 0.1
    r2 = np.float32(r * r)  # torch_cluster's rule
    x = torch.tensor([[0.0, 0.0, 0.0]])
    # A point with s just below / at R2 along x.
    inside = np.float32(np.sqrt(np.nextafter(r2, np.float32(0))))
    while np.float32(inside * inside) >= r2:
        inside = np.nextafter(inside, np.float32(0))
    at = np.float32(np.sqrt(r2))
    while np.float32(at * at) < r2:
        at = np.nextafter(at, np.float32(1))
    y = torch.tensor([[float(inside), 0.0, 0.0], [float(at), 0.0, 0.0]])
    assert flat.radius(x, y, r).tolist() == [[0], [0]]


def test_radius_max_num_neighbors_keeps_lowest_indices():
    x = torch.tensor([[5.0], [0.3], [0.1], [0.2], [0.0], [9.0], [0.05]])
    y = torch.tensor([[0.0]])
    assert flat.radius(x, y, 1.0, max_num_neighbors=3).tolist() == [[0, 0, 0], [1, 2, 3]]
    assert flat.radius(x, y, 1.0, max_num_neighbors=0).shape == (2, 0)
    assert flat.radius(x, y, 1.0).tolist() == [[0] * 5, [1, 2, 3, 4, 6]]


def test_radius_ignore_same_index_before_count():
    x = torch.zeros(4, 2)
    e = flat.radius(x, x, 1.0, max_num_neighbors=1, ignore_same_index=True)
    assert e.tolist() == [[0, 1, 2, 3], [1, 0, 0, 0]]


def test_radius_against_ckdtree_ragged_grid_and_brute():
    # Large clouds take the grid path; small ones and the 2-D case the brute force.
    for dim, sizes in ((3, [3000, 0, 200, 1500]), (2, [400, 0, 300])):
        pos, batch = ragged_batch(sizes, dim=dim, seed=6)
        r = 0.08 if dim == 3 else 0.1
        e = flat.radius(pos, pos, r, batch, batch, max_num_neighbors=10**6)
        expected = set()
        start = 0
        for n in sizes:
            if n:
                p = pos[start : start + n].numpy()
                s = sq_dist_f32(p, p)
                ii, jj = np.nonzero(s < np.float32(r * r))
                expected |= {(start + int(i), start + int(j)) for i, j in zip(ii, jj)}
                # cKDTree agrees away from the boundary.
                tree = cKDTree(p)
                for i in range(0, n, 97):
                    got = {j for (q, j) in expected if q == start + i}
                    ref = {start + j for j in tree.query_ball_point(p[i], r * (1 - 1e-4))}
                    assert ref <= got
            start += n
        assert edge_set(e) == expected
        # Grouped by query, references ascending within a query.
        key = e[0] * (pos.shape[0] + 1) + e[1]
        assert bool((key[1:] > key[:-1]).all())


def test_radius_cap_with_grid_matches_brute_force():
    pos, _ = ragged_batch([4000], seed=7)
    e = flat.radius(pos, pos[:300], 0.15, max_num_neighbors=5)
    s = sq_dist_f32(pos[:300].numpy(), pos.numpy())
    for i in range(0, 300, 13):
        want = np.nonzero(s[i] < np.float32(0.15 * 0.15))[0][:5].tolist()
        assert e[1, e[0] == i].tolist() == want


def test_radius_graph_degree_one_and_flow():
    x = torch.zeros(6, 3)
    batch = torch.tensor([0, 0, 0, 1, 1, 1])
    e = flat.radius_graph(x, 100.0, batch, max_num_neighbors=1)
    assert torch.bincount(e[1], minlength=6).tolist() == [1] * 6
    e = flat.radius_graph(SQUARE, 2.5)
    assert edge_set(e) == {(1, 0), (2, 0), (0, 1), (3, 1), (0, 2), (3, 2), (1, 3), (2, 3)}
    assert e[1].tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    e = flat.radius_graph(SQUARE, 2.5, loop=True, flow="target_to_source")
    assert e[0].tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    with pytest.raises(ValueError, match="flow"):
        flat.radius_graph(SQUARE, 1.0, flow="x")


def test_radius_errors():
    with pytest.raises(ValueError, match="not sorted"):
        flat.radius(SQUARE, SQUARE, 1.0, torch.tensor([1, 0, 0, 1]), torch.tensor([0, 0, 1, 1]))
    with pytest.raises(ValueError, match="r"):
        flat.radius(SQUARE, SQUARE, -1.0)
    with pytest.raises(ValueError, match="features"):
        flat.radius(SQUARE, torch.rand(2, 3), 1.0)
    with pytest.raises(TypeError):
        flat.radius(SQUARE.double(), SQUARE.double(), 1.0)
    with pytest.raises(ValueError, match="batch_size"):
        flat.radius(SQUARE, SQUARE, 1.0, torch.tensor([0, 0, 1, 1]), torch.tensor([0, 0, 1, 1]), batch_size=1)


# ------------------------------------------------------------------------------------- nearest


def test_nearest_hand_checked():
    x = torch.tensor([[-1.0, -1.0], [-1.0, 1.0], [1.0, -1.0], [1.0, 1.0]])
    y = torch.tensor([[-1.0, 0.0], [1.0, 0.0]])
    assert flat.nearest(x, y).tolist() == [0, 0, 1, 1]
    batch_x = torch.tensor([0, 0, 1, 1])
    batch_y = torch.tensor([0, 1])
    assert flat.nearest(x, y, batch_x, batch_y).tolist() == [0, 0, 1, 1]
    # Ties go to the lowest y index.
    assert flat.nearest(torch.tensor([[0.0]]), torch.tensor([[1.0], [-1.0]])).tolist() == [0]


def test_nearest_errors():
    x = torch.rand(4, 2)
    with pytest.raises(ValueError, match="'batch_x' is not sorted"):
        flat.nearest(x, x, torch.tensor([1, 0, 0, 0]), torch.tensor([0, 0, 0, 0]))
    with pytest.raises(ValueError, match="'batch_y' is not sorted"):
        flat.nearest(x, x, torch.tensor([0, 0, 0, 0]), torch.tensor([1, 0, 0, 0]))
    with pytest.raises(ValueError):
        flat.nearest(x, x[:2], torch.tensor([0, 0, 1, 1]), torch.tensor([0, 0]))
    with pytest.raises(ValueError):
        flat.nearest(x, torch.rand(4, 3))


def test_nearest_against_brute_force():
    pos, batch = ragged_batch([100, 50], seed=8)
    q, bq = ragged_batch([30, 40], seed=9)
    out = flat.nearest(q, pos, bq, batch)
    s = sq_dist_f32(q.numpy(), pos.numpy())
    same = bq[:, None] == batch[None, :]
    s[~same.numpy()] = np.inf
    assert out.tolist() == s.argmin(1).tolist()


# -------------------------------------------------------------------------------- grid_cluster


def test_grid_cluster_upstream_case():
    pos = torch.tensor([[0.0, 0.0], [11.0, 9.0], [2.0, 8.0], [2.0, 2.0], [8.0, 3.0]])
    size = torch.tensor([5.0, 5.0])
    assert flat.grid_cluster(pos, size).tolist() == [0, 5, 3, 0, 1]
    assert flat.grid_cluster(pos, size, end=torch.tensor([19.0, 19.0])).tolist() == [0, 6, 4, 0, 1]
    for dt in (torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64):
        assert flat.grid_cluster(pos.to(dt), size.to(dt)).tolist() == [0, 5, 3, 0, 1]


def test_grid_cluster_trunc_and_raw_ids():
    # Points below start truncate toward zero (not floor) and are not clamped.
    pos = torch.tensor([[-7.0], [-2.0], [3.0], [12.0]])
    out = flat.grid_cluster(pos, torch.tensor([5.0]), start=torch.tensor([0.0]), end=torch.tensor([10.0]))
    assert out.tolist() == [-1, 0, 0, 2]


def test_grid_cluster_against_torch_formula():
    g = torch.Generator().manual_seed(10)
    pos = torch.rand(500, 3, generator=g, dtype=torch.float64) * 10 - 3
    size = torch.tensor([0.7, 1.3, 0.4], dtype=torch.float64)
    start = pos.min(0).values
    end = pos.max(0).values
    nv = ((end - start) / size).to(torch.int64) + 1
    stride = torch.cat([torch.ones(1, dtype=torch.int64), nv.cumprod(0)[:-1]])
    want = (((pos - start) / size).to(torch.int64) * stride).sum(1)
    assert torch.equal(flat.grid_cluster(pos, size), want)
    assert torch.equal(flat.grid_cluster(pos.float(), size.float()),
                       ((((pos.float() - start.float()) / size.float()).to(torch.int64))
                        * (torch.cat([torch.ones(1, dtype=torch.int64),
                                      (((end.float() - start.float()) / size.float()).to(torch.int64) + 1).cumprod(0)[:-1]])))
                       .sum(1))


# ---------------------------------------------------------------------------- package / compile


def test_exposed_from_package():
    import pcops

    assert pcops.flat is flat
    for name in flat.__all__:
        assert callable(getattr(flat, name))


def test_ops_opcheck():
    x = torch.rand(20, 3)
    ptr = torch.tensor([0, 8, 8, 20])
    torch.library.opcheck(torch.ops.pcops.nearest.default, (x, x, ptr, ptr))
    torch.library.opcheck(torch.ops.pcops.grid_cluster.default, (x, torch.tensor([0.3, 0.3, 0.3]), None, None))
    for op, args in (
        (torch.ops.pcops.radius.default, (x, x, ptr, ptr, 0.5, 4, True)),
        (torch.ops.pcops.knn_ragged.default, (x, x, ptr, ptr, 3, False)),
        (torch.ops.pcops.furthest_point_sample_ragged.default,
         (x, ptr, torch.tensor([2, 0, 3]), torch.tensor([0, 0, 1]))),
    ):
        torch.library.opcheck(op, args, test_utils=("test_schema", "test_autograd_registration"))
