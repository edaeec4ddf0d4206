"""Loads the compiled operator library (_C.so) that registers torch.ops.pcops.*."""

from __future__ import annotations

import os
from pathlib import Path

import torch

_LOADED = False


def load() -> None:
    global _LOADED
    if _LOADED:
        return
    here = Path(__file__).resolve().parent
    candidates = [here / "_C.so"]
    env = os.environ.get("PCOPS_LIBRARY")
    if env:
        candidates.insert(0, Path(env))
    for path in candidates:
        if path.is_file():
            torch.ops.load_library(str(path))
            _LOADED = True
            return
    raise ImportError(
        "pcops: the compiled operator library _C.so was not found next to the package; "
        "install pcops with `pip install .` (or `make build`)"
    )
