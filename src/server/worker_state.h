// worker_state.h — the engine worker's private per-slot and per-job state (worker thread only).
// Shared by worker.cpp (the step loop), worker_admit.cpp (admission, slot choice, prefix cache) and
// worker_token.cpp (sampling, streaming, stop conditions, finish). Not part of the server's API.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chat/chat.h"
#include "ds4/engine.h"
#include "ds4/sampler.h"
#include "server/text_util.h"
#include "server/worker.h"

namespace ds4::server {

using WorkerClock = std::chrono::steady_clock;

// KV bytes a session holds (host + device), the quantity the KV budget limits.
inline uint64_t kv_bytes(const SessionMemory& m) {
  uint64_t b = 0;
  for (MemCategory c : {MemCategory::raw_kv, MemCategory::compressed_kv_r4, MemCategory::compressed_kv_rhc,
                        MemCategory::indexer_kv, MemCategory::compressor_state})
    b += m.host[c] + m.device[c];
  return b;
}

// One live session (KV timeline). Busy while a job runs on it; idle afterwards, kept for prefix reuse
// until admission needs its memory or its place.
struct EngineWorker::Slot {
  std::unique_ptr<Session> session;
  bool busy = false;
  uint64_t last_used = 0;  // worker step counter at release (LRU for eviction)
  DiskTimeline disk;       // disk KV cache bookkeeping of this timeline (disk_cache.h)
};

struct EngineWorker::Active {
  std::shared_ptr<Job> job;
  Slot* slot = nullptr;
  bool decoding = false;
  size_t prefilled = 0;      // prompt tokens already in the session
  int64_t cached = 0;        // prompt tokens reused (live session or prefix cache), not prefilled
  int64_t max_new = 0;
  int64_t generated = 0, reasoning_tokens = 0;
  uint64_t reserve_bytes = 0;          // KV reservation held while running (admission.h)
  std::vector<int64_t> checkpoints;    // prompt positions to save into the prefix cache, ascending
  std::vector<TokenId> feed;           // decoding: tokens to append next (sampled token / forced opener)
  std::optional<ds4::Sampler> sampler;
  // Greedy without logprobs: the next token comes from the step that evaluated the last fed token
  // (StepItem::next, picked on the device) instead of the session's downloaded logits. greedy_ready: the
  // last step left greedy_next for next_feed.
  bool greedy = false;
  bool greedy_ready = false;
  TokenId greedy_next = -1;
  std::optional<chat::DsmlParser> parser;  // chat APIs only
  std::optional<StopMatcher> stop;
  std::string utf8_pending;
  std::vector<std::string> call_ids;       // by call index
  bool forced = false;                     // tool_choice opener injected
  bool finished = false;
  std::string stop_sequence;
  std::string generated_text;              // for --trace
  WorkerClock::time_point t_start, t_decode;
};

}  // namespace ds4::server
