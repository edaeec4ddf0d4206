"""pcops.pyg: torch.ops.pyg.{fps, knn, radius, nearest, grid_cluster} for torch_geometric 2.8.

Each scenario that registers the operators (or imports torch_geometric with them registered)
runs in a fresh interpreter (this file run as a script), so no ``pyg::`` schema, ``pyg_lib``
stand-in or torch_geometric flag leaks into other test files. Expected values are small
hand-checked cases from upstream semantics (the upstream API notes on torch_cluster and pyg-lib, torch_cluster's
and PyG's own test cases), plus cross-checks against SciPy's cKDTree on random clouds.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import importlib.util

# torch_geometric is a test requirement (requirements-dev.txt); it is not imported here, each
# scenario controls that. Missing, the suite fails instead of skipping.
if importlib.util.find_spec("torch_geometric") is None:
    raise ImportError("torch_geometric (requirements-dev.txt) is not installed")


def _run(scenario: str) -> None:
    env = dict(os.environ)
    env.pop("PYTEST_CURRENT_TEST", None)
    proc = subprocess.run([sys.executable, __file__, scenario], capture_output=True, text=True,
                          env=env, timeout=600)
    if proc.returncode != 0:
        pytest.fail(f"scenario {scenario} failed (rc {proc.returncode}):\n"
                    f"{textwrap.indent(proc.stdout[-4000:] + proc.stderr[-8000:], '  ')}",
                    pytrace=False)
    assert proc.stdout.strip().endswith(f"OK {scenario}"), proc.stdout[-2000:]


SCENARIOS = [
    "detection_after_import",
    "detection_before_import",
    "pool_ops_hand_checked",
    "pool_ops_match_ckdtree",
    "pyg_lib_ops_and_lenient_inputs",
    "fake_kernels_and_opcheck",
    "real_pyg_lib_left_alone",
    "existing_pyg_schemas_overridden_only_with_force",
    "compat_install_pyg_lib",
    "pointnet2_matches_torch_cluster_stand_in",
    "dgcnn_matches_torch_cluster_stand_in",
]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario(scenario):
    _run(scenario)


def test_registry_entry_is_opt_in():
    import pcops.compat as compat

    entry = compat.REGISTRY["pyg_lib"]
    assert entry.impl == "pcops.pyg" and entry.default is False
    assert "pyg_lib" not in compat.installed()
    assert "pyg_lib" not in sys.modules or not compat.is_stand_in(sys.modules["pyg_lib"])


# ============================================================================================
# Scenarios (run in a subprocess: `python test_pyg.py NAME`)


def _pairs(e):
    return set(map(tuple, e.t().tolist()))


def _flags():
    import torch_geometric.typing as T

    return {n: getattr(T, n) for n in ("WITH_FPS", "WITH_KNN", "WITH_RADIUS", "WITH_NEAREST",
                                       "WITH_GRID_CLUSTER", "WITH_PYG_LIB")}


def _has_schema(name):
    try:
        torch._C._dispatch_find_schema_or_throw(f"pyg::{name}", "")
        return True
    except RuntimeError:
        return False


OPS = ("fps", "knn", "radius", "nearest", "grid_cluster")


def _call_every_pool_op():
    from torch_geometric.nn import pool

    x = torch.rand(20, 3)
    batch = torch.tensor([0] * 10 + [1] * 10)
    pool.fps(x, batch, 0.5)
    pool.knn(x, x, 2, batch, batch)
    pool.radius(x, x, 0.5, batch, batch)
    pool.nearest(x, x[:4], batch, torch.tensor([0, 0, 1, 1]))
    pool.voxel_grid(x, 0.25, batch)


def scenario_detection_after_import():
    import torch_geometric.typing as T
    from torch_geometric.nn import pool

    import pcops.pyg as P

    assert "pyg_lib" not in sys.modules and not any(_has_schema(n) for n in OPS)
    assert not any(_flags().values())
    with pytest.raises(ImportError, match="pyg-lib"):
        pool.knn(torch.rand(3, 2), torch.rand(3, 2), 1)

    assert P.register() is True
    assert P.register() is True  # idempotent
    assert P.is_registered() and all(_has_schema(n) for n in OPS)
    flags = _flags()
    assert all(flags[n] for n in ("WITH_FPS", "WITH_KNN", "WITH_RADIUS", "WITH_NEAREST", "WITH_GRID_CLUSTER"))
    assert flags["WITH_PYG_LIB"] is False  # the full-pyg-lib paths (samplers, Node2Vec) stay off
    # PyG's functions go through the torch.ops.pyg operators
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        _call_every_pool_op()
    names = {e.name for e in prof.events()}
    assert {f"pyg::{n}" for n in OPS} <= names, sorted(n for n in names if "::" in n)
    assert "pcops::knn_ragged" in names and "pcops::furthest_point_sample_ragged" in names

    assert P.unregister() is True and P.unregister() is False
    assert not any(_flags().values()) and "pyg_lib" not in sys.modules
    assert not any(_has_schema(n) for n in OPS) and not P.is_registered()
    with pytest.raises(ImportError, match="pyg-lib"):
        pool.knn(torch.rand(3, 2), torch.rand(3, 2), 1)
    # and it registers again in the same process
    assert P.register() and T.WITH_KNN
    assert pool.knn(torch.tensor([[0.0], [1.0]]), torch.tensor([[0.9]]), 1).tolist() == [[0], [1]]


def scenario_detection_before_import():
    import inspect

    import pcops.pyg as P

    assert P.register() is True
    assert "torch_geometric" not in sys.modules
    import pyg_lib
    import torch_geometric.typing as T

    flags = _flags()
    assert all(flags[n] for n in ("WITH_FPS", "WITH_KNN", "WITH_RADIUS", "WITH_NEAREST", "WITH_GRID_CLUSTER"))
    assert flags["WITH_PYG_LIB"] is False
    # only the point operators: the other pyg-lib features stay off
    for off in ("WITH_GMM", "WITH_SEGMM", "WITH_SAMPLED_OP", "WITH_SPLINE", "WITH_GRACLUS", "WITH_SOFTMAX",
                "WITH_INDEX_SORT", "WITH_METIS", "WITH_EDGE_TIME_NEIGHBOR_SAMPLE",
                "WITH_WEIGHTED_NEIGHBOR_SAMPLE", "WITH_CPU_HASH_MAP", "WITH_CUDA_HASH_MAP"):
        assert getattr(T, off) is False, off
    assert T.pyg_lib is pyg_lib and not hasattr(pyg_lib, "partition")
    assert set(pyg_lib.ops.__all__) == set(OPS)
    inspect.signature(pyg_lib.sampler.neighbor_sample)
    with pytest.raises(NotImplementedError):
        pyg_lib.sampler.neighbor_sample(None, None, None, None)
    assert pyg_lib.__version__.startswith("0.8.0+pcops")
    # the one-shot import hook is gone
    assert not any(type(f).__name__ == "_TypingFinder" for f in sys.meta_path)
    _call_every_pool_op()
    from torch_geometric.testing.decorators import has_package

    assert has_package("pyg_lib")  # what @withPackage('pyg_lib') checks
    assert callable(pyg_lib.testing.withCUDA)
    P.unregister()
    assert not any(_flags().values())


def scenario_pool_ops_hand_checked():
    import pcops.pyg as P

    P.register()
    from torch_geometric.nn import fps, knn, knn_graph, nearest, radius, radius_graph, voxel_grid

    # fps (torch_cluster's test case): deterministic start, per-cloud counts, selection order
    src = torch.tensor([[-1.0, -1.0], [-1.0, 1.0], [1.0, 1.0], [1.0, -1.0],
                        [-2.0, -2.0], [-2.0, 2.0], [2.0, 2.0], [2.0, -2.0]])
    batch = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    assert fps(src, batch, 0.5, False).tolist() == [0, 2, 4, 6]
    assert fps(src, batch, 1.0, False).tolist() == [0, 2, 1, 3, 4, 6, 5, 7]  # ties: lowest index
    assert fps(src, None, 0.25, False).tolist() == [0, 6]
    assert fps(src.view(8, 1, 2), batch, 0.5, False).tolist() == [0, 2, 4, 6]  # x.dim() > 2
    out = fps(src, batch, 0.5)  # random start: one of each cloud, then its opposite corner
    assert out.dtype == torch.int64 and out.shape == (4,)
    assert 0 <= out[0] < 4 <= out[2] < 8
    torch.manual_seed(3)
    a = fps(src, batch, 0.5)
    torch.manual_seed(3)
    assert torch.equal(a, fps(src, batch, 0.5))  # torch's generator
    # pyg-lib's multi-segment counts: ceil(10 * 0.5) = 5, ceil(20 * 0.5) = 10; a single point
    pts = torch.rand(30, 3)
    b = torch.tensor([0] * 10 + [1] * 20)
    idx = fps(pts, b, 0.5, False)
    assert idx.shape == (15,) and idx[:5].lt(10).all() and idx[5:].ge(10).all()
    assert idx[0] == 0 and idx[5] == 10
    assert fps(pts[:1], None, 0.5).tolist() == [0]
    assert sorted(fps(pts, b, 1.0, False).tolist()) == list(range(30))

    # knn (torch_cluster's test case)
    x = torch.tensor([[-1.0, -1.0], [-1.0, 1.0], [1.0, -1.0], [1.0, 1.0],
                      [-1.0, -1.0], [-1.0, 1.0], [1.0, -1.0], [1.0, 1.0]])
    y = torch.tensor([[1.0, 0.0], [-1.0, 0.0]])
    bx = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    by = torch.tensor([0, 1])
    assert knn(x, y, 2).tolist() == [[0, 0, 1, 1], [2, 3, 0, 1]]
    assert knn(x, y, 2, bx, by).tolist() == [[0, 0, 1, 1], [2, 3, 4, 5]]
    assert knn(x[:4], y, 9).shape == (2, 8)  # k > n: every point, no padding
    assert knn(x, y, 2, bx, by, cosine=True).shape == (2, 4)  # cosine works on CPU here

    # knn_graph: [neighbour, centre] for source_to_target, grouped by centre
    sq = x[:4]
    assert knn_graph(sq, 2).tolist() == [[1, 2, 0, 3, 0, 3, 1, 2], [0, 0, 1, 1, 2, 2, 3, 3]]
    assert knn_graph(sq, 2, flow="target_to_source").tolist() == [[0, 0, 1, 1, 2, 2, 3, 3],
                                                                 [1, 2, 0, 3, 0, 3, 1, 2]]
    assert knn_graph(sq, 1, loop=True).tolist() == [[0, 1, 2, 3], [0, 1, 2, 3]]

    # radius (torch_cluster's test case), strict membership, the cap, ignore_same_index
    y = torch.tensor([[0.0, 0.0], [0.0, 1.0]])
    assert radius(x, y, 1.5, bx, by).tolist() == [[0, 0, 0, 0, 1, 1], [0, 1, 2, 3, 5, 7]]
    assert radius(x, y, 1.5, bx, by, max_num_neighbors=2).tolist() == [[0, 0, 1, 1], [0, 1, 5, 7]]
    line = torch.tensor([[0.0, 0.0], [2.0, 0.0]])
    assert radius(line, line[:1], 2.0).tolist() == [[0], [0]]  # d == r is out
    assert radius(line, line[:1], 2.001).tolist() == [[0, 0], [0, 1]]
    assert radius_graph(sq, 2.5).tolist() == [[1, 2, 0, 3, 0, 3, 1, 2], [0, 0, 1, 1, 2, 2, 3, 3]]
    assert radius_graph(sq, 2.0).shape == (2, 0)
    assert radius_graph(sq, 2.0, loop=True).tolist() == [[0, 1, 2, 3], [0, 1, 2, 3]]
    # the self pair does not use one of the max_num_neighbors slots
    assert radius_graph(sq, 2.5, max_num_neighbors=1).tolist() == [[1, 0, 0, 1], [0, 1, 2, 3]]

    # nearest
    x = torch.tensor([[-1.0, -1.0], [-1.0, 1.0], [1.0, -1.0], [1.0, 1.0],
                      [-2.0, -2.0], [-2.0, 2.0], [2.0, -2.0], [2.0, 2.0]])
    y = torch.tensor([[-1.0, 0.0], [1.0, 0.0], [-2.0, 0.0], [2.0, 0.0]])
    assert nearest(x, y, bx, torch.tensor([0, 0, 1, 1])).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert nearest(x[:4], y[:2]).tolist() == [0, 0, 1, 1]
    assert nearest(torch.tensor([[0.0]]), torch.tensor([[-1.0], [1.0]])).tolist() == [0]  # tie: lowest

    # voxel_grid (PyG's test case)
    pos = torch.tensor([[0.0, 0.0], [11.0, 9.0], [2.0, 8.0], [2.0, 2.0], [8.0, 3.0]])
    vb = torch.tensor([0, 0, 0, 1, 1])
    assert voxel_grid(pos, 5, vb).tolist() == [0, 5, 3, 6, 7]
    assert voxel_grid(pos, 5, vb, 0, 20).tolist() == [0, 7, 5, 25, 26]
    assert voxel_grid(pos, [5.0, 5.0]).tolist() == [0, 5, 3, 0, 1]
    assert voxel_grid(pos.double(), 5, vb).tolist() == [0, 5, 3, 6, 7]  # any dtype for the grid

    # knn_interpolate (PyG's test case) and GravNetConv / XConv run on torch.ops.pyg.knn
    from torch_geometric.nn import GravNetConv, XConv, knn_interpolate

    fx = torch.tensor([[1.0], [10.0], [100.0], [-1.0], [-10.0], [-100.0]])
    pos_x = torch.tensor([[-1.0, 0.0], [0.0, 0.0], [1.0, 0.0], [-2.0, 0.0], [0.0, 0.0], [2.0, 0.0]])
    pos_y = torch.tensor([[-1.0, -1.0], [1.0, 1.0], [-2.0, -2.0], [2.0, 2.0]])
    out = knn_interpolate(fx, pos_x, pos_y, torch.tensor([0, 0, 0, 1, 1, 1]), torch.tensor([0, 0, 1, 1]), k=2)
    assert out.tolist() == [[4.0], [70.0], [-4.0], [-70.0]]
    torch.manual_seed(0)
    feats = torch.randn(16, 8)
    assert GravNetConv(8, 6, 3, 4, k=3)(feats, torch.tensor([0] * 8 + [1] * 8)).shape == (16, 6)
    assert XConv(8, 6, dim=3, kernel_size=4)(feats, torch.rand(16, 3)).shape == (16, 6)


def scenario_pool_ops_match_ckdtree():
    import numpy as np
    from scipy.spatial import cKDTree

    import pcops.pyg as P

    P.register()
    from torch_geometric.nn import knn, nearest, radius

    gen = torch.Generator().manual_seed(7)
    sizes_x, sizes_y = [150, 1, 0, 97], [40, 3, 5, 0]
    x = torch.rand(sum(sizes_x), 3, generator=gen)
    y = torch.rand(sum(sizes_y), 3, generator=gen)
    bx = torch.repeat_interleave(torch.arange(4), torch.tensor(sizes_x))
    by = torch.repeat_interleave(torch.arange(4), torch.tensor(sizes_y))
    ox = np.concatenate([[0], np.cumsum(sizes_x)])
    oy = np.concatenate([[0], np.cumsum(sizes_y)])
    xs, ys = x.double().numpy(), y.double().numpy()
    k, r = 6, 0.2

    e_knn = knn(x, y, k, bx, by, batch_size=4)
    e_rad = radius(x, y, r, bx, by, max_num_neighbors=1000, batch_size=4)
    assert e_knn[0].diff().ge(0).all() and e_rad[0].diff().ge(0).all()  # grouped by query
    want_knn, want_rad = set(), set()
    for b in range(4):
        if sizes_x[b] == 0 or sizes_y[b] == 0:
            continue
        tree = cKDTree(xs[ox[b]:ox[b + 1]])
        kk = min(k, sizes_x[b])
        _, nn = tree.query(ys[oy[b]:oy[b + 1]], k=kk)
        nn = np.asarray(nn).reshape(sizes_y[b], kk)
        for qi in range(sizes_y[b]):
            want_knn |= {(oy[b] + qi, ox[b] + j) for j in nn[qi]}
        for qi, hits in enumerate(tree.query_ball_point(ys[oy[b]:oy[b + 1]], r)):
            want_rad |= {(oy[b] + qi, ox[b] + j) for j in hits}

    def dist(q, j):
        return float(np.linalg.norm(ys[q] - xs[j]))

    got = _pairs(e_knn)
    assert len(got) == e_knn.shape[1] == len(want_knn)
    for q, j in got ^ want_knn:  # only float32 near-ties may differ from float64 SciPy
        kth = sorted(dist(q, jj) for (qq, jj) in want_knn if qq == q)[-1]
        assert abs(dist(q, j) - kth) < 1e-5, (q, j)
    got = _pairs(e_rad)
    assert len(got) == e_rad.shape[1]
    for q, j in got ^ want_rad:  # only points at distance ~r may differ
        assert abs(dist(q, j) - r) < 1e-5, (q, j)

    # nearest == brute-force argmin per cloud (y has no cloud 3 rows: drop x's cloud 3)
    keep = bx < 3
    out = nearest(x[keep], y, bx[keep], by)
    for i, (pi, b) in enumerate(zip(x[keep].double(), bx[keep].tolist())):
        d = ((y[oy[b]:oy[b + 1]].double() - pi) ** 2).sum(1)
        assert out[i] == oy[b] + int(d.argmin())


def scenario_pyg_lib_ops_and_lenient_inputs():
    import pcops.pyg as P

    P.register()
    import pyg_lib

    x = torch.tensor([[-1.0, -1.0], [-1.0, 1.0], [1.0, -1.0], [1.0, 1.0]])
    y = torch.tensor([[1.0, 0.0], [-1.0, 0.0]])
    ptr2 = torch.tensor([0, 2, 4])
    # pyg_lib.ops keeps pyg-lib's positional order (k / r before the offsets)
    assert pyg_lib.ops.knn(x, y, 2).tolist() == [[0, 0, 1, 1], [2, 3, 0, 1]]
    assert pyg_lib.ops.knn(x, y, 1, ptr2, torch.tensor([0, 1, 2])).tolist() == [[0, 1], [0, 2]]
    assert pyg_lib.ops.radius(x, y, 1.5).tolist() == [[0, 0, 1, 1], [2, 3, 0, 1]]
    assert pyg_lib.ops.nearest(x, y).tolist() == [1, 1, 0, 0]
    assert pyg_lib.ops.fps(x, torch.tensor([0, 4]), 0.5, False).tolist() == [0, 3]
    assert pyg_lib.ops.grid_cluster(x, torch.tensor([1.0, 1.0])).tolist() == [0, 6, 2, 8]
    # schema defaults, positional call as PyG does
    assert torch.ops.pyg.knn(x, y).tolist() == [[0, 1], [2, 0]]
    assert torch.ops.pyg.fps(x, torch.tensor([0, 4]), random_start=False).tolist() == [0, 3]
    assert str(torch.ops.pyg.fps.default._schema) == (
        "pyg::fps(Tensor src, Tensor ptr, float ratio=0.5, bool random_start=True) -> Tensor")
    # int32 batch vectors (PyG then builds int32 offsets; pyg-lib fails on them)
    from torch_geometric.nn import knn, radius

    bx, by = torch.tensor([0, 0, 1, 1], dtype=torch.int32), torch.tensor([0, 1], dtype=torch.int32)
    assert knn(x, y, 1, bx, by).tolist() == [[0, 1], [0, 2]]
    # batch_x and batch_y with different largest ids: trailing clouds are empty
    assert knn(x, y[:1], 1, torch.tensor([0, 0, 1, 1]), torch.tensor([0])).tolist() == [[0], [0]]
    assert radius(x, y[:1], 2.5, torch.tensor([0, 0, 1, 1]), torch.tensor([0])).tolist() == [[0, 0], [0, 1]]
    # non-contiguous inputs give the right answer (pyg-lib CPU misreads them)
    xt = torch.tensor([[-1.0, -1.0, 1.0, 1.0], [-1.0, 1.0, -1.0, 1.0]]).t()
    assert not xt.is_contiguous()
    assert knn(xt, y, 2).tolist() == [[0, 0, 1, 1], [2, 3, 0, 1]]
    # empty inputs
    assert knn(x[:0], y, 2).shape == (2, 0) and radius(x, y[:0], 1.0).shape == (2, 0)
    # errors are ValueError / TypeError with a message
    with pytest.raises(ValueError, match="ratio"):
        torch.ops.pyg.fps(x, torch.tensor([0, 4]), -0.5, False)
    with pytest.raises(ValueError, match="ptr"):
        torch.ops.pyg.knn(x, y, torch.tensor([0, 3]), None, 1)
    with pytest.raises(TypeError, match="float64"):
        knn(x.double(), y.double(), 1)
    with pytest.raises(ValueError, match="k"):
        torch.ops.pyg.knn(x, y, None, None, -1)
    # outputs carry no autograd history
    xg = x.clone().requires_grad_()
    assert not knn(xg, xg, 2).requires_grad and not torch.ops.pyg.fps(xg, torch.tensor([0, 4])).requires_grad


def scenario_fake_kernels_and_opcheck():
    import pcops.pyg as P

    P.register()
    x = torch.rand(12, 3)
    y = torch.rand(5, 3)
    ptr_x, ptr_y = torch.tensor([0, 7, 12]), torch.tensor([0, 2, 5])
    cases = [
        (torch.ops.pyg.fps.default, (x, ptr_x, 0.5, False)),
        (torch.ops.pyg.knn.default, (x, y, ptr_x, ptr_y, 3, False, 1)),
        (torch.ops.pyg.knn.default, (x, y, None, None, 2, False, 1)),
        (torch.ops.pyg.radius.default, (x, y, ptr_x, ptr_y, 0.5, 4, 1, False)),
        (torch.ops.pyg.nearest.default, (x, y, ptr_x, ptr_y)),
        (torch.ops.pyg.grid_cluster.default, (x, torch.tensor([0.3, 0.3, 0.3]), None, None)),
    ]
    for op, args in cases:
        torch.library.opcheck(op, args)
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    with FakeTensorMode(shape_env=ShapeEnv()) as mode:
        fx, fy = mode.from_tensor(x), mode.from_tensor(y)
        assert torch.ops.pyg.nearest(fx, fy).shape == (12,)
        assert torch.ops.pyg.knn(fx, fy, None, None, 2).shape[0] == 2

    @torch.compile(fullgraph=True, backend="eager")
    def f(x, y, ptr_x, ptr_y):
        return torch.ops.pyg.knn(x, y, ptr_x, ptr_y, 3, False, 1), torch.ops.pyg.nearest(x, y, ptr_x, ptr_y)

    got, want = f(x, y, ptr_x, ptr_y), (torch.ops.pyg.knn(x, y, ptr_x, ptr_y, 3), torch.ops.pyg.nearest(x, y, ptr_x, ptr_y))
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def scenario_real_pyg_lib_left_alone():
    import importlib
    import tempfile
    from pathlib import Path

    import pcops.compat as compat
    import pcops.pyg as P

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "pyg_lib").mkdir()
        (Path(tmp) / "pyg_lib" / "__init__.py").write_text("REAL = True\n")
        sys.path.insert(0, tmp)
        importlib.invalidate_caches()
        assert P.register() is False and not P.is_registered()
        assert not any(_has_schema(n) for n in OPS) and "pyg_lib" not in sys.modules
        assert P.register(force=True) is True
        import pyg_lib

        assert compat.is_stand_in(pyg_lib) and all(_has_schema(n) for n in OPS)
        P.unregister()
        assert importlib.import_module("pyg_lib").REAL  # the real one is found again
        # already imported real package: left alone too
        assert P.register() is False and sys.modules["pyg_lib"].REAL


def scenario_existing_pyg_schemas_overridden_only_with_force():
    import warnings

    import pcops.pyg as P

    # a loaded pyg-lib library without its Python package: one schema, a placeholder kernel
    real = torch.library.Library("pyg", "FRAGMENT")
    real.define(P.SCHEMAS["knn"])
    real.impl("knn", lambda x, y, px=None, py=None, k=1, c=False, n=1: torch.full((2, 1), -7), "CPU")
    x = torch.tensor([[0.0], [1.0]])
    assert P.present()
    assert P.register() is False and "pyg_lib" not in sys.modules
    assert torch.ops.pyg.knn(x, x, None, None, 1).tolist() == [[-7], [-7]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch warns about overriding a kernel
        assert P.register(force=True) is True
    assert torch.ops.pyg.knn(x, x, None, None, 1).tolist() == [[0, 1], [0, 1]]
    assert all(_has_schema(n) for n in OPS)
    P.unregister()
    assert _has_schema("knn") and not _has_schema("fps")  # ours gone, the other one kept
    assert torch.ops.pyg.knn(x, x, None, None, 1).tolist() == [[-7], [-7]]


def scenario_compat_install_pyg_lib():
    import pcops.compat as compat
    import torch_geometric.typing as T

    defaults = compat.install().keys()  # torch_cluster and the other default stand-ins
    assert "torch_cluster" in defaults and "pyg_lib" not in defaults  # opt-in: not by default
    assert "pyg_lib" not in sys.modules and not T.WITH_KNN
    mods = compat.install(pyg_lib=True)
    assert set(mods) == set(defaults) | {"pyg_lib"} and compat.is_stand_in(mods["pyg_lib"])
    import pcops.pyg as P

    assert P.is_registered() and T.WITH_KNN and P.register() is True
    assert compat.uninstall() == [*defaults, "pyg_lib"]
    assert not T.WITH_KNN and not any(_has_schema(n) for n in OPS)


# --------------------------------------------------------------------------------------------
# Models: PointNet++ set abstraction and DGCNN, through torch.ops.pyg and through torch_cluster


def _clouds(seed=0, b=3, n=96):
    gen = torch.Generator().manual_seed(seed)
    pos = torch.rand(b * n, 3, generator=gen)
    batch = torch.arange(b).repeat_interleave(n)
    return pos, batch


def _pointnet2(fps_fn, radius_fn):
    from torch_geometric.nn import MLP, PointNetConv, global_max_pool

    class SAModule(torch.nn.Module):
        def __init__(self, ratio, r, channels):
            super().__init__()
            self.ratio, self.r = ratio, r
            self.conv = PointNetConv(MLP(channels, norm=None), add_self_loops=False)

        def forward(self, x, pos, batch):
            idx = fps_fn(pos, batch, ratio=self.ratio)
            row, col = radius_fn(pos, pos[idx], self.r, batch, batch[idx], max_num_neighbors=32)
            edge_index = torch.stack([col, row], dim=0)
            x_dst = None if x is None else x[idx]
            x = self.conv((x, x_dst), (pos, pos[idx]), edge_index)
            return x, pos[idx], batch[idx]

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.sa1 = SAModule(0.5, 0.3, [3, 16, 32])
            self.sa2 = SAModule(0.25, 0.5, [32 + 3, 32, 64])
            self.head = MLP([64 + 3, 64, 10], norm=None)

        def forward(self, pos, batch):
            x, pos, batch = self.sa1(None, pos, batch)
            x, pos, batch = self.sa2(x, pos, batch)
            x = self.head(torch.cat([x, pos], dim=1))
            return global_max_pool(x, batch)

    return Net()


def _run_model(make, pos, batch, seed=1):
    torch.manual_seed(seed)  # weights and the fps random starts
    model = make()
    pos = pos.clone().requires_grad_()
    out = model(pos, batch)
    out.square().sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    assert torch.isfinite(out).all() and all(torch.isfinite(g).all() for g in grads.values())
    assert any(g.abs().sum() > 0 for g in grads.values())
    return out.detach(), grads, pos.grad


def scenario_pointnet2_matches_torch_cluster_stand_in():
    import pcops.compat as compat
    import pcops.pyg as P

    P.register()
    compat.install()  # the torch_cluster stand-in
    import torch_cluster
    from torch_geometric.nn import fps, radius

    pos, batch = _clouds()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out_pyg, g_pyg, gp_pyg = _run_model(lambda: _pointnet2(fps, radius), pos, batch)
    names = {e.name for e in prof.events()}
    assert {"pyg::fps", "pyg::radius"} <= names
    out_tc, g_tc, gp_tc = _run_model(lambda: _pointnet2(torch_cluster.fps, torch_cluster.radius), pos, batch)
    assert out_pyg.shape == (3, 10)
    assert torch.equal(out_pyg, out_tc)
    assert g_pyg.keys() == g_tc.keys() and all(torch.equal(g_pyg[k], g_tc[k]) for k in g_pyg)
    assert torch.equal(gp_pyg, gp_tc)


def _dgcnn(dynamic: bool, knn_graph_fn=None):
    from torch_geometric.nn import MLP, DynamicEdgeConv, EdgeConv, global_max_pool

    k = 8

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            if dynamic:
                self.conv1 = DynamicEdgeConv(MLP([2 * 3, 32, 32], norm=None), k, aggr="max")
                self.conv2 = DynamicEdgeConv(MLP([2 * 32, 32], norm=None), k, aggr="max")
            else:
                self.conv1 = EdgeConv(MLP([2 * 3, 32, 32], norm=None), aggr="max")
                self.conv2 = EdgeConv(MLP([2 * 32, 32], norm=None), aggr="max")
            self.head = MLP([32 + 32, 64, 5], norm=None)

        def conv(self, conv, x, batch):
            if dynamic:
                return conv(x, batch)
            # DynamicEdgeConv's graph: the k nearest (self included), [neighbour, centre]
            return conv(x, knn_graph_fn(x, k, batch, loop=True))

        def forward(self, pos, batch):
            x1 = self.conv(self.conv1, pos, batch)
            x2 = self.conv(self.conv2, x1, batch)
            return global_max_pool(self.head(torch.cat([x1, x2], dim=1)), batch)

    return Net()


def scenario_dgcnn_matches_torch_cluster_stand_in():
    import pcops.compat as compat
    import pcops.pyg as P

    P.register()
    compat.install()
    import torch_cluster

    pos, batch = _clouds(seed=5)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out_pyg, g_pyg, gp_pyg = _run_model(lambda: _dgcnn(True), pos, batch)
    assert "pyg::knn" in {e.name for e in prof.events()}
    out_tc, g_tc, gp_tc = _run_model(lambda: _dgcnn(False, torch_cluster.knn_graph), pos, batch)
    assert out_pyg.shape == (3, 5)
    assert torch.equal(out_pyg, out_tc)
    assert g_pyg.keys() == g_tc.keys() and all(torch.equal(g_pyg[k], g_tc[k]) for k in g_pyg)
    assert torch.equal(gp_pyg, gp_tc)


if __name__ == "__main__":
    name = sys.argv[1]
    import pcops  # noqa: F401  (loads the operator library)

    globals()[f"scenario_{name}"]()
    print(f"OK {name}")
