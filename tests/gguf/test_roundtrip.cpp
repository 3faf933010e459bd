// test_roundtrip.cpp — Writer → File round trips: every metadata value type, nested arrays,
// the tensor directory with several types and alignments, and the exact byte layout (FORMATS.md §1).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "gguf/gguf.h"
#include "temp_dir.h"

namespace ds4::gguf {
namespace {

using testing::read_all;
using testing::TempDir;

uint64_t align_up(uint64_t x, uint64_t a) { return x + (a - x % a) % a; }

Status fill(size_t i, std::span<uint8_t> out) {
  for (size_t j = 0; j < out.size(); ++j) out[j] = static_cast<uint8_t>((i + 1) * 37 + j * 11);
  return Status::Ok();
}

std::unique_ptr<File> parse(const std::vector<uint8_t>& bytes) {
  auto f = File::from_memory(bytes);
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  return f.ok() ? std::move(f).value() : nullptr;
}

Value nested(int depth) {
  // depth arrays, innermost holds two i16.
  Value v = Value::of_array(ValueType::i16, {Value::of_i16(-1), Value::of_i16(2)});
  for (int d = 1; d < depth; ++d) v = Value::of_array(ValueType::array, {v, v});
  return v;
}

std::vector<KeyValue> every_value_type() {
  std::vector<KeyValue> kv = {
      {"v.u8", Value::of_u8(255)},
      {"v.i8", Value::of_i8(-128)},
      {"v.u16", Value::of_u16(65535)},
      {"v.i16", Value::of_i16(-32768)},
      {"v.u32", Value::of_u32(4294967295u)},
      {"v.i32", Value::of_i32(std::numeric_limits<int32_t>::min())},
      {"v.f32", Value::of_f32(-3.25f)},
      {"v.f32_inf", Value::of_f32(std::numeric_limits<float>::infinity())},
      {"v.f32_nan", Value::of_f32(std::nanf(""))},
      {"v.f32_negzero", Value::of_f32(-0.0f)},
      {"v.bool_t", Value::of_bool(true)},
      {"v.bool_f", Value::of_bool(false)},
      {"v.string", Value::of_string("DeepSeek V4 \xe2\x9c\x93")},
      {"v.string_empty", Value::of_string("")},
      {"v.string_nul", Value::of_string(std::string("a\0b", 3))},
      {"v.string_long", Value::of_string(std::string(5000, 'q'))},
      {"v.u64", Value::of_u64(std::numeric_limits<uint64_t>::max())},
      {"v.i64", Value::of_i64(std::numeric_limits<int64_t>::min())},
      {"v.f64", Value::of_f64(std::numeric_limits<double>::denorm_min())},
      {"v.arr_u8", Value::of_array(ValueType::u8, {Value::of_u8(1), Value::of_u8(2), Value::of_u8(3)})},
      {"v.arr_f32", Value::of_array(ValueType::f32, {Value::of_f32(0.5f), Value::of_f32(-1e30f)})},
      {"v.arr_bool", Value::of_array(ValueType::boolean, {Value::of_bool(true), Value::of_bool(false)})},
      {"v.arr_str", Value::of_array(ValueType::string, {Value::of_string("x"), Value::of_string("")})},
      {"v.arr_i64", Value::of_array(ValueType::i64, {Value::of_i64(-1)})},
      {"v.arr_empty", Value::of_array(ValueType::u32, {})},
      {"v.arr_empty_nested", Value::of_array(ValueType::array, {})},
      {"v.nested2", nested(2)},
      {"v.nested8", nested(8)},
  };
  // One array of each element type, so every element encoding is exercised inside arrays too.
  std::vector<Value> per_type = {Value::of_u8(9),      Value::of_i8(-9),    Value::of_u16(9),  Value::of_i16(-9),
                                 Value::of_u32(9),     Value::of_i32(-9),   Value::of_f32(9),  Value::of_bool(true),
                                 Value::of_string("9"), Value::of_u64(9),    Value::of_i64(-9), Value::of_f64(9.5)};
  for (const auto& v : per_type)
    kv.push_back({std::string("v.arr_of_") + value_type_name(v.type), Value::of_array(v.type, {v, v})});
  return kv;
}

TEST(GgufRoundTrip, EveryValueTypeAndNestedArrays) {
  Writer w;
  auto kvs = every_value_type();
  for (const auto& kv : kvs) w.add(kv.key, kv.value);
  auto img = w.write_to_memory(nullptr);
  ASSERT_TRUE(img.ok()) << img.status().to_string();
  auto f = parse(*img);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->find("general.alignment"), nullptr);  // default alignment is not recorded
  ASSERT_EQ(f->metadata().size(), kvs.size());
  for (size_t i = 0; i < kvs.size(); ++i) {
    EXPECT_EQ(f->metadata()[i].key, kvs[i].key);
    EXPECT_TRUE(f->metadata()[i].value == kvs[i].value) << kvs[i].key << " read back as "
                                                        << f->metadata()[i].value.to_display();
    const Value* found = f->find(kvs[i].key);
    ASSERT_NE(found, nullptr);
    EXPECT_EQ(found, &f->metadata()[i].value);
  }
  EXPECT_EQ(*f->get_u64("v.u64"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(*f->get_i64("v.i8"), -128);
  EXPECT_EQ(*f->get_f64("v.f32"), -3.25);
  EXPECT_EQ(*f->get_f64("v.u16"), 65535.0);
  EXPECT_EQ(*f->get_bool("v.bool_t"), true);
  EXPECT_EQ(*f->get_string("v.string_nul"), std::string("a\0b", 3));
  auto arr = f->get_array("v.arr_str");
  ASSERT_TRUE(arr.ok());
  EXPECT_EQ((*arr)->items.size(), 2u);
  EXPECT_TRUE(std::signbit(*f->get_f64("v.f32_negzero")));
  EXPECT_TRUE(std::isnan(*f->get_f64("v.f32_nan")));
}

TEST(GgufRoundTrip, GettersNameTheKeyAndTheExpectedType) {
  Writer w;
  w.add_string("general.name", "x");
  w.add_f32("some.float", 2.0f);
  w.add_i32("neg", -1);
  auto f = parse(*w.write_to_memory(nullptr));
  ASSERT_TRUE(f);
  auto missing = f->get_u64("deepseek4.block_count");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::not_found);
  EXPECT_NE(missing.status().message().find("'deepseek4.block_count'"), std::string::npos);
  auto wrong = f->get_u64("general.name");
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), StatusCode::invalid_data);
  EXPECT_NE(wrong.status().message().find("'general.name'"), std::string::npos);
  EXPECT_NE(wrong.status().message().find("string"), std::string::npos);
  EXPECT_NE(wrong.status().message().find("expected"), std::string::npos);
  EXPECT_FALSE(f->get_u64("some.float").ok());  // floats never convert to integers
  EXPECT_FALSE(f->get_u64("neg").ok());
  EXPECT_EQ(*f->get_i64("neg"), -1);
  EXPECT_FALSE(f->get_string("some.float").ok());
  EXPECT_FALSE(f->get_array("general.name").ok());
  EXPECT_FALSE(f->get_bool("neg").ok());
}

TEST(GgufRoundTrip, DuplicateKeysKeepAllRecordsAndFindReturnsTheFirst) {
  Writer w;
  w.add_u32("dup", 1);
  w.add_string("other", "o");
  w.add_u32("dup", 2);
  auto f = parse(*w.write_to_memory(nullptr));
  ASSERT_TRUE(f);
  ASSERT_EQ(f->metadata().size(), 3u);
  EXPECT_EQ(*f->get_u64("dup"), 1u);
  EXPECT_EQ(f->metadata()[2].value.as_u64(), 2u);
}

class GgufDirectory : public ::testing::TestWithParam<uint64_t> {};

TEST_P(GgufDirectory, TensorsRoundTripWithExactLayout) {
  const uint64_t A = GetParam();
  const std::vector<TensorSpec> specs = {
      {"token_embd.weight", {64, 3}, GgmlType::F16},
      {"blk.0.attn_q_a.weight", {64, 5}, GgmlType::Q8_0},
      {"blk.0.ffn_gate_exps.weight", {256, 2, 3}, GgmlType::Q2_K},
      {"blk.0.ffn_down_exps.weight", {256, 1, 2}, GgmlType::Q4_K},
      {"blk.0.ffn_up_exps.weight", {512}, GgmlType::IQ2_XXS},
      {"blk.0.ffn_gate_tid2eid.weight", {6, 7}, GgmlType::I32},
      {"output_norm.weight", {13}, GgmlType::F32},
      {"scalar", {1}, GgmlType::F32},
      {"empty", {0}, GgmlType::F32},
      {"bf16.8d", {2, 1, 1, 1, 1, 1, 1, 3}, GgmlType::BF16},
  };
  Writer w;
  w.add_string("general.architecture", "deepseek4");
  for (const auto& s : specs) w.add_tensor(s);
  TempDir dir;
  const std::string path = dir.file("m.gguf");
  ASSERT_TRUE(w.write(path, fill, {.alignment = A, .n_threads = 1}).ok());
  auto mem = w.write_to_memory(fill, {.alignment = A});
  ASSERT_TRUE(mem.ok());
  const auto bytes = read_all(path);
  EXPECT_EQ(bytes, *mem);  // the file and the memory image are the same bytes

  auto fr = File::open(path);
  ASSERT_TRUE(fr.ok()) << fr.status().to_string();
  const File& f = **fr;
  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(f.file_size(), bytes.size());
  EXPECT_EQ(f.alignment(), A);
  if (A == 32) {
    EXPECT_EQ(f.find("general.alignment"), nullptr);
  } else {
    ASSERT_NE(f.find("general.alignment"), nullptr);
    EXPECT_EQ(f.find("general.alignment")->type, ValueType::u32);
    EXPECT_EQ(*f.get_u64("general.alignment"), A);
  }
  // Header: magic, version, counts (FORMATS.md §1.2).
  EXPECT_EQ(std::memcmp(bytes.data(), "GGUF", 4), 0);
  uint32_t version;
  uint64_t n_tensors, n_kv;
  std::memcpy(&version, &bytes[4], 4);
  std::memcpy(&n_tensors, &bytes[8], 8);
  std::memcpy(&n_kv, &bytes[16], 8);
  EXPECT_EQ(version, 3u);
  EXPECT_EQ(n_tensors, specs.size());
  EXPECT_EQ(n_kv, A == 32 ? 1u : 2u);

  EXPECT_EQ(f.data_offset() % A, 0u);
  ASSERT_EQ(f.tensors().size(), specs.size());
  uint64_t rel = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorInfo& t = f.tensors()[i];
    EXPECT_EQ(t.name, specs[i].name);
    EXPECT_EQ(t.ne, specs[i].ne);
    EXPECT_EQ(t.type, specs[i].type);
    EXPECT_EQ(t.type_id, static_cast<uint32_t>(specs[i].type));
    auto traits = type_traits(t.type_id);
    EXPECT_EQ(t.n_bytes, t.n_elements() / traits->block_elems * traits->block_bytes);
    EXPECT_EQ(t.offset, rel) << t.name;  // rel(i+1) = rel(i) + align_up(size(i), A)
    EXPECT_EQ(t.offset % A, 0u);
    EXPECT_EQ(f.find_tensor(t.name), &t);
    Tensor data = f.tensor(t);
    EXPECT_EQ(data.info, &t);
    std::vector<uint8_t> expect(t.n_bytes);
    ASSERT_TRUE(fill(i, expect).ok());
    ASSERT_EQ(data.bytes().size(), t.n_bytes);
    EXPECT_TRUE(std::equal(expect.begin(), expect.end(), data.bytes().begin())) << t.name;
    // The padding after each payload is zeros.
    uint64_t abs_end = f.data_offset() + t.offset + t.n_bytes;
    for (uint64_t p = abs_end; p < f.data_offset() + t.offset + align_up(t.n_bytes, A); ++p)
      ASSERT_EQ(bytes[p], 0) << "padding after " << t.name;
    rel += align_up(t.n_bytes, A);
  }
  EXPECT_EQ(f.find_tensor("missing"), nullptr);
  EXPECT_EQ(f.find_tensor(""), nullptr);
  EXPECT_EQ(bytes.size(), f.data_offset() + rel);
  EXPECT_EQ(f.tensors()[2].n_bytes, 6u * 84u);      // Q2_K: 6 blocks of 84 bytes
  EXPECT_EQ(f.tensors()[1].n_bytes, 10u * 34u);     // Q8_0: 10 blocks of 34 bytes
  EXPECT_EQ(f.tensors()[8].n_bytes, 0u);
}

INSTANTIATE_TEST_SUITE_P(Alignments, GgufDirectory, ::testing::Values(32, 64, 8, 4096));

TEST(GgufRoundTrip, DataStartIsTheDirectoryEndRoundedUp) {
  // Vary the directory size byte by byte so data_offset crosses alignment boundaries.
  for (size_t name_len = 1; name_len < 70; ++name_len) {
    Writer w;
    w.add_tensor({std::string(name_len, 'n'), {1}, GgmlType::F32});
    auto img = w.write_to_memory(fill);
    ASSERT_TRUE(img.ok());
    auto f = parse(*img);
    ASSERT_TRUE(f);
    // header 24 + name (8 + len) + n_dims 4 + ne 8 + type 4 + offset 8.
    uint64_t dir_end = 24 + 8 + name_len + 4 + 8 + 4 + 8;
    EXPECT_EQ(f->data_offset(), align_up(dir_end, 32));
    EXPECT_EQ(img->size(), f->data_offset() + 32);
  }
}

TEST(GgufRoundTrip, WriterRejectsBadSpecsWithClearErrors) {
  auto expect_arg_error = [](Writer& w, const WriteOptions& o, const char* needle) {
    auto r = w.write_to_memory(fill, o);
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  {
    Writer w;
    expect_arg_error(w, {.alignment = 12}, "alignment 12");
    expect_arg_error(w, {.alignment = 0}, "alignment 0");
    expect_arg_error(w, {.alignment = uint64_t{1} << 32}, "alignment");
  }
  {
    Writer w;
    w.add_u64("general.alignment", 64);
    expect_arg_error(w, {.alignment = 64}, "general.alignment");
  }
  {
    Writer w;
    w.add_u32("general.alignment", 64);
    expect_arg_error(w, {.alignment = 32}, "general.alignment");
    EXPECT_TRUE(w.write_to_memory(fill, {.alignment = 64}).ok());
  }
  {
    Writer w;
    w.add_tensor({"a", {4}, GgmlType::F32});
    w.add_tensor({"a", {4}, GgmlType::F32});
    expect_arg_error(w, {}, "duplicate tensor name 'a'");
  }
  {
    Writer w;
    w.add_tensor({"a", {}, GgmlType::F32});
    expect_arg_error(w, {}, "n_dims 0");
  }
  {
    Writer w;
    w.add_tensor({"a", {1, 1, 1, 1, 1, 1, 1, 1, 1}, GgmlType::F32});
    expect_arg_error(w, {}, "n_dims 9");
  }
  {
    Writer w;
    w.add_tensor({"q", {16, 2}, GgmlType::Q8_0});
    expect_arg_error(w, {}, "not a multiple of the q8_0 block size 32");
  }
  {
    Writer w;
    w.add_tensor({"big", {uint64_t{1} << 32, uint64_t{1} << 32}, GgmlType::F32});
    expect_arg_error(w, {}, "overflows");
  }
  {
    Writer w;
    w.add_tensor({"t", {4}, static_cast<GgmlType>(13)});
    expect_arg_error(w, {}, "unknown ggml type 13");
  }
  {
    Writer w;
    Value v;
    v.type = ValueType::u8;
    v.v = uint64_t{300};
    w.add("k.u8", v);
    expect_arg_error(w, {}, "k.u8");
  }
  {
    Writer w;
    Value v;
    v.type = ValueType::string;
    v.v = uint64_t{1};
    w.add("k.s", v);
    expect_arg_error(w, {}, "k.s");
  }
  {
    Writer w;
    w.add_array("k.mixed", ValueType::u32, {Value::of_u32(1), Value::of_i32(2)});
    expect_arg_error(w, {}, "at index 1");
  }
  {
    Writer w;
    w.add("k.deep", nested(9));
    expect_arg_error(w, {}, "nested deeper than 8");
  }
}

}  // namespace
}  // namespace ds4::gguf
