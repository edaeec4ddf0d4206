"""Nsight Compute helpers for the point_conv kernels: `run` calls one part of a layer on the
probe's cloud (the same as point_conv_probe.py: bunny00.off sampled to --points, kNN --k, 27
cells) --calls times, for ncu to profile one of the calls; `top` reads the per-instruction table
ncu writes from its report (`--page source --csv --print-source sass`) and prints the stall
reasons' totals and the instructions with the most stall samples, with their neighbours.

    ncu --clock-control none --section WarpStateStats --section SourceCounters \\
        --kernel-name regex:vvor_mma --launch-skip 2 --launch-count 1 -o gw \\
        python benchmarks/scripts/point_conv_ncu.py run --part grad_weights --channels 128
    ncu -i gw.ncu-rep --page source --csv --print-source sass > gw.csv
    python benchmarks/scripts/point_conv_ncu.py top gw.csv --rows 12

The later calls read the groupings the first one keeps, so --launch-skip 2 profiles a steady
call (`PCOPS_CUDA_POINT_CONV_FAST_GROUPING` and the other variables of docs/point_conv_kernels.md
choose the kernels as usual). `top` runs anywhere (it only reads the table).
"""

from __future__ import annotations

import argparse
import csv
import sys

PARTS = ("forward", "grad_features", "grad_weights")


def run(args):
    import torch

    import pcops  # noqa: F401  (registers the operators)
    from point_conv_kernels import layer_inputs, layer_parts  # this directory
    from point_conv_probe import probe_triplets  # this directory

    pts, triplets = probe_triplets(args.points, args.k, args.order)
    device = torch.device(args.device)
    triplets = triplets.to(device)
    n, c = pts.shape[0], args.channels
    inputs = layer_inputs(torch.Generator().manual_seed(0), n, c, c, 27, args.k, device, getattr(torch, args.dtype))
    fn = layer_parts(inputs, triplets, n, args.mode)[args.part]
    for _ in range(args.calls):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    print(f"{args.calls} calls of {args.part} at C = {c} ({n} points, {int(triplets.shape[0])} triplets)")


def read_table(path):
    """The header and rows of ncu's source page (the kernel's name line first, then the header)."""
    with open(path, newline="") as fh:
        rows = [r for r in csv.reader(fh) if r]
    for at, row in enumerate(rows):
        if "Address" in row and "Source" in row:
            return row, rows[at + 1:]
    raise ValueError(f"{path}: no ncu source table (a header with Address and Source)")


def top(args):
    header, rows = read_table(args.table)
    col = {name: i for i, name in enumerate(header)}
    samples = col.get("Warp Stall Sampling (All Samples)")
    if samples is None:
        raise ValueError("the table has no stall samples: profile with --section SourceCounters")
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]

    def num(row, name):
        try:
            return int(float(row[col[name]] or 0))
        except (ValueError, IndexError):
            return 0

    total = sum(num(r, header[samples]) for r in rows)
    print(f"{len(rows)} instructions, {total} stall samples")
    sums = sorted(((sum(num(r, h) for r in rows), h) for h in reasons), reverse=True)
    print("by reason: " + ", ".join(f"{h[6:]} {100 * v / max(total, 1):.1f} %" for v, h in sums if v))
    order = sorted(range(len(rows)), key=lambda i: -num(rows[i], header[samples]))[: args.rows]
    executed = "Instructions Executed"
    for i in order:
        r = rows[i]
        main = sorted(((num(r, h), h[6:]) for h in reasons), reverse=True)[:2]
        print(f"\n#{i}: {num(r, header[samples])} samples ({100 * num(r, header[samples]) / max(total, 1):.1f} %), "
              + ", ".join(f"{name} {v}" for v, name in main if v))
        for j in range(max(0, i - args.context), min(len(rows), i + args.context + 1)):
            mark = ">" if j == i else " "
            print(f"  {mark} {j:5d} {rows[j][col['Source']].strip()[:70]:70s} "
                  f"exec {num(rows[j], executed) if executed in col else '-'}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="call one part of a layer --calls times")
    r.add_argument("--part", choices=PARTS, default="forward")
    r.add_argument("--channels", type=int, default=128)
    r.add_argument("--points", type=int, default=165000)
    r.add_argument("--k", type=int, default=16)
    r.add_argument("--order", default="sampled", choices=["sampled", "morton"])
    r.add_argument("--calls", type=int, default=3)
    r.add_argument("--device", default="cuda")
    r.add_argument("--dtype", default="bfloat16", choices=["float32", "float16", "bfloat16"])
    r.add_argument("--mode", default="fast", choices=["exact", "fast"])
    t = sub.add_parser("top", help="summarize ncu's per-instruction table")
    t.add_argument("table")
    t.add_argument("--rows", type=int, default=10, help="instructions to show")
    t.add_argument("--context", type=int, default=2, help="neighbouring instructions shown beside each")
    args = ap.parse_args(argv)
    if args.command == "run":
        run(args)
    else:
        top(args)


if __name__ == "__main__":
    sys.exit(main())
