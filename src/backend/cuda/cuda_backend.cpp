// cuda_backend.cpp — CudaBackend construction, device memory, transfers and error reporting.
// Kernels live in the ops_*.cu files; this file is plain C++ against the CUDA runtime API.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/gemm_q8.h"
#include "backend/cuda/hc_boundary.h"

namespace ds4::backend::cuda {

// CudaBackendOptions::small_v5 = -1: session 8's small kernels (ops_qat.cu, ops_norm_rope.cu, ops_hc.cu) by
// default: the H200 (W2) showed them bit for bit the previous kernels (test_cuda_small5.cpp, 248 cases) and
// faster (a prefill chunk's HC pre 315 against 388 µs, the indexer query's RoPE + QAT 164 against 310; docs/PERF.md).
constexpr bool kSmallV5Auto = true;
// CudaBackendOptions::small_v6 = -1: session 9's compressors + indexer query QAT in one launch stays off: the H200 (W2)
// showed it bit for bit the two ops (test_cuda_small6, 320 PARITY lines) and 1.3 µs faster alone, but not faster in
// the decode stage table (per-token graph sum 7,641 against 7,637 µs; docs/PERF.md).
constexpr bool kSmallV6Auto = false;
// CudaBackendOptions::hc_fuse = -1: 50. Units digit 0: the decode HC pre in two launches — the H200 (session 9 W1)
// showed the one-launch HC pre bit for bit the two launches (test_cuda_hc_fuse.cpp) but slower: 10.68 against 7.45 µs
// at n = 1, 2–4× slower from 2 tokens (the last blocks' finish runs after every block instead of beside the segment
// kernel as a programmatic dependent; docs/PERF.md). Tens digit 5: a prefill chunk's HC controls on
// hc_controls_prefill.cu's form 5 (the weights resident in shared memory, no normed copy of the state, the split
// kernel adding the segment sums) instead of rms_norm + the few-row F16 MMA matmul (tens digit 0) — the H200
// (session 14 W3): bit for bit (CudaHcFuse.PrefillControlsEqualNormThenMatmul; test_cuda_model with 50: 26 passed), the
// HC pre at 2,048 tokens 0.196 → 0.149 ms, 4-layer 2K → 4K chunks 31.273 → 30.869 ms (six rounds, each faster).
// Hundreds digit 5 (session 15, engineer head): the output head's HC (HcPreArgs' head form) on the spread kernels (bit
// 1; 3 launches for 6) and the greedy argmax as one cluster of 8 blocks a row (bit 4) — the H200 (W1, W2): bit for bit
// (CudaHcFuse.HeadFormEqualsPieces, the argmax policy cases; test_cuda_model 26 passed with 650 and 750, supersets of
// 550's kernels), the head's HC 19.8 → 8.2 µs, the whole head (+ matvec + argmax) 173.5 → 147.2 µs, 4-layer greedy
// decode steps at 2K −25.1 µs (5 of 5 rounds; the HC alone −16.2, the argmax alone −5.3; docs/PERF.md).
constexpr int kHcFuseAuto = 550;
// CudaBackendOptions::attn_out_rope = -1: on — the output's inverse RoPE inside the sliced decode merge. The H200
// (session 11 W1, W2) showed it bit for bit attention then rope (CudaSmall7, CudaAttention), the engine path through
// test_cuda_model with it on (26 passed), −0.8 / −0.9 µs per HCA / CSA layer alone and 4-layer decode steps at 2K
// 0.861 / 0.867 against 0.883 / 0.885 ms (docs/PERF.md).
constexpr bool kAttnOutRopeAuto = true;
// CudaBackendOptions::hc_post_fold = -1: 9 — a decode token's sublayer boundary (HC post + next HC pre) as one launch
// of an 8-block cluster, a programmatic dependent also after a join (hc_boundary.cu). The H200 (session 11 W2): bit for
// bit hc_post then hc_pre (CudaSmall7.HcBoundaryEqualsPostThenPre), test_cuda_model 26 passed with it on, 9.15 against
// 9.54 µs a boundary in a graph (9.00 / 9.35 over 86 matrices > L2); 16 blocks (5) measured the same and needs the
// non-portable cluster size; the plain launch (2) was slower, 10.44 (docs/PERF.md). Session 12: 9 (was 4) — the kernel
// block 0's split warp off y's norm barrier, the partial sums pushed into the blocks that add them and the TF32 split
// of the activations formed once in shared memory (HcBoundaryLaunch::form 25). The H200 (session 12 W3): bit for bit
// (CudaSmall7.HcBoundaryEqualsPostThenPre, 472 cases of forms 6 … 9), test_cuda_model 26 passed with 9 compiled in
// (its tiny models never take the kernel: dim ≠ 4096), 5.92 against 6.34 µs a boundary without the split (the
// engine's; 5.77 / 6.20 over 86 matrices > L2), 4-layer decode steps at 2K 0.8009 against 0.8037 ms (8 of 8 rounds).
// Session 13: 13 (was 9) — HcBoundaryLaunch::form 505: the warp's two quarters in 3 MMA tiles (96 MMAs a warp, not
// 128), the pushes as st.async completing on the adder's mbarrier (no cluster barriers after the first), each warp's
// own TF32 split and a stream's segment sums added by its two warps, the pushed sums added by warp_sum's tree. The H200
// (session 13 W1, W2): bit for bit (CudaSmall7.HcBoundaryPackedEqualsPostThenPre, 118 cases a form), 4.57 against 5.94
// µs a boundary without the split (4.45 / 5.78 over 86 matrices > L2), 4-layer decode steps at 2K 0.7837 / 0.7924
// against 0.7941 / 0.8006 ms (15 of 16 rounds; −1.2 µs a boundary). test_cuda_model's tiny models (dim 64 / 256) never
// take the kernel (its shape check: dim = 4096), so the flip leaves what that suite runs unchanged.
constexpr int kHcPostFoldAuto = 13;
// CudaBackendOptions::f16_mma_decode_kernel = -1: the register-direct decode kernel (0) until another form wins.
constexpr int kF16DecKernelAuto = 0;
// CudaBackendOptions::gemm_q8_parts = -1: on — the H200 (session 9 W1) showed the one-launch parts bit for bit
// one launch per part (CudaGemm.Q8PartsLaunchIsBitIdenticalToOneLaunchPerPart) and faster (out_a's 8 groups at
// 2,048 vectors 0.754 against 0.868 ms, gate + up 0.352 against 0.366; docs/PERF.md).
constexpr bool kGemmQ8PartsAuto = true;
// CudaBackendOptions::norm_rope_loads_first = -1: on — the H200 (session 9 W2) showed it bit for bit the default
// (CudaFused.NormRopeLoadsFirstEqualsDefault) and faster (q's norm + RoPE at 2,048 × 64 × 512: 0.168 against 0.216 ms).
constexpr bool kNormRopeLoadsFirstAuto = true;

static std::string mib(uint64_t b) { return std::to_string((b + (1u << 20) - 1) >> 20) + " MiB"; }

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver" error for later callers
    return 0;
  }
  return n;
}

Result<std::unique_ptr<Backend>> make_cuda_backend(const CudaBackendOptions& opts) {
  const int n = cuda_device_count();
  if (n == 0) return unavailable("cuda backend: no CUDA device is available (no GPU or no driver)");
  if (opts.device < 0 || opts.device >= n)
    return invalid_argument("cuda backend: device " + std::to_string(opts.device) + " does not exist (" +
                            std::to_string(n) + " visible)");
  // hc_fuse's tens digit: hc_controls_prefill.cu's forms 3 and 5 (1, 2, 4 removed: docs/PERF.md, session 14); its
  // hundreds digit the output head's launches: bit 1 its HC (HcPreArgs' head form, ops_hc.cu) on the spread kernels
  // instead of the pieces, bit 4 the greedy argmax's cluster form (argmax.cu); 2, 3 (the last HC post folded into the
  // segment kernel / its launch programmatic) were measured and removed in session 15.
  if (const int form = opts.hc_fuse / 10 % 10, head = opts.hc_fuse / 100;
      head > 5 || head == 2 || head == 3 || form >= 6 || form == 1 || form == 2 || form == 4)
    return invalid_argument("cuda backend: hc_fuse " + std::to_string(opts.hc_fuse) + " names no prefill controls form");
  cudaError_t e = cudaSetDevice(opts.device);
  if (e != cudaSuccess) return unavailable(std::string("cuda backend: cudaSetDevice: ") + cudaGetErrorString(e));
  cudaStream_t s = nullptr;
  int least = 0, greatest = 0;  // CudaBackendOptions::branch_priority: the main stream first (lower = higher)
  if (opts.branches && opts.branch_priority && cudaDeviceGetStreamPriorityRange(&least, &greatest) != cudaSuccess) {
    (void)cudaGetLastError();
    greatest = least = 0;
  }
  e = greatest != least ? cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, greatest)
                        : cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (e != cudaSuccess) return unavailable(std::string("cuda backend: cudaStreamCreate: ") + cudaGetErrorString(e));
  e = upload_iq2xxs_tables();
  if (e == cudaSuccess) e = upload_gemm_tables();
  if (e == cudaSuccess) e = upload_gemm_experts_tables();
  if (e == cudaSuccess) e = upload_decode_tables();
  if (e == cudaSuccess) e = upload_skinny_tables();
  if (e == cudaSuccess) e = init_tile_kernels();
  if (e != cudaSuccess) {
    cudaStreamDestroy(s);
    return unavailable(std::string("cuda backend: kernel tables and limits: ") + cudaGetErrorString(e));
  }
  auto be = std::unique_ptr<CudaBackend>(new CudaBackend(opts.device, s));
  be->set_tensor_cores(opts.tensor_cores);
  be->set_decode_kernels(opts.decode_kernels);
  be->set_expert_tiles(opts.expert_tiles);
  be->set_expert_tiles_lean(opts.expert_tiles_lean);
  be->set_expert_tiles_fast(opts.expert_tiles_fast);
  be->set_expert_tiles_warp_max(opts.expert_tiles_warp_max);
  be->set_expert_tiles_pdl(opts.expert_tiles_pdl);
  be->set_expert_one_token(opts.expert_one_token);
  be->set_expert_row_tiles_min(opts.expert_row_tiles_min);
  be->set_expert_row_tiles_perm(opts.expert_row_tiles_perm);
  be->set_expert_row_tiles_v2(opts.expert_row_tiles_v2);
  be->set_expert_row_tiles_v3(opts.expert_row_tiles_v3);
  be->set_f16_segments(opts.f16_segments);
  be->set_hc_router_v2(opts.hc_router_v2);
  be->set_hc_pdl(opts.hc_pdl);
  be->set_small_v3(opts.small_v3);
  be->set_small_v4(opts.small_v4);
  be->set_small_v5(opts.small_v5 < 0 ? kSmallV5Auto : opts.small_v5 != 0);
  be->set_small_v6(opts.small_v6 < 0 ? kSmallV6Auto : opts.small_v6 != 0);
  // hc_fuse: the units the decode HC pre's launches (0 … 2; larger units as 2), the tens digit the prefill
  // controls' form (hc_controls_prefill.cu's 3 or 5; 0: rms_norm + the few-row matmul), the hundreds the head form's.
  be->set_hc_fuse(opts.hc_fuse < 0 ? kHcFuseAuto : opts.hc_fuse / 10 * 10 + std::min(opts.hc_fuse % 10, 2));
  be->set_attn_out_rope(opts.attn_out_rope < 0 ? kAttnOutRopeAuto : opts.attn_out_rope != 0);
  // An hc_post_fold value of no boundary form (10 … 12 and 14, removed in session 14; values never made) is rejected,
  // as gemm_experts' below: hc_boundary would refuse it and the boundary run as hc_post then hc_pre under its name.
  if (opts.hc_post_fold >= 2 && hc_boundary_form(opts.hc_post_fold) < 0)
    return invalid_argument("cuda backend: hc_post_fold " + std::to_string(opts.hc_post_fold) +
                            " is not a boundary form of this build (removed or never made; docs/PERF.md); -1 picks the "
                            "default, " + std::to_string(kHcPostFoldAuto));
  be->set_hc_post_fold(opts.hc_post_fold < 0 ? kHcPostFoldAuto : opts.hc_post_fold);
  be->set_gemm_pipelined(opts.gemm_pipelined);
  // gemm_q8's twin of the gemm_experts check below: a value launch_parts does not name (removed, never made)
  // would run the default under its name.
  if (!gemm_q8_known(opts.gemm_q8))
    return invalid_argument("cuda backend: gemm_q8 " + std::to_string(opts.gemm_q8) +
                            " is not a variant of this build (removed or never made; docs/PERF.md); -1 picks the default");
  be->set_gemm_q8(opts.gemm_q8);
  be->set_gemm_q8_parts(opts.gemm_q8_parts < 0 ? kGemmQ8PartsAuto : opts.gemm_q8_parts != 0);
  be->set_norm_rope_loads_first(opts.norm_rope_loads_first < 0 ? kNormRopeLoadsFirstAuto : opts.norm_rope_loads_first != 0);
  be->set_prefill_glue(opts.prefill_glue);
  // A gemm_experts value that is not one of gemm_experts.cu's variants (e.g. one removed after the H200 runs,
  // docs/PERF.md) is rejected rather than run as the default, so an old command line cannot measure the default
  // unawares.
  if (opts.gemm_experts >= 0 && experts_variant(opts.gemm_experts) != opts.gemm_experts)
    return invalid_argument("cuda backend: gemm_experts " + std::to_string(opts.gemm_experts) +
                            " is not a variant of this build (removed or never made; docs/PERF.md); -1 picks the default, " +
                            std::to_string(experts_variant(-1)));
  be->set_gemm_experts(opts.gemm_experts);
  be->set_attention_segments(opts.attention_mma, opts.attention_segments, opts.attention_split_max_blocks, opts.attention_heads_per_warp);
  // 10: 3 with its chunk loop on 32-bit counters (attention_mma_chunk.cu; 3's default), 9: with the previous
  // int64 loop; 7 and 8 (16 warps) lost in session 10.
  const int amk = opts.attention_mma_kernels;
  // 14: 3 with each warp's segments pipelined (attention_mma_chunk.cu, session 11; 11, 12 and 13 lost on the H200).
  // 18: 14 with its row copies 8 lanes a row (session 12; 3's pipelined form takes its copies). 15–17 and 19, 20 (blocks
  // walking several items, kernel 3's and 18's steps) lost on the H200 in session 12.
  // 31: 3 with one decode query's sliced merge a programmatic dependent of its split kernel (attention_mma.cu, session 12;
  // the split and its merge in one launch, measured as 15 / 30, lost in session 12's H200 runs and was not landed).
  // 25, 26: 10 and 18 with q staged through shared memory and the exactness checks as independent chains (session 13). 21,
  // 22 (10 and 18 with the value product's rows loaded 16 bytes wide: register-pair moves), 23, 24 (the checks alone) and
  // 27, 28 (25, 26 also asking the next wave's q into L2) lost to them on the H200 in session 13 (docs/PERF.md).
  // 32: 26 with a query's last segment formed only over its n-tiles and k-steps holding rows; 34: 32 with each interval's
  // row copies spread over the score product's k-steps (session 14). 33, 35 (32, 34 with one block per multiprocessor
  // walking items, the next item's start carried into the current one's end) lost to them on the H200 in session 14.
  // 37 (session 14, engineer dattn): 31 with the split kernel a programmatic dependent of the kernel before it (the q
  // norm + RoPE lets it start after its own wait; its rows staged before the split's wait); its other forms, measured on
  // branch-only values and not kept, are in docs/PERF.md's session 14 dattn section.
  if (amk != 0 && amk != 1 && amk != 3 && amk != 9 && amk != 10 && amk != 14 && amk != 18 && amk != 25 && amk != 26 &&
      amk != 31 && amk != 32 && amk != 34 && amk != 37)
    return invalid_argument("cuda backend: attention_mma_kernels " + std::to_string(amk) +
                            " is not one of 0, 1, 3, 9, 10, 14, 18, 25, 26, 31, 32, 34, 37 (2 and 4 were removed: slower on the H200)");
  be->set_attention_mma_tuning(opts.attention_merge_sliced, opts.attention_mma_kernels, opts.indexer_select);
  be->set_indexer_v2(opts.indexer_v2);
  be->set_indexer_decode(opts.indexer_decode);
  be->set_indexer_mma(opts.indexer_mma);
  be->set_f16_many(opts.f16_many);
  be->set_compressor_parallel(opts.compressor_parallel);
  be->set_f16_tiles(opts.f16_tiles);
  be->set_f16_mma(opts.f16_mma);
  be->set_f16_mma_decode(opts.f16_mma_decode, opts.f16_mma_decode_rows, opts.f16_mma_decode_segs,
                         opts.f16_mma_decode_kernel < 0 ? kF16DecKernelAuto : opts.f16_mma_decode_kernel);
  be->set_f16_mma_pdl(opts.f16_mma_pdl, opts.f16_mma_cluster);
  be->set_gemv_mma(opts.gemv_mma);
  be->set_gemv_dense(opts.gemv_dense);
  be->set_gemv_stream(opts.gemv_stream, opts.gemv_stream_pdl, opts.gemv_stream_chunks);
  be->set_gemv_rows(opts.gemv_rows, opts.gemv_rows_no_l1);
  be->set_gemv_bulk(opts.gemv_bulk);
  be->set_gemv_warp(opts.gemv_warp, opts.gemv_warp_tile_bytes);
  be->set_l2_prefetch_mode(opts.l2_prefetch_mode);
  be->set_max_graphs(opts.max_graphs);
  if (Status st = be->set_branches(opts.branches); !st.ok()) return st;
  return std::unique_ptr<Backend>(std::move(be));
}

WeightUploadStats weight_upload_stats(const Backend& be) {
  if (auto* c = dynamic_cast<const CudaBackend*>(&be)) return c->upload_stats();
  return {};
}

DeviceInfo device_info(const Backend& be) {
  DeviceInfo info;
  auto* c = dynamic_cast<const CudaBackend*>(&be);
  if (!c) return info;
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, c->device()) == cudaSuccess) {
    std::memcpy(info.name, p.name, std::min(sizeof(info.name) - 1, std::strlen(p.name)));
    info.cc_major = p.major;
    info.cc_minor = p.minor;
  }
  size_t fr = 0, tot = 0;
  if (cudaMemGetInfo(&fr, &tot) == cudaSuccess) {
    info.free = fr;
    info.total = tot;
  }
  return info;
}

void* cuda_stream(const Backend& be) {
  auto* c = dynamic_cast<const CudaBackend*>(&be);
  return c ? static_cast<void*>(c->stream()) : nullptr;
}

CudaBackend::CudaBackend(int device, cudaStream_t stream) : device_(device), stream_(stream) {}

CudaBackend::~CudaBackend() {
  (void)uploader_.release_staging();
  cudaStreamSynchronize(stream_);
  for (cudaEvent_t e : marks_)
    if (e) cudaEventDestroy(e);
  if (stage_done_) cudaEventDestroy(stage_done_);
  if (stage_) cudaFreeHost(stage_);
  if (bounce_) cudaFreeHost(bounce_);
  for (cudaEvent_t e : read_back_done_)
    if (e) cudaEventDestroy(e);
  if (read_back_host_) cudaFreeHost(read_back_host_);
  for (StepGraph& g : graphs_) drop_graph(g);
  for (void* p : weights_) cudaFree(p);
  release_branches();
  for (DeviceScratch* s : scratch_areas())
    if (s->ptr) cudaFree(s->ptr);
  cudaStreamDestroy(stream_);
}

bool CudaBackend::check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  if (recording_) {  // nothing ran yet: the caller reruns the ops eagerly (step_graphs.cpp)
    if (capture_error_.ok())
      capture_error_ = internal_error(std::string("cuda backend: ") + what + " while recording: " + cudaGetErrorString(e));
    return false;
  }
  if (first_error_.ok())
    first_error_ = internal_error(std::string("cuda backend: ") + what + ": " + cudaGetErrorString(e));
  return false;
}

void CudaBackend::fail(Status s) {
  if (recording_) {
    if (capture_error_.ok()) capture_error_ = std::move(s);
    return;
  }
  if (first_error_.ok()) first_error_ = std::move(s);
}

Status CudaBackend::sync() {
  if (uploading_) {  // the last weight copies finish here; their wait belongs to the upload time
    const auto t0 = std::chrono::steady_clock::now();
    check(uploader_.release_staging(), "weight upload");
    upload_stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    uploading_ = false;
  }
  join();  // the side lane's work is then behind the main lane's end
  check(cudaStreamSynchronize(stream_), "stream synchronize");
  return first_error_;
}

// A device allocation that failed: name the request and what the device has left.
static Status oom(const char* what, uint64_t bytes, const char* cat) {
  size_t fr = 0, tot = 0;
  cudaMemGetInfo(&fr, &tot);
  (void)cudaGetLastError();
  return out_of_memory(std::string("cuda backend: cannot allocate ") + mib(bytes) + " for " + what + " (" + cat +
                       "); the device has " + mib(fr) + " free of " + mib(tot));
}

Result<Buffer> CudaBackend::alloc(uint64_t bytes, MemCategory cat) {
  if (bytes == 0) return Buffer(this, nullptr, 0, cat);
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) return oom("a buffer", bytes, mem_category_name(cat));
  // The interface promises zero-filled memory; ordered on the stream before any op that uses it.
  if (!check(cudaMemsetAsync(p, 0, bytes, stream_), "alloc memset")) {
    cudaFree(p);
    return first_error_;
  }
  counted_[cat] += bytes;
  return Buffer(this, p, bytes, cat);
}

void CudaBackend::release(void* ptr, uint64_t bytes, MemCategory cat) {
  // cudaFree waits for the device, so queued ops that still read the buffer finish first.
  check(cudaFree(ptr), "free");
  counted_[cat] -= bytes;
}

Result<const void*> CudaBackend::map_weight(const void* host, uint64_t bytes) {
  // One device allocation per tensor, filled from the mmap'd file through the pinned staging ring
  // (weight_upload.h; no host copy of ours beyond the ring). Counted in upload_stats_, not in
  // allocated(): the engine already counts mapped weight bytes once under `weights`.
  const auto t0 = std::chrono::steady_clock::now();
  if (bytes == 0) return static_cast<const void*>(nullptr);
  if (!host) return invalid_argument("cuda backend: map_weight of " + mib(bytes) + " from a null host pointer");
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess)
    return oom("a weight tensor", bytes, "weights").with_context(
        "after " + mib(upload_stats_.bytes) + " of weights were uploaded; the model does not fit in device memory");
  const char* what = "";
  cudaError_t e = uploader_.enqueue(p, host, bytes, stream_, &what);
  uploading_ = true;
  if (e != cudaSuccess) {
    (void)uploader_.release_staging();
    cudaFree(p);
    return internal_error(std::string("cuda backend: weight upload: ") + what + ": " + cudaGetErrorString(e));
  }
  weights_.push_back(p);
  upload_stats_.bytes += bytes;
  upload_stats_.tensors += 1;
  upload_stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<const void*>(p);
}

MemBytes CudaBackend::allocated() const {
  MemBytes m = counted_;
  m[MemCategory::scratch] += scratch_bytes_;
  return m;
}

void CudaBackend::upload(void* dst, const void* src, uint64_t bytes) {
  // `src` may be reused as soon as this returns. A small copy (a step's inputs: a few KB) goes through the
  // page-locked ring: one memcpy here and a DMA the stream runs in order, with no driver staging. Larger
  // ones (and a failed ring allocation) copy from pageable memory, which the driver stages before returning.
  join();  // step inputs go on the main lane, ahead of the step that reads them
  if (!bytes) return;
  if (bytes <= kStageBytes / 4 && !stage_) {
    if (cudaMallocHost(reinterpret_cast<void**>(&stage_), kStageBytes) != cudaSuccess ||
        cudaEventCreateWithFlags(&stage_done_, cudaEventDisableTiming) != cudaSuccess) {
      (void)cudaGetLastError();
      if (stage_) cudaFreeHost(stage_);
      stage_ = nullptr;
    }
  }
  if (bytes > kStageBytes / 4 || !stage_) {
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "upload");
    return;
  }
  uint64_t off = (stage_head_ + 15) / 16 * 16;
  if (off + bytes > kStageBytes) {
    // Wrap: the earliest slots may still be read by queued copies; the last copy done means all are.
    check(cudaEventSynchronize(stage_done_), "upload staging wait");
    off = 0;
  }
  std::memcpy(stage_ + off, src, bytes);
  stage_head_ = off + bytes;
  check(cudaMemcpyAsync(dst, stage_ + off, bytes, cudaMemcpyHostToDevice, stream_), "upload");
  check(cudaEventRecord(stage_done_, stream_), "upload staging event");
}

void CudaBackend::download(void* dst, const void* src, uint64_t bytes) {
  // Waits for the copy (and so for all queued work). Up to kStageBytes (one session's logits, a greedy
  // step's token ids) land in page-locked memory by one DMA and are copied out here.
  if (!bytes) return;
  join();
  if (bytes <= kStageBytes && !bounce_ && cudaMallocHost(reinterpret_cast<void**>(&bounce_), kStageBytes) != cudaSuccess) {
    (void)cudaGetLastError();
    bounce_ = nullptr;
  }
  const bool bounce = bounce_ && bytes <= kStageBytes;
  check(cudaMemcpyAsync(bounce ? bounce_ : dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "download");
  if (check(cudaStreamSynchronize(stream_), "download synchronize") && bounce) std::memcpy(dst, bounce_, bytes);
}

void CudaBackend::read_back_start(int slot, const void* src, uint64_t bytes) {
  if (slot < 0 || slot >= kReadBackSlots || bytes > kReadBackBytes) {
    fail(invalid_argument("cuda backend: read-back slot " + std::to_string(slot) + " of " + std::to_string(bytes) +
                          " bytes is out of range"));
    return;
  }
  join();
  if (!read_back_host_) {
    bool ok = cudaMallocHost(reinterpret_cast<void**>(&read_back_host_), kReadBackSlots * kReadBackBytes) == cudaSuccess;
    for (cudaEvent_t& e : read_back_done_) ok = ok && cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess;
    if (!ok) {
      (void)cudaGetLastError();
      fail(internal_error("cuda backend: no page-locked memory or event for the read-back slots"));
      return;
    }
  }
  check(cudaMemcpyAsync(read_back_host_ + slot * kReadBackBytes, src, bytes, cudaMemcpyDeviceToHost, stream_),
        "read back");
  check(cudaEventRecord(read_back_done_[slot], stream_), "read back event");
}

Status CudaBackend::read_back_wait(int slot, void* dst, uint64_t bytes) {
  if (slot < 0 || slot >= kReadBackSlots || bytes > kReadBackBytes)
    return invalid_argument("cuda backend: read-back slot " + std::to_string(slot) + " of " + std::to_string(bytes) +
                            " bytes is out of range");
  if (!read_back_host_ || !read_back_done_[slot])
    return first_error_.ok() ? internal_error("cuda backend: read_back_wait without read_back_start") : first_error_;
  // Only this copy: a step queued behind it keeps the device busy meanwhile.
  check(cudaEventSynchronize(read_back_done_[slot]), "read back wait");
  std::memcpy(dst, read_back_host_ + slot * kReadBackBytes, bytes);
  return first_error_;
}

void CudaBackend::time_mark(int slot) {
  if (slot < 0 || slot >= static_cast<int>(marks_.size())) return;
  if (!marks_[slot] && !check(cudaEventCreate(&marks_[slot]), "timing event")) return;
  check(cudaEventRecord(marks_[slot], stream_), "timing event record");
}

double CudaBackend::time_ms(int from, int to) {
  const int n = static_cast<int>(marks_.size());
  if (from < 0 || to < 0 || from >= n || to >= n || !marks_[from] || !marks_[to]) return -1;
  float ms = 0;
  if (cudaEventElapsedTime(&ms, marks_[from], marks_[to]) != cudaSuccess) {
    (void)cudaGetLastError();  // not recorded yet, or not complete: no figure, no error of the step's
    return -1;
  }
  return ms;
}

void CudaBackend::copy(void* dst, const void* src, uint64_t bytes) {
  if (bytes) check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "copy");
}

bool CudaBackend::ensure(DeviceScratch& s, uint64_t bytes, const char* what) {
  if (s.bytes >= bytes) return true;
  if (recording_) {  // freeing scratch a recorded graph points at is not allowed; rerun eagerly
    fail(internal_error(std::string("cuda backend: ") + what + " scratch would grow while recording a graph"));
    return false;
  }
  ++scratch_gen_;  // graphs recorded before point at the old area
  const uint64_t want = std::max<uint64_t>(bytes, s.bytes * 3 / 2);
  if (s.ptr) {
    check(cudaFree(s.ptr), "scratch free");
    scratch_bytes_ -= s.bytes;
    s = {};
  }
  void* p = nullptr;
  if (cudaMalloc(&p, want) != cudaSuccess) {
    fail(oom(what, want, "scratch"));
    return false;
  }
  s.ptr = p;
  s.bytes = want;
  scratch_bytes_ += want;
  return true;
}

}  // namespace ds4::backend::cuda
