// json_util.h — strict, non-throwing access to request JSON: parse with a nesting limit, and typed
// field readers that turn "missing" / "wrong type" into a clear invalid_argument Status naming the
// field. Uses ordered_json so client key order survives (tool schemas and arguments are re-emitted in
// the client's order, CHAT.md §4).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "ds4/status.h"

namespace ds4::server {

using Json = nlohmann::ordered_json;

inline constexpr int kMaxJsonDepth = 128;

// Parses a request body: valid UTF-8, nesting <= kMaxJsonDepth, a JSON object at the top.
Result<Json> parse_request_json(std::string_view body);

// Compact serialisation that never throws (invalid UTF-8 is replaced, which cannot happen for
// values that came through parse_request_json).
std::string dump_json(const Json& j);

// Field readers. `what` names the field in messages ("messages[2].content"). Absent or null fields
// leave `out` unchanged and return ok; a present field of the wrong type is an error.
Status read_string(const Json& obj, const char* key, std::string& out, std::string_view what = {});
Status read_bool(const Json& obj, const char* key, bool& out, std::string_view what = {});
Status read_number(const Json& obj, const char* key, std::optional<double>& out, std::string_view what = {});
Status read_int(const Json& obj, const char* key, std::optional<int64_t>& out, std::string_view what = {});

inline bool has_value(const Json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && !it->is_null();
}

}  // namespace ds4::server
