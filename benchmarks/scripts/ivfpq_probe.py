"""Probe (CPU): pcops.IVFPQIndex against faiss-cpu IndexIVFPQ at equal parameters (nlist, M,
nbits 8, nprobe) on clustered synthetic vectors: recall@1 / recall@10 of the exact nearest
neighbour (float64 brute force on the queries) and queries per second.

Both indexes use the same trained quantizers (faiss's, installed into pcops with
set_quantizers), so the comparison isolates the search; faiss runs its default search (with
precomputed tables for L2) and, for reference, the residual-table scan that pcops' contract
fixes by default (use_precomputed_table = -1); pcops runs both its default (residual tables)
and precomputed_table=True (faiss's default tables). Both run on all of torch's / faiss's threads. Times are
medians of --repeat runs after one warm-up. JSON goes to
benchmarks/results/ivfpq-probe-<date>-<commit>.json.

    PYTHONPATH=python PCOPS_LIBRARY=<build>/python/pcops/_C.so \
        python benchmarks/scripts/ivfpq_probe.py [--n 1000000] [--dim 128] [--nlist 1024] [--M 16]
        [--vectors data/sift.npy]   (real vectors: benchmarks/scripts/sift_descriptors.py)
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

import faiss
import numpy as np
import torch

import pcops
from clustered_vectors import add_vector_args, probe_vectors  # this directory
from probe_timing import cpu_median  # this directory

REPO = Path(__file__).resolve().parents[2]


def exact_nn(x: np.ndarray, q: np.ndarray) -> np.ndarray:
    flat = faiss.IndexFlatL2(x.shape[1])  # ground truth: recomputed in float64 over its top 32
    flat.add(x)
    _, cand = flat.search(q, 32)
    best = np.empty(len(q), np.int64)
    for i in range(len(q)):
        c = cand[i][cand[i] >= 0]
        d = ((x[c].astype(np.float64) - q[i].astype(np.float64)) ** 2).sum(1)
        best[i] = c[np.argmin(d)]
    return best


def recall(labels: np.ndarray, truth: np.ndarray, at: int) -> float:
    return float(np.mean([truth[i] in labels[i, :at] for i in range(len(truth))]))


def main() -> None:
    ap = argparse.ArgumentParser()
    add_vector_args(ap, nq=1000)
    ap.add_argument("--nlist", type=int, default=1024)
    ap.add_argument("--M", type=int, default=16)
    ap.add_argument("--nprobe", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    rng = np.random.default_rng(0)
    x, q, xt = probe_vectors(args, rng)
    truth = exact_nn(x, q)

    t0 = time.perf_counter()
    fi = faiss.IndexIVFPQ(faiss.IndexFlatL2(args.dim), args.dim, args.nlist, args.M, 8)
    fi.train(xt)
    faiss_train_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    fi.add(x)
    faiss_add_s = time.perf_counter() - t0

    ours = pcops.IVFPQIndex(args.dim, args.nlist, args.M)
    t0 = time.perf_counter()
    own = pcops.IVFPQIndex(args.dim, args.nlist, args.M)
    own.train(xt, seed=0, niter=10)
    pcops_train_s = time.perf_counter() - t0
    centroids = fi.quantizer.reconstruct_n(0, args.nlist)
    codebooks = faiss.vector_to_array(fi.pq.centroids).reshape(args.M, 256, args.dim // args.M)
    ours.set_quantizers(centroids, codebooks)
    t0 = time.perf_counter()
    ours.add(x)
    pcops_add_s = time.perf_counter() - t0

    results = []
    for nprobe in args.nprobe:
        fi.nprobe = nprobe
        row = {"n": args.n, "dim": args.dim, "nlist": args.nlist, "M": args.M, "nq": args.nq, "nprobe": nprobe}
        fi.use_precomputed_table = 1
        tf, (_, fl) = cpu_median(lambda: fi.search(q, 10), args.repeat)
        fi.use_precomputed_table = -1
        tfr, (_, flr) = cpu_median(lambda: fi.search(q, 10), args.repeat)
        tp, (_, pl) = cpu_median(lambda: ours.search(q, 10, nprobe), args.repeat)
        tpp, (_, ppl) = cpu_median(lambda: ours.search(q, 10, nprobe, precomputed_table=True), args.repeat)
        row.update(
            faiss_qps=args.nq / tf,
            faiss_residual_tables_qps=args.nq / tfr,
            pcops_qps=args.nq / tp,
            speedup_vs_faiss=tf / tp,
            pcops_precomputed_qps=args.nq / tpp,
            precomputed_speedup_vs_faiss=tf / tpp,
            faiss_recall1=recall(fl, truth, 1),
            faiss_recall10=recall(fl, truth, 10),
            pcops_recall1=recall(pl, truth, 1),
            pcops_recall10=recall(pl, truth, 10),
            pcops_precomputed_recall1=recall(ppl, truth, 1),
            pcops_precomputed_recall10=recall(ppl, truth, 10),
            ids_equal_to_faiss_residual_scan=float(np.mean(pl == flr)),
            precomputed_ids_equal_to_faiss_default=float(np.mean(ppl == fl)),
        )
        results.append(row)
        print(json.dumps(row), flush=True)
    # Own training (seeded k-means) at the same parameters: recall at the largest nprobe.
    own.add(x)
    _, ol = own.search(q, 10, args.nprobe[-1])
    train_row = {
        "own_training_recall1": recall(ol, truth, 1),
        "own_training_recall10": recall(ol, truth, 10),
        "nprobe": args.nprobe[-1],
        "faiss_train_s": faiss_train_s,
        "pcops_train_s": pcops_train_s,
        "faiss_add_s": faiss_add_s,
        "pcops_add_s": pcops_add_s,
    }
    results.append(train_row)
    print(json.dumps(train_row), flush=True)

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                text=True, check=True).stdout.strip()
    except Exception:  # noqa: BLE001
        commit = "unknown"
    env = {"date": datetime.now(timezone.utc).isoformat(), "machine": platform.machine(),
           "processor": platform.processor(), "python": platform.python_version(), "commit": commit,
           "torch": torch.__version__, "faiss": faiss.__version__, "torch_threads": torch.get_num_threads(),
           "faiss_threads": faiss.omp_get_max_threads(), "cpus": os.cpu_count()}
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    path = Path(args.out) if args.out else REPO / "benchmarks" / "results" / f"ivfpq-probe-{stamp}-{commit}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    recorded = vars(args) | {"out": path.name}  # the file's name, not the directory it was written to
    path.write_text(json.dumps({"env": env, "args": recorded, "results": results}, indent=1))
    print(path)


if __name__ == "__main__":
    main()
