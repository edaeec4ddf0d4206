"""Exact reference oracles for tests and benchmarks.

Brute-force NumPy implementations of the numerical contracts (docs/ops/*.md). Every squared
distance is computed in float32 exactly as the contract states, in coordinate order and without
fused multiply-add: ``d_i = fl(q_i - x_i)``, ``s = fl(...fl(fl(d_0*d_0) + fl(d_1*d_1))...)``.
NumPy evaluates each product and each sum as a separate correctly rounded float32 operation, so
the results are bitwise what the contract defines. The matrix-product identity
``|q|^2 + |x|^2 - 2 q.x`` is never used.

The oracles are slow (O(M*N) memory per chunk of queries) and meant for clouds of at most a few
ten thousand points. Inputs may be torch tensors (any float dtype that converts exactly to
float32, any device) or NumPy arrays; results are CPU torch tensors.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = [
    "as_float32",
    "squared_distances",
    "furthest_point_sample",
    "knn",
    "ball_query",
    "ball_query_threshold",
    "ball_query_dist2_torch",
    "three_nn",
    "three_interpolate",
    "three_interpolate_backward",
    "gather_points",
    "gather_points_backward",
    "group_points",
    "group_points_backward",
]

_CHUNK_ELEMENTS = 1 << 22


def as_float32(x) -> np.ndarray:
    """Coordinates as a float32 NumPy array (float16/bfloat16 convert exactly)."""
    if isinstance(x, torch.Tensor):
        if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise TypeError(f"oracle: expected float32/float16/bfloat16 coordinates, got {x.dtype}")
        return x.detach().to("cpu", torch.float32).numpy()
    a = np.asarray(x)
    if a.dtype != np.float32:
        if a.dtype not in (np.float16,):
            raise TypeError(f"oracle: expected float32 or float16 coordinates, got {a.dtype}")
        a = a.astype(np.float32)
    return a


def _lengths(lengths, batch: int, count: int) -> np.ndarray:
    if lengths is None:
        return np.full(batch, count, dtype=np.int64)
    if isinstance(lengths, torch.Tensor):
        lengths = lengths.detach().cpu().numpy()
    out = np.asarray(lengths, dtype=np.int64)
    assert out.shape == (batch,), out.shape
    assert ((out >= 0) & (out <= count)).all()
    return out


def squared_distances(query, ref) -> np.ndarray:
    """``s[i, j]`` for ``query [M, D]`` and ``ref [N, D]``: float32, contract order, no FMA."""
    q = as_float32(query)
    x = as_float32(ref)
    assert q.ndim == 2 and x.ndim == 2 and q.shape[1] == x.shape[1]
    m, n, dim = q.shape[0], x.shape[0], q.shape[1]
    out = np.empty((m, n), dtype=np.float32)
    rows = max(1, _CHUNK_ELEMENTS // max(n, 1))
    with np.errstate(over="ignore", invalid="ignore"):
        for r0 in range(0, m, rows):
            qc = q[r0 : r0 + rows]
            d = qc[:, None, 0] - x[None, :, 0]
            s = d * d
            for c in range(1, dim):
                d = qc[:, None, c] - x[None, :, c]
                s = s + d * d
            out[r0 : r0 + rows] = s
    return out


def furthest_point_sample(points, num_samples: int, start_index: int = 0, lengths=None,
                          skip_near_origin: bool = False) -> torch.Tensor:
    """Furthest point sampling by the contract's rule, one full pass per step."""
    p = as_float32(points)
    batch, count, _ = p.shape
    lens = _lengths(lengths, batch, count)
    out = np.full((batch, num_samples), -1, dtype=np.int64)
    for b in range(batch):
        n = int(lens[b])
        if n == 0:
            continue
        x = p[b, :n]
        steps = min(num_samples, n) if lengths is not None else num_samples
        eligible = np.ones(n, dtype=bool)
        if skip_near_origin:
            with np.errstate(over="ignore", invalid="ignore"):
                norm = (x[:, 0] * x[:, 0] + x[:, 1] * x[:, 1]) + x[:, 2] * x[:, 2]
            eligible = norm > np.float32(1e-3)
        m = np.full(n, np.inf, dtype=np.float32)
        c = start_index
        for t in range(steps):
            out[b, t] = c
            s = squared_distances(x[c : c + 1], x)[0]
            s[~np.isfinite(s)] = 0.0
            np.minimum(m, s, out=m)
            cand = np.where(eligible, m, np.float32(-1.0))
            c = int(np.argmax(cand)) if eligible.any() else 0  # argmax: the first (smallest) index
    return torch.from_numpy(out)


def knn(query, ref, k: int, query_lengths=None, ref_lengths=None):
    """(dist [B, M, k] float32 Euclidean, idx [B, M, k] int64) ordered by (s, index).

    NaN squared distances sort as +inf (then by index); their returned distance is +inf.
    Slots past the available references and queries past ``query_lengths`` hold (inf, -1).
    """
    q = as_float32(query)
    x = as_float32(ref)
    batch, m_count, _ = q.shape
    n_count = x.shape[1]
    qlen = _lengths(query_lengths, batch, m_count)
    rlen = _lengths(ref_lengths, batch, n_count)
    if ref_lengths is None and k > n_count:
        raise ValueError("oracle knn: k > N without ref_lengths")
    dist = np.full((batch, m_count, k), np.inf, dtype=np.float32)
    idx = np.full((batch, m_count, k), -1, dtype=np.int64)
    for b in range(batch):
        mq, n = int(qlen[b]), int(rlen[b])
        if mq == 0 or n == 0 or k == 0:
            continue
        s = squared_distances(q[b, :mq], x[b, :n])
        key = np.where(np.isnan(s), np.float32(np.inf), s)
        order = np.argsort(key, axis=1, kind="stable")[:, :k]  # stable: ties by index
        kk = order.shape[1]
        idx[b, :mq, :kk] = order
        dist[b, :mq, :kk] = np.sqrt(np.take_along_axis(key, order, axis=1))
    return torch.from_numpy(dist), torch.from_numpy(idx)


def ball_query_threshold(radius: float) -> np.float32:
    """R2 = fl32(fl32(r) * fl32(r))."""
    r = np.float32(radius)
    with np.errstate(over="ignore"):
        return np.float32(r * r)


def ball_query(query, ref, radius: float, K: int, query_lengths=None, ref_lengths=None):
    """(dist2 [B, M, K] float32, idx [B, M, K] int64): the first K references with s < R2."""
    q = as_float32(query)
    x = as_float32(ref)
    batch, m_count, _ = q.shape
    n_count = x.shape[1]
    qlen = _lengths(query_lengths, batch, m_count)
    rlen = _lengths(ref_lengths, batch, n_count)
    r2 = ball_query_threshold(radius)
    dist2 = np.zeros((batch, m_count, K), dtype=np.float32)
    idx = np.full((batch, m_count, K), -1, dtype=np.int64)
    for b in range(batch):
        mq, n = int(qlen[b]), int(rlen[b])
        if mq == 0 or n == 0 or K == 0:
            continue
        s = squared_distances(q[b, :mq], x[b, :n])
        with np.errstate(invalid="ignore"):
            hit = s < r2  # NaN never matches
        for i in range(mq):
            js = np.flatnonzero(hit[i])[:K]
            idx[b, i, : js.size] = js
            dist2[b, i, : js.size] = s[i, js]
    return torch.from_numpy(dist2), torch.from_numpy(idx)


def ball_query_dist2_torch(query: torch.Tensor, ref: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """Differentiable pure-PyTorch squared distances of the slots selected by ``idx``.

    Padded slots (idx < 0) give 0 and contribute no gradient. Computed in float32 in the
    contract's order; gradients flow to ``query`` and ``ref`` through gather.
    """
    q = query.float()
    x = ref.float()
    b, m, k = idx.shape
    mask = idx >= 0
    safe = torch.where(mask, idx, torch.zeros_like(idx))
    g = torch.gather(x, 1, safe.reshape(b, m * k, 1).expand(b, m * k, 3)).reshape(b, m, k, 3)
    d = q.unsqueeze(2) - g
    s = (d[..., 0] * d[..., 0] + d[..., 1] * d[..., 1]) + d[..., 2] * d[..., 2]
    return torch.where(mask, s, torch.zeros_like(s))


# ------------------------------------------------------------------ interpolation and gathers
# Float32 NumPy references of the fixed evaluation orders of docs/ops/three_interpolate.md and
# docs/ops/gather_points.md: every product and every sum is one correctly rounded float32
# operation, accumulators start at +0, slots with index -1 are skipped.


def _indices(idx) -> np.ndarray:
    if isinstance(idx, torch.Tensor):
        return idx.detach().cpu().to(torch.int64).numpy()
    return np.asarray(idx, dtype=np.int64)


def _values(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", torch.float32).numpy()
    return np.asarray(x, dtype=np.float32)


def three_nn(unknown, known, unknown_lengths=None, known_lengths=None):
    """(dist [B, N, 3], idx [B, N, 3]): knn with k = 3 (M >= 3 required)."""
    if as_float32(known).shape[1] < 3:
        raise ValueError("oracle three_nn: M < 3")
    return knn(unknown, known, 3, unknown_lengths, known_lengths)


def _take(f: np.ndarray, j: np.ndarray) -> np.ndarray:
    """f[b, c, j[b, n]] as [B, C, N] (indices -1 read slot 0, or 0 when there is none)."""
    valid = j >= 0
    if f.shape[2] == 0:
        return np.zeros((f.shape[0], f.shape[1], j.shape[1]), dtype=np.float32)
    safe = np.where(valid, j, 0)
    return np.take_along_axis(f, np.broadcast_to(safe[:, None, :], (f.shape[0], f.shape[1], j.shape[1])), axis=2)


def three_interpolate(features, idx, weight) -> torch.Tensor:
    """[B, C, N] float32: acc = +0; acc = fl(acc + fl(w_t * f_t)) for t = 0, 1, 2 (idx >= 0)."""
    f, i, w = _values(features), _indices(idx), _values(weight)
    B, C, _ = f.shape
    N = i.shape[1]
    out = np.zeros((B, C, N), dtype=np.float32)
    with np.errstate(all="ignore"):
        for t in range(3):
            j = i[:, :, t]
            p = w[:, None, :, t] * _take(f, j)
            out = np.where((j >= 0)[:, None, :], out + p, out)
    return torch.from_numpy(out)


def three_interpolate_backward(grad_out, features, idx, weight) -> tuple[torch.Tensor, torch.Tensor]:
    """(grad_features [B, C, M], grad_weight [B, N, 3]) in the contract's float32 order."""
    g, f, i, w = _values(grad_out), _values(features), _indices(idx), _values(weight)
    B, C, M = f.shape
    N = i.shape[1]
    gf = np.zeros((B, C, M), dtype=np.float32)
    gw = np.zeros((B, N, 3), dtype=np.float32)
    ci = np.arange(C)[None, :]
    with np.errstate(all="ignore"):
        for n in range(N):  # ascending (n, t); within one step every (b, c) target is distinct
            for t in range(3):
                bb = np.flatnonzero(i[:, n, t] >= 0)
                if bb.size:
                    gf[bb[:, None], ci, i[bb, n, t][:, None]] += g[bb, :, n] * w[bb, n, t][:, None]
        for c in range(C):  # ascending channels
            for t in range(3):
                j = i[:, :, t]
                fc = _take(f[:, c : c + 1, :], j)[:, 0, :]
                gw[:, :, t] = np.where(j >= 0, gw[:, :, t] + g[:, c, :] * fc, gw[:, :, t])
    return torch.from_numpy(gf), torch.from_numpy(gw)


def gather_points(features, idx) -> torch.Tensor:
    """[B, C, M]: features[b, c, idx[b, m]], 0 where idx = -1."""
    f, i = _values(features), _indices(idx)
    return torch.from_numpy(np.where((i >= 0)[:, None, :], _take(f, i), np.float32(0.0)).astype(np.float32))


def gather_points_backward(grad_out, idx, count: int) -> torch.Tensor:
    """[B, C, count]: scatter-add of grad_out in ascending m, float32 from +0, -1 skipped."""
    g, i = _values(grad_out), _indices(idx)
    B, C, M = g.shape
    gf = np.zeros((B, C, count), dtype=np.float32)
    ci = np.arange(C)[None, :]
    for m in range(M):
        bb = np.flatnonzero(i[:, m] >= 0)
        if bb.size:
            gf[bb[:, None], ci, i[bb, m][:, None]] += g[bb, :, m]
    return torch.from_numpy(gf)


def group_points(features, idx) -> torch.Tensor:
    """[B, C, M, S]: gather_points over the flattened (m, s) index."""
    i = _indices(idx)
    B, M, S = i.shape
    out = gather_points(features, i.reshape(B, M * S))
    return out.reshape(out.shape[0], out.shape[1], M, S)


def group_points_backward(grad_out, idx, count: int) -> torch.Tensor:
    """[B, C, count]: scatter-add in ascending (m, s) order."""
    g, i = _values(grad_out), _indices(idx)
    B, C, M, S = g.shape
    return gather_points_backward(g.reshape(B, C, M * S), i.reshape(B, M * S), count)
