// kv_test_util.h — shared helpers for the kvstore tests: a scratch directory, model identities,
// and synthetic checkpoints whose tokens/logits/payload are a pure function of their text, so any
// process can check that what a lookup returned belongs to the text it claims.
#pragma once

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "../common/temp_dir.h"
#include "kvstore/kvstore.h"

namespace ds4::kvstore::testing {

// ds4_kvstore_test_XXXXXX folders (tests/common/temp_dir.h).
struct TempDir : ds4::test_util::TempDir {
  TempDir() : ds4::test_util::TempDir("ds4_kvstore_test") {}
};

inline ModelIdentity identity(const std::string& model = "model-a", uint32_t quant = 2,
                              const std::string& engine = "ds4cpp-0.1.0/snap1") {
  ModelIdentity id;
  std::string_view parts[] = {model};
  id.fingerprint = ModelIdentity::fingerprint_of(parts);
  id.quant_family = quant;
  id.engine_version = engine;
  return id;
}

inline StoreOptions options(const std::string& dir, ModelIdentity id = identity()) {
  StoreOptions o;
  o.dir = dir;
  o.model = std::move(id);
  o.index_stride_bytes = 256;  // small, so short test prompts span several buckets
  o.fsync = false;             // tmpfs-speed tests; the publish protocol is the same
  return o;
}

// A checkpoint whose contents are derived from its text (and a salt for "different model" tests).
struct Checkpoint {
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<float> logits;
  std::vector<uint8_t> payload;

  SaveRequest request(SaveReason reason = SaveReason::cold, uint64_t ctx = 4096) const {
    SaveRequest r;
    r.text = text;
    r.tokens = tokens;
    r.logits = logits;
    r.payload = payload;
    r.reason = reason;
    r.ctx = ctx;
    return r;
  }
};

inline uint64_t text_seed(const std::string& text, uint64_t salt = 0) {
  Digest d = sha256(text.data(), text.size());
  uint64_t s;
  std::memcpy(&s, d.data(), 8);
  return s ^ salt;
}

inline Checkpoint make_checkpoint(const std::string& text, size_t payload_bytes = 4096, size_t n_logits = 64,
                                  uint64_t salt = 0) {
  Checkpoint c;
  c.text = text;
  std::mt19937_64 rng(text_seed(text, salt));
  const size_t n_tokens = std::max<size_t>(1, text.size() / 4);
  for (size_t i = 0; i < n_tokens; ++i) c.tokens.push_back(static_cast<int32_t>(rng() % 129280));
  for (size_t i = 0; i < n_logits; ++i) c.logits.push_back(static_cast<float>(static_cast<int64_t>(rng() % 2001) - 1000) / 37.0f);
  c.payload.resize(payload_bytes);
  for (auto& b : c.payload) b = static_cast<uint8_t>(rng());
  return c;
}

// Does a returned entry hold exactly what make_checkpoint(text) holds?
inline bool entry_matches(const Entry& e, size_t payload_bytes = 4096, size_t n_logits = 64, uint64_t salt = 0) {
  Checkpoint c = make_checkpoint(e.text, payload_bytes, n_logits, salt);
  return e.tokens == c.tokens && e.logits == c.logits && e.payload == c.payload;
}

// Deterministic pseudo-text of n bytes (ASCII words), prefix-stable for a given seed.
inline std::string words(size_t n, uint64_t seed) {
  static const char* kWords[] = {"the ", "tool ", "call ", "<think>", "user ", "agent ", "cache ", "prefix ",
                                 "\n", "系统 ", "KV ", "{\"a\":1} "};
  std::mt19937_64 rng(seed);
  std::string s;
  while (s.size() < n) s += kWords[rng() % (sizeof kWords / sizeof kWords[0])];
  s.resize(n);
  return s;
}

inline std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}
inline void write_file(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

}  // namespace ds4::kvstore::testing
