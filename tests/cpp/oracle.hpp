#pragma once
// Test helpers shared by the operator suites: owned clouds with views (also non-contiguous),
// cloud generators, point-cloud file loaders, float32-exact brute-force oracles written from the
// contracts alone, sentinel-prefilled outputs and bitwise comparison.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "pcops/error.hpp"
#include "pcops/view.hpp"

namespace pcops_test {

// ---------------------------------------------------------------------------------------------
// Clouds

// A [batch, count, dim] float32 cloud; `view()` is contiguous, `strided_view()` reads the same
// values from a copy laid out [batch][dim][count] with a gap between batches.
struct Cloud {
  int64_t batch = 0, count = 0, dim = 0;
  std::vector<float> data;  // contiguous [batch, count, dim]
  std::vector<float> alt;   // [batch][dim][count + 3]

  Cloud() = default;
  Cloud(int64_t b, int64_t n, int64_t d) : batch(b), count(n), dim(d), data(b * n * d, 0.0f) {}

  float& at(int64_t b, int64_t n, int64_t d) { return data[(b * count + n) * dim + d]; }
  float at(int64_t b, int64_t n, int64_t d) const { return data[(b * count + n) * dim + d]; }

  pcops::PointsView view() const {
    return pcops::PointsView::contiguous(data.empty() ? nullptr : data.data(), batch, count, dim);
  }
  pcops::PointsView strided_view() {
    const int64_t ld = count + 3;
    alt.assign(static_cast<size_t>(batch * dim * ld + 1), std::nanf(""));
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t n = 0; n < count; ++n)
        for (int64_t d = 0; d < dim; ++d) alt[(b * dim + d) * ld + n] = at(b, n, d);
    return pcops::PointsView{alt.data(), batch, count, dim, dim * ld, 1, ld};
  }
};

inline Cloud uniform_cloud(std::mt19937& rng, int64_t b, int64_t n, int64_t d, float lo = 0.0f,
                           float hi = 1.0f) {
  Cloud c(b, n, d);
  std::uniform_real_distribution<float> u(lo, hi);
  for (float& v : c.data) v = u(rng);
  return c;
}

// Points on a unit sphere with gaussian noise (a surface: most grid cells are empty).
inline Cloud shell_cloud(std::mt19937& rng, int64_t n, float noise = 0.01f) {
  Cloud c(1, n, 3);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i) {
    float p[3] = {g(rng), g(rng), g(rng)};
    const float len = std::sqrt(p[0] * p[0] + p[1] * p[1] + p[2] * p[2]) + 1e-12f;
    for (int d = 0; d < 3; ++d) c.at(0, i, d) = p[d] / len + noise * g(rng);
  }
  return c;
}

// Clusters whose spreads differ by orders of magnitude (varying density).
inline Cloud clustered_cloud(std::mt19937& rng, int64_t n) {
  Cloud c(1, n, 3);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_real_distribution<float> u(-10.0f, 10.0f);
  const float spreads[4] = {1e-3f, 1e-1f, 1.0f, 5.0f};
  for (int64_t i = 0; i < n;) {
    const float cx = u(rng), cy = u(rng), cz = u(rng), sp = spreads[(i / 97) % 4];
    for (int64_t t = 0; t < 97 && i < n; ++t, ++i) {
      c.at(0, i, 0) = cx + sp * g(rng);
      c.at(0, i, 1) = cy + sp * g(rng);
      c.at(0, i, 2) = cz + sp * g(rng);
    }
  }
  return c;
}

// Integer lattice points (many exact distance ties), shuffled.
inline Cloud lattice_cloud(std::mt19937& rng, int64_t side) {
  Cloud c(1, side * side * side, 3);
  std::vector<int64_t> perm(static_cast<size_t>(c.count));
  for (int64_t i = 0; i < c.count; ++i) perm[i] = i;
  std::shuffle(perm.begin(), perm.end(), rng);
  for (int64_t i = 0; i < c.count; ++i) {
    const int64_t v = perm[i];
    c.at(0, i, 0) = static_cast<float>(v % side);
    c.at(0, i, 1) = static_cast<float>((v / side) % side);
    c.at(0, i, 2) = static_cast<float>(v / (side * side));
  }
  return c;
}

// Few distinct locations, each repeated many times.
inline Cloud duplicate_cloud(std::mt19937& rng, int64_t n, int64_t distinct) {
  Cloud base = uniform_cloud(rng, 1, distinct, 3);
  Cloud c(1, n, 3);
  std::uniform_int_distribution<int64_t> pick(0, distinct - 1);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t j = pick(rng);
    for (int d = 0; d < 3; ++d) c.at(0, i, d) = base.at(0, j, d);
  }
  return c;
}

// Sorts the points of batch entry 0 lexicographically by (z, y, x) cell of a coarse grid
// (spatially coherent order, as scanners and voxelised data deliver).
inline void spatial_sort(Cloud& c) {
  std::vector<std::pair<int64_t, int64_t>> key(static_cast<size_t>(c.count));
  for (int64_t i = 0; i < c.count; ++i) {
    int64_t k = 0;
    for (int d = 2; d >= 0; --d) k = k * 64 + static_cast<int64_t>(std::floor(c.at(0, i, d) * 63.99f));
    key[i] = {k, i};
  }
  std::sort(key.begin(), key.end());
  Cloud out(1, c.count, c.dim);
  for (int64_t i = 0; i < c.count; ++i)
    for (int64_t d = 0; d < c.dim; ++d) out.at(0, i, d) = c.at(0, key[i].second, d);
  c.data = out.data;
}

// Picks m points of cloud `src` (batch 0), optionally jittered, as a query cloud.
inline Cloud pick_queries(std::mt19937& rng, const Cloud& src, int64_t m, float jitter) {
  Cloud q(1, m, src.dim);
  std::uniform_int_distribution<int64_t> pick(0, src.count - 1);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (int64_t i = 0; i < m; ++i) {
    const int64_t j = pick(rng);
    for (int64_t d = 0; d < src.dim; ++d) q.at(0, i, d) = src.at(0, j, d) + jitter * g(rng);
  }
  return q;
}

// ---------------------------------------------------------------------------------------------
// Loaders (.xyz, .off, .ply ascii / binary_little_endian). Return an empty cloud on failure.

inline Cloud load_points(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  Cloud c;
  if (!in) return c;
  std::vector<float> xyz;
  const auto ext = path.substr(path.find_last_of('.') + 1);
  if (ext == "xyz") {
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      double x, y, z;
      if (ls >> x >> y >> z) xyz.insert(xyz.end(), {float(x), float(y), float(z)});
    }
  } else if (ext == "off") {
    std::string magic;
    int64_t nv = 0, nf = 0, ne = 0;
    in >> magic >> nv >> nf >> ne;
    for (int64_t i = 0; i < nv && in; ++i) {
      double x, y, z;
      in >> x >> y >> z;
      xyz.insert(xyz.end(), {float(x), float(y), float(z)});
    }
  } else if (ext == "ply") {
    std::string line, format;
    int64_t nv = 0;
    bool in_vertex = false;
    std::vector<std::pair<std::string, std::string>> props;  // (type, name) of vertex
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      std::istringstream ls(line);
      std::string w;
      ls >> w;
      if (w == "format") ls >> format;
      else if (w == "element") {
        std::string name;
        ls >> name;
        in_vertex = name == "vertex";
        if (in_vertex) ls >> nv;
      } else if (w == "property" && in_vertex) {
        std::string type, name;
        ls >> type >> name;
        props.emplace_back(type, name);
      } else if (w == "end_header") break;
    }
    auto size_of = [](const std::string& t) -> int {
      if (t == "char" || t == "uchar" || t == "int8" || t == "uint8") return 1;
      if (t == "short" || t == "ushort" || t == "int16" || t == "uint16") return 2;
      if (t == "double" || t == "float64") return 8;
      return 4;
    };
    for (int64_t i = 0; i < nv && in; ++i) {
      double v[3] = {0, 0, 0};
      for (const auto& [type, name] : props) {
        double val = 0.0;
        if (format == "ascii") {
          in >> val;
        } else {
          char buf[8];
          in.read(buf, size_of(type));
          if (type == "float" || type == "float32") { float f; std::memcpy(&f, buf, 4); val = f; }
          else if (type == "double" || type == "float64") std::memcpy(&val, buf, 8);
        }
        if (name == "x") v[0] = val;
        if (name == "y") v[1] = val;
        if (name == "z") v[2] = val;
      }
      xyz.insert(xyz.end(), {float(v[0]), float(v[1]), float(v[2])});
    }
  }
  if (!in && !in.eof()) return c;
  c.batch = 1;
  c.count = static_cast<int64_t>(xyz.size() / 3);
  c.dim = 3;
  c.data = std::move(xyz);
  return c;
}

// A real cloud from the data directory, or, when the directory is missing, a synthetic cloud of
// strongly varying density (with a note on stdout).
inline Cloud real_or_synthetic(const std::string& name, std::mt19937& rng) {
#ifdef PCOPS_DATA_DIR
  Cloud c = load_points(std::string(PCOPS_DATA_DIR) + "/" + name);
  if (c.count > 0) return c;
#endif
  std::printf("note: data file %s not available; using a synthetic varying-density cloud\n",
              name.c_str());
  return clustered_cloud(rng, 20000);
}

// real_or_synthetic, loaded once per process and name.
inline const Cloud& cached_cloud(const std::string& name, std::mt19937& rng) {
  static std::map<std::string, Cloud> cache;  // node-based: references stay valid
  auto it = cache.find(name);
  if (it == cache.end()) it = cache.emplace(name, real_or_synthetic(name, rng)).first;
  return it->second;
}

// ---------------------------------------------------------------------------------------------
// Oracles (float32-exact, straight from the contracts)

// The contract's squared distance, coordinate order, no FMA (tests build with
// -ffp-contract=off).
inline float contract_s(const pcops::PointsView& a, int64_t b, int64_t i, const pcops::PointsView& x,
                        int64_t j) {
  float s = 0.0f;
  for (int64_t d = 0; d < a.dim; ++d) {
    const float diff = a.at(b, i, d) - x.at(b, j, d);
    s = d == 0 ? diff * diff : s + diff * diff;
  }
  return s;
}

struct Result {
  std::vector<float> dist;
  std::vector<int64_t> idx;
};

inline Result knn_oracle(const pcops::PointsView& q, const pcops::PointsView& x,
                         const pcops::LengthsView& ql, const pcops::LengthsView& xl, int64_t k) {
  Result r;
  r.dist.assign(static_cast<size_t>(q.batch * q.count * k), INFINITY);
  r.idx.assign(r.dist.size(), -1);
  std::vector<std::pair<float, int64_t>> all;
  for (int64_t b = 0; b < q.batch; ++b) {
    const int64_t n = xl.get(b, x.count);
    for (int64_t m = 0; m < ql.get(b, q.count); ++m) {
      all.clear();
      for (int64_t j = 0; j < n; ++j) {
        const float s = contract_s(q, b, m, x, j);
        all.emplace_back(std::isnan(s) ? INFINITY : s, j);
      }
      const int64_t take = std::min(k, n);
      std::partial_sort(all.begin(), all.begin() + take, all.end());
      for (int64_t t = 0; t < take; ++t) {
        r.dist[(b * q.count + m) * k + t] = std::sqrt(all[t].first);
        r.idx[(b * q.count + m) * k + t] = all[t].second;
      }
    }
  }
  return r;
}

inline Result ball_oracle(const pcops::PointsView& q, const pcops::PointsView& x,
                          const pcops::LengthsView& ql, const pcops::LengthsView& xl, float radius,
                          int64_t K) {
  Result r;
  r.dist.assign(static_cast<size_t>(q.batch * q.count * K), 0.0f);
  r.idx.assign(r.dist.size(), -1);
  const float R2 = radius * radius;
  for (int64_t b = 0; b < q.batch; ++b) {
    const int64_t n = xl.get(b, x.count);
    for (int64_t m = 0; m < ql.get(b, q.count); ++m) {
      int64_t filled = 0;
      for (int64_t j = 0; j < n && filled < K; ++j) {
        const float s = contract_s(q, b, m, x, j);
        if (s < R2) {
          r.dist[(b * q.count + m) * K + filled] = s;
          r.idx[(b * q.count + m) * K + filled] = j;
          ++filled;
        }
      }
    }
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// Sentinels and comparison

constexpr float kSentinelDist = -12345.0f;
constexpr int64_t kSentinelIdx = -777;

inline Result sentinel_result(int64_t size) {
  Result r;
  r.dist.assign(static_cast<size_t>(size), kSentinelDist);
  r.idx.assign(static_cast<size_t>(size), kSentinelIdx);
  return r;
}

inline uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Exact equality of indices and bitwise equality of distances; reports the first few mismatches.
inline ::testing::AssertionResult same_result(const Result& got, const Result& want) {
  if (got.idx.size() != want.idx.size() || got.dist.size() != want.dist.size())
    return ::testing::AssertionFailure() << "size differs";
  int64_t bad = 0;
  std::ostringstream os;
  for (size_t i = 0; i < want.idx.size(); ++i) {
    if (got.idx[i] != want.idx[i] || bits(got.dist[i]) != bits(want.dist[i])) {
      if (bad < 5)
        os << " [slot " << i << ": got (" << got.dist[i] << ", " << got.idx[i] << ") want ("
           << want.dist[i] << ", " << want.idx[i] << ")]";
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " mismatching slots of " << want.idx.size()
                                       << os.str();
}

// Bitwise equality of two float buffers (NaN payloads included); reports the first mismatches.
// Bitwise equality, except that any NaN matches any NaN: the sign and payload of a NaN produced by
// arithmetic are not part of the contract (x86 and CUDA produce different NaN bit patterns).
inline ::testing::AssertionResult same_bits(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  int64_t bad = 0;
  std::ostringstream os;
  for (size_t i = 0; i < want.size(); ++i) {
    if (bits(got[i]) != bits(want[i]) && !(std::isnan(got[i]) && std::isnan(want[i]))) {
      if (bad < 5) os << " [" << i << ": got " << got[i] << " want " << want[i] << "]";
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " mismatching values of " << want.size() << os.str();
}

// Expects fn() to throw pcops::Error of the given kind; `what` labels the failure.
template <class Fn>
void expect_error(pcops::ErrorKind kind, Fn fn, const char* what = "") {
  try {
    fn();
    ADD_FAILURE() << what << ": expected pcops::Error";
  } catch (const pcops::Error& e) {
    EXPECT_EQ(e.kind(), kind) << what << ": " << e.what();
  }
}

}  // namespace pcops_test
