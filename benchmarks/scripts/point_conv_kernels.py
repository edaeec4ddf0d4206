"""Kernel sweep of the exact point_conv (CUDA): each part alone (forward, grad_features,
grad_weights) under every kernel choice the variables name, with a bitwise check that every
choice gives the same result (they implement one contract).

The CUDA backend picks its kernels by default; PCOPS_CUDA_POINT_CONV_MVMR (forward and
grad_features: slices, slices-wide, cells, tiles, rows) and PCOPS_CUDA_POINT_CONV_VVOR
(grad_weights: 1, 2, 4, 2x4, 4x4, mixed) force one (docs/point_conv_kernels.md). --in-channels sets
the layers' input channels (else as many as the output channels). This script times each part
with each choice of --mvmr / --vvor ("default" leaves the variable unset) on the probe's cloud (the same as
point_conv_probe.py: bunny00.off sampled to --points, kNN --k, 27 cells), medians of --repeat
CUDA-event times after a warm-up, and records the weight gradient's piece length (the contract's
L, pcops.bench.oracle.vvor_piece_length). On the CPU the variables change nothing; the script
still runs there (every choice then times the same code). Each row carries a digest of the part's
result (its bits), by which point_conv_builds.py compares builds run in separate processes.
JSON goes to --out, else to
benchmarks/results/point-conv-kernels[-cuda]-<date>-<commit>.json.

    PYTHONPATH=python PCOPS_LIBRARY=<build>/python/pcops/_C.so \\
        python benchmarks/scripts/point_conv_kernels.py --device cuda --points 165000 \\
            --channels 32,64,128,256 --vvor default,1,2,2x4 --mvmr default,cells,rows

--dtype bfloat16 --mode fast times the tensor-core path's parts instead; there --mvmr names
PCOPS_CUDA_POINT_CONV_CONFIG shapes (forward and grad_features, e.g. 128x128x64x64x2w) and --vvor
PCOPS_CUDA_POINT_CONV_FAST_VVOR choices (grad_weights: mma, wgmma, wgmma256). --rounds repeats
the choices in alternating rounds (a row each).

    python benchmarks/scripts/point_conv_kernels.py --device cuda --points 165000 \
        --channels 128,256,512 --dtype bfloat16 --mode fast --vvor mma,wgmma,wgmma256 --rounds 2

--grouping segmented,packed repeats everything under each PCOPS_CUDA_POINT_CONV_FAST_GROUPING
choice (the fast path's sort of the triplets; "default" unset), a row each; --sum-swizzle 0,1 the
same for PCOPS_CUDA_POINT_CONV_SUM_SWIZZLE (the fast MVMR's tile sums swizzled in shared memory)
and --sum-pairs 0,1 for PCOPS_CUDA_POINT_CONV_SUM_PAIRS (the wgmma MVMR's sums of runs crossing
between warps ordered by a barrier of the two warps, or by the block's turns with 0); --bulk-w
0,1 for PCOPS_CUDA_POINT_CONV_BULK_W (the wgmma MVMR's weight stages bulk-copied from images
packed ahead, or loaded row by row with 0).
--profile prints, for every part and choice, the kernels of --repeat calls and their times
(torch.profiler; after the timed calls, so the groupings kept by then are read, not made).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os

import torch

from pcops.bench.oracle import vvor_piece_length
from point_conv_probe import probe_arguments, probe_triplets, write_results  # this directory
from probe_timing import cpu_median, cuda_median  # this directory

VARIABLES = {"exact": {"mvmr": "PCOPS_CUDA_POINT_CONV_MVMR", "vvor": "PCOPS_CUDA_POINT_CONV_VVOR"},
             "fast": {"mvmr": "PCOPS_CUDA_POINT_CONV_CONFIG", "vvor": "PCOPS_CUDA_POINT_CONV_FAST_VVOR"}}


# The variable kind (VARIABLES) that picks each part's kernels.
KINDS = {"forward": "mvmr", "grad_features": "mvmr", "grad_weights": "vvor"}


def layer_inputs(gen, n, c, ci, K, k, device, dtype):
    """A layer's features [n, ci], weights [K, c, ci] (scaled by 1 / sqrt(ci k)) and upstream
    gradient [n, c], uniform in [-1, 1) from gen, in that order."""
    f = (torch.rand(n, ci, generator=gen) * 2 - 1).to(device, dtype)
    w = ((torch.rand(K, c, ci, generator=gen) * 2 - 1) / (ci * k) ** 0.5).to(device, dtype)
    g = (torch.rand(n, c, generator=gen) * 2 - 1).to(device, dtype)
    return f, w, g


def layer_parts(inputs, triplets, n, mode):
    """The layer's parts, each a call giving its result: forward, grad_features, grad_weights."""
    f, w, g = inputs
    backward = torch.ops.pcops._point_conv_backward
    return {"forward": lambda: torch.ops.pcops.point_conv(f, w, triplets, n, mode),
            "grad_features": lambda: backward(g, f, w, triplets, n, True, False, mode)[0],
            "grad_weights": lambda: backward(g, f, w, triplets, n, False, True, mode)[1]}


def digest(t: torch.Tensor) -> str:
    """The first 16 hex digits of the SHA-256 of a result's bytes (its bits, for comparing runs in
    separate processes: point_conv_builds.py)."""
    return hashlib.sha256(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()[:16]


def timed(fn, repeat, device):
    """Median seconds of `repeat` calls after one warm-up call (CUDA events on the GPU), and the
    last result."""
    return cuda_median(fn, repeat) if device.type == "cuda" else cpu_median(fn, repeat)


# The fast path's switches each run repeats under (option and row key, variable, its values).
SWITCHES = {"grouping": ("PCOPS_CUDA_POINT_CONV_FAST_GROUPING", "segmented, packed"),
            "sum_swizzle": ("PCOPS_CUDA_POINT_CONV_SUM_SWIZZLE", "0, 1"),
            "sum_pairs": ("PCOPS_CUDA_POINT_CONV_SUM_PAIRS", "0, 1"),
            "bulk_w": ("PCOPS_CUDA_POINT_CONV_BULK_W", "0, 1")}


def kernel_table(fn, repeat):
    """The kernels (and CPU operators) of `repeat` calls of fn, by torch.profiler, as a table."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities) as prof:
        for _ in range(repeat):
            fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    key = "cuda_time_total" if torch.cuda.is_available() else "cpu_time_total"
    return prof.key_averages().table(sort_by=key, row_limit=10, max_name_column_width=80)


def with_choices(choices, fn):
    """fn() with each variable of `choices` set to its choice ("default": unset), restored after."""
    old = {variable: os.environ.get(variable) for variable in choices}
    for variable, choice in choices.items():
        if choice == "default":
            os.environ.pop(variable, None)
        else:
            os.environ[variable] = choice
    try:
        return fn()
    finally:
        for variable, value in old.items():
            if value is None:
                os.environ.pop(variable, None)
            else:
                os.environ[variable] = value


def main():
    ap = probe_arguments(__doc__.splitlines()[0])
    ap.add_argument("--mvmr", default="default", help="comma-separated choices for forward and grad_features")
    ap.add_argument("--vvor", default="default", help="comma-separated choices for grad_weights")
    ap.add_argument("--in-channels", type=int, default=0,
                    help="input channels of every layer (0: as many as its output channels, --channels)")
    for key, (variable, values) in SWITCHES.items():
        ap.add_argument("--" + key.replace("_", "-"), default="default",
                        help=f"comma-separated {variable} choices ({values})")
    ap.add_argument("--profile", action="store_true", help="print each part's kernels (torch.profiler)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    ap.add_argument("--mode", default="exact", choices=["exact", "fast"],
                    help="fast: the tensor-core kernels (16-bit --dtype, CUDA); --mvmr then names "
                         "PCOPS_CUDA_POINT_CONV_CONFIG shapes, --vvor PCOPS_CUDA_POINT_CONV_FAST_VVOR choices")
    args = ap.parse_args()
    if args.mode == "fast" and (args.device != "cuda" or args.dtype == "float32"):
        ap.error("--mode fast needs --device cuda and a 16-bit --dtype")
    dtype, mode = getattr(torch, args.dtype), args.mode
    device = torch.device(args.device)
    pts, triplets = probe_triplets(args.points, args.k, args.order)
    triplets = triplets.to(device)
    n, K, T = pts.shape[0], 27, int(triplets.shape[0])
    rows = []
    gen = torch.Generator().manual_seed(0)
    for c in [int(x) for x in args.channels.split(",")]:
        ci = args.in_channels or c
        parts = layer_parts(layer_inputs(gen, n, c, ci, K, args.k, device, dtype), triplets, n, mode)
        for part, fn in parts.items():
            kind = KINDS[part]
            first = None
            variable = VARIABLES[mode][kind]
            for rnd in range(args.rounds):
                choices = [getattr(args, key).split(",") for key in SWITCHES] + [getattr(args, kind).split(",")]
                for *switched, choice in itertools.product(*choices):
                    switches = dict(zip(SWITCHES, switched))

                    def run(fn=fn, switches=switches, choice=choice):
                        result = timed(fn, args.repeat, device)
                        if args.profile:
                            print(f"== C={c} {part} {variable}={choice} "
                                  + " ".join(f"{k}={v}" for k, v in switches.items()), flush=True)
                            print(kernel_table(fn, args.repeat), flush=True)
                        return result

                    seconds, out = with_choices({SWITCHES[k][0]: v for k, v in switches.items()} | {variable: choice},
                                                run)
                    if first is None:
                        first = out
                    row = {"channels": c, "in_channels": ci, "points": n, "triplets": T,
                           "order": args.order, "dtype": args.dtype, "mode": mode, "part": part,
                           "round": rnd, **switches, "variable": variable, "choice": choice,
                           "seconds": seconds, "same_bits_as_first": bool(torch.equal(out, first)),
                           "digest": digest(out),
                           "piece_length": vvor_piece_length(T, c, ci)}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    write_results("point-conv-kernels", device, args, rows)


if __name__ == "__main__":
    main()
