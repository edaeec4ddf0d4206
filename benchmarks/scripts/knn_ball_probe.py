"""Timing probe: pcops kNN / ball query against peer libraries, with exactness counts.

Every row is the median of --repeat runs in this process (tree libraries include their build
time). Mismatches are counted against a float32-exact NumPy oracle (contract arithmetic,
(s, index) order for kNN, first K matches in reference order for ball query).

    PYTHONPATH=python PCOPS_LIBRARY=<build>/python/pcops/_C.so \
        python benchmarks/scripts/knn_ball_probe.py --sizes 100000 1000000
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch


def median_time(fn, repeat):
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def sq_dist(q, x):
    """Contract squared distances [Mq, N] in float32: ((dx*dx + dy*dy) + dz*dz), d = q - x."""
    s = None
    for d in range(x.shape[1]):
        diff = q[:, None, d] - x[None, :, d]
        s = diff * diff if s is None else s + diff * diff
    return s


def knn_oracle(q, x, k, chunk=32):
    out = np.empty((q.shape[0], k), dtype=np.int64)
    for a in range(0, q.shape[0], chunk):
        s = sq_dist(q[a:a + chunk], x)
        s = np.where(np.isnan(s), np.float32(np.inf), s)
        for r in range(s.shape[0]):
            row = s[r]
            kth = np.partition(row, k - 1)[k - 1]
            cand = np.nonzero(row <= kth)[0]
            order = np.lexsort((cand, row[cand]))
            out[a + r] = cand[order[:k]]
    return out


def ball_oracle(q, x, r, K, chunk=32):
    R2 = np.float32(r) * np.float32(r)
    out = np.full((q.shape[0], K), -1, dtype=np.int64)
    for a in range(0, q.shape[0], chunk):
        s = sq_dist(q[a:a + chunk], x)
        for i in range(s.shape[0]):
            hits = np.nonzero(s[i] < R2)[0][:K]
            out[a + i, :hits.size] = hits
    return out


def uniform_cloud(rng, n):
    return rng.random((n, 3), dtype=np.float32)


def shell_cloud(rng, n):
    p = rng.standard_normal((n, 3)).astype(np.float32)
    p /= np.linalg.norm(p, axis=1, keepdims=True)
    p += np.float32(0.01) * rng.standard_normal((n, 3)).astype(np.float32)
    return p.astype(np.float32)


def morton_sort(p):
    g = np.clip(((p - p.min(0)) / (np.ptp(p, 0) + 1e-12) * 1023).astype(np.int64), 0, 1023)
    code = np.zeros(len(p), dtype=np.int64)
    for bit in range(10):
        for d in range(3):
            code |= ((g[:, d] >> bit) & 1) << (3 * bit + d)
    return p[np.argsort(code, kind="stable")]


def knn_rows(ref, qry, k, repeat, check, peers):
    import pcops

    rows = []
    tq, tr = torch.from_numpy(qry)[None], torch.from_numpy(ref)[None]
    res = {}

    def run_pcops():
        res["pcops"] = pcops.knn(tq, tr, k)[1][0].numpy()

    rows.append(("pcops", median_time(run_pcops, repeat)))
    if "scipy" in peers:
        from scipy.spatial import cKDTree

        rows.append(("scipy cKDTree", median_time(
            lambda: cKDTree(ref).query(qry, k, workers=-1), repeat)))
    if "pykdtree" in peers:
        from pykdtree.kdtree import KDTree

        rows.append(("pykdtree", median_time(lambda: KDTree(ref).query(qry, k), repeat)))
    if "open3d" in peers:
        import open3d as o3d

        def o3d_knn():
            pc = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(ref.astype(np.float64)))
            tree = o3d.geometry.KDTreeFlann(pc)
            for qq in qry.astype(np.float64):
                tree.search_knn_vector_3d(qq, k)

        rows.append(("open3d KDTreeFlann", median_time(o3d_knn, repeat)))
    if "faiss" in peers:
        import faiss

        def faiss_knn():
            index = faiss.IndexFlatL2(3)
            index.add(ref)
            index.search(qry, k)

        rows.append(("faiss IndexFlatL2", median_time(faiss_knn, repeat)))
    if "torch" in peers:
        rows.append(("torch cdist+topk", median_time(
            lambda: torch.cdist(tq, tr).topk(k, largest=False), repeat)))
    mism = None
    if check:
        want = knn_oracle(qry, ref, k)
        mism = int((res["pcops"] != want).sum())
    return rows, mism


def ball_rows(ref, qry, r, K, repeat, check, peers):
    import pcops

    rows = []
    tq, tr = torch.from_numpy(qry)[None], torch.from_numpy(ref)[None]
    res = {}

    def run_pcops():
        res["pcops"] = pcops.ball_query(tq, tr, r, K)[1][0].numpy()

    rows.append(("pcops", median_time(run_pcops, repeat)))
    if "scipy" in peers:
        from scipy.spatial import cKDTree

        rows.append(("scipy query_ball_point", median_time(
            lambda: cKDTree(ref).query_ball_point(qry, r, workers=-1), repeat)))
    if "open3d" in peers:
        import open3d as o3d

        def o3d_ball():
            pc = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(ref.astype(np.float64)))
            tree = o3d.geometry.KDTreeFlann(pc)
            for qq in qry.astype(np.float64):
                tree.search_radius_vector_3d(qq, r)

        rows.append(("open3d search_radius", median_time(o3d_ball, repeat)))
    mism = None
    if check:
        want = ball_oracle(qry, ref, r, K)
        mism = int((res["pcops"] != want).sum())
    return rows, mism


def load_real(path):
    import open3d as o3d

    return np.asarray(o3d.io.read_point_cloud(path).points, dtype=np.float32)


def real_rows(data_dir, repeat, check, rng):
    """All-points kNN (k=16) and ball query on real scans, with exactness on a query subset."""
    import os

    import pcops

    for name, radius in (("b9_training.ply", 1.0), ("building.ply", 0.5)):
        path = os.path.join(data_dir, name)
        if not os.path.exists(path):
            print(f"\n{name}: not found under {data_dir}, skipped")
            continue
        pts = load_real(path)
        t = torch.from_numpy(pts)[None]
        sub = rng.choice(len(pts), min(256, len(pts)), replace=False)
        res = {}

        def knn_all():
            res["knn"] = pcops.knn(t, t, 16)[1][0].numpy()

        rows = [("pcops", median_time(knn_all, repeat))]
        from pykdtree.kdtree import KDTree

        rows.append(("pykdtree", median_time(lambda: KDTree(pts).query(pts, 16), repeat)))
        mism = int((res["knn"][sub] != knn_oracle(pts[sub], pts, 16)).sum()) if check else None
        report(f"real {name} N={len(pts)} all-points kNN k=16", rows, mism)

        q = pts[sub]
        rows, mism = ball_rows(pts, q, radius, 64, repeat, check, {"scipy", "open3d"})
        report(f"real {name} ball query M={len(q)} r={radius} K=64", rows, mism)


def report(title, rows, mism):
    t_p = rows[0][1]
    best = min((t for name, t in rows[1:]), default=float("nan"))
    print(f"\n{title}  (pcops mismatches vs oracle: {mism})")
    for name, t in rows:
        print(f"  {name:28s} {t * 1e3:10.2f} ms")
    print(f"  ratio best peer / pcops: {best / t_p:.2f}x")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="*", default=[100_000, 1_000_000])
    ap.add_argument("--queries", type=int, default=1024)
    ap.add_argument("--k", type=int, default=128)
    ap.add_argument("--K", type=int, default=64)
    ap.add_argument("--radius", type=float, default=0.1)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--peers", default="scipy,pykdtree,open3d,faiss,torch")
    ap.add_argument("--only", default="knn,knn_sorted,knn_shell,ball,real,graph")
    ap.add_argument("--graph-size", type=int, default=1_000_000)
    ap.add_argument("--data-dir", default=None, help="folder with b9_training.ply, building.ply")
    args = ap.parse_args()
    peers = set(args.peers.split(",")) if args.peers else set()
    only = set(args.only.split(","))
    rng = np.random.default_rng(0)
    print(f"torch threads: {torch.get_num_threads()}")
    for n in args.sizes:
        ref = uniform_cloud(rng, n)
        qry = ref[rng.choice(n, args.queries, replace=False)] + np.float32(1e-3) * \
            rng.standard_normal((args.queries, 3)).astype(np.float32)
        qry = qry.astype(np.float32)
        if "knn" in only:
            rows, mism = knn_rows(ref, qry, args.k, args.repeat, not args.no_check, peers)
            report(f"knn uniform N={n} M={args.queries} k={args.k}", rows, mism)
        if "knn_sorted" in only:
            rows, mism = knn_rows(morton_sort(ref), qry, args.k, args.repeat,
                                  not args.no_check, peers & {"pykdtree"})
            report(f"knn uniform Morton-sorted N={n} k={args.k}", rows, mism)
        shell = shell_cloud(rng, n)
        sq = shell[rng.choice(n, args.queries, replace=False)]
        if "knn_shell" in only:
            rows, mism = knn_rows(shell, sq, args.k, args.repeat, not args.no_check,
                                  peers & {"pykdtree", "scipy"})
            report(f"knn sphere shell N={n} k={args.k}", rows, mism)
        if "ball" in only:
            rows, mism = ball_rows(shell, sq, args.radius, args.K, args.repeat,
                                   not args.no_check, peers)
            report(f"ball query sphere shell N={n} M={args.queries} r={args.radius} "
                   f"K={args.K}", rows, mism)
    if "real" in only and args.data_dir:
        real_rows(args.data_dir, args.repeat, not args.no_check, rng)
    if "graph" in only:
        n = args.graph_size
        ref = uniform_cloud(rng, n)
        import pcops

        tr = torch.from_numpy(ref)[None]
        rows = [("pcops", median_time(lambda: pcops.knn(tr, tr, 16), max(1, args.repeat // 2)))]
        if "pykdtree" in peers:
            from pykdtree.kdtree import KDTree

            rows.append(("pykdtree", median_time(lambda: KDTree(ref).query(ref, 16),
                                                 max(1, args.repeat // 2))))
        report(f"all-points kNN graph N={n} k=16", rows, None)


if __name__ == "__main__":
    main()
