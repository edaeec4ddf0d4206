"""benchmarks/scripts/point_conv_builds.py: builds timed side by side in separate processes, rows
tagged by build and round, the summary's medians and the cross-build bit check, and bad input."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pcops import _loader

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "scripts" / "point_conv_builds.py"


def _module():
    spec = importlib.util.spec_from_file_location("point_conv_builds", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _octahedron(dir_: Path) -> Path:
    """A small closed mesh under the name the probes sample (bunny00.off), so the script runs
    without the data set."""
    v = ["1 0 0", "-1 0 0", "0 1 0", "0 -1 0", "0 0 1", "0 0 -1"]
    f = ["3 0 2 4", "3 2 1 4", "3 1 3 4", "3 3 0 4", "3 2 0 5", "3 1 2 5", "3 3 1 5", "3 0 3 5"]
    path = dir_ / "bunny00.off"
    path.write_text("OFF\n6 8 0\n" + "\n".join(v + f) + "\n")
    return path


def _run(args, tmp_path, **kw):
    env = dict(os.environ, PCOPS_DATA_DIR=str(tmp_path), PCOPS_LIBRARY=str(_loader.library_path()))
    return subprocess.run([sys.executable, str(SCRIPT), *args], env=env, capture_output=True, text=True,
                          timeout=300, **kw)


def test_two_builds_side_by_side(tmp_path):
    _octahedron(tmp_path)
    lib = _loader.library_path()
    out = tmp_path / "builds.json"
    done = _run(["--build", f"one={lib}", "--build", f"two={lib}:{REPO / 'python'}", "--rounds", "2",
                 "--out", str(out), "--", "--points", "600", "--k", "8", "--channels", "8", "--repeat", "1"],
                tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(out.read_text())
    rows = doc["results"]
    # Two rounds x two builds x three parts, the builds alternating (one, two, then two, one).
    assert len(rows) == 12
    assert [r["build"] for r in rows[::3]] == ["one", "two", "two", "one"]
    parts = ("forward", "grad_features", "grad_weights")
    assert {(r["build"], r["round"], r["part"]) for r in rows} == {
        (b, rnd, p) for b in ("one", "two") for rnd in (0, 1) for p in parts}
    assert all(r["seconds"] > 0 and len(r["digest"]) == 16 for r in rows)
    assert set(doc["environment"]["builds"]) == {"one", "two"}
    summary = doc["summary"]
    assert {s["part"] for s in summary} == {"forward", "grad_features", "grad_weights"}
    for s in summary:
        # One library under two names: the same bits, and each median is of that build's rounds.
        assert s["same_bits_across_builds"] is True
        med = s["medians"]["seconds"]
        assert med["one"]["to_first"] == 1.0
        mine = sorted(r["seconds"] for r in rows if r["build"] == "two" and r["part"] == s["part"])
        assert med["two"]["seconds"] == pytest.approx(sum(mine) / 2)


def test_summary_reports_differing_bits():
    mod = _module()
    rows = [{"channels": 8, "part": "forward", "seconds": s, "digest": d, "build": b, "round": r}
            for b, d, times in (("a", "x", (1.0, 3.0, 2.0)), ("b", "y", (4.0, 4.0, 5.0)))
            for r, s in enumerate(times)]
    (entry,) = mod.summarize(rows, ["a", "b"])
    assert entry["same_bits_across_builds"] is False
    assert entry["medians"]["seconds"]["a"]["seconds"] == 2.0
    assert entry["medians"]["seconds"]["b"] == {"seconds": 4.0, "to_first": 2.0}
    # Rows that measure different things are kept apart.
    other = [{**r, "channels": 16} for r in rows]
    assert len(mod.summarize(rows + other, ["a", "b"])) == 2


@pytest.mark.parametrize(
    "args, message",
    [
        (["--build", "nolabel"], "expected LABEL=LIBRARY"),
        (["--build", "a=/nonexistent/_C.so"], "no library at"),
        (["--build", "a={lib}", "--build", "a={lib}"], "labels must differ"),
        (["--build", "a={lib}:/nonexistent"], "no pcops package"),
        (["--build", "a={lib}", "--rounds", "0"], "at least 1"),
        (["--build", "a={lib}", "--", "--out", "x.json"], "set per run"),
    ],
)
def test_bad_input(tmp_path, args, message):
    lib = _loader.library_path()
    done = _run([a.format(lib=lib) for a in args], tmp_path)
    assert done.returncode == 2
    assert message in done.stderr
    assert not list(tmp_path.glob("*.json"))
