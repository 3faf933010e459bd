// dsml_parser.cpp — incremental parser for what the model generates (CHAT.md §3):
//   [reasoning "</think>"] content ["\n\n" <｜DSML｜tool_calls> invoke… </｜DSML｜tool_calls>] [EOS]
// Text is consumed from an input buffer only once its meaning is certain: a suffix that could
// still become a marker ("</thi", "<｜DSML｜tool_", "</｜DSML｜param"), an incomplete UTF-8
// character, a partial "&amp;" entity, or content whitespace that may precede a tool block is
// withheld until the next piece decides it. Lenient like ds4-server (§3.3): the "<DSML｜" slip
// and plain <tool_calls>/<invoke>/<parameter> tags, whitespace between elements, a missing
// string attribute (string, or nested parameters -> JSON object), entity decoding (ds4 flavor).
// Anything else inside a block is a clear invalid_data error, never a crash.
// Not here: choosing ids, the SSE wire format, stop sequences.
#include <set>

#include "chat/chat.h"
#include "chat/json_text.h"

namespace ds4::chat {
namespace {

constexpr std::string_view kOpeners[] = {"<｜DSML｜tool_calls>", "<DSML｜tool_calls>",
                                         "<tool_calls>"};
constexpr std::string_view kDsmlCloseParam[] = {"</｜DSML｜parameter>", "</DSML｜parameter>"};
constexpr std::string_view kPlainCloseParam[] = {"</parameter>"};
constexpr std::string_view kEntities[] = {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"};
constexpr std::string_view kEntityText[] = {"&", "<", ">", "\"", "'"};
constexpr size_t kMaxTagBytes = 4096;  // a tag header longer than this is malformed

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

struct Hit {
  size_t pos = std::string_view::npos;
  std::string_view marker;
};

template <typename Markers>
Hit find_first(std::string_view buf, const Markers& markers, size_t from = 0) {
  Hit best;
  for (std::string_view m : markers) {
    const size_t p = buf.find(m, from);
    if (p < best.pos) best = {p, m};
  }
  return best;
}

// Length of the longest suffix of buf that is a proper prefix of one of the markers.
template <typename Markers>
size_t partial_suffix(std::string_view buf, const Markers& markers) {
  size_t best = 0;
  for (std::string_view m : markers) {
    const size_t max = std::min(buf.size(), m.size() - 1);
    for (size_t n = max; n > best; --n)
      if (buf.substr(buf.size() - n) == m.substr(0, n)) {
        best = n;
        break;
      }
  }
  return best;
}

// Largest n <= buf.size() such that buf[0, n) does not end inside a UTF-8 sequence.
size_t utf8_safe_len(std::string_view buf) {
  const size_t n = buf.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const unsigned char c = static_cast<unsigned char>(buf[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
    size_t need = 1;
    if ((c & 0xE0) == 0xC0) need = 2;
    else if ((c & 0xF0) == 0xE0) need = 3;
    else if ((c & 0xF8) == 0xF0) need = 4;
    return need > back ? n - back : n;
  }
  return n;
}

// Length of a trailing partial entity ("&", "&am", "&quot") that may still complete.
size_t partial_entity(std::string_view buf) {
  const size_t amp = buf.rfind('&');
  if (amp == std::string_view::npos || buf.size() - amp >= 6) return 0;
  const std::string_view tail = buf.substr(amp);
  for (std::string_view e : kEntities)
    if (tail.size() < e.size() && e.substr(0, tail.size()) == tail) return tail.size();
  return 0;
}

std::string decode_entities(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] == '&') {
      bool done = false;
      for (size_t k = 0; k < std::size(kEntities); ++k)
        if (s.substr(i, kEntities[k].size()) == kEntities[k]) {
          out += kEntityText[k];
          i += kEntities[k].size();
          done = true;
          break;
        }
      if (done) continue;
    }
    out += s[i++];
  }
  return out;
}

// JSON string body (no quotes) for a piece of text.
std::string json_escape(std::string_view s, Flavor flavor) {
  std::string q = json_text::quote(
      s, flavor == Flavor::ds4 ? json_text::EscapeStyle::ds4 : json_text::EscapeStyle::python);
  return q.substr(1, q.size() - 2);
}

struct Tag {
  bool closing = false;
  bool dsml_family = false;  // "｜DSML｜" or the "DSML｜" slip
  std::string name;
  std::vector<std::pair<std::string, std::string>> attrs;
  size_t length = 0;
  const std::string* attr(std::string_view key) const {
    for (const auto& a : attrs)
      if (a.first == key) return &a.second;
    return nullptr;
  }
};

enum class TagRead { ok, need_more, bad };

// Parses a tag header at buf[0] == '<'.
TagRead read_tag(std::string_view buf, Tag& tag, std::string& why) {
  size_t end = std::string_view::npos;
  bool in_quote = false;
  for (size_t i = 1; i < buf.size(); ++i) {
    if (buf[i] == '"') in_quote = !in_quote;
    else if (buf[i] == '>' && !in_quote) { end = i; break; }
  }
  if (end == std::string_view::npos) {
    if (buf.size() > kMaxTagBytes) { why = "tag longer than 4096 bytes"; return TagRead::bad; }
    return TagRead::need_more;
  }
  std::string_view h = buf.substr(1, end - 1);
  tag = Tag{};
  tag.length = end + 1;
  if (!h.empty() && h[0] == '/') { tag.closing = true; h.remove_prefix(1); }
  for (std::string_view prefix : {std::string_view("｜DSML｜"), std::string_view("DSML｜")})
    if (h.substr(0, prefix.size()) == prefix) {
      tag.dsml_family = true;
      h.remove_prefix(prefix.size());
      break;
    }
  size_t i = 0;
  while (i < h.size() && ((h[i] >= 'a' && h[i] <= 'z') || h[i] == '_')) ++i;
  tag.name = std::string(h.substr(0, i));
  if (tag.name.empty()) { why = "tag without a name"; return TagRead::bad; }
  while (true) {
    const size_t start = i;
    while (i < h.size() && is_ws(h[i])) ++i;
    if (i == h.size()) break;
    if (i == start) { why = "malformed attributes in <" + tag.name + ">"; return TagRead::bad; }
    const size_t name_start = i;
    while (i < h.size() && (std::isalnum(static_cast<unsigned char>(h[i])) || h[i] == '_')) ++i;
    const std::string key(h.substr(name_start, i - name_start));
    if (key.empty() || h.substr(i, 2) != "=\"") {
      why = "malformed attribute in <" + tag.name + ">";
      return TagRead::bad;
    }
    i += 2;
    const size_t close = h.find('"', i);
    if (close == std::string_view::npos) { why = "unterminated attribute"; return TagRead::bad; }
    tag.attrs.emplace_back(key, std::string(h.substr(i, close - i)));
    i = close + 1;
  }
  if (tag.closing && !tag.attrs.empty()) { why = "attributes on a closing tag"; return TagRead::bad; }
  return TagRead::ok;
}

}  // namespace

struct DsmlParser::Impl {
  enum class Sub { block_between, object_between, param_peek, param_string, param_json };
  struct Frame {
    bool is_invoke = true;
    std::set<std::string> keys;
    size_t count = 0;
  };

  ParserOptions opt;
  ParseState state;
  Status err;
  std::string buf;
  ParsedMessage msg;
  std::string ws_hold;  // content whitespace withheld: it is dropped if a tool block follows
  bool dsml_family = true;
  Sub sub = Sub::block_between;
  std::vector<Frame> frames;
  ParsedCall cur;
  size_t out_start = 0;
  std::vector<ParseEvent>* out = nullptr;
  // param_json: bytes of buf already searched for a closer (minus a marker's length), so a
  // large JSON value arriving token by token is scanned once, not once per token.
  size_t json_scanned = 0;

  explicit Impl(ParserOptions o)
      : opt(o), state(o.thinking ? ParseState::reasoning : ParseState::content) {}

  void emit(ParseEventKind kind, std::string text) {
    if (text.empty() && (kind == ParseEventKind::reasoning || kind == ParseEventKind::content ||
                         kind == ParseEventKind::call_args))
      return;
    if (kind == ParseEventKind::reasoning) msg.reasoning += text;
    if (kind == ParseEventKind::content) msg.content += text;
    if (kind == ParseEventKind::call_args) cur.arguments += text;
    const size_t index = msg.calls.size();
    // Merge with the previous delta of this feed so a piece yields few events.
    if (out->size() > out_start && kind != ParseEventKind::call_begin &&
        kind != ParseEventKind::call_end && out->back().kind == kind &&
        out->back().index == index) {
      out->back().text += text;
      return;
    }
    ParseEvent e;
    e.kind = kind;
    e.index = index;
    e.text = std::move(text);
    out->push_back(std::move(e));
  }

  void consume(size_t n) {
    if (state == ParseState::tool_block) msg.raw_dsml.append(buf, 0, n);
    buf.erase(0, n);
  }

  void fail(std::string why) {
    state = ParseState::error;
    err = invalid_data("dsml: " + why);
    buf.clear();
  }

  std::span<const std::string_view> close_params() const {
    if (dsml_family) return kDsmlCloseParam;
    return kPlainCloseParam;
  }

  // Content text (ws_hold logic): emits all but trailing whitespace, which is withheld.
  void content_text(std::string_view text) {
    size_t end = text.size();
    while (end > 0 && is_ws(text[end - 1])) --end;
    if (end > 0) {
      emit(ParseEventKind::content, ws_hold + std::string(text.substr(0, end)));
      ws_hold.clear();
    }
    ws_hold.append(text.substr(end));
  }

  // Returns false when more input is needed.
  bool step_reasoning() {
    const std::string_view b = buf;
    const std::string_view markers[] = {kThinkClose, kEos};
    Hit hit = find_first(b, markers);
    if (hit.pos != std::string_view::npos) {
      emit(ParseEventKind::reasoning, std::string(b.substr(0, hit.pos)));
      const bool eos = hit.marker == kEos;
      consume(hit.pos + hit.marker.size());
      if (eos) {
        msg.saw_eos = true;
        state = ParseState::done;
      } else {
        state = ParseState::content;
      }
      return true;
    }
    const size_t n = utf8_safe_len(b.substr(0, b.size() - partial_suffix(b, markers)));
    emit(ParseEventKind::reasoning, std::string(b.substr(0, n)));
    consume(n);
    return false;
  }

  bool step_content() {
    const std::string_view b = buf;
    std::vector<std::string_view> markers{kEos};
    if (opt.tools_enabled) markers.insert(markers.end(), std::begin(kOpeners), std::end(kOpeners));
    Hit hit = find_first(b, markers);
    if (hit.pos != std::string_view::npos) {
      if (hit.marker == kEos) {
        emit(ParseEventKind::content, ws_hold + std::string(b.substr(0, hit.pos)));
        ws_hold.clear();
        consume(hit.pos + hit.marker.size());
        msg.saw_eos = true;
        state = ParseState::done;
        return true;
      }
      content_text(b.substr(0, hit.pos));
      consume(hit.pos);
      const bool blank_line = ws_hold.size() >= 2 && ws_hold.compare(ws_hold.size() - 2, 2, "\n\n") == 0;
      msg.raw_dsml = blank_line ? "\n\n" : "";
      ws_hold.clear();
      dsml_family = hit.marker != kOpeners[2];
      state = ParseState::tool_block;
      sub = Sub::block_between;
      consume(hit.marker.size());
      return true;
    }
    const size_t n = utf8_safe_len(b.substr(0, b.size() - partial_suffix(b, markers)));
    content_text(b.substr(0, n));
    consume(n);
    return false;
  }

  // Skips whitespace; false if the buffer is then empty.
  bool skip_ws() {
    size_t i = 0;
    while (i < buf.size() && is_ws(buf[i])) ++i;
    consume(i);
    return !buf.empty();
  }

  // Reads the next tag of this block; false = need more input (or failed).
  bool next_tag(Tag& tag) {
    if (!skip_ws()) return false;
    if (buf[0] != '<') {
      // The offset (not the text, which depends on how much has arrived) keeps the message the
      // same for every way of splitting the input.
      fail("unexpected text in tool block at byte " + std::to_string(msg.raw_dsml.size()));
      return false;
    }
    std::string why;
    switch (read_tag(buf, tag, why)) {
      case TagRead::need_more: return false;
      case TagRead::bad: fail(why); return false;
      case TagRead::ok: break;
    }
    if (tag.dsml_family != dsml_family) {
      fail("tag <" + tag.name + "> does not match the block's DSML prefix");
      return false;
    }
    return true;
  }

  std::string attr_value(const std::string& raw) const {
    return opt.flavor == Flavor::ds4 ? decode_entities(raw) : raw;
  }

  bool step_block_between() {
    Tag tag;
    if (!next_tag(tag)) return false;
    if (tag.closing && tag.name == "tool_calls") {
      consume(tag.length);
      if (msg.calls.empty()) {
        fail("tool block without any invoke");
        return false;
      }
      state = ParseState::done;
      return true;
    }
    if (tag.closing || tag.name != "invoke") {
      fail("expected <invoke> or </tool_calls>, got <" + std::string(tag.closing ? "/" : "") +
           tag.name + ">");
      return false;
    }
    const std::string* name = tag.attr("name");
    if (!name || name->empty()) {
      fail("invoke without a name");
      return false;
    }
    consume(tag.length);
    cur = ParsedCall{};
    cur.name = attr_value(*name);
    ParseEvent begin;
    begin.kind = ParseEventKind::call_begin;
    begin.index = msg.calls.size();
    begin.text = cur.name;
    out->push_back(std::move(begin));
    emit(ParseEventKind::call_args, "{");
    frames.assign(1, Frame{});
    sub = Sub::object_between;
    return true;
  }

  bool step_object_between() {
    Tag tag;
    if (!next_tag(tag)) return false;
    Frame& frame = frames.back();
    const char* expected_close = frame.is_invoke ? "invoke" : "parameter";
    if (tag.closing && tag.name == expected_close) {
      consume(tag.length);
      emit(ParseEventKind::call_args, "}");
      const bool was_invoke = frame.is_invoke;
      frames.pop_back();
      if (was_invoke) {
        ParseEvent end;
        end.kind = ParseEventKind::call_end;
        end.index = msg.calls.size();
        end.call = cur;
        out->push_back(std::move(end));
        msg.calls.push_back(std::move(cur));
        cur = ParsedCall{};
        sub = Sub::block_between;
      }
      return true;
    }
    if (tag.closing || tag.name != "parameter") {
      fail("expected <parameter> or </" + std::string(expected_close) + ">, got <" +
           std::string(tag.closing ? "/" : "") + tag.name + ">");
      return false;
    }
    const std::string* key_raw = tag.attr("name");
    if (!key_raw) {
      fail("parameter without a name");
      return false;
    }
    const std::string key = attr_value(*key_raw);
    if (!frame.keys.insert(key).second) {
      fail("duplicate parameter '" + key + "'");
      return false;
    }
    const std::string* str = tag.attr("string");
    if (str && *str != "true" && *str != "false") {
      fail("parameter '" + key + "' has string=\"" + *str + "\" (want true or false)");
      return false;
    }
    consume(tag.length);
    emit(ParseEventKind::call_args,
         std::string(frame.count ? ", " : "") + json_text::quote(key, json_text::EscapeStyle::ds4) + ": ");
    ++frame.count;
    if (!str) {
      sub = Sub::param_peek;
    } else if (*str == "true") {
      emit(ParseEventKind::call_args, "\"");
      sub = Sub::param_string;
    } else {
      sub = Sub::param_json;
      json_scanned = 0;
    }
    return true;
  }

  // string attribute missing: nested <parameter> tags make an object, anything else a string.
  bool step_param_peek() {
    size_t i = 0;
    while (i < buf.size() && is_ws(buf[i])) ++i;
    if (i == buf.size()) return false;
    const std::string_view rest = std::string_view(buf).substr(i);
    const std::string_view opens[] = {"<｜DSML｜parameter", "<DSML｜parameter", "<parameter"};
    bool nested = false;
    for (std::string_view o : opens) {
      if (rest.size() < o.size() + 1) {
        if (o.substr(0, rest.size()) == rest) return false;  // could still become a tag
        continue;
      }
      if (rest.substr(0, o.size()) == o && is_ws(rest[o.size()])) nested = true;
    }
    if (nested) {
      consume(i);
      emit(ParseEventKind::call_args, "{");
      Frame f;
      f.is_invoke = false;
      frames.push_back(std::move(f));
      sub = Sub::object_between;
    } else {
      emit(ParseEventKind::call_args, "\"");
      sub = Sub::param_string;
    }
    return true;
  }

  std::string string_piece(std::string_view raw) {
    const std::string text = opt.flavor == Flavor::ds4 ? decode_entities(raw) : std::string(raw);
    return json_escape(text, opt.flavor);
  }

  bool step_param_string() {
    const std::string_view b = buf;
    std::vector<std::string_view> markers(close_params().begin(), close_params().end());
    markers.push_back(kEos);
    Hit hit = find_first(b, markers);
    if (hit.pos != std::string_view::npos) {
      if (hit.marker == kEos) {
        fail("end of sequence inside a parameter value (unterminated tool call)");
        return false;
      }
      emit(ParseEventKind::call_args, string_piece(b.substr(0, hit.pos)) + "\"");
      consume(hit.pos + hit.marker.size());
      sub = Sub::object_between;
      return true;
    }
    size_t n = utf8_safe_len(b.substr(0, b.size() - partial_suffix(b, markers)));
    if (opt.flavor == Flavor::ds4) n -= partial_entity(b.substr(0, n));
    emit(ParseEventKind::call_args, string_piece(b.substr(0, n)));
    consume(n);
    return false;
  }

  bool step_param_json() {
    const std::string_view b = buf;
    std::vector<std::string_view> markers(close_params().begin(), close_params().end());
    markers.push_back(kEos);
    Hit hit = find_first(b, markers, json_scanned);
    if (hit.pos == std::string_view::npos) {
      // A marker may straddle the end of what has arrived: rescan its length next time.
      json_scanned = b.size() > kEos.size() ? b.size() - kEos.size() : 0;
      return false;
    }
    if (hit.marker == kEos) {
      fail("end of sequence inside a parameter value (unterminated tool call)");
      return false;
    }
    const std::string_view raw = b.substr(0, hit.pos);
    std::string value;
    size_t s = 0, e = raw.size();
    while (s < e && is_ws(raw[s])) ++s;
    while (e > s && is_ws(raw[e - 1])) --e;
    const std::string_view trimmed = raw.substr(s, e - s);
    if (trimmed.empty()) {
      value = "null";
    } else if (json_text::is_valid(trimmed)) {
      value = opt.flavor == Flavor::ds4 ? json_text::minify(trimmed) : std::string(trimmed);
    } else {
      // Not JSON despite string="false": keep the model's text as a string rather than hand
      // the client invalid arguments.
      value = json_text::quote(trimmed, json_text::EscapeStyle::ds4);
    }
    emit(ParseEventKind::call_args, value);
    consume(hit.pos + hit.marker.size());
    sub = Sub::object_between;
    return true;
  }

  bool step() {
    switch (state) {
      case ParseState::reasoning: return step_reasoning();
      case ParseState::content: return step_content();
      case ParseState::tool_block:
        switch (sub) {
          case Sub::block_between: return step_block_between();
          case Sub::object_between: return step_object_between();
          case Sub::param_peek: return step_param_peek();
          case Sub::param_string: return step_param_string();
          case Sub::param_json: return step_param_json();
        }
        return false;
      case ParseState::done:
      case ParseState::error:
        buf.clear();
        return false;
    }
    return false;
  }

  void feed(std::string_view piece, std::vector<ParseEvent>& events) {
    out = &events;
    out_start = events.size();
    msg.raw_text.append(piece);
    if (state == ParseState::done || state == ParseState::error) return;
    buf.append(piece);
    while (!buf.empty() && step()) {
    }
  }

  ParsedMessage finish(std::vector<ParseEvent>& events) {
    out = &events;
    out_start = events.size();
    switch (state) {
      case ParseState::reasoning:
        emit(ParseEventKind::reasoning, buf);
        break;
      case ParseState::content:
        emit(ParseEventKind::content, ws_hold + buf);
        ws_hold.clear();
        break;
      case ParseState::tool_block:
        fail("unterminated tool call");
        break;
      case ParseState::done:
      case ParseState::error:
        break;
    }
    buf.clear();
    if (state != ParseState::error) state = ParseState::done;
    ParsedMessage result = msg;
    result.status = err;
    // EOS after a closed tool block is not parsed (state done) but still counts as seen.
    if (result.raw_text.find(kEos) != std::string::npos) result.saw_eos = true;
    std::string_view after = result.raw_text;
    if (opt.thinking) {
      const size_t close = after.find(kThinkClose);
      after = close == std::string_view::npos ? std::string_view() : after.substr(close + kThinkClose.size());
    }
    result.fallback_content = std::string(after.substr(0, after.find(kEos)));
    if (!err.ok()) result.raw_dsml.clear();
    return result;
  }
};

DsmlParser::DsmlParser(ParserOptions options) : impl_(std::make_unique<Impl>(options)) {}
DsmlParser::~DsmlParser() = default;
DsmlParser::DsmlParser(DsmlParser&&) noexcept = default;
DsmlParser& DsmlParser::operator=(DsmlParser&&) noexcept = default;

void DsmlParser::feed(std::string_view piece, std::vector<ParseEvent>& out) {
  impl_->feed(piece, out);
}
ParsedMessage DsmlParser::finish(std::vector<ParseEvent>& out) { return impl_->finish(out); }
ParseState DsmlParser::state() const { return impl_->state; }
const Status& DsmlParser::error() const { return impl_->err; }

ParsedMessage parse_output(std::string_view text, const ParserOptions& options) {
  DsmlParser parser(options);
  std::vector<ParseEvent> events;
  parser.feed(text, events);
  return parser.finish(events);
}

}  // namespace ds4::chat
