// cmd_plan.cpp — `ds4 plan -m MODEL.gguf --ctx N [--sessions K] [--backend cuda|cpu] [--json]`: the exact
// bytes per memory category for K sessions of N tokens, before loading anything heavy (the GGUF header,
// the tokenizer tables and the small float tensors are read; weight matrices are not), the total against
// the memory this machine has free, whether it fits, and the largest context / session count that would.
// The numbers come from the formula module the allocator uses (include/ds4/plan.h), so a live run at the
// same (N, K) reports the same KV bytes and a total within 1%.
// Deliberately not here: the arithmetic (runtime plan.cpp + modelspec/memory_plan), loading the model.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cctype>
#include <cstdio>
#include <string>

#include "ds4/plan.h"

const char* ds4_cmd_plan_help() { return "memory needed for N tokens x K sessions, and what fits here"; }

namespace {

double mib(uint64_t b) { return static_cast<double>(b) / (1 << 20); }

// "80G", "81920M", "512K", "1T" or plain bytes; false on anything else.
bool parse_size(const std::string& s, uint64_t& out) {
  if (s.empty() || !std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (...) {
    return false;
  }
  std::string unit = s.substr(used);
  if (!unit.empty() && (unit.back() == 'B' || unit.back() == 'b')) unit.pop_back();
  if (!unit.empty() && (unit.back() == 'i')) unit.pop_back();
  double mul = 1;
  if (unit.empty()) mul = 1;
  else if (unit == "K" || unit == "k") mul = 1024.0;
  else if (unit == "M" || unit == "m") mul = 1024.0 * 1024;
  else if (unit == "G" || unit == "g") mul = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "t") mul = 1024.0 * 1024 * 1024 * 1024;
  else return false;
  if (v <= 0) return false;
  out = static_cast<uint64_t>(v * mul);
  return true;
}

nlohmann::json bytes_json(const ds4::MemBytes& m) {
  nlohmann::json j = nlohmann::json::object();
  for (int c = 0; c < ds4::kMemCategoryCount; ++c) j[ds4::mem_category_name(static_cast<ds4::MemCategory>(c))] = m.bytes[c];
  j["total"] = m.total();
  return j;
}

}  // namespace

int ds4_cmd_plan(int argc, char** argv) {
  using namespace ds4;
  CLI::App app{"ds4 plan — memory by category for K sessions of N tokens each, from the GGUF header only,\n"
               "against the memory this machine has free (host MemAvailable, or the CUDA device's free bytes)."};
  PlanOptions o;
  std::string backend = "cpu", memory;
  bool json = false;
  app.add_option("-m,--model", o.model_path, "model GGUF file")->required();
  app.add_option("-c,--ctx", o.ctx, "tokens held by each session (0 = the model's context length)")->capture_default_str();
  app.add_option("--sessions", o.sessions, "number of sessions")->capture_default_str();
  app.add_option("--backend", backend, "cpu | cuda")->capture_default_str();
  app.add_option("--chunk", o.max_chunk, "prefill tokens per forward step, as the engine's --chunk (0 = 512 on CUDA, 64 on the CPU)");
  app.add_option("-t,--threads", o.n_threads, "CPU threads (per-thread op scratch; 0 = all cores)");
  app.add_option("--cuda-device", o.cuda_device, "CUDA device index");
  app.add_option("--memory", memory, "plan against this much memory instead of what is free here (e.g. 80G, 141G)");
  app.add_flag("--json", json, "print the plan as JSON");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (backend == "cuda") {
    o.backend = BackendKind::cuda;
  } else if (backend != "cpu") {
    std::fprintf(stderr, "ds4 plan: --backend must be 'cpu' or 'cuda', got '%s'\n", backend.c_str());
    return 2;
  }
  if (!memory.empty() && !parse_size(memory, o.available)) {
    std::fprintf(stderr, "ds4 plan: --memory must be a size like 80G, 512M or a byte count, got '%s'\n", memory.c_str());
    return 2;
  }
  auto r = plan_memory(o);
  if (!r.ok()) {
    std::fprintf(stderr, "ds4 plan: %s\n", r.status().to_string().c_str());
    return r.status().code() == StatusCode::invalid_argument ? 2 : 1;
  }
  const MemoryPlan& p = *r;
  const bool cuda = o.backend == BackendKind::cuda;
  if (json) {
    nlohmann::json j;
    j["backend"] = backend;
    j["ctx"] = p.ctx;
    j["sessions"] = p.sessions;
    j["max_chunk"] = p.max_chunk;
    j["model_context"] = p.model_context;
    j["kv_block_bytes"] = p.kv_block_bytes;
    j["session"] = bytes_json(p.session);
    j["host"] = bytes_json(p.host);
    j["device"] = bytes_json(p.device);
    nlohmann::json rate = nlohmann::json::object();
    double total_rate = 0;
    for (int c = 0; c < kMemCategoryCount; ++c) {
      rate[mem_category_name(static_cast<MemCategory>(c))] = p.kv_bytes_per_token[static_cast<size_t>(c)];
      total_rate += p.kv_bytes_per_token[static_cast<size_t>(c)];
    }
    rate["total"] = total_rate;
    j["kv_bytes_per_token"] = rate;
    j["needed"] = p.needed;
    j["available"] = p.available;
    j["machine_total"] = p.machine_total;
    j["fits"] = p.fits;
    j["max_ctx_fit"] = p.max_ctx_fit;
    j["max_sessions_fit"] = p.max_sessions_fit;
    std::printf("%s\n", j.dump(2).c_str());
    return p.fits ? 0 : 3;
  }
  std::printf("plan: %s backend, %lld session(s) x %lld tokens (chunk %lld; KV blocks of %llu KiB)\n\n", backend.c_str(),
              static_cast<long long>(p.sessions), static_cast<long long>(p.ctx), static_cast<long long>(p.max_chunk),
              static_cast<unsigned long long>(p.kv_block_bytes >> 10));
  std::printf("%-18s %16s %14s %16s %16s\n", "category", "per session B", "B/token", "host B", "device B");
  for (int c = 0; c < kMemCategoryCount; ++c) {
    const auto cat = static_cast<MemCategory>(c);
    std::printf("%-18s %16llu %14.1f %16llu %16llu\n", mem_category_name(cat),
                static_cast<unsigned long long>(p.session[cat]), p.kv_bytes_per_token[static_cast<size_t>(c)],
                static_cast<unsigned long long>(p.host[cat]), static_cast<unsigned long long>(p.device[cat]));
  }
  std::printf("%-18s %16llu %14s %16llu %16llu\n\n", "total", static_cast<unsigned long long>(p.session.total()), "",
              static_cast<unsigned long long>(p.host.total()), static_cast<unsigned long long>(p.device.total()));
  std::printf("needed %.1f MiB of %s memory; %s: %.1f MiB%s\n", mib(p.needed), cuda ? "device" : "host",
              o.available ? "planned against" : (cuda ? "device free" : "host MemAvailable"), mib(p.available),
              p.machine_total ? (" (of " + std::to_string(static_cast<long long>(mib(p.machine_total))) + " MiB)").c_str()
                              : "");
  if (!cuda)
    std::printf("(host weights are the mapped GGUF: planned as resident, as a fast CPU run needs them in RAM)\n");
  std::printf("fits: %s\n", p.fits ? "yes" : "NO");
  std::printf("largest context for %lld session(s): %lld tokens (model limit %lld)\n",
              static_cast<long long>(p.sessions), static_cast<long long>(p.max_ctx_fit),
              static_cast<long long>(p.model_context));
  std::printf("most sessions at %lld tokens: %lld\n", static_cast<long long>(p.ctx),
              static_cast<long long>(p.max_sessions_fit));
  return p.fits ? 0 : 3;
}
