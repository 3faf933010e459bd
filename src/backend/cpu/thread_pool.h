// thread_pool.h — a small fork-join pool owned by one CpuBackend (no globals).
//
// parallel_for(n, fn) splits [0, n) into contiguous ranges, runs fn(begin, end) on the workers and
// the calling thread, and returns when all are done. Not reentrant: an op never calls it from
// inside fn. Deliberately not here: task queues, futures, work stealing.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <type_traits>
#include <thread>
#include <vector>

namespace ds4::backend::cpu {

// A non-owning reference to a callable `void(int64_t begin, int64_t end)`. Unlike std::function it never
// allocates, so ops can run parallel loops inside the token loop without touching the heap.
class RangeFn {
 public:
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, RangeFn>>>
  RangeFn(F&& f)  // NOLINT(implicit): built from lambdas at every call site
      : obj_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* o, int64_t b, int64_t e) { (*static_cast<std::remove_reference_t<F>*>(o))(b, e); }) {}
  void operator()(int64_t b, int64_t e) const { call_(obj_, b, e); }

 private:
  void* obj_;
  void (*call_)(void*, int64_t, int64_t);
};

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // total threads including the caller; >= 1
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // How many ranges n items of `work_per_item` multiply-adds are worth: waking a worker costs about as
  // much as kMinWorkPerPart multiply-adds, so small ops (decode of a tiny model) stay on the caller.
  static constexpr int64_t kMinWorkPerPart = 1 << 15;
  int parts_for(int64_t n, int64_t work_per_item) const;
  // Runs fn(begin, end) over [0, n) in parts_for(n, work_per_item) contiguous ranges.
  void parallel_for(int64_t n, RangeFn fn, int64_t work_per_item = 1);

 private:
  void worker(int index);

  int n_threads_ = 1;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  // Workers and the caller spin briefly before blocking: a decode step runs hundreds of small parallel
  // regions, and a futex wake-up costs more than most of them.
  static constexpr int kSpin = 4000;
  const RangeFn* job_ = nullptr;  // guarded by mu_
  int64_t job_n_ = 0;
  int job_parts_ = 0;
  std::atomic<uint64_t> generation_{0};  // written under mu_, polled while spinning
  std::atomic<int> pending_{0};          // worker parts still running
  std::atomic<bool> stop_{false};
};

}  // namespace ds4::backend::cpu
