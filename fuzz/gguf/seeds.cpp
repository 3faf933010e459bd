// seeds.cpp — builds the seed images declared in seeds.h.
#include "seeds.h"

#include <cstdlib>

#include "gguf/gguf.h"

namespace ds4::gguf::fuzz {
namespace {

// Deterministic payload: byte j of tensor i is a simple hash, so round trips are checkable.
ds4::Status fill(size_t i, std::span<uint8_t> out) {
  for (size_t j = 0; j < out.size(); ++j) out[j] = static_cast<uint8_t>(i * 131 + j * 7 + 1);
  return ds4::Status::Ok();
}

std::vector<uint8_t> build(Writer& w, uint64_t alignment) {
  auto img = w.write_to_memory(fill, {.alignment = alignment, .n_threads = 1});
  if (!img.ok()) std::abort();  // the seeds are fixed inputs; failing here is a bug in the writer
  return std::move(img).value();
}

void add_all_scalars(Writer& w) {
  w.add("t.u8", Value::of_u8(200));
  w.add("t.i8", Value::of_i8(-100));
  w.add("t.u16", Value::of_u16(60000));
  w.add("t.i16", Value::of_i16(-30000));
  w.add_u32("t.u32", 4000000000u);
  w.add_i32("t.i32", -2000000000);
  w.add_f32("t.f32", 1.5f);
  w.add_bool("t.bool", true);
  w.add_string("t.string", "hello \"gguf\"\n");
  w.add_u64("t.u64", 18000000000000000000ull);
  w.add_i64("t.i64", -9000000000000000000ll);
  w.add_f64("t.f64", -0.125);
}

}  // namespace

std::vector<Seed> seed_images() {
  std::vector<Seed> seeds;
  {
    Writer w;
    seeds.push_back({"empty", build(w, 32)});
  }
  {
    Writer w;
    add_all_scalars(w);
    w.add_array("t.arr_i32", ValueType::i32, {Value::of_i32(1), Value::of_i32(-2), Value::of_i32(3)});
    w.add_array("t.arr_str", ValueType::string, {Value::of_string("a"), Value::of_string(""), Value::of_string("ccc")});
    w.add_array("t.arr_nested", ValueType::array,
                {Value::of_array(ValueType::u8, {Value::of_u8(1), Value::of_u8(2)}),
                 Value::of_array(ValueType::f32, {Value::of_f32(0.5f)}),
                 Value::of_array(ValueType::array, {Value::of_array(ValueType::boolean, {Value::of_bool(false)})})});
    w.add_array("t.arr_empty", ValueType::f64, {});
    w.add_tensor({"a.f32", {4, 2}, GgmlType::F32});
    w.add_tensor({"b.f16", {3}, GgmlType::F16});
    w.add_tensor({"c.q8_0", {32, 2}, GgmlType::Q8_0});
    w.add_tensor({"d.i32", {5}, GgmlType::I32});
    w.add_tensor({"e.empty", {0, 4}, GgmlType::F32});
    seeds.push_back({"all_types_align32", build(w, 32)});
  }
  {
    Writer w;
    w.add_string("general.architecture", "deepseek4");
    w.add_tensor({"blk.0.x.weight", {256}, GgmlType::Q2_K});
    w.add_tensor({"blk.0.y.weight", {256}, GgmlType::Q4_K});
    w.add_tensor({"blk.0.z.weight", {256}, GgmlType::IQ2_XXS});
    w.add_tensor({"blk.0.w.weight", {2, 1, 1, 1, 1, 1, 1, 2}, GgmlType::BF16});
    seeds.push_back({"kquants_align64", build(w, 64)});
  }
  {
    Writer w;
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_array("tokenizer.ggml.tokens", ValueType::string,
                {Value::of_string("<s>"), Value::of_string("</s>"), Value::of_string("\xc4\xa0the")});
    w.add_array("tokenizer.ggml.merges", ValueType::string, {Value::of_string("\xc4\xa0 t")});
    w.add_u32("tokenizer.ggml.bos_token_id", 0);
    w.add_tensor({"token_embd.weight", {8, 3}, GgmlType::F16});
    seeds.push_back({"tokenizer", build(w, 32)});
  }
  return seeds;
}

}  // namespace ds4::gguf::fuzz
