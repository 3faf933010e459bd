// unicode_class.h — the character classes the DeepSeek pre-tokenizer regexes use (TOKENIZER.md §4
// item 4), as one byte of flags per code point from a two-stage table generated from the Unicode
// database (gen_unicode_tables.js; Unicode version in kUnicodeVersion).
// Deliberately not here: normalization, case mapping, grapheme segmentation — none is needed.
#pragma once

#include <cstdint>

namespace ds4::tokenizer {

enum UcFlag : uint8_t {
  kUcL = 1,    // \p{L}  = Lu Ll Lt Lm Lo
  kUcM = 2,    // \p{M}  = Mn Mc Me
  kUcN = 4,    // \p{N}  = Nd Nl No
  kUcP = 8,    // \p{P}  = Pc Pd Ps Pe Pi Pf Po
  kUcS = 16,   // \p{S}  = Sm Sc Sk So
  kUcWS = 32,  // \s     = White_Space (Oniguruma/PCRE semantics; includes U+0085, excludes U+FEFF)
};

namespace unicode_detail {
// The generated two-stage table (unicode_tables.inc): stage1[cp >> 8] selects a 256-entry block.
extern const uint16_t kUcStage1[0x110000 >> 8];
extern const uint8_t kUcStage2[];
}  // namespace unicode_detail

// Flags of a scalar value (0 for unassigned, controls other than white space, surrogates, ...).
// Inline: it runs once per character of every encoded text.
inline uint8_t unicode_flags(uint32_t cp) {
  if (cp >= 0x110000) return 0;
  return unicode_detail::kUcStage2[uint32_t(unicode_detail::kUcStage1[cp >> 8]) * 256 + (cp & 255)];
}

// The Unicode version the table was generated from, e.g. "17.0".
const char* unicode_table_version();

}  // namespace ds4::tokenizer
