// map_request.cpp — see map_request.h. The per-API server fields (stop key, stream options,
// logprobs, reasoning summary) and the hand-over to chat's mapper.
#include "server/map_request.h"

#include "chat/api_map.h"

namespace ds4::server {

namespace {

Status read_stream(const Json& body, bool with_options, GenRequest& out) {
  DS4_RETURN_IF_ERROR(read_bool(body, "stream", out.stream));
  if (!with_options) return Status::Ok();
  if (auto so = body.find("stream_options"); so != body.end() && !so->is_null()) {
    if (!so->is_object()) return invalid_argument("'stream_options' must be an object");
    DS4_RETURN_IF_ERROR(read_bool(*so, "include_usage", out.include_usage, "stream_options.include_usage"));
  }
  return Status::Ok();
}

// chat/completions: logprobs (bool) + top_logprobs (0..20).
Status read_chat_logprobs(const Json& body, GenRequest& out) {
  bool logprobs = false;
  DS4_RETURN_IF_ERROR(read_bool(body, "logprobs", logprobs));
  std::optional<int64_t> top;
  DS4_RETURN_IF_ERROR(read_int(body, "top_logprobs", top));
  if (top && (*top < 0 || *top > 20)) return invalid_argument("'top_logprobs' must be between 0 and 20");
  if (top && !logprobs) return invalid_argument("'top_logprobs' requires 'logprobs': true");
  if (logprobs) out.logprobs_top = static_cast<int>(top.value_or(0));
  return Status::Ok();
}

// completions: logprobs is the number of alternatives (0..20), or a boolean.
Status read_completion_logprobs(const Json& body, GenRequest& out) {
  auto lp = body.find("logprobs");
  if (lp == body.end() || lp->is_null()) return Status::Ok();
  if (lp->is_boolean()) {
    if (lp->get<bool>()) out.logprobs_top = 0;
  } else if (lp->is_number_integer()) {
    const int64_t n = lp->get<int64_t>();
    if (n < 0 || n > 20) return invalid_argument("'logprobs' must be between 0 and 20");
    out.logprobs_top = static_cast<int>(n);
  } else {
    return invalid_argument("'logprobs' must be an integer");
  }
  return Status::Ok();
}

// Responses: reasoning.summary turns on reasoning items in the output (`reasoning` itself is
// checked by the mapper).
Status read_reasoning_summary(const Json& body, GenRequest& out) {
  auto rs = body.find("reasoning");
  if (rs == body.end() || !rs->is_object()) return Status::Ok();
  auto it = rs->find("summary");
  if (it == rs->end() || it->is_null()) return Status::Ok();
  if (!it->is_string()) return invalid_argument("'reasoning.summary' must be a string");
  const std::string s = it->get<std::string>();
  if (s != "auto" && s != "concise" && s != "detailed" && s != "none")
    return invalid_argument("'reasoning.summary' must be auto, concise, detailed or none");
  out.reasoning_summary = s != "none";
  return Status::Ok();
}

Status read_server_fields(ApiKind api, const Json& body, const MapOptions& opts, GenRequest& out) {
  DS4_RETURN_IF_ERROR(reject_unsupported(body, api));
  DS4_RETURN_IF_ERROR(resolve_model(body, opts, out));
  DS4_RETURN_IF_ERROR(read_sampling(body, api, out));
  switch (api) {
    case ApiKind::openai_chat:
      DS4_RETURN_IF_ERROR(read_stop(body, "stop", out));
      DS4_RETURN_IF_ERROR(read_stream(body, true, out));
      return read_chat_logprobs(body, out);
    case ApiKind::openai_completions:
      DS4_RETURN_IF_ERROR(read_stop(body, "stop", out));
      DS4_RETURN_IF_ERROR(read_stream(body, true, out));
      // Benchmarks (ds4-loadgen) need exactly max_tokens tokens whatever the model prefers.
      DS4_RETURN_IF_ERROR(read_bool(body, "ignore_eos", out.ignore_eos, "ignore_eos"));
      return read_completion_logprobs(body, out);
    case ApiKind::anthropic_messages:
      DS4_RETURN_IF_ERROR(read_stop(body, "stop_sequences", out));
      return read_stream(body, false, out);
    case ApiKind::openai_responses:
      DS4_RETURN_IF_ERROR(read_stream(body, false, out));
      return read_reasoning_summary(body, out);
  }
  return Status::Ok();
}

// The server keeps no Responses state, so a tool output must follow its call in the same input
// (a live-session continuation is not modelled). Names the first output item carrying `id`.
Status unknown_call_output(const Json& body, const std::string& id) {
  std::string where = "input";
  if (auto input = body.find("input"); input != body.end() && input->is_array()) {
    for (size_t i = 0; i < input->size(); ++i) {
      const Json& item = (*input)[i];
      if (!item.is_object()) continue;
      auto c = item.find("call_id");
      const bool by_call_id = c != item.end() && c->is_string() && c->get<std::string>() == id;
      auto d = item.find("id");
      const bool by_id = (c == item.end() || c->is_null() || (c->is_string() && c->get<std::string>().empty())) &&
                         d != item.end() && d->is_string() && d->get<std::string>() == id;
      if (by_call_id || by_id) where = "input[" + std::to_string(i) + "]";
      if (by_call_id || by_id) break;
    }
  }
  return invalid_argument("'" + where + "': unknown tool output call_id '" + id +
                          "'; replay the full Responses history including the function_call");
}

Result<GenRequest> map_request_unguarded(ApiKind api, const Json& body, const MapOptions& opts,
                                         std::string_view raw_body) {
  GenRequest out;
  out.api = api;
  out.prompt_param = api == ApiKind::openai_completions ? "prompt"
                     : api == ApiKind::openai_responses ? "input"
                                                        : "messages";
  DS4_RETURN_IF_ERROR(read_server_fields(api, body, opts, out));

  std::string reserialised;
  if (raw_body.empty()) raw_body = reserialised = dump_json(body);
  chat::MapOptions co;
  co.flavor = opts.flavor;
  co.default_think = opts.default_think;
  Result<chat::MappedRequest> m = invalid_argument("unknown API");
  switch (api) {
    case ApiKind::openai_chat: m = chat::map_chat_completions(raw_body, co); break;
    case ApiKind::openai_completions: m = chat::map_completions(raw_body, co); break;
    case ApiKind::anthropic_messages: m = chat::map_anthropic_messages(raw_body, co); break;
    case ApiKind::openai_responses: m = chat::map_responses(raw_body, co); break;
  }
  if (!m.ok()) return m.status();
  if (api == ApiKind::openai_responses && !m->unmatched_tool_result_ids.empty())
    return unknown_call_output(body, m->unmatched_tool_result_ids.front());
  out.think = chat::think_mode_for_context(m->think, opts.ctx);
  if (api == ApiKind::openai_completions) {
    out.raw_completion = true;
    out.prompt_text = std::move(m->prompt);
    return out;
  }
  out.conversation = std::move(m->conv);
  out.tool_force = std::move(m->tool_force);
  out.tools_enabled = !out.conversation.tools.empty();
  return out;
}

}  // namespace

Result<GenRequest> map_request(ApiKind api, const Json& body, const MapOptions& opts, std::string_view raw_body) {
  try {
    return map_request_unguarded(api, body, opts, raw_body);
  } catch (const std::exception& e) {
    return invalid_argument(std::string("invalid request: ") + e.what());
  }
}

}  // namespace ds4::server
