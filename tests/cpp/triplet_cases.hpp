#pragma once
// Inputs of point_conv's triplet construction for the CPU and CUDA tests: random centres and
// points in [-1, 1]^3, random neighbourhoods with padding (-1), and centre 0's slots naming points
// placed exactly on the cells' borders around it (offsets of multiples of half a cell side).
#include <cstdint>
#include <random>
#include <vector>

#include "pcops/point_conv.hpp"

namespace pcops_test {

struct TripletInputs {
  std::vector<float> centres, points;
  std::vector<int64_t> neighbours;
};

inline TripletInputs triplet_inputs(std::mt19937& rng, const pcops::TripletShape& s) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  TripletInputs in{std::vector<float>(s.centres * 3), std::vector<float>(s.points * 3),
                   std::vector<int64_t>(s.centres * s.slots)};
  for (float& v : in.centres) v = u(rng);
  for (float& v : in.points) v = u(rng);
  const float h = (s.extent * 2.0f) / static_cast<float>(s.cells);
  for (int64_t j = 0; j < s.slots && j < s.points; ++j)
    for (int a = 0; a < 3; ++a)
      in.points[j * 3 + a] = in.centres[a] + static_cast<float>(static_cast<int>(j % 9) - 4) * 0.5f * h;
  std::uniform_int_distribution<int64_t> pick(-1, s.points - 1);
  for (int64_t x = 0; x < static_cast<int64_t>(in.neighbours.size()); ++x)
    in.neighbours[x] = x < s.slots ? x : pick(rng);
  return in;
}

}  // namespace pcops_test
