// test_cuda_ops.cpp — every non-matmul CUDA op vs the CPU reference op on fresh random inputs, outputs
// poisoned with NaN, over the tiny and the real Flash shapes (E 4096, D 512, H 64, NE 256, IH 64,
// ID 128, top-k 512). Tolerances: ops whose float operations are the CPU's in the same order
// (collapse, post, fp8/fp4 round trips, f16 rounding, add, scale, embed, compressor state) must
// match exactly or to 1e-6; ops with device expf/cos/sin (split, head, SwiGLU, router weights,
// compressor pooling) to 1e-5 relative; attention (online softmax vs two passes) to 1e-5 of max|ref|;
// discrete outputs (indexer selection, router ids, compressor counts/positions) exactly.
#include <algorithm>
#include <numeric>

#include "cuda_test_util.h"

using namespace ds4;
using namespace ds4::backend;
using namespace ds4::test;

using CudaOps = CudaOpsTest;

// Sets CompressorArgs::slots where backend.h has it (ring frontier), reporting the rows to allocate.
template <typename Args>
void set_slots(Args& a, int32_t ring_rows, int32_t* rows) {
  if constexpr (requires { a.slots; }) {
    a.slots = ring_rows;
    *rows = ring_rows;
  }
}

TEST_F(CudaOps, RmsNorm) {
  for (int64_t dim : {64, 256, 4096, 16384}) {
    const int64_t rows = 7, stride = dim + 4;
    auto x = randn(static_cast<size_t>(rows * stride), 3.0f);
    auto w = randn(static_cast<size_t>(dim));
    for (bool weighted : {false, true}) {
      std::vector<float> want = x;
      cpu_->rms_norm({x.data(), want.data(), weighted ? w.data() : nullptr, rows, dim, stride, 1e-6f});
      float* gx = dev(x);  // in place, as the forward pass does
      gpu_->rms_norm({gx, gx, weighted ? dev(w) : nullptr, rows, dim, stride, 1e-6f});
      ASSERT_TRUE(gpu_->sync().ok());
      expect_close(host(gx, want.size()), want, 1e-6, 0, "rms_norm dim " + std::to_string(dim) + (weighted ? " w" : ""));
    }
  }
}

TEST_F(CudaOps, Rope) {
  struct S {
    int32_t heads, head_dim, n_rot;
  };
  for (S s : {S{64, 512, 64}, S{1, 512, 64}, S{4, 256, 64}, S{64, 128, 64}})
    for (bool inverse : {false, true}) {
      const int64_t n = 6;
      auto x = randn(static_cast<size_t>(n * s.heads * s.head_dim));
      std::vector<int32_t> pos(n);
      for (auto& p : pos) p = randint(0, 1 << 20);
      pos[0] = 0;
      std::vector<double> freq(s.n_rot / 2);
      for (size_t i = 0; i < freq.size(); ++i) freq[i] = std::pow(10000.0, -2.0 * i / s.n_rot);
      std::vector<float> want = x;
      cpu_->rope({want.data(), pos.data(), n, s.heads, s.head_dim, s.n_rot, freq.data(), inverse});
      float* gx = dev(x);
      gpu_->rope({gx, dev(pos), n, s.heads, s.head_dim, s.n_rot, freq.data(), inverse});
      ASSERT_TRUE(gpu_->sync().ok());
      expect_close(host(gx, want.size()), want, 1e-6, 1e-6,
                   "rope H" + std::to_string(s.heads) + " D" + std::to_string(s.head_dim) + (inverse ? " inverse" : ""));
    }
}

TEST_F(CudaOps, Embed) {
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0}) {
    const int64_t vocab = 300, dim = 4096, n = 5;
    Weight w;
    auto bytes = random_weight(t, vocab, dim, &w, 1.0f);
    w.data = bytes.data();
    std::vector<int32_t> tok(n);
    for (auto& v : tok) v = randint(0, vocab - 1);
    std::vector<float> want(static_cast<size_t>(n * 4 * dim));
    cpu_->embed({w, tok.data(), n, 4, want.data()});
    float* out = poisoned(want.size());
    gpu_->embed({gpu_weight(w, bytes.size()), dev(tok), n, 4, out});
    ASSERT_TRUE(gpu_->sync().ok());
    expect_close(host(out, want.size()), want, 0, 0, "embed " + std::string(type_name(t)));
  }
}

TEST_F(CudaOps, HcSplitHeadCollapsePost) {
  const int32_t nhc = 4;
  const int64_t n = 9, dim = 4096, mix = (2 + nhc) * nhc;
  auto m = randn(static_cast<size_t>(n * mix), 2.0f);
  auto scale = randn(3);
  auto base = randn(static_cast<size_t>(mix));
  std::vector<float> pre(n * nhc), post(n * nhc), comb(n * nhc * nhc);
  cpu_->hc_split({m.data(), scale.data(), base.data(), n, nhc, 20, 1e-6f, pre.data(), post.data(), comb.data()});
  float *gpre = poisoned(pre.size()), *gpost = poisoned(post.size()), *gcomb = poisoned(comb.size());
  gpu_->hc_split({dev(m), dev(scale), dev(base), n, nhc, 20, 1e-6f, gpre, gpost, gcomb});
  ASSERT_TRUE(gpu_->sync().ok());
  expect_close(host(gpre, pre.size()), pre, 1e-5, 1e-7, "hc_split pre");
  expect_close(host(gpost, post.size()), post, 1e-5, 1e-7, "hc_split post");
  expect_close(host(gcomb, comb.size()), comb, 1e-5, 1e-7, "hc_split comb");

  auto hm = randn(static_cast<size_t>(n * nhc));
  auto hs = randn(1);
  auto hb = randn(nhc);
  std::vector<float> hw(n * nhc);
  cpu_->hc_head({hm.data(), hs.data(), hb.data(), n, nhc, 1e-6f, hw.data()});
  float* ghw = poisoned(hw.size());
  gpu_->hc_head({dev(hm), dev(hs), dev(hb), n, nhc, 1e-6f, ghw});
  ASSERT_TRUE(gpu_->sync().ok());
  expect_close(host(ghw, hw.size()), hw, 1e-6, 1e-7, "hc_head");

  auto x = randn(static_cast<size_t>(n * nhc * dim));
  std::vector<float> y(n * dim);
  cpu_->hc_collapse({x.data(), pre.data(), y.data(), n, dim, nhc});
  float* gx = dev(x);
  float* gy = poisoned(y.size());
  gpu_->hc_collapse({gx, dev(pre), gy, n, dim, nhc});
  ASSERT_TRUE(gpu_->sync().ok());
  expect_close(host(gy, y.size()), y, 0, 0, "hc_collapse E4096");

  auto f = randn(static_cast<size_t>(n * dim));
  std::vector<float> out(x.size());
  cpu_->hc_post({x.data(), f.data(), post.data(), comb.data(), out.data(), n, dim, nhc});
  float* gout = poisoned(out.size());
  gpu_->hc_post({gx, dev(f), dev(post), dev(comb), gout, n, dim, nhc});
  ASSERT_TRUE(gpu_->sync().ok());
  expect_close(host(gout, out.size()), out, 0, 0, "hc_post E4096");
}

TEST_F(CudaOps, Fp8AndIndexerQatRoundTrips) {
  const int64_t rows = 9, stride = 512;
  auto x = randn(static_cast<size_t>(rows * stride), 4.0f);
  for (int i = 0; i < 40; ++i) x[randint(0, rows * stride - 1)] *= 1e-6f;  // subnormal E4M3 range
  std::vector<float> want = x;
  cpu_->fp8_round({want.data(), rows, stride, 448});
  float* gx = dev(x);
  gpu_->fp8_round({gx, rows, stride, 448});
  ASSERT_TRUE(gpu_->sync().ok());
  expect_close(host(gx, want.size()), want, 0, 0, "fp8_round D512 nope 448");

  for (int32_t dim : {128, 64}) {
    auto q = randn(static_cast<size_t>(rows * 64 * dim));  // Flash: n·IH rows of ID
    std::vector<float> wq = q;
    cpu_->indexer_qat({wq.data(), rows * 64, dim});
    float* gq = dev(q);
    gpu_->indexer_qat({gq, rows * 64, dim});
    ASSERT_TRUE(gpu_->sync().ok());
    expect_close(host(gq, wq.size()), wq, 0, 0, "indexer_qat dim " + std::to_string(dim));
  }
}

TEST_F(CudaOps, ElementwiseF16RoundAddScaleSwiglu) {
  const int64_t n = 100003;
  auto a = randn(n, 100.0f), b = randn(n);
  a[0] = 70000.0f;  // overflows half
  a[1] = 1e-7f;     // half subnormal
  std::vector<float> want = a;
  cpu_->f16_round(want.data(), n);
  float* ga = dev(a);
  gpu_->f16_round(ga, n);
  ASSERT_TRUE(gpu_->sync().ok());
  expect_close(host(ga, n), want, 0, 0, "f16_round");

  cpu_->add(want.data(), b.data(), n);
  float* gb = dev(b);
  gpu_->add(ga, gb, n);
  cpu_->scale(want.data(), 0.37f, n);
  gpu_->scale(ga, 0.37f, n);
  ASSERT_TRUE(gpu_->sync().ok());
  expect_close(host(ga, n), want, 0, 0, "add + scale");

  for (float clamp : {0.0f, 1.0f, 10.0f}) {
    auto g = randn(n, 5.0f), u = randn(n, 5.0f);
    std::vector<float> h(n);
    cpu_->swiglu({g.data(), u.data(), h.data(), n, clamp});
    float* gh = poisoned(n);
    gpu_->swiglu({dev(g), dev(u), gh, n, clamp});
    ASSERT_TRUE(gpu_->sync().ok());
    expect_close(host(gh, n), h, 1e-6, 1e-7, "swiglu clamp " + std::to_string(clamp));
  }
}

TEST_F(CudaOps, CompressorAcrossChunks) {
  struct S {
    int32_t ratio, out_dim;
    bool overlap;
  };
  for (S s : {S{4, 512, true}, S{128, 512, false}, S{4, 128, true}, S{16, 256, false}}) {
    const int64_t width = s.overlap ? 2 * s.out_dim : s.out_dim;
    // A ring with rewind room where backend.h has CompressorArgs::slots, else the fixed frontier.
    CompressorArgs shape;
    int32_t slots = (s.overlap ? 2 : 1) * s.ratio;
    set_slots(shape, (s.overlap ? 3 : 2) * s.ratio, &slots);
    std::vector<float> ckv(slots * width, 0.0f), csc(slots * width, -INFINITY);
    float* gkv = dev(ckv);
    float* gsc = dev(csc);
    auto ape = randn(static_cast<size_t>(s.ratio * width));
    float* gape = dev(ape);
    // The one-block walk (compressor_parallel = false) on its own copy of the frontier: chunks of ≥ 64
    // tokens pool in parallel by default and must give the walk's bits.
    cuda::CudaBackendOptions wo;
    wo.compressor_parallel = false;
    auto walk_made = cuda::make_cuda_backend(wo);
    ASSERT_TRUE(walk_made.ok());
    auto walk = std::move(walk_made).value();
    float* wkv = dev(ckv);
    float* wsc = dev(csc);
    int32_t pos0 = 0;
    for (int64_t n : {5, 131, 1, 3, 64, 600}) {
      auto kv = randn(static_cast<size_t>(n * width));
      auto sc = randn(static_cast<size_t>(n * width), 2.0f);
      const int64_t max_out = n / s.ratio + 1;
      std::vector<float> out(max_out * s.out_dim, 0.0f);
      std::vector<int32_t> opos(max_out, -1);
      int64_t n_out = -1, g_out = -1;
      CompressorArgs c = shape;
      c.kv = kv.data();
      c.score = sc.data();
      c.ape = ape.data();
      c.n = n;
      c.pos0 = pos0;
      c.ratio = s.ratio;
      c.out_dim = s.out_dim;
      c.overlap = s.overlap;
      c.state_kv = ckv.data();
      c.state_score = csc.data();
      c.out = out.data();
      c.out_pos = opos.data();
      c.n_out = &n_out;
      cpu_->compressor(c);
      float* gout = poisoned(out.size());
      int32_t* gpos = poisoned_i32(opos.size());
      CompressorArgs g = c;
      g.kv = dev(kv);
      g.score = dev(sc);
      g.ape = gape;
      g.state_kv = gkv;
      g.state_score = gsc;
      g.out = gout;
      g.out_pos = gpos;
      g.n_out = &g_out;
      gpu_->compressor(g);
      ASSERT_TRUE(gpu_->sync().ok());
      const std::string what = "compressor r" + std::to_string(s.ratio) + " D" + std::to_string(s.out_dim) + " pos0 " +
                               std::to_string(pos0) + " n" + std::to_string(n);
      ASSERT_EQ(g_out, n_out) << what;
      out.resize(n_out * s.out_dim);
      expect_close(host(gout, out.size()), out, 1e-5, 1e-7, what + " rows");
      auto gp = host(gpos, static_cast<size_t>(n_out));
      for (int64_t k = 0; k < n_out; ++k) EXPECT_EQ(gp[k], opos[k]) << what;
      expect_close(host(gkv, ckv.size()), ckv, 0, 0, what + " state kv");
      expect_close(host(gsc, csc.size()), csc, 0, 0, what + " state score");
      CompressorArgs w = g;
      w.state_kv = wkv;
      w.state_score = wsc;
      w.out = poisoned(out.size() + 1);
      w.out_pos = poisoned_i32(opos.size());
      int64_t w_out = -1;
      w.n_out = &w_out;
      walk->compressor(w);
      ASSERT_TRUE(walk->sync().ok());
      EXPECT_EQ(w_out, g_out) << what;
      const auto got_rows = host(gout, out.size()), walk_rows = host(w.out, out.size());
      EXPECT_EQ(std::memcmp(got_rows.data(), walk_rows.data(), out.size() * 4), 0) << what << ": rows differ from the walk";
      EXPECT_EQ(host(w.out_pos, static_cast<size_t>(n_out)), gp) << what;
      EXPECT_EQ(host(wsc, csc.size()), host(gsc, csc.size())) << what << ": ring differs from the walk's";
      EXPECT_EQ(host(wkv, ckv.size()), host(gkv, ckv.size())) << what << ": ring differs from the walk's";
      pos0 += static_cast<int32_t>(n);
    }
  }
}

TEST_F(CudaOps, AttentionRawCompressedAndSelected) {
  struct S {
    int32_t heads, D, window, n_comp_rows, top_k;
  };
  // With tensor cores (the default) every shape runs the MMA order (attention_mma.cu; more cases, the
  // scalar segment order, and bit-identity across launch shapes, in test_cuda_attention.cpp); every case on a
  // backend without tensor cores runs attention_decode.cu's split-rows kernels (16 queries per launch).
  // Both are compared with the CPU: n = 4 and 40 (a prefill chunk) on every shape, and decode cases
  // n = 1, 2 including a query before the window is full (few rows: most splits empty).
  struct C {
    S s;
    int64_t n;
  };
  std::vector<C> cases;
  for (int64_t n : {int64_t{4}, int64_t{40}})
    for (S s : {S{64, 512, 128, 700, 512}, S{4, 256, 16, 40, 16}, S{64, 512, 128, 0, 0}, S{8, 64, 16, 90, 32}})
      cases.push_back({s, n});
  for (C c : {C{S{64, 512, 128, 700, 512}, 1}, C{S{64, 512, 128, 700, 512}, 2}, C{S{64, 512, 128, 3, 512}, 1},
              C{S{64, 128, 64, 50, 64}, 1}})
    cases.push_back(c);
  backend::cuda::CudaBackendOptions no_tc;
  no_tc.tensor_cores = false;
  auto split_made = backend::cuda::make_cuda_backend(no_tc);
  ASSERT_TRUE(split_made.ok());
  Backend& split_be = **split_made;
  for (C cs : cases) {
    const S s = cs.s;
    const int64_t n = cs.n;
    const int64_t cap = s.window + n - 1;
    std::vector<int32_t> pos(n);
    const int32_t base = s.n_comp_rows == 3 ? 5 : randint(0, 5000);  // 3 comp rows: early in the context
    for (int64_t i = 0; i < n; ++i) pos[i] = base + static_cast<int32_t>(i);
    auto q = randn(static_cast<size_t>(n * s.heads * s.D), 0.2f);
    auto raw = randn(static_cast<size_t>(cap * s.D));
    auto comp = randn(static_cast<size_t>(std::max(1, s.n_comp_rows) * s.D));
    auto sinks = randn(s.heads);
    std::vector<int32_t> count(n), idx(n * std::max(1, s.top_k));
    for (int64_t i = 0; i < n; ++i) {
      count[i] = std::min(s.n_comp_rows, s.top_k > 0 ? s.top_k : s.n_comp_rows) - static_cast<int32_t>(i);
      count[i] = std::max(0, count[i]);
      for (int32_t j = 0; j < count[i]; ++j) idx[i * s.top_k + j] = (j * 37 + static_cast<int32_t>(i)) % std::max(1, s.n_comp_rows);
    }
    for (bool selected : {false, true}) {
      if (s.n_comp_rows == 0 && selected) continue;
      AttentionArgs a;
      a.q = q.data();
      a.pos = pos.data();
      a.n = n;
      a.heads = s.heads;
      a.head_dim = s.D;
      a.scale = 1.0f / std::sqrt(static_cast<float>(s.D));
      a.sinks = sinks.data();
      a.raw = raw.data();
      a.raw_cap = cap;
      a.window = s.window;
      a.comp = s.n_comp_rows ? comp.data() : nullptr;
      a.comp_count = s.n_comp_rows ? count.data() : nullptr;
      a.comp_idx = selected ? idx.data() : nullptr;
      a.comp_idx_stride = s.top_k;
      std::vector<float> want(q.size());
      a.out = want.data();
      cpu_->attention(a);
      AttentionArgs g = a;
      g.q = dev(q);
      g.pos = dev(pos);
      g.sinks = dev(sinks);
      g.raw = dev(raw);
      g.comp = s.n_comp_rows ? dev(comp) : nullptr;
      g.comp_count = s.n_comp_rows ? dev(count) : nullptr;
      g.comp_idx = selected ? dev(idx) : nullptr;
      g.out = poisoned(want.size());
      gpu_->attention(g);
      ASSERT_TRUE(gpu_->sync().ok());
      AttentionArgs gs = g;
      gs.out = poisoned(want.size());
      split_be.attention(gs);
      ASSERT_TRUE(split_be.sync().ok());
      expect_close(host(gs.out, want.size()), want, 1e-5, 1e-7,
                   "attention split H" + std::to_string(s.heads) + " D" + std::to_string(s.D) + " comp " +
                       std::to_string(s.n_comp_rows) + (selected ? " selected" : "") + " n" + std::to_string(n));
      expect_close(host(g.out, want.size()), want, 1e-5, 1e-7,
                   "attention H" + std::to_string(s.heads) + " D" + std::to_string(s.D) + " comp " +
                       std::to_string(s.n_comp_rows) + (selected ? " selected" : "") + " n" + std::to_string(n));
    }
  }
}

TEST_F(CudaOps, IndexerSelectionIsExactIncludingTies) {
  struct S {
    int32_t heads, head_dim, top_k, rows;
  };
  // 13,000 rows: more keys than the radix select holds in shared memory (it reads the scores instead).
  for (S s : {S{64, 128, 512, 2048}, S{8, 128, 16, 40}, S{64, 128, 512, 400}, S{64, 128, 512, 13000}}) {
    const int64_t n = 5;
    auto q = randn(static_cast<size_t>(n * s.heads * s.head_dim));
    auto w = randn(static_cast<size_t>(n * s.heads));
    auto rows = randn(static_cast<size_t>(s.rows * s.head_dim));
    // Exact duplicates of earlier rows: equal scores, which must go to the lower id.
    for (int32_t c = s.rows * 2 / 3; c < s.rows; ++c)
      std::copy_n(rows.begin() + (c % 50) * s.head_dim, s.head_dim, rows.begin() + int64_t{c} * s.head_dim);
    std::vector<int32_t> nr(n);
    for (int64_t i = 0; i < n; ++i) nr[i] = std::max<int32_t>(1, s.rows - static_cast<int32_t>(i) * s.rows / 4);
    nr[n - 1] = std::min(s.top_k, s.rows);  // the no-scoring path
    std::vector<int32_t> idx(n * s.top_k, -7), cnt(n, -7);
    IndexerArgs a{q.data(), w.data(), rows.data(), nr.data(), n, s.heads, s.head_dim, s.top_k, idx.data(), cnt.data()};
    cpu_->indexer(a);
    // max_rows: 0 (the op reads the counts back), the exact bound, a loose bound (as the forward's).
    int64_t mismatches = 0;
    for (int64_t bound : {int64_t{0}, int64_t{s.rows}, int64_t{s.rows} + 77}) {
      int32_t* gidx = poisoned_i32(idx.size());
      int32_t* gcnt = poisoned_i32(cnt.size());
      IndexerArgs g{dev(q), dev(w), dev(rows), dev(nr), n, s.heads, s.head_dim, s.top_k, gidx, gcnt};
      g.max_rows = bound;
      gpu_->indexer(g);
      ASSERT_TRUE(gpu_->sync().ok());
      auto hi = host(gidx, idx.size());
      auto hc = host(gcnt, cnt.size());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(hc[i], cnt[i]) << "query " << i << " max_rows " << bound;
        for (int32_t j = 0; j < cnt[i]; ++j) mismatches += hi[i * s.top_k + j] != idx[i * s.top_k + j];
      }
    }
    EXPECT_EQ(mismatches, 0);
    std::printf("PARITY %-44s n=%-9d selected ids differing: %lld  %s\n",
                ("indexer IH" + std::to_string(s.heads) + " top" + std::to_string(s.top_k) + " rows " +
                 std::to_string(s.rows)).c_str(),
                s.top_k * static_cast<int>(n), static_cast<long long>(mismatches), mismatches ? "FAIL" : "ok");
  }
}

TEST_F(CudaOps, IndexerFlashShapesAt2KAnd32KExact) {
  // Flash: 64 heads × 128, top 512; query i of a call at context ctx sees (ctx + i + 1)/4 rows (2K: 512 … 1,024,
  // 32K: 8,192 …), with duplicated rows for ties. n = 1, 40, 2,048 (a prefill chunk). Every id of the call
  // against the previous kernels (CudaBackendOptions::indexer_v2 = false: bitwise select, one-head score
  // loop), and sampled queries against the CPU op (a whole chunk would take minutes on the CPU here).
  const int32_t IH = 64, ID = 128, TK = 512;
  cuda::CudaBackendOptions o;
  o.indexer_v2 = false;
  auto made = cuda::make_cuda_backend(o);
  ASSERT_TRUE(made.ok());
  auto v1 = std::move(made).value();
  for (int64_t ctx : {int64_t{2048}, int64_t{32768}}) {
    for (int64_t n : {int64_t{1}, int64_t{40}, int64_t{2048}}) {
      const int32_t total = static_cast<int32_t>((ctx + n) / 4);
      auto q = randn(static_cast<size_t>(n * IH * ID));
      auto w = randn(static_cast<size_t>(n * IH), 0.1f);
      auto rows = randn(static_cast<size_t>(int64_t{total} * ID));
      for (int32_t c = total - total / 8; c < total; ++c)  // ties: copies of earlier rows
        std::copy_n(rows.begin() + int64_t{c % 97} * ID, ID, rows.begin() + int64_t{c} * ID);
      std::vector<int32_t> nr(n);
      for (int64_t i = 0; i < n; ++i) nr[i] = static_cast<int32_t>((ctx + i + 1) / 4);
      IndexerArgs g{dev(q), dev(w), dev(rows), dev(nr), n, IH, ID, TK, poisoned_i32(n * TK), poisoned_i32(n)};
      g.max_rows = total;
      IndexerArgs g1 = g;
      g1.idx = poisoned_i32(n * TK);
      g1.count = poisoned_i32(n);
      gpu_->indexer(g);
      ASSERT_TRUE(gpu_->sync().ok());
      v1->indexer(g1);
      ASSERT_TRUE(v1->sync().ok());
      const auto idx = host(g.idx, n * TK), cnt = host(g.count, n);
      const auto idx1 = host(g1.idx, n * TK), cnt1 = host(g1.count, n);
      int64_t differ = 0;
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(cnt[i], cnt1[i]) << "query " << i;
        for (int32_t j = 0; j < cnt[i]; ++j) differ += idx[i * TK + j] != idx1[i * TK + j];
      }
      for (int64_t i : {int64_t{0}, n / 2, n - 1}) {
        std::vector<int32_t> want(TK, -7), wcnt(1, -7);
        IndexerArgs a{q.data() + i * IH * ID, w.data() + i * IH, rows.data(), nr.data() + i, 1, IH, ID, TK,
                      want.data(), wcnt.data()};
        cpu_->indexer(a);
        ASSERT_EQ(cnt[i], wcnt[0]) << "query " << i;
        for (int32_t j = 0; j < wcnt[0]; ++j) differ += idx[i * TK + j] != want[j];
      }
      EXPECT_EQ(differ, 0) << "ctx " << ctx << " n " << n;
      std::printf("PARITY %-44s n=%-9lld selected ids differing: %lld  %s\n",
                  ("indexer flash ctx" + std::to_string(ctx) + " n" + std::to_string(n)).c_str(),
                  static_cast<long long>(n * TK), static_cast<long long>(differ), differ ? "FAIL" : "ok");
    }
  }
}

TEST_F(CudaOps, RouterHashAndBiasedTopK) {
  const int32_t NE = 256, K = 6, vocab = 1000;
  const int64_t n = 17;
  auto z = randn(static_cast<size_t>(n * NE), 3.0f);
  auto bias = randn(NE, 0.1f);
  std::vector<int32_t> hash(vocab * K), tok(n);
  for (int32_t v = 0; v < vocab; ++v)
    for (int j = 0; j < K; ++j) hash[v * K + j] = (v * 13 + j * 41) % NE;
  for (auto& t : tok) t = randint(0, vocab - 1);
  for (int mode = 0; mode < 3; ++mode) {  // 0: top-k with bias, 1: top-k without, 2: hash
    RouterArgs a;
    a.logits = z.data();
    a.bias = mode == 0 ? bias.data() : nullptr;
    a.hash = mode == 2 ? hash.data() : nullptr;
    a.vocab = vocab;
    a.tokens = tok.data();
    a.n = n;
    a.n_expert = NE;
    a.k = K;
    a.scale = 1.5f;
    a.denom_guard = 1.0f / 16384;
    std::vector<int32_t> ids(n * K);
    std::vector<float> wts(n * K);
    a.ids = ids.data();
    a.weights = wts.data();
    cpu_->router(a);
    RouterArgs g = a;
    g.logits = dev(z);
    g.bias = mode == 0 ? dev(bias) : nullptr;
    g.hash = mode == 2 ? dev(hash) : nullptr;
    g.tokens = dev(tok);
    g.ids = poisoned_i32(ids.size());
    g.weights = poisoned(wts.size());
    gpu_->router(g);
    ASSERT_TRUE(gpu_->sync().ok());
    EXPECT_EQ(host(g.ids, ids.size()), ids) << "mode " << mode;
    expect_close(host(g.weights, wts.size()), wts, 1e-6, 1e-7, "router NE256 k6 mode " + std::to_string(mode));
  }
}

TEST_F(CudaOps, TransfersAndFill) {
  auto v = randn(1000);
  float* a = dev(v);
  float* b = poisoned(1000);
  gpu_->copy(b, a, 1000 * 4);
  EXPECT_EQ(host(b, 1000), v);
  gpu_->fill_f32(b, -INFINITY, 500);
  auto h = host(b, 1000);
  for (int i = 0; i < 500; ++i) ASSERT_EQ(h[i], -INFINITY);
  for (int i = 500; i < 1000; ++i) ASSERT_EQ(h[i], v[i]);
  EXPECT_TRUE(gpu_->sync().ok());
  const auto st = backend::cuda::weight_upload_stats(*gpu_);
  EXPECT_EQ(st.tensors, 0u);
}

TEST_F(CudaOps, WeightUploadThroughTheStagingRing) {
  // map_weight copies through pinned slots on a copy stream (4 MiB, grown to 64 MiB for a larger piece:
  // slot 0 grows while its first copy may still run); ops queued after it (here a device copy on the
  // compute stream, before any sync) must see every byte, across slot boundaries and odd sizes.
  const uint64_t sizes[] = {1000003, 4096, (150ull << 20) + 17, 4096};
  std::vector<std::vector<uint8_t>> src;
  std::vector<const void*> dst;
  std::mt19937_64 r(42);
  for (uint64_t n : sizes) {
    std::vector<uint8_t> h(n);
    for (auto& b : h) b = static_cast<uint8_t>(r());
    auto p = gpu_->map_weight(h.data(), n);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    dst.push_back(*p);
    src.push_back(std::move(h));
  }
  for (size_t i = 0; i < src.size(); ++i) {
    auto b = gpu_->alloc(src[i].size(), MemCategory::scratch);
    ASSERT_TRUE(b.ok());
    gpu_->copy(b->data(), dst[i], src[i].size());
    auto back = host(static_cast<const uint8_t*>(b->data()), src[i].size());
    ASSERT_TRUE(back == src[i]) << "tensor " << i << " of " << src[i].size() << " bytes";
  }
  ASSERT_TRUE(gpu_->sync().ok());
  const auto st = backend::cuda::weight_upload_stats(*gpu_);
  EXPECT_EQ(st.tensors, 4u);
  EXPECT_EQ(st.bytes, sizes[0] + sizes[1] + sizes[2] + sizes[3]);
  EXPECT_GT(st.seconds, 0.0);
  std::printf("upload: %.1f MB in %.3f s = %.2f GB/s (from a heap vector)\n", st.bytes / 1e6, st.seconds, st.gb_per_s());
}
