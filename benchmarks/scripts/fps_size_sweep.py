#!/usr/bin/env python3
"""FPS cost by cloud size and sample count on CUDA: CUDA-event medians of
``pcops.furthest_point_sample`` on noisy unit-sphere shells for several sample counts (the
difference between counts gives the per-step cost; one sample gives the set-up cost, the sort of
the sorted path), for the default path and forced paths (PCOPS_CUDA_FPS_CONFIG), with every
path's 1024-sample result checked bitwise against the default one.

Usage: PYTHONPATH=python PCOPS_LIBRARY=<build>/python/pcops/_C.so \
    python benchmarks/scripts/fps_size_sweep.py [--sizes 200000,1000000,4000000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os

import torch

import pcops
from pcops.bench.run import environment


def shell(n: int, gen: torch.Generator) -> torch.Tensor:
    p = torch.randn(1, n, 3, generator=gen)
    p = p / p.norm(dim=-1, keepdim=True)
    return (p + 0.01 * torch.randn(1, n, 3, generator=gen)).contiguous().cuda()


def median_ms(p: torch.Tensor, m: int, reps: int) -> float:
    for _ in range(2):
        pcops.furthest_point_sample(p, m)
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        pcops.furthest_point_sample(p, m)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="200000,1000000,4000000")
    ap.add_argument("--samples", default="1,2,64,256,1024")
    ap.add_argument("--paths", default=",grid,sorted", help="comma-separated configs; empty = default")
    ap.add_argument("--grid-max", type=int, default=1_100_000, help="largest size timed on the grid path")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(0)
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        p = shell(n, gen)
        ref = None
        for cfg in args.paths.split(","):
            if cfg == "grid" and n > args.grid_max:
                continue
            os.environ["PCOPS_CUDA_FPS_CONFIG"] = cfg
            times = {m: median_ms(p, m, args.reps) for m in (int(s) for s in args.samples.split(","))}
            out = pcops.furthest_point_sample(p, 1024)
            ref = out if ref is None else ref
            same = bool(torch.equal(out, ref))
            rows.append({"points": n, "path": cfg or "default", "ms": times, "same_as_first": same})
            print(f"{n:>9} {cfg or 'default':<8} " + " ".join(f"M={m}: {t:.3f} ms" for m, t in times.items())
                  + f"  same={same}", flush=True)
    os.environ.pop("PCOPS_CUDA_FPS_CONFIG", None)
    if args.json:
        doc = {"kind": "fps-size-sweep", "environment": environment(torch.get_num_threads(), "cuda"), "rows": rows}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
