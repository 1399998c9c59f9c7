// A persistent thread pool with static partitioning: Run(fn) calls fn(tid, n) once on each of n threads
// (the caller is thread 0) and returns when all are done. Workers spin briefly, then sleep on an atomic, so
// back-to-back kernels (one per layer op) do not pay a futex wake each time.
#pragma once
#include <atomic>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace deepinfer {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return num_threads_; }
  // Runs fn(tid, num_threads) on every thread; blocks until all return. Not reentrant (fn must not call Run).
  // Callers on different threads take turns: each engine in a process (two Python LLMs, say) runs its kernels
  // from its own thread on this one pool, and interleaved Runs would share fn_ / pending_ (wrong results, or
  // a caller spinning forever on a count another caller reset).
  void Run(const std::function<void(int, int)>& fn);

  // Splits [0, n) into num_threads contiguous ranges (aligned to `align`) and returns thread tid's range.
  static std::pair<size_t, size_t> Range(size_t n, int tid, int nthreads, size_t align = 1);

 private:
  void WorkerLoop(int tid);

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex run_mu_;  // one Run at a time
  const std::function<void(int, int)>* fn_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

// The process-wide compute pool (created on first use with SetComputeThreads or the hardware count).
ThreadPool& ComputePool();
void SetComputeThreads(int n);
int DefaultThreadCount();

}  // namespace deepinfer
