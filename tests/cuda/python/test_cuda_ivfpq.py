"""pcops.IVFPQIndex.search with CUDA queries: the CUDA search over the index's device copy gives the
CPU search's distances and ids bitwise (both metrics, with and without residuals, any k and
nprobe, ids and empty lists), the device copy follows every change of the index, and bad input
raises as on the CPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pcops
from conftest import same_bits  # this directory's conftest

CUDA = torch.device("cuda")
DIM, NLIST, M = 32, 24, 8


def clustered(n: int, seed: int) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0, 10, size=(16, DIM)).astype(np.float32)
    lab = rng.integers(0, 16, size=n)
    return torch.from_numpy((centres[lab] + rng.normal(0, 0.6, size=(n, DIM))).astype(np.float32))


def assert_same_search(index, q, k, nprobe):
    d, i = index.search(q, k, nprobe)
    dg, ig = index.search(q.to(CUDA), k, nprobe)
    assert dg.device.type == "cuda" and ig.device.type == "cuda"
    assert same_bits(d, dg.cpu()), (k, nprobe)
    assert torch.equal(i, ig.cpu()), (k, nprobe)


@pytest.mark.parametrize("metric", ["l2", "ip"])
@pytest.mark.parametrize("by_residual", [True, False])
def test_cuda_search_equals_cpu(metric, by_residual):
    x, q = clustered(4000, 1), clustered(70, 2)
    index = pcops.IVFPQIndex(DIM, NLIST, M, metric=metric, by_residual=by_residual)
    index.train(x, seed=3, niter=6)
    index.add(x[:3000], torch.arange(3000) * 7 + 5)
    for k, nprobe in ((1, 1), (10, 4), (300, NLIST), (2048, NLIST), (5000, 3)):
        assert_same_search(index, q, k, nprobe)


def test_device_copy_follows_changes():
    x, q = clustered(3000, 4), clustered(40, 5)
    index = pcops.IVFPQIndex(DIM, NLIST, M)
    index.train(x, seed=1, niter=4)
    index.add(x[:1000])
    assert_same_search(index, q, 10, 6)
    index.add(x[1000:2000])  # more vectors
    assert_same_search(index, q, 10, 6)
    assert index.remove_ids(torch.arange(0, 2000, 3)) > 0
    assert_same_search(index, q, 10, 6)
    index.reset()  # empty lists: padding only
    d, i = index.search(q.to(CUDA), 5, 4)
    assert (i == -1).all() and torch.isinf(d).all()
    index.add(x[2000:])
    assert_same_search(index, q, 25, NLIST)


def test_cuda_search_errors():
    x = clustered(1000, 6)
    index = pcops.IVFPQIndex(DIM, NLIST, M)
    q = x[:4].to(CUDA)
    with pytest.raises(ValueError):
        index.search(q, 3, 2)  # not trained
    index.train(x, seed=0, niter=2)
    index.add(x)
    with pytest.raises(ValueError):
        index.search(q, 3, 2, precomputed_table=True)  # a CPU option
    with pytest.raises(ValueError):
        index.search(q, 3, NLIST + 1)
    with pytest.raises(ValueError):
        index.search(q[:, :5], 3, 2)
    bad = q.clone()
    bad[1, 3] = float("nan")
    with pytest.raises(ValueError):
        index.search(bad, 3, 2)
    with pytest.raises(TypeError):
        index.search(q.double(), 3, 2)


@pytest.mark.parametrize("metric", ["l2", "ip"])
@pytest.mark.parametrize("by_residual", [True, False])
def test_cuda_encode_and_add_equal_cpu(metric, by_residual):
    """encode / add with CUDA vectors give the CPU's lists and codes, and the same index."""
    x = clustered(3000, 11)
    cpu_index = pcops.IVFPQIndex(DIM, NLIST, M, metric=metric, by_residual=by_residual)
    cpu_index.train(x, seed=5, niter=4)
    gpu_index = pcops.IVFPQIndex(DIM, NLIST, M, metric=metric, by_residual=by_residual)
    gpu_index.set_quantizers(cpu_index.centroids, cpu_index.codebooks)
    lists, codes = cpu_index.encode(x)
    dl, dc = gpu_index.encode(x.to(CUDA))
    assert dl.device.type == "cuda" and dc.device.type == "cuda" and dc.dtype == torch.uint8
    assert torch.equal(dl.cpu(), lists) and torch.equal(dc.cpu(), codes)
    ids = torch.arange(3000) * 5 + 2
    cpu_index.add(x, ids)
    gpu_index.add(x[:1700].to(CUDA), ids[:1700].to(CUDA))
    gpu_index.add(x[1700:].to(CUDA), ids[1700:])  # ids on the CPU
    assert gpu_index.ntotal == 3000
    for lst in range(NLIST):
        assert torch.equal(gpu_index.list_ids(lst), cpu_index.list_ids(lst))
        assert torch.equal(gpu_index.list_codes(lst), cpu_index.list_codes(lst))
    assert_same_search(gpu_index, clustered(30, 12), 10, 5)  # the device copy follows the CUDA adds


def test_cuda_encode_follows_new_quantizers_and_errors():
    x = clustered(2000, 13)
    index = pcops.IVFPQIndex(DIM, NLIST, M)
    with pytest.raises(ValueError, match="not trained"):
        index.encode(x[:3].to(CUDA))
    with pytest.raises(ValueError, match="not trained"):
        index.add(x[:3].to(CUDA))
    index.train(x, seed=1, niter=2)
    first = index.encode(x[:50].to(CUDA))
    assert torch.equal(first[0].cpu(), index.encode(x[:50])[0])
    index.train(x, seed=2, niter=3)  # new quantizers: the cached device copy must follow
    again = index.encode(x[:50].to(CUDA))
    assert torch.equal(again[0].cpu(), index.encode(x[:50])[0])
    assert torch.equal(again[1].cpu(), index.encode(x[:50])[1])
    bad = x[:4].to(CUDA).clone()
    bad[2, 1] = float("inf")
    with pytest.raises(ValueError, match="finite"):
        index.add(bad)
    with pytest.raises(ValueError):
        index.encode(x[:4, :5].to(CUDA))
    assert index.ntotal == 0  # nothing was added by the failed calls
    empty_lists, empty_codes = index.encode(x[:0].to(CUDA))
    assert empty_lists.shape == (0,) and empty_codes.shape == (0, M)


@pytest.mark.parametrize("metric", ["l2", "ip"])
def test_cuda_training_equals_cpu_training(metric):
    """train with CUDA vectors (assignments on the GPU) gives the CPU training's quantizers."""
    x = clustered(4000, 14)
    a = pcops.IVFPQIndex(DIM, NLIST, M, metric=metric)
    b = pcops.IVFPQIndex(DIM, NLIST, M, metric=metric)
    a.train(x, seed=3, niter=5)
    b.train(x.to(CUDA), seed=3, niter=5)
    assert same_bits(a.centroids, b.centroids) and same_bits(a.codebooks, b.codebooks)
    with pytest.raises(ValueError):
        b.train(x[:10].to(CUDA))  # too few vectors (and the index keeps its training)
    assert b.is_trained


@pytest.mark.parametrize("metric", ["l2", "ip"])
def test_cuda_half_tables_equal_cpu(metric):
    x, q = clustered(4000, 15), clustered(50, 16)
    index = pcops.IVFPQIndex(DIM, NLIST, M, metric=metric)
    index.train(x, seed=3, niter=4)
    index.add(x)
    for k, nprobe in ((10, 4), (2000, NLIST)):
        d, i = index.search(q, k, nprobe, lut_dtype="float16")
        dg, ig = index.search(q.to(CUDA), k, nprobe, lut_dtype="float16")
        assert same_bits(d, dg.cpu()) and torch.equal(i, ig.cpu()), (k, nprobe)
