// test_cuda_small7.cpp — session 10's folds of small decode launches into their neighbours, bit for bit the
// launches they replace on the same inputs: attention's output inverse RoPE inside the decode merge
// (AttentionArgs::out_rot, CudaBackendOptions::attn_out_rope) against attention then rope; the HC post inside
// the next HC pre (HcPreArgs::prev_post, CudaBackendOptions::hc_post_fold) against hc_post then hc_pre. The
// unfolded ops are checked against the CPU in test_cuda_attention.cpp / test_cuda_fused.cpp, so equal bits
// carry that over; the folded results are also held to the CPU's here. Shapes: Flash's (64 heads × 512, RoPE
// on the last 64 dims; HC state 4 × 4096, 24 controls), decode batches n = 1, 2, 4, 8, 32. The sublayer boundary as one
// cluster launch (hc_post_fold = 2, hc_boundary.cu) against hc_post then hc_pre, in the engine's buffer layout too
// (the pre's post/comb outputs are the post's inputs). The attention fold also with attention_mma_kernels 31 (one
// decode query's sliced merge a programmatic dependent of its split kernel) and 10 (the previous split + merge), and
// 37 (session 14: the split kernel a programmatic dependent too, its rows staged before its wait) — also after the
// q norm + RoPE that triggers it, eagerly and in a recorded step graph.
// Deliberately not here: speed (cuda_bench --small7).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/hc_boundary.h"
#include "cuda_test_util.h"
#include "quant/half.h"

using namespace ds4;
using namespace ds4::backend;
using namespace ds4::test;

namespace {

class CudaSmall7 : public CudaOpsTest {
 protected:
  // Backends with the fold on and off (f16_mma: the HC controls' order, the engine's default on).
  // post_fold: the CudaBackendOptions::hc_post_fold mode of the folded side (1: session 10's; 2: hc_boundary.cu).
  // attn_kernels: CudaBackendOptions::attention_mma_kernels (31: one decode query's merge a programmatic dependent).
  std::unique_ptr<Backend> make(bool fold, bool f16_mma, int post_fold = 1,
                                int attn_kernels = cuda::CudaBackendOptions{}.attention_mma_kernels) {
    cuda::CudaBackendOptions o;
    o.attention_mma_kernels = attn_kernels;
    o.attn_out_rope = fold ? 1 : 0;
    o.hc_post_fold = fold ? post_fold : 0;
    o.f16_mma = f16_mma;
    auto b = cuda::make_cuda_backend(o);
    EXPECT_TRUE(b.ok());
    return b.ok() ? std::move(b).value() : nullptr;
  }
  // F16 HC control weights [rows][cols] on the device, small so the mix stays in Sinkhorn's range.
  Weight hc_controls(int64_t rows, int64_t cols) {
    std::vector<uint16_t> fn16(static_cast<size_t>(rows * cols));
    const auto r = randn(fn16.size(), 0.02f);
    for (size_t i = 0; i < fn16.size(); ++i) fn16[i] = f32_to_f16(r[i]);
    Weight fn;
    fn.type = GgmlType::F16;
    fn.rows = rows;
    fn.cols = cols;
    fn.row_bytes = static_cast<uint64_t>(cols) * 2;
    fn.data = dev(fn16);
    return fn;
  }
  // An HC pre of n tokens on state x (4 streams of dim E, controls fn: 24 mix values) with every output poisoned;
  // post / comb: the given buffers (the forward pass's aliased layout) or, null, poisoned ones.
  HcPreArgs poisoned_pre(float* x, const Weight& fn, const float* scale, const float* base, const float* norm_w,
                         int64_t n, int64_t E, float* post = nullptr, float* comb = nullptr) {
    const int64_t NHC = 4, HCD = NHC * E, M = (2 + NHC) * NHC;
    HcPreArgs p;
    p.x = x;
    p.fn = fn;
    p.scale = scale;
    p.base = base;
    p.norm_w = norm_w;
    p.n = n;
    p.dim = E;
    p.nhc = static_cast<int32_t>(NHC);
    p.flat = poisoned(static_cast<size_t>(n * HCD));
    p.mix = poisoned(static_cast<size_t>(n * M));
    p.pre = poisoned(static_cast<size_t>(n * NHC));
    p.post = post ? post : poisoned(static_cast<size_t>(n * NHC));
    p.comb = comb ? comb : poisoned(static_cast<size_t>(n * NHC * NHC));
    p.y = poisoned(static_cast<size_t>(n * E));
    p.xn = poisoned(static_cast<size_t>(n * E));
    return p;
  }
  // HcBoundary*EqualsPostThenPre's body for the given (hc_post_fold, f16_mma) sides (below).
  void check_boundary(std::initializer_list<std::pair<int, bool>> sides);
};

// The inverse RoPE's frequencies of a layer (θ = 10000, as the forward pass's main table).
std::vector<double> rope_freq(int n_rot) {
  std::vector<double> f(static_cast<size_t>(n_rot / 2));
  for (int i = 0; i < n_rot / 2; ++i) f[static_cast<size_t>(i)] = std::pow(10000.0, -2.0 * i / n_rot);
  return f;
}

// x rounded through IEEE half, as the KV cache stores rows (exact in TF32: the fast kernels' as-is path).
std::vector<float> f16_rows(std::vector<float> x) {
  for (float& v : x) v = f16_to_f32(f32_to_f16(v));
  return x;
}

}  // namespace

TEST_F(CudaSmall7, AttentionOutRopeFoldedEqualsRopeAfter) {
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
  auto on = make(true, true), off = make(false, true);
  // The sliced merge a programmatic dependent of the split kernel (attention_mma_kernels 31; one query), with the fold and without.
  auto on31 = make(true, true, 1, 31), off31 = make(false, true, 1, 31), prev10 = make(false, true, 1, 10);
  ASSERT_TRUE(on && off && on31 && off31 && prev10);
  // Session 14: 37 (the split kernel itself a programmatic dependent, its rows staged before its wait: standalone here,
  // after the uploads — the chain after the q norm is AttentionAfterQNormProgrammaticEqualsPlain).
  std::vector<std::pair<int, std::unique_ptr<Backend>>> s14;
  for (int k : {37}) {
    s14.emplace_back(k, make(true, true, 1, k));
    ASSERT_TRUE(s14.back().second);
  }
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
      a.out_rot = R;
      a.out_freq = freq.data();
      std::vector<float> want(q.size());
      a.out = want.data();
      cpu_->attention(a);

      AttentionArgs g = a;
      g.q = dev(q);
      g.pos = dev(pos);
      g.sinks = dev(sinks);
      g.raw = dev(raw);
      g.comp = s.comp_rows ? dev(comp) : nullptr;
      g.comp_count = s.comp_rows ? dev(count) : nullptr;
      g.comp_idx = s.top_k > 0 ? dev(idx) : nullptr;
      auto run = [&](Backend& be, AttentionArgs r, bool pieces) {
        r.out = poisoned(want.size());
        EXPECT_TRUE(gpu_->sync().ok());
        if (pieces) {  // the launches the fold replaces
          r.out_rot = 0;
          be.attention(r);
          be.rope({r.out, r.pos, r.n, r.heads, r.head_dim, R, freq.data(), true});
        } else {
          be.attention(r);
        }
        EXPECT_TRUE(be.sync().ok());
        return host(r.out, want.size());
      };
      const std::string where = std::string("attn out rope ") + s.name + " n" + std::to_string(n);
      const auto prev = run(*off, g, true);
      const auto folded = run(*on, g, false);
      expect_same_bits(folded, prev, where, "folded == attention then rope");
      expect_same_bits(run(*off, g, false), prev, where + " (fold off)", "out_rot off == attention then rope");
      expect_close(folded, want, 1e-5, 1e-7, where + " vs cpu");
      expect_same_bits(run(*prev10, g, true), prev, where + " (kernels 10)", "== attention then rope");
      expect_same_bits(run(*on31, g, false), prev, where + " (kernels 31)", "folded == attention then rope");
      expect_same_bits(run(*off31, g, false), prev, where + " (kernels 31, fold off)", "== attention then rope");
      expect_same_bits(run(*off31, g, true), prev, where + " (kernels 31, pieces)", "== attention then rope");
      for (auto& [k, be] : s14)
        expect_same_bits(run(*be, g, false), prev, where + " (kernels " + std::to_string(k) + ")", "folded == attention then rope");
      if (s.comp_rows > 0) {  // a host bound below the counts: the merge's chunk-body fallback rotates in place
        AttentionArgs low = g;
        low.max_comp = 1;
        expect_same_bits(run(*on, low, false), prev, where + " max_comp 1", "folded == attention then rope");
        expect_same_bits(run(*on31, low, false), prev, where + " max_comp 1 (kernels 31)", "folded == attention then rope");
        for (auto& [k, be] : s14)
          expect_same_bits(run(*be, low, false), prev, where + " max_comp 1 (kernels " + std::to_string(k) + ")",
                           "folded == attention then rope");
      }
    }
}

// One decode token's q norm + RoPE (in place, unweighted, as the forward pass's) and then its attention with the folded
// output RoPE — the main lane's chain — eagerly, recorded into a step graph and replayed: attention_mma_kernels 37 (the
// split kernel a programmatic dependent of the norm, which triggers it after its own wait, the split's rows staged
// before the split's wait) gives 31's bits at every step, and the CPU's chain within the tolerance. A split kernel reading q before the norm's end would see the unnormalised row.
TEST_F(CudaSmall7, AttentionAfterQNormProgrammaticEqualsPlain) {
  struct Shape {
    const char* name;
    int32_t window, comp_rows, top_k, pos0, count0;
  };
  const Shape shapes[] = {
      {"flash csa", 128, 700, 512, 5000, 512},   // 20 segments of selected rows
      {"flash hca", 128, 16, 0, 2101, 16},       // 4 raw segments + 16 compressed rows
      {"flash hca 32k", 128, 256, 0, 32768, 256},  // 12 segments
      {"flash raw", 128, 0, 0, 3000, 0},         // no compressor
      {"flash short", 128, 3, 512, 9, 3},        // fewer rows than a segment
  };
  const int32_t H = 64, D = 512, R = 64;
  const float eps = 1e-6f;
  const auto freq = rope_freq(R);
  auto ref = make(true, true, 1, 31);
  ASSERT_TRUE(ref);
  std::vector<std::pair<int, std::unique_ptr<Backend>>> sides;
  for (int k : {37}) {
    sides.emplace_back(k, make(true, true, 1, k));
    ASSERT_TRUE(sides.back().second);
  }
  int64_t key = 1;
  for (const Shape& s : shapes) {
    const int64_t cap = s.window;
    const std::vector<int32_t> pos = {s.pos0}, count = {s.count0};
    const int32_t stride = std::max(1, s.top_k);
    std::vector<int32_t> idx(static_cast<size_t>(stride), 0);
    for (int32_t j = 0; j < s.count0 && s.top_k > 0; ++j) idx[static_cast<size_t>(j)] = (j * 37 + 5) % s.comp_rows;
    const auto q = randn(static_cast<size_t>(H * D)), raw = f16_rows(randn(static_cast<size_t>(cap * D))),
               comp = f16_rows(randn(static_cast<size_t>(std::max(1, s.comp_rows) * D))),
               sinks = randn(static_cast<size_t>(H));
    AttentionArgs a;
    a.n = 1;
    a.heads = H;
    a.head_dim = D;
    a.scale = 1.0f / std::sqrt(static_cast<float>(D));
    a.raw_cap = cap;
    a.window = s.window;
    a.comp_idx_stride = stride;
    a.max_comp = s.comp_rows;
    a.out_rot = R;
    a.out_freq = freq.data();
    // The CPU's chain.
    std::vector<float> qc = q, want(q.size());
    const NormRopeArgs ncpu{qc.data(), pos.data(), 1, H, D, R, nullptr, eps, freq.data()};
    cpu_->norm_rope(ncpu);
    AttentionArgs c = a;
    c.q = qc.data();
    c.pos = pos.data();
    c.sinks = sinks.data();
    c.raw = raw.data();
    c.comp = s.comp_rows ? comp.data() : nullptr;
    c.comp_count = s.comp_rows ? count.data() : nullptr;
    c.comp_idx = s.top_k > 0 ? idx.data() : nullptr;
    c.out = want.data();
    cpu_->attention(c);

    AttentionArgs g = a;
    g.pos = dev(pos);
    g.sinks = dev(sinks);
    g.raw = dev(raw);
    g.comp = s.comp_rows ? dev(comp) : nullptr;
    g.comp_count = s.comp_rows ? dev(count) : nullptr;
    g.comp_idx = s.top_k > 0 ? dev(idx) : nullptr;
    float* qd = dev(q);
    float* out = poisoned(q.size());
    settle();
    // Three steps on `be` under one graph key (eager, recorded, replayed), q and out reset on be's stream before each.
    auto steps = [&](Backend& be, int64_t k) {
      std::vector<std::vector<float>> got;
      const int64_t keys[1] = {k};
      for (int step = 0; step < 3; ++step) {
        be.upload(qd, q.data(), q.size() * sizeof(float));
        be.fill_f32(out, NAN, static_cast<int64_t>(q.size()));
        auto chain = [&] {
          be.norm_rope({qd, g.pos, 1, H, D, R, nullptr, eps, freq.data()});
          AttentionArgs r = g;
          r.q = qd;
          r.out = out;
          be.attention(r);
        };
        if (be.graph_begin(keys) != Backend::GraphMode::replayed) {
          chain();
          if (!be.graph_end()) chain();
        }
        EXPECT_TRUE(be.sync().ok());
        got.push_back(host(out, q.size()));
      }
      return got;
    };
    const std::string where = std::string("q norm + attention ") + s.name;
    const auto base = steps(*ref, key++);
    expect_close(base[0], want, 1e-5, 1e-7, where + " (kernels 31) vs cpu");
    for (int step = 1; step < 3; ++step)
      expect_same_bits(base[static_cast<size_t>(step)], base[0], where + " (kernels 31) step " + std::to_string(step),
                       "== eager");
    for (auto& [k, be] : sides) {
      const auto got = steps(*be, key++);
      for (int step = 0; step < 3; ++step)
        expect_same_bits(got[static_cast<size_t>(step)], base[0],
                         where + " (kernels " + std::to_string(k) + ") step " + std::to_string(step), "== kernels 31");
    }
  }
}

TEST_F(CudaSmall7, HcPostFoldedIntoPreEqualsPostThenPre) {
  const int64_t E = 4096, NHC = 4, HCD = NHC * E, M = (2 + NHC) * NHC;
  for (bool mma : {true, false}) {
    auto on = make(true, mma), off = make(false, mma);
    ASSERT_TRUE(on && off);
    const Weight fn = hc_controls(M, HCD);
    std::vector<float> scale = {0.5f, 0.25f, 0.125f}, base = randn(static_cast<size_t>(M), 0.1f),
                       norm_w = randn(static_cast<size_t>(E), 0.5f);
    for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{4}, int64_t{8}, int64_t{32}})
      for (bool f_add : {true, false}) {
        const auto x = randn(static_cast<size_t>(n * HCD)), f = randn(static_cast<size_t>(n * E)),
                   fa = randn(static_cast<size_t>(n * E)), post = randn(static_cast<size_t>(n * NHC), 0.5f),
                   comb = randn(static_cast<size_t>(n * NHC * NHC), 0.5f);
        const float* x_d = dev(x);
        const float* f_d = dev(f);
        const float* fa_d = dev(fa);
        const float* post_d = dev(post);
        const float* comb_d = dev(comb);
        const float* scale_d = dev(scale);
        const float* base_d = dev(base);
        const float* nw_d = dev(norm_w);
        struct Out {
          std::vector<float> x, mix, pre, post, comb, xn;
        };
        auto run = [&](Backend& be, bool pieces) {
          float* state = poisoned(static_cast<size_t>(n * HCD));  // the new state: the post's out, the pre's x
          HcPostArgs pa{x_d, f_d, post_d, comb_d, state, n, E, static_cast<int32_t>(NHC)};
          pa.f_add = f_add ? fa_d : nullptr;
          HcPreArgs p = poisoned_pre(state, fn, scale_d, base_d, nw_d, n, E);
          EXPECT_TRUE(gpu_->sync().ok());
          if (pieces) {
            be.hc_post(pa);
          } else {
            p.prev_post = pa;
          }
          be.hc_pre(p);
          EXPECT_TRUE(be.sync().ok());
          return Out{host(state, static_cast<size_t>(n * HCD)), host(p.mix, static_cast<size_t>(n * M)),
                     host(p.pre, static_cast<size_t>(n * NHC)), host(p.post, static_cast<size_t>(n * NHC)),
                     host(p.comb, static_cast<size_t>(n * NHC * NHC)), host(p.xn, static_cast<size_t>(n * E))};
        };
        const std::string where = std::string("hc post fold ") + (mma ? "f16_mma" : "segments") + " n" +
                                  std::to_string(n) + (f_add ? " f_add" : "");
        const Out want = run(*off, true), got = run(*on, false), unfolded = run(*off, false);
        const char* rel = "folded == post then pre";
        expect_same_bits(got.x, want.x, where + " state", rel);
        expect_same_bits(got.mix, want.mix, where + " mix", rel);
        expect_same_bits(got.pre, want.pre, where + " pre", rel);
        expect_same_bits(got.post, want.post, where + " post", rel);
        expect_same_bits(got.comb, want.comb, where + " comb", rel);
        expect_same_bits(got.xn, want.xn, where + " xn", rel);
        expect_same_bits(unfolded.xn, want.xn, where + " xn (fold off)", "prev_post off == post then pre");
        expect_same_bits(unfolded.x, want.x, where + " state (fold off)", "prev_post off == post then pre");
      }
  }
}

// hc_post_fold = 2 / 3 (4 / 5): the boundary kernel as a cluster of 8 / 16 blocks (programmatic launches) (n = 1; other
// n and f16_mma off fall back
// to the two ops) against hc_post then hc_pre on a backend without the fold: every output bit for bit (state, mix, pre,
// post, comb, y, xn), with and without the expert sum, the split and the sublayer norm's weights; `aliased` is the
// forward pass's layout, where the pre's post and comb outputs are the buffers the post reads (each run gets fresh
// copies). Each folded call of the other layout runs twice (the second on re-poisoned outputs).
// (hc_post_fold, f16_mma): 2 without f16_mma is the fallback; 4, 5 = 2, 3 as programmatic dependents.
// 6, 7: 4 in session 12's forms (HcBoundaryLaunch::form 1, 9: the split warp off y's barrier; the partial sums
// pushed into the blocks that add them); 8: 5 (16 blocks) in form 9; 9: 7 with the TF32 split in shared memory.
// 13 (session 13, HcBoundaryPackedEqualsPostThenPre): 9 with the warp's two quarters in 3 m-tiles, tree sums,
// mbarrier pushes (no cluster barriers after the first), each warp's own split and the stream's segment sums added by
// its two warps (its stepping stones 10 … 12 and the 16-block 14 were removed in session 14).
TEST_F(CudaSmall7, HcBoundaryEqualsPostThenPre) {
  check_boundary({{2, true}, {2, false}, {3, true}, {4, true}, {5, true}, {6, true}, {7, true}, {8, true}, {9, true}});
}
TEST_F(CudaSmall7, HcBoundaryPackedEqualsPostThenPre) {
  check_boundary({{13, true}});
}
TEST_F(CudaSmall7, RemovedHcPostFoldsAreRejected) {
  // Forms removed after the H200 runs (10 … 12, 14 in session 14) and values never made: make_cuda_backend refuses
  // them instead of running hc_post then hc_pre under their name; the kept values and -1 (the default) are accepted.
  for (int v : {10, 11, 12, 14, 15, 99}) {
    cuda::CudaBackendOptions o;
    o.hc_post_fold = v;
    auto made = cuda::make_cuda_backend(o);
    ASSERT_FALSE(made.ok()) << v;
    EXPECT_NE(made.status().to_string().find("hc_post_fold"), std::string::npos) << made.status().to_string();
  }
  for (int v : {-1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 13}) {
    cuda::CudaBackendOptions o;
    o.hc_post_fold = v;
    EXPECT_TRUE(cuda::make_cuda_backend(o).ok()) << v;
  }
}

namespace {

void CudaSmall7::check_boundary(std::initializer_list<std::pair<int, bool>> sides) {
  const int64_t E = 4096, NHC = 4, HCD = NHC * E, M = (2 + NHC) * NHC;
  for (const auto& [fold, mma] : sides) {
    auto on = make(true, mma, fold), off = make(false, mma);
    ASSERT_TRUE(on && off);
    const Weight fn = hc_controls(M, HCD);
    std::vector<float> scale = {0.5f, 0.25f, 0.125f}, base = randn(static_cast<size_t>(M), 0.1f),
                       norm_w = randn(static_cast<size_t>(E), 0.5f);
    const float* scale_d = dev(scale);
    const float* base_d = dev(base);
    const float* nw_d = dev(norm_w);
    struct Case {
      int64_t n;
      bool f_add, split, with_w, aliased;
    };
    std::vector<Case> cases;
    for (bool aliased : {true, false})
      for (bool f_add : {true, false})
        for (bool split : {true, false}) cases.push_back({1, f_add, split, true, aliased});
    cases.push_back({1, true, true, false, true});  // no sublayer norm weights
    for (int64_t n : {int64_t{2}, int64_t{8}}) cases.push_back({n, true, true, true, true});  // fall back
    for (const Case& c : cases) {
      const int64_t n = c.n;
      const auto x = randn(static_cast<size_t>(n * HCD)), f = randn(static_cast<size_t>(n * E)),
                 fa = randn(static_cast<size_t>(n * E)), post = randn(static_cast<size_t>(n * NHC), 0.5f),
                 comb = randn(static_cast<size_t>(n * NHC * NHC), 0.5f);
      const float* x_d = dev(x);
      const float* f_d = dev(f);
      const float* fa_d = dev(fa);
      struct Out {
        std::vector<float> x, mix, pre, post, comb, y, xn;
      };
      // split_op: the op without its split (c.split off), then hc_split on its mix — the forward pass's late split
      // (kBranchHcSplit: the split beside the sublayer on the side lane); post and comb must be the split's bits.
      auto run = [&](Backend& be, bool pieces, int calls, bool split_op) {
        float* state = poisoned(static_cast<size_t>(n * HCD));
        float* post_in = dev(post);  // fresh: in the aliased layout the pre overwrites them
        float* comb_in = dev(comb);
        HcPostArgs pa{x_d, f_d, post_in, comb_in, state, n, E, static_cast<int32_t>(NHC)};
        pa.f_add = c.f_add ? fa_d : nullptr;
        HcPreArgs p = poisoned_pre(state, fn, scale_d, base_d, c.with_w ? nw_d : nullptr, n, E,
                                   c.aliased ? post_in : nullptr, c.aliased ? comb_in : nullptr);
        p.split = c.split && !split_op;
        EXPECT_TRUE(gpu_->sync().ok());
        for (int k = 0; k < calls; ++k) {  // aliased, a second call would read the first one's post: one call
          if (k > 0) {
            EXPECT_TRUE(be.sync().ok());
            gpu_->fill_f32(state, NAN, n * HCD);
            gpu_->fill_f32(p.xn, NAN, n * E);
            EXPECT_TRUE(gpu_->sync().ok());
          }
          if (pieces) {
            be.hc_post(pa);
            HcPreArgs q = p;
            be.hc_pre(q);
          } else {
            HcPreArgs q = p;
            q.prev_post = pa;
            be.hc_pre(q);
          }
          if (split_op)
            be.hc_split({p.mix, p.scale, p.base, n, p.nhc, p.iters, p.hc_eps, p.pre, p.post, p.comb});
        }
        EXPECT_TRUE(be.sync().ok());
        return Out{host(state, static_cast<size_t>(n * HCD)), host(p.mix, static_cast<size_t>(n * M)),
                   host(p.pre, static_cast<size_t>(n * NHC)), host(p.post, static_cast<size_t>(n * NHC)),
                   host(p.comb, static_cast<size_t>(n * NHC * NHC)), host(p.y, static_cast<size_t>(n * E)),
                   host(p.xn, static_cast<size_t>(n * E))};
      };
      const std::string where = std::string("hc boundary c") + std::to_string(cuda::hc_boundary_cluster(fold)) +
                                (fold >= 4 ? " pdl " : " ") + (fold >= 6 ? "fold" + std::to_string(fold) + " " : "") +
                                (mma ? "f16_mma" : "segments") +
                                " n" + std::to_string(n) +
                                (c.f_add ? " f_add" : "") + (c.split ? " split" : " nosplit") +
                                (c.with_w ? "" : " no_w") + (c.aliased ? " aliased" : "");
      const Out want = run(*off, true, 1, false), got = run(*on, false, c.aliased ? 1 : 2, false);
      const char* rel = "boundary == post then pre";
      if (c.split) {  // the boundary without its split + hc_split (another launch) == the split inside, every output
        const Out late = run(*on, false, 1, true);
        const char* lrel = "boundary nosplit + hc_split == post then pre";
        expect_same_bits(late.x, want.x, where + " late split state", lrel);
        expect_same_bits(late.mix, want.mix, where + " late split mix", lrel);
        expect_same_bits(late.pre, want.pre, where + " late split pre", lrel);
        expect_same_bits(late.post, want.post, where + " late split post", lrel);
        expect_same_bits(late.comb, want.comb, where + " late split comb", lrel);
        expect_same_bits(late.y, want.y, where + " late split y", lrel);
        expect_same_bits(late.xn, want.xn, where + " late split xn", lrel);
      }
      expect_same_bits(got.x, want.x, where + " state", rel);
      expect_same_bits(got.mix, want.mix, where + " mix", rel);
      expect_same_bits(got.pre, want.pre, where + " pre", rel);
      if (c.split) {
        expect_same_bits(got.post, want.post, where + " post", rel);
        expect_same_bits(got.comb, want.comb, where + " comb", rel);
      }
      expect_same_bits(got.y, want.y, where + " y", rel);
      expect_same_bits(got.xn, want.xn, where + " xn", rel);
    }
  }
}

}  // namespace
