"""CUDA registrations of the scatter / segment / gather operators: every reduction and dtype on
uniform, concentrated (one destination receives most sources), empty and NaN inputs, per-row and
per-element destinations, non-contiguous inputs and out= start values are bitwise equal to the
CPU backend; so are the gradients and the torch_scatter stand-in on CUDA tensors. Bad indices and
offsets raise the CPU's exception types before any kernel runs."""

from __future__ import annotations

import pytest
import torch

import pcops
from conftest import isolated_modules, same_bits  # this directory's conftest

CUDA = torch.device("cuda")
DTYPES = [torch.float32, torch.float64, torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8,
          torch.float16, torch.bfloat16]
REDUCES = ["sum", "mean", "mul", "min", "max"]


def values(gen, shape, dtype, nan=0.0):
    if dtype.is_floating_point:
        x = torch.randn(shape, generator=gen, dtype=torch.float64) * 3
        x = torch.where(torch.rand(shape, generator=gen) < 0.25, (x * 2).round() / 2, x)  # ties
        if nan:
            r = torch.rand(shape, generator=gen)
            x = torch.where(r < nan, torch.full_like(x, float("nan")), x)
            x = torch.where((r >= nan) & (r < 1.5 * nan), torch.full_like(x, float("inf")), x)
        return x.to(dtype)
    lo = 0 if dtype == torch.uint8 else -6
    return torch.randint(lo, 7, shape, generator=gen).to(dtype)


def indices(gen, shape, size, hot=0.0):
    idx = torch.randint(0, size, shape, generator=gen)
    return torch.where(torch.rand(shape, generator=gen) < hot, torch.zeros_like(idx), idx)


def assert_same(cpu, gpu, what=""):
    cpu = cpu if isinstance(cpu, (tuple, list)) else (cpu,)
    gpu = gpu if isinstance(gpu, (tuple, list)) else (gpu,)
    assert len(cpu) == len(gpu)
    for i, (c, g) in enumerate(zip(cpu, gpu)):
        assert g.device.type == "cuda", what
        assert same_bits(c, g), f"{what} output {i}: {(c.cpu() != g.cpu()).sum().item()} elements differ"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hot", [0.0, 0.9])
def test_scatter_every_reduce(gen, dtype, hot):
    for shape, dim, per_element in [((4000,), 0, False), ((3, 500, 5), 1, False), ((600, 7), 0, True)]:
        src = values(gen, shape, dtype)
        if per_element:
            index = indices(gen, shape, 37, hot)
        else:
            index = indices(gen, (shape[dim],), 37 if len(shape) == 1 else 11, hot)
        for reduce in REDUCES:
            cpu = pcops.scatter(src, index, dim, reduce=reduce)
            gpu = pcops.scatter(src.to(CUDA), index.to(CUDA), dim, reduce=reduce)
            assert_same(cpu, gpu, f"{dtype} {reduce} {shape}")
        for fn in (pcops.scatter_max, pcops.scatter_min):
            assert_same(fn(src, index, dim, dim_size=50), fn(src.to(CUDA), index.to(CUDA), dim, dim_size=50),
                        f"{dtype} {fn.__name__} {shape}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_scatter_nan_inf_and_out(gen, dtype):
    src = values(gen, (800, 6), dtype, nan=0.1)
    index = indices(gen, (800,), 13, 0.3)
    for reduce in REDUCES:
        start = values(gen, (13, 6), dtype, nan=0.05)
        a, b = start.clone(), start.to(CUDA)
        cpu = pcops.scatter(src, index, 0, out=a, reduce=reduce)
        gpu = pcops.scatter(src.to(CUDA), index.to(CUDA), 0, out=b, reduce=reduce)
        assert_same(cpu, gpu, f"out= {reduce}")
        assert same_bits(a, b)


def test_non_contiguous_and_broadcast_index(gen):
    src = values(gen, (9, 300, 4), torch.float32).transpose(0, 1)  # [300, 9, 4], strided
    index = indices(gen, (300, 9), 20, 0.2)  # broadcast over the last dim
    for reduce in REDUCES:
        assert_same(pcops.scatter(src, index, 0, reduce=reduce),
                    pcops.scatter(src.to(CUDA), index.to(CUDA), 0, reduce=reduce), reduce)
    full = indices(gen, (300, 9, 4), 20)[:, ::2]  # strided per-element index
    assert_same(pcops.scatter(src[:, ::2], full, 0, reduce="max"),
                pcops.scatter(src.to(CUDA)[:, ::2], full.to(CUDA), 0, reduce="max"))


def test_empty(gen):
    for reduce in REDUCES:
        for src, index, size in [(torch.zeros(0, 3), torch.zeros(0, dtype=torch.long), 4),
                                 (torch.ones(5, 0), torch.zeros(5, dtype=torch.long), 2)]:
            assert_same(pcops.scatter(src, index, 0, dim_size=size, reduce=reduce),
                        pcops.scatter(src.to(CUDA), index.to(CUDA), 0, dim_size=size, reduce=reduce))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32])
def test_chunk_rule_long_lists(gen, dtype):
    # Lists longer than the contract's chunk length (2048): about 1M sources on destination 0,
    # lists of 2047 / 2049 / 6149 sources on others, NaN / inf inside; out= start values.
    E = 1 << 20
    src = values(gen, (E, 3), dtype, nan=0.001)
    index = indices(gen, (E,), 64, 0.95)
    index = torch.where((index >= 1) & (index <= 3), index + 3, index)  # 1, 2, 3: exactly the lists below
    index[torch.randperm(E, generator=gen)[: 2047 + 2049 + 6149]] = torch.repeat_interleave(
        torch.tensor([1, 2, 3]), torch.tensor([2047, 2049, 6149]))
    for reduce in REDUCES:
        assert_same(pcops.scatter(src, index, 0, reduce=reduce),
                    pcops.scatter(src.to(CUDA), index.to(CUDA), 0, reduce=reduce), f"{dtype} {reduce}")
        start = values(gen, (64, 3), dtype)
        a, b = start.clone(), start.to(CUDA)
        pcops.scatter(src, index, 0, out=a, reduce=reduce)
        pcops.scatter(src.to(CUDA), index.to(CUDA), 0, out=b, reduce=reduce)
        assert same_bits(a, b), f"{dtype} out= {reduce}"
    order = torch.sort(index, stable=True).indices
    ptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(index, minlength=64).cumsum(0)])
    for reduce in ["sum", "mean", "min", "max"]:
        assert_same(pcops.segment_csr(src[order], ptr, reduce=reduce),
                    pcops.segment_csr(src[order].to(CUDA), ptr.to(CUDA), reduce=reduce),
                    f"segment_csr {reduce}")


def random_indptr(gen, segments, rows):
    cuts = torch.sort(torch.randint(0, rows // 3 + 1, (segments - 1,), generator=gen)).values
    return torch.cat([torch.zeros(1, dtype=torch.long), cuts, torch.tensor([rows])])


@pytest.mark.parametrize("dtype", DTYPES)
def test_segments_and_gathers(gen, dtype):
    src = values(gen, (2, 900, 3), dtype)
    indptr = random_indptr(gen, 30, 900)  # many empty segments, one long
    index = torch.sort(indices(gen, (900,), 40, 0.3)).values
    for reduce in ["sum", "mean", "min", "max"]:
        assert_same(pcops.ops.scatter._segment_csr(src, indptr.expand(2, -1), None, reduce),
                    pcops.ops.scatter._segment_csr(src.to(CUDA), indptr.expand(2, -1).to(CUDA), None, reduce),
                    f"segment_csr {reduce}")
        coo = pcops.ops.scatter._segment_coo
        assert_same(coo(src, index.expand(2, -1), None, None, reduce),
                    coo(src.to(CUDA), index.expand(2, -1).to(CUDA), None, None, reduce),
                    f"segment_coo {reduce}")
    seg = values(gen, (2, 30, 3), dtype)
    ptr2 = indptr.expand(2, -1)
    assert_same(pcops.gather_csr(seg, ptr2), pcops.gather_csr(seg.to(CUDA), ptr2.to(CUDA)))
    seg = values(gen, (2, 40, 3), dtype)
    idx2 = index.expand(2, -1)
    assert_same(pcops.gather_coo(seg, idx2), pcops.gather_coo(seg.to(CUDA), idx2.to(CUDA)))


def grads_both(fn, src, grad_seed=0):
    results = []
    for dev in ("cpu", "cuda"):
        x = src.detach().clone().to(dev).requires_grad_()
        out = fn(x, dev)
        g = torch.randn(out.shape, generator=torch.Generator().manual_seed(grad_seed), dtype=out.dtype)
        g = g.to(dev)
        out.backward(g)
        results.append((out, x.grad))
    return results


def test_gradients(gen):
    src = values(gen, (700, 5), torch.float32)
    index = indices(gen, (700,), 23, 0.5)
    indptr = random_indptr(gen, 23, 700)
    sidx = torch.sort(index).values
    cases = {f"scatter {r}": (lambda x, d, r=r: pcops.scatter(x, index.to(d), 0, dim_size=23, reduce=r))
             for r in REDUCES}
    cases["segment_csr mean"] = lambda x, d: pcops.segment_csr(x, indptr.to(d), reduce="mean")
    cases["segment_csr max"] = lambda x, d: pcops.segment_csr(x, indptr.to(d), reduce="max")
    cases["segment_coo mean"] = lambda x, d: pcops.segment_coo(x, sidx.to(d), dim_size=23, reduce="mean")
    cases["gather_coo"] = lambda x, d: pcops.gather_coo(x[:23], sidx.to(d))
    cases["gather_csr"] = lambda x, d: pcops.gather_csr(x[:23], indptr.to(d))
    for name, fn in cases.items():
        (c_out, c_grad), (g_out, g_grad) = grads_both(fn, src)
        assert same_bits(c_out, g_out), name
        assert same_bits(c_grad, g_grad), name


def test_bad_indices_raise_before_any_kernel():
    src = torch.ones(6, 2, device=CUDA)
    with pytest.raises(IndexError):
        pcops.scatter(src, torch.tensor([0, 1, 2, 3, 4, 9], device=CUDA), 0, dim_size=5)
    with pytest.raises(IndexError):
        pcops.scatter(src, torch.tensor([0, 1, -1, 3, 4, 0], device=CUDA), 0, dim_size=5)
    with pytest.raises(ValueError):
        pcops.segment_coo(src, torch.tensor([0, 2, 1, 3, 4, 4], device=CUDA))
    with pytest.raises(IndexError):
        pcops.segment_csr(src, torch.tensor([0, 2, 7], device=CUDA))
    with pytest.raises(ValueError):
        pcops.segment_csr(src, torch.tensor([0, 4, 2, 6], device=CUDA))
    with pytest.raises(IndexError):
        pcops.gather_coo(src, torch.tensor([0, 6], device=CUDA))
    with pytest.raises(ValueError):
        pcops.scatter(src, torch.zeros(6, dtype=torch.long), 0)  # index on another device


def test_bad_values_raise_and_leave_out_untouched():
    """The value checks run beside the kernels and raise before the call returns: `out=` keeps
    its values, and the next call on the same stream is unaffected."""
    src = torch.ones(6, 2, device=CUDA)
    out = torch.full((5, 2), 3.0, device=CUDA)
    with pytest.raises(IndexError, match=r"got values in \[0, 9\]"):
        pcops.scatter(src, torch.tensor([0, 1, 2, 3, 4, 9], device=CUDA), 0, out=out)
    assert bool((out == 3.0).all())
    with pytest.raises(IndexError, match="first 0 and last 7"):
        pcops.segment_csr(src.unsqueeze(0).expand(2, 6, 2), torch.tensor([[0, 2, 6], [0, 2, 7]], device=CUDA))
    with pytest.raises(ValueError, match="non-decreasing"):
        pcops.segment_csr(src.unsqueeze(0).expand(2, 6, 2), torch.tensor([[0, 2, 6], [0, 3, 2]], device=CUDA))
    with pytest.raises(ValueError, match="sorted"):
        pcops.segment_coo(src.unsqueeze(0).expand(2, 6, 2),
                          torch.tensor([[0, 1, 1, 2, 3, 4], [0, 1, 2, 3, 4, 3]], device=CUDA), dim_size=5)
    good = pcops.scatter(src, torch.tensor([0, 1, 2, 3, 4, 4], device=CUDA), 0, dim_size=5)
    assert good.tolist() == [[1, 1], [1, 1], [1, 1], [1, 1], [2, 2]]


def test_value_checks_inside_the_reduction():
    """scatter / segment_coo / segment_csr compute their value statistics themselves (fused into
    the grouping's read of the index for unsorted destinations): a bad value anywhere in a long
    index (first, middle, last entry; negative or past dim_size) raises the CPU's exception type
    and the binding's message, and `out=` keeps its values; every index layout (1-D along dim,
    per-row rows, per-element) and an empty index."""
    E, M = 300_000, 50
    src = torch.ones(E, 32, device=CUDA)
    gen = torch.Generator().manual_seed(5)
    for pos in (0, E // 2, E - 1):
        for bad in (-1, M):
            index = torch.randint(0, M, (E,), generator=gen)
            index[pos] = bad
            lo, hi = min(bad, int(index.min())), max(bad, int(index.max()))
            out = torch.full((M, 32), 3.0, device=CUDA)
            with pytest.raises(IndexError, match=rf"got values in \[{lo}, {hi}\]"):
                pcops.scatter(src, index.to(CUDA), 0, out=out)
            assert bool((out == 3.0).all())
            with pytest.raises(IndexError):  # the CPU backend's exception type
                pcops.scatter(torch.ones(E, 1), index, 0, dim_size=M)
    per_row = torch.randint(0, M, (3, 4000, 1), generator=gen)
    per_row[1, 1234, 0] = M + 3
    with pytest.raises(IndexError, match=rf"got values in \[0, {M + 3}\]"):
        pcops.scatter(torch.ones(3, 4000, 5, device=CUDA), per_row.to(CUDA), 1, dim_size=M)
    per_element = torch.randint(0, M, (4000, 32), generator=gen)
    per_element[17, 31] = -5
    with pytest.raises(IndexError, match=rf"got values in \[-5, {M - 1}\]"):
        pcops.scatter(torch.ones(4000, 32, device=CUDA), per_element.to(CUDA), 0, dim_size=M)
    rows = torch.sort(torch.randint(0, M, (2, 30_000), generator=gen)).values
    rows[1, 20_000] = rows[1, 20_001] + 1
    with pytest.raises(ValueError, match="sorted"):
        pcops.segment_coo(torch.ones(2, 30_000, 3, device=CUDA), rows.to(CUDA), dim_size=M + 1)
    cuts = torch.sort(torch.randint(0, E, (20_000,), generator=gen)).values
    ptr = torch.cat([torch.zeros(1, dtype=torch.long), cuts])
    bad_ptr = ptr.clone()
    bad_ptr[-1] = E + 1
    with pytest.raises(IndexError, match=rf"first 0 and last {E + 1}"):
        pcops.segment_csr(src, bad_ptr.to(CUDA))
    bad_ptr = ptr.clone()
    bad_ptr[10_000] = bad_ptr[10_001] + 1
    with pytest.raises(ValueError, match="non-decreasing"):
        pcops.segment_csr(src, bad_ptr.to(CUDA))
    assert_same(pcops.segment_csr(src.cpu(), ptr), pcops.segment_csr(src, ptr.to(CUDA)))
    empty = pcops.scatter(torch.ones(0, 32, device=CUDA), torch.zeros(0, dtype=torch.long, device=CUDA), 0,
                          dim_size=4)
    assert empty.shape == (4, 32) and not bool(empty.any())


@pytest.mark.parametrize("width", [32, 64, 96])
def test_warp_wide_columns_match_cpu(gen, width):
    # Column counts that are multiples of 32: a warp's lanes fold one shared list (destinations
    # per row), or their own lists (per-element destinations); uniform and concentrated.
    for hot in (0.0, 0.9):
        src = values(gen, (20_000, width), torch.float32)
        index = indices(gen, (20_000,), 300, hot)
        per_element = indices(gen, (20_000, width), 300, hot)
        for reduce in REDUCES:
            assert_same(pcops.scatter(src, index, 0, reduce=reduce),
                        pcops.scatter(src.to(CUDA), index.to(CUDA), 0, reduce=reduce),
                        f"{reduce} {width} {hot}")
            assert_same(pcops.scatter(src, per_element, 0, dim_size=300, reduce=reduce),
                        pcops.scatter(src.to(CUDA), per_element.to(CUDA), 0, dim_size=300, reduce=reduce),
                        f"per element {reduce} {width} {hot}")
        order = torch.sort(index, stable=True).indices
        ptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(index, minlength=300).cumsum(0)])
        for reduce in ["sum", "mean", "min", "max"]:
            assert_same(pcops.segment_csr(src[order], ptr, reduce=reduce),
                        pcops.segment_csr(src[order].to(CUDA), ptr.to(CUDA), reduce=reduce), f"csr {reduce}")


def test_no_grad_calls_match_tracked_ones(gen):
    # The wrappers call the ops below the autograd key when no gradient is recorded: the same
    # bits as the tracked call, on CUDA tensors too.
    src = values(gen, (5000, 32), torch.float32).to(CUDA)
    index = indices(gen, (5000,), 100).to(CUDA)
    plain = pcops.scatter(src, index, 0, dim_size=100, reduce="mean")
    tracked = pcops.scatter(src.clone().requires_grad_(), index, 0, dim_size=100, reduce="mean")
    assert plain.grad_fn is None and tracked.grad_fn is not None
    assert same_bits(plain, tracked.detach())


def test_torch_scatter_standin_on_cuda(gen):
    import pcops.compat as compat

    with isolated_modules("torch_scatter"):
        compat.install(torch_scatter=True)
        import torch_scatter

        src = values(gen, (1000, 8), torch.float32)
        index = indices(gen, (1000,), 64, 0.4)
        sidx = torch.sort(index).values
        indptr = random_indptr(gen, 64, 1000)
        calls = [
            lambda s, i, si, p: torch_scatter.scatter(s, i, 0, reduce="sum"),
            lambda s, i, si, p: torch_scatter.scatter_mean(s, i, 0),
            lambda s, i, si, p: torch_scatter.scatter_max(s, i, 0),
            lambda s, i, si, p: torch_scatter.scatter_min(s, i, 0, dim_size=70),
            lambda s, i, si, p: torch_scatter.segment_csr(s, p, reduce="mean"),
            lambda s, i, si, p: torch_scatter.segment_coo(s, si, reduce="max"),
            lambda s, i, si, p: torch_scatter.gather_csr(s[:64], p),
        ]
        for n, call in enumerate(calls):
            cpu = call(src, index, sidx, indptr)
            gpu = call(src.to(CUDA), index.to(CUDA), sidx.to(CUDA), indptr.to(CUDA))
            assert_same(cpu, gpu, f"stand-in call {n}")
        # softmax goes through torch's exp / log, whose CPU and CUDA roundings differ: close only.
        for fn in (torch_scatter.scatter_softmax, torch_scatter.scatter_log_softmax):
            torch.testing.assert_close(fn(src.to(CUDA), index.to(CUDA), 0).cpu(), fn(src, index, 0))
