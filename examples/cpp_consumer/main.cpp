// A C++ program that uses pcops without PyTorch: FPS, kNN and ball query on a small grid cloud.
#include <pcops/pcops.hpp>

#include <cstdio>
#include <vector>

int main() {
  const int64_t n = 64;
  std::vector<float> pts;
  for (int64_t i = 0; i < n; ++i) {
    pts.push_back(static_cast<float>(i % 4));
    pts.push_back(static_cast<float>((i / 4) % 4));
    pts.push_back(static_cast<float>(i / 16));
  }
  const auto view = pcops::PointsView::contiguous(pts.data(), 1, n, 3);
  pcops::CpuContext ctx;

  std::vector<int64_t> fps(4, -2);
  pcops::cpu::furthest_point_sample(ctx, view, {}, pcops::FpsParams{4, 0, false}, fps.data());
  // The corner opposite point 0 is (3, 3, 3) = index 63.
  if (fps[0] != 0 || fps[1] != 63) return 1;

  std::vector<float> dist(2);
  std::vector<int64_t> idx(2);
  pcops::cpu::knn(ctx, pcops::PointsView::contiguous(pts.data(), 1, 1, 3), view, {}, {},
                  pcops::KnnParams{2}, dist.data(), idx.data());
  if (idx[0] != 0 || idx[1] != 1 || dist[1] != 1.0f) return 2;

  std::vector<float> d2(8);
  std::vector<int64_t> bi(8);
  pcops::cpu::ball_query(ctx, pcops::PointsView::contiguous(pts.data(), 1, 1, 3), view, {}, {},
                         pcops::BallQueryParams{1.5f, 8}, d2.data(), bi.data());
  // Inside radius 1.5 of the origin: 0, 1 (x), 4 (y), 5 (xy, s=2), 16 (z), 17, 20.
  const int64_t expect[8] = {0, 1, 4, 5, 16, 17, 20, -1};
  for (int i = 0; i < 8; ++i)
    if (bi[i] != expect[i]) return 3;

  try {
    pcops::cpu::knn(ctx, view, view, {}, {}, pcops::KnnParams{n + 1}, dist.data(), idx.data());
    return 4;
  } catch (const pcops::Error& e) {
    if (e.kind() != pcops::ErrorKind::Value) return 5;
  }
  std::printf("consumer ok (pcops %s)\n", pcops::version_string());
  return 0;
}
