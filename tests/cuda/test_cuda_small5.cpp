// test_cuda_small5.cpp — session 8's small kernels (CudaBackendOptions::small_v5) bit for bit against the
// kernels before them (small_v5 = 0) on the same inputs: the indexer query's RoPE + QAT a warp per row
// (with the head weights' scale), the wide-row RMSNorm (the 16384-wide HC state), and the prefill HC pre's
// split + collapse + norm and the decode HC finish, at decode batch sizes and a 2,048-token prefill chunk.
// The previous kernels are checked against the CPU in test_cuda_ops.cpp / test_cuda_fused.cpp, so equal bits
// carry that over. Every input is on the device (this fixture's stream synced) before the two backends run.
// Deliberately not here: speed (cuda_bench --small5).
#include <cmath>
#include <cstring>
#include <iterator>
#include <string>
#include <tuple>

#include "backend/cuda/cuda_backend.h"
#include "cuda_test_util.h"
#include "indexer_qat_cases.h"

using namespace ds4;
using namespace ds4::backend;
using namespace ds4::test;

namespace {

class CudaSmall5 : public CudaOpsTest {
 protected:
  void SetUp() override {
    CudaOpsTest::SetUp();
    if (IsSkipped()) return;
    cuda::CudaBackendOptions on, off;
    on.small_v5 = 1;
    off.small_v5 = 0;
    auto a = cuda::make_cuda_backend(on);
    auto b = cuda::make_cuda_backend(off);
    ASSERT_TRUE(a.ok() && b.ok());
    v5_ = std::move(a).value();
    v4_ = std::move(b).value();
  }
  std::unique_ptr<Backend> v5_, v4_;  // on this test's device buffers (one device)
};

// expect_same_bits (cuda_test_util.h) with this file's relation.
void expect_v5_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  expect_same_bits(got, want, what, "small_v5 == previous");
}

}  // namespace

// Flash's indexer query (64 heads of 128, 64 RoPE dims; from 8,192 rows — n = 128, 2,048 — the warp-per-row
// kernel, 8 rows a warp), with and without half rounding; tiny (2 × 64, 16 dims), a row rotated whole (3 × 32)
// and 256 wide (8 values a lane) at 8,192+ rows a warp each (4,096 and 2,731 tokens of 2 and 3 heads, 1,024 of 8).
TEST_F(CudaSmall5, IndexerRopeQatEqualsPrevious) {
  std::vector<RopeQatShape> shapes(std::begin(kRopeQatShapes), std::end(kRopeQatShapes));
  shapes.push_back({8, 256, 64, true});
  for (RopeQatShape s : shapes)
    for (int64_t n : {1, 2, 8, 32, 2048, 0}) {
      if (n > 32 && s.heads != 64) continue;
      if (n == 0) n = (8192 + s.heads - 1) / s.heads;  // the warp kernel for every shape
      const RopeQatCase c = make_rope_qat_case(
          s, n, [&](size_t k, float sd) { return randn(k, sd); }, [&](int32_t lo, int32_t hi) { return randint(lo, hi); });
      float *xa = dev(c.x), *xb = dev(c.x), *wa = dev(c.wts), *wb = dev(c.wts);
      const IndexerQatArgs q = rope_qat_args(c, xa, dev(c.pos), wa);
      ASSERT_TRUE(gpu_->sync().ok());  // the uploads (on this backend's stream) before the others run
      v5_->indexer_qat(q);
      ASSERT_TRUE(v5_->sync().ok()) << c.tag;
      IndexerQatArgs qb = q;
      qb.x = xb;
      qb.scale_x = wb;
      v4_->indexer_qat(qb);
      ASSERT_TRUE(v4_->sync().ok()) << c.tag;
      expect_v5_bits(host(xa, c.x.size()), host(xb, c.x.size()), c.tag);
      expect_v5_bits(host(wa, c.wts.size()), host(wb, c.wts.size()), c.tag + " weights scale");
    }
}

// The HC state's norm (4 × 4096 = 16384 wide, unweighted, into another buffer, as the HC pre's flat), a
// weighted 8192-wide row, a 12,292-wide one (partial last round), and in place.
TEST_F(CudaSmall5, WideRmsNormEqualsPrevious) {
  for (int64_t dim : {16384, 8192, 12292})
    for (int64_t n : {1, 2, 8, 32, 2048}) {
      if (n == 2048 && dim != 16384) continue;
      for (bool weighted : {false, true}) {
        const std::string tag = "rms_norm D" + std::to_string(dim) + (weighted ? " w" : "") + " n" + std::to_string(n);
        const auto x = randn(static_cast<size_t>(n * dim), 1.5f);
        const auto w = randn(static_cast<size_t>(dim));
        float *xa = dev(x), *xb = dev(x), *ya = poisoned(x.size()), *yb = poisoned(x.size());
        const float* gw = weighted ? dev(w) : nullptr;
        ASSERT_TRUE(gpu_->sync().ok());  // uploads and poison fills before the others run
        v5_->rms_norm({xa, ya, gw, n, dim, dim, 1e-6f});
        v4_->rms_norm({xb, yb, gw, n, dim, dim, 1e-6f});
        if (n == 8) {  // in place
          v5_->rms_norm({xa, xa, gw, n, dim, dim, 1e-6f});
          v4_->rms_norm({xb, xb, gw, n, dim, dim, 1e-6f});
        }
        ASSERT_TRUE(v5_->sync().ok() && v4_->sync().ok()) << tag;
        expect_v5_bits(host(ya, x.size()), host(yb, x.size()), tag);
        if (n == 8) expect_v5_bits(host(xa, x.size()), host(xb, x.size()), tag + " in place");
      }
    }
}

// HC pre past the spread kernels' 32 tokens (norm, controls matmul, then split + collapse + norm): Flash
// (4 × 4096), tiny (4 × 64), odd (3 × 52: the runtime-nhc form), 3 × 54 (not a multiple of 4: the previous
// kernel on both); n = 1, 8, 32 the spread kernels (the finish kernel in registers: hc_finish5_kernel), with
// and without the split block.
TEST_F(CudaSmall5, HcPreEqualsPrevious) {
  struct S {
    int32_t nhc;
    int64_t dim;
  };
  for (S s : {S{4, 4096}, S{4, 64}, S{3, 52}, S{3, 54}})
    for (int64_t n : {1, 8, 32, 40, 2048}) {
      if (n == 2048 && s.dim != 4096) continue;
      const int64_t hcd = s.nhc * s.dim, mix = (2 + s.nhc) * s.nhc;
      const std::string tag = "hc_pre " + std::to_string(s.nhc) + "x" + std::to_string(s.dim) + " n" + std::to_string(n);
      Weight fn;
      auto fn_bytes = random_weight(GgmlType::F16, mix, hcd, &fn, 0.01f);
      fn.data = fn_bytes.data();
      const auto x = randn(static_cast<size_t>(n * hcd));
      const auto scale = randn(3, 0.5f), base = randn(static_cast<size_t>(mix), 0.5f);
      const auto norm_w = randn(static_cast<size_t>(s.dim));
      HcPreArgs g;
      g.fn = gpu_weight(fn, fn_bytes.size());
      g.n = n;
      g.dim = s.dim;
      g.nhc = s.nhc;
      g.x = dev(x);
      g.scale = dev(scale);
      g.base = dev(base);
      g.norm_w = dev(norm_w);
      HcPreArgs h = g;
      for (HcPreArgs* o : {&g, &h}) {
        o->flat = poisoned(static_cast<size_t>(n * hcd));
        o->mix = poisoned(static_cast<size_t>(n * mix));
        o->pre = poisoned(static_cast<size_t>(n * s.nhc));
        o->post = poisoned(static_cast<size_t>(n * s.nhc));
        o->comb = poisoned(static_cast<size_t>(n * s.nhc * s.nhc));
        o->y = poisoned(static_cast<size_t>(n * s.dim));
        o->xn = poisoned(static_cast<size_t>(n * s.dim));
      }
      ASSERT_TRUE(gpu_->sync().ok());  // uploads and poison fills before the others run
      v5_->hc_pre(g);
      ASSERT_TRUE(v5_->sync().ok()) << tag;
      v4_->hc_pre(h);
      ASSERT_TRUE(v4_->sync().ok()) << tag;
      for (auto [got, want, len, what] :
           {std::tuple{g.mix, h.mix, n * mix, "mix"}, std::tuple{g.pre, h.pre, n * s.nhc, "pre"},
            std::tuple{g.post, h.post, n * s.nhc, "post"}, std::tuple{g.comb, h.comb, n * s.nhc * s.nhc, "comb"},
            std::tuple{g.y, h.y, n * s.dim, "y"}, std::tuple{g.xn, h.xn, n * s.dim, "xn"}})
        expect_v5_bits(host(got, static_cast<size_t>(len)), host(want, static_cast<size_t>(len)), tag + " " + what);
      if (n > 32) continue;
      // HcPreArgs::split = false (the finish without its split block): mix, pre, y, xn.
      HcPreArgs gs = g, hs = h;
      gs.split = hs.split = false;
      for (HcPreArgs* o : {&gs, &hs}) {
        o->mix = poisoned(static_cast<size_t>(n * mix));
        o->pre = poisoned(static_cast<size_t>(n * s.nhc));
        o->y = poisoned(static_cast<size_t>(n * s.dim));
        o->xn = poisoned(static_cast<size_t>(n * s.dim));
      }
      ASSERT_TRUE(gpu_->sync().ok());
      v5_->hc_pre(gs);
      ASSERT_TRUE(v5_->sync().ok()) << tag;
      v4_->hc_pre(hs);
      ASSERT_TRUE(v4_->sync().ok()) << tag;
      for (auto [got, want, len, what] :
           {std::tuple{gs.mix, g.mix, n * mix, "mix"}, std::tuple{gs.pre, g.pre, n * s.nhc, "pre"},
            std::tuple{gs.y, g.y, n * s.dim, "y"}, std::tuple{gs.xn, g.xn, n * s.dim, "xn"},
            std::tuple{hs.xn, g.xn, n * s.dim, "xn (previous)"}})
        expect_v5_bits(host(got, static_cast<size_t>(len)), host(want, static_cast<size_t>(len)), tag + " split off " + what);
    }
}

