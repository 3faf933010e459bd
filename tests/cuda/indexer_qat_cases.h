// indexer_qat_cases.h — the indexer query's RoPE + QAT test cases (IndexerQatArgs with n_rot and the head
// weights' scale), once for test_cuda_fused.cpp (fused ≡ pieces) and test_cuda_small5.cpp (warp rows ≡
// previous): the shapes, one case's host data (rows, positions, inverse frequencies, weights) and the op's
// arguments over device copies. Deliberately not here: uploads and comparisons (each test's own relation).
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace ds4::test {

// Flash (64 heads of 128, 64 RoPE dims) with and without half rounding, tiny (2 × 64, 16 dims) and a row
// rotated whole (3 × 32).
struct RopeQatShape {
  int32_t heads, dim, n_rot;
  bool f16;
};
inline constexpr RopeQatShape kRopeQatShapes[] = {{64, 128, 64, true}, {64, 128, 64, false}, {2, 64, 16, true}, {3, 32, 32, false}};

// One case of n tokens: x [n·heads][dim] (σ 2), pos [n] in [0, 2^20], freq [n_rot/2] = 10000^(−2i/n_rot),
// the head weights [n·heads] (σ 3).
struct RopeQatCase {
  RopeQatShape s;
  int64_t n = 0, rows = 0;
  std::string tag;
  std::vector<float> x, wts;
  std::vector<int32_t> pos;
  std::vector<double> freq;
};

// Draws in this order: x, the positions, the weights (the fixture's generators: randn(count, σ), randint(lo, hi)).
inline RopeQatCase make_rope_qat_case(RopeQatShape s, int64_t n,
                                      const std::function<std::vector<float>(size_t, float)>& randn,
                                      const std::function<int32_t(int32_t, int32_t)>& randint) {
  RopeQatCase c;
  c.s = s;
  c.n = n;
  c.rows = n * s.heads;
  c.tag = "indexer rope+qat H" + std::to_string(s.heads) + " D" + std::to_string(s.dim) + " R" +
          std::to_string(s.n_rot) + (s.f16 ? " f16" : "") + " n" + std::to_string(n);
  c.x = randn(static_cast<size_t>(c.rows * s.dim), 2.0f);
  c.pos.resize(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) c.pos[static_cast<size_t>(t)] = randint(0, 1 << 20);
  c.freq.resize(static_cast<size_t>(s.n_rot / 2));
  for (size_t i = 0; i < c.freq.size(); ++i) c.freq[i] = std::pow(10000.0, -2.0 * static_cast<double>(i) / s.n_rot);
  c.wts = randn(static_cast<size_t>(c.rows), 3.0f);
  return c;
}

// The op over device rows x and positions pos (the case's freq, host memory); with scale_x the forward pass's
// head weights' scale in the same op.
inline backend::IndexerQatArgs rope_qat_args(const RopeQatCase& c, float* x, const int32_t* pos, float* scale_x) {
  backend::IndexerQatArgs q{x, c.rows, c.s.dim, c.s.f16};
  q.pos = pos;
  q.heads = c.s.heads;
  q.n_rot = c.s.n_rot;
  q.freq = c.freq.data();
  if (scale_x) {
    q.scale_x = scale_x;
    q.scale = 0.0110485f;
    q.scale_count = c.rows;
  }
  return q;
}

}  // namespace ds4::test
