"""Probe: point_conv triplet construction (pcops.point_conv_triplets) against the same formula in
PyTorch tensor operations, on kNN and padded ball-query neighbourhoods of a real cloud.

The cloud is bunny00.off sampled to --points (as point_conv_probe.py); neighbourhoods: every point's
--k nearest neighbours, and a ball query of radius `extent` (the 90 % quantile of the k-th
neighbour distance) with --slots slots (padding where a ball holds fewer); 3^3 kernel cells over
[-extent, extent]^3. pcops builds the triplets natively (the CPU: one pass over chunks of centres;
CUDA: the input checks, a flag per slot, a scan, the count read back, a fill), the formula in
elementwise torch operations. Medians of --repeat synchronised runs; every run of pcops must equal
the formula's rows bitwise (`equal` in the JSON).

    PYTHONPATH=python PCOPS_LIBRARY=<build>/python/pcops/_C.so \\
        python benchmarks/scripts/point_conv_triplets_probe.py --points 165000
"""

from __future__ import annotations

import argparse
import platform

import torch

import pcops
from pcops.ops.point_conv import _triplets_reference
from point_conv_probe import median_time, probe_triplets  # this directory
from probe_timing import write_probe  # this directory


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=165000)
    ap.add_argument("--k", type=int, default=16)
    ap.add_argument("--slots", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default=None)
    ap.add_argument("--commit", default=None, help="the commit measured (a tree copied without .git)")
    args = ap.parse_args()
    device = torch.device(args.device)
    pts, _ = probe_triplets(args.points, args.k, "sampled")
    pts = pts.to(device)
    dist, knn_idx = pcops.knn(pts[None], pts[None], args.k)
    extent = float(torch.quantile(dist[0, :, -1].float().cpu(), 0.9))
    _, ball_idx = pcops.ball_query(pts[None], pts[None], extent, args.slots)
    rows = []
    for name, nb in (("knn", knn_idx[0]), ("ball_query", ball_idx[0])):
        ours = pcops.point_conv_triplets(pts, pts, nb, extent, 3)
        ref = _triplets_reference(pts, pts, nb, extent, 3)
        row = {
            "neighbourhoods": name, "points": args.points, "slots": int(nb.shape[1]),
            "triplets": int(ours.shape[0]), "extent": extent,
            "pcops_s": median_time(lambda: pcops.point_conv_triplets(pts, pts, nb, extent, 3), args.repeat, device),
            "tensor_ops_s": median_time(lambda: _triplets_reference(pts, pts, nb, extent, 3), args.repeat, device),
            "equal": bool(torch.equal(ours, ref)),
        }
        rows.append(row)
        print(row, flush=True)
    env = {"threads": torch.get_num_threads(), "processor": platform.processor(),
           "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu"}
    write_probe("point-conv-triplets-probe-cuda" if device.type == "cuda" else "point-conv-triplets-probe",
                args, rows, env)


if __name__ == "__main__":
    main()
