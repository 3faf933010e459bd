// map_responses.cpp — OpenAI /v1/responses request mapping (CHAT.md §5.4), the wire API of Codex CLI.
//
// Reasoning items are held as pending reasoning and attached to the next assistant message or
// function call; function calls merge into the preceding assistant message; tool outputs must name
// a call that appears earlier in the same input (the server keeps no response state:
// previous_response_id is rejected in map_common).
#include <algorithm>
#include <set>
#include <utility>

#include "server/map_request.h"

namespace ds4::server {

namespace {

Result<std::string> responses_content_text(const Json& content, const std::string& where) {
  if (content.is_null()) return std::string();
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return invalid_argument("'" + where + "' must be a string or an array of content blocks");
  std::string out;
  for (const auto& b : content) {
    if (!b.is_object()) return invalid_argument("'" + where + "' blocks must be objects");
    std::string type;
    if (auto t = b.find("type"); t != b.end() && t->is_string()) type = t->get<std::string>();
    if (type == "input_text" || type == "output_text" || type == "text" || type == "summary_text" ||
        type == "reasoning_text") {
      auto t = b.find("text");
      if (t == b.end() || !t->is_string()) return invalid_argument("'" + where + "' text block needs 'text'");
      out += t->get<std::string>();
    } else if (type == "refusal") {
      if (auto t = b.find("refusal"); t != b.end() && t->is_string()) out += t->get<std::string>();
    } else {
      return invalid_argument("'" + where + "': content type '" + type + "' is not supported (this model reads text only)");
    }
  }
  return out;
}

Result<std::string> joined_texts(const Json& arr, const std::string& where) {
  if (arr.is_null()) return std::string();
  if (!arr.is_array()) return invalid_argument("'" + where + "' must be an array");
  std::string out;
  for (const auto& b : arr) {
    if (!b.is_object() || !b.contains("text") || !b["text"].is_string())
      return invalid_argument("'" + where + "' entries need a string 'text'");
    if (!out.empty()) out += "\n";
    out += b["text"].get<std::string>();
  }
  return out;
}

struct Builder {
  chat::Conversation& conv;
  std::string pending_reasoning;
  std::set<std::string> call_ids;

  void flush_reasoning() {
    if (pending_reasoning.empty()) return;
    chat::Message m;
    m.role = chat::Role::assistant;
    m.reasoning = std::exchange(pending_reasoning, {});
    conv.messages.push_back(std::move(m));
  }
  void add_call(chat::ToolCall call) {
    call_ids.insert(call.id);
    const bool merge = !conv.messages.empty() && conv.messages.back().role == chat::Role::assistant &&
                       pending_reasoning.empty();
    if (!merge) {
      chat::Message m;
      m.role = chat::Role::assistant;
      m.reasoning = std::exchange(pending_reasoning, {});
      conv.messages.push_back(std::move(m));
    }
    conv.messages.back().tool_calls.push_back(std::move(call));
  }
  Status add_output(const std::string& call_id, std::string text, const std::string& where) {
    if (!call_ids.count(call_id))
      return invalid_argument("'" + where + "': unknown tool output call_id '" + call_id +
                              "'; replay the full Responses history including the function_call");
    flush_reasoning();
    chat::Message m;
    m.role = chat::Role::tool;
    m.content = std::move(text);
    m.tool_call_id = call_id;
    conv.messages.push_back(std::move(m));
    return Status::Ok();
  }
};

Status map_input_items(const Json& input, GenRequest& out) {
  Builder b{out.conversation, {}, {}};
  for (size_t i = 0; i < input.size(); ++i) {
    const Json& item = input[i];
    const std::string where = "input[" + std::to_string(i) + "]";
    if (!item.is_object()) return invalid_argument("'" + where + "' must be an object");
    std::string type = "message";
    DS4_RETURN_IF_ERROR(read_string(item, "type", type, where + ".type"));
    std::string status;
    DS4_RETURN_IF_ERROR(read_string(item, "status", status, where + ".status"));
    if (!status.empty() && status != "completed" && type != "message")
      return invalid_argument("'" + where + ".status' is '" + status + "'; only completed items can be replayed");
    if (type == "message") {
      std::string role_name;
      DS4_RETURN_IF_ERROR(read_string(item, "role", role_name, where + ".role"));
      auto role = chat::parse_role(role_name);
      if (!role.ok() || *role == chat::Role::tool)
        return invalid_argument("'" + where + ".role' '" + role_name + "' is not valid for a message item");
      auto content = item.find("content");
      auto text = responses_content_text(content == item.end() ? Json() : *content, where + ".content");
      if (!text.ok()) return text.status();
      if (*role == chat::Role::assistant) {
        chat::Message m;
        m.role = chat::Role::assistant;
        m.content = std::move(*text);
        m.reasoning = std::exchange(b.pending_reasoning, {});
        out.conversation.messages.push_back(std::move(m));
      } else {
        b.flush_reasoning();
        chat::Message m;
        m.role = *role;
        m.content = std::move(*text);
        out.conversation.messages.push_back(std::move(m));
      }
    } else if (type == "reasoning") {
      auto s = joined_texts(item.contains("summary") ? item["summary"] : Json(), where + ".summary");
      if (!s.ok()) return s.status();
      auto c = joined_texts(item.contains("content") ? item["content"] : Json(), where + ".content");
      if (!c.ok()) return c.status();
      std::string text = *s;
      if (!c->empty()) text += (text.empty() ? "" : "\n") + *c;
      if (!b.pending_reasoning.empty() && !text.empty()) b.pending_reasoning += "\n";
      b.pending_reasoning += text;
    } else if (type == "function_call" || type == "custom_tool_call") {
      chat::ToolCall call;
      DS4_RETURN_IF_ERROR(read_string(item, "call_id", call.id, where + ".call_id"));
      if (call.id.empty()) DS4_RETURN_IF_ERROR(read_string(item, "id", call.id, where + ".id"));
      DS4_RETURN_IF_ERROR(read_string(item, "name", call.name, where + ".name"));
      if (call.name.empty()) return invalid_argument("'" + where + ".name' is required");
      std::string ns;
      DS4_RETURN_IF_ERROR(read_string(item, "namespace", ns, where + ".namespace"));
      call.name = ns + call.name;
      const char* key = type == "function_call" ? "arguments" : "input";
      auto a = item.find(key);
      if (a == item.end() || a->is_null()) call.arguments = type == "function_call" ? "{}" : "";
      else if (a->is_string()) call.arguments = a->get<std::string>();
      else call.arguments = dump_json(*a);
      b.add_call(std::move(call));
    } else if (type == "function_call_output" || type == "custom_tool_call_output" ||
               (type.size() > 12 && type.ends_with("_call_output"))) {
      std::string call_id;
      DS4_RETURN_IF_ERROR(read_string(item, "call_id", call_id, where + ".call_id"));
      auto o = item.find("output");
      std::string text;
      if (o != item.end() && !o->is_null()) {
        if (o->is_string()) {
          text = o->get<std::string>();
        } else if (o->is_array()) {
          auto t = responses_content_text(*o, where + ".output");
          if (!t.ok()) return t.status();
          text = std::move(*t);
        } else {
          text = dump_json(*o);
        }
      }
      DS4_RETURN_IF_ERROR(b.add_output(call_id, std::move(text), where));
    } else if (type == "local_shell_call" || type == "web_search_call" || type == "tool_search_call" ||
               type == "image_generation_call") {
      chat::ToolCall call;
      DS4_RETURN_IF_ERROR(read_string(item, "call_id", call.id, where + ".call_id"));
      if (call.id.empty()) DS4_RETURN_IF_ERROR(read_string(item, "id", call.id, where + ".id"));
      call.name = type == "local_shell_call" ? "local_shell" : type == "tool_search_call" ? "tool_search" : type;
      const Json* args = nullptr;
      for (const char* k : {"action", "arguments", "input"})
        if (item.contains(k) && !item[k].is_null()) {
          args = &item[k];
          break;
        }
      call.arguments = !args ? "{}" : args->is_string() ? args->get<std::string>() : dump_json(*args);
      b.add_call(std::move(call));
    } else if (type == "compaction" || type == "context_compaction") {
      // Opaque client-side state with no text the model could read.
    } else {
      return invalid_argument("'" + where + ".type' '" + type + "' is not supported");
    }
  }
  b.flush_reasoning();
  return Status::Ok();
}

Status map_responses_tools(const Json& body, const MapOptions& opts, GenRequest& out) {
  std::vector<std::string> names;
  auto add_function = [&](const Json& t, const std::string& name_prefix) {
    std::string name = name_prefix + t.value("name", std::string());
    names.push_back(name);
    auto d = t.find("description");
    auto p = t.find("parameters");
    if (opts.flavor == chat::Flavor::ds4 && name_prefix.empty()) {
      out.conversation.tools.push_back(dump_json(t));
    } else {
      out.conversation.tools.push_back(function_object_text(name, d == t.end() ? nullptr : &*d,
                                                            p == t.end() ? nullptr : &*p));
    }
  };
  if (auto tools = body.find("tools"); tools != body.end() && !tools->is_null()) {
    if (!tools->is_array()) return invalid_argument("'tools' must be an array");
    for (size_t i = 0; i < tools->size(); ++i) {
      const Json& t = (*tools)[i];
      const std::string where = "tools[" + std::to_string(i) + "]";
      if (!t.is_object()) return invalid_argument("'" + where + "' must be an object");
      std::string type;
      DS4_RETURN_IF_ERROR(read_string(t, "type", type, where + ".type"));
      if (type == "function" || type == "custom") {
        std::string name;
        DS4_RETURN_IF_ERROR(read_string(t, "name", name, where + ".name"));
        if (name.empty()) return invalid_argument("'" + where + ".name' is required");
        add_function(t, "");
      } else if (type == "namespace") {
        std::string ns;
        DS4_RETURN_IF_ERROR(read_string(t, "name", ns, where + ".name"));
        auto members = t.find("tools");
        if (members == t.end() || !members->is_array()) return invalid_argument("'" + where + ".tools' must be an array");
        for (const auto& m : *members) {
          if (!m.is_object() || !m.contains("name") || !m["name"].is_string())
            return invalid_argument("'" + where + ".tools' entries need a string 'name'");
          add_function(m, ns);
        }
      } else {
        return invalid_argument("'" + where + ".type' '" + type + "' (a hosted tool) is not supported; only function, custom and namespace tools are");
      }
    }
  }
  if (auto choice = body.find("tool_choice"); choice != body.end() && !choice->is_null()) {
    if (choice->is_string()) {
      const std::string c = choice->get<std::string>();
      if (c == "none") out.conversation.tools.clear();
      else if (c == "required") out.tool_force.required = true;
      else if (c != "auto") return invalid_argument("'tool_choice' must be none, auto, required or a function object");
    } else if (choice->is_object()) {
      std::string name;
      DS4_RETURN_IF_ERROR(read_string(*choice, "name", name, "tool_choice.name"));
      if (std::find(names.begin(), names.end(), name) == names.end())
        return invalid_argument("'tool_choice' names function '" + name + "', which is not in 'tools'");
      out.tool_force.required = true;
      out.tool_force.name = name;
    } else {
      return invalid_argument("'tool_choice' must be a string or an object");
    }
  }
  if (out.tool_force.required && out.conversation.tools.empty())
    return invalid_argument("'tool_choice' requires a tool call but no 'tools' were given");
  out.tools_enabled = !out.conversation.tools.empty();
  return Status::Ok();
}

}  // namespace

Result<GenRequest> map_responses(const Json& body, const MapOptions& opts) {
  GenRequest out;
  out.api = ApiKind::openai_responses;
  out.prompt_param = "input";
  DS4_RETURN_IF_ERROR(reject_unsupported(body, out.api));
  DS4_RETURN_IF_ERROR(resolve_model_and_thinking(body, out.api, opts, out));
  DS4_RETURN_IF_ERROR(read_sampling(body, out.api, out));
  DS4_RETURN_IF_ERROR(read_bool(body, "stream", out.stream));
  std::string instructions;
  DS4_RETURN_IF_ERROR(read_string(body, "instructions", instructions));
  if (!instructions.empty()) {
    chat::Message m;
    m.role = chat::Role::system;
    m.content = std::move(instructions);
    out.conversation.messages.push_back(std::move(m));
  }
  auto input = body.find("input");
  if (input == body.end() || input->is_null()) return invalid_argument("missing 'input'");
  if (input->is_string()) {
    chat::Message m;
    m.role = chat::Role::user;
    m.content = input->get<std::string>();
    out.conversation.messages.push_back(std::move(m));
  } else if (input->is_array()) {
    if (input->empty()) return invalid_argument("'input' must not be empty");
    DS4_RETURN_IF_ERROR(map_input_items(*input, out));
  } else {
    return invalid_argument("'input' must be a string or an array of items");
  }
  DS4_RETURN_IF_ERROR(map_responses_tools(body, opts, out));
  return out;
}

}  // namespace ds4::server
