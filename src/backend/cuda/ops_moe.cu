// ops_moe.cu — MoE router (sqrt-softplus, hash or biased top-k: a warp per token, or the previous
// block per token) and routed experts (MODEL.md §8).
//
// Routed experts run as three expert-indexed matvecs (gemv with ids: each (token, slot) pair reads
// its expert's rows on the device, no host round trip), the weighted SwiGLU in between, and a sum
// over slots in slot order — the CPU op's arithmetic, so the result does not depend on batching.
// Prefill (≥ kGroupMinPairs pairs, ds4 numerics, types the GEMM takes): pairs are sorted by expert
// once (group_by_expert) and the three projections run as grouped tensor-core GEMMs (ops_gemm.cu), so
// each expert's rows are read once per 64 of its pairs; the arithmetic per pair is unchanged.
#include <initializer_list>
#include <string>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/gemm_experts.h"
#include "backend/exact_math.h"

namespace ds4::backend::cuda {

namespace {

// ds4's softplus with exact_math.h's exp and log1p: the CPU router's bits for every logit.
__device__ float softplus_dev(float z) { return exact_softplus(z); }

// One thread per token: the CPU's router loop (repeated selection, lower expert id on ties).
__global__ void router_kernel(RouterArgs a) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= a.n) return;
  const float* z = a.logits + i * a.n_expert;
  int32_t* ids = a.ids + i * a.k;
  float* w = a.weights + i * a.k;
  if (a.hash) {
    const int32_t* row = a.hash + static_cast<int64_t>(a.tokens[i]) * a.k;
    for (int j = 0; j < a.k; ++j) ids[j] = row[j];
  } else {
    for (int j = 0; j < a.k; ++j) {
      int32_t best = -1;
      float best_v = -INFINITY;
      for (int32_t e = 0; e < a.n_expert; ++e) {
        bool taken = false;
        for (int q = 0; q < j; ++q) taken |= ids[q] == e;
        if (taken) continue;
        const float v = sqrtf(softplus_dev(z[e])) + (a.bias ? a.bias[e] : 0.0f);
        if (best < 0 || v > best_v) {
          best = e;
          best_v = v;
        }
      }
      ids[j] = best;
    }
  }
  float sum = 0;
  for (int j = 0; j < a.k; ++j) {
    const int32_t e = ids[j];
    w[j] = (e >= 0 && e < a.n_expert) ? sqrtf(softplus_dev(z[e])) : NAN;
    sum += w[j];
  }
  const float denom = fmaxf(sum, a.denom_guard);
  for (int j = 0; j < a.k; ++j) w[j] = a.scale * w[j] / denom;
}

// One 256-thread block per token (n_expert ≤ kRouterMaxExperts): each thread scores its experts once,
// then k block-wide argmax rounds pick the same ids as the CPU's loop — its first untaken expert wins
// when its value is NaN (nothing compares greater), otherwise the largest non-NaN value, the lower id
// on ties. The thread-per-token kernel above re-evaluated sqrt(softplus) k·n_expert times in one
// thread (~320 µs per call at NE 256; one call per layer and token).
constexpr int kRouterThreads = 256;
constexpr int kRouterMaxExperts = 1024;

__global__ void __launch_bounds__(kRouterThreads) router_block_kernel(RouterArgs a) {
  __shared__ float val[kRouterMaxExperts];
  __shared__ int32_t chosen[32];
  __shared__ float red_v[kRouterThreads / kWarp];
  __shared__ int red_i[kRouterThreads / kWarp];
  const int64_t i = blockIdx.x;
  const float* z = a.logits + i * a.n_expert;
  int32_t* ids = a.ids + i * a.k;
  float* w = a.weights + i * a.k;
  const int lane = threadIdx.x % kWarp, wid = threadIdx.x / kWarp;
  if (a.hash) {
    if (threadIdx.x < a.k) chosen[threadIdx.x] = a.hash[static_cast<int64_t>(a.tokens[i]) * a.k + threadIdx.x];
  } else {
    for (int e = threadIdx.x; e < a.n_expert; e += blockDim.x)
      val[e] = sqrtf(softplus_dev(z[e])) + (a.bias ? a.bias[e] : 0.0f);
    __syncthreads();
    for (int j = 0; j < a.k; ++j) {
      // Best (value, id) of this thread's untaken experts: NaN never wins; lower id on ties.
      float bv = 0;
      int bi = -1, first = 0x7fffffff;
      for (int e = threadIdx.x; e < a.n_expert; e += blockDim.x) {
        bool taken = false;
        for (int q = 0; q < j; ++q) taken |= chosen[q] == e;
        if (taken) continue;
        first = min(first, e);
        const float v = val[e];
        if (v != v) continue;
        if (bi < 0 || v > bv) {
          bv = v;
          bi = e;
        }
      }
      // Block argmax; the first untaken id overall, to apply the CPU's NaN rule.
      for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        const int of = __shfl_xor_sync(0xffffffffu, first, o);
        if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi))) {
          bv = ov;
          bi = oi;
        }
        first = min(first, of);
      }
      __shared__ int red_f[kRouterThreads / kWarp];
      if (lane == 0) {
        red_v[wid] = bv;
        red_i[wid] = bi;
        red_f[wid] = first;
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        float v = 0;
        int b = -1, f = 0x7fffffff;
        for (int q = 0; q < kRouterThreads / kWarp; ++q) {
          f = min(f, red_f[q]);
          if (red_i[q] >= 0 && (b < 0 || red_v[q] > v || (red_v[q] == v && red_i[q] < b))) {
            v = red_v[q];
            b = red_i[q];
          }
        }
        const bool first_nan = f != 0x7fffffff && val[f] != val[f];
        chosen[j] = (first_nan || b < 0) ? (f != 0x7fffffff ? f : -1) : b;
      }
      __syncthreads();
    }
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  float sum = 0;
  for (int j = 0; j < a.k; ++j) {
    const int32_t e = chosen[j];
    ids[j] = e;
    w[j] = (e >= 0 && e < a.n_expert) ? sqrtf(softplus_dev(z[e])) : NAN;
    sum += w[j];
  }
  const float denom = fmaxf(sum, a.denom_guard);
  for (int j = 0; j < a.k; ++j) w[j] = a.scale * w[j] / denom;
}

// One warp per token (n_expert ≤ kRouterWarpExperts, k ≤ 32; CudaBackendOptions::hc_router_v2): lane l
// scores experts l, l + 32, … once into registers and keeps a bit per expert it has given away; each of
// the k rounds is a warp butterfly over (best value, its id, first untaken id, that id's value) — no
// block barriers and no serial thread-0 loop per round (the block kernel above pays two barriers and
// an 8-way scan per round). The same decisions as the CPU's loop: the first untaken expert wins when
// its value is NaN (nothing compares greater), otherwise the largest non-NaN value, the lower id on
// ties; scores and weights are router_block_kernel's expressions, so its bits.
constexpr int kRouterWarpItems = 8;  // experts per lane
constexpr int kRouterWarpExperts = kRouterWarpItems * kWarp;
constexpr int kRouterWarpsPerBlock = 4;

// Token i's routing by one whole warp (lane = threadIdx.x % 32).
__device__ void router_warp_token(const RouterArgs& a, int64_t i, int lane) {
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

__global__ void __launch_bounds__(kRouterWarpsPerBlock * kWarp) router_warp_kernel(RouterArgs a) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kRouterWarpsPerBlock + threadIdx.x / kWarp;
  if (i < a.n) router_warp_token(a, i, threadIdx.x % kWarp);  // whole warps
}

// One block per token, one expert per thread (n_expert ≤ kRouterRankExperts, k ≤ kRouterRankMaxK;
// CudaBackendOptions::small_v3): the CPU loop's k rounds as ranks. Without NaN scores the loop picks in the
// strict order "greater value first, the lower id on ties" (e beats e' when v_e > v_e', or v_e == v_e' and
// e < e'), so round j takes the expert beaten by exactly j others. Each warp ranks its 32 experts among
// themselves (32 shuffles); whatever beats a top-k expert is top-k in its own warp too, so each warp's
// first k go to shared memory (≤ 8·k candidates) and a candidate's rank among them is its overall rank.
// No dependent rounds (the warp kernel's 6 butterflies were ~5 µs of its 7), and the weights' scores come
// from the scoring pass (no second load of z). A NaN score anywhere (the CPU's loop then takes its first
// untaken expert when that one is NaN): warp 0 runs router_warp_token for the token. Launched as a
// programmatic dependent: the bias and hash rows are weights, loaded before the wait for the logits.
// Scores and weights are router_warp_kernel's expressions, summed in slot order: its bits.
constexpr int kRouterRankExperts = 256;
constexpr int kRouterRankMaxK = 16;
constexpr int kRouterRankCand = kRouterRankExperts / kWarp * kRouterRankMaxK;

__global__ void __launch_bounds__(kRouterRankExperts) router_rank_kernel(RouterArgs a) {
  __shared__ float sp_s[kRouterRankExperts];  // hash routing: sqrt(softplus) of every expert
  __shared__ float2 cand[kRouterRankCand];    // (value, id bits) of each warp's first k, warp-major
  __shared__ float cand_p[kRouterRankCand];   // their sqrt(softplus)
  __shared__ int32_t sel_e[kRouterRankMaxK];
  __shared__ float sel_p[kRouterRankMaxK];
  const int e = threadIdx.x, lane = e % kWarp, wid = e / kWarp;
  const int64_t i = blockIdx.x;
  const bool valid = e < a.n_expert;
  const float bias = valid && a.bias ? a.bias[e] : 0.0f;
  grid_dependency_wait();  // logits (and the token ids) come from the kernels before
  float p = 0.0f, v = -INFINITY;  // past n_expert: beats nothing (-inf, and the highest lanes)
  if (valid) {
    p = sqrtf(softplus_dev(a.logits[i * a.n_expert + e]));
    v = p + bias;  // router_warp_token's value
  }
  if (a.hash) {
    const int32_t hid = e < a.k ? a.hash[static_cast<int64_t>(a.tokens[i]) * a.k + e] : -1;
    if (valid) sp_s[e] = p;
    __syncthreads();
    if (e < a.k) {
      sel_e[e] = hid;
      sel_p[e] = hid >= 0 && hid < a.n_expert ? sp_s[hid] : NAN;
    }
  } else {
    int r = 0;  // experts of this warp that beat e
#pragma unroll
    for (int j = 0; j < kWarp; ++j) {
      const float vj = __shfl_sync(0xffffffffu, v, j);
      r += (vj > v || (vj == v && j < lane)) ? 1 : 0;
    }
    if (valid && r < a.k) {
      cand[wid * a.k + r] = make_float2(v, __int_as_float(e));
      cand_p[wid * a.k + r] = p;
    }
    if (__syncthreads_or(valid && v != v)) {  // block-uniform
      if (wid == 0) router_warp_token(a, i, lane);
      return;
    }
    // Only the last warp can hold fewer than k experts, so the candidates are 0 … nc − 1.
    const int nw = (a.n_expert + kWarp - 1) / kWarp, last = a.n_expert - (nw - 1) * kWarp;
    const int nc = (nw - 1) * a.k + (last < a.k ? last : a.k);
    if (e < nc) {
      const float2 me = cand[e];
      const int32_t mi = __float_as_int(me.y);
      int g = 0;
      for (int q = 0; q < nc; ++q) {
        const float2 c = cand[q];
        g += (c.x > me.x || (c.x == me.x && __float_as_int(c.y) < mi)) ? 1 : 0;
      }
      if (g < a.k) {
        sel_e[g] = mi;
        sel_p[g] = cand_p[e];
      }
    }
  }
  __syncthreads();
  if (wid != 0) return;
  float sum = 0;
  for (int j = 0; j < a.k; ++j) sum += sel_p[j];  // slot order
  const float denom = fmaxf(sum, a.denom_guard);
  if (lane < a.k) {
    a.ids[i * a.k + lane] = sel_e[lane];
    a.weights[i * a.k + lane] = a.scale * sel_p[lane] / denom;
  }
}

// g[p][f] ← swiglu(g, u) · weights[p]  (ds4 scales before the down projection).
__global__ void moe_swiglu_kernel(float* g, const float* u, const float* weights, int64_t pairs, int32_t ff, float clamp) {
  const int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (q >= pairs * ff) return;
  g[q] = moe_swiglu_value(g[q], u[q], weights[q / ff], clamp);
}

// moe_swiglu_kernel for prefill (CudaBackendOptions::prefill_glue): 4 values per thread by 16-byte loads
// and 32-bit index math (n4 = pairs·ff / 4 < 2^31, ff4 = ff / 4) — the 64-bit q / ff is an emulated
// division per value (131 µs for 12,288 pairs × 2,048 on the H200). Same values.
__global__ void moe_swiglu4_kernel(float* g, const float* u, const float* weights, uint32_t n4, uint32_t ff4,
                                   float clamp) {
  const uint32_t q = blockIdx.x * blockDim.x + threadIdx.x;
  if (q >= n4) return;
  float4 gv = reinterpret_cast<const float4*>(g)[q];
  const float4 uv = reinterpret_cast<const float4*>(u)[q];
  const float w = weights[q / ff4];
  gv.x = moe_swiglu_value(gv.x, uv.x, w, clamp);
  gv.y = moe_swiglu_value(gv.y, uv.y, w, clamp);
  gv.z = moe_swiglu_value(gv.z, uv.z, w, clamp);
  gv.w = moe_swiglu_value(gv.w, uv.w, w, clamp);
  reinterpret_cast<float4*>(g)[q] = gv;
}

// out[i][d] = Σ_j y[i·k + j][d], j in order. A pair whose expert id is out of range contributes NaN
// (the matvec writes NaN rows for it; the grouped GEMM leaves such pairs out of every group).
__global__ void moe_sum_kernel(const float* y, const int32_t* ids, int32_t n_expert, float* out, int64_t n, int32_t k,
                               int32_t dim) {
  grid_dependency_wait();  // small_v3 launches it as a programmatic dependent (a no-op otherwise)
  const int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (q >= n * dim) return;
  const int64_t i = q / dim, d = q % dim;
  float acc = 0;
  for (int j = 0; j < k; ++j) {
    const int32_t e = ids[i * k + j];
    const float v = e >= 0 && e < n_expert ? y[(i * k + j) * dim + d] : NAN;
    acc = j == 0 ? v : acc + v;
  }
  out[q] = acc;
}

// moe_sum_kernel for prefill (CudaBackendOptions::prefill_glue): 4 consecutive d per thread by 16-byte
// loads, 32-bit index math (n4 = n·dim / 4 < 2^31, dim4 = dim / 4). The same sum in slot order.
__global__ void moe_sum4_kernel(const float* y, const int32_t* ids, int32_t n_expert, float* out, uint32_t n4,
                                int32_t k, uint32_t dim4) {
  grid_dependency_wait();  // launched as moe_sum_kernel is
  const uint32_t q = blockIdx.x * blockDim.x + threadIdx.x;
  if (q >= n4) return;
  const uint32_t i = q / dim4, d4 = q - i * dim4;
  float4 acc = make_float4(0, 0, 0, 0);
  for (int j = 0; j < k; ++j) {
    const uint32_t p = i * static_cast<uint32_t>(k) + static_cast<uint32_t>(j);
    const int32_t e = ids[p];
    const float4 v = e >= 0 && e < n_expert ? reinterpret_cast<const float4*>(y)[static_cast<uint64_t>(p) * dim4 + d4]
                                            : make_float4(NAN, NAN, NAN, NAN);
    if (j == 0) {
      acc = v;
    } else {
      acc.x = acc.x + v.x;
      acc.y = acc.y + v.y;
      acc.z = acc.z + v.z;
      acc.w = acc.w + v.w;
    }
  }
  reinterpret_cast<float4*>(out)[q] = acc;
}

// Whether a prefill-sized elementwise call over `count` floats takes the 4-wide kernels above.
bool glue4_fits(int64_t count, int64_t row, std::initializer_list<const void*> ptrs) {
  if (count < (int64_t{1} << 20) || count >= (int64_t{1} << 33) || row % 4 != 0) return false;
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

}  // namespace

void CudaBackend::router(const RouterArgs& a) {
  if (failed() || a.n <= 0) return;
  if (a.k <= 0 || a.k > a.n_expert) {
    fail(invalid_argument("cuda router: k " + std::to_string(a.k) + " must be in [1, n_expert]"));
    return;
  }
  if (hc_router_v2_ && small_v3_ && a.n_expert <= kRouterRankExperts && a.k <= kRouterRankMaxK &&
      a.n <= 0x7fffffff) {
    const int threads = (a.n_expert + kWarp - 1) / kWarp * kWarp;
    check(launch_dependent(hc_pdl_ && !on_side_ && sm90(), dim3(static_cast<unsigned>(a.n)), threads, 0, stream(),
                           router_rank_kernel, a),
          "router");
    return;
  }
  if (hc_router_v2_ && a.n_expert <= kRouterWarpExperts && a.k <= kWarp)
    router_warp_kernel<<<grid_for(a.n, kRouterWarpsPerBlock), kRouterWarpsPerBlock * kWarp, 0, stream()>>>(a);
  else if (a.n_expert <= kRouterMaxExperts && a.k <= 32 && a.n <= 0x7fffffff)
    router_block_kernel<<<static_cast<unsigned>(a.n), kRouterThreads, 0, stream()>>>(a);
  else
    router_kernel<<<grid_for(a.n, 64), 64, 0, stream()>>>(a);
  launched("router");
}

void CudaBackend::moe(const MoeArgs& a) {
  if (failed() || a.n <= 0) return;
  if (a.k <= 0 || a.dim <= 0 || a.ff <= 0) {
    fail(invalid_argument("cuda moe: k, dim and ff must be positive"));
    return;
  }
  const int64_t pairs = a.n * a.k;
  auto sum_slots = [&](const float* y) {
    if (prefill_glue_ && glue4_fits(a.n * a.dim, a.dim, {y, a.out})) {
      const uint32_t n4 = static_cast<uint32_t>(a.n * a.dim / 4);
      check(launch_dependent(small_v3_ && hc_pdl_ && !on_side_ && sm90(), dim3(grid_for(n4, 256)), 256, 0, stream(),
                             moe_sum4_kernel, y, a.ids, a.down.n_expert, a.out, n4, a.k,
                             static_cast<uint32_t>(a.dim / 4)),
            "moe sum");
      return;
    }
    check(launch_dependent(small_v3_ && hc_pdl_ && !on_side_ && sm90(), dim3(grid_for(a.n * a.dim, 256)), 256, 0, stream(),
                           moe_sum_kernel, y, a.ids, a.down.n_expert, a.out, a.n, a.k, a.dim),
          "moe sum");
  };
  // Decode steps of 1..kTileMaxTokens tokens: expert tiles (moe_tiles.cu), each expert's rows read once.
  if (decode_kernels_ && expert_tiles_ && a.n <= kTileMaxTokens) {
    if (!ensure(moe_g_, static_cast<uint64_t>(pairs * a.ff) * 4, "expert hidden rows") ||
        !ensure(moe_y_, static_cast<uint64_t>(pairs * a.dim) * 4, "expert outputs"))
      return;
    // One token with the slot sum inside the down kernel (expert_one_token V + 10·F, F ≥ 1; moe_tiles.cu): no
    // sum here. moe_tiles(…, nullptr) launches nothing and returns false where that path does not run.
    if (a.n == 1 && moe_tiles(a, static_cast<float*>(moe_g_.ptr), nullptr)) return;
    if (moe_tiles(a, static_cast<float*>(moe_g_.ptr), static_cast<float*>(moe_y_.ptr))) {
      if (!failed()) sum_slots(static_cast<const float*>(moe_y_.ptr));
      return;
    }
  }
  if (decode_kernels_ && moe_decode(a)) return;  // few tokens: gemv_decode.cu's fused kernels
  if (!ensure(moe_g_, static_cast<uint64_t>(pairs * a.ff) * 4, "expert gate rows") ||
      !ensure(moe_u_, static_cast<uint64_t>(pairs * a.ff) * 4, "expert up rows") ||
      !ensure(moe_y_, static_cast<uint64_t>(pairs * a.dim) * 4, "expert outputs"))
    return;
  float* g = static_cast<float*>(moe_g_.ptr);  // [pairs][ff]
  float* u = static_cast<float*>(moe_u_.ptr);  // [pairs][ff]
  float* y = static_cast<float*>(moe_y_.ptr);  // [pairs][dim]

  GemvJob j;
  ExpertGroups groups;
  j.w = a.gate.first;
  j.ids = a.ids;
  j.numerics = a.numerics;
  j.n_vec = pairs;
  j.groups = &groups;  // only to ask gemm_supports whether grouping would be used
  bool grouped = tensor_cores() && pairs >= kGroupMinPairs && a.gate.n_expert == a.down.n_expert && gemm_supports(j);
  j.w = a.down.first;
  grouped = grouped && gemm_supports(j);
  j.groups = nullptr;
  // Where the grouped GEMM does not run (fewer than kGroupMinPairs pairs, or types it lacks),
  // gemv_skinny.cu groups the pairs by expert on the device and reads each expert's rows once for all
  // its pairs instead of once per pair; the slot sum below is shared with the other paths. (Measured
  // on the H200 at 256 experts: as fast as the per-pair matvec at 8 tokens, slower than the grouped
  // GEMM at 32 and 64 — docs/PERF.md.)
  if (!grouped && decode_kernels_ && moe_skinny(a, g, y)) {
    if (!failed()) sum_slots(y);
    return;
  }
  if (grouped) {
    if (!group_by_expert(a.ids, pairs, a.gate.n_expert, &groups)) return;
    j.groups = &groups;
  }
  j.ids = a.ids;
  j.n_expert = a.gate.n_expert;
  j.n_vec = pairs;
  j.numerics = a.numerics;
  // gate/up: pair p reads token p / k.
  j.x = a.x;
  j.x_stride = a.dim;
  j.x_div = a.k;
  j.y_stride = a.ff;
  j.w = a.gate.first;
  j.expert_bytes = a.gate.expert_bytes;
  j.y = g;
  GemvJob ju = j;
  ju.w = a.up.first;
  ju.expert_bytes = a.up.expert_bytes;
  ju.y = u;
  // Where gemv would run both on gemm_experts.cu's planes (ops_matmul.cu, same condition) and the variant
  // takes both matrices in one launch (experts_gate_up_one_launch): one quantization, one launch; the same
  // kernel arithmetic, so the same bits.
  const bool gate_up = experts_gate_up_one_launch(gemm_experts_) && j.groups && tensor_cores() && gemm_pipelined_ &&
                       j.numerics == MatmulNumerics::ds4 && gemm_supports(j) && gemm_supports(ju) &&
                       gemm_experts_gate_up(*this, j, ju, moe_act_, gemm_experts_);
  if (!gate_up) {
    gemv(j, moe_act_);
    gemv(ju, moe_act_);
  }
  if (failed()) return;
  // down: pair p reads its own hidden row, swiglu(g, u)·w.
  j.w = a.down.first;
  j.expert_bytes = a.down.expert_bytes;
  j.n_expert = a.down.n_expert;
  j.x = g;
  j.x_stride = a.ff;
  j.x_div = 1;
  j.y = y;
  j.y_stride = a.dim;
  // Where gemv would run the grouped GEMM on gemm_experts.cu's planes (ops_matmul.cu, same condition),
  // its quantizer takes the SwiGLU from the gate and up rows: no SwiGLU pass, no hidden rows written
  // (the same values, so the same bits). At gemm_experts ≥ 20 (experts_fold_swiglu); below, or with
  // CudaBackendOptions::prefill_glue = false, the SwiGLU pass.
  const ExpertsSwiglu sw{u, a.weights, a.clamp};
  const bool fused = experts_fold_swiglu(gemm_experts_) && prefill_glue_ && j.groups && tensor_cores() &&
                     gemm_pipelined_ && j.numerics == MatmulNumerics::ds4 && gemm_supports(j) &&
                     gemm_experts_planes(*this, j, moe_h_act_, gemm_experts_, &sw);
  if (!fused) {
    if (prefill_glue_ && glue4_fits(pairs * a.ff, a.ff, {g, u})) {
      const uint32_t n4 = static_cast<uint32_t>(pairs * a.ff / 4);
      moe_swiglu4_kernel<<<grid_for(n4, 256), 256, 0, stream()>>>(g, u, a.weights, n4,
                                                                   static_cast<uint32_t>(a.ff / 4), a.clamp);
    } else {
      moe_swiglu_kernel<<<grid_for(pairs * a.ff, 256), 256, 0, stream()>>>(g, u, a.weights, pairs, a.ff, a.clamp);
    }
    if (!launched("moe swiglu")) return;
    gemv(j, moe_h_act_);
  }
  if (!failed()) sum_slots(y);
}

}  // namespace ds4::backend::cuda
