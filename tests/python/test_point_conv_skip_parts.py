"""benchmarks/scripts/point_conv_skip_parts.py: its patch still applies to the MVMR kernel's source
(so the diagnostic build keeps working as the kernel changes), refuses to patch twice or a file
without its anchors, and its runs tag each row with the skip value and round."""

from __future__ import annotations

import difflib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from pcops import _loader

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "scripts" / "point_conv_skip_parts.py"
KERNEL = REPO / "src" / "cuda" / "point_conv_mma.cu"


def _run(args, tmp_path, **env):
    full = dict(os.environ, PCOPS_DATA_DIR=str(tmp_path), PCOPS_LIBRARY=str(_loader.library_path()), **env)
    return subprocess.run([sys.executable, str(SCRIPT), *args], env=full, capture_output=True, text=True,
                          timeout=300)


def test_patch_applies_to_the_kernel_source_once(tmp_path):
    copy = tmp_path / "point_conv_mma.cu"
    shutil.copy(KERNEL, copy)
    before = copy.read_text()
    done = _run(["patch", str(copy)], tmp_path)
    assert done.returncode == 0, done.stderr
    after = copy.read_text()
    assert after != before and "PCOPS_MVMR_SKIP" in after
    # Every switch is in the patched kernel: the weight loads and their waits, the gathered rows,
    # the whole sums, the scans and the adds.
    for needle in ("!(skip & 1)) mbarrier_wait", "tid == 0 && !(skip & 1)", "ok && !(skip & 2)",
                   "(skip & 4) ? 0 : nph", "!(skip & 8) && fl.need_l[2]", "!(skip & 8) && fl.need_join",
                   "if (skip & 16) add_l = add_h = false;", "#include <cstdlib>"):
        assert needle in after, needle
    # A few lines changed, the rest of the kernel as it was.
    removed = [d for d in difflib.ndiff(before.splitlines(), after.splitlines()) if d.startswith("- ")]
    assert 0 < len(removed) <= 10, removed
    # The working tree's file is untouched, and a second patch is refused.
    assert KERNEL.read_text() == before
    again = _run(["patch", str(copy)], tmp_path)
    assert again.returncode != 0 and "already patched" in again.stderr
    assert copy.read_text() == after


def test_patch_names_a_missing_anchor(tmp_path):
    copy = tmp_path / "point_conv_mma.cu"
    text = KERNEL.read_text().replace("        a_sz[u] = ok ? 16 : 0;", "        a_sz[u] = (ok ? 16 : 0);")
    copy.write_text(text)
    done = _run(["patch", str(copy)], tmp_path)
    assert done.returncode != 0
    assert "a_sz[u] = ok ? 16 : 0;" in done.stderr and "found 0" in done.stderr
    assert copy.read_text() == text  # nothing written


def test_runs_tag_rows_with_their_skip(tmp_path):
    v = ["1 0 0", "-1 0 0", "0 1 0", "0 -1 0", "0 0 1", "0 0 -1"]
    f = ["3 0 2 4", "3 2 1 4", "3 1 3 4", "3 3 0 4", "3 2 0 5", "3 1 2 5", "3 3 1 5", "3 0 3 5"]
    (tmp_path / "bunny00.off").write_text("OFF\n6 8 0\n" + "\n".join(v + f) + "\n")
    out = tmp_path / "skip.json"
    done = _run(["run", "--skips", "0,4", "--rounds", "2", "--out", str(out), "--", "--device", "cpu",
                 "--points", "300", "--k", "8", "--channels", "8", "--repeat", "1"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["skips"] == [0, 4] and "python" in json.dumps(doc["environment"]).lower()
    rows = doc["results"]
    parts = {"forward", "grad_features", "grad_weights"}
    assert {(r["skip"], r["part"]) for r in rows} == {(s, p) for s in (0, 4) for p in parts}
    # Two rounds, the skip values alternating: 0, 4, then 4, 0.
    assert len(rows) == 12
    assert [(r["round"], r["skip"]) for r in rows[::3]] == [(0, 0), (0, 4), (1, 4), (1, 0)]
    assert all(r["seconds"] > 0 for r in rows)
    # On the CPU the variable changes nothing: the same bits under both values.
    digests = {}
    for r in rows:
        digests.setdefault(r["part"], set()).add(r["digest"])
    assert all(len(d) == 1 for d in digests.values())


def test_bad_arguments(tmp_path):
    for args in (["run", "--skips", "1,x", "--", "--device", "cpu"],
                 ["run", "--skips", "64", "--", "--device", "cpu"],
                 ["run", "--", "--out", "x.json"],
                 ["run", "--", "--rounds", "3"],
                 ["run", "--rounds", "0", "--", "--device", "cpu"]):
        done = _run(args, tmp_path)
        assert done.returncode == 2, args
        assert any(o in done.stderr for o in ("--skips", "--out", "--rounds")), done.stderr
