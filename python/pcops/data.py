"""Real point clouds for the demo, the benchmarks and the tests.

Readers for PLY (ascii, binary little/big endian, any vertex properties, optional faces), OFF meshes
and XYZ text files; area-weighted uniform sampling on mesh faces; and the location of the real data
set (CGAL's demo data, shipped by Debian's ``libcgal-demo`` package).

The data directory is, in order: ``$PCOPS_DATA_DIR``; ``./data/cgal``; ``../shared/data/cgal``
(both relative to the current directory and to the repository root). ``python -m pcops.data
--ensure`` extracts the files from the Debian package into ``./data/cgal`` when none of those
exists. A small synthetic cloud is the last resort and is announced loudly.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = [
    "KNOWN_FILES",
    "MESH_FILES",
    "Cloud",
    "DataFormatError",
    "data_dir",
    "ensure_data",
    "extract_from_debian",
    "find_data_dir",
    "list_clouds",
    "load",
    "read_off",
    "read_ply",
    "read_xyz",
    "sample_mesh",
    "synthetic_cloud",
]

# The README table of the data set: file name -> number of points (mesh vertices for OFF files).
KNOWN_FILES: dict[str, int] = {
    "building.ply": 100_000,
    "bunny00.off": 37_706,
    "refined_elephant.off": 44_460,
    "ball.ply": 31_374,
    "armadillo.off": 26_002,
    "b9_training.ply": 22_300,
    "radar.xyz": 20_950,
    "ChineseDragon-10kv.off": 10_000,
    "hippo1.ply": 6_104,
    "kitten.xyz": 5_210,
}
MESH_FILES = ("bunny00.off", "refined_elephant.off", "armadillo.off", "ChineseDragon-10kv.off")

_DEBIAN_PACKAGE = "libcgal-demo"
_DEBIAN_TARBALL = "usr/share/doc/libcgal-dev/data.tar.gz"
_TARBALL_FOLDERS = ("data/points_3/", "data/meshes/")


class DataFormatError(ValueError):
    """A point-cloud file that cannot be parsed; the message names the file and the problem."""


@dataclass
class Cloud:
    """A loaded point cloud: float32 ``points [N, 3]``, int64 ``faces [F, 3]`` for meshes, and
    every other per-vertex property by name (normals, colours, labels, ...)."""

    name: str
    points: np.ndarray
    faces: np.ndarray | None = None
    properties: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def is_mesh(self) -> bool:
        return self.faces is not None and len(self.faces) > 0

    def __len__(self) -> int:
        return int(self.points.shape[0])


# ----------------------------------------------------------------------------------------------
# Readers
# ----------------------------------------------------------------------------------------------

_PLY_TYPES = {
    "char": "i1", "int8": "i1", "uchar": "u1", "uint8": "u1",
    "short": "i2", "int16": "i2", "ushort": "u2", "uint16": "u2",
    "int": "i4", "int32": "i4", "uint": "u4", "uint32": "u4",
    "float": "f4", "float32": "f4", "double": "f8", "float64": "f8",
}  # fmt: skip


def _fail(path, message: str) -> DataFormatError:
    return DataFormatError(f"{Path(path).name}: {message}")


def _finish(name, points: np.ndarray, path) -> np.ndarray:
    points = np.ascontiguousarray(points, dtype=np.float32)
    if points.ndim != 2 or points.shape[1] != 3:
        raise _fail(path, f"expected [N, 3] coordinates, got shape {points.shape}")
    return points


def _triangulate(polygons: list[np.ndarray] | np.ndarray, path, num_vertices: int) -> np.ndarray:
    """Fan-triangulates polygons (rows of vertex indices) into int64 [F, 3] and checks bounds."""
    if isinstance(polygons, np.ndarray):
        arr = polygons.astype(np.int64, copy=False)
        if arr.ndim != 2 or arr.shape[1] < 3:
            raise _fail(path, f"faces need at least 3 vertices, got {arr.shape[1] if arr.ndim == 2 else 0}")
        n = arr.shape[1]
        tris = [np.stack([arr[:, 0], arr[:, i], arr[:, i + 1]], axis=1) for i in range(1, n - 1)]
        faces = np.concatenate(tris, axis=0) if len(tris) > 1 else tris[0]
    else:
        out = []
        for poly in polygons:
            if len(poly) < 3:
                raise _fail(path, f"a face needs at least 3 vertices, got {len(poly)}")
            for i in range(1, len(poly) - 1):
                out.append((poly[0], poly[i], poly[i + 1]))
        faces = np.asarray(out, dtype=np.int64).reshape(-1, 3)
    if faces.size and (faces.min() < 0 or faces.max() >= num_vertices):
        raise _fail(path, f"face vertex index out of range [0, {num_vertices})")
    return np.ascontiguousarray(faces)


def _parse_ply_header(raw: bytes, path):
    if not raw.startswith(b"ply"):
        raise _fail(path, "not a PLY file (missing 'ply' magic)")
    end = re.search(rb"end_header[ \t]*\r?\n", raw)
    if end is None:
        raise _fail(path, "PLY header has no 'end_header' line")
    header = raw[: end.start()].decode("ascii", errors="replace").splitlines()
    fmt = None
    elements: list[dict] = []
    for lineno, line in enumerate(header[1:], start=2):
        words = line.split()
        if not words or words[0] in ("comment", "obj_info"):
            continue
        if words[0] == "format":
            if len(words) < 2 or words[1] not in ("ascii", "binary_little_endian", "binary_big_endian"):
                raise _fail(path, f"line {lineno}: unsupported PLY format {' '.join(words[1:])!r}")
            fmt = words[1]
        elif words[0] == "element":
            if len(words) != 3 or not words[2].isdigit():
                raise _fail(path, f"line {lineno}: malformed element line {line!r}")
            elements.append({"name": words[1], "count": int(words[2]), "props": []})
        elif words[0] == "property":
            if not elements:
                raise _fail(path, f"line {lineno}: property before any element")
            if len(words) == 5 and words[1] == "list":
                if words[2] not in _PLY_TYPES or words[3] not in _PLY_TYPES:
                    raise _fail(path, f"line {lineno}: unknown list property types {line!r}")
                elements[-1]["props"].append((words[4], "list", _PLY_TYPES[words[2]], _PLY_TYPES[words[3]]))
            elif len(words) == 3 and words[1] in _PLY_TYPES:
                elements[-1]["props"].append((words[2], "scalar", _PLY_TYPES[words[1]], None))
            else:
                raise _fail(path, f"line {lineno}: unknown property type in {line!r}")
        else:
            raise _fail(path, f"line {lineno}: unexpected header line {line!r}")
    if fmt is None:
        raise _fail(path, "PLY header has no 'format' line")
    return fmt, elements, end.end()


def read_ply(path: str | os.PathLike) -> Cloud:
    """Reads a PLY file (ascii or binary) with any vertex properties and optional faces."""
    path = Path(path)
    raw = path.read_bytes()
    fmt, elements, offset = _parse_ply_header(raw, path)
    names = [e["name"] for e in elements]
    if "vertex" not in names:
        raise _fail(path, "PLY file has no 'vertex' element")
    data: dict[str, dict[str, np.ndarray]] = {}
    if fmt == "ascii":
        lines = raw[offset:].decode("ascii", errors="replace").splitlines()
        pos = 0
        for el in elements:
            rows = lines[pos : pos + el["count"]]
            pos += el["count"]
            if len(rows) < el["count"]:
                raise _fail(path, f"element {el['name']!r}: expected {el['count']} rows, file has {len(rows)}")
            data[el["name"]] = _ply_ascii_element(el, rows, path)
    else:
        endian = "<" if fmt == "binary_little_endian" else ">"
        buf = memoryview(raw)
        for el in elements:
            values, offset = _ply_binary_element(el, buf, offset, endian, path)
            data[el["name"]] = values
    vertex = data["vertex"]
    if not all(c in vertex for c in "xyz"):
        raise _fail(path, "vertex element lacks x, y or z")
    points = _finish(path.name, np.stack([vertex["x"], vertex["y"], vertex["z"]], axis=1), path)
    props = {k: v for k, v in vertex.items() if k not in ("x", "y", "z")}
    faces = None
    if "face" in data and data["face"]:
        face_lists = next(iter(v for k, v in data["face"].items() if k in ("vertex_indices", "vertex_index")),
                          None)
        if face_lists is not None:
            faces = _triangulate(face_lists, path, len(points))
    return Cloud(path.name, points, faces, props)


def _ply_ascii_element(el, rows, path) -> dict[str, np.ndarray]:
    props = el["props"]
    if all(kind == "scalar" for _, kind, _, _ in props):
        tokens = " ".join(rows).split()
        n = len(props)
        if len(tokens) != n * el["count"]:
            raise _fail(path, f"element {el['name']!r}: expected {n} values per row "
                              f"({n * el['count']} in all), found {len(tokens)}")
        try:
            table = np.array(tokens, dtype=np.float64).reshape(el["count"], n)
        except ValueError as exc:
            raise _fail(path, f"element {el['name']!r}: non-numeric value ({exc})") from None
        return {name: table[:, i].astype(t) for i, (name, _, t, _) in enumerate(props)}
    out: dict[str, list] = {name: [] for name, *_ in props}
    for lineno, row in enumerate(rows):
        words = row.split()
        i = 0
        try:
            for name, kind, t, item_t in props:
                if kind == "scalar":
                    out[name].append(float(words[i]))
                    i += 1
                else:
                    n = int(words[i])
                    out[name].append(np.array(words[i + 1 : i + 1 + n], dtype=np.int64))
                    if len(out[name][-1]) != n:
                        raise IndexError
                    i += 1 + n
        except (IndexError, ValueError):
            raise _fail(path, f"element {el['name']!r} row {lineno}: malformed {row!r}") from None
    result = {}
    for name, kind, t, _ in props:
        if kind == "scalar":
            result[name] = np.asarray(out[name], dtype=t)
        else:
            lens = {len(a) for a in out[name]}
            result[name] = np.stack(out[name]) if len(lens) == 1 and out[name] else out[name]
    return result


def _ply_binary_element(el, buf, offset, endian, path):
    props = el["props"]
    count = el["count"]
    if all(kind == "scalar" for _, kind, _, _ in props):
        dtype = np.dtype([(name, endian + t) for name, _, t, _ in props])
        need = dtype.itemsize * count
        if offset + need > len(buf):
            raise _fail(path, f"element {el['name']!r}: file truncated (needs {need} bytes at offset "
                              f"{offset}, has {len(buf) - offset})")
        table = np.frombuffer(buf, dtype=dtype, count=count, offset=offset)
        return {name: table[name].astype(t) for name, _, t, _ in props}, offset + need
    # Elements with list properties (faces): fast path when every list has the length of the first.
    if len(props) == 1 and count > 0:
        name, _, count_t, item_t = props[0]
        ct, it = np.dtype(endian + count_t), np.dtype(endian + item_t)
        if offset + ct.itemsize > len(buf):
            raise _fail(path, f"element {el['name']!r}: file truncated")
        n = int(np.frombuffer(buf, dtype=ct, count=1, offset=offset)[0])
        row = np.dtype([("n", ct), ("v", it, (n,))])
        if offset + row.itemsize * count <= len(buf):
            table = np.frombuffer(buf, dtype=row, count=count, offset=offset)
            if np.all(table["n"] == n):
                return {name: table["v"].astype(np.int64)}, offset + row.itemsize * count
    result: dict[str, list] = {name: [] for name, *_ in props}
    for _ in range(count):
        for name, kind, t, item_t in props:
            dt = np.dtype(endian + t)
            if offset + dt.itemsize > len(buf):
                raise _fail(path, f"element {el['name']!r}: file truncated")
            value = np.frombuffer(buf, dtype=dt, count=1, offset=offset)[0]
            offset += dt.itemsize
            if kind == "scalar":
                result[name].append(value)
            else:
                it = np.dtype(endian + item_t)
                n = int(value)
                if offset + it.itemsize * n > len(buf):
                    raise _fail(path, f"element {el['name']!r}: file truncated")
                result[name].append(np.frombuffer(buf, dtype=it, count=n, offset=offset).astype(np.int64))
                offset += it.itemsize * n
    out = {}
    for name, kind, t, _ in props:
        out[name] = np.asarray(result[name], dtype=t) if kind == "scalar" else result[name]
    return out, offset


def _content_lines(text: str):
    for lineno, line in enumerate(text.splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if line:
            yield lineno, line


def read_off(path: str | os.PathLike) -> Cloud:
    """Reads an OFF mesh: vertices as float32 ``points``, polygons fan-triangulated into ``faces``."""
    path = Path(path)
    try:
        text = path.read_text(encoding="ascii", errors="strict")
    except UnicodeDecodeError:
        raise _fail(path, "not an ASCII OFF file") from None
    lines = list(_content_lines(text))
    if not lines:
        raise _fail(path, "empty file")
    _, first = lines[0]
    words = first.split()
    if not words[0].endswith("OFF"):
        raise _fail(path, f"not an OFF file (first line {first!r})")
    if words[0] not in ("OFF", "COFF", "NOFF", "CNOFF"):
        raise _fail(path, f"unsupported OFF variant {words[0]!r}")
    rest = words[1:]
    pos = 1
    if len(rest) < 3:
        if pos >= len(lines):
            raise _fail(path, "missing the 'vertices faces edges' counts line")
        rest = lines[pos][1].split()
        pos += 1
    try:
        nv, nf = int(rest[0]), int(rest[1])
    except (ValueError, IndexError):
        raise _fail(path, f"malformed counts line {' '.join(rest)!r}") from None
    if nv < 0 or nf < 0:
        raise _fail(path, f"negative counts {nv} {nf}")
    vlines = lines[pos : pos + nv]
    if len(vlines) < nv:
        raise _fail(path, f"expected {nv} vertices, file has {len(vlines)}")
    try:
        coords = [ln.split()[:3] for _, ln in vlines]
        if any(len(c) != 3 for c in coords):
            bad = next(i for i, c in enumerate(coords) if len(c) != 3)
            raise _fail(path, f"line {vlines[bad][0]}: a vertex needs 3 coordinates")
        points = np.array(coords, dtype=np.float64).reshape(nv, 3)
    except ValueError as exc:
        if isinstance(exc, DataFormatError):
            raise
        raise _fail(path, f"non-numeric vertex coordinate ({exc})") from None
    flines = lines[pos + nv : pos + nv + nf]
    if len(flines) < nf:
        raise _fail(path, f"expected {nf} faces, file has {len(flines)}")
    polys = []
    for lineno, ln in flines:
        w = ln.split()
        try:
            n = int(w[0])
            idx = [int(v) for v in w[1 : 1 + n]]
        except ValueError:
            raise _fail(path, f"line {lineno}: malformed face {ln!r}") from None
        if len(idx) != n:
            raise _fail(path, f"line {lineno}: face announces {n} vertices, has {len(idx)}")
        polys.append(idx)
    if polys and len({len(p) for p in polys}) == 1:
        faces = _triangulate(np.asarray(polys, dtype=np.int64), path, nv)
    else:
        faces = _triangulate(polys, path, nv)
    return Cloud(path.name, _finish(path.name, points, path), faces, {})


def read_xyz(path: str | os.PathLike) -> Cloud:
    """Reads whitespace-separated ``x y z [nx ny nz]`` lines."""
    path = Path(path)
    lines = [ln for _, ln in _content_lines(path.read_text(encoding="ascii", errors="replace"))]
    if not lines:
        return Cloud(path.name, np.zeros((0, 3), np.float32), None, {})
    widths = {len(ln.split()) for ln in lines}
    if len(widths) != 1 or widths.pop() not in (3, 6):
        raise _fail(path, "every line needs the same number of columns, 3 (x y z) or 6 (x y z nx ny nz)")
    try:
        table = np.array(" ".join(lines).split(), dtype=np.float64).reshape(len(lines), -1)
    except ValueError as exc:
        raise _fail(path, f"non-numeric value ({exc})") from None
    props = {}
    if table.shape[1] == 6:
        for i, name in enumerate(("nx", "ny", "nz")):
            props[name] = table[:, 3 + i].astype(np.float32)
    return Cloud(path.name, _finish(path.name, table[:, :3], path), None, props)


def load(path: str | os.PathLike) -> Cloud:
    """Reads a .ply, .off or .xyz file by its suffix."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".ply":
        return read_ply(path)
    if suffix == ".off":
        return read_off(path)
    if suffix in (".xyz", ".pts", ".txt"):
        return read_xyz(path)
    raise _fail(path, f"unknown point-cloud format {suffix!r} (expected .ply, .off or .xyz)")


# ----------------------------------------------------------------------------------------------
# Mesh sampling
# ----------------------------------------------------------------------------------------------


def sample_mesh(vertices: np.ndarray, faces: np.ndarray, num_points: int, seed: int = 0) -> np.ndarray:
    """Samples ``num_points`` points uniformly on the mesh surface (faces chosen by area, then a
    uniform point in the triangle); float32 ``[num_points, 3]``, reproducible for a given seed."""
    vertices = np.asarray(vertices, dtype=np.float64)
    faces = np.asarray(faces, dtype=np.int64)
    if faces.ndim != 2 or faces.shape[1] != 3 or len(faces) == 0:
        raise ValueError(f"faces: expected a non-empty int array [F, 3], got shape {faces.shape}")
    if num_points < 0:
        raise ValueError(f"num_points: expected >= 0, got {num_points}")
    a, b, c = vertices[faces[:, 0]], vertices[faces[:, 1]], vertices[faces[:, 2]]
    area = 0.5 * np.linalg.norm(np.cross(b - a, c - a), axis=1)
    total = area.sum()
    if not np.isfinite(total) or total <= 0:
        raise ValueError("faces: the mesh has no area to sample")
    rng = np.random.default_rng(seed)
    cdf = np.cumsum(area)
    face = np.searchsorted(cdf, rng.random(num_points) * cdf[-1], side="right")
    face = np.minimum(face, len(faces) - 1)
    u, v = rng.random(num_points), rng.random(num_points)
    flip = u + v > 1.0
    u[flip], v[flip] = 1.0 - u[flip], 1.0 - v[flip]
    pts = a[face] + u[:, None] * (b[face] - a[face]) + v[:, None] * (c[face] - a[face])
    return pts.astype(np.float32)


def synthetic_cloud(num_points: int = 4096, seed: int = 0) -> np.ndarray:
    """A small unit-sphere-shell cloud (last-resort stand-in when no real data exists)."""
    rng = np.random.default_rng(seed)
    p = rng.standard_normal((num_points, 3))
    p /= np.linalg.norm(p, axis=1, keepdims=True)
    return (p + 0.01 * rng.standard_normal((num_points, 3))).astype(np.float32)


# ----------------------------------------------------------------------------------------------
# Data location
# ----------------------------------------------------------------------------------------------


def _repo_root() -> Path | None:
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "pyproject.toml").is_file() and (parent / "python" / "pcops").is_dir():
            return parent
    return None


def _candidates() -> list[Path]:
    out = []
    env = os.environ.get("PCOPS_DATA_DIR")
    if env:
        out.append(Path(env))
    bases = [Path.cwd()]
    root = _repo_root()
    if root is not None and root != Path.cwd():
        bases.append(root)
    for base in bases:
        out.append(base / "data" / "cgal")
    for base in bases:
        out.append(base.parent / "shared" / "data" / "cgal")
    return out


def _has_data(path: Path) -> bool:
    return path.is_dir() and any((path / name).is_file() for name in KNOWN_FILES)


def find_data_dir() -> Path | None:
    """The first existing data directory of the search order, or None."""
    for path in _candidates():
        if _has_data(path):
            return path.resolve()
    return None


def data_dir(explicit: str | os.PathLike | None = None) -> Path | None:
    """``explicit`` if given (it must exist), else :func:`find_data_dir`."""
    if explicit is not None:
        path = Path(explicit)
        if not _has_data(path):
            raise FileNotFoundError(f"data dir {path} holds none of the expected files {sorted(KNOWN_FILES)}")
        return path.resolve()
    return find_data_dir()


def list_clouds(directory: str | os.PathLike | None = None) -> list[Path]:
    """The known data files present in ``directory`` (default: :func:`data_dir`), largest first."""
    d = data_dir(directory)
    if d is None:
        return []
    return [d / name for name in KNOWN_FILES if (d / name).is_file()]


def ensure_data(target: str | os.PathLike = "data/cgal", quiet: bool = False) -> Path | None:
    """Finds the data, or extracts it from Debian's libcgal-demo package into ``target``.

    Returns the data directory, or None (with a loud warning) when the package cannot be had.
    """
    found = find_data_dir()
    if found is not None:
        return found
    return extract_from_debian(target, quiet)


def extract_from_debian(target: str | os.PathLike = "data/cgal", quiet: bool = False) -> Path | None:
    """Downloads Debian's libcgal-demo (``apt-get download``, no root needed), unpacks it with
    ``dpkg -x`` and keeps the known files of ``data/points_3`` and ``data/meshes`` in ``target``."""
    target = Path(target)
    log = (lambda *a: None) if quiet else (lambda *a: print(*a, file=sys.stderr))
    if shutil.which("apt-get") is None or shutil.which("dpkg") is None:
        warnings.warn("pcops.data: no data found and apt-get/dpkg are unavailable; "
                      "falling back to a SYNTHETIC cloud", stacklevel=2)
        return None
    with tempfile.TemporaryDirectory() as tmp:
        log(f"pcops.data: downloading Debian package {_DEBIAN_PACKAGE} ...")
        res = subprocess.run(["apt-get", "download", _DEBIAN_PACKAGE], cwd=tmp, capture_output=True, text=True)
        debs = list(Path(tmp).glob(f"{_DEBIAN_PACKAGE}_*.deb"))
        if res.returncode != 0 or not debs:
            warnings.warn(f"pcops.data: `apt-get download {_DEBIAN_PACKAGE}` failed ({res.stderr.strip()}); "
                          "falling back to a SYNTHETIC cloud", stacklevel=2)
            return None
        subprocess.run(["dpkg", "-x", str(debs[0]), str(Path(tmp) / "x")], check=True)
        tarball = Path(tmp) / "x" / _DEBIAN_TARBALL
        target.mkdir(parents=True, exist_ok=True)
        with tarfile.open(tarball, "r:gz") as tar:
            for member in tar.getmembers():
                name = Path(member.name).name
                inside = member.name[2:] if member.name.startswith("./") else member.name
                if member.isfile() and name in KNOWN_FILES and inside.startswith(_TARBALL_FOLDERS):
                    src = tar.extractfile(member)
                    (target / name).write_bytes(src.read())
    got = [n for n in KNOWN_FILES if (target / n).is_file()]
    log(f"pcops.data: extracted {len(got)} files into {target}")
    return target.resolve() if got else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pcops.data", description=__doc__.splitlines()[0])
    parser.add_argument("--ensure", action="store_true", help="extract the data from Debian if missing")
    parser.add_argument("--target", default="data/cgal", help="where --ensure extracts to")
    parser.add_argument("--list", action="store_true", help="list the clouds with their point counts")
    args = parser.parse_args(argv)
    d = ensure_data(args.target) if args.ensure else find_data_dir()
    if d is None:
        print("pcops.data: NO REAL DATA FOUND; demo and benchmarks will use a SYNTHETIC cloud", file=sys.stderr)
        return 0 if args.ensure else 1
    print(d)
    if args.list:
        for path in list_clouds(d):
            c = load(path)
            print(f"{path.name:26s} {len(c):>9,d} points" + (f" {len(c.faces):>9,d} faces" if c.is_mesh else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
