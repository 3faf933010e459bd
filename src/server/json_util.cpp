// json_util.cpp — see json_util.h.
#include "server/json_util.h"

#include "server/text_util.h"

namespace ds4::server {

namespace {
// Depth of the deepest array/object nesting, ignoring brackets inside strings. Checked before the
// real parse so hostile input ("[[[[…") cannot exhaust the stack in recursive code downstream.
int max_nesting(std::string_view s) {
  int depth = 0, max_depth = 0;
  bool in_str = false, esc = false;
  for (char c : s) {
    if (in_str) {
      if (esc) esc = false;
      else if (c == '\\') esc = true;
      else if (c == '"') in_str = false;
      continue;
    }
    if (c == '"') in_str = true;
    else if (c == '[' || c == '{') max_depth = std::max(max_depth, ++depth);
    else if (c == ']' || c == '}') --depth;
  }
  return max_depth;
}

}  // namespace

Result<Json> parse_request_json(std::string_view body) {
  if (body.empty()) return invalid_argument("request body is empty; expected a JSON object");
  if (!is_valid_utf8(body)) return invalid_argument("request body is not valid UTF-8");
  if (max_nesting(body) > kMaxJsonDepth)
    return invalid_argument("request JSON is nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  Json j = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument("invalid JSON in request body");
  if (!j.is_object()) return invalid_argument("request body must be a JSON object");
  return j;
}

std::string dump_json(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace ds4::server
