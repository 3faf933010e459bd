// fuzz_kvstore.cpp — libFuzzer entry for the KV cache entry parser (entry_format.h).
//
// Properties checked on every input: parsing never crashes, hangs or over-allocates (ASan/UBSan
// and libFuzzer's -rss_limit_mb catch those); an accepted entry is internally consistent (section
// sizes match the header, the payload has its raw size); and re-building an image from the
// accepted entry gives back the input bytes exactly (so nothing unchecked can hide in a file that
// passes). A codec that expands data is bounded by ParseLimits. A violated property calls abort().
// tests/kvstore runs this entry with gcc over the seeds + random mutations.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kvstore/entry_format.h"

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_kvstore: property violated: %s\n", what);
    std::abort();
  }
}

// Codec 7: byte-wise XOR with 0x5a (size-preserving; lets the fuzzer reach the codec path).
class XorCodec final : public ds4::kvstore::PayloadCodec {
 public:
  uint32_t id() const override { return 7; }
  const char* name() const override { return "xor5a"; }
  ds4::Result<std::vector<uint8_t>> encode(std::span<const uint8_t> raw) const override {
    std::vector<uint8_t> out(raw.begin(), raw.end());
    for (auto& b : out) b ^= 0x5a;
    return out;
  }
  ds4::Status decode(std::span<const uint8_t> stored, std::span<uint8_t> raw) const override {
    if (stored.size() != raw.size()) return ds4::invalid_data("xor5a: size mismatch");
    for (size_t i = 0; i < raw.size(); ++i) raw[i] = stored[i] ^ 0x5a;
    return ds4::Status::Ok();
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ds4::kvstore;
  static const XorCodec kXor;  // stateless
  const PayloadCodec* codecs[] = {&kXor};
  ParseLimits limits;
  limits.max_payload_raw_bytes = uint64_t{64} << 20;  // keeps the fuzzer below its RSS limit
  auto e = parse_entry(std::span<const uint8_t>(data, size), codecs, limits);
  if (!e.ok()) {
    check(!e.status().message().empty(), "an error without a message");
    return 0;
  }
  const EntryHeader& h = e->header;
  check(e->text.size() == h.text_bytes, "text size differs from the header");
  check(e->tokens.size() == h.n_tokens && h.n_tokens > 0, "token count differs from the header");
  check(e->logits.size() == h.n_logits, "logit count differs from the header");
  check(e->payload.size() == h.payload_raw_bytes, "payload size differs from the header");
  std::vector<uint8_t> stored = e->payload;
  if (h.codec_id == 7) {
    auto enc = kXor.encode(e->payload);
    check(enc.ok(), "re-encoding failed");
    stored = std::move(enc).value();
  }
  std::vector<uint8_t> again = build_entry_image(h, e->text, e->tokens, e->logits, stored, e->payload.size());
  check(again.size() == size && std::memcmp(again.data(), data, size) == 0,
        "an accepted entry does not rebuild to the same bytes");
  return 0;
}
