// json_util.cpp — see json_util.h.
#include "server/json_util.h"

#include <cmath>

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

std::string field_name(const char* key, std::string_view what) {
  return what.empty() ? std::string(key) : std::string(what);
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

Status read_string(const Json& obj, const char* key, std::string& out, std::string_view what) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return Status::Ok();
  if (!it->is_string()) return invalid_argument("'" + field_name(key, what) + "' must be a string");
  out = it->get<std::string>();
  return Status::Ok();
}

Status read_bool(const Json& obj, const char* key, bool& out, std::string_view what) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return Status::Ok();
  if (!it->is_boolean()) return invalid_argument("'" + field_name(key, what) + "' must be a boolean");
  out = it->get<bool>();
  return Status::Ok();
}

Status read_number(const Json& obj, const char* key, std::optional<double>& out, std::string_view what) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return Status::Ok();
  if (!it->is_number()) return invalid_argument("'" + field_name(key, what) + "' must be a number");
  double v = it->get<double>();
  if (!std::isfinite(v)) return invalid_argument("'" + field_name(key, what) + "' must be finite");
  out = v;
  return Status::Ok();
}

Status read_int(const Json& obj, const char* key, std::optional<int64_t>& out, std::string_view what) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return Status::Ok();
  if (it->is_number_integer()) {
    out = it->get<int64_t>();
    return Status::Ok();
  }
  if (it->is_number_float()) {
    double v = it->get<double>();
    if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9e18) {
      out = static_cast<int64_t>(v);
      return Status::Ok();
    }
  }
  return invalid_argument("'" + field_name(key, what) + "' must be an integer");
}

}  // namespace ds4::server
