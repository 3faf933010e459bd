// quantize_iq2xxs.cpp — IQ2_XXS block encoder (FORMATS.md §2.6, §2.8).
//
// Each 8-value chunk must be one of the 256 grid tuples (magnitudes 8/25/43 per element) with an
// even number of negative signs. Per 32-value group we search a scale s (value = s * grid byte):
// for each candidate s every chunk is rounded element-wise to the nearest magnitude level; if that
// tuple is in the grid it is taken, otherwise the best of its precomputed nearest grid neighbours
// (two distance shells) under the weighted error. The candidate whose chunks give the best
// least-squares fit wins. Unlike quants.c (which models the levels as 1/3/5) the error is measured
// with the decoder's real magnitudes 8/25/43. Then d = max_g s_g / 3.875, and per group the 4-bit ls
// nearest to s_g or (best effort) one of its neighbours, whichever gives the lowest error once the
// chunks are re-picked against the quantized group scale the decoder will actually use.
//
// The tuple -> grid / neighbour index is built once on first use (a function-local static, immutable
// afterwards, initialised thread-safely by the language): ~50 KB, built in a few ms.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "quant/half.h"
#include "quant/iq2xxs_tables.h"
#include "quant/quant_math.h"
#include "quant/quantize.h"

namespace ds4 {

using quant_detail::clamp_int;
using quant_detail::kInputClamp;
using quant_detail::max_f;
using quant_detail::min_f;
using quant_detail::nearest_int;

namespace {

constexpr int kLevelMag[3] = {8, 25, 43};
constexpr int kTuples = 6561;  // 3^8 level tuples, index Σ level_i * 3^i

int grid_byte(int k, int i) { return static_cast<int>((kIq2xxsGrid[k] >> (8 * i)) & 0xff); }

struct Iq2Index {
  // grid index of each level tuple, or -1 when the tuple is not in the grid.
  std::array<int16_t, kTuples> grid_of{};
  // off-grid tuples: candidates neighbours[begin[t] .. begin[t+1]) (grid indices).
  std::array<uint32_t, kTuples + 1> begin{};
  std::vector<uint8_t> neighbours;
  // magnitude[k][i] = byte i of grid entry k as a float (saves shift+convert in the inner loops).
  float magnitude[256][8];

  Iq2Index() {
    for (int k = 0; k < 256; ++k)
      for (int i = 0; i < 8; ++i) magnitude[k][i] = static_cast<float>(grid_byte(k, i));
    grid_of.fill(-1);
    for (int k = 0; k < 256; ++k) {
      int t = 0;
      for (int i = 7; i >= 0; --i) t = 3 * t + ((kIq2xxsKgrid[k] >> (2 * i)) & 3);
      grid_of[t] = static_cast<int16_t>(k);
    }
    for (int t = 0; t < kTuples; ++t) {
      begin[t] = static_cast<uint32_t>(neighbours.size());
      if (grid_of[t] >= 0) continue;
      int mag[8];
      for (int i = 0, r = t; i < 8; ++i, r /= 3) mag[i] = kLevelMag[r % 3];
      int dist[256];
      for (int k = 0; k < 256; ++k) {
        int d2 = 0;
        for (int i = 0; i < 8; ++i) d2 += (grid_byte(k, i) - mag[i]) * (grid_byte(k, i) - mag[i]);
        dist[k] = d2;
      }
      // The two smallest distinct distances define the two shells kept.
      int d0 = INT32_MAX, d1 = INT32_MAX;
      for (int k = 0; k < 256; ++k) {
        if (dist[k] < d0) {
          d1 = d0;
          d0 = dist[k];
        } else if (dist[k] > d0 && dist[k] < d1) {
          d1 = dist[k];
        }
      }
      for (int k = 0; k < 256; ++k)
        if (dist[k] <= d1) neighbours.push_back(static_cast<uint8_t>(k));
    }
    begin[kTuples] = static_cast<uint32_t>(neighbours.size());
  }
};

const Iq2Index& iq2_index() {
  static const Iq2Index index;
  return index;
}

// Best grid entry for chunk targets t[8] (target magnitudes; negative for a parity-flipped element)
// with weights w[8] at scale s, given inverse scale inv = 1/s.
int pick_grid(const Iq2Index& ix, const float* t, const float* w, float s, float inv) {
  int tuple = 0;
  for (int i = 7; i >= 0; --i) {
    const float u = t[i] * inv;  // boundaries between 8/25/43 at 16.5 and 34
    tuple = 3 * tuple + (u > 16.5f) + (u > 34.0f);
  }
  if (ix.grid_of[tuple] >= 0) return ix.grid_of[tuple];
  int best = -1;
  float best_err = INFINITY;
  for (uint32_t n = ix.begin[tuple]; n < ix.begin[tuple + 1]; ++n) {
    const int k = ix.neighbours[n];
    float err = 0;
    for (int i = 0; i < 8; ++i) {
      const float diff = s * ix.magnitude[k][i] - t[i];
      err += w[i] * diff * diff;
    }
    if (err < best_err) {
      best_err = err;
      best = k;
    }
  }
  return best >= 0 ? best : ix.neighbours[ix.begin[tuple]];
}

// Σ w t b and Σ w b² of a group for chosen grid indices (b = grid byte).
void group_sums(const Iq2Index& ix, const float* t, const float* w, const int* idx, float* sum_tb, float* sum_bb) {
  float tb = 0, bb = 0;
  for (int c = 0; c < 4; ++c)
    for (int i = 0; i < 8; ++i) {
      const float b = ix.magnitude[idx[c]][i];
      tb += w[8 * c + i] * t[8 * c + i] * b;
      bb += w[8 * c + i] * b * b;
    }
  *sum_tb = tb;
  *sum_bb = bb;
}

struct GroupFit {
  float scale = 0;  // s: value ≈ s * grid byte (0: the group decodes to zero)
  int idx[4] = {0, 0, 0, 0};
};

GroupFit fit_group(const Iq2Index& ix, const float* t, const float* w, QuantEffort effort) {
  GroupFit fit;
  float max_t = 0;
  for (int i = 0; i < 32; ++i) max_t = max_f(max_t, t[i]);
  if (!(max_t > 1e-30f)) return fit;
  // Candidates s = max_t / (43 * f). f near 1 puts the largest value on the top level 43 (f < 1
  // lets it clip there to serve the rest better); f near 25/43 and 8/43 put it on the lower levels,
  // which is what flat groups (all values similar) need.
  static constexpr float kBest[] = {0.19f, 0.45f, 0.52f, 0.58f, 0.64f, 0.7f, 0.76f, 0.82f,
                                    0.88f, 0.94f, 1.0f, 1.06f, 1.14f};
  static constexpr float kFast[] = {0.19f, 0.58f, 0.82f};
  const float* fs = effort == QuantEffort::fast ? kFast : kBest;
  const int nf = effort == QuantEffort::fast ? static_cast<int>(std::size(kFast)) : static_cast<int>(std::size(kBest));
  float best_score = -1;  // (Σ w t b)^2 / Σ w b²: the error reduction of the LS-optimal scale
  for (int c = 0; c < nf; ++c) {
    const float s = max_t / (43.0f * fs[c]);
    const float inv = 1.0f / s;
    int idx[4];
    for (int k = 0; k < 4; ++k) idx[k] = pick_grid(ix, t + 8 * k, w + 8 * k, s, inv);
    float tb, bb;
    group_sums(ix, t, w, idx, &tb, &bb);
    if (!(bb > 0) || !(tb > 0)) continue;
    const float score = tb * tb / bb;
    if (score > best_score) {
      best_score = score;
      fit.scale = tb / bb;
      std::copy(idx, idx + 4, fit.idx);
    }
  }
  if (best_score < 0) {  // weights all zero: fall back to the plain max scale
    fit.scale = max_t / 43.0f;
    for (int k = 0; k < 4; ++k) fit.idx[k] = pick_grid(ix, t + 8 * k, w + 8 * k, fit.scale, 1.0f / fit.scale);
  }
  return fit;
}

}  // namespace

void quantize_block_iq2_xxs(const float* xin, BlockIQ2_XXS* y, const float* importance, QuantEffort effort) {
  const Iq2Index& ix = iq2_index();
  float x[kQK_K];
  for (int i = 0; i < kQK_K; ++i) x[i] = min_f(max_f(xin[i], -kInputClamp), kInputClamp);
  float sigma2 = 0;
  for (int i = 0; i < kQK_K; ++i) sigma2 += x[i] * x[i];
  sigma2 /= kQK_K;

  if (!quant_detail::has_importance(importance, kQK_K)) importance = nullptr;
  float t[kQK_K], w[kQK_K];
  uint8_t sign_idx[32];
  GroupFit fits[8];
  float max_scale = 0;
  for (int i = 0; i < kQK_K; ++i) {
    const float imp = importance ? importance[i] : 1.0f;
    w[i] = imp * std::sqrt(sigma2 + x[i] * x[i]);
    t[i] = std::fabs(x[i]);
  }
  for (int ch = 0; ch < 32; ++ch) {
    // Signs: bit i = negative. The stored 7 bits imply the 8th by parity; if the count is odd, the
    // element with the least weighted energy gets the wrong sign, so its target magnitude is -|x|.
    const float* xc = x + 8 * ch;
    unsigned m = 0;
    for (int i = 0; i < 8; ++i)
      if (xc[i] < 0) m |= 1u << i;
    if (__builtin_popcount(m) & 1) {
      int imin = 0;
      for (int i = 1; i < 8; ++i)
        if (w[8 * ch + i] * xc[i] * xc[i] < w[8 * ch + imin] * xc[imin] * xc[imin]) imin = i;
      m ^= 1u << imin;
      t[8 * ch + imin] = -t[8 * ch + imin];
    }
    sign_idx[ch] = static_cast<uint8_t>(m & 127);
  }
  for (int g = 0; g < 8; ++g) {
    fits[g] = fit_group(ix, t + 32 * g, w + 32 * g, effort);
    max_scale = max_f(max_scale, fits[g].scale);
  }

  // Block scale: the largest group uses ls = 15, i.e. multiplier (0.5 + 15) * 0.25 = 3.875.
  const uint16_t hd = max_scale > 0 ? f32_to_f16(min_f(max_scale / 3.875f, kF16Max)) : 0;
  const float d = f16_to_f32(hd);
  y->d = hd;
  std::memset(y->qs, 0, sizeof(y->qs));
  if (d == 0) {  // everything (or everything representable) is zero
    y->d = 0;
    return;
  }
  for (int g = 0; g < 8; ++g) {
    uint32_t w0 = 0, w1 = 0;
    int ls = 0;
    if (fits[g].scale > 0) {
      // The 4-bit group scale nearest to the fitted one and its two neighbours, each with the chunks
      // re-picked against the scale the decoder will really apply; keep the lowest weighted error.
      const int ls0 = clamp_int(nearest_int(fits[g].scale / (d * 0.25f) - 0.5f), 0, 15);
      float best_err = INFINITY;
      const int spread = effort == QuantEffort::best ? 1 : 0;  // fast: the nearest ls only
      for (int cand = ls0 - spread; cand <= ls0 + spread; ++cand) {
        if (cand < 0 || cand > 15) continue;
        const float s = d * (0.5f + static_cast<float>(cand)) * 0.25f;
        int idx[4];
        float err = 0;
        for (int k = 0; k < 4; ++k) {
          const float* tc = t + 32 * g + 8 * k;
          const float* wc = w + 32 * g + 8 * k;
          idx[k] = pick_grid(ix, tc, wc, s, 1.0f / s);
          for (int i = 0; i < 8; ++i) {
            const float diff = s * ix.magnitude[idx[k]][i] - tc[i];
            err += wc[i] * diff * diff;
          }
        }
        if (err < best_err) {
          best_err = err;
          ls = cand;
          std::copy(idx, idx + 4, fits[g].idx);
        }
      }
    }
    for (int k = 0; k < 4; ++k) {
      w0 |= static_cast<uint32_t>(fits[g].idx[k]) << (8 * k);
      w1 |= static_cast<uint32_t>(sign_idx[4 * g + k]) << (7 * k);
    }
    w1 |= static_cast<uint32_t>(ls) << 28;
    std::memcpy(&y->qs[4 * g], &w0, 4);
    std::memcpy(&y->qs[4 * g + 2], &w1, 4);
  }
}

}  // namespace ds4
