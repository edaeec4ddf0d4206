#!/usr/bin/env python3
"""Real 128-d vectors for the IVF-PQ benchmarks: SIFT descriptors (OpenCV) of the images of
Debian packages (gnome-backgrounds installs /usr/share/backgrounds; any image directory works),
written as one float32 [n, 128] .npy file.

Needs OpenCV's Python package (``pip install opencv-python-headless``; not a test dependency) and
``apt-get install gnome-backgrounds`` (or other image packages).

    python benchmarks/scripts/sift_descriptors.py --out data/sift.npy [--images DIR ...]
    python benchmarks/scripts/ivfpq_probe.py --vectors data/sift.npy --nlist 256 --nprobe 8 32
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".tif", ".tiff"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", nargs="+", default=["/usr/share/backgrounds", "/usr/share/wallpapers",
                                                     "/usr/share/images/desktop-base"])
    ap.add_argument("--out", default="data/sift.npy")
    ap.add_argument("--max-per-image", type=int, default=40000, help="strongest keypoints kept per image")
    ap.add_argument("--max-side", type=int, default=2048, help="images are downscaled to this longest side")
    args = ap.parse_args()
    import cv2  # an optional tool dependency

    sift = cv2.SIFT_create(nfeatures=args.max_per_image)
    files = sorted(p for d in args.images if Path(d).is_dir() for p in Path(d).rglob("*")
                   if p.suffix.lower() in IMAGE_SUFFIXES)
    parts = []
    for f in files:
        img = cv2.imread(str(f), cv2.IMREAD_GRAYSCALE)
        if img is None or min(img.shape) < 64:
            continue
        scale = args.max_side / max(img.shape)
        if scale < 1:
            img = cv2.resize(img, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
        _, desc = sift.detectAndCompute(img, None)
        if desc is not None and len(desc):
            parts.append(desc.astype(np.float32))
            print(f"{f}: {len(desc)} descriptors", flush=True)
    if not parts:
        raise SystemExit("no image with SIFT keypoints found in " + ", ".join(args.images))
    x = np.concatenate(parts)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.save(out, x)
    print(f"wrote {out}: {x.shape[0]} x {x.shape[1]} float32 from {len(parts)} images")


if __name__ == "__main__":
    main()
