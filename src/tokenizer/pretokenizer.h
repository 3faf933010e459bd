// pretokenizer.h — the DeepSeek V3/V4 pre-tokenizer (TOKENIZER.md §4): three "Isolated" regex
// splits applied in sequence, P1 = \p{N}{1,3}, P2 = [\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+,
// P3 = [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+ | [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
//      |  ?[\p{P}\p{S}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+
// implemented as hand-written scanners with the exact first-alternative-wins / greedy-backtracking
// semantics of those regexes (each alternative's derivation is commented in match_p3), over Unicode
// scalar values classified by unicode_class.h. Pieces of an earlier split are hard boundaries.
//
// Invalid UTF-8: each byte that does not start a well-formed sequence is one symbol with no class
// (not a letter, number, mark, punctuation, symbol or space), as TOKENIZER.md §4 advises. It can
// therefore only be the optional prefix of alternative 2 or part of an unmatched gap.
//
// Header-only (templated on the callback) because it is the innermost loop of encode().
// Deliberately not here: byte-level mapping and BPE (bpe.h), special-token matching.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/unicode_class.h"
#include "tokenizer/utf8.h"

namespace ds4::tokenizer {
namespace pretok_detail {

constexpr uint32_t kInvalid = 0xFFFFFFFFu;  // cp of an invalid byte

struct Ch {
  uint32_t cp;
  uint8_t len;
  uint8_t fl;
};

inline Ch char_at(const uint8_t* p, const uint8_t* end) {
  if (*p < 0x80) return {*p, 1, unicode_flags(*p)};
  uint32_t cp;
  const int n = utf8_decode(p, end, cp);
  if (n == 0) return {kInvalid, 1, 0};
  return {cp, uint8_t(n), unicode_flags(cp)};
}

inline bool is_crlf(uint32_t cp) { return cp == '\r' || cp == '\n'; }
inline bool is_ascii_letter(uint8_t b) { return (b | 0x20) >= 'a' && (b | 0x20) <= 'z'; }
// The ASCII set of P3's first alternative: !"#$%&'()*+,-./:;<=>?@[\]^_`{|}~
inline bool is_ascii_punct(uint32_t cp) {
  return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) ||
         (cp >= 0x7B && cp <= 0x7E);
}
inline bool is_p2(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FA5) || (cp >= 0x3040 && cp <= 0x30FF);
}

// End of the maximal run starting at p of characters having any of the flags.
inline const uint8_t* run_of(const uint8_t* p, const uint8_t* e, uint8_t flags) {
  while (p < e) {
    const Ch c = char_at(p, e);
    if (!(c.fl & flags)) break;
    p += c.len;
  }
  return p;
}

inline const uint8_t* run_crlf(const uint8_t* p, const uint8_t* e) {
  while (p < e && (*p == '\r' || *p == '\n')) ++p;
  return p;
}

// P3 at p (c = the character at p) within the piece ending at e: end of the match, or nullptr.
inline const uint8_t* match_p3(const uint8_t* p, const uint8_t* e, const Ch& c) {
  const uint8_t* q = p + c.len;
  // (1) [ASCII punct][A-Za-z]+
  if (is_ascii_punct(c.cp) && q < e && is_ascii_letter(*q)) {
    while (q < e && is_ascii_letter(*q)) ++q;
    return q;
  }
  // (2) [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+ — greedy optional prefix first; if the letter run
  // cannot follow it, backtrack to no prefix (then c itself must start the run).
  const bool prefix_ok = !is_crlf(c.cp) && !(c.fl & (kUcL | kUcP | kUcS));
  if (prefix_ok && q < e) {
    const Ch n = char_at(q, e);
    if (n.fl & (kUcL | kUcM)) return run_of(q + n.len, e, kUcL | kUcM);
  }
  if (c.fl & (kUcL | kUcM)) return run_of(q, e, kUcL | kUcM);
  // (3) " ?[\p{P}\p{S}]+[\r\n]*"
  if (c.cp == ' ' && q < e) {
    const Ch n = char_at(q, e);
    if (n.fl & (kUcP | kUcS)) return run_crlf(run_of(q, e, kUcP | kUcS), e);
  }
  if (c.fl & (kUcP | kUcS)) return run_crlf(run_of(q, e, kUcP | kUcS), e);
  if (!(c.fl & kUcWS)) return nullptr;
  // Whitespace run [p, r): last_nl_end = end of its last CR/LF; last_start = start of its last char.
  const uint8_t* r = p;
  const uint8_t* last_nl_end = nullptr;
  const uint8_t* last_start = p;
  while (r < e) {
    const Ch d = char_at(r, e);
    if (!(d.fl & kUcWS)) break;
    if (is_crlf(d.cp)) last_nl_end = r + 1;
    last_start = r;
    r += d.len;
  }
  // (4) \s*[\r\n]+ : \s* gives back characters until [\r\n]+ can start, i.e. at the run's last
  // CR/LF; the [\r\n]+ then ends right after it (the next char is not CR/LF, or not white space).
  if (last_nl_end) return last_nl_end;
  // (5) \s+(?!\S) : the whole run if it ends the piece; else all but its last character (which is
  // followed by non-space), provided that leaves at least one.
  if (r == e) return r;
  if (last_start > p) return last_start;
  // (6) \s+
  return r;
}

// Isolated split of [b, e) by P3.
template <class F>
inline void split_p3(const uint8_t* b, const uint8_t* e, F& emit) {
  const uint8_t* p = b;
  const uint8_t* gap = b;
  while (p < e) {
    const Ch c = char_at(p, e);
    const uint8_t* m = match_p3(p, e, c);
    if (!m) {
      p += c.len;
      continue;
    }
    if (gap < p) emit(gap, p);
    emit(p, m);
    p = gap = m;
  }
  if (gap < e) emit(gap, e);
}

// Isolated split of [b, e) by P2, each piece then split by P3.
template <class F>
inline void split_p2(const uint8_t* b, const uint8_t* e, F& emit) {
  const uint8_t* p = b;
  const uint8_t* gap = b;
  while (p < e) {
    Ch c = char_at(p, e);
    if (!is_p2(c.cp)) {
      p += c.len;
      continue;
    }
    const uint8_t* m = p + c.len;
    while (m < e) {
      c = char_at(m, e);
      if (!is_p2(c.cp)) break;
      m += c.len;
    }
    if (gap < p) split_p3(gap, p, emit);
    split_p3(p, m, emit);
    p = gap = m;
  }
  if (gap < e) split_p3(gap, e, emit);
}

}  // namespace pretok_detail

// Calls emit(const uint8_t* begin, const uint8_t* end) for every pre-token piece of text, in order.
// The pieces tile the text exactly (nothing dropped, none empty).
template <class F>
inline void pretokenize(std::string_view text, F&& emit) {
  using namespace pretok_detail;
  const auto* b = reinterpret_cast<const uint8_t*>(text.data());
  const auto* e = b + text.size();
  const uint8_t* p = b;
  const uint8_t* gap = b;
  // P1: \p{N}{1,3}. A matched number piece passes P2 and P3 unchanged (no number is in P2's ranges,
  // and P3 matches nothing inside a pure-number piece), so it is emitted directly.
  while (p < e) {
    Ch c = char_at(p, e);
    if (!(c.fl & kUcN)) {
      p += c.len;
      continue;
    }
    const uint8_t* m = p + c.len;
    for (int k = 1; k < 3 && m < e; ++k) {
      c = char_at(m, e);
      if (!(c.fl & kUcN)) break;
      m += c.len;
    }
    if (gap < p) split_p2(gap, p, emit);
    emit(p, m);
    p = gap = m;
  }
  if (gap < e) split_p2(gap, e, emit);
}

// Convenience for tests and tools: the pieces as views into text.
std::vector<std::string_view> pretokenize_pieces(std::string_view text);

}  // namespace ds4::tokenizer
