"""Builds side by side: point_conv_kernels.py (or point_conv_probe.py, --script probe) run once per
build and round, each in its own process with that build's library, the builds alternating
within every round, so that two trees built on one machine in one session are timed under the
same conditions. Every row is tagged with its build and round; the summary gives each build's
median over the rounds per row key (width, part, choices) and its ratio to the first build, and,
where the script records output digests (point_conv_kernels.py does), whether every build gave
the same bits (they implement one contract, so a difference is a change of results, not of
speed). Comparing the builds in separate sessions instead mixes the machines' own differences
into the result (docs/point_conv_kernels.md has a case: a slowdown of one build that an on/off
comparison inside it did not show).

A build is LABEL=LIBRARY or LABEL=LIBRARY:PYTHON_DIR (the _C.so and, for an older tree, its
python/ directory, put first on PYTHONPATH); everything after `--` goes to the script, which
gets --rounds 1 and its own --out from here.

    python benchmarks/scripts/point_conv_builds.py \\
        --build 300c375=/tmp/old/python/pcops/_C.so:/tmp/old-tree/python \\
        --build head=build/python/pcops/_C.so --rounds 2 -- \\
        --device cuda --points 165000 --channels 128,256,512 --dtype bfloat16 --mode fast

JSON goes to --out, else to benchmarks/results/point-conv-builds[-cuda]-<date>-<commit>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = {"kernels": HERE / "point_conv_kernels.py", "probe": HERE / "point_conv_probe.py"}
# Row fields that are measurements or bookkeeping, not part of what a row measures.
NOT_KEY = {"seconds", "same_bits_as_first", "digest", "round", "build"}


def parse_build(spec: str) -> tuple[str, Path, Path | None]:
    """LABEL=LIBRARY[:PYTHON_DIR] -> (label, library, python dir or None); both paths must exist."""
    label, eq, rest = spec.partition("=")
    if not eq or not label or not rest:
        raise ValueError(f"--build {spec!r}: expected LABEL=LIBRARY[:PYTHON_DIR]")
    lib, _, py = rest.partition(":")
    library, python_dir = Path(lib), Path(py) if py else None
    if not library.is_file():
        raise ValueError(f"--build {spec!r}: no library at {library}")
    if python_dir is not None and not (python_dir / "pcops").is_dir():
        raise ValueError(f"--build {spec!r}: no pcops package in {python_dir}")
    return label, library, python_dir


def run_once(script: Path, library: Path, python_dir: Path | None, script_args: list[str],
             env_extra: dict[str, str] | None = None) -> dict:
    """One run (one round) of the script with the build's library, and env_extra set; its JSON."""
    env = dict(os.environ, PCOPS_LIBRARY=str(library.resolve()), **(env_extra or {}))
    if python_dir is not None:
        rest = [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []
        env["PYTHONPATH"] = os.pathsep.join([str(python_dir.resolve()), *rest])
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        cmd = [sys.executable, str(script), *script_args, "--rounds", "1", "--out", str(out)]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if done.returncode != 0 or not out.is_file():
            raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n"
                               f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
        return json.loads(out.read_text())


def row_key(row: dict) -> tuple:
    """What a row measures: its fields other than measurements (floats, lists) and bookkeeping."""
    return tuple(sorted((k, v) for k, v in row.items()
                        if k not in NOT_KEY and not isinstance(v, (float, list, dict))
                        and not k.endswith("_bytes")))


def summarize(rows: list[dict], labels: list[str]) -> list[dict]:
    """Per row key: each build's median seconds over the rounds (the kernels script's "seconds";
    the probe's *_s fields each), its ratio to the first build's, and whether the digests agree."""
    groups: dict[tuple, dict[str, list[dict]]] = {}
    for row in rows:
        groups.setdefault(row_key(row), {}).setdefault(row["build"], []).append(row)
    out = []
    for key, by_build in groups.items():
        fields = sorted({k for rs in by_build.values() for r in rs for k, v in r.items()
                         if isinstance(v, float) and (k == "seconds" or k.endswith("_s"))})
        entry = {**dict(key), "medians": {}}
        for field in fields:
            med = {b: statistics.median(r[field] for r in by_build[b]) for b in labels if b in by_build}
            first = med.get(labels[0])
            entry["medians"][field] = {b: {"seconds": m, "to_first": (m / first) if first else None}
                                       for b, m in med.items()}
        digests = {r["digest"] for rs in by_build.values() for r in rs if "digest" in r}
        if digests:
            entry["same_bits_across_builds"] = len(digests) == 1
        out.append(entry)
    return out


def split_script_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """(this script's arguments, the timed script's: everything after the first `--`)."""
    if "--" not in argv:
        return argv, []
    at = argv.index("--")
    return argv[:at], argv[at + 1:]


def main(argv: list[str] | None = None) -> int:
    argv, script_args = split_script_args(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", action="append", required=True,
                    help="LABEL=LIBRARY[:PYTHON_DIR], once per build")
    ap.add_argument("--rounds", type=int, default=2, help="rounds; each runs every build once, alternating")
    ap.add_argument("--script", choices=sorted(SCRIPTS), default="kernels")
    ap.add_argument("--out", default=None)
    ap.add_argument("--commit", default=None,
                    help="the commit of the tree running this (a copy without .git)")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    try:
        builds = [parse_build(b) for b in args.build]
    except ValueError as e:
        ap.error(str(e))
    labels = [b[0] for b in builds]
    if len(set(labels)) != len(labels):
        ap.error("--build labels must differ")
    if any(a in ("--out", "--rounds") or a.startswith(("--out=", "--rounds=")) for a in script_args):
        ap.error("--out and --rounds are set per run by this script")

    rows, environments = [], {}
    for rnd in range(args.rounds):
        order = builds if rnd % 2 == 0 else builds[::-1]
        for label, library, python_dir in order:
            result = run_once(SCRIPTS[args.script], library, python_dir, script_args)
            environments.setdefault(label, {**result["environment"], "library": str(library)})
            for row in result["results"]:
                rows.append({**row, "build": label, "round": rnd})
            print(f"round {rnd} build {label}: {len(result['results'])} rows", flush=True)
    summary = summarize(rows, labels)
    keys = [{k: v for k, v in e.items() if k not in ("medians", "same_bits_across_builds")} for e in summary]
    varying = sorted({k for key in keys for k in key if any(other.get(k) != key[k] for other in keys)})
    varying = varying or [k for k in ("channels", "part") if keys and k in keys[0]]
    for entry, full in zip(summary, keys):
        key = {k: full[k] for k in varying if k in full}  # the fields that tell the rows apart
        for field, med in entry["medians"].items():
            cells = "  ".join(f"{b} {v['seconds'] * 1e3:.3f} ms ({v['to_first']:.3f})" for b, v in med.items()
                              if v["to_first"] is not None)
            print(f"{json.dumps(key)} {field}: {cells}")
        if entry.get("same_bits_across_builds") is False:
            print(f"{json.dumps(key)}: the builds' results differ", flush=True)

    sys.path.insert(0, str(HERE))
    from probe_timing import write_probe  # this directory

    first_env = environments[labels[0]]
    cuda = first_env.get("device", "cpu") != "cpu"
    args.script_args = script_args
    write_probe("point-conv-builds-cuda" if cuda else "point-conv-builds", args, rows,
                {"builds": environments, "device": first_env.get("device")}, extra={"summary": summary})
    return 0


if __name__ == "__main__":
    sys.exit(main())
