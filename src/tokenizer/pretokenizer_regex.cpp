// pretokenizer_regex.cpp — see pretokenizer_regex.h.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pretokenizer_regex.h"

#include <pcre2.h>

#include <cstdio>

#include "tokenizer/unicode_class.h"
#include "tokenizer/utf8.h"

namespace ds4::tokenizer {

const std::string_view RegexPretokenizer::kPatterns[3] = {
    R"(\p{N}{1,3})",
    "[一-龥぀-ゟ゠-ヿ]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
};

namespace {

// "\x{a}-\x{b}..." for every code point whose flags intersect `mask`.
std::string class_ranges(uint8_t mask) {
  std::string out;
  char buf[40];
  uint32_t cp = 0;
  while (cp < 0x110000) {
    if (!(unicode_flags(cp) & mask)) { ++cp; continue; }
    const uint32_t lo = cp;
    while (cp + 1 < 0x110000 && (unicode_flags(cp + 1) & mask)) ++cp;
    if (lo == cp) std::snprintf(buf, sizeof buf, "\\x{%x}", lo);
    else std::snprintf(buf, sizeof buf, "\\x{%x}-\\x{%x}", lo, cp);
    out += buf;
    ++cp;
  }
  return out;
}

}  // namespace

Result<std::string> RegexPretokenizer::expand_classes(std::string_view p) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char n = p[i + 1];
      std::string ranges;
      bool negate = false;
      if (n == 'p' && i + 2 < p.size() && p[i + 2] == '{') {
        const size_t close = p.find('}', i);
        if (close == std::string_view::npos) return invalid_argument("regex: unterminated \\p{");
        const std::string_view name = p.substr(i + 3, close - i - 3);
        uint8_t mask = 0;
        if (name == "L") mask = kUcL;
        else if (name == "M") mask = kUcM;
        else if (name == "N") mask = kUcN;
        else if (name == "P") mask = kUcP;
        else if (name == "S") mask = kUcS;
        else return invalid_argument("regex: unsupported property \\p{" + std::string(name) + "}");
        ranges = class_ranges(mask);
        i = close;
      } else if (n == 's' || n == 'S') {
        ranges = class_ranges(kUcWS);
        negate = n == 'S';
        if (negate && in_class) return invalid_argument("regex: \\S inside a class is not supported");
        ++i;
      } else {
        out += c;
        out += n;
        ++i;
        continue;
      }
      out += in_class ? ranges : (negate ? "[^" : "[") + ranges + "]";
      continue;
    }
    if (c == '[' && !in_class) in_class = true;
    else if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

struct RegexPretokenizer::Impl {
  pcre2_code* code[3] = {nullptr, nullptr, nullptr};
  bool jit[3] = {false, false, false};
  ~Impl() {
    for (pcre2_code* c : code) pcre2_code_free(c);
  }
};

RegexPretokenizer::RegexPretokenizer() : impl_(std::make_unique<Impl>()) {}
RegexPretokenizer::~RegexPretokenizer() = default;
RegexPretokenizer::RegexPretokenizer(RegexPretokenizer&&) noexcept = default;
RegexPretokenizer& RegexPretokenizer::operator=(RegexPretokenizer&&) noexcept = default;

Result<RegexPretokenizer> RegexPretokenizer::create() {
  RegexPretokenizer r;
  for (int k = 0; k < 3; ++k) {
    DS4_ASSIGN_OR_RETURN(std::string pat, expand_classes(kPatterns[k]));
    int err = 0;
    PCRE2_SIZE off = 0;
    r.impl_->code[k] = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.data()), pat.size(),
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &off, nullptr);
    if (!r.impl_->code[k]) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      return internal_error("regex " + std::to_string(k + 1) + ": " + reinterpret_cast<char*>(msg) +
                            " at offset " + std::to_string(off));
    }
    r.impl_->jit[k] = pcre2_jit_compile(r.impl_->code[k], PCRE2_JIT_COMPLETE) == 0;
  }
  return r;
}

Result<std::vector<std::string_view>> RegexPretokenizer::split(std::string_view text) const {
  if (!utf8_valid(text)) return invalid_argument("regex pre-tokenizer: text is not well-formed UTF-8");
  std::vector<std::string_view> pieces = {text}, next;
  if (text.empty()) return std::vector<std::string_view>{};
  // Match data per call keeps split() const and thread-safe.
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> md(pcre2_match_data_create(4, nullptr),
                                                                    pcre2_match_data_free);
  if (!md) return out_of_memory("regex: match data");
  for (int k = 0; k < 3; ++k) {
    next.clear();
    for (std::string_view piece : pieces) {
      // Isolated split: the piece is the whole subject, so lookahead stops at its end.
      const auto* s = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t start = 0, gap = 0;
      while (start < piece.size()) {
        const int rc = impl_->jit[k]
                           ? pcre2_jit_match(impl_->code[k], s, piece.size(), start, 0, md.get(), nullptr)
                           : pcre2_match(impl_->code[k], s, piece.size(), start, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) return internal_error("regex " + std::to_string(k + 1) + ": match error " + std::to_string(rc));
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
        if (ov[1] == ov[0]) return internal_error("regex: empty match");  // impossible with these patterns
        if (ov[0] > gap) next.push_back(piece.substr(gap, ov[0] - gap));
        next.push_back(piece.substr(ov[0], ov[1] - ov[0]));
        start = gap = ov[1];
      }
      if (gap < piece.size()) next.push_back(piece.substr(gap));
    }
    pieces.swap(next);
  }
  return pieces;
}

}  // namespace ds4::tokenizer
