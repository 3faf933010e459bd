// test_cuda_moe_rows.cpp — the routed-expert row tiles' balanced runs (CudaBackendOptions::expert_row_tiles_v3,
// moe_row_tiles.cu balanced_run) against the CPU moe op bit for bit: with many experts (CudaMoeRows: 600 experts
// at small widths, E 512, F 256: IQ2_XXS gate/up rows of 2 blocks = one slab, Q2_K down rows of 1 block), so a
// batch routes to more than 256 distinct experts and the runs' search walks past the 8 chunks of 32 groups it
// holds in registers; and at the Flash widths (CudaMoeRowsFlash: 32 experts, E 4096, F 2048). Every variant
// (balanced runs with the byte-permute and with the fast IQ2_XXS decode, the runs before) with distinct
// routing, all tokens on the same experts (one group of many pairs: its passes), k 6 and 8, and a bad id (NaN
// for its token only). A mismatch is localised (tokens, 32-row output tiles, experts, first values) and says
// whether the CPU op, run again, gives its first result. The case that failed once in session 10 (64 tokens on the
// same 6 experts; every side at once differed from the CPU) repeated: 30 rounds on every side against one CPU result
// computed twice, alone and beside a second stream's expert calls, and its CPU reference rerun (SameExpertsRepeated*,
// CpuReferenceRepeated). test_cuda_moe_tiles.cpp holds the other expert kernels' checks.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include "cuda_test_util.h"
#include "moe_test_util.h"

using namespace ds4;
using namespace ds4::backend;
using namespace ds4::test;

namespace {

// Experts and widths of one fixture.
struct Shape {
  int32_t ne;
  int64_t dim, ff;
};

class RowsTest : public CudaOpsTest {
 protected:
  explicit RowsTest(Shape s) : ne_(s.ne), dim_(s.dim), ff_(s.ff) {}

  void SetUp() override {
    CudaOpsTest::SetUp();
    if (IsSkipped()) return;
    auto make = [](bool v3, bool perm, std::unique_ptr<Backend>& to) {
      cuda::CudaBackendOptions o;
      o.expert_row_tiles_min = 1;
      o.expert_row_tiles_v3 = v3 ? 1 : 0;
      o.expert_row_tiles_perm = perm;
      auto p = cuda::make_cuda_backend(o);
      ASSERT_TRUE(p.ok()) << p.status().to_string();
      to = std::move(p).value();
    };
    make(true, true, sides_[0]);
    make(true, false, sides_[1]);
    make(false, true, sides_[2]);
    if (HasFatalFailure()) return;
    gb_ = random_weight(GgmlType::IQ2_XXS, int64_t{ne_} * ff_, dim_, &g0_);
    ub_ = random_weight(GgmlType::IQ2_XXS, int64_t{ne_} * ff_, dim_, &u0_);
    db_ = random_weight(GgmlType::Q2_K, int64_t{ne_} * dim_, ff_, &d0_);
    cpu_args_.gate = experts(g0_, gb_.data(), ff_);
    cpu_args_.up = experts(u0_, ub_.data(), ff_);
    cpu_args_.down = experts(d0_, db_.data(), dim_);
    for (int b = 0; b < kSides; ++b) {
      auto up = [&](ExpertWeights e, const std::vector<uint8_t>& bytes) {
        auto d = sides_[b]->map_weight(bytes.data(), bytes.size());
        EXPECT_TRUE(d.ok());
        e.first.data = d.ok() ? *d : nullptr;
        return e;
      };
      side_args_[b].gate = up(cpu_args_.gate, gb_);
      side_args_[b].up = up(cpu_args_.up, ub_);
      side_args_[b].down = up(cpu_args_.down, db_);
    }
  }

  // 0: balanced runs, byte-permute decode; 1: balanced runs, fast decode; 2: the runs before (the default:
  // byte-permute decode up to 16 tokens).
  static constexpr int kSides = 3;
  static constexpr const char* kNames[kSides] = {"v3 perm", "v3 fast", "v2"};

  ExpertWeights experts(Weight w, void* data, int64_t rows) const {
    return expert_stack(w, data, rows, ne_);
  }

  std::vector<int32_t> routing(int64_t n, int32_t k, bool same) {
    return random_routing(rng_, ne_, n, k, same);
  }

  std::vector<float> run_gpu(int b, const std::vector<float>& x, const std::vector<int32_t>& ids,
                             const std::vector<float>& wts, int64_t n, int32_t k) {
    Backend& be = *sides_[b];
    auto put = [&](const void* h, uint64_t bytes) {
      auto buf = be.alloc(bytes + 16, MemCategory::scratch);
      EXPECT_TRUE(buf.ok());
      be.upload(buf->data(), h, bytes);
      void* p = buf->data();
      bufs_[b].push_back(std::move(buf).value());
      return p;
    };
    auto out = be.alloc(static_cast<uint64_t>(n * dim_) * 4, MemCategory::scratch);
    EXPECT_TRUE(out.ok());
    be.fill_f32(out->f32(), NAN, n * dim_);
    const auto* dx = static_cast<const float*>(put(x.data(), x.size() * 4));
    const auto* dids = static_cast<const int32_t*>(put(ids.data(), ids.size() * 4));
    const auto* dwts = static_cast<const float*>(put(wts.data(), wts.size() * 4));
    be.moe(moe_call(side_args_[b], dx, dids, dwts, n, k, dim_, ff_, 0.5f, out->f32()));
    EXPECT_TRUE(be.sync().ok());
    std::vector<float> h(static_cast<size_t>(n * dim_));
    be.download(h.data(), out->data(), h.size() * 4);
    bufs_[b].push_back(std::move(out).value());
    return h;
  }

  std::vector<float> run_cpu(const std::vector<float>& x, const std::vector<int32_t>& ids,
                             const std::vector<float>& wts, int64_t n, int32_t k) {
    std::vector<float> out(static_cast<size_t>(n * dim_));
    cpu_->moe(moe_call(cpu_args_, x.data(), ids.data(), wts.data(), n, k, dim_, ff_, 0.5f, out.data()));
    return out;
  }

  // Where `got` differs from `want` ([n][dim], routing ids [n][k]; token `bad` not compared): "" when equal bit
  // for bit, else the count, the tokens that differ with the 32-row output tiles (a down item's rows) of each, or
  // "all" when a token's whole row differs (its hidden rows: a gate/up item or their quantization), the token's
  // experts, and the first values. Localises a wrong item: a down pass of ≤ 4 pairs shows as ≤ 4 tokens in one
  // tile, a gate/up pass of ≤ 8 pairs as ≤ 8 whole rows.
  std::string mismatch(const std::vector<float>& got, const std::vector<float>& want, const std::vector<int32_t>& ids,
                       int64_t n, int32_t k, int64_t bad) const {
    if (got.size() != want.size()) return "size " + std::to_string(got.size()) + " vs " + std::to_string(want.size());
    const int64_t tiles = dim_ / 32;
    int64_t diff = 0, nan = 0;
    std::string tokens, first;
    for (int64_t i = 0; i < n; ++i) {
      std::vector<int64_t> bad_tiles;
      for (int64_t d = 0; d < dim_; ++d) {
        const size_t at = static_cast<size_t>(i * dim_ + d);
        const bool differs = i == bad ? !std::isnan(got[at]) : std::memcmp(&got[at], &want[at], 4) != 0;
        if (!differs) continue;
        ++diff;
        nan += std::isnan(got[at]);
        if (bad_tiles.empty() || bad_tiles.back() != d / 32) bad_tiles.push_back(d / 32);
        if (first.size() < 200) {
          uint32_t gb = 0, wb = 0;
          std::memcpy(&gb, &got[at], 4);
          std::memcpy(&wb, &want[at], 4);
          char buf[96];
          std::snprintf(buf, sizeof buf, " [%ld][%ld] %.9g (%08x) vs %.9g (%08x);", static_cast<long>(i),
                        static_cast<long>(d), got[at], gb, want[at], wb);
          first += buf;
        }
      }
      if (bad_tiles.empty()) continue;
      tokens += " t" + std::to_string(i) + "(e";
      for (int32_t j = 0; j < k; ++j) {
        if (j) tokens += ',';
        tokens += std::to_string(ids[static_cast<size_t>(i * k + j)]);
      }
      tokens += "):";
      if (static_cast<int64_t>(bad_tiles.size()) == tiles) {
        tokens += "all";
      } else {
        for (size_t j = 0; j < bad_tiles.size() && j < 8; ++j) {
          if (j) tokens += ',';
          tokens += std::to_string(bad_tiles[j]);
        }
        if (bad_tiles.size() > 8) tokens += ",…(" + std::to_string(bad_tiles.size()) + " tiles)";
      }
    }
    if (diff == 0) return "";
    return std::to_string(diff) + " values differ (" + std::to_string(nan) + " NaN); tokens (experts): tiles of 32 rows" +
           tokens + "; first:" + first;
  }

  // Every side equals the CPU bit for bit; a bad id's token is NaN on the GPU (the CPU op leaves that slot's
  // row as whatever its scratch held, so its token is not compared).
  void check(int64_t n, int32_t k, bool same, int64_t bad = -1) {
    const auto x = randn(static_cast<size_t>(n * dim_));
    auto ids = routing(n, k, same);
    if (bad >= 0) ids[bad * k + 1] = ne_ + 3;
    std::vector<int32_t> used;
    for (int32_t id : ids)
      if (id < ne_) used.push_back(id);
    std::sort(used.begin(), used.end());
    const auto distinct = std::unique(used.begin(), used.end()) - used.begin();
    std::vector<float> wts(ids.size());
    for (auto& v : wts) v = std::uniform_real_distribution<float>(0.1f, 1.0f)(rng_);
    const auto want = run_cpu(x, ids, wts, n, k);
    const std::string what = "moe rows " + std::to_string(ne_) + "x" + std::to_string(dim_) + " k" + std::to_string(k) + " n" +
                             std::to_string(n) + (same ? " same experts" : " random") + (bad >= 0 ? " bad id" : "");
    std::vector<float> first_gpu;
    bool rerun = false;
    for (int b = 0; b < kSides; ++b) {
      const auto got = run_gpu(b, x, ids, wts, n, k);
      if (b == 0) first_gpu = got;
      const std::string diff = mismatch(got, want, ids, n, k, bad);
      // Which side is wrong (session 10: every side differed from the CPU at once, once): the CPU result computed
      // again, and this side against the first one.
      std::string why;
      if (!diff.empty() && !rerun) {
        rerun = true;
        const std::string cpu = mismatch(run_cpu(x, ids, wts, n, k), want, ids, n, k, bad);
        why += cpu.empty() ? " | the CPU op again: the same bits" : " | the CPU op again differs from its first result: " + cpu;
      }
      if (!diff.empty() && b > 0) {
        const std::string g = mismatch(got, first_gpu, ids, n, k, bad);
        why += std::string(" | against ") + kNames[0] + ": " + (g.empty() ? "the same bits" : g);
      }
      EXPECT_TRUE(diff.empty()) << what << ": " << kNames[b] << " not the CPU's bits: " << diff << why;
      std::printf("PARITY %-44s n=%-7zu (%3ld experts) %s row tiles == CPU bit for bit: %s\n", what.c_str(),
                  got.size(), static_cast<long>(distinct), kNames[b], diff.empty() ? "ok" : "FAIL");
    }
  }

  // Session 13's rare failure hunted: `count` rounds of fresh 64-token, k 6 randomly routed inputs (the weights of
  // SetUp) on side b (2: the engine's kernels at 64 tokens) against the CPU op bit for bit, one "ROUND" line per
  // differing round (its localisation) — a few rounds a second where RandomRouting makes one input a second. The
  // rounds' inputs follow from the gtest seed, so a differing (seed, round) replays on another binary.
  void rounds(int count, int b) {
    constexpr int64_t n = 64;
    constexpr int32_t k = 6;
    int fails = 0;
    for (int r = 0; r < count; ++r) {
      const auto x = randn(static_cast<size_t>(n * dim_));
      const auto ids = routing(n, k, false);
      std::vector<float> wts(ids.size());
      for (auto& v : wts) v = std::uniform_real_distribution<float>(0.1f, 1.0f)(rng_);
      const auto want = run_cpu(x, ids, wts, n, k);
      const std::string diff = mismatch(run_gpu(b, x, ids, wts, n, k), want, ids, n, k, -1);
      bufs_[b].clear();
      if (!diff.empty()) {
        ++fails;
        ADD_FAILURE() << "round " << r << ": " << kNames[b] << " not the CPU's bits: " << diff;
      }
      std::printf("ROUND %d seed %d %s %s\n", r, ::testing::UnitTest::GetInstance()->random_seed(),
                  diff.empty() ? "ok" : "FAIL", diff.c_str());
      std::fflush(stdout);
    }
    std::printf("PARITY moe rows %dx%ld k6 n64 random, %d rounds, %s == CPU bit for bit: %s (%d differ)\n", ne_,
                static_cast<long>(dim_), count, kNames[b], fails ? "FAIL" : "ok", fails);
  }

  // The intermittent case of session 10 (64 tokens on the same 6 experts: one group of 64 pairs per expert, 8
  // gate/up and 16 down passes per item) `rounds` times on every side against one CPU result, which is itself
  // computed twice (a flaky reference would fail every side); between rounds every side runs a randomly routed
  // call of another size (33 tokens, k 8), so the scratch rows and the SMs' shared memory hold other values than
  // the case's own — a read of anything not written in this call shows. `load`: meanwhile another backend on
  // its own stream runs randomly routed calls without pause (kernels of two streams share the SMs: other timing
  // than a GPU alone or time-sliced between processes). Every mismatch is printed with mismatch()'s
  // localisation and its side and round.
  void repeated(int rounds, bool load) {
    constexpr int64_t n = 64, n2 = 33;
    constexpr int32_t k = 6, k2 = 8;
    const auto x = randn(static_cast<size_t>(n * dim_));
    const auto ids = routing(n, k, true);
    std::vector<float> wts(ids.size());
    for (auto& v : wts) v = std::uniform_real_distribution<float>(0.1f, 1.0f)(rng_);
    const auto x2 = randn(static_cast<size_t>(n2 * dim_));
    const auto ids2 = routing(n2, k2, false);
    std::vector<float> wts2(ids2.size());
    for (auto& v : wts2) v = std::uniform_real_distribution<float>(0.1f, 1.0f)(rng_);
    const auto want = run_cpu(x, ids, wts, n, k);
    const std::string cpu_diff = mismatch(run_cpu(x, ids, wts, n, k), want, ids, n, k, -1);
    EXPECT_TRUE(cpu_diff.empty()) << "the CPU op is not repeatable: " << cpu_diff;
    std::atomic<bool> stop{false};
    std::atomic<int64_t> load_calls{0};
    std::thread noise;
    if (load) {
      cuda::CudaBackendOptions o;
      o.expert_row_tiles_min = 1;
      auto p = cuda::make_cuda_backend(o);
      ASSERT_TRUE(p.ok()) << p.status().to_string();
      noise_ = std::move(p).value();
      MoeArgs na = cpu_args_;
      auto up = [&](ExpertWeights& e, const std::vector<uint8_t>& bytes) {
        auto d = noise_->map_weight(bytes.data(), bytes.size());
        ASSERT_TRUE(d.ok());
        e.first.data = *d;
      };
      up(na.gate, gb_);
      up(na.up, ub_);
      up(na.down, db_);
      if (HasFatalFailure()) return;
      noise = std::thread([&, na] {
        Backend& be = *noise_;
        auto put = [&](const void* h, uint64_t bytes) {
          auto buf = be.alloc(bytes + 16, MemCategory::scratch);
          be.upload(buf->data(), h, bytes);
          void* p = buf->data();
          noise_bufs_.push_back(std::move(buf).value());
          return p;
        };
        auto out = be.alloc(static_cast<uint64_t>(n2 * dim_) * 4, MemCategory::scratch);
        auto* o = out->f32();
        noise_bufs_.push_back(std::move(out).value());
        const auto* dx = static_cast<const float*>(put(x2.data(), x2.size() * 4));
        const auto* di = static_cast<const int32_t*>(put(ids2.data(), ids2.size() * 4));
        const auto* dw = static_cast<const float*>(put(wts2.data(), wts2.size() * 4));
        while (!stop.load()) {
          for (int i = 0; i < 8; ++i) be.moe(moe_call(na, dx, di, dw, n2, k2, dim_, ff_, 0.5f, o));
          (void)be.sync();
          load_calls += 8;
        }
      });
    }
    int fails[kSides] = {};
    std::vector<float> first_gpu;  // round 0's first side: whether a wrong round agrees with the other GPU runs
    for (int r = 0; r < rounds; ++r) {
      for (int b = 0; b < kSides; ++b) {
        const auto got = run_gpu(b, x, ids, wts, n, k);
        if (first_gpu.empty()) first_gpu = got;
        const std::string diff = mismatch(got, want, ids, n, k, -1);
        if (!diff.empty()) {
          ++fails[b];
          ADD_FAILURE() << "round " << r << " " << kNames[b] << " not the CPU's bits: " << diff
                        << " | against round 0's " << kNames[0] << ": " << mismatch(got, first_gpu, ids, n, k, -1);
        }
        (void)run_gpu(b, x2, ids2, wts2, n2, k2);  // other values into the scratch and shared memory
      }
    }
    stop = true;
    if (noise.joinable()) noise.join();
    for (int b = 0; b < kSides; ++b)
      std::printf("PARITY moe rows %dx%ld k6 n64 same experts, %d rounds%s %s row tiles == CPU bit for bit: %s (%d "
                  "rounds differ)\n",
                  ne_, static_cast<long>(dim_), rounds, load ? " under load" : "", kNames[b], fails[b] ? "FAIL" : "ok",
                  fails[b]);
    if (load) std::printf("load: %ld calls on a second stream\n", static_cast<long>(load_calls.load()));
  }

  // The CPU reference of the same case `times` times (its thread pool over all cores; under 4 test processes
  // the cores are oversubscribed, as in session 10's final check, where every GPU side of this case differed
  // from the CPU's result at once): each run against the first, bit for bit, a difference localised.
  void cpu_repeated(int times) {
    constexpr int64_t n = 64;
    constexpr int32_t k = 6;
    const auto x = randn(static_cast<size_t>(n * dim_));
    const auto ids = routing(n, k, true);
    std::vector<float> wts(ids.size());
    for (auto& v : wts) v = std::uniform_real_distribution<float>(0.1f, 1.0f)(rng_);
    const auto first = run_cpu(x, ids, wts, n, k);
    int fails = 0;
    for (int r = 1; r < times; ++r) {
      const std::string diff = mismatch(run_cpu(x, ids, wts, n, k), first, ids, n, k, -1);
      if (!diff.empty()) {
        ++fails;
        ADD_FAILURE() << "CPU run " << r << " differs from run 0: " << diff;
      }
    }
    std::printf("PARITY moe rows %dx%ld k6 n64 same experts, CPU op %d times == its first run bit for bit: %s (%d "
                "differ)\n", ne_, static_cast<long>(dim_), times, fails ? "FAIL" : "ok", fails);
  }

  const int32_t ne_;
  const int64_t dim_, ff_;
  std::unique_ptr<Backend> sides_[kSides], noise_;
  std::vector<Buffer> bufs_[kSides], noise_bufs_;  // declared after the backends: destroyed first
  std::vector<uint8_t> gb_, ub_, db_;
  Weight g0_, u0_, d0_;
  MoeArgs cpu_args_, side_args_[kSides];
};

class CudaMoeRows : public RowsTest {
 protected:
  CudaMoeRows() : RowsTest({600, 512, 256}) {}
};

class CudaMoeRowsFlash : public RowsTest {
 protected:
  CudaMoeRowsFlash() : RowsTest({32, 4096, 2048}) {}
};

TEST_F(CudaMoeRows, ManyExpertsRandomRouting) {
  for (int64_t n : {1, 8, 33, 64}) check(n, 8, false);  // n = 64: 512 pairs on ~350 experts (11 chunks)
  check(40, 6, false);
}

TEST_F(CudaMoeRows, ManyExpertsSameRouting) {
  for (int64_t n : {9, 64}) check(n, 6, true);  // 6 groups of n pairs: several passes each
}

TEST_F(CudaMoeRows, ManyExpertsBadId) { check(50, 8, false, 17); }

TEST_F(CudaMoeRowsFlash, RandomRouting) {
  for (int64_t n : {8, 33, 64}) check(n, 6, false);
  check(33, 8, false);
}

TEST_F(CudaMoeRowsFlash, AllTokensOnTheSameExperts) { check(64, 6, true); }

TEST_F(CudaMoeRowsFlash, BadId) { check(20, 6, false, 7); }

// The case that failed once in session 10's final check (4 test processes on one GPU), repeated: alone, and
// with a second stream's expert calls running beside it.
TEST_F(CudaMoeRowsFlash, SameExpertsRepeated) { repeated(30, false); }

TEST_F(CudaMoeRowsFlash, SameExpertsRepeatedUnderLoad) { repeated(30, true); }

// Its CPU reference, repeated.
TEST_F(CudaMoeRowsFlash, CpuReferenceRepeated) { cpu_repeated(4); }

// Session 13's failure (RandomRouting at 64 tokens: one token's outputs off by ~1e-5, CUDA's expf ≠ glibc's in the
// SwiGLU) hunted over many inputs: run with --gtest_also_run_disabled_tests under a time limit.
TEST_F(CudaMoeRowsFlash, DISABLED_RandomRoutingRounds) { rounds(2000, 2); }

}  // namespace
