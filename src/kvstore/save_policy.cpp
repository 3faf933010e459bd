// save_policy.cpp — ds4's save points and prefix lengths (see save_policy.h).
#include "kvstore/save_policy.h"

#include <string>

namespace ds4::kvstore {

const char* save_reason_name(SaveReason r) {
  switch (r) {
    case SaveReason::unknown: return "unknown";
    case SaveReason::cold: return "cold";
    case SaveReason::continued: return "continued";
    case SaveReason::evict: return "evict";
    case SaveReason::shutdown: return "shutdown";
  }
  return "unknown";
}

Status validate(const SavePolicy& p) {
  if (p.min_tokens < 1) return invalid_argument("--kv-cache-min-tokens must be >= 1");
  if (p.cold_max_tokens < 0) return invalid_argument("--kv-cache-cold-max-tokens must be >= 0");
  if (p.continued_interval_tokens < 0) return invalid_argument("--kv-cache-continued-interval-tokens must be >= 0");
  if (p.boundary_trim_tokens < 0) return invalid_argument("--kv-cache-boundary-trim-tokens must be >= 0");
  if (p.boundary_align_tokens < 0) return invalid_argument("--kv-cache-boundary-align-tokens must be >= 0");
  if (p.cold_max_tokens > 0 && p.cold_max_tokens < p.min_tokens)
    return invalid_argument("--kv-cache-cold-max-tokens (" + std::to_string(p.cold_max_tokens) +
                            ") is below --kv-cache-min-tokens (" + std::to_string(p.min_tokens) + ")");
  return Status::Ok();
}

namespace {
int64_t align_of(const SavePolicy& p) { return p.boundary_align_tokens > 1 ? p.boundary_align_tokens : 1; }
}  // namespace

int64_t continued_interval(const SavePolicy& p) {
  if (p.continued_interval_tokens <= 0) return 0;
  const int64_t a = align_of(p);
  return (p.continued_interval_tokens + a - 1) / a * a;
}

std::optional<int64_t> find_cold_anchor(std::span<const int32_t> prompt_tokens, int32_t user_token,
                                        int32_t assistant_token) {
  std::optional<int64_t> last_user;
  for (size_t i = 0; i < prompt_tokens.size(); ++i) {
    if (prompt_tokens[i] == assistant_token) break;
    if (prompt_tokens[i] == user_token) last_user = static_cast<int64_t>(i);
  }
  return last_user;
}

std::optional<int64_t> cold_save_length(const SavePolicy& p, int64_t prompt_tokens,
                                        std::optional<int64_t> anchor) {
  if (p.cold_max_tokens <= 0) return std::nullopt;
  if (prompt_tokens < p.min_tokens || prompt_tokens > p.cold_max_tokens) return std::nullopt;
  if (anchor && *anchor >= p.min_tokens && *anchor <= prompt_tokens) return *anchor;
  const int64_t trimmed = prompt_tokens - p.boundary_trim_tokens;
  if (trimmed <= 0) return std::nullopt;
  const int64_t a = align_of(p);
  const int64_t len = trimmed / a * a;
  if (len < p.min_tokens || len <= 0) return std::nullopt;
  return len;
}

std::optional<int64_t> next_continued_save(const SavePolicy& p, int64_t last_saved_len) {
  const int64_t iv = continued_interval(p);
  if (iv <= 0) return std::nullopt;
  const int64_t base = last_saved_len > 0 ? last_saved_len : 0;
  int64_t next = (base / iv + 1) * iv;
  if (next < p.min_tokens) next = (p.min_tokens + iv - 1) / iv * iv;
  return next;
}

bool continued_save_due(const SavePolicy& p, int64_t last_saved_len, int64_t live_len) {
  auto next = next_continued_save(p, last_saved_len);
  return next && live_len >= *next;
}

bool should_save_live(const SavePolicy& p, int64_t live_len) { return live_len > 0 && live_len >= p.min_tokens; }

}  // namespace ds4::kvstore
