// parse.cpp — GGUF v3 header, metadata and tensor-directory parsing over an untrusted image.
//
// Hostile-input rules: every count is checked against the bytes that remain (times the smallest
// possible encoding of one item) before anything is reserved, every materialized value is charged
// against OpenOptions::max_metadata_bytes, array nesting stops at depth 8, and every tensor's
// bytes must lie inside the image. Deliberately not here: mmap, lookups (file.cpp).
#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>

#include "gguf/cursor.h"
#include "gguf/parse.h"

namespace ds4::gguf::detail {

const char* ggml_type_id_name(uint32_t id) {
  // ggml's numbering (FORMATS.md §2.1); names only, for messages about types we do not implement.
  static constexpr const char* kNames[] = {
      "f32",     "f16",     "q4_0",    "q4_1",   "q4_2",   "q4_3",   "q5_0",   "q5_1",
      "q8_0",    "q8_1",    "q2_K",    "q3_K",   "q4_K",   "q5_K",   "q6_K",   "q8_K",
      "iq2_xxs", "iq2_xs",  "iq3_xxs", "iq1_s",  "iq4_nl", "iq3_s",  "iq2_s",  "iq4_xs",
      "i8",      "i16",     "i32",     "i64",    "f64",    "iq1_m",  "bf16",   nullptr,
      nullptr,   nullptr,   "tq1_0",   "tq2_0",  nullptr,  nullptr,  nullptr,  "mxfp4"};
  if (id < sizeof(kNames) / sizeof(kNames[0])) return kNames[id];
  return nullptr;
}

namespace {

constexpr uint32_t kMaxValueType = static_cast<uint32_t>(ValueType::f64);
// Smallest encodings, used to bound counts before reserving: a KV record is key length (8) +
// type (4) + at least one value byte; a tensor-info record is name length (8) + n_dims (4) +
// one dim (8) + type (4) + offset (8).
constexpr uint64_t kMinKvBytes = 13;
constexpr uint64_t kMinTensorInfoBytes = 32;

std::string quoted(std::string_view s) {
  // Names in messages are cut short so a hostile 1 GB key does not become a 1 GB message.
  constexpr size_t kMax = 80;
  std::string out = "'";
  out.append(s.substr(0, kMax));
  if (s.size() > kMax) out += "...";
  out += "'";
  return out;
}

uint64_t fixed_size(ValueType t) {
  switch (t) {
    case ValueType::u8: case ValueType::i8: case ValueType::boolean: return 1;
    case ValueType::u16: case ValueType::i16: return 2;
    case ValueType::u32: case ValueType::i32: case ValueType::f32: return 4;
    case ValueType::u64: case ValueType::i64: case ValueType::f64: return 8;
    case ValueType::string: case ValueType::array: return 0;
  }
  return 0;
}

// Bytes of memory a materialized value can cost beyond its Value slot.
uint64_t string_heap_cost(uint64_t len) { return len > 15 ? len + 1 : 0; }

class MetadataParser {
 public:
  MetadataParser(Cursor& cur, uint64_t budget) : cur_(cur), budget_left_(budget), budget_(budget) {}

  Status charge(uint64_t bytes, uint64_t at) {
    if (bytes > budget_left_) [[unlikely]]
      return over_budget(at);
    budget_left_ -= bytes;
    return Status::Ok();
  }

  [[gnu::noinline]] Status over_budget(uint64_t at) const {
    return out_of_memory("gguf: offset " + std::to_string(at) + ": metadata needs more than " +
                         std::to_string(budget_) + " bytes of memory to materialize (OpenOptions::max_metadata_bytes)");
  }

  Status read_type(ValueType* out, std::string_view what, const std::string& key) {
    uint64_t at = cur_.pos();
    uint32_t raw = 0;
    DS4_RETURN_IF_ERROR(cur_.read(&raw, what));
    if (raw > kMaxValueType)
      return data_error(at, "key " + key + ": unknown " + std::string(what) + " " + std::to_string(raw));
    *out = static_cast<ValueType>(raw);
    return Status::Ok();
  }

  // `depth` = number of arrays enclosing this value (0 for a KV record's own value).
  Status read_value(ValueType t, int depth, const std::string& key, Value* out) {
    uint64_t at = cur_.pos();
    out->type = t;
    switch (t) {
      case ValueType::u8: return read_int<uint8_t, uint64_t>(out);
      case ValueType::u16: return read_int<uint16_t, uint64_t>(out);
      case ValueType::u32: return read_int<uint32_t, uint64_t>(out);
      case ValueType::u64: return read_int<uint64_t, uint64_t>(out);
      case ValueType::i8: return read_int<int8_t, int64_t>(out);
      case ValueType::i16: return read_int<int16_t, int64_t>(out);
      case ValueType::i32: return read_int<int32_t, int64_t>(out);
      case ValueType::i64: return read_int<int64_t, int64_t>(out);
      case ValueType::f32: {
        float f = 0;
        DS4_RETURN_IF_ERROR(cur_.read(&f, "f32 value"));
        out->v = static_cast<double>(f);
        return Status::Ok();
      }
      case ValueType::f64: {
        double d = 0;
        DS4_RETURN_IF_ERROR(cur_.read(&d, "f64 value"));
        out->v = d;
        return Status::Ok();
      }
      case ValueType::boolean: {
        uint8_t b = 0;
        DS4_RETURN_IF_ERROR(cur_.read(&b, "bool value"));
        if (b > 1) return data_error(at, "key " + key + ": bool value " + std::to_string(b) + " is not 0 or 1");
        out->v = b == 1;
        return Status::Ok();
      }
      case ValueType::string: {
        std::string_view s;
        DS4_RETURN_IF_ERROR(cur_.read_string(&s, "string value"));
        DS4_RETURN_IF_ERROR(charge(string_heap_cost(s.size()), at));
        out->v.emplace<std::string>(s);
        return Status::Ok();
      }
      case ValueType::array: return read_array(depth + 1, key, out);
    }
    return data_error(at, "key " + key + ": unknown value type");
  }

 private:
  template <typename Disk, typename Held>
  Status read_int(Value* out) {
    Disk x{};
    DS4_RETURN_IF_ERROR(cur_.read(&x, "integer value"));
    out->v = static_cast<Held>(x);
    return Status::Ok();
  }

  Status read_array(int level, const std::string& key, Value* out) {
    uint64_t at = cur_.pos();
    if (level > kMaxArrayDepth)
      return data_error(at, "key " + key + ": arrays nested deeper than " + std::to_string(kMaxArrayDepth));
    ValueType elem;
    DS4_RETURN_IF_ERROR(read_type(&elem, "array element type", key));
    uint64_t count = 0;
    uint64_t count_at = cur_.pos();
    DS4_RETURN_IF_ERROR(cur_.read(&count, "array count"));
    uint64_t min_elem = fixed_size(elem);
    if (elem == ValueType::string) min_elem = 8;
    if (elem == ValueType::array) min_elem = 12;  // u32 type + u64 count
    if (count > cur_.remaining() / min_elem) {
      return data_error(count_at, "key " + key + ": array of " + std::to_string(count) + " " +
                                      value_type_name(elem) + " values cannot fit in the " +
                                      std::to_string(cur_.remaining()) + " bytes that remain");
    }
    // The shared_ptr control block + Array, then one Value slot per element.
    DS4_RETURN_IF_ERROR(charge(sizeof(Array) + 32 + count * sizeof(Value), at));
    auto arr = std::make_shared<Array>();
    arr->elem_type = elem;
    arr->items.resize(static_cast<size_t>(count));
    if (elem == ValueType::string) {
      // Fast path for the tokenizer's vocab and merges (~130k strings each in the real files).
      for (auto& item : arr->items) {
        uint64_t s_at = cur_.pos();
        std::string_view s;
        DS4_RETURN_IF_ERROR(cur_.read_string(&s, "string value"));
        DS4_RETURN_IF_ERROR(charge(string_heap_cost(s.size()), s_at));
        item.type = ValueType::string;
        item.v.emplace<std::string>(s);
      }
    } else {
      for (auto& item : arr->items) DS4_RETURN_IF_ERROR(read_value(elem, level, key, &item));
    }
    out->v = std::move(arr);
    return Status::Ok();
  }

  Cursor& cur_;
  uint64_t budget_left_;
  uint64_t budget_;
};

Status parse_tensor_info(Cursor& cur, MetadataParser& mp, TensorInfo* t) {
  uint64_t at = cur.pos();
  std::string_view name;
  DS4_RETURN_IF_ERROR(cur.read_string(&name, "tensor name"));
  DS4_RETURN_IF_ERROR(mp.charge(string_heap_cost(name.size()), at));
  t->name.assign(name);
  const std::string qn = quoted(name);
  uint32_t n_dims = 0;
  uint64_t dims_at = cur.pos();
  DS4_RETURN_IF_ERROR(cur.read(&n_dims, "tensor n_dims"));
  if (n_dims < 1 || n_dims > kMaxDims)
    return data_error(dims_at, "tensor " + qn + ": n_dims " + std::to_string(n_dims) + " is outside 1.." +
                                   std::to_string(kMaxDims));
  t->ne.resize(n_dims);
  uint64_t n_elements = 1;
  bool overflow = false;
  for (uint32_t i = 0; i < n_dims; ++i) {
    uint64_t d_at = cur.pos();
    DS4_RETURN_IF_ERROR(cur.read(&t->ne[i], "tensor dimension"));
    // ggml holds dims and element counts as int64.
    constexpr uint64_t kMaxI64 = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    if (t->ne[i] > kMaxI64)
      return data_error(d_at, "tensor " + qn + ": ne[" + std::to_string(i) + "] = " + std::to_string(t->ne[i]) +
                                  " exceeds 2^63-1");
    if (t->ne[i] != 0 && n_elements > kMaxI64 / t->ne[i]) overflow = true;
    if (!overflow) n_elements *= t->ne[i];
  }
  if (overflow) return data_error(dims_at, "tensor " + qn + ": element count overflows 2^63-1");
  uint64_t type_at = cur.pos();
  DS4_RETURN_IF_ERROR(cur.read(&t->type_id, "tensor type"));
  auto traits = type_traits(t->type_id);
  if (!traits) {
    const char* known = ggml_type_id_name(t->type_id);
    return unsupported("gguf: offset " + std::to_string(type_at) + ": tensor " + qn + " has ggml type " +
                       std::to_string(t->type_id) + (known ? std::string(" (") + known + ")" : std::string()) +
                       ", which this build does not support");
  }
  t->type = traits->type;
  if (t->ne[0] % traits->block_elems != 0) {
    return data_error(dims_at, "tensor " + qn + ": ne[0] = " + std::to_string(t->ne[0]) +
                                   " is not a multiple of the " + std::string(traits->name) + " block size " +
                                   std::to_string(traits->block_elems));
  }
  auto bytes = type_bytes(t->type, n_elements);
  if (!bytes) return data_error(dims_at, "tensor " + qn + ": byte size overflows");
  t->n_bytes = *bytes;
  DS4_RETURN_IF_ERROR(cur.read(&t->offset, "tensor data offset"));
  return Status::Ok();
}

}  // namespace

Status parse_image(const uint8_t* base, uint64_t size, const OpenOptions& opts, ParsedImage* out) {
  Cursor cur(base, size);
  uint32_t magic = 0;
  DS4_RETURN_IF_ERROR(cur.read(&magic, "magic"));
  if (magic != kMagic) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "bad magic %02x %02x %02x %02x (expected \"GGUF\")", base[0], base[1], base[2],
                  base[3]);
    return data_error(0, buf);
  }
  DS4_RETURN_IF_ERROR(cur.read(&out->version, "version"));
  if (out->version != kVersion) {
    std::string msg = "gguf: offset 4: GGUF version " + std::to_string(out->version) + " is not supported (only v3)";
    if (__builtin_bswap32(out->version) == kVersion) msg += "; this looks like a big-endian file";
    return unsupported(msg);
  }
  uint64_t n_tensors = 0, n_kv = 0;
  DS4_RETURN_IF_ERROR(cur.read(&n_tensors, "tensor count"));
  DS4_RETURN_IF_ERROR(cur.read(&n_kv, "metadata count"));
  if (n_tensors > cur.remaining() / kMinTensorInfoBytes)
    return data_error(8, "tensor count " + std::to_string(n_tensors) + " cannot fit in the " +
                             std::to_string(cur.remaining()) + " bytes after the header");
  if (n_kv > (cur.remaining() - n_tensors * kMinTensorInfoBytes) / kMinKvBytes)
    return data_error(16, "metadata count " + std::to_string(n_kv) + " cannot fit in the " +
                              std::to_string(cur.remaining()) + " bytes after the header");

  MetadataParser mp(cur, opts.max_metadata_bytes);
  DS4_RETURN_IF_ERROR(mp.charge(n_kv * sizeof(KeyValue) + n_tensors * sizeof(TensorInfo), 16));
  out->metadata.resize(static_cast<size_t>(n_kv));
  for (auto& kv : out->metadata) {
    uint64_t at = cur.pos();
    std::string_view key;
    DS4_RETURN_IF_ERROR(cur.read_string(&key, "metadata key"));
    DS4_RETURN_IF_ERROR(mp.charge(string_heap_cost(key.size()), at));
    kv.key.assign(key);
    const std::string qk = quoted(key);
    ValueType t;
    DS4_RETURN_IF_ERROR(mp.read_type(&t, "value type", qk));
    DS4_RETURN_IF_ERROR(mp.read_value(t, 0, qk, &kv.value));
  }

  // Bound the tensor count again now that the exact bytes left are known.
  if (n_tensors > cur.remaining() / kMinTensorInfoBytes)
    return data_error(cur.pos(), "tensor count " + std::to_string(n_tensors) + " cannot fit in the " +
                                     std::to_string(cur.remaining()) + " bytes after the metadata");
  out->tensors.resize(static_cast<size_t>(n_tensors));
  std::vector<uint64_t> info_at(static_cast<size_t>(n_tensors));
  for (size_t i = 0; i < out->tensors.size(); ++i) {
    info_at[i] = cur.pos();
    DS4_RETURN_IF_ERROR(parse_tensor_info(cur, mp, &out->tensors[i]));
  }

  out->key_index.reserve(out->metadata.size());
  for (size_t i = 0; i < out->metadata.size(); ++i)
    out->key_index.emplace(out->metadata[i].key, static_cast<uint32_t>(i));  // emplace keeps the first
  out->tensor_index.reserve(out->tensors.size());
  for (size_t i = 0; i < out->tensors.size(); ++i) {
    auto [it, inserted] = out->tensor_index.emplace(out->tensors[i].name, static_cast<uint32_t>(i));
    if (!inserted)
      return data_error(info_at[i], "duplicate tensor name " + quoted(out->tensors[i].name) + " (first at index " +
                                        std::to_string(it->second) + ")");
  }

  // general.alignment: honoured only as a non-zero UINT32, first record wins (FORMATS.md §1.6).
  out->alignment = kDefaultAlignment;
  for (const auto& kv : out->metadata) {
    if (kv.key != "general.alignment") continue;
    if (kv.value.type == ValueType::u32) {
      auto a = kv.value.as_u64();
      if (a && *a != 0) out->alignment = *a;
    }
    break;
  }
  out->data_offset = align_up(cur.pos(), out->alignment);

  for (size_t i = 0; i < out->tensors.size(); ++i) {
    const TensorInfo& t = out->tensors[i];
    if (t.offset % out->alignment != 0)
      return data_error(info_at[i], "tensor " + quoted(t.name) + ": data offset " + std::to_string(t.offset) +
                                        " is not a multiple of the alignment " + std::to_string(out->alignment));
    if (out->data_offset > size || t.offset > size - out->data_offset ||
        t.n_bytes > size - out->data_offset - t.offset) {
      // Computed in 128 bits so the message is right even for hostile offsets.
      unsigned __int128 end = static_cast<unsigned __int128>(out->data_offset) + t.offset + t.n_bytes;
      std::string end_s = end > std::numeric_limits<uint64_t>::max() ? std::string(">2^64")
                                                                      : std::to_string(static_cast<uint64_t>(end));
      return data_error(info_at[i], "tensor " + quoted(t.name) + ": data [data_start " +
                                        std::to_string(out->data_offset) + " + " + std::to_string(t.offset) +
                                        ", " + end_s + ") ends beyond the file size " + std::to_string(size));
    }
  }

  // Overlap check over non-empty tensors, in offset order (the directory order is arbitrary).
  std::vector<uint32_t> order;
  order.reserve(out->tensors.size());
  for (size_t i = 0; i < out->tensors.size(); ++i)
    if (out->tensors[i].n_bytes != 0) order.push_back(static_cast<uint32_t>(i));
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return out->tensors[a].offset < out->tensors[b].offset; });
  for (size_t k = 1; k < order.size(); ++k) {
    const TensorInfo& prev = out->tensors[order[k - 1]];
    const TensorInfo& cur_t = out->tensors[order[k]];
    if (prev.offset + prev.n_bytes > cur_t.offset)
      return data_error(info_at[order[k]], "tensor " + quoted(cur_t.name) + " (data offset " +
                                               std::to_string(cur_t.offset) + ") overlaps tensor " +
                                               quoted(prev.name) + " (data offset " + std::to_string(prev.offset) +
                                               ", " + std::to_string(prev.n_bytes) + " bytes)");
  }
  return Status::Ok();
}

}  // namespace ds4::gguf::detail
