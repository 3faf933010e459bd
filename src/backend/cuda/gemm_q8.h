// gemm_q8.h — CudaBackendOptions::gemm_q8's values for the backend's construction and dispatch: which values
// are variants of this build (gemm_q8.cu; make_cuda_backend rejects the others), whether a value's GEMM is a
// programmatic dependent of its activations' quantizer and which quantizer it runs (ops_matmul.cu quantize_act);
// act_quant_prefill.cu's entry. Host code only.
// Deliberately not here: the kernels and their launch shapes (gemm_q8.cu, ops_matmul.cu, act_quant_prefill.cu).
#pragma once

#include <cstdint>

namespace ds4::backend::cuda {

class CudaBackend;

// Whether `variant` is a CudaBackendOptions::gemm_q8 value of this build: −1 (the default), 0 (ops_gemm.cu's
// gemm2_kernel) or one that gemm_q8.cu's launch_parts names. Removed values (2, 20, 24 … 27: docs/PERF.md) and
// values never made are not, so an old command line cannot measure the default under another name.
bool gemm_q8_known(int variant);

// Whether gemm_q8 `variant` (−1 resolved to the default) runs the prefill GEMM as a programmatic dependent of its
// activations' quantizer (which then lets it start early): 28, 29.
bool gemm_q8_pdl(int variant);
// Whether gemm_q8 `variant` (−1 resolved) quantizes the prefill activations with act_quant_prefill.cu's kernel
// (8 values a lane) instead of ops_matmul.cu's quantize_q8_0_rows_kernel: 29.
bool gemm_q8_wide_quantizer(int variant);

// act_quant_prefill.cu: rows x [rows][x_stride] (16-byte aligned, x_stride a multiple of 4) of `cols` values (a
// multiple of 32) into `out` as BlockQ8_0Act rows of cols / 32 · 36 bytes (rows · that < 2^32), the bits of
// quantize.cpp's quantize_act_q8_0; `trigger`: a GEMM launched next as its programmatic dependent may start early.
// The caller checks the launch.
void quantize_q8_0_wide(CudaBackend& be, bool trigger, const float* x, int64_t x_stride, int64_t rows, int64_t cols,
                        uint8_t* out);

}  // namespace ds4::backend::cuda
