"""CPU timings behind the spatial-index routes of the dense and flat operators, in one run.

For each cloud (spatial_index_scale.py's: uniform in the unit cube; clustered = 90 % in 20
gaussian clusters of sigma 0.002 and 10 % uniform; random order) and size (--sizes), every point querying, radius r = the median
16th-neighbour distance of 2000 points:
- pcops.ball_query (dense), pcops.flat.radius_graph (max_num_neighbors 32) and pcops.knn (k =
  16), each with the index routes disabled (PCOPS_CPU_INDEX_ROUTES=never: the grid alone) and as
  shipped (uneven clouds go through an index built for the call);
- pcops.SpatialIndex(points).ball_query (build included; even clouds search the index's grid);
each the median of --repeat runs after one warm-up (time.perf_counter), with a check that every
path returned the same bits. JSON goes to --out (default
benchmarks/results/index-routes-cpu-<date>-<commit>.json).

    PYTHONPATH=python PCOPS_LIBRARY=<build>/python/pcops/_C.so \\
        python benchmarks/scripts/index_routes_cpu.py --sizes 300k,1M
"""

from __future__ import annotations

import argparse
import json
import os

import torch

import pcops
from pcops import flat
from probe_timing import cpu_median, write_probe  # this directory
from spatial_index_scale import cloud, count  # the same clouds as the 10M scale probe



def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="300k,1M")
    ap.add_argument("--clouds", default="uniform,clustered")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rows = []
    for n in [count(s) for s in args.sizes.split(",")]:
        for kind in args.clouds.split(","):
            p = cloud(kind, n)
            d, _ = pcops.knn(p[None, :2000], p[None], 16)
            r = float(d[0, :, 15].median())
            os.environ["PCOPS_CPU_INDEX_ROUTES"] = "never"
            t_dense_grid, (gd, gi) = cpu_median(lambda: pcops.ball_query(p[None], p[None], r, 32), args.repeat)
            t_graph_grid, edges_grid = cpu_median(lambda: flat.radius_graph(p, r, max_num_neighbors=32), args.repeat)
            t_knn_grid, (kd, ki) = cpu_median(lambda: pcops.knn(p[None], p[None], 16), args.repeat)
            os.environ.pop("PCOPS_CPU_INDEX_ROUTES")
            t_dense, (dd, di) = cpu_median(lambda: pcops.ball_query(p[None], p[None], r, 32), args.repeat)
            t_index, (xd, xi) = cpu_median(lambda: pcops.SpatialIndex(p).ball_query(p, r, 32), args.repeat)
            t_graph, edges = cpu_median(lambda: flat.radius_graph(p, r, max_num_neighbors=32), args.repeat)
            t_knn, (kd2, ki2) = cpu_median(lambda: pcops.knn(p[None], p[None], 16), args.repeat)
            row = {"cloud": kind, "points": n, "radius": r, "K": 32,
                   "ball_query_grid_only_s": t_dense_grid, "ball_query_s": t_dense, "index_ball_query_s": t_index,
                   "radius_graph_grid_only_s": t_graph_grid, "radius_graph_s": t_graph,
                   "knn16_grid_only_s": t_knn_grid, "knn16_s": t_knn,
                   "same": bool(torch.equal(di[0], xi) and torch.equal(dd[0], xd) and torch.equal(gi, di)
                                and torch.equal(gd, dd) and torch.equal(edges, edges_grid)
                                and torch.equal(ki, ki2) and torch.equal(kd, kd2)),
                   "radius_graph_edges": int(edges.shape[1])}
            rows.append(row)
            print(json.dumps(row), flush=True)
    write_probe("index-routes-cpu", args, rows, {"threads": torch.get_num_threads()})

if __name__ == "__main__":
    main()
