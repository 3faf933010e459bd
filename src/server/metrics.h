// metrics.h — server counters and gauges, rendered in the Prometheus text exposition format for
// GET /metrics. Owned by the Server object (no globals); updated from HTTP threads and the engine
// worker, so every field is atomic or guarded.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "ds4/memory.h"
#include "server/metrics_batch.h"

namespace ds4::server {

class Metrics {
 public:
  // One finished HTTP request: endpoint ("chat.completions", "models", ...) and status code.
  void count_request(const std::string& endpoint, int status);
  void add_prompt_tokens(int64_t n, int64_t cached) {
    prompt_tokens_ += n;
    cached_tokens_ += cached;
    if (cached > 0) cache_hits_++;
    else cache_misses_++;
  }
  void add_prefill(int64_t tokens, double seconds) {
    prefill_tokens_ += tokens;
    add_double(prefill_seconds_, seconds);
  }
  void add_decode(int64_t tokens, double seconds) {
    completion_tokens_ += tokens;
    add_double(decode_seconds_, seconds);
  }
  void set_queue_depth(int64_t n) { queue_depth_ = n; }
  void set_active(int64_t n) { active_ = n; }
  void count_rejected_busy() { rejected_busy_++; }
  void count_cancelled() { cancelled_++; }
  void count_finish(const char* reason);
  void set_batch(const BatchStats& b) {
    std::lock_guard<std::mutex> lock(mu_);
    batch_ = b;
  }

  // Prometheus text; `mem` is the engine's latest memory report (bytes by category).
  std::string render(const MemoryReport& mem, bool engine_ready) const;

 private:
  static void add_double(std::atomic<double>& a, double v) {
    double cur = a.load();
    while (!a.compare_exchange_weak(cur, cur + v)) {
    }
  }
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;  // guarded by mu_
  std::map<std::string, uint64_t> finishes_;                  // guarded by mu_
  BatchStats batch_;                                          // guarded by mu_
  std::atomic<int64_t> prompt_tokens_{0}, cached_tokens_{0}, prefill_tokens_{0}, completion_tokens_{0};
  std::atomic<int64_t> cache_hits_{0}, cache_misses_{0};
  std::atomic<double> prefill_seconds_{0}, decode_seconds_{0};
  std::atomic<int64_t> queue_depth_{0}, active_{0}, rejected_busy_{0}, cancelled_{0};
};

}  // namespace ds4::server
