// parse.h — the GGUF v3 parser behind gguf::File (internal to ds4_gguf).
//
// parse_image() turns an untrusted byte image into metadata records and a validated tensor
// directory; file.cpp owns the mapping and the lookup indices. Kept apart so the parser has one
// job: bytes in, checked structures (or a Status naming the byte offset) out.
#pragma once

#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gguf/gguf.h"

namespace ds4::gguf::detail {

inline constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
inline constexpr uint32_t kVersion = 3;
inline constexpr uint64_t kDefaultAlignment = 32;
inline constexpr int kMaxArrayDepth = 8;
inline constexpr uint32_t kMaxDims = 8;

struct ParsedImage {
  uint32_t version = 0;
  uint64_t alignment = kDefaultAlignment;
  uint64_t data_offset = 0;
  std::vector<KeyValue> metadata;    // file order, duplicates kept
  std::vector<TensorInfo> tensors;   // directory order; reserved once, never reallocated
  // Lookup indices; the views point into the two vectors above (so a ParsedImage is filled in
  // place and never copied). Metadata keys map to their first record.
  std::unordered_map<std::string_view, uint32_t> key_index;
  std::unordered_map<std::string_view, uint32_t> tensor_index;
};

Status parse_image(const uint8_t* base, uint64_t size, const OpenOptions& opts, ParsedImage* out);

// align_up(x, a) = x + (a - x % a) % a  (FORMATS.md §1.6); a > 0.
inline uint64_t align_up(uint64_t x, uint64_t a) { return x + (a - x % a) % a; }

// ggml's name for a type id, also for ids we do not implement ("q5_k"), or nullptr.
const char* ggml_type_id_name(uint32_t id);

}  // namespace ds4::gguf::detail
