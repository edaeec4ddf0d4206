#!/usr/bin/env python3
"""Tuning probe of the CUDA furthest point sampling paths: times every forced path configuration
(PCOPS_CUDA_FPS_CONFIG) on the issue's shapes with CUDA events (median), checks each result
bitwise against the CPU backend.

Usage: PYTHONPATH=python PCOPS_LIBRARY=<build>/python/pcops/_C.so python benchmarks/scripts/fps_tune.py [case...]
       ... fps_tune.py steps    (1M shell: time against the sample count M, fixed cost and cost per step)
       ... fps_tune.py kernels  (1M shell: GPU time of each kernel of a call, M = 2 and 1024)
"""

from __future__ import annotations

import os
import statistics
import sys

import torch

import pcops
from probe_timing import cuda_times  # this directory

CASES = {
    "100k": (1, 100_000, ["", "grid"]),
    "1M": (1, 1_000_000, ["", "sorted-atomic", "sorted-cells:6", "sorted-list", "sorted:1", "sorted256"]),
    "4M": (1, 4_000_000, ["", "sorted-list", "sorted128"]),
    "B16x8192": (16, 8192, ["", "cluster-nocopy:8", "cluster:4", "cluster-nocopy:4"]),
    "B32x4096": (32, 4096, ["", "cluster-nocopy:4"]),
    "B8x16384": (8, 16384, ["", "cluster-nocopy:8"]),
    "B1x16384": (1, 16384, ["", "cluster-nocopy:8"]),
    "60k": (1, 60_000, ["", "grid"]),
}


def shell(b, n, gen):
    p = torch.randn(b, n, 3, generator=gen)
    p = p / p.norm(dim=-1, keepdim=True)
    return (p + 0.01 * torch.randn(b, n, 3, generator=gen)).contiguous()


def timed(fn, reps=25):
    """Median CUDA-event time (ms) of ``reps`` calls after 3 warm-ups."""
    return 1e3 * statistics.median(cuda_times(fn, reps, warmup=3)[0])


def steps(gen):
    p = shell(1, 1_000_000, gen).cuda()
    for cfg in ["", "sorted256", "sorted-list"]:
        os.environ["PCOPS_CUDA_FPS_CONFIG"] = cfg
        for m in [2, 16, 64, 256, 1024]:
            ms = timed(lambda: pcops.furthest_point_sample(p, m), reps=15)
            print(f"1M {cfg or 'default':12s} M={m:5d} {ms:8.3f} ms", flush=True)
    os.environ.pop("PCOPS_CUDA_FPS_CONFIG", None)


def kernels(gen):
    """Per-kernel GPU time of one 1M -> M call (torch.profiler), M = 2 (the fixed cost) and 1024."""
    from torch.profiler import ProfilerActivity, profile

    p = shell(1, 1_000_000, gen).cuda()
    for m in (2, 1024):
        for _ in range(3):
            pcops.furthest_point_sample(p, m)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                pcops.furthest_point_sample(p, m)
            torch.cuda.synchronize()
        print(f"1M -> {m}: GPU time per call by kernel (10 calls)")
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12, max_name_column_width=60))


def main():
    gen = torch.Generator().manual_seed(7)
    only = sys.argv[1:]
    if only == ["steps"]:
        return steps(gen)
    if only == ["kernels"]:
        return kernels(gen)
    for name, (b, n, configs) in CASES.items():
        if only and name not in only:
            continue
        p = shell(b, n, gen)
        want = pcops.furthest_point_sample(p, 1024)
        pg = p.cuda()
        for cfg in configs:
            os.environ["PCOPS_CUDA_FPS_CONFIG"] = cfg
            try:
                got = pcops.furthest_point_sample(pg, 1024)
                ms = timed(lambda: pcops.furthest_point_sample(pg, 1024))
            except Exception as e:  # a forced shape that cannot run
                print(f"{name:10s} {cfg or 'default':14s} n/a ({str(e).splitlines()[0][:80]})", flush=True)
                continue
            ok = torch.equal(got.cpu(), want)
            print(f"{name:10s} {cfg or 'default':18s} {ms:8.3f} ms  equal={ok}", flush=True)
    os.environ.pop("PCOPS_CUDA_FPS_CONFIG", None)


if __name__ == "__main__":
    main()
