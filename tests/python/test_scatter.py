"""pcops.scatter / segment_csr / segment_coo / gather_*: exact oracles, empty slots, ties, NaN,
gradients (gradcheck in float64), determinism across thread counts, opcheck, errors."""

from __future__ import annotations

import pytest
import torch

import pcops
from conftest import with_threads

REDUCES = ("sum", "mean", "mul", "min", "max")


CHUNK = 2048  # the contract's chunk length (docs/ops/scatter.md), written out here


def chunked_fold(vals, start, op):
    """sum / mul of one element by the contract's chunk rule: a list longer than CHUNK folds
    consecutive chunks of CHUNK values, chunk 0 from `start`, every later one from its own first
    value, and combines the partials left to right (a plain serial fold for CHUNK values or fewer)."""
    acc = start
    for x in vals[:CHUNK]:
        acc = op(acc, x)
    for c0 in range(CHUNK, len(vals), CHUNK):
        part = vals[c0]
        for x in vals[c0 + 1:c0 + CHUNK]:
            part = op(part, x)
        acc = op(acc, part)
    return acc


def oracle(src: torch.Tensor, index: torch.Tensor, dim: int, size: int, reduce: str):
    """The contract element by element: ascending source order from the identity, long lists by
    the chunk rule (float64 for floats is not used: the same dtype, so the comparison is
    bitwise)."""
    src_m = src.movedim(dim, -1).contiguous()
    idx_m = pcops.ops.scatter.broadcast(index, src, dim).movedim(dim, -1).contiguous()
    lead = src_m.shape[:-1]
    E = src_m.shape[-1]
    s2, i2 = src_m.reshape(-1, E), idx_m.reshape(-1, E)
    out = torch.zeros(s2.shape[0], size, dtype=src.dtype)
    arg = torch.full((s2.shape[0], size), E, dtype=torch.int64)
    for r in range(s2.shape[0]):
        for m in range(size):
            sel = (i2[r] == m).nonzero().flatten().tolist()
            vals = list(s2[r, sel].unbind()) if sel else []
            if reduce in ("sum", "mean"):
                v = chunked_fold(vals, torch.zeros((), dtype=src.dtype), lambda a, b: a + b)
                if reduce == "mean":
                    c = max(len(sel), 1)
                    v = v / c if src.dtype.is_floating_point else torch.div(v, c, rounding_mode="floor")
            elif reduce == "mul":
                v = chunked_fold(vals, torch.ones((), dtype=src.dtype), lambda a, b: a * b)
            else:
                info = torch.finfo(src.dtype) if src.dtype.is_floating_point else torch.iinfo(src.dtype)
                v = torch.tensor(info.min if reduce == "max" else info.max, dtype=src.dtype)
                for e in sel:
                    x = s2[r, e]
                    if (x > v) if reduce == "max" else (x < v):
                        v, arg[r, m] = x, e
                if arg[r, m] == E:
                    v = torch.zeros((), dtype=src.dtype)
            out[r, m] = v
    out = out.reshape(*lead, size).movedim(-1, dim)
    arg = arg.reshape(*lead, size).movedim(-1, dim)
    return out, arg


@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32])
def test_matches_oracle(reduce, dtype, gen):
    src = (torch.randint(-4, 5, (3, 40, 4), generator=gen)).to(dtype)
    if dtype.is_floating_point:
        src = src / 4 + torch.rand(3, 40, 4, generator=gen).to(dtype) * (reduce != "mul")
    index = torch.randint(0, 9, (40,), generator=gen)
    out, arg = torch.ops.pcops.scatter(src, pcops.ops.scatter.broadcast(index, src, 1), 1, 11, reduce, None)
    ref, ref_arg = oracle(src, index, 1, 11, reduce)
    assert torch.equal(out, ref)
    if reduce in ("min", "max"):
        assert torch.equal(arg, ref_arg)
        vals, arg2 = (pcops.scatter_max if reduce == "max" else pcops.scatter_min)(src, index, 1, dim_size=11)
        assert torch.equal(vals, ref) and torch.equal(arg2, ref_arg)


def test_elementwise_index_matches_oracle(gen):
    src = torch.randn(2, 30, 5, generator=gen)
    index = torch.randint(0, 6, (2, 30, 5), generator=gen)
    for reduce in REDUCES:
        out = pcops.scatter(src, index, 1, dim_size=7, reduce=reduce)
        assert torch.equal(out, oracle(src, index, 1, 7, reduce)[0]), reduce


def test_long_lists_follow_the_chunk_rule(gen):
    # One destination with 3 * CHUNK + 5 contributions (4 chunks) among others, values of mixed
    # magnitude so that the order of the adds shows in the bits; NaN inside the long list for max.
    n = 3 * CHUNK + 5
    E = n + 40
    index = torch.ones(E, dtype=torch.long)
    perm = torch.randperm(E, generator=gen)
    index[perm[:20]] = 0
    index[perm[20:40]] = 2
    scale = torch.pow(2.0, torch.randint(0, 16, (E, 2), generator=gen).float())
    src = torch.randn(E, 2, generator=gen) * scale
    src[(index == 1).nonzero()[CHUNK + 3, 0], 0] = float("nan")
    for reduce in ("sum", "mean", "max", "min"):
        out = pcops.scatter(src, index, 0, dim_size=4, reduce=reduce)
        assert torch.equal(out.nan_to_num(7.0), oracle(src, index, 0, 4, reduce)[0].nan_to_num(7.0)), reduce
    factors = 1 + torch.rand(E, 2, generator=gen) / 64
    out = pcops.scatter(factors, index, 0, dim_size=4, reduce="mul")
    assert torch.equal(out, oracle(factors, index, 0, 4, "mul")[0])
    # Sorted destinations (segment_csr / segment_coo) follow the same rule.
    order = torch.sort(index, stable=True).indices
    ptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(index, minlength=4).cumsum(0)])
    ref = oracle(src[order], index[order], 0, 4, "sum")[0]
    assert torch.equal(pcops.segment_csr(src[order], ptr, reduce="sum").nan_to_num(7.0), ref.nan_to_num(7.0))
    out = pcops.segment_coo(src[order], index[order], dim_size=4)
    assert torch.equal(out.nan_to_num(7.0), ref.nan_to_num(7.0))


def test_chunk_rule_example():
    # 1e8 then ones: a serial float32 fold loses every 1 (1e8 + 1 rounds back to 1e8); the chunk
    # rule adds chunk 1's exact partial 2048 (chunk 0 keeps 1e8).
    src = torch.ones(2 * CHUNK)
    src[0] = 1e8
    out = pcops.scatter(src, torch.zeros(2 * CHUNK, dtype=torch.long), dim_size=1)
    assert out.item() == 1e8 + 2048


def test_upstream_example_values():
    src = torch.tensor([[2.0, 0, 1, 4, 3], [0, 2, 1, 3, 4]])
    index = torch.tensor([[4, 5, 4, 2, 3], [0, 0, 5, 5, 3]])
    assert pcops.scatter(src, index, -1, reduce="sum").tolist() == [[0, 0, 4, 3, 3, 0], [2, 0, 0, 4, 0, 4]]
    vals, arg = pcops.scatter_max(src, index, -1)
    assert vals.tolist() == [[0, 0, 4, 3, 2, 0], [2, 0, 0, 4, 0, 3]]
    assert arg.tolist() == [[5, 5, 3, 4, 0, 1], [1, 5, 5, 4, 5, 3]]
    assert pcops.scatter(src, index, -1, reduce="mul").tolist() == [[1, 1, 4, 3, 2, 0], [0, 1, 1, 4, 1, 3]]


def test_ties_nan_and_empty_slots():
    nan, inf = float("nan"), float("inf")
    src = torch.tensor([1.0, nan, 3.0, 3.0, nan, -inf])
    index = torch.tensor([0, 0, 0, 0, 1, 2])
    vals, arg = pcops.scatter_max(src, index, dim_size=4)
    assert vals.tolist() == [3.0, 0.0, 0.0, 0.0]
    assert arg.tolist() == [2, 6, 6, 6]
    vals, arg = pcops.scatter_min(torch.tensor([2.0, 1.0, 1.0]), torch.tensor([0, 0, 0]))
    assert vals.tolist() == [1.0] and arg.tolist() == [1]
    assert pcops.scatter(torch.empty(0), torch.empty(0, dtype=torch.long)).shape == (0,)
    assert pcops.scatter(torch.empty(0), torch.empty(0, dtype=torch.long), dim_size=3, reduce="mul").tolist() == [1, 1, 1]


def test_out_argument_accumulates_in_place():
    src = torch.tensor([1.0, 2.0, 3.0])
    out = torch.tensor([10.0, 2.5, -1.0])
    res = pcops.scatter(src, torch.tensor([0, 0, 1]), out=out, reduce="max")
    assert res is out and out.tolist() == [10.0, 3.0, -1.0]
    out = torch.tensor([1.0, 1.0])
    pcops.scatter(src, torch.tensor([0, 0, 1]), out=out, reduce="mean")
    assert out.tolist() == [2.0, 4.0]  # (1 + 1 + 2) / 2, (1 + 3) / 1


def test_segments_match_scatter(gen):
    src = torch.randn(4, 50, 3, generator=gen)
    sizes = torch.randint(0, 5, (12,), generator=gen)
    sizes[-1] = 50 - sizes[:-1].sum().clamp(max=50)
    sizes = sizes.clamp(min=0)
    ptr = torch.cat([torch.zeros(1, dtype=torch.long), sizes.cumsum(0)]).clamp(max=50)
    ptr[-1] = 50
    index = torch.repeat_interleave(torch.arange(12), ptr.diff())
    for reduce in ("sum", "mean", "min", "max"):
        ref = pcops.scatter(src, index, 1, dim_size=12, reduce=reduce)
        assert torch.equal(pcops.segment_csr(src, ptr.view(1, -1), reduce=reduce), ref), reduce
        assert torch.equal(pcops.segment_coo(src, index.view(1, -1), dim_size=12, reduce=reduce), ref), reduce
    seg = torch.randn(4, 12, 3, generator=gen)
    assert torch.equal(pcops.gather_csr(seg, ptr.view(1, -1)), seg.index_select(1, index))
    assert torch.equal(pcops.gather_coo(seg, index.view(1, -1)), seg.index_select(1, index))


@pytest.mark.parametrize("reduce", REDUCES)
def test_gradcheck(reduce, gen):
    src = torch.randn(12, 3, dtype=torch.float64, generator=gen, requires_grad=True)
    index = torch.tensor([0, 1, 0, 1, 2, 2, 3, 3, 3, 0, 5, 5])
    assert torch.autograd.gradcheck(lambda s: pcops.scatter(s, index, 0, dim_size=7, reduce=reduce), (src,))
    if reduce != "mul":
        ptr = torch.tensor([0, 3, 3, 7, 12])
        sorted_index = index.sort().values
        assert torch.autograd.gradcheck(lambda s: pcops.segment_csr(s, ptr, reduce=reduce), (src,))
        assert torch.autograd.gradcheck(lambda s: pcops.segment_coo(s, sorted_index, dim_size=7, reduce=reduce),
                                        (src,))


def test_gather_gradcheck(gen):
    src = torch.randn(4, 2, dtype=torch.float64, generator=gen, requires_grad=True)
    assert torch.autograd.gradcheck(lambda s: pcops.gather_csr(s, torch.tensor([0, 2, 5, 5, 9])), (src,))
    assert torch.autograd.gradcheck(lambda s: pcops.gather_coo(s, torch.tensor([0, 0, 1, 3, 3, 3])), (src,))
    assert torch.autograd.gradgradcheck(lambda s: pcops.scatter(s, torch.tensor([0, 1, 1, 0]), 0), (src,))


def test_deterministic_across_thread_counts(gen):
    # Concentrated destinations: most contributions go to one row (split into column blocks).
    src = torch.randn(200_000, 32, generator=gen)
    index = torch.where(torch.rand(200_000, generator=gen) < 0.9, 3, torch.randint(0, 1000, (200_000,), generator=gen))
    results = [with_threads(t, lambda: pcops.scatter(src, index, 0, dim_size=1000, reduce="mean")) for t in (1, 2, 3)]
    assert all(torch.equal(results[0], r) for r in results[1:])
    mx = [with_threads(t, lambda: pcops.scatter_max(src, index, 0, dim_size=1000)) for t in (1, 2)]
    assert torch.equal(mx[0][0], mx[1][0]) and torch.equal(mx[0][1], mx[1][1])
    # And close to torch's own (differently ordered) sum.
    ref = torch.zeros(1000, 32).index_add_(0, index, src)
    torch.testing.assert_close(pcops.scatter(src, index, 0, dim_size=1000), ref, rtol=1e-4, atol=1e-3)


def test_half_and_bfloat16_reduce_in_float32():
    src = torch.tensor([1.0, 2.0, 3.0]).half()
    out = pcops.scatter(src, torch.tensor([0, 0, 1]), reduce="mean")
    assert out.dtype == torch.float16 and out.tolist() == [1.5, 3.0]
    assert pcops.scatter(src.bfloat16(), torch.tensor([0, 0, 1])).dtype == torch.bfloat16


def test_errors():
    src = torch.randn(4)
    with pytest.raises(IndexError):
        pcops.scatter(src, torch.tensor([0, 1, 2, 5]), dim_size=3)
    with pytest.raises(IndexError):
        pcops.scatter(src, torch.tensor([0, -1, 2, 1]))
    with pytest.raises(TypeError):
        pcops.scatter(src, torch.tensor([0, 1, 2, 1], dtype=torch.int32))
    with pytest.raises(ValueError):
        pcops.scatter(src, torch.tensor([0, 1, 2, 1]), reduce="median")
    with pytest.raises(ValueError):
        pcops.segment_coo(src, torch.tensor([1, 0, 2, 2]))
    with pytest.raises(ValueError):
        pcops.segment_csr(src, torch.tensor([0, 3, 2, 4]))
    with pytest.raises(IndexError):
        pcops.segment_csr(src, torch.tensor([0, 3, 5]))
    with pytest.raises(ValueError):
        pcops.scatter(torch.randn(2, 2), torch.zeros(2, 2, dtype=torch.long), 0, dim_size=2**62)
    with pytest.raises(TypeError):
        pcops.scatter(torch.tensor([True, False]), torch.tensor([0, 0]))


def test_one_dim_index_is_taken_as_it_is(gen):
    # The op takes a 1-D index of src.size(dim) entries along dim as it is (the wrapper builds no
    # broadcast view for it): the same results as the broadcast index, for every dim and reduce.
    src = torch.randn(3, 20, 4, generator=gen)
    for dim in (0, 1, 2, -1):
        d = dim % 3
        index = torch.randint(0, 5, (src.size(d),), generator=gen)
        full = pcops.ops.scatter.broadcast(index, src, d)
        for reduce in REDUCES:
            got = torch.ops.pcops.scatter(src, index, dim, 6, reduce, None)
            want = torch.ops.pcops.scatter(src, full, dim, 6, reduce, None)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), (dim, reduce)
            wrapped = pcops.scatter(src, index, dim, dim_size=6, reduce=reduce)
            assert torch.equal(wrapped, want[0]), (dim, reduce)
    with pytest.raises(ValueError, match="along dim"):
        torch.ops.pcops.scatter(src, torch.zeros(19, dtype=torch.long), 1, 6, "sum", None)
    # A length-1 index still broadcasts (through the wrapper's view), and an empty src sizes 0.
    one = pcops.scatter(src, torch.tensor([2]), 1, dim_size=3)
    assert torch.equal(one, pcops.scatter(src, torch.full((20,), 2), 1, dim_size=3))
    assert pcops.scatter(torch.zeros(0, 20), torch.ones(20, dtype=torch.long), 1).shape == (0, 0)
    opcheck_src = torch.randn(6, 3, generator=gen, requires_grad=True)
    for reduce in REDUCES:
        torch.library.opcheck(torch.ops.pcops.scatter.default,
                              (opcheck_src, torch.tensor([0, 2, 0, 1, 1, 2]), 0, 3, reduce, None))


def test_calls_without_a_gradient_skip_autograd(gen):
    # Without a gradient to record the wrappers call the ops below the autograd key: the same
    # values, no graph; with one, the autograd formula as before (1-D index included).
    src = torch.randn(30, 4, dtype=torch.float64, generator=gen)
    index = torch.randint(0, 7, (30,), generator=gen)
    ptr = torch.tensor([0, 4, 4, 13, 30])
    plain = pcops.scatter(src, index, 0, dim_size=7, reduce="mean")
    assert plain.grad_fn is None
    leaf = src.clone().requires_grad_()
    with torch.no_grad():
        assert pcops.scatter(leaf, index, 0, dim_size=7).grad_fn is None
        assert pcops.segment_csr(leaf, ptr).grad_fn is None
    tracked = pcops.scatter(leaf, index, 0, dim_size=7, reduce="mean")
    assert tracked.grad_fn is not None and torch.equal(tracked.detach(), plain)
    assert pcops.segment_csr(leaf, ptr, reduce="max").grad_fn is not None
    for reduce in REDUCES:
        assert torch.autograd.gradcheck(lambda s: pcops.scatter(s, index, 0, dim_size=7, reduce=reduce),
                                        (leaf,))


def test_compiled_scatter_matches_eager(gen):
    src = torch.randn(40, 8, generator=gen)
    index = torch.randint(0, 9, (40,), generator=gen)

    def fn(s, i):
        segments = pcops.segment_csr(s, torch.tensor([0, 10, 40]))
        return pcops.scatter(s, i, 0, dim_size=9, reduce="mean") + segments[:1]

    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(src, index), fn(src, index))
    leaf = src.clone().requires_grad_()
    compiled(leaf, index).sum().backward()
    ref = src.clone().requires_grad_()
    fn(ref, index).sum().backward()
    assert torch.equal(leaf.grad, ref.grad)


def test_opcheck(gen):
    src = torch.randn(6, 3, generator=gen, requires_grad=True)
    index = pcops.ops.scatter.broadcast(torch.tensor([0, 2, 0, 1, 1, 2]), src, 0)
    for reduce in REDUCES:
        torch.library.opcheck(torch.ops.pcops.scatter.default, (src, index, 0, 3, reduce, None))
    ptr = torch.tensor([0, 2, 2, 6])
    for reduce in ("sum", "mean", "max"):
        torch.library.opcheck(torch.ops.pcops.segment_csr.default, (src, ptr, reduce))
        torch.library.opcheck(torch.ops.pcops.segment_coo.default,
                              (src, torch.tensor([0, 0, 1, 1, 1, 2]), 3, reduce, None))
    torch.library.opcheck(torch.ops.pcops.gather_csr.default, (src[:3], ptr, 6, None))
    torch.library.opcheck(torch.ops.pcops.gather_coo.default, (src[:3], torch.tensor([0, 0, 2, 2])))
