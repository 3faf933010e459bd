// unicode_class.cpp — see unicode_class.h. The generated tables are constant data.
#include "tokenizer/unicode_class.h"

#include <cstddef>

namespace ds4::tokenizer {
namespace {
#include "tokenizer/unicode_tables.inc"
}  // namespace

uint8_t unicode_flags(uint32_t cp) {
  if (cp >= 0x110000) return 0;
  return kUcStage2[std::size_t(kUcStage1[cp >> 8]) * 256 + (cp & 255)];
}

const char* unicode_table_version() { return kUnicodeVersion; }

}  // namespace ds4::tokenizer
