// test_dsml_parser.cpp — the incremental DSML output parser: reasoning/content separation,
// tool calls (single, parallel, string and JSON values, nested JSON, unicode, entities,
// nested parameters, prefix slips), streamed argument deltas, every split point of several
// generated outputs, and malformed/truncated blocks.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "chat/chat.h"

namespace ds4::chat {
namespace {

using nlohmann::json;

// What a sequence of events adds up to.
struct Collected {
  std::string reasoning, content;
  std::vector<std::string> names, args;  // from call_begin / call_args
  std::vector<ParsedCall> ended;         // from call_end
};

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = s[i];
    size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

void collect(const std::vector<ParseEvent>& events, Collected& c) {
  for (const ParseEvent& e : events) {
    switch (e.kind) {
      case ParseEventKind::reasoning: c.reasoning += e.text; break;
      case ParseEventKind::content: c.content += e.text; break;
      case ParseEventKind::call_begin:
        ASSERT_EQ(e.index, c.names.size());
        c.names.push_back(e.text);
        c.args.emplace_back();
        break;
      case ParseEventKind::call_args:
        ASSERT_EQ(e.index + 1, c.args.size()) << "args before call_begin";
        c.args[e.index] += e.text;
        break;
      case ParseEventKind::call_end:
        ASSERT_EQ(e.index, c.ended.size());
        c.ended.push_back(e.call);
        break;
    }
    if (e.kind != ParseEventKind::call_end) {
      EXPECT_TRUE(valid_utf8(e.text)) << "event text splits a UTF-8 character";
    }
  }
}

// Parses `text` fed in the given pieces; checks the event stream against the final message.
ParsedMessage parse_pieces(const std::vector<std::string_view>& pieces, const ParserOptions& o,
                           Collected* out = nullptr) {
  DsmlParser p(o);
  std::vector<ParseEvent> events;
  for (std::string_view piece : pieces) p.feed(piece, events);
  ParsedMessage m = p.finish(events);
  Collected c;
  collect(events, c);
  EXPECT_EQ(c.reasoning, m.reasoning);
  EXPECT_EQ(c.content, m.content);
  EXPECT_EQ(c.ended.size(), m.calls.size());
  for (size_t k = 0; k < c.ended.size() && k < m.calls.size(); ++k) {
    EXPECT_EQ(c.names[k], m.calls[k].name);
    EXPECT_EQ(c.args[k], m.calls[k].arguments);
    EXPECT_EQ(c.ended[k].arguments, m.calls[k].arguments);
  }
  if (out) *out = c;
  return m;
}

void expect_same(const ParsedMessage& a, const ParsedMessage& b, const std::string& where) {
  EXPECT_EQ(a.reasoning, b.reasoning) << where;
  EXPECT_EQ(a.content, b.content) << where;
  EXPECT_EQ(a.raw_dsml, b.raw_dsml) << where;
  EXPECT_EQ(a.status.ok(), b.status.ok()) << where;
  EXPECT_EQ(a.status.message(), b.status.message()) << where;
  ASSERT_EQ(a.calls.size(), b.calls.size()) << where;
  for (size_t k = 0; k < a.calls.size(); ++k) {
    EXPECT_EQ(a.calls[k].name, b.calls[k].name) << where;
    EXPECT_EQ(a.calls[k].arguments, b.calls[k].arguments) << where;
  }
}

// Every split into two pieces, and byte-by-byte, gives the one-shot result.
void check_all_splits(const std::string& text, const ParserOptions& o) {
  const ParsedMessage whole = parse_pieces({text}, o);
  for (size_t i = 0; i <= text.size(); ++i) {
    std::string_view t = text;
    expect_same(parse_pieces({t.substr(0, i), t.substr(i)}, o), whole, "split at " + std::to_string(i));
    if (::testing::Test::HasFailure()) return;
  }
  std::vector<std::string_view> bytes;
  for (size_t i = 0; i < text.size(); ++i) bytes.push_back(std::string_view(text).substr(i, 1));
  expect_same(parse_pieces(bytes, o), whole, "byte by byte");
}

const std::string kSingle =
    "The user wants the weather.</think>Let me check.\n\n<｜DSML｜tool_calls>\n"
    "<｜DSML｜invoke name=\"get_weather\">\n"
    "<｜DSML｜parameter name=\"location\" string=\"true\">Beijing</｜DSML｜parameter>\n"
    "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n"
    "</｜DSML｜invoke>\n"
    "</｜DSML｜tool_calls>";

const std::string kParallel =
    "Два города — 两个城市 🌍.</think>\n\n<｜DSML｜tool_calls>\n"
    "<｜DSML｜invoke name=\"get_weather\">\n"
    "<｜DSML｜parameter name=\"location\" string=\"true\">Zürich 🏔️ \"quoted\"\nline2</｜DSML｜parameter>\n"
    "</｜DSML｜invoke>\n"
    "<｜DSML｜invoke name=\"search\">\n"
    "<｜DSML｜parameter name=\"filters\" string=\"false\">{\"tags\": [\"a\", \"b\"], \"nested\": {\"k\": -1.5, \"ok\": true, \"n\": null}}</｜DSML｜parameter>\n"
    "<｜DSML｜parameter name=\"limit\" string=\"false\">10</｜DSML｜parameter>\n"
    "<｜DSML｜parameter name=\"query\" string=\"true\">a &amp;&amp; b &lt;/｜DSML｜parameter> c</｜DSML｜parameter>\n"
    "</｜DSML｜invoke>\n"
    "</｜DSML｜tool_calls><｜end▁of▁sentence｜>";

TEST(DsmlParser, SingleCallThinking) {
  ParsedMessage m = parse_output(kSingle, {});
  ASSERT_TRUE(m.status.ok()) << m.status.to_string();
  EXPECT_EQ(m.reasoning, "The user wants the weather.");
  EXPECT_EQ(m.content, "Let me check.");
  ASSERT_EQ(m.calls.size(), 1u);
  EXPECT_EQ(m.calls[0].name, "get_weather");
  EXPECT_EQ(m.calls[0].arguments, "{\"location\": \"Beijing\", \"days\": 3}");
  EXPECT_EQ(m.raw_dsml, kSingle.substr(kSingle.find("\n\n<｜DSML｜tool_calls>")));
  EXPECT_EQ(m.fallback_content, kSingle.substr(kSingle.find("</think>") + 8));
}

TEST(DsmlParser, ParallelCallsNestedJsonUnicodeEntities) {
  ParsedMessage m = parse_output(kParallel, {});
  ASSERT_TRUE(m.status.ok()) << m.status.to_string();
  EXPECT_EQ(m.reasoning, "Два города — 两个城市 🌍.");
  EXPECT_EQ(m.content, "");
  EXPECT_TRUE(m.saw_eos);
  ASSERT_EQ(m.calls.size(), 2u);
  EXPECT_EQ(json::parse(m.calls[0].arguments), json({{"location", "Zürich 🏔️ \"quoted\"\nline2"}}));
  json want = json::parse(
      R"({"filters": {"tags": ["a", "b"], "nested": {"k": -1.5, "ok": true, "n": null}}, "limit": 10,
          "query": "a && b </｜DSML｜parameter> c"})");
  EXPECT_EQ(json::parse(m.calls[1].arguments), want);
  // Key order is generation order; JSON values are minified (ds4).
  EXPECT_EQ(m.calls[1].arguments.substr(0, 60),
            std::string("{\"filters\": {\"tags\":[\"a\",\"b\"],\"nested\":{\"k\":-1.5,\"ok\":true,\"n\":null}}").substr(0, 60));
  EXPECT_EQ(m.raw_dsml.substr(0, 2), "\n\n");
  EXPECT_EQ(m.raw_dsml.size(), kParallel.size() - kParallel.find("\n\n<｜DSML｜") - std::string(kEos).size());
}

TEST(DsmlParser, OfficialFlavorKeepsValuesVerbatim) {
  ParserOptions o;
  o.flavor = Flavor::official;
  ParsedMessage m = parse_output(kParallel, o);
  ASSERT_TRUE(m.status.ok());
  ASSERT_EQ(m.calls.size(), 2u);
  EXPECT_EQ(json::parse(m.calls[1].arguments)["query"], "a &amp;&amp; b &lt;/｜DSML｜parameter> c");
  EXPECT_NE(m.calls[1].arguments.find("{\"tags\": [\"a\", \"b\"]"), std::string::npos);
}

TEST(DsmlParser, EverySplitPointSingle) { check_all_splits(kSingle, {}); }
TEST(DsmlParser, EverySplitPointParallel) { check_all_splits(kParallel, {}); }

TEST(DsmlParser, EverySplitPointContentOnlyNoThinking) {
  ParserOptions o;
  o.thinking = false;
  const std::string text = "Hello — 你好 👋 <b>bold</b> </thin k> done.\n\n<｜end▁of▁sentence｜>ignored";
  ParsedMessage m = parse_output(text, o);
  EXPECT_EQ(m.content, "Hello — 你好 👋 <b>bold</b> </thin k> done.\n\n");
  EXPECT_EQ(m.reasoning, "");
  EXPECT_TRUE(m.saw_eos);
  check_all_splits(text, o);
}

const std::string kNested =
    "ok</think>Sure.\n<DSML｜tool_calls>\n"
    "  <DSML｜invoke name=\"edit\">\n"
    "<DSML｜parameter name=\"path\">src/a&amp;b.c</DSML｜parameter>\n"
    "<DSML｜parameter name=\"range\">\n  <DSML｜parameter name=\"start\" string=\"false\">1</DSML｜parameter>\n"
    "  <DSML｜parameter name=\"end\" string=\"false\"> 20 </DSML｜parameter>\n</DSML｜parameter>\n"
    "<DSML｜parameter name=\"empty\" string=\"false\"></DSML｜parameter>\n"
    "</DSML｜invoke>\n</DSML｜tool_calls>";

TEST(DsmlParser, SlipPrefixMissingStringAttrAndNestedParameters) {
  ParsedMessage m = parse_output(kNested, {});
  ASSERT_TRUE(m.status.ok()) << m.status.to_string();
  EXPECT_EQ(m.content, "Sure.");
  ASSERT_EQ(m.calls.size(), 1u);
  EXPECT_EQ(json::parse(m.calls[0].arguments),
            json::parse(R"({"path": "src/a&b.c", "range": {"start": 1, "end": 20}, "empty": null})"));
  EXPECT_EQ(m.raw_dsml.substr(0, 5), "<DSML");  // single LF before the block: not part of it
  check_all_splits(kNested, {});
}

TEST(DsmlParser, PlainTagsAndNonJsonFallsBackToString) {
  const std::string text =
      "</think>x\n\n<tool_calls>\n<invoke name=\"f\">\n<parameter name=\"a\" string=\"false\">not json</parameter>\n"
      "<parameter name=\"b\" string=\"true\">keep</parameter>\n</invoke>\n</tool_calls>";
  ParsedMessage m = parse_output(text, {});
  ASSERT_TRUE(m.status.ok()) << m.status.to_string();
  ASSERT_EQ(m.calls.size(), 1u);
  EXPECT_EQ(json::parse(m.calls[0].arguments), json({{"a", "not json"}, {"b", "keep"}}));
  check_all_splits(text, {});
}

TEST(DsmlParser, ClosingTagInsideValueEndsItEarly) {
  // An unescaped closer ends the value; the rest is stray text: malformed, like ds4 would see it.
  const std::string text =
      "</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"b\" string=\"true\">"
      "keep </｜DSML｜parameter> inside</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  ParsedMessage m = parse_output(text, {});
  EXPECT_FALSE(m.status.ok());
  EXPECT_TRUE(m.calls.empty());
  EXPECT_EQ(m.fallback_content, text.substr(8));
}

TEST(DsmlParser, DsmlInsideReasoningIsReasoning) {
  const std::string text = "thinking about <｜DSML｜tool_calls> syntax</think>Answer.";
  ParsedMessage m = parse_output(text, {});
  EXPECT_TRUE(m.status.ok());
  EXPECT_EQ(m.reasoning, "thinking about <｜DSML｜tool_calls> syntax");
  EXPECT_EQ(m.content, "Answer.");
  EXPECT_TRUE(m.calls.empty());
}

TEST(DsmlParser, ToolsDisabledLeavesDsmlAsContent) {
  ParserOptions o;
  o.thinking = false;
  o.tools_enabled = false;
  ParsedMessage m = parse_output("a\n\n" + kSingle.substr(kSingle.find("<｜DSML")), o);
  EXPECT_TRUE(m.status.ok());
  EXPECT_TRUE(m.calls.empty());
  EXPECT_NE(m.content.find("<｜DSML｜invoke"), std::string::npos);
}

TEST(DsmlParser, StreamsArgumentsBeforeTheCallEnds) {
  DsmlParser p{ParserOptions{}};
  std::vector<ParseEvent> events;
  const std::string head = kSingle.substr(0, kSingle.find("Beijing") + 4);  // "...>Beij"
  p.feed(head, events);
  Collected c;
  collect(events, c);
  ASSERT_EQ(c.names.size(), 1u);
  EXPECT_EQ(c.names[0], "get_weather");
  EXPECT_EQ(c.args[0], "{\"location\": \"Beij");
  EXPECT_TRUE(c.ended.empty());
  EXPECT_EQ(p.state(), ParseState::tool_block);
  EXPECT_EQ(c.content, "Let me check.");
}

TEST(DsmlParser, TextAfterBlockIsIgnored) {
  ParsedMessage m = parse_output(kSingle + "\ntrailing", {});
  EXPECT_TRUE(m.status.ok());
  EXPECT_EQ(m.calls.size(), 1u);
}

TEST(DsmlParser, UnterminatedReasoningIsAllReasoning) {
  ParsedMessage m = parse_output("still thinking <", {});
  EXPECT_TRUE(m.status.ok());
  EXPECT_EQ(m.reasoning, "still thinking <");
  EXPECT_EQ(m.fallback_content, "");
}

struct Malformed {
  const char* name;
  std::string text;
  const char* message_part;
};

TEST(DsmlParser, MalformedBlocksGiveClearErrors) {
  const std::string open = "</think>c\n\n<｜DSML｜tool_calls>\n";
  const std::string inv = "<｜DSML｜invoke name=\"f\">\n";
  const std::vector<Malformed> cases = {
      {"truncated in value", open + inv + "<｜DSML｜parameter name=\"a\" string=\"true\">abc", "unterminated"},
      {"truncated in tag", open + "<｜DSML｜inv", "unterminated"},
      {"truncated after invoke", open + inv, "unterminated"},
      {"text between elements", open + "hello", "unexpected text"},
      {"invoke without name", open + "<｜DSML｜invoke>\n", "without a name"},
      {"bad string attr", open + inv + "<｜DSML｜parameter name=\"a\" string=\"maybe\">x</｜DSML｜parameter>", "string=\"maybe\""},
      {"duplicate key", open + inv + "<｜DSML｜parameter name=\"a\" string=\"true\">x</｜DSML｜parameter>\n<｜DSML｜parameter name=\"a\" string=\"true\">y</｜DSML｜parameter>", "duplicate"},
      {"wrong closer", open + inv + "</｜DSML｜tool_calls>", "expected <parameter>"},
      {"empty block", open + "</｜DSML｜tool_calls>", "without any invoke"},
      {"mixed prefixes", open + "<invoke name=\"f\">", "prefix"},
      {"eos in value", open + inv + "<｜DSML｜parameter name=\"a\" string=\"true\">x<｜end▁of▁sentence｜>", "unterminated"},
      {"parameter without name", open + inv + "<｜DSML｜parameter string=\"true\">x</｜DSML｜parameter>", "without a name"},
      {"attribute garbage", open + "<｜DSML｜invoke name=f>", "malformed attribute"},
      {"tag too long", open + "<｜DSML｜invoke name=\"" + std::string(5000, 'x'), "4096"},
  };
  for (const Malformed& c : cases) {
    SCOPED_TRACE(c.name);
    ParsedMessage m = parse_output(c.text, {});
    ASSERT_FALSE(m.status.ok());
    EXPECT_EQ(m.status.code(), StatusCode::invalid_data);
    EXPECT_NE(m.status.message().find(c.message_part), std::string::npos) << m.status.message();
    EXPECT_TRUE(m.raw_dsml.empty());
    EXPECT_EQ(m.fallback_content, c.text.substr(8, c.text.find("<｜end▁of▁sentence｜>") == std::string::npos
                                                        ? std::string::npos
                                                        : c.text.find("<｜end▁of▁sentence｜>") - 8));
    // Every split point reaches the same verdict.
    for (size_t i = 0; i <= c.text.size(); i += 7) {
      std::string_view t = c.text;
      expect_same(parse_pieces({t.substr(0, i), t.substr(i)}, {}), m, std::string(c.name) + " split " + std::to_string(i));
    }
  }
}

TEST(DsmlParser, ErrorStateStopsCallEvents) {
  DsmlParser p{ParserOptions{}};
  std::vector<ParseEvent> events;
  p.feed("</think>\n\n<｜DSML｜tool_calls>\ngarbage", events);
  EXPECT_EQ(p.state(), ParseState::error);
  EXPECT_FALSE(p.error().ok());
  const size_t n = events.size();
  p.feed("<｜DSML｜invoke name=\"f\">\n", events);
  EXPECT_EQ(events.size(), n);
  ParsedMessage m = p.finish(events);
  EXPECT_FALSE(m.status.ok());
  EXPECT_NE(m.raw_text.find("invoke name"), std::string::npos);
}

// Canonical rendering -> parsing gives back the calls (both flavors).
TEST(DsmlParser, RoundTripsRenderedCalls) {
  std::vector<ToolCall> calls = {
      {"call_1", "write_file", R"({"path": "a.txt", "content": "x < y && z > w\n\"q\" &amp; ok", "mode": 420})"},
      {"call_2", "noargs", "{}"},
      {"call_3", "mixed", R"({"list": [1, "two", {"k": -1}], "none": null, "flag": false, "ü": "é"})"},
      {"call_4", "raw", "not json at all"},
  };
  for (Flavor f : {Flavor::ds4, Flavor::official}) {
    SCOPED_TRACE(f == Flavor::ds4 ? "ds4" : "official");
    const std::string dsml = render_tool_calls(calls, f);
    ParserOptions o;
    o.flavor = f;
    o.thinking = false;
    ParsedMessage m = parse_output("Text." + dsml, o);
    ASSERT_TRUE(m.status.ok()) << m.status.to_string();
    EXPECT_EQ(m.content, "Text.");
    EXPECT_EQ(m.raw_dsml, dsml);
    ASSERT_EQ(m.calls.size(), calls.size());
    for (size_t k = 0; k < calls.size(); ++k) {
      EXPECT_EQ(m.calls[k].name, calls[k].name);
      json want = json::accept(calls[k].arguments) ? json::parse(calls[k].arguments)
                                                   : json({{"arguments", calls[k].arguments}});
      if (f == Flavor::ds4 && k == 0) {
        // ds4 decodes entities in string values (the prompt tells the model not to write any).
        want["content"] = "x < y && z > w\n\"q\" & ok";
      }
      EXPECT_EQ(json::parse(m.calls[k].arguments), want) << m.calls[k].arguments;
    }
  }
}

TEST(DsmlParser, LargeValuesStreamedInSmallPieces) {
  // 300 KB of JSON and 300 KB of string, three bytes per feed: must stay linear.
  std::string arr = "[";
  for (int i = 0; i < 50000; ++i) arr += (i ? ",\"v" : "\"v") + std::to_string(i % 10) + "\"";
  arr += "]";
  const std::string big_string(300000, 'x');
  const std::string text = "</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
                           "<｜DSML｜parameter name=\"a\" string=\"false\">" + arr + "</｜DSML｜parameter>\n"
                           "<｜DSML｜parameter name=\"s\" string=\"true\">" + big_string + "</｜DSML｜parameter>\n"
                           "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  DsmlParser p{ParserOptions{}};
  std::vector<ParseEvent> events;
  for (size_t i = 0; i < text.size(); i += 3) {
    p.feed(std::string_view(text).substr(i, 3), events);
    events.clear();
  }
  ParsedMessage m = p.finish(events);
  ASSERT_TRUE(m.status.ok()) << m.status.to_string();
  ASSERT_EQ(m.calls.size(), 1u);
  auto args = json::parse(m.calls[0].arguments);
  EXPECT_EQ(args["a"].size(), 50000u);
  EXPECT_EQ(args["s"].get<std::string>().size(), big_string.size());
}

TEST(DsmlParser, Ds4EscapedClosingTagRoundTrips) {
  std::vector<ToolCall> calls = {{"", "w", R"({"s": "a </｜DSML｜parameter> b", "j": {"t": "</｜DSML｜parameter>"}})"}};
  const std::string dsml = render_tool_calls(calls, Flavor::ds4);
  EXPECT_NE(dsml.find("&lt;/｜DSML｜parameter>"), std::string::npos);
  EXPECT_NE(dsml.find("\\u003c/｜DSML｜parameter>"), std::string::npos);
  ParserOptions o;
  o.thinking = false;
  ParsedMessage m = parse_output(dsml, o);
  ASSERT_TRUE(m.status.ok()) << m.status.to_string();
  ASSERT_EQ(m.calls.size(), 1u);
  EXPECT_EQ(json::parse(m.calls[0].arguments), json::parse(calls[0].arguments));
}

}  // namespace
}  // namespace ds4::chat
