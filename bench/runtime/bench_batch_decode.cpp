// bench_batch_decode.cpp — aggregate greedy decode rate of N sessions on one engine: all N advanced by
// one Engine::step (one forward pass, each weight read once per step) vs the same N sessions stepped
// one by one (N forward passes per round). Counters: `tok/s` = tokens decoded by all sessions per
// wall-clock second; `tok/cpu_s` = per second of process CPU time (all threads), which stays
// meaningful when other work shares the cores.
//
// Usage: bench_batch_decode [--model FILE] [--backend cpu|cuda] [--threads T] [--numerics official|reference]
//                           [--prompt N] [--no-cuda-graphs] [--host-argmax] [benchmark flags]
//   FILE defaults to models/ds4-tiny-chat.gguf (the committed tiny model); the CPU backend by default.
// Each session is prefilled with a prompt of its own (--prompt, default 64 tokens); every round appends
// one greedy token to each session; after 192 rounds the sessions rewind to the prompt (outside the
// timed region), so the context stays between N and N + 192 tokens.
// Built with CUDA, each timed batched step is an NVTX range "decode_step" (for Nsight Compute's --nvtx filter).
// Deliberately not here: scheduling or HTTP (bench for the server lives with it).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "ds4/engine.h"
#include "ds4/sampler.h"

#if DS4_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace {

using namespace ds4;

struct Config {
  std::string model = DS4_DEFAULT_MODEL;
  int threads = 0;
  Numerics numerics = Numerics::official;
  int prompt = 64;  // prompt tokens per session
  BackendKind backend = BackendKind::cpu;
  bool cuda_graphs = true;  // EngineOptions::cuda_graphs (--no-cuda-graphs: every step host-launched)
  bool host_argmax = false;  // --host-argmax: logits downloaded and scanned on the host (the path before)
};

Config& config() {
  static Config c;  // set once by main() before any benchmark runs
  return c;
}

constexpr int kRounds = 192;

Engine& engine() {
  static std::unique_ptr<Engine> e = [] {
    EngineOptions o;
    o.model_path = config().model;
    o.n_threads = config().threads;
    o.numerics = config().numerics;
    o.backend = config().backend;
    o.cuda_graphs = config().cuda_graphs;
    auto r = Engine::open(o);
    if (!r.ok()) {
      std::fprintf(stderr, "bench_batch_decode: %s\n", r.status().to_string().c_str());
      std::exit(1);
    }
    return std::move(r).value();
  }();
  return *e;
}

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

void decode(benchmark::State& state, bool batched) {
  Engine& e = engine();
  const int n = static_cast<int>(state.range(0));
  if (n > e.max_step_tokens()) {
    state.SkipWithError("more sessions than max_step_tokens");
    return;
  }
  const int V = e.info().n_vocab;
  std::vector<std::unique_ptr<Session>> s;
  for (int i = 0; i < n; ++i) {
    s.push_back(e.new_session().value());
    std::vector<TokenId> prompt(static_cast<size_t>(config().prompt));
    uint32_t x = 977u * static_cast<uint32_t>(i + 1);
    for (TokenId& t : prompt) t = static_cast<TokenId>((x = x * 1664525u + 1013904223u) >> 8) % V;
    if (!s.back()->eval(prompt).ok()) {
      state.SkipWithError("prefill failed");
      return;
    }
  }
  // next: each session's greedy token, from the step itself (StepItem::next: the backend's argmax, 4
  // bytes back per session) or, with --host-argmax, from its downloaded logits; cur: what the step feeds.
  std::vector<TokenId> next(static_cast<size_t>(n)), cur(static_cast<size_t>(n));
  const bool host = config().host_argmax;
  auto from_logits = [&] {
    for (int i = 0; i < n; ++i) next[i] = ds4::argmax(s[i]->logits());
  };
  from_logits();
  std::vector<StepItem> items(static_cast<size_t>(n));
  int round = 0;
  double cpu = 0, cpu0 = process_cpu_seconds();
  for (auto _ : state) {
    if (round == kRounds) {
      state.PauseTiming();
      cpu += process_cpu_seconds() - cpu0;
      for (auto& p : s) (void)p->rewind(config().prompt);
      from_logits();
      round = 0;
      cpu0 = process_cpu_seconds();
      state.ResumeTiming();
    }
    for (int i = 0; i < n; ++i) {
      cur[i] = next[i];
      items[i] = {s[i].get(), std::span<const TokenId>(&cur[i], 1), host ? nullptr : &next[i]};
    }
    Status st = Status::Ok();
    if (batched) {
#if DS4_NVTX
      nvtxRangePushA("decode_step");  // ncu --nvtx --nvtx-include decode_step/: this step's kernels only
#endif
      st = e.step(items, {});
#if DS4_NVTX
      nvtxRangePop();
#endif
    } else {
      for (int i = 0; i < n && st.ok(); ++i) st = e.step(std::span<const StepItem>(&items[i], 1), {});
    }
    if (!st.ok()) {
      state.SkipWithError(st.to_string().c_str());
      return;
    }
    if (host) from_logits();
    ++round;
  }
  cpu += process_cpu_seconds() - cpu0;
  state.counters["sessions"] = n;
  state.counters["tok/cpu_s"] = static_cast<double>(state.iterations()) * n / std::max(cpu, 1e-9);
  state.counters["tok/s"] = benchmark::Counter(static_cast<double>(state.iterations()) * n, benchmark::Counter::kIsRate);
}

void BM_DecodeBatched(benchmark::State& state) { decode(state, true); }
void BM_DecodeStepped(benchmark::State& state) { decode(state, false); }

BENCHMARK(BM_DecodeBatched)->RangeMultiplier(2)->Range(1, 64)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DecodeStepped)->RangeMultiplier(2)->Range(1, 32)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  // Our flags first; the rest goes to Google Benchmark.
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* name) -> const char* {
      const std::string eq = std::string(name) + "=";
      if (a.rfind(eq, 0) == 0) return argv[i] + eq.size();
      if (a == name && i + 1 < argc) return argv[++i];
      return nullptr;
    };
    if (const char* v = value("--model")) {
      config().model = v;
    } else if (const char* v = value("--threads")) {
      config().threads = std::atoi(v);
    } else if (const char* v = value("--backend")) {
      if (std::strcmp(v, "cpu") == 0) config().backend = BackendKind::cpu;
      else if (std::strcmp(v, "cuda") == 0) config().backend = BackendKind::cuda;
      else {
        std::fprintf(stderr, "bench_batch_decode: --backend must be cpu or cuda\n");
        return 2;
      }
    } else if (const char* v = value("--prompt")) {
      config().prompt = std::max(1, std::atoi(v));
    } else if (const char* v = value("--numerics")) {
      if (std::strcmp(v, "official") == 0) config().numerics = Numerics::official;
      else if (std::strcmp(v, "reference") == 0) config().numerics = Numerics::reference;
      else {
        std::fprintf(stderr, "bench_batch_decode: --numerics must be official or reference\n");
        return 2;
      }
    } else if (a == "--no-cuda-graphs") {
      config().cuda_graphs = false;
    } else if (a == "--host-argmax") {
      config().host_argmax = true;
    } else {
      rest.push_back(argv[i]);
    }
  }
  int rc = static_cast<int>(rest.size());
  benchmark::Initialize(&rc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(rc, rest.data())) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
