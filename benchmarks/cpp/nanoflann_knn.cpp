// All-points kNN with nanoflann, the C++ peer of benchmarks/scripts/spatial_index_probe.py.
//
//     nanoflann_knn POINTS.bin N K OUT.bin [threads]
//
// Reads N x 3 float32 points (row-major, native byte order), builds a nanoflann k-d tree
// (KDTreeSingleIndexAdaptor, L2_Simple_Adaptor<float>, leaf size 10, nanoflann's default; the
// build runs on `threads` threads where the installed nanoflann has n_thread_build, else on one),
// queries every point for its K nearest points with knnSearch, the queries split over `threads`
// std::threads (default: hardware concurrency), and writes the neighbour indices as int32 N x K
// (nanoflann's order: ascending squared distance, ties in the order the search met them).
// Prints one JSON line: build and query wall times (steady_clock; file I/O excluded), the thread
// counts and nanoflann's NANOFLANN_VERSION macro (which some releases left stale).
//
// Built by the probe on first use:  c++ -O3 -march=native -std=c++17 -pthread nanoflann_knn.cpp
#include <nanoflann.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

// The dataset adaptor nanoflann reads the points through: N x 3 float32, row-major.
struct Cloud {
  const float* xyz = nullptr;
  size_t n = 0;

  size_t kdtree_get_point_count() const { return n; }
  float kdtree_get_pt(size_t i, size_t d) const { return xyz[3 * i + d]; }
  // No precomputed bounding box: nanoflann computes it.
  template <class Box>
  bool kdtree_get_bbox(Box&) const { return false; }
};

using Index = uint32_t;
using Tree = nanoflann::KDTreeSingleIndexAdaptor<nanoflann::L2_Simple_Adaptor<float, Cloud>,
                                                 Cloud, 3, Index>;

// Whether the build parameters have n_thread_build (nanoflann 1.5.0 and later); detected from
// the type rather than from NANOFLANN_VERSION, which some releases left stale.
template <typename P, typename = void>
struct HasThreadBuild : std::false_type {};
template <typename P>
struct HasThreadBuild<P, std::void_t<decltype(std::declval<P&>().n_thread_build)>>
    : std::true_type {};

// Sets the build's thread count where supported; returns the number of threads the build uses.
template <typename P>
unsigned set_build_threads(P& params, unsigned threads) {
  if constexpr (HasThreadBuild<P>::value) {
    params.n_thread_build = threads;
    return threads;
  } else {
    (void)params;
    return 1;
  }
}

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "nanoflann_knn: %s\n", message.c_str());
  std::exit(1);
}

long long parse_count(const char* text, const char* what) {
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || v < 0) {
    fail(std::string(what) + ": expected a count, got '" + text + "'");
  }
  return v;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5 || argc > 6) fail("usage: nanoflann_knn POINTS.bin N K OUT.bin [threads]");
  const size_t n = static_cast<size_t>(parse_count(argv[2], "N"));
  const size_t k = static_cast<size_t>(parse_count(argv[3], "K"));
  unsigned threads = argc == 6 ? static_cast<unsigned>(parse_count(argv[5], "threads"))
                               : std::thread::hardware_concurrency();
  if (threads == 0) threads = 1;
  if (n == 0 || k == 0 || k > n) fail("need 0 < K <= N");
  if (n > static_cast<size_t>(INT32_MAX)) fail("N does not fit int32 indices");

  // Points in.
  std::vector<float> xyz(3 * n);
  {
    FILE* f = std::fopen(argv[1], "rb");
    if (!f) fail(std::string("cannot open ") + argv[1]);
    const size_t got = std::fread(xyz.data(), sizeof(float), xyz.size(), f);
    std::fclose(f);
    if (got != xyz.size()) fail("POINTS.bin holds fewer than N x 3 floats");
  }
  Cloud cloud{xyz.data(), n};

  // Build (the constructor builds the index).
  nanoflann::KDTreeSingleIndexAdaptorParams params(10);
  const unsigned build_threads = set_build_threads(params, threads);
  auto t0 = std::chrono::steady_clock::now();
  Tree tree(3, cloud, params);
  const double build_s = seconds_since(t0);

  // Query every point; workers take blocks of queries from a shared counter so that uneven
  // regions (dense clusters) do not leave a thread idle.
  std::vector<Index> nbr(n * k);
  std::atomic<size_t> next{0};
  constexpr size_t kBlock = 1024;
  auto work = [&] {
    std::vector<float> dist(k);
    while (true) {
      const size_t b = next.fetch_add(kBlock);
      if (b >= n) break;
      const size_t e = std::min(n, b + kBlock);
      for (size_t i = b; i < e; ++i) tree.knnSearch(&xyz[3 * i], k, &nbr[i * k], dist.data());
    }
  };
  t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& th : pool) th.join();
  const double query_s = seconds_since(t0);

  // Indices out, as int32.
  std::vector<int32_t> out(nbr.begin(), nbr.end());
  FILE* f = std::fopen(argv[4], "wb");
  if (!f) fail(std::string("cannot write ") + argv[4]);
  const size_t put = std::fwrite(out.data(), sizeof(int32_t), out.size(), f);
  if (std::fclose(f) != 0 || put != out.size()) fail(std::string("short write to ") + argv[4]);

  std::printf("{\"build_s\": %.9f, \"query_s\": %.9f, \"threads\": %u, \"build_threads\": %u, "
              "\"nanoflann_version_macro\": \"0x%x\"}\n",
              build_s, query_s, threads, build_threads, static_cast<unsigned>(NANOFLANN_VERSION));
  return 0;
}
