// ops_hc.cpp — hyper-connection ops (MODEL.md §6): embedding broadcast, split+Sinkhorn, collapse, post.
#include <cmath>
#include <cstring>

#include "backend/by_pieces.h"
#include "backend/cpu/cpu_impl.h"
#include "backend/cpu/primitives.h"
#include "backend/cpu/weight_rows.h"
#include "backend/exact_math.h"

namespace ds4::backend::cpu {

void CpuBackend::embed(const EmbedArgs& a) {
  // out: [n][nhc][dim] — the embedding row (as stored, F16/F32 → float) copied to every stream.
  const int64_t dim = a.table.cols;
  pool_.parallel_for(a.n, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* out = a.out + t * a.nhc * dim;
      dequantize_weight_row(a.table, a.tokens[t], out);
      for (int s = 1; s < a.nhc; ++s) std::memcpy(out + s * dim, out, dim * sizeof(float));
    }
  }, a.nhc * dim);
}

void CpuBackend::hc_split(const HcSplitArgs& a) {
  const int mix = (2 + a.nhc) * a.nhc;
  for (int64_t t = 0; t < a.n; ++t)
    hc_split_one(a.m + t * mix, a.scale, a.base, a.nhc, a.iters, a.eps, a.pre + t * a.nhc, a.post + t * a.nhc,
                 a.comb + t * a.nhc * a.nhc);
}

void CpuBackend::hc_head(const HcHeadArgs& a) {
  for (int64_t t = 0; t < a.n; ++t)
    for (int s = 0; s < a.nhc; ++s) {
      const float z = a.m[t * a.nhc + s] * a.scale[0] + a.base[s];
      a.w[t * a.nhc + s] = exact_sigmoid(z) + a.eps;
    }
}

void CpuBackend::hc_collapse(const HcCollapseArgs& a) {
  // y[t][d] = Σ_s w[t][s]·x[t][s][d]
  pool_.parallel_for(a.n, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* x = a.x + t * a.nhc * a.dim;
      const float* w = a.w + t * a.nhc;
      float* y = a.y + t * a.dim;
      for (int64_t d = 0; d < a.dim; ++d) {
        float acc = 0;
        for (int s = 0; s < a.nhc; ++s) acc += w[s] * x[s * a.dim + d];
        y[d] = acc;
      }
    }
  }, a.nhc * a.dim);
}

void CpuBackend::hc_post(const HcPostArgs& a) {
  // out[t][k][d] = post[t][k]·f[t][d] + Σ_j C[t][j][k]·x[t][j][d]  (Cᵀ·X: j is the source stream);
  // f[t][d] + f_add[t][d] in place of f[t][d] when f_add is set.
  pool_.parallel_for(a.n, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* x = a.x + t * a.nhc * a.dim;
      const float* f = a.f + t * a.dim;
      const float* fa = a.f_add ? a.f_add + t * a.dim : nullptr;
      const float* c = a.comb + t * a.nhc * a.nhc;
      for (int k = 0; k < a.nhc; ++k) {
        float* out = a.out + (t * a.nhc + k) * a.dim;
        const float p = a.post[t * a.nhc + k];
        for (int64_t d = 0; d < a.dim; ++d) {
          float acc = p * (fa ? f[d] + fa[d] : f[d]);
          for (int j = 0; j < a.nhc; ++j) acc += c[j * a.nhc + k] * x[j * a.dim + d];
          out[d] = acc;
        }
      }
    }
  }, a.nhc * a.nhc * a.dim);
}

void CpuBackend::hc_pre(const HcPreArgs& a) { hc_pre_by_pieces(*this, a); }

}  // namespace ds4::backend::cpu
