// layer_plan.h — what each transformer layer is: attention kind, compression ratio, routing, clamp.
//
// Derived from a validated ModelConfig (MODEL.md §2). The forward pass, the KV manager and the
// tensor inventory all ask this one place instead of re-deriving "is layer l hashed / compressed".
// Deliberately not here: tensor names (inventory.h), any math.
#pragma once

#include <cstdint>
#include <vector>

#include "modelspec/config.h"

namespace ds4::modelspec {

enum class AttentionKind {
  sliding,  // ratio 0: raw window only (HF "sliding_attention")
  csa,      // ratio 4: overlapping compressor + lightning indexer ("compressed_sparse_attention")
  hca,      // ratio ≥ 2, ≠ 4: non-overlapping compressor, no indexer ("heavily_compressed_attention")
};
const char* attention_kind_name(AttentionKind k);

struct LayerPlan {
  uint32_t index = 0;
  bool is_mtp = false;             // the MTP block (ratio 0, top-k routing, `mtp.0.` tensors)
  uint32_t compress_ratio = 0;     // r(l)
  AttentionKind kind = AttentionKind::sliding;
  bool has_compressor = false;     // r ≠ 0
  bool has_indexer = false;        // r == 4
  uint32_t compressor_width = 0;   // c·D: 2·D for r = 4 (two overlap series), D otherwise, 0 if none
  bool hash_routing = false;       // l < n_hash_layers: experts from tid2eid[token], no bias tensor
  bool has_router_bias = false;    // exp_probs_b present (all top-k layers, MTP included)
  bool uses_yarn = false;          // compressed layers use base compress_rope_freq_base + YaRN
  double rope_freq_base = 0;       // the base of this layer's RoPE table
  float swiglu_clamp = 0;          // per-layer clamp (routed and shared experts)
};

// One entry per main layer, in order.
std::vector<LayerPlan> layer_plan(const ModelConfig& cfg);
// The MTP block's plan (ratio 0, no YaRN, top-k routing with bias; clamp of the last layer).
LayerPlan mtp_layer_plan(const ModelConfig& cfg);

}  // namespace ds4::modelspec
