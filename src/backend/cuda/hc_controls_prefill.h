// hc_controls_prefill.h — a prefill chunk's HC control segment sums with the control weights resident in shared
// memory (hc_controls_prefill.cu), for ops_hc.cu's HC pre of n > 32 tokens (CudaBackendOptions::hc_fuse's tens
// digit). Deliberately not here: the norm scales before it and the finish after it (ops_hc.cu's hc_scale_kernel and
// finish kernels, which add these segment sums in segment order).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace ds4::backend::cuda {

struct HcCtlParams {
  const float* x;      // [n][cols] HC state rows (f32), 16-byte aligned, cols % 8 == 0
  const float* sc;     // [n] each row's RMSNorm scale (rms_norm's bits: the controls read x·scale as it writes it)
  const uint8_t* w;    // [rows][row_bytes] F16 control weights, 16-byte aligned rows
  uint64_t row_bytes;
  int32_t rows;        // ≤ kHcCtlMaxRows (Flash: (2 + 4)·4 = 24)
  int64_t cols, n;     // cols: nhc·dim (Flash 16,384); n: tokens
  int64_t nseg;        // ⌈cols / 512⌉: the F16 MMA order's segments
  float* part;         // [n][rows][nseg] segment sums (the layout hc_finish*_kernel read)
};

inline constexpr int32_t kHcCtlMaxRows = 32;

// Rows ≥ 8,192 wide (rms_norm_threads 1,024), 16-byte aligned: hc_controls_prefill_scale's shapes.
bool hc_controls_prefill_scale_fits(int64_t cols, const float* x);
// sc[t] = row t's RMSNorm scale of x [n][cols] with rms_norm's bits (a block of 256 threads per row, its loads in flight).
cudaError_t hc_controls_prefill_scale(const float* x, int64_t cols, int64_t n, float eps, float* sc, cudaStream_t s);
// Whether form `form` (3 or 5) takes this shape (rows ≤ 32, cols % 8 == 0, aligned rows, ≤ 65,535 tokens).
bool hc_controls_prefill_fits(const HcCtlParams& p, int form);
// Launches form `form`'s segment kernel on `s` (a programmatic dependent of the kernel before it with pdl, sm_90):
// the launch's error. Both forms run the same kernel — 16 warps a block, one block per SM, four 32-value blocks of
// activation loads in flight a warp (≤ 128 registers) — and ops_hc.cu surrounds it: 3 with the spread pre's scale
// and finish kernels, 5 (the default) with hc_controls_prefill_scale and the prefill split kernel adding the segment
// sums itself. None changes a bit.
cudaError_t hc_controls_prefill_launch(const HcCtlParams& p, int form, bool pdl, cudaStream_t s);

}  // namespace ds4::backend::cuda
