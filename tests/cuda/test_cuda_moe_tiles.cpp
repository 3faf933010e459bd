// test_cuda_moe_tiles.cpp — the expert-tile routed experts (moe_tiles.cu, 1..64 tokens) at the Flash
// shapes (E 4096, F 2048, IQ2_XXS gate/up, Q2_K down) against the CPU moe op, against the previous
// kernels (CudaBackendOptions::expert_tiles = false: gemv_decode.cu up to 4 tokens, gemv_skinny.cu below
// 64 pairs, the grouped tensor-core GEMM above) and against the first tile kernels
// (CudaBackendOptions::expert_tiles_lean = false) and the lean tile kernels (expert_tiles_fast = false)
// bit for bit, and one token's output at n = 1, 40 and 64 bit for bit on the fast, lean and first tile
// kernels, and the warp tiles (CudaBackendOptions::expert_tiles_warp_max = 64, moe_warp_tiles.cu) against the
// CPU and the fast block tiles (expert_tiles_warp_max = 0) bit for bit, and the row tiles
// (CudaBackendOptions::expert_row_tiles_min = 1, moe_row_tiles.cu: the second shapes and the first shapes,
// with the fast decode) against the CPU and the fast block tiles bit for bit (the warp and block sides with
// expert_row_tiles_min = 0; the default side runs the second shapes from 8 tokens, with the byte-permute
// IQ2_XXS decode up to 16), and the one-token kernels (CudaBackendOptions::expert_one_token,
// moe_one_token.cu; with and without expert_tiles_pdl) and the warp tiles as programmatic dependent launches
// (expert_tiles_pdl) against the CPU and the fast block tiles bit for bit at the batch sizes they run, and
// session 10's one-token paths (expert_one_token V + 10·F: the down kernel adding the slots, gate/up variant 7
// without the prologue, variant 6 with explicit shared addresses) likewise, with a bad id and a repeated expert. The
// session 11's lean one-token kernels (moe_one_lean.cu: expert_one_token 28, 57, 58, 59) likewise, at every slot
// count 1 … 8 too (OneTokenLeanEverySlotCount), and session 12's 59 with the gate/up kernel's L2 prefetches
// (559) likewise, and session 13's 559 with the gate/up decode's selector OR as an integer multiply-add (1559), also
// with half-block lanes (3559), likewise. The
// default backend runs the one-token kernels (moe_one_lean.cu's gate/up variant 9 with its L2 prefetch of the down
// weights and session 13's decode + the fold-5 slot-summing down kernel, expert_one_token 3559) at 1 token, the warp
// tiles (PDL) at 2..7, the row tiles from 8. Routing: random distinct experts per token, and every token on the same 6 experts (what
// a file with zero router weights gives); k = 6 and 8; a clamp that bites on some SwiGLU inputs.
// Against the CPU: bit for bit (the H200 run of 2026-11-30 00:25 UTC measured max|d| = 0 in every case),
// and the PARITY line also reports the tolerance check of test_cuda_matmul.cpp's CudaMoe (5e-4·max|y|).
#include <algorithm>
#include <cstring>

#include "cuda_test_util.h"
#include "moe_test_util.h"

using namespace ds4;
using namespace ds4::backend;
using namespace ds4::test;

namespace {

constexpr int32_t kNE = 32, kDim = 4096, kFf = 2048;

class CudaMoeTiles : public CudaOpsTest {
 protected:
  void SetUp() override {
    CudaOpsTest::SetUp();
    if (IsSkipped()) return;
    // One backend per kernel family, each with one option changed from the defaults.
    auto make = [](void (*change)(cuda::CudaBackendOptions&), std::unique_ptr<Backend>& to) {
      cuda::CudaBackendOptions o;
      change(o);
      auto p = cuda::make_cuda_backend(o);
      ASSERT_TRUE(p.ok()) << p.status().to_string();
      to = std::move(p).value();
    };
    make([](cuda::CudaBackendOptions& o) { o.expert_tiles = false; }, prev_);
    make([](cuda::CudaBackendOptions& o) { o.expert_tiles_lean = false; }, first_);
    make([](cuda::CudaBackendOptions& o) { o.expert_tiles_fast = false; }, lean_);
    make([](cuda::CudaBackendOptions& o) {
      o.expert_tiles_warp_max = 64;
      o.expert_row_tiles_min = 0;
    }, warp_);
    make([](cuda::CudaBackendOptions& o) {
      o.expert_tiles_warp_max = 0;
      o.expert_row_tiles_min = 0;
    }, block_);
    make([](cuda::CudaBackendOptions& o) {
      o.expert_row_tiles_min = 1;
      o.expert_row_tiles_perm = false;
    }, rows_);
    make([](cuda::CudaBackendOptions& o) {
      o.expert_row_tiles_min = 1;
      o.expert_row_tiles_v2 = false;
      o.expert_row_tiles_perm = false;
    }, v1_);
    make([](cuda::CudaBackendOptions& o) {
      o.expert_one_token = 1;
      o.expert_tiles_pdl = 0;
    }, one_);
    make([](cuda::CudaBackendOptions& o) {
      o.expert_one_token = 1;
      o.expert_tiles_pdl = true;
    }, onepdl_);
    make([](cuda::CudaBackendOptions& o) {
      o.expert_one_token = 0;
      o.expert_tiles_pdl = true;
    }, warppdl_);
    make([](cuda::CudaBackendOptions& o) {
      o.expert_one_token = 2;
      o.expert_tiles_pdl = 0;
    }, one2_);
    make([](cuda::CudaBackendOptions& o) {
      o.expert_one_token = 3;
      o.expert_tiles_pdl = 0;
    }, one3_);
    make([](cuda::CudaBackendOptions& o) {
      o.expert_one_token = 4;
      o.expert_tiles_pdl = 0;
    }, one4_);
    make([](cuda::CudaBackendOptions& o) {
      o.expert_one_token = 2;
      o.expert_tiles_pdl = true;
    }, one2pdl_);
    for (int f = 0; f < 4; ++f) {
      cuda::CudaBackendOptions o;
      o.expert_one_token = 4 + 10 * (f + 1);
      auto p = cuda::make_cuda_backend(o);
      ASSERT_TRUE(p.ok()) << p.status().to_string();
      fold_[f] = std::move(p).value();
    }
    make([](cuda::CudaBackendOptions& o) { o.expert_one_token = 6; }, one6_);
    make([](cuda::CudaBackendOptions& o) { o.expert_one_token = 36; }, one6f_);
    make([](cuda::CudaBackendOptions& o) { o.expert_one_token = 17; }, slots_[0]);
    make([](cuda::CudaBackendOptions& o) { o.expert_one_token = 27; }, slots_[1]);
    make([](cuda::CudaBackendOptions& o) { o.expert_one_token = 37; }, slots_[2]);
    make([](cuda::CudaBackendOptions& o) { o.expert_one_token = 47; }, slots_[3]);
    make([](cuda::CudaBackendOptions& o) { o.expert_one_token = 28; }, lean_sides_[0]);
    make([](cuda::CudaBackendOptions& o) { o.expert_one_token = 57; }, lean_sides_[1]);
    make([](cuda::CudaBackendOptions& o) { o.expert_one_token = 58; }, lean_sides_[2]);
    make([](cuda::CudaBackendOptions& o) { o.expert_one_token = 59; }, lean_sides_[3]);
    make([](cuda::CudaBackendOptions& o) { o.expert_one_token = 559; }, pf_side_);
    make([](cuda::CudaBackendOptions& o) { o.expert_one_token = 1559; }, s13_sides_[0]);
    make([](cuda::CudaBackendOptions& o) { o.expert_one_token = 3559; }, s13_sides_[1]);
    if (HasFatalFailure()) return;
    gb_ = random_weight(GgmlType::IQ2_XXS, int64_t{kNE} * kFf, kDim, &g0_);
    ub_ = random_weight(GgmlType::IQ2_XXS, int64_t{kNE} * kFf, kDim, &u0_);
    db_ = random_weight(GgmlType::Q2_K, int64_t{kNE} * kDim, kFf, &d0_);
    cpu_args_.gate = experts(g0_, gb_.data(), kFf);
    cpu_args_.up = experts(u0_, ub_.data(), kFf);
    cpu_args_.down = experts(d0_, db_.data(), kDim);
    for (int b = 0; b < kSides; ++b) {
      Backend& be = side(b);
      MoeArgs& g = side_args_[b];
      auto up = [&](ExpertWeights e, const std::vector<uint8_t>& bytes) {
        auto d = be.map_weight(bytes.data(), bytes.size());
        EXPECT_TRUE(d.ok());
        e.first.data = d.ok() ? *d : nullptr;
        return e;
      };
      g.gate = up(cpu_args_.gate, gb_);
      g.up = up(cpu_args_.up, ub_);
      g.down = up(cpu_args_.down, db_);
    }
    // A clamp that bites: the 80th percentile of |gate·x| over one expert's rows.
    auto x = randn(kDim);
    std::vector<float> gv(kFf);
    cpu_->matmul({cpu_args_.gate.expert(3), x.data(), kDim, gv.data(), kFf, 1});
    for (auto& v : gv) v = std::fabs(v);
    std::nth_element(gv.begin(), gv.begin() + kFf * 8 / 10, gv.end());
    clamp_ = gv[kFf * 8 / 10];
  }

  // Side 0: the default backend (fast expert tiles), 1: the previous kernels, 2: the first tile kernels,
  // 3: the lean tile kernels, 4: the warp tiles at every n, 5: the fast block tiles at every n, 6: the row
  // tiles' second shapes with the fast decode at every n, 7: their first shapes with the fast decode, 8: the
  // one-token kernels' variant 1 (n = 1; the default kernels above), 9: the same with expert_tiles_pdl, 10:
  // the default kernels with expert_tiles_pdl (the warp tiles up to 7 tokens), 11, 12: the one-token kernels' gate/up
  // variants 2 and 3, 13: variant 4 (two rows per item; side 0's at n = 1, with PDL), 14: variant 2 with PDL
  // (the default before variant 4).
  // 15 … 18: variant 4 with the down kernel adding the slots (expert_one_token 14, 24, 34, 44: a warp per tile,
  // two warps per tile, each with the hidden rows quantized inside it; PDL as the default), 19: gate/up variant 6
  // (variant 4 with the tables read at explicit shared addresses), 20: variant 6 with fold 3, 21 … 24: gate/up
  // variant 7 (no prologue: slots and x quantized inside) with folds 1 … 4 (expert_one_token 17, 27, 37, 47).
  // Session 11 (moe_one_lean.cu): 25: gate/up variant 8 with fold 2 (28), 26: variant 7 with the fold-5 down
  // kernel (57), 27: both (58), 28: gate/up variant 9 (variant 8 as 16 warps × 2 stages) with fold 5 (59).
  // Session 12: 29: 59 with the gate/up kernel's L2 prefetch of the down weights (moe_one_lean.h LeanPrefetch
  // mode 5: expert_one_token 559) — no arithmetic changes, so the same bits.
  // Session 13: 30: 559 with the gate/up decode's selector OR as an integer multiply-add (1559), 31: the same with
  // half-block lanes (3559) — the same integers, so the same bits.
  static constexpr int kSides = 32;
  Backend& side(int b) {
    Backend* s[kSides] = {gpu_.get(),     prev_.get(),     first_.get(),    lean_.get(),     warp_.get(),
                          block_.get(),   rows_.get(),     v1_.get(),       one_.get(),      onepdl_.get(),
                          warppdl_.get(), one2_.get(),     one3_.get(),     one4_.get(),     one2pdl_.get(),
                          fold_[0].get(), fold_[1].get(),  fold_[2].get(),  fold_[3].get(),  one6_.get(),
                          one6f_.get(),   slots_[0].get(), slots_[1].get(), slots_[2].get(), slots_[3].get(),
                          lean_sides_[0].get(), lean_sides_[1].get(), lean_sides_[2].get(), lean_sides_[3].get(),
                          pf_side_.get(), s13_sides_[0].get(), s13_sides_[1].get()};
    return *s[b];
  }

  static ExpertWeights experts(Weight w, void* data, int64_t rows) {
    return expert_stack(w, data, rows, kNE);
  }

  // Distinct random experts per token, or the same `k` experts for every token.
  std::vector<int32_t> routing(int64_t n, int32_t k, bool same) {
    return random_routing(rng_, kNE, n, k, same);
  }

  // out [n][dim] of side `b` (see side()).
  std::vector<float> run_gpu(int b, const std::vector<float>& x, const std::vector<int32_t>& ids,
                             const std::vector<float>& wts, int64_t n, int32_t k) {
    Backend& be = side(b);
    std::vector<Buffer>& keep = b == 0 ? bufs_ : side_bufs_[b];  // freed before their backend
    auto put = [&](const void* h, uint64_t bytes) {
      auto buf = be.alloc(bytes + 16, MemCategory::scratch);
      EXPECT_TRUE(buf.ok());
      be.upload(buf->data(), h, bytes);
      void* p = buf->data();
      keep.push_back(std::move(buf).value());
      return p;
    };
    auto out = be.alloc(static_cast<uint64_t>(n * kDim) * 4, MemCategory::scratch);
    EXPECT_TRUE(out.ok());
    be.fill_f32(out->f32(), NAN, n * kDim);
    const auto* dx = static_cast<const float*>(put(x.data(), x.size() * 4));
    const auto* dids = static_cast<const int32_t*>(put(ids.data(), ids.size() * 4));
    const auto* dwts = static_cast<const float*>(put(wts.data(), wts.size() * 4));
    be.moe(moe_call(side_args_[b], dx, dids, dwts, n, k, kDim, kFf, clamp_, out->f32()));
    EXPECT_TRUE(be.sync().ok());
    std::vector<float> h(static_cast<size_t>(n * kDim));
    be.download(h.data(), out->data(), h.size() * 4);
    keep.push_back(std::move(out).value());
    return h;
  }

  std::vector<float> run_cpu(const std::vector<float>& x, const std::vector<int32_t>& ids,
                             const std::vector<float>& wts, int64_t n, int32_t k) {
    std::vector<float> out(static_cast<size_t>(n * kDim));
    cpu_->moe(moe_call(cpu_args_, x.data(), ids.data(), wts.data(), n, k, kDim, kFf, clamp_, out.data()));
    return out;
  }

  // Fast expert tiles vs the CPU (tolerance and bits), vs the previous kernels, the first and the lean
  // tile kernels (bit for bit); the first and lean tile kernels vs the CPU's bits too.
  void check(int64_t n, int32_t k, bool same) {
    const auto x = randn(static_cast<size_t>(n * kDim));
    const auto ids = routing(n, k, same);
    std::vector<float> wts(ids.size());
    for (auto& v : wts) v = std::uniform_real_distribution<float>(0.1f, 1.0f)(rng_);
    const auto tiles = run_gpu(0, x, ids, wts, n, k);
    const auto prev = run_gpu(1, x, ids, wts, n, k);
    const auto first = run_gpu(2, x, ids, wts, n, k);
    const auto lean = run_gpu(3, x, ids, wts, n, k);
    const auto warp = run_gpu(4, x, ids, wts, n, k);
    const auto block = run_gpu(5, x, ids, wts, n, k);
    const auto rows = run_gpu(6, x, ids, wts, n, k);
    const auto v1rows = run_gpu(7, x, ids, wts, n, k);
    const auto want = run_cpu(x, ids, wts, n, k);
    const std::string what = std::string("moe tiles flash k") + std::to_string(k) + " n" + std::to_string(n) +
                             (same ? " same experts" : " random");
    expect_close(tiles, want, 5e-4, 1e-7, what);
    EXPECT_EQ(std::memcmp(tiles.data(), want.data(), tiles.size() * 4), 0) << what << ": not the CPU's bits";
    const bool same_bits = std::memcmp(tiles.data(), prev.data(), tiles.size() * 4) == 0;
    EXPECT_TRUE(same_bits) << what << ": expert tiles and the previous kernels differ";
    std::printf("PARITY %-44s n=%-9zu tiles == previous kernels bit for bit: %s\n", what.c_str(), tiles.size(),
                same_bits ? "ok" : "FAIL");
    EXPECT_EQ(std::memcmp(first.data(), want.data(), first.size() * 4), 0) << what << ": first tiles not the CPU's bits";
    const bool same_first = std::memcmp(tiles.data(), first.data(), tiles.size() * 4) == 0;
    EXPECT_TRUE(same_first) << what << ": fast and first tile kernels differ";
    std::printf("PARITY %-44s n=%-9zu fast tiles == first tile kernels bit for bit: %s\n", what.c_str(), tiles.size(),
                same_first ? "ok" : "FAIL");
    EXPECT_EQ(std::memcmp(lean.data(), want.data(), lean.size() * 4), 0) << what << ": lean tiles not the CPU's bits";
    const bool same_lean = std::memcmp(tiles.data(), lean.data(), tiles.size() * 4) == 0;
    EXPECT_TRUE(same_lean) << what << ": fast and lean tile kernels differ";
    std::printf("PARITY %-44s n=%-9zu fast tiles == lean tile kernels bit for bit: %s\n", what.c_str(), tiles.size(),
                same_lean ? "ok" : "FAIL");
    EXPECT_EQ(std::memcmp(warp.data(), want.data(), warp.size() * 4), 0) << what << ": warp tiles not the CPU's bits";
    const bool same_warp = std::memcmp(warp.data(), block.data(), warp.size() * 4) == 0;
    EXPECT_TRUE(same_warp) << what << ": warp tiles and fast block tiles differ";
    std::printf("PARITY %-44s n=%-9zu warp tiles == fast block tiles bit for bit: %s\n", what.c_str(), tiles.size(),
                same_warp ? "ok" : "FAIL");
    EXPECT_EQ(std::memcmp(rows.data(), want.data(), rows.size() * 4), 0) << what << ": row tiles not the CPU's bits";
    const bool same_rows = std::memcmp(rows.data(), block.data(), rows.size() * 4) == 0;
    EXPECT_TRUE(same_rows) << what << ": row tiles and fast block tiles differ";
    std::printf("PARITY %-44s n=%-9zu row tiles == fast block tiles bit for bit: %s\n", what.c_str(), tiles.size(),
                same_rows ? "ok" : "FAIL");
    EXPECT_EQ(std::memcmp(v1rows.data(), want.data(), v1rows.size() * 4), 0) << what << ": v1 row tiles not the CPU's bits";
    const bool same_v1 = std::memcmp(v1rows.data(), block.data(), v1rows.size() * 4) == 0;
    EXPECT_TRUE(same_v1) << what << ": v1 row tiles and fast block tiles differ";
    std::printf("PARITY %-44s n=%-9zu v1 row tiles == fast block tiles bit for bit: %s\n", what.c_str(),
                tiles.size(), same_v1 ? "ok" : "FAIL");
    // The one-token kernels (and PDL launches) where they run; above they equal side 0 by construction.
    for (int b : {8, 9, 10, 11, 12, 13, 14}) {
      if (n > (b == 10 ? 7 : 1)) continue;
      const char* name = b == 8    ? "one-token kernels"
                         : b == 9  ? "one-token kernels + PDL"
                         : b == 10 ? "warp tiles + PDL"
                         : b == 11 ? "one-token kernels v2"
                         : b == 12 ? "one-token kernels v3"
                         : b == 13 ? "one-token kernels v4"
                                   : "one-token kernels v2 + PDL";
      const auto got = run_gpu(b, x, ids, wts, n, k);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << what << ": " << name << " not the CPU's bits";
      const bool same = std::memcmp(got.data(), block.data(), got.size() * 4) == 0;
      EXPECT_TRUE(same) << what << ": " << name << " and fast block tiles differ";
      std::printf("PARITY %-44s n=%-9zu %s == fast block tiles bit for bit: %s\n", what.c_str(), tiles.size(), name,
                  same ? "ok" : "FAIL");
    }
  }

  std::unique_ptr<Backend> prev_, first_, lean_, warp_, block_, rows_, v1_, one_, onepdl_, warppdl_, one2_, one3_, one4_,
      one2pdl_;
  std::unique_ptr<Backend> fold_[4], one6_, one6f_, slots_[4], lean_sides_[4], pf_side_, s13_sides_[2];
  std::vector<Buffer> side_bufs_[kSides];  // the other sides' buffers: declared after them, so destroyed first
  std::vector<uint8_t> gb_, ub_, db_;
  Weight g0_, u0_, d0_;
  MoeArgs cpu_args_, side_args_[kSides];
  float clamp_ = 0;
};

TEST_F(CudaMoeTiles, RandomRoutingEveryBatchSize) {
  for (int64_t n : {1, 2, 4, 5, 8, 16, 33, 64}) check(n, 6, false);
}

TEST_F(CudaMoeTiles, AllTokensOnTheSameExperts) {
  for (int64_t n : {1, 2, 4, 5, 8, 16, 33, 64}) check(n, 6, true);
}

TEST_F(CudaMoeTiles, EightSlots) {
  for (int64_t n : {1, 5, 33}) check(n, 8, false);
  check(16, 8, true);
}

TEST_F(CudaMoeTiles, OneTokenSameBitsAtEveryBatchSize) {
  // Token t0 (its x, experts and weights) at position 0 of n = 1, 17 of n = 40 and 63 of n = 64.
  const int32_t k = 6;
  const auto x0 = randn(kDim);
  const auto ids0 = routing(1, k, false);
  std::vector<float> w0(k);
  for (auto& v : w0) v = std::uniform_real_distribution<float>(0.1f, 1.0f)(rng_);
  // fast tiles at n = 1, 40, 64, then the first, the lean tile kernels, the warp tiles, the row tiles and
  // the one-token kernels (n = 1; the default kernels at 40 and 64)
  std::vector<std::vector<float>> got;
  for (int b : {0, 2, 3, 4, 6, 7, 8}) {
    for (auto [n, at] : {std::pair<int64_t, int64_t>{1, 0}, {40, 17}, {64, 63}}) {
      auto x = randn(static_cast<size_t>(n * kDim));
      auto ids = routing(n, k, false);
      std::vector<float> wts(ids.size(), 0.5f);
      std::copy(x0.begin(), x0.end(), x.begin() + at * kDim);
      std::copy(ids0.begin(), ids0.end(), ids.begin() + at * k);
      std::copy(w0.begin(), w0.end(), wts.begin() + at * k);
      const auto out = run_gpu(b, x, ids, wts, n, k);
      got.emplace_back(out.begin() + at * kDim, out.begin() + (at + 1) * kDim);
    }
  }
  EXPECT_EQ(got[0], got[1]) << "n = 1 vs n = 40";
  EXPECT_EQ(got[0], got[2]) << "n = 1 vs n = 64";
  for (int i = 3; i < 21; ++i)
    EXPECT_EQ(got[0], got[i]) << "fast vs "
                              << (i < 6    ? "first"
                                  : i < 9  ? "lean"
                                  : i < 12 ? "warp"
                                  : i < 15 ? "row"
                                  : i < 18 ? "v1 row"
                                           : "one-token")
                              << " tile kernels, case " << i % 3;
  const auto want = run_cpu(x0, ids0, w0, 1, k);
  expect_close(got[0], want, 5e-4, 1e-7, "moe tiles flash one token n1");
}

TEST_F(CudaMoeTiles, OneTokenKernelsSmallBatches) {
  // The one-token kernels and the PDL launches against the CPU and the fast block tiles at the batch sizes
  // where they (or the warp tiles they hand over to) run: a short test for the device run of these kernels.
  struct Case {
    int64_t n;
    int32_t k;
    bool same;
  };
  for (Case c : {Case{1, 6, false}, Case{1, 6, true}, Case{1, 8, false}, Case{2, 6, false}, Case{5, 6, true}}) {
    const auto x = randn(static_cast<size_t>(c.n * kDim));
    const auto ids = routing(c.n, c.k, c.same);
    std::vector<float> wts(ids.size());
    for (auto& v : wts) v = std::uniform_real_distribution<float>(0.1f, 1.0f)(rng_);
    const auto want = run_cpu(x, ids, wts, c.n, c.k);
    const auto block = run_gpu(5, x, ids, wts, c.n, c.k);
    const std::string what = "moe one-token k" + std::to_string(c.k) + " n" + std::to_string(c.n) +
                             (c.same ? " same experts" : " random");
    EXPECT_EQ(std::memcmp(block.data(), want.data(), want.size() * 4), 0) << what << ": block tiles not the CPU's bits";
    for (int b : {0, 8, 9, 10, 11, 12, 13, 14, 21, 22, 23, 24, 15, 16, 17, 18, 19, 20, 25, 26, 27, 28, 29, 30, 31}) {
      const auto got = run_gpu(b, x, ids, wts, c.n, c.k);
      const bool cpu = std::memcmp(got.data(), want.data(), want.size() * 4) == 0;
      const bool same = std::memcmp(got.data(), block.data(), want.size() * 4) == 0;
      EXPECT_TRUE(cpu) << what << ": side " << b << " not the CPU's bits";
      EXPECT_TRUE(same) << what << ": side " << b << " and fast block tiles differ";
      if (!cpu) expect_close(got, want, 5e-4, 1e-7, what + " side " + std::to_string(b));
      std::printf("PARITY %-36s side %-2d == CPU bits: %s, == block tiles: %s\n", what.c_str(), b, cpu ? "ok" : "FAIL",
                  same ? "ok" : "FAIL");
    }
  }
}

TEST_F(CudaMoeTiles, OneTokenRepeatedExpert) {
  // One token routed twice to the same expert (a router never does; the kernels must still be exact): the
  // group holds two pairs, which the one-token kernels run one after the other on the same weights.
  const auto x = randn(kDim);
  const std::vector<int32_t> ids = {3, 17, 3, 30, 9, 17};
  const std::vector<float> wts = {0.9f, 0.3f, 0.6f, 0.2f, 0.5f, 0.7f};
  const auto want = run_cpu(x, ids, wts, 1, 6);
  const auto block = run_gpu(5, x, ids, wts, 1, 6);
  EXPECT_EQ(std::memcmp(block.data(), want.data(), want.size() * 4), 0) << "fast block tiles not the CPU's bits";
  for (int b : {0, 4, 8, 9, 10, 11, 12, 13, 14, 21, 22, 23, 24, 15, 16, 17, 18, 19, 20, 25, 26, 27, 28, 29, 30, 31}) {
    const auto got = run_gpu(b, x, ids, wts, 1, 6);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0) << "side " << b << " not the CPU's bits";
  }
}

TEST_F(CudaMoeTiles, OutOfRangeIdGivesNaN) {
  // A corrupt expert id must not crash or read outside the tensor: its token's output is NaN.
  for (int64_t n : {1, 20, 64}) {
    auto x = randn(static_cast<size_t>(n * kDim));
    auto ids = routing(n, 6, false);
    const int64_t bad = n / 2;
    ids[bad * 6 + 2] = kNE + 5;
    std::vector<float> wts(ids.size(), 0.5f);
    for (int b : {0, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 21, 22, 23, 24, 15, 16, 17, 18, 19, 20, 25, 26, 27, 28, 29, 30, 31}) {
      const auto out = run_gpu(b, x, ids, wts, n, 6);
      for (int64_t i = 0; i < n; ++i)
        for (int d = 0; d < kDim; ++d)
          ASSERT_EQ(std::isnan(out[i * kDim + d]), i == bad) << "side " << b << " token " << i << " dim " << d;
    }
  }
}

TEST_F(CudaMoeTiles, OneTokenLeanEverySlotCount) {
  // Session 11's lean kernels (gate/up variants 8, 9, the fold-5 down kernel; sides 25 … 28), session 12's
  // prefetching gate/up (side 29), session 13's sides 30, 31 and the session-10 path (27, side 22) at every slot count the slot split meets
  // (k = 1: the second warp of a tile has no slot; odd k: the halves differ), random and repeated experts, and a bad id first or last: the CPU's bits, NaN for the
  // bad id's token.
  for (int32_t k : {1, 2, 3, 5, 7, 8}) {
    for (int mode = 0; mode < 4; ++mode) {
      const auto x = randn(kDim);
      auto ids = routing(1, k, mode == 1);
      if (mode == 2) ids[0] = kNE + 3;
      if (mode == 3) ids[static_cast<size_t>(k - 1)] = -1;
      std::vector<float> wts(ids.size());
      for (auto& v : wts) v = std::uniform_real_distribution<float>(0.1f, 1.0f)(rng_);
      const std::string what = "moe one-token lean k" + std::to_string(k) + " mode " + std::to_string(mode);
      std::vector<float> want;
      if (mode < 2) want = run_cpu(x, ids, wts, 1, k);
      for (int b : {22, 25, 26, 27, 28, 29, 30, 31}) {
        const auto got = run_gpu(b, x, ids, wts, 1, k);
        if (mode >= 2) {
          int nan = 0;
          for (float v : got) nan += std::isnan(v) ? 1 : 0;
          EXPECT_EQ(nan, kDim) << what << ": side " << b << " not NaN for a bad id";
          continue;
        }
        const bool cpu = std::memcmp(got.data(), want.data(), want.size() * 4) == 0;
        EXPECT_TRUE(cpu) << what << ": side " << b << " not the CPU's bits";
        if (!cpu) expect_close(got, want, 5e-4, 1e-7, what + " side " + std::to_string(b));
        std::printf("PARITY %-36s side %-2d == CPU bits: %s\n", what.c_str(), b, cpu ? "ok" : "FAIL");
      }
    }
  }
}

}  // namespace
