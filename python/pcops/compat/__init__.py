"""Drop-in stand-ins for CUDA-only point-cloud extensions, registered under their upstream names.

``pcops.compat.install()`` puts modules such as ``torch_cluster`` into ``sys.modules`` so that
unmodified code (``import torch_cluster``, ``from torch_cluster.knn import knn``,
``torch.ops.torch_cluster.random_walk``) runs on pcops. A stand-in only translates arguments and
results; the work is done by pcops' own operators.

Rules:

- A stand-in is installed only where no real package of that name can be imported: an installed
  distribution (a finder on ``sys.meta_path`` returns a spec for it) or a module of that name
  already in ``sys.modules`` is left alone. A real package that is present but broken (an ABI
  mismatch, say) counts as present too: pass ``force=True`` to replace it anyway, including
  copies already imported (they come back on ``uninstall()``).
- ``install()`` is idempotent: a second call returns the modules of the first.
- ``uninstall()`` removes what ``install()`` put in place and restores what it replaced; it is
  meant for tests and notebooks.

Every stand-in is one entry of :data:`REGISTRY`: its upstream top-level name and the pcops module
that implements it. That module provides ``build_modules() -> dict[str, ModuleType]`` (the
package module under the upstream name first, then its submodules, each keyed by its full
dotted name) and may provide ``register_ops() -> list`` for upstream operators that third-party
code calls through ``torch.ops`` directly (it returns the ``torch.library.Library`` objects, or
other handles with a ``_destroy()`` method, that ``uninstall()`` destroys) and
``present() -> bool`` for signs of a real package beyond an importable module (a loaded operator
library, say). ``install()`` takes one keyword per entry (``torch_cluster=True``); an entry is
selected by default unless its ``default`` is False (``pyg_lib``, which changes what
torch_geometric does, is opt-in: ``install(pyg_lib=True)``, the same as ``pcops.pyg.register()``);
adding a stand-in is adding an entry.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass, field
from types import ModuleType

__all__ = ["REGISTRY", "StandIn", "install", "installed", "is_stand_in", "uninstall"]

# Marks every module object a stand-in created, so a module can tell ours from a real package.
_MARKER = "__pcops_stand_in__"


@dataclass(frozen=True)
class StandIn:
    """One upstream package that pcops can stand in for."""

    name: str  # upstream top-level module name, e.g. "torch_cluster"
    impl: str  # pcops module with build_modules() (and optionally register_ops())
    summary: str = ""
    default: bool = True  # selected by install() unless its keyword says otherwise


REGISTRY: dict[str, StandIn] = {
    s.name: s
    for s in (
        StandIn("torch_cluster", "pcops.compat.torch_cluster",
                "torch_cluster 1.6.3 (rusty1s/pytorch_cluster)"),
        StandIn("pyg_lib", "pcops.pyg",
                "pyg-lib point operators torch.ops.pyg.{fps,knn,radius,nearest,grid_cluster} "
                "(for torch_geometric 2.8)", default=False),
        StandIn("pointnet2_ops", "pcops.compat.pointnet2_ops",
                "pointnet2_ops 3.0.0 (erikwijmans/Pointnet2_PyTorch): PointNet++ ops and modules"),
        StandIn("knn_cuda", "pcops.compat.knn_cuda", "knn_cuda 0.2 (unlimblue/KNN_CUDA): KNN, knn"),
        StandIn("pointops", "pcops.compat.pointops",
                "Pointcept pointops 1.0 (libs/pointops): offset-batched knn / ball query / FPS / "
                "grouping / interpolation"),
        StandIn("pytorch3d", "pcops.pytorch3d",
                "PyTorch3D 0.7.9 pytorch3d.ops: knn_points, knn_gather, ball_query, "
                "sample_farthest_points; pytorch3d.loss: chamfer_distance", default=False),
        StandIn("torch_scatter", "pcops.compat.torch_scatter",
                "torch_scatter 2.1.2 (rusty1s/pytorch_scatter): deterministic scatter / segment / "
                "gather reductions and composites (changes torch_geometric's code paths: opt-in)",
                default=False),
    )
}


@dataclass
class _Installed:
    modules: dict[str, ModuleType]
    replaced: dict[str, ModuleType] = field(default_factory=dict)  # what force=True displaced
    libraries: list = field(default_factory=list)  # Library objects / handles with _destroy()


_INSTALLED: dict[str, _Installed] = {}


def is_stand_in(module: object) -> bool:
    """True for a module object created by a pcops stand-in."""
    return isinstance(module, ModuleType) and bool(getattr(module, _MARKER, False))


def _real_package_present(name: str) -> bool:
    """A module ``name`` that is not ours is imported, or a finder can import one."""
    current = sys.modules.get(name)
    if current is not None:
        return not is_stand_in(current)
    for finder in sys.meta_path:
        find_spec = getattr(finder, "find_spec", None)
        if find_spec is None:
            continue
        try:
            spec = find_spec(name, None)
        except (ImportError, ValueError, AttributeError):
            continue
        if spec is not None:
            return True
    return False


def _select(selection: dict[str, bool]) -> list[StandIn]:
    unknown = sorted(set(selection) - set(REGISTRY))
    if unknown:
        raise TypeError(
            f"install(): unknown stand-in(s) {', '.join(unknown)}; known: {', '.join(sorted(REGISTRY))}"
        )
    return [s for name, s in REGISTRY.items() if selection.get(name, s.default)]


def install(force: bool = False, torch_cluster: bool = True, **selection: bool) -> dict[str, ModuleType]:
    """Registers the selected stand-ins under their upstream module names.

    Args:
        force: install even where a real package of the same name is importable or imported
            (its modules are set aside and restored by :func:`uninstall`).
        torch_cluster: stand in for ``torch_cluster`` (and its submodules, and the
            ``torch.ops.torch_cluster`` operators that callers use directly).
        **selection: one boolean per further :data:`REGISTRY` entry (``pointnet2_ops``,
            ``knn_cuda``, ``pyg_lib``; default: the entry's ``default``, True except for
            ``pyg_lib``).

    Returns:
        ``{upstream name: module}`` for every selected stand-in now in place, whether this call
        or an earlier one put it there. Names left to a real package are absent.

    Raises:
        TypeError: a keyword that names no registry entry.
    """
    selection = dict(selection, torch_cluster=torch_cluster)
    result: dict[str, ModuleType] = {}
    for stand_in in _select(selection):
        name = stand_in.name
        done = _INSTALLED.get(name)
        if done is not None and sys.modules.get(name) is done.modules[name]:
            result[name] = done.modules[name]
            continue
        if done is not None:  # someone replaced or removed our module: start again cleanly
            _remove(name)
        if not force and (_real_package_present(name) or _impl_reports_real(stand_in)):
            continue
        result[name] = _install_one(stand_in)
    return result


def _impl_reports_real(stand_in: StandIn) -> bool:
    present = getattr(importlib.import_module(stand_in.impl), "present", None)
    return bool(present()) if present is not None else False


def _install_one(stand_in: StandIn) -> ModuleType:
    impl = importlib.import_module(stand_in.impl)
    modules: dict[str, ModuleType] = impl.build_modules()
    name = stand_in.name
    assert next(iter(modules)) == name, "build_modules() must list the package module first"
    for module in modules.values():
        setattr(module, _MARKER, True)
    prefix = name + "."
    replaced = {k: m for k, m in sys.modules.items() if k == name or k.startswith(prefix)}
    for key in replaced:
        del sys.modules[key]
    sys.modules.update(modules)
    record = _Installed(modules=modules, replaced=replaced)
    _INSTALLED[name] = record
    register_ops = getattr(impl, "register_ops", None)
    if register_ops is not None:
        record.libraries = list(register_ops())
    importlib.invalidate_caches()
    return modules[name]


def _remove(name: str) -> None:
    record = _INSTALLED.pop(name)
    for key, module in record.modules.items():
        if sys.modules.get(key) is module:
            del sys.modules[key]
    sys.modules.update(record.replaced)
    for lib in reversed(record.libraries):
        lib._destroy()  # removes the schema and kernels this Library registered


def uninstall(*names: str) -> list[str]:
    """Removes the named stand-ins (all installed ones by default); returns the names removed."""
    targets = list(names) if names else list(_INSTALLED)
    removed = []
    for name in targets:
        if name in _INSTALLED:
            _remove(name)
            removed.append(name)
    return removed


def installed() -> list[str]:
    """Names of the stand-ins currently installed."""
    return list(_INSTALLED)
