// engine.h — the public boundary of ds4cpp: an Engine is the loaded model (weights on a backend,
// tokenizer, config); a Session is one mutable inference timeline (tokens, KV state, last logits).
//
// Server, CLI and benchmarks use only include/ds4/*.h. They never see tensors, kernels or KV blocks.
// Threading: an Engine and its Sessions are owned by one thread (the engine worker); nothing here
// is thread-safe except Engine::memory_report() snapshots, which are plain values.
// Errors are values (Status/Result); nothing here exits or throws.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ds4/memory.h"
#include "ds4/sampler.h"
#include "ds4/status.h"
#include "ds4/tokens.h"

namespace ds4 {

enum class BackendKind { cpu, cuda };

// Prefill tokens per forward step when EngineOptions::max_chunk is 0. The CPU is compute-bound at any
// chunk, so 64 keeps the per-session ring and compressor frontiers (sized by the chunk) small. On CUDA a
// 64-token step leaves the tensor-core GEMMs and chunk attention mostly idle (43-layer flash-q2 on an
// H200: ~310 tok/s prefill at 64 against ~1,090 at 2048); 512 gets most of that back for ~160 MiB more
// per session (ring + frontiers, `ds4 plan --chunk`). The server's step budget (--max-batch-tokens)
// is this same number, and with many decoding sessions a 64-token step left new prompts a few tokens each.
constexpr int32_t default_max_chunk(BackendKind b) { return b == BackendKind::cuda ? 512 : 64; }

// Number of usable CUDA devices: 0 when this build has no CUDA backend, or there is no GPU or driver.
// Tools use it to pick their default backend (CUDA when available, else CPU).
int cuda_device_count();

// How numerics are simulated. `official` = what the real model expects (FP8 round-trip of KV rows,
// Hadamard+FP4 round-trip of indexer q/k, f16 rounding of cached RoPE dims: MODEL.md §5.4-5.6, §12).
// `reference` = all simulations off, float32 throughout: matches Hugging Face transformers, which omits
// them (used by the golden tests, MODEL.md §14.5 step 2).
enum class Numerics { official, reference };

struct EngineOptions {
  std::string model_path;               // GGUF file (mmap'd, never copied on the host)
  BackendKind backend = BackendKind::cpu;
  int n_threads = 0;                    // CPU worker threads; 0 = hardware concurrency
  int64_t max_context = 0;              // per-session token limit (--ctx); 0 = model's context_length
  Numerics numerics = Numerics::official;
  bool warm_weights = false;            // touch every weight page at load (ds4 --warm-weights)
  int cuda_device = 0;
  // CUDA: prefill-sized matmuls and routed experts on int8 tensor cores and chunk attention (off: the
  // matvec and one-query attention kernels for every batch size; same numerics up to float sum order).
  bool cuda_tensor_cores = true;
  int32_t max_chunk = 0;                // prefill tokens per forward step (scratch is sized for it); 0 = default_max_chunk(backend)
  // Shared-expert SwiGLU clamp (MODEL.md §8 step 6): on for ds4/official; HF revision B omits it,
  // so golden comparisons against that revision turn it off.
  bool shared_expert_clamp = true;
  // Decode steps replayed as CUDA graphs (model::ForwardOptions::graphs): every decode step (one
  // session's token or a batched step, emitting compressed rows or not) is recorded once per shape and
  // replayed, ~1,800 host launches per token becoming one.
  // Same bits as off. On the CPU backend only the step inputs' layout changes (tests use that).
  // On by default: on the H200 graphs on ≡ off bit for bit (test_cuda_model CudaGraphs.*, CudaBatch.*) and
  // 43-layer decode is ~4 % faster (docs/PERF.md); tools turn it off with --no-cuda-graphs.
  bool cuda_graphs = true;
  // CUDA: independent parts of each step on a second stream (backend::cuda::CudaBackendOptions::branches:
  // the shared expert beside the routed experts, the KV path and the compressors + indexer beside the
  // query path), recorded into step graphs as parallel branches. Same bits as off (test_cuda_branches);
  // on by default (faster in every case the H200 measured, docs/PERF.md); --no-cuda-branches turns it off.
  bool cuda_branches = true;
  // CUDA: every F16 matmul on TF32 tensor cores in the F16 MMA order (backend::cuda::CudaBackendOptions::
  // f16_mma): a 2,048-token chunk's F16 matmuls 4× faster (43-layer prefill at 4K +30 %), decode 1.5 % slower
  // (docs/PERF.md, session 9 final run). Another summation order (the CPU within tolerance either way, batched ≡
  // solo bit for bit in both); on by default since session 9 — the prefill gain is the larger one;
  // --no-cuda-f16-mma turns it off.
  bool cuda_f16_mma = true;
  // Weights pulled into the device cache ahead of their matmuls (model::ForwardOptions::l2_prefetch bits,
  // kPrefetch* in model/forward.h); -1: the forward pass's default. Same bits whichever (test_cuda_branches).
  int64_t l2_prefetch = -1;
  // Host clocks around each piece of a step and device timestamps around its ops, read back through
  // Engine::step_times() (ds4-bench --profile-host). Off: no clock is read.
  bool profile_steps = false;
};

// Where the engine's steps spent their time (EngineOptions::profile_steps), summed since the engine opened
// or the last reset_step_times(). Host seconds per piece of a step; `device` is the device time from a
// step's first op to its last (0 and device_steps 0 when the backend has no timestamps: the CPU).
struct StepTimes {
  int64_t steps = 0;
  double prepare = 0;  // checks, KV room, step input tables and their upload
  double launch = 0;   // step graph lookup and launch, or the eager launches
  double wait = 0;     // until the results (logits or greedy token ids) are on the host
  double device = 0;
  int64_t device_steps = 0;
};

// Read-only facts about the loaded model, for logs, /v1/models and the planner.
struct ModelInfo {
  std::string name;          // general.name
  std::string architecture;  // general.architecture ("deepseek4")
  std::string path;
  int32_t n_layer = 0, n_embd = 0, n_vocab = 0;
  int64_t context_length = 0;  // deepseek4.context_length
  int64_t max_context = 0;     // effective per-session limit
  uint64_t file_bytes = 0, weight_bytes = 0;
  std::string quant_summary;   // e.g. "Q8_0 attn, IQ2_XXS/Q2_K experts"
  // Weights copied to device memory at open (CUDA; 0 on the CPU, which maps the file): bytes and the
  // wall time of the copy, for load logs ("uploaded N GB in S s").
  uint64_t upload_bytes = 0;
  double upload_seconds = 0;
  // Identity of what a session snapshot depends on (metadata, tensor directory, sampled weights,
  // numerics), hex: snapshots restore correctly only into an engine with the same value. The routed
  // experts' quantization is left out and given as routed_expert_bits (2/4-bit files share it).
  std::string kv_identity;
  int routed_expert_bits = 0;
};

struct SessionOptions {
  int64_t max_context = 0;  // 0 = engine's max_context
};

class Session;
struct EvalOptions;

// One session's share of a batched step (Engine::step): the tokens appended to it in this step
// (one for a decoding session, a chunk for one that is prefilling).
// With `next`, the step picks the session's greedy next token on the device (the argmax of the logits
// after its last token: lowest id on ties, never `exclude`, −1: none excluded; ds4::argmax's NaN policy)
// and writes it to *next, without copying the logits to the host: the session's logits() are then
// recomputed if asked for later (one more token evaluated; exact). Without it, the logits are the result.
struct StepItem {
  Session* session = nullptr;
  std::span<const TokenId> tokens;
  TokenId* next = nullptr;
  TokenId exclude = -1;
};

class Engine {
 public:
  virtual ~Engine() = default;
  static Result<std::unique_ptr<Engine>> open(const EngineOptions& opts);

  virtual const ModelInfo& info() const = 0;
  virtual const Tokenizer& tokenizer() const = 0;
  virtual Result<std::unique_ptr<Session>> new_session(const SessionOptions& opts = {}) = 0;
  // Memory by category for the whole process (weights, scratch, every live session's KV).
  virtual MemoryReport memory_report() const = 0;

  // Advances several distinct sessions of this engine in one step. Afterwards each session is exactly
  // as if eval(item.tokens) had been called on it alone (same tokens, logits within the backend's
  // reduction-order tolerance); a batched implementation reads each weight once for all tokens.
  // The total token count must not exceed max_step_tokens(). Fails without advancing any session
  // (a session that had advanced is rewound) if an item is invalid or the context limit is exceeded.
  virtual Status step(std::span<const StepItem> items, const EvalOptions& opts) = 0;
  // Most tokens (all sessions together) one step() may carry: the forward pass's scratch size.
  virtual int64_t max_step_tokens() const = 0;
  // EngineOptions::profile_steps's figures (steps stays 0 without it); reset_step_times() starts over.
  virtual StepTimes step_times() const { return {}; }
  virtual void reset_step_times() {}
};

// Saved complete state of a session (tokens, logits, every KV/compressor/indexer row). Opaque bytes
// with a versioned header; restore() validates it against the model before touching the session.
struct SessionSnapshot {
  std::vector<uint8_t> bytes;
};

// How a snapshot stores the KV rows. `f32`: every row as float32 (simple, what ds4-bench measures).
// `compact`: each 64-value group in the narrowest form that holds its float32 values exactly (the
// FP8/FP4-rounded rows of official numerics take ~1/4 of the bytes); restore is bit-exact either way.
enum class SnapshotFormat { f32, compact };

struct EvalOptions {
  int32_t chunk = 0;  // prefill chunk size; 0 = backend default. Any chunking gives the same logits.
  // Optional cancellation: polled between chunks/layers; return true to stop with StatusCode::cancelled
  // (the session then holds the tokens evaluated so far).
  bool (*should_cancel)(void* user) = nullptr;
  void* cancel_user = nullptr;
};

class Session {
 public:
  virtual ~Session() = default;

  // Appends tokens and runs the model over them; afterwards logits() are the next-token logits
  // after the last appended token. Fails (session unchanged) if the context limit would be exceeded.
  virtual Status eval(std::span<const TokenId> tokens, const EvalOptions& opts = {}) = 0;
  // Logits of every position of the last eval() call, row-major [n_tokens][n_vocab], when requested
  // by eval_all(); used by golden tests and `ds4 run --dump-logits`.
  virtual Status eval_all(std::span<const TokenId> tokens, std::vector<float>& all_logits,
                          const EvalOptions& opts = {}) = 0;
  // eval() for greedy decoding (StepItem::next): *next receives the greedy next token after `tokens`
  // (lowest id on ties, never `exclude`; −1: none excluded), picked on the device where the backend has
  // one, so the logits are not copied to the host; logits() recomputes them when asked later. The default
  // evaluates and scans the logits on the host (ds4::argmax), the same token.
  virtual Status eval_greedy(std::span<const TokenId> tokens, TokenId* next, TokenId exclude = -1,
                             const EvalOptions& opts = {}) {
    DS4_RETURN_IF_ERROR(eval(tokens, opts));
    *next = argmax(logits(), exclude);
    return Status::Ok();
  }
  // Greedy decoding of up to n tokens with the device running ahead of the host: `first` is appended, and
  // each step's greedy token (never `exclude`) is fed to the next step on the device, which is launched
  // before the token reaches the host. on_token(t) gets the tokens in order; false stops (as does
  // opts.should_cancel, then with StatusCode::cancelled). Afterwards the session is exactly as after
  // `next = first; repeat: eval_greedy(next) → next; on_token(next)`: it holds `first` and every reported
  // token but the last, which is the caller's next input (a step run ahead past a stop is rolled back).
  // The default is that loop.
  virtual Status generate_greedy(TokenId first, int64_t n, TokenId exclude, const std::function<bool(TokenId)>& on_token,
                                 const EvalOptions& opts = {}) {
    TokenId next = first;
    for (int64_t i = 0; i < n; ++i) {
      if (opts.should_cancel && opts.should_cancel(opts.cancel_user)) return cancelled("session: generation cancelled");
      const TokenId cur = next;
      DS4_RETURN_IF_ERROR(eval_greedy(std::span<const TokenId>(&cur, 1), &next, exclude, opts));
      if (!on_token(next)) break;
    }
    return Status::Ok();
  }
  virtual std::span<const float> logits() const = 0;  // [n_vocab] next-token logits
  virtual std::span<const TokenId> tokens() const = 0;
  int64_t position() const { return static_cast<int64_t>(tokens().size()); }
  virtual int64_t max_context() const = 0;

  // Moves the timeline back to `n_tokens` (<= position()); state and logits become exactly those
  // after the first n_tokens tokens. Releases memory no longer needed.
  virtual Status rewind(int64_t n_tokens) = 0;
  virtual Result<SessionSnapshot> snapshot(SnapshotFormat format = SnapshotFormat::f32) const = 0;
  // Accepts either format.
  virtual Status restore(const SessionSnapshot& snap) = 0;
  virtual SessionMemory memory() const = 0;
};

}  // namespace ds4
