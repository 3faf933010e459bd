// row_pack.cpp — see row_pack.h. Every candidate encoding is verified by decoding it with the
// decoder's own arithmetic and comparing float32 bits, so a group is only ever stored narrower when
// that is exactly lossless; otherwise the next wider form is tried, ending at raw f32.
#include "runtime/row_pack.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <string>

#include "quant/half.h"

namespace ds4::runtime {
namespace {

enum Tag : uint8_t { kF32 = 0, kF16 = 1, kE4M3 = 2, kE2M1 = 3, kZero = 4 };
constexpr int kMinExp = -126, kMaxExp = 127;  // 2^k must be a normal float

constexpr std::array<float, 256> make_e4m3() {
  std::array<float, 256> t{};
  for (int c = 0; c < 256; ++c) {
    const int e = (c >> 3) & 15, m = c & 7;
    float v = e == 0 ? static_cast<float>(m) / 512.0f : (1.0f + static_cast<float>(m) / 8.0f);
    for (int i = 0; i < e - 7; ++i) v *= 2.0f;
    for (int i = 0; i < 7 - e && e != 0; ++i) v *= 0.5f;
    t[c] = (c & 0x80) ? -v : v;
  }
  return t;
}
constexpr std::array<float, 256> kE4M3Table = make_e4m3();
constexpr float kE2M1Mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

inline bool e4m3_nan(uint8_t c) { return (c & 0x7f) == 0x7f; }
inline float e2m1_value(uint8_t nib) { return (nib & 8) ? -kE2M1Mag[nib & 7] : kE2M1Mag[nib & 7]; }
inline float pow2(int k) { return std::bit_cast<float>(static_cast<uint32_t>(k + 127) << 23); }
inline uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }

// Unbiased exponent of the largest magnitude among normal finite values; false when some value is
// inf/NaN/f32-subnormal (never narrower than f16 then) or all are zero.
bool max_exponent(const float* x, int64_t n, int* e_out) {
  uint32_t amax = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t a = bits_of(x[i]) & 0x7fffffffu;
    if (a >= 0x7f800000u || (a != 0 && a < 0x00800000u)) return false;
    amax = std::max(amax, a);
  }
  if (amax == 0) return false;
  *e_out = static_cast<int>(amax >> 23) - 127;
  return true;
}

// E4M3FN code of x / 2^k, or -1 when that is not exactly representable.
int e4m3_code(float x, int k) {
  const uint32_t b = bits_of(x);
  const uint32_t sign = (b >> 31) << 7, a = b & 0x7fffffffu;
  int code;
  if (a == 0) {
    code = 0;
  } else {
    const int ep = static_cast<int>(a >> 23) - 127 - k;
    const uint32_t mant = a & 0x7fffffu;
    if (ep >= -6 && ep <= 8) {
      if (mant & 0xfffffu) return -1;
      code = ((ep + 7) << 3) | static_cast<int>(mant >> 20);
      if (code == 0x7f) return -1;
    } else if (ep >= -9 && ep <= -7) {
      const uint32_t sig = mant | 0x800000u;
      const int shift = 23 - (ep + 9);
      if (sig & ((1u << shift) - 1u)) return -1;
      code = static_cast<int>(sig >> shift);
    } else {
      return -1;
    }
  }
  code |= static_cast<int>(sign);
  if (bits_of(kE4M3Table[code] * pow2(k)) != b) return -1;
  return code;
}

// E2M1 nibble of x / 2^k, or -1.
int e2m1_code(float x, int k) {
  const uint32_t b = bits_of(x);
  const int sign = static_cast<int>(b >> 31) << 3;
  const uint32_t a = b & 0x7fffffffu;
  int idx = -1;
  if (a == 0) {
    idx = 0;
  } else {
    const int ep = static_cast<int>(a >> 23) - 127 - k;
    const uint32_t mant = a & 0x7fffffu;
    if (mant != 0 && mant != 0x400000u) return -1;
    const bool half = mant != 0;
    if (ep == -1 && !half) idx = 1;
    else if (ep == 0) idx = half ? 3 : 2;
    else if (ep == 1) idx = half ? 5 : 4;
    else if (ep == 2) idx = half ? 7 : 6;
    else return -1;
  }
  const int code = idx | sign;
  if (bits_of(e2m1_value(static_cast<uint8_t>(code)) * pow2(k)) != b) return -1;
  return code;
}

bool try_e4m3(const float* x, int64_t g, uint8_t* body) {
  int e;
  if (!max_exponent(x, g, &e)) return false;
  for (int k : {e - 8, e - 7}) {
    if (k < kMinExp || k > kMaxExp) continue;
    bool ok = true;
    for (int64_t i = 0; i < g && ok; ++i) {
      const int c = e4m3_code(x[i], k);
      if (c < 0) ok = false;
      else body[1 + i] = static_cast<uint8_t>(c);
    }
    if (ok) {
      body[0] = static_cast<uint8_t>(static_cast<int8_t>(k));
      return true;
    }
  }
  return false;
}

// Sub-blocks of 32 values, each with its own exponent (FP4 blocks are 32 wide, §5.5).
bool try_e2m1(const float* x, int64_t g, uint8_t* body) {
  const int64_t nsub = (g + 31) / 32;
  uint8_t* codes = body + nsub;
  std::memset(codes, 0, static_cast<size_t>((g + 1) / 2));
  for (int64_t s = 0; s < nsub; ++s) {
    const int64_t lo = s * 32, n = std::min<int64_t>(32, g - lo);
    int e;
    int chosen = 0;
    bool found = false;
    if (!max_exponent(x + lo, n, &e)) {
      // All zero (of either sign) is fine with any exponent; anything else is not E2M1.
      for (int64_t i = 0; i < n; ++i)
        if ((bits_of(x[lo + i]) & 0x7fffffffu) != 0) return false;
      e = 2;
    }
    for (int k : {e - 2, e - 1}) {
      if (k < kMinExp || k > kMaxExp) continue;
      bool ok = true;
      for (int64_t i = 0; i < n && ok; ++i) ok = e2m1_code(x[lo + i], k) >= 0;
      if (ok) {
        chosen = k;
        found = true;
        break;
      }
    }
    if (!found) return false;
    body[s] = static_cast<uint8_t>(static_cast<int8_t>(chosen));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t j = lo + i;
      codes[j / 2] |= static_cast<uint8_t>(e2m1_code(x[j], chosen) << ((j & 1) * 4));
    }
  }
  return true;
}

bool try_f16(const float* x, int64_t g, uint8_t* body) {
  for (int64_t i = 0; i < g; ++i) {
    const uint16_t h = f32_to_f16(x[i]);
    if (bits_of(f16_to_f32(h)) != bits_of(x[i])) return false;
    std::memcpy(body + 2 * i, &h, 2);
  }
  return true;
}

void pack_group(const float* x, int64_t g, std::vector<uint8_t>& out) {
  uint8_t body[1 + 4 * kPackGroup];
  bool zero = true;
  for (int64_t i = 0; i < g && zero; ++i) zero = bits_of(x[i]) == 0;
  auto emit = [&](Tag t, size_t n) {
    out.push_back(t);
    out.insert(out.end(), body, body + n);
  };
  if (zero) return emit(kZero, 0);
  const int64_t nsub = (g + 31) / 32;
  if (try_e2m1(x, g, body)) return emit(kE2M1, static_cast<size_t>(nsub + (g + 1) / 2));
  if (try_e4m3(x, g, body)) return emit(kE4M3, static_cast<size_t>(1 + g));
  if (try_f16(x, g, body)) return emit(kF16, static_cast<size_t>(2 * g));
  std::memcpy(body, x, static_cast<size_t>(4 * g));
  emit(kF32, static_cast<size_t>(4 * g));
}

Status bad(size_t at, const std::string& why) {
  return invalid_data("compact rows: " + why + " at byte " + std::to_string(at));
}

}  // namespace

void pack_rows(std::span<const float> rows, int64_t width, std::vector<uint8_t>& out) {
  if (width <= 0) return;
  const int64_t n_rows = static_cast<int64_t>(rows.size()) / width;
  for (int64_t r = 0; r < n_rows; ++r)
    for (int64_t lo = 0; lo < width; lo += kPackGroup)
      pack_group(rows.data() + r * width + lo, std::min<int64_t>(kPackGroup, width - lo), out);
}

Status unpack_rows(std::span<const uint8_t> in, int64_t width, std::span<float> rows) {
  if (width <= 0 || rows.size() % static_cast<size_t>(width) != 0) return invalid_argument("compact rows: bad width");
  const int64_t n_rows = static_cast<int64_t>(rows.size()) / width;
  size_t pos = 0;
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t lo = 0; lo < width; lo += kPackGroup) {
      const int64_t g = std::min<int64_t>(kPackGroup, width - lo);
      float* x = rows.data() + r * width + lo;
      if (pos >= in.size()) return bad(pos, "truncated (tag)");
      const uint8_t tag = in[pos++];
      const int64_t nsub = (g + 31) / 32;
      size_t need;
      switch (tag) {
        case kF32: need = static_cast<size_t>(4 * g); break;
        case kF16: need = static_cast<size_t>(2 * g); break;
        case kE4M3: need = static_cast<size_t>(1 + g); break;
        case kE2M1: need = static_cast<size_t>(nsub + (g + 1) / 2); break;
        case kZero: need = 0; break;
        default: return bad(pos - 1, "unknown group tag " + std::to_string(tag));
      }
      if (need > in.size() - pos) return bad(pos, "truncated (group body)");
      const uint8_t* b = in.data() + pos;
      switch (tag) {
        case kF32:
          std::memcpy(x, b, need);
          break;
        case kF16:
          for (int64_t i = 0; i < g; ++i) {
            uint16_t h;
            std::memcpy(&h, b + 2 * i, 2);
            x[i] = f16_to_f32(h);
          }
          break;
        case kE4M3: {
          const int k = static_cast<int8_t>(b[0]);
          if (k < kMinExp) return bad(pos, "exponent out of range");
          const float s = pow2(k);
          for (int64_t i = 0; i < g; ++i) {
            if (e4m3_nan(b[1 + i])) return bad(pos + 1 + i, "NaN code");
            x[i] = kE4M3Table[b[1 + i]] * s;
          }
          break;
        }
        case kE2M1: {
          for (int64_t s = 0; s < nsub; ++s) {
            const int k = static_cast<int8_t>(b[s]);
            if (k < kMinExp) return bad(pos + s, "exponent out of range");
            const float sc = pow2(k);
            for (int64_t i = s * 32; i < std::min<int64_t>(g, s * 32 + 32); ++i)
              x[i] = e2m1_value(static_cast<uint8_t>((b[nsub + i / 2] >> ((i & 1) * 4)) & 15)) * sc;
          }
          break;
        }
        case kZero:
          std::memset(x, 0, static_cast<size_t>(4 * g));
          break;
      }
      pos += need;
    }
  }
  if (pos != in.size()) return bad(pos, "trailing bytes");
  return Status::Ok();
}

}  // namespace ds4::runtime
