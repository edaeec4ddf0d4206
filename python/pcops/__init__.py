"""pcops: exact point-cloud and geometry operators for PyTorch on CPU and CUDA."""

from __future__ import annotations

from pcops import _loader

_loader.load()

from pcops.ops.ball_query import ball_query  # noqa: E402
from pcops.ops.chamfer_distance import chamfer_distance  # noqa: E402
from pcops.ops.furthest_point_sample import furthest_point_sample  # noqa: E402
from pcops.ops.gather_points import gather_points  # noqa: E402
from pcops.ops.group_points import group_points  # noqa: E402
from pcops.ops.knn import knn  # noqa: E402
from pcops.ops.point_conv import point_conv, point_conv_triplets  # noqa: E402
from pcops.ops.three_interpolate import three_interpolate  # noqa: E402
from pcops.ops.three_nn import three_nn  # noqa: E402
from pcops.ops.scatter import (  # noqa: E402
    gather_coo,
    gather_csr,
    scatter,
    scatter_max,
    scatter_min,
    segment_coo,
    segment_csr,
)
from pcops.ops.voxelize import voxel_downsample, voxelize  # noqa: E402
from pcops import flat  # noqa: E402
from pcops.ivfpq import IVFPQIndex  # noqa: E402
from pcops.spatial_index import SpatialIndex  # noqa: E402
from pcops import nn  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "IVFPQIndex",
    "SpatialIndex",
    "ball_query",
    "chamfer_distance",
    "flat",
    "furthest_point_sample",
    "gather_points",
    "group_points",
    "knn",
    "nn",
    "point_conv",
    "point_conv_triplets",
    "three_interpolate",
    "three_nn",
    "gather_coo",
    "gather_csr",
    "scatter",
    "scatter_max",
    "scatter_min",
    "segment_coo",
    "segment_csr",
    "voxel_downsample",
    "voxelize",
    "__version__",
]
