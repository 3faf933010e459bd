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

#include "chat/json_fields.h"
#include "ds4/status.h"

namespace ds4::server {

using Json = nlohmann::ordered_json;

inline constexpr int kMaxJsonDepth = 128;

// Parses a request body: valid UTF-8, nesting <= kMaxJsonDepth, a JSON object at the top.
Result<Json> parse_request_json(std::string_view body);

// Compact serialisation that never throws (invalid UTF-8 is replaced, which cannot happen for
// values that came through parse_request_json).
std::string dump_json(const Json& j);

// Field readers (chat/json_fields.h, shared with chat's request mapper so both word a mistake the
// same way). `what` names the field in messages ("messages[2].content"). Absent or null fields
// leave `out` unchanged and return ok; a present field of the wrong type is an error.
using chat::has_value;
using chat::read_bool;
using chat::read_int;
using chat::read_number;
using chat::read_string;

}  // namespace ds4::server
