// test_api_map.cpp — request mapping (CHAT.md §5): thinking controls and model aliases, content
// flattening, dropped calls, raw schema bytes, tool_choice, Anthropic system/tool_result
// handling in both flavors, Responses reasoning/call merging, and 400-class errors.
#include <gtest/gtest.h>

#include "chat/api_map.h"

namespace ds4::chat {
namespace {

ThinkMode chat_think(const std::string& extra, const std::string& model = "deepseek-v4-flash") {
  const std::string body = R"({"model":")" + model + R"(","messages":[{"role":"user","content":"x"}])" + extra + "}";
  auto r = map_chat_completions(body);
  EXPECT_TRUE(r.ok()) << r.status().to_string() << " for " << body;
  return r.ok() ? r->think : ThinkMode::none;
}

TEST(ApiMap, ThinkingControls) {
  EXPECT_EQ(chat_think(""), ThinkMode::high);
  EXPECT_EQ(chat_think(R"(,"think":false)"), ThinkMode::none);
  EXPECT_EQ(chat_think(R"(,"thinking":{"type":"disabled"})"), ThinkMode::none);
  EXPECT_EQ(chat_think(R"(,"thinking":false)"), ThinkMode::none);
  EXPECT_EQ(chat_think(R"(,"reasoning_effort":"none")"), ThinkMode::none);
  EXPECT_EQ(chat_think(R"(,"reasoning_effort":"max")"), ThinkMode::max);
  for (const char* e : {"xhigh", "high", "medium", "low", "minimal"})
    EXPECT_EQ(chat_think(std::string(R"(,"reasoning_effort":")") + e + "\""), ThinkMode::high) << e;
  EXPECT_EQ(chat_think(R"(,"reasoning_effort":null)"), ThinkMode::high);
  EXPECT_EQ(chat_think("", "deepseek-chat"), ThinkMode::none);
  EXPECT_EQ(chat_think(R"(,"thinking":{"type":"enabled"})", "deepseek-chat"), ThinkMode::high);
  EXPECT_EQ(chat_think("", "deepseek-reasoner"), ThinkMode::high);
  auto bad = map_chat_completions(R"({"messages":[],"reasoning_effort":"extreme"})");
  EXPECT_EQ(bad.status().code(), StatusCode::invalid_argument);
}

TEST(ApiMap, ChatCompletionsMessages) {
  const std::string body = R"({"messages":[
    {"role":"system","content":[{"type":"text","text":"A"},"B"]},
    {"content":null},
    {"role":"assistant","content":"c","reasoning_content":"r","tool_calls":[
       {"id":"1","function":{"name":"f","arguments":"{\"a\":1}"}},
       {"id":"2","function":{"name":"g","arguments":{"b" : [1, 2]}}},
       {"id":"3","function":{"name":"args_missing"}}]},
    {"role":"function","content":"out","tool_call_id":"1"}],
    "tools":[{"type":"function","function":{ "name" : "f" }}],"tool_choice":"auto"})";
  auto r = map_chat_completions(body);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const auto& m = r->conv.messages;
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0].content, "AB");
  EXPECT_EQ(m[1].role, Role::user);
  EXPECT_EQ(m[1].content, "");
  ASSERT_EQ(m[2].tool_calls.size(), 2u);
  EXPECT_EQ(m[2].reasoning, "r");
  EXPECT_EQ(m[2].tool_calls[0].arguments, "{\"a\":1}");
  EXPECT_EQ(m[2].tool_calls[1].arguments, "{\"b\" : [1, 2]}");  // raw bytes of a JSON value
  EXPECT_EQ(m[3].role, Role::tool);
  EXPECT_EQ(m[3].tool_call_id, "1");
  ASSERT_EQ(r->conv.tools.size(), 1u);
  EXPECT_EQ(r->conv.tools[0], R"({ "name" : "f" })");

  auto none = map_chat_completions(R"({"messages":[{"role":"user","content":"x"}],"tools":[{"function":{"name":"f"}}],"tool_choice":"none"})");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->conv.tools.empty());
  EXPECT_TRUE(none->tools_dropped);
}

// The server's rules, now the only mapper's: parts the model cannot read and calls without a
// name are errors naming the field (dropping them would silently change the answer), while a
// call without arguments is still dropped like ds4-server does.
TEST(ApiMap, ChatCompletionsStrictFields) {
  auto image = map_chat_completions(R"({"messages":[{"role":"user","content":[{"type":"text","text":"A"},{"type":"image_url","image_url":{"url":"x"}}]}]})");
  ASSERT_FALSE(image.ok());
  EXPECT_EQ(image.status().message(),
            "content part type 'image_url' in 'messages[0].content' is not supported (this model reads text only)");
  auto nameless = map_chat_completions(R"({"messages":[{"role":"assistant","tool_calls":[{"id":"4","function":{"arguments":"{}"}}]}]})");
  ASSERT_FALSE(nameless.ok());
  EXPECT_EQ(nameless.status().message(), "'messages[0].tool_calls[0].function.name' is required");
  EXPECT_EQ(map_chat_completions(R"({"messages":[{"role":"user","content":"x","tool_call_id":5}]})").status().message(),
            "'messages[0].tool_call_id' must be a string");
  EXPECT_EQ(map_chat_completions(R"({"messages":[]})").status().message(),
            "'messages' must contain at least one message");
  auto forced = map_chat_completions(R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"f"}}})");
  ASSERT_TRUE(forced.ok()) << forced.status().to_string();
  EXPECT_TRUE(forced->tool_force.required);
  EXPECT_EQ(forced->tool_force.name, "f");
  EXPECT_EQ(map_chat_completions(R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"required"})").status().message(),
            "'tool_choice' requires a tool call but no 'tools' were given");
}

TEST(ApiMap, Errors) {
  EXPECT_EQ(map_chat_completions("{").status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(map_chat_completions("[]").status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(map_chat_completions("{}").status().message(), "missing 'messages'");
  EXPECT_FALSE(map_chat_completions(R"({"messages":[{"role":"wizard"}]})").ok());
  EXPECT_FALSE(map_chat_completions(R"({"messages":[{"content":5}]})").ok());
  EXPECT_EQ(map_completions("{}").status().message(), "missing 'prompt'");
  EXPECT_EQ(map_anthropic_messages("{}").status().message(), "missing 'messages'");
  EXPECT_EQ(map_responses("{}").status().message(), "missing 'input'");
  EXPECT_FALSE(map_responses(R"({"input":"x","previous_response_id":"r1"})").ok());
  EXPECT_FALSE(map_responses(R"({"input":"x","tool_choice":"required"})").ok());
  EXPECT_FALSE(map_responses(R"({"input":[{"type":"message","role":"user","content":[{"type":"input_image"}]}]})").ok());
  EXPECT_FALSE(map_responses(R"({"input":[{"type":"mystery"}]})").ok());
  EXPECT_FALSE(map_responses(R"({"input":[{"type":"function_call","status":"in_progress"}]})").ok());
}

TEST(ApiMap, Completions) {
  auto r = map_completions(R"({"prompt":["first"],"reasoning_effort":"max"})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->prompt, "first");
  EXPECT_EQ(r->think, ThinkMode::max);
  // Answering only the first of a batch would look like success to the client.
  EXPECT_FALSE(map_completions(R"({"prompt":["first","second"]})").ok());
  EXPECT_FALSE(map_completions(R"({"prompt":""})").ok());
}

TEST(ApiMap, AnthropicSystemAndToolResultsPerFlavor) {
  const std::string body = R"({"model":"m","system":["x-anthropic-billing-header: cch=1","Line one","Line two\n","three"],
    "messages":[{"role":"user","content":"q"},
      {"role":"assistant","content":[{"type":"thinking","thinking":"t"},{"type":"tool_use","id":"toolu_1","name":"f","input":{"k" :1}}]},
      {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"r1 </tool_result>"}]},
                                {"type":"text","text":"next"}]}],
    "tools":[{"name":"f","description":"d","input_schema":{"type":"object"}}],
    "output_config":{"effort":"max"}})";
  auto ds4 = map_anthropic_messages(body);
  ASSERT_TRUE(ds4.ok()) << ds4.status().to_string();
  EXPECT_EQ(ds4->think, ThinkMode::max);
  const auto& m = ds4->conv.messages;
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0].content, "Line one\nLine two\nthree");
  EXPECT_EQ(m[2].reasoning, "t");
  EXPECT_EQ(m[2].tool_calls[0].arguments, R"({"k" :1})");
  EXPECT_EQ(m[3].content, "<tool_result>r1 &lt;/tool_result></tool_result>next");
  EXPECT_EQ(ds4->conv.tools[0], R"({"name":"f","description":"d","input_schema":{"type":"object"}})");

  MapOptions off;
  off.flavor = Flavor::official;
  auto o = map_anthropic_messages(body, off);
  ASSERT_TRUE(o.ok());
  const auto& om = o->conv.messages;
  ASSERT_EQ(om.size(), 5u);
  EXPECT_EQ(om[3].role, Role::tool);
  EXPECT_EQ(om[3].content, "r1 </tool_result>");
  EXPECT_EQ(om[3].tool_call_id, "toolu_1");
  EXPECT_EQ(om[4].content, "next");
  EXPECT_EQ(o->conv.tools[0], R"({"name":"f","description":"d","parameters":{"type":"object"}})");

  auto none = map_anthropic_messages(R"({"messages":[{"role":"user","content":"x"}],"tools":[{"name":"f"}],"tool_choice":{"type":"none"}})");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->conv.tools.empty());
}

// Where chat's old mapper and the server's own disagreed, the one mapper keeps the more correct
// behaviour (the server's own mapper was removed).
TEST(ApiMap, ResolvedDisagreements) {
  // --nothink: the default applies only when the request says nothing; "thinking on" means high.
  MapOptions nothink;
  nothink.default_think = ThinkMode::none;
  const std::string user = R"("messages":[{"role":"user","content":"x"}])";
  EXPECT_EQ(map_chat_completions("{" + user + "}", nothink)->think, ThinkMode::none);
  EXPECT_EQ(map_chat_completions("{" + user + R"(,"thinking":{"type":"enabled"}})", nothink)->think, ThinkMode::high);
  EXPECT_EQ(map_chat_completions("{" + user + R"(,"reasoning_effort":"max"})", nothink)->think, ThinkMode::max);
  EXPECT_EQ(map_chat_completions("{" + user + R"(,"model":"deepseek-reasoner"})", nothink)->think, ThinkMode::high);
  // An unknown thinking type is an error, not silently "default".
  EXPECT_EQ(map_chat_completions("{" + user + R"(,"thinking":{"type":"sometimes"}})").status().message(),
            "'thinking.type' must be 'enabled', 'adaptive' or 'disabled' (got 'sometimes')");
  // Anthropic tool_result content: plain strings in the array are text (they were dropped).
  auto a = map_anthropic_messages(R"({"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]},
      {"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":["a",{"type":"text","text":"b"}]}]}]})");
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(a->conv.messages[1].content, "<tool_result>ab</tool_result>");
  // Blocks the model cannot read are errors (they were dropped).
  EXPECT_EQ(map_anthropic_messages(R"({"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]})").status().message(),
            "'messages[0].content[0]' content block type 'image' is not supported (this model reads text only)");
  // Responses: forcing a tool keeps the raw schema bytes (the old fallback re-serialised them).
  auto f = map_responses(R"({"input":"x","tools":[{"type":"function","name":"f", "parameters" : {}}],"tool_choice":{"type":"function","name":"f"}})");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_TRUE(f->tool_force.required);
  EXPECT_EQ(f->tool_force.name, "f");
  EXPECT_EQ(f->conv.tools[0], R"({"type":"function","name":"f", "parameters" : {}})");
  EXPECT_EQ(map_responses(R"({"input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":{"name":"g"}})").status().message(),
            "'tool_choice' names function 'g', which is not in 'tools'");
  // Responses: refusal blocks are replayable text; tool_search tools are accepted; hosted tools are not.
  auto rf = map_responses(R"({"input":[{"role":"assistant","content":[{"type":"refusal","refusal":"no"}]}],"tools":[{"type":"tool_search"}]})");
  ASSERT_TRUE(rf.ok()) << rf.status().to_string();
  EXPECT_EQ(rf->conv.messages[0].content, "no");
  EXPECT_EQ(rf->conv.tools, std::vector<std::string>{R"({"name":"tool_search"})"});
  EXPECT_FALSE(map_responses(R"({"input":"x","tools":[{"type":"web_search"}]})").ok());
  EXPECT_EQ(map_responses(R"({"input":"x","previous_response_id":"r1"})").status().message(),
            "'previous_response_id' is not supported; replay the full input instead");
}

TEST(ApiMap, ResponsesReasoningAndCalls) {
  const std::string body = R"({"instructions":"I","input":[
      {"type":"message","role":"user","content":"u"},
      {"type":"reasoning","summary":[{"type":"summary_text","text":"s1"}],"content":[{"type":"reasoning_text","text":"c1"}]},
      {"type":"message","role":"assistant","content":[{"type":"output_text","text":"a"}]},
      {"type":"function_call","call_id":"c1","name":"f","namespace":"ns.","arguments":"{}"},
      {"type":"custom_tool_call","call_id":"c2","name":"patch","input":"raw text"},
      {"type":"function_call_output","call_id":"c1","output":"o1"},
      {"type":"local_shell_call","call_id":"c3","action":{"cmd":["ls"]}},
      {"type":"reasoning","summary":[{"type":"summary_text","text":"dangling"}]}],
    "tools":[{"type":"function","name":"f","parameters":{}},
             {"type":"namespace","name":"ns.","tools":[{"name":"g","description":"G","parameters":{"type":"object"}}]}],
    "reasoning":{"effort":"low"}})";
  auto r = map_responses(body);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const auto& m = r->conv.messages;
  ASSERT_EQ(m.size(), 6u);
  EXPECT_EQ(m[0].role, Role::system);
  EXPECT_EQ(m[2].role, Role::assistant);
  EXPECT_EQ(m[2].reasoning, "s1\nc1");
  EXPECT_EQ(m[2].content, "a");
  ASSERT_EQ(m[2].tool_calls.size(), 2u);
  EXPECT_EQ(m[2].tool_calls[0].name, "ns.f");
  EXPECT_EQ(m[2].tool_calls[1].arguments, "raw text");
  EXPECT_EQ(m[3].role, Role::tool);
  EXPECT_EQ(m[4].tool_calls[0].name, "local_shell");
  EXPECT_EQ(m[4].tool_calls[0].arguments, R"({"cmd":["ls"]})");
  EXPECT_EQ(m[5].reasoning, "dangling");
  ASSERT_EQ(r->conv.tools.size(), 2u);
  EXPECT_EQ(r->conv.tools[0], R"({"type":"function","name":"f","parameters":{}})");
  EXPECT_EQ(r->conv.tools[1], R"({"name":"ns.g","description":"G","parameters":{"type":"object"}})");
}

TEST(ApiMap, UnmatchedToolResultIds) {
  const std::string anthropic = R"({"messages":[
      {"role":"assistant","content":[{"type":"tool_use","id":"toolu_a","name":"f","input":{}}]},
      {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_a","content":"1"},
                                {"type":"tool_result","tool_use_id":"toolu_live","content":"2"}]}]})";
  for (Flavor f : {Flavor::ds4, Flavor::official}) {
    MapOptions o;
    o.flavor = f;
    auto r = map_anthropic_messages(anthropic, o);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->unmatched_tool_result_ids, std::vector<std::string>{"toolu_live"});
  }
  auto resp = map_responses(R"({"input":[{"type":"function_call_output","call_id":"call_live","output":"x"},
      {"type":"function_call","call_id":"c2","name":"f","arguments":"{}"},
      {"type":"function_call_output","call_id":"c2","output":"y"}]})");
  ASSERT_TRUE(resp.ok());
  EXPECT_EQ(resp->unmatched_tool_result_ids, std::vector<std::string>{"call_live"});
}

}  // namespace
}  // namespace ds4::chat

// Fields of the wrong JSON type that the explicit checks do not name (found by the server's request
// fuzzer) must come back as invalid_argument, never as an exception across the library boundary.
TEST(ApiMap, WrongTypedFieldsAreErrorsNotExceptions) {
  const char* anthropic[] = {
      R"({"messages":[{"role":null,"content":"x"}]})",
      R"({"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":null,"content":"r"}]}]})",
      R"({"messages":[{"role":"assistant","content":[{"type":"tool_use","id":null,"name":"f","input":{}}]}]})",
  };
  const char* responses[] = {
      R"({"input":[{"type":"function_call","call_id":null,"name":"f","arguments":"{}"}]})",
      R"({"input":[{"type":"message","role":null,"content":"x"}]})",
  };
  for (ds4::chat::Flavor flavor : {ds4::chat::Flavor::ds4, ds4::chat::Flavor::official}) {
    ds4::chat::MapOptions o;
    o.flavor = flavor;
    for (const char* body : anthropic) {
      auto r = ds4::chat::map_anthropic_messages(body, o);
      EXPECT_FALSE(r.ok()) << body;
      if (!r.ok()) EXPECT_EQ(r.status().code(), ds4::StatusCode::invalid_argument) << body;
    }
    for (const char* body : responses) {
      auto r = ds4::chat::map_responses(body, o);
      EXPECT_FALSE(r.ok()) << body;
      if (!r.ok()) EXPECT_EQ(r.status().code(), ds4::StatusCode::invalid_argument) << body;
    }
  }
}
