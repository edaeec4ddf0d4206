"""Clustered synthetic vectors for the IVF-PQ probes (ivfpq_probe.py, ivfpq_cuda_probe.py)."""

from __future__ import annotations

import numpy as np


def clustered(n: int, dim: int, clusters: int, rng: np.random.Generator, model=None):
    """Clustered vectors of low intrinsic dimension (as descriptors are): Gaussian blobs in a
    16-d latent space, mapped linearly to ``dim`` coordinates, plus small isotropic noise."""
    if model is None:
        centres = rng.uniform(0, 1, size=(clusters, 16)).astype(np.float32)
        basis = rng.normal(0, 1 / 4, size=(16, dim)).astype(np.float32)
        model = (centres, basis)
    centres, basis = model
    out = np.empty((n, dim), np.float32)
    step = 1 << 18
    for s in range(0, n, step):
        e = min(n, s + step)
        lab = rng.integers(0, len(centres), size=e - s)
        z = centres[lab] + rng.normal(0, 0.05, size=(e - s, 16)).astype(np.float32)
        out[s:e] = z @ basis + rng.normal(0, 0.005, size=(e - s, dim)).astype(np.float32)
    return out, model


def add_vector_args(ap, nq: int) -> None:
    """The vector-set options that probe_vectors reads (both IVF-PQ probes)."""
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--nq", type=int, default=nq)
    ap.add_argument("--ntrain", type=int, default=100_000)
    ap.add_argument("--clusters", type=int, default=2000)
    ap.add_argument("--vectors", default=None, help="a float32 [n, dim] .npy of real vectors (instead of synthetic)")


def probe_vectors(args, rng: np.random.Generator):
    """(x [n, dim], queries [nq, dim], training sample) of an IVF-PQ probe: real vectors from
    ``args.vectors`` (held-out queries; args.n and args.dim follow the file) or clustered ones."""
    if args.vectors:  # real vectors (e.g. SIFT descriptors, sift_descriptors.py)
        allv = np.load(args.vectors).astype(np.float32)
        allv = allv[rng.permutation(len(allv))]
        q, x = np.ascontiguousarray(allv[:args.nq]), np.ascontiguousarray(allv[args.nq:args.nq + args.n])
        args.n, args.dim = len(x), x.shape[1]
    else:
        x, model = clustered(args.n, args.dim, args.clusters, rng)
        q, _ = clustered(args.nq, args.dim, args.clusters, rng, model)
    xt = x[rng.choice(args.n, size=min(args.ntrain, args.n), replace=False)]
    return x, q, xt
