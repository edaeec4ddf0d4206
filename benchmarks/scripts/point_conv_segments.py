"""The work shape of the CUDA fast point_conv's MVMR for the probe's triplets (no GPU needed): for
tiles of --tiles output rows and chunks of --chunks triplets, the (tile, k) segments, their mean
length, the chunks, how full the chunks are (whole chunks, as wgmma multiplies them, and in
16-row fragments, as mma.sync skips the empty ones), and the weight rows streamed through L2 at
--channels input = output channels (each chunk reads its W_k block once per block of output
channels: chunks x C_out x C_in x 2 bytes in all), beside the gathered input rows (triplets x
C_in x 2 bytes per 128-channel block of outputs).

    PYTHONPATH=python PCOPS_LIBRARY=<build>/python/pcops/_C.so \
        python benchmarks/scripts/point_conv_segments.py [--points 165000] [--k 16] [--channels 512]
"""
from __future__ import annotations

import argparse

import numpy as np

from point_conv_probe import probe_triplets  # this directory


def chunk_stats(dst: np.ndarray, k: np.ndarray, kernels: int, tile: int, chunk: int) -> dict:
    seg = (dst // tile) * kernels + k
    counts = np.bincount(seg)
    counts = counts[counts > 0]
    full = counts // chunk
    rest = counts - full * chunk
    chunks = int(full.sum() + np.count_nonzero(rest))
    frag_rows = int(full.sum()) * chunk + int((np.ceil(rest / 16) * 16).sum())
    return {"tile": tile, "chunk": chunk, "segments": int(counts.size), "mean_segment": float(counts.mean()),
            "chunks": chunks, "fill_whole": float(counts.sum() / (chunks * chunk)),
            "fill_fragments": float(counts.sum() / frag_rows)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=165000)
    ap.add_argument("--k", type=int, default=16)
    ap.add_argument("--channels", type=int, default=512)
    ap.add_argument("--tiles", default="64,128,256")
    ap.add_argument("--chunks", default="64,128")
    ap.add_argument("--order", default="sampled", choices=["sampled", "morton"])
    args = ap.parse_args()
    _, t = probe_triplets(args.points, args.k, args.order)
    t = t.numpy()
    c = args.channels
    gathered = t.shape[0] * c * 2 * max(1, -(-c // 128)) / 1e9
    print(f"{t.shape[0]} triplets; gathered input rows at C = {c}: {gathered:.1f} GB")
    for tile in [int(x) for x in args.tiles.split(",")]:
        for chunk in [int(x) for x in args.chunks.split(",")]:
            r = chunk_stats(t[:, 0], t[:, 2], 27, tile, chunk)
            weights = r["chunks"] * c * c * 2 / 1e9
            print(f"tile {tile:4d} chunk {chunk:4d}: {r['segments']} segments of {r['mean_segment']:.1f}, "
                  f"{r['chunks']} chunks, fill {r['fill_whole']:.2f} whole / {r['fill_fragments']:.2f} in "
                  f"16-row fragments, weight rows {weights:.1f} GB")


if __name__ == "__main__":
    main()
