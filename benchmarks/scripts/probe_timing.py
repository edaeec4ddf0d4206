"""Timing helpers of the probes: medians of repeated calls after one warm-up call."""

from __future__ import annotations

import statistics
import time

import torch


def cpu_median(fn, repeat: int) -> tuple[float, object]:
    """Median wall time of ``repeat`` calls (after a warm-up) and the last result."""
    out = fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def cuda_median(fn, repeat: int) -> tuple[float, object]:
    """Median CUDA-event time of ``repeat`` calls (after a warm-up, synchronised) and the last result."""
    out = fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        out = fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return statistics.median(times), out
