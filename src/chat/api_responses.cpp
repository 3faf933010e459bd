// api_responses.cpp — POST /v1/responses (OpenAI Responses, the Codex path) -> MappedRequest
// (CHAT.md §5.4). Reasoning items are held pending and attached to the next assistant turn;
// calls merge into a preceding assistant message; outputs become tool messages.
#include "chat/api_common.h"
#include "chat/json_text.h"

namespace ds4::chat {

using detail::bad_request;
using detail::json;

namespace {

bool is_text_block(const std::string& type) {
  return type == "input_text" || type == "output_text" || type == "text" ||
         type == "summary_text" || type == "reasoning_text";
}

Result<std::string> content_text(const json& v) {
  if (v.is_null()) return std::string();
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) return bad_request("content must be a string or an array");
  std::string out;
  for (const auto& b : v) {
    if (!b.is_object()) return bad_request("content blocks must be objects");
    const std::string type = b.value("type", "");
    if (!is_text_block(type)) return bad_request("unsupported content block type '" + type + "'");
    if (b.contains("text") && b["text"].is_string()) out += b["text"].get<std::string>();
  }
  return out;
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

Result<std::string> output_text(const json& item) {
  auto it = item.find("output");
  if (it == item.end() || it->is_null()) return std::string();
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) return detail::flatten_text(*it);
  return it->dump();
}

// A tool object of the request -> schema lines.
void add_tool(const json& tool, std::string_view raw, Flavor flavor, std::vector<std::string>& out) {
  const std::string type = tool.value("type", "");
  auto compact = [](const json& name, const json& t) {
    nlohmann::ordered_json fn;
    fn["name"] = name;
    if (t.contains("description")) fn["description"] = t["description"];
    if (t.contains("parameters")) fn["parameters"] = t["parameters"];
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
  out.emplace_back(raw);
}

Status map_item(const json& item, std::string_view raw, Flavor flavor, Builder& b,
                std::vector<std::string>& extra_tools) {
  if (!item.is_object()) return bad_request("input items must be objects");
  std::string type = item.value("type", "");
  if (type.empty() && item.contains("role")) type = "message";
  if (auto st = item.find("status"); st != item.end() && !st->is_null() && *st != "completed")
    return bad_request("input item status must be completed");
  if (type == "message") {
    const std::string role = item.value("role", "user");
    Message m;
    DS4_ASSIGN_OR_RETURN(m.role, parse_role(role));
    if (m.role == Role::tool || m.role == Role::latest_reminder)
      return bad_request("unsupported message role '" + role + "'");
    DS4_ASSIGN_OR_RETURN(m.content, content_text(item.contains("content") ? item["content"] : json()));
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
    std::string text;
    bool first = true;
    for (const char* key : {"summary", "content"}) {
      auto it = item.find(key);
      if (it == item.end() || !it->is_array()) continue;
      for (const auto& part : *it)
        if (part.is_object() && part.contains("text") && part["text"].is_string()) {
          if (!first) text += '\n';
          text += part["text"].get<std::string>();
          first = false;
        }
    }
    if (b.pending_reasoning) b.pending_reasoning = *b.pending_reasoning + "\n" + text;
    else b.pending_reasoning = std::move(text);
    return Status::Ok();
  }
  auto call_id = [&] {
    std::string id = item.value("call_id", "");
    return id.empty() ? item.value("id", "") : id;
  };
  if (type == "function_call" || type == "custom_tool_call") {
    ToolCall call;
    call.id = call_id();
    call.name = item.value("namespace", "") + item.value("name", "");
    call.arguments = raw_or_empty_object(raw, {"arguments", "input"}, item);
    b.add_call(std::move(call));
    return Status::Ok();
  }
  if (type == "local_shell_call" || type == "web_search_call" || type == "tool_search_call" ||
      type == "image_generation_call") {
    ToolCall call;
    call.id = call_id();
    call.name = type == "local_shell_call" ? "local_shell" : type == "tool_search_call" ? "tool_search" : type;
    call.arguments = raw_or_empty_object(raw, {"action", "arguments", "input"}, item);
    b.add_call(std::move(call));
    return Status::Ok();
  }
  if (type == "function_call_output" || type == "custom_tool_call_output" ||
      type == "local_shell_call_output" || type == "web_search_call_output" ||
      type == "tool_search_output" || type == "image_generation_call_output") {
    DS4_ASSIGN_OR_RETURN(std::string text, output_text(item));
    if (type == "tool_search_output" && item.contains("tools") && item["tools"].is_array()) {
      DS4_ASSIGN_OR_RETURN(auto elems, detail::raw_array(raw, "tools", item["tools"].size()));
      for (size_t k = 0; k < item["tools"].size(); ++k)
        if (item["tools"][k].is_object()) add_tool(item["tools"][k], elems[k], flavor, extra_tools);
    }
    b.add_output(std::move(text), call_id());
    return Status::Ok();
  }
  if (type == "compaction" || type == "context_compaction") return Status::Ok();
  return bad_request("unsupported input item type '" + type + "'");
}

}  // namespace

namespace {
Result<MappedRequest> map_responses_unguarded(std::string_view text, const MapOptions& options) {
  DS4_ASSIGN_OR_RETURN(json body, detail::parse_body(text));
  MappedRequest r;
  if (auto it = body.find("model"); it != body.end() && it->is_string()) r.model = it->get<std::string>();
  for (const char* key : {"previous_response_id", "conversation"})
    if (auto it = body.find(key); it != body.end() && !it->is_null())
      return invalid_argument(std::string(key) + " is not supported; replay full input instead");
  detail::ThinkControl tc;
  if (auto it = body.find("reasoning"); it != body.end() && it->is_object() && it->contains("effort"))
    DS4_RETURN_IF_ERROR(tc.apply_effort((*it)["effort"]));
  r.think = tc.resolve(r.model);

  if (auto it = body.find("instructions"); it != body.end() && it->is_string() && !it->get<std::string>().empty()) {
    Message m;
    m.role = Role::system;
    m.content = it->get<std::string>();
    r.conv.messages.push_back(std::move(m));
  }
  auto input = body.find("input");
  if (input == body.end() || input->is_null()) return invalid_argument("missing input");
  Builder b{r.conv.messages, std::nullopt};
  std::vector<std::string> extra_tools;
  if (input->is_string()) {
    Message m;
    m.role = Role::user;
    m.content = input->get<std::string>();
    r.conv.messages.push_back(std::move(m));
  } else if (input->is_array()) {
    DS4_ASSIGN_OR_RETURN(auto elems, detail::raw_array(text, "input", input->size()));
    for (size_t k = 0; k < input->size(); ++k)
      DS4_RETURN_IF_ERROR(map_item((*input)[k], elems[k], options.flavor, b, extra_tools));
    b.flush_reasoning();
  } else {
    return bad_request("input must be a string or an array");
  }

  auto choice = body.find("tool_choice");
  bool none = false;
  if (choice != body.end() && !choice->is_null()) {
    if (choice->is_string() && *choice == "none") none = true;
    else if (!(choice->is_string() && *choice == "auto"))
      return invalid_argument("tool_choice other than \"auto\" or \"none\" is not supported");
  }
  auto tools = body.find("tools");
  if (tools != body.end() && !tools->is_null()) {
    if (!tools->is_array()) return bad_request("tools must be an array");
    if (none) {
      r.tools_dropped = !tools->empty();
    } else {
      DS4_ASSIGN_OR_RETURN(auto elems, detail::raw_array(text, "tools", tools->size()));
      for (size_t k = 0; k < tools->size(); ++k)
        if ((*tools)[k].is_object()) add_tool((*tools)[k], elems[k], options.flavor, r.conv.tools);
    }
  }
  if (!none) r.conv.tools.insert(r.conv.tools.end(), extra_tools.begin(), extra_tools.end());
  detail::collect_unmatched_results(r, {});
  return r;
}
}  // namespace

Result<MappedRequest> map_responses(std::string_view text, const MapOptions& options) {
  return detail::guard_mapping([&] { return map_responses_unguarded(text, options); });
}

}  // namespace ds4::chat
