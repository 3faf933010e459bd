// profiles.cpp — the Flash shape (MODEL.md §1) and the tiny test profiles (MODEL.md §14.1/§14.2).
#include "modelspec/profiles.h"

namespace ds4::modelspec {
namespace {

// Values shared by every profile: the parts the spec says to keep (RoPE/YaRN, eps, HC, routing).
ModelConfig common() {
  ModelConfig c;
  c.architecture = "deepseek4";
  c.n_head_kv = 1;
  c.n_rot = 64;
  c.n_expert_shared = 1;
  c.indexer_head_dim = 128;
  c.n_hc = 4;
  c.sinkhorn_iters = 20;
  c.hc_eps = 1e-6;
  c.rms_eps = 1e-6;
  c.expert_weights_scale = 1.5;
  c.expert_weights_norm = true;
  c.rope_freq_base = 10000.0;
  c.compress_rope_freq_base = 160000.0;
  c.rope_scaling_factor = 16.0;
  c.yarn_beta_fast = 32.0;
  c.yarn_beta_slow = 1.0;
  c.rope_orig_context = 65536;
  c.context_length = 1048576;
  return c;
}

void schedule(ModelConfig& c, uint32_t hca, float clamp) {
  c.compress_ratios.clear();
  for (uint32_t l = 0; l < c.n_layer; ++l) c.compress_ratios.push_back(scheduled_ratio(l, hca));
  c.swiglu_clamp.assign(c.n_layer, clamp);
}

}  // namespace

ModelConfig flash_config() {
  ModelConfig c = common();
  c.name = "DeepSeek V4 Flash";
  c.n_layer = 43;
  c.n_embd = 4096;
  c.n_vocab = 129280;
  c.n_head = 64;
  c.head_dim = 512;
  c.value_dim = 512;
  c.q_lora_rank = 1024;
  c.out_groups = 8;
  c.o_lora_rank = 1024;
  c.n_expert = 256;
  c.n_expert_used = 6;
  c.expert_ff = 2048;
  c.n_hash_layers = 3;
  c.sliding_window = 128;
  c.indexer_heads = 64;
  c.indexer_top_k = 512;
  schedule(c, 128, 10.0f);
  return c;
}

ModelConfig tiny_config() {
  ModelConfig c = common();
  c.name = "DeepSeek V4 tiny-6 (synthetic)";
  c.n_layer = 6;
  c.n_embd = 64;
  c.n_vocab = 512;
  c.n_head = 4;
  c.head_dim = 256;
  c.value_dim = 256;
  c.q_lora_rank = 32;
  c.out_groups = 2;
  c.o_lora_rank = 32;
  c.n_expert = 8;
  c.n_expert_used = 3;
  c.expert_ff = 32;
  c.n_hash_layers = 3;
  c.sliding_window = 16;
  c.indexer_heads = 8;
  c.indexer_top_k = 16;
  // 1.0 makes the clamp fire with unit-scale activations (MODEL.md §14.1).
  schedule(c, 16, 1.0f);
  return c;
}

ModelConfig tiny_quant_config() {
  ModelConfig c = tiny_config();
  c.name = "DeepSeek V4 tiny-quant (synthetic)";
  c.n_embd = 256;   // rows of E-input matrices are whole Q2_K/Q4_K/IQ2_XXS blocks
  c.expert_ff = 256;  // rows of the down projections too
  return c;
}

}  // namespace ds4::modelspec
