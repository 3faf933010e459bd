// server_fixture.h — the one in-process server harness of the server tests (test_http, test_batch,
// test_scripted on its scripted engine, and tests/kvstore/server/test_disk_cache_server.cpp): the
// engine loaded once per test binary, and RunningServer — a real Server (HTTP transport + engine
// worker) on 127.0.0.1 with an ephemeral port, serving from its own thread until stop(), with a
// client and post/post_json/metrics helpers. Optionally it captures the --trace transcript and owns
// the server's DiskCache. Header-only; include it as "server_fixture.h" (tests/server) or
// "../../server/server_fixture.h".
// Deliberately not here: request bodies and answer parsing (each test file words its own), and
// servers in another process (tests/kvstore/server spawns ds4-server itself).
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "ds4/engine.h"
#include "server/disk_cache.h"
#include "server/json_util.h"
#include "server/server.h"

namespace ds4::server {

// The engine every server of one test binary shares (test-only: one model load for the whole suite).
inline std::unique_ptr<Engine>& shared_engine() {
  static std::unique_ptr<Engine> engine;
  return engine;
}

// Opens the shared engine unless it is open already; a failure fails the calling SetUpTestSuite.
inline void open_shared_engine(const EngineOptions& eo) {
  if (shared_engine()) return;
  auto e = Engine::open(eo);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  shared_engine() = std::move(e).value();
}

// What a RunningServer holds beyond its ServerOptions.
struct ServerExtras {
  bool capture_trace = false;             // the worker's step transcript into a temp file (trace())
  std::unique_ptr<DiskCache> disk_cache;  // owned; handed to the worker as opts.worker.disk_cache
};

class RunningServer {
 public:
  // Binds `opts` (host and port replaced by 127.0.0.1:ephemeral) on the shared engine, serves it from
  // a thread and waits until /health answers 200.
  explicit RunningServer(ServerOptions opts, ServerExtras extras = {})
      : RunningServer(*shared_engine(), std::move(opts), std::move(extras)) {}
  // The same on `engine` (it must outlive the server).
  RunningServer(Engine& engine, ServerOptions opts, ServerExtras extras = {})
      : disk_cache_(std::move(extras.disk_cache)) {
    opts.host = "127.0.0.1";
    opts.port = 0;
    if (disk_cache_) opts.worker.disk_cache = disk_cache_.get();
    if (extras.capture_trace) trace_ = std::tmpfile();
    server_ = std::make_unique<Server>(engine, opts, trace_);
    Status st = server_->bind();
    EXPECT_TRUE(st.ok()) << st.to_string();
    port_ = server_->port();
    thread_ = std::thread([this] { (void)server_->run(); });
    client_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
    client_->set_read_timeout(120, 0);
    for (int i = 0; i < 200; ++i) {
      if (auto r = client_->Get("/health"); r && r->status == 200) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  ~RunningServer() {
    stop();
    if (trace_) std::fclose(trace_);
  }
  RunningServer(const RunningServer&) = delete;
  RunningServer& operator=(const RunningServer&) = delete;

  // Like SIGTERM: refuse new requests, drain (opts.drain_grace), the worker's shutdown saves, join.
  // Idempotent; the DiskCache (if any) stays readable afterwards.
  void stop() {
    if (!server_) return;
    server_->shutdown();
    thread_.join();
    server_.reset();
  }

  int port() const { return port_; }
  httplib::Client& client() { return *client_; }
  DiskCache* disk_cache() { return disk_cache_.get(); }

  httplib::Result post(const std::string& path, const std::string& body, httplib::Headers h = {}) {
    return client_->Post(path.c_str(), h, body, "application/json");
  }
  // POSTs `body`, expects `expect_status`, returns the parsed answer (null when there was none).
  Json post_json(const std::string& path, const Json& body, int expect_status = 200) {
    auto r = post(path, body.dump());
    EXPECT_TRUE(r) << "no response";
    if (!r) return Json();
    EXPECT_EQ(r->status, expect_status) << r->body;
    return Json::parse(r->body, nullptr, false);
  }
  // GET body of `path` ("" when there was no answer).
  std::string get_body(const std::string& path) {
    auto r = client_->Get(path.c_str());
    return r ? r->body : std::string();
  }
  std::string metrics() { return get_body("/metrics"); }

  // The --trace transcript so far (capture_trace only).
  std::string trace() const {
    if (!trace_) return std::string();
    std::fflush(trace_);
    std::rewind(trace_);
    std::string s;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, trace_)) > 0) s.append(buf, n);
    return s;
  }

 private:
  std::unique_ptr<DiskCache> disk_cache_;  // declared first: outlives the server that uses it
  std::FILE* trace_ = nullptr;
  std::unique_ptr<Server> server_;
  int port_ = 0;
  std::thread thread_;
  std::unique_ptr<httplib::Client> client_;
};

}  // namespace ds4::server
