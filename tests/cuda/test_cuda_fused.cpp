// test_cuda_fused.cpp — the fused decode ops (backend.h HcPreArgs, NormRopeArgs, HcPostArgs::f_add) on
// CUDA: bit for bit equal to the CUDA pieces they replace (the single ops, run in backend.h's order),
// and close to the CPU reference op (which runs the CPU pieces), at the Flash shapes and tiny/odd ones;
// also the router's warp-per-token top-k against the CPU and the previous kernel (exact ids),
// n = 1, 2, 8, 40 (HC pre: n = 1, 2, 5, 8, 32 take the spread kernels — n = 1 with each block's own norm
// scale —, 40 and 80 the norm + matmul path; each case also bit for bit against the previous kernels,
// CudaBackendOptions::hc_router_v2 = false: one norm + controls kernel up to 8 tokens). The session-6
// kernels (CudaBackendOptions::small_v3, default: the rank top-k, the register finish of HC pre, the
// register/shared-memory norms) bit for bit against the kernels before them (small_v3 = false); HC pre in
// the F16 MMA order (CudaBackendOptions::f16_mma: hc_seg_mma_kernel) ≡ its own pieces, mix within 2e-5 of the CPU.
// Tolerances vs the CPU: the HC controls are an F16 matmul (2e-5·max|mix|, README.md's segment order vs
// the CPU's sequential sum), and split/collapse/norm follow them (1e-3 of max|ref|: Sinkhorn's expf and
// divisions on controls that differ in the last bits); norm + RoPE to 1e-6 as their single-op tests
// (without the FP8/half rounding, whose steps a last-bit difference can flip — those are checked
// bit for bit against the CUDA pieces, and the pieces against the CPU in test_cuda_ops.cpp).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <tuple>
#include <utility>

#include "backend/by_pieces.h"
#include "backend/cuda/cuda_backend.h"
#include "cuda_test_util.h"
#include "indexer_qat_cases.h"

using namespace ds4;
using namespace ds4::backend;
using namespace ds4::test;

using CudaFused = CudaOpsTest;

TEST_F(CudaFused, HcPreEqualsPiecesAndCpu) {
  struct S {
    int32_t nhc;
    int64_t dim;
  };
  // Flash (4 × 4096: 1024-thread norm of the 16384-wide state), tiny (4 × 64), odd (3 × 52: 156 columns,
  // not a multiple of 8, so the narrow loads and a partial segment).
  cuda::CudaBackendOptions po;
  po.hc_router_v2 = false;
  auto made = cuda::make_cuda_backend(po);
  ASSERT_TRUE(made.ok());
  Backend& prev = **made;  // the previous kernels, on this test's device buffers
  cuda::CudaBackendOptions no;
  no.hc_pdl = false;
  auto made_no = cuda::make_cuda_backend(no);
  ASSERT_TRUE(made_no.ok());
  Backend& plain = **made_no;  // the spread kernels in plain stream order (no programmatic dependent launch)
  cuda::CudaBackendOptions o2;
  o2.small_v3 = false;
  auto made_v2 = cuda::make_cuda_backend(o2);
  ASSERT_TRUE(made_v2.ok());
  Backend& v2 = **made_v2;  // the finish kernel before small_v3
  cuda::CudaBackendOptions om;
  om.f16_mma = true;
  auto made_mma = cuda::make_cuda_backend(om);
  ASSERT_TRUE(made_mma.ok());
  Backend& mma = **made_mma;  // the F16 MMA order (hc_seg_mma_kernel): ≡ its own pieces, close to the CPU
  for (S s : {S{4, 4096}, S{4, 64}, S{3, 52}})
    for (int64_t n : {1, 2, 5, 8, 32, 40, 80}) {
      if ((n == 80 || n == 5) && s.dim != 4096) continue;
      const int64_t hcd = s.nhc * s.dim, mix = (2 + s.nhc) * s.nhc;
      const std::string tag = "hc_pre " + std::to_string(s.nhc) + "x" + std::to_string(s.dim) + " n" + std::to_string(n);
      Weight fn;
      auto fn_bytes = random_weight(GgmlType::F16, mix, hcd, &fn, 0.01f);
      fn.data = fn_bytes.data();
      auto x = randn(static_cast<size_t>(n * hcd));
      auto scale = randn(3, 0.5f);
      auto base = randn(static_cast<size_t>(mix), 0.5f);
      auto norm_w = randn(static_cast<size_t>(s.dim));
      HcPreArgs c;
      c.fn = fn;
      c.n = n;
      c.dim = s.dim;
      c.nhc = s.nhc;
      std::vector<float> flat(n * hcd), m(n * mix), pre(n * s.nhc), post(n * s.nhc), comb(n * s.nhc * s.nhc),
          y(n * s.dim), xn(n * s.dim);
      HcPreArgs a = c;
      a.x = x.data();
      a.scale = scale.data();
      a.base = base.data();
      a.norm_w = norm_w.data();
      a.flat = flat.data();
      a.mix = m.data();
      a.pre = pre.data();
      a.post = post.data();
      a.comb = comb.data();
      a.y = y.data();
      a.xn = xn.data();
      cpu_->hc_pre(a);

      HcPreArgs g = c;
      g.fn = gpu_weight(fn, fn_bytes.size());
      g.x = dev(x);
      g.scale = dev(scale);
      g.base = dev(base);
      g.norm_w = dev(norm_w);
      // the pieces, the previous kernels, no PDL, v2, split = false then hc_split, the MMA order and its
      // pieces: own outputs
      HcPreArgs gp = g, gv = g, gn = g, g2 = g, gs = g, gm = g, gmp = g;
      gs.split = false;
      for (HcPreArgs* o : {&g, &gp, &gv, &gn, &g2, &gs, &gm, &gmp}) {
        o->flat = poisoned(flat.size());
        o->mix = poisoned(m.size());
        o->pre = poisoned(pre.size());
        o->post = poisoned(post.size());
        o->comb = poisoned(comb.size());
        o->y = poisoned(y.size());
        o->xn = poisoned(xn.size());
      }
      gpu_->hc_pre(g);
      hc_pre_by_pieces(*gpu_, gp);
      ASSERT_TRUE(gpu_->sync().ok()) << tag;
      prev.hc_pre(gv);
      ASSERT_TRUE(prev.sync().ok()) << tag;
      plain.hc_pre(gn);
      ASSERT_TRUE(plain.sync().ok()) << tag;
      v2.hc_pre(g2);
      ASSERT_TRUE(v2.sync().ok()) << tag;
      gpu_->hc_pre(gs);  // mix, pre, y, xn; then post and comb (and pre again) from mix, as the forward pass does
      ASSERT_TRUE(gpu_->sync().ok()) << tag;
      expect_same_bits(host(gs.pre, pre.size()), host(g.pre, pre.size()), tag + " pre before split (split off)");
      gpu_->hc_split({gs.mix, gs.scale, gs.base, n, s.nhc, gs.iters, gs.hc_eps, gs.pre, gs.post, gs.comb});
      ASSERT_TRUE(gpu_->sync().ok()) << tag;
      for (auto [got, want, len, what] :
           {std::tuple{gs.mix, g.mix, m.size(), "mix"}, std::tuple{gs.pre, g.pre, pre.size(), "pre"},
            std::tuple{gs.post, g.post, post.size(), "post"}, std::tuple{gs.comb, g.comb, comb.size(), "comb"},
            std::tuple{gs.y, g.y, y.size(), "y"}, std::tuple{gs.xn, g.xn, xn.size(), "xn"}})
        expect_same_bits(host(got, len), host(want, len), tag + " " + what + " split off + hc_split");
      mma.hc_pre(gm);
      hc_pre_by_pieces(mma, gmp);
      ASSERT_TRUE(mma.sync().ok()) << tag;
      for (auto [got, want, len, what] :
           {std::tuple{gm.mix, gmp.mix, m.size(), "mix"}, std::tuple{gm.pre, gmp.pre, pre.size(), "pre"},
            std::tuple{gm.post, gmp.post, post.size(), "post"}, std::tuple{gm.comb, gmp.comb, comb.size(), "comb"},
            std::tuple{gm.y, gmp.y, y.size(), "y"}, std::tuple{gm.xn, gmp.xn, xn.size(), "xn"}})
        expect_same_bits(host(got, len), host(want, len), tag + " " + what + " f16_mma vs its pieces");
      expect_close(host(gm.mix, m.size()), m, 2e-5, 0, tag + " mix f16_mma vs cpu");
      for (auto [got, want, len, what] :
           {std::tuple{g.mix, g2.mix, m.size(), "mix"}, std::tuple{g.pre, g2.pre, pre.size(), "pre"},
            std::tuple{g.post, g2.post, post.size(), "post"}, std::tuple{g.comb, g2.comb, comb.size(), "comb"},
            std::tuple{g.y, g2.y, y.size(), "y"}, std::tuple{g.xn, g2.xn, xn.size(), "xn"}})
        expect_same_bits(host(got, len), host(want, len), tag + " " + what + " vs small_v3 off");
      for (auto [got, want, len, what] :
           {std::tuple{g.mix, gv.mix, m.size(), "mix"}, std::tuple{g.pre, gv.pre, pre.size(), "pre"},
            std::tuple{g.post, gv.post, post.size(), "post"}, std::tuple{g.comb, gv.comb, comb.size(), "comb"},
            std::tuple{g.y, gv.y, y.size(), "y"}, std::tuple{g.xn, gv.xn, xn.size(), "xn"}})
        expect_same_bits(host(got, len), host(want, len), tag + " " + what + " vs previous kernels");
      for (auto [got, want, len, what] :
           {std::tuple{g.mix, gn.mix, m.size(), "mix"}, std::tuple{g.comb, gn.comb, comb.size(), "comb"},
            std::tuple{g.xn, gn.xn, xn.size(), "xn"}})
        expect_same_bits(host(got, len), host(want, len), tag + " " + what + " vs no PDL");
      expect_same_bits(host(g.mix, m.size()), host(gp.mix, m.size()), tag + " mix");
      expect_same_bits(host(g.pre, pre.size()), host(gp.pre, pre.size()), tag + " pre");
      expect_same_bits(host(g.post, post.size()), host(gp.post, post.size()), tag + " post");
      expect_same_bits(host(g.comb, comb.size()), host(gp.comb, comb.size()), tag + " comb");
      expect_same_bits(host(g.xn, xn.size()), host(gp.xn, xn.size()), tag + " xn");
      expect_close(host(g.mix, m.size()), m, 2e-5, 0, tag + " mix vs cpu");
      expect_close(host(g.pre, pre.size()), pre, 1e-3, 1e-6, tag + " pre vs cpu");
      expect_close(host(g.post, post.size()), post, 1e-3, 1e-6, tag + " post vs cpu");
      expect_close(host(g.comb, comb.size()), comb, 1e-3, 1e-6, tag + " comb vs cpu");
      expect_close(host(g.xn, xn.size()), xn, 1e-3, 0, tag + " xn vs cpu");
    }
}

TEST_F(CudaFused, NormRopeEqualsPiecesAndCpu) {
  cuda::CudaBackendOptions o2;
  o2.small_v3 = false;
  auto made_v2 = cuda::make_cuda_backend(o2);
  ASSERT_TRUE(made_v2.ok());
  Backend& v2 = **made_v2;  // norm_rope_kernel (before small_v3)
  struct S {
    const char* name;
    int32_t heads, head_dim, n_rot, fp8;
    bool weighted, f16, ring;
  };
  // Flash q (64 heads, unweighted), Flash kv (FP8 448 dims, half rounding, raw ring), Flash indexer
  // compressor rows (D 128), tiny kv (2 heads of 64, 16 RoPE dims, ring).
  for (S s : {S{"q H64 D512", 64, 512, 64, 0, false, false, false}, S{"kv D512 fp8 f16 ring", 1, 512, 64, 448, true, true, true},
              S{"idx D128", 1, 128, 64, 0, true, false, false}, S{"tiny H2 D64 ring", 2, 64, 16, 0, true, true, true}})
    for (int64_t n : {1, 2, 8, 32, 40, 64}) {
      if (n == 64 && s.heads != 64) continue;  // 4,096 rows: small_v3's warp-per-row kernel (prefill-sized calls)
      const std::string tag = std::string("norm_rope ") + s.name + " n" + std::to_string(n);
      const int64_t width = int64_t{s.heads} * s.head_dim, cap = 37;  // rings wrap at the random starts
      auto x = randn(static_cast<size_t>(n * width), 2.0f);
      auto w = randn(static_cast<size_t>(s.head_dim));
      // Two sessions, as a batched step has them: token t belongs to session t % 2, whose positions are
      // consecutive from a random start (so no two tokens of one ring share a row: ≤ 20 per 37-row ring).
      const int32_t start[2] = {randint(0, 1 << 20), 5};
      std::vector<int32_t> pos(n);
      for (int64_t t = 0; t < n; ++t) pos[t] = start[t % 2] + static_cast<int32_t>(t / 2);
      std::vector<double> freq(s.n_rot / 2);
      for (size_t i = 0; i < freq.size(); ++i) freq[i] = std::pow(10000.0, -2.0 * i / s.n_rot);

      // CPU reference without the rounding steps (see the header), rings on the host.
      std::vector<float> want = x, ring0(cap * width, 0.0f), ring1(cap * width, 0.0f);
      std::vector<float*> host_at(n);
      for (int64_t t = 0; t < n; ++t) host_at[t] = t % 2 ? ring1.data() : ring0.data();
      NormRopeArgs c{want.data(), pos.data(), n, s.heads, s.head_dim, s.n_rot, s.weighted ? w.data() : nullptr, 1e-6f,
                     freq.data()};
      if (s.ring) {
        c.ring_at = host_at.data();
        c.ring_cap = cap;
      }
      cpu_->norm_rope(c);

      // CUDA: fused and pieces, with and without the rounding steps.
      for (bool rounding : {false, true}) {
        const int32_t* gpos = dev(pos);
        const float* gw = s.weighted ? dev(w) : nullptr;
        float *gx = dev(x), *px = dev(x);
        std::vector<float> zeros(cap * width, 0.0f);
        float *r0 = dev(zeros), *r1 = dev(zeros), *p0 = dev(zeros), *p1 = dev(zeros);
        std::vector<float*> at(n);
        for (int64_t t = 0; t < n; ++t) at[t] = t % 2 ? r1 : r0;
        NormRopeArgs g{gx, gpos, n, s.heads, s.head_dim, s.n_rot, gw, 1e-6f, freq.data()};
        if (rounding) {
          g.fp8_quant = s.fp8;
          g.f16 = s.f16;
        }
        if (s.ring) {
          g.ring_at = dev(at);
          g.ring_cap = cap;
        }
        gpu_->norm_rope(g);
        NormRopeArgs g2 = g;  // the same call on v2, on its own rows and rings
        float *vx = dev(x), *v0 = dev(zeros), *v1 = dev(zeros);
        g2.x = vx;
        if (s.ring) {
          std::vector<float*> vat(n);
          for (int64_t t = 0; t < n; ++t) vat[t] = t % 2 ? v1 : v0;
          g2.ring_at = dev(vat);
        }
        ASSERT_TRUE(gpu_->sync().ok()) << tag;  // uploads run on gpu_'s stream; v2 has its own
        v2.norm_rope(g2);
        ASSERT_TRUE(v2.sync().ok()) << tag;
        const int64_t rows = n * s.heads;
        gpu_->rms_norm({px, px, gw, rows, s.head_dim, s.head_dim, 1e-6f});
        gpu_->rope({px, gpos, n, s.heads, s.head_dim, s.n_rot, freq.data(), false});
        if (g.fp8_quant > 0) gpu_->fp8_round({px, rows, s.head_dim, g.fp8_quant});
        if (g.f16) gpu_->f16_round(px, rows * s.head_dim);
        if (s.ring)
          for (int64_t t = 0; t < n; ++t)
            gpu_->copy((t % 2 ? p1 : p0) + (pos[t] % cap) * width, px + t * width, static_cast<uint64_t>(width) * 4);
        ASSERT_TRUE(gpu_->sync().ok()) << tag;
        const std::string rt = tag + (rounding ? " rounded" : "");
        expect_same_bits(host(gx, x.size()), host(px, x.size()), rt + " rows");
        expect_same_bits(host(gx, x.size()), host(vx, x.size()), rt + " rows vs small_v3 off");
        if (s.ring) {
          expect_same_bits(host(r0, zeros.size()), host(v0, zeros.size()), rt + " ring 0 vs small_v3 off");
          expect_same_bits(host(r1, zeros.size()), host(v1, zeros.size()), rt + " ring 1 vs small_v3 off");
          expect_same_bits(host(r0, zeros.size()), host(p0, zeros.size()), rt + " ring 0");
          expect_same_bits(host(r1, zeros.size()), host(p1, zeros.size()), rt + " ring 1");
        }
        if (!rounding) {
          expect_close(host(gx, x.size()), want, 1e-6, 1e-6, tag + " vs cpu");
          if (s.ring) {
            expect_close(host(r0, zeros.size()), ring0, 1e-6, 1e-6, tag + " ring 0 vs cpu");
            expect_close(host(r1, zeros.size()), ring1, 1e-6, 1e-6, tag + " ring 1 vs cpu");
          }
        }
      }
    }
}

TEST_F(CudaFused, NormRopeLoadsFirstEqualsDefault) {
  // CudaBackendOptions::norm_rope_loads_first: the prefill warp-per-row kernel with each row's loads before
  // the RoPE angles gives the default's bits — Flash q (64 tokens × 64 heads × 512, unweighted) and a
  // kv-like call (4,160 tokens × 1 head, FP8 448, half rounding, one ring that wraps).
  cuda::CudaBackendOptions o;
  o.norm_rope_loads_first = 1;
  auto made = cuda::make_cuda_backend(o);
  ASSERT_TRUE(made.ok());
  Backend& lf = **made;
  struct S {
    int64_t n;
    int32_t heads, fp8;
    bool weighted_f16_ring;
  };
  for (S s : {S{64, 64, 0, false}, S{4160, 1, 448, true}}) {
    const std::string tag = "norm_rope loads first n" + std::to_string(s.n) + " H" + std::to_string(s.heads);
    const int64_t width = int64_t{s.heads} * 512, cap = 4200;  // > n: every token its own row
    const auto x = randn(static_cast<size_t>(s.n * width), 2.0f);
    const auto w = randn(512);
    std::vector<int32_t> pos(s.n);
    for (int64_t t = 0; t < s.n; ++t) pos[t] = 1000 + static_cast<int32_t>(t);
    std::vector<double> freq(32);
    for (size_t i = 0; i < freq.size(); ++i) freq[i] = std::pow(10000.0, -2.0 * i / 64);
    std::vector<float> ring(s.weighted_f16_ring ? cap * width : 1, 0.0f);
    std::vector<std::vector<float>> out;
    for (Backend* be : {gpu_.get(), &lf}) {
      float* gx = dev(x);
      float* gr = dev(ring);
      NormRopeArgs a{gx, dev(pos), s.n, s.heads, 512, 64, s.weighted_f16_ring ? dev(w) : nullptr, 1e-6f, freq.data()};
      a.fp8_quant = s.fp8;
      a.f16 = s.weighted_f16_ring;
      if (s.weighted_f16_ring) {
        a.ring = gr;
        a.ring_cap = cap;
      }
      ASSERT_TRUE(gpu_->sync().ok()) << tag;  // uploads run on gpu_'s stream
      be->norm_rope(a);
      ASSERT_TRUE(be->sync().ok()) << tag;
      out.push_back(host(gx, x.size()));
      out.push_back(host(gr, ring.size()));
    }
    expect_same_bits(out[2], out[0], tag + " rows");
    expect_same_bits(out[3], out[1], tag + " ring");
  }
}

TEST_F(CudaFused, NormRopeOneRingAndBadArguments) {
  // One ring for every token (a single session's step) and rejected arguments.
  const int64_t n = 3, D = 128, cap = 8;
  auto x = randn(static_cast<size_t>(n * D));
  std::vector<int32_t> pos = {6, 7, 8};  // rows 6, 7, 0
  std::vector<double> freq(32, 0.01);
  std::vector<float> want = x, ring(cap * D, 0.0f);
  cpu_->norm_rope({want.data(), pos.data(), n, 1, D, 64, nullptr, 1e-6f, freq.data(), 0, false, ring.data(), nullptr, cap});
  std::vector<float> zeros(cap * D, 0.0f);
  float *gx = dev(x), *gring = dev(zeros);
  gpu_->norm_rope({gx, dev(pos), n, 1, D, 64, nullptr, 1e-6f, freq.data(), 0, false, gring, nullptr, cap});
  ASSERT_TRUE(gpu_->sync().ok());
  expect_close(host(gring, zeros.size()), ring, 1e-6, 1e-6, "norm_rope one ring");
  gpu_->norm_rope({gx, dev(pos), n, 1, D, 64, nullptr, 1e-6f, freq.data(), 32, false, nullptr, nullptr, 0});
  EXPECT_FALSE(gpu_->sync().ok()) << "fp8_quant 32 is not a multiple of 64";
}

// The ops finishing a recorded step's emitted rows (forward.cpp compress()): norm_rope and indexer_qat
// on rows taken by address (x_at) with a device count over an n-row bound — bit for bit the plain
// calls on the same rows laid out contiguously, rows past the count and between the addressed rows
// untouched; count 0 touches nothing. Flash shapes: compressed rows D512 (FP8 448, half) and indexer
// rows D128 (half rounding on the FP4 op).
TEST_F(CudaFused, EmittedRowsByAddressAndDeviceCount) {
  const int64_t n = 6;
  for (int32_t D : {512, 128})
    for (int32_t count : {0, 2, 6}) {
      const std::string tag = "emitted rows D" + std::to_string(D) + " count " + std::to_string(count);
      const auto src = randn(static_cast<size_t>(3 * n * D), 2.0f);  // row t at 3t + 2
      const auto w = randn(static_cast<size_t>(D));
      std::vector<int32_t> pos(n);
      for (int64_t t = 0; t < n; ++t) pos[t] = randint(0, 1 << 20) * 4;
      std::vector<double> freq(32);
      for (size_t i = 0; i < freq.size(); ++i) freq[i] = std::pow(10000.0, -2.0 * static_cast<double>(i) / 64);
      std::vector<float> contiguous(static_cast<size_t>(n * D));
      for (int64_t t = 0; t < n; ++t) std::copy_n(src.begin() + (3 * t + 2) * D, D, contiguous.begin() + t * D);
      float *gs = dev(src), *gc = dev(contiguous);
      std::vector<float*> at(n);
      for (int64_t t = 0; t < n; ++t) at[t] = gs + (3 * t + 2) * D;
      const int32_t* gpos = dev(pos);
      const float* gw = dev(w);
      NormRopeArgs a{nullptr, gpos, n, 1, D, 64, gw, 1e-6f, freq.data()};
      a.fp8_quant = D == 512 ? 448 : 0;
      a.f16 = D == 512;
      a.x_at = dev(at);
      a.count = dev(std::vector<int32_t>{count});
      gpu_->norm_rope(a);
      NormRopeArgs p = a;
      p.x = gc;
      p.n = count;
      p.x_at = nullptr;
      p.count = nullptr;
      gpu_->norm_rope(p);
      if (D == 128) {
        IndexerQatArgs q{nullptr, n, D, true};
        q.x_at = a.x_at;
        q.count = a.count;
        gpu_->indexer_qat(q);
        gpu_->indexer_qat({gc, count, D});
        gpu_->f16_round(gc, count * D);
      }
      ASSERT_TRUE(gpu_->sync().ok()) << tag;
      const auto got = host(gs, src.size()), plain = host(gc, contiguous.size());
      std::vector<float> want = src;
      for (int64_t t = 0; t < count; ++t) std::copy_n(plain.begin() + t * D, D, want.begin() + (3 * t + 2) * D);
      expect_same_bits(got, want, tag);
    }
}

// IndexerQatArgs::n_rot (CudaBackendOptions::small_v4): the indexer query's RoPE inside the QAT kernel (and,
// scale_x, its head weights' scale in extra blocks of the same launch),
// bit for bit the pieces (rope, then indexer_qat) on this backend and the whole op on a small_v4-off one
// (which runs the pieces); the pieces are checked against the CPU in test_cuda_ops.cpp (a last-bit
// difference of the double cos/sin could flip an FP4 step, so no tolerance check here). Flash (64 heads of
// 128, 64 RoPE dims, half rounding), tiny (2 × 64, 16 dims) and a row rotated whole (3 × 32, 32 dims).
TEST_F(CudaFused, IndexerRopeQatEqualsPieces) {
  cuda::CudaBackendOptions o4;
  o4.small_v4 = false;
  auto made = cuda::make_cuda_backend(o4);
  ASSERT_TRUE(made.ok());
  Backend& v3 = **made;
  for (RopeQatShape s : kRopeQatShapes)
    for (int64_t n : {1, 2, 8, 32}) {
      const RopeQatCase c = make_rope_qat_case(
          s, n, [&](size_t k, float sd) { return randn(k, sd); }, [&](int32_t lo, int32_t hi) { return randint(lo, hi); });
      const std::string& tag = c.tag;
      float *fused = dev(c.x), *pieces = dev(c.x), *off = dev(c.x);
      // The head weights' scale in the same op (the forward pass's [n][heads] weights) on the f16 cases.
      float *wf = dev(c.wts), *wp = dev(c.wts), *wo = dev(c.wts);
      const IndexerQatArgs q = rope_qat_args(c, fused, dev(c.pos), s.f16 ? wf : nullptr);
      gpu_->indexer_qat(q);
      IndexerQatArgs qp = q;
      qp.x = pieces;
      if (s.f16) qp.scale_x = wp;
      indexer_qat_by_pieces(*gpu_, qp);
      ASSERT_TRUE(gpu_->sync().ok()) << tag;
      IndexerQatArgs qo = q;
      qo.x = off;
      if (s.f16) qo.scale_x = wo;
      v3.indexer_qat(qo);
      ASSERT_TRUE(v3.sync().ok()) << tag;
      const auto got = host(fused, c.x.size());
      expect_same_bits(got, host(pieces, c.x.size()), tag + " vs pieces");
      expect_same_bits(got, host(off, c.x.size()), tag + " vs small_v4 off");
      if (s.f16) {
        const auto gw = host(wf, c.wts.size());
        expect_same_bits(gw, host(wp, c.wts.size()), tag + " weights scale vs pieces");
        expect_same_bits(gw, host(wo, c.wts.size()), tag + " weights scale vs small_v4 off");
      }
    }
}

TEST_F(CudaFused, HcPostWithResidualAddEqualsAddThenPost) {
  // small_v3's thread per 4 dims (dim % 4 == 0) and the thread per value (dim 54), both exact with the CPU;
  // nhc 3 takes the kernel's runtime-nhc form.
  for (int32_t nhc : {4, 3})
    for (int64_t dim : {4096, 64, 54})
      for (int64_t n : {1, 2, 8, 32, 40}) {
        if (nhc == 3 && dim == 4096 && n > 8) continue;
        const std::string tag =
            "hc_post + add " + std::to_string(nhc) + "x" + std::to_string(dim) + " n" + std::to_string(n);
        auto x = randn(static_cast<size_t>(n * nhc * dim));
        auto f = randn(static_cast<size_t>(n * dim));
        auto fa = randn(static_cast<size_t>(n * dim));
        auto post = randn(static_cast<size_t>(n * nhc));
        auto comb = randn(static_cast<size_t>(n * nhc * nhc));
        std::vector<float> want(x.size());
        HcPostArgs c{x.data(), f.data(), post.data(), comb.data(), want.data(), n, dim, nhc};
        c.f_add = fa.data();
        cpu_->hc_post(c);
        float *gx = dev(x), *gf = dev(f), *gfa = dev(fa), *gpost = dev(post), *gcomb = dev(comb);
        float *out = poisoned(x.size()), *ref = poisoned(x.size());
        HcPostArgs g{gx, gf, gpost, gcomb, out, n, dim, nhc};
        g.f_add = gfa;
        gpu_->hc_post(g);
        gpu_->add(gf, gfa, n * dim);  // the pieces: f += f_add, then the plain post
        gpu_->hc_post({gx, gf, gpost, gcomb, ref, n, dim, nhc});
        ASSERT_TRUE(gpu_->sync().ok()) << tag;
        expect_same_bits(host(out, x.size()), host(ref, x.size()), tag);
        expect_close(host(out, x.size()), want, 0, 0, tag + " vs cpu");
      }
}

TEST_F(CudaFused, RouterWarpKernelEqualsPreviousAndCpu) {
  // The router's warp-per-token top-k (default) against the CPU op (ids exactly, weights to the device
  // expf/log1pf) and the previous block-per-token kernel (CudaBackendOptions::hc_router_v2 = false: ids
  // and weights bit for bit), at Flash's 256 experts / top-6 and a 64-expert / top-4 shape. Modes: biased
  // top-k, plain top-k, hash routing, ties (logits on a coarse grid, no bias: equal scores, the lower id
  // wins), NaN logits (on expert 0 of even tokens: the CPU's loop keeps its first untaken expert when that
  // value is NaN; elsewhere NaN never wins).
  cuda::CudaBackendOptions po;
  po.hc_router_v2 = false;
  auto made = cuda::make_cuda_backend(po);
  ASSERT_TRUE(made.ok());
  Backend& prev = **made;
  cuda::CudaBackendOptions o2;
  o2.small_v3 = false;
  auto made_v2 = cuda::make_cuda_backend(o2);
  ASSERT_TRUE(made_v2.ok());
  Backend& v2 = **made_v2;  // the warp-per-token kernel (before small_v3's rank kernel)
  const int32_t vocab = 1000;
  const char* const modes[] = {"biased", "plain", "hash", "ties", "nan"};
  // 100 / top-8: a last warp of 4 experts, fewer than k (rank kernel: 28 candidates).
  for (auto [NE, K] : {std::pair{256, 6}, std::pair{64, 4}, std::pair{100, 8}})
    for (int64_t n : {1, 2, 5, 8, 32})
      for (int mode = 0; mode < 5; ++mode) {
        const std::string tag = "router NE" + std::to_string(NE) + " k" + std::to_string(K) + " n" +
                                std::to_string(n) + " " + modes[mode];
        auto z = randn(static_cast<size_t>(n * NE), 3.0f);
        if (mode == 3)
          for (float& v : z) v = std::round(v * 2.0f) / 2.0f;  // many equal logits
        if (mode == 4)
          for (int64_t t = 0; t < n; ++t) {
            if (t % 2 == 0) z[t * NE] = NAN;
            z[t * NE + randint(1, NE - 1)] = NAN;
          }
        auto bias = randn(static_cast<size_t>(NE), 0.1f);
        std::vector<int32_t> hash(static_cast<size_t>(vocab * K)), tok(n);
        for (int32_t v = 0; v < vocab; ++v)
          for (int j = 0; j < K; ++j) hash[v * K + j] = (v * 13 + j * 41) % NE;
        for (auto& t : tok) t = randint(0, vocab - 1);
        RouterArgs a;
        a.bias = mode == 0 || mode == 4 ? bias.data() : nullptr;
        a.hash = mode == 2 ? hash.data() : nullptr;
        a.vocab = vocab;
        a.n = n;
        a.n_expert = NE;
        a.k = K;
        a.scale = 1.5f;
        a.denom_guard = 1.0f / 16384;
        std::vector<int32_t> ids(n * K);
        std::vector<float> wts(n * K);
        a.logits = z.data();
        a.tokens = tok.data();
        a.ids = ids.data();
        a.weights = wts.data();
        cpu_->router(a);
        RouterArgs g = a;
        g.logits = dev(z);
        g.bias = a.bias ? dev(bias) : nullptr;
        g.hash = a.hash ? dev(hash) : nullptr;
        g.tokens = dev(tok);
        g.ids = poisoned_i32(ids.size());
        g.weights = poisoned(wts.size());
        RouterArgs gv = g;
        gv.ids = poisoned_i32(ids.size());
        gv.weights = poisoned(wts.size());
        gpu_->router(g);
        ASSERT_TRUE(gpu_->sync().ok()) << tag;
        prev.router(gv);
        ASSERT_TRUE(prev.sync().ok()) << tag;
        RouterArgs g2 = g;
        g2.ids = poisoned_i32(ids.size());
        g2.weights = poisoned(wts.size());
        ASSERT_TRUE(gpu_->sync().ok()) << tag;  // the poison fills run on gpu_'s stream; v2 has its own
        v2.router(g2);
        ASSERT_TRUE(v2.sync().ok()) << tag;
        EXPECT_EQ(host(g.ids, ids.size()), host(g2.ids, ids.size())) << tag << " ids vs small_v3 off";
        expect_same_bits(host(g.weights, wts.size()), host(g2.weights, wts.size()), tag + " weights vs small_v3 off");
        const auto got_ids = host(g.ids, ids.size());
        EXPECT_EQ(got_ids, ids) << tag << " ids vs cpu";
        EXPECT_EQ(got_ids, host(gv.ids, ids.size())) << tag << " ids vs previous kernel";
        std::printf("PARITY %-44s n=%-9zu ids == cpu and previous: %s\n", tag.c_str(), ids.size(),
                    got_ids == ids && got_ids == host(gv.ids, ids.size()) ? "ok" : "FAIL");
        expect_same_bits(host(g.weights, wts.size()), host(gv.weights, wts.size()), tag + " weights vs previous");
        // With a NaN score the CPU's std::max(sum, guard) keeps the NaN where the device's fmaxf takes the
        // guard (both kernels): the weights are compared with the CPU only without NaNs.
        if (mode != 4) expect_close(host(g.weights, wts.size()), wts, 1e-6, 1e-7, tag + " weights vs cpu");
      }
}

TEST_F(CudaFused, RmsNormRowsEqualPreviousKernelAndCpu) {
  // rms_norm with small_v3 (rows ≤ 4 values per thread in registers, programmatic dependent) against the
  // kernel before it (small_v3 = false) bit for bit and the CPU to 1e-6: q_a's 1024-wide norm and others,
  // 1, 2, 8, 32 rows, weighted or not, in place (as the forward pass) and out of place with a stride.
  cuda::CudaBackendOptions o2;
  o2.small_v3 = false;
  auto made_v2 = cuda::make_cuda_backend(o2);
  ASSERT_TRUE(made_v2.ok());
  Backend& v2 = **made_v2;
  for (int64_t dim : {64, 100, 512, 1024, 4096})
    for (int64_t rows : {1, 2, 8, 32})
      for (bool weighted : {false, true})
        for (bool in_place : {true, false}) {
          const std::string tag = "rms_norm dim " + std::to_string(dim) + " rows " + std::to_string(rows) +
                                  (weighted ? " w" : "") + (in_place ? " in place" : "");
          const int64_t stride = in_place ? dim : dim + 4;
          auto x = randn(static_cast<size_t>(rows * stride), 3.0f);
          auto w = randn(static_cast<size_t>(dim));
          std::vector<float> want = x;
          cpu_->rms_norm({x.data(), want.data(), weighted ? w.data() : nullptr, rows, dim, stride, 1e-6f});
          const float* gw = weighted ? dev(w) : nullptr;
          float *gx = dev(x), *vx = dev(x);
          float* gy = in_place ? gx : poisoned(x.size());
          float* vy = in_place ? vx : poisoned(x.size());
          ASSERT_TRUE(gpu_->sync().ok()) << tag;  // uploads and poison fills run on gpu_'s stream
          gpu_->rms_norm({gx, gy, gw, rows, dim, stride, 1e-6f});
          v2.rms_norm({vx, vy, gw, rows, dim, stride, 1e-6f});
          ASSERT_TRUE(gpu_->sync().ok()) << tag;
          ASSERT_TRUE(v2.sync().ok()) << tag;
          auto got = host(gy, x.size()), prev = host(vy, x.size());
          if (!in_place)  // the gaps between the rows stay poisoned on both
            for (int64_t r = 0; r < rows; ++r)
              for (int64_t i = dim; i < stride; ++i) got[r * stride + i] = prev[r * stride + i] = want[r * stride + i];
          expect_same_bits(got, prev, tag + " vs small_v3 off");
          expect_close(got, want, 1e-6, 0, tag + " vs cpu");
        }
}

TEST_F(CudaFused, RopeTokenAnglesEqualPreviousKernel) {
  // rope with small_v3 (a block per token, its angles formed once for all heads) against rope_kernel
  // (small_v3 = false) bit for bit: attention output (64 × 512, inverse), kv (1 × 512), indexer q (64 × 128),
  // 4 × 256; 1, 2, 8, 32 tokens at large positions.
  cuda::CudaBackendOptions o2;
  o2.small_v3 = false;
  auto made_v2 = cuda::make_cuda_backend(o2);
  ASSERT_TRUE(made_v2.ok());
  Backend& v2 = **made_v2;
  struct S {
    int32_t heads, head_dim, n_rot;
  };
  for (S s : {S{64, 512, 64}, S{1, 512, 64}, S{64, 128, 64}, S{4, 256, 16}})
    for (int64_t n : {1, 2, 8, 32})
      for (bool inverse : {false, true}) {
        const std::string tag = "rope H" + std::to_string(s.heads) + " D" + std::to_string(s.head_dim) + " n" +
                                std::to_string(n) + (inverse ? " inverse" : "");
        auto x = randn(static_cast<size_t>(n * s.heads * s.head_dim));
        std::vector<int32_t> pos(n);
        for (auto& p : pos) p = randint(0, 1 << 20);
        std::vector<double> freq(s.n_rot / 2);
        for (size_t i = 0; i < freq.size(); ++i) freq[i] = std::pow(10000.0, -2.0 * i / s.n_rot);
        const int32_t* gpos = dev(pos);
        float *gx = dev(x), *vx = dev(x);
        ASSERT_TRUE(gpu_->sync().ok()) << tag;  // uploads run on gpu_'s stream; v2 has its own
        gpu_->rope({gx, gpos, n, s.heads, s.head_dim, s.n_rot, freq.data(), inverse});
        v2.rope({vx, gpos, n, s.heads, s.head_dim, s.n_rot, freq.data(), inverse});
        ASSERT_TRUE(gpu_->sync().ok()) << tag;
        ASSERT_TRUE(v2.sync().ok()) << tag;
        expect_same_bits(host(gx, x.size()), host(vx, x.size()), tag + " vs small_v3 off");
      }
}

TEST_F(CudaFused, IndexerQatFillAndScaleEqualPreviousKernels) {
  // indexer_qat with small_v3 (Hadamard stages inside a warp by shuffles) against the kernel before it
  // bit for bit and the CPU exactly, every power-of-two width 32 … 1024, 1, 8 and 64 rows, with and without
  // half rounding; fill_f32 with 16-byte stores at counts around the vector width and at an unaligned start
  // (the 4-byte kernel); scale as a programmatic dependent.
  cuda::CudaBackendOptions o2;
  o2.small_v3 = false;
  auto made_v2 = cuda::make_cuda_backend(o2);
  ASSERT_TRUE(made_v2.ok());
  Backend& v2 = **made_v2;
  for (int32_t dim : {32, 64, 128, 256, 512, 1024})
    for (int64_t rows : {1, 8, 64})
      for (bool f16 : {false, true}) {
        const std::string tag = "indexer_qat dim " + std::to_string(dim) + " rows " + std::to_string(rows) +
                                (f16 ? " f16" : "");
        auto x = randn(static_cast<size_t>(rows * dim), 2.0f);
        std::vector<float> want = x;
        IndexerQatArgs c{want.data(), rows, dim, f16};
        cpu_->indexer_qat(c);
        float *gx = dev(x), *vx = dev(x);
        ASSERT_TRUE(gpu_->sync().ok()) << tag;  // uploads run on gpu_'s stream; v2 has its own
        gpu_->indexer_qat({gx, rows, dim, f16});
        v2.indexer_qat({vx, rows, dim, f16});
        ASSERT_TRUE(gpu_->sync().ok()) << tag;
        ASSERT_TRUE(v2.sync().ok()) << tag;
        expect_same_bits(host(gx, x.size()), host(vx, x.size()), tag + " vs small_v3 off");
        expect_close(host(gx, x.size()), want, 0, 0, tag + " vs cpu");
      }
  for (int64_t count : {1, 3, 4, 5, 255, 1024, 2105347})
    for (int64_t offset : {0, 1}) {
      const std::string tag = "fill count " + std::to_string(count) + " offset " + std::to_string(offset);
      float* p = poisoned(static_cast<size_t>(count + 8));
      gpu_->fill_f32(p + offset, 1.5f, count);
      gpu_->scale(p + offset, -2.0f, count);
      ASSERT_TRUE(gpu_->sync().ok()) << tag;
      const auto got = host(p, static_cast<size_t>(count + 8));
      std::vector<float> want(got.size(), NAN);
      for (int64_t i = 0; i < count; ++i) want[offset + i] = -3.0f;
      for (size_t i = 0; i < got.size(); ++i)  // NaN outside the filled range: poison left alone
        if (std::isnan(want[i])) want[i] = std::isnan(got[i]) ? got[i] : 0.0f;
      expect_same_bits(got, want, tag);
    }
}

TEST_F(CudaFused, HcPostThenPreRecordedInAGraphEqualsEager) {
  // The forward pass's sequence HC post → next HC pre, recorded as a CUDA graph on the backend's stream
  // and replayed (as decode steps are): with hc_pdl the HC pre kernels are programmatic dependents of the
  // kernel before them (its segment kernel starts during HC post and waits inside), so the graph holds
  // programmatic edges. Same bits as the eager run, at n = 1 (2 kernels) and n = 8 (scale kernel first).
  const int32_t nhc = 4;
  const int64_t dim = 4096, hcd = nhc * dim, mix = (2 + nhc) * nhc;
  cudaStream_t st = static_cast<cudaStream_t>(cuda::cuda_stream(*gpu_));
  ASSERT_NE(st, nullptr);
  for (int64_t n : {1, 8}) {
    const std::string tag = "hc_post -> hc_pre graph n" + std::to_string(n);
    Weight fn;
    auto fn_bytes = random_weight(GgmlType::F16, mix, hcd, &fn, 0.01f);
    fn.data = fn_bytes.data();
    HcPostArgs hp;
    hp.x = dev(randn(static_cast<size_t>(n * hcd)));
    hp.f = dev(randn(static_cast<size_t>(n * dim)));
    hp.f_add = dev(randn(static_cast<size_t>(n * dim)));
    hp.post = dev(randn(static_cast<size_t>(n * nhc)));
    hp.comb = dev(randn(static_cast<size_t>(n * nhc * nhc), 0.5f));
    hp.out = poisoned(static_cast<size_t>(n * hcd));
    hp.n = n;
    hp.dim = dim;
    hp.nhc = nhc;
    HcPreArgs a;
    a.x = hp.out;
    a.fn = gpu_weight(fn, fn_bytes.size());
    a.scale = dev(randn(3, 0.5f));
    a.base = dev(randn(static_cast<size_t>(mix), 0.5f));
    a.norm_w = dev(randn(static_cast<size_t>(dim)));
    a.n = n;
    a.dim = dim;
    a.nhc = nhc;
    a.flat = poisoned(static_cast<size_t>(n * hcd));
    a.mix = poisoned(static_cast<size_t>(n * mix));
    a.pre = poisoned(static_cast<size_t>(n * nhc));
    a.post = poisoned(static_cast<size_t>(n * nhc));
    a.comb = poisoned(static_cast<size_t>(n * nhc * nhc));
    a.y = poisoned(static_cast<size_t>(n * dim));
    a.xn = poisoned(static_cast<size_t>(n * dim));
    struct Out {
      float* p;
      size_t len;
      const char* what;
    };
    const Out outs[] = {{hp.out, static_cast<size_t>(n * hcd), "state"}, {a.mix, static_cast<size_t>(n * mix), "mix"},
                        {a.pre, static_cast<size_t>(n * nhc), "pre"},    {a.post, static_cast<size_t>(n * nhc), "post"},
                        {a.comb, static_cast<size_t>(n * nhc * nhc), "comb"}, {a.y, static_cast<size_t>(n * dim), "y"},
                        {a.xn, static_cast<size_t>(n * dim), "xn"}};
    gpu_->hc_post(hp);
    gpu_->hc_pre(a);
    ASSERT_TRUE(gpu_->sync().ok()) << tag;
    std::vector<std::vector<float>> want;
    for (const Out& o : outs) want.push_back(host(o.p, o.len));
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed), cudaSuccess) << tag;
    gpu_->hc_post(hp);
    gpu_->hc_pre(a);
    ASSERT_EQ(cudaStreamEndCapture(st, &graph), cudaSuccess) << tag;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess) << tag;
    for (int replay = 0; replay < 3; ++replay) {
      for (const Out& o : outs) gpu_->fill_f32(o.p, NAN, static_cast<int64_t>(o.len));
      ASSERT_EQ(cudaGraphLaunch(exec, st), cudaSuccess) << tag;
      ASSERT_TRUE(gpu_->sync().ok()) << tag;
      for (size_t k = 0; k < std::size(outs); ++k)
        expect_same_bits(host(outs[k].p, outs[k].len), want[k],
                         tag + " replay " + std::to_string(replay) + " " + outs[k].what);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
}
