// cuda_bench_small7.cpp — session 10's folds of small decode launches (cuda_bench --small7): graph µs per call of
// the folded ops against the launches they replace, on two backends with the engine's f16_mma on —
// `on` (CudaBackendOptions::attn_out_rope = 1, hc_post_fold = 1) and `off` (both 0):
//   attention with its output's inverse RoPE (AttentionArgs::out_rot) at Flash's decode shapes (64 heads × 512,
//   ctx ≈ 2K: CSA 128 raw + 512 selected, HCA 128 raw + 16 compressed), n = 1 and 8;
//   the sublayer boundary: HC pre with the previous HC post (HcPreArgs::prev_post, the FFN's expert sum), n = 1, 8;
//   at n = 1 also over 86 control matrices in turn (a token's 86 boundaries: 66 MB of weights, more than the L2, as
//   in a decode step; the other rows re-read one 768 KB matrix from the L2).
// Each row is the op alone in a graph of 20 calls (StageBench; the 86-matrix row: 86 calls). Then the boundary kernel's
// phases (its clock64 stamps), clusters of 8 and 16. Deliberately not here: correctness
// (test_cuda_small7.cpp), the whole token (the stage table, bench_decode_stages, which cuda_bench --small7 runs next).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/hc_boundary.h"
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
  std::vector<Weight> fns;  // kBoundaries control matrices (made on first use), cycled by post_pre_many
  size_t next_fn = 0;
  static constexpr size_t kBoundaries = 86;

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
    std::vector<int32_t> p(kN), csa(kN, 525), hca(kN, 16), idx(static_cast<size_t>(kN * kTopK));
    for (int64_t i = 0; i < kN; ++i) p[static_cast<size_t>(i)] = static_cast<int32_t>(kPos + i);
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int32_t>((i * 2 + 1) % 525);
    std::vector<int32_t> sel_cnt(kN, static_cast<int32_t>(kTopK));
    pos = s.ibuf(p);
    csa_cnt = s.ibuf(sel_cnt);
    hca_cnt = s.ibuf(hca);
    sel = s.ibuf(idx);
    fn = s.weight(GgmlType::F16, kM, kHcd);
  }

  void attention(int64_t n, bool csa, const std::vector<double>& freq) {
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
    a.out_rot = static_cast<int32_t>(kR);
    a.out_freq = freq.data();
    be->attention(a);
  }

  // post_pre with the next of kBoundaries control matrices.
  void post_pre_many() {
    while (fns.size() < kBoundaries) fns.push_back(sb->weight(GgmlType::F16, kM, kHcd));
    post_pre(1, &fns[next_fn++ % kBoundaries]);
  }

  void post_pre(int64_t n, const Weight* w = nullptr) { be->hc_pre(post_pre_args(n, w)); }

  // post_pre_many without the split (the engine's boundary since kBranchHcSplit: the kernel ends at xn).
  void post_pre_many_nosplit() {
    while (fns.size() < kBoundaries) fns.push_back(sb->weight(GgmlType::F16, kM, kHcd));
    HcPreArgs a = post_pre_args(1, &fns[next_fn++ % kBoundaries]);
    a.split = false;
    be->hc_pre(a);
  }

  // The boundary without its Sinkhorn split (HcPreArgs::split off: the kernel ends at xn); with `then_split` the
  // split as hc_split after it in the same lane (the forward's kBranchHcSplit runs it on the side lane instead).
  void post_pre_nosplit(int64_t n, bool then_split) {
    HcPreArgs a = post_pre_args(n);
    a.split = false;
    be->hc_pre(a);
    if (then_split) be->hc_split({a.mix, a.scale, a.base, n, a.nhc, a.iters, a.hc_eps, a.pre, a.post, a.comb});
  }

  HcPreArgs post_pre_args(int64_t n, const Weight* w = nullptr) {
    HcPreArgs a;
    a.prev_post = HcPostArgs{x, f, post, comb, x2, n, kE, static_cast<int32_t>(kNhc)};
    a.prev_post.f_add = so;
    a.x = x2;
    a.fn = w ? *w : fn;
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
    return a;
  }
};

}  // namespace

// Block 0's phase ends in the boundary kernel (hc_boundary.cu's HcBoundaryLaunch::stamps, clock64 on one SM) for the
// last of 20 back-to-back calls, as µs since the block started (at 1,980 MHz): where its time goes.
void boundary_phases(Small7Side& s, int cluster, int form = 0, bool split = true) {
  float* buf = s.sb->buf(2 * cuda::kHcBoundaryStamps + 2);
  long long* st = reinterpret_cast<long long*>((reinterpret_cast<uintptr_t>(buf) + 7) / 8 * 8);
  cuda::HcBoundaryLaunch l;
  l.cluster = cluster;
  l.form = form;
  l.with_split = split;
  l.stamps = st;
  auto& cb = static_cast<cuda::CudaBackend&>(*s.be);
  HcPreArgs a = s.post_pre_args(1);
  a.split = split;
  for (int i = 0; i < 20; ++i) cuda::hc_boundary(cb, a, l);
  std::vector<long long> h(cuda::kHcBoundaryStamps, 0);
  if (!s.be->sync().ok()) return;
  s.be->download(h.data(), st, h.size() * sizeof(long long));
  const char* names[cuda::kHcBoundaryStamps] = {"start", "wait", "state", "bar1", "mma", "bar2", "mix", "sinkhorn", "xn"};
  std::printf("BENCH small7 boundary phases c%d form %d%s (us from block 0's start, 1980 MHz):", cluster, form,
              split ? "" : " nosplit");
  for (int i = 1; i < cuda::kHcBoundaryStamps; ++i) std::printf(" %s %.2f", names[i], (h[i] - h[0]) / 1980.0);
  std::printf("\n");
}

void bench_small7(Backend& on, Backend& off) {
  std::vector<double> freq(Small7Side::kR / 2);
  for (int i = 0; i < Small7Side::kR / 2; ++i) freq[static_cast<size_t>(i)] = std::pow(10000.0, -2.0 * i / Small7Side::kR);
  Small7Side sides[2] = {Small7Side(on), Small7Side(off)};
  std::printf("BENCH small7 %-52s %12s %12s %9s\n", "op (graph us per call, 20 calls a graph)", "folded", "launches",
              "off");
  auto row = [&](const char* name, int64_t n, auto&& body, int calls = 20) {
    StageTime t[2];
    for (int k = 0; k < 2; ++k) t[k] = sides[k].sb->time([&] { body(sides[k], n); }, calls);
    std::printf("BENCH small7 %-46s n=%-3lld %12.2f %12.0f %9.2f (%.0f launches)\n", name, static_cast<long long>(n),
                t[0].graph_us, t[0].launches, t[1].graph_us, t[1].launches);
  };
  for (int64_t n : {int64_t{1}, int64_t{8}}) {
    row("attention + out rope (CSA: 128 raw + 512 sel)", n, [&](Small7Side& s, int64_t m) { s.attention(m, true, freq); });
    row("attention + out rope (HCA: 128 raw + 16)", n, [&](Small7Side& s, int64_t m) { s.attention(m, false, freq); });
    row("hc post + pre (FFN expert sum)", n, [&](Small7Side& s, int64_t m) { s.post_pre(m); });
    if (n == 1) {
      row("hc post + pre, 86 matrices (> L2)", n, [&](Small7Side& s, int64_t) { s.post_pre_many(); },
          static_cast<int>(Small7Side::kBoundaries));
      row("hc post + pre, split off (ends at xn)", n, [&](Small7Side& s, int64_t m) { s.post_pre_nosplit(m, false); });
      row("hc post + pre, split off, then hc_split", n, [&](Small7Side& s, int64_t m) { s.post_pre_nosplit(m, true); });
    }
  }
  for (int cluster : {8, 16}) boundary_phases(sides[0], cluster);
}

// `cuda_bench --hcb-forms FOLD...`: the boundary kernel's forms (hc_post_fold 4 = session 11's; 6, 7 = session 12's
// HcBoundaryLaunch::form 1, 9) side by side, one backend each (f16_mma and attn_out_rope on, as the engine):
// graph µs per call of the boundary with and without its split (the engine's: kBranchHcSplit), one matrix (L2) and
// 86 in turn (> L2), the forms interleaved over 3 rounds; then block 0's phases of each form without the split.
void bench_hcb_forms(const std::vector<int>& folds) {
  std::vector<std::unique_ptr<Backend>> bes;
  std::vector<std::unique_ptr<Small7Side>> sides;
  for (int f : folds) {
    cuda::CudaBackendOptions o;
    o.f16_mma = true;
    o.attn_out_rope = 1;
    o.hc_post_fold = f;
    auto b = cuda::make_cuda_backend(o);
    if (!b.ok()) {  // e.g. a form removed after the H200 runs
      std::printf("BENCH hcb-forms hc_post_fold %d: %s\n", f, b.status().to_string().c_str());
      return;
    }
    bes.push_back(std::move(b).value());
    sides.push_back(std::make_unique<Small7Side>(*bes.back()));
  }
  struct Row {
    const char* name;
    int calls;
    void (*body)(Small7Side&);
  };
  const Row rows[] = {
      {"split off (engine), n=1", 20, [](Small7Side& s) { s.post_pre_nosplit(1, false); }},
      {"split off, 86 matrices (> L2)", static_cast<int>(Small7Side::kBoundaries),
       [](Small7Side& s) { s.post_pre_many_nosplit(); }},
      {"split in, n=1", 20, [](Small7Side& s) { s.post_pre(1); }},
  };
  for (int round = 0; round < 3; ++round)
    for (const Row& r : rows) {
      std::printf("BENCH hcb-forms round %d %-32s", round + 1, r.name);
      for (size_t k = 0; k < sides.size(); ++k) {
        Small7Side& s = *sides[k];
        const StageTime t = s.sb->time([&] { r.body(s); }, r.calls);
        std::printf("  fold %d %6.2f", folds[k], t.graph_us);
      }
      std::printf(" (graph us per call)\n");
      std::fflush(stdout);
    }
  for (size_t k = 0; k < sides.size(); ++k) {
    const int f = folds[k];
    boundary_phases(*sides[k], cuda::hc_boundary_cluster(f), cuda::hc_boundary_form(f), false);
  }
}
