// worker.h — the engine worker: the ONE thread that owns the Engine's sessions and runs every
// prefill and decode step (STYLE.md principle 7). HTTP threads submit Jobs (already rendered and
// tokenized) and read GenEvents from the Job's channel; they never touch a Session.
//
// Structure for batching: the worker holds `n_sessions` slots, each with its own Session, and steps
// every active job one unit at a time (a prefill chunk or one decode token) in a round-robin loop.
// A new job goes to the idle slot whose live tokens share the longest prefix with its prompt; the
// session is rewound to that common prefix and only the rest is prefilled (cached tokens in usage).
// A batched backend can later replace the per-job steps with one step over all active slots.
//
// Deliberately not here: HTTP, JSON, API shapes (formatters turn GenEvents into each API's output).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "chat/chat.h"
#include "ds4/engine.h"
#include "server/channel.h"
#include "server/gen_request.h"
#include "server/metrics.h"

namespace ds4::server {

struct WorkerOptions {
  int64_t default_max_tokens = 393216;  // -n/--tokens: when the client gives no limit
  int n_sessions = 1;                   // live KV timelines (ds4: exactly one)
  size_t max_queue = 16;                // waiting jobs beyond this -> unavailable (HTTP 503)
  int32_t prefill_step = 512;           // tokens per prefill step between cancellation checks
  chat::Flavor flavor = chat::Flavor::ds4;
  bool exact_dsml_replay = true;        // remember id -> sampled DSML for byte-exact replay
};

// Thread-safe wrapper: the replay store is read by HTTP threads (attach before rendering) and
// written by the worker (after a tool-calling turn).
class SharedReplayStore {
 public:
  explicit SharedReplayStore(chat::ReplayStoreOptions opts) : store_(opts) {}
  size_t attach(chat::Conversation& conv) {
    std::lock_guard<std::mutex> lock(mu_);
    return store_.attach(conv);
  }
  void remember(std::span<const std::string> ids, std::string_view raw) {
    std::lock_guard<std::mutex> lock(mu_);
    store_.remember(ids, raw);
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return store_.size();
  }

 private:
  std::mutex mu_;
  chat::ToolCallReplayStore store_;
};

// One generation request in flight. Shared between the submitting HTTP thread (reads `events`,
// sets `cancel`) and the worker (everything else).
struct Job {
  GenRequest req;
  std::vector<TokenId> prompt;                  // rendered + tokenized by the HTTP thread
  std::string rendered;                         // the prompt text (for --trace)
  Channel<GenEvent> events;
  std::atomic<bool> cancel{false};              // client gone / server draining
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  uint64_t id = 0;
};

class EngineWorker {
 public:
  EngineWorker(Engine& engine, const WorkerOptions& opts, SharedReplayStore& replay, Metrics& metrics,
               std::FILE* trace = nullptr);
  ~EngineWorker();
  EngineWorker(const EngineWorker&) = delete;
  EngineWorker& operator=(const EngineWorker&) = delete;

  void start();
  // Stop accepting; let active and queued jobs finish until `grace` passes, then cancel the rest;
  // join the thread. Idempotent.
  void stop(std::chrono::milliseconds grace);

  // Enqueues a job. unavailable when the queue is full (-> 503 + Retry-After) or the worker is
  // stopping ("server shutting down").
  Status submit(const std::shared_ptr<Job>& job);

  size_t queue_depth() const;
  // Latest memory report, refreshed by the worker (engine state is the worker's alone).
  MemoryReport memory_snapshot() const;

 private:
  struct Slot;
  struct Active;
  void run();
  void assign_jobs();
  bool step(Active& a);  // false when the job finished
  void finish(Active& a, FinishReason reason, Status error = {});

  Engine& engine_;
  WorkerOptions opts_;
  SharedReplayStore& replay_;
  Metrics& metrics_;
  std::FILE* trace_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;  // guarded by mu_
  bool stopping_ = false;                   // guarded by mu_
  std::atomic<bool> hard_stop_{false};      // drain grace over: cancel whatever still runs
  std::chrono::steady_clock::time_point drain_deadline_;
  MemoryReport mem_;                        // guarded by mu_

  // Worker-thread-only state.
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<std::unique_ptr<Active>> active_;
  std::thread thread_;
};

}  // namespace ds4::server
