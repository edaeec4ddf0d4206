"""Semantic segmentation of a real aerial LiDAR tile with a small residual PointConv network.

Data: b9_training.ply from the shared CGAL data (22,300 points with colour; 2,447 of them carry
a class label: 0 ground, 1 vegetation, 2 roof; the rest are -1, unlabelled; see docs/data.md).
The labelled points are split spatially by a checkerboard of 8 x 8 tiles in the xy plane (tiles
of one colour train, the others test). The network sees the whole tile's coordinates and colours
(one graph over all 22,300 points), the loss only the training labels; accuracy and mean IoU
are measured on the held-out tiles. A per-point MLP on the same inputs is trained the same way
as a baseline.

Usage: python examples/point_conv_segmentation.py [--epochs 120] [--threads N] [--out result.json]
[--colour] [--device cuda] [--dtype bfloat16 --mode fast]
(one epoch = one optimiser step on the full tile; CPU by default). Inputs: the normalised height
and a constant 1 per point (geometry only) unless --colour adds the RGB values. --dtype bfloat16
runs the networks in bfloat16 (the loss in float32); with --mode fast on CUDA the point
convolutions then run on the tensor cores (mode="fast" of pcops.point_conv).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
import torch.nn.functional as F

import pcops
from pcops.data import load
from pcops.nn import PointConv


def find_cloud(name: str):
    from pcops import data

    for root in data._candidates():
        if (root / name).is_file():
            return load(root / name)
    raise SystemExit(f"{name} not found; see docs/data.md for the shared data set")


def knn_triplets(centres, points, k, t=3):
    """Triplets of a t^3-cell PointConv from the k nearest points of each centre."""
    dist, idx = pcops.knn(centres[None], points[None], k)
    extent = float(torch.quantile(dist[0, :, -1], 0.9)) * 1.0001
    return pcops.point_conv_triplets(centres, points, idx[0], extent, t)


class ResBlock(torch.nn.Module):
    def __init__(self, c, mode="exact"):
        super().__init__()
        self.conv1, self.bn1 = PointConv(c, c, bias=False, mode=mode), torch.nn.BatchNorm1d(c)
        self.conv2, self.bn2 = PointConv(c, c, bias=False, mode=mode), torch.nn.BatchNorm1d(c)

    def forward(self, x, trip):
        y = F.relu(self.bn1(self.conv1(x, trip)))
        return F.relu(x + self.bn2(self.conv2(y, trip)))


class Transition(torch.nn.Module):
    """PointConv from one level's points to another's (down- or up-sampling), BN, ReLU."""

    def __init__(self, c_in, c_out, mode="exact"):
        super().__init__()
        self.conv, self.bn = PointConv(c_in, c_out, bias=False, mode=mode), torch.nn.BatchNorm1d(c_out)

    def forward(self, x, trip, num_out):
        return F.relu(self.bn(self.conv(x, trip, num_out)))


class PointConvUNet(torch.nn.Module):
    def __init__(self, c_in, classes, widths=(16, 32, 64), mode="exact"):
        super().__init__()
        w0, w1, w2 = widths
        self.stem = Transition(c_in, w0, mode)
        self.block0 = ResBlock(w0, mode)
        self.down1 = Transition(w0, w1, mode)
        self.block1 = ResBlock(w1, mode)
        self.down2 = Transition(w1, w2, mode)
        self.block2 = ResBlock(w2, mode)
        self.up1 = Transition(w2, w1, mode)
        self.block1u = ResBlock(w1, mode)
        self.up0 = Transition(w1, w0, mode)
        self.block0u = ResBlock(w0, mode)
        self.head = torch.nn.Linear(w0, classes)

    def forward(self, x, g):
        x0 = self.block0(self.stem(x, g["t00"], g["n0"]), g["t00"])
        x1 = self.block1(self.down1(x0, g["t01"], g["n1"]), g["t11"])
        x2 = self.block2(self.down2(x1, g["t12"], g["n2"]), g["t22"])
        y1 = self.block1u(x1 + self.up1(x2, g["t21"], g["n1"]), g["t11"])
        y0 = self.block0u(x0 + self.up0(y1, g["t10"], g["n0"]), g["t00"])
        return self.head(y0)


def build_graph(pts):
    n0 = pts.shape[0]
    i1 = pcops.furthest_point_sample(pts[None], n0 // 4)[0]
    p1 = pts[i1]
    i2 = pcops.furthest_point_sample(p1[None], n0 // 16)[0]
    p2 = p1[i2]
    return {
        "n0": n0, "n1": p1.shape[0], "n2": p2.shape[0],
        "t00": knn_triplets(pts, pts, 8), "t11": knn_triplets(p1, p1, 12), "t22": knn_triplets(p2, p2, 12),
        "t01": knn_triplets(p1, pts, 8), "t12": knn_triplets(p2, p1, 8),
        "t21": knn_triplets(p1, p2, 6), "t10": knn_triplets(pts, p1, 6),
    }


def metrics(pred, label, mask, classes):
    p, y = pred[mask], label[mask]
    acc = float((p == y).float().mean())
    ious = []
    for c in classes:
        inter = int(((p == c) & (y == c)).sum())
        union = int(((p == c) | (y == c)).sum())
        if union > 0:
            ious.append(inter / union)
    return acc, float(np.mean(ious))


def train(model, forward, label, train_mask, test_mask, classes, epochs, lr):
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=epochs)
    counts = torch.bincount(label[train_mask], minlength=len(classes)).float()
    weight = torch.where(counts > 0, counts.sum() / (counts * (counts > 0).sum()).clamp(min=1), 0.0) ** 0.5
    history = []
    for epoch in range(epochs):
        model.train()
        logits = forward().float()
        loss = F.cross_entropy(logits[train_mask], label[train_mask], weight=weight)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if (epoch + 1) % 20 == 0 or epoch + 1 == epochs:
            model.eval()
            with torch.no_grad():
                pred = forward().argmax(1)
            tr = metrics(pred, label, train_mask, classes)
            te = metrics(pred, label, test_mask, classes)
            history.append({"epoch": epoch + 1, "loss": loss.item(), "train_acc": tr[0], "test_acc": te[0],
                            "test_miou": te[1]})
            print(f"  epoch {epoch + 1:4d}  loss {loss.item():.3f}  train acc {tr[0]:.3f}  "
                  f"test acc {te[0]:.3f}  test mIoU {te[1]:.3f}", flush=True)
    return history


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=120)
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--colour", action="store_true", help="add the RGB colours to the inputs")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                    help="the networks' dtype (inputs, parameters, activations; the loss in float32)")
    ap.add_argument("--mode", default="exact", choices=["exact", "fast"], help="pcops.point_conv's mode")
    args = ap.parse_args()
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    cloud = find_cloud("b9_training.ply")
    pts = torch.from_numpy(cloud.points.astype(np.float32))
    label = torch.from_numpy(cloud.properties["label"].astype(np.int64))  # -1: unlabelled
    classes = sorted(int(c) for c in torch.unique(label) if c >= 0)
    assert classes == list(range(len(classes)))
    lo = pts.min(0).values
    scale = float((pts.max(0).values - lo).max())
    pos = (pts - lo) / scale  # unit cube: the kernel extents are then O(1e-2)
    rgb = np.stack([cloud.properties[c] for c in ("red", "green", "blue")], 1)
    colour = torch.from_numpy(rgb.astype(np.float32))
    colour = colour / 255.0
    z = pos[:, 2:3]
    feats = torch.cat([(z - z.mean()) / z.std(), torch.ones_like(z)], 1)  # geometry only
    if args.colour:
        feats = torch.cat([colour, feats], 1)  # with colour the task is easy (a per-point MLP gets ~100 %)
    extent = pos.max(0).values
    tx = torch.floor(pos[:, 0] / extent[0] * 8).clamp(max=7)
    ty = torch.floor(pos[:, 1] / extent[1] * 8).clamp(max=7)
    even = ((tx + ty).long() % 2) == 0
    train_mask, test_mask = (label >= 0) & even, (label >= 0) & ~even
    label, train_mask, test_mask = label.to(device), train_mask.to(device), test_mask.to(device)
    print(f"b9_training.ply: {len(pts)} points, classes {classes}, labelled: {int(train_mask.sum())} train / "
          f"{int(test_mask.sum())} test (8 x 8 checkerboard of xy tiles)")
    print("  train class counts", torch.bincount(label[train_mask], minlength=len(classes)).tolist(),
          "test class counts", torch.bincount(label[test_mask], minlength=len(classes)).tolist())
    majority = int(torch.bincount(label[train_mask]).argmax())
    base_acc = float((label[test_mask] == majority).float().mean())
    print(f"majority-class test accuracy {base_acc:.3f}")

    t0 = time.perf_counter()
    graph = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in build_graph(pos).items()}
    t_graph = time.perf_counter() - t0
    feats = feats.to(device, dtype)
    print(f"graph: levels {graph['n0']}/{graph['n1']}/{graph['n2']} points, "
          f"{graph['t00'].shape[0]} triplets at full resolution, built in {t_graph:.1f} s")

    results = {"data": "b9_training.ply", "points": len(pts),
               "split": "labelled points, 8 x 8 xy checkerboard",
               "majority_test_acc": base_acc,
               "inputs": "height, 1" + (", rgb" if args.colour else ""),
               "epochs": args.epochs, "threads": torch.get_num_threads(), "device": args.device,
               "dtype": args.dtype, "mode": args.mode}
    print("MLP baseline (per point, same inputs):")
    mlp = torch.nn.Sequential(torch.nn.Linear(feats.shape[1], 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                              torch.nn.ReLU(), torch.nn.Linear(64, len(classes))).to(device, dtype)
    t0 = time.perf_counter()
    results["mlp"] = train(mlp, lambda: mlp(feats), label, train_mask, test_mask, classes, args.epochs,
                           args.lr)
    results["mlp_seconds"] = time.perf_counter() - t0

    print("PointConv U-Net (3 levels, residual blocks, t = 3):")
    net = PointConvUNet(feats.shape[1], len(classes), mode=args.mode).to(device, dtype)
    results["parameters"] = sum(p.numel() for p in net.parameters())
    t0 = time.perf_counter()
    results["pointconv"] = train(net, lambda: net(feats, graph), label, train_mask, test_mask, classes,
                                 args.epochs, args.lr)
    results["pointconv_seconds"] = time.perf_counter() - t0
    print(f"PointConv training: {results['pointconv_seconds']:.1f} s for {args.epochs} epochs "
          f"({results['parameters']} parameters)")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
