// save_policy.h — ds4's disk-KV save policy as plain functions (DS4_SERVER.md §3.2): which prefix
// length to save on a cold request, when a continued frontier is due, whether an evicted or
// shutting-down live session is worth saving. The server asks "should I save now, and at which
// prefix length"; it then snapshots the session at that length and calls Store::save.
// Deliberately not here: I/O, the store itself, or any knowledge of the tokenizer beyond the two
// marker token ids the cold anchor needs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "ds4/status.h"

namespace ds4::kvstore {

// Why a checkpoint was written (the header's save-reason byte; the numbers are ds4's).
enum class SaveReason : uint32_t { unknown = 0, cold = 1, continued = 2, evict = 3, shutdown = 4 };
inline constexpr size_t kSaveReasonCount = 5;
const char* save_reason_name(SaveReason r);

// The knobs, with ds4-server's defaults (its --help text).
struct SavePolicy {
  int64_t min_tokens = 512;                    // --kv-cache-min-tokens: never save/load shorter prefixes
  int64_t cold_max_tokens = 30000;             // --kv-cache-cold-max-tokens: cold prompts up to N; 0 = off
  int64_t continued_interval_tokens = 10000;   // --kv-cache-continued-interval-tokens; 0 = off
  int64_t boundary_trim_tokens = 32;           // --kv-cache-boundary-trim-tokens (cold fallback)
  int64_t boundary_align_tokens = 2048;        // --kv-cache-boundary-align-tokens; 0 or 1 = no alignment
};

// Rejects negative knobs and a cold maximum below the minimum (ds4's launcher rules).
Status validate(const SavePolicy& p);

// The continued-frontier interval actually used: the knob rounded up to the alignment
// (10000 -> 10240 with the defaults); 0 when continued saves are off.
int64_t continued_interval(const SavePolicy& p);

// Position of the cold anchor in a rendered prompt: the index of the last `user` marker token that
// comes before the first `assistant` marker token (so the saved prefix is everything before the
// final user turn of the first exchange: system prompt, tools, earlier turns). nullopt when there
// is no such marker.
std::optional<int64_t> find_cold_anchor(std::span<const int32_t> prompt_tokens, int32_t user_token,
                                        int32_t assistant_token);

// Cold save (a request that reused nothing): for a prompt of `prompt_tokens` tokens in
// [min_tokens, cold_max_tokens], the prefix length to save: the anchor when it is >= min_tokens
// and inside the prompt, else (prompt_tokens - boundary_trim) aligned down to boundary_align
// (trimming keeps the saved text off the prompt's last BPE-unstable bytes; aligning makes
// different prompts with a shared head save the same prefix). nullopt = do not save.
std::optional<int64_t> cold_save_length(const SavePolicy& p, int64_t prompt_tokens,
                                        std::optional<int64_t> anchor);

// Continued saves: the next live length at which a frontier is due after the last save at
// `last_saved_len` (0 = none yet): the first multiple of continued_interval() above it.
// nullopt when continued saves are off. Prefill stops at this length, saves, and continues.
std::optional<int64_t> next_continued_save(const SavePolicy& p, int64_t last_saved_len);
// True when `live_len` has reached the due frontier (the check made after every decode step; `>=`
// rather than `==` so a step that appends several tokens, e.g. speculative decoding, cannot skip it).
// The server then saves the whole live timeline and passes live_len as the new last_saved_len.
bool continued_save_due(const SavePolicy& p, int64_t last_saved_len, int64_t live_len);

// Evict (a live session about to be replaced) and shutdown: save the whole live timeline when it
// has at least min_tokens tokens.
bool should_save_live(const SavePolicy& p, int64_t live_len);

// Lookup side: a cached prefix is usable only with at least min_tokens tokens.
inline bool usable_prefix(const SavePolicy& p, int64_t tokens) { return tokens >= p.min_tokens && tokens > 0; }

}  // namespace ds4::kvstore
