// main.cpp — ds4-server: accepts antirez ds4-server's flags with the same meanings and defaults
// (DS4_SERVER.md §1.1), plus the additions of this server (auth, limits, aliases, sessions). Opens
// the engine, takes the DS4_LOCK_FILE instance lock, prints the startup summary, serves until
// SIGINT/SIGTERM, then drains.
//
// Flags that name ds4 features this engine does not have (MTP drafting, directional steering, the
// Metal backend) are accepted where ignoring them cannot change results, with a warning, and
// rejected otherwise.
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "ds4/engine.h"
#include "instance_lock.h"
#include "kvstore/save_policy.h"
#include "server/disk_cache.h"
#include "server/memory_view.h"
#include "server/server.h"

namespace {

struct Flags {
  std::string model = "ds4flash.gguf";
  std::string mtp;
  int mtp_draft = 1;
  double mtp_margin = 3;
  int64_t ctx = 32768;
  int64_t tokens = 393216;
  int threads = 0;
  std::string chdir_to;
  bool quality = false;
  std::string steering_file;
  double steering_ffn = 0, steering_attn = 0;
  bool warm_weights = false;
  bool metal = false, cuda = false, cpu = false;
  std::string backend;
  int cuda_device = 0;
  bool cuda_graphs = true;
  bool cuda_branches = true;
  bool cuda_f16_mma = ds4::EngineOptions{}.cuda_f16_mma;  // the engine's default (on)
  std::string host = "127.0.0.1";
  int port = 8000;
  bool cors = false;
  std::string trace;
  std::string kv_disk_dir;
  int64_t kv_disk_space_mb = 4096;
  int64_t kv_min = 512, kv_cold_max = 30000, kv_interval = 10000, kv_trim = 32, kv_align = 2048;
  bool kv_reject_quant = false;
  bool kv_f32 = false, kv_no_fsync = false;
  bool no_exact_replay = false;
  int64_t tool_memory_max_ids = 100000;
  // Additions.
  std::string api_key;
  std::vector<std::string> aliases;
  bool accept_any_model = false;
  bool think = false, nothink = false, think_max = false;
  std::string chat_template = "ds4";
  int parallel = 0;              // --max-sessions (--parallel): 0 = derived from the KV budget
  int64_t max_batch_tokens = 0;  // 0 = the engine's step size (default_max_chunk: 512 CUDA, 64 CPU)
  int64_t kv_memory_mb = 0;      // 0 = derived from free device/host memory at startup
  int64_t prefix_cache_mb = 1024;
  int64_t queue_size = 16;
  int64_t request_timeout = 0;
  int64_t max_body_mb = 64;
  int http_threads = 0;
  int64_t drain_timeout = 30;
  std::string numerics = "official";
};

double mib(uint64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); }
double gib(uint64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0 * 1024.0); }

// Default KV budget when --kv-memory-mb is not given: on the GPU 90% of what is free after the
// weights and scratch are resident (the rest is headroom for the driver and fragmentation); on the
// CPU half of MemAvailable (the page cache keeps the mmap'd weights; the other half is theirs).
uint64_t default_kv_budget(const ds4::MemoryReport& mem, bool cuda) {
  if (cuda && mem.device_free > 0) return mem.device_free / 10 * 9;
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  uint64_t kb = 0;
  if (f) {
    char line[256];
    while (std::fgets(line, sizeof line, f))
      if (std::sscanf(line, "MemAvailable: %lu kB", &kb) == 1) break;
    std::fclose(f);
  }
  return kb > 0 ? kb * 1024 / 2 : uint64_t{4} << 30;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"ds4-server — OpenAI, Anthropic and Responses compatible server for DeepSeek V4 Flash"};
  app.add_option("-m,--model", f.model, "GGUF model file")->capture_default_str();
  app.add_option("--mtp", f.mtp, "MTP support GGUF (not implemented here: accepted and ignored)");
  app.add_option("--mtp-draft", f.mtp_draft, "MTP draft tokens (ignored without MTP)")->check(CLI::Range(1, 16));
  app.add_option("--mtp-margin", f.mtp_margin, "MTP verifier margin (ignored without MTP)")->check(CLI::Range(0.0, 1000.0));
  app.add_option("-c,--ctx", f.ctx, "context size in tokens (per session)")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("-n,--tokens", f.tokens, "default max output tokens when a request gives none")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("-t,--threads", f.threads, "CPU threads (0 = all cores)");
  app.add_option("--chdir", f.chdir_to, "change directory before loading the model");
  app.add_flag("--quality", f.quality, "prefer exact kernels (this engine's kernels are always exact)");
  app.add_option("--dir-steering-file", f.steering_file, "directional steering vectors (not supported)");
  app.add_option("--dir-steering-ffn", f.steering_ffn, "steering strength after FFN (not supported)");
  app.add_option("--dir-steering-attn", f.steering_attn, "steering strength after attention (not supported)");
  app.add_flag("--warm-weights", f.warm_weights, "touch every weight page before serving");
  app.add_flag("--metal", f.metal, "Metal backend (not available in this build)");
  app.add_flag("--cuda", f.cuda, "CUDA backend");
  app.add_flag("--cpu", f.cpu, "CPU backend");
  app.add_option("--backend", f.backend, "backend by name: cpu, cuda");
  app.add_option("--cuda-device", f.cuda_device, "CUDA device index");
  app.add_flag("--cuda-graphs,!--no-cuda-graphs", f.cuda_graphs,
               "CUDA: replay decode steps (batched ones too) as CUDA graphs (default on; same bits)");
  app.add_flag("--cuda-branches,!--no-cuda-branches", f.cuda_branches,
               "CUDA: independent parts of each step on a second stream (default on; same bits)");
  app.add_flag("--cuda-f16-mma,!--no-cuda-f16-mma", f.cuda_f16_mma,
               "CUDA: F16 matmuls on tensor cores in the F16 MMA order (default on; off: the segment order on CUDA "
               "cores: prefill ~23 % slower, decode ~1.5 % faster)");
  app.add_option("--host", f.host, "bind address")->capture_default_str();
  app.add_option("--port", f.port, "bind port")->capture_default_str()->check(CLI::Range(0, 65535));
  app.add_flag("--cors", f.cors, "send permissive CORS headers");
  app.add_option("--trace", f.trace, "append a human-readable session trace to FILE");
  app.add_option("--kv-disk-dir", f.kv_disk_dir, "disk KV cache directory (shared safely by several servers)");
  app.add_option("--kv-disk-space-mb", f.kv_disk_space_mb, "disk KV cache budget in MiB")->capture_default_str();
  app.add_option("--kv-cache-min-tokens", f.kv_min, "disk KV: minimum checkpoint length");
  app.add_option("--kv-cache-cold-max-tokens", f.kv_cold_max, "disk KV: cold save limit");
  app.add_option("--kv-cache-continued-interval-tokens", f.kv_interval, "disk KV: continued save interval");
  app.add_option("--kv-cache-boundary-trim-tokens", f.kv_trim, "disk KV: tail trim before cold saves");
  app.add_option("--kv-cache-boundary-align-tokens", f.kv_align, "disk KV: save alignment");
  app.add_flag("--kv-cache-reject-different-quant", f.kv_reject_quant, "disk KV: refuse other quantizations");
  app.add_flag("--kv-cache-f32-payload", f.kv_f32, "disk KV: store rows as f32 like ds4 (default: compact, lossless)");
  app.add_flag("--kv-cache-no-fsync", f.kv_no_fsync, "disk KV: skip fsync on save (faster; a torn file is detected and dropped)");
  app.add_flag("--disable-exact-dsml-tool-replay", f.no_exact_replay, "render replayed tool calls canonically");
  app.add_option("--tool-memory-max-ids", f.tool_memory_max_ids, "exact-DSML replay map size")->capture_default_str();
  app.add_option("--api-key", f.api_key, "require this key (Authorization: Bearer KEY or x-api-key: KEY)");
  app.add_option("--alias", f.aliases, "extra model name to answer to (repeatable)");
  app.add_flag("--accept-any-model", f.accept_any_model, "accept any model name (ds4 behaviour) instead of 404");
  auto* think_opt = app.add_flag("--think", f.think, "default: thinking on (effort high)");
  auto* nothink_opt = app.add_flag("--nothink", f.nothink, "default: thinking off");
  auto* max_opt = app.add_flag("--think-max", f.think_max, "default: Think Max (needs --ctx >= 393216)");
  think_opt->excludes(nothink_opt)->excludes(max_opt);
  nothink_opt->excludes(max_opt);
  app.add_option("--chat-template", f.chat_template, "prompt rendering: ds4 (ds4-server bytes) or official (DeepSeek encoder)")
      ->check(CLI::IsMember({"ds4", "official"}))->capture_default_str();
  app.add_option("--max-sessions,--parallel", f.parallel, "live sessions (KV timelines) batched together; 0 = from the KV budget")->check(CLI::Range(0, 4096))->capture_default_str();
  app.add_option("--max-batch-tokens", f.max_batch_tokens, "tokens of all sessions in one engine step (decode tokens + prefill chunks); 0 = 512 on CUDA, 64 on the CPU")->check(CLI::Range(int64_t{0}, int64_t{65536}))->capture_default_str();
  app.add_option("--kv-memory-mb", f.kv_memory_mb, "KV cache budget of all sessions in MiB (admission); 0 = 90% of free GPU memory after loading, or half the host's available memory")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--prefix-cache-mb", f.prefix_cache_mb, "host memory for saved prompt prefixes shared across sessions; 0 = off")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--queue-size", f.queue_size, "waiting requests before 503 + Retry-After")->check(CLI::Range(int64_t{1}, int64_t{100000}))->capture_default_str();
  app.add_option("--request-timeout", f.request_timeout, "seconds before a request is ended (0 = none)")->check(CLI::NonNegativeNumber);
  app.add_option("--max-body-mb", f.max_body_mb, "largest accepted request body in MiB")->check(CLI::Range(int64_t{1}, int64_t{4096}))->capture_default_str();
  app.add_option("--http-threads", f.http_threads, "HTTP worker threads (0 = queue size + sessions + 8)");
  app.add_option("--drain-timeout", f.drain_timeout, "seconds in-flight requests get to finish on SIGTERM")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--numerics", f.numerics, "official (FP8/FP4 KV simulation) or reference (float32)")
      ->check(CLI::IsMember({"official", "reference"}))->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return e.get_exit_code() == 0 ? 0 : (rc == 0 ? 0 : 2);
  }

  auto fail = [](const std::string& msg) {
    std::fprintf(stderr, "ds4-server: %s\n", msg.c_str());
    return 1;
  };
  if (!f.chdir_to.empty() && ::chdir(f.chdir_to.c_str()) != 0) return fail("cannot chdir to " + f.chdir_to);
  if (f.metal || f.backend == "metal") return fail("the Metal backend is not available in this build (use --cpu or --cuda)");
  if (!f.steering_file.empty() || f.steering_ffn != 0 || f.steering_attn != 0)
    return fail("directional steering (--dir-steering-*) is not supported by this engine");
  // Default: the GPU when this build has CUDA and a device is present, otherwise the CPU (a CUDA build
  // on a machine without a GPU still serves). An explicit --cuda without a device is an error.
  ds4::BackendKind backend = ds4::cuda_device_count() > 0 ? ds4::BackendKind::cuda : ds4::BackendKind::cpu;
  if (f.cpu || f.backend == "cpu") backend = ds4::BackendKind::cpu;
  if (f.cuda || f.backend == "cuda") backend = ds4::BackendKind::cuda;
  if (!f.backend.empty() && f.backend != "cpu" && f.backend != "cuda") return fail("unknown backend '" + f.backend + "'");
  if (!f.mtp.empty()) std::fprintf(stderr, "ds4-server: warning: MTP drafting is not implemented; --mtp %s ignored (output is unchanged)\n", f.mtp.c_str());
  ds4::kvstore::SavePolicy kv_policy{f.kv_min, f.kv_cold_max, f.kv_interval, f.kv_trim, f.kv_align};
  if (ds4::Status st = ds4::kvstore::validate(kv_policy); !st.ok()) return fail(st.message());
  if (f.kv_disk_space_mb <= 0) return fail("--kv-disk-space-mb must be positive");

  // Signals are handled by one thread with sigwait; block them before any thread starts.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  const char* lock_env = std::getenv("DS4_LOCK_FILE");
  const std::string lock_path = lock_env && *lock_env ? lock_env : "/tmp/ds4.lock";
  ds4::InstanceLock lock;
  if (ds4::Status st = lock.acquire(lock_path); !st.ok()) {
    std::fprintf(stderr, "ds4-server: %s\n", st.message().c_str());
    return 2;
  }

  std::FILE* trace = nullptr;
  if (!f.trace.empty()) {
    trace = std::fopen(f.trace.c_str(), "a");
    if (!trace) return fail("cannot open trace file " + f.trace);
    std::setvbuf(trace, nullptr, _IONBF, 0);
  }

  ds4::EngineOptions eo;
  eo.model_path = f.model;
  eo.backend = backend;
  eo.n_threads = f.threads;
  eo.max_context = f.ctx;
  eo.warm_weights = f.warm_weights;
  eo.cuda_device = f.cuda_device;
  eo.cuda_graphs = f.cuda_graphs;
  eo.cuda_branches = f.cuda_branches;
  eo.cuda_f16_mma = f.cuda_f16_mma;
  eo.numerics = f.numerics == "reference" ? ds4::Numerics::reference : ds4::Numerics::official;
  eo.max_chunk = static_cast<int32_t>(f.max_batch_tokens);  // one step's scratch holds the whole batch
  std::fprintf(stderr, "ds4-server: loading %s (backend %s)\n", f.model.c_str(),
               backend == ds4::BackendKind::cuda ? "cuda" : "cpu");
  auto engine = ds4::Engine::open(eo);
  if (!engine.ok()) return fail(engine.status().to_string());
  const ds4::ModelInfo& info = (*engine)->info();
  const int64_t ctx = info.max_context > 0 ? std::min<int64_t>(f.ctx, info.max_context) : f.ctx;
  std::fprintf(stderr, "ds4-server: model '%s' (%s), %d layers, vocab %d, %.2f GiB weights%s%s\n", info.name.c_str(),
               info.architecture.c_str(), info.n_layer, info.n_vocab, gib(info.weight_bytes),
               info.quant_summary.empty() ? "" : ", ", info.quant_summary.c_str());
  const ds4::MemoryReport mem = (*engine)->memory_report();
  std::fprintf(stderr, "ds4-server: %s\n", ds4::server::memory_summary(mem).c_str());

  ds4::server::ServerOptions so;
  so.host = f.host == "localhost" ? "127.0.0.1" : f.host;
  so.port = f.port;
  so.api_key = f.api_key;
  so.cors = f.cors;
  so.max_body_bytes = static_cast<size_t>(f.max_body_mb) << 20;
  so.http_threads = f.http_threads;
  so.request_timeout = std::chrono::seconds(f.request_timeout);
  so.drain_grace = std::chrono::seconds(f.drain_timeout);
  so.tool_memory_max_ids = static_cast<size_t>(std::max<int64_t>(f.tool_memory_max_ids, 1));
  so.map.ctx = ctx;
  so.log = stderr;
  so.map.aliases = f.aliases;
  so.map.accept_any_model = f.accept_any_model;
  so.map.default_think = f.nothink ? ds4::chat::ThinkMode::none
                         : f.think_max ? ds4::chat::ThinkMode::max : ds4::chat::ThinkMode::high;
  so.map.flavor = f.chat_template == "official" ? ds4::chat::Flavor::official : ds4::chat::Flavor::ds4;
  so.worker.default_max_tokens = f.tokens;
  so.worker.n_sessions = f.parallel;
  so.worker.max_batch_tokens = f.max_batch_tokens;
  so.worker.prefix_cache_bytes = static_cast<uint64_t>(f.prefix_cache_mb) << 20;
  so.worker.kv_budget_bytes = f.kv_memory_mb > 0 ? static_cast<uint64_t>(f.kv_memory_mb) << 20
                                                 : default_kv_budget(mem, backend == ds4::BackendKind::cuda);
  std::fprintf(stderr, "ds4-server: KV budget %.0f MiB%s, prefix cache %lld MiB, step %lld tokens\n",
               mib(so.worker.kv_budget_bytes), f.kv_memory_mb > 0 ? "" : " (derived)",
               static_cast<long long>(f.prefix_cache_mb), static_cast<long long>((*engine)->max_step_tokens()));
  so.worker.max_queue = static_cast<size_t>(f.queue_size);
  so.worker.flavor = so.map.flavor;
  so.worker.exact_dsml_replay = !f.no_exact_replay;
  if (f.think_max && ctx < ds4::chat::kThinkMaxMinContext)
    std::fprintf(stderr, "ds4-server: warning: --think-max needs --ctx >= %lld; requests get effort high\n",
                 static_cast<long long>(ds4::chat::kThinkMaxMinContext));

  // Disk KV cache: a directory that cannot be used is logged and the server runs without it (ds4).
  std::unique_ptr<ds4::server::DiskCache> disk_cache;
  if (!f.kv_disk_dir.empty()) {
    ds4::server::DiskCacheOptions dco;
    dco.dir = f.kv_disk_dir;
    dco.space_mb = static_cast<uint64_t>(f.kv_disk_space_mb);
    dco.policy = kv_policy;
    dco.reject_different_quant = f.kv_reject_quant;
    dco.compact = !f.kv_f32;
    dco.fsync = !f.kv_no_fsync;
    dco.log = [](const std::string& line) { std::fprintf(stderr, "ds4-server: %s\n", line.c_str()); };
    auto dc = ds4::server::DiskCache::open(**engine, std::move(dco));
    if (!dc.ok()) {
      std::fprintf(stderr, "ds4-server: warning: disk KV cache disabled: %s\n", dc.status().to_string().c_str());
    } else {
      disk_cache = std::move(dc).value();
      so.worker.disk_cache = disk_cache.get();
      std::fprintf(stderr, "ds4-server: disk KV cache %s (%lld MiB, %s payloads, model identity %s, experts %d-bit)\n",
                   f.kv_disk_dir.c_str(), static_cast<long long>(f.kv_disk_space_mb), f.kv_f32 ? "f32" : "compact",
                   info.kv_identity.c_str(), info.routed_expert_bits);
    }
  }

  ds4::server::Server server(**engine, so, trace);
  if (ds4::Status st = server.bind(); !st.ok()) return fail(st.message());
  std::fprintf(stderr, "ds4-server: ctx %lld tokens, sessions %s, queue %lld, chat template %s%s%s\n",
               static_cast<long long>(ctx), f.parallel > 0 ? std::to_string(f.parallel).c_str() : "up to what the KV budget admits", static_cast<long long>(f.queue_size), f.chat_template.c_str(),
               f.api_key.empty() ? "" : ", API key required", f.cors ? ", CORS on" : "");
  std::fprintf(stderr, "ds4-server: listening on http://%s:%d\n", so.host.c_str(), server.port());

  std::atomic<bool> stopped{false};
  std::thread signals([&server, &stopped, sigs]() mutable {
    int sig = 0;
    if (sigwait(&sigs, &sig) == 0 && !stopped) {
      std::fprintf(stderr, "ds4-server: %s received, draining in-flight requests\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
      server.shutdown();
    }
  });

  ds4::Status st = server.run();
  stopped = true;
  pthread_kill(signals.native_handle(), SIGTERM);  // wake the signal thread if no signal came
  signals.join();
  if (!st.ok()) return fail(st.message());
  std::fprintf(stderr, "ds4-server: stopped\n");
  if (trace) std::fclose(trace);
  return 0;
}
