"""Timing probe: all-points kNN of pcops.SpatialIndex (build included) against CPU peers, with exactness.

Every point of the cloud queries the cloud for its --k nearest points. Methods: pcops.index
(pcops.SpatialIndex built, then .knn), pcops.knn (the dense operator), scipy cKDTree, pykdtree,
open3d core.nns, faiss IndexFlatL2 (brute force, only up to --faiss-max points) and nanoflann
(benchmarks/cpp/nanoflann_knn.cpp, compiled by this script on first use into benchmarks/.cache
with `c++ -O3 -march=native -std=c++17 -pthread`; it times itself, file I/O excluded). Each
method runs on one thread and on all cores where its thread count can be set (pcops and torch:
torch.set_num_threads; scipy: workers; pykdtree: its OpenMP pool through threadpoolctl; faiss:
omp_set_num_threads; nanoflann: its own std::threads; open3d's TBB pool cannot be limited, so it
runs on all cores only). Times are medians of --repeat runs after one warm-up (time.perf_counter,
build and query timed separately within each run, total = build + query).

Clouds (--clouds): mesh (bunny00.off sampled on its faces), scan (building.ply: a random subset,
or the scan repeated with gaussian jitter of half the median neighbour spacing beyond its size),
sphere (unit sphere + 0.01 gaussian noise), clustered (90 % in 20 gaussian clusters of sigma
0.002, 10 % uniform in the unit cube). Points are shuffled (seed 1) or, with --morton, sorted
along a Morton curve.

Exactness: the oracle is pcops.knn ((squared distance, index) order, float32 squared distances
((dx*dx + dy*dy) + dz*dz) without FMA) on --check-queries random queries (seed 2). `misplaced`
counts (query, slot) positions whose index differs from the oracle's, except where the method's
neighbour has the same float32 squared distance as the oracle's at that slot; those tie swaps are
counted separately (`ties`). `peer/index` is a method's total time over pcops.index's (above 1:
pcops.index is faster); each case ends with the fastest peer's ratio. `others` is how many cores
other processes kept busy while a method's series ran (from /proc/stat, in 10 ms ticks: coarse
for series shorter than a second): well above 0, the row was measured beside other work. JSON
goes to benchmarks/results/spatial-index-probe-<date>-<commit>.json (or --out).

    PYTHONPATH=python PCOPS_LIBRARY=<build>/python/pcops/_C.so \
        python benchmarks/scripts/spatial_index_probe.py [--sizes 100k,1M] [--clouds mesh,scan] \
            [--k 16] [--repeat 3] [--threads 1,all] [--methods pcops.index,pykdtree] [--morton]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

import numpy as np
import torch

import pcops
from pcops import data as pdata
from pcops.bench.run import cpu_model, git_info

REPO = Path(__file__).resolve().parents[2]
NANOFLANN_SOURCE = REPO / "benchmarks" / "cpp" / "nanoflann_knn.cpp"
CACHE = REPO / "benchmarks" / ".cache"
CXXFLAGS = ["-O3", "-march=native", "-std=c++17", "-pthread"]

CLOUDS = ("mesh", "scan", "sphere", "clustered")
METHODS = ("pcops.index", "pcops.knn", "scipy.cKDTree", "pykdtree", "open3d.nns", "faiss.IndexFlatL2",
           "nanoflann")
PCOPS_METHODS = ("pcops.index", "pcops.knn")


class Unavailable(Exception):
    """A method that cannot run here (a missing package or API, a thread count it cannot be held
    to, a size it is not run at); the message says why."""


def all_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def parse_size(text: str) -> int:
    """100000, 100k, 1M, 1.5M -> a point count."""
    text = text.strip()
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:].lower(), 1)
    number = text[:-1] if scale > 1 else text
    value = float(number) * scale
    if value <= 0 or value != int(value):
        raise argparse.ArgumentTypeError(f"bad size {text!r}")
    return int(value)


def format_size(n: int) -> str:
    for div, suffix in ((1_000_000, "M"), (1_000, "k")):
        if n >= div and n % div == 0:
            return f"{n // div}{suffix}"
    return str(n)


# ----------------------------------------------------------------------------------------------
# Clouds
# ----------------------------------------------------------------------------------------------


def find_data(name: str) -> Path:
    for root in pdata._candidates():
        if (root / name).is_file():
            return root / name
    raise SystemExit(f"{name} not found; see docs/data.md")


def mesh_cloud(n: int) -> tuple[np.ndarray, str]:
    cloud = pdata.load(find_data("bunny00.off"))
    pts = pdata.sample_mesh(cloud.points, cloud.faces, n, seed=0).astype(np.float32)
    return pts, "bunny00.off sampled on its faces (seed 0)"


def scan_cloud(n: int) -> tuple[np.ndarray, str]:
    """building.ply: n of its points (seed 0), or, for n beyond the scan, the scan once as it is
    and then jittered copies (whole copies, then a random subset for the remainder)."""
    base = pdata.load(find_data("building.ply")).points.astype(np.float32)
    m = len(base)
    rng = np.random.default_rng(0)
    if n <= m:
        pick = np.sort(rng.choice(m, n, replace=False)) if n < m else np.arange(m)
        return base[pick], f"building.ply: {n} of its {m} scanned points (seed 0)"
    # Jitter: half the median distance from a scanned point to its nearest other point.
    t = torch.from_numpy(base)[None]
    spacing = float(pcops.knn(t, t, 2)[0][0, :, 1].median())
    if spacing <= 0:
        spacing = 1e-3 * float(np.linalg.norm(base.max(0) - base.min(0)))
    sigma = 0.5 * spacing
    copies, rest = divmod(n, m)
    src = np.concatenate([np.tile(np.arange(m), copies), np.sort(rng.choice(m, rest, replace=False))])
    noise = rng.standard_normal((n - m, 3)).astype(np.float32) * np.float32(sigma)
    pts = base[src]
    pts[m:] += noise
    return pts, (f"building.ply ({m} scanned points) repeated to {n} points, copies after the first "
                 f"jittered by gaussian sigma {sigma:.4g} (half the median spacing; seed 0)")


def sphere_cloud(n: int) -> tuple[np.ndarray, str]:
    g = torch.Generator().manual_seed(0)
    p = torch.randn(n, 3, generator=g)
    p = p / p.norm(dim=1, keepdim=True)
    p = p + 0.01 * torch.randn(n, 3, generator=g)
    return p.numpy().astype(np.float32), "unit sphere + 0.01 gaussian noise (torch seed 0)"


def clustered_cloud(n: int) -> tuple[np.ndarray, str]:
    g = torch.Generator().manual_seed(0)
    m = int(round(0.9 * n))
    centres = torch.rand(20, 3, generator=g)
    which = torch.randint(0, 20, (m,), generator=g)
    clustered = centres[which] + 0.002 * torch.randn(m, 3, generator=g)
    uniform = torch.rand(n - m, 3, generator=g)
    p = torch.cat([clustered, uniform])
    return p.numpy().astype(np.float32), ("90 % in 20 gaussian clusters (sigma 0.002), 10 % uniform "
                                          "in the unit cube (torch seed 0)")


MAKERS = {"mesh": mesh_cloud, "scan": scan_cloud, "sphere": sphere_cloud, "clustered": clustered_cloud}


def _spread_bits(v: np.ndarray) -> np.ndarray:
    """Spreads the low 21 bits of v so that two zero bits sit between neighbouring bits."""
    v = v.astype(np.uint64) & np.uint64(0x1FFFFF)
    for shift, mask in ((32, 0x1F00000000FFFF), (16, 0x1F0000FF0000FF), (8, 0x100F00F00F00F00F),
                        (4, 0x10C30C30C30C30C3), (2, 0x1249249249249249)):
        v = (v | (v << np.uint64(shift))) & np.uint64(mask)
    return v


def morton_order(p: np.ndarray) -> np.ndarray:
    """The permutation that sorts the points along a 63-bit Morton curve of their bounding box."""
    lo, hi = p.min(0).astype(np.float64), p.max(0).astype(np.float64)
    cells = np.clip((p - lo) / np.maximum(hi - lo, 1e-30) * (2**21 - 1), 0, 2**21 - 1).astype(np.uint64)
    code = _spread_bits(cells[:, 0]) | (_spread_bits(cells[:, 1]) << np.uint64(1)) | \
        (_spread_bits(cells[:, 2]) << np.uint64(2))
    return np.argsort(code, kind="stable")


@dataclass
class Case:
    """One cloud at one size, its exactness oracle, and a scratch folder for the nanoflann peer."""

    cloud: str
    points: np.ndarray  # float32 [N, 3], contiguous
    desc: str
    k: int
    order: str
    tmp: Path
    tensor: torch.Tensor = field(init=False)
    sub: torch.Tensor = field(init=False)  # the checked queries (sorted indices)
    oracle: torch.Tensor = field(init=False)  # [S, k] int64
    oracle_sq: torch.Tensor = field(init=False)  # [S, k] float32 squared distances

    def __post_init__(self):
        self.tensor = torch.from_numpy(self.points)

    @property
    def n(self) -> int:
        return int(self.points.shape[0])

    def points_file(self) -> Path:
        path = self.tmp / "points.bin"
        if not path.exists():
            self.points.tofile(path)
        return path


def make_case(cloud: str, n: int, k: int, morton: bool, check_queries: int, tmp: Path) -> Case:
    pts, desc = MAKERS[cloud](n)
    if morton:
        order = morton_order(pts)
    else:
        order = torch.randperm(n, generator=torch.Generator().manual_seed(1)).numpy()
    pts = np.ascontiguousarray(pts[order], dtype=np.float32)
    case = Case(cloud, pts, desc, k, "morton" if morton else "random", tmp)
    # Oracle: pcops.knn on a random subset of the queries, all cores, outside every timed region.
    s = min(check_queries, n)
    sub = torch.randperm(n, generator=torch.Generator().manual_seed(2))[:s].sort().values
    case.sub = sub
    case.oracle = pcops.knn(case.tensor[sub][None], case.tensor[None], k)[1][0]
    case.oracle_sq = sq_dist(case.tensor[sub], case.tensor[case.oracle])
    return case


# ----------------------------------------------------------------------------------------------
# Exactness
# ----------------------------------------------------------------------------------------------


def sq_dist(q: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """float32 squared distances ((dx*dx + dy*dy) + dz*dz), d = q - x, one rounding per operation
    (separate eager ops: no FMA). q [S, 3], x [S, k, 3] -> [S, k]."""
    d = q[:, None, :] - x
    dx, dy, dz = d[..., 0], d[..., 1], d[..., 2]
    return (dx * dx + dy * dy) + dz * dz


def neighbour_rows(nbr, sub: torch.Tensor) -> torch.Tensor:
    """The checked queries' rows of a method's [N, k] neighbour indices, as int64."""
    if isinstance(nbr, torch.Tensor):
        return nbr[sub].to(torch.int64)
    return torch.from_numpy(np.asarray(nbr)[sub.numpy()].astype(np.int64))


def exactness(case: Case, nbr) -> tuple[int, int]:
    """(misplaced, ties): positions whose index differs from the oracle's, split by whether the
    two neighbours have different or equal float32 squared distances. Out-of-range indices are
    misplaced."""
    got = neighbour_rows(nbr, case.sub)
    if got.shape != case.oracle.shape:
        return int(case.oracle.numel()), 0
    valid = (got >= 0) & (got < case.n)
    got_sq = sq_dist(case.tensor[case.sub], case.tensor[got.clamp(0, case.n - 1)])
    differ = got != case.oracle
    tie = differ & valid & (got_sq == case.oracle_sq)
    return int((differ & ~tie).sum()), int(tie.sum())


# ----------------------------------------------------------------------------------------------
# Methods: run(case, threads) -> (build seconds or None, query seconds, neighbour indices [N, k])
# and limit(threads), the context that holds the library to that many threads.
# ----------------------------------------------------------------------------------------------


@contextlib.contextmanager
def torch_threads(threads: int):
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def openmp_threads(threads: int):
    """pykdtree's OpenMP pool (its own libgomp, which torch's settings do not reach)."""
    if threads >= all_cores():
        return contextlib.nullcontext()
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        raise Unavailable("n/a: limiting pykdtree's OpenMP threads needs threadpoolctl") from None
    return threadpool_limits(limits=threads, user_api="openmp")


@contextlib.contextmanager
def faiss_threads(threads: int):
    import faiss

    old = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(threads)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(old)


def all_cores_only(threads: int):
    if threads < all_cores():
        raise Unavailable("n/a: open3d's TBB pool cannot be limited from Python")
    return contextlib.nullcontext()


def run_pcops_index(case: Case, threads: int):
    try:
        spatial_index = pcops.SpatialIndex
    except AttributeError:
        raise Unavailable("not available: pcops.SpatialIndex is not in this build") from None
    t0 = time.perf_counter()
    index = spatial_index(case.tensor)
    t1 = time.perf_counter()
    _, nbr = index.knn(case.tensor, case.k)
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, nbr


def run_pcops_knn(case: Case, threads: int):
    p = case.tensor[None]
    t0 = time.perf_counter()
    _, nbr = pcops.knn(p, p, case.k)
    t1 = time.perf_counter()
    return None, t1 - t0, nbr[0]


def run_scipy(case: Case, threads: int):
    from scipy.spatial import cKDTree

    workers = -1 if threads >= all_cores() else threads
    t0 = time.perf_counter()
    tree = cKDTree(case.points)
    t1 = time.perf_counter()
    _, nbr = tree.query(case.points, case.k, workers=workers)
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, nbr


def run_pykdtree(case: Case, threads: int):
    from pykdtree.kdtree import KDTree

    t0 = time.perf_counter()
    tree = KDTree(case.points)
    t1 = time.perf_counter()
    _, nbr = tree.query(case.points, case.k)  # Euclidean distances, uint32 indices
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, nbr


def run_open3d(case: Case, threads: int):
    import open3d.core as o3c

    t0 = time.perf_counter()
    nns = o3c.nns.NearestNeighborSearch(o3c.Tensor(case.points))
    nns.knn_index()
    t1 = time.perf_counter()
    nbr, _ = nns.knn_search(o3c.Tensor(case.points), case.k)  # int64 indices, squared distances
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, nbr.numpy()


def run_faiss(case: Case, threads: int, max_points: int):
    import faiss

    if case.n > max_points:
        raise Unavailable(f"skipped: brute force, run up to --faiss-max {max_points} points")
    t0 = time.perf_counter()
    index = faiss.IndexFlatL2(3)
    index.add(case.points)
    t1 = time.perf_counter()
    _, nbr = index.search(case.points, case.k)  # squared distances, int64 indices
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, nbr


# ---- nanoflann: a C++ program compiled once per source, flags, compiler and CPU ---------------

_NANOFLANN: dict = {}



def compiler_version(cxx: str) -> str:
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=True).stdout
        return out.splitlines()[0].strip()
    except (OSError, subprocess.CalledProcessError, IndexError):
        return "unknown"


def nanoflann_binary(include: str | None) -> Path:
    """The compiled nanoflann peer, built into benchmarks/.cache on first use (-march=native:
    the cache key holds the CPU model)."""
    if "exe" in _NANOFLANN:
        return _NANOFLANN["exe"]
    if "error" in _NANOFLANN:
        raise Unavailable(_NANOFLANN["error"])
    cxx = os.environ.get("CXX", "c++")
    if shutil.which(cxx) is None:
        _NANOFLANN["error"] = f"not available: no C++ compiler ({cxx}; set CXX)"
        raise Unavailable(_NANOFLANN["error"])
    flags = CXXFLAGS + (["-I", include] if include else [])
    key = hashlib.sha256(NANOFLANN_SOURCE.read_bytes() + " ".join(
        [compiler_version(cxx), cpu_model(), *flags]).encode()).hexdigest()[:12]
    exe = CACHE / f"nanoflann_knn-{key}"
    if not exe.is_file():
        CACHE.mkdir(parents=True, exist_ok=True)
        ignore = CACHE / ".gitignore"
        if not ignore.exists():
            ignore.write_text("# Build outputs of the benchmark scripts.\n*\n")
        tmp = exe.with_name(exe.name + ".tmp")
        proc = subprocess.run([cxx, *flags, str(NANOFLANN_SOURCE), "-o", str(tmp)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            if "nanoflann.hpp" in proc.stderr:
                why = "nanoflann.hpp not found (Debian: libnanoflann-dev; or --nanoflann-include DIR)"
            else:
                why = "compiling benchmarks/cpp/nanoflann_knn.cpp failed: " + \
                    (proc.stderr.strip().splitlines() or ["?"])[0]
            _NANOFLANN["error"] = "not available: " + why
            raise Unavailable(_NANOFLANN["error"])
        os.replace(tmp, exe)
        print(f"compiled {exe.relative_to(REPO)}", flush=True)
    _NANOFLANN["exe"] = exe
    return exe


def run_nanoflann(case: Case, threads: int, include: str | None):
    """The program reads the points, times its build and its queries itself (file I/O and process
    start excluded) and writes int32 [N, k] indices."""
    exe = nanoflann_binary(include)
    out = case.tmp / "nanoflann-nbr.bin"
    proc = subprocess.run([str(exe), str(case.points_file()), str(case.n), str(case.k), str(out),
                           str(threads)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"nanoflann_knn exited {proc.returncode}: {proc.stderr.strip()}")
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    _NANOFLANN["info"] = info
    nbr = np.fromfile(out, dtype=np.int32).reshape(case.n, case.k)
    return info["build_s"], info["query_s"], nbr


def method_table(args) -> dict:
    """name -> (run(case, threads), limit(threads), note)."""
    every = all_cores()
    return {
        "pcops.index": (run_pcops_index, torch_threads,
                        "pcops.SpatialIndex(points) + .knn(points, k); torch.set_num_threads"),
        "pcops.knn": (run_pcops_knn, torch_threads, "pcops.knn(p[None], p[None], k); no build"),
        "scipy.cKDTree": (run_scipy, lambda t: contextlib.nullcontext(),
                          "cKDTree(p) (one thread) + query(p, k, workers)"),
        "pykdtree": (run_pykdtree, openmp_threads, "KDTree(p) (one thread) + query(p, k) (OpenMP)"),
        "open3d.nns": (run_open3d, all_cores_only,
                       f"core.nns knn_index + knn_search (TBB, all {every} cores)"),
        "faiss.IndexFlatL2": (lambda c, t: run_faiss(c, t, args.faiss_max), faiss_threads,
                              "IndexFlatL2 add + search (brute force, BLAS distances)"),
        "nanoflann": (lambda c, t: run_nanoflann(c, t, args.nanoflann_include),
                      lambda t: contextlib.nullcontext(),
                      "benchmarks/cpp/nanoflann_knn.cpp, leaf 10, std::thread queries; its own timers"),
    }


# ----------------------------------------------------------------------------------------------
# Measurement and report
# ----------------------------------------------------------------------------------------------


def _cpu_seconds() -> tuple[float, float] | None:
    """(busy CPU seconds of the whole machine, CPU seconds of this process and its waited-for
    children), from /proc/stat and os.times(); None where /proc/stat cannot be read."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except (OSError, IndexError):
        return None
    ticks = [int(x) for x in fields]
    # user nice system idle iowait irq softirq steal ...: everything but idle and iowait is busy.
    busy = sum(ticks[:8]) - ticks[3] - ticks[4]
    own = os.times()
    return busy / os.sysconf("SC_CLK_TCK"), own.user + own.system + own.children_user + own.children_system


def measure(run, limit, case: Case, threads: int, repeat: int):
    """Medians of (build, query, total) over `repeat` runs after one warm-up, every run's times,
    and the last run's neighbours. The library is held to `threads` for the whole series."""
    builds, queries, totals = [], [], []
    nbr = None
    cpu0, wall0 = _cpu_seconds(), time.perf_counter()
    with limit(threads):
        run(case, threads)  # warm-up
        for _ in range(repeat):
            nbr = None  # free the previous run's output first
            build, query, nbr = run(case, threads)
            builds.append(build)
            queries.append(query)
            totals.append((build or 0.0) + query)
    cpu1, wall1 = _cpu_seconds(), time.perf_counter()
    build = None if builds[0] is None else statistics.median(builds)
    runs = {"build_runs_s": builds, "query_runs_s": queries, "others_cores": None}
    if cpu0 and cpu1:
        # Cores kept busy by other processes during the series (a sign of a shared machine).
        others = ((cpu1[0] - cpu0[0]) - (cpu1[1] - cpu0[1])) / (wall1 - wall0)
        runs["others_cores"] = round(max(0.0, others), 3)
    return build, statistics.median(queries), statistics.median(totals), runs, nbr


HEADER = (f"{'method':18s} {'cloud':9s} {'N':>5s} {'thr':>3s} {'build s':>9s} {'query s':>9s} "
          f"{'total s':>9s} {'misplaced':>9s} {'ties':>6s} {'peer/index':>10s} {'others':>6s}")


def fmt_s(v) -> str:
    return "-" if v is None else f"{v:.4f}"


def print_row(row: dict):
    head = f"{row['method']:18s} {row['cloud']:9s} {format_size(row['n']):>5s} {row['threads']:>3d}"
    if row["status"] != "ok":
        print(f"{head} {row['status']}", flush=True)
        return
    ratio = "-" if row["peer_over_index"] is None else f"{row['peer_over_index']:.2f}x"
    others = "-" if row["others_cores"] is None else f"{row['others_cores']:.2f}"
    print(f"{head} {fmt_s(row['build_s']):>9s} {fmt_s(row['query_s']):>9s} {fmt_s(row['total_s']):>9s} "
          f"{row['misplaced']:>9d} {row['ties']:>6d} {ratio:>10s} {others:>6s}", flush=True)


def summarise(rows: list[dict]) -> dict:
    """The fastest peer (and fastest exact peer) of one (cloud, N, threads) case against pcops.index."""
    ok = [r for r in rows if r["status"] == "ok"]
    index = next((r for r in ok if r["method"] == "pcops.index"), None)
    peers = [r for r in ok if r["method"] not in PCOPS_METHODS]
    exact = [r for r in peers if r["misplaced"] == 0]
    out = {"cloud": rows[0]["cloud"], "n": rows[0]["n"], "threads": rows[0]["threads"],
           "pcops_index_total_s": index["total_s"] if index else None}
    for label, group in (("fastest_peer", peers), ("fastest_exact_peer", exact)):
        best = min(group, key=lambda r: r["total_s"], default=None)
        out[label] = best["method"] if best else None
        out[label + "_total_s"] = best["total_s"] if best else None
        out[label + "_over_index"] = best["total_s"] / index["total_s"] if best and index else None
    return out


def print_summary(s: dict):
    def part(label, title):
        if s[label] is None:
            return f"{title}: none"
        ratio = "no pcops.index to compare" if s[label + "_over_index"] is None else \
            f"{s[label + '_over_index']:.2f}x pcops.index's time"
        return f"{title} {s[label]} {s[label + '_total_s']:.4f} s = {ratio}"

    print(f"  -> {part('fastest_peer', 'fastest peer')}; {part('fastest_exact_peer', 'fastest exact peer')}",
          flush=True)


def version_of(*dists: str) -> str | None:
    for dist in dists:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def library_info() -> dict:
    """The operator library this process loaded: path, modification time and a content hash (a
    development build may hold changes that the commit does not)."""
    try:
        from pcops import _loader

        path = Path(_loader.library_path()).resolve()
        stat = path.stat()
    except (ImportError, AttributeError, OSError):
        return {}
    mtime = datetime.fromtimestamp(stat.st_mtime, timezone.utc).isoformat(timespec="seconds")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return {"library": path.name, "library_mtime": mtime, "library_sha256": digest}


def environment() -> dict:
    """Versions and machine, taken when the run starts (the nanoflann entry is added at the end)."""
    info = git_info()
    env = {"python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__,
           "scipy": version_of("scipy"), "pykdtree": version_of("pykdtree"),
           "open3d": version_of("open3d", "open3d-cpu"), "faiss": version_of("faiss-cpu", "faiss"),
           "threadpoolctl": version_of("threadpoolctl"), "pcops": pcops.__version__,
           "processor": platform.processor(), "machine": platform.machine(), "cpu_model": cpu_model(),
           "cpu_count": all_cores(), "torch_threads": torch.get_num_threads(), "commit": (info["commit"] or "unknown")[:7],
           "tracked_changes": info["dirty"],
           "spatial_index_available": hasattr(pcops, "SpatialIndex"),
           "started": datetime.now(timezone.utc).isoformat(timespec="seconds"), **library_info()}
    return env


def nanoflann_environment() -> dict | None:
    if "exe" in _NANOFLANN or "error" in _NANOFLANN:
        return {
            "compiler": compiler_version(os.environ.get("CXX", "c++")), "flags": " ".join(CXXFLAGS),
            "version_macro": _NANOFLANN.get("info", {}).get("nanoflann_version_macro"),
            "debian_package": debian_version("libnanoflann-dev"), "error": _NANOFLANN.get("error")}
    return None


def debian_version(package: str) -> str | None:
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True,
                             text=True, check=True).stdout.strip()
        return out or None
    except (OSError, subprocess.CalledProcessError):
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100k,1M", help="comma list, suffixes k and M")
    ap.add_argument("--clouds", default="mesh,scan,sphere,clustered", help=f"comma list of {CLOUDS}")
    ap.add_argument("--k", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", default="1,all", help="comma list of thread counts ('all': every core)")
    ap.add_argument("--methods", default=",".join(METHODS), help=f"comma list of {METHODS}")
    ap.add_argument("--morton", action="store_true", help="Morton order instead of a random shuffle")
    ap.add_argument("--check-queries", type=int, default=20000)
    ap.add_argument("--faiss-max", type=int, default=200_000)
    ap.add_argument("--nanoflann-include", default=None, help="folder with nanoflann.hpp")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    clouds = [c.strip() for c in args.clouds.split(",") if c.strip()]
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    for name, given, known in (("cloud", clouds, CLOUDS), ("method", methods, METHODS)):
        bad = [x for x in given if x not in known]
        if bad:
            ap.error(f"unknown {name}(s) {bad}; expected some of {known}")
    every = all_cores()
    thread_counts = sorted({every if t.strip() == "all" else int(t) for t in args.threads.split(",")})
    # pcops.index first: every other row's ratio is against it.
    methods = sorted(methods, key=METHODS.index)
    table = method_table(args)
    env = environment()

    print(f"all-points kNN, k={args.k}, order {'morton' if args.morton else 'random'}, "
          f"threads {thread_counts} of {every} cores, median of {args.repeat} after one warm-up")
    print(HEADER)
    rows, summaries = [], []
    with tempfile.TemporaryDirectory(prefix="spatial-index-probe-") as tmp:
        for cloud in clouds:
            for n in sizes:
                scratch = Path(tmp) / f"{cloud}-{n}"
                scratch.mkdir()
                case = make_case(cloud, n, args.k, args.morton, args.check_queries, scratch)
                for threads in thread_counts:
                    case_rows, index_total = [], None
                    for name in methods:
                        run, limit, note = table[name]
                        row = {"method": name, "cloud": cloud, "n": n, "order": case.order, "k": args.k,
                               "threads": threads, "cloud_desc": case.desc, "note": note,
                               "checked_queries": int(case.sub.numel()), "status": "ok",
                               "build_s": None, "query_s": None, "total_s": None, "misplaced": None,
                               "ties": None, "peer_over_index": None, "others_cores": None}
                        try:
                            build, query, total, runs, nbr = measure(run, limit, case, threads, args.repeat)
                        except Unavailable as exc:
                            row["status"] = str(exc)
                        except ImportError as exc:
                            row["status"] = f"not available: {exc}"
                        except Exception as exc:  # noqa: BLE001 - one failing method must not end the run
                            row["status"] = f"error: {type(exc).__name__}: {exc}"
                        else:
                            misplaced, ties = exactness(case, nbr)
                            del nbr
                            row.update(build_s=build, query_s=query, total_s=total, misplaced=misplaced,
                                       ties=ties, **runs)
                            if name == "nanoflann" and "info" in _NANOFLANN:
                                row["build_threads"] = _NANOFLANN["info"]["build_threads"]
                            if name == "pcops.index":
                                index_total = total
                            if index_total:
                                row["peer_over_index"] = total / index_total
                        print_row(row)
                        case_rows.append(row)
                    summary = summarise(case_rows)
                    print_summary(summary)
                    rows.extend(case_rows)
                    summaries.append(summary)
                del case
                shutil.rmtree(scratch)

    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    env["nanoflann"] = nanoflann_environment()
    path = Path(args.out) if args.out else \
        REPO / "benchmarks" / "results" / f"spatial-index-probe-{stamp}-{env['commit']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    recorded = vars(args) | {"out": path.name}  # the file's name, not the directory it was written to
    path.write_text(json.dumps({"environment": env, "args": recorded, "results": rows,
                                "summary": summaries}, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
