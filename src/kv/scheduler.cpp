// scheduler.cpp — see scheduler.h.
#include "kv/scheduler.h"

#include <algorithm>

namespace ds4::kv {

Scheduler::Scheduler(const SchedOptions& opts) : opts_(opts) {
  opts_.max_batch_tokens = std::max<int64_t>(opts_.max_batch_tokens, 1);
  opts_.prefill_chunk = std::max<int64_t>(opts_.prefill_chunk, 1);
}

StepPlan Scheduler::plan(std::span<const SchedJob> jobs) {
  StepPlan p;
  std::vector<int64_t> grant(jobs.size(), 0);
  int64_t budget = opts_.max_batch_tokens;

  std::vector<size_t> decoders;
  bool prefill_waiting = false;
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (jobs[i].want <= 0) continue;
    if (jobs[i].decoding) decoders.push_back(i);
    else prefill_waiting = true;
  }
  // Decoders normally all fit (max_sessions <= max_batch_tokens / 2 by default). When they do not,
  // keep 1/8 of the budget for prefills so a new request still reaches its first token.
  int64_t decode_budget = budget;
  if (prefill_waiting) decode_budget = budget - std::max<int64_t>(1, budget / 8);
  int64_t decode_want = 0;
  for (size_t i : decoders) decode_want += jobs[i].want;
  if (decode_want <= decode_budget) {
    for (size_t i : decoders) grant[i] = jobs[i].want;
    budget -= decode_want;
  } else {
    // Take turns from a rotating start; a job that does not fit waits for the next step.
    const size_t n = decoders.size();
    const size_t start = decode_cursor_ % n;
    int64_t left = decode_budget;
    size_t served = 0;
    for (size_t k = 0; k < n; ++k) {
      const size_t i = decoders[(start + k) % n];
      if (jobs[i].want > left) continue;
      grant[i] = jobs[i].want;
      left -= jobs[i].want;
      ++served;
    }
    decode_cursor_ = start + std::max<size_t>(served, 1);
    budget -= decode_budget - left;
  }
  // Prefills, oldest first.
  for (size_t i = 0; i < jobs.size() && budget > 0; ++i) {
    if (jobs[i].decoding || jobs[i].want <= 0) continue;
    int64_t n = std::min({jobs[i].want, opts_.prefill_chunk, budget});
    if (jobs[i].cap > 0) n = std::min(n, jobs[i].cap);
    if (n <= 0) continue;
    grant[i] = n;
    budget -= n;
  }
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (grant[i] > 0) {
      p.grants.push_back({i, grant[i]});
      if (jobs[i].decoding) {
        p.decode_tokens += grant[i];
        ++p.decode_jobs;
      } else {
        p.prefill_tokens += grant[i];
        ++p.prefill_jobs;
      }
    } else if (jobs[i].decoding && jobs[i].want > 0) {
      ++p.deferred_decoders;
    }
  }
  return p;
}

}  // namespace ds4::kv
