"""pytest suite of the CUDA registrations (run on a GPU machine: tests/cuda/run_gpu.sh).

Every test compares CUDA results with the CPU backend bit for bit. Without a CUDA device the
whole session fails at collection: this suite is never silently skipped.
"""

from __future__ import annotations

import contextlib
import importlib.util
from pathlib import Path

import pytest
import torch

import pcops  # noqa: F401  (loads the operator library)

# The CPU suite's cloud generators, loaded under their own name (this file is also "conftest").
_spec = importlib.util.spec_from_file_location(
    "pcops_cpu_conftest", Path(__file__).resolve().parents[2] / "python" / "conftest.py")
_cpu = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_cpu)
CLOUD_KINDS, load_real_cloud, make_cloud = _cpu.CLOUD_KINDS, _cpu.load_real_cloud, _cpu.make_cloud
isolated_modules = _cpu.isolated_modules  # the stand-in tests' module isolation

if not torch.cuda.is_available():
    raise RuntimeError("tests/cuda/python needs a CUDA device (torch.cuda.is_available() is False)")

SEED = 20240607


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(SEED)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality, shapes and dtypes included, except that any NaN matches any NaN (the sign
    and payload of a NaN produced by arithmetic are not part of the contract: x86 and CUDA produce
    different NaN bit patterns)."""
    a, b = a.detach().cpu(), b.detach().cpu()
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.is_floating_point:
        view = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16,
                torch.float64: torch.int64}[a.dtype]
        nan = torch.isnan(a)
        if not torch.equal(nan, torch.isnan(b)):
            return False
        a, b = a.masked_fill(nan, 0), b.masked_fill(nan, 0)
        return torch.equal(a.contiguous().view(view), b.contiguous().view(view))
    return torch.equal(a, b)


@contextlib.contextmanager
def no_sync():
    """Any torch operation that synchronizes with the device raises inside (the pending work is
    finished before entering)."""
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")
