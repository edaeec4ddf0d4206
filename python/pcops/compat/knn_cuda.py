"""Stand-in for ``knn_cuda`` 0.2 (unlimblue/KNN_CUDA) on top of :func:`pcops.knn`.

- ``knn(ref, query, k) -> (dist, idx)``: dimension-first layout, ref ``[dim, n_ref]`` and query
  ``[dim, n_query]``; dist ``[k, n_query]`` float32 **Euclidean** (sqrt of the squared distance,
  taken after selection) and idx ``[k, n_query]`` int64, 0-based; ascending distance, equal
  distances in ascending reference index (upstream's stable insertion sort).
- ``KNN(k, transpose_mode=False)``: ``forward(ref, query) -> (D, I)`` under ``torch.no_grad()``
  with upstream's per-item semantics: each batch item is cast with ``.float()`` (results are
  float32 whatever the input dtype), ``transpose_mode=False`` takes ``(B, dim, n)`` and returns
  ``(B, k, n_query)``, ``transpose_mode=True`` takes ``(B, n, dim)`` and returns
  ``(B, n_query, k)``. The batch is computed in one pcops call, which gives the same values as
  upstream's Python loop over the items.

Differences from upstream:

- Runs on CPU and CUDA tensors (upstream asserts CUDA at import and JIT-compiles its kernel);
  the work stays on the input's device (pcops' CPU or CUDA knn kernel).
- ``k > n_ref`` raises ValueError (upstream: undefined behaviour; its sort reads past the distance
  matrix and returns dist and idx of different shapes). ``k < 0`` raises ValueError too.
- Non-contiguous inputs are accepted (upstream's ``transpose_mode=False`` asserts contiguity).
- ``knn`` takes float32/float16/bfloat16 (pcops' policy; float64 raises TypeError);
  ``KNN`` casts every item to float32 first, as upstream does.
- An empty batch returns empty ``(0, k, n_query)`` results (upstream's ``torch.stack`` of an
  empty list raises RuntimeError).
- Squared distances follow pcops' contract (coordinate order, no FMA); upstream sums
  shared-memory tiles in float32, which can differ in the last bit and so reorder near-ties.
"""

# No `from __future__ import annotations`: nn.Module subclasses keep runtime annotations.

import sys
from typing import Any, Tuple

import torch
import torch.nn as nn
from torch import Tensor

from pcops._stand_in import stand_in_module

__version__ = "0.2"

__all__ = ["KNN", "knn", "__version__"]


def _pcops() -> Any:
    import pcops  # imported on first use: the stand-in can be installed before pcops loads

    return pcops


def _check_k(k: Any, n_ref: int) -> int:
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"k: expected an int, got {type(k).__name__}")
    if k < 0:
        raise ValueError(f"k: expected >= 0, got {k}")
    if k > n_ref:
        raise ValueError(
            f"k: expected <= {n_ref} (the number of reference points), got {k} "
            "(upstream knn_cuda has undefined behaviour here)"
        )
    return k


def _batched(ref: Tensor, query: Tensor, k: int) -> Tuple[Tensor, Tensor]:
    """ref [B, n_ref, dim], query [B, n_query, dim] -> dist, idx [B, n_query, k]."""
    if ref.device != query.device:
        raise ValueError(f"query: expected device {ref.device} (as ref), got {query.device}")
    if ref.shape[-1] != query.shape[-1]:
        raise ValueError(f"query: expected dimension {ref.shape[-1]} (as ref), got {query.shape[-1]}")
    k = _check_k(k, ref.shape[1])
    return _pcops().knn(query, ref, k)


def knn(ref: Tensor, query: Tensor, k: int) -> Tuple[Tensor, Tensor]:
    """The ``k`` nearest columns of ``ref`` for every column of ``query``.

    Args:
        ref: ``[dim, n_ref]`` reference points (dimension first).
        query: ``[dim, n_query]`` query points.
        k: neighbours per query, ``0 <= k <= n_ref``.

    Returns:
        ``(dist, idx)``: float32 Euclidean distances and int64 indices into ``ref``, each
        ``[k, n_query]``, ascending distance, equal distances by ascending index.

    Raises:
        ValueError: ``k > n_ref`` or ``k < 0``, shapes that do not match, mixed devices.
        TypeError: non-tensor inputs, float64 or integer coordinates, a non-int ``k``.
    """
    for name, t in (("ref", ref), ("query", query)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name}: expected a tensor, got {type(t).__name__}")
        if t.dim() != 2:
            raise ValueError(f"{name}: expected a 2-D [dim, n] tensor, got shape {tuple(t.shape)}")
    dist, idx = _batched(ref.t().unsqueeze(0), query.t().unsqueeze(0), k)
    return dist[0].t().contiguous(), idx[0].t().contiguous()


class KNN(nn.Module):
    """kNN as an ``nn.Module``: ``forward(ref, query) -> (dist, idx)``, never differentiable.

    Args:
        k: neighbours per query.
        transpose_mode: ``False``: inputs ``(B, dim, n)``, outputs ``(B, k, n_query)``;
            ``True``: inputs ``(B, n, dim)``, outputs ``(B, n_query, k)``.
    """

    def __init__(self, k, transpose_mode=False):
        super(KNN, self).__init__()
        self.k = k
        self._t = transpose_mode

    def forward(self, ref, query):
        assert ref.size(0) == query.size(0), "ref.shape={} != query.shape={}".format(ref.shape, query.shape)
        with torch.no_grad():
            for name, t in (("ref", ref), ("query", query)):
                if t.dim() != 3:
                    raise ValueError(f"{name}: expected a 3-D tensor, got shape {tuple(t.shape)}")
            r, q = ref.float(), query.float()
            if not self._t:  # (B, dim, n) -> (B, n, dim)
                r, q = r.transpose(1, 2), q.transpose(1, 2)
            dist, idx = _batched(r, q, self.k)  # (B, n_query, k)
            if not self._t:
                dist, idx = dist.transpose(1, 2), idx.transpose(1, 2)
            return dist.contiguous(), idx.contiguous()


def build_modules(name: str = "knn_cuda") -> dict:
    """``{name: module}``: upstream's package holds KNN, knn and __version__."""
    this = sys.modules[__name__]
    module = stand_in_module(name, __doc__, package=True, origin=__file__)
    for attr in __all__:
        setattr(module, attr, getattr(this, attr))
    module.__all__ = list(__all__)
    module.torch = torch
    module.nn = nn
    return {name: module}
