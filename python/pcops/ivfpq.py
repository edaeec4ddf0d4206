"""IVF-PQ approximate nearest-neighbour search with faiss IndexIVFPQ semantics (docs/ops/ivfpq.md)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

__all__ = ["IVFPQIndex"]


def _vectors(x: Any, name: str) -> tuple[torch.Tensor, bool]:
    """A CPU tensor view of ``x`` and whether ``x`` came as NumPy (results then return as NumPy)."""
    if isinstance(x, np.ndarray):
        if x.dtype != np.float32 and x.dtype not in (np.float16,):
            raise TypeError(f"{name}: expected a float32 array, got {x.dtype} (convert with .astype(np.float32))")
        return torch.from_numpy(np.ascontiguousarray(x)), True
    if isinstance(x, torch.Tensor):
        return x, False
    raise TypeError(f"{name}: expected a torch.Tensor or numpy.ndarray, got {type(x).__name__}")


def _ids(x: Any, name: str) -> torch.Tensor:
    if isinstance(x, np.ndarray):
        if x.dtype.kind not in "iu":
            raise TypeError(f"{name}: expected an integer array, got {x.dtype}")
        return torch.from_numpy(np.ascontiguousarray(x, dtype=np.int64))
    if isinstance(x, torch.Tensor):
        return x
    raise TypeError(f"{name}: expected a torch.Tensor or numpy.ndarray, got {type(x).__name__}")


def _out(t: torch.Tensor, as_numpy: bool):
    return t.numpy() if as_numpy else t


class IVFPQIndex:
    """Inverted-file index with product-quantised residuals (faiss ``IndexIVFPQ`` semantics).

    Args:
        dim: vector dimension.
        nlist: number of inverted lists (coarse k-means centroids).
        M: number of sub-quantizers; must divide ``dim``. Each stores one byte per vector.
        nbits: bits per sub-quantizer code (8 only).
        metric: ``"l2"`` (squared Euclidean distances, smaller is nearer) or ``"ip"`` (inner
            products, larger is nearer).
        by_residual: encode ``x - centroid`` (faiss's default) instead of ``x``.

    Vectors are ``[n, dim]`` float32 (float16 / bfloat16 converted exactly) CPU tensors or NumPy
    arrays; results come back as the same kind. ``search`` with CUDA queries runs the CUDA search
    (the CPU search's results, bitwise) on a device copy of the index, made on first use and
    after every change; ``encode`` / ``add`` with CUDA vectors encode them on their device (the
    CPU's lists and codes, bitwise), and ``train`` with CUDA vectors runs its k-means assignments
    there (the CPU's quantizers, bitwise). Search results are exact over the scanned codes,
    ordered by (distance, id) (inner product: descending, then id), padded with (+inf, -1)
    (inner product: (-inf, -1)). Given the same centroids and codebooks (``set_quantizers``), the
    codes equal faiss's and the distances equal faiss's scan without precomputed tables.
    """

    def __init__(
        self, dim: int, nlist: int, M: int, nbits: int = 8, metric: str = "l2", by_residual: bool = True
    ) -> None:
        for name, v in (("dim", dim), ("nlist", nlist), ("M", M), ("nbits", nbits)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"{name}: expected an int, got {type(v).__name__}")
        if metric not in ("l2", "ip"):
            raise ValueError(f"metric: expected 'l2' or 'ip', got {metric!r}")
        self._c = torch.classes.pcops.IVFPQIndex(int(dim), int(nlist), int(M), int(nbits), metric, bool(by_residual))

    # -- properties --------------------------------------------------------------------------
    @property
    def dim(self) -> int:
        return self._c.params()[0]

    @property
    def nlist(self) -> int:
        return self._c.params()[1]

    @property
    def M(self) -> int:  # noqa: N802 (faiss's name)
        return self._c.params()[2]

    @property
    def nbits(self) -> int:
        return self._c.params()[3]

    @property
    def metric(self) -> str:
        return self._c.params()[4]

    @property
    def by_residual(self) -> bool:
        return self._c.params()[5]

    @property
    def ntotal(self) -> int:
        return self._c.ntotal()

    @property
    def is_trained(self) -> bool:
        return self._c.is_trained()

    def __len__(self) -> int:
        return self.ntotal

    def __repr__(self) -> str:
        return (
            f"IVFPQIndex(dim={self.dim}, nlist={self.nlist}, M={self.M}, nbits={self.nbits}, "
            f"metric={self.metric!r}, by_residual={self.by_residual}, ntotal={self.ntotal})"
        )

    # -- training ----------------------------------------------------------------------------
    def train(self, x, seed: int = 0, niter: int = 25, max_points_per_centroid: int = 256) -> None:
        """k-means coarse quantizer and per-subspace PQ codebooks, deterministic for ``seed``
        (independent of the thread count). Needs at least ``max(nlist, 256)`` vectors."""
        t, _ = _vectors(x, "x")
        self._c.train(t, int(seed), int(niter), int(max_points_per_centroid))
        self._touch(quantizers=True)

    def set_quantizers(self, centroids, codebooks) -> None:
        """Installs trained parameters: centroids ``[nlist, dim]``, codebooks ``[M, 256, dim // M]``
        (e.g. from a faiss index). The index must be empty."""
        c, _ = _vectors(centroids, "centroids")
        cb, _ = _vectors(codebooks, "codebooks")
        self._c.set_quantizers(c, cb)
        self._touch(quantizers=True)

    @property
    def centroids(self) -> torch.Tensor:
        return self._c.centroids()

    @property
    def codebooks(self) -> torch.Tensor:
        return self._c.codebooks()

    # -- contents ----------------------------------------------------------------------------
    def encode(self, x):
        """``(lists [n] int64, codes [n, M] uint8)`` of ``x`` without adding it. CUDA vectors are
        encoded on their device (the same lists and codes; results on that device)."""
        t, np_in = _vectors(x, "x")
        if t.device.type == "cuda":
            return self._encode_cuda(t)
        lists, codes = self._c.encode(t)
        return _out(lists, np_in), _out(codes, np_in)

    def add(self, x, ids=None) -> None:
        """Appends ``x`` with int64 ``ids`` (default: ``ntotal, ntotal + 1, ...``). CUDA vectors are
        encoded on their device; the lists stay in host memory."""
        t, _ = _vectors(x, "x")
        id_t = None if ids is None else _ids(ids, "ids")
        if t.device.type == "cuda":
            lists, codes = self._encode_cuda(t)
            self._c.add_encoded(lists.cpu(), codes.cpu(), None if id_t is None else id_t.cpu())
        else:
            self._c.add(t, id_t)
        self._touch()

    def _encode_cuda(self, x: torch.Tensor):
        if not self._c.is_trained():
            raise ValueError("encode: the index is not trained (call train or set_quantizers first)")
        c, cb = self._device_quantizers(x.device)
        dim, nlist, m, _, metric, by_residual = self._c.params()
        return torch.ops.pcops._ivfpq_encode(c, cb, dim, nlist, m, metric, by_residual, x)

    def _device_quantizers(self, device: torch.device):
        """Centroids and codebooks on ``device``, rebuilt after training / set_quantizers / load."""
        key = (str(device), getattr(self, "_quantizer_generation", 0))
        cached = getattr(self, "_dev_quantizers", None)
        if cached is None or cached[0] != key:
            self._dev_quantizers = (key, (self._c.centroids().to(device), self._c.codebooks().to(device)))
        return self._dev_quantizers[1]

    def search(self, queries, k: int, nprobe: int = 1, precomputed_table: bool = False,
               lut_dtype: str = "float32"):
        """``(distances [nq, k] float32, ids [nq, k] int64)`` of the ``k`` best stored vectors among the
        ``nprobe`` nearest lists of every query. L2 distances are squared.

        ``precomputed_table`` (L2 with residuals, faiss's ``use_precomputed_table``): each list's
        look-up table is a precomputed per-list term plus a per-query term instead of the residual's
        distances to the codewords, which is much faster with many probes; the distances agree up to
        rounding. Off (the default), the results equal faiss's with ``use_precomputed_table = -1``.
        Ignored for inner product or without residuals.

        ``lut_dtype="float16"`` (faiss GPU's float16 look-up tables): every table entry is rounded
        to the nearest float16 once computed, the sums stay float32; approximate distances, the
        same bits on CPU and CUDA (where the table then takes half the shared memory)."""
        t, np_in = _vectors(queries, "queries")
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
            raise TypeError(f"k: expected an int, got {type(k).__name__}")
        if isinstance(nprobe, bool) or not isinstance(nprobe, (int, np.integer)):
            raise TypeError(f"nprobe: expected an int, got {type(nprobe).__name__}")
        if not isinstance(precomputed_table, (bool, np.bool_)):
            raise TypeError(f"precomputed_table: expected a bool, got {type(precomputed_table).__name__}")
        if lut_dtype not in ("float32", "float16"):
            raise ValueError(f"lut_dtype: expected 'float32' or 'float16', got {lut_dtype!r}")
        half = lut_dtype == "float16"
        if t.device.type == "cuda":
            if precomputed_table:
                raise ValueError("precomputed_table: the CUDA search uses the residual tables (pass False)")
            return self._search_cuda(t, int(k), int(nprobe), half)
        d, i = self._c.search(t, int(k), int(nprobe), bool(precomputed_table), half)
        return _out(d, np_in), _out(i, np_in)

    def _device_copy(self, device: torch.device):
        """The index's quantizers and lists (CSR) on ``device``, rebuilt after any change."""
        key = (str(device), self._state())
        cached = getattr(self, "_dev", None)
        if cached is None or cached[0] != key:
            offsets, ids, codes = self._c.lists_csr()
            tensors = (*self._device_quantizers(device), offsets.to(device), ids.to(device), codes.to(device),
                       (offsets[1:] - offsets[:-1]).contiguous())
            self._dev = (key, tensors)
        return self._dev[1]

    def _state(self):
        """Changes whenever the stored vectors or the quantizers change."""
        return (getattr(self, "_generation", 0), self._c.ntotal(), self._c.is_trained())

    def _touch(self, quantizers: bool = False) -> None:
        self._generation = getattr(self, "_generation", 0) + 1
        if quantizers:
            self._quantizer_generation = getattr(self, "_quantizer_generation", 0) + 1

    def _search_cuda(self, queries: torch.Tensor, k: int, nprobe: int, half_tables: bool = False):
        if not self._c.is_trained():
            raise ValueError("search: the index is not trained (call train or set_quantizers first)")
        c, cb, off, ids, codes, sizes = self._device_copy(queries.device)
        dim, nlist, m, _, metric, by_residual = self._c.params()
        return torch.ops.pcops._ivfpq_search(c, cb, off, ids, codes, sizes, dim, nlist, m, metric, by_residual,
                                             queries, k, nprobe, half_tables)

    def remove_ids(self, ids) -> int:
        """Removes every vector whose id is in ``ids``; returns how many were removed."""
        removed = self._c.remove_ids(_ids(ids, "ids"))
        self._touch()
        return removed

    def reset(self) -> None:
        """Removes all vectors; the training is kept."""
        self._c.reset()
        self._touch()

    def list_ids(self, list_no: int) -> torch.Tensor:
        return self._c.list_ids(int(list_no))

    def list_codes(self, list_no: int) -> torch.Tensor:
        return self._c.list_codes(int(list_no))

    # -- files -------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> None:
        """Writes the index in the documented little-endian format (docs/ops/ivfpq.md)."""
        self._c.save(os.fspath(path))

    @classmethod
    def load(cls, path: str | os.PathLike) -> IVFPQIndex:
        obj = cls.__new__(cls)
        obj._c = torch.classes.pcops.IVFPQIndex(1, 1, 1, 8, "l2", True)
        obj._c.load(os.fspath(path))
        obj._touch(quantizers=True)
        return obj
