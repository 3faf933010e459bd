// text_util.h — small text helpers the server needs on generated and received text: UTF-8 validation,
// holding back an incomplete UTF-8 tail while streaming, stop-sequence matching with hold-back, and
// unguessable ids for responses and tool calls.
//
// Pure functions and one small value type; no I/O besides reading the OS random source for ids.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace ds4::server {

bool is_valid_utf8(std::string_view s);
// Length of the longest prefix of `s` that does not end inside a UTF-8 sequence.
size_t utf8_complete_prefix(std::string_view s);

// `prefix` + 32 lower-case hex digits from 16 random bytes (tool-call and response ids).
std::string random_id(std::string_view prefix);

// Streams text through a list of stop sequences. push() returns what may be released now: text that
// cannot be the start of a stop sequence. Once a stop sequence is seen, hit() is true, the text before
// it has been released and everything after it is dropped.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  std::string push(std::string_view text);
  std::string flush();  // end of generation: release the held-back tail
  bool hit() const { return hit_; }
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool hit_ = false;
  std::string matched_;
};

}  // namespace ds4::server
