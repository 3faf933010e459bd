// test_disk_cache_server.cpp — the disk KV cache in the real server on the tiny-chat model (in-process
// servers through tests/server/server_fixture.h):
//   * a hit after a restart (new server, new cache object, same directory) answers with exactly the
//     tokens and logprobs of a server without any cache, and reports the restored prompt tokens;
//   * /metrics and /v1/memory count what happened: a cold request's lookup, miss and save (files and
//     bytes equal to the directory's), the shutdown save, a restart's hit and restored tokens, a
//     corrupted file rejected; evictions under the budget;
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

#include <algorithm>
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

#include "../../common/temp_dir.h"
#include "../../server/server_fixture.h"
#include "kvstore/kvstore.h"

extern char** environ;

namespace ds4::server {
namespace {

using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

using test_util::TempDir;

// The entry files (.kv) of a cache directory, sorted.
std::vector<fs::path> kv_entries(const TempDir& dir) {
  std::vector<fs::path> out;
  for (const auto& name : dir.names_with(".kv")) out.push_back(dir.file(name));
  std::sort(out.begin(), out.end());
  return out;
}

// Bytes of all regular files in a cache directory.
uint64_t dir_usage(const TempDir& dir) {
  uint64_t n = 0;
  for (const auto& e : fs::directory_iterator(dir.path()))
    if (e.is_regular_file()) n += e.file_size();
  return n;
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

// The options of every in-process server here; with_cache() gives one its own DiskCache (a "process"
// of its own) on RunningServer (tests/server/server_fixture.h).
ServerOptions server_options() {
  ServerOptions o;
  o.map.ctx = 2048;
  o.worker.default_max_tokens = 16;
  o.drain_grace = std::chrono::seconds(5);
  return o;
}

ServerExtras with_cache(const DiskCacheOptions& dco) {
  ServerExtras x;
  auto dc = DiskCache::open(*shared_engine(), dco);
  EXPECT_TRUE(dc.ok()) << dc.status().to_string();
  if (dc.ok()) x.disk_cache = std::move(dc).value();
  return x;
}

// The value of one sample line of /metrics text (`sample` is the name with its labels); -1 when absent.
double metric(const std::string& text, const std::string& sample) {
  const std::string at = "\n" + sample + " ";
  const size_t p = text.find(at);
  return p == std::string::npos ? -1 : std::strtod(text.c_str() + p + at.size(), nullptr);
}

Answer ask_chat(RunningServer& s, const Json& body) {
  auto r = s.post("/v1/chat/completions", body.dump());
  EXPECT_TRUE(r);
  if (!r) return {};
  EXPECT_EQ(r->status, 200) << r->body;
  return parse_answer(r->body);
}

class DiskCacheServer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    EngineOptions eo;
    eo.model_path = DS4_SERVER_TINY_GGUF;
    eo.max_context = 2048;
    eo.n_threads = 2;
    open_shared_engine(eo);
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
    RunningServer plain(server_options());
    cold = ask_chat(plain, q1);
  }
  ASSERT_FALSE(cold.logprobs.is_null());
  ASSERT_EQ(cold.cached, 0);
  const auto opts = cache_options(dir.path(), &log_, &mu_);
  {
    RunningServer a(server_options(), with_cache(opts));
    Answer first = ask_chat(a, q1);  // cold: prefill stops at the anchor, saves, continues
    EXPECT_EQ(first.message, cold.message);
    EXPECT_EQ(first.logprobs, cold.logprobs);
    EXPECT_TRUE(logged("saved cold checkpoint")) << all_log();
  }  // shutdown save of the live timeline
  EXPECT_TRUE(logged("saved shutdown checkpoint")) << all_log();
  ASSERT_GE(kv_entries(dir).size(), 2u);

  RunningServer b(server_options(), with_cache(opts));  // "restarted": fresh sessions, a new store, same dir
  Answer again = ask_chat(b, q1);
  EXPECT_GT(again.cached, 64) << all_log();
  EXPECT_EQ(again.prompt_tokens, cold.prompt_tokens);
  EXPECT_EQ(again.message, cold.message);
  EXPECT_EQ(again.logprobs, cold.logprobs);  // identical logits at every generated position
  // Another question on the same head restores the head too and answers as a cold server would.
  const Json q2 = chat_body(system_prompt(1), "And rule 12?");
  RunningServer plain(server_options());
  Answer cold2 = ask_chat(plain, q2);
  RunningServer c(server_options(), with_cache(opts));
  Answer hit2 = ask_chat(c, q2);
  EXPECT_GT(hit2.cached, 64);
  EXPECT_EQ(hit2.message, cold2.message);
  EXPECT_EQ(hit2.logprobs, cold2.logprobs);
  ASSERT_NE(c.disk_cache(), nullptr);
  EXPECT_EQ(c.disk_cache()->stats().hits, 1u);
}

// /metrics and /v1/memory count the disk cache's events where they happen: a cold request's save,
// the shutdown save, a restart's hit (bytes read, tokens restored = the answer's cached tokens), and
// a corrupted file rejected by the next server.
TEST_F(DiskCacheServer, MetricsCountSavesHitsAndRejectedFiles) {
  TempDir dir;
  const auto opts = cache_options(dir.path(), &log_, &mu_);
  const Json q = chat_body(system_prompt(4), "What is rule 8?");
  {
    RunningServer a(server_options(), with_cache(opts));
    // Before any request: nothing counted, the budget shown.
    std::string m = a.metrics();
    EXPECT_EQ(metric(m, "ds4_kv_disk_lookups_total"), 0) << m;
    EXPECT_EQ(metric(m, "ds4_kv_disk_saves_total{reason=\"cold\"}"), 0) << m;
    EXPECT_EQ(metric(m, "ds4_kv_disk_limit_bytes"), 64 << 20) << m;
    EXPECT_EQ(metric(m, "ds4_kv_disk_entries"), 0) << m;
    const Answer cold = ask_chat(a, q);
    EXPECT_EQ(cold.cached, 0);
    m = a.metrics();
    EXPECT_EQ(metric(m, "ds4_kv_disk_lookups_total"), 1) << m;
    EXPECT_EQ(metric(m, "ds4_kv_disk_misses_total"), 1) << m;
    EXPECT_EQ(metric(m, "ds4_kv_disk_hits_total"), 0) << m;
    EXPECT_EQ(metric(m, "ds4_kv_disk_saves_total{reason=\"cold\"}"), 1) << m;
    EXPECT_EQ(metric(m, "ds4_kv_disk_saves_total{reason=\"shutdown\"}"), 0) << m;
    // The cold checkpoint and any continued one the prefill passed: each a new file on disk.
    const auto written_files = static_cast<uint64_t>(metric(m, "ds4_kv_disk_saves_total{reason=\"cold\"}") +
                                                     metric(m, "ds4_kv_disk_saves_total{reason=\"continued\"}"));
    EXPECT_EQ(metric(m, "ds4_kv_disk_written_files_total"), written_files) << m;
    EXPECT_EQ(kv_entries(dir).size(), written_files);
    EXPECT_EQ(metric(m, "ds4_kv_disk_entries"), written_files) << m;
    uint64_t kv_bytes = 0;
    for (const auto& f : kv_entries(dir)) kv_bytes += fs::file_size(f);
    const double written = metric(m, "ds4_kv_disk_write_bytes_total");
    EXPECT_EQ(written, static_cast<double>(kv_bytes)) << m;  // the entries, not their sidecars or index
    EXPECT_GT(metric(m, "ds4_kv_disk_saved_tokens_total"), 64) << m;
    EXPECT_GT(metric(m, "ds4_kv_disk_save_seconds_total"), 0) << m;
    EXPECT_EQ(metric(m, "ds4_kv_disk_usage_bytes"), static_cast<double>(dir_usage(dir))) << m;
    EXPECT_EQ(metric(m, "ds4_kv_disk_rejected_total{reason=\"corrupt\"}"), 0) << m;
    // The same numbers in GET /v1/memory.
    const Json mem = Json::parse(a.get_body("/v1/memory"), nullptr, false);
    ASSERT_TRUE(mem.contains("disk_kv_cache")) << mem.dump();
    const Json& d = mem["disk_kv_cache"];
    EXPECT_EQ(d["dir"], dir.path());
    EXPECT_EQ(d["saves"]["cold"], 1);
    EXPECT_EQ(d["lookups"], 1);
    EXPECT_EQ(d["entries"], written_files);
    EXPECT_EQ(d["write_bytes"].get<double>(), written);
    EXPECT_EQ(d["limit_bytes"], uint64_t{64} << 20);
    a.stop();  // the shutdown save of the live timeline, counted by the cache that outlives the server
    const DiskCacheReport r = a.disk_cache()->report();
    EXPECT_EQ(r.cache.saves[static_cast<size_t>(kvstore::SaveReason::shutdown)], 1u);
    EXPECT_EQ(r.store.files_written, written_files + 1);
    ASSERT_TRUE(r.usage);
    EXPECT_EQ(r.usage->entries, written_files + 1);
  }
  {
    RunningServer b(server_options(), with_cache(opts));  // restarted
    const Answer hit = ask_chat(b, q);
    EXPECT_GT(hit.cached, 64) << all_log();
    const std::string m = b.metrics();
    EXPECT_EQ(metric(m, "ds4_kv_disk_lookups_total"), 1) << m;
    EXPECT_EQ(metric(m, "ds4_kv_disk_hits_total"), 1) << m;
    EXPECT_EQ(metric(m, "ds4_kv_disk_misses_total"), 0) << m;
    EXPECT_EQ(metric(m, "ds4_kv_disk_restored_tokens_total"), static_cast<double>(hit.cached)) << m;
    EXPECT_EQ(metric(m, "ds4_kv_disk_read_files_total"), 1) << m;
    EXPECT_GT(metric(m, "ds4_kv_disk_read_bytes_total"), static_cast<double>(hit.cached) * 4) << m;
    EXPECT_GT(metric(m, "ds4_kv_disk_lookup_seconds_total"), 0) << m;
    EXPECT_GT(metric(m, "ds4_kv_disk_restore_seconds_total"), 0) << m;
  }
  // Corrupt one payload byte of every entry: the next server's lookup rejects (and removes) each one
  // it reads, i.e. every checkpoint that is a prefix of the prompt, and finds nothing.
  const auto files = kv_entries(dir);
  ASSERT_GE(files.size(), 2u);
  for (const auto& f : files) {
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    const auto at = static_cast<std::streamoff>(fs::file_size(f) - 100);
    char c;
    io.seekg(at);
    io.read(&c, 1);
    c ^= 0x40;
    io.seekp(at);
    io.write(&c, 1);
  }
  RunningServer c(server_options(), with_cache(opts));
  const Answer again = ask_chat(c, q);
  EXPECT_EQ(again.cached, 0) << all_log();
  const std::string m = c.metrics();
  const double rejected = metric(m, "ds4_kv_disk_rejected_total{reason=\"corrupt\"}");
  EXPECT_GE(rejected, 1) << m;
  EXPECT_EQ(metric(m, "ds4_kv_disk_read_files_total"), rejected) << m;
  EXPECT_EQ(metric(m, "ds4_kv_disk_rejected_total{reason=\"model_or_version\"}"), 0) << m;
  EXPECT_EQ(metric(m, "ds4_kv_disk_hits_total"), 0) << m;
  EXPECT_EQ(metric(m, "ds4_kv_disk_misses_total"), 1) << m;
  EXPECT_TRUE(logged("removing damaged")) << all_log();
  EXPECT_EQ(metric(m, "ds4_kv_disk_saves_total{reason=\"cold\"}"), 1) << m;  // saved again
}

TEST_F(DiskCacheServer, DamagedEntriesAreLoggedRemovedAndSurvived) {
  TempDir dir;
  const auto opts = cache_options(dir.path(), &log_, &mu_);
  const Json q = chat_body(system_prompt(2), "What is rule 5?");
  Answer cold;
  {
    RunningServer a(server_options(), with_cache(opts));
    cold = ask_chat(a, q);
  }
  auto files = kv_entries(dir);
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
  RunningServer b(server_options(), with_cache(opts));
  Answer a = ask_chat(b, q);
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
  RunningServer c(server_options(), with_cache(opts));
  Answer hit = ask_chat(c, q);
  EXPECT_GT(hit.cached, 0) << all_log();
  EXPECT_EQ(hit.message, cold.message);
  EXPECT_EQ(hit.logprobs, cold.logprobs);
  // The directory wiped while the server runs: a miss, then it saves again.
  fs::remove_all(dir.path());
  Answer after = ask_chat(c, chat_body(system_prompt(3), "Rule 1?"));
  EXPECT_LT(after.cached, 64);  // at most the template's first tokens, live
  EXPECT_FALSE(kv_entries(dir).empty());
}

TEST_F(DiskCacheServer, EvictionKeepsUsageUnderTheBudget) {
  TempDir dir;
  auto opts = cache_options(dir.path(), &log_, &mu_);
  opts.space_mb = 3;  // a few tiny-chat checkpoints (the f32 logits alone are 0.5 MB each)
  RunningServer a(server_options(), with_cache(opts));
  for (int v = 0; v < 3; ++v) {
    ask_chat(a, chat_body(system_prompt(10 + v), "Rule 2?"));
    EXPECT_LE(dir_usage(dir), uint64_t{3} << 20) << "after prompt " << v;
  }
  EXPECT_TRUE(logged("evicted")) << all_log();
  const std::string m = a.metrics();
  EXPECT_GT(metric(m, "ds4_kv_disk_evictions_total"), 0) << m;
  EXPECT_GT(metric(m, "ds4_kv_disk_evicted_bytes_total"), 0) << m;
  EXPECT_EQ(metric(m, "ds4_kv_disk_limit_bytes"), 3 << 20) << m;
  EXPECT_LE(metric(m, "ds4_kv_disk_usage_bytes"), 3 << 20) << m;
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
  EXPECT_LE(dir_usage(dir), uint64_t{static_cast<uint64_t>(budget_mb)} << 20);
  EXPECT_NE(logs.find("evicted"), std::string::npos) << logs;
  // And a third server on what they left answers the same (restored or, if evicted, prefilled).
  const auto opts = cache_options(cache, &log_, &mu_);
  RunningServer c(server_options(), with_cache(opts));
  for (int p = 0; p < 8; p += 3) {
    Answer a = ask_chat(c, prompts[p]);
    EXPECT_EQ(a.message, answers[p][0]) << p;
    EXPECT_EQ(a.logprobs, answers[p][1]) << p;
  }
}

}  // namespace
}  // namespace ds4::server
