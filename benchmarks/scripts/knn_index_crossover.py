"""Crossover of the CUDA kNN's two exact 3-D paths: the uniform grid built per call and a
SpatialIndex built per call (PCOPS_CUDA_KNN_INDEX=never / always; the index's search kernel as
chosen, or forced by PCOPS_CUDA_INDEX_KERNEL=lane / warp), in one run.

For each cloud (those of spatial_index_cuda.py: uniform in the unit cube, sphere + 0.01 noise,
clustered: 90 % in 20 gaussian clusters of sigma 0.002 and 10 % uniform; random order), size
(--sizes), query count (1024 or n / 8 random points of the cloud, or all points) and k (--ks): the median of --repeat synchronised calls of pcops.knn per path (one
warm-up), and whether both paths returned the same bits. JSON goes to --out.

    PYTHONPATH=python PCOPS_LIBRARY=<build>/python/pcops/_C.so \\
        python benchmarks/scripts/knn_index_crossover.py --sizes 20k,100k,1M --out <file>
"""

from __future__ import annotations

import argparse
import os

import torch

import pcops
from probe_timing import write_probe  # this directory
from spatial_index_cuda import DEV, count, make_cloud, timed  # the same clouds and timing


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="20k,100k,1M")
    ap.add_argument("--clouds", default="uniform,sphere,clustered")
    ap.add_argument("--ks", default="8,16,32")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rows = []
    for kind in args.clouds.split(","):
        for n in [count(s) for s in args.sizes.split(",")]:
            p = make_cloud(kind, n)[0][None].contiguous()
            for m in sorted({1024, n // 8, n}):
                q = p[:, torch.randperm(n, device=DEV)[:m]].contiguous() if m < n else p
                for k in [int(x) for x in args.ks.split(",")]:
                    res = {}
                    for name, path, kernel in (("grid", "never", ""), ("index", "always", ""),
                                               ("index_lane", "always", "lane"), ("index_warp", "always", "warp")):
                        os.environ["PCOPS_CUDA_KNN_INDEX"] = path
                        os.environ["PCOPS_CUDA_INDEX_KERNEL"] = kernel
                        res[name] = timed(lambda: pcops.knn(q, p, k), args.repeat)
                    os.environ.pop("PCOPS_CUDA_KNN_INDEX")
                    os.environ.pop("PCOPS_CUDA_INDEX_KERNEL")
                    dg, ig = res["grid"][1]
                    row = {"cloud": kind, "points": n, "queries": m, "k": k}
                    row.update({f"{name}_s": t for name, (t, _) in res.items()})
                    row["same"] = all(torch.equal(dg, d) and torch.equal(ig, i) for _, (d, i) in res.values())
                    rows.append(row)
                    print(f"{kind:9s} n={n:8d} m={m:8d} k={k:2d} " +
                          " ".join(f"{name} {t * 1e3:8.3f}" for name, (t, _) in res.items()) +
                          f" ms same {row['same']}", flush=True)
    write_probe("knn-index-crossover", args, rows, {"cuda": torch.version.cuda, "device": torch.cuda.get_device_name()})

if __name__ == "__main__":
    main()
