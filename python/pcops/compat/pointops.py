"""Stand-in for Pointcept's ``pointops`` (``libs/pointops``, package ``pointops`` 1.0).

Offset-batched point operators with upstream's signatures (PEERS.md section 7): points of all
clouds are stacked in ``(n, 3)`` tensors and ``offset`` holds the cumulative **end** index of
each cloud (``[n1, n1 + n2, ...]``, no leading zero; any integer dtype, lists are accepted).

Provided, with upstream's semantics:

- ``knn_query(nsample, xyz, offset, new_xyz=None, new_offset=None) -> (idx, dist)``: int32
  ``(m, nsample)`` global indices and float32 Euclidean distances, ascending by distance (ties:
  lower index, where upstream's heap order is unspecified); missing slots ``-1`` / ``1e5``.
- ``ball_query(nsample, max_radius, min_radius, xyz, offset, new_xyz=None, new_offset=None)``:
  candidates ``d2 <= 1e-5`` or ``min_r2 <= d2 < max_r2`` (float32 ``d2`` and radii squared in
  float32), sorted by (distance, index); at most ``nsample`` of them are kept, all of them when
  they fit, else the evenly strided subsample at positions ``floor(i * cnt / nsample)``;
  missing slots ``-1`` / ``1e5``.
- ``farthest_point_sampling(xyz, offset, new_offset) -> idx``: int32 global indices, each cloud
  starting at its first point, ``new_offset`` differences samples per cloud (more samples than
  points repeat the cloud's first point).
- ``grouping(idx, feat, xyz, new_xyz=None, with_xyz=False)``: idx ``-1`` picks a zero row; with
  ``with_xyz`` relative coordinates first, masked to 0 where idx is -1. Differentiable w.r.t.
  ``feat``, ``xyz`` and ``new_xyz``.
- ``interpolation(xyz, new_xyz, feat, offset, new_offset, k=3)``: inverse-distance weights
  ``1 / (dist + 1e-8)`` over the k nearest references, normalised; a padded neighbour (idx -1,
  dist 1e5) indexes the last row of ``feat`` with its tiny weight, as upstream. Differentiable
  w.r.t. ``feat``.
- ``knn_query_and_group``, ``ball_query_and_group`` (query, then ``grouping``),
  ``grouping2`` / ``interpolation2`` (upstream's CUDA Functions; here the same computations as
  ``grouping`` / ``interpolation``, so their gradients match upstream's), ``batch2offset``,
  ``offset2batch``.

Deliberate differences from upstream:

- No silent limits: ``nsample`` is not capped at 128 and ``ball_query`` is not limited to 2048
  candidates per query (upstream corrupts memory above both).
- ``ball_query`` returns the true distances of the subsampled neighbours (upstream's kernel
  writes the candidate's index into ``dist2`` in that case, a bug).
- CPU tensors work (upstream is CUDA only). Ties are broken by the lower index everywhere.
- Bad input raises ValueError / TypeError (offsets that are not non-decreasing or do not end
  at ``n``, mismatched batch counts, non-3-D points, float64 or integer coordinates) instead of
  undefined behaviour. Non-contiguous inputs are accepted. float16 / bfloat16 coordinates are
  converted exactly to float32.
- ``grouping2`` maps idx ``-1`` to a zero row (upstream reads out of bounds).
- ``query_and_group``, ``random_ball_query``, ``subtraction``, ``aggregation`` and the attention
  steps exist for namespace completeness and raise NotImplementedError.

Backends: on the CPU the queries run on pcops' ragged operators (``torch.ops.pcops.knn_ragged``,
``radius``, ``furthest_point_sample_ragged``). Those have no CUDA kernels, so CUDA tensors take
pcops' dense operators per padded batch (``pcops.knn`` with lengths) or per cloud
(``pcops.furthest_point_sample``), and ``ball_query`` a chunked plain-PyTorch brute force on
the device; every path returns the same results (the tests run all of them on the CPU).
"""

from __future__ import annotations

import functools
import math
import operator
import sys
from typing import Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from pcops._stand_in import stand_in_module

UPSTREAM_VERSION = "1.0"


def _pcops_version() -> str:
    module = sys.modules.get("pcops")
    return getattr(module, "__version__", "0")


__version__ = f"{UPSTREAM_VERSION}+pcops.{_pcops_version()}"

_PAD_IDX = -1
_PAD_DIST = 1e5  # sqrt(1e10), upstream's initial heap value
_SELF_EPS2 = 1e-5  # upstream: d2 <= 1e-5 always counts as a ball-query candidate
_CHUNK = 1 << 22  # elements of one brute-force distance block

OffsetLike = Union[Tensor, Sequence[int]]


# --------------------------------------------------------------------------------------------
# argument checks


def _points(t: Tensor, name: str) -> Tensor:
    if not isinstance(t, Tensor):
        raise TypeError(f"{name}: expected a tensor, got {type(t).__name__}")
    if t.dim() != 2 or t.shape[1] != 3:
        raise ValueError(f"{name}: expected shape (n, 3), got {tuple(t.shape)}")
    if t.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(
            f"{name}: expected float32 (or float16 / bfloat16) coordinates, got {t.dtype} "
            "(upstream pointops is float32 only; convert with .float())"
        )
    return t.to(torch.float32).contiguous()


def _offsets(offset: OffsetLike, n: Optional[int], name: str, device) -> Tensor:
    """int64 CSR pointers ``[B + 1]`` (leading 0) of an upstream offset (cumulative ends)."""
    if offset is None:
        raise ValueError(f"{name}: expected the cumulative end index of every cloud, got None")
    if not isinstance(offset, Tensor):
        offset = torch.tensor(list(offset), dtype=torch.int64)
    if offset.dtype.is_floating_point or offset.dtype.is_complex or offset.dtype == torch.bool:
        raise TypeError(f"{name}: expected an integer tensor, got {offset.dtype}")
    if offset.dim() != 1:
        raise ValueError(f"{name}: expected a 1-D tensor, got shape {tuple(offset.shape)}")
    ends = offset.to(device="cpu", dtype=torch.int64)
    ptr = torch.cat([ends.new_zeros(1), ends])
    if bool((ptr[1:] < ptr[:-1]).any()):
        raise ValueError(f"{name}: expected non-decreasing non-negative cumulative ends, got {ends.tolist()}")
    if n is not None and int(ptr[-1]) != n:
        raise ValueError(f"{name}: the last offset must equal the number of points {n}, got {int(ptr[-1])}")
    return ptr.to(device)


def _nsample(nsample, name: str = "nsample") -> int:
    if isinstance(nsample, bool) or (isinstance(nsample, Tensor) and nsample.dtype.is_floating_point):
        raise TypeError(f"{name}: expected an int, got {nsample!r}")
    try:
        value = operator.index(nsample)
    except TypeError:
        raise TypeError(f"{name}: expected an int, got {type(nsample).__name__}") from None
    if value < 0:
        raise ValueError(f"{name}: expected >= 0, got {value}")
    return value


def _query_pair(xyz, offset, new_xyz, new_offset):
    """Checked float32 points and int64 pointers of the reference and query sets."""
    if new_xyz is None or new_offset is None:  # upstream: either missing means self-query
        new_xyz, new_offset = xyz, offset
    x = _points(xyz, "xyz")
    y = _points(new_xyz, "new_xyz")
    if x.device != y.device:
        raise ValueError(f"new_xyz: expected device {x.device} (as xyz), got {y.device}")
    ptr_x = _offsets(offset, x.shape[0], "offset", x.device)
    ptr_y = _offsets(new_offset, y.shape[0], "new_offset", x.device)
    if ptr_x.numel() != ptr_y.numel():
        raise ValueError(
            f"new_offset: expected {ptr_x.numel() - 1} clouds (as offset), got {ptr_y.numel() - 1}"
        )
    return x, y, ptr_x, ptr_y


def _sqdist(y: Tensor, x: Tensor) -> Tensor:
    """float32 squared distances, summed x, y, z in that order (as upstream's kernels)."""
    d = y - x
    return d[..., 0] * d[..., 0] + d[..., 1] * d[..., 1] + d[..., 2] * d[..., 2]


def _sqrt(d2: Tensor) -> Tensor:
    """Correctly rounded float32 sqrt (IEEE sqrtf, as CUDA's): via float64, which is exact here.

    torch's vectorised float32 sqrt on some CPUs is off by one ulp in places.
    """
    return d2.to(torch.float64).sqrt().to(torch.float32)


def _row_starts(row: Tensor, m: int) -> Tuple[Tensor, Tensor]:
    counts = torch.bincount(row, minlength=m)
    return counts, torch.cumsum(counts, 0) - counts


def _backend(device: torch.device) -> str:
    return "ragged" if device.type == "cpu" else "dense"


# --------------------------------------------------------------------------------------------
# knn_query


def _knn_edges_ragged(x, y, ptr_x, ptr_y, k):
    edges = torch.ops.pcops.knn_ragged(x, y, ptr_x, ptr_y, k, False)
    return edges[0], edges[1]


def _knn_edges_dense(x, y, ptr_x, ptr_y, k):
    """pcops.knn on a padded [B, M, 3] x [B, N, 3] batch (CUDA kernel); returns global edges."""
    import pcops

    b = ptr_x.numel() - 1
    len_x, len_y = ptr_x.diff(), ptr_y.diff()
    max_x, max_y = int(len_x.max()), int(len_y.max())
    if max_x == 0 or max_y == 0 or k == 0:
        empty = torch.empty(0, dtype=torch.int64, device=x.device)
        return empty, empty
    bx = torch.repeat_interleave(torch.arange(b, device=x.device), len_x)
    by = torch.repeat_interleave(torch.arange(b, device=x.device), len_y)
    lx = torch.arange(x.shape[0], device=x.device) - ptr_x[bx]
    ly = torch.arange(y.shape[0], device=x.device) - ptr_y[by]
    dx = x.new_zeros(b, max_x, 3)
    dy = y.new_zeros(b, max_y, 3)
    dx[bx, lx] = x
    dy[by, ly] = y
    _, idx = pcops.knn(dy, dx, k, len_y, len_x)
    local = idx[by, ly]  # (m, k), -1 where unfilled
    valid = local >= 0
    row = torch.arange(y.shape[0], device=x.device).unsqueeze(1).expand_as(local)[valid]
    col = (local + ptr_x[by].unsqueeze(1))[valid]
    return row, col


def _knn(nsample, xyz, offset, new_xyz, new_offset, backend=None):
    k = _nsample(nsample)
    x, y, ptr_x, ptr_y = _query_pair(xyz, offset, new_xyz, new_offset)
    m = y.shape[0]
    idx = torch.full((m, k), _PAD_IDX, dtype=torch.int32, device=x.device)
    dist = torch.full((m, k), _PAD_DIST, dtype=torch.float32, device=x.device)
    if m == 0 or k == 0 or x.shape[0] == 0:
        return idx, dist
    backend = backend or _backend(x.device)
    edges = _knn_edges_ragged if backend == "ragged" else _knn_edges_dense
    row, col = edges(x, y, ptr_x, ptr_y, k)
    _, starts = _row_starts(row, m)
    pos = torch.arange(row.numel(), device=x.device) - starts[row]
    idx[row, pos] = col.to(torch.int32)
    dist[row, pos] = _sqrt(_sqdist(y[row], x[col]))
    return idx, dist


def knn_query(nsample, xyz, offset, new_xyz=None, new_offset=None):
    """The ``nsample`` nearest points of ``xyz`` (same cloud) for every row of ``new_xyz``.

    Args:
        nsample: neighbours per query (any size; upstream caps it at 128 silently).
        xyz: ``(n, 3)`` reference points; offset: their cumulative cloud ends ``(b,)``.
        new_xyz, new_offset: ``(m, 3)`` queries and their cloud ends; when either is None the
            queries are ``xyz`` itself.

    Returns:
        ``(idx, dist)``: int32 ``(m, nsample)`` global indices into ``xyz`` and float32 Euclidean
        distances, ascending by (distance, index); missing slots ``-1`` / ``1e5``. Not
        differentiable.
    """
    with torch.no_grad():
        return _knn(nsample, xyz, offset, new_xyz, new_offset)


# --------------------------------------------------------------------------------------------
# ball_query


def _radii2(max_radius, min_radius):
    max_r, min_r = float(max_radius), float(min_radius)
    if not min_r < max_r:
        raise ValueError(f"min_radius: expected < max_radius, got min_radius={min_r}, max_radius={max_r}")
    r32 = torch.tensor([max_r, min_r], dtype=torch.float32)
    sq = r32 * r32  # float32 products, as upstream's kernel
    return sq[0], sq[1]


def _ball_edges_ragged(x, y, ptr_x, ptr_y, max_r2):
    """Superset of the candidates from pcops' radius operator (all matches, index order)."""
    reach = max(float(max_r2), _SELF_EPS2)
    r = (reach ** 0.5) * (1.0 + 1e-4) + 1e-30
    if not math.isfinite(r * r):  # pcops' radius needs a finite radius: every point is in reach
        return _ball_edges_dense(x, y, ptr_x, ptr_y, max_r2)
    cap = max(int(ptr_x.diff().max()), 1)
    edges = torch.ops.pcops.radius(x, y, ptr_x, ptr_y, r, cap, False)
    return edges[0], edges[1]


def _ball_edges_dense(x, y, ptr_x, ptr_y, max_r2):
    """Brute force per cloud in blocks of queries, plain PyTorch on the tensors' device."""
    reach = max(float(max_r2), _SELF_EPS2)
    rows, cols = [], []
    px, py = ptr_x.tolist(), ptr_y.tolist()
    for b in range(len(px) - 1):
        xs, xe, ys, ye = px[b], px[b + 1], py[b], py[b + 1]
        if xe == xs or ye == ys:
            continue
        step = max(1, _CHUNK // (xe - xs))
        ref = x[xs:xe].unsqueeze(0)
        for q0 in range(ys, ye, step):
            q1 = min(ye, q0 + step)
            d2 = _sqdist(y[q0:q1].unsqueeze(1), ref)
            hit = (d2 < reach * (1.0 + 1e-3)).nonzero()  # row-major: by query, then index
            rows.append(hit[:, 0] + q0)
            cols.append(hit[:, 1] + xs)
    if not rows:
        empty = torch.empty(0, dtype=torch.int64, device=x.device)
        return empty, empty
    return torch.cat(rows), torch.cat(cols)


def _ball(nsample, max_radius, min_radius, xyz, offset, new_xyz, new_offset, backend=None):
    k = _nsample(nsample)
    max_r2, min_r2 = _radii2(max_radius, min_radius)
    x, y, ptr_x, ptr_y = _query_pair(xyz, offset, new_xyz, new_offset)
    m = y.shape[0]
    idx = torch.full((m, k), _PAD_IDX, dtype=torch.int32, device=x.device)
    dist = torch.full((m, k), _PAD_DIST, dtype=torch.float32, device=x.device)
    if m == 0 or k == 0 or x.shape[0] == 0:
        return idx, dist
    backend = backend or _backend(x.device)
    edges = _ball_edges_ragged if backend == "ragged" else _ball_edges_dense
    row, col = edges(x, y, ptr_x, ptr_y, max_r2)
    d2 = _sqdist(y[row], x[col])
    max_r2, min_r2 = max_r2.to(x.device), min_r2.to(x.device)
    keep = (d2 <= _SELF_EPS2) | ((d2 >= min_r2) & (d2 < max_r2))
    row, col, d2 = row[keep], col[keep], d2[keep]
    # (query, distance, index) order: edges arrive by query with indices ascending.
    order = torch.sort(d2, stable=True).indices
    order = order[torch.sort(row[order], stable=True).indices]
    row, col, d2 = row[order], col[order], d2[order]
    counts, starts = _row_starts(row, m)
    slot = torch.arange(k, device=x.device, dtype=torch.int64).unsqueeze(0)
    cnt = counts.unsqueeze(1)
    rank = torch.where(cnt > k, slot * cnt // max(k, 1), slot)  # strided subsample when too many
    valid = rank < cnt
    src = (starts.unsqueeze(1) + rank)[valid]
    idx[valid] = col[src].to(torch.int32)
    dist[valid] = _sqrt(d2[src])
    return idx, dist


def ball_query(nsample, max_radius, min_radius, xyz, offset, new_xyz=None, new_offset=None):
    """Up to ``nsample`` points of ``xyz`` (same cloud) in the annulus around each query.

    Candidates: ``d2 <= 1e-5`` (the point itself) or ``min_radius**2 <= d2 < max_radius**2``,
    sorted by (distance, index). If at most ``nsample`` qualify, all are returned; otherwise the
    ones at sorted positions ``floor(i * cnt / nsample)``. Any number of candidates (upstream:
    at most 2048, unchecked).

    Returns:
        ``(idx, dist)``: int32 ``(m, nsample)`` global indices and float32 Euclidean distances;
        missing slots ``-1`` / ``1e5``. Not differentiable.

    Raises:
        ValueError: ``min_radius >= max_radius`` (upstream: AssertionError), bad offsets.
    """
    with torch.no_grad():
        return _ball(nsample, max_radius, min_radius, xyz, offset, new_xyz, new_offset)


# --------------------------------------------------------------------------------------------
# farthest_point_sampling


def _fps(xyz, offset, new_offset, backend=None):
    x = _points(xyz, "xyz")
    ptr = _offsets(offset, x.shape[0], "offset", x.device)
    new_ptr = _offsets(new_offset, None, "new_offset", x.device)  # any total number of samples
    if new_ptr.numel() != ptr.numel():
        raise ValueError(
            f"new_offset: expected {ptr.numel() - 1} clouds (as offset), got {new_ptr.numel() - 1}"
        )
    counts = new_ptr.diff()
    sizes = ptr.diff()
    if bool(((sizes == 0) & (counts > 0)).any()):
        raise ValueError("new_offset: asks for samples from an empty cloud")
    total = int(new_ptr[-1])
    if total == 0:
        return torch.empty(0, dtype=torch.int32, device=x.device)
    backend = backend or _backend(x.device)
    if backend == "ragged":
        out = torch.ops.pcops.furthest_point_sample_ragged(x, ptr, counts, torch.zeros_like(counts))
        return out.to(torch.int32)
    import pcops

    parts = []
    for s, n, c in zip(ptr[:-1].tolist(), sizes.tolist(), counts.tolist()):
        if c == 0:
            continue
        take = min(c, n)
        local = pcops.furthest_point_sample(x[s:s + n].unsqueeze(0), take, 0)[0].to(torch.int64)
        if c > n:  # exhausted: the cloud's first point again, as upstream
            local = torch.cat([local, local.new_zeros(c - n)])
        parts.append(local + s)
    return torch.cat(parts).to(torch.int32)


def farthest_point_sampling(xyz, offset, new_offset):
    """Farthest point sampling per cloud, starting at each cloud's first point.

    Args:
        xyz: ``(n, 3)`` points; offset: cumulative cloud ends ``(b,)``.
        new_offset: cumulative sample ends ``(b,)``: cloud i gets ``new_offset[i] -
            new_offset[i - 1]`` samples (more than its points repeat its first point).

    Returns:
        int32 ``(new_offset[-1],)`` global indices in selection order. Not differentiable.
    """
    with torch.no_grad():
        return _fps(xyz, offset, new_offset)


# --------------------------------------------------------------------------------------------
# grouping, interpolation


def grouping(idx, feat, xyz, new_xyz=None, with_xyz=False):
    """Gathers ``feat`` rows (and relative ``xyz``) by ``idx``; idx ``-1`` gives zeros.

    Args:
        idx: ``(m, nsample)`` integer indices into ``feat`` / ``xyz`` (-1 = missing).
        feat: ``(n, c)`` features; xyz: ``(n, 3)`` points; new_xyz: ``(m, 3)`` centres (default
            ``xyz``, which needs m == n).
        with_xyz: prepend ``xyz[idx] - new_xyz`` (0 where idx is -1).

    Returns:
        ``(m, nsample, c)`` or ``(m, nsample, 3 + c)``; differentiable w.r.t. feat, xyz, new_xyz.
    """
    if new_xyz is None:
        new_xyz = xyz
    if idx.dim() != 2:
        raise ValueError(f"idx: expected shape (m, nsample), got {tuple(idx.shape)}")
    if idx.dtype.is_floating_point or idx.dtype == torch.bool:
        raise TypeError(f"idx: expected an integer tensor, got {idx.dtype}")
    if feat.dim() != 2 or feat.shape[0] != xyz.shape[0]:
        raise ValueError(f"feat: expected shape ({xyz.shape[0]}, c), got {tuple(feat.shape)}")
    m, nsample = idx.shape
    c = feat.shape[1]
    n = feat.shape[0]
    flat = idx.reshape(-1).long()
    if flat.numel() and (bool((flat < -1).any()) or bool((flat >= n).any())):
        raise ValueError(f"idx: expected indices in [-1, {n}), got [{int(flat.min())}, {int(flat.max())}]")
    flat = torch.where(flat < 0, torch.full_like(flat, n), flat)  # -1 -> the appended zero row
    feat_z = torch.cat([feat, feat.new_zeros(1, c)], dim=0)
    grouped_feat = feat_z[flat].view(m, nsample, c)
    if not with_xyz:
        return grouped_feat
    if new_xyz.shape[0] != m:
        raise ValueError(f"new_xyz: expected {m} rows (as idx), got {new_xyz.shape[0]}")
    xyz_z = torch.cat([xyz, xyz.new_zeros(1, xyz.shape[1])], dim=0)
    mask = (idx >= 0).to(xyz.dtype).unsqueeze(-1)
    grouped_xyz = (xyz_z[flat].view(m, nsample, -1) - new_xyz.unsqueeze(1)) * mask
    return torch.cat((grouped_xyz, grouped_feat.to(grouped_xyz.dtype)), -1)


def grouping2(input, idx):  # noqa: A002 (upstream's name)
    """``(n, c)`` features gathered by int ``(m, nsample)`` idx; -1 gives zeros (upstream: OOB)."""
    return grouping(idx, input, input.new_zeros(input.shape[0], 3))


def interpolation(xyz, new_xyz, feat, offset, new_offset, k=3):
    """Inverse-distance interpolation of ``feat`` from ``xyz`` onto ``new_xyz``.

    Weights ``1 / (dist + 1e-8)`` over the ``k`` nearest references of the same cloud,
    normalised. Padded neighbours (idx -1, dist 1e5) index ``feat[-1]`` with their tiny weight,
    as upstream. Returns ``(m, c)``, float32 for float32 features; differentiable w.r.t. feat.
    """
    if feat.dim() != 2 or feat.shape[0] != xyz.shape[0]:
        raise ValueError(f"feat: expected shape ({xyz.shape[0]}, c), got {tuple(feat.shape)}")
    with torch.no_grad():
        idx, dist = _knn(k, xyz, offset, new_xyz, new_offset)
    dist_recip = 1.0 / (dist + 1e-8)
    weight = dist_recip / torch.sum(dist_recip, dim=1, keepdim=True)
    out_dtype = torch.promote_types(feat.dtype, torch.float32)
    new_feat = feat.new_zeros((idx.shape[0], feat.shape[1]), dtype=out_dtype)
    if feat.shape[0] == 0:
        return new_feat
    for i in range(idx.shape[1]):
        new_feat = new_feat + feat[idx[:, i].long(), :] * weight[:, i].unsqueeze(-1).to(out_dtype)
    return new_feat


def interpolation2(xyz, new_xyz, input, offset, new_offset, k=3):  # noqa: A002
    """Upstream's CUDA Function variant of :func:`interpolation`; the same values and gradient."""
    return interpolation(xyz, new_xyz, input, offset, new_offset, k)


# --------------------------------------------------------------------------------------------
# utils


def knn_query_and_group(feat, xyz, offset=None, new_xyz=None, new_offset=None, idx=None,
                        nsample=None, with_xyz=False):
    """``knn_query`` (unless ``idx`` is given) then ``grouping``; returns ``(grouped, idx)``."""
    if idx is None:
        if nsample is None:
            raise ValueError("nsample: required when idx is not given")
        idx, _ = knn_query(nsample, xyz, offset, new_xyz, new_offset)
    return grouping(idx, feat, xyz, new_xyz, with_xyz), idx


def ball_query_and_group(feat, xyz, offset=None, new_xyz=None, new_offset=None, idx=None,
                         max_radio=None, min_radio=0, nsample=None, with_xyz=False):
    """``ball_query`` (unless ``idx`` is given) then ``grouping``; returns ``(grouped, idx)``."""
    if idx is None:
        if nsample is None or offset is None or max_radio is None or min_radio is None:
            raise ValueError("nsample, offset, max_radio and min_radio are required when idx is not given")
        idx, _ = ball_query(nsample, max_radio, min_radio, xyz, offset, new_xyz, new_offset)
    return grouping(idx, feat, xyz, new_xyz, with_xyz), idx


def batch2offset(batch):
    """Cumulative cloud ends (int32) of a sorted batch vector."""
    return torch.cumsum(batch.bincount(), dim=0).int()


def offset2batch(offset):
    """int64 batch vector of cumulative cloud ends."""
    if not isinstance(offset, Tensor):
        offset = torch.tensor(list(offset), dtype=torch.int64)
    ends = offset.to(torch.int64)
    sizes = torch.diff(ends, prepend=ends.new_zeros(1))
    return torch.repeat_interleave(torch.arange(ends.numel(), device=offset.device), sizes).long()


def _not_provided(name):
    def fn(*args, **kwargs):
        raise NotImplementedError(f"pointops.{name} is not provided by the pcops stand-in")

    fn.__name__ = name
    fn.__qualname__ = name
    fn.__doc__ = "Not provided by the pcops stand-in (raises NotImplementedError)."
    return fn


query_and_group = _not_provided("query_and_group")
random_ball_query = _not_provided("random_ball_query")
subtraction = _not_provided("subtraction")
aggregation = _not_provided("aggregation")
attention_relation_step = _not_provided("attention_relation_step")
attention_fusion_step = _not_provided("attention_fusion_step")


# --------------------------------------------------------------------------------------------
# modules

_SUBMODULES = {
    "query": ("knn_query", "ball_query", "random_ball_query"),
    "sampling": ("farthest_point_sampling",),
    "grouping": ("grouping", "grouping2"),
    "interpolation": ("interpolation", "interpolation2"),
    "subtraction": ("subtraction",),
    "aggregation": ("aggregation",),
    "attention": ("attention_relation_step", "attention_fusion_step"),
    "utils": ("query_and_group", "knn_query_and_group", "ball_query_and_group", "batch2offset",
              "offset2batch"),
}


_module = functools.partial(stand_in_module, origin=__file__)  # module objects of this stand-in


def build_modules(name: str = "pointops") -> dict:
    """``{dotted name: module}``: the package (upstream's ``functions/``) and its submodules."""
    this = sys.modules[__name__]
    package = _module(name, __doc__, package=True)
    modules = {name: package}
    for sub, names in _SUBMODULES.items():
        module = _module(f"{name}.{sub}", f"pointops.{sub} (pcops stand-in)")
        module.torch = torch
        for attr in names:
            setattr(module, attr, getattr(this, attr))
        modules[module.__name__] = module
        setattr(package, sub, module)
    # As upstream's ``from .grouping import grouping``: the functions shadow the submodules of
    # the same name (grouping, interpolation) as package attributes.
    for names in _SUBMODULES.values():
        for attr in names:
            setattr(package, attr, getattr(this, attr))
    package.__version__ = __version__
    package.__all__ = [a for names in _SUBMODULES.values() for a in names]
    return modules
