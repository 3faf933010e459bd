// test_cuda_hc_fuse.cpp — the one-launch decode HC pre (CudaBackendOptions::hc_fuse, ops_hc.cu
// hc_seg_fused_kernel: the segment blocks, then the last of them run the finish) bit for bit against the two
// launches it replaces (hc_fuse = 0), in both F16 orders (segment, f16_mma), with and without the split
// (HcPreArgs::split), at n = 1 (each block's own norm scale), 2, 8, 32 (the spread kernels' batches) and
// 2,048 (a prefill chunk: not fused, the same path either way), at the Flash shape (4 × 4096) and a tiny
// one (4 × 64: one segment row of blocks). Each fused case runs twice on the same backend: the second call
// finds the per-slice counters the first one reset. Mix also within 2e-5 of the CPU reference (its F16
// matmul), as test_cuda_fused.cpp's HcPre cases. Not here: the HC post or the forward pass (test_cuda_model).
// PrefillControlsEqualNormThenMatmul: a prefill chunk's HC pre with hc_fuse's tens digit set (hc_controls_prefill.cu:
// a scale kernel, the segment sums with the weights resident in shared memory, then the spread finish (form 3) or the
// prefill split kernel adding the segment sums (5, the default)) bit for bit against rms_norm + the few-row F16 MMA
// matmul + the split kernel (tens digit 0), n from 33 (the first token count past the spread kernels) to 2,048, Flash's
// 4 × 4096 and a tiny 4 × 64 (one segment: one slice; the spread finish in both forms), split on and off.
// HeadFormEqualsPieces: the output head's HC (HcPreArgs' head form: 4 control rows, hc_head for the split) on the spread
// kernels (hc_fuse's hundreds digit 1) bit for bit against its pieces (digit 0).
#include <cuda_runtime.h>

#include <string>
#include <tuple>

#include "backend/cuda/cuda_backend.h"
#include "cuda_test_util.h"

using namespace ds4;
using namespace ds4::backend;
using namespace ds4::test;

using CudaHcFuse = CudaOpsTest;

TEST_F(CudaHcFuse, OneLaunchEqualsTwoLaunches) {
  struct S {
    int32_t nhc;
    int64_t dim;
  };
  for (bool mma : {false, true}) {
    cuda::CudaBackendOptions of, o2;
    of.hc_fuse = 2;
    o2.hc_fuse = 0;
    of.f16_mma = o2.f16_mma = mma;
    auto made_f = cuda::make_cuda_backend(of);
    auto made_2 = cuda::make_cuda_backend(o2);
    ASSERT_TRUE(made_f.ok());
    ASSERT_TRUE(made_2.ok());
    Backend& fused = **made_f;
    Backend& two = **made_2;
    for (S s : {S{4, 4096}, S{4, 64}})
      for (int64_t n : {1, 2, 8, 32, 2048}) {
        if (n == 2048 && s.dim != 4096) continue;
        const int64_t hcd = s.nhc * s.dim, mix = (2 + s.nhc) * s.nhc;
        Weight fn;
        auto fn_bytes = random_weight(GgmlType::F16, mix, hcd, &fn, 0.01f);
        fn.data = fn_bytes.data();
        auto x = randn(static_cast<size_t>(n * hcd));
        auto scale = randn(3, 0.5f);
        auto base = randn(static_cast<size_t>(mix), 0.5f);
        auto norm_w = randn(static_cast<size_t>(s.dim));
        HcPreArgs g;
        g.fn = gpu_weight(fn, fn_bytes.size());
        g.n = n;
        g.dim = s.dim;
        g.nhc = s.nhc;
        g.x = dev(x);
        g.scale = dev(scale);
        g.base = dev(base);
        g.norm_w = dev(norm_w);
        std::vector<float> cmix;
        if (n <= 8) {  // the CPU reference's controls
          HcPreArgs c = g;
          std::vector<float> flat(n * hcd), m(n * mix), pre(n * s.nhc), post(n * s.nhc), comb(n * s.nhc * s.nhc),
              y(n * s.dim), xn(n * s.dim);
          c.fn = fn;
          c.x = x.data();
          c.scale = scale.data();
          c.base = base.data();
          c.norm_w = norm_w.data();
          c.flat = flat.data();
          c.mix = m.data();
          c.pre = pre.data();
          c.post = post.data();
          c.comb = comb.data();
          c.y = y.data();
          c.xn = xn.data();
          cpu_->hc_pre(c);
          cmix = m;
        }
        for (bool split : {true, false}) {
          const std::string tag = std::string(mma ? "f16_mma " : "segments ") + "hc_pre " + std::to_string(s.nhc) + "x" +
                                  std::to_string(s.dim) + " n" + std::to_string(n) + (split ? "" : " split off");
          HcPreArgs want = g, got = g, again = g;
          for (HcPreArgs* o : {&want, &got, &again}) {
            o->split = split;
            o->flat = poisoned(static_cast<size_t>(n * hcd));
            o->mix = poisoned(static_cast<size_t>(n * mix));
            o->pre = poisoned(static_cast<size_t>(n * s.nhc));
            o->post = poisoned(static_cast<size_t>(n * s.nhc));
            o->comb = poisoned(static_cast<size_t>(n * s.nhc * s.nhc));
            o->y = poisoned(static_cast<size_t>(n * s.dim));
            o->xn = poisoned(static_cast<size_t>(n * s.dim));
          }
          two.hc_pre(want);
          ASSERT_TRUE(two.sync().ok()) << tag;
          fused.hc_pre(got);
          fused.hc_pre(again);  // the counters the first call left behind must be zero again
          ASSERT_TRUE(fused.sync().ok()) << tag;
          std::vector<std::tuple<float*, float*, float*, int64_t, const char*>> outs = {
              {got.mix, again.mix, want.mix, n * mix, "mix"},
              {got.pre, again.pre, want.pre, n * s.nhc, "pre"},
              {got.y, again.y, want.y, n * s.dim, "y"},
              {got.xn, again.xn, want.xn, n * s.dim, "xn"}};
          if (split) {  // without the split post and comb are hc_split's, later
            outs.emplace_back(got.post, again.post, want.post, n * s.nhc, "post");
            outs.emplace_back(got.comb, again.comb, want.comb, n * s.nhc * s.nhc, "comb");
          }
          for (auto [a, b, w, len, what] : outs) {
            const auto wv = host(w, static_cast<size_t>(len));
            expect_same_bits(host(a, static_cast<size_t>(len)), wv, tag + " " + what + " fused vs two launches");
            expect_same_bits(host(b, static_cast<size_t>(len)), wv, tag + " " + what + " fused (second call)");
          }
          if (!cmix.empty()) expect_close(host(got.mix, cmix.size()), cmix, 2e-5, 0, tag + " mix vs cpu");
        }
      }
  }
}

TEST_F(CudaHcFuse, PrefillControlsEqualNormThenMatmul) {
  struct S {
    int32_t nhc;
    int64_t dim;
  };
  cuda::CudaBackendOptions oo;
  oo.f16_mma = true;
  oo.hc_fuse = 0;
  auto made_o = cuda::make_cuda_backend(oo);
  ASSERT_TRUE(made_o.ok());
  Backend& old_path = **made_o;
  cuda::CudaBackendOptions bad = oo;
  for (int v : {10, 20, 40, 60}) {  // removed or never made forms: rejected, not run as the default
    bad.hc_fuse = v;
    EXPECT_FALSE(cuda::make_cuda_backend(bad).ok()) << v;
  }
  for (int form : {3, 5}) {
    cuda::CudaBackendOptions on = oo;
    on.hc_fuse = 10 * form;
    auto made_n = cuda::make_cuda_backend(on);
    ASSERT_TRUE(made_n.ok());
    Backend& nw = **made_n;
    for (S s : {S{4, 4096}, S{4, 64}})
      for (int64_t n : {33, 67, 129, 2048}) {
        if (s.dim != 4096 && n == 2048) continue;
        const int64_t hcd = s.nhc * s.dim, mix = (2 + s.nhc) * s.nhc;
        Weight fn;
        auto fn_bytes = random_weight(GgmlType::F16, mix, hcd, &fn, 0.01f);
        fn.data = fn_bytes.data();
        auto x = randn(static_cast<size_t>(n * hcd));
        auto scale = randn(3, 0.5f);
        auto base = randn(static_cast<size_t>(mix), 0.5f);
        auto norm_w = randn(static_cast<size_t>(s.dim));
        HcPreArgs g;
        g.fn = gpu_weight(fn, fn_bytes.size());
        g.n = n;
        g.dim = s.dim;
        g.nhc = s.nhc;
        g.x = dev(x);
        g.scale = dev(scale);
        g.base = dev(base);
        g.norm_w = dev(norm_w);
        for (bool split : {true, false}) {
          const std::string tag = "form " + std::to_string(form) + " hc_pre " + std::to_string(s.nhc) + "x" +
                                  std::to_string(s.dim) + " n" + std::to_string(n) + (split ? "" : " split off");
          HcPreArgs want = g, got = g;
          for (HcPreArgs* o : {&want, &got}) {
            o->split = split;
            o->flat = poisoned(static_cast<size_t>(n * hcd));
            o->mix = poisoned(static_cast<size_t>(n * mix));
            o->pre = poisoned(static_cast<size_t>(n * s.nhc));
            o->post = poisoned(static_cast<size_t>(n * s.nhc));
            o->comb = poisoned(static_cast<size_t>(n * s.nhc * s.nhc));
            o->y = poisoned(static_cast<size_t>(n * s.dim));
            o->xn = poisoned(static_cast<size_t>(n * s.dim));
          }
          old_path.hc_pre(want);
          ASSERT_TRUE(old_path.sync().ok()) << tag;
          nw.hc_pre(got);
          ASSERT_TRUE(nw.sync().ok()) << tag;
          std::vector<std::tuple<float*, float*, int64_t, const char*>> outs = {
              {got.mix, want.mix, n * mix, "mix"},
              {got.pre, want.pre, n * s.nhc, "pre"},
              {got.y, want.y, n * s.dim, "y"},
              {got.xn, want.xn, n * s.dim, "xn"}};
          if (split) {  // without the split post and comb are hc_split's, later
            outs.emplace_back(got.post, want.post, n * s.nhc, "post");
            outs.emplace_back(got.comb, want.comb, n * s.nhc * s.nhc, "comb");
          }
          for (auto [a, w, len, what] : outs)
            expect_same_bits(host(a, static_cast<size_t>(len)), host(w, static_cast<size_t>(len)),
                             tag + " " + what + " prefill controls vs norm + matmul");
        }
      }
  }
}

// The head form of HcPreArgs (the output head's HC: 4 F16 control rows, hc_head for the split; by_pieces.h
// hc_pre_head_form) on the spread kernels (hc_fuse's hundreds digit 1, also with the cluster argmax's bit: 5) bit for
// bit against its pieces (hundreds digit 0: rms_norm, the F16 matmul, hc_head, hc_collapse, rms_norm — the launches the
// forward pass made before), both F16 orders, at n = 1 (each block's own scale), 2, 8, 32 (a scale kernel first) and
// 33 (past the spread kernels: the pieces either way), Flash's 4 × 4096, 4 × 256 and 4 × 64 (one segment), with and
// without the output norm's weights; at n = 1 and 2 also with a previous HC post (prev_post: its own launch first),
// the state it writes compared too. Every output poisoned first; mix also within 2e-5 of the CPU's head form (its F16
// matmul) at n ≤ 8.
TEST_F(CudaHcFuse, HeadFormEqualsPieces) {
  struct S {
    int32_t nhc;
    int64_t dim;
  };
  for (bool mma : {false, true}) {
    cuda::CudaBackendOptions op;
    op.f16_mma = mma;
    op.hc_fuse = 0;
    auto made_p = cuda::make_cuda_backend(op);
    ASSERT_TRUE(made_p.ok());
    Backend& pieces = **made_p;
    for (int form : {1, 5}) {  // (5: with the cluster argmax bit, which the HC pre ignores)
      cuda::CudaBackendOptions on = op;
      on.hc_fuse = 100 * form;
      auto made_n = cuda::make_cuda_backend(on);
      ASSERT_TRUE(made_n.ok());
      Backend& spread = **made_n;
      for (S s : {S{4, 4096}, S{4, 256}, S{4, 64}})
        for (int64_t n : {1, 2, 8, 32, 33})
          for (int variant = 0; variant < 3; ++variant) {  // 0: plain; 1: no norm weights; 2: a previous HC post
            if (variant == 2 && n > 2) continue;
            if (variant == 1 && n != 1 && n != 33) continue;
            const int64_t hcd = s.nhc * s.dim, E = s.dim, NHC = s.nhc;
            Weight fn;
            auto fn_bytes = random_weight(GgmlType::F16, NHC, hcd, &fn, 0.01f);
            fn.data = fn_bytes.data();
            auto x = randn(static_cast<size_t>(n * hcd));
            auto scale = randn(1, 0.5f);
            auto base = randn(static_cast<size_t>(NHC), 0.5f);
            auto norm_w = randn(static_cast<size_t>(E));
            auto f = randn(static_cast<size_t>(n * E)), fa = randn(static_cast<size_t>(n * E));
            auto post = randn(static_cast<size_t>(n * NHC), 0.5f), comb = randn(static_cast<size_t>(n * NHC * NHC), 0.5f);
            HcPreArgs g;
            g.fn = gpu_weight(fn, fn_bytes.size());
            g.n = n;
            g.dim = E;
            g.nhc = s.nhc;
            g.scale = dev(scale);
            g.base = dev(base);
            g.norm_w = variant == 1 ? nullptr : dev(norm_w);
            g.split = false;
            const float* x_old = dev(x);  // the post's input state (variant 2), else the head's X itself
            const float* f_d = dev(f);
            const float* fa_d = dev(fa);
            const float* post_d = dev(post);
            const float* comb_d = dev(comb);
            std::vector<float> cmix;
            if (n <= 8 && variant != 2) {  // the CPU's head form (by_pieces.h)
              HcPreArgs c = g;
              std::vector<float> flat(n * hcd), m(n * NHC), pre(n * NHC), y(n * E), xn(n * E);
              c.fn = fn;
              c.x = x.data();
              c.scale = scale.data();
              c.base = base.data();
              c.norm_w = variant == 1 ? nullptr : norm_w.data();
              c.flat = flat.data();
              c.mix = m.data();
              c.pre = pre.data();
              c.y = y.data();
              c.xn = xn.data();
              cpu_->hc_pre(c);
              cmix = m;
            }
            const std::string tag = std::string(mma ? "f16_mma " : "segments ") + "head form " + std::to_string(form) +
                                    " " + std::to_string(s.nhc) + "x" + std::to_string(E) + " n" + std::to_string(n) +
                                    (variant == 1 ? " no norm weights" : variant == 2 ? " with prev_post" : "");
            HcPreArgs want = g, got = g;
            for (HcPreArgs* o : {&want, &got}) {
              o->flat = poisoned(static_cast<size_t>(n * hcd));
              o->mix = poisoned(static_cast<size_t>(n * NHC));
              o->pre = poisoned(static_cast<size_t>(n * NHC));
              o->y = poisoned(static_cast<size_t>(n * E));
              o->xn = poisoned(static_cast<size_t>(n * E));
              if (variant == 2) {
                float* state = poisoned(static_cast<size_t>(n * hcd));
                o->x = state;
                HcPostArgs pa{x_old, f_d, post_d, comb_d, state, n, E, s.nhc};
                pa.f_add = fa_d;
                o->prev_post = pa;
              } else {
                o->x = x_old;
              }
            }
            pieces.hc_pre(want);
            ASSERT_TRUE(pieces.sync().ok()) << tag;
            spread.hc_pre(got);
            ASSERT_TRUE(spread.sync().ok()) << tag;
            std::vector<std::tuple<const float*, const float*, int64_t, const char*>> outs = {
                {got.mix, want.mix, n * NHC, "mix"},
                {got.pre, want.pre, n * NHC, "pre (head weights)"},
                {got.y, want.y, n * E, "y"},
                {got.xn, want.xn, n * E, "xn"}};
            if (variant == 2) outs.emplace_back(got.x, want.x, n * hcd, "state (prev_post)");
            for (auto [a, w, len, what] : outs)
              expect_same_bits(host(a, static_cast<size_t>(len)), host(w, static_cast<size_t>(len)),
                               tag + " " + what + " spread vs pieces");
            if (!cmix.empty()) expect_close(host(got.mix, cmix.size()), cmix, 2e-5, 0, tag + " mix vs cpu");
          }
    }
  }
  cuda::CudaBackendOptions bad;
  for (int v : {200, 350, 600, 750, 860, 160, 460}) {  // hundreds digits 2, 3 removed (6 … 8 never made), controls form 6
    bad.hc_fuse = v;
    EXPECT_FALSE(cuda::make_cuda_backend(bad).ok()) << v;
  }
}
