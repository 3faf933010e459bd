// map_anthropic.cpp — Anthropic /v1/messages (and count_tokens) request mapping (CHAT.md §5.3).
//
// ds4 flavor keeps ds4's byte layout: tool_result blocks stay inside the user message's text as
// "<tool_result>…</tool_result>" followed directly by any text (example D-7). Official flavor turns
// them into tool messages so R-OFF can order and separate them.
#include <algorithm>

#include "server/map_request.h"

namespace ds4::server {

namespace {

std::string escape_tool_result(std::string_view s) {
  static constexpr std::string_view kClose = "</tool_result>";
  std::string out;
  size_t pos = 0;
  while (true) {
    size_t p = s.find(kClose, pos);
    if (p == std::string_view::npos) break;
    out.append(s.substr(pos, p - pos));
    out.append("&lt;/tool_result>");
    pos = p + kClose.size();
  }
  out.append(s.substr(pos));
  return out;
}

Result<std::string> tool_result_text(const Json& block, const std::string& where) {
  auto c = block.find("content");
  if (c == block.end() || c->is_null()) return std::string();
  if (c->is_string()) return c->get<std::string>();
  if (!c->is_array()) return invalid_argument("'" + where + ".content' must be a string or an array of blocks");
  std::string out;
  for (const auto& b : *c) {
    if (b.is_string()) {
      out += b.get<std::string>();
      continue;
    }
    if (!b.is_object() || b.value("type", std::string("text")) != "text")
      return invalid_argument("'" + where + ".content' may only hold text blocks (images are not supported)");
    auto t = b.find("text");
    if (t == b.end() || !t->is_string()) return invalid_argument("'" + where + ".content' text block needs 'text'");
    out += t->get<std::string>();
  }
  return out;
}

Status map_system(const Json& body, GenRequest& out) {
  auto sys = body.find("system");
  if (sys == body.end() || sys->is_null()) return Status::Ok();
  std::vector<std::string> parts;
  if (sys->is_string()) {
    parts.push_back(sys->get<std::string>());
  } else if (sys->is_array()) {
    for (const auto& p : *sys) {
      if (p.is_string()) parts.push_back(p.get<std::string>());
      else if (p.is_object() && p.contains("text") && p["text"].is_string()) parts.push_back(p["text"].get<std::string>());
      else return invalid_argument("'system' blocks must be text blocks");
    }
  } else {
    return invalid_argument("'system' must be a string or an array of text blocks");
  }
  std::string text;
  for (const auto& p : parts) {
    // Claude Code's per-request billing header would bust the prefix cache on every request.
    if (p.rfind("x-anthropic-", 0) == 0) continue;
    if (!text.empty() && text.back() != '\n') text += '\n';
    text += p;
  }
  if (text.empty()) return Status::Ok();
  chat::Message m;
  m.role = chat::Role::system;
  m.content = std::move(text);
  out.conversation.messages.push_back(std::move(m));
  return Status::Ok();
}

Status map_tools(const Json& body, const MapOptions& opts, GenRequest& out) {
  std::vector<std::string> names;
  if (auto tools = body.find("tools"); tools != body.end() && !tools->is_null()) {
    if (!tools->is_array()) return invalid_argument("'tools' must be an array");
    for (size_t i = 0; i < tools->size(); ++i) {
      const Json& t = (*tools)[i];
      const std::string where = "tools[" + std::to_string(i) + "]";
      if (!t.is_object()) return invalid_argument("'" + where + "' must be an object");
      std::string type = "custom", name;
      DS4_RETURN_IF_ERROR(read_string(t, "type", type, where + ".type"));
      if (type != "custom")
        return invalid_argument("'" + where + ".type' '" + type + "' (a server tool) is not supported; only client tools are");
      DS4_RETURN_IF_ERROR(read_string(t, "name", name, where + ".name"));
      if (name.empty()) return invalid_argument("'" + where + ".name' is required");
      names.push_back(name);
      if (opts.flavor == chat::Flavor::ds4) {
        out.conversation.tools.push_back(dump_json(t));
      } else {
        auto d = t.find("description");
        auto s = t.find("input_schema");
        out.conversation.tools.push_back(function_object_text(name, d == t.end() ? nullptr : &*d,
                                                              s == t.end() ? nullptr : &*s));
      }
    }
  }
  if (auto choice = body.find("tool_choice"); choice != body.end() && !choice->is_null()) {
    if (!choice->is_object()) return invalid_argument("'tool_choice' must be an object");
    std::string type;
    DS4_RETURN_IF_ERROR(read_string(*choice, "type", type, "tool_choice.type"));
    if (type == "none") {
      out.conversation.tools.clear();
    } else if (type == "any") {
      out.tool_force.required = true;
    } else if (type == "tool") {
      std::string name;
      DS4_RETURN_IF_ERROR(read_string(*choice, "name", name, "tool_choice.name"));
      if (std::find(names.begin(), names.end(), name) == names.end())
        return invalid_argument("'tool_choice' names tool '" + name + "', which is not in 'tools'");
      out.tool_force.required = true;
      out.tool_force.name = name;
    } else if (type != "auto") {
      return invalid_argument("'tool_choice.type' must be auto, any, tool or none");
    }
  }
  if (out.tool_force.required && out.conversation.tools.empty())
    return invalid_argument("'tool_choice' requires a tool call but no 'tools' were given");
  out.tools_enabled = !out.conversation.tools.empty();
  return Status::Ok();
}

}  // namespace

Result<GenRequest> map_anthropic_messages(const Json& body, const MapOptions& opts) {
  GenRequest out;
  out.api = ApiKind::anthropic_messages;
  out.prompt_param = "messages";
  DS4_RETURN_IF_ERROR(reject_unsupported(body, out.api));
  DS4_RETURN_IF_ERROR(resolve_model_and_thinking(body, out.api, opts, out));
  DS4_RETURN_IF_ERROR(read_sampling(body, out.api, out));
  DS4_RETURN_IF_ERROR(read_stop(body, "stop_sequences", out));
  DS4_RETURN_IF_ERROR(read_bool(body, "stream", out.stream));
  DS4_RETURN_IF_ERROR(map_system(body, out));

  auto msgs = body.find("messages");
  if (msgs == body.end() || msgs->is_null()) return invalid_argument("missing 'messages'");
  if (!msgs->is_array()) return invalid_argument("'messages' must be an array");
  if (msgs->empty()) return invalid_argument("'messages' must contain at least one message");
  const bool ds4 = opts.flavor == chat::Flavor::ds4;
  for (size_t i = 0; i < msgs->size(); ++i) {
    const Json& m = (*msgs)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return invalid_argument("'" + where + "' must be an object");
    std::string role_name;
    DS4_RETURN_IF_ERROR(read_string(m, "role", role_name, where + ".role"));
    if (role_name != "user" && role_name != "assistant")
      return invalid_argument("'" + where + ".role' must be 'user' or 'assistant'");
    const chat::Role role = role_name == "user" ? chat::Role::user : chat::Role::assistant;
    chat::Message msg;
    msg.role = role;
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) return invalid_argument("'" + where + ".content' is required");
    if (content->is_string()) {
      msg.content = content->get<std::string>();
      out.conversation.messages.push_back(std::move(msg));
      continue;
    }
    if (!content->is_array()) return invalid_argument("'" + where + ".content' must be a string or an array of blocks");
    // Official flavor: tool results become tool messages; text after them starts a new user message.
    std::vector<chat::Message> split;
    for (size_t k = 0; k < content->size(); ++k) {
      const Json& b = (*content)[k];
      const std::string bw = where + ".content[" + std::to_string(k) + "]";
      if (!b.is_object()) return invalid_argument("'" + bw + "' must be an object");
      std::string type;
      DS4_RETURN_IF_ERROR(read_string(b, "type", type, bw + ".type"));
      if (type == "text") {
        std::string t;
        DS4_RETURN_IF_ERROR(read_string(b, "text", t, bw + ".text"));
        if (!ds4 && role == chat::Role::user && !split.empty() && split.back().role == chat::Role::tool) {
          chat::Message um;
          um.role = chat::Role::user;
          um.content = std::move(t);
          split.push_back(std::move(um));
        } else if (!ds4 && !split.empty() && split.back().role == chat::Role::user) {
          split.back().content += t;
        } else {
          msg.content += t;
        }
      } else if (type == "thinking") {
        std::string t;
        DS4_RETURN_IF_ERROR(read_string(b, "thinking", t, bw + ".thinking"));
        msg.reasoning += t;
      } else if (type == "redacted_thinking") {
        // Opaque to us: nothing the model can read.
      } else if (type == "tool_use") {
        if (role != chat::Role::assistant) return invalid_argument("'" + bw + "': tool_use blocks belong to assistant messages");
        chat::ToolCall call;
        DS4_RETURN_IF_ERROR(read_string(b, "id", call.id, bw + ".id"));
        DS4_RETURN_IF_ERROR(read_string(b, "name", call.name, bw + ".name"));
        if (call.name.empty()) return invalid_argument("'" + bw + ".name' is required");
        auto input = b.find("input");
        call.arguments = (input == b.end() || input->is_null()) ? "{}" : dump_json(*input);
        msg.tool_calls.push_back(std::move(call));
      } else if (type == "tool_result") {
        if (role != chat::Role::user) return invalid_argument("'" + bw + "': tool_result blocks belong to user messages");
        std::string id;
        DS4_RETURN_IF_ERROR(read_string(b, "tool_use_id", id, bw + ".tool_use_id"));
        auto text = tool_result_text(b, bw);
        if (!text.ok()) return text.status();
        if (ds4) {
          msg.content += "<tool_result>" + escape_tool_result(*text) + "</tool_result>";
          if (msg.tool_call_id.empty()) msg.tool_call_id = id;
        } else {
          chat::Message tm;
          tm.role = chat::Role::tool;
          tm.content = std::move(*text);
          tm.tool_call_id = id;
          split.push_back(std::move(tm));
        }
      } else {
        return invalid_argument("'" + bw + "': content block type '" + type +
                                "' is not supported (this model reads text only)");
      }
    }
    if (!msg.content.empty() || !msg.reasoning.empty() || !msg.tool_calls.empty() || split.empty())
      out.conversation.messages.insert(out.conversation.messages.end(), std::move(msg));
    for (auto& s : split) out.conversation.messages.push_back(std::move(s));
  }
  DS4_RETURN_IF_ERROR(map_tools(body, opts, out));
  return out;
}

}  // namespace ds4::server
