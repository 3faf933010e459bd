// test_mapping.cpp — request JSON -> GenRequest for the four APIs, without an engine: thinking and
// effort resolution (aliases, the 384K rule), sampling/limits, stop lists, rejection of fields that
// would silently change results, tools and tool_choice, and rendering of spec example D-1.
#include <gtest/gtest.h>

#include "server/map_request.h"

namespace ds4::server {
namespace {

Result<GenRequest> map(ApiKind api, const std::string& body, MapOptions opts = {}) {
  auto j = parse_request_json(body);
  if (!j.ok()) return j.status();
  return map_request(api, *j, opts, body);
}

const char* kUser = R"("messages":[{"role":"user","content":"hi"}])";

std::string chat(const std::string& extra) { return std::string("{") + kUser + (extra.empty() ? "" : "," + extra) + "}"; }

TEST(Mapping, ThinkingDefaultsAliasesAndEffort) {
  EXPECT_EQ(map(ApiKind::openai_chat, chat(""))->think, chat::ThinkMode::high);
  EXPECT_EQ(map(ApiKind::openai_chat, chat(R"("model":"deepseek-chat")"))->think, chat::ThinkMode::none);
  EXPECT_EQ(map(ApiKind::openai_chat, chat(R"("model":"deepseek-chat","thinking":{"type":"enabled"})"))->think,
            chat::ThinkMode::high);
  EXPECT_EQ(map(ApiKind::openai_chat, chat(R"("think":false)"))->think, chat::ThinkMode::none);
  EXPECT_EQ(map(ApiKind::openai_chat, chat(R"("thinking":false)"))->think, chat::ThinkMode::none);
  EXPECT_EQ(map(ApiKind::openai_chat, chat(R"("reasoning_effort":"none")"))->think, chat::ThinkMode::none);
  EXPECT_EQ(map(ApiKind::openai_chat, chat(R"("reasoning_effort":"low")"))->think, chat::ThinkMode::high);
  // Think Max needs ctx >= 393216 (384K rule); below it becomes high.
  EXPECT_EQ(map(ApiKind::openai_chat, chat(R"("reasoning_effort":"max")"))->think, chat::ThinkMode::high);
  MapOptions big;
  big.ctx = 393216;
  EXPECT_EQ(map(ApiKind::openai_chat, chat(R"("reasoning_effort":"max")"), big)->think, chat::ThinkMode::max);
  EXPECT_FALSE(map(ApiKind::openai_chat, chat(R"("reasoning_effort":"extreme")")).ok());
  EXPECT_FALSE(map(ApiKind::openai_chat, chat(R"("thinking":{"type":"sometimes"})")).ok());
  MapOptions nothink;
  nothink.default_think = chat::ThinkMode::none;
  EXPECT_EQ(map(ApiKind::openai_chat, chat(""), nothink)->think, chat::ThinkMode::none);
  EXPECT_EQ(map(ApiKind::openai_chat, chat(R"("reasoning_effort":"high")"), nothink)->think, chat::ThinkMode::high);
  auto a = map(ApiKind::anthropic_messages, R"({"max_tokens":5,"output_config":{"effort":"none"},"messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(a->think, chat::ThinkMode::none);
  auto r = map(ApiKind::openai_responses, R"({"input":"x","reasoning":{"effort":"none","summary":"auto"}})");
  EXPECT_EQ(r->think, chat::ThinkMode::none);
  EXPECT_TRUE(r->reasoning_summary);
}

TEST(Mapping, ModelNames) {
  EXPECT_EQ(map(ApiKind::openai_chat, chat(""))->model, "deepseek-v4-flash");
  EXPECT_EQ(map(ApiKind::openai_chat, chat(R"("model":"deepseek-reasoner")"))->model, "deepseek-reasoner");
  auto unknown = map(ApiKind::openai_chat, chat(R"("model":"gpt-4o")"));
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::not_found);
  MapOptions any;
  any.accept_any_model = true;
  EXPECT_EQ(map(ApiKind::openai_chat, chat(R"("model":"gpt-4o")"), any)->model, "gpt-4o");
  MapOptions alias;
  alias.aliases = {"claude-sonnet-4"};
  EXPECT_TRUE(map(ApiKind::anthropic_messages, R"({"model":"claude-sonnet-4","max_tokens":1,"messages":[{"role":"user","content":"x"}]})", alias).ok());
}

TEST(Mapping, SamplingLimitsAndStop) {
  auto g = map(ApiKind::openai_chat, chat(R"("temperature":0.5,"top_p":0.9,"top_k":40,"min_p":0.1,"seed":7,"max_completion_tokens":12,"max_tokens":99,"stop":["a","b"])"));
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_FLOAT_EQ(g->sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(g->sampling.top_p, 0.9f);
  EXPECT_EQ(g->sampling.top_k, 40);
  EXPECT_FLOAT_EQ(g->sampling.min_p, 0.1f);
  EXPECT_EQ(g->sampling.seed, 7u);
  EXPECT_EQ(g->max_tokens, 12);
  EXPECT_EQ(g->stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(map(ApiKind::openai_chat, chat(R"("stop":"x")"))->stop, std::vector<std::string>{"x"});
  EXPECT_FALSE(map(ApiKind::openai_chat, chat(R"("stop":[1])")).ok());
  EXPECT_FALSE(map(ApiKind::openai_chat, chat(R"("temperature":"hot")")).ok());
  EXPECT_FALSE(map(ApiKind::openai_chat, chat(R"("temperature":3)")).ok());
  EXPECT_FALSE(map(ApiKind::openai_chat, chat(R"("top_p":0)")).ok());
  EXPECT_FALSE(map(ApiKind::openai_chat, chat(R"("max_tokens":0)")).ok());
  EXPECT_FALSE(map(ApiKind::openai_chat, chat(R"("max_tokens":1.5)")).ok());
  auto a = map(ApiKind::anthropic_messages, R"({"max_tokens":9,"stop_sequences":["END"],"top_k":3,"messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(a->max_tokens, 9);
  EXPECT_EQ(a->stop, std::vector<std::string>{"END"});
  EXPECT_EQ(a->sampling.top_k, 3);
  EXPECT_EQ(map(ApiKind::openai_responses, R"({"input":"x","max_output_tokens":33})")->max_tokens, 33);
  auto lp = map(ApiKind::openai_chat, chat(R"("logprobs":true,"top_logprobs":5)"));
  EXPECT_EQ(lp->logprobs_top, 5);
  EXPECT_FALSE(map(ApiKind::openai_chat, chat(R"("top_logprobs":5)")).ok());
  auto st = map(ApiKind::openai_chat, chat(R"("stream":true,"stream_options":{"include_usage":true})"));
  EXPECT_TRUE(st->stream);
  EXPECT_TRUE(st->include_usage);
}

TEST(Mapping, RejectsFieldsThatWouldChangeResults) {
  for (const char* extra : {R"("n":2)", R"("presence_penalty":0.5)", R"("frequency_penalty":1)",
                            R"("logit_bias":{"5":10})", R"("response_format":{"type":"json_object"})",
                            R"("functions":[{"name":"f"}])"}) {
    auto r = map(ApiKind::openai_chat, chat(extra));
    EXPECT_FALSE(r.ok()) << extra;
    EXPECT_NE(r.status().message().find("not supported"), std::string::npos) << r.status().message();
  }
  // Neutral values are fine.
  EXPECT_TRUE(map(ApiKind::openai_chat, chat(R"("n":1,"presence_penalty":0,"logit_bias":{},"response_format":{"type":"text"})")).ok());
  EXPECT_FALSE(map(ApiKind::openai_completions, R"({"prompt":"x","echo":true})").ok());
  EXPECT_FALSE(map(ApiKind::openai_responses, R"({"input":"x","previous_response_id":"resp_1"})").ok());
  EXPECT_FALSE(map(ApiKind::openai_responses, R"({"input":"x","text":{"format":{"type":"json_schema"}}})").ok());
  EXPECT_FALSE(map(ApiKind::openai_chat, R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]})").ok());
  EXPECT_FALSE(map(ApiKind::anthropic_messages, R"({"max_tokens":1,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]})").ok());
  EXPECT_FALSE(map(ApiKind::openai_responses, R"({"input":[{"role":"user","content":[{"type":"input_image","image_url":"x"}]}]})").ok());
}

TEST(Mapping, MissingAndMalformed) {
  EXPECT_NE(map(ApiKind::openai_chat, "{}").status().message().find("messages"), std::string::npos);
  EXPECT_NE(map(ApiKind::openai_chat, R"({"messages":[]})").status().message().find("at least one"), std::string::npos);
  EXPECT_NE(map(ApiKind::openai_chat, R"({"messages":[{"role":"wizard","content":"x"}]})").status().message().find("wizard"), std::string::npos);
  EXPECT_NE(map(ApiKind::openai_completions, "{}").status().message().find("prompt"), std::string::npos);
  EXPECT_NE(map(ApiKind::openai_responses, "{}").status().message().find("input"), std::string::npos);
  EXPECT_FALSE(map(ApiKind::openai_completions, R"({"prompt":["a","b"]})").ok());
  EXPECT_EQ(map(ApiKind::openai_completions, R"({"prompt":["only"]})")->prompt_text, "only");
  EXPECT_FALSE(map(ApiKind::anthropic_messages, R"({"max_tokens":1,"messages":[{"role":"system","content":"x"}]})").ok());
  EXPECT_FALSE(parse_request_json("[1]").ok());
  EXPECT_FALSE(parse_request_json("{\"a\":\"\xff\"}").ok());
  EXPECT_FALSE(parse_request_json(std::string(200, '[')).ok());
  EXPECT_FALSE(parse_request_json("").ok());
}

TEST(Mapping, ToolsAndToolChoice) {
  const std::string tools = R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}])";
  auto t = map(ApiKind::openai_chat, chat(tools));
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->tools_enabled);
  ASSERT_EQ(t->conversation.tools.size(), 1u);
  EXPECT_EQ(t->conversation.tools[0], R"({"name":"f","parameters":{"type":"object"}})");
  auto none = map(ApiKind::openai_chat, chat(tools + R"(,"tool_choice":"none")"));
  EXPECT_FALSE(none->tools_enabled);
  EXPECT_TRUE(none->conversation.tools.empty());
  auto req = map(ApiKind::openai_chat, chat(tools + R"(,"tool_choice":"required")"));
  EXPECT_TRUE(req->tool_force.required);
  EXPECT_TRUE(req->tool_force.name.empty());
  auto named = map(ApiKind::openai_chat, chat(tools + R"(,"tool_choice":{"type":"function","function":{"name":"f"}})"));
  EXPECT_EQ(named->tool_force.name, "f");
  EXPECT_FALSE(map(ApiKind::openai_chat, chat(tools + R"(,"tool_choice":{"type":"function","function":{"name":"g"}})")).ok());
  EXPECT_FALSE(map(ApiKind::openai_chat, chat(R"("tool_choice":"required")")).ok());
  auto any = map(ApiKind::anthropic_messages,
                 R"({"max_tokens":1,"tools":[{"name":"f","input_schema":{}}],"tool_choice":{"type":"any"},"messages":[{"role":"user","content":"x"}]})");
  EXPECT_TRUE(any->tool_force.required);
  auto rreq = map(ApiKind::openai_responses, R"({"input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":"required"})");
  ASSERT_TRUE(rreq.ok()) << rreq.status().to_string();
  EXPECT_TRUE(rreq->tool_force.required);
  EXPECT_FALSE(map(ApiKind::openai_responses, R"({"input":"x","tools":[{"type":"web_search"}]})").ok());
}

TEST(Mapping, ConversationShapes) {
  // Anthropic: Claude Code's billing header is dropped from the system text.
  auto a = map(ApiKind::anthropic_messages,
               R"({"max_tokens":1,"system":[{"type":"text","text":"x-anthropic-billing-header: cch=1"},{"type":"text","text":"Be brief."}],"messages":[{"role":"user","content":"x"}]})");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->conversation.messages[0].role, chat::Role::system);
  EXPECT_EQ(a->conversation.messages[0].content, "Be brief.");
  // Responses: tool outputs must follow their call; reasoning attaches to the call's turn.
  auto unknown2 = map(ApiKind::openai_responses, R"({"input":[{"role":"user","content":"x"},{"type":"function_call_output","call_id":"c1","output":"x"}]})");
  ASSERT_FALSE(unknown2.ok());
  EXPECT_EQ(unknown2.status().message(),
            "'input[1]': unknown tool output call_id 'c1'; replay the full Responses history including the function_call");
  auto r = map(ApiKind::openai_responses,
               R"({"input":[{"role":"user","content":"ls"},{"type":"reasoning","summary":[{"type":"summary_text","text":"Run ls."}]},{"type":"function_call","call_id":"c1","name":"shell","arguments":"{\"cmd\":\"ls\"}"},{"type":"function_call_output","call_id":"c1","output":"a.c"}]})");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const auto& m = r->conversation.messages;
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[1].role, chat::Role::assistant);
  EXPECT_EQ(m[1].reasoning, "Run ls.");
  ASSERT_EQ(m[1].tool_calls.size(), 1u);
  EXPECT_EQ(m[1].tool_calls[0].id, "c1");
  EXPECT_EQ(m[2].role, chat::Role::tool);
  EXPECT_EQ(m[2].content, "a.c");
}

TEST(Mapping, RendersSpecExampleD1) {
  auto g = map(ApiKind::openai_chat,
               R"({"model":"deepseek-v4-flash","messages":[{"role":"user","content":"Return exactly this text: baseline ready"}],"think":false})");
  ASSERT_TRUE(g.ok());
  chat::RenderOptions ro;
  ro.flavor = chat::Flavor::ds4;
  ro.think = g->think;
  auto text = chat::render_prompt(g->conversation, ro);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "<｜begin▁of▁sentence｜><｜User｜>Return exactly this text: baseline ready<｜Assistant｜></think>");
}

}  // namespace
}  // namespace ds4::server
