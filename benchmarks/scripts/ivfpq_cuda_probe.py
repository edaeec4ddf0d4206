#!/usr/bin/env python3
"""Probe (CUDA): pcops.IVFPQIndex.search with CUDA queries against the same index searched on the
CPU (pcops on all threads, and faiss-cpu IndexIVFPQ with the same quantizers when faiss is
importable), at equal parameters (nlist, M, 8-bit codes, by_residual, k, nprobe).

The index is trained and filled once on the CPU (pcops.train on an ntrain sample); the CUDA
search then runs over the index's device copy. Times are medians of ``--repeat`` searches of the
whole query batch (CUDA: synchronized, the device copy already made; the first search, which
makes it, is reported apart as upload_s). Every CUDA result is compared bitwise with the pcops CPU
result (distances and ids), and the recall@1 / @10 against exact neighbours is reported.

Usage: PYTHONPATH=python PCOPS_LIBRARY=<build>/python/pcops/_C.so \
           python benchmarks/scripts/ivfpq_cuda_probe.py [--n 1000000] [--nq 10000] [--out f.json]

faiss-cpu on a GPU machine without network access: download its wheel where there is network
(`pip download faiss-cpu --no-deps --only-binary=:all: --python-version 3.12 -d wheels`), copy it
over, `pip install --no-deps --target /tmp/faiss wheels/faiss_cpu-*.whl` and put /tmp/faiss on
PYTHONPATH; the probe then times faiss on the same host's cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

import pcops
from clustered_vectors import add_vector_args, probe_vectors  # this directory
from probe_timing import cpu_median, cuda_median  # this directory

REPO = Path(__file__).resolve().parents[2]


def exact_nn(x: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Exact nearest neighbour of each query (float64 over the top 32 of a float32 GPU matmul)."""
    xd = x.cuda()
    xn = (xd * xd).sum(1)
    best = torch.empty(len(q), dtype=torch.int64)
    step = max(1, min(1024, (1 << 28) // len(x)))  # at most 2^28 distances (1 GiB) at a time
    for s in range(0, len(q), step):
        qd = q[s:s + step].cuda()
        d = xn[None, :] - 2 * qd @ xd.T
        cand = d.topk(32, largest=False).indices
        d64 = ((xd[cand].double() - qd[:, None].double()) ** 2).sum(-1)
        best[s:s + step] = cand.gather(1, d64.argmin(1, keepdim=True)).squeeze(1).cpu()
    return best


def recall(labels: torch.Tensor, truth: torch.Tensor, at: int) -> float:
    return float((labels[:, :at] == truth[:, None]).any(1).double().mean())


def main() -> None:
    ap = argparse.ArgumentParser()
    add_vector_args(ap, nq=10_000)
    ap.add_argument("--nlist", type=int, default=1024)
    ap.add_argument("--M", type=int, default=16)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--niter", type=int, default=10)
    ap.add_argument("--nprobe", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--cpu-repeat", type=int, default=2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    rng = np.random.default_rng(0)
    x, q, xt = (torch.from_numpy(a) for a in probe_vectors(args, rng))
    truth = exact_nn(x, q)

    index = pcops.IVFPQIndex(args.dim, args.nlist, args.M)
    t0 = time.perf_counter()
    index.train(xt, seed=0, niter=args.niter)
    train_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    index.add(x)
    add_s = time.perf_counter() - t0

    # GPU training (k-means assignments on the GPU) and GPU encoding: same quantizers and codes.
    gpu = pcops.IVFPQIndex(args.dim, args.nlist, args.M)
    xtc, xc = xt.cuda(), x.cuda()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    gpu.train(xtc, seed=0, niter=args.niter)
    torch.cuda.synchronize()
    train_cuda_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    gpu.add(xc)
    torch.cuda.synchronize()
    add_cuda_s = time.perf_counter() - t0
    gpu_build = dict(train_cpu_s=train_s, train_cuda_s=train_cuda_s, add_cpu_s=add_s, add_cuda_s=add_cuda_s,
                     quantizers_equal=bool(torch.equal(gpu.centroids, index.centroids)
                                           and torch.equal(gpu.codebooks, index.codebooks)),
                     codes_equal=all(torch.equal(gpu.list_codes(i), index.list_codes(i))
                                     and torch.equal(gpu.list_ids(i), index.list_ids(i))
                                     for i in range(args.nlist)))
    print(json.dumps(gpu_build), flush=True)
    del gpu, xtc, xc

    try:
        import faiss  # noqa: PLC0415 (optional peer)
    except ImportError:
        faiss = None
    fi = None
    if faiss is not None:
        fi = faiss.IndexIVFPQ(faiss.IndexFlatL2(args.dim), args.dim, args.nlist, args.M, 8)
        fi.train(xt.numpy())
        index.reset()  # faiss's quantizers in pcops (set_quantizers needs an empty index)
        index.set_quantizers(torch.from_numpy(fi.quantizer.reconstruct_n(0, args.nlist)),
                             torch.from_numpy(faiss.vector_to_array(fi.pq.centroids).reshape(args.M, 256, -1)))
        index.add(x)
        fi.add(x.numpy())

    qc = q.cuda()
    rows = []
    for nprobe in args.nprobe:
        t0 = time.perf_counter()
        index.search(qc, args.k, nprobe)
        torch.cuda.synchronize()
        first_s = time.perf_counter() - t0
        tg, (dg, ig) = cuda_median(lambda: index.search(qc, args.k, nprobe), args.repeat)
        tc, (dc, ic) = cpu_median(lambda: index.search(q, args.k, nprobe), args.cpu_repeat)
        row = dict(nprobe=nprobe, k=args.k, nq=args.nq,
                   cuda_s=tg, cuda_qps=args.nq / tg, first_cuda_search_s=first_s,
                   cpu_s=tc, cpu_qps=args.nq / tc, speedup_vs_pcops_cpu=tc / tg,
                   equal_to_cpu=bool(torch.equal(dg.cpu().view(torch.int32), dc.view(torch.int32))
                                     and torch.equal(ig.cpu(), ic)),
                   recall1=recall(ig.cpu(), truth, 1), recall10=recall(ig.cpu(), truth, min(10, args.k)))
        th, (dh, ih) = cuda_median(lambda: index.search(qc, args.k, nprobe, lut_dtype="float16"), args.repeat)
        dhc, ihc = index.search(q, args.k, nprobe, lut_dtype="float16")
        row.update(half_cuda_s=th, half_cuda_qps=args.nq / th,
                   half_equal_to_cpu=bool(torch.equal(dh.cpu().view(torch.int32), dhc.view(torch.int32))
                                          and torch.equal(ih.cpu(), ihc)),
                   half_recall10=recall(ih.cpu(), truth, min(10, args.k)))
        if fi is not None:
            fi.nprobe = nprobe
            tf, _ = cpu_median(lambda: fi.search(q.numpy(), args.k), args.cpu_repeat)
            row.update(faiss_cpu_s=tf, faiss_cpu_qps=args.nq / tf, speedup_vs_faiss_cpu=tf / tg)
        rows.append(row)
        print(json.dumps(row), flush=True)

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                text=True).stdout.strip() or os.environ.get("PCOPS_GIT_COMMIT", "")
    except OSError:
        commit = os.environ.get("PCOPS_GIT_COMMIT", "")
    doc = dict(kind="ivfpq-cuda-probe", commit=commit, when=datetime.now(timezone.utc).isoformat(),
               params=dict(n=args.n, dim=args.dim, nlist=args.nlist, M=args.M, ntrain=args.ntrain,
                           niter=args.niter, vectors=Path(args.vectors).name if args.vectors else "synthetic"),
               train_s=train_s, add_s=add_s, gpu_build=gpu_build, rows=rows,
               env=dict(python=platform.python_version(), torch=torch.__version__,
                        gpu=torch.cuda.get_device_name(), cpus=os.cpu_count(),
                        torch_threads=torch.get_num_threads(),
                        faiss=getattr(faiss, "__version__", None) if faiss else None))
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
