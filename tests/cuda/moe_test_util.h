// moe_test_util.h — helpers shared by the routed-expert tests (test_cuda_moe_tiles.cpp, test_cuda_moe_rows.cpp):
// the ExpertWeights view of one expert-stacked weight and random routings. Not a fixture: each test keeps its
// own backends, buffers and generator; these only build the plain data they hand to the MoE op.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "backend/backend.h"

namespace ds4::test {

// `w` (its data already set): n_expert experts of `rows` rows each, stacked.
inline backend::ExpertWeights expert_stack(backend::Weight w, int64_t rows, int32_t n_expert) {
  backend::ExpertWeights e;
  e.first = w;
  e.first.rows = rows;
  e.expert_bytes = rows * w.row_bytes;
  e.n_expert = n_expert;
  return e;
}

// The same with the stack's data at `data`.
inline backend::ExpertWeights expert_stack(backend::Weight w, void* data, int64_t rows, int32_t n_expert) {
  w.data = data;
  return expert_stack(w, rows, n_expert);
}

// ids [n][k]: k distinct experts of n_expert per token, drawn anew for each token, or (same) one draw for
// every token — the case where every token lands on the same experts.
inline std::vector<int32_t> random_routing(std::mt19937& rng, int32_t n_expert, int64_t n, int32_t k, bool same) {
  std::vector<int32_t> all(n_expert), ids;
  for (int32_t e = 0; e < n_expert; ++e) all[e] = e;
  if (same) std::shuffle(all.begin(), all.end(), rng);
  for (int64_t i = 0; i < n; ++i) {
    if (!same) std::shuffle(all.begin(), all.end(), rng);
    ids.insert(ids.end(), all.begin(), all.begin() + k);
  }
  return ids;
}

// `base` (its experts and numerics) with one call's operands: x [n][dim], ids and weights [n][k], out [n][dim].
inline backend::MoeArgs moe_call(backend::MoeArgs base, const float* x, const int32_t* ids, const float* weights,
                                 int64_t n, int32_t k, int32_t dim, int32_t ff, float clamp, float* out) {
  base.x = x;
  base.ids = ids;
  base.weights = weights;
  base.n = n;
  base.k = k;
  base.dim = dim;
  base.ff = ff;
  base.clamp = clamp;
  base.out = out;
  return base;
}

}  // namespace ds4::test
