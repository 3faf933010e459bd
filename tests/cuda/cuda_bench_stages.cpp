// cuda_bench_stages.cpp — per-stage time of one Flash decode token (batch 1, context 2K) on the CUDA
// backend: the forward pass's op sequence of each stage (src/model/forward.cpp) at the real Flash
// shapes and weight types (FORMATS.md tensors_q2.tsv), timed two ways:
//   host  — N back-to-back stage calls from the host then one sync, median of 5 (what the engine's
//           decode does today: per-op launch overhead included);
//   graph — the same N calls captured into one CUDA graph on the backend's stream and replayed,
//           timed with device events, median of 5 (kernel time plus the minimal gaps between them).
// host − graph is the stage's launch overhead; `launches` is the graph's kernel + copy nodes per stage
// call (what the engine launches for that stage today). Stages run the forward pass's fused ops (HC post + pre,
// q/kv norm + RoPE + FP8 + ring write, attention with its output's inverse RoPE); the "(pieces)" rows run the single
// ops those replace, for before/after, and count nowhere in the per-token sums. Per-token totals weight the stages by Flash's layer
// mix (2 layers without compressor, 21 CSA ratio-4 layers with indexer, 20 HCA ratio-128 layers) and
// add the output head; each stage is also given as a fraction of its bandwidth roofline (weight
// bytes / the measured copy ceiling). Weights are random bytes (every byte is read; no numerics).
// Deliberately not here: correctness (tests/cuda), the engine's own bookkeeping (cuda_bench's model
// runs measure the whole decode step).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "quant/half.h"
#include "quant/types.h"
#include "moe_test_util.h"
#include "stage_bench.h"

using namespace ds4;
using namespace ds4::backend;
using namespace ds4::bench;

void bench_decode_stages(Backend& be, double ceiling_gbs) {
  StageBench sb(be);
  const int64_t E = 4096, H = 64, D = 512, Q = 1024, HD = H * D, NHC = 4, HCD = NHC * E, M = 24, R = 64;
  const int64_t G = 8, Ro = 1024, gin = HD / G, F = 2048, NE = 16, K = 6, IH = 64, ID = 128, TK = 512;
  // Context ≈ 2K: 525 CSA rows (> top-k 512: the indexer scores and selects), 16 HCA rows; raw ring
  // as the engine's with max_chunk 256. (pos+1) is not a multiple of 4: no compressed row is emitted.
  const int64_t window = 128, pos = 2101, cap = window + 255;
  std::vector<double> freq(R / 2);
  for (int i = 0; i < R / 2; ++i) freq[i] = std::pow(10000.0, -2.0 * i / R);

  // Activations and state (one token).
  float *x = sb.buf(HCD), *x2 = sb.buf(HCD), *flat = sb.buf(HCD), *mix = sb.buf(M), *pre = sb.buf(NHC),
        *post = sb.buf(NHC), *comb = sb.buf(NHC * NHC), *y = sb.buf(E), *xn = sb.buf(E), *qa = sb.buf(Q),
        *q = sb.buf(HD), *kv = sb.buf(D), *raw = sb.buf(cap * D), *attn = sb.buf(HD), *low = sb.buf(G * Ro),
        *f = sb.buf(E), *rl = sb.buf(256), *rw = sb.buf(K), *sg = sb.buf(F), *su = sb.buf(F), *so = sb.buf(E),
        *ckv = sb.buf(2 * D), *cg = sb.buf(2 * D), *ickv = sb.buf(2 * ID), *icg = sb.buf(2 * ID), *comp = sb.buf(1024 * D), *iq = sb.buf(IH * ID), *iw = sb.buf(IH),
        *irows = sb.buf(1024 * ID), *hw = sb.buf(NHC), *logits = sb.buf(129280), *sinks = sb.buf(H);
  float *cst_kv = sb.buf(16 * 2 * D), *cst_sc = sb.buf(16 * 2 * D), *ist_kv = sb.buf(16 * 2 * ID),
        *ist_sc = sb.buf(16 * 2 * ID), *hst_kv = sb.buf(256 * D), *hst_sc = sb.buf(256 * D), *cout = sb.buf(4 * D);
  float *hc_scale = sb.buf(3, 0.5f), *hc_base = sb.buf(M), *norm_w = sb.buf(HCD, 1.0f), *ape = sb.buf(128 * 2 * D);
  int32_t* pos_d = sb.ibuf({static_cast<int32_t>(pos)});
  int32_t* tok_d = sb.ibuf({17});
  int32_t* cpos = sb.ibuf({0, 0, 0, 0});
  const int32_t csa_rows = static_cast<int32_t>((pos + 1) / 4), hca_rows = static_cast<int32_t>((pos + 1) / 128);
  int32_t* csa_cnt = sb.ibuf({csa_rows});
  int32_t* hca_cnt = sb.ibuf({hca_rows});
  int32_t* sel_cnt = sb.ibuf({static_cast<int32_t>(TK)});
  std::vector<int32_t> sel(TK);
  for (int64_t i = 0; i < TK; ++i) sel[i] = static_cast<int32_t>(i * 2 + 1);
  int32_t* sel_idx = sb.ibuf(sel);
  int32_t* icount = sb.ibuf({0});
  int32_t* rids = sb.ibuf({0, 3, 5, 7, 11, 13});
  int32_t* hash = sb.ibuf(std::vector<int32_t>(1000 * K, 1));

  struct Row {
    const char* name;
    StageTime t;
    uint64_t bytes;
    double per_token;  // how many times per token
  };
  std::vector<Row> rows;
  auto run = [&](const char* name, double per_token, const std::function<void()>& build,
                 const std::function<void()>& stage) {
    sb.reset_bytes();
    build();
    const uint64_t b = sb.bytes();
    rows.push_back({name, sb.time(stage, 20), b, per_token});
  };
  auto mm = [&](const Weight& w, const float* in, int64_t xs, float* out, int64_t ys) {
    be.matmul({w, in, xs, out, ys, 1, MatmulNumerics::ds4});
  };
  auto hc_pre_pieces = [&](const Weight& fn) {
    be.rms_norm({x, flat, nullptr, 1, HCD, HCD, 1e-6f});
    mm(fn, flat, HCD, mix, M);
    be.hc_split({mix, hc_scale, hc_base, 1, 4, 20, 1e-6f, pre, post, comb});
    be.hc_collapse({x, pre, y, 1, E, 4});
    be.rms_norm({y, xn, norm_w, 1, E, E, 1e-6f});
  };
  // The forward pass's HC pre with the previous sublayer's HC post folded in (HcPreArgs::prev_post: the post
  // reads x and writes x2, the pre's input; the expert sum f + so as the FFN's post adds it) — one op per
  // sublayer boundary, which a backend runs as the post's launch and the pre's or folded (hc_post_fold).
  auto hc_pre = [&](const Weight& fn) {
    HcPreArgs a;
    a.prev_post = HcPostArgs{x, f, post, comb, x2, 1, E, 4};
    a.prev_post.f_add = so;
    a.x = x2;
    a.fn = fn;
    a.scale = hc_scale;
    a.base = hc_base;
    a.norm_w = norm_w;
    a.n = 1;
    a.dim = E;
    a.nhc = 4;
    a.flat = flat;
    a.mix = mix;
    a.pre = pre;
    a.post = post;
    a.comb = comb;
    a.y = y;
    a.xn = xn;
    be.hc_pre(a);
  };

  Weight hc_fn;
  run("hc post + pre (attn + ffn)", 2.0 * 43, [&] { hc_fn = sb.weight(GgmlType::F16, M, HCD); }, [&] { hc_pre(hc_fn); });
  run("hc pre (pieces)", 0, [] {}, [&] { hc_pre_pieces(hc_fn); });

  Weight q_a, q_b, wkv;
  run("attn q/kv projections", 43,
      [&] {
        q_a = sb.weight(GgmlType::Q8_0, Q, E);
        q_b = sb.weight(GgmlType::Q8_0, HD, Q);
        wkv = sb.weight(GgmlType::Q8_0, D, E);
      },
      [&] {
        mm(q_a, xn, E, qa, Q);
        be.rms_norm({qa, qa, norm_w, 1, Q, Q, 1e-6f});
        mm(q_b, qa, Q, q, HD);
        be.norm_rope({q, pos_d, 1, static_cast<int32_t>(H), static_cast<int32_t>(D), static_cast<int32_t>(R), nullptr,
                      1e-6f, freq.data()});
        mm(wkv, xn, E, kv, D);
        be.norm_rope({kv, pos_d, 1, 1, static_cast<int32_t>(D), static_cast<int32_t>(R), norm_w, 1e-6f, freq.data(),
                      static_cast<int32_t>(D - R), false, raw, nullptr, cap});
      });
  run("q/kv norm + rope + fp8 + ring (pieces)", 0, [] {},
      [&] {
        be.rms_norm({q, q, nullptr, H, D, D, 1e-6f});
        be.rope({q, pos_d, 1, static_cast<int32_t>(H), static_cast<int32_t>(D), static_cast<int32_t>(R), freq.data(), false});
        be.rms_norm({kv, kv, norm_w, 1, D, D, 1e-6f});
        be.rope({kv, pos_d, 1, 1, static_cast<int32_t>(D), static_cast<int32_t>(R), freq.data(), false});
        be.fp8_round({kv, 1, D, static_cast<int32_t>(D - R)});
        be.copy(raw + (pos % cap) * D, kv, D * 4);
      });
  run("q/kv norm + rope + fp8 + ring (fused)", 0, [] {},
      [&] {
        be.norm_rope({q, pos_d, 1, static_cast<int32_t>(H), static_cast<int32_t>(D), static_cast<int32_t>(R), nullptr,
                      1e-6f, freq.data()});
        be.norm_rope({kv, pos_d, 1, 1, static_cast<int32_t>(D), static_cast<int32_t>(R), norm_w, 1e-6f, freq.data(),
                      static_cast<int32_t>(D - R), false, raw, nullptr, cap});
      });

  Weight out_a, out_b;
  run("attn output projections", 43,
      [&] {
        out_a = sb.weight(GgmlType::Q8_0, G * Ro, gin);
        out_b = sb.weight(GgmlType::Q8_0, E, G * Ro);
      },
      [&] {  // the inverse RoPE is attention's (AttentionArgs::out_rot), the HC post the next pre's (prev_post)
        MatmulArgs oa{out_a, attn, HD, low, G * Ro, 1, MatmulNumerics::ds4};
        oa.group_rows = Ro;  // the forward pass's one grouped call for the 8 groups
        oa.group_x_stride = gin;
        be.matmul(oa);
        mm(out_b, low, G * Ro, f, E);
      });

  // The forward pass's order: every projection of the layer in one matmul_many (ckv/cg: the attention
  // compressor's, ickv/icg: the indexer compressor's), then each compressor's frontier and pooling.
  auto compressor = [&](const float* kv, const float* score, int32_t ratio, int32_t out_dim, bool overlap, int32_t slots,
                        float* st_kv, float* st_sc) {
    CompressorArgs a;
    a.kv = kv;
    a.score = score;
    a.ape = ape;
    a.n = 1;
    a.pos0 = static_cast<int32_t>(pos);
    a.ratio = ratio;
    a.out_dim = out_dim;
    a.overlap = overlap;
    a.slots = slots;
    a.state_kv = st_kv;
    a.state_score = st_sc;
    a.out = cout;
    a.out_pos = cpos;
    return a;
  };
  int64_t emitted[2] = {0, 0};
  Weight c_kv, c_g, i_kv, i_g, i_qb, i_proj;
  run("compressor + indexer (CSA layer)", 21,
      [&] {
        c_kv = sb.weight(GgmlType::F16, 2 * D, E);
        c_g = sb.weight(GgmlType::F16, 2 * D, E);
        i_kv = sb.weight(GgmlType::F16, 2 * ID, E);
        i_g = sb.weight(GgmlType::F16, 2 * ID, E);
        i_qb = sb.weight(GgmlType::F16, IH * ID, Q);
        i_proj = sb.weight(GgmlType::F16, IH, E);
      },
      [&] {
        auto job = [&](const Weight& w, const float* in, int64_t xs, float* out, int64_t ys) {
          return MatmulArgs{w, in, xs, out, ys, 1, MatmulNumerics::ds4};
        };
        const MatmulArgs jobs[6] = {job(c_kv, xn, E, ckv, 2 * D),   job(c_g, xn, E, cg, 2 * D),
                                    job(i_kv, xn, E, ickv, 2 * ID), job(i_g, xn, E, icg, 2 * ID),
                                    job(i_qb, qa, Q, iq, IH * ID),  job(i_proj, xn, E, iw, IH)};
        be.matmul_many(jobs);
        // As the forward pass: both compressors and the indexer query's RoPE + QAT with the weights' scale in one call.
        CompressorArgs comp[2] = {compressor(ckv, cg, 4, static_cast<int32_t>(D), true, 16, cst_kv, cst_sc),
                                  compressor(ickv, icg, 4, static_cast<int32_t>(ID), true, 16, ist_kv, ist_sc)};
        comp[0].n_out = &emitted[0];
        comp[1].n_out = &emitted[1];
        comp[1].out_pos = cpos + 1;
        comp[1].out = cout + 2 * D;  // the two calls of one launch write apart
        IndexerQatArgs qat{iq, IH, static_cast<int32_t>(ID)};
        qat.pos = pos_d;
        qat.heads = static_cast<int32_t>(IH);
        qat.n_rot = static_cast<int32_t>(R);
        qat.freq = freq.data();
        qat.scale_x = iw;
        qat.scale = 0.01f;
        qat.scale_count = IH;
        be.compressors_and_qat(comp, qat);
        IndexerArgs ia{iq, iw, irows, csa_cnt, 1, static_cast<int32_t>(IH), static_cast<int32_t>(ID),
                       static_cast<int32_t>(TK), sel_idx, icount};
        ia.max_rows = csa_rows;
        be.indexer(ia);
      });
  Weight h_kv, h_g;
  run("compressor (HCA layer)", 20,
      [&] {
        h_kv = sb.weight(GgmlType::F16, D, E);
        h_g = sb.weight(GgmlType::F16, D, E);
      },
      [&] {
        const MatmulArgs jobs[2] = {{h_kv, xn, E, ckv, D, 1, MatmulNumerics::ds4}, {h_g, xn, E, cg, D, 1, MatmulNumerics::ds4}};
        be.matmul_many(jobs);
        CompressorArgs a = compressor(ckv, cg, 128, static_cast<int32_t>(D), false, 256, hst_kv, hst_sc);
        a.n_out = &emitted[0];
        be.compressor(a);
      });

  // max_comp: the host bound the forward pass gives ((pos + 1) / ratio), which lets a decode step take
  // the split shape of the segment order (attention_segments.cu).
  auto attention = [&](const int32_t* cnt, const int32_t* idx, int64_t max_comp) {
    AttentionArgs a;
    a.q = q;
    a.pos = pos_d;
    a.n = 1;
    a.heads = static_cast<int32_t>(H);
    a.head_dim = static_cast<int32_t>(D);
    a.scale = 0.044f;
    a.sinks = sinks;
    a.raw = raw;
    a.raw_cap = cap;
    a.window = static_cast<int32_t>(window);
    a.comp = comp;
    a.comp_count = cnt;
    a.comp_idx = idx;
    a.comp_idx_stride = TK;
    a.out = attn;
    a.max_comp = max_comp;
    a.out_rot = static_cast<int32_t>(R);  // §7.7's inverse RoPE, as the forward pass passes it
    a.out_freq = freq.data();
    be.attention(a);
  };
  run("attention core (CSA: 128 raw + 512 selected)", 21, [] {}, [&] { attention(sel_cnt, sel_idx, csa_rows); });
  run("attention core (HCA: 128 raw + 16 compressed)", 20, [] {}, [&] { attention(hca_cnt, nullptr, hca_rows); });
  run("attention core (no compressor: 128 raw)", 2, [] {}, [&] { attention(nullptr, nullptr, 0); });

  Weight router;
  run("router", 43, [&] { router = sb.weight(GgmlType::F16, 256, E); },
      [&] {
        mm(router, xn, E, rl, 256);
        RouterArgs ra;
        ra.logits = rl;
        ra.n = 1;
        ra.n_expert = 256;
        ra.k = static_cast<int32_t>(K);
        ra.scale = 1.5f;
        ra.denom_guard = 6.1035156e-05f;
        ra.ids = reinterpret_cast<int32_t*>(sg);  // scratch: the experts below use fixed ids
        ra.weights = rw;
        be.router(ra);
      });

  MoeArgs ma;
  run("routed experts (6 of 256)", 43,
      [&] {
        auto ex = [](Weight w, int64_t r, int64_t ne) { return ds4::test::expert_stack(w, r, static_cast<int32_t>(ne)); };
        ma.gate = ex(sb.weight(GgmlType::IQ2_XXS, NE * F, E), F, NE);
        ma.up = ex(sb.weight(GgmlType::IQ2_XXS, NE * F, E), F, NE);
        ma.down = ex(sb.weight(GgmlType::Q2_K, NE * E, F), E, NE);
        ma.x = xn;
        ma.ids = rids;
        ma.weights = rw;
        ma.n = 1;
        ma.k = static_cast<int32_t>(K);
        ma.dim = static_cast<int32_t>(E);
        ma.ff = static_cast<int32_t>(F);
        ma.clamp = 10;
        ma.out = f;
      },
      [&] { be.moe(ma); });
  rows.back().bytes = rows.back().bytes * K / NE;  // bytes read: 6 of the 16 resident experts

  Weight shg, shu, shd;
  run("shared expert", 43,
      [&] {
        shg = sb.weight(GgmlType::Q8_0, F, E);
        shu = sb.weight(GgmlType::Q8_0, F, E);
        shd = sb.weight(GgmlType::Q8_0, E, F);
      },
      [&] {
        mm(shg, xn, E, sg, F);
        mm(shu, xn, E, su, F);
        be.swiglu({sg, su, sg, F, 0});
        mm(shd, sg, F, so, E);  // the expert sum is the next HC pre's folded post's (prev_post.f_add)
      });

  Weight ofn, out;
  run("output head (excl. logits download)", 1,
      [&] {
        ofn = sb.weight(GgmlType::F16, NHC, HCD);
        out = sb.weight(GgmlType::Q8_0, 129280, E);
      },
      [&] {
        be.rms_norm({x, flat, nullptr, 1, HCD, HCD, 1e-6f});
        mm(ofn, flat, HCD, mix, NHC);
        be.hc_head({mix, hc_scale, hc_base, 1, 4, 1e-6f, hw});
        be.hc_collapse({x, hw, y, 1, E, 4});
        be.rms_norm({y, xn, norm_w, 1, E, E, 1e-6f});
        mm(out, xn, E, logits, 129280);
      });
  (void)tok_d;
  (void)hash;

  double tok_host = 0, tok_graph = 0, tok_bytes = 0, tok_launches = 0;
  std::printf("BENCH stage %-46s %9s %9s %9s %10s %8s %8s %9s\n", "(batch 1, ctx 2K, Flash shapes)", "host us",
              "graph us", "MB", "x/token", "GB/s", "roofline", "launches");
  for (const Row& r : rows) {
    const double gbs = r.bytes / (r.t.graph_us * 1e-6) / 1e9;
    std::printf("BENCH stage %-46s %9.2f %9.2f %9.2f %10.0f %8.0f %7.1f%% %9.0f\n", r.name, r.t.host_us, r.t.graph_us,
                r.bytes / 1e6, r.per_token, gbs, 100.0 * gbs / ceiling_gbs, r.t.launches);
    tok_host += r.t.host_us * r.per_token;
    tok_graph += r.t.graph_us * r.per_token;
    tok_bytes += r.bytes * r.per_token;
    tok_launches += r.t.launches * r.per_token;
  }
  std::printf("BENCH stage launches per token (stage sum, logits download excluded): %.0f\n", tok_launches);
  const double roof_us = tok_bytes / (ceiling_gbs * 1e9) * 1e6;
  std::printf("BENCH stage per-token sum: host-launched %.0f us (%.1f tok/s), graph %.0f us (%.1f tok/s), "
              "launch gaps %.0f us; %.2f GB read, roofline %.0f us (%.0f tok/s): graph at %.1f%% of it\n",
              tok_host, 1e6 / tok_host, tok_graph, 1e6 / tok_graph, tok_host - tok_graph, tok_bytes / 1e9, roof_us,
              1e6 / roof_us, 100.0 * roof_us / tok_graph);
}

// Dense Q8_0 matmuls of the Flash decode at n = 1, 2, 4, 8, 16, 32, 64 vectors (issues 5 and 8): graph µs
// per call (activation quantization included, as the forward pass calls it) and GB/s of weights on
// `dense` (CudaBackendOptions::gemv_dense = always: gemv_dense.cu up to 16 vectors), `mma` (gemv_mma =
// always, gemv_dense = off) and `prev` (both off: the previous decode / skinny / GEMM kernels), for the
// before/after table of docs/PERF.md.
void bench_gemv_ops(Backend& dense, Backend* mma, Backend* prev, double ceiling_gbs) {
  struct Mm {
    const char* name;
    int64_t rows, cols;
  };
  const Mm shapes[] = {{"q_a 1024x4096", 1024, 4096},       {"q_b 32768x1024", 32768, 1024},
                       {"kv 512x4096", 512, 4096},          {"out_a group 1024x4096", 1024, 4096},
                       {"out_b 4096x8192", 4096, 8192},     {"shared gate/up 2048x4096", 2048, 4096},
                       {"shared down 4096x2048", 4096, 2048}, {"head 129280x4096", 129280, 4096}};
  struct Side {
    Backend* be;
    std::unique_ptr<StageBench> sb;
    float *x = nullptr, *y = nullptr;
  };
  const int64_t n_max = 64;
  Side sides[3] = {{&dense, nullptr}, {mma, nullptr}, {prev, nullptr}};
  for (Side& sd : sides)
    if (sd.be) {
      sd.sb = std::make_unique<StageBench>(*sd.be);
      sd.x = sd.sb->buf(n_max * 8 * 4096);
      sd.y = sd.sb->buf(n_max * 129280);
    }
  // One weight per (side, shape), made when the shape comes up (the head is 562 MB on each side).
  auto run = [&](Side& sd, const Weight& w, int64_t n, int64_t group_rows) {
    const int64_t cols = w.cols, rows = w.rows;
    return sd.sb->time([&] {
      sd.be->matmul({w, sd.x, group_rows > 0 ? 8 * cols : cols, sd.y, rows, n, MatmulNumerics::ds4, group_rows, cols});
    }, 20);
  };
  auto report = [&](const char* name, int64_t rows, int64_t cols, int64_t group_rows) {
    Weight w[3];
    for (int i = 0; i < 3; ++i)
      if (sides[i].be) w[i] = sides[i].sb->weight(GgmlType::Q8_0, rows, cols);
    const double bytes = static_cast<double>(w[0].row_bytes) * rows;
    for (int64_t n : {1, 2, 4, 8, 16, 32, 64}) {
      std::printf("BENCH op gemv q8_0 %-26s n=%-2lld", name, static_cast<long long>(n));
      double t_dense = 0, t_prev = 0;
      const char* label[3] = {"dense", "mma", "previous"};
      for (int i = 0; i < 3; ++i) {
        if (!sides[i].be || (i == 0 && n > 16)) continue;
        const double us = run(sides[i], w[i], n, group_rows).graph_us;
        const double gbs = bytes / (us * 1e-6) / 1e9;
        std::printf("  %s %8.2f us %5.0f GB/s %5.1f%%", label[i], us, gbs, 100.0 * gbs / ceiling_gbs);
        if (i == 0) t_dense = us;
        if (i == 2) t_prev = us;
      }
      if (t_dense > 0 && t_prev > 0) std::printf("  (previous/dense %.2fx)", t_prev / t_dense);
      std::printf("\n");
    }
  };
  for (const Mm& m : shapes) report(m.name, m.rows, m.cols, 0);
  report("out_a grouped 8x1024x4096", 8 * 1024, 4096, 1024);  // the forward pass's one grouped call
}

// The latency-bound per-token ops at decode batch sizes n = 1, 2, 8, 32 (issues 5 and 8): HC pre (Flash
// 4 × 4096, F16 controls 24 × 16384), the router (top-k alone, and with its F16 256 × 4096 matmul as
// the forward pass calls them; random logits and bias), HC post with the expert sum, and the other small
// decode ops (q_a's RMSNorm of 1,024, kv's norm + RoPE + FP8 + ring of 512, q's norm + RoPE of 64 × 512,
// the attention output's inverse RoPE, the shared expert's SwiGLU of 2,048), on `be`
// (default options), on `prev` (CudaBackendOptions::hc_router_v2 = false: the kernels before the spread
// ones) and, when given, on `v2` (small_v3 = false: the kernels before session 6's); HC pre also on
// `plain` when given (hc_pdl = false). Graph µs per call, as the stage lines. once: each op once per backend
// and n, untimed (for a profiler: ncu's per-kernel times of exactly these launches).
void bench_hc_router(Backend& be, Backend& prev, Backend* plain, Backend* v2, bool once) {
  const int64_t E = 4096, NHC = 4, HCD = NHC * E, M = 24, NE = 256, K = 6, NMAX = 32, Q = 1024, H = 64, D = 512;
  const int64_t R = 64, F = 2048, CAP = 128;
  std::vector<double> freq(R / 2);
  for (int i = 0; i < R / 2; ++i) freq[i] = std::pow(10000.0, -2.0 * i / R);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> logits_h(NMAX * NE), bias_h(NE);
  for (float& v : logits_h) v = nd(rng);
  for (float& v : bias_h) v = 0.05f * nd(rng);
  std::vector<int32_t> pos_h(NMAX);
  for (int64_t t = 0; t < NMAX; ++t) pos_h[t] = 2048 + static_cast<int32_t>(t);
  struct Side {
    Backend* be;
    std::unique_ptr<StageBench> sb;
    Weight fn, router;
    float *x, *x2, *flat, *mix, *pre, *post, *comb, *y, *xn, *scale, *base, *norm_w, *logits, *bias, *rw, *f, *fa;
    float *qa, *qa_w, *q, *kv, *kv_w, *ring, *g, *u, *h;
    int32_t *ids, *pos;
  };
  Side sides[4];
  Backend* bes[4] = {&be, &prev, plain, v2};
  for (int i = 0; i < 4; ++i) {
    if (!bes[i]) continue;
    Side& s = sides[i];
    s.be = bes[i];
    s.sb = std::make_unique<StageBench>(*s.be);
    StageBench& b = *s.sb;
    s.fn = b.weight(GgmlType::F16, M, HCD);
    s.router = b.weight(GgmlType::F16, NE, E);
    s.x = b.buf(NMAX * HCD);
    s.x2 = b.buf(NMAX * HCD);
    s.flat = b.buf(NMAX * HCD);
    s.mix = b.buf(NMAX * M);
    s.pre = b.buf(NMAX * NHC);
    s.post = b.buf(NMAX * NHC);
    s.comb = b.buf(NMAX * NHC * NHC);
    s.y = b.buf(NMAX * E);
    s.xn = b.buf(NMAX * E);
    s.scale = b.buf(3, 0.5f);
    s.base = b.buf(M);
    s.norm_w = b.buf(E, 1.0f);
    s.logits = b.buf(NMAX * NE);
    s.bias = b.buf(NE);
    s.be->upload(s.logits, logits_h.data(), logits_h.size() * 4);
    s.be->upload(s.bias, bias_h.data(), bias_h.size() * 4);
    s.rw = b.buf(NMAX * K);
    s.f = b.buf(NMAX * E);
    s.fa = b.buf(NMAX * E);
    s.ids = reinterpret_cast<int32_t*>(b.buf(NMAX * K));
    s.qa = b.buf(NMAX * Q, 0.5f);
    s.qa_w = b.buf(Q, 1.0f);
    s.q = b.buf(NMAX * H * D, 0.5f);
    s.kv = b.buf(NMAX * D, 0.5f);
    s.kv_w = b.buf(D, 1.0f);
    s.ring = b.buf(CAP * D);
    s.g = b.buf(NMAX * F, 0.5f);
    s.u = b.buf(NMAX * F, 0.5f);
    s.h = b.buf(NMAX * F);
    s.pos = b.ibuf(pos_h);
  }
  auto hc_pre_args = [](Side& s, int64_t n) {
    HcPreArgs a;
    a.x = s.x;
    a.fn = s.fn;
    a.scale = s.scale;
    a.base = s.base;
    a.norm_w = s.norm_w;
    a.n = n;
    a.dim = E;
    a.nhc = NHC;
    a.flat = s.flat;
    a.mix = s.mix;
    a.pre = s.pre;
    a.post = s.post;
    a.comb = s.comb;
    a.y = s.y;
    a.xn = s.xn;
    return a;
  };
  auto hc_pre = [&](Side& s, int64_t n) { s.be->hc_pre(hc_pre_args(s, n)); };
  auto hc_pre_late = [&](Side& s, int64_t n) {  // HcPreArgs::split off: the forward pass's main lane
    HcPreArgs a = hc_pre_args(s, n);
    a.split = false;
    s.be->hc_pre(a);
  };
  auto hc_split = [&](Side& s, int64_t n) {  // what the forward pass then runs on the side lane
    const HcPreArgs a = hc_pre_args(s, n);
    s.be->hc_split({a.mix, a.scale, a.base, n, a.nhc, a.iters, a.hc_eps, a.pre, a.post, a.comb});
  };
  auto topk = [](Side& s, int64_t n) {
    RouterArgs ra;
    ra.logits = s.logits;
    ra.bias = s.bias;
    ra.n = n;
    ra.n_expert = NE;
    ra.k = K;
    ra.scale = 1.5f;
    ra.denom_guard = 6.1035156e-05f;
    ra.ids = s.ids;
    ra.weights = s.rw;
    s.be->router(ra);
  };
  auto router = [&](Side& s, int64_t n) {
    s.be->matmul({s.router, s.xn, E, s.logits, NE, n, MatmulNumerics::ds4});
    topk(s, n);
  };
  auto hc_post = [](Side& s, int64_t n) {
    HcPostArgs hp{s.x, s.f, s.post, s.comb, s.x2, n, E, NHC};
    hp.f_add = s.fa;
    s.be->hc_post(hp);
  };
  auto qa_norm = [](Side& s, int64_t n) { s.be->rms_norm({s.qa, s.qa, s.qa_w, n, Q, Q, 1e-6f}); };
  auto kv_norm_rope = [&](Side& s, int64_t n) {
    NormRopeArgs a{s.kv, s.pos, n, 1, static_cast<int32_t>(D), static_cast<int32_t>(R), s.kv_w, 1e-6f, freq.data()};
    a.fp8_quant = static_cast<int32_t>(D - R);
    a.f16 = true;
    a.ring = s.ring;
    a.ring_cap = CAP;
    s.be->norm_rope(a);
  };
  auto q_norm_rope = [&](Side& s, int64_t n) {
    s.be->norm_rope({s.q, s.pos, n, static_cast<int32_t>(H), static_cast<int32_t>(D), static_cast<int32_t>(R), nullptr,
                     1e-6f, freq.data()});
  };
  auto out_rope = [&](Side& s, int64_t n) {
    s.be->rope({s.q, s.pos, n, static_cast<int32_t>(H), static_cast<int32_t>(D), static_cast<int32_t>(R), freq.data(),
                true});
  };
  auto swiglu = [](Side& s, int64_t n) { s.be->swiglu({s.g, s.u, s.h, n * F, 0.0f}); };
  struct Op {
    const char* name;
    std::function<void(Side&, int64_t)> run;
  };
  const Op ops[] = {{"hc pre (4 x 4096, F16 24x16384)", hc_pre},
                    {"hc pre, split off (main lane)", hc_pre_late},
                    {"hc split 4x4 (side lane)", hc_split},
                    {"router top-6 of 256", topk},
                    {"router F16 256x4096 + top-6", router},
                    {"hc post + expert sum", hc_post},
                    {"rms_norm q_a 1024", qa_norm},
                    {"norm_rope kv 512 fp8 f16 ring", kv_norm_rope},
                    {"norm_rope q 64x512", q_norm_rope},
                    {"rope inverse attn out 64x512", out_rope},
                    {"swiglu shared 2048", swiglu}};
  if (once) {
    for (int i = 0; i < 4; ++i)
      if (bes[i] && i != 2)
        for (const Op& op : ops)
          for (int64_t n : {1, 8, 32}) op.run(sides[i], n);
    for (int i = 0; i < 4; ++i)
      if (bes[i]) (void)bes[i]->sync();
    return;
  }
  for (const Op& op : ops)
    for (int64_t n : {1, 2, 8, 32}) {
      const StageTime now = sides[0].sb->time([&] { op.run(sides[0], n); }, 20);
      const StageTime before = sides[1].sb->time([&] { op.run(sides[1], n); }, 20);
      std::printf("BENCH hc %-34s n=%-2lld graph %7.2f us (%2.0f launches), previous %7.2f us (%2.0f launches)  %.2fx;"
                  "  host %7.2f / %7.2f us",
                  op.name, static_cast<long long>(n), now.graph_us, now.launches, before.graph_us, before.launches,
                  before.graph_us / now.graph_us, now.host_us, before.host_us);
      if (v2) {
        const StageTime t2 = sides[3].sb->time([&] { op.run(sides[3], n); }, 20);
        std::printf(";  small_v3 off %7.2f us  %.2fx", t2.graph_us, t2.graph_us / now.graph_us);
      }
      std::printf("\n");
      if (plain && &op == &ops[0]) {  // HC pre without programmatic dependent launches (hc_pdl = false)
        const StageTime np = sides[2].sb->time([&] { op.run(sides[2], n); }, 20);
        std::printf("BENCH hc %-34s n=%-2lld graph %7.2f us without PDL (hc_pdl = false)\n", op.name,
                    static_cast<long long>(n), np.graph_us);
      }
    }
}

// The same small ops at a 2,048-token prefill chunk (issue 5's prefill bar; memory-bound element-wise work):
// HC post + expert sum (4 × 4096 state), q's norm + RoPE (64 × 512), the attention output's inverse RoPE,
// q_a's RMSNorm (1,024), on `now` and `v2` (small_v3 = false). Graph µs per call and the GB/s of the bytes
// each op must move (read once, written once).
void bench_small_prefill(Backend& now, Backend& v2) {
  const int64_t N = 2048, E = 4096, NHC = 4, H = 64, D = 512, R = 64, Q = 1024;
  std::vector<double> freq(R / 2);
  for (int i = 0; i < R / 2; ++i) freq[i] = std::pow(10000.0, -2.0 * i / R);
  std::vector<int32_t> pos_h(N);
  for (int64_t t = 0; t < N; ++t) pos_h[t] = 2048 + static_cast<int32_t>(t);
  struct Side {
    std::unique_ptr<StageBench> sb;
    float *x, *x2, *f, *fa, *post, *comb, *q, *qa, *qa_w;
    int32_t* pos;
  } sides[2];
  Backend* bes[2] = {&now, &v2};
  for (int i = 0; i < 2; ++i) {
    Side& s = sides[i];
    s.sb = std::make_unique<StageBench>(*bes[i]);
    StageBench& b = *s.sb;
    s.x = b.buf(N * NHC * E, 0.5f);
    s.x2 = b.buf(N * NHC * E);
    s.f = b.buf(N * E, 0.5f);
    s.fa = b.buf(N * E, 0.5f);
    s.post = b.buf(N * NHC, 0.5f);
    s.comb = b.buf(N * NHC * NHC, 0.25f);
    s.q = b.buf(N * H * D, 0.5f);
    s.qa = b.buf(N * Q, 0.5f);
    s.qa_w = b.buf(Q, 1.0f);
    s.pos = b.ibuf(pos_h);
  }
  struct Op {
    const char* name;
    double bytes;
    std::function<void(Backend&, Side&)> run;
  };
  const Op ops[] = {
      {"hc post + expert sum 4x4096", 4.0 * N * (2 * NHC * E + 2 * E),
       [&](Backend& be, Side& s) {
         HcPostArgs hp{s.x, s.f, s.post, s.comb, s.x2, N, E, static_cast<int32_t>(NHC)};
         hp.f_add = s.fa;
         be.hc_post(hp);
       }},
      {"norm_rope q 64x512", 4.0 * N * H * D * 2,
       [&](Backend& be, Side& s) {
         be.norm_rope({s.q, s.pos, N, static_cast<int32_t>(H), static_cast<int32_t>(D), static_cast<int32_t>(R),
                       nullptr, 1e-6f, freq.data()});
       }},
      {"rope inverse attn out 64x512", 4.0 * N * H * R * 2,
       [&](Backend& be, Side& s) {
         be.rope({s.q, s.pos, N, static_cast<int32_t>(H), static_cast<int32_t>(D), static_cast<int32_t>(R),
                  freq.data(), true});
       }},
      {"rms_norm q_a 1024", 4.0 * N * Q * 2,
       [&](Backend& be, Side& s) { be.rms_norm({s.qa, s.qa, s.qa_w, N, Q, Q, 1e-6f}); }},
  };
  for (const Op& op : ops) {
    const StageTime a = sides[0].sb->time([&] { op.run(now, sides[0]); }, 5);
    const StageTime b = sides[1].sb->time([&] { op.run(v2, sides[1]); }, 5);
    std::printf("BENCH prefill-small %-30s n=2048 graph %8.2f us (%5.0f GB/s), small_v3 off %8.2f us (%5.0f GB/s)  %.2fx\n",
                op.name, a.graph_us, op.bytes / (a.graph_us * 1e3), b.graph_us, op.bytes / (b.graph_us * 1e3),
                b.graph_us / a.graph_us);
  }
}

// The decode chain of a CSA layer (issues 5 and 8): the forward pass's compressor + indexer ops of one
// CSA layer for n = 1, 8, 32 sessions at contexts 2K (2,101: 525 rows, > top-k so the indexer selects),
// 8K and 32K, each session at its own position (ctx − 4·i; batched compressors through the segment
// table, the indexer through per-query row counts), no row emitted ((pos+1) mod 4 ≠ 0). Graph µs per call
// on `now` (the default kernels) and `prev` (CudaBackendOptions::indexer_decode = false, f16_many = false:
// the previous indexer score kernels, one launch per projection), plus the indexer op alone and the HCA
// compressor stage, for PERF.md.
void bench_csa_stages(Backend& now, Backend& prev) {
  const int64_t E = 4096, D = 512, Q = 1024, R = 64, IH = 64, ID = 128, TK = 512, NMAX = 32, SLOTS = 16;
  std::vector<double> freq(R / 2);
  for (int i = 0; i < R / 2; ++i) freq[i] = std::pow(10000.0, -2.0 * i / R);
  struct Side {
    Backend* be = nullptr;
    std::unique_ptr<StageBench> sb;
    Weight c_kv, c_g, i_kv, i_g, i_qb, i_proj, h_kv, h_g;
    float *xn = nullptr, *qa = nullptr, *ckv = nullptr, *cg = nullptr, *ickv = nullptr, *icg = nullptr, *iq = nullptr,
          *iw = nullptr, *irows = nullptr, *ape = nullptr, *cout = nullptr;
    std::vector<float*> st;  // per session: CSA kv, score, indexer kv, score, HCA kv, score
    int32_t *idx = nullptr, *icount = nullptr, *cpos = nullptr;
  };
  Side sides[2];
  sides[0].be = &now;
  sides[1].be = &prev;
  for (Side& s : sides) {
    s.sb = std::make_unique<StageBench>(*s.be);
    StageBench& sb = *s.sb;
    s.c_kv = sb.weight(GgmlType::F16, 2 * D, E);
    s.c_g = sb.weight(GgmlType::F16, 2 * D, E);
    s.i_kv = sb.weight(GgmlType::F16, 2 * ID, E);
    s.i_g = sb.weight(GgmlType::F16, 2 * ID, E);
    s.i_qb = sb.weight(GgmlType::F16, IH * ID, Q);
    s.i_proj = sb.weight(GgmlType::F16, IH, E);
    s.h_kv = sb.weight(GgmlType::F16, D, E);
    s.h_g = sb.weight(GgmlType::F16, D, E);
    s.xn = sb.buf(NMAX * E);
    s.qa = sb.buf(NMAX * Q);
    s.ckv = sb.buf(NMAX * 2 * D);
    s.cg = sb.buf(NMAX * 2 * D);
    s.ickv = sb.buf(NMAX * 2 * ID);
    s.icg = sb.buf(NMAX * 2 * ID);
    s.iq = sb.buf(NMAX * IH * ID);
    s.iw = sb.buf(NMAX * IH);
    s.irows = sb.buf(8192 * ID + 1024 * ID);
    s.ape = sb.buf(128 * 2 * D);
    s.cout = sb.buf(NMAX * 4 * D);
    for (int64_t i = 0; i < NMAX; ++i)
      for (int64_t width : {2 * D, 2 * D, 2 * ID, 2 * ID, D, D}) s.st.push_back(sb.buf(256 * width));
    s.idx = sb.ibuf(std::vector<int32_t>(NMAX * TK, 0));
    s.icount = sb.ibuf(std::vector<int32_t>(NMAX, 0));
    s.cpos = sb.ibuf(std::vector<int32_t>(NMAX * 4, 0));
  }
  std::printf("BENCH csa %-52s %10s %10s %8s\n", "(graph us per call; previous = indexer_decode false)", "now",
              "previous", "x");
  for (int64_t ctx : {int64_t{2101}, int64_t{8229}, int64_t{32766}}) {
    for (int64_t n : {int64_t{1}, int64_t{8}, int64_t{32}}) {
      std::vector<int32_t> pos(n), nrows(n);
      for (int64_t i = 0; i < n; ++i) {
        pos[i] = static_cast<int32_t>(ctx - 4 * i);  // (pos+1) mod 4 stays ≠ 0: no emission
        nrows[i] = (pos[i] + 1) / 4;
      }
      const int64_t bound = *std::max_element(nrows.begin(), nrows.end());
      double t_stage[2], t_idx[2], t_hca[2];
      for (int side = 0; side < 2; ++side) {
        Side& s = sides[side];
        Backend& be = *s.be;
        StageBench& sb = *s.sb;
        int32_t* pos_d = sb.ibuf(pos);
        int32_t* nr_d = sb.ibuf(nrows);
        // Segment tables (device memory): session i is column i at pos[i], its own frontier per compressor.
        std::vector<CompressorSegment> segs[3];
        for (int c = 0; c < 3; ++c)
          for (int64_t i = 0; i < n; ++i) {
            CompressorSegment e;
            e.col = i;
            e.n = 1;
            e.pos0 = pos[i];
            e.state_kv = s.st[i * 6 + 2 * c];
            e.state_score = s.st[i * 6 + 2 * c + 1];
            e.out = s.cout + i * 4 * D;
            e.out_pos = s.cpos + i * 4;
            segs[c].push_back(e);
          }
        CompressorSegment* seg_d[3];
        for (int c = 0; c < 3; ++c) {
          std::vector<int32_t> raw(segs[c].size() * sizeof(CompressorSegment) / 4);
          std::memcpy(raw.data(), segs[c].data(), segs[c].size() * sizeof(CompressorSegment));
          seg_d[c] = reinterpret_cast<CompressorSegment*>(sb.ibuf(raw));
        }
        auto mm = [&](const Weight& w, const float* in, int64_t xs, float* out, int64_t ys) {
          return MatmulArgs{w, in, xs, out, ys, n, MatmulNumerics::ds4};
        };
        int64_t emitted[2] = {0, 0};
        auto compressor = [&](const float* kv, const float* score, int32_t ratio, int32_t out_dim, bool overlap,
                              int32_t slots, int c) {
          CompressorArgs a;
          a.kv = kv;
          a.score = score;
          a.ape = s.ape;
          a.ratio = ratio;
          a.out_dim = out_dim;
          a.overlap = overlap;
          a.slots = slots;
          if (n == 1) {  // the forward pass's plain call for one session
            a.n = 1;
            a.pos0 = pos[0];
            a.state_kv = segs[c][0].state_kv;
            a.state_score = segs[c][0].state_score;
            a.out = s.cout + (c == 1 ? 2 * D : 0);  // the two calls of one launch write apart
            a.out_pos = s.cpos + (c == 1 ? 1 : 0);
            a.n_out = &emitted[c == 1 ? 1 : 0];
          } else {
            a.segments = static_cast<int32_t>(n);
            a.seg = seg_d[c];
          }
          return a;
        };
        auto indexer = [&] {
          IndexerArgs ia{s.iq, s.iw, s.irows, nr_d, n, static_cast<int32_t>(IH), static_cast<int32_t>(ID),
                         static_cast<int32_t>(TK), s.idx, s.icount};
          ia.max_rows = bound;
          be.indexer(ia);
        };
        // The forward pass's order: every projection in one matmul_many, the two compressors with the
        // indexer's query RoPE + FP4 and weight scale (one call), the indexer.
        const MatmulArgs jobs[6] = {mm(s.c_kv, s.xn, E, s.ckv, 2 * D),   mm(s.c_g, s.xn, E, s.cg, 2 * D),
                                    mm(s.i_kv, s.xn, E, s.ickv, 2 * ID), mm(s.i_g, s.xn, E, s.icg, 2 * ID),
                                    mm(s.i_qb, s.qa, Q, s.iq, IH * ID),  mm(s.i_proj, s.xn, E, s.iw, IH)};
        const MatmulArgs hjobs[2] = {mm(s.h_kv, s.xn, E, s.ckv, D), mm(s.h_g, s.xn, E, s.cg, D)};
        t_stage[side] = sb.time([&] {
                            be.matmul_many(jobs);
                            const CompressorArgs comp[2] = {
                                compressor(s.ckv, s.cg, 4, static_cast<int32_t>(D), true, SLOTS, 0),
                                compressor(s.ickv, s.icg, 4, static_cast<int32_t>(ID), true, SLOTS, 1)};
                            IndexerQatArgs qat{s.iq, n * IH, static_cast<int32_t>(ID)};
                            qat.pos = pos_d;
                            qat.heads = static_cast<int32_t>(IH);
                            qat.n_rot = static_cast<int32_t>(R);
                            qat.freq = freq.data();
                            qat.scale_x = s.iw;
                            qat.scale = 0.01f;
                            qat.scale_count = n * IH;
                            be.compressors_and_qat(comp, qat);
                            indexer();
                          }, 20).graph_us;
        t_idx[side] = sb.time(indexer, 20).graph_us;
        t_hca[side] = sb.time([&] {
                          be.matmul_many(hjobs);
                          be.compressor(compressor(s.ckv, s.cg, 128, static_cast<int32_t>(D), false, 256, 2));
                        }, 20).graph_us;
      }
      auto line = [&](const char* what, const double (&t)[2]) {
        char name[96];
        std::snprintf(name, sizeof(name), "%s ctx=%lld n=%lld rows=%lld", what, static_cast<long long>(ctx + 1),
                      static_cast<long long>(n), static_cast<long long>(bound));
        std::printf("BENCH csa %-52s %10.2f %10.2f %7.2fx\n", name, t[0], t[1], t[1] / t[0]);
      };
      line("compressor + indexer (CSA layer)", t_stage);
      line("indexer op", t_idx);
      line("compressor (HCA layer)", t_hca);
    }
  }
}

// Session 7's shorter decode chain (CudaBackendOptions::small_v4) at decode batch sizes n = 1, 2, 8, 32, on
// `now` (default) and `v3` (small_v4 = false), graph µs per call and kernel launches: HC pre as the main
// lane runs it (split off on `now`: post and comb left to the side lane; the whole op on `v3`), the split
// alone (what the side lane then runs), the indexer query's RoPE + QAT (64 × 128, 64 RoPE dims) and its head
// weights' scale (one launch on `now`, rope, QAT and scale on `v3`), and a CSA layer's two compressors (D 512 and 128, ratio 4 with overlap;
// n sessions of one token each, one closing a block; compressor_many: one launch on `now`). once: each op
// once per backend and n, untimed (for ncu).
void bench_small4(Backend& now, Backend& v3, bool once) {
  const int64_t NMAX = 32, R = 64, RATIO = 4;
  const int64_t DA = 512, DI = 128, SLOTS = 2 * RATIO + 64;
  std::vector<double> freq(R / 2);
  for (int i = 0; i < R / 2; ++i) freq[i] = std::pow(10000.0, -2.0 * i / R);
  std::vector<int32_t> pos_h(NMAX);
  for (int64_t t = 0; t < NMAX; ++t) pos_h[t] = 2047 + 4 * static_cast<int32_t>(t);  // each closes a block
  struct Side : HcBenchSide {
    CompressorArgs comp[2][NMAX + 1];  // [attention, indexer][n]: n one-token sessions
    std::vector<Buffer> tables;         // the session tables comp points to
  } sides[2];
  Backend* bes[2] = {&now, &v3};
  for (int i = 0; i < 2; ++i) {
    Side& s = sides[i];
    s.init(*bes[i], NMAX, pos_h, 0.01f);
    StageBench& b = *s.sb;
    for (int c = 0; c < 2; ++c) {
      const int64_t D = c == 0 ? DA : DI, width = 2 * D;
      float* kv = b.buf(NMAX * width, 0.5f);
      float* score = b.buf(NMAX * width, 0.25f);
      float* ape = b.buf(RATIO * width, 0.1f);
      // Per session: its frontier ring and output rows, in one table per batch size.
      std::vector<CompressorSegment> seg;
      for (int64_t t = 0; t < NMAX; ++t) {
        CompressorSegment e;
        e.col = t;
        e.n = 1;
        e.pos0 = pos_h[t];
        e.state_kv = b.buf(SLOTS * width, 0.5f);
        e.state_score = b.buf(SLOTS * width, 0.25f);
        e.out = b.buf(2 * D);
        e.out_pos = reinterpret_cast<int32_t*>(b.buf(2));
        seg.push_back(e);
      }
      auto table = s.be->alloc(seg.size() * sizeof(CompressorSegment), MemCategory::scratch);
      if (!table.ok()) return;
      s.be->upload(table->data(), seg.data(), seg.size() * sizeof(CompressorSegment));
      for (int64_t n = 1; n <= NMAX; ++n) {
        CompressorArgs& a = s.comp[c][n];
        a.kv = kv;
        a.score = score;
        a.ape = ape;
        a.ratio = static_cast<int32_t>(RATIO);
        a.out_dim = static_cast<int32_t>(D);
        a.overlap = true;
        a.slots = static_cast<int32_t>(SLOTS);
        a.segments = static_cast<int32_t>(n);
        a.seg = static_cast<const CompressorSegment*>(table->data());
      }
      s.tables.push_back(std::move(table).value());
    }
  }
  struct Op {
    const char* name;
    std::function<void(Side&, int64_t, bool)> run;  // (side, n, the new form)
  };
  const Op ops[] = {
      {"hc pre, main lane (split off / whole)", [&](Side& s, int64_t n, bool v4) { s.hc_pre(n, !v4); }},
      {"hc split 4x4 (side lane)",
       [&](Side& s, int64_t n, bool) {
         s.be->hc_split({s.mix, s.scale, s.base, n, static_cast<int32_t>(HcBenchSide::kNhc), 20, 1e-6f, s.pre, s.post, s.comb});
       }},
      {"indexer q rope + qat 64x128, w scale",
       [&](Side& s, int64_t n, bool) { s.indexer_rope_qat(n, freq); }},
      {"compressors D512 + D128 r4",
       [&](Side& s, int64_t n, bool) {
         const CompressorArgs jobs[2] = {s.comp[0][n], s.comp[1][n]};
         s.be->compressor_many(jobs);
       }},
  };
  if (once) {
    for (int i = 0; i < 2; ++i) {
      for (const Op& op : ops)
        for (int64_t n : {1, 8, 32}) op.run(sides[i], n, i == 0);
      (void)bes[i]->sync();
    }
    return;
  }
  for (const Op& op : ops)
    for (int64_t n : {1, 2, 8, 32}) {
      const StageTime a = sides[0].sb->time([&] { op.run(sides[0], n, true); }, 20);
      const StageTime b = sides[1].sb->time([&] { op.run(sides[1], n, false); }, 20);
      std::printf("BENCH small4 %-38s n=%-2lld graph %7.2f us (%2.0f launches), small_v4 off %7.2f us (%2.0f launches)"
                  "  %.2fx\n",
                  op.name, static_cast<long long>(n), a.graph_us, a.launches, b.graph_us, b.launches,
                  b.graph_us / a.graph_us);
    }
}

// `cuda_bench --small5`: session 8's kernels (CudaBackendOptions::small_v5) against the previous ones at decode
// batch sizes and a 2,048-token prefill chunk, graph µs per call (median of 5 replays) and GB/s of the bytes
// each must move: the indexer query's RoPE + QAT (+ head weights' scale), the HC state's RMSNorm (16384
// wide), and the whole HC pre past the spread kernels (norm, controls matmul, split + collapse + norm).
void bench_small5(Backend& now, Backend& v4) {
  const int64_t E = HcBenchSide::kE, HCD = HcBenchSide::kHcd, NMAX = 2048, IH = HcBenchSide::kIh,
                ID = HcBenchSide::kId, R = 64;
  std::vector<double> freq(R / 2);
  for (int i = 0; i < R / 2; ++i) freq[i] = std::pow(10000.0, -2.0 * i / R);
  std::vector<int32_t> pos_h(NMAX);
  for (int64_t t = 0; t < NMAX; ++t) pos_h[t] = 2048 + static_cast<int32_t>(t);
  using Side = HcBenchSide;
  Side sides[2];
  sides[0].init(now, NMAX, pos_h, 0.5f);
  sides[1].init(v4, NMAX, pos_h, 0.5f);
  struct Op {
    const char* name;
    double bytes_per_token;
    std::function<void(Side&, int64_t)> run;
  };
  const Op ops[] = {
      {"indexer q rope + qat 64x128, w scale", 8.0 * IH * ID,
       [&](Side& s, int64_t n) { s.indexer_rope_qat(n, freq); }},
      {"rms_norm hc state 16384 -> flat", 8.0 * HCD,
       [&](Side& s, int64_t n) { s.be->rms_norm({s.x, s.flat, nullptr, n, HCD, HCD, 1e-6f}); }},
      {"hc pre whole op", 4.0 * (2 * HCD + 2 * E), [&](Side& s, int64_t n) { s.hc_pre(n, true); }},
      {"hc pre split off (main lane)", 4.0 * (HCD + 2 * E), [&](Side& s, int64_t n) { s.hc_pre(n, false); }},
  };
  for (const Op& op : ops)
    for (int64_t n : {1, 8, 32, 2048}) {
      const int calls = n >= 2048 ? 5 : 20;
      const StageTime a = sides[0].sb->time([&] { op.run(sides[0], n); }, calls);
      const StageTime b = sides[1].sb->time([&] { op.run(sides[1], n); }, calls);
      const double gb = op.bytes_per_token * static_cast<double>(n) / 1e3;
      std::printf("BENCH small5 %-44s n=%-4lld graph %8.2f us (%2.0f launches, %5.0f GB/s), small_v5 off %8.2f us "
                  "(%2.0f launches, %5.0f GB/s)  %.2fx\n",
                  op.name, static_cast<long long>(n), a.graph_us, a.launches, gb / a.graph_us, b.graph_us, b.launches,
                  gb / b.graph_us, b.graph_us / a.graph_us);
      std::fflush(stdout);
    }
}

// `cuda_bench --hc-fuse`: the decode HC pre in one launch (CudaBackendOptions::hc_fuse = 2) against two
// (hc_fuse = 0), each in both F16 orders (f16_mma off / on), graph µs per call (median of 5 replays of 86 calls:
// a token's sublayers) at n = 1, 2, 8, 32: the HC pre alone (whole op, and split off) and the sublayer boundary
// (the HC post with the expert sum, then the next HC pre on its output).
void bench_hc_fuse(Backend& two, Backend& one, Backend& two_mma, Backend& one_mma) {
  using Side = HcBenchSide;
  const int64_t NMAX = 32, E = Side::kE, HCD = Side::kHcd;
  std::vector<int32_t> pos_h(NMAX, 2048);
  struct Boundary : Side {
    float *f = nullptr, *f_add = nullptr, *x2 = nullptr;
  } sides[4];
  Backend* bes[4] = {&two, &one, &two_mma, &one_mma};
  for (int i = 0; i < 4; ++i) {
    sides[i].init(*bes[i], NMAX, pos_h, 0.5f);
    sides[i].f = sides[i].sb->buf(NMAX * E, 0.25f);
    sides[i].f_add = sides[i].sb->buf(NMAX * E, 0.125f);
    sides[i].x2 = sides[i].sb->buf(NMAX * HCD, 0.5f);
  }
  auto boundary = [](Boundary& s, int64_t n) {
    HcPostArgs p{s.x, s.f, s.post, s.comb, s.x2, n, E, static_cast<int32_t>(Side::kNhc)};
    p.f_add = s.f_add;
    s.be->hc_post(p);
    float* keep = s.x;
    s.x = s.x2;  // the pre reads the post's output
    s.hc_pre(n, true);
    s.x = keep;
  };
  struct Op {
    const char* name;
    std::function<void(Boundary&, int64_t)> run;
  };
  const Op ops[] = {{"hc pre whole op", [](Boundary& s, int64_t n) { s.hc_pre(n, true); }},
                    {"hc pre split off (main lane)", [](Boundary& s, int64_t n) { s.hc_pre(n, false); }},
                    {"hc post + pre (sublayer boundary)", boundary}};
  for (int order = 0; order < 2; ++order)
    for (const Op& op : ops)
      for (int64_t n : {1, 2, 8, 32}) {
        Boundary& a = sides[2 * order];
        Boundary& b = sides[2 * order + 1];
        const StageTime ta = a.sb->time([&] { op.run(a, n); }, 86);
        const StageTime tb = b.sb->time([&] { op.run(b, n); }, 86);
        std::printf("BENCH hc-fuse %-9s %-34s n=%-2lld two launches %6.2f us (%2.0f launches), one %6.2f us (%2.0f "
                    "launches)  %.2fx\n",
                    order ? "f16_mma" : "segments", op.name, static_cast<long long>(n), ta.graph_us, ta.launches,
                    tb.graph_us, tb.launches, ta.graph_us / tb.graph_us);
        std::fflush(stdout);
      }
}

// Session 9's decode launches, each behind the element-wise scale that writes its input, as in a step (graph µs
// per repetition, 20 a graph). fused = false: the programmatic-dependent launches on `now` against plain ones on
// `prev` (hc_pdl = false) — the attention output's inverse RoPE (64 × 512) and a CSA layer's two compressors
// (D512 + D128, ratio 4 with overlap, one session). fused = true: those compressors and the indexer query's RoPE +
// QAT (64 × 128, the head weights' scale) by compressors_and_qat, one launch on `now` (small_v6 = 1) against the
// two ops on `prev` (small_v6 = 0).
void bench_small6(Backend& now, Backend& prev, bool fused) {
  const int64_t H = 64, D = 512, R = 64, NMAX = 32, ID = 128, SLOTS = 16;
  std::vector<double> freq(R / 2);
  for (int i = 0; i < R / 2; ++i) freq[i] = std::pow(10000.0, -2.0 * i / R);
  std::vector<int32_t> pos_h(NMAX);
  for (int64_t t = 0; t < NMAX; ++t) pos_h[t] = 2101 + static_cast<int32_t>(t);
  struct Side {
    Backend* be;
    std::unique_ptr<StageBench> sb;
    float *q, *ckv, *cg, *ickv, *icg, *ape, *cst_kv, *cst_sc, *ist_kv, *ist_sc, *cout, *iq, *iw;
    int32_t *pos, *cpos;
  } sides[2];
  Backend* bes[2] = {&now, &prev};
  for (int i = 0; i < 2; ++i) {
    Side& s = sides[i];
    s.be = bes[i];
    s.sb = std::make_unique<StageBench>(*s.be);
    StageBench& b = *s.sb;
    s.q = b.buf(NMAX * H * D, 0.5f);
    s.ckv = b.buf(2 * D, 0.5f);
    s.cg = b.buf(2 * D, 0.5f);
    s.ickv = b.buf(2 * ID, 0.5f);
    s.icg = b.buf(2 * ID, 0.5f);
    s.ape = b.buf(4 * 2 * D, 0.1f);
    s.cst_kv = b.buf(SLOTS * 2 * D);
    s.cst_sc = b.buf(SLOTS * 2 * D);
    s.ist_kv = b.buf(SLOTS * 2 * ID);
    s.ist_sc = b.buf(SLOTS * 2 * ID);
    s.cout = b.buf(4 * D);
    s.iq = b.buf(64 * ID, 0.5f);
    s.iw = b.buf(64, 0.5f);
    s.pos = b.ibuf(pos_h);
    s.cpos = b.ibuf({0, 0});
  }
  auto rope = [&](Side& s, int64_t n) {
    s.be->scale(s.q, 1.0f, n * H * D);
    s.be->rope({s.q, s.pos, n, static_cast<int32_t>(H), static_cast<int32_t>(D), static_cast<int32_t>(R), freq.data(),
                true});
  };
  auto compressors = [&](Side& s, bool qat) {
    s.be->scale(s.ckv, 1.0f, 2 * D);
    auto job = [&](float* kv, float* g, int32_t dim, float* skv, float* ssc, int32_t* opos) {
      CompressorArgs a;
      a.kv = kv;
      a.score = g;
      a.ape = s.ape;
      a.n = 1;
      a.pos0 = 2101;
      a.ratio = 4;
      a.out_dim = dim;
      a.overlap = true;
      a.slots = static_cast<int32_t>(SLOTS);
      a.state_kv = skv;
      a.state_score = ssc;
      a.out = s.cout;
      a.out_pos = opos;
      return a;
    };
    CompressorArgs comp[2] = {job(s.ckv, s.cg, static_cast<int32_t>(D), s.cst_kv, s.cst_sc, s.cpos),
                              job(s.ickv, s.icg, static_cast<int32_t>(ID), s.ist_kv, s.ist_sc, s.cpos + 1)};
    if (!qat) {
      s.be->compressor_many(comp);
      return;
    }
    IndexerQatArgs q{s.iq, 64, static_cast<int32_t>(ID)};
    q.pos = s.pos;
    q.heads = 64;
    q.n_rot = static_cast<int32_t>(R);
    q.freq = freq.data();
    q.scale_x = s.iw;
    q.scale = 0.01f;
    q.scale_count = 64;
    s.be->compressors_and_qat(comp, q);
  };
  struct Op {
    const char* name;
    std::function<void(Side&, int64_t)> run;
    bool per_n;
  };
  const Op ops[] = {{"scale + rope inverse attn out 64x512", rope, true},
                    {"scale + compressors D512 + D128 r4", [&](Side& s, int64_t) { compressors(s, false); }, false},
                    {"scale + compressors + idx q rope qat", [&](Side& s, int64_t) { compressors(s, true); }, false}};
  for (const Op& op : ops)
    for (int64_t n : {1, 2, 8, 32}) {
      if ((!op.per_n && n > 1) || (&op == &ops[2]) != fused) break;
      const StageTime a = sides[0].sb->time([&] { op.run(sides[0], n); }, 20);
      const StageTime b = sides[1].sb->time([&] { op.run(sides[1], n); }, 20);
      std::printf("BENCH small6 %-40s n=%-2lld graph %7.2f us (%2.0f launches), %s %7.2f us (%2.0f launches)  %.2fx\n",
                  op.name, static_cast<long long>(n), a.graph_us, a.launches, fused ? "small_v6 off" : "hc_pdl off",
                  b.graph_us, b.launches, b.graph_us / a.graph_us);
      std::fflush(stdout);
    }
}
