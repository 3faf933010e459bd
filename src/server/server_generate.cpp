// server_generate.cpp — the generation endpoints: parse -> map -> render/tokenize (this HTTP thread),
// enqueue on the engine worker, then relay the job's events as one JSON body or an SSE stream.
// While waiting, the thread polls its socket: a client that disconnects cancels its job, also during
// prefill and for non-streaming requests. SSE comments keep idle streams (queue wait, long prefill)
// alive.
#include <ctime>

#include "server/format.h"
#include "server/map_request.h"
#include "server/server_impl.h"
#include "server/text_util.h"

namespace ds4::server {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPollInterval = std::chrono::milliseconds(100);

const char* id_prefix(ApiKind api) {
  switch (api) {
    case ApiKind::openai_chat: return "chatcmpl-";
    case ApiKind::openai_completions: return "cmpl-";
    case ApiKind::anthropic_messages: return "msg_";
    case ApiKind::openai_responses: return "resp_";
  }
  return "";
}

}  // namespace

void Server::Impl::handle_generate(ApiKind api, const httplib::Request& req, httplib::Response& res) {
  const std::string endpoint = api_kind_name(api);
  if (draining) {
    send_error(api, api_error_from_status(unavailable("server shutting down")), res, endpoint);
    return;
  }
  auto body = parse_request_json(req.body);
  if (!body.ok()) {
    send_error(api, api_error_from_status(body.status()), res, endpoint);
    return;
  }
  auto gen = map_request(api, *body, opts.map, req.body);
  if (!gen.ok()) {
    send_error(api, api_error_from_status(gen.status()), res, endpoint);
    return;
  }
  auto job = std::make_shared<Job>();
  job->req = std::move(gen).value();
  PromptOptions po;
  po.flavor = opts.map.flavor;
  po.exact_dsml_replay = opts.worker.exact_dsml_replay;
  auto rp = render_and_tokenize(job->req, engine.tokenizer(), po, &replay);
  if (!rp.ok()) {
    ApiError e = api_error_from_status(rp.status());
    e.param = job->req.prompt_param;
    send_error(api, e, res, endpoint);
    return;
  }
  const int64_t n_prompt = static_cast<int64_t>(rp->tokens.size());
  if (n_prompt >= opts.map.ctx) {
    send_error(api, context_length_error(n_prompt, opts.map.ctx, job->req.prompt_param), res, endpoint);
    return;
  }
  job->prompt = std::move(rp->tokens);
  if (trace) job->rendered = std::move(rp->text);
  job->id = next_job_id++;
  if (opts.request_timeout.count() > 0) job->deadline = Clock::now() + opts.request_timeout;

  FormatContext fc;
  fc.id = random_id(id_prefix(api));
  fc.created = static_cast<int64_t>(std::time(nullptr));
  fc.model = job->req.model;
  std::shared_ptr<Formatter> fmt = make_formatter(job->req, fc);

  // The socket is found once: the probe, the non-streaming wait and the stream's provider share it.
  const int client_fd = find_request_socket(req);
  job->client_gone = [client_fd] { return peer_closed(client_fd); };
  if (Status st = worker.submit(job); !st.ok()) {
    send_error(api, api_error_from_status(st), res, endpoint);
    return;
  }

  if (!job->req.stream) {
    const int fd = client_fd;
    auto last_check = Clock::now();
    while (true) {
      auto ev = job->events.pop_for(kPollInterval);
      // Check the socket on a clock, not only when idle: events arrive faster than the interval.
      if (Clock::now() - last_check >= kPollInterval) {
        last_check = Clock::now();
        if (peer_closed(fd)) {
          job->cancel = true;
          metrics.count_request(endpoint, 499);
          res.status = 499;
          return;
        }
      }
      if (!ev) continue;
      fmt->on_event(*ev);
      if (ev->kind == GenEventKind::done) break;
    }
    const Accumulated& r = fmt->result();
    if ((r.finish == FinishReason::error || r.finish == FinishReason::cancelled) && r.content.empty() &&
        r.reasoning.empty() && r.calls.empty()) {
      ApiError e = api_error_from_status(r.error.ok() ? internal_error("generation failed") : r.error);
      if (r.error.message().find("timed out") != std::string::npos) e.http_status = 504;
      send_error(api, e, res, endpoint);
      return;
    }
    res.set_content(dump_json(fmt->final_json()), "application/json");
    metrics.count_request(endpoint, 200);
    return;
  }

  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  metrics.count_request(endpoint, 200);
  const auto keepalive = opts.keepalive;
  res.set_chunked_content_provider(
      "text/event-stream",
      [job, fmt, keepalive, fd = client_fd](size_t, httplib::DataSink& sink) {
        auto last_write = Clock::now();
        auto last_check = Clock::now();
        while (true) {
          auto ev = job->events.pop_for(kPollInterval);
          if (Clock::now() - last_check >= kPollInterval) {
            last_check = Clock::now();
            if (peer_closed(fd)) {
              job->cancel = true;
              return false;
            }
          }
          if (!ev) {
            if (Clock::now() - last_write >= keepalive) {
              static constexpr char kComment[] = ": keep-alive\n\n";
              if (!sink.write(kComment, sizeof kComment - 1)) {
                job->cancel = true;
                return false;
              }
              last_write = Clock::now();
            }
            continue;
          }
          const std::string out = fmt->on_event(*ev);
          if (!out.empty()) {
            if (!sink.write(out.data(), out.size())) {
              job->cancel = true;
              return false;
            }
            last_write = Clock::now();
          }
          if (ev->kind == GenEventKind::done) {
            sink.done();
            return true;
          }
        }
      },
      [job](bool success) {
        if (!success) job->cancel = true;
      });
}

void Server::Impl::handle_count_tokens(const httplib::Request& req, httplib::Response& res) {
  const ApiKind api = ApiKind::anthropic_messages;
  auto body = parse_request_json(req.body);
  if (!body.ok()) {
    send_error(api, api_error_from_status(body.status()), res, "count_tokens");
    return;
  }
  auto gen = map_request(api, *body, opts.map, req.body);
  if (!gen.ok()) {
    send_error(api, api_error_from_status(gen.status()), res, "count_tokens");
    return;
  }
  PromptOptions po;
  po.flavor = opts.map.flavor;
  po.exact_dsml_replay = opts.worker.exact_dsml_replay;
  auto rp = render_and_tokenize(*gen, engine.tokenizer(), po, &replay);
  if (!rp.ok()) {
    send_error(api, api_error_from_status(rp.status()), res, "count_tokens");
    return;
  }
  res.set_content(dump_json({{"input_tokens", rp->tokens.size()}}), "application/json");
  metrics.count_request("count_tokens", 200);
}

}  // namespace ds4::server
