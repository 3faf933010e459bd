// router_device.cuh — the router's per-token device code (MODEL.md §8: sqrt-softplus scores, biased top-k
// or hash routing, weights normalised in slot order), shared by its own kernels (ops_moe.cu) and by the
// router fold of the F16 MMA decode matmul (matmul_f16_mma_decode.cu, CudaBackendOptions::launch_folds): one
// copy of the expressions, so the fold's ids and weights are the router kernel's bits.
// Deliberately not here: the launches, the older one-thread and block-per-token kernels (ops_moe.cu).
#pragma once

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"

namespace ds4::backend::cuda {

__device__ inline float softplus_dev(float z) {
  if (z > 20.0f) return z;
  if (z < -20.0f) return expf(z);
  return log1pf(expf(z));
}

// One warp per token (n_expert ≤ kRouterWarpExperts, k ≤ 32; CudaBackendOptions::hc_router_v2): lane l
// scores experts l, l + 32, … once into registers and keeps a bit per expert it has given away; each of
// the k rounds is a warp butterfly over (best value, its id, first untaken id, that id's value) — no
// block barriers and no serial thread-0 loop per round (ops_moe.cu's block kernel pays two barriers and
// an 8-way scan per round). The same decisions as the CPU's loop: the first untaken expert wins when
// its value is NaN (nothing compares greater), otherwise the largest non-NaN value, the lower id on
// ties; scores and weights are router_block_kernel's expressions, so its bits.
constexpr int kRouterWarpItems = 8;  // experts per lane
constexpr int kRouterWarpExperts = kRouterWarpItems * kWarp;
constexpr int kRouterWarpsPerBlock = 4;

// Token i's routing by one whole warp (lane = threadIdx.x % 32).
__device__ inline void router_warp_token(const RouterArgs& a, int64_t i, int lane) {
  const float* z = a.logits + i * a.n_expert;
  int32_t mine = -1;  // lane j < k: the expert of slot j
  if (a.hash) {
    if (lane < a.k) mine = a.hash[static_cast<int64_t>(a.tokens[i]) * a.k + lane];
  } else {
    float val[kRouterWarpItems];
#pragma unroll
    for (int q = 0; q < kRouterWarpItems; ++q) {
      const int e = lane + q * kWarp;
      val[q] = e < a.n_expert ? sqrtf(softplus_dev(z[e])) + (a.bias ? a.bias[e] : 0.0f) : 0.0f;
    }
    uint32_t taken = 0;  // bit q: expert lane + 32q chosen in an earlier round
    for (int j = 0; j < a.k; ++j) {
      float bv = 0, fv = 0;
      int bi = -1, f = 0x7fffffff;
#pragma unroll
      for (int q = kRouterWarpItems - 1; q >= 0; --q) {  // descending, so the lowest untaken id is last
        const int e = lane + q * kWarp;
        if (e >= a.n_expert || (taken >> q & 1u)) continue;
        f = e;
        fv = val[q];
        if (val[q] != val[q]) continue;  // NaN never wins
        if (bi < 0 || val[q] >= bv) {    // ≥ while descending: the lower id on ties
          bv = val[q];
          bi = e;
        }
      }
      for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o), ofv = __shfl_xor_sync(0xffffffffu, fv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o), of = __shfl_xor_sync(0xffffffffu, f, o);
        if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi))) {
          bv = ov;
          bi = oi;
        }
        if (of < f) {
          f = of;
          fv = ofv;
        }
      }
      const bool first_nan = f != 0x7fffffff && fv != fv;
      const int32_t pick = (first_nan || bi < 0) ? (f != 0x7fffffff ? f : -1) : bi;
      if (lane == j) mine = pick;
      if (pick >= 0 && pick % kWarp == lane) taken |= 1u << (pick / kWarp);
    }
  }
  // Weights: slot j's sqrt(softplus) on lane j, summed in slot order by every lane.
  const bool slot = lane < a.k;
  const float wj = slot ? (mine >= 0 && mine < a.n_expert ? sqrtf(softplus_dev(z[mine])) : NAN) : 0.0f;
  float sum = 0;
  for (int j = 0; j < a.k; ++j) sum += __shfl_sync(0xffffffffu, wj, j);
  const float denom = fmaxf(sum, a.denom_guard);
  if (slot) {
    a.ids[i * a.k + lane] = mine;
    a.weights[i * a.k + lane] = a.scale * wj / denom;
  }
}

// The router by ranks (n_expert ≤ kRouterRankExperts, k ≤ kRouterRankMaxK; CudaBackendOptions::small_v3):
// the CPU loop's k rounds as ranks. Without NaN scores the loop picks in the strict order "greater value
// first, the lower id on ties" (e beats e' when v_e > v_e', or v_e == v_e' and e < e'), so round j takes
// the expert beaten by exactly j others. Each warp ranks its 32 experts among themselves (32 shuffles);
// whatever beats a top-k expert is top-k in its own warp too, so each warp's first k go to shared memory
// (≤ 8·k candidates) and a candidate's rank among them is its overall rank. No dependent rounds (the warp
// kernel's 6 butterflies were ~5 µs of its 7), and the weights' scores come from the scoring pass (no
// second load of z). A NaN score anywhere (the CPU's loop then takes its first untaken expert when that
// one is NaN): warp 0 runs router_warp_token for the token. Scores and weights are router_warp_token's
// expressions, summed in slot order: its bits.
constexpr int kRouterRankExperts = 256;
constexpr int kRouterRankMaxK = 16;
constexpr int kRouterRankCand = kRouterRankExperts / kWarp * kRouterRankMaxK;

struct RouterRankSmem {
  float sp[kRouterRankExperts];       // hash routing: sqrt(softplus) of every expert
  float2 cand[kRouterRankCand];       // (value, id bits) of each warp's first k, warp-major
  float cand_p[kRouterRankCand];      // their sqrt(softplus)
  int32_t sel_e[kRouterRankMaxK];
  float sel_p[kRouterRankMaxK];
};

// Token i's routing by the whole block: thread t scores experts t + h·blockDim.x (h < kPer; blockDim.x a
// multiple of 32, blockDim.x·kPer ≥ n_expert); bias[h] = expert t + h·blockDim.x's bias (0 past n_expert or
// without one; the caller loads it, e.g. before griddepcontrol.wait). Every thread of the block calls it
// (barriers inside); s is free again after the caller's next __syncthreads().
template <int kPer>
__device__ inline void router_rank_token(const RouterArgs& a, int64_t i, const float (&bias)[kPer], RouterRankSmem& s) {
  const int lane = threadIdx.x % kWarp, wid0 = threadIdx.x / kWarp;
  float p[kPer], v[kPer];  // past n_expert: beats nothing (-inf, and the highest lanes)
#pragma unroll
  for (int h = 0; h < kPer; ++h) {
    const int e = threadIdx.x + h * blockDim.x;
    p[h] = 0.0f;
    v[h] = -INFINITY;
    if (e < a.n_expert) {
      p[h] = sqrtf(softplus_dev(__ldcg(a.logits + i * a.n_expert + e)));
      v[h] = p[h] + bias[h];  // router_warp_token's value
    }
  }
  bool sel = true;  // false: a NaN score, warp 0 ran router_warp_token
  if (a.hash) {
#pragma unroll
    for (int h = 0; h < kPer; ++h) {
      const int e = threadIdx.x + h * blockDim.x;
      if (e < a.n_expert) s.sp[e] = p[h];
    }
    __syncthreads();
    for (int e = threadIdx.x; e < a.k; e += blockDim.x) {
      const int32_t hid = a.hash[static_cast<int64_t>(a.tokens[i]) * a.k + e];
      s.sel_e[e] = hid;
      s.sel_p[e] = hid >= 0 && hid < a.n_expert ? s.sp[hid] : NAN;
    }
  } else {
    bool nan = false;
#pragma unroll
    for (int h = 0; h < kPer; ++h) {
      const int e = threadIdx.x + h * blockDim.x, wid = e / kWarp;
      const bool valid = e < a.n_expert;
      int r = 0;  // experts of this warp that beat e
#pragma unroll
      for (int j = 0; j < kWarp; ++j) {
        const float vj = __shfl_sync(0xffffffffu, v[h], j);
        r += (vj > v[h] || (vj == v[h] && j < lane)) ? 1 : 0;
      }
      if (valid && r < a.k) {
        s.cand[wid * a.k + r] = make_float2(v[h], __int_as_float(e));
        s.cand_p[wid * a.k + r] = p[h];
      }
      nan = nan || (valid && v[h] != v[h]);
    }
    if (__syncthreads_or(nan)) {  // block-uniform
      if (wid0 == 0) router_warp_token(a, i, lane);
      sel = false;
    } else {
      // Only the last warp can hold fewer than k experts, so the candidates are 0 … nc − 1.
      const int nw = (a.n_expert + kWarp - 1) / kWarp, last = a.n_expert - (nw - 1) * kWarp;
      const int nc = (nw - 1) * a.k + (last < a.k ? last : a.k);
      for (int c = threadIdx.x; c < nc; c += blockDim.x) {
        const float2 me = s.cand[c];
        const int32_t mi = __float_as_int(me.y);
        int g = 0;
        for (int q = 0; q < nc; ++q) {
          const float2 o = s.cand[q];
          g += (o.x > me.x || (o.x == me.x && __float_as_int(o.y) < mi)) ? 1 : 0;
        }
        if (g < a.k) {
          s.sel_e[g] = mi;
          s.sel_p[g] = s.cand_p[c];
        }
      }
    }
  }
  if (!sel) return;  // block-uniform
  __syncthreads();
  if (wid0 != 0) return;
  float sum = 0;
  for (int j = 0; j < a.k; ++j) sum += s.sel_p[j];  // slot order
  const float denom = fmaxf(sum, a.denom_guard);
  if (lane < a.k) {
    a.ids[i * a.k + lane] = s.sel_e[lane];
    a.weights[i * a.k + lane] = a.scale * s.sel_p[lane] / denom;
  }
}

}  // namespace ds4::backend::cuda
