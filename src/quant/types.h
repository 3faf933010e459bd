// types.h — ggml tensor element types used by the DeepSeek V4 GGUFs: ids, block geometry, sizes.
//
// The ids are the on-disk ggml_type values (FORMATS.md §2.1). Only geometry lives here; block
// layouts, dequantization, dot products and quantizers are in the other src/quant files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace ds4 {

enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q8_0 = 8,
  Q2_K = 10,
  Q4_K = 12,
  Q8_K = 15,  // activation-side blocks only (never stored in the model files)
  IQ2_XXS = 16,
  I32 = 26,
  BF16 = 30,
};

struct TypeTraits {
  GgmlType type;
  std::string_view name;  // "f32", "q8_0", ... (lower case, as ggml prints them)
  uint32_t block_elems;   // values per block (1 for scalar types)
  uint32_t block_bytes;   // bytes per block
};

// Traits of a known type; nullopt for ids we do not implement (the GGUF reader reports those
// as "unsupported tensor type N" rather than guessing a size).
std::optional<TypeTraits> type_traits(uint32_t ggml_type_id);
std::optional<GgmlType> type_from_name(std::string_view name);  // accepts "Q8_0" and "q8_0"
std::string_view type_name(GgmlType t);

// Bytes needed for `n_elems` values; nullopt if n_elems is not a whole number of blocks or overflows.
std::optional<uint64_t> type_bytes(GgmlType t, uint64_t n_elems);

}  // namespace ds4
