"""The package itself: public names, the loaded library, the test data fixtures."""

from __future__ import annotations

import zlib

import numpy as np
import torch

import pcops
import pcops.testing  # noqa: F401
from pcops import _loader


def test_public_api():
    assert set(pcops.__all__) >= {
        "ball_query", "furthest_point_sample", "knn", "three_nn", "three_interpolate", "gather_points",
        "group_points", "__version__",
    }
    for name in ("furthest_point_sample", "knn", "ball_query", "_ball_query_backward", "three_nn",
                 "three_interpolate", "_three_interpolate_backward", "gather_points", "_gather_points_backward",
                 "group_points", "_group_points_backward"):
        assert hasattr(torch.ops.pcops, name)
    assert _loader.load().is_file()  # idempotent: a second call does not reload


def test_real_clouds_or_synthetic_fallback(real_cloud_factory, real_data_dir, monkeypatch, tmp_path):
    cloud = real_cloud_factory("kitten.xyz", 500)
    assert cloud.dtype == torch.float32 and cloud.shape[1] == 3 and 0 < cloud.shape[0] <= 500
    assert torch.isfinite(cloud).all()
    # Without any data directory the fixture still yields a cloud (never a silent skip).
    monkeypatch.setenv("PCOPS_DATA_DIR", str(tmp_path / "missing"))
    import conftest

    monkeypatch.setattr(conftest, "REPO", tmp_path)
    assert conftest.data_dir() is None
    fallback = conftest.load_real_cloud("kitten.xyz", 400)
    assert fallback.shape == (400, 3) and torch.isfinite(fallback).all()
    assert np.unique(fallback.numpy(), axis=0).shape[0] == 400
    expect = conftest.synthetic_varying_density(400, seed=zlib.crc32(b"kitten.xyz") % 1000)
    assert torch.equal(fallback, torch.from_numpy(expect.astype(np.float32)))


def test_oracle_distance_is_the_contract_arithmetic():
    # Difference first, then ((dx*dx + dy*dy) + dz*dz) in float32: compare with an explicit
    # float32 evaluation for a case where the matmul identity loses everything.
    q = np.array([[1e4, 1e4, 1e4]], dtype=np.float32)
    x = np.array([[1e4 + 1, 1e4, 1e4 - 2]], dtype=np.float32)
    s = pcops.testing.squared_distances(q, x)
    assert s.dtype == np.float32 and s[0, 0] == np.float32(5.0)


def test_parallel_for_seam_uses_torch_threads():
    # at::parallel_for only runs in parallel when the binding is compiled with torch's OpenMP;
    # the seam must really use torch.get_num_threads() workers, and follow set_num_threads.
    from conftest import with_threads

    for threads in (1, 2, 3):
        assert with_threads(threads, lambda: torch.ops.pcops._parallel_threads(64)) == threads
    assert with_threads(3, lambda: torch.ops.pcops._parallel_threads(2)) == 2
    assert torch.ops.pcops._parallel_threads(1) == 1
    assert torch.ops.pcops._parallel_threads(0) == 0
