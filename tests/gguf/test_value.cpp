// test_value.cpp — gguf::Value accessors (exact conversions only), equality and display text.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "gguf/gguf.h"

namespace ds4::gguf {
namespace {

TEST(GgufValue, UnsignedConvertsWhenInRange) {
  Value v = Value::of_u8(200);
  EXPECT_EQ(v.as_u64(), 200u);
  EXPECT_EQ(v.as_i64(), 200);
  EXPECT_EQ(v.as_f64(), 200.0);
  EXPECT_FALSE(v.as_bool());
  EXPECT_EQ(v.as_string(), nullptr);
  EXPECT_EQ(v.as_array(), nullptr);

  Value big = Value::of_u64(std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(big.as_u64(), std::numeric_limits<uint64_t>::max());
  EXPECT_FALSE(big.as_i64());  // > INT64_MAX
  EXPECT_FALSE(big.as_f64());  // 2^64-1 is not a double
  EXPECT_EQ(Value::of_u64(uint64_t{1} << 53).as_f64(), 9007199254740992.0);
  EXPECT_FALSE(Value::of_u64((uint64_t{1} << 53) + 1).as_f64());
  EXPECT_EQ(Value::of_u64(uint64_t{1} << 63).as_f64(), 9223372036854775808.0);
}

TEST(GgufValue, SignedConvertsWhenInRange) {
  Value neg = Value::of_i8(-100);
  EXPECT_FALSE(neg.as_u64());
  EXPECT_EQ(neg.as_i64(), -100);
  EXPECT_EQ(neg.as_f64(), -100.0);
  Value min = Value::of_i64(std::numeric_limits<int64_t>::min());
  EXPECT_EQ(min.as_i64(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(min.as_f64(), -9223372036854775808.0);
  EXPECT_EQ(Value::of_i32(7).as_u64(), 7u);
}

TEST(GgufValue, FloatsNeverBecomeIntegers) {
  Value f = Value::of_f32(3.0f);
  EXPECT_FALSE(f.as_u64());
  EXPECT_FALSE(f.as_i64());
  EXPECT_EQ(f.as_f64(), 3.0);
  EXPECT_EQ(Value::of_f64(-0.25).as_f64(), -0.25);
  EXPECT_FALSE(Value::of_bool(true).as_f64());
  EXPECT_FALSE(Value::of_string("1").as_u64());
}

TEST(GgufValue, BoolStringArray) {
  EXPECT_EQ(Value::of_bool(false).as_bool(), false);
  Value s = Value::of_string("abc");
  ASSERT_NE(s.as_string(), nullptr);
  EXPECT_EQ(*s.as_string(), "abc");
  Value a = Value::of_array(ValueType::i32, {Value::of_i32(1), Value::of_i32(2)});
  ASSERT_NE(a.as_array(), nullptr);
  EXPECT_EQ(a.as_array()->elem_type, ValueType::i32);
  EXPECT_EQ(a.as_array()->items.size(), 2u);
  EXPECT_FALSE(a.as_u64());
}

TEST(GgufValue, EqualityIsDeepAndBitExactForFloats) {
  Value a = Value::of_array(ValueType::array, {Value::of_array(ValueType::string, {Value::of_string("x")})});
  Value b = Value::of_array(ValueType::array, {Value::of_array(ValueType::string, {Value::of_string("x")})});
  Value c = Value::of_array(ValueType::array, {Value::of_array(ValueType::string, {Value::of_string("y")})});
  EXPECT_TRUE(a == b);
  EXPECT_FALSE(a == c);
  EXPECT_FALSE(Value::of_u32(1) == Value::of_u64(1));  // type tags differ
  EXPECT_TRUE(Value::of_f32(std::nanf("")) == Value::of_f32(std::nanf("")));
  EXPECT_FALSE(Value::of_f64(0.0) == Value::of_f64(-0.0));
}

TEST(GgufValue, Display) {
  EXPECT_EQ(Value::of_i16(-5).to_display(), "-5");
  EXPECT_EQ(Value::of_u64(18446744073709551615ull).to_display(), "18446744073709551615");
  EXPECT_EQ(Value::of_bool(true).to_display(), "true");
  EXPECT_EQ(Value::of_f32(1.5f).to_display(), "1.5");
  EXPECT_EQ(Value::of_string("a\"b\n").to_display(), "\"a\\\"b\\n\"");
  std::vector<Value> items;
  for (int i = 0; i < 10; ++i) items.push_back(Value::of_u8(static_cast<uint8_t>(i)));
  EXPECT_EQ(Value::of_array(ValueType::u8, items).to_display(3), "u8[10] [0, 1, 2, ...]");
  std::string long_s(1000, 'x');
  std::string d = Value::of_string(long_s).to_display();
  EXPECT_LT(d.size(), 300u);
  EXPECT_NE(d.find("(1000 bytes)"), std::string::npos);
}

TEST(GgufValue, DisplayOfWideDeepArraysStaysShort) {
  Value v = Value::of_array(ValueType::u64, std::vector<Value>(8, Value::of_u64(123456789)));
  for (int d = 1; d < 8; ++d) v = Value::of_array(ValueType::array, std::vector<Value>(8, v));
  std::string d = v.to_display(8);  // 8^8 leaves if printed in full
  EXPECT_LT(d.size(), 40000u);
  EXPECT_NE(d.find("..."), std::string::npos);
}

TEST(GgufValue, TypeNames) {
  EXPECT_STREQ(value_type_name(ValueType::boolean), "bool");
  EXPECT_STREQ(value_type_name(ValueType::f64), "f64");
  EXPECT_STREQ(value_type_name(static_cast<ValueType>(99)), "unknown");
}

}  // namespace
}  // namespace ds4::gguf
