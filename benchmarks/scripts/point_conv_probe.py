"""Timing probe (CPU, or CUDA with --device cuda): pcops.point_conv (MVMR, deterministic) against
gather-GEMM-scatter in PyTorch (per kernel cell k: gather the input rows of k's triplets, one GEMM
with W_k, index_add_ into the output), forward and forward + backward of features and weights,
and forward + each gradient alone (the backward's parts).

Triplets: a real mesh of the data set sampled on its faces (--points), k nearest neighbours
(--k) and a 3 x 3 x 3 grid of kernel cells (27 matrices). Every time is the median of --repeat
runs after one warm-up (with --rounds R, pcops and the peer alternate in R such rounds and the
median of the rounds is recorded, each round's time beside it). The peer's grouping of the
triplets by kernel cell is made once, outside its timed calls, and timed alone as
peer_grouping_s. pcops' fast path on CUDA keeps its groupings with the triplets (made in the
warm-up call, pcops_kept_grouping_bytes of them after forward + backward, which the summaries add
to its peaks, as peer_grouping_bytes to the peer's); its times and peaks with the sorts in every call (PCOPS_POINT_CONV_KEEP=0)
are recorded beside as *_sorting_*. Beside the peer the max abs difference from pcops' output is
recorded.
On CUDA the peak allocated memory of each variant is recorded too (torch.cuda.max_memory_allocated
above the inputs; for forward + backward once with the copies of features and weights that take
the gradients made inside the measured call, as the timed calls make them, and once with them
made before, "peak_above_leaves": each side's own memory above its inputs). --dtype sets the features' and weights' dtype for both sides (the peer's GEMMs
then run on the tensor cores too), --mode pcops' mode ("fast": the tensor-core path for 16-bit
inputs); --no-backward times the forward only. --order morton renumbers the points along a Morton
(Z-order) curve first, as voxelised and serialised clouds come (neighbours then have near indices);
the default keeps the sampled order, where neighbours' indices are random. JSON goes to --out, else to
benchmarks/results/point-conv-probe[-cuda]-<date>-<commit>.json; --commit names the commit of a
tree copied without .git.

    PYTHONPATH=python PCOPS_LIBRARY=<build>/python/pcops/_C.so \
        python benchmarks/scripts/point_conv_probe.py [--points 20000] [--k 16] [--channels 32,64] \
            [--device cuda] [--dtype bfloat16 --mode fast]

ScanNet-like sizes on an H200: --device cuda --points 165000 --k 16 --channels 32,64,128,256,512
--dtype bfloat16 --mode fast.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import numpy as np
import torch

import pcops
from pcops import data as pdata
from pcops.bench.cases import conv_triplets, morton_order
from pcops.bench.peers import gather_gemm_scatter, point_conv_cells
from probe_timing import write_probe  # this directory


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def median_time(fn, repeat, device):
    fn()
    sync(device)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def rounds_time(fns, rounds, repeat, device):
    """Each of fns timed in `rounds` alternating rounds (fns[0], fns[1], ..., then again), each round
    the median of `repeat` runs: the medians over the rounds and every round's times, so that a
    drift of the machine between the first and the last call weighs on both sides alike."""
    per = [[] for _ in fns]
    for _ in range(rounds):
        for times, fn in zip(per, fns):
            times.append(median_time(fn, repeat, device))
    return [statistics.median(t) for t in per], per


def peak_bytes(fn, device):
    if device.type != "cuda":
        return None
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def write_results(stem: str, device, args, rows):
    """The rows as probe JSON (probe_timing.write_probe) named <stem>[-cuda], with the thread
    count, the processor, the device and the point_conv variables that pick kernels or
    groupings (PCOPS_CUDA_POINT_CONV_*, PCOPS_POINT_CONV_*; docs/cuda.md, docs/point_conv_kernels.md) as set for
    the run in the environment."""
    env = {"threads": torch.get_num_threads(), "processor": platform.processor(),
           "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
           "point_conv_variables": {k: v for k, v in sorted(os.environ.items())
                                    if k.startswith(("PCOPS_CUDA_POINT_CONV_", "PCOPS_POINT_CONV_"))}}
    write_probe(f"{stem}-cuda" if device.type == "cuda" else stem, args, rows, env)


def probe_triplets(points: int, k: int, order: str):
    """The probe's cloud and triplets: bunny00.off sampled to `points`, kNN `k`, 27 cells sized by
    the 90 % quantile of the k-th neighbour distance; `order` "morton" renumbers the points first."""
    cloud = None
    for root in pdata._candidates():
        if (root / "bunny00.off").is_file():
            cloud = pdata.load(root / "bunny00.off")
            break
    if cloud is None:
        raise SystemExit("bunny00.off not found; see docs/data.md")
    pts = pdata.sample_mesh(cloud.points, cloud.faces, points, seed=0).astype(np.float32)
    if order == "morton":
        pts = pts[morton_order(pts)]
    return torch.from_numpy(pts), conv_triplets(pts, k, 3)


def probe_arguments(description: str) -> argparse.ArgumentParser:
    """The options of the point_conv probes: the cloud (--points, --k, --order), the widths, the
    repeats, the device and the JSON's path and commit."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--points", type=int, default=20000)
    ap.add_argument("--k", type=int, default=16)
    ap.add_argument("--channels", default="32,64")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=1,
                    help="pcops and the peer timed in this many alternating rounds (medians of the rounds)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--order", default="sampled", choices=["sampled", "morton"])
    ap.add_argument("--out", default=None)
    ap.add_argument("--commit", default=None, help="the commit measured (a tree copied without .git)")
    return ap


def main():
    ap = probe_arguments(__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    ap.add_argument("--mode", default="exact", choices=["exact", "fast"])
    ap.add_argument("--no-backward", action="store_true")
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    device = torch.device(args.device)

    pts, triplets = probe_triplets(args.points, args.k, args.order)
    triplets = triplets.to(device)
    K = 27
    groups = point_conv_cells(triplets, K)  # the peer's grouping, outside its timed calls
    # ... and its time alone, recorded beside (pcops groups inside every call).
    grouping_s = median_time(lambda: point_conv_cells(triplets, K), args.repeat, device)
    n = pts.shape[0]
    rows = []
    gen = torch.Generator().manual_seed(0)
    from pcops.ops.point_conv import kept_grouping_bytes, sorting_in_every_call

    for c in [int(x) for x in args.channels.split(",")]:
        kept_grouping_bytes(release=True)  # this width's own
        f = (torch.rand(n, c, generator=gen) * 2 - 1).to(device, dtype)
        w = ((torch.rand(K, c, c, generator=gen) * 2 - 1) / (c * args.k) ** 0.5).to(device, dtype)
        g = torch.rand(n, c, generator=gen).to(device, dtype)


        def fwd_bwd(fn, features=True, weights=True):
            def run():
                fr, wr = f.clone().requires_grad_(features), w.clone().requires_grad_(weights)
                torch.autograd.grad(fn(fr, wr), [x for x in (fr, wr) if x.requires_grad], g)
            return run

        def ours(a, b):
            return pcops.point_conv(a, b, triplets, n, mode=args.mode)

        def peer(a, b):
            return gather_gemm_scatter(a, b, triplets, n, groups)

        ours_fb, peer_fb = fwd_bwd(ours), fwd_bwd(peer)

        def ours_fwd():
            return ours(f, w)

        def peer_fwd():
            return peer(f, w)
        ours_out, peer_out = ours_fwd().float(), peer_fwd().float()
        # The float64 value, to show each side's error.
        ref = gather_gemm_scatter(f.double(), w.double(), triplets, n, groups)
        flops = 2.0 * triplets.shape[0] * c * c
        (ours_f, peer_f), (ours_fr, peer_fr) = rounds_time([ours_fwd, peer_fwd], args.rounds, args.repeat, device)
        row = {
            "channels": c, "points": n, "triplets": int(triplets.shape[0]), "dtype": args.dtype,
            "mode": args.mode, "order": args.order,
            "pcops_forward_s": ours_f,
            "peer_forward_s": peer_f,
            "peer_grouping_s": grouping_s,
            "peer_max_abs_diff": float((ours_out - peer_out).abs().max()),
            "pcops_max_abs_err": float((ours_out.double() - ref).abs().max()),
            "peer_max_abs_err": float((peer_out.double() - ref).abs().max()),
            "max_abs_value": float(ref.abs().max()),
            "pcops_forward_peak_bytes": peak_bytes(ours_fwd, device),
            "peer_forward_peak_bytes": peak_bytes(peer_fwd, device),
        }
        del ref
        row["pcops_forward_tflops"] = flops / row["pcops_forward_s"] / 1e12
        row["peer_forward_tflops"] = flops / row["peer_forward_s"] / 1e12
        if args.rounds > 1:
            row["pcops_forward_rounds_s"], row["peer_forward_rounds_s"] = ours_fr, peer_fr
        if not args.no_backward:
            (ours_b, peer_b), (ours_br, peer_br) = rounds_time([ours_fb, peer_fb], args.rounds, args.repeat, device)
            row["pcops_forward_backward_s"], row["peer_forward_backward_s"] = ours_b, peer_b
            if args.rounds > 1:
                row["pcops_forward_backward_rounds_s"], row["peer_forward_backward_rounds_s"] = ours_br, peer_br
            row["pcops_forward_backward_peak_bytes"] = peak_bytes(ours_fb, device)
            row["peer_forward_backward_peak_bytes"] = peak_bytes(peer_fb, device)
            # The same with the leaves (the copies of features and weights that take the
            # gradients) made before the measurement: the operations' own memory above their inputs.
            for side, fn in (("pcops", ours), ("peer", peer)):
                fr, wr = f.clone().requires_grad_(), w.clone().requires_grad_()
                row[f"{side}_forward_backward_peak_above_leaves_bytes"] = peak_bytes(
                    lambda: torch.autograd.grad(fn(fr, wr), [fr, wr], g), device)
                del fr, wr
            row["pcops_kept_grouping_bytes"] = kept_grouping_bytes()
            # The peer's grouping, held across its calls too: its cells' index lists (views of
            # one argsort order, 8 bytes a triplet).
            row["peer_grouping_bytes"] = sum({r.untyped_storage().data_ptr(): r.untyped_storage().nbytes()
                                              for _, r in groups}.values())
            with sorting_in_every_call():
                row["pcops_forward_sorting_s"] = median_time(ours_fwd, args.repeat, device)
                row["pcops_forward_backward_sorting_s"] = median_time(ours_fb, args.repeat, device)
                row["pcops_forward_backward_sorting_peak_bytes"] = peak_bytes(ours_fb, device)
            # The backward's parts: forward + one gradient each (the other input not requiring it).
            for part, kw in (("grad_features", {"weights": False}), ("grad_weights", {"features": False})):
                row[f"pcops_forward_{part}_s"] = median_time(fwd_bwd(ours, **kw), args.repeat, device)
                row[f"peer_forward_{part}_s"] = median_time(fwd_bwd(peer, **kw), args.repeat, device)
        rows.append(row)
        print(json.dumps(row), flush=True)

    write_results("point-conv-probe", device, args, rows)


if __name__ == "__main__":
    main()
