// rng.h — the generator's deterministic random numbers: splitmix64 seeding, xoshiro256**, uniform
// doubles and a normal sampler built only from IEEE-exact operations (+ − × ÷ sqrt).
//
// Why our own: std::normal_distribution and libm's log/cos are not specified bit-for-bit, so two
// machines could write different models for the same seed. Marsaglia's polar method needs only a
// logarithm, which ln() below computes with frexp (exact) and an atanh series (basic ops only).
// Tools compile with -ffp-contract=off so no FMA contraction changes the rounding.
// Deliberately not here: which distribution each tensor uses (payload.cpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

namespace ds4::gen {

inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// FNV-1a of a tensor name: with the model seed it gives each tensor its own stream, so the bytes
// of a tensor do not depend on which thread generates it or in what order.
inline uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// Natural log for x > 0 using only exact-rounded operations: x = m·2^e (m in [√½, √2)),
// ln m = 2·atanh(s), s = (m−1)/(m+1), |s| ≤ 0.1716; 24 series terms reach double precision.
inline double ln(double x) {
  int e = 0;
  double m = std::frexp(x, &e);  // m in [0.5, 1)
  if (m < 0.70710678118654752440) {
    m *= 2.0;
    e -= 1;
  }
  const double s = (m - 1.0) / (m + 1.0);
  const double s2 = s * s;
  double term = s, sum = 0.0;
  for (int k = 1; k <= 47; k += 2) {
    sum += term / k;
    term *= s2;
  }
  return 2.0 * sum + e * 0.69314718055994530942;
}

class Rng {
 public:
  explicit Rng(uint64_t seed) {
    uint64_t st = seed;
    for (auto& w : s_) w = splitmix64(st);
  }
  // A stream for one tensor of a model.
  static Rng for_tensor(uint64_t model_seed, std::string_view tensor_name) {
    uint64_t st = model_seed ^ fnv1a64(tensor_name);
    return Rng(splitmix64(st));
  }

  uint64_t next() {  // xoshiro256**
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  uint32_t below(uint32_t n) { return static_cast<uint32_t>((next() >> 32) * n >> 32); }  // [0, n)

  double normal() {  // N(0, 1), Marsaglia polar method
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u, v, s;
    do {
      u = 2.0 * uniform() - 1.0;
      v = 2.0 * uniform() - 1.0;
      s = u * u + v * v;
    } while (s >= 1.0 || s == 0.0);
    const double f = std::sqrt(-2.0 * ln(s) / s);
    spare_ = v * f;
    has_spare_ = true;
    return u * f;
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
  double spare_ = 0;
  bool has_spare_ = false;
};

}  // namespace ds4::gen
