// cuda_bench_branches.cpp — `cuda_bench --branches M...`: whole decode steps of a model file in order,
// with concurrent branches (CudaBackendOptions::branches; all parts, or only the shared expert or only
// the attention forks: ForwardOptions::branches), and with branches and lane priorities (branch_priority),
// step graphs on and off, one session at context 2K and a batch of 8 at 512, through
// model::Forward on a backend made with each variant's options (the Engine API fixes the backend options).
// Prints one "BENCH branches" line per case: the median per-step wall time (host-timed: step inputs,
// the step, the logits download) and the rate. Method: prefill each session's prompt, 8 warm-up steps
// (graphs are recorded on a shape's 2nd use), then the median of 5 repetitions of 16 steps. Decode
// tokens are a fixed pseudo-random sequence (no sampling on the host).
// `cuda_bench --prefetch M...`: the same steps (branches on, graphs on) with each set of weights prefetched into
// L2 ahead of its matmul (ForwardOptions::l2_prefetch), "BENCH prefetch" lines; every set twice, interleaved
// with none, so drift shows.
// `cuda_bench --small5-steps M...`: a 2,048-token prefill chunk and decode steps with CudaBackendOptions::small_v5
// off / on / on with the HC split on the side lane, "BENCH small5-steps" lines.
// `cuda_bench --hc-fuse-steps M...`: decode steps with the HC pre in two launches and in one (hc_fuse 0 / 2).
// `cuda_bench --small7-steps M...`: decode steps with session 10's folds off and on (attn_out_rope, hc_post_fold).
// `cuda_bench --hcb-steps A B M...`: decode steps with hc_post_fold A vs B as the engine runs them, "BENCH hcb-steps".
// `cuda_bench --hcsplit-steps M...`: decode steps with each HC pre's split in the op / on the side lane.
// `cuda_bench --moe-steps A B [C …] M...`: decode steps with expert_one_token A, B, …, "BENCH moe-steps" lines.
// `cuda_bench --f16mma-steps M...`: decode steps and a prefill chunk with f16_mma off / on (launch and combine
// variants), "BENCH f16mma-steps" lines.
// `cuda_bench --warp-steps M...`: decode steps at batch 2, 3 and 4 with gemv_warp off / on (the default), "BENCH
// warp-steps" lines.
// `cuda_bench --ramp-steps M...`: decode steps with the dense matvecs' ramp bits (dense_ramp.h) off and on.
// `cuda_bench --ctx-steps [S...] M...`: decode steps of one session at 2K … 32K as the engine runs them, per indexer_select
// S; `--ctx-profile S M CTX...`: one such step at each CTX between cudaProfilerStart / Stop (for ncu).
// `cuda_bench --hcpre-steps A B M...`: a 2,048-token prefill chunk (2K → 4K) as the engine runs it with hc_fuse's
// tens digit A and B (a prefill chunk's HC controls: 0 rms_norm + the few-row matmul, 3 or 5 hc_controls_prefill.cu's
// forms), the two interleaved for six rounds, "BENCH hcpre-steps" lines.
// `cuda_bench --dattn-steps A B [C …] [--rounds N] M...`: decode steps (batch 1 at 2K and 32K, as the engine runs them)
// with attention_mma_kernels A, B, …, "BENCH dattn-steps" lines.
// `cuda_bench --pexp-steps A B [C …] [--rounds N] M...`: 2,048-token prefill chunks at 2K → 4K (as the engine runs them)
// with CudaBackendOptions::gemm_experts A, B, …, "BENCH pexp-steps" lines.
// `cuda_bench --pattn-steps A B [--rounds N] M...`: a 2,048-token prefill chunk at 2K → 4K with attention_mma_kernels A and
// B, "BENCH pattn-steps" lines.
// Deliberately not here: correctness (tests/cuda/test_cuda_branches.cpp), per-op timings (cuda_bench).
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <cuda_profiler_api.h>

#include "backend/cuda/cuda_backend.h"
#include "bench_median.h"
#include "gguf/gguf.h"
#include "model/forward.h"
#include "model/weights.h"
#include "modelspec/config.h"
#include "modelspec/layer_plan.h"
#include "runtime/engine_cuda_options.h"

using namespace ds4;

namespace {

// Seconds per decode step of `sessions` sessions after prompts of `prompt` tokens, or < 0 on failure.
// `profile_one`: after the warm-up, one step between cudaProfilerStart / Stop (ncu --profile-from-start off sees
// that step's launches only), no timing (returns 0).
double decode_step_seconds(model::Forward& fw, backend::Backend& be, int sessions, int64_t prompt,
                           bool profile_one = false) {
  const int64_t V = fw.config().n_vocab, C = fw.max_chunk();
  std::vector<model::KvState> kv;
  std::vector<float> logits(static_cast<size_t>(V * sessions));
  std::vector<int32_t> toks(static_cast<size_t>(prompt + 3 * sessions));
  for (size_t k = 0; k < toks.size(); ++k) toks[k] = static_cast<int32_t>((k * 7919 + 13) % static_cast<size_t>(V));
  std::vector<int64_t> pos(static_cast<size_t>(sessions), 0);
  for (int s = 0; s < sessions; ++s) {
    auto st = fw.new_state(prompt + 4096);
    if (!st.ok()) {
      std::printf("BENCH step: new_state: %s\n", st.status().to_string().c_str());
      return -1;
    }
    kv.push_back(std::move(st).value());
    const int64_t len = prompt + 3 * s;  // sessions of different lengths
    for (int64_t p = 0; p < len; p += C) {
      const int64_t n = std::min(C, len - p);
      const Status es = fw.eval(kv.back(), std::span<const int32_t>(toks.data() + p, static_cast<size_t>(n)), p, logits.data(), false);
      if (!es.ok()) {
        std::printf("BENCH step: prefill at %lld: %s\n", static_cast<long long>(p), es.to_string().c_str());
        return -1;
      }
    }
    pos[static_cast<size_t>(s)] = len;
  }
  std::vector<int32_t> next(static_cast<size_t>(sessions));
  std::vector<model::Segment> segs(static_cast<size_t>(sessions));
  bool ok = true;
  int64_t step_no = 0;
  auto step = [&] {
    for (int s = 0; s < sessions; ++s) {
      const size_t i = static_cast<size_t>(s);
      next[i] = static_cast<int32_t>((step_no * 104729 + s * 31 + 7) % V);
      segs[i] = model::Segment{&kv[i], std::span<const int32_t>(&next[i], 1), pos[i], logits.data() + i * V, false};
      ++pos[i];
    }
    ++step_no;
    if (!ok) return;
    if (const Status es = fw.eval_batch(segs); !es.ok()) {
      std::printf("BENCH step: decode step %lld: %s\n", static_cast<long long>(step_no), es.to_string().c_str());
      ok = false;
    }
  };
  for (int w = 0; w < 8; ++w) step();
  if (profile_one) {
    (void)be.sync();
    cudaProfilerStart();
    step();
    (void)be.sync();
    cudaProfilerStop();
    return ok ? 0.0 : -1;
  }
  const double t = ds4::test::median_seconds(step, [&] { (void)be.sync(); }, 16);
  return ok ? t : -1;
}

// A model file and its config, or nullopt after a "BENCH <tag> <path>: <error>" line.
struct ModelFile {
  std::unique_ptr<gguf::File> file;
  modelspec::ModelConfig cfg;
};
std::optional<ModelFile> open_model(const char* path, const char* tag) {
  auto file = gguf::File::open(path);
  auto cfg = file.ok() ? modelspec::config_from_gguf(**file) : Result<modelspec::ModelConfig>(file.status());
  if (!cfg.ok()) {
    std::printf("BENCH %s %s: %s\n", tag, path, cfg.status().to_string().c_str());
    return std::nullopt;
  }
  return ModelFile{std::move(file).value(), std::move(cfg).value()};
}

// Seconds of one 2,048-token prefill chunk at 2K → 4K (fw made with max_chunk 2048): the median of 3, each
// on a fresh state after its first chunk; < 0 on failure.
double prefill_chunk_seconds(model::Forward& fw, backend::Backend& be) {
  const int64_t V = fw.config().n_vocab, C = 2048;
  std::vector<int32_t> toks(static_cast<size_t>(2 * C));
  for (size_t k = 0; k < toks.size(); ++k) toks[k] = static_cast<int32_t>((k * 7919 + 13) % static_cast<size_t>(V));
  std::vector<float> logits(static_cast<size_t>(V));
  std::vector<double> pre;
  for (int rep = 0; rep < 3; ++rep) {
    auto st = fw.new_state(2 * C + 64);
    if (!st.ok()) return -1;
    if (!fw.eval(*st, std::span<const int32_t>(toks.data(), C), 0, logits.data(), false).ok()) return -1;
    (void)be.sync();
    const auto t0 = std::chrono::steady_clock::now();
    if (!fw.eval(*st, std::span<const int32_t>(toks.data() + C, C), C, logits.data(), false).ok()) return -1;
    if (!be.sync().ok()) return -1;
    pre.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(pre.begin(), pre.end());
  return pre[1];
}

// One side of a whole-step comparison: a backend made with its own options, the model's weights bound to it
// and a Forward over them (graphs on, the default branches).
struct StepSide {
  std::unique_ptr<backend::Backend> be;
  std::unique_ptr<model::ModelWeights> w;
  std::unique_ptr<model::Forward> fw;
};

// (Re)loads `s` with options `co` and chunks of max_chunk tokens; false after a "BENCH <tag>: ..." line.
bool load_side(StepSide& s, const ModelFile& mf, const std::vector<modelspec::LayerPlan>& plan,
               const backend::cuda::CudaBackendOptions& co, int64_t max_chunk, const char* tag,
               uint32_t extra_branches = 0) {
  s.fw.reset();
  s.w.reset();
  auto made = backend::cuda::make_cuda_backend(co);
  if (!made.ok()) {
    std::printf("BENCH %s: backend: %s\n", tag, made.status().to_string().c_str());
    return false;
  }
  s.be = std::move(made).value();
  auto bound = model::bind_weights(*mf.file, mf.cfg, plan, *s.be);
  if (!bound.ok() || !s.be->sync().ok()) {
    std::printf("BENCH %s: weights: %s\n", tag, bound.ok() ? "sync failed" : bound.status().to_string().c_str());
    return false;
  }
  s.w = std::make_unique<model::ModelWeights>(std::move(bound).value());
  model::ForwardOptions fo;
  fo.max_chunk = max_chunk;
  fo.graphs = true;
  fo.branches |= extra_branches;
  auto fw = model::Forward::create(*s.be, mf.cfg, *s.w, fo);
  if (!fw.ok()) {
    std::printf("BENCH %s: forward: %s\n", tag, fw.status().to_string().c_str());
    return false;
  }
  s.fw = std::move(fw).value();
  return true;
}

// Decode steps of two sides for each (sessions, ctx) case, the sides interleaved `rounds` times (drift shows): "BENCH <tag>
// <name> layers … round r: ms/step, tok/s" lines, names padded to `width`.
void interleaved_steps(const char* tag, const char* const names[2], StepSide sides[2], int width, size_t layers,
                       const std::vector<std::pair<int, int64_t>>& cases, int rounds = 2) {
  for (const auto& [sessions, ctx] : cases) {
    for (int round = 0; round < rounds; ++round)
      for (int k = 0; k < 2; ++k) {
        const double t = decode_step_seconds(*sides[k].fw, *sides[k].be, sessions, ctx);
        std::printf("BENCH %s %-*s layers %zu batch %d ctx %lld round %d: %.3f ms/step, %.1f tok/s\n", tag, width,
                    names[k], layers, sessions, static_cast<long long>(ctx), round + 1, t * 1e3,
                    t > 0 ? sessions / t : 0.0);
        if (t < 0) std::printf("BENCH step: sync: %s\n", sides[k].be->sync().to_string().c_str());
        std::fflush(stdout);
      }
  }
}

// interleaved_steps for one session at 2K and a batch of `batch` at `batch_ctx`.
void interleaved_decode_steps(const char* tag, const char* const names[2], StepSide sides[2], int width, size_t layers,
                              int batch, int64_t batch_ctx) {
  interleaved_steps(tag, names, sides, width, layers, {{1, 2048}, {batch, batch_ctx}});
}

}  // namespace

void bench_branches(int argc, char** argv) {
  const uint32_t all = model::kBranchSharedExpert | model::kBranchAttention;
  struct Case {
    const char* name;
    bool graphs;
    uint32_t parts;  // ForwardOptions::branches
  };
  struct Variant {
    const char* name;
    bool branches, priority;
    std::vector<Case> cases;
  };
  const Variant variants[] = {
      {"in order", false, false, {{"", true, all}, {"", false, all}}},
      {"branches", true, false,
       {{"", true, all}, {" (shared expert only)", true, model::kBranchSharedExpert},
        {" (attention only)", true, model::kBranchAttention},
        {" (+ HC split on the side lane)", true, all | model::kBranchHcSplit}, {"", false, all}}},
      {"branches+priority", true, true, {{"", true, all}, {"", false, all}}}};
  for (int i = 0; i < argc; ++i) {
    auto file = gguf::File::open(argv[i]);
    if (!file.ok()) {
      std::printf("BENCH branches %s: %s\n", argv[i], file.status().to_string().c_str());
      return;
    }
    auto cfg = modelspec::config_from_gguf(**file);
    if (!cfg.ok()) {
      std::printf("BENCH branches %s: %s\n", argv[i], cfg.status().to_string().c_str());
      return;
    }
    const auto plan = modelspec::layer_plan(*cfg);
    for (const Variant& v : variants) {
      backend::cuda::CudaBackendOptions co;
      co.branches = v.branches;
      co.branch_priority = v.priority;
      auto be = backend::cuda::make_cuda_backend(co);
      if (!be.ok()) {
        std::printf("BENCH branches: %s\n", be.status().to_string().c_str());
        return;
      }
      auto w = model::bind_weights(**file, *cfg, plan, **be);
      if (!w.ok() || !(*be)->sync().ok()) {
        std::printf("BENCH branches %s: weights: %s\n", argv[i], w.ok() ? "sync failed" : w.status().to_string().c_str());
        return;
      }
      for (const Case& c : v.cases) {
        model::ForwardOptions fo;
        fo.max_chunk = 512;
        fo.graphs = c.graphs;
        fo.branches = c.parts;
        auto fw = model::Forward::create(**be, *cfg, *w, fo);
        if (!fw.ok()) return;
        for (int sessions : {1, 8}) {
          const int64_t ctx = sessions == 1 ? 2048 : 512;
          const double t = decode_step_seconds(**fw, **be, sessions, ctx);
          const std::string name = std::string(v.name) + c.name;
          std::printf("BENCH branches %-40s layers %zu graphs %s batch %d ctx %lld: %.3f ms/step, %.1f tok/s\n",
                      name.c_str(), plan.size(), c.graphs ? "on " : "off", sessions, static_cast<long long>(ctx),
                      t * 1e3, t > 0 ? sessions / t : 0.0);
        }
      }
    }
  }
}

void bench_prefetch_steps(int argc, char** argv) {
  int mode = 0;
  if (argc >= 2 && std::string(argv[0]) == "--mode") {
    mode = std::atoi(argv[1]);
    argc -= 2;
    argv += 2;
  }
  using model::kPrefetchOutA, model::kPrefetchOutB, model::kPrefetchQuery, model::kPrefetchShared;
  struct Set {
    const char* name;
    uint32_t mask;
  };
  const Set sets[] = {{"none", 0},
                      {"shared", kPrefetchShared},
                      {"out_a", kPrefetchOutA},
                      {"q", kPrefetchQuery},
                      {"all", kPrefetchQuery | kPrefetchOutA | kPrefetchOutB | kPrefetchShared}};
  for (int i = 0; i < argc; ++i) {
    auto file = gguf::File::open(argv[i]);
    if (!file.ok()) {
      std::printf("BENCH prefetch %s: %s\n", argv[i], file.status().to_string().c_str());
      return;
    }
    auto cfg = modelspec::config_from_gguf(**file);
    if (!cfg.ok()) return;
    const auto plan = modelspec::layer_plan(*cfg);
    backend::cuda::CudaBackendOptions co;
    co.branches = true;
    co.l2_prefetch_mode = mode;
    auto be = backend::cuda::make_cuda_backend(co);
    if (!be.ok()) return;
    auto w = model::bind_weights(**file, *cfg, plan, **be);
    if (!w.ok() || !(*be)->sync().ok()) return;
    // Every set's Forward made up front and kept: step graphs go with their Forward (Backend::graph_release),
    // so the sets, run in turn, each keep their recorded steps.
    std::vector<std::unique_ptr<model::Forward>> fws;
    for (const Set& s : sets) {
      model::ForwardOptions fo;
      fo.max_chunk = 512;
      fo.graphs = true;
      fo.l2_prefetch = s.mask;
      auto fw = model::Forward::create(**be, *cfg, *w, fo);
      if (!fw.ok()) {
        std::printf("BENCH prefetch: forward: %s\n", fw.status().to_string().c_str());
        return;
      }
      fws.push_back(std::move(fw).value());
    }
    for (int sessions : {1, 8}) {
      const int64_t ctx = sessions == 1 ? 2048 : 512;
      double base = 0;
      for (size_t k = 0; k < fws.size(); ++k) {
        const double t = decode_step_seconds(*fws[k], **be, sessions, ctx);
        if (k == 0) base = t;
        std::printf("BENCH prefetch %-16s mode %d layers %zu batch %d ctx %lld: %.3f ms/step (none %.3f), %.1f tok/s\n",
                    sets[k].name, mode, plan.size(), sessions, static_cast<long long>(ctx), t * 1e3, base * 1e3,
                    t > 0 ? sessions / t : 0.0);
        if (t < 0) std::printf("BENCH step: sync: %s\n", (*be)->sync().to_string().c_str());
        std::fflush(stdout);
      }
    }
  }
}

// `cuda_bench --dense-steps M...`: decode steps (graphs and branches on) with the dense matvecs as on main
// before the column chunks (gemv_stream_chunks = false) and as now, batch 1 (ctx 2K) and 2 (ctx 1K), the
// two interleaved twice.
void bench_dense_steps(int argc, char** argv) {
  const char* const names[2] = {"whole rows", "chunks"};
  for (int i = 0; i < argc; ++i) {
    auto mf = open_model(argv[i], "dense-steps");
    if (!mf) return;
    const auto plan = modelspec::layer_plan(mf->cfg);
    StepSide sides[2];  // one per side for the whole run (see bench_prefetch_steps)
    for (int k = 0; k < 2; ++k) {
      backend::cuda::CudaBackendOptions co;
      co.gemv_stream_chunks = k == 1;
      if (!load_side(sides[k], *mf, plan, co, 512, "dense-steps")) return;
    }
    interleaved_decode_steps("dense-steps", names, sides, 10, plan.size(), 2, 1024);
  }
}

// `cuda_bench --warp-steps M...`: decode steps as the engine runs them (graphs, branches, its CUDA options:
// runtime::engine_cuda_options) with the dense Q8_0 matmuls of 2–4 vectors on gemv_warp.cu's per-warp rings (gemv_warp =
// wins: since session 11 from 3 vectors, gemv_warp.cu gemv_warp_wins) and without them (off: gemv_bulk / gemv_rows /
// gemv_stream as before): batches 2, 3 and 4 at ctx 1K, and one session at 2K (gemv_warp takes no 1-vector
// matmul: the two sides' noise). The sides interleaved twice.
void bench_warp_steps(int argc, char** argv) {
  const char* const names[2] = {"gemv_warp off", "gemv_warp on"};
  for (int i = 0; i < argc; ++i) {
    auto mf = open_model(argv[i], "warp-steps");
    if (!mf) return;
    const auto plan = modelspec::layer_plan(mf->cfg);
    StepSide sides[2];
    for (int k = 0; k < 2; ++k) {
      backend::cuda::CudaBackendOptions co = runtime::engine_cuda_options();
      co.gemv_warp = k == 0 ? backend::cuda::GemvMma::off : backend::cuda::GemvMma::wins;
      if (!load_side(sides[k], *mf, plan, co, 512, "warp-steps")) return;
    }
    interleaved_steps("warp-steps", names, sides, 13, plan.size(), {{2, 1024}, {3, 1024}, {4, 1024}, {1, 2048}});
  }
}

// `cuda_bench --ramp-steps M...`: decode steps as the engine runs them (graphs, branches + the HC split on the
// side lane, runtime::engine_cuda_options) with the dense matvecs' ramp bits (dense_ramp.h, in
// CudaBackendOptions::l2_prefetch_mode; each side's exact set: kRampExplicit; "default": the option's 0) off and
// on: one session at 2K (five rounds), batches of 2 and 4 at 1K (two each), every side once per round (drift shows). "BENCH
// ramp-steps" lines.
void bench_ramp_steps(int argc, char** argv) {
  struct Side {
    const char* name;
    int mode;
  };
  // Session 13's default ramp bits (s13); + the half kernel's 16-row tiles (kRampHalfRows16 524288: out_b) and q_a's
  // norm triggering its dependents after its wait (kRampNormTrigger 1048576); the default (since session 14 those and
  // the half kernel's slot filled by bulk copies, kRampRowsBulk 4194304).
  constexpr int kS13 = 128 | 64 | 512 | 256 | 1024 | 2048 | 4096;  // kRampExplicit | session 13's kRampDefault
  const Side sides_of[] = {{"s13", kS13}, {"s13+rows16+trig", kS13 | 524288 | 1048576}, {"default", 0}};
  constexpr int kSides = static_cast<int>(sizeof(sides_of) / sizeof(sides_of[0]));
  for (int i = 0; i < argc; ++i) {
    auto mf = open_model(argv[i], "ramp-steps");
    if (!mf) return;
    const auto plan = modelspec::layer_plan(mf->cfg);
    StepSide sides[kSides];
    for (int k = 0; k < kSides; ++k) {
      backend::cuda::CudaBackendOptions co = runtime::engine_cuda_options();
      co.l2_prefetch_mode = sides_of[k].mode;
      if (!load_side(sides[k], *mf, plan, co, 512, "ramp-steps", model::kBranchHcSplit)) return;
    }
    const std::pair<int, int64_t> cases[] = {{1, 2048}, {2, 1024}, {4, 1024}};
    for (const auto& [sessions, ctx] : cases) {
      for (int round = 0; round < (sessions == 1 ? 5 : sessions == 2 ? 2 : 1); ++round)  // (half kernel: one vector)
        for (int k = 0; k < kSides; ++k) {
          const double t = decode_step_seconds(*sides[k].fw, *sides[k].be, sessions, ctx);
          std::printf("BENCH ramp-steps %-17s layers %zu batch %d ctx %lld round %d: %.4f ms/step, %.1f tok/s\n",
                      sides_of[k].name, plan.size(), sessions, static_cast<long long>(ctx), round + 1, t * 1e3,
                      t > 0 ? sessions / t : 0.0);
          if (t < 0) std::printf("BENCH step: sync: %s\n", sides[k].be->sync().to_string().c_str());
          std::fflush(stdout);
        }
    }
  }
}

// `cuda_bench --hc-fuse-steps M...`: decode steps (graphs and branches on) with the HC pre in two launches
// (CudaBackendOptions::hc_fuse = 0) and in one (2), batch 1 (ctx 2K) and 8 (ctx 512), the two interleaved
// twice. Each side its own backend and weights (bench_dense_steps' layout).
void bench_hc_fuse_steps(int argc, char** argv) {
  const char* const names[2] = {"two launches", "one launch"};
  for (int i = 0; i < argc; ++i) {
    auto mf = open_model(argv[i], "hc-fuse-steps");
    if (!mf) return;
    const auto plan = modelspec::layer_plan(mf->cfg);
    StepSide sides[2];
    for (int k = 0; k < 2; ++k) {
      backend::cuda::CudaBackendOptions co;
      co.hc_fuse = k == 0 ? 0 : 2;
      if (!load_side(sides[k], *mf, plan, co, 512, "hc-fuse-steps")) return;
    }
    interleaved_decode_steps("hc-fuse-steps", names, sides, 12, plan.size(), 8, 512);
  }
}

// `cuda_bench --hcpre-steps A B M...` (the file header says what): each side its own backend and weights.
void bench_hcpre_steps(int argc, char** argv) {
  if (argc < 3) {
    std::printf("BENCH hcpre-steps: usage --hcpre-steps A B MODEL...\n");
    return;
  }
  const int forms[2] = {std::atoi(argv[0]), std::atoi(argv[1])};
  for (int i = 2; i < argc; ++i) {
    auto mf = open_model(argv[i], "hcpre-steps");
    if (!mf) return;
    const auto plan = modelspec::layer_plan(mf->cfg);
    StepSide sides[2];
    for (int k = 0; k < 2; ++k) {
      backend::cuda::CudaBackendOptions co = runtime::engine_cuda_options();
      co.hc_fuse = 10 * forms[k];
      // The engine's branches (runtime/engine.cpp adds kBranchHcSplit on CUDA: the HC pre's split on the side lane).
      if (!load_side(sides[k], *mf, plan, co, 2048, "hcpre-steps", model::kBranchHcSplit)) return;
    }
    double sum[2] = {0, 0};
    constexpr int kRounds = 6;
    for (int round = 1; round <= kRounds; ++round)
      for (int k = 0; k < 2; ++k) {
        const double t = prefill_chunk_seconds(*sides[k].fw, *sides[k].be);
        sum[k] += t;
        std::printf("BENCH hcpre-steps form %d layers %zu round %d: prefill chunk 2K->4K %.3f ms (%.0f tok/s)\n", forms[k],
                    plan.size(), round, t * 1e3, 2048 / t);
      }
    std::printf("BENCH hcpre-steps mean: form %d %.3f ms, form %d %.3f ms a chunk (%zu layers): %+.3f ms\n", forms[0],
                sum[0] / kRounds * 1e3, forms[1], sum[1] / kRounds * 1e3, plan.size(), (sum[1] - sum[0]) / kRounds * 1e3);
  }
}

// `cuda_bench --small7-steps [rope|hcb|hcbN|both] M...`: decode steps of each model file (graphs and branches on,
// f16_mma on as the engine runs) with the folds off and on — rope: CudaBackendOptions::attn_out_rope; hcb / hcbN:
// hc_post_fold = 2 / N (hc_boundary.cu); both (the default: rope + hcb) — interleaved: batch 1 at 2K and 8 sessions at 512. "BENCH small7-steps" lines.
void bench_small7_steps(int argc, char** argv) {
  const char* const names[2] = {"folds off", "folds on"};
  bool rope = true;
  int fold = 2;  // hc_post_fold of the "on" side (hcbN: N)
  const char* v = argc > 0 ? argv[0] : "";
  if (!std::strcmp(v, "rope") || !std::strncmp(v, "hcb", 3) || !std::strcmp(v, "both")) {
    rope = std::strncmp(v, "hcb", 3) != 0;
    fold = !std::strcmp(v, "rope") ? 0 : v[0] == 'h' && v[3] ? std::atoi(v + 3) : 2;
    std::printf("BENCH small7-steps: folds on = attn_out_rope %d, hc_post_fold %d\n", rope ? 1 : 0, fold);
    --argc;
    ++argv;
  }
  for (int i = 0; i < argc; ++i) {
    auto mf = open_model(argv[i], "small7-steps");
    if (!mf) return;
    const auto plan = modelspec::layer_plan(mf->cfg);
    StepSide sides[2];
    for (int k = 0; k < 2; ++k) {
      backend::cuda::CudaBackendOptions co;
      co.f16_mma = true;
      co.attn_out_rope = k == 1 && rope ? 1 : 0;
      co.hc_post_fold = k == 1 ? fold : 0;
      if (!load_side(sides[k], *mf, plan, co, 512, "small7-steps")) return;
    }
    interleaved_decode_steps("small7-steps", names, sides, 12, plan.size(), 8, 512);
  }
}

// `cuda_bench --hcb-steps A B M...`: decode steps of each model file as the engine runs them (graphs, branches with
// kBranchHcSplit, runtime::engine_cuda_options) with CudaBackendOptions::hc_post_fold A and B (the boundary kernel's
// forms: 4 = session 11's, 6 … 9 = session 12's), batch 1 at 2K, interleaved eight times. "BENCH hcb-steps" lines.
void bench_hcb_steps(int argc, char** argv) {
  if (argc < 3) {
    std::printf("BENCH hcb-steps: usage --hcb-steps A B model.gguf...\n");
    return;
  }
  const int vals[2] = {std::atoi(argv[0]), std::atoi(argv[1])};
  for (int i = 2; i < argc; ++i) {
    auto mf = open_model(argv[i], "hcb-steps");
    if (!mf) return;
    const auto plan = modelspec::layer_plan(mf->cfg);
    StepSide sides[2];
    for (int k = 0; k < 2; ++k) {
      backend::cuda::CudaBackendOptions co = runtime::engine_cuda_options();
      co.hc_post_fold = vals[k];
      if (!load_side(sides[k], *mf, plan, co, 512, "hcb-steps", model::kBranchHcSplit)) return;
    }
    for (int round = 0; round < 8; ++round)
      for (int k = 0; k < 2; ++k) {
        const double t = decode_step_seconds(*sides[k].fw, *sides[k].be, 1, 2048);
        std::printf("BENCH hcb-steps hc_post_fold %d layers %zu batch 1 ctx 2048 round %d: %.4f ms/step, %.1f tok/s\n",
                    vals[k], plan.size(), round + 1, t * 1e3, t > 0 ? 1 / t : 0.0);
        if (t < 0) std::printf("BENCH step: sync: %s\n", sides[k].be->sync().to_string().c_str());
        std::fflush(stdout);
      }
  }
}

// `cuda_bench --hcsplit-steps M...`: decode steps of each model file (graphs, branches, f16_mma on; the backend's
// defaults: hc_post_fold 4 = the boundary kernel) with each HC pre's Sinkhorn split in the op (off) and on the side
// lane beside the sublayer (ForwardOptions::branches + kBranchHcSplit: the boundary kernel ends at xn) — interleaved:
// batch 1 at 2K and 8 sessions at 512 (session 8's batch-8 fault case). "BENCH hcsplit-steps" lines.
void bench_hcsplit_steps(int argc, char** argv) {
  const char* const names[2] = {"split in op", "split side"};
  for (int i = 0; i < argc; ++i) {
    auto mf = open_model(argv[i], "hcsplit-steps");
    if (!mf) return;
    const auto plan = modelspec::layer_plan(mf->cfg);
    StepSide sides[2];
    for (int k = 0; k < 2; ++k) {
      backend::cuda::CudaBackendOptions co;
      co.f16_mma = true;
      if (!load_side(sides[k], *mf, plan, co, 512, "hcsplit-steps", k == 1 ? model::kBranchHcSplit : 0)) return;
    }
    interleaved_decode_steps("hcsplit-steps", names, sides, 12, plan.size(), 8, 512);
  }
}

// `cuda_bench --moe-steps A B [C …] M...`: decode steps of one session at 2K (graphs and branches on, f16_mma, the
// indexer select 11 and the HC split on the side lane as the engine sets them) with CudaBackendOptions::
// expert_one_token A, B, … (the leading integer arguments) — the routed experts of a one-token step — interleaved
// five times (drift shows): "BENCH moe-steps" lines. Per-call wins of these kernels have not always shown in whole
// steps (the experts run beside the shared expert's branch).
void bench_moe_steps(int argc, char** argv) {
  std::vector<int> vals;
  int first_file = 0;
  for (; first_file < argc; ++first_file) {
    char* end = nullptr;
    const long v = std::strtol(argv[first_file], &end, 10);
    if (end == argv[first_file] || *end != '\0') break;
    vals.push_back(static_cast<int>(v));
  }
  if (vals.size() < 2 || first_file == argc) {
    std::printf("BENCH moe-steps: usage --moe-steps A B [C ...] model.gguf...\n");
    return;
  }
  for (int i = first_file; i < argc; ++i) {
    auto mf = open_model(argv[i], "moe-steps");
    if (!mf) return;
    const auto plan = modelspec::layer_plan(mf->cfg);
    std::vector<StepSide> sides(vals.size());
    for (size_t k = 0; k < vals.size(); ++k) {
      backend::cuda::CudaBackendOptions co = runtime::engine_cuda_options();
      co.expert_one_token = vals[k];
      if (!load_side(sides[k], *mf, plan, co, 512, "moe-steps", model::kBranchHcSplit)) return;
    }
    for (int round = 0; round < 5; ++round)
      for (size_t k = 0; k < vals.size(); ++k) {
        const double t = decode_step_seconds(*sides[k].fw, *sides[k].be, 1, 2048);
        std::printf("BENCH moe-steps expert_one_token %3d layers %zu batch 1 ctx 2048 round %d: %.4f ms/step, %.1f tok/s\n",
                    vals[k], plan.size(), round + 1, t * 1e3, t > 0 ? 1 / t : 0.0);
        if (t < 0) std::printf("BENCH step: sync: %s\n", sides[k].be->sync().to_string().c_str());
        std::fflush(stdout);
      }
  }
}

// `cuda_bench --engine-steps [ROUNDS] M...`: whole steps of each model file on one backend as the engine runs them
// (runtime::engine_cuda_options, branches with kBranchHcSplit): per round, decode steps of one session at 2K, then a
// 2,048-token prefill chunk at 2K → 4K (median of 3). For old-binary vs new-binary comparisons of a change that has
// no option (session 14's exact_math.h: CPU and CUDA change together). "BENCH engine-steps" lines.
void bench_engine_steps(int argc, char** argv) {
  int rounds = 3;
  if (argc > 0 && std::isdigit(static_cast<unsigned char>(argv[0][0]))) {
    rounds = std::atoi(argv[0]);
    --argc;
    ++argv;
  }
  for (int i = 0; i < argc; ++i) {
    auto mf = open_model(argv[i], "engine-steps");
    if (!mf) return;
    const auto plan = modelspec::layer_plan(mf->cfg);
    StepSide s;
    if (!load_side(s, *mf, plan, runtime::engine_cuda_options(), 2048, "engine-steps", model::kBranchHcSplit)) return;
    for (int round = 1; round <= rounds; ++round) {
      const double t = decode_step_seconds(*s.fw, *s.be, 1, 2048);
      std::printf("BENCH engine-steps layers %zu round %d decode batch 1 ctx 2048: %.4f ms/step\n", plan.size(), round,
                  t * 1e3);
      std::fflush(stdout);
      const double pre = prefill_chunk_seconds(*s.fw, *s.be);
      std::printf("BENCH engine-steps layers %zu round %d prefill chunk 2K->4K: %.3f ms\n", plan.size(), round, pre * 1e3);
      std::fflush(stdout);
    }
  }
}

// `cuda_bench --small5-steps M...`: whole steps of a model file with session 8's small kernels
// (CudaBackendOptions::small_v5) off and on, and on with every HC pre's split on the side lane
// (ForwardOptions::branches kBranchHcSplit): one 2,048-token prefill chunk at 2K → 4K (median of 3, each on a
// fresh state after its first chunk), then decode steps of one session at 2K and a batch of 8 at 512
// (decode_step_seconds). "BENCH small5-steps" lines.
void bench_small5_steps(int argc, char** argv) {
  const uint32_t all = model::kBranchSharedExpert | model::kBranchAttention;
  struct Variant {
    const char* name;
    int v5;          // CudaBackendOptions::small_v5
    uint32_t parts;  // ForwardOptions::branches
  };
  const Variant variants[] = {{"small_v5 off", 0, all}, {"small_v5", 1, all}, {"small_v5 + HC split side lane", 1, all | model::kBranchHcSplit}};
  for (int i = 0; i < argc; ++i) {
    auto mf = open_model(argv[i], "small5-steps");
    if (!mf) return;
    auto& file = mf->file;
    auto& cfg = mf->cfg;
    const auto plan = modelspec::layer_plan(cfg);
    std::unique_ptr<backend::Backend> be;
    std::unique_ptr<model::ModelWeights> w;
    int loaded = -1;
    for (const Variant& v : variants) {
      if (v.v5 != loaded) {
        w.reset();
        be.reset();
        backend::cuda::CudaBackendOptions co;
        co.small_v5 = v.v5;
        auto made = backend::cuda::make_cuda_backend(co);
        if (!made.ok()) return;
        be = std::move(made).value();
        auto bound = model::bind_weights(*file, cfg, plan, *be);
        if (!bound.ok() || !be->sync().ok()) {
          std::printf("BENCH small5-steps: weights: %s\n", bound.ok() ? "sync failed" : bound.status().to_string().c_str());
          return;
        }
        w = std::make_unique<model::ModelWeights>(std::move(bound).value());
        loaded = v.v5;
      }
      model::ForwardOptions fo;
      fo.max_chunk = 2048;
      fo.graphs = true;
      fo.branches = v.parts;
      auto fw = model::Forward::create(*be, cfg, *w, fo);
      if (!fw.ok()) return;
      const double pre = prefill_chunk_seconds(**fw, *be);
      if (pre < 0) return;
      std::printf("BENCH small5-steps %-32s layers %zu prefill chunk 2K->4K: %.2f ms (%.0f tok/s)\n", v.name, plan.size(),
                  pre * 1e3, 2048 / pre);
      std::fflush(stdout);
      for (int sessions : {1, 8}) {
        const int64_t ctx = sessions == 1 ? 2048 : 512;
        const double t = decode_step_seconds(**fw, *be, sessions, ctx);
        std::printf("BENCH small5-steps %-32s layers %zu batch %d ctx %lld: %.4f ms/step, %.1f tok/s\n", v.name, plan.size(),
                    sessions, static_cast<long long>(ctx), t * 1e3, t > 0 ? sessions / t : 0.0);
        std::fflush(stdout);
      }
    }
  }
}

// `cuda_bench --f16mma-steps M...`: whole steps of model files with the F16 matmuls in the segment order
// (f16_mma off) and in the F16 MMA order: plain launches with split rows combined by the counter (session 8),
// programmatic dependents with clusters, plain launches with clusters (the defaults with f16_mma): decode
// steps of one session at 2K (round 1 as each side is loaded, round 2 after all), then a 2,048-token
// prefill chunk at 2K → 4K.
// Every side has its own backend and weights, all held at once, run in turn twice (drift shows), graphs and
// branches on. "BENCH f16mma-steps" lines.
void bench_f16mma_steps(int argc, char** argv) {
  struct Side : StepSide {
    const char* name;
    bool mma, pdl, cluster;
    Side(const char* n, bool m, bool p, bool c) : name(n), mma(m), pdl(p), cluster(c) {}
  } sides[4] = {{"segment order", false, false, false},
                {"mma plain, counter", true, false, false},
                {"mma pdl, clusters", true, true, true},
                {"mma plain, clusters", true, false, true}};  // the defaults
  for (int i = 0; i < argc; ++i) {
    auto mf = open_model(argv[i], "f16mma-steps");
    if (!mf) return;
    const auto plan = modelspec::layer_plan(mf->cfg);
    // Round 1 as each side is loaded (a time-limited run keeps what it measured), round 2 after all.
    auto decode = [&](Side& s, int round) {
      const double t = decode_step_seconds(*s.fw, *s.be, 1, 2048);
      std::printf("BENCH f16mma-steps %-24s layers %zu round %d decode batch 1 ctx 2048: %.4f ms/step, %.1f tok/s\n",
                  s.name, plan.size(), round, t * 1e3, t > 0 ? 1 / t : 0.0);
      std::fflush(stdout);
    };
    for (Side& s : sides) {
      backend::cuda::CudaBackendOptions co;
      co.f16_mma = s.mma;
      co.f16_mma_pdl = s.pdl;
      co.f16_mma_cluster = s.cluster;
      if (!load_side(s, *mf, plan, co, 2048, "f16mma-steps")) return;
      decode(s, 1);
    }
    for (Side& s : sides) decode(s, 2);
    for (Side& s : sides) {
      const double pre = prefill_chunk_seconds(*s.fw, *s.be);
      std::printf("BENCH f16mma-steps %-24s layers %zu prefill chunk 2K->4K: %.2f ms (%.0f tok/s)\n", s.name, plan.size(),
                  pre * 1e3, pre > 0 ? 2048 / pre : 0.0);
      std::fflush(stdout);
    }
  }
}

// `cuda_bench --f16dec-steps M...`: whole decode steps of model files with the decode F16 matmuls on
// CudaBackendOptions::f16_mma_decode_kernel 0 (the register-direct kernel) and 7, 8, 9 (the streaming ring kernel
// with tensor copies: tiles by a counter, static, by a counter at 2 blocks per multiprocessor); the other options
// as the engine runs them (runtime::engine_cuda_options). One session at 2K, round 1 as each side is loaded, round 2 after
// all (drift shows). "BENCH f16dec-steps" lines.
void bench_f16dec_steps(int argc, char** argv) {
  struct Side : StepSide {
    int kernel;
    explicit Side(int k) : kernel(k) {}
  } sides[4] = {Side(0), Side(7), Side(8), Side(9)};
  for (int i = 0; i < argc; ++i) {
    auto mf = open_model(argv[i], "f16dec-steps");
    if (!mf) return;
    const auto plan = modelspec::layer_plan(mf->cfg);
    auto decode = [&](Side& s, int round) {
      const double t = decode_step_seconds(*s.fw, *s.be, 1, 2048);
      std::printf("BENCH f16dec-steps kernel %d layers %zu round %d decode batch 1 ctx 2048: %.4f ms/step, %.1f tok/s\n",
                  s.kernel, plan.size(), round, t * 1e3, t > 0 ? 1 / t : 0.0);
      std::fflush(stdout);
    };
    for (Side& s : sides) {
      backend::cuda::CudaBackendOptions co = runtime::engine_cuda_options();
      co.f16_mma_decode_kernel = s.kernel;
      if (!load_side(s, *mf, plan, co, 2048, "f16dec-steps")) return;
      decode(s, 1);
    }
    for (Side& s : sides) decode(s, 2);
    for (Side& s : sides) decode(s, 3);
  }
}

// Options of a whole decode step as the engine sets them (runtime::engine_cuda_options; load_side's extra_branches
// adds each HC pre's split on the side lane, as the engine's Forward does) with `indexer_select` in its place.
backend::cuda::CudaBackendOptions engine_like_options(int indexer_select) {
  backend::cuda::CudaBackendOptions co = runtime::engine_cuda_options();
  co.indexer_select = indexer_select;
  return co;
}

// `cuda_bench --ctx-steps [S...] [CTX...] M...` (issue 5: 32K decode within 10 % of 2K): decode steps of one session
// at each context CTX (numbers ≥ 1,024; default 32K, 2K, 16K) with the engine's options and
// CudaBackendOptions::indexer_select S (numbers below 1,024; default 18, the engine's), the sides interleaved twice
// per context (drift shows): "BENCH ctx-steps" lines. At 32K a CSA layer's indexer scores 8,192 rows (2K: 512) and
// an HCA layer attends 256 compressed rows (2K: 16).
void bench_ctx_steps(int argc, char** argv) {
  std::vector<int> sels;
  std::vector<int64_t> ctxs;
  int a0 = 0;
  for (; a0 < argc && std::strspn(argv[a0], "0123456789") == std::strlen(argv[a0]); ++a0) {
    const int64_t v = std::atoll(argv[a0]);
    if (v >= 1024) {
      ctxs.push_back(v);
    } else {
      sels.push_back(static_cast<int>(v));
    }
  }
  if (sels.empty()) sels.push_back(18);
  if (ctxs.empty()) ctxs = {32768, 2048, 16384};  // 32K first: the case that matters most if a run is cut
  for (int i = a0; i < argc; ++i) {
    auto mf = open_model(argv[i], "ctx-steps");
    if (!mf) return;
    const auto plan = modelspec::layer_plan(mf->cfg);
    std::vector<StepSide> sides(sels.size());
    for (size_t k = 0; k < sels.size(); ++k)
      if (!load_side(sides[k], *mf, plan, engine_like_options(sels[k]), 2048, "ctx-steps", model::kBranchHcSplit)) return;
    for (int64_t ctx : ctxs)
      for (int round = 0; round < 2; ++round)
        for (size_t k = 0; k < sels.size(); ++k) {
          const double t = decode_step_seconds(*sides[k].fw, *sides[k].be, 1, ctx);
          std::printf("BENCH ctx-steps indexer_select %2d layers %zu ctx %5lld round %d: %.4f ms/step, %.1f tok/s\n",
                      sels[k], plan.size(), static_cast<long long>(ctx), round + 1, t * 1e3, t > 0 ? 1 / t : 0.0);
          std::fflush(stdout);
        }
  }
}

// `cuda_bench --ctx-profile S M CTX...`: for each CTX, one session prefilled to CTX, 8 decode steps (graphs recorded),
// then one step (a graph replay) between cudaProfilerStart / Stop, with the engine's options and indexer_select S:
// `ncu --profile-from-start off` times exactly that step's kernels at each context.
void bench_ctx_profile(int argc, char** argv) {
  if (argc < 3) {
    std::printf("BENCH ctx-profile: usage --ctx-profile S model.gguf CTX...\n");
    return;
  }
  auto mf = open_model(argv[1], "ctx-profile");
  if (!mf) return;
  const auto plan = modelspec::layer_plan(mf->cfg);
  StepSide side;
  if (!load_side(side, *mf, plan, engine_like_options(std::atoi(argv[0])), 2048, "ctx-profile", model::kBranchHcSplit))
    return;
  for (int i = 2; i < argc; ++i) {
    const int64_t ctx = std::atoll(argv[i]);
    const double t = decode_step_seconds(*side.fw, *side.be, 1, ctx, true);
    std::printf("BENCH ctx-profile layers %zu ctx %lld: %s\n", plan.size(), static_cast<long long>(ctx), t < 0 ? "failed" : "profiled");
    std::fflush(stdout);
  }
}

// `cuda_bench --dattn-steps A B [C …] [--rounds N] M...`: decode steps of one session at 2K and at 32K as the engine runs
// them (graphs, branches, runtime::engine_cuda_options, each HC pre's split on the side lane as the engine's) with
// CudaBackendOptions::attention_mma_kernels A, B, … (10: one decode query's split kernel then the sliced merge; 31:
// the merge a programmatic dependent of the split kernel, attention_mma.cu; 37: the split kernel one of the q norm,
// attention_pdl.h), the
// sides interleaved N times (3), each round every side in turn. "BENCH dattn-steps" lines.
void bench_dattn_steps(int argc, char** argv) {
  std::vector<int> vals;  // the leading integer arguments
  int first = 0;
  while (first < argc && argv[first][0] >= '0' && argv[first][0] <= '9') vals.push_back(std::atoi(argv[first++]));
  int rounds = 3;  // `--rounds N` after the values: N rounds instead
  if (first + 1 < argc && !std::strcmp(argv[first], "--rounds")) {
    rounds = std::max(1, std::atoi(argv[first + 1]));
    first += 2;
  }
  if (vals.size() < 2 || first >= argc) {
    std::printf("BENCH dattn-steps: usage --dattn-steps A B [C ...] [--rounds N] model.gguf...\n");
    return;
  }
  for (int i = first; i < argc; ++i) {
    auto mf = open_model(argv[i], "dattn-steps");
    if (!mf) return;
    const auto plan = modelspec::layer_plan(mf->cfg);
    std::vector<StepSide> sides(vals.size());
    for (size_t k = 0; k < vals.size(); ++k) {
      backend::cuda::CudaBackendOptions co = runtime::engine_cuda_options();
      co.attention_mma_kernels = vals[k];
      if (!load_side(sides[k], *mf, plan, co, 512, "dattn-steps", model::kBranchHcSplit)) return;
    }
    for (const int64_t ctx : {int64_t{2048}, int64_t{32768}})
      for (int round = 0; round < rounds; ++round)
        for (size_t k = 0; k < vals.size(); ++k) {
          const double t = decode_step_seconds(*sides[k].fw, *sides[k].be, 1, ctx);
          std::printf("BENCH dattn-steps attention_mma_kernels %-3d layers %zu batch 1 ctx %lld round %d: %.3f ms/step, "
                      "%.1f tok/s\n", vals[k], plan.size(), static_cast<long long>(ctx), round + 1, t * 1e3,
                      t > 0 ? 1 / t : 0.0);
          if (t < 0) std::printf("BENCH step: sync: %s\n", sides[k].be->sync().to_string().c_str());
          std::fflush(stdout);
        }
  }
}

// `cuda_bench --pexp-steps A B [C …] [--rounds N] M...`: one 2,048-token prefill chunk at 2K → 4K (prefill_chunk_seconds:
// the median of 3) with the routed experts' grouped GEMM on CudaBackendOptions::gemm_experts A, B, …, the other options
// as the engine runs them (runtime::engine_cuda_options, the HC split on the side lane); every side held at once and
// run in turn `rounds` times (default 2: drift shows). "BENCH pexp-steps" lines.
void bench_pexp_steps(int argc, char** argv) {
  std::vector<int> vals;
  int i = 0, rounds = 2;
  for (; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) {
      rounds = std::max(1, std::atoi(argv[++i]));
      continue;
    }
    char* end = nullptr;
    const long v = std::strtol(argv[i], &end, 10);
    if (end == argv[i] || *end != 0) break;  // the first model file
    vals.push_back(static_cast<int>(v));
  }
  if (vals.empty() || i >= argc) {
    std::printf("BENCH pexp-steps: usage --pexp-steps A B [C ...] [--rounds N] model.gguf...\n");
    return;
  }
  for (; i < argc; ++i) {
    auto mf = open_model(argv[i], "pexp-steps");
    if (!mf) return;
    const auto plan = modelspec::layer_plan(mf->cfg);
    std::vector<StepSide> sides(vals.size());
    for (size_t k = 0; k < vals.size(); ++k) {
      backend::cuda::CudaBackendOptions co = runtime::engine_cuda_options();
      co.gemm_experts = vals[k];
      if (!load_side(sides[k], *mf, plan, co, 2048, "pexp-steps", model::kBranchHcSplit)) return;
    }
    for (int r = 1; r <= rounds; ++r)
      for (size_t k = 0; k < vals.size(); ++k) {
        const double pre = prefill_chunk_seconds(*sides[k].fw, *sides[k].be);
        std::printf("BENCH pexp-steps gemm_experts %-3d layers %zu round %d prefill chunk 2K->4K: %.3f ms (%.0f tok/s)\n",
                    vals[k], plan.size(), r, pre * 1e3, pre > 0 ? 2048 / pre : 0.0);
        std::fflush(stdout);
      }
  }
}

// `cuda_bench --pattn-steps A B [--rounds N] M...`: one 2,048-token prefill chunk at 2K → 4K (prefill_chunk_seconds: the
// median of 3) with attention_mma_kernels A and B, the other options as the engine runs them, the sides alternated N
// rounds (default 3; drift shows), "BENCH pattn-steps" lines — the prefill chunk attention's kernels on whole chunks.
void bench_pattn_steps(int argc, char** argv) {
  if (argc < 3) {
    std::printf("BENCH pattn-steps: usage --pattn-steps A B [--rounds N] model.gguf...\n");
    return;
  }
  const int vals[2] = {std::atoi(argv[0]), std::atoi(argv[1])};
  int rounds = 3, first = 2;
  if (argc > 4 && !std::strcmp(argv[2], "--rounds")) {
    rounds = std::max(1, std::atoi(argv[3]));
    first = 4;
  }
  for (int i = first; i < argc; ++i) {
    auto mf = open_model(argv[i], "pattn-steps");
    if (!mf) return;
    const auto plan = modelspec::layer_plan(mf->cfg);
    StepSide sides[2];
    for (int k = 0; k < 2; ++k) {
      backend::cuda::CudaBackendOptions co = runtime::engine_cuda_options();
      co.attention_mma_kernels = vals[k];
      if (!load_side(sides[k], *mf, plan, co, 2048, "pattn-steps", model::kBranchHcSplit)) return;
    }
    for (int round = 0; round < rounds; ++round)
      for (int k = 0; k < 2; ++k) {
        const double t = prefill_chunk_seconds(*sides[k].fw, *sides[k].be);
        std::printf("BENCH pattn-steps attention_mma_kernels %-3d layers %zu round %d prefill chunk 2K->4K: %.3f ms (%.0f tok/s)\n",
                    vals[k], plan.size(), round + 1, t * 1e3, t > 0 ? 2048 / t : 0.0);
        std::fflush(stdout);
      }
  }
}
