// inventory.h — the tensor directory of a DeepSeek V4 GGUF: names, kinds, dims, types, byte sizes.
//
// The inventory is derived from a ModelConfig plus a type policy, so the same code produces the
// published Flash q2/q4 directories (equal to spec/data/tensors_{q2,q4}.tsv) and the tiny test
// models. The weight binder uses TensorKind + tensor_name() to find each weight; the validator
// (check_tensors) compares a loaded file's directory against the inventory and reports every
// missing tensor, wrong dims and disallowed type (FORMATS.md §3.5: ds4 accepts some alternatives).
// Deliberately not here: tensor payloads (tools/ds4-gen), quant math (src/quant).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf.h"
#include "modelspec/config.h"
#include "modelspec/layer_plan.h"
#include "quant/types.h"

namespace ds4::modelspec {

// Every tensor role of the model. Global kinds have no layer; layer kinds live under `blk.N.`
// (main) or `mtp.0.` (MTP block). GGUF dims are fastest-first; "math" is [out][in].
enum class TensorKind {
  // global (main file)
  token_embd,       // [E, V]            embedding table, row = token id
  output_hc_fn,     // [NHC·E, NHC]      final HC collapse control projection
  output_hc_base,   // [NHC]
  output_hc_scale,  // [1]
  output_norm,      // [E]
  output,           // [E, V]            LM head
  // per layer
  hc_attn_fn,       // [NHC·E, M]        M = (2+NHC)·NHC
  hc_attn_scale,    // [3]
  hc_attn_base,     // [M]
  attn_norm,        // [E]
  attn_q_a,         // [E, Q]
  attn_q_a_norm,    // [Q]
  attn_q_b,         // [Q, H·D]
  attn_kv,          // [E, D]
  attn_kv_a_norm,   // [D]
  attn_sinks,       // [H]
  attn_output_a,    // [H·D/G, G·Ro]
  attn_output_b,    // [G·Ro, E]
  attn_compressor_ape,      // [c·D, r]   r ≠ 0
  attn_compressor_kv,       // [E, c·D]
  attn_compressor_gate,     // [E, c·D]
  attn_compressor_norm,     // [D]
  indexer_attn_q_b,         // [Q, IH·ID] r = 4
  indexer_proj,             // [E, IH]
  indexer_compressor_ape,   // [2·ID, 4]
  indexer_compressor_kv,    // [E, 2·ID]
  indexer_compressor_gate,  // [E, 2·ID]
  indexer_compressor_norm,  // [ID]
  hc_ffn_fn,        // [NHC·E, M]
  hc_ffn_scale,     // [3]
  hc_ffn_base,      // [M]
  ffn_norm,         // [E]
  ffn_gate_inp,     // [E, NE]            router
  exp_probs_b,      // [NE]               selection bias (top-k layers)
  ffn_gate_exps,    // [E, F, NE]
  ffn_up_exps,      // [E, F, NE]
  ffn_down_exps,    // [F, E, NE]
  ffn_gate_shexp,   // [E, F]
  ffn_up_shexp,     // [E, F]
  ffn_down_shexp,   // [F, E]
  ffn_gate_tid2eid, // [K, V] I32         hash layers only
  // MTP block only (prefix mtp.0.)
  mtp_hc_head_fn,     // [NHC·E, NHC]
  mtp_hc_head_base,   // [NHC]
  mtp_hc_head_scale,  // [1]
  mtp_e_proj,         // [E, E]
  mtp_h_proj,         // [E, E]
  mtp_enorm,          // [E]
  mtp_hnorm,          // [E]
  mtp_norm,           // [E]
};
inline constexpr int kTensorKindCount = static_cast<int>(TensorKind::mtp_norm) + 1;

// "attn_q_a.weight", "exp_probs_b.bias", "indexer.attn_q_b.weight", "e_proj.weight", ...
std::string_view tensor_suffix(TensorKind kind);
bool is_global_kind(TensorKind kind);  // token_embd … output (main file, no prefix)
bool is_mtp_only_kind(TensorKind kind);
// Full GGUF name. layer: the main layer index; ignored for global kinds. For the MTP block use
// mtp_tensor_name (prefix "mtp.0.").
std::string tensor_name(TensorKind kind, uint32_t layer);
std::string mtp_tensor_name(TensorKind kind);

// How weights are stored.
enum class TypePolicy {
  q2,   // the published q2 file: routed gate/up IQ2_XXS, down Q2_K, the rest as ds4 requires
  q4,   // the published q4 file: routed experts Q4_K
  f32,  // every tensor F32 (tid2eid I32) — the tiny-6 golden model
  f16,  // tensors that are F16 or quantized in the real file become F16; F32 ones stay F32
};
const char* type_policy_name(TypePolicy p);
std::optional<TypePolicy> type_policy_from_name(std::string_view name);

struct TensorEntry {
  std::string name;
  TensorKind kind = TensorKind::token_embd;
  int layer = -1;                  // main layer index, -1 for global tensors and the MTP block
  std::vector<uint64_t> ne;        // dims, fastest first
  GgmlType type = GgmlType::F32;   // the type this policy stores
  uint64_t n_bytes = 0;            // storage size (unpadded)
  bool optional = false;           // may be absent (ds4: exp_probs_b in the main file)
  uint64_t n_elements() const;
};

struct Inventory {
  std::vector<TensorEntry> tensors;  // in file order (the order of spec/data/tensors_*.tsv)
  const TensorEntry* find(std::string_view name) const;
  uint64_t total_bytes() const;                       // sum of n_bytes
  uint64_t total_padded_bytes(uint64_t alignment) const;  // as laid out in a file
};

// Main-file inventory for cfg (validated) under `policy`.
Result<Inventory> build_inventory(const ModelConfig& cfg, TypePolicy policy);
// MTP-file inventory (32 tensors for Flash; order of tensors_mtp.tsv). For q2/q4 this is the
// published MTP file: routed experts Q4_K, HC `fn` and the router F32, projections Q8_0.
Result<Inventory> build_mtp_inventory(const ModelConfig& cfg, TypePolicy policy);

// TSV line as in spec/data/tensors_q2.tsv: name, TYPE, type id, ne0,ne1,..., bytes.
std::string tsv_header();  // "# name\tggml_type\tggml_type_id\tdims(ne0,ne1,...)\tbytes"
std::string tsv_row(const TensorEntry& e);
std::string type_upper_name(GgmlType t);  // "F16", "Q8_0", "IQ2_XXS"

// ---- validation of a loaded directory ----------------------------------------------------------

enum class TypeRule {
  engine,  // what ds4cpp's engine runs: ds4's types or F32/F16 stand-ins (tiny models), blocks fit ne0
  ds4,     // exactly what ds4 accepts (FORMATS.md §3.5)
};

struct CheckOptions {
  TypeRule rule = TypeRule::engine;
  bool mtp = false;  // the directory is an MTP file (expects mtp.0.* tensors instead of the main set)
};

struct TensorCheckReport {
  std::vector<std::string> errors;  // each names the tensor, the expectation and what was found
  std::vector<std::string> notes;   // ignorable: extra tensors, absent optional tensors
  bool ok() const { return errors.empty(); }
  Status status() const;  // invalid_data with the first errors joined, or Ok
};

// Types accepted for `kind` under `rule` (the first one is the ds4 type for the q2 policy).
std::vector<GgmlType> allowed_types(TensorKind kind, TypeRule rule, bool mtp);

TensorCheckReport check_tensors(const ModelConfig& cfg, const std::vector<gguf::TensorInfo>& tensors,
                                const CheckOptions& opts = {});

}  // namespace ds4::modelspec
