"""CUDA pcops.point_conv (forward, both gradients, triplet construction, the nn module) against the
CPU backend bit for bit; out-of-range triplets raise IndexError before any kernel runs (their
ranges read back once per unchanged triplet tensor)."""

from __future__ import annotations

import pytest
import torch
from conftest import no_sync, same_bits

import pcops


def _inputs(gen, n_in, n_out, c_in, c_out, K, T):
    features = torch.rand(n_in, c_in, generator=gen) * 2 - 1
    weights = torch.rand(K, c_out, c_in, generator=gen) * 2 - 1
    triplets = torch.stack([torch.randint(0, n_out, (T,), generator=gen),
                            torch.randint(0, n_in, (T,), generator=gen),
                            torch.randint(0, K, (T,), generator=gen)], dim=1)
    return features, weights, triplets


@pytest.mark.parametrize("shape", [(40, 30, 6, 5, 27, 400), (3000, 2500, 64, 96, 27, 60000),
                                   (5, 3, 1, 1, 1, 7), (10, 10, 4, 4, 27, 0)])
def test_forward_and_gradients_bitwise(shape, gen):
    n_in, n_out, c_in, c_out, K, T = shape
    f, w, t = _inputs(gen, n_in, n_out, c_in, c_out, K, T)
    grad = torch.rand(n_out, c_out, generator=gen)
    outs = []
    for dev in ("cpu", "cuda"):
        fd, wd = f.to(dev).requires_grad_(), w.to(dev).requires_grad_()
        out = pcops.point_conv(fd, wd, t.to(dev), n_out)
        gf, gw = torch.autograd.grad(out, (fd, wd), grad.to(dev))
        outs.append((out, gf, gw))
    for a, b in zip(*outs):
        assert same_bits(a, b)


def test_triplets_and_module_match_cpu(gen):
    pts = torch.rand(2000, 3, generator=gen)
    _, idx = pcops.ball_query(pts[None], pts[None], 0.1, 16)
    trip = pcops.point_conv_triplets(pts, pts, idx[0], 0.1, 3)
    trip_cuda = pcops.point_conv_triplets(pts.cuda(), pts.cuda(), idx[0].cuda(), 0.1, 3)
    assert torch.equal(trip, trip_cuda.cpu())
    layer = pcops.nn.PointConv(3, 8)
    assert same_bits(layer(pts, trip), layer.cuda()(pts.cuda(), trip_cuda))


def _cpu_tests_module(name):
    """A helper module of the CPU tests (tests/python), shared with these."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[2] / "python" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_native_triplets_equal_the_cpu_rows(gen):
    """The CUDA construction (count, scan, fill) gives the CPU's rows bit for bit on the cases of
    the CPU tests (real cloud kNN / ball query, offsets on cell borders and outside the cube,
    empty and all-padding neighbourhoods), and the same errors before any kernel runs."""
    from pcops.ops.point_conv import _triplets_reference

    cases = _cpu_tests_module("triplet_cases").cube_cases(gen)
    for centres, points, nb, extent, t in cases:
        ref = pcops.point_conv_triplets(centres, points, nb, extent, t)
        got = pcops.point_conv_triplets(centres.cuda(), points.cuda(), nb.cuda(), extent, t)
        assert got.is_cuda and got.dtype == torch.int64 and torch.equal(got.cpu(), ref), (extent, t)
        traced = _triplets_reference(centres.cuda(), points.cuda(), nb.cuda(), extent, t)
        assert torch.equal(traced, got)
    # A batch of clouds (the flattened indices).
    pts = torch.rand(3, 500, 3, generator=gen)
    _, idx = pcops.ball_query(pts, pts, 0.15, 10)
    assert torch.equal(pcops.point_conv_triplets(pts.cuda(), pts.cuda(), idx.cuda(), 0.15).cpu(),
                       pcops.point_conv_triplets(pts, pts, idx, 0.15))
    centres, points, nb, extent, t = (x.cuda() if isinstance(x, torch.Tensor) else x for x in cases[0])
    torch.library.opcheck(torch.ops.pcops._point_conv_triplets.default, (centres, points, nb, extent, t))
    op = torch.ops.pcops._point_conv_triplets
    with pytest.raises(IndexError, match="neighbours"):
        op(centres, points, nb - 2, extent, t)
    with pytest.raises(IndexError, match="neighbours"):
        op(centres, points, nb + points.shape[0], extent, t)
    bad = points.clone()
    bad[3, 1] = float("inf")
    with pytest.raises(ValueError, match="points: expected finite"):
        op(centres, bad, nb, extent, t)
    with pytest.raises(ValueError, match="t"):
        op(centres, points, nb, extent, 0)
    with pytest.raises(ValueError, match="extent"):
        op(centres, points, nb, float("nan"), t)
    with pytest.raises(ValueError, match="points: expected device"):
        op(centres, points.cpu(), nb, extent, t)


def test_out_of_range_raises_index_error(gen):
    f, w, t = _inputs(gen, 40, 30, 6, 5, 27, 400)
    t[5, 2] = 27
    with pytest.raises(IndexError, match="triplets"):
        pcops.point_conv(f.cuda(), w.cuda(), t.cuda(), 30)


@pytest.mark.parametrize("mode, dtype", [("exact", torch.float32), ("fast", torch.bfloat16)])
def test_known_triplets_are_not_read_back_again(mode, dtype, gen):
    """A triplet tensor's column ranges are read back (a stream sync) the first time only: later
    forwards and backwards on the unchanged tensor check the bounds without synchronizing."""
    f, w, t = (x.cuda() for x in _inputs(gen, 300, 200, 16, 24, 27, 5000))
    f, w = f.to(dtype).requires_grad_(), w.to(dtype).requires_grad_()
    first = pcops.point_conv(f, w, t, 200, mode=mode)
    first.sum().backward()
    ref = [first.detach().clone(), f.grad.clone(), w.grad.clone()]
    f.grad = w.grad = None
    with no_sync():
        again = pcops.point_conv(f, w, t, 200, mode=mode)
        again.sum().backward()
    for a, b in zip(ref, [again.detach(), f.grad, w.grad]):
        assert same_bits(a, b)
    # The bounds are checked against the ranges kept: fewer outputs than the largest i raise.
    with pytest.raises(IndexError, match="output index i"):
        pcops.point_conv(f, w, t, int(t[:, 0].max()), mode=mode)
    with pytest.raises(IndexError, match="kernel index k"):
        pcops.point_conv(f, w[:20], t, 200, mode=mode)


def test_triplets_changed_or_new_are_read_again(gen):
    f, w, t = (x.cuda() for x in _inputs(gen, 40, 30, 6, 5, 27, 400))
    pcops.point_conv(f, w, t, 30)
    t[7, 1] = 40  # an in-place write moves the version counter: read again
    with pytest.raises(IndexError, match="input index j"):
        pcops.point_conv(f, w, t, 30)
    t[7, 1] = 39
    pcops.point_conv(f, w, t, 30)
    t.view(-1)[3 * 9] = -1  # through a view: the same version counter
    with pytest.raises(IndexError, match="output index i"):
        pcops.point_conv(f, w, t, 30)
    t[9, 0] = 0
    # A tensor freed and another allocated in its place (the caching allocator hands the same
    # memory back) is a new tensor.
    good = t.clone()
    pcops.point_conv(f, w, good, 30)
    address = good.data_ptr()
    del good
    bad = torch.empty(400, 3, dtype=torch.int64, device="cuda")
    bad.copy_(t)
    bad[0, 2] = 99
    assert bad.data_ptr() == address
    with pytest.raises(IndexError, match="kernel index k"):
        pcops.point_conv(f, w, bad, 30)
    # Inference tensors (no version counter) are read every time.
    with torch.inference_mode():
        ti = t.clone()
        pcops.point_conv(f, w, ti, 30)
        ti[0, 2] = 27
        with pytest.raises(IndexError, match="kernel index k"):
            pcops.point_conv(f, w, ti, 30)


# ---- mode="fast": the tensor-core path for float16 / bfloat16 ----

def _reference(f, w, t, n_out, g=None):
    """float64 forward (and, with g, both gradients) of the 16-bit inputs, with the sums of
    absolute terms that bound the float32 accumulation error."""
    f64, w64 = f.double().cpu(), w.double().cpu()
    i, j, k = (t[:, c].cpu() for c in range(3))
    prod = torch.einsum("toc,tc->to", w64[k], f64[j])
    out = torch.zeros(n_out, w.shape[1], dtype=torch.float64).index_add_(0, i, prod)
    mag = torch.zeros_like(out).index_add_(0, i, torch.einsum("toc,tc->to", w64[k].abs(), f64[j].abs()))
    if g is None:
        return out, mag
    g64 = g.double().cpu()
    gf = torch.zeros_like(f64).index_add_(0, j, torch.einsum("toc,to->tc", w64[k], g64[i]))
    gfm = torch.zeros_like(f64).index_add_(0, j, torch.einsum("toc,to->tc", w64[k].abs(), g64[i].abs()))
    gw = torch.zeros_like(w64).index_add_(0, k, torch.einsum("to,tc->toc", g64[i], f64[j]))
    gwm = torch.zeros_like(w64).index_add_(0, k, torch.einsum("to,tc->toc", g64[i].abs(), f64[j].abs()))
    return out, mag, gf, gfm, gw, gwm


def _chain(t, col, count):
    """The longest sum of one element: the most triplets that share a value of column ``col``."""
    return int(torch.bincount(t[:, col].cpu(), minlength=count).max()) if t.shape[0] else 0


def _close(got, ref, mag, dtype, terms):
    """got (16-bit) within one rounding to dtype of the float64 value, plus the float32 error of a
    sum of ``terms`` terms (at most one unit in the last place of float32 per addition)."""
    rel = 2.0**-8 if dtype == torch.bfloat16 else 2.0**-11
    err = (got.double().cpu() - ref).abs()
    bound = rel * ref.abs() + terms * 2.0**-23 * mag + 1e-30
    assert bool((err <= bound).all()), float((err - bound).max())


FAST_SHAPES = [
    # n_in, n_out, c_in, c_out, K, T
    (3000, 2500, 64, 96, 27, 60000),   # two channel blocks of the output, partial tiles
    (700, 700, 32, 32, 27, 20000),     # small channels (64-wide channel blocks)
    (500, 130, 136, 8, 8, 9000),       # C_in not a multiple of 32, C_out = 8
    (64, 64, 512, 520, 1, 3000),       # long channel loops, C_out past a multiple of 128
    (100, 80, 16, 24, 125, 5000),      # many kernel cells
    (2000, 1500, 24, 40, 1, 20000),    # the weight gradient in five slices (float32 partials)
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", FAST_SHAPES)
def test_fast_mode_forward_and_gradients_against_float64(shape, dtype, gen):
    n_in, n_out, c_in, c_out, K, T = shape
    f, w, t = _inputs(gen, n_in, n_out, c_in, c_out, K, T)
    f, w = f.to(dtype), (w / (c_in**0.5)).to(dtype)
    g = (torch.rand(n_out, c_out, generator=gen) * 2 - 1).to(dtype)
    fd, wd = f.cuda().requires_grad_(), w.cuda().requires_grad_()
    out = pcops.point_conv(fd, wd, t.cuda(), n_out, mode="fast")
    assert out.dtype == dtype and out.shape == (n_out, c_out)
    gf, gw = torch.autograd.grad(out, (fd, wd), g.cuda())
    assert gf.dtype == dtype and gw.dtype == dtype
    ref, mag, rgf, rgfm, rgw, rgwm = _reference(f, w, t, n_out, g)
    _close(out, ref, mag, dtype, _chain(t, 0, n_out) + c_in)
    _close(gf, rgf, rgfm, dtype, _chain(t, 1, n_in) + c_out)
    _close(gw, rgw, rgwm, dtype, _chain(t, 2, K))


@pytest.mark.parametrize("c_out", [64, 128])  # 128: the 128-channel blocks (wgmma on sm_90a)
def test_fast_mode_is_deterministic_and_independent_of_triplet_order(c_out, gen):
    f, w, t = _inputs(gen, 4000, 3000, 64, c_out, 4, 80000)  # weight gradient: five slices
    # Long runs: output 7 sees 300 triplets through one kernel cell (several chunks of rows).
    t[:300, 0], t[:300, 2] = 7, 3
    f, w, t = f.bfloat16().cuda(), (w / 8).bfloat16().cuda(), t.cuda()
    g = torch.rand(3000, c_out, generator=gen).bfloat16().cuda()
    runs = []
    for perm in (None, None, torch.randperm(t.shape[0], generator=gen).cuda()):
        tt = t if perm is None else t[perm]
        fd, wd = f.clone().requires_grad_(), w.clone().requires_grad_()
        out = pcops.point_conv(fd, wd, tt, 3000, mode="fast")
        runs.append((out, *torch.autograd.grad(out, (fd, wd), g)))
    for other in runs[1:]:
        for a, b in zip(runs[0], other):
            assert same_bits(a, b)
    ref, mag = _reference(f, w, t, 3000)
    _close(runs[0][0], ref, mag, torch.bfloat16, _chain(t, 0, 3000) + 64)


def test_fast_mode_differs_from_exact_only_by_rounding(gen):
    f, w, t = _inputs(gen, 2000, 2000, 128, 128, 27, 50000)
    f, w, t = f.half().cuda(), (w / 11).half().cuda(), t.cuda()
    fast = pcops.point_conv(f, w, t, 2000, mode="fast")
    exact = pcops.point_conv(f, w, t, 2000, mode="exact")
    assert not torch.equal(fast, exact)  # the tensor cores ran (other sums, other roundings)
    ref, mag = _reference(f, w, t, 2000)
    _close(fast, ref, mag, torch.float16, _chain(t, 0, 2000) + 128)
    _close(exact, ref, mag, torch.float16, _chain(t, 0, 2000) + 128)


def test_fast_mode_empty_and_fallbacks(gen):
    f, w, t = _inputs(gen, 50, 40, 16, 16, 27, 0)
    out = pcops.point_conv(f.half().cuda(), w.half().cuda(), t.cuda(), 40, mode="fast")
    assert out.dtype == torch.float16 and torch.equal(out, torch.zeros_like(out))
    # Rows without triplets are zero; a shape the tensor cores cannot take (C_in = 6) and float32
    # inputs run the exact path, bitwise equal to the CPU.
    for c_in, dtype in ((6, torch.float16), (16, torch.float32)):
        f, w, t = _inputs(gen, 50, 40, c_in, 16, 27, 300)
        f, w = f.to(dtype), w.to(dtype)
        got = pcops.point_conv(f.cuda(), w.cuda(), t.cuda(), 40, mode="fast")
        assert same_bits(got, pcops.point_conv(f, w, t, 40))
    f, w, t = _inputs(gen, 50, 40, 16, 16, 27, 300)
    t[:, 0] = t[:, 0] % 20
    out = pcops.point_conv(f.half().cuda(), w.half().cuda(), t.cuda(), 40, mode="fast")
    assert torch.equal(out[20:], torch.zeros_like(out[20:])) and bool(out[:20].abs().sum() > 0)


@pytest.mark.parametrize("shape", [s for s in FAST_SHAPES if max(s[2], s[3]) > 64])
def test_fast_mode_weight_gradient_on_wgmma(shape, gen, monkeypatch):
    """PCOPS_CUDA_POINT_CONV_FAST_VVOR=mma / wgmma / wgmma256 (the default): the weight gradient on
    mma.sync or in blocks of 128 x 128 (or 128 x 256 where the features have more than 128
    channels) on wgmma (mma.sync where wgmma cannot run); the same bound against float64, the
    forward and the features gradient untouched; an unknown value is an error."""
    n_in, n_out, c_in, c_out, K, T = shape
    f, w, t = _inputs(gen, n_in, n_out, c_in, c_out, K, T)
    f, w = f.bfloat16(), (w / (c_in**0.5)).bfloat16()
    g = (torch.rand(n_out, c_out, generator=gen) * 2 - 1).bfloat16()
    runs = {}
    for choice in ("mma", "wgmma", "wgmma256"):
        monkeypatch.setenv("PCOPS_CUDA_POINT_CONV_FAST_VVOR", choice)
        fd, wd = f.cuda().requires_grad_(), w.cuda().requires_grad_()
        out = pcops.point_conv(fd, wd, t.cuda(), n_out, mode="fast")
        runs[choice] = (out, *torch.autograd.grad(out, (fd, wd), g.cuda()))
    *_, rgw, rgwm = _reference(f, w, t, n_out, g)
    for choice in ("mma", "wgmma", "wgmma256"):
        assert same_bits(runs["mma"][0], runs[choice][0]) and same_bits(runs["mma"][1], runs[choice][1])
        _close(runs[choice][2], rgw, rgwm, torch.bfloat16, _chain(t, 2, K))
    monkeypatch.setenv("PCOPS_CUDA_POINT_CONV_FAST_VVOR", "tensor")
    fd = f.cuda().requires_grad_()
    out = pcops.point_conv(fd, w.cuda().requires_grad_(), t.cuda(), n_out, mode="fast")
    with pytest.raises((ValueError, RuntimeError), match="PCOPS_CUDA_POINT_CONV_FAST_VVOR"):
        out.backward(g.cuda())


def test_fast_mode_errors(gen):
    f, w, t = _inputs(gen, 40, 30, 16, 8, 27, 400)
    f, w = f.half().cuda(), w.half().cuda()
    bad = t.clone()
    bad[5, 1] = 40
    with pytest.raises(IndexError, match="triplets"):
        pcops.point_conv(f, w, bad.cuda(), 30, mode="fast")
    with pytest.raises(ValueError, match="mode"):
        pcops.point_conv(f, w, t.cuda(), 30, mode="tensor")
    with pytest.raises(ValueError, match="mode"):
        torch.ops.pcops.point_conv(f, w, t.cuda(), 30, "tensor")


def test_fast_module_trains_in_bfloat16(gen):
    pts = torch.rand(3000, 3, generator=gen)
    _, idx = pcops.knn(pts[None], pts[None], 12)
    trip = pcops.point_conv_triplets(pts, pts, idx[0], 0.05, 3).cuda()
    torch.manual_seed(0)
    net = torch.nn.ModuleList([pcops.nn.PointConv(8, 32, mode="fast"), pcops.nn.PointConv(32, 8, mode="fast")])
    net = net.cuda().bfloat16()
    x = torch.cat([pts, torch.ones(3000, 5)], 1).cuda().bfloat16()
    target = torch.sin(6 * pts[:, :1]).cuda().expand(3000, 8).bfloat16()
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    losses = []
    for _ in range(60):
        y = net[1](torch.relu(net[0](x, trip)), trip)
        loss = (y.float() - target.float()).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.3 * losses[0]


def _random_triplets(gen, n, K, T):
    return torch.stack([torch.randint(0, n, (T,), generator=gen), torch.randint(0, n, (T,), generator=gen),
                        torch.randint(0, K, (T,), generator=gen)], dim=1).cuda()


def _forward_extra_bytes(run):
    """The peak memory of run() (after a warm-up) beyond what it returns."""
    run()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = run()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base - out.numel() * out.element_size()


def _stage_images_bytes(K, c):
    """The images of the weight stages that the fast MVMR bulk-copies by default (the wgmma shapes
    with stages of 64 channels: both channel counts C > 192 on an sm_90 device), 2 K C C bytes for
    C a multiple of the channel block (128 or 256); 0 elsewhere."""
    return 2 * K * c * c if c > 192 and torch.cuda.get_device_capability() == (9, 0) else 0


@pytest.mark.parametrize("c", [8, 256])
def test_fast_mode_extra_memory_is_the_sort(gen, c, monkeypatch):
    """The fast forward's peak is its grouping's two key buffers and small scratch, or, once the
    second buffer and the scratch are released, the sorted keys and the output, which is allocated
    only then, beside an offset (and, segmented, a count and a mid) per (tile of 128 output rows,
    kernel cell): segmented (32-bit keys placed into their segments and sorted there, then split
    into 3 bytes a triplet and the 32-bit keys released: 7 T while both exist) max(8 T, 3 T +
    output), packed (one sort of 64-bit keys) max(16 T, 8 T + output). No neighbourhood buffer, no
    third copy of the keys, and the output never beside the second buffer (C = 256: the output
    outweighs a key buffer). The default takes segmented where the second buffer of the packed
    keys, 8 T, is at least the output's size (C = 8 here), packed otherwise (C = 256). Kept
    groupings off (test_kept_groupings_*: with them the calls sort nothing). The weight stages
    loaded row by row for those bounds; by default (C = 256 on an sm_90 device) they are bulk-copied
    from images packed before the grouping, _stage_images_bytes more."""
    monkeypatch.setenv("PCOPS_POINT_CONV_KEEP", "0")  # the sorts in the call
    monkeypatch.setenv("PCOPS_CUDA_POINT_CONV_BULK_W", "0")
    n, K, T = 120000, 27, 2_000_000
    f = (torch.rand(n, c, generator=gen) * 2 - 1).cuda().bfloat16()
    w = (torch.rand(K, c, c, generator=gen) * 2 - 1).cuda().bfloat16()
    t = _random_triplets(gen, n, K, T)
    out_bytes = n * c * 2
    segments = -(-n // 128) * K + 1
    peaks = {}
    for grouping, expect, small in (("segmented", max(8 * T, 3 * T + out_bytes), 16 * (segments + 1) + 1024),
                                    ("packed", max(16 * T, 8 * T + out_bytes), 8 * segments)):
        monkeypatch.setenv("PCOPS_CUDA_POINT_CONV_FAST_GROUPING", grouping)
        peak = _forward_extra_bytes(lambda: pcops.point_conv(f, w, t, n, mode="fast")) + out_bytes
        assert expect <= peak <= expect + small + (4 << 20), (grouping, peak, expect)
        peaks[grouping] = peak
    monkeypatch.delenv("PCOPS_CUDA_POINT_CONV_FAST_GROUPING")
    peak = _forward_extra_bytes(lambda: pcops.point_conv(f, w, t, n, mode="fast")) + out_bytes
    chosen = "segmented" if 8 * T >= out_bytes else "packed"
    assert abs(peak - peaks[chosen]) <= (1 << 20), (chosen, peak, peaks)
    monkeypatch.delenv("PCOPS_CUDA_POINT_CONV_BULK_W")
    images = _stage_images_bytes(K, c)
    peak_default = _forward_extra_bytes(lambda: pcops.point_conv(f, w, t, n, mode="fast")) + out_bytes
    assert abs(peak_default - peaks[chosen] - images) <= (1 << 20), (peak_default, peaks[chosen], images)


@pytest.mark.parametrize("mvmr", ["", "cells"])
def test_exact_forward_extra_memory_is_the_grouping(gen, mvmr, monkeypatch):
    """The exact forward's peak is its grouping (32-bit keys placed into the rows' segments and
    sorted there: 8 bytes a triplet during the sort, 4 after it) or, once the second key buffer is
    released, the keys and the output, which is allocated only then; the cells MVMR adds its run
    lists (two ints a triplet at most) beside them. Small parts beside: the row offsets and counts,
    the transposed weights, the runs' offsets and the scratch of the scans. At 64 channels the
    default is the slices MVMR (no run lists)."""
    monkeypatch.setenv("PCOPS_POINT_CONV_KEEP", "0")  # the sort in the call
    if mvmr:
        monkeypatch.setenv("PCOPS_CUDA_POINT_CONV_MVMR", mvmr)
    n, c, K, T = 120000, 64, 27, 2_000_000
    f = (torch.rand(n, c, generator=gen) * 2 - 1).cuda()
    w = (torch.rand(K, c, c, generator=gen) * 2 - 1).cuda()
    t = _random_triplets(gen, n, K, T)
    out_bytes = n * c * 4
    expect = max(8 * T, 4 * T + (8 * T if mvmr == "cells" else 0) + out_bytes)
    small = 12 * (n + 3) + 4 * K * c * c + 12 * (K * 32 + 1)
    peak = _forward_extra_bytes(lambda: pcops.point_conv(f, w, t, n)) + out_bytes
    assert expect <= peak <= expect + small + (4 << 20), (peak, expect)


@pytest.mark.parametrize("mode,grouping", [("fast", "segmented"), ("fast", "packed"), ("exact", "")])
def test_backward_peak_is_the_larger_gradient_step(gen, mode, grouping, monkeypatch):
    """Both gradients at once peak no higher than the larger of the two steps: the weight gradient
    runs first, and grad_features (as large as the features) is allocated only once the weight
    gradient's workspace is gone. The weight gradient's step is measured on the same triplet
    count, cells and channels with 1,000 points (its workspace does not depend on the point
    count for one grouping of the fast path, pinned here, since the default chooses by the
    features' size; its unrequested grad_features, zeros, is then small)."""
    monkeypatch.setenv("PCOPS_POINT_CONV_KEEP", "0")  # the sorts in the call
    monkeypatch.setenv("PCOPS_CUDA_POINT_CONV_FAST_GROUPING", grouping)
    n, c, K, T, small = 120000, 128, 27, 2_000_000, 1000
    dtype = torch.bfloat16 if mode == "fast" else torch.float32
    f = (torch.rand(n, c, generator=gen) * 2 - 1).cuda().to(dtype)
    w = (torch.rand(K, c, c, generator=gen) * 2 - 1).cuda().to(dtype)
    g = (torch.rand(n, c, generator=gen) * 2 - 1).cuda().to(dtype)
    t = _random_triplets(gen, n, K, T)
    t_small = t.clone()
    t_small[:, :2] %= small

    def peak(g, f, t, n, need_features, need_weights):
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        res = torch.ops.pcops._point_conv_backward(g, f, w, t, n, need_features, need_weights, mode)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base, res

    peak(g, f, t, n, True, True)  # warm-up
    p_w, _ = peak(g[:small].contiguous(), f[:small].contiguous(), t_small, small, False, True)
    p_f, (gf_alone, _) = peak(g, f, t, n, True, False)
    _, (_, gw_alone) = peak(g, f, t, n, False, True)
    p_both, (gf, gw) = peak(g, f, t, n, True, True)
    assert torch.equal(gf, gf_alone) and torch.equal(gw, gw_alone)
    assert p_both <= max(p_w, p_f) + (2 << 20), (p_both, p_w, p_f)


@pytest.fixture
def kept_bytes():
    """pcops.ops.point_conv.kept_grouping_bytes, nothing kept before or after the test."""
    from pcops.ops.point_conv import kept_grouping_bytes

    kept_grouping_bytes(release=True)
    yield kept_grouping_bytes
    kept_grouping_bytes(release=True)


def _layer(f, w, t, n_out, mode="fast"):
    """Forward and both gradients (gradient of the output's sum)."""
    f, w = f.detach().requires_grad_(), w.detach().requires_grad_()
    out = pcops.point_conv(f, w, t, n_out, mode=mode)
    gf, gw = torch.autograd.grad(out, (f, w), torch.ones_like(out))
    return out.detach(), gf, gw


def _requested_extra_bytes(run):
    """The peak of the bytes run() (after a warm-up) requests beyond what it returns: exact sizes,
    not the caching allocator's blocks (which may hold an unsplit remainder of up to 1 MiB)."""
    run()
    torch.cuda.synchronize()
    base = torch.cuda.memory_stats()["requested_bytes.all.current"]
    torch.cuda.reset_peak_memory_stats()
    out = run()
    torch.cuda.synchronize()
    return torch.cuda.memory_stats()["requested_bytes.all.peak"] - base - out.numel() * out.element_size()


def _grouping_bytes(T, segments, packed, key_bits=25):
    """A kept grouping's size, each part at a 256-byte boundary: segments + 2 int64 offsets, then
    8-byte keys (packed) or the split keys (segmented): segments + 1 int32 mids, the keys' low
    halves (2 bytes a triplet) and high parts (1 byte a triplet up to 25 key bits, else 2), those
    two padded by 128 bytes."""
    up = lambda b: -(-b // 256) * 256
    offsets = up(8 * (segments + 2))
    if packed:
        return offsets + 8 * T
    return offsets + up(4 * (segments + 1)) + up(2 * T + 128) + (1 if key_bits <= 25 else 2) * T + 128


@pytest.mark.parametrize("grouping", ["segmented", "packed"])
@pytest.mark.parametrize("n,c", [(3000, 16), (3000, 256), (140000, 16), (300000, 16)])
def test_kept_groupings_give_the_same_bits(gen, n, c, grouping, kept_bytes, monkeypatch):
    """The fast path keeps each step's sort of the triplets with the triplet tensor (features
    gradient, weight gradient, and the forward's, which is the weight gradient's where both are
    segmented: two or three groupings of the sizes below); the calls after the first sort nothing
    and give the bits of calls that sort (PCOPS_POINT_CONV_KEEP=0), and making the groupings does
    not synchronize. The segmented keys take 3 bytes a triplet up to 2^18 points (n = 140,000: a
    key of 25 bits, the 25th from the segment's mid) and 4 beyond (n = 300,000)."""
    monkeypatch.setenv("PCOPS_CUDA_POINT_CONV_FAST_GROUPING", grouping)
    K, T = 27, 60000
    f, w, t = _inputs(gen, n, n, c, c, K, T)
    f, w, t = f.cuda().bfloat16(), w.cuda().bfloat16(), t.cuda()
    pcops.point_conv(f, w, t, n, mode="exact")  # the triplets' ranges read once, here
    kept_bytes(release=True)  # (the exact path's grouping)
    with no_sync():
        first = _layer(f, w, t, n)
    held = kept_bytes()
    segments = -(-n // 128) * K  # (tile of 128 rows, k); the weight gradient's (k, block of 128 rows i)
    vvor_segments = segments if grouping == "segmented" else K
    mvmr_groupings = 2 if grouping == "packed" else 1  # segmented: the forward's is the weight gradient's
    key_bits = 7 + (n - 1).bit_length()  # (a row's place in its 128 rows, the other row)
    expect = mvmr_groupings * _grouping_bytes(T, segments, grouping == "packed", key_bits) + _grouping_bytes(
        T, vvor_segments, grouping == "packed", key_bits)
    assert held == expect, (held, expect)
    again = _layer(f, w, t, n)
    assert kept_bytes() == held  # nothing new
    monkeypatch.setenv("PCOPS_POINT_CONV_KEEP", "0")
    sorted_now = _layer(f, w, t, n)
    for a, b, d in zip(first, again, sorted_now):
        assert same_bits(a, b) and same_bits(a, d)
    # With the groupings kept, a forward requests its output alone: no sort (and, where it
    # bulk-copies its weight stages, their images: _stage_images_bytes).
    monkeypatch.delenv("PCOPS_POINT_CONV_KEEP")
    extra = _requested_extra_bytes(lambda: pcops.point_conv(f, w, t, n, mode="fast"))
    images = _stage_images_bytes(K, c)
    assert extra == images, (extra, images)


@pytest.mark.parametrize("c", [128, 256])
def test_default_weight_gradient_grouping_by_width(gen, c, kept_bytes):
    """The default groups the weight gradient's triplets segmented where the packed keys (8 bytes
    a triplet) would be at least half the 16-bit features, 16 T >= 2 n C (C <= 8 T / n = 160
    here), so at C = 128 the forward reads that grouping and two groupings are kept; at C = 256
    the weight gradient's keys are packed (one segment a kernel cell) beside the forward's and the
    features gradient's segmented ones."""
    n, K, T = 3000, 27, 60000
    f, w, t = _inputs(gen, n, n, c, c, K, T)
    f, w, t = f.cuda().bfloat16(), w.cuda().bfloat16(), t.cuda()
    kept_bytes(release=True)
    _layer(f, w, t, n)
    segments = -(-n // 128) * K
    segmented = 16 * T >= 2 * n * c
    assert segmented == (c == 128)
    mvmr = _grouping_bytes(T, segments, False)
    expect = 2 * mvmr if segmented else 2 * mvmr + _grouping_bytes(T, K, True)
    assert kept_bytes() == expect, (kept_bytes(), expect)


def test_exact_kept_groupings_give_the_cpu_bits(gen, kept_bytes, monkeypatch):
    """The exact path keeps its segmented groupings too: the forward's and the features gradient's
    row offsets and 32-bit keys, the weight gradient's cell offsets and rows i, j (sizes below);
    the calls after the first sort nothing and still give the CPU's bits."""
    n_in, n_out, K, T, c = 3000, 2500, 27, 60000, 32
    f, w, t = _inputs(gen, n_in, n_out, c, c, K, T)
    want = _layer(f, w, t, n_out, mode="exact")
    f, w, t = f.cuda(), w.cuda(), t.cuda()
    pcops.point_conv(f, w, t, n_out)  # the triplets' ranges read once, here
    kept_bytes(release=True)
    with no_sync():
        first = _layer(f, w, t, n_out, mode="exact")
    at256 = lambda b: -(-b // 256) * 256  # noqa: E731
    expect = (at256(8 * (n_out + 2)) + 4 * T) + (at256(8 * (n_in + 2)) + 4 * T) + (
        at256(8 * (K + 1)) + at256(4 * T) + 4 * T)
    assert kept_bytes() == expect, (kept_bytes(), expect)
    again = _layer(f, w, t, n_out, mode="exact")
    assert kept_bytes() == expect
    monkeypatch.setenv("PCOPS_POINT_CONV_KEEP", "0")
    sorted_now = _layer(f, w, t, n_out, mode="exact")
    for a, b, d, e in zip(want, first, again, sorted_now):
        assert same_bits(a, b) and same_bits(a, d) and same_bits(a, e)
    monkeypatch.delenv("PCOPS_POINT_CONV_KEEP")
    # A kept forward's requests beyond its output: the transposed weights and the launch's small
    # parts, less than the keys (4 bytes a triplet) that a call sorting its own holds beside it.
    extra = _requested_extra_bytes(lambda: pcops.point_conv(f, w, t, n_out))
    assert extra < min(4 * T, 4 * K * c * c + (64 << 10)), extra
    # Fast and exact keep their own groupings of one tensor side by side.
    pcops.point_conv(f.bfloat16(), w.bfloat16(), t, n_out, mode="fast")
    assert kept_bytes() > expect


def test_kept_groupings_follow_their_triplets(gen, kept_bytes, monkeypatch):
    """A kept grouping serves only its triplet tensor, unchanged, on the stream that made it: an
    in-place change sorts again (the changed triplets' results, not the kept ones'), a freed
    tensor's groupings are let go, another stream makes its own, inference tensors and
    PCOPS_POINT_CONV_KEEP=0 keep none."""
    n, K, T, c = 2000, 27, 30000, 32
    f, w, t = _inputs(gen, n, n, c, c, K, T)
    f, w, t = f.cuda().bfloat16(), w.cuda().bfloat16(), t.cuda()
    layer = lambda t: pcops.point_conv(f, w, t, n, mode="fast")  # noqa: E731
    before = layer(t)
    one = kept_bytes()
    assert one > 3 * T  # the forward's keys, 3 bytes a triplet here, and its offsets
    t[:, 2] = (t[:, 2] + 1) % K  # in place: the version counter moves
    changed = layer(t)
    assert kept_bytes() == one  # the stale grouping let go, the new one kept
    assert not same_bits(changed, before)
    assert same_bits(changed, layer(t.clone()))
    assert kept_bytes() == one  # the clone's grouping let go with the clone
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        other_stream = layer(t)
    torch.cuda.current_stream().wait_stream(side)
    assert same_bits(other_stream, changed)
    assert kept_bytes() == 2 * one  # this stream's own
    del t
    assert kept_bytes() == 0
    t2 = _inputs(gen, n, n, c, c, K, T)[2].cuda()
    monkeypatch.setenv("PCOPS_POINT_CONV_KEEP", "0")
    layer(t2)
    assert kept_bytes() == 0
    monkeypatch.delenv("PCOPS_POINT_CONV_KEEP")
    with torch.inference_mode():
        t3 = t2.clone()
        got = layer(t3)
    assert kept_bytes() == 0
    assert same_bits(got, layer(t2))
    assert kept_bytes() == one


def test_segmentation_example_in_bfloat16_fast_mode(tmp_path):
    """The segmentation example on the GPU, its networks in bfloat16 and the point convolutions on
    the tensor cores: the same accuracy bound as on the CPU."""
    example = _cpu_tests_module("segmentation_example")
    _, res = example.run_segmentation_example(tmp_path, "--device", "cuda", "--dtype", "bfloat16", "--mode", "fast")
    if res is not None:
        assert (res["device"], res["dtype"], res["mode"]) == ("cuda", "bfloat16", "fast")
        example.check_segmentation(res)
