// half.h — exact scalar conversions between float32 and the 16-bit float formats (FORMATS.md §2.2).
//
// f16 = IEEE binary16, bf16 = the high half of a binary32. Conversions to 16 bits round to nearest,
// ties to even, handle subnormals, overflow to ±inf, and turn NaN into a quiet NaN (f16: 0x7e00|sign,
// bf16: (bits >> 16) | 0x0040), bit-for-bit as ds4 and its quantizer do. Inline because every block
// decoder calls them; portable C++ (no F16C) so results never depend on the CPU. Row helpers and
// vectorised versions live elsewhere (dequant.cpp, dot_avx2.cpp).
#pragma once

#include <bit>
#include <cstdint>

namespace ds4 {

constexpr float f16_to_f32(uint16_t h) {
  // Move exponent+mantissa into f32 position and rebias (15 -> 127). Inf/NaN need the exponent
  // forced to 255 (payload kept); subnormals are renormalised exactly by one float subtraction:
  // (1 + mant/1024) * 2^-14 - 2^-14 = mant * 2^-24.
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t bits = static_cast<uint32_t>(h & 0x7fffu) << 13;
  const uint32_t exp = bits & 0x0f800000u;
  bits += (127u - 15u) << 23;
  if (exp == 0x0f800000u) {
    bits += (128u - 16u) << 23;  // inf / NaN
  } else if (exp == 0) {
    bits += 1u << 23;  // subnormal or zero
    const float f = std::bit_cast<float>(bits) - std::bit_cast<float>(113u << 23);
    return std::bit_cast<float>(std::bit_cast<uint32_t>(f) | sign);
  }
  return std::bit_cast<float>(bits | sign);
}

constexpr uint16_t f32_to_f16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t a = bits & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;   // NaN -> quiet NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to inf (65520 is a tie to the odd 65504)
  if (a < 0x38800000u) {                        // below 2^-14: f16 subnormal or zero
    if (a < 0x33000000u) return sign;           // <= 2^-25 rounds to zero (2^-25 exactly: tie to even 0)
    const uint32_t e = a >> 23;                 // 102..112
    const uint32_t mant = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e;            // value in units of 2^-24 is mant >> shift
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (h & 1u))) ++h;  // may carry into the smallest normal: correct
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = (((a >> 23) - 112u) << 10) | ((a >> 13) & 0x3ffu);
  const uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // carry into the exponent is correct
  return static_cast<uint16_t>(sign | h);
}

constexpr float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

constexpr uint16_t f32_to_bf16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

// Round-trip a float through the 16-bit format (what storing and reloading does).
constexpr float round_f16(float f) { return f16_to_f32(f32_to_f16(f)); }
constexpr float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

// Largest finite f16 (65504): quantizers clamp their block scales to it so a block never decodes to inf/NaN.
inline constexpr float kF16Max = 65504.0f;

}  // namespace ds4
