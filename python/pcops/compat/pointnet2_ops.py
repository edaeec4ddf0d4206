"""Stand-in for ``pointnet2_ops`` 3.0.0 (erikwijmans/Pointnet2_PyTorch, ``pointnet2_ops_lib/``).

Module layout as upstream: ``pointnet2_ops`` (imports both submodules, ``__version__``),
``pointnet2_ops.pointnet2_utils`` (the autograd functions, ``QueryAndGroup``, ``GroupAll``),
``pointnet2_ops.pointnet2_modules`` (``build_shared_mlp``, ``PointnetSAModuleMSG``,
``PointnetSAModule``, ``PointnetFPModule``), ``pointnet2_ops._ext`` (the pybind entry points,
same names and argument order) and ``pointnet2_ops._version``.

What it reproduces (PEERS.md section 3):

- ``furthest_point_sample(xyz, npoint)``: int32 ``[B, npoint]``, start at index 0, points with
  ``x^2+y^2+z^2 <= 1e-3`` never chosen after the start, index 0 repeats once every remaining
  distance is 0; not differentiable.
- ``gather_operation`` / ``grouping_operation``: gradients to the features (scatter-add).
- ``three_nn(unknown, known)``: Euclidean (sqrt) float32 distances and int32 indices, ascending,
  ties to the lower index; with fewer than 3 known points the missing slots hold index 0 and
  distance +inf. Not differentiable. ``_ext.three_nn`` returns the squared distances.
- ``three_interpolate``: ``sum_t w_t * f[idx_t]`` in slot order; the gradient reaches the
  features only: **the weight gradient is zeros**, as upstream (so nothing flows to the weights
  or, in ``PointnetFPModule``, to the coordinates).
- ``ball_query(radius, nsample, xyz, new_xyz)``: the first ``nsample`` points of ``xyz`` in index
  order with ``d^2 < r^2`` (strict, float32 ``r*r``), the slots after the hits repeat the first
  hit, a query without any hit gets all-zero indices; int32, not differentiable.
- ``QueryAndGroup`` (relative xyz channels first, not divided by the radius), ``GroupAll``
  (absolute xyz; xyz only when there are no features), and the modules with upstream's layer
  layout, including the in-place ``mlps[i][0] += 3`` of ``PointnetSAModuleMSG`` with ``use_xyz``.

Differences from upstream (all where upstream fails or is unspecified):

- Runs on CPU and CUDA tensors (upstream: CUDA only). FPS, ball query and the ``m < 3`` case of
  ``three_nn`` run on pcops' own kernels on either device (pcops.furthest_point_sample,
  pcops.ball_query, pcops.knn). ``three_nn`` (m >= 3), ``three_interpolate``, ``gather_operation``
  and ``grouping_operation`` use pcops' native operators (pcops.three_nn, three_interpolate,
  gather_points, group_points) where they have a kernel for the input's device (CPU today);
  otherwise, on CUDA, the same arithmetic in plain PyTorch indexing on that device (never a
  silent copy to the CPU).
- FPS ties (equal largest distances) pick the smallest index (pcops' contract). Upstream's
  block of T = min(2^floor(log2 N), 512) threads gives thread t the points k = t (mod T), each
  thread keeps its lowest such k, and the tree reduction (slot i against slot i + s, s = T/2 down
  to 1, equal values keep slot i) prefers threads in bit-reversed order of t. Both agree when
  the tied points lie in one thread or the lower index wins the reduction (0 vs 2, 1 vs 3 for
  T = 4); they differ otherwise (1 vs 2 for T = 4: upstream takes 2). The same applies when
  every remaining distance is 0 and index 0 itself is skipped as near the origin.
- Squared distances follow pcops' contract (coordinate order, no fused multiply-add); upstream's
  nvcc build may contract to FMA, which can move a point across the radius by one ULP.
- Accepts int32 and int64 index tensors and float32/float16/bfloat16 features; float64
  coordinates raise TypeError (pcops' dtype policy) where upstream raises RuntimeError.
- An empty batch (B = 0) returns empty results (upstream's 0-block launch calls ``exit(-1)``).
- ``PointnetFPModule`` with ``known=None`` broadcasts ``known_feats`` over the ``n`` unknown
  points as intended (upstream builds the size as ``torch.Size + list`` and raises TypeError).
- ``_ext`` checks nothing beyond what the pcops operators check (upstream asserts CUDA,
  float32, int32 and contiguity).
"""

# No `from __future__ import annotations`: nn.Module subclasses keep runtime annotations.

import functools
import sys
import warnings  # noqa: F401  (upstream's pointnet2_utils namespace)
from typing import Any, List, Optional, Tuple  # noqa: F401

import torch

import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor
from torch.autograd import Function

from pcops._stand_in import stand_in_module

UPSTREAM_VERSION = "3.0.0"


def _pcops_version() -> str:
    module = sys.modules.get("pcops")
    return getattr(module, "__version__", "0")


# PEP 440 local version: compares equal to 3.0.0 in release-segment checks.
__version__ = f"{UPSTREAM_VERSION}+pcops.{_pcops_version()}"

# Dispatch keys of the devices pcops builds kernels for.
_DISPATCH_KEYS = {"cpu": "CPU", "cuda": "CUDA"}


def _pcops() -> Any:
    import pcops  # imported on first use: the stand-in can be installed before pcops loads

    return pcops


def _has_kernel(op: str, key: str) -> bool:
    """Whether the operator ``pcops::<op>`` has a kernel for dispatch key ``key``."""
    _pcops()  # the operator library
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key(f"pcops::{op}", key)
    except RuntimeError:
        return False


def _native(name: str, device: torch.device) -> Any:
    """``pcops.<name>`` when it exists and has a kernel for ``device``, else None."""
    fn = getattr(_pcops(), name, None)
    if fn is None:
        return None
    key = _DISPATCH_KEYS.get(device.type)
    if key is None:
        return fn  # meta and other devices: let the dispatcher decide (and fail clearly)
    return fn if _has_kernel(name, key) else None


def _index(idx: Tensor, name: str) -> Tensor:
    """int32 (upstream) or int64 index tensor -> int64."""
    if not isinstance(idx, Tensor):
        raise TypeError(f"{name}: expected a tensor, got {type(idx).__name__}")
    if idx.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{name}: expected an int32 (or int64) tensor, got {idx.dtype}")
    # The cast keeps the range known for the indices (no stream sync at the check on CUDA).
    return idx if idx.dtype == torch.int64 else _index_cast(idx, torch.int64)


def _tensor(t: Tensor, name: str, dim: int) -> Tensor:
    if not isinstance(t, Tensor):
        raise TypeError(f"{name}: expected a tensor, got {type(t).__name__}")
    if t.dim() != dim:
        raise ValueError(f"{name}: expected a {dim}-D tensor, got shape {tuple(t.shape)}")
    return t


def _same_device(a: Tensor, a_name: str, b: Tensor, b_name: str) -> None:
    if a.device != b.device:
        raise ValueError(f"{b_name}: expected device {a.device} (as {a_name}), got {b.device}")


def _vjp(fn: Any, like: Tensor, shape: Tuple[int, ...], grad_out: Tensor, *args: Any) -> Tensor:
    """Gradient of ``fn(x, *args)`` (linear in x) with respect to x of ``shape``, for grad_out."""
    with torch.enable_grad():
        leaf = torch.zeros(shape, dtype=like.dtype, device=like.device, requires_grad=True)
        out = fn(leaf, *args)
        # contiguous: an expanded gradient (from .sum()) has zero strides
        (grad,) = torch.autograd.grad(out, leaf, grad_out.contiguous(), allow_unused=True)
    return grad if grad is not None else torch.zeros(shape, dtype=like.dtype, device=like.device)


# --------------------------------------------------------------------------------------------
# The computations (pcops native operators, or the same arithmetic in PyTorch on the device)


def _gather_impl(features: Tensor, idx: Tensor) -> Tensor:
    """features [B, C, N], idx int64 [B, M] -> [B, C, M]."""
    native = _native("gather_points", features.device)
    if native is not None:
        return native(features, idx)
    _same_device(features, "features", idx, "idx")
    b, c, _ = features.shape
    return torch.gather(features, 2, idx.unsqueeze(1).expand(b, c, idx.shape[1]))


def _group_impl(features: Tensor, idx: Tensor) -> Tensor:
    """features [B, C, N], idx int64 [B, M, S] (-1 -> 0, no gradient) -> [B, C, M, S]."""
    native = _native("group_points", features.device)
    if native is not None:
        return native(features, idx)
    _same_device(features, "features", idx, "idx")
    b, c, _ = features.shape
    m, s = idx.shape[1], idx.shape[2]
    valid = idx >= 0
    flat = torch.where(valid, idx, torch.zeros_like(idx)).reshape(b, 1, m * s).expand(b, c, m * s)
    out = torch.gather(features, 2, flat).reshape(b, c, m, s)
    return torch.where(valid.unsqueeze(1), out, torch.zeros_like(out))


def _interpolate_impl(features: Tensor, idx: Tensor, weight: Tensor) -> Tensor:
    """features [B, C, M], idx int64 [B, N, 3], weight [B, N, 3] -> [B, C, N]."""
    native = _native("three_interpolate", features.device)
    if native is not None:
        return native(features, idx, weight)
    _same_device(features, "features", idx, "idx")
    _same_device(features, "features", weight, "weight")
    b, c, _ = features.shape
    n = idx.shape[1]
    w = weight.to(torch.promote_types(features.dtype, torch.float32))
    f = features.to(w.dtype)
    out = None
    for t in range(3):  # slot order t = 0, 1, 2, as upstream's kernel
        g = torch.gather(f, 2, idx[:, :, t].unsqueeze(1).expand(b, c, n)) * w[:, :, t].unsqueeze(1)
        out = g if out is None else out + g
    return out.to(features.dtype)


def _three_nn_impl(unknown: Tensor, known: Tensor) -> Tuple[Tensor, Tensor]:
    """Euclidean float32 dist and int64 idx [B, n, 3]; m < 3: (inf, 0) in the missing slots."""
    _tensor(unknown, "unknown", 3)
    _tensor(known, "known", 3)
    m = known.shape[1]
    native = _native("three_nn", unknown.device)
    if m >= 3 and native is not None:
        return native(unknown, known)
    k = min(3, m)
    dist, idx = _pcops().knn(unknown, known, k)
    if k < 3:
        pad = (unknown.shape[0], unknown.shape[1], 3 - k)
        dist = torch.cat([dist, dist.new_full(pad, float("inf"))], dim=2)
        idx = torch.cat([idx, idx.new_zeros(pad)], dim=2)
    return dist, idx


def _squared(unknown: Tensor, known: Tensor, idx: Tensor) -> Tensor:
    """Squared distances of the selected pairs, in pcops' contract order (x, y, z; no FMA)."""
    b, n, _ = unknown.shape
    q = unknown.float().unsqueeze(2)  # [B, n, 1, 3]
    x = torch.gather(known.float(), 1, idx.reshape(b, n * 3, 1).expand(b, n * 3, 3)).reshape(b, n, 3, 3)
    d = q - x
    s = d[..., 0] * d[..., 0]
    s = s + d[..., 1] * d[..., 1]
    return s + d[..., 2] * d[..., 2]


def _ball_query_impl(radius: float, nsample: int, xyz: Tensor, new_xyz: Tensor) -> Tuple[Tensor, Tensor]:
    """int64 [B, npoint, nsample] with upstream's padding (first hit repeated, all 0 without), and
    pcops' own indices, whose range it lies in."""
    _, idx = _pcops().ball_query(new_xyz, xyz, radius, nsample)
    if nsample == 0:
        return idx, idx
    first = idx[:, :, :1].clamp(min=0)  # the first hit, or 0 for a query without any
    return torch.where(idx >= 0, idx, first), idx


def _index_cast(idx: Tensor, dtype: torch.dtype, bounds_from: Optional[Tensor] = None) -> Tensor:
    """``idx.to(dtype)``; on CUDA through pcops.ops.gather_points.index_cast, which keeps the
    index range known on the host (no stream sync at the next index check)."""
    if idx.device.type != "cuda" or not _has_kernel("_index_cast", "CUDA"):
        return idx.to(dtype)
    from pcops.ops.gather_points import index_cast as cast

    return cast(idx, dtype, bounds_from)


# --------------------------------------------------------------------------------------------
# pointnet2_utils: autograd functions (upstream's class names) and their aliases


class FurthestPointSampling(Function):
    @staticmethod
    def forward(ctx, xyz, npoint):
        # type: (Any, torch.Tensor, int) -> torch.Tensor
        r"""Uses iterative furthest point sampling to select a set of npoint features that have
        the largest minimum distance.

        Parameters
        ----------
        xyz : torch.Tensor
            (B, N, 3) tensor where N > npoint
        npoint : int32
            number of features in the sampled set

        Returns
        -------
        torch.Tensor
            (B, npoint) int32 tensor containing the set
        """
        _tensor(xyz, "xyz", 3)
        idx = _pcops().furthest_point_sample(xyz, npoint, 0, None, skip_near_origin=True)
        out = _index_cast(idx, torch.int32)
        ctx.mark_non_differentiable(out)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        return None, None


furthest_point_sample = FurthestPointSampling.apply


class GatherOperation(Function):
    @staticmethod
    def forward(ctx, features, idx):
        # type: (Any, torch.Tensor, torch.Tensor) -> torch.Tensor
        r"""
        Parameters
        ----------
        features : torch.Tensor
            (B, C, N) tensor
        idx : torch.Tensor
            (B, npoint) tensor of the features to gather

        Returns
        -------
        torch.Tensor
            (B, C, npoint) tensor
        """
        _tensor(features, "features", 3)
        idx64 = _index(_tensor(idx, "idx", 2), "idx")
        ctx.save_for_backward(idx64)
        ctx.shape = tuple(features.shape)
        ctx.like = features.new_empty(0)
        return _gather_impl(features, idx64)

    @staticmethod
    def backward(ctx, grad_out):
        (idx64,) = ctx.saved_tensors
        return _vjp(_gather_impl, ctx.like, ctx.shape, grad_out, idx64), None


gather_operation = GatherOperation.apply


class ThreeNN(Function):
    @staticmethod
    def forward(ctx, unknown, known):
        # type: (Any, torch.Tensor, torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]
        r"""
            Find the three nearest neighbors of unknown in known
        Parameters
        ----------
        unknown : torch.Tensor
            (B, n, 3) tensor of known features
        known : torch.Tensor
            (B, m, 3) tensor of unknown features

        Returns
        -------
        dist : torch.Tensor
            (B, n, 3) l2 distance to the three nearest neighbors
        idx : torch.Tensor
            (B, n, 3) index of 3 nearest neighbors
        """
        dist, idx = _three_nn_impl(unknown, known)
        dist, idx = dist.float(), _index_cast(idx, torch.int32)
        ctx.mark_non_differentiable(dist, idx)
        return dist, idx

    @staticmethod
    def backward(ctx, grad_dist, grad_idx):
        return None, None


three_nn = ThreeNN.apply


class ThreeInterpolate(Function):
    @staticmethod
    def forward(ctx, features, idx, weight):
        # type: (Any, torch.Tensor, torch.Tensor, torch.Tensor) -> torch.Tensor
        r"""
            Performs weight linear interpolation on 3 features
        Parameters
        ----------
        features : torch.Tensor
            (B, c, m) Features descriptors to be interpolated from
        idx : torch.Tensor
            (B, n, 3) three nearest neighbors of the target features in features
        weight : torch.Tensor
            (B, n, 3) weights

        Returns
        -------
        torch.Tensor
            (B, c, n) tensor of the interpolated features
        """
        _tensor(features, "features", 3)
        _tensor(weight, "weight", 3)
        idx64 = _index(_tensor(idx, "idx", 3), "idx")
        ctx.save_for_backward(idx64, weight, idx)
        ctx.shape = tuple(features.shape)
        ctx.like = features.new_empty(0)
        return _interpolate_impl(features, idx64, weight)

    @staticmethod
    def backward(ctx, grad_out):
        # type: (Any, torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]
        idx64, weight, idx = ctx.saved_tensors
        grad_features = _vjp(_interpolate_impl, ctx.like, ctx.shape, grad_out, idx64, weight.detach())
        # Upstream's quirk: zeros (not None) for idx and weight, so nothing reaches the weights.
        return grad_features, torch.zeros_like(idx), torch.zeros_like(weight)


three_interpolate = ThreeInterpolate.apply


class GroupingOperation(Function):
    @staticmethod
    def forward(ctx, features, idx):
        # type: (Any, torch.Tensor, torch.Tensor) -> torch.Tensor
        r"""

        Parameters
        ----------
        features : torch.Tensor
            (B, C, N) tensor of features to group
        idx : torch.Tensor
            (B, npoint, nsample) tensor containing the indicies of features to group with

        Returns
        -------
        torch.Tensor
            (B, C, npoint, nsample) tensor
        """
        _tensor(features, "features", 3)
        idx64 = _index(_tensor(idx, "idx", 3), "idx")
        ctx.save_for_backward(idx64, idx)
        ctx.shape = tuple(features.shape)
        ctx.like = features.new_empty(0)
        return _group_impl(features, idx64)

    @staticmethod
    def backward(ctx, grad_out):
        # type: (Any, torch.tensor) -> Tuple[torch.Tensor, torch.Tensor]
        idx64, idx = ctx.saved_tensors
        return _vjp(_group_impl, ctx.like, ctx.shape, grad_out, idx64), torch.zeros_like(idx)


grouping_operation = GroupingOperation.apply


class BallQuery(Function):
    @staticmethod
    def forward(ctx, radius, nsample, xyz, new_xyz):
        # type: (Any, float, int, torch.Tensor, torch.Tensor) -> torch.Tensor
        r"""

        Parameters
        ----------
        radius : float
            radius of the balls
        nsample : int
            maximum number of features in the balls
        xyz : torch.Tensor
            (B, N, 3) xyz coordinates of the features
        new_xyz : torch.Tensor
            (B, npoint, 3) centers of the ball query

        Returns
        -------
        torch.Tensor
            (B, npoint, nsample) tensor with the indicies of the features that form the query balls
        """
        padded, raw = _ball_query_impl(radius, nsample, xyz, new_xyz)
        out = _index_cast(padded, torch.int32, raw)
        ctx.mark_non_differentiable(out)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        return None, None, None, None


ball_query = BallQuery.apply


class QueryAndGroup(nn.Module):
    r"""
    Groups with a ball query of radius

    Parameters
    ---------
    radius : float32
        Radius of ball
    nsample : int32
        Maximum number of features to gather in the ball
    """

    def __init__(self, radius, nsample, use_xyz=True):
        # type: (QueryAndGroup, float, int, bool) -> None
        super(QueryAndGroup, self).__init__()
        self.radius, self.nsample, self.use_xyz = radius, nsample, use_xyz

    def forward(self, xyz, new_xyz, features=None):
        # type: (QueryAndGroup, torch.Tensor. torch.Tensor, torch.Tensor) -> Tuple[Torch.Tensor]
        r"""
        Parameters
        ----------
        xyz : torch.Tensor
            xyz coordinates of the features (B, N, 3)
        new_xyz : torch.Tensor
            centriods (B, npoint, 3)
        features : torch.Tensor
            Descriptors of the features (B, C, N)

        Returns
        -------
        new_features : torch.Tensor
            (B, 3 + C, npoint, nsample) tensor
        """
        idx = ball_query(self.radius, self.nsample, xyz, new_xyz)
        xyz_trans = xyz.transpose(1, 2).contiguous()
        grouped_xyz = grouping_operation(xyz_trans, idx)  # (B, 3, npoint, nsample)
        grouped_xyz -= new_xyz.transpose(1, 2).unsqueeze(-1)

        if features is not None:
            grouped_features = grouping_operation(features, idx)
            if self.use_xyz:
                # (B, C + 3, npoint, nsample)
                new_features = torch.cat([grouped_xyz, grouped_features], dim=1)
            else:
                new_features = grouped_features
        else:
            assert self.use_xyz, "Cannot have not features and not use xyz as a feature!"
            new_features = grouped_xyz

        return new_features


class GroupAll(nn.Module):
    r"""
    Groups all features

    Parameters
    ---------
    """

    def __init__(self, use_xyz=True):
        # type: (GroupAll, bool) -> None
        super(GroupAll, self).__init__()
        self.use_xyz = use_xyz

    def forward(self, xyz, new_xyz, features=None):
        # type: (GroupAll, torch.Tensor, torch.Tensor, torch.Tensor) -> Tuple[torch.Tensor]
        r"""
        Parameters
        ----------
        xyz : torch.Tensor
            xyz coordinates of the features (B, N, 3)
        new_xyz : torch.Tensor
            Ignored
        features : torch.Tensor
            Descriptors of the features (B, C, N)

        Returns
        -------
        new_features : torch.Tensor
            (B, C + 3, 1, N) tensor
        """
        grouped_xyz = xyz.transpose(1, 2).unsqueeze(2)
        if features is not None:
            grouped_features = features.unsqueeze(2)
            if self.use_xyz:
                new_features = torch.cat([grouped_xyz, grouped_features], dim=1)  # (B, 3 + C, 1, N)
            else:
                new_features = grouped_features
        else:
            new_features = grouped_xyz

        return new_features


# --------------------------------------------------------------------------------------------
# _ext: the pybind entry points (names and argument order of upstream's bindings.cpp)


def _ext_furthest_point_sampling(points: Tensor, nsamples: int) -> Tensor:
    _tensor(points, "points", 3)
    idx = _pcops().furthest_point_sample(points, nsamples, 0, None, skip_near_origin=True)
    return _index_cast(idx, torch.int32)


def _ext_gather_points(points: Tensor, idx: Tensor) -> Tensor:
    _tensor(points, "points", 3)
    return _gather_impl(points, _index(_tensor(idx, "idx", 2), "idx"))


def _ext_gather_points_grad(grad_out: Tensor, idx: Tensor, n: int) -> Tensor:
    _tensor(grad_out, "grad_out", 3)
    idx64 = _index(_tensor(idx, "idx", 2), "idx")
    shape = (grad_out.shape[0], grad_out.shape[1], int(n))
    return _vjp(_gather_impl, grad_out, shape, grad_out, idx64)


def _ext_ball_query(new_xyz: Tensor, xyz: Tensor, radius: float, nsample: int) -> Tensor:
    padded, raw = _ball_query_impl(radius, nsample, xyz, new_xyz)
    return _index_cast(padded, torch.int32, raw)


def _ext_group_points(points: Tensor, idx: Tensor) -> Tensor:
    _tensor(points, "points", 3)
    return _group_impl(points, _index(_tensor(idx, "idx", 3), "idx"))


def _ext_group_points_grad(grad_out: Tensor, idx: Tensor, n: int) -> Tensor:
    _tensor(grad_out, "grad_out", 4)
    idx64 = _index(_tensor(idx, "idx", 3), "idx")
    shape = (grad_out.shape[0], grad_out.shape[1], int(n))
    return _vjp(_group_impl, grad_out, shape, grad_out, idx64)


def _ext_three_nn(unknowns: Tensor, knows: Tensor) -> List[Tensor]:
    """[dist2, idx]: squared distances (upstream's extension returns them before the sqrt)."""
    _, idx = _three_nn_impl(unknowns, knows)
    if knows.shape[1] > 0:
        dist2 = _squared(unknowns, knows, idx)
    else:
        dist2 = idx.new_zeros(idx.shape, dtype=torch.float32)
    if knows.shape[1] < 3:
        missing = torch.arange(3, device=idx.device) >= knows.shape[1]
        dist2 = torch.where(missing, torch.full_like(dist2, float("inf")), dist2)
    return [dist2, _index_cast(idx, torch.int32)]


def _ext_three_interpolate(points: Tensor, idx: Tensor, weight: Tensor) -> Tensor:
    _tensor(points, "points", 3)
    _tensor(weight, "weight", 3)
    return _interpolate_impl(points, _index(_tensor(idx, "idx", 3), "idx"), weight)


def _ext_three_interpolate_grad(grad_out: Tensor, idx: Tensor, weight: Tensor, m: int) -> Tensor:
    _tensor(grad_out, "grad_out", 3)
    idx64 = _index(_tensor(idx, "idx", 3), "idx")
    shape = (grad_out.shape[0], grad_out.shape[1], int(m))
    return _vjp(_interpolate_impl, grad_out, shape, grad_out, idx64, weight.detach())


_EXT = {
    "furthest_point_sampling": _ext_furthest_point_sampling,
    "gather_points": _ext_gather_points,
    "gather_points_grad": _ext_gather_points_grad,
    "ball_query": _ext_ball_query,
    "group_points": _ext_group_points,
    "group_points_grad": _ext_group_points_grad,
    "three_nn": _ext_three_nn,
    "three_interpolate": _ext_three_interpolate,
    "three_interpolate_grad": _ext_three_interpolate_grad,
}


# --------------------------------------------------------------------------------------------
# pointnet2_modules


def build_shared_mlp(mlp_spec: List[int], bn: bool = True):
    layers = []
    for i in range(1, len(mlp_spec)):
        layers.append(nn.Conv2d(mlp_spec[i - 1], mlp_spec[i], kernel_size=1, bias=not bn))
        if bn:
            layers.append(nn.BatchNorm2d(mlp_spec[i]))
        layers.append(nn.ReLU(True))

    return nn.Sequential(*layers)


class _PointnetSAModuleBase(nn.Module):
    def __init__(self):
        super(_PointnetSAModuleBase, self).__init__()
        self.npoint = None
        self.groupers = None
        self.mlps = None

    def forward(self, xyz, features):
        # type: (torch.Tensor, torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]
        r"""
        Parameters
        ----------
        xyz : torch.Tensor
            (B, N, 3) tensor of the xyz coordinates of the features
        features : torch.Tensor
            (B, C, N) tensor of the descriptors of the the features

        Returns
        -------
        new_xyz : torch.Tensor
            (B, npoint, 3) tensor of the new features' xyz
        new_features : torch.Tensor
            (B,  \sum_k(mlps[k][-1]), npoint) tensor of the new_features descriptors
        """

        new_features_list = []

        xyz_flipped = xyz.transpose(1, 2).contiguous()
        new_xyz = (
            gather_operation(xyz_flipped, furthest_point_sample(xyz, self.npoint))
            .transpose(1, 2)
            .contiguous()
            if self.npoint is not None
            else None
        )

        for i in range(len(self.groupers)):
            new_features = self.groupers[i](xyz, new_xyz, features)  # (B, C, npoint, nsample)

            new_features = self.mlps[i](new_features)  # (B, mlp[-1], npoint, nsample)
            new_features = F.max_pool2d(
                new_features, kernel_size=[1, new_features.size(3)]
            )  # (B, mlp[-1], npoint, 1)
            new_features = new_features.squeeze(-1)  # (B, mlp[-1], npoint)

            new_features_list.append(new_features)

        return new_xyz, torch.cat(new_features_list, dim=1)


class PointnetSAModuleMSG(_PointnetSAModuleBase):
    r"""Pointnet set abstrction layer with multiscale grouping

    Parameters
    ----------
    npoint : int
        Number of features
    radii : list of float32
        list of radii to group with
    nsamples : list of int32
        Number of samples in each ball query
    mlps : list of list of int32
        Spec of the pointnet before the global max_pool for each scale
    bn : bool
        Use batchnorm
    """

    def __init__(self, npoint, radii, nsamples, mlps, bn=True, use_xyz=True):
        # type: (PointnetSAModuleMSG, int, List[float], List[int], List[List[int]], bool, bool) -> None
        super(PointnetSAModuleMSG, self).__init__()

        assert len(radii) == len(nsamples) == len(mlps)

        self.npoint = npoint
        self.groupers = nn.ModuleList()
        self.mlps = nn.ModuleList()
        for i in range(len(radii)):
            radius = radii[i]
            nsample = nsamples[i]
            self.groupers.append(
                QueryAndGroup(radius, nsample, use_xyz=use_xyz)
                if npoint is not None
                else GroupAll(use_xyz)
            )
            mlp_spec = mlps[i]
            if use_xyz:
                mlp_spec[0] += 3  # upstream's quirk: mutates the caller's list in place

            self.mlps.append(build_shared_mlp(mlp_spec, bn))


class PointnetSAModule(PointnetSAModuleMSG):
    r"""Pointnet set abstrction layer

    Parameters
    ----------
    npoint : int
        Number of features
    radius : float
        Radius of ball
    nsample : int
        Number of samples in the ball query
    mlp : list
        Spec of the pointnet before the global max_pool
    bn : bool
        Use batchnorm
    """

    def __init__(self, mlp, npoint=None, radius=None, nsample=None, bn=True, use_xyz=True):
        # type: (PointnetSAModule, List[int], int, float, int, bool, bool) -> None
        super(PointnetSAModule, self).__init__(
            mlps=[mlp],
            npoint=npoint,
            radii=[radius],
            nsamples=[nsample],
            bn=bn,
            use_xyz=use_xyz,
        )


class PointnetFPModule(nn.Module):
    r"""Propigates the features of one set to another

    Parameters
    ----------
    mlp : list
        Pointnet module parameters
    bn : bool
        Use batchnorm
    """

    def __init__(self, mlp, bn=True):
        # type: (PointnetFPModule, List[int], bool) -> None
        super(PointnetFPModule, self).__init__()
        self.mlp = build_shared_mlp(mlp, bn=bn)

    def forward(self, unknown, known, unknow_feats, known_feats):
        # type: (PointnetFPModule, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor) -> torch.Tensor
        r"""
        Parameters
        ----------
        unknown : torch.Tensor
            (B, n, 3) tensor of the xyz positions of the unknown features
        known : torch.Tensor
            (B, m, 3) tensor of the xyz positions of the known features
        unknow_feats : torch.Tensor
            (B, C1, n) tensor of the features to be propigated to
        known_feats : torch.Tensor
            (B, C2, m) tensor of features to be propigated

        Returns
        -------
        new_features : torch.Tensor
            (B, mlp[-1], n) tensor of the features of the unknown features
        """

        if known is not None:
            dist, idx = three_nn(unknown, known)
            dist_recip = 1.0 / (dist + 1e-8)
            norm = torch.sum(dist_recip, dim=2, keepdim=True)
            weight = dist_recip / norm

            interpolated_feats = three_interpolate(known_feats, idx, weight)
        else:
            # Upstream writes `known_feats.size()[0:2] + [unknown.size(1)]`, a TypeError.
            interpolated_feats = known_feats.expand(
                *(list(known_feats.size()[0:2]) + [unknown.size(1)])
            )

        if unknow_feats is not None:
            new_features = torch.cat([interpolated_feats, unknow_feats], dim=1)  # (B, C2 + C1, n)
        else:
            new_features = interpolated_feats

        new_features = new_features.unsqueeze(-1)
        new_features = self.mlp(new_features)

        return new_features.squeeze(-1)


# --------------------------------------------------------------------------------------------
# Module layout under the upstream names (used by pcops.compat.install)

_UTILS_NAMES = [
    "FurthestPointSampling", "furthest_point_sample", "GatherOperation", "gather_operation",
    "ThreeNN", "three_nn", "ThreeInterpolate", "three_interpolate", "GroupingOperation",
    "grouping_operation", "BallQuery", "ball_query", "QueryAndGroup", "GroupAll",
]
_MODULES_NAMES = [
    "build_shared_mlp", "_PointnetSAModuleBase", "PointnetSAModuleMSG", "PointnetSAModule",
    "PointnetFPModule",
]

__all__ = _UTILS_NAMES + _MODULES_NAMES + ["__version__"]


_module = functools.partial(stand_in_module, origin=__file__)  # module objects of this stand-in


def build_modules(name: str = "pointnet2_ops") -> dict:
    """``{dotted name: module}`` for the package and its submodules, package first."""
    this = sys.modules[__name__]
    package = _module(name, __doc__, package=True)
    modules = {name: package}

    ext = _module(f"{name}._ext", "pointnet2_ops._ext (pcops stand-in): upstream's pybind entry points")
    for attr, fn in _EXT.items():
        setattr(ext, attr, fn)
    version = _module(f"{name}._version", "pointnet2_ops._version (pcops stand-in)")
    version.__version__ = __version__

    utils = _module(f"{name}.pointnet2_utils", "pointnet2_ops.pointnet2_utils (pcops stand-in)")
    for attr in _UTILS_NAMES:
        setattr(utils, attr, getattr(this, attr))
    for attr, value in (("torch", torch), ("nn", nn), ("warnings", warnings), ("Function", Function),
                        ("Optional", Optional), ("Any", Any), ("Tuple", Tuple), ("_ext", ext)):
        setattr(utils, attr, value)

    mods = _module(f"{name}.pointnet2_modules", "pointnet2_ops.pointnet2_modules (pcops stand-in)")
    for attr in _MODULES_NAMES:
        setattr(mods, attr, getattr(this, attr))
    for attr, value in (("torch", torch), ("nn", nn), ("F", F), ("List", List), ("Optional", Optional),
                        ("Tuple", Tuple), ("pointnet2_utils", utils)):
        setattr(mods, attr, value)

    for module in (ext, version, utils, mods):
        modules[module.__name__] = module
        setattr(package, module.__name__.rpartition(".")[2], module)
    package.__version__ = __version__
    return modules
