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
