"""Framework checks shared by the fake (meta) kernels.

The C++ binding performs the same checks for real tensors. The fake kernels repeat them so that
tracing (torch.compile, meta tensors) rejects the same inputs with the same exception types, and
so that a tensor on another device (for example ``meta`` mixed with ``cpu``, which the dispatcher
routes to the meta kernel) is an error rather than a silently produced garbage result.
"""

from __future__ import annotations

import operator

import torch

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def points(t: torch.Tensor, name: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a tensor, got {type(t).__name__}")
    torch._check_value(t.dim() == 3, lambda: f"{name}: expected a 3-D tensor, got shape {tuple(t.shape)}")
    torch._check_type(
        t.dtype in FLOAT_DTYPES,
        lambda: f"{name}: expected float32, float16 or bfloat16 coordinates, got {t.dtype} "
        "(float64 and integer coordinates are not supported; convert with .float())",
    )


def same_device(a: torch.Tensor, a_name: str, b: torch.Tensor, b_name: str) -> None:
    torch._check_value(
        a.device == b.device,
        lambda: f"{b_name}: expected device {a.device} (as {a_name}), got {b.device}",
    )


def lengths(t: torch.Tensor | None, pts: torch.Tensor, pts_name: str, name: str) -> None:
    if t is None:
        return
    same_device(pts, pts_name, t, name)
    torch._check_type(
        t.dtype in (torch.int64, torch.int32), lambda: f"{name}: expected an int64 tensor, got {t.dtype}"
    )
    torch._check_value(t.dim() == 1, lambda: f"{name}: expected a 1-D tensor, got shape {tuple(t.shape)}")
    torch._check_value(
        t.shape[0] == pts.shape[0],
        lambda: f"{name}: expected {pts.shape[0]} lengths (one per cloud), got {t.shape[0]}",
    )


def non_negative(value, name: str) -> None:
    torch._check_value(value >= 0, lambda: f"{name}: expected >= 0, got {value}")


def integer(value, name: str):
    """Python integers (and SymInts) pass unchanged; floats and bools are rejected, never truncated."""
    if isinstance(value, bool) or isinstance(value, torch.Tensor):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    if isinstance(value, (int, torch.SymInt)):
        return value  # unchanged, so that torch.compile can keep it symbolic
    try:
        return operator.index(value)  # NumPy integers and other exact integer types
    except TypeError:
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}") from None


def values(t: torch.Tensor, name: str, rank: int, shape: str) -> None:
    """Per-point values (features, weights, gradients): the binding's ``as_values`` checks."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a tensor, got {type(t).__name__}")
    torch._check_value(
        t.dim() == rank, lambda: f"{name}: expected a {rank}-D tensor {shape}, got shape {tuple(t.shape)}"
    )
    torch._check_type(
        t.dtype in FLOAT_DTYPES,
        lambda: f"{name}: expected float32, float16 or bfloat16 values, got {t.dtype} "
        "(float64 and integer tensors are not supported; convert with .float())",
    )


def indices(t: torch.Tensor, name: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a tensor, got {type(t).__name__}")
    torch._check_type(t.dtype == torch.int64, lambda: f"{name}: expected an int64 tensor, got {t.dtype}")
