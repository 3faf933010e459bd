// server.cpp — Server setup, auth, CORS, limits and the non-generating endpoints (/health,
// /metrics, /v1/models). Generation endpoints are in server_generate.cpp.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>

#include "server/disk_cache_view.h"
#include "server/memory_view.h"
#include "server/server_impl.h"

namespace ds4::server {

bool peer_closed(int fd) {
  if (fd < 0) return false;
  pollfd p{};
  p.fd = fd;
  p.events = POLLIN | POLLRDHUP;
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) return true;
  if (p.revents & POLLIN) {
    char c;
    return ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
  }
  return false;
}

// Scans this process's descriptors for the TCP socket whose peer is the request's remote address
// and whose local port is the request's. A few dozen cheap syscalls, once per generation request.
int find_request_socket(const httplib::Request& req) {
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return -1;
  int found = -1;
  while (dirent* de = ::readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(de->d_name, &end, 10);
    if (!end || *end != '\0' || fd < 0) continue;
    struct stat st {};
    if (::fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage peer{}, local{};
    socklen_t pl = sizeof peer, ll = sizeof local;
    if (::getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;
    if (::getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &ll) != 0) continue;
    char ip[INET6_ADDRSTRLEN] = {0};
    int pport = -1, lport = -1;
    if (peer.ss_family == AF_INET) {
      auto* p4 = reinterpret_cast<sockaddr_in*>(&peer);
      ::inet_ntop(AF_INET, &p4->sin_addr, ip, sizeof ip);
      pport = ntohs(p4->sin_port);
      lport = ntohs(reinterpret_cast<sockaddr_in*>(&local)->sin_port);
    } else if (peer.ss_family == AF_INET6) {
      auto* p6 = reinterpret_cast<sockaddr_in6*>(&peer);
      ::inet_ntop(AF_INET6, &p6->sin6_addr, ip, sizeof ip);
      pport = ntohs(p6->sin6_port);
      lport = ntohs(reinterpret_cast<sockaddr_in6*>(&local)->sin6_port);
    } else {
      continue;
    }
    if (pport == req.remote_port && (req.local_port <= 0 || lport == req.local_port) && req.remote_addr == ip) {
      found = static_cast<int>(fd);
      break;
    }
  }
  ::closedir(dir);
  return found;
}

namespace {

// Which API's error shape a path gets (Anthropic clients read {"type":"error",...}).
ApiKind api_for_path(const std::string& path) {
  if (path.rfind("/v1/messages", 0) == 0) return ApiKind::anthropic_messages;
  if (path.rfind("/v1/responses", 0) == 0) return ApiKind::openai_responses;
  if (path.rfind("/v1/completions", 0) == 0) return ApiKind::openai_completions;
  return ApiKind::openai_chat;
}

// Equal-length-independent comparison: time depends only on the lengths, never on where the
// first differing byte is.
bool constant_time_equal(const std::string& a, const std::string& b) {
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = static_cast<unsigned char>(a.size() != b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

constexpr int64_t kModelCreated = 1767225600;  // ds4's fixed `created` for its model object

}  // namespace

Server::Impl::Impl(Engine& e, ServerOptions o, std::FILE* t)
    : engine(e),
      opts(std::move(o)),
      trace(t),
      replay(chat::ReplayStoreOptions{opts.tool_memory_max_ids, size_t{512} << 20}),
      worker(e, opts.worker, replay, metrics, t) {}

bool Server::Impl::authorized(const httplib::Request& req) const {
  if (opts.api_key.empty()) return true;
  std::string given;
  const std::string auth = req.get_header_value("Authorization");
  if (auth.size() > 7 && (auth.compare(0, 7, "Bearer ") == 0 || auth.compare(0, 7, "bearer ") == 0)) {
    given = auth.substr(7);
  } else if (req.has_header("x-api-key")) {
    given = req.get_header_value("x-api-key");
  } else {
    return false;
  }
  return constant_time_equal(given, opts.api_key);
}

void Server::Impl::send_error(ApiKind api, const ApiError& err, httplib::Response& res, const std::string& endpoint) {
  res.status = err.http_status;
  if (err.http_status == 503) res.set_header("Retry-After", "1");
  res.set_content(dump_json(api_error_body(api, err)), "application/json");
  metrics.count_request(endpoint, err.http_status);
}

static Json model_object(const Server::Impl& s, const std::string& id) {
  const ModelInfo& info = s.engine.info();
  const int64_t ctx = s.opts.map.ctx;
  return {{"id", id},
          {"object", "model"},
          {"created", kModelCreated},
          {"owned_by", "ds4cpp"},
          {"name", info.name.empty() ? id : info.name},
          {"context_length", ctx},
          {"top_provider", {{"context_length", ctx},
                            {"max_completion_tokens", std::min<int64_t>(s.opts.worker.default_max_tokens, ctx)},
                            {"is_moderated", false}}},
          {"supported_parameters", Json::array({"tools", "tool_choice", "max_tokens", "temperature", "top_p", "top_k",
                                                "min_p", "stop", "seed", "stream", "reasoning_effort", "logprobs",
                                                "top_logprobs"})}};
}

static Json anthropic_model_object(const std::string& id) {
  return {{"type", "model"}, {"id", id}, {"display_name", id}, {"created_at", "2026-01-01T00:00:00Z"}};
}

void Server::Impl::routes() {
  http.set_payload_max_length(opts.max_body_bytes);
  http.set_read_timeout(opts.read_timeout.count(), 0);
  http.set_write_timeout(30, 0);
  http.set_keep_alive_max_count(1000);
  // httplib holds a pool thread per idle keep-alive connection: keep the idle window short.
  http.set_keep_alive_timeout(5);
  http.set_tcp_nodelay(true);
  const int threads = opts.http_threads > 0
                          ? opts.http_threads
                          : static_cast<int>(opts.worker.max_queue) + opts.worker.n_sessions + 8;
  http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  if (opts.cors) {
    http.set_default_headers({{"Access-Control-Allow-Origin", "*"},
                              {"Access-Control-Allow-Methods", "GET, POST, OPTIONS"},
                              {"Access-Control-Allow-Headers", "*"}});
  }

  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (req.method == "OPTIONS") {
      res.status = 204;
      return httplib::Server::HandlerResponse::Handled;
    }
    if (req.path == "/health" || authorized(req)) return httplib::Server::HandlerResponse::Unhandled;
    ApiError e;
    e.http_status = 401;
    e.message = "invalid or missing API key (send 'Authorization: Bearer KEY' or 'x-api-key: KEY')";
    e.code = "invalid_api_key";
    res.set_header("WWW-Authenticate", "Bearer");
    send_error(api_for_path(req.path), e, res, "auth");
    return httplib::Server::HandlerResponse::Handled;
  });

  // Transport-level failures (unknown path, oversized body, malformed HTTP) get a JSON body too.
  http.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty() || res.status == 204) return httplib::Server::HandlerResponse::Unhandled;
    ApiError e;
    e.http_status = res.status;
    if (res.status == 404) e.message = "unknown endpoint " + req.method + " " + req.path;
    else if (res.status == 413) e.message = "request body larger than " + std::to_string(opts.max_body_bytes) + " bytes";
    else if (res.status == 405) e.message = "method not allowed";
    else e.message = "bad HTTP request";
    res.set_content(dump_json(api_error_body(api_for_path(req.path), e)), "application/json");
    metrics.count_request("error", res.status);
    return httplib::Server::HandlerResponse::Handled;
  }));
  http.set_exception_handler([this](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& ex) {
      what += std::string(": ") + ex.what();
    } catch (...) {
    }
    ApiError e;
    e.http_status = 500;
    e.message = what;
    send_error(api_for_path(req.path), e, res, "exception");
  });

  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const bool d = draining.load();
    Json j = {{"status", d ? "draining" : "ok"},
              {"model", opts.map.model_id},
              {"queue_depth", worker.queue_depth()},
              {"ctx", opts.map.ctx}};
    res.status = d ? 503 : 200;
    res.set_content(dump_json(j), "application/json");
    metrics.count_request("health", res.status);
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    std::string text = metrics.render(worker.memory_snapshot(), !draining.load());
    if (opts.worker.disk_cache) append_disk_cache_metrics(text, opts.worker.disk_cache->report());
    res.set_content(text, "text/plain; version=0.0.4");
    metrics.count_request("metrics", 200);
  });
  http.Get("/v1/memory", [this](const httplib::Request&, httplib::Response& res) {
    // The worker's latest snapshot (taken at startup and after every request): the HTTP threads never
    // touch the engine.
    const MemoryReport m = worker.memory_snapshot();
    if (opts.log) {
      std::fprintf(opts.log, "ds4-server: %s\n", memory_summary(m).c_str());
      std::fflush(opts.log);
    }
    Json j = memory_json(m);
    if (opts.worker.disk_cache) j["disk_kv_cache"] = disk_cache_json(opts.worker.disk_cache->report());
    res.set_content(dump_json(j), "application/json");
    metrics.count_request("memory", 200);
  });
  http.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    if (req.has_header("anthropic-version")) {
      Json data = Json::array({anthropic_model_object(opts.map.model_id)});
      res.set_content(dump_json({{"data", data}, {"has_more", false}, {"first_id", opts.map.model_id},
                                 {"last_id", opts.map.model_id}}),
                      "application/json");
    } else {
      res.set_content(dump_json({{"object", "list"}, {"data", Json::array({model_object(*this, opts.map.model_id)})}}),
                      "application/json");
    }
    metrics.count_request("models", 200);
  });
  http.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    for (const auto& m : known_models(opts.map)) {
      if (m.id == id) {
        res.set_content(dump_json(req.has_header("anthropic-version") ? anthropic_model_object(id)
                                                                       : model_object(*this, id)),
                        "application/json");
        metrics.count_request("models", 200);
        return;
      }
    }
    ApiError e;
    e.http_status = 404;
    e.message = "model '" + id + "' does not exist";
    e.code = "model_not_found";
    send_error(req.has_header("anthropic-version") ? ApiKind::anthropic_messages : ApiKind::openai_chat, e, res,
               "models");
  });
  http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generate(ApiKind::openai_chat, req, res);
  });
  http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generate(ApiKind::openai_completions, req, res);
  });
  http.Post("/v1/messages", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generate(ApiKind::anthropic_messages, req, res);
  });
  http.Post("/v1/responses", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generate(ApiKind::openai_responses, req, res);
  });
  http.Post("/v1/messages/count_tokens", [this](const httplib::Request& req, httplib::Response& res) {
    handle_count_tokens(req, res);
  });
}

Server::Server(Engine& engine, ServerOptions opts, std::FILE* trace)
    : impl_(std::make_unique<Impl>(engine, std::move(opts), trace)) {
  impl_->routes();
}

Server::~Server() {
  shutdown();
  impl_->worker.stop(std::chrono::milliseconds(0));
}

namespace {
Status bind_socket(Server::Impl& s);
}  // namespace

Status Server::bind() {
  Impl& s = *impl_;
  // cpp-httplib (the system's shared library) listens with a backlog of 5: a burst of concurrent
  // clients (agents, ds4-loadgen's N streams) overflows the accept queue and connections are reset.
  // Remember the listening socket and raise its backlog after binding (listen() again updates it).
  int listen_fd = -1;
  s.http.set_socket_options([&listen_fd](socket_t sock) {
    httplib::default_socket_options(sock);
    listen_fd = static_cast<int>(sock);
  });
  Status st = bind_socket(s);
  if (st.ok() && listen_fd >= 0) (void)::listen(listen_fd, 1024);
  return st;
}

namespace {
Status bind_socket(Server::Impl& s) {
  if (s.opts.port == 0) {
    const int p = s.http.bind_to_any_port(s.opts.host);
    if (p <= 0) return io_error("cannot bind " + s.opts.host + " (any port)");
    s.bound_port = p;
  } else {
    if (!s.http.bind_to_port(s.opts.host, s.opts.port))
      return io_error("cannot listen on " + s.opts.host + ":" + std::to_string(s.opts.port) +
                      " (address in use or not available)");
    s.bound_port = s.opts.port;
  }
  return Status::Ok();
}
}  // namespace

int Server::port() const { return impl_->bound_port; }

Status Server::run() {
  Impl& s = *impl_;
  if (s.bound_port < 0) DS4_RETURN_IF_ERROR(bind());
  s.worker.start();
  const bool ok = s.http.listen_after_bind();
  // listen returns once stop() closed the socket; in-flight handlers have finished by then.
  s.worker.stop(std::chrono::duration_cast<std::chrono::milliseconds>(s.opts.drain_grace));
  if (!ok && !s.draining) return io_error("HTTP server stopped unexpectedly");
  return Status::Ok();
}

void Server::shutdown() {
  Impl& s = *impl_;
  if (s.draining.exchange(true)) return;
  // Refuse new work (503), let queued and active jobs finish within the grace period (then they are
  // cancelled), then stop listening; httplib's stop() lets in-flight handlers send their last bytes.
  s.worker.stop(std::chrono::duration_cast<std::chrono::milliseconds>(s.opts.drain_grace));
  s.http.stop();
}

}  // namespace ds4::server
