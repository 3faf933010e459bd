// test_disk_cache_server.cpp — the disk KV cache in the real server on the tiny-chat model:
//   * a hit after a restart (new server, new cache object, same directory) answers with exactly the
//     tokens and logprobs of a server without any cache, and reports the restored prompt tokens;
//   * damaged entries (flipped payload byte, truncation, garbage) are logged, removed and survived;
//   * usage stays under --kv-disk-space-mb while entries are evicted;
//   * two real ds4-server processes on one directory under concurrent loopback load: every answer
//     equals the answer for that prompt everywhere, both processes hit checkpoints, the directory
//     verifies clean and stays under its budget afterwards.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <fcntl.h>

#include "ds4/engine.h"
#include "kvstore/kvstore.h"
#include "server/disk_cache.h"
#include "server/json_util.h"
#include "server/server.h"

extern char** environ;

namespace ds4::server {
namespace {

using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "ds4_diskkv_server_XXXXXX").string();
    path_ = mkdtemp(tmpl.data()) ? tmpl : std::string();
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::vector<fs::path> entries() const {
    std::vector<fs::path> out;
    for (const auto& e : fs::directory_iterator(path_))
      if (e.path().extension() == ".kv") out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
  }
  uint64_t usage() const {
    uint64_t n = 0;
    for (const auto& e : fs::directory_iterator(path_))
      if (e.is_regular_file()) n += e.file_size();
    return n;
  }

 private:
  std::string path_;
};

std::unique_ptr<Engine>& shared_engine() {
  static std::unique_ptr<Engine> engine;  // test-only: one model load for the whole suite
  return engine;
}

// A long shared head (the "agent system prompt") plus a short question: the cold save lands on
// the anchor before the user turn, the next question with the same head restores it.
std::string system_prompt(int variant) {
  std::string s = "You are agent " + std::to_string(variant) + ". Rules follow.\n";
  for (int i = 0; i < 60; ++i)
    s += "Rule " + std::to_string(i) + ": answer briefly about topic " + std::to_string(i * 7 + variant) + ".\n";
  return s;
}

Json chat_body(const std::string& system, const std::string& user, int max_tokens = 6) {
  return {{"model", "deepseek-v4-flash"},
          {"messages", Json::array({{{"role", "system"}, {"content", system}}, {{"role", "user"}, {"content", user}}})},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"logprobs", true},
          {"top_logprobs", 4},
          {"thinking", {{"type", "disabled"}}}};
}

struct Answer {
  Json message, logprobs;
  int64_t cached = -1, prompt_tokens = -1;
};

Answer parse_answer(const std::string& body) {
  Json j = Json::parse(body, nullptr, false);
  Answer a;
  if (j.is_discarded() || !j.contains("choices")) return a;
  a.message = j["choices"][0]["message"];
  a.logprobs = j["choices"][0]["logprobs"];
  a.cached = j["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
  a.prompt_tokens = j["usage"]["prompt_tokens"].get<int64_t>();
  return a;
}

DiskCacheOptions cache_options(const std::string& dir, std::vector<std::string>* log, std::mutex* mu) {
  DiskCacheOptions o;
  o.dir = dir;
  o.space_mb = 64;
  o.policy.min_tokens = 64;
  o.policy.boundary_align_tokens = 64;
  o.policy.boundary_trim_tokens = 8;
  o.policy.continued_interval_tokens = 256;
  o.fsync = false;
  o.log = [log, mu](const std::string& line) {
    std::lock_guard<std::mutex> lock(*mu);
    log->push_back(line);
  };
  return o;
}

// One in-process server; with `dco` it has its own DiskCache (a "process" of its own).
class Running {
 public:
  explicit Running(const DiskCacheOptions* dco) {
    ServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.map.ctx = 2048;
    o.worker.default_max_tokens = 16;
    o.drain_grace = std::chrono::seconds(5);
    if (dco) {
      auto dc = DiskCache::open(*shared_engine(), *dco);
      EXPECT_TRUE(dc.ok()) << dc.status().to_string();
      if (dc.ok()) cache_ = std::move(dc).value();
      o.worker.disk_cache = cache_.get();
    }
    server_ = std::make_unique<Server>(*shared_engine(), o);
    Status st = server_->bind();
    EXPECT_TRUE(st.ok()) << st.to_string();
    thread_ = std::thread([this] { (void)server_->run(); });
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    client_->set_read_timeout(120, 0);
  }
  ~Running() { stop(); }
  void stop() {  // like SIGTERM: drain, then the worker's shutdown save
    if (!server_) return;
    server_->shutdown();
    thread_.join();
    server_.reset();
  }
  Answer ask(const Json& body) {
    auto r = client_->Post("/v1/chat/completions", body.dump(), "application/json");
    EXPECT_TRUE(r);
    if (!r) return {};
    EXPECT_EQ(r->status, 200) << r->body;
    return parse_answer(r->body);
  }
  DiskCache* cache() { return cache_.get(); }

 private:
  std::unique_ptr<DiskCache> cache_;
  std::unique_ptr<Server> server_;
  std::thread thread_;
  std::unique_ptr<httplib::Client> client_;
};

class DiskCacheServer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (shared_engine()) return;
    EngineOptions eo;
    eo.model_path = DS4_SERVER_TINY_GGUF;
    eo.max_context = 2048;
    eo.n_threads = 2;
    auto e = Engine::open(eo);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    shared_engine() = std::move(e).value();
  }
  bool logged(const std::string& needle) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& l : log_)
      if (l.find(needle) != std::string::npos) return true;
    return false;
  }
  std::string all_log() {
    std::lock_guard<std::mutex> lock(mu_);
    std::string s;
    for (const auto& l : log_) s += l + "\n";
    return s;
  }
  std::vector<std::string> log_;
  std::mutex mu_;
};

TEST_F(DiskCacheServer, HitAfterRestartGivesTheColdAnswerAndLogprobs) {
  TempDir dir;
  const Json q1 = chat_body(system_prompt(1), "What is rule 3?");
  Answer cold;
  {
    Running plain(nullptr);
    cold = plain.ask(q1);
  }
  ASSERT_FALSE(cold.logprobs.is_null());
  ASSERT_EQ(cold.cached, 0);
  const auto opts = cache_options(dir.path(), &log_, &mu_);
  {
    Running a(&opts);
    Answer first = a.ask(q1);  // cold: prefill stops at the anchor, saves, continues
    EXPECT_EQ(first.message, cold.message);
    EXPECT_EQ(first.logprobs, cold.logprobs);
    EXPECT_TRUE(logged("saved cold checkpoint")) << all_log();
  }  // shutdown save of the live timeline
  EXPECT_TRUE(logged("saved shutdown checkpoint")) << all_log();
  ASSERT_GE(dir.entries().size(), 2u);

  Running b(&opts);  // "restarted": fresh sessions, a new store on the same directory
  Answer again = b.ask(q1);
  EXPECT_GT(again.cached, 64) << all_log();
  EXPECT_EQ(again.prompt_tokens, cold.prompt_tokens);
  EXPECT_EQ(again.message, cold.message);
  EXPECT_EQ(again.logprobs, cold.logprobs);  // identical logits at every generated position
  // Another question on the same head restores the head too and answers as a cold server would.
  const Json q2 = chat_body(system_prompt(1), "And rule 12?");
  Running plain(nullptr);
  Answer cold2 = plain.ask(q2);
  Running c(&opts);
  Answer hit2 = c.ask(q2);
  EXPECT_GT(hit2.cached, 64);
  EXPECT_EQ(hit2.message, cold2.message);
  EXPECT_EQ(hit2.logprobs, cold2.logprobs);
  ASSERT_NE(c.cache(), nullptr);
  EXPECT_EQ(c.cache()->stats().hits, 1u);
}

TEST_F(DiskCacheServer, DamagedEntriesAreLoggedRemovedAndSurvived) {
  TempDir dir;
  const auto opts = cache_options(dir.path(), &log_, &mu_);
  const Json q = chat_body(system_prompt(2), "What is rule 5?");
  Answer cold;
  {
    Running a(&opts);
    cold = a.ask(q);
  }
  auto files = dir.entries();
  ASSERT_FALSE(files.empty());
  // Damage every entry a different way: flipped payload byte, truncation, garbage.
  for (size_t i = 0; i < files.size(); ++i) {
    const auto size = fs::file_size(files[i]);
    if (i % 3 == 0) {
      std::fstream f(files[i], std::ios::in | std::ios::out | std::ios::binary);
      f.seekg(static_cast<std::streamoff>(size - 100));
      char c;
      f.read(&c, 1);
      c ^= 0x10;
      f.seekp(static_cast<std::streamoff>(size - 100));
      f.write(&c, 1);
    } else if (i % 3 == 1) {
      fs::resize_file(files[i], size / 2);
    } else {
      std::ofstream(files[i], std::ios::binary | std::ios::trunc) << std::string(4096, 'x');
    }
  }
  Running b(&opts);
  Answer a = b.ask(q);
  EXPECT_EQ(a.cached, 0) << all_log();  // nothing damaged was restored
  EXPECT_EQ(a.message, cold.message);
  EXPECT_EQ(a.logprobs, cold.logprobs);
  EXPECT_TRUE(logged("removing damaged")) << all_log();
  // Damaged entries the lookup did not need are found by `verify --fix` (ds4 kvcache verify).
  {
    kvstore::StoreOptions so;
    so.dir = dir.path();
    auto st = kvstore::Store::open(so);
    ASSERT_TRUE(st.ok());
    ASSERT_TRUE((*st)->verify(true).ok());
    auto rep = (*st)->verify(false);
    ASSERT_TRUE(rep.ok());
    EXPECT_EQ(rep->bad, 0u) << (rep->problems.empty() ? "" : rep->problems[0]);
  }
  // The checkpoint saved again by that cold request is used by the next server.
  b.stop();
  Running c(&opts);
  Answer hit = c.ask(q);
  EXPECT_GT(hit.cached, 0) << all_log();
  EXPECT_EQ(hit.message, cold.message);
  EXPECT_EQ(hit.logprobs, cold.logprobs);
  // The directory wiped while the server runs: a miss, then it saves again.
  fs::remove_all(dir.path());
  Answer after = c.ask(chat_body(system_prompt(3), "Rule 1?"));
  EXPECT_LT(after.cached, 64);  // at most the template's first tokens, live
  EXPECT_FALSE(dir.entries().empty());
}

TEST_F(DiskCacheServer, EvictionKeepsUsageUnderTheBudget) {
  TempDir dir;
  auto opts = cache_options(dir.path(), &log_, &mu_);
  opts.space_mb = 3;  // a few tiny-chat checkpoints (the f32 logits alone are 0.5 MB each)
  Running a(&opts);
  for (int v = 0; v < 3; ++v) {
    a.ask(chat_body(system_prompt(10 + v), "Rule 2?"));
    EXPECT_LE(dir.usage(), uint64_t{3} << 20) << "after prompt " << v;
  }
  EXPECT_TRUE(logged("evicted")) << all_log();
}

// ---- two ds4-server processes ----

class Process {
 public:
  Process(const std::vector<std::string>& args, const std::string& lock, const std::string& log_path)
      : log_path_(log_path) {
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    std::vector<std::string> env_s;
    for (char** e = environ; *e; ++e)
      if (std::string_view(*e).rfind("DS4_LOCK_FILE=", 0) != 0) env_s.emplace_back(*e);
    env_s.push_back("DS4_LOCK_FILE=" + lock);
    std::vector<char*> envp;
    for (auto& e : env_s) envp.push_back(e.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    if (posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), envp.data()) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
  }
  ~Process() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  std::string log() const {
    std::ifstream f(log_path_);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  // Port from "listening on http://127.0.0.1:PORT"; 0 when the server did not come up.
  int wait_port() const {
    for (int i = 0; i < 600 && pid_ > 0; ++i) {
      const std::string l = log();
      const auto at = l.find("listening on http://127.0.0.1:");
      if (at != std::string::npos) return std::atoi(l.c_str() + at + 30);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return 0;
  }
  int terminate() {  // SIGTERM, exit status
    if (pid_ <= 0) return -1;
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
  std::string log_path_;
};

TEST_F(DiskCacheServer, TwoServerProcessesShareOneDirectoryUnderLoad) {
  TempDir dir, scratch;
  const std::string cache = dir.path();
  const int budget_mb = 12;  // ~9 tiny-chat checkpoints: the load below writes ~12, so it evicts
  std::vector<std::unique_ptr<Process>> procs;
  std::vector<int> ports;
  for (int i = 0; i < 2; ++i) {
    std::vector<std::string> args = {DS4_SERVER_BIN, "-m", DS4_SERVER_TINY_GGUF, "--cpu", "-t", "1", "--ctx", "2048",
                                     "--port", "0", "--parallel", "1", "--nothink",
                                     "--kv-disk-dir", cache, "--kv-disk-space-mb", std::to_string(budget_mb),
                                     "--kv-cache-min-tokens", "64", "--kv-cache-boundary-align-tokens", "64",
                                     "--kv-cache-boundary-trim-tokens", "8", "--kv-cache-no-fsync"};
    procs.push_back(std::make_unique<Process>(args, scratch.path() + "/lock" + std::to_string(i),
                                              scratch.path() + "/server" + std::to_string(i) + ".log"));
  }
  for (auto& p : procs) {
    ports.push_back(p->wait_port());
    ASSERT_GT(ports.back(), 0) << p->log();
  }
  // Eight prompts on four heads; every client thread asks its own sequence, on both servers. One
  // live session per server: switching heads evicts the live timeline to disk and restores the
  // other head from disk (often a checkpoint the other process wrote).
  auto prompt = [](int head, int q) { return chat_body(system_prompt(20 + head), "Rule " + std::to_string(q * 9) + "?", 4); };
  std::vector<Json> prompts;
  for (int h = 0; h < 4; ++h)
    for (int q = 0; q < 2; ++q) prompts.push_back(prompt(h, q));
  std::mutex mu;
  std::map<int, std::vector<Json>> answers;  // prompt -> every message and logprobs seen
  std::atomic<int> failures{0};
  auto ask = [&](int server, int p) -> Answer {
    httplib::Client cl("127.0.0.1", ports[server]);
    cl.set_read_timeout(120, 0);
    auto res = cl.Post("/v1/chat/completions", prompts[p].dump(), "application/json");
    if (!res || res->status != 200) {
      failures++;
      return {};
    }
    Answer a = parse_answer(res->body);
    std::lock_guard<std::mutex> lock(mu);
    answers[p].push_back(a.message);
    answers[p].push_back(a.logprobs);
    return a;
  };
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c)
    clients.emplace_back([&, c] {
      for (int r = 0; r < 4; ++r) ask(c % 2, (c * 3 + r * (c % 2 ? 5 : 3)) % 8);
    });
  for (auto& t : clients) t.join();
  // Then deterministic cross-process hits: server 0 prefills head h; server 1, live on another
  // head, gets another question on head h and restores the head server 0 saved.
  for (int h = 0; h < 4; h += 2) {
    ask(1, ((h + 1) % 4) * 2 + 1);
    ask(0, h * 2);
    Answer b = ask(1, h * 2 + 1);
    EXPECT_GT(b.cached, 64) << "head " << h << "\n" << procs[1]->log();
  }
  EXPECT_EQ(failures.load(), 0);
  for (auto& [p, list] : answers)
    for (size_t i = 2; i < list.size(); ++i) EXPECT_EQ(list[i], list[i % 2]) << "prompt " << p;
  std::string logs;
  int exits_ok = 0;
  for (auto& p : procs) {
    exits_ok += p->terminate() == 0;
    logs += p->log();
  }
  EXPECT_EQ(exits_ok, 2) << logs;
  EXPECT_NE(logs.find("kv-disk: hit"), std::string::npos) << logs;
  std::istringstream lines(logs);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("kv-disk:") == std::string::npos) continue;
    // No failed or skipped save, no failed restore, nothing damaged.
    EXPECT_EQ(line.find("failed"), std::string::npos) << line;
    EXPECT_EQ(line.find("skipped"), std::string::npos) << line;
    EXPECT_EQ(line.find("damaged"), std::string::npos) << line;
  }

  // Nothing lost or corrupt: every entry verifies, usage within the budget.
  kvstore::StoreOptions so;
  so.dir = cache;
  auto st = kvstore::Store::open(so);
  ASSERT_TRUE(st.ok());
  auto rep = (*st)->verify(false);
  ASSERT_TRUE(rep.ok());
  EXPECT_GT(rep->entries, 0u);
  EXPECT_EQ(rep->bad, 0u) << (rep->problems.empty() ? "" : rep->problems[0]);
  EXPECT_LE(dir.usage(), uint64_t{static_cast<uint64_t>(budget_mb)} << 20);
  EXPECT_NE(logs.find("evicted"), std::string::npos) << logs;
  // And a third server on what they left answers the same (restored or, if evicted, prefilled).
  const auto opts = cache_options(cache, &log_, &mu_);
  Running c(&opts);
  for (int p = 0; p < 8; p += 3) {
    Answer a = c.ask(prompts[p]);
    EXPECT_EQ(a.message, answers[p][0]) << p;
    EXPECT_EQ(a.logprobs, answers[p][1]) << p;
  }
}

}  // namespace
}  // namespace ds4::server
