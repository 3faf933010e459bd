// disk_cache.h — the server's disk KV cache (--kv-disk-dir): ds4's save/lookup policy
// (DS4_SERVER.md §3.2) on top of src/kvstore, as the few calls the engine worker makes at its
// decision points. The worker stays in charge of scheduling; this class only decides whether a
// checkpoint is saved or restored there and does it.
//
//   discard     save_before_discard()  evict save before an idle session is dropped or replaced
//   admission   admit()          longest cached prefix of the prompt looked up, the live timeline a
//                                new job is about to cut saved (evict), the session rewound, the
//                                hit restored (when it beats the live reuse); a cold request gets
//                                its cold save point planned
//   prefill     prefill_limit()  the prefill chunk stops at the next due save point
//   each eval   after_eval()     cold and continued (every 10240 tokens) saves when due
//   shutdown    at_shutdown()    the live timeline is saved
//
// Keys: the cached text is the byte concatenation of the exact token ids (Tokenizer::decode), so a
// prompt hits whenever its rendered bytes start with it, even if BPE split the boundary differently;
// then the cached ids are kept and only the rest of the text is re-tokenized. Payloads are compact
// session snapshots (SnapshotFormat::compact). Nothing here is fatal: a failed save or restore is
// logged and the request is served by prefill.
// Threading: used only by the worker thread, except stats()/report() (the /metrics and /v1/memory
// threads). Several processes may share the directory (kvstore).
// Deliberately not here: the directory format, locking and eviction (src/kvstore), scheduling.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ds4/engine.h"
#include "kvstore/kvstore.h"

namespace ds4::server {

struct DiskCacheOptions {
  std::string dir;                      // --kv-disk-dir
  uint64_t space_mb = 4096;             // --kv-disk-space-mb
  kvstore::SavePolicy policy;           // --kv-cache-* knobs
  bool reject_different_quant = false;  // --kv-cache-reject-different-quant
  bool compact = true;                  // compact snapshot payloads (false: f32 rows, like ds4)
  bool fsync = true;
  std::function<void(const std::string&)> log;  // one line per save/hit/problem; may be empty
};

// What the worker keeps per live session (one per slot) for the cache's bookkeeping.
struct DiskTimeline {
  int64_t saved = 0;    // live length at the last save or restore of this timeline (0: none)
  int64_t cold_at = 0;  // > 0: a cold save is due when prefill reaches this length
};

// The cache's own events, counted where they happen (GET /metrics, GET /v1/memory). File-level
// events (bytes written/read, evictions, rejected files) are the store's: kvstore::StoreStats.
struct DiskCacheStats {
  uint64_t lookups = 0;          // prompts looked up (long enough, and longer than the live reuse)
  uint64_t hits = 0;             // lookups whose checkpoint was restored
  uint64_t misses = 0;           // lookups without a usable checkpoint (none found, or its restore failed)
  uint64_t restore_errors = 0;   // checkpoints read but refused by Session::restore or the id/logit check
  uint64_t restored_tokens = 0;  // prompt tokens restored instead of prefilled
  // By kvstore::SaveReason: checkpoints written, or whose text was already on disk.
  std::array<uint64_t, kvstore::kSaveReasonCount> saves{};
  uint64_t save_errors = 0;      // snapshot or write failed
  uint64_t saves_too_large = 0;  // not written: one entry would exceed --kv-disk-space-mb
  uint64_t saved_tokens = 0;     // tokens in checkpoints this process wrote
  double save_seconds = 0;       // wall time of every save attempt (snapshot, encode, write, fsync, evict)
  double lookup_seconds = 0;     // wall time of every lookup (index, read, checksums)
  double restore_seconds = 0;    // wall time of Session::restore and its checks (hits and refused ones)
};

// Everything /metrics and /v1/memory show of the disk cache (disk_cache_view.h).
struct DiskCacheReport {
  DiskCacheStats cache;
  kvstore::StoreStats store;
  std::optional<kvstore::DirUsage> usage;  // the directory now; nullopt when it could not be listed
  uint64_t limit_bytes = 0;                // --kv-disk-space-mb
  std::string dir;                         // --kv-disk-dir
};

class DiskCache {
 public:
  // Opens (creates) the directory store for this engine's model identity. Fails on bad options or
  // an unusable directory; the caller then serves without a disk cache (ds4 does the same).
  static Result<std::unique_ptr<DiskCache>> open(Engine& engine, DiskCacheOptions opts);
  ~DiskCache();

  // A job was given `s`, whose first `keep` tokens it shares. In this order: looks up the longest
  // cached prefix of `prompt` longer than `keep` (read and verified into memory); saves the live
  // timeline if the rewind discards tokens and it is long enough (ds4's `evict`); rewinds `s` to
  // `keep`; restores the hit (then `prompt` becomes the cached ids plus the re-tokenized rest of its
  // text); plans a cold save when the request reuses (almost) nothing. Returns the tokens now in
  // `s`, or -1 when `s` could not be rewound (the caller starts over with a new session).
  int64_t admit(Session& s, DiskTimeline& t, std::vector<TokenId>& prompt, int64_t keep);
  // `s` is about to be dropped or replaced except its first `keep` tokens (idle eviction, a restore
  // from the in-memory prefix cache): ds4's `evict` save of the timeline when it is long enough.
  void save_before_discard(Session& s, DiskTimeline& t, int64_t keep);
  // Where the prefill from `pos` towards `end` must pause for the next save.
  int64_t prefill_limit(const DiskTimeline& t, int64_t pos, int64_t end) const;
  // After `s` advanced: writes a cold or continued checkpoint when one is due. Continued saves are
  // not made inside a tool-call block (`in_tool_call`), like ds4.
  void after_eval(Session& s, DiskTimeline& t, bool in_tool_call);
  // Server stopping: saves the live timeline (ds4's `shutdown`).
  void at_shutdown(Session& s, DiskTimeline& t);

  // Thread-safe (the metrics thread reads them while the worker saves and restores).
  DiskCacheStats stats() const;
  // stats() plus the store's counters and a fresh listing of the directory (other processes' files
  // included): one readdir + stat per file, so it is done per scrape, not per event.
  DiskCacheReport report() const;
  const DiskCacheOptions& options() const { return opts_; }

 private:
  DiskCache(Engine& engine, DiskCacheOptions opts);
  bool save(Session& s, DiskTimeline& t, kvstore::SaveReason why);
  void log(const std::string& line) const;

  Engine& engine_;
  DiskCacheOptions opts_;
  std::unique_ptr<kvstore::Store> store_;
  TokenId user_id_ = -1, assistant_id_ = -1;
  mutable std::mutex mu_;  // stats are read by the metrics thread
  DiskCacheStats stats_;
};

}  // namespace ds4::server
