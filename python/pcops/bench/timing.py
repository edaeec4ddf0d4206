"""Timing: medians of repeated runs after a warm-up, and a time budget for slow peers.

The budget is checked before the full measurement: the work is run at two small fractions (fewer
samples or queries), a line ``t = a + b * fraction`` is fitted (``a`` covers fixed costs such as a
tree build) and the full run is predicted as ``a + b``. A method predicted above the budget is
reported as "skipped (budget)" instead of being run.

CUDA: inputs are resident on the device; each timed call is bracketed by CUDA events on the
current stream (:func:`cuda_time_once`) and the adapters end with a synchronize, so the time is the
device time of the whole call, launches and any host round trips included.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

clock = time.perf_counter


def time_once(fn: Callable[[], object]) -> tuple[float, object]:
    t0 = clock()
    out = fn()
    return clock() - t0, out


def cuda_time_once(fn: Callable[[], object]) -> tuple[float, object]:
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    out = fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3, out


def predict(fn_at: Callable[[float], object], budget_s: float | None = None, min_signal_s: float = 0.2,
            first: float = 1 / 1024, last: float = 1 / 16) -> float:
    """Predicted seconds of the full run from runs on growing fractions of the work.

    The fraction doubles from ``first`` until one doubling adds ``min_signal_s`` (or ``last`` is reached);
    the last two runs give the line. A quadratic method at 1M points therefore costs a second or two
    to reject, not minutes. Returns inf as soon as one probe alone exceeds ``budget_s``."""
    points = []
    f = first
    while True:
        t, _ = time_once(lambda: fn_at(f))
        points.append((f, t))
        if budget_s is not None and t > budget_s:
            return float("inf")
        # Enough signal: the last doubling itself added min_signal_s (fixed costs such as a tree
        # build cancel out), or the last fraction is reached.
        if (len(points) >= 2 and t - points[-2][1] >= min_signal_s) or f >= last:
            break
        f *= 2
    (f1, t1), (f2, t2) = points[-2] if len(points) > 1 else points[-1], points[-1]
    if f2 == f1:
        return t2 / f2
    slope = max(0.0, (t2 - t1) / (f2 - f1))
    fixed = max(0.0, t1 - slope * f1)
    return max(t2, fixed + slope)


def measure(fn: Callable[[], object], repeat: int, warmup: int = 1, total_cap_s: float | None = None,
            predicted_s: float | None = None, timer: Callable | None = None) -> dict:
    """Runs ``warmup`` unmeasured calls then up to ``repeat`` measured ones; returns the median, all
    times and the last output. With ``total_cap_s`` the repeats shrink (never below one) so that the
    measurement stays inside the cap, judged from ``predicted_s`` or else from the warm-up run; a
    method predicted to be slow skips its warm-up."""
    if predicted_s is not None and total_cap_s is not None and predicted_s > 0:
        repeat = max(1, min(repeat, int(total_cap_s // predicted_s)))
        if predicted_s * (repeat + warmup) > total_cap_s:
            warmup = 0
    once = timer or time_once
    out = None
    spent = 0.0
    for i in range(warmup):
        t, out = once(fn)
        spent += t
        if i == 0 and predicted_s is None and total_cap_s is not None and t > 0:
            repeat = max(1, min(repeat, int((total_cap_s - t) // t)))
    times = []
    for _ in range(repeat):
        t, out = once(fn)
        times.append(t)
        spent += t
        # A wrong prediction (a loaded machine) must not run the cap over: stop after this run.
        if total_cap_s is not None and spent + t > total_cap_s:
            break
    return {"median_s": statistics.median(times), "times_s": times, "repeats": len(times), "warmup": warmup,
            "output": out}
