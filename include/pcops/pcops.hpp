#pragma once
// Umbrella header of the pcops C++ API (no PyTorch, no CUDA headers).
#include "pcops/ball_query.hpp"
#include "pcops/context.hpp"
#include "pcops/error.hpp"
#include "pcops/furthest_point_sample.hpp"
#include "pcops/gather_points.hpp"
#include "pcops/group_points.hpp"
#include "pcops/knn.hpp"
#include "pcops/point_conv.hpp"
#include "pcops/three_interpolate.hpp"
#include "pcops/three_nn.hpp"
#include "pcops/version.hpp"
#include "pcops/view.hpp"
