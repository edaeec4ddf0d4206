"""pcops.furthest_point_sample against the exact oracle (contract: docs/ops/furthest_point_sample.md)."""

from __future__ import annotations

import pytest
import torch

import pcops
from conftest import degenerate_clouds, with_threads
from pcops import testing as oracle


def assert_fps_equal(points, num_samples, start_index=0, lengths=None, skip_near_origin=False):
    out = pcops.furthest_point_sample(points, num_samples, start_index, lengths, skip_near_origin)
    expect = oracle.furthest_point_sample(points, num_samples, start_index, lengths, skip_near_origin)
    assert out.dtype == torch.int64 and out.shape == expect.shape
    assert torch.equal(out, expect), (out != expect).nonzero()[:5]
    return out


@pytest.mark.parametrize("start_index", [0, 17])
def test_synthetic_clouds_match_oracle(cloud_factory, cloud_kind, start_index):
    # 1500 points: large enough for the accelerated (tree) path.
    points = torch.stack([cloud_factory(cloud_kind, 1500, 21), cloud_factory(cloud_kind, 1500, 22)])
    out = assert_fps_equal(points, 64, start_index)
    assert (out[:, 0] == start_index).all()
    if cloud_kind not in ("duplicates", "grid"):
        for b in range(2):
            assert out[b].unique().numel() == 64  # distinct while distinct points remain


def test_real_clouds_match_oracle(real_cloud):
    points = real_cloud.unsqueeze(0)
    out = assert_fps_equal(points, 200)
    assert out[0].unique().numel() == 200


@pytest.mark.parametrize("dim", [1, 2, 5])
def test_other_dimensions(dim, gen):
    assert_fps_equal(torch.rand(2, 150, dim, generator=gen), 40, start_index=3)


def test_more_samples_than_points_repeats_index_zero(gen):
    points = torch.rand(2, 7, 3, generator=gen)
    out = assert_fps_equal(points, 12, start_index=4)
    for b in range(2):
        assert sorted(out[b, :7].tolist()) == list(range(7))
        assert (out[b, 7:] == 0).all()


def test_lengths_pad_with_minus_one(gen):
    points = torch.rand(3, 20, 3, generator=gen)
    lengths = torch.tensor([20, 5, 0])
    out = assert_fps_equal(points, 8, lengths=lengths)
    assert (out[0] >= 0).all() and (out[0] < 20).all()
    assert sorted(out[1, :5].tolist()) == list(range(5)) and (out[1, 5:] == -1).all()
    assert (out[2] == -1).all()
    assert torch.equal(pcops.furthest_point_sample(points, 8, lengths=lengths.int()), out)
    # Only the first lengths[b] points take part: the tail does not change the result.
    tail_changed = points.clone()
    tail_changed[1, 5:] = 100.0
    assert torch.equal(pcops.furthest_point_sample(tail_changed, 8, lengths=lengths), out)


def test_start_index_with_lengths(gen):
    points = torch.rand(2, 10, 3, generator=gen)
    assert_fps_equal(points, 4, start_index=2, lengths=torch.tensor([3, 10]))
    # An empty cloud does not constrain start_index.
    assert_fps_equal(points, 4, start_index=5, lengths=torch.tensor([0, 10]))
    with pytest.raises(IndexError, match="start_index"):
        pcops.furthest_point_sample(points, 4, start_index=3, lengths=torch.tensor([3, 10]))


def test_zero_samples_empty_batch_and_empty_clouds(gen):
    assert pcops.furthest_point_sample(torch.rand(2, 5, 3, generator=gen), 0).shape == (2, 0)
    assert pcops.furthest_point_sample(torch.rand(0, 5, 3), 4).shape == (0, 4)
    assert pcops.furthest_point_sample(torch.rand(2, 0, 3), 0).shape == (2, 0)
    out = pcops.furthest_point_sample(torch.rand(2, 0, 3), 3, lengths=torch.tensor([0, 0]))
    assert (out == -1).all() and out.shape == (2, 3)
    with pytest.raises(ValueError, match="points"):
        pcops.furthest_point_sample(torch.rand(2, 0, 3), 3)


def test_single_point_cloud():
    out = pcops.furthest_point_sample(torch.rand(1, 1, 3), 3)
    assert out.tolist() == [[0, 0, 0]]


def test_ties_pick_the_smallest_index():
    # A square around the start: the two far corners tie; the smaller index wins.
    points = torch.tensor([[[0.0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [1, 1, 0]]])
    out = assert_fps_equal(points, 5)
    assert out[0, :2].tolist() == [0, 2]
    grid = torch.cartesian_prod(torch.arange(4.0), torch.arange(4.0), torch.arange(2.0)).unsqueeze(0)
    assert_fps_equal(grid, 32, start_index=5)


def test_duplicates(gen):
    base = torch.rand(1, 10, 3, generator=gen)
    points = torch.cat([base, base, base], dim=1)
    out = assert_fps_equal(points, 14)
    # The ten distinct positions are chosen first, each by its first occurrence.
    assert sorted(out[0, :10].tolist()) == list(range(10))
    assert (out[0, 10:] == 0).all()


def test_nan_and_inf_coordinates_count_as_zero_distance():
    nan, inf = float("nan"), float("inf")
    points = torch.tensor([[[0.0, 0, 0], [nan, 0, 0], [1, 0, 0], [inf, 0, 0], [0, 2, 0], [3e38, 3e38, 0]]])
    out = assert_fps_equal(points, 6)
    # Non-finite s counts as 0: the NaN/inf/overflowing points are never "furthest".
    assert out[0, :3].tolist() == [0, 4, 2]
    assert_fps_equal(points, 6, start_index=1)  # a NaN start: every s is NaN -> 0


def test_skip_near_origin(gen):
    points = torch.randn(2, 60, 3, generator=gen)
    points = points / points.norm(dim=-1, keepdim=True)
    points[:, 3::9] *= 1e-3  # 7 points near the origin (x^2+y^2+z^2 <= 1e-3)
    out = assert_fps_equal(points, 58, skip_near_origin=True)
    x, y, z = points.unbind(-1)
    near = ((x * x + y * y) + z * z) <= 1e-3
    chosen_near = torch.gather(near, 1, out[:, 1:])
    assert not chosen_near.any()
    plain = pcops.furthest_point_sample(points, 58)
    assert torch.gather(near, 1, plain[:, 1:]).any()  # without the rule they are chosen


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_inputs(dtype, gen):
    points = torch.randn(2, 300, 3, generator=gen).to(dtype)
    out = assert_fps_equal(points, 30)
    assert torch.equal(out, pcops.furthest_point_sample(points.float(), 30))


def test_huge_values(gen):
    points = torch.rand(1, 100, 3, generator=gen) * 1e19  # squared distances overflow to inf
    assert_fps_equal(points, 10)
    assert_fps_equal(torch.rand(1, 100, 3, generator=gen) * 1e18, 10)


def test_non_contiguous_inputs(gen):
    base = torch.rand(4, 3, 120, generator=gen)
    points = base.transpose(1, 2)[1::2]
    assert not points.is_contiguous()
    out = assert_fps_equal(points, 25, start_index=9)
    assert torch.equal(out, pcops.furthest_point_sample(points.contiguous(), 25, 9))


def test_independent_of_thread_count(gen):
    points = torch.rand(4, 2000, 3, generator=gen)
    one = with_threads(1, lambda: pcops.furthest_point_sample(points, 64))
    two = with_threads(2, lambda: pcops.furthest_point_sample(points, 64))
    assert torch.equal(one, two)


@pytest.mark.parametrize("scale", [1e-30, 1e-20, 1e18, 3e37])
def test_large_clouds_at_extreme_scales(scale, gen):
    points = (torch.rand(2, 1500, 3, generator=gen) * 2 - 1) * scale
    assert_fps_equal(points, 48, start_index=11)


def test_large_cloud_with_non_finite_points(gen):
    points = torch.rand(2, 1500, 3, generator=gen)
    points[0, ::97] = float("nan")
    points[1, ::89, 1] = float("inf")
    assert_fps_equal(points, 64)
    assert_fps_equal(points, 64, start_index=97)  # a NaN start
    assert_fps_equal(points, 64, lengths=torch.tensor([1200, 1500]))


def test_large_degenerate_clouds(gen):
    cluster, same, plane = degenerate_clouds(gen)
    for points in (cluster, same, plane):
        assert_fps_equal(points, 40)
    assert pcops.furthest_point_sample(same, 5).tolist() == [[0, 0, 0, 0, 0]]
