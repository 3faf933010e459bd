// layout.h — the writer's plan: encoded header/metadata/directory bytes and every tensor's place
// (internal to ds4_gguf).
//
// build_layout() validates what the caller asked for (value types vs their payloads, nesting,
// tensor names/dims/types, alignment) and encodes everything before the data section, so the
// streaming part of the writer only has to copy payloads. Deliberately no I/O here.
#pragma once

#include <cstdint>
#include <vector>

#include "gguf/gguf.h"

namespace ds4::gguf::detail {

struct Layout {
  std::vector<uint8_t> head;      // header + metadata + directory (zero padding not included)
  uint64_t data_offset = 0;       // align_up(head.size(), alignment)
  std::vector<uint64_t> offsets;  // [n_tensors] relative to data_offset, multiples of alignment
  std::vector<uint64_t> sizes;    // [n_tensors] payload bytes (without padding)
  uint64_t alignment = 32;
  uint64_t total_size = 0;        // data_offset + sum of padded payloads
};

Status build_layout(const std::vector<KeyValue>& metadata, const std::vector<TensorSpec>& tensors,
                    uint64_t alignment, Layout* out);

}  // namespace ds4::gguf::detail
