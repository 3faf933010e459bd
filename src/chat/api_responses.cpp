// api_responses.cpp — POST /v1/responses (OpenAI Responses, the Codex path) -> MappedRequest
// (CHAT.md §5.4). Reasoning items are held pending and attached to the next assistant turn;
// calls merge into a preceding assistant message; outputs become tool messages. Beyond ds4,
// tool_choice "required" / {"name"} forces a call (ds4 answers 400), and message items are
// accepted whatever their `status` (only replayed calls and outputs must be completed).
#include "chat/api_common.h"
#include "chat/json_text.h"

namespace ds4::chat {

using detail::at;
using detail::field_error;
using detail::json;

namespace {

bool is_text_block(const std::string& type) {
  return type == "input_text" || type == "output_text" || type == "text" ||
         type == "summary_text" || type == "reasoning_text";
}

bool is_output_item(const std::string& type) {
  return type == "function_call_output" || type == "custom_tool_call_output" || type == "tool_search_output" ||
         (type.size() > 12 && type.ends_with("_call_output"));
}

Result<std::string> content_text(const json& v, const std::string& where) {
  if (v.is_null()) return std::string();
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) return field_error(where, "must be a string or an array of content blocks");
  std::string out;
  for (const auto& b : v) {
    if (!b.is_object()) return field_error(where, "blocks must be objects");
    std::string type;
    if (auto t = b.find("type"); t != b.end() && t->is_string()) type = t->get<std::string>();
    if (is_text_block(type)) {
      auto t = b.find("text");
      if (t == b.end() || !t->is_string()) return field_error(where, "text block needs 'text'");
      out += t->get<std::string>();
    } else if (type == "refusal") {
      if (auto t = b.find("refusal"); t != b.end() && t->is_string()) out += t->get<std::string>();
    } else {
      return invalid_argument("'" + where + "': content type '" + type + "' is not supported (this model reads text only)");
    }
  }
  return out;
}

// The texts of a reasoning item's `summary` and `content` arrays, joined with "\n".
Result<std::string> reasoning_text(const json& item, const std::string& where) {
  std::string text;
  bool first = true;
  for (const char* key : {"summary", "content"}) {
    auto it = item.find(key);
    if (it == item.end() || it->is_null()) continue;
    const std::string kw = where + "." + key;
    if (!it->is_array()) return field_error(kw, "must be an array");
    for (const auto& part : *it) {
      if (!part.is_object() || !part.contains("text") || !part["text"].is_string())
        return field_error(kw, "entries need a string 'text'");
      if (!first) text += '\n';
      text += part["text"].get<std::string>();
      first = false;
    }
  }
  return text;
}

std::string raw_or_empty_object(std::string_view raw_item, std::initializer_list<std::string_view> keys,
                                const json& item) {
  for (std::string_view k : keys) {
    auto it = item.find(std::string(k));
    if (it == item.end() || it->is_null()) continue;
    if (it->is_string()) return it->get<std::string>();
    if (auto raw = json_text::member_raw(raw_item, k)) return std::string(*raw);
    return it->dump();
  }
  return "{}";
}

struct Builder {
  std::vector<Message>& msgs;
  std::optional<std::string> pending_reasoning;

  void flush_reasoning() {
    if (!pending_reasoning) return;
    Message m;
    m.role = Role::assistant;
    m.reasoning = std::move(*pending_reasoning);
    pending_reasoning.reset();
    msgs.push_back(std::move(m));
  }

  void add_call(ToolCall call) {
    if (!pending_reasoning && !msgs.empty() && msgs.back().role == Role::assistant) {
      msgs.back().tool_calls.push_back(std::move(call));
      return;
    }
    Message m;
    m.role = Role::assistant;
    if (pending_reasoning) m.reasoning = std::move(*pending_reasoning);
    pending_reasoning.reset();
    m.tool_calls.push_back(std::move(call));
    msgs.push_back(std::move(m));
  }

  void add_output(std::string text, std::string call_id) {
    flush_reasoning();
    Message m;
    m.role = Role::tool;
    m.content = std::move(text);
    m.tool_call_id = std::move(call_id);
    msgs.push_back(std::move(m));
  }
};

// `call_id`, else the item `id`.
Result<std::string> call_id_of(const json& item, const std::string& where) {
  std::string id;
  DS4_RETURN_IF_ERROR(read_string(item, "call_id", id, where + ".call_id"));
  if (id.empty()) DS4_RETURN_IF_ERROR(read_string(item, "id", id, where + ".id"));
  return id;
}

Result<std::string> output_text(const json& item, const std::string& where) {
  auto it = item.find("output");
  if (it == item.end() || it->is_null()) return std::string();
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) return content_text(*it, where + ".output");
  return it->dump();
}

// A tool object of the request (or of a tool_search_output) -> schema lines; `names` gets the
// names a tool_choice may force.
void add_tool(const json& tool, std::string_view raw, Flavor flavor, std::vector<std::string>& out,
              std::vector<std::string>& names) {
  const std::string type = tool.value("type", "");
  auto compact = [&](const json& name, const json& t) {
    json fn;
    fn["name"] = name;
    if (t.contains("description")) fn["description"] = t["description"];
    if (t.contains("parameters")) fn["parameters"] = t["parameters"];
    if (name.is_string()) names.push_back(name.get<std::string>());
    return fn.dump();
  };
  if (type == "namespace") {
    const std::string ns = tool.value("name", "");
    if (!tool.contains("tools") || !tool["tools"].is_array()) return;
    for (const auto& member : tool["tools"])
      if (member.is_object()) out.push_back(compact(ns + member.value("name", ""), member));
    return;
  }
  if (type == "tool_search") {
    out.push_back(compact("tool_search", tool));
    return;
  }
  if (flavor == Flavor::official && tool.contains("name")) {
    out.push_back(compact(tool["name"], tool));
    return;
  }
  if (tool.contains("name") && tool["name"].is_string()) names.push_back(tool["name"].get<std::string>());
  out.emplace_back(raw);
}

// Function, custom, namespace and tool_search tools; hosted tools (web_search, file_search, ...)
// would need the server to run them.
Status check_tool(const json& t, const std::string& where) {
  if (!t.is_object()) return field_error(where, "must be an object");
  std::string type;
  DS4_RETURN_IF_ERROR(read_string(t, "type", type, where + ".type"));
  if (type == "function" || type == "custom") {
    std::string name;
    DS4_RETURN_IF_ERROR(read_string(t, "name", name, where + ".name"));
    if (name.empty()) return field_error(where + ".name", "is required");
  } else if (type == "namespace") {
    std::string ns;
    DS4_RETURN_IF_ERROR(read_string(t, "name", ns, where + ".name"));
    auto members = t.find("tools");
    if (members == t.end() || !members->is_array()) return field_error(where + ".tools", "must be an array");
    for (const auto& m : *members)
      if (!m.is_object() || !m.contains("name") || !m["name"].is_string())
        return field_error(where + ".tools", "entries need a string 'name'");
  } else if (type != "tool_search") {
    return field_error(where + ".type", "'" + type + "' (a hosted tool) is not supported; only function, custom and namespace tools are");
  }
  return Status::Ok();
}

Status map_item(const json& item, std::string_view raw, const std::string& where, Flavor flavor, Builder& b,
                std::vector<std::string>& extra_tools, std::vector<std::string>& extra_names) {
  if (!item.is_object()) return field_error(where, "must be an object");
  std::string type = "message";
  DS4_RETURN_IF_ERROR(read_string(item, "type", type, where + ".type"));
  std::string status;
  DS4_RETURN_IF_ERROR(read_string(item, "status", status, where + ".status"));
  if (!status.empty() && status != "completed" && type != "message")
    return field_error(where + ".status", "is '" + status + "'; only completed items can be replayed");
  if (type == "message") {
    std::string role;
    DS4_RETURN_IF_ERROR(read_string(item, "role", role, where + ".role"));
    if (role.empty()) return field_error(where + ".role", "is required");
    auto parsed = parse_role(role);
    if (!parsed.ok() || *parsed == Role::tool)
      return field_error(where + ".role", "'" + role + "' is not valid for a message item");
    Message m;
    m.role = *parsed;
    auto content = item.find("content");
    DS4_ASSIGN_OR_RETURN(m.content, content_text(content == item.end() ? json() : *content, where + ".content"));
    if (m.role == Role::assistant) {
      if (b.pending_reasoning) m.reasoning = std::move(*b.pending_reasoning);
      b.pending_reasoning.reset();
    } else {
      b.flush_reasoning();
    }
    b.msgs.push_back(std::move(m));
    return Status::Ok();
  }
  if (type == "reasoning") {
    DS4_ASSIGN_OR_RETURN(std::string text, reasoning_text(item, where));
    if (b.pending_reasoning) b.pending_reasoning = *b.pending_reasoning + "\n" + text;
    else b.pending_reasoning = std::move(text);
    return Status::Ok();
  }
  if (type == "function_call" || type == "custom_tool_call") {
    ToolCall call;
    DS4_ASSIGN_OR_RETURN(call.id, call_id_of(item, where));
    if (call.id.empty()) return field_error(where + ".call_id", "is required");
    std::string ns;
    DS4_RETURN_IF_ERROR(read_string(item, "name", call.name, where + ".name"));
    if (call.name.empty()) return field_error(where + ".name", "is required");
    DS4_RETURN_IF_ERROR(read_string(item, "namespace", ns, where + ".namespace"));
    call.name = ns + call.name;
    call.arguments = raw_or_empty_object(raw, {"arguments", "input"}, item);
    b.add_call(std::move(call));
    return Status::Ok();
  }
  if (type == "local_shell_call" || type == "web_search_call" || type == "tool_search_call" ||
      type == "image_generation_call") {
    ToolCall call;
    DS4_ASSIGN_OR_RETURN(call.id, call_id_of(item, where));
    call.name = type == "local_shell_call" ? "local_shell" : type == "tool_search_call" ? "tool_search" : type;
    call.arguments = raw_or_empty_object(raw, {"action", "arguments", "input"}, item);
    b.add_call(std::move(call));
    return Status::Ok();
  }
  if (is_output_item(type)) {
    DS4_ASSIGN_OR_RETURN(std::string id, call_id_of(item, where));
    DS4_ASSIGN_OR_RETURN(std::string text, output_text(item, where));
    if (type == "tool_search_output" && item.contains("tools") && item["tools"].is_array()) {
      DS4_ASSIGN_OR_RETURN(auto elems, detail::raw_array(raw, "tools", item["tools"].size()));
      for (size_t k = 0; k < item["tools"].size(); ++k)
        if (item["tools"][k].is_object()) add_tool(item["tools"][k], elems[k], flavor, extra_tools, extra_names);
    }
    b.add_output(std::move(text), std::move(id));
    return Status::Ok();
  }
  if (type == "compaction" || type == "context_compaction") return Status::Ok();  // opaque client state
  return field_error(where + ".type", "'" + type + "' is not supported");
}

Status map_tools(const json& body, std::string_view text, Flavor flavor, std::vector<std::string> extra_tools,
                 std::vector<std::string> names, MappedRequest& r) {
  std::vector<std::string> declared;
  if (auto tools = body.find("tools"); tools != body.end() && !tools->is_null()) {
    if (!tools->is_array()) return invalid_argument("'tools' must be an array");
    DS4_ASSIGN_OR_RETURN(auto elems, detail::raw_array(text, "tools", tools->size()));
    for (size_t k = 0; k < tools->size(); ++k) {
      DS4_RETURN_IF_ERROR(check_tool((*tools)[k], at("tools", k)));
      add_tool((*tools)[k], elems[k], flavor, r.conv.tools, declared);
    }
  }
  r.conv.tools.insert(r.conv.tools.end(), extra_tools.begin(), extra_tools.end());
  declared.insert(declared.end(), names.begin(), names.end());
  bool none = false;
  DS4_RETURN_IF_ERROR(detail::read_openai_tool_choice(body, "name", none, r));
  return detail::finish_tool_choice(r, none, declared, "function");
}

Result<MappedRequest> map_responses_unguarded(std::string_view text, const MapOptions& options) {
  DS4_ASSIGN_OR_RETURN(json body, detail::parse_body(text));
  MappedRequest r;
  r.model = detail::model_of(body);
  // The server keeps no response state: the client must replay the whole conversation.
  for (const char* key : {"previous_response_id", "conversation"})
    if (has_value(body, key))
      return invalid_argument("'" + std::string(key) + "' is not supported; replay the full input instead");
  detail::ThinkControl tc;
  if (auto it = body.find("thinking"); it != body.end()) DS4_RETURN_IF_ERROR(tc.apply_thinking(*it));
  if (auto rs = body.find("reasoning"); rs != body.end() && !rs->is_null()) {
    if (!rs->is_object()) return invalid_argument("'reasoning' must be an object");
    if (auto it = rs->find("effort"); it != rs->end()) DS4_RETURN_IF_ERROR(tc.apply_effort(*it, "reasoning.effort"));
  }
  r.think = tc.resolve(r.model, options.default_think);

  std::string instructions;
  DS4_RETURN_IF_ERROR(read_string(body, "instructions", instructions));
  if (!instructions.empty()) {
    Message m;
    m.role = Role::system;
    m.content = std::move(instructions);
    r.conv.messages.push_back(std::move(m));
  }
  auto input = body.find("input");
  if (input == body.end() || input->is_null()) return invalid_argument("missing 'input'");
  Builder b{r.conv.messages, std::nullopt};
  std::vector<std::string> extra_tools, extra_names;
  if (input->is_string()) {
    Message m;
    m.role = Role::user;
    m.content = input->get<std::string>();
    r.conv.messages.push_back(std::move(m));
  } else if (input->is_array()) {
    if (input->empty()) return invalid_argument("'input' must not be empty");
    DS4_ASSIGN_OR_RETURN(auto elems, detail::raw_array(text, "input", input->size()));
    for (size_t k = 0; k < input->size(); ++k)
      DS4_RETURN_IF_ERROR(map_item((*input)[k], elems[k], at("input", k), options.flavor, b, extra_tools, extra_names));
    b.flush_reasoning();
  } else {
    return invalid_argument("'input' must be a string or an array of items");
  }
  DS4_RETURN_IF_ERROR(map_tools(body, text, options.flavor, std::move(extra_tools), std::move(extra_names), r));
  detail::collect_unmatched_results(r, {});
  return r;
}

}  // namespace

Result<MappedRequest> map_responses(std::string_view text, const MapOptions& options) {
  return detail::guard_mapping([&] { return map_responses_unguarded(text, options); });
}

}  // namespace ds4::chat
