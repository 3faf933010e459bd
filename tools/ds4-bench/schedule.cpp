// schedule.cpp — see schedule.h.
#include "schedule.h"

#include <cmath>

namespace ds4::bench {

int64_t effective_ctx_alloc(const ScheduleOptions& o) {
  return o.ctx_alloc > 0 ? o.ctx_alloc : o.ctx_max + o.gen_tokens + 1;
}

Result<std::vector<int64_t>> frontiers(const ScheduleOptions& o) {
  if (o.ctx_start <= 0) return invalid_argument("--ctx-start must be positive, got " + std::to_string(o.ctx_start));
  if (o.ctx_max < o.ctx_start)
    return invalid_argument("--ctx-max (" + std::to_string(o.ctx_max) + ") is smaller than --ctx-start (" +
                            std::to_string(o.ctx_start) + ")");
  if (!(o.step_mul >= 1.0) || !std::isfinite(o.step_mul))
    return invalid_argument("--step-mul must be a finite number >= 1, got " + std::to_string(o.step_mul));
  if (o.step_mul == 1.0 && o.step_incr <= 0)
    return invalid_argument("--step-incr must be positive, got " + std::to_string(o.step_incr));
  if (o.gen_tokens < 0) return invalid_argument("--gen-tokens must be >= 0, got " + std::to_string(o.gen_tokens));
  if (o.ctx_alloc < 0) return invalid_argument("--ctx-alloc must be >= 0, got " + std::to_string(o.ctx_alloc));
  const int64_t need = o.ctx_max + o.gen_tokens;
  const int64_t alloc = effective_ctx_alloc(o);
  if (alloc < need)
    return invalid_argument("--ctx-alloc " + std::to_string(alloc) + " cannot hold the last frontier " +
                            std::to_string(o.ctx_max) + " plus " + std::to_string(o.gen_tokens) +
                            " decode tokens (need at least " + std::to_string(need) + ")");
  std::vector<int64_t> out;
  for (int64_t f = o.ctx_start; f <= o.ctx_max;) {
    out.push_back(f);
    int64_t next = o.step_mul > 1.0 ? static_cast<int64_t>(std::llround(static_cast<double>(f) * o.step_mul))
                                    : f + o.step_incr;
    if (next <= f) next = f + 1;  // a multiplier close to 1 still advances
    f = next;
  }
  return out;
}

}  // namespace ds4::bench
