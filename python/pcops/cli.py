"""The ``pcops`` console command: ``pcops info``, ``pcops demo``, ``pcops bench``."""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


# ----------------------------------------------------------------------------------------------
# info
# ----------------------------------------------------------------------------------------------


def backends() -> dict[str, bool]:
    """Backends compiled into the loaded library, read from the torch dispatcher's registrations."""
    import torch

    import pcops  # noqa: F401 (loads the library)

    out = {}
    for key in ("CPU", "CUDA"):
        try:
            out[key.lower()] = bool(torch._C._dispatch_has_kernel_for_dispatch_key(
                "pcops::furthest_point_sample", key))
        except (AttributeError, RuntimeError):
            out[key.lower()] = key == "CPU"
    return out


def info_lines() -> list[str]:
    import torch

    import pcops
    from pcops import data as pdata
    from pcops.bench.run import cpu_model, library_path

    be = backends()
    cuda_devices = torch.cuda.device_count() if torch.cuda.is_available() else 0
    d = pdata.find_data_dir()
    try:
        ops = sorted(n.split("::", 1)[1] for n in torch._C._dispatch_get_all_op_names() if n.startswith("pcops::"))
    except AttributeError:
        ops = sorted(n for n in dir(torch.ops.pcops) if not n.startswith("_"))
    return [
        f"pcops {pcops.__version__}",
        f"library:      {library_path()}",
        f"package:      {Path(pcops.__file__).resolve().parent}",
        f"backends:     cpu {'yes' if be.get('cpu') else 'no'}, cuda {'yes' if be.get('cuda') else 'no'}",
        f"operators:    {', '.join(ops)}",
        f"torch:        {torch.__version__} ({torch.get_num_threads()} threads, "
        f"CUDA {'available, ' + str(cuda_devices) + ' device(s)' if cuda_devices else 'not available'})",
        f"python:       {platform.python_version()} ({sys.executable})",
        f"cpu:          {cpu_model()} ({os.cpu_count()} logical cores)",
        f"data dir:     {d if d is not None else 'NOT FOUND (run `python -m pcops.data --ensure`)'}",
    ]


def cmd_info(args) -> int:
    print("\n".join(info_lines()))
    return 0


# ----------------------------------------------------------------------------------------------
# demo
# ----------------------------------------------------------------------------------------------


def cmd_demo(args) -> int:
    from pcops import demo

    return demo.main(data_dir=args.data_dir, out=args.out, quick=args.quick, threads=args.threads,
                     repeat=args.repeat, progress=not args.no_progress, download=not args.no_download)


# ----------------------------------------------------------------------------------------------
# bench
# ----------------------------------------------------------------------------------------------


def cmd_bench(args) -> int:
    from pcops.bench import cases as C
    from pcops.bench import report

    cuda = args.device.startswith("cuda")
    stem = "bench-cuda" if cuda else "bench"
    # CUDA runs get their own JSON stem and page (docs/benchmarks-cuda.md beside the CPU one).
    docs = Path(args.docs) if args.docs else Path("docs/benchmarks-cuda.md" if cuda else "docs/benchmarks.md")
    if args.report:
        srcs = [Path(p) for p in args.input] if args.input else [report.latest_json(args.out, stem)]
        if srcs[0] is None:
            print(f"pcops bench --report: no {stem}-*.json in {args.out}", file=sys.stderr)
            return 1
        md, png = report.write_report(srcs, docs, source_label=", ".join(_rel(p) for p in srcs))
        print(f"wrote {md}" + (f" and {png}" if png else ""))
        return 0
    if args.device != "cpu" and not args.device.startswith("cuda"):
        print(f"--device: expected cpu or cuda, got {args.device!r}", file=sys.stderr)
        return 2
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            print("--device cuda: CUDA is not available in this torch build", file=sys.stderr)
            return 2
    from pcops.bench.run import Config, result_path, run, write_json

    ops = _csv(args.ops) if args.ops else list(C.OPS)
    for op in ops:
        if op not in C.ALL_OPS:
            print(f"--ops: unknown operator {op!r} (expected {', '.join(C.ALL_OPS)})", file=sys.stderr)
            return 2
    sizes = [C.parse_size(s) for s in _csv(args.sizes)] if args.sizes else list(C.SIZES)
    try:
        batches = [int(b) for b in _csv(args.batches)] if args.batches else list(C.BATCHES)
    except ValueError:
        batches = [0]
    if any(b < 1 for b in batches):
        print(f"--batches: expected positive cloud counts, got {args.batches!r}", file=sys.stderr)
        return 2
    cfg = Config(
        ops=ops,
        sizes=sizes,
        conv_sizes=sizes if args.sizes else list(C.CONV_SIZES),
        graph_sizes=[C.parse_size(s) for s in _csv(args.graph_sizes)] if args.graph_sizes
        else (list(C.GRAPH_SIZES) if not args.sizes else [s for s in sizes if s >= 100_000] or sizes[-1:]),
        orders=_csv(args.orders) if args.orders else list(C.ORDERS),
        clouds=_csv(args.clouds) if args.clouds else list(C.CLOUDS),
        batches=batches,
        repeat=args.repeat,
        peers=_csv(args.peers) if args.peers else None,
        quick=args.quick,
        threads=args.threads,
        device=args.device,
        budget_s=args.budget,
        data_dir=args.data_dir,
        params=_param_overrides(args),
    )
    for o in cfg.orders:
        if o not in C.ORDERS:
            print(f"--orders: unknown order {o!r} (expected {', '.join(C.ORDERS)})", file=sys.stderr)
            return 2
    for c in cfg.clouds:
        if c not in C.CLOUDS:
            print(f"--clouds: unknown cloud {c!r} (expected {', '.join(C.CLOUDS)})", file=sys.stderr)
            return 2
    path = result_path(args.out, stem)
    command = "pcops " + " ".join(_shell_quote(_portable(a)) for a in args.argv)
    doc = run(cfg, progress_bar=not args.no_progress, checkpoint=lambda d: write_json(d, path=path),
              command=command)
    write_json(doc, path=path)
    print(summary_table(doc))
    print(f"\nwrote {path}")
    if not args.no_report:
        md, png = report.write_report(path, docs, source_label=_rel(path))
        print(f"wrote {md}" + (f" and {png}" if png else ""))
    return 0


def _portable(arg: str) -> str:
    """An absolute path outside the working directory recorded as its last two parts, so that
    results carry no machine-specific paths."""
    if arg.startswith("/") and not arg.startswith(str(Path.cwd())):
        return "/".join(Path(arg).parts[-2:])
    if arg.startswith(str(Path.cwd()) + "/"):
        return arg[len(str(Path.cwd())) + 1:]
    return arg


def _shell_quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


def _rel(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return Path(path).name


def _param_overrides(args) -> dict:
    out = {}
    for key in ("k", "K", "radius", "num_samples", "num_queries", "channels"):
        v = getattr(args, key, None)
        if v is not None:
            out[key] = v
    return out


def summary_table(doc: dict) -> str:
    from pcops.bench.cases import format_size
    from pcops.bench.report import cell, ratio

    rows = []
    groups: dict = {}
    for r in doc["results"]:
        if r.get("peer"):
            groups.setdefault((r["op"], r["cloud"], r["n"], r["order"], r.get("batches", 1)), []).append(r)
    w = 44
    rows.append(f"{'case':{w}s} {'pcops':>18s} {'fastest peer':>40s} {'ratio':>8s}")
    for (op, cloud, n, order, batches), recs in groups.items():
        pc = next((r for r in recs if r.get("is_pcops")), None)
        best, rat = ratio(recs)
        bt = next((cell(r) for r in recs if r["peer"] == best and not r.get("is_pcops")), "")
        name = f"{op} {cloud} {format_size(n)} {order}" + (f" x{batches}" if batches > 1 else "")
        rows.append(f"{name:{w}s} {cell(pc):>18s} "
                    f"{(best + ' ' + bt) if best else '':>40s} {rat:>8s}")
    return "\n".join(rows)


# ----------------------------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pcops", description="pcops: exact point-cloud operators")
    sub = parser.add_subparsers(dest="command")

    p = sub.add_parser("info", help="versions, library, backends, data directory")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("demo", help="Point-MAE grouping and PointNet++ set abstraction on the real clouds")
    p.add_argument("--data-dir", default=None, help="directory with the real clouds (default: searched)")
    p.add_argument("--out", default="out/demo", help="output directory for JSON and PNG (default out/demo)")
    p.add_argument("--quick", action="store_true", help="fewer clouds and peers (for tests)")
    p.add_argument("--threads", type=int, default=None, help="torch/pcops threads (default: torch's)")
    p.add_argument("--repeat", type=int, default=3, help="measured runs per method (median reported)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--no-download", action="store_true",
                   help="do not fetch the real clouds from Debian when none are found (use a synthetic one)")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("bench", help="the comparison harness against peer libraries")
    p.add_argument("--ops", default=None,
                   help="comma list of fps,knn,ball_query,knn_graph,flat_knn_graph,radius_graph (default all "
                        "of these), and the opt-in three_nn,three_interpolate,point_conv,point_conv_bf16")
    p.add_argument("--sizes", default=None,
                   help="comma list of cloud sizes, e.g. 20k,100k,1M (point_conv, point_conv_bf16: default 20k)")
    p.add_argument("--graph-sizes", default=None,
                   help="sizes for knn_graph, flat_knn_graph and radius_graph (default 100k,1M)")
    p.add_argument("--batches", default=None,
                   help="comma list of cloud counts for flat_knn_graph / radius_graph (default 1,16: a single "
                        "cloud and the same points as 16 clouds)")
    p.add_argument("--orders", default=None, help="comma list of random,morton (default both)")
    p.add_argument("--clouds", default=None, help="comma list of sphere,scan,mesh (default all)")
    p.add_argument("--repeat", type=int, default=5, help="measured runs per method (median reported)")
    p.add_argument("--peers", default=None, help="comma list of peer name prefixes or packages (pcops always runs)")
    p.add_argument("--quick", action="store_true", help="leave out the slow peers")
    p.add_argument("--threads", type=int, default=None, help="torch/pcops threads (default: torch's)")
    p.add_argument("--device", default="cpu",
                   help="cpu, or cuda: pcops and plain PyTorch on the GPU, timed with CUDA events")
    p.add_argument("--budget", type=float, default=10.0, help="seconds; a method predicted above is skipped")
    p.add_argument("--data-dir", default=None, help="directory with the real clouds")
    p.add_argument("--out", default="benchmarks/results", help="directory of the JSON results")
    p.add_argument("--docs", default=None,
                   help="generated markdown, PNG beside it (default docs/benchmarks.md, CUDA docs/benchmarks-cuda.md)")
    p.add_argument("--report", action="store_true", help="only regenerate the markdown + PNG from JSON")
    p.add_argument("--input", action="append", default=None,
                   help="JSON for --report (default: newest in --out); repeat to merge runs, later ones win")
    p.add_argument("--no-report", action="store_true", help="do not regenerate the markdown after a run")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("-k", dest="k", type=int, default=None, help="override k (knn, knn_graph, flat_knn_graph)")
    p.add_argument("-K", dest="K", type=int, default=None, help="override K (ball_query)")
    p.add_argument("--radius", type=float, default=None, help="override the ball-query radius")
    p.add_argument("--num-samples", type=int, default=None, help="override the FPS sample count")
    p.add_argument("--num-queries", type=int, default=None, help="override the query count")
    p.add_argument("--channels", type=int, default=None,
                   help="override the channels (three_interpolate, point_conv, point_conv_bf16)")
    p.set_defaults(func=cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.argv = argv
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
