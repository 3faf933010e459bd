// payload.cpp — per-tensor value distributions and their encoding into the stored type.
#include "payload.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "quant/blocks.h"
#include "quant/half.h"
#include "quant/iq2xxs_tables.h"
#include "quant/quantize.h"
#include "rng.h"

namespace ds4::gen {
namespace {

using modelspec::TensorEntry;
using modelspec::TensorKind;

enum class Dist { normal, uniform, expert_ids };
struct Spec {
  Dist dist = Dist::normal;
  double a = 0, b = 1;  // normal: mean, std; uniform: lo, hi
};

Spec spec_of(const TensorEntry& e) {
  switch (e.kind) {
    case TensorKind::attn_norm: case TensorKind::ffn_norm: case TensorKind::attn_q_a_norm:
    case TensorKind::attn_kv_a_norm: case TensorKind::attn_compressor_norm:
    case TensorKind::indexer_compressor_norm: case TensorKind::output_norm: case TensorKind::mtp_enorm:
    case TensorKind::mtp_hnorm: case TensorKind::mtp_norm:
      return {Dist::normal, 1.0, 0.1};
    case TensorKind::hc_attn_scale: case TensorKind::hc_ffn_scale: case TensorKind::output_hc_scale:
    case TensorKind::mtp_hc_head_scale:
      return {Dist::uniform, 0.5, 2.0};
    case TensorKind::hc_attn_base: case TensorKind::hc_ffn_base: case TensorKind::output_hc_base:
    case TensorKind::mtp_hc_head_base:
      return {Dist::normal, 0.0, 0.5};
    case TensorKind::attn_sinks: return {Dist::normal, 0.0, 1.0};
    case TensorKind::attn_compressor_ape: case TensorKind::indexer_compressor_ape: return {Dist::normal, 0.0, 0.5};
    case TensorKind::exp_probs_b: return {Dist::normal, 0.0, 0.1};
    case TensorKind::token_embd: return {Dist::normal, 0.0, 1.0};
    case TensorKind::ffn_gate_tid2eid: return {Dist::expert_ids, 0, 0};
    default:  // every matrix: N(0, 1/fan_in), fan_in = ne0 (the input width of each row)
      return {Dist::normal, 0.0, 1.0 / std::sqrt(static_cast<double>(e.ne[0]))};
  }
}

// Row t of tid2eid [K, V]: K distinct expert ids out of NE (partial Fisher–Yates).
void fill_expert_ids(const TensorEntry& e, uint32_t n_expert, Rng& rng, int32_t* out) {
  const uint64_t k = e.ne[0], v = e.ne[1];
  std::vector<int32_t> perm(n_expert);
  for (uint64_t t = 0; t < v; ++t) {
    std::iota(perm.begin(), perm.end(), 0);
    for (uint64_t i = 0; i < k; ++i) {
      uint32_t j = static_cast<uint32_t>(i) + rng.below(n_expert - static_cast<uint32_t>(i));
      std::swap(perm[i], perm[j]);
      out[t * k + i] = perm[i];
    }
  }
}

// ---- random valid blocks (decoded std ≈ sigma, mean 0) -------------------------------------------

void random_bytes(Rng& rng, uint8_t* p, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t x = rng.next();
    std::memcpy(p + i, &x, 8);
  }
  if (i < n) {
    uint64_t x = rng.next();
    std::memcpy(p + i, &x, n - i);
  }
}

// Q8_0: qs uniform in [−127, 127] has std sqrt((255² − 1)/12) ≈ 73.61.
void random_q8_0(Rng& rng, double sigma, std::span<uint8_t> out) {
  const uint16_t d = f32_to_f16(static_cast<float>(sigma / 73.6116));
  auto* blocks = reinterpret_cast<BlockQ8_0*>(out.data());
  const size_t n = out.size() / sizeof(BlockQ8_0);
  for (size_t b = 0; b < n; ++b) {
    blocks[b].d = d;
    for (int i = 0; i < kQK8_0; ++i) blocks[b].qs[i] = static_cast<int8_t>(static_cast<int>(rng.below(255)) - 127);
  }
}

// Q2_K: x = d·sc·q − dmin·m with q uniform in 0..3 (mean 1.5, var 1.25); sc ∈ {2,4,6,8,10} and
// m = 1.5·sc (≤ 15) with dmin = d make the mean exactly 0; E[sc²] = 44 → std = d·sqrt(55).
void random_q2_k(Rng& rng, double sigma, std::span<uint8_t> out) {
  const uint16_t d = f32_to_f16(static_cast<float>(sigma / std::sqrt(55.0)));
  auto* blocks = reinterpret_cast<BlockQ2_K*>(out.data());
  const size_t n = out.size() / sizeof(BlockQ2_K);
  for (size_t b = 0; b < n; ++b) {
    for (int j = 0; j < 16; ++j) {
      const int sc = 2 * (1 + static_cast<int>(rng.below(5)));
      blocks[b].scales[j] = static_cast<uint8_t>(sc | ((sc * 3 / 2) << 4));
    }
    random_bytes(rng, blocks[b].qs, sizeof(blocks[b].qs));
    blocks[b].d = d;
    blocks[b].dmin = d;
  }
}

// Q4_K: q uniform in 0..15 (mean 7.5, var 21.25); sc ∈ {2,4,6,8}, m = 7.5·sc ≤ 60, dmin = d;
// E[sc²] = 30 → std = d·sqrt(637.5).
void random_q4_k(Rng& rng, double sigma, std::span<uint8_t> out) {
  const uint16_t d = f32_to_f16(static_cast<float>(sigma / std::sqrt(637.5)));
  auto* blocks = reinterpret_cast<BlockQ4_K*>(out.data());
  const size_t n = out.size() / sizeof(BlockQ4_K);
  for (size_t b = 0; b < n; ++b) {
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; ++j) {
      sc[j] = static_cast<uint8_t>(2 * (1 + rng.below(4)));
      m[j] = static_cast<uint8_t>(sc[j] * 15 / 2);
    }
    q4k_pack_scale_min(sc, m, blocks[b].scales);
    random_bytes(rng, blocks[b].qs, sizeof(blocks[b].qs));
    blocks[b].d = d;
    blocks[b].dmin = d;
  }
}

// IQ2_XXS: every byte pattern of qs is a valid block (grid indices, 7-bit sign indices whose
// parity bit keeps the sign count even, 4-bit scales), so qs is random; value = d·(0.5+ls)/4·g·±1
// with ls uniform in 0..15 (E[(0.5+ls)²] = 85.25) and g a grid magnitude (E[g²] from the table).
void random_iq2_xxs(Rng& rng, double sigma, std::span<uint8_t> out) {
  double g2 = 0;
  for (uint64_t entry : kIq2xxsGrid)
    for (int i = 0; i < 8; ++i) {
      const double g = static_cast<double>((entry >> (8 * i)) & 0xff);
      g2 += g * g;
    }
  g2 /= 256.0 * 8.0;
  const uint16_t d = f32_to_f16(static_cast<float>(sigma * 4.0 / std::sqrt(85.25 * g2)));
  auto* blocks = reinterpret_cast<BlockIQ2_XXS*>(out.data());
  const size_t n = out.size() / sizeof(BlockIQ2_XXS);
  for (size_t b = 0; b < n; ++b) {
    blocks[b].d = d;
    random_bytes(rng, reinterpret_cast<uint8_t*>(blocks[b].qs), sizeof(blocks[b].qs));
  }
}

}  // namespace

void sample_values(const TensorEntry& e, uint64_t seed, std::span<float> out) {
  Rng rng = Rng::for_tensor(seed, e.name);
  const Spec s = spec_of(e);
  if (s.dist == Dist::uniform) {
    for (auto& v : out) v = static_cast<float>(rng.uniform(s.a, s.b));
  } else {
    for (auto& v : out) v = static_cast<float>(s.a + s.b * rng.normal());
  }
}

Status fill_payload(const TensorEntry& e, const PayloadOptions& opts, std::span<uint8_t> out) {
  if (out.size() != e.n_bytes)
    return internal_error("ds4-gen: payload buffer for '" + e.name + "' has " + std::to_string(out.size()) +
                          " bytes, expected " + std::to_string(e.n_bytes));
  const uint64_t n = e.n_elements();
  const Spec s = spec_of(e);
  if (s.dist == Dist::expert_ids) {
    if (e.type != GgmlType::I32) return invalid_argument("tensor '" + e.name + "': hash table must be I32");
    if (opts.n_expert < e.ne[0])
      return invalid_argument("tensor '" + e.name + "': cannot pick " + std::to_string(e.ne[0]) +
                              " distinct experts out of " + std::to_string(opts.n_expert));
    Rng rng = Rng::for_tensor(opts.seed, e.name);
    fill_expert_ids(e, opts.n_expert, rng, reinterpret_cast<int32_t*>(out.data()));
    return Status::Ok();
  }
  const bool quantized = e.type != GgmlType::F32 && e.type != GgmlType::F16 && e.type != GgmlType::BF16;
  if (quantized && opts.quant_source == QuantSource::random_blocks) {
    Rng rng = Rng::for_tensor(opts.seed, e.name);
    const double sigma = s.b;
    switch (e.type) {
      case GgmlType::Q8_0: random_q8_0(rng, sigma, out); return Status::Ok();
      case GgmlType::Q2_K: random_q2_k(rng, sigma, out); return Status::Ok();
      case GgmlType::Q4_K: random_q4_k(rng, sigma, out); return Status::Ok();
      case GgmlType::IQ2_XXS: random_iq2_xxs(rng, sigma, out); return Status::Ok();
      default: return unsupported("ds4-gen: no random-block writer for type of '" + e.name + "'");
    }
  }
  std::vector<float> vals(n);
  sample_values(e, opts.seed, vals);
  if (e.type == GgmlType::F32) {
    std::memcpy(out.data(), vals.data(), n * sizeof(float));
    return Status::Ok();
  }
  if (e.type == GgmlType::F16) {
    auto* h = reinterpret_cast<uint16_t*>(out.data());
    for (uint64_t i = 0; i < n; ++i) h[i] = f32_to_f16(vals[i]);
    return Status::Ok();
  }
  const int64_t cols = static_cast<int64_t>(e.ne[0]);
  const int64_t rows = static_cast<int64_t>(n / e.ne[0]);
  QuantizeOptions qo;
  std::vector<float> imp;
  if (e.type == GgmlType::IQ2_XXS || e.type == GgmlType::Q2_K || e.type == GgmlType::Q4_K) {
    imp.resize(cols);
    column_importance(vals.data(), rows, cols, imp.data());
    qo.importance = imp.data();
  }
  return quantize_rows(e.type, vals.data(), out.data(), rows, cols, qo).with_context("tensor '" + e.name + "'");
}

}  // namespace ds4::gen
