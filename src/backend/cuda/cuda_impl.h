// cuda_impl.h — the CudaBackend class shared by the cuda/*.cu op files (not a public header).
//
// Each op family lives in its own file (ops_*.cu) as member functions of this class. Ops enqueue on
// the backend's one stream and never synchronize, except where the interface hands a count back to
// the host (compressor n_out is computed on the host; the indexer reads its row counts to size its
// scratch). A failed launch or CUDA call is recorded once (the first error wins) and returned by sync().
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <array>
#include <chrono>
#include <list>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/weight_upload.h"

namespace ds4::backend::cuda {

// Batches of at most this many vectors take the decode matvec / routed-expert kernels (gemv_decode.cu).
inline constexpr int kDecodeMaxVec = 4;
// Batches of at most this many vectors (and more than the decode kernels take) run the skinny matmul /
// routed-expert kernels of gemv_skinny.cu instead of the tensor-core GEMM or the per-vector matvec:
// decode steps of many sessions. 0 turns them off (the previous paths, for before/after comparisons).
inline constexpr int64_t kSkinnyMaxVec = 64;
// From kGemmMinVectors vectors on, a dense matmul that the tensor-core GEMM supports stays on the skinny
// kernel only while n·rows·cols is at most this: the skinny kernel's time grows with n (H200, issue 8:
// q_a 1024×4096 17/43/80 µs at n = 8/32/64), the GEMM's is flat (~100 µs on ≤ 16 row tiles, 53 µs on
// 32, 630–700 µs for the 129,280-row head, where the skinny kernel took 699/2236/4451 µs).
inline constexpr int64_t kSkinnyMaxMacs = int64_t{1} << 28;

// Routed experts of at most this many tokens run as expert tiles (moe_tiles.cu: each (expert, row
// tile) read once for all its pairs), with CudaBackendOptions::expert_tiles; larger batches (prefill)
// keep the grouped tensor-core GEMM. H200, 256 Flash experts, random routing (docs/PERF.md): the
// grouped GEMM took 2.5 ms at 32 tokens and 3.6 ms at 64, near 10 % of the copy bandwidth.
inline constexpr int64_t kTileMaxTokens = 64;
// Dense Q8_0 matmuls of 1..kMmaMaxVec vectors run on gemv_mma.cu (int8 MMA block sums, cp.async weight
// ring, CPU block order) when gemv_mma_supports() says the shape fits.
inline constexpr int64_t kMmaMaxVec = 64;
// Dense Q8_0 matmuls of 1..kDenseMaxVec vectors run on gemv_dense.cu (whole-row tiles through a cp.async
// ring, block terms to shared memory, one FADD chain per (row, vector)) when gemv_dense_supports() says
// the shape fits and CudaBackendOptions::gemv_dense picks it.
inline constexpr int64_t kDenseMaxVec = 16;

// One grow-only device scratch area (freed and reallocated larger when an op needs more).
struct DeviceScratch {
  void* ptr = nullptr;
  uint64_t bytes = 0;
};

// Vectors grouped by expert for the tensor-core GEMM (ops_gemm.cu group_by_expert; device arrays in
// the backend's moe_groups_ scratch): `order` lists vector ids sorted by expert, `tiles` holds
// [max_tiles][3] = (expert, first index into order, count ≤ 64), *n_tiles of them valid.
struct ExpertGroups {
  const int32_t* order = nullptr;
  const int32_t* tiles = nullptr;
  const int32_t* n_tiles = nullptr;
  int32_t max_tiles = 0;
};

// From this many vectors a dense quantized matmul runs as a tensor-core GEMM (ops_gemm.cu) instead of
// the matvec: below it the weights are read about once either way and the matvec has less overhead.
inline constexpr int64_t kGemmMinVectors = 8;
// Routed experts are grouped by expert (one GEMM tile per 64 pairs of an expert) from this many
// (token, slot) pairs: with fewer, most experts see one pair and grouping only adds launches.
inline constexpr int64_t kGroupMinPairs = 64;

// A quantized-activation matvec over `n_vec` vectors (the matmul op and the routed experts).
// Vector v reads activation row v / x_div and, when `ids` is set, expert ids[v] of the weights.
struct GemvJob {
  Weight w;                        // one matrix, or expert 0 of a 3-D tensor
  uint64_t expert_bytes = 0;       // bytes between experts (ids != null)
  const int32_t* ids = nullptr;    // [n_vec] expert of each vector (device), or null
  int32_t n_expert = 0;
  const float* x = nullptr;        // [rows][x_stride] float activations (device)
  int64_t x_stride = 0;
  int32_t x_div = 1;
  float* y = nullptr;              // [n_vec][y_stride]
  int64_t y_stride = 0;
  int64_t n_vec = 0;
  MatmulNumerics numerics = MatmulNumerics::ds4;
  const ExpertGroups* groups = nullptr;  // with ids: run grouped by expert on tensor cores
  int64_t group_rows = 0, group_x_stride = 0;  // grouped matmul (MatmulArgs::group_rows), dense only
};

// The matmul op's job (no expert ids, one activation row per vector).
inline GemvJob gemv_job(const MatmulArgs& a) {
  GemvJob j;
  j.w = a.w;
  j.x = a.x;
  j.x_stride = a.x_stride;
  j.y = a.y;
  j.y_stride = a.y_stride;
  j.n_vec = a.n;
  j.numerics = a.numerics;
  j.group_rows = a.group_rows;
  j.group_x_stride = a.group_x_stride;
  return j;
}

// Whether the prefill GEMM handles `j` (ds4 numerics; Q8_0, IQ2_XXS or Q2_K on tensor cores with whole
// 256-value stages, dense with n_vec ≥ kGemmMinVectors or grouped by expert; F16 dense with n_vec ≥
// kGemmMinVectors on the CUDA cores). The one dispatch point is gemv().
bool gemm_supports(const GemvJob& j);
// Whether gemm_q8.cu takes a job: dense Q8_0, cols a multiple of 256, 16-byte aligned weights, rows,
// activations and activation stride, and its 218 KiB of shared memory within the device's opt-in limit.
bool gemm_q8_fits(const GemvJob& j, const uint8_t* act, uint64_t act_stride, int smem_optin);
// Whether CudaBackend::gemm_q8 takes grouped job j (group_rows > 0) as one launch of its groups
// (CudaBackendOptions::gemm_q8_parts): 2 … 8 whole groups over consecutive column ranges of x
// (group_x_stride = cols), ds4 numerics, more vectors than the decode kernels take, weights gemm_q8_fits
// accepts on `device`. The caller quantizes each row's G·cols values once.
bool gemm_q8_group_fits(const GemvJob& j, int device);
// gemm_experts.cu (its entry is gemm_experts.h): CudaBackendOptions::gemm_experts with −1 resolved
// (kExpertsAuto), and the upload of its IQ2_XXS grid.
int experts_variant(int option);
cudaError_t upload_gemm_experts_tables();
// Whether gemv_mma.cu handles `j`: Q8_0 under ds4 numerics, dense (no ids, x_div 1), 1 ≤ n_vec ≤
// kMmaMaxVec, a whole number of 8-block (272-byte) chunks per row, 16-byte aligned rows.
bool gemv_mma_supports(const GemvJob& j);
// Whether a supported job is one where gemv_mma.cu measured faster than the previous kernels
// (CudaBackendOptions::gemv_mma = wins).
bool gemv_mma_wins(const GemvJob& j);
// Whether gemv_dense.cu handles `j`: Q8_0 under ds4 numerics, dense (no ids, x_div 1; grouped allowed),
// 1 ≤ n_vec ≤ kDenseMaxVec, whole 8-block chunks per row, 16-byte aligned rows, its tiles within 160 KB
// of shared memory.
bool gemv_dense_supports(const GemvJob& j);
// Whether a supported job is one where gemv_dense.cu measured faster (CudaBackendOptions::gemv_dense = wins).
bool gemv_dense_wins(const GemvJob& j);
// gemv_stream.cu: dense Q8_0 matmuls of 1..kDenseMaxVec vectors as one launch over up to kStreamMaxParts
// parts sharing a column count — one matrix, the groups of a grouped one, or matmul_many's matrices
// that share an input — each resident block streaming a contiguous row range of one part.
inline constexpr int kStreamMaxParts = 8;
struct StreamSet {
  struct Part {
    const uint8_t* w = nullptr;  // Q8_0 [rows][row_bytes]
    const float* x = nullptr;    // [n_vec][x_stride] (device)
    float* y = nullptr;          // [n_vec][y_stride]
    int64_t y_stride = 0, rows = 0;
  };
  Part part[kStreamMaxParts];
  int n_parts = 0;
  int64_t cols = 0, n_vec = 0, x_stride = 0;
  uint64_t row_bytes = 0;
};
// Whether gemv_stream.cu handles `j` (Q8_0 under ds4 numerics, dense, grouped in ≤ kStreamMaxParts groups,
// 1 ≤ n_vec ≤ kDenseMaxVec, whole 8-block chunks per row, 16-byte aligned rows); a launch can still
// decline a shape whose shared memory does not fit (then the other kernels run).
bool gemv_stream_supports(const GemvJob& j);
// Whether a supported job is one where gemv_stream.cu measured faster (CudaBackendOptions::gemv_stream = wins),
// with column chunks for wide rows or not (gemv_stream_chunks).
bool gemv_stream_wins(const GemvJob& j, bool chunks);
// Whether a supported job is one where gemv_stream.cu's bulk ring measured faster (CudaBackendOptions::gemv_bulk
// = wins; sm_90 only, the caller checks).
bool gemv_bulk_wins(const GemvJob& j);
// A job's parts (its groups, or the one matrix) as gemv_stream.cu and gemv_rows.cu take them.
StreamSet stream_set_of(const GemvJob& j);
// The blocks of a launch of ~grid_target blocks dealt to the parts in proportion to their rows (at least
// one, at most one per row): blocks[i] for part i; returns their sum.
int64_t deal_stream_blocks(const StreamSet& s, int64_t grid_target, int64_t* blocks);
// gemv_rows.cu: dense Q8_0 matmuls of 1..kRowsMaxVec vectors with the weights loaded straight into
// registers (a thread per 272-byte octet of a row), the StreamSet parts of gemv_stream.cu.
inline constexpr int kRowsMaxVec = 8;
// Whether gemv_rows.cu handles `j` (what gemv_stream_supports takes, n_vec ≤ kRowsMaxVec, ≤ 256 octets a row).
bool gemv_rows_supports(const GemvJob& j);
// gemv_warp.cu: dense Q8_0 matmuls of 1..kWarpMaxVec vectors on per-warp bulk rings (sm_90; CudaBackendOptions::
// gemv_warp). Whether a StreamSet is one where it measured faster than the kernels after it (gemv_warp = wins).
inline constexpr int kWarpMaxVec = 4;
bool gemv_warp_wins(const StreamSet& s);
// Whether a supported job is one where gemv_rows.cu measured faster (CudaBackendOptions::gemv_rows = wins).
bool gemv_rows_wins(const GemvJob& j);

// Driver virtual-memory entry points (cuda_region.cpp loads them; types only from cuda.h, no libcuda link).
struct VmmApi {
  decltype(&cuMemAddressReserve) reserve = nullptr;
  decltype(&cuMemAddressFree) address_free = nullptr;
  decltype(&cuMemCreate) create = nullptr;
  decltype(&cuMemRelease) release = nullptr;
  decltype(&cuMemMap) map = nullptr;
  decltype(&cuMemUnmap) unmap = nullptr;
  decltype(&cuMemSetAccess) set_access = nullptr;
  decltype(&cuMemGetAllocationGranularity) granularity = nullptr;
};

// One recorded step (step_graphs.cpp): the key it was recorded for, the instantiated graph (null until
// recorded), the scratch generation it points into, and its use stamp for eviction.
struct StepGraph {
  std::vector<int64_t> key;
  cudaGraphExec_t exec = nullptr;
  uint64_t scratch_gen = 0;
  uint64_t last_use = 0;
  uint64_t device_bytes = 0;  // free device memory the instantiation took (step_graphs.cpp)
  bool unrecordable = false;  // a recording failed once: this key always runs eagerly
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, cudaStream_t stream);
  ~CudaBackend() override;

  const char* name() const override { return "cuda"; }
  bool host_memory() const override { return false; }

  Result<Buffer> alloc(uint64_t bytes, MemCategory cat) override;
  void release(void* ptr, uint64_t bytes, MemCategory cat) override;
  Result<const void*> map_weight(const void* host, uint64_t bytes) override;
  MemBytes allocated() const override;
  uint64_t region_block_bytes() const override;                         // cuda_region.cpp
  Result<Region> reserve_region(uint64_t max_bytes, MemCategory cat) override;
  Status resize_region(Region& r, uint64_t bytes) override;
  void release_region(Region& r) override;
  // True when regions use the driver's virtual memory management (else the copying fallback).
  bool vmm_enabled();
  void upload(void* dst, const void* src, uint64_t bytes) override;
  void download(void* dst, const void* src, uint64_t bytes) override;
  void copy(void* dst, const void* src, uint64_t bytes) override;
  void fill_f32(float* dst, float value, int64_t count) override;  // ops_elementwise.cu
  Status sync() override;
  void time_mark(int slot) override;                 // cuda_backend.cpp (events made on first use)
  double time_ms(int from, int to) override;
  void read_back_start(int slot, const void* src, uint64_t bytes) override;  // cuda_backend.cpp
  Status read_back_wait(int slot, void* dst, uint64_t bytes) override;
  GraphMode graph_begin(std::span<const int64_t> key) override;  // step_graphs.cpp
  bool graph_end() override;                                      // step_graphs.cpp
  void graph_cancel() override;                                   // step_graphs.cpp
  void graph_release(int64_t owner) override;                     // step_graphs.cpp
  // Steps kept as graphs (CudaBackendOptions::max_graphs; 0: graph_begin always answers eager).
  void set_max_graphs(int n) { max_graphs_ = n < 0 ? 0 : n; }
  // Graphs recorded / replayed since the backend was made (benchmarks and tests).
  uint64_t graphs_recorded() const { return graphs_recorded_; }
  uint64_t graphs_replayed() const { return graphs_replayed_; }
  // Recorded graphs held now, and the device memory their instantiations took (measured).
  uint64_t graphs_kept() const {
    uint64_t k = 0;
    for (const StepGraph& g : graphs_) k += g.exec ? 1 : 0;
    return k;
  }
  uint64_t graph_device_bytes() const { return graph_bytes_; }
  // Concurrent branches (branches.cpp; backend.h fork/resume_main/join): a second stream with its own
  // per-op scratch areas. Turning them on creates the stream and its events; off (the default), the three
  // calls do nothing and every op runs in order on the one stream.
  Status set_branches(bool on);
  void fork() override;
  void resume_main() override;
  void join() override;
  void prefetch(std::span<const Weight> ws) override;  // l2_prefetch.cu

  void matmul(const MatmulArgs& a) override;            // ops_matmul.cu
  void matmul_many(std::span<const MatmulArgs> jobs) override;  // matmul_f16_many.cu (F16 jobs in one launch)
  void rms_norm(const RmsNormArgs& a) override;         // ops_norm_rope.cu
  void rope(const RopeArgs& a) override;                // ops_norm_rope.cu
  void embed(const EmbedArgs& a) override;              // ops_matmul.cu (shares the block decoders)
  void hc_split(const HcSplitArgs& a) override;         // ops_hc.cu
  void hc_head(const HcHeadArgs& a) override;           // ops_hc.cu
  void hc_collapse(const HcCollapseArgs& a) override;   // ops_hc.cu
  void hc_post(const HcPostArgs& a) override;           // ops_hc.cu
  void hc_pre(const HcPreArgs& a) override;             // ops_hc.cu (fused: two kernels)
  void norm_rope(const NormRopeArgs& a) override;       // ops_norm_rope.cu (fused: one kernel)
  void fp8_round(const Fp8RoundArgs& a) override;       // ops_qat.cu
  void indexer_qat(const IndexerQatArgs& a) override;   // ops_qat.cu
  void f16_round(float* x, int64_t count) override;     // ops_elementwise.cu
  void add(float* y, const float* x, int64_t count) override;   // ops_elementwise.cu
  void scale(float* y, float s, int64_t count) override;        // ops_elementwise.cu
  void compressor(const CompressorArgs& a) override;    // ops_compressor.cu
  void compressor_many(std::span<const CompressorArgs> jobs) override;  // ops_compressor.cu
  void compressors_and_qat(std::span<const CompressorArgs> jobs, const IndexerQatArgs& qat) override;  // compressors_qat.cu
  // Whether compressor_many runs `jobs` as one paired walking launch (ops_compressor.cu).
  bool compressor_pair_ok(std::span<const CompressorArgs> jobs);
  void attention(const AttentionArgs& a) override;      // ops_attention.cu
  void indexer(const IndexerArgs& a) override;          // ops_indexer.cu
  void router(const RouterArgs& a) override;            // ops_moe.cu
  void moe(const MoeArgs& a) override;                  // ops_moe.cu
  void swiglu(const SwigluArgs& a) override;            // ops_elementwise.cu
  void argmax(const ArgmaxArgs& a) override;            // argmax.cu

  // Matvec of GemvJob (ops_matmul.cu); quantizes activations into scratch when the numerics need it.
  // Few vectors go to the decode kernels below when they apply (the one place that picks a path).
  void gemv(const GemvJob& j, DeviceScratch& act_scratch);
  // Tensor-core GEMM of a job gemm_supports() accepts, on activations gemv() has quantized (ops_gemm.cu).
  void gemm(const GemvJob& j, const uint8_t* act, uint64_t act_stride);
  // gemm_q8.cu: a dense Q8_0 job gemm_q8_fits() accepts, in launch shape `variant` (1, 3 … 8; −1: by grid
  // size), or a grouped one gemm_q8_group_fits() accepts as one launch of its groups. Returns
  // true (an error, if any, recorded).
  bool gemm_q8(const GemvJob& j, const uint8_t* act, uint64_t act_stride, int variant);
  // gemm_q8.cu, CudaBackendOptions::gemm_q8_parts: matmul_many's jobs as one launch (shape gemm_q8_) on one
  // quantization of their shared input into act_: 2 … 8 Q8_0 jobs on the same x, n and cols, each one
  // gemm_q8_fits accepts, more vectors than the decode kernels take. false (nothing launched) otherwise.
  bool gemm_q8_many(std::span<const MatmulArgs> jobs);
  // F16 rows under ds4 numerics, every batch size, in README.md's segment order (matmul_f16.cu).
  void gemv_f16(const GemvJob& j);
  // The same jobs in README.md's F16 MMA order on tensor cores (matmul_f16_mma.cu; CudaBackendOptions::f16_mma).
  void gemv_f16_mma(const GemvJob& j);
  // matmul_many's F16 jobs in one launch in the MMA order; false when the jobs are not its (nothing launched).
  bool matmul_many_f16_mma(std::span<const MatmulArgs> jobs);
  // Decode-sized jobs (1 … 8 vectors, ≤ 8 jobs of the same n) in the MMA order, one launch, a warp per
  // quarter (matmul_f16_mma_decode.cu; CudaBackendOptions::f16_mma_decode); false when not theirs
  // (nothing launched), true otherwise (an error, if any, recorded).
  bool f16_mma_decode(std::span<const GemvJob> jobs);
  // Sorts vector ids by ids[v] into moe_groups_ (no host sync); false (error recorded) on failure.
  bool group_by_expert(const int32_t* ids, int64_t n, int32_t n_expert, ExpertGroups* g);
  // Decode paths (gemv_decode.cu): false when the job is not theirs (then nothing was launched).
  bool gemv_decode(const GemvJob& j);       // quantized ds4 rows, n_vec ≤ kDecodeMaxVec, activation quantization fused
  bool gemv_decode_grouped(const GemvJob& j);  // the same for a grouped job (group_rows > 0) in one launch
  bool moe_decode(const MoeArgs& a);        // routed experts, n ≤ kDecodeMaxVec, k ≤ 8, quantized ds4
  bool attention_decode(const AttentionArgs& a);  // attention_decode.cu: split rows, any batch
  // Skinny paths (gemv_skinny.cu), n ≤ kSkinnyMaxVec: false when the job is not theirs (nothing launched).
  // gemv_skinny: a dense quantized ds4 job on activations already quantized (act: [rows][act_stride]).
  bool gemv_skinny(const GemvJob& j, const uint8_t* act, uint64_t act_stride);
  // gemv_mma.cu: a job gemv_mma_supports() accepts, on activations already quantized (Q8_0 act rows
  // [n_vec][act_stride]); false (nothing launched) otherwise.
  bool gemv_mma(const GemvJob& j, const uint8_t* act, uint64_t act_stride);
  // gemv_dense.cu: a job gemv_dense_supports() accepts (activations quantized in the kernel, or into
  // act_scratch first when n·cols is large); false (nothing launched) otherwise.
  bool gemv_dense(const GemvJob& j, DeviceScratch& act_scratch);
  // gemv_stream.cu: a job gemv_stream_supports() accepts (groups as parts); matmul_many's Q8_0 jobs
  // that share x (same n, columns and row bytes) in one launch; a StreamSet. False: nothing launched.
  bool gemv_stream(const GemvJob& j, DeviceScratch& act_scratch);
  bool gemv_stream_many(std::span<const MatmulArgs> jobs, DeviceScratch& act_scratch);
  // bulk: the bulk ring (CudaBackendOptions::gemv_bulk, sm_90 only; false — declined — below it).
  bool gemv_stream_set(const StreamSet& s, DeviceScratch& act_scratch, bool bulk = false);
  // A dense-part kernel's launch set-up (gemv_stream.cu, gemv_rows.cu): dense_smem raises its dynamic
  // shared-memory limit to smem_limit (capped by the device) once (*smem_set; false: an error was recorded);
  // dense_launch runs `kernel` over `blocks` blocks of `threads` with its one argument *params, as a
  // programmatic dependent where gemv_stream_pdl allows it (sm_90, not the side lane).
  bool dense_smem(const void* kernel, bool* smem_set, uint64_t smem_limit, const char* what);
  void dense_launch(const void* kernel, uint64_t smem, int64_t blocks, int threads, void* params, const char* what);
  // gemv_warp.cu: a StreamSet of ≤ kWarpMaxVec vectors (sm_90); false: declined (nothing launched).
  bool gemv_warp_set(const StreamSet& s, DeviceScratch& act_scratch);
  // gemv_rows.cu: a StreamSet of ≤ kRowsMaxVec vectors; false: declined (nothing launched).
  bool gemv_rows_set(const StreamSet& s, DeviceScratch& act_scratch);
  // sm_count_, cc_major_ and dense_smem_optin_ read once; false: an error was recorded.
  bool stream_device_info();
  // One quantize_act over every part's inputs (n·cols too large to quantize in each block): acts[i] =
  // part i's activation rows, *act_vec their stride. 1: done; 0: error recorded; −1: the parts' inputs
  // are not one row of 4-block-aligned offsets (nothing launched).
  int stream_quantize_parts(const StreamSet& s, DeviceScratch& act_scratch, uint64_t* act_vec, const uint8_t** acts);
  // moe_skinny: routed experts grouped by expert on the device; writes y [n·k][dim] (one row per
  // (token, slot) pair with a valid id) for moe()'s slot sum.
  bool moe_skinny(const MoeArgs& a, float* h, float* y);
  // moe_tiles (moe_tiles.cu): routed experts of n ≤ kTileMaxTokens tokens, pairs grouped by expert on
  // the device, each (expert, row tile) read once; writes h [n·k][ff] and y [n·k][dim] like moe_skinny.
  bool moe_tiles(const MoeArgs& a, float* h, float* y);
  // Quantizes rows x [rows][x_stride] of `cols` values into `out` as the activation blocks of weight
  // type t (Q8_0 act or Q8_K); returns the row stride in bytes, 0 on failure (error recorded).
  uint64_t quantize_act(GgmlType t, const float* x, int64_t x_stride, int64_t rows, int64_t cols, DeviceScratch& out);
  // ops_hc.cu: HC pre of n ≤ 32 tokens spread over the device (hc_router_v2); false when the shape is
  // not one it takes (then nothing was launched).
  bool hc_pre_spread(const HcPreArgs& a);
  bool hc_pre_post_folded(const HcPreArgs& a);  // ops_hc.cu: HcPreArgs::prev_post inside the spread pre's kernels
  // Whether the device is sm_90 or newer (programmatic dependent launch); false with an error recorded when
  // the attribute cannot be read.
  bool sm90() { return cc_major() >= 9; }
  // attention_segments.cu: README.md's segment order, split or chunk shape by batch size; false when
  // head_dim is not 64, 128, 256 or 512 (then nothing was launched).
  bool attention_segments(const AttentionArgs& a);
  // attention_mma.cu: README.md's MMA order on TF32 tensor cores, split or chunk shape by batch size;
  // false when head_dim is not 64, 128, 256 or 512 (then nothing was launched). *out_rope_done (when given):
  // whether a.out_rot's inverse RoPE was done inside the kernels (the sliced merge); else it is left to the caller.
  bool attention_mma(const AttentionArgs& a, bool* out_rope_done = nullptr);
  // indexer_mma.cu: a prefill chunk's scores ([n][score_stride] floats) on int8 tensor cores, the CPU's
  // bits; false when the shape is not one it takes (the caller then runs the CUDA-core kernels).
  bool indexer_scores_mma(const IndexerArgs& a, float* scores, int64_t score_stride, int64_t max_rows);

  // Records the first failure; returns true when `e` is cudaSuccess.
  bool check(cudaError_t e, const char* what);
  void fail(Status s);
  bool failed() const { return !first_error_.ok(); }
  // Checks the last launch (call right after <<<...>>>).
  bool launched(const char* kernel) { return check(cudaGetLastError(), kernel); }
  // Grows `s` to at least `bytes`; false (error recorded) on failure.
  bool ensure(DeviceScratch& s, uint64_t bytes, const char* what);

  cudaStream_t stream() const { return stream_; }
  void set_tensor_cores(bool on) { tensor_cores_ = on; }
  bool tensor_cores() const { return tensor_cores_; }
  void set_decode_kernels(bool on) { decode_kernels_ = on; }
  void set_expert_tiles(bool on) { expert_tiles_ = on; }
  void set_expert_tiles_lean(bool on) { expert_tiles_lean_ = on; }
  void set_expert_tiles_fast(bool on) { expert_tiles_fast_ = on; }
  void set_expert_tiles_warp_max(int n) { expert_tiles_warp_max_ = n; }
  void set_expert_tiles_pdl(int on) { expert_tiles_pdl_ = on; }
  void set_expert_one_token(int on) { expert_one_token_ = on; }
  void set_expert_row_tiles_min(int n) { expert_row_tiles_min_ = n; }
  void set_expert_row_tiles_perm(bool on) { expert_row_tiles_perm_ = on; }
  void set_expert_row_tiles_v2(bool on) { expert_row_tiles_v2_ = on; }
  void set_expert_row_tiles_v3(int mode) { expert_row_tiles_v3_ = mode; }
  void set_f16_segments(bool on) { f16_segments_ = on; }
  void set_hc_router_v2(bool on) { hc_router_v2_ = on; }
  void set_hc_pdl(bool on) { hc_pdl_ = on; }
  void set_small_v3(bool on) { small_v3_ = on; }
  void set_small_v4(bool on) { small_v4_ = on; }
  void set_small_v5(bool on) { small_v5_ = on; }
  void set_small_v6(bool on) { small_v6_ = on; }
  void set_hc_fuse(int mode) { hc_fuse_ = mode; }
  void set_attn_out_rope(bool on) { attn_out_rope_ = on; }
  void set_hc_post_fold(int mode) { hc_post_fold_ = mode; }
  void set_gemm_pipelined(bool on) { gemm_pipelined_ = on; }
  void set_gemm_q8(int variant) { gemm_q8_ = variant; }
  void set_gemm_q8_parts(bool on) { gemm_q8_parts_ = on; }
  void set_norm_rope_loads_first(bool on) { norm_rope_loads_first_ = on; }
  void set_prefill_glue(bool on) { prefill_glue_ = on; }
  void set_gemm_experts(int variant) { gemm_experts_ = experts_variant(variant); }
  void set_gemv_mma(GemvMma m) { gemv_mma_ = m; }
  void set_gemv_dense(GemvMma m) { gemv_dense_ = m; }
  void set_l2_prefetch_mode(int m) { l2_prefetch_mode_ = m; }
  void set_gemv_stream(GemvMma m, bool pdl, bool chunks) {
    gemv_stream_ = m;
    gemv_stream_pdl_ = pdl;
    gemv_stream_chunks_ = chunks;
  }
  void set_gemv_bulk(GemvMma m) { gemv_bulk_ = m; }
  void set_gemv_warp(GemvMma m, int tile_bytes) {
    gemv_warp_ = m;
    gemv_warp_tile_bytes_ = tile_bytes;
  }
  void set_gemv_rows(GemvMma m, bool no_l1) {
    gemv_rows_ = m;
    gemv_rows_no_l1_ = no_l1;
  }
  void set_attention_segments(bool mma, bool on, int split_max_blocks, int heads_per_warp) {
    attention_mma_ = mma;
    attention_segments_ = on;
    attn_split_max_blocks_ = split_max_blocks;
    attn_heads_per_warp_ = heads_per_warp;
  }
  void set_attention_mma_tuning(bool merge_sliced, int kernels, int indexer_select) {
    attn_merge_sliced_ = merge_sliced;
    attn_mma_kernels_ = kernels;
    idx_select_ = indexer_select;
  }
  void set_indexer_v2(bool on) { indexer_v2_ = on; }
  void set_indexer_decode(bool on) { indexer_decode_ = on; }
  void set_indexer_mma(bool on) { indexer_mma_ = on; }
  void set_f16_many(bool on) { f16_many_ = on; }
  void set_compressor_parallel(bool on) { compressor_parallel_ = on; }
  void set_f16_tiles(bool on) { f16_tiles_ = on; }
  void set_f16_mma(bool on) { f16_mma_ = on; }
  void set_f16_mma_pdl(bool pdl, bool cluster) {
    f16_mma_pdl_ = pdl;
    f16_mma_cluster_ = cluster;
  }
  void set_f16_mma_decode(bool on, int rows, int segs, int kernel) {
    f16_mma_decode_ = on;
    f16_dec_kernel_ = kernel;
    f16_dec_rows_ = rows == 4 || rows == 8 || rows == 16 ? rows : 0;
    f16_dec_segs_ = segs == 1 || segs == 2 || segs == 4 ? segs : 0;
  }
  int device() const { return device_; }
  // The device's compute capability major, read on first use (0 after a failed read, recorded in check).
  int cc_major() {
    if (cc_major_ == 0) check(cudaDeviceGetAttribute(&cc_major_, cudaDevAttrComputeCapabilityMajor, device_), "device attribute");
    return cc_major_;
  }
  const WeightUploadStats& upload_stats() const { return upload_stats_; }

 private:
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  Status first_error_;
  bool decode_kernels_ = true;            // CudaBackendOptions::decode_kernels
  bool expert_tiles_ = true;              // CudaBackendOptions::expert_tiles
  bool expert_tiles_lean_ = true;         // CudaBackendOptions::expert_tiles_lean
  bool expert_tiles_fast_ = true;         // CudaBackendOptions::expert_tiles_fast
  int expert_tiles_warp_max_ = -1;        // CudaBackendOptions::expert_tiles_warp_max
  int expert_tiles_pdl_ = -1;             // CudaBackendOptions::expert_tiles_pdl
  int expert_one_token_ = -1;             // CudaBackendOptions::expert_one_token
  int expert_row_tiles_min_ = -1;         // CudaBackendOptions::expert_row_tiles_min
  bool expert_row_tiles_perm_ = false;    // CudaBackendOptions::expert_row_tiles_perm
  bool expert_row_tiles_v2_ = false;      // CudaBackendOptions::expert_row_tiles_v2
  int expert_row_tiles_v3_ = -1;          // CudaBackendOptions::expert_row_tiles_v3
  bool f16_segments_ = true;              // CudaBackendOptions::f16_segments
  bool hc_router_v2_ = true;              // CudaBackendOptions::hc_router_v2
  bool hc_pdl_ = true;                    // CudaBackendOptions::hc_pdl
  bool small_v3_ = true;                  // CudaBackendOptions::small_v3
  bool small_v4_ = true;                  // CudaBackendOptions::small_v4
  bool small_v5_ = false;                 // CudaBackendOptions::small_v5
  bool small_v6_ = false;                 // CudaBackendOptions::small_v6
  int hc_fuse_ = 0;                       // CudaBackendOptions::hc_fuse (resolved: 0 off, 1 at n = 1, 2 n ≤ 32)
  bool attn_out_rope_ = false;            // CudaBackendOptions::attn_out_rope (resolved)
  int hc_post_fold_ = 0;                  // CudaBackendOptions::hc_post_fold (resolved: 0 off, 1 …)
  int cc_major_ = 0;                      // compute capability (read on first use: cc_major())
  bool gemm_pipelined_ = true;            // CudaBackendOptions::gemm_pipelined
  int gemm_q8_ = -1;                      // CudaBackendOptions::gemm_q8 (−1: shape by grid size)
  bool gemm_q8_parts_ = false;            // CudaBackendOptions::gemm_q8_parts
  bool norm_rope_loads_first_ = false;    // CudaBackendOptions::norm_rope_loads_first
  bool prefill_glue_ = true;              // CudaBackendOptions::prefill_glue
  int gemm_experts_ = -1;                 // CudaBackendOptions::gemm_experts (resolved: experts_variant)
  int gemm_smem_optin_ = -1;              // the device's shared memory per block (opt-in), read once by gemm()
  GemvMma gemv_mma_ = GemvMma::wins;      // CudaBackendOptions::gemv_mma
  int sm_count_ = 0;                      // multiprocessors (read on first use)
  int mma_per_sm_[4] = {};                // gemv_mma.cu: resident blocks per SM of each instantiation
  bool attention_mma_ = true;             // CudaBackendOptions::attention_mma
  uint32_t attn_mma_smem_ = 0;            // attention_mma.cu: bit per head_dim whose shared-memory limits are set
  GemvMma gemv_dense_ = GemvMma::wins;    // CudaBackendOptions::gemv_dense
  int dense_smem_optin_ = -1;             // gemv_dense.cu: the device's opt-in shared memory per block
  bool dense_smem_set_[5] = {};           // gemv_dense.cu: each instantiation's shared-memory limit is set
  struct DenseOccupancy {                 // gemv_dense.cu: resident blocks per SM by (instantiation, smem)
    uint64_t smem = 0;
    int index = 0, per_sm = 0;
  };
  std::array<DenseOccupancy, 16> dense_occ_{};
  uint32_t dense_occ_next_ = 0;
  GemvMma gemv_stream_ = GemvMma::wins;  // CudaBackendOptions::gemv_stream
  bool gemv_stream_pdl_ = true;           // CudaBackendOptions::gemv_stream_pdl
  bool gemv_stream_chunks_ = true;        // CudaBackendOptions::gemv_stream_chunks
  int l2_prefetch_mode_ = 0;              // CudaBackendOptions::l2_prefetch_mode
  bool stream_smem_set_[10] = {};         // gemv_stream.cu: each instantiation's shared-memory limit is set (5.. bulk)
  GemvMma gemv_bulk_ = GemvMma::wins;     // CudaBackendOptions::gemv_bulk
  GemvMma gemv_rows_ = GemvMma::wins;     // CudaBackendOptions::gemv_rows
  bool gemv_rows_no_l1_ = false;          // CudaBackendOptions::gemv_rows_no_l1
  bool rows_smem_set_[8] = {};            // gemv_rows.cu: each instantiation's shared-memory limit is set
  GemvMma gemv_warp_ = GemvMma::wins;     // CudaBackendOptions::gemv_warp
  int gemv_warp_tile_bytes_ = 0;          // CudaBackendOptions::gemv_warp_tile_bytes
  bool warp_smem_set_[3] = {};            // gemv_warp.cu: each instantiation's shared-memory limit is set
  bool attention_segments_ = true;        // CudaBackendOptions::attention_segments
  int64_t attn_split_max_blocks_ = 128;   // CudaBackendOptions::attention_split_max_blocks
  bool attn_seg_smem_ = false;            // the segment kernels' 64 KiB shared-memory limit is set
  int attn_heads_per_warp_ = 2;           // CudaBackendOptions::attention_heads_per_warp
  bool attn_mqa_smem_ = false;            // the MQA chunk kernel's 96 KiB shared-memory limit is set
  bool attn_merge_sliced_ = true;         // CudaBackendOptions::attention_merge_sliced
  int attn_mma_kernels_ = 3;              // CudaBackendOptions::attention_mma_kernels
  int idx_select_ = 2;                    // CudaBackendOptions::indexer_select
  bool indexer_v2_ = true;                // CudaBackendOptions::indexer_v2
  bool indexer_decode_ = true;            // CudaBackendOptions::indexer_decode
  bool indexer_mma_ = true;               // CudaBackendOptions::indexer_mma
  bool f16_many_ = true;                  // CudaBackendOptions::f16_many
  bool compressor_parallel_ = true;       // CudaBackendOptions::compressor_parallel
  bool f16_tiles_ = true;                 // CudaBackendOptions::f16_tiles
  bool f16_mma_ = false;                  // CudaBackendOptions::f16_mma
  bool f16_mma_decode_ = true;            // CudaBackendOptions::f16_mma_decode
  bool f16_mma_pdl_ = false;              // CudaBackendOptions::f16_mma_pdl
  bool f16_mma_cluster_ = true;           // CudaBackendOptions::f16_mma_cluster
  int f16_dec_rows_ = 0, f16_dec_segs_ = 0;  // CudaBackendOptions::f16_mma_decode_rows / _segs (0: by shape)
  int f16_dec_kernel_ = 0;                   // CudaBackendOptions::f16_mma_decode_kernel
  MemBytes counted_;                      // live alloc() bytes by category
  uint64_t scratch_bytes_ = 0;            // capacity of the scratch areas below
  std::vector<void*> weights_;            // map_weight copies, freed with the backend
  WeightUploadStats upload_stats_;
  WeightUploader uploader_;               // pinned ring + copy stream while weights are being bound
  bool uploading_ = false;                // copies queued since the last sync()
  // Small transfers go through page-locked host memory (cuda_backend.cpp), so a step's input upload is
  // one DMA that returns at once and its result download one DMA with no driver staging:
  // stage_ is a ring of kStageBytes for uploads (stage_done_ is recorded after each copy out of it; a
  // wrap waits for it, so a slot is reused only after its copy ran), bounce_ receives downloads of up to
  // kStageBytes before they are copied to the caller's memory. Both made on first use.
  static constexpr uint64_t kStageBytes = uint64_t{1} << 20;
  uint8_t* stage_ = nullptr;
  uint64_t stage_head_ = 0;
  cudaEvent_t stage_done_ = nullptr;
  uint8_t* bounce_ = nullptr;
  std::array<cudaEvent_t, 4> marks_{};    // time_mark's events (timing enabled; made on first use)
  uint8_t* read_back_host_ = nullptr;     // [kReadBackSlots][kReadBackBytes] page-locked (first use)
  std::array<cudaEvent_t, kReadBackSlots> read_back_done_{};  // recorded after each slot's copy
  bool tensor_cores_ = true;              // CudaBackendOptions::tensor_cores
  DeviceScratch act_;                     // [n][act row] quantized activations (matmul)
  DeviceScratch moe_act_, moe_g_, moe_u_, moe_h_act_, moe_y_;  // routed-expert batches [n·k][*]
  DeviceScratch idx_scores_;              // 256 B of per-query counters, then [n][max rows] indexer scores
  DeviceScratch moe_groups_;              // routed-expert pairs grouped by expert (ExpertGroups)
  DeviceScratch attn_part_;               // [n·heads·splits][head_dim + 2] decode attention partials
  DeviceScratch idx_codes_;               // indexer_mma.cu: int8 codes and scales of a call's q heads and rows
  DeviceScratch attn_seg_;                // [n·heads·segments][head_dim + 2] attention segment states
  DeviceScratch f16_part_;                // matmul_f16_mma_decode.cu: row-tile counters, then split rows' segment sums
  DeviceScratch hc_done_;                 // ops_hc.cu: hc_seg_fused_kernel's per-slice counters (zero between calls)

  // Step graphs (step_graphs.cpp). While recording, errors go to capture_error_ (the recording is then
  // discarded and the caller runs the ops eagerly, which reports them for real) and scratch may not grow
  // (a graph must not point at memory freed later; growth bumps scratch_gen_, retiring older graphs).
  void drop_graph(StepGraph& g);
  void evict_graph_lru(bool recorded, const StepGraph* keep);
  int max_graphs_ = 0;                    // CudaBackendOptions::max_graphs
  std::list<StepGraph> graphs_;           // recorded graphs and keys seen once (a list: stable references)
  uint64_t graph_bytes_ = 0;              // Σ StepGraph::device_bytes of the recorded graphs
  StepGraph* recording_ = nullptr;        // the entry being recorded, between graph_begin and graph_end
  Status capture_error_;
  uint64_t scratch_gen_ = 0;              // bumped whenever ensure() reallocates a scratch area
  uint64_t graph_clock_ = 0;
  uint64_t graphs_recorded_ = 0, graphs_replayed_ = 0;

  // Growable regions (cuda_region.cpp): driver VMM entry points, loaded on first use.
  void init_vmm();
  bool vmm_checked_ = false;
  std::unique_ptr<VmmApi> vmm_;
  uint64_t block_bytes_ = uint64_t{2} << 20;  // modelspec::kCudaKvBlockBytes unless the device needs more

  // Concurrent branches (branches.cpp). While the side lane runs, stream_ and the per-op scratch areas
  // hold the side lane's (swapped in by fork, out by resume_main / join), so every op enqueues on and
  // grows the lane it runs on without knowing about lanes; the lanes never share a scratch area.
  static constexpr int kScratchAreas = 12;
  std::array<DeviceScratch*, kScratchAreas> scratch_areas();  // the areas of the lane ops run on now
  void swap_lanes();
  void release_branches();                // ~CudaBackend: the side lane's stream, events and scratch
  bool branches_ = false;                 // CudaBackendOptions::branches
  cudaStream_t side_stream_ = nullptr;
  cudaEvent_t fork_event_ = nullptr, join_event_ = nullptr;
  std::array<DeviceScratch, kScratchAreas> side_scratch_{};
  bool on_side_ = false;                  // ops go to the side lane now
  bool side_pending_ = false;             // the side lane has work the main lane has not waited for

  friend struct ScratchAccess;
};

// Upload of the IQ2_XXS lookup tables to the __constant__ copies of ops_matmul.cu (once per backend).
cudaError_t upload_iq2xxs_tables();
// The same tables for the GEMM's translation unit (ops_gemm.cu).
cudaError_t upload_gemm_tables();
// The same tables for gemv_decode.cu's own __constant__ copies (a symbol belongs to one translation unit).
cudaError_t upload_decode_tables();
// And for gemv_skinny.cu's.
cudaError_t upload_skinny_tables();
// And for moe_tiles.cu's, with its tile kernels' shared-memory limit (set once: not during a capture).
cudaError_t init_tile_kernels();

}  // namespace ds4::backend::cuda
