// cuda_bench_moe1.cpp — `cuda_bench --moe-swap A B [C …] [--rounds R] [--alternate] M` (expert_one_token) and
// `cuda_bench --hcb-swap …` (hc_post_fold, the sublayer boundary kernel; session 14 hcb) and `--head-swap …` (hc_fuse,
// the output head's HC; session 15 head): decode steps of one session
// at 2K as the engine runs them (runtime::engine_cuda_options, graphs, branches with the HC split on the side lane)
// with the option's values A, B, … on ONE backend and one copy of the weights: one model::Forward per value, the
// backend's value set before each side's steps (a Forward's recorded step graphs hold the kernels of the value they
// were recorded with; anything re-recorded or run eagerly sees its side's value too). The sides then differ only in
// that option's launches, not in where their weights sit — session 13's --moe-steps / --hcb-steps gave each side its
// own backend and model copy, and two copies of one configuration differed by up to 4.6 µs a 4-layer step
// (docs/PERF.md session 13 moe1). Every round runs each side once (prompt, 8 warm-up steps, the median of 5 × 16
// steps, as cuda_bench_branches.cpp's decode_step_seconds; --alternate: odd rounds in the reverse order, so no side
// always runs right after another; --greedy: the steps pick their token on the device, as ds4-bench's) and prints "BENCH moe-swap" / "BENCH hcb-swap" lines, then the per-round
// difference of each side from the first; the sides' logits after the same tokens must be the same bits (the
// kernels' contract, here through whole recorded steps): "PARITY …-swap" lines. A value repeated (13 14 13) gives
// the floor: the same kernels on two Forwards.
// Deliberately not here: per-op timings (cuda_bench --experts lean, --hcb-forms), the op tests.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_impl.h"
#include "bench_median.h"
#include "gguf/gguf.h"
#include "model/forward.h"
#include "model/weights.h"
#include "modelspec/config.h"
#include "modelspec/layer_plan.h"
#include "runtime/engine_cuda_options.h"

using namespace ds4;

namespace {

// Seconds per decode step of one session after a `prompt`-token prefill (fw's chunks), the last step's logits in
// `logits`; < 0 on failure. The tokens are a fixed sequence, so every side sees the same ones.
// greedy: the timed steps pick their token on the device (Segment::token_out, no logits downloaded: ds4-bench's
// decode), then one more step downloads the logits for the comparison.
double swap_step_seconds(model::Forward& fw, backend::Backend& be, int64_t prompt, std::vector<float>& logits,
                         const char* tag, bool greedy = false) {
  const int64_t V = fw.config().n_vocab, C = fw.max_chunk();
  logits.assign(static_cast<size_t>(V), 0.0f);
  std::vector<int32_t> toks(static_cast<size_t>(prompt));
  for (size_t k = 0; k < toks.size(); ++k) toks[k] = static_cast<int32_t>((k * 7919 + 13) % static_cast<size_t>(V));
  auto st = fw.new_state(prompt + 4096);
  if (!st.ok()) {
    std::printf("BENCH %s: new_state: %s\n", tag, st.status().to_string().c_str());
    return -1;
  }
  model::KvState kv = std::move(st).value();
  for (int64_t p = 0; p < prompt; p += C) {
    const int64_t n = std::min(C, prompt - p);
    if (const Status es = fw.eval(kv, std::span<const int32_t>(toks.data() + p, static_cast<size_t>(n)), p, logits.data(), false);
        !es.ok()) {
      std::printf("BENCH %s: prefill: %s\n", tag, es.to_string().c_str());
      return -1;
    }
  }
  int64_t pos = prompt, step_no = 0;
  int32_t next = 0, picked = -1;
  bool ok = true, timed = true;
  auto step = [&] {
    next = static_cast<int32_t>((step_no * 104729 + 7) % V);
    ++step_no;
    model::Segment seg{&kv, std::span<const int32_t>(&next, 1), pos++, logits.data(), false};
    if (greedy && timed) {
      seg.logits_out = nullptr;
      seg.token_out = &picked;
    }
    if (!ok) return;
    if (const Status es = fw.eval_batch(std::span<const model::Segment>(&seg, 1)); !es.ok()) {
      std::printf("BENCH %s: decode step %lld: %s\n", tag, static_cast<long long>(step_no), es.to_string().c_str());
      ok = false;
    }
  };
  for (int w = 0; w < 8; ++w) step();
  const double t = ds4::test::median_seconds(step, [&] { (void)be.sync(); }, 16);
  if (greedy) {
    timed = false;
    step();
  }
  return ok && be.sync().ok() ? t : -1;
}

// The swap bench for one option: `tag` names its lines ("moe-swap"), `name` the option, `set` sets it on the backend.
void option_swap(int argc, char** argv, const char* tag, const char* name,
                 void (*set)(backend::cuda::CudaBackend&, int)) {
  std::vector<int> vals;
  int rounds = 5, i = 0;
  bool alternate = false, greedy = false;
  for (; i < argc; ++i) {
    if (std::strcmp(argv[i], "--greedy") == 0) {
      greedy = true;
      continue;
    }
    if (std::strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
      continue;
    }
    if (std::strcmp(argv[i], "--alternate") == 0) {
      alternate = true;
      continue;
    }
    char* end = nullptr;
    const long v = std::strtol(argv[i], &end, 10);
    if (end == argv[i] || *end != '\0') break;
    vals.push_back(static_cast<int>(v));
  }
  if (vals.size() < 2 || i == argc) {
    std::printf("BENCH %s: usage --%s A B [C ...] [--rounds R] [--alternate] [--greedy] model.gguf...\n", tag, tag);
    return;
  }
  for (; i < argc; ++i) {
    auto file = gguf::File::open(argv[i]);
    auto cfg = file.ok() ? modelspec::config_from_gguf(**file) : Result<modelspec::ModelConfig>(file.status());
    if (!cfg.ok()) {
      std::printf("BENCH %s %s: %s\n", tag, argv[i], cfg.status().to_string().c_str());
      return;
    }
    const auto plan = modelspec::layer_plan(*cfg);
    // Every side's step graphs kept (each Forward records ~8 keys here: prefill chunks, decode steps with and without
    // emitted rows); the default 16 would evict one side's graphs while another side runs.
    backend::cuda::CudaBackendOptions co = runtime::engine_cuda_options();
    co.max_graphs = 64;
    auto made = backend::cuda::make_cuda_backend(co);
    if (!made.ok()) {
      std::printf("BENCH %s: backend: %s\n", tag, made.status().to_string().c_str());
      return;
    }
    std::unique_ptr<backend::Backend> be = std::move(made).value();
    auto* cbe = dynamic_cast<backend::cuda::CudaBackend*>(be.get());
    auto bound = model::bind_weights(**file, *cfg, plan, *be);
    if (cbe == nullptr || !bound.ok() || !be->sync().ok()) {
      std::printf("BENCH %s: weights: %s\n", tag, bound.ok() ? "sync failed" : bound.status().to_string().c_str());
      return;
    }
    const model::ModelWeights w = std::move(bound).value();
    // One Forward per value, kept for the whole run (step graphs go with their Forward).
    std::vector<std::unique_ptr<model::Forward>> fws;
    for (size_t k = 0; k < vals.size(); ++k) {
      model::ForwardOptions fo;
      fo.max_chunk = 512;
      fo.graphs = true;
      fo.branches |= model::kBranchHcSplit;
      auto fw = model::Forward::create(*be, *cfg, w, fo);
      if (!fw.ok()) {
        std::printf("BENCH %s: forward: %s\n", tag, fw.status().to_string().c_str());
        return;
      }
      fws.push_back(std::move(fw).value());
    }
    std::vector<std::vector<double>> ms(vals.size());
    int mismatches = 0;
    for (int round = 0; round < rounds; ++round) {
      std::vector<std::vector<float>> logits(vals.size());
      for (size_t j = 0; j < vals.size(); ++j) {
        const size_t k = alternate && round % 2 == 1 ? vals.size() - 1 - j : j;
        set(*cbe, vals[k]);
        const double t = swap_step_seconds(*fws[k], *be, 2048, logits[k], tag, greedy);
        ms[k].push_back(t * 1e3);
        std::printf("BENCH %s %s %4d layers %zu batch 1 ctx 2048 round %d: %.4f ms/step, %.1f tok/s\n", tag, name,
                    vals[k], plan.size(), round + 1, t * 1e3, t > 0 ? 1 / t : 0.0);
        std::fflush(stdout);
      }
      for (size_t k = 1; k < vals.size(); ++k) {
        const bool same = logits[0].size() == logits[k].size() &&
                          std::memcmp(logits[0].data(), logits[k].data(), logits[0].size() * sizeof(float)) == 0;
        mismatches += same ? 0 : 1;
        std::printf("PARITY %s %s %d vs %d round %d: logits bit for bit: %s\n", tag, name, vals[k], vals[0], round + 1,
                    same ? "ok" : "FAIL");
      }
    }
    // Per-round differences from the first side (µs a step), their mean, and the rounds where the side was faster.
    for (size_t k = 1; k < vals.size(); ++k) {
      double sum = 0;
      int faster = 0;
      std::string per;
      for (int r = 0; r < rounds; ++r) {
        const double d = (ms[k][static_cast<size_t>(r)] - ms[0][static_cast<size_t>(r)]) * 1e3;
        sum += d;
        faster += d < 0 ? 1 : 0;
        char buf[32];
        std::snprintf(buf, sizeof buf, " %+.1f", d);
        per += buf;
      }
      std::printf("BENCH %s %d - %d (us a step, by round):%s | mean %+.2f, faster in %d of %d\n", tag, vals[k], vals[0],
                  per.c_str(), sum / rounds, faster, rounds);
    }
    std::printf("PARITY %s: %d mismatches\n", tag, mismatches);
  }
}

}  // namespace

void bench_moe_swap(int argc, char** argv) {
  option_swap(argc, argv, "moe-swap", "expert_one_token",
              [](backend::cuda::CudaBackend& be, int v) { be.set_expert_one_token(v); });
}

void bench_hcb_swap(int argc, char** argv) {
  option_swap(argc, argv, "hcb-swap", "hc_post_fold",
              [](backend::cuda::CudaBackend& be, int v) { be.set_hc_post_fold(v); });
}

// `cuda_bench --head-swap A B … [--greedy] M`: the same for hc_fuse (session 15 head: its hundreds digit is the output
// head's launches — bit 1 its HC on the spread kernels, bit 4 the cluster argmax; e.g. 50 150 550 --greedy).
void bench_head_swap(int argc, char** argv) {
  option_swap(argc, argv, "head-swap", "hc_fuse", [](backend::cuda::CudaBackend& be, int v) { be.set_hc_fuse(v); });
}
