// test_cpu_ops.cpp — CPU backend ops on small hand-computable cases (MODEL.md §6-8).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "quant/half.h"
#include "quant/quantize.h"

using namespace ds4;
using namespace ds4::backend;

namespace {

std::unique_ptr<Backend> make(int threads = 2) { return cpu::make_cpu_backend({threads}); }

std::vector<float> randv(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

Weight f32_weight(const std::vector<float>& w, int64_t rows, int64_t cols) {
  Weight m;
  m.type = GgmlType::F32;
  m.data = w.data();
  m.rows = rows;
  m.cols = cols;
  m.row_bytes = cols * 4;
  return m;
}

}  // namespace

TEST(CpuOps, MatmulF32F16Q8MatchDequantizedReference) {
  auto be = make();
  const int64_t rows = 40, cols = 96, n = 5;
  auto w = randv(rows * cols, 1, 0.1f);
  auto x = randv(n * cols, 2);
  std::vector<double> ref(n * rows);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < rows; ++o) {
      double acc = 0;
      for (int64_t c = 0; c < cols; ++c) acc += double(w[o * cols + c]) * x[i * cols + c];
      ref[i * rows + o] = acc;
    }
  std::vector<float> y(n * rows);
  be->matmul({f32_weight(w, rows, cols), x.data(), cols, y.data(), rows, n, MatmulNumerics::exact});
  for (size_t k = 0; k < y.size(); ++k) EXPECT_NEAR(y[k], ref[k], 1e-5);

  // F16 weights: exact numerics equals the dequantized double dot; ds4 numerics close to it.
  std::vector<uint16_t> h(rows * cols);
  std::vector<float> wh(rows * cols);
  for (size_t k = 0; k < h.size(); ++k) {
    h[k] = f32_to_f16(w[k]);
    wh[k] = f16_to_f32(h[k]);
  }
  Weight wf16{GgmlType::F16, h.data(), rows, cols, static_cast<uint64_t>(cols * 2)};
  std::vector<float> yh(n * rows), yw(n * rows);
  be->matmul({f32_weight(wh, rows, cols), x.data(), cols, yw.data(), rows, n, MatmulNumerics::exact});
  be->matmul({wf16, x.data(), cols, yh.data(), rows, n, MatmulNumerics::exact});
  for (size_t k = 0; k < yh.size(); ++k) EXPECT_EQ(yh[k], yw[k]);
  be->matmul({wf16, x.data(), cols, yh.data(), rows, n, MatmulNumerics::ds4});
  for (size_t k = 0; k < yh.size(); ++k) EXPECT_NEAR(yh[k], yw[k], 1e-4);

  // Q8_0 weights with ds4 numerics (int8 activations): within the activation quantization error.
  std::vector<uint8_t> q(rows * (cols / 32) * 34);
  ASSERT_TRUE(quantize_rows(GgmlType::Q8_0, w.data(), q.data(), rows, cols).ok());
  Weight wq{GgmlType::Q8_0, q.data(), rows, cols, static_cast<uint64_t>(cols / 32 * 34)};
  std::vector<float> yq(n * rows), yqe(n * rows);
  be->matmul({wq, x.data(), cols, yq.data(), rows, n, MatmulNumerics::ds4});
  be->matmul({wq, x.data(), cols, yqe.data(), rows, n, MatmulNumerics::exact});
  for (size_t k = 0; k < yq.size(); ++k) {
    EXPECT_NEAR(yqe[k], ref[k], 0.02);
    EXPECT_NEAR(yq[k], yqe[k], 0.03);
  }
}

TEST(CpuOps, MatmulStridesAndRowSlice) {
  auto be = make();
  const int64_t rows = 6, cols = 4;
  std::vector<float> w(rows * cols);
  for (size_t k = 0; k < w.size(); ++k) w[k] = float(k);
  std::vector<float> x = {1, 0, 0, 0, 99, 0, 1, 0, 0, 99};  // two rows of stride 5
  std::vector<float> y(2 * 3, -1);
  be->matmul({f32_weight(w, rows, cols).row_slice(3, 3), x.data(), 5, y.data(), 3, 2, MatmulNumerics::exact});
  // rows 3..5 of w, column 0 then column 1.
  EXPECT_EQ(y[0], 12);
  EXPECT_EQ(y[1], 16);
  EXPECT_EQ(y[2], 20);
  EXPECT_EQ(y[3], 13);
  EXPECT_EQ(y[5], 21);
}

TEST(CpuOps, GroupedMatmulReadsEachGroupsOwnInputs) {
  // MatmulArgs::group_rows: rows [2g, 2g+2) of w read x[g·3 … g·3+2] (3 groups of 2 rows, 2 inputs
  // each, groups 3 apart in a row of stride 10); the last group may be short (5 rows → 2, 2, 1).
  auto be = make();
  const int64_t rows = 5, cols = 2;
  std::vector<float> w(rows * cols);
  for (size_t k = 0; k < w.size(); ++k) w[k] = float(k + 1);  // row o = (2o+1, 2o+2)
  std::vector<float> x(2 * 10, 0.0f);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t g = 0; g < 3; ++g) {
      x[i * 10 + g * 3] = float(10 * i + g + 1);
      x[i * 10 + g * 3 + 1] = 1.0f;
    }
  std::vector<float> y(2 * 6, -1.0f);
  MatmulArgs a{f32_weight(w, rows, cols), x.data(), 10, y.data(), 6, 2, MatmulNumerics::exact};
  a.group_rows = 2;
  a.group_x_stride = 3;
  be->matmul(a);
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t o = 0; o < rows; ++o) {
      const float xin = float(10 * i + o / 2 + 1);
      EXPECT_EQ(y[i * 6 + o], float(2 * o + 1) * xin + float(2 * o + 2)) << "token " << i << " row " << o;
    }
    EXPECT_EQ(y[i * 6 + 5], -1.0f);  // past w.rows: untouched
  }
}

TEST(CpuOps, RopeTailAdjacentPairsAndInverse) {
  auto be = make();
  const int heads = 2, hd = 8, rot = 4;
  auto x = randv(3 * heads * hd, 3);
  auto orig = x;
  const int32_t pos[3] = {0, 5, 1000};
  const double freq[2] = {1.0, 0.01};
  be->rope({x.data(), pos, 3, heads, hd, rot, freq, false});
  for (int t = 0; t < 3; ++t)
    for (int h = 0; h < heads; ++h) {
      const float* a = &orig[(t * heads + h) * hd];
      const float* b = &x[(t * heads + h) * hd];
      for (int d = 0; d < hd - rot; ++d) EXPECT_EQ(a[d], b[d]);  // nope dims untouched
      for (int i = 0; i < rot / 2; ++i) {
        const double th = pos[t] * freq[i];
        const float x0 = a[hd - rot + 2 * i], x1 = a[hd - rot + 2 * i + 1];
        EXPECT_NEAR(b[hd - rot + 2 * i], x0 * std::cos(th) - x1 * std::sin(th), 1e-5);
        EXPECT_NEAR(b[hd - rot + 2 * i + 1], x0 * std::sin(th) + x1 * std::cos(th), 1e-5);
      }
    }
  be->rope({x.data(), pos, 3, heads, hd, rot, freq, true});
  for (size_t k = 0; k < x.size(); ++k) EXPECT_NEAR(x[k], orig[k], 1e-5);
}

TEST(CpuOps, HcPostUsesTransposedComb) {
  auto be = make();
  const int nhc = 4, dim = 3;
  std::vector<float> x(nhc * dim), f = {1, 2, 3}, post = {0.5f, 1, 1.5f, 2}, comb(16), out(nhc * dim);
  for (int s = 0; s < nhc; ++s)
    for (int d = 0; d < dim; ++d) x[s * dim + d] = float(10 * s + d);
  for (int j = 0; j < 16; ++j) comb[j] = 0.01f * (j + 1);
  be->hc_post({x.data(), f.data(), post.data(), comb.data(), out.data(), 1, dim, nhc});
  for (int k = 0; k < nhc; ++k)
    for (int d = 0; d < dim; ++d) {
      float ref = post[k] * f[d];
      for (int j = 0; j < nhc; ++j) ref += comb[j * nhc + k] * x[j * dim + d];
      EXPECT_NEAR(out[k * dim + d], ref, 1e-5);
    }
}

TEST(CpuOps, HcPostAddsTheResidualSumFirst) {
  // f_add: post·(f + f_add) with the sum rounded once, as add() then hc_post() leave it; f unchanged.
  auto be = make();
  const int64_t n = 2, dim = 5;
  const int32_t nhc = 2;
  auto x = randv(n * nhc * dim, 1), f = randv(n * dim, 2), fa = randv(n * dim, 3), post = randv(n * nhc, 4),
       comb = randv(n * nhc * nhc, 5);
  std::vector<float> got(x.size()), want(x.size()), sum = f;
  HcPostArgs a{x.data(), f.data(), post.data(), comb.data(), got.data(), n, dim, nhc};
  a.f_add = fa.data();
  be->hc_post(a);
  be->add(sum.data(), fa.data(), n * dim);
  be->hc_post({x.data(), sum.data(), post.data(), comb.data(), want.data(), n, dim, nhc});
  EXPECT_EQ(got, want);
  EXPECT_EQ(f, randv(n * dim, 2));
}

TEST(CpuOps, NormRopeWritesEachTokenToItsRingRow) {
  // Two tokens of two sessions (ring_at), positions that wrap the 3-row ring: token t's normalized,
  // rotated row lands at row pos mod 3 of its own ring, and nowhere else.
  auto be = make();
  const int64_t n = 2, D = 4, cap = 3;
  std::vector<float> x = {1, 2, 3, 4, -1, 0.5f, 2, 0};
  std::vector<int32_t> pos = {4, 9};  // rows 1 and 0
  std::vector<double> freq = {0.5};
  std::vector<float> ring_a(cap * D, 7.0f), ring_b(cap * D, 7.0f);
  std::vector<float*> at = {ring_a.data(), ring_b.data()};
  std::vector<float> want = x;
  be->rms_norm({want.data(), want.data(), nullptr, n, D, D, 1e-6f});
  be->rope({want.data(), pos.data(), n, 1, D, 2, freq.data(), false});
  be->f16_round(want.data(), n * D);
  NormRopeArgs a{x.data(), pos.data(), n, 1, D, 2, nullptr, 1e-6f, freq.data()};
  a.f16 = true;
  a.ring_at = at.data();
  a.ring_cap = cap;
  be->norm_rope(a);
  EXPECT_EQ(x, want);
  for (int64_t d = 0; d < D; ++d) {
    EXPECT_EQ(ring_a[1 * D + d], want[d]);
    EXPECT_EQ(ring_b[0 * D + d], want[D + d]);
    EXPECT_EQ(ring_a[0 * D + d], 7.0f);
    EXPECT_EQ(ring_a[2 * D + d], 7.0f);
    EXPECT_EQ(ring_b[1 * D + d], 7.0f);
  }
}

// The ops finishing a recorded step's emitted rows (NormRopeArgs / IndexerQatArgs x_at and count):
// rows taken by address, only the first *count of the n-row bound, each with the bits of the plain call
// on the same rows; rows past the count and count 0 leave memory alone.
TEST(CpuOps, RowsByAddressAndCountEqualPlainCalls) {
  auto be = make();
  const int64_t n = 4, D = 64;
  std::vector<double> freq(8);
  for (size_t i = 0; i < freq.size(); ++i) freq[i] = std::pow(10000.0, -2.0 * static_cast<double>(i) / 16);
  for (int32_t count : {0, 1, 3}) {
    // Rows scattered over a buffer of 3n rows (row t at 3t + 1); positions per row.
    const auto src = randv(static_cast<size_t>(3 * n * D), 40 + count);
    const auto w = randv(D, 50);
    std::vector<int32_t> pos = {8, 12, 4000, 16};
    std::vector<float> scattered = src, qat = src, plain(src.begin(), src.begin() + n * D);
    std::vector<float*> at(n), qat_at(n);
    for (int64_t t = 0; t < n; ++t) {
      std::copy_n(src.begin() + (3 * t + 1) * D, D, plain.begin() + t * D);
      at[t] = scattered.data() + (3 * t + 1) * D;
      qat_at[t] = qat.data() + (3 * t + 1) * D;
    }
    std::vector<float> want = plain, want_qat = plain;
    NormRopeArgs p{want.data(), pos.data(), count, 1, D, 16, w.data(), 1e-6f, freq.data()};
    p.fp8_quant = 0;
    p.f16 = true;
    be->norm_rope(p);
    be->indexer_qat({want_qat.data(), count, D});
    be->f16_round(want_qat.data(), count * D);
    NormRopeArgs a{nullptr, pos.data(), n, 1, D, 16, w.data(), 1e-6f, freq.data()};
    a.f16 = true;
    a.x_at = at.data();
    a.count = &count;
    be->norm_rope(a);
    IndexerQatArgs q{nullptr, n, D, true};
    q.x_at = qat_at.data();
    q.count = &count;
    be->indexer_qat(q);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t d = 0; d < D; ++d) {
        const size_t at_row = static_cast<size_t>((3 * t + 1) * D + d);
        EXPECT_EQ(scattered[at_row], t < count ? want[t * D + d] : src[at_row]) << "norm_rope count " << count << " row " << t;
        EXPECT_EQ(qat[at_row], t < count ? want_qat[t * D + d] : src[at_row]) << "indexer_qat count " << count << " row " << t;
      }
    for (int64_t r = 0; r < 3 * n; ++r) {
      if (r % 3 == 1) continue;
      for (int64_t d = 0; d < D; ++d) EXPECT_EQ(scattered[r * D + d], src[r * D + d]) << "row between, " << r;
    }
  }
}

TEST(CpuOps, AttentionWithSinksRawWindowAndCompressedRows) {
  auto be = make();
  const int H = 2, D = 4, window = 3;
  const int64_t cap = 8;
  auto raw = randv(cap * D, 4);
  auto comp = randv(5 * D, 5);
  auto q = randv(2 * H * D, 6);
  const float sinks[2] = {0.3f, -1.0f};
  const int32_t pos[2] = {1, 6};            // token 1 sees raw 0..1; token 6 sees raw 4..6
  const int32_t count[2] = {0, 2};
  const int32_t idx[2 * 2] = {0, 0, 1, 4};  // token 6 sees compressed rows 1 and 4
  std::vector<float> out(2 * H * D);
  AttentionArgs a;
  a.q = q.data();
  a.pos = pos;
  a.n = 2;
  a.heads = H;
  a.head_dim = D;
  a.scale = 0.5f;
  a.sinks = sinks;
  a.raw = raw.data();
  a.raw_cap = cap;
  a.window = window;
  a.comp = comp.data();
  a.comp_count = count;
  a.comp_idx = idx;
  a.comp_idx_stride = 2;
  a.out = out.data();
  be->attention(a);
  for (int i = 0; i < 2; ++i)
    for (int h = 0; h < H; ++h) {
      std::vector<const float*> rows;
      for (int p = std::max(0, pos[i] - window + 1); p <= pos[i]; ++p) rows.push_back(&raw[(p % cap) * D]);
      for (int j = 0; j < count[i]; ++j) rows.push_back(&comp[idx[i * 2 + j] * D]);
      std::vector<double> s;
      double mx = sinks[h];
      for (auto* r : rows) {
        double dot = 0;
        for (int d = 0; d < D; ++d) dot += double(q[(i * H + h) * D + d]) * r[d];
        s.push_back(dot * 0.5);
        mx = std::max(mx, s.back());
      }
      double den = std::exp(sinks[h] - mx);
      for (double& v : s) den += (v = std::exp(v - mx));
      for (int d = 0; d < D; ++d) {
        double ref = 0;
        for (size_t j = 0; j < rows.size(); ++j) ref += s[j] / den * rows[j][d];
        EXPECT_NEAR(out[(i * H + h) * D + d], ref, 1e-5) << i << " " << h << " " << d;
      }
    }
}

// Pools a row of the r = 4 overlapping compressor by hand: softmax over the given (score, value) pairs.
static float pool(const std::vector<std::pair<float, float>>& c) {
  double mx = -1e300, den = 0, num = 0;
  for (auto& p : c) mx = std::max(mx, double(p.first));
  for (auto& p : c) {
    den += std::exp(p.first - mx);
    num += std::exp(p.first - mx) * p.second;
  }
  return float(num / den);
}

TEST(CpuOps, CompressorOverlapSeriesAndChunking) {
  const int D = 3, r = 4, width = 2 * D, T = 12;
  auto kv = randv(T * width, 7);
  auto sc = randv(T * width, 8);
  auto ape = randv(r * width, 9);
  auto run = [&](const std::vector<int>& chunks, int slots, std::vector<float>& rows, std::vector<int32_t>& rpos) {
    auto be = make();
    std::vector<float> skv(slots * width, 0.0f), ssc(slots * width, 7.0f);  // stale scores must not matter
    rows.assign(T / r * D, 0);
    rpos.assign(T / r, -1);
    int t = 0, emitted_total = 0;
    for (int c : chunks) {
      int64_t emitted = 0;
      CompressorArgs a;
      a.kv = &kv[t * width];
      a.score = &sc[t * width];
      a.ape = ape.data();
      a.n = c;
      a.pos0 = t;
      a.ratio = r;
      a.out_dim = D;
      a.overlap = true;
      a.slots = slots;
      a.state_kv = skv.data();
      a.state_score = ssc.data();
      a.out = &rows[emitted_total * D];
      a.out_pos = &rpos[emitted_total];
      a.n_out = &emitted;
      be->compressor(a);
      emitted_total += int(emitted);
      t += c;
    }
    EXPECT_EQ(emitted_total, T / r);
  };
  std::vector<float> rows, rows2;
  std::vector<int32_t> rpos, rpos2;
  run({T}, 2 * r, rows, rpos);
  run({1, 2, 5, 3, 1}, 2 * r, rows2, rpos2);  // chunking does not matter
  EXPECT_EQ(rows, rows2);
  EXPECT_EQ(rpos, rpos2);
  run({3, 9}, 5 * r, rows2, rpos2);  // nor does a longer frontier ring
  EXPECT_EQ(rows, rows2);
  for (int B = 0; B < T / r; ++B) {
    EXPECT_EQ(rpos[B], r * B);
    for (int d = 0; d < D; ++d) {
      std::vector<std::pair<float, float>> c;
      if (B > 0)  // previous block, series A (columns 0..D-1)
        for (int i = 0; i < r; ++i) {
          const int t = r * (B - 1) + i;
          c.push_back({sc[t * width + d] + ape[i * width + d], kv[t * width + d]});
        }
      for (int i = 0; i < r; ++i) {  // current block, series B (columns D..2D-1)
        const int t = r * B + i;
        c.push_back({sc[t * width + D + d] + ape[i * width + D + d], kv[t * width + D + d]});
      }
      EXPECT_NEAR(rows[B * D + d], pool(c), 1e-5) << B << " " << d;
    }
  }
}

TEST(CpuOps, CompressorNonOverlapping) {
  auto be = make();
  const int D = 2, r = 3, T = 7;
  auto kv = randv(T * D, 10);
  auto sc = randv(T * D, 11);
  auto ape = randv(r * D, 12);
  std::vector<float> skv(r * D, 0), ssc(r * D, -INFINITY), rows(2 * D);
  std::vector<int32_t> rpos(2);
  int64_t emitted = 0;
  CompressorArgs a;
  a.kv = kv.data();
  a.score = sc.data();
  a.ape = ape.data();
  a.n = T;
  a.ratio = r;
  a.out_dim = D;
  a.slots = r;
  a.state_kv = skv.data();
  a.state_score = ssc.data();
  a.out = rows.data();
  a.out_pos = rpos.data();
  a.n_out = &emitted;
  be->compressor(a);
  ASSERT_EQ(emitted, 2);
  EXPECT_EQ(rpos[1], 3);
  for (int B = 0; B < 2; ++B)
    for (int d = 0; d < D; ++d) {
      std::vector<std::pair<float, float>> c;
      for (int i = 0; i < r; ++i) c.push_back({sc[(r * B + i) * D + d] + ape[i * D + d], kv[(r * B + i) * D + d]});
      EXPECT_NEAR(rows[B * D + d], pool(c), 1e-5);
    }
}

TEST(CpuOps, IndexerTopKTiesGoToLowerRow) {
  auto be = make();
  const int heads = 2, hd = 4, nr = 6, k = 3;
  // Row scores: rows 1, 3, 4 tie at the top; row 5 is larger still; row 0 is all-negative (ReLU → 0).
  std::vector<float> q = {1, 0, 0, 0, 0, 1, 0, 0};
  std::vector<float> w = {1.0f, 0.5f};
  std::vector<float> rows = {-1, 0, 0, 0,  2, 0, 0, 0,  1, 0, 0, 0,  2, 0, 0, 0,  0, 4, 0, 0,  5, 0, 0, 0};
  const int32_t n_rows[2] = {nr, 2};
  std::vector<int32_t> idx(2 * k, -1), count(2);
  IndexerArgs a;
  a.q = q.data();
  a.w = w.data();
  a.rows = rows.data();
  a.n_rows = n_rows;
  a.n = 1;
  a.heads = heads;
  a.head_dim = hd;
  a.top_k = k;
  a.idx = idx.data();
  a.count = count.data();
  be->indexer(a);
  EXPECT_EQ(count[0], k);
  EXPECT_EQ(std::vector<int32_t>(idx.begin(), idx.begin() + 3), (std::vector<int32_t>{1, 3, 5}));
  // With no more rows than top_k, every visible row is selected without scoring.
  a.n_rows = n_rows + 1;
  be->indexer(a);
  EXPECT_EQ(count[0], 2);
  EXPECT_EQ(idx[0], 0);
  EXPECT_EQ(idx[1], 1);
}

TEST(CpuOps, RouterBiasSelectsOnlyAndHashRouting) {
  auto be = make();
  const int NE = 5, K = 2;
  std::vector<float> z = {0.1f, 2.0f, -1.0f, 1.5f, 0.0f};
  std::vector<float> bias = {0, 0, 10.0f, 0, 0};  // forces expert 2 into the selection
  std::vector<int32_t> ids(K);
  std::vector<float> w(K);
  RouterArgs a;
  a.logits = z.data();
  a.bias = bias.data();
  a.n = 1;
  a.n_expert = NE;
  a.k = K;
  a.scale = 1.5f;
  a.denom_guard = 6.103515625e-5f;
  a.ids = ids.data();
  a.weights = w.data();
  be->router(a);
  EXPECT_EQ(ids[0], 2);
  EXPECT_EQ(ids[1], 1);
  auto p = [](float v) { return std::sqrt(std::log1p(std::exp(v))); };
  EXPECT_NEAR(w[0], 1.5 * p(-1.0f) / (p(-1.0f) + p(2.0f)), 1e-6);  // unbiased scores
  EXPECT_NEAR(w[1], 1.5 * p(2.0f) / (p(-1.0f) + p(2.0f)), 1e-6);
  // Hash routing: ids come from tid2eid[token].
  const int32_t table[3 * K] = {0, 1, 4, 3, 2, 0};
  const int32_t token = 1;
  a.hash = table;
  a.vocab = 3;
  a.tokens = &token;
  be->router(a);
  EXPECT_EQ(ids[0], 4);
  EXPECT_EQ(ids[1], 3);
  EXPECT_NEAR(w[0] + w[1], 1.5, 1e-6);
}

TEST(CpuOps, SwigluClampIsOneSidedOnGate) {
  auto be = make();
  const float g[4] = {20.0f, -20.0f, 0.5f, 0.5f};
  const float u[4] = {1.0f, 1.0f, 30.0f, -30.0f};
  float h[4];
  be->swiglu({g, u, h, 4, 10.0f});
  auto silu = [](double v) { return v / (1 + std::exp(-v)); };
  EXPECT_NEAR(h[0], silu(10.0), 1e-5);        // gate clamped from above
  EXPECT_NEAR(h[1], silu(-20.0), 1e-7);       // not from below
  EXPECT_NEAR(h[2], silu(0.5) * 10.0, 1e-5);  // up clamped both ways
  EXPECT_NEAR(h[3], silu(0.5) * -10.0, 1e-5);
  be->swiglu({g, u, h, 4, 0.0f});             // no clamp
  EXPECT_NEAR(h[0], silu(20.0), 1e-4);
}

TEST(CpuOps, MoeSumsWeightedExperts) {
  auto be = make();
  const int dim = 4, ff = 3, NE = 3, K = 2, n = 3;
  auto gw = randv(NE * ff * dim, 20), uw = randv(NE * ff * dim, 21), dw = randv(NE * dim * ff, 22);
  auto x = randv(n * dim, 23);
  const int32_t ids[n * K] = {0, 2, 1, 0, 2, 1};
  const float wts[n * K] = {0.7f, 0.8f, 1.0f, 0.5f, 0.2f, 1.3f};
  auto ew = [](const std::vector<float>& v, int rows, int cols) {
    ExpertWeights e;
    e.first = f32_weight(v, rows, cols);
    e.expert_bytes = uint64_t(rows) * cols * 4;
    e.n_expert = 3;
    return e;
  };
  std::vector<float> out(n * dim);
  MoeArgs a;
  a.gate = ew(gw, ff, dim);
  a.up = ew(uw, ff, dim);
  a.down = ew(dw, dim, ff);
  a.x = x.data();
  a.ids = ids;
  a.weights = wts;
  a.n = n;
  a.k = K;
  a.dim = dim;
  a.ff = ff;
  a.clamp = 1.0f;
  a.numerics = MatmulNumerics::exact;
  a.out = out.data();
  be->moe(a);
  for (int i = 0; i < n; ++i)
    for (int d = 0; d < dim; ++d) {
      double ref = 0;
      for (int j = 0; j < K; ++j) {
        const int e = ids[i * K + j];
        for (int f = 0; f < ff; ++f) {
          double g = 0, u = 0;
          for (int c = 0; c < dim; ++c) {
            g += gw[(e * ff + f) * dim + c] * x[i * dim + c];
            u += uw[(e * ff + f) * dim + c] * x[i * dim + c];
          }
          g = std::min(g, 1.0);
          u = std::clamp(u, -1.0, 1.0);
          ref += wts[i * K + j] * dw[(e * dim + d) * ff + f] * (g / (1 + std::exp(-g)) * u);
        }
      }
      EXPECT_NEAR(out[i * dim + d], ref, 1e-5);
    }
}

TEST(CpuOps, AllocCountsBytesByCategory) {
  auto be = make();
  const uint64_t before = be->allocated()[MemCategory::raw_kv];
  {
    auto b = be->alloc(1000, MemCategory::raw_kv);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(be->allocated()[MemCategory::raw_kv], before + 1000);
    for (int i = 0; i < 250; ++i) EXPECT_EQ(b->f32()[i], 0.0f);
  }
  EXPECT_EQ(be->allocated()[MemCategory::raw_kv], before);
}

// A batched step: queries of three sessions in one call, each reading its own ring and compressed rows
// through the per-query pointer tables, equal (bit for bit) one call per session.
TEST(CpuOps, AttentionPerQuerySessionStateEqualsOneCallPerSession) {
  auto be = make();
  const int H = 3, D = 8, window = 4, S = 3;
  const int64_t cap = 7;
  std::vector<std::vector<float>> raw, comp;
  for (int s = 0; s < S; ++s) {
    raw.push_back(randv(cap * D, 10 + s));
    comp.push_back(randv(6 * D, 20 + s));
  }
  // Session 0: two queries at 2, 3; session 1: one at 9 (ring wrapped); session 2: three at 4, 5, 6.
  const std::vector<int> sess = {0, 0, 1, 2, 2, 2};
  const std::vector<int32_t> pos = {2, 3, 9, 4, 5, 6};
  const std::vector<int32_t> count = {0, 1, 3, 1, 1, 2};
  const std::vector<int32_t> idx = {0, 0, 0, 0, 2, 5, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 3, 0};  // [6][3]
  const int n = static_cast<int>(pos.size());
  auto q = randv(n * H * D, 30);
  const float sinks[3] = {0.1f, -0.5f, 1.0f};
  std::vector<const float*> raw_at, comp_at;
  for (int i = 0; i < n; ++i) {
    raw_at.push_back(raw[sess[i]].data());
    comp_at.push_back(comp[sess[i]].data());
  }
  for (bool selected : {false, true}) {
    AttentionArgs a;
    a.q = q.data();
    a.pos = pos.data();
    a.n = n;
    a.heads = H;
    a.head_dim = D;
    a.scale = 0.35f;
    a.sinks = sinks;
    a.raw = raw[0].data();
    a.raw_cap = cap;
    a.window = window;
    a.comp = comp[0].data();
    a.comp_count = count.data();
    a.comp_idx = selected ? idx.data() : nullptr;
    a.comp_idx_stride = 3;
    a.raw_at = raw_at.data();
    a.comp_at = comp_at.data();
    std::vector<float> batched(n * H * D, NAN), solo(n * H * D, NAN);
    a.out = batched.data();
    be->attention(a);
    for (int i = 0; i < n;) {  // one call per session over its consecutive queries
      int j = i;
      while (j < n && sess[j] == sess[i]) ++j;
      AttentionArgs b = a;
      b.q = q.data() + i * H * D;
      b.pos = pos.data() + i;
      b.n = j - i;
      b.raw = raw[sess[i]].data();
      b.comp = comp[sess[i]].data();
      b.comp_count = count.data() + i;
      b.comp_idx = selected ? idx.data() + i * 3 : nullptr;
      b.raw_at = nullptr;
      b.comp_at = nullptr;
      b.out = solo.data() + i * H * D;
      be->attention(b);
      i = j;
    }
    EXPECT_EQ(batched, solo) << (selected ? "with" : "without") << " selection";
  }
}

TEST(CpuOps, IndexerPerQueryRowsEqualOneCallPerSession) {
  auto be = make();
  const int heads = 2, hd = 8, k = 3, n = 4;
  const auto r0 = randv(9 * hd, 40), r1 = randv(5 * hd, 41);
  const auto q = randv(n * heads * hd, 42), w = randv(n * heads, 43);
  const std::vector<int32_t> n_rows = {9, 7, 5, 2};  // queries 0, 1 read r0; 2, 3 read r1
  const std::vector<const float*> rows_at = {r0.data(), r0.data(), r1.data(), r1.data()};
  std::vector<int32_t> idx(n * k, -1), cnt(n, -1), sidx(n * k, -1), scnt(n, -1);
  IndexerArgs a{q.data(), w.data(), r0.data(), n_rows.data(), n, heads, hd, k, idx.data(), cnt.data()};
  a.rows_at = rows_at.data();
  be->indexer(a);
  for (int s = 0; s < 2; ++s) {
    IndexerArgs b{q.data() + 2 * s * heads * hd, w.data() + 2 * s * heads, s ? r1.data() : r0.data(),
                  n_rows.data() + 2 * s, 2, heads, hd, k, sidx.data() + 2 * s * k, scnt.data() + 2 * s};
    be->indexer(b);
  }
  EXPECT_EQ(cnt, scnt);
  for (int i = 0; i < n; ++i)
    EXPECT_EQ(std::vector<int32_t>(idx.begin() + i * k, idx.begin() + i * k + cnt[i]),
              std::vector<int32_t>(sidx.begin() + i * k, sidx.begin() + i * k + scnt[i]))
        << "query " << i;
}

// A batched step's compressor call: three sessions (their own frontier rings and output rows, at
// different positions, one closing two blocks) in one call ≡ one call per session, bit for bit.
TEST(CpuOps, CompressorSegmentsEqualOneCallPerSession) {
  auto be = make();
  const int D = 4, r = 4, width = 2 * D, slots = 3 * r;
  const std::vector<int> pos0 = {7, 3, 11}, n = {1, 6, 2};  // columns 0 | 1…6 | 7…8
  const int cols = 9;
  auto kv = randv(cols * width, 50), sc = randv(cols * width, 51), ape = randv(r * width, 52);
  std::vector<std::vector<float>> skv, ssc, skv2, ssc2;
  for (int s = 0; s < 3; ++s) {
    skv.push_back(randv(slots * width, 60 + s));
    ssc.push_back(randv(slots * width, 70 + s));
  }
  skv2 = skv;
  ssc2 = ssc;
  std::vector<float> out(6 * D, NAN), out2(6 * D, NAN);
  std::vector<int32_t> opos(cols, -1), opos2(cols, -1);
  CompressorArgs a;
  a.kv = kv.data();
  a.score = sc.data();
  a.ape = ape.data();
  a.ratio = r;
  a.out_dim = D;
  a.overlap = true;
  a.slots = slots;
  std::vector<CompressorSegment> seg;
  int col = 0;
  for (int s = 0; s < 3; ++s) {
    seg.push_back({col, n[s], pos0[s], skv[s].data(), ssc[s].data(), out.data() + 2 * s * D, opos.data() + col});
    col += n[s];
  }
  a.segments = 3;
  a.seg = seg.data();
  be->compressor(a);
  col = 0;
  int64_t total = 0;
  for (int s = 0; s < 3; ++s) {
    CompressorArgs b = a;
    b.segments = 0;
    b.seg = nullptr;
    b.kv = kv.data() + col * width;
    b.score = sc.data() + col * width;
    b.n = n[s];
    b.pos0 = pos0[s];
    b.state_kv = skv2[s].data();
    b.state_score = ssc2[s].data();
    b.out = out2.data() + 2 * s * D;
    b.out_pos = opos2.data() + col;
    int64_t emitted = 0;
    b.n_out = &emitted;
    be->compressor(b);
    EXPECT_EQ(emitted, (pos0[s] + n[s]) / r - pos0[s] / r) << "session " << s;
    total += emitted;
    col += n[s];
  }
  EXPECT_EQ(total, 4);  // 7 closes block 1; 3…8 close blocks 0 and 1; 11…12 close block 2
  EXPECT_EQ(skv, skv2);
  EXPECT_EQ(ssc, ssc2);
  for (size_t i = 0; i < out.size(); ++i)
    if (!std::isnan(out2[i])) EXPECT_EQ(out[i], out2[i]) << i;
    else EXPECT_TRUE(std::isnan(out[i])) << i;
  EXPECT_EQ(opos, opos2);
}
