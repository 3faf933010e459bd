// api_common.cpp — see api_common.h.
#include "chat/api_common.h"

#include "chat/json_text.h"

#include <set>

namespace ds4::chat::detail {

Status bad_request(std::string why) {
  std::string message = "invalid JSON request: ";
  message += why;
  return invalid_argument(std::move(message));
}

Status ThinkControl::apply_thinking(const json& v) {
  if (v.is_null()) return Status::Ok();
  if (v.is_boolean()) {
    explicit_control = true;
    disabled = !v.get<bool>();
    return Status::Ok();
  }
  if (v.is_object()) {
    auto type = v.find("type");
    if (type == v.end() || !type->is_string()) return Status::Ok();
    const std::string t = type->get<std::string>();
    if (t == "disabled") {
      explicit_control = true;
      disabled = true;
    } else if (t == "enabled" || t == "adaptive") {
      explicit_control = true;
      disabled = false;
    }
    return Status::Ok();
  }
  return bad_request("'thinking' must be a boolean or an object");
}

Status ThinkControl::apply_think(const json& v) {
  if (v.is_null()) return Status::Ok();
  if (!v.is_boolean()) return bad_request("'think' must be a boolean");
  explicit_control = true;
  disabled = !v.get<bool>();
  return Status::Ok();
}

Status ThinkControl::apply_effort(const json& v) {
  if (v.is_null()) return Status::Ok();
  if (!v.is_string()) return bad_request("reasoning effort must be a string");
  const std::string e = v.get<std::string>();
  if (e == "none") {
    explicit_control = true;
    disabled = true;
  } else if (e == "max") {
    explicit_control = true;
    max = true;
  } else if (e == "xhigh" || e == "high" || e == "medium" || e == "low" || e == "minimal") {
    explicit_control = true;
    max = false;
  } else {
    return bad_request("unknown reasoning effort '" + e + "'");
  }
  return Status::Ok();
}

ThinkMode ThinkControl::resolve(std::string_view model) const {
  bool off = disabled;
  if (!explicit_control) {
    if (model == "deepseek-chat") off = true;
    if (model == "deepseek-reasoner") off = false;
  }
  if (off) return ThinkMode::none;
  return max ? ThinkMode::max : ThinkMode::high;
}

Result<json> parse_body(std::string_view body) {
  auto v = json::parse(body.begin(), body.end(), nullptr, false);
  if (v.is_discarded() || !v.is_object()) return bad_request("body is not a JSON object");
  return v;
}

Result<std::string> flatten_text(const json& v) {
  if (v.is_null()) return std::string();
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) return bad_request("content must be a string, null or an array");
  std::string out;
  for (const auto& item : v) {
    if (item.is_string()) {
      out += item.get<std::string>();
    } else if (item.is_object()) {
      auto t = item.find("text");
      if (t != item.end() && t->is_string()) out += t->get<std::string>();
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
