"""Scale probe of pcops.SpatialIndex on the CPU: build, all-points kNN and a ball query at 10M points.

For each cloud (--clouds: uniform in the unit cube; clustered = 90 % in 20 gaussian clusters of
sigma 0.002 and 10 % uniform), in random order: the build time, all-points kNN (--k, every point
queries the index), a ball query of the first --ball-queries points (--radius, --K), the index's
memory_bytes, the process's peak resident memory, and exactness of the kNN on 2000 random queries
against pcops.knn. One run each (wall-clock time.perf_counter). JSON goes to
benchmarks/results/spatial-index-scale-<date>-<commit>.json (or --out).

    PYTHONPATH=python PCOPS_LIBRARY=<build>/python/pcops/_C.so \\
        python benchmarks/scripts/spatial_index_scale.py [--points 10M] [--k 8]
"""

from __future__ import annotations

import argparse
import resource
import time

import torch

import pcops
from probe_timing import write_probe  # this directory

def count(text: str) -> int:
    text = text.strip().lower()
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:], 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def cloud(kind: str, n: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    p = torch.rand(n, 3, generator=g)
    if kind == "clustered":
        centres = torch.rand(20, 3, generator=g)
        i = torch.arange(n)
        m = i % 10 != 0
        p[m] = centres[i[m] % 20] + 0.002 * torch.randn(int(m.sum()), 3, generator=g)
    elif kind != "uniform":
        raise SystemExit(f"unknown cloud {kind}")
    return p[torch.randperm(n, generator=g)].contiguous()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", default="10M")
    ap.add_argument("--clouds", default="uniform,clustered")
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--ball-queries", default="1M")
    ap.add_argument("--radius", type=float, default=0.005)
    ap.add_argument("--K", type=int, default=16)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    n, nb = count(args.points), count(args.ball_queries)
    rows = []
    for kind in args.clouds.split(","):
        p = cloud(kind, n)
        t = time.perf_counter()
        index = pcops.SpatialIndex(p)
        build = time.perf_counter() - t
        t = time.perf_counter()
        dist, idx = index.knn(p, args.k)
        knn = time.perf_counter() - t
        t = time.perf_counter()
        index.ball_query(p[:nb], args.radius, args.K)
        ball = time.perf_counter() - t
        sub = torch.randperm(n, generator=torch.Generator().manual_seed(2))[:2000]
        ref_d, ref_i = pcops.knn(p[sub][None], p[None], args.k)
        row = {"cloud": kind, "points": n, "k": args.k, "build_s": build, "knn_s": knn,
               "ball_queries": nb, "radius": args.radius, "K": args.K, "ball_s": ball,
               "index_bytes": index.memory_bytes,
               "exact": bool(torch.equal(ref_i[0], idx[sub]) and torch.equal(ref_d[0], dist[sub])),
               "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
        rows.append(row)
        print(f"{kind}: {n} points, build {build:.2f} s, all-points kNN (k={args.k}) {knn:.2f} s, ball query "
              f"({nb} queries, r={args.radius}, K={args.K}) {ball:.2f} s, index {index.memory_bytes / 1e6:.0f} MB, "
              f"exact {row['exact']}, peak RSS so far {row['peak_rss_bytes'] / 1e9:.2f} GB", flush=True)
        del index, dist, idx
    write_probe("spatial-index-scale", args, rows, {"threads": torch.get_num_threads()})

if __name__ == "__main__":
    main()
