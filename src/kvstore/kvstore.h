// kvstore.h — the disk KV cache store: session checkpoints of rendered prompt prefixes, kept in a
// directory that several processes (and several sessions of one process) may share, found again by
// the longest cached prefix of a new rendered prompt, restored instead of recomputed.
//
// Directory contents (all names derived from SHA-256, so nothing is ever scanned to look up):
//   <key>.kv      immutable entry: header, rendered prefix text, token ids, logits, snapshot payload
//                 (entry_format.h). key = SHA-256(namespace || text), namespace = f(model
//                 fingerprint, engine version), so different models never share names.
//   <key>.meta    hit count + last use (sidecar.h), updated in place under flock.
//   <bucket>.idx  prefix index: bucket = SHA-256(namespace || text[0 : k*stride]); lists the entry
//                 lengths in [k*stride, (k+1)*stride). A lookup hashes the prompt once, forks the
//                 hash at each stride boundary, and opens at most one .idx per boundary (longest
//                 first) plus the .kv files whose re-derived key matches.
//   tmp.*         files being written (atomic publish by rename); stale ones are collected.
//   .lock         flock'd by whoever evicts or collects, so one process at a time does it and the
//                 budget is one budget for the directory.
// Sharing rules (DISK_KV_SHARING.md): payload files are never rewritten in place; hit statistics
// live in the sidecar; nothing is deleted on load; readers hold a shared flock on the entry while
// reading and the evictor only unlinks entries it can lock exclusively without waiting; any file
// may vanish at any time (a vanished file is a miss, never an error).
//
// Threading: a Store is used by one thread at a time (the engine worker); several Store objects
// (threads, processes) may use one directory concurrently. stats() and usage() may be called from
// any thread (a /metrics scrape) while that thread works.
// Deliberately not here: rendering, tokenizing, the snapshot format (payload bytes are opaque),
// and when to save (save_policy.h).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ds4/status.h"
#include "kvstore/codec.h"
#include "kvstore/entry_format.h"
#include "kvstore/save_policy.h"
#include "kvstore/sha256.h"
#include "kvstore/sidecar.h"

namespace ds4::kvstore {

// What makes a checkpoint valid for a model. Two files of the same model that differ only in the
// routed-expert quantization (2-bit vs 4-bit) should get the same fingerprint and different
// quant_family values: their checkpoints are then shared unless reject_different_quant is set.
struct ModelIdentity {
  Digest fingerprint{};         // e.g. SHA-256 over tensor names/shapes/non-expert types + config
  uint32_t quant_family = 0;    // e.g. routed-expert bits (2, 4)
  std::string engine_version;   // snapshot-format compatibility string, <= 32 bytes

  // Convenience: SHA-256 over length-prefixed parts.
  static Digest fingerprint_of(std::span<const std::string_view> parts);
};

struct StoreOptions {
  std::string dir;                                 // --kv-disk-dir (created like mkdir -p)
  uint64_t space_bytes = uint64_t{4096} << 20;     // --kv-disk-space-mb, one budget for the whole dir
  ModelIdentity model;
  bool reject_different_quant = false;             // --kv-cache-reject-different-quant
  uint64_t index_stride_bytes = 16384;             // prefix-index bucket width in text bytes
  const PayloadCodec* codec = nullptr;             // codec for writing; nullptr = identity
  std::vector<const PayloadCodec*> extra_codecs;   // also readable (identity and `codec` always are)
  uint64_t stale_temp_seconds = 3600;              // tmp.* older than this are a crashed writer's
  double hit_half_life_seconds = 6 * 3600.0;       // ds4's eviction decay of hit counts
  bool fsync = true;                               // fsync temp file + directory before/after rename
  ParseLimits limits;
  std::function<void(const std::string&)> log;     // one line per event worth logging; may be empty
  std::function<uint64_t()> clock;                 // unix seconds; empty = time(). Tests inject one.
};

struct SaveRequest {
  std::string_view text;                // rendered prefix bytes (decoded text of `tokens`)
  std::span<const int32_t> tokens;      // [n] exact token ids of the prefix
  std::span<const float> logits;        // [n_vocab] next-token logits after the prefix
  std::span<const uint8_t> payload;     // Session::snapshot() bytes
  SaveReason reason = SaveReason::unknown;
  uint64_t ctx = 0;                     // the session's context limit
};

struct SaveResult {
  bool written = false;           // a new file was published
  bool already_present = false;   // a compatible entry with this text existed; only its last-use refreshed
  std::string skipped;            // non-empty: why nothing was written (e.g. larger than the budget)
  std::string key;                // hex
  uint64_t file_bytes = 0;
  uint64_t evicted_files = 0;
};

struct LookupRequest {
  std::string_view prompt;    // the new rendered prompt
  uint64_t min_tokens = 1;    // --kv-cache-min-tokens
  uint64_t max_ctx = 0;       // entries written with a larger ctx are skipped; 0 = no limit
  uint64_t n_logits = 0;      // expected vocab size; 0 = any
};

struct Hit {
  std::string key;            // hex
  Entry entry;                // text is a byte prefix of the prompt; tokens/logits/payload verified
  uint64_t hits = 0;          // after this hit
};

struct EntryInfo {
  std::string key;            // hex
  uint64_t file_bytes = 0;
  std::optional<EntryHeader> header;   // nullopt: header unreadable/damaged
  std::string header_error;
  MetaRecord meta;            // zero when no sidecar
  std::string text_head;      // first bytes of the text (for ls)
};

struct VerifyReport {
  uint64_t entries = 0, ok = 0, bad = 0, removed = 0;
  std::vector<std::string> problems;   // "key: reason"
};

// Why lookup() passed over an entry file that matched the prompt (the entry is then a miss).
enum class Rejection : uint32_t {
  corrupt,        // header, length, padding or a section checksum wrong (truncated, bit-flipped, garbage): removed
  model_version,  // header names another model fingerprint or engine version than its key's namespace
  quant,          // another routed-expert quant family while reject_different_quant is set
  unsupported,    // a newer format version or a codec this process lacks: skipped, never removed
  ctx,            // written by a session with a larger context limit than the lookup allows
  vocab,          // logit count differs from the model's vocabulary
  mismatch,       // name, header and index disagree, or the text is not the prompt's prefix
  unreadable,     // could not be opened or read (I/O error, permissions)
};
inline constexpr size_t kRejectionCount = 8;
const char* rejection_name(Rejection r);

// What this Store did to the directory since it was opened (other processes' work is not counted).
struct StoreStats {
  uint64_t files_written = 0, bytes_written = 0;    // entry files published by save()
  uint64_t files_read = 0, bytes_read = 0;          // entry bodies read by lookup() (hits and rejected)
  uint64_t evicted_entries = 0, evicted_bytes = 0;  // removed to stay under space_bytes (save, open, gc)
  std::array<uint64_t, kRejectionCount> rejected{}; // by Rejection
};

// The directory now: bytes of all its regular files and the number of entries (.kv files).
struct DirUsage {
  uint64_t bytes = 0, entries = 0;
};

struct GcReport {
  uint64_t bytes_before = 0, bytes_after = 0;
  uint64_t evicted_entries = 0, removed_temp = 0, removed_orphans = 0, index_records_dropped = 0;
};

class Store {
 public:
  // Creates the directory when needed and evicts down to the budget (like ds4 at open).
  static Result<std::unique_ptr<Store>> open(StoreOptions opts);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  const StoreOptions& options() const { return opts_; }
  // SHA-256(namespace || text) — the entry name for this model.
  Digest key_of(std::string_view text) const;

  // Writes a checkpoint atomically, indexes it, then evicts to the budget (this entry protected
  // unless it alone exceeds it). Failing to save is never fatal for the caller: log and go on.
  Result<SaveResult> save(const SaveRequest& req);

  // Longest cached prefix of req.prompt that is compatible and intact; nullopt = miss. Damaged
  // entries met on the way are logged and removed; incompatible ones are skipped. A hit bumps the
  // entry's hit count and last use. Errors are returned only for misuse (bad arguments).
  Result<std::optional<Hit>> lookup(const LookupRequest& req);

  // Administration (ds4 kvcache): these never need the model identity.
  Result<std::vector<EntryInfo>> list() const;
  Result<VerifyReport> verify(bool remove_bad);
  // Evicts to `space_bytes`, removes stale temps and orphan sidecars, compacts the index.
  Result<GcReport> gc(uint64_t space_bytes);
  // Removes every file of the store from the directory; returns how many.
  Result<uint64_t> clear();
  // Bytes of all regular files in the directory.
  Result<uint64_t> usage_bytes() const;
  // Bytes and entries in the directory (one listing; a wiped directory is empty, not an error).
  Result<DirUsage> usage() const;
  // Counters of this Store's own saves, reads, evictions and rejections.
  StoreStats stats() const;

 private:
  explicit Store(StoreOptions opts);
  struct Impl;
  friend struct Impl;
  uint64_t now() const;
  void log(const std::string& line) const;
  std::string path(const std::string& name) const { return opts_.dir + "/" + name; }
  Result<uint64_t> evict_to(uint64_t budget, const std::string& protect_key, GcReport* report);
  void reject(Rejection why);
  template <class F>
  void count(F&& update) {
    std::lock_guard<std::mutex> lock(stats_mu_);
    update(stats_);
  }

  StoreOptions opts_;
  Digest salt_{};
  std::vector<const PayloadCodec*> codecs_;
  mutable std::mutex stats_mu_;  // stats_ is read by other threads (metrics)
  StoreStats stats_;
};

// The namespace digest of an identity (model fingerprint + engine version; not the quant family).
Digest namespace_salt(const Digest& fingerprint, std::string_view engine_version);

}  // namespace ds4::kvstore
