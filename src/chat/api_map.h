// api_map.h — HTTP request bodies (OpenAI chat/completions, Anthropic messages, OpenAI
// Responses, legacy completions) -> a Conversation plus the requested thinking mode and tool
// forcing, following ds4-server's mapping (CHAT.md §5, DS4_SERVER.md §2.3). This is the one request
// mapper: the server calls it for every prompt-shaping field and reads only sampling, streaming,
// stop, logprob and model-name fields itself.
// Raw request bytes are kept where ds4 keeps them (tool schema lines, non-string tool-call
// arguments), so R-DS4 renders byte-identically to ds4-server. Validation is strict: a field of
// the wrong type, an unknown role or block type, or a non-text part (image, audio, file) is an
// invalid_argument naming the field ('messages[1].content[0]'), never silently dropped.
// Not here: live-session checks (whether a tool output's call_id is live), the 384K rule
// (needs the context size: apply think_mode_for_context), HTTP status codes (every error is
// invalid_argument; the server answers 400 with its message).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "chat/chat.h"

namespace ds4::chat {

struct MapOptions {
  // ds4: tool results of Anthropic messages are inlined into the user text, schema lines are raw
  // client bytes. official: tool results become tool messages (so R-OFF merges and sorts them),
  // Anthropic/Responses tool objects are normalised to {name, description, parameters}.
  Flavor flavor = Flavor::ds4;
  // The mode of a request that says nothing about thinking (ds4-server --think / --nothink).
  ThinkMode default_think = ThinkMode::high;
};

// How a tool call is forced (OpenAI tool_choice "required" / {"function":{"name"}}, Responses
// "required" / {"name"}, Anthropic {"type":"any"|"tool"}).
struct ToolForce {
  bool required = false;
  std::string name;  // non-empty: this exact tool
};

struct MappedRequest {
  Conversation conv;
  ThinkMode think = ThinkMode::high;  // before think_mode_for_context
  std::string model;                  // as sent ("" if absent)
  bool tools_dropped = false;         // tool_choice none removed the request's tools
  ToolForce tool_force;               // required implies conv.tools is not empty
  std::string prompt;                 // /v1/completions only: the prompt text
  // Anthropic and Responses: ids referenced by tool results (tool_use_id / call_id) that no
  // earlier call in the same request carries, in request order. ds4-server answers 400 for
  // each unless the id belongs to the live session's last turn (a live continuation, §5.7).
  std::vector<std::string> unmatched_tool_result_ids;
};

Result<MappedRequest> map_chat_completions(std::string_view body, const MapOptions& options = {});
Result<MappedRequest> map_anthropic_messages(std::string_view body, const MapOptions& options = {});
Result<MappedRequest> map_responses(std::string_view body, const MapOptions& options = {});
// /v1/completions: fills prompt and think; render with
// render_completion_prompt(kDefaultSystem, prompt, think).
Result<MappedRequest> map_completions(std::string_view body, const MapOptions& options = {});

// The fixed system text of /v1/completions and the CLI default (no final period).
inline constexpr std::string_view kDefaultSystem = "You are a helpful assistant";

}  // namespace ds4::chat
