// test_http.cpp — the real server (Engine on the tiny-chat model, EngineWorker, httplib transport)
// in-process on an ephemeral port, driven over raw HTTP: endpoints, shapes, greedy determinism,
// prefix reuse with rewind, streaming == non-streaming, stop sequences, logprobs, errors in each
// API's shape, auth, body limit, queue-full 503, and cancellation on disconnect.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "server_fixture.h"

namespace ds4::server {
namespace {

using Json = nlohmann::ordered_json;

ServerOptions small_options() {
  ServerOptions o;
  o.map.ctx = 1024;
  o.worker.default_max_tokens = 64;
  o.drain_grace = std::chrono::seconds(0);
  o.keepalive = std::chrono::milliseconds(200);
  return o;
}

class HttpTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    EngineOptions eo;
    eo.model_path = DS4_SERVER_TINY_GGUF;
    eo.max_context = 1024;
    eo.n_threads = 2;
    open_shared_engine(eo);
  }
};

// A /v1/completions body that keeps generating for many seconds on the tiny model (16,000 tokens that
// ignore EOS; needs ctx 16384): disconnect tests need the generation to be still running when the
// client goes, which 900 tokens were not always on a fast machine.
Json endless_completion_body(const std::string& prompt) {
  return {{"model", "deepseek-v4-flash"}, {"prompt", prompt}, {"max_tokens", 16000}, {"temperature", 0},
          {"ignore_eos", true}};
}

Json chat_body(const std::string& text, int max_tokens = 8) {
  return {{"model", "deepseek-v4-flash"},
          {"messages", Json::array({{{"role", "user"}, {"content", text}}})},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"thinking", {{"type", "disabled"}}}};
}

// Concatenates `delta.<field>` of every OpenAI chat chunk in an SSE body.
std::string sse_concat(const std::string& body, const std::string& field, Json* last_usage = nullptr,
                       std::string* finish = nullptr) {
  std::string out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    size_t end = body.find("\n\n", pos);
    std::string data = body.substr(pos + 6, end - pos - 6);
    pos = end;
    if (data == "[DONE]") break;
    Json j = Json::parse(data, nullptr, false);
    if (j.is_discarded()) continue;
    if (j.contains("usage") && last_usage) *last_usage = j["usage"];
    if (!j.contains("choices") || j["choices"].empty()) continue;
    const Json& c = j["choices"][0];
    if (c.contains("delta") && c["delta"].contains(field) && c["delta"][field].is_string())
      out += c["delta"][field].get<std::string>();
    if (finish && c.contains("finish_reason") && c["finish_reason"].is_string()) *finish = c["finish_reason"];
  }
  return out;
}

TEST_F(HttpTest, HealthModelsAndMetrics) {
  RunningServer s(small_options());
  auto h = s.client().Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(Json::parse(h->body)["status"], "ok");
  auto m = s.client().Get("/v1/models");
  ASSERT_TRUE(m);
  Json models = Json::parse(m->body);
  EXPECT_EQ(models["object"], "list");
  EXPECT_EQ(models["data"][0]["id"], "deepseek-v4-flash");
  EXPECT_EQ(models["data"][0]["context_length"], 1024);
  auto one = s.client().Get("/v1/models/deepseek-chat");
  ASSERT_TRUE(one);
  EXPECT_EQ(one->status, 200);
  auto missing = s.client().Get("/v1/models/gpt-9");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(Json::parse(missing->body)["error"]["code"], "model_not_found");
  auto anth = s.client().Get("/v1/models", {{"anthropic-version", "2023-06-01"}});
  ASSERT_TRUE(anth);
  EXPECT_EQ(Json::parse(anth->body)["data"][0]["type"], "model");
  s.post_json("/v1/chat/completions", chat_body("Hello", 3));
  auto met = s.client().Get("/metrics");
  ASSERT_TRUE(met);
  EXPECT_NE(met->body.find("ds4_requests_total{endpoint=\"chat.completions\",code=\"200\"} 1"), std::string::npos)
      << met->body;
  EXPECT_NE(met->body.find("ds4_completion_tokens_total 3"), std::string::npos);
  EXPECT_NE(met->body.find("ds4_memory_bytes{place=\"host\",category=\"weights\"}"), std::string::npos);
  EXPECT_NE(met->body.find("# TYPE ds4_queue_depth gauge"), std::string::npos);
}

TEST_F(HttpTest, ChatGreedyIsDeterministicAndReusesThePrefix) {
  RunningServer s(small_options());
  Json a = s.post_json("/v1/chat/completions", chat_body("Tell me about the lake of Como", 8));
  ASSERT_TRUE(a.contains("choices")) << a.dump();
  EXPECT_EQ(a["object"], "chat.completion");
  EXPECT_EQ(a["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(a["usage"]["completion_tokens"], 8);
  const int64_t prompt = a["usage"]["prompt_tokens"];
  EXPECT_GT(prompt, 5);
  Json b = s.post_json("/v1/chat/completions", chat_body("Tell me about the lake of Como", 8));
  EXPECT_EQ(a["choices"][0]["message"]["content"], b["choices"][0]["message"]["content"]);
  // The whole prompt is already in the live session.
  EXPECT_EQ(b["usage"]["prompt_tokens_details"]["cached_tokens"], prompt);

  // A different question shares the template prefix: the session rewinds to the common prefix.
  Json c = s.post_json("/v1/chat/completions", chat_body("Tell me about the sea", 8));
  const int64_t cached = c["usage"]["prompt_tokens_details"]["cached_tokens"];
  EXPECT_GT(cached, 0);
  EXPECT_LT(cached, c["usage"]["prompt_tokens"].get<int64_t>());
  // Rewinding must not change results: the first question again gives the first answer.
  Json d = s.post_json("/v1/chat/completions", chat_body("Tell me about the lake of Como", 8));
  EXPECT_EQ(a["choices"][0]["message"]["content"], d["choices"][0]["message"]["content"]);
  EXPECT_GT(d["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), 0);
}

TEST_F(HttpTest, StreamingEqualsNonStreaming) {
  RunningServer s(small_options());
  Json body = chat_body("Quel ramo del lago di Como", 10);
  Json full = s.post_json("/v1/chat/completions", body);
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  auto r = s.post("/v1/chat/completions", body.dump());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  Json usage;
  std::string finish;
  EXPECT_EQ(sse_concat(r->body, "content", &usage, &finish), full["choices"][0]["message"]["content"].get<std::string>());
  EXPECT_EQ(finish, "length");
  EXPECT_EQ(usage["completion_tokens"], 10);
  EXPECT_NE(r->body.find("data: [DONE]"), std::string::npos);
}

TEST_F(HttpTest, ThinkingGoesToReasoningContent) {
  RunningServer s(small_options());
  Json body = chat_body("Hi", 6);
  body.erase("thinking");  // default: thinking on, so everything generated here is reasoning
  Json r = s.post_json("/v1/chat/completions", body);
  const auto& msg = r["choices"][0]["message"];
  ASSERT_TRUE(msg.contains("reasoning_content")) << r.dump();
  EXPECT_FALSE(msg["reasoning_content"].get<std::string>().empty());
  EXPECT_EQ(r["usage"]["completion_tokens_details"]["reasoning_tokens"], 6);
}

TEST_F(HttpTest, StopSequenceCutsTheAnswer) {
  RunningServer s(small_options());
  Json full = s.post_json("/v1/chat/completions", chat_body("Once upon a time", 12));
  const std::string text = full["choices"][0]["message"]["content"];
  ASSERT_GT(text.size(), 6u);
  // A stop string from the middle of the greedy answer.
  const std::string stop = text.substr(text.size() / 2, 2);
  Json body = chat_body("Once upon a time", 12);
  body["stop"] = stop;
  Json cut = s.post_json("/v1/chat/completions", body);
  EXPECT_EQ(cut["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(cut["choices"][0]["message"]["content"].get<std::string>(), text.substr(0, text.find(stop)));
}

TEST_F(HttpTest, LogprobsAndCompletions) {
  RunningServer s(small_options());
  Json body = chat_body("Hello", 4);
  body["logprobs"] = true;
  body["top_logprobs"] = 3;
  Json r = s.post_json("/v1/chat/completions", body);
  const Json& lp = r["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(lp.size(), 4u) << r.dump();
  for (const auto& e : lp) {
    EXPECT_EQ(e["top_logprobs"].size(), 3u);
    EXPECT_LE(e["logprob"].get<double>(), 0.0);
    // Greedy: the chosen token is the most likely one.
    EXPECT_NEAR(e["logprob"].get<double>(), e["top_logprobs"][0]["logprob"].get<double>(), 1e-5);
  }
  Json c = s.post_json("/v1/completions", {{"prompt", "The sea"}, {"max_tokens", 5}, {"temperature", 0}, {"logprobs", 2}});
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["choices"][0]["logprobs"]["tokens"].size(), 5u);
  // Raw completion: BOS + the prompt's tokens, no chat template.
  EXPECT_LE(c["usage"]["prompt_tokens"].get<int64_t>(), 4);
}

TEST_F(HttpTest, AnthropicAndResponsesShapes) {
  RunningServer s(small_options());
  Json m = s.post_json("/v1/messages", {{"model", "deepseek-v4-flash"}, {"max_tokens", 5},
                                        {"thinking", {{"type", "disabled"}}},
                                        {"messages", Json::array({{{"role", "user"}, {"content", "Hi"}}})}});
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["stop_reason"], "max_tokens");
  EXPECT_EQ(m["content"][0]["type"], "text");
  EXPECT_EQ(m["usage"]["output_tokens"], 5);
  Json ct = s.post_json("/v1/messages/count_tokens", {{"model", "deepseek-v4-flash"},
                                                      {"thinking", {{"type", "disabled"}}},
                                                      {"messages", Json::array({{{"role", "user"}, {"content", "Hi"}}})}});
  EXPECT_EQ(ct["input_tokens"], m["usage"]["input_tokens"].get<int64_t>() + m["usage"]["cache_read_input_tokens"].get<int64_t>());
  Json r = s.post_json("/v1/responses", {{"input", "Hi"}, {"max_output_tokens", 4}, {"reasoning", {{"effort", "none"}}}});
  EXPECT_EQ(r["object"], "response");
  EXPECT_EQ(r["status"], "incomplete");
  EXPECT_EQ(r["output"][0]["type"], "message");
  EXPECT_EQ(r["usage"]["output_tokens"], 4);
  auto st = s.post("/v1/responses", Json({{"input", "Hi"}, {"max_output_tokens", 3}, {"stream", true},
                                          {"reasoning", {{"effort", "none"}}}}).dump());
  ASSERT_TRUE(st);
  EXPECT_NE(st->body.find("event: response.created"), std::string::npos);
  EXPECT_NE(st->body.find("event: response.output_text.delta"), std::string::npos);
  EXPECT_NE(st->body.find("event: response.incomplete"), std::string::npos);
  EXPECT_NE(st->body.find("\"sequence_number\":0"), std::string::npos);
}

TEST_F(HttpTest, ErrorsUseEachApisShape) {
  RunningServer s(small_options());
  auto bad = s.post("/v1/chat/completions", "{not json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(Json::parse(bad->body)["error"]["type"], "invalid_request_error");
  auto abad = s.post("/v1/messages", "[1,2]");
  ASSERT_TRUE(abad);
  EXPECT_EQ(abad->status, 400);
  Json aj = Json::parse(abad->body);
  EXPECT_EQ(aj["type"], "error");
  EXPECT_EQ(aj["error"]["type"], "invalid_request_error");
  Json empty = s.post_json("/v1/chat/completions", {{"messages", Json::array()}}, 400);
  EXPECT_NE(empty["error"]["message"].get<std::string>().find("messages"), std::string::npos);
  Json wrong_type = s.post_json("/v1/chat/completions", {{"messages", "hi"}}, 400);
  EXPECT_NE(wrong_type["error"]["message"].get<std::string>().find("array"), std::string::npos);
  Json unknown_model = s.post_json("/v1/chat/completions", {{"model", "gpt-4o"}, {"messages", Json::array({{{"role", "user"}, {"content", "x"}}})}}, 404);
  EXPECT_NE(unknown_model["error"]["message"].get<std::string>().find("gpt-4o"), std::string::npos);
  Json n2 = chat_body("x");
  n2["n"] = 2;
  EXPECT_NE(s.post_json("/v1/chat/completions", n2, 400)["error"]["message"].get<std::string>().find("'n'"), std::string::npos);
  Json pen = chat_body("x");
  pen["presence_penalty"] = 0.5;
  s.post_json("/v1/chat/completions", pen, 400);
  Json img = {{"messages", Json::array({{{"role", "user"},
                                         {"content", Json::array({{{"type", "image_url"}, {"image_url", {{"url", "http://x"}}}}})}}})}};
  s.post_json("/v1/chat/completions", img, 400);
  auto utf = s.post("/v1/chat/completions", std::string("{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}"));
  ASSERT_TRUE(utf);
  EXPECT_EQ(utf->status, 400);
  EXPECT_NE(utf->body.find("UTF-8"), std::string::npos);
  std::string long_text;
  for (int i = 0; i < 1200; ++i) long_text += " sea";
  Json too_long = s.post_json("/v1/chat/completions", chat_body(long_text), 400);
  EXPECT_EQ(too_long["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(too_long["error"]["n_ctx"], 1024);
  Json a_long = s.post_json("/v1/messages", {{"max_tokens", 4}, {"messages", Json::array({{{"role", "user"}, {"content", long_text}}})}}, 400);
  EXPECT_EQ(a_long["type"], "error");
  EXPECT_GT(a_long["error"]["n_prompt_tokens"].get<int64_t>(), 1024);
  auto nf = s.client().Get("/v1/nothing");
  ASSERT_TRUE(nf);
  EXPECT_EQ(nf->status, 404);
  EXPECT_NE(nf->body.find("unknown endpoint"), std::string::npos);
  std::string nested(5000, '[');
  auto deep = s.post("/v1/chat/completions", nested);
  ASSERT_TRUE(deep);
  EXPECT_EQ(deep->status, 400);
  // The server is still healthy after all that.
  s.post_json("/v1/chat/completions", chat_body("ok", 2));
}

TEST_F(HttpTest, BodyLimitAuthAndCors) {
  ServerOptions o = small_options();
  o.api_key = "sk-test-123";
  o.cors = true;
  o.max_body_bytes = 4096;
  RunningServer s(o);
  auto no = s.post("/v1/chat/completions", chat_body("x", 2).dump());
  ASSERT_TRUE(no);
  EXPECT_EQ(no->status, 401);
  auto wrong = s.post("/v1/chat/completions", chat_body("x", 2).dump(), {{"Authorization", "Bearer sk-test-124"}});
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  auto ok = s.post("/v1/chat/completions", chat_body("x", 2).dump(), {{"Authorization", "Bearer sk-test-123"}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(ok->get_header_value("Access-Control-Allow-Origin"), "*");
  auto anth = s.post("/v1/messages", Json({{"max_tokens", 2}, {"messages", Json::array({{{"role", "user"}, {"content", "x"}}})}}).dump(),
                     {{"x-api-key", "sk-test-123"}});
  ASSERT_TRUE(anth);
  EXPECT_EQ(anth->status, 200);
  auto anth_no = s.post("/v1/messages", "{}", {{"x-api-key", "nope"}});
  ASSERT_TRUE(anth_no);
  EXPECT_EQ(anth_no->status, 401);
  EXPECT_EQ(Json::parse(anth_no->body)["error"]["type"], "authentication_error");
  auto health = s.client().Get("/health");  // liveness stays open for load balancers
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto pre = s.client().Options("/v1/chat/completions");
  ASSERT_TRUE(pre);
  EXPECT_EQ(pre->status, 204);
  std::string big = "{\"messages\":[{\"role\":\"user\",\"content\":\"" + std::string(8000, 'a') + "\"}]}";
  auto large = s.post("/v1/chat/completions", big, {{"Authorization", "Bearer sk-test-123"}});
  ASSERT_TRUE(large);
  EXPECT_EQ(large->status, 413);
}

TEST_F(HttpTest, QueueFullAnswers503AndDisconnectCancels) {
  ServerOptions o = small_options();
  o.map.ctx = 16384;
  o.worker.max_queue = 1;
  o.worker.default_max_tokens = 100000;
  RunningServer s(o);
  // A long streaming generation occupies the only session; it must still be running when its client
  // disconnects, after the queued client's 1 s timeout (endless_completion_body).
  std::atomic<bool> stop_reading{false};
  std::atomic<int> chunks{0};
  std::thread first([&] {
    httplib::Client c("127.0.0.1", s.port());
    Json b = endless_completion_body("long");
    b["stream"] = true;
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = b.dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
      chunks++;
      return !stop_reading.load();  // returning false closes the connection
    };
    c.send(req);
  });
  while (chunks.load() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  // ...a second request waits in the queue (its client gives up after 1 s: a disconnect while queued)...
  std::thread second([&] {
    httplib::Client c("127.0.0.1", s.port());
    c.set_read_timeout(1, 0);
    c.Post("/v1/chat/completions", chat_body("queued", 4).dump(), "application/json");
  });
  // Wait until it is really queued (a fixed sleep raced with a loaded machine).
  for (auto q0 = std::chrono::steady_clock::now(); std::chrono::steady_clock::now() - q0 < std::chrono::seconds(10);) {
    auto m = s.client().Get("/metrics");
    if (m && m->body.find("\nds4_queue_depth 1\n") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // ...and a third finds the queue full.
  auto busy = s.post("/v1/chat/completions", chat_body("third", 2).dump());
  ASSERT_TRUE(busy);
  EXPECT_EQ(busy->status, 503);
  EXPECT_EQ(busy->get_header_value("Retry-After"), "1");
  second.join();
  stop_reading = true;  // the streaming client disconnects mid-generation
  first.join();
  // Both are cancelled once the server's socket polls (every 100 ms) notice; the worker is then free
  // well before 16,000 tokens could have been generated.
  auto t0 = std::chrono::steady_clock::now();
  for (bool seen = false; !seen && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10);) {
    auto m = s.client().Get("/metrics");
    seen = m && m->body.find("ds4_cancelled_total 2") != std::string::npos;
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  Json after = s.post_json("/v1/chat/completions", chat_body("after", 2));
  EXPECT_EQ(after["usage"]["completion_tokens"], 2);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
  auto met = s.client().Get("/metrics");
  ASSERT_TRUE(met);
  EXPECT_NE(met->body.find("ds4_cancelled_total 2"), std::string::npos) << met->body;
  EXPECT_NE(met->body.find("ds4_rejected_busy_total 1"), std::string::npos);
}

TEST_F(HttpTest, NonStreamingDisconnectCancelsDuringGeneration) {
  ServerOptions o = small_options();
  o.map.ctx = 16384;
  o.worker.default_max_tokens = 100000;
  RunningServer s(o);
  {
    httplib::Client c("127.0.0.1", s.port());
    c.set_read_timeout(0, 500000);  // give up after 0.5 s, long before 16,000 EOS-ignoring tokens are done
    auto r = c.Post("/v1/completions", endless_completion_body("a long answer please").dump(), "application/json");
    EXPECT_FALSE(r);
  }
  auto t0 = std::chrono::steady_clock::now();
  Json after = s.post_json("/v1/chat/completions", chat_body("next", 2));
  EXPECT_EQ(after["usage"]["completion_tokens"], 2);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
  auto met = s.client().Get("/metrics");
  ASSERT_TRUE(met);
  EXPECT_NE(met->body.find("ds4_cancelled_total 1"), std::string::npos) << met->body;
}

TEST_F(HttpTest, ParallelSessionsKeepTheirOwnPrefixes) {
  ServerOptions o = small_options();
  o.worker.n_sessions = 2;
  RunningServer s(o);
  Json a1 = s.post_json("/v1/chat/completions", chat_body("The first conversation is about lakes", 4));
  Json b1 = s.post_json("/v1/chat/completions", chat_body("A second, unrelated conversation: mountains", 4));
  Json a2 = s.post_json("/v1/chat/completions", chat_body("The first conversation is about lakes", 4));
  Json b2 = s.post_json("/v1/chat/completions", chat_body("A second, unrelated conversation: mountains", 4));
  // With two sessions neither conversation evicts the other.
  EXPECT_EQ(a2["usage"]["prompt_tokens_details"]["cached_tokens"], a2["usage"]["prompt_tokens"]);
  EXPECT_EQ(b2["usage"]["prompt_tokens_details"]["cached_tokens"], b2["usage"]["prompt_tokens"]);
  EXPECT_EQ(a1["choices"][0]["message"]["content"], a2["choices"][0]["message"]["content"]);
  EXPECT_EQ(b1["choices"][0]["message"]["content"], b2["choices"][0]["message"]["content"]);
  // Concurrent requests on two sessions both complete.
  Json r1, r2;
  std::thread t1([&] {
    httplib::Client c("127.0.0.1", s.port());
    auto r = c.Post("/v1/chat/completions", chat_body("The first conversation is about lakes", 20).dump(), "application/json");
    if (r) r1 = Json::parse(r->body, nullptr, false);
  });
  std::thread t2([&] {
    httplib::Client c("127.0.0.1", s.port());
    auto r = c.Post("/v1/chat/completions", chat_body("A second, unrelated conversation: mountains", 20).dump(), "application/json");
    if (r) r2 = Json::parse(r->body, nullptr, false);
  });
  t1.join();
  t2.join();
  EXPECT_EQ(r1["usage"]["completion_tokens"], 20);
  EXPECT_EQ(r2["usage"]["completion_tokens"], 20);
  EXPECT_EQ(r1["usage"]["prompt_tokens_details"]["cached_tokens"], r1["usage"]["prompt_tokens"]);
}

TEST_F(HttpTest, RequestTimeoutEndsTheRequest) {
  ServerOptions o = small_options();
  o.worker.default_max_tokens = 100000;
  o.request_timeout = std::chrono::seconds(1);
  RunningServer s(o);
  auto t0 = std::chrono::steady_clock::now();
  auto r = s.post("/v1/chat/completions", chat_body("x", 900).dump());
  ASSERT_TRUE(r);
  // Text was generated before the deadline: the answer is returned with what there is.
  EXPECT_EQ(r->status, 200) << r->body;
  Json j = Json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "error");
  EXPECT_LT(j["usage"]["completion_tokens"].get<int64_t>(), 900);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

TEST_F(HttpTest, GracefulDrainFinishesInFlightAndRefusesNew) {
  ServerOptions o = small_options();
  o.drain_grace = std::chrono::seconds(30);
  auto s = std::make_unique<RunningServer>(o);
  const int port = s->port();
  std::string streamed;
  std::thread client([&] {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(60, 0);
    Json b = chat_body("drain", 40);
    b["stream"] = true;
    auto r = c.Post("/v1/chat/completions", b.dump(), "application/json");
    if (r) streamed = r->body;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  // shutdown() blocks while draining; meanwhile new requests are refused and /health says so.
  std::thread stopper([&] { s.reset(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  httplib::Client c2("127.0.0.1", port);
  if (auto h = c2.Get("/health")) {
    EXPECT_EQ(h->status, 503);
    EXPECT_NE(h->body.find("draining"), std::string::npos);
  }
  if (auto r = c2.Post("/v1/chat/completions", chat_body("late", 2).dump(), "application/json")) {
    EXPECT_EQ(r->status, 503);
    EXPECT_NE(r->body.find("shutting down"), std::string::npos);
  }
  client.join();
  stopper.join();
  // The in-flight stream ran to its natural end.
  std::string finish;
  sse_concat(streamed, "content", nullptr, &finish);
  EXPECT_EQ(finish, "length") << streamed.substr(0, 300);
  EXPECT_NE(streamed.find("data: [DONE]"), std::string::npos);
}

// Issue 7: GET /v1/memory (JSON totals, reconciliation, per-session bytes and bytes per token), the
// /metrics memory lines and the server-log summary written for each /v1/memory request.
TEST_F(HttpTest, MemoryEndpointMetricsAndLog) {
  char* log_buf = nullptr;
  size_t log_len = 0;
  std::FILE* log = open_memstream(&log_buf, &log_len);
  ASSERT_TRUE(log);
  ServerOptions o = small_options();
  o.log = log;
  {
    RunningServer s(o);
    s.post_json("/v1/chat/completions", chat_body("Tell me about the lake of Como", 4));
    // The worker refreshes its snapshot right after it ends a request, which may be just after the
    // client has read the answer: poll briefly until the session shows.
    Json j;
    for (int i = 0; i < 100; ++i) {
      auto r = s.client().Get("/v1/memory");
      ASSERT_TRUE(r);
      ASSERT_EQ(r->status, 200);
      j = Json::parse(r->body);
      if (!j["sessions"].empty() && j["sessions"][0]["tokens"].get<int64_t>() > 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_GT(j["host"]["weights"].get<uint64_t>(), 0u);
    EXPECT_GT(j["host"]["scratch"].get<uint64_t>(), 0u);
    EXPECT_EQ(j["host"]["total"].get<uint64_t>(), [&] {
      uint64_t t = 0;
      for (const auto& [k, v] : j["host"].items())
        if (k != "total") t += v.get<uint64_t>();
      return t;
    }());
    EXPECT_GT(j["reconcile"]["host_rss"].get<uint64_t>(), 0u);
    EXPECT_EQ(j["reconcile"]["host_unexplained"].get<int64_t>(),
              static_cast<int64_t>(j["reconcile"]["host_rss"].get<uint64_t>()) -
                  static_cast<int64_t>(j["reconcile"]["host_counted_resident"].get<uint64_t>()));
    EXPECT_GT(j["kv_bytes_per_token"]["total"].get<double>(), 0.0);
    ASSERT_GE(j["sessions"].size(), 1u);
    uint64_t r4 = 0;
    bool holding = false;
    for (const auto& sess : j["sessions"]) {
      r4 += sess["bytes"]["compressed_kv_r4"].get<uint64_t>();
      if (sess["tokens"].get<int64_t>() > 0) {
        holding = true;
        EXPECT_GT(sess["bytes_per_token"]["raw_kv"].get<double>(), 0.0);
        EXPECT_DOUBLE_EQ(sess["bytes_per_token"]["total"].get<double>(),
                         static_cast<double>(sess["bytes"]["total"].get<uint64_t>()) / sess["tokens"].get<double>());
      }
    }
    EXPECT_TRUE(holding);
    EXPECT_EQ(r4, j["host"]["compressed_kv_r4"].get<uint64_t>());
    auto met = s.client().Get("/metrics");
    ASSERT_TRUE(met);
    for (const char* line : {"ds4_memory_unexplained_bytes{place=\"host\"}", "ds4_weights_resident_bytes ",
                             "ds4_kv_bytes_per_token{category=\"indexer_kv\"}", "ds4_session_tokens{session=",
                             "ds4_session_memory_bytes{session="})
      EXPECT_NE(met->body.find(line), std::string::npos) << line;
  }
  std::fclose(log);
  const std::string text(log_buf, log_len);
  std::free(log_buf);
  EXPECT_NE(text.find("ds4-server: memory: weights"), std::string::npos) << text;
  EXPECT_NE(text.find("B/token"), std::string::npos) << text;
}

}  // namespace
}  // namespace ds4::server
