// schedule.h — the context frontiers ds4-bench walks (ds4-bench's --ctx-start/--ctx-max/--step-incr/
// --step-mul semantics) and the checks on them that must fail before any model is loaded.
//
// Pure functions on plain values, so the tool and its tests agree on the schedule. Deliberately not
// here: flag parsing (main.cpp) and running the model (bench_loop.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ds4/status.h"

namespace ds4::bench {

struct ScheduleOptions {
  int64_t ctx_start = 2048;  // first frontier (tokens)
  int64_t ctx_max = 32768;   // last frontier, inclusive when the steps land on it
  int64_t step_incr = 2048;  // linear step, used when step_mul == 1
  double step_mul = 1.0;     // > 1: geometric sweep, next = round(frontier · step_mul)
  int64_t gen_tokens = 128;  // decode tokens measured at each frontier
  int64_t ctx_alloc = 0;     // session context; 0 = ctx_max + gen_tokens + 1 (ds4-bench's default)
};

// The frontiers start, start+incr, ... (or start, start·mul, ...) that are <= ctx_max. Errors name
// the offending flag: non-positive values, start > max, step_mul < 1, ctx_alloc too small to hold
// the last frontier plus its decode tokens.
Result<std::vector<int64_t>> frontiers(const ScheduleOptions& o);

// The session context the run needs: ctx_alloc, or its default.
int64_t effective_ctx_alloc(const ScheduleOptions& o);

}  // namespace ds4::bench
