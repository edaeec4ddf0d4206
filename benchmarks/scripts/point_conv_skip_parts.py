"""Where the fast MVMR kernel's time goes: a diagnostic build whose kernel skips parts of its work.

`patch FILE` rewrites a copy of src/cuda/point_conv_mma.cu (never the working tree's: the
results of a patched build are wrong on purpose) so that the bits of the environment variable
PCOPS_MVMR_SKIP, read at every MVMR launch, switch parts of the wgmma / mma.sync MVMR off:

    1   the weight stages' loads (bulk copies where the shape takes them, and their waits)
    2   the gathered source rows (every row loads zeros, no global read)
    4   the chunk sums (no segmented scan, no adds into the tile's sums)
    8   the chunk sums' scans only (each row adds its own product where it ends a run)
    16  the chunk sums' adds into the tile's sums only (the scans run)

With 0 (or unset) the kernel does all its work. `run -- <point_conv_kernels.py options>` then
runs point_conv_kernels.py once per --skips value and --rounds round, each in its own process
and the values alternating (the library in PCOPS_LIBRARY must be the patched build; --commit and
the rest go to the kernels script), and writes one JSON whose rows carry their "skip" and "round".
The differences between the rows' times bound what each part costs (parts overlap, so they do
not add up). Build and run, on a machine with the GPU:

    cp -r <tree> /tmp/skip && cd /tmp/skip
    python benchmarks/scripts/point_conv_skip_parts.py patch src/cuda/point_conv_mma.cu
    cmake -S . -B build -DPCOPS_WITH_CUDA=ON -DPCOPS_BUILD_TORCH=ON ... && cmake --build build
    PCOPS_LIBRARY=build/python/pcops/_C.so PYTHONPATH=python python \\
        benchmarks/scripts/point_conv_skip_parts.py run --skips 0,1,2,3,4,8,16,7 --rounds 2 -- \\
        --device cuda --points 165000 --channels 128,256,512 --dtype bfloat16 --mode fast

JSON goes to --out, else to benchmarks/results/point-conv-skip-parts-cuda-<date>-<commit>.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
KERNELS = HERE / "point_conv_kernels.py"

# (text of the kernel source, its replacement): each must occur exactly once.
PATCHES = [
    ("  const auto swizzle = [swz](int r) { return (r << 3) & swz; };",
     "  const int skip = swz >> 8;  // PCOPS_MVMR_SKIP (point_conv_skip_parts.py)\n"
     "  swz &= 255;\n"
     "  const auto swizzle = [swz](int r) { return (r << 3) & swz; };"),
    ("      if (tid == 0)\n        bulk_copy_to_shared(",
     "      if (tid == 0 && !(skip & 1))\n        bulk_copy_to_shared("),
    ("        mbarrier_wait(smem_u32(Bars + buf), (phases >> buf) & 1);",
     "        if (!(skip & 1)) mbarrier_wait(smem_u32(Bars + buf), (phases >> buf) & 1);"),
    ("    for (int v = 0; v < kBL; ++v) b_sz[v] = o0 + a_row0 + v * kRowStep < n_out_c ? 16 : 0;",
     "    for (int v = 0; v < kBL; ++v)\n"
     "      b_sz[v] = !(skip & 1) && o0 + a_row0 + v * kRowStep < n_out_c ? 16 : 0;"),
    ("        a_sz[u] = ok ? 16 : 0;", "        a_sz[u] = ok && !(skip & 2) ? 16 : 0;"),
    ("    for (int phase = 0; phase < nph; ++phase) {",
     "    for (int phase = 0; phase < ((skip & 4) ? 0 : nph); ++phase) {"),
    ("      const bool(&need_l)[3] = fl.need_l, (&need_h)[3] = fl.need_h;",
     "      const bool need_l[3] = {!(skip & 8) && fl.need_l[0], !(skip & 8) && fl.need_l[1],\n"
     "                              !(skip & 8) && fl.need_l[2]};\n"
     "      const bool need_h[3] = {!(skip & 8) && fl.need_h[0], !(skip & 8) && fl.need_h[1],\n"
     "                              !(skip & 8) && fl.need_h[2]};"),
    ("join = fl.join, need_join = fl.need_join;",
     "join = fl.join,\n                 need_join = !(skip & 8) && fl.need_join;"),
    ("      const auto add_rows = [&](bool add_l, bool add_h) {\n",
     "      const auto add_rows = [&](bool add_l, bool add_h) {\n"
     "        if (skip & 16) add_l = add_h = false;\n"),
    ("n_out_c, n_dst, dst, cfg.swz,",
     "n_out_c, n_dst, dst,\n                     cfg.swz | (std::getenv(\"PCOPS_MVMR_SKIP\") != nullptr ? "
     "std::atoi(std::getenv(\"PCOPS_MVMR_SKIP\")) << 8 : 0),"),
]


def patch(path: Path) -> None:
    text = path.read_text()
    if "PCOPS_MVMR_SKIP" in text:
        raise SystemExit(f"{path}: already patched")
    for old, new in PATCHES:
        count = text.count(old)
        if count != 1:
            raise SystemExit(f"{path}: expected one occurrence of {old.strip()[:60]!r}, found {count}")
        text = text.replace(old, new)
    if "#include <cstdlib>" not in text:
        text = text.replace("#include <", "#include <cstdlib>\n#include <", 1)
    path.write_text(text)
    print(f"patched {path}")


def run(skips: list[int], rounds: int, script_args: list[str], out: str | None) -> Path:
    """point_conv_kernels.py once per skip value and round (point_conv_builds.run_once), the values'
    order alternating between rounds, with the library of PCOPS_LIBRARY."""
    from point_conv_builds import run_once  # this directory

    library = os.environ.get("PCOPS_LIBRARY")
    if not library or not Path(library).is_file():
        raise SystemExit("PCOPS_LIBRARY must name the patched build's _C.so")
    rows, environment = [], None
    for rnd in range(rounds):
        for skip in skips if rnd % 2 == 0 else skips[::-1]:
            result = run_once(KERNELS, Path(library), None, script_args, {"PCOPS_MVMR_SKIP": str(skip)})
            environment = environment or result["environment"]
            rows += [{**row, "skip": skip, "round": rnd} for row in result["results"]]
    for skip in skips:
        parts: dict[tuple, list[float]] = {}
        for row in rows:
            if row["skip"] == skip:
                parts.setdefault((row["channels"], row["part"]), []).append(row["seconds"] * 1e3)
        print(f"skip {skip}: " + "; ".join(f"C={c} {p} {statistics.median(v):.3f} ms"
                                           for (c, p), v in sorted(parts.items())), flush=True)
    if out is None:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        name = f"point-conv-skip-parts-cuda-{stamp}-{environment.get('commit', 'unknown')}.json"
        out = str(HERE.parent / "results" / name)
    Path(out).write_text(json.dumps({"environment": environment, "skips": skips, "rounds": rounds,
                                     "note": "a diagnostic build: results wrong on purpose where skip != 0",
                                     "results": rows}, indent=1))
    print(f"wrote {out}")
    return Path(out)


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(HERE))
    from point_conv_builds import split_script_args  # this directory

    argv, script_args = split_script_args(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("patch", help="patch a copy of src/cuda/point_conv_mma.cu")
    p.add_argument("file", type=Path)
    r = sub.add_parser("run", help="run point_conv_kernels.py once per skip value (after --)")
    r.add_argument("--skips", default="0,1,2,3,4,8,16,7")
    r.add_argument("--rounds", type=int, default=2, help="rounds; each runs every skip value once")
    r.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.cmd == "patch":
        patch(args.file)
        return 0
    if any(a in ("--out", "--rounds") or a.startswith(("--out=", "--rounds=")) for a in script_args):
        ap.error("--out and --rounds are set per run by this script")
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    try:
        skips = [int(s) for s in args.skips.split(",")]
    except ValueError:
        ap.error(f"--skips {args.skips!r}: comma-separated integers")
    if any(s < 0 or s > 31 for s in skips):
        ap.error("--skips: values from 0 to 31")
    run(skips, args.rounds, script_args, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
