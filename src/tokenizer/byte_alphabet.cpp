// byte_alphabet.cpp — see byte_alphabet.h. The tables are computed at compile time.
#include "tokenizer/byte_alphabet.h"

#include <array>

#include "tokenizer/utf8.h"

namespace ds4::tokenizer {
namespace {

constexpr bool is_printable_byte(int b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  std::array<uint16_t, 256> to_cp{};        // byte -> code point (< 0x144)
  std::array<int16_t, 0x144> to_byte{};     // code point -> byte or -1
};

constexpr Tables make_tables() {
  Tables t{};
  for (auto& v : t.to_byte) v = -1;
  int next = 0x100;
  for (int b = 0; b < 256; ++b) {
    const int cp = is_printable_byte(b) ? b : next++;
    t.to_cp[b] = uint16_t(cp);
    t.to_byte[cp] = int16_t(b);
  }
  return t;
}

constexpr Tables kTables = make_tables();
static_assert(kTables.to_cp[0x20] == 0x120 && kTables.to_cp[0xAD] == 0x143 && kTables.to_cp[0x7F] == 0x121);

}  // namespace

uint32_t byte_to_codepoint(uint8_t b) { return kTables.to_cp[b]; }

int codepoint_to_byte(uint32_t cp) { return cp < kTables.to_byte.size() ? kTables.to_byte[cp] : -1; }

void append_byte_level(std::string& out, std::string_view raw) {
  for (unsigned char c : raw) utf8_append(out, kTables.to_cp[c]);
}

std::string byte_level_to_bytes(std::string_view text, bool* all_mapped) {
  std::string out;
  bool ok = true;
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  const auto* end = p + text.size();
  while (p < end) {
    uint32_t cp;
    const int n = utf8_decode(p, end, cp);
    if (n == 0) { ok = false; ++p; continue; }
    p += n;
    const int b = codepoint_to_byte(cp);
    if (b < 0) { ok = false; continue; }
    out.push_back(char(b));
  }
  if (all_mapped) *all_mapped = ok;
  return out;
}

}  // namespace ds4::tokenizer
