// constants.cpp — fixed texts (Think Max prefix, tools blocks), the 384K rule and role names.
// The texts are copied from CHAT.md §1 byte for byte; the example tests pin them.
#include "chat/chat.h"
#include "chat/text_constants.h"

namespace ds4::chat {
namespace {

constexpr std::string_view kMaxPrefix =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, "
    "considered alternative, and rejected hypothesis to ensure absolutely no assumption is left "
    "unchecked.\n\n";

// Shared opening of both tools blocks up to (not including) the word after "answer the".
constexpr std::string_view kToolsExample =
    " You can invoke tools by writing a \"<｜DSML｜tool_calls>\" block like the following:\n\n"
    "<｜DSML｜tool_calls>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME\">\n"
    "<｜DSML｜parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE"
    "</｜DSML｜parameter>\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "</｜DSML｜tool_calls>\n\n";

constexpr std::string_view kToolsThinking =
    "\n\nIf thinking_mode is enabled (triggered by <think>), you MUST output your complete "
    "reasoning inside <think>...</think> BEFORE any tool calls or final response.\n\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\n";

constexpr std::string_view kFollowSchemas =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke "
    "tool calls.";

}  // namespace

std::string_view think_max_prefix() { return kMaxPrefix; }

ThinkMode think_mode_for_context(ThinkMode requested, int64_t ctx_tokens) {
  if (requested == ThinkMode::max && ctx_tokens < kThinkMaxMinContext) return ThinkMode::high;
  return requested;
}

Result<Role> parse_role(std::string_view name) {
  if (name.empty() || name == "user") return Role::user;
  if (name == "system") return Role::system;
  if (name == "developer") return Role::developer;
  if (name == "assistant") return Role::assistant;
  if (name == "tool" || name == "function") return Role::tool;
  if (name == "latest_reminder") return Role::latest_reminder;
  return invalid_argument("chat: unknown message role '" + std::string(name) + "'");
}

std::string_view role_name(Role role) {
  switch (role) {
    case Role::system: return "system";
    case Role::developer: return "developer";
    case Role::user: return "user";
    case Role::assistant: return "assistant";
    case Role::tool: return "tool";
    case Role::latest_reminder: return "latest_reminder";
  }
  return "user";
}

namespace detail {

std::string official_tools_block(std::string_view schemas) {
  std::string s = "## Tools\n\nYou have access to a set of tools to help answer the user's question.";
  s += kToolsExample;
  s += "String parameters should be specified as is and set `string=\"true\"`. For all other "
       "types (numbers, booleans, arrays, objects), pass the value in JSON format and set "
       "`string=\"false\"`.";
  s += kToolsThinking;
  s += schemas;
  s += kFollowSchemas;
  s += "\n";
  return s;
}

std::string ds4_tools_block(std::string_view schemas) {
  std::string s = "## Tools\n\nYou have access to a set of tools to help answer the user question.";
  s += kToolsExample;
  s += "String parameters should be specified as raw text and set `string=\"true\"`. Preserve "
       "characters such as `>`, `&`, and `&&` exactly; never replace normal string characters "
       "with XML or HTML entity escapes. Only if a string value itself contains the exact "
       "closing parameter tag `</｜DSML｜parameter>`, write that tag as "
       "`&lt;/｜DSML｜parameter>` inside the value. For all other types (numbers, booleans, "
       "arrays, objects), pass the value in JSON format and set `string=\"false\"`.";
  s += kToolsThinking;
  s += schemas;
  s += kFollowSchemas;
  s += " Use the exact parameter names from the schemas.";
  return s;
}

}  // namespace detail
}  // namespace ds4::chat
