// api_anthropic.cpp — POST /v1/messages (Anthropic) -> MappedRequest (CHAT.md §5.3).
// ds4 flavor inlines tool_result blocks into the user text exactly like ds4-server; official
// flavor turns them into tool messages so R-OFF merges and sorts them.
#include "chat/api_common.h"
#include "chat/json_text.h"
#include "chat/render_internal.h"

namespace ds4::chat {

using detail::bad_request;
using detail::json;

namespace {

Result<std::string> system_text(const json& v) {
  if (v.is_null()) return std::string();
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) return bad_request("system must be a string or an array");
  std::string out;
  bool first = true;
  for (const auto& part : v) {
    std::string text;
    if (part.is_string()) {
      text = part.get<std::string>();
    } else if (part.is_object() && part.contains("text") && part["text"].is_string()) {
      text = part["text"].get<std::string>();
    } else {
      continue;
    }
    // Claude Code's per-request billing header would bust every prefix cache.
    if (text.rfind("x-anthropic-", 0) == 0) continue;
    if (!first && !out.empty() && out.back() != '\n') out += '\n';
    out += text;
    first = false;
  }
  return out;
}

Result<std::string> result_text(const json& v) {
  if (v.is_null()) return std::string();
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) return bad_request("tool_result content must be a string or an array");
  std::string out;
  for (const auto& b : v)
    if (b.is_object() && b.value("type", "") == "text" && b.contains("text") && b["text"].is_string())
      out += b["text"].get<std::string>();
  return out;
}

// Appends the messages one Anthropic message becomes.
Status map_message(const json& jm, std::string_view raw, Flavor flavor, std::vector<Message>& out,
                   std::vector<std::pair<size_t, std::string>>& inline_ids) {
  if (!jm.is_object()) return bad_request("messages entries must be objects");
  Message m;
  const std::string role = jm.value("role", "user");
  if (role == "assistant") m.role = Role::assistant;
  else if (role == "user") m.role = Role::user;
  else return bad_request("Anthropic role must be user or assistant");
  auto content = jm.find("content");
  if (content == jm.end() || content->is_null()) {
    out.push_back(std::move(m));
    return Status::Ok();
  }
  if (content->is_string()) {
    m.content = content->get<std::string>();
    out.push_back(std::move(m));
    return Status::Ok();
  }
  if (!content->is_array()) return bad_request("content must be a string or an array");
  DS4_ASSIGN_OR_RETURN(auto raw_blocks, detail::raw_array(raw, "content", content->size()));
  bool pending = false;  // official: m holds user text not yet pushed
  for (size_t k = 0; k < content->size(); ++k) {
    const json& b = (*content)[k];
    if (!b.is_object()) continue;
    const std::string type = b.value("type", "");
    if (type == "text") {
      if (b.contains("text") && b["text"].is_string()) m.content += b["text"].get<std::string>();
      pending = true;
    } else if (type == "thinking") {
      if (b.contains("thinking") && b["thinking"].is_string())
        m.reasoning += b["thinking"].get<std::string>();
    } else if (type == "tool_use") {
      ToolCall call;
      call.id = b.value("id", "");
      call.name = b.value("name", "");
      auto input = json_text::member_raw(raw_blocks[k], "input");
      call.arguments = input ? std::string(*input) : std::string("{}");
      m.tool_calls.push_back(std::move(call));
    } else if (type == "tool_result") {
      DS4_ASSIGN_OR_RETURN(std::string text, result_text(b.contains("content") ? b["content"] : json()));
      const std::string id = b.value("tool_use_id", "");
      if (flavor == Flavor::ds4) {
        m.content += "<tool_result>" + detail::ds4_escape_result(text) + "</tool_result>";
        inline_ids.emplace_back(out.size(), id);  // m will be pushed at index out.size()
        if (m.tool_call_id.empty()) m.tool_call_id = id;
      } else {
        if (pending) {
          out.push_back(m);
          m.content.clear();
          pending = false;
        }
        Message t;
        t.role = Role::tool;
        t.content = std::move(text);
        t.tool_call_id = id;
        out.push_back(std::move(t));
      }
    }
    // image, document, redacted_thinking, ...: dropped like ds4-server does.
  }
  const bool had_results = flavor == Flavor::official && !out.empty() && out.back().role == Role::tool;
  if (m.role == Role::assistant || pending || !had_results) out.push_back(std::move(m));
  return Status::Ok();
}

std::string normalised_tool(std::string_view raw_tool) {
  // Official flavor: R-OFF expects OpenAI function objects {name, description, parameters}.
  auto tool = nlohmann::ordered_json::parse(raw_tool, nullptr, false);
  if (tool.is_discarded() || !tool.is_object()) return std::string(raw_tool);
  nlohmann::ordered_json fn;
  if (tool.contains("name")) fn["name"] = tool["name"];
  if (tool.contains("description")) fn["description"] = tool["description"];
  if (tool.contains("input_schema")) fn["parameters"] = tool["input_schema"];
  return fn.dump();
}

}  // namespace

namespace {
Result<MappedRequest> map_anthropic_messages_unguarded(std::string_view text, const MapOptions& options) {
  DS4_ASSIGN_OR_RETURN(json body, detail::parse_body(text));
  MappedRequest r;
  if (auto it = body.find("model"); it != body.end() && it->is_string()) r.model = it->get<std::string>();
  detail::ThinkControl tc;
  if (auto it = body.find("thinking"); it != body.end()) DS4_RETURN_IF_ERROR(tc.apply_thinking(*it));
  if (auto it = body.find("output_config"); it != body.end() && it->is_object() && it->contains("effort"))
    DS4_RETURN_IF_ERROR(tc.apply_effort((*it)["effort"]));
  if (auto it = body.find("reasoning_effort"); it != body.end()) DS4_RETURN_IF_ERROR(tc.apply_effort(*it));
  r.think = tc.resolve(r.model);

  if (auto sys = body.find("system"); sys != body.end()) {
    DS4_ASSIGN_OR_RETURN(std::string s, system_text(*sys));
    if (!s.empty()) {
      Message m;
      m.role = Role::system;
      m.content = std::move(s);
      r.conv.messages.push_back(std::move(m));
    }
  }
  auto msgs = body.find("messages");
  if (msgs == body.end() || !msgs->is_array()) return invalid_argument("missing messages");
  DS4_ASSIGN_OR_RETURN(auto elems, detail::raw_array(text, "messages", msgs->size()));
  std::vector<std::pair<size_t, std::string>> inline_ids;
  for (size_t k = 0; k < msgs->size(); ++k)
    DS4_RETURN_IF_ERROR(map_message((*msgs)[k], elems[k], options.flavor, r.conv.messages, inline_ids));
  detail::collect_unmatched_results(r, inline_ids);

  auto choice = body.find("tool_choice");
  const bool none = choice != body.end() && choice->is_object() && choice->value("type", "") == "none";
  auto tools = body.find("tools");
  if (tools != body.end() && !tools->is_null()) {
    if (!tools->is_array()) return bad_request("tools must be an array");
    if (none) {
      r.tools_dropped = !tools->empty();
    } else {
      DS4_ASSIGN_OR_RETURN(auto raw_tools, detail::raw_array(text, "tools", tools->size()));
      for (std::string_view raw_tool : raw_tools)
        r.conv.tools.push_back(options.flavor == Flavor::ds4 ? std::string(raw_tool) : normalised_tool(raw_tool));
    }
  }
  return r;
}
}  // namespace

Result<MappedRequest> map_anthropic_messages(std::string_view text, const MapOptions& options) {
  return detail::guard_mapping([&] { return map_anthropic_messages_unguarded(text, options); });
}

}  // namespace ds4::chat
