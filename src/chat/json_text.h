// json_text.h — byte-level JSON helpers the renderers need and nlohmann::json cannot give:
// the raw byte span of a value inside a request (ds4 emits client schema bytes verbatim),
// minification that keeps every byte outside whitespace, Python json.dumps(ensure_ascii=False)
// re-serialisation, and the two string-escaping styles (Python vs ds4).
// Not a general JSON library: values are validated by a small RFC 8259 scanner and decoded with
// nlohmann::json only where decoding is needed.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ds4::chat::json_text {

// Length of the JSON value starting at text[pos] (after optional leading whitespace is NOT
// skipped: text[pos] must be the value's first byte), or nullopt if it is not a valid value.
// Depth is limited (256) so hostile nesting cannot exhaust the stack.
std::optional<size_t> scan_value(std::string_view text, size_t pos);

// Skips JSON whitespace from pos.
size_t skip_ws(std::string_view text, size_t pos);

// text (whole, surrounding whitespace allowed) is exactly one valid JSON value.
bool is_valid(std::string_view text);

struct Member {
  std::string key;        // decoded key
  std::string_view raw;   // the value's raw bytes
};

// If text (surrounding whitespace allowed) is a JSON object, its top-level members in order;
// otherwise nullopt.
std::optional<std::vector<Member>> object_members(std::string_view text);

// Raw bytes of member `key` of the object `text` (last occurrence, like nlohmann), or nullopt.
std::optional<std::string_view> member_raw(std::string_view text, std::string_view key);

// Raw bytes of each element of the array `text`, or nullopt if not an array.
std::optional<std::vector<std::string_view>> array_elements(std::string_view text);

// Decodes a JSON string token (with quotes); nullopt if raw is not a string.
std::optional<std::string> decode_string(std::string_view raw);

// Deletes whitespace outside strings; every other byte kept (ds4 "minify").
std::string minify(std::string_view text);

// Python json.dumps(value, ensure_ascii=False): ", " and ": " separators, insertion order.
std::string python_dumps(const nlohmann::ordered_json& value);

enum class EscapeStyle {
  python,  // ", \\, \n \r \t \b \f, other controls \u00xx
  ds4,     // ", \\, \n \r \t, other controls \u00XX-style (lower-case hex)
};
// A JSON string literal (with quotes) for UTF-8 text. Invalid UTF-8 bytes become U+FFFD so the
// result is always valid JSON.
std::string quote(std::string_view text, EscapeStyle style);

}  // namespace ds4::chat::json_text
