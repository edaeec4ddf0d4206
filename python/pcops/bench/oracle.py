"""Exact NumPy oracles of the operator contracts (CONTRACTS.md), independent of the pcops library.

The squared distance is the contract's: ``d_i = fl(q_i - x_i)``, ``s = fl(fl(d0*d0) + fl(d1*d1)) +
fl(d2*d2)`` in float32, one NumPy ufunc per operation (so nothing is fused). Large inputs use a
float64 k-d tree (SciPy) to find a candidate superset with a safety margin, then apply the exact
float32 rule to the candidates; the result is the same as brute force.
"""

from __future__ import annotations

import numpy as np

# Relative margin on Euclidean distances between the float64 tree and the float32 contract; the
# float32 rounding of s is below 1e-6 relative, so 1e-4 is far on the safe side.
_MARGIN = 1e-4


def sqdist(q: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Contract squared distances between every row of q [M,3] and x [N,3] -> float32 [M,N]."""
    q = np.asarray(q, np.float32)
    x = np.asarray(x, np.float32)
    d = q[:, None, 0] - x[None, :, 0]
    s = d * d
    for i in range(1, q.shape[1]):
        d = q[:, None, i] - x[None, :, i]
        s = s + d * d
    return s


def _sqdist_pairs(q: np.ndarray, x: np.ndarray) -> np.ndarray:
    d = q[:, 0] - x[:, 0]
    s = d * d
    for i in range(1, q.shape[1]):
        d = q[:, i] - x[:, i]
        s = s + d * d
    return s


def fps(points: np.ndarray, num_samples: int, start_index: int = 0) -> np.ndarray:
    """Furthest point sampling: smallest index among the maxima of the running minimum s."""
    x = np.ascontiguousarray(points, np.float32)
    n = len(x)
    out = np.empty(num_samples, np.int64)
    if num_samples == 0:
        return out
    cols = [np.ascontiguousarray(x[:, i]) for i in range(x.shape[1])]
    best = np.full(n, np.inf, np.float32)
    cur = int(start_index)
    tmp = np.empty(n, np.float32)
    s = np.empty(n, np.float32)
    for t in range(num_samples):
        out[t] = cur
        c = x[cur]
        np.subtract(cols[0], c[0], out=tmp)
        np.multiply(tmp, tmp, out=s)
        for i in range(1, len(cols)):
            np.subtract(cols[i], c[i], out=tmp)
            np.multiply(tmp, tmp, out=tmp)
            np.add(s, tmp, out=s)
        s[~np.isfinite(s)] = 0.0
        np.minimum(best, s, out=best)
        cur = int(np.argmax(best))
    return out


def _first_k_sorted(s_rows: np.ndarray, idx_rows: np.ndarray | None, k: int) -> np.ndarray:
    """Per row, the k (s, index)-smallest, NaN as +inf; idx_rows maps columns to reference ids."""
    s = np.where(np.isnan(s_rows), np.float32(np.inf), s_rows)
    m, n = s.shape
    ids = np.broadcast_to(np.arange(n), s.shape) if idx_rows is None else idx_rows
    if k < n:
        part = np.argpartition(s, k - 1, axis=1)
        kth = np.take_along_axis(s, part[:, k - 1 : k], axis=1)
        # All candidates with s <= kth value (ties at the boundary included), then sort exactly.
        out = np.empty((m, k), np.int64)
        for r in range(m):
            sel = np.nonzero(s[r] <= kth[r, 0])[0]
            order = np.lexsort((ids[r, sel], s[r, sel]))[:k]
            out[r] = ids[r, sel[order]]
        return out
    order = np.lexsort((ids, s), axis=-1)
    return np.take_along_axis(np.asarray(ids), order, axis=1)[:, :k].astype(np.int64)


def _sort_rows(s_rows: np.ndarray, ids: np.ndarray, k: int) -> np.ndarray:
    """Per row, the k (s, index)-smallest of a few candidates (full sort, vectorised)."""
    s = np.where(np.isnan(s_rows), np.float32(np.inf), s_rows)
    order = np.lexsort((ids, s), axis=-1)[:, :k]
    return np.take_along_axis(ids, order, axis=1).astype(np.int64)


def knn(query: np.ndarray, ref: np.ndarray, k: int, chunk: int = 0) -> np.ndarray:
    """int64 [M, k] indices ordered by (contract s, index)."""
    query = np.ascontiguousarray(query, np.float32)
    ref = np.ascontiguousarray(ref, np.float32)
    m, n = len(query), len(ref)
    if k > n:
        raise ValueError(f"k: expected <= {n}, got {k}")
    if k == 0 or m == 0:
        return np.zeros((m, k), np.int64)
    if n > 50_000 and np.isfinite(ref).all() and np.isfinite(query).all():
        try:
            return _knn_tree(query, ref, k)
        except ImportError:
            pass
    chunk = chunk or max(1, min(m, (1 << 24) // max(n, 1)))
    return np.concatenate([_first_k_sorted(sqdist(query[i : i + chunk], ref), None, k)
                           for i in range(0, m, chunk)])


def _knn_tree(query, ref, k):
    from scipy.spatial import cKDTree

    tree = cKDTree(ref.astype(np.float64))
    q64 = query.astype(np.float64)
    extra = max(8, k // 2)
    kk = min(len(ref), k + extra)
    dist, idx = tree.query(q64, k=kk, workers=-1)
    dist = dist.reshape(len(query), kk)
    idx = idx.reshape(len(query), kk)
    out = np.empty((len(query), k), np.int64)
    # Rows whose candidate list provably holds the contract's top k: the (kk)-th true distance lies
    # beyond the k-th one by more than the rounding margin (or all references are candidates).
    safe = (dist[:, kk - 1] > dist[:, k - 1] * (1 + _MARGIN) + 1e-30) | (kk == len(ref))
    rows = np.nonzero(safe)[0]
    for start in range(0, len(rows), 4096):
        r = rows[start : start + 4096]
        cand = idx[r]
        s = _sqdist_pairs(np.repeat(query[r], kk, axis=0), ref[cand.ravel()]).reshape(len(r), kk)
        out[r] = _sort_rows(s, cand, k)
    for r in np.nonzero(~safe)[0]:
        cand = np.asarray(tree.query_ball_point(q64[r], dist[r, k - 1] * (1 + _MARGIN) + 1e-30), np.int64)
        s = _sqdist_pairs(np.repeat(query[r : r + 1], len(cand), axis=0), ref[cand])[None]
        out[r] = _sort_rows(s, cand[None], k)[0]
    return out


def ball_query(query: np.ndarray, ref: np.ndarray, radius: float, K: int) -> np.ndarray:
    """int64 [M, K]: the first K references (input order) with s < fl32(fl32(r)*fl32(r)), -1 padded."""
    query = np.ascontiguousarray(query, np.float32)
    ref = np.ascontiguousarray(ref, np.float32)
    r32 = np.float32(radius)
    r2 = np.float32(r32 * r32)
    m, n = len(query), len(ref)
    out = np.full((m, K), -1, np.int64)
    if K == 0 or m == 0 or n == 0:
        return out
    if n > 50_000 and np.isfinite(ref).all() and np.isfinite(query).all():
        try:
            from scipy.spatial import cKDTree
        except ImportError:
            pass
        else:
            tree = cKDTree(ref.astype(np.float64))
            lists = tree.query_ball_point(query.astype(np.float64), float(r32) * (1 + _MARGIN) + 1e-30,
                                          workers=-1)
            for i, cand in enumerate(lists):
                cand = np.sort(np.asarray(cand, np.int64))
                if len(cand) == 0:
                    continue
                s = _sqdist_pairs(np.repeat(query[i : i + 1], len(cand), axis=0), ref[cand])
                hit = cand[s < r2][:K]
                out[i, : len(hit)] = hit
            return out
    chunk = max(1, min(m, (1 << 24) // n))
    for i in range(0, m, chunk):
        mask = sqdist(query[i : i + chunk], ref) < r2
        for r, row in enumerate(mask):
            hit = np.flatnonzero(row)[:K]
            out[i + r, : len(hit)] = hit
    return out


# ----------------------------------------------------------------------------------------------
# Flat graph operators (pcops.flat.knn_graph / radius_graph): brute force on a subset of centres
# ----------------------------------------------------------------------------------------------


def _rows_by_cloud(rows: np.ndarray, ptr: np.ndarray):
    """(cloud id, positions into rows) for the clouds that hold some of ``rows``."""
    cloud = np.searchsorted(ptr, rows, side="right") - 1
    for b in np.unique(cloud):
        yield int(b), np.nonzero(cloud == b)[0]


def knn_graph_rows(points: np.ndarray, ptr: np.ndarray, rows: np.ndarray, k: int,
                   loop: bool = False) -> list[np.ndarray]:
    """For each centre in ``rows``, its neighbours in ``pcops.flat.knn_graph(x, k, batch, loop)``
    (global indices, in edge order): brute force in float32 against the centre's own cloud
    (``ptr``: CSR offsets), the k (+1 without loop) (s, index)-smallest, then the self pair
    dropped (a centre whose self is not among them keeps k + 1, as torch_cluster)."""
    x = np.ascontiguousarray(points, np.float32)
    rows = np.asarray(rows, np.int64)
    out: list = [None] * len(rows)
    for b, pos in _rows_by_cloud(rows, ptr):
        lo, hi = int(ptr[b]), int(ptr[b + 1])
        kk = min(k + (0 if loop else 1), hi - lo)
        chunk = max(1, (1 << 24) // max(hi - lo, 1))
        for i in range(0, len(pos), chunk):
            part = pos[i : i + chunk]
            nn = _first_k_sorted(sqdist(x[rows[part]], x[lo:hi]), None, kk) + lo
            for j, r in enumerate(part):
                out[r] = nn[j] if loop else nn[j][nn[j] != rows[r]]
    return out


def radius_graph_rows(points: np.ndarray, ptr: np.ndarray, rows: np.ndarray, r: float,
                      max_num_neighbors: int, loop: bool = False) -> tuple[list[np.ndarray], np.ndarray]:
    """For each centre in ``rows``, its neighbours in ``pcops.flat.radius_graph(x, r, batch,
    loop, max_num_neighbors)``: the first ``max_num_neighbors`` points of its cloud (index order)
    with ``s < fl32(r * r)`` (product in float64), the self pair skipped before counting unless
    ``loop``. Also returns each centre's uncapped neighbour count."""
    x = np.ascontiguousarray(points, np.float32)
    rows = np.asarray(rows, np.int64)
    r2 = np.float32(float(r) * float(r))
    out: list = [None] * len(rows)
    degree = np.zeros(len(rows), np.int64)
    for b, pos in _rows_by_cloud(rows, ptr):
        lo, hi = int(ptr[b]), int(ptr[b + 1])
        chunk = max(1, (1 << 24) // max(hi - lo, 1))
        for i in range(0, len(pos), chunk):
            part = pos[i : i + chunk]
            mask = sqdist(x[rows[part]], x[lo:hi]) < r2
            if not loop:
                mask[np.arange(len(part)), rows[part] - lo] = False
            for j, q in enumerate(part):
                hit = np.flatnonzero(mask[j])
                degree[q] = len(hit)
                out[q] = hit[:max_num_neighbors] + lo
    return out, degree


def graph_errors(edge_index: np.ndarray, rows: np.ndarray, want: list[np.ndarray]) -> dict[str, int]:
    """Counts of a ``[2, E]`` edge list (row 0 = neighbour, row 1 = centre; torch_cluster's
    source_to_target flow) against the oracle lists of the centres ``rows`` (edges of other
    centres are not checked). ``missing``: oracle edges absent; ``extra``: returned edges not in
    the oracle (a duplicate counts); ``misplaced``: positions of a centre's edge list (in returned
    order) whose neighbour differs from the oracle's at that position, a length difference
    counting as misplaced positions."""
    ei = np.asarray(edge_index).reshape(2, -1).astype(np.int64, copy=False)
    nbr, centre = ei[0], ei[1]
    rows = np.asarray(rows, np.int64)
    n = int(max(centre.max(initial=-1), rows.max(initial=-1))) + 1
    slot = np.full(n, -1, np.int64)
    slot[rows] = np.arange(len(rows))
    ok = (centre >= 0)
    s = np.full(len(centre), -1, np.int64)
    s[ok] = slot[centre[ok]]
    keep = np.nonzero(s >= 0)[0]
    order = keep[np.argsort(s[keep], kind="stable")]  # edges of checked centres, grouped, in returned order
    bounds = np.searchsorted(s[order], np.arange(len(rows) + 1))
    got_nbr = nbr[order]
    missing = extra = misplaced = 0
    for i, w in enumerate(want):
        g = got_nbr[bounds[i] : bounds[i + 1]]
        w = np.asarray(w, np.int64)
        common = len(np.intersect1d(g, w))
        missing += len(w) - common
        extra += len(g) - common
        m = min(len(g), len(w))
        misplaced += int(np.count_nonzero(g[:m] != w[:m])) + abs(len(g) - len(w))
    return {"missing": int(missing), "extra": int(extra), "misplaced": int(misplaced)}


# ----------------------------------------------------------------------------------------------
# Correctness counts
# ----------------------------------------------------------------------------------------------


def fps_mismatches(got: np.ndarray, want: np.ndarray) -> int:
    """Positions where the selected index differs from the oracle's."""
    got = np.asarray(got).reshape(-1)
    want = np.asarray(want).reshape(-1)
    if got.shape != want.shape:
        return int(max(len(got), len(want)))
    return int(np.count_nonzero(got != want))


def fps_point_set_missing(got_points: np.ndarray, points: np.ndarray, want: np.ndarray) -> int:
    """For peers that return coordinates (in any order): oracle-selected points not returned."""
    ref = np.ascontiguousarray(np.asarray(points, np.float32)[np.asarray(want)])
    got = np.ascontiguousarray(np.asarray(got_points, np.float32).reshape(-1, ref.shape[1]))
    row = np.dtype((np.void, ref.dtype.itemsize * ref.shape[1]))
    missing = int(np.count_nonzero(~np.isin(ref.view(row).ravel(), got.view(row).ravel())))
    return missing + abs(len(got) - len(ref))


def knn_errors(got: np.ndarray, want: np.ndarray) -> dict[str, int]:
    """``missing``: oracle neighbours absent from the row's set; ``misplaced``: positions whose
    index differs from the oracle's at that position."""
    got = np.asarray(got, np.int64).reshape(want.shape)
    misplaced = int(np.count_nonzero(got != want))
    missing = 0
    if misplaced:
        rows = np.nonzero(np.any(got != want, axis=1))[0]
        for r in rows:
            missing += len(np.setdiff1d(want[r], got[r], assume_unique=False))
    return {"missing": int(missing), "misplaced": misplaced}


def ball_query_mismatches(got: np.ndarray, want: np.ndarray) -> int:
    """Slots whose index differs from the first-K oracle (padding compared as -1)."""
    got = np.asarray(got, np.int64).reshape(want.shape)
    got = np.where(got < 0, -1, got)
    return int(np.count_nonzero(got != want))


# ----------------------------------------------------------------------------------------------
# point_conv (docs/ops/point_conv.md): every fold in the contract's order, float32, one rounding
# for each product and each sum.
# ----------------------------------------------------------------------------------------------


def _rounds(t: np.ndarray, cols: tuple[int, int, int]):
    """The triplet rows sorted by ``cols`` (most significant first) and dealt into rounds: round p
    holds the p-th row of every group of equal ``cols[0]``, so one round updates distinct rows.
    Yields the (i, j, k) columns of each round."""
    order = np.lexsort((t[:, cols[2]], t[:, cols[1]], t[:, cols[0]]))
    s = t[order]
    key = s[:, cols[0]]
    idx = np.arange(len(s))
    first = np.ones(len(s), bool)
    first[1:] = key[1:] != key[:-1]
    rank = idx - np.maximum.accumulate(np.where(first, idx, 0))
    for p in range(int(rank.max()) + 1 if len(rank) else 0):
        r = s[rank == p]
        yield r[:, 0], r[:, 1], r[:, 2]


def vvor_piece_length(triplets: int, channels_out: int, channels_in: int) -> int:
    """The piece length L of the weight gradient's folds (pcops::core::vvor_piece_length): 2^12,
    doubled while floor(T / L) float32 matrices of C_out x C_in would pass 64 MiB."""
    fit = (64 << 20) // (max(channels_out * channels_in, 1) * 4)
    L = 1 << 12
    while L < triplets and triplets // L > fit:
        L *= 2
    return L


def point_conv(features: np.ndarray, weights: np.ndarray, triplets: np.ndarray, num_out: int,
               grad: np.ndarray, chunk: int | None = None, select=None):
    """Forward, grad_features and grad_weights of ``point_conv`` in the contract's float32 order
    (features [N_in, C_in], weights [K, C_out, C_in], triplets [T, 3] rows (i, j, k), all in
    range; grad [N_out, C_out] the upstream gradient). Forward: out[i, o] folds i's triplets in
    (k, j) order, input channels ascending; grad_features[j, c] folds j's in (k, i) order, output
    channels ascending; grad_weights[k, o, c] folds k's in (i, j) order in pieces of
    ``vvor_piece_length`` triplets (each a sequential float32 accumulate from +0, ``chunk``
    triplets at a time, by default as many as keep the products near 16 MB; the pieces' sums then
    added in order from +0).
    Returns the three float32 arrays; with ``select = (out_rows, in_rows, out_channels)`` (index
    arrays) only those parts: out[out_rows], grad_features[in_rows] and
    grad_weights[:, out_channels] (each element's fold does not depend on the others)."""
    F = np.ascontiguousarray(features, np.float32)
    W = np.ascontiguousarray(weights, np.float32)
    G = np.ascontiguousarray(grad, np.float32)
    t = np.asarray(triplets, np.int64).reshape(-1, 3)
    K, co, ci = W.shape
    out_rows = in_rows = None
    Gw = G  # the upstream gradient's columns of the checked weight-gradient rows
    if select is not None:
        out_rows, in_rows, o_sel = (np.asarray(x, np.int64) for x in select)
        Gw = np.ascontiguousarray(G[:, o_sel])
        co = len(o_sel)
    if chunk is None:
        chunk = max(16, (1 << 22) // max(co * ci, 1))
    t_out = t if out_rows is None else t[np.isin(t[:, 0], out_rows)]
    t_in = t if in_rows is None else t[np.isin(t[:, 1], in_rows)]
    out = np.zeros((num_out, W.shape[1]), np.float32)
    for i, j, k in _rounds(t_out, (0, 2, 1)):
        acc = out[i]
        for c in range(ci):
            acc = acc + W[k, :, c] * F[j, c][:, None]
        out[i] = acc
    gf = np.zeros_like(F)
    for i, j, k in _rounds(t_in, (1, 2, 0)):
        acc = gf[j]
        for o in range(W.shape[1]):
            acc = acc + W[k, o, :] * G[i, o][:, None]
        gf[j] = acc
    gw = np.zeros((K, co, ci), np.float32)
    s = t[np.lexsort((t[:, 1], t[:, 0], t[:, 2]))]
    bounds = np.searchsorted(s[:, 2], np.arange(K + 1))
    piece = vvor_piece_length(len(t), W.shape[1], ci)
    for k in range(K):
        total = np.zeros((co, ci), np.float32)  # +0; the pieces' sums in order
        for a in range(bounds[k], bounds[k + 1], piece):
            b = min(a + piece, bounds[k + 1])
            carry = np.zeros((1, co, ci), np.float32)  # +0
            for p in range(a, b, chunk):
                r = s[p:min(p + chunk, b)]
                prod = Gw[r[:, 0]][:, :, None] * F[r[:, 1]][:, None, :]
                # ufunc.accumulate is the sequential fold acc = fl(acc + x) in float32.
                carry = np.add.accumulate(np.concatenate([carry, prod]), axis=0)[-1:]
            total = total + carry[0]
        gw[k] = total
    if select is not None:
        return out[out_rows], gf[in_rows], gw
    return out, gf, gw


def point_conv_float64(features: np.ndarray, weights: np.ndarray, triplets: np.ndarray, num_out: int,
                       grad: np.ndarray, select=None) -> dict:
    """``point_conv``'s forward, grad_features and grad_weights in float64 (the reference of the
    bfloat16 cases), with each element's sum of absolute terms and the number of float32 sums
    behind it at most (forward: the most triplets of one output row plus C_in; grad_features: of
    one input row plus C_out; grad_weights: of one kernel cell). ``select`` as in ``point_conv``.
    Returns {"parts", "magnitudes", "terms"}, three entries each."""
    F = np.asarray(features, np.float64)
    W = np.asarray(weights, np.float64)
    G = np.asarray(grad, np.float64)
    t = np.asarray(triplets, np.int64).reshape(-1, 3)
    K, co, ci = W.shape
    i, j, k = t[:, 0], t[:, 1], t[:, 2]
    n_in = F.shape[0]
    out_rows, in_rows, o_sel = select if select is not None else (None, None, None)

    def rows_sum(rows, n_rows, key, width, term):  # per (selected) row: its triplets' term(positions, cell)
        use = np.ones(len(t), bool) if rows is None else np.isin(key, rows)
        at = key[use] if rows is None else np.searchsorted(rows, key[use])
        kk = k[use]
        val = np.zeros((n_rows if rows is None else len(rows), width))
        mag = np.zeros_like(val)
        for cell in range(K):
            m = kk == cell
            if m.any():
                sub = np.flatnonzero(use)[m]
                np.add.at(val, at[m], term(sub, cell, False))
                np.add.at(mag, at[m], term(sub, cell, True))
        return val, mag

    def fwd_term(sub, cell, absolute):
        f, w = F[j[sub]], W[cell]
        return np.abs(f) @ np.abs(w).T if absolute else f @ w.T

    def gf_term(sub, cell, absolute):
        g, w = G[i[sub]], W[cell]
        return np.abs(g) @ np.abs(w) if absolute else g @ w

    out, out_mag = rows_sum(out_rows, num_out, i, co, fwd_term)
    gf, gf_mag = rows_sum(in_rows, n_in, j, ci, gf_term)
    cols = np.arange(co) if o_sel is None else np.asarray(o_sel)
    Gc = G[:, cols]
    gw = np.zeros((K, len(cols), ci))
    gw_mag = np.zeros_like(gw)
    step = 1 << 18  # triplets a block: the gathered float64 rows stay a few hundred MB
    for cell in range(K):
        pos = np.flatnonzero(k == cell)
        for s in range(0, len(pos), step):
            p = pos[s:s + step]
            g, f = Gc[i[p]], F[j[p]]
            gw[cell] += g.T @ f
            gw_mag[cell] += np.abs(g).T @ np.abs(f)
    longest = lambda a, n: int(np.bincount(a, minlength=n).max()) if len(a) else 0
    terms = (longest(i, num_out) + ci, longest(j, n_in) + co, longest(k, K))
    return {"parts": (out, gf, gw), "magnitudes": (out_mag, gf_mag, gw_mag), "terms": terms}
