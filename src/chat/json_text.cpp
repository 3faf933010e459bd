// json_text.cpp — see json_text.h. The scanner is iterative over containers only through
// recursion bounded by kMaxDepth; strings and numbers are checked byte by byte.
#include "chat/json_text.h"

#include <cstdio>

namespace ds4::chat::json_text {
namespace {

constexpr int kMaxDepth = 256;

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

std::optional<size_t> scan(std::string_view t, size_t p, int depth);
size_t utf8_len(std::string_view s, size_t i);

std::optional<size_t> scan_string(std::string_view t, size_t p) {
  size_t i = p + 1;
  while (i < t.size()) {
    const unsigned char c = static_cast<unsigned char>(t[i]);
    if (c == '"') return i + 1 - p;
    if (c < 0x20) return std::nullopt;
    if (c >= 0x80) {
      // Strings must be valid UTF-8 (RFC 8259 §8.1; nlohmann rejects anything else).
      const size_t n = utf8_len(t, i);
      if (n == 0) return std::nullopt;
      i += n;
      continue;
    }
    if (c == '\\') {
      if (i + 1 >= t.size()) return std::nullopt;
      const char e = t[i + 1];
      if (e == 'u') {
        if (i + 5 >= t.size()) return std::nullopt;
        for (size_t k = 2; k < 6; ++k)
          if (!is_hex(t[i + k])) return std::nullopt;
        i += 6;
        continue;
      }
      if (e != '"' && e != '\\' && e != '/' && e != 'b' && e != 'f' && e != 'n' && e != 'r' &&
          e != 't')
        return std::nullopt;
      i += 2;
      continue;
    }
    ++i;
  }
  return std::nullopt;
}

std::optional<size_t> scan_number(std::string_view t, size_t p) {
  size_t i = p;
  if (i < t.size() && t[i] == '-') ++i;
  if (i >= t.size()) return std::nullopt;
  if (t[i] == '0') {
    ++i;
  } else if (is_digit(t[i])) {
    while (i < t.size() && is_digit(t[i])) ++i;
  } else {
    return std::nullopt;
  }
  if (i < t.size() && t[i] == '.') {
    ++i;
    if (i >= t.size() || !is_digit(t[i])) return std::nullopt;
    while (i < t.size() && is_digit(t[i])) ++i;
  }
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    ++i;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
    if (i >= t.size() || !is_digit(t[i])) return std::nullopt;
    while (i < t.size() && is_digit(t[i])) ++i;
  }
  return i - p;
}

std::optional<size_t> scan_container(std::string_view t, size_t p, int depth, bool object) {
  if (depth >= kMaxDepth) return std::nullopt;
  const char close = object ? '}' : ']';
  size_t i = skip_ws(t, p + 1);
  if (i < t.size() && t[i] == close) return i + 1 - p;
  while (true) {
    if (object) {
      if (i >= t.size() || t[i] != '"') return std::nullopt;
      auto klen = scan_string(t, i);
      if (!klen) return std::nullopt;
      i = skip_ws(t, i + *klen);
      if (i >= t.size() || t[i] != ':') return std::nullopt;
      i = skip_ws(t, i + 1);
    }
    auto vlen = scan(t, i, depth + 1);
    if (!vlen) return std::nullopt;
    i = skip_ws(t, i + *vlen);
    if (i >= t.size()) return std::nullopt;
    if (t[i] == close) return i + 1 - p;
    if (t[i] != ',') return std::nullopt;
    i = skip_ws(t, i + 1);
  }
}

std::optional<size_t> scan(std::string_view t, size_t p, int depth) {
  if (p >= t.size()) return std::nullopt;
  switch (t[p]) {
    case '"': return scan_string(t, p);
    case '{': return scan_container(t, p, depth, true);
    case '[': return scan_container(t, p, depth, false);
    case 't': return t.substr(p, 4) == "true" ? std::optional<size_t>(4) : std::nullopt;
    case 'f': return t.substr(p, 5) == "false" ? std::optional<size_t>(5) : std::nullopt;
    case 'n': return t.substr(p, 4) == "null" ? std::optional<size_t>(4) : std::nullopt;
    default: return scan_number(t, p);
  }
}

// Length of the valid UTF-8 sequence at s[i], or 0 if invalid.
size_t utf8_len(std::string_view s, size_t i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return 1;
  size_t n;
  unsigned cp;
  if ((c & 0xE0) == 0xC0) { n = 2; cp = c & 0x1F; }
  else if ((c & 0xF0) == 0xE0) { n = 3; cp = c & 0x0F; }
  else if ((c & 0xF8) == 0xF0) { n = 4; cp = c & 0x07; }
  else return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const unsigned char cc = static_cast<unsigned char>(s[i + k]);
    if ((cc & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (cc & 0x3F);
  }
  if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
      cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
    return 0;
  return n;
}

void dump_python(const nlohmann::ordered_json& v, std::string& out) {
  using nlohmann::ordered_json;
  switch (v.type()) {
    case ordered_json::value_t::object: {
      out += '{';
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += ", ";
        first = false;
        out += quote(it.key(), EscapeStyle::python);
        out += ": ";
        dump_python(it.value(), out);
      }
      out += '}';
      return;
    }
    case ordered_json::value_t::array: {
      out += '[';
      bool first = true;
      for (const auto& e : v) {
        if (!first) out += ", ";
        first = false;
        dump_python(e, out);
      }
      out += ']';
      return;
    }
    case ordered_json::value_t::string:
      out += quote(v.get_ref<const std::string&>(), EscapeStyle::python);
      return;
    default:
      // Numbers, booleans, null: nlohmann prints floats in shortest round-trip form with the
      // same exponent thresholds as Python's repr (1e-06, 1e+16, 100.0).
      out += v.dump();
      return;
  }
}

}  // namespace

size_t skip_ws(std::string_view text, size_t pos) {
  while (pos < text.size() && is_ws(text[pos])) ++pos;
  return pos;
}

std::optional<size_t> scan_value(std::string_view text, size_t pos) { return scan(text, pos, 0); }

bool is_valid(std::string_view text) {
  const size_t p = skip_ws(text, 0);
  auto len = scan(text, p, 0);
  return len && skip_ws(text, p + *len) == text.size();
}

std::optional<std::string> decode_string(std::string_view raw) {
  if (raw.empty() || raw[0] != '"') return std::nullopt;
  auto len = scan_string(raw, 0);
  if (!len || *len != raw.size()) return std::nullopt;
  // Fast path: no escapes.
  if (raw.find('\\') == std::string_view::npos) return std::string(raw.substr(1, raw.size() - 2));
  auto parsed = nlohmann::json::parse(raw.begin(), raw.end(), nullptr, false);
  if (parsed.is_discarded() || !parsed.is_string()) {
    // nlohmann rejects lone surrogates ("\ud800"); keep the text rather than fail the request.
    return std::string(raw.substr(1, raw.size() - 2));
  }
  return parsed.get<std::string>();
}

std::optional<std::vector<Member>> object_members(std::string_view text) {
  size_t i = skip_ws(text, 0);
  if (i >= text.size() || text[i] != '{') return std::nullopt;
  auto total = scan(text, i, 0);
  if (!total || skip_ws(text, i + *total) != text.size()) return std::nullopt;
  std::vector<Member> members;
  i = skip_ws(text, i + 1);
  if (text[i] == '}') return members;
  while (true) {
    auto klen = scan_string(text, i);
    auto key = decode_string(text.substr(i, *klen));
    i = skip_ws(text, i + *klen);
    i = skip_ws(text, i + 1);  // ':'
    auto vlen = scan(text, i, 1);
    members.push_back({key.value_or(""), text.substr(i, *vlen)});
    i = skip_ws(text, i + *vlen);
    if (text[i] == '}') break;
    i = skip_ws(text, i + 1);  // ','
  }
  return members;
}

std::optional<std::string_view> member_raw(std::string_view text, std::string_view key) {
  auto members = object_members(text);
  if (!members) return std::nullopt;
  // Last occurrence wins, as in nlohmann::json, so raw bytes and parsed values agree.
  for (auto it = members->rbegin(); it != members->rend(); ++it)
    if (it->key == key) return it->raw;
  return std::nullopt;
}

std::optional<std::vector<std::string_view>> array_elements(std::string_view text) {
  size_t i = skip_ws(text, 0);
  if (i >= text.size() || text[i] != '[') return std::nullopt;
  auto total = scan(text, i, 0);
  if (!total || skip_ws(text, i + *total) != text.size()) return std::nullopt;
  std::vector<std::string_view> out;
  i = skip_ws(text, i + 1);
  if (text[i] == ']') return out;
  while (true) {
    auto vlen = scan(text, i, 1);
    out.push_back(text.substr(i, *vlen));
    i = skip_ws(text, i + *vlen);
    if (text[i] == ']') break;
    i = skip_ws(text, i + 1);
  }
  return out;
}

std::string minify(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) {
        out += text[++i];
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (is_ws(c)) continue;
    if (c == '"') in_string = true;
    out += c;
  }
  return out;
}

std::string python_dumps(const nlohmann::ordered_json& value) {
  std::string out;
  dump_python(value, out);
  return out;
}

std::string quote(std::string_view text, EscapeStyle style) {
  std::string out;
  out.reserve(text.size() + 2);
  out += '"';
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      const size_t n = utf8_len(text, i);
      if (n == 0) {
        out += "\xEF\xBF\xBD";  // U+FFFD for an invalid byte
        ++i;
      } else {
        out.append(text.substr(i, n));
        i += n;
      }
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b':
        if (style == EscapeStyle::python) { out += "\\b"; break; }
        [[fallthrough]];
      case '\f':
        if (style == EscapeStyle::python && c == '\f') { out += "\\f"; break; }
        [[fallthrough]];
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  out += '"';
  return out;
}

}  // namespace ds4::chat::json_text
