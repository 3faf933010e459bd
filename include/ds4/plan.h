// plan.h — the memory planner: exact bytes per category for K sessions of N tokens on a backend,
// computed from the GGUF header before anything heavy is loaded (`ds4 plan`, the server's defaults).
//
// It uses the same formula module as the allocator (src/modelspec/memory_plan), so a live run at the
// same (N, K) reports the same KV bytes exactly and the same total within the backend's op-scratch
// slack (well under 1%). Reading the plan costs the GGUF header, the tokenizer tables and the small
// float tensors (norms, biases); weight matrices stay unread.
// Deliberately not here: loading the model (Engine::open), live measurements (Engine::memory_report).
#pragma once

#include <cstdint>
#include <string>

#include "ds4/engine.h"
#include "ds4/memory.h"
#include "ds4/status.h"

namespace ds4 {

struct PlanOptions {
  std::string model_path;
  BackendKind backend = BackendKind::cpu;
  int64_t ctx = 0;        // tokens held by each session (N); 0 = the model's context_length
  int64_t sessions = 1;   // K
  int32_t max_chunk = 0;  // as EngineOptions::max_chunk (0 = default_max_chunk(backend))
  int n_threads = 0;      // CPU threads (op scratch is per thread); 0 = hardware concurrency
  int cuda_device = 0;
  // Memory to plan against; 0 = what the machine reports (host MemAvailable, or the device's free bytes).
  uint64_t available = 0;
};

struct MemoryPlan {
  MemBytes host, device;       // the whole process with K sessions at N tokens each
  MemBytes session;            // one session at N tokens (KV by category; token ids and logits as other)
  MemRate kv_bytes_per_token{};
  uint64_t kv_block_bytes = 0;
  int64_t ctx = 0, sessions = 0, max_chunk = 0, model_context = 0;
  uint64_t available = 0;      // memory planned against (device free on CUDA, host MemAvailable on CPU)
  uint64_t machine_total = 0;  // device total / host MemTotal (0 when unknown)
  uint64_t needed = 0;         // device.total() on CUDA, host.total() on CPU
  bool fits = false;
  int64_t max_ctx_fit = 0;       // largest N (≤ model context) that fits with K sessions
  int64_t max_sessions_fit = 0;  // largest K that fits at N tokens each
};

Result<MemoryPlan> plan_memory(const PlanOptions& opts);

// Host memory: MemTotal and MemAvailable from /proc/meminfo (0s when unreadable).
struct HostMemory {
  uint64_t total = 0, available = 0;
};
HostMemory host_memory();

}  // namespace ds4
