// server.h — ds4-server's HTTP front: routes, auth, CORS, limits, health/metrics, and the bridge
// between HTTP threads and the engine worker. HTTP threads parse, map, render and tokenize, then
// enqueue a Job and relay its events (JSON or SSE); the EngineWorker alone touches the engine.
//
// Deliberately not here: flag parsing, the instance lock, signal handling (tools/ds4-server).
#pragma once

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "ds4/engine.h"
#include "server/map_common.h"
#include "server/worker.h"

namespace ds4::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                       // 0: pick a free port (tests)
  std::string api_key;                   // non-empty: require Bearer / x-api-key
  bool cors = false;
  size_t max_body_bytes = size_t{64} << 20;
  int http_threads = 0;                  // 0: enough for the queue plus monitoring
  std::chrono::seconds request_timeout{0};  // 0: none; else a request is ended after this long
  std::chrono::milliseconds keepalive{5000};  // SSE comment after this much silence
  std::chrono::seconds drain_grace{30};  // SIGTERM: time in-flight requests get to finish
  std::chrono::seconds read_timeout{30};
  MapOptions map;
  WorkerOptions worker;
  size_t tool_memory_max_ids = 100000;
  std::FILE* log = nullptr;              // server log (ds4-server: stderr): memory summary per GET /v1/memory
};

class Server {
 public:
  // `engine` must outlive the server. `trace` (may be null) receives the --trace transcript.
  Server(Engine& engine, ServerOptions opts, std::FILE* trace = nullptr);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the listening socket (fails if the address is taken). Then port() is the real port.
  Status bind();
  int port() const;
  // Serves until shutdown(); returns after the worker drained.
  Status run();
  // Thread-safe, idempotent, blocking: refuse new requests (503), drain in-flight ones (cancelled
  // after drain_grace), then stop listening so run() returns. Call it from a non-HTTP thread.
  void shutdown();

  struct Impl;  // server_impl.h

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds4::server
