"""The work shape of the CUDA fast point_conv's MVMR for the probe's triplets (no GPU needed): for
tiles of --tiles output rows and chunks of --chunks triplets, the (tile, k) segments, their mean
length, the chunks, how full the chunks are (whole chunks, as wgmma multiplies them, and in
16-row fragments, as mma.sync skips the empty ones), and the weight rows streamed through L2 at
--channels input = output channels (each chunk reads its W_k block once per block of output
channels: chunks x C_out x C_in x 2 bytes in all), beside the gathered input rows (triplets x
C_in x 2 bytes per 128-channel block of outputs).

    PYTHONPATH=python PCOPS_LIBRARY=<build>/python/pcops/_C.so \
        python benchmarks/scripts/point_conv_segments.py [--points 165000] [--k 16] [--channels 512] \
            [--runs] [--n-major]
"""
from __future__ import annotations

import argparse

import numpy as np

from point_conv_probe import probe_triplets  # this directory


def segment_chunks(dst: np.ndarray, k: np.ndarray, kernels: int, tile: int, chunk: int):
    """The (tile, k) segments' lengths, their whole chunks of `chunk` triplets and last partial
    chunks, and the number of chunks."""
    seg = (dst // tile) * kernels + k
    counts = np.bincount(seg)
    counts = counts[counts > 0]
    full = counts // chunk
    rest = counts - full * chunk
    return counts, full, rest, int(full.sum() + np.count_nonzero(rest))


def chunk_stats(dst: np.ndarray, k: np.ndarray, kernels: int, tile: int, chunk: int) -> dict:
    counts, full, rest, chunks = segment_chunks(dst, k, kernels, tile, chunk)
    frag_rows = int(full.sum()) * chunk + int((np.ceil(rest / 16) * 16).sum())
    return {"tile": tile, "chunk": chunk, "segments": int(counts.size), "mean_segment": float(counts.mean()),
            "chunks": chunks, "fill_whole": float(counts.sum() / (chunks * chunk)),
            "fill_fragments": float(counts.sum() / frag_rows)}


def run_stats(dst: np.ndarray, k: np.ndarray, kernels: int, tile: int = 128, chunk: int = 64, group: int = 16) -> dict:
    """How the chunk's sums go for tiles of `tile` rows and chunks of `chunk` (the wgmma kernel:
    four warps of `group` rows each): the runs of equal output rows in a chunk, the chunks where a
    run crosses between two warps' rows (their sums take two turns with a barrier between) or
    covers a whole warp's rows (four turns), the longest run inside each half of a 16-row fragment
    (the scan steps a warp needs: 1 for runs of 2, 2 for up to 4, 3 for up to 8), and the chunks a
    packing would need that never splits a run of at most `group` rows between warps (a run that
    does not fit in the current warp's rows starts the next warp's)."""
    seg = (dst // tile) * kernels + k
    order = np.lexsort((dst, seg))
    s, d = seg[order], dst[order]
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    pos = np.arange(s.size) - np.repeat(starts, np.diff(np.r_[starts, s.size]))  # position in segment
    chunk_id = np.cumsum(np.r_[True, (s[1:] != s[:-1]) | (pos[1:] % chunk == 0)]) - 1
    row = pos % chunk
    same_prev = np.r_[False, (d[1:] == d[:-1]) & (chunk_id[1:] == chunk_id[:-1])]
    n_chunks = int(chunk_id[-1] + 1)
    crossed = np.zeros(n_chunks, bool)
    at_boundary = same_prev & (row % group == 0)
    crossed[chunk_id[at_boundary]] = True
    # A run covering a whole group: equal rows at the group's first row and the next group's first.
    run_id = np.cumsum(~same_prev) - 1
    run_len = np.bincount(run_id)
    covered = np.zeros(n_chunks, bool)
    first_of_group = row % group == 0
    covers = first_of_group & same_prev & (run_len[run_id] - (np.arange(s.size) - np.flatnonzero(~same_prev)[run_id]) > group - 1)
    covered[chunk_id[covers]] = True
    # Scan steps a warp needs per fragment half (8 rows): the longest run piece inside the half.
    half = (chunk_id * (chunk // 8) + row // 8)
    piece = np.cumsum(~(same_prev & (row % 8 != 0))) - 1
    piece_len = np.bincount(piece)
    longest = np.zeros(int(half.max()) + 1, np.int64)
    np.maximum.at(longest, half[np.r_[True, piece[1:] != piece[:-1]]], piece_len)
    longest = longest[longest > 0]
    steps = np.ceil(np.log2(np.maximum(longest, 1))).astype(int)
    # Packing without splits: runs in segment order, a run of r <= group rows that does not fit in
    # the current group's free rows starts the next group.
    run_first = np.flatnonzero(~same_prev)
    runs_seg = s[run_first]
    lens = np.diff(np.r_[run_first, s.size])
    packed_chunks = 0
    cur_seg, used = -1, chunk  # rows used in the current chunk (a new segment starts a new chunk)
    for sg, r in zip(runs_seg.tolist(), lens.tolist()):
        if sg != cur_seg:
            cur_seg, used = sg, chunk
        if r <= group and used % group + r > group and used % group != 0:
            used += group - used % group
        if used >= chunk:
            packed_chunks += 1
            used = 0
        used += r
        while used > chunk:
            packed_chunks += 1
            used -= chunk
    return {"chunks": n_chunks, "runs": int(run_len.size), "mean_run": float(run_len.mean()),
            "crossed": float(crossed.mean()), "covered": float(covered.mean()),
            "halves_by_steps": [float(np.mean(steps == q)) for q in range(4)],
            "chunks_without_split_runs": packed_chunks}


def n_major_stats(dst: np.ndarray, k: np.ndarray, kernels: int, tile: int, n_max: int, step: int) -> dict:
    """The same segments with the triplets as the MMA's N dimension (wgmma m64nNk16: N any
    multiple of 8 up to 256, the output channels as M): a segment of n triplets in chunks of at
    most n_max columns, the last one rounded up to a multiple of `step` (the N of the instruction
    variants a kernel would carry), so the padding is at most step - 1 columns a chunk."""
    counts, full, rest, chunks = segment_chunks(dst, k, kernels, tile, n_max)
    padded = int(full.sum()) * n_max + int((np.ceil(rest / step) * step).sum())
    return {"segments": int(counts.size), "chunks": chunks, "fill": float(counts.sum() / padded)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=165000)
    ap.add_argument("--k", type=int, default=16)
    ap.add_argument("--channels", type=int, default=512)
    ap.add_argument("--tiles", default="64,128,256")
    ap.add_argument("--chunks", default="64,128")
    ap.add_argument("--order", default="sampled", choices=["sampled", "morton"])
    ap.add_argument("--runs", action="store_true", help="also the runs of equal output rows in the chunks "
                    "of the default kernel (tiles of 128, chunks of 64, four warps of 16 rows)")
    ap.add_argument("--n-major", action="store_true", help="also the chunks and their fill with the triplets "
                    "as the MMA's N dimension (chunks of up to 64 / 128 / 256 columns in steps of 8 / 16 / 32 / 64)")
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
    if args.n_major:
        for tile in [int(x) for x in args.tiles.split(",")]:
            for n_max in (64, 128, 256):
                for step in (8, 16, 32, 64):
                    if step > n_max:
                        continue
                    r = n_major_stats(t[:, 0], t[:, 2], 27, tile, n_max, step)
                    print(f"N-major: tile {tile:4d} N <= {n_max:3d} in steps of {step:2d}: {r['chunks']} chunks, "
                          f"fill {r['fill']:.3f}, weight rows {r['chunks'] * c * c * 2 / 1e9:.1f} GB")
    if args.runs:
        r = run_stats(t[:, 0], t[:, 2], 27)
        print(f"tile 128 chunk 64: {r['chunks']} chunks, {r['runs']} runs of {r['mean_run']:.2f} rows; "
              f"a run crosses between warps in {100 * r['crossed']:.1f} % of the chunks, covers a warp's "
              f"16 rows in {100 * r['covered']:.1f} %; fragment halves needing 0 / 1 / 2 / 3 scan steps: "
              + " / ".join(f"{100 * q:.1f} %" for q in r["halves_by_steps"])
              + f"; packed without splitting runs between warps: {r['chunks_without_split_runs']} chunks")


if __name__ == "__main__":
    main()
