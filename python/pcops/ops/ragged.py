"""Ragged (flat, CSR offsets) operators: torch.ops.pcops.{radius, knn_ragged, nearest,
furthest_point_sample_ragged, grid_cluster}, their fake (meta) kernels and autograd markers.

The torch_cluster-style API on top of them is :mod:`pcops.flat`. Offsets ``ptr`` are int64
``[B + 1]`` with ``ptr[0] == 0``, non-decreasing, ``ptr[-1] == N``; indices are global.

torch.compile: radius, knn_ragged and furthest_point_sample_ragged return a number of rows that
depends on the data (the offsets, the coordinates); their fake kernels allocate it with
``ctx.new_dynamic_size()`` (an unbacked SymInt), so they trace, with a graph break-free
data-dependent output size. nearest and grid_cluster have static output shapes.
"""

from __future__ import annotations

import torch

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _flat_points(t: torch.Tensor, name: str) -> None:
    torch._check_value(t.dim() == 2, lambda: f"{name}: expected a 2-D tensor, got shape {tuple(t.shape)}")
    torch._check_type(
        t.dtype in FLOAT_DTYPES,
        lambda: f"{name}: expected float32, float16 or bfloat16 coordinates, got {t.dtype} "
        "(float64 and integer coordinates are not supported; convert with .float())",
    )


def _offsets(t: torch.Tensor, name: str) -> None:
    torch._check_type(
        t.dtype in (torch.int64, torch.int32), lambda: f"{name}: expected an int64 tensor, got {t.dtype}"
    )
    torch._check_value(t.dim() == 1, lambda: f"{name}: expected a 1-D tensor, got shape {tuple(t.shape)}")


def _pair(x, y, ptr_x, ptr_y):
    torch._check_value(x.device == y.device, lambda: f"y: expected device {x.device} (as x), got {y.device}")
    _flat_points(x, "x")
    _flat_points(y, "y")
    torch._check_value(
        x.shape[1] == y.shape[1], lambda: f"y: expected dimension {x.shape[1]} (as x), got {y.shape[1]}"
    )
    _offsets(ptr_x, "ptr_x")
    _offsets(ptr_y, "ptr_y")


@torch.library.register_fake("pcops::radius")
def _radius_fake(x, y, ptr_x, ptr_y, r, max_num_neighbors=32, ignore_same_index=False):
    _pair(x, y, ptr_x, ptr_y)
    e = torch.library.get_ctx().new_dynamic_size()
    return x.new_empty((2, e), dtype=torch.int64)


@torch.library.register_fake("pcops::knn_ragged")
def _knn_fake(x, y, ptr_x, ptr_y, k, cosine=False):
    _pair(x, y, ptr_x, ptr_y)
    e = torch.library.get_ctx().new_dynamic_size()
    return x.new_empty((2, e), dtype=torch.int64)


@torch.library.register_fake("pcops::nearest")
def _nearest_fake(x, y, ptr_x, ptr_y):
    _pair(x, y, ptr_x, ptr_y)
    return x.new_empty((x.shape[0],), dtype=torch.int64)


@torch.library.register_fake("pcops::furthest_point_sample_ragged")
def _fps_fake(src, ptr, counts, starts):
    _flat_points(src, "src")
    _offsets(ptr, "ptr")
    e = torch.library.get_ctx().new_dynamic_size()
    return src.new_empty((e,), dtype=torch.int64)


@torch.library.register_fake("pcops::grid_cluster")
def _grid_fake(pos, size, start=None, end=None):
    torch._check_value(pos.dim() >= 1, lambda: "pos: expected at least 1-D, got a 0-D tensor")
    return pos.new_empty((pos.shape[0],), dtype=torch.int64)


def _no_grad_setup(ctx, inputs, output):
    ctx.mark_non_differentiable(output)


def _make_backward(n):
    def _backward(ctx, grad):
        return (None,) * n

    return _backward


# Index outputs: registering the formula marks them non-differentiable explicitly.
for _name, _n in (
    ("radius", 7),
    ("knn_ragged", 6),
    ("nearest", 4),
    ("furthest_point_sample_ragged", 4),
    ("grid_cluster", 4),
):
    torch.library.register_autograd(f"pcops::{_name}", _make_backward(_n), setup_context=_no_grad_setup)
