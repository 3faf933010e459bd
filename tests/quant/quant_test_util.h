// quant_test_util.h — shared helpers of the quant tests: random data, encode+decode round trips.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "quant/dequant.h"
#include "quant/quantize.h"
#include "quant/types.h"

namespace ds4::test {

inline std::vector<float> gaussian(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline std::vector<uint8_t> encode(GgmlType t, const std::vector<float>& x, const QuantizeOptions& o = {}) {
  std::vector<uint8_t> bytes(*type_bytes(t, x.size()));
  Status s = quantize_row(t, x.data(), bytes.data(), static_cast<int64_t>(x.size()), o);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return bytes;
}

inline std::vector<float> decode(GgmlType t, const std::vector<uint8_t>& bytes, size_t n) {
  std::vector<float> out(n);
  Status s = dequantize_row(t, bytes.data(), out.data(), static_cast<int64_t>(n));
  EXPECT_TRUE(s.ok()) << s.to_string();
  return out;
}

inline double rel_rmse(const std::vector<float>& x, const std::vector<float>& y) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
    den += static_cast<double>(x[i]) * x[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace ds4::test
