"""GPU timings behind the spatial-index routes of the CUDA dense and flat operators, in one run.

For each cloud (spatial_index_cuda.py's: uniform in the unit cube; clustered = 90 % in 20
gaussian clusters of sigma 0.002 and 10 % uniform; random order), size (--sizes) and layout (one
cloud of n points, or --split equal clouds of n / split points in one flat batch), every point
querying, radius r = the median 16th-neighbour distance of 2000 points:
- pcops.knn (k = 16) and pcops.ball_query (K = 32) on the single cloud;
- pcops.flat.knn_graph (k = 16) and pcops.flat.radius_graph (max_num_neighbors = 32) on the
  flat batch;
each with the index routes disabled (PCOPS_CUDA_{KNN,BALL_QUERY,RADIUS}_INDEX=never: the
uniform-grid paths) and as shipped (densely queried clouds of >= 100k points go through a
SpatialIndex built for the call); medians of --repeat synchronised runs after one warm-up, with
a check that both paths returned the same bits. JSON goes to --out (default
benchmarks/results/index-routes-cuda-<date>-<commit>.json).

    PYTHONPATH=python PCOPS_LIBRARY=<build>/python/pcops/_C.so \\
        python benchmarks/scripts/index_routes_cuda.py --sizes 1M --split 4
"""

from __future__ import annotations

import argparse
import json
import os

import torch

import pcops
from pcops import flat
from probe_timing import write_probe  # this directory
from spatial_index_cuda import DEV, make_cloud, timed  # the same clouds and timing
from spatial_index_scale import count

ROUTES = ("PCOPS_CUDA_KNN_INDEX", "PCOPS_CUDA_BALL_QUERY_INDEX", "PCOPS_CUDA_RADIUS_INDEX")


def both_paths(fn, repeat: int):
    """(time with the routes off, time as shipped, same bits)."""
    for name in ROUTES:
        os.environ[name] = "never"
    try:
        t_off, a = timed(fn, repeat)
    finally:
        for name in ROUTES:
            os.environ.pop(name)
    t_on, b = timed(fn, repeat)
    if isinstance(a, tuple):
        same = all(torch.equal(x, y) for x, y in zip(a, b))
    else:
        same = torch.equal(a, b)
    return t_off, t_on, bool(same)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1M")
    ap.add_argument("--clouds", default="uniform,clustered")
    ap.add_argument("--split", type=int, default=4, help="clouds of the flat batch")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--commit", default=None, help="commit of the tree (when run outside a checkout)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rows = []
    for n in [count(s) for s in args.sizes.split(",")]:
        for kind in args.clouds.split(","):
            p, what = make_cloud(kind, n)
            d, _ = pcops.knn(p[None, :2000], p[None], 16)
            r = float(d[0, :, 15].median())
            batch = torch.arange(args.split, device=DEV).repeat_interleave(n // args.split)
            batch = torch.cat([batch, batch.new_full((n - batch.numel(),), args.split - 1)])
            row = {"cloud": kind, "what": what, "points": n, "flat_clouds": args.split, "radius": r}
            for name, fn in (
                ("knn16", lambda: pcops.knn(p[None], p[None], 16)),
                ("ball_query32", lambda: pcops.ball_query(p[None], p[None], r, 32)),
                ("flat_knn_graph16", lambda: flat.knn_graph(p, 16, batch)),
                ("flat_radius_graph32", lambda: flat.radius_graph(p, r, batch, max_num_neighbors=32)),
            ):
                t_off, t_on, same = both_paths(fn, args.repeat)
                row.update({f"{name}_grid_s": t_off, f"{name}_s": t_on, f"{name}_same": same})
            rows.append(row)
            print(json.dumps(row), flush=True)
            del p, batch
            torch.cuda.empty_cache()
    write_probe("index-routes-cuda", args, rows,
                {"cuda": torch.version.cuda, "device": torch.cuda.get_device_name()})

if __name__ == "__main__":
    main()
