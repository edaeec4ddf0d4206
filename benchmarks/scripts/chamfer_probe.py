"""Timing probe: pcops.chamfer_distance (CPU, float32, squared L2, mean/mean) against plain
PyTorch (cdist + min, one cloud at a time) and SciPy cKDTree (build + query, both directions).

Every time is the median of --repeat runs in this process (trees include their build time).
Beside each peer the max abs difference of the loss from pcops' is printed. Two cases:
B=4 clouds of N vs N points (pcops, PyTorch, SciPy) and B=1 of L vs L (pcops and SciPy only:
a dense L x L matrix does not fit).

    PYTHONPATH=python PCOPS_LIBRARY=<build>/python/pcops/_C.so \
        python benchmarks/scripts/chamfer_probe.py                   # 4x16384, 1x1M
    python benchmarks/scripts/chamfer_probe.py --batch-n 2048 --large-n 100000 --repeat 3
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch


def median_time(fn, repeat):
    out = fn()  # warm-up (and the value compared)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def torch_chamfer(x, y):
    """cdist + min per cloud (squared), mean over points, mean over the batch."""
    total = 0.0
    for b in range(x.shape[0]):
        d = torch.cdist(x[b], y[b]) ** 2
        total += float(d.min(1).values.mean() + d.min(0).values.mean())
    return total / x.shape[0]


def scipy_chamfer(x, y):
    from scipy.spatial import cKDTree

    total = 0.0
    for b in range(x.shape[0]):
        xb, yb = x[b].numpy().astype(np.float64), y[b].numpy().astype(np.float64)
        dx, _ = cKDTree(yb).query(xb, k=1, workers=-1)
        dy, _ = cKDTree(xb).query(yb, k=1, workers=-1)
        total += float((dx ** 2).mean() + (dy ** 2).mean())
    return total / x.shape[0]


def pcops_chamfer(x, y):
    import pcops

    return float(pcops.chamfer_distance(x, y)[0])


def run_case(name, b, n, repeat, peers, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(b, n, 3, generator=g)
    y = torch.rand(b, n, 3, generator=g)
    t_p, v_p = median_time(lambda: pcops_chamfer(x, y), repeat)
    print(f"{name}: B={b} N={n} vs {n} float32 (threads {torch.get_num_threads()})")
    print(f"  pcops.chamfer_distance   median {t_p * 1e3:10.2f} ms   loss {v_p:.9g}")
    for peer, fn in peers:
        t, v = median_time(lambda: fn(x, y), repeat)
        print(f"  {peer:<24} median {t * 1e3:10.2f} ms   loss {v:.9g}   "
              f"max abs diff {abs(v - v_p):.3g}   pcops speed-up {t / t_p:.2f}x")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch-n", type=int, default=16384, help="points per cloud, B=4 case")
    ap.add_argument("--large-n", type=int, default=1_000_000, help="points per cloud, B=1 case")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    run_case("batched", 4, args.batch_n, args.repeat,
             [("torch cdist+min", torch_chamfer), ("scipy cKDTree", scipy_chamfer)], args.seed)
    run_case("large", 1, args.large_n, args.repeat, [("scipy cKDTree", scipy_chamfer)], args.seed + 1)


if __name__ == "__main__":
    main()
