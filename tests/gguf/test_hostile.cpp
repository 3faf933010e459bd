// test_hostile.cpp — malformed, truncated and hostile GGUF images: every one must give a Status
// that names the problem (and, for parse errors, the byte offset) — never a crash, hang or huge
// allocation.
#include <gtest/gtest.h>

#include <chrono>
#include <limits>

#include "gguf/gguf.h"
#include "raw_gguf.h"

namespace ds4::gguf {
namespace {

using testing::Raw;

constexpr uint32_t kU8 = 0, kU32 = 4, kBool = 7, kString = 8, kArray = 9, kU64 = 10;
constexpr uint32_t kF32 = 0, kQ8_0 = 8;

void expect_error(const std::vector<uint8_t>& bytes, StatusCode code, const std::string& needle,
                  const OpenOptions& opts = {}) {
  auto f = File::from_memory(bytes, opts);
  ASSERT_FALSE(f.ok()) << "accepted; expected: " << needle;
  EXPECT_EQ(f.status().code(), code) << f.status().to_string();
  EXPECT_NE(f.status().message().find(needle), std::string::npos) << f.status().to_string();
  EXPECT_EQ(f.status().message().rfind("gguf: offset ", 0), 0u) << f.status().to_string();
}

std::unique_ptr<File> expect_ok(const std::vector<uint8_t>& bytes) {
  auto f = File::from_memory(bytes);
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  return f.ok() ? std::move(f).value() : nullptr;
}

Status fill(size_t i, std::span<uint8_t> out) {
  for (size_t j = 0; j < out.size(); ++j) out[j] = static_cast<uint8_t>(i + j);
  return Status::Ok();
}

// A small file touching every section; the last tensor is 32 bytes, so the file ends exactly at
// the end of its data and no prefix is a valid file.
std::vector<uint8_t> small_valid_file() {
  Writer w;
  w.add("a.u8", Value::of_u8(1));
  w.add("a.i16", Value::of_i16(-2));
  w.add_f32("a.f32", 0.5f);
  w.add_bool("a.bool", true);
  w.add_string("a.str", "hi");
  w.add_u64("a.u64", 7);
  w.add_f64("a.f64", 2.5);
  w.add_array("a.arr", ValueType::array,
              {Value::of_array(ValueType::string, {Value::of_string("x")}), Value::of_array(ValueType::i8, {})});
  w.add_tensor({"t.q8", {32}, GgmlType::Q8_0});
  w.add_tensor({"t.f32", {8}, GgmlType::F32});
  auto img = w.write_to_memory(fill);
  return std::move(img).value();
}

TEST(GgufHostile, EveryTruncationFailsCleanly) {
  const auto full = small_valid_file();
  auto f = expect_ok(full);
  ASSERT_TRUE(f);
  const TensorInfo& last = f->tensors().back();
  ASSERT_EQ(f->data_offset() + last.offset + last.n_bytes, full.size());
  for (size_t len = 0; len < full.size(); ++len) {
    // An exact-size copy, so a read past the end would touch memory outside the vector.
    std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(len));
    auto r = File::from_memory(cut);
    ASSERT_FALSE(r.ok()) << "prefix of " << len << " bytes was accepted";
    EXPECT_EQ(r.status().code(), StatusCode::invalid_data) << len << ": " << r.status().to_string();
    EXPECT_EQ(r.status().message().rfind("gguf: offset ", 0), 0u) << r.status().message();
  }
}

TEST(GgufHostile, MissingTrailingPaddingIsAccepted) {
  // Only [abs, abs + n_bytes) must lie in the file (ds4's rule); the zero padding after the last
  // tensor may be cut off.
  Writer w;
  w.add_tensor({"t", {3}, GgmlType::F32});  // 12 bytes, padded to 32
  auto img = std::move(w.write_to_memory(fill)).value();
  auto f = expect_ok(img);
  ASSERT_TRUE(f);
  uint64_t end = f->data_offset() + 12;
  for (uint64_t len = end; len <= img.size(); ++len) {
    std::vector<uint8_t> cut(img.begin(), img.begin() + static_cast<std::ptrdiff_t>(len));
    EXPECT_TRUE(File::from_memory(cut).ok()) << len;
  }
  std::vector<uint8_t> cut(img.begin(), img.begin() + static_cast<std::ptrdiff_t>(end - 1));
  expect_error(cut, StatusCode::invalid_data, "ends beyond the file size");
}

TEST(GgufHostile, BadMagicAndVersion) {
  Raw bad_magic;
  bad_magic.b = {'G', 'G', 'M', 'L', 3, 0, 0, 0};
  bad_magic.u64(0).u64(0);
  expect_error(bad_magic.b, StatusCode::invalid_data, "bad magic");
  for (uint32_t v : {0u, 1u, 2u, 4u, 0xffffffffu}) {
    Raw r;
    r.header(0, 0, v);
    expect_error(r.b, StatusCode::unsupported, "version " + std::to_string(v));
  }
  Raw be;
  be.header(0, 0, 0x03000000u);
  expect_error(be.b, StatusCode::unsupported, "big-endian");
  expect_error({}, StatusCode::invalid_data, "truncated: magic");
  expect_error({'G', 'G'}, StatusCode::invalid_data, "truncated: magic");
}

TEST(GgufHostile, EmptyFileWithNoTensorsIsValid) {
  Raw r;
  r.header(0, 0);
  auto f = expect_ok(r.b);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->tensors().size(), 0u);
  EXPECT_EQ(f->data_offset(), 32u);  // align_up(24, 32), even though the file ends at 24
}

TEST(GgufHostile, HugeCountsFailBeforeAnyAllocation) {
  const auto t0 = std::chrono::steady_clock::now();
  {
    Raw r;
    r.header(std::numeric_limits<uint64_t>::max(), 0);
    expect_error(r.b, StatusCode::invalid_data, "tensor count 18446744073709551615 cannot fit");
  }
  {
    Raw r;
    r.header(0, uint64_t{1} << 62);
    expect_error(r.b, StatusCode::invalid_data, "metadata count");
  }
  {
    Raw r;  // key length 2^64-1
    r.header(0, 1).u64(std::numeric_limits<uint64_t>::max()).zeros(64);
    expect_error(r.b, StatusCode::invalid_data, "metadata key length 18446744073709551615 exceeds");
  }
  {
    Raw r;  // string value length 2^63
    r.header(0, 1).str("k").u32(kString).u64(uint64_t{1} << 63).zeros(64);
    expect_error(r.b, StatusCode::invalid_data, "string value length");
  }
  for (uint32_t elem : {kU8, kU64, kString, kArray}) {
    Raw r;  // array count 2^62 (and 2^64-1) with a handful of bytes behind it
    r.header(0, 1).str("k").u32(kArray).u32(elem).u64(uint64_t{1} << 62).zeros(64);
    expect_error(r.b, StatusCode::invalid_data, "cannot fit in the");
    Raw r2;
    r2.header(0, 1).str("k").u32(kArray).u32(elem).u64(std::numeric_limits<uint64_t>::max()).zeros(64);
    expect_error(r2.b, StatusCode::invalid_data, "cannot fit in the");
  }
  {
    Raw r;  // tensor name length beyond the file
    r.header(1, 0).u64(1000).zeros(40);
    expect_error(r.b, StatusCode::invalid_data, "tensor name length 1000 exceeds");
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

TEST(GgufHostile, MetadataMemoryIsCapped) {
  Raw r;  // 200k u8 values: 200 KB of file, ~10 MB materialized
  r.header(0, 1).str("big").u32(kArray).u32(kU8).u64(200000).zeros(200000);
  EXPECT_TRUE(File::from_memory(r.b).ok());
  OpenOptions small;
  small.max_metadata_bytes = 1 << 20;
  {
    auto f = File::from_memory(r.b, small);
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(f.status().code(), StatusCode::out_of_memory);
    EXPECT_NE(f.status().message().find("max_metadata_bytes"), std::string::npos);
  }
}

Raw nested_array_file(int depth) {
  Raw r;
  r.header(0, 1).str("deep").u32(kArray);
  for (int d = 1; d < depth; ++d) r.u32(kArray).u64(1);
  r.u32(kU8).u64(1).u8(42);
  return r;
}

TEST(GgufHostile, ArrayNestingDepth) {
  auto ok = expect_ok(nested_array_file(8).b);
  ASSERT_TRUE(ok);
  const Value* v = ok->find("deep");
  for (int d = 1; d < 8; ++d) v = &v->as_array()->items.at(0);
  EXPECT_EQ(v->as_array()->items.at(0).as_u64(), 42u);
  expect_error(nested_array_file(9).b, StatusCode::invalid_data, "nested deeper than 8");
  expect_error(nested_array_file(100000).b, StatusCode::invalid_data, "nested deeper than 8");
}

TEST(GgufHostile, UnknownAndInvalidValues) {
  {
    Raw r;
    r.header(0, 1).str("k").u32(13).u32(0);
    expect_error(r.b, StatusCode::invalid_data, "unknown value type 13");
  }
  {
    Raw r;
    r.header(0, 1).str("k").u32(kArray).u32(99).u64(0);
    expect_error(r.b, StatusCode::invalid_data, "unknown array element type 99");
  }
  {
    Raw r;
    r.header(0, 1).str("k").u32(kBool).u8(2);
    expect_error(r.b, StatusCode::invalid_data, "bool value 2");
  }
  {
    Raw r;  // the key of an error is named, shortened when long
    r.header(0, 1).str(std::string(500, 'k')).u32(kBool).u8(9);
    auto f = File::from_memory(r.b);
    ASSERT_FALSE(f.ok());
    EXPECT_LT(f.status().message().size(), 300u);
  }
}

// One tensor-info record, the data section, and `data_bytes` bytes of data.
Raw one_tensor(std::vector<uint64_t> ne, uint32_t type, uint64_t offset, size_t data_bytes) {
  Raw r;
  r.header(1, 0).tensor("t", std::move(ne), type, offset).pad_to(32).zeros(data_bytes);
  return r;
}

TEST(GgufHostile, TensorDimsAndTypes) {
  expect_error(one_tensor({}, kF32, 0, 32).b, StatusCode::invalid_data, "n_dims 0 is outside 1..8");
  expect_error(one_tensor({1, 1, 1, 1, 1, 1, 1, 1, 1}, kF32, 0, 32).b, StatusCode::invalid_data, "n_dims 9");
  EXPECT_TRUE(File::from_memory(one_tensor({1, 1, 1, 1, 1, 1, 1, 2}, kF32, 0, 32).b).ok());
  expect_error(one_tensor({uint64_t{1} << 63}, kF32, 0, 32).b, StatusCode::invalid_data, "exceeds 2^63-1");
  expect_error(one_tensor({uint64_t{1} << 32, uint64_t{1} << 32}, kF32, 0, 32).b, StatusCode::invalid_data,
               "element count overflows");
  // Element count fits in int64 but bytes do not: 2^62 f32 values.
  expect_error(one_tensor({uint64_t{1} << 62}, kF32, 0, 32).b, StatusCode::invalid_data, "byte size overflows");
  expect_error(one_tensor({16}, kQ8_0, 0, 64).b, StatusCode::invalid_data, "not a multiple of the q8_0 block size");

  auto f13 = File::from_memory(one_tensor({256}, 13, 0, 256).b);
  ASSERT_FALSE(f13.ok());
  EXPECT_EQ(f13.status().code(), StatusCode::unsupported);
  EXPECT_NE(f13.status().message().find("ggml type 13 (q5_K)"), std::string::npos) << f13.status().message();
  auto f99 = File::from_memory(one_tensor({256}, 99, 0, 256).b);
  ASSERT_FALSE(f99.ok());
  EXPECT_EQ(f99.status().code(), StatusCode::unsupported);
  EXPECT_NE(f99.status().message().find("ggml type 99"), std::string::npos);
}

TEST(GgufHostile, TensorDataBounds) {
  EXPECT_TRUE(File::from_memory(one_tensor({8}, kF32, 0, 32).b).ok());
  expect_error(one_tensor({9}, kF32, 0, 32).b, StatusCode::invalid_data, "ends beyond the file size");
  expect_error(one_tensor({8}, kF32, 32, 32).b, StatusCode::invalid_data, "ends beyond the file size");
  // Offsets near 2^64 must not wrap around.
  expect_error(one_tensor({8}, kF32, std::numeric_limits<uint64_t>::max() - 31, 32).b, StatusCode::invalid_data,
               "ends beyond the file size");
  expect_error(one_tensor({8}, kF32, 16, 64).b, StatusCode::invalid_data, "not a multiple of the alignment 32");
  // A zero-element tensor may sit at the very end of the data.
  EXPECT_TRUE(File::from_memory(one_tensor({0}, kF32, 32, 32).b).ok());
}

TEST(GgufHostile, OverlappingTensorsAreRejected) {
  auto build = [](uint64_t off_b, std::vector<uint64_t> ne_b) {
    Raw r;
    r.header(2, 0).tensor("a", {16}, kF32, 0).tensor("b", std::move(ne_b), kF32, off_b).pad_to(32).zeros(256);
    return r;
  };
  expect_error(build(32, {8}).b, StatusCode::invalid_data, "tensor 'b' (data offset 32) overlaps tensor 'a'");
  EXPECT_TRUE(File::from_memory(build(64, {8}).b).ok());   // adjacent
  EXPECT_TRUE(File::from_memory(build(32, {0}).b).ok());   // empty tensors overlap nothing
  // Directory order differs from offset order: still checked.
  Raw r;
  r.header(2, 0).tensor("late", {8}, kF32, 64).tensor("early", {24}, kF32, 0).pad_to(32).zeros(256);
  expect_error(r.b, StatusCode::invalid_data, "overlaps");
}

TEST(GgufHostile, DuplicateTensorNamesAreRejected) {
  Raw r;
  r.header(2, 0).tensor("w", {8}, kF32, 0).tensor("w", {8}, kF32, 32).pad_to(32).zeros(64);
  expect_error(r.b, StatusCode::invalid_data, "duplicate tensor name 'w'");
}

Raw aligned_file(uint32_t value_type, uint64_t alignment_value, uint64_t tensor_offset) {
  Raw r;
  r.header(1, 1).str("general.alignment").u32(value_type);
  if (value_type == kU32) r.u32(static_cast<uint32_t>(alignment_value));
  else r.u64(alignment_value);
  r.tensor("t", {4}, kF32, tensor_offset);
  return r;
}

TEST(GgufHostile, AlignmentSemantics) {
  {  // u32 64: honoured
    Raw r = aligned_file(kU32, 64, 64);
    r.pad_to(64).zeros(128);
    auto f = expect_ok(r.b);
    ASSERT_TRUE(f);
    EXPECT_EQ(f->alignment(), 64u);
    EXPECT_EQ(f->data_offset() % 64, 0u);
    Raw bad = aligned_file(kU32, 64, 32);
    bad.pad_to(64).zeros(128);
    expect_error(bad.b, StatusCode::invalid_data, "not a multiple of the alignment 64");
  }
  {  // u32 0: ignored, default 32
    Raw r = aligned_file(kU32, 0, 32);
    r.pad_to(32).zeros(64);
    auto f = expect_ok(r.b);
    ASSERT_TRUE(f);
    EXPECT_EQ(f->alignment(), 32u);
  }
  {  // u64 64: wrong type, ignored (ds4 honours only UINT32)
    Raw r = aligned_file(kU64, 64, 32);
    r.pad_to(32).zeros(64);
    auto f = expect_ok(r.b);
    ASSERT_TRUE(f);
    EXPECT_EQ(f->alignment(), 32u);
  }
  {  // u32 48: not a power of two, honoured as given (offsets multiples of 48)
    Raw r = aligned_file(kU32, 48, 48);
    r.pad_to(48).zeros(96);
    auto f = expect_ok(r.b);
    ASSERT_TRUE(f);
    EXPECT_EQ(f->alignment(), 48u);
    EXPECT_EQ(f->data_offset() % 48, 0u);
  }
  {  // u32 2^31: data would start past the end of the file
    Raw r = aligned_file(kU32, uint64_t{1} << 31, 0);
    r.zeros(64);
    expect_error(r.b, StatusCode::invalid_data, "ends beyond the file size");
  }
  {  // duplicate general.alignment: the first record wins
    Raw r;
    r.header(1, 2).kv_u32("general.alignment", 64).kv_u32("general.alignment", 32).tensor("t", {4}, kF32, 0);
    r.pad_to(64).zeros(64);
    auto f = expect_ok(r.b);
    ASSERT_TRUE(f);
    EXPECT_EQ(f->alignment(), 64u);
  }
}

TEST(GgufHostile, ErrorsNameTheByteOffset) {
  Raw r;
  r.header(0, 2).kv_u32("ok", 1).str("bad").u32(kBool).u8(7);
  // header 24 + record "ok" (8+2+4+4) = 42; "bad" record: key 11 bytes + type 4 -> value at 57.
  expect_error(r.b, StatusCode::invalid_data, "gguf: offset 57: key 'bad': bool value 7");
}

}  // namespace
}  // namespace ds4::gguf
