// pretokenizer_regex.h — reference pre-tokenizer: the three official Split regexes of DeepSeek's
// tokenizer.json (TOKENIZER.md §4), verbatim, run by PCRE2 (UTF + UCP, JIT) with Isolated-split
// semantics. It exists to prove that the hand-written scanner of pretokenizer.h implements exactly
// those regexes (alternation order, greedy backtracking, the (?!\S) lookahead, piece boundaries);
// tests compare both over the whole corpus. Not used by encode(): the scanner is several times
// faster and also defines the invalid-UTF-8 behaviour.
//
// Unicode data: \p{L}, \p{M}, \p{N}, \p{P}, \p{S} and \s/\S are rewritten into explicit code point
// classes taken from unicode_class.h before compiling, so both implementations use one Unicode
// version (the system PCRE2's built-in tables are older) and \s is White_Space.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ds4/status.h"

namespace ds4::tokenizer {

class RegexPretokenizer {
 public:
  ~RegexPretokenizer();
  RegexPretokenizer(RegexPretokenizer&&) noexcept;
  RegexPretokenizer& operator=(RegexPretokenizer&&) noexcept;

  // Compiles the three patterns (errors carry PCRE2's message and offset).
  static Result<RegexPretokenizer> create();
  // Pieces of text (must be well-formed UTF-8; invalid_argument otherwise).
  Result<std::vector<std::string_view>> split(std::string_view text) const;

  // The official patterns as written in tokenizer.json (after JSON unescaping).
  static const std::string_view kPatterns[3];
  // A pattern with its property escapes rewritten into explicit classes (exposed for tests).
  static Result<std::string> expand_classes(std::string_view pattern);

 private:
  RegexPretokenizer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds4::tokenizer
