#!/usr/bin/env python3
"""The ragged graph targets on one GPU: pcops.flat.knn_graph (k = 16) and pcops.flat.radius_graph
(r for about 16 neighbours, max_num_neighbors = 32) at 100k and 1M points, one cloud and 16
clouds, on CUDA, against plain PyTorch on the same GPU (chunked cdist + topk; chunked cdist +
mask keeping the 32 smallest reference indices), with CUDA events (median, inputs resident).
Every pcops CUDA result is checked edge for edge against the pcops CPU backend; the PyTorch
peers report the rows whose neighbour set differs from pcops'.

Usage: PYTHONPATH=python PCOPS_LIBRARY=<build>/python/pcops/_C.so python benchmarks/scripts/graph_probe_cuda.py \
           [--json out.json] [--reps 10] [--sizes 100k,1M]
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import time

import torch

import pcops
from probe_timing import cuda_median  # this directory
from pcops import flat


def shell(n: int, gen: torch.Generator) -> torch.Tensor:
    p = torch.randn(n, 3, generator=gen)
    p = p / p.norm(dim=-1, keepdim=True)
    return (p + 0.01 * torch.randn(n, 3, generator=gen)).contiguous()


def torch_knn_graph(x: torch.Tensor, batch: torch.Tensor, k: int, chunk: int = 4096) -> torch.Tensor:
    """Plain PyTorch: chunked cdist + topk(k + 1) per row, self excluded (same cloud only)."""
    rows, cols = [], []
    for s in range(0, x.shape[0], chunk):
        q = x[s:s + chunk]
        d = torch.cdist(q, x)
        d.masked_fill_(batch[s:s + chunk, None] != batch[None, :], float("inf"))
        idx = torch.arange(s, s + q.shape[0], device=x.device)
        d[torch.arange(q.shape[0], device=x.device), idx] = float("inf")
        nn = d.topk(k, dim=1, largest=False).indices
        rows.append(idx[:, None].expand(-1, k).reshape(-1))
        cols.append(nn.reshape(-1))
    return torch.stack([torch.cat(cols), torch.cat(rows)])  # source_to_target: [neighbour, centre]


def torch_radius_graph(x: torch.Tensor, batch: torch.Tensor, r: float, cap: int, chunk: int = 4096) -> torch.Tensor:
    """Plain PyTorch: chunked cdist, mask d < r (same cloud, no self), the cap smallest indices."""
    rows, cols = [], []
    n = x.shape[0]
    for s in range(0, n, chunk):
        q = x[s:s + chunk]
        m = (torch.cdist(q, x) < r) & (batch[s:s + chunk, None] == batch[None, :])
        idx = torch.arange(s, s + q.shape[0], device=x.device)
        m[torch.arange(q.shape[0], device=x.device), idx] = False
        # The first `cap` matches in index order: rank of each match within its row.
        rank = m.cumsum(1)
        keep = m & (rank <= cap)
        qi, ri = keep.nonzero(as_tuple=True)
        rows.append(qi + s)
        cols.append(ri)
    return torch.stack([torch.cat(cols), torch.cat(rows)])


def row_sets(edges: torch.Tensor, n: int) -> list:
    e = edges.cpu()
    order = torch.argsort(e[1] * n + e[0])
    e = e[:, order]
    counts = torch.bincount(e[1], minlength=n).tolist()
    return torch.split(e[0], counts)


def mismatched_rows(a: torch.Tensor, b: torch.Tensor, n: int, sample: int = 20000) -> int:
    sa, sb = row_sets(a, n), row_sets(b, n)
    step = max(1, n // sample)
    return sum(1 for i in range(0, n, step) if not torch.equal(sa[i], sb[i])) * step


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--sizes", default="100k,1M")
    args = ap.parse_args()
    sizes = [int(s[:-1]) * (1000 if s[-1] == "k" else 1_000_000) for s in args.sizes.split(",")]
    gen = torch.Generator().manual_seed(5)
    records = []
    for n in sizes:
        x = shell(n, gen)
        for clouds in (1, 16):
            batch = torch.repeat_interleave(torch.arange(clouds), n // clouds + (torch.arange(clouds) < n % clouds).long())
            # Sorted batch vector over interleaved points: every cloud spans the whole shell.
            xg, bg = x.cuda(), batch.cuda()
            # About 16 neighbours on the unit shell (pi r^2 n / (4 pi) = 16); the clouds of a batch
            # are interleaved samples of the same shell, so each has n / clouds points.
            r = 8.0 / (n / clouds) ** 0.5
            for op in ("knn_graph", "radius_graph"):
                if op == "knn_graph":
                    run = lambda xx, bb: flat.knn_graph(xx, 16, bb, loop=False)
                    peer = lambda: torch_knn_graph(xg, bg, 16)
                else:
                    run = lambda xx, bb: flat.radius_graph(xx, r, bb, loop=False, max_num_neighbors=32)
                    peer = lambda: torch_radius_graph(xg, bg, r, 32)
                t, got = cuda_median(lambda: run(xg, bg), args.reps)
                want = run(x, batch)
                exact = bool(torch.equal(got.cpu(), want))
                rec = {"op": op, "n": n, "clouds": clouds, "pcops_cuda_s": t, "equal_to_cpu": exact,
                       "edges": int(got.shape[1])}
                if op == "radius_graph":
                    rec["r"] = r
                    rec["mean_degree"] = got.shape[1] / n
                if n >= 1_000_000 and clouds > 1:
                    rec.update(torch_s=None, torch_error="not run (the same O(N^2) work as one cloud)")
                    records.append(rec)
                    print(f"{op:13s} N={n:>8d} clouds={clouds:2d}  pcops {t * 1e3:8.3f} ms  equal_cpu={exact}", flush=True)
                    continue
                try:
                    tp, pe = cuda_median(peer, 1 if n >= 1_000_000 else 3)
                    rec.update(torch_s=tp, torch_mismatched_rows=mismatched_rows(pe, got, n), ratio=tp / t)
                except torch.cuda.OutOfMemoryError:
                    rec.update(torch_s=None, torch_error="out of memory")
                records.append(rec)
                print(f"{op:13s} N={n:>8d} clouds={clouds:2d}  pcops {t * 1e3:8.3f} ms  equal_cpu={exact}  "
                      f"torch {rec.get('torch_s', 0) and rec['torch_s'] * 1e3 or float('nan'):9.3f} ms  "
                      f"mismatched={rec.get('torch_mismatched_rows')}", flush=True)
    if args.json:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
               "python": platform.python_version(), "pcops": pcops.__version__}
        with open(args.json, "w") as f:
            json.dump({"kind": "graph_probe_cuda", "commit": commit, "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
                       "environment": env, "results": records}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
