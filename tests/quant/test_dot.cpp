// test_dot.cpp — dot products: reference == dequantized weights · dequantized activations (within
// float rounding), AVX2 == reference (bit-identical for quantized types, float bound otherwise),
// on encoder output and on arbitrary bytes; kernel tables and the matvec helper.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "quant/dot.h"
#include "quant/half.h"
#include "quant_test_util.h"

namespace ds4 {
namespace {

using test::encode;
using test::gaussian;

constexpr GgmlType kQuantTypes[] = {GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q4_K, GgmlType::IQ2_XXS};
constexpr GgmlType kFloatTypes[] = {GgmlType::F16, GgmlType::BF16, GgmlType::F32};

std::vector<uint8_t> make_act(GgmlType wtype, const std::vector<float>& x) {
  const ActFormat f = *act_format_for(wtype);
  std::vector<uint8_t> a(*act_bytes(f, static_cast<int64_t>(x.size())));
  EXPECT_TRUE(quantize_activation(f, x.data(), a.data(), static_cast<int64_t>(x.size())).ok());
  return a;
}

// The activation as the dot product sees it, decoded to floats.
std::vector<float> act_values(GgmlType wtype, const std::vector<uint8_t>& a, size_t n) {
  std::vector<float> v(n);
  switch (*act_format_for(wtype)) {
    case ActFormat::F32:
      std::memcpy(v.data(), a.data(), n * 4);
      break;
    case ActFormat::Q8_0: {
      const auto* b = reinterpret_cast<const BlockQ8_0Act*>(a.data());
      for (size_t i = 0; i < n; ++i) v[i] = b[i / 32].d * b[i / 32].qs[i % 32];
      break;
    }
    case ActFormat::Q8_K:
      EXPECT_TRUE(dequantize_row(GgmlType::Q8_K, a.data(), v.data(), static_cast<int64_t>(n)).ok());
      break;
  }
  return v;
}

bool same_float(float a, float b) { return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b) || (std::isnan(a) && std::isnan(b)); }

TEST(Dot, ActivationFormats) {
  EXPECT_EQ(act_format_for(GgmlType::Q8_0), ActFormat::Q8_0);
  EXPECT_EQ(act_format_for(GgmlType::Q2_K), ActFormat::Q8_K);
  EXPECT_EQ(act_format_for(GgmlType::Q4_K), ActFormat::Q8_K);
  EXPECT_EQ(act_format_for(GgmlType::IQ2_XXS), ActFormat::Q8_K);
  EXPECT_EQ(act_format_for(GgmlType::F16), ActFormat::F32);
  EXPECT_EQ(act_format_for(GgmlType::BF16), ActFormat::F32);
  EXPECT_FALSE(act_format_for(GgmlType::Q8_K).has_value());
  EXPECT_FALSE(act_format_for(GgmlType::I32).has_value());
  EXPECT_EQ(act_bytes(ActFormat::Q8_K, 512), 584u);
  EXPECT_EQ(act_bytes(ActFormat::Q8_0, 64), 72u);
  EXPECT_FALSE(act_bytes(ActFormat::Q8_K, 100).has_value());
  std::vector<float> x(100);
  std::vector<uint8_t> out(1000);
  EXPECT_EQ(quantize_activation(ActFormat::Q8_0, x.data(), out.data(), 100).code(), StatusCode::invalid_argument);
}

// Reference dot == Σ dequant(w)[i] * act[i] computed in double. The reference sums integers exactly
// per block, so the only differences are float roundings: per-block scale products and the block
// accumulation, each <= a few 2^-24 relative to Σ|w x|.
TEST(Dot, ReferenceEqualsDequantizedProduct) {
  for (GgmlType t : kQuantTypes) {
    for (int64_t n : {256, 1024, 4096}) {
      const auto w = encode(t, gaussian(n, 20 + static_cast<uint32_t>(n)));
      const auto x = gaussian(n, 21);
      const auto a = make_act(t, x);
      std::vector<float> wd(n);
      ASSERT_TRUE(dequantize_row(t, w.data(), wd.data(), n).ok());
      const auto xv = act_values(t, a, n);
      double exact = 0, mag = 0;
      for (int64_t i = 0; i < n; ++i) {
        exact += static_cast<double>(wd[i]) * xv[i];
        mag += std::fabs(static_cast<double>(wd[i]) * xv[i]);
      }
      const float got = dot_kernels(KernelLevel::scalar).for_type(t)(w.data(), a.data(), n);
      EXPECT_NEAR(got, exact, 1e-5 * mag + 1e-6) << type_name(t) << " n=" << n;
      // And the activation quantization keeps the dot close to the float one (8-bit activations).
      double fdot = 0;
      for (int64_t i = 0; i < n; ++i) fdot += static_cast<double>(wd[i]) * x[i];
      EXPECT_NEAR(got, fdot, 0.02 * mag) << type_name(t);
    }
  }
  for (GgmlType t : kFloatTypes) {
    for (int64_t n : {1, 7, 33, 100, 4096}) {
      const auto w = encode(t, gaussian(n, 22));
      const auto x = gaussian(n, 23);
      std::vector<float> wd(n);
      ASSERT_TRUE(dequantize_row(t, w.data(), wd.data(), n).ok());
      double exact = 0, mag = 0;
      for (int64_t i = 0; i < n; ++i) {
        exact += static_cast<double>(wd[i]) * x[i];
        mag += std::fabs(static_cast<double>(wd[i]) * x[i]);
      }
      const float got = dot_kernels(KernelLevel::scalar).for_type(t)(w.data(), x.data(), n);
      EXPECT_NEAR(got, exact, static_cast<double>(n) * std::ldexp(1.0, -23) * mag) << type_name(t);
      // F32 accumulates in double (ds4's matvec_f32): the result is the double sum rounded once.
      if (t == GgmlType::F32) {
        EXPECT_EQ(got, static_cast<float>(exact)) << n;
      }
    }
  }
}

class DotAvx2 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (detect_kernel_level() != KernelLevel::avx2) GTEST_SKIP() << "CPU without AVX2/FMA/F16C";
  }
  const DotKernels& ref_ = dot_kernels(KernelLevel::scalar);
  const DotKernels& fast_ = dot_kernels(KernelLevel::avx2);
};

TEST_F(DotAvx2, QuantizedKernelsAreBitIdenticalOnEncodedRows) {
  for (GgmlType t : kQuantTypes) {
    for (int64_t n : {256, 512, 2048, 4096 + 256 + 32 * 0}) {
      for (uint32_t seed = 0; seed < 4; ++seed) {
        const auto w = encode(t, gaussian(n, 30 + seed, 0.02f));
        const auto a = make_act(t, gaussian(n, 40 + seed, 3.0f));
        const float r = ref_.for_type(t)(w.data(), a.data(), n);
        const float f = fast_.for_type(t)(w.data(), a.data(), n);
        ASSERT_TRUE(same_float(r, f)) << type_name(t) << " n=" << n << " ref " << r << " avx2 " << f;
      }
    }
  }
  // Q8_0 rows whose block count is not a multiple of 4 (tail path).
  for (int64_t n : {32, 96, 160}) {
    const auto w = encode(GgmlType::Q8_0, gaussian(n, 50));
    const auto a = make_act(GgmlType::Q8_0, gaussian(n, 51));
    ASSERT_TRUE(same_float(ref_.q8_0(w.data(), a.data(), n), fast_.q8_0(w.data(), a.data(), n))) << n;
  }
}

// Arbitrary bytes (every scale bit pattern, Q8_0 quants of -128, every IQ2 index/sign/scale) — the
// file is untrusted; the kernels must still agree with the reference and never fault. Weight rows
// are placed at odd addresses to exercise unaligned loads.
TEST_F(DotAvx2, QuantizedKernelsAreBitIdenticalOnRandomBytes) {
  std::mt19937 rng(60);
  for (GgmlType t : kQuantTypes) {
    const int64_t n = 1024;
    const size_t bytes = *type_bytes(t, n);
    std::vector<uint8_t> storage(bytes + 1);
    for (int iter = 0; iter < 50; ++iter) {
      for (auto& b : storage) b = static_cast<uint8_t>(rng());
      // Keep the f16 scales finite and moderate so the comparison is about the sums, not inf/NaN.
      const size_t bb = *type_bytes(t, t == GgmlType::Q8_0 ? 32 : 256);
      for (size_t off = 0; off < bytes; off += bb) {
        const size_t d_off = t == GgmlType::Q2_K ? 80 : 0;
        for (int k = 0; k < (t == GgmlType::Q2_K || t == GgmlType::Q4_K ? 2 : 1); ++k)
          storage[1 + off + d_off + 2 * k + 1] &= 0x3f;  // exponent < 16: |value| < 2
      }
      const auto a = make_act(t, gaussian(n, 70 + iter));
      const float r = ref_.for_type(t)(storage.data() + 1, a.data(), n);
      const float f = fast_.for_type(t)(storage.data() + 1, a.data(), n);
      ASSERT_TRUE(same_float(r, f)) << type_name(t) << " iter " << iter << " ref " << r << " avx2 " << f;
    }
  }
}

// Activation blocks over the full int8 range (-128 included, which quantize_act_* only produces
// for degenerate inputs): the AVX2 kernels must still agree exactly.
TEST_F(DotAvx2, QuantizedKernelsAreBitIdenticalForFullRangeActivations) {
  std::mt19937 rng(65);
  const int64_t n = 1024;
  for (int iter = 0; iter < 20; ++iter) {
    std::vector<BlockQ8_K> k(n / 256);
    for (auto& b : k) {
      b.d = 0.01f * static_cast<float>(iter + 1);
      for (auto& q : b.qs) q = static_cast<int8_t>(iter % 2 ? -128 : static_cast<int>(rng() % 256) - 128);
      for (int j = 0; j < 16; ++j) {
        int sum = 0;
        for (int i = 0; i < 16; ++i) sum += b.qs[16 * j + i];
        b.bsums[j] = static_cast<int16_t>(sum);
      }
    }
    std::vector<BlockQ8_0Act> a0(n / 32);
    for (auto& b : a0) {
      b.d = 0.5f;
      for (auto& q : b.qs) q = static_cast<int8_t>(iter % 2 ? -128 : static_cast<int>(rng() % 256) - 128);
    }
    for (GgmlType t : kQuantTypes) {
      std::vector<uint8_t> w(*type_bytes(t, n));
      for (auto& v : w) v = static_cast<uint8_t>(iter % 2 ? 0x80 : rng());
      const size_t bb = *type_bytes(t, t == GgmlType::Q8_0 ? 32 : 256);
      for (size_t off = 0; off < w.size(); off += bb) {  // finite, moderate f16 scales
        const size_t d_off = t == GgmlType::Q2_K ? 80 : 0;
        for (int s = 0; s < (t == GgmlType::Q2_K || t == GgmlType::Q4_K ? 2 : 1); ++s) w[off + d_off + 2 * s + 1] &= 0x3f;
      }
      const void* act = t == GgmlType::Q8_0 ? static_cast<const void*>(a0.data()) : k.data();
      const float r = ref_.for_type(t)(w.data(), act, n);
      const float f = fast_.for_type(t)(w.data(), act, n);
      ASSERT_TRUE(same_float(r, f)) << type_name(t) << " iter " << iter << " ref " << r << " avx2 " << f;
    }
  }
}

// Completely arbitrary bytes, f16 scales included (inf, NaN, subnormal): decoding and every dot
// kernel must run without faults, and for the quantized types the AVX2 result must equal the
// reference (NaN matching NaN).
TEST_F(DotAvx2, ArbitraryBytesIncludingNonFiniteScales) {
  std::mt19937 rng(66);
  const int64_t n = 512;
  for (int iter = 0; iter < 40; ++iter) {
    for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q4_K, GgmlType::IQ2_XXS, GgmlType::F16,
                       GgmlType::BF16, GgmlType::F32}) {
      std::vector<uint8_t> w(*type_bytes(t, n));
      for (auto& v : w) v = static_cast<uint8_t>(rng());
      if (iter % 4 == 0 && (t == GgmlType::Q8_0 || t == GgmlType::IQ2_XXS || t == GgmlType::Q4_K))
        w[1] = 0x7c;  // first block scale = +inf (low byte random: inf or NaN)
      std::vector<float> dec(n);
      ASSERT_TRUE(dequantize_row(t, w.data(), dec.data(), n).ok());
      const auto a = make_act(t, gaussian(n, 200 + iter));
      const float r = ref_.for_type(t)(w.data(), a.data(), n);
      const float f = fast_.for_type(t)(w.data(), a.data(), n);
      if (t == GgmlType::F16 || t == GgmlType::BF16 || t == GgmlType::F32) {
        // Random float bytes reach ±3e38: whether a partial sum overflows depends on the summation
        // order, so only "ran without faults" is meaningful here (bounds are tested above).
        (void)r;
        (void)f;
      } else {
        ASSERT_TRUE(same_float(r, f)) << type_name(t) << " iter " << iter << " ref " << r << " avx2 " << f;
      }
    }
  }
}

// Float kernels sum in another order: |fast - ref| <= 2 n 2^-24 Σ|w x| (F32: one float rounding).
TEST_F(DotAvx2, FloatKernelsWithinSummationBound) {
  for (GgmlType t : kFloatTypes) {
    for (int64_t n : {1, 5, 8, 17, 31, 64, 100, 4096, 16384}) {
      const auto w = encode(t, gaussian(n, 80));
      const auto x = gaussian(n, 81);
      std::vector<float> wd(n);
      ASSERT_TRUE(dequantize_row(t, w.data(), wd.data(), n).ok());
      double mag = 0;
      for (int64_t i = 0; i < n; ++i) mag += std::fabs(static_cast<double>(wd[i]) * x[i]);
      const float r = ref_.for_type(t)(w.data(), x.data(), n);
      const float f = fast_.for_type(t)(w.data(), x.data(), n);
      EXPECT_NEAR(f, r, 2.0 * n * std::ldexp(1.0, -24) * mag) << type_name(t) << " n=" << n;
      if (t == GgmlType::F32) {  // both sum in double: at most one float rounding apart
        EXPECT_LE(std::fabs(f - r), std::ldexp(std::fabs(r), -23) + 1e-30) << " n=" << n;
      }
    }
  }
}

// Hand-computed: the IQ2_XXS block of test_dequant (group 0: signed grid bytes summing to
// -43+6*8-8 = -3, 64, -25-25+6*8 = -2, -(8+25+8+8+25+43+43+43) = -203; total -144, ls = 3) against
// a Q8_K activation of d = 1, qs = 1 on group 0: 0.125 * 1 * (2*3+1) * -144 = -126. A Q2_K block
// with d = 1, dmin = 0.5, scale byte 0x21 on sub-block 0 and q = 3 on element 0, activation qs = 2
// on sub-block 0: isum = 1 * 3*2 = 6, summs = bsums[0]*2 = 32*2 = 64 -> 6 - 0.5*64 = -26.
TEST(Dot, HandComputedBlocks) {
  BlockIQ2_XXS w{};
  w.d = 0x3c00;
  const uint32_t w0 = 1u | (0u << 8) | (2u << 16) | (255u << 24);
  const uint32_t w1 = 1u | (0u << 7) | (3u << 14) | (127u << 21) | (3u << 28);
  std::memcpy(&w.qs[0], &w0, 4);
  std::memcpy(&w.qs[2], &w1, 4);
  BlockQ8_K a{};
  a.d = 1.0f;
  for (int i = 0; i < 32; ++i) a.qs[i] = 1;
  a.bsums[0] = a.bsums[1] = 16;
  for (const DotKernels* k : {&dot_kernels(KernelLevel::scalar), &best_dot_kernels()})
    EXPECT_EQ(k->iq2_xxs(&w, &a, 256), -126.0f);

  BlockQ2_K q{};
  q.d = 0x3c00;
  q.dmin = 0x3800;
  q.scales[0] = 0x21;
  q.qs[0] = 3;
  BlockQ8_K b{};
  b.d = 1.0f;
  for (int i = 0; i < 16; ++i) b.qs[i] = 2;
  b.bsums[0] = 32;
  for (const DotKernels* k : {&dot_kernels(KernelLevel::scalar), &best_dot_kernels()})
    EXPECT_EQ(k->q2_K(&q, &b, 256), -26.0f);
}

TEST(Dot, ZeroWeightsOrActivationsGiveZero) {
  const int64_t n = 1024;
  const auto x = gaussian(n, 95);
  const std::vector<float> zx(n, 0.0f);
  for (GgmlType t : kQuantTypes) {
    const auto w = encode(t, gaussian(n, 96));
    const auto zw = encode(t, zx);
    for (const DotKernels* k : {&dot_kernels(KernelLevel::scalar), &best_dot_kernels()}) {
      EXPECT_EQ(k->for_type(t)(zw.data(), make_act(t, x).data(), n), 0.0f) << type_name(t);
      EXPECT_EQ(k->for_type(t)(w.data(), make_act(t, zx).data(), n), 0.0f) << type_name(t);
    }
  }
}

TEST(Dot, KernelTables) {
  const DotKernels& s = dot_kernels(KernelLevel::scalar);
  EXPECT_EQ(s.level, KernelLevel::scalar);
  EXPECT_EQ(s.for_type(GgmlType::Q2_K), &dot_q2_K_ref);
  EXPECT_EQ(s.for_type(GgmlType::Q8_K), nullptr);
  EXPECT_EQ(s.for_type(GgmlType::I32), nullptr);
  EXPECT_EQ(best_dot_kernels().level, detect_kernel_level());
}

TEST(Dot, MatvecMatchesSingleDotsForSeveralVectors) {
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::IQ2_XXS, GgmlType::Q2_K, GgmlType::Q4_K, GgmlType::F16}) {
    const int rows = 9, cols = 512, nvec = 3;
    const uint64_t rb = *type_bytes(t, cols);
    std::vector<uint8_t> w(rows * rb);
    const auto wf = gaussian(rows * cols, 90);
    ASSERT_TRUE(quantize_rows(t, wf.data(), w.data(), rows, cols).ok());
    const ActFormat af = *act_format_for(t);
    const uint64_t ab = *act_bytes(af, cols);
    std::vector<uint8_t> acts(nvec * ab);
    for (int v = 0; v < nvec; ++v) {
      const auto x = gaussian(cols, 91 + v);
      ASSERT_TRUE(quantize_activation(af, x.data(), acts.data() + v * ab, cols).ok());
    }
    for (const DotKernels* k : {&dot_kernels(KernelLevel::scalar), &best_dot_kernels()}) {
      std::vector<float> out(nvec * rows, -1.0f);
      MatvecParams p;
      p.type = t;
      p.weights = w.data();
      p.row_stride = rb;
      p.n_cols = cols;
      p.row_begin = 2;
      p.row_end = 7;
      p.act = acts.data();
      p.act_stride = ab;
      p.n_vec = nvec;
      p.out = out.data();
      p.out_stride = rows;
      ASSERT_TRUE(matvec(*k, p).ok());
      for (int v = 0; v < nvec; ++v)
        for (int r = 0; r < rows; ++r) {
          const float expect = (r >= 2 && r < 7) ? k->for_type(t)(w.data() + r * rb, acts.data() + v * ab, cols) : -1.0f;
          ASSERT_TRUE(same_float(out[v * rows + r], expect)) << type_name(t) << " v" << v << " r" << r;
        }
    }
  }
}

TEST(Dot, MatvecRejectsBadParams) {
  std::vector<uint8_t> w(4096);
  std::vector<float> out(16);
  MatvecParams p;
  p.type = GgmlType::Q2_K;
  p.weights = w.data();
  p.row_stride = 84;
  p.n_cols = 200;  // not a whole block
  p.row_end = 1;
  p.act = w.data();
  p.out = out.data();
  EXPECT_EQ(matvec(best_dot_kernels(), p).code(), StatusCode::invalid_argument);
  p.n_cols = 256;
  p.row_stride = 10;
  EXPECT_EQ(matvec(best_dot_kernels(), p).code(), StatusCode::invalid_argument);
  p.row_stride = 84;
  p.type = GgmlType::I32;
  EXPECT_EQ(matvec(best_dot_kernels(), p).code(), StatusCode::unsupported);
  p.type = GgmlType::Q2_K;
  p.weights = nullptr;
  EXPECT_EQ(matvec(best_dot_kernels(), p).code(), StatusCode::invalid_argument);
}

}  // namespace
}  // namespace ds4
