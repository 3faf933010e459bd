// forward.cpp — see forward.h. Section numbers refer to MODEL.md.
#include "model/forward.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "model/rope.h"

namespace ds4::model {

using backend::Buffer;
using backend::MatmulArgs;

Forward::Forward(backend::Backend& be, const modelspec::ModelConfig& cfg, const ModelWeights& w,
                 const ForwardOptions& o)
    : be_(be), cfg_(cfg), plan_(modelspec::layer_plan(cfg)), w_(w), opts_(o) {}

Result<std::unique_ptr<Forward>> Forward::create(backend::Backend& be, const modelspec::ModelConfig& cfg,
                                                 const ModelWeights& weights, const ForwardOptions& opts) {
  if (opts.max_chunk < 1) return invalid_argument("forward: max_chunk must be >= 1");
  std::unique_ptr<Forward> f(new Forward(be, cfg, weights, opts));
  RopeFreqParams rp;
  rp.n_rot = static_cast<int>(cfg.n_rot);
  rp.base = cfg.rope_freq_base;
  f->freq_main_ = rope_freqs(rp);
  rp.base = cfg.compress_rope_freq_base;
  rp.yarn = true;
  rp.factor = cfg.rope_scaling_factor;
  rp.beta_fast = cfg.yarn_beta_fast;
  rp.beta_slow = cfg.yarn_beta_slow;
  rp.orig_context = static_cast<double>(cfg.rope_orig_context);
  f->freq_comp_ = rope_freqs(rp);
  DS4_RETURN_IF_ERROR(f->alloc_scratch());
  return f;
}

int64_t Forward::raw_cap() const { return cfg_.sliding_window + opts_.max_chunk - 1; }

Result<KvState> Forward::new_state() const { return KvState::create(be_, cfg_, plan_, raw_cap()); }

Status Forward::alloc_scratch() {
  const int64_t C = opts_.max_chunk;
  const int64_t E = cfg_.n_embd, NHC = cfg_.n_hc, M = cfg_.hc_mix(), HD = cfg_.q_dim(), D = cfg_.head_dim;
  auto f32 = [&](Buffer& b, int64_t per_token) -> Status {
    DS4_ASSIGN_OR_RETURN(b, be_.alloc(static_cast<uint64_t>(C * per_token) * 4, MemCategory::scratch));
    return Status::Ok();
  };
  DS4_RETURN_IF_ERROR(f32(x_, NHC * E));
  DS4_RETURN_IF_ERROR(f32(x2_, NHC * E));
  DS4_RETURN_IF_ERROR(f32(flat_, NHC * E));
  DS4_RETURN_IF_ERROR(f32(mix_, M));
  DS4_RETURN_IF_ERROR(f32(pre_, NHC));
  DS4_RETURN_IF_ERROR(f32(post_, NHC));
  DS4_RETURN_IF_ERROR(f32(comb_, NHC * NHC));
  DS4_RETURN_IF_ERROR(f32(y_, E));
  DS4_RETURN_IF_ERROR(f32(xn_, E));
  DS4_RETURN_IF_ERROR(f32(qa_, cfg_.q_lora_rank));
  DS4_RETURN_IF_ERROR(f32(q_, HD));
  DS4_RETURN_IF_ERROR(f32(kv_, D));
  DS4_RETURN_IF_ERROR(f32(ckv_, 2 * std::max<int64_t>(D, cfg_.indexer_head_dim)));
  DS4_RETURN_IF_ERROR(f32(cgate_, 2 * std::max<int64_t>(D, cfg_.indexer_head_dim)));
  DS4_RETURN_IF_ERROR(f32(cpos_, 1));
  DS4_RETURN_IF_ERROR(f32(iq_, int64_t{cfg_.indexer_heads} * cfg_.indexer_head_dim));
  DS4_RETURN_IF_ERROR(f32(iw_, cfg_.indexer_heads));
  DS4_RETURN_IF_ERROR(f32(idx_, std::max<int64_t>(1, cfg_.indexer_top_k)));
  DS4_RETURN_IF_ERROR(f32(icount_, 1));
  DS4_RETURN_IF_ERROR(f32(ccount_, 1));
  DS4_RETURN_IF_ERROR(f32(pos_, 1));
  DS4_RETURN_IF_ERROR(f32(tok_, 1));
  DS4_RETURN_IF_ERROR(f32(attn_, HD));
  DS4_RETURN_IF_ERROR(f32(low_, cfg_.out_low_dim()));
  DS4_RETURN_IF_ERROR(f32(f_, E));
  DS4_RETURN_IF_ERROR(f32(rlogit_, cfg_.n_expert));
  DS4_RETURN_IF_ERROR(f32(rids_, cfg_.n_expert_used));
  DS4_RETURN_IF_ERROR(f32(rw_, cfg_.n_expert_used));
  DS4_RETURN_IF_ERROR(f32(sg_, cfg_.expert_ff));
  DS4_RETURN_IF_ERROR(f32(su_, cfg_.expert_ff));
  DS4_RETURN_IF_ERROR(f32(sout_, E));
  DS4_RETURN_IF_ERROR(f32(hw_, NHC));
  DS4_RETURN_IF_ERROR(f32(logits_, cfg_.n_vocab));
  host_i32_.resize(static_cast<size_t>(C));
  return Status::Ok();
}

uint64_t Forward::scratch_bytes() const {
  uint64_t t = 0;
  for (const Buffer* b : {&x_, &x2_, &flat_, &mix_, &pre_, &post_, &comb_, &y_, &xn_, &qa_, &q_, &kv_, &ckv_,
                          &cgate_, &cpos_, &iq_, &iw_, &idx_, &icount_, &ccount_, &pos_, &tok_, &attn_, &low_, &f_,
                          &rlogit_, &rids_, &rw_, &sg_, &su_, &sout_, &hw_, &logits_})
    t += b->bytes();
  return t;
}

void Forward::mm(const Weight& w, const float* x, int64_t xs, float* y, int64_t ys, int64_t n) {
  be_.matmul(MatmulArgs{w, x, xs, y, ys, n, opts_.numerics.matmul});
}

// §6.2 "Pre": controls from RMSNorm(flat(X)), Sinkhorn split, collapse, then the sublayer norm → xn_.
void Forward::hc_pre(const Weight& fn, const float* scale, const float* base, const float* norm_w, int64_t n) {
  const int64_t E = cfg_.n_embd, NHC = cfg_.n_hc, HCD = cfg_.hc_dim(), M = cfg_.hc_mix();
  const float rms_eps = static_cast<float>(cfg_.rms_eps);
  be_.rms_norm({x_.f32(), flat_.f32(), nullptr, n, HCD, HCD, rms_eps});
  mm(fn, flat_.f32(), HCD, mix_.f32(), M, n);
  be_.hc_split({mix_.f32(), scale, base, n, static_cast<int32_t>(NHC), static_cast<int32_t>(cfg_.sinkhorn_iters),
                static_cast<float>(cfg_.hc_eps), pre_.f32(), post_.f32(), comb_.f32()});
  be_.hc_collapse({x_.f32(), pre_.f32(), y_.f32(), n, E, static_cast<int32_t>(NHC)});
  be_.rms_norm({y_.f32(), xn_.f32(), norm_w, n, E, E, rms_eps});
}

// §6.2 "Post": X' = post ⊗ f + Cᵀ·X, into x2_, then swap so x_ holds the new state.
void Forward::hc_post_swap(int64_t n) {
  be_.hc_post({x_.f32(), f_.f32(), post_.f32(), comb_.f32(), x2_.f32(), n, cfg_.n_embd,
               static_cast<int32_t>(cfg_.n_hc)});
  std::swap(x_, x2_);
}

// §7.4: both compressors of layer l over the chunk; appends the emitted rows to the session.
Status Forward::compress(size_t l, KvState& kv, int64_t n, int64_t pos0, bool indexer) {
  const auto& p = plan_[l];
  const LayerWeights& w = w_.layers[l];
  LayerKv& k = kv.layers()[l];
  const int64_t r = p.compress_ratio, E = cfg_.n_embd;
  const int64_t out_dim = indexer ? cfg_.indexer_head_dim : cfg_.head_dim;
  const int64_t width = indexer ? 2 * out_dim : p.compressor_width;
  const bool overlap = p.kind == modelspec::AttentionKind::csa;  // two-series pooling (CSA, ratio 4)
  const int64_t first = pos0 / r, after = (pos0 + n) / r;  // rows [first, after) are emitted now
  DS4_RETURN_IF_ERROR(kv.reserve_comp(l, after));
  mm(indexer ? w.idx_comp_kv : w.comp_kv, xn_.f32(), E, ckv_.f32(), width, n);
  mm(indexer ? w.idx_comp_gate : w.comp_gate, xn_.f32(), E, cgate_.f32(), width, n);
  float* rows = (indexer ? k.index_rows.f32() : k.comp.f32()) + first * out_dim;
  int64_t emitted = 0;
  backend::CompressorArgs a;
  a.kv = ckv_.f32();
  a.score = cgate_.f32();
  a.ape = indexer ? w.idx_comp_ape : w.comp_ape;
  a.n = n;
  a.pos0 = static_cast<int32_t>(pos0);
  a.ratio = static_cast<int32_t>(r);
  a.out_dim = static_cast<int32_t>(out_dim);
  a.overlap = overlap;
  a.slots = static_cast<int32_t>(k.slots);
  a.state_kv = indexer ? k.index_kv.f32() : k.comp_kv.f32();
  a.state_score = indexer ? k.index_score.f32() : k.comp_score.f32();
  a.out = rows;
  a.out_pos = cpos_.i32();
  a.n_out = &emitted;
  be_.compressor(a);
  if (emitted != after - first) return internal_error("forward: compressor emitted an unexpected row count");
  if (emitted == 0) return Status::Ok();
  // row = RMSNorm_w(v); RoPE at the block's first token (compressed table); then the simulation.
  be_.rms_norm({rows, rows, indexer ? w.idx_comp_norm : w.comp_norm, emitted, out_dim, out_dim,
                static_cast<float>(cfg_.rms_eps)});
  be_.rope({rows, cpos_.i32(), emitted, 1, static_cast<int32_t>(out_dim), static_cast<int32_t>(cfg_.n_rot),
            freq_comp_.data(), false});
  const ForwardNumerics& nm = opts_.numerics;
  if (indexer) {
    if (nm.indexer_qat) be_.indexer_qat({rows, emitted, static_cast<int32_t>(out_dim)});
  } else if (nm.fp8_kv) {
    be_.fp8_round({rows, emitted, out_dim, static_cast<int32_t>(cfg_.nope_dim())});
  }
  if (nm.f16_cache) be_.f16_round(rows, emitted * out_dim);
  if (!indexer) k.n_comp = after;
  return Status::Ok();
}

Status Forward::attention_layer(size_t l, KvState& kv, int64_t n, int64_t pos0) {
  const auto& p = plan_[l];
  const LayerWeights& w = w_.layers[l];
  LayerKv& k = kv.layers()[l];
  const ForwardNumerics& nm = opts_.numerics;
  const int64_t E = cfg_.n_embd, H = cfg_.n_head, D = cfg_.head_dim, Q = cfg_.q_lora_rank, HD = cfg_.q_dim();
  const int32_t R = static_cast<int32_t>(cfg_.n_rot);
  const float eps = static_cast<float>(cfg_.rms_eps);
  const double* freq = p.has_compressor ? freq_comp_.data() : freq_main_.data();

  hc_pre(w.hc_attn_fn, w.hc_attn_scale, w.hc_attn_base, w.attn_norm, n);

  // §7.1 query path.
  mm(w.q_a, xn_.f32(), E, qa_.f32(), Q, n);
  be_.rms_norm({qa_.f32(), qa_.f32(), w.q_a_norm, n, Q, Q, eps});
  mm(w.q_b, qa_.f32(), Q, q_.f32(), HD, n);
  be_.rms_norm({q_.f32(), q_.f32(), nullptr, n * H, D, D, eps});
  be_.rope({q_.f32(), pos_.i32(), n, static_cast<int32_t>(H), static_cast<int32_t>(D), R, freq, false});

  // §7.2 KV path, then the raw ring (§7.3): the whole chunk is written before attention reads it.
  mm(w.kv, xn_.f32(), E, kv_.f32(), D, n);
  be_.rms_norm({kv_.f32(), kv_.f32(), w.kv_norm, n, D, D, eps});
  be_.rope({kv_.f32(), pos_.i32(), n, 1, static_cast<int32_t>(D), R, freq, false});
  if (nm.fp8_kv) be_.fp8_round({kv_.f32(), n, D, static_cast<int32_t>(cfg_.nope_dim())});
  if (nm.f16_cache) be_.f16_round(kv_.f32(), n * D);
  const int64_t cap = kv.geometry().raw_cap;
  for (int64_t i = 0; i < n; ++i)
    be_.copy(k.raw.f32() + ((pos0 + i) % cap) * D, kv_.f32() + i * D, static_cast<uint64_t>(D) * 4);

  // §7.4 compressors, §7.5 indexer.
  const int32_t* comp_idx = nullptr;
  const int32_t* comp_count = nullptr;
  if (p.has_compressor) {
    DS4_RETURN_IF_ERROR(compress(l, kv, n, pos0, false));
    if (p.has_indexer) DS4_RETURN_IF_ERROR(compress(l, kv, n, pos0, true));
    const int64_t r = p.compress_ratio;
    bool any_select = false;
    for (int64_t i = 0; i < n; ++i) {
      host_i32_[i] = static_cast<int32_t>((pos0 + i + 1) / r);
      any_select |= p.has_indexer && host_i32_[i] > static_cast<int32_t>(cfg_.indexer_top_k);
    }
    be_.upload(ccount_.data(), host_i32_.data(), static_cast<uint64_t>(n) * 4);
    comp_count = ccount_.i32();
    if (any_select) {
      const int64_t IH = cfg_.indexer_heads, ID = cfg_.indexer_head_dim;
      mm(w.idx_q_b, qa_.f32(), Q, iq_.f32(), IH * ID, n);
      be_.rope({iq_.f32(), pos_.i32(), n, static_cast<int32_t>(IH), static_cast<int32_t>(ID), R, freq, false});
      if (nm.indexer_qat) be_.indexer_qat({iq_.f32(), n * IH, static_cast<int32_t>(ID)});
      mm(w.idx_proj, xn_.f32(), E, iw_.f32(), IH, n);
      be_.scale(iw_.f32(), static_cast<float>(1.0 / std::sqrt(static_cast<double>(ID * IH))), n * IH);
      backend::IndexerArgs ia;
      ia.q = iq_.f32();
      ia.w = iw_.f32();
      ia.rows = k.index_rows.f32();
      ia.n_rows = ccount_.i32();
      ia.n = n;
      ia.heads = static_cast<int32_t>(IH);
      ia.head_dim = static_cast<int32_t>(ID);
      ia.top_k = static_cast<int32_t>(cfg_.indexer_top_k);
      ia.idx = idx_.i32();
      ia.count = icount_.i32();
      be_.indexer(ia);
      comp_idx = idx_.i32();
      comp_count = icount_.i32();
    }
  }

  // §7.6 attention with sinks.
  backend::AttentionArgs aa;
  aa.q = q_.f32();
  aa.pos = pos_.i32();
  aa.n = n;
  aa.heads = static_cast<int32_t>(H);
  aa.head_dim = static_cast<int32_t>(D);
  aa.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  aa.sinks = w.sinks;
  aa.raw = k.raw.f32();
  aa.raw_cap = cap;
  aa.window = static_cast<int32_t>(cfg_.sliding_window);
  aa.comp = p.has_compressor ? k.comp.f32() : nullptr;
  aa.comp_count = comp_count;
  aa.comp_idx = comp_idx;
  aa.comp_idx_stride = cfg_.indexer_top_k;
  aa.out = attn_.f32();
  be_.attention(aa);

  // §7.7 inverse RoPE at the query position, grouped output projection.
  be_.rope({attn_.f32(), pos_.i32(), n, static_cast<int32_t>(H), static_cast<int32_t>(D), R, freq, true});
  const int64_t G = cfg_.out_groups, Ro = cfg_.o_lora_rank, gin = cfg_.out_group_in();
  for (int64_t g = 0; g < G; ++g)
    mm(w.out_a.row_slice(g * Ro, Ro), attn_.f32() + g * gin, HD, low_.f32() + g * Ro, G * Ro, n);
  mm(w.out_b, low_.f32(), G * Ro, f_.f32(), E, n);
  hc_post_swap(n);
  return Status::Ok();
}

// §8 MoE: router, routed experts, shared expert.
void Forward::ffn_layer(size_t l, int64_t n) {
  const auto& p = plan_[l];
  const LayerWeights& w = w_.layers[l];
  const int64_t E = cfg_.n_embd, NE = cfg_.n_expert, K = cfg_.n_expert_used, F = cfg_.expert_ff;
  hc_pre(w.hc_ffn_fn, w.hc_ffn_scale, w.hc_ffn_base, w.ffn_norm, n);

  mm(w.router, xn_.f32(), E, rlogit_.f32(), NE, n);
  backend::RouterArgs ra;
  ra.logits = rlogit_.f32();
  ra.bias = w.router_bias;
  ra.hash = p.hash_routing ? w.tid2eid : nullptr;
  ra.vocab = static_cast<int32_t>(cfg_.n_vocab);
  ra.tokens = tok_.i32();
  ra.n = n;
  ra.n_expert = static_cast<int32_t>(NE);
  ra.k = static_cast<int32_t>(K);
  ra.scale = static_cast<float>(cfg_.expert_weights_scale);
  ra.denom_guard = opts_.numerics.router_denom_guard;
  ra.ids = rids_.i32();
  ra.weights = rw_.f32();
  be_.router(ra);

  backend::MoeArgs ma;
  ma.gate = w.exp_gate;
  ma.up = w.exp_up;
  ma.down = w.exp_down;
  ma.x = xn_.f32();
  ma.ids = rids_.i32();
  ma.weights = rw_.f32();
  ma.n = n;
  ma.k = static_cast<int32_t>(K);
  ma.dim = static_cast<int32_t>(E);
  ma.ff = static_cast<int32_t>(F);
  ma.clamp = p.swiglu_clamp;
  ma.numerics = opts_.numerics.matmul;
  ma.out = f_.f32();
  be_.moe(ma);

  mm(w.sh_gate, xn_.f32(), E, sg_.f32(), F, n);
  mm(w.sh_up, xn_.f32(), E, su_.f32(), F, n);
  be_.swiglu({sg_.f32(), su_.f32(), sg_.f32(), n * F, opts_.numerics.shared_expert_clamp ? p.swiglu_clamp : 0.0f});
  mm(w.sh_down, sg_.f32(), F, sout_.f32(), E, n);
  be_.add(f_.f32(), sout_.f32(), n * E);
  hc_post_swap(n);
}

// §6.3 output head for columns [first, first+count) of the chunk → logits (host).
void Forward::head(int64_t first, int64_t count, float* logits_host) {
  const int64_t E = cfg_.n_embd, NHC = cfg_.n_hc, HCD = cfg_.hc_dim(), V = cfg_.n_vocab;
  const float eps = static_cast<float>(cfg_.rms_eps);
  const float* X = x_.f32() + first * HCD;
  be_.rms_norm({X, flat_.f32(), nullptr, count, HCD, HCD, eps});
  mm(w_.output_hc_fn, flat_.f32(), HCD, mix_.f32(), NHC, count);
  be_.hc_head({mix_.f32(), w_.output_hc_scale, w_.output_hc_base, count, static_cast<int32_t>(NHC),
               static_cast<float>(cfg_.hc_eps), hw_.f32()});
  be_.hc_collapse({X, hw_.f32(), y_.f32(), count, E, static_cast<int32_t>(NHC)});
  be_.rms_norm({y_.f32(), xn_.f32(), w_.output_norm, count, E, E, eps});
  mm(w_.output, xn_.f32(), E, logits_.f32(), V, count);
  be_.download(logits_host, logits_.data(), static_cast<uint64_t>(count * V) * 4);
}

Status Forward::eval(KvState& kv, std::span<const int32_t> tokens, int64_t pos0, float* logits_out,
                     bool all_logits) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) return invalid_argument("forward: empty chunk");
  if (n > opts_.max_chunk)
    return invalid_argument("forward: chunk of " + std::to_string(n) + " tokens exceeds max_chunk " +
                            std::to_string(opts_.max_chunk));
  if (pos0 + n > INT32_MAX) return invalid_argument("forward: position exceeds 2^31");
  for (int64_t i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= static_cast<int32_t>(cfg_.n_vocab))
      return invalid_argument("forward: token id " + std::to_string(tokens[i]) + " at chunk index " +
                              std::to_string(i) + " is outside the vocabulary [0, " + std::to_string(cfg_.n_vocab) + ")");
  be_.upload(tok_.data(), tokens.data(), static_cast<uint64_t>(n) * 4);
  for (int64_t i = 0; i < n; ++i) host_i32_[i] = static_cast<int32_t>(pos0 + i);
  be_.upload(pos_.data(), host_i32_.data(), static_cast<uint64_t>(n) * 4);

  be_.embed({w_.token_embd, tok_.i32(), n, static_cast<int32_t>(cfg_.n_hc), x_.f32()});
  for (size_t l = 0; l < plan_.size(); ++l) {
    Status st = attention_layer(l, kv, n, pos0);
    if (!st.ok()) return st.with_context("layer " + std::to_string(l));
    ffn_layer(l, n);
  }
  if (all_logits) {
    head(0, n, logits_out);
  } else {
    head(n - 1, 1, logits_out);
  }
  return be_.sync();
}

}  // namespace ds4::model
