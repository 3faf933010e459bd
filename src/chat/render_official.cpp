// render_official.cpp — R-OFF: DeepSeek's encoding_dsv4.py (CHAT.md §2), reconstructed
// step by step: merge tool results into user turns, sort them by call order, decide the drop
// flag, drop old reasoning/developer turns, then render each message with its transition.
// Not here: tokenization, incremental ("context") encoding — callers render the whole list.
#include <algorithm>
#include <map>

#include "chat/chat.h"
#include "chat/json_text.h"
#include "chat/render_internal.h"
#include "chat/text_constants.h"

namespace ds4::chat::detail {
namespace {

struct Block {
  bool tool_result = false;
  std::string text;         // text block text or tool result content
  std::string tool_use_id;  // tool_result only
};

// A message after preprocessing. User turns carry blocks; other roles keep their Message.
struct OMsg {
  Message m;
  bool has_blocks = false;
  std::vector<Block> blocks;
};

bool thinking_mode(ThinkMode t) { return t != ThinkMode::none; }

constexpr std::string_view kTasks[] = {"action", "query", "authority", "domain", "title",
                                       "read_url"};

// Step 1 (§2.2): tool messages and user messages merge into user turns with blocks.
std::vector<OMsg> merge_tool_messages(const std::vector<Message>& in) {
  std::vector<OMsg> out;
  for (const Message& m : in) {
    if (m.role == Role::tool) {
      Block b{true, m.content, m.tool_call_id};
      if (!out.empty() && out.back().m.role == Role::user && out.back().has_blocks) {
        out.back().blocks.push_back(std::move(b));
      } else {
        OMsg u;
        u.m.role = Role::user;
        u.has_blocks = true;
        u.blocks.push_back(std::move(b));
        out.push_back(std::move(u));
      }
    } else if (m.role == Role::user) {
      Block b{false, m.content, {}};
      if (!out.empty() && out.back().m.role == Role::user && out.back().has_blocks &&
          out.back().m.task.empty()) {
        out.back().blocks.push_back(std::move(b));
      } else {
        OMsg u;
        u.m.role = Role::user;
        u.m.task = m.task;
        u.m.wo_eos = m.wo_eos;
        u.has_blocks = true;
        u.blocks.push_back(std::move(b));
        out.push_back(std::move(u));
      }
    } else {
      OMsg o;
      o.m = m;
      out.push_back(std::move(o));
    }
  }
  return out;
}

// Step 2: tool_result blocks of a user turn are reordered to the call order of the most recent
// assistant message with calls (unknown ids count as position 0; stable; text blocks keep
// their slots).
void sort_tool_results(std::vector<OMsg>& msgs) {
  std::map<std::string, size_t> position;
  for (OMsg& o : msgs) {
    if (o.m.role == Role::assistant && !o.m.tool_calls.empty()) {
      position.clear();
      for (size_t k = 0; k < o.m.tool_calls.size(); ++k)
        position.emplace(o.m.tool_calls[k].id, k);
      continue;
    }
    if (o.m.role != Role::user || !o.has_blocks) continue;
    std::vector<size_t> slots;
    std::vector<Block> results;
    for (size_t k = 0; k < o.blocks.size(); ++k)
      if (o.blocks[k].tool_result) {
        slots.push_back(k);
        results.push_back(o.blocks[k]);
      }
    if (results.size() < 2) continue;
    auto pos_of = [&](const Block& b) {
      auto it = position.find(b.tool_use_id);
      return it == position.end() ? size_t{0} : it->second;
    };
    std::stable_sort(results.begin(), results.end(),
                     [&](const Block& a, const Block& b) { return pos_of(a) < pos_of(b); });
    for (size_t k = 0; k < slots.size(); ++k) o.blocks[slots[k]] = std::move(results[k]);
  }
}

std::optional<size_t> last_user_or_developer(const std::vector<OMsg>& msgs) {
  std::optional<size_t> last;
  for (size_t i = 0; i < msgs.size(); ++i)
    if (msgs[i].m.role == Role::user || msgs[i].m.role == Role::developer) last = i;
  return last;
}

// Step 4: in thinking mode with drop, turns before the last user/developer lose reasoning
// (assistant) or disappear (developer).
std::vector<OMsg> drop_old_thinking(std::vector<OMsg> msgs) {
  auto last = last_user_or_developer(msgs);
  if (!last) return msgs;
  std::vector<OMsg> out;
  for (size_t i = 0; i < msgs.size(); ++i) {
    const Role r = msgs[i].m.role;
    if (r == Role::user || r == Role::system || r == Role::tool || r == Role::latest_reminder ||
        i >= *last) {
      out.push_back(std::move(msgs[i]));
    } else if (r == Role::assistant) {
      msgs[i].m.reasoning.clear();
      out.push_back(std::move(msgs[i]));
    }
  }
  return out;
}

Result<std::string> schema_lines(const std::vector<std::string>& tools) {
  std::string lines;
  for (size_t k = 0; k < tools.size(); ++k) {
    auto parsed = nlohmann::ordered_json::parse(tools[k], nullptr, false);
    if (parsed.is_discarded())
      return invalid_argument("chat: tool schema " + std::to_string(k) + " is not valid JSON");
    if (k) lines += '\n';
    lines += json_text::python_dumps(parsed);
  }
  return lines;
}

Result<std::string> response_format_block(const std::string& rf) {
  auto parsed = nlohmann::ordered_json::parse(rf, nullptr, false);
  if (parsed.is_discarded()) return invalid_argument("chat: response_format is not valid JSON");
  return "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n" +
         json_text::python_dumps(parsed);
}

// The tools / response_format suffix of a system or developer message.
Status append_attachments(const Message& m, std::string& out) {
  if (!m.tools.empty()) {
    DS4_ASSIGN_OR_RETURN(std::string lines, schema_lines(m.tools));
    out += "\n\n";
    out += official_tools_block(lines);
  }
  if (!m.response_format.empty()) {
    DS4_ASSIGN_OR_RETURN(std::string block, response_format_block(m.response_format));
    out += "\n\n";
    out += block;
  }
  return Status::Ok();
}

std::string render_user_blocks(const OMsg& o) {
  if (!o.has_blocks) return o.m.content;
  std::string s;
  for (size_t k = 0; k < o.blocks.size(); ++k) {
    if (k) s += "\n\n";
    if (o.blocks[k].tool_result) {
      s += "<tool_result>";
      s += o.blocks[k].text;
      s += "</tool_result>";
    } else {
      s += o.blocks[k].text;
    }
  }
  return s;
}

struct RenderCtx {
  const std::vector<OMsg>& msgs;
  ThinkMode think;
  bool drop;
  std::optional<size_t> last;  // last user/developer index
};

Status render_one(const RenderCtx& c, size_t i, std::string& out) {
  const OMsg& o = c.msgs[i];
  const Message& m = o.m;
  const bool thinking = thinking_mode(c.think);
  if (i == 0 && c.think == ThinkMode::max) out += think_max_prefix();

  switch (m.role) {
    case Role::system:
      out += m.content;
      DS4_RETURN_IF_ERROR(append_attachments(m, out));
      break;
    case Role::developer:
      if (m.content.empty())
        return invalid_argument("chat: developer message " + std::to_string(i) +
                                " has empty content (official encoding requires text)");
      out += kUser;
      out += m.content;
      DS4_RETURN_IF_ERROR(append_attachments(m, out));
      break;
    case Role::user:
      out += kUser;
      out += render_user_blocks(o);
      break;
    case Role::latest_reminder:
      out += kLatestReminder;
      out += m.content;
      break;
    case Role::assistant: {
      const bool prev_task = i > 0 && !c.msgs[i - 1].m.task.empty();
      const bool after_last = !c.last || i > *c.last;
      if (thinking && !prev_task && (!c.drop || after_last)) {
        out += m.reasoning;
        out += kThinkClose;
      }
      out += m.content;
      out += render_tool_calls(m.tool_calls, Flavor::official);
      if (!m.wo_eos) out += kEos;
      break;
    }
    case Role::tool:
      return internal_error("chat: tool message survived merging");
  }

  // Transition to the next turn.
  if (i + 1 < c.msgs.size()) {
    const Role next = c.msgs[i + 1].m.role;
    if (next != Role::assistant && next != Role::latest_reminder) return Status::Ok();
  }
  if (!m.task.empty()) {
    if (std::find(std::begin(kTasks), std::end(kTasks), m.task) == std::end(kTasks))
      return invalid_argument("chat: unknown task '" + m.task + "'");
    if (m.task == "action") {
      out += kAssistant;
      out += thinking ? kThinkOpen : kThinkClose;
      out += "<｜action｜>";
    } else {
      out += "<｜" + m.task + "｜>";
    }
  } else if (m.role == Role::user || m.role == Role::developer) {
    out += kAssistant;
    const bool open = thinking && (!c.drop || (c.last && i >= *c.last));
    out += open ? kThinkOpen : kThinkClose;
  }
  return Status::Ok();
}

}  // namespace

Result<std::string> render_official(const Conversation& conv, const RenderOptions& options) {
  std::vector<Message> messages = conv.messages;
  if (!conv.tools.empty()) {
    // vLLM-wrapper convention (§2.5): request-level tools go onto the first system message.
    auto it = std::find_if(messages.begin(), messages.end(),
                           [](const Message& m) { return m.role == Role::system; });
    if (it == messages.end()) {
      Message sys;
      sys.role = Role::system;
      it = messages.insert(messages.begin(), std::move(sys));
    }
    it->tools.insert(it->tools.end(), conv.tools.begin(), conv.tools.end());
  }

  std::vector<OMsg> msgs = merge_tool_messages(messages);
  sort_tool_results(msgs);
  bool drop = options.drop_thinking;
  for (const OMsg& o : msgs)
    if (!o.m.tools.empty()) drop = false;
  if (thinking_mode(options.think) && drop) msgs = drop_old_thinking(std::move(msgs));

  std::string out;
  if (options.add_bos) out += kBos;
  RenderCtx c{msgs, options.think, drop, last_user_or_developer(msgs)};
  for (size_t i = 0; i < msgs.size(); ++i) DS4_RETURN_IF_ERROR(render_one(c, i, out));
  return out;
}

std::string official_tool_calls(std::span<const ToolCall> calls) {
  if (calls.empty()) return {};
  std::string s = "\n\n<｜DSML｜tool_calls>\n";
  for (size_t k = 0; k < calls.size(); ++k) {
    const ToolCall& c = calls[k];
    if (k) s += '\n';
    s += "<｜DSML｜invoke name=\"" + c.name + "\">\n";
    auto args = nlohmann::ordered_json::parse(c.arguments, nullptr, false);
    std::vector<std::string> params;
    auto param = [](const std::string& key, bool is_string, const std::string& value) {
      return "<｜DSML｜parameter name=\"" + key + "\" string=\"" + (is_string ? "true" : "false") +
             "\">" + value + "</｜DSML｜parameter>";
    };
    if (args.is_discarded() || !args.is_object()) {
      params.push_back(param("arguments", true, c.arguments));
    } else {
      for (auto it = args.begin(); it != args.end(); ++it) {
        if (it.value().is_string())
          params.push_back(param(it.key(), true, it.value().get<std::string>()));
        else
          params.push_back(param(it.key(), false, json_text::python_dumps(it.value())));
      }
    }
    for (size_t p = 0; p < params.size(); ++p) {
      if (p) s += '\n';
      s += params[p];
    }
    s += "\n</｜DSML｜invoke>";
  }
  s += "\n</｜DSML｜tool_calls>";
  return s;
}

}  // namespace ds4::chat::detail
