// metrics.cpp — see metrics.h. Metric names follow Prometheus conventions (ds4_ prefix, _total for
// counters, base units: seconds and bytes).
#include "server/metrics.h"

#include <cstdio>

namespace ds4::server {

void Metrics::count_request(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  requests_[{endpoint, status}]++;
}

void Metrics::count_finish(const char* reason) {
  std::lock_guard<std::mutex> lock(mu_);
  finishes_[reason]++;
}

static void line(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

static std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string Metrics::render(const MemoryReport& mem, bool engine_ready) const {
  std::string out;
  line(out, "ds4_up", "gauge", "1 when the model is loaded and the engine worker is serving");
  out += "ds4_up " + std::string(engine_ready ? "1" : "0") + "\n";
  line(out, "ds4_requests_total", "counter", "HTTP requests by endpoint and status code");
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [k, v] : requests_)
      out += "ds4_requests_total{endpoint=\"" + k.first + "\",code=\"" + std::to_string(k.second) + "\"} " +
             std::to_string(v) + "\n";
    line(out, "ds4_generations_total", "counter", "Finished generations by finish reason");
    for (const auto& [k, v] : finishes_)
      out += "ds4_generations_total{finish_reason=\"" + k + "\"} " + std::to_string(v) + "\n";
  }
  line(out, "ds4_prompt_tokens_total", "counter", "Prompt tokens of accepted generation requests");
  out += "ds4_prompt_tokens_total " + std::to_string(prompt_tokens_.load()) + "\n";
  line(out, "ds4_prompt_tokens_cached_total", "counter", "Prompt tokens reused from a live session (not prefilled)");
  out += "ds4_prompt_tokens_cached_total " + std::to_string(cached_tokens_.load()) + "\n";
  line(out, "ds4_prefill_tokens_total", "counter", "Tokens run through prefill");
  out += "ds4_prefill_tokens_total " + std::to_string(prefill_tokens_.load()) + "\n";
  line(out, "ds4_completion_tokens_total", "counter", "Generated tokens");
  out += "ds4_completion_tokens_total " + std::to_string(completion_tokens_.load()) + "\n";
  line(out, "ds4_prefill_seconds_total", "counter", "Time spent in prefill");
  out += "ds4_prefill_seconds_total " + num(prefill_seconds_.load()) + "\n";
  line(out, "ds4_decode_seconds_total", "counter", "Time spent decoding");
  out += "ds4_decode_seconds_total " + num(decode_seconds_.load()) + "\n";
  const double ps = prefill_seconds_.load(), ds = decode_seconds_.load();
  line(out, "ds4_prefill_tokens_per_second", "gauge", "Average prefill rate since start");
  out += "ds4_prefill_tokens_per_second " + num(ps > 0 ? prefill_tokens_.load() / ps : 0) + "\n";
  line(out, "ds4_decode_tokens_per_second", "gauge", "Average decode rate since start");
  out += "ds4_decode_tokens_per_second " + num(ds > 0 ? completion_tokens_.load() / ds : 0) + "\n";
  line(out, "ds4_prefix_cache_hits_total", "counter", "Requests that reused part of a live session");
  out += "ds4_prefix_cache_hits_total " + std::to_string(cache_hits_.load()) + "\n";
  line(out, "ds4_prefix_cache_misses_total", "counter", "Requests prefilled from scratch");
  out += "ds4_prefix_cache_misses_total " + std::to_string(cache_misses_.load()) + "\n";
  line(out, "ds4_queue_depth", "gauge", "Requests waiting for the engine worker");
  out += "ds4_queue_depth " + std::to_string(queue_depth_.load()) + "\n";
  line(out, "ds4_active_requests", "gauge", "Requests being generated");
  out += "ds4_active_requests " + std::to_string(active_.load()) + "\n";
  line(out, "ds4_rejected_busy_total", "counter", "Requests refused with 503 because the queue was full");
  out += "ds4_rejected_busy_total " + std::to_string(rejected_busy_.load()) + "\n";
  line(out, "ds4_cancelled_total", "counter", "Requests cancelled (client disconnect, timeout, shutdown)");
  out += "ds4_cancelled_total " + std::to_string(cancelled_.load()) + "\n";
  line(out, "ds4_memory_bytes", "gauge", "Memory by category and place (host/device)");
  for (int c = 0; c < kMemCategoryCount; ++c) {
    const char* name = mem_category_name(static_cast<MemCategory>(c));
    out += std::string("ds4_memory_bytes{place=\"host\",category=\"") + name + "\"} " +
           std::to_string(mem.host.bytes[c]) + "\n";
    out += std::string("ds4_memory_bytes{place=\"device\",category=\"") + name + "\"} " +
           std::to_string(mem.device.bytes[c]) + "\n";
  }
  line(out, "ds4_host_rss_bytes", "gauge", "Resident set size of the server process");
  out += "ds4_host_rss_bytes " + std::to_string(mem.host_rss) + "\n";
  line(out, "ds4_sessions", "gauge", "Live sessions (KV timelines)");
  out += "ds4_sessions " + std::to_string(mem.sessions.size()) + "\n";
  {
    std::lock_guard<std::mutex> lock(mu_);
    out += render_batch_metrics(batch_);
  }
  return out;
}

}  // namespace ds4::server
