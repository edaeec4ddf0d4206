"""PyTorch3D 0.7.9 point operators on pcops: ``knn_points``, ``knn_gather``, ``ball_query``,
``sample_farthest_points`` (and ``masked_gather``), with PyTorch3D's signatures and semantics.

``pcops.compat.install(pytorch3d=True)`` registers a ``pytorch3d`` package built from this module
(``pytorch3d.ops`` and the submodules ``pytorch3d.ops.{knn,ball_query,sample_farthest_points,utils}``,
``pytorch3d.loss`` and ``pytorch3d.loss.chamfer`` with ``chamfer_distance``) where no real
PyTorch3D is importable; it is off by default.

Semantics kept from upstream (PEERS.md section 5):

- ``knn_points`` returns ``KNN(dists, idx, knn)``: **squared** L2 distances for ``norm=2``, sums of
  absolute differences for ``norm=1``, int64 ``idx``; ``knn = knn_gather(p2, idx, lengths2)`` when
  ``return_nn``. Slots ``k >= lengths2[n]`` and rows ``i >= lengths1[n]`` hold **idx 0, dist 0**
  (upstream's padding; it is not -1, so ``knn_gather`` on the result is always valid).
  ``dists`` is differentiable with respect to ``p1`` and ``p2``: the distance is recomputed from
  the selected points with autograd (a gather), so the gradient is upstream's
  ``2 g (p1 - p2)`` for norm 2 and ``g sign(p1 - p2)`` for norm 1, with a zero difference counted
  as -1 as upstream does; padded slots contribute nothing. Unlike upstream's
  ``once_differentiable`` backward, second derivatives exist.
- ``ball_query``: the first ``K`` points of ``p2`` **in index order** with ``d^2 < radius^2``
  (strict, threshold ``fl32(r) * fl32(r)`` in float32), idx padded with **-1**, dists (squared)
  padded with 0, ``knn`` (the gathered points, 0.0 at -1) returned by default; dists
  differentiable with respect to ``p1`` and ``p2``. ``skip_points_outside_cube`` gives the same
  result (as upstream) and is only validated.
- ``sample_farthest_points``: points are cast to float32; ``K`` is an int or a list / tensor of
  one count per cloud; idx ``(N, max K)`` in selection order, starting at index 0 (or at a
  random point), the first ``min(lengths[n], K[n])`` entries valid and the rest **-1**; the
  sampled points are ``masked_gather(points, idx)`` (0.0 at -1) and differentiable with respect
  to ``points``. Equal distances select the lowest index (upstream's CPU and CUDA rule).

Differences from upstream:

- Neighbours are ordered by (distance, index): exact ties come out in ascending index.
  Upstream's final ``torch.sort`` is not stable, so its tie order is unspecified.
  ``return_sorted=False`` returns the same sorted result (upstream's CPU kernel is sorted too;
  only its CUDA kernels return an unsorted buffer).
- The norm-2 neighbours of float32/float16/bfloat16 clouds come from :func:`pcops.knn` (exact,
  squared distances summed in coordinate order, CPU and CUDA). norm 1, float64 clouds and any
  other case use an exact brute force in PyTorch (chunked, in the input's precision). Upstream's
  CPU kernel takes float32 only; here float64 works on every device. Squared distances can
  differ from upstream's kernels in the last bit, which can reorder near-ties.
- ``ball_query`` on 3-D float32/float16/bfloat16 clouds runs :func:`pcops.ball_query`; float64
  clouds and other dimensions use a brute force in PyTorch (upstream: float32 only). A negative
  ``radius`` raises ValueError (upstream squares it).
- ``version`` is accepted and ignored (there is one exact algorithm; upstream ignores it on the
  CPU too); ``knn_check_version`` and ``pytorch3d._C`` are not provided.
- ``sample_farthest_points``: a cloud with ``lengths[n] == 0`` or a count ``K[n] == 0`` gets an
  all -1 row (upstream's kernel still writes the start index 0 at position 0: a QUIRK not
  copied). Random starts draw from torch's global generator on the lengths' device, as
  upstream 0.7.9 does (``torch.randint(high=P, size=(N,))`` for full-length clouds,
  ``floor(lengths * torch.rand(N))`` for ragged ones); the start is reproducible under
  ``torch.manual_seed`` but the exact stream of draws is not promised to match upstream.
- Errors: lengths outside ``[0, P]``, a negative or non-integer ``K`` and mismatched dtypes or
  devices raise ValueError / TypeError instead of undefined behaviour.
- ``chamfer_distance`` (``pytorch3d.loss`` and ``pytorch3d.loss.chamfer``) is
  :func:`pcops.chamfer_distance` (docs/ops/chamfer_distance.md): upstream's signature, checks,
  reductions, weights (incl. the ``(N, N)`` zeros of all-zero weights), lengths and normals;
  the nearest neighbour is the smallest (distance, index) from pcops' exact search, float32 and
  float64 on the CPU (upstream's CPU path: float32 only); ``point_reduction="max"`` with
  ``P == 0`` gives 0 where upstream raises.
"""

from __future__ import annotations

import functools
import math
import numbers
import operator
import sys
from collections import namedtuple
from typing import List, Optional, Tuple, Union

import torch

from pcops._stand_in import stand_in_module

__all__ = ["KNN", "ball_query", "knn_gather", "knn_points", "masked_gather", "sample_farthest_points"]
_LOSS_ALL = ["chamfer_distance"]

UPSTREAM_VERSION = "0.7.9"

KNN = namedtuple("KNN", "dists idx knn")

_PCOPS_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_CHUNK_ELEMENTS = 1 << 24  # brute force: bound on the [N, chunk, P2, D] temporary


def _pcops():
    import pcops  # on first use: the stand-in can be installed before pcops loads

    return pcops


def chamfer_distance(x, y, x_lengths=None, y_lengths=None, x_normals=None, y_normals=None, weights=None,
                     batch_reduction="mean", point_reduction="mean", norm=2, single_directional=False,
                     abs_cosine=True):
    """``pytorch3d.loss.chamfer_distance`` (PyTorch3D 0.7.9): :func:`pcops.chamfer_distance`."""
    return _pcops().chamfer_distance(
        x, y, x_lengths=x_lengths, y_lengths=y_lengths, x_normals=x_normals, y_normals=y_normals,
        weights=weights, batch_reduction=batch_reduction, point_reduction=point_reduction, norm=norm,
        single_directional=single_directional, abs_cosine=abs_cosine)


# ---------------------------------------------------------------------------------------------
# Argument normalisation


def _int(value, name: str) -> int:
    if isinstance(value, bool) or isinstance(value, torch.Tensor) and value.dim() != 0:
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    if isinstance(value, torch.Tensor):
        if value.dtype.is_floating_point or value.dtype == torch.bool:
            raise TypeError(f"{name}: expected an integer, got a {value.dtype} tensor")
        return int(value.item())
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}") from None


def _cloud(t, name: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a tensor, got {type(t).__name__}")
    if t.dim() != 3:
        raise ValueError(f"{name}: expected a 3-D (N, P, D) tensor, got shape {tuple(t.shape)}")
    if not t.dtype.is_floating_point:
        raise TypeError(f"{name}: expected floating-point coordinates, got {t.dtype}")
    return t


def _pair(p1, p2) -> None:
    _cloud(p1, "p1")
    _cloud(p2, "p2")
    if p1.shape[0] != p2.shape[0]:
        raise ValueError("pts1 and pts2 must have the same batch dimension.")
    if p1.shape[2] != p2.shape[2]:
        raise ValueError("pts1 and pts2 must have the same point dimension.")
    if p1.device != p2.device:
        raise ValueError(f"p2: expected device {p1.device} (as p1), got {p2.device}")
    if p1.dtype != p2.dtype:
        raise TypeError(f"p2: expected dtype {p1.dtype} (as p1), got {p2.dtype}")


def _lengths(lengths, n: int, p: int, device: torch.device, name: str) -> torch.Tensor:
    """int64 ``(N,)`` lengths on ``device``, each in ``[0, p]``; full lengths when None."""
    if lengths is None:
        return torch.full((n,), p, dtype=torch.int64, device=device)
    if not isinstance(lengths, torch.Tensor):
        raise TypeError(f"{name}: expected a tensor, got {type(lengths).__name__}")
    if lengths.dtype.is_floating_point or lengths.dtype.is_complex or lengths.dtype == torch.bool:
        raise TypeError(f"{name}: expected an integer tensor, got {lengths.dtype}")
    if lengths.shape != (n,):
        raise ValueError(f"{name}: expected shape ({n},) (one length per cloud), got {tuple(lengths.shape)}")
    if lengths.device != device:
        raise ValueError(f"{name}: expected device {device}, got {lengths.device}")
    lengths = lengths.to(torch.int64)
    if n and (int(lengths.min()) < 0 or int(lengths.max()) > p):
        raise ValueError(f"{name}: expected values in [0, {p}], got {lengths.tolist()}")
    return lengths


# ---------------------------------------------------------------------------------------------
# Gathers


def _gather(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """x ``(N, M, U)``, idx ``(N, ...)`` with values in ``[0, M)`` (0 when M == 0) -> ``(N, ..., U)``."""
    n, u = x.shape[0], x.shape[2]
    if x.shape[1] == 0 or idx.numel() == 0:  # nothing to gather (every slot is padding): zeros, as after masking
        return x.new_zeros((*idx.shape, u))
    flat = idx.reshape(n, -1, 1).expand(-1, -1, u)
    return torch.gather(x, 1, flat).reshape(*idx.shape, u)


def knn_gather(x: torch.Tensor, idx: torch.Tensor, lengths: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``x[n, idx[n, l, k], :]`` as ``(N, L, K, U)``; slots ``k >= lengths[n]`` hold 0.

    Args:
        x: ``(N, M, U)`` values (any dtype).
        idx: ``(N, L, K)`` int64 indices into ``x``'s dim 1 (as returned by :func:`knn_points`).
        lengths: optional ``(N,)`` valid lengths of ``x``; default ``M``.

    Raises:
        ValueError: a batch mismatch or bad shapes. Indices outside ``[0, M)`` raise as
            ``torch.gather`` does.
    """
    if not isinstance(x, torch.Tensor) or not isinstance(idx, torch.Tensor):
        raise TypeError("knn_gather: x and idx must be tensors")
    if x.dim() != 3 or idx.dim() != 3:
        raise ValueError(f"knn_gather: expected x (N, M, U) and idx (N, L, K), got {tuple(x.shape)} "
                         f"and {tuple(idx.shape)}")
    if x.shape[0] != idx.shape[0]:
        raise ValueError("x and idx must have same batch dimension.")
    n, m, _ = x.shape
    k = idx.shape[2]
    lengths = _lengths(lengths, n, m, x.device, "lengths")
    out = _gather(x, idx.to(torch.int64))
    if n and k and int(lengths.min()) < k:
        pad = lengths[:, None] <= torch.arange(k, device=x.device)[None]  # (N, K)
        out = out.masked_fill(pad[:, None, :, None], 0)
    return out


def masked_gather(points: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``points[n, idx[n, ...], :]`` with ``-1`` entries giving 0.0 (``pytorch3d.ops.utils``).

    Args:
        points: ``(N, P, D)``.
        idx: ``(N, K)`` or ``(N, P', K)`` integer indices, ``-1`` for padding.

    Returns:
        ``(N, K, D)`` or ``(N, P', K, D)``.
    """
    if len(idx) != len(points):
        raise ValueError("points and idx must have the same batch dimension")
    if idx.dim() not in (2, 3):
        raise ValueError("idx format is not supported %s" % repr(tuple(idx.shape)))
    idx = idx.to(torch.int64)
    pad = idx == -1
    out = _gather(points, torch.where(pad, torch.zeros_like(idx), idx))
    return out.masked_fill(pad[..., None], 0.0)


# ---------------------------------------------------------------------------------------------
# knn_points


def _brute_knn(p1, p2, lengths1, lengths2, norm: int, K: int) -> torch.Tensor:
    """Exact (distance, index) order in p1's precision; -1 where nothing is selected."""
    n, p1n, d = p1.shape
    p2n = p2.shape[1]
    idx = torch.full((n, p1n, K), -1, dtype=torch.int64, device=p1.device)
    kk = min(K, p2n)
    if n == 0 or p1n == 0 or kk == 0:
        return idx
    invalid_col = torch.arange(p2n, device=p1.device)[None] >= lengths2[:, None]  # (N, P2)
    step = max(1, _CHUNK_ELEMENTS // max(1, n * p2n * max(d, 1)))
    for s in range(0, p1n, step):
        diff = p1[:, s:s + step, None, :] - p2[:, None, :, :]
        dist = diff.abs().sum(-1) if norm == 1 else (diff * diff).sum(-1)
        dist = torch.nan_to_num(dist, nan=math.inf)  # NaN sorts as +inf (pcops' rule)
        # Padding columns are the highest indices, so a stable sort keeps real +inf first.
        dist = dist.masked_fill(invalid_col[:, None, :], math.inf)
        idx[:, s:s + step, :kk] = torch.sort(dist, dim=2, stable=True).indices[:, :, :kk]
    slot = torch.arange(K, device=p1.device)
    row = torch.arange(p1n, device=p1.device)
    filled = (slot[None, None, :] < lengths2[:, None, None]) & (row[None, :, None] < lengths1[:, None, None])
    return torch.where(filled, idx, torch.full_like(idx, -1))


def knn_points(
    p1: torch.Tensor,
    p2: torch.Tensor,
    lengths1: Optional[torch.Tensor] = None,
    lengths2: Optional[torch.Tensor] = None,
    norm: int = 2,
    K: int = 1,
    version: int = -1,
    return_nn: bool = False,
    return_sorted: bool = True,
) -> KNN:
    """The ``K`` nearest points of ``p2`` for every point of ``p1`` (PyTorch3D semantics).

    Args:
        p1: ``(N, P1, D)`` query clouds (float32, float64, float16 or bfloat16).
        p2: ``(N, P2, D)`` reference clouds, same dtype and device.
        lengths1, lengths2: optional ``(N,)`` integer lengths (default: full).
        norm: 2 (squared Euclidean) or 1 (L1).
        K: neighbours per point (>= 0; ``K > lengths2[n]`` pads).
        version: accepted and ignored.
        return_nn: also return ``knn_gather(p2, idx, lengths2)``.
        return_sorted: accepted; the result is always sorted by (distance, index).

    Returns:
        ``KNN(dists, idx, knn)``: dists ``(N, P1, K)`` in p1's dtype, idx ``(N, P1, K)`` int64,
        padded with (0, 0); knn ``(N, P1, K, D)`` or None. dists is differentiable.

    Raises:
        ValueError: ``norm`` not 1 or 2, mismatched batch or point dimensions, bad lengths,
            negative K, mixed devices.
        TypeError: non-tensor or non-floating inputs, mixed dtypes, non-integer K.
    """
    _pair(p1, p2)
    if isinstance(norm, bool) or norm not in (1, 2):
        raise ValueError("Support for 1 or 2 norm.")
    norm = int(norm)
    K = _int(K, "K")
    if K < 0:
        raise ValueError(f"K: expected >= 0, got {K}")
    n, p1n, d = p1.shape
    p2n = p2.shape[1]
    lengths1 = _lengths(lengths1, n, p1n, p1.device, "lengths1")
    lengths2 = _lengths(lengths2, n, p2n, p1.device, "lengths2")
    p1, p2 = p1.contiguous(), p2.contiguous()

    with torch.no_grad():
        if norm == 2 and p1.dtype in _PCOPS_DTYPES and d >= 1:
            _, idx = _pcops().knn(p1.detach(), p2.detach(), K, lengths1, lengths2)
        else:
            idx = _brute_knn(p1.detach(), p2.detach(), lengths1, lengths2, norm, K)
        filled = idx >= 0
        idx = torch.where(filled, idx, torch.zeros_like(idx))

    # Distances recomputed from the selected points: autograd gives upstream's gradients.
    work = torch.float32 if p1.dtype in (torch.float16, torch.bfloat16) else p1.dtype
    diff = p1.to(work)[:, :, None, :] - _gather(p2.to(work), idx)
    diff = torch.where(filled[..., None], diff, torch.zeros_like(diff))
    if norm == 2:
        dists = (diff * diff).sum(-1)
    else:  # |diff| with upstream's derivative: sign, 0 counted as -1
        sign = torch.where(diff > 0, torch.ones_like(diff), -torch.ones_like(diff)).detach()
        dists = (diff * sign).sum(-1)
    dists = dists.to(p1.dtype)
    knn = knn_gather(p2, idx, lengths2) if return_nn else None
    return KNN(dists=dists, idx=idx, knn=knn)


# ---------------------------------------------------------------------------------------------
# ball_query


def _brute_ball(p1, p2, lengths1, lengths2, radius: float, K: int) -> torch.Tensor:
    n, p1n, d = p1.shape
    p2n = p2.shape[1]
    idx = torch.full((n, p1n, K), -1, dtype=torch.int64, device=p1.device)
    kk = min(K, p2n)
    if n == 0 or p1n == 0 or kk == 0:
        return idx
    if p1.dtype == torch.float64:
        r2 = torch.tensor(radius, dtype=torch.float64) ** 2
    else:
        r2 = torch.tensor(radius, dtype=torch.float32) ** 2
    col = torch.arange(p2n, device=p1.device)
    invalid_col = col[None] >= lengths2[:, None]
    row = torch.arange(p1n, device=p1.device)
    step = max(1, _CHUNK_ELEMENTS // max(1, n * p2n * max(d, 1)))
    for s in range(0, p1n, step):
        diff = p1[:, s:s + step, None, :] - p2[:, None, :, :]
        dist = (diff * diff).sum(-1)
        hit = (dist < r2.to(dist.device, dist.dtype)) & ~invalid_col[:, None, :]
        hit &= (row[s:s + step][None, :, None] < lengths1[:, None, None])
        key = torch.where(hit, col, torch.full_like(col, p2n))  # first hits in index order
        first = torch.sort(key, dim=2).values[:, :, :kk]
        idx[:, s:s + step, :kk] = torch.where(first < p2n, first, torch.full_like(first, -1))
    return idx


def ball_query(
    p1: torch.Tensor,
    p2: torch.Tensor,
    lengths1: Optional[torch.Tensor] = None,
    lengths2: Optional[torch.Tensor] = None,
    K: int = 500,
    radius: float = 0.2,
    return_nn: bool = True,
    skip_points_outside_cube: bool = False,
) -> KNN:
    """The first ``K`` points of ``p2`` (in index order) strictly within ``radius`` of each ``p1``.

    Args:
        p1: ``(N, P1, D)`` query clouds; p2: ``(N, P2, D)`` reference clouds (same dtype/device).
        lengths1, lengths2: optional ``(N,)`` integer lengths.
        K: maximum neighbours (>= 0).
        radius: real number >= 0; a match needs ``d^2 < radius^2``.
        return_nn: also return the gathered points (default True, as upstream).
        skip_points_outside_cube: accepted (same result either way).

    Returns:
        ``KNN(dists, idx, knn)``: squared distances ``(N, P1, K)`` (0 where padded, p1's dtype,
        differentiable), int64 idx padded with -1, knn ``(N, P1, K, D)`` (0.0 at -1) or None.

    Raises:
        ValueError: mismatched batch or point dimensions, bad lengths, negative K or radius,
            non-finite radius, mixed devices.
        TypeError: non-tensor or non-floating inputs, mixed dtypes, non-integer K, non-real radius.
    """
    _pair(p1, p2)
    K = _int(K, "K")
    if K < 0:
        raise ValueError(f"K: expected >= 0, got {K}")
    if isinstance(radius, bool) or not isinstance(radius, numbers.Real):
        raise TypeError(f"radius: expected a real number, got {type(radius).__name__}")
    radius = float(radius)
    if not (math.isfinite(radius) and radius >= 0.0):
        raise ValueError(f"radius: expected a finite value >= 0, got {radius}")
    if not isinstance(skip_points_outside_cube, bool):
        raise TypeError("skip_points_outside_cube: expected a bool")
    n, p1n, d = p1.shape
    p2n = p2.shape[1]
    lengths1 = _lengths(lengths1, n, p1n, p1.device, "lengths1")
    lengths2 = _lengths(lengths2, n, p2n, p1.device, "lengths2")
    p1, p2 = p1.contiguous(), p2.contiguous()

    if d == 3 and p1.dtype in _PCOPS_DTYPES and radius <= 3.4028234663852886e38:
        dists, idx = _pcops().ball_query(p1, p2, radius, K, lengths1, lengths2)  # differentiable
        dists = dists.to(p1.dtype)
    else:
        with torch.no_grad():
            idx = _brute_ball(p1.detach(), p2.detach(), lengths1, lengths2, radius, K)
        filled = idx >= 0
        diff = p1[:, :, None, :] - _gather(p2, torch.where(filled, idx, torch.zeros_like(idx)))
        diff = torch.where(filled[..., None], diff, torch.zeros_like(diff))
        dists = (diff * diff).sum(-1)
    knn = masked_gather(p2, idx) if return_nn else None
    return KNN(dists=dists, idx=idx, knn=knn)


# ---------------------------------------------------------------------------------------------
# sample_farthest_points


def _counts(K, n: int, device: torch.device) -> Tuple[torch.Tensor, int]:
    """Per-cloud counts (int64 ``(N,)``) and the output width."""
    if isinstance(K, (list, tuple)):
        K = torch.tensor([_int(k, "K") for k in K], dtype=torch.int64, device=device)
    elif isinstance(K, torch.Tensor) and K.dim() == 1:
        if K.dtype.is_floating_point or K.dtype == torch.bool:
            raise TypeError(f"K: expected integer counts, got a {K.dtype} tensor")
        K = K.to(device=device, dtype=torch.int64)
    else:
        k = _int(K, "K")
        if k < 0:
            raise ValueError(f"K: expected >= 0, got {k}")
        return torch.full((n,), k, dtype=torch.int64, device=device), k
    if K.shape[0] != n:
        raise ValueError("K and points must have the same batch dimension")
    if n and int(K.min()) < 0:
        raise ValueError(f"K: expected counts >= 0, got {K.tolist()}")
    return K, (int(K.max()) if n else 0)


def sample_farthest_points(
    points: torch.Tensor,
    lengths: Optional[torch.Tensor] = None,
    K: Union[int, List, torch.Tensor] = 50,
    random_start_point: bool = False,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Furthest point sampling of each cloud (PyTorch3D semantics).

    Args:
        points: ``(N, P, D)`` floating-point clouds (cast to float32, as upstream).
        lengths: optional ``(N,)`` integer lengths (default: ``P``).
        K: samples per cloud: an int, or a list / 1-D tensor of N counts.
        random_start_point: start each cloud at a random valid point (torch's generator)
            instead of index 0.

    Returns:
        ``(sampled_points, idx)``: float32 ``(N, max K, D)`` (0.0 at padding, differentiable
        with respect to ``points``) and int64 ``(N, max K)`` in selection order, -1 past
        ``min(lengths[n], K[n])``.

    Raises:
        ValueError: "points and lengths must have same batch dimension.", lengths outside
            ``[0, P]``, "K and points must have the same batch dimension", negative counts.
        TypeError: non-tensor or non-floating points, non-integer K.
    """
    _cloud(points, "points")
    n, p, _ = points.shape
    device = points.device
    if lengths is not None and isinstance(lengths, torch.Tensor) and lengths.shape != (n,):
        raise ValueError("points and lengths must have same batch dimension.")
    lengths = _lengths(lengths, n, p, device, "lengths")
    counts, width = _counts(K, n, device)
    if not isinstance(random_start_point, bool):
        raise TypeError("random_start_point: expected a bool")
    if points.dtype != torch.float32:
        points = points.to(torch.float32)

    with torch.no_grad():
        if random_start_point and n:
            if bool((lengths == p).all()) and p > 0:
                start = torch.randint(high=p, size=(n,), device=device)
            else:
                start = (lengths * torch.rand(n, device=device)).floor().to(torch.int64)
            start = torch.minimum(start, (lengths - 1).clamp(min=0))  # rand() < 1, but be safe
        else:
            start = torch.zeros(n, dtype=torch.int64, device=device)
        idx = torch.full((n, width), -1, dtype=torch.int64, device=device)
        if n and width:
            detached = points.detach()
            for s in torch.unique(start).tolist():
                sel = (start == s).nonzero().flatten()
                idx[sel] = _pcops().furthest_point_sample(detached[sel], width, int(s), lengths[sel])
            beyond = torch.arange(width, device=device)[None] >= counts[:, None]
            idx = idx.masked_fill(beyond, -1)
    return masked_gather(points, idx), idx


# ---------------------------------------------------------------------------------------------
# The ``pytorch3d`` stand-in package (pcops.compat registry entry "pytorch3d")


_module = functools.partial(stand_in_module, origin=__file__)  # module objects of this stand-in


def build_modules(name: str = "pytorch3d") -> dict:
    """``{dotted name: module}``: ``pytorch3d`` (``__version__``), ``pytorch3d.ops`` (the four
    operators, ``masked_gather`` and ``KNN``) and its submodules ``knn``, ``ball_query``,
    ``sample_farthest_points`` and ``utils``; ``pytorch3d.loss`` and ``pytorch3d.loss.chamfer``
    (``chamfer_distance``). As upstream, ``pytorch3d.ops.ball_query`` and
    ``pytorch3d.ops.sample_farthest_points`` are the functions, the submodules stay importable."""
    this = sys.modules[__name__]
    package = _module(name, f"{name} (pcops stand-in): PyTorch3D {UPSTREAM_VERSION} point operators.",
                      package=True)
    from pcops import __version__ as pcops_version

    package.__version__ = f"{UPSTREAM_VERSION}+pcops.{pcops_version}"
    ops = _module(f"{name}.ops", f"{name}.ops (pcops stand-in).\n\n" + (__doc__ or ""), package=True)
    subs = {
        "knn": ("KNN", "knn_gather", "knn_points"),
        "ball_query": ("KNN", "ball_query", "masked_gather"),
        "sample_farthest_points": ("masked_gather", "sample_farthest_points"),
        "utils": ("masked_gather",),
    }
    modules = {name: package, ops.__name__: ops}
    for sub, attrs in subs.items():
        module = _module(f"{name}.ops.{sub}", f"{name}.ops.{sub} (pcops stand-in)")
        for attr in attrs:
            setattr(module, attr, getattr(this, attr))
        module.torch = torch
        setattr(ops, sub, module)
        modules[module.__name__] = module
    ops._KNN = KNN  # upstream's private name in pytorch3d.ops.knn
    modules[f"{name}.ops.knn"]._KNN = KNN
    for attr in __all__:  # after the submodules: the functions shadow the same-named modules
        setattr(ops, attr, getattr(this, attr))
    ops.__all__ = list(__all__)
    package.ops = ops
    # pytorch3d.loss (chamfer_distance only) and its submodule pytorch3d.loss.chamfer
    loss = _module(f"{name}.loss", f"{name}.loss (pcops stand-in): chamfer_distance.", package=True)
    chamfer = _module(f"{name}.loss.chamfer", f"{name}.loss.chamfer (pcops stand-in)")
    for module in (loss, chamfer):
        module.chamfer_distance = chamfer_distance
        module.__all__ = list(_LOSS_ALL)
    loss.chamfer = chamfer
    modules[loss.__name__] = loss
    modules[chamfer.__name__] = chamfer
    package.loss = loss
    package.__all__ = ["loss", "ops"]
    return modules
