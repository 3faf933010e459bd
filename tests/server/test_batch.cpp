// test_batch.cpp — the batching server on the tiny-chat model (CPU), in-process over HTTP:
//  * mixed concurrent requests joining and leaving mid-run give token-for-token the same output
//    (and log-probabilities) as each request run alone, and really share engine steps;
//  * a long prefill does not starve a decoding stream (counted in engine steps from the trace);
//  * a prefix-cache hit (another session's saved prefix, or a shared system prompt's branch point)
//    gives the same output as a cold run, and usage/metrics report the restored tokens;
//  * the KV budget: a request that can never fit is refused with a clear 400, two that do not fit
//    together run one after the other (the second waits), idle sessions are evicted for room.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "server_fixture.h"

namespace ds4::server {
namespace {

using Json = nlohmann::ordered_json;

// The batching tests' server: no drain grace, short keep-alives, ctx 1024, and the step trace captured
// (tests read its step composition lines).
class BatchServer : public RunningServer {
 public:
  explicit BatchServer(ServerOptions opts) : RunningServer(batch_defaults(std::move(opts)), {.capture_trace = true, .disk_cache = {}}) {}

 private:
  static ServerOptions batch_defaults(ServerOptions o) {
    o.drain_grace = std::chrono::seconds(0);
    o.keepalive = std::chrono::milliseconds(200);
    o.map.ctx = 1024;
    return o;
  }
};

struct Output {
  int status = 0;
  std::vector<std::string> tokens;
  std::vector<double> logprobs;
  int64_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
  std::string error;
};

// A greedy /v1/completions request with per-token logprobs (non-streaming: tokens come back whole).
Output complete(int port, const std::string& prompt, int max_tokens) {
  Output o;
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120, 0);
  Json body = {{"model", "deepseek-v4-flash"}, {"prompt", prompt}, {"max_tokens", max_tokens},
               {"temperature", 0},           {"logprobs", 0},     {"ignore_eos", true}};
  auto r = c.Post("/v1/completions", body.dump(), "application/json");
  if (!r) {
    o.error = "no response";
    return o;
  }
  o.status = r->status;
  Json j = Json::parse(r->body, nullptr, false);
  if (r->status != 200) {
    o.error = r->body;
    return o;
  }
  const Json& lp = j["choices"][0]["logprobs"];
  for (const auto& t : lp["tokens"]) o.tokens.push_back(t.get<std::string>());
  for (const auto& v : lp["token_logprobs"]) o.logprobs.push_back(v.get<double>());
  o.prompt_tokens = j["usage"]["prompt_tokens"].get<int64_t>();
  o.completion_tokens = j["usage"]["completion_tokens"].get<int64_t>();
  if (j["usage"].contains("prompt_tokens_details")) o.cached_tokens = j["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
  return o;
}

void expect_same(const Output& solo, const Output& batched, const std::string& what) {
  ASSERT_EQ(batched.status, 200) << what << ": " << batched.error;
  EXPECT_EQ(solo.tokens, batched.tokens) << what;
  ASSERT_EQ(solo.logprobs.size(), batched.logprobs.size()) << what;
  for (size_t i = 0; i < solo.logprobs.size(); ++i)
    EXPECT_NEAR(solo.logprobs[i], batched.logprobs[i], 1e-4) << what << " token " << i;
}

std::string words(int n, int seed) {
  static const char* w[] = {"river", "stone", "light", "garden", "winter", "letter", "morning", "window",
                            "silver", "market", "forest", "bridge", "harbor", "candle", "meadow", "thunder"};
  std::string s = "Story " + std::to_string(seed) + ":";
  uint32_t x = static_cast<uint32_t>(seed) * 2654435761u + 1;
  for (int i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    s += " ";
    s += w[(x >> 16) % 16];
  }
  return s;
}

// Steps of the trace ("=== step N: ... id:dK id:pK"), as the list of "id:kind" entries per step.
std::vector<std::vector<std::string>> trace_steps(const std::string& trace) {
  std::vector<std::vector<std::string>> steps;
  size_t pos = 0;
  while ((pos = trace.find("=== step ", pos)) != std::string::npos) {
    const size_t end = trace.find('\n', pos);
    const std::string line = trace.substr(pos, end - pos);
    pos = end;
    std::vector<std::string> items;
    size_t semi = line.find(';');
    size_t p = semi + 1;
    while (p < line.size()) {
      while (p < line.size() && line[p] == ' ') ++p;
      size_t q = line.find(' ', p);
      if (q == std::string::npos) q = line.size();
      if (q > p) items.push_back(line.substr(p, q - p));
      p = q;
    }
    steps.push_back(items);
  }
  return steps;
}

class BatchTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    EngineOptions eo;
    eo.model_path = DS4_SERVER_TINY_GGUF;
    eo.max_context = 1024;
    eo.n_threads = 2;
    // The same checks on the GPU machine (scripts/gpu_loadgen.sh): DS4_TEST_BACKEND=cuda, and a model
    // path that exists there.
    if (const char* b = std::getenv("DS4_TEST_BACKEND"); b && std::string(b) == "cuda") eo.backend = BackendKind::cuda;
    if (const char* m = std::getenv("DS4_SERVER_TEST_MODEL"); m && *m) eo.model_path = m;
    open_shared_engine(eo);
  }
};

TEST_F(BatchTest, ConcurrentJoinAndLeaveEqualsSoloRuns) {
  const std::vector<std::string> prompts = {words(40, 1), words(90, 2), words(15, 3), words(150, 4), words(60, 5)};
  const std::vector<int> lengths = {24, 8, 40, 16, 30};
  std::vector<Output> solo(prompts.size());
  {
    ServerOptions o;
    o.worker.n_sessions = 1;
    BatchServer s(o);
    for (size_t i = 0; i < prompts.size(); ++i) solo[i] = complete(s.port(), prompts[i], lengths[i]);
  }
  for (const auto& x : solo) ASSERT_EQ(x.status, 200) << x.error;

  ServerOptions o;
  o.worker.n_sessions = 4;  // five requests, four sessions: the last one waits for a free session
  o.worker.prefill_step = 32;
  BatchServer s(o);
  std::vector<Output> got(prompts.size());
  std::vector<std::thread> th;
  // 0, 1 and 2 start together; 3 joins while they run; 4 joins after 1 (the shortest) has left.
  for (size_t i : {0, 1, 2}) th.emplace_back([&, i] { got[i] = complete(s.port(), prompts[i], lengths[i]); });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  th.emplace_back([&] { got[3] = complete(s.port(), prompts[3], lengths[3]); });
  th[1].join();
  th.emplace_back([&] { got[4] = complete(s.port(), prompts[4], lengths[4]); });
  for (auto& t : th)
    if (t.joinable()) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) expect_same(solo[i], got[i], "request " + std::to_string(i));
  // The requests really shared steps: some step carried three sessions or more.
  size_t widest = 0;
  for (const auto& st : trace_steps(s.trace())) widest = std::max(widest, st.size());
  EXPECT_GE(widest, 3u) << s.trace().substr(0, 4000);
  // The gauges are published after the step that finished the last request: poll briefly.
  std::string m;
  for (int i = 0; i < 100; ++i) {
    m = s.metrics();
    if (m.find("ds4_running_sessions 0\n") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_NE(m.find("ds4_engine_steps_total "), std::string::npos);
  EXPECT_NE(m.find("ds4_max_sessions 4\n"), std::string::npos);
  EXPECT_NE(m.find("ds4_running_sessions 0\n"), std::string::npos) << m;
  EXPECT_NE(m.find("ds4_idle_sessions 4\n"), std::string::npos) << m;
}

TEST_F(BatchTest, LongPrefillDoesNotStarveADecoder) {
  ServerOptions o;
  o.worker.n_sessions = 2;
  o.worker.prefill_step = 512;  // the budget (64 tokens per step), not the chunk size, is what limits it
  BatchServer s(o);
  // The decoder starts first and is streaming when the long prompt arrives.
  std::atomic<int> chunks{0};
  std::thread dec([&] {
    httplib::Client c("127.0.0.1", s.port());
    c.set_read_timeout(120, 0);
    Json body = {{"model", "deepseek-v4-flash"}, {"prompt", words(10, 7)}, {"max_tokens", 120},
                 {"temperature", 0},            {"stream", true},         {"ignore_eos", true}};
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
      chunks++;
      return true;
    };
    c.send(req);
  });
  while (chunks.load() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  Output longp = complete(s.port(), words(700, 8), 2);
  dec.join();
  ASSERT_EQ(longp.status, 200) << longp.error;
  ASSERT_GT(longp.prompt_tokens, 600);
  // Job ids: the decoder is request 1 and the long prompt request 2 (the server counts from 1).
  int prefill_steps = 0, with_decoder = 0;
  bool decoder_done = false;
  for (const auto& st : trace_steps(s.trace())) {
    bool p = false, d = false;
    for (const auto& it : st) {
      if (it.rfind("2:p", 0) == 0) p = true;
      if (it.rfind("1:d", 0) == 0) d = true;
    }
    if (!p) continue;
    if (decoder_done) break;
    ++prefill_steps;
    if (d) ++with_decoder;
    else decoder_done = true;  // only once the decoder has finished may a prefill step go without it
  }
  EXPECT_GE(prefill_steps, 9);  // ~700 tokens in <= 63-token shares
  EXPECT_GE(with_decoder, 9);
  EXPECT_GE(with_decoder, prefill_steps - 1) << s.trace().substr(0, 3000);
}

TEST_F(BatchTest, PrefixCacheHitsEqualColdRuns) {
  const std::string system = words(200, 11);  // a shared "system prompt" of about 200 tokens
  const std::string a = system + words(150, 13), b = words(200, 12), c2 = system + words(150, 14),
                    c3 = system + words(150, 15);
  // Cold reference outputs, no prefix cache.
  std::vector<Output> cold;
  {
    ServerOptions o;
    o.worker.n_sessions = 1;
    BatchServer s(o);
    for (const auto& p : {a, c3}) cold.push_back(complete(s.port(), p, 12));
  }
  ServerOptions o;
  o.worker.n_sessions = 1;  // one session: every new conversation overwrites the live one
  o.worker.prefix_cache_bytes = 256ull << 20;
  BatchServer s(o);
  Output a1 = complete(s.port(), a, 12);
  EXPECT_EQ(a1.cached_tokens, 0);
  Output b1 = complete(s.port(), b, 4);  // another conversation takes the session
  EXPECT_EQ(b1.cached_tokens, 0);
  Output a2 = complete(s.port(), a, 12);  // restored from the cache, not from the (overwritten) session
  expect_same(cold[0], a2, "repeat of a");
  EXPECT_GT(a2.cached_tokens, 128);
  EXPECT_EQ(a2.cached_tokens, (a2.prompt_tokens / 128) * 128);
  // The second user of the system prompt shares only its first block with a's saved prefix (a's
  // entry ends inside a's own text): it saves that branch point, and the third user restores it.
  Output x2 = complete(s.port(), c2, 4);
  EXPECT_EQ(x2.cached_tokens, 0);
  Output x3 = complete(s.port(), c3, 12);
  expect_same(cold[1], x3, "third user");
  EXPECT_EQ(x3.cached_tokens, 128);
  const std::string m = s.metrics();
  EXPECT_NE(m.find("ds4_prefix_cache_restores_total 2\n"), std::string::npos) << m;
  EXPECT_NE(m.find("ds4_prefix_cache_restored_tokens_total " + std::to_string(a2.cached_tokens + x3.cached_tokens) + "\n"),
            std::string::npos);
  (void)x2;
}

TEST_F(BatchTest, KvBudgetRefusesWaitsAndEvicts) {
  // The worker's cost model (EngineWorker::learn_kv_cost), computed the same way: the engine's exact
  // growth per token, and as fixed bytes what a session holds after 256 tokens minus that growth (the
  // raw ring, the frontiers and one partly filled commit block per growable region).
  uint64_t fixed = 0;
  double per_token = 0;
  {
    for (double r : shared_engine()->memory_report().kv_bytes_per_token) per_token += r;
    auto sess = shared_engine()->new_session();
    ASSERT_TRUE(sess.ok());
    auto kv = [](const SessionMemory& m) {
      uint64_t b = 0;
      for (MemCategory c : {MemCategory::raw_kv, MemCategory::compressed_kv_r4, MemCategory::compressed_kv_rhc,
                            MemCategory::indexer_kv, MemCategory::compressor_state})
        b += m.host[c] + m.device[c];
      return b;
    };
    const uint64_t empty = kv((*sess)->memory());
    std::vector<TokenId> t(256, shared_engine()->tokenizer().eos_id());
    ASSERT_TRUE((*sess)->eval(t).ok());
    fixed = static_cast<uint64_t>(
        std::max(static_cast<double>(kv((*sess)->memory())) - per_token * 256.0, static_cast<double>(empty)));
  }
  const std::string p1 = words(60, 21), p2 = words(60, 22);
  Output solo1, solo2;
  {
    ServerOptions o;
    BatchServer s(o);
    solo1 = complete(s.port(), p1, 40);
    solo2 = complete(s.port(), p2, 40);
  }
  const double need = static_cast<double>(fixed) + per_token * static_cast<double>(solo1.prompt_tokens + 40);
  ServerOptions o;
  o.worker.n_sessions = 4;
  // Room for one request and half the growth of another: one fits, two do not, and the first one's
  // idle session (at least the fixed ring and frontiers) must go before the second can start.
  o.worker.kv_budget_bytes = static_cast<uint64_t>(need + 0.5 * per_token * static_cast<double>(solo1.prompt_tokens + 40));
  ASSERT_GT(static_cast<double>(fixed), 0.5 * per_token * static_cast<double>(solo1.prompt_tokens + 40));
  BatchServer s(o);
  // Never fits: refused at once with the reason.
  Output big = complete(s.port(), words(60, 23), 900);
  EXPECT_EQ(big.status, 400);
  EXPECT_NE(big.error.find("KV budget"), std::string::npos) << big.error;
  // Two that do not fit together: both complete, the second after the first finished.
  Output r1, r2;
  std::thread t1([&] { r1 = complete(s.port(), p1, 40); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::thread t2([&] { r2 = complete(s.port(), p2, 40); });
  t1.join();
  t2.join();
  expect_same(solo1, r1, "first");
  expect_same(solo2, r2, "second");
  for (const auto& st : trace_steps(s.trace())) EXPECT_LE(st.size(), 1u) << "two requests ran together";
  const std::string m = s.metrics();
  EXPECT_NE(m.find("ds4_admission_rejects_total 1\n"), std::string::npos) << m;
  EXPECT_EQ(m.find("ds4_admission_waits_total 0\n"), std::string::npos) << m;
  // The first request's idle session had to go to make room for the second.
  EXPECT_EQ(m.find("ds4_idle_session_evictions_total 0\n"), std::string::npos) << m;
}

// Greedy requests without logprobs take their tokens from the step's device-side argmax (StepItem::next:
// no logits downloaded); with logprobs they sample the downloaded logits. Both give the same text, also
// when they share steps with a sampled request (temperature 0.9, seeded), whose text is its solo text.
TEST_F(BatchTest, GreedyWithoutLogprobsEqualsLogitsPathBesideSampled) {
  const std::vector<std::string> prompts = {words(30, 11), words(70, 12), words(12, 13)};
  auto text_of = [](int port, const std::string& prompt, int max_tokens, double temperature, bool logprobs = false) {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(120, 0);
    Json body = {{"model", "deepseek-v4-flash"}, {"prompt", prompt}, {"max_tokens", max_tokens},
                 {"temperature", temperature}, {"seed", 3}, {"ignore_eos", true}};
    if (logprobs) body["logprobs"] = 0;  // the logits path: downloaded and sampled on the host
    auto r = c.Post("/v1/completions", body.dump(), "application/json");
    if (!r || r->status != 200) return std::string("error: ") + (r ? r->body : "no response");
    return Json::parse(r->body)["choices"][0]["text"].get<std::string>();
  };
  std::vector<std::string> solo_logits(prompts.size());
  std::string solo_sampled;
  {
    ServerOptions o;
    o.worker.n_sessions = 1;
    BatchServer s(o);
    for (size_t i = 0; i < prompts.size(); ++i) solo_logits[i] = text_of(s.port(), prompts[i], 20, 0.0, true);
    solo_sampled = text_of(s.port(), words(50, 14), 20, 0.9);
  }
  ServerOptions o;
  o.worker.n_sessions = 4;
  o.worker.prefill_step = 32;
  BatchServer s(o);
  std::vector<std::string> got(prompts.size());
  std::string sampled;
  std::vector<std::thread> th;
  for (size_t i = 0; i < prompts.size(); ++i) th.emplace_back([&, i] { got[i] = text_of(s.port(), prompts[i], 20, 0.0); });
  th.emplace_back([&] { sampled = text_of(s.port(), words(50, 14), 20, 0.9); });
  for (auto& t : th) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i], solo_logits[i]) << "request " << i;
  EXPECT_EQ(sampled, solo_sampled);
  size_t widest = 0;
  for (const auto& st : trace_steps(s.trace())) widest = std::max(widest, st.size());
  EXPECT_GE(widest, 2u);
}

}  // namespace
}  // namespace ds4::server
