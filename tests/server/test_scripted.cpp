// test_scripted.cpp — the whole server (mapping, worker, parser, formatters, transport) over HTTP on
// a scripted engine, for behaviour a random tiny model never shows: tool calls parsed and streamed in
// each API, exact-DSML replay reusing the live prefix, forced tool calls, reasoning/content split,
// stop sequences, and UTF-8 characters split across tokens.
#include <gtest/gtest.h>
#include <httplib.h>

#include <thread>

#include "scripted_engine.h"
#include "server_fixture.h"

namespace ds4::server {
namespace {

const std::string kCall =
    "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
    "<｜DSML｜parameter name=\"unit\" string=\"true\">celsius</｜DSML｜parameter>\n"
    "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
    "<｜DSML｜parameter name=\"days\" string=\"false\">2</｜DSML｜parameter>\n"
    "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";

const Json kTools = Json::parse(R"([{"type":"function","function":{"name":"get_weather","description":"Weather",
  "parameters":{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string"},"days":{"type":"integer"}}}}}])");

class Scripted : public ::testing::Test {
 protected:
  void start(const std::string& script, ServerOptions o = {}) {
    engine_ = std::make_unique<testing::ScriptedEngine>(script);
    o.map.ctx = 4096;
    o.worker.default_max_tokens = 400;
    o.drain_grace = std::chrono::seconds(0);
    server_ = std::make_unique<RunningServer>(*engine_, o);
  }
  void TearDown() override { server_.reset(); }
  std::string post_raw(const std::string& path, const Json& body, int expect = 200) {
    auto r = server_->post(path, body.dump());
    EXPECT_TRUE(r);
    if (!r) return {};
    EXPECT_EQ(r->status, expect) << r->body;
    return r->body;
  }
  Json post(const std::string& path, const Json& body, int expect = 200) {
    return Json::parse(post_raw(path, body, expect), nullptr, false);
  }
  // Every "data: " payload of an SSE body, parsed.
  static std::vector<Json> sse(const std::string& body) {
    std::vector<Json> out;
    size_t pos = 0;
    while ((pos = body.find("data: ", pos)) != std::string::npos) {
      size_t end = body.find('\n', pos);
      std::string d = body.substr(pos + 6, end - pos - 6);
      pos = end;
      if (d == "[DONE]") continue;
      Json j = Json::parse(d, nullptr, false);
      if (!j.is_discarded()) out.push_back(std::move(j));
    }
    return out;
  }

  std::unique_ptr<testing::ScriptedEngine> engine_;
  std::unique_ptr<RunningServer> server_;
};

Json user_chat(const std::string& text, bool thinking) {
  Json b = {{"messages", Json::array({{{"role", "user"}, {"content", text}}})}};
  if (!thinking) b["thinking"] = {{"type", "disabled"}};
  return b;
}

TEST_F(Scripted, ReasoningAndContentAreSeparated) {
  start("Let me think.</think>The answer is 4.");
  Json r = post("/v1/chat/completions", user_chat("2+2?", true));
  EXPECT_EQ(r["choices"][0]["message"]["reasoning_content"], "Let me think.");
  EXPECT_EQ(r["choices"][0]["message"]["content"], "The answer is 4.");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  Json a = post("/v1/messages", {{"max_tokens", 100}, {"messages", Json::array({{{"role", "user"}, {"content", "2+2?"}}})}});
  EXPECT_EQ(a["content"][0]["type"], "thinking");
  EXPECT_EQ(a["content"][0]["thinking"], "Let me think.");
  EXPECT_EQ(a["content"][1]["text"], "The answer is 4.");
  EXPECT_EQ(a["stop_reason"], "end_turn");
  Json resp = post("/v1/responses", {{"input", "2+2?"}, {"reasoning", {{"summary", "auto"}}}});
  EXPECT_EQ(resp["output"][0]["type"], "reasoning");
  EXPECT_EQ(resp["output"][0]["summary"][0]["text"], "Let me think.");
  EXPECT_EQ(resp["output"][1]["content"][0]["text"], "The answer is 4.");
  EXPECT_EQ(resp["status"], "completed");
}

TEST_F(Scripted, ChatToolCallNonStreamingAndStreaming) {
  start("Checking." + kCall + "ignored tail");
  Json body = user_chat("Weather in Paris for 2 days?", false);
  body["tools"] = kTools;
  Json r = post("/v1/chat/completions", body);
  const Json& msg = r["choices"][0]["message"];
  EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(msg["content"], "Checking.");
  ASSERT_EQ(msg["tool_calls"].size(), 1u) << r.dump();
  const std::string id = msg["tool_calls"][0]["id"];
  EXPECT_EQ(id.rfind("call_", 0), 0u);
  EXPECT_EQ(id.size(), 37u);
  EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(Json::parse(msg["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            Json::parse(R"({"unit":"celsius","city":"Paris","days":2})"));

  body["stream"] = true;
  std::string args, name, sid, content;
  std::string finish;
  for (const Json& c : sse(post_raw("/v1/chat/completions", body))) {
    if (!c.contains("choices") || c["choices"].empty()) continue;
    const Json& d = c["choices"][0]["delta"];
    if (d.contains("content") && d["content"].is_string()) content += d["content"].get<std::string>();
    if (d.contains("tool_calls")) {
      const Json& tc = d["tool_calls"][0];
      EXPECT_EQ(tc["index"], 0);
      if (tc.contains("id")) sid = tc["id"];
      if (tc["function"].contains("name")) name = tc["function"]["name"];
      args += tc["function"]["arguments"].get<std::string>();
    }
    if (c["choices"][0]["finish_reason"].is_string()) finish = c["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(content, "Checking.");
  EXPECT_EQ(name, "get_weather");
  EXPECT_EQ(sid.rfind("call_", 0), 0u);
  EXPECT_NE(sid, id);  // every call gets a fresh id
  EXPECT_EQ(Json::parse(args), Json::parse(R"({"unit":"celsius","city":"Paris","days":2})"));
  EXPECT_EQ(finish, "tool_calls");
}

TEST_F(Scripted, ExactDsmlReplayKeepsTheLivePrefix) {
  start("Checking." + kCall);
  Json body = user_chat("Weather in Paris for 2 days?", false);
  body["tools"] = kTools;
  Json first = post("/v1/chat/completions", body);
  const Json call = first["choices"][0]["message"]["tool_calls"][0];
  const int64_t prompt1 = first["usage"]["prompt_tokens"];
  const int64_t gen1 = first["usage"]["completion_tokens"];
  // The client replays the call as JSON in its own key order and spacing.
  Json follow = body;
  follow["messages"].push_back({{"role", "assistant"}, {"content", "Checking."},
                                {"tool_calls", Json::array({{{"id", call["id"]}, {"type", "function"},
                                  {"function", {{"name", "get_weather"}, {"arguments", "{\"city\": \"Paris\", \"unit\": \"celsius\", \"days\": 2}"}}}}})}});
  follow["messages"].push_back({{"role", "tool"}, {"tool_call_id", call["id"]}, {"content", "18C"}});
  Json second = post("/v1/chat/completions", follow);
  // Everything the model generated (but the last, never evaluated, token) is reused: the replayed
  // history re-rendered byte-identically thanks to the id -> DSML memory.
  EXPECT_GE(second["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), prompt1 + gen1 - 1);

  // With an unknown id the canonical rendering (city first) diverges inside the tool block.
  follow["messages"][1]["tool_calls"][0]["id"] = "call_00000000000000000000000000000000";
  follow["messages"][2]["tool_call_id"] = "call_00000000000000000000000000000000";
  post("/v1/chat/completions", body);  // make the first turn live again
  Json third = post("/v1/chat/completions", follow);
  EXPECT_LT(third["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), prompt1 + gen1 - 1);
}

TEST_F(Scripted, AnthropicAndResponsesToolCalls) {
  start(kCall);
  Json tools = Json::array({{{"name", "get_weather"}, {"description", "Weather"},
                             {"input_schema", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}});
  Json req = {{"max_tokens", 1000}, {"tools", tools}, {"thinking", {{"type", "disabled"}}},
              {"messages", Json::array({{{"role", "user"}, {"content", "Weather?"}}})}};
  Json m = post("/v1/messages", req);
  EXPECT_EQ(m["stop_reason"], "tool_use");
  ASSERT_EQ(m["content"].size(), 1u) << m.dump();
  EXPECT_EQ(m["content"][0]["type"], "tool_use");
  EXPECT_EQ(m["content"][0]["id"].get<std::string>().rfind("toolu_", 0), 0u);
  EXPECT_EQ(m["content"][0]["input"], Json::parse(R"({"unit":"celsius","city":"Paris","days":2})"));

  req["stream"] = true;
  std::string partial;
  std::vector<std::string> types;
  for (const Json& e : sse(post_raw("/v1/messages", req))) {
    types.push_back(e["type"]);
    if (e["type"] == "content_block_start") EXPECT_EQ(e["content_block"]["type"], "tool_use");
    if (e["type"] == "content_block_delta") partial += e["delta"]["partial_json"].get<std::string>();
    if (e["type"] == "message_delta") EXPECT_EQ(e["delta"]["stop_reason"], "tool_use");
  }
  EXPECT_EQ(Json::parse(partial), Json::parse(R"({"unit":"celsius","city":"Paris","days":2})"));
  EXPECT_EQ(types.front(), "message_start");
  EXPECT_EQ(types.back(), "message_stop");

  Json rtools = Json::array({{{"type", "function"}, {"name", "get_weather"}, {"parameters", {{"type", "object"}}}}});
  Json r = post("/v1/responses", {{"input", "Weather?"}, {"tools", rtools}, {"reasoning", {{"effort", "none"}}}});
  ASSERT_EQ(r["output"].size(), 1u) << r.dump();
  EXPECT_EQ(r["output"][0]["type"], "function_call");
  EXPECT_EQ(r["output"][0]["name"], "get_weather");
  EXPECT_EQ(r["output"][0]["call_id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(Json::parse(r["output"][0]["arguments"].get<std::string>()),
            Json::parse(R"({"unit":"celsius","city":"Paris","days":2})"));
  std::string deltas;
  bool done_event = false;
  for (const Json& e : sse(post_raw("/v1/responses", {{"input", "Weather?"}, {"tools", rtools}, {"stream", true},
                                                      {"reasoning", {{"effort", "none"}}}}))) {
    if (e["type"] == "response.function_call_arguments.delta") deltas += e["delta"].get<std::string>();
    if (e["type"] == "response.function_call_arguments.done") done_event = true;
  }
  EXPECT_TRUE(done_event);
  EXPECT_EQ(Json::parse(deltas), Json::parse(R"({"unit":"celsius","city":"Paris","days":2})"));
}

TEST_F(Scripted, ForcedToolChoiceWritesTheOpener) {
  // The script continues after the opener the server injects for tool_choice naming get_weather.
  start("\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
        "<｜DSML｜parameter name=\"city\" string=\"true\">Rome</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>");
  Json body = user_chat("Anything", false);
  body["tools"] = kTools;
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  Json r = post("/v1/chat/completions", body);
  ASSERT_EQ(r["choices"][0]["message"]["tool_calls"].size(), 1u) << r.dump();
  EXPECT_EQ(r["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls");
}

TEST_F(Scripted, StopSequencesAndSplitUtf8) {
  start("café ☕ ok. STOP here");
  Json body = user_chat("hi", false);
  body["stream"] = true;
  std::string content;
  for (const Json& c : sse(post_raw("/v1/chat/completions", body))) {
    if (c.contains("choices") && !c["choices"].empty() && c["choices"][0]["delta"].contains("content"))
      content += c["choices"][0]["delta"]["content"].get<std::string>();
  }
  EXPECT_EQ(content, "café ☕ ok. STOP here");  // every delta was valid UTF-8 JSON
  body.erase("stream");
  body["stop"] = Json::array({"STOP", "zzz"});
  Json r = post("/v1/chat/completions", body);
  EXPECT_EQ(r["choices"][0]["message"]["content"], "café ☕ ok. ");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  Json a = post("/v1/messages", {{"max_tokens", 100}, {"stop_sequences", Json::array({"ok."})},
                                 {"thinking", {{"type", "disabled"}}},
                                 {"messages", Json::array({{{"role", "user"}, {"content", "hi"}}})}});
  EXPECT_EQ(a["content"][0]["text"], "café ☕ ");
  EXPECT_EQ(a["stop_reason"], "stop_sequence");
  EXPECT_EQ(a["stop_sequence"], "ok.");
}

TEST_F(Scripted, EngineFailureMidStreamEndsWithAnErrorEvent) {
  start("abcdefghijklmnopqrstuvwxyz");
  engine_->fail_after(5);
  Json body = user_chat("x", false);
  Json partial = post("/v1/chat/completions", body);  // text was produced: 200, finish "error"
  EXPECT_EQ(partial["choices"][0]["finish_reason"], "error");
  EXPECT_EQ(partial["choices"][0]["message"]["content"], "abcde");
  body["stream"] = true;
  const std::string s = post_raw("/v1/chat/completions", body);
  EXPECT_NE(s.find("data: {\"error\""), std::string::npos) << s;
  EXPECT_NE(s.find("\"finish_reason\":\"error\""), std::string::npos);
  EXPECT_NE(s.find("data: [DONE]"), std::string::npos);
  const std::string a = post_raw("/v1/messages", {{"max_tokens", 100}, {"stream", true}, {"thinking", {{"type", "disabled"}}},
                                                  {"messages", Json::array({{{"role", "user"}, {"content", "x"}}})}});
  EXPECT_NE(a.find("event: error"), std::string::npos) << a;
  EXPECT_NE(a.find("\"api_error\""), std::string::npos);
  const std::string r = post_raw("/v1/responses", {{"input", "x"}, {"stream", true}, {"reasoning", {{"effort", "none"}}}});
  EXPECT_NE(r.find("event: response.failed"), std::string::npos) << r;
  // Failing before any text: a 500 in the API's shape.
  engine_->fail_after(0);
  Json err = post("/v1/chat/completions", user_chat("a new prompt", false), 500);
  EXPECT_EQ(err["error"]["type"], "server_error");
  EXPECT_NE(err["error"]["message"].get<std::string>().find("scripted backend failure"), std::string::npos);
}

TEST_F(Scripted, KeepAliveDuringLongPrefillAndCancelInsideIt) {
  ServerOptions o;
  o.keepalive = std::chrono::milliseconds(100);
  start("answer", o);
  engine_->set_token_delay(std::chrono::milliseconds(2));
  // ~600 prompt tokens at 2 ms: more than a second of prefill in one engine step.
  Json body = user_chat(std::string(600, 'p'), false);
  body["stream"] = true;
  const std::string s = post_raw("/v1/chat/completions", body);
  EXPECT_NE(s.find(": keep-alive\n\n"), std::string::npos);
  EXPECT_NE(s.find("\"finish_reason\":\"stop\""), std::string::npos);

  // A client that leaves during a long prefill frees the worker without waiting for the prefill.
  Json body2 = user_chat(std::string(3000, 'q'), false);  // ~6 s of prefill if it ran to the end
  {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(0, 300000);
    EXPECT_FALSE(c.Post("/v1/chat/completions", body2.dump(), "application/json"));
  }
  // The disconnect is noticed within the server's 100 ms poll, inside the ~6 s prefill.
  auto t0 = std::chrono::steady_clock::now();
  bool cancelled = false;
  while (!cancelled && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(3)) {
    auto met = server_->client().Get("/metrics");
    cancelled = met && met->body.find("ds4_generations_total{finish_reason=\"cancelled\"} 1") != std::string::npos;
    if (!cancelled) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(cancelled);
  engine_->set_token_delay(std::chrono::microseconds(0));
  Json after = post("/v1/chat/completions", user_chat("short", false));
  EXPECT_EQ(after["choices"][0]["message"]["content"], "answer");
}

}  // namespace
}  // namespace ds4::server
