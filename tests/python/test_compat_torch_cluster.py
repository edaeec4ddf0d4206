"""The torch_cluster 1.6.3 stand-in (pcops.compat.torch_cluster) and pcops.compat.install().

Expected values are small hand-checked cases written from upstream's documented behaviour
(the upstream API notes, torch_cluster section) and upstream's own test cases; the point operators run on
pcops.flat.
"""

from __future__ import annotations

import importlib
import sys

import pytest
import torch

import pcops.compat as compat
from conftest import isolated_modules

UPSTREAM_ALL = [
    "graclus_cluster", "grid_cluster", "fps", "nearest", "knn", "knn_graph", "radius",
    "radius_graph", "random_walk", "neighbor_sampler", "__version__",
]


# install() selects every default stand-in; these tests are about torch_cluster alone.
ONLY_TC = {name: False for name, s in compat.REGISTRY.items() if name != "torch_cluster" and s.default}


def _install(**kwargs):
    return compat.install(**{**ONLY_TC, **kwargs})


@pytest.fixture
def clean():
    """No torch_cluster stand-in or module during the test (conftest.isolated_modules)."""
    with isolated_modules("torch_cluster"):
        yield


@pytest.fixture
def tc(clean):
    """The stand-in, installed into a clean sys.modules and imported by its upstream name."""
    installed = _install()
    assert "torch_cluster" in installed
    import torch_cluster

    assert installed["torch_cluster"] is torch_cluster
    return torch_cluster


@pytest.fixture
def flat_tc(tc):
    import pcops.flat  # noqa: F401  (the point operators run on it)
    return tc


def _pairs(edge_index: torch.Tensor) -> set[tuple[int, int]]:
    assert edge_index.dtype == torch.int64 and edge_index.dim() == 2 and edge_index.shape[0] == 2
    return set(map(tuple, edge_index.t().tolist()))


# --------------------------------------------------------------------------------------------
# install(), uninstall(), module layout


def test_install_registers_package_and_submodules(tc):
    assert compat.is_stand_in(tc)
    assert sorted(tc.__all__) == sorted(UPSTREAM_ALL)
    for name in UPSTREAM_ALL[:-1]:
        assert callable(getattr(tc, name))
    from torch_cluster.fps import fps
    from torch_cluster.graclus import graclus_cluster
    from torch_cluster.grid import grid_cluster
    from torch_cluster.knn import knn, knn_graph
    from torch_cluster.nearest import nearest
    from torch_cluster.radius import radius, radius_graph
    from torch_cluster.rw import random_walk
    from torch_cluster.sampler import neighbor_sampler

    assert (fps, knn, knn_graph, radius, radius_graph) == (tc.fps, tc.knn, tc.knn_graph, tc.radius,
                                                          tc.radius_graph)
    assert (nearest, grid_cluster, graclus_cluster, random_walk) == (tc.nearest, tc.grid_cluster,
                                                                    tc.graclus_cluster, tc.random_walk)
    assert neighbor_sampler is tc.neighbor_sampler
    for sub in ("fps", "knn", "radius", "nearest", "grid", "graclus", "rw", "sampler", "testing", "typing"):
        assert compat.is_stand_in(importlib.import_module(f"torch_cluster.{sub}"))
    # As upstream: fps/knn/radius/nearest are functions on the package, grid/rw/... are modules.
    assert tc.grid is sys.modules["torch_cluster.grid"] and tc.rw is sys.modules["torch_cluster.rw"]
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("torch_cluster.no_such_module")


def test_version_and_typing(tc):
    assert tc.__version__.startswith("1.6.3+pcops")
    import packaging.version as packaging_version
    v = packaging_version.Version(tc.__version__)
    assert v.release == (1, 6, 3) and v.local is not None
    import torch_cluster.typing

    assert torch_cluster.typing.WITH_PTR_LIST is False


def test_knn_docstring_names_batch_size(tc):
    # PyG <= 2.7 enables batch_size only if 'batch_size' appears in torch_cluster.knn.__doc__.
    assert "batch_size" in tc.knn.__doc__


def test_testing_helpers(tc):
    from torch_cluster import testing

    assert testing.dtypes == [torch.half, torch.bfloat16, torch.float, torch.double, torch.int, torch.long]
    assert torch.float in testing.grad_dtypes and torch.double in testing.grad_dtypes
    assert testing.floating_dtypes == testing.grad_dtypes + [torch.bfloat16]
    assert testing.devices[0] == torch.device("cpu")
    assert (torch.device("cuda:0") in testing.devices) == torch.cuda.is_available()
    t = testing.tensor([[1, 2]], torch.double, torch.device("cpu"))
    assert t.dtype == torch.double and t.tolist() == [[1.0, 2.0]]
    assert testing.tensor(None, torch.float, torch.device("cpu")) is None


def test_install_is_idempotent(clean):
    first = _install()
    modules = {k: v for k, v in sys.modules.items() if k.startswith("torch_cluster")}
    second = _install()
    assert first == second and first["torch_cluster"] is second["torch_cluster"]
    assert {k: v for k, v in sys.modules.items() if k.startswith("torch_cluster")} == modules
    assert compat.installed() == ["torch_cluster"]


def test_uninstall_removes_everything(clean):
    _install()
    assert hasattr(torch.ops.torch_cluster, "random_walk")
    assert compat.uninstall() == ["torch_cluster"]
    assert not any(k == "torch_cluster" or k.startswith("torch_cluster.") for k in sys.modules)
    assert not hasattr(torch.ops.torch_cluster, "random_walk")
    assert compat.uninstall() == []
    assert compat.installed() == []
    # and it installs again after an uninstall
    assert "torch_cluster" in _install()


def test_install_selection(clean):
    assert _install(torch_cluster=False) == {}
    assert "torch_cluster" not in sys.modules
    with pytest.raises(TypeError, match="no_such_package"):
        _install(no_such_package=True)
    assert set(compat.REGISTRY) >= {"torch_cluster"}


def _fake_real_package(tmp_path, monkeypatch):
    pkg = tmp_path / "torch_cluster"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("REAL = True\n__version__ = '1.6.3'\n")
    (pkg / "knn.py").write_text("def knn():\n    return 'real'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()


def test_real_package_is_left_alone(clean, tmp_path, monkeypatch):
    _fake_real_package(tmp_path, monkeypatch)
    assert _install() == {}
    assert compat.installed() == []
    import torch_cluster

    assert getattr(torch_cluster, "REAL", False) and not compat.is_stand_in(torch_cluster)


def test_real_package_already_imported_is_left_alone(clean, tmp_path, monkeypatch):
    _fake_real_package(tmp_path, monkeypatch)
    import torch_cluster

    assert _install() == {}
    assert sys.modules["torch_cluster"] is torch_cluster


def test_force_replaces_real_package_and_uninstall_restores(clean, tmp_path, monkeypatch):
    _fake_real_package(tmp_path, monkeypatch)
    real = importlib.import_module("torch_cluster")
    real_knn = importlib.import_module("torch_cluster.knn")
    ours = _install(force=True)["torch_cluster"]
    assert compat.is_stand_in(ours)
    import torch_cluster

    assert torch_cluster is ours and not hasattr(torch_cluster, "REAL")
    assert compat.is_stand_in(sys.modules["torch_cluster.knn"])
    compat.uninstall()
    assert sys.modules["torch_cluster"] is real and sys.modules["torch_cluster.knn"] is real_knn


def test_force_without_import_then_uninstall_finds_real_again(clean, tmp_path, monkeypatch):
    _fake_real_package(tmp_path, monkeypatch)
    _install(force=True)
    assert compat.is_stand_in(importlib.import_module("torch_cluster"))
    compat.uninstall()
    assert importlib.import_module("torch_cluster").REAL


# --------------------------------------------------------------------------------------------
# TorchScript


@pytest.mark.parametrize(
    "name",
    ["knn", "knn_graph", "radius", "radius_graph", "nearest", "grid_cluster", "graclus_cluster",
     "random_walk"],
)
def test_functions_are_scriptable(tc, name):
    torch.jit.script(getattr(tc, name))


def test_scripted_knn_and_grid_run(flat_tc):
    x = torch.tensor([[0.0], [1.0], [3.0], [7.0]])
    y = torch.tensor([[2.9]])
    out = torch.jit.script(flat_tc.knn)(x, y, 2)
    assert out.tolist() == [[0, 0], [2, 1]]
    pos = torch.tensor([[0.0, 0.0], [11.0, 9.0], [2.0, 8.0], [2.0, 2.0], [8.0, 3.0]])
    assert torch.jit.script(flat_tc.grid_cluster)(pos, torch.tensor([5.0, 5.0])).tolist() == [0, 5, 3, 0, 1]


def test_fps_callable_from_script(flat_tc):
    fps = flat_tc.fps

    @torch.jit.script
    def fps_tensor_ratio(x: torch.Tensor, ratio: torch.Tensor) -> torch.Tensor:
        return fps(x, None, ratio, False)

    @torch.jit.script
    def fps_list_ptr(x: torch.Tensor) -> torch.Tensor:
        return fps(x, None, 0.5, False, None, [0, 4, 8])

    x = _fps_points(torch.float)
    assert sorted(fps_tensor_ratio(x, torch.tensor([0.5])).tolist()) == [0, 5, 6, 7]
    assert fps_list_ptr(x).tolist() == [0, 2, 4, 6]


# --------------------------------------------------------------------------------------------
# fps


def _fps_points(dtype):
    return torch.tensor(
        [[-1, -1], [-1, 1], [1, 1], [1, -1], [-2, -2], [-2, 2], [2, 2], [2, -2]], dtype=dtype
    )


@pytest.mark.parametrize("dtype", [torch.half, torch.bfloat16, torch.float])
def test_fps(flat_tc, dtype):
    fps = flat_tc.fps
    x = _fps_points(dtype)
    batch = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    # Per square: start at its first point, then the opposite corner (lowest index on ties).
    assert fps(x, batch, random_start=False).tolist() == [0, 2, 4, 6]
    assert fps(x, batch, ratio=0.5, random_start=False).tolist() == [0, 2, 4, 6]
    assert fps(x, batch, ratio=torch.tensor(0.5), random_start=False).tolist() == [0, 2, 4, 6]
    assert fps(x, ptr=[0, 4, 8], ratio=0.5, random_start=False).tolist() == [0, 2, 4, 6]
    assert fps(x, ptr=torch.tensor([0, 4, 8]), ratio=0.5, random_start=False).tolist() == [0, 2, 4, 6]
    assert fps(x, batch, ratio=torch.tensor([0.5, 0.5]), random_start=False).tolist() == [0, 2, 4, 6]
    # One cloud: 0, then 6 (d^2 18), then 5 and 7 tie at 10 -> 5 first, then 7.
    assert fps(x, random_start=False).tolist() == [0, 6, 5, 7]
    assert sorted(fps(x, ratio=torch.tensor([0.5]), random_start=False).tolist()) == [0, 5, 6, 7]


def test_fps_ratio_per_example_and_counts(flat_tc):
    x = _fps_points(torch.float)
    batch = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    # ceil(4 * 0.25) = 1 from the first square, ceil(4 * 0.75) = 3 from the second.
    out = flat_tc.fps(x, batch, ratio=torch.tensor([0.25, 0.75]), random_start=False)
    assert out.tolist() == [0, 4, 6, 5]
    # ptr wins over batch.
    out = flat_tc.fps(x, torch.zeros(8, dtype=torch.long), 0.5, False, None, [0, 4, 8])
    assert out.tolist() == [0, 2, 4, 6]


def test_fps_random_start_uses_torch_generator(flat_tc):
    x = torch.randn(64, 3, generator=torch.Generator().manual_seed(1))
    batch = torch.arange(2).repeat_interleave(32)
    torch.manual_seed(7)
    a = flat_tc.fps(x, batch, 0.25)
    torch.manual_seed(7)
    b = flat_tc.fps(x, batch, 0.25)
    assert a.tolist() == b.tolist() and a.numel() == 16
    assert (a[:8] < 32).all() and (a[8:] >= 32).all()


def test_fps_half_ratio_rounds_in_src_dtype(flat_tc):
    # float16(0.7) = 0.70019..., so ceil(10 * ratio) = 8 for half input, 7 for float input.
    x = torch.arange(10, dtype=torch.float).reshape(10, 1)
    assert flat_tc.fps(x, ratio=0.7, random_start=False).numel() == 7
    assert flat_tc.fps(x.half(), ratio=0.7, random_start=False).numel() == 8


def test_float64_coordinates_raise(flat_tc):
    # pcops.flat's policy: no silent rounding of float64 coordinates (upstream computes in double).
    x = torch.zeros(4, 3, dtype=torch.double)
    with pytest.raises(TypeError):
        flat_tc.knn(x, x, 1)
    with pytest.raises(TypeError):
        flat_tc.fps(x)


# --------------------------------------------------------------------------------------------
# knn, knn_graph


def test_knn(flat_tc):
    knn = flat_tc.knn
    x = torch.tensor([[-1.0, -1.0], [-1.0, 1.0], [1.0, -1.0], [1.0, 1.0]])
    y = torch.tensor([[1.0, 0.0], [-1.0, 0.0]])
    out = knn(x, y, 2)
    assert out[0].tolist() == [0, 0, 1, 1]  # grouped by query
    assert _pairs(out) == {(0, 2), (0, 3), (1, 0), (1, 1)}
    out = knn(x, y, 2, torch.tensor([0, 0, 0, 0]), torch.tensor([0, 0]))
    assert _pairs(out) == {(0, 2), (0, 3), (1, 0), (1, 1)}


def test_knn_order_batches_and_small_examples(flat_tc):
    knn = flat_tc.knn
    x = torch.tensor([[0.0], [1.0], [3.0], [7.0]])
    # Nearest first: distances 2.9, 1.9, 0.1, 4.1.
    assert knn(x, torch.tensor([[2.9]]), 3).tolist() == [[0, 0, 0], [2, 1, 0]]
    # k larger than the example: min(k, n) edges, no padding.
    assert knn(x, torch.tensor([[2.9]]), 10).shape == (2, 4)
    xb = torch.tensor([[0.0], [1.0], [10.0], [11.0]])
    out = knn(xb, torch.tensor([[0.2], [10.9]]), 1, torch.tensor([0, 0, 1, 1]), torch.tensor([0, 1]))
    assert out.tolist() == [[0, 1], [0, 3]]
    # A missing batch id (0 and 2 only) works.
    out = knn(xb, torch.tensor([[0.2], [10.9]]), 1, torch.tensor([0, 0, 2, 2]), torch.tensor([0, 2]))
    assert out.tolist() == [[0, 1], [0, 3]]
    assert knn(x[:0], torch.tensor([[2.9]]), 2).shape == (2, 0)


def test_knn_graph(flat_tc):
    knn_graph = flat_tc.knn_graph
    x = torch.tensor([[-1.0, -1.0], [-1.0, 1.0], [1.0, -1.0], [1.0, 1.0]])
    expected = {(1, 0), (2, 0), (0, 1), (3, 1), (0, 2), (3, 2), (1, 3), (2, 3)}  # (neighbour, centre)
    assert _pairs(knn_graph(x, 2)) == expected
    assert _pairs(knn_graph(x, 2, flow="target_to_source")) == {(b, a) for a, b in expected}
    looped = knn_graph(x, 3, loop=True)
    assert {(i, i) for i in range(4)} <= _pairs(looped) and looped.shape == (2, 12)
    # Asymmetric k = 1: 0 -> 1, 1 -> 0, 2 -> 1; grouped by centre ascending.
    line = torch.tensor([[0.0], [1.0], [3.0]])
    assert knn_graph(line, 1).tolist() == [[1, 0, 1], [0, 1, 2]]
    assert knn_graph(line, 1, flow="target_to_source").tolist() == [[0, 1, 2], [1, 0, 1]]
    batch = torch.tensor([0, 0, 1, 1])
    assert _pairs(knn_graph(x, 1, batch)) == {(1, 0), (0, 1), (3, 2), (2, 3)}


# --------------------------------------------------------------------------------------------
# radius, radius_graph


def test_radius(flat_tc):
    radius = flat_tc.radius
    x = torch.tensor([[0.0], [1.0], [2.0], [3.0]])
    assert _pairs(radius(x, torch.tensor([[1.5]]), 1.0)) == {(0, 1), (0, 2)}
    # Strict: references at exactly r are out.
    assert _pairs(radius(x, torch.tensor([[1.0]]), 1.0)) == {(0, 1)}
    assert radius(x, torch.tensor([[1.5]]), 0.5).shape == (2, 0)
    x2 = torch.tensor([[-1.0, -1.0], [-1.0, 1.0], [1.0, -1.0], [1.0, 1.0]])
    y2 = torch.tensor([[-1.0, 0.0], [1.0, 0.0]])  # each at distance 1 from the two points of its example
    out = radius(x2, y2, 1.5, torch.tensor([0, 0, 1, 1]), torch.tensor([0, 1]))
    assert _pairs(out) == {(0, 0), (0, 1), (1, 2), (1, 3)}
    assert out[0].tolist() == sorted(out[0].tolist())


def test_radius_max_num_neighbors_and_ignore_same_index(flat_tc):
    radius = flat_tc.radius
    x = torch.zeros(6, 3)
    out = radius(x, x, 100.0, max_num_neighbors=1)
    assert out[0].tolist() == list(range(6))  # exactly one per query
    out = radius(x, x, 100.0, max_num_neighbors=2, ignore_same_index=True)
    # The self pair is skipped before counting: still two neighbours, none of them the query.
    assert out[0].tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert (out[0] != out[1]).all()


def test_radius_graph(flat_tc):
    radius_graph = flat_tc.radius_graph
    x = torch.tensor([[0.0], [1.0], [2.5]])
    assert _pairs(radius_graph(x, 1.5)) == {(0, 1), (1, 0)}  # |2.5 - 1| = 1.5 is not < 1.5
    assert _pairs(radius_graph(x, 1.6)) == {(0, 1), (1, 0), (1, 2), (2, 1)}
    assert _pairs(radius_graph(x, 1.5, loop=True)) == {(0, 1), (1, 0), (0, 0), (1, 1), (2, 2)}
    # max_num_neighbors = 1 with everything in range: in-degree exactly 1, also per batch.
    pts = torch.zeros(8, 2)
    batch = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    for b in (None, batch):
        for flow, centre in (("source_to_target", 1), ("target_to_source", 0)):
            out = radius_graph(pts, 100.0, b, max_num_neighbors=1, flow=flow)
            assert torch.bincount(out[centre], minlength=8).tolist() == [1] * 8
            if b is not None:
                assert (batch[out[0]] == batch[out[1]]).all()


# --------------------------------------------------------------------------------------------
# nearest, grid_cluster


def test_nearest(flat_tc):
    nearest = flat_tc.nearest
    x = torch.tensor([[-1.0, -1.0], [-1.0, 1.0], [1.0, 1.0], [1.0, -1.0],
                      [-2.0, -2.0], [-2.0, 2.0], [2.0, 2.0], [2.0, -2.0]])
    y = torch.tensor([[-1.0, 0.0], [1.0, 0.0], [-2.0, 0.0], [2.0, 0.0]])
    batch_x = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    batch_y = torch.tensor([0, 0, 1, 1])
    assert nearest(x, y, batch_x, batch_y).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert nearest(x, y).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    with pytest.raises(ValueError):  # batch_x not sorted
        nearest(x, y, torch.tensor([0, 0, 1, 0, 0, 1, 1, 1]), batch_y)
    with pytest.raises(ValueError):  # batch_y not sorted
        nearest(x, y, batch_x, torch.tensor([0, 1, 0, 1]))
    with pytest.raises(ValueError):  # example 1 has points in x but none in y
        nearest(x, y, batch_x, torch.tensor([0, 0, 0, 0]))


def test_grid_cluster(flat_tc):
    grid_cluster = flat_tc.grid_cluster
    pos = torch.tensor([[0.0, 0.0], [11.0, 9.0], [2.0, 8.0], [2.0, 2.0], [8.0, 3.0]])
    size = torch.tensor([5.0, 5.0])
    # 3 x 2 voxels, dimension 0 fastest: (0,0)->0, (2,1)->5, (0,1)->3, (0,0)->0, (1,0)->1.
    assert grid_cluster(pos, size).tolist() == [0, 5, 3, 0, 1]
    # start (-1, -1): 3 x 3 voxels; (12,10)/5 -> (2,2) -> 8.
    assert grid_cluster(pos, size, torch.tensor([-1.0, -1.0])).tolist() == [0, 8, 3, 0, 1]
    # end (20, 9): 5 voxels along dimension 0.
    out = grid_cluster(pos, size, torch.tensor([0.0, 0.0]), torch.tensor([20.0, 9.0]))
    assert out.tolist() == [0, 7, 5, 0, 1]


# --------------------------------------------------------------------------------------------
# graclus_cluster


def _assert_graclus_valid(row, col, cluster):
    n = cluster.numel()
    assert cluster.dtype == torch.int64 and cluster.min() >= 0
    assert (torch.bincount(cluster, minlength=n) <= 2).all()  # pairs at most
    assert (cluster <= torch.arange(n)).all()  # the smaller id of the pair
    for i in range(n):
        mates = [j for j in range(n) if j != i and cluster[j] == cluster[i]]
        for j in mates:  # a pair is an edge
            assert j in col[row == i].tolist()


GRACLUS_ROW = torch.tensor([0, 0, 1, 1, 1, 2, 2, 2, 3, 3])
GRACLUS_COL = torch.tensor([1, 2, 0, 2, 3, 0, 1, 3, 1, 2])
GRACLUS_WEIGHT = [1, 2, 1, 3, 2, 2, 3, 1, 2, 1]


@pytest.mark.parametrize("dtype", [None, torch.half, torch.bfloat16, torch.float, torch.double, torch.int,
                                   torch.long])
def test_graclus_valid_and_scripted(tc, dtype):
    weight = None if dtype is None else torch.tensor(GRACLUS_WEIGHT, dtype=dtype)
    for seed in range(5):
        torch.manual_seed(seed)
        _assert_graclus_valid(GRACLUS_ROW, GRACLUS_COL, tc.graclus_cluster(GRACLUS_ROW, GRACLUS_COL, weight))
    scripted = torch.jit.script(tc.graclus_cluster)
    _assert_graclus_valid(GRACLUS_ROW, GRACLUS_COL, scripted(GRACLUS_ROW, GRACLUS_COL, weight))


def test_graclus_weighted_follows_node_order(tc):
    # Path 0 - 1 - 2 with weights 1 and 5. Node 0 first: {0, 1}; node 1 or 2 first: {1, 2}.
    row = torch.tensor([0, 1, 1, 2])
    col = torch.tensor([1, 0, 2, 1])
    weight = torch.tensor([1.0, 1.0, 5.0, 5.0])
    for seed in range(8):
        torch.manual_seed(seed)
        first = torch.randperm(3).tolist()[0]  # upstream draws exactly this node order
        torch.manual_seed(seed)
        out = tc.graclus_cluster(row, col, weight).tolist()
        assert out == ([0, 0, 2] if first == 0 else [0, 1, 1])


def test_graclus_weighted_ties_take_the_last_edge_and_negative_weights_never_match(tc):
    # Star 0 - {1, 2, 3}, equal weights: when node 0 goes first it takes its last edge (to 3).
    row = torch.tensor([0, 0, 0, 1, 2, 3])
    col = torch.tensor([1, 2, 3, 0, 0, 0])
    weight = torch.full((6,), 2.0)
    seen = set()
    for seed in range(16):
        torch.manual_seed(seed)
        first = torch.randperm(4).tolist()[0]
        torch.manual_seed(seed)
        out = tc.graclus_cluster(row, col, weight).tolist()
        expected = [0, 1, 2, 0] if first == 0 else [0] + [0 if i == first else i for i in (1, 2, 3)]
        assert out == expected
        seen.add(first)
    assert 0 in seen
    out = tc.graclus_cluster(torch.tensor([0, 1]), torch.tensor([1, 0]), torch.tensor([-1.0, -1.0]))
    assert out.tolist() == [0, 1]


def test_graclus_unweighted_rng_stream(tc):
    # Edges shuffled by randperm(E), nodes visited by randperm(N), each node's edges by randperm(deg):
    # for a triangle plus an isolated node the first visited node of the triangle pairs with the
    # neighbour picked by its own edge permutation.
    row = torch.tensor([0, 0, 1, 1, 2, 2, 1])
    col = torch.tensor([1, 2, 0, 2, 0, 1, 1])  # the self-loop 1 -> 1 is dropped
    for seed in range(6):
        torch.manual_seed(seed)
        out = tc.graclus_cluster(row, col, num_nodes=4).tolist()
        assert out[3] == 3
        assert sorted(out[:3]) in ([0, 0, 1], [0, 0, 2], [0, 1, 1])
        torch.manual_seed(seed)
        assert tc.graclus_cluster(row, col, num_nodes=4).tolist() == out


# --------------------------------------------------------------------------------------------
# random_walk


RW_ROW = torch.tensor([0, 1, 1, 1, 2, 2, 3, 3, 4, 4])
RW_COL = torch.tensor([1, 0, 2, 3, 1, 4, 1, 4, 2, 3])


def _reference_uniform_walk(row, col, start, walk_length, num_nodes):
    """Upstream's CPU uniform sampler, step by step (one torch.rand((S, L)) draw)."""
    order = sorted(range(len(row)), key=lambda e: (row[e], col[e]))
    row = [row[e] for e in order]
    col = [col[e] for e in order]
    rowptr = [0] * (num_nodes + 1)
    for r in row:
        rowptr[r + 1] += 1
    for i in range(num_nodes):
        rowptr[i + 1] += rowptr[i]
    rand = torch.rand((len(start), walk_length))
    nodes, edges = [], []
    for n, s in enumerate(start):
        cur, walk, taken = s, [s], []
        for step in range(walk_length):
            deg = rowptr[cur + 1] - rowptr[cur]
            if deg == 0:
                e = -1
            else:
                f = torch.tensor(float(rand[n, step]), dtype=torch.float32) * torch.tensor(float(deg))
                e = rowptr[cur] + int(f)
                cur = col[e]
            walk.append(cur)
            taken.append(e)
        nodes.append(walk)
        edges.append(taken)
    return nodes, edges


def test_random_walk_uniform_matches_upstream_sampler(tc):
    start = torch.tensor([0, 1, 2, 3, 4, 4, 0])
    torch.manual_seed(11)
    nodes, edges = tc.random_walk(RW_ROW, RW_COL, start, 6, return_edge_indices=True)
    torch.manual_seed(11)
    exp_nodes, exp_edges = _reference_uniform_walk(RW_ROW.tolist(), RW_COL.tolist(), start.tolist(), 6, 5)
    assert nodes.tolist() == exp_nodes and edges.tolist() == exp_edges
    assert nodes.shape == (7, 7) and edges.shape == (7, 6)
    torch.manual_seed(11)
    assert tc.random_walk(RW_ROW, RW_COL, start, 6).tolist() == exp_nodes


@pytest.mark.parametrize("p,q", [(1.0, 1.0), (0.5, 2.0), (4.0, 0.25)])
def test_random_walk_follows_edges(tc, p, q):
    start = torch.tensor([0, 1, 2, 3, 4])
    torch.manual_seed(3)
    out = tc.random_walk(RW_ROW, RW_COL, start, 10, p, q)
    assert out[:, 0].tolist() == start.tolist()
    for n in range(start.numel()):
        for step in range(10):
            assert out[n, step + 1].item() in RW_COL[RW_ROW == out[n, step]].tolist()


def test_random_walk_deterministic_cases(tc):
    # A directed cycle 0 -> 1 -> 2 -> 0 (given unsorted): one choice per step.
    row, col = torch.tensor([2, 0, 1]), torch.tensor([0, 1, 2])
    nodes, edges = tc.random_walk(row, col, torch.tensor([0, 2]), 4, return_edge_indices=True)
    assert nodes.tolist() == [[0, 1, 2, 0, 1], [2, 0, 1, 2, 0]]
    assert edges.tolist() == [[0, 1, 2, 0], [2, 0, 1, 2]]  # indices after the coalesced sort
    # A node without out-edges stays put, with edge index -1.
    nodes, edges = tc.random_walk(torch.tensor([0]), torch.tensor([1]), torch.tensor([0, 1]), 3,
                                  num_nodes=2, return_edge_indices=True)
    assert nodes.tolist() == [[0, 1, 1, 1], [1, 1, 1, 1]]
    assert edges.tolist() == [[0, -1, -1], [-1, -1, -1]]
    # walk_length 0: the start nodes only.
    assert tc.random_walk(RW_ROW, RW_COL, torch.tensor([3]), 0).tolist() == [[3]]


def test_random_walk_node2vec_small_p_returns(tc):
    # p tiny: going back to the previous node is accepted with probability 1, anything else
    # with about 1e-9, so every walk on the path 0 - 1 - 2 from 1 alternates 1, a, 1, a, ...
    row, col = torch.tensor([0, 1, 1, 2]), torch.tensor([1, 0, 2, 1])
    torch.manual_seed(5)
    out = tc.random_walk(row, col, torch.ones(20, dtype=torch.long), 8, p=1e-9, q=1.0)
    assert (out[:, 0::2] == 1).all()
    assert (out[:, 1::2] == out[:, 1:2]).all()
    with pytest.raises(ValueError):
        tc.random_walk(row, col, torch.tensor([0]), 3, p=0.0)


def test_random_walk_scripted(tc):
    scripted = torch.jit.script(tc.random_walk)
    start = torch.tensor([0, 3])
    torch.manual_seed(2)
    a = scripted(RW_ROW, RW_COL, start, 5)
    torch.manual_seed(2)
    assert torch.equal(a, tc.random_walk(RW_ROW, RW_COL, start, 5))


def test_torch_ops_random_walk(tc):
    # PyG <= 2.7 (Node2Vec, dropout_path) calls the operator with a CSR rowptr directly.
    rowptr = torch.tensor([0, 1, 4, 6, 8, 10])
    start = torch.tensor([0, 1, 2, 3, 4])
    torch.manual_seed(9)
    nodes, edges = torch.ops.torch_cluster.random_walk(rowptr, RW_COL, start, 5, 1.0, 1.0)
    torch.manual_seed(9)
    exp_nodes, exp_edges = tc.random_walk(RW_ROW, RW_COL, start, 5, return_edge_indices=True)
    assert torch.equal(nodes, exp_nodes) and torch.equal(edges, exp_edges)


def test_neighbor_sampler_is_not_provided(tc):
    with pytest.raises(NotImplementedError):
        tc.neighbor_sampler(torch.tensor([0]), torch.tensor([0, 1]), 1.0)
