// api_map.h — HTTP request bodies (OpenAI chat/completions, Anthropic messages, OpenAI
// Responses, legacy completions) -> a Conversation plus the requested thinking mode, following
// ds4-server's mapping (CHAT.md §5, DS4_SERVER.md §2.3). Only the prompt-shaping fields are read
// here; sampling, streaming and stop fields are the server's business.
// Raw request bytes are kept where ds4 keeps them (tool schema lines, non-string tool-call
// arguments), so R-DS4 renders byte-identically to ds4-server.
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
};

struct MappedRequest {
  Conversation conv;
  ThinkMode think = ThinkMode::high;  // before think_mode_for_context
  std::string model;                  // as sent ("" if absent)
  bool tools_dropped = false;         // tool_choice none removed the request's tools
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
Result<MappedRequest> map_completions(std::string_view body);

// The fixed system text of /v1/completions and the CLI default (no final period).
inline constexpr std::string_view kDefaultSystem = "You are a helpful assistant";

}  // namespace ds4::chat
