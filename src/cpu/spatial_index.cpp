// CPU SpatialIndex (pcops/spatial_index.hpp): Morton-sorted points under a binary tree of exact
// bounding boxes.
//
// Build, per cloud: the finite points' bounding box, a 48-bit Morton code per point (16 bits per
// axis), one stable LSD radix sort of (code, index), the sorted coordinates as structure of
// arrays; the tree top down (a range splits where its highest differing Morton bit changes, so
// nodes are octree cells; leaves hold at most leaf_size points), boxes bottom up.
//
// Queries run in Morton order of the index, in groups of consecutive queries:
// - kNN, groups of up to 8: the query nearest the group's centre (the anchor) walks the tree
//   depth first, nearer child first, skipping subtrees provably beyond its k-th key. Its k-th
//   distance r_a bounds every other query's by the triangle inequality (r_a + |q - a|), so the
//   others scan, in place, the point ranges of the leaves not provably beyond that bound from
//   the group's box, filtering with their own bound from the first candidate on.
// - ball query, groups of up to 256 in one leaf: every query of the group scans, in place, the
//   point ranges of the leaves not provably beyond R2 from the group's box.
// "Provably beyond" is the grid search's test (knn.cpp / ball_query.cpp): a lower bound in double
// with a relative margin that covers the float32 rounding of s, so the results are the dense
// operators' results, bit for bit.
#include "pcops/spatial_index.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <utility>

#include "common/distance.hpp"
#include "common/morton.hpp"
#include "cpu/knn_grid.hpp"
#include "cpu/knn_topk.hpp"
#include "cpu/radix_sort.hpp"
#include "cpu/spatial_grid.hpp"
#include "pcops/ball_query.hpp"
#include "pcops/error.hpp"
#include "pcops/knn.hpp"

namespace pcops::cpu {
namespace {

constexpr int kBits = 16;  // Morton bits per axis
// kNN's grid is built for k = 16 over clouds of at least 512 points (the dense operator's bounds).
constexpr int64_t kGridK = 16;
constexpr int64_t kGridMinPoints = 512;
constexpr int kBlock = 256;

using Cloud = SpatialIndex::Cloud;

inline uint64_t quantise(const Cloud& c, int a, float v) {
  const float t = (v - c.lo[a]) * c.scale[a];
  constexpr float kTop = static_cast<float>((1 << kBits) - 1);
  if (!(t > 0.0f)) return 0;  // also NaN
  if (t >= kTop) return (1u << kBits) - 1;
  return static_cast<uint64_t>(t);
}
inline uint64_t morton(const Cloud& c, float x, float y, float z) {
  return common::spread_bits16(quantise(c, 0, x)) | (common::spread_bits16(quantise(c, 1, y)) << 1) |
         (common::spread_bits16(quantise(c, 2, z)) << 2);
}

struct Record {
  uint64_t code;
  uint32_t id;
};

// The tree of cloud c over `count` source points: coord(r, d) is the coordinate d of source
// point r, orig(r) its index in the cloud. With check_finite, sources with a non-finite
// coordinate go to c.special (otherwise the caller has filled it).
template <class Coord, class Orig>
void build_tree(const CpuContext& ctx, Cloud& c, int64_t count, int64_t leaf, bool check_finite,
                Coord&& coord, Orig&& orig, std::vector<Record>& rec) {
  // Bounding box of the finite points; the non-finite ones set aside in index order.
  float lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
  rec.clear();
  rec.reserve(static_cast<size_t>(count));
  if (check_finite) c.special.clear();
  for (int64_t r = 0; r < count; ++r) {
    const float x = coord(r, 0), y = coord(r, 1), z = coord(r, 2);
    if (check_finite && !grid::finite3(x, y, z)) {
      c.special.push_back(orig(r));
      continue;
    }
    lo[0] = std::min(lo[0], x), lo[1] = std::min(lo[1], y), lo[2] = std::min(lo[2], z);
    hi[0] = std::max(hi[0], x), hi[1] = std::max(hi[1], y), hi[2] = std::max(hi[2], z);
    rec.push_back(Record{0, static_cast<uint32_t>(r)});
  }
  c.finite = static_cast<int64_t>(rec.size());
  for (int a = 0; a < 3; ++a) {
    c.lo[a] = c.finite > 0 ? lo[a] : 0.0f;
    const double ext = c.finite > 0 ? static_cast<double>(hi[a]) - lo[a] : 0.0;
    // Codes only order the points; any monotone quantisation keeps the result exact.
    c.scale[a] = ext > 0.0 && std::isfinite(ext) ? static_cast<float>(((1 << kBits) - 1) / ext) : 0.0f;
  }
  parallel_for(ctx, 0, c.finite, 1 << 14, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t j = rec[r].id;
      rec[r].code = morton(c, coord(j, 0), coord(j, 1), coord(j, 2));
    }
  });
  radix_sort(ctx, rec, 3 * kBits, [](const Record& r) { return r.code; });  // stable
  const int64_t F = c.finite;
  c.x.resize(static_cast<size_t>(F));
  c.y.resize(static_cast<size_t>(F));
  c.z.resize(static_cast<size_t>(F));
  c.id.resize(static_cast<size_t>(F));
  parallel_for(ctx, 0, F, 1 << 14, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t j = rec[r].id;
      c.x[r] = coord(j, 0), c.y[r] = coord(j, 1), c.z[r] = coord(j, 2);
      c.id[r] = static_cast<int32_t>(orig(j));
    }
  });
  // The tree, top down: a range of more than `leaf` points splits where the highest Morton bit
  // that differs inside it changes (both halves are octree cells, so boxes stay compact); a range
  // of equal codes splits in the middle. Nodes are created parent before children, left subtree
  // before right, so the leaves come out in point order and the boxes can be filled backwards.
  const auto code_at = [&](int64_t r) { return rec[r].code; };
  c.nodes.clear();
  c.leaf_nodes.clear();
  if (F > 0) {
    c.nodes.push_back(SpatialIndex::Node{0, static_cast<int32_t>(F), -1, -1});
    std::vector<int32_t> todo{0};
    while (!todo.empty()) {
      const int32_t v = todo.back();
      todo.pop_back();
      const int64_t b0 = c.nodes[v].begin, b1 = c.nodes[v].end;
      if (b1 - b0 <= leaf) continue;
      const uint64_t diff = code_at(b0) ^ code_at(b1 - 1);
      int64_t mid;
      if (diff == 0) {
        mid = b0 + (b1 - b0) / 2;
      } else {
        const uint64_t bit = uint64_t{1} << (63 - __builtin_clzll(diff));
        int64_t lo = b0 + 1, hi = b1 - 1;  // the first position with the bit set
        while (lo < hi) {
          const int64_t m = lo + (hi - lo) / 2;
          if (code_at(m) & bit)
            hi = m;
          else
            lo = m + 1;
        }
        mid = lo;
      }
      const int32_t l = static_cast<int32_t>(c.nodes.size());
      c.nodes.push_back(SpatialIndex::Node{static_cast<int32_t>(b0), static_cast<int32_t>(mid), -1, -1});
      c.nodes.push_back(SpatialIndex::Node{static_cast<int32_t>(mid), static_cast<int32_t>(b1), -1, -1});
      c.nodes[v].left = l;
      c.nodes[v].right = l + 1;
      todo.push_back(l + 1);  // the left child is split first
      todo.push_back(l);
    }
  }
  const int64_t nodes = static_cast<int64_t>(c.nodes.size());
  c.box.assign(static_cast<size_t>(nodes * 6), 0.0f);
  parallel_for(ctx, 0, nodes, 1024, [&](int64_t v0, int64_t v1) {
    for (int64_t v = v0; v < v1; ++v) {
      if (c.nodes[v].left >= 0) continue;
      float* bx = &c.box[v * 6];
      bx[0] = bx[1] = bx[2] = INFINITY;
      bx[3] = bx[4] = bx[5] = -INFINITY;
      for (int64_t r = c.nodes[v].begin; r < c.nodes[v].end; ++r) {
        bx[0] = std::min(bx[0], c.x[r]), bx[1] = std::min(bx[1], c.y[r]), bx[2] = std::min(bx[2], c.z[r]);
        bx[3] = std::max(bx[3], c.x[r]), bx[4] = std::max(bx[4], c.y[r]), bx[5] = std::max(bx[5], c.z[r]);
      }
    }
  });
  for (int64_t v = nodes - 1; v >= 0; --v) {
    const SpatialIndex::Node& nd = c.nodes[v];
    if (nd.left < 0) continue;
    float* bx = &c.box[v * 6];
    const float* l = &c.box[nd.left * 6];
    const float* r = &c.box[nd.right * 6];
    for (int a = 0; a < 3; ++a) bx[a] = std::min(l[a], r[a]), bx[3 + a] = std::max(l[3 + a], r[3 + a]);
  }
  // Leaves in point order (a pre-order walk, left first).
  std::vector<int32_t> todo;
  if (nodes > 0) todo.push_back(0);
  while (!todo.empty()) {
    const int32_t v = todo.back();
    todo.pop_back();
    if (c.nodes[v].left < 0) {
      c.leaf_nodes.push_back(v);
    } else {
      todo.push_back(c.nodes[v].right);
      todo.push_back(c.nodes[v].left);
    }
  }
  c.leaves = static_cast<int64_t>(c.leaf_nodes.size());
}

// Cloud b: kNN's grid where the density allows and `use_grid`, the tree at once otherwise (with
// a grid, the tree is built from the grid's copy of the points on first need: ensure_tree).
void build_cloud(const CpuContext& ctx, const PointsView& pts, int64_t b, int64_t n, int64_t leaf,
                 bool use_grid, Cloud& c, std::vector<Record>& rec) {
  c.n = n;
  c.grid.reset();
  c.tree_once = std::make_shared<std::once_flag>();
  if (use_grid && n >= kGridMinPoints) {
    auto g = std::make_shared<grid::Grid>();
    const grid::BuildOptions opt = knn_grid_options(kGridK);
    grid::build(ctx, pts, b, n, opt, *g);
    if (!knn_grid_skewed(*g, opt)) {
      g->scratch_cell = {};
      g->scratch_hist = {};
      c.grid = std::move(g);
      c.special = c.grid->special;
      return;
    }
  }
  build_tree(
      ctx, c, n, leaf, true, [&](int64_t r, int d) { return pts.at(b, r, d); }, [](int64_t r) { return r; },
      rec);
  std::call_once(*c.tree_once, [] {});  // built
}

// The tree of a cloud built with a grid, from the grid's copy of its finite points (once, safe
// under concurrent queries).
void ensure_tree(const CpuContext& ctx, Cloud& c, int64_t leaf) {
  std::call_once(*c.tree_once, [&] {
    const grid::Grid& g = *c.grid;
    std::vector<Record> rec;
    build_tree(
        ctx, c, g.num_finite, leaf, false,
        [&](int64_t r, int d) { return d == 0   ? g.x[r]
                                       : d == 1 ? g.y[r]
                                                : g.z[r]; },
        [&](int64_t r) { return static_cast<int64_t>(g.id[r]); }, rec);
  });
}

// Every leaf's first code.
std::vector<uint64_t> leaf_first_codes(const Cloud& c) {
  std::vector<uint64_t> f(static_cast<size_t>(c.leaves));
  for (int64_t l = 0; l < c.leaves; ++l) {
    const int64_t r = c.nodes[c.leaf_nodes[l]].begin;
    f[l] = morton(c, c.x[r], c.y[r], c.z[r]);
  }
  return f;
}

constexpr int64_t kBallGroup = 256;  // queries per group of the ball query
constexpr int64_t kKnnGroup = 8;     // queries per group of kNN (the bound grows with the group)

// The queries of one cloud in Morton order of the index, cut into groups of at most max_group
// whose codes fall in the same leaf (the leaf whose range holds the position the code would take
// in the sorted points). Non-finite queries come last, in groups of leaf -1.
struct Groups {
  std::vector<Record> order;   // (code, query), sorted
  std::vector<int64_t> begin;  // group g is order[begin[g], begin[g + 1])
  std::vector<int64_t> leaf;
};

void group_queries(const CpuContext& ctx, const Cloud& c, const PointsView& q, int64_t b, int64_t mq,
                   int64_t max_group, Groups& G) {
  constexpr uint64_t kNonFinite = uint64_t{1} << (3 * kBits);
  G.order.resize(static_cast<size_t>(mq));
  parallel_for(ctx, 0, mq, 1 << 14, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      const float x = q.at(b, m, 0), y = q.at(b, m, 1), z = q.at(b, m, 2);
      G.order[m] = Record{grid::finite3(x, y, z) ? morton(c, x, y, z) : kNonFinite, static_cast<uint32_t>(m)};
    }
  });
  radix_sort(ctx, G.order, 3 * kBits + 1, [](const Record& r) { return r.code; });
  const std::vector<uint64_t> first = leaf_first_codes(c);
  G.begin.clear();
  G.leaf.clear();
  int64_t l = 0;  // codes ascend, so the leaf only moves forward
  for (int64_t t = 0; t < mq; ++t) {
    const uint64_t code = G.order[t].code;
    int64_t gl = -1;
    if (c.leaves > 0 && code != kNonFinite) {
      while (l + 1 < c.leaves && first[l + 1] <= code) ++l;
      gl = l;
    }
    if (t == 0 || gl != G.leaf.back() || t - G.begin.back() >= max_group) {
      G.begin.push_back(t);
      G.leaf.push_back(gl);
    }
  }
  G.begin.push_back(mq);
}

// Squared lower bound of the distance between two boxes (+inf when either is empty).
inline double box_box_gap(const float* a, const float* g) {
  double s = 0.0;
  for (int d = 0; d < 3; ++d) {
    if (!(a[d] <= a[3 + d]) || !(g[d] <= g[3 + d])) return INFINITY;
    const double gap =
        std::max({0.0, static_cast<double>(a[d]) - g[3 + d], static_cast<double>(g[d]) - a[3 + d]});
    s += gap * gap;
  }
  return s;
}

// Squared lower bound of the distance from q to a box (+inf for an empty box).
inline double point_box_gap(const float* box, float qx, float qy, float qz) {
  const double q[3] = {qx, qy, qz};
  double s = 0.0;
  for (int a = 0; a < 3; ++a) {
    const double lo = box[a], hi = box[3 + a];
    if (!(lo <= hi)) return INFINITY;
    const double d = q[a] < lo ? lo - q[a] : (q[a] > hi ? q[a] - hi : 0.0);
    s += d * d;
  }
  return s;
}

// The point ranges a group of queries may need: every leaf whose box is not provably beyond the
// group's bound from the group's box (prune(lower bound) says so), merged into maximal runs of
// consecutive positions (leaves are in point order and near leaves are mostly consecutive),
// scanned in place. Long runs scanned whole beat leaf-by-leaf pruning by each query's own bound
// (measured: 1.25 s against 1.56 s for 1M points, k = 16, on 2 cores): the distance filter is
// cheap next to the per-leaf calls.
struct Ranges {
  struct Range {
    int32_t begin, end;
    float box[6];  // the union of its leaves' boxes
    double key;    // sort key
  };
  std::vector<Range> r;
  std::vector<int32_t> stack;

  template <class Prune>
  void gather(const Cloud& c, const float gbox[6], Prune&& prune) {
    r.clear();
    if (c.nodes.empty()) return;
    stack.clear();
    stack.push_back(0);
    while (!stack.empty()) {
      const int32_t v = stack.back();
      stack.pop_back();
      const float* bx = &c.box[v * 6];
      if (prune(box_box_gap(bx, gbox))) continue;
      const SpatialIndex::Node& nd = c.nodes[v];
      if (nd.left >= 0) {
        stack.push_back(nd.right);
        stack.push_back(nd.left);
      } else if (!r.empty() && r.back().end == nd.begin) {
        Range& last = r.back();
        last.end = nd.end;
        for (int a = 0; a < 3; ++a)
          last.box[a] = std::min(last.box[a], bx[a]), last.box[3 + a] = std::max(last.box[3 + a], bx[3 + a]);
      } else {
        r.push_back(Range{nd.begin, nd.end, {bx[0], bx[1], bx[2], bx[3], bx[4], bx[5]}, 0.0});
      }
    }
  }
};

// kNN: scan points [p0, p1) of arrays x, y, z, id.
// limit: a bound known to be at least the query's final k-th key (+inf: none).
void scan_knn(const float* x, const float* y, const float* z, const int32_t* id, int64_t p0, int64_t p1,
              float qx, float qy, float qz, TopK& tk, float* s, int32_t* off, float limit = INFINITY) {
  for (int64_t j0 = p0; j0 < p1; j0 += kBlock) {
    const int len = static_cast<int>(std::min<int64_t>(kBlock, p1 - j0));
    const int cnt = grid::filter3(x + j0, y + j0, z + j0, len, qx, qy, qz, std::min(limit, tk.threshold()),
                                  false, s, off);
    const int32_t* ids = id + j0;
    for (int i = 0; i < cnt; ++i) tk.push(s[i], static_cast<uint32_t>(ids[off[i]]));
  }
}

// Ball query: the matches (s < R2) among points [p0, p1).
void scan_ball(const float* x, const float* y, const float* z, const int32_t* id, int64_t p0, int64_t p1,
               float qx, float qy, float qz, float R2, FirstK& fk, float* s, int32_t* off) {
  for (int64_t j0 = p0; j0 < p1; j0 += kBlock) {
    const int len = static_cast<int>(std::min<int64_t>(kBlock, p1 - j0));
    const int cnt = grid::filter3(x + j0, y + j0, z + j0, len, qx, qy, qz, R2, true, s, off);
    const int32_t* ids = id + j0;
    for (int i = 0; i < cnt; ++i) fk.push(static_cast<uint32_t>(ids[off[i]]), s[i]);
  }
}

// The bounding box of the group's queries.
void group_box(const Groups& G, int64_t g, const PointsView& q, int64_t b, float box[6]) {
  box[0] = box[1] = box[2] = INFINITY;
  box[3] = box[4] = box[5] = -INFINITY;
  for (int64_t t = G.begin[g]; t < G.begin[g + 1]; ++t) {
    const int64_t m = G.order[t].id;
    for (int a = 0; a < 3; ++a) {
      box[a] = std::min(box[a], q.at(b, m, a));
      box[3 + a] = std::max(box[3 + a], q.at(b, m, a));
    }
  }
}

// The search for one query: depth first from the root, nearer child first (so the first leaf
// reached is one the query lies in or next to), a subtree skipped when its box is provably beyond
// the current threshold.
void walk_knn(const Cloud& c, float qx, float qy, float qz, TopK& tk, float* s, int32_t* off) {
  if (c.nodes.empty()) return;
  int32_t stack[128];
  double bound[128];
  int sp = 0;
  stack[sp] = 0;
  bound[sp++] = point_box_gap(&c.box[0], qx, qy, qz);
  while (sp > 0) {
    --sp;
    if (beyond(bound[sp], tk.threshold())) continue;
    int32_t v = stack[sp];
    bool live = true;
    while (c.nodes[v].left >= 0) {  // descend, pushing the farther child
      const int32_t l = c.nodes[v].left, r = c.nodes[v].right;
      const double bl = point_box_gap(&c.box[l * 6], qx, qy, qz),
                   br = point_box_gap(&c.box[r * 6], qx, qy, qz);
      const bool left = bl <= br;
      if (!beyond(left ? br : bl, tk.threshold())) {
        stack[sp] = left ? r : l;
        bound[sp++] = left ? br : bl;
      }
      if (beyond(left ? bl : br, tk.threshold())) {
        live = false;
        break;
      }
      v = left ? l : r;
    }
    if (live)
      scan_knn(c.x.data(), c.y.data(), c.z.data(), c.id.data(), c.nodes[v].begin, c.nodes[v].end, qx, qy, qz,
               tk, s, off);
  }
}

void pad_knn(float* od, int64_t* oi, int64_t k) {
  for (int64_t t = 0; t < k; ++t) od[t] = INFINITY, oi[t] = -1;
}
void pad_ball(float* od, int64_t* oi, int64_t K) {
  for (int64_t t = 0; t < K; ++t) od[t] = 0.0f, oi[t] = -1;
}


}  // namespace

void SpatialIndex::build(const CpuContext& ctx, PointsView points, LengthsView lengths,
                         const SpatialIndexParams& params) {
  core::validate_index_build(points, lengths, params);
  clouds_.assign(static_cast<size_t>(points.batch), Cloud{});
  count_ = points.count;
  leaf_ = params.leaf_size;
  has_lengths_ = lengths.present();
  std::vector<Record> rec;
  for (int64_t b = 0; b < points.batch; ++b)
    build_cloud(ctx, points, b, lengths.get(b, points.count), leaf_, params.grid,
                clouds_[static_cast<size_t>(b)], rec);
}

int64_t SpatialIndex::memory_bytes() const {
  int64_t bytes = 0;
  for (const Cloud& c : clouds_)
    bytes += static_cast<int64_t>(c.x.size() + c.y.size() + c.z.size() + c.box.size() + c.id.size() +
                                  c.leaf_nodes.size()) *
                 4 +
             static_cast<int64_t>(c.nodes.size() * sizeof(Node) + c.special.size() * 8);
  for (const Cloud& c : clouds_)
    if (c.grid)
      bytes += static_cast<int64_t>(c.grid->x.size() + c.grid->y.size() + c.grid->z.size() +
                                    c.grid->id.size() + c.grid->cell_start.size()) *
                   4 +
               static_cast<int64_t>(c.grid->special.size()) * 8;
  return bytes;
}

void SpatialIndex::knn(const CpuContext& ctx, PointsView query, LengthsView query_lengths, int64_t k,
                       float* dist, int64_t* idx) const {
  core::validate_index_query(batch(), query, query_lengths);
  PCOPS_CHECK(k >= 0, Value, "k: expected >= 0, got ", k);
  PCOPS_CHECK(has_lengths_ || k <= count_, Value, "k: expected <= ", count_,
              " (the number of indexed points), got ", k);
  const int64_t M = query.count;
  if (k == 0 || query.batch * M == 0) return;
  Groups G;
  for (int64_t b = 0; b < query.batch; ++b) {
    Cloud& c = clouds_[static_cast<size_t>(b)];
    const int64_t mq = query_lengths.get(b, M);
    for (int64_t m = mq; m < M; ++m) pad_knn(dist + (b * M + m) * k, idx + (b * M + m) * k, k);
    if (mq == 0) continue;
    if (c.grid && 4 * k <= c.n) {  // even density: the grid search
      knn_grid_search(ctx, query, b, mq, k, *c.grid, c.n, dist + b * M * k, idx + b * M * k);
      continue;
    }
    ensure_tree(ctx, c, leaf_);
    group_queries(ctx, c, query, b, mq, kKnnGroup, G);
    const int64_t groups = static_cast<int64_t>(G.leaf.size());
    parallel_for(ctx, 0, groups, 16, [&](int64_t g0, int64_t g1) {
      TopK tk(k);
      Ranges ranges;
      std::vector<std::pair<double, int32_t>> order;
      float s[kBlock + 16];
      int32_t off[kBlock + 16];
      for (int64_t g = g0; g < g1; ++g) {
        const int64_t l = G.leaf[g];
        if (l < 0) {  // non-finite queries (or no finite point): every key is +inf but the specials'
          for (int64_t t = G.begin[g]; t < G.begin[g + 1]; ++t) {
            const int64_t m = G.order[t].id;
            const float qx = query.at(b, m, 0), qy = query.at(b, m, 1), qz = query.at(b, m, 2);
            tk.reset();
            for (int64_t r = 0; r < c.finite; ++r)
              tk.push(common::knn_key(common::squared_distance3(qx, qy, qz, c.x[r], c.y[r], c.z[r])),
                      static_cast<uint32_t>(c.id[r]));
            for (const int64_t j : c.special) tk.push(INFINITY, static_cast<uint32_t>(j));
            tk.finish(dist + (b * M + m) * k, idx + (b * M + m) * k);
          }
          continue;
        }
        // The group's first query (the anchor) walks the tree. Its k-th key bounds everyone's:
        // by the triangle inequality, query q has k points within r_a + |q - a| (r_a the
        // anchor's k-th distance), so its k-th key is at most (r_a + |q - a|)^2, widened by a
        // relative margin for the float32 rounding of s. The other queries scan, in place, the
        // leaves not provably beyond that bound from the group's box, filtering with their own
        // bound from the first candidate on.
        const int64_t t0 = G.begin[g], t1 = G.begin[g + 1];
        for (int64_t t = t0; t < t1; ++t)
          prefetch_query_row(query, b, G.order[t].id, k, dist + b * M * k, idx + b * M * k);
        float gbox[6];
        group_box(G, g, query, b, gbox);
        // The anchor: the query nearest the group box's centre (the bounds grow with |q - a|).
        int64_t ma = G.order[t0].id;
        {
          const double cx = 0.5 * (double{gbox[0]} + gbox[3]), cy = 0.5 * (double{gbox[1]} + gbox[4]),
                       cz = 0.5 * (double{gbox[2]} + gbox[5]);
          double best = INFINITY;
          for (int64_t t = t0; t < t1; ++t) {
            const int64_t m = G.order[t].id;
            const double dx = query.at(b, m, 0) - cx, dy = query.at(b, m, 1) - cy,
                         dz = query.at(b, m, 2) - cz;
            const double d = dx * dx + dy * dy + dz * dz;
            if (d < best) best = d, ma = m;
          }
        }
        const float ax = query.at(b, ma, 0), ay = query.at(b, ma, 1), az = query.at(b, ma, 2);
        tk.reset();
        walk_knn(c, ax, ay, az, tk, s, off);
        const double ra = std::sqrt(static_cast<double>(tk.threshold())) * (1.0 + 1e-6);
        for (const int64_t j : c.special) tk.push(INFINITY, static_cast<uint32_t>(j));
        tk.finish(dist + (b * M + ma) * k, idx + (b * M + ma) * k);
        if (t1 - t0 == 1) continue;
        const auto bound = [&](double d) {  // the key bound at distance d from the anchor
          const double R = ra + d * (1.0 + 1e-12);
          return R * R * (1.0 + 1e-6) + kBoundTiny;
        };
        double dmax = 0.0;
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t m = G.order[t].id;
          const double dx = static_cast<double>(query.at(b, m, 0)) - ax,
                       dy = static_cast<double>(query.at(b, m, 1)) - ay,
                       dz = static_cast<double>(query.at(b, m, 2)) - az;
          dmax = std::max(dmax, std::sqrt(dx * dx + dy * dy + dz * dz));
        }
        const double T = bound(dmax);
        ranges.gather(c, gbox, [&](double lb2) { return beyond(lb2, T); });
        // Nearest ranges first (to the anchor): each query's threshold then tightens early.
        for (Ranges::Range& rg : ranges.r) rg.key = point_box_gap(rg.box, ax, ay, az);
        std::sort(ranges.r.begin(), ranges.r.end(),
                  [](const Ranges::Range& x, const Ranges::Range& y) { return x.key < y.key; });
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t m = G.order[t].id;
          if (m == ma) continue;
          const float qx = query.at(b, m, 0), qy = query.at(b, m, 1), qz = query.at(b, m, 2);
          const double dx = static_cast<double>(qx) - ax, dy = static_cast<double>(qy) - ay,
                       dz = static_cast<double>(qz) - az;
          const double lim = bound(std::sqrt(dx * dx + dy * dy + dz * dz));
          const float limit = lim >= static_cast<double>(FLT_MAX)
                                  ? INFINITY
                                  : std::nextafter(static_cast<float>(lim), INFINITY);
          tk.reset();
          // This query's nearest ranges first: its threshold tightens sooner, fewer candidates pass.
          order.clear();
          for (size_t r = 0; r < ranges.r.size(); ++r) {
            const double gap = point_box_gap(ranges.r[r].box, qx, qy, qz);
            if (!beyond(gap, limit)) order.emplace_back(gap, static_cast<int32_t>(r));
          }
          std::sort(order.begin(), order.end());
          for (const auto& [gap, r] : order) {
            if (beyond(gap, tk.threshold())) break;  // the rest are farther still
            const Ranges::Range& rg = ranges.r[r];
            scan_knn(c.x.data(), c.y.data(), c.z.data(), c.id.data(), rg.begin, rg.end, qx, qy, qz, tk, s,
                     off, limit);
          }
          // Points with a non-finite coordinate: s is +inf or NaN whatever the query, key +inf.
          for (const int64_t j : c.special) tk.push(INFINITY, static_cast<uint32_t>(j));
          tk.finish(dist + (b * M + m) * k, idx + (b * M + m) * k);
        }
      }
    });
  }
}

void SpatialIndex::ball_query(const CpuContext& ctx, PointsView query, LengthsView query_lengths,
                              float radius, int64_t K, float* dist2, int64_t* idx) const {
  PCOPS_CHECK(std::isfinite(radius) && radius >= 0.0f, Value, "radius: expected finite and >= 0, got ",
              radius);
  ball_query_below(ctx, query, query_lengths, core::ball_query_threshold(radius), K, dist2, idx);
}

void SpatialIndex::ball_query_below(const CpuContext& ctx, PointsView query, LengthsView query_lengths, float R2,
                                    int64_t K, float* dist2, int64_t* idx) const {
  core::validate_index_query(batch(), query, query_lengths);
  PCOPS_CHECK(R2 >= 0.0f, Value, "R2: expected >= 0, got ", R2);
  PCOPS_CHECK(K >= 0, Value, "K: expected >= 0, got ", K);
  const int64_t M = query.count;
  if (K == 0 || query.batch * M == 0) return;
  Groups G;
  for (int64_t b = 0; b < query.batch; ++b) {
    Cloud& c = clouds_[static_cast<size_t>(b)];
    const int64_t mq = query_lengths.get(b, M);
    for (int64_t m = mq; m < M; ++m) pad_ball(dist2 + (b * M + m) * K, idx + (b * M + m) * K, K);
    if (mq == 0) continue;
    if (c.grid && std::isfinite(R2)) {  // even density: the dense operator's grid search
      ball_grid_search(ctx, query, b, mq, K, R2, *c.grid, dist2 + b * M * K, idx + b * M * K);
      continue;
    }
    ensure_tree(ctx, c, leaf_);
    group_queries(ctx, c, query, b, mq, kBallGroup, G);
    const int64_t groups = static_cast<int64_t>(G.leaf.size());
    parallel_for(ctx, 0, groups, 4, [&](int64_t g0, int64_t g1) {
      FirstK fk(K);
      float s[kBlock + 16];
      int32_t off[kBlock + 16];
      Ranges ranges;
      for (int64_t g = g0; g < g1; ++g) {
        // Non-finite queries match nothing (s is never < R2), nor do non-finite points.
        const bool search = G.leaf[g] >= 0 && R2 > 0.0f;
        if (search) {
          float gbox[6];
          group_box(G, g, query, b, gbox);
          ranges.gather(c, gbox, [&](double lb2) { return beyond_radius(lb2, R2); });
        }
        for (int64_t t = G.begin[g]; t < G.begin[g + 1]; ++t) {
          const int64_t m = G.order[t].id;
          fk.reset();
          if (search)
            for (const Ranges::Range& rg : ranges.r)
              scan_ball(c.x.data(), c.y.data(), c.z.data(), c.id.data(), rg.begin, rg.end, query.at(b, m, 0),
                        query.at(b, m, 1), query.at(b, m, 2), R2, fk, s, off);
          fk.finish(dist2 + (b * M + m) * K, idx + (b * M + m) * K);
        }
      }
    });
  }
}

}  // namespace pcops::cpu
