// test_golden_bytes.cpp — pins the exact output of the K-quant quantizers (Q2_K, Q4_K: best and
// fast effort, with and without importance) and of the F16/BF16 reference dot products on fixed
// pseudo-random data, as FNV-1a hashes of the bytes. Refactors of these files must keep every
// byte: GGUF files written before and after must be identical. The inputs use integer arithmetic
// and + - * only, so they are the same on every machine and standard library.
// Not here: error bounds (test_quantize.cpp) or agreement with the decoders (test_dot.cpp).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "quant/dot.h"
#include "quant/half.h"
#include "quant/quantize.h"

namespace ds4 {
namespace {

struct Fnv {
  uint64_t h = 1469598103934665603ull;
  void add(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
};

struct SplitMix {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float uniform() { return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f); }  // [0, 1)
};

// Blocks of several shapes: uniform, cubed (heavy-tailed), mostly zero, constant, wide range.
std::vector<float> test_blocks(int n_blocks, uint64_t seed) {
  SplitMix r{seed};
  std::vector<float> x(static_cast<size_t>(n_blocks) * kQK_K);
  for (int b = 0; b < n_blocks; ++b)
    for (int i = 0; i < kQK_K; ++i) {
      const float u = 2 * r.uniform() - 1;
      float v = u;
      switch (b % 5) {
        case 1: v = u * u * u * 8; break;
        case 2: v = (r.next() % 8 == 0) ? u : 0.0f; break;
        case 3: v = 0.37f; break;
        case 4: v = u * static_cast<float>(1 << (b % 20)); break;
      }
      x[static_cast<size_t>(b) * kQK_K + i] = v;
    }
  return x;
}

template <typename Block, void (*Quantize)(const float*, Block*, const float*, QuantEffort)>
uint64_t kquant_hash() {
  constexpr int kBlocks = 200;
  const std::vector<float> x = test_blocks(kBlocks, 42);
  std::vector<float> importance(kQK_K);
  SplitMix r{7};
  for (float& w : importance) w = r.uniform() + 0.01f;
  Fnv f;
  for (QuantEffort effort : {QuantEffort::best, QuantEffort::fast})
    for (const float* imp : {static_cast<const float*>(nullptr), static_cast<const float*>(importance.data())})
      for (int b = 0; b < kBlocks; ++b) {
        Block y;
        std::memset(&y, 0, sizeof y);
        Quantize(x.data() + static_cast<size_t>(b) * kQK_K, &y, imp, effort);
        f.add(&y, sizeof y);
      }
  return f.h;
}

TEST(GoldenBytes, KQuantQuantizers) {
  const uint64_t q2 = kquant_hash<BlockQ2_K, quantize_block_q2_K>();
  const uint64_t q4 = kquant_hash<BlockQ4_K, quantize_block_q4_K>();
  EXPECT_EQ(q2, 15843336403363955183ull);
  EXPECT_EQ(q4, 11049169783966030598ull);
}

TEST(GoldenBytes, HalfPrecisionReferenceDots) {
  const std::vector<float> w = test_blocks(8, 3), act = test_blocks(8, 4);
  const int64_t n = static_cast<int64_t>(w.size());
  std::vector<uint16_t> h16(w.size()), b16(w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    h16[i] = f32_to_f16(w[i]);
    b16[i] = f32_to_bf16(w[i]);
  }
  Fnv f;
  for (int64_t len : {int64_t{1}, int64_t{7}, int64_t{256}, n}) {
    const float a = dot_f16_ref(h16.data(), act.data(), len), b = dot_bf16_ref(b16.data(), act.data(), len);
    f.add(&a, sizeof a);
    f.add(&b, sizeof b);
  }
  EXPECT_EQ(f.h, 591369077373329051ull);
}

}  // namespace
}  // namespace ds4
