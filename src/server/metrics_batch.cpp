// metrics_batch.cpp — see metrics_batch.h.
#include "server/metrics_batch.h"

#include "server/prom_text.h"

namespace ds4::server {

namespace {
uint64_t u(int64_t v) { return v < 0 ? 0 : static_cast<uint64_t>(v); }
}  // namespace

std::string render_batch_metrics(const BatchStats& s) {
  std::string out;
  prom_metric(out, "ds4_batch_sessions", "gauge", "Sessions advanced in the last engine step", u(s.batch_sessions));
  prom_metric(out, "ds4_batch_tokens", "gauge", "Tokens in the last engine step (decode + prefill)", u(s.batch_tokens));
  prom_metric(out, "ds4_batch_decode_tokens", "gauge", "Decode tokens in the last engine step",
              u(s.batch_decode_tokens));
  prom_metric(out, "ds4_batch_prefill_tokens", "gauge", "Prefill tokens in the last engine step",
              u(s.batch_prefill_tokens));
  prom_metric(out, "ds4_engine_steps_total", "counter", "Engine steps (one batched forward each)", s.steps);
  prom_metric(out, "ds4_engine_step_tokens_total", "counter", "Tokens over all engine steps", s.step_tokens);
  prom_metric(out, "ds4_engine_step_sessions_total", "counter",
              "Sessions over all engine steps (mean batch = this / steps)", s.step_sessions);
  prom_metric(out, "ds4_running_sessions", "gauge", "Requests running (admitted, prefilling or decoding)",
              u(s.running));
  prom_metric(out, "ds4_waiting_sessions", "gauge", "Requests waiting for admission", u(s.waiting));
  prom_metric(out, "ds4_idle_sessions", "gauge", "Finished sessions kept for prefix reuse", u(s.idle_sessions));
  prom_metric(out, "ds4_max_sessions", "gauge", "Live sessions allowed (--max-sessions)", u(s.max_sessions));
  prom_metric(out, "ds4_max_batch_tokens", "gauge", "Token budget of one step (--max-batch-tokens)",
              u(s.max_batch_tokens));
  prom_metric(out, "ds4_kv_budget_bytes", "gauge", "KV memory budget for all sessions (0 = unlimited)",
              s.kv_budget_bytes);
  prom_metric(out, "ds4_kv_reserved_bytes", "gauge", "KV bytes reserved by running requests", s.kv_reserved_bytes);
  prom_metric(out, "ds4_kv_used_bytes", "gauge", "KV bytes held by all live sessions", s.kv_used_bytes);
  prom_metric(out, "ds4_admission_waits_total", "counter", "Times the queue head waited for a session or KV memory",
              s.admission_waits);
  prom_metric(out, "ds4_admission_rejects_total", "counter", "Requests refused: their KV need exceeds the whole budget",
              s.admission_rejects);
  prom_metric(out, "ds4_idle_session_evictions_total", "counter", "Idle sessions freed to admit a request",
              s.idle_evictions);
  prom_metric(out, "ds4_prefix_cache_restores_total", "counter",
              "Requests started from a saved prefix of another session", s.prefix_restores);
  prom_metric(out, "ds4_prefix_cache_restored_tokens_total", "counter", "Prompt tokens restored from the prefix cache",
              s.prefix_restored_tokens);
  prom_metric(out, "ds4_prefix_cache_saves_total", "counter", "Prefix states saved into the prefix cache",
              s.prefix_saves);
  prom_metric(out, "ds4_prefix_cache_evictions_total", "counter", "Prefix cache entries evicted (LRU)",
              s.prefix_evictions);
  prom_metric(out, "ds4_prefix_cache_entries", "gauge", "Prefix cache entries", s.prefix_entries);
  prom_metric(out, "ds4_prefix_cache_bytes", "gauge", "Prefix cache bytes", s.prefix_bytes);
  prom_metric(out, "ds4_prefix_cache_budget_bytes", "gauge", "Prefix cache budget (--prefix-cache-mb)",
              s.prefix_budget_bytes);
  return out;
}

}  // namespace ds4::server
