// by_pieces.h — the fused backend ops (HcPreArgs, NormRopeArgs, IndexerQatArgs::n_rot, AttentionArgs::out_rot in backend.h) written as the calls of
// their pieces, in the order backend.h states. The CPU backend runs them this way (it stays the
// readable reference), and so can any backend that wraps another one (bench/numerics).
// Deliberately not here: any fused kernel; norm_rope_by_pieces reads pos/ring_at on the host, so it
// serves host-memory backends only.
#pragma once

#include <algorithm>

#include "backend/backend.h"

namespace ds4::backend {

// The head form of HcPreArgs (the output head's HC, MODEL.md §6.3; model/forward.cpp head()): fn has nhc rows
// ([nhc][nhc·dim]), scale is [1], base [nhc], mix [n][nhc]; hc_head takes the split's place — pre = the head weights
// σ(mix·scale[0] + base) + hc_eps, no post, comb or Sinkhorn (iters, post, comb and split unused). The rest (the
// norm of flat(X), the collapse by pre, the norm by norm_w into xn, prev_post) as the sublayer form.
inline bool hc_pre_head_form(const HcPreArgs& a) { return a.fn.rows == a.nhc; }

inline void hc_pre_by_pieces(Backend& be, const HcPreArgs& a) {
  if (a.prev_post.n > 0) be.hc_post(a.prev_post);  // the previous sublayer's post first: it writes x
  const bool head = hc_pre_head_form(a);
  const int64_t hcd = int64_t{a.nhc} * a.dim, mix = head ? a.nhc : int64_t{2 + a.nhc} * a.nhc;
  be.rms_norm({a.x, a.flat, nullptr, a.n, hcd, hcd, a.rms_eps});
  be.matmul({a.fn, a.flat, hcd, a.mix, mix, a.n, a.numerics});
  if (head)
    be.hc_head({a.mix, a.scale, a.base, a.n, a.nhc, a.hc_eps, a.pre});
  else
    be.hc_split({a.mix, a.scale, a.base, a.n, a.nhc, a.iters, a.hc_eps, a.pre, a.post, a.comb});
  be.hc_collapse({a.x, a.pre, a.y, a.n, a.dim, a.nhc});
  be.rms_norm({a.y, a.xn, a.norm_w, a.n, a.dim, a.dim, a.rms_eps});
}

// IndexerQatArgs with n_rot > 0 (rows a multiple of heads, no x_at/count): the RoPE, then the QAT alone,
// then (scale_x) the scale.
inline void indexer_qat_by_pieces(Backend& be, const IndexerQatArgs& a) {
  be.rope({a.x, a.pos, a.rows / a.heads, a.heads, a.dim, a.n_rot, a.freq, false});
  IndexerQatArgs q = a;
  q.n_rot = 0;
  q.scale_x = nullptr;
  be.indexer_qat(q);
  if (a.scale_x && a.scale_count > 0) be.scale(a.scale_x, a.scale, a.scale_count);
}

// AttentionArgs::out_rot > 0: the attention without it, then the output's inverse RoPE.
inline void attention_by_pieces(Backend& be, const AttentionArgs& a) {
  AttentionArgs core = a;
  core.out_rot = 0;
  be.attention(core);
  if (a.out_rot > 0) be.rope({a.out, a.pos, a.n, a.heads, a.head_dim, a.out_rot, a.out_freq, true});
}

// pos, ring_at, x_at and count must be host-readable (be.host_memory()).
inline void norm_rope_by_pieces(Backend& be, const NormRopeArgs& a) {
  if (a.x_at || a.count) {  // rows addressed or counted per token: one token at a time
    const int64_t n = a.count ? std::min<int64_t>(a.n, *a.count) : a.n;
    for (int64_t t = 0; t < n; ++t) {
      NormRopeArgs one = a;
      one.x = a.x_at ? a.x_at[t] : a.x + t * int64_t{a.heads} * a.head_dim;
      one.pos = a.pos + t;
      one.n = 1;
      one.ring_at = a.ring_at ? a.ring_at + t : nullptr;
      one.x_at = nullptr;
      one.count = nullptr;
      norm_rope_by_pieces(be, one);
    }
    return;
  }
  const int64_t rows = a.n * a.heads, width = int64_t{a.heads} * a.head_dim;
  be.rms_norm({a.x, a.x, a.w, rows, a.head_dim, a.head_dim, a.eps});
  be.rope({a.x, a.pos, a.n, a.heads, a.head_dim, a.n_rot, a.freq, false});
  if (a.fp8_quant > 0) be.fp8_round({a.x, rows, a.head_dim, a.fp8_quant});
  if (a.f16) be.f16_round(a.x, rows * a.head_dim);
  if (a.ring == nullptr && a.ring_at == nullptr) return;
  for (int64_t t = 0; t < a.n; ++t) {
    float* base = a.ring_at ? a.ring_at[t] : a.ring;
    be.copy(base + (a.pos[t] % a.ring_cap) * width, a.x + t * width, static_cast<uint64_t>(width) * 4);
  }
}

}  // namespace ds4::backend
