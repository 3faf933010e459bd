// admission.cpp — see admission.h.
#include "kv/admission.h"

#include <algorithm>

namespace ds4::kv {

namespace {
std::string mib(uint64_t b) { return std::to_string((b + (1u << 20) - 1) >> 20) + " MiB"; }
}  // namespace

AdmitDecision decide_admission(const AdmissionOptions& opts, const AdmissionInput& in) {
  AdmitDecision d;
  if (in.running >= opts.max_sessions) {
    d.verdict = AdmitVerdict::wait;
    d.reason = "all " + std::to_string(opts.max_sessions) + " sessions are running";
    return d;
  }
  if (opts.budget_bytes == 0) return d;
  if (in.need_bytes > opts.budget_bytes) {
    d.verdict = AdmitVerdict::reject;
    d.reason = "the request needs " + mib(in.need_bytes) + " of KV cache (prompt + max tokens), more than the server's KV budget of " +
               mib(opts.budget_bytes) + "; lower max_tokens or shorten the prompt";
    return d;
  }
  uint64_t used = in.reserved_bytes;
  std::vector<IdleSession> others;
  for (const IdleSession& s : in.idle) {
    if (static_cast<int64_t>(s.slot) == in.reuse_slot) continue;  // its memory becomes the new job's
    used += s.bytes;
    others.push_back(s);
  }
  // Least recently used idle sessions go first.
  std::sort(others.begin(), others.end(), [](const IdleSession& a, const IdleSession& b) { return a.last_used < b.last_used; });
  size_t k = 0;
  while (used + in.need_bytes > opts.budget_bytes && k < others.size()) {
    used -= others[k].bytes;
    d.evict.push_back(others[k].slot);
    ++k;
  }
  if (used + in.need_bytes > opts.budget_bytes) {
    d.verdict = AdmitVerdict::wait;
    d.evict.clear();
    d.reason = "KV budget full: " + mib(in.reserved_bytes) + " reserved by " + std::to_string(in.running) +
               " running request(s), " + mib(in.need_bytes) + " needed";
  }
  return d;
}

int derive_max_sessions(uint64_t budget_bytes, const KvCostModel& cost, int64_t typical_tokens, int cap) {
  cap = std::max(cap, 1);
  if (budget_bytes == 0) return cap;
  const uint64_t per = std::max<uint64_t>(cost.bytes_for(typical_tokens), 1);
  return static_cast<int>(std::clamp<uint64_t>(budget_bytes / per, 1, static_cast<uint64_t>(cap)));
}

}  // namespace ds4::kv
