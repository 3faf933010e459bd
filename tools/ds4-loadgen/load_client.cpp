// load_client.cpp — see load_client.h. Parses the OpenAI completions SSE stream incrementally:
// "data: {...}\n\n" events, text in choices[0].text, usage in the final chunk (include_usage).
#include "load_client.h"

#include <httplib.h>

#include <nlohmann/json.hpp>

namespace ds4::loadgen {

using Json = nlohmann::json;

RequestResult run_request(const Target& target, const RequestSpec& spec) {
  RequestResult r;
  httplib::Client c(target.host, target.port);
  c.set_read_timeout(spec.timeout_s, 0);
  c.set_write_timeout(spec.timeout_s, 0);
  Json body = {{"model", "deepseek-v4-flash"},
               {"prompt", spec.prompt},
               {"max_tokens", spec.max_tokens},
               {"temperature", 0},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  if (spec.ignore_eos) body["ignore_eos"] = true;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  if (!spec.api_key.empty()) req.set_header("Authorization", "Bearer " + spec.api_key);
  std::string buf, raw;
  bool first = true;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    const auto now = Clock::now();
    buf.append(data, n);
    if (raw.size() < 4096) raw.append(data, std::min<size_t>(n, 4096));
    size_t end;
    while ((end = buf.find("\n\n")) != std::string::npos) {
      std::string ev = buf.substr(0, end);
      buf.erase(0, end + 2);
      if (ev.rfind("data: ", 0) != 0) continue;
      std::string payload = ev.substr(6);
      if (payload == "[DONE]") continue;
      Json j = Json::parse(payload, nullptr, false);
      if (j.is_discarded()) continue;
      if (j.contains("error")) {
        r.error = j["error"].dump();
        continue;
      }
      if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
        const Json& ch = j["choices"][0];
        if (ch.contains("text") && ch["text"].is_string() && !ch["text"].get<std::string>().empty()) {
          ++r.chunks;
          r.text_times.push_back(now);
          if (first) {
            r.t_first = now;
            first = false;
          }
          r.t_last = now;
        }
      }
      if (j.contains("usage") && j["usage"].is_object()) {
        const Json& u = j["usage"];
        r.prompt_tokens = u.value("prompt_tokens", int64_t{0});
        r.completion_tokens = u.value("completion_tokens", int64_t{0});
        if (u.contains("prompt_tokens_details") && u["prompt_tokens_details"].is_object())
          r.cached_tokens = u["prompt_tokens_details"].value("cached_tokens", int64_t{0});
      }
    }
    return true;
  };
  r.t_send = Clock::now();
  auto res = c.send(req);
  r.t_end = Clock::now();
  if (!res) {
    r.error = "connection failed: " + httplib::to_string(res.error());
    return r;
  }
  r.http_status = res->status;
  if (res->status != 200) {
    if (r.error.empty()) r.error = "HTTP " + std::to_string(res->status) + ": " + raw.substr(0, 300);
    return r;
  }
  if (first) {  // no text at all: time the first token at the end
    r.t_first = r.t_last = r.t_end;
  }
  r.ok = r.error.empty();
  return r;
}

}  // namespace ds4::loadgen
