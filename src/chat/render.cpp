// render.cpp — public rendering entry points: dispatch on the flavor, plus the small fixed
// shapes (completion prompt).
#include "chat/chat.h"
#include "chat/render_internal.h"

namespace ds4::chat {

Result<std::string> render_prompt(const Conversation& conv, const RenderOptions& options) {
  if (options.flavor == Flavor::ds4) return detail::render_ds4(conv, options.think);
  return detail::render_official(conv, options);
}

std::string render_tool_calls(std::span<const ToolCall> calls, Flavor flavor) {
  return flavor == Flavor::ds4 ? detail::ds4_tool_calls(calls) : detail::official_tool_calls(calls);
}

std::string render_completion_prompt(std::string_view system, std::string_view prompt,
                                     ThinkMode think) {
  std::string out(kBos);
  if (think == ThinkMode::max) out += think_max_prefix();
  out += system;
  out += kUser;
  out += prompt;
  out += kAssistant;
  out += think == ThinkMode::none ? kThinkClose : kThinkOpen;
  return out;
}

}  // namespace ds4::chat
