"""Module objects for the stand-in packages (pcops.compat, pcops.pyg, pcops.pytorch3d)."""

from __future__ import annotations

import importlib.machinery
from types import ModuleType


def stand_in_module(name: str, doc: str, package: bool = False, *, origin: str) -> ModuleType:
    """A module ``name`` with docstring ``doc`` whose file and spec origin are ``origin`` (the pcops
    source that implements it). A package has no directory (an empty ``__path__``: only the
    submodules that its stand-in registers exist) and is its own ``__package__``; a submodule's
    ``__package__`` is its parent's name."""
    module = ModuleType(name, doc)
    module.__file__ = origin
    module.__spec__ = importlib.machinery.ModuleSpec(name, None, origin=origin, is_package=package)
    if package:
        module.__path__ = []
        module.__spec__.submodule_search_locations = []
        module.__package__ = name
    else:
        module.__package__ = name.rpartition(".")[0]
    return module
