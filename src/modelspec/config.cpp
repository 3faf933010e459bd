// config.cpp — reading ModelConfig from metadata (type-tolerant) and validating its structure.
#include "modelspec/config.h"

#include <cmath>
#include <limits>
#include <sstream>
#include <type_traits>

#include "modelspec/profiles.h"

namespace ds4::modelspec {
namespace {

const char* vt_name(gguf::ValueType t) {
  switch (t) {
    case gguf::ValueType::u8: return "UINT8";
    case gguf::ValueType::i8: return "INT8";
    case gguf::ValueType::u16: return "UINT16";
    case gguf::ValueType::i16: return "INT16";
    case gguf::ValueType::u32: return "UINT32";
    case gguf::ValueType::i32: return "INT32";
    case gguf::ValueType::f32: return "FLOAT32";
    case gguf::ValueType::boolean: return "BOOL";
    case gguf::ValueType::string: return "STRING";
    case gguf::ValueType::array: return "ARRAY";
    case gguf::ValueType::u64: return "UINT64";
    case gguf::ValueType::i64: return "INT64";
    case gguf::ValueType::f64: return "FLOAT64";
  }
  return "unknown type";
}

bool is_integer_type(gguf::ValueType t) {
  switch (t) {
    case gguf::ValueType::u8: case gguf::ValueType::i8: case gguf::ValueType::u16:
    case gguf::ValueType::i16: case gguf::ValueType::u32: case gguf::ValueType::i32:
    case gguf::ValueType::u64: case gguf::ValueType::i64: return true;
    default: return false;
  }
}
bool is_float_type(gguf::ValueType t) { return t == gguf::ValueType::f32 || t == gguf::ValueType::f64; }

// Integer value of an integer-typed Value (whatever variant alternative the reader chose).
std::optional<int64_t> int_of(const gguf::Value& v) {
  if (!is_integer_type(v.type)) return std::nullopt;
  if (const auto* u = std::get_if<uint64_t>(&v.v)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(*u);
  }
  if (const auto* i = std::get_if<int64_t>(&v.v)) return *i;
  return std::nullopt;
}
std::optional<double> float_of(const gguf::Value& v) {
  if (is_float_type(v.type)) {
    if (const auto* d = std::get_if<double>(&v.v)) return *d;
    return std::nullopt;
  }
  if (auto i = int_of(v)) return static_cast<double>(*i);
  return std::nullopt;
}

std::string show(const gguf::Value& v) {
  std::ostringstream o;
  o << vt_name(v.type);
  if (auto i = int_of(v)) o << " " << *i;
  else if (auto d = float_of(v)) o << " " << *d;
  else if (const auto* b = std::get_if<bool>(&v.v); b && v.type == gguf::ValueType::boolean)
    o << (*b ? " true" : " false");
  return o.str();
}

class Reader {
 public:
  explicit Reader(const MetadataLookup& lookup) : lookup_(lookup) {}

  Result<uint32_t> u32(std::string_view key) const {
    const gguf::Value* v = lookup_(key);
    if (!v) return missing(key);
    auto i = int_of(*v);
    if (!i) return invalid_data(std::string(key) + ": expected an unsigned integer (UINT32), got " + show(*v));
    if (*i < 0 || *i > std::numeric_limits<uint32_t>::max())
      return invalid_data(std::string(key) + ": expected a value in [0, 4294967295], got " + std::to_string(*i));
    return static_cast<uint32_t>(*i);
  }
  Result<uint64_t> u64(std::string_view key) const {
    const gguf::Value* v = lookup_(key);
    if (!v) return missing(key);
    auto i = int_of(*v);
    if (!i || *i < 0)
      return invalid_data(std::string(key) + ": expected an unsigned integer (UINT32 or UINT64), got " + show(*v));
    return static_cast<uint64_t>(*i);
  }
  Result<double> f64(std::string_view key) const {
    const gguf::Value* v = lookup_(key);
    if (!v) return missing(key);
    auto d = float_of(*v);
    if (!d) return invalid_data(std::string(key) + ": expected a number (FLOAT32/FLOAT64/integer), got " + show(*v));
    return *d;
  }
  Result<bool> boolean(std::string_view key) const {
    const gguf::Value* v = lookup_(key);
    if (!v) return missing(key);
    if (v->type == gguf::ValueType::boolean) {
      if (const auto* b = std::get_if<bool>(&v->v)) return *b;
      if (auto i = int_of(*v)) return *i != 0;
      if (const auto* u = std::get_if<uint64_t>(&v->v)) return *u != 0;
    }
    if (auto i = int_of(*v); i && (*i == 0 || *i == 1)) return *i == 1;
    return invalid_data(std::string(key) + ": expected BOOL, got " + show(*v));
  }
  std::string string_or(std::string_view key, std::string fallback) const {
    const gguf::Value* v = lookup_(key);
    if (v && v->type == gguf::ValueType::string)
      if (const auto* s = std::get_if<std::string>(&v->v)) return *s;
    return fallback;
  }
  bool has(std::string_view key) const { return lookup_(key) != nullptr; }

  // Array of at least `n` numbers; returns the first n.
  Result<std::vector<double>> numbers(std::string_view key, uint32_t n, bool integers) const {
    const gguf::Value* v = lookup_(key);
    if (!v) return missing(key);
    const auto* arr = std::get_if<std::shared_ptr<gguf::Array>>(&v->v);
    const char* want = integers ? "an ARRAY of INT32/UINT32" : "an ARRAY of FLOAT32/FLOAT64";
    if (v->type != gguf::ValueType::array || !arr || !*arr)
      return invalid_data(std::string(key) + ": expected " + want + ", got " + show(*v));
    const gguf::Array& a = **arr;
    bool type_ok = integers ? is_integer_type(a.elem_type) : (is_float_type(a.elem_type) || is_integer_type(a.elem_type));
    if (!type_ok)
      return invalid_data(std::string(key) + ": expected " + want + ", got an ARRAY of " + vt_name(a.elem_type));
    if (a.items.size() < n)
      return invalid_data(std::string(key) + ": expected at least " + std::to_string(n) +
                          " entries (one per layer), got " + std::to_string(a.items.size()));
    std::vector<double> out;
    out.reserve(n);
    for (uint32_t i = 0; i < n; ++i) {
      auto d = integers ? (int_of(a.items[i]) ? std::optional<double>(double(*int_of(a.items[i]))) : std::nullopt)
                        : float_of(a.items[i]);
      if (!d)
        return invalid_data(std::string(key) + "[" + std::to_string(i) + "]: expected a number, got " +
                            show(a.items[i]));
      out.push_back(*d);
    }
    return out;
  }

 private:
  static Status missing(std::string_view key) {
    return invalid_data(std::string(key) + ": required metadata key is missing");
  }
  const MetadataLookup& lookup_;
};

std::string num(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

Status bad(std::string_view key, const std::string& expected, const std::string& got) {
  return invalid_data(std::string(key) + ": expected " + expected + ", got " + got);
}

bool finite_positive(double v) { return std::isfinite(v) && v > 0; }

}  // namespace

uint32_t scheduled_ratio(uint32_t layer, uint32_t hca) {
  if (layer < 2) return 0;
  return layer % 2 == 0 ? 4 : hca;
}

uint32_t ModelConfig::hca_ratio() const {
  for (uint32_t l = 3; l < compress_ratios.size(); l += 2)
    if (l < n_layer) return compress_ratios[l];
  return 0;
}

Result<ModelConfig> config_from_metadata(const MetadataLookup& lookup) {
  Reader r(lookup);
  ModelConfig c;
  c.name = r.string_or(key::kName, "");
  c.architecture = r.string_or(key::kArchitecture, "");
  DS4_ASSIGN_OR_RETURN(c.n_layer, r.u32(key::kBlockCount));
  if (c.n_layer == 0 || c.n_layer > 4096)
    return bad(key::kBlockCount, "a layer count in [1, 4096]", std::to_string(c.n_layer));
  DS4_ASSIGN_OR_RETURN(c.n_embd, r.u32(key::kEmbeddingLength));
  DS4_ASSIGN_OR_RETURN(c.n_vocab, r.u32(key::kVocabSize));
  DS4_ASSIGN_OR_RETURN(c.n_head, r.u32(key::kHeadCount));
  DS4_ASSIGN_OR_RETURN(c.n_head_kv, r.u32(key::kHeadCountKv));
  DS4_ASSIGN_OR_RETURN(c.head_dim, r.u32(key::kKeyLength));
  DS4_ASSIGN_OR_RETURN(c.value_dim, r.u32(key::kValueLength));
  DS4_ASSIGN_OR_RETURN(c.n_rot, r.u32(key::kRopeDimensionCount));
  DS4_ASSIGN_OR_RETURN(c.q_lora_rank, r.u32(key::kQLoraRank));
  DS4_ASSIGN_OR_RETURN(c.out_groups, r.u32(key::kOutputGroupCount));
  DS4_ASSIGN_OR_RETURN(c.o_lora_rank, r.u32(key::kOutputLoraRank));
  DS4_ASSIGN_OR_RETURN(c.n_expert, r.u32(key::kExpertCount));
  DS4_ASSIGN_OR_RETURN(c.n_expert_used, r.u32(key::kExpertUsedCount));
  DS4_ASSIGN_OR_RETURN(c.n_expert_shared, r.u32(key::kExpertSharedCount));
  DS4_ASSIGN_OR_RETURN(c.expert_ff, r.u32(key::kExpertFeedForwardLength));
  DS4_ASSIGN_OR_RETURN(c.n_hash_layers, r.u32(key::kHashLayerCount));
  for (auto k : {key::kExpertGroupCount, key::kExpertGroupUsedCount}) {
    if (!r.has(k)) continue;  // optional; group-limited routing is not part of V4
    DS4_ASSIGN_OR_RETURN(uint32_t g, r.u32(k));
    if (g != 0) return bad(k, "0 or absent (V4 has no group-limited routing)", std::to_string(g));
  }
  DS4_ASSIGN_OR_RETURN(c.sliding_window, r.u32(key::kSlidingWindow));
  DS4_ASSIGN_OR_RETURN(c.indexer_heads, r.u32(key::kIndexerHeadCount));
  DS4_ASSIGN_OR_RETURN(c.indexer_head_dim, r.u32(key::kIndexerKeyLength));
  DS4_ASSIGN_OR_RETURN(c.indexer_top_k, r.u32(key::kIndexerTopK));
  DS4_ASSIGN_OR_RETURN(c.n_hc, r.u32(key::kHcCount));
  DS4_ASSIGN_OR_RETURN(c.sinkhorn_iters, r.u32(key::kHcSinkhornIterations));
  DS4_ASSIGN_OR_RETURN(c.hc_eps, r.f64(key::kHcEpsilon));
  DS4_ASSIGN_OR_RETURN(c.rms_eps, r.f64(key::kRmsEpsilon));
  DS4_ASSIGN_OR_RETURN(c.expert_weights_scale, r.f64(key::kExpertWeightsScale));
  DS4_ASSIGN_OR_RETURN(c.expert_weights_norm, r.boolean(key::kExpertWeightsNorm));
  {
    DS4_ASSIGN_OR_RETURN(auto ratios, r.numbers(key::kCompressRatios, c.n_layer, /*integers=*/true));
    for (uint32_t l = 0; l < c.n_layer; ++l) {
      if (ratios[l] < 0 || ratios[l] > 1e9)
        return bad(std::string(key::kCompressRatios) + "[" + std::to_string(l) + "]",
                   "a non-negative ratio", num(ratios[l]));
      c.compress_ratios.push_back(static_cast<uint32_t>(ratios[l]));
    }
  }
  {
    DS4_ASSIGN_OR_RETURN(auto clamps, r.numbers(key::kSwigluClampExp, c.n_layer, /*integers=*/false));
    for (double v : clamps) c.swiglu_clamp.push_back(static_cast<float>(v));
  }
  DS4_ASSIGN_OR_RETURN(c.rope_freq_base, r.f64(key::kRopeFreqBase));
  DS4_ASSIGN_OR_RETURN(c.compress_rope_freq_base, r.f64(key::kCompressRopeFreqBase));
  DS4_ASSIGN_OR_RETURN(c.rope_scaling_factor, r.f64(key::kRopeScalingFactor));
  DS4_ASSIGN_OR_RETURN(c.yarn_beta_fast, r.f64(key::kYarnBetaFast));
  DS4_ASSIGN_OR_RETURN(c.yarn_beta_slow, r.f64(key::kYarnBetaSlow));
  DS4_ASSIGN_OR_RETURN(c.rope_orig_context, r.u64(key::kRopeOrigContext));
  if (r.has(key::kContextLength)) {
    auto ctx = r.u64(key::kContextLength);  // informational only: a bad type is ignored like ds4
    if (ctx.ok()) c.context_length = *ctx;
  }
  DS4_RETURN_IF_ERROR(validate_config(c));
  return c;
}

Result<ModelConfig> config_from_gguf(const gguf::File& file) {
  return config_from_metadata([&file](std::string_view k) { return file.find(k); });
}

Status validate_config(const ModelConfig& c) {
  auto positive = [](std::string_view k, uint64_t v) -> Status {
    if (v == 0) return bad(k, "a positive value", "0");
    return Status::Ok();
  };
  if (c.n_layer == 0 || c.n_layer > 4096)
    return bad(key::kBlockCount, "a layer count in [1, 4096]", std::to_string(c.n_layer));
  DS4_RETURN_IF_ERROR(positive(key::kEmbeddingLength, c.n_embd));
  DS4_RETURN_IF_ERROR(positive(key::kVocabSize, c.n_vocab));
  DS4_RETURN_IF_ERROR(positive(key::kHeadCount, c.n_head));
  DS4_RETURN_IF_ERROR(positive(key::kKeyLength, c.head_dim));
  DS4_RETURN_IF_ERROR(positive(key::kQLoraRank, c.q_lora_rank));
  DS4_RETURN_IF_ERROR(positive(key::kOutputGroupCount, c.out_groups));
  DS4_RETURN_IF_ERROR(positive(key::kOutputLoraRank, c.o_lora_rank));
  DS4_RETURN_IF_ERROR(positive(key::kExpertCount, c.n_expert));
  DS4_RETURN_IF_ERROR(positive(key::kExpertFeedForwardLength, c.expert_ff));
  DS4_RETURN_IF_ERROR(positive(key::kSlidingWindow, c.sliding_window));
  DS4_RETURN_IF_ERROR(positive(key::kIndexerHeadCount, c.indexer_heads));
  DS4_RETURN_IF_ERROR(positive(key::kIndexerTopK, c.indexer_top_k));
  DS4_RETURN_IF_ERROR(positive(key::kHcSinkhornIterations, c.sinkhorn_iters));
  // Products used as tensor dims must stay far from overflow (hostile metadata).
  const uint64_t lim = uint64_t{1} << 31;
  if (uint64_t(c.n_head) * c.head_dim >= lim)
    return bad(key::kHeadCount, "head_count·key_length < 2^31", std::to_string(uint64_t(c.n_head) * c.head_dim));
  if (uint64_t(c.out_groups) * c.o_lora_rank >= lim)
    return bad(key::kOutputLoraRank, "output_group_count·output_lora_rank < 2^31",
               std::to_string(uint64_t(c.out_groups) * c.o_lora_rank));
  if (uint64_t(c.n_embd) * 4 >= lim) return bad(key::kEmbeddingLength, "a value < 2^29", std::to_string(c.n_embd));
  if (uint64_t(c.indexer_heads) * c.indexer_head_dim >= lim)
    return bad(key::kIndexerHeadCount, "indexer head_count·key_length < 2^31",
               std::to_string(uint64_t(c.indexer_heads) * c.indexer_head_dim));
  for (uint32_t v : {c.q_lora_rank, c.expert_ff, c.n_expert, c.n_vocab, c.indexer_top_k, c.sliding_window})
    if (v >= lim) return invalid_data("model dimension " + std::to_string(v) + " is implausibly large (≥ 2^31)");

  if (c.n_head_kv != 1)
    return bad(key::kHeadCountKv, "1 (a single shared K=V head)", std::to_string(c.n_head_kv));
  if (c.value_dim != c.head_dim)
    return bad(key::kValueLength, std::to_string(c.head_dim) + " (equal to key_length: K and V are one vector)",
               std::to_string(c.value_dim));
  if (c.n_rot == 0 || c.n_rot % 2 != 0 || c.n_rot >= c.head_dim)
    return bad(key::kRopeDimensionCount, "an even value in (0, " + std::to_string(c.head_dim) + ")",
               std::to_string(c.n_rot));
  if ((c.head_dim - c.n_rot) % 64 != 0)
    return bad(key::kRopeDimensionCount,
               "key_length − rope dims to be a multiple of 64 (FP8 KV blocks); key_length " +
                   std::to_string(c.head_dim) + " − " + std::to_string(c.n_rot),
               std::to_string(c.head_dim - c.n_rot));
  const uint32_t id = c.indexer_head_dim;
  if (id == 0 || (id & (id - 1)) != 0 || id % 32 != 0 || id <= c.n_rot)
    return bad(key::kIndexerKeyLength,
               "a power of two, a multiple of 32 and > rope dims (" + std::to_string(c.n_rot) + ")",
               std::to_string(id));
  if (c.n_head % c.out_groups != 0)
    return bad(key::kOutputGroupCount, "a divisor of head_count " + std::to_string(c.n_head),
               std::to_string(c.out_groups));
  if (c.n_expert_used == 0 || c.n_expert_used > c.n_expert)
    return bad(key::kExpertUsedCount, "a value in [1, expert_count = " + std::to_string(c.n_expert) + "]",
               std::to_string(c.n_expert_used));
  if (c.n_expert_shared != 1)
    return bad(key::kExpertSharedCount, "1 (one shared expert)", std::to_string(c.n_expert_shared));
  if (c.n_hash_layers > c.n_layer)
    return bad(key::kHashLayerCount, "at most block_count = " + std::to_string(c.n_layer),
               std::to_string(c.n_hash_layers));
  if (c.n_hc != 4) return bad(key::kHcCount, "4 (four hyper-connection streams)", std::to_string(c.n_hc));
  if (!finite_positive(c.hc_eps)) return bad(key::kHcEpsilon, "a positive number", num(c.hc_eps));
  if (!finite_positive(c.rms_eps)) return bad(key::kRmsEpsilon, "a positive number", num(c.rms_eps));
  if (!finite_positive(c.expert_weights_scale))
    return bad(key::kExpertWeightsScale, "a positive number", num(c.expert_weights_scale));
  if (!c.expert_weights_norm)
    return bad(key::kExpertWeightsNorm, "true (routing weights are normalized)", "false");

  // Per-layer schedule: 0, 0, then 4 on even layers and one HCA ratio on odd layers.
  if (c.compress_ratios.size() != c.n_layer)
    return bad(key::kCompressRatios, std::to_string(c.n_layer) + " entries", std::to_string(c.compress_ratios.size()));
  const uint32_t hca = c.hca_ratio();
  if (c.n_layer > 3 && (hca < 2 || hca == 4))
    return bad(std::string(key::kCompressRatios) + "[3]",
               "the HCA ratio of the odd layers (≥ 2 and ≠ 4, e.g. 128)", std::to_string(hca));
  for (uint32_t l = 0; l < c.n_layer; ++l) {
    uint32_t want = scheduled_ratio(l, hca);
    if (c.compress_ratios[l] != want) {
      const char* why = l < 2 ? " (layers 0 and 1 are sliding-window only)"
                      : l % 2 == 0 ? " (even layers ≥ 2 are CSA, ratio exactly 4)"
                                   : " (odd layers ≥ 3 share the HCA ratio of layer 3)";
      return bad(std::string(key::kCompressRatios) + "[" + std::to_string(l) + "]", std::to_string(want) + why,
                 std::to_string(c.compress_ratios[l]));
    }
  }
  if (c.swiglu_clamp.size() != c.n_layer)
    return bad(key::kSwigluClampExp, std::to_string(c.n_layer) + " entries", std::to_string(c.swiglu_clamp.size()));
  for (uint32_t l = 0; l < c.n_layer; ++l)
    if (!finite_positive(c.swiglu_clamp[l]))
      return bad(std::string(key::kSwigluClampExp) + "[" + std::to_string(l) + "]", "a positive clamp",
                 num(c.swiglu_clamp[l]));

  if (!finite_positive(c.rope_freq_base)) return bad(key::kRopeFreqBase, "a positive number", num(c.rope_freq_base));
  if (!finite_positive(c.compress_rope_freq_base) || c.compress_rope_freq_base <= 1)
    return bad(key::kCompressRopeFreqBase, "a number > 1", num(c.compress_rope_freq_base));
  if (!std::isfinite(c.rope_scaling_factor) || c.rope_scaling_factor < 1)
    return bad(key::kRopeScalingFactor, "a number ≥ 1", num(c.rope_scaling_factor));
  if (!finite_positive(c.yarn_beta_fast)) return bad(key::kYarnBetaFast, "a positive number", num(c.yarn_beta_fast));
  if (!finite_positive(c.yarn_beta_slow)) return bad(key::kYarnBetaSlow, "a positive number", num(c.yarn_beta_slow));
  if (c.rope_orig_context == 0) return bad(key::kRopeOrigContext, "a positive length", "0");
  return Status::Ok();
}

Status check_flash_shape(const ModelConfig& c) {
  const ModelConfig f = flash_config();
  auto eq = [](std::string_view k, uint64_t want, uint64_t got) -> Status {
    if (want != got) return bad(k, std::to_string(want) + " (DeepSeek V4 Flash)", std::to_string(got));
    return Status::Ok();
  };
  auto feq = [](std::string_view k, double want, double got) -> Status {
    if (std::fabs(want - got) > 1e-6 * std::max(1.0, std::fabs(want)))
      return bad(k, num(want) + " (DeepSeek V4 Flash)", num(got));
    return Status::Ok();
  };
  DS4_RETURN_IF_ERROR(eq(key::kBlockCount, f.n_layer, c.n_layer));
  DS4_RETURN_IF_ERROR(eq(key::kEmbeddingLength, f.n_embd, c.n_embd));
  DS4_RETURN_IF_ERROR(eq(key::kVocabSize, f.n_vocab, c.n_vocab));
  DS4_RETURN_IF_ERROR(eq(key::kHeadCount, f.n_head, c.n_head));
  DS4_RETURN_IF_ERROR(eq(key::kHeadCountKv, f.n_head_kv, c.n_head_kv));
  DS4_RETURN_IF_ERROR(eq(key::kKeyLength, f.head_dim, c.head_dim));
  DS4_RETURN_IF_ERROR(eq(key::kValueLength, f.value_dim, c.value_dim));
  DS4_RETURN_IF_ERROR(eq(key::kRopeDimensionCount, f.n_rot, c.n_rot));
  DS4_RETURN_IF_ERROR(eq(key::kQLoraRank, f.q_lora_rank, c.q_lora_rank));
  DS4_RETURN_IF_ERROR(eq(key::kOutputGroupCount, f.out_groups, c.out_groups));
  DS4_RETURN_IF_ERROR(eq(key::kOutputLoraRank, f.o_lora_rank, c.o_lora_rank));
  DS4_RETURN_IF_ERROR(eq(key::kExpertCount, f.n_expert, c.n_expert));
  DS4_RETURN_IF_ERROR(eq(key::kExpertUsedCount, f.n_expert_used, c.n_expert_used));
  DS4_RETURN_IF_ERROR(eq(key::kExpertSharedCount, f.n_expert_shared, c.n_expert_shared));
  DS4_RETURN_IF_ERROR(eq(key::kExpertFeedForwardLength, f.expert_ff, c.expert_ff));
  DS4_RETURN_IF_ERROR(eq(key::kHashLayerCount, f.n_hash_layers, c.n_hash_layers));
  DS4_RETURN_IF_ERROR(eq(key::kSlidingWindow, f.sliding_window, c.sliding_window));
  DS4_RETURN_IF_ERROR(eq(key::kIndexerHeadCount, f.indexer_heads, c.indexer_heads));
  DS4_RETURN_IF_ERROR(eq(key::kIndexerKeyLength, f.indexer_head_dim, c.indexer_head_dim));
  DS4_RETURN_IF_ERROR(eq(key::kIndexerTopK, f.indexer_top_k, c.indexer_top_k));
  DS4_RETURN_IF_ERROR(eq(key::kHcCount, f.n_hc, c.n_hc));
  DS4_RETURN_IF_ERROR(eq(key::kHcSinkhornIterations, f.sinkhorn_iters, c.sinkhorn_iters));
  DS4_RETURN_IF_ERROR(eq(key::kRopeOrigContext, f.rope_orig_context, c.rope_orig_context));
  DS4_RETURN_IF_ERROR(feq(key::kHcEpsilon, f.hc_eps, c.hc_eps));
  DS4_RETURN_IF_ERROR(feq(key::kRmsEpsilon, f.rms_eps, c.rms_eps));
  DS4_RETURN_IF_ERROR(feq(key::kExpertWeightsScale, f.expert_weights_scale, c.expert_weights_scale));
  DS4_RETURN_IF_ERROR(feq(key::kRopeFreqBase, f.rope_freq_base, c.rope_freq_base));
  DS4_RETURN_IF_ERROR(feq(key::kCompressRopeFreqBase, f.compress_rope_freq_base, c.compress_rope_freq_base));
  DS4_RETURN_IF_ERROR(feq(key::kRopeScalingFactor, f.rope_scaling_factor, c.rope_scaling_factor));
  DS4_RETURN_IF_ERROR(feq(key::kYarnBetaFast, f.yarn_beta_fast, c.yarn_beta_fast));
  DS4_RETURN_IF_ERROR(feq(key::kYarnBetaSlow, f.yarn_beta_slow, c.yarn_beta_slow));
  for (uint32_t l = 0; l < c.n_layer; ++l) {
    DS4_RETURN_IF_ERROR(eq(std::string(key::kCompressRatios) + "[" + std::to_string(l) + "]",
                           f.compress_ratios[l], c.compress_ratios[l]));
    DS4_RETURN_IF_ERROR(feq(std::string(key::kSwigluClampExp) + "[" + std::to_string(l) + "]",
                            f.swiglu_clamp[l], c.swiglu_clamp[l]));
  }
  return Status::Ok();
}

}  // namespace ds4::modelspec
