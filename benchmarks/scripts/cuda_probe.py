#!/usr/bin/env python3
"""The CUDA targets of the backend, measured on one GPU in one process: pcops CUDA against plain
PyTorch on the same GPU, with CUDA events (median of repeated calls, inputs resident), and the
exactness of every pcops result checked bitwise against the pcops CPU backend (itself tested
against brute force), plus the mismatches of each PyTorch peer against the same result.

Cases (unit-sphere-shell clouds + 0.01 noise, batch 1 unless stated):
  FPS 1024 samples from 100k and 1M points, and B=16 x 8192 points;
  kNN 1024 queries, k=64, over 100k and 1M points; all-points kNN graph k=16 at 1M points;
  ball query 1024 queries, K=64, r=0.1 over 100k points; three_nn of 100k unknown points among
  1024 known ones.

Usage: PYTHONPATH=python PCOPS_LIBRARY=<build>/python/pcops/_C.so python benchmarks/scripts/cuda_probe.py \
           [--json out.json] [--reps 20] [--quick]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time

import torch

import pcops
from probe_timing import cuda_times  # this directory


def shell(n: int, batch: int, gen: torch.Generator) -> torch.Tensor:
    p = torch.randn(batch, n, 3, generator=gen)
    p = p / p.norm(dim=-1, keepdim=True)
    return (p + 0.01 * torch.randn(batch, n, 3, generator=gen)).contiguous()


def cuda_median(fn, reps: int, warmup: int = 3, cap_s: float = 20.0) -> tuple[float, list[float], object]:
    times, out = cuda_times(fn, reps, warmup, cap_s)
    return statistics.median(times), times, out


def torch_fps(p: torch.Tensor, m: int) -> torch.Tensor:
    """The usual PyTorch loop (batched), start index 0."""
    B, N, _ = p.shape
    out = torch.empty(B, m, dtype=torch.int64, device=p.device)
    best = torch.full((B, N), float("inf"), device=p.device)
    cur = torch.zeros(B, dtype=torch.int64, device=p.device)
    ar = torch.arange(B, device=p.device)
    for t in range(m):
        out[:, t] = cur
        d = p - p[ar, cur][:, None]
        best = torch.minimum(best, (d * d).sum(-1))
        cur = best.argmax(-1)
    return out


def torch_knn(q: torch.Tensor, r: torch.Tensor, k: int) -> torch.Tensor:
    chunk = max(1, (1 << 28) // max(r.shape[1], 1))
    parts = [torch.cdist(q[:, i:i + chunk], r).topk(k, dim=2, largest=False, sorted=True).indices
             for i in range(0, q.shape[1], chunk)]
    return torch.cat(parts, 1)


def torch_ball(q: torch.Tensor, r: torch.Tensor, radius: float, K: int) -> torch.Tensor:
    r2 = torch.tensor(radius, dtype=torch.float32) ** 2
    s = ((q[0, :, None, :] - r[0, None, :, :]) ** 2).sum(-1)
    mask = s < r2.to(q.device)
    cs = mask.to(torch.int32).cumsum(1, dtype=torch.int32)
    out = torch.full((q.shape[1], K), -1, dtype=torch.int64, device=q.device)
    rows, cols = torch.nonzero(mask & (cs <= K), as_tuple=True)
    out[rows, (cs[rows, cols] - 1).long()] = cols
    return out[None]


def mismatches(a: torch.Tensor, b: torch.Tensor) -> int:
    return int((a.cpu() != b.cpu()).sum())


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    a, b = a.cpu(), b.cpu()
    if a.dtype == torch.float32:
        return torch.equal(a.view(torch.int32), b.view(torch.int32))
    return torch.equal(a, b)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=None)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="no PyTorch peers")
    args = ap.parse_args()
    dev = torch.device("cuda")
    gen = torch.Generator().manual_seed(20240601)
    rows = []

    def record(case, target_ms, pc_fn, exact_fn, peers):
        t, times, out = cuda_median(pc_fn, args.reps)
        exact = exact_fn(out)
        row = {"case": case, "pcops_ms": t * 1e3, "pcops_times_ms": [x * 1e3 for x in times],
               "target_ms": target_ms, "exact_vs_cpu": exact, "peers": {}}
        for name, fn, check in peers if not args.quick else []:
            try:
                pt, _, pout = cuda_median(fn, max(3, args.reps // 4), warmup=1)
                row["peers"][name] = {"ms": pt * 1e3, "mismatches": check(pout)}
            except torch.OutOfMemoryError as exc:  # a peer that cannot run is a result
                row["peers"][name] = {"error": f"OutOfMemoryError: {str(exc)[:80]}"}
            torch.cuda.empty_cache()
        rows.append(row)
        peer_txt = ", ".join(f"{n} {v['ms']:.2f} ms ({v['mismatches']} mism.)" if "ms" in v else f"{n} {v['error']}"
                             for n, v in row["peers"].items())
        ok = "MET" if t * 1e3 <= target_ms else "missed"
        print(f"{case:46s} pcops {t * 1e3:8.3f} ms  target {target_ms:6.2f} ({ok})  exact={exact}  {peer_txt}",
              flush=True)

    # FPS
    for n, b, target in ((100_000, 1, 1.2), (1_000_000, 1, 1.5), (8192, 16, 0.5)):
        p = shell(n, b, gen)
        pg = p.to(dev)
        want = pcops.furthest_point_sample(p, 1024)
        record(f"fps B={b} N={n} -> 1024", target, lambda: pcops.furthest_point_sample(pg, 1024),
               lambda out: bits_equal(out, want),
               [("torch loop", lambda: torch_fps(pg, 1024), lambda o: mismatches(o, want))])
    # kNN, 1024 queries, k = 64
    for n, target in ((100_000, 0.3), (1_000_000, 1.0)):
        r = shell(n, 1, gen)
        q = r[:, torch.randperm(n, generator=gen)[:1024]].contiguous()
        rg, qg = r.to(dev), q.to(dev)
        wd, wi = pcops.knn(q, r, 64)
        record(f"knn 1024 queries k=64 N={n}", target, lambda: pcops.knn(qg, rg, 64),
               lambda out: bits_equal(out[0], wd) and bits_equal(out[1], wi),
               [("torch cdist+topk", lambda: torch_knn(qg, rg, 64), lambda o: mismatches(o, wi))])
    # All-points kNN graph, k = 16, 1M points.
    r = shell(1_000_000, 1, gen)
    rg = r.to(dev)
    t0 = time.perf_counter()
    wd, wi = pcops.knn(r, r, 16)
    cpu_s = time.perf_counter() - t0
    record("knn graph k=16 N=1000000 (all points)", 10.0, lambda: pcops.knn(rg, rg, 16),
           lambda out: bits_equal(out[0], wd) and bits_equal(out[1], wi), [])
    rows[-1]["pcops_cpu_s"] = cpu_s
    # Ball query
    r = shell(100_000, 1, gen)
    q = r[:, torch.randperm(100_000, generator=gen)[:1024]].contiguous()
    rg, qg = r.to(dev), q.to(dev)
    wd, wi = pcops.ball_query(q, r, 0.1, 64)
    record("ball query 1024 queries K=64 r=0.1 N=100000", 0.2, lambda: pcops.ball_query(qg, rg, 0.1, 64),
           lambda out: bits_equal(out[0], wd) and bits_equal(out[1], wi),
           [("torch mask", lambda: torch_ball(qg, rg, 0.1, 64), lambda o: mismatches(o, wi))])

    # three_nn, 100k unknown points, 1024 known (the PointNet++ interpolation issue's case).
    u = shell(100_000, 1, gen)
    k = u[:, torch.randperm(100_000, generator=gen)[:1024]].contiguous()
    ug, kg = u.to(dev), k.to(dev)
    wd, wi = pcops.three_nn(u, k)
    record("three_nn 100000 unknown x 1024 known", 0.3, lambda: pcops.three_nn(ug, kg),
           lambda out: bits_equal(out[0], wd) and bits_equal(out[1], wi),
           [("torch cdist+topk", lambda: torch_knn(ug, kg, 3), lambda o: mismatches(o, wi))])

    props = torch.cuda.get_device_properties(dev)
    import os

    commit = os.environ.get("PCOPS_GIT_COMMIT")
    if not commit:
        try:
            commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
        except OSError:
            commit = None
    doc = {"environment": {"gpu": props.name, "multiprocessors": props.multi_processor_count,
                           "torch": torch.__version__, "cuda": torch.version.cuda,
                           "python": platform.python_version(), "commit": commit},
           "command": "python benchmarks/scripts/cuda_probe.py"
                      + (f" --reps {args.reps}" if args.reps != 20 else "") + (" --quick" if args.quick else ""),
           "results": rows}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
