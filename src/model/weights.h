// weights.h — the model's tensors bound from a GGUF file as backend views (MODEL.md §4).
//
// Matrices stay in the file's ggml type (mmap'd on the CPU backend, never copied); small float
// vectors (norm weights, HC scale/base, sinks, compressor `ape`, router bias) are decoded once into
// one backend buffer so ops can read them as float. Every tensor is checked against the inventory
// of modelspec (names, dims, allowed types) before binding, so a malformed file fails at load.
// Deliberately not here: the math (forward.cpp), the MTP block (not bound yet).
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "ds4/status.h"
#include "gguf/gguf.h"
#include "modelspec/config.h"
#include "modelspec/layer_plan.h"

namespace ds4::model {

using backend::ExpertWeights;
using backend::Weight;

struct LayerWeights {
  // HC wrapper around attention. fn [M][NHC·E]; scale [3]; base [M].
  Weight hc_attn_fn;
  const float* hc_attn_scale = nullptr;
  const float* hc_attn_base = nullptr;
  const float* attn_norm = nullptr;       // [E]
  Weight q_a;                             // [Q][E]
  const float* q_a_norm = nullptr;        // [Q]
  Weight q_b;                             // [H·D][Q]
  Weight kv;                              // [D][E]
  const float* kv_norm = nullptr;         // [D]
  const float* sinks = nullptr;           // [H]
  Weight out_a;                           // [G·Ro][H·D/G]
  Weight out_b;                           // [E][G·Ro]
  // Attention compressor (r ≠ 0); width wd = c·D.
  Weight comp_kv, comp_gate;              // [wd][E]
  const float* comp_ape = nullptr;        // [r][wd]
  const float* comp_norm = nullptr;       // [D]
  // Indexer (r = 4).
  Weight idx_q_b;                         // [IH·ID][Q]
  Weight idx_proj;                        // [IH][E]
  Weight idx_comp_kv, idx_comp_gate;      // [2·ID][E]
  const float* idx_comp_ape = nullptr;    // [4][2·ID]
  const float* idx_comp_norm = nullptr;   // [ID]
  // HC wrapper around the FFN.
  Weight hc_ffn_fn;
  const float* hc_ffn_scale = nullptr;
  const float* hc_ffn_base = nullptr;
  const float* ffn_norm = nullptr;        // [E]
  Weight router;                          // [NE][E]
  const float* router_bias = nullptr;     // [NE] or null (hash layers)
  const int32_t* tid2eid = nullptr;       // [V][K] or null (top-k layers)
  ExpertWeights exp_gate, exp_up;         // NE × [F][E]
  ExpertWeights exp_down;                 // NE × [E][F]
  Weight sh_gate, sh_up;                  // [F][E]
  Weight sh_down;                         // [E][F]
};

struct ModelWeights {
  Weight token_embd;                      // [V][E]
  Weight output_hc_fn;                    // [NHC][NHC·E]
  const float* output_hc_base = nullptr;  // [NHC]
  const float* output_hc_scale = nullptr; // [1]
  const float* output_norm = nullptr;     // [E]
  Weight output;                          // [V][E]
  std::vector<LayerWeights> layers;
  backend::Buffer small;                  // decoded float vectors, owned here (weights category)
  uint64_t mapped_bytes = 0;              // bytes of file-backed tensors bound
  std::string quant_summary;              // e.g. "q8_0 attn, iq2_xxs/q2_k experts"
};

// Validates the directory against modelspec's inventory and binds every tensor.
Result<ModelWeights> bind_weights(const gguf::File& file, const modelspec::ModelConfig& cfg,
                                  const std::vector<modelspec::LayerPlan>& plan, backend::Backend& be);

}  // namespace ds4::model
