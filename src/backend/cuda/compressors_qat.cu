// compressors_qat.cu — Backend::compressors_and_qat at decode (CudaBackendOptions::small_v6): a CSA layer's two
// compressors (compressor_many's paired walking launch) and the indexer query's RoPE + QAT with its head weights'
// scale (indexer_qat with n_rot) in one launch. On the CSA layers' critical chain (matmul_many of the
// projections, the compressors, the query's QAT, the indexer) the two were dependent launches of ~5.7 and
// ~4.4 µs each (H200, one decode token) although neither reads what the other writes: here their blocks share
// one grid. Each block runs exactly one of the single launches' bodies (compressor_ring.cuh's pair block,
// qat_device.cuh's row), so the bits are theirs.
// Deliberately not here: prefill-sized calls (parallel pooling, warp-per-row QAT) and bad calls, which go to the
// two ops (they report the errors).
#include <algorithm>
#include <cmath>

#include "backend/cuda/common.cuh"
#include "backend/cuda/compressor_ring.cuh"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/qat_device.cuh"
#include "backend/cuda/rows_device.cuh"

namespace ds4::backend::cuda {

namespace {

constexpr int kThreads = 512;           // the paired compressor launch's block; kThreads / dim query rows a block
// Query rows (tokens × heads) the one launch takes; larger calls go to the two ops. One decode token (Flash: 64
// rows): the H200 (W2) measured the CSA chain 35.20 against 36.56 µs at 2K, but batched steps slower (n = 8: 70.1
// against 65.9 µs, n = 32: 167.5 against 152.5 — 512-thread blocks of 4 query rows beside the walking blocks).
constexpr int64_t kMaxFusedRows = 64;

// Grid: blocks [0, 2·pair) the compressors (job b / pair, its block b mod pair), then row_blocks blocks of the
// query's rows (kThreads / dim rows each, a row's dim threads and dim floats of shared memory; rows past the
// last are idle), then the head weights' scale blocks (indexer_rope_qat_kernel's strided y[i] *= s; each value
// scaled once, whatever the partition). No block reads what another writes.
__global__ void __launch_bounds__(kThreads) compressors_qat_kernel(CompressorArgs a0, CompressorArgs a1, int pair,
                                                                   IndexerQatArgs q, RopeFreqs f, float k,
                                                                   int row_blocks) {
  __shared__ float sh[kThreads];
  grid_dependency_wait();  // the projections, rings and rows come from the work before
  const int b = static_cast<int>(blockIdx.x);
  if (b < 2 * pair) {
    compressor_pair_block(b < pair ? a0 : a1, b % pair);
    return;
  }
  const int rb = b - 2 * pair;
  if (rb >= row_blocks) {
    const int64_t step = static_cast<int64_t>(static_cast<int>(gridDim.x) - 2 * pair - row_blocks) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(rb - row_blocks) * blockDim.x + threadIdx.x; i < q.scale_count; i += step)
      q.scale_x[i] *= q.scale;
    return;
  }
  const int slot = static_cast<int>(threadIdx.x) / q.dim;
  const int64_t r = static_cast<int64_t>(rb) * (kThreads / q.dim) + slot;
  rope_qat_row(q, f, k, r, static_cast<int>(threadIdx.x) % q.dim, sh + slot * q.dim, r < q.rows);
}

// Whether indexer_qat would take q by indexer_rope_qat_kernel (a valid decode-sized query RoPE + QAT) and a
// block of kThreads holds whole rows.
bool rope_qat_fusable(const IndexerQatArgs& q) {
  return q.n_rot > 0 && q.rows > 0 && q.rows <= kMaxFusedRows && q.dim >= 32 && q.dim <= kThreads &&
         (q.dim & (q.dim - 1)) == 0 && q.n_rot % 2 == 0 && q.n_rot <= q.dim && q.n_rot / 2 <= kMaxRopePairs &&
         q.pos != nullptr && q.freq != nullptr && q.heads >= 1 && q.rows % q.heads == 0 && q.x_at == nullptr &&
         q.count == nullptr;
}

}  // namespace

void CudaBackend::compressors_and_qat(std::span<const CompressorArgs> jobs, const IndexerQatArgs& q) {
  if (!small_v6_ || !rope_qat_fusable(q) || !compressor_pair_ok(jobs)) {
    compressor_many(jobs);
    indexer_qat(q);
    return;
  }
  for (const CompressorArgs& j : jobs)
    if (j.n_out) *j.n_out = 0;
  const int pair = std::max({jobs[0].segments, jobs[1].segments, 1});
  const int per = kThreads / q.dim;
  const int row_blocks = static_cast<int>((q.rows + per - 1) / per);
  const int sblocks = q.scale_x && q.scale_count > 0
                          ? static_cast<int>(std::min<int64_t>(4, (q.scale_count + kThreads - 1) / kThreads))
                          : 0;
  const float k = static_cast<float>(1.0 / std::sqrt(static_cast<double>(q.dim)));  // indexer_qat's
  if (!check(launch_dependent(hc_pdl_ && !on_side_ && sm90(), dim3(static_cast<unsigned>(2 * pair + row_blocks + sblocks)),
                              kThreads, 0, stream(), compressors_qat_kernel, jobs[0], jobs[1], pair, q,
                              rope_freqs(q.freq, q.n_rot), k, row_blocks),
             "compressors + indexer rope + qat"))
    return;
  for (const CompressorArgs& j : jobs)  // as compressor_many: one session's emitted rows (batched calls: none)
    if (j.n_out && j.segments == 0) *j.n_out = (j.pos0 + j.n) / j.ratio - j.pos0 / j.ratio;
}

}  // namespace ds4::backend::cuda
