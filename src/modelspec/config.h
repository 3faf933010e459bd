// config.h — the DeepSeek V4 hyperparameters as carried by GGUF metadata, and their validation.
//
// ModelConfig is the single description of a model's shape that everything above the file layer
// uses (inventory, weight binding, forward pass, KV sizing). It is read from the `deepseek4.*`
// metadata keys of MODEL.md §1 / FORMATS.md §3.2 — never from compiled-in Flash constants — and
// validated against the structural relationships of MODEL.md §14.2, so the real 43-layer Flash file
// and the small test profiles (tiny-6, tiny-quant) go through the same code.
// Reading is type-tolerant like ds4: integer keys accept any GGUF integer type whose value fits,
// float keys accept f32/f64/u32/i32 (and other integers), the ratio array accepts i32/u32 elements,
// the clamp array f32/f64.
// Deliberately not here: tensors (inventory.h), the per-layer schedule (layer_plan.h), writing
// metadata (metadata_writer.h), the tokenizer section.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "ds4/status.h"
#include "gguf/gguf.h"

namespace ds4::modelspec {

// Metadata key names (one place, so readers, writers and tests agree on spelling).
namespace key {
inline constexpr std::string_view kArchitecture = "general.architecture";
inline constexpr std::string_view kName = "general.name";
inline constexpr std::string_view kBlockCount = "deepseek4.block_count";
inline constexpr std::string_view kContextLength = "deepseek4.context_length";
inline constexpr std::string_view kEmbeddingLength = "deepseek4.embedding_length";
inline constexpr std::string_view kVocabSize = "deepseek4.vocab_size";
inline constexpr std::string_view kHeadCount = "deepseek4.attention.head_count";
inline constexpr std::string_view kHeadCountKv = "deepseek4.attention.head_count_kv";
inline constexpr std::string_view kKeyLength = "deepseek4.attention.key_length";
inline constexpr std::string_view kValueLength = "deepseek4.attention.value_length";
inline constexpr std::string_view kRopeDimensionCount = "deepseek4.rope.dimension_count";
inline constexpr std::string_view kQLoraRank = "deepseek4.attention.q_lora_rank";
inline constexpr std::string_view kOutputLoraRank = "deepseek4.attention.output_lora_rank";
inline constexpr std::string_view kOutputGroupCount = "deepseek4.attention.output_group_count";
inline constexpr std::string_view kExpertCount = "deepseek4.expert_count";
inline constexpr std::string_view kExpertUsedCount = "deepseek4.expert_used_count";
inline constexpr std::string_view kExpertFeedForwardLength = "deepseek4.expert_feed_forward_length";
inline constexpr std::string_view kExpertSharedCount = "deepseek4.expert_shared_count";
inline constexpr std::string_view kExpertGroupCount = "deepseek4.expert_group_count";
inline constexpr std::string_view kExpertGroupUsedCount = "deepseek4.expert_group_used_count";
inline constexpr std::string_view kHashLayerCount = "deepseek4.hash_layer_count";
inline constexpr std::string_view kSlidingWindow = "deepseek4.attention.sliding_window";
inline constexpr std::string_view kIndexerHeadCount = "deepseek4.attention.indexer.head_count";
inline constexpr std::string_view kIndexerKeyLength = "deepseek4.attention.indexer.key_length";
inline constexpr std::string_view kIndexerTopK = "deepseek4.attention.indexer.top_k";
inline constexpr std::string_view kHcCount = "deepseek4.hyper_connection.count";
inline constexpr std::string_view kHcSinkhornIterations = "deepseek4.hyper_connection.sinkhorn_iterations";
inline constexpr std::string_view kHcEpsilon = "deepseek4.hyper_connection.epsilon";
inline constexpr std::string_view kRmsEpsilon = "deepseek4.attention.layer_norm_rms_epsilon";
inline constexpr std::string_view kExpertWeightsScale = "deepseek4.expert_weights_scale";
inline constexpr std::string_view kExpertWeightsNorm = "deepseek4.expert_weights_norm";
inline constexpr std::string_view kSwigluClampExp = "deepseek4.swiglu_clamp_exp";
inline constexpr std::string_view kCompressRatios = "deepseek4.attention.compress_ratios";
inline constexpr std::string_view kRopeFreqBase = "deepseek4.rope.freq_base";
inline constexpr std::string_view kCompressRopeFreqBase = "deepseek4.attention.compress_rope_freq_base";
inline constexpr std::string_view kRopeScalingFactor = "deepseek4.rope.scaling.factor";
inline constexpr std::string_view kYarnBetaFast = "deepseek4.rope.scaling.yarn_beta_fast";
inline constexpr std::string_view kYarnBetaSlow = "deepseek4.rope.scaling.yarn_beta_slow";
inline constexpr std::string_view kRopeOrigContext = "deepseek4.rope.scaling.original_context_length";
}  // namespace key

struct ModelConfig {
  std::string name;          // general.name (informational)
  std::string architecture;  // general.architecture (informational; ds4 does not check it)

  uint32_t n_layer = 0;          // L   deepseek4.block_count (main layers, MTP excluded)
  uint32_t n_embd = 0;           // E   hidden width
  uint32_t n_vocab = 0;          // V
  uint32_t n_head = 0;           // H   query heads
  uint32_t n_head_kv = 0;        // Hkv must be 1 (one shared K=V head)
  uint32_t head_dim = 0;         // D   key length
  uint32_t value_dim = 0;        // must equal D (K and V are the same vector)
  uint32_t n_rot = 0;            // R   RoPE dims, the last R of each head
  uint32_t q_lora_rank = 0;      // Q
  uint32_t out_groups = 0;       // G
  uint32_t o_lora_rank = 0;      // Ro  per group
  uint32_t n_expert = 0;         // NE  routed experts
  uint32_t n_expert_used = 0;    // K   experts per token
  uint32_t n_expert_shared = 0;  // must be 1
  uint32_t expert_ff = 0;        // F   routed and shared expert width
  uint32_t n_hash_layers = 0;    // layers [0, n_hash_layers) route by tid2eid
  uint32_t sliding_window = 0;   // W   raw rows visible per query, current token included
  uint32_t indexer_heads = 0;    // IH
  uint32_t indexer_head_dim = 0; // ID
  uint32_t indexer_top_k = 0;    // TK
  uint32_t n_hc = 0;             // NHC hyper-connection streams (must be 4)
  uint32_t sinkhorn_iters = 0;

  double hc_eps = 0;
  double rms_eps = 0;
  double expert_weights_scale = 0;
  bool expert_weights_norm = false;

  std::vector<uint32_t> compress_ratios;  // [n_layer] r(l) ∈ {0, 4, hca}; trailing file entries dropped
  std::vector<float> swiglu_clamp;        // [n_layer] per-layer SwiGLU clamp

  double rope_freq_base = 0;           // ratio-0 layers
  double compress_rope_freq_base = 0;  // compressed layers
  double rope_scaling_factor = 0;      // YaRN factor (compressed layers only)
  double yarn_beta_fast = 0;
  double yarn_beta_slow = 0;
  uint64_t rope_orig_context = 0;      // YaRN original context
  uint64_t context_length = 0;         // 0 when absent (informational)

  // Derived sizes (all from the fields above).
  uint32_t hc_dim() const { return n_hc * n_embd; }             // flattened HC state
  uint32_t hc_mix() const { return (2 + n_hc) * n_hc; }         // HC control width (24)
  uint32_t q_dim() const { return n_head * head_dim; }          // H·D
  uint32_t out_low_dim() const { return out_groups * o_lora_rank; }  // G·Ro
  uint32_t out_group_in() const { return out_groups ? q_dim() / out_groups : 0; }  // H·D/G
  uint32_t nope_dim() const { return head_dim - n_rot; }        // D − R
  // HCA ratio: the ratio of the odd compressed layers (0 if the model has none).
  uint32_t hca_ratio() const;
};

// Looks a metadata key up; returns nullptr when absent. Lets tests validate hand-built metadata.
using MetadataLookup = std::function<const gguf::Value*(std::string_view key)>;

// Reads and validates. Errors name the key, the expected value or relationship and the value found,
// e.g. "deepseek4.attention.head_count_kv: expected 1 (a single shared K=V head), got 8".
Result<ModelConfig> config_from_metadata(const MetadataLookup& lookup);
Result<ModelConfig> config_from_gguf(const gguf::File& file);

// Structural validation (MODEL.md §14.2); config_from_* already calls it.
Status validate_config(const ModelConfig& cfg);

// ds4's stricter check: every value equal to the published Flash shape (what ds4 itself demands).
Status check_flash_shape(const ModelConfig& cfg);

// Layer `l`'s compression ratio as the schedule requires it: 0 for l < 2, 4 for even l ≥ 2,
// `hca` for odd l ≥ 3 (MODEL.md §2; Flash hca = 128, tiny-6 hca = 16).
uint32_t scheduled_ratio(uint32_t layer, uint32_t hca);

}  // namespace ds4::modelspec
