// types.cpp — the type table of src/quant/types.h.
#include "quant/types.h"

#include <cctype>
#include <string>

namespace ds4 {
namespace {
constexpr TypeTraits kTypes[] = {
    {GgmlType::F32, "f32", 1, 4},         {GgmlType::F16, "f16", 1, 2},
    {GgmlType::Q8_0, "q8_0", 32, 34},     {GgmlType::Q2_K, "q2_K", 256, 84},
    {GgmlType::Q4_K, "q4_K", 256, 144},   {GgmlType::Q8_K, "q8_K", 256, 292},
    {GgmlType::IQ2_XXS, "iq2_xxs", 256, 66}, {GgmlType::I32, "i32", 1, 4},
    {GgmlType::BF16, "bf16", 1, 2},
};
}  // namespace

std::optional<TypeTraits> type_traits(uint32_t id) {
  for (const auto& t : kTypes)
    if (static_cast<uint32_t>(t.type) == id) return t;
  return std::nullopt;
}

std::optional<GgmlType> type_from_name(std::string_view name) {
  std::string lower(name);
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const auto& t : kTypes) {
    std::string tn(t.name);
    for (auto& c : tn) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (tn == lower) return t.type;
  }
  return std::nullopt;
}

std::string_view type_name(GgmlType t) {
  auto tr = type_traits(static_cast<uint32_t>(t));
  return tr ? tr->name : std::string_view("unknown");
}

std::optional<uint64_t> type_bytes(GgmlType t, uint64_t n_elems) {
  auto tr = type_traits(static_cast<uint32_t>(t));
  if (!tr || n_elems % tr->block_elems != 0) return std::nullopt;
  uint64_t blocks = n_elems / tr->block_elems;
  if (blocks != 0 && tr->block_bytes > UINT64_MAX / blocks) return std::nullopt;
  return blocks * tr->block_bytes;
}

}  // namespace ds4
