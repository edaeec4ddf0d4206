// CUDA ragged operators (radius, knn_ragged incl. cosine, nearest, grid_cluster) against the CPU
// backend: identical edges / indices / ids, bitwise, on inputs that take every path (ordered scan,
// grid with buffered selection, grid with unordered fill + segmented sort, warp brute force, the
// dense kNN grid, per-query radix sort for large k) and cross their boundaries; outputs are
// sentinel-prefilled so unwritten slots show. Validation errors are raised before any kernel.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuda_util.hpp"
#include "oracle.hpp"
#include "pcops/error.hpp"
#include "pcops/grid_cluster.hpp"
#include "pcops/knn.hpp"
#include "pcops/nearest.hpp"
#include "pcops/radius.hpp"

namespace {

using pcops_cuda_test::DeviceBuffer;
using pcops_cuda_test::StreamContext;

constexpr int64_t kEdgeSentinel = -7;

// A flat [count, dim] cloud set with CSR offsets.
struct Flat {
  int64_t dim = 3;
  std::vector<float> data;
  std::vector<int64_t> ptr{0};
  int64_t count() const { return ptr.back(); }
  pcops::RaggedPointsView view() const {
    return pcops::RaggedPointsView::contiguous(data.empty() ? nullptr : data.data(), count(), dim);
  }
  pcops::OffsetsView offsets() const { return {ptr.data(), static_cast<int64_t>(ptr.size())}; }
  void add(const std::vector<float>& pts) {  // one more cloud
    data.insert(data.end(), pts.begin(), pts.end());
    ptr.push_back(ptr.back() + static_cast<int64_t>(pts.size()) / dim);
  }
};

// The flat set on the device: contiguous, and strided ([dim][count + 3] layout).
struct DeviceFlat {
  DeviceBuffer<float> data, alt;
  pcops::RaggedPointsView view, strided;
  explicit DeviceFlat(const Flat& f) : data(f.data) {
    const int64_t n = f.count(), ld = n + 3;
    view = pcops::RaggedPointsView::contiguous(f.data.empty() ? nullptr : data.data(), n, f.dim);
    std::vector<float> host(static_cast<size_t>(f.dim * ld + 1), std::nanf(""));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t d = 0; d < f.dim; ++d) host[d * ld + i] = f.data[i * f.dim + d];
    alt = DeviceBuffer<float>(host);
    strided = pcops::RaggedPointsView{alt.data(), n, f.dim, 1, ld};
  }
};

std::vector<float> uniform(std::mt19937& rng, int64_t n, int64_t dim, float lo = 0.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(static_cast<size_t>(n * dim));
  for (float& f : v) f = u(rng);
  return v;
}

std::vector<float> from_cloud(const pcops_test::Cloud& c) { return c.data; }

// Host edge buffer of the CPU backend.
struct HostEdges {
  std::vector<int64_t> buf;
  int64_t E = -1;
  pcops::EdgeAllocator alloc() {
    return [this](int64_t e) {
      E = e;
      buf.assign(static_cast<size_t>(2 * e), kEdgeSentinel);
      return buf.data();
    };
  }
};

// Device edge buffer of the CUDA backend (sentinel-prefilled).
struct DeviceEdges {
  DeviceBuffer<int64_t> buf;
  int64_t E = -1;
  int calls = 0;
  pcops::EdgeAllocator alloc() {
    return [this](int64_t e) {
      E = e;
      ++calls;
      buf.resize(static_cast<size_t>(2 * e));
      buf.fill(kEdgeSentinel);
      return buf.data();
    };
  }
  std::vector<int64_t> download() const { return E > 0 ? buf.download() : std::vector<int64_t>{}; }
};

::testing::AssertionResult same_edges(const std::vector<int64_t>& got, int64_t got_e,
                                      const std::vector<int64_t>& want, int64_t want_e) {
  if (got_e != want_e) return ::testing::AssertionFailure() << "E " << got_e << " != " << want_e;
  for (int64_t e = 0; e < 2 * want_e; ++e)
    if (got[e] != want[e])
      return ::testing::AssertionFailure()
             << "edge " << (e % want_e) << " row " << (e / want_e) << ": " << got[e] << " != "
             << want[e] << " (E = " << want_e << ")";
  return ::testing::AssertionSuccess();
}

// ------------------------------------------------------------------------------------------------
// radius

void expect_radius(const Flat& x, const Flat& y, double r, int64_t cap, bool ignore,
                   bool strided_too = false) {
  const pcops::RadiusParams p{r, cap, ignore};
  HostEdges want;
  const int64_t we = pcops::cpu::radius({}, x.view(), y.view(), x.offsets(), y.offsets(), p, want.alloc());
  ASSERT_EQ(we, want.E);
  DeviceFlat dx(x), dy(y);
  for (int pass = 0; pass < (strided_too ? 2 : 1); ++pass) {
    StreamContext sc;
    DeviceEdges got;
    const int64_t ge = pcops::cuda::radius(sc.ctx, pass ? dx.strided : dx.view,
                                           pass ? dy.strided : dy.view, x.offsets(), y.offsets(),
                                           p, got.alloc());
    EXPECT_EQ(got.calls, 1);
    EXPECT_EQ(ge, got.E);
    EXPECT_TRUE(same_edges(got.download(), got.E, want.buf, we))
        << "r=" << r << " cap=" << cap << " ignore=" << ignore << " D=" << x.dim
        << " N=" << x.count() << " M=" << y.count() << " strided=" << pass;
  }
}

Flat single(const std::vector<float>& pts, int64_t dim = 3) {
  Flat f;
  f.dim = dim;
  f.add(pts);
  return f;
}

// Radius giving about `nb` neighbours in a uniform unit cube of n points.
double radius_for(int64_t n, double nb) { return std::cbrt(nb * 3.0 / (4.0 * M_PI * n)); }

TEST(CudaRadius, UniformGridAndOrderedPaths) {
  std::mt19937 rng(1);
  for (int64_t n : {100, 127, 128, 129, 5000, 40000}) {  // ordered scan below 128, grid above
    const Flat x = single(uniform(rng, n, 3));
    const Flat y = single(uniform(rng, 700, 3, -0.1f, 1.1f));
    const double r = radius_for(n, 16);
    for (int64_t cap : {1, 16, 32, 64}) {
      expect_radius(x, y, r, cap, false);
      expect_radius(x, x, r, cap, true);
    }
  }
}

TEST(CudaRadius, SortedDuplicatesAndCapBelowMatches) {
  std::mt19937 rng(2);
  pcops_test::Cloud c = pcops_test::uniform_cloud(rng, 1, 30000, 3);
  pcops_test::spatial_sort(c);
  const Flat sorted = single(from_cloud(c));
  for (int64_t cap : {8, 32, 100}) expect_radius(sorted, sorted, radius_for(30000, 40), cap, true);
  // A dense duplicate cluster: every query has far more matches than the cap.
  const Flat dup = single(from_cloud(pcops_test::duplicate_cloud(rng, 20000, 50)));
  for (int64_t cap : {1, 5, 32, 255, 256, 257, 1024}) {
    expect_radius(dup, dup, 0.05, cap, false);
    expect_radius(dup, dup, 0.05, cap, true);
  }
}

TEST(CudaRadius, LargeCapSegmentedSortAndOrderedSaturation) {
  std::mt19937 rng(3);
  const Flat x = single(uniform(rng, 20000, 3));
  const Flat y = single(uniform(rng, 2000, 3));
  // cap > 1024: unsaturated queries are sorted by the segmented sort, saturated ones scan in order.
  for (double r : {0.05, 0.15, 0.4, 3.0}) {
    expect_radius(x, y, r, 1025, false);
    expect_radius(x, x, r, 3000, true);
  }
  // Huge radius and a small cap: the grid cannot prune, saturated queries take the ordered scan.
  expect_radius(x, y, 10.0, 32, false);
}

TEST(CudaRadius, ExactTiesAtTheBoundary) {
  std::mt19937 rng(4);
  const Flat lat = single(from_cloud(pcops_test::lattice_cloud(rng, 20)));
  for (double r : {1.0, std::nextafter(1.0, 2.0), std::nextafter(1.0, 0.0), std::sqrt(2.0),
                   std::nextafter(std::sqrt(2.0), 2.0), 0.1, 2.0}) {
    expect_radius(lat, lat, r, 32, false);
    expect_radius(lat, lat, r, 7, true);
  }
}

TEST(CudaRadius, EmptyCloudsManySmallCloudsAndB0) {
  std::mt19937 rng(5);
  Flat x, y;
  x.add(uniform(rng, 3000, 3));
  y.add(uniform(rng, 500, 3));
  x.add({});                      // empty references, queries present
  y.add(uniform(rng, 40, 3));
  x.add(uniform(rng, 2000, 3));   // references, no queries
  y.add({});
  x.add({});                      // both empty
  y.add({});
  x.add(uniform(rng, 50, 3));     // ordered scan
  y.add(uniform(rng, 60, 3));
  x.add(uniform(rng, 6000, 3));
  y.add(uniform(rng, 700, 3));
  for (int64_t cap : {0, 1, 32}) {
    expect_radius(x, y, 0.08, cap, false, true);
    expect_radius(x, y, 0.08, cap, true);
  }
  expect_radius(x, y, 0.0, 32, false);
  // 64 clouds of 2000 points.
  Flat many;
  for (int b = 0; b < 64; ++b) many.add(uniform(rng, 2000, 3));
  expect_radius(many, many, radius_for(2000, 16), 32, true);
  // B = 0.
  const Flat none;
  expect_radius(none, none, 0.5, 32, false);
}

TEST(CudaRadius, NonFiniteCoordinatesAndInfiniteThreshold) {
  std::mt19937 rng(6);
  std::vector<float> px = uniform(rng, 5000, 3), py = uniform(rng, 800, 3);
  const float bad[4] = {std::nanf(""), INFINITY, -INFINITY, 1e30f};
  for (int t = 0; t < 200; ++t) {
    px[static_cast<size_t>((t * 397) % px.size())] = bad[t % 4];
    py[static_cast<size_t>((t * 211) % py.size())] = bad[(t + 1) % 4];
  }
  const Flat x = single(px), y = single(py);
  expect_radius(x, y, 0.1, 32, false);
  expect_radius(x, x, 0.1, 16, true);
  expect_radius(x, y, 1e20, 40, false);  // fl32(r * r) = +inf: ordered scan, finite s match
  expect_radius(x, y, 1e19, 40, false);  // huge but finite
}

TEST(CudaRadius, GeneralDimensionsAndStrides) {
  std::mt19937 rng(7);
  for (int64_t D : {1, 2, 5}) {
    Flat x, y;
    x.dim = y.dim = D;
    x.add(uniform(rng, 3000, D));
    y.add(uniform(rng, 300, D));
    x.add(uniform(rng, 100, D));
    y.add(uniform(rng, 100, D));
    expect_radius(x, y, D == 1 ? 0.002 : 0.1, 16, false, true);
  }
  const Flat x = single(uniform(rng, 10000, 3)), y = single(uniform(rng, 900, 3));
  expect_radius(x, y, 0.07, 32, false, true);
}

TEST(CudaRadius, RealClouds) {
  std::mt19937 rng(8);
  for (const char* name : {"radar.xyz", "b9_training.ply", "ChineseDragon-10kv.off"}) {
    const pcops_test::Cloud& c = pcops_test::cached_cloud(name, rng);
    const Flat x = single(from_cloud(c));
    float lo = INFINITY, hi = -INFINITY;
    for (float v : c.data) lo = std::min(lo, v), hi = std::max(hi, v);
    const double r = (hi - lo) * 0.01;
    expect_radius(x, x, r, 32, true);
    expect_radius(x, x, 4 * r, 64, false);
  }
}

TEST(CudaRadius, OneMillionPoints) {
  std::mt19937 rng(9);
  const int64_t n = 1000000;
  const Flat x = single(uniform(rng, n, 3));
  expect_radius(x, x, radius_for(n, 16), 32, true);
}

// n points around `clusters` centres uniform in the unit cube, gaussian of deviation sigma.
std::vector<float> gaussian_clusters(std::mt19937& rng, int64_t n, int clusters, float sigma) {
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::normal_distribution<float> g(0.0f, sigma);
  std::uniform_int_distribution<int> pick(0, clusters - 1);
  std::vector<float> centres(static_cast<size_t>(3 * clusters)), v(static_cast<size_t>(3 * n));
  for (float& c : centres) c = u(rng);
  for (int64_t i = 0; i < n; ++i) {
    const int c = pick(rng);
    for (int a = 0; a < 3; ++a) v[3 * i + a] = centres[3 * c + a] + g(rng);
  }
  return v;
}

// The first m points of `src`, each coordinate moved by up to eps.
std::vector<float> jittered(std::mt19937& rng, const std::vector<float>& src, int64_t m, float eps) {
  std::uniform_real_distribution<float> u(-eps, eps);
  std::vector<float> v(src.begin(), src.begin() + 3 * m);
  for (float& f : v) f += u(rng);
  return v;
}

// The spatial-index route (PCOPS_CUDA_RADIUS_INDEX=always routes every cloud with K = cap (+1
// with ignore_same_index) <= 32; never, none) gives the CPU's edges. Tight clusters (queries
// saturating the cap beside unsaturated ones), non-finite points, empty clouds and a query cloud
// without references. ignore_same_index skips reference row == query row (global rows): queries
// that are jittered copies of their cloud's first references (cloud 0, whose rows line up: the
// skipped pair is a match at a nonzero distance), copies whose reference row lies in another
// cloud (cloud 4: nothing skipped), and the radius graph (x, x).
TEST(CudaRadius, IndexRouteAgrees) {
  std::mt19937 rng(11);
  Flat x, y;
  std::vector<float> c0 = gaussian_clusters(rng, 4000, 8, 0.002f);
  const float bad[3] = {std::nanf(""), INFINITY, -INFINITY};
  for (int t = 0; t < 12; ++t) c0[static_cast<size_t>((t * 977) % c0.size())] = bad[t % 3];
  x.add(c0);
  y.add(jittered(rng, c0, 1500, 1e-4f));
  x.add({});  // queries without references
  y.add(uniform(rng, 30, 3));
  x.add(uniform(rng, 500, 3));  // references without queries
  y.add({});
  x.add({});  // both empty
  y.add({});
  const std::vector<float> c4 = gaussian_clusters(rng, 3000, 5, 0.002f);
  x.add(c4);
  y.add(jittered(rng, c4, 800, 5e-4f));
  x.add(uniform(rng, 60, 3));  // a small uniform cloud
  y.add(uniform(rng, 40, 3));
  for (const char* mode : {"always", "never"}) {  // the default rule routes none of these clouds
    pcops_cuda_test::ScopedEnv env("PCOPS_CUDA_RADIUS_INDEX", mode);  // unset at the end of the scope
    SCOPED_TRACE(std::string("PCOPS_CUDA_RADIUS_INDEX=") + mode);
    for (double r : {0.003, 0.0008}) {
      for (int64_t cap : {1, 16, 31, 32, 33}) {  // 33: above the route's cap of 32
        for (bool ignore : {false, true}) {
          expect_radius(x, y, r, cap, ignore, cap == 16);
          expect_radius(x, x, r, cap, ignore);
        }
      }
    }
  }
}

TEST(CudaRadius, BadInputRaises) {
  std::mt19937 rng(10);
  const Flat x = single(uniform(rng, 100, 3)), y = single(uniform(rng, 10, 3));
  DeviceFlat dx(x), dy(y);
  StreamContext sc;
  DeviceEdges e;
  auto run = [&](double r, int64_t cap, pcops::OffsetsView px, pcops::RaggedPointsView yv) {
    return pcops::cuda::radius(sc.ctx, dx.view, yv, px, y.offsets(), {r, cap, false}, e.alloc());
  };
  EXPECT_THROW(run(-1.0, 32, x.offsets(), dy.view), pcops::Error);
  EXPECT_THROW(run(NAN, 32, x.offsets(), dy.view), pcops::Error);
  EXPECT_THROW(run(INFINITY, 32, x.offsets(), dy.view), pcops::Error);
  EXPECT_THROW(run(0.1, -1, x.offsets(), dy.view), pcops::Error);
  const std::vector<int64_t> bad_ptr{0, 50, 99};
  EXPECT_THROW(run(0.1, 32, {bad_ptr.data(), 3}, dy.view), pcops::Error);
  const std::vector<int64_t> two{0, 50, 100};
  EXPECT_THROW(run(0.1, 32, {two.data(), 3}, dy.view), pcops::Error);  // B mismatch
  pcops::RaggedPointsView y2 = dy.view;
  y2.dim = 2;
  y2.stride_point = 2;
  y2.count = 15;
  EXPECT_THROW(run(0.1, 32, x.offsets(), y2), pcops::Error);
  EXPECT_EQ(e.calls, 0);
}

// ------------------------------------------------------------------------------------------------
// knn_ragged

void expect_knn(const Flat& x, const Flat& y, int64_t k, bool cosine, bool strided_too = false) {
  const pcops::KnnRaggedParams p{k, cosine};
  HostEdges want;
  const int64_t we = pcops::cpu::knn_ragged({}, x.view(), y.view(), x.offsets(), y.offsets(), p, want.alloc());
  DeviceFlat dx(x), dy(y);
  for (int pass = 0; pass < (strided_too ? 2 : 1); ++pass) {
    StreamContext sc;
    DeviceEdges got;
    const int64_t ge = pcops::cuda::knn_ragged(sc.ctx, pass ? dx.strided : dx.view,
                                               pass ? dy.strided : dy.view, x.offsets(),
                                               y.offsets(), p, got.alloc());
    EXPECT_EQ(got.calls, 1);
    EXPECT_EQ(ge, got.E);
    EXPECT_TRUE(same_edges(got.download(), got.E, want.buf, we))
        << "k=" << k << " cosine=" << cosine << " D=" << x.dim << " N=" << x.count()
        << " M=" << y.count() << " strided=" << pass;
  }
}

TEST(CudaKnnRagged, GridAndBrutePaths) {
  std::mt19937 rng(11);
  for (int64_t n : {1000, 4095, 4096, 30000}) {  // warp brute force below 4096, dense grid above
    const Flat x = single(uniform(rng, n, 3));
    const Flat y = single(uniform(rng, 500, 3, -0.2f, 1.2f));
    for (int64_t k : {1, 16, 64, 1024}) expect_knn(x, y, k, false);
  }
  const Flat x = single(uniform(rng, 20000, 3));
  expect_knn(x, x, 16, false, true);
}

TEST(CudaKnnRagged, BatchedEmptyCloudsSmallCloudsAndLargeK) {
  std::mt19937 rng(12);
  Flat x, y;
  x.add(uniform(rng, 5000, 3));
  y.add(uniform(rng, 300, 3));
  x.add({});
  y.add(uniform(rng, 30, 3));
  x.add(uniform(rng, 10, 3));  // k > n_b: min(k, n_b) edges
  y.add(uniform(rng, 40, 3));
  x.add(uniform(rng, 200, 3));
  y.add({});
  x.add(uniform(rng, 9000, 3));
  y.add(uniform(rng, 400, 3));
  for (int64_t k : {1, 8, 32, 100}) expect_knn(x, y, k, false, k == 8);
  expect_knn(x, y, 1100, false);  // radix-sort path
  Flat many;
  for (int b = 0; b < 64; ++b) many.add(uniform(rng, 2000, 3));
  expect_knn(many, many, 16, false);
  const Flat none;
  expect_knn(none, none, 4, false);
  expect_knn(x, y, 0, false);
}

TEST(CudaKnnRagged, TiesDuplicatesNonFiniteAndDimensions) {
  std::mt19937 rng(13);
  const Flat lat = single(from_cloud(pcops_test::lattice_cloud(rng, 18)));
  for (int64_t k : {6, 7, 19, 27}) expect_knn(lat, lat, k, false);
  const Flat dup = single(from_cloud(pcops_test::duplicate_cloud(rng, 12000, 40)));
  expect_knn(dup, dup, 16, false);
  std::vector<float> px = uniform(rng, 6000, 3), py = uniform(rng, 500, 3);
  for (int t = 0; t < 100; ++t) {
    px[static_cast<size_t>(t * 131)] = t % 2 ? std::nanf("") : INFINITY;
    py[static_cast<size_t>(t * 13)] = t % 2 ? -INFINITY : std::nanf("");
  }
  expect_knn(single(px), single(py), 8, false);
  for (int64_t D : {1, 2, 7}) {
    Flat x, y;
    x.dim = y.dim = D;
    x.add(uniform(rng, 3000, D));
    y.add(uniform(rng, 200, D));
    x.add(uniform(rng, 7, D));
    y.add(uniform(rng, 20, D));
    expect_knn(x, y, 5, false, true);
  }
}

TEST(CudaKnnRagged, Cosine) {
  std::mt19937 rng(14);
  for (int64_t D : {2, 3, 16}) {
    Flat x, y;
    x.dim = y.dim = D;
    std::vector<float> a = uniform(rng, 2500, D, -1.0f, 1.0f), q = uniform(rng, 300, D, -1.0f, 1.0f);
    for (int64_t d = 0; d < D; ++d) a[5 * D + d] = 0.0f, q[7 * D + d] = 0.0f;  // zero vectors: NaN
    for (int64_t i = 0; i < 40; ++i)  // parallel vectors: equal keys
      for (int64_t d = 0; d < D; ++d) a[(100 + i) * D + d] = (1.0f + i) * a[100 * D + d];
    x.add(a);
    y.add(q);
    x.add({});
    y.add(uniform(rng, 5, D));
    x.add(uniform(rng, 3, D));
    y.add(uniform(rng, 9, D));
    for (int64_t k : {1, 4, 32}) expect_knn(x, y, k, true, k == 4);
    expect_knn(x, y, 1030, true);  // radix-sort path
  }
}

TEST(CudaKnnRagged, OneMillionPoints) {
  std::mt19937 rng(15);
  const Flat x = single(uniform(rng, 1000000, 3));
  expect_knn(x, x, 16, false);
}

TEST(CudaKnnRagged, BadInputRaises) {
  std::mt19937 rng(16);
  const Flat x = single(uniform(rng, 100, 3)), y = single(uniform(rng, 10, 3));
  DeviceFlat dx(x), dy(y);
  StreamContext sc;
  DeviceEdges e;
  EXPECT_THROW(pcops::cuda::knn_ragged(sc.ctx, dx.view, dy.view, x.offsets(), y.offsets(), {-1, false},
                                       e.alloc()),
               pcops::Error);
  const std::vector<int64_t> bad{0, 101};
  EXPECT_THROW(pcops::cuda::knn_ragged(sc.ctx, dx.view, dy.view, {bad.data(), 2}, y.offsets(), {3, false},
                                       e.alloc()),
               pcops::Error);
  EXPECT_EQ(e.calls, 0);
}

// ------------------------------------------------------------------------------------------------
// nearest

void expect_nearest(const Flat& x, const Flat& y, bool strided_too = false) {
  std::vector<int64_t> want(static_cast<size_t>(x.count()), kEdgeSentinel);
  pcops::cpu::nearest({}, x.view(), y.view(), x.offsets(), y.offsets(), want.data());
  DeviceFlat dx(x), dy(y);
  for (int pass = 0; pass < (strided_too ? 2 : 1); ++pass) {
    StreamContext sc;
    DeviceBuffer<int64_t> out(static_cast<size_t>(x.count()));
    out.fill(kEdgeSentinel);
    pcops::cuda::nearest(sc.ctx, pass ? dx.strided : dx.view, pass ? dy.strided : dy.view,
                         x.offsets(), y.offsets(), out.data());
    EXPECT_EQ(x.count() > 0 ? out.download() : std::vector<int64_t>{}, want)
        << "D=" << x.dim << " N=" << x.count() << " M=" << y.count() << " strided=" << pass;
  }
}

TEST(CudaNearest, PathsTiesEmptyAndNonFinite) {
  std::mt19937 rng(17);
  Flat x, y;
  x.add(uniform(rng, 3000, 3));
  y.add(uniform(rng, 10000, 3));  // grid
  x.add({});
  y.add(uniform(rng, 30, 3));
  x.add(uniform(rng, 50, 3));
  y.add(uniform(rng, 1, 3));
  x.add(uniform(rng, 500, 3));
  y.add(uniform(rng, 700, 3));    // brute
  expect_nearest(x, y, true);
  const Flat lat = single(from_cloud(pcops_test::lattice_cloud(rng, 20)));
  std::vector<float> mid = from_cloud(pcops_test::lattice_cloud(rng, 19));
  for (float& v : mid) v += 0.5f;  // equidistant from 8 lattice points
  expect_nearest(single(mid), lat);
  std::vector<float> px = uniform(rng, 2000, 3), py = uniform(rng, 5000, 3);
  for (int t = 0; t < 50; ++t) {
    px[static_cast<size_t>(t * 97)] = std::nanf("");
    py[static_cast<size_t>(t * 61)] = INFINITY;
  }
  expect_nearest(single(px), single(py));
  for (int64_t D : {2, 6}) {
    Flat a, b;
    a.dim = b.dim = D;
    a.add(uniform(rng, 400, D));
    b.add(uniform(rng, 600, D));
    expect_nearest(a, b);
  }
  const Flat none;
  expect_nearest(none, none);
}

TEST(CudaNearest, BadInputRaises) {
  std::mt19937 rng(18);
  Flat x, y;
  x.add(uniform(rng, 10, 3));
  y.add({});
  DeviceFlat dx(x), dy(y);
  StreamContext sc;
  DeviceBuffer<int64_t> out(10);
  EXPECT_THROW(pcops::cuda::nearest(sc.ctx, dx.view, dy.view, x.offsets(), y.offsets(), out.data()),
               pcops::Error);
}

// ------------------------------------------------------------------------------------------------
// grid_cluster

template <class T>
void expect_grid(const std::vector<T>& pos, int64_t D, const std::vector<T>& size,
                 const std::vector<T>* start, const std::vector<T>* end) {
  const int64_t N = static_cast<int64_t>(pos.size()) / D;
  std::vector<int64_t> want(static_cast<size_t>(N), kEdgeSentinel);
  pcops::cpu::grid_cluster({}, pos.data(), N, D, size.data(), start ? start->data() : nullptr,
                           end ? end->data() : nullptr, want.data());
  DeviceBuffer<T> dp(pos), ds(size), dst(start ? *start : std::vector<T>(1)),
      den(end ? *end : std::vector<T>(1));
  DeviceBuffer<int64_t> out(static_cast<size_t>(N));
  out.fill(kEdgeSentinel);
  StreamContext sc;
  pcops::cuda::grid_cluster(sc.ctx, dp.data(), N, D, ds.data(), start ? dst.data() : nullptr,
                            end ? den.data() : nullptr, out.data());
  EXPECT_EQ(N > 0 ? out.download() : std::vector<int64_t>{}, want) << "N=" << N << " D=" << D;
}

template <class T>
void grid_cases(std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-3.0, 5.0);
  for (int64_t D : {1, 2, 3, 4}) {
    for (int64_t N : {0, 1, 1000, 300000}) {
      std::vector<T> pos(static_cast<size_t>(N * D));
      for (T& v : pos) v = static_cast<T>(u(rng));
      std::vector<T> size(static_cast<size_t>(D)), start(static_cast<size_t>(D)), end(static_cast<size_t>(D));
      for (int64_t d = 0; d < D; ++d) {
        size[d] = static_cast<T>(0.1 + 0.37 * d);
        start[d] = static_cast<T>(-1.0);  // points outside [start, end]: raw ids
        end[d] = static_cast<T>(2.5);
      }
      expect_grid<T>(pos, D, size, nullptr, nullptr);
      expect_grid<T>(pos, D, size, &start, nullptr);
      expect_grid<T>(pos, D, size, nullptr, &end);
      expect_grid<T>(pos, D, size, &start, &end);
      if (N >= 1000) {
        pos[17] = static_cast<T>(NAN);
        pos[5] = static_cast<T>(INFINITY);
        expect_grid<T>(pos, D, size, nullptr, nullptr);
        expect_grid<T>(pos, D, size, &start, &end);
        std::vector<T> tiny(size.size(), static_cast<T>(1e-30));  // quotients beyond int64
        expect_grid<T>(pos, D, tiny, &start, &end);
      }
    }
  }
}

TEST(CudaGridCluster, FloatAndDouble) {
  std::mt19937 rng(19);
  grid_cases<float>(rng);
  grid_cases<double>(rng);
}

TEST(CudaGridCluster, BadInputRaises) {
  StreamContext sc;
  DeviceBuffer<float> p(4), s(1);
  DeviceBuffer<int64_t> out(4);
  EXPECT_THROW(pcops::cuda::grid_cluster(sc.ctx, p.data(), 4, 0, s.data(), nullptr, nullptr, out.data()),
               pcops::Error);
  EXPECT_THROW(pcops::cuda::grid_cluster(sc.ctx, p.data(), -1, 1, s.data(), nullptr, nullptr, out.data()),
               pcops::Error);
}

}  // namespace
