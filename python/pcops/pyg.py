"""``torch.ops.pyg`` point operators for torch_geometric 2.8, computed by pcops (a pyg-lib stand-in).

torch_geometric 2.8 dropped torch_cluster: ``torch_geometric.nn.pool.fps / knn / knn_graph /
radius / radius_graph / nearest / voxel_grid``, ``DynamicEdgeConv``, ``GravNetConv``, ``XConv``
and ``knn_interpolate`` call ``torch.ops.pyg.{fps, knn, radius, nearest, grid_cluster}`` (pyg-lib
>= 0.6.0) directly, after checking the flags ``torch_geometric.typing.WITH_FPS / WITH_KNN /
WITH_RADIUS / WITH_NEAREST / WITH_GRID_CLUSTER``. :func:`register` makes those calls run on pcops:

- it defines the five ``pyg::`` schemas exactly as pyg-lib (0.6.0 to 0.9.0 dev) does, with CPU
  and CUDA kernels that forward to ``torch.ops.pcops.{furthest_point_sample_ragged, knn_ragged, radius,
  nearest, grid_cluster}``, fake (meta) kernels for torch.compile / FakeTensor tracing, and
  autograd formulas that mark the index outputs non-differentiable;
- it puts a minimal ``pyg_lib`` package into ``sys.modules`` (``pyg_lib.ops`` with the five
  wrappers in pyg-lib's positional order, ``pyg_lib.sampler.neighbor_sample`` as a stub, so that
  ``torch_geometric.typing``'s detection block does not fail, and ``pyg_lib.testing.withCUDA``);
- it sets the five flags of ``torch_geometric.typing`` if torch_geometric is already imported,
  and otherwise corrects the flags when torch_geometric is imported later: the stand-in is a
  point-ops-only pyg-lib, so ``WITH_PYG_LIB`` (which switches neighbour sampling, ``Node2Vec``,
  ``dropout_path`` and ``HeteroLinear`` to pyg-lib kernels that the stand-in does not have) stays
  False, and so do ``WITH_GRACLUS``, ``WITH_SOFTMAX``, ``WITH_INDEX_SORT``, ``WITH_METIS`` etc.

CUDA: the same Python kernels are registered for the CUDA dispatch key; they keep every tensor
on its device and forward to the CUDA kernels of ``torch.ops.pcops.*`` (only the CSR offsets are
read on the host, by the binding), bitwise equal to the CPU results.

Deliberate differences from pyg-lib's CPU kernels (pcops' contracts, docs/ops/flat.md):

- float32 / float16 / bfloat16 coordinates (float64 and integer coordinates raise TypeError);
  ``grid_cluster`` takes every real dtype;
- exact, deterministic results: kNN neighbours in (squared distance, index) order, radius keeps
  the first ``max_num_neighbors`` matches in reference index order (pyg-lib CPU: kd-tree visit
  order), nearest ties to the lowest index;
- ``fps``: random starts drawn from torch's default generator (``torch.manual_seed`` makes them
  reproducible; pyg-lib CPU uses C ``rand()``), empty segments get no samples, a negative or
  non-finite ratio is a ValueError; the sample count is ``ceil(float32(deg) * ratio)`` as in
  pyg-lib;
- inputs are made contiguous (pyg-lib CPU silently misreads non-contiguous tensors), int32
  offsets are accepted, 1-D inputs are ``[N, 1]``;
- offsets are checked (ValueError): a missing ``ptr`` beside a given one means one segment
  holding every row, and offsets of different lengths are padded with empty trailing segments
  (PyG derives them separately from ``batch_x`` and ``batch_y``; pyg-lib CPU reads past the end);
- ``knn(cosine=True)`` works on CPU (pyg-lib: CUDA only).

The registration is recorded by :mod:`pcops.compat` as its ``pyg_lib`` stand-in, so
``pcops.compat.install(pyg_lib=True)`` is the same as :func:`register` and
``pcops.compat.uninstall("pyg_lib")`` (or :func:`unregister`) undoes it.
"""

from __future__ import annotations

import functools
import importlib.abc
import inspect
import sys
from types import ModuleType
from typing import Optional

import torch
from torch import Tensor

from pcops._stand_in import stand_in_module

__all__ = ["OPS", "SCHEMAS", "register", "unregister", "is_registered"]

#: The pyg-lib version whose point-op schemas this stand-in provides (same since 0.6.0).
UPSTREAM_VERSION = "0.8.0"

#: ``pyg::`` schemas, exactly as pyg-lib defines them (PEERS 2.1).
SCHEMAS = {
    "fps": "fps(Tensor src, Tensor ptr, float ratio=0.5, bool random_start=True) -> Tensor",
    "knn": "knn(Tensor x, Tensor y, Tensor? ptr_x=None, Tensor? ptr_y=None, int k=1, bool cosine=False, "
    "int num_workers=1) -> Tensor",
    "radius": "radius(Tensor x, Tensor y, Tensor? ptr_x=None, Tensor? ptr_y=None, float r=1.0, "
    "int max_num_neighbors=32, int num_workers=1, bool ignore_same_index=False) -> Tensor",
    "nearest": "nearest(Tensor x, Tensor y, Tensor? ptr_x=None, Tensor? ptr_y=None) -> Tensor",
    "grid_cluster": "grid_cluster(Tensor pos, Tensor size, Tensor? start=None, Tensor? end=None) -> Tensor",
}
OPS = tuple(SCHEMAS)

#: ``torch_geometric.typing`` flags that the stand-in turns on, and those it keeps off.
FLAGS_ON = ("WITH_FPS", "WITH_KNN", "WITH_RADIUS", "WITH_NEAREST", "WITH_GRID_CLUSTER")
FLAGS_OFF = ("WITH_PYG_LIB",)

_TYPING = "torch_geometric.typing"


def _pcops_version() -> str:
    return getattr(sys.modules.get("pcops"), "__version__", "0")


# --------------------------------------------------------------------------------------------
# Kernels (forwarding to torch.ops.pcops; registered for CPU and CUDA)


def _points(t: Tensor) -> Tensor:
    return (t.view(-1, 1) if t.dim() == 1 else t).contiguous()


def _segment_ptrs(x: Tensor, y: Tensor, ptr_x: Optional[Tensor], ptr_y: Optional[Tensor]):
    """Both offset vectors as int64, a missing one as a single segment, the shorter one padded
    with empty trailing segments."""

    def one(ptr, n):
        if ptr is None:
            return torch.tensor([0, n], dtype=torch.int64, device=x.device)
        return ptr.to(device=x.device, dtype=torch.int64)

    px, py = one(ptr_x, x.shape[0]), one(ptr_y, y.shape[0])
    if px.dim() == 1 and py.dim() == 1 and px.numel() != py.numel() and px.numel() and py.numel():
        if px.numel() < py.numel():
            px = torch.cat([px, px[-1:].expand(py.numel() - px.numel())])
        else:
            py = torch.cat([py, py[-1:].expand(px.numel() - py.numel())])
    return px, py


def _fps_kernel(src: Tensor, ptr: Tensor, ratio: float = 0.5, random_start: bool = True) -> Tensor:
    if src.dim() == 0:
        raise ValueError("src: expected at least 1-D, got a 0-D tensor")
    pts = src.reshape(src.shape[0], -1).contiguous()
    if not (ratio >= 0.0 and ratio != float("inf")):
        raise ValueError(f"ratio: expected a finite ratio >= 0, got {ratio}")
    ptr = ptr.to(device=src.device, dtype=torch.int64)
    if ptr.dim() != 1 or ptr.numel() < 1:
        raise ValueError(f"ptr: expected a 1-D tensor of B + 1 >= 1 offsets, got shape {tuple(ptr.shape)}")
    deg = ptr[1:] - ptr[:-1]
    counts = torch.ceil(deg.to(torch.float32) * ratio).to(torch.int64)  # pyg-lib: float32 count
    if random_start:  # the same draw as pcops.flat.fps (and so the torch_cluster stand-in)
        draw = torch.randint(0, 2**62, (deg.numel(),), dtype=torch.int64)
        starts = draw.to(deg.device) % deg.clamp(min=1)
    else:
        starts = torch.zeros_like(deg)
    return torch.ops.pcops.furthest_point_sample_ragged(pts, ptr, counts, starts)


def _knn_kernel(x, y, ptr_x=None, ptr_y=None, k: int = 1, cosine: bool = False, num_workers: int = 1):
    x, y = _points(x), _points(y)
    if x.numel() == 0 or y.numel() == 0:
        return torch.empty(2, 0, dtype=torch.int64, device=x.device)
    px, py = _segment_ptrs(x, y, ptr_x, ptr_y)
    return torch.ops.pcops.knn_ragged(x, y, px, py, k, cosine)


def _radius_kernel(x, y, ptr_x=None, ptr_y=None, r: float = 1.0, max_num_neighbors: int = 32,
                num_workers: int = 1, ignore_same_index: bool = False):
    x, y = _points(x), _points(y)
    if x.numel() == 0 or y.numel() == 0:
        return torch.empty(2, 0, dtype=torch.int64, device=x.device)
    px, py = _segment_ptrs(x, y, ptr_x, ptr_y)
    return torch.ops.pcops.radius(x, y, px, py, r, max_num_neighbors, ignore_same_index)


def _nearest_kernel(x, y, ptr_x=None, ptr_y=None):
    x, y = _points(x), _points(y)
    px, py = _segment_ptrs(x, y, ptr_x, ptr_y)
    return torch.ops.pcops.nearest(x, y, px, py)


def _grid_cluster_kernel(pos, size, start=None, end=None):
    return torch.ops.pcops.grid_cluster(pos, size, start, end)


_KERNELS = {
    "fps": _fps_kernel,
    "knn": _knn_kernel,
    "radius": _radius_kernel,
    "nearest": _nearest_kernel,
    "grid_cluster": _grid_cluster_kernel,
}


# --------------------------------------------------------------------------------------------
# Fake (meta) kernels: fps, knn and radius have data-dependent sizes


def _dynamic_rows():
    return torch.library.get_ctx().new_dynamic_size()


def _fps_fake(src, ptr, ratio=0.5, random_start=True):
    torch._check_value(src.dim() >= 1, lambda: "src: expected at least 1-D, got a 0-D tensor")
    return src.new_empty((_dynamic_rows(),), dtype=torch.int64)


def _edges_fake(x, y, *args, **kwargs):
    return x.new_empty((2, _dynamic_rows()), dtype=torch.int64)


def _nearest_fake(x, y, ptr_x=None, ptr_y=None):
    return x.new_empty((x.shape[0],), dtype=torch.int64)


def _grid_cluster_fake(pos, size, start=None, end=None):
    torch._check_value(pos.dim() >= 1, lambda: "pos: expected at least 1-D, got a 0-D tensor")
    return pos.new_empty((pos.shape[0],), dtype=torch.int64)


_FAKES = {
    "fps": _fps_fake,
    "knn": _edges_fake,
    "radius": _edges_fake,
    "nearest": _nearest_fake,
    "grid_cluster": _grid_cluster_fake,
}


def _no_grad_setup(ctx, inputs, output):
    ctx.mark_non_differentiable(output)


def _none_backward(n: int):
    def backward(ctx, grad):
        return (None,) * n

    return backward


# --------------------------------------------------------------------------------------------
# pyg_lib module layout (pcops.compat stand-in protocol: build_modules / register_ops / present)

_OPS_SOURCE = '''\
"""pyg_lib.ops (pcops stand-in): the point operators of pyg-lib, computed by pcops."""
from typing import Optional

import torch
from torch import Tensor


def fps(src: Tensor, ptr: Tensor, ratio: float = 0.5, random_start: bool = True) -> Tensor:
    """Furthest point sampling per segment ``ptr``: int64 global indices in selection order."""
    return torch.ops.pyg.fps(src, ptr, ratio, random_start)


def knn(x: Tensor, y: Tensor, k: int = 1, ptr_x: Optional[Tensor] = None,
        ptr_y: Optional[Tensor] = None, cosine: bool = False, num_workers: int = 1) -> Tensor:
    """For each row of y its k nearest rows of x: [2, E] (row 0 = y index, row 1 = x index)."""
    return torch.ops.pyg.knn(x, y, ptr_x, ptr_y, k, cosine, num_workers)


def radius(x: Tensor, y: Tensor, r: float = 1.0, ptr_x: Optional[Tensor] = None,
           ptr_y: Optional[Tensor] = None, max_num_neighbors: int = 32, num_workers: int = 1,
           ignore_same_index: bool = False) -> Tensor:
    """For each row of y the rows of x closer than r (strict): [2, E] as knn."""
    return torch.ops.pyg.radius(x, y, ptr_x, ptr_y, r, max_num_neighbors, num_workers,
                                ignore_same_index)


def nearest(x: Tensor, y: Tensor, ptr_x: Optional[Tensor] = None,
            ptr_y: Optional[Tensor] = None) -> Tensor:
    """For each row of x the global index of its nearest row of y in the same segment."""
    return torch.ops.pyg.nearest(x, y, ptr_x, ptr_y)


def grid_cluster(pos: Tensor, size: Tensor, start: Optional[Tensor] = None,
                 end: Optional[Tensor] = None) -> Tensor:
    """Voxel-grid cluster id of every row of pos."""
    return torch.ops.pyg.grid_cluster(pos, size, start, end)


__all__ = ["fps", "knn", "radius", "nearest", "grid_cluster"]
'''

_SAMPLER_SOURCE = '''\
"""pyg_lib.sampler (pcops stand-in): not provided; present so that torch_geometric.typing's
pyg-lib detection succeeds. The stand-in keeps torch_geometric.typing.WITH_PYG_LIB False, so
torch_geometric never calls it."""


def neighbor_sample(rowptr, col, seed, num_neighbors, *args, **kwargs):
    raise NotImplementedError("pyg_lib.sampler.neighbor_sample is not provided by the pcops "
                              "stand-in (it covers the point operators only)")


def hetero_neighbor_sample(*args, **kwargs):
    raise NotImplementedError("pyg_lib.sampler.hetero_neighbor_sample is not provided by the "
                              "pcops stand-in (it covers the point operators only)")
'''

_TESTING_SOURCE = '''\
"""pyg_lib.testing (pcops stand-in): withCUDA as upstream's, over the devices pcops supports."""
import pytest
import torch

devices = [torch.device("cpu")] + ([torch.device("cuda:0")] if torch.cuda.is_available() else [])


def withCUDA(func):
    return pytest.mark.parametrize("device", devices)(func)
'''


_module = functools.partial(stand_in_module, origin=__file__)  # module objects of this stand-in


def build_modules(name: str = "pyg_lib") -> dict:
    """``{dotted name: module}`` of the ``pyg_lib`` stand-in, package first (no ``partition``
    attribute: its presence would turn on torch_geometric's METIS path)."""
    package = _module(name, "pyg_lib (pcops stand-in): the point operators of pyg-lib on pcops.",
                      package=True)
    package.__version__ = f"{UPSTREAM_VERSION}+pcops.{_pcops_version()}"
    modules = {name: package}
    for sub, source in (("ops", _OPS_SOURCE), ("sampler", _SAMPLER_SOURCE), ("testing", _TESTING_SOURCE)):
        module = _module(f"{name}.{sub}", f"{name}.{sub} (pcops stand-in)")
        if sub == "testing":  # needs pytest, which a user process may not have: load on first use
            module.__getattr__ = _lazy_testing(module, source)
        else:
            exec(compile(source, f"{__file__}:{sub}", "exec"), module.__dict__)
        setattr(package, sub, module)
        modules[module.__name__] = module
    package.__all__ = ["ops", "sampler"]
    return modules


def _lazy_testing(module: ModuleType, source: str):
    def __getattr__(attr: str):
        if "withCUDA" not in module.__dict__:
            exec(compile(source, f"{__file__}:testing", "exec"), module.__dict__)
            if attr in module.__dict__:
                return module.__dict__[attr]
        raise AttributeError(f"module {module.__name__!r} has no attribute {attr!r}")

    return __getattr__


def _has_schema(name: str) -> bool:
    try:
        torch._C._dispatch_find_schema_or_throw(f"pyg::{name}", "")
        return True
    except RuntimeError:
        return False


def present() -> bool:
    """A ``pyg::`` point operator defined by someone else (a loaded pyg-lib library) counts as
    a real pyg-lib being present, besides an importable ``pyg_lib`` package."""
    return any(_has_schema(name) for name in OPS)


class _TypingFlags:
    """Sets the torch_geometric.typing flags now (if it is imported) or when it is imported, and
    restores them on ``_destroy()`` (the pcops.compat record calls it on uninstall)."""

    def __init__(self) -> None:
        self.saved: dict = {}
        self.module: Optional[ModuleType] = None
        self.finder: Optional[_TypingFinder] = None
        typing_mod = sys.modules.get(_TYPING)
        if typing_mod is not None:
            self.apply(typing_mod, imported_after=False)
        else:
            self.finder = _TypingFinder(self)
            sys.meta_path.insert(0, self.finder)

    def apply(self, typing_mod: ModuleType, imported_after: bool) -> None:
        self.module = typing_mod
        names = FLAGS_ON + (FLAGS_OFF if imported_after else ())
        self.saved = {n: getattr(typing_mod, n) for n in names if hasattr(typing_mod, n)}
        for n in FLAGS_ON:
            setattr(typing_mod, n, True)
        if imported_after:  # the detection block saw our pyg_lib: keep the full-pyg-lib paths off
            for n in FLAGS_OFF:
                setattr(typing_mod, n, False)

    def _destroy(self) -> None:
        if self.finder is not None and self.finder in sys.meta_path:
            sys.meta_path.remove(self.finder)
        self.finder = None
        if self.module is not None and sys.modules.get(_TYPING) is self.module:
            if "WITH_PYG_LIB" in self.saved:  # imported while we were installed: as without pyg-lib
                for n in FLAGS_ON + FLAGS_OFF:
                    setattr(self.module, n, False)
            else:
                for n, v in self.saved.items():
                    setattr(self.module, n, v)
        self.module = None


class _TypingFinder(importlib.abc.MetaPathFinder):
    """Wraps the loader of torch_geometric.typing so the flags are corrected right after it runs
    (before any other torch_geometric module reads them)."""

    def __init__(self, flags: _TypingFlags) -> None:
        self.flags = flags

    def find_spec(self, fullname, path, target=None):
        if fullname != _TYPING:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _PatchingLoader(spec.loader, self.flags)
        return spec


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader, flags: _TypingFlags) -> None:
        self.loader = loader
        self.flags = flags

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        self.flags.apply(module, imported_after=True)
        finder = self.flags.finder
        if finder is not None and finder in sys.meta_path:  # one-shot
            sys.meta_path.remove(finder)
        self.flags.finder = None

    def __getattr__(self, attr):  # get_source, get_filename, ... of the real loader
        return getattr(self.loader, attr)


_DISPATCH_KEYS = ("CPU", "CUDA")


def register_ops() -> list:
    """Defines the five ``pyg::`` operators (or, where a schema already exists, i.e. under
    ``force=True`` beside a loaded pyg-lib, overrides its CPU and CUDA kernels) and sets the
    torch_geometric.typing flags. Returns the handles whose ``_destroy()`` undoes it all."""
    fragment = torch.library.Library("pyg", "FRAGMENT")
    handles: list = [fragment]
    override = None
    for name, schema in SCHEMAS.items():
        if _has_schema(name):
            if override is None:
                override = torch.library.Library("pyg", "IMPL")
                handles.append(override)
            for key in _DISPATCH_KEYS:
                override.impl(name, _KERNELS[name], key, allow_override=True)
            continue
        fragment.define(schema)
        for key in _DISPATCH_KEYS:
            fragment.impl(name, _KERNELS[name], key)
        torch.library.register_fake(f"pyg::{name}", _FAKES[name], lib=fragment)
        n_args = len(inspect.signature(_KERNELS[name]).parameters)
        torch.library.register_autograd(
            f"pyg::{name}", _none_backward(n_args), setup_context=_no_grad_setup, lib=fragment
        )
    handles.append(_TypingFlags())
    return handles


# --------------------------------------------------------------------------------------------
# Public entry points


def register(force: bool = False) -> bool:
    """Provides ``torch.ops.pyg.{fps, knn, radius, nearest, grid_cluster}`` (CPU and CUDA) on pcops and
    makes torch_geometric 2.8 detect them. Idempotent.

    Args:
        force: replace a real pyg-lib (an importable or imported ``pyg_lib`` package, or
            ``pyg::`` point operators already defined): our ``pyg_lib`` module shadows it and
            the CPU and CUDA kernels of existing ``pyg::`` operators are overridden (PyTorch warns).

    Returns:
        True if the pcops stand-in is in place, False if a real pyg-lib was left alone.
    """
    from pcops import compat

    return "pyg_lib" in compat.install(force=force, torch_cluster=False, pyg_lib=True)


def unregister() -> bool:
    """Undoes :func:`register` (operators, ``pyg_lib`` modules, torch_geometric flags); returns
    whether anything was registered. Meant for tests and notebooks; :func:`register` works
    again afterwards."""
    from pcops import compat

    return compat.uninstall("pyg_lib") == ["pyg_lib"]


def is_registered() -> bool:
    """True while the pcops stand-in provides the ``pyg::`` point operators."""
    from pcops import compat

    return "pyg_lib" in compat.installed()
