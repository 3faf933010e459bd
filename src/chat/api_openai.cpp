// api_openai.cpp — POST /v1/chat/completions and /v1/completions -> MappedRequest
// (CHAT.md §5.2, §5.5). Schema lines and non-string arguments keep the client's raw bytes.
#include "chat/api_common.h"
#include "chat/json_text.h"

namespace ds4::chat {

using detail::bad_request;
using detail::json;

namespace {

Status apply_common_thinking(const json& body, detail::ThinkControl& tc) {
  if (auto it = body.find("thinking"); it != body.end()) DS4_RETURN_IF_ERROR(tc.apply_thinking(*it));
  if (auto it = body.find("think"); it != body.end()) DS4_RETURN_IF_ERROR(tc.apply_think(*it));
  if (auto it = body.find("reasoning_effort"); it != body.end())
    DS4_RETURN_IF_ERROR(tc.apply_effort(*it));
  return Status::Ok();
}

std::string model_of(const json& body) {
  auto it = body.find("model");
  return it != body.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// One OpenAI tool_calls[] entry; nullopt when it has no name or no arguments (ds4 drops those).
Result<std::optional<ToolCall>> map_call(const json& jc, std::string_view raw) {
  if (!jc.is_object()) return bad_request("tool_calls entries must be objects");
  ToolCall call;
  if (auto id = jc.find("id"); id != jc.end() && id->is_string()) call.id = id->get<std::string>();
  auto fn = jc.find("function");
  if (fn == jc.end() || !fn->is_object()) return std::optional<ToolCall>();
  auto name = fn->find("name");
  auto args = fn->find("arguments");
  if (name == fn->end() || !name->is_string() || args == fn->end() || args->is_null())
    return std::optional<ToolCall>();
  call.name = name->get<std::string>();
  if (args->is_string()) {
    call.arguments = args->get<std::string>();
  } else {
    auto raw_fn = json_text::member_raw(raw, "function");
    auto raw_args = raw_fn ? json_text::member_raw(*raw_fn, "arguments") : std::nullopt;
    call.arguments = raw_args ? std::string(*raw_args) : args->dump();
  }
  return std::optional<ToolCall>(std::move(call));
}

Result<Message> map_message(const json& jm, std::string_view raw) {
  if (!jm.is_object()) return bad_request("messages entries must be objects");
  Message m;
  std::string role;
  if (auto r = jm.find("role"); r != jm.end()) {
    if (!r->is_string()) return bad_request("role must be a string");
    role = r->get<std::string>();
  }
  DS4_ASSIGN_OR_RETURN(m.role, parse_role(role));
  if (m.role == Role::latest_reminder) m.role = Role::system;  // not an OpenAI role
  auto content = jm.find("content");
  DS4_ASSIGN_OR_RETURN(m.content, detail::flatten_text(content == jm.end() ? json() : *content));
  if (m.role == Role::assistant) {
    if (auto rc = jm.find("reasoning_content"); rc != jm.end()) {
      DS4_ASSIGN_OR_RETURN(m.reasoning, detail::flatten_text(*rc));
    }
    if (auto calls = jm.find("tool_calls"); calls != jm.end() && !calls->is_null()) {
      if (!calls->is_array()) return bad_request("tool_calls must be an array");
      DS4_ASSIGN_OR_RETURN(auto elems, detail::raw_array(raw, "tool_calls", calls->size()));
      for (size_t k = 0; k < calls->size(); ++k) {
        DS4_ASSIGN_OR_RETURN(auto call, map_call((*calls)[k], elems[k]));
        if (call) m.tool_calls.push_back(std::move(*call));
      }
    }
  }
  if (auto id = jm.find("tool_call_id"); id != jm.end() && id->is_string())
    m.tool_call_id = id->get<std::string>();
  return m;
}

}  // namespace

namespace {
Result<MappedRequest> map_chat_completions_unguarded(std::string_view text, const MapOptions& options) {
  DS4_ASSIGN_OR_RETURN(json body, detail::parse_body(text));
  MappedRequest r;
  r.model = model_of(body);
  detail::ThinkControl tc;
  DS4_RETURN_IF_ERROR(apply_common_thinking(body, tc));
  r.think = tc.resolve(r.model);

  auto msgs = body.find("messages");
  if (msgs == body.end() || !msgs->is_array()) return invalid_argument("missing messages");
  DS4_ASSIGN_OR_RETURN(auto elems, detail::raw_array(text, "messages", msgs->size()));
  for (size_t k = 0; k < msgs->size(); ++k) {
    DS4_ASSIGN_OR_RETURN(Message m, map_message((*msgs)[k], elems[k]));
    r.conv.messages.push_back(std::move(m));
  }

  auto choice = body.find("tool_choice");
  const bool none = choice != body.end() && choice->is_string() && *choice == "none";
  auto tools = body.find("tools");
  if (tools != body.end() && !tools->is_null()) {
    if (!tools->is_array()) return bad_request("tools must be an array");
    if (none) {
      r.tools_dropped = !tools->empty();
    } else {
      DS4_ASSIGN_OR_RETURN(auto raw_tools, detail::raw_array(text, "tools", tools->size()));
      for (std::string_view raw_tool : raw_tools) {
        auto fn = json_text::member_raw(raw_tool, "function");
        r.conv.tools.emplace_back(fn ? *fn : raw_tool);
      }
    }
  }
  (void)options;  // chat/completions maps identically for both flavors
  return r;
}
}  // namespace

Result<MappedRequest> map_chat_completions(std::string_view text, const MapOptions& options) {
  return detail::guard_mapping([&] { return map_chat_completions_unguarded(text, options); });
}

namespace {
Result<MappedRequest> map_completions_unguarded(std::string_view text) {
  DS4_ASSIGN_OR_RETURN(json body, detail::parse_body(text));
  MappedRequest r;
  r.model = model_of(body);
  detail::ThinkControl tc;
  DS4_RETURN_IF_ERROR(apply_common_thinking(body, tc));
  r.think = tc.resolve(r.model);
  auto prompt = body.find("prompt");
  if (prompt == body.end() || prompt->is_null()) return invalid_argument("missing prompt");
  if (prompt->is_string()) {
    r.prompt = prompt->get<std::string>();
  } else if (prompt->is_array()) {
    bool found = false;
    for (const auto& p : *prompt)
      if (p.is_string()) {
        r.prompt = p.get<std::string>();
        found = true;
        break;
      }
    if (!found) return invalid_argument("missing prompt");
  } else {
    return bad_request("prompt must be a string or an array");
  }
  return r;
}
}  // namespace

Result<MappedRequest> map_completions(std::string_view text) {
  return detail::guard_mapping([&] { return map_completions_unguarded(text); });
}

}  // namespace ds4::chat
