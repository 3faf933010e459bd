// render_ds4.cpp — R-DS4: the prompt ds4-server renders (CHAT.md §4), including the canonical
// DSML of replayed calls, the escapes ds4 applies, and the live tool-result tail (§5.7).
// Differences from R-OFF are deliberate (§6): tools block first and raw schema bytes, all
// system/developer text hoisted, one USER per user message, unseparated tool results.
#include "chat/chat.h"
#include "chat/json_text.h"
#include "chat/render_internal.h"
#include "chat/text_constants.h"

namespace ds4::chat::detail {
namespace {

constexpr std::string_view kParamClose = "</｜DSML｜parameter>";

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  size_t pos = 0;
  while (true) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
  out.append(s.substr(pos));
  return out;
}

std::string esc_param(std::string_view s) {
  return replace_all(s, kParamClose, "&lt;/｜DSML｜parameter>");
}
std::string esc_json(std::string_view s) {
  return replace_all(s, kParamClose, "\\u003c/｜DSML｜parameter>");
}

std::string param(std::string_view key, bool is_string, std::string_view value) {
  std::string s = "<｜DSML｜parameter name=\"" + ds4_attr_escape(key) + "\" string=\"" +
                  (is_string ? "true" : "false") + "\">";
  s += value;
  s += kParamClose;
  s += '\n';
  return s;
}

bool is_thinking(ThinkMode t) { return t != ThinkMode::none; }

// One message of step 6; `think_part` decides whether an opened assistant turn carries
// "<think>reasoning</think>" or just "</think>".
struct TurnState {
  bool pending_assistant = false;
  bool pending_result = false;
};

void render_turn(const Message& m, bool think_part, ThinkMode think, TurnState& st,
                 std::string& out) {
  switch (m.role) {
    case Role::user:
      out += kUser;
      out += m.content;
      st.pending_assistant = true;
      st.pending_result = false;
      return;
    case Role::tool:
      if (!st.pending_result) out += kUser;
      out += "<tool_result>";
      out += ds4_escape_result(m.content);
      out += "</tool_result>";
      st.pending_assistant = st.pending_result = true;
      return;
    case Role::assistant:
      if (st.pending_assistant) {
        out += kAssistant;
        if (is_thinking(think) && think_part) {
          out += kThinkOpen;
          out += m.reasoning;
        }
        out += kThinkClose;
      }
      out += m.content;
      out += m.raw_dsml.empty() ? ds4_tool_calls(m.tool_calls) : m.raw_dsml;
      out += kEos;
      st.pending_assistant = st.pending_result = false;
      return;
    default:
      return;  // system-like roles live in the system region
  }
}

bool is_system_like(Role r) {
  return r == Role::system || r == Role::developer || r == Role::latest_reminder;
}

}  // namespace

std::string ds4_attr_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string ds4_escape_result(std::string_view s) {
  return replace_all(s, "</tool_result>", "&lt;/tool_result>");
}

std::string ds4_tool_calls(std::span<const ToolCall> calls) {
  if (calls.empty()) return {};
  std::string s = "\n\n<｜DSML｜tool_calls>\n";
  for (const ToolCall& c : calls) {
    s += "<｜DSML｜invoke name=\"" + ds4_attr_escape(c.name) + "\">\n";
    auto members = json_text::object_members(c.arguments);
    if (!members) {
      s += param("arguments", true, esc_param(c.arguments));
    } else {
      for (const auto& m : *members) {
        if (!m.raw.empty() && m.raw[0] == '"') {
          s += param(m.key, true, esc_param(json_text::decode_string(m.raw).value_or("")));
        } else {
          s += param(m.key, false, esc_json(json_text::minify(m.raw)));
        }
      }
    }
    s += "</｜DSML｜invoke>\n";
  }
  s += "</｜DSML｜tool_calls>";
  return s;
}

Result<std::string> render_ds4(const Conversation& conv, ThinkMode think) {
  const auto& msgs = conv.messages;
  bool tool_ctx = !conv.tools.empty();
  size_t last_user = 0;
  bool have_user = false;
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (msgs[i].role == Role::tool || (msgs[i].role == Role::assistant && !msgs[i].tool_calls.empty()))
      tool_ctx = true;
    if (msgs[i].role == Role::user || msgs[i].role == Role::tool) {
      last_user = i;
      have_user = true;
    }
  }

  std::string region;
  if (!conv.tools.empty()) {
    std::string lines;
    for (size_t k = 0; k < conv.tools.size(); ++k) {
      if (k) lines += '\n';
      lines += conv.tools[k];
    }
    region = ds4_tools_block(lines);
  }
  for (const Message& m : msgs) {
    if (!is_system_like(m.role)) continue;
    if (!region.empty()) region += "\n\n";
    region += m.content;
  }

  std::string out(kBos);
  if (think == ThinkMode::max) out += think_max_prefix();
  out += region;

  TurnState st;
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (is_system_like(msgs[i].role)) continue;
    const bool think_part = tool_ctx || !have_user || i > last_user;
    render_turn(msgs[i], think_part, think, st, out);
  }
  if (st.pending_assistant) {
    out += kAssistant;
    out += is_thinking(think) ? kThinkOpen : kThinkClose;
  }
  return out;
}

}  // namespace ds4::chat::detail

namespace ds4::chat {

Result<std::string> render_ds4_tail(std::span<const Message> trailing, ThinkMode think) {
  std::string out(kEos);
  detail::TurnState st;
  for (const Message& m : trailing) {
    if (detail::is_system_like(m.role))
      return invalid_argument("chat: a live tail cannot contain system or developer messages");
    detail::render_turn(m, /*think_part=*/true, think, st, out);
  }
  if (st.pending_assistant) {
    out += kAssistant;
    out += think != ThinkMode::none ? kThinkOpen : kThinkClose;
  }
  return out;
}

}  // namespace ds4::chat
