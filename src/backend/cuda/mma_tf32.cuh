// mma_tf32.cuh — the TF32 tensor-core primitives shared by the kernels that sum float products on
// tensor cores in a fixed MMA order: attention (attention_mma.cu) and the F16 matmuls (f16_mma.cuh).
// TF32 part of a float (README.md "Attention summation order on tensor cores": 11 significant bits,
// half away from zero), the exact hi + lo split, and one m16n8k8 MMA. sm_80 and later.
// Deliberately not here: operand layouts and k orders (each order's own header or kernel).
#pragma once

#include <cstdint>

namespace ds4::backend::cuda {

// TF32 part of x: x rounded to 11 significant bits (half away from zero), as f32 bits whose low 13
// mantissa bits are zero — the MMA reads exactly this value.
__device__ inline uint32_t tf32_bits(float x) { return (__float_as_uint(x) + 0x1000u) & 0xffffe000u; }

// x = hi + lo: hi its TF32 part, lo the TF32 part of the exact remainder x − hi.
__device__ inline void split_tf32(float x, uint32_t& hi, uint32_t& lo) {
  hi = tf32_bits(x);
  lo = tf32_bits(x - __uint_as_float(hi));
}

// c += a · b for one m16n8k8 tile, tf32 · tf32 → f32 (PTX fragment layout: a rows g, g + 8 × columns
// t, t + 4; b rows t, t + 4 × column g; c rows g, g + 8 × columns 2t, 2t + 1).
__device__ inline void mma_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace ds4::backend::cuda
