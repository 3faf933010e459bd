// dsml_fuzz_entry.cpp — properties checked on every fuzz input:
//  * parsing never crashes or hangs, and any split of the input into pieces gives exactly the
//    one-shot result (reasoning, content, calls, raw_dsml, error message);
//  * the event stream adds up to the final message (deltas never split a UTF-8 character);
//  * accepted calls have arguments that are valid JSON objects, raw_dsml is a piece of the input
//    and re-parsing it yields the same calls;
//  * request mappers and both renderers never crash on arbitrary bodies.
#include "dsml_fuzz_entry.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>

#include "chat/api_map.h"
#include "chat/chat.h"

namespace ds4::chat::fuzz {
namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_dsml: property violated: %s\n", what);
    std::abort();
  }
}

bool valid_utf8(const std::string& s) {
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

struct Run {
  ParsedMessage msg;
  std::vector<ParseEvent> events;
};

Run parse(const std::string& text, const ParserOptions& o, uint32_t seed) {
  DsmlParser p(o);
  Run r;
  size_t pos = 0;
  uint32_t state = seed * 2654435761u + 1;
  while (pos < text.size()) {
    size_t len = text.size() - pos;
    if (seed != 0) {
      state = state * 1103515245u + 12345u;
      len = std::min<size_t>(len, 1 + (state >> 16) % 17);
    }
    p.feed(std::string_view(text).substr(pos, len), r.events);
    pos += len;
  }
  r.msg = p.finish(r.events);
  return r;
}

void check_events(const Run& r, bool input_utf8) {
  std::string reasoning, content;
  std::vector<std::string> args;
  size_t ended = 0;
  for (const ParseEvent& e : r.events) {
    switch (e.kind) {
      case ParseEventKind::reasoning: reasoning += e.text; break;
      case ParseEventKind::content: content += e.text; break;
      case ParseEventKind::call_begin:
        check(e.index == args.size(), "call_begin index");
        args.emplace_back();
        break;
      case ParseEventKind::call_args:
        check(e.index + 1 == args.size(), "call_args for a call that is not open");
        args.back() += e.text;
        break;
      case ParseEventKind::call_end:
        check(e.index == ended && ended < r.msg.calls.size(), "call_end index");
        check(e.call.arguments == args[e.index], "call_end arguments differ from streamed deltas");
        ++ended;
        break;
    }
    if (input_utf8 && e.kind != ParseEventKind::call_end)
      check(valid_utf8(e.text), "event splits a UTF-8 character");
  }
  check(reasoning == r.msg.reasoning, "reasoning deltas");
  check(content == r.msg.content, "content deltas");
  check(ended == r.msg.calls.size(), "call_end count");
}

void same(const ParsedMessage& a, const ParsedMessage& b) {
  check(a.reasoning == b.reasoning, "split changes reasoning");
  check(a.content == b.content, "split changes content");
  check(a.raw_dsml == b.raw_dsml, "split changes raw_dsml");
  check(a.status.message() == b.status.message(), "split changes the error");
  check(a.fallback_content == b.fallback_content, "split changes fallback_content");
  check(a.calls.size() == b.calls.size(), "split changes the number of calls");
  for (size_t k = 0; k < a.calls.size(); ++k) {
    check(a.calls[k].name == b.calls[k].name, "split changes a call name");
    check(a.calls[k].arguments == b.calls[k].arguments, "split changes call arguments");
  }
}

void fuzz_parser(const std::string& text, uint8_t mode, uint8_t seed) {
  ParserOptions o;
  o.flavor = (mode & 4) ? Flavor::official : Flavor::ds4;
  o.thinking = (mode & 8) != 0;
  o.tools_enabled = (mode & 16) != 0;
  const Run whole = parse(text, o, 0);
  const Run split = parse(text, o, seed + 1u);
  const bool utf8 = valid_utf8(text);
  check_events(whole, utf8);
  check_events(split, utf8);
  same(whole.msg, split.msg);
  if (!whole.msg.status.ok()) return;
  for (const ParsedCall& c : whole.msg.calls) {
    auto j = nlohmann::json::parse(c.arguments, nullptr, false);
    check(!j.is_discarded() && j.is_object(), "arguments are not a JSON object");
  }
  if (!whole.msg.calls.empty()) {
    check(text.find(whole.msg.raw_dsml) != std::string::npos, "raw_dsml is not part of the input");
    ParserOptions again = o;
    again.thinking = false;
    const ParsedMessage re = parse_output("x" + whole.msg.raw_dsml, again);
    check(re.status.ok(), "re-parsing raw_dsml fails");
    check(re.calls.size() == whole.msg.calls.size(), "re-parsing raw_dsml changes the calls");
    for (size_t k = 0; k < re.calls.size(); ++k)
      check(re.calls[k].arguments == whole.msg.calls[k].arguments, "re-parsed arguments differ");
  }
}

void render_both(const Conversation& conv, ThinkMode think) {
  for (Flavor f : {Flavor::official, Flavor::ds4}) {
    RenderOptions o;
    o.flavor = f;
    o.think = think;
    auto r = render_prompt(conv, o);
    if (r.ok()) check(r->rfind(std::string(kBos), 0) == 0, "prompt does not start with BOS");
  }
}

void fuzz_request(const std::string& body, uint8_t mode) {
  MapOptions mo;
  mo.flavor = (mode & 4) ? Flavor::official : Flavor::ds4;
  if ((mode & 3) == 2) {
    if (auto r = map_chat_completions(body, mo); r.ok()) render_both(r->conv, r->think);
    if (auto r = map_completions(body); r.ok())
      (void)render_completion_prompt(kDefaultSystem, r->prompt, r->think);
  } else {
    if (auto r = map_anthropic_messages(body, mo); r.ok()) render_both(r->conv, r->think);
    if (auto r = map_responses(body, mo); r.ok()) render_both(r->conv, r->think);
  }
}

}  // namespace

void run_one(const uint8_t* data, size_t size) {
  if (size < 2) return;
  const uint8_t mode = data[0], seed = data[1];
  const std::string text(reinterpret_cast<const char*>(data + 2), size - 2);
  if ((mode & 3) < 2) fuzz_parser(text, mode, seed);
  else fuzz_request(text, mode);
}

}  // namespace ds4::chat::fuzz
