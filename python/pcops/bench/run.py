"""The comparison harness behind ``pcops bench`` (DESIGN.md section 7).

For every case (operator x cloud x size x order) the exact oracle runs once, then pcops and each
installed peer are timed in this process (median of repeated runs, warm-up excluded) and their
results are checked against the oracle. Everything goes into one JSON file with the environment.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pcops.bench import cases as C
from pcops.bench import oracle
from pcops.bench import timing
from pcops.bench.peers import Inputs, Peer, all_peers, package_version, peers_for

SCHEMA = 1


@dataclass
class Config:
    ops: list[str] = field(default_factory=lambda: list(C.OPS))
    sizes: list[int] = field(default_factory=lambda: list(C.SIZES))
    graph_sizes: list[int] = field(default_factory=lambda: list(C.GRAPH_SIZES))
    orders: list[str] = field(default_factory=lambda: list(C.ORDERS))
    clouds: list[str] = field(default_factory=lambda: list(C.CLOUDS))
    batches: list[int] = field(default_factory=lambda: list(C.BATCHES))  # clouds per flat case
    # (clouds B, unknown points N) of the interpolation operators (C.INTERP_OPS, opt-in via ops)
    interp_layouts: list = field(default_factory=lambda: [list(x) for x in C.INTERP_LAYOUTS])
    conv_sizes: list[int] = field(default_factory=lambda: list(C.CONV_SIZES))  # point_conv (opt-in via ops)
    repeat: int = 5
    warmup: int = 1
    peers: list[str] | None = None
    quick: bool = False
    threads: int | None = None
    device: str = "cpu"
    budget_s: float = 10.0  # predicted single run above this: skipped (budget)
    total_cap_s: float = 10.0  # per method and case, repeats shrink to stay inside
    probe_min_n: int = 100_000  # budget prediction for inputs at least this large
    data_dir: str | None = None
    params: dict = field(default_factory=dict)  # overrides, e.g. {"k": 8}


# ----------------------------------------------------------------------------------------------
# Environment
# ----------------------------------------------------------------------------------------------


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def repo_root() -> Path | None:
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / ".git").exists() and (parent / "pyproject.toml").is_file():
            return parent
    cwd = Path.cwd()
    return cwd if (cwd / ".git").exists() else None


def git_info() -> dict:
    """Commit of the measured tree. A copy without .git (a GPU machine's working copy) names it
    through PCOPS_GIT_COMMIT (and PCOPS_GIT_DIRTY)."""
    if os.environ.get("PCOPS_GIT_COMMIT"):
        return {"commit": os.environ["PCOPS_GIT_COMMIT"], "dirty": os.environ.get("PCOPS_GIT_DIRTY") == "1"}
    root = repo_root()
    if root is None:
        return {"commit": None, "dirty": None}
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                timeout=10).stdout.strip() or None
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                                capture_output=True, text=True, timeout=10).stdout
        return {"commit": commit, "dirty": bool(status.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def library_path(relative: bool = False) -> str | None:
    """The loaded operator library; ``relative``: relative to the repository (or site-packages) so
    that results carry no machine-specific paths."""
    env = os.environ.get("PCOPS_LIBRARY")
    if env:
        p = Path(env).resolve()
    else:
        import pcops

        p = Path(pcops.__file__).resolve().parent / "_C.so"
        if not p.is_file():
            return None
    if not relative:
        return str(p)
    root = repo_root()
    if root is not None:
        try:
            return str(p.relative_to(root))
        except ValueError:
            pass
    parts = p.parts
    return str(Path(*parts[parts.index("site-packages"):])) if "site-packages" in parts else p.name


def environment(threads: int, device: str) -> dict:
    import torch

    import pcops

    versions = {"pcops": pcops.__version__, "python": platform.python_version(), "torch": torch.__version__,
                "numpy": np.__version__}
    for dist in sorted({p.package for p in all_peers()} - set(versions)):
        versions[dist] = package_version(dist)
    peers_available = {}
    for p in all_peers():
        ok, why = p.available()
        peers_available[f"{p.op}:{p.name}"] = "yes" if ok else f"no ({why})"
    gpu = None
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(torch.device(device))
        gpu = {"name": props.name, "multiprocessors": props.multi_processor_count,
               "memory_gib": round(props.total_memory / 2**30, 1), "cuda": torch.version.cuda,
               "capability": f"{props.major}.{props.minor}"}
    return {
        "gpu": gpu,
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "threads": threads,
        "torch_threads": torch.get_num_threads(),
        "device": device,
        "platform": platform.platform(),
        "versions": versions,
        "library": library_path(relative=True),
        "peers": peers_available,
        "git": git_info(),
    }


def set_threads(threads: int | None) -> int:
    import torch

    if threads:
        torch.set_num_threads(threads)
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))
        try:
            import open3d.core as o3c  # noqa: F401
        except Exception:  # noqa: BLE001
            pass
    return torch.get_num_threads()


# ----------------------------------------------------------------------------------------------
# One case
# ----------------------------------------------------------------------------------------------


def _device_sync(device: str):
    if device.startswith("cuda"):
        import torch

        return torch.cuda.synchronize
    return lambda: None


def make_inputs(case: C.Case, threads: int, device: str) -> Inputs:
    import torch

    if case.op in C.INTERP_OPS + C.CONV_OPS:
        inputs = Inputs(case.points, None, None, None, dict(case.params), threads, _device_sync(device))
        for name in ("unknown", "known", "features", "idx", "weight", "grad", "triplets", "weights"):
            if name in case.extra:
                inputs.tensors[name] = torch.from_numpy(np.ascontiguousarray(case.extra[name])).to(device)
        if case.op == "point_conv_bf16":  # the case's values are bfloat16 values: exact conversions
            for name in ("features", "weights", "grad"):
                inputs.tensors[name] = inputs.tensors[name].bfloat16()
        for name in ("features", "weights"):
            if name in inputs.tensors:
                inputs.tensors[name].requires_grad_()
        return inputs
    query = None if case.op in ("fps",) + C.FLAT_OPS else case.query
    pts_t = torch.from_numpy(case.points).to(device)[None]
    q_t = None if query is None else torch.from_numpy(np.ascontiguousarray(query)).to(device)[None]
    params = dict(case.params)
    inputs = Inputs(case.points, None if query is None else np.ascontiguousarray(query), pts_t, q_t, params,
                    threads, _device_sync(device))
    if case.op in C.FLAT_OPS:
        inputs.ptr = case.ptr
        inputs.batch = case.batch
        inputs.batch_t = None if case.batch is None else torch.from_numpy(case.batch).to(device)
    return inputs


def scaled(inputs: Inputs, op: str, fraction: float) -> Inputs:
    """The same work on a fraction of the samples (FPS) or queries (kNN, ball query)."""
    params = dict(inputs.params)
    if op in C.CONV_OPS:
        # The first fraction of the triplets (every point stays an input and an output).
        t = inputs.tensors["triplets"]
        m = max(1, int(round(t.shape[0] * fraction)))
        tensors = dict(inputs.tensors, triplets=t[:m].contiguous())
        return Inputs(inputs.points, None, None, None, params, inputs.threads, inputs.sync, tensors=tensors)
    if op in C.INTERP_OPS:
        # The first fraction of every cloud's unknown points (all known points kept).
        n = next(iter(t.shape[1] for k, t in inputs.tensors.items() if k in ("unknown", "idx")))
        m = max(1, int(round(n * fraction)))
        cut = {"unknown": 1, "idx": 1, "weight": 1, "grad": 2}
        tensors = {k: (t.narrow(cut[k], 0, m).contiguous() if k in cut else t) for k, t in inputs.tensors.items()}
        return Inputs(inputs.points, None, None, None, params, inputs.threads, inputs.sync, tensors=tensors)
    if op in C.FLAT_OPS:
        # A subset of the centres, spread over the whole cloud (and over every cloud of a batch).
        n = len(inputs.points)
        m = max(1, int(round(n * fraction)))
        rows = np.unique(np.linspace(0, n - 1, m).round().astype(np.int64))
        return Inputs(inputs.points, None, inputs.points_t, None, params, inputs.threads, inputs.sync,
                      inputs.ptr, inputs.batch, inputs.batch_t, rows)
    if op == "fps":
        params["num_samples"] = max(2, int(round(params["num_samples"] * fraction)))
        return Inputs(inputs.points, None, inputs.points_t, None, params, inputs.threads, inputs.sync)
    m = max(1, int(round(len(inputs.query) * fraction)))
    # Spread over the whole query set: a contiguous slice of a sorted cloud would be unfairly local.
    pick = np.linspace(0, len(inputs.query) - 1, m).round().astype(np.int64)
    pick_t = __import__("torch").from_numpy(pick).to(inputs.query_t.device)
    return Inputs(inputs.points, np.ascontiguousarray(inputs.query[pick]), inputs.points_t,
                  inputs.query_t[:, pick_t].contiguous(), params, inputs.threads, inputs.sync)


def compute_oracle(case: C.Case):
    """The exact answer: an array, or for the flat graph operators a dict with the checked
    centres (``rows``) and their neighbour lists (``lists``)."""
    p = case.params
    if case.op == "three_nn":
        return C.three_nn_indices(case.extra["unknown"], case.extra["known"])
    if case.op == "three_interpolate":
        return interp_oracle(case.extra["features"], case.extra["idx"], case.extra["weight"], case.extra["grad"])
    if case.op in ("point_conv", "point_conv_bf16"):
        e = case.extra
        select = conv_check_select(case)
        args = (e["features"], e["weights"], e["triplets"], case.n, e["grad"])
        if case.op == "point_conv":
            return {"parts": oracle.point_conv(*args, select=select), "select": select}
        return {**oracle.point_conv_float64(*args, select=select), "select": select}
    if case.op == "flat_knn_graph":
        rows = case.extra["check_rows"]
        return {"rows": rows, "lists": oracle.knn_graph_rows(case.points, case.ptr, rows, p["k"], p["loop"])}
    if case.op == "radius_graph":
        rows = case.extra["check_rows"]
        lists, degree = oracle.radius_graph_rows(case.points, case.ptr, rows, p["r"], p["max_num_neighbors"],
                                                 p["loop"])
        return {"rows": rows, "lists": lists, "degree": degree}
    if case.op == "fps":
        return oracle.fps(case.points, p["num_samples"], p["start_index"])
    if case.op in ("knn", "knn_graph"):
        return oracle.knn(case.query, case.points, p["k"])
    if case.op == "ball_query":
        return oracle.ball_query(case.query, case.points, p["radius"], p["K"])
    raise ValueError(case.op)


# point_conv: above this many products (triplets x C_out x C_in) the oracle checks a spread subset
# (output rows, input rows, weight-gradient output channels) of that size instead of everything.
CONV_CHECK_PRODUCTS = 500_000_000


def conv_check_select(case: C.Case):
    """None (check everything) or (out_rows, in_rows, out_channels) spread evenly over each."""
    e = case.extra
    n_out, c_out = e["grad"].shape
    n_in, c_in = e["features"].shape
    products = len(e["triplets"]) * c_out * c_in
    if products <= CONV_CHECK_PRODUCTS:
        return None
    frac = CONV_CHECK_PRODUCTS / products
    spread = lambda n: np.unique(np.linspace(0, n - 1, max(1, int(round(n * frac)))).round().astype(np.int64))
    return spread(n_out), spread(n_in), spread(c_out)


def interp_oracle(features: np.ndarray, idx: np.ndarray, weight: np.ndarray, grad: np.ndarray):
    """three_interpolate's contract in float32 NumPy (each operation rounds once, no FMA): out =
    ((+0 + w0 f0) + w1 f1) + w2 f2 over the slots with idx >= 0, and the features gradient summed
    from +0 over the slots (n, t) in ascending order (np.add.at applies them in index order).
    Returns (out [B, C, N], grad_features [B, C, M])."""
    b_n, c, m = features.shape
    n = idx.shape[1]
    out = np.zeros((b_n, c, n), np.float32)
    gf = np.zeros((b_n, c, m), np.float32)
    for b in range(b_n):
        acc = np.zeros((c, n), np.float32)
        for t in range(3):
            j = idx[b, :, t]
            valid = j >= 0
            term = features[b][:, np.where(valid, j, 0)] * weight[b, :, t][None, :]
            acc = np.where(valid[None, :], acc + term, acc)
        out[b] = acc
        jf = idx[b].reshape(-1)
        valid = jf >= 0
        vals = grad[b][:, np.repeat(np.arange(n), 3)] * weight[b].reshape(-1)[None, :]
        np.add.at(gf[b], (slice(None), jf[valid]), vals[:, valid])
    return out, gf


def _bit_mismatches(got, want: np.ndarray) -> int:
    if hasattr(got, "detach"):
        got = got.detach().cpu().numpy()
    got = np.ascontiguousarray(np.asarray(got, np.float32)).reshape(want.shape)
    return int(np.count_nonzero(got.view(np.uint32) != np.ascontiguousarray(want).view(np.uint32)))


def check(case: C.Case, peer: Peer, result, want: np.ndarray) -> dict:
    """Correctness counts of one result against the oracle; ``errors`` is the headline count."""
    if case.op == "three_interpolate":
        fwd, grad = _bit_mismatches(result[0], want[0]), _bit_mismatches(result[1], want[1])
        return {"errors": fwd + grad, "forward_mismatches": fwd, "grad_mismatches": grad,
                "compared_bitwise": True}
    if case.op in ("point_conv", "point_conv_bf16"):
        names = ("forward", "grad_features", "grad_weights")
        result = [np.asarray(r.detach().float().cpu().numpy() if hasattr(r, "detach") else r, np.float32)
                  for r in result]
        if want["select"] is not None:  # the checked subset (conv_check_select)
            out_rows, in_rows, o_sel = want["select"]
            result = [result[0][out_rows], result[1][in_rows], result[2][:, o_sel]]
        result = [r.reshape(w.shape) for r, w in zip(result, want["parts"])]
        rec = {f"{n}_checked": int(w.size) for n, w in zip(names, want["parts"])}
        # How far each part is: the largest difference relative to the part's largest magnitude.
        for n, r, w in zip(names, result, want["parts"]):
            scale = float(np.abs(w).max()) if w.size else 0.0
            rec[f"{n}_max_rel_diff"] = float(np.abs(r.astype(np.float64) - w).max() / scale) if scale > 0 else 0.0
        if case.op == "point_conv":
            rec.update({f"{n}_mismatches": _bit_mismatches(r, w) for n, r, w in zip(names, result, want["parts"])})
            return {"errors": sum(rec[f"{n}_mismatches"] for n in names), **rec, "compared_bitwise": True}
        # bfloat16: elements outside |got - ref| <= 2^-8 |ref| + terms 2^-23 sum |term| (one bfloat16
        # rounding of the result, float32 sums of `terms` terms; ref in float64).
        for n, r, ref, mag, terms in zip(names, result, want["parts"], want["magnitudes"], want["terms"]):
            bound = np.ldexp(np.abs(ref), -8) + terms * np.ldexp(mag, -23)
            rec[f"{n}_outside_bound"] = int(np.count_nonzero(~(np.abs(r.astype(np.float64) - ref) <= bound)))
        return {"errors": sum(rec[f"{n}_outside_bound"] for n in names), **rec, "compared_bitwise": False}
    if hasattr(result, "detach"):
        result = result.detach().cpu().numpy()
    result = np.asarray(result)
    if case.op in C.FLAT_OPS:
        e = oracle.graph_errors(result, want["rows"], want["lists"])
        # kNN graph: positions that differ (as knn); radius graph: the edge sets (both in index order).
        errors = e["misplaced"] if case.op == "flat_knn_graph" else e["missing"] + e["extra"]
        return {"errors": errors, **e, "checked_rows": int(len(want["rows"])),
                "checked_edges": int(sum(len(w) for w in want["lists"])),
                "edges": int(result.reshape(2, -1).shape[1])}
    if case.op == "fps":
        start = case.params["start_index"]
        if peer.returns == "points":
            # Open3D returns the selected points in index order, not selection order: compare sets.
            n = oracle.fps_point_set_missing(result, case.points, want)
            return {"errors": n, "missing": n, "compared_as_set": True}
        got = result.reshape(-1).astype(np.int64)
        n = oracle.fps_mismatches(got, want)
        rec = {"errors": n, "mismatches": n, "missing": int(len(np.setdiff1d(want, got))),
               "ignores_start": bool(len(got) > 0 and got[0] != start)}
        if rec["ignores_start"] and 0 <= got[0] < len(case.points):
            # Still exact? Compare with the oracle started where the method started.
            own = oracle.fps(case.points, case.params["num_samples"], int(got[0]))
            rec["mismatches_own_start"] = oracle.fps_mismatches(got, own)
            rec["errors"] = rec["mismatches_own_start"]
        return rec
    if case.op == "three_nn":
        e = oracle.knn_errors(result.reshape(-1, 3).astype(np.int64), want.reshape(-1, 3))
        return {"errors": e["misplaced"], **e}
    if case.op in ("knn", "knn_graph"):
        e = oracle.knn_errors(result.reshape(want.shape).astype(np.int64), want)
        return {"errors": e["misplaced"], **e}
    n = oracle.ball_query_mismatches(result.reshape(want.shape), want)
    return {"errors": n, "mismatches": n}


def run_case(case: C.Case, peers: list[Peer], cfg: Config, threads: int, progress=None) -> list[dict]:
    inputs = make_inputs(case, threads, cfg.device)
    t0 = time.perf_counter()
    want = compute_oracle(case)
    oracle_s = time.perf_counter() - t0
    records = []
    base = {"op": case.op, "cloud": case.cloud, "order": case.order, "n": case.n, "params": case.params,
            "cloud_description": case.description, "oracle_s": oracle_s}
    if case.op in C.INTERP_OPS:
        base["batches"] = case.batches
    if case.op in C.FLAT_OPS:
        base["batches"] = case.batches
        base["oracle"] = {"kind": "float32 brute force on a random subset of centres",
                          "checked_rows": int(len(want["rows"])),
                          "mean_edges_per_centre": float(np.mean([len(w) for w in want["lists"]]))
                          if len(want["rows"]) else 0.0}
        if "degree" in want:
            deg = want["degree"]
            base["oracle"]["mean_degree"] = float(deg.mean()) if len(deg) else 0.0
            base["oracle"]["capped_rows"] = int(np.count_nonzero(deg > case.params["max_num_neighbors"]))
    for peer in peers:
        rec = dict(base, peer=peer.name, package=peer.package, is_pcops=peer.is_pcops, notes=peer.notes)
        if progress is not None:
            progress(f"{case.key} {peer.name}")
        ok, why = peer.available()
        if ok and (missing := peer.missing_kernel(cfg.device)):
            ok, why = False, missing
        if not ok:
            rec.update(status="unavailable", reason=why)
            records.append(rec)
            continue
        try:
            predicted = None
            if cfg.budget_s and (case.n >= cfg.probe_min_n or case.op in C.GRAPH_OPS):
                predicted = timing.predict(lambda f: peer.fn(scaled(inputs, case.op, f)), cfg.budget_s)
                rec["predicted_s"] = predicted
                if predicted > cfg.budget_s:
                    rec["predicted_s"] = None if predicted == float("inf") else predicted
                    rec.update(status="skipped (budget)",
                               reason=f"predicted {predicted:.1f} s > budget {cfg.budget_s:g} s"
                               if predicted != float("inf") else f"one probe alone exceeded the budget {cfg.budget_s:g} s")
                    records.append(rec)
                    continue
            m = timing.measure(lambda: peer.fn(inputs), cfg.repeat, cfg.warmup, cfg.total_cap_s, predicted,
                               timer=timing.cuda_time_once if cfg.device.startswith("cuda") else None)
            rec.update(status="ok", median_s=m["median_s"], times_s=m["times_s"], repeats=m["repeats"],
                       warmup=m["warmup"])
            rec["correctness"] = check(case, peer, m["output"], want)
        except Exception as exc:  # noqa: BLE001 (a failing peer is a result, not a crash)
            rec.update(status="error", reason=f"{type(exc).__name__}: {exc}")
        records.append(rec)
    return records


def build_cases(cfg: Config):
    """Yields (op, cloud, n, order, batches) tuples in run order (cheap first). The flat operators
    run on the sphere and the scan (the mesh only when it is the only cloud asked for), each on a
    single cloud and on the batches of ``cfg.batches``; the others on one cloud."""
    for op in cfg.ops:
        if op in C.CONV_OPS:
            for n in sorted(cfg.conv_sizes):
                for cloud in cfg.clouds:
                    for order in cfg.orders:
                        yield op, cloud, n, order, 1
            continue
        if op in C.INTERP_OPS:
            for b, n in sorted((int(b), int(n)) for b, n in cfg.interp_layouts):
                for cloud in cfg.clouds:
                    for order in cfg.orders:
                        yield op, cloud, n, order, b
            continue
        sizes = cfg.graph_sizes if op in C.GRAPH_OPS else cfg.sizes
        clouds = cfg.clouds
        batches = [1]
        if op in C.FLAT_OPS:
            clouds = [c for c in cfg.clouds if c in C.FLAT_CLOUDS] or cfg.clouds
            batches = sorted(set(int(b) for b in cfg.batches)) or [1]
        for n in sorted(sizes):
            for cloud in clouds:
                for order in cfg.orders:
                    for b in batches:
                        yield op, cloud, n, order, b


def run(cfg: Config, progress_bar: bool = True, log=print, checkpoint=None,
        command: str = "pcops bench") -> dict:
    """Runs every case; ``checkpoint(doc)`` (if given) is called after each case with the results
    so far (``complete`` False), so an interrupted run still leaves its measurements."""
    threads = set_threads(cfg.threads)
    env = environment(threads, cfg.device)
    if any(c != "sphere" for c in cfg.clouds) and C.pdata.data_dir(cfg.data_dir) is None:
        log("pcops bench: NO REAL POINT CLOUDS FOUND (run `python -m pcops.data --ensure`); the scan and mesh "
            "cases are reported as unavailable, only the SYNTHETIC sphere runs", file=sys.stderr)
    plan = list(build_cases(cfg))
    records: list[dict] = []
    started = time.perf_counter()
    bar = None
    if progress_bar:
        try:
            from tqdm import tqdm

            bar = tqdm(total=len(plan), desc="pcops bench", unit="case", file=sys.stderr)
        except ImportError:
            bar = None
    def document(complete: bool) -> dict:
        return {
            "schema": SCHEMA,
            "kind": "bench",
            "complete": complete,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "command": command,
            "wall_s": time.perf_counter() - started,
            "environment": env,
            "config": dict(vars(cfg)),
            "results": records,
        }

    for op, cloud, n, order, batches in plan:
        case = C.make_case(op, cloud, n, order, cfg.data_dir, cfg.params, batches=batches)
        if bar is not None:
            bar.set_postfix_str(f"{op} {cloud} {C.format_size(n)} {order}" + (f" x{batches}" if batches > 1 else ""))
        if case is None:
            rec = {"op": op, "cloud": cloud, "order": order, "n": n, "peer": None,
                   "status": "unavailable", "reason": "cloud not available at this size"}
            if op in C.FLAT_OPS:
                rec["batches"] = batches
            records.append(rec)
        else:
            records.extend(run_case(case, peers_for(op, cfg.peers, cfg.quick, cfg.device), cfg, threads))
        if bar is not None:
            bar.update(1)
        if checkpoint is not None:
            checkpoint(document(False))
    if bar is not None:
        bar.close()
    return document(True)


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, Path):
        return str(obj)
    return obj


def result_path(out_dir: str | Path, stem: str = "bench") -> Path:
    commit = git_info().get("commit") or "nogit"
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path(out_dir) / f"{stem}-{stamp}-{commit[:8]}.json"


def write_json(doc: dict, out_dir: str | Path | None = None, stem: str = "bench", path: Path | None = None) -> Path:
    path = Path(path) if path is not None else result_path(out_dir, stem)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(_jsonable(doc), indent=1, allow_nan=False) + "\n")
    tmp.replace(path)
    return path
