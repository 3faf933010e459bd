// test_payload.cpp — ds4-gen's value generator: the own normal sampler and log, per-tensor streams,
// and random valid blocks whose decoded values have the intended mean 0 and standard deviation.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <vector>

#include "modelspec/inventory.h"
#include "modelspec/profiles.h"
#include "payload.h"
#include "quant/dequant.h"
#include "rng.h"

namespace ds4::gen {
namespace {

using modelspec::TensorEntry;
using modelspec::TensorKind;

TEST(Rng, LnMatchesLibmClosely) {
  for (double x : {1e-300, 1e-9, 0.001, 0.3, 0.70710678, 0.9999999, 1.0, 1.5, 2.0, 1234.5, 1e300})
    EXPECT_NEAR(ln(x), std::log(x), 4e-16 * std::max(1.0, std::fabs(std::log(x)))) << x;
}

TEST(Rng, NormalMomentsAndStreams) {
  Rng r(42);
  const int n = 200000;
  double s = 0, s2 = 0, s4 = 0;
  for (int i = 0; i < n; ++i) {
    const double z = r.normal();
    s += z, s2 += z * z, s4 += z * z * z * z;
  }
  EXPECT_NEAR(s / n, 0.0, 0.01);
  EXPECT_NEAR(s2 / n, 1.0, 0.01);
  EXPECT_NEAR(s4 / n, 3.0, 0.06);  // kurtosis of a normal
  // Streams are a function of (seed, name) only.
  EXPECT_EQ(Rng::for_tensor(1, "a").next(), Rng::for_tensor(1, "a").next());
  EXPECT_NE(Rng::for_tensor(1, "a").next(), Rng::for_tensor(1, "b").next());
  EXPECT_NE(Rng::for_tensor(1, "a").next(), Rng::for_tensor(2, "a").next());
  // A fixed first value pins the generator across machines and compilers.
  Rng k(1);
  EXPECT_EQ(k.next(), 0xb3f2af6d0fc710c5ull);
}

TensorEntry entry(const char* name, TensorKind kind, std::vector<uint64_t> ne, GgmlType t) {
  TensorEntry e;
  e.name = name;
  e.kind = kind;
  e.ne = std::move(ne);
  e.type = t;
  uint64_t n = 1;
  for (auto d : e.ne) n *= d;
  e.n_bytes = *type_bytes(t, n);
  return e;
}

struct Moments {
  double mean, std;
};
Moments decode_moments(const TensorEntry& e, const std::vector<uint8_t>& bytes) {
  const uint64_t n = e.n_elements();
  std::vector<float> v(n);
  EXPECT_TRUE(dequantize_row(e.type, bytes.data(), v.data(), static_cast<int64_t>(n)).ok());
  double s = 0, s2 = 0;
  for (float x : v) {
    EXPECT_TRUE(std::isfinite(x));
    s += x, s2 += double(x) * x;
  }
  return {s / n, std::sqrt(s2 / n - (s / n) * (s / n))};
}

TEST(Payload, RandomBlocksHaveTheIntendedScale) {
  PayloadOptions po;
  po.seed = 9;
  po.quant_source = QuantSource::random_blocks;
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q4_K, GgmlType::IQ2_XXS}) {
    auto e = entry("blk.0.ffn_gate_exps.weight", TensorKind::ffn_gate_exps, {4096, 256}, t);
    std::vector<uint8_t> bytes(e.n_bytes);
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(fill_payload(e, po, bytes).ok());
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const Moments m = decode_moments(e, bytes);
    const double sigma = 1.0 / 64.0;  // 1/sqrt(4096)
    EXPECT_NEAR(m.mean, 0.0, 0.05 * sigma) << type_name(t);
    EXPECT_NEAR(m.std, sigma, 0.08 * sigma) << type_name(t);
    std::printf("%s random blocks: std %.5f (target %.5f), %.0f MB/s\n", std::string(type_name(t)).c_str(), m.std,
                sigma, e.n_bytes / sec / 1e6);
  }
}

TEST(Payload, FloatsFollowTheSuggestedScales) {
  PayloadOptions po;
  po.seed = 5;
  struct Case {
    TensorKind kind;
    double mean, std;
  };
  for (const Case& c : {Case{TensorKind::attn_norm, 1.0, 0.1}, Case{TensorKind::hc_attn_base, 0.0, 0.5},
                        Case{TensorKind::attn_sinks, 0.0, 1.0}, Case{TensorKind::exp_probs_b, 0.0, 0.1},
                        Case{TensorKind::token_embd, 0.0, 1.0}, Case{TensorKind::attn_compressor_ape, 0.0, 0.5}}) {
    auto e = entry("x", c.kind, {20000}, GgmlType::F32);
    std::vector<uint8_t> bytes(e.n_bytes);
    ASSERT_TRUE(fill_payload(e, po, bytes).ok());
    const float* v = reinterpret_cast<const float*>(bytes.data());
    double s = 0, s2 = 0;
    for (int i = 0; i < 20000; ++i) s += v[i], s2 += double(v[i]) * v[i];
    const double mean = s / 20000, sd = std::sqrt(s2 / 20000 - mean * mean);
    EXPECT_NEAR(mean, c.mean, 0.03 * std::max(c.std, 0.1)) << static_cast<int>(c.kind);
    EXPECT_NEAR(sd, c.std, 0.03 * c.std) << static_cast<int>(c.kind);
  }
  auto sc = entry("s", TensorKind::hc_ffn_scale, {3000}, GgmlType::F32);
  std::vector<uint8_t> bytes(sc.n_bytes);
  ASSERT_TRUE(fill_payload(sc, po, bytes).ok());
  for (int i = 0; i < 3000; ++i) {
    const float x = reinterpret_cast<const float*>(bytes.data())[i];
    ASSERT_TRUE(x >= 0.5f && x < 2.0f) << x;
  }
}

TEST(Payload, HashTableNeedsEnoughExperts) {
  PayloadOptions po;
  po.n_expert = 2;
  auto e = entry("blk.0.ffn_gate_tid2eid.weight", TensorKind::ffn_gate_tid2eid, {3, 10}, GgmlType::I32);
  std::vector<uint8_t> bytes(e.n_bytes);
  Status s = fill_payload(e, po, bytes);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("distinct experts"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace ds4::gen
