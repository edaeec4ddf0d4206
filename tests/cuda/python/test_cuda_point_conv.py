"""CUDA pcops.point_conv (forward, both gradients, triplet construction, the nn module) against the
CPU backend bit for bit; out-of-range triplets raise IndexError before any kernel runs."""

from __future__ import annotations

import pytest
import torch
from conftest import same_bits

import pcops


def _inputs(gen, n_in, n_out, c_in, c_out, K, T):
    features = torch.rand(n_in, c_in, generator=gen) * 2 - 1
    weights = torch.rand(K, c_out, c_in, generator=gen) * 2 - 1
    triplets = torch.stack([torch.randint(0, n_out, (T,), generator=gen),
                            torch.randint(0, n_in, (T,), generator=gen),
                            torch.randint(0, K, (T,), generator=gen)], dim=1)
    return features, weights, triplets


@pytest.mark.parametrize("shape", [(40, 30, 6, 5, 27, 400), (3000, 2500, 64, 96, 27, 60000),
                                   (5, 3, 1, 1, 1, 7), (10, 10, 4, 4, 27, 0)])
def test_forward_and_gradients_bitwise(shape, gen):
    n_in, n_out, c_in, c_out, K, T = shape
    f, w, t = _inputs(gen, n_in, n_out, c_in, c_out, K, T)
    grad = torch.rand(n_out, c_out, generator=gen)
    outs = []
    for dev in ("cpu", "cuda"):
        fd, wd = f.to(dev).requires_grad_(), w.to(dev).requires_grad_()
        out = pcops.point_conv(fd, wd, t.to(dev), n_out)
        gf, gw = torch.autograd.grad(out, (fd, wd), grad.to(dev))
        outs.append((out, gf, gw))
    for a, b in zip(*outs):
        assert same_bits(a, b)


def test_triplets_and_module_match_cpu(gen):
    pts = torch.rand(2000, 3, generator=gen)
    _, idx = pcops.ball_query(pts[None], pts[None], 0.1, 16)
    trip = pcops.point_conv_triplets(pts, pts, idx[0], 0.1, 3)
    trip_cuda = pcops.point_conv_triplets(pts.cuda(), pts.cuda(), idx[0].cuda(), 0.1, 3)
    assert torch.equal(trip, trip_cuda.cpu())
    layer = pcops.nn.PointConv(3, 8)
    assert same_bits(layer(pts, trip), layer.cuda()(pts.cuda(), trip_cuda))


def test_out_of_range_raises_index_error(gen):
    f, w, t = _inputs(gen, 40, 30, 6, 5, 27, 400)
    t[5, 2] = 27
    with pytest.raises(IndexError, match="triplets"):
        pcops.point_conv(f.cuda(), w.cuda(), t.cuda(), 30)
