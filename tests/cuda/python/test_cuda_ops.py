"""CUDA registrations of torch.ops.pcops.*: bitwise equal to the CPU backend, on the device,
on the current stream, with autograd, opcheck and torch.compile."""

from __future__ import annotations

import math

import pytest
import torch

import pcops
from conftest import CLOUD_KINDS, load_real_cloud, make_cloud, same_bits  # this directory's conftest

CUDA = torch.device("cuda")
REAL = ("kitten.xyz", "bunny00.off", "hippo1.ply", "building.ply")


def both(fn, *tensors, **kw):
    """fn on CPU tensors and on their CUDA copies."""
    cpu = fn(*tensors, **kw)
    gpu = fn(*[t.to(CUDA) if isinstance(t, torch.Tensor) else t for t in tensors],
             **{k: v.to(CUDA) if isinstance(v, torch.Tensor) else v for k, v in kw.items()})
    return cpu, gpu


def assert_same(cpu, gpu):
    cpu = cpu if isinstance(cpu, tuple) else (cpu,)
    gpu = gpu if isinstance(gpu, tuple) else (gpu,)
    for c, g in zip(cpu, gpu):
        assert g.device.type == "cuda"
        assert same_bits(c, g), f"CPU and CUDA differ in {(c.cpu() != g.cpu()).sum().item()} elements"


def clouds():
    for kind in CLOUD_KINDS:
        for n in (100, 2000, 70_000):
            yield kind, n


# ----------------------------------------------------------------------------------------------
# Furthest point sampling


@pytest.mark.parametrize("kind,n", list(clouds()))
def test_fps_equal(kind, n):
    p = make_cloud(kind, n, seed=n)[None]
    assert_same(*both(pcops.furthest_point_sample, p, min(n, 512)))


@pytest.mark.parametrize("name", REAL)
def test_fps_real(name):
    p = load_real_cloud(name, 200_000)[None]
    assert_same(*both(pcops.furthest_point_sample, p, 1024, start_index=7))


def test_fps_batched_lengths_and_options(gen):
    p = torch.rand(5, 3000, 3, generator=gen)
    lengths = torch.tensor([3000, 0, 1, 17, 2500])
    assert_same(*both(pcops.furthest_point_sample, p, 64, lengths=lengths))
    assert_same(*both(pcops.furthest_point_sample, p, 4000, lengths=lengths))  # more than available
    q = p.clone()
    q[:, :100] *= 1e-3  # near the origin
    assert_same(*both(torch.ops.pcops.furthest_point_sample, q, 200, 0, None, True))
    assert_same(*both(pcops.furthest_point_sample, torch.rand(3, 999, 5, generator=gen), 100))  # D = 5


def test_fps_large_and_batch16(gen):
    p = torch.randn(1, 1_000_000, 3, generator=gen)
    assert_same(*both(pcops.furthest_point_sample, p, 1024))
    p = torch.randn(16, 8192, 3, generator=gen)
    assert_same(*both(pcops.furthest_point_sample, p, 1024))


def test_fps_nonfinite_and_strided(gen):
    p = torch.rand(2, 5000, 3, generator=gen)
    p[0, 10] = float("nan")
    p[1, 20, 1] = float("inf")
    assert_same(*both(pcops.furthest_point_sample, p, 300))
    s = torch.rand(2, 3, 4000, generator=gen).transpose(1, 2)  # non-contiguous
    assert_same(*both(pcops.furthest_point_sample, s, 300))


def test_fps_ragged_equal(gen):
    sizes = [0, 5, 1, 300, 0, 2048, 40000, 90000, 150000, 7]
    x = torch.rand(sum(sizes), 3, generator=gen)
    ptr = torch.tensor([0] + sizes).cumsum(0)
    counts = torch.tensor([(n + 99) // 100 for n in sizes])
    starts = torch.tensor([n // 3 for n in sizes])
    out = both(torch.ops.pcops.furthest_point_sample_ragged, x, ptr, counts, starts)
    assert_same(*out)
    assert out[0].numel() == int(counts.sum())


def test_flat_fps_cuda_equal(gen):
    from pcops import flat

    x = torch.rand(12000, 3, generator=gen)
    batch = torch.repeat_interleave(torch.arange(4), torch.tensor([1000, 5000, 2000, 4000]))
    for ratio in (0.5, 0.1, 1.5):
        torch.manual_seed(3)
        want = flat.fps(x, batch, ratio=ratio, random_start=True)
        torch.manual_seed(3)
        got = flat.fps(x.cuda(), batch.cuda(), ratio=ratio, random_start=True)
        assert got.is_cuda and torch.equal(got.cpu(), want)
    assert torch.equal(flat.fps(x.cuda(), None, 0.25, False).cpu(), flat.fps(x, None, 0.25, False))


def test_flat_fps_count_rule_per_device(gen):
    # torch_cluster counts in float32 on the CPU and in the ratio's dtype (here half) on CUDA:
    # 50 points at ratio 0.3 give 16 samples on the CPU and 15 on CUDA.
    from pcops import flat

    x = torch.rand(50, 3, generator=gen).half()
    assert flat.fps(x, None, 0.3, False).numel() == 16
    got = flat.fps(x.cuda(), None, 0.3, False)
    assert got.numel() == 15
    assert torch.equal(got.cpu(), flat.fps(x, None, 0.3, False)[:15])  # the same greedy prefix


# ----------------------------------------------------------------------------------------------
# kNN


@pytest.mark.parametrize("kind,n", list(clouds()))
@pytest.mark.parametrize("k", (1, 16, 64, 129))
def test_knn_equal(kind, n, k, gen):
    ref = make_cloud(kind, n, seed=n)[None]
    q = torch.cat([ref[:, ::max(1, n // 300)], torch.rand(1, 50, 3, generator=gen)], 1)
    k = min(k, n)
    assert_same(*both(pcops.knn, q, ref, k))


@pytest.mark.parametrize("name", REAL)
def test_knn_real(name):
    ref = load_real_cloud(name, 200_000)[None]
    q = ref[:, ::97].contiguous()
    assert_same(*both(pcops.knn, q, ref, 32))
    assert_same(*both(pcops.knn, ref[:, :20000], ref, 16))  # all-points style


@pytest.mark.parametrize("dim", (1, 2, 4, 7))
def test_knn_any_dimension(dim, gen):
    ref = torch.rand(2, 3000, dim, generator=gen)
    q = torch.rand(2, 200, dim, generator=gen)
    assert_same(*both(pcops.knn, q, ref, 40))


def test_knn_lengths_large_k_and_nonfinite(gen):
    ref = torch.rand(3, 5000, 3, generator=gen)
    q = torch.rand(3, 400, 3, generator=gen)
    ql, rl = torch.tensor([400, 0, 123]), torch.tensor([5000, 10, 0])
    assert_same(*both(pcops.knn, q, ref, 64, query_lengths=ql, ref_lengths=rl))
    assert_same(*both(pcops.knn, q[:1, :50], ref[:1], 5000))  # k = N
    ref[0, 5] = float("nan")
    ref[0, 6, 2] = float("inf")
    q[0, 3] = float("nan")
    q[0, 4, 0] = float("-inf")
    assert_same(*both(pcops.knn, q, ref, 20))


def test_knn_large(gen):
    ref = torch.randn(1, 1_000_000, 3, generator=gen)
    ref = ref / ref.norm(dim=-1, keepdim=True)
    q = ref[:, torch.randperm(1_000_000, generator=gen)[:1024]]
    assert_same(*both(pcops.knn, q, ref, 64))
    ref = ref[:, :200_000].contiguous()
    assert_same(*both(pcops.knn, ref, ref, 16))


def test_knn_half_and_strided(gen):
    ref = torch.rand(1, 3, 6000, generator=gen).transpose(1, 2)
    q = torch.rand(1, 300, 3, generator=gen)
    assert_same(*both(pcops.knn, q, ref, 8))
    assert_same(*both(pcops.knn, q.half(), ref.half(), 8))


# ----------------------------------------------------------------------------------------------
# Ball query


@pytest.mark.parametrize("kind,n", list(clouds()))
@pytest.mark.parametrize("K", (1, 32, 33, 64))
def test_ball_query_equal(kind, n, K, gen):
    ref = make_cloud(kind, n, seed=n)[None]
    q = torch.cat([ref[:, ::max(1, n // 300)], torch.rand(1, 50, 3, generator=gen)], 1)
    for r in (0.0, 0.05, 0.3, 2.0):
        assert_same(*both(pcops.ball_query, q, ref, r, K))


def test_ball_query_radius_boundary():
    r = 0.1
    R2 = torch.tensor(r, dtype=torch.float32) ** 2
    # Points at squared distance exactly R2 and one ulp either side, along x.
    xs = []
    for s in (torch.nextafter(R2, torch.tensor(0.0)), R2, torch.nextafter(R2, torch.tensor(1.0))):
        xs.append(torch.sqrt(s))
    ref = torch.zeros(1, 300, 3)
    for i in range(300):
        ref[0, i, 0] = xs[i % 3] * (1 + (i // 3) * 1e-9)
    q = torch.zeros(1, 1, 3)
    assert_same(*both(pcops.ball_query, q, ref, r, 300))


@pytest.mark.parametrize("name", REAL)
def test_ball_query_real(name):
    ref = load_real_cloud(name, 200_000)[None]
    diag = (ref.amax(1) - ref.amin(1)).norm().item()
    q = ref[:, ::101].contiguous()
    assert_same(*both(pcops.ball_query, q, ref, 0.05 * diag, 64))


def test_ball_query_lengths_nonfinite_large(gen):
    ref = torch.rand(3, 4000, 3, generator=gen)
    q = torch.rand(3, 300, 3, generator=gen)
    ref[1, 7] = float("nan")
    q[2, 9, 1] = float("inf")
    ql, rl = torch.tensor([300, 10, 0]), torch.tensor([0, 4000, 77])
    assert_same(*both(pcops.ball_query, q, ref, 0.2, 50, query_lengths=ql, ref_lengths=rl))
    ref = torch.randn(1, 1_000_000, 3, generator=gen)
    ref = ref / ref.norm(dim=-1, keepdim=True)
    q = ref[:, :1024].contiguous()
    assert_same(*both(pcops.ball_query, q, ref, 0.1, 64))
    q = ref[:, :200_000].contiguous()
    assert_same(*both(pcops.ball_query, q, ref, 0.01, 32))


def test_ball_query_backward_equal(gen):
    ref = torch.rand(2, 3000, 3, generator=gen)
    q = torch.rand(2, 500, 3, generator=gen)
    outs = []
    for dev in ("cpu", "cuda"):
        qq = q.detach().clone().to(dev).requires_grad_()
        rr = ref.detach().clone().to(dev).requires_grad_()
        d2, idx = pcops.ball_query(qq, rr, 0.2, 48)
        w = torch.linspace(-1, 1, d2.numel(), device=dev).reshape(d2.shape)
        (d2 * w).sum().backward()
        outs.append((d2, idx, qq.grad, rr.grad))
    for c, g in zip(*outs):
        assert same_bits(c, g)


# ----------------------------------------------------------------------------------------------
# Framework behaviour on CUDA


def test_outputs_stay_on_device_and_stream(gen):
    p = torch.rand(1, 5000, 3, generator=gen, device="cpu").to(CUDA)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        idx = pcops.furthest_point_sample(p, 100)
        d, i = pcops.knn(p[:, :100], p, 8)
        d2, j = pcops.ball_query(p[:, :100], p, 0.1, 8)
    s.synchronize()
    for t in (idx, d, i, d2, j):
        assert t.device.type == "cuda"
    assert same_bits(idx, pcops.furthest_point_sample(p.cpu(), 100))
    assert same_bits(i, pcops.knn(p[:, :100].cpu(), p.cpu(), 8)[1])


def test_mixed_devices_and_bad_input_raise(gen):
    p = torch.rand(1, 100, 3, generator=gen)
    with pytest.raises(ValueError, match="device"):
        pcops.knn(p.to(CUDA), p, 4)
    with pytest.raises(ValueError, match="k"):
        pcops.knn(p.to(CUDA), p.to(CUDA), 101)
    with pytest.raises(ValueError):
        pcops.ball_query(p.to(CUDA), p.to(CUDA), -1.0, 4)
    with pytest.raises(IndexError):
        pcops.furthest_point_sample(p.to(CUDA), 4, start_index=100)
    with pytest.raises(TypeError):
        pcops.knn(p.double().to(CUDA), p.double().to(CUDA), 4)
    bad = torch.full((1, 100, 4), 100, dtype=torch.int64, device=CUDA)
    with pytest.raises(IndexError):
        torch.ops.pcops._ball_query_backward(torch.ones(1, 100, 4, device=CUDA), p.to(CUDA), p.to(CUDA), bad)
    # The device still works after the errors.
    assert same_bits(pcops.knn(p.to(CUDA), p.to(CUDA), 4)[1], pcops.knn(p, p, 4)[1])


def test_opcheck_cuda(gen):
    q = torch.rand(2, 50, 3, generator=gen).to(CUDA)
    r = torch.rand(2, 300, 3, generator=gen).to(CUDA)
    torch.library.opcheck(torch.ops.pcops.furthest_point_sample.default, (r, 20, 0, None, False))
    torch.library.opcheck(torch.ops.pcops.knn.default, (q, r, 7, None, None))
    torch.library.opcheck(torch.ops.pcops.ball_query.default, (q.requires_grad_(), r.requires_grad_(), 0.3, 9,
                                                               None, None))


def test_compile_fullgraph_cuda(gen):
    q = torch.rand(1, 64, 3, generator=gen).to(CUDA)
    r = torch.rand(1, 1000, 3, generator=gen).to(CUDA)

    def f(q, r):
        idx = pcops.furthest_point_sample(r, 32)
        d, i = pcops.knn(q, r, 5)
        d2, j = pcops.ball_query(q, r, 0.2, 6)
        return idx, d, i, d2, j

    eager = f(q, r)
    compiled = torch.compile(f, fullgraph=True)(q, r)
    for a, b in zip(eager, compiled):
        assert same_bits(a, b)


def test_gradcheck_cuda_ball_query(gen):
    q = (torch.rand(1, 20, 3, generator=gen, dtype=torch.float32) * 0.5).to(CUDA).requires_grad_()
    r = (torch.rand(1, 60, 3, generator=gen, dtype=torch.float32) * 0.5).to(CUDA).requires_grad_()
    d2, idx = pcops.ball_query(q, r, 0.3, 10)
    g = torch.randn_like(d2)
    gq, gr = torch.autograd.grad((d2 * g).sum(), (q, r))
    # Analytic gradient from the selected pairs (float64), compared with tolerance.
    qd, rd = q.detach().double().cpu(), r.detach().double().cpu()
    want_q = torch.zeros_like(qd)
    want_r = torch.zeros_like(rd)
    for m in range(idx.shape[1]):
        for t in range(idx.shape[2]):
            j = int(idx[0, m, t])
            if j < 0:
                continue
            diff = 2 * float(g[0, m, t]) * (qd[0, m] - rd[0, j])
            want_q[0, m] += diff
            want_r[0, j] -= diff
    assert torch.allclose(gq.double().cpu(), want_q, atol=1e-5)
    assert torch.allclose(gr.double().cpu(), want_r, atol=1e-5)
    assert math.isfinite(float(gq.sum()))
