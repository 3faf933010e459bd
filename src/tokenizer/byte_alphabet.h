// byte_alphabet.h — GPT-2 bytes_to_unicode (TOKENIZER.md §3): the 256 bytes <-> 256 code points
// in which byte-level BPE tokens and merges are written.
// Printable bytes 0x21-0x7E, 0xA1-0xAC, 0xAE-0xFF map to themselves; the other 68 bytes map in
// increasing order to U+0100..U+0143. Pure functions over constant tables; no state.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ds4::tokenizer {

// Code point representing byte b.
uint32_t byte_to_codepoint(uint8_t b);
// Byte represented by code point cp, or -1 when cp is outside the alphabet.
int codepoint_to_byte(uint32_t cp);

// Appends the byte-level form (UTF-8 of the mapped code points) of raw bytes.
void append_byte_level(std::string& out, std::string_view raw);
// Inverse: raw bytes of a byte-level string. Code points outside the alphabet (and invalid UTF-8)
// are dropped, as ds4 does (TOKENIZER.md §7). Sets *all_mapped = false when anything was dropped.
std::string byte_level_to_bytes(std::string_view text, bool* all_mapped = nullptr);

}  // namespace ds4::tokenizer
