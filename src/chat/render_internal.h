// render_internal.h — the two renderers behind render_prompt (internal to ds4_chat).
#pragma once

#include <span>
#include <string>

#include "chat/chat.h"

namespace ds4::chat::detail {

Result<std::string> render_official(const Conversation& conv, const RenderOptions& options);
Result<std::string> render_ds4(const Conversation& conv, ThinkMode think);

// Canonical DSML for calls (leading "\n\n" included; "" for no calls).
std::string official_tool_calls(std::span<const ToolCall> calls);
std::string ds4_tool_calls(std::span<const ToolCall> calls);

// ds4 escapes (CHAT.md §4).
std::string ds4_attr_escape(std::string_view s);
std::string ds4_escape_result(std::string_view s);

}  // namespace ds4::chat::detail
