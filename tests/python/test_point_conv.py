"""pcops.point_conv and pcops.nn.PointConv: forward and both gradients against a float64
gather-GEMM-scatter reference, the contract's order bitwise, gradcheck, empty and bad triplets,
determinism across thread counts, triplet construction (contract: docs/ops/point_conv.md)."""

from __future__ import annotations

import os

import pytest
import torch

import pcops
from conftest import with_threads


def _inputs(gen, n_in=40, n_out=30, c_in=6, c_out=5, K=27, T=400, dtype=torch.float32):
    features = (torch.rand(n_in, c_in, generator=gen) * 2 - 1).to(dtype)
    weights = (torch.rand(K, c_out, c_in, generator=gen) * 2 - 1).to(dtype)
    triplets = torch.stack(
        [
            torch.randint(0, n_out, (T,), generator=gen),
            torch.randint(0, n_in, (T,), generator=gen),
            torch.randint(0, K, (T,), generator=gen),
        ],
        dim=1,
    )
    return features, weights, triplets


def _reference64(features, weights, triplets, num_out):
    """float64 gather-GEMM-scatter: materialise the gathered rows, batched matrix-vector, scatter-add."""
    i, j, k = triplets.unbind(1)
    gathered = features.double()[j]  # [T, C_in]
    msgs = torch.bmm(weights.double()[k], gathered.unsqueeze(2)).squeeze(2)  # [T, C_out]
    out = torch.zeros(num_out, weights.shape[1], dtype=torch.float64)
    return out.index_add(0, i, msgs)


def _contract_order(features, weights, triplets, num_out):
    """The contract's float32 order, one output element at a time (small sizes only)."""
    rows = sorted(map(tuple, triplets.tolist()), key=lambda r: (r[0], r[2], r[1]))
    out = torch.zeros(num_out, weights.shape[1], dtype=torch.float32)
    for i, j, k in rows:
        for c in range(features.shape[1]):
            # One rounding for the product and one for the sum, as the contract states.
            out[i] = out[i] + weights[k, :, c] * features[j, c]
    return out


def _sorted_by(triplets, cols):
    """The triplet rows ordered by the columns ``cols`` (most significant first), stably."""
    order = torch.arange(triplets.shape[0])
    for c in reversed(cols):
        order = order[torch.sort(triplets[order, c], stable=True).indices]
    return triplets[order]


def _ranks(keys):
    """Rank of each entry among the equal keys before it (keys sorted)."""
    idx = torch.arange(keys.shape[0])
    first = torch.ones_like(keys, dtype=torch.bool)
    first[1:] = keys[1:] != keys[:-1]
    start = torch.cummax(torch.where(first, idx, torch.zeros_like(idx)), 0).values
    return idx - start


def _rounds(triplets, cols):
    """The triplets ordered by ``cols`` in rounds: round p holds the p-th triplet of every group
    of equal ``cols[0]``, so one round's updates touch distinct rows. Yields (i, j, k)."""
    t = _sorted_by(triplets, cols)
    r = _ranks(t[:, cols[0]])
    for p in range(int(r.max()) + 1 if len(r) else 0):
        yield t[r == p].unbind(1)


def _contract_all(features, weights, triplets, num_out, grad):
    """Forward, grad_features and grad_weights in the contract's float32 order, every element's
    fold in lockstep over the rows (one float32 product and one float32 sum per term)."""
    F, W, G = features.float(), weights.float(), grad.float()
    out = torch.zeros(num_out, W.shape[1])
    for i, j, k in _rounds(triplets, (0, 2, 1)):
        acc = out[i]
        for c in range(F.shape[1]):
            acc = acc + W[k, :, c] * F[j, c][:, None]
        out[i] = acc
    gf = torch.zeros_like(F)
    for i, j, k in _rounds(triplets, (1, 2, 0)):
        acc = gf[j]
        for o in range(W.shape[1]):
            acc = acc + W[k, o, :] * G[i, o][:, None]
        gf[j] = acc
    gw = torch.zeros_like(W)
    for i, j, k in _rounds(triplets, (2, 0, 1)):
        gw[k] = gw[k] + G[i][:, :, None] * F[j][:, None, :]
    return out, gf, gw


@pytest.mark.parametrize("shape", [(60, 50, 72, 80, 8, 900), (30, 20, 33, 130, 5, 300), (40, 30, 6, 5, 27, 400),
                                   (20, 25, 64, 16, 3, 200), (25, 20, 20, 200, 2, 150)])
def test_forward_and_gradients_match_contract_order_bitwise(shape, gen):
    # Channel counts around the CPU kernels' register blocks (64 / 32 / 16 destination channels,
    # 64-channel and 16-channel column blocks of the weight gradient) and their tails.
    n_in, n_out, c_in, c_out, K, T = shape
    features, weights, triplets = _inputs(gen, n_in, n_out, c_in, c_out, K, T)
    grad = torch.rand(n_out, c_out, generator=gen) * 2 - 1
    out = pcops.point_conv(features, weights, triplets, n_out)
    gf, gw = torch.ops.pcops._point_conv_backward(grad, features, weights, triplets, n_out)
    for got, want in zip((out, gf, gw), _contract_all(features, weights, triplets, n_out, grad)):
        assert torch.equal(got, want)


def test_forward_matches_contract_order_bitwise(gen):
    features, weights, triplets = _inputs(gen, n_in=12, n_out=9, c_in=4, c_out=3, K=8, T=60)
    out = pcops.point_conv(features, weights, triplets, 9)
    assert torch.equal(out, _contract_order(features, weights, triplets, 9))


@pytest.mark.parametrize("shape", [(40, 30, 6, 5, 27, 400), (100, 100, 32, 16, 27, 2000), (5, 3, 1, 1, 1, 7)])
def test_forward_and_gradients_match_float64_reference(shape, gen):
    n_in, n_out, c_in, c_out, K, T = shape
    features, weights, triplets = _inputs(gen, n_in, n_out, c_in, c_out, K, T)
    features.requires_grad_()
    weights.requires_grad_()
    out = pcops.point_conv(features, weights, triplets, n_out)
    grad = torch.rand(n_out, c_out, generator=gen) * 2 - 1
    gf, gw = torch.autograd.grad(out, (features, weights), grad)

    f64 = features.detach().double().requires_grad_()
    w64 = weights.detach().double().requires_grad_()
    ref = _reference64(f64, w64, triplets, n_out)
    rf, rw = torch.autograd.grad(ref, (f64, w64), grad.double())
    # float32 summation error bound: (terms per element) * 2^-24 * (sum of |terms|), the sums of
    # absolute terms being the same maps applied to |F|, |W| and |G|.
    abs_out = _reference64(features.detach().abs(), weights.detach().abs(), triplets, n_out)
    fa = features.detach().abs().double().requires_grad_()
    wa = weights.detach().abs().double().requires_grad_()
    abs_f, abs_w = torch.autograd.grad(_reference64(fa, wa, triplets, n_out), (fa, wa), grad.abs().double())
    per_row = max(int(torch.bincount(triplets[:, c]).max()) for c in range(3)) if T else 0
    u = 2.0**-24 * (per_row * max(c_in, c_out) + 1)
    assert bool(((out.double() - ref).abs() <= u * abs_out).all())
    assert bool(((gf.double() - rf).abs() <= u * abs_f).all())
    assert bool(((gw.double() - rw).abs() <= u * abs_w).all())


@pytest.mark.filterwarnings("ignore:Input #")
def test_gradcheck(gen):
    # float32 op: finite differences at eps 1e-2 are exact up to rounding for a bilinear map.
    features, weights, triplets = _inputs(gen, n_in=6, n_out=5, c_in=3, c_out=2, K=4, T=20)
    features.requires_grad_()
    weights.requires_grad_()
    assert torch.autograd.gradcheck(
        lambda f, w: pcops.point_conv(f, w, triplets, 5), (features, weights), eps=1e-2, atol=2e-3, rtol=1e-3
    )


@pytest.mark.filterwarnings("ignore:Input #")
def test_gradgradcheck(gen):
    features, weights, triplets = _inputs(gen, n_in=5, n_out=4, c_in=2, c_out=3, K=3, T=14)
    features.requires_grad_()
    weights.requires_grad_()
    assert torch.autograd.gradgradcheck(
        lambda f, w: pcops.point_conv(f, w, triplets, 4), (features, weights), eps=1e-2, atol=2e-3, rtol=1e-3
    )


def test_independent_of_triplet_order_and_threads(gen):
    features, weights, triplets = _inputs(gen, n_in=300, n_out=250, c_in=16, c_out=24, K=27, T=6000)
    grad = torch.rand(250, 24, generator=gen)

    def run(t):
        out = pcops.point_conv(features, weights, t, 250)
        gf, gw = torch.ops.pcops._point_conv_backward(grad, features, weights, t, 250)
        return out, gf, gw

    base = with_threads(1, lambda: run(triplets))
    for threads in (2, 4):
        for a, b in zip(base, with_threads(threads, lambda: run(triplets))):
            assert torch.equal(a, b)
    perm = torch.randperm(triplets.shape[0], generator=gen)
    for a, b in zip(base, run(triplets[perm])):
        assert torch.equal(a, b)


def test_empty_triplets(gen):
    features, weights, _ = _inputs(gen)
    features.requires_grad_()
    weights.requires_grad_()
    empty = torch.zeros(0, 3, dtype=torch.int64)
    out = pcops.point_conv(features, weights, empty, 7)
    assert out.shape == (7, 5) and torch.equal(out, torch.zeros(7, 5))
    out.sum().backward()
    assert torch.equal(features.grad, torch.zeros_like(features))
    assert torch.equal(weights.grad, torch.zeros_like(weights))
    assert pcops.point_conv(features, weights, empty, 0).shape == (0, 5)


def test_default_num_out_is_num_in(gen):
    features, weights, triplets = _inputs(gen, n_in=30, n_out=30)
    expect = pcops.point_conv(features, weights, triplets, 30)
    assert torch.equal(pcops.point_conv(features, weights, triplets), expect)


@pytest.mark.parametrize("col,value", [(0, 30), (0, -1), (1, 40), (1, -2), (2, 27), (2, -1)])
def test_out_of_range_triplets_raise_index_error(col, value, gen):
    features, weights, triplets = _inputs(gen)
    triplets[17, col] = value
    with pytest.raises(IndexError, match="triplets"):
        pcops.point_conv(features, weights, triplets, 30)
    with pytest.raises(IndexError, match="triplets"):
        torch.ops.pcops._point_conv_backward(torch.zeros(30, 5), features, weights, triplets, 30)


def test_bad_arguments(gen):
    features, weights, triplets = _inputs(gen)
    with pytest.raises(ValueError, match="weights"):
        pcops.point_conv(features, weights[:, :, :3], triplets, 30)
    with pytest.raises(ValueError, match="triplets"):
        pcops.point_conv(features, weights, triplets[:, :2], 30)
    with pytest.raises(TypeError, match="triplets"):
        pcops.point_conv(features, weights, triplets.int(), 30)
    with pytest.raises(TypeError, match="features"):
        pcops.point_conv(features.double(), weights, triplets, 30)
    with pytest.raises(ValueError, match="num_out"):
        pcops.point_conv(features, weights, triplets, -1)
    with pytest.raises(ValueError, match="features"):
        pcops.point_conv(features[None], weights, triplets, 30)


def test_half_inputs_round_once(gen):
    features, weights, triplets = _inputs(gen, dtype=torch.float16)
    out = pcops.point_conv(features, weights, triplets, 30)
    assert out.dtype == torch.float16
    assert torch.equal(out, pcops.point_conv(features.float(), weights.float(), triplets, 30).half())


def test_opcheck(gen):
    features, weights, triplets = _inputs(gen, n_in=10, n_out=8, c_in=3, c_out=4, K=8, T=50)
    features.requires_grad_()
    weights.requires_grad_()
    torch.library.opcheck(torch.ops.pcops.point_conv.default, (features, weights, triplets, 8))
    grad = torch.rand(8, 4, generator=gen)
    for need in [(True, True), (True, False), (False, True)]:
        torch.library.opcheck(
            torch.ops.pcops._point_conv_backward.default,
            (grad.requires_grad_(), features, weights, triplets, 8, *need),
        )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fast_mode_on_cpu_is_the_exact_path(dtype, gen):
    # The tensor-core path is CUDA's; on the CPU "fast" runs the contract, bit for bit.
    features, weights, triplets = _inputs(gen, c_in=16, c_out=8, dtype=dtype)
    grad = torch.rand(30, 8, generator=gen).to(dtype)
    results = []
    for mode in ("exact", "fast"):
        f, w = features.clone().requires_grad_(), weights.clone().requires_grad_()
        out = pcops.point_conv(f, w, triplets, 30, mode=mode)
        results.append((out, *torch.autograd.grad(out, (f, w), grad)))
    for a, b in zip(*results):
        assert a.dtype == dtype and torch.equal(a, b)
    layer = pcops.nn.PointConv(16, 8, kernel_size=3, mode="fast")
    assert "mode='fast'" in repr(layer)
    assert torch.equal(layer(features.float(), triplets, 30),
                       pcops.point_conv(features.float(), layer.weight, triplets, 30) + layer.bias)


def test_kept_groupings_give_the_same_bits(gen, monkeypatch):
    """The triplets' groupings are kept with the triplet tensor (grad_features: (tile of 64 input
    rows, k) groups; grad_weights: (k, block of 64 output rows), which the forward reads too;
    offsets and a 4-byte key a triplet each): later calls sort nothing and give the bits of
    calls that sort (PCOPS_POINT_CONV_KEEP=0); an in-place change sorts again, and so do values
    written through a NumPy view (no version change: the values' fingerprint differs), an
    out-of-range one raising IndexError; a freed tensor's groupings are let go, inference tensors
    keep none."""
    from pcops.ops.point_conv import kept_grouping_bytes

    kept_grouping_bytes(release=True)
    n_in, n_out, K, T = 500, 300, 27, 6000
    features, weights, t = _inputs(gen, n_in, n_out, 8, 8, K, T)

    def layer(t):
        f, w = features.clone().requires_grad_(), weights.clone().requires_grad_()
        out = pcops.point_conv(f, w, t, n_out)
        return (out.detach(), *torch.autograd.grad(out, (f, w), torch.ones_like(out)))

    first = layer(t)
    tiles = lambda n: -(-n // 64)  # noqa: E731
    # (The forward reads the weight gradient's grouping: the same keys, (k, tile) groups.)
    expect = sum(8 * (groups + 1) + 4 * T for groups in (tiles(n_in) * K, K * tiles(n_out)))
    assert kept_grouping_bytes() == expect
    again = layer(t)
    assert kept_grouping_bytes() == expect
    monkeypatch.setenv("PCOPS_POINT_CONV_KEEP", "0")
    sorted_now = layer(t)
    monkeypatch.delenv("PCOPS_POINT_CONV_KEEP")
    for a, b, c in zip(first, again, sorted_now):
        assert torch.equal(a, b) and torch.equal(a, c)
    t[:, 2] = (t[:, 2] + 1) % K  # in place: sorted again, the changed triplets' results
    changed = layer(t)
    assert not torch.equal(changed[0], first[0])
    for a, b in zip(changed, layer(t.clone())):
        assert torch.equal(a, b)
    assert kept_grouping_bytes() == expect
    # Written past the version counter (a NumPy view): the fingerprint of the values tells.
    before, version = layer(t), t._version
    t.numpy()[7, 2] = (t[7, 2] + 1) % K
    t.numpy()[[3, 4]] = t.numpy()[[4, 3]]
    assert t._version == version  # the writes bypassed the version counter
    through_numpy = layer(t)
    assert not torch.equal(through_numpy[0], before[0])
    for a, b in zip(through_numpy, layer(t.clone())):
        assert torch.equal(a, b)
    t.numpy()[9, 0] = n_out  # out of range: checked again
    with pytest.raises(IndexError, match="output index i"):
        layer(t)
    t.numpy()[9, 0] = 0
    del t
    assert kept_grouping_bytes() == 0
    with torch.inference_mode():
        pcops.point_conv(features, weights, torch.zeros(5, 3, dtype=torch.int64), n_out)
    assert kept_grouping_bytes() == 0
    # sorting_in_every_call: nothing kept inside (the same bits), the setting restored after.
    from pcops.ops.point_conv import sorting_in_every_call

    t2 = _inputs(gen, n_in, n_out, 8, 8, K, T)[2]
    kept_before = layer(t2)
    assert kept_grouping_bytes() > 0
    with sorting_in_every_call():
        assert kept_grouping_bytes() == 0
        inside = layer(t2)
        assert kept_grouping_bytes() == 0
    for a, b in zip(kept_before, inside):
        assert torch.equal(a, b)
    assert "PCOPS_POINT_CONV_KEEP" not in os.environ
    layer(t2)
    assert kept_grouping_bytes() > 0


def test_mode_errors(gen):
    features, weights, triplets = _inputs(gen)
    with pytest.raises(ValueError, match="mode"):
        pcops.point_conv(features, weights, triplets, 30, mode="tf32")
    with pytest.raises(ValueError, match="mode"):
        torch.ops.pcops.point_conv(features, weights, triplets, 30, "tf32")
    with pytest.raises(ValueError, match="mode"):
        torch.ops.pcops._point_conv_backward(torch.zeros(30, 5), features, weights, triplets, 30, True, True, "")
    with pytest.raises(ValueError, match="mode"):
        pcops.nn.PointConv(6, 5, mode="half")
    torch.library.opcheck(torch.ops.pcops.point_conv.default, (features, weights, triplets, 30, "fast"))


def test_triplets_from_ball_query(gen):
    pts = torch.rand(200, 3, generator=gen)
    radius, t = 0.2, 3
    _, idx = pcops.ball_query(pts[None], pts[None], radius, 16)
    trip = pcops.point_conv_triplets(pts, pts, idx[0], radius, t)
    # Brute force from the contract, in float64 except for the float32 steps it names.
    rows = []
    h = torch.tensor(2 * radius, dtype=torch.float32) / t
    for i in range(200):
        for s in range(16):
            j = int(idx[0, i, s])
            if j < 0:
                continue
            r32 = torch.tensor(radius, dtype=torch.float32)
            q = torch.floor(((pts[j] - pts[i]) + r32) / h).clamp(0, t - 1)
            q = q.long().tolist()
            rows.append([i, j, (q[0] * t + q[1]) * t + q[2]])
    assert torch.equal(trip, torch.tensor(rows, dtype=torch.int64))
    assert int(trip[:, 2].max()) < t**3
    # A centre is its own neighbour, in the middle cell.
    self_rows = trip[trip[:, 0] == trip[:, 1]]
    assert self_rows.shape[0] == 200 and bool((self_rows[:, 2] == 13).all())


def test_triplets_from_knn_clamp_to_border_cells(gen):
    pts = torch.rand(100, 3, generator=gen) * 10
    _, idx = pcops.knn(pts[None], pts[None], 8)
    trip = pcops.point_conv_triplets(pts, pts, idx[0], 0.01, 2)
    assert trip.shape == (800, 3)
    assert int(trip[:, 2].min()) >= 0 and int(trip[:, 2].max()) < 8


def test_native_triplets_equal_the_tensor_formula(gen):
    """The CPU construction is one native pass; its rows are bitwise those of the formula in tensor
    operations (what runs under torch.compile), for any thread count."""
    from triplet_cases import cube_cases

    from pcops.ops.point_conv import _triplets_reference

    threads = torch.get_num_threads()
    try:
        for centres, points, nb, extent, t in cube_cases(gen):
            ref = _triplets_reference(centres, points, nb, extent, t)
            for n in (1, 2, 3):
                torch.set_num_threads(n)
                got = pcops.point_conv_triplets(centres, points, nb, extent, t)
                assert got.dtype == torch.int64 and got.shape == ref.shape
                assert torch.equal(got, ref), (extent, t, n)
    finally:
        torch.set_num_threads(threads)
    # The border grid reaches every cell, the corners the border cells.
    centres, points, nb, extent, t = cube_cases(gen)[5]
    trip = pcops.point_conv_triplets(centres, points, nb, extent, t)
    assert sorted(set(trip[:, 2].tolist())) == list(range(t**3))
    # Offsets exactly on the first border of a cell side that a reciprocal would round up: the
    # middle cells (1, 1, 1) = 13 and (1, 1, 1) again for (d, 0, 0) (0 is mid-cell), and the centre.
    centres, points, nb, extent, t = cube_cases(gen)[6]
    assert pcops.point_conv_triplets(centres, points, nb, extent, t)[:, 2].tolist() == [13, 13, 13]
    torch.library.opcheck(torch.ops.pcops._point_conv_triplets.default, (centres, points, nb, extent, t))


def test_batched_triplets_are_the_clouds_flattened(gen):
    """A batch [B, M, 3] / [B, N, 3] / [B, M, S]: each cloud's triplets with its centres and points
    offset into the flattened batch; a convolution over them is each cloud's convolution."""
    B, M, N = 3, 40, 70
    pts = torch.rand(B, N, 3, generator=gen)
    centres = pts[:, :M].contiguous()
    _, knn_idx = pcops.knn(centres, pts, 8)
    _, ball_idx = pcops.ball_query(centres, pts, 0.2, 12)
    assert (ball_idx < 0).any()
    for idx, extent in ((knn_idx, 0.1), (ball_idx, 0.2)):
        got = pcops.point_conv_triplets(centres, pts, idx, extent, 3)
        per_cloud = [pcops.point_conv_triplets(centres[b], pts[b], idx[b], extent, 3) for b in range(B)]
        expect = torch.cat([tr + torch.tensor([b * M, b * N, 0]) for b, tr in enumerate(per_cloud)])
        assert torch.equal(got, expect)
        features, weights = torch.rand(B * N, 5, generator=gen), torch.rand(27, 4, 5, generator=gen)
        out = pcops.point_conv(features, weights, got, B * M)
        for b in range(B):
            one = pcops.point_conv(features[b * N:(b + 1) * N], weights, per_cloud[b], M)
            assert torch.equal(out[b * M:(b + 1) * M], one)
    bad = knn_idx.clone()
    bad[1, 3, 2] = N  # inside the flattened batch, outside its cloud
    with pytest.raises(IndexError, match="each cloud"):
        pcops.point_conv_triplets(centres, pts, bad, 0.1, 3)
    with pytest.raises(ValueError, match="batch size"):
        pcops.point_conv_triplets(centres, pts[:2], knn_idx, 0.1, 3)
    with pytest.raises(ValueError, match="batch size"):
        pcops.point_conv_triplets(centres, pts, knn_idx[:, :5], 0.1, 3)


def test_triplets_under_compile(gen):
    """fullgraph torch.compile through the native op (a data-dependent number of rows)."""
    pts = torch.rand(500, 3, generator=gen)
    _, idx = pcops.ball_query(pts[None], pts[None], 0.1, 12)

    def build(c, p, nb):
        return pcops.point_conv_triplets(c, p, nb, 0.1, 3)

    torch._dynamo.reset()
    compiled = torch.compile(build, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(pts, pts, idx[0]), build(pts, pts, idx[0]))
    batch = torch.stack([pts, pts.flip(0)])  # a batch of two clouds
    _, idx2 = pcops.ball_query(batch, batch, 0.1, 12)
    assert torch.equal(compiled(batch, batch, idx2), build(batch, batch, idx2))


def test_triplet_construction_errors(gen):
    pts = torch.rand(10, 3, generator=gen)
    idx = torch.zeros(10, 4, dtype=torch.int64)
    with pytest.raises(ValueError, match="extent"):
        pcops.point_conv_triplets(pts, pts, idx, 0.0)
    with pytest.raises(ValueError, match="t"):
        pcops.point_conv_triplets(pts, pts, idx, 0.1, 0)
    with pytest.raises(IndexError, match="neighbours"):
        pcops.point_conv_triplets(pts, pts, idx + 10, 0.1)
    with pytest.raises(ValueError, match="neighbours"):
        pcops.point_conv_triplets(pts, pts, idx[:5], 0.1)
    with pytest.raises(ValueError, match="extent"):
        pcops.point_conv_triplets(pts, pts, idx, 1e39)  # infinite in float32
    with pytest.raises(ValueError, match="too small"):
        pcops.point_conv_triplets(pts, pts, idx, 1e-45, 1000)
    bad = pts.clone()
    bad[3, 1] = float("nan")
    with pytest.raises(ValueError, match="finite"):
        pcops.point_conv_triplets(pts, bad, idx, 0.1)
    # The native op on its own checks too (nothing written on bad input).
    with pytest.raises(IndexError, match="neighbours"):
        torch.ops.pcops._point_conv_triplets(pts, pts, idx - 2, 0.1, 3)
    with pytest.raises(ValueError, match="finite"):
        torch.ops.pcops._point_conv_triplets(bad, pts, idx, 0.1, 3)
    with pytest.raises(ValueError, match="t"):
        torch.ops.pcops._point_conv_triplets(pts, pts, idx, 0.1, 0)


def test_point_conv_module_trains(gen):
    torch.manual_seed(0)
    pts = torch.rand(300, 3, generator=gen)
    _, idx = pcops.knn(pts[None], pts[None], 8)
    trip = pcops.point_conv_triplets(pts, pts, idx[0], 0.15, 3)
    layer = pcops.nn.PointConv(3, 4, kernel_size=3)
    assert layer.weight.shape == (27, 4, 3) and "kernel_size=3" in repr(layer)
    target = torch.sin(pts @ torch.rand(3, 4, generator=gen) * 3)
    opt = torch.optim.Adam(layer.parameters(), lr=0.02)
    first = None
    for _ in range(60):
        loss = torch.nn.functional.mse_loss(layer(pts, trip), target)
        first = first if first is not None else loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.5 * first
    with pytest.raises(ValueError):
        pcops.nn.PointConv(0, 4)


def test_compile_fullgraph_aot_eager_matches_eager(gen):
    torch._dynamo.reset()
    features, weights, triplets = _inputs(gen, n_in=20, n_out=20, c_in=4, c_out=6, K=8, T=90)
    layer = pcops.nn.PointConv(4, 6, kernel_size=2)

    def step(f):
        return torch.relu(layer(f, triplets)).sum()

    f1 = features.clone().requires_grad_()
    step(f1).backward()
    f2 = features.clone().requires_grad_()
    torch.compile(step, fullgraph=True, backend="aot_eager")(f2).backward()
    assert torch.equal(f1.grad, f2.grad)


def test_segmentation_example_reaches_its_accuracy(tmp_path):
    from segmentation_example import check_segmentation, run_segmentation_example

    _, res = run_segmentation_example(tmp_path)
    if res is not None:
        assert (res["device"], res["dtype"], res["mode"]) == ("cpu", "float32", "exact")
        check_segmentation(res)
