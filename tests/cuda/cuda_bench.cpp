// cuda_bench.cpp — first speed numbers of the CUDA backend on the GPU machine (not a ctest):
// the card's copy bandwidth (ceiling), decode-shaped op timings against bytes moved, and, given model
// files, load (weight upload) time and greedy prefill/decode tok/s through the public Engine API.
// Method (METHOD.md): warm-up first, then the median of 5 repetitions of N back-to-back calls,
// timed from the host around a stream sync (so per-call times include launch overhead, as decode does).
// Usage: cuda_bench [model.gguf ...]   Prints "BENCH" lines that scripts/gpu_check.sh tabulates.
//        cuda_bench --experts             only the routed-expert op lines (n = 1, 8, 16, 32, 64), e.g. under ncu.
//        cuda_bench --experts tiles       the same, only the default, the warp, the row tiles (first and second
//                                         shapes, byte-permute decode, PDL) and the fast block tile kernels.
//        cuda_bench --experts once        one untimed call per n on the row tiles (each variant), then the
//                                         fast block tiles (for ncu).
//        cuda_bench --experts one [once]  the default (one-token kernels, gate/up variant 4, PDL) at n = 1, 2, 7 and at
//                                         n = 1 the session-10 sides (expert_one_token 17, 27, 37, 47, 14, 24, 44, 6:
//                                         gate/up variants 6, 7, the down kernel adding the slots), each also cold (16 expert sets
//                                         in turn); once: one untimed call at n = 1 of variant 4 and each of those (ncu).
//        cuda_bench --experts lean [once] the default (3559: moe_one_lean.cu's gate/up variant 9 with the L2 prefetch and
//                                         session 13's decode, fold 5) and 559 (the default before), 1559 at n = 1,
//                                         twice; once: one untimed call of each (ncu).
//        cuda_bench --moe-steps A B … M... decode steps (batch 1 at 2K) with expert_one_token A, B, …, interleaved.
//        cuda_bench --moe-swap A B … [--rounds R] [--alternate] M  the same on one backend and model copy (one Forward
//                                      a value), with per-round differences and the sides' logits compared bit for bit.
//        cuda_bench --experts v3[once]    the default and the row tiles' second shapes and balanced runs (each
//                                         decode) only, timed (or once each, balanced runs first: for ncu).
//        cuda_bench --hc                  HC pre, router, HC post and the small decode ops at n = 1, 2, 8, 32:
//                                         current vs previous kernels (and vs small_v3 = false).
//        cuda_bench --hc-once             the same ops once each at n = 1, 8, 32, untimed (run it under ncu).
//        cuda_bench --small4 [once]       HC pre without its split, the split, indexer RoPE + QAT, a CSA
//                                         layer's two compressors: small_v4 vs off at n = 1, 2, 8, 32.
//        cuda_bench --small5              session 8's kernels (small_v5) vs off: indexer RoPE + QAT, the HC
//                                         state's norm, the HC pre past 32 tokens; n = 1, 8, 32, 2048.
//        cuda_bench --hc-fuse             the decode HC pre in one launch (hc_fuse) vs two, both F16 orders, alone
//                                         and after the HC post (the sublayer boundary), n = 1, 2, 8, 32.
//        cuda_bench --hc-fuse-steps M...  decode steps of model files with the HC pre in two launches / one.
//        cuda_bench --hcpre-prefill [F…]  a prefill chunk's HC pre (n = 2,048) with the controls forms F (hc_fuse / 10).
//        cuda_bench --hcpre-steps A B M...  2,048-token prefill chunks with the controls forms A and B interleaved.
//        cuda_bench --small7-steps [rope|hcb|hcbN|both] M...   decode steps of model files with the folds off / on (f16_mma on).
//        cuda_bench --hcb-forms FOLD...        the boundary kernel's forms (hc_post_fold 4, 6, 7), graph µs + phases.
//        cuda_bench --hcb-steps A B M...       decode steps with hc_post_fold A vs B as the engine runs (3 rounds).
//        cuda_bench --hcb-swap A B … [--rounds R] [--alternate] M  --moe-swap's bench for hc_post_fold.
//        cuda_bench --crit [SIDE …] [--rounds R] [--steps S] M...  decode steps (batch 1 at 2K, engine options) with
//                                      stages removed (crit_backend.h) or option values set, one backend and model
//                                      copy: each stage's share of the critical path (cuda_bench_crit.cpp).
//        cuda_bench --opt-swap FIELD A B … [--rounds R] [--steps S] M...  --crit's sides FIELD=A, FIELD=B, …
//        cuda_bench --head-swap A B … [--rounds R] [--alternate] [--greedy] M  --moe-swap's bench for hc_fuse (its
//                                         hundreds digit: the output head's HC on the spread kernels, the cluster argmax).
//        cuda_bench --head [once] [V …]   the output head of a decode token (last HC post + head HC + matvec + argmax)
//                                         per hc_fuse value V on one backend, graph µs, outputs bit for bit.
//        cuda_bench --dattn [A B [chain]] one decode query's attention + output RoPE, attention_mma_kernels A / B (10 / 31);
//                                         chain: each call the q norm + RoPE, then attention.
//        cuda_bench --dattn-steps A B [C …] [--rounds N] M...  decode steps (batch 1 at 2K and 32K, engine options), attention_mma_kernels A / B / ….
//        cuda_bench --pexp-steps A B [C …] [--rounds N] M...  2,048-token prefill chunks (2K → 4K, engine options), gemm_experts A, B, …
//        cuda_bench --pattn-steps A B [--rounds N] M...  a 2,048-token prefill chunk at 2K → 4K (engine options), attention_mma_kernels A / B.
//        cuda_bench --hcsplit-steps M...   decode steps, each HC pre's split in the op / on the side lane (kBranchHcSplit).
//        cuda_bench --small7 [ops|stages [FOLD]]  the folds (attention's output RoPE in its merge; the sublayer
//                                         boundary as one cluster launch, hc_post_fold FOLD, default 2) on vs off,
//                                         f16_mma on: the ops at n = 1, 8, then the decode stage table off and on
//                                         (ops: without the tables).
//        cuda_bench --small5-steps M...   whole steps of model files: small_v5 off, on, on + the HC split on the
//                                         side lane (a 2,048-token chunk at 2K, decode batch 1 at 2K and 8 at 512).
//        cuda_bench --dense [NAME]        dense Q8_0 matmuls, cold weights: previous / default / gemv_stream (column
//                                         chunks, whole rows); NAME: only the shapes whose name holds it, no layer table.
//        cuda_bench --rows [NAME]         dense Q8_0 matmuls at n = 1..32, cold weights (and the head): gemv_rows off, default,
//                                         gemv_rows.cu (through L1 / no L1 allocation) at n ≤ 8, gemv_mma.cu at 8..32, then a layer's dense
//                                         matmuls at n = 1, 2, 4; NAME: only the shapes whose name holds it.
//        cuda_bench --bulk [NAME]         the same shapes and layer at n = 1..8: gemv_bulk off, wins (ring 1 where it
//                                         measured faster) and always (ring 2 on every shape) — gemv_stream.cu's bulk rings.
//        cuda_bench --stages              the decode stage table (n = 1, ctx 2K) with small_v3 off, then default
//                                         (the % of copy ceiling column against a nominal 4,800 GB/s).
//        cuda_bench --f16mma              the decode stage table with f16_mma the other way, then default (the
//                                         F16 MMA order's decode kernels against the segment order's, in stages).
//        cuda_bench --f16mma-steps M...   whole steps of model files: f16_mma off, on (plain + counter, pdl + clusters,
//                                         plain + clusters) — decode batch 1 at 2K, a 2,048-token chunk at 2K.
//        cuda_bench --f16dec [K,K…]       decode F16 MMA calls (CSA matmul_many n = 1, 8; router) per
//                                         f16_mma_decode_kernel 0 … 9, cold weights, graph µs per call.
//        cuda_bench --ctx-steps [S...] [CTX...] M...  decode steps (batch 1) at each CTX (≥ 1,024; default 32K, 2K,
//                                         16K) per indexer_select S (< 1,024; default 18).
//        cuda_bench --ctx-profile S M CTX...  one decode step at each CTX (indexer_select S) between cudaProfilerStart /
//                                         Stop (ncu).
//        cuda_bench --f16dec-steps M...   whole decode steps (batch 1, 2K) with f16_mma_decode_kernel 0, 7, 8, 9.
//        cuda_bench --models-only M...   only the whole-model lines (prefill, decode graphs off / on).
//        cuda_bench --csa [small4]        only the CSA layer's compressor + indexer lines (now vs previous;
//                                         small4: vs small_v4 = false).
//        cuda_bench --branches M...       decode steps (batch 1 and 8) with concurrent branches off / on.
//        cuda_bench --prefetch [--mode K] M...  decode steps (batch 1 and 8) with each set of weights prefetched
//                                         into L2 (K: CudaBackendOptions::l2_prefetch_mode).
//        cuda_bench --warp [NAME]         dense Q8_0 matmuls at n = 1..4 and one layer: gemv_warp off, default,
//                                         always (8.7 KB tiles; 4.4 KB tiles, two blocks an SM), gemv_rows on
//                                         every shape below gemv_warp's wins (bulk rings off), cold weights.
//        cuda_bench --dense-steps M...    decode steps (batch 1 and 2) with gemv_stream_chunks off / on.
//        cuda_bench --warp-steps M...     decode steps (batch 2, 3, 4 and 1) with gemv_warp off / on, as the engine.
//        cuda_bench --ramp-steps M...     decode steps (batch 1, 2, 4) with the dense ramp bits (dense_ramp.h) off / on.
//        cuda_bench --half [NAME]         dense Q8_0 matmuls at n = 1, 2 (cold; NAME "layer": the layer lines only): the
//                                         session-12 ramp bits, + gemv_rows' half kernel (dense_ramp.h), the default.
//        cuda_bench --l2 [K]              dense Q8_0 matmuls at n = 1..16: cold, after idle small ops, prefetched
//                                         into L2 beside those ops (mode K), and warm (the same copy again).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "bench_median.h"
#include "ds4/engine.h"
#include "quant/half.h"
#include "quant/types.h"
#include "moe_test_util.h"
#include "runtime/engine_cuda_options.h"

using namespace ds4;
using namespace ds4::backend;
using Clock = std::chrono::steady_clock;

using ds4::test::median_seconds;  // bench_median.h

namespace {

std::vector<uint8_t> random_blocks(GgmlType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  const uint64_t rb = *type_bytes(type, cols);
  std::vector<uint8_t> b(rb * rows);
  for (size_t i = 0; i + 4 <= b.size(); i += 4) {  // 4 bytes a draw: the output head and 256 experts are GBs
    const uint32_t r = rng();
    std::memcpy(&b[i], &r, 4);
  }
  const auto tr = *type_traits(static_cast<uint32_t>(type));
  const uint16_t h = f32_to_f16(0.001f);
  const int off = type == GgmlType::Q2_K ? 80 : 0;
  for (uint64_t k = 0; k < b.size() / tr.block_bytes; ++k) std::memcpy(&b[k * tr.block_bytes + off], &h, 2);
  return b;
}

}  // namespace

void bench_decode_stages(Backend& be, double ceiling_gbs);  // cuda_bench_stages.cpp
void bench_hc_router(Backend& be, Backend& prev, Backend* plain, Backend* v2, bool once);  // cuda_bench_stages.cpp
void bench_small_prefill(Backend& now, Backend& v2);  // cuda_bench_stages.cpp
void bench_small4(Backend& now, Backend& v3, bool once);  // cuda_bench_stages.cpp
void bench_small5(Backend& now, Backend& v4);             // cuda_bench_stages.cpp
void bench_hc_fuse(Backend& two, Backend& one, Backend& two_mma, Backend& one_mma);  // cuda_bench_stages.cpp
void bench_gemv_ops(Backend& dense, Backend* mma, Backend* prev, double ceiling_gbs);  // cuda_bench_stages.cpp
void bench_dense_cold(Backend& prev, Backend& def, Backend& stream, Backend& plain, const char* only);  // cuda_bench_dense.cpp
void bench_dense_rows(Backend* const* sides, const char* const* labels, const int64_t* n_lo, const int64_t* n_hi,
                      int n_sides, const char* only);  // cuda_bench_dense.cpp
void bench_csa_stages(Backend& now, Backend& prev);  // cuda_bench_stages.cpp
void bench_small6(Backend& now, Backend& prev, bool fused);  // cuda_bench_stages.cpp
void bench_small7(Backend& on, Backend& off);  // cuda_bench_small7.cpp
void bench_hcb_forms(const std::vector<int>& folds);  // cuda_bench_small7.cpp
void bench_branches(int argc, char** argv);  // cuda_bench_branches.cpp
void bench_prefetch_steps(int argc, char** argv);  // cuda_bench_branches.cpp
void bench_dense_steps(int argc, char** argv);     // cuda_bench_branches.cpp
void bench_warp_steps(int argc, char** argv);      // cuda_bench_branches.cpp
void bench_ramp_steps(int argc, char** argv);      // cuda_bench_branches.cpp
void bench_small5_steps(int argc, char** argv);    // cuda_bench_branches.cpp
void bench_hc_fuse_steps(int argc, char** argv);   // cuda_bench_branches.cpp
void bench_hcpre_steps(int argc, char** argv);     // cuda_bench_branches.cpp
void bench_hcpre_prefill(int argc, char** argv);   // cuda_bench_hcpre.cpp
void bench_moe_steps(int argc, char** argv);       // cuda_bench_branches.cpp
void bench_moe_swap(int argc, char** argv);        // cuda_bench_moe1.cpp
void bench_hcb_swap(int argc, char** argv);        // cuda_bench_moe1.cpp
void bench_crit(int argc, char** argv);            // cuda_bench_crit.cpp
void bench_opt_swap(int argc, char** argv);        // cuda_bench_crit.cpp
void bench_head_swap(int argc, char** argv);       // cuda_bench_moe1.cpp
void bench_head(int argc, char** argv);            // cuda_bench_head.cpp
void bench_engine_steps(int argc, char** argv);    // cuda_bench_branches.cpp
void bench_small7_steps(int argc, char** argv);    // cuda_bench_branches.cpp
void bench_hcb_steps(int argc, char** argv);       // cuda_bench_branches.cpp
void bench_hcsplit_steps(int argc, char** argv);   // cuda_bench_branches.cpp
void bench_f16mma_steps(int argc, char** argv);    // cuda_bench_branches.cpp
void bench_f16dec_steps(int argc, char** argv);    // cuda_bench_branches.cpp
void bench_ctx_steps(int argc, char** argv);       // cuda_bench_branches.cpp
void bench_ctx_profile(int argc, char** argv);     // cuda_bench_branches.cpp
void bench_dattn_steps(int argc, char** argv);     // cuda_bench_branches.cpp
void bench_pattn_steps(int argc, char** argv);     // cuda_bench_branches.cpp
void bench_dattn(int argc, char** argv);           // cuda_bench_dattn.cpp
void bench_pexp_steps(int argc, char** argv);      // cuda_bench_branches.cpp
void bench_f16dec_calls(const std::vector<int>& kernels);  // cuda_bench_f16dec.cpp
void bench_l2_prefetch(Backend& be);                // cuda_bench_dense.cpp

// Decode batches of several sessions (gemv_skinny.cu): q_a, the shared expert, the output head and the
// routed experts (256 Flash experts, 6 random distinct per token) at n = 8, 32, 64 (experts also at 1),
// on `be` ("default": the dispatch of CudaBackend::gemv / moe), for the experts on backends with
// expert_tiles_warp_max = 64 / 0 and expert_row_tiles_min = 0 ("warp": the warp tiles, "block": the fast
// block tiles), one with
// expert_tiles_pdl = false ("nopdl": the warp tiles launched plainly), two with expert_row_tiles_min = 1
// ("rows", "rowspdl": the row tiles, plain and as programmatic dependent launches; "rowsperm": with
// expert_row_tiles_perm, the byte-permute IQ2_XXS decode; "rowsv2", "v2perm": expert_row_tiles_v2, the second
// shapes, without and with it; "v3", "v3perm": expert_row_tiles_v3, the balanced expert-major runs, without and with
// it at every n), one with
// expert_tiles_fast = false ("lean": the lean tile kernels, before/after figures of the fast
// ones), one with expert_tiles_lean = false ("tiles1": the first tile kernels)
// and one with expert_tiles = false ("previous"), and on a backend with the decode/skinny kernels off
// ("general": the tensor-core GEMM / grouped GEMM / per-pair matvec) for comparison. Expert GB/s count the bytes of
// the distinct experts the batch reads (7.07 MB each).
void bench_skinny(Backend& be, std::mt19937& rng, bool experts_only, bool tiles_only = false, bool once = false,
                  bool one = false, bool v3_only = false, bool lean = false) {
  cuda::CudaBackendOptions go;
  go.decode_kernels = false;
  auto general = cuda::make_cuda_backend(go);
  struct Side {
    Backend* b;
    const char* tag;
  };
  std::vector<Side> sides = {{&be, "default"}};
  if (general.ok()) sides.push_back({general->get(), "general"});
  auto buf = [](Backend& b, uint64_t bytes) {
    auto r = b.alloc(bytes, MemCategory::scratch);
    if (!r.ok()) {
      std::printf("BENCH error: %s\n", r.status().to_string().c_str());
      std::exit(1);
    }
    return std::move(r).value();
  };
  auto bind = [](Backend& b, GgmlType t, const std::vector<uint8_t>& host, int64_t rows, int64_t cols) {
    Weight w{t, nullptr, rows, cols, *type_bytes(t, cols)};
    auto p = b.map_weight(host.data(), host.size());
    w.data = p.ok() ? *p : nullptr;
    return w;
  };
  struct Mm {
    const char* name;
    GgmlType t;
    int64_t rows, cols;
  };
  for (Mm m : {Mm{"q_a q8_0 1024x4096", GgmlType::Q8_0, 1024, 4096}, Mm{"shared q8_0 2048x4096", GgmlType::Q8_0, 2048, 4096},
               Mm{"shared_down q8_0 4096x2048", GgmlType::Q8_0, 4096, 2048},
               Mm{"head q8_0 129280x4096", GgmlType::Q8_0, 129280, 4096}}) {
    if (experts_only) break;
    const auto host = random_blocks(m.t, m.rows, m.cols, rng);
    for (const Side& sd : sides) {
      Weight w = bind(*sd.b, m.t, host, m.rows, m.cols);
      Buffer x = buf(*sd.b, 64ull * m.cols * 4), y = buf(*sd.b, 64ull * m.rows * 4);
      for (int n : {8, 32, 64}) {
        const double s = median_seconds([&] { sd.b->matmul({w, x.f32(), m.cols, y.f32(), m.rows, n}); },
                                        [&] { (void)sd.b->sync(); }, 10);
        const double bytes = static_cast<double>(w.row_bytes) * m.rows;
        std::printf("BENCH op %s matmul %-28s n=%-2d %8.2f us  %7.0f GB/s of weights\n", sd.tag, m.name, n, s * 1e6,
                    bytes / s / 1e9);
      }
    }
  }
  const int NE = 256, E = 4096, F = 2048, K = 6;
  const auto gh = random_blocks(GgmlType::IQ2_XXS, int64_t{NE} * F, E, rng);
  const auto uh = random_blocks(GgmlType::IQ2_XXS, int64_t{NE} * F, E, rng);
  const auto dh = random_blocks(GgmlType::Q2_K, int64_t{NE} * E, F, rng);
  std::vector<int32_t> ids(64 * K);
  for (int i = 0; i < 64; ++i)  // distinct experts per token, as the router gives
    for (int j = 0; j < K; ++j) {
      int32_t e;
      do e = static_cast<int32_t>(rng() % NE);
      while (std::find(ids.begin() + i * K, ids.begin() + i * K + j, e) != ids.begin() + i * K + j);
      ids[i * K + j] = e;
    }
  std::vector<float> wts(ids.size(), 0.2f);
  // Routed experts also on the previous kernels (expert_tiles = false: gemv_decode.cu up to 4 tokens,
  // gemv_skinny.cu below 64 pairs, the grouped GEMM above) for before/after figures.
  cuda::CudaBackendOptions po;
  po.expert_tiles = false;
  auto previous = cuda::make_cuda_backend(po);
  cuda::CudaBackendOptions fo;
  fo.expert_tiles_lean = false;
  auto first_tiles = cuda::make_cuda_backend(fo);
  cuda::CudaBackendOptions lo;
  lo.expert_tiles_fast = false;
  auto lean_tiles = cuda::make_cuda_backend(lo);
  cuda::CudaBackendOptions bo;  // the fast block tiles (before/after figures of the warp tiles)
  bo.expert_tiles_warp_max = 0;
  bo.expert_row_tiles_min = 0;
  auto block_tiles = cuda::make_cuda_backend(bo);
  cuda::CudaBackendOptions wo;
  wo.expert_tiles_warp_max = 64;
  wo.expert_row_tiles_min = 0;
  wo.expert_tiles_pdl = true;
  auto warp_tiles = cuda::make_cuda_backend(wo);
  cuda::CudaBackendOptions no;  // the warp tiles without programmatic dependent launches
  no.expert_tiles_warp_max = 64;
  no.expert_row_tiles_min = 0;
  no.expert_tiles_pdl = false;
  auto nopdl_tiles = cuda::make_cuda_backend(no);
  cuda::CudaBackendOptions ro;  // the row tiles at every n (moe_row_tiles.cu): first shapes, fast decode
  ro.expert_tiles_warp_max = 0;
  ro.expert_row_tiles_min = 1;
  ro.expert_row_tiles_v2 = false;
  ro.expert_row_tiles_perm = false;
  ro.expert_row_tiles_v3 = 0;
  auto row_tiles = cuda::make_cuda_backend(ro);
  ro.expert_tiles_pdl = true;  // the same as programmatic dependent launches
  auto rowpdl_tiles = cuda::make_cuda_backend(ro);
  ro.expert_tiles_pdl = false;
  ro.expert_row_tiles_perm = true;  // the byte-permute IQ2_XXS decode (up to moe_tiles.cu kRowPermMax tokens)
  auto perm_tiles = cuda::make_cuda_backend(ro);
  ro.expert_row_tiles_v2 = true;  // the second shapes, with and without the byte-permute decode
  auto v2perm_tiles = cuda::make_cuda_backend(ro);
  ro.expert_row_tiles_perm = false;
  auto v2_tiles = cuda::make_cuda_backend(ro);
  cuda::CudaBackendOptions oo;  // the one-token kernels (moe_one_token.cu): gate/up variant 4 without PDL (ncu)
  oo.expert_tiles_pdl = 0;
  oo.expert_one_token = 4;  // two rows per gate/up item
  auto one4_tiles = cuda::make_cuda_backend(oo);
  oo.expert_tiles_pdl = true;
  auto one4pdl_tiles = cuda::make_cuda_backend(oo);  // variant 4 + PDL: the default before session 10
  // Session 10: the down kernel adding the slots (expert_one_token 4 + 10·F: F = 1 a warp per tile, 2 two warps,
  // 3 / 4 the same quantizing the hidden rows inside), gate/up variant 6 (explicit shared addresses), gate/up
  // variant 7 (no prologue launch: the slots and x quantized inside; with a slot-summing down kernel).
  constexpr int kFolds = 8;
  const int one_folds[kFolds] = {17, 27, 37, 47, 14, 24, 44, 6};
  const char* one_fold_tags[kFolds] = {"one17", "one27", "one37", "one47", "one14", "one24", "one44", "one6"};
  std::unique_ptr<Backend> fold_tiles[kFolds];
  for (int i = 0; i < kFolds; ++i) {
    oo.expert_one_token = one_folds[i];
    auto b = cuda::make_cuda_backend(oo);
    if (b.ok()) fold_tiles[i] = std::move(b).value();
  }
  // Session 13 (the default is 3559 = moe_one_lean.cu's gate/up variant 9 with the L2 prefetch of the down weights,
  // the decode's selector OR as an integer multiply-add and half-block lanes + the fold-5 down kernel): 559 (the
  // default before), 1559 (the OR without the half-block lanes); 2559 (the selector shift as IMAD.HI) and 569 (fold
  // 6) measured and removed. Session 12's sides: 159, 459
  // (removed), 559; session 11's: 27, 28, 57, 58.
  constexpr int kLean = 2;
  const int lean_opts[kLean] = {559, 1559};
  const char* lean_tags[kLean] = {"one559", "one1559"};
  std::unique_ptr<Backend> lean_one[kLean];
  for (int i = 0; i < kLean && lean; ++i) {
    oo.expert_one_token = lean_opts[i];
    auto b = cuda::make_cuda_backend(oo);
    if (b.ok()) lean_one[i] = std::move(b).value();
  }
  ro.expert_row_tiles_v3 = 1;  // the balanced expert-major runs, fast decode and byte-permute decode at every n
  auto v3_tiles = cuda::make_cuda_backend(ro);
  ro.expert_row_tiles_perm = true;
  auto v3perm_tiles = cuda::make_cuda_backend(ro);
  std::vector<Side> moe_sides;
  if (lean) {
    // The default (59) and the prefetching sides, twice (drift shows); once (ncu): each once.
    for (int rep = 0; rep < (once ? 1 : 2); ++rep) {
      moe_sides.push_back({&be, "default"});
      for (int i = 0; i < kLean; ++i)
        if (lean_one[i]) moe_sides.push_back({lean_one[i].get(), lean_tags[i]});
    }
  } else if (one) {
    // Timed: the default (gate/up variant 4, PDL down), variant 2 with PDL (the default before), the warp
    // tiles with PDL. once (ncu): gate/up variants 2 and 4 (variants 1 and 3: session 8's runs).
    if (!once) moe_sides.push_back({&be, "default"});
    if (one4pdl_tiles.ok() && !once) moe_sides.push_back({one4pdl_tiles->get(), "one4pdl"});
    if (one4_tiles.ok() && once) moe_sides.push_back({one4_tiles->get(), "one4"});
    for (int i = 0; i < kFolds; ++i)
      if (fold_tiles[i]) moe_sides.push_back({fold_tiles[i].get(), one_fold_tags[i]});
  } else {
    if (!once) moe_sides.push_back({&be, "default"});
    if (warp_tiles.ok() && !once && !v3_only) moe_sides.push_back({warp_tiles->get(), "warp"});
    // The row tiles first (ncu -c N of `--experts once` then profiles their kernels).
    if (v3perm_tiles.ok()) moe_sides.push_back({v3perm_tiles->get(), "v3perm"});
    if (v3_tiles.ok()) moe_sides.push_back({v3_tiles->get(), "v3"});
    if (row_tiles.ok() && !v3_only) moe_sides.push_back({row_tiles->get(), "rows"});
    if (v2_tiles.ok()) moe_sides.push_back({v2_tiles->get(), "rowsv2"});
    if (v2perm_tiles.ok()) moe_sides.push_back({v2perm_tiles->get(), "v2perm"});
    if (perm_tiles.ok() && !v3_only) moe_sides.push_back({perm_tiles->get(), "rowsperm"});
    if (rowpdl_tiles.ok() && !v3_only) moe_sides.push_back({rowpdl_tiles->get(), "rowspdl"});
    if (nopdl_tiles.ok() && !tiles_only) moe_sides.push_back({nopdl_tiles->get(), "nopdl"});
    if (block_tiles.ok() && !v3_only) moe_sides.push_back({block_tiles->get(), "block"});
    if (lean_tiles.ok() && !tiles_only) moe_sides.push_back({lean_tiles->get(), "lean"});
    if (first_tiles.ok() && !tiles_only) moe_sides.push_back({first_tiles->get(), "tiles1"});
    if (previous.ok() && !tiles_only) moe_sides.push_back({previous->get(), "previous"});
    if (general.ok() && !tiles_only) moe_sides.push_back({general->get(), "general"});
  }
  for (const Side& sd : moe_sides) {
    auto ex = [&](GgmlType t, const std::vector<uint8_t>& h, int64_t rows, int64_t cols) {
      return ds4::test::expert_stack(bind(*sd.b, t, h, int64_t{NE} * rows, cols), rows, NE);
    };
    MoeArgs a;
    a.gate = ex(GgmlType::IQ2_XXS, gh, F, E);
    a.up = ex(GgmlType::IQ2_XXS, uh, F, E);
    a.down = ex(GgmlType::Q2_K, dh, E, F);
    Buffer x = buf(*sd.b, 64ull * E * 4), out = buf(*sd.b, 64ull * E * 4), bid = buf(*sd.b, ids.size() * 4),
           bw = buf(*sd.b, wts.size() * 4);
    sd.b->upload(bid.data(), ids.data(), ids.size() * 4);
    sd.b->upload(bw.data(), wts.data(), wts.size() * 4);
    a.x = x.f32();
    a.ids = bid.i32();
    a.weights = bw.f32();
    a.k = K;
    a.dim = E;
    a.ff = F;
    a.clamp = 10;
    a.out = out.f32();
    for (int n : one ? std::vector<int>{1, 2, 7} : std::vector<int>{1, 8, 16, 32, 64}) {
      if (one && (once || lean || sd.tag != std::string("default")) && n > 1) break;  // n > 1: the warp tiles
      a.n = n;
      std::vector<int32_t> used(ids.begin(), ids.begin() + n * K);
      std::sort(used.begin(), used.end());
      const auto distinct = std::unique(used.begin(), used.end()) - used.begin();
      if (once) {  // one call, e.g. for each kernel's profile under ncu
        sd.b->moe(a);
        (void)sd.b->sync();
        continue;
      }
      const double bytes = distinct * (2.0 * a.gate.expert_bytes + a.down.expert_bytes);
      if (one && n == 1) {  // cold weights: each call on the next of 16 tokens' expert sets (~96 experts, > L2)
        int call = 0;
        const double sc = median_seconds(
            [&] {
              MoeArgs c = a;
              c.ids = a.ids + (call % 16) * K;
              c.weights = a.weights + (call % 16) * K;
              ++call;
              sd.b->moe(c);
            },
            [&] { (void)sd.b->sync(); }, 16);
        std::printf("BENCH op %-8s moe iq2_xxs/q2_k 256 experts k6 n=1  cold (16 expert sets) %8.2f us  %7.0f GB/s of weights\n",
                    sd.tag, sc * 1e6, K * (2.0 * a.gate.expert_bytes + a.down.expert_bytes) / sc / 1e9);
      }
      const double s = median_seconds([&] { sd.b->moe(a); }, [&] { (void)sd.b->sync(); }, 10);
      std::printf("BENCH op %-8s moe iq2_xxs/q2_k 256 experts k6 n=%-2d (%3ld experts) %8.2f us  %7.0f GB/s of weights\n",
                  sd.tag, n, static_cast<long>(distinct), s * 1e6, bytes / s / 1e9);
    }
  }
}

// The op benchmarks: copy ceiling, dense matmuls and the per-stage decode table, HC controls, routed
// experts, attention.
// gemv_only (--gemv): only the dense matmul op lines and the stage tables.
void bench_ops(std::unique_ptr<Backend>& be, std::mt19937& rng, bool gemv_only) {
  auto sync = [&] { (void)be->sync(); };
  double ceiling = 4256;  // GB/s, replaced by the measurement below
  {  // Ceiling: device-to-device copy, bytes read + written.
    const uint64_t bytes = uint64_t{2} << 30;
    auto a = be->alloc(bytes, MemCategory::scratch);
    auto b = be->alloc(bytes, MemCategory::scratch);
    if (a.ok() && b.ok()) {
      const double s = median_seconds([&] { be->copy(b->data(), a->data(), bytes); }, sync, 5);
      ceiling = 2.0 * bytes / s / 1e9;
      std::printf("BENCH ceiling d2d-copy %.0f GB/s (read+write of 2 GiB in %.3f ms)\n", ceiling, s * 1e3);
    }
  }
  {  // Dense Q8_0 matmuls on gemv_dense.cu and gemv_mma.cu against the previous kernels; per-stage decode
     // breakdown: general kernels (the first version), gemv_mma.cu on every shape it takes, then the
     // default dispatch. --gemv: only these op lines and the default stage table.
    cuda::CudaBackendOptions dno, ao, po;
    dno.gemv_dense = cuda::GemvMma::always;
    ao.gemv_mma = cuda::GemvMma::always;
    ao.gemv_dense = cuda::GemvMma::off;
    po.gemv_mma = cuda::GemvMma::off;
    po.gemv_dense = cuda::GemvMma::off;
    for (auto* o : {&dno, &ao, &po}) o->gemv_stream = cuda::GemvMma::off;  // gemv_stream.cu: --dense
    auto dense = cuda::make_cuda_backend(dno);
    auto mma = cuda::make_cuda_backend(ao);
    auto prev = cuda::make_cuda_backend(po);
    if (dense.ok())
      bench_gemv_ops(**dense, mma.ok() ? mma->get() : nullptr, prev.ok() ? prev->get() : nullptr, ceiling);
    if (!gemv_only) {
      cuda::CudaBackendOptions go;
      go.decode_kernels = false;
      auto general = cuda::make_cuda_backend(go);
      if (general.ok()) {
        std::printf("BENCH stage --- general kernels (decode_kernels = false) ---\n");
        bench_decode_stages(**general, ceiling);
      }
      if (mma.ok()) {
        std::printf("BENCH stage --- every supported Q8_0 matvec on gemv_mma.cu (gemv_mma = always) ---\n");
        bench_decode_stages(**mma, ceiling);
      }
    }
    if (prev.ok()) {
      std::printf("BENCH stage --- decode kernels, gemv_dense = gemv_mma = off (previous) ---\n");
      bench_decode_stages(**prev, ceiling);
    }
    std::printf("BENCH stage --- decode kernels ---\n");
    bench_decode_stages(*be, ceiling);
    if (gemv_only) return;
    cuda::CudaBackendOptions ho;  // HC pre / router / HC post: spread kernels vs the previous ones
    ho.hc_router_v2 = false;
    if (auto hprev = cuda::make_cuda_backend(ho); hprev.ok()) bench_hc_router(*be, **hprev, nullptr, nullptr, false);
  }

  auto weight = [&](GgmlType t, int64_t rows, int64_t cols) {
    auto host = random_blocks(t, rows, cols, rng);
    Weight w{t, nullptr, rows, cols, *type_bytes(t, cols)};
    auto p = be->map_weight(host.data(), host.size());
    w.data = p.ok() ? *p : nullptr;
    return w;
  };
  auto fbuf = [&](int64_t n) {
    auto b = be->alloc(static_cast<uint64_t>(n) * 4, MemCategory::scratch);
    if (!b.ok()) {
      std::printf("BENCH error: %s (backend: %s)\n", b.status().to_string().c_str(), be->sync().to_string().c_str());
      std::exit(1);
    }
    return std::move(b).value();
  };
  Buffer x = fbuf(64 * 4096), y = fbuf(64 * 4096);  // the n = 64 matmul below reads and writes 64 rows of 4096

  struct Mm {
    const char* name;
    GgmlType t;
    int64_t rows, cols;
  };
  for (Mm m : {Mm{"q_a q8_0 1024x4096", GgmlType::Q8_0, 1024, 4096}, Mm{"q_b q8_0 32768x1024", GgmlType::Q8_0, 32768, 1024},
               Mm{"shared q8_0 2048x4096", GgmlType::Q8_0, 2048, 4096}, Mm{"expert iq2_xxs 2048x4096", GgmlType::IQ2_XXS, 2048, 4096},
               Mm{"expert q2_k 4096x2048", GgmlType::Q2_K, 4096, 2048}, Mm{"router f16 256x4096", GgmlType::F16, 256, 4096}}) {
    Weight w = weight(m.t, m.rows, m.cols);
    const double s = median_seconds([&] { be->matmul({w, x.f32(), m.cols, y.f32(), m.rows, 1}); }, sync, 50);
    const double bytes = static_cast<double>(w.row_bytes) * m.rows;
    std::printf("BENCH op matmul %-28s n=1  %8.2f us  %7.0f GB/s of weights\n", m.name, s * 1e6, bytes / s / 1e9);
  }
  {
    Weight w = weight(GgmlType::Q8_0, 4096, 4096);
    for (int n : {16, 64}) {
      const double s = median_seconds([&] { be->matmul({w, x.f32(), 4096, y.f32(), 4096, n}); }, sync, 10);
      std::printf("BENCH op matmul q8_0 4096x4096 n=%d  %8.2f us  %7.2f TFLOP/s\n", n, s * 1e6, 2.0 * 4096 * 4096 * n / s / 1e12);
    }
  }
  {  // HC control matmul (F16 [24][16384], twice per layer) in the segment order (matmul_f16.cu) and in
     // the previous lane order (CudaBackendOptions::f16_segments = false), decode and batched steps.
    cuda::CudaBackendOptions lo;
    lo.f16_segments = false;
    auto lane = cuda::make_cuda_backend(lo);
    const int64_t rows = 24, cols = 16384, nmax = 32;
    for (Backend* b : {be.get(), lane.ok() ? lane->get() : nullptr}) {
      if (!b) continue;
      auto host = random_blocks(GgmlType::F16, rows, cols, rng);
      Weight w{GgmlType::F16, nullptr, rows, cols, *type_bytes(GgmlType::F16, cols)};
      auto p = b->map_weight(host.data(), host.size());
      auto hx = b->alloc(nmax * cols * 4, MemCategory::scratch), hy = b->alloc(nmax * rows * 4, MemCategory::scratch);
      if (!p.ok() || !hx.ok() || !hy.ok()) continue;
      w.data = *p;
      b->fill_f32(hx->f32(), 0.5f, nmax * cols);
      for (int64_t n : {1, 8, 32}) {
        const double s = median_seconds([&] { b->matmul({w, hx->f32(), cols, hy->f32(), rows, n}); },
                                        [&] { (void)b->sync(); }, 50);
        std::printf("BENCH op matmul hc f16 24x16384 %-11s n=%-2d %8.2f us  %7.0f GB/s of weights\n",
                    b == be.get() ? "segments" : "lane-order", static_cast<int>(n), s * 1e6,
                    static_cast<double>(host.size()) / s / 1e9);
      }
    }
  }
  {  // Routed experts, decode: 6 of 16 resident Flash experts.
    const int NE = 16, E = 4096, F = 2048, K = 6;
    Weight g = weight(GgmlType::IQ2_XXS, int64_t{NE} * F, E), u = weight(GgmlType::IQ2_XXS, int64_t{NE} * F, E);
    Weight d = weight(GgmlType::Q2_K, int64_t{NE} * E, F);
    std::vector<int32_t> ids = {0, 3, 5, 7, 11, 13};
    std::vector<float> wts(K, 0.2f);
    Buffer bid = fbuf(K), bw = fbuf(K);
    be->upload(bid.data(), ids.data(), K * 4);
    be->upload(bw.data(), wts.data(), K * 4);
    auto ex = [](Weight w, int64_t rows, int ne) { return ds4::test::expert_stack(w, rows, ne); };
    MoeArgs a;
    a.gate = ex(g, F, NE);
    a.up = ex(u, F, NE);
    a.down = ex(d, E, NE);
    a.x = x.f32();
    a.ids = bid.i32();
    a.weights = bw.f32();
    a.n = 1;
    a.k = K;
    a.dim = E;
    a.ff = F;
    a.clamp = 10;
    a.out = y.f32();
    const double s = median_seconds([&] { be->moe(a); }, sync, 50);
    const double bytes = K * (2.0 * g.row_bytes * F + d.row_bytes * E);
    std::printf("BENCH op moe iq2_xxs/q2_k E4096 F2048 k6 n=1  %8.2f us  %7.0f GB/s of weights\n", s * 1e6, bytes / s / 1e9);
  }
  bench_skinny(*be, rng, false);

  {  // Attention: H 64, D 512, window 128 + 512 compressed rows per query (a CSA layer's 640 rows) or
     // + 16 (an HCA layer at 2K: 144 rows), per decode step of n sessions, in the MMA order (default,
     // attention_mma.cu: split shape for few queries, chunk shape above), the scalar segment order
     // (attention_mma = false) and the previous order (attention_segments = false as well: one online
     // softmax over all rows per head).
    const int H = 64, D = 512, nmax = 64;
    cuda::CudaBackendOptions so, po;
    so.attention_mma = false;
    po.attention_mma = false;
    po.attention_segments = false;
    auto scalar = cuda::make_cuda_backend(so);
    auto prev = cuda::make_cuda_backend(po);
    constexpr int kNs = 5;
    double t[2][3][kNs] = {};
    const int ns[kNs] = {1, 4, 16, 32, 64};
    for (int b = 0; b < 3; ++b) {
      auto& other = b == 1 ? scalar : prev;
      Backend* ab = b == 0 ? be.get() : (other.ok() ? other->get() : nullptr);
      if (!ab) continue;
      auto ab_buf = [&](int64_t floats) { return ab->alloc(static_cast<uint64_t>(floats) * 4, MemCategory::scratch); };
      auto q = ab_buf(nmax * H * D), raw = ab_buf(256 * D), comp = ab_buf(4096 * D), out = ab_buf(nmax * H * D);
      auto sinks = ab_buf(H), pos = ab_buf(nmax), cnt = ab_buf(nmax);
      if (!q.ok() || !raw.ok() || !comp.ok() || !out.ok() || !sinks.ok() || !pos.ok() || !cnt.ok()) continue;
      std::vector<int32_t> hp(nmax);
      for (int i = 0; i < nmax; ++i) hp[i] = 1000 + i;
      ab->upload(pos->data(), hp.data(), nmax * 4);
      ab->fill_f32(q->f32(), 0.01f, int64_t{nmax} * H * D);
      ab->fill_f32(raw->f32(), 0.5f, int64_t{256} * D);
      ab->fill_f32(comp->f32(), 0.25f, int64_t{4096} * D);
      AttentionArgs a;
      a.q = q->f32();
      a.pos = pos->i32();
      a.heads = H;
      a.head_dim = D;
      a.scale = 0.044f;
      a.sinks = sinks->f32();
      a.raw = raw->f32();
      a.raw_cap = 256;
      a.window = 128;
      a.comp = comp->f32();
      a.out = out->f32();
      for (int c = 0; c < 2; ++c) {  // c = 0: CSA (512 compressed rows), 1: HCA (16)
        const std::vector<int32_t> hcount(nmax, c == 0 ? 512 : 16);
        ab->upload(cnt->data(), hcount.data(), nmax * 4);
        a.comp_count = cnt->i32();
        a.max_comp = c == 0 ? 512 : 16;
        for (int k = 0; k < kNs; ++k) {
          a.n = ns[k];
          t[c][b][k] = median_seconds([&] { ab->attention(a); }, [&] { (void)ab->sync(); }, 50);
        }
      }
    }
    for (int c = 0; c < 2; ++c)
      for (int k = 0; k < kNs; ++k)
        std::printf("BENCH op attention %s H64 D512 window128 + %3d comp n=%-2d  mma %8.2f us  segments %8.2f us  previous %8.2f us\n",
                    c == 0 ? "CSA" : "HCA", c == 0 ? 512 : 16, ns[k], t[c][0][k] * 1e6, t[c][1][k] * 1e6, t[c][2][k] * 1e6);
  }
}

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // a crash keeps every finished line in the log
  auto made = cuda::make_cuda_backend();
  if (!made.ok()) {
    std::printf("BENCH skipped: %s\n", made.status().to_string().c_str());
    return 0;
  }
  auto be = std::move(made).value();
  const auto info = cuda::device_info(*be);
  std::printf("BENCH device %s cc %d.%d, %.1f GiB\n", info.name, info.cc_major, info.cc_minor, info.total / 1073741824.0);
  std::mt19937 rng(1);
  if (argc > 1 && std::strcmp(argv[1], "--experts") == 0) {
    const bool lean = argc > 2 && std::strcmp(argv[2], "lean") == 0;
    const bool one = lean || (argc > 2 && std::strcmp(argv[2], "one") == 0);
    const bool v3 = argc > 2 && std::strncmp(argv[2], "v3", 2) == 0;  // "v3", "v3once"
    const bool once = (argc > 2 + one && std::strcmp(argv[2 + one], "once") == 0) || (v3 && std::strcmp(argv[2], "v3once") == 0);
    bench_skinny(*be, rng, true, once || v3 || (argc > 2 && std::strcmp(argv[2], "tiles") == 0), once, one, v3, lean);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--small4") == 0) {  // session 7's shorter chain: small_v4 vs off
    cuda::CudaBackendOptions o3;
    o3.small_v4 = false;
    auto v3 = cuda::make_cuda_backend(o3);
    if (v3.ok()) bench_small4(*be, **v3, argc > 2 && std::strcmp(argv[2], "once") == 0);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--small5") == 0) {  // session 8's small kernels: small_v5 vs off
    cuda::CudaBackendOptions o5, o4;
    o5.small_v5 = 1;
    o4.small_v5 = 0;
    auto v5 = cuda::make_cuda_backend(o5);
    auto v4 = cuda::make_cuda_backend(o4);
    if (v5.ok() && v4.ok()) bench_small5(**v5, **v4);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--small7") == 0) {  // the folds: attn_out_rope + hc_post_fold on vs off
    cuda::CudaBackendOptions on, off;
    on.f16_mma = off.f16_mma = true;  // the engine's default (EngineOptions::cuda_f16_mma)
    on.attn_out_rope = 1;
    // Session 11's boundary kernel (hc_boundary.cu): 2 = a cluster of 8 blocks, 3 = 16 (`--small7 ops 3`); 1 (session
    // 10's fold) measured slower.
    on.hc_post_fold = argc > 3 ? std::atoi(argv[3]) : 2;
    off.attn_out_rope = off.hc_post_fold = 0;
    auto b_on = cuda::make_cuda_backend(on);
    auto b_off = cuda::make_cuda_backend(off);
    if (!b_on.ok() || !b_off.ok()) return 1;
    bench_small7(**b_on, **b_off);
    if (argc > 2 && std::strcmp(argv[2], "ops") == 0) return 0;
    std::printf("BENCH stage --- decode kernels, f16_mma on, folds off ---\n");
    bench_decode_stages(**b_off, 4800.0);
    std::printf("BENCH stage --- decode kernels, f16_mma on, folds on ---\n");
    bench_decode_stages(**b_on, 4800.0);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--small6") == 0) {  // session 9's decode launches (bench_small6)
    cuda::CudaBackendOptions plain, v6, v5;
    plain.hc_pdl = false;
    v6.small_v6 = 1;
    v5.small_v6 = 0;
    const bool stages = argc > 2 && std::strcmp(argv[2], "stages") == 0;  // the decode stage table, small_v6 0 then 1
    if (!stages) {
      if (auto off = cuda::make_cuda_backend(plain); off.ok()) bench_small6(*be, **off, false);
    }
    auto on = cuda::make_cuda_backend(v6);
    auto off = cuda::make_cuda_backend(v5);
    if (!on.ok() || !off.ok()) return 1;
    if (!stages) {
      bench_small6(**on, **off, true);
      bench_csa_stages(**on, **off);
      return 0;
    }
    std::printf("BENCH stage --- decode kernels, small_v6 = 0 ---\n");
    bench_decode_stages(**off, 4800.0);
    std::printf("BENCH stage --- decode kernels, small_v6 = 1 ---\n");
    bench_decode_stages(**on, 4800.0);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--hc-fuse") == 0) {  // HC pre in one launch vs two, both F16 orders
    cuda::CudaBackendOptions o[4];
    for (int i = 0; i < 4; ++i) {
      o[i].hc_fuse = i % 2 == 0 ? 0 : 2;
      o[i].f16_mma = i >= 2;
    }
    auto b0 = cuda::make_cuda_backend(o[0]), b1 = cuda::make_cuda_backend(o[1]), b2 = cuda::make_cuda_backend(o[2]),
         b3 = cuda::make_cuda_backend(o[3]);
    if (b0.ok() && b1.ok() && b2.ok() && b3.ok()) bench_hc_fuse(**b0, **b1, **b2, **b3);
    return 0;
  }
  const bool hc_once = argc > 1 && std::strcmp(argv[1], "--hc-once") == 0;
  if (hc_once || (argc > 1 && std::strcmp(argv[1], "--hc") == 0)) {  // HC pre, router, small ops: new vs previous
    cuda::CudaBackendOptions po;
    po.hc_router_v2 = false;
    auto prev = cuda::make_cuda_backend(po);
    cuda::CudaBackendOptions no;
    no.hc_pdl = false;
    auto plain = cuda::make_cuda_backend(no);
    cuda::CudaBackendOptions o2;
    o2.small_v3 = false;
    auto v2 = cuda::make_cuda_backend(o2);
    if (prev.ok())
      bench_hc_router(*be, **prev, plain.ok() ? plain->get() : nullptr, v2.ok() ? v2->get() : nullptr, hc_once);
    if (!hc_once && v2.ok()) bench_small_prefill(*be, **v2);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--warp") == 0) {  // dense Q8_0 decode matmuls: gemv_warp off / wins / always
    cuda::CudaBackendOptions fo, ao, ho, ro;
    fo.gemv_warp = cuda::GemvMma::off;  // the dispatch before gemv_warp.cu
    ao.gemv_warp = ho.gemv_warp = cuda::GemvMma::always;
    ho.gemv_warp_tile_bytes = 4352;  // half tiles, two slots a warp, two blocks an SM (a launch beside the one before)
    ro.gemv_rows = cuda::GemvMma::always;  // gemv_rows.cu on every shape it takes below gemv_warp's wins
    ro.gemv_bulk = cuda::GemvMma::off;
    auto off = cuda::make_cuda_backend(fo);
    auto all = cuda::make_cuda_backend(ao);
    auto half = cuda::make_cuda_backend(ho);
    auto rows = cuda::make_cuda_backend(ro);
    if (off.ok() && all.ok() && half.ok() && rows.ok()) {
      Backend* sides[5] = {off->get(), be.get(), all->get(), half->get(), rows->get()};
      const char* labels[5] = {"no-warp", "default", "warp", "warp-4K", "rows-all"};
      const int64_t lo[5] = {1, 1, 1, 1, 1}, hi[5] = {4, 4, 4, 4, 4};
      bench_dense_rows(sides, labels, lo, hi, 5, argc > 2 ? argv[2] : nullptr);
    }
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--half") == 0) {  // dense Q8_0 decode matmuls: gemv_rows' half kernel
    // Engine options: session 13's default ramp bits (s13); + the half kernel's 16-row tiles (dense_ramp.h
    // kRampHalfRows16: out_b); + q_a's norm triggering its dependents after its wait (kRampNormTrigger: the q-chain
    // line); the default (both, since session 14).
    constexpr int kS13 = 128 | 64 | 512 | 256 | 1024 | 2048 | 4096;  // kRampExplicit | session 13's kRampDefault
    std::vector<std::unique_ptr<Backend>> hb;
    for (int m : {kS13, kS13 | 524288, kS13 | 1048576, 0}) {
      auto o = runtime::engine_cuda_options();
      o.l2_prefetch_mode = m;
      if (auto h = cuda::make_cuda_backend(o); h.ok()) hb.push_back(std::move(*h));
    }
    if (hb.size() == 4) {
      Backend* sides[4] = {hb[0].get(), hb[1].get(), hb[2].get(), hb[3].get()};
      const char* labels[4] = {"s13", "rows16", "normtrig", "default"};
      const int64_t lo[4] = {1, 1, 1, 1}, hi[4] = {2, 2, 2, 2};
      bench_dense_rows(sides, labels, lo, hi, 4, argc > 2 ? argv[2] : nullptr);
    }
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--bulk") == 0) {  // dense Q8_0 decode matmuls: default vs the bulk ring
    cuda::CudaBackendOptions bo, no, wo;
    bo.gemv_bulk = cuda::GemvMma::always;
    no.gemv_bulk = cuda::GemvMma::off;   // the dispatch without the bulk rings
    wo.gemv_bulk = cuda::GemvMma::wins;  // ring 1 where it measured faster
    for (auto* o : {&bo, &no, &wo}) o->gemv_warp = cuda::GemvMma::off;  // gemv_warp.cu: --warp
    auto bulk = cuda::make_cuda_backend(bo);
    auto nobulk = cuda::make_cuda_backend(no);
    auto wins = cuda::make_cuda_backend(wo);
    if (bulk.ok() && nobulk.ok() && wins.ok()) {
      Backend* sides[3] = {nobulk->get(), wins->get(), bulk->get()};
      const char* labels[3] = {"no-bulk", "wins", "bulk"};
      const int64_t lo[3] = {1, 1, 1}, hi[3] = {8, 8, 8};
      bench_dense_rows(sides, labels, lo, hi, 3, argc > 2 ? argv[2] : nullptr);
    }
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--rows") == 0) {  // dense Q8_0 decode matmuls: default vs gemv_rows
    cuda::CudaBackendOptions ro, no, mo, po;
    po.gemv_rows = cuda::GemvMma::off;  // the dispatch before gemv_rows.cu
    ro.gemv_rows = cuda::GemvMma::always;
    no.gemv_rows = cuda::GemvMma::always;
    no.gemv_rows_no_l1 = true;
    mo.gemv_rows = mo.gemv_stream = mo.gemv_dense = cuda::GemvMma::off;  // gemv_mma.cu at every n it takes
    mo.gemv_mma = cuda::GemvMma::always;
    for (auto* o : {&po, &ro, &no, &mo}) o->gemv_bulk = o->gemv_warp = cuda::GemvMma::off;  // --bulk, --warp
    auto rows = cuda::make_cuda_backend(ro);
    auto nol1 = cuda::make_cuda_backend(no);
    auto mma = cuda::make_cuda_backend(mo);
    auto prev = cuda::make_cuda_backend(po);
    if (rows.ok() && nol1.ok() && mma.ok() && prev.ok()) {
      Backend* sides[5] = {prev->get(), be.get(), rows->get(), nol1->get(), mma->get()};
      const char* labels[5] = {"no-rows", "default", "rows", "rows-noL1", "mma"};
      const int64_t lo[5] = {1, 1, 1, 1, 8}, hi[5] = {32, 32, 8, 8, 32};
      bench_dense_rows(sides, labels, lo, hi, 5, argc > 2 ? argv[2] : nullptr);
    }
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--dense") == 0) {  // dense Q8_0 matmuls, cold weights: gemv_stream vs before
    cuda::CudaBackendOptions po, so, no;
    po.gemv_stream_chunks = false;  // the dispatch before the column chunks
    po.gemv_rows = so.gemv_rows = no.gemv_rows = cuda::GemvMma::off;  // gemv_rows.cu: --rows
    po.gemv_bulk = so.gemv_bulk = no.gemv_bulk = cuda::GemvMma::off;  // the bulk ring: --bulk
    po.gemv_warp = so.gemv_warp = no.gemv_warp = cuda::GemvMma::off;  // gemv_warp.cu: --warp
    so.gemv_stream = cuda::GemvMma::always;
    so.gemv_stream_chunks = true;
    no.gemv_stream = cuda::GemvMma::always;  // whole-row tiles
    auto prev = cuda::make_cuda_backend(po);
    auto st = cuda::make_cuda_backend(so);
    auto plain = cuda::make_cuda_backend(no);
    if (prev.ok() && st.ok() && plain.ok()) bench_dense_cold(**prev, *be, **st, **plain, argc > 2 ? argv[2] : nullptr);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--stages") == 0) {  // the decode stage table: small_v3 off, then default
    cuda::CudaBackendOptions o2;
    o2.small_v3 = false;
    if (auto v2 = cuda::make_cuda_backend(o2); v2.ok()) {
      std::printf("BENCH stage --- decode kernels, small_v3 = false ---\n");
      bench_decode_stages(**v2, 4800.0);
    }
    std::printf("BENCH stage --- decode kernels (default) ---\n");
    bench_decode_stages(*be, 4800.0);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--f16mma") == 0) {  // the decode stage table: f16_mma off, then on
    cuda::CudaBackendOptions om;
    om.f16_mma = !cuda::CudaBackendOptions{}.f16_mma;
    if (auto other = cuda::make_cuda_backend(om); other.ok()) {
      std::printf("BENCH stage --- decode kernels, f16_mma = %s ---\n", om.f16_mma ? "true" : "false");
      bench_decode_stages(**other, 4800.0);
    }
    std::printf("BENCH stage --- decode kernels (default: f16_mma = %s) ---\n", om.f16_mma ? "false" : "true");
    bench_decode_stages(*be, 4800.0);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--csa") == 0) {  // the CSA layer's compressor + indexer lines only
    cuda::CudaBackendOptions po;
    if (argc > 2 && std::strcmp(argv[2], "small4") == 0) {  // previous = small_v4 off (session 7's fusions)
      po.small_v4 = false;
    } else {
      po.indexer_decode = false;
      po.f16_many = false;
    }
    auto prev = cuda::make_cuda_backend(po);
    if (prev.ok()) bench_csa_stages(*be, **prev);
    return 0;
  }

  if (argc > 1 && std::strcmp(argv[1], "--dense-steps") == 0) {  // decode steps, column chunks off / on
    bench_dense_steps(argc - 2, argv + 2);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--warp-steps") == 0) {  // decode steps at 2-4 vectors, gemv_warp off / on
    bench_warp_steps(argc - 2, argv + 2);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--ramp-steps") == 0) {  // decode steps, the dense ramp bits off / on
    bench_ramp_steps(argc - 2, argv + 2);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--f16dec") == 0) {  // decode F16 MMA calls per f16_mma_decode_kernel
    std::vector<int> kernels = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    if (argc > 2) {  // a comma-separated list
      kernels.clear();
      for (const char* c = argv[2]; *c;) {
        char* end = nullptr;
        kernels.push_back(static_cast<int>(std::strtol(c, &end, 10)));
        c = *end == ',' ? end + 1 : end;
        if (end == c && *c) break;
      }
    }
    bench_f16dec_calls(kernels);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--ctx-steps") == 0) {  // decode steps at 2K … 32K per indexer_select
    bench_ctx_steps(argc - 2, argv + 2);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--ctx-profile") == 0) {  // one decode step per context, for ncu
    bench_ctx_profile(argc - 2, argv + 2);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--f16dec-steps") == 0) {  // whole steps per f16_mma_decode_kernel
    bench_f16dec_steps(argc - 2, argv + 2);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--f16mma-steps") == 0) {  // whole steps, f16_mma off / on (launch variants)
    bench_f16mma_steps(argc - 2, argv + 2);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--small5-steps") == 0) {  // whole steps, small_v5 off / on / + HC split
    bench_small5_steps(argc - 2, argv + 2);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--hcsplit-steps") == 0) {  // decode steps, the HC split in op / side lane
    bench_hcsplit_steps(argc - 2, argv + 2);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--hcb-forms") == 0) {  // session 12's boundary kernel forms, side by side
    std::vector<int> folds;
    for (int i = 2; i < argc; ++i) folds.push_back(std::atoi(argv[i]));
    bench_hcb_forms(folds);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--hcb-steps") == 0) {  // decode steps, two hc_post_fold values, engine options
    bench_hcb_steps(argc - 2, argv + 2);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--dattn") == 0) {  // one decode query's attention, two attention_mma_kernels
    bench_dattn(argc - 2, argv + 2);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--pexp-steps") == 0) {  // prefill chunks, gemm_experts values, engine options
    bench_pexp_steps(argc - 2, argv + 2);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--dattn-steps") == 0) {  // decode steps, two attention_mma_kernels values
    bench_dattn_steps(argc - 2, argv + 2);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--pattn-steps") == 0) {  // a prefill chunk, two attention_mma_kernels values
    bench_pattn_steps(argc - 2, argv + 2);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--small7-steps") == 0) {  // decode steps, session 10's folds off / on
    bench_small7_steps(argc - 2, argv + 2);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--moe-steps") == 0) {  // decode steps, two expert_one_token values
    bench_moe_steps(argc - 2, argv + 2);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--moe-swap") == 0) {  // decode steps, expert_one_token values on one backend
    bench_moe_swap(argc - 2, argv + 2);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--hcb-swap") == 0) {  // decode steps, hc_post_fold values on one backend
    bench_hcb_swap(argc - 2, argv + 2);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--crit") == 0) {  // decode steps with stages removed / options set
    bench_crit(argc - 2, argv + 2);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--opt-swap") == 0) {  // decode steps, one option's values on one backend
    bench_opt_swap(argc - 2, argv + 2);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--head-swap") == 0) {  // decode steps, hc_fuse values on one backend
    bench_head_swap(argc - 2, argv + 2);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--head") == 0) {  // the output head, hc_fuse values on one backend
    bench_head(argc - 2, argv + 2);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--engine-steps") == 0) {  // decode + prefill steps as the engine runs them
    bench_engine_steps(argc - 2, argv + 2);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--hc-fuse-steps") == 0) {  // decode steps, HC pre in two launches / one
    bench_hc_fuse_steps(argc - 2, argv + 2);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--hcpre-prefill") == 0) {  // a prefill chunk's HC pre, controls forms
    bench_hcpre_prefill(argc - 2, argv + 2);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--hcpre-steps") == 0) {  // prefill chunks, two controls forms
    bench_hcpre_steps(argc - 2, argv + 2);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--prefetch") == 0) {  // decode steps with weights prefetched into L2
    bench_prefetch_steps(argc - 2, argv + 2);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--l2") == 0) {  // dense matmuls: cold, after idle, prefetched, warm
    cuda::CudaBackendOptions lo;
    lo.l2_prefetch_mode = argc > 2 ? std::atoi(argv[2]) : 0;
    auto lb = cuda::make_cuda_backend(lo);
    if (lb.ok()) bench_l2_prefetch(**lb);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--branches") == 0) {  // decode steps, concurrent branches off / on
    bench_branches(argc - 2, argv + 2);
    return 0;
  }

  // --models-only: just the whole-model lines (graphs off / on) for the files that follow.
  const bool models_only = argc > 1 && std::strcmp(argv[1], "--models-only") == 0;
  const int first = models_only ? 2 : 1;
  const bool gemv_only = argc > 1 && std::strcmp(argv[1], "--gemv") == 0;
  if (!models_only) bench_ops(be, rng, gemv_only);
  if (gemv_only) return 0;

  // Whole models through the public API, decode host-launched and then replayed as CUDA graphs
  // (EngineOptions::cuda_graphs: every decode step, the ones emitting compressed rows included).
  for (int run = 0; run < 2 * (argc - first); ++run) {
    const int i = first + run / 2;
    const bool graphs = run % 2 == 1;
    EngineOptions o;
    o.model_path = argv[i];
    o.backend = BackendKind::cuda;
    o.max_chunk = 256;
    o.cuda_graphs = graphs;
    const auto t0 = Clock::now();
    auto e = Engine::open(o);
    const double load = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!e.ok()) {
      std::printf("BENCH model %s: %s\n", argv[i], e.status().to_string().c_str());
      continue;
    }
    const auto& mi = (*e)->info();
    std::printf("BENCH model %s load %.2f s, %.2f GB of weights (%.2f GB/s incl. file reads)\n", argv[i], load,
                mi.weight_bytes / 1e9, mi.weight_bytes / load / 1e9);
    auto s = (*e)->new_session();
    if (!s.ok()) continue;
    std::vector<TokenId> prompt(2048);  // decode is measured at context 2K (issue 5's decode bar)
    for (size_t k = 0; k < prompt.size(); ++k) prompt[k] = static_cast<TokenId>((k * 7919) % mi.n_vocab);
    auto tp = Clock::now();
    Status st = (*s)->eval(prompt);
    const double pre = std::chrono::duration<double>(Clock::now() - tp).count();
    if (!st.ok()) {
      std::printf("BENCH model prefill failed: %s\n", st.to_string().c_str());
      continue;
    }
    const int n_dec = 64;
    TokenId next = 1;
    auto td = Clock::now();
    for (int k = 0; k < n_dec && st.ok(); ++k) {
      st = (*s)->eval(std::span<const TokenId>(&next, 1));
      const auto l = (*s)->logits();
      next = static_cast<TokenId>(std::max_element(l.begin(), l.end()) - l.begin());
    }
    const double dec = std::chrono::duration<double>(Clock::now() - td).count();
    std::printf("BENCH model %s layers %d graphs %s prefill %zu tok %.1f tok/s, decode %d tok at ctx %zu %.2f tok/s (%.3f ms/token)\n",
                argv[i], mi.n_layer, graphs ? "on " : "off", prompt.size(), prompt.size() / pre, n_dec, prompt.size(),
                n_dec / dec, dec / n_dec * 1e3);
  }
  return 0;
}
