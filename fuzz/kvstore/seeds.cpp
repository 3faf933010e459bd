// seeds.cpp — valid entries covering each section shape: minimal, text with UTF-8, many tokens,
// no logits, empty payload, an unaligned text length, a non-zero codec id (readable by the
// fuzz entry's test codec), every save reason.
#include "seeds.h"

#include "kvstore/entry_format.h"

namespace ds4::kvstore::fuzz {

namespace {
Seed make(const std::string& name, const std::string& text, size_t n_tokens, size_t n_logits, size_t payload,
          uint32_t codec, SaveReason reason) {
  EntryHeader h;
  h.engine_version = "ds4cpp-fuzz";
  h.model_fingerprint = sha256(name.data(), name.size());
  h.quant_family = 2;
  h.reason = reason;
  h.codec_id = codec;
  h.ctx = 4096;
  h.created_unix = 1764400000;
  h.key = sha256(text.data(), text.size());
  std::vector<int32_t> tokens(n_tokens);
  for (size_t i = 0; i < n_tokens; ++i) tokens[i] = static_cast<int32_t>(i * 7919 % 129280);
  std::vector<float> logits(n_logits);
  for (size_t i = 0; i < n_logits; ++i) logits[i] = static_cast<float>(i) * 0.25f - 3.0f;
  std::vector<uint8_t> raw(payload);
  for (size_t i = 0; i < payload; ++i) raw[i] = static_cast<uint8_t>(i * 31 + 7);
  // Codec 7 in the fuzz entry is a byte-wise XOR with 0x5a: stored = raw ^ 0x5a.
  std::vector<uint8_t> stored = raw;
  if (codec == 7)
    for (auto& b : stored) b ^= 0x5a;
  return {name, build_entry_image(h, text, tokens, logits, stored, raw.size())};
}
}  // namespace

std::vector<Seed> seed_images() {
  return {
      make("minimal", "a", 1, 0, 0, 0, SaveReason::unknown),
      make("utf8", "<｜User｜>系统 prompt", 5, 8, 64, 0, SaveReason::cold),
      make("tokens", std::string(300, 'x'), 200, 16, 256, 0, SaveReason::continued),
      make("unaligned", std::string(77, 'y'), 3, 3, 5, 0, SaveReason::evict),
      make("codec", "coded payload", 4, 4, 100, 7, SaveReason::shutdown),
  };
}

}  // namespace ds4::kvstore::fuzz
