// The built-in threading seam: a small pool of std::threads used when a CpuContext carries no
// parallel_for of its own (the torch binding plugs in at::parallel_for instead).
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "pcops/context.hpp"

namespace pcops {
namespace {

class ThreadPool {
 public:
  explicit ThreadPool(int n) {
    for (int i = 0; i < n; ++i) workers_.emplace_back([this] { loop(); });
  }
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }
  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(i) for i in [0, tasks) on the pool and the calling thread; returns when all finish.
  void run(int64_t tasks, const std::function<void(int64_t)>& fn) {
    std::unique_lock<std::mutex> run_lock(run_mu_);  // one parallel region at a time
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
    auto work = [&] {
      for (int64_t i; (i = next.fetch_add(1)) < tasks;) {
        fn(i);
        done.fetch_add(1);
      }
    };
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = work;
      ++generation_;
    }
    cv_.notify_all();
    work();
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return done.load() == tasks && active_ == 0; });
    job_ = nullptr;
  }

 private:
  void loop() {
    uint64_t seen = 0;
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || (generation_ != seen && job_); });
        if (stop_) return;
        seen = generation_;
        job = job_;
        ++active_;
      }
      job();
      {
        std::lock_guard<std::mutex> lock(mu_);
        --active_;
      }
      done_cv_.notify_all();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mu_, run_mu_;
  std::condition_variable cv_, done_cv_;
  std::function<void()> job_;
  uint64_t generation_ = 0;
  int active_ = 0;
  bool stop_ = false;
};

int default_threads() {
  if (const char* env = std::getenv("PCOPS_NUM_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

ThreadPool& pool() {
  static ThreadPool p(default_threads() - 1);
  return p;
}

thread_local bool in_parallel_region = false;

}  // namespace

int max_threads(const CpuContext& ctx) {
  if (ctx.num_threads > 0) return ctx.num_threads;
  if (ctx.parallel_for) return 1;
  return pool().size();
}

void parallel_for(const CpuContext& ctx, int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& body) {
  if (end <= begin) return;
  grain = std::max<int64_t>(grain, 1);
  if (ctx.parallel_for) {
    ctx.parallel_for(begin, end, grain, body);
    return;
  }
  const int64_t n = end - begin;
  int threads = ctx.num_threads > 0 ? ctx.num_threads : pool().size();
  int64_t chunks = std::min<int64_t>((n + grain - 1) / grain, threads);
  if (chunks <= 1 || in_parallel_region) {  // nested regions run inline
    body(begin, end);
    return;
  }
  const int64_t step = (n + chunks - 1) / chunks;
  pool().run(chunks, [&](int64_t c) {
    const int64_t b = begin + c * step;
    const int64_t e = std::min(end, b + step);
    if (b < e) {
      in_parallel_region = true;
      body(b, e);
      in_parallel_region = false;
    }
  });
}

}  // namespace pcops
