// memory_plan.cpp — see memory_plan.h. Every formula states the tensor shape it counts.
#include "modelspec/memory_plan.h"

#include <algorithm>

namespace ds4::modelspec {

int64_t raw_ring_rows(const ModelConfig& cfg, int64_t max_chunk) {
  return static_cast<int64_t>(cfg.sliding_window) + max_chunk - 1;
}

int64_t frontier_slots(const ModelConfig& cfg, const LayerPlan& p, int64_t max_chunk) {
  if (!p.has_compressor) return 0;
  const int64_t r = p.compress_ratio;
  // keep = pooled block(s) + the tokens a cheap rewind may drop (raw ring rows beyond the window + 1).
  const int64_t keep = r * (p.has_indexer ? 2 : 1) + (raw_ring_rows(cfg, max_chunk) - cfg.sliding_window + 1);
  return (keep + r - 1) / r * r;
}

int64_t compressed_rows(const LayerPlan& p, int64_t tokens) {
  return p.has_compressor ? tokens / static_cast<int64_t>(p.compress_ratio) : 0;
}

static MemBytes kv_bytes(const ModelConfig& cfg, const std::vector<LayerPlan>& plan, int64_t tokens,
                         const KvLayout& layout, uint64_t block) {
  MemBytes m;
  const uint64_t D = cfg.head_dim, ID = cfg.indexer_head_dim;
  const uint64_t raw = static_cast<uint64_t>(raw_ring_rows(cfg, layout.max_chunk));
  for (const LayerPlan& p : plan) {
    m[MemCategory::raw_kv] += raw * D * 4;  // [raw_cap][D] f32 ring
    if (!p.has_compressor) continue;
    const uint64_t slots = static_cast<uint64_t>(frontier_slots(cfg, p, layout.max_chunk));
    m[MemCategory::compressor_state] += 2 * slots * p.compressor_width * 4;  // kv + score [slots][width]
    const uint64_t rows = static_cast<uint64_t>(compressed_rows(p, tokens));
    if (p.has_indexer) {
      m[MemCategory::compressor_state] += 2 * slots * 2 * ID * 4;  // indexer kv + score [slots][2·ID]
      m[MemCategory::compressed_kv_r4] += round_up(rows * D * 4, block);  // [rows][D]
      m[MemCategory::indexer_kv] += round_up(rows * ID * 4, block);       // [rows][ID]
    } else {
      m[MemCategory::compressed_kv_rhc] += round_up(rows * D * 4, block);  // [rows][D]
    }
  }
  return m;
}

MemBytes session_kv_bytes(const ModelConfig& cfg, const std::vector<LayerPlan>& plan, int64_t tokens,
                          const KvLayout& layout) {
  return kv_bytes(cfg, plan, tokens, layout, layout.block_bytes);
}

MemBytes session_kv_row_bytes(const ModelConfig& cfg, const std::vector<LayerPlan>& plan, int64_t tokens,
                              const KvLayout& layout) {
  return kv_bytes(cfg, plan, tokens, layout, 1);
}

std::array<double, kMemCategoryCount> kv_bytes_per_token(const ModelConfig& cfg, const std::vector<LayerPlan>& plan) {
  std::array<double, kMemCategoryCount> r{};
  auto at = [&](MemCategory c) -> double& { return r[static_cast<size_t>(c)]; };
  for (const LayerPlan& p : plan) {
    if (!p.has_compressor) continue;
    const double per = 1.0 / p.compress_ratio;  // rows per token
    if (p.has_indexer) {
      at(MemCategory::compressed_kv_r4) += per * cfg.head_dim * 4;
      at(MemCategory::indexer_kv) += per * cfg.indexer_head_dim * 4;
    } else {
      at(MemCategory::compressed_kv_rhc) += per * cfg.head_dim * 4;
    }
  }
  return r;
}

uint64_t session_host_other_bytes(const ModelConfig& cfg, int64_t tokens) {
  if (tokens <= 0) return 0;
  const uint64_t ids = round_up(static_cast<uint64_t>(tokens), kTokenIdBlock);
  return ids * 4 + uint64_t{cfg.n_vocab} * 4;  // i32 ids + f32 logits [V]
}

uint64_t forward_activation_bytes(const ModelConfig& cfg, int64_t max_chunk) {
  // Per-token f32 widths of Forward's activation buffers, in its order (forward.h lists the shapes).
  const uint64_t E = cfg.n_embd, NHC = cfg.n_hc, HD = cfg.q_dim(), D = cfg.head_dim;
  const uint64_t cw = 2 * (D + cfg.indexer_head_dim);  // both compressors' projections (one matmul_many)
  const uint64_t per_token = NHC * E * 3            // x, x2, flat
                             + cfg.hc_mix()         // mix
                             + NHC * 2 + NHC * NHC  // pre, post, comb
                             + E * 2                // y, xn
                             + cfg.q_lora_rank      // qa
                             + HD + D               // q, kv
                             + cw * 2 + 2           // ckv, cgate, cpos (both compressors)
                             + uint64_t{cfg.indexer_heads} * cfg.indexer_head_dim + cfg.indexer_heads  // iq, iw
                             + std::max<uint64_t>(1, cfg.indexer_top_k) + 1  // idx, icount
                             + HD + cfg.out_low_dim() + E  // attn, low, f
                             + cfg.n_expert + 2 * uint64_t{cfg.n_expert_used}  // rlogit, rids, rw
                             + 2 * uint64_t{cfg.expert_ff} + E  // sg, su, sout
                             + NHC + cfg.n_vocab;               // hw, logits
  return per_token * static_cast<uint64_t>(max_chunk) * 4;
}

// Candidate rows of one query at context `tokens`: the window plus all rows of a ratio-128 layer or the
// top_k of a ratio-4 one.
static uint64_t attention_rows(const ModelConfig& cfg, int64_t tokens) {
  const uint64_t hca = cfg.hca_ratio() ? static_cast<uint64_t>(tokens) / cfg.hca_ratio() : 0;
  const uint64_t r4 = static_cast<uint64_t>(tokens) / 4;
  return cfg.sliding_window + std::max<uint64_t>(hca, std::min<uint64_t>(r4, cfg.indexer_top_k));
}

uint64_t cpu_op_scratch_bytes(const ModelConfig& cfg, int64_t max_chunk, int64_t tokens, int threads,
                              uint64_t act_row_bytes) {
  const uint64_t C = static_cast<uint64_t>(max_chunk);
  // Per-thread float row: the widest matmul input (decoded weight row), attention scores over the window
  // plus visible compressed rows (all rows of a ratio-128 layer, top_k of a ratio-4 one), indexer
  // scores + candidate ids over every ratio-4 row.
  uint64_t row = std::max<uint64_t>({cfg.hc_dim(), cfg.expert_ff, cfg.n_embd, cfg.out_group_in(), cfg.out_low_dim(),
                                     cfg.q_lora_rank, 2 * uint64_t{cfg.head_dim}});
  const uint64_t r4 = static_cast<uint64_t>(tokens) / 4;
  row = std::max<uint64_t>(row, attention_rows(cfg, tokens));
  row = std::max<uint64_t>(row, 2 * r4 + 1);
  uint64_t b = row * 4 * static_cast<uint64_t>(std::max(1, threads));
  // Quantized activation rows of one matmul's C tokens.
  b += C * act_row_bytes;
  // Gathered expert batches: [C·K][dim] in and out, [C·K][ff] gate and up, [C·K] i32 order.
  const uint64_t pairs = C * cfg.n_expert_used;
  b += pairs * (2 * uint64_t{cfg.n_embd} + 2 * uint64_t{cfg.expert_ff} + 1) * 4;
  return b;
}

uint64_t cuda_attention_split_bytes(const ModelConfig& cfg, int64_t max_chunk, int64_t tokens) {
  const int64_t heads = cfg.n_head, D = cfg.head_dim;
  if (heads <= 0 || (D != 64 && D != 128 && D != 256 && D != 512)) return 0;
  int64_t per_block = 8;
  while (heads % per_block != 0) per_block /= 2;
  const int64_t segs = (static_cast<int64_t>(attention_rows(cfg, tokens)) + kCudaAttnSegmentRows - 1) / kCudaAttnSegmentRows;
  if (segs < 2) return 0;
  const uint64_t per_query = static_cast<uint64_t>(heads * segs * (D + 2)) * sizeof(float);
  const int64_t n = std::min<int64_t>({max_chunk, kCudaAttnSplitMaxBlocks / (heads / per_block),
                                       static_cast<int64_t>(kCudaAttnSplitScratchMax / per_query)});
  return n > 0 ? static_cast<uint64_t>(n) * per_query : 0;
}

}  // namespace ds4::modelspec
