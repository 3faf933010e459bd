// dequant.cpp — reference decoders of dequant.h, one function per block format.
#include "quant/dequant.h"

#include <cstring>
#include <string>

#include "quant/half.h"
#include "quant/iq2xxs_tables.h"

namespace ds4 {

void dequantize_block_q8_0(const BlockQ8_0& b, float out[kQK8_0]) {
  const float d = f16_to_f32(b.d);
  for (int i = 0; i < kQK8_0; ++i) out[i] = d * static_cast<float>(b.qs[i]);
}

void dequantize_block_q2_K(const BlockQ2_K& b, float out[kQK_K]) {
  const float d = f16_to_f32(b.d);
  const float dmin = f16_to_f32(b.dmin);
  for (int e = 0; e < kQK_K; ++e) {
    const int h = e / 128, r = e % 128, l = r / 32, k = r % 32;
    const int q = (b.qs[32 * h + k] >> (2 * l)) & 3;
    const int j = e / 16;
    out[e] = d * static_cast<float>(b.scales[j] & 15) * static_cast<float>(q) -
             dmin * static_cast<float>(b.scales[j] >> 4);
  }
}

void dequantize_block_q4_K(const BlockQ4_K& b, float out[kQK_K]) {
  const float d = f16_to_f32(b.d);
  const float dmin = f16_to_f32(b.dmin);
  for (int e = 0; e < kQK_K; ++e) {
    const int c = e / 64, r = e % 64;
    const int q = r < 32 ? (b.qs[32 * c + r] & 0x0f) : (b.qs[32 * c + r - 32] >> 4);
    const int j = r < 32 ? 2 * c : 2 * c + 1;
    uint8_t sc, m;
    q4k_scale_min(j, b.scales, &sc, &m);
    out[e] = d * static_cast<float>(sc) * static_cast<float>(q) - dmin * static_cast<float>(m);
  }
}

void dequantize_block_iq2_xxs(const BlockIQ2_XXS& b, float out[kQK_K]) {
  const float d = f16_to_f32(b.d);
  for (int g = 0; g < 8; ++g) {
    uint32_t w[2];
    std::memcpy(w, &b.qs[4 * g], sizeof(w));
    const float db = d * (0.5f + static_cast<float>(w[1] >> 28)) * 0.25f;
    for (int c = 0; c < 4; ++c) {
      const uint64_t grid = kIq2xxsGrid[(w[0] >> (8 * c)) & 0xff];
      const uint8_t signs = kKsignsIq2xs[(w[1] >> (7 * c)) & 127];
      for (int i = 0; i < 8; ++i) {
        const float mag = static_cast<float>((grid >> (8 * i)) & 0xff);
        out[32 * g + 8 * c + i] = db * mag * ((signs >> i) & 1 ? -1.0f : 1.0f);
      }
    }
  }
}

void dequantize_block_q8_K(const BlockQ8_K& b, float out[kQK_K]) {
  for (int i = 0; i < kQK_K; ++i) out[i] = b.d * static_cast<float>(b.qs[i]);
}

namespace {

// Reads block `i` of type B from an unaligned byte stream (the mmap'd file gives no alignment promise
// beyond the GGUF 32-byte tensor alignment, and rows of odd-sized blocks are not 4-aligned).
template <typename B>
B load_block(const uint8_t* src, int64_t i) {
  B b;
  std::memcpy(&b, src + i * static_cast<int64_t>(sizeof(B)), sizeof(B));
  return b;
}

template <typename B, int K, void (*Decode)(const B&, float*)>
void decode_blocks(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / K; ++i) Decode(load_block<B>(src, i), dst + i * K);
}

}  // namespace

Status dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
  auto traits = type_traits(static_cast<uint32_t>(type));
  if (!traits) return unsupported("dequantize: unknown tensor type " + std::to_string(static_cast<uint32_t>(type)));
  if (n < 0 || n % traits->block_elems != 0)
    return invalid_argument("dequantize: " + std::string(traits->name) + " row length " + std::to_string(n) +
                            " is not a multiple of " + std::to_string(traits->block_elems));
  if (n > 0 && (src == nullptr || dst == nullptr)) return invalid_argument("dequantize: null buffer");
  const auto* s = static_cast<const uint8_t*>(src);
  switch (type) {
    case GgmlType::F32:
      if (n > 0) std::memcpy(dst, s, static_cast<size_t>(n) * 4);
      return Status::Ok();
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, s + 2 * i, 2);
        dst[i] = f16_to_f32(h);
      }
      return Status::Ok();
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, s + 2 * i, 2);
        dst[i] = bf16_to_f32(h);
      }
      return Status::Ok();
    case GgmlType::Q8_0:
      decode_blocks<BlockQ8_0, kQK8_0, dequantize_block_q8_0>(s, dst, n);
      return Status::Ok();
    case GgmlType::Q2_K:
      decode_blocks<BlockQ2_K, kQK_K, dequantize_block_q2_K>(s, dst, n);
      return Status::Ok();
    case GgmlType::Q4_K:
      decode_blocks<BlockQ4_K, kQK_K, dequantize_block_q4_K>(s, dst, n);
      return Status::Ok();
    case GgmlType::IQ2_XXS:
      decode_blocks<BlockIQ2_XXS, kQK_K, dequantize_block_iq2_xxs>(s, dst, n);
      return Status::Ok();
    case GgmlType::Q8_K:
      decode_blocks<BlockQ8_K, kQK_K, dequantize_block_q8_K>(s, dst, n);
      return Status::Ok();
    case GgmlType::I32:
      return unsupported("dequantize: i32 is an integer tensor, not a float row");
  }
  return unsupported("dequantize: unhandled tensor type");
}

}  // namespace ds4
