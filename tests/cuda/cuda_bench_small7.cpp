// cuda_bench_small7.cpp — session 10's fold of attention's output inverse RoPE into the decode merge
// (cuda_bench --small7; small7_folds.h): graph µs per call against the launches it replaces, on the engine's backend
// (f16_mma on): attention with its output's inverse RoPE at Flash's decode shapes (64 heads × 512, ctx ≈ 2K: CSA
// 128 raw + 512 selected, HCA 128 raw + 16 compressed), n = 1 and 8; the attention sublayer's tail as the forward
// pass runs it on the main lane — attention, inverse RoPE, out_a (8 groups), out_b, HC post, the next HC pre —
// unfolded and folded (CSA and HCA layers).
// Each row is its calls in a graph of 20 repetitions (StageBench). Deliberately not here: correctness
// (test_cuda_small7.cpp), the whole token (the stage table, bench_decode_stages).
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/small7_folds.h"
#include "stage_bench.h"

using namespace ds4;
using namespace ds4::backend;
using namespace ds4::bench;

namespace {

// One backend's buffers and weights for the rows below (up to 8 tokens).
struct Small7Side {
  static constexpr int64_t kE = 4096, kNhc = 4, kHcd = kNhc * kE, kM = 24, kH = 64, kD = 512, kR = 64, kN = 8;
  static constexpr int64_t kWindow = 128, kCap = kWindow + 255, kTopK = 512, kPos = 2101;
  Backend* be = nullptr;
  std::unique_ptr<StageBench> sb;
  float *x, *x2, *f, *so, *post, *comb, *flat, *mix, *pre, *y, *xn, *hc_scale, *hc_base, *norm_w;
  float *q, *raw, *comp, *sinks, *attn;
  int32_t *pos, *csa_cnt, *hca_cnt, *sel;
  Weight fn;

  explicit Small7Side(Backend& b) : be(&b), sb(std::make_unique<StageBench>(b)) {
    StageBench& s = *sb;
    x = s.buf(kN * kHcd, 0.5f);
    x2 = s.buf(kN * kHcd, 0.5f);
    f = s.buf(kN * kE, 0.5f);
    so = s.buf(kN * kE, 0.5f);
    post = s.buf(kN * kNhc, 0.25f);
    comb = s.buf(kN * kNhc * kNhc, 0.25f);
    flat = s.buf(kN * kHcd);
    mix = s.buf(kN * kM);
    pre = s.buf(kN * kNhc);
    y = s.buf(kN * kE);
    xn = s.buf(kN * kE);
    hc_scale = s.buf(3, 0.5f);
    hc_base = s.buf(kM, 0.1f);
    norm_w = s.buf(kE, 1.0f);
    q = s.buf(kN * kH * kD, 0.05f);
    raw = s.buf(kCap * kD, 0.05f);
    comp = s.buf(1024 * kD, 0.05f);
    sinks = s.buf(kH, 0.1f);
    attn = s.buf(kN * kH * kD);
    std::vector<int32_t> p(kN), hca(kN, 16), idx(static_cast<size_t>(kN * kTopK));
    for (int64_t i = 0; i < kN; ++i) p[static_cast<size_t>(i)] = static_cast<int32_t>(kPos + i);
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int32_t>((i * 2 + 1) % 525);
    std::vector<int32_t> sel_cnt(kN, static_cast<int32_t>(kTopK));
    pos = s.ibuf(p);
    csa_cnt = s.ibuf(sel_cnt);
    hca_cnt = s.ibuf(hca);
    sel = s.ibuf(idx);
    fn = s.weight(GgmlType::F16, kM, kHcd);
    low = s.buf(8 * 1024);
    out_a = s.weight(GgmlType::Q8_0, 8 * 1024, kH * kD / 8);
    out_b = s.weight(GgmlType::Q8_0, kE, 8 * 1024);
  }

  cuda::AttnFoldScratch fold_scratch;
  Weight out_a, out_b;

  void attention(int64_t n, bool csa, const std::vector<double>& freq, bool fold) {
    AttentionArgs a;
    a.q = q;
    a.pos = pos;
    a.n = n;
    a.heads = static_cast<int32_t>(kH);
    a.head_dim = static_cast<int32_t>(kD);
    a.scale = 0.044f;
    a.sinks = sinks;
    a.raw = raw;
    a.raw_cap = kCap;
    a.window = static_cast<int32_t>(kWindow);
    a.comp = comp;
    a.comp_count = csa ? csa_cnt : hca_cnt;
    a.comp_idx = csa ? sel : nullptr;
    a.comp_idx_stride = kTopK;
    a.out = attn;
    a.max_comp = csa ? 525 : 16;
    if (fold && cuda::attention_out_rope_folded(*be, a, static_cast<int32_t>(kR), freq.data(), fold_scratch)) return;
    be->attention(a);
    be->rope({attn, pos, n, static_cast<int32_t>(kH), static_cast<int32_t>(kD), static_cast<int32_t>(kR), freq.data(), true});
  }

  // The HC post (x, f + so → x2) and the next HC pre on x2.
  void post_pre(int64_t n) {
    HcPostArgs q{x, f, post, comb, x2, n, kE, static_cast<int32_t>(kNhc)};
    q.f_add = so;
    HcPreArgs a;
    a.x = x2;
    a.fn = fn;
    a.scale = hc_scale;
    a.base = hc_base;
    a.norm_w = norm_w;
    a.n = n;
    a.dim = kE;
    a.nhc = static_cast<int32_t>(kNhc);
    a.flat = flat;
    a.mix = mix;
    a.pre = pre;
    a.post = post;
    a.comb = comb;
    a.y = y;
    a.xn = xn;
    be->hc_post(q);
    be->hc_pre(a);
  }

  // attention → out_a (8 groups of 1024 rows over 4096) → out_b (4096 × 8192) → HC post + pre, one token.
  void tail(bool csa, const std::vector<double>& freq, bool fold) {
    attention(1, csa, freq, fold);
    MatmulArgs oa{out_a, attn, kH * kD, low, 8 * 1024, 1, MatmulNumerics::ds4};
    oa.group_rows = 1024;
    oa.group_x_stride = kH * kD / 8;
    be->matmul(oa);
    be->matmul({out_b, low, 8 * 1024, f, kE, 1, MatmulNumerics::ds4});
    post_pre(1);
  }
  float* low = nullptr;
};

}  // namespace

void bench_small7(Backend& be) {
  std::vector<double> freq(Small7Side::kR / 2);
  for (int i = 0; i < Small7Side::kR / 2; ++i) freq[static_cast<size_t>(i)] = std::pow(10000.0, -2.0 * i / Small7Side::kR);
  Small7Side side(be);
  std::printf("BENCH small7 %-52s %10s %9s %10s %9s\n", "(graph us per repetition, 20 a graph)", "unfolded", "launches",
              "folded", "launches");
  auto row = [&](const char* name, int64_t n, auto&& body) {
    StageTime t[2];
    for (int k = 0; k < 2; ++k) t[k] = side.sb->time([&] { body(k == 1); }, 20);
    std::printf("BENCH small7 %-46s n=%-3lld %10.2f %9.0f %10.2f %9.0f\n", name, static_cast<long long>(n), t[0].graph_us,
                t[0].launches, t[1].graph_us, t[1].launches);
  };
  for (int rep = 0; rep < 2; ++rep) {
    row("attention + out rope (CSA: 128 raw + 512 sel)", 1, [&](bool fold) { side.attention(1, true, freq, fold); });
    row("attention + out rope (HCA: 128 raw + 16)", 1, [&](bool fold) { side.attention(1, false, freq, fold); });
    row("attention + out rope (CSA: 128 raw + 512 sel)", 8, [&](bool fold) { side.attention(8, true, freq, fold); });
    row("attn tail: attn, rope, out_a, out_b, post, pre (CSA)", 1, [&](bool fold) { side.tail(true, freq, fold); });
    row("attn tail: attn, rope, out_a, out_b, post, pre (HCA)", 1, [&](bool fold) { side.tail(false, freq, fold); });
  }
}
