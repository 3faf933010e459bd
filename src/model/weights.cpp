// weights.cpp — see weights.h.
#include "model/weights.h"

#include <map>
#include <set>
#include <string>

#include "modelspec/inventory.h"
#include "quant/dequant.h"

namespace ds4::model {
namespace {

using modelspec::TensorKind;

class Binder {
 public:
  Binder(const gguf::File& f, backend::Backend& be) : file_(f), be_(be) {}

  Result<const gguf::TensorInfo*> find(const std::string& name) {
    const gguf::TensorInfo* t = file_.find_tensor(name);
    if (!t) return not_found("model: tensor '" + name + "' is missing");
    return t;
  }

  // A matrix [rows][cols] from a GGUF tensor [cols, rows(, …)]; 3-D tensors bind expert 0 here.
  Result<Weight> matrix(const std::string& name) {
    DS4_ASSIGN_OR_RETURN(const gguf::TensorInfo* t, find(name));
    if (t->ne.size() < 2) return invalid_data("model: tensor '" + name + "' must be a matrix");
    auto rb = type_bytes(t->type, t->ne[0]);
    if (!rb) return invalid_data("model: tensor '" + name + "': row of " + std::to_string(t->ne[0]) +
                                 " values is not whole blocks of its type");
    DS4_ASSIGN_OR_RETURN(const void* data, be_.map_weight(file_.tensor(*t).data, t->n_bytes));
    mapped_ += t->n_bytes;
    types_[name] = std::string(type_name(t->type));
    Weight w;
    w.type = t->type;
    w.data = data;
    w.cols = static_cast<int64_t>(t->ne[0]);
    w.rows = static_cast<int64_t>(t->ne[1]);
    w.row_bytes = *rb;
    return w;
  }

  Result<ExpertWeights> experts(const std::string& name) {
    DS4_ASSIGN_OR_RETURN(const gguf::TensorInfo* t, find(name));
    if (t->ne.size() != 3) return invalid_data("model: tensor '" + name + "' must be 3-D [in, out, experts]");
    DS4_ASSIGN_OR_RETURN(Weight w, matrix(name));
    ExpertWeights e;
    e.first = w;
    e.expert_bytes = w.row_bytes * static_cast<uint64_t>(w.rows);
    e.n_expert = static_cast<int32_t>(t->ne[2]);
    return e;
  }

  // Decodes a small tensor to float into the shared host staging area; `dst` is patched after upload.
  Status vec(const std::string& name, const float** dst, uint64_t expect_elems) {
    DS4_ASSIGN_OR_RETURN(const gguf::TensorInfo* t, find(name));
    const uint64_t n = t->n_elements();
    if (expect_elems && n != expect_elems)
      return invalid_data("model: tensor '" + name + "' has " + std::to_string(n) + " values, expected " +
                          std::to_string(expect_elems));
    // 16-byte aligned (4 floats): the device kernels take float4 paths only on aligned rows — packed at 4-byte
    // offsets after a 3-value tensor (hc_*_scale), 64 of a prefill chunk's 86 HC pres took the slow split kernel.
    const size_t off = (staging_.size() + 3) / 4 * 4;
    staging_.resize(off + n);
    Status st = dequantize_row(t->type, file_.tensor(*t).data, staging_.data() + off, static_cast<int64_t>(n));
    if (!st.ok()) return st.with_context("model: tensor '" + name + "'");
    patches_.push_back({dst, off});
    return Status::Ok();
  }

  Result<backend::Buffer> finish() {
    DS4_ASSIGN_OR_RETURN(backend::Buffer buf, be_.alloc(staging_.size() * sizeof(float), MemCategory::weights));
    if (!staging_.empty()) be_.upload(buf.data(), staging_.data(), staging_.size() * sizeof(float));
    for (auto& p : patches_) *p.first = buf.f32() + p.second;
    return buf;
  }

  uint64_t mapped() const { return mapped_; }
  const std::map<std::string, std::string>& types() const { return types_; }
  const gguf::File& file() const { return file_; }
  backend::Backend& be() { return be_; }

 private:
  const gguf::File& file_;
  backend::Backend& be_;
  std::vector<float> staging_;
  std::vector<std::pair<const float**, size_t>> patches_;
  uint64_t mapped_ = 0;
  std::map<std::string, std::string> types_;  // tensor name → type name
};

std::string name_of(TensorKind k, uint32_t layer) { return modelspec::tensor_name(k, layer); }

Status check_matrix(const Weight& w, int64_t rows, int64_t cols, const std::string& what) {
  if (w.rows != rows || w.cols != cols)
    return invalid_data("model: " + what + " is [" + std::to_string(w.rows) + "][" + std::to_string(w.cols) +
                        "], expected [" + std::to_string(rows) + "][" + std::to_string(cols) + "]");
  return Status::Ok();
}

}  // namespace

Result<ModelWeights> bind_weights(const gguf::File& file, const modelspec::ModelConfig& cfg,
                                  const std::vector<modelspec::LayerPlan>& plan, backend::Backend& be) {
  // Directory check first: every missing tensor, wrong dim or disallowed type is reported at once.
  DS4_RETURN_IF_ERROR(modelspec::check_tensors(cfg, file.tensors()).status());

  Binder b(file, be);
  ModelWeights mw;
  const int64_t E = cfg.n_embd, V = cfg.n_vocab, NHC = cfg.n_hc, M = cfg.hc_mix();
  const int64_t H = cfg.n_head, D = cfg.head_dim, Q = cfg.q_lora_rank, G = cfg.out_groups, Ro = cfg.o_lora_rank;
  const int64_t NE = cfg.n_expert, K = cfg.n_expert_used, F = cfg.expert_ff;
  const int64_t IH = cfg.indexer_heads, ID = cfg.indexer_head_dim;

  DS4_ASSIGN_OR_RETURN(mw.token_embd, b.matrix(name_of(TensorKind::token_embd, 0)));
  DS4_RETURN_IF_ERROR(check_matrix(mw.token_embd, V, E, "token_embd"));
  DS4_ASSIGN_OR_RETURN(mw.output_hc_fn, b.matrix(name_of(TensorKind::output_hc_fn, 0)));
  DS4_RETURN_IF_ERROR(check_matrix(mw.output_hc_fn, NHC, NHC * E, "output_hc_fn"));
  DS4_RETURN_IF_ERROR(b.vec(name_of(TensorKind::output_hc_base, 0), &mw.output_hc_base, NHC));
  DS4_RETURN_IF_ERROR(b.vec(name_of(TensorKind::output_hc_scale, 0), &mw.output_hc_scale, 1));
  DS4_RETURN_IF_ERROR(b.vec(name_of(TensorKind::output_norm, 0), &mw.output_norm, E));
  DS4_ASSIGN_OR_RETURN(mw.output, b.matrix(name_of(TensorKind::output, 0)));
  DS4_RETURN_IF_ERROR(check_matrix(mw.output, V, E, "output"));

  mw.layers.resize(cfg.n_layer);
  for (uint32_t l = 0; l < cfg.n_layer; ++l) {
    LayerWeights& w = mw.layers[l];
    const modelspec::LayerPlan& p = plan[l];
    auto mat = [&](TensorKind k, Weight& dst, int64_t rows, int64_t cols) -> Status {
      const std::string n = name_of(k, l);
      DS4_ASSIGN_OR_RETURN(dst, b.matrix(n));
      return check_matrix(dst, rows, cols, n);
    };
    auto vec = [&](TensorKind k, const float** dst, uint64_t n) { return b.vec(name_of(k, l), dst, n); };
    auto exps = [&](TensorKind k, ExpertWeights& dst, int64_t rows, int64_t cols) -> Status {
      const std::string n = name_of(k, l);
      DS4_ASSIGN_OR_RETURN(dst, b.experts(n));
      if (dst.n_expert != NE) return invalid_data("model: " + n + " has " + std::to_string(dst.n_expert) + " experts");
      return check_matrix(dst.first, rows, cols, n);
    };
    DS4_RETURN_IF_ERROR(mat(TensorKind::hc_attn_fn, w.hc_attn_fn, M, NHC * E));
    DS4_RETURN_IF_ERROR(vec(TensorKind::hc_attn_scale, &w.hc_attn_scale, 3));
    DS4_RETURN_IF_ERROR(vec(TensorKind::hc_attn_base, &w.hc_attn_base, M));
    DS4_RETURN_IF_ERROR(vec(TensorKind::attn_norm, &w.attn_norm, E));
    DS4_RETURN_IF_ERROR(mat(TensorKind::attn_q_a, w.q_a, Q, E));
    DS4_RETURN_IF_ERROR(vec(TensorKind::attn_q_a_norm, &w.q_a_norm, Q));
    DS4_RETURN_IF_ERROR(mat(TensorKind::attn_q_b, w.q_b, H * D, Q));
    DS4_RETURN_IF_ERROR(mat(TensorKind::attn_kv, w.kv, D, E));
    DS4_RETURN_IF_ERROR(vec(TensorKind::attn_kv_a_norm, &w.kv_norm, D));
    DS4_RETURN_IF_ERROR(vec(TensorKind::attn_sinks, &w.sinks, H));
    DS4_RETURN_IF_ERROR(mat(TensorKind::attn_output_a, w.out_a, G * Ro, H * D / G));
    DS4_RETURN_IF_ERROR(mat(TensorKind::attn_output_b, w.out_b, E, G * Ro));
    if (p.has_compressor) {
      const int64_t wd = p.compressor_width, r = p.compress_ratio;
      DS4_RETURN_IF_ERROR(mat(TensorKind::attn_compressor_kv, w.comp_kv, wd, E));
      DS4_RETURN_IF_ERROR(mat(TensorKind::attn_compressor_gate, w.comp_gate, wd, E));
      DS4_RETURN_IF_ERROR(vec(TensorKind::attn_compressor_ape, &w.comp_ape, static_cast<uint64_t>(r * wd)));
      DS4_RETURN_IF_ERROR(vec(TensorKind::attn_compressor_norm, &w.comp_norm, D));
    }
    if (p.has_indexer) {
      DS4_RETURN_IF_ERROR(mat(TensorKind::indexer_attn_q_b, w.idx_q_b, IH * ID, Q));
      DS4_RETURN_IF_ERROR(mat(TensorKind::indexer_proj, w.idx_proj, IH, E));
      DS4_RETURN_IF_ERROR(mat(TensorKind::indexer_compressor_kv, w.idx_comp_kv, 2 * ID, E));
      DS4_RETURN_IF_ERROR(mat(TensorKind::indexer_compressor_gate, w.idx_comp_gate, 2 * ID, E));
      DS4_RETURN_IF_ERROR(vec(TensorKind::indexer_compressor_ape, &w.idx_comp_ape,
                              static_cast<uint64_t>(p.compress_ratio * 2 * ID)));
      DS4_RETURN_IF_ERROR(vec(TensorKind::indexer_compressor_norm, &w.idx_comp_norm, ID));
    }
    DS4_RETURN_IF_ERROR(mat(TensorKind::hc_ffn_fn, w.hc_ffn_fn, M, NHC * E));
    DS4_RETURN_IF_ERROR(vec(TensorKind::hc_ffn_scale, &w.hc_ffn_scale, 3));
    DS4_RETURN_IF_ERROR(vec(TensorKind::hc_ffn_base, &w.hc_ffn_base, M));
    DS4_RETURN_IF_ERROR(vec(TensorKind::ffn_norm, &w.ffn_norm, E));
    DS4_RETURN_IF_ERROR(mat(TensorKind::ffn_gate_inp, w.router, NE, E));
    if (p.hash_routing) {
      const std::string n = name_of(TensorKind::ffn_gate_tid2eid, l);
      DS4_ASSIGN_OR_RETURN(const gguf::TensorInfo* t, b.find(n));
      if (t->type != GgmlType::I32 || t->ne.size() != 2 || t->ne[0] != static_cast<uint64_t>(K) ||
          t->ne[1] != static_cast<uint64_t>(V))
        return invalid_data("model: " + n + " must be I32 [" + std::to_string(K) + ", " + std::to_string(V) + "]");
      const int32_t* ids = reinterpret_cast<const int32_t*>(file.tensor(*t).data);
      for (int64_t i = 0; i < K * V; ++i)
        if (ids[i] < 0 || ids[i] >= NE)
          return invalid_data("model: " + n + " entry " + std::to_string(i) + " = " + std::to_string(ids[i]) +
                              " is not an expert id < " + std::to_string(NE));
      DS4_ASSIGN_OR_RETURN(const void* data, be.map_weight(ids, t->n_bytes));
      w.tid2eid = static_cast<const int32_t*>(data);
    } else if (file.find_tensor(name_of(TensorKind::exp_probs_b, l))) {
      DS4_RETURN_IF_ERROR(vec(TensorKind::exp_probs_b, &w.router_bias, NE));
    }
    DS4_RETURN_IF_ERROR(exps(TensorKind::ffn_gate_exps, w.exp_gate, F, E));
    DS4_RETURN_IF_ERROR(exps(TensorKind::ffn_up_exps, w.exp_up, F, E));
    DS4_RETURN_IF_ERROR(exps(TensorKind::ffn_down_exps, w.exp_down, E, F));
    DS4_RETURN_IF_ERROR(mat(TensorKind::ffn_gate_shexp, w.sh_gate, F, E));
    DS4_RETURN_IF_ERROR(mat(TensorKind::ffn_up_shexp, w.sh_up, F, E));
    DS4_RETURN_IF_ERROR(mat(TensorKind::ffn_down_shexp, w.sh_down, E, F));
  }
  DS4_ASSIGN_OR_RETURN(mw.small, b.finish());
  mw.mapped_bytes = b.mapped();
  auto type_of = [&](const char* suffix) {
    auto it = b.types().find(suffix);
    return it == b.types().end() ? std::string("?") : it->second;
  };
  mw.quant_summary = type_of("blk.0.attn_q_a.weight") + " attn, " + type_of("blk.0.ffn_gate_exps.weight") + "/" +
                     type_of("blk.0.ffn_down_exps.weight") + " experts, " + type_of("token_embd.weight") + " embd";
  return mw;
}

}  // namespace ds4::model
