// cli_common.h — pieces shared by the model-running subcommands (generate, run): engine flags and
// turning them into EngineOptions. Header-only so each cmd_*.cpp stays self-contained.
#pragma once

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "ds4/engine.h"

namespace ds4::cli {

struct EngineFlags {
  std::string model;
  int threads = 0;
  int64_t ctx = 32768;
  int32_t chunk = 0;
  std::string numerics = "official";
  bool warm_weights = false;
  bool no_shared_clamp = false;
  bool cpu = false;
  bool cuda = false;
  int cuda_device = 0;
  bool cuda_no_tensor_cores = false;
  bool cuda_graphs = true;
  bool cuda_branches = true;
  bool cuda_f16_mma = ds4::EngineOptions{}.cuda_f16_mma;  // the engine's default (on)
};

inline void add_engine_flags(CLI::App& app, EngineFlags& f) {
  app.add_option("-m,--model", f.model, "model GGUF file")->required();
  app.add_option("-t,--threads", f.threads, "CPU threads (0 = all cores)");
  app.add_option("-c,--ctx", f.ctx, "session context limit in tokens")->capture_default_str();
  app.add_option("--chunk", f.chunk, "prefill tokens per forward step (0 = 512 on CUDA, 64 on the CPU)");
  app.add_option("--numerics", f.numerics,
                 "official (FP8 KV, FP4 indexer, f16 cache: what ds4 computes) | reference (float32, no "
                 "simulations: what HF transformers computes)")
      ->capture_default_str();
  app.add_flag("--warm-weights", f.warm_weights, "touch every weight page at load");
  app.add_flag("--no-shared-clamp", f.no_shared_clamp, "do not clamp the shared expert's SwiGLU (HF revision B)");
  app.add_flag("--cpu", f.cpu, "use the CPU backend (the default)");
  app.add_flag("--cuda", f.cuda, "use the CUDA backend (needs a build with -DDS4_CUDA=ON and a GPU)");
  app.add_option("--cuda-device", f.cuda_device, "CUDA device index");
  app.add_flag("--cuda-no-tensor-cores", f.cuda_no_tensor_cores,
               "CUDA: run prefill matmuls, routed experts and attention with the decode (matvec, one-query) "
               "kernels instead of the int8 tensor-core GEMM and chunk attention (for comparisons; same "
               "numerics up to float summation order)");
  app.add_flag("--cuda-graphs,!--no-cuda-graphs", f.cuda_graphs,
               "CUDA: replay decode steps (batched ones too) as CUDA graphs (default on; same bits; "
               "fewer host launches)");
  app.add_flag("--cuda-branches,!--no-cuda-branches", f.cuda_branches,
               "CUDA: run independent parts of each step (shared expert, KV path, compressors and indexer) "
               "on a second stream (default on; same bits)");
  app.add_flag("--cuda-f16-mma,!--no-cuda-f16-mma", f.cuda_f16_mma,
               "CUDA: F16 matmuls on tensor cores in the F16 MMA order (default on; off: the segment order on CUDA "
               "cores: prefill ~23 % slower, decode ~1.5 % faster)");
}

// Reads a whole file as bytes; false when it cannot be opened.
inline bool read_file(const std::string& path, std::string& out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  out = ss.str();
  return true;
}

inline bool engine_options(const EngineFlags& f, EngineOptions& o) {
  o.model_path = f.model;
  o.n_threads = f.threads;
  o.max_context = f.ctx;
  o.max_chunk = f.chunk;
  o.warm_weights = f.warm_weights;
  o.shared_expert_clamp = !f.no_shared_clamp;
  if (f.cpu && f.cuda) {
    std::fprintf(stderr, "ds4: --cpu and --cuda are exclusive\n");
    return false;
  }
  o.backend = f.cuda ? BackendKind::cuda : BackendKind::cpu;
  o.cuda_device = f.cuda_device;
  o.cuda_tensor_cores = !f.cuda_no_tensor_cores;
  o.cuda_graphs = f.cuda_graphs;
  o.cuda_branches = f.cuda_branches;
  o.cuda_f16_mma = f.cuda_f16_mma;
  if (f.numerics == "official") {
    o.numerics = Numerics::official;
  } else if (f.numerics == "reference") {
    o.numerics = Numerics::reference;
  } else {
    std::fprintf(stderr, "ds4: --numerics must be 'official' or 'reference', got '%s'\n", f.numerics.c_str());
    return false;
  }
  return true;
}

// ds4 spells the system flag "-sys"; CLI11 only knows one-letter short options, so map it.
inline std::vector<std::string> normalize_args(int argc, char** argv) {
  std::vector<std::string> out;
  for (int i = 1; i < argc; ++i) out.push_back(std::string(argv[i]) == "-sys" ? "--system" : argv[i]);
  std::reverse(out.begin(), out.end());  // CLI11's vector overload expects reversed order
  return out;
}

}  // namespace ds4::cli
