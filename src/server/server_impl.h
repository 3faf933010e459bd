// server_impl.h — internals shared by server.cpp (setup, routes, simple endpoints) and
// server_generate.cpp (generation endpoints). Not a public header.
#pragma once

#include <httplib.h>

#include <atomic>
#include <mutex>

#include "server/api_error.h"
#include "server/prompt.h"
#include "server/server.h"

namespace ds4::server {

// The socket serving this request, found by its address pair (httplib does not hand the socket to
// handlers). -1 when not found; then disconnects are only noticed by failed writes.
int find_request_socket(const httplib::Request& req);

// True when the peer closed or reset the connection (non-blocking check).
bool peer_closed(int fd);

struct Server::Impl {
  Engine& engine;
  ServerOptions opts;
  std::FILE* trace;
  Metrics metrics;
  SharedReplayStore replay;
  EngineWorker worker;
  httplib::Server http;
  std::atomic<bool> draining{false};
  std::atomic<uint64_t> next_job_id{1};
  int bound_port = -1;

  Impl(Engine& e, ServerOptions o, std::FILE* t);
  void routes();
  void handle_generate(ApiKind api, const httplib::Request& req, httplib::Response& res);
  void handle_count_tokens(const httplib::Request& req, httplib::Response& res);
  void send_error(ApiKind api, const ApiError& err, httplib::Response& res, const std::string& endpoint);
  bool authorized(const httplib::Request& req) const;
};

}  // namespace ds4::server
