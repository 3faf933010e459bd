// layer_plan.cpp — per-layer schedule from a validated ModelConfig (MODEL.md §2).
#include "modelspec/layer_plan.h"

namespace ds4::modelspec {

const char* attention_kind_name(AttentionKind k) {
  switch (k) {
    case AttentionKind::sliding: return "sliding";
    case AttentionKind::csa: return "csa";
    case AttentionKind::hca: return "hca";
  }
  return "?";
}

std::vector<LayerPlan> layer_plan(const ModelConfig& cfg) {
  std::vector<LayerPlan> plans;
  plans.reserve(cfg.n_layer);
  for (uint32_t l = 0; l < cfg.n_layer; ++l) {
    LayerPlan p;
    p.index = l;
    p.compress_ratio = l < cfg.compress_ratios.size() ? cfg.compress_ratios[l] : 0;
    p.kind = p.compress_ratio == 0 ? AttentionKind::sliding
             : p.compress_ratio == 4 ? AttentionKind::csa : AttentionKind::hca;
    p.has_compressor = p.compress_ratio != 0;
    p.has_indexer = p.compress_ratio == 4;
    p.compressor_width = p.compress_ratio == 0 ? 0 : (p.compress_ratio == 4 ? 2 : 1) * cfg.head_dim;
    p.hash_routing = l < cfg.n_hash_layers;
    p.has_router_bias = !p.hash_routing;
    p.uses_yarn = p.compress_ratio != 0;
    p.rope_freq_base = p.uses_yarn ? cfg.compress_rope_freq_base : cfg.rope_freq_base;
    p.swiglu_clamp = l < cfg.swiglu_clamp.size() ? cfg.swiglu_clamp[l] : 0.0f;
    plans.push_back(p);
  }
  return plans;
}

LayerPlan mtp_layer_plan(const ModelConfig& cfg) {
  LayerPlan p;
  p.index = cfg.n_layer;
  p.is_mtp = true;
  p.kind = AttentionKind::sliding;
  p.has_router_bias = true;
  p.rope_freq_base = cfg.rope_freq_base;
  p.swiglu_clamp = cfg.swiglu_clamp.empty() ? 0.0f : cfg.swiglu_clamp.back();
  return p;
}

}  // namespace ds4::modelspec
