// thread_pool.cpp — fork-join over contiguous ranges; see thread_pool.h.
#include "backend/cpu/thread_pool.h"

#include <algorithm>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace ds4::backend::cpu {

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

static inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

static void run_part(const RangeFn& fn, int64_t n, int parts, int index) {
  const int64_t begin = n * index / parts, end = n * (index + 1) / parts;
  if (begin < end) fn(begin, end);
}

int ThreadPool::parts_for(int64_t n, int64_t work_per_item) const {
  const int64_t work = n * std::max<int64_t>(1, work_per_item);
  return static_cast<int>(std::clamp<int64_t>(work / kMinWorkPerPart, 1, std::min<int64_t>(n_threads_, std::max<int64_t>(1, n))));
}

void ThreadPool::parallel_for(int64_t n, RangeFn fn, int64_t work_per_item) {
  if (n <= 0) return;
  const int parts = parts_for(n, work_per_item);
  if (parts <= 1) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_n_ = n;
    job_parts_ = parts;
    pending_ = parts - 1;
    ++generation_;
  }
  start_cv_.notify_all();
  run_part(fn, n, parts, 0);
  for (int i = 0; i < kSpin && pending_.load(std::memory_order_acquire) != 0; ++i) cpu_relax();
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return pending_.load(std::memory_order_acquire) == 0; });
  job_ = nullptr;
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    const RangeFn* job;
    int64_t n;
    int parts;
    for (int i = 0; i < kSpin && generation_.load(std::memory_order_acquire) == seen && !stop_.load(); ++i)
      cpu_relax();
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_.load() || generation_.load() != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      n = job_n_;
      parts = job_parts_;
    }
    if (index < parts) {
      run_part(*job, n, parts, index);
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard<std::mutex> lock(mu_);
        done_cv_.notify_one();
      }
    }
  }
}

}  // namespace ds4::backend::cpu
