"""pcops.IVFPQIndex: equality with faiss IndexIVFPQ given the same trained quantizers (codes, lists,
distances, ids), recall against exact search, save/load, remove/reset, NumPy and torch inputs,
errors."""

from __future__ import annotations

import faiss
import numpy as np
import pytest
import torch

import pcops
from conftest import with_threads

DIM, NLIST, M = 32, 16, 8


def clustered(n: int, dim: int, clusters: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0, 10, size=(clusters, dim)).astype(np.float32)
    lab = rng.integers(0, clusters, size=n)
    return (centres[lab] + rng.normal(0, 0.6, size=(n, dim))).astype(np.float32)


def faiss_index(metric: str, by_residual: bool, xt: np.ndarray, nlist=NLIST, m=M):
    dim = xt.shape[1]
    if metric == "l2":
        q = faiss.IndexFlatL2(dim)
        index = faiss.IndexIVFPQ(q, dim, nlist, m, 8)
    else:
        q = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFPQ(q, dim, nlist, m, 8, faiss.METRIC_INNER_PRODUCT)
    index.by_residual = by_residual
    index.cp.seed = 3
    index.pq.cp.seed = 4
    index.cp.niter = index.pq.cp.niter = 6  # fast; any trained parameters do
    index.train(xt)
    index.use_precomputed_table = -1  # the residual look-up tables of the pcops contract
    return index


def faiss_quantizers(index):
    nlist, dim = index.nlist, index.d
    centroids = index.quantizer.reconstruct_n(0, nlist)
    codebooks = faiss.vector_to_array(index.pq.centroids).reshape(index.pq.M, index.pq.ksub, index.pq.dsub)
    return centroids, codebooks


def faiss_lists(index):
    out = []
    inv = index.invlists
    for lst in range(index.nlist):
        n = inv.list_size(lst)
        ids = faiss.rev_swig_ptr(inv.get_ids(lst), n).copy() if n else np.zeros(0, np.int64)
        codes = (
            faiss.rev_swig_ptr(inv.get_codes(lst), n * index.code_size).copy().reshape(n, index.code_size)
            if n
            else np.zeros((0, index.code_size), np.uint8)
        )
        out.append((ids, codes))
    return out


@pytest.fixture(scope="module")
def data():
    x = clustered(3000, DIM, 24, 1)
    q = clustered(60, DIM, 24, 2)
    return x, q


@pytest.mark.parametrize("metric", ["l2", "ip"])
@pytest.mark.parametrize("by_residual", [True, False])
def test_equals_faiss_given_same_quantizers(data, metric, by_residual):
    x, q = data
    fi = faiss_index(metric, by_residual, x)
    centroids, codebooks = faiss_quantizers(fi)
    ids = np.arange(3000, dtype=np.int64) * 3 + 11
    fi.add_with_ids(x, ids)

    ours = pcops.IVFPQIndex(DIM, NLIST, M, metric=metric, by_residual=by_residual)
    ours.set_quantizers(centroids, codebooks)
    ours.add(x, ids)
    assert ours.ntotal == fi.ntotal == 3000

    # Lists and codes, exactly (both keep input order inside a list).
    for lst, (fids, fcodes) in enumerate(faiss_lists(fi)):
        np.testing.assert_array_equal(ours.list_ids(lst).numpy(), fids)
        np.testing.assert_array_equal(ours.list_codes(lst).numpy(), fcodes)

    for nprobe, k in ((1, 10), (4, 10), (NLIST, 50)):
        fi.nprobe = nprobe
        fd, fl = fi.search(q, k)
        d, lab = ours.search(q, k, nprobe)
        assert isinstance(d, np.ndarray) and d.dtype == np.float32 and lab.dtype == np.int64
        # Distances agree to rounding (faiss sums look-up-table entries in SIMD order).
        scale = np.abs(fd).max()
        np.testing.assert_allclose(d, fd, rtol=1e-5, atol=1e-6 * scale)
        # Ids agree except where two candidates' distances tie within that rounding.
        diff = lab != fl
        if diff.any():
            gap = np.minimum(
                np.abs(np.diff(d, axis=1, prepend=-np.inf)), np.abs(np.diff(d, axis=1, append=np.inf))
            )
            assert (gap[diff] <= 1e-5 * scale).all()
        assert diff.mean() < 0.01


def _decoded_distances(ours, q, lab):
    """float64 |q - c_l - r|^2 of the stored vectors ``lab`` (their list and codes)."""
    centroids = ours.centroids.numpy().astype(np.float64)
    codebooks = ours.codebooks.numpy().astype(np.float64)
    where = {}
    for lst in range(ours.nlist):
        for row, i in enumerate(ours.list_ids(lst).numpy()):
            where[int(i)] = (lst, ours.list_codes(lst).numpy()[row])
    out = np.zeros(lab.shape)
    for a in range(lab.shape[0]):
        for b in range(lab.shape[1]):
            lst, code = where[int(lab[a, b])]
            rec = centroids[lst] + np.concatenate([codebooks[m, code[m]] for m in range(len(code))])
            out[a, b] = ((q[a].astype(np.float64) - rec) ** 2).sum()
    return out


def test_precomputed_table_faiss_default_mode(data):
    """precomputed_table: faiss's default look-up tables for L2 with residuals. Distances are the
    decoded vectors' distances up to rounding, ids those of the residual tables except near ties,
    recall@10 within 0.005 of faiss's own precomputed-table search; save / load keeps it working."""
    x, q = data
    fi = faiss_index("l2", True, x)
    fi.use_precomputed_table = 1
    fi.precompute_table()
    centroids, codebooks = faiss_quantizers(fi)
    fi.add(x)
    ours = pcops.IVFPQIndex(DIM, NLIST, M)
    ours.set_quantizers(centroids, codebooks)
    ours.add(x)
    exact = ((q[:, None, :].astype(np.float64) - x[None].astype(np.float64)) ** 2).sum(-1)
    truth = np.argsort(exact, axis=1, kind="stable")[:, :10]
    for nprobe in (1, 4, NLIST):
        fi.nprobe = nprobe
        fd, fl = fi.search(q, 10)
        d, lab = ours.search(q, 10, nprobe, precomputed_table=True)
        dr, lr = ours.search(q, 10, nprobe)
        scale = np.abs(dr).max()
        np.testing.assert_allclose(d, _decoded_distances(ours, q, lab), rtol=1e-4, atol=1e-5 * scale)
        np.testing.assert_allclose(d, fd, rtol=1e-4, atol=1e-5 * scale)
        assert (lab != lr).mean() < 0.02
        recall = lambda L: np.mean([len(set(L[i]) & set(truth[i])) / 10 for i in range(len(q))])
        assert abs(recall(lab) - recall(fl)) <= 0.005
    path_lab = ours.search(q, 10, 4, precomputed_table=True)[1]
    import os
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        f = os.path.join(tmp, "ix.pcivf")
        ours.save(f)
        back = pcops.IVFPQIndex.load(f)
    np.testing.assert_array_equal(back.search(q, 10, 4, precomputed_table=True)[1], path_lab)
    with pytest.raises(TypeError):
        ours.search(q, 10, 4, precomputed_table=1)


@pytest.mark.parametrize("metric,by_residual", [("ip", True), ("ip", False), ("l2", False)])
def test_precomputed_table_ignored_where_tables_do_not_depend_on_the_list(data, metric, by_residual):
    x, q = data
    ours = pcops.IVFPQIndex(DIM, NLIST, M, metric=metric, by_residual=by_residual)
    ours.train(x, seed=2, niter=4)
    ours.add(x)
    a = ours.search(q, 7, 3)
    b = ours.search(q, 7, 3, precomputed_table=True)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


def test_recall_against_exact_search(data):
    x, q = data
    index = pcops.IVFPQIndex(DIM, NLIST, M)
    index.train(x, seed=5, niter=10)
    index.add(x)
    d, lab = index.search(torch.from_numpy(q), 10, nprobe=4)
    assert isinstance(d, torch.Tensor)
    exact = ((q[:, None, :].astype(np.float64) - x[None].astype(np.float64)) ** 2).sum(-1).argmin(1)
    recall = np.mean([exact[i] in lab[i].numpy() for i in range(len(q))])
    assert recall >= 0.9
    # Rows sorted by (distance, id).
    dn, ln = d.numpy(), lab.numpy()
    assert (np.diff(dn, axis=1) >= 0).all()


def test_training_deterministic_across_threads(data):
    x, _ = data
    a = pcops.IVFPQIndex(DIM, NLIST, M)
    b = pcops.IVFPQIndex(DIM, NLIST, M)
    with_threads(1, lambda: a.train(x, seed=9, niter=4))
    with_threads(2, lambda: b.train(x, seed=9, niter=4))
    assert torch.equal(a.centroids, b.centroids) and torch.equal(a.codebooks, b.codebooks)
    assert a.codebooks.shape == (M, 256, DIM // M)


def test_save_load_remove_reset(data, tmp_path):
    x, q = data
    index = pcops.IVFPQIndex(DIM, NLIST, M, metric="ip")
    index.train(x[:1000], seed=1, niter=4)
    index.add(x[:1000])
    path = tmp_path / "index.ivfpq"
    index.save(path)
    back = pcops.IVFPQIndex.load(path)
    assert (back.dim, back.nlist, back.M, back.metric, back.by_residual, back.ntotal) == (DIM, NLIST, M, "ip", True, 1000)
    d1, l1 = index.search(q, 5, 3)
    d2, l2 = back.search(q, 5, 3)
    np.testing.assert_array_equal(d1, d2)
    np.testing.assert_array_equal(l1, l2)
    # Header of the documented format.
    raw = path.read_bytes()
    assert raw[:8] == b"PCIVFPQ\0" and int.from_bytes(raw[8:12], "little") == 1
    assert back.remove_ids(np.array([l1[0, 0], 123456])) == 1
    assert back.ntotal == 999
    _, l3 = back.search(q[:1], 5, 3)
    assert l1[0, 0] not in l3
    back.reset()
    assert back.ntotal == 0 and back.is_trained
    d, lab = back.search(q[:2], 3, 2)
    assert (lab == -1).all() and np.isneginf(d).all()


def test_errors(data):
    x, q = data
    with pytest.raises(ValueError, match="M"):
        pcops.IVFPQIndex(30, 4, 4)
    with pytest.raises(ValueError, match="nbits"):
        pcops.IVFPQIndex(32, 4, 4, nbits=4)
    with pytest.raises(ValueError, match="metric"):
        pcops.IVFPQIndex(32, 4, 4, metric="cosine")
    index = pcops.IVFPQIndex(DIM, NLIST, M)
    with pytest.raises(ValueError, match="not trained"):
        index.add(x)
    with pytest.raises(ValueError, match="at least"):
        index.train(x[:100])
    with pytest.raises(ValueError, match="shape"):
        index.train(x[:, :16])
    with pytest.raises(TypeError):
        index.train(x.astype(np.float64))
    bad = x.copy()
    bad[3, 3] = np.nan
    with pytest.raises(ValueError, match="finite"):
        index.train(bad)
    index.train(x[:500], niter=2)
    index.add(x[:500])
    with pytest.raises(ValueError, match="nprobe"):
        index.search(q, 5, nprobe=NLIST + 1)
    with pytest.raises(ValueError, match="k"):
        index.search(q, -1, 1)
    with pytest.raises(ValueError, match="ids"):
        index.add(x[:5], np.arange(4))
    with pytest.raises(IndexError):
        index.list_ids(NLIST)
    with pytest.raises(ValueError, match="empty"):
        index.train(x)


def test_lists_csr_concatenates_the_lists(data):
    """The CSR copy behind the CUDA search: offsets, ids and codes of every list in list order."""
    x, _ = data
    index = pcops.IVFPQIndex(DIM, NLIST, M)
    index.train(x, seed=1, niter=3)
    index.add(x[:2000], np.arange(2000, dtype=np.int64) * 5)
    index.remove_ids(np.arange(0, 10000, 15, dtype=np.int64))
    offsets, ids, codes = index._c.lists_csr()
    assert offsets.shape == (NLIST + 1,) and offsets[0] == 0 and offsets[-1] == index.ntotal
    for lst in range(NLIST):
        a, b = int(offsets[lst]), int(offsets[lst + 1])
        assert torch.equal(ids[a:b], index.list_ids(lst))
        assert torch.equal(codes[a:b], index.list_codes(lst))
    state = index._state()
    index.add(x[2000:2001])
    assert index._state() != state  # the device copy is rebuilt after a change


def _reference_search(index, q, k, nprobe, half):
    """The search contract in NumPy float32 (every operation correctly rounded, in the written
    order): coarse distances, the nprobe first lists by (key, list), per-list look-up tables
    (float16-rounded with ``half``), code sums in codeword order, the first k by (key, id)."""
    dim, nlist, m = index.dim, index.nlist, index.M
    ip, residual = index.metric == "ip", index.by_residual
    cent, cb = index.centroids.numpy(), index.codebooks.numpy()
    dsub = dim // m

    def seq(a, b, inner):  # rows of a against rows of b, coordinate by coordinate
        acc = None
        for i in range(a.shape[-1]):
            t = a[..., i] * b[..., i] if inner else (a[..., i] - b[..., i]) * (a[..., i] - b[..., i])
            acc = t if acc is None else (acc + t).astype(np.float32)
        return acc.astype(np.float32)

    out_d = np.empty((len(q), k), np.float32)
    out_i = np.empty((len(q), k), np.int64)
    for a, x in enumerate(q):
        coarse = seq(np.broadcast_to(x, cent.shape), cent, ip)
        key = -coarse if ip else coarse
        lists = sorted(range(nlist), key=lambda lst: (key[lst], lst))[:nprobe]
        cands = []
        for lst in lists:
            base = (x - cent[lst]).astype(np.float32) if (residual and not ip) else x
            lut = np.stack([seq(np.broadcast_to(base[j * dsub:(j + 1) * dsub], cb[j].shape), cb[j], ip)
                            for j in range(m)])
            if half:
                with np.errstate(over="ignore"):  # beyond float16: infinity, as the contract says
                    lut = lut.astype(np.float16).astype(np.float32)
            d0 = coarse[lst] if (ip and residual) else np.float32(0)
            for vid, code in zip(index.list_ids(lst).numpy(), index.list_codes(lst).numpy()):
                s = lut[0, code[0]]
                for j in range(1, m):
                    s = np.float32(s + lut[j, code[j]])
                dist = np.float32(d0 + s)
                cands.append(((-dist if ip else dist), int(vid), dist))
        cands.sort(key=lambda c: (c[0], c[1]))
        for j in range(k):
            out_d[a, j], out_i[a, j] = (cands[j][2], cands[j][1]) if j < len(cands) else (
                (-np.inf if ip else np.inf), -1)
    return out_d, out_i


@pytest.mark.parametrize("metric", ["l2", "ip"])
@pytest.mark.parametrize("by_residual", [True, False])
@pytest.mark.parametrize("scale", [3.0, 37.0])
def test_half_tables_follow_the_contract(metric, by_residual, scale):
    """lut_dtype="float16": every table entry rounded to float16, sums in float32 (a NumPy
    reference of the whole search, bitwise); float32 tables match the same reference unrounded.
    Scale 37: many entries beyond float16's range (infinity)."""
    x = clustered(400, 8, 5, 21) * scale
    q = clustered(6, 8, 5, 22) * scale
    index = pcops.IVFPQIndex(8, 4, 4, metric=metric, by_residual=by_residual)
    index.train(x, seed=2, niter=4)
    index.add(x, np.arange(400) * 3 + 1)
    for half in (False, True):
        d, i = index.search(q, 15, 3, lut_dtype="float16" if half else "float32")
        rd, ri = _reference_search(index, q, 15, 3, half)
        np.testing.assert_array_equal(i, ri)
        np.testing.assert_array_equal(d.view(np.int32), rd.view(np.int32))
    assert not np.array_equal(index.search(q, 15, 3)[0], index.search(q, 15, 3, lut_dtype="float16")[0])
    with pytest.raises(ValueError, match="lut_dtype"):
        index.search(q, 3, 2, lut_dtype="bfloat16")
