// api_common.h — pieces shared by the request mappers (internal to ds4_chat): thinking-control
// resolution (CHAT.md §5.1), text flattening, raw-member access.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>

#include "chat/api_map.h"

namespace ds4::chat::detail {

using json = nlohmann::json;

// Accumulates the thinking controls of one request; resolve() applies the model alias rule.
struct ThinkControl {
  bool explicit_control = false;
  bool disabled = false;
  bool max = false;

  Status apply_thinking(const json& v);            // `thinking`: bool or {"type": ...}
  Status apply_think(const json& v);               // `think`: bool
  Status apply_effort(const json& v);              // effort name or null
  ThinkMode resolve(std::string_view model) const;
};

// The request body as a JSON object, or invalid_argument("invalid JSON request").
Result<json> parse_body(std::string_view body);

// Runs a mapper body and turns a JSON type error that slipped past the explicit field checks
// (e.g. a `null` where a string is required) into invalid_argument: the mappers are a library
// boundary and must return errors, never throw.
template <typename F>
Result<MappedRequest> guard_mapping(F&& body) {
  try {
    return body();
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument(std::string("invalid request: a field has the wrong type (") + e.what() + ")");
  }
}

// OpenAI-style text: string; null -> ""; array -> concatenation of string items and the `text`
// field of object items. Other types: invalid_argument.
Result<std::string> flatten_text(const json& v);

// Raw bytes of the elements of array member `key` of `object`; invalid_argument unless there
// are exactly `expected` of them (keeps raw bytes and parsed values in step).
Result<std::vector<std::string_view>> raw_array(std::string_view object, std::string_view key,
                                                size_t expected);

Status bad_request(std::string why);

// Fills MappedRequest::unmatched_tool_result_ids: walks the messages in order, remembering call
// ids of assistant messages; a tool message whose tool_call_id was not seen is unmatched.
// `inline_ids` are ids of results already inlined into user text (Anthropic, ds4 flavor), as
// (message index, id) pairs.
void collect_unmatched_results(MappedRequest& r,
                               const std::vector<std::pair<size_t, std::string>>& inline_ids);

}  // namespace ds4::chat::detail
