#include "base/thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <memory>
#include <mutex>

namespace deepinfer {

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int t = 1; t < num_threads_; ++t) workers_.emplace_back([this, t] { WorkerLoop(t); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
}

std::pair<size_t, size_t> ThreadPool::Range(size_t n, int tid, int nthreads, size_t align) {
  size_t units = (n + align - 1) / align;
  size_t per = units / nthreads, extra = units % nthreads;
  size_t begin = tid * per + std::min<size_t>(tid, extra);
  size_t end = begin + per + (static_cast<size_t>(tid) < extra ? 1 : 0);
  return {std::min(n, begin * align), std::min(n, end * align)};
}

void ThreadPool::Run(const std::function<void(int, int)>& fn) {
  if (num_threads_ == 1) {
    fn(0, 1);
    return;
  }
  std::lock_guard<std::mutex> lock(run_mu_);  // uncontended (one engine) it costs a few ns per kernel
  fn_ = &fn;
  pending_.store(num_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  fn(0, num_threads_);
  // Spin briefly for the other threads' slices, then yield: when the machine is oversubscribed (server threads,
  // other processes), a descheduled worker would otherwise make this thread burn its whole time slice.
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < 4000) _mm_pause();
    else std::this_thread::yield();
  }
  fn_ = nullptr;
}

void ThreadPool::WorkerLoop(int tid) {
  uint64_t seen = 0;
  for (;;) {
    // Spin for a short while (kernels arrive back to back during a forward pass), then sleep.
    uint64_t g = generation_.load(std::memory_order_acquire);
    for (int spin = 0; g == seen && spin < 2000; ++spin) {
      _mm_pause();
      g = generation_.load(std::memory_order_acquire);
    }
    while (g == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      g = generation_.load(std::memory_order_acquire);
    }
    seen = g;
    if (stop_.load()) return;
    (*fn_)(tid, num_threads_);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

namespace {
std::mutex g_pool_mu;
std::unique_ptr<ThreadPool> g_pool;
int g_requested = 0;
}  // namespace

int DefaultThreadCount() { return std::max(1u, std::thread::hardware_concurrency()); }

void SetComputeThreads(int n) {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  if (n <= 0) n = DefaultThreadCount();
  if (g_pool && g_pool->size() == n) return;
  g_pool.reset();
  g_requested = n;
  g_pool = std::make_unique<ThreadPool>(n);
}

ThreadPool& ComputePool() {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  if (!g_pool) g_pool = std::make_unique<ThreadPool>(g_requested > 0 ? g_requested : DefaultThreadCount());
  return *g_pool;
}

}  // namespace deepinfer
