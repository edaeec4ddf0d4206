"""Bad input: the exception type and the argument named in the message (CONTRACTS.md, Errors)."""

from __future__ import annotations

import math

import pytest
import torch

import pcops

P = torch.rand(2, 6, 3)
R = torch.rand(2, 9, 3)


def fps(points=P, num_samples=3, **kw):
    return pcops.furthest_point_sample(points, num_samples, **kw)


def knn(query=P, ref=R, k=2, **kw):
    return pcops.knn(query, ref, k, **kw)


def ball(query=P, ref=R, radius=0.5, K=2, **kw):
    return pcops.ball_query(query, ref, radius, K, **kw)


OPS = {"fps": (fps, "points"), "knn": (knn, "query"), "ball": (ball, "query")}


# ------------------------------------------------------------------ dtypes


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.int64, torch.int32, torch.uint8, torch.bool])
def test_unsupported_coordinate_dtype_is_type_error(op, dtype):
    fn, name = OPS[op]
    with pytest.raises(TypeError, match=name) as info:
        fn(P.to(dtype), R.to(dtype)) if op != "fps" else fn(P.to(dtype))
    assert "float32" in str(info.value)


def test_ref_dtype_errors():
    with pytest.raises(TypeError, match="ref"):
        knn(ref=R.double())
    with pytest.raises(TypeError, match="ref"):
        ball(ref=R.half())  # ball_query needs equal dtypes
    with pytest.raises(TypeError, match="ref"):
        ball(query=P.bfloat16(), ref=R.half())


# ------------------------------------------------------------------ shapes


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("shape", [(6, 3), (1, 2, 6, 3), ()])
def test_wrong_rank_is_value_error(op, shape):
    fn, name = OPS[op]
    bad = torch.rand(shape)
    with pytest.raises(ValueError, match=name):
        fn(bad)


def test_ref_rank_and_batch_and_dim():
    with pytest.raises(ValueError, match="ref"):
        knn(ref=torch.rand(9, 3))
    with pytest.raises(ValueError, match="ref"):
        knn(ref=torch.rand(3, 9, 3))
    with pytest.raises(ValueError, match="ref"):
        knn(ref=torch.rand(2, 9, 4))
    with pytest.raises(ValueError, match="ref"):
        ball(ref=torch.rand(3, 9, 3))
    with pytest.raises(ValueError, match="query"):
        ball(query=torch.rand(2, 6, 2), ref=torch.rand(2, 9, 2))
    with pytest.raises(ValueError, match="dim"):
        knn(query=torch.rand(2, 6, 0), ref=torch.rand(2, 9, 0), k=1)
    with pytest.raises(ValueError, match="dim"):
        fps(points=torch.rand(2, 6, 0))


# ------------------------------------------------------------------ scalar arguments


def test_negative_counts_are_value_errors():
    with pytest.raises(ValueError, match="num_samples"):
        fps(num_samples=-1)
    with pytest.raises(ValueError, match="k"):
        knn(k=-1)
    with pytest.raises(ValueError, match="K"):
        ball(K=-3)


@pytest.mark.parametrize("batch", [2, 0])
def test_output_size_overflow_is_value_error(batch):
    huge = 2**62
    q, r = P[:batch], R[:batch]
    with pytest.raises(ValueError, match="k"):
        pcops.knn(q, r, huge, ref_lengths=torch.full((batch,), 9))
    with pytest.raises(ValueError, match="K"):
        pcops.ball_query(q, r, 0.5, huge)
    with pytest.raises(ValueError, match="num_samples"):
        pcops.furthest_point_sample(q, huge)


def test_k_greater_than_n():
    with pytest.raises(ValueError, match="k"):
        knn(k=10)


@pytest.mark.parametrize("value", [2.5, 2.0, "3", None, True, torch.tensor(2)])
def test_non_integer_counts_are_type_errors(value):
    with pytest.raises(TypeError, match="num_samples"):
        fps(num_samples=value)
    with pytest.raises(TypeError, match="k"):
        knn(k=value)
    with pytest.raises(TypeError, match="K"):
        ball(K=value)


def test_numpy_integers_are_accepted():
    import numpy as np
    assert knn(k=np.int64(2))[1].shape == (2, 6, 2)


@pytest.mark.parametrize("radius", [-0.1, -1e-30, math.nan, math.inf, -math.inf, 1e39])
def test_bad_radius_is_value_error(radius):
    with pytest.raises(ValueError, match="radius"):
        ball(radius=radius)


@pytest.mark.parametrize("radius", [torch.tensor(0.5), True, "0.5", None, 1j])
def test_radius_must_be_a_python_number(radius):
    with pytest.raises(TypeError, match="radius"):
        ball(radius=radius)


def test_start_index_out_of_range_is_index_error():
    with pytest.raises(IndexError, match="start_index"):
        fps(start_index=6)
    with pytest.raises(IndexError, match="start_index"):
        fps(start_index=-1)


def test_skip_near_origin_needs_3d():
    with pytest.raises(ValueError, match="skip_near_origin"):
        fps(points=torch.rand(2, 6, 2), skip_near_origin=True)
    with pytest.raises(TypeError, match="skip_near_origin"):
        fps(skip_near_origin=1)


# ------------------------------------------------------------------ lengths

LENGTH_ARGS = [
    ("fps", "lengths"),
    ("knn", "query_lengths"),
    ("knn", "ref_lengths"),
    ("ball", "query_lengths"),
    ("ball", "ref_lengths"),
]


@pytest.mark.parametrize("op,arg", LENGTH_ARGS)
def test_lengths_wrong_shape(op, arg):
    fn = OPS[op][0]
    for bad in (torch.tensor([1, 2, 3]), torch.tensor([[1, 2]]), torch.tensor(2)):
        with pytest.raises(ValueError, match=arg):
            fn(**{arg: bad})


@pytest.mark.parametrize("op,arg", LENGTH_ARGS)
def test_lengths_out_of_range(op, arg):
    fn = OPS[op][0]
    for bad in (torch.tensor([-1, 2]), torch.tensor([2, 10])):
        with pytest.raises(ValueError, match=arg):
            fn(**{arg: bad})


@pytest.mark.parametrize("op,arg", LENGTH_ARGS)
def test_lengths_wrong_dtype(op, arg):
    fn = OPS[op][0]
    with pytest.raises(TypeError, match=arg):
        fn(**{arg: torch.tensor([1.0, 2.0])})


@pytest.mark.parametrize("op,arg", LENGTH_ARGS)
def test_lengths_on_another_device(op, arg):
    fn = OPS[op][0]
    with pytest.raises(ValueError, match=arg):
        fn(**{arg: torch.tensor([1, 2], device="meta")})


# ------------------------------------------------------------------ devices


@pytest.mark.parametrize("which", ["query", "ref"])
def test_mixed_devices_are_value_errors(which):
    moved = {which: (P if which == "query" else R).to("meta")}
    with pytest.raises(ValueError, match="device"):
        knn(**moved)
    with pytest.raises(ValueError, match="device"):
        ball(**moved)


def test_all_meta_inputs_give_meta_outputs():
    out = fps(points=P.to("meta"), num_samples=4)
    assert out.device.type == "meta" and out.shape == (2, 4) and out.dtype == torch.int64
    d, i = knn(query=P.to("meta"), ref=R.to("meta"), k=3)
    assert d.device.type == "meta" and d.shape == (2, 6, 3) and d.dtype == torch.float32
    d, i = ball(query=P.to("meta"), ref=R.to("meta"), K=4)
    assert i.device.type == "meta" and i.shape == (2, 6, 4) and i.dtype == torch.int64


def test_meta_inputs_are_checked_like_real_ones():
    with pytest.raises(TypeError, match="query"):
        knn(query=P.double().to("meta"), ref=R.double().to("meta"))
    with pytest.raises(ValueError, match="k"):
        knn(query=P.to("meta"), ref=R.to("meta"), k=10)
    with pytest.raises(ValueError, match="ref"):
        ball(query=P.to("meta"), ref=torch.rand(3, 9, 3, device="meta"))


def test_errors_leave_no_partial_state():
    # After an error the op still works (no global state corrupted).
    with pytest.raises(ValueError):
        knn(k=-1)
    assert knn(k=2)[1].shape == (2, 6, 2)
