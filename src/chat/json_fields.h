// json_fields.h — strict typed field readers over a parsed JSON object (nlohmann json or
// ordered_json): "absent or null" leaves the output unchanged, "present with the wrong type" is an
// invalid_argument that names the field the way a client wrote it ('messages[2].content').
// Shared by chat's request mappers and the server's generation-parameter reader, so both answer
// the same words for the same mistake.
// Not here: parsing (size, depth and UTF-8 limits belong to whoever owns the raw bytes) and range
// checks (each caller knows its own limits).
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ds4/status.h"

namespace ds4::chat {

namespace json_fields_detail {
inline std::string field_name(const char* key, std::string_view what) {
  return what.empty() ? std::string(key) : std::string(what);
}
}  // namespace json_fields_detail

template <typename Json>
Status read_string(const Json& obj, const char* key, std::string& out, std::string_view what = {}) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return Status::Ok();
  if (!it->is_string())
    return invalid_argument("'" + json_fields_detail::field_name(key, what) + "' must be a string");
  out = it->template get<std::string>();
  return Status::Ok();
}

template <typename Json>
Status read_bool(const Json& obj, const char* key, bool& out, std::string_view what = {}) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return Status::Ok();
  if (!it->is_boolean())
    return invalid_argument("'" + json_fields_detail::field_name(key, what) + "' must be a boolean");
  out = it->template get<bool>();
  return Status::Ok();
}

template <typename Json>
Status read_number(const Json& obj, const char* key, std::optional<double>& out, std::string_view what = {}) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return Status::Ok();
  if (!it->is_number())
    return invalid_argument("'" + json_fields_detail::field_name(key, what) + "' must be a number");
  const double v = it->template get<double>();
  if (!std::isfinite(v))
    return invalid_argument("'" + json_fields_detail::field_name(key, what) + "' must be finite");
  out = v;
  return Status::Ok();
}

// Integers, and floats with an integral value (1.0) that fit in int64.
template <typename Json>
Status read_int(const Json& obj, const char* key, std::optional<int64_t>& out, std::string_view what = {}) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return Status::Ok();
  if (it->is_number_integer()) {
    out = it->template get<int64_t>();
    return Status::Ok();
  }
  if (it->is_number_float()) {
    const double v = it->template get<double>();
    if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9e18) {
      out = static_cast<int64_t>(v);
      return Status::Ok();
    }
  }
  return invalid_argument("'" + json_fields_detail::field_name(key, what) + "' must be an integer");
}

template <typename Json>
bool has_value(const Json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && !it->is_null();
}

}  // namespace ds4::chat
