// layout.cpp — validate and encode the part of a GGUF v3 file that precedes the tensor data.
//
// Encoding mirrors parse.cpp: header (magic, version 3, counts), KV records in insertion order,
// tensor-info records in add order, zero padding to the alignment. Payload offsets follow ds4's
// quantizer: rel_offset(i+1) = rel_offset(i) + align_up(size(i), alignment) (FORMATS.md §1.6).
#include <cstring>
#include <limits>
#include <string>
#include <unordered_set>

#include "gguf/layout.h"
#include "gguf/parse.h"

namespace ds4::gguf::detail {
namespace {

Status arg_error(const std::string& what) { return invalid_argument("gguf writer: " + what); }

class Encoder {
 public:
  explicit Encoder(std::vector<uint8_t>* out) : out_(out) {}
  template <typename T>
  void put(T x) {
    uint8_t b[sizeof(T)];
    std::memcpy(b, &x, sizeof(T));  // little-endian hosts only
    out_->insert(out_->end(), b, b + sizeof(T));
  }
  void put_string(std::string_view s) {
    put<uint64_t>(s.size());
    out_->insert(out_->end(), s.begin(), s.end());
  }

 private:
  std::vector<uint8_t>* out_;
};

// Checks that `v` holds what its type tag says, in range, and nests at most 8 arrays deep.
Status check_value(const Value& v, int depth, const std::string& key) {
  auto int_in = [&](int64_t lo, uint64_t hi) -> Status {
    bool ok = false;
    if (const auto* u = std::get_if<uint64_t>(&v.v)) ok = *u <= hi;
    if (const auto* i = std::get_if<int64_t>(&v.v)) ok = *i >= lo && (*i < 0 || static_cast<uint64_t>(*i) <= hi);
    if (!ok) return arg_error("key '" + key + "': value " + v.to_display() + " is not a valid " + value_type_name(v.type));
    return Status::Ok();
  };
  switch (v.type) {
    case ValueType::u8: return int_in(0, 0xff);
    case ValueType::u16: return int_in(0, 0xffff);
    case ValueType::u32: return int_in(0, 0xffffffffu);
    case ValueType::u64: return int_in(0, std::numeric_limits<uint64_t>::max());
    case ValueType::i8: return int_in(-128, 127);
    case ValueType::i16: return int_in(-32768, 32767);
    case ValueType::i32: return int_in(std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max());
    case ValueType::i64:
      return int_in(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
    case ValueType::f32:
    case ValueType::f64:
      if (!std::holds_alternative<double>(v.v)) return arg_error("key '" + key + "': float value holds no double");
      return Status::Ok();
    case ValueType::boolean:
      if (!std::holds_alternative<bool>(v.v)) return arg_error("key '" + key + "': bool value holds no bool");
      return Status::Ok();
    case ValueType::string:
      if (!std::holds_alternative<std::string>(v.v)) return arg_error("key '" + key + "': string value holds no string");
      return Status::Ok();
    case ValueType::array: {
      const Array* a = v.as_array();
      if (!a) return arg_error("key '" + key + "': array value holds no array");
      if (depth + 1 > kMaxArrayDepth)
        return arg_error("key '" + key + "': arrays nested deeper than " + std::to_string(kMaxArrayDepth));
      if (static_cast<uint32_t>(a->elem_type) > static_cast<uint32_t>(ValueType::f64))
        return arg_error("key '" + key + "': unknown array element type");
      for (size_t i = 0; i < a->items.size(); ++i) {
        const Value& item = a->items[i];
        if (item.type != a->elem_type)
          return arg_error("key '" + key + "': array of " + value_type_name(a->elem_type) + " has a " +
                           value_type_name(item.type) + " at index " + std::to_string(i));
        DS4_RETURN_IF_ERROR(check_value(item, depth + 1, key));
      }
      return Status::Ok();
    }
  }
  return arg_error("key '" + key + "': unknown value type " + std::to_string(static_cast<uint32_t>(v.type)));
}

// Encodes a value already accepted by check_value (no type tag: the caller writes it).
void put_value(Encoder& e, const Value& v) {
  auto u = [&]() -> uint64_t {
    if (const auto* x = std::get_if<uint64_t>(&v.v)) return *x;
    return static_cast<uint64_t>(std::get<int64_t>(v.v));  // two's complement truncation below
  };
  switch (v.type) {
    case ValueType::u8: case ValueType::i8: e.put<uint8_t>(static_cast<uint8_t>(u())); return;
    case ValueType::u16: case ValueType::i16: e.put<uint16_t>(static_cast<uint16_t>(u())); return;
    case ValueType::u32: case ValueType::i32: e.put<uint32_t>(static_cast<uint32_t>(u())); return;
    case ValueType::u64: case ValueType::i64: e.put<uint64_t>(u()); return;
    case ValueType::f32: e.put<float>(static_cast<float>(std::get<double>(v.v))); return;
    case ValueType::f64: e.put<double>(std::get<double>(v.v)); return;
    case ValueType::boolean: e.put<uint8_t>(std::get<bool>(v.v) ? 1 : 0); return;
    case ValueType::string: e.put_string(std::get<std::string>(v.v)); return;
    case ValueType::array: {
      const Array* a = v.as_array();
      e.put<uint32_t>(static_cast<uint32_t>(a->elem_type));
      e.put<uint64_t>(a->items.size());
      for (const auto& item : a->items) put_value(e, item);
      return;
    }
  }
}

// Bytes of one tensor, validating the spec the way parse.cpp validates a tensor-info record.
Status tensor_bytes(const TensorSpec& t, uint64_t* out) {
  const std::string qn = "tensor '" + t.name + "'";
  if (t.ne.empty() || t.ne.size() > kMaxDims)
    return arg_error(qn + ": n_dims " + std::to_string(t.ne.size()) + " is outside 1.." + std::to_string(kMaxDims));
  auto traits = type_traits(static_cast<uint32_t>(t.type));
  if (!traits) return arg_error(qn + ": unknown ggml type " + std::to_string(static_cast<uint32_t>(t.type)));
  constexpr uint64_t kMaxI64 = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  uint64_t n = 1;
  for (uint64_t d : t.ne) {
    if (d > kMaxI64 || (d != 0 && n > kMaxI64 / d)) return arg_error(qn + ": element count overflows 2^63-1");
    n *= d;
  }
  if (t.ne[0] % traits->block_elems != 0)
    return arg_error(qn + ": ne[0] = " + std::to_string(t.ne[0]) + " is not a multiple of the " +
                     std::string(traits->name) + " block size " + std::to_string(traits->block_elems));
  auto b = type_bytes(t.type, n);
  if (!b) return arg_error(qn + ": byte size overflows");
  *out = *b;
  return Status::Ok();
}

}  // namespace

Status build_layout(const std::vector<KeyValue>& metadata, const std::vector<TensorSpec>& tensors,
                    uint64_t alignment, Layout* out) {
  if (alignment == 0 || alignment % 8 != 0 || alignment > std::numeric_limits<uint32_t>::max())
    return arg_error("alignment " + std::to_string(alignment) + " must be a non-zero multiple of 8 below 2^32");
  out->alignment = alignment;

  // general.alignment: the reader honours the first record when it is a non-zero UINT32.
  bool have_alignment_key = false;
  for (const auto& kv : metadata) {
    if (kv.key != "general.alignment") continue;
    auto a = kv.value.as_u64();
    if (kv.value.type != ValueType::u32 || !a || *a != alignment)
      return arg_error("metadata general.alignment = " + kv.value.to_display() + " (" + value_type_name(kv.value.type) +
                       ") disagrees with WriteOptions::alignment " + std::to_string(alignment) +
                       " (it must be a u32 of the same value)");
    have_alignment_key = true;
    break;
  }
  for (const auto& kv : metadata) DS4_RETURN_IF_ERROR(check_value(kv.value, 0, kv.key));

  std::unordered_set<std::string_view> names;
  names.reserve(tensors.size());
  out->sizes.resize(tensors.size());
  out->offsets.resize(tensors.size());
  uint64_t rel = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!names.insert(tensors[i].name).second) return arg_error("duplicate tensor name '" + tensors[i].name + "'");
    DS4_RETURN_IF_ERROR(tensor_bytes(tensors[i], &out->sizes[i]));
    out->offsets[i] = rel;
    uint64_t padded = align_up(out->sizes[i], alignment);
    if (padded < out->sizes[i] || rel > std::numeric_limits<uint64_t>::max() / 2 - padded)
      return arg_error("total tensor data size overflows");
    rel += padded;
  }

  std::vector<uint8_t>& h = out->head;
  h.clear();
  Encoder e(&h);
  e.put<uint32_t>(kMagic);
  e.put<uint32_t>(kVersion);
  e.put<uint64_t>(tensors.size());
  const bool add_alignment_key = !have_alignment_key && alignment != kDefaultAlignment;
  e.put<uint64_t>(metadata.size() + (add_alignment_key ? 1 : 0));
  for (const auto& kv : metadata) {
    e.put_string(kv.key);
    e.put<uint32_t>(static_cast<uint32_t>(kv.value.type));
    put_value(e, kv.value);
  }
  if (add_alignment_key) {
    e.put_string("general.alignment");
    e.put<uint32_t>(static_cast<uint32_t>(ValueType::u32));
    e.put<uint32_t>(static_cast<uint32_t>(alignment));
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorSpec& t = tensors[i];
    e.put_string(t.name);
    e.put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (uint64_t d : t.ne) e.put<uint64_t>(d);
    e.put<uint32_t>(static_cast<uint32_t>(t.type));
    e.put<uint64_t>(out->offsets[i]);
  }
  out->data_offset = align_up(h.size(), alignment);
  out->total_size = out->data_offset + rel;
  return Status::Ok();
}

}  // namespace ds4::gguf::detail
