"""CUDA registrations of the PointNet++ interpolation and gather operators (three_nn,
three_interpolate, gather_points, group_points and their backwards): bitwise equal to the CPU
backend, gradients through the autograd functions included, and the pointnet2_ops / pointops
stand-ins on CUDA tensors equal to the same calls on CPU tensors."""

from __future__ import annotations

import pytest
import torch

import pcops
import pcops.compat as compat
from conftest import (  # this directory's conftest
    CLOUD_KINDS, isolated_modules, load_real_cloud, make_cloud, no_sync, same_bits)

CUDA = torch.device("cuda")
REAL = ("kitten.xyz", "bunny00.off", "hippo1.ply", "building.ply")


def to_cuda(x):
    return x.to(CUDA) if isinstance(x, torch.Tensor) else x


def both(fn, *args, **kw):
    """fn on the CPU arguments and on their CUDA copies."""
    return fn(*args, **kw), fn(*[to_cuda(a) for a in args], **{k: to_cuda(v) for k, v in kw.items()})


def assert_same(cpu, gpu):
    cpu = cpu if isinstance(cpu, (tuple, list)) else (cpu,)
    gpu = gpu if isinstance(gpu, (tuple, list)) else (gpu,)
    assert len(cpu) == len(gpu)
    for i, (c, g) in enumerate(zip(cpu, gpu)):
        assert (c is None) == (g is None), f"output {i}: CPU {type(c).__name__}, CUDA {type(g).__name__}"
        if c is None:
            continue
        assert g.device.type == "cuda"
        assert same_bits(c, g), f"output {i}: CPU and CUDA differ in {(c.cpu() != g.cpu()).sum().item()} elements"


def grads_both(fn, inputs: dict, grad_seed: int = 0):
    """Runs fn(**inputs) on CPU and CUDA with gradients enabled for the float inputs, backward with
    the same random upstream gradient; returns ((out, grads...) cpu, (out, grads...) cuda)."""
    results = []
    for dev in ("cpu", "cuda"):
        leaves = {k: (v.detach().clone().to(dev).requires_grad_() if v.is_floating_point() else v.to(dev))
                  for k, v in inputs.items()}
        out = fn(**leaves)
        g = torch.randn(out.shape, generator=torch.Generator().manual_seed(grad_seed)).to(out.dtype).to(dev)
        out.backward(g)
        results.append((out,) + tuple(leaves[k].grad for k in inputs if inputs[k].is_floating_point()))
    return results


def random_idx(gen, shape, count, pad=0.1, hot=0.0):
    """int64 indices in [-1, count): a fraction ``pad`` of -1, ``hot`` of them on three targets."""
    idx = torch.randint(0, max(count, 1), shape, generator=gen)
    r = torch.rand(shape, generator=gen)
    idx = torch.where(r < pad + hot, torch.randint(0, max(min(count, 3), 1), shape, generator=gen), idx)
    idx = torch.where(r < pad, torch.full_like(idx, -1), idx)
    return idx if count > 0 else torch.full_like(idx, -1)


# ----------------------------------------------------------------------------------------------
# three_nn


@pytest.mark.parametrize("kind", CLOUD_KINDS)
@pytest.mark.parametrize("m", (3, 100, 1024, 1025, 2049, 8192, 8193, 30_000))
def test_three_nn_equal(kind, m, gen):
    known = make_cloud(kind, m, seed=m)[None]
    unknown = torch.cat([make_cloud(kind, 2000, seed=m + 1)[None], torch.rand(1, 50, 3, generator=gen)], 1)
    assert_same(*both(pcops.three_nn, unknown, known))


@pytest.mark.parametrize("b,n,m", [(16, 4096, 1024), (32, 1024, 256), (8, 16384, 4096), (1, 100_000, 25_000),
                                   (2, 7, 12_000)])
def test_three_nn_pointnet_sizes(b, n, m, gen):
    unknown = torch.rand(b, n, 3, generator=gen)
    known = unknown[:, torch.randperm(n, generator=gen)[:m]] if m <= n else torch.rand(b, m, 3, generator=gen)
    assert_same(*both(pcops.three_nn, unknown, known))


@pytest.mark.parametrize("name", REAL)
def test_three_nn_real(name):
    ref = load_real_cloud(name, 200_000)[None]
    for m in (1024, 16_384):
        known = ref[:, :: max(1, ref.shape[1] // m)].contiguous()
        assert_same(*both(pcops.three_nn, ref, known))


def test_three_nn_lengths_nonfinite_strided_half(gen):
    unknown = torch.rand(4, 500, 3, generator=gen)
    known = torch.rand(4, 3000, 3, generator=gen)
    ul, kl = torch.tensor([500, 0, 17, 499]), torch.tensor([3000, 2, 0, 3])
    assert_same(*both(pcops.three_nn, unknown, known, unknown_lengths=ul, known_lengths=kl))
    kl = torch.tensor([20_000, 9000, 3, 1])
    big = torch.rand(4, 20_000, 3, generator=gen)
    assert_same(*both(pcops.three_nn, unknown, big, known_lengths=kl))  # cuda::knn path with lengths
    known[0, 5] = float("nan")
    known[1, 6, 2] = float("inf")
    known[2, ::2, 1] = float("nan")
    unknown[0, 3] = float("nan")
    unknown[1, 4, 0] = float("-inf")
    assert_same(*both(pcops.three_nn, unknown, known))
    s = torch.rand(2, 3, 700, generator=gen).transpose(1, 2)  # non-contiguous
    k = torch.rand(2, 3, 300, generator=gen).transpose(1, 2)
    assert_same(*both(pcops.three_nn, s, k))
    assert_same(*both(pcops.three_nn, s.half(), k.bfloat16()))
    assert_same(*both(pcops.three_nn, torch.rand(2, 0, 3), torch.rand(2, 5, 3)))
    assert_same(*both(pcops.three_nn, torch.rand(0, 4, 3), torch.rand(0, 5, 3)))


# ----------------------------------------------------------------------------------------------
# three_interpolate (forward and gradients through pcops' autograd registration)


@pytest.mark.parametrize("b,c,m,n,pad,hot", [(2, 7, 100, 300, 0.1, 0.0), (3, 9, 20, 2000, 0.05, 0.8),
                                             (1, 1, 5, 100, 0.5, 0.0), (16, 128, 1024, 4096, 0.0, 0.0),
                                             (1, 32, 25_000, 100_000, 0.0, 0.0)])
def test_three_interpolate_equal_with_gradients(b, c, m, n, pad, hot, gen):
    inputs = {"features": torch.randn(b, c, m, generator=gen), "idx": random_idx(gen, (b, n, 3), m, pad, hot),
              "weight": torch.rand(b, n, 3, generator=gen)}
    cpu, gpu = grads_both(pcops.three_interpolate, inputs)
    assert_same(cpu, gpu)


def test_three_interpolate_from_three_nn(gen):
    """PointNet++ feature propagation: three_nn, inverse-distance weights, three_interpolate."""
    unknown = torch.rand(4, 2048, 3, generator=gen)
    known = torch.rand(4, 512, 3, generator=gen)
    cpu, gpu = both(pcops.three_nn, unknown, known)
    assert_same(cpu, gpu)
    # The weights are torch's own arithmetic (a sum over dim 2), computed once on the CPU so that
    # only pcops' kernels are compared.
    dist, idx = cpu
    w = 1.0 / (dist + 1e-8)
    w = w / w.sum(dim=2, keepdim=True)
    inputs = {"features": torch.randn(4, 64, 512, generator=gen), "idx": idx, "weight": w}
    assert_same(*grads_both(pcops.three_interpolate, inputs))


def test_three_interpolate_nonfinite_strided_half_and_double_backward(gen):
    f = torch.randn(2, 9, 64, generator=gen)
    f[0, 0, ::5] = float("nan")
    f[1, 2, ::7] = float("-inf")
    f[0, 3] = -0.0
    w = torch.rand(2, 50, 3, generator=gen)
    w[0, ::4, 1] = -0.0
    idx = random_idx(gen, (2, 50, 3), 64, 0.2, 0.3)
    assert_same(*grads_both(pcops.three_interpolate, {"features": f, "idx": idx, "weight": w}))
    ft = torch.randn(2, 64, 9, generator=gen).transpose(1, 2)  # strided features
    wt = torch.rand(2, 3, 50, generator=gen).transpose(1, 2)  # strided weights
    assert_same(*grads_both(pcops.three_interpolate, {"features": ft, "idx": idx, "weight": wt}))
    assert_same(*grads_both(pcops.three_interpolate, {"features": f.half(), "idx": idx, "weight": w.bfloat16()}))
    # Second order through the registered double backward (written with the operators).
    outs = []
    for dev in ("cpu", "cuda"):
        # Fresh leaves on both devices: w.to("cpu") returns w itself, so requires_grad_() on it
        # would make the later w.to("cuda") a non-leaf whose .grad stays None.
        ff = f.nan_to_num().to(dev).requires_grad_()
        ww = w.detach().clone().to(dev).requires_grad_()
        out = pcops.three_interpolate(ff, idx.to(dev), ww)
        (gf, gw) = torch.autograd.grad((out * out).sum(), (ff, ww), create_graph=True)
        (gf.sum() + (gw * gw).sum()).backward()
        outs.append((gf, gw, ff.grad, ww.grad))
    assert_same(outs[0], outs[1])
    # Raw backward op: one gradient requested at a time, empty shapes.
    grad = torch.randn(2, 9, 50, generator=gen)
    for need in [(True, True), (True, False), (False, True)]:
        assert_same(*both(torch.ops.pcops._three_interpolate_backward, grad, f, idx, w, *need))
    for b, c, m, n in [(0, 4, 5, 6), (2, 0, 5, 6), (2, 4, 0, 6), (2, 4, 5, 0)]:
        ins = {"features": torch.randn(b, c, m, generator=gen), "idx": random_idx(gen, (b, n, 3), m),
               "weight": torch.rand(b, n, 3, generator=gen)}
        assert_same(*both(torch.ops.pcops._three_interpolate_backward, torch.randn(b, c, n, generator=gen),
                          ins["features"], ins["idx"], ins["weight"]))
        assert_same(*both(pcops.three_interpolate, ins["features"], ins["idx"], ins["weight"]))


# ----------------------------------------------------------------------------------------------
# gather_points, group_points


@pytest.mark.parametrize("b,c,n,m,pad,hot", [(2, 3, 500, 128, 0.1, 0.0), (3, 9, 500, 2000, 0.05, 0.8),
                                             (16, 64, 8192, 1024, 0.0, 0.0), (1, 4, 1_000_000, 4096, 0.0, 0.0),
                                             (2, 3, 0, 5, 1.0, 0.0), (2, 0, 10, 5, 0.0, 0.0)])
def test_gather_points_equal_with_gradients(b, c, n, m, pad, hot, gen):
    inputs = {"features": torch.randn(b, c, n, generator=gen), "idx": random_idx(gen, (b, m), n, pad, hot)}
    assert_same(*grads_both(pcops.gather_points, inputs))


@pytest.mark.parametrize("b,c,n,m,s,pad,hot", [(2, 6, 300, 64, 32, 0.3, 0.2), (4, 16, 4096, 512, 64, 0.1, 0.0),
                                               (1, 9, 50, 7, 0, 0.0, 0.0), (1, 3, 100, 20, 16, 0.0, 0.9)])
def test_group_points_equal_with_gradients(b, c, n, m, s, pad, hot, gen):
    inputs = {"features": torch.randn(b, c, n, generator=gen), "idx": random_idx(gen, (b, m, s), n, pad, hot)}
    assert_same(*grads_both(pcops.group_points, inputs))


def test_gather_group_strided_half_double_backward(gen):
    f = torch.randn(2, 300, 5, generator=gen).transpose(1, 2)  # strided [2, 5, 300]
    f[0, 1, ::3] = float("nan")
    idx = random_idx(gen, (2, 100), 300, 0.2, 0.3)
    gidx = random_idx(gen, (2, 10, 8), 300, 0.2, 0.3)
    assert_same(*grads_both(pcops.gather_points, {"features": f, "idx": idx}))
    assert_same(*grads_both(pcops.group_points, {"features": f, "idx": gidx}))
    assert_same(*grads_both(pcops.gather_points, {"features": f.half(), "idx": idx}))
    assert_same(*grads_both(pcops.group_points, {"features": f.bfloat16(), "idx": gidx}))
    outs = []
    for dev in ("cpu", "cuda"):
        ff = f.nan_to_num().to(dev).requires_grad_()
        out = pcops.group_points(ff, gidx.to(dev))
        (g,) = torch.autograd.grad((out * out).sum(), ff, create_graph=True)
        (g * g).sum().backward()
        outs.append((g, ff.grad))
    assert_same(outs[0], outs[1])


# ----------------------------------------------------------------------------------------------
# Errors, opcheck, streams


def test_bad_indices_and_devices_raise(gen):
    f = torch.randn(2, 4, 10, device=CUDA)
    w = torch.rand(2, 6, 3, device=CUDA)
    bad = torch.full((2, 6, 3), 10, dtype=torch.int64, device=CUDA)
    with pytest.raises(IndexError):
        pcops.three_interpolate(f, bad, w)
    with pytest.raises(IndexError):
        pcops.gather_points(f, torch.full((2, 3), -2, dtype=torch.int64, device=CUDA))
    with pytest.raises(IndexError):
        pcops.group_points(f, torch.full((2, 3, 2), 10, dtype=torch.int64, device=CUDA))
    with pytest.raises(IndexError):
        torch.ops.pcops._gather_points_backward(torch.ones(2, 4, 3, device=CUDA),
                                                torch.full((2, 3), 5, dtype=torch.int64, device=CUDA), 5)
    with pytest.raises(IndexError, match=r"idx: expected indices in \[-1, 5\), got values in \[-1, 7\]"):
        torch.ops.pcops._group_points_backward(torch.ones(2, 4, 3, 2, device=CUDA),
                                               torch.full((2, 3, 2), 7, dtype=torch.int64, device=CUDA), 5)
    with pytest.raises(ValueError, match="device"):
        pcops.three_interpolate(f, bad.cpu(), w)
    with pytest.raises(ValueError):
        pcops.three_nn(torch.rand(1, 5, 3, device=CUDA), torch.rand(1, 2, 3, device=CUDA))  # M < 3
    # The device still works after the errors.
    idx = random_idx(gen, (2, 6, 3), 10).to(CUDA)
    assert same_bits(pcops.three_interpolate(f, idx, w), pcops.three_interpolate(f.cpu(), idx.cpu(), w.cpu()))


@pytest.mark.parametrize("c", [4, 40])  # the channel-first kernels and the row kernels
def test_three_interpolate_bad_indices_raise(c, gen):
    """The same IndexError on CUDA as on the CPU, forward and backward (a direct call checks its
    indices; the autograd backward's are the forward's), and the device usable after."""
    f = torch.randn(2, c, 10, device=CUDA)
    w = torch.rand(2, 6, 3, device=CUDA)
    g = torch.randn(2, c, 6, device=CUDA)
    good = random_idx(gen, (2, 6, 3), 10)
    for value, shown in ((10, "got values in [-1, 10]"), (-2, "got values in [-2, "), (1 << 40, ", 1099511627776]")):
        bad = good.clone()
        bad[1, 4, 2] = value
        for dev in ("cpu", CUDA):
            with pytest.raises(IndexError, match=r"idx: expected indices in \[-1, 10\)") as e:
                pcops.three_interpolate(f.to(dev), bad.to(dev), w.to(dev))
            assert shown in str(e.value)
            with pytest.raises(IndexError, match=r"idx: expected indices in \[-1, 10\)"):
                torch.ops.pcops._three_interpolate_backward(g.to(dev), f.to(dev), bad.to(dev), w.to(dev), True, True)
    idx = good.to(CUDA)
    fr = f.clone().requires_grad_()
    out = pcops.three_interpolate(fr, idx, w)
    (gf,) = torch.autograd.grad(out, fr, g)
    fc = f.cpu().requires_grad_()
    out_c = pcops.three_interpolate(fc, good, w.cpu())
    (gf_c,) = torch.autograd.grad(out_c, fc, g.cpu())
    assert same_bits(out, out_c) and same_bits(gf, gf_c)


def test_opcheck_cuda(gen):
    u = torch.rand(2, 7, 3, generator=gen).to(CUDA)
    k = torch.rand(2, 11, 3, generator=gen).to(CUDA)
    torch.library.opcheck(torch.ops.pcops.three_nn.default, (u, k, None, None))
    f = torch.randn(2, 5, 11, generator=gen).to(CUDA).requires_grad_()
    idx = random_idx(gen, (2, 7, 3), 11, 0.2).to(CUDA)
    w = torch.rand(2, 7, 3, generator=gen).to(CUDA).requires_grad_()
    torch.library.opcheck(torch.ops.pcops.three_interpolate.default, (f, idx, w))
    grad = torch.rand(2, 5, 7, generator=gen).to(CUDA)
    torch.library.opcheck(torch.ops.pcops._three_interpolate_backward.default, (grad, f, idx, w, True, True))
    gi = random_idx(gen, (2, 6), 11, 0.2).to(CUDA)
    torch.library.opcheck(torch.ops.pcops.gather_points.default, (f, gi))
    torch.library.opcheck(torch.ops.pcops._gather_points_backward.default,
                          (torch.rand(2, 5, 6, generator=gen).to(CUDA), gi, 11))
    gg = random_idx(gen, (2, 4, 3), 11, 0.2).to(CUDA)
    torch.library.opcheck(torch.ops.pcops.group_points.default, (f, gg))
    torch.library.opcheck(torch.ops.pcops._group_points_backward.default,
                          (torch.rand(2, 5, 4, 3, generator=gen).to(CUDA), gg, 11))


def test_current_stream(gen):
    u = torch.rand(4, 3000, 3, generator=gen).to(CUDA)
    k = torch.rand(4, 700, 3, generator=gen).to(CUDA)
    f = torch.randn(4, 32, 700, generator=gen).to(CUDA)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        dist, idx = pcops.three_nn(u, k)
        out = pcops.three_interpolate(f, idx, dist)
        grads = torch.ops.pcops._three_interpolate_backward(out, f, idx, dist)
    s.synchronize()
    want_d, want_i = pcops.three_nn(u.cpu(), k.cpu())
    assert same_bits(dist, want_d) and same_bits(idx, want_i)
    assert same_bits(out, pcops.three_interpolate(f.cpu(), want_i, want_d))
    want_g = torch.ops.pcops._three_interpolate_backward(out.cpu(), f.cpu(), want_i, want_d)
    assert same_bits(grads[0], want_g[0]) and same_bits(grads[1], want_g[1])


# ----------------------------------------------------------------------------------------------
# Stand-ins on CUDA tensors


def _only(name):
    return {n: n == name for n, s in compat.REGISTRY.items() if s.default}


@pytest.fixture
def pu():
    with isolated_modules("pointnet2_ops", "knn_cuda"):
        assert "pointnet2_ops" in compat.install(**_only("pointnet2_ops"))
        import pointnet2_ops.pointnet2_utils as utils

        yield utils


@pytest.fixture
def po():
    with isolated_modules("pointops"):
        assert "pointops" in compat.install(**_only("pointops"))
        import pointops

        yield pointops


def test_pointnet2_ops_stand_in_cuda(pu, gen):
    unknown = torch.rand(4, 1024, 3, generator=gen)
    known = torch.rand(4, 256, 3, generator=gen)
    feats = torch.randn(4, 32, 256, generator=gen)
    results = []
    for dev in ("cpu", "cuda"):
        u, k = unknown.to(dev), known.to(dev)
        f = feats.detach().clone().to(dev).requires_grad_()
        dist, idx = pu.three_nn(u, k)
        w = torch.full(dist.shape, 1.0 / 3.0, device=dev)  # fixed weights: only pcops arithmetic below
        interp = pu.three_interpolate(f, idx, w)
        fps = pu.furthest_point_sample(k, 128)  # indices into the known points that f belongs to
        gathered = pu.gather_operation(f, fps)
        grouped = pu.grouping_operation(f, idx)  # [B, C, N, 3]
        # One gradient per output (no accumulation whose order could differ between devices).
        grads = [torch.autograd.grad(o, f, torch.randn(o.shape, generator=torch.Generator().manual_seed(i)).to(dev))[0]
                 for i, o in enumerate((interp, gathered, grouped))]
        results.append((dist, idx, interp, fps, gathered, grouped, *grads))
        assert idx.dtype == torch.int32
    assert_same(results[0], results[1])
    # Fewer than three known points: upstream's (inf, 0) padding on both devices.
    assert_same(*both(pu.three_nn, unknown[:, :10], known[:, :2]))


def test_pointnet2_ops_stand_in_layer_on_its_own_indices_does_not_sync(pu, gen):
    """The stand-in's int32 indices keep the range the library knows for the int64 ones they were
    cast from (and back), so gathering, grouping and interpolating through them, backwards
    included, run without a stream sync; the results equal those through unknown copies."""
    xyz = torch.rand(2, 2048, 3, generator=gen).cuda()
    feats = torch.randn(2, 16, 2048, generator=gen).cuda()
    fps = pu.furthest_point_sample(xyz, 256)
    new_xyz = torch.gather(xyz, 1, fps.long()[..., None].expand(-1, -1, 3))
    nb = pu.ball_query(0.2, 16, xyz, new_xyz)
    _, i3 = pu.three_nn(xyz, new_xyz)
    w = torch.full(i3.shape, 1.0 / 3.0, device="cuda")
    assert fps.dtype == nb.dtype == i3.dtype == torch.int32

    def layer(fps, nb, i3):
        f = feats.clone().requires_grad_()
        centres = pu.gather_operation(f, fps)
        grouped = pu.grouping_operation(f, nb)
        up = pu.three_interpolate(centres, i3, w)
        (grouped.sum() + (up * up).sum()).backward()
        return centres.detach(), grouped.detach(), up.detach(), f.grad

    with no_sync():
        got = layer(fps, nb, i3)
    for a, b in zip(got, layer(fps.clone(), nb.clone(), i3.clone())):
        assert same_bits(a, b)


def test_pointops_stand_in_cuda(po, gen):
    xyz = torch.rand(3000, 3, generator=gen)
    offset = torch.tensor([1000, 1800, 3000], dtype=torch.int32)
    new_xyz = torch.rand(600, 3, generator=gen)
    new_offset = torch.tensor([200, 200, 600], dtype=torch.int32)
    feat = torch.randn(3000, 16, generator=gen)
    idx_c, dist_c = po.knn_query(16, xyz, offset, new_xyz, new_offset)
    idx_g, dist_g = po.knn_query(16, xyz.to(CUDA), offset.to(CUDA), new_xyz.to(CUDA), new_offset.to(CUDA))
    assert_same((idx_c, dist_c), (idx_g, dist_g))
    assert_same(*both(po.grouping, idx_c, feat, xyz, new_xyz, with_xyz=True))
    # interpolation: neighbours from pcops (bitwise above); the weights and the sum are torch's own
    # arithmetic, whose CPU and CUDA reductions need not round alike: compare within float32
    # rounding.
    cpu, gpu = both(po.interpolation, xyz, new_xyz, feat, offset, new_offset)
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-5, atol=1e-6)
