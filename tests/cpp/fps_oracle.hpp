#pragma once
// Furthest point sampling test helpers: the brute-force oracle written from the contract alone
// (one pass over the cloud per step, scalar), cloud generators and a small point-file loader.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/distance.hpp"
#include "pcops/furthest_point_sample.hpp"
#include "pcops/view.hpp"

namespace fps_test {

// A [batch, count, dim] float32 cloud stored contiguously.
struct FpsCloud {
  int64_t batch = 0, count = 0, dim = 0;
  std::vector<float> data;
  std::vector<float> alt;  // [batch][dim][count + 5] copy for strided views

  FpsCloud() = default;
  FpsCloud(int64_t b, int64_t n, int64_t d) : batch(b), count(n), dim(d), data(size_t(b * n * d), 0.0f) {}
  float& at(int64_t b, int64_t n, int64_t d) { return data[size_t((b * count + n) * dim + d)]; }
  float at(int64_t b, int64_t n, int64_t d) const { return data[size_t((b * count + n) * dim + d)]; }
  pcops::PointsView view() const {
    return pcops::PointsView::contiguous(data.empty() ? nullptr : data.data(), batch, count, dim);
  }
  // Same values, coordinates of a cloud stored as rows (stride_dim = count + 5), NaN in the gaps.
  pcops::PointsView strided_view() {
    const int64_t ld = count + 5;
    alt.assign(size_t(batch * dim * ld + 1), std::nanf(""));
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t n = 0; n < count; ++n)
        for (int64_t d = 0; d < dim; ++d) alt[size_t((b * dim + d) * ld + n)] = at(b, n, d);
    return pcops::PointsView{alt.data(), batch, count, dim, dim * ld, 1, ld};
  }
};

// The contract, literally: m_j starts at +inf; each step folds the newest centre into m_j (a
// non-finite s counts as 0) and picks the smallest index of the largest m_j among the points
// allowed to be chosen (index 0 when none is).
inline std::vector<int64_t> fps_oracle(const pcops::PointsView& P, const pcops::LengthsView& lengths,
                                       const pcops::FpsParams& params) {
  const int64_t M = params.num_samples;
  std::vector<int64_t> out(size_t(P.batch * M), -1);
  for (int64_t b = 0; b < P.batch; ++b) {
    const int64_t n = lengths.present() ? lengths.data[b] : P.count;
    const int64_t steps = lengths.present() ? std::min(M, n) : M;
    if (steps <= 0) continue;
    std::vector<float> m(size_t(n), INFINITY);
    std::vector<bool> allowed(size_t(n), true);
    if (params.skip_near_origin) {
      for (int64_t j = 0; j < n; ++j) {
        const float x = P.at(b, j, 0), y = P.at(b, j, 1), z = P.at(b, j, 2);
        allowed[size_t(j)] = ((x * x + y * y) + z * z) > 1e-3f;
      }
    }
    int64_t c = params.start_index;
    for (int64_t t = 0; t < steps; ++t) {
      out[size_t(b * M + t)] = c;
      int64_t arg = -1;
      for (int64_t j = 0; j < n; ++j) {
        float s = pcops::common::squared_distance(&P.at(b, c, 0), P.stride_dim, &P.at(b, j, 0),
                                                  P.stride_dim, P.dim);
        if (!std::isfinite(s)) s = 0.0f;
        m[size_t(j)] = std::min(m[size_t(j)], s);
        if (allowed[size_t(j)] && (arg < 0 || m[size_t(j)] > m[size_t(arg)])) arg = j;
      }
      c = arg < 0 ? 0 : arg;
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Generators (deterministic for a seed).

inline FpsCloud uniform_cube(int64_t b, int64_t n, int64_t d, uint32_t seed, float lo = -1.0f,
                             float hi = 1.0f) {
  FpsCloud c(b, n, d);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  for (auto& v : c.data) v = u(rng);
  return c;
}

// Points on the unit sphere plus gaussian noise of 0.01.
inline FpsCloud sphere_shell(int64_t b, int64_t n, uint32_t seed) {
  FpsCloud c(b, n, 3);
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (int64_t k = 0; k < b * n; ++k) {
    float v[3];
    float r = 0.0f;
    do {
      for (float& x : v) x = g(rng);
      r = std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
    } while (r < 1e-6f);
    for (int d = 0; d < 3; ++d) c.data[size_t(3 * k + d)] = v[d] / r + 0.01f * g(rng);
  }
  return c;
}

// Reorders every cloud of c by its first coordinate (spatially sorted input).
inline void sort_by_x(FpsCloud& c) {
  for (int64_t b = 0; b < c.batch; ++b) {
    std::vector<std::vector<float>> rows(size_t(c.count));
    for (int64_t n = 0; n < c.count; ++n)
      for (int64_t d = 0; d < c.dim; ++d) rows[size_t(n)].push_back(c.at(b, n, d));
    std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& z) { return a[0] < z[0]; });
    for (int64_t n = 0; n < c.count; ++n)
      for (int64_t d = 0; d < c.dim; ++d) c.at(b, n, d) = rows[size_t(n)][size_t(d)];
  }
}

// Integer lattice g x g x g (exact ties everywhere), in shuffled order when seed != 0.
inline FpsCloud integer_grid(int64_t g, uint32_t seed) {
  FpsCloud c(1, g * g * g, 3);
  std::vector<int64_t> order(size_t(g * g * g));
  for (size_t k = 0; k < order.size(); ++k) order[k] = int64_t(k);
  if (seed != 0) std::shuffle(order.begin(), order.end(), std::mt19937(seed));
  for (int64_t k = 0; k < g * g * g; ++k) {
    const int64_t v = order[size_t(k)];
    c.at(0, k, 0) = float(v % g);
    c.at(0, k, 1) = float((v / g) % g);
    c.at(0, k, 2) = float(v / (g * g));
  }
  return c;
}

// n points drawn (with repetition) from `distinct` random positions.
inline FpsCloud duplicate_heavy(int64_t n, int64_t distinct, uint32_t seed) {
  FpsCloud base = uniform_cube(1, distinct, 3, seed);
  FpsCloud c(1, n, 3);
  std::mt19937 rng(seed + 1);
  std::uniform_int_distribution<int64_t> pick(0, distinct - 1);
  for (int64_t k = 0; k < n; ++k) {
    const int64_t s = pick(rng);
    for (int d = 0; d < 3; ++d) c.at(0, k, d) = base.at(0, s, d);
  }
  return c;
}

// Density varying by orders of magnitude: nested clusters of shrinking radius.
inline FpsCloud varying_density(int64_t n, uint32_t seed) {
  FpsCloud c(1, n, 3);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t k = 0; k < n; ++k) {
    const float scale = std::pow(10.0f, -float(k % 5));  // 1 .. 1e-4
    for (int d = 0; d < 3; ++d) c.at(0, k, d) = 5.0f * float(d) + scale * u(rng);
  }
  return c;
}

// ---------------------------------------------------------------------------------------------
// Point files: .xyz / .off (ascii) and .ply (ascii or binary_little_endian, vertex element first,
// float/double/uchar/int/uint properties). Returns an empty cloud when the file cannot be read.

inline FpsCloud load_points(const std::string& path, int64_t max_points = -1) {
  std::ifstream in(path, std::ios::binary);
  FpsCloud c;
  if (!in) return c;
  std::vector<float> xyz;
  auto ends_with = [&](const char* s) {
    const size_t k = std::strlen(s);
    return path.size() >= k && path.compare(path.size() - k, k, s) == 0;
  };
  std::string line;
  if (ends_with(".xyz")) {
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      float v[3];
      if (ls >> v[0] >> v[1] >> v[2]) xyz.insert(xyz.end(), v, v + 3);
    }
  } else if (ends_with(".off")) {
    std::getline(in, line);
    int64_t nv = 0, nf = 0, ne = 0;
    in >> nv >> nf >> ne;
    for (int64_t k = 0; k < nv; ++k) {
      float v[3];
      if (!(in >> v[0] >> v[1] >> v[2])) break;
      xyz.insert(xyz.end(), v, v + 3);
    }
  } else if (ends_with(".ply")) {
    bool binary = false;
    int64_t nv = 0;
    std::vector<std::string> types, names;
    bool in_vertex = false;
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      std::string w;
      ls >> w;
      if (w == "format") {
        std::string f;
        ls >> f;
        binary = f == "binary_little_endian";
      } else if (w == "element") {
        std::string e;
        ls >> e;
        in_vertex = e == "vertex";
        if (in_vertex) ls >> nv;
      } else if (w == "property" && in_vertex) {
        std::string t, nm;
        ls >> t >> nm;
        types.push_back(t);
        names.push_back(nm);
      } else if (w == "end_header") {
        break;
      }
    }
    auto size_of = [](const std::string& t) -> int {
      if (t == "double" || t == "float64") return 8;
      if (t == "float" || t == "float32" || t == "int" || t == "int32" || t == "uint" || t == "uint32") return 4;
      if (t == "short" || t == "ushort" || t == "int16" || t == "uint16") return 2;
      return 1;
    };
    if (max_points >= 0) nv = std::min(nv, max_points);
    for (int64_t k = 0; k < nv; ++k) {
      double v[3] = {0, 0, 0};
      if (binary) {
        for (size_t p = 0; p < types.size(); ++p) {
          char buf[8];
          in.read(buf, size_of(types[p]));
          double val = 0;
          if (types[p] == "double" || types[p] == "float64") {
            std::memcpy(&val, buf, 8);
          } else if (types[p] == "float" || types[p] == "float32") {
            float f;
            std::memcpy(&f, buf, 4);
            val = f;
          }
          for (int d = 0; d < 3; ++d)
            if (names[p] == std::string(1, char('x' + d))) v[d] = val;
        }
        if (!in) break;
      } else {
        if (!std::getline(in, line)) break;
        std::istringstream ls(line);
        for (size_t p = 0; p < names.size(); ++p) {
          double val = 0;
          ls >> val;
          for (int d = 0; d < 3; ++d)
            if (names[p] == std::string(1, char('x' + d))) v[d] = val;
        }
      }
      for (double x : v) xyz.push_back(float(x));
    }
  }
  int64_t n = int64_t(xyz.size() / 3);
  if (max_points >= 0) n = std::min(n, max_points);
  c = FpsCloud(1, n, 3);
  std::copy(xyz.begin(), xyz.begin() + 3 * n, c.data.begin());
  return c;
}

}  // namespace fps_test
