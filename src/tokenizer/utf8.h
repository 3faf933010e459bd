// utf8.h — strict UTF-8 decoding, WHATWG-style repair, and the "stream-safe" prefix length.
//
// Strict means: no overlong forms, no surrogates (U+D800..DFFF), nothing above U+10FFFF — the same
// set of well-formed sequences as the Unicode standard and the WHATWG/Node TextDecoder. Repair
// (utf8_sanitize) replaces each maximal ill-formed subpart with U+FFFD exactly like TextDecoder
// (fatal=false), which is how the JS tokenizer oracle sees invalid input.
// Deliberately not here: Unicode properties (unicode_class.h), normalization (none is applied).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ds4::tokenizer {

// Decodes one scalar value at p (p < end). Returns its length 1..4 and sets cp; returns 0 when the
// bytes at p do not start a well-formed sequence (the caller treats one byte as invalid).
inline int utf8_decode(const uint8_t* p, const uint8_t* end, uint32_t& cp) {
  const uint8_t b0 = p[0];
  if (b0 < 0x80) { cp = b0; return 1; }
  const ptrdiff_t avail = end - p;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    if (avail < 2 || (p[1] & 0xC0) != 0x80) return 0;
    cp = (uint32_t(b0 & 0x1F) << 6) | (p[1] & 0x3F);
    return 2;
  }
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (avail < 3) return 0;
    const uint8_t lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
    if (p[1] < lo || p[1] > hi || (p[2] & 0xC0) != 0x80) return 0;
    cp = (uint32_t(b0 & 0x0F) << 12) | (uint32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    return 3;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (avail < 4) return 0;
    const uint8_t lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
    if (p[1] < lo || p[1] > hi || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return 0;
    cp = (uint32_t(b0 & 0x07) << 18) | (uint32_t(p[1] & 0x3F) << 12) | (uint32_t(p[2] & 0x3F) << 6) |
         (p[3] & 0x3F);
    return 4;
  }
  return 0;
}

// Appends the UTF-8 encoding of a scalar value (cp must be a valid scalar).
void utf8_append(std::string& out, uint32_t cp);

// True when the whole string is well-formed UTF-8.
bool utf8_valid(std::string_view s);

// Replaces every maximal ill-formed subpart with U+FFFD (WHATWG "replacement" decoding, identical to
// Node's TextDecoder('utf-8')), so the result is always well-formed.
std::string utf8_sanitize(std::string_view s);

// Length of the longest prefix of s that does not end inside a sequence that could still be
// completed by more bytes. The remaining tail (0..3 bytes) is a proper prefix of a well-formed
// sequence; everything before it is final (complete characters or bytes that can never be valid).
size_t utf8_stream_safe_len(std::string_view s);

}  // namespace ds4::tokenizer
