"""pcops.chamfer_distance (PyTorch3D 0.7.9 pytorch3d.loss.chamfer_distance semantics).

The reference below is written from the PEERS.md description (section 5.5), in float64 with
Python loops: for each valid point the nearest valid point of the other cloud by (distance,
index), squared L2 or L1 distance, rows past the length zero, weights per cloud, the normal term
1 - |cos| (or 1 - cos) with eps 1e-6, point reductions sum / mean (length clamped to 1) / max /
None, batch reductions sum / mean (N, or weights.sum(), or 1 when that is 0).
"""

from __future__ import annotations

import itertools
import sys
from types import SimpleNamespace

import pytest
import torch

import pcops
import pcops.compat as compat
from pcops import pytorch3d as p3d
from conftest import isolated_modules


def _rand(*shape, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(*shape, generator=g, dtype=torch.float64).to(dtype)


# ---------------------------------------------------------------------------------------------
# float64 reference


def _ref_direction(x, y, lx, ly, xn, yn, weights, norm, abs_cosine):
    """Per-point (N, P1) distances and normal terms, weights applied."""
    x, y = x.double(), y.double()
    n, p1, _ = x.shape
    dist = torch.zeros(n, p1, dtype=torch.float64)
    normal = torch.zeros(n, p1, dtype=torch.float64)
    for b in range(n):
        for i in range(int(lx[b])):
            best, best_j = None, None
            for j in range(int(ly[b])):
                diff = x[b, i] - y[b, j]
                d = float(diff.abs().sum()) if norm == 1 else float((diff * diff).sum())
                if best is None or d < best:
                    best, best_j = d, j
            dist[b, i] = 0.0 if best is None else best
            if xn is not None:
                a = xn[b, i].double()
                c = yn[b, best_j].double() if best_j is not None else torch.zeros_like(a)
                cos = float((a * c).sum() / torch.clamp(a.norm() * c.norm(), min=1e-6)) \
                    if best_j is not None else 0.0
                normal[b, i] = 1 - (abs(cos) if abs_cosine else cos)
    if weights is not None:
        dist = dist * weights.double()[:, None]
        normal = normal * weights.double()[:, None]
    return dist, normal


def _reference(x, y, lx=None, ly=None, xn=None, yn=None, weights=None, batch_reduction="mean",
               point_reduction="mean", norm=2, single_directional=False, abs_cosine=True):
    n = x.shape[0]
    lx = torch.full((n,), x.shape[1]) if lx is None else lx
    ly = torch.full((n,), y.shape[1]) if ly is None else ly
    with_normals = xn is not None and yn is not None
    dirs = [(x, y, lx, ly, xn, yn)]
    if not single_directional:
        dirs.append((y, x, ly, lx, yn, xn))
    parts = []
    for a, b, la, lb, na, nb in dirs:
        d, nrm = _ref_direction(a, b, la, lb, na, nb, weights, norm, abs_cosine)
        if point_reduction == "max":
            d = d.max(1).values if d.shape[1] else d.sum(1)
        elif point_reduction in ("sum", "mean"):
            d, nrm = d.sum(1), nrm.sum(1)
            if point_reduction == "mean":
                d, nrm = d / la.clamp(min=1), nrm / la.clamp(min=1)
        parts.append((d, nrm))
    if point_reduction is None:
        loss = tuple(p[0] for p in parts)
        ln = tuple(p[1] for p in parts) if with_normals else None
        return (loss[0], ln[0] if ln else None) if single_directional else (loss, ln)
    if point_reduction == "max":
        loss = parts[0][0] if single_directional else torch.maximum(parts[0][0], parts[1][0])
        ln = None
    else:
        loss = sum(p[0] for p in parts)
        ln = sum(p[1] for p in parts) if with_normals else None
    if batch_reduction is not None:
        loss = loss.sum()
        ln = ln.sum() if ln is not None else None
        if batch_reduction == "mean":
            div = max(n, 1) if weights is None else (float(weights.sum()) or 1.0)
            loss = loss / div
            ln = ln / div if ln is not None else None
    return loss, ln


def _close(got, want, tol):
    if want is None:
        assert got is None
        return
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            _close(g, w, tol)
        return
    assert got.shape == want.shape, (got.shape, want.shape)
    torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)


def _case(seed, dtype, n=3, p1=9, p2=7, d=3, ragged=True, normals=False):
    x = _rand(n, p1, d, seed=seed, dtype=dtype)
    y = _rand(n, p2, d, seed=seed + 1, dtype=dtype)
    lx = torch.tensor([p1, max(p1 - 4, 0), 0][:n] + [p1] * max(0, n - 3)) if ragged else None
    ly = torch.tensor([p2 - 2, p2, 0][:n] + [p2] * max(0, n - 3)) if ragged else None
    xn = _rand(n, p1, 3, seed=seed + 2, dtype=dtype) - 0.5 if normals else None
    yn = _rand(n, p2, 3, seed=seed + 3, dtype=dtype) - 0.5 if normals else None
    return x, y, lx, ly, xn, yn


# ---------------------------------------------------------------------------------------------
# Values


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm", [1, 2])
@pytest.mark.parametrize("ragged", [False, True])
def test_all_reductions(dtype, norm, ragged):
    x, y, lx, ly, xn, yn = _case(1, dtype, ragged=ragged, normals=True)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    weights = torch.tensor([0.5, 2.0, 1.0], dtype=dtype)
    for pr, br, single, w, with_normals, abs_cos in itertools.product(
        ["mean", "sum", "max", None], ["mean", "sum", None], [False, True], [None, weights],
        [False, True], [True, False],
    ):
        if pr is None and br is not None or pr == "max" and with_normals:
            continue
        kw = dict(x_lengths=lx, y_lengths=ly, weights=w, batch_reduction=br, point_reduction=pr,
                  norm=norm, single_directional=single, abs_cosine=abs_cos)
        nx, ny = (xn, yn) if with_normals else (None, None)
        got = pcops.chamfer_distance(x, y, x_normals=nx, y_normals=ny, **kw)
        want = _reference(x, y, lx, ly, nx, ny, w, br, pr, norm, single, abs_cos)
        _close(got[0], want[0], tol)
        _close(got[1], want[1], tol)
        dt = got[0][0].dtype if isinstance(got[0], tuple) else got[0].dtype
        assert dt == dtype


@pytest.mark.parametrize("d", [1, 2, 5, 8])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_any_dimension(d, dtype):
    x, y, lx, ly, _, _ = _case(5, dtype, d=d, p1=20, p2=17)
    for norm in (1, 2):
        got = pcops.chamfer_distance(x, y, lx, ly, norm=norm, point_reduction=None, batch_reduction=None)
        want = _reference(x, y, lx, ly, norm=norm, point_reduction=None, batch_reduction=None)
        _close(got[0], want[0], 1e-5 if dtype == torch.float32 else 1e-12)


def test_large_grid_cloud_matches_reference_nearest():
    """3-D float32 clouds big enough for pcops.knn's grid: per-point values equal a float32
    brute force (same arithmetic, so bitwise)."""
    x = _rand(2, 3000, 3, seed=11, dtype=torch.float32)
    y = _rand(2, 2500, 3, seed=12, dtype=torch.float32)
    got, _ = pcops.chamfer_distance(x, y, point_reduction=None, batch_reduction=None)
    for a, b, g in ((x, y, got[0]), (y, x, got[1])):
        d = ((a[:, :, None, 0] - b[:, None, :, 0]) ** 2 + (a[:, :, None, 1] - b[:, None, :, 1]) ** 2) \
            + (a[:, :, None, 2] - b[:, None, :, 2]) ** 2
        assert torch.equal(g, d.min(2).values)


def test_ties_pick_lowest_index_and_l1_subgradient():
    # y has two copies of the nearest point: the lowest index is selected, so only it gets a gradient.
    x = torch.tensor([[[0.0, 0.0]]], dtype=torch.float64, requires_grad=True)
    y = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [5.0, 5.0]]], dtype=torch.float64,
                     requires_grad=True)
    loss, _ = pcops.chamfer_distance(x, y, single_directional=True, batch_reduction="sum",
                                     point_reduction="sum")
    loss.backward()
    assert float(loss.detach()) == 1.0
    torch.testing.assert_close(x.grad, torch.tensor([[[-2.0, 0.0]]], dtype=torch.float64))
    torch.testing.assert_close(y.grad, torch.tensor([[[2.0, 0.0], [0, 0], [0, 0], [0, 0]]],
                                                    dtype=torch.float64))
    # L1 with equal coordinates: the query side's subgradient is -1, the reference side's +1.
    for dtype in (torch.float32, torch.float64):
        x = torch.tensor([[[1.0, 2.0]]], dtype=dtype, requires_grad=True)
        y = torch.tensor([[[1.0, 3.0]]], dtype=dtype, requires_grad=True)
        loss, _ = pcops.chamfer_distance(x, y, norm=1, point_reduction="sum", batch_reduction="sum")
        loss.backward()
        # x -> y: diff (0, -1) -> sign (-1, -1); y -> x: diff (0, 1) -> sign (-1, +1)
        torch.testing.assert_close(x.grad, torch.tensor([[[-1.0 + 1.0, -1.0 - 1.0]]], dtype=dtype))
        torch.testing.assert_close(y.grad, torch.tensor([[[1.0 - 1.0, 1.0 + 1.0]]], dtype=dtype))


def test_empty_clouds_and_zero_sized():
    x = _rand(2, 5, 3, seed=3)
    y = _rand(2, 4, 3, seed=4)
    lx, ly = torch.tensor([0, 5]), torch.tensor([4, 0])
    loss, _ = pcops.chamfer_distance(x, y, lx, ly, point_reduction=None, batch_reduction=None)
    want = _reference(x, y, lx, ly, point_reduction=None, batch_reduction=None)[0]
    _close(loss, want, 1e-12)
    assert float(loss[0].abs().sum() + loss[1].abs().sum()) == 0.0
    for pr in ("mean", "sum", "max"):
        got = pcops.chamfer_distance(x[:, :0], y[:, :0], point_reduction=pr, batch_reduction=None)[0]
        assert got.shape == (2,) and float(got.abs().sum()) == 0.0
    empty = pcops.chamfer_distance(x[:0], y[:0], batch_reduction="mean")[0]
    assert empty.shape == () and float(empty) == 0.0
    got = pcops.chamfer_distance(x, y[:, :0])[0]
    assert float(got) == 0.0
    # Normals with an empty y cloud: the neighbour normal is 0, cos 0, term 1 per valid x point.
    xn, yn = _rand(2, 5, 3, seed=5) - 0.5, _rand(2, 4, 3, seed=6) - 0.5
    got = pcops.chamfer_distance(x, y, lx, ly, xn, yn, point_reduction="sum", batch_reduction=None,
                                 single_directional=True)
    want = _reference(x, y, lx, ly, xn, yn, point_reduction="sum", batch_reduction=None,
                      single_directional=True)
    _close(got[1], want[1], 1e-12)


def test_zero_weights_quirk():
    x, y, _, _, xn, yn = _case(7, torch.float32, n=3, ragged=False, normals=True)
    x.requires_grad_(True)
    w = torch.zeros(3)
    for pr in ("mean", "sum"):
        loss, ln = pcops.chamfer_distance(x, y, x_normals=xn, y_normals=yn, weights=w,
                                          batch_reduction=None, point_reduction=pr)
        assert loss.shape == (3, 3) and ln.shape == (3, 3)  # upstream's broadcast QUIRK
        assert float(loss.detach().abs().sum()) == 0.0
    loss, ln = pcops.chamfer_distance(x, y, weights=w)  # without normals: zeros too (upstream)
    assert loss.shape == () and float(loss.detach()) == 0.0 and ln is not None and float(ln.detach()) == 0.0
    loss.backward()
    assert x.grad is not None and float(x.grad.abs().sum()) == 0.0


def test_pointclouds_like_inputs():
    x, y, lx, ly, xn, yn = _case(9, torch.float32, normals=True)

    def cloud(points, lengths, normals):
        return SimpleNamespace(points_padded=lambda: points, num_points_per_cloud=lambda: lengths,
                               normals_padded=lambda: normals)

    got = pcops.chamfer_distance(cloud(x, lx, xn), cloud(y, ly, yn))
    want = pcops.chamfer_distance(x, y, lx, ly, xn, yn)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    no_normals = SimpleNamespace(points_padded=lambda: y, num_points_per_cloud=lambda: ly)
    got = pcops.chamfer_distance(cloud(x, lx, None), no_normals)
    assert torch.equal(got[0], pcops.chamfer_distance(x, y, lx, ly)[0]) and got[1] is None


def test_half_precision_computed_in_float32():
    x, y, lx, ly, _, _ = _case(13, torch.float32)
    for dtype in (torch.float16, torch.bfloat16):
        kw = dict(point_reduction=None, batch_reduction=None)  # per-point: reductions run in dtype
        got = pcops.chamfer_distance(x.to(dtype), y.to(dtype), lx, ly, **kw)[0]
        want = pcops.chamfer_distance(x.to(dtype).float(), y.to(dtype).float(), lx, ly, **kw)[0]
        for g, w in zip(got, want):
            assert g.dtype == dtype and torch.equal(g, w.to(dtype))


# ---------------------------------------------------------------------------------------------
# Gradients


@pytest.mark.parametrize("norm", [1, 2])
@pytest.mark.parametrize("pr", ["mean", "sum", "max"])
def test_gradients_match_reference(norm, pr):
    """x and y gradients equal upstream's rules: 2 g (x - y_nn) (or g sign, 0 -> -1) on the
    query, the negative accumulated on each selected neighbour."""
    for dtype in (torch.float32, torch.float64):
        x, y, lx, ly, _, _ = _case(21, dtype, p1=12, p2=10)
        x.requires_grad_(True)
        y.requires_grad_(True)
        w = torch.tensor([1.0, 0.5, 3.0], dtype=dtype)
        loss, _ = pcops.chamfer_distance(x, y, lx, ly, weights=w, point_reduction=pr, norm=norm)
        loss.backward()
        xr = x.detach().double().requires_grad_(True)
        yr = y.detach().double().requires_grad_(True)
        ref, _ = _reference_autograd(xr, yr, lx, ly, w.double(), pr, norm)
        ref.backward()
        tol = 1e-5 if dtype == torch.float32 else 1e-12
        torch.testing.assert_close(x.grad.double(), xr.grad, rtol=tol, atol=tol)
        torch.testing.assert_close(y.grad.double(), yr.grad, rtol=tol, atol=tol)


def _reference_autograd(x, y, lx, ly, w, pr, norm):
    """Differentiable float64 reference with upstream's derivative rules (nearest found by loops)."""
    def direction(a, b, la, lb):
        rows = []
        for n in range(a.shape[0]):
            vals = []
            for i in range(a.shape[1]):
                if i >= int(la[n]) or int(lb[n]) == 0:
                    vals.append(a.new_zeros(()) * a[n, i, 0])
                    continue
                diffs = [(a[n, i] - b[n, j]).detach() for j in range(int(lb[n]))]
                ds = [float(t.abs().sum() if norm == 1 else (t * t).sum()) for t in diffs]
                j = min(range(len(ds)), key=lambda t: (ds[t], t))
                diff = a[n, i] - b[n, j]
                if norm == 2:
                    vals.append((diff * diff).sum())
                else:
                    vals.append((diff * torch.where(diff > 0, 1.0, -1.0).double().detach()).sum())
            rows.append(torch.stack(vals) * w[n] if vals else a.new_zeros(0))
        d = torch.stack(rows)
        if pr == "max":
            return d.max(1).values
        d = d.sum(1)
        return d / la.clamp(min=1) if pr == "mean" else d
    cx, cy = direction(x, y, lx, ly), direction(y, x, ly, lx)
    loss = torch.maximum(cx, cy) if pr == "max" else cx + cy
    return loss.sum() / w.sum(), None


@pytest.mark.parametrize("norm", [1, 2])
def test_gradcheck(norm):
    x, y, lx, ly, xn, yn = _case(31, torch.float64, n=2, p1=5, p2=4, normals=True)
    lx, ly = torch.tensor([5, 3]), torch.tensor([4, 2])
    args = [t.clone().requires_grad_(True) for t in (x, y, xn, yn)]

    def f(a, b, an, bn):
        loss, ln = pcops.chamfer_distance(a, b, lx, ly, an, bn, norm=norm, abs_cosine=False)
        return loss, ln

    assert torch.autograd.gradcheck(f, args)

    def g(a, b):
        return pcops.chamfer_distance(a, b, norm=norm, point_reduction="max", single_directional=True)[0]

    assert torch.autograd.gradcheck(g, args[:2])


def test_gradients_deterministic():
    """Many queries share a neighbour: the accumulation is bitwise run-to-run stable."""
    x = _rand(2, 4000, 3, seed=41, dtype=torch.float32)
    y = _rand(2, 50, 3, seed=42, dtype=torch.float32)
    grads = []
    for _ in range(3):
        a, b = x.clone().requires_grad_(True), y.clone().requires_grad_(True)
        pcops.chamfer_distance(a, b)[0].backward()
        grads.append((a.grad, b.grad))
    for ga, gb in grads[1:]:
        assert torch.equal(ga, grads[0][0]) and torch.equal(gb, grads[0][1])


def test_normals_gradients():
    x, y, lx, ly, xn, yn = _case(51, torch.float64, normals=True)
    xn.requires_grad_(True)
    yn.requires_grad_(True)
    _, ln = pcops.chamfer_distance(x, y, lx, ly, xn, yn, abs_cosine=False)
    ln.backward()
    assert float(xn.grad[2].abs().sum()) == 0.0  # the empty x cloud gets no normal gradient
    assert float(xn.grad[0].abs().sum()) > 0 and float(yn.grad[1].abs().sum()) > 0


# ---------------------------------------------------------------------------------------------
# Errors


def test_errors():
    x, y = _rand(2, 4, 3), _rand(2, 5, 3)
    with pytest.raises(ValueError, match="batch_reduction"):
        pcops.chamfer_distance(x, y, batch_reduction="max")
    with pytest.raises(ValueError, match="point_reduction"):
        pcops.chamfer_distance(x, y, point_reduction="median")
    with pytest.raises(ValueError, match="Batch reduction must be None"):
        pcops.chamfer_distance(x, y, point_reduction=None)
    with pytest.raises(ValueError, match="Support for 1 or 2 norm"):
        pcops.chamfer_distance(x, y, norm=3)
    with pytest.raises(ValueError, match="Normals must be None"):
        pcops.chamfer_distance(x, y, x_normals=x, y_normals=y, point_reduction="max")
    with pytest.raises(ValueError, match="weights must be of shape"):
        pcops.chamfer_distance(x, y, weights=torch.ones(3, dtype=torch.float64))
    with pytest.raises(ValueError, match="weights cannot be negative"):
        pcops.chamfer_distance(x, y, weights=torch.tensor([1.0, -1.0], dtype=torch.float64))
    with pytest.raises(ValueError, match="correct shape"):
        pcops.chamfer_distance(x, _rand(3, 5, 3))
    with pytest.raises(ValueError, match="correct shape"):
        pcops.chamfer_distance(x, _rand(2, 5, 2))
    with pytest.raises(ValueError, match="too long"):
        pcops.chamfer_distance(x, y, x_lengths=torch.tensor([5, 1]))
    with pytest.raises(ValueError, match="x_lengths"):
        pcops.chamfer_distance(x, y, x_lengths=torch.tensor([1]))
    with pytest.raises(ValueError, match="Pointclouds"):
        pcops.chamfer_distance([1, 2], y)
    with pytest.raises(ValueError, match=r"\(N, P, D\)"):
        pcops.chamfer_distance(x[0], y)
    with pytest.raises(TypeError):
        pcops.chamfer_distance(x, y.float())
    with pytest.raises(TypeError):
        pcops.chamfer_distance(x.long(), y.long())


# ---------------------------------------------------------------------------------------------
# The PyTorch3D stand-in


def test_pytorch3d_stand_in_function():
    x, y, lx, ly, xn, yn = _case(61, torch.float32, normals=True)
    got = p3d.chamfer_distance(x, y, lx, ly, xn, yn, point_reduction="sum", batch_reduction="sum",
                               abs_cosine=False)
    want = pcops.chamfer_distance(x, y, lx, ly, xn, yn, point_reduction="sum", batch_reduction="sum",
                                  abs_cosine=False)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.fixture
def clean():
    with isolated_modules("pytorch3d"):
        yield


def test_compat_pytorch3d_loss(clean):
    selection = {name: False for name in compat.REGISTRY}
    selection["pytorch3d"] = True
    installed = compat.install(**selection)
    assert set(installed) == {"pytorch3d"}
    import pytorch3d
    from pytorch3d.loss import chamfer_distance
    from pytorch3d.loss.chamfer import chamfer_distance as cd2

    assert chamfer_distance is cd2 is pytorch3d.loss.chamfer_distance
    assert compat.is_stand_in(pytorch3d.loss)
    x, y = _rand(2, 6, 3, seed=71, dtype=torch.float32), _rand(2, 5, 3, seed=72, dtype=torch.float32)
    assert torch.equal(chamfer_distance(x, y)[0], pcops.chamfer_distance(x, y)[0])
    compat.uninstall("pytorch3d")
    assert "pytorch3d.loss" not in sys.modules and "pytorch3d.loss.chamfer" not in sys.modules


# ---------------------------------------------------------------------------------------------
# The native nearest-neighbour operator and the device-independent helpers


def _brute_nn(x, y, lx, ly, norm):
    """The contract in torch ops: s in coordinate order in the input precision, NaN as +inf,
    argmin = lowest index."""
    n, p1, d = x.shape
    out = torch.full((n, p1), -1, dtype=torch.int64)
    for b in range(n):
        rows, cols = int(lx[b]), int(ly[b])
        if rows == 0 or cols == 0:
            continue
        acc = None
        for i in range(d):
            diff = x[b, :rows, i, None] - y[b, None, :cols, i]
            term = diff.abs() if norm == 1 else diff * diff
            acc = term if acc is None else acc + term
        out[b, :rows] = torch.argmin(torch.nan_to_num(acc, nan=float("inf")), dim=1)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("d", [1, 2, 3, 4, 7])
def test_nearest_neighbor_native(dtype, d):
    g = torch.Generator().manual_seed(d)
    for lattice in (False, True):
        x = torch.rand(3, 300, d, generator=g, dtype=torch.float64)
        y = torch.rand(3, 800, d, generator=g, dtype=torch.float64)
        if lattice:  # exact ties
            x, y = (x * 3).round(), (y * 3).round()
        x, y = x.to(dtype), y.to(dtype)
        x[0, 1, 0] = float("nan")
        y[0, 3, d - 1] = float("nan")
        y[1, 4, 0] = float("inf")
        lx, ly = torch.tensor([300, 7, 0]), torch.tensor([800, 0, 5])
        for norm in (1, 2):
            want = _brute_nn(x, y, lx, ly, norm)
            assert torch.equal(pcops.ops.nearest_neighbor.nearest_neighbor(x, y, lx, ly, norm), want)
            full = _brute_nn(x, y, torch.full((3,), 300), torch.full((3,), 800), norm)
            strided = y.transpose(1, 2).contiguous().transpose(1, 2)
            assert torch.equal(torch.ops.pcops.nearest_neighbor(x, strided, None, None, norm), full)


def test_nearest_neighbor_float64_not_rounded():
    """float64 runs in float64: two references that round to the same float32 are told apart."""
    x = torch.tensor([[[1.0]]], dtype=torch.float64)
    y = torch.tensor([[[1.0 + 2e-9], [1.0 + 1e-9]]], dtype=torch.float64)
    assert torch.ops.pcops.nearest_neighbor(x, y).tolist() == [[1]]
    assert torch.ops.pcops.nearest_neighbor(x.float(), y.float()).tolist() == [[0]]  # equal in float32


def test_nearest_neighbor_errors():
    x, y = _rand(2, 4, 3), _rand(2, 5, 3)
    with pytest.raises(ValueError, match="norm"):
        torch.ops.pcops.nearest_neighbor(x, y, None, None, 3)
    with pytest.raises(TypeError):
        torch.ops.pcops.nearest_neighbor(x, y.float())
    with pytest.raises(TypeError):
        torch.ops.pcops.nearest_neighbor(x.long(), y.long())
    with pytest.raises(ValueError, match="dimension"):
        torch.ops.pcops.nearest_neighbor(x, _rand(2, 5, 2))
    with pytest.raises(ValueError, match="batch"):
        torch.ops.pcops.nearest_neighbor(x, _rand(3, 5, 3))
    with pytest.raises(ValueError, match="x_lengths"):
        torch.ops.pcops.nearest_neighbor(x, y, torch.tensor([5, 1]))
    with pytest.raises(IndexError):
        torch.ops.pcops._gather_rows_backward(_rand(2, 4, 3), torch.tensor([[0, 1, 2, 9], [0, 0, 0, 0]]), 5)


def _written_order_sum(values):
    v = list(values)
    if not v:
        return 0.0
    while len(v) > 1:
        nxt = []
        for i in range(0, len(v), 32):
            s = v[i]
            for t in v[i + 1:i + 32]:
                s = s + t
            nxt.append(s)
        v = nxt
    return v[0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ordered_sum_written_order(dtype):
    g = torch.Generator().manual_seed(5)
    for length in (0, 1, 31, 32, 33, 1025, 40000):
        v = torch.randn(2, length, generator=g, dtype=torch.float64).to(dtype)
        got = torch.ops.pcops._ordered_sum(v)
        for r in range(2):
            want = _written_order_sum([t for t in v[r]])  # tensor arithmetic in dtype
            assert torch.equal(got[r], torch.as_tensor(want, dtype=dtype)), length


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ordered_norm_correctly_rounded(dtype):
    import math
    g = torch.Generator().manual_seed(7)
    lattice = (torch.randint(-8, 9, (500, 3), generator=g) / 4).to(dtype)
    gauss = torch.randn(500, 3, generator=g, dtype=torch.float64).to(dtype)
    for v in (lattice, gauss, gauss[:, :1], torch.empty(4, 0, dtype=dtype)):
        got = torch.ops.pcops._ordered_norm(v)
        assert got.shape == v.shape[:-1] and got.dtype == dtype
        for r in range(v.shape[0]):
            acc = torch.zeros((), dtype=dtype) if v.shape[1] == 0 else v[r, 0] * v[r, 0]
            for c in range(1, v.shape[1]):
                acc = acc + v[r, c] * v[r, c]
            # math.sqrt (float64) is correctly rounded; float32: the float64 root of a float32
            # value rounds once more to the correctly rounded float32 root.
            assert got[r].item() == torch.tensor(math.sqrt(acc.item()), dtype=dtype).item(), (r, v[r])
    assert torch.ops.pcops._ordered_norm(torch.tensor([[0.25, 0.25, 0.0]], dtype=torch.float64)).item() == math.sqrt(0.125)
    with pytest.raises(ValueError):
        torch.ops.pcops._ordered_norm(torch.tensor(1.0))


def test_reductions_use_the_written_order():
    """Reduced losses are the ordered sums of the per-point values (the CPU and CUDA order)."""
    x, y = _rand(2, 3000, 3, seed=81, dtype=torch.float32), _rand(2, 2000, 3, seed=82, dtype=torch.float32)
    (cx, cy), _ = pcops.chamfer_distance(x, y, point_reduction=None, batch_reduction=None)
    got, _ = pcops.chamfer_distance(x, y, point_reduction="sum", batch_reduction=None)
    assert torch.equal(got, torch.ops.pcops._ordered_sum(cx) + torch.ops.pcops._ordered_sum(cy))


def test_gather_rows_backward_ascending():
    g = torch.Generator().manual_seed(6)
    for dtype in (torch.float32, torch.float64):
        grad = torch.randn(2, 500, 3, generator=g, dtype=dtype)
        idx = torch.randint(-1, 20, (2, 500), generator=g)
        want = torch.zeros(2, 20, 3, dtype=dtype)
        for b in range(2):
            for p in range(500):
                if idx[b, p] >= 0:
                    want[b, idx[b, p]] = want[b, idx[b, p]] + grad[b, p]
        assert torch.equal(torch.ops.pcops._gather_rows_backward(grad, idx, 20), want)


def test_opcheck_new_operators():
    x, y = _rand(2, 30, 3, seed=91), _rand(2, 20, 3, seed=92)
    for args in ((x, y, None, None, 2), (x.float(), y.float(), torch.tensor([30, 3]), torch.tensor([0, 20]), 1)):
        torch.library.opcheck(torch.ops.pcops.nearest_neighbor.default, args)
    torch.library.opcheck(torch.ops.pcops._ordered_sum.default, (_rand(3, 100, seed=93),))
    torch.library.opcheck(torch.ops.pcops._gather_rows_backward.default,
                          (_rand(2, 30, 3, seed=94), torch.randint(-1, 20, (2, 30)), 20))


@pytest.mark.parametrize("norm", [1, 2])
def test_gradgradcheck(norm):
    x, y, lx, ly, xn, yn = _case(101, torch.float64, n=2, p1=5, p2=4, normals=True)
    lx, ly = torch.tensor([5, 3]), torch.tensor([4, 2])
    args = [t.clone().requires_grad_(True) for t in (x, y, xn, yn)]

    def f(a, b, an, bn):
        loss, ln = pcops.chamfer_distance(a, b, lx, ly, an, bn, norm=norm, abs_cosine=False)
        return loss + ln

    assert torch.autograd.gradgradcheck(f, args)


def test_float64_large_native():
    """float64 and L1 clouds beyond the old chunked brute force's comfort: exact nearest values."""
    x = _rand(1, 4000, 3, seed=111)
    y = _rand(1, 3000, 3, seed=112)
    for norm in (1, 2):
        (cx, _), _ = pcops.chamfer_distance(x, y, point_reduction=None, batch_reduction=None, norm=norm)
        idx = _brute_nn(x, y, torch.tensor([4000]), torch.tensor([3000]), norm)
        diff = x[0] - y[0, idx[0]]
        want = diff.abs() if norm == 1 else diff * diff
        want = (want[:, 0] + want[:, 1]) + want[:, 2]
        assert torch.equal(cx[0], want)
