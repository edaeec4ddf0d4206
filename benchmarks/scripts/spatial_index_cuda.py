"""GPU probe of pcops.SpatialIndex: build + all-points kNN at 1M to 100M points, against pcops.knn
(dense, grid rebuilt per call) and plain PyTorch (chunked cdist + topk), in one run.

For each cloud (--clouds: uniform in the unit cube, sphere = unit sphere + 0.01 noise, scan =
building.ply repeated with jitter, clustered = 90 % in 20 gaussian clusters of sigma 0.002 and 10 %
uniform) and size (--sizes), points in random order on the GPU, every point querying:
- pcops.index: pcops.SpatialIndex(points) + index.knn(points, k), and build and query apart;
- pcops.knn (grid): the dense operator on its uniform-grid path (PCOPS_CUDA_KNN_INDEX=never; the
  grid built inside the call), which is also the exactness reference;
- torch cdist+topk: chunks of --torch-chunk queries over all points, timed on --torch-queries
  queries and scaled to all of them (marked extrapolated); its misplaced neighbours on those
  queries are counted (cdist's matrix-product distances are not the contract's);
- a ball query of every point (radius = the median 16th-neighbour distance, K = 32) through the
  index and through pcops.ball_query.
Times are medians of --repeat synchronised runs after one warm-up (wall clock,
torch.cuda.synchronize). Exactness: the index's rows for 4096 random queries against the grid path
(bitwise). Peak memory: torch.cuda.max_memory_allocated around the index's build + query.
JSON goes to --out (default benchmarks/results/spatial-index-cuda-<date>-<commit>.json).

    PYTHONPATH=python PCOPS_LIBRARY=<build>/python/pcops/_C.so \\
        python benchmarks/scripts/spatial_index_cuda.py --sizes 1M,10M --clouds uniform,sphere,scan,clustered
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch

import pcops
from pcops import data as pdata
from probe_timing import write_probe  # this directory
from spatial_index_scale import count

DEV = torch.device("cuda")


def find_data(name: str) -> Path:
    for root in pdata._candidates():
        if (root / name).is_file():
            return root / name
    raise SystemExit(f"{name} not found; see docs/data.md")


def make_cloud(kind: str, n: int) -> tuple[torch.Tensor, str]:
    g = torch.Generator(device=DEV).manual_seed(0)
    if kind == "uniform":
        p, what = torch.rand(n, 3, generator=g, device=DEV), "uniform in the unit cube"
    elif kind == "sphere":
        p = torch.randn(n, 3, generator=g, device=DEV)
        p = p / p.norm(dim=1, keepdim=True) + 0.01 * torch.randn(n, 3, generator=g, device=DEV)
        what = "unit sphere + 0.01 gaussian noise"
    elif kind == "clustered":
        m = int(round(0.9 * n))
        centres = torch.rand(20, 3, generator=g, device=DEV)
        which = torch.randint(0, 20, (m,), generator=g, device=DEV)
        p = torch.cat([centres[which] + 0.002 * torch.randn(m, 3, generator=g, device=DEV),
                       torch.rand(n - m, 3, generator=g, device=DEV)])
        what = "90 % in 20 gaussian clusters (sigma 0.002), 10 % uniform"
    elif kind == "scan":
        base = torch.from_numpy(pdata.load(find_data("building.ply")).points.astype(np.float32)).to(DEV)
        spacing = float(pcops.knn(base[None], base[None], 2)[0][0, :, 1].median())
        src = torch.randint(0, base.shape[0], (n,), generator=g, device=DEV)
        p = base[src] + 0.5 * spacing * torch.randn(n, 3, generator=g, device=DEV)
        what = f"building.ply ({base.shape[0]} points) resampled with gaussian jitter {0.5 * spacing:.3g}"
    else:
        raise SystemExit(f"unknown cloud {kind}")
    return p[torch.randperm(n, generator=g, device=DEV)].contiguous(), what


def dense_knn(q, p, k):
    """pcops.knn on its uniform-grid path (k <= 32 would otherwise go through an index too)."""
    os.environ["PCOPS_CUDA_KNN_INDEX"] = "never"
    try:
        d, i = pcops.knn(q[None], p[None], k)
    finally:
        os.environ.pop("PCOPS_CUDA_KNN_INDEX")
    return d[0], i[0]


def timed(fn, repeat: int) -> tuple[float, object]:
    fn()  # warm-up
    torch.cuda.synchronize()
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def torch_knn(q: torch.Tensor, p: torch.Tensor, k: int, chunk: int):
    dist, idx = [], []
    for s in range(0, q.shape[0], chunk):
        d, i = torch.cdist(q[s:s + chunk], p).topk(k, dim=1, largest=False)
        dist.append(d)
        idx.append(i)
    return torch.cat(dist), torch.cat(idx)


def misplaced(idx: torch.Tensor, ref: torch.Tensor) -> int:
    return int((idx != ref).sum())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1M,10M")
    ap.add_argument("--clouds", default="uniform,sphere,scan,clustered")
    ap.add_argument("--k", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--torch-queries", type=int, default=4096)
    ap.add_argument("--torch-chunk", type=int, default=1024)
    ap.add_argument("--no-dense", action="store_true", help="skip pcops.knn and the ball queries")
    ap.add_argument("--no-torch", action="store_true", help="skip the plain PyTorch baseline")
    ap.add_argument("--commit", default=None, help="commit of the tree (when run outside a checkout)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rows = []
    k = args.k
    for n in [count(s) for s in args.sizes.split(",")]:
        for kind in args.clouds.split(","):
            p, what = make_cloud(kind, n)
            repeat = max(1, args.repeat if n <= 2_000_000 else args.repeat // 2 if n <= 20_000_000 else 1)
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base_mem = torch.cuda.memory_allocated()

            def both():
                return pcops.SpatialIndex(p).knn(p, k)

            t_all, (dist, idx) = timed(both, repeat)
            peak = torch.cuda.max_memory_allocated() - base_mem
            index = pcops.SpatialIndex(p)
            t_build, _ = timed(lambda: pcops.SpatialIndex(p), repeat)
            t_query, _ = timed(lambda: index.knn(p, k), repeat)
            g = torch.Generator(device=DEV).manual_seed(1)
            sub = torch.randperm(n, generator=g, device=DEV)[:4096]
            ref_d, ref_i = dense_knn(p[sub], p, k)
            exact = bool(torch.equal(ref_i, idx[sub]) and torch.equal(ref_d, dist[sub]))
            row = {"cloud": kind, "what": what, "points": n, "k": k, "repeat": repeat,
                   "index_total_s": t_all, "index_build_s": t_build, "index_query_s": t_query,
                   "index_bytes": index.memory_bytes, "peak_bytes_build_and_knn": peak,
                   "index_exact_4096": exact}
            del dist, idx
            if not args.no_dense:
                t_dense, (dd, di) = timed(lambda: dense_knn(p, p, k), repeat)
                row["pcops_knn_s"] = t_dense
                row["pcops_knn_exact_4096"] = bool(torch.equal(ref_i, di[sub]) and torch.equal(ref_d, dd[sub]))
                del dd, di
                r = float(ref_d[:, min(15, k - 1)].median())
                t_bi, (bd, bi) = timed(lambda: index.ball_query(p, r, 32), repeat)
                t_bd, (rd, ri) = timed(lambda: pcops.ball_query(p[None], p[None], r, 32), repeat)
                rd, ri = rd[0], ri[0]
                row.update({"ball_radius": r, "ball_K": 32, "index_ball_s": t_bi, "pcops_ball_query_s": t_bd,
                            "ball_equal": bool(torch.equal(bi, ri) and torch.equal(bd, rd))})
                del bd, bi, rd, ri
            if args.no_torch:
                rows.append(row)
                print(json.dumps(row), flush=True)
                del index, p
                torch.cuda.empty_cache()
                continue
            tq = min(args.torch_queries, n)
            qs = p[sub[:tq]] if tq <= sub.numel() else p[:tq]
            chunk = max(1, min(args.torch_chunk, int(2e9 // n)))
            t_torch, (td, ti) = timed(lambda: torch_knn(qs, p, k, chunk), max(1, repeat // 2))
            row.update({"torch_queries": tq, "torch_chunk": chunk, "torch_s_measured": t_torch,
                        "torch_s_extrapolated": t_torch * n / tq,
                        "torch_misplaced": misplaced(ti, ref_i[:tq]) if tq <= sub.numel() else None})
            rows.append(row)
            print(json.dumps(row), flush=True)
            del index, p, td, ti
            torch.cuda.empty_cache()
    write_probe("spatial-index-cuda", args, rows,
                {"cuda": torch.version.cuda, "device": torch.cuda.get_device_name()})

if __name__ == "__main__":
    main()
