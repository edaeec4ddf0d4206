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


def cuda_times(fn, repeat: int, warmup: int = 1, cap_s: float = float("inf")) -> tuple[list[float], object]:
    """CUDA-event times (seconds) of up to ``repeat`` calls after ``warmup`` calls and a
    synchronisation (stopping early once they add up to ``cap_s``), and the last result."""
    out = None
    for _ in range(warmup):
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
        if sum(times) > cap_s:
            break
    return times, out


def cuda_median(fn, repeat: int, warmup: int = 1) -> tuple[float, object]:
    """Median CUDA-event time of ``repeat`` calls (after a warm-up, synchronised) and the last result."""
    times, out = cuda_times(fn, repeat, warmup)
    return statistics.median(times), out
