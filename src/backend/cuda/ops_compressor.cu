// ops_compressor.cu — the KV compressor frontier update and softmax pooling (MODEL.md §7.4, §10.2).
//
// Tokens are sequential (a token may close a block the next one starts), so one thread block walks
// the chunk and its threads split the row width — for decode and batched steps (a CSA layer's two
// compressors in one launch with compressor_many); a prefill chunk of one
// session pools its blocks in parallel (compressor_pool_chunk_kernel, the same values). The count of emitted rows depends only on the
// positions, so the host computes it (CompressorArgs::n_out is host memory) without waiting.
#include <algorithm>
#include <string>

#include "backend/cuda/common.cuh"
#include "backend/cuda/compressor_ring.cuh"
#include "backend/cuda/cuda_impl.h"
#include "backend/exact_math.h"

namespace ds4::backend::cuda {

namespace {

template <typename Args>
__global__ void compressor_ring_kernel(Args a) {
  compressor_ring_body(a);
}

template <typename Args>
__global__ void compressor_ring_segments_kernel(Args a) {
  compressor_ring_segment(a, static_cast<int>(blockIdx.x));
}

// Session 9: whether compressor_ring2_kernel is a programmatic dependent with hc_pdl on sm_90 (same kernel, same
// bits: test_cuda_small6.cpp); a constant, so turning it off rebuilds one file.
constexpr bool kRing2Pdl = true;

// Two independent compressors in one launch (compressor_many, small_v4: a CSA layer's attention and indexer
// compressors, ~3.5 µs each on the decode chain): grid (⌈max blocks⌉, 2), blockIdx.y picks the job, whose
// blocks run exactly the single launches' bodies (segment s, or the one walking block); blocks past a
// job's count leave at once (before any barrier). With kRing2Pdl a programmatic dependent of the projections
// before it (a CSA layer's decode chain on the main lane: matmul_many, this, the indexer query's QAT).
__global__ void compressor_ring2_kernel(CompressorArgs a0, CompressorArgs a1) {
  grid_dependency_wait();  // the projections and the rings come from the work before; a no-op in a plain launch
  compressor_pair_block(blockIdx.y == 0 ? a0 : a1, static_cast<int>(blockIdx.x));
}

// Prefill chunks of one session (n ≥ kPoolChunkMin, CudaBackendOptions::compressor_parallel): the rows
// compressor_ring_body pools, one thread per (emitted block, output dimension) instead of one block
// walking the tokens (2,048 sequential steps per call). Block B's candidates are its r tokens and
// (overlap) block B−1's; a token of this chunk is read from kv and score + ape (the expression the walk
// stores in the ring), an earlier one from the ring, which still holds it: a ring row is overwritten
// only by a token ≥ `slots` later, and slots ≥ 2r (overlap) or r rows reach past every block that
// reads it. Per output the same candidates in the same order, so the same bits as the walk.
// Then compressor_ring_store_kernel leaves the ring as the walk does: the chunk's last `slots` tokens.
constexpr int64_t kPoolChunkMin = 64;

__device__ inline float chunk_score(const CompressorArgs& a, int64_t t, int64_t col, int64_t width) {
  return t >= a.pos0 ? a.score[(t - a.pos0) * width + col] + a.ape[(t % a.ratio) * width + col]
                     : a.state_score[(t % a.slots) * width + col];
}
__device__ inline float chunk_kv(const CompressorArgs& a, int64_t t, int64_t col, int64_t width) {
  return t >= a.pos0 ? a.kv[(t - a.pos0) * width + col] : a.state_kv[(t % a.slots) * width + col];
}

// grid (⌈out_dim / blockDim⌉, emitted): blockIdx.y = emitted row e, block B = pos0/r + e.
__global__ void compressor_pool_chunk_kernel(CompressorArgs a) {
  const int64_t D = a.out_dim, r = a.ratio;
  const int64_t width = a.overlap ? 2 * D : D;
  const int64_t e = blockIdx.y;
  const int64_t B = a.pos0 / r + e;
  const int64_t d = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (blockIdx.x == 0 && threadIdx.x == 0) a.out_pos[e] = static_cast<int32_t>(B * r);
  if (d >= D) return;
  const bool has_prev = a.overlap && B > 0;
  const int64_t cur_col = a.overlap ? D : 0, tp = (B - 1) * r, tc = B * r;
  float mx = -INFINITY;
  if (has_prev)
    for (int64_t s = 0; s < r; ++s) mx = fmaxf(mx, chunk_score(a, tp + s, d, width));
  for (int64_t s = 0; s < r; ++s) mx = fmaxf(mx, chunk_score(a, tc + s, cur_col + d, width));
  float denom = 0, acc = 0;
  if (has_prev)
    for (int64_t s = 0; s < r; ++s) {
      const float ex = exact_exp(chunk_score(a, tp + s, d, width) - mx);
      denom += ex;
      acc += ex * chunk_kv(a, tp + s, d, width);
    }
  for (int64_t s = 0; s < r; ++s) {
    const float ex = exact_exp(chunk_score(a, tc + s, cur_col + d, width) - mx);
    denom += ex;
    acc += ex * chunk_kv(a, tc + s, cur_col + d, width);
  }
  a.out[e * D + d] = acc / denom;
}

// grid (⌈width / blockDim⌉, tokens): token t = first + blockIdx.y into ring row t mod slots.
__global__ void compressor_ring_store_kernel(CompressorArgs a, int64_t first) {
  const int64_t width = a.overlap ? 2 * static_cast<int64_t>(a.out_dim) : a.out_dim;
  const int64_t t = first + blockIdx.y, i = t - a.pos0, row = t % a.slots;
  const int64_t d = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (d >= width) return;
  a.state_kv[row * width + d] = a.kv[i * width + d];
  a.state_score[row * width + d] = a.score[i * width + d] + a.ape[(t % a.ratio) * width + d];
}

// Fixed frontier (backend.h without CompressorArgs::slots): `overlap ? 2·ratio : ratio` rows; with
// overlap rows [0, ratio) hold the previous block and [ratio, 2·ratio) the current one, shifted down
// after each pooled block; an empty slot has score −inf.
// kv, score: [n][width]; ape: [ratio][width]; state: [slots][width]; out: [*][out_dim].
__global__ void compressor_shift_kernel(CompressorArgs a) {
  const int64_t D = a.out_dim;
  const int64_t width = a.overlap ? 2 * D : D;
  const int64_t cur = a.overlap ? a.ratio : 0;  // first slot of the current block
  int64_t emitted = 0;
  for (int64_t i = 0; i < a.n; ++i) {
    const int64_t t = a.pos0 + i;
    const int64_t j = t % a.ratio;
    float* skv = a.state_kv + (cur + j) * width;
    float* ssc = a.state_score + (cur + j) * width;
    for (int64_t d = threadIdx.x; d < width; d += blockDim.x) {
      skv[d] = a.kv[i * width + d];
      ssc[d] = a.score[i * width + d] + a.ape[j * width + d];
    }
    if ((t + 1) % a.ratio != 0) continue;
    __syncthreads();
    float* out = a.out + emitted * D;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      // Candidates in the CPU's order: (overlap) previous block series A = slots [0, r) column d, then
      // current block series B = slots [r, 2r) column D+d; (no overlap) slots [0, r) column d.
      float mx = -INFINITY;
      for (int s = 0; s < a.ratio; ++s) mx = fmaxf(mx, a.state_score[s * width + d]);
      if (a.overlap)
        for (int s = 0; s < a.ratio; ++s) mx = fmaxf(mx, a.state_score[(cur + s) * width + D + d]);
      float denom = 0, acc = 0;
      for (int s = 0; s < a.ratio; ++s) {
        const float sc = a.state_score[s * width + d];
        if (sc == -INFINITY) continue;  // empty slot (no previous block yet)
        const float e = exact_exp(sc - mx);
        denom += e;
        acc += e * a.state_kv[s * width + d];
      }
      if (a.overlap)
        for (int s = 0; s < a.ratio; ++s) {
          const float sc = a.state_score[(cur + s) * width + D + d];
          if (sc == -INFINITY) continue;
          const float e = exact_exp(sc - mx);
          denom += e;
          acc += e * a.state_kv[(cur + s) * width + D + d];
        }
      out[d] = acc / denom;
    }
    if (threadIdx.x == 0) a.out_pos[emitted] = static_cast<int32_t>(t + 1 - a.ratio);
    ++emitted;
    if (a.overlap) {  // the current block becomes the previous one
      __syncthreads();
      for (int64_t q = threadIdx.x; q < a.ratio * width; q += blockDim.x) {
        a.state_kv[q] = a.state_kv[cur * width + q];
        a.state_score[q] = a.state_score[cur * width + q];
      }
    }
    __syncthreads();
  }
}

}  // namespace

// The frontier layout follows backend.h: a ring of `slots` rows when CompressorArgs has that field,
// the fixed two-block layout otherwise (the interface is changing under the forward pass; both
// compile, each matching the CPU op of the same header).
template <typename Args>
static bool launch_compressor(const Args& a, cudaStream_t s, std::string* why) {
  if constexpr (requires { a.slots; }) {
    if (a.slots < (a.overlap ? 2 : 1) * a.ratio || a.slots % a.ratio != 0) {
      *why = "slots " + std::to_string(a.slots) + " is not a multiple of ratio holding the blocks pooling needs";
      return false;
    }
    if constexpr (requires { a.segments; }) {
      if (a.segments > 0) {
        compressor_ring_segments_kernel<<<static_cast<unsigned>(a.segments), 512, 0, s>>>(a);
        return true;
      }
    }
    compressor_ring_kernel<<<1, 512, 0, s>>>(a);
  } else {
    compressor_shift_kernel<<<1, 512, 0, s>>>(a);
  }
  return true;
}

void CudaBackend::compressor(const CompressorArgs& a) {
  if (a.n_out) *a.n_out = 0;
  if (a.segments > 0) {  // a batched step (n_out is not written; see backend.h)
    if (failed()) return;
    if (a.ratio <= 0 || a.out_dim <= 0 || a.seg == nullptr) {
      fail(invalid_argument("cuda compressor: bad batched call (ratio " + std::to_string(a.ratio) + ", " +
                            std::to_string(a.segments) + " segments)"));
      return;
    }
    std::string why;
    if (!launch_compressor(a, stream(), &why)) {
      fail(invalid_argument("cuda compressor: " + why));
      return;
    }
    launched("compressor segments");
    return;
  }
  if (failed() || a.n <= 0) return;
  if (a.ratio <= 0 || a.out_dim <= 0 || a.pos0 < 0) {
    fail(invalid_argument("cuda compressor: ratio " + std::to_string(a.ratio) + ", out_dim " +
                          std::to_string(a.out_dim) + ", pos0 " + std::to_string(a.pos0) + " out of range"));
    return;
  }
  const int64_t emitted = (a.pos0 + a.n) / a.ratio - a.pos0 / a.ratio;
  const bool ring_ok = a.slots >= (a.overlap ? 2 : 1) * a.ratio && a.slots % a.ratio == 0;  // else launch_compressor says why
  if (compressor_parallel_ && ring_ok && a.n >= kPoolChunkMin && emitted <= 65535) {
    const int64_t width = a.overlap ? 2 * static_cast<int64_t>(a.out_dim) : a.out_dim;
    constexpr int kThreads = 128;
    if (emitted > 0) {
      const dim3 grid(grid_for(a.out_dim, kThreads), static_cast<unsigned>(emitted));
      compressor_pool_chunk_kernel<<<grid, kThreads, 0, stream()>>>(a);
      if (!launched("compressor pool (chunk)")) return;
    }
    const int64_t first = std::max<int64_t>(a.pos0, a.pos0 + a.n - a.slots);
    const dim3 sgrid(grid_for(width, kThreads), static_cast<unsigned>(a.pos0 + a.n - first));
    compressor_ring_store_kernel<<<sgrid, kThreads, 0, stream()>>>(a, first);
    if (launched("compressor ring store (chunk)") && a.n_out) *a.n_out = emitted;
    return;
  }
  std::string why;
  if (!launch_compressor(a, stream(), &why)) {
    fail(invalid_argument("cuda compressor: " + why));
    return;
  }
  if (launched("compressor") && a.n_out) *a.n_out = emitted;
}

// Two jobs that compressor() would each run as one walking launch (a batched step's segments, or a
// decode-sized call of one session) go out as one compressor_ring2_kernel launch; anything else (a prefill
// chunk's parallel pooling, a bad call, whose error compressor() reports) runs job by job.
bool CudaBackend::compressor_pair_ok(std::span<const CompressorArgs> jobs) {
  auto one_walk = [&](const CompressorArgs& a) {
    const bool ring_ok = a.ratio > 0 && a.out_dim > 0 && a.slots >= (a.overlap ? 2 : 1) * a.ratio &&
                         a.slots % a.ratio == 0;
    if (a.segments > 0) return ring_ok && a.seg != nullptr;
    return ring_ok && a.n > 0 && a.pos0 >= 0 && !(compressor_parallel_ && a.n >= kPoolChunkMin);
  };
  return small_v4_ && jobs.size() == 2 && !failed() && one_walk(jobs[0]) && one_walk(jobs[1]);
}

void CudaBackend::compressor_many(std::span<const CompressorArgs> jobs) {
  if (!compressor_pair_ok(jobs)) {
    for (const CompressorArgs& j : jobs) compressor(j);
    return;
  }
  for (const CompressorArgs& j : jobs)
    if (j.n_out) *j.n_out = 0;
  const int blocks = std::max({jobs[0].segments, jobs[1].segments, 1});
  if (!check(launch_dependent(kRing2Pdl && small_v3_ && hc_pdl_ && !on_side_ && sm90(), dim3(static_cast<unsigned>(blocks), 2), 512, 0,
                              stream(), compressor_ring2_kernel, jobs[0], jobs[1]),
             "compressors (2)"))
    return;
  for (const CompressorArgs& j : jobs)  // as compressor(): one session's emitted rows (batched calls: none)
    if (j.n_out && j.segments == 0) *j.n_out = (j.pos0 + j.n) / j.ratio - j.pos0 / j.ratio;
}

}  // namespace ds4::backend::cuda
