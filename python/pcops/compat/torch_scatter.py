"""Stand-in for ``torch_scatter`` 2.1.2 (rusty1s/pytorch_scatter) on pcops' reductions.

The public API keeps upstream's names and signatures (scatter_*, segment_*_csr / _coo,
gather_csr / gather_coo, the composites scatter_std / logsumexp / softmax / log_softmax) and its
semantics: index broadcasting, output sizes (``out``, then ``dim_size``, then ``index.max() + 1``),
``out=`` updated in place, empty slots 0 (mul: 1) with arg = ``src.size(dim)``, ties to the
smallest index, integer scatter_mean floored, segment means truncated. The work is done by
``torch.ops.pcops.{scatter, segment_csr, segment_coo, gather_csr, gather_coo}``, which reduce
every output element in ascending source order without atomics: results are bitwise
reproducible run to run and across thread counts (upstream's CUDA kernels use atomics), so the
path taken under ``torch.use_deterministic_algorithms(True)`` is the same one.

Differences from upstream, all deliberate (docs/ops/scatter.md): out-of-range indices raise
IndexError and an unsorted segment_coo index raises ValueError (upstream: undefined or an
assertion); a segment_csr segment whose values are all NaN / -inf gives 0 and arg
``src.size(dim)`` (upstream: ``lowest()`` and an undefined arg); float16 / bfloat16 are reduced
in float32 and rounded once.

Every function compiles with ``torch.jit.script`` (upstream's tests script them): the bodies
call the pcops operators directly, so scripted code also runs without Python.
"""

# No `from __future__ import annotations`: TorchScript reads the annotations as objects.

import functools
import sys
from pathlib import Path
from typing import Optional, Tuple

import torch
from torch import Tensor

from pcops._stand_in import stand_in_module
from pcops.ops.scatter import _call, _needs_grad, broadcast  # broadcast: torch_scatter.utils.broadcast

UPSTREAM_VERSION = "2.1.2"


def _pcops_version() -> str:
    module = sys.modules.get("pcops")
    return getattr(module, "__version__", "0")


__version__ = f"{UPSTREAM_VERSION}+pcops.{_pcops_version()}"

__all__ = [
    "scatter_sum", "scatter_add", "scatter_mul", "scatter_mean", "scatter_min", "scatter_max", "scatter",
    "segment_sum_csr", "segment_add_csr", "segment_mean_csr", "segment_min_csr", "segment_max_csr",
    "segment_csr", "gather_csr",
    "segment_sum_coo", "segment_add_coo", "segment_mean_coo", "segment_min_coo", "segment_max_coo",
    "segment_coo", "gather_coo",
    "scatter_std", "scatter_logsumexp", "scatter_softmax", "scatter_log_softmax",
    "torch_scatter", "__version__",
]

torch_scatter = "torch_scatter"  # upstream exports its package name under this attribute



def _size(index: Tensor, dim: int, out: Optional[Tensor], dim_size: Optional[int],
          empty: bool = False) -> int:
    if out is not None:
        return out.size(dim)
    if dim_size is not None:
        return dim_size
    if empty or index.numel() == 0:
        return 0
    return int(index.max()) + 1


# The ops are called through pcops.ops.scatter._call (below the autograd key without a gradient to
# record) except in TorchScript, which compiles only the plain calls (torch.jit.is_scripting()
# branches are resolved while scripting).


def _scatter_op(src: Tensor, index: Tensor, dim: int, out: Optional[Tensor], dim_size: Optional[int],
                reduce: str) -> Tuple[Tensor, Tensor]:
    if dim < 0:
        dim = src.dim() + dim
    if index.dim() == 1 and 0 <= dim < src.dim() and index.size(0) == src.size(dim):
        # A 1-D index along dim goes to the op as it is (the broadcast it stands for); the sizes
        # of an empty src are the broadcast's.
        size = _size(index, dim, out, dim_size, empty=src.numel() == 0)
    else:
        index = broadcast(index, src, dim)
        size = _size(index, dim, out, dim_size)
    if torch.jit.is_scripting():
        values, arg = torch.ops.pcops.scatter(src, index, dim, size, reduce, out)
    else:
        values, arg = _call(torch.ops.pcops.scatter, _needs_grad(src, out), src, index, dim, size, reduce, out)
    if out is not None:
        out.copy_(values)
        values = out
    return values, arg


# --------------------------------------------------------------------------------------------
# scatter


def scatter_sum(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None) -> Tensor:
    return _scatter_op(src, index, dim, out, dim_size, "sum")[0]


def scatter_add(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None) -> Tensor:
    return _scatter_op(src, index, dim, out, dim_size, "sum")[0]


def scatter_mul(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None) -> Tensor:
    return _scatter_op(src, index, dim, out, dim_size, "mul")[0]


def scatter_mean(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                 dim_size: Optional[int] = None) -> Tensor:
    return _scatter_op(src, index, dim, out, dim_size, "mean")[0]


def scatter_min(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    return _scatter_op(src, index, dim, out, dim_size, "min")


def scatter_max(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    return _scatter_op(src, index, dim, out, dim_size, "max")


def scatter(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
            dim_size: Optional[int] = None, reduce: str = "sum") -> Tensor:
    r"""Reduces all values of ``src`` into ``out`` at the indices of ``index`` along ``dim``
    (``reduce``: ``"sum"``, ``"add"``, ``"mul"``, ``"mean"``, ``"min"`` or ``"max"``)."""
    if reduce == "sum" or reduce == "add":
        return scatter_sum(src, index, dim, out, dim_size)
    if reduce == "mul":
        return scatter_mul(src, index, dim, out, dim_size)
    elif reduce == "mean":
        return scatter_mean(src, index, dim, out, dim_size)
    elif reduce == "min":
        return scatter_min(src, index, dim, out, dim_size)[0]
    elif reduce == "max":
        return scatter_max(src, index, dim, out, dim_size)[0]
    else:
        raise ValueError


# --------------------------------------------------------------------------------------------
# segment_csr / gather_csr


def _segment_csr_op(src: Tensor, indptr: Tensor, out: Optional[Tensor], reduce: str) -> Tuple[Tensor, Tensor]:
    if torch.jit.is_scripting():
        values, arg = torch.ops.pcops.segment_csr(src, indptr, reduce)
    else:
        values, arg = _call(torch.ops.pcops.segment_csr, _needs_grad(src), src, indptr, reduce)
    if out is not None:
        out.copy_(values)
        values = out
    return values, arg


def segment_sum_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tensor:
    return _segment_csr_op(src, indptr, out, "sum")[0]


def segment_add_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tensor:
    return _segment_csr_op(src, indptr, out, "sum")[0]


def segment_mean_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tensor:
    return _segment_csr_op(src, indptr, out, "mean")[0]


def segment_min_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    return _segment_csr_op(src, indptr, out, "min")


def segment_max_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    return _segment_csr_op(src, indptr, out, "max")


def segment_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None, reduce: str = "sum") -> Tensor:
    r"""Reduces ``src`` over the CSR segments of ``indptr`` along dim ``indptr.dim() - 1``."""
    if reduce == "sum" or reduce == "add":
        return segment_sum_csr(src, indptr, out)
    elif reduce == "mean":
        return segment_mean_csr(src, indptr, out)
    elif reduce == "min":
        return segment_min_csr(src, indptr, out)[0]
    elif reduce == "max":
        return segment_max_csr(src, indptr, out)[0]
    else:
        raise ValueError


def gather_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tensor:
    dim = indptr.dim() - 1
    if out is not None:
        size = out.size(dim)
    elif src.numel() == 0 or indptr.numel() == 0:
        size = 0
    else:
        size = int(indptr.reshape(-1)[-1])
    if torch.jit.is_scripting():
        values = torch.ops.pcops.gather_csr(src, indptr, size, out)
    else:
        values = _call(torch.ops.pcops.gather_csr, _needs_grad(src, out), src, indptr, size, out)
    if out is not None:
        out.copy_(values)
        values = out
    return values


# --------------------------------------------------------------------------------------------
# segment_coo / gather_coo


def _segment_coo_op(src: Tensor, index: Tensor, out: Optional[Tensor], dim_size: Optional[int],
                    reduce: str) -> Tuple[Tensor, Tensor]:
    size = _size(index, index.dim() - 1, out, dim_size)
    if torch.jit.is_scripting():
        values, arg = torch.ops.pcops.segment_coo(src, index, size, reduce, out)
    else:
        values, arg = _call(torch.ops.pcops.segment_coo, _needs_grad(src, out), src, index, size, reduce, out)
    if out is not None:
        out.copy_(values)
        values = out
    return values, arg


def segment_sum_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None,
                    dim_size: Optional[int] = None) -> Tensor:
    return _segment_coo_op(src, index, out, dim_size, "sum")[0]


def segment_add_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None,
                    dim_size: Optional[int] = None) -> Tensor:
    return _segment_coo_op(src, index, out, dim_size, "sum")[0]


def segment_mean_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None,
                     dim_size: Optional[int] = None) -> Tensor:
    return _segment_coo_op(src, index, out, dim_size, "mean")[0]


def segment_min_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None,
                    dim_size: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    return _segment_coo_op(src, index, out, dim_size, "min")


def segment_max_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None,
                    dim_size: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    return _segment_coo_op(src, index, out, dim_size, "max")


def segment_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None, dim_size: Optional[int] = None,
                reduce: str = "sum") -> Tensor:
    r"""Reduces ``src`` by a sorted ``index`` along dim ``index.dim() - 1``."""
    if reduce == "sum" or reduce == "add":
        return segment_sum_coo(src, index, out, dim_size)
    elif reduce == "mean":
        return segment_mean_coo(src, index, out, dim_size)
    elif reduce == "min":
        return segment_min_coo(src, index, out, dim_size)[0]
    elif reduce == "max":
        return segment_max_coo(src, index, out, dim_size)[0]
    else:
        raise ValueError


def gather_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None) -> Tensor:
    if torch.jit.is_scripting():
        values = torch.ops.pcops.gather_coo(src, index)
    else:
        values = _call(torch.ops.pcops.gather_coo, _needs_grad(src), src, index)
    if out is not None:
        out.copy_(values)
        values = out
    return values


# --------------------------------------------------------------------------------------------
# composites: built from the reductions above, as upstream builds them


def scatter_std(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None, unbiased: bool = True) -> Tensor:
    if out is not None:
        dim_size = out.size(dim)
    if dim < 0:
        dim = src.dim() + dim
    # Contributions per slot, counted along the index's own dim.
    count_dim = dim if index.dim() > dim else index.dim() - 1
    count = scatter_sum(torch.ones(index.size(), dtype=src.dtype, device=src.device), index, count_dim,
                        dim_size=dim_size)
    index = broadcast(index, src, dim)
    total = scatter_sum(src, index, dim, dim_size=dim_size)
    count = broadcast(count, total, dim).clamp(1)
    centred = src - total.div(count).gather(dim, index)
    out = scatter_sum(centred * centred, index, dim, out, dim_size)
    if unbiased:
        count = count.sub(1).clamp_(1)
    return out.div(count + 1e-6).sqrt()


def scatter_logsumexp(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                      dim_size: Optional[int] = None, eps: float = 1e-12) -> Tensor:
    if not torch.is_floating_point(src):
        raise ValueError("`scatter_logsumexp` can only be computed over tensors with floating point data types.")
    index = broadcast(index, src, dim)
    if out is not None:
        dim_size = out.size(dim)
    elif dim_size is None:
        dim_size = int(index.max()) + 1 if index.numel() > 0 else 0
    size = src.size()
    sizes = [size[i] for i in range(src.dim())]
    sizes[dim] = dim_size
    peak = torch.full(sizes, float("-inf"), dtype=src.dtype, device=src.device)
    scatter_max(src, index, dim, peak, dim_size)
    shifted = src - peak.gather(dim, index)
    shifted.masked_fill_(torch.isnan(shifted), float("-inf"))
    given: Optional[Tensor] = out
    if out is not None:
        out = out.sub_(peak).exp_()
    total = scatter_sum(shifted.exp_(), index, dim, out, dim_size)
    result = total.add_(eps).log_().add_(peak)
    if given is None:
        return result.nan_to_num_(neginf=0.0)
    bad = ~result.isfinite()
    result[bad] = given[bad]
    return result


def scatter_softmax(src: Tensor, index: Tensor, dim: int = -1, dim_size: Optional[int] = None) -> Tensor:
    if not torch.is_floating_point(src):
        raise ValueError("`scatter_softmax` can only be computed over tensors with floating point data types.")
    index = broadcast(index, src, dim)
    peak = scatter_max(src, index, dim, dim_size=dim_size)[0]
    shifted_exp = (src - peak.gather(dim, index)).exp_()
    total = scatter_sum(shifted_exp, index, dim, dim_size=dim_size)
    return shifted_exp.div(total.gather(dim, index))


def scatter_log_softmax(src: Tensor, index: Tensor, dim: int = -1, eps: float = 1e-12,
                        dim_size: Optional[int] = None) -> Tensor:
    if not torch.is_floating_point(src):
        raise ValueError("`scatter_log_softmax` can only be computed over tensors with floating point data types.")
    index = broadcast(index, src, dim)
    peak = scatter_max(src, index, dim, dim_size=dim_size)[0]
    shifted = src - peak.gather(dim, index)
    total = scatter_sum(shifted.exp(), index, dim, dim_size=dim_size)
    return shifted.sub_(total.add_(eps).log_().gather(dim, index))


# --------------------------------------------------------------------------------------------
# module construction (pcops.compat.install)

_SUBMODULES = {
    "scatter": ["scatter_sum", "scatter_add", "scatter_mul", "scatter_mean", "scatter_min", "scatter_max",
                "scatter"],
    "segment_csr": ["segment_sum_csr", "segment_add_csr", "segment_mean_csr", "segment_min_csr",
                    "segment_max_csr", "segment_csr", "gather_csr"],
    "segment_coo": ["segment_sum_coo", "segment_add_coo", "segment_mean_coo", "segment_min_coo",
                    "segment_max_coo", "segment_coo", "gather_coo"],
    "composite": ["scatter_std", "scatter_logsumexp", "scatter_softmax", "scatter_log_softmax"],
    "utils": ["broadcast"],
}


_module = functools.partial(stand_in_module, origin=__file__)  # module objects of this stand-in


_TESTING_SOURCE = '''
from typing import Any

import torch

reductions = ["sum", "add", "mean", "min", "max"]

dtypes = [torch.half, torch.bfloat16, torch.float, torch.double, torch.int, torch.long]
grad_dtypes = [torch.float, torch.double]

devices = [torch.device("cpu")]


def tensor(x: Any, dtype: torch.dtype, device: torch.device):
    return None if x is None else torch.tensor(x, device=device).to(dtype)
'''


def build_modules(name: str = "torch_scatter") -> dict:
    """``{dotted name: module}`` for the package and its submodules, package first."""
    this = sys.modules[__name__]
    package = _module(name, __doc__, package=True)
    package.__package__ = name
    modules = {name: package}
    for sub, names in _SUBMODULES.items():
        module = _module(f"{name}.{sub}", f"torch_scatter.{sub} (pcops stand-in)")
        for attr in names:
            setattr(module, attr, getattr(this, attr))
        modules[module.__name__] = module
    testing = _module(f"{name}.testing", "torch_scatter.testing (pcops stand-in)")
    exec(compile(_TESTING_SOURCE, str(Path(__file__)) + ":testing", "exec"), testing.__dict__)
    modules[testing.__name__] = testing
    for sub in ("composite", "utils", "testing"):
        setattr(package, sub, modules[f"{name}.{sub}"])
    for attr in __all__:
        setattr(package, attr, getattr(this, attr))
    package.broadcast = broadcast
    package.__all__ = list(__all__)
    return modules
