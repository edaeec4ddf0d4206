"""Index range checks on CUDA without waiting for the stream: the operators that read through
indices (gather_points, group_points, three_interpolate, their backwards, point_conv) check them
against ranges known on the host, recorded by the operators that wrote the indices (FPS, ball
query, kNN, three_nn, point_conv_triplets) or read back once per unchanged tensor; bounds that do
not settle a check, changed tensors and new ones are read again (bindings/torch/index_ranges.hpp)."""

from __future__ import annotations

import pytest
import torch
from conftest import no_sync, same_bits

import pcops


def _cloud(gen, B=2, N=3000, C=16):
    xyz = (torch.rand(B, N, 3, generator=gen) * 2 - 1).cuda()
    feats = (torch.rand(B, C, N, generator=gen) * 2 - 1).cuda()
    return xyz, feats


def _set_abstraction(feats, idx, nb, i3, w):
    """A PointNet++-like layer on given indices: centre features, grouped neighbours and the
    features interpolated back, with both gradients of the features."""
    f = feats.clone().requires_grad_()
    centres = pcops.gather_points(f, idx)                      # [B, C, M]
    grouped = pcops.group_points(f, nb)                        # [B, C, M, K]
    up = pcops.three_interpolate(centres, i3, w)               # [B, C, N]
    (grouped.sum() + (up * up).sum()).backward()
    return centres.detach(), grouped.detach(), up.detach(), f.grad


def test_layer_on_indices_written_by_the_library_does_not_sync(gen):
    xyz, feats = _cloud(gen)
    idx = pcops.furthest_point_sample(xyz, 256)
    centres_xyz = torch.gather(xyz, 1, idx[..., None].expand(-1, -1, 3))
    _, nb = pcops.ball_query(centres_xyz, xyz, 0.3, 16)
    d, i3 = pcops.three_nn(xyz, centres_xyz)
    w = 1.0 / (d + 1e-8)
    w = w / w.sum(-1, keepdim=True)
    _, kn = pcops.knn(centres_xyz, xyz, 8)
    with no_sync():
        got = _set_abstraction(feats, idx, nb, i3, w)
        knn_grouped = pcops.group_points(feats, kn)
    # The same layer on copies of the indices (unknown tensors: read back, which syncs).
    ref = _set_abstraction(feats, idx.clone(), nb.clone(), i3.clone(), w)
    for a, b in zip(got, ref):
        assert same_bits(a, b)
    assert same_bits(knn_grouped, pcops.group_points(feats, kn.clone()))
    # Read back once, a copy is known too.
    nb2 = nb.clone()
    pcops.group_points(feats, nb2)
    with no_sync():
        again = pcops.group_points(feats, nb2)
    assert same_bits(again, got[1])


def test_views_of_known_indices_are_known(gen):
    xyz, feats = _cloud(gen)
    _, nb = pcops.ball_query(xyz[:, :100].contiguous(), xyz, 0.3, 8)
    with no_sync():
        part = pcops.group_points(feats[:1], nb[:1])  # a view: its base's range
    assert same_bits(part, pcops.group_points(feats[:1], nb[:1].clone()))
    view = nb[1:]
    view[0, 0, 0] = xyz.shape[1]  # a write through the view moves the shared version counter
    with pytest.raises(IndexError, match="idx"):
        pcops.group_points(feats[1:], view)
    with pytest.raises(IndexError, match="idx"):
        pcops.group_points(feats, nb)


def test_bounds_that_do_not_settle_are_read_and_errors_still_raise(gen):
    xyz, feats = _cloud(gen)
    idx = pcops.furthest_point_sample(xyz, 64)
    top = int(idx.max())
    # Recorded bound N - 1, the features only top + 1 points wide: read, inside, no error.
    narrow = feats[:, :, : top + 1].contiguous()
    assert same_bits(pcops.gather_points(narrow, idx), pcops.gather_points(feats, idx))
    with pytest.raises(IndexError, match="idx"):
        pcops.gather_points(feats[:, :, :top].contiguous(), idx)
    # An in-place write moves the version counter: read again.
    idx[0, 5] = feats.shape[2]
    with pytest.raises(IndexError, match="idx"):
        pcops.gather_points(feats, idx)
    idx[0, 5] = -2
    with pytest.raises(IndexError, match="idx"):
        pcops.gather_points(feats, idx)


def test_triplets_written_by_point_conv_triplets_do_not_sync(gen):
    pts = torch.rand(2000, 3, generator=gen).cuda()
    _, nb = pcops.knn(pts[None], pts[None], 12)
    trip = pcops.point_conv_triplets(pts, pts, nb[0], 0.2, 3)
    f = torch.rand(2000, 8, generator=gen).cuda().requires_grad_()
    w = torch.rand(27, 12, 8, generator=gen).cuda().requires_grad_()
    with no_sync():
        out = pcops.point_conv(f, w, trip, 2000)
        out.sum().backward()
    ref = pcops.point_conv(f.detach(), w.detach(), trip.clone(), 2000)
    assert same_bits(out, ref)
    # Fewer outputs than centres: the recorded bound does not settle it; the exact range does
    # (or raises).
    top = int(trip[:, 0].max())
    assert same_bits(pcops.point_conv(f.detach(), w.detach(), trip, top + 1), ref[: top + 1])
    with pytest.raises(IndexError, match="output index i"):
        pcops.point_conv(f.detach(), w.detach(), trip, top)
