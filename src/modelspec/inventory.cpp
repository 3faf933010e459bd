// inventory.cpp — tensor names, per-layer presence, dims and types per policy (MODEL.md §4,
// FORMATS.md §3.4/§3.6), and the directory validator.
#include "modelspec/inventory.h"

#include <algorithm>
#include <cctype>
#include <sstream>
#include <unordered_map>

namespace ds4::modelspec {
namespace {

struct KindInfo {
  TensorKind kind;
  std::string_view suffix;
};

constexpr KindInfo kKinds[] = {
    {TensorKind::token_embd, "token_embd.weight"},
    {TensorKind::output_hc_fn, "output_hc_fn.weight"},
    {TensorKind::output_hc_base, "output_hc_base.weight"},
    {TensorKind::output_hc_scale, "output_hc_scale.weight"},
    {TensorKind::output_norm, "output_norm.weight"},
    {TensorKind::output, "output.weight"},
    {TensorKind::hc_attn_fn, "hc_attn_fn.weight"},
    {TensorKind::hc_attn_scale, "hc_attn_scale.weight"},
    {TensorKind::hc_attn_base, "hc_attn_base.weight"},
    {TensorKind::attn_norm, "attn_norm.weight"},
    {TensorKind::attn_q_a, "attn_q_a.weight"},
    {TensorKind::attn_q_a_norm, "attn_q_a_norm.weight"},
    {TensorKind::attn_q_b, "attn_q_b.weight"},
    {TensorKind::attn_kv, "attn_kv.weight"},
    {TensorKind::attn_kv_a_norm, "attn_kv_a_norm.weight"},
    {TensorKind::attn_sinks, "attn_sinks.weight"},
    {TensorKind::attn_output_a, "attn_output_a.weight"},
    {TensorKind::attn_output_b, "attn_output_b.weight"},
    {TensorKind::attn_compressor_ape, "attn_compressor_ape.weight"},
    {TensorKind::attn_compressor_kv, "attn_compressor_kv.weight"},
    {TensorKind::attn_compressor_gate, "attn_compressor_gate.weight"},
    {TensorKind::attn_compressor_norm, "attn_compressor_norm.weight"},
    {TensorKind::indexer_attn_q_b, "indexer.attn_q_b.weight"},
    {TensorKind::indexer_proj, "indexer.proj.weight"},
    {TensorKind::indexer_compressor_ape, "indexer_compressor_ape.weight"},
    {TensorKind::indexer_compressor_kv, "indexer_compressor_kv.weight"},
    {TensorKind::indexer_compressor_gate, "indexer_compressor_gate.weight"},
    {TensorKind::indexer_compressor_norm, "indexer_compressor_norm.weight"},
    {TensorKind::hc_ffn_fn, "hc_ffn_fn.weight"},
    {TensorKind::hc_ffn_scale, "hc_ffn_scale.weight"},
    {TensorKind::hc_ffn_base, "hc_ffn_base.weight"},
    {TensorKind::ffn_norm, "ffn_norm.weight"},
    {TensorKind::ffn_gate_inp, "ffn_gate_inp.weight"},
    {TensorKind::exp_probs_b, "exp_probs_b.bias"},
    {TensorKind::ffn_gate_exps, "ffn_gate_exps.weight"},
    {TensorKind::ffn_up_exps, "ffn_up_exps.weight"},
    {TensorKind::ffn_down_exps, "ffn_down_exps.weight"},
    {TensorKind::ffn_gate_shexp, "ffn_gate_shexp.weight"},
    {TensorKind::ffn_up_shexp, "ffn_up_shexp.weight"},
    {TensorKind::ffn_down_shexp, "ffn_down_shexp.weight"},
    {TensorKind::ffn_gate_tid2eid, "ffn_gate_tid2eid.weight"},
    {TensorKind::mtp_hc_head_fn, "hc_head_fn.weight"},
    {TensorKind::mtp_hc_head_base, "hc_head_base.weight"},
    {TensorKind::mtp_hc_head_scale, "hc_head_scale.weight"},
    {TensorKind::mtp_e_proj, "e_proj.weight"},
    {TensorKind::mtp_h_proj, "h_proj.weight"},
    {TensorKind::mtp_enorm, "enorm.weight"},
    {TensorKind::mtp_hnorm, "hnorm.weight"},
    {TensorKind::mtp_norm, "norm.weight"},
};
static_assert(sizeof(kKinds) / sizeof(kKinds[0]) == kTensorKindCount);

// Storage classes: what the published files store (q2 column of FORMATS.md §3.4).
enum class Class { f16_matrix, f32_vector, q8_matrix, routed_gate_up, routed_down, i32_table };

Class class_of(TensorKind k) {
  switch (k) {
    case TensorKind::token_embd: case TensorKind::output_hc_fn: case TensorKind::hc_attn_fn:
    case TensorKind::hc_ffn_fn: case TensorKind::attn_compressor_ape: case TensorKind::attn_compressor_kv:
    case TensorKind::attn_compressor_gate: case TensorKind::indexer_attn_q_b: case TensorKind::indexer_proj:
    case TensorKind::indexer_compressor_ape: case TensorKind::indexer_compressor_kv:
    case TensorKind::indexer_compressor_gate: case TensorKind::ffn_gate_inp: case TensorKind::mtp_hc_head_fn:
      return Class::f16_matrix;
    case TensorKind::output: case TensorKind::attn_q_a: case TensorKind::attn_q_b: case TensorKind::attn_kv:
    case TensorKind::attn_output_a: case TensorKind::attn_output_b: case TensorKind::ffn_gate_shexp:
    case TensorKind::ffn_up_shexp: case TensorKind::ffn_down_shexp: case TensorKind::mtp_e_proj:
    case TensorKind::mtp_h_proj:
      return Class::q8_matrix;
    case TensorKind::ffn_gate_exps: case TensorKind::ffn_up_exps: return Class::routed_gate_up;
    case TensorKind::ffn_down_exps: return Class::routed_down;
    case TensorKind::ffn_gate_tid2eid: return Class::i32_table;
    default: return Class::f32_vector;
  }
}

// The MTP file stores its HC projections and router in F32 (tensors_mtp.tsv).
bool mtp_f32_kind(TensorKind k) {
  return k == TensorKind::mtp_hc_head_fn || k == TensorKind::hc_attn_fn || k == TensorKind::hc_ffn_fn ||
         k == TensorKind::ffn_gate_inp;
}

GgmlType policy_type(TensorKind k, TypePolicy p, bool mtp) {
  const Class c = class_of(k);
  if (c == Class::i32_table) return GgmlType::I32;
  if (p == TypePolicy::f32) return GgmlType::F32;
  if (c == Class::f32_vector) return GgmlType::F32;
  if (p == TypePolicy::f16) return GgmlType::F16;
  if (mtp && mtp_f32_kind(k)) return GgmlType::F32;
  switch (c) {
    case Class::f16_matrix: return GgmlType::F16;
    case Class::q8_matrix: return GgmlType::Q8_0;
    case Class::routed_gate_up: return (p == TypePolicy::q4 || mtp) ? GgmlType::Q4_K : GgmlType::IQ2_XXS;
    case Class::routed_down: return (p == TypePolicy::q4 || mtp) ? GgmlType::Q4_K : GgmlType::Q2_K;
    default: return GgmlType::F32;
  }
}

using Dims = std::vector<uint64_t>;

// Dims of `k` for a layer with plan `p`; empty when the tensor does not exist in that layer.
Dims dims_of(TensorKind k, const ModelConfig& c, const LayerPlan& p) {
  const uint64_t E = c.n_embd, V = c.n_vocab, Q = c.q_lora_rank, D = c.head_dim, H = c.n_head;
  const uint64_t NE = c.n_expert, F = c.expert_ff, ID = c.indexer_head_dim, IH = c.indexer_heads;
  const uint64_t hc = c.hc_dim(), mix = c.hc_mix(), nhc = c.n_hc;
  const uint64_t r = p.compress_ratio, cw = p.compressor_width;
  switch (k) {
    case TensorKind::token_embd: return {E, V};
    case TensorKind::output_hc_fn: return {hc, nhc};
    case TensorKind::output_hc_base: return {nhc};
    case TensorKind::output_hc_scale: return {1};
    case TensorKind::output_norm: return {E};
    case TensorKind::output: return {E, V};
    case TensorKind::hc_attn_fn: case TensorKind::hc_ffn_fn: return {hc, mix};
    case TensorKind::hc_attn_scale: case TensorKind::hc_ffn_scale: return {3};
    case TensorKind::hc_attn_base: case TensorKind::hc_ffn_base: return {mix};
    case TensorKind::attn_norm: case TensorKind::ffn_norm: return {E};
    case TensorKind::attn_q_a: return {E, Q};
    case TensorKind::attn_q_a_norm: return {Q};
    case TensorKind::attn_q_b: return {Q, H * D};
    case TensorKind::attn_kv: return {E, D};
    case TensorKind::attn_kv_a_norm: return {D};
    case TensorKind::attn_sinks: return {H};
    case TensorKind::attn_output_a: return {c.out_group_in(), c.out_low_dim()};
    case TensorKind::attn_output_b: return {c.out_low_dim(), E};
    case TensorKind::attn_compressor_ape: return p.has_compressor ? Dims{cw, r} : Dims{};
    case TensorKind::attn_compressor_kv:
    case TensorKind::attn_compressor_gate: return p.has_compressor ? Dims{E, cw} : Dims{};
    case TensorKind::attn_compressor_norm: return p.has_compressor ? Dims{D} : Dims{};
    case TensorKind::indexer_attn_q_b: return p.has_indexer ? Dims{Q, IH * ID} : Dims{};
    case TensorKind::indexer_proj: return p.has_indexer ? Dims{E, IH} : Dims{};
    case TensorKind::indexer_compressor_ape: return p.has_indexer ? Dims{2 * ID, 4} : Dims{};
    case TensorKind::indexer_compressor_kv:
    case TensorKind::indexer_compressor_gate: return p.has_indexer ? Dims{E, 2 * ID} : Dims{};
    case TensorKind::indexer_compressor_norm: return p.has_indexer ? Dims{ID} : Dims{};
    case TensorKind::ffn_gate_inp: return {E, NE};
    case TensorKind::exp_probs_b: return p.has_router_bias ? Dims{NE} : Dims{};
    case TensorKind::ffn_gate_exps: case TensorKind::ffn_up_exps: return {E, F, NE};
    case TensorKind::ffn_down_exps: return {F, E, NE};
    case TensorKind::ffn_gate_shexp: case TensorKind::ffn_up_shexp: return {E, F};
    case TensorKind::ffn_down_shexp: return {F, E};
    case TensorKind::ffn_gate_tid2eid: return p.hash_routing ? Dims{c.n_expert_used, V} : Dims{};
    case TensorKind::mtp_hc_head_fn: return {hc, nhc};
    case TensorKind::mtp_hc_head_base: return {nhc};
    case TensorKind::mtp_hc_head_scale: return {1};
    case TensorKind::mtp_e_proj: case TensorKind::mtp_h_proj: return {E, E};
    case TensorKind::mtp_enorm: case TensorKind::mtp_hnorm: case TensorKind::mtp_norm: return {E};
  }
  return {};
}

// Per-layer order of the published files (tensors_q2.tsv).
constexpr TensorKind kLayerOrder[] = {
    TensorKind::hc_attn_fn, TensorKind::hc_attn_scale, TensorKind::hc_attn_base, TensorKind::attn_norm,
    TensorKind::attn_q_a, TensorKind::attn_q_a_norm, TensorKind::attn_q_b, TensorKind::attn_kv,
    TensorKind::attn_kv_a_norm, TensorKind::attn_sinks, TensorKind::attn_output_a, TensorKind::attn_output_b,
    TensorKind::attn_compressor_ape, TensorKind::attn_compressor_kv, TensorKind::attn_compressor_gate,
    TensorKind::attn_compressor_norm, TensorKind::indexer_attn_q_b, TensorKind::indexer_proj,
    TensorKind::indexer_compressor_ape, TensorKind::indexer_compressor_kv, TensorKind::indexer_compressor_gate,
    TensorKind::indexer_compressor_norm, TensorKind::hc_ffn_fn, TensorKind::hc_ffn_scale, TensorKind::hc_ffn_base,
    TensorKind::ffn_norm, TensorKind::ffn_gate_inp, TensorKind::exp_probs_b, TensorKind::ffn_gate_exps,
    TensorKind::ffn_up_exps, TensorKind::ffn_down_exps, TensorKind::ffn_gate_shexp, TensorKind::ffn_up_shexp,
    TensorKind::ffn_down_shexp, TensorKind::ffn_gate_tid2eid,
};
constexpr TensorKind kGlobalOrder[] = {
    TensorKind::token_embd, TensorKind::output_hc_base, TensorKind::output_hc_fn,
    TensorKind::output_hc_scale, TensorKind::output_norm, TensorKind::output,
};
// Order of the published MTP file (tensors_mtp.tsv).
constexpr TensorKind kMtpOrder[] = {
    TensorKind::mtp_hc_head_base, TensorKind::mtp_hc_head_fn, TensorKind::mtp_hc_head_scale,
    TensorKind::hc_attn_base, TensorKind::hc_ffn_base, TensorKind::hc_attn_fn, TensorKind::hc_attn_scale,
    TensorKind::hc_ffn_fn, TensorKind::hc_ffn_scale, TensorKind::attn_sinks, TensorKind::attn_q_a,
    TensorKind::attn_q_b, TensorKind::attn_q_a_norm, TensorKind::attn_output_a, TensorKind::attn_kv,
    TensorKind::attn_kv_a_norm, TensorKind::attn_output_b, TensorKind::attn_norm, TensorKind::ffn_norm,
    TensorKind::ffn_gate_shexp, TensorKind::ffn_up_shexp, TensorKind::ffn_down_shexp, TensorKind::ffn_gate_exps,
    TensorKind::ffn_up_exps, TensorKind::ffn_down_exps, TensorKind::ffn_gate_inp, TensorKind::exp_probs_b,
    TensorKind::mtp_e_proj, TensorKind::mtp_h_proj, TensorKind::mtp_enorm, TensorKind::mtp_hnorm,
    TensorKind::mtp_norm,
};

Result<TensorEntry> make_entry(TensorKind k, const ModelConfig& c, const LayerPlan& p, TypePolicy policy,
                               std::string name, int layer, bool mtp) {
  TensorEntry e;
  e.name = std::move(name);
  e.kind = k;
  e.layer = layer;
  e.ne = dims_of(k, c, p);
  e.type = policy_type(k, policy, mtp);
  e.optional = (k == TensorKind::exp_probs_b && !mtp);
  auto bytes = type_bytes(e.type, e.n_elements());
  if (!bytes || (e.ne[0] % type_traits(static_cast<uint32_t>(e.type))->block_elems) != 0)
    return invalid_argument("tensor '" + e.name + "': row length " + std::to_string(e.ne[0]) +
                            " is not a whole number of " + type_upper_name(e.type) +
                            " blocks (use a profile whose dims fit the type policy)");
  e.n_bytes = *bytes;
  return e;
}

std::string dims_str(const std::vector<uint64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

std::string types_str(const std::vector<GgmlType>& ts) {
  std::string s;
  for (size_t i = 0; i < ts.size(); ++i) s += (i ? "/" : "") + type_upper_name(ts[i]);
  return s;
}

}  // namespace

std::string_view tensor_suffix(TensorKind kind) { return kKinds[static_cast<int>(kind)].suffix; }

bool is_global_kind(TensorKind kind) { return static_cast<int>(kind) <= static_cast<int>(TensorKind::output); }
bool is_mtp_only_kind(TensorKind kind) {
  return static_cast<int>(kind) >= static_cast<int>(TensorKind::mtp_hc_head_fn);
}

std::string tensor_name(TensorKind kind, uint32_t layer) {
  if (is_global_kind(kind)) return std::string(tensor_suffix(kind));
  return "blk." + std::to_string(layer) + "." + std::string(tensor_suffix(kind));
}
std::string mtp_tensor_name(TensorKind kind) { return "mtp.0." + std::string(tensor_suffix(kind)); }

const char* type_policy_name(TypePolicy p) {
  switch (p) {
    case TypePolicy::q2: return "q2";
    case TypePolicy::q4: return "q4";
    case TypePolicy::f32: return "f32";
    case TypePolicy::f16: return "f16";
  }
  return "?";
}
std::optional<TypePolicy> type_policy_from_name(std::string_view n) {
  for (auto p : {TypePolicy::q2, TypePolicy::q4, TypePolicy::f32, TypePolicy::f16})
    if (n == type_policy_name(p)) return p;
  return std::nullopt;
}

uint64_t TensorEntry::n_elements() const {
  uint64_t n = 1;
  for (auto d : ne) n *= d;
  return n;
}

const TensorEntry* Inventory::find(std::string_view name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}
uint64_t Inventory::total_bytes() const {
  uint64_t s = 0;
  for (const auto& t : tensors) s += t.n_bytes;
  return s;
}
uint64_t Inventory::total_padded_bytes(uint64_t a) const {
  uint64_t s = 0;
  for (const auto& t : tensors) s += (t.n_bytes + a - 1) / a * a;
  return s;
}

Result<Inventory> build_inventory(const ModelConfig& cfg, TypePolicy policy) {
  DS4_RETURN_IF_ERROR(validate_config(cfg));
  Inventory inv;
  const LayerPlan none;  // globals do not depend on a layer
  for (TensorKind k : kGlobalOrder) {
    DS4_ASSIGN_OR_RETURN(auto e, make_entry(k, cfg, none, policy, tensor_name(k, 0), -1, false));
    inv.tensors.push_back(std::move(e));
  }
  for (const LayerPlan& p : layer_plan(cfg)) {
    for (TensorKind k : kLayerOrder) {
      if (dims_of(k, cfg, p).empty()) continue;
      DS4_ASSIGN_OR_RETURN(auto e, make_entry(k, cfg, p, policy, tensor_name(k, p.index), int(p.index), false));
      inv.tensors.push_back(std::move(e));
    }
  }
  return inv;
}

Result<Inventory> build_mtp_inventory(const ModelConfig& cfg, TypePolicy policy) {
  DS4_RETURN_IF_ERROR(validate_config(cfg));
  Inventory inv;
  const LayerPlan p = mtp_layer_plan(cfg);
  for (TensorKind k : kMtpOrder) {
    DS4_ASSIGN_OR_RETURN(auto e, make_entry(k, cfg, p, policy, mtp_tensor_name(k), -1, true));
    inv.tensors.push_back(std::move(e));
  }
  return inv;
}

std::string type_upper_name(GgmlType t) {
  std::string s(type_name(t));
  for (auto& ch : s) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return s;
}

std::string tsv_header() { return "# name\tggml_type\tggml_type_id\tdims(ne0,ne1,...)\tbytes"; }

std::string tsv_row(const TensorEntry& e) {
  std::string dims;
  for (size_t i = 0; i < e.ne.size(); ++i) dims += (i ? "," : "") + std::to_string(e.ne[i]);
  return e.name + "\t" + type_upper_name(e.type) + "\t" + std::to_string(static_cast<uint32_t>(e.type)) + "\t" +
         dims + "\t" + std::to_string(e.n_bytes);
}

std::vector<GgmlType> allowed_types(TensorKind kind, TypeRule rule, bool mtp) {
  using T = GgmlType;
  const Class c = class_of(kind);
  if (rule == TypeRule::ds4) {
    if (mtp && mtp_f32_kind(kind)) return {T::F32, T::F16};
    switch (c) {
      case Class::f16_matrix: return {T::F16};
      case Class::f32_vector: return {T::F32};
      case Class::q8_matrix: return {T::Q8_0};
      case Class::routed_gate_up: return {T::IQ2_XXS, T::Q2_K, T::Q4_K};
      case Class::routed_down: return {T::Q2_K, T::IQ2_XXS, T::Q4_K};
      case Class::i32_table: return {T::I32};
    }
  }
  switch (c) {
    case Class::f16_matrix:
      // The trained default model (docs/TRAINED_MODEL.md) keeps its 129,280-row embedding in Q8_0 to stay
      // small; the embed op decodes rows of any type.
      if (kind == TensorKind::token_embd) return {T::F16, T::F32, T::Q8_0};
      return {T::F16, T::F32};
    case Class::f32_vector: return {T::F32, T::F16};
    case Class::q8_matrix: return {T::Q8_0, T::F16, T::F32};
    case Class::routed_gate_up: return {T::IQ2_XXS, T::Q2_K, T::Q4_K, T::F16, T::F32};
    case Class::routed_down: return {T::Q2_K, T::IQ2_XXS, T::Q4_K, T::F16, T::F32};
    case Class::i32_table: return {T::I32};
  }
  return {};
}

Status TensorCheckReport::status() const {
  if (errors.empty()) return Status::Ok();
  std::string msg = "tensor layout does not match the model config: " + errors[0];
  const size_t shown = std::min<size_t>(errors.size(), 5);
  for (size_t i = 1; i < shown; ++i) msg += "; " + errors[i];
  if (errors.size() > shown) msg += "; … and " + std::to_string(errors.size() - shown) + " more";
  return invalid_data(msg);
}

TensorCheckReport check_tensors(const ModelConfig& cfg, const std::vector<gguf::TensorInfo>& tensors,
                                const CheckOptions& opts) {
  TensorCheckReport rep;
  auto inv = opts.mtp ? build_mtp_inventory(cfg, TypePolicy::f32) : build_inventory(cfg, TypePolicy::f32);
  if (!inv.ok()) {
    rep.errors.push_back(inv.status().message());
    return rep;
  }
  std::unordered_map<std::string_view, const gguf::TensorInfo*> by_name;
  for (const auto& t : tensors) by_name.emplace(t.name, &t);

  std::unordered_map<std::string_view, bool> expected;
  for (const TensorEntry& e : inv->tensors) {
    expected[e.name] = true;
    const auto allowed = allowed_types(e.kind, opts.rule, opts.mtp);
    auto it = by_name.find(e.name);
    if (it == by_name.end()) {
      std::string what = "tensor '" + e.name + "' (" + types_str(allowed) + " " + dims_str(e.ne) + ")";
      if (e.optional) rep.notes.push_back(what + " is absent (optional)");
      else rep.errors.push_back(what + " is missing");
      continue;
    }
    const gguf::TensorInfo& t = *it->second;
    if (t.ne != e.ne) {
      rep.errors.push_back("tensor '" + e.name + "': expected dims " + dims_str(e.ne) + ", got " + dims_str(t.ne));
      continue;
    }
    if (std::find(allowed.begin(), allowed.end(), t.type) == allowed.end() ||
        !type_traits(t.type_id) || static_cast<uint32_t>(t.type) != t.type_id) {
      auto tr = type_traits(t.type_id);
      std::string got = tr ? type_upper_name(t.type) : "unknown type id " + std::to_string(t.type_id);
      rep.errors.push_back("tensor '" + e.name + "': type " + got + " is not allowed here (expected " +
                           types_str(allowed) + ")");
      continue;
    }
    const uint32_t be = type_traits(t.type_id)->block_elems;
    if (t.ne[0] % be != 0)
      rep.errors.push_back("tensor '" + e.name + "': row length " + std::to_string(t.ne[0]) +
                           " is not a whole number of " + type_upper_name(t.type) + " blocks of " +
                           std::to_string(be));
  }
  // Routed gate and up must share a type (one kernel evaluates both).
  auto check_pair = [&](const std::string& gate, const std::string& up) {
    auto g = by_name.find(gate), u = by_name.find(up);
    if (g != by_name.end() && u != by_name.end() && g->second->type_id != u->second->type_id)
      rep.errors.push_back("tensors '" + gate + "' and '" + up + "' must have the same type, got " +
                           type_upper_name(g->second->type) + " and " + type_upper_name(u->second->type));
  };
  if (opts.mtp) {
    check_pair(mtp_tensor_name(TensorKind::ffn_gate_exps), mtp_tensor_name(TensorKind::ffn_up_exps));
  } else {
    for (uint32_t l = 0; l < cfg.n_layer; ++l)
      check_pair(tensor_name(TensorKind::ffn_gate_exps, l), tensor_name(TensorKind::ffn_up_exps, l));
  }
  for (const auto& t : tensors)
    if (!expected.count(t.name)) rep.notes.push_back("extra tensor '" + t.name + "' (ignored)");
  return rep;
}

}  // namespace ds4::modelspec
