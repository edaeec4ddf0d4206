"""The knn_cuda 0.2 stand-in (pcops.compat.knn_cuda).

Expected values are hand-checked from upstream's behaviour (PEERS.md section 4): dimension-first
layout, Euclidean distances, int64 indices of shape [k, n_query], ties in ascending reference
index, the KNN module's per-item float32 cast and both transpose modes, no gradients.
"""

from __future__ import annotations


import pytest
import torch

import pcops.compat as compat
from conftest import isolated_modules


@pytest.fixture
def clean():
    with isolated_modules("knn_cuda"):
        yield


@pytest.fixture
def kc(clean):
    # Only knn_cuda: every other default stand-in deselected.
    installed = compat.install(**{n: n == "knn_cuda" for n, s in compat.REGISTRY.items() if s.default})
    assert set(installed) == {"knn_cuda"}
    import knn_cuda

    assert installed["knn_cuda"] is knn_cuda and compat.is_stand_in(knn_cuda)
    return knn_cuda


def _upstream_loop(ref, query, k, transpose_mode, knn):
    """Upstream's KNN.forward, literally: a Python loop over the batch items."""
    def _T(t, mode=False):
        return t.transpose(0, 1).contiguous() if mode else t

    with torch.no_grad():
        D, I = [], []
        for bi in range(ref.size(0)):
            r, q = _T(ref[bi], transpose_mode), _T(query[bi], transpose_mode)
            d, i = knn(r.float(), q.float(), k)
            D.append(_T(d, transpose_mode))
            I.append(_T(i, transpose_mode))
        return torch.stack(D, dim=0), torch.stack(I, dim=0)


def test_package(kc):
    assert kc.__version__ == "0.2"
    from knn_cuda import KNN, knn

    assert callable(knn) and issubclass(KNN, torch.nn.Module)
    assert set(kc.__all__) == {"KNN", "knn", "__version__"}


def test_knn_dim_first_ties_and_layout(kc):
    ref = torch.tensor([[0.0, 1.0, 2.0, 3.0]])  # dim 1, n_ref 4
    query = torch.tensor([[1.5, 0.0]])  # n_query 2
    dist, idx = kc.knn(ref, query, 3)
    assert dist.shape == idx.shape == (3, 2)
    assert idx.dtype == torch.int64 and dist.dtype == torch.float32
    # query 1.5: 1 and 2 tie at 0.5 (lower index first), then 0 and 3 tie at 1.5 -> 0
    assert idx.tolist() == [[1, 0], [2, 1], [0, 2]]
    assert dist.tolist() == [[0.5, 0.0], [0.5, 1.0], [1.5, 2.0]]


def test_knn_euclidean(kc):
    ref = torch.tensor([[0.0, 3.0], [0.0, 4.0], [0.0, 0.0]])  # two 3-D points, dimension first
    dist, idx = kc.knn(ref, torch.zeros(3, 1), 2)
    assert dist.tolist() == [[0.0], [5.0]] and idx.tolist() == [[0], [1]]


def test_knn_k_limits(kc):
    ref, query = torch.rand(3, 5), torch.rand(3, 4)
    dist, idx = kc.knn(ref, query, 5)
    assert sorted(idx[:, 0].tolist()) == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="k: expected <= 5"):
        kc.knn(ref, query, 6)
    with pytest.raises(ValueError):
        kc.knn(ref, query, -1)
    with pytest.raises(TypeError):
        kc.knn(ref, query, 2.0)
    assert kc.knn(ref, query, 0)[0].shape == (0, 4)


def test_knn_bad_input(kc):
    with pytest.raises(ValueError):
        kc.knn(torch.rand(1, 3, 5), torch.rand(3, 4), 2)
    with pytest.raises(ValueError):
        kc.knn(torch.rand(3, 5), torch.rand(2, 4), 2)  # dims differ
    with pytest.raises(TypeError):
        kc.knn(torch.rand(3, 5, dtype=torch.float64), torch.rand(3, 4, dtype=torch.float64), 2)
    with pytest.raises(TypeError):
        kc.knn([[0.0]], torch.rand(1, 1), 1)


def test_knn_against_brute_force(kc):
    g = torch.Generator().manual_seed(11)
    ref, query = torch.rand(5, 300, generator=g), torch.rand(5, 120, generator=g)  # dim 5
    dist, idx = kc.knn(ref, query, 10)
    d = torch.cdist(query.t().double(), ref.t().double())
    ref_d, ref_i = d.topk(10, dim=1, largest=False)
    assert torch.equal(idx, ref_i.t())
    torch.testing.assert_close(dist.double(), ref_d.t(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("transpose_mode", [False, True])
def test_module_matches_upstream_loop(kc, transpose_mode):
    g = torch.Generator().manual_seed(12)
    if transpose_mode:
        ref, query = torch.rand(3, 50, 3, generator=g), torch.rand(3, 20, 3, generator=g)
    else:
        ref, query = torch.rand(3, 3, 50, generator=g), torch.rand(3, 3, 20, generator=g)
    D, I = kc.KNN(k=7, transpose_mode=transpose_mode)(ref, query)
    eD, eI = _upstream_loop(ref, query, 7, transpose_mode, kc.knn)
    assert D.shape == eD.shape == ((3, 20, 7) if transpose_mode else (3, 7, 20))
    assert torch.equal(D, eD) and torch.equal(I, eI) and I.dtype == torch.int64


def test_module_hand_checked_transpose_mode(kc):
    ref = torch.tensor([[[0.0, 0, 0], [1, 0, 0], [0, 2, 0]], [[5.0, 5, 5], [5, 5, 6], [5, 5, 5]]])
    query = torch.tensor([[[0.9, 0, 0]], [[5.0, 5, 5]]])
    D, I = kc.KNN(2, transpose_mode=True)(ref, query)
    assert I.tolist() == [[[1, 0]], [[0, 2]]]  # duplicates: lower index first
    torch.testing.assert_close(D, torch.tensor([[[0.1, 0.9]], [[0.0, 0.0]]]))
    D2, I2 = kc.KNN(2)(ref.transpose(1, 2), query.transpose(1, 2))  # non-contiguous is accepted
    assert torch.equal(I2, I.transpose(1, 2)) and torch.equal(D2, D.transpose(1, 2))


def test_module_casts_to_float32_and_has_no_grad(kc):
    ref = torch.rand(2, 3, 16, dtype=torch.float64, requires_grad=True)
    query = torch.rand(2, 3, 4, dtype=torch.float64, requires_grad=True)
    D, I = kc.KNN(3)(ref, query)
    assert D.dtype == torch.float32 and I.dtype == torch.int64
    assert not D.requires_grad and not I.requires_grad
    D16, I16 = kc.KNN(3)(ref.detach().half(), query.detach().half())
    assert D16.dtype == torch.float32
    half_ref, half_q = ref.detach().half().float(), query.detach().half().float()
    assert torch.equal(I16, kc.KNN(3)(half_ref, half_q)[1])


def test_module_errors(kc):
    with pytest.raises(AssertionError):
        kc.KNN(2)(torch.rand(2, 3, 8), torch.rand(3, 3, 4))
    with pytest.raises(ValueError):
        kc.KNN(9, transpose_mode=True)(torch.rand(2, 8, 3), torch.rand(2, 4, 3))
    with pytest.raises(ValueError):
        kc.KNN(2)(torch.rand(3, 8), torch.rand(3, 4))
    D, I = kc.KNN(2)(torch.rand(0, 3, 8), torch.rand(0, 3, 4))  # empty batch: empty results
    assert D.shape == I.shape == (0, 2, 4)


def test_module_trace(kc):
    g = torch.Generator().manual_seed(13)
    ref, query = torch.rand(2, 40, 3, generator=g), torch.rand(2, 10, 3, generator=g)
    m = kc.KNN(4, transpose_mode=True)
    traced = torch.jit.trace(m, (ref, query), check_trace=False)
    ref2, query2 = torch.rand(2, 40, 3, generator=g), torch.rand(2, 10, 3, generator=g)
    for a, b in zip(traced(ref2, query2), m(ref2, query2)):
        assert torch.equal(a, b)
