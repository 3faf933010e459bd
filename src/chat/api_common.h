// api_common.h — pieces shared by the request mappers (internal to ds4_chat): thinking-control
// resolution (CHAT.md §5.1), strict OpenAI text flattening, raw-member access, tool_choice checks.
// Not here: anything one API alone reads (those stay in api_<api>.cpp).
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/api_map.h"
#include "chat/json_fields.h"

namespace ds4::chat::detail {

// Ordered, so a value we must re-serialise (a tool output object, a normalised schema) keeps the
// client's key order (CHAT.md §4); raw bytes are used wherever ds4 keeps them.
using json = nlohmann::ordered_json;

// The thinking controls of one request. Order-independent: an explicit "off" (thinking false /
// disabled, think false) wins, then an effort, then an explicit "on", then the model alias
// (deepseek-chat: off, deepseek-reasoner: on), then the server default.
struct ThinkControl {
  std::optional<bool> enabled;      // `thinking` / `think`
  std::optional<ThinkMode> effort;  // the last non-null effort field

  Status apply_thinking(const json& v);                          // bool or {"type": ...}
  Status apply_think(const json& v);                             // bool
  Status apply_effort(const json& v, std::string_view field);   // effort name or null
  ThinkMode resolve(std::string_view model, ThinkMode default_think) const;
};

// The request body as a JSON object, or invalid_argument("invalid JSON request").
Result<json> parse_body(std::string_view body);

// `model` as sent, or "" when absent or not a string (the server checks the name itself).
std::string model_of(const json& body);

// Runs a mapper body and turns a JSON type error that slipped past the explicit field checks
// into invalid_argument: the mappers are a library boundary and must return errors, never throw.
template <typename F>
Result<MappedRequest> guard_mapping(F&& body) {
  try {
    return body();
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument(std::string("invalid request: a field has the wrong type (") + e.what() + ")");
  }
}

// "base[i]": the path of an array element in error messages.
inline std::string at(std::string_view base, size_t i) { return std::string(base) + "[" + std::to_string(i) + "]"; }

// invalid_argument("'<where>' <what>"): the one shape of a field error.
Status field_error(std::string_view where, std::string_view what);

// OpenAI message text: string; null -> ""; array of strings and text parts ({"type":"text"|
// "input_text"|"output_text", "text"}; a part without type is text), refusal parts add their
// refusal. Any other part (image_url, input_audio, file) is an error naming `what`: dropping it
// would silently change the answer.
Result<std::string> openai_text(const json& v, std::string_view what);

// Raw bytes of the elements of array member `key` of `object`; invalid_argument unless there
// are exactly `expected` of them (keeps raw bytes and parsed values in step).
Result<std::vector<std::string_view>> raw_array(std::string_view object, std::string_view key,
                                                size_t expected);

Status bad_request(std::string why);

// The `messages` member of `body` (chat/completions, Anthropic): present, an array, not empty;
// returns the raw bytes of its elements (from `text`, the body bytes).
Result<std::vector<std::string_view>> messages_array(const json& body, std::string_view text);

// OpenAI-style tool_choice (chat/completions and Responses): "none" (sets `none`), "auto",
// "required", or an object naming one function at `name_path` ("function.name" for chat,
// "name" for Responses); fills r.tool_force.
Status read_openai_tool_choice(const json& body, std::string_view name_path, bool& none, MappedRequest& r);

// After a mapper has read `tools` (every declared name in `names`) and tool_choice (into
// r.tool_force, `none` for "none"): a forced name must be declared (`noun`: "function" or
// "tool", as the API calls them), "none" drops the schemas, and forcing needs a tool.
Status finish_tool_choice(MappedRequest& r, bool none, const std::vector<std::string>& names,
                          std::string_view noun);

// Fills MappedRequest::unmatched_tool_result_ids: walks the messages in order, remembering call
// ids of assistant messages; a tool message whose tool_call_id was not seen is unmatched.
// `inline_ids` are ids of results already inlined into user text (Anthropic, ds4 flavor), as
// (message index, id) pairs.
void collect_unmatched_results(MappedRequest& r,
                               const std::vector<std::pair<size_t, std::string>>& inline_ids);

}  // namespace ds4::chat::detail
