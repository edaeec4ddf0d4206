"""Markdown tables and a PNG plot generated from a benchmark JSON (``pcops bench --report``)."""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path

from pcops.bench.cases import format_size

OP_TITLES = {
    "fps": "Furthest point sampling",
    "knn": "k nearest neighbours",
    "ball_query": "Ball query",
    "knn_graph": "All-points kNN graph",
    "flat_knn_graph": "Flat kNN graph, pcops.flat.knn_graph",
    "radius_graph": "Flat radius graph, pcops.flat.radius_graph",
    "three_nn": "Three nearest known points (PointNet++ feature propagation)",
    "three_interpolate": "three_interpolate, forward + features gradient",
    "point_conv": "Point convolution (PointCNN++ MVMR), forward + both gradients",
    "point_conv_bf16": "Point convolution in bfloat16 (mode='fast'), forward + both gradients",
}
# Operators reported per batch layout (a "clouds" column: 1 = a single cloud, B = B stacked clouds).
BATCHED_OPS = ("flat_knn_graph", "radius_graph", "three_nn", "three_interpolate")


def latest_json(results_dir: str | Path, kind: str = "bench") -> Path | None:
    """The newest ``<kind>-<date>-<time>-<commit>.json`` (``bench`` does not match ``bench-cuda``)."""
    import re

    pattern = re.compile(rf"^{re.escape(kind)}-\d{{8}}-\d{{6}}-")
    files = sorted(p for p in Path(results_dir).glob(f"{kind}-*.json") if pattern.match(p.name))
    return files[-1] if files else None


def load(path: str | Path) -> dict:
    return json.loads(Path(path).read_text())


def fmt_time(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.0f} us"
    if s < 1:
        return f"{s * 1e3:.1f} ms"
    return f"{s:.2f} s"


def cell(rec: dict | None) -> str:
    if rec is None:
        return ""
    status = rec.get("status")
    if status == "ok":
        c = rec.get("correctness", {})
        text = f"{fmt_time(rec['median_s'])} ({c.get('errors', '?')})"
        if c.get("ignores_start"):
            text += " †"
        if c.get("compared_as_set"):
            text += " ‡"
        return text
    if status == "skipped (budget)":
        return "skipped (budget)"
    if status == "unavailable":
        return "n/a"
    return "error"


def _params_text(op: str, params: dict) -> str:
    if op == "fps":
        return f"{params.get('num_samples')} samples, start {params.get('start_index')}"
    if op == "knn":
        return f"{params.get('num_queries')} queries, k = {params.get('k')}"
    if op == "ball_query":
        return f"{params.get('num_queries')} queries, K = {params.get('K')}, r = {params.get('radius')}"
    if op == "knn_graph":
        return f"every point queries the cloud, k = {params.get('k')}"
    if op == "flat_knn_graph":
        return (f"k = {params.get('k')}, loop = {params.get('loop')}, source_to_target; one cloud or the same "
                f"points dealt into clouds (sorted batch vector); errors on {params.get('check_rows')} random "
                "centres")
    if op == "radius_graph":
        return (f"r per case for about {params.get('target_degree')} neighbours on average (column r), "
                f"max_num_neighbors = {params.get('max_num_neighbors')}, loop = {params.get('loop')}, "
                f"source_to_target; one cloud or the same points dealt into clouds (sorted batch vector); "
                f"errors on {params.get('check_rows')} random centres")
    if op == "point_conv":
        return (f"every point an output and an input, {params.get('triplets')} triplets (kNN k = "
                f"{params.get('k')}, {params.get('kernel_size')}^3 kernel cells), C = {params.get('channels')} in "
                "and out, float32; timed forward + grad_features + grad_weights; errors: elements of the three "
                "not bitwise equal to the contract's order")
    if op == "point_conv_bf16":
        return (f"every point an output and an input, {params.get('triplets')} triplets (kNN k = "
                f"{params.get('k')}, {params.get('kernel_size')}^3 kernel cells), C = {params.get('channels')} in "
                "and out, bfloat16 inputs and outputs; timed forward + grad_features + grad_weights; errors: "
                "elements of the three farther from the float64 value than one bfloat16 rounding plus float32 "
                "sums allow")
    if op in ("three_nn", "three_interpolate"):
        text = f"M = N / {params.get('known_ratio')} known points per cloud (a random subset of the cloud)"
        if op == "three_interpolate":
            text += f", C = {params.get('channels')} channels, timed forward + backward of the features"
        return text
    return ""


def ratio(rows: list[dict], exact_only: bool = False) -> tuple[str, str]:
    """(fastest peer name, fastest-peer time / pcops time); ``exact_only``: peers with no errors."""
    pc = next((r for r in rows if r.get("is_pcops") and r.get("status") == "ok"), None)
    others = [r for r in rows if not r.get("is_pcops") and r.get("status") == "ok"
              and (not exact_only or r.get("correctness", {}).get("errors") == 0)]
    if pc is None or not others:
        return "", ""
    best = min(others, key=lambda r: r["median_s"])
    return best["peer"], f"{best['median_s'] / pc['median_s']:.2f}x"


def markdown(doc: dict, source: str = "", plot_name: str = "benchmarks.png") -> str:
    env = doc.get("environment", {})
    git = env.get("git", {}) or {}
    gpu = env.get("gpu") or None
    title = f"# Benchmarks on CUDA ({gpu.get('name')})" if gpu else "# Benchmarks"
    where = (f"- GPU: {gpu.get('name')} ({gpu.get('multiprocessors')} SMs, {gpu.get('memory_gib')} GiB, "
             f"CUDA {gpu.get('cuda')}); every time from CUDA events around the call, inputs resident on the GPU"
             if gpu else "- CUDA results: [benchmarks-cuda.md](benchmarks-cuda.md)")
    lines = [
        title,
        "",
        "<!-- GENERATED by `pcops bench --report` from the JSON in benchmarks/results; do not edit. -->",
        "",
        f"Generated from `{source}`, measured with `{doc.get('command', 'pcops bench')}` on "
        f"{doc.get('created', '?')}.",
        "",
        "Each cell is the median wall time of repeated runs in one process (warm-up excluded; trees and "
        "indexes are built inside the timed call) and, in parentheses, the error count against the exact "
        "oracle of CONTRACTS.md: FPS positions whose index differs, kNN positions whose index differs "
        "(`misplaced`; `missing` neighbours are in the JSON), ball-query slots that differ from the "
        "first-K-by-index oracle" + (
            "; flat kNN graph: edge positions per centre that differ from a float32 brute-force oracle on a "
            "random subset of centres (`missing` / `extra` edges are in the JSON), flat radius graph: missing + "
            "extra edges of those centres" if any(r.get("op") in BATCHED_OPS for r in doc.get("results", []))
            else "") + ". † marks an FPS method that did not start at the given start index; its "
        "count is against the oracle started at the method's own first index. ‡ marks a method that returns "
        "the selected points in index order, compared as a set (oracle points not returned). "
        "*ratio* = fastest peer time / pcops time (above 1: pcops is faster); *ratio (exact)* counts "
        "only peers with zero errors on that case. \"skipped (budget)\": the "
        "method was predicted above the time budget from runs on a fraction of the work.",
        "",
        "Clouds: *sphere* = points on the unit sphere + 0.01 gaussian noise; *scan* = building.ply (a "
        "real scan, 100k points, subsampled for 20k); *mesh* = refined_elephant.off sampled uniformly on "
        "its faces; real clouds are centred and scaled into the unit ball. Orders: *random* permutation, "
        "*morton* = sorted along a Z-order curve. Queries are a random subset of the points.",
        "",
        "## Environment",
        "",
        f"- CPU: {env.get('cpu_model')} ({env.get('cpu_count')} logical cores, {env.get('threads')} threads)",
        f"- device: {env.get('device')}; " + (
            "git commits of the runs, in order: " + ", ".join(
                f"{(g.get('commit') or '?')[:8]}{' (dirty)' if g.get('dirty') else ''}" for g in doc["runs_git"])
            if doc.get("runs_git") else f"git commit {git.get('commit')} (dirty: {git.get('dirty')})"),
        where,
        "- versions: " + ", ".join(f"{k} {v}" for k, v in (env.get("versions") or {}).items()),
        "",
    ]
    results = doc.get("results", [])
    for op in OP_TITLES:
        recs = [r for r in results if r.get("op") == op and r.get("peer")]
        if not recs:
            continue
        peers = list(OrderedDict.fromkeys(r["peer"] for r in recs if not r.get("is_pcops")))
        params = next((r.get("params") for r in recs if r.get("params")), {})
        lines += [f"## {OP_TITLES[op]} ({_params_text(op, params)})", ""]
        batched = op in BATCHED_OPS
        case_cols = ["cloud", "N", "order"] + (["clouds"] if batched else [])
        case_cols += ["r", "mean degree"] if op == "radius_graph" else []
        header = case_cols + ["pcops"] + peers + ["fastest peer", "ratio", "fastest exact peer", "ratio (exact)"]
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "|".join(["---"] * len(case_cols) + ["---:"] * (len(header) - len(case_cols))) + "|")
        groups = OrderedDict()
        for r in recs:
            groups.setdefault((r["cloud"], r["n"], r["order"], r.get("batches", 1)), []).append(r)
        for (cloud, n, order, batches), rows in sorted(groups.items(),
                                                       key=lambda kv: (kv[0][1], kv[0][0], kv[0][2], kv[0][3])):
            by_peer = {r["peer"]: r for r in rows}
            pc = next((r for r in rows if r.get("is_pcops")), None)
            best, rat = ratio(rows)
            best_x, rat_x = ratio(rows, exact_only=True)
            case = [cloud, format_size(n), order] + ([str(batches)] if batched else [])
            if op == "radius_graph":
                first = rows[0]
                deg = (first.get("oracle") or {}).get("mean_degree")
                case += [f"{(first.get('params') or {}).get('r'):g}" if (first.get("params") or {}).get("r")
                         is not None else "", f"{deg:.1f}" if deg is not None else ""]
            lines.append("| " + " | ".join(case + [cell(pc)]
                                           + [cell(by_peer.get(p)) for p in peers]
                                           + [best, rat, best_x, rat_x]) + " |")
        current = _current_notes(op)
        notes = OrderedDict((r["peer"], current.get(r["peer"]) or r.get("notes")) for r in recs
                            if current.get(r["peer"]) or r.get("notes"))
        if notes:
            lines.append("")
            lines += [f"- {p}: {n}" for p, n in notes.items()]
        errors = [r for r in recs if r.get("status") == "error"]
        for r in errors[:5]:
            where = f"{r['cloud']} {format_size(r['n'])} {r['order']}" + (
                f" x{r['batches']}" if r.get("batches", 1) > 1 else "")
            lines.append(f"- error: {r['peer']} on {where}: {r.get('reason')}")
        if batched:
            missing = OrderedDict((r["peer"], r.get("reason")) for r in recs
                                  if r.get("status") == "unavailable" and r.get("is_pcops"))
            lines += [f"- n/a: {p} on this device: {why}" for p, why in missing.items()]
        lines.append("")
    lines += [f"![benchmark plot]({plot_name})", ""]
    return "\n".join(lines)


def _current_notes(op: str) -> dict:
    try:
        from pcops.bench.peers import peers_for

        return {p.name: p.notes for p in peers_for(op)}
    except Exception:  # noqa: BLE001 (the report must work from the JSON alone)
        return {}


def plot(doc: dict, path: str | Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    results = [r for r in doc.get("results", []) if r.get("status") == "ok"]
    ops = [op for op in OP_TITLES if any(r["op"] == op for r in results)]
    if not ops:
        return None
    fig, axes = plt.subplots(1, len(ops), figsize=(5 * len(ops), 4.2), squeeze=False)
    for ax, op in zip(axes[0], ops):
        recs = [r for r in results if r["op"] == op and r.get("batches", 1) == 1] or \
            [r for r in results if r["op"] == op]
        combos = OrderedDict.fromkeys((r["cloud"], r["order"]) for r in recs)
        cloud, order = ("sphere", "random") if ("sphere", "random") in combos else next(iter(combos))
        recs = [r for r in recs if r["cloud"] == cloud and r["order"] == order]
        for peer in OrderedDict.fromkeys(r["peer"] for r in recs):
            pts = sorted((r["n"], r["median_s"]) for r in recs if r["peer"] == peer)
            style = dict(linewidth=2.5, color="black") if peer == "pcops" else dict(linewidth=1)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=peer, **style)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("points")
        ax.set_ylabel("median time [s]")
        ax.set_title(f"{OP_TITLES[op]}\n({cloud}, {order} order)", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def merge(docs: list[dict]) -> dict:
    """Several runs as one document: results of later runs replace earlier ones for the same
    (op, cloud, n, order, peer); the environment is the last run's, the commands and the commits
    of all runs are listed."""
    if len(docs) == 1:
        return docs[0]
    out = dict(docs[-1])
    out["runs_git"] = [((d.get("environment") or {}).get("git") or {}) for d in docs]
    table: OrderedDict = OrderedDict()
    for d in docs:
        for r in d.get("results", []):
            table[(r.get("op"), r.get("cloud"), r.get("n"), r.get("order"), r.get("batches", 1), r.get("peer"))] = r
    # A case measured later replaces a case's "unmeasured" placeholder.
    out["results"] = list(table.values())
    out["command"] = "`, then `".join(d.get("command", "pcops bench") for d in docs)
    out["created"] = ", ".join(d.get("created", "?") for d in docs)
    return out


def probe_markdown(doc: dict, source: str, peer_doc: dict | None = None, peer_source: str | None = None) -> str:
    """The CUDA target table of benchmarks/scripts/cuda_probe.py (a ``cuda-probe-*.json``). Cases
    that ``doc`` measured without peers (``--quick``) take their peer columns from ``peer_doc``
    (an earlier probe), marked with an asterisk."""
    env = doc.get("environment", {})
    earlier = {r["case"]: r.get("peers") for r in (peer_doc or {}).get("results", []) if r.get("peers")}
    lines = [
        "## Targets of the CUDA backend",
        "",
        f"From `{source}` ({env.get('gpu')}, torch {env.get('torch')}, CUDA {env.get('cuda')}, commit "
        f"{env.get('commit')}), measured with `python benchmarks/scripts/cuda_probe.py` (run by "
        "`tests/cuda/run_gpu.sh bench`): medians of CUDA-event times, inputs resident on the GPU, unit-sphere "
        "shell clouds. *exact* = pcops CUDA output bitwise equal to the pcops CPU backend; a peer's count is its "
        "slots that differ from that exact result.",
        "",
        "| case | pcops | target | met | exact | peer | peer time | peer mismatches | ratio |",
        "|---|---:|---:|---|---|---|---:|---:|---:|",
    ]
    borrowed = False
    for r in doc.get("results", []):
        peers, mark = r.get("peers"), ""
        if not peers and r["case"] in earlier:
            peers, mark, borrowed = earlier[r["case"]], "*", True
        for name, p in (peers or {"": {}}).items():
            pt = p.get("ms")
            lines.append("| " + " | ".join([
                r["case"], f"{r['pcops_ms']:.3f} ms", f"{r['target_ms']:g} ms",
                "yes" if r["pcops_ms"] <= r["target_ms"] else "**no**", "yes" if r.get("exact_vs_cpu") else "**no**",
                (name + mark) if name else "-", f"{pt:.2f} ms" if pt is not None else p.get("error", "-"),
                str(p.get("mismatches", "-")), f"{pt / r['pcops_ms']:.1f}x" if pt else "-"]) + " |")
    if borrowed:
        lines += ["", f"\\* peer measured in the earlier run `{peer_source}` (same script, same GPU); this run "
                      "timed pcops only."]
    lines.append("")
    return "\n".join(lines)


def write_report(json_path: str | Path | list, docs_path: str | Path = "docs/benchmarks.md",
                 source_label: str | None = None) -> tuple[Path, Path | None]:
    paths = list(json_path) if isinstance(json_path, (list, tuple)) else [json_path]
    doc = merge([load(p) for p in paths])
    docs_path = Path(docs_path)
    docs_path.parent.mkdir(parents=True, exist_ok=True)
    label = source_label or ", ".join(f"benchmarks/results/{Path(p).name}" for p in paths)
    text = markdown(doc, label, docs_path.with_suffix(".png").name)
    if (doc.get("environment") or {}).get("gpu"):
        probe = latest_json(Path(paths[-1]).parent, "cuda-probe")
        if probe is not None:
            # The newest earlier probe that timed peers fills in a --quick run's peer columns.
            earlier = None
            for cand in sorted(Path(paths[-1]).parent.glob("cuda-probe-*.json"), reverse=True):
                if cand != probe and any(r.get("peers") for r in load(cand).get("results", [])):
                    earlier = cand
                    break
            head, _, tail = text.partition("## Environment")
            text = head + probe_markdown(
                load(probe), f"benchmarks/results/{probe.name}", load(earlier) if earlier else None,
                f"benchmarks/results/{earlier.name}" if earlier else None) + "\n## Environment" + tail
    docs_path.write_text(text)
    png = plot(doc, docs_path.with_suffix(".png"))
    return docs_path, png
