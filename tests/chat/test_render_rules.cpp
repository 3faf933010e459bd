// test_render_rules.cpp — rendering rules of CHAT.md §2 (R-OFF) and §4 (R-DS4) that the spec
// examples do not cover: Think Max and the 384K rule, drop rules, developer/latest_reminder/
// task handling, merging, escapes, Python json.dumps formatting, tails and error cases.
#include <gtest/gtest.h>

#include "chat/chat.h"
#include "chat/json_text.h"

namespace ds4::chat {
namespace {

Message msg(Role role, std::string content, std::string reasoning = {}) {
  Message m;
  m.role = role;
  m.content = std::move(content);
  m.reasoning = std::move(reasoning);
  return m;
}

std::string render(const Conversation& c, Flavor f, ThinkMode t, bool drop = true) {
  RenderOptions o;
  o.flavor = f;
  o.think = t;
  o.drop_thinking = drop;
  auto r = render_prompt(c, o);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : std::string();
}

const std::string B(kBos), E(kEos), U(kUser), A(kAssistant);

TEST(RenderRules, ThinkMaxPrefixAnd384KRule) {
  EXPECT_EQ(think_max_prefix().size(), 476u);
  EXPECT_EQ(think_max_prefix().substr(think_max_prefix().size() - 2), "\n\n");
  EXPECT_EQ(think_mode_for_context(ThinkMode::max, 393215), ThinkMode::high);
  EXPECT_EQ(think_mode_for_context(ThinkMode::max, 393216), ThinkMode::max);
  EXPECT_EQ(think_mode_for_context(ThinkMode::high, 4096), ThinkMode::high);
  EXPECT_EQ(think_mode_for_context(ThinkMode::none, 1 << 20), ThinkMode::none);
  Conversation c;
  c.messages = {msg(Role::user, "hi")};
  for (Flavor f : {Flavor::official, Flavor::ds4}) {
    EXPECT_EQ(render(c, f, ThinkMode::max), B + std::string(think_max_prefix()) + U + "hi" + A + "<think>");
    EXPECT_EQ(render(c, f, ThinkMode::high), B + U + "hi" + A + "<think>");
    EXPECT_EQ(render(c, f, ThinkMode::none), B + U + "hi" + A + "</think>");
  }
  EXPECT_EQ(render_completion_prompt("S", "p", ThinkMode::max),
            B + std::string(think_max_prefix()) + "S" + U + "p" + A + "<think>");
  EXPECT_EQ(render_completion_prompt("S", "p", ThinkMode::none), B + "S" + U + "p" + A + "</think>");
}

TEST(RenderRules, OfficialSystemMessagesInPlaceDs4Hoisted) {
  Conversation c;
  c.messages = {msg(Role::system, "A"), msg(Role::user, "u"), msg(Role::system, "B"), msg(Role::developer, "D")};
  EXPECT_EQ(render(c, Flavor::ds4, ThinkMode::none), B + "A\n\nB\n\nD" + U + "u" + A + "</think>");
  // Official: the developer message is a user turn; "B" renders raw after the user turn.
  EXPECT_EQ(render(c, Flavor::official, ThinkMode::none), B + "A" + U + "uB" + U + "D" + A + "</think>");
}

TEST(RenderRules, ConsecutiveUsersMergeOfficiallyNotInDs4) {
  Conversation c;
  c.messages = {msg(Role::user, "one"), msg(Role::user, "two")};
  EXPECT_EQ(render(c, Flavor::official, ThinkMode::high), B + U + "one\n\ntwo" + A + "<think>");
  EXPECT_EQ(render(c, Flavor::ds4, ThinkMode::high), B + U + "one" + U + "two" + A + "<think>");
}

TEST(RenderRules, OfficialDropsDeveloperAndReasoningBeforeLastUser) {
  Conversation c;
  c.messages = {msg(Role::developer, "dev"), msg(Role::user, "q1"), msg(Role::assistant, "a1", "r1"),
                msg(Role::user, "q2")};
  EXPECT_EQ(render(c, Flavor::official, ThinkMode::high),
            B + U + "q1" + A + "</think>a1" + E + U + "q2" + A + "<think>");
  // drop_thinking=false keeps everything, every assistant turn with its reasoning.
  EXPECT_EQ(render(c, Flavor::official, ThinkMode::high, /*drop=*/false),
            B + U + "dev" + U + "q1" + A + "<think>r1</think>a1" + E + U + "q2" + A + "<think>");
  // Chat mode never has reasoning.
  EXPECT_EQ(render(c, Flavor::official, ThinkMode::none),
            B + U + "dev" + U + "q1" + A + "</think>a1" + E + U + "q2" + A + "</think>");
}

TEST(RenderRules, Ds4KeepsReasoningOnlyWithToolContext) {
  Conversation c;
  c.messages = {msg(Role::user, "q1"), msg(Role::assistant, "a1", "r1"), msg(Role::user, "q2")};
  EXPECT_EQ(render(c, Flavor::ds4, ThinkMode::high), B + U + "q1" + A + "</think>a1" + E + U + "q2" + A + "<think>");
  Message call = msg(Role::assistant, "", "r2");
  call.tool_calls = {{"c", "f", "{}"}};
  Message result = msg(Role::tool, "done </tool_result> x");
  c.messages.push_back(call);
  c.messages.push_back(result);
  EXPECT_EQ(render(c, Flavor::ds4, ThinkMode::high),
            B + U + "q1" + A + "<think>r1</think>a1" + E + U + "q2" + A + "<think>r2</think>" +
                "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>" + E +
                U + "<tool_result>done &lt;/tool_result> x</tool_result>" + A + "<think>");
}

TEST(RenderRules, Ds4ToolResultsShareOneUserMarker) {
  Conversation c;
  Message call = msg(Role::assistant, "");
  call.tool_calls = {{"a", "f", "{}"}, {"b", "f", "{}"}};
  c.messages = {msg(Role::user, "q"), call, msg(Role::tool, "1"), msg(Role::tool, "2"), msg(Role::user, "more")};
  const std::string out = render(c, Flavor::ds4, ThinkMode::none);
  EXPECT_NE(out.find(E + U + "<tool_result>1</tool_result><tool_result>2</tool_result>" + U + "more" + A + "</think>"),
            std::string::npos)
      << out;
}

TEST(RenderRules, Ds4TrailingAssistantClosedWithoutNewTurn) {
  Conversation c;
  c.messages = {msg(Role::user, "q"), msg(Role::assistant, "a"), msg(Role::assistant, "b")};
  EXPECT_EQ(render(c, Flavor::ds4, ThinkMode::none), B + U + "q" + A + "</think>a" + E + "b" + E);
}

TEST(RenderRules, Ds4CallEscapesAndNonObjectArguments) {
  std::vector<ToolCall> calls = {{"", "a\"<b>&", R"({"k\"<":"v","n":[1, 2 ,{"x" : "y z"}]})"},
                                 {"", "raw", "[1,2]"}};
  EXPECT_EQ(render_tool_calls(calls, Flavor::ds4),
            "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"a&quot;&lt;b&gt;&amp;\">\n"
            "<｜DSML｜parameter name=\"k&quot;&lt;\" string=\"true\">v</｜DSML｜parameter>\n"
            "<｜DSML｜parameter name=\"n\" string=\"false\">[1,2,{\"x\":\"y z\"}]</｜DSML｜parameter>\n"
            "</｜DSML｜invoke>\n<｜DSML｜invoke name=\"raw\">\n"
            "<｜DSML｜parameter name=\"arguments\" string=\"true\">[1,2]</｜DSML｜parameter>\n"
            "</｜DSML｜invoke>\n</｜DSML｜tool_calls>");
}

TEST(RenderRules, OfficialCallArgumentsPythonStyle) {
  std::vector<ToolCall> calls = {{"", "f", R"({"a": [1, "two"], "b": {"k": -1}, "c": null, "d": 1.0, "e": 1e-6, "s": "raw \" text"})"},
                                 {"", "g", "{}"},
                                 {"", "h", "not json"}};
  EXPECT_EQ(render_tool_calls(calls, Flavor::official),
            "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
            "<｜DSML｜parameter name=\"a\" string=\"false\">[1, \"two\"]</｜DSML｜parameter>\n"
            "<｜DSML｜parameter name=\"b\" string=\"false\">{\"k\": -1}</｜DSML｜parameter>\n"
            "<｜DSML｜parameter name=\"c\" string=\"false\">null</｜DSML｜parameter>\n"
            "<｜DSML｜parameter name=\"d\" string=\"false\">1.0</｜DSML｜parameter>\n"
            "<｜DSML｜parameter name=\"e\" string=\"false\">1e-06</｜DSML｜parameter>\n"
            "<｜DSML｜parameter name=\"s\" string=\"true\">raw \" text</｜DSML｜parameter>\n"
            "</｜DSML｜invoke>\n<｜DSML｜invoke name=\"g\">\n\n</｜DSML｜invoke>\n"
            "<｜DSML｜invoke name=\"h\">\n<｜DSML｜parameter name=\"arguments\" string=\"true\">not json</｜DSML｜parameter>\n"
            "</｜DSML｜invoke>\n</｜DSML｜tool_calls>");
}

TEST(RenderRules, PythonDumps) {
  using json_text::python_dumps;
  auto j = [](const char* s) { return nlohmann::ordered_json::parse(s); };
  EXPECT_EQ(python_dumps(j(R"({"b": 1, "a": [true, false, null], "f": 100.0, "g": 1e16, "h": 0.1})")),
            R"({"b": 1, "a": [true, false, null], "f": 100.0, "g": 1e+16, "h": 0.1})");
  EXPECT_EQ(python_dumps(j(R"(["é\n\t\u0001\b\f/\\\""])")), "[\"é\\n\\t\\u0001\\b\\f/\\\\\\\"\"]");
  EXPECT_EQ(python_dumps(j("{}")), "{}");
  EXPECT_EQ(python_dumps(j("[]")), "[]");
}

TEST(RenderRules, OfficialRequestToolsGoToFirstSystemMessage) {
  Conversation c;
  c.tools = {R"({"name":"f","parameters":{"type":"object"}})"};
  c.messages = {msg(Role::user, "q")};
  const std::string out = render(c, Flavor::official, ThinkMode::high);
  EXPECT_EQ(out.rfind(B + "\n\n## Tools\n\n", 0), 0u) << out.substr(0, 80);
  EXPECT_NE(out.find("{\"name\": \"f\", \"parameters\": {\"type\": \"object\"}}\n\nYou MUST"), std::string::npos);
  EXPECT_NE(out.find("invoke tool calls.\n" + U + "q" + A + "<think>"), std::string::npos);
  // Tools present: reasoning is never dropped.
  c.messages = {msg(Role::system, "S"), msg(Role::user, "q1"), msg(Role::assistant, "a", "r"), msg(Role::user, "q2")};
  EXPECT_NE(render(c, Flavor::official, ThinkMode::high).find(A + "<think>r</think>a" + E), std::string::npos);
}

TEST(RenderRules, OfficialLatestReminderTaskWoEosAndResponseFormat) {
  Conversation c;
  Message sys = msg(Role::system, "S");
  sys.response_format = R"({"type":"json_object"})";
  Message q = msg(Role::user, "title please");
  q.task = "title";
  Message a = msg(Role::assistant, "T");
  a.wo_eos = true;
  c.messages = {sys, msg(Role::latest_reminder, "R"), q, a};
  EXPECT_EQ(render(c, Flavor::official, ThinkMode::high),
            B + "S\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n"
                "{\"type\": \"json_object\"}<｜latest_reminder｜>R" + U + "title please<｜title｜>T");
  Message act = msg(Role::user, "do");
  act.task = "action";
  c.messages = {act};
  EXPECT_EQ(render(c, Flavor::official, ThinkMode::high), B + U + "do" + A + "<think><｜action｜>");
  EXPECT_EQ(render(c, Flavor::official, ThinkMode::none), B + U + "do" + A + "</think><｜action｜>");
}

TEST(RenderRules, OfficialErrors) {
  RenderOptions o;
  Conversation c;
  c.messages = {msg(Role::developer, "")};
  EXPECT_EQ(render_prompt(c, o).status().code(), StatusCode::invalid_argument);
  c.messages = {msg(Role::system, "S")};
  c.messages[0].tools = {"{not json"};
  EXPECT_EQ(render_prompt(c, o).status().code(), StatusCode::invalid_argument);
  c.messages = {msg(Role::user, "x")};
  c.messages[0].task = "bogus";
  EXPECT_EQ(render_prompt(c, o).status().code(), StatusCode::invalid_argument);
}

TEST(RenderRules, OfficialToolResultsSortedAndMerged) {
  Conversation c;
  Message call = msg(Role::assistant, "");
  call.tool_calls = {{"a", "f", "{}"}, {"b", "f", "{}"}, {"c", "f", "{}"}};
  Message rb = msg(Role::tool, "B"), rc = msg(Role::tool, "C"), ra = msg(Role::tool, "A"), rx = msg(Role::tool, "X");
  rb.tool_call_id = "b";
  rc.tool_call_id = "c";
  ra.tool_call_id = "a";
  rx.tool_call_id = "unknown";  // position 0, stable
  c.messages = {msg(Role::user, "q"), call, rc, rb, rx, ra, msg(Role::user, "then")};
  const std::string out = render(c, Flavor::official, ThinkMode::none);
  EXPECT_NE(out.find(U + "<tool_result>X</tool_result>\n\n<tool_result>A</tool_result>\n\n<tool_result>B</tool_result>"
                         "\n\n<tool_result>C</tool_result>\n\nthen" + A + "</think>"),
            std::string::npos)
      << out;
}

TEST(RenderRules, Ds4LiveTail) {
  Message r = msg(Role::tool, "42");
  std::vector<Message> tail = {r};
  auto t = render_ds4_tail(tail, ThinkMode::high);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, E + U + "<tool_result>42</tool_result>" + A + "<think>");
  std::vector<Message> bad = {msg(Role::system, "x")};
  EXPECT_FALSE(render_ds4_tail(bad, ThinkMode::high).ok());
}

TEST(RenderRules, RoleNames) {
  EXPECT_EQ(parse_role("function").value(), Role::tool);
  EXPECT_EQ(parse_role("").value(), Role::user);
  EXPECT_FALSE(parse_role("wizard").ok());
  for (Role r : {Role::system, Role::developer, Role::user, Role::assistant, Role::tool, Role::latest_reminder})
    EXPECT_EQ(parse_role(role_name(r)).value(), r);
}

}  // namespace
}  // namespace ds4::chat
