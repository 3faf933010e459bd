// metadata_writer.cpp — ModelConfig → `deepseek4.*` GGUF metadata with the published value types.
#include "modelspec/metadata_writer.h"

namespace ds4::modelspec {

void write_model_metadata(const ModelConfig& c, const MetadataOptions& opts, gguf::Writer& w) {
  using gguf::Value;
  using gguf::ValueType;
  w.add_string(std::string(key::kArchitecture), c.architecture.empty() ? "deepseek4" : c.architecture);
  w.add_string(std::string(key::kName), c.name);
  w.add_string("general.license", "mit");
  if (!opts.size_label.empty()) w.add_string("general.size_label", opts.size_label);
  if (opts.file_type != 0) w.add_u32("general.file_type", opts.file_type);
  w.add_u32("general.quantization_version", 2);

  auto u32 = [&](std::string_view k, uint32_t v) { w.add_u32(std::string(k), v); };
  auto f32 = [&](std::string_view k, double v) { w.add_f32(std::string(k), static_cast<float>(v)); };
  u32(key::kBlockCount, c.n_layer);
  w.add_u64(std::string(key::kContextLength), c.context_length ? c.context_length : 1048576);
  u32(key::kEmbeddingLength, c.n_embd);
  u32(key::kVocabSize, c.n_vocab);
  u32(key::kHeadCount, c.n_head);
  u32(key::kHeadCountKv, c.n_head_kv);
  u32(key::kKeyLength, c.head_dim);
  u32(key::kValueLength, c.value_dim);
  u32(key::kRopeDimensionCount, c.n_rot);
  u32(key::kQLoraRank, c.q_lora_rank);
  u32(key::kOutputLoraRank, c.o_lora_rank);
  u32(key::kOutputGroupCount, c.out_groups);
  u32(key::kExpertCount, c.n_expert);
  u32(key::kExpertUsedCount, c.n_expert_used);
  u32(key::kExpertFeedForwardLength, c.expert_ff);
  u32(key::kExpertSharedCount, c.n_expert_shared);
  u32(key::kHashLayerCount, c.n_hash_layers);
  u32(key::kSlidingWindow, c.sliding_window);
  u32(key::kIndexerHeadCount, c.indexer_heads);
  u32(key::kIndexerKeyLength, c.indexer_head_dim);
  u32(key::kIndexerTopK, c.indexer_top_k);
  u32(key::kHcCount, c.n_hc);
  u32(key::kHcSinkhornIterations, c.sinkhorn_iters);
  f32(key::kHcEpsilon, c.hc_eps);
  f32(key::kRmsEpsilon, c.rms_eps);
  f32(key::kExpertWeightsScale, c.expert_weights_scale);
  w.add_bool(std::string(key::kExpertWeightsNorm), c.expert_weights_norm);
  {
    std::vector<Value> items;
    for (float v : c.swiglu_clamp) items.push_back(Value::of_f32(v));
    w.add_array(std::string(key::kSwigluClampExp), ValueType::f32, std::move(items));
  }
  {
    std::vector<Value> items;
    for (uint32_t r : c.compress_ratios) items.push_back(Value::of_i32(static_cast<int32_t>(r)));
    if (opts.mtp_slot) items.push_back(Value::of_i32(0));  // the MTP block is ratio 0
    w.add_array(std::string(key::kCompressRatios), ValueType::i32, std::move(items));
  }
  f32(key::kRopeFreqBase, c.rope_freq_base);
  f32(key::kCompressRopeFreqBase, c.compress_rope_freq_base);
  f32(key::kRopeScalingFactor, c.rope_scaling_factor);
  f32(key::kYarnBetaFast, c.yarn_beta_fast);
  f32(key::kYarnBetaSlow, c.yarn_beta_slow);
  w.add_u64(std::string(key::kRopeOrigContext), c.rope_orig_context);
  // Informational keys of the published files that ds4 does not read (FORMATS.md §3.3).
  w.add_string("deepseek4.rope.scaling.type", "yarn");
  w.add_u32("deepseek4.expert_gating_func", 4);  // sqrt-softplus in llama.cpp's enum
  w.add_u32("deepseek4.nextn_predict_layers", 1);
}

}  // namespace ds4::modelspec
