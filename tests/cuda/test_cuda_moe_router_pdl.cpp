// test_cuda_moe_router_pdl.cpp — the router's logits as a programmatic dependent launch (CudaBackendOptions::
// launch_folds bit 16, launch_folds.h kRouterPdl: Backend::router_logits marks the logits' job, matmul_f16_mma_decode.cu
// launches it with griddepcontrol) against the two ops as before (launch_folds = 0), bit for bit: the logits, the
// ids and the weights. (Session 13's router fold — the top-k in the logits kernel's last block, bits 1 and 8 — was
// tested here too, bit for bit on the H200, and removed: slower; docs/PERF.md.) Shapes: Flash's router (256 × 4096,
// top-6), rows of 2 segments (256 × 1024), a partial last tile (100 experts, top-8), 64 / top-4, 32 / top-4 (4-row
// tiles), rows of one segment (the tiny models' 8 experts × 256, top-2, and 16 × 512); the clusters and the counter
// path (f16_mma_cluster off). Modes: biased top-k, plain, hash routing, all-equal logits (zero weights), NaN inputs
// on even tokens. n = 1, 2, 3, 4, 8; each case three times in a row into fresh poisoned outputs. The ids also
// against the CPU router on the same logits.
#include <cmath>
#include <string>
#include <vector>

#include "backend/cuda/launch_folds.h"
#include "cuda_test_util.h"

using namespace ds4;
using namespace ds4::backend;
using namespace ds4::test;

namespace {

class CudaMoeRouterPdl : public CudaOpsTest {
 protected:
  std::unique_ptr<Backend> make(int folds, bool cluster) {
    cuda::CudaBackendOptions o;
    o.f16_mma = true;  // the engine's F16 order (runtime::engine_cuda_options): the decode kernel the bit reaches
    o.f16_mma_cluster = cluster;
    o.launch_folds = folds;
    auto p = cuda::make_cuda_backend(o);
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    return p.ok() ? std::move(p).value() : nullptr;
  }
};

struct Out {
  std::vector<float> logits, weights;
  std::vector<int32_t> ids;
};

}  // namespace

TEST_F(CudaMoeRouterPdl, PdlEqualsMatmulThenRouter) {
  const char* const modes[] = {"biased", "plain", "hash", "ties", "nan"};
  struct Shape {
    int ne, k;
    int64_t cols;
  };
  const Shape shapes[] = {{256, 6, 4096}, {256, 6, 1024}, {100, 8, 4096}, {64, 4, 4096},
                          {32, 4, 4096},  {8, 2, 256},    {16, 4, 512}};
  const int32_t vocab = 1000;
  const int64_t n_max = 8;
  struct Side {
    int folds;
    bool cluster;
  };
  const Side sides[] = {{cuda::kRouterPdl, true}, {cuda::kRouterPdl, false}};
  std::unique_ptr<Backend> ref_c = make(0, true), ref_s = make(0, false);
  std::vector<std::unique_ptr<Backend>> fold;
  for (const Side& sd : sides) fold.push_back(make(sd.folds, sd.cluster));
  ASSERT_TRUE(ref_c && ref_s);
  for (const Shape& sh : shapes)
    for (int mode = 0; mode < 5; ++mode) {
      Weight w;
      auto bytes = random_weight(GgmlType::F16, sh.ne, sh.cols, &w);
      if (mode == 3) std::fill(bytes.begin(), bytes.end(), uint8_t{0});  // every logit 0: all scores tie
      w.data = bytes.data();
      const Weight gw = gpu_weight(w, w.row_bytes * sh.ne);
      auto x = randn(static_cast<size_t>(n_max * sh.cols));
      if (mode == 4)
        for (int64_t t = 0; t < n_max; t += 2) x[t * sh.cols + 7] = NAN;
      const float* gx = dev(x);
      auto bias = randn(static_cast<size_t>(sh.ne), 0.1f);
      std::vector<int32_t> hash(static_cast<size_t>(vocab * sh.k)), tok(n_max);
      for (int32_t v = 0; v < vocab; ++v)
        for (int j = 0; j < sh.k; ++j) hash[v * sh.k + j] = (v * 13 + j * 41) % sh.ne;
      for (auto& t : tok) t = randint(0, vocab - 1);
      const float* gbias = dev(bias);
      const int32_t* ghash = dev(hash);
      const int32_t* gtok = dev(tok);
      for (int64_t n : {1, 2, 3, 4, 8}) {
        const std::string tag = "router pdl NE" + std::to_string(sh.ne) + " k" + std::to_string(sh.k) + " cols" +
                                std::to_string(sh.cols) + " n" + std::to_string(n) + " " + modes[mode];
        // One call of the pair on `be` into fresh poisoned outputs.
        auto run = [&](Backend& be) {
          float* y = poisoned(static_cast<size_t>(n * sh.ne));
          RouterArgs a;
          a.logits = y;
          a.bias = mode == 0 || mode == 4 ? gbias : nullptr;
          a.hash = mode == 2 ? ghash : nullptr;
          a.vocab = vocab;
          a.tokens = gtok;
          a.n = n;
          a.n_expert = sh.ne;
          a.k = sh.k;
          a.scale = 1.5f;
          a.denom_guard = 1.0f / 16384;
          a.ids = poisoned_i32(static_cast<size_t>(n * sh.k));
          a.weights = poisoned(static_cast<size_t>(n * sh.k));
          be.router_logits({gw, gx, sh.cols, y, sh.ne, n, MatmulNumerics::ds4}, a);
          EXPECT_TRUE(be.sync().ok()) << tag;
          Out o;
          o.logits = host(y, static_cast<size_t>(n * sh.ne));
          o.ids = host(a.ids, static_cast<size_t>(n * sh.k));
          o.weights = host(a.weights, static_cast<size_t>(n * sh.k));
          return o;
        };
        for (size_t si = 0; si < std::size(sides); ++si) {
          const Out want = run(sides[si].cluster ? *ref_c : *ref_s);
          if (si == 0 && mode != 4) {  // the ids against the CPU router on these logits (NaN: test_cuda_fused's)
            RouterArgs c;
            std::vector<int32_t> ids(static_cast<size_t>(n * sh.k));
            std::vector<float> wts(ids.size());
            c.logits = want.logits.data();
            c.bias = mode == 0 ? bias.data() : nullptr;
            c.hash = mode == 2 ? hash.data() : nullptr;
            c.vocab = vocab;
            c.tokens = tok.data();
            c.n = n;
            c.n_expert = sh.ne;
            c.k = sh.k;
            c.scale = 1.5f;
            c.denom_guard = 1.0f / 16384;
            c.ids = ids.data();
            c.weights = wts.data();
            cpu_->router(c);
            EXPECT_EQ(want.ids, ids) << tag << " ids vs cpu";
          }
          for (int rep = 0; rep < 3; ++rep) {
            const Out got = run(*fold[si]);
            const std::string what = tag + " folds " + std::to_string(sides[si].folds) +
                                     (sides[si].cluster ? "" : " counter") + " call " + std::to_string(rep);
            EXPECT_EQ(got.ids, want.ids) << what << " ids";
            expect_same_bits(got.logits, want.logits, what + " logits", "pdl == plain launch");
            expect_same_bits(got.weights, want.weights, what + " weights", "pdl == plain launch");
          }
        }
      }
    }
}
