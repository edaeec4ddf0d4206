"""torch.nn modules built on pcops operators."""

from __future__ import annotations

import math

import torch

from pcops.ops.point_conv import MODES, point_conv

__all__ = ["PointConv"]


class PointConv(torch.nn.Module):
    """Convolution on native points: ``out[i] = bias + sum over (i, j, k) of W_k f[j]``.

    The neighbourhood structure comes in as triplets (see :func:`pcops.point_conv_triplets`),
    so one set of triplets serves every layer that runs on the same points.

    Args:
        in_channels: ``C_in``.
        out_channels: ``C_out``.
        kernel_size: ``t``; the module holds ``K = t^3`` matrices (one per kernel cell).
        bias: add a learnable bias per output channel.
        mode: ``"exact"`` or ``"fast"`` (tensor cores on CUDA for float16 / bfloat16 features
            and weights, e.g. under ``.half()`` / ``.bfloat16()``); see :func:`pcops.point_conv`.

    Shapes: ``forward(features [N_in, C_in], triplets [T, 3], num_out=None) -> [N_out, C_out]``.
    """

    def __init__(
        self, in_channels: int, out_channels: int, kernel_size: int = 3, bias: bool = True, mode: str = "exact"
    ):
        super().__init__()
        if mode not in MODES:
            raise ValueError(f'PointConv: mode: expected "exact" or "fast", got {mode!r}')
        self.mode = mode
        if in_channels < 1 or out_channels < 1 or kernel_size < 1:
            raise ValueError(
                f"PointConv: expected positive sizes, got in_channels={in_channels}, "
                f"out_channels={out_channels}, kernel_size={kernel_size}"
            )
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = kernel_size
        num_kernels = kernel_size**3
        self.weight = torch.nn.Parameter(torch.empty(num_kernels, out_channels, in_channels))
        self.bias = torch.nn.Parameter(torch.empty(out_channels)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # He initialisation over the fan-in of one neighbourhood (C_in per kernel cell, with the
        # cells of a typical neighbourhood about evenly occupied).
        fan_in = self.in_channels * self.kernel_size**3
        bound = math.sqrt(6.0 / fan_in)
        torch.nn.init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            torch.nn.init.zeros_(self.bias)

    def forward(
        self, features: torch.Tensor, triplets: torch.Tensor, num_out: int | None = None
    ) -> torch.Tensor:
        out = point_conv(features, self.weight, triplets, num_out, mode=self.mode)
        return out + self.bias if self.bias is not None else out

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"bias={self.bias is not None}, mode={self.mode!r}"
        )
