// test_cpu_moe_threads.cpp — the CPU routed-experts op (the reference every CUDA expert kernel is checked
// against bit for bit) gives the same bits for every thread count, on every repeat, with other calls between
// (the scratch holds their values), and with two backends working at once. The case is session 10's
// intermittent CUDA one at small widths: 64 tokens all on the same 6 experts (IQ2_XXS gate/up, Q2_K down, ds4
// numerics: Q8_K activations), beside 33 randomly routed tokens at k 8. Built with -fsanitize=thread this is
// also the race check of the pool, the per-part scratch rows and the quantized activation rows (PERF.md
// "Session 11: … engineer `tsan`").
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "quant/half.h"
#include "quant/types.h"

using namespace ds4;
using namespace ds4::backend;

namespace {

constexpr int32_t kExperts = 16;
constexpr int64_t kDim = 512, kFf = 256;  // 2 and 1 Q8_K blocks a row

// Random quants with sane random f16 scales (every quant bit pattern, no encoder): [rows][cols] of `t`.
std::vector<uint8_t> random_quant(GgmlType t, int64_t rows, int64_t cols, uint64_t seed, Weight* w) {
  const uint64_t row_bytes = *type_bytes(t, static_cast<uint64_t>(cols));
  std::vector<uint8_t> b(row_bytes * rows);
  std::mt19937_64 g(seed);
  for (size_t i = 0; i < b.size(); i += 8) {
    const uint64_t r = g();
    std::memcpy(&b[i], &r, std::min<size_t>(8, b.size() - i));
  }
  std::uniform_real_distribution<float> sd(0.01f, 0.05f);
  auto put = [&](uint64_t at, float v) {
    const uint16_t h = f32_to_f16(v);
    std::memcpy(&b[at], &h, 2);
  };
  const bool q2k = t == GgmlType::Q2_K;
  const uint64_t block = q2k ? 84 : 66;  // BlockQ2_K: d at 80, dmin at 82; BlockIQ2_XXS: d at 0
  for (uint64_t k = 0; k < b.size() / block; ++k) {
    if (q2k) {
      put(k * block + 80, sd(g) / 4);
      put(k * block + 82, sd(g) / 8);
    } else {
      put(k * block, sd(g));
    }
  }
  w->type = t;
  w->data = b.data();
  w->rows = rows;
  w->cols = cols;
  w->row_bytes = row_bytes;
  return b;
}

class CpuMoeThreads : public ::testing::Test {
 protected:
  void SetUp() override {
    Weight g, u, d;
    gb_ = random_quant(GgmlType::IQ2_XXS, kExperts * kFf, kDim, 1, &g);
    ub_ = random_quant(GgmlType::IQ2_XXS, kExperts * kFf, kDim, 2, &u);
    db_ = random_quant(GgmlType::Q2_K, kExperts * kDim, kFf, 3, &d);
    auto stack = [](Weight w, int64_t rows) {
      ExpertWeights e;
      e.first = w;
      e.first.rows = rows;
      e.expert_bytes = static_cast<uint64_t>(rows) * w.row_bytes;
      e.n_expert = kExperts;
      return e;
    };
    base_.gate = stack(g, kFf);
    base_.up = stack(u, kFf);
    base_.down = stack(d, kDim);
    base_.dim = kDim;
    base_.ff = kFf;
    base_.clamp = 0.5f;
    std::mt19937 rng(7);
    make_case(cases_[0], rng, 64, 6, true);   // every token on the same 6 experts: one group of 64 pairs each
    make_case(cases_[1], rng, 33, 8, false);  // random routing: many small groups
  }

  struct Case {
    int64_t n = 0;
    int32_t k = 0;
    std::vector<float> x, wts;
    std::vector<int32_t> ids;
  };
  static void make_case(Case& c, std::mt19937& rng, int64_t n, int32_t k, bool same) {
    c.n = n;
    c.k = k;
    std::normal_distribution<float> nd(0.0f, 1.0f);
    c.x.resize(static_cast<size_t>(n * kDim));
    for (auto& v : c.x) v = nd(rng);
    std::vector<int32_t> all(kExperts);
    for (int32_t e = 0; e < kExperts; ++e) all[e] = e;
    if (same) std::shuffle(all.begin(), all.end(), rng);
    for (int64_t i = 0; i < n; ++i) {
      if (!same) std::shuffle(all.begin(), all.end(), rng);
      c.ids.insert(c.ids.end(), all.begin(), all.begin() + k);
    }
    c.wts.resize(c.ids.size());
    for (auto& v : c.wts) v = std::uniform_real_distribution<float>(0.1f, 1.0f)(rng);
  }

  // out [n][dim], poisoned with NaN first (the op overwrites every value).
  std::vector<float> run(Backend& be, const Case& c) const {
    std::vector<float> out(static_cast<size_t>(c.n * kDim), NAN);
    MoeArgs a = base_;
    a.x = c.x.data();
    a.ids = c.ids.data();
    a.weights = c.wts.data();
    a.n = c.n;
    a.k = c.k;
    a.out = out.data();
    be.moe(a);
    return out;
  }

  // How many values of `got` differ from `want` in their bits.
  static int64_t differing(const std::vector<float>& got, const std::vector<float>& want) {
    if (got.size() != want.size()) return -1;
    int64_t d = 0;
    for (size_t i = 0; i < got.size(); ++i) d += std::memcmp(&got[i], &want[i], 4) != 0;
    return d;
  }

  std::vector<uint8_t> gb_, ub_, db_;
  MoeArgs base_;
  Case cases_[2];
};

// 1 thread is the reference; every other thread count (parts of the (row, token) items and of the activation
// rows split differently, scratch rows per part) gives its bits on three rounds of both calls, alternating.
TEST_F(CpuMoeThreads, SameBitsForEveryThreadCountAndRepeat) {
  std::vector<float> want[2];
  {
    auto one = cpu::make_cpu_backend({1});
    for (int c = 0; c < 2; ++c) want[c] = run(*one, cases_[c]);
  }
  for (int c = 0; c < 2; ++c)
    for (float v : want[c]) ASSERT_TRUE(std::isfinite(v));
  for (int threads : {2, 3, 4, 7, 16}) {
    auto be = cpu::make_cpu_backend({threads});
    for (int round = 0; round < 3; ++round)
      for (int c = 0; c < 2; ++c)
        EXPECT_EQ(differing(run(*be, cases_[c]), want[c]), 0)
            << threads << " threads, round " << round << ", " << (c ? "random routing" : "same experts");
  }
}

// Two backends (two pools, two sets of scratch) driven from two threads at once, as a process holding several
// backends may: nothing is shared between them, so each gives the 1-thread bits.
TEST_F(CpuMoeThreads, TwoBackendsAtOnce) {
  std::vector<float> want[2];
  {
    auto one = cpu::make_cpu_backend({1});
    for (int c = 0; c < 2; ++c) want[c] = run(*one, cases_[c]);
  }
  int64_t diff[2] = {0, 0};
  auto work = [&](int side) {
    auto be = cpu::make_cpu_backend({3});
    for (int round = 0; round < 3; ++round)
      for (int c = 0; c < 2; ++c) diff[side] += differing(run(*be, cases_[(c + side) % 2]), want[(c + side) % 2]);
  };
  std::thread other(work, 1);
  work(0);
  other.join();
  EXPECT_EQ(diff[0], 0);
  EXPECT_EQ(diff[1], 0);
}

// The op's matmuls at the Flash widths' activation split: 64 rows of 4,096 (gate/up: IQ2_XXS) or 2,048 (down:
// Q2_K) values are quantized to Q8_K in 8 or 4 parts (ThreadPool::kMinWorkPerPart), which the small experts
// above never split. 48 weight rows keep it cheap; every thread count gives the 1-thread bits.
TEST(CpuMoeThreadsMatmul, FlashWidthActivationSplitsGiveTheSameBits) {
  for (const auto& [type, cols] : {std::pair{GgmlType::IQ2_XXS, int64_t{4096}}, std::pair{GgmlType::Q2_K, int64_t{2048}}}) {
    constexpr int64_t rows = 48, n = 64;
    Weight w;
    const auto bytes = random_quant(type, rows, cols, 11, &w);
    std::mt19937 rng(5);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n * cols));
    for (auto& v : x) v = nd(rng);
    auto run = [&](int threads) {
      auto be = cpu::make_cpu_backend({threads});
      std::vector<float> y(static_cast<size_t>(n * rows), NAN);
      be->matmul({w, x.data(), cols, y.data(), rows, n, MatmulNumerics::ds4});
      return y;
    };
    const auto want = run(1);
    for (float v : want) ASSERT_TRUE(std::isfinite(v));
    for (int threads : {2, 3, 5, 8, 16}) {
      const auto got = run(threads);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << type_name(type) << ", " << threads << " threads";
    }
  }
}

}  // namespace
