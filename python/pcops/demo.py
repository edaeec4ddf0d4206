"""``pcops demo``: the grouping steps of two point-cloud networks on every real cloud, pcops against
the installed peer libraries doing the same work, each checked against an exact oracle.

- Point-MAE grouping: FPS to 1024 centres, then the k = 32 nearest points of each centre.
- PointNet++ set abstraction: FPS to 512 centres, then a ball query of radius 0.2 x the cloud's
  bounding-box diagonal with K = 32.

The neighbour searches of every library start from the same (exact) centres, so the times compare
the same work. Output: a table on stdout, ``demo.json`` (environment, git commit, versions, every
time and correctness count) and ``demo.png`` in the output directory.
"""

from __future__ import annotations

import datetime as _dt
import json
import sys
import time
from pathlib import Path

import numpy as np

from pcops import data as pdata
from pcops.bench import cases as C
from pcops.bench import oracle
from pcops.bench.peers import peers_for
from pcops.bench.report import cell, fmt_time
from pcops.bench.run import Config, _jsonable, environment, run_case, set_threads

QUICK_CLOUDS = ("kitten.xyz", "hippo1.ply")
QUICK_PEERS = ["fpsample.fps_sampling", "scipy", "open3d.nns", "faiss"]

STEPS = (
    # (stage, step, op)
    ("Point-MAE group", "fps 1024", "fps"),
    ("Point-MAE group", "knn k=32", "knn"),
    ("PointNet++ SA", "fps 512", "fps"),
    ("PointNet++ SA", "ball r=0.2diag K=32", "ball_query"),
)


def _clouds(data_dir, quick: bool, download: bool = True) -> list[tuple[str, np.ndarray, str]]:
    try:
        files = pdata.list_clouds(data_dir)
    except FileNotFoundError as exc:
        print(f"pcops demo: {exc}", file=sys.stderr)
        files = []
    if not files and data_dir is None and download:
        found = pdata.ensure_data()
        files = pdata.list_clouds(found) if found is not None else []
    if not files:
        banner = "!" * 78
        print(f"{banner}\npcops demo: NO REAL POINT CLOUDS FOUND (run `python -m pcops.data --ensure` or set "
              f"PCOPS_DATA_DIR).\nRunning on a SYNTHETIC sphere-shell cloud instead; these numbers say nothing "
              f"about real data.\n{banner}", file=sys.stderr)
        return [("synthetic-sphere", pdata.synthetic_cloud(4096), "synthetic unit sphere shell, 4096 points")]
    if quick:
        files = [f for f in files if f.name in QUICK_CLOUDS] or files[-1:]
    out = []
    for f in files:
        cloud = pdata.load(f)
        out.append((f.name, cloud.points, f"{f.name}: {len(cloud)} points" + (" (mesh vertices)" if cloud.is_mesh else "")))
    return out


def _case(op, name, pts, desc, params, query_index=None) -> C.Case:
    return C.Case(op, name, "file", len(pts), pts, query_index, params, desc)


def run_demo(data_dir=None, quick: bool = False, threads: int | None = None, repeat: int = 3,
             progress: bool = True, download: bool = True) -> dict:
    threads = set_threads(threads)
    # Small clouds: every method is probed first, so slow ones run fewer repeats (never fewer than one).
    cfg = Config(repeat=repeat, warmup=1, budget_s=2.0, total_cap_s=1.0, probe_min_n=0, quick=quick)
    clouds = _clouds(data_dir, quick, download)
    bar = None
    if progress:
        try:
            from tqdm import tqdm

            bar = tqdm(total=len(clouds) * len(STEPS), desc="pcops demo", unit="step", file=sys.stderr)
        except ImportError:
            bar = None
    records = []
    started = time.perf_counter()
    for name, pts, desc in clouds:
        pts = np.ascontiguousarray(pts, np.float32)
        n = len(pts)
        diag = float(np.linalg.norm(pts.max(axis=0).astype(np.float64) - pts.min(axis=0)))
        centres = {}
        for stage, step, op in STEPS:
            if bar is not None:
                bar.set_postfix_str(f"{name} {step}")
            if op == "fps":
                m = min(1024 if "1024" in step else 512, n)
                case = _case("fps", name, pts, desc, {"num_samples": m, "start_index": 0})
                centres[stage] = oracle.fps(pts, m, 0)
            elif op == "knn":
                q = centres[stage]
                case = _case("knn", name, pts, desc, {"num_queries": len(q), "k": min(32, n)}, q)
            else:
                q = centres[stage]
                case = _case("ball_query", name, pts, desc,
                             {"num_queries": len(q), "K": 32, "radius": 0.2 * diag}, q)
            peers = peers_for(op, QUICK_PEERS if quick else None, quick)
            for rec in run_case(case, peers, cfg, threads):
                rec.update(stage=stage, step=step, diagonal=diag)
                records.append(rec)
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    return {
        "schema": 1,
        "kind": "demo",
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": "pcops demo" + (" --quick" if quick else ""),
        "wall_s": time.perf_counter() - started,
        "environment": environment(threads, "cpu"),
        "config": {"quick": quick, "repeat": repeat, "threads": threads, "budget_s": cfg.budget_s,
                   "clouds": [c[0] for c in clouds]},
        "results": records,
    }


def table(doc: dict) -> str:
    """One block per step: rows = clouds, columns = pcops and each peer (time and error count)."""
    lines = []
    recs = doc["results"]
    for stage, step, op in STEPS:
        rows = [r for r in recs if r.get("step") == step and r.get("stage") == stage]
        if not rows:
            continue
        peers = list(dict.fromkeys(r["peer"] for r in rows))
        widths = [max(22, *(len(r["cloud"]) for r in rows))] + [max(14, len(p)) for p in peers]
        lines.append(f"\n{stage}: {step}   [median time (errors vs exact oracle)]")
        lines.append("  ".join(h.rjust(w) if i else h.ljust(w)
                               for i, (h, w) in enumerate(zip(["cloud"] + peers, widths))))
        for cloud in dict.fromkeys(r["cloud"] for r in rows):
            by = {r["peer"]: r for r in rows if r["cloud"] == cloud}
            n = next(iter(by.values()))["n"]
            cells = [f"{cloud} ({n})"] + [cell(by.get(p)) or "-" for p in peers]
            lines.append("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))))
    total_pc = sum(r["median_s"] for r in recs if r.get("is_pcops") and r.get("status") == "ok")
    bad = sum(r["correctness"]["errors"] for r in recs if r.get("is_pcops") and r.get("status") == "ok")
    lines.append(f"\npcops: {fmt_time(total_pc)} for all steps on all clouds, {bad} errors against the exact oracle.")
    return "\n".join(lines)


def plot(doc: dict, path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    recs = [r for r in doc["results"] if r.get("status") == "ok"]
    fig, axes = plt.subplots(1, len(STEPS), figsize=(5 * len(STEPS), 4.5), squeeze=False)
    for ax, (stage, step, op) in zip(axes[0], STEPS):
        rows = [r for r in recs if r.get("step") == step and r.get("stage") == stage]
        clouds = list(dict.fromkeys(r["cloud"] for r in rows))
        peers = list(dict.fromkeys(r["peer"] for r in rows))
        width = 0.8 / max(1, len(peers))
        for j, peer in enumerate(peers):
            ys = [next((r["median_s"] for r in rows if r["cloud"] == c and r["peer"] == peer), np.nan)
                  for c in clouds]
            ax.bar(np.arange(len(clouds)) + j * width, ys, width, label=peer,
                   color="black" if peer == "pcops" else None)
        ax.set_xticks(np.arange(len(clouds)) + 0.4 - width / 2)
        ax.set_xticklabels(clouds, rotation=60, ha="right", fontsize=7)
        ax.set_yscale("log")
        ax.set_ylabel("median time [s]")
        ax.set_title(f"{stage}: {step}", fontsize=10)
        ax.legend(fontsize=6)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(data_dir=None, out="out/demo", quick=False, threads=None, repeat=3, progress=True,
         download=True) -> int:
    doc = run_demo(data_dir, quick, threads, repeat, progress, download)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "demo.json").write_text(json.dumps(_jsonable(doc), indent=1) + "\n")
    png = plot(doc, out / "demo.png")
    print(table(doc))
    print(f"\nwrote {out / 'demo.json'}" + (f" and {png}" if png else "") + f" ({doc['wall_s']:.0f} s)")
    bad = [r for r in doc["results"] if r.get("is_pcops") and (r.get("status") != "ok" or r["correctness"]["errors"])]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
