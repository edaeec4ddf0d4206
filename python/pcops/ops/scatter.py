"""Scatter and segment reductions, deterministic (contract: docs/ops/scatter.md).

torch_scatter 2.1.2 semantics (index broadcasting, output sizes, empty slots, ``out=``), computed
by pcops' operators: every output element reduces its contributions in ascending source order
from the reduction's identity (or from ``out``'s value; a sum / mean / mul list longer than 2048
in chunks of 2048 combined left to right), without atomics, so results are bitwise
reproducible, independent of the thread count and equal on CPU and CUDA. max/min: ties take the
smallest source index, NaN never wins, an empty slot (or one whose contributions never beat the
start value) is 0 with arg = ``src.size(dim)``.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from pcops.ops import _checks

__all__ = [
    "broadcast",
    "gather_coo",
    "gather_csr",
    "scatter",
    "scatter_max",
    "scatter_min",
    "segment_coo",
    "segment_csr",
]

_REDUCES = ("sum", "add", "mean", "mul", "min", "max")
_SEGMENT_REDUCES = ("sum", "add", "mean", "min", "max")


def broadcast(src: Tensor, other: Tensor, dim: int) -> Tensor:
    """torch_scatter's index broadcast: a lower-rank ``src`` is unsqueezed left up to ``dim``,
    then right, then expanded to ``other``'s shape."""
    if dim < 0:
        dim = other.dim() + dim
    if src.dim() == 1:
        for _ in range(0, dim):
            src = src.unsqueeze(0)
    for _ in range(src.dim(), other.dim()):
        src = src.unsqueeze(-1)
    return src.expand(other.size())


def _out_size(index: Tensor, dim: int, out: Optional[Tensor], dim_size: Optional[int],
              empty: bool = False) -> int:
    """``out``'s size along ``dim``, else ``dim_size``, else ``index.max() + 1`` (a
    synchronisation on CUDA), or 0 when ``empty`` or the index is."""
    if out is not None:
        return out.size(dim)
    if dim_size is not None:
        return int(dim_size)
    if empty or index.numel() == 0:
        return 0
    return int(index.max()) + 1


_below_autograd = torch._C._AutoDispatchBelowAutograd


def _needs_grad(src: Tensor, out: Optional[Tensor] = None) -> bool:
    """Whether a call on ``src`` (accumulating into ``out``) has a gradient to record."""
    return torch.is_grad_enabled() and (src.requires_grad or (out is not None and out.requires_grad))


def _call(op, needs_grad: bool, *args):
    """``op(*args)``; without a gradient to record (``needs_grad`` false: grad mode off, or no
    differentiable input requires grad), below the autograd dispatch key, as the op's autograd
    kernel itself would redispatch: that kernel is Python (torch.library.register_autograd), so
    entering it costs a Python round trip on every call. Traced code (torch.compile / export)
    takes the plain call."""
    if needs_grad or torch.compiler.is_compiling():
        return op(*args)
    with _below_autograd():
        return op(*args)


def _finish(result: Tensor, out: Optional[Tensor]) -> Tensor:
    if out is None:
        return result
    out.copy_(result)  # torch_scatter writes into the given tensor and returns it
    return out


def _scatter(src: Tensor, index: Tensor, dim: int, out: Optional[Tensor], dim_size: Optional[int],
             reduce: str) -> Tuple[Tensor, Tensor]:
    if not isinstance(src, Tensor) or not isinstance(index, Tensor):
        raise TypeError("src and index: expected tensors")
    if reduce not in _REDUCES:
        raise ValueError(f"reduce: expected one of {', '.join(_REDUCES)}, got {reduce!r}")
    if src.dim() == 0:
        raise ValueError("src: expected at least 1-D, got a 0-D tensor")
    dim = dim + src.dim() if dim < 0 else dim
    if not 0 <= dim < src.dim():
        raise IndexError(f"dim: expected a value in [{-src.dim()}, {src.dim()}), got {dim}")
    if index.dim() == 1 and index.size(0) == src.size(dim):
        expanded = index  # the op takes a 1-D index along dim as it is (no broadcast view)
    else:
        expanded = broadcast(index, src, dim)
    # index.max() (a synchronisation, only without out / dim_size) on the index as given: the
    # broadcast holds the same values (none when src is empty).
    size = _out_size(index, dim, out, dim_size, empty=src.numel() == 0)
    return _call(torch.ops.pcops.scatter, _needs_grad(src, out), src, expanded, dim, size, reduce, out)


def scatter(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
            dim_size: Optional[int] = None, reduce: str = "sum") -> Tensor:
    """Reduces ``src`` into ``out[..., index[..., i, ...], ...]`` along ``dim``.

    Args:
        src: values, any real dtype (float16 / bfloat16 are reduced in float32 and rounded once).
        index: int64 destinations, broadcast to ``src`` as torch_scatter does (a 1-D index runs
            along ``dim``); every value in ``[0, dim_size)`` (IndexError otherwise).
        dim: the reduced dimension.
        out: start values (updated in place and returned, as torch_scatter); its size along
            ``dim`` is the output size.
        dim_size: output size along ``dim`` (default ``index.max() + 1``, 0 for an empty index).
        reduce: ``sum`` / ``add``, ``mean`` (integer types: floor division), ``mul``, ``min``,
            ``max``.

    Returns:
        The reduced tensor (for min / max only the values; :func:`scatter_max` gives the args).
        Differentiable with respect to ``src`` with torch_scatter's gradients.
    """
    return _finish(_scatter(src, index, dim, out, dim_size, reduce)[0], out)


def scatter_max(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    """(values, argmax): argmax is the smallest source index of the maximum, ``src.size(dim)`` for
    an empty slot (whose value is 0)."""
    values, arg = _scatter(src, index, dim, out, dim_size, "max")
    return _finish(values, out), arg


def scatter_min(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    """(values, argmin), as :func:`scatter_max`."""
    values, arg = _scatter(src, index, dim, out, dim_size, "min")
    return _finish(values, out), arg


def segment_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None, reduce: str = "sum") -> Tensor:
    """Reduces ``src`` over the CSR segments ``[indptr[m], indptr[m + 1])`` along dim
    ``indptr.dim() - 1`` (sum / add, mean (integers: toward zero), min, max). Empty segments
    give 0. ``out`` (if given) receives the result; its entry values are not used (as upstream)."""
    return _segment_csr(src, indptr, out, reduce)[0]


def _segment_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor], reduce: str) -> Tuple[Tensor, Tensor]:
    if reduce not in _SEGMENT_REDUCES:
        raise ValueError(f"reduce: expected one of {', '.join(_SEGMENT_REDUCES)}, got {reduce!r}")
    values, arg = _call(torch.ops.pcops.segment_csr, _needs_grad(src), src, indptr, reduce)
    return _finish(values, out), arg


def segment_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None, dim_size: Optional[int] = None,
                reduce: str = "sum") -> Tensor:
    """Reduces ``src`` by a **sorted** index along dim ``index.dim() - 1`` (ValueError when
    unsorted). ``out`` values take part (as upstream); default size ``index.max() + 1``."""
    return _segment_coo(src, index, out, dim_size, reduce)[0]


def _segment_coo(src: Tensor, index: Tensor, out: Optional[Tensor], dim_size: Optional[int],
                 reduce: str) -> Tuple[Tensor, Tensor]:
    if reduce not in _SEGMENT_REDUCES:
        raise ValueError(f"reduce: expected one of {', '.join(_SEGMENT_REDUCES)}, got {reduce!r}")
    if index.dim() == 0:
        raise ValueError("index: expected at least 1-D, got a 0-D tensor")
    dim = index.dim() - 1
    size = _out_size(index, dim, out, dim_size)
    values, arg = _call(torch.ops.pcops.segment_coo, _needs_grad(src, out), src, index, size, reduce, out)
    return _finish(values, out), arg


def gather_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """Inverse of :func:`segment_csr`: row ``e`` of the output is ``src``'s row of the segment
    containing ``e`` (output size ``indptr[..., -1]``)."""
    dim = indptr.dim() - 1
    if out is not None:
        size = out.size(dim)
    elif src.numel() == 0 or indptr.numel() == 0:
        size = 0
    else:
        size = int(indptr.reshape(-1)[-1])
    return _finish(_call(torch.ops.pcops.gather_csr, _needs_grad(src, out), src, indptr, size, out), out)


def gather_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """Inverse of :func:`segment_coo`: ``out[..., e, ...] = src[..., index[..., e], ...]``."""
    return _finish(_call(torch.ops.pcops.gather_coo, _needs_grad(src), src, index), out)


# --------------------------------------------------------------------------------------------
# Fake kernels (torch.compile / meta) and autograd.


def _with(sizes, dim: int, n: int):
    s = list(sizes)
    s[dim] = n
    return s


@torch.library.register_fake("pcops::scatter")
def _scatter_fake(src, index, dim, dim_size, reduce, out=None):
    _checks.same_device(src, "src", index, "index")
    _checks.indices(index, "index")
    torch._check_value(src.dim() >= 1, lambda: "src: expected at least 1-D, got a 0-D tensor")
    d = dim + src.dim() if dim < 0 else dim
    along_dim = index.dim() == 1 and src.dim() > 1 and index.shape[0] == src.shape[d]
    torch._check_value(along_dim or index.shape == src.shape,
                       lambda: f"index: expected shape {tuple(src.shape)} (broadcast to src) or "
                       f"[{src.shape[d]}] (along dim), got {tuple(index.shape)}")
    sizes = _with(src.shape, d, dim_size)
    arg_sizes = sizes if reduce in ("min", "max") else [0]
    return src.new_empty(sizes), src.new_empty(arg_sizes, dtype=torch.int64)


@torch.library.register_fake("pcops::segment_csr")
def _segment_csr_fake(src, indptr, reduce):
    _checks.same_device(src, "src", indptr, "indptr")
    _checks.indices(indptr, "indptr")
    d = indptr.dim() - 1
    sizes = _with(src.shape, d, max(indptr.shape[-1] - 1, 0))
    arg_sizes = sizes if reduce in ("min", "max") else [0]
    return src.new_empty(sizes), src.new_empty(arg_sizes, dtype=torch.int64)


@torch.library.register_fake("pcops::segment_coo")
def _segment_coo_fake(src, index, dim_size, reduce, out=None):
    _checks.same_device(src, "src", index, "index")
    _checks.indices(index, "index")
    sizes = _with(src.shape, index.dim() - 1, dim_size)
    arg_sizes = sizes if reduce in ("min", "max") else [0]
    return src.new_empty(sizes), src.new_empty(arg_sizes, dtype=torch.int64)


@torch.library.register_fake("pcops::gather_csr")
def _gather_csr_fake(src, indptr, size, out=None):
    _checks.same_device(src, "src", indptr, "indptr")
    _checks.indices(indptr, "indptr")
    return src.new_empty(_with(src.shape, indptr.dim() - 1, size))


@torch.library.register_fake("pcops::gather_coo")
def _gather_coo_fake(src, index):
    _checks.same_device(src, "src", index, "index")
    _checks.indices(index, "index")
    return src.new_empty(_with(src.shape, index.dim() - 1, index.shape[-1]))


def _trailing(t: Tensor, ndim: int) -> Tensor:
    while t.dim() < ndim:
        t = t.unsqueeze(-1)
    return t


def _route_to_arg(grad_out: Tensor, arg: Tensor, dim: int, src_shape) -> Tensor:
    """Gradient of max / min: grad_out goes to the arg positions (the sentinel row is dropped)."""
    shape = list(src_shape)
    shape[dim] += 1
    grad = grad_out.new_zeros(shape).scatter_(dim, arg, grad_out)
    return grad.narrow(dim, 0, src_shape[dim])


def _scatter_setup(ctx, inputs, output):
    src, index, dim, dim_size, reduce, out = inputs
    values, arg = output
    ctx.dim = dim + src.dim() if dim < 0 else dim
    ctx.dim_size = dim_size
    ctx.reduce = reduce
    ctx.src_shape = src.shape
    ctx.save_for_backward(index, arg, src if reduce == "mul" else None, values if reduce == "mul" else None)
    ctx.set_materialize_grads(False)


def _along(index: Tensor, dim: int, shape) -> Tensor:
    """The op's index broadcast to ``shape`` (a 1-D index runs along ``dim``)."""
    if index.dim() == len(shape):
        return index
    view = [1] * len(shape)
    view[dim] = -1
    return index.view(view).expand(shape)


def _scatter_backward(ctx, grad_out, grad_arg):
    index, arg, src, values = ctx.saved_tensors
    if grad_out is None or not ctx.needs_input_grad[0]:
        return None, None, None, None, None, None
    dim, reduce = ctx.dim, ctx.reduce
    index = _along(index, dim, ctx.src_shape)
    if reduce in ("sum", "add"):
        grad = grad_out.gather(dim, index)
    elif reduce == "mean":
        ones = torch.ones_like(index, dtype=grad_out.dtype)
        count = torch.ops.pcops.scatter(ones, index, dim, ctx.dim_size, "sum", None)[0].clamp(min=1)
        grad = (grad_out / count).gather(dim, index)
    elif reduce == "mul":
        grad = (grad_out * values).gather(dim, index) / src
        grad = grad.masked_fill(torch.isnan(grad), 0)
    else:
        grad = _route_to_arg(grad_out, arg, dim, ctx.src_shape)
    return grad, None, None, None, None, None


torch.library.register_autograd("pcops::scatter", _scatter_backward, setup_context=_scatter_setup)


def _segment_csr_setup(ctx, inputs, output):
    src, indptr, reduce = inputs
    ctx.reduce = reduce
    ctx.src_shape = src.shape
    ctx.save_for_backward(indptr, output[1])
    ctx.set_materialize_grads(False)


def _segment_csr_backward(ctx, grad_out, grad_arg):
    indptr, arg = ctx.saved_tensors
    if grad_out is None or not ctx.needs_input_grad[0]:
        return None, None, None
    dim = indptr.dim() - 1
    size = ctx.src_shape[dim]
    if ctx.reduce in ("sum", "add"):
        grad = torch.ops.pcops.gather_csr(grad_out, indptr, size, None)
    elif ctx.reduce == "mean":
        count = (indptr.narrow(dim, 1, indptr.size(dim) - 1) - indptr.narrow(dim, 0, indptr.size(dim) - 1))
        count = _trailing(count.clamp(min=1).to(grad_out.dtype), grad_out.dim())
        grad = torch.ops.pcops.gather_csr(grad_out / count, indptr, size, None)
    else:
        grad = _route_to_arg(grad_out, arg, dim, ctx.src_shape)
    return grad, None, None


torch.library.register_autograd("pcops::segment_csr", _segment_csr_backward, setup_context=_segment_csr_setup)


def _segment_coo_setup(ctx, inputs, output):
    src, index, dim_size, reduce, out = inputs
    ctx.reduce = reduce
    ctx.dim_size = dim_size
    ctx.src_shape = src.shape
    ctx.save_for_backward(index, output[1])
    ctx.set_materialize_grads(False)


def _segment_coo_backward(ctx, grad_out, grad_arg):
    index, arg = ctx.saved_tensors
    if grad_out is None or not ctx.needs_input_grad[0]:
        return None, None, None, None, None
    dim = index.dim() - 1
    if ctx.reduce in ("sum", "add"):
        grad = torch.ops.pcops.gather_coo(grad_out, index)
    elif ctx.reduce == "mean":
        ones = torch.ones(index.shape, dtype=grad_out.dtype, device=grad_out.device)
        count = torch.ops.pcops.segment_coo(ones, index, ctx.dim_size, "sum", None)[0].clamp(min=1)
        count = _trailing(torch.ops.pcops.gather_coo(count, index), grad_out.dim())
        grad = torch.ops.pcops.gather_coo(grad_out, index) / count
    else:
        grad = _route_to_arg(grad_out, arg, dim, ctx.src_shape)
    return grad, None, None, None, None


torch.library.register_autograd("pcops::segment_coo", _segment_coo_backward, setup_context=_segment_coo_setup)


def _gather_csr_setup(ctx, inputs, output):
    src, indptr, size, out = inputs
    ctx.save_for_backward(indptr)
    ctx.set_materialize_grads(False)


def _gather_csr_backward(ctx, grad_out):
    (indptr,) = ctx.saved_tensors
    if grad_out is None or not ctx.needs_input_grad[0]:
        return None, None, None, None
    return torch.ops.pcops.segment_csr(grad_out, indptr, "sum")[0], None, None, None


torch.library.register_autograd("pcops::gather_csr", _gather_csr_backward, setup_context=_gather_csr_setup)


def _gather_coo_setup(ctx, inputs, output):
    src, index = inputs
    ctx.src_size = src.shape[index.dim() - 1]
    ctx.save_for_backward(index)
    ctx.set_materialize_grads(False)


def _gather_coo_backward(ctx, grad_out):
    (index,) = ctx.saved_tensors
    if grad_out is None or not ctx.needs_input_grad[0]:
        return None, None
    dim = index.dim() - 1
    full = _trailing(index, grad_out.dim()).expand(grad_out.shape)
    return torch.ops.pcops.scatter(grad_out, full, dim, ctx.src_size, "sum", None)[0], None


torch.library.register_autograd("pcops::gather_coo", _gather_coo_backward, setup_context=_gather_coo_setup)
