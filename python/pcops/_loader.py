"""Loads the compiled operator library (_C.so) that registers torch.ops.pcops.*.

The library next to the package is used, or the one named by the PCOPS_LIBRARY environment
variable (development builds); a PCOPS_LIBRARY that names no file is an error rather than a
silent fallback to another build.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

_LOADED: Path | None = None


def library_path() -> Path:
    env = os.environ.get("PCOPS_LIBRARY")
    if env:
        path = Path(env)
        if not path.is_file():
            raise ImportError(f"pcops: PCOPS_LIBRARY={env!r} does not name a file")
        return path
    path = Path(__file__).resolve().parent / "_C.so"
    if not path.is_file():
        raise ImportError(
            "pcops: the compiled operator library _C.so was not found next to the package; "
            "install pcops with `pip install .` (or `make build`)"
        )
    return path


def load() -> Path:
    """Loads the operator library once and returns its path."""
    global _LOADED
    if _LOADED is None:
        path = library_path()
        torch.ops.load_library(str(path))
        _LOADED = path
    return _LOADED
