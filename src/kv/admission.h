// admission.h — who may start running: a queued request is admitted when a session slot is free
// (--max-sessions) and its KV reservation fits the KV memory budget (--kv-memory-mb).
//
// A running job reserves the KV bytes of its whole timeline up front (prompt + max new tokens, by the
// cost model learned from the engine's own accounting), so running jobs never run out of memory
// mid-stream and nobody is preempted. Idle sessions (finished conversations kept for prefix reuse)
// hold memory but no reservation: they are evicted, least recently used first, when a new job needs
// the room. When the room is still not there the request waits in the queue (a full queue answers
// 503 + Retry-After); a request that could not fit even in an empty server is refused at once.
// Deliberately not here: sessions, the engine, clocks (the worker passes plain numbers in).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ds4::kv {

// KV bytes of one session holding n tokens: a fixed part (raw window ring, compressor frontiers)
// plus a linear part (compressed attention/indexer rows, MODEL.md §10.3), both measured.
struct KvCostModel {
  uint64_t fixed_bytes = 0;
  double bytes_per_token = 0;
  uint64_t bytes_for(int64_t tokens) const {
    return fixed_bytes + static_cast<uint64_t>(bytes_per_token * static_cast<double>(tokens < 0 ? 0 : tokens));
  }
};

struct AdmissionOptions {
  uint64_t budget_bytes = 0;  // KV bytes all sessions together may hold; 0 = no memory limit
  int max_sessions = 1;       // live sessions (running + idle) at most
};

struct IdleSession {
  size_t slot = 0;
  uint64_t bytes = 0;      // what it holds now
  uint64_t last_used = 0;  // larger = more recent
};

struct AdmissionInput {
  int running = 0;               // jobs running now
  uint64_t reserved_bytes = 0;   // sum of the running jobs' reservations
  std::span<const IdleSession> idle;
  int64_t reuse_slot = -1;       // the idle slot the new job would take over (-1: a new session)
  uint64_t need_bytes = 0;       // the new job's reservation
};

enum class AdmitVerdict { admit, wait, reject };

struct AdmitDecision {
  AdmitVerdict verdict = AdmitVerdict::admit;
  std::vector<size_t> evict;  // idle slots to free first (admit only)
  std::string reason;         // wait/reject: why, for logs and the client's error message
};

AdmitDecision decide_admission(const AdmissionOptions& opts, const AdmissionInput& in);

// Default --max-sessions when not given: as many sessions at `typical_tokens` as the budget holds,
// clamped to [1, cap] (cap keeps every decoder inside one step's token budget with room for prefill).
int derive_max_sessions(uint64_t budget_bytes, const KvCostModel& cost, int64_t typical_tokens, int cap);

}  // namespace ds4::kv
