// value.cpp — gguf::Value: typed accessors, constructors, equality and display text.
//
// Storage convention (shared by reader and writer): unsigned integer types hold uint64_t, signed
// ones int64_t, f32/f64 hold double (an f32 widened exactly), BOOL holds bool, STRING a
// std::string, ARRAY a non-null shared_ptr<Array>. Nothing here touches files.
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "gguf/gguf.h"

namespace ds4::gguf {

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::u8: return "u8";
    case ValueType::i8: return "i8";
    case ValueType::u16: return "u16";
    case ValueType::i16: return "i16";
    case ValueType::u32: return "u32";
    case ValueType::i32: return "i32";
    case ValueType::f32: return "f32";
    case ValueType::boolean: return "bool";
    case ValueType::string: return "string";
    case ValueType::array: return "array";
    case ValueType::u64: return "u64";
    case ValueType::i64: return "i64";
    case ValueType::f64: return "f64";
  }
  return "unknown";
}

namespace {

bool is_unsigned(ValueType t) {
  return t == ValueType::u8 || t == ValueType::u16 || t == ValueType::u32 || t == ValueType::u64;
}
bool is_signed(ValueType t) {
  return t == ValueType::i8 || t == ValueType::i16 || t == ValueType::i32 || t == ValueType::i64;
}
bool is_float(ValueType t) { return t == ValueType::f32 || t == ValueType::f64; }

// The integer held by an integer-typed Value, widened to a sign flag + magnitude so unsigned and
// signed values compare without overflow. Returns false for non-integer alternatives.
struct IntView {
  bool negative = false;
  uint64_t magnitude = 0;
};
bool int_view(const Value& val, IntView* out) {
  if (const auto* u = std::get_if<uint64_t>(&val.v)) {
    *out = {false, *u};
    return true;
  }
  if (const auto* i = std::get_if<int64_t>(&val.v)) {
    if (*i < 0) {
      *out = {true, uint64_t{0} - static_cast<uint64_t>(*i)};
    } else {
      *out = {false, static_cast<uint64_t>(*i)};
    }
    return true;
  }
  return false;
}

void append_escaped(std::string& out, const std::string& s, size_t max_bytes) {
  out += '"';
  size_t n = std::min(s.size(), max_bytes);
  for (size_t i = 0; i < n; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
  if (n < s.size()) out += "... (" + std::to_string(s.size()) + " bytes)";
}

std::string float_text(double d, bool single) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", single ? 9 : 17, d);
  return buf;
}

}  // namespace

std::optional<uint64_t> Value::as_u64() const {
  if (!is_unsigned(type) && !is_signed(type)) return std::nullopt;
  IntView iv;
  if (!int_view(*this, &iv) || iv.negative) return std::nullopt;
  return iv.magnitude;
}

std::optional<int64_t> Value::as_i64() const {
  if (!is_unsigned(type) && !is_signed(type)) return std::nullopt;
  IntView iv;
  if (!int_view(*this, &iv)) return std::nullopt;
  if (!iv.negative) {
    if (iv.magnitude > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(iv.magnitude);
  }
  if (iv.magnitude > uint64_t{1} << 63) return std::nullopt;
  // -2^63 has no positive int64 counterpart; build it without signed overflow.
  if (iv.magnitude == uint64_t{1} << 63) return std::numeric_limits<int64_t>::min();
  return -static_cast<int64_t>(iv.magnitude);
}

std::optional<double> Value::as_f64() const {
  if (is_float(type)) {
    if (const auto* d = std::get_if<double>(&v)) return *d;
    return std::nullopt;
  }
  if (!is_unsigned(type) && !is_signed(type)) return std::nullopt;
  IntView iv;
  if (!int_view(*this, &iv)) return std::nullopt;
  // Exact only when the magnitude survives a round trip through double (|x| <= 2^53 always does).
  double d = static_cast<double>(iv.magnitude);
  if (d >= 18446744073709551616.0) return std::nullopt;  // 2^64: rounding went up, not exact
  if (static_cast<uint64_t>(d) != iv.magnitude) return std::nullopt;
  return iv.negative ? -d : d;
}

std::optional<bool> Value::as_bool() const {
  if (type != ValueType::boolean) return std::nullopt;
  if (const auto* b = std::get_if<bool>(&v)) return *b;
  return std::nullopt;
}

const std::string* Value::as_string() const {
  if (type != ValueType::string) return nullptr;
  return std::get_if<std::string>(&v);
}

const Array* Value::as_array() const {
  if (type != ValueType::array) return nullptr;
  const auto* p = std::get_if<std::shared_ptr<Array>>(&v);
  return p ? p->get() : nullptr;
}

std::string Value::to_display(size_t max_items) const {
  std::string out;
  switch (type) {
    case ValueType::u8: case ValueType::u16: case ValueType::u32: case ValueType::u64:
    case ValueType::i8: case ValueType::i16: case ValueType::i32: case ValueType::i64: {
      IntView iv;
      if (!int_view(*this, &iv)) return "<invalid>";
      if (iv.negative) out += '-';
      out += std::to_string(iv.magnitude);
      return out;
    }
    case ValueType::f32:
    case ValueType::f64: {
      const auto* d = std::get_if<double>(&v);
      return d ? float_text(*d, type == ValueType::f32) : "<invalid>";
    }
    case ValueType::boolean: {
      const auto* b = std::get_if<bool>(&v);
      return b ? (*b ? "true" : "false") : "<invalid>";
    }
    case ValueType::string: {
      const auto* s = std::get_if<std::string>(&v);
      if (!s) return "<invalid>";
      append_escaped(out, *s, 256);
      return out;
    }
    case ValueType::array: {
      const Array* a = as_array();
      if (!a) return "<invalid>";
      out += value_type_name(a->elem_type);
      out += '[';
      out += std::to_string(a->items.size());
      out += "] [";
      size_t shown = std::min(a->items.size(), max_items);
      // Nested arrays multiply (max_items^depth), so the text is also capped in length.
      constexpr size_t kMaxChars = 2048;
      size_t i = 0;
      for (; i < shown && out.size() < kMaxChars; ++i) {
        if (i) out += ", ";
        out += a->items[i].to_display(max_items);
      }
      if (i < a->items.size()) out += i ? ", ..." : "...";
      out += ']';
      return out;
    }
  }
  return "<invalid>";
}

namespace {
Value make(ValueType t, decltype(Value::v) v) {
  Value out;
  out.type = t;
  out.v = std::move(v);
  return out;
}
}  // namespace

Value Value::of_u8(uint8_t x) { return make(ValueType::u8, uint64_t{x}); }
Value Value::of_i8(int8_t x) { return make(ValueType::i8, int64_t{x}); }
Value Value::of_u16(uint16_t x) { return make(ValueType::u16, uint64_t{x}); }
Value Value::of_i16(int16_t x) { return make(ValueType::i16, int64_t{x}); }
Value Value::of_u32(uint32_t x) { return make(ValueType::u32, uint64_t{x}); }
Value Value::of_i32(int32_t x) { return make(ValueType::i32, int64_t{x}); }
Value Value::of_u64(uint64_t x) { return make(ValueType::u64, x); }
Value Value::of_i64(int64_t x) { return make(ValueType::i64, x); }
Value Value::of_f32(float x) { return make(ValueType::f32, static_cast<double>(x)); }
Value Value::of_f64(double x) { return make(ValueType::f64, x); }
Value Value::of_bool(bool x) { return make(ValueType::boolean, x); }
Value Value::of_string(std::string x) { return make(ValueType::string, std::move(x)); }
Value Value::of_array(ValueType elem_type, std::vector<Value> items) {
  auto a = std::make_shared<Array>();
  a->elem_type = elem_type;
  a->items = std::move(items);
  return make(ValueType::array, std::move(a));
}

uint64_t TensorInfo::n_elements() const {
  // The reader has already rejected products that overflow; a hand-built TensorInfo saturates.
  uint64_t n = 1;
  for (uint64_t d : ne) {
    if (d != 0 && n > std::numeric_limits<uint64_t>::max() / d) return std::numeric_limits<uint64_t>::max();
    n *= d;
  }
  return n;
}

bool operator==(const Value& a, const Value& b) {
  if (a.type != b.type) return false;
  if (is_float(a.type)) {
    const auto* x = std::get_if<double>(&a.v);
    const auto* y = std::get_if<double>(&b.v);
    if (!x || !y) return x == y;
    return std::memcmp(x, y, sizeof(double)) == 0;
  }
  if (is_unsigned(a.type) || is_signed(a.type)) {
    IntView x, y;
    if (!int_view(a, &x) || !int_view(b, &y)) return false;
    return x.negative == y.negative && x.magnitude == y.magnitude;
  }
  if (a.type == ValueType::array) {
    const Array* x = a.as_array();
    const Array* y = b.as_array();
    if (!x || !y) return x == y;
    if (x->elem_type != y->elem_type || x->items.size() != y->items.size()) return false;
    for (size_t i = 0; i < x->items.size(); ++i)
      if (!(x->items[i] == y->items[i])) return false;
    return true;
  }
  return a.v == b.v;
}

}  // namespace ds4::gguf
