"""pcops.data: readers (PLY ascii/binary, OFF, XYZ), mesh sampling, data location."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from pcops import data as pdata

# ----------------------------------------------------------------------------------------------
# The real data set (or, when it is missing, synthetic stand-ins written in every format)
# ----------------------------------------------------------------------------------------------


def _write_synthetic_set(directory: Path) -> dict[str, int]:
    """Writes a small cloud in each format; returns expected point counts."""
    pts = pdata.synthetic_cloud(257, seed=3)
    (directory / "synthetic.xyz").write_text("\n".join(" ".join(f"{v:.9g}" for v in p) for p in pts) + "\n")
    header = f"ply\nformat ascii 1.0\nelement vertex {len(pts)}\nproperty float x\nproperty float y\nproperty float z\nend_header\n"
    (directory / "synthetic.ply").write_text(header + "\n".join(" ".join(f"{v:.9g}" for v in p) for p in pts) + "\n")
    faces = [(0, 1, 2), (2, 3, 4)]
    (directory / "synthetic.off").write_text(
        f"OFF\n{len(pts)} {len(faces)} 0\n" + "\n".join(" ".join(f"{v:.9g}" for v in p) for p in pts)
        + "\n" + "\n".join("3 " + " ".join(map(str, f)) for f in faces) + "\n")
    return {"synthetic.xyz": 257, "synthetic.ply": 257, "synthetic.off": 257}


def test_real_files_match_the_readme_table(tmp_path):
    directory = pdata.find_data_dir()
    if directory is None:
        # No real data here: the loaders are still exercised on synthetic files of every format.
        expected = _write_synthetic_set(tmp_path)
        files = [tmp_path / name for name in expected]
    else:
        expected = pdata.KNOWN_FILES
        files = pdata.list_clouds(directory)
        assert files, f"data dir {directory} lists no known files"
    for path in files:
        cloud = pdata.load(path)
        assert cloud.points.dtype == np.float32
        assert cloud.points.shape == (expected[path.name], 3), path.name
        assert np.isfinite(cloud.points).all(), path.name
        if path.suffix == ".off":
            assert cloud.is_mesh and cloud.faces.dtype == np.int64 and cloud.faces.shape[1] == 3
            assert cloud.faces.min() >= 0 and cloud.faces.max() < len(cloud.points)


def test_real_file_properties(tmp_path):
    directory = pdata.find_data_dir()
    if directory is None:
        # No real data: a synthetic file with normals stands in for kitten.xyz.
        directory = tmp_path
        pts = pdata.synthetic_cloud(50)
        (tmp_path / "kitten.xyz").write_text("\n".join(" ".join(f"{v:.9g}" for v in np.r_[p, p]) for p in pts))
    if (directory / "b9_training.ply").is_file():
        c = pdata.load(directory / "b9_training.ply")
        assert set(c.properties) == {"red", "green", "blue", "label"}
        assert c.properties["red"].dtype == np.uint8 and c.properties["label"].dtype == np.int32
    if (directory / "building.ply").is_file():
        c = pdata.load(directory / "building.ply")
        assert set(c.properties) == {"nx", "ny", "nz", "segment_index"}
        assert np.allclose(np.linalg.norm(np.stack([c.properties[k] for k in ("nx", "ny", "nz")], 1), axis=1),
                           1.0, atol=1e-3)
    if (directory / "kitten.xyz").is_file():
        assert set(pdata.load(directory / "kitten.xyz").properties) == {"nx", "ny", "nz"}
    if (directory / "bunny00.off").is_file():
        c = pdata.load(directory / "bunny00.off")
        assert c.faces.shape == (75_408, 3)


# ----------------------------------------------------------------------------------------------
# Hand-written files parse exactly
# ----------------------------------------------------------------------------------------------


def test_ply_ascii_with_properties_and_faces(tmp_path):
    f = tmp_path / "t.ply"
    f.write_text(
        "ply\nformat ascii 1.0\ncomment hand written\nelement vertex 4\nproperty float x\nproperty float y\n"
        "property float z\nproperty uchar red\nproperty int label\nelement face 1\n"
        "property list uchar int vertex_indices\nend_header\n"
        "0 0 0 255 7\n1.5 0 0 0 -3\n1.5 2.25 0 10 0\n0 2.25 -1e-3 1 1\n4 0 1 2 3\n"
    )
    c = pdata.read_ply(f)
    np.testing.assert_array_equal(c.points, np.array([[0, 0, 0], [1.5, 0, 0], [1.5, 2.25, 0], [0, 2.25, -1e-3]],
                                                     np.float32))
    np.testing.assert_array_equal(c.properties["red"], np.array([255, 0, 10, 1], np.uint8))
    assert c.properties["red"].dtype == np.uint8
    np.testing.assert_array_equal(c.properties["label"], [7, -3, 0, 1])
    np.testing.assert_array_equal(c.faces, [[0, 1, 2], [0, 2, 3]])  # the quad is fan-triangulated


@pytest.mark.parametrize("endian", ["<", ">"])
def test_ply_binary(tmp_path, endian):
    name = "binary_little_endian" if endian == "<" else "binary_big_endian"
    pts = [(0.1, -2.0, 3.5), (1e-7, 4.0, -5.25), (7.0, 8.0, 9.0)]
    body = b"".join(struct.pack(endian + "dddBBBi", *p, 1, 2, 3, -i) for i, p in enumerate(pts))
    body += struct.pack(endian + "Biii", 3, 0, 1, 2)
    header = (f"ply\nformat {name} 1.0\nelement vertex 3\nproperty double x\nproperty double y\n"
              "property double z\nproperty uchar red\nproperty uchar green\nproperty uchar blue\n"
              "property int label\nelement face 1\nproperty list uchar int vertex_indices\nend_header\n")
    f = tmp_path / "b.ply"
    f.write_bytes(header.encode() + body)
    c = pdata.read_ply(f)
    np.testing.assert_array_equal(c.points, np.array(pts, np.float64).astype(np.float32))
    np.testing.assert_array_equal(c.properties["label"], [0, -1, -2])
    np.testing.assert_array_equal(c.properties["green"], [2, 2, 2])
    np.testing.assert_array_equal(c.faces, [[0, 1, 2]])


def test_ply_binary_mixed_face_sizes(tmp_path):
    body = b"".join(struct.pack("<fff", *p) for p in [(0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0)])
    body += struct.pack("<Biii", 3, 0, 1, 2) + struct.pack("<Biiii", 4, 0, 1, 2, 3)
    header = ("ply\nformat binary_little_endian 1.0\nelement vertex 4\nproperty float x\nproperty float y\n"
              "property float z\nelement face 2\nproperty list uchar int vertex_indices\nend_header\n")
    f = tmp_path / "m.ply"
    f.write_bytes(header.encode() + body)
    np.testing.assert_array_equal(pdata.read_ply(f).faces, [[0, 1, 2], [0, 1, 2], [0, 2, 3]])


def test_off_with_comments_and_polygons(tmp_path):
    f = tmp_path / "t.off"
    f.write_text("OFF\n# a comment\n5 2 0\n\n0 0 0\n1 0 0\n1 1 0 # trailing\n0 1 0\n0.5 0.5 2\n"
                 "4 0 1 2 3\n3 0 1 4 255 0 0\n")
    c = pdata.read_off(f)
    np.testing.assert_array_equal(c.points[4], np.array([0.5, 0.5, 2], np.float32))
    assert c.points.shape == (5, 3)
    np.testing.assert_array_equal(c.faces, [[0, 1, 2], [0, 2, 3], [0, 1, 4]])


def test_off_counts_on_header_line(tmp_path):
    f = tmp_path / "h.off"
    f.write_text("OFF 3 1 0\n0 0 0\n1 0 0\n0 1 0\n3 2 1 0\n")
    c = pdata.load(f)
    np.testing.assert_array_equal(c.faces, [[2, 1, 0]])


def test_xyz_three_and_six_columns(tmp_path):
    a = tmp_path / "a.xyz"
    a.write_text("1 2 3\n-4.5 5e-3 6\n")
    c = pdata.read_xyz(a)
    np.testing.assert_array_equal(c.points, np.array([[1, 2, 3], [-4.5, 5e-3, 6]], np.float32))
    assert c.properties == {}
    b = tmp_path / "b.xyz"
    b.write_text("1 2 3 0 0 1\n4 5 6 1 0 0\n7 8 9 0 1 0\n")
    c = pdata.load(b)
    assert c.points.shape == (3, 3)
    np.testing.assert_array_equal(c.properties["nz"], np.array([1, 0, 0], np.float32))


# ----------------------------------------------------------------------------------------------
# Malformed files give clear errors naming the file
# ----------------------------------------------------------------------------------------------


MALFORMED = {
    "no_magic.ply": (b"format ascii 1.0\nend_header\n", "magic"),
    "no_end.ply": (b"ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\n", "end_header"),
    "bad_format.ply": (b"ply\nformat ebcdic 1.0\nend_header\n", "unsupported PLY format"),
    "bad_type.ply": (b"ply\nformat ascii 1.0\nelement vertex 1\nproperty quad x\nend_header\n", "unknown property"),
    "no_vertex.ply": (b"ply\nformat ascii 1.0\nelement face 0\nproperty list uchar int vertex_indices\nend_header\n",
                      "no 'vertex' element"),
    "no_y.ply": (b"ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float z\nend_header\n1 2\n",
                 "lacks x, y or z"),
    "short_rows.ply": (b"ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nproperty float y\n"
                       b"property float z\nend_header\n1 2 3\n4 5 6\n", "expected 3 rows"),
    "wrong_cols.ply": (b"ply\nformat ascii 1.0\nelement vertex 2\nproperty float x\nproperty float y\n"
                       b"property float z\nend_header\n1 2 3\n4 5\n", "values per row"),
    "text_value.ply": (b"ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float y\n"
                       b"property float z\nend_header\n1 two 3\n", "non-numeric"),
    "truncated.ply": (b"ply\nformat binary_little_endian 1.0\nelement vertex 2\nproperty double x\n"
                      b"property double y\nproperty double z\nend_header\n" + b"\0" * 40, "truncated"),
    "not_off.off": (b"PLY\n1 0 0\n", "not an OFF file"),
    "few_vertices.off": (b"OFF\n3 0 0\n0 0 0\n1 1 1\n", "expected 3 vertices"),
    "bad_face.off": (b"OFF\n3 1 0\n0 0 0\n1 0 0\n0 1 0\n3 0 1 3\n", "out of range"),
    "short_face.off": (b"OFF\n3 1 0\n0 0 0\n1 0 0\n0 1 0\n4 0 1 2\n", "announces 4 vertices"),
    "two_coords.off": (b"OFF\n1 0 0\n0 0\n", "needs 3 coordinates"),
    "ragged.xyz": (b"1 2 3\n4 5\n", "same number of columns"),
    "word.xyz": (b"1 2 x\n", "non-numeric"),
    "cloud.las": (b"LASF", "unknown point-cloud format"),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_files_raise_clear_errors(tmp_path, name):
    content, fragment = MALFORMED[name]
    f = tmp_path / name
    f.write_bytes(content)
    with pytest.raises(pdata.DataFormatError) as info:
        pdata.load(f)
    assert name in str(info.value) and fragment in str(info.value), str(info.value)
    assert isinstance(info.value, ValueError)


# ----------------------------------------------------------------------------------------------
# Mesh sampling
# ----------------------------------------------------------------------------------------------

TETRA_V = np.array([[0, 0, 0], [2, 0, 0], [0, 1, 0], [0, 0, 3]], np.float32)
TETRA_F = np.array([[0, 1, 2], [0, 1, 3], [0, 2, 3], [1, 2, 3]])


def _barycentric_on_some_face(p, v, f, tol=1e-5):
    """True per point when it lies in the plane of some face and inside that triangle."""
    v = v.astype(np.float64)
    p = p.astype(np.float64)
    ok = np.zeros(len(p), bool)
    for a, b, c in f:
        A, B, C = v[a], v[b], v[c]
        n = np.cross(B - A, C - A)
        n /= np.linalg.norm(n)
        on_plane = np.abs((p - A) @ n) < tol
        # barycentric coordinates
        v0, v1, v2 = B - A, C - A, p - A
        d00, d01, d11 = v0 @ v0, v0 @ v1, v1 @ v1
        d20, d21 = v2 @ v0, v2 @ v1
        den = d00 * d11 - d01 * d01
        bv = (d11 * d20 - d01 * d21) / den
        bw = (d00 * d21 - d01 * d20) / den
        inside = (bv >= -tol) & (bw >= -tol) & (bv + bw <= 1 + tol)
        ok |= on_plane & inside
    return ok


def test_sample_mesh_count_on_faces_and_seed():
    p = pdata.sample_mesh(TETRA_V, TETRA_F, 5000, seed=1)
    assert p.shape == (5000, 3) and p.dtype == np.float32
    assert _barycentric_on_some_face(p, TETRA_V, TETRA_F).all()
    np.testing.assert_array_equal(p, pdata.sample_mesh(TETRA_V, TETRA_F, 5000, seed=1))
    assert not np.array_equal(p, pdata.sample_mesh(TETRA_V, TETRA_F, 5000, seed=2))
    assert pdata.sample_mesh(TETRA_V, TETRA_F, 0).shape == (0, 3)


def test_sample_mesh_is_area_weighted():
    # Two disjoint triangles, areas 1 : 3 (z = 0 and z = 5 planes).
    v = np.array([[0, 0, 0], [2, 0, 0], [0, 1, 0], [0, 0, 5], [6, 0, 5], [0, 1, 5]], np.float32)
    f = np.array([[0, 1, 2], [3, 4, 5]])
    p = pdata.sample_mesh(v, f, 40_000, seed=0)
    frac_small = np.mean(p[:, 2] == 0)
    assert abs(frac_small - 0.25) < 0.015, frac_small
    # Uniform inside a triangle: the centroid of the samples approaches the triangle's centroid.
    small = p[p[:, 2] == 0].astype(np.float64)
    np.testing.assert_allclose(small.mean(axis=0), [2 / 3, 1 / 3, 0], atol=0.02)


def test_sample_real_mesh_lies_on_its_faces():
    directory = pdata.find_data_dir()
    if directory is not None and (directory / "ChineseDragon-10kv.off").is_file():
        mesh = pdata.load(directory / "ChineseDragon-10kv.off")
    else:
        mesh = pdata.Cloud("tetra", TETRA_V, TETRA_F)
    p = pdata.sample_mesh(mesh.points, mesh.faces, 300, seed=5)
    # Each sample must lie on one of the faces: test against the faces near it (cheap filter).
    v = mesh.points.astype(np.float64)
    centroids = v[mesh.faces].mean(axis=1)
    for q in p[:60]:
        near = np.argsort(((centroids - q) ** 2).sum(1))[:64]
        scale = float(np.abs(v).max())
        assert _barycentric_on_some_face(q[None], mesh.points, mesh.faces[near], tol=1e-5 * scale)[0]


def test_sample_mesh_bad_input():
    with pytest.raises(ValueError, match="faces"):
        pdata.sample_mesh(TETRA_V, np.zeros((0, 3), np.int64), 10)
    with pytest.raises(ValueError, match="num_points"):
        pdata.sample_mesh(TETRA_V, TETRA_F, -1)
    with pytest.raises(ValueError, match="no area"):
        pdata.sample_mesh(np.zeros((3, 3)), np.array([[0, 1, 2]]), 10)


# ----------------------------------------------------------------------------------------------
# Data location
# ----------------------------------------------------------------------------------------------


def test_env_var_takes_precedence(tmp_path, monkeypatch):
    (tmp_path / "kitten.xyz").write_text("0 0 0\n")
    monkeypatch.setenv("PCOPS_DATA_DIR", str(tmp_path))
    assert pdata.find_data_dir() == tmp_path.resolve()
    assert pdata.list_clouds() == [tmp_path.resolve() / "kitten.xyz"]


def test_local_data_dir_is_found(tmp_path, monkeypatch):
    monkeypatch.delenv("PCOPS_DATA_DIR", raising=False)
    (tmp_path / "data" / "cgal").mkdir(parents=True)
    (tmp_path / "data" / "cgal" / "radar.xyz").write_text("1 2 3\n")
    monkeypatch.chdir(tmp_path)
    assert pdata.find_data_dir() == (tmp_path / "data" / "cgal").resolve()


def test_env_var_without_data_falls_through(tmp_path, monkeypatch):
    monkeypatch.setenv("PCOPS_DATA_DIR", str(tmp_path / "missing"))
    monkeypatch.chdir(tmp_path)
    found = pdata.find_data_dir()
    assert found is None or found != (tmp_path / "missing")


def test_explicit_dir_must_hold_data(tmp_path):
    with pytest.raises(FileNotFoundError, match="expected files"):
        pdata.data_dir(tmp_path)


def test_synthetic_cloud_is_a_sphere_shell():
    p = pdata.synthetic_cloud(1000, seed=0)
    r = np.linalg.norm(p.astype(np.float64), axis=1)
    assert p.dtype == np.float32 and p.shape == (1000, 3)
    assert np.all(np.abs(r - 1) < 0.1)
