// metrics_batch.h — the batching gauges and counters of GET /metrics: the last step's batch, running
// and waiting jobs, KV budget occupancy, and the cross-session prefix cache. The engine worker
// publishes a whole BatchStats value after each step; /metrics renders the latest one.
// Deliberately not here: per-request counters (metrics.h), memory by category (memory report).
#pragma once

#include <cstdint>
#include <string>

namespace ds4::server {

struct BatchStats {
  // Last step.
  int64_t batch_sessions = 0, batch_tokens = 0, batch_decode_tokens = 0, batch_prefill_tokens = 0;
  // Totals over all steps.
  uint64_t steps = 0, step_tokens = 0, step_sessions = 0;
  // Jobs and sessions now.
  int64_t running = 0, waiting = 0, idle_sessions = 0, max_sessions = 0, max_batch_tokens = 0;
  // KV budget (admission.h): reservations of running jobs, bytes held by all live sessions.
  uint64_t kv_budget_bytes = 0, kv_reserved_bytes = 0, kv_used_bytes = 0;
  uint64_t admission_waits = 0, admission_rejects = 0, idle_evictions = 0;
  // Cross-session prefix cache (prefix_cache.h).
  uint64_t prefix_restores = 0, prefix_restored_tokens = 0, prefix_saves = 0, prefix_evictions = 0;
  uint64_t prefix_entries = 0, prefix_bytes = 0, prefix_budget_bytes = 0;
};

// Prometheus text for `s`.
std::string render_batch_metrics(const BatchStats& s);

}  // namespace ds4::server
