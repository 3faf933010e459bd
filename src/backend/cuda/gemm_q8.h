// gemm_q8.h — CudaBackendOptions::gemm_q8's values for the backend's construction and dispatch: which values
// are variants of this build (gemm_q8.cu; make_cuda_backend rejects the others), and whether a value's GEMM is a
// programmatic dependent of its activations' quantizer (ops_matmul.cu quantize_act). Host code only.
// Deliberately not here: the kernels and their launch shapes (gemm_q8.cu, ops_matmul.cu).
#pragma once

#include <cstdint>

namespace ds4::backend::cuda {

// Whether `variant` is a CudaBackendOptions::gemm_q8 value of this build: −1 (the default), 0 (ops_gemm.cu's
// gemm2_kernel) or one that gemm_q8.cu's launch_parts names. Removed values (2, 20, 24 … 27, 29: docs/PERF.md) and
// values never made are not, so an old command line cannot measure the default under another name.
bool gemm_q8_known(int variant);

// Whether gemm_q8 `variant` (−1 resolved to the default) runs the prefill GEMM as a programmatic dependent of its
// activations' quantizer (ops_matmul.cu quantize_q8_0_rows_kernel then lets it start early): 28.
bool gemm_q8_pdl(int variant);

}  // namespace ds4::backend::cuda
