"""Timing helpers of the probes (medians of repeated calls after one warm-up call) and their JSON output."""

from __future__ import annotations

import os
import platform
import statistics
import time
from pathlib import Path

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


def write_probe(stem: str, args, rows: list, env: dict | None = None, extra: dict | None = None) -> Path:
    """Writes a probe's {"environment", "args", "results"} (and the entries of ``extra``) to ``args.out``,
    else to benchmarks/results/<stem>-<time>-<commit>.json (pcops.bench.run.write_json). The environment
    adds to ``env`` the versions, the machine and the commit; ``args.commit`` (a tree copied without
    .git) names the commit as PCOPS_GIT_COMMIT does."""
    import pcops
    from pcops.bench.run import git_info, result_path, write_json

    if getattr(args, "commit", None):
        os.environ["PCOPS_GIT_COMMIT"] = args.commit
    info = git_info()
    env = {**(env or {}), "torch": torch.__version__, "python": platform.python_version(),
           "machine": platform.machine(), "pcops": pcops.__version__,
           "commit": (info["commit"] or "unknown")[:7], "tracked_changes": info["dirty"]}
    out = getattr(args, "out", None)
    path = Path(out) if out else result_path(Path(__file__).resolve().parents[2] / "benchmarks" / "results", stem)
    # The record names its file, not the directory it was written to on the machine that ran it.
    recorded = {**vars(args), "out": path.name} if "out" in vars(args) else vars(args)
    write_json({"environment": env, "args": recorded, "results": rows, **(extra or {})}, path=path)
    print(f"wrote {path}")
    return path
