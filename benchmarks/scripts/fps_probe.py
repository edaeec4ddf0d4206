#!/usr/bin/env python3
"""Furthest point sampling probe: pcops (torch.ops.pcops.furthest_point_sample) against the peers,
in one process, with medians of repeated runs and mismatch counts against the exact oracle.

Peers: every fpsample method (fps_sampling, fps_npdu_sampling, fps_npdu_kdtree_sampling,
bucket_fps_kdtree_sampling, bucket_fps_kdline_sampling at h=7 and h=9), Open3D
farthest_point_down_sample, and a plain PyTorch loop.

mismatch = output slots whose index differs from the exact oracle (the contract evaluated with
float32 torch elementwise operations, no fused multiply-add). Open3D returns points, not indices:
its count is the number of oracle points missing from its output.

Usage:
    PYTHONPATH=python PCOPS_LIBRARY=<build>/python/pcops/_C.so python benchmarks/scripts/fps_probe.py \
        [--sizes 100000,1000000] [--samples 1024] [--reps 7] [--data DIR] [--json out.json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np
import torch

import pcops  # noqa: F401  (registers torch.ops.pcops)

# --------------------------------------------------------------------------------------------
# Clouds


def sphere_shell(n, rng):
    p = rng.normal(size=(n, 3))
    p /= np.linalg.norm(p, axis=1, keepdims=True)
    p += 0.01 * rng.normal(size=p.shape)
    return p.astype(np.float32)


def uniform_cube(n, rng):
    return rng.uniform(-1.0, 1.0, size=(n, 3)).astype(np.float32)


def sort_spatially(p):
    """Orders points along a Morton curve (10 bits per axis), as scanners and tilers often do."""
    lo, hi = p.min(0), p.max(0)
    q = ((p - lo) / np.maximum(hi - lo, 1e-30) * 1023).astype(np.uint64)
    code = np.zeros(len(p), np.uint64)
    for bit in range(10):
        for d in range(3):
            code |= ((q[:, d] >> np.uint64(bit)) & np.uint64(1)) << np.uint64(3 * bit + d)
    return np.ascontiguousarray(p[np.argsort(code, kind="stable")])


def read_ply(path):
    with open(path, "rb") as f:
        header = []
        while True:
            line = f.readline().decode("ascii", "replace").strip()
            header.append(line)
            if line == "end_header":
                break
        fmt = next(h.split()[1] for h in header if h.startswith("format"))
        n, props, in_vertex = 0, [], False
        for h in header:
            w = h.split()
            if w[:1] == ["element"]:
                in_vertex = w[1] == "vertex"
                if in_vertex:
                    n = int(w[2])
            elif w[:1] == ["property"] and in_vertex:
                props.append((w[2], w[1]))
        if fmt == "ascii":
            rows = np.loadtxt(f, max_rows=n, ndmin=2)
            names = [p[0] for p in props]
            return rows[:, [names.index(c) for c in "xyz"]].astype(np.float32)
        types = {"float": "<f4", "float32": "<f4", "double": "<f8", "float64": "<f8", "uchar": "u1",
                 "uint8": "u1", "char": "i1", "int": "<i4", "int32": "<i4", "uint": "<u4",
                 "short": "<i2", "ushort": "<u2"}
        dt = np.dtype([(name, types[t]) for name, t in props])
        arr = np.frombuffer(f.read(n * dt.itemsize), dtype=dt, count=n)
        return np.stack([arr[c] for c in "xyz"], 1).astype(np.float32)


def read_off(path):
    with open(path) as f:
        tokens = f.read().split()
    assert tokens[0].endswith("OFF")
    nv, nf = int(tokens[1]), int(tokens[2])
    v = np.array(tokens[4:4 + 3 * nv], dtype=np.float64).reshape(nv, 3)
    rest = tokens[4 + 3 * nv:]
    faces, k = [], 0
    for _ in range(nf):
        c = int(rest[k])
        idx = [int(x) for x in rest[k + 1:k + 1 + c]]
        for j in range(1, c - 1):
            faces.append((idx[0], idx[j], idx[j + 1]))
        k += 1 + c
    return v, np.array(faces, dtype=np.int64)


def sample_mesh(v, f, n, rng):
    a, b, c = v[f[:, 0]], v[f[:, 1]], v[f[:, 2]]
    area = 0.5 * np.linalg.norm(np.cross(b - a, c - a), axis=1)
    tri = rng.choice(len(f), size=n, p=area / area.sum())
    u, w = rng.random(n), rng.random(n)
    flip = u + w > 1
    u[flip], w[flip] = 1 - u[flip], 1 - w[flip]
    p = a[tri] + u[:, None] * (b[tri] - a[tri]) + w[:, None] * (c[tri] - a[tri])
    return p.astype(np.float32)


def clouds(sizes, data_dir, rng):
    out = []
    for n in sizes:
        out.append((f"sphere_shell_{n}", sphere_shell(n, rng)))
        cube = uniform_cube(n, rng)
        out.append((f"uniform_cube_{n}", cube))
        out.append((f"uniform_cube_sorted_{n}", sort_spatially(cube)))
    if data_dir and os.path.isdir(data_dir):
        b = os.path.join(data_dir, "building.ply")
        if os.path.exists(b):
            out.append(("building.ply", read_ply(b)))
        b9 = os.path.join(data_dir, "b9_training.ply")
        if os.path.exists(b9):
            out.append(("b9_training.ply", read_ply(b9)))
        arm = os.path.join(data_dir, "armadillo.off")
        if os.path.exists(arm) and max(sizes) >= 1_000_000:
            v, f = read_off(arm)
            out.append(("armadillo_faces_1M", sample_mesh(v, f, 1_000_000, rng)))
    return out


# --------------------------------------------------------------------------------------------
# Methods


def oracle(p, m, start=0):
    """The contract with float32 torch elementwise ops (each op rounds; no FMA)."""
    x = torch.from_numpy(p)
    cols = [x[:, d].contiguous() for d in range(x.shape[1])]
    mind = torch.full((x.shape[0],), float("inf"))
    out = np.empty(m, np.int64)
    c = start
    for t in range(m):
        out[t] = c
        if t + 1 == m:
            break
        d = x[c, 0] - cols[0]
        s = d * d
        for k in range(1, x.shape[1]):
            d = x[c, k] - cols[k]
            s = s + d * d
        s = torch.where(torch.isfinite(s), s, torch.zeros_like(s))
        torch.minimum(mind, s, out=mind)
        c = int(torch.argmax(mind))  # first maximal index
    return out


def torch_loop(x, m, start=0):
    """The plain PyTorch FPS loop of many model repositories (batched)."""
    B, N, _ = x.shape
    dist = torch.full((B, N), float("inf"))
    idx = torch.empty(B, m, dtype=torch.long)
    far = torch.full((B,), start, dtype=torch.long)
    ar = torch.arange(B)
    for i in range(m):
        idx[:, i] = far
        c = x[ar, far][:, None, :]
        dist = torch.minimum(dist, ((x - c) ** 2).sum(-1))
        far = dist.argmax(-1)
    return idx


def methods():
    import fpsample

    ms = {
        "pcops": lambda p, m: torch.ops.pcops.furthest_point_sample(torch.from_numpy(p)[None], m, 0)[0].numpy(),
        "fpsample.fps_sampling": lambda p, m: fpsample.fps_sampling(p, m, start_idx=0),
        "fpsample.fps_npdu_sampling": lambda p, m: fpsample.fps_npdu_sampling(p, m, start_idx=0),
        "fpsample.fps_npdu_kdtree_sampling": lambda p, m: fpsample.fps_npdu_kdtree_sampling(p, m, start_idx=0),
        "fpsample.bucket_fps_kdtree_sampling": lambda p, m: fpsample.bucket_fps_kdtree_sampling(p, m, start_idx=0),
        "fpsample.bucket_fps_kdline_sampling(h=7)": lambda p, m: fpsample.bucket_fps_kdline_sampling(p, m, h=7, start_idx=0),
        "fpsample.bucket_fps_kdline_sampling(h=9)": lambda p, m: fpsample.bucket_fps_kdline_sampling(p, m, h=9, start_idx=0),
        "torch loop": lambda p, m: torch_loop(torch.from_numpy(p)[None], m)[0].numpy(),
    }
    try:
        import open3d as o3d

        def o3d_fps(p, m):
            pc = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(p.astype(np.float64)))
            return np.asarray(pc.farthest_point_down_sample(m, 0).points)

        ms["open3d.farthest_point_down_sample"] = o3d_fps
    except ImportError:
        pass
    return ms


def mismatches(name, res, ref, p):
    if name.startswith("open3d"):
        got = {tuple(r) for r in np.asarray(res, np.float32)}
        return sum(tuple(r) not in got for r in p[ref])
    res = np.asarray(res).astype(np.int64).reshape(-1)
    return int((res != ref).sum()) + abs(len(res) - len(ref))


def time_it(fn, reps, budget_s):
    """Medians of wall and process CPU time over `reps` runs after one warm-up; a method whose
    warm-up exceeds budget_s runs once. CPU time shows how much of the wall time other processes
    took on a shared machine (for multithreaded peers it adds up over threads)."""
    t0, c0 = time.perf_counter(), time.process_time()
    res = fn()
    first, first_cpu = time.perf_counter() - t0, time.process_time() - c0
    if first > budget_s:
        return first, first_cpu, 1, res
    ts, cs = [], []
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        ts.append(time.perf_counter() - t0)
        cs.append(time.process_time() - c0)
    return statistics.median(ts), statistics.median(cs), reps, res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--samples", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--budget", type=float, default=4.0, help="seconds; slower methods run once")
    ap.add_argument("--data", default=os.environ.get("PCOPS_DATA", ""))
    ap.add_argument("--only", default="", help="comma-separated substrings of cloud names")
    ap.add_argument("--methods", default="", help="comma-separated substrings of method names")
    ap.add_argument("--no-batch", action="store_true")
    ap.add_argument("--json", default="")
    args = ap.parse_args()

    rng = np.random.default_rng(0)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    M = args.samples
    ms = methods()
    if args.methods:
        keep = args.methods.split(",")
        ms = {k: v for k, v in ms.items() if k == "pcops" or any(s in k for s in keep)}
    rows = []
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, M = {M}, medians of {args.reps}")
    for cname, p in clouds(sizes, args.data, rng):
        if args.only and not any(s in cname for s in args.only.split(",")):
            continue
        p = np.ascontiguousarray(p, dtype=np.float32)
        t0 = time.perf_counter()
        ref = oracle(p, M)
        t_oracle = time.perf_counter() - t0
        print(f"\n{cname}: N = {len(p)} (oracle {t_oracle:.1f} s)")
        res_times = {}
        for mname, fn in ms.items():
            t, c, n, res = time_it(lambda: fn(p, M), args.reps, args.budget)
            mm = mismatches(mname, res, ref, p)
            res_times[mname] = t
            rows.append(dict(cloud=cname, n=len(p), method=mname, ms=t * 1e3, cpu_ms=c * 1e3, reps=n,
                             mismatches=mm))
            print(f"  {mname:44s} {t * 1e3:10.2f} ms  cpu {c * 1e3:10.2f} ms  ({n} runs)  mismatches {mm}")
        peers = {k: v for k, v in res_times.items() if k != "pcops"}
        if peers:
            best = min(peers, key=peers.get)
            ratio = peers[best] / res_times["pcops"]
            rows.append(dict(cloud=cname, n=len(p), method="ratio", best_peer=best, ratio=ratio))
            print(f"  ratio fastest peer / pcops = {ratio:.2f}x  (fastest peer: {best})")

    if not args.no_batch:
        B, N = 16, 8192
        x = torch.from_numpy(np.stack([sphere_shell(N, rng) for _ in range(B)]))
        print(f"\nbatched sphere shells B = {B}, N = {N}, M = {M}")
        refs = np.stack([oracle(x[b].numpy(), M) for b in range(B)])
        batch_methods = {
            "pcops": lambda: torch.ops.pcops.furthest_point_sample(x, M, 0).numpy(),
            "torch loop (batched)": lambda: torch_loop(x, M).numpy(),
        }
        for mname in ms:
            if mname.startswith("fpsample") or mname.startswith("open3d"):
                batch_methods[mname + " (per cloud)"] = (
                    lambda f=ms[mname]: [f(x[b].numpy(), M) for b in range(B)])
        times = {}
        for mname, fn in batch_methods.items():
            if args.methods and mname != "pcops" and not any(k in mname for k in args.methods.split(",")):
                continue
            t, c, n, res = time_it(fn, args.reps, args.budget)
            base = mname.replace(" (per cloud)", "")
            mm = sum(mismatches(base, r, refs[b], x[b].numpy()) for b, r in enumerate(res))
            times[mname] = t
            rows.append(dict(cloud=f"batch{B}x{N}", n=N, method=mname, ms=t * 1e3, cpu_ms=c * 1e3, reps=n,
                             mismatches=mm))
            print(f"  {mname:44s} {t * 1e3:10.2f} ms  cpu {c * 1e3:10.2f} ms  ({n} runs)  mismatches {mm}")
        peers = {k: v for k, v in times.items() if k != "pcops"}
        if peers:
            best = min(peers, key=peers.get)
            print(f"  ratio fastest peer / pcops = {peers[best] / times['pcops']:.2f}x  (fastest peer: {best})")
            rows.append(dict(cloud=f"batch{B}x{N}", n=N, method="ratio", best_peer=best,
                             ratio=peers[best] / times["pcops"]))

    if args.json:
        try:
            commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
        except OSError:
            commit = ""
        env = dict(python=sys.version.split()[0], torch=torch.__version__, machine=platform.machine(),
                   processor=platform.processor(), cpus=os.cpu_count(), threads=torch.get_num_threads(),
                   commit=commit, samples=M, reps=args.reps)
        with open(args.json, "w") as f:
            json.dump(dict(environment=env, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
