#pragma once
// Per-query candidate buffers and pruning bounds of the CPU backend (knn.cpp, ball_query.cpp and
// the spatial index):
// TopK keeps the best k kNN candidates by (key, index), key = s with NaN as +inf; FirstK keeps
// the ball-query matches of smallest index.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "cpu/topk_select.hpp"

namespace pcops::cpu {

// Pruning of the exact searches (grid and tree): a region is skipped only when a lower bound of
// its squared distance, computed in double from float32 coordinates, exceeds the threshold with
// a relative margin. s is within a few units of 2^-24 of the exact squared distance unless it
// underflows, hence the floor on the bound.
constexpr double kBoundMargin = 1.0 - 1e-5;
constexpr double kBoundTiny = 1e-30;
// Every s in the region is provably > threshold (kNN: cannot enter the k best).
inline bool beyond(double lb2, double threshold) { return lb2 > kBoundTiny && lb2 * kBoundMargin > threshold; }
// Every s in the region is provably >= R2 (ball query: matches need s < R2).
inline bool beyond_radius(double lb2, float R2) {
  return lb2 > kBoundTiny && lb2 * kBoundMargin >= static_cast<double>(R2);
}

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The best k candidates by (key, index). A key is never NaN and never negative (s >= +0, NaN
// mapped to +inf), so its bit pattern orders like its value and (key, index) packs into one
// uint64 that sorts with plain integer comparisons.
class TopK {
 public:
  explicit TopK(int64_t k) : best_(k) {}
  void reset() {
    best_.reset();
    tf_ = INFINITY;
  }
  // Candidates with key above this cannot enter (+inf until k candidates were seen).
  float threshold() const { return tf_; }
  void push(float key, uint32_t id) {
    if (best_.push((static_cast<uint64_t>(float_bits(key)) << 32) | id))
      tf_ = bits_float(static_cast<uint32_t>(best_.threshold() >> 32));
  }
  void finish(float* od, int64_t* oi) {
    const int64_t n = best_.finish();
    const uint64_t* v = best_.data();
    for (int64_t t = 0; t < n; ++t) {
      od[t] = std::sqrt(bits_float(static_cast<uint32_t>(v[t] >> 32)));
      oi[t] = static_cast<int64_t>(v[t] & 0xFFFFFFFFu);
    }
    for (int64_t t = n; t < best_.k(); ++t) {
      od[t] = INFINITY;
      oi[t] = -1;
    }
  }

 private:
  select::SmallestK best_;
  float tf_ = INFINITY;
};

// Keeps the K matches of smallest index. A match packs as (index << 32 | bits of s), so plain
// integer order is index order (indices are distinct).
class FirstK {
 public:
  explicit FirstK(int64_t K) : first_(K) {}
  void reset() { first_.reset(); }
  void push(uint32_t id, float s) {
    uint32_t sb;
    std::memcpy(&sb, &s, 4);
    first_.push((static_cast<uint64_t>(id) << 32) | sb);
  }
  void finish(float* od, int64_t* oi) {
    const int64_t n = first_.finish();
    const uint64_t* v = first_.data();
    for (int64_t t = 0; t < n; ++t) {
      const uint32_t sb = static_cast<uint32_t>(v[t] & 0xFFFFFFFFu);
      std::memcpy(&od[t], &sb, 4);
      oi[t] = static_cast<int64_t>(v[t] >> 32);
    }
    for (int64_t t = n; t < first_.k(); ++t) {
      od[t] = 0.0f;
      oi[t] = -1;
    }
  }

 private:
  select::SmallestK first_;
};

}  // namespace pcops::cpu
