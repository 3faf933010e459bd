// gguf_metadata.cpp — TokenizerData <-> `tokenizer.ggml.*` GGUF metadata (TOKENIZER.md §1,
// FORMATS.md §3.2-3.3), and Tokenizer::from_gguf.
// The reader only trusts what it checks: element types, string contents and id ranges, and every
// error names the key (and element index) at fault.
#include "gguf/gguf.h"
#include "tokenizer/hf_import.h"

namespace ds4::tokenizer {
namespace {

constexpr const char* kModel = "tokenizer.ggml.model";
constexpr const char* kPre = "tokenizer.ggml.pre";
constexpr const char* kTokens = "tokenizer.ggml.tokens";
constexpr const char* kTokenType = "tokenizer.ggml.token_type";
constexpr const char* kMerges = "tokenizer.ggml.merges";
constexpr const char* kBos = "tokenizer.ggml.bos_token_id";
constexpr const char* kEos = "tokenizer.ggml.eos_token_id";
constexpr const char* kPad = "tokenizer.ggml.padding_token_id";
constexpr const char* kAddBos = "tokenizer.ggml.add_bos_token";
constexpr const char* kAddEos = "tokenizer.ggml.add_eos_token";

std::vector<gguf::Value> string_values(const std::vector<std::string>& v) {
  std::vector<gguf::Value> out;
  out.reserve(v.size());
  for (const std::string& s : v) out.push_back(gguf::Value::of_string(s));
  return out;
}

Result<std::vector<std::string>> read_string_array(const gguf::File& f, const char* key) {
  const gguf::Value* v = f.find(key);
  if (!v) return not_found(std::string(key) + ": missing (the GGUF has no tokenizer)");
  const gguf::Array* a = v->as_array();
  if (!a) return invalid_data(std::string(key) + ": expected ARRAY of STRING, found " + gguf::value_type_name(v->type));
  if (a->elem_type != gguf::ValueType::string)
    return invalid_data(std::string(key) + ": expected ARRAY of STRING, found ARRAY of " + gguf::value_type_name(a->elem_type));
  if (a->items.size() > size_t(INT32_MAX)) return invalid_data(std::string(key) + ": too many entries");
  std::vector<std::string> out;
  out.reserve(a->items.size());
  for (size_t i = 0; i < a->items.size(); ++i) {
    const std::string* s = a->items[i].as_string();
    if (!s) return invalid_data(std::string(key) + "[" + std::to_string(i) + "]: not a string");
    out.push_back(*s);
  }
  return out;
}

// Optional unsigned id: absent -> keep the default.
Status read_id(const gguf::File& f, const char* key, uint32_t& out) {
  const gguf::Value* v = f.find(key);
  if (!v) return Status::Ok();
  auto u = v->as_u64();
  if (!u || *u > UINT32_MAX) return invalid_data(std::string(key) + ": expected a non-negative integer id");
  out = uint32_t(*u);
  return Status::Ok();
}

Status read_flag(const gguf::File& f, const char* key, bool& out) {
  const gguf::Value* v = f.find(key);
  if (!v) return Status::Ok();
  auto b = v->as_bool();
  if (!b) return invalid_data(std::string(key) + ": expected BOOL, found " + gguf::value_type_name(v->type));
  out = *b;
  return Status::Ok();
}

}  // namespace

void write_tokenizer_metadata(const TokenizerData& d, gguf::Writer& w) {
  w.add_string(kModel, d.model);
  w.add_string(kPre, d.pre);
  w.add_array(kTokens, gguf::ValueType::string, string_values(d.tokens));
  if (!d.token_types.empty()) {
    std::vector<gguf::Value> types;
    types.reserve(d.token_types.size());
    for (int32_t t : d.token_types) types.push_back(gguf::Value::of_i32(t));
    w.add_array(kTokenType, gguf::ValueType::i32, std::move(types));
  }
  w.add_array(kMerges, gguf::ValueType::string, string_values(d.merges));
  w.add_u32(kBos, d.bos_id);
  w.add_u32(kEos, d.eos_id);
  w.add_u32(kPad, d.pad_id);
  w.add_bool(kAddBos, d.add_bos);
  w.add_bool(kAddEos, d.add_eos);
}

Result<TokenizerData> read_tokenizer_metadata(const gguf::File& f) {
  TokenizerData d;
  if (const gguf::Value* v = f.find(kModel)) {
    const std::string* s = v->as_string();
    if (!s) return invalid_data(std::string(kModel) + ": expected STRING");
    d.model = *s;
  }
  if (const gguf::Value* v = f.find(kPre)) {
    const std::string* s = v->as_string();
    if (!s) return invalid_data(std::string(kPre) + ": expected STRING");
    d.pre = *s;
  }
  DS4_ASSIGN_OR_RETURN(d.tokens, read_string_array(f, kTokens));
  DS4_ASSIGN_OR_RETURN(d.merges, read_string_array(f, kMerges));
  // token_type is informational (ds4 ignores it); keep it only when it is well formed.
  if (const gguf::Value* v = f.find(kTokenType)) {
    const gguf::Array* a = v->as_array();
    if (a && a->items.size() == d.tokens.size()) {
      d.token_types.reserve(a->items.size());
      for (const gguf::Value& t : a->items) {
        auto i = t.as_i64();
        if (!i || *i < INT32_MIN || *i > INT32_MAX) { d.token_types.clear(); break; }
        d.token_types.push_back(int32_t(*i));
      }
    }
  }
  DS4_RETURN_IF_ERROR(read_id(f, kBos, d.bos_id));
  DS4_RETURN_IF_ERROR(read_id(f, kEos, d.eos_id));
  DS4_RETURN_IF_ERROR(read_id(f, kPad, d.pad_id));
  DS4_RETURN_IF_ERROR(read_flag(f, kAddBos, d.add_bos));
  DS4_RETURN_IF_ERROR(read_flag(f, kAddEos, d.add_eos));
  return d;
}

}  // namespace ds4::tokenizer

namespace ds4 {

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const gguf::File& file) {
  auto data = tokenizer::read_tokenizer_metadata(file);
  if (!data.ok()) return data.status().with_context("tokenizer");
  auto tok = tokenizer::make_tokenizer(std::move(data).value());
  if (!tok.ok()) return tok.status().with_context("tokenizer.ggml.*");
  return std::move(tok).value();
}

}  // namespace ds4
