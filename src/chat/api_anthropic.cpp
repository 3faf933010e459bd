// api_anthropic.cpp — POST /v1/messages (Anthropic) -> MappedRequest (CHAT.md §5.3).
// ds4 flavor inlines tool_result blocks into the user text exactly like ds4-server; official
// flavor turns them into tool messages so R-OFF merges and sorts them. Blocks the model cannot
// read (image, document) are errors naming the block, not silently dropped.
#include "chat/api_common.h"
#include "chat/json_text.h"
#include "chat/render_internal.h"

namespace ds4::chat {

using detail::at;
using detail::field_error;
using detail::json;

namespace {

Result<std::string> system_text(const json& v) {
  if (v.is_null()) return std::string();
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) return invalid_argument("'system' must be a string or an array of text blocks");
  std::string out;
  for (const auto& part : v) {
    std::string text;
    if (part.is_string()) text = part.get<std::string>();
    else if (part.is_object() && part.contains("text") && part["text"].is_string()) text = part["text"].get<std::string>();
    else return invalid_argument("'system' blocks must be text blocks");
    // Claude Code's per-request billing header would bust every prefix cache.
    if (text.rfind("x-anthropic-", 0) == 0) continue;
    if (!out.empty() && out.back() != '\n') out += '\n';
    out += text;
  }
  return out;
}

// tool_result content: string, or strings and text blocks (a block without type is text).
Result<std::string> result_text(const json& block, const std::string& where) {
  auto c = block.find("content");
  if (c == block.end() || c->is_null()) return std::string();
  if (c->is_string()) return c->get<std::string>();
  if (!c->is_array()) return field_error(where + ".content", "must be a string or an array of blocks");
  std::string out;
  for (const auto& b : *c) {
    if (b.is_string()) {
      out += b.get<std::string>();
      continue;
    }
    if (!b.is_object() || b.value("type", std::string("text")) != "text")
      return field_error(where + ".content", "may only hold text blocks (images are not supported)");
    auto t = b.find("text");
    if (t == b.end() || !t->is_string()) return field_error(where + ".content", "text block needs 'text'");
    out += t->get<std::string>();
  }
  return out;
}

// Appends the messages one Anthropic message becomes.
Status map_message(const json& jm, std::string_view raw, const std::string& where, Flavor flavor,
                   std::vector<Message>& out, std::vector<std::pair<size_t, std::string>>& inline_ids) {
  if (!jm.is_object()) return field_error(where, "must be an object");
  std::string role;
  DS4_RETURN_IF_ERROR(read_string(jm, "role", role, where + ".role"));
  if (role != "user" && role != "assistant") return field_error(where + ".role", "must be 'user' or 'assistant'");
  Message m;
  m.role = role == "user" ? Role::user : Role::assistant;
  auto content = jm.find("content");
  if (content == jm.end() || content->is_null()) return field_error(where + ".content", "is required");
  if (content->is_string()) {
    m.content = content->get<std::string>();
    out.push_back(std::move(m));
    return Status::Ok();
  }
  if (!content->is_array()) return field_error(where + ".content", "must be a string or an array of blocks");
  DS4_ASSIGN_OR_RETURN(auto raw_blocks, detail::raw_array(raw, "content", content->size()));
  bool pending = false;  // official: m holds user text not yet pushed
  for (size_t k = 0; k < content->size(); ++k) {
    const json& b = (*content)[k];
    const std::string bw = at(where + ".content", k);
    if (!b.is_object()) return field_error(bw, "must be an object");
    std::string type;
    DS4_RETURN_IF_ERROR(read_string(b, "type", type, bw + ".type"));
    if (type == "text") {
      std::string t;
      DS4_RETURN_IF_ERROR(read_string(b, "text", t, bw + ".text"));
      m.content += t;
      pending = true;
    } else if (type == "thinking") {
      std::string t;
      DS4_RETURN_IF_ERROR(read_string(b, "thinking", t, bw + ".thinking"));
      m.reasoning += t;
    } else if (type == "redacted_thinking") {
      // Opaque to us: nothing the model can read.
    } else if (type == "tool_use") {
      if (m.role != Role::assistant) return field_error(bw, "tool_use blocks belong to assistant messages");
      ToolCall call;
      DS4_RETURN_IF_ERROR(read_string(b, "id", call.id, bw + ".id"));
      if (call.id.empty()) return field_error(bw + ".id", "is required");
      DS4_RETURN_IF_ERROR(read_string(b, "name", call.name, bw + ".name"));
      if (call.name.empty()) return field_error(bw + ".name", "is required");
      auto input = json_text::member_raw(raw_blocks[k], "input");
      call.arguments = input ? std::string(*input) : std::string("{}");
      m.tool_calls.push_back(std::move(call));
    } else if (type == "tool_result") {
      if (m.role != Role::user) return field_error(bw, "tool_result blocks belong to user messages");
      std::string id;
      DS4_RETURN_IF_ERROR(read_string(b, "tool_use_id", id, bw + ".tool_use_id"));
      if (id.empty()) return field_error(bw + ".tool_use_id", "is required");
      DS4_ASSIGN_OR_RETURN(std::string text, result_text(b, bw));
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
        t.tool_call_id = std::move(id);
        out.push_back(std::move(t));
      }
    } else {
      return field_error(bw, "content block type '" + type + "' is not supported (this model reads text only)");
    }
  }
  const bool had_results = flavor == Flavor::official && !out.empty() && out.back().role == Role::tool;
  if (m.role == Role::assistant || pending || !had_results) out.push_back(std::move(m));
  return Status::Ok();
}

std::string normalised_tool(std::string_view raw_tool) {
  // Official flavor: R-OFF expects OpenAI function objects {name, description, parameters}.
  auto tool = json::parse(raw_tool, nullptr, false);
  if (tool.is_discarded() || !tool.is_object()) return std::string(raw_tool);
  json fn;
  if (tool.contains("name")) fn["name"] = tool["name"];
  if (tool.contains("description")) fn["description"] = tool["description"];
  if (tool.contains("input_schema")) fn["parameters"] = tool["input_schema"];
  return fn.dump();
}

// `tools` (client tools only) and `tool_choice` ({"type": auto|any|tool|none}).
Status map_tools(const json& body, std::string_view text, Flavor flavor, MappedRequest& r) {
  std::vector<std::string> names;
  if (auto tools = body.find("tools"); tools != body.end() && !tools->is_null()) {
    if (!tools->is_array()) return invalid_argument("'tools' must be an array");
    DS4_ASSIGN_OR_RETURN(auto raw_tools, detail::raw_array(text, "tools", tools->size()));
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& t = (*tools)[i];
      const std::string where = at("tools", i);
      if (!t.is_object()) return field_error(where, "must be an object");
      std::string type = "custom", name;
      DS4_RETURN_IF_ERROR(read_string(t, "type", type, where + ".type"));
      if (type != "custom")
        return field_error(where + ".type", "'" + type + "' (a server tool) is not supported; only client tools are");
      DS4_RETURN_IF_ERROR(read_string(t, "name", name, where + ".name"));
      if (name.empty()) return field_error(where + ".name", "is required");
      names.push_back(std::move(name));
      r.conv.tools.push_back(flavor == Flavor::ds4 ? std::string(raw_tools[i]) : normalised_tool(raw_tools[i]));
    }
  }
  bool none = false;
  if (auto choice = body.find("tool_choice"); choice != body.end() && !choice->is_null()) {
    if (!choice->is_object()) return invalid_argument("'tool_choice' must be an object");
    std::string type;
    DS4_RETURN_IF_ERROR(read_string(*choice, "type", type, "tool_choice.type"));
    if (type == "none") {
      none = true;
    } else if (type == "any") {
      r.tool_force.required = true;
    } else if (type == "tool") {
      std::string name;
      DS4_RETURN_IF_ERROR(read_string(*choice, "name", name, "tool_choice.name"));
      r.tool_force.required = true;
      r.tool_force.name = std::move(name);
      if (r.tool_force.name.empty()) return invalid_argument("'tool_choice' names tool '', which is not in 'tools'");
    } else if (type != "auto") {
      return invalid_argument("'tool_choice.type' must be auto, any, tool or none");
    }
  }
  return detail::finish_tool_choice(r, none, names, "tool");
}

Result<MappedRequest> map_anthropic_messages_unguarded(std::string_view text, const MapOptions& options) {
  DS4_ASSIGN_OR_RETURN(json body, detail::parse_body(text));
  MappedRequest r;
  r.model = detail::model_of(body);
  detail::ThinkControl tc;
  if (auto it = body.find("thinking"); it != body.end()) DS4_RETURN_IF_ERROR(tc.apply_thinking(*it));
  if (auto it = body.find("reasoning_effort"); it != body.end())
    DS4_RETURN_IF_ERROR(tc.apply_effort(*it, "reasoning_effort"));
  if (auto it = body.find("output_config"); it != body.end() && it->is_object() && it->contains("effort"))
    DS4_RETURN_IF_ERROR(tc.apply_effort((*it)["effort"], "output_config.effort"));
  r.think = tc.resolve(r.model, options.default_think);

  if (auto sys = body.find("system"); sys != body.end()) {
    DS4_ASSIGN_OR_RETURN(std::string s, system_text(*sys));
    if (!s.empty()) {
      Message m;
      m.role = Role::system;
      m.content = std::move(s);
      r.conv.messages.push_back(std::move(m));
    }
  }
  DS4_ASSIGN_OR_RETURN(auto elems, detail::messages_array(body, text));
  const json& msgs = body["messages"];
  std::vector<std::pair<size_t, std::string>> inline_ids;
  for (size_t k = 0; k < msgs.size(); ++k)
    DS4_RETURN_IF_ERROR(map_message(msgs[k], elems[k], at("messages", k), options.flavor, r.conv.messages, inline_ids));
  detail::collect_unmatched_results(r, inline_ids);
  DS4_RETURN_IF_ERROR(map_tools(body, text, options.flavor, r));
  return r;
}

}  // namespace

Result<MappedRequest> map_anthropic_messages(std::string_view text, const MapOptions& options) {
  return detail::guard_mapping([&] { return map_anthropic_messages_unguarded(text, options); });
}

}  // namespace ds4::chat
