"""The pointnet2_ops 3.0.0 stand-in (pcops.compat.pointnet2_ops).

Expected values are small hand-checked cases written from upstream's behaviour (PEERS.md
section 3): ties, first-hit padding, no-hit zeros, the near-origin FPS rule, int32 outputs,
three_nn with fewer than three known points, the zero weight gradient of three_interpolate and
the in-place mlps quirk. The gather / group / interpolation tests run on both paths the stand-in
has: pcops' native operators and the PyTorch indexing used
on devices without a native kernel. Two PointNet++ SSG networks and a Point-MAE ``Group`` module
written as upstream users write them run unchanged on the stand-ins.
"""

from __future__ import annotations

import importlib
import math
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import pcops
import pcops.compat as compat
import pcops.compat.pointnet2_ops as impl
from conftest import isolated_modules

INF = math.inf


def _ours(key: str) -> bool:
    return key.split(".")[0] in ("pointnet2_ops", "knn_cuda")


@pytest.fixture
def clean():
    with isolated_modules("pointnet2_ops", "knn_cuda"):
        yield


@pytest.fixture
def p2(clean):
    """The stand-in installed and imported by its upstream name."""
    installed = compat.install(torch_cluster=False)
    assert "pointnet2_ops" in installed
    import pointnet2_ops
    import pointnet2_ops.pointnet2_modules  # noqa: F401
    import pointnet2_ops.pointnet2_utils  # noqa: F401

    return pointnet2_ops


@pytest.fixture
def pu(p2):
    return p2.pointnet2_utils


NATIVE_OPS = ("gather_points", "group_points", "three_interpolate", "three_nn")


@pytest.fixture(params=["native", "torch"])
def path(request, monkeypatch):
    """Run the stand-in on pcops' native operators, or on its PyTorch indexing fallback."""
    if request.param == "native":
        assert all(hasattr(pcops, n) for n in NATIVE_OPS)
        assert all(impl._native(n, torch.device("cpu")) is not None for n in NATIVE_OPS)
    else:
        real = impl._native
        monkeypatch.setattr(impl, "_native", lambda n, device: None if n in NATIVE_OPS else real(n, device))
    return request.param


def t(x, dtype=torch.float32):
    return torch.tensor(x, dtype=dtype)


# --------------------------------------------------------------------------------------------
# Packaging


def test_module_layout(p2):
    import pointnet2_ops._ext as ext
    from pointnet2_ops import pointnet2_modules, pointnet2_utils
    from pointnet2_ops._version import __version__

    assert compat.is_stand_in(p2) and compat.is_stand_in(ext)
    assert p2.__version__ == __version__ and __version__.startswith("3.0.0+pcops")
    for name in ("furthest_point_sample", "gather_operation", "three_nn", "three_interpolate",
                 "grouping_operation", "ball_query", "QueryAndGroup", "GroupAll",
                 "FurthestPointSampling", "GatherOperation", "ThreeNN", "ThreeInterpolate",
                 "GroupingOperation", "BallQuery"):
        assert hasattr(pointnet2_utils, name), name
    for name in ("build_shared_mlp", "PointnetSAModuleMSG", "PointnetSAModule", "PointnetFPModule"):
        assert hasattr(pointnet2_modules, name), name
    assert pointnet2_modules.pointnet2_utils is pointnet2_utils
    for name in ("furthest_point_sampling", "gather_points", "gather_points_grad", "ball_query",
                 "group_points", "group_points_grad", "three_nn", "three_interpolate",
                 "three_interpolate_grad"):
        assert callable(getattr(ext, name)), name
    assert pointnet2_utils.furthest_point_sample == pointnet2_utils.FurthestPointSampling.apply


def test_registry_and_uninstall(clean):
    assert compat.REGISTRY["pointnet2_ops"].default and compat.REGISTRY["knn_cuda"].default
    mods = compat.install(**{n: n == "pointnet2_ops" for n, s in compat.REGISTRY.items() if s.default})
    assert set(mods) == {"pointnet2_ops"}
    assert "pointnet2_ops.pointnet2_utils" in sys.modules
    assert compat.uninstall() == ["pointnet2_ops"]
    assert not any(_ours(k) for k in sys.modules)


def test_real_package_is_left_alone(clean, tmp_path, monkeypatch):
    pkg = tmp_path / "pointnet2_ops"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("REAL = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    assert "pointnet2_ops" not in compat.install(torch_cluster=False)
    import pointnet2_ops

    assert pointnet2_ops.REAL
    assert compat.is_stand_in(compat.install(torch_cluster=False, force=True)["pointnet2_ops"])


# --------------------------------------------------------------------------------------------
# furthest_point_sample


def test_fps_near_origin_rule(pu):
    # p1 has x^2+y^2+z^2 = 1e-4 <= 1e-3: never chosen. After 0, 3, 2 every distance is 0 -> 0.
    xyz = t([[[1, 0, 0], [0.01, 0, 0], [-1, 0, 0], [0, 2, 0]]])
    out = pu.furthest_point_sample(xyz, 4)
    assert out.dtype == torch.int32 and out.tolist() == [[0, 3, 2, 0]]
    # pcops without the rule would take p1 (its distance 0.98 > 0)
    assert pcops.furthest_point_sample(xyz, 4).tolist() == [[0, 3, 2, 1]]


def test_fps_start_is_zero_even_near_origin(pu):
    xyz = t([[[0, 0, 0], [1, 0, 0], [2, 0, 0], [0, 0, 0.001]]])  # p0 and p3 near the origin
    assert pu.furthest_point_sample(xyz, 3).tolist() == [[0, 2, 1]]
    # Exhausted with p0 skipped: the stand-in repeats the smallest index of the tie (1);
    # upstream's thread-tree reduction gives [0, 2, 1, 2, 2] (documented difference).
    assert pu.furthest_point_sample(xyz, 5).tolist() == [[0, 2, 1, 1, 1]]


def test_fps_ties(pu):
    # 1 and 3 tie at distance^2 5: both the stand-in and upstream (4 threads, thread 1 wins
    # against thread 3 in the reduction) take 1.
    xyz = t([[[2, 0, 0], [0, 1, 0], [0.5, 0, 0], [0, -1, 0]]])
    assert pu.furthest_point_sample(xyz, 4).tolist() == [[0, 1, 3, 2]]
    # 1 and 2 tie: the stand-in takes the smaller index (upstream would take 2, thread 2 beating
    # thread 1 in its reduction; documented difference).
    xyz = t([[[1, 0, 0], [0, 1, 0], [0, -1, 0], [-1, 0, 0]]])
    assert pu.furthest_point_sample(xyz, 4).tolist() == [[0, 3, 1, 2]]


def test_fps_batch_and_no_grad(pu):
    g = torch.Generator().manual_seed(0)
    xyz = (torch.rand(3, 64, 3, generator=g) + 0.1).requires_grad_()
    out = pu.furthest_point_sample(xyz, 16)
    assert out.shape == (3, 16) and out.dtype == torch.int32 and not out.requires_grad
    ref = pcops.furthest_point_sample(xyz.detach(), 16, skip_near_origin=True)
    assert torch.equal(out.long(), ref)
    assert out[:, 0].tolist() == [0, 0, 0] and all(len(set(r)) == 16 for r in out.tolist())


def test_fps_bad_input(pu):
    with pytest.raises(ValueError):
        pu.furthest_point_sample(torch.rand(10, 3), 4)
    with pytest.raises(TypeError):
        pu.furthest_point_sample(torch.rand(1, 10, 3, dtype=torch.float64), 4)
    with pytest.raises(ValueError):
        pu.furthest_point_sample(torch.rand(1, 10, 2), 4)  # the near-origin rule needs 3-D
    with pytest.raises(ValueError):
        pu.furthest_point_sample(torch.rand(1, 10, 3), -1)


def test_fps_empty_batch(pu):
    assert pu.furthest_point_sample(torch.rand(0, 10, 3), 4).shape == (0, 4)


# --------------------------------------------------------------------------------------------
# gather_operation, grouping_operation


def test_gather_operation(pu, path):
    feats = t([[[0, 1, 2, 3], [10, 11, 12, 13]]]).requires_grad_()
    out = pu.gather_operation(feats, t([[3, 0, 3]], torch.int32))
    assert out.tolist() == [[[3, 0, 3], [13, 10, 13]]] and out.dtype == torch.float32
    out.sum().backward()
    assert feats.grad.tolist() == [[[1, 0, 0, 2], [1, 0, 0, 2]]]
    assert torch.equal(pu.gather_operation(feats.detach(), t([[3, 0, 3]], torch.int64)), out.detach())


def test_gather_operation_gradient_weights(pu, path):
    feats = t([[[0, 1, 2], [5, 6, 7]]]).requires_grad_()
    out = pu.gather_operation(feats, t([[2, 2, 1]], torch.int32))
    out.backward(t([[[1, 2, 4], [8, 16, 32]]]))
    assert feats.grad.tolist() == [[[0, 4, 3], [0, 32, 24]]]


def test_grouping_operation(pu, path):
    feats = t([[[0, 1, 2, 3], [10, 11, 12, 13]]]).requires_grad_()
    idx = t([[[0, 0, 3], [1, 2, 1]]], torch.int32)
    out = pu.grouping_operation(feats, idx)
    assert out.shape == (1, 2, 2, 3)
    assert out.tolist() == [[[[0, 0, 3], [1, 2, 1]], [[10, 10, 13], [11, 12, 11]]]]
    out.sum().backward()
    assert feats.grad.tolist() == [[[2, 2, 1, 1], [2, 2, 1, 1]]]


def test_index_dtype_and_shape_errors(pu, path):
    feats = torch.rand(1, 2, 4)
    with pytest.raises(TypeError):
        pu.gather_operation(feats, t([[0, 1]]))  # float indices
    with pytest.raises(ValueError):
        pu.gather_operation(feats, t([0, 1], torch.int32))
    with pytest.raises(ValueError):
        pu.grouping_operation(feats, t([[0, 1]], torch.int32))
    with pytest.raises(ValueError):
        pu.three_interpolate(feats, t([[0, 1, 2]], torch.int32), torch.rand(1, 3))


def test_ext_grad_entry_points(p2, path):
    from pointnet2_ops import _ext

    idx = t([[2, 2, 1]], torch.int32)
    g = t([[[1, 2, 4]]])
    assert _ext.gather_points_grad(g, idx, 3).tolist() == [[[0, 4, 3]]]
    gidx = t([[[0, 0], [3, 1]]], torch.int32)
    assert _ext.group_points_grad(t([[[[1, 2], [4, 8]]]]), gidx, 4).tolist() == [[[3, 8, 0, 4]]]
    w = t([[[0.5, 0.25, 0.25]]])
    grad = _ext.three_interpolate_grad(t([[[4]]]), t([[[0, 1, 0]]], torch.int32), w, 3)
    assert grad.tolist() == [[[3, 1, 0]]]
    assert _ext.gather_points(t([[[7, 8, 9]]]), idx).tolist() == [[[9, 9, 8]]]


def test_native_and_fallback_agree(pu, monkeypatch):
    """pcops' native operators and the PyTorch indexing path give the same values and gradients."""
    assert all(hasattr(pcops, n) for n in NATIVE_OPS)
    g = torch.Generator().manual_seed(9)
    unknown, known = torch.rand(2, 50, 3, generator=g), torch.rand(2, 20, 3, generator=g)
    feats = torch.rand(2, 6, 20, generator=g)
    gidx = torch.randint(0, 20, (2, 7), generator=g, dtype=torch.int32)
    qidx = torch.randint(0, 20, (2, 7, 5), generator=g, dtype=torch.int32)
    w = torch.rand(2, 50, 3, generator=g)

    def run():
        f = feats.clone().requires_grad_()
        dist, idx = pu.three_nn(unknown, known)
        outs = [dist, idx, pu.gather_operation(f, gidx), pu.grouping_operation(f, qidx),
                pu.three_interpolate(f, idx, w)]
        sum((o * torch.arange(o.numel()).reshape(o.shape).float()).sum() for o in outs[2:]).backward()
        return [o.detach() for o in outs] + [f.grad]

    native = run()
    real = impl._native
    monkeypatch.setattr(impl, "_native", lambda n, device: None if n in NATIVE_OPS else real(n, device))
    fallback = run()
    for a, b in zip(native, fallback):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    assert torch.equal(native[1], fallback[1]) and torch.equal(native[2], fallback[2])


# --------------------------------------------------------------------------------------------
# three_nn, three_interpolate


KNOWN = [[0, 0, 0], [5, 0, 0], [1, 0, 0], [0, 0, 0], [0, 0, 0]]


def test_three_nn_ties_and_sqrt(pu, path):
    unknown = t([[[0, 0, 0], [3, 0, 0], [0, 3, 4]]])
    dist, idx = pu.three_nn(unknown, t([KNOWN]))
    assert idx.dtype == torch.int32 and dist.dtype == torch.float32
    assert idx.tolist() == [[[0, 3, 4], [1, 2, 0], [0, 3, 4]]]  # equal distances: lower index first
    assert dist.tolist() == [[[0, 0, 0], [2, 2, 3], [5, 5, 5]]]  # Euclidean, not squared
    assert not dist.requires_grad and not idx.requires_grad


def test_three_nn_fewer_than_three_known(pu, path):
    unknown = t([[[0, 0, 0], [0, 3, 4]]])
    dist, idx = pu.three_nn(unknown, t([[[1, 0, 0], [0, 0, 0]]]))
    assert idx.tolist() == [[[1, 0, 0], [1, 0, 0]]]
    assert dist[0, 0].tolist() == [0, 1, INF] and dist[0, 1, 2].item() == INF
    dist, idx = pu.three_nn(unknown, t([[[0, 0, 0]]]))
    assert idx.tolist() == [[[0, 0, 0]] * 2] and dist.tolist() == [[[0, INF, INF], [5, INF, INF]]]
    dist, idx = pu.three_nn(unknown, torch.zeros(1, 0, 3))
    assert idx.tolist() == [[[0, 0, 0]] * 2] and dist.tolist() == [[[INF] * 3] * 2]


def test_ext_three_nn_returns_squared(p2, path):
    from pointnet2_ops import _ext

    dist2, idx = _ext.three_nn(t([[[3, 0, 0]]]), t([KNOWN]))
    assert dist2.tolist() == [[[4, 4, 9]]] and idx.tolist() == [[[1, 2, 0]]] and idx.dtype == torch.int32
    dist2, idx = _ext.three_nn(t([[[3, 0, 0]]]), t([[[1, 0, 0]]]))
    assert dist2.tolist() == [[[4, INF, INF]]] and idx.tolist() == [[[0, 0, 0]]]


def test_three_nn_random_against_brute_force(pu, path):
    g = torch.Generator().manual_seed(3)
    unknown, known = torch.rand(2, 40, 3, generator=g), torch.rand(2, 25, 3, generator=g)
    dist, idx = pu.three_nn(unknown, known)
    d = torch.cdist(unknown.double(), known.double())
    ref_d, ref_i = d.topk(3, dim=2, largest=False)
    assert torch.equal(idx.long(), ref_i)
    torch.testing.assert_close(dist.double(), ref_d, rtol=1e-6, atol=1e-7)


def test_three_interpolate_values_and_zero_weight_gradient(pu, path):
    feats = t([[[1, 2, 3, 4], [10, 20, 30, 40]]]).requires_grad_()
    idx = t([[[0, 1, 3], [2, 2, 2]]], torch.int32)
    weight = t([[[0.5, 0.25, 0.25], [1, 0, 0]]]).requires_grad_()
    out = pu.three_interpolate(feats, idx, weight)
    assert out.shape == (1, 2, 2) and out.tolist() == [[[2, 3], [20, 30]]]
    out.sum().backward()
    assert feats.grad.tolist() == [[[0.5, 0.25, 1, 0.25]] * 2]
    assert weight.grad is not None and torch.equal(weight.grad, torch.zeros_like(weight))  # upstream quirk


def test_three_interpolate_slot_order(pu, path):
    # ((1e8 * 1 + 1 * 1) + (-1e8) * 1) in float32 is 0, not 1: slots are summed t = 0, 1, 2
    feats = t([[[1e8, 1, -1e8]]])
    out = pu.three_interpolate(feats, t([[[0, 1, 2]]], torch.int32), t([[[1, 1, 1]]]))
    assert out.item() == 0.0


# --------------------------------------------------------------------------------------------
# ball_query, QueryAndGroup, GroupAll


XYZ = [[0, 0, 0], [0.5, 0, 0], [2, 0, 0], [0.3, 0, 0], [0.1, 0, 0]]


def test_ball_query_padding_rules(pu):
    new_xyz = t([[[0, 0, 0], [2, 0, 0], [10, 0, 0], [1.5, 0, 0], [0.5, 0, 0]]])
    out = pu.ball_query(1.0, 5, t([XYZ]), new_xyz)
    assert out.dtype == torch.int32 and out.shape == (1, 5, 5)
    assert out[0, 0].tolist() == [0, 1, 3, 4, 0]  # index order (not by distance), then the first hit
    assert out[0, 1].tolist() == [2] * 5  # first hit repeated
    assert out[0, 2].tolist() == [0] * 5  # no hit: zeros
    assert out[0, 3].tolist() == [2] * 5  # d = 1 = r exactly is outside (strict d^2 < r^2)
    assert out[0, 4].tolist() == [0, 1, 3, 4, 0]


def test_ball_query_first_k_in_index_order(pu):
    out = pu.ball_query(1.0, 2, t([XYZ]), t([[[0, 0, 0]]]))
    assert out.tolist() == [[[0, 1]]]  # p4 (0.1 away) is nearer than p1 but comes later
    out = pu.ball_query(0.25, 3, t([XYZ]), t([[[0.5, 0, 0]]]))
    assert out.tolist() == [[[1, 3, 1]]]  # p1, p3 (0.2 away), then the first hit again


def test_ball_query_radius_zero_and_errors(pu):
    assert pu.ball_query(0.0, 3, t([XYZ]), t([[[0, 0, 0]]])).tolist() == [[[0, 0, 0]]]
    assert pu.ball_query(1.0, 0, t([XYZ]), t([[[0, 0, 0]]])).shape == (1, 1, 0)
    with pytest.raises(ValueError):
        pu.ball_query(-1.0, 3, t([XYZ]), t([[[0, 0, 0]]]))
    with pytest.raises(ValueError):
        pu.ball_query(1.0, 3, t([XYZ]), t([[0, 0, 0]]))


def test_ext_ball_query_argument_order(p2):
    from pointnet2_ops import _ext

    out = _ext.ball_query(t([[[2, 0, 0]]]), t([XYZ]), 1.0, 3)  # new_xyz first
    assert out.tolist() == [[[2, 2, 2]]] and out.dtype == torch.int32
    pts = t([[[1, 0, 0], [0.01, 0, 0], [-1, 0, 0], [0, 2, 0]]])
    assert _ext.furthest_point_sampling(pts, 4).tolist() == [[0, 3, 2, 0]]


def test_query_and_group(pu, path):
    xyz = t([XYZ]).requires_grad_()
    new_xyz = t([[[2, 0, 0], [0.5, 0, 0]]]).requires_grad_()
    feats = t([[[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]]).requires_grad_()
    out = pu.QueryAndGroup(0.25, 3)(xyz, new_xyz, feats)
    assert out.shape == (1, 5, 2, 3)
    # relative xyz first (not divided by the radius), then the features
    assert out[0, :3, 0].tolist() == [[0] * 3, [0] * 3, [0] * 3]
    assert out[0, 3:, 0].tolist() == [[2] * 3, [7] * 3]
    assert out[0, 3:, 1].tolist() == [[1, 3, 1], [6, 8, 6]]
    out.sum().backward()
    assert new_xyz.grad.tolist() == [[[-3, -3, -3], [-3, -3, -3]]]
    assert xyz.grad.tolist() == [[[0] * 3, [2] * 3, [3] * 3, [1] * 3, [0] * 3]]
    assert feats.grad.tolist() == [[[0, 2, 3, 1, 0], [0, 2, 3, 1, 0]]]

    rel = pu.QueryAndGroup(1.0, 2)(t([XYZ]), t([[[0.5, 0, 0]]]))
    assert rel.shape == (1, 3, 1, 2) and rel[0, 0, 0].tolist() == [-0.5, 0.0]
    only = pu.QueryAndGroup(1.0, 2, use_xyz=False)(t([XYZ]), t([[[0.5, 0, 0]]]), feats.detach())
    assert only.tolist() == [[[[0, 1]], [[5, 6]]]]
    with pytest.raises(AssertionError):
        pu.QueryAndGroup(1.0, 2, use_xyz=False)(t([XYZ]), t([[[0.5, 0, 0]]]))


def test_group_all(pu):
    xyz = t([[[1, 2, 3], [4, 5, 6]]])
    feats = t([[[7, 8]]])
    out = pu.GroupAll()(xyz, None, feats)
    assert out.shape == (1, 4, 1, 2) and out.tolist() == [[[[1, 4]], [[2, 5]], [[3, 6]], [[7, 8]]]]
    assert pu.GroupAll(use_xyz=False)(xyz, None, feats).tolist() == [[[[7, 8]]]]
    assert pu.GroupAll(use_xyz=False)(xyz, xyz, None).shape == (1, 3, 1, 2)  # xyz whatever use_xyz says


def test_trace_query_and_group(pu, path):
    g = torch.Generator().manual_seed(1)
    xyz, new_xyz = torch.rand(2, 32, 3, generator=g), torch.rand(2, 8, 3, generator=g)
    feats = torch.rand(2, 4, 32, generator=g)
    qg = pu.QueryAndGroup(0.4, 6)
    traced = torch.jit.trace(qg, (xyz, new_xyz, feats), check_trace=False)
    assert torch.equal(traced(xyz, new_xyz, feats), qg(xyz, new_xyz, feats))


# --------------------------------------------------------------------------------------------
# pointnet2_modules


def test_build_shared_mlp(p2):
    from pointnet2_ops.pointnet2_modules import build_shared_mlp

    mlp = build_shared_mlp([3, 8, 16])
    kinds = [type(m) for m in mlp]
    assert kinds == [nn.Conv2d, nn.BatchNorm2d, nn.ReLU] * 2
    assert mlp[0].bias is None and mlp[0].kernel_size == (1, 1) and mlp[2].inplace
    plain = build_shared_mlp([3, 8], bn=False)
    assert [type(m) for m in plain] == [nn.Conv2d, nn.ReLU] and plain[0].bias is not None


def test_sa_msg_mutates_mlps_in_place(p2, path):
    from pointnet2_ops.pointnet2_modules import PointnetSAModule, PointnetSAModuleMSG

    mlps = [[2, 8], [2, 16]]
    sa = PointnetSAModuleMSG(npoint=4, radii=[0.3, 0.6], nsamples=[4, 8], mlps=mlps)
    assert mlps == [[5, 8], [5, 16]]  # upstream's quirk
    g = torch.Generator().manual_seed(2)
    xyz, feats = torch.rand(2, 16, 3, generator=g) + 0.1, torch.rand(2, 2, 16, generator=g)
    new_xyz, new_feats = sa(xyz, feats)
    fps = pcops.furthest_point_sample(xyz, 4, skip_near_origin=True)
    assert torch.equal(new_xyz, torch.stack([xyz[b, fps[b]] for b in range(2)]))
    assert new_feats.shape == (2, 24, 4)
    spec = [2, 8]
    PointnetSAModule(mlp=spec, npoint=4, radius=0.3, nsample=4)
    assert spec == [5, 8]
    spec = [2, 8]
    PointnetSAModule(mlp=spec, npoint=4, radius=0.3, nsample=4, use_xyz=False)
    assert spec == [2, 8]
    new_xyz, glob = PointnetSAModule(mlp=[2, 8])(xyz, feats)  # GroupAll
    assert new_xyz is None and glob.shape == (2, 8, 1)


def test_fp_module(p2, path):
    from pointnet2_ops.pointnet2_modules import PointnetFPModule
    from pointnet2_ops.pointnet2_utils import three_interpolate, three_nn

    g = torch.Generator().manual_seed(4)
    unknown = torch.rand(2, 10, 3, generator=g).requires_grad_()
    known = torch.rand(2, 5, 3, generator=g).requires_grad_()
    uf, kf = torch.rand(2, 3, 10, generator=g), torch.rand(2, 4, 5, generator=g).requires_grad_()
    fp = PointnetFPModule([7, 6], bn=False)
    out = fp(unknown, known, uf, kf)
    assert out.shape == (2, 6, 10)
    dist, idx = three_nn(unknown, known)
    w = 1.0 / (dist + 1e-8)
    w = w / w.sum(dim=2, keepdim=True)
    ref = fp.mlp(torch.cat([three_interpolate(kf, idx, w), uf], dim=1).unsqueeze(-1)).squeeze(-1)
    assert torch.equal(out, ref)
    out.sum().backward()
    assert kf.grad is not None and unknown.grad is None and known.grad is None  # no path to xyz
    # known=None broadcasts known_feats (upstream raises TypeError building the size)
    assert PointnetFPModule([4, 6], bn=False)(unknown, None, None, kf[:, :, :1]).shape == (2, 6, 10)


# --------------------------------------------------------------------------------------------
# Unchanged user code: PointNet++ SSG classification and segmentation (the upstream model
# code, scaled down), trained for 5 Adam steps on CPU


def _break_up_pc(pc):
    xyz = pc[..., 0:3].contiguous()
    features = pc[..., 3:].transpose(1, 2).contiguous() if pc.size(-1) > 3 else None
    return xyz, features


class SSGCls(nn.Module):
    def __init__(self, num_classes=5):
        super().__init__()
        from pointnet2_ops.pointnet2_modules import PointnetSAModule

        self.SA_modules = nn.ModuleList()
        self.SA_modules.append(
            PointnetSAModule(npoint=64, radius=0.2, nsample=16, mlp=[3, 16, 16, 32], use_xyz=True)
        )
        self.SA_modules.append(
            PointnetSAModule(npoint=16, radius=0.4, nsample=16, mlp=[32, 32, 32, 64], use_xyz=True)
        )
        self.SA_modules.append(PointnetSAModule(mlp=[64, 64, 128], use_xyz=True))
        self.fc_layer = nn.Sequential(
            nn.Linear(128, 64, bias=False), nn.BatchNorm1d(64), nn.ReLU(True),
            nn.Linear(64, 32, bias=False), nn.BatchNorm1d(32), nn.ReLU(True), nn.Dropout(0.5),
            nn.Linear(32, num_classes),
        )

    def forward(self, pointcloud):
        xyz, features = _break_up_pc(pointcloud)
        for module in self.SA_modules:
            xyz, features = module(xyz, features)
        return self.fc_layer(features.squeeze(-1))


class SSGSeg(nn.Module):
    def __init__(self, num_classes=4, c_in=6):
        super().__init__()
        from pointnet2_ops.pointnet2_modules import PointnetFPModule, PointnetSAModule

        self.SA_modules = nn.ModuleList()
        for npoint, radius, mlp in ((64, 0.1, [c_in, 16, 16, 32]), (32, 0.2, [32, 32, 32, 64]),
                                    (16, 0.4, [64, 64, 64, 64]), (4, 0.8, [64, 64, 64, 128])):
            self.SA_modules.append(
                PointnetSAModule(npoint=npoint, radius=radius, nsample=8, mlp=mlp, use_xyz=True)
            )
        self.FP_modules = nn.ModuleList()
        self.FP_modules.append(PointnetFPModule(mlp=[32 + c_in, 32, 32, 32]))
        self.FP_modules.append(PointnetFPModule(mlp=[64 + 32, 64, 32]))
        self.FP_modules.append(PointnetFPModule(mlp=[64 + 64, 64, 64]))
        self.FP_modules.append(PointnetFPModule(mlp=[128 + 64, 64, 64]))
        self.fc_lyaer = nn.Sequential(
            nn.Conv1d(32, 32, kernel_size=1, bias=False), nn.BatchNorm1d(32), nn.ReLU(True), nn.Dropout(0.5),
            nn.Conv1d(32, num_classes, kernel_size=1),
        )

    def forward(self, pointcloud):
        xyz, features = _break_up_pc(pointcloud)
        l_xyz, l_features = [xyz], [features]
        for i in range(len(self.SA_modules)):
            li_xyz, li_features = self.SA_modules[i](l_xyz[i], l_features[i])
            l_xyz.append(li_xyz)
            l_features.append(li_features)
        for i in range(-1, -(len(self.FP_modules) + 1), -1):
            l_features[i - 1] = self.FP_modules[i](l_xyz[i - 1], l_xyz[i], l_features[i - 1], l_features[i])
        return self.fc_lyaer(l_features[0])


def _train(model, pc, labels, steps=5):
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(model(pc), labels)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("kind", ["cls", "seg"])
def test_pointnet2_ssg_trains(p2, path, kind):
    torch.manual_seed(0)
    n = 256
    pc = torch.rand(4, n, 6 if kind == "cls" else 9)
    if kind == "cls":
        model, labels = SSGCls(), torch.tensor([0, 1, 2, 3])
    else:
        model, labels = SSGSeg(), torch.randint(0, 4, (4, n))
    losses = _train(model, pc, labels)
    assert all(math.isfinite(x) for x in losses), losses
    assert losses[-1] < losses[0], losses
    params = [p for p in model.parameters() if p.requires_grad]
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in params)


# --------------------------------------------------------------------------------------------
# Unchanged user code: Point-MAE's Group (pointnet2_ops FPS + knn_cuda KNN, transpose_mode=True)


def _point_mae_group(num_group, group_size):
    from knn_cuda import KNN
    from pointnet2_ops import pointnet2_utils

    def fps(data, number):
        fps_idx = pointnet2_utils.furthest_point_sample(data, number)
        fps_data = pointnet2_utils.gather_operation(
            data.transpose(1, 2).contiguous(), fps_idx
        ).transpose(1, 2).contiguous()
        return fps_data

    class Group(nn.Module):
        def __init__(self, num_group, group_size):
            super().__init__()
            self.num_group = num_group
            self.group_size = group_size
            self.knn = KNN(k=self.group_size, transpose_mode=True)

        def forward(self, xyz):
            batch_size, num_points, _ = xyz.shape
            center = fps(xyz, self.num_group)  # B G 3
            _, idx = self.knn(xyz, center)  # B G M
            assert idx.size(1) == self.num_group
            assert idx.size(2) == self.group_size
            idx_base = torch.arange(0, batch_size, device=xyz.device).view(-1, 1, 1) * num_points
            idx = idx + idx_base
            idx = idx.view(-1)
            neighborhood = xyz.view(batch_size * num_points, -1)[idx, :]
            neighborhood = neighborhood.view(batch_size, self.num_group, self.group_size, 3).contiguous()
            neighborhood = neighborhood - center.unsqueeze(2)
            return neighborhood, center

    return Group(num_group, group_size)


def test_point_mae_group(clean, path):
    compat.install(torch_cluster=False)
    g = torch.Generator().manual_seed(7)
    xyz = torch.rand(2, 128, 3, generator=g) * 2 - 1
    group = _point_mae_group(16, 8)
    neighborhood, center = group(xyz)
    assert neighborhood.shape == (2, 16, 8, 3) and center.shape == (2, 16, 3)
    fps = pcops.furthest_point_sample(xyz, 16, skip_near_origin=True)
    for b in range(2):
        assert torch.equal(center[b], xyz[b, fps[b]])
        d = torch.cdist(center[b].double(), xyz[b].double())
        nn_idx = d.topk(8, dim=1, largest=False).indices
        assert torch.equal(neighborhood[b], xyz[b][nn_idx] - center[b].unsqueeze(1))
    assert torch.equal(neighborhood[:, :, 0], torch.zeros(2, 16, 3))  # each centre is its own nearest


def test_point_mae_group_gradient_reaches_points(clean, path):
    compat.install(torch_cluster=False)
    xyz = (torch.rand(1, 64, 3, generator=torch.Generator().manual_seed(8)) + 0.1).requires_grad_()
    neighborhood, center = _point_mae_group(8, 4)(xyz)
    (neighborhood.sum() + center.sum()).backward()
    assert xyz.grad is not None and torch.isfinite(xyz.grad).all()
