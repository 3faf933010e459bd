// scheduler.h — the step planner: given the jobs the engine worker is running, decides which of them
// advance in the next Engine::step and by how many tokens (vLLM v1 style: the plan is plain data,
// `job -> tokens this step`, so a decode token and a prefill chunk are the same thing).
//
// Policy (docs/SERVER.md "Scheduling"):
//  1. Decoders first: every decoding job gets its tokens (1, or the few of a forced tool-call opener)
//     each step, so a long prefill never starves a stream. When the decoders alone exceed the budget,
//     they take turns (a rotating start), and a small share stays reserved for waiting prefills.
//  2. The rest of the token budget goes to prefilling jobs in arrival order (first come, first
//     served: the oldest prompt reaches its first token soonest), each chunk capped by the job's own
//     limit (e.g. the next prefix-cache checkpoint) and by `prefill_chunk`.
// Deliberately not here: memory (admission.h decides who may run at all), sessions, sampling.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace ds4::kv {

struct SchedOptions {
  int64_t max_batch_tokens = 64;  // tokens of all jobs together in one step (<= Engine::max_step_tokens())
  int64_t prefill_chunk = 512;    // most prompt tokens one job prefills in one step
};

// One running job as the scheduler sees it, in arrival order.
struct SchedJob {
  bool decoding = false;  // true: wants `want` tokens every step (1 for a sampled token)
  int64_t want = 0;       // decoding: tokens of its next step; prefilling: prompt tokens still to evaluate
  int64_t cap = 0;        // prefilling: most tokens before it must stop (a checkpoint); 0 = no cap
};

struct SchedGrant {
  size_t job = 0;      // index into the span given to plan()
  int64_t tokens = 0;  // > 0
};

struct StepPlan {
  std::vector<SchedGrant> grants;  // in job order
  int64_t decode_tokens = 0, prefill_tokens = 0;
  size_t decode_jobs = 0, prefill_jobs = 0;
  size_t deferred_decoders = 0;  // decoders left out of this step (only when they exceed the budget)
};

class Scheduler {
 public:
  explicit Scheduler(const SchedOptions& opts);
  const SchedOptions& options() const { return opts_; }
  // The next step's plan. Empty only when no job wants tokens.
  StepPlan plan(std::span<const SchedJob> jobs);

 private:
  SchedOptions opts_;
  size_t decode_cursor_ = 0;  // rotates the decoders' start when they do not all fit
};

}  // namespace ds4::kv
