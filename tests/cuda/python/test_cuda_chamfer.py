"""chamfer_distance and its nearest-neighbour operator on CUDA: values and gradients bitwise equal
to the CPU (float32 and float64, every reduction combination, lengths with zero-length clouds,
normals, L1), deterministic run to run, and the pytorch3d.loss stand-in on CUDA tensors."""

from __future__ import annotations

import itertools

import pytest
import torch

import pcops
from conftest import CLOUD_KINDS, load_real_cloud, make_cloud, same_bits  # this directory's conftest

CUDA = torch.device("cuda")


def _flat(out):
    """The tensors of a chamfer result ((loss, loss_normals), each a tensor, tuple or None)."""
    items = []
    for part in out:
        if part is None:
            continue
        items.extend(part if isinstance(part, tuple) else (part,))
    return items


def _run(device, inputs, kw):
    """chamfer on copies of ``inputs`` (x, y, x_normals, y_normals) moved to ``device``, then
    backward of the sum of every output; returns (outputs, gradients)."""
    leaves = [None if t is None else t.detach().to(device).requires_grad_(True) for t in inputs]
    extra = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
    out = pcops.chamfer_distance(leaves[0], leaves[1], x_normals=leaves[2], y_normals=leaves[3], **extra)
    outs = _flat(out)
    total = sum(o.sum() for o in outs)
    if total.requires_grad:
        total.backward()
    grads = [None if t is None else t.grad for t in leaves]
    return outs, grads


def assert_same_chamfer(inputs, **kw):
    cpu_out, cpu_grad = _run(torch.device("cpu"), inputs, kw)
    gpu_out, gpu_grad = _run(CUDA, inputs, kw)
    assert len(cpu_out) == len(gpu_out)
    for c, g in zip(cpu_out, gpu_out):
        assert g.device.type == "cuda"
        assert same_bits(c, g), f"values differ: {kw}: {c} vs {g.cpu()}"
    for name, c, g in zip(("x", "y", "x_normals", "y_normals"), cpu_grad, gpu_grad):
        assert (c is None) == (g is None), name
        if c is not None:
            assert same_bits(c, g), f"{name}.grad differs in {(c != g.cpu()).sum().item()} elements: {kw}"


def _case(gen, dtype, n=3, p1=300, p2=270, d=3, normals=True, lattice=False):
    def pts(p, dim):
        t = torch.rand(n, p, dim, generator=gen, dtype=torch.float64)
        return ((t * 4).round() / 4 if lattice else t).to(dtype)
    nx = pts(p1, 3) - 0.5 if normals else None
    ny = pts(p2, 3) - 0.5 if normals else None
    return [pts(p1, d), pts(p2, d), nx, ny]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm", [1, 2])
def test_all_reduction_combinations(gen, dtype, norm):
    inputs = _case(gen, dtype, lattice=True)  # exact ties everywhere
    lx, ly = torch.tensor([300, 0, 41]), torch.tensor([270, 12, 0])
    weights = torch.tensor([0.5, 2.0, 1.0], dtype=dtype)
    for pr, br, single, w, normals, abs_cos, lengths in itertools.product(
        ["mean", "sum", "max", None], ["mean", "sum", None], [False, True], [None, weights],
        [False, True], [True, False], [False, True],
    ):
        if pr is None and br is not None or pr == "max" and normals:
            continue
        case = inputs if normals else inputs[:2] + [None, None]
        kw = dict(weights=w, batch_reduction=br, point_reduction=pr, norm=norm, single_directional=single,
                  abs_cosine=abs_cos)
        if lengths:
            kw.update(x_lengths=lx, y_lengths=ly)
        assert_same_chamfer(case, **kw)


@pytest.mark.parametrize("d", [1, 2, 3, 5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_any_dimension(gen, d, dtype):
    inputs = _case(gen, dtype, d=d, p1=700, p2=900, normals=False)
    for norm in (1, 2):
        assert_same_chamfer(inputs, norm=norm)
        assert_same_chamfer(inputs, norm=norm, point_reduction=None, batch_reduction=None)


def test_zero_weights_and_empty(gen):
    inputs = _case(gen, torch.float32, p1=50, p2=40)
    assert_same_chamfer(inputs, weights=torch.zeros(3), point_reduction="sum", batch_reduction=None)
    assert_same_chamfer(inputs[:2] + [None, None], weights=torch.zeros(3))
    assert_same_chamfer([inputs[0], inputs[1][:, :0], None, None])
    assert_same_chamfer([inputs[0][:, :0], inputs[1][:, :0], None, None], point_reduction="max")
    assert_same_chamfer([inputs[0][:0], inputs[1][:0], None, None])
    assert_same_chamfer(inputs, x_lengths=torch.tensor([0, 0, 0]), y_lengths=torch.tensor([0, 3, 0]))


@pytest.mark.parametrize("kind", CLOUD_KINDS)
def test_cloud_kinds_float32_grid(kind):
    """3-D float32 clouds large enough for the kNN grid on both devices."""
    x = make_cloud(kind, 20000, seed=1)[None]
    y = make_cloud(kind, 15000, seed=2)[None]
    assert_same_chamfer([x, y, None, None])


def test_real_cloud_float64_and_l1():
    x = load_real_cloud("bunny00.off", 8000)[None]
    y = (x + 1e-3 * torch.randn(x.shape, generator=torch.Generator().manual_seed(3)))
    for dtype, norm in ((torch.float64, 2), (torch.float32, 1), (torch.float64, 1)):
        assert_same_chamfer([x.to(dtype), y.to(dtype), None, None], norm=norm)


def test_batch4_16k_and_determinism(gen):
    """The benchmark size: CPU == CUDA, and CUDA gradients bitwise stable run to run."""
    x = torch.rand(4, 16384, 3, generator=gen)
    y = torch.rand(4, 16384, 3, generator=gen)
    assert_same_chamfer([x, y, None, None])
    runs = [_run(CUDA, [x, y, None, None], {}) for _ in range(3)]
    for outs, grads in runs[1:]:
        assert same_bits(outs[0], runs[0][0][0])
        assert same_bits(grads[0], runs[0][1][0]) and same_bits(grads[1], runs[0][1][1])


def test_half_precision(gen):
    inputs = _case(gen, torch.float32, normals=False)
    for dtype in (torch.float16, torch.bfloat16):
        assert_same_chamfer([t.to(dtype) for t in inputs[:2]] + [None, None],
                            point_reduction=None, batch_reduction=None)


def test_nearest_neighbor_op_equal(gen):
    for dtype, d, norm in itertools.product((torch.float32, torch.float64), (1, 3, 4, 6), (1, 2)):
        x = (torch.rand(3, 600, d, generator=gen, dtype=torch.float64) * 3).round().to(dtype)
        y = (torch.rand(3, 2000, d, generator=gen, dtype=torch.float64) * 3).round().to(dtype)
        x[0, 0, 0] = float("nan")
        y[1, 7, 0] = float("inf")
        lx, ly = torch.tensor([600, 3, 0]), torch.tensor([0, 2000, 5])
        for args in ((None, None), (lx, ly)):
            want = torch.ops.pcops.nearest_neighbor(x, y, *args, norm)
            got = torch.ops.pcops.nearest_neighbor(x.to(CUDA), y.to(CUDA),
                                                   *[None if a is None else a.to(CUDA) for a in args], norm)
            assert got.device.type == "cuda" and torch.equal(got.cpu(), want), (dtype, d, norm)
        strided = x.transpose(1, 2).contiguous().transpose(1, 2)
        assert torch.equal(torch.ops.pcops.nearest_neighbor(strided.to(CUDA), y.to(CUDA), None, None, norm).cpu(),
                           torch.ops.pcops.nearest_neighbor(x, y, None, None, norm))


def test_helpers_equal(gen):
    for dtype in (torch.float32, torch.float64):
        for length in (0, 1, 33, 40000, 1_100_000):
            v = torch.randn(2, length, generator=gen, dtype=dtype)
            assert same_bits(torch.ops.pcops._ordered_sum(v), torch.ops.pcops._ordered_sum(v.to(CUDA)))
        grad = torch.randn(3, 5000, 3, generator=gen, dtype=dtype)
        idx = torch.randint(-1, 40, (3, 5000), generator=gen)
        assert same_bits(torch.ops.pcops._gather_rows_backward(grad, idx, 40),
                         torch.ops.pcops._gather_rows_backward(grad.to(CUDA), idx.to(CUDA), 40))


def test_second_order_runs_on_cuda(gen):
    x, y, _, _ = _case(gen, torch.float64, n=2, p1=6, p2=5, normals=False)
    a, b = x.to(CUDA).requires_grad_(True), y.to(CUDA).requires_grad_(True)
    loss, _ = pcops.chamfer_distance(a, b)
    (ga,) = torch.autograd.grad(loss, a, create_graph=True)
    ga.sum().backward()
    assert b.grad is not None and b.grad.device.type == "cuda"


def test_pytorch3d_stand_in_on_cuda(gen):
    from pcops import pytorch3d as p3d

    x, y, nx, ny = _case(gen, torch.float32)
    want = pcops.chamfer_distance(x, y, x_normals=nx, y_normals=ny, point_reduction="sum")
    got = p3d.chamfer_distance(x.to(CUDA), y.to(CUDA), x_normals=nx.to(CUDA), y_normals=ny.to(CUDA),
                               point_reduction="sum")
    assert same_bits(got[0], want[0]) and same_bits(got[1], want[1])


def test_fused_pair_operator_equal(gen):
    """_chamfer_pair_distance and its backward: CUDA == CPU bits (ties, -1 indices, repeated
    targets, strided coordinates and a broadcast upstream gradient, an empty y)."""
    for dtype, d, norm in itertools.product((torch.float32, torch.float64), (1, 3, 5), (1, 2)):
        x = ((torch.rand(3, 3000, d, generator=gen, dtype=torch.float64) * 3).round() / 2).to(dtype)
        y = ((torch.rand(3, 700, d, generator=gen, dtype=torch.float64) * 3).round() / 2).to(dtype)
        y = y.transpose(1, 2).contiguous().transpose(1, 2)
        idx = torch.randint(-1, 700, (3, 3000), generator=gen)
        idx[1, :1000] = 5  # a long segment into one target row
        want = torch.ops.pcops._chamfer_pair_distance(x, y, idx, norm)
        got = torch.ops.pcops._chamfer_pair_distance(x.to(CUDA), y.to(CUDA), idx.to(CUDA), norm)
        assert same_bits(got, want), (dtype, d, norm)
        for grad in (torch.randn(3, 3000, generator=gen, dtype=dtype),
                     torch.randn(3, 1, generator=gen, dtype=dtype).expand(3, 3000)):
            want = torch.ops.pcops._chamfer_pair_distance_backward(grad, x, y, idx, norm)
            got = torch.ops.pcops._chamfer_pair_distance_backward(grad.to(CUDA), x.to(CUDA), y.to(CUDA),
                                                                  idx.to(CUDA), norm)
            assert same_bits(got[0], want[0]) and same_bits(got[1], want[1]), (dtype, d, norm)
        e = torch.full((3, 3000), -1)
        want = torch.ops.pcops._chamfer_pair_distance_backward(torch.ones(3, 3000, dtype=dtype), x, y[:, :0], e, norm)
        got = torch.ops.pcops._chamfer_pair_distance_backward(torch.ones(3, 3000, dtype=dtype, device=CUDA),
                                                              x.to(CUDA), y[:, :0].to(CUDA), e.to(CUDA), norm)
        assert same_bits(got[0], want[0]) and got[1].shape == (3, 0, d)


def test_fused_reduce_operator_equal(gen):
    """_chamfer_reduce and its backward: CUDA == CPU bits, lengths read on the device."""
    for dtype in (torch.float32, torch.float64):
        cx = torch.rand(5, 40000, generator=gen, dtype=dtype)
        cy = torch.rand(5, 300, generator=gen, dtype=dtype)
        lx, ly = torch.tensor([40000, 0, 7, 39999, 1]), torch.tensor([300, 5, 0, 1, 299])
        for cham_y, lengths, mean, mode in itertools.product((None, cy), (False, True), (False, True), (0, 1, 2)):
            args = (cx, cham_y, lx if lengths else None, ly if lengths and cham_y is not None else None)
            dev = tuple(None if a is None else a.to(CUDA) for a in args)
            want = torch.ops.pcops._chamfer_reduce(*args, mean, mode)
            got = torch.ops.pcops._chamfer_reduce(*dev, mean, mode)
            assert same_bits(got, want), (dtype, mode)
            grad = torch.randn(want.shape, generator=gen, dtype=dtype)
            want = torch.ops.pcops._chamfer_reduce_backward(grad, *args, mean, mode)
            got = torch.ops.pcops._chamfer_reduce_backward(grad.to(CUDA), *dev, mean, mode)
            assert same_bits(got[0], want[0]) and same_bits(got[1], want[1]), (dtype, mode)


def test_fused_path_kernel_count(gen):
    """The common case (float32, norm 2, no normals or weights, mean/mean) at B=4, 16384 points:
    the fused operators launch fewer kernels than the unfused formulas, with the same bits."""
    import contextlib

    from pcops.ops import chamfer_distance as mod

    class Unfused:
        @staticmethod
        def apply(x, y, idx, norm):
            return mod._masked_pair_distance(x, y, idx, norm)

    class UnfusedReduce:
        @staticmethod
        def apply(*args):
            return mod._reduce_formula(*args)

    @contextlib.contextmanager
    def unfused():
        saved = mod._PairDistance, mod._Reduce, mod._Chamfer
        mod._PairDistance, mod._Reduce, mod._Chamfer = Unfused, UnfusedReduce, mod._Composed
        try:
            yield
        finally:
            mod._PairDistance, mod._Reduce, mod._Chamfer = saved

    x = torch.rand(4, 16384, 3, generator=gen).to(CUDA)
    y = torch.rand(4, 16384, 3, generator=gen).to(CUDA)
    counts, results = [], []
    for ctx in (contextlib.nullcontext, unfused):
        with ctx():
            a, b = x.clone().requires_grad_(True), y.clone().requires_grad_(True)
            pcops.chamfer_distance(a, b)[0].backward()  # warm-up
            a.grad = b.grad = None
            torch.cuda.synchronize()
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                loss = pcops.chamfer_distance(a, b)[0]
                loss.backward()
                torch.cuda.synchronize()
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        counts.append(len(kernels))
        results.append((loss.detach(), a.grad, b.grad))
    print(f"CUDA kernels per forward + backward: fused {counts[0]}, unfused {counts[1]}")
    assert 0 < counts[0] < counts[1]
    for got, want in zip(*results):
        assert same_bits(got, want)
