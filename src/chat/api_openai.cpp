// api_openai.cpp — POST /v1/chat/completions and /v1/completions -> MappedRequest
// (CHAT.md §5.2, §5.5). Schema lines and non-string arguments keep the client's raw bytes; every
// field is checked strictly and errors name it ('messages[1].tool_calls[0].function.name').
#include "chat/api_common.h"
#include "chat/json_text.h"

namespace ds4::chat {

using detail::at;
using detail::field_error;
using detail::json;

namespace {

// Parses the body and fills r.model and r.think from `thinking`, `think` and `reasoning_effort`.
Result<json> parse_with_thinking(std::string_view text, const MapOptions& options, MappedRequest& r) {
  DS4_ASSIGN_OR_RETURN(json body, detail::parse_body(text));
  r.model = detail::model_of(body);
  detail::ThinkControl tc;
  if (auto it = body.find("thinking"); it != body.end()) DS4_RETURN_IF_ERROR(tc.apply_thinking(*it));
  if (auto it = body.find("think"); it != body.end()) DS4_RETURN_IF_ERROR(tc.apply_think(*it));
  if (auto it = body.find("reasoning_effort"); it != body.end())
    DS4_RETURN_IF_ERROR(tc.apply_effort(*it, "reasoning_effort"));
  r.think = tc.resolve(r.model, options.default_think);
  return body;
}

// One OpenAI tool_calls[] entry; nullopt when it has no arguments (ds4 drops those calls).
Result<std::optional<ToolCall>> map_call(const json& jc, std::string_view raw, const std::string& where) {
  if (!jc.is_object()) return field_error(where, "must be an object");
  ToolCall call;
  DS4_RETURN_IF_ERROR(read_string(jc, "id", call.id, where + ".id"));
  auto fn = jc.find("function");
  if (fn == jc.end() || !fn->is_object()) return field_error(where + ".function", "must be an object");
  DS4_RETURN_IF_ERROR(read_string(*fn, "name", call.name, where + ".function.name"));
  if (call.name.empty()) return field_error(where + ".function.name", "is required");
  auto args = fn->find("arguments");
  if (args == fn->end() || args->is_null()) return std::optional<ToolCall>();
  if (args->is_string()) {
    call.arguments = args->get<std::string>();
  } else {
    auto raw_fn = json_text::member_raw(raw, "function");
    auto raw_args = raw_fn ? json_text::member_raw(*raw_fn, "arguments") : std::nullopt;
    call.arguments = raw_args ? std::string(*raw_args) : args->dump();
  }
  return std::optional<ToolCall>(std::move(call));
}

Result<Message> map_message(const json& jm, std::string_view raw, const std::string& where) {
  if (!jm.is_object()) return field_error(where, "must be an object");
  Message m;
  std::string role;
  DS4_RETURN_IF_ERROR(read_string(jm, "role", role, where + ".role"));
  auto parsed = parse_role(role);
  if (!parsed.ok()) return field_error(where + ".role", "'" + role + "' is not a valid role");
  m.role = *parsed == Role::latest_reminder ? Role::system : *parsed;  // not an OpenAI role
  auto content = jm.find("content");
  DS4_ASSIGN_OR_RETURN(m.content, detail::openai_text(content == jm.end() ? json() : *content, where + ".content"));
  // ds4 reads reasoning_content of assistant turns; `reasoning` (another client spelling) is
  // checked like it but not rendered.
  for (const char* key : {"reasoning_content", "reasoning"}) {
    auto r = jm.find(key);
    if (r == jm.end() || r->is_null()) continue;
    DS4_ASSIGN_OR_RETURN(std::string text, detail::openai_text(*r, where + "." + key));
    if (m.role == Role::assistant && std::string_view(key) == "reasoning_content") m.reasoning = std::move(text);
    break;
  }
  if (auto calls = jm.find("tool_calls"); calls != jm.end() && !calls->is_null()) {
    if (!calls->is_array()) return field_error(where + ".tool_calls", "must be an array");
    DS4_ASSIGN_OR_RETURN(auto elems, detail::raw_array(raw, "tool_calls", calls->size()));
    for (size_t k = 0; k < calls->size(); ++k) {
      DS4_ASSIGN_OR_RETURN(auto call, map_call((*calls)[k], elems[k], at(where + ".tool_calls", k)));
      if (call && m.role == Role::assistant) m.tool_calls.push_back(std::move(*call));
    }
  }
  DS4_RETURN_IF_ERROR(read_string(jm, "tool_call_id", m.tool_call_id, where + ".tool_call_id"));
  if (m.role == Role::tool && m.tool_call_id.empty()) {
    std::string name;  // the legacy "function" role carries a name instead of an id
    DS4_RETURN_IF_ERROR(read_string(jm, "name", name, where + ".name"));
  }
  return m;
}

// `tools` (function tools only; the schema line is the raw `function` member) and `tool_choice`.
Status map_tools(const json& body, std::string_view text, MappedRequest& r) {
  std::vector<std::string> names;
  if (auto tools = body.find("tools"); tools != body.end() && !tools->is_null()) {
    if (!tools->is_array()) return invalid_argument("'tools' must be an array");
    DS4_ASSIGN_OR_RETURN(auto raw_tools, detail::raw_array(text, "tools", tools->size()));
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& t = (*tools)[i];
      const std::string where = at("tools", i);
      if (!t.is_object()) return field_error(where, "must be an object");
      std::string type = "function";
      DS4_RETURN_IF_ERROR(read_string(t, "type", type, where + ".type"));
      if (type != "function") return field_error(where + ".type", "'" + type + "' is not supported; only function tools are");
      auto fn = t.find("function");
      if (fn == t.end() || !fn->is_object()) return field_error(where + ".function", "must be an object");
      std::string name;
      DS4_RETURN_IF_ERROR(read_string(*fn, "name", name, where + ".function.name"));
      if (name.empty()) return field_error(where + ".function.name", "is required");
      names.push_back(std::move(name));
      auto raw_fn = json_text::member_raw(raw_tools[i], "function");
      r.conv.tools.push_back(raw_fn ? std::string(*raw_fn) : fn->dump());
    }
  }
  bool none = false;
  DS4_RETURN_IF_ERROR(detail::read_openai_tool_choice(body, "function.name", none, r));
  return detail::finish_tool_choice(r, none, names, "function");
}

Result<MappedRequest> map_chat_completions_unguarded(std::string_view text, const MapOptions& options) {
  MappedRequest r;
  DS4_ASSIGN_OR_RETURN(json body, parse_with_thinking(text, options, r));

  DS4_ASSIGN_OR_RETURN(auto elems, detail::messages_array(body, text));
  const json& msgs = body["messages"];
  for (size_t k = 0; k < msgs.size(); ++k) {
    DS4_ASSIGN_OR_RETURN(Message m, map_message(msgs[k], elems[k], at("messages", k)));
    r.conv.messages.push_back(std::move(m));
  }
  // chat/completions maps identically for both flavors: the function object is already the
  // {name, description, parameters} shape R-OFF expects.
  DS4_RETURN_IF_ERROR(map_tools(body, text, r));
  return r;
}

Result<MappedRequest> map_completions_unguarded(std::string_view text, const MapOptions& options) {
  MappedRequest r;
  DS4_ASSIGN_OR_RETURN(json body, parse_with_thinking(text, options, r));
  auto prompt = body.find("prompt");
  if (prompt == body.end() || prompt->is_null()) return invalid_argument("missing 'prompt'");
  if (prompt->is_string()) {
    r.prompt = prompt->get<std::string>();
  } else if (prompt->is_array()) {
    // Answering only the first of several prompts would look like success to a batch client.
    if (prompt->size() != 1 || !(*prompt)[0].is_string())
      return invalid_argument("'prompt' must be a string or an array holding exactly one string (batches are not supported)");
    r.prompt = (*prompt)[0].get<std::string>();
  } else {
    return invalid_argument("'prompt' must be a string");
  }
  if (r.prompt.empty()) return invalid_argument("'prompt' must not be empty");
  return r;
}

}  // namespace

Result<MappedRequest> map_chat_completions(std::string_view text, const MapOptions& options) {
  return detail::guard_mapping([&] { return map_chat_completions_unguarded(text, options); });
}

Result<MappedRequest> map_completions(std::string_view text, const MapOptions& options) {
  return detail::guard_mapping([&] { return map_completions_unguarded(text, options); });
}

}  // namespace ds4::chat
