// utf8.cpp — see utf8.h.
#include "tokenizer/utf8.h"

namespace ds4::tokenizer {

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

bool utf8_valid(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const auto* end = p + s.size();
  while (p < end) {
    uint32_t cp;
    const int n = utf8_decode(p, end, cp);
    if (n == 0) return false;
    p += n;
  }
  return true;
}

namespace {

// How many continuation bytes a lead byte needs and the allowed range of the first one
// (WHATWG "UTF-8 decoder" bounds). Returns false for bytes that can never start a sequence.
bool lead_info(uint8_t b0, int& need, uint8_t& lo, uint8_t& hi) {
  lo = 0x80;
  hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) { need = 1; return true; }
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
    return true;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
    return true;
  }
  return false;
}

// Length of the maximal prefix of a sequence starting at p that is still a valid beginning
// (1 = the lead byte only), capped at the full length; sets complete when it is a whole sequence.
size_t valid_prefix(const uint8_t* p, const uint8_t* end, bool& complete) {
  int need;
  uint8_t lo, hi;
  complete = false;
  if (!lead_info(p[0], need, lo, hi)) return 0;
  size_t n = 1;
  for (int i = 0; i < need; ++i) {
    if (p + n >= end) return n;
    const uint8_t b = p[n];
    const uint8_t l = i == 0 ? lo : 0x80, h = i == 0 ? hi : 0xBF;
    if (b < l || b > h) return n;
    ++n;
  }
  complete = true;
  return n;
}

}  // namespace

std::string utf8_sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const auto* end = p + s.size();
  while (p < end) {
    if (*p < 0x80) {
      out.push_back(char(*p++));
      continue;
    }
    bool complete;
    const size_t n = valid_prefix(p, end, complete);
    if (complete) {
      out.append(reinterpret_cast<const char*>(p), n);
      p += n;
    } else {
      out.append("\xEF\xBF\xBD");
      p += n == 0 ? 1 : n;  // the offending byte is reprocessed as a new start
    }
  }
  return out;
}

size_t utf8_stream_safe_len(std::string_view s) {
  const auto* b = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  // Only the last 3 bytes can hold an incomplete-but-valid prefix of a 4-byte sequence.
  const size_t start = n > 3 ? n - 3 : 0;
  for (size_t i = start; i < n; ++i) {
    if (b[i] < 0xC2 || b[i] > 0xF4) continue;  // not a lead byte
    bool complete;
    const size_t len = valid_prefix(b + i, b + n, complete);
    if (!complete && i + len == n) return i;  // runs to the end and could still be completed
  }
  return n;
}

}  // namespace ds4::tokenizer
