"""Where the fast point_conv's time goes, kernel by kernel (CUDA): the torch profiler over the
forward and grad_weights (mode="fast", bfloat16) of the probe's cloud (bunny00.off sampled to
--points, kNN --k, 27 cells), with the triplets in kNN order and shuffled, under each grouping of
the triplets (PCOPS_CUDA_POINT_CONV_FAST_GROUPING=segmented / packed). Prints the kernels' mean
device time per call of the pair, largest first.

    PYTHONPATH=python PCOPS_LIBRARY=<build>/python/pcops/_C.so \\
        python benchmarks/scripts/point_conv_grouping_profile.py [--points 165000] [--channels 32]
"""

from __future__ import annotations

import argparse
import os

import torch
from torch.profiler import ProfilerActivity, profile

from point_conv_probe import probe_triplets  # this directory


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--points", type=int, default=165000)
    ap.add_argument("--k", type=int, default=16)
    ap.add_argument("--channels", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args()
    pts, t = probe_triplets(args.points, args.k, "sampled")
    t = t.cuda()
    n, c = pts.shape[0], args.channels
    gen = torch.Generator().manual_seed(0)
    f = (torch.rand(n, c, generator=gen) * 2 - 1).cuda().bfloat16()
    w = ((torch.rand(27, c, c, generator=gen) * 2 - 1) / (c * args.k) ** 0.5).cuda().bfloat16()
    g = (torch.rand(n, c, generator=gen) * 2 - 1).cuda().bfloat16()
    shuffled = t[torch.randperm(t.shape[0], generator=gen).cuda()].contiguous()
    for order, tt in (("kNN order", t), ("shuffled", shuffled)):
        for grouping in ("segmented", "packed"):
            os.environ["PCOPS_CUDA_POINT_CONV_FAST_GROUPING"] = grouping

            def run():
                torch.ops.pcops.point_conv(f, w, tt, n, "fast")
                torch.ops.pcops._point_conv_backward(g, f, w, tt, n, False, True, "fast")

            for _ in range(3):
                run()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(args.repeat):
                    run()
                torch.cuda.synchronize()
            print(f"== {order}, {grouping}")
            rows = sorted(((e.key, e.device_time_total / args.repeat, e.count // args.repeat)
                           for e in prof.key_averages()), key=lambda r: -r[1])
            for key, us, count in rows[:args.top]:
                print(f"  {us:8.1f} us  x{count}  {key[:100]}")
    os.environ.pop("PCOPS_CUDA_POINT_CONV_FAST_GROUPING", None)


if __name__ == "__main__":
    main()
