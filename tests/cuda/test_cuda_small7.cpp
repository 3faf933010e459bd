// test_cuda_small7.cpp — session 10's fold of attention's output inverse RoPE into the decode merge
// (small7_folds.h attention_out_rope_folded), bit for bit the launches it replaces (attention then rope) on the same
// inputs, at Flash's shapes (64 heads × 512, RoPE on the last 64 dims; CSA / HCA / raw-window / short rows) and
// decode batches n = 1, 2, 4, 8 (and 32: the chunk shape, where the fold declines), with the merge's chunk-body
// fallback (a host bound below the counts); also held to the CPU's attention then rope.
// Deliberately not here: speed (cuda_bench --small7).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/small7_folds.h"
#include "cuda_test_util.h"

using namespace ds4;
using namespace ds4::backend;
using namespace ds4::test;

namespace {

class CudaSmall7 : public CudaOpsTest {
 protected:
  std::unique_ptr<Backend> make(bool f16_mma) {
    cuda::CudaBackendOptions o;
    o.f16_mma = f16_mma;
    auto b = cuda::make_cuda_backend(o);
    EXPECT_TRUE(b.ok());
    return b.ok() ? std::move(b).value() : nullptr;
  }
};

// The inverse RoPE's frequencies of a layer (θ = 10000).
std::vector<double> rope_freq(int n_rot) {
  std::vector<double> f(static_cast<size_t>(n_rot / 2));
  for (int i = 0; i < n_rot / 2; ++i) f[static_cast<size_t>(i)] = std::pow(10000.0, -2.0 * i / n_rot);
  return f;
}

}  // namespace

TEST_F(CudaSmall7, AttentionOutRopeFoldedEqualsAttentionThenRope) {
  struct Shape {
    const char* name;
    int32_t window, comp_rows, top_k, pos0, count0;
  };
  const Shape shapes[] = {
      {"flash csa", 128, 700, 512, 5000, 512},  // selected rows
      {"flash hca", 128, 16, 0, 2101, 16},      // all compressed rows
      {"flash raw", 128, 0, 0, 3000, 0},        // no compressor
      {"flash short", 128, 3, 512, 9, 3},       // fewer rows than a segment
  };
  const int32_t H = 64, D = 512, R = 64;
  const auto freq = rope_freq(R);
  auto be = make(true);
  ASSERT_TRUE(be);
  cuda::AttnFoldScratch scratch;
  for (const Shape& s : shapes)
    for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{4}, int64_t{8}, int64_t{32}}) {
      const int64_t cap = s.window + n - 1;
      std::vector<int32_t> pos, count;
      for (int64_t i = 0; i < n; ++i) {
        pos.push_back(s.pos0 + static_cast<int32_t>(i));
        count.push_back(s.count0);
      }
      const int32_t stride = std::max(1, s.top_k);
      std::vector<int32_t> idx(static_cast<size_t>(n * stride), 0);
      for (int64_t i = 0; i < n; ++i)
        for (int32_t j = 0; j < count[i] && s.top_k > 0; ++j) idx[i * stride + j] = (j * 37 + static_cast<int32_t>(i)) % s.comp_rows;
      const auto q = randn(static_cast<size_t>(n * H * D), 0.2f), raw = randn(static_cast<size_t>(cap * D)),
                 comp = randn(static_cast<size_t>(std::max(1, s.comp_rows) * D)), sinks = randn(static_cast<size_t>(H));
      AttentionArgs a;
      a.pos = pos.data();
      a.n = n;
      a.heads = H;
      a.head_dim = D;
      a.scale = 1.0f / std::sqrt(static_cast<float>(D));
      a.raw_cap = cap;
      a.window = s.window;
      a.comp_idx_stride = stride;
      a.max_comp = s.comp_rows;
      a.q = q.data();
      a.sinks = sinks.data();
      a.raw = raw.data();
      a.comp = s.comp_rows ? comp.data() : nullptr;
      a.comp_count = s.comp_rows ? count.data() : nullptr;
      a.comp_idx = s.top_k > 0 ? idx.data() : nullptr;
      std::vector<float> want(q.size());
      a.out = want.data();
      cpu_->attention(a);
      cpu_->rope({a.out, a.pos, n, H, D, R, freq.data(), true});

      AttentionArgs g = a;
      g.q = dev(q);
      g.pos = dev(pos);
      g.sinks = dev(sinks);
      g.raw = dev(raw);
      g.comp = s.comp_rows ? dev(comp) : nullptr;
      g.comp_count = s.comp_rows ? dev(count) : nullptr;
      g.comp_idx = s.top_k > 0 ? dev(idx) : nullptr;
      const std::string where = std::string("attn out rope ") + s.name + " n" + std::to_string(n);
      auto run = [&](AttentionArgs r, bool folded) {
        r.out = poisoned(want.size());
        EXPECT_TRUE(gpu_->sync().ok());
        bool took = true;
        if (folded) took = cuda::attention_out_rope_folded(*be, r, R, freq.data(), scratch);
        if (!folded || !took) {  // the launches the fold replaces
          be->attention(r);
          be->rope({r.out, r.pos, r.n, r.heads, r.head_dim, R, freq.data(), true});
        }
        // The split shape (n·heads/8 ≤ 128 blocks, CudaBackendOptions::attention_split_max_blocks) takes it.
        EXPECT_EQ(took, !folded || n * (H / 8) <= 128) << where << ": the fold and the split shape disagree";
        EXPECT_TRUE(be->sync().ok()) << where;
        return host(r.out, want.size());
      };
      const auto prev = run(g, false);
      const auto folded = run(g, true);
      expect_same_bits(folded, prev, where, "folded == attention then rope");
      expect_close(folded, want, 1e-5, 1e-7, where + " vs cpu");
      if (s.comp_rows > 0) {  // a host bound below the counts: the merge's chunk-body fallback rotates in place
        AttentionArgs low = g;
        low.max_comp = 1;
        expect_same_bits(run(low, true), prev, where + " max_comp 1", "folded == attention then rope");
      }
    }
}
