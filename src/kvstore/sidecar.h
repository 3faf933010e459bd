// sidecar.h — the two small mutable files next to the immutable entries:
//   <key>.meta   hit count and last-use time of one entry (64-byte record), updated in place under
//                an exclusive flock so increments from several processes are never lost; a record
//                that fails its checksum reads as "no record" (hits 0) — statistics, not data.
//   <bucket>.idx prefix index: which entry text lengths exist under one aligned prefix hash
//                (64-byte records appended under an exclusive flock). Records are hints: a stale or
//                garbled one only costs a failed open, because lookup re-derives the key from the
//                prompt and compares it with the record's key before opening anything.
// Deliberately not here: the entry payloads, eviction policy.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ds4/status.h"
#include "kvstore/sha256.h"

namespace ds4::kvstore {

struct MetaRecord {
  uint64_t hits = 0;
  uint64_t last_used_unix = 0;
  uint64_t created_unix = 0;
  uint64_t n_tokens = 0;
  uint64_t entry_bytes = 0;
};

// nullopt when the sidecar is missing or damaged.
std::optional<MetaRecord> read_meta(const std::string& path);
// Creates or refreshes the record of a just-written entry: keeps an existing valid hit count,
// sets last_used = now and the entry facts.
Status init_meta(const std::string& path, const MetaRecord& fresh);
// hits += 1, last_used = now (creating the record from `fallback` if missing or damaged).
// Returns the record after the update.
Result<MetaRecord> bump_meta(const std::string& path, uint64_t now_unix, const MetaRecord& fallback);

struct IndexRecord {
  uint64_t text_bytes = 0;
  uint64_t n_tokens = 0;
  Digest key{};
};

// Appends `rec` unless a record with the same key is already there.
Status append_index(const std::string& path, const IndexRecord& rec);
// Valid records (checksummed); at most max_records are read. Missing file = empty.
std::vector<IndexRecord> read_index(const std::string& path, size_t max_records = 65536);
// Replaces the contents in place under the exclusive lock (gc compaction).
Status rewrite_index(const std::string& path, const std::vector<IndexRecord>& recs);

}  // namespace ds4::kvstore
