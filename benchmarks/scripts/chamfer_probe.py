"""Timing probe: pcops.chamfer_distance (float32, squared L2, mean/mean) on the CPU and on CUDA,
forward and forward + backward, against plain PyTorch (cdist + min) and SciPy cKDTree (CPU,
build + query, both directions, forward only).

Every time is the median (or with --stat min the minimum) of --repeat synchronized runs in this process, inputs resident on the
device (CUDA: CUDA events). Beside each peer the loss difference from pcops' is reported. Cases:
B=4 clouds of N vs N points, and B=1 of L vs L, where PyTorch's peer is chunked (rows of
--chunk queries against all points: a dense L x L matrix does not fit) and its backward
recomputes the distances of the selected pairs (cdist's own backward would need every chunk's
matrix). PyTorch on the CPU is skipped for the large case (hours). --json writes every number
with the environment and the git commit.

"pcops (unfused)" is chamfer_distance with its fused operators (pair distance, reductions)
swapped for the unfused formulas (a gather and one elementwise operation per coordinate, then
torch reductions: the same bits, the implementation before the fused operators). With --count-ops, the torch operators dispatched per
call (forward, and forward + backward) are counted for both, in total and without views and
allocations (the operators that run a kernel).

    PYTHONPATH=python PCOPS_LIBRARY=<build>/python/pcops/_C.so \
        python benchmarks/scripts/chamfer_probe.py --device cuda --json out/chamfer.json
    python benchmarks/scripts/chamfer_probe.py --device cpu --batch-n 2048 --large-n 100000 --repeat 3
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import platform
import statistics
import subprocess
import time
from pathlib import Path

import numpy as np
import torch


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


STAT = statistics.median  # --stat min: the least-disturbed run on a shared machine


def median_time(fn, repeat, device):
    out = fn()  # warm-up (and the value compared)
    times = []
    for _ in range(repeat):
        _sync(device)
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return STAT(times), out


# ---------------------------------------------------------------------------------------------
# Implementations: each returns the loss (a float after .item() outside the timed region).


def pcops_forward(x, y):
    import pcops

    return pcops.chamfer_distance(x, y)[0]


def pcops_backward(x, y):
    import pcops

    a, b = x.detach().requires_grad_(True), y.detach().requires_grad_(True)
    loss = pcops.chamfer_distance(a, b)[0]
    loss.backward()
    return loss.detach()


@contextlib.contextmanager
def unfused():
    """chamfer_distance with the unfused pair-distance formula instead of the fused operator."""
    from pcops.ops import chamfer_distance as mod

    class Unfused:
        @staticmethod
        def apply(x, y, idx, norm):
            return mod._masked_pair_distance(x, y, idx, norm)

    class UnfusedReduce:
        @staticmethod
        def apply(*args):
            return mod._reduce_formula(*args)

    saved = mod._PairDistance, mod._Reduce, mod._Chamfer
    mod._PairDistance, mod._Reduce, mod._Chamfer = Unfused, UnfusedReduce, mod._Composed
    try:
        yield
    finally:
        mod._PairDistance, mod._Reduce, mod._Chamfer = saved


def unfused_forward(x, y):
    with unfused():
        return pcops_forward(x, y)


def unfused_backward(x, y):
    with unfused():
        return pcops_backward(x, y)


_NO_KERNEL = {"aten::empty", "aten::empty_like", "aten::new_empty", "aten::empty_strided",
              "aten::new_empty_strided", "aten::detach", "aten::lift_fresh", "aten::_to_copy_noop"}


def count_ops(fn, x, y):
    """(total, kernels, names): torch operators dispatched by fn(x, y); kernels leaves out views
    and allocations."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counter(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = collections.Counter()
            self.kernels = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func._schema.name
            self.ops[name] += 1
            if not func.is_view and name not in _NO_KERNEL:
                self.kernels += 1
            return func(*args, **(kwargs or {}))

    with Counter() as c:
        fn(x, y)
    return sum(c.ops.values()), c.kernels, dict(c.ops)


def torch_forward(x, y):
    """cdist + min (squared), mean over points, mean over the batch."""
    d = torch.cdist(x, y) ** 2
    return (d.min(2).values.mean(1) + d.min(1).values.mean(1)).mean()


def torch_backward(x, y):
    a, b = x.detach().requires_grad_(True), y.detach().requires_grad_(True)
    loss = torch_forward(a, b)
    loss.backward()
    return loss.detach()


def _chunked_argmin(q, r, chunk):
    with torch.no_grad():
        return torch.cat([torch.cdist(q[:, i:i + chunk], r).argmin(2) for i in range(0, q.shape[1], chunk)], 1)


def torch_chunked(x, y, chunk, backward):
    """cdist + argmin in row chunks; the loss from the selected pairs (differentiable)."""
    a, b = x.detach().requires_grad_(backward), y.detach().requires_grad_(backward)
    ix, iy = _chunked_argmin(a, b, chunk), _chunked_argmin(b, a, chunk)
    nx = torch.gather(b, 1, ix[..., None].expand(-1, -1, 3))
    ny = torch.gather(a, 1, iy[..., None].expand(-1, -1, 3))
    loss = (((a - nx) ** 2).sum(2).mean(1) + ((b - ny) ** 2).sum(2).mean(1)).mean()
    if backward:
        loss.backward()
    return loss.detach()


def scipy_forward(x, y):
    from scipy.spatial import cKDTree

    total = 0.0
    for b in range(x.shape[0]):
        xb, yb = x[b].numpy().astype(np.float64), y[b].numpy().astype(np.float64)
        dx, _ = cKDTree(yb).query(xb, k=1, workers=-1)
        dy, _ = cKDTree(xb).query(yb, k=1, workers=-1)
        total += float((dx ** 2).mean() + (dy ** 2).mean())
    return torch.tensor(total / x.shape[0], dtype=torch.float64)


# ---------------------------------------------------------------------------------------------


def run_case(name, b, n, device, repeat, seed, chunk, large, peers=True):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(b, n, 3, generator=g).to(device)
    y = torch.rand(b, n, 3, generator=g).to(device)
    rows = []
    impls = [("pcops", "forward", pcops_forward), ("pcops", "forward+backward", pcops_backward),
             ("pcops (unfused)", "forward", unfused_forward),
             ("pcops (unfused)", "forward+backward", unfused_backward)]
    if not peers:
        pass
    elif not large:
        impls.append(("torch cdist+min", "forward", torch_forward))
        if device.type == "cuda" or b * n * n <= 1 << 28:  # the CPU backward of 4 x 16k^2: minutes
            impls.append(("torch cdist+min", "forward+backward", torch_backward))
    elif device.type == "cuda":
        impls += [("torch cdist+min (chunked)", "forward", lambda p, q: torch_chunked(p, q, chunk, False)),
                  ("torch cdist+min (chunked)", "forward+backward", lambda p, q: torch_chunked(p, q, chunk, True))]
    if device.type == "cpu" and peers:
        impls.append(("scipy cKDTree", "forward", scipy_forward))
    print(f"{name}: B={b} N={n} vs {n} float32 on {device} (CPU threads {torch.get_num_threads()})")
    ref = {}
    for impl, mode, fn in impls:
        try:
            t, v = median_time(lambda: fn(x, y), repeat, device)
        except torch.OutOfMemoryError as e:  # the dense peer at sizes it cannot hold
            print(f"  {impl:<28} {mode:<17} out of memory ({str(e).splitlines()[0][:60]})")
            rows.append(dict(case=name, device=str(device), impl=impl, mode=mode, error="out of memory"))
            continue
        loss = float(v)
        if impl == "pcops":
            ref[mode] = (t, loss)
        base_t, base_loss = ref.get(mode, ref.get("forward", (t, loss)))
        row = dict(case=name, device=str(device), batch=b, points=n, impl=impl, mode=mode, median_s=t, loss=loss,
                   loss_abs_diff_vs_pcops=abs(loss - base_loss), pcops_speedup=t / base_t)
        rows.append(row)
        print(f"  {impl:<28} {mode:<17} {STAT.__name__:>6} {t * 1e3:10.3f} ms   loss {loss:.9g}   "
              f"diff {row['loss_abs_diff_vs_pcops']:.3g}   pcops speed-up {row['pcops_speedup']:.2f}x")
    return rows


def op_counts(device, seed):
    """Torch operators per chamfer_distance call (float32, norm 2, mean/mean), fused and unfused."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(4, 1024, 3, generator=g).to(device)
    y = torch.rand(4, 1024, 3, generator=g).to(device)
    rows = []
    for impl, mode, fn in [("pcops", "forward", pcops_forward), ("pcops", "forward+backward", pcops_backward),
                           ("pcops (unfused)", "forward", unfused_forward),
                           ("pcops (unfused)", "forward+backward", unfused_backward)]:
        total, kernels, names = count_ops(fn, x, y)
        rows.append(dict(case="op count", device=str(device), impl=impl, mode=mode, ops=total, kernel_ops=kernels,
                         by_name=names))
        print(f"  {impl:<28} {mode:<17} {total:4d} torch operators, {kernels:4d} running a kernel")
    return rows


def after_search(device, b, n, repeat, seed):
    """Time of everything but the two searches (pair distances, reductions, their backwards), the
    neighbour indices given: what the fused operators replace."""
    from pcops.ops import chamfer_distance as mod

    g = torch.Generator().manual_seed(seed)
    x = torch.rand(b, n, 3, generator=g).to(device)
    y = torch.rand(b, n, 3, generator=g).to(device)
    ix = torch.ops.pcops.nearest_neighbor(x, y, None, None, 2)
    iy = torch.ops.pcops.nearest_neighbor(y, x, None, None, 2)

    def step():
        a, c = x.detach().requires_grad_(True), y.detach().requires_grad_(True)
        cx = mod._PairDistance.apply(a, c, ix, 2)
        cy = mod._PairDistance.apply(c, a, iy, 2)
        loss = mod._Reduce.apply(cx, cy, None, None, True, 2)
        loss.backward()
        return loss.detach()

    rows = []
    print(f"after the search: B={b} N={n} float32 on {device}, forward + backward")
    for impl, ctx in (("pcops", contextlib.nullcontext), ("pcops (unfused)", unfused)):
        with ctx():
            t, v = median_time(step, repeat, device)
        rows.append(dict(case="after search", device=str(device), batch=b, points=n, impl=impl,
                         mode="forward+backward", median_s=t, loss=float(v)))
        print(f"  {impl:<28} {STAT.__name__:>6} {t * 1e3:10.3f} ms   loss {float(v):.9g}")
    return rows


def environment():
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).resolve().parent, check=False).stdout.strip()
    except OSError:
        commit = ""
    env = dict(python=platform.python_version(), torch=torch.__version__, machine=platform.machine(),
               cpu_threads=torch.get_num_threads(), git_commit=commit)
    if torch.cuda.is_available():
        env.update(cuda=torch.version.cuda, gpu=torch.cuda.get_device_name())
    return env


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cpu", "cuda", "both"], default="both")
    ap.add_argument("--batch-n", type=int, default=16384, help="points per cloud, B=4 case")
    ap.add_argument("--large-n", type=int, default=1_000_000, help="points per cloud, B=1 case")
    ap.add_argument("--chunk", type=int, default=8192, help="query rows per cdist chunk (large case)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--count-ops", action="store_true", help="also count the torch operators per call")
    ap.add_argument("--skip-large", action="store_true", help="only the B=4 case")
    ap.add_argument("--skip-peers", action="store_true", help="only pcops (fused and unfused)")
    ap.add_argument("--stat", choices=["median", "min"], default="median", help="statistic of the repeats")
    args = ap.parse_args()
    global STAT
    STAT = min if args.stat == "min" else statistics.median
    devices = ["cpu", "cuda"] if args.device == "both" else [args.device]
    if "cuda" in devices and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device")
    rows = []
    for dev in map(torch.device, devices):
        rows += run_case("batched", 4, args.batch_n, dev, args.repeat, args.seed, args.chunk, large=False,
                         peers=not args.skip_peers)
        rows += after_search(dev, 4, args.batch_n, args.repeat, args.seed)
        if args.count_ops:
            print(f"operators per call on {dev}:")
            rows += op_counts(dev, args.seed)
        if not args.skip_large:
            rows += run_case("large", 1, args.large_n, dev, args.repeat, args.seed + 1, args.chunk, large=True,
                             peers=not args.skip_peers)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(dict(environment=environment(), args=vars(args) | {"json": args.json.name},
                                             results=rows), indent=2))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
