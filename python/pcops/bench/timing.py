"""Timing: medians of repeated runs after a warm-up, and a time budget for slow peers.

The budget is checked before the full measurement: the work is run at two small fractions (fewer
samples or queries), a line ``t = a + b * fraction`` is fitted (``a`` covers fixed costs such as a
tree build) and the full run is predicted as ``a + b``. A method predicted above the budget is
reported as "skipped (budget)" instead of being run.

CUDA: pcops inputs live on the device and every timed call ends with ``Inputs.sync`` (a
``torch.cuda.synchronize``); replace :func:`clock` by CUDA events there when the CUDA backend lands.
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


def predict(fn_at: Callable[[float], object], f1: float = 1 / 32, f2: float = 1 / 16) -> float:
    """Predicted seconds of the full run from runs at fractions f1 and f2 of the work."""
    t1, _ = time_once(lambda: fn_at(f1))
    t2, _ = time_once(lambda: fn_at(f2))
    slope = max(0.0, (t2 - t1) / (f2 - f1))
    fixed = max(0.0, t1 - slope * f1)
    return max(t2, fixed + slope)


def measure(fn: Callable[[], object], repeat: int, warmup: int = 1, total_cap_s: float | None = None,
            predicted_s: float | None = None) -> dict:
    """Runs ``warmup`` unmeasured calls then up to ``repeat`` measured ones; returns the median, all
    times and the last output. With ``total_cap_s`` and a prediction, the repeats shrink (never
    below one) so that the measurement stays inside the cap; a slow method skips its warm-up."""
    if predicted_s is not None and total_cap_s is not None and predicted_s > 0:
        repeat = max(1, min(repeat, int(total_cap_s // predicted_s)))
        if predicted_s * (repeat + warmup) > total_cap_s:
            warmup = 0
    out = None
    for _ in range(warmup):
        out = fn()
    times = []
    for _ in range(repeat):
        t, out = time_once(fn)
        times.append(t)
    return {"median_s": statistics.median(times), "times_s": times, "repeats": repeat, "warmup": warmup,
            "output": out}
