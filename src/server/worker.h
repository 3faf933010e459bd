// worker.h — the engine worker: the ONE thread that owns the Engine's sessions and runs every
// prefill and decode step (STYLE.md principle 7). HTTP threads submit Jobs (already rendered and
// tokenized) and read GenEvents from the Job's channel; they never touch a Session.
//
// Each loop iteration is ONE Engine::step over several sessions: every decoding job's next token plus
// prefill chunks of jobs still reading their prompt, under a token budget (kv::Scheduler decides who
// gets how many tokens; docs/SERVER.md "Scheduling"). Admission (kv::decide_admission) starts a queued
// job when a session is free and its KV reservation fits the budget, evicting idle sessions first.
// A new job reuses the cheapest of: an idle session sharing a prefix with its prompt (rewound), or a
// state from the cross-session prefix cache (kv::PrefixCache, restored from a snapshot).
// Files: worker.cpp (loop, step), worker_admit.cpp (admission, slot choice, prefix cache),
// worker_token.cpp (sampling, streaming, stop conditions, finish), worker_state.h (private state).
//
// Deliberately not here: HTTP, JSON, API shapes (formatters turn GenEvents into each API's output).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "chat/chat.h"
#include "ds4/engine.h"
#include "server/channel.h"
#include "server/disk_cache.h"
#include "server/gen_request.h"
#include "kv/admission.h"
#include "kv/prefix_cache.h"
#include "kv/scheduler.h"
#include "server/metrics.h"

namespace ds4::server {

struct WorkerOptions {
  int64_t default_max_tokens = 393216;  // -n/--tokens: when the client gives no limit
  int n_sessions = 1;                   // --max-sessions: live KV timelines (ds4: one); 0 = from the KV budget
  size_t max_queue = 16;                // waiting jobs beyond this -> unavailable (HTTP 503)
  int32_t prefill_step = 512;           // most prompt tokens one job prefills in one step
  int64_t max_batch_tokens = 0;         // --max-batch-tokens: tokens per step; 0 = engine.max_step_tokens()
  uint64_t kv_budget_bytes = 0;         // --kv-memory-mb: KV bytes all sessions may hold; 0 = no limit
  uint64_t prefix_cache_bytes = 0;      // --prefix-cache-mb: cross-session prefix cache; 0 = off
  int64_t prefix_block_tokens = 128;    // prefix cache granularity (kv/prefix_cache.h)
  chat::Flavor flavor = chat::Flavor::ds4;
  bool exact_dsml_replay = true;        // remember id -> sampled DSML for byte-exact replay
  DiskCache* disk_cache = nullptr;      // --kv-disk-dir (not owned; used by the worker thread only)
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
  // Set by the HTTP thread before submit: true once its client has disconnected. The worker asks
  // it before admitting a queued job, so a client that left while queued is not started even when
  // its HTTP thread has not polled yet (that thread checks only every 100 ms and may be starved).
  std::function<bool()> client_gone;
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
  void learn_kv_cost();
  // worker_admit.cpp
  void assign_jobs();
  bool start_job(Active& a, Slot* slot, int64_t restore_tokens, const std::vector<uint8_t>* payload);
  void free_slot(Slot* slot);
  void count_wait(const Job& job);
  // worker.cpp
  void run_step();
  bool check_alive(Active& a);  // false (and finished) when cancelled or timed out
  void after_step(Active& a, int64_t tokens);
  void save_checkpoint(Active& a);
  void publish_batch(const kv::StepPlan& plan);
  // worker_token.cpp
  bool next_feed(Active& a);  // decoding: samples/streams the next token into a.feed; false when finished
  void finish(Active& a, FinishReason reason, Status error = {});
  void refresh_memory();

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
  std::vector<std::unique_ptr<Slot>> slots_;      // live sessions, at most max_sessions_
  std::vector<std::unique_ptr<Active>> active_;   // running jobs in admission order
  kv::Scheduler scheduler_;
  kv::PrefixCache prefix_cache_;
  kv::AdmissionOptions admission_;
  kv::KvCostModel kv_cost_;
  int max_sessions_ = 1;
  int64_t max_batch_tokens_ = 0;
  uint64_t steps_ = 0;
  uint64_t prefix_saves_ = 0;
  uint64_t last_waiting_job_ = ~0ull;
  BatchStats batch_;  // counters published to /metrics after each step
  std::thread thread_;
};

}  // namespace ds4::server
