// map_openai.cpp — OpenAI /v1/chat/completions and /v1/completions request mapping (CHAT.md §5.2, §5.5).
#include "server/map_request.h"

#include "chat/api_map.h"

#include <algorithm>

namespace ds4::server {

Result<std::string> flatten_openai_content(const Json& content, std::string_view what) {
  if (content.is_null()) return std::string();
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return invalid_argument("'" + std::string(what) + "' must be a string or an array of content parts");
  std::string out;
  for (const auto& part : content) {
    if (part.is_string()) {
      out += part.get<std::string>();
      continue;
    }
    if (!part.is_object()) return invalid_argument("'" + std::string(what) + "' parts must be objects");
    std::string type = "text";
    if (auto t = part.find("type"); t != part.end() && t->is_string()) type = t->get<std::string>();
    if (type == "text" || type == "input_text" || type == "output_text") {
      auto tx = part.find("text");
      if (tx == part.end() || !tx->is_string())
        return invalid_argument("'" + std::string(what) + "' text part needs a string 'text'");
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

std::string function_object_text(const std::string& name, const Json* description, const Json* parameters) {
  Json f = Json::object();
  f["name"] = name;
  if (description && !description->is_null()) f["description"] = *description;
  if (parameters && !parameters->is_null()) f["parameters"] = *parameters;
  return dump_json(f);
}

// OpenAI `tools` + `tool_choice` -> conversation tools and forcing.
static Status map_openai_tools(const Json& body, const MapOptions& opts, GenRequest& out) {
  auto tools = body.find("tools");
  std::vector<std::string> names;
  if (tools != body.end() && !tools->is_null()) {
    if (!tools->is_array()) return invalid_argument("'tools' must be an array");
    for (size_t i = 0; i < tools->size(); ++i) {
      const Json& t = (*tools)[i];
      const std::string where = "tools[" + std::to_string(i) + "]";
      if (!t.is_object()) return invalid_argument("'" + where + "' must be an object");
      std::string type = "function";
      DS4_RETURN_IF_ERROR(read_string(t, "type", type, where + ".type"));
      if (type != "function") return invalid_argument("'" + where + ".type' '" + type + "' is not supported; only function tools are");
      auto fn = t.find("function");
      if (fn == t.end() || !fn->is_object()) return invalid_argument("'" + where + ".function' must be an object");
      std::string name;
      DS4_RETURN_IF_ERROR(read_string(*fn, "name", name, where + ".function.name"));
      if (name.empty()) return invalid_argument("'" + where + ".function.name' is required");
      names.push_back(name);
      if (opts.flavor == chat::Flavor::ds4) {
        out.conversation.tools.push_back(dump_json(*fn));
      } else {
        auto d = fn->find("description");
        auto p = fn->find("parameters");
        out.conversation.tools.push_back(function_object_text(name, d == fn->end() ? nullptr : &*d,
                                                              p == fn->end() ? nullptr : &*p));
      }
    }
  }
  auto choice = body.find("tool_choice");
  if (choice != body.end() && !choice->is_null()) {
    if (choice->is_string()) {
      const std::string c = choice->get<std::string>();
      if (c == "none") out.conversation.tools.clear();
      else if (c == "required") out.tool_force.required = true;
      else if (c != "auto") return invalid_argument("'tool_choice' must be none, auto, required or a function object");
    } else if (choice->is_object()) {
      auto fn = choice->find("function");
      std::string name;
      if (fn != choice->end() && fn->is_object()) DS4_RETURN_IF_ERROR(read_string(*fn, "name", name, "tool_choice.function.name"));
      if (name.empty()) return invalid_argument("'tool_choice' object needs function.name");
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

static Status map_openai_logprobs(const Json& body, GenRequest& out) {
  bool logprobs = false;
  DS4_RETURN_IF_ERROR(read_bool(body, "logprobs", logprobs));
  std::optional<int64_t> top;
  DS4_RETURN_IF_ERROR(read_int(body, "top_logprobs", top));
  if (top && (*top < 0 || *top > 20)) return invalid_argument("'top_logprobs' must be between 0 and 20");
  if (top && !logprobs) return invalid_argument("'top_logprobs' requires 'logprobs': true");
  if (logprobs) out.logprobs_top = static_cast<int>(top.value_or(0));
  return Status::Ok();
}

static Status map_stream(const Json& body, GenRequest& out) {
  DS4_RETURN_IF_ERROR(read_bool(body, "stream", out.stream));
  if (auto so = body.find("stream_options"); so != body.end() && !so->is_null()) {
    if (!so->is_object()) return invalid_argument("'stream_options' must be an object");
    DS4_RETURN_IF_ERROR(read_bool(*so, "include_usage", out.include_usage, "stream_options.include_usage"));
  }
  return Status::Ok();
}

Result<GenRequest> map_chat_completions(const Json& body, const MapOptions& opts) {
  GenRequest out;
  out.api = ApiKind::openai_chat;
  out.prompt_param = "messages";
  DS4_RETURN_IF_ERROR(reject_unsupported(body, out.api));
  DS4_RETURN_IF_ERROR(resolve_model_and_thinking(body, out.api, opts, out));
  DS4_RETURN_IF_ERROR(read_sampling(body, out.api, out));
  DS4_RETURN_IF_ERROR(read_stop(body, "stop", out));
  DS4_RETURN_IF_ERROR(map_stream(body, out));
  DS4_RETURN_IF_ERROR(map_openai_logprobs(body, out));

  auto msgs = body.find("messages");
  if (msgs == body.end() || msgs->is_null()) return invalid_argument("missing 'messages'");
  if (!msgs->is_array()) return invalid_argument("'messages' must be an array");
  if (msgs->empty()) return invalid_argument("'messages' must contain at least one message");
  for (size_t i = 0; i < msgs->size(); ++i) {
    const Json& m = (*msgs)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return invalid_argument("'" + where + "' must be an object");
    std::string role_name;
    DS4_RETURN_IF_ERROR(read_string(m, "role", role_name, where + ".role"));
    auto role = chat::parse_role(role_name);
    if (!role.ok()) return invalid_argument("'" + where + ".role' '" + role_name + "' is not a valid role");
    chat::Message msg;
    msg.role = *role;
    auto content = m.find("content");
    auto text = flatten_openai_content(content == m.end() ? Json() : *content, where + ".content");
    if (!text.ok()) return text.status();
    msg.content = std::move(*text);
    for (const char* rk : {"reasoning_content", "reasoning"}) {
      if (auto r = m.find(rk); r != m.end() && !r->is_null()) {
        auto rt = flatten_openai_content(*r, where + "." + rk);
        if (!rt.ok()) return rt.status();
        msg.reasoning = std::move(*rt);
        break;
      }
    }
    if (auto tc = m.find("tool_calls"); tc != m.end() && !tc->is_null()) {
      if (!tc->is_array()) return invalid_argument("'" + where + ".tool_calls' must be an array");
      for (size_t k = 0; k < tc->size(); ++k) {
        const Json& c = (*tc)[k];
        const std::string cw = where + ".tool_calls[" + std::to_string(k) + "]";
        if (!c.is_object()) return invalid_argument("'" + cw + "' must be an object");
        chat::ToolCall call;
        DS4_RETURN_IF_ERROR(read_string(c, "id", call.id, cw + ".id"));
        auto fn = c.find("function");
        if (fn == c.end() || !fn->is_object()) return invalid_argument("'" + cw + ".function' must be an object");
        DS4_RETURN_IF_ERROR(read_string(*fn, "name", call.name, cw + ".function.name"));
        if (call.name.empty()) return invalid_argument("'" + cw + ".function.name' is required");
        auto args = fn->find("arguments");
        if (args == fn->end() || args->is_null()) call.arguments = "{}";
        else if (args->is_string()) call.arguments = args->get<std::string>();
        else call.arguments = dump_json(*args);
        msg.tool_calls.push_back(std::move(call));
      }
    }
    DS4_RETURN_IF_ERROR(read_string(m, "tool_call_id", msg.tool_call_id, where + ".tool_call_id"));
    if (msg.role == chat::Role::tool && msg.tool_call_id.empty()) {
      std::string name;  // legacy "function" role carries a name instead of an id
      DS4_RETURN_IF_ERROR(read_string(m, "name", name, where + ".name"));
    }
    out.conversation.messages.push_back(std::move(msg));
  }
  DS4_RETURN_IF_ERROR(map_openai_tools(body, opts, out));
  return out;
}

Result<GenRequest> map_completions(const Json& body, const MapOptions& opts) {
  GenRequest out;
  out.api = ApiKind::openai_completions;
  out.raw_completion = true;
  out.prompt_param = "prompt";
  DS4_RETURN_IF_ERROR(reject_unsupported(body, out.api));
  DS4_RETURN_IF_ERROR(resolve_model_and_thinking(body, out.api, opts, out));
  DS4_RETURN_IF_ERROR(read_sampling(body, out.api, out));
  DS4_RETURN_IF_ERROR(read_stop(body, "stop", out));
  DS4_RETURN_IF_ERROR(map_stream(body, out));
  // Benchmarks (ds4-loadgen) need exactly max_tokens tokens whatever the model prefers.
  DS4_RETURN_IF_ERROR(read_bool(body, "ignore_eos", out.ignore_eos, "ignore_eos"));
  if (auto lp = body.find("logprobs"); lp != body.end() && !lp->is_null()) {
    if (lp->is_boolean()) {
      if (lp->get<bool>()) out.logprobs_top = 0;
    } else if (lp->is_number_integer()) {
      int64_t n = lp->get<int64_t>();
      if (n < 0 || n > 20) return invalid_argument("'logprobs' must be between 0 and 20");
      out.logprobs_top = static_cast<int>(n);
    } else {
      return invalid_argument("'logprobs' must be an integer");
    }
  }
  auto prompt = body.find("prompt");
  if (prompt == body.end() || prompt->is_null()) return invalid_argument("missing 'prompt'");
  if (prompt->is_string()) {
    out.prompt_text = prompt->get<std::string>();
  } else if (prompt->is_array()) {
    if (prompt->size() != 1 || !(*prompt)[0].is_string())
      return invalid_argument("'prompt' must be a string or an array holding exactly one string (batches are not supported)");
    out.prompt_text = (*prompt)[0].get<std::string>();
  } else {
    return invalid_argument("'prompt' must be a string");
  }
  if (out.prompt_text.empty()) return invalid_argument("'prompt' must not be empty");
  return out;
}

Result<GenRequest> map_request(ApiKind api, const Json& body, const MapOptions& opts, std::string_view raw_body) {
  Result<GenRequest> r = invalid_argument("unknown API");
  try {
    switch (api) {
      case ApiKind::openai_chat: r = map_chat_completions(body, opts); break;
      case ApiKind::openai_completions: r = map_completions(body, opts); break;
      case ApiKind::anthropic_messages: r = map_anthropic_messages(body, opts); break;
      case ApiKind::openai_responses: r = map_responses(body, opts); break;
    }
  } catch (const std::exception& e) {
    return invalid_argument(std::string("invalid request: ") + e.what());
  }
  if (!r.ok() || raw_body.empty() || api == ApiKind::openai_completions) return r;
  // Prefer the chat module's mapping for the conversation itself: it keeps the client's raw bytes
  // (tool schema lines, tool-call arguments) so R-DS4 renders byte-identically to ds4-server. Our
  // mapping above validated everything and holds what chat's does not model (tool forcing, which
  // chat's Responses mapper refuses); where chat's refuses, ours stands.
  chat::MapOptions co;
  co.flavor = opts.flavor;
  Result<chat::MappedRequest> m = invalid_argument("");
  try {
    switch (api) {
      case ApiKind::openai_chat: m = chat::map_chat_completions(raw_body, co); break;
      case ApiKind::anthropic_messages: m = chat::map_anthropic_messages(raw_body, co); break;
      case ApiKind::openai_responses: m = chat::map_responses(raw_body, co); break;
      default: break;
    }
  } catch (const std::exception&) {
    m = invalid_argument("");  // keep our own mapping
  }
  if (m.ok()) {
    const bool tools = !r->conversation.tools.empty();
    r->conversation = std::move(m->conv);
    if (!tools) r->conversation.tools.clear();
    r->tools_enabled = !r->conversation.tools.empty();
  }
  return r;
}

}  // namespace ds4::server
