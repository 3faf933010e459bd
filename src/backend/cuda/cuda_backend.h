// cuda_backend.h — the CUDA backend: every op of backend.h as CUDA kernels on one device.
//
// The backend object owns its stream, its device allocations (weights, buffers, scratch) and the
// first error any op hit (ops are void in the interface; sync() reports it). Weights are copied to
// device memory when bound (map_weight), so decode never reads over the bus.
// Plain C++ header (no CUDA types): the runtime includes it when DS4_HAVE_CUDA is defined.
// Deliberately not here: kernels (ops_*.cu), model structure (src/model).
#pragma once

#include <cstdint>
#include <memory>

#include "backend/backend.h"

namespace ds4::backend::cuda {

// Where CudaBackendOptions::gemv_mma / gemv_dense send dense Q8_0 matmuls: off (never), wins (where the
// H200 measured that kernel faster), always (every shape it supports: tests, benchmarks).
enum class GemvMma { off, wins, always };

struct CudaBackendOptions {
  int device = 0;            // CUDA device ordinal
  // Prefill kernels: int8 tensor-core GEMM for batches and grouped experts (ops_gemm.cu) and chunk
  // attention (8 heads per block); off: the matvec and one-query attention for every batch size.
  bool tensor_cores = true;
  // The tensor-core GEMM's pipelined kernel (ops_gemm.cu gemm2_kernel: cp.async double buffer, 128-vector
  // tiles, ldmatrix). false: the previous gemm_kernel — for before/after benchmarks. Same bits either way.
  bool gemm_pipelined = true;
  // Dense Q8_0 GEMMs (with gemm_pipelined) on gemm_q8.cu: weight fragments read straight from the copied
  // blocks (no decode pass), a ring of stages, one barrier per stage. −1: the launch shape by grid size
  // (gemm_q8.cu default_shape, as the H200 measured), its stages by 2-D tensor copies on sm_90 (session 10:
  // −17 ms per 2,048-token chunk), by cp.async below; 1, 3 … 8: one shape (Cfg1, Cfg3 … Cfg8) with cp.async;
  // 9 … 12: per-row bulk copies, 13 … 15: tensor copies (one shape each, the last by grid); 16: cp.async by
  // grid (the default before); 0: ops_gemm.cu's gemm2_kernel (before/after runs). Same bits either way.
  int gemm_q8 = -1;
  // Prefill Q8_0 matmuls of several matrices on one activation quantization and one gemm_q8.cu launch (up
  // to 8 parts): out_a's row groups (a grouped matmul) and matmul_many's jobs on one input (the shared
  // expert's gate + up). 0: one quantization and one launch per group / job; −1: cuda_backend.cpp's
  // choice from the H200 runs (kGemmQ8PartsAuto). Same bits either way.
  int gemm_q8_parts = -1;
  // Prefill norm + RoPE (ops_norm_rope.cu norm_rope_warp_kernel): 1: each warp's row loads issued before the
  // block's RoPE angles (double-precision fmod / cos / sin) instead of after them; −1: cuda_backend.cpp's
  // choice (kNormRopeLoadsFirstAuto). Same bits either way.
  int norm_rope_loads_first = -1;
  // Prefill glue around the int8 GEMMs: the Q8_0 activation quantizer 16 blocks per warp with 16-byte
  // loads (ops_matmul.cu quantize_q8_0_rows_kernel), the routed experts' plan of tiles by one block
  // instead of one thread (ops_gemm.cu), moe_swiglu / moe_sum with 32-bit index math. false: the previous
  // kernels (before/after runs). Same values.
  bool prefill_glue = true;
  // Routed experts' grouped GEMM (IQ2_XXS gate/up, Q2_K down; with gemm_pipelined) on gemm_experts.cu,
  // weights decoded into MMA fragments by the warps that multiply them, two resident blocks per SM walking
  // the (128 rows, tile) items through one continuous ring: 20: experts_fast_kernel (counted copies, the
  // IQ2_XXS grid in 16 copies) with the SwiGLU folded into the down input's quantizer (with prefill_glue);
  // 13: the previous kernel and a separate SwiGLU pass; 0: ops_gemm.cu's gemm2_kernel; −1: the one the H200
  // measured fastest (gemm_experts.cu kExpertsAuto); make_cuda_backend rejects a value it does not know. Same bits.
  int gemm_experts = -1;
  // Few-token batches take the decode kernels (gemv_decode.cu, attention_decode.cu). false: the general
  // kernels only — for before/after benchmarks and for cross-checking the two paths.
  bool decode_kernels = true;
  // Routed experts of 1..64 tokens (with decode_kernels) as expert tiles (moe_tiles.cu: pairs grouped
  // by expert on the device, each expert's rows read once for all its pairs). false: the previous
  // kernels (gemv_decode.cu up to 4 tokens, gemv_skinny.cu below 64 pairs, the grouped tensor-core GEMM
  // above) — for before/after benchmarks. Same bits either way.
  bool expert_tiles = true;
  // The expert tiles' lean kernels (moe_tiles.cu: the pair loop specialised on each chunk's pair count
  // 1/2/4/8/16, the IQ2_XXS grid replicated against bank conflicts, Q2_K quants read once per block).
  // false: the first tile kernels (one pair loop of the largest chunk, absent pairs guarded) — to switch
  // back if a GPU run finds a problem, and for before/after benchmarks. Same bits either way.
  bool expert_tiles_lean = true;
  // The expert tiles' fast kernels (with expert_tiles_lean; moe_tiles.cu): IQ2_XXS chunks decoded from
  // conflict-free shared-memory grid and sign-mask tables, 4 weights per 3 integer operations, a warp per
  // block; Q2_K quants masked in place (dp4a on unsigned bytes) and min terms by dp2a. false: the lean
  // kernels — to switch back, and for before/after benchmarks. Same bits either way.
  bool expert_tiles_fast = true;
  // Routed experts of up to this many tokens as warp tiles (with expert_tiles_fast; moe_warp_tiles.cu):
  // every warp streams its own (expert, 1 gate/up row or 4 down rows) items through a 4-deep cp.async
  // ring, no block-wide barriers, the fast kernels' block terms and chains; more tokens: the fast block
  // tiles. -1: the batch sizes where the H200 measured them faster (moe_tiles.cu kWarpTilesAutoMax);
  // 0: never; 64: always (tests, benchmarks). Same bits either way.
  int expert_tiles_warp_max = -1;
  // With the warp tiles on sm_90: the hidden rows' quantization and the down warp tiles as
  // programmatic dependent launches, so the down tiles copy their first weights while the gate/up tiles
  // finish (with expert_one_token: its down kernel likewise). 1: on, 0: off, -1: where the H200 measured
  // a gain (moe_tiles.cu kWarpTilesPdlAuto, kOneTokenPdlAuto; never for the row tiles). Same bits either way.
  int expert_tiles_pdl = -1;
  // Routed experts of a one-token step on moe_one_token.cu's kernels (with expert_tiles_fast; IQ2_XXS
  // gate/up and Q2_K down whose rows fit them, else the kernels above): every lane keeps its pieces of the
  // token's Q8_K values in registers for all its rows, 8 lanes split each weight block and sum its integers.
  // V + 10·F: gate/up variant V = 1..4, 6, 7 (moe_one_token.cu GuVariant; 4: two gate and two up rows per item;
  // 7: no prologue launch, only with F ≥ 1); F = 1..4: the down kernel adds the slots (moe_tiles.cu). 0: off
  // (the warp tiles), -1: what the H200 measured fastest (moe_tiles.cu kOneTokenAuto). Same bits either way.
  int expert_one_token = -1;
  // Routed experts of at least this many tokens as row tiles (with expert_tiles_fast; moe_row_tiles.cu,
  // IQ2_XXS and Q2_K; before the warp tiles where both would run): a lane per output row walks its row's
  // blocks in order, the block terms added in registers, every lane on the same activation block, each
  // warp streaming (expert, 16 gate+up or 32 down rows) items slab by slab through a private cp.async
  // ring. -1: from the batch size where the H200 measured them faster (moe_tiles.cu kRowTilesAutoMin);
  // 0: never; 1: always (tests, benchmarks). Same bits either way.
  int expert_row_tiles_min = -1;
  // The row tiles' IQ2_XXS blocks by byte permutes (moe_terms.cuh iq2_terms_perm: per 8 weights two 4-byte
  // selector lookups, an OR and two permutes, where the fast decode takes two 8-byte lookups and 6
  // operations), up to moe_tiles.cu kRowPermMax tokens, where the H200 measured it faster (its tables are
  // 16 KB larger, which costs L1 above). false: the fast decode at every n. Same bits either way.
  bool expert_row_tiles_perm = true;
  // The row tiles' second shapes (moe_row_tiles.cu RowTile): gate/up 16 warps a block with a 2-deep ring
  // (12 × 3 before), down with each pass's activation blocks copied into the ring next to the weights (16-byte
  // cp.async that bypasses L1) instead of read through L1 (the H200 measured them 17–20 % faster from 8
  // tokens). false: the first shapes, for before/after benchmarks. Same bits either way.
  bool expert_row_tiles_v2 = true;
  // The row tiles' balanced runs (moe_row_tiles.cu balanced_run): items numbered expert-major, so the warps
  // of a block share one or two experts' activation rows in L1, and each warp's run cut at an equal share of
  // the estimated work (passes × decode + pairs) instead of an equal count of tile-major items; with
  // expert_row_tiles_perm the byte-permute decode then runs at every n (its tables no longer crowd out
  // activation rows spread over many experts). -1: as moe_tiles.cu kRowTilesV3Auto (what the H200 measured
  // faster); 0: the runs before; 1: the balanced runs. Same bits either way.
  int expert_row_tiles_v3 = -1;
  // F16 matmuls (ds4 numerics) in the segment order of src/backend/cuda/README.md, one kernel for every
  // batch size (matmul_f16.cu). false: the previous lane order (one warp walks a whole row; matvec below
  // kGemmMinVectors, 16-vector kernel above) — for before/after benchmarks. Either way a token's bits
  // do not depend on its batch; the two orders differ from each other in the last bits.
  bool f16_segments = true;
  // Dense Q8_0 matmuls of 1..64 vectors (ds4 numerics) on gemv_mma.cu: 8-row warp tiles streamed through
  // a cp.async ring, block sums on int8 tensor cores, block terms added in the CPU's order (same bits as
  // every other path). wins: only where the H200 measured it faster than the previous kernels
  // (gemv_mma_wins in gemv_mma.cu); always: every shape it supports (tests, benchmarks); off: the
  // previous decode / skinny / GEMM kernels (before/after runs). Only with decode_kernels.
  GemvMma gemv_mma = GemvMma::wins;
  // Dense Q8_0 matmuls of 1..16 vectors (ds4 numerics, grouped ones too) on gemv_dense.cu: whole-row
  // tiles copied with 16-byte cp.async through a 3-stage ring, block terms to shared memory, one FADD
  // chain per (row, vector) in the CPU's block order (same bits as every other path). wins: where it
  // measured faster (gemv_dense_wins); always: every shape it supports; off: the previous decode / mma /
  // skinny kernels (before/after runs, fallback). Only with decode_kernels; ahead of gemv_mma.
  GemvMma gemv_dense = GemvMma::wins;
  // Dense Q8_0 matmuls of 1..16 vectors (ds4 numerics) on gemv_stream.cu, ahead of gemv_dense: every
  // resident block streams a contiguous range of whole rows (no tail wave), the weight copies issued
  // first; a grouped matmul, and Backend::matmul_many's Q8_0 matrices that share an input (q_a + kv,
  // shared gate + up), as one launch. Same bits as every other path. wins: where it measured faster
  // (gemv_stream_wins); always: every shape it takes; off: gemv_dense and the kernels after it.
  GemvMma gemv_stream = GemvMma::wins;
  // With gemv_stream on sm_90: its kernels launched as programmatic dependents (common.cuh): the weight
  // copies start while the kernel before still runs, the activations are read after griddepcontrol.wait.
  // false: plain stream order. Same bits.
  bool gemv_stream_pdl = true;
  // With gemv_stream: rows too wide for 8 whole ones in an 18 KB ring stage (4096 and 8192 columns) are
  // staged as tiles of up to 16 rows × 32 blocks, each row's sum carried across its chunks in a register
  // (the same additions in the same order: same bits), and out_b (8192 columns) at 1–2 vectors comes here
  // under wins (H200: 17.2 vs 21.3 µs at 1); false: tiles of whole rows (1–4 rows at 8192 columns, each
  // tile one nb-long FADD chain per row) and out_b on the kernels before.
  bool gemv_stream_chunks = true;
  // Dense Q8_0 matmuls of 1..8 vectors (ds4 numerics; one matrix, out_a's groups, matmul_many's Q8_0
  // matrices sharing an input) on gemv_rows.cu, ahead of gemv_stream: each thread holds a 272-byte piece
  // of a row in registers (read coalesced through a small per-warp staging area, no shared-memory ring),
  // the next tile's loads in flight while one is computed; block terms and per-row chains in the CPU's
  // block order (same bits). wins: where the H200 measured it faster (gemv_rows_wins, gemv_rows.cu: the
  // device runs' verdict lives there); always: every shape it takes; off: gemv_stream and the rest.
  GemvMma gemv_rows = GemvMma::wins;
  // Dense Q8_0 matmuls of 1..16 vectors (one matrix, out_a's groups, matmul_many's Q8_0 matrices sharing
  // an input) on gemv_stream.cu's bulk rings, ahead of gemv_rows, sm_90 only: the same tiles and per-tile
  // steps as gemv_stream, the weights as cp.async.bulk copies completing on mbarriers (bulk_copy.cuh), every
  // slot requested before griddepcontrol.wait. Same bits. wins (default): the ring and launches where the
  // H200 measured it faster (gemv_bulk_wins / bulk_ring_wins in gemv_stream.cu: q_b at 1–4 vectors, shared
  // down at 1–2, kv / q_a alone at 1–2); always: ring 2 on every shape it takes; off: gemv_rows and the rest.
  GemvMma gemv_bulk = GemvMma::wins;
  // Dense Q8_0 matmuls of 1..4 vectors (one matrix, out_a's groups, matmul_many's Q8_0 matrices sharing an
  // input) on gemv_warp.cu's per-warp bulk rings, ahead of gemv_bulk and gemv_rows, sm_90 only: each warp of a
  // block streams its own tiles of whole rows (one cp.async.bulk copy and one mbarrier per ring slot), no
  // block-wide barrier between tiles; block terms and per-row chains in the CPU's block order (same bits).
  // wins: where the H200 measured it faster (gemv_warp_wins, gemv_warp.cu: the device runs' verdict lives
  // there); always: every shape it takes; off: gemv_bulk, gemv_rows and the rest.
  GemvMma gemv_warp = GemvMma::wins;
  // With gemv_warp: the weight bytes of one warp tile (whole rows, at least one; the ring gets as many slots,
  // up to 4 a warp, as fit in shared memory); 0: the kernel's default (8,704 bytes: 8 rows of 1024 columns,
  // 2 of 4096). For before/after runs; same bits.
  int gemv_warp_tile_bytes = 0;
  // With gemv_rows: the weight loads as ld.global.nc.L1::no_allocate (each 16-byte load its own L2
  // request) instead of through L1. Same bits.
  bool gemv_rows_no_l1 = false;
  // Backend::prefetch (l2_prefetch.cu): 0 = cp.async.bulk.prefetch.L2 pieces (sm_90; below, 2); 1 = the same with
  // an evict_last L2 policy (the prefetched lines outlast streaming traffic beside them); 2 =
  // prefetch.global.L2::evict_last per 128-byte line (no TMA); bits above the low nibble: dense_ramp.h. Same bits.
  int l2_prefetch_mode = 0;
  // Attention (with tensor_cores) on TF32 tensor cores in the MMA order of src/backend/cuda/README.md,
  // for every batch size and launch shape (attention_mma.cu; head_dim 64, 128, 256 or 512). false: the
  // scalar orders below (attention_segments) — for before/after benchmarks, or to switch back. The
  // orders differ from each other in the last bits; each alone is batch-invariant.
  bool attention_mma = true;
  // Without attention_mma: attention in the scalar segment order of src/backend/cuda/README.md, for
  // every batch size (attention_segments.cu). false: the previous kernel (one online softmax over all rows per
  // head, 8 heads per block; heads not a multiple of 8 take attention_decode.cu) — for before/after
  // benchmarks, or to switch back. The two orders differ from each other in the last bits.
  bool attention_segments = true;
  // Both orders (MMA and scalar segments): calls of n queries with n·(heads / heads per block ≤ 8) ≤ this
  // run the split shape (one block per segment, then a merge), larger ones the chunk shape. Same bits
  // either way; 0 = chunk only.
  int attention_split_max_blocks = 128;
  // Segment order, chunk shape, head_dim 512: heads per warp (2: attention_mqa_kernel, each staged row
  // read once per warp for two heads, 16 heads per block; 1: the chunk kernel, one head per warp, 8 per
  // block). Same bits either way — for before/after benchmarks.
  int attention_heads_per_warp = 2;
  // MMA order, split shape (decode, small batches): the merge of the stored segment states spread over
  // dim slices (attention_mma.cu attention_mma_merge_kernel, up to 8 blocks per (query, 16 heads)).
  // false: the chunk kernel merges them, one block per (query, 16 heads). Same bits.
  bool attention_merge_sliced = true;
  // MMA order kernels (attention_mma.cu). 0: the previous ones (every warp adding all 8 slices' partial
  // scores itself, a row's comp_idx entry loaded right before its copy). 1: the partial scores added once
  // per block, comp_idx a segment ahead, and segments whose staged values are all exact in TF32 (the KV
  // cache's f16-rounded rows) multiplied without the TF32 split of the rows. 3: the chunk shape (prefill,
  // batches past the split shape) with each segment's softmax once per block instead of once per warp, the
  // exact-in-TF32 decision taken from the values the score MMAs read, three staged segments
  // (attention_mma_chunk.cu); one query's split shape the same steps per segment (larger split calls and
  // the merges as 1). Same bits. 2 and 4 (16 warps) were removed in session 9 (slower on the H200);
  // make_cuda_backend rejects any other value. Default 3 after the H200 run (PERF.md: CSA / HCA prefill
  // chunk 5.76 / 1.62 → 3.84 / 1.15 ms, one decode query 15.1 → 14.0 µs, 32 queries 98 → 65 µs).
  int attention_mma_kernels = 3;
  // Indexer selection (radix select, indexer_v2): 2 = in decode steps of ≤ 2,048 rows scored by
  // indexer_score_decode (indexer_decode), the last block of each query selects in the scoring launch,
  // elsewhere as 1; 1 = its own launch, the digit holding the k-th key found by a warp scan (5 shuffles)
  // instead of a 32-step shuffle loop per pass; 0 = the previous select. Same selection. Default 2 after
  // the H200 run (CSA decode indexer at 2K: 9.5 + 7.5 → 12.9 µs of device time). 3 = 2 with q and the head
  // weights loaded before the query's row count; 4 = 3 with a lean radix end; 5 … 18 later forms (ops_indexer.cu).
  // The engine sets 18 (runtime::engine_cuda_options, PERF.md session 12); a bare CudaBackendOptions keeps 2.
  int indexer_select = 2;
  // Indexer: scores of 4 heads interleaved per row and the top-k by a radix select over keys held in
  // shared memory (ops_indexer.cu). false: the previous score loop and bitwise select. Same selection
  // either way (the CPU's float order per score; the top-k is a function of the scores).
  bool indexer_v2 = true;
  // Indexer scores of decode and batched decode steps (≤ 32 queries, 16/32/64 heads of 64 or 128): one
  // launch over rows × heads sized to fill the device, q held in registers, four rows' chains in flight
  // (ops_indexer.cu indexer_score_decode_kernel). false: the kernels above (indexer_v2 picks among them).
  // Same scores (the CPU's float order), so the same selection.
  bool indexer_decode = true;
  // Indexer scores of prefill chunks (> 32 queries, 128-dim heads, a multiple of 16 heads) on int8 tensor
  // cores (indexer_mma.cu): each q head and row is written as int8 codes times one power of two where its
  // values allow (the FP4-simulated operands do); then every partial sum of the CPU's sequential dot is
  // exact, so the integer dot times the two scales is the CPU's float dot bit for bit. Vectors that do not
  // decompose take the sequential dot. Same scores, so the same selection. false: the CUDA-core tiles.
  // Default on after the H200 run (PERF.md: a 2,048-query chunk at 2K, 2,055 → 480 µs).
  bool indexer_mma = true;
  // Backend::matmul_many of F16 jobs (ds4 numerics, ≤ 32 vectors, rows ≤ 4,096 values): every job in one
  // launch (matmul_f16_many.cu; a CSA layer's six decode projections). false: one matmul() per job. Same bits.
  bool f16_many = true;
  // Compressor of a prefill chunk (one session, ≥ 64 tokens): the blocks pooled in parallel
  // (ops_compressor.cu). false: one thread block walks the tokens, as decode does. Same values.
  bool compressor_parallel = true;
  // F16 matmuls of ≥ 64 vectors (prefill: HC controls, router, compressor and indexer projections) in
  // the segment order with weights converted once per segment and 16 segment sums reduced together
  // (matmul_f16.cu f16_tile_kernel). false: f16_segment_kernel for every batch size. Same bits.
  bool f16_tiles = true;
  // Every F16 matmul under ds4 numerics (matmul, matmul_many, the HC controls of hc_pre) on TF32 tensor
  // cores in README.md's F16 MMA order (matmul_f16_mma.cu, matmul_f16_mma_tiles.cu, f16_mma.cuh): 512-value
  // segments of four 128-value MMA chains (F16 weights exact in TF32, activations split hi + lo), added in
  // segment order; every kernel and batch size gives a token the same bits. Another order than the segment
  // order above (the CPU within 2e-5·max|y| either way). Requires f16_segments. Off in a bare
  // CudaBackendOptions (op tests and benches name it); the engine turns it on (EngineOptions::cuda_f16_mma):
  // on the H200, 43 layers, prefill at 4K +30 %, decode −1.5 % (docs/PERF.md, session 9 final run).
  bool f16_mma = false;
  // With f16_mma: matmuls and matmul_many of 1 … 8 vectors (decode) on matmul_f16_mma_decode.cu — a warp per
  // 128-value quarter of a 4/8/16-row tile with all its loads issued before its MMA chain, rows of many
  // segments split over blocks (the last block adds the segment sums in order). false: matmul_f16_mma.cu's
  // decode tiles. Same bits. _rows (4, 8, 16) and _segs (segments per block: 1, 2, 4) pick the launch
  // shape for benchmarks and tests (0: by shape).
  bool f16_mma_decode = true;
  int f16_mma_decode_rows = 0;
  int f16_mma_decode_segs = 0;
  // With f16_mma_decode: which decode kernel form runs the tiles (0: the register-direct kernel above;
  // 1 and up: other forms, e.g. weights staged through shared memory, each where it takes the shape;
  // -1: cuda_backend.cpp's kF16DecKernelAuto, the device runs' verdict). Same bits.
  int f16_mma_decode_kernel = -1;
  // With f16_mma_decode on sm_90, on the main lane: the decode kernel as a programmatic dependent of the
  // kernel before it (common.cuh launch_dependent) — its blocks start while that one finishes and issue
  // their weight loads (which nothing writes) before griddepcontrol.wait, then let the next kernel start.
  // Off by default: faster per call (router 3.7 µs in a graph of its own calls) but whole decode steps
  // slower (H200 W2, 4 layers: 0.917 against 0.886 ms plain — the early blocks hold the multiprocessors
  // the side lane's kernels need). Same bits either way.
  bool f16_mma_pdl = false;
  // With f16_mma_decode on sm_90: rows split over blocks (one segment per block, 2, 4 or 8 blocks a row
  // tile) launched as thread-block clusters of 8 — the tile's first block adds the others' segment sums
  // from their shared memory (distributed shared memory, two cluster barriers) instead of global scratch,
  // a fence and a counter. Same order, same bits (H200 W2: every launch shape). Decode steps 0.893 against
  // 0.917 ms with the counter (4 layers, pdl on). false: the counter (which the shapes clusters do not fit —
  // rows of 16,384 values, segment counts not dividing 8 — always take).
  bool f16_mma_cluster = true;
  // Latency-bound per-token ops of decode batches (n ≤ 32) spread over the device: HC pre (ops_hc.cu:
  // control segments in parallel blocks, then mix + Sinkhorn beside collapse + norm) and the router's
  // top-k (ops_moe.cu). false: the previous kernels — for before/after benchmarks. Same bits.
  bool hc_router_v2 = true;
  // With hc_router_v2 on sm_90: the spread HC pre's kernels launched as programmatic dependents (common.cuh
  // griddepcontrol) — each starts while the kernel before it finishes, loads what does not depend on it
  // (control weights; X, norm and split weights), then waits; HC post lets the next kernel start early.
  // false: plain stream order. Same bits.
  bool hc_pdl = true;
  // The latency-bound decode kernels of session 6 (issue 5): the router's top-k by ranks (one expert per
  // thread, no dependent rounds; ops_moe.cu), HC pre's finish kernel with the segment sums read into
  // registers (ops_hc.cu), the row norms with every load in flight and norm + RoPE + FP8 rows held on chip
  // (ops_norm_rope.cu); with hc_pdl on sm_90 these and rope, swiglu and the routed experts' slot sum are
  // programmatic dependents (each starts while the kernel before it finishes, loads its weights, then
  // waits). false: the previous kernels, plain launches — for before/after benchmarks. Same bits.
  bool small_v3 = true;
  // Session 7's shorter decode chain (issue 5): HC pre's finish without the split block where the caller
  // runs hc_split itself (HcPreArgs::split = false; ops_hc.cu), the indexer query's RoPE inside its QAT
  // kernel (IndexerQatArgs::n_rot; ops_qat.cu), a CSA layer's two compressors in one launch
  // (compressor_many; ops_compressor.cu). false: the previous kernels (split = false then runs the whole
  // finish, the fused ops run as their pieces). Same bits.
  bool small_v4 = true;
  // Session 8's small kernels (issue 5): a prefill chunk's indexer query RoPE + QAT a warp per row (ops_qat.cu:
  // values in registers, no barrier; 8 rows a warp sharing their RoPE angles), the RMSNorm of rows ≥ 8192 wide
  // read once into registers (ops_norm_rope.cu: the HC state's), the prefill HC pre's split + collapse + norm
  // with every load in flight and the decode HC finish's collapse + norm in registers (ops_hc.cu).
  // 0: the previous kernels; 1: these; -1: cuda_backend.cpp's kSmallV5Auto (the device run's verdict, one
  // constant in one .cpp). Same bits.
  int small_v5 = -1;
  // Session 9 (issue 5): a CSA layer's two compressors and the indexer query's RoPE + QAT with its head weights'
  // scale in one launch at decode (Backend::compressors_and_qat; compressors_qat.cu) — two dependent launches on
  // the layer's critical chain become one. 0: the two ops' launches; 1: the one launch; -1: cuda_backend.cpp's
  // kSmallV6Auto (the device run's verdict). Same bits (each block runs one of the two ops' device code).
  int small_v6 = -1;
  // Session 9 (issue 5): with hc_router_v2 and small_v5, the decode HC pre's segment sums and its finish
  // (mix, Sinkhorn, collapse, sublayer norm) in one launch — the last blocks to finish their segment sums
  // run the finish (ops_hc.cu hc_seg_fused_kernel). 0: two launches; 1: one at n = 1; 2: one at every
  // n ≤ 32; -1: cuda_backend.cpp's kHcFuseAuto (the device run's verdict). Same bits.
  int hc_fuse = -1;
  // Session 10 (issue 5): attention's output inverse RoPE (AttentionArgs::out_rot) inside the decode merge
  // kernel's stores (attention_mma.cu attention_mma_merge_kernel: each thread rotates its own dims' pairs),
  // one launch less on every layer's critical chain. 0: attention, then the rope launch; 1: folded where the
  // sliced merge runs (elsewhere the rope launch); -1: cuda_backend.cpp's kAttnOutRopeAuto. Same bits.
  int attn_out_rope = -1;
  // Session 10 (issue 5): the HC post folded into the next HC pre (HcPreArgs::prev_post) at decode — the pre's
  // kernels form the new state from the old one where they read it (ops_hc.cu). 0: the post's own launch,
  // then the pre; 1: folded where the pre's spread kernels take it (session 10: slower, 13.6 against 9.5 µs);
  // 2 and up: other forms of the sublayer boundary (post + pre), each where it takes the shape (else as 0);
  // -1: cuda_backend.cpp's kHcPostFoldAuto. Same bits.
  int hc_post_fold = -1;
  // Decode steps replayed as CUDA graphs (Backend::graph_begin/graph_end): at most this many recorded
  // steps are kept (least recently used evicted), and as many keys seen once; 0 = never record, every
  // step is host-launched. One session's decode uses up to 3 (no row emitted, ratio 4, ratios 4 and
  // 128), a batch of N sessions 2–4 per N and row bucket.
  int max_graphs = 16;
  // Independent parts of a decode step (and of any step) run concurrently on a second stream, recorded
  // into step graphs as parallel branches: the forward pass's Backend::fork / resume_main / join points
  // (the shared expert beside the routed experts; the kv path, then the compressors and indexer, beside
  // the query path). Each lane has its own scratch. false: the calls do nothing, one stream in order.
  // Same ops, so the same bits either way (test_cuda_branches on the H200: decode, chunked and batched
  // steps, graphs on and off); on by default since that run measured every case faster (docs/PERF.md).
  bool branches = true;
  // With branches: the main stream gets the device's highest stream priority and the side lane the lowest,
  // and step graphs keep each kernel's captured priority (cudaGraphInstantiateFlagUseNodePriority), so when
  // both lanes have blocks waiting for a multiprocessor the main lane's — the longer chain the forward pass
  // keeps there — go first. Scheduling only: the same bits either way.
  bool branch_priority = false;
};

// Fails (unavailable) when there is no usable device, so tests can skip and tools can report it.
Result<std::unique_ptr<Backend>> make_cuda_backend(const CudaBackendOptions& opts = {});

// Number of CUDA devices the runtime sees (0 without a driver or GPU).
int cuda_device_count();

// What map_weight has uploaded so far, for load logs and benchmarks.
struct WeightUploadStats {
  uint64_t bytes = 0;     // weight bytes now resident on the device
  uint64_t tensors = 0;
  double seconds = 0;     // wall time spent in map_weight (allocation + copy)
  double gb_per_s() const { return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0; }
};
// Stats of a backend made by make_cuda_backend (zeros for any other backend).
WeightUploadStats weight_upload_stats(const Backend& be);

// Device name and memory (total, free) for logs; empty name when unavailable.
struct DeviceInfo {
  char name[256] = {};
  uint64_t total = 0, free = 0;
  int cc_major = 0, cc_minor = 0;
};
DeviceInfo device_info(const Backend& be);

// Step graphs recorded and replayed by a backend made by make_cuda_backend (zeros for any other).
struct GraphStats {
  uint64_t recorded = 0, replayed = 0;
  uint64_t kept = 0;          // recorded graphs held now
  uint64_t device_bytes = 0;  // device memory their instantiations took (free memory before − after)
};
GraphStats graph_stats(const Backend& be);

// The backend's one CUDA stream (a cudaStream_t) as an opaque handle, so a benchmark can time or
// capture (CUDA graph) the work its ops enqueue; null for any other backend.
void* cuda_stream(const Backend& be);

}  // namespace ds4::backend::cuda
