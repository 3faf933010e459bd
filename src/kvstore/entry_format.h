// entry_format.h — the on-disk layout of one cache entry file (<key>.kv) and its parser.
//
// File (all integers little-endian):
//   [0, 512)        header (below), ending with SHA-256 of its first 480 bytes
//   text            rendered prefix bytes (the key's preimage, human-inspectable)       [text_bytes]
//   tokens          exact token ids, int32                                               [n_tokens]
//   logits          next-token logits after the prefix, f32                              [n_logits]
//   payload         session snapshot bytes as stored by the codec                        [payload_stored_bytes]
// Each section starts at a 64-byte aligned offset; padding is zero; the file ends right after the
// payload. Every section has a SHA-256 in the header; the header has its own SHA-256, so a flipped
// bit anywhere is detected before anything is returned.
//
// Header fields (offset: type name):
//   0: char[8] magic "DS4KVC\0\1"   8: u32 format_version (1)   12: u32 header_bytes (512)
//   16: char[32] engine_version (NUL padded)   48: u8[32] model_fingerprint   80: u32 quant_family
//   84: u32 save_reason   88: u32 codec_id   92: u32 flags (0)   96: u64 ctx   104: u64 n_tokens
//   112: u64 text_bytes   120: u64 n_logits   128: u64 payload_raw_bytes   136: u64 payload_stored_bytes
//   144: u64 created_unix   152: u8[32] key   184/216/248/280: u8[32] SHA-256 of text/tokens/logits/payload
//   312..479: reserved, zero   480: u8[32] SHA-256 of bytes [0, 480)
//
// Deliberately not here: file names, locking, model compatibility policy (store.cpp decides what a
// mismatch means); this file only turns bytes into a validated Entry or a Status saying why not.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "ds4/status.h"
#include "kvstore/codec.h"
#include "kvstore/save_policy.h"
#include "kvstore/sha256.h"

namespace ds4::kvstore {

inline constexpr uint32_t kFormatVersion = 1;
inline constexpr size_t kHeaderBytes = 512;
inline constexpr size_t kEngineVersionBytes = 32;

struct EntryHeader {
  uint32_t format_version = kFormatVersion;
  std::string engine_version;  // <= 32 bytes
  Digest model_fingerprint{};
  uint32_t quant_family = 0;
  SaveReason reason = SaveReason::unknown;
  uint32_t codec_id = 0;
  uint64_t ctx = 0;  // context limit of the session that wrote it
  uint64_t n_tokens = 0, text_bytes = 0, n_logits = 0;
  uint64_t payload_raw_bytes = 0, payload_stored_bytes = 0;
  uint64_t created_unix = 0;
  Digest key{};  // SHA-256(namespace salt || text): also the file name
  Digest text_sha{}, tokens_sha{}, logits_sha{}, payload_sha{};
};

struct EntryLayout {
  uint64_t text_off = 0, tokens_off = 0, logits_off = 0, payload_off = 0, end = 0;
};
// Offsets of the sections; the caller has checked the sizes are sane (parse_header does).
EntryLayout layout_of(const EntryHeader& h);

std::array<uint8_t, kHeaderBytes> encode_header(const EntryHeader& h);

// Bounds that keep a hostile header from making us allocate or loop without end. The sizes are
// also checked against the real file size, so these only matter for codecs that expand data.
struct ParseLimits {
  uint64_t max_tokens = uint64_t{1} << 24;        // 16M tokens
  uint64_t max_logits = uint64_t{1} << 22;        // vocab 129280 with headroom
  uint64_t max_payload_raw_bytes = uint64_t{1} << 40;
};

// Validates magic, version, header checksum, reserved bytes and that the layout ends exactly at
// `file_size`. Errors are invalid_data (damaged/hostile) or unsupported (a newer format version).
Result<EntryHeader> parse_header(std::span<const uint8_t> header_bytes, uint64_t file_size,
                                 const ParseLimits& limits = {});

struct Entry {
  EntryHeader header;
  std::string text;
  std::vector<int32_t> tokens;   // [n_tokens]
  std::vector<float> logits;     // [n_logits]
  std::vector<uint8_t> payload;  // [payload_raw_bytes], decoded
};

// Reads `n` bytes at `offset` of the entry into `dst`; returns io_error/invalid_data on a short read.
using ReadAt = std::function<Status(uint64_t offset, void* dst, size_t n)>;

// Reads the sections of an entry whose header was accepted, verifies every checksum and the zero
// padding, and decodes the payload with the matching codec (identity is always known; an unknown
// codec id gives `unsupported`). Nothing is returned unless everything verified.
Result<Entry> read_entry_body(const EntryHeader& h, const ReadAt& read, std::span<const PayloadCodec* const> codecs,
                              const ParseLimits& limits = {});

// Whole-image parse (the fuzz entry and tests use it; the store reads files with read_entry_body).
Result<Entry> parse_entry(std::span<const uint8_t> image, std::span<const PayloadCodec* const> codecs = {},
                          const ParseLimits& limits = {});

// Builds a complete entry image in memory (seeds, tests). Fills the header's lengths and digests;
// `h.key` and the identity fields are taken as given. `stored_payload` is already codec-encoded.
std::vector<uint8_t> build_entry_image(EntryHeader h, std::string_view text, std::span<const int32_t> tokens,
                                       std::span<const float> logits, std::span<const uint8_t> stored_payload,
                                       uint64_t payload_raw_bytes);
// Fills lengths and section digests of `h` for the given sections (used by the writer too).
void fill_section_digests(EntryHeader& h, std::string_view text, std::span<const int32_t> tokens,
                          std::span<const float> logits, std::span<const uint8_t> stored_payload,
                          uint64_t payload_raw_bytes);

}  // namespace ds4::kvstore
