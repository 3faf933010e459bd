// main.cpp — ds4-bench: walks one session through increasing context frontiers and prints, per
// frontier, the prefill rate of the new interval, the greedy decode rate at the frontier, and the
// memory held (CSV). Same flags and defaults as antirez's ds4-bench (DS4_SERVER.md §1.3), plus
// --numerics, --chunk, --plot and --memory (issue 7's seed experiment: memory while one session
// grows, 10K..250K tokens in 10K steps by default). Uses only the public engine API.
// Deliberately not here: the measurement loop (bench_loop.h), the frontier arithmetic (schedule.h).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "bench_loop.h"
#include "chat/chat.h"
#include "cli_common.h"
#include "csv.h"
#include "ds4/engine.h"
#include "plot.h"
#include "schedule.h"

namespace {

struct BenchFlags {
  ds4::cli::EngineFlags engine;
  std::string backend = "cpu";
  bool cuda = false;
  std::string prompt_file, chat_prompt_file;
  std::string system = "You are a helpful assistant.";
  ds4::bench::ScheduleOptions sched;
  std::string csv_path, plot_path, plot_script = DS4_PLOT_SCRIPT, plot_title;
  bool memory = false;
  bool quality = false;
  bool host_argmax = false;
  bool profile_host = false;
  bool overlap = false;  // off until the H200 run checked generate_greedy there (docs/PERF.md)
};

// --profile-host: where one decode token's wall time goes, per token (ms), after the frontier's CSV line.
void print_profile(const ds4::bench::FrontierRow& r, const char* path) {
  const auto& p = r.profile;
  if (r.gen_tokens <= 0) return;
  const double k = 1e3 / static_cast<double>(r.gen_tokens);
  const ds4::StepTimes& s = p.steps;
  const double device = s.device_steps > 0 ? s.device * 1e3 / static_cast<double>(s.device_steps) : -1;
  const double other = p.wall - s.prepare - s.launch - s.wait - p.argmax;
  std::fprintf(stderr, "ds4-bench: host profile at %lld tokens, %lld decode tokens (%s), ms per token:\n",
               static_cast<long long>(r.frontier), static_cast<long long>(r.gen_tokens),
               path);
  std::fprintf(stderr, "  wall          %8.4f   (%.1f tok/s)\n", p.wall * k, r.gen_tps);
  if (device >= 0)
    std::fprintf(stderr, "  device        %8.4f   (step ops, events)\n  wall - device %8.4f\n", device,
                 p.wall * k - device);
  std::fprintf(stderr, "  prepare       %8.4f   (checks, KV room, step inputs + upload)\n", s.prepare * k);
  std::fprintf(stderr, "  launch        %8.4f   (graph lookup + launch, or eager launches)\n", s.launch * k);
  std::fprintf(stderr, "  wait          %8.4f   (device finishing + result download)\n", s.wait * k);
  std::fprintf(stderr, "  host argmax   %8.4f\n", p.argmax * k);
  std::fprintf(stderr, "  other         %8.4f   (session, bench loop)\n", other * k);
  std::fprintf(stderr, "  steps         %8lld\n", static_cast<long long>(s.steps));
}

int fail(const std::string& msg, int code = 1) {
  std::fprintf(stderr, "ds4-bench: %s\n", msg.c_str());
  return code;
}

bool read_file(const std::string& path, std::string& out) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;  // a directory "opens" but reads nothing
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  out = ss.str();
  return static_cast<bool>(f) || f.eof();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ds4;
  CLI::App app{"ds4-bench — prefill and decode speed, and memory, at increasing context frontiers.\n"
               "One session is prefilled incrementally to each frontier; there its state is snapshotted in\n"
               "RAM, --gen-tokens greedy tokens are decoded (EOS excluded), and the snapshot is restored.\n"
               "CSV: frontier,prefill_tokens,prefill_tps,gen_tokens,gen_tps,kv_bytes,snapshot_bytes,\n"
               "rss_bytes,device_used_bytes,session_<category>...,process_<category>... (docs/BENCH.md).",
               "ds4-bench"};
  BenchFlags f;
  auto* pf = app.add_option("--prompt-file", f.prompt_file, "raw text, tokenized and sliced at the frontiers");
  auto* cf = app.add_option("--chat-prompt-file", f.chat_prompt_file,
                            "text rendered as one no-thinking chat user message (with --system)");
  pf->excludes(cf);
  cf->excludes(pf);
  auto* sys = app.add_option("--system", f.system, "system prompt for --chat-prompt-file (also -sys)")
                  ->capture_default_str();
  app.add_option("-m,--model", f.engine.model, "model GGUF file")->required();
  app.add_option("--backend", f.backend, "cpu | cuda")->capture_default_str();
  app.add_flag("--cpu", f.engine.cpu, "same as --backend cpu");
  app.add_flag("--cuda", f.cuda, "same as --backend cuda");
  app.add_option("-t,--threads", f.engine.threads, "CPU threads (0 = all cores)");
  app.add_flag("--warm-weights", f.engine.warm_weights, "touch every weight page at load");
  app.add_flag("--quality", f.quality, "accepted for ds4 compatibility (ds4cpp has one exact kernel path)");
  auto* o_start = app.add_option("--ctx-start", f.sched.ctx_start, "first frontier")->capture_default_str();
  auto* o_max = app.add_option("--ctx-max", f.sched.ctx_max, "last frontier")->capture_default_str();
  app.add_option("--ctx-alloc", f.sched.ctx_alloc, "session context (default ctx-max + gen-tokens + 1)");
  auto* o_incr = app.add_option("--step-incr", f.sched.step_incr, "linear frontier step")->capture_default_str();
  app.add_option("--step-mul", f.sched.step_mul, "geometric frontier step (> 1 replaces --step-incr)")
      ->capture_default_str();
  auto* o_gen = app.add_option("-n,--gen-tokens,--tokens", f.sched.gen_tokens, "greedy decode tokens per frontier")
                    ->capture_default_str();
  app.add_option("--csv", f.csv_path, "write the CSV here (default: stdout)");
  app.add_option("--numerics", f.engine.numerics, "official | reference")->capture_default_str();
  app.add_option("--chunk", f.engine.chunk, "prefill tokens per forward step (0 = engine default)");
  app.add_flag("--no-shared-clamp", f.engine.no_shared_clamp, "do not clamp the shared expert's SwiGLU");
  app.add_flag("--cuda-no-tensor-cores", f.engine.cuda_no_tensor_cores,
               "CUDA: decode kernels (matvec, one-query attention) for every batch size, to compare prefill paths");
  app.add_flag("--cuda-graphs,!--no-cuda-graphs", f.engine.cuda_graphs,
               "CUDA: replay decode steps (batched ones too) as CUDA graphs (same bits; default on)");
  app.add_flag("--cuda-branches,!--no-cuda-branches", f.engine.cuda_branches,
               "CUDA: independent parts of each step on a second stream (default on; same bits)");
  app.add_flag("--host-argmax", f.host_argmax,
               "greedy tokens from downloaded logits scanned on the host (the path before the device argmax)");
  app.add_flag("--overlap,!--no-overlap", f.overlap,
               "greedy decode with the device one step ahead of the host (Session::generate_greedy); "
               "--no-overlap: each token read back before the next step is launched")
      ->capture_default_str();
  app.add_flag("--profile-host", f.profile_host,
               "print per decode token the wall time, the device time of the step and the host pieces");
  app.add_flag("--cuda-f16-mma,!--no-cuda-f16-mma", f.engine.cuda_f16_mma,
               "CUDA: F16 matmuls on tensor cores in the F16 MMA order (default on; off: the segment order on CUDA "
               "cores: prefill ~23 % slower, decode ~1.5 % faster)");
  app.add_option("--plot", f.plot_path, "also plot the CSV to FILE.png or FILE.svg (needs --csv and gnuplot)");
  app.add_option("--plot-script", f.plot_script, "plot script")->capture_default_str();
  app.add_option("--plot-title", f.plot_title, "plot title");
  app.add_flag("--memory", f.memory,
               "memory run: no snapshot or decode unless -n is given; frontiers default to 10000..250000 "
               "step 10000 (the seed experiment)");
  try {
    app.parse(cli::normalize_args(argc, argv));
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (f.prompt_file.empty() && f.chat_prompt_file.empty())
    return fail("one of --prompt-file FILE or --chat-prompt-file FILE is required", 2);
  if (sys->count() > 0 && f.chat_prompt_file.empty())
    std::fprintf(stderr, "ds4-bench: --system only applies to --chat-prompt-file; ignored\n");
  if (f.memory) {
    if (o_start->count() == 0) f.sched.ctx_start = 10000;
    if (o_max->count() == 0) f.sched.ctx_max = 250000;
    if (o_incr->count() == 0) f.sched.step_incr = 10000;
    if (o_gen->count() == 0) f.sched.gen_tokens = 0;
  }
  if (f.cuda) f.backend = "cuda";
  if (f.engine.cpu) f.backend = "cpu";
  if (f.cuda && f.engine.cpu) return fail("--cpu and --cuda both given", 2);
  if (f.backend != "cpu" && f.backend != "cuda")
    return fail("--backend must be 'cpu' or 'cuda', got '" + f.backend + "'", 2);
  if (!f.plot_path.empty()) {
    if (f.csv_path.empty()) return fail("--plot needs --csv FILE (the plot reads the CSV)", 2);
    const auto ext = std::filesystem::path(f.plot_path).extension();
    if (ext != ".png" && ext != ".svg")
      return fail("--plot: the output must end in .png or .svg, got '" + f.plot_path + "'", 2);
  }

  auto fr = bench::frontiers(f.sched);
  if (!fr.ok()) return fail(fr.status().message(), 2);
  const std::vector<int64_t> frontiers = *fr;

  std::string text;
  const std::string& path = f.chat_prompt_file.empty() ? f.prompt_file : f.chat_prompt_file;
  if (!read_file(path, text)) return fail("cannot read prompt file '" + path + "'");
  if (text.empty()) return fail("prompt file '" + path + "' is empty");

  EngineOptions eo;
  if (!cli::engine_options(f.engine, eo)) return 2;
  // Opened before the model loads, so a bad path fails at once.
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> csv_file(nullptr, &std::fclose);
  if (!f.csv_path.empty()) {
    csv_file.reset(std::fopen(f.csv_path.c_str(), "w"));
    if (!csv_file) return fail("cannot write --csv '" + f.csv_path + "'");
  }
  std::FILE* out = csv_file ? csv_file.get() : stdout;
  eo.backend = f.backend == "cuda" ? BackendKind::cuda : BackendKind::cpu;
  eo.max_context = bench::effective_ctx_alloc(f.sched);
  eo.profile_steps = f.profile_host;
  auto engine = Engine::open(eo);
  if (!engine.ok()) return fail(engine.status().to_string());
  Engine& e = **engine;
  const ModelInfo& info = e.info();
  if (info.upload_bytes > 0)
    std::fprintf(stderr, "ds4-bench: weights uploaded to the device: %.2f GB in %.2f s (%.2f GB/s)\n",
                 info.upload_bytes / 1e9, info.upload_seconds,
                 info.upload_seconds > 0 ? info.upload_bytes / 1e9 / info.upload_seconds : 0.0);
  // The engine accepts a limit beyond the model's trained context; a benchmark there measures
  // nothing the model supports, so refuse it.
  const int64_t model_ctx = info.context_length > 0 ? info.context_length : info.max_context;
  if (model_ctx > 0 && model_ctx < eo.max_context)
    return fail("the model's context is " + std::to_string(model_ctx) + " tokens; the run needs " +
                std::to_string(eo.max_context) + " (--ctx-alloc: last frontier + decode tokens + 1)");
  if (info.max_context > 0 && info.max_context < eo.max_context)
    return fail("the engine allows " + std::to_string(info.max_context) + " tokens of context, the run needs " +
                std::to_string(eo.max_context) + " (--ctx-alloc)");

  std::vector<TokenId> source;
  if (f.chat_prompt_file.empty()) {
    source = e.tokenizer().encode(text);
  } else {
    EncodeOptions enc;
    enc.parse_special = true;
    source = e.tokenizer().encode(chat::render_completion_prompt(f.system, text, chat::ThinkMode::none), enc);
  }
  if (source.empty()) return fail("prompt file '" + path + "' gives no tokens");
  if (static_cast<int64_t>(source.size()) < frontiers.back())
    std::fprintf(stderr, "ds4-bench: the prompt has %zu tokens, fewer than the last frontier %lld: repeating it\n",
                 source.size(), static_cast<long long>(frontiers.back()));
  const std::vector<TokenId> tokens = bench::repeat_tokens(source, frontiers.back());

  std::fprintf(stderr, "ds4-bench: %s (%s), backend %s, %zu frontiers %lld..%lld, %lld decode tokens each, ctx %lld\n",
               info.name.c_str(), info.path.c_str(), f.backend.c_str(), frontiers.size(),
               static_cast<long long>(frontiers.front()), static_cast<long long>(frontiers.back()),
               static_cast<long long>(f.sched.gen_tokens), static_cast<long long>(eo.max_context));
  std::fprintf(out, "%s\n", bench::csv_header().c_str());
  std::fflush(out);

  bench::LoopOptions lo;
  lo.frontiers = frontiers;
  lo.gen_tokens = f.sched.gen_tokens;
  lo.chunk = f.engine.chunk;
  lo.host_argmax = f.host_argmax;
  lo.overlap = f.overlap;
  lo.profile = f.profile_host;
  Status st = bench::run_frontiers(e, tokens, lo, [&](const bench::FrontierRow& r) {
    std::fprintf(out, "%s\n", bench::csv_line(r).c_str());
    std::fflush(out);
    std::fprintf(stderr,
                 "ds4-bench: %7lld tokens  prefill %9.1f tok/s  decode %8.1f tok/s  kv %8.2f MiB  rss %8.1f MiB\n",
                 static_cast<long long>(r.frontier), r.prefill_tps, r.gen_tps, r.kv_bytes / 1048576.0,
                 r.rss_bytes / 1048576.0);
    if (f.profile_host)
      print_profile(r, f.host_argmax  ? "logits downloaded, host argmax"
                       : !f.overlap   ? "device argmax, 4 bytes back, one step at a time"
                                      : "device argmax, the device one step ahead");
  });
  if (csv_file && std::fclose(csv_file.release()) != 0) return fail("error writing --csv '" + f.csv_path + "'");
  if (!st.ok()) return fail(st.to_string());

  if (!f.plot_path.empty()) {
    bench::PlotOptions po;
    po.script = f.plot_script;
    po.csv = f.csv_path;
    po.out = f.plot_path;
    po.memory = f.memory;
    po.title = f.plot_title;
    Status ps = bench::run_plot(po);
    if (!ps.ok()) return fail(ps.to_string());
  }
  return 0;
}
