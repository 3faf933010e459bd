// prefix_cache.h — the cross-session prefix cache: saved session states (opaque snapshot bytes) of
// token prefixes, found again by a later request whose prompt starts with the same tokens.
//
// Keys: a prefix is cached only at a multiple of `block_tokens` (128 by default: the lcm of the
// compress ratios 4 and 128, MODEL.md §10). At such a boundary every compressed and indexer row of
// the prefix is complete, the ratio-128 compressor frontier is empty and the ratio-4 one holds just
// the previous block, so the state depends only on those tokens and the saved state is small and
// canonical. Each block boundary k has a chained hash h_k = H(h_{k-1}, tokens of block k); entries
// are indexed by the hash of every block they contain, so a lookup finds both the longest cached
// prefix it can restore (an entry that ends exactly at one of its boundaries) and the longest prefix
// it shares with any entry (a branch point worth saving: the second user of a shared system prompt
// saves it, the third restores it). Token ids are compared in full before a hit is reported, so a
// hash collision is a miss, never a wrong answer.
// Eviction: least recently used entries go first when the byte budget is exceeded (the one place
// entries are dropped).
// Deliberately not here: what the payload means (runtime snapshots), when to save (the worker).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "ds4/tokens.h"

namespace ds4::kv {

struct PrefixCacheOptions {
  int64_t block_tokens = 128;
  uint64_t max_bytes = 0;  // payload + token bytes of all entries; 0 = cache disabled
};

struct PrefixCacheStats {
  uint64_t lookups = 0, hits = 0, hit_tokens = 0, inserts = 0, evictions = 0;
  uint64_t entries = 0, bytes = 0;
};

struct PrefixLookup {
  int64_t hit_tokens = 0;                         // longest restorable prefix (0 = miss)
  const std::vector<uint8_t>* payload = nullptr;  // its saved state (valid until the next insert)
  int64_t shared_tokens = 0;                      // longest block-aligned prefix shared with any entry
};

class PrefixCache {
 public:
  explicit PrefixCache(const PrefixCacheOptions& opts);
  bool enabled() const { return opts_.max_bytes > 0; }
  int64_t block_tokens() const { return opts_.block_tokens; }

  // Longest cached prefix of tokens[0, limit) (limit <= tokens.size()); counts a hit or a miss.
  PrefixLookup lookup(std::span<const TokenId> tokens, int64_t limit);
  // True when exactly tokens[0, n) is cached.
  bool contains(std::span<const TokenId> tokens, int64_t n) const;
  // Saves the state after tokens[0, n): n must be a positive multiple of block_tokens. Evicts least
  // recently used entries to stay within max_bytes; an entry larger than the whole budget is not
  // stored (returns false).
  bool insert(std::span<const TokenId> tokens, int64_t n, std::vector<uint8_t> payload);
  void clear();

  PrefixCacheStats stats() const;

 private:
  struct Entry {
    std::vector<TokenId> tokens;  // the prefix itself (n tokens)
    std::vector<uint8_t> payload;
    std::vector<uint64_t> hashes;  // chained hash of each of its blocks
    uint64_t bytes = 0;
  };
  using Lru = std::list<Entry>;  // front = most recently used
  std::vector<uint64_t> chain(std::span<const TokenId> tokens, int64_t blocks) const;
  void erase(Lru::iterator it);

  PrefixCacheOptions opts_;
  Lru lru_;
  // hash of blocks [0, k] -> entries containing that prefix (and whether one ends exactly there).
  std::unordered_multimap<uint64_t, Lru::iterator> by_block_;
  PrefixCacheStats stats_;
};

}  // namespace ds4::kv
