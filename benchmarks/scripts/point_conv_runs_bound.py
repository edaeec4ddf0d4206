"""What the fast MVMR would gain from one row per run (CUDA): a run is a destination row's
triplets of one kernel cell (at 165k points with kNN 16 and 27 cells, 2.64M triplets make 1.22M
runs of 2.16 on average). The fast forward and grad_features of the probe's triplets are timed
against the same kernels on the triplets deduplicated to one per run (by (i, k) for the forward,
(j, k) for grad_features), an upper bound on what summing a run's source rows before the
product could give (the products of a run's rows would then be one; the sums in float32 and the
rounding of the sum to 16 bits are not modelled). CUDA events, medians of 7, two rounds.

    PYTHONPATH=python PCOPS_LIBRARY=<build>/python/pcops/_C.so \\
        python benchmarks/scripts/point_conv_runs_bound.py [--channels 128,256,512]
"""

from __future__ import annotations

import argparse

import torch

from point_conv_probe import probe_triplets  # this directory


def one_per_run(t, col):
    """The first triplet (in t's order) of each (column col, k) pair."""
    key = t[:, col] * (int(t[:, 2].max()) + 1) + t[:, 2]
    uniq, inv = torch.unique(key, return_inverse=True)
    first = torch.full((uniq.numel(),), t.shape[0], dtype=torch.int64, device=t.device)
    first.scatter_reduce_(0, inv, torch.arange(t.shape[0], device=t.device), "amin")
    return t[first]


def median_ms(fn, repeat=7):
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeat):
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[repeat // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--points", type=int, default=165000)
    ap.add_argument("--k", type=int, default=16)
    ap.add_argument("--channels", default="128,256,512")
    args = ap.parse_args()
    pts, t = probe_triplets(args.points, args.k, "sampled")
    t = t.cuda()
    n = pts.shape[0]
    by_i, by_j = one_per_run(t, 0), one_per_run(t, 1)
    print(f"triplets {t.shape[0]}, runs by (i, k) {by_i.shape[0]}, by (j, k) {by_j.shape[0]}")
    gen = torch.Generator().manual_seed(0)
    for c in [int(x) for x in args.channels.split(",")]:
        f = (torch.rand(n, c, generator=gen) * 2 - 1).cuda().bfloat16()
        w = ((torch.rand(27, c, c, generator=gen) * 2 - 1) / (c * args.k) ** 0.5).cuda().bfloat16()
        g = (torch.rand(n, c, generator=gen) * 2 - 1).cuda().bfloat16()
        for _ in range(2):
            for name, tt in (("all triplets", t), ("one per (i, k)", by_i), ("one per (j, k)", by_j)):
                fwd = median_ms(lambda: torch.ops.pcops.point_conv(f, w, tt, n, "fast"))
                gf = median_ms(lambda: torch.ops.pcops._point_conv_backward(g, f, w, tt, n, True, False, "fast"))
                print(f"C {c} {name}: forward {fwd:.3f} ms, grad_features {gf:.3f} ms", flush=True)


if __name__ == "__main__":
    main()
