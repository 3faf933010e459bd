// forward.cpp — see forward.h. Section numbers refer to MODEL.md.
#include "model/forward.h"

#include <algorithm>
#include <chrono>
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
  if (opts.graphs) f->graph_owner_ = be.graph_owner();  // keys hold our scratch addresses (forward_graph.cpp)
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

int64_t Forward::raw_cap() const { return modelspec::raw_ring_rows(cfg_, opts_.max_chunk); }

Result<KvState> Forward::new_state(int64_t max_context) const {
  return KvState::create(be_, cfg_, plan_, modelspec::KvLayout{opts_.max_chunk, be_.region_block_bytes()}, max_context);
}

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
  DS4_RETURN_IF_ERROR(f32(ckv_, 2 * (D + cfg_.indexer_head_dim)));  // attention compressor, then the indexer's
  DS4_RETURN_IF_ERROR(f32(cgate_, 2 * (D + cfg_.indexer_head_dim)));
  DS4_RETURN_IF_ERROR(f32(cpos_, 2));  // the attention compressor's rows, then the indexer's (from C)
  DS4_RETURN_IF_ERROR(f32(iq_, int64_t{cfg_.indexer_heads} * cfg_.indexer_head_dim));
  DS4_RETURN_IF_ERROR(f32(iw_, cfg_.indexer_heads));
  DS4_RETURN_IF_ERROR(f32(idx_, std::max<int64_t>(1, cfg_.indexer_top_k)));
  DS4_RETURN_IF_ERROR(f32(icount_, 1));
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
  ratio_slot_.assign(plan_.size(), -1);
  for (size_t l = 0; l < plan_.size(); ++l) {
    if (!plan_[l].has_compressor) continue;
    const int64_t r = plan_[l].compress_ratio;
    auto it = std::find(ratios_.begin(), ratios_.end(), r);
    ratio_slot_[l] = static_cast<int>(it - ratios_.begin());
    if (it == ratios_.end()) ratios_.push_back(r);
  }
  const uint64_t in_bytes = step_input_bytes(C, C > 1 ? C : 0);  // tables need room only past one column
  host_in_.resize(in_bytes);
  DS4_ASSIGN_OR_RETURN(in_, be_.alloc(in_bytes, MemCategory::scratch));
  off_.reserve(static_cast<size_t>(C));
  host_ids_.reserve(static_cast<size_t>(C));
  return Status::Ok();
}

uint64_t Forward::planned_scratch_bytes(const modelspec::ModelConfig& cfg, int64_t max_chunk) {
  const auto plan = modelspec::layer_plan(cfg);
  std::vector<int64_t> ratios;
  for (const auto& p : plan)
    if (p.has_compressor && std::find(ratios.begin(), ratios.end(), int64_t{p.compress_ratio}) == ratios.end())
      ratios.push_back(p.compress_ratio);
  // step_input_bytes(C, C > 1 ? C : 0) for that count of distinct compression ratios and layers.
  const uint64_t C = static_cast<uint64_t>(max_chunk), NR = ratios.size();
  const uint64_t ints = (C * (2 + 2 * NR) + NR) * sizeof(int32_t);
  uint64_t in = (ints + 7) / 8 * 8;
  if (max_chunk > 1)
    in += plan.size() * 5 * C * sizeof(const float*) + plan.size() * 2 * C * sizeof(backend::CompressorSegment);
  return modelspec::forward_activation_bytes(cfg, max_chunk) + in;
}

uint64_t Forward::scratch_bytes() const {
  uint64_t t = 0;
  for (const Buffer* b : {&x_, &x2_, &flat_, &mix_, &pre_, &post_, &comb_, &y_, &xn_, &qa_, &q_, &kv_, &ckv_,
                          &cgate_, &cpos_, &iq_, &iw_, &idx_, &icount_, &attn_, &low_, &f_,
                          &rlogit_, &rids_, &rw_, &sg_, &su_, &sout_, &hw_, &logits_, &in_})
    t += b->bytes();
  return t;
}

void Forward::mm(const Weight& w, const float* x, int64_t xs, float* y, int64_t ys, int64_t n) {
  be_.matmul(MatmulArgs{w, x, xs, y, ys, n, opts_.numerics.matmul});
}

void Forward::prefetch(uint32_t part, std::initializer_list<Weight> ws) {
  if ((opts_.l2_prefetch & part) == 0) return;
  be_.fork();  // behind the main lane's work so far (the matmul before has finished with the memory bus)
  be_.prefetch({ws.begin(), ws.size()});
  be_.resume_main();
}

// §6.2 "Pre": controls from RMSNorm(flat(X)), Sinkhorn split, collapse, then the sublayer norm → xn_
// (one fused backend op; flat_ and y_ are its scratch). split = false: post_ and comb_ come from a later
// hc_split (kBranchHcSplit).
void Forward::hc_pre(const Weight& fn, const float* scale, const float* base, const float* norm_w, int64_t n,
                     bool split) {
  backend::HcPreArgs a;
  a.x = x_.f32();
  a.fn = fn;
  a.scale = scale;
  a.base = base;
  a.norm_w = norm_w;
  a.n = n;
  a.dim = cfg_.n_embd;
  a.nhc = static_cast<int32_t>(cfg_.n_hc);
  a.iters = static_cast<int32_t>(cfg_.sinkhorn_iters);
  a.hc_eps = static_cast<float>(cfg_.hc_eps);
  a.rms_eps = static_cast<float>(cfg_.rms_eps);
  a.numerics = opts_.numerics.matmul;
  a.flat = flat_.f32();
  a.mix = mix_.f32();
  a.pre = pre_.f32();
  a.post = post_.f32();
  a.comb = comb_.f32();
  a.y = y_.f32();
  a.xn = xn_.f32();
  a.split = split;
  a.prev_post = pending_post_;  // the previous sublayer's post (it writes x_), folded into the op
  pending_post_.n = 0;
  be_.hc_pre(a);
}

void Forward::hc_split(const float* scale, const float* base, int64_t n) {
  be_.hc_split({mix_.f32(), scale, base, n, static_cast<int32_t>(cfg_.n_hc), static_cast<int32_t>(cfg_.sinkhorn_iters),
                static_cast<float>(cfg_.hc_eps), pre_.f32(), post_.f32(), comb_.f32()});
}

// §6.2 "Post": X' = post ⊗ (f + f_add) + Cᵀ·X, into x2_, then swap so x_ holds the new state. Issued by the
// next hc_pre (HcPreArgs::prev_post) or flush_post: until then nothing writes what it reads (x2_ after the swap,
// f_, f_add, post_, comb_) — the next sublayer starts with its hc_pre, the head with its head-form hc_pre (head()).
void Forward::hc_post_swap(int64_t n, const float* f_add) {
  backend::HcPostArgs a{x_.f32(), f_.f32(), post_.f32(), comb_.f32(), x2_.f32(), n, cfg_.n_embd,
                        static_cast<int32_t>(cfg_.n_hc)};
  a.f_add = f_add;
  pending_post_ = a;
  std::swap(x_, x2_);
}

void Forward::flush_post() {
  if (pending_post_.n > 0) be_.hc_post(pending_post_);
  pending_post_.n = 0;
}

// Where one compressor's projections of the step live in ckv_ / cgate_ ([n][width] each): the attention
// compressor's at the start, the indexer compressor's after max_chunk rows of 2·head_dim.
float* Forward::comp_in(const Buffer& b, bool indexer) const {
  return b.f32() + (indexer ? opts_.max_chunk * 2 * cfg_.head_dim : 0);
}

// §7.4 projections of layer l's compressors for all n columns of the step → comp_in(ckv_/cgate_, …), and
// with `select` the indexer's query and head weights (§7.5) → iq_, iw_: independent matmuls, one
// backend call (CUDA runs a CSA layer's six F16 projections in one launch). The stateful part runs per
// segment in compress().
void Forward::compressor_proj(size_t l, int64_t n, bool select) {
  const auto& p = plan_[l];
  const LayerWeights& w = w_.layers[l];
  const int64_t E = cfg_.n_embd;
  MatmulArgs jobs[6];
  size_t k = 0;
  auto add = [&](const Weight& wt, const float* x, int64_t xs, float* y, int64_t ys) {
    jobs[k++] = MatmulArgs{wt, x, xs, y, ys, n, opts_.numerics.matmul};
  };
  add(w.comp_kv, xn_.f32(), E, comp_in(ckv_, false), p.compressor_width);
  add(w.comp_gate, xn_.f32(), E, comp_in(cgate_, false), p.compressor_width);
  if (p.has_indexer) {
    const int64_t IH = cfg_.indexer_heads, ID = cfg_.indexer_head_dim;
    add(w.idx_comp_kv, xn_.f32(), E, comp_in(ckv_, true), 2 * ID);
    add(w.idx_comp_gate, xn_.f32(), E, comp_in(cgate_, true), 2 * ID);
    if (select) {
      add(w.idx_q_b, qa_.f32(), cfg_.q_lora_rank, iq_.f32(), IH * ID);
      add(w.idx_proj, xn_.f32(), E, iw_.f32(), IH);
    }
  }
  be_.matmul_many({jobs, k});
}

// §7.4: layer l's compressors (the attention compressor and, with an indexer, the indexer's) over every
// segment (columns of ckv_/cgate_), in one backend call (they touch disjoint frontiers, rows and
// positions); then each one's emitted rows are finished and appended to each session (room was reserved
// by prepare()). One session: the plain call; several (or a step recorded as a graph, tables_step_): one
// call with the per-session table uploaded with the step inputs (each session's frontier is sequential in
// its own positions, the sessions are independent).
Status Forward::compress(size_t l, std::span<const Segment> segs, int64_t n, const backend::IndexerQatArgs* qat) {
  const size_t kinds = plan_[l].has_indexer ? 2 : 1;  // [0] the attention compressor, [1] the indexer's
  backend::CompressorArgs args[2];
  int64_t emitted_one[2] = {0, 0};
  for (size_t c = 0; c < kinds; ++c) DS4_RETURN_IF_ERROR(compressor_args(l, segs, c == 1, args[c], &emitted_one[c]));
  if (qat)  // the indexer query's RoPE + QAT beside them (disjoint memory; a backend may make it one launch)
    be_.compressors_and_qat({args, kinds}, *qat);
  else
    be_.compressor_many({args, kinds});
  for (size_t c = 0; c < kinds; ++c) DS4_RETURN_IF_ERROR(compressed_rows(l, segs, n, c == 1, emitted_one[c]));
  return Status::Ok();
}

// One compressor's call (compress()); with one session the backend writes its emitted row count to
// *emitted_one and the rows' positions to cpos_ (the indexer's after the attention compressor's C).
Status Forward::compressor_args(size_t l, std::span<const Segment> segs, bool indexer, backend::CompressorArgs& a,
                                int64_t* emitted_one) {
  const auto& p = plan_[l];
  const LayerWeights& w = w_.layers[l];
  const int64_t r = p.compress_ratio;
  const int64_t out_dim = indexer ? cfg_.indexer_head_dim : cfg_.head_dim;
  a.kv = comp_in(ckv_, indexer);
  a.score = comp_in(cgate_, indexer);
  a.ape = indexer ? w.idx_comp_ape : w.comp_ape;
  a.ratio = static_cast<int32_t>(r);
  a.out_dim = static_cast<int32_t>(out_dim);
  a.overlap = p.kind == modelspec::AttentionKind::csa;  // two-series pooling (CSA, ratio 4)
  a.slots = static_cast<int32_t>(segs[0].kv->layers()[l].slots);
  const bool plain = !tables_step_;  // one session, its frontier and rows by value
  if (plain) {
    const Segment& sg = segs[0];
    LayerKv& k = sg.kv->layers()[l];
    a.n = static_cast<int64_t>(sg.tokens.size());
    a.pos0 = static_cast<int32_t>(sg.pos0);
    a.state_kv = indexer ? k.index_kv.f32() : k.comp_kv.f32();
    a.state_score = indexer ? k.index_score.f32() : k.comp_score.f32();
    a.out = (indexer ? k.index_rows.f32() : k.comp.f32()) + (sg.pos0 / r) * out_dim;
    a.out_pos = cpos_.i32() + (indexer ? opts_.max_chunk : 0);
    a.n_out = emitted_one;
  } else {
    for (const Segment& sg : segs)
      if (sg.kv->layers()[l].slots != a.slots) return internal_error("forward: sessions differ in frontier size");
    a.segments = static_cast<int32_t>(segs.size());
    a.seg = comp_seg_ + (l * 2 + (indexer ? 1 : 0)) * segs.size();
  }
  return Status::Ok();
}

// After the compressor call: its emitted rows finished (norm, RoPE, the cache simulation) and counted.
Status Forward::compressed_rows(size_t l, std::span<const Segment> segs, int64_t n, bool indexer, int64_t emitted_one) {
  const LayerWeights& w = w_.layers[l];
  const int64_t r = plan_[l].compress_ratio;
  const int64_t out_dim = indexer ? cfg_.indexer_head_dim : cfg_.head_dim;
  const bool plain = !tables_step_;
  const ForwardNumerics& nm = opts_.numerics;
  // row = RMSNorm_w(v); RoPE at the block's first token (compressed table); then the simulation (FP8
  // and half rounding inside the fused op; the indexer's FP4 comes before its half rounding, so there
  // the half rounding rides on the FP4 op when it runs). One session: the rows emitted now, by value.
  // A tables step: every row emitted now by any session, addressed and counted on the device (erows_,
  // ecount_), launched whenever one is — so a recorded step serves whichever sessions emit.
  auto finish = [&](float* rows, float* const* rows_at, const int32_t* pos, int64_t count, const int32_t* dcount) {
    backend::NormRopeArgs nr{rows, pos, count, 1, static_cast<int32_t>(out_dim),
                             static_cast<int32_t>(cfg_.n_rot), indexer ? w.idx_comp_norm : w.comp_norm,
                             static_cast<float>(cfg_.rms_eps), freq_comp_.data()};
    nr.x_at = rows_at;
    nr.count = dcount;
    if (!indexer) nr.fp8_quant = nm.fp8_kv ? static_cast<int32_t>(cfg_.nope_dim()) : 0;
    nr.f16 = nm.f16_cache && !(indexer && nm.indexer_qat);
    be_.norm_rope(nr);
    if (indexer && nm.indexer_qat) {
      backend::IndexerQatArgs qa{rows, count, static_cast<int32_t>(out_dim), nm.f16_cache};
      qa.x_at = rows_at;
      qa.count = dcount;
      be_.indexer_qat(qa);
    }
  };
  if (!plain) {
    const int slot = ratio_slot_[l];
    if (emit_bound_[static_cast<size_t>(slot)] > 0)
      finish(nullptr, erows_ + (l * 2 + (indexer ? 1 : 0)) * n, epos_ + slot * n,
             emit_bound_[static_cast<size_t>(slot)], ecount_ + slot);
  }
  for (size_t s = 0; s < segs.size(); ++s) {
    const Segment& sg = segs[s];
    LayerKv& k = sg.kv->layers()[l];
    const int64_t first = sg.pos0 / r, after = (sg.pos0 + static_cast<int64_t>(sg.tokens.size())) / r;
    const int64_t emitted = after - first;  // rows [first, after) were emitted now
    if (plain && emitted_one != emitted)
      return internal_error("forward: compressor emitted an unexpected row count");
    if (emitted == 0) continue;
    // The compressor wrote the rows' positions to cpos_ (one session: from column 0; the indexer's from C).
    if (plain)
      finish((indexer ? k.index_rows.f32() : k.comp.f32()) + first * out_dim, nullptr,
             cpos_.i32() + (indexer ? opts_.max_chunk : 0), emitted, nullptr);
    if (!indexer) k.n_comp = after;
  }
  return Status::Ok();
}

// §7.4 compressors of layer l (projections for all columns, frontier and pooling per session) and, with
// `select`, the §7.5 indexer's query, weights and top-k selection → idx_, icount_. Reads xn_ and (with
// `select`) qa_ after its norm; writes ckv_, cgate_, cpos_, iq_, iw_, idx_, icount_ (and the indexer's
// scores inside the backend) and the sessions' frontier state and emitted rows.
Status Forward::compressors_and_indexer(size_t l, std::span<const Segment> segs, int64_t n, bool select,
                                        int64_t comp_bound) {
  const int32_t R = static_cast<int32_t>(cfg_.n_rot);
  const double* freq = freq_comp_.data();
  compressor_proj(l, n, select);  // both compressors' projections, and the indexer's q and weights
  const int64_t IH = cfg_.indexer_heads, ID = cfg_.indexer_head_dim;
  const float w_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(ID * IH)));
  // RoPE + QAT of q and the weights' scale as one op, issued with the compressors: it reads only the
  // projections (iq_, iw_), which nothing in compress() touches, and the compressors do not read iq_ / iw_.
  backend::IndexerQatArgs qa{iq_.f32(), n * IH, static_cast<int32_t>(ID)};
  qa.pos = pos_;
  qa.heads = static_cast<int32_t>(IH);
  qa.n_rot = R;
  qa.freq = freq;
  qa.scale_x = iw_.f32();
  qa.scale = w_scale;
  qa.scale_count = n * IH;
  const bool qat = select && opts_.numerics.indexer_qat;
  DS4_RETURN_IF_ERROR(compress(l, segs, n, qat ? &qa : nullptr));
  if (!select) return Status::Ok();
  if (!qat) {
    be_.rope({iq_.f32(), pos_, n, static_cast<int32_t>(IH), static_cast<int32_t>(ID), R, freq, false});
    be_.scale(iw_.f32(), w_scale, n * IH);
  }
  // A column that sees ≤ top_k rows gets all of them from the indexer (ids 0…count−1), which attends
  // exactly like no selection. Several sessions: each column reads its own session's indexer rows through
  // the per-column table uploaded with the step inputs.
  backend::IndexerArgs ia;
  ia.q = iq_.f32();
  ia.w = iw_.f32();
  ia.rows = segs[0].kv->layers()[l].index_rows.f32();
  ia.rows_at = tables_ ? tables_ + l * 3 * n + 2 * n : nullptr;
  ia.n_rows = ccount_ + ratio_slot_[l] * n;
  ia.n = n;
  ia.heads = static_cast<int32_t>(IH);
  ia.head_dim = static_cast<int32_t>(ID);
  ia.top_k = static_cast<int32_t>(cfg_.indexer_top_k);
  ia.idx = idx_.i32();
  ia.count = icount_.i32();
  ia.max_rows = comp_bound;
  be_.indexer(ia);
  return Status::Ok();
}

// One attention sublayer over all n columns of the step. Projections, norms and RoPE (per-column
// positions in pos_) run once for every column; the raw ring, compressors, indexer and attention read
// and append each segment's own session state.
//
// Concurrent branches (Backend::fork / resume_main / join; in order where the backend has one lane).
// After the HC pre, the side lane runs the KV path while the main lane runs the query path; the
// compressors + indexer follow the KV path on the side lane, or — when the indexer selects, the longer
// chain — run on the main lane after q_a's norm while q_b and its norm + RoPE go to the side lane. Both
// lanes join before attention. Memory audit (nothing one lane writes is touched by the other before join):
//   query path: reads xn_; writes qa_ (q_a, its norm in place), then q_ (q_b, norm_rope in place), which
//     reads qa_; when q_b is on the side lane, it was forked after qa_'s norm and nothing writes qa_ after.
//   KV path: reads xn_, pos_, the ring table; writes kv_ and each column's raw ring row.
//   compressors + indexer: read xn_, and qa_ only when the indexer selects (idx_q_b: then after its norm);
//     read the step tables (ccount_, epos_, ecount_, erows_, comp_seg_, row tables); write ckv_, cgate_,
//     cpos_, iq_, iw_, idx_, icount_, the sessions' compressor frontiers and emitted compressed / indexer
//     rows (rows attention reads only after join), and the host's n_comp (a replayed step: forward_graph.cpp).
//   Backend scratch (quantized activations, indexer scores, …) is kept per lane by the backend.
// Attention, the inverse RoPE and the output projections run after join on the main lane; with
// kBranchHcSplit the HC pre's split beside them on the side lane (reads mix_; writes pre_, post_, comb_,
// which nothing reads before the join ahead of the HC post).
Status Forward::attention_layer(size_t l, std::span<const Segment> segs, int64_t n) {
  const auto& p = plan_[l];
  const LayerWeights& w = w_.layers[l];
  const ForwardNumerics& nm = opts_.numerics;
  const int64_t E = cfg_.n_embd, H = cfg_.n_head, D = cfg_.head_dim, Q = cfg_.q_lora_rank, HD = cfg_.q_dim();
  const int32_t R = static_cast<int32_t>(cfg_.n_rot);
  const float eps = static_cast<float>(cfg_.rms_eps);
  const double* freq = p.has_compressor ? freq_comp_.data() : freq_main_.data();

  // Host bounds of the compressed rows (nothing is read back). Rows visible to each column (⌊(t+1)/r⌋ of
  // its own session) were uploaded with the step inputs; the indexer selects when a column sees more
  // than top_k of them.
  bool any_select = false;
  int64_t comp_bound = 0;
  if (p.has_compressor) {
    for (const Segment& sg : segs) {
      const int64_t rows = (sg.pos0 + static_cast<int64_t>(sg.tokens.size())) / p.compress_ratio;
      any_select |= p.has_indexer && rows > static_cast<int64_t>(cfg_.indexer_top_k);
      comp_bound = std::max<int64_t>(comp_bound, rows);
    }
    comp_bound = row_bound(comp_bound);  // bucketed with graphs: the bound is part of the step's key
  }

  // kBranchHcSplit: the split beside attention and the output projections (joined before the HC post).
  const bool late_split = (opts_.branches & kBranchHcSplit) != 0;
  prefetch(kPrefetchQuery, {w.q_a, w.kv, w.q_b});  // joined by join_on_exit
  hc_pre(w.hc_attn_fn, w.hc_attn_scale, w.hc_attn_base, w.attn_norm, n, !late_split);
  struct JoinOnExit {  // an error half-way must not leave later ops on the side lane
    backend::Backend& be;
    ~JoinOnExit() { be.join(); }
  } join_on_exit{be_};
  const bool br = (opts_.branches & kBranchAttention) != 0;

  // §7.2 KV path (side lane), then each session's raw ring (§7.3): each column's row goes to ring row
  // pos mod raw_cap of its own session (the per-column ring table with several sessions) before
  // attention reads it — norm, RoPE, FP8/half rounding and the ring write in one op.
  if (br) be_.fork();
  mm(w.kv, xn_.f32(), E, kv_.f32(), D, n);
  backend::NormRopeArgs kr{kv_.f32(), pos_, n, 1, static_cast<int32_t>(D), R, w.kv_norm, eps, freq};
  kr.fp8_quant = nm.fp8_kv ? static_cast<int32_t>(cfg_.nope_dim()) : 0;
  kr.f16 = nm.f16_cache;
  kr.ring_cap = segs[0].kv->geometry().raw_cap;  // prepare() checked that all sessions share it
  if (tables_)  // the step's raw_at entries (written only by the op; the table type is shared with attention)
    kr.ring_at = const_cast<float* const*>(tables_ + l * 3 * n);
  else
    kr.ring = segs[0].kv->layers()[l].raw.f32();
  be_.norm_rope(kr);
  // §7.4 compressors and §7.5 indexer: without selection they need only xn_, so they follow the KV path on
  // the side lane at once; the indexer's query projection reads qa_, so with selection they wait for its norm.
  if (p.has_compressor && !any_select) DS4_RETURN_IF_ERROR(compressors_and_indexer(l, segs, n, false, comp_bound));
  if (br) be_.resume_main();

  // §7.1 query path (main lane). With selection the compressors + indexer are the longer chain (on the
  // H200 ~52 µs against ~21 µs of q_b and its norm + RoPE): they stay on the main lane, which a backend
  // may favour (CudaBackendOptions::branch_priority), and the rest of the query path goes to the side lane.
  mm(w.q_a, xn_.f32(), E, qa_.f32(), Q, n);
  be_.rms_norm({qa_.f32(), qa_.f32(), w.q_a_norm, n, Q, Q, eps});
  const bool select_on_main = p.has_compressor && any_select;
  if (select_on_main && br) be_.fork();
  mm(w.q_b, qa_.f32(), Q, q_.f32(), HD, n);
  be_.norm_rope({q_.f32(), pos_, n, static_cast<int32_t>(H), static_cast<int32_t>(D), R, nullptr, eps, freq});
  if (select_on_main) {
    if (br) be_.resume_main();
    DS4_RETURN_IF_ERROR(compressors_and_indexer(l, segs, n, true, comp_bound));
  }
  if (br) be_.join();
  if (late_split) {  // reads mix_, writes pre_/post_/comb_: nothing below reads or writes them before the join
    be_.fork();
    hc_split(w.hc_attn_scale, w.hc_attn_base, n);
    be_.resume_main();
  }

  if ((opts_.l2_prefetch & kPrefetchOutA) != 0 && (opts_.l2_prefetch & kPrefetchOutB) != 0)
    prefetch(kPrefetchOutA, {w.out_a, w.out_b});
  else
    prefetch(kPrefetchOutA | kPrefetchOutB, {(opts_.l2_prefetch & kPrefetchOutA) != 0 ? w.out_a : w.out_b});

  // §7.6 attention with sinks, one call for all columns. With several sessions each column reads its own
  // session's ring and compressed rows through the per-column pointer tables uploaded with the step inputs.
  const LayerKv& k0 = segs[0].kv->layers()[l];
  const float* const* raw_at = tables_ ? tables_ + l * 3 * n : nullptr;
  const float* const* comp_at = tables_ ? raw_at + n : nullptr;
  const int32_t* ccount = p.has_compressor ? ccount_ + ratio_slot_[l] * n : nullptr;
  const int64_t TK = cfg_.indexer_top_k;
  const int32_t* comp_count = any_select ? icount_.i32() : ccount;
  const int32_t* comp_idx = any_select ? idx_.i32() : nullptr;
  backend::AttentionArgs aa;
  aa.q = q_.f32();
  aa.pos = pos_;
  aa.n = n;
  aa.heads = static_cast<int32_t>(H);
  aa.head_dim = static_cast<int32_t>(D);
  aa.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  aa.sinks = w.sinks;
  aa.raw = k0.raw.f32();
  aa.raw_cap = segs[0].kv->geometry().raw_cap;  // prepare() checked that all sessions share it
  aa.window = static_cast<int32_t>(cfg_.sliding_window);
  aa.comp = p.has_compressor ? k0.comp.f32() : nullptr;
  aa.comp_count = comp_count;
  aa.comp_idx = comp_idx;
  aa.comp_idx_stride = TK;
  aa.out = attn_.f32();
  aa.raw_at = raw_at;
  aa.comp_at = p.has_compressor ? comp_at : nullptr;
  aa.max_comp = comp_bound;
  // §7.7 inverse RoPE at the query position, inside the op (a backend may rotate each row before storing it).
  aa.out_rot = R;
  aa.out_freq = freq;
  be_.attention(aa);

  // §7.7 grouped output projection.
  const int64_t G = cfg_.out_groups, Ro = cfg_.o_lora_rank, gin = cfg_.out_group_in();
  MatmulArgs oa{w.out_a, attn_.f32(), HD, low_.f32(), G * Ro, n, opts_.numerics.matmul};
  oa.group_rows = Ro;  // group g: rows [g·Ro, (g+1)·Ro) over attn_[g·gin, (g+1)·gin) — one call for all groups
  oa.group_x_stride = gin;
  be_.matmul(oa);
  mm(w.out_b, low_.f32(), G * Ro, f_.f32(), E, n);
  if (late_split) be_.join();
  hc_post_swap(n);
  return Status::Ok();
}

// §8 MoE: router, routed experts, shared expert.
//
// Concurrent branches (Backend::fork / join): the shared expert runs on the side lane beside the router
// and routed experts on the main lane; the sum of the two happens in the HC post after join, in the
// CPU's order (f + f_add). Memory audit: both lanes read xn_ (written by the HC pre before the fork);
// side lane writes sg_ (gate, then SwiGLU in place), su_, sout_; main lane reads tok_ and writes
// rlogit_, rids_, rw_, f_; the backend keeps its expert and activation scratch per lane. With
// kBranchHcSplit the side lane then runs the HC pre's split (reads mix_; writes pre_, post_, comb_).
void Forward::ffn_layer(size_t l, int64_t n) {
  const auto& p = plan_[l];
  const LayerWeights& w = w_.layers[l];
  const int64_t E = cfg_.n_embd, NE = cfg_.n_expert, K = cfg_.n_expert_used, F = cfg_.expert_ff;
  // kBranchHcSplit: the split after the shared expert on its lane (or a lane of its own), joined before the post.
  const bool late_split = (opts_.branches & kBranchHcSplit) != 0;
  prefetch(kPrefetchShared, {w.sh_gate, w.sh_up, w.sh_down});  // joined below, or by the next layer's join
  hc_pre(w.hc_ffn_fn, w.hc_ffn_scale, w.hc_ffn_base, w.ffn_norm, n, !late_split);

  const bool br = (opts_.branches & kBranchSharedExpert) != 0;
  if (br) be_.fork();  // shared expert (side lane); gate and up read the same x: one call (a backend may
                       // stream both matrices in one pass; the same numbers as two matmuls)
  const MatmulArgs gate_up[2] = {{w.sh_gate, xn_.f32(), E, sg_.f32(), F, n, opts_.numerics.matmul},
                                 {w.sh_up, xn_.f32(), E, su_.f32(), F, n, opts_.numerics.matmul}};
  be_.matmul_many(gate_up);
  be_.swiglu({sg_.f32(), su_.f32(), sg_.f32(), n * F, opts_.numerics.shared_expert_clamp ? p.swiglu_clamp : 0.0f});
  mm(w.sh_down, sg_.f32(), F, sout_.f32(), E, n);
  if (late_split) {  // reads mix_, writes pre_/post_/comb_, which the main lane leaves alone until the join
    if (!br) be_.fork();
    hc_split(w.hc_ffn_scale, w.hc_ffn_base, n);
  }
  if (br || late_split) be_.resume_main();

  mm(w.router, xn_.f32(), E, rlogit_.f32(), NE, n);
  backend::RouterArgs ra;
  ra.logits = rlogit_.f32();
  ra.bias = w.router_bias;
  ra.hash = p.hash_routing ? w.tid2eid : nullptr;
  ra.vocab = static_cast<int32_t>(cfg_.n_vocab);
  ra.tokens = tok_;
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

  if (br || late_split) be_.join();
  hc_post_swap(n, sout_.f32());  // routed + shared expert outputs added inside the post
}

// §6.3 output head for `count` HC states X [count][NHC][E] → logits_ [count][V] (device). The HC head — RMSNorm of
// flat(X), the NHC F16 controls, the head weights (hc_head), the collapse, the output norm → xn_ — is one hc_pre in
// its head form (fn of NHC rows: by_pieces.h hc_pre_by_pieces), so that a backend may run it as a few launches
// (the CUDA backend: hc_fuse's hundreds digit). The last layer's deferred HC post (pending_post_) goes in with it
// when it writes exactly these rows (X = its output, the same tokens: a decode step), else it runs first.
void Forward::head(const float* X, int64_t count) {
  const int64_t E = cfg_.n_embd, V = cfg_.n_vocab;
  if (pending_post_.n > 0 && (pending_post_.out != X || pending_post_.n != count)) flush_post();
  backend::HcPreArgs a;
  a.x = X;
  a.fn = w_.output_hc_fn;  // [NHC][NHC·E]: the head form
  a.scale = w_.output_hc_scale;
  a.base = w_.output_hc_base;
  a.norm_w = w_.output_norm;
  a.n = count;
  a.dim = E;
  a.nhc = static_cast<int32_t>(cfg_.n_hc);
  a.hc_eps = static_cast<float>(cfg_.hc_eps);
  a.rms_eps = static_cast<float>(cfg_.rms_eps);
  a.numerics = opts_.numerics.matmul;
  a.flat = flat_.f32();
  a.mix = mix_.f32();  // [count][NHC]
  a.pre = hw_.f32();   // the head weights [count][NHC]
  a.y = y_.f32();
  a.xn = xn_.f32();
  a.split = false;     // (no post or comb in the head form)
  a.prev_post = pending_post_;
  pending_post_.n = 0;
  be_.hc_pre(a);
  mm(w_.output, xn_.f32(), E, logits_.f32(), V, count);
}

// The head runs once for the columns that want logits (each segment's last column, or all of a segment's
// columns with all_logits), gathered into x2_ (free after the last layer) unless they are contiguous;
// logits_download then copies each segment's rows of logits_ to its host destination.
void Forward::logits_head(std::span<const Segment> segs) {
  const int64_t HCD = cfg_.hc_dim();
  auto rows_of = [](const Segment& s) { return s.all_logits ? static_cast<int64_t>(s.tokens.size()) : 1; };
  int64_t count = 0;
  for (const Segment& s : segs) count += rows_of(s);
  const float* X = nullptr;
  // The head's rows are already consecutive columns of x_ when every segment's rows follow the previous
  // one's (one session; a batch of decoders, one token each): no per-session copies then.
  bool consecutive = true;
  for (size_t s = 0, j = 0; s < segs.size() && consecutive; j += rows_of(segs[s]), ++s)
    consecutive = off_[s] + static_cast<int64_t>(segs[s].tokens.size()) - rows_of(segs[s]) ==
                  off_[0] + static_cast<int64_t>(segs[0].tokens.size()) - rows_of(segs[0]) + static_cast<int64_t>(j);
  if (consecutive) {
    X = x_.f32() + (off_[0] + static_cast<int64_t>(segs[0].tokens.size()) - rows_of(segs[0])) * HCD;
  } else {
    flush_post();  // the copies read x_
    int64_t j = 0;
    for (size_t s = 0; s < segs.size(); ++s) {
      const int64_t rows = rows_of(segs[s]);
      const int64_t col = off_[s] + static_cast<int64_t>(segs[s].tokens.size()) - rows;
      be_.copy(x2_.f32() + j * HCD, x_.f32() + col * HCD, static_cast<uint64_t>(rows * HCD) * 4);
      j += rows;
    }
    X = x2_.f32();
  }
  head(X, count);
}

// Greedy segments (token_out) take the argmax of their head row into icount_ [C] i32 at the same row
// index (icount_ is free after the last layer: the indexer's counts live within a layer). One op for all
// rows when every segment is greedy with one excluded id (a batch of greedy decoders), else one per
// greedy segment. Inside the step (graph): the ids are on the device when the step ends.
void Forward::pick_tokens(std::span<const Segment> segs) {
  const int64_t V = cfg_.n_vocab;
  bool all_same = true;
  for (const Segment& s : segs) all_same = all_same && s.token_out && s.exclude == segs[0].exclude;
  if (all_same) {  // every segment greedy: one row each, rows 0 … S−1
    be_.argmax({logits_.f32(), static_cast<int64_t>(segs.size()), V, segs[0].exclude, icount_.i32()});
    return;
  }
  int64_t j = 0;
  for (const Segment& s : segs) {
    if (s.token_out) be_.argmax({logits_.f32() + j * V, 1, V, s.exclude, icount_.i32() + j});
    j += s.all_logits ? static_cast<int64_t>(s.tokens.size()) : 1;
  }
}

void Forward::logits_download(std::span<const Segment> segs) {
  const int64_t V = cfg_.n_vocab;
  auto rows_of = [](const Segment& s) { return s.all_logits ? static_cast<int64_t>(s.tokens.size()) : 1; };
  int64_t j = 0, last_greedy = -1;
  for (const Segment& s : segs) {
    const int64_t rows = rows_of(s);
    if (s.token_out) last_greedy = j;
    if (s.logits_out) be_.download(s.logits_out, logits_.f32() + j * V, static_cast<uint64_t>(rows * V) * 4);
    j += rows;
  }
  if (last_greedy < 0) return;
  // One copy of the ids of rows 0 … last greedy row (a download waits for the device: once, not per session).
  host_ids_.resize(static_cast<size_t>(last_greedy + 1));
  be_.download(host_ids_.data(), icount_.i32(), static_cast<uint64_t>(last_greedy + 1) * 4);
  j = 0;
  for (const Segment& s : segs) {
    if (s.token_out) *s.token_out = host_ids_[static_cast<size_t>(j)];
    j += rows_of(s);
  }
}

// segments = 0: no tables (one session, state by value); otherwise tables for that many sessions.
uint64_t Forward::step_input_bytes(int64_t n, int64_t segments) const {
  const uint64_t NR = ratios_.size();
  const uint64_t ints = (static_cast<uint64_t>(n) * (2 + 2 * NR) + NR) * sizeof(int32_t);
  const uint64_t padded = (ints + 7) / 8 * 8;
  if (segments <= 0) return padded;
  return padded + static_cast<uint64_t>(plan_.size() * 5 * n) * sizeof(const float*) +
         static_cast<uint64_t>(plan_.size() * 2 * segments) * sizeof(backend::CompressorSegment);
}

void Forward::upload_step_inputs(std::span<const Segment> segs, int64_t n) {
  const bool tables = tables_step_;
  auto* ints = reinterpret_cast<int32_t*>(host_in_.data());
  int32_t* tok = ints;
  int32_t* pos = ints + n;
  int32_t* count = ints + 2 * n;
  const int64_t NR = static_cast<int64_t>(ratios_.size());
  int32_t* epos = count + NR * n;
  int32_t* ecount = epos + NR * n;
  for (size_t s = 0; s < segs.size(); ++s) {
    const Segment& sg = segs[s];
    for (int64_t i = 0; i < static_cast<int64_t>(sg.tokens.size()); ++i) {
      const int64_t c = off_[s] + i, t = sg.pos0 + i;
      tok[c] = sg.tokens[static_cast<size_t>(i)];
      pos[c] = static_cast<int32_t>(t);
      for (size_t r = 0; r < ratios_.size(); ++r) count[r * n + c] = static_cast<int32_t>((t + 1) / ratios_[r]);
    }
  }
  // Rows [⌊pos0/r⌋, ⌊(pos0+n_s)/r⌋) of each segment are emitted now, in segment order (≤ n per ratio).
  emit_bound_.assign(ratios_.size(), 0);
  for (int64_t r = 0; r < NR; ++r) {
    int32_t e = 0;
    for (const Segment& sg : segs)
      for (int64_t j = sg.pos0 / ratios_[r]; j < (sg.pos0 + static_cast<int64_t>(sg.tokens.size())) / ratios_[r]; ++j)
        epos[r * n + e++] = static_cast<int32_t>(j * ratios_[r]);  // RoPE at the block's first token
    ecount[r] = e;
    emit_bound_[r] = e > 0 ? n : 0;
  }
  const uint64_t table_off = step_input_bytes(n, 0);
  const uint64_t erows_off = table_off + static_cast<uint64_t>(plan_.size() * 3 * n) * sizeof(const float*);
  const uint64_t seg_off = erows_off + static_cast<uint64_t>(plan_.size() * 2 * n) * sizeof(const float*);
  const size_t S = segs.size();
  auto* dev = static_cast<uint8_t*>(in_.data());
  if (tables) {
    // Compressor segments [L][2][S] (attention compressor, indexer compressor).
    auto* cs = reinterpret_cast<backend::CompressorSegment*>(host_in_.data() + seg_off);
    for (size_t l = 0; l < plan_.size(); ++l) {
      if (!plan_[l].has_compressor) continue;
      const int64_t r = plan_[l].compress_ratio;
      for (int ix = 0; ix < 2; ++ix)
        for (size_t s = 0; s < S; ++s) {
          LayerKv& k = segs[s].kv->layers()[l];
          backend::CompressorSegment& e = cs[(l * 2 + ix) * S + s];
          const bool idx = ix == 1;
          e.col = off_[s];
          e.n = static_cast<int64_t>(segs[s].tokens.size());
          e.pos0 = static_cast<int32_t>(segs[s].pos0);
          e.state_kv = idx ? k.index_kv.f32() : k.comp_kv.f32();
          e.state_score = idx ? k.index_score.f32() : k.comp_score.f32();
          const int64_t first = segs[s].pos0 / r;  // first row this step emits
          if (idx)
            e.out = k.index_rows.empty() ? nullptr : k.index_rows.f32() + first * cfg_.indexer_head_dim;
          else
            e.out = k.comp.f32() + first * cfg_.head_dim;
          e.out_pos = cpos_.i32() + off_[s] + (idx ? opts_.max_chunk : 0);
        }
    }
    auto* t = reinterpret_cast<const float**>(host_in_.data() + table_off);
    for (size_t l = 0; l < plan_.size(); ++l)
      for (size_t s = 0; s < segs.size(); ++s) {
        const LayerKv& k = segs[s].kv->layers()[l];
        for (int64_t c = off_[s]; c < off_[s] + static_cast<int64_t>(segs[s].tokens.size()); ++c) {
          t[(l * 3 + 0) * n + c] = k.raw.f32();
          t[(l * 3 + 1) * n + c] = k.comp.f32();
          t[(l * 3 + 2) * n + c] = k.index_rows.f32();
        }
      }
    // Emitted rows' addresses [L][2][n], in epos's order (prepare() reserved them, so they stay put).
    auto* er = reinterpret_cast<float**>(host_in_.data() + erows_off);
    for (size_t l = 0; l < plan_.size(); ++l) {
      if (!plan_[l].has_compressor) continue;
      const int64_t r = plan_[l].compress_ratio;
      int64_t e = 0;
      for (const Segment& sg : segs) {
        LayerKv& k = sg.kv->layers()[l];
        for (int64_t j = sg.pos0 / r; j < (sg.pos0 + static_cast<int64_t>(sg.tokens.size())) / r; ++j, ++e) {
          er[(l * 2 + 0) * n + e] = k.comp.f32() + j * cfg_.head_dim;
          er[(l * 2 + 1) * n + e] = k.index_rows.empty() ? nullptr : k.index_rows.f32() + j * cfg_.indexer_head_dim;
        }
      }
    }
  }
  be_.upload(in_.data(), host_in_.data(), step_input_bytes(n, tables ? static_cast<int64_t>(S) : 0));
  comp_seg_ = tables ? reinterpret_cast<const backend::CompressorSegment*>(dev + seg_off) : nullptr;
  tok_ = reinterpret_cast<const int32_t*>(dev);
  pos_ = tok_ + n;
  ccount_ = tok_ + 2 * n;
  epos_ = ccount_ + NR * n;
  ecount_ = epos_ + NR * n;
  tables_ = tables ? reinterpret_cast<const float* const*>(dev + table_off) : nullptr;
  erows_ = tables ? reinterpret_cast<float* const*>(dev + erows_off) : nullptr;
}

Status Forward::prepare(std::span<const Segment> segs) {
  if (segs.empty()) return invalid_argument("forward: empty step");
  int64_t total = 0;
  for (size_t s = 0; s < segs.size(); ++s) {
    const Segment& sg = segs[s];
    // Built only on failure: a valid step allocates nothing here.
    auto bad = [&](const std::string& what) {
      return invalid_argument((segs.size() == 1 ? std::string("forward: ")
                                                : "forward: segment " + std::to_string(s) + ": ") + what);
    };
    const int64_t n = static_cast<int64_t>(sg.tokens.size());
    if (sg.kv == nullptr) return bad("no session state");
    if (n == 0) return bad("empty chunk");
    if (sg.pos0 < 0 || sg.pos0 + n > INT32_MAX) return bad("position exceeds 2^31");
    if (sg.kv->layers().size() != plan_.size() || sg.kv->geometry().raw_cap < cfg_.sliding_window + n - 1)
      return bad("session state does not fit this forward pass");
    for (size_t q = 0; q < s; ++q)
      if (segs[q].kv == sg.kv) return bad("the same session state appears twice");
    if (sg.kv->geometry().raw_cap != segs[0].kv->geometry().raw_cap)
      return bad("session states of one step must share the raw ring size");
    for (int64_t i = 0; i < n; ++i)
      if (sg.tokens[i] < 0 || sg.tokens[i] >= static_cast<int32_t>(cfg_.n_vocab))
        return bad("token id " + std::to_string(sg.tokens[i]) + " at chunk index " +
                                std::to_string(i) + " is outside the vocabulary [0, " +
                                std::to_string(cfg_.n_vocab) + ")");
    total += n;
  }
  if (total > opts_.max_chunk)
    return invalid_argument("forward: chunk of " + std::to_string(total) + " tokens exceeds max_chunk " +
                            std::to_string(opts_.max_chunk));
  // Room for every row this step emits, before any state is written (growth may fail on memory).
  for (const Segment& sg : segs)
    for (size_t l = 0; l < plan_.size(); ++l)
      if (plan_[l].has_compressor)
        DS4_RETURN_IF_ERROR(
            sg.kv->reserve_comp(l, (sg.pos0 + static_cast<int64_t>(sg.tokens.size())) / plan_[l].compress_ratio));
  return Status::Ok();
}

Status Forward::eval(KvState& kv, std::span<const int32_t> tokens, int64_t pos0, float* logits_out,
                     bool all_logits) {
  const Segment s{&kv, tokens, pos0, logits_out, all_logits};
  return eval_batch(std::span<const Segment>(&s, 1));
}

Status Forward::eval_batch(std::span<const Segment> segs) {
  for (const Segment& sg : segs) {
    if (sg.logits_out == nullptr && sg.token_out == nullptr)
      return invalid_argument("forward: a segment has no logits or token destination");
    if (sg.token_out && sg.all_logits) return invalid_argument("forward: a greedy segment cannot ask for all logits");
    if (sg.exclude < -1 || sg.exclude >= static_cast<int32_t>(cfg_.n_vocab))
      return invalid_argument("forward: excluded token id " + std::to_string(sg.exclude) + " is outside the vocabulary");
  }
  using Clock = std::chrono::steady_clock;
  const bool prof = opts_.profile;
  const Clock::time_point t0 = prof ? Clock::now() : Clock::time_point{};
  DS4_RETURN_IF_ERROR(prepare(segs));
  // Columns: segment s occupies [off_[s], off_[s] + n_s).
  off_.clear();
  int64_t n = 0;
  for (const Segment& sg : segs) {
    off_.push_back(n);
    n += static_cast<int64_t>(sg.tokens.size());
  }
  const bool graphed = graph_recordable(segs);
  tables_step_ = segs.size() > 1 || graphed;
  ++serial_;
  upload_step_inputs(segs, n);
  if (graphed) graph_step_key(segs, n);
  const Clock::time_point t1 = prof ? Clock::now() : Clock::time_point{};
  if (prof) be_.time_mark(0);
  DS4_RETURN_IF_ERROR(graphed ? run_step_graphed(segs, n) : run_step(segs, n));
  if (prof) be_.time_mark(1);
  const Clock::time_point t2 = prof ? Clock::now() : Clock::time_point{};
  logits_download(segs);
  Status st = be_.sync();
  if (prof) {
    const Clock::time_point t3 = Clock::now();
    auto secs = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
    times_.steps++;
    times_.prepare += secs(t1 - t0);
    times_.launch += secs(t2 - t1);
    times_.wait += secs(t3 - t2);
    if (const double ms = be_.time_ms(0, 1); ms >= 0) {
      times_.device += ms / 1e3;
      times_.device_steps++;
    }
  }
  return st;
}

Status Forward::launch_greedy(KvState& kv, int64_t pos0, int32_t token, bool from_device, int32_t exclude, int slot) {
  if (slot < 0 || slot >= backend::Backend::kReadBackSlots)
    return invalid_argument("forward: read-back slot " + std::to_string(slot) + " is out of range");
  if (exclude < -1 || exclude >= static_cast<int32_t>(cfg_.n_vocab))
    return invalid_argument("forward: excluded token id " + std::to_string(exclude) + " is outside the vocabulary");
  using Clock = std::chrono::steady_clock;
  const bool prof = opts_.profile;
  const Clock::time_point t0 = prof ? Clock::now() : Clock::time_point{};
  // A device-fed step's token is not known here: id 0 passes prepare() and is replaced on the device.
  pipe_token_[slot] = from_device ? 0 : token;
  const Segment seg{&kv, std::span<const int32_t>(&pipe_token_[slot], 1), pos0, nullptr, false, &pipe_unused_, exclude};
  const std::span<const Segment> segs(&seg, 1);
  DS4_RETURN_IF_ERROR(prepare(segs));
  off_.assign(1, 0);
  const bool graphed = graph_recordable(segs);
  tables_step_ = graphed;
  ++serial_;
  upload_step_inputs(segs, 1);
  // The previous step's greedy id (icount_ row 0, pick_tokens) into this step's token slot: stream order
  // puts the copy after that step and before this one; its read-back was queued before, too.
  if (from_device) be_.copy(const_cast<int32_t*>(tok_), icount_.i32(), sizeof(int32_t));
  if (graphed) graph_step_key(segs, 1);
  const Clock::time_point t1 = prof ? Clock::now() : Clock::time_point{};
  if (prof) be_.time_mark(2 * slot);
  DS4_RETURN_IF_ERROR(graphed ? run_step_graphed(segs, 1) : run_step(segs, 1));
  if (prof) be_.time_mark(2 * slot + 1);
  be_.read_back_start(slot, icount_.i32(), sizeof(int32_t));
  if (prof) {
    const Clock::time_point t2 = Clock::now();
    times_.prepare += std::chrono::duration<double>(t1 - t0).count();
    times_.launch += std::chrono::duration<double>(t2 - t1).count();
  }
  return Status::Ok();
}

Status Forward::finish_greedy(int slot, int32_t* token) {
  using Clock = std::chrono::steady_clock;
  const bool prof = opts_.profile;
  const Clock::time_point t0 = prof ? Clock::now() : Clock::time_point{};
  Status st = be_.read_back_wait(slot, token, sizeof(int32_t));
  if (prof) {
    times_.steps++;
    times_.wait += std::chrono::duration<double>(Clock::now() - t0).count();
    if (const double ms = be_.time_ms(2 * slot, 2 * slot + 1); ms >= 0) {
      times_.device += ms / 1e3;
      times_.device_steps++;
    }
  }
  return st;
}

Result<bool> Forward::fetch_logits(uint64_t serial, int64_t row, float* dst) {
  if (serial != serial_ || row < 0 || row >= opts_.max_chunk) return false;
  be_.download(dst, logits_.f32() + row * cfg_.n_vocab, static_cast<uint64_t>(cfg_.n_vocab) * sizeof(float));
  DS4_RETURN_IF_ERROR(be_.sync());
  return true;
}

Status Forward::run_step(std::span<const Segment> segs, int64_t n) {
  pending_post_.n = 0;  // a step that failed half-way left nothing to run
  be_.embed({w_.token_embd, tok_, n, static_cast<int32_t>(cfg_.n_hc), x_.f32()});
  for (size_t l = 0; l < plan_.size(); ++l) {
    Status st = attention_layer(l, segs, n);
    if (!st.ok()) return st.with_context("layer " + std::to_string(l));
    ffn_layer(l, n);
  }
  logits_head(segs);  // the last layer's post (pending_post_) runs there: with the head's HC, or first
  pick_tokens(segs);
  return Status::Ok();
}

}  // namespace ds4::model
