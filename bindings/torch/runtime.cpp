// Introspection of the binding's runtime: how many threads the parallel_for seam really uses.
#include <mutex>
#include <set>
#include <thread>

#include "common.hpp"

namespace pcops::torch_binding {
namespace {

// Runs the seam over [0, tasks) with grain 1 and returns the number of distinct threads that ran
// a chunk: torch.get_num_threads() (capped by tasks) when at::parallel_for is really parallel.
int64_t parallel_threads(int64_t tasks) {
  TORCH_CHECK_VALUE(tasks >= 0, "tasks: expected >= 0, got ", tasks);
  std::mutex mu;
  std::set<std::thread::id> seen;
  pcops::parallel_for(cpu_context(), 0, tasks, 1, [&](int64_t, int64_t) {
    std::lock_guard<std::mutex> lock(mu);
    seen.insert(std::this_thread::get_id());
  });
  return static_cast<int64_t>(seen.size());
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(pcops, m) {
  m.def("_parallel_threads(int tasks) -> int", &parallel_threads);
}

}  // namespace pcops::torch_binding
