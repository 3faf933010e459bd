// prefix_cache.cpp — see prefix_cache.h.
#include "kv/prefix_cache.h"

#include <algorithm>
#include <cstring>

namespace ds4::kv {

namespace {
// 64-bit FNV-1a over the previous block hash and the block's token ids: cheap and well mixed for
// an in-process index. Collisions are harmless (tokens are compared before a hit).
uint64_t mix(uint64_t h, std::span<const TokenId> block) {
  auto feed = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  for (TokenId t : block) feed(static_cast<uint32_t>(t));
  return h;
}
}  // namespace

PrefixCache::PrefixCache(const PrefixCacheOptions& opts) : opts_(opts) {
  opts_.block_tokens = std::max<int64_t>(opts_.block_tokens, 1);
}

std::vector<uint64_t> PrefixCache::chain(std::span<const TokenId> tokens, int64_t blocks) const {
  std::vector<uint64_t> out;
  out.reserve(static_cast<size_t>(blocks));
  uint64_t h = 14695981039346656037ull;
  for (int64_t k = 0; k < blocks; ++k) {
    h = mix(h, tokens.subspan(static_cast<size_t>(k * opts_.block_tokens), static_cast<size_t>(opts_.block_tokens)));
    out.push_back(h);
  }
  return out;
}

PrefixLookup PrefixCache::lookup(std::span<const TokenId> tokens, int64_t limit) {
  PrefixLookup r;
  if (!enabled()) return r;
  ++stats_.lookups;
  limit = std::min<int64_t>(limit, static_cast<int64_t>(tokens.size()));
  const int64_t blocks = limit / opts_.block_tokens;
  const std::vector<uint64_t> h = chain(tokens, blocks);
  Lru::iterator best = lru_.end();
  for (int64_t k = blocks - 1; k >= 0 && (best == lru_.end() || r.shared_tokens == 0); --k) {
    const int64_t n = (k + 1) * opts_.block_tokens;
    auto [lo, hi] = by_block_.equal_range(h[static_cast<size_t>(k)]);
    for (auto it = lo; it != hi; ++it) {
      const Entry& e = *it->second;
      if (!std::equal(e.tokens.begin(), e.tokens.begin() + n, tokens.begin())) continue;  // collision
      if (r.shared_tokens == 0) r.shared_tokens = n;
      if (best == lru_.end() && static_cast<int64_t>(e.tokens.size()) == n) best = it->second;
    }
  }
  if (best != lru_.end()) {
    lru_.splice(lru_.begin(), lru_, best);  // most recently used; iterators stay valid
    r.hit_tokens = static_cast<int64_t>(best->tokens.size());
    r.payload = &best->payload;
    ++stats_.hits;
    stats_.hit_tokens += static_cast<uint64_t>(r.hit_tokens);
  }
  return r;
}

bool PrefixCache::contains(std::span<const TokenId> tokens, int64_t n) const {
  if (!enabled() || n <= 0 || n % opts_.block_tokens != 0 || n > static_cast<int64_t>(tokens.size())) return false;
  const std::vector<uint64_t> h = chain(tokens, n / opts_.block_tokens);
  auto [lo, hi] = by_block_.equal_range(h.back());
  for (auto it = lo; it != hi; ++it) {
    const Entry& e = *it->second;
    if (static_cast<int64_t>(e.tokens.size()) == n && std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin()))
      return true;
  }
  return false;
}

bool PrefixCache::insert(std::span<const TokenId> tokens, int64_t n, std::vector<uint8_t> payload) {
  if (!enabled() || n <= 0 || n % opts_.block_tokens != 0 || n > static_cast<int64_t>(tokens.size())) return false;
  if (contains(tokens, n)) return true;
  const uint64_t bytes = payload.size() + static_cast<uint64_t>(n) * sizeof(TokenId);
  if (bytes > opts_.max_bytes) return false;
  while (stats_.bytes + bytes > opts_.max_bytes && !lru_.empty()) {
    erase(std::prev(lru_.end()));
    ++stats_.evictions;
  }
  Entry e;
  e.tokens.assign(tokens.begin(), tokens.begin() + n);
  e.payload = std::move(payload);
  e.hashes = chain(tokens, n / opts_.block_tokens);
  e.bytes = bytes;
  lru_.push_front(std::move(e));
  for (uint64_t h : lru_.front().hashes) by_block_.emplace(h, lru_.begin());
  stats_.bytes += bytes;
  ++stats_.entries;
  ++stats_.inserts;
  return true;
}

void PrefixCache::erase(Lru::iterator it) {
  for (uint64_t h : it->hashes) {
    auto [lo, hi] = by_block_.equal_range(h);
    for (auto j = lo; j != hi; ++j) {
      if (j->second == it) {
        by_block_.erase(j);
        break;
      }
    }
  }
  stats_.bytes -= it->bytes;
  --stats_.entries;
  lru_.erase(it);
}

void PrefixCache::clear() {
  while (!lru_.empty()) erase(lru_.begin());
}

PrefixCacheStats PrefixCache::stats() const { return stats_; }

}  // namespace ds4::kv
