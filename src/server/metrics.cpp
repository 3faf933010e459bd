// metrics.cpp — see metrics.h. Metric names follow Prometheus conventions (ds4_ prefix, _total for
// counters, base units: seconds and bytes).
#include "server/metrics.h"

#include "server/memory_view.h"
#include "server/prom_text.h"

namespace ds4::server {

void Metrics::count_request(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  requests_[{endpoint, status}]++;
}

void Metrics::count_finish(const char* reason) {
  std::lock_guard<std::mutex> lock(mu_);
  finishes_[reason]++;
}

std::string Metrics::render(const MemoryReport& mem, bool engine_ready) const {
  std::string out;
  prom_metric(out, "ds4_up", "gauge", "1 when the model is loaded and the engine worker is serving",
              engine_ready ? 1 : 0);
  prom_header(out, "ds4_requests_total", "counter", "HTTP requests by endpoint and status code");
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [k, v] : requests_)
      out += "ds4_requests_total{endpoint=\"" + k.first + "\",code=\"" + std::to_string(k.second) + "\"} " +
             std::to_string(v) + "\n";
    prom_header(out, "ds4_generations_total", "counter", "Finished generations by finish reason");
    for (const auto& [k, v] : finishes_)
      out += "ds4_generations_total{finish_reason=\"" + k + "\"} " + std::to_string(v) + "\n";
  }
  prom_metric(out, "ds4_prompt_tokens_total", "counter", "Prompt tokens of accepted generation requests",
              prompt_tokens_.load());
  prom_metric(out, "ds4_prompt_tokens_cached_total", "counter",
              "Prompt tokens reused from a live session (not prefilled)", cached_tokens_.load());
  prom_metric(out, "ds4_prefill_tokens_total", "counter", "Tokens run through prefill", prefill_tokens_.load());
  prom_metric(out, "ds4_completion_tokens_total", "counter", "Generated tokens", completion_tokens_.load());
  prom_metric(out, "ds4_prefill_seconds_total", "counter", "Time spent in prefill", prefill_seconds_.load());
  prom_metric(out, "ds4_decode_seconds_total", "counter", "Time spent decoding", decode_seconds_.load());
  const double ps = prefill_seconds_.load(), ds = decode_seconds_.load();
  prom_metric(out, "ds4_prefill_tokens_per_second", "gauge", "Average prefill rate since start",
              ps > 0 ? prefill_tokens_.load() / ps : 0);
  prom_metric(out, "ds4_decode_tokens_per_second", "gauge", "Average decode rate since start",
              ds > 0 ? completion_tokens_.load() / ds : 0);
  prom_metric(out, "ds4_prefix_cache_hits_total", "counter", "Requests that reused part of a live session",
              cache_hits_.load());
  prom_metric(out, "ds4_prefix_cache_misses_total", "counter", "Requests prefilled from scratch", cache_misses_.load());
  prom_metric(out, "ds4_queue_depth", "gauge", "Requests waiting for the engine worker", queue_depth_.load());
  prom_metric(out, "ds4_active_requests", "gauge", "Requests being generated", active_.load());
  prom_metric(out, "ds4_rejected_busy_total", "counter", "Requests refused with 503 because the queue was full",
              rejected_busy_.load());
  prom_metric(out, "ds4_cancelled_total", "counter", "Requests cancelled (client disconnect, timeout, shutdown)",
              cancelled_.load());
  append_memory_metrics(out, mem);  // memory_view.cpp: categories, reconciliation, sessions
  {
    std::lock_guard<std::mutex> lock(mu_);
    out += render_batch_metrics(batch_);
  }
  return out;
}

}  // namespace ds4::server
