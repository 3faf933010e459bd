// format_common.cpp — Accumulated, SSE framing, usage shapes (see format.h).
#include "server/format.h"

namespace ds4::server {

void Accumulated::add(const GenEvent& ev) {
  switch (ev.kind) {
    case GenEventKind::started:
    case GenEventKind::prefill:
      usage.prompt_tokens = ev.prefill_total;
      if (ev.kind == GenEventKind::started) usage.cached_tokens = ev.usage.cached_tokens;
      break;
    case GenEventKind::token: tokens.push_back(ev.token); break;
    case GenEventKind::reasoning: reasoning += ev.text; break;
    case GenEventKind::content: content += ev.text; break;
    case GenEventKind::call_begin:
      if (calls.size() <= ev.index) calls.resize(ev.index + 1);
      calls[ev.index].id = ev.call.id;
      calls[ev.index].name = ev.call.name;
      break;
    case GenEventKind::call_args:
      if (calls.size() <= ev.index) calls.resize(ev.index + 1);
      calls[ev.index].arguments += ev.text;
      break;
    case GenEventKind::call_end:
      if (calls.size() <= ev.index) calls.resize(ev.index + 1);
      calls[ev.index].name = ev.call.name;
      calls[ev.index].arguments = ev.call.arguments;
      if (!ev.call.id.empty()) calls[ev.index].id = ev.call.id;
      calls[ev.index].complete = true;
      break;
    case GenEventKind::done:
      finish = ev.finish;
      stop_sequence = ev.stop_sequence;
      usage = ev.usage;
      error = ev.error;
      done = true;
      // Calls that never closed (generation cut) are not calls.
      std::erase_if(calls, [](const Call& c) { return !c.complete; });
      break;
  }
}

std::string sse_data(const Json& j) { return "data: " + dump_json(j) + "\n\n"; }

std::string sse_event(const std::string& name, const Json& j) {
  return "event: " + name + "\ndata: " + dump_json(j) + "\n\n";
}

Json openai_usage(const Usage& u) {
  Json j = Json::object();
  j["prompt_tokens"] = u.prompt_tokens;
  j["completion_tokens"] = u.completion_tokens;
  j["total_tokens"] = u.prompt_tokens + u.completion_tokens;
  j["prompt_tokens_details"] = {{"cached_tokens", u.cached_tokens},
                                {"cache_write_tokens", u.prompt_tokens - u.cached_tokens}};
  j["completion_tokens_details"] = {{"reasoning_tokens", u.reasoning_tokens}};
  return j;
}

Json anthropic_usage(const Usage& u, bool include_input) {
  Json j = Json::object();
  if (include_input) {
    j["input_tokens"] = u.prompt_tokens - u.cached_tokens;
    j["cache_creation_input_tokens"] = 0;
    j["cache_read_input_tokens"] = u.cached_tokens;
  }
  j["output_tokens"] = u.completion_tokens;
  return j;
}

Json responses_usage(const Usage& u) {
  Json j = Json::object();
  j["input_tokens"] = u.prompt_tokens;
  j["input_tokens_details"] = {{"cached_tokens", u.cached_tokens},
                               {"cache_write_tokens", u.prompt_tokens - u.cached_tokens}};
  j["output_tokens"] = u.completion_tokens;
  j["output_tokens_details"] = {{"reasoning_tokens", u.reasoning_tokens}};
  j["total_tokens"] = u.prompt_tokens + u.completion_tokens;
  return j;
}

Json parse_arguments(const std::string& args) {
  Json j = Json::parse(args, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Json::object();
  return j;
}

}  // namespace ds4::server
