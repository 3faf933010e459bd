// test_config.cpp — ModelConfig from metadata: type tolerance, round trip through a real GGUF image,
// and rejection messages that name the key and the expected value.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "gguf/gguf.h"
#include "modelspec/config.h"
#include "modelspec/layer_plan.h"
#include "modelspec/metadata_writer.h"
#include "modelspec/profiles.h"

namespace ds4::modelspec {
namespace {

using gguf::Value;
using gguf::ValueType;

// Metadata as a plain map, built through the same writer code the generator uses.
class Meta {
 public:
  explicit Meta(const ModelConfig& c) {
    gguf::Writer w;
    write_model_metadata(c, MetadataOptions{}, w);
    auto img = w.write_to_memory({});
    EXPECT_TRUE(img.ok()) << img.status().to_string();
    bytes_ = std::move(img).value();
    auto f = gguf::File::from_memory(bytes_);
    EXPECT_TRUE(f.ok()) << f.status().to_string();
    for (const auto& kv : (*f)->metadata()) kv_[kv.key] = kv.value;
  }
  Value& operator[](const std::string& k) { return kv_[k]; }
  void erase(std::string_view k) { kv_.erase(std::string(k)); }
  Result<ModelConfig> read() const {
    return config_from_metadata([this](std::string_view k) -> const Value* {
      auto it = kv_.find(std::string(k));
      return it == kv_.end() ? nullptr : &it->second;
    });
  }

 private:
  std::vector<uint8_t> bytes_;
  std::map<std::string, Value> kv_;
};

void expect_error(const Result<ModelConfig>& r, const std::string& a, const std::string& b = "") {
  ASSERT_FALSE(r.ok()) << "expected rejection mentioning " << a;
  EXPECT_NE(r.status().message().find(a), std::string::npos) << r.status().message();
  if (!b.empty()) {
    EXPECT_NE(r.status().message().find(b), std::string::npos) << r.status().message();
  }
}

Value ratios(std::vector<int32_t> v) {
  std::vector<Value> items;
  for (int32_t x : v) items.push_back(Value::of_i32(x));
  return Value::of_array(ValueType::i32, std::move(items));
}

TEST(Config, ProfilesValidate) {
  EXPECT_TRUE(validate_config(flash_config()).ok()) << validate_config(flash_config()).to_string();
  EXPECT_TRUE(validate_config(tiny_config()).ok());
  EXPECT_TRUE(validate_config(tiny_quant_config()).ok());
  EXPECT_TRUE(check_flash_shape(flash_config()).ok());
}

TEST(Config, RoundTripFlashAndTiny) {
  for (const ModelConfig& c : {flash_config(), tiny_config(), tiny_quant_config()}) {
    auto r = Meta(c).read();
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->n_layer, c.n_layer);
    EXPECT_EQ(r->n_embd, c.n_embd);
    EXPECT_EQ(r->n_vocab, c.n_vocab);
    EXPECT_EQ(r->compress_ratios, c.compress_ratios);  // the MTP slot (trailing 0) is dropped
    EXPECT_EQ(r->swiglu_clamp, c.swiglu_clamp);
    EXPECT_EQ(r->indexer_top_k, c.indexer_top_k);
    EXPECT_EQ(r->rope_orig_context, 65536u);
    EXPECT_EQ(r->context_length, 1048576u);
    EXPECT_NEAR(r->hc_eps, 1e-6, 1e-12);
    EXPECT_DOUBLE_EQ(r->compress_rope_freq_base, 160000.0);
    EXPECT_EQ(r->hca_ratio(), c.n_layer == 43 ? 128u : 16u);
  }
}

TEST(Config, TinyLayerPlan) {
  auto plan = layer_plan(tiny_config());
  ASSERT_EQ(plan.size(), 6u);
  const AttentionKind want[] = {AttentionKind::sliding, AttentionKind::sliding, AttentionKind::csa,
                                AttentionKind::hca, AttentionKind::csa, AttentionKind::hca};
  for (int l = 0; l < 6; ++l) {
    EXPECT_EQ(plan[l].kind, want[l]) << l;
    EXPECT_EQ(plan[l].hash_routing, l < 3) << l;
    EXPECT_EQ(plan[l].has_router_bias, l >= 3) << l;
    EXPECT_EQ(plan[l].has_indexer, l == 2 || l == 4) << l;
    EXPECT_EQ(plan[l].uses_yarn, l >= 2) << l;
    EXPECT_FLOAT_EQ(plan[l].swiglu_clamp, 1.0f);
  }
  EXPECT_EQ(plan[2].compressor_width, 512u);  // two overlap series of D = 256
  EXPECT_EQ(plan[3].compressor_width, 256u);
  EXPECT_EQ(plan[3].compress_ratio, 16u);
  LayerPlan mtp = mtp_layer_plan(tiny_config());
  EXPECT_TRUE(mtp.is_mtp);
  EXPECT_FALSE(mtp.hash_routing);
  EXPECT_TRUE(mtp.has_router_bias);
  EXPECT_EQ(mtp.compress_ratio, 0u);
}

TEST(Config, TypeTolerance) {
  Meta m(tiny_config());
  m["deepseek4.block_count"] = Value::of_u64(6);
  m["deepseek4.embedding_length"] = Value::of_i32(64);
  m["deepseek4.rope.freq_base"] = Value::of_u32(10000);
  m["deepseek4.expert_weights_scale"] = Value::of_f64(1.5);
  m["deepseek4.rope.scaling.original_context_length"] = Value::of_u32(65536);
  std::vector<Value> u;
  for (uint32_t x : {0u, 0u, 4u, 16u, 4u, 16u}) u.push_back(Value::of_u32(x));
  m["deepseek4.attention.compress_ratios"] = Value::of_array(ValueType::u32, u);
  std::vector<Value> f;
  for (int i = 0; i < 6; ++i) f.push_back(Value::of_f64(1.0));
  m["deepseek4.swiglu_clamp_exp"] = Value::of_array(ValueType::f64, f);
  m.erase("deepseek4.context_length");  // informational only
  auto r = m.read();
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->n_embd, 64u);
  EXPECT_EQ(r->context_length, 0u);
}

TEST(Config, RejectsMissingKey) {
  Meta m(tiny_config());
  m.erase("deepseek4.attention.q_lora_rank");
  expect_error(m.read(), "deepseek4.attention.q_lora_rank", "missing");
}

TEST(Config, RejectsWrongValueType) {
  Meta m(tiny_config());
  m["deepseek4.block_count"] = Value::of_string("six");
  expect_error(m.read(), "deepseek4.block_count", "STRING");
  Meta m2(tiny_config());
  m2["deepseek4.attention.head_count"] = Value::of_f32(4.0f);
  expect_error(m2.read(), "deepseek4.attention.head_count", "FLOAT32");
}

TEST(Config, RejectsHeadCountKv) {
  Meta m(tiny_config());
  m["deepseek4.attention.head_count_kv"] = Value::of_u32(8);
  expect_error(m.read(), "deepseek4.attention.head_count_kv: expected 1", "got 8");
}

TEST(Config, RejectsRatioPattern) {
  Meta m(tiny_config());
  m["deepseek4.attention.compress_ratios"] = ratios({0, 0, 16, 16, 4, 16});
  expect_error(m.read(), "compress_ratios[2]: expected 4", "got 16");
  Meta m2(tiny_config());
  m2["deepseek4.attention.compress_ratios"] = ratios({0, 4, 4, 16, 4, 16});
  expect_error(m2.read(), "compress_ratios[1]: expected 0");
  Meta m3(tiny_config());
  m3["deepseek4.attention.compress_ratios"] = ratios({0, 0, 4, 16, 4, 128});
  expect_error(m3.read(), "compress_ratios[5]: expected 16", "got 128");
  Meta m4(tiny_config());
  m4["deepseek4.attention.compress_ratios"] = ratios({0, 0, 4, 4, 4, 4});
  expect_error(m4.read(), "compress_ratios[3]", "HCA");
  Meta m5(tiny_config());
  m5["deepseek4.attention.compress_ratios"] = ratios({0, 0, 4, 16});
  expect_error(m5.read(), "compress_ratios: expected at least 6 entries", "got 4");
  Meta m6(tiny_config());
  m6["deepseek4.attention.compress_ratios"] = ratios({0, 0, 4, 16, 4, -16});
  expect_error(m6.read(), "compress_ratios[5]");
}

TEST(Config, RejectsStructuralViolations) {
  struct Case {
    const char* key;
    Value value;
    const char* want;
  };
  const Case cases[] = {
      {"deepseek4.attention.value_length", Value::of_u32(128), "equal to key_length"},
      {"deepseek4.rope.dimension_count", Value::of_u32(63), "even"},
      {"deepseek4.rope.dimension_count", Value::of_u32(32), "multiple of 64"},
      {"deepseek4.attention.indexer.key_length", Value::of_u32(96), "power of two"},
      {"deepseek4.attention.indexer.key_length", Value::of_u32(64), "> rope dims"},
      {"deepseek4.attention.output_group_count", Value::of_u32(3), "divisor of head_count 4"},
      {"deepseek4.expert_used_count", Value::of_u32(9), "expert_count = 8"},
      {"deepseek4.expert_shared_count", Value::of_u32(2), "expected 1"},
      {"deepseek4.hash_layer_count", Value::of_u32(7), "at most block_count = 6"},
      {"deepseek4.hyper_connection.count", Value::of_u32(2), "expected 4"},
      {"deepseek4.expert_group_count", Value::of_u32(8), "0 or absent"},
      {"deepseek4.expert_weights_norm", Value::of_bool(false), "expected true"},
      {"deepseek4.attention.layer_norm_rms_epsilon", Value::of_f32(0.0f), "positive"},
      {"deepseek4.attention.sliding_window", Value::of_u32(0), "positive"},
      {"deepseek4.rope.scaling.factor", Value::of_f32(0.5f), "≥ 1"},
  };
  for (const auto& c : cases) {
    Meta m(tiny_config());
    m[c.key] = c.value;
    expect_error(m.read(), c.key, c.want);
  }
}

TEST(Config, RejectsShortOrBadClampArray) {
  Meta m(tiny_config());
  m["deepseek4.swiglu_clamp_exp"] =
      Value::of_array(ValueType::f32, {Value::of_f32(1), Value::of_f32(1), Value::of_f32(1)});
  expect_error(m.read(), "deepseek4.swiglu_clamp_exp: expected at least 6 entries");
  Meta m2(tiny_config());
  std::vector<Value> f(6, Value::of_f32(1.0f));
  f[4] = Value::of_f32(-1.0f);
  m2["deepseek4.swiglu_clamp_exp"] = Value::of_array(ValueType::f32, f);
  expect_error(m2.read(), "deepseek4.swiglu_clamp_exp[4]", "positive");
  Meta m3(tiny_config());
  m3["deepseek4.swiglu_clamp_exp"] = Value::of_f32(10.0f);
  expect_error(m3.read(), "deepseek4.swiglu_clamp_exp", "ARRAY");
}

TEST(Config, HostileSizesRejectedWithoutOverflow) {
  Meta m(tiny_config());
  m["deepseek4.block_count"] = Value::of_u32(4000000000u);
  expect_error(m.read(), "deepseek4.block_count");
  Meta m2(tiny_config());
  m2["deepseek4.attention.head_count"] = Value::of_u32(1u << 20);
  m2["deepseek4.attention.key_length"] = Value::of_u32(1u << 14);
  expect_error(m2.read(), "deepseek4.attention.head_count");
}

TEST(Config, FlashShapeCheckNamesTheKey) {
  Status s = check_flash_shape(tiny_config());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("deepseek4.block_count: expected 43"), std::string::npos) << s.message();
  ModelConfig c = flash_config();
  c.swiglu_clamp[7] = 9.0f;
  s = check_flash_shape(c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("swiglu_clamp_exp[7]"), std::string::npos) << s.message();
}

// Every key replaced by a wrong type, a zero, a huge value or an empty array: always a clean error
// naming that key (or, for informational keys, acceptance) — never a crash.
TEST(Config, EveryKeyMutatedGivesCleanErrors) {
  Meta base(tiny_config());
  std::vector<std::string> keys;
  {
    gguf::Writer w;
    write_model_metadata(tiny_config(), MetadataOptions{}, w);
    auto img = w.write_to_memory({});
    ASSERT_TRUE(img.ok());
    auto f = gguf::File::from_memory(*img);
    ASSERT_TRUE(f.ok());
    for (const auto& kv : (*f)->metadata()) keys.push_back(kv.key);
  }
  const std::vector<Value> bad_values = {
      Value::of_string("x"), Value::of_u32(0), Value::of_u64(~0ull), Value::of_i64(-5), Value::of_f64(1e300),
      Value::of_f32(-0.0f), Value::of_array(ValueType::u32, {}), Value::of_bool(true)};
  const std::set<std::string> informational = {"general.architecture", "general.name", "general.license",
                                               "general.quantization_version", "deepseek4.context_length",
                                               "deepseek4.rope.scaling.type", "deepseek4.expert_gating_func",
                                               "deepseek4.nextn_predict_layers"};
  int rejected = 0;
  for (const auto& k : keys) {
    for (const auto& v : bad_values) {
      Meta m(tiny_config());
      m[k] = v;
      auto r = m.read();
      if (informational.count(k)) {
        EXPECT_TRUE(r.ok()) << k << ": " << r.status().to_string();
        continue;
      }
      if (r.ok()) continue;  // some mutations are valid values (e.g. u64 max for a clamp is not)
      ++rejected;
      EXPECT_NE(r.status().message().find(k), std::string::npos) << k << " -> " << r.status().message();
    }
  }
  EXPECT_GT(rejected, 200);
}

TEST(Config, FourLayerVariantIsAccepted) {
  ModelConfig c = tiny_config();
  c.n_layer = 4;
  c.compress_ratios = {0, 0, 4, 16};
  c.swiglu_clamp.assign(4, 1.0f);
  EXPECT_TRUE(validate_config(c).ok()) << validate_config(c).to_string();
}

}  // namespace
}  // namespace ds4::modelspec
