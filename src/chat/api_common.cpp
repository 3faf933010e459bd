// api_common.cpp — see api_common.h.
#include "chat/api_common.h"

#include "chat/json_text.h"

#include <algorithm>
#include <set>

namespace ds4::chat::detail {

Status bad_request(std::string why) {
  std::string message = "invalid JSON request: ";
  message += why;
  return invalid_argument(std::move(message));
}

Status field_error(std::string_view where, std::string_view what) {
  std::string message = "'";
  message.append(where);
  message += "' ";
  message.append(what);
  return invalid_argument(std::move(message));
}

Status ThinkControl::apply_thinking(const json& v) {
  if (v.is_null()) return Status::Ok();
  if (v.is_boolean()) {
    enabled = v.get<bool>();
    return Status::Ok();
  }
  if (!v.is_object()) return invalid_argument("'thinking' must be an object like {\"type\":\"enabled\"} or a boolean");
  auto type = v.find("type");
  if (type == v.end() || !type->is_string()) return invalid_argument("'thinking.type' must be a string");
  const std::string t = type->get<std::string>();
  if (t == "enabled" || t == "adaptive") enabled = true;
  else if (t == "disabled") enabled = false;
  else return invalid_argument("'thinking.type' must be 'enabled', 'adaptive' or 'disabled' (got '" + t + "')");
  return Status::Ok();
}

Status ThinkControl::apply_think(const json& v) {
  if (v.is_null()) return Status::Ok();
  if (!v.is_boolean()) return invalid_argument("'think' must be a boolean");
  enabled = v.get<bool>();
  return Status::Ok();
}

Status ThinkControl::apply_effort(const json& v, std::string_view field) {
  if (v.is_null()) return Status::Ok();
  if (!v.is_string()) return field_error(field, "must be a string");
  const std::string e = v.get<std::string>();
  if (e == "none") effort = ThinkMode::none;
  else if (e == "max") effort = ThinkMode::max;
  else if (e == "xhigh" || e == "high" || e == "medium" || e == "low" || e == "minimal") effort = ThinkMode::high;
  else return field_error(field, "must be one of none, minimal, low, medium, high, xhigh, max (got '" + e + "')");
  return Status::Ok();
}

ThinkMode ThinkControl::resolve(std::string_view model, ThinkMode default_think) const {
  if (enabled.has_value() && !*enabled) return ThinkMode::none;
  if (effort.has_value()) return *effort;
  if (enabled.has_value()) return default_think == ThinkMode::none ? ThinkMode::high : default_think;
  if (model == "deepseek-chat") return ThinkMode::none;
  if (model == "deepseek-reasoner") return ThinkMode::high;
  return default_think;
}

Result<json> parse_body(std::string_view body) {
  auto v = json::parse(body.begin(), body.end(), nullptr, false);
  if (v.is_discarded() || !v.is_object()) return bad_request("body is not a JSON object");
  return v;
}

std::string model_of(const json& body) {
  auto it = body.find("model");
  return it != body.end() && it->is_string() ? it->get<std::string>() : std::string();
}

Result<std::string> openai_text(const json& v, std::string_view what) {
  if (v.is_null()) return std::string();
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) return field_error(what, "must be a string or an array of content parts");
  std::string out;
  for (const auto& part : v) {
    if (part.is_string()) {
      out += part.get<std::string>();
      continue;
    }
    if (!part.is_object()) return field_error(what, "parts must be objects");
    std::string type = "text";
    if (auto t = part.find("type"); t != part.end() && t->is_string()) type = t->get<std::string>();
    if (type == "text" || type == "input_text" || type == "output_text") {
      auto tx = part.find("text");
      if (tx == part.end() || !tx->is_string()) return field_error(what, "text part needs a string 'text'");
      out += tx->get<std::string>();
    } else if (type == "refusal") {
      if (auto tx = part.find("refusal"); tx != part.end() && tx->is_string()) out += tx->get<std::string>();
    } else {
      return invalid_argument("content part type '" + type + "' in '" + std::string(what) +
                              "' is not supported (this model reads text only)");
    }
  }
  return out;
}

Result<std::vector<std::string_view>> raw_array(std::string_view object, std::string_view key,
                                                size_t expected) {
  auto raw = json_text::member_raw(object, key);
  auto elems = raw ? json_text::array_elements(*raw) : std::nullopt;
  if (!elems || elems->size() != expected) {
    std::string why = "malformed array '";
    why.append(key);
    why += '\'';
    return bad_request(std::move(why));
  }
  return std::move(*elems);
}

Result<std::vector<std::string_view>> messages_array(const json& body, std::string_view text) {
  auto msgs = body.find("messages");
  if (msgs == body.end() || msgs->is_null()) return invalid_argument("missing 'messages'");
  if (!msgs->is_array()) return invalid_argument("'messages' must be an array");
  if (msgs->empty()) return invalid_argument("'messages' must contain at least one message");
  return raw_array(text, "messages", msgs->size());
}

Status read_openai_tool_choice(const json& body, std::string_view name_path, bool& none, MappedRequest& r) {
  auto choice = body.find("tool_choice");
  if (choice == body.end() || choice->is_null()) return Status::Ok();
  if (choice->is_string()) {
    const std::string c = choice->get<std::string>();
    if (c == "none") none = true;
    else if (c == "required") r.tool_force.required = true;
    else if (c != "auto") return invalid_argument("'tool_choice' must be none, auto, required or a function object");
    return Status::Ok();
  }
  if (!choice->is_object()) return invalid_argument("'tool_choice' must be a string or an object");
  const json* holder = &*choice;
  std::string_view key = name_path;
  if (const size_t dot = name_path.find('.'); dot != std::string_view::npos) {
    auto inner = choice->find(std::string(name_path.substr(0, dot)));
    holder = inner != choice->end() && inner->is_object() ? &*inner : nullptr;
    key = name_path.substr(dot + 1);
  }
  std::string name;
  if (holder) DS4_RETURN_IF_ERROR(read_string(*holder, std::string(key).c_str(), name, "tool_choice." + std::string(name_path)));
  if (name.empty()) return invalid_argument("'tool_choice' object needs " + std::string(name_path));
  r.tool_force.required = true;
  r.tool_force.name = std::move(name);
  return Status::Ok();
}

Status finish_tool_choice(MappedRequest& r, bool none, const std::vector<std::string>& names,
                          std::string_view noun) {
  const std::string& forced = r.tool_force.name;
  if (!forced.empty() && std::find(names.begin(), names.end(), forced) == names.end())
    return invalid_argument("'tool_choice' names " + std::string(noun) + " '" + forced + "', which is not in 'tools'");
  if (none) {
    r.tools_dropped = !r.conv.tools.empty();
    r.conv.tools.clear();
  }
  if (r.tool_force.required && r.conv.tools.empty())
    return invalid_argument("'tool_choice' requires a tool call but no 'tools' were given");
  return Status::Ok();
}

void collect_unmatched_results(MappedRequest& r,
                               const std::vector<std::pair<size_t, std::string>>& inline_ids) {
  std::set<std::string> seen;
  size_t next_inline = 0;
  const auto& msgs = r.conv.messages;
  for (size_t i = 0; i < msgs.size(); ++i) {
    for (; next_inline < inline_ids.size() && inline_ids[next_inline].first == i; ++next_inline)
      if (!seen.count(inline_ids[next_inline].second))
        r.unmatched_tool_result_ids.push_back(inline_ids[next_inline].second);
    if (msgs[i].role == Role::assistant)
      for (const ToolCall& c : msgs[i].tool_calls) seen.insert(c.id);
    if (msgs[i].role == Role::tool && !seen.count(msgs[i].tool_call_id))
      r.unmatched_tool_result_ids.push_back(msgs[i].tool_call_id);
  }
}

}  // namespace ds4::chat::detail
