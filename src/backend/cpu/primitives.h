// primitives.h — single-row reference math of DeepSeek V4 (MODEL.md §5, §6.2), plain loops.
//
// These are the exact definitions the CPU ops apply per row/token; tests check them against the
// spec's check values and the CUDA kernels are checked against them through the ops.
// Deliberately not here: batching and threads (cpu_backend.cpp), model structure (src/model).
#pragma once

#include <cstdint>

namespace ds4::backend::cpu {

float round_f16(float x);        // through IEEE binary16, round to nearest even (overflow → ±inf)
float round_e4m3(float x);       // nearest E4M3FN value (|x| ≤ 448 expected), ties to the even code
float round_e2m1(float x);       // nearest of ±{0, .5, 1, 1.5, 2, 3, 4, 6}, ties to the even code
// 2^ceil(log2(v)) for v > 0, exact (UE8M0 block scale).
float pow2_ceil(float v);

// FP8 E4M3 round trip of one block (MODEL.md §5.4): scale s = 2^ceil(log2(max(amax,1e-4)/448)).
void fp8_round_block(float* x, int n);
// FP4 E2M1 round trip of one block (MODEL.md §5.5 step 2).
void fp4_round_block(float* x, int n);
// Scaled Walsh–Hadamard transform of size n (power of two), natural order, ×1/sqrt(n).
void hadamard_scaled(float* x, int n);

// y = x / sqrt(mean(x²) + eps) ⊙ w (w may be null). Sum of squares in double, scale in float (ds4).
void rms_norm_row(const float* x, const float* w, float* y, int64_t dim, float eps);

// HC split + Sinkhorn for one token (MODEL.md §6.2 steps 3-4). m/base: [(2+nhc)·nhc], scale: [3].
void hc_split_one(const float* m, const float* scale, const float* base, int nhc, int iters, float eps,
                  float* pre, float* post, float* comb);

float softplus(float z);  // ds4: z > 20 → z; z < −20 → e^z; else log1p(e^z)

}  // namespace ds4::backend::cpu
