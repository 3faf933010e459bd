// plan.cpp — ds4::plan_memory (include/ds4/plan.h): the bytes a run would count, by category, for K
// sessions of N tokens, from the GGUF header and the formula module the allocator itself uses.
//
// Weights are measured by binding them on a CPU backend: that maps the file (no page of a weight
// matrix is read) and decodes only the small float tensors, so the mapped/decoded split is exactly the
// engine's. Scratch is the forward pass's (exact) plus the backend's op scratch at its need for a
// full chunk at N tokens (live runs may sit up to 1.5× above that small figure: scratch grows by
// half its size at a time).
// Deliberately not here: printing (tools/ds4/cmd_plan.cpp), live measurement (memory_report.cpp).
#include <algorithm>
#include <thread>

#ifdef DS4_HAVE_CUDA
#include <cuda_runtime.h>
#endif
#include "backend/cpu/cpu_backend.h"
#include "ds4/plan.h"
#include "gguf/gguf.h"
#include "quant/blocks.h"
#include "model/forward.h"
#include "model/weights.h"
#include "modelspec/config.h"
#include "modelspec/layer_plan.h"
#include "modelspec/memory_plan.h"

namespace ds4 {

namespace {

// CUDA op scratch at its need for a chunk of C tokens at context N: quantized activations of the widest
// input (≤ 1.07 B/value for Q8_0/Q8_K), routed-expert gate/up/output rows and their quantized inputs,
// indexer scores [C][N/4] and (prefill on int8 tensor cores) its q heads' codes and scales [C][heads][dim + 4]
// bytes, attention segment states of a split call; with concurrent branches (the default) the side lane's own
// quantized activations (shared expert, KV path, compressors) once more.
uint64_t cuda_op_scratch_bytes(const modelspec::ModelConfig& cfg, int64_t C, int64_t N, uint64_t act_row) {
  const uint64_t c = static_cast<uint64_t>(C), pairs = c * cfg.n_expert_used;
  uint64_t b = 2 * c * act_row;
  b += modelspec::cuda_attention_split_bytes(cfg, C, N);
  b += pairs * act_row;
  b += pairs * (2 * uint64_t{cfg.expert_ff} + cfg.n_embd) * 4;
  b += c * static_cast<uint64_t>(N / 4) * 4;
  b += c * cfg.indexer_heads * (uint64_t{cfg.indexer_head_dim} + 4);
  return b;
}

struct Fixed {  // what does not depend on N or K
  modelspec::ModelConfig cfg;
  std::vector<modelspec::LayerPlan> plan;
  uint64_t mapped = 0, small = 0, tokenizer = 0;
  uint64_t act_row = 0;  // largest quantized-activation row of any weight matrix (ds4 numerics)
};

// Bytes of one activation row quantized for a matmul against a weight row of `cols` values of type t:
// Q8_0 weights take Q8_0 activations (36 B per 32), k-quants and IQ2_XXS take Q8_K (292 B per 256).
uint64_t act_row_bytes(GgmlType t, uint64_t cols) {
  switch (t) {
    case GgmlType::Q8_0: return cols / kQK8_0 * sizeof(BlockQ8_0Act);
    case GgmlType::Q2_K:
    case GgmlType::Q4_K:
    case GgmlType::IQ2_XXS: return cols / kQK_K * sizeof(BlockQ8_K);
    default: return 0;
  }
}

MemoryPlan compute(const Fixed& f, const PlanOptions& o, int64_t C, int threads, int64_t N, int64_t K) {
  MemoryPlan p;
  const bool cuda = o.backend == BackendKind::cuda;
  const modelspec::KvLayout layout{C, cuda ? modelspec::kCudaKvBlockBytes : modelspec::kCpuKvBlockBytes};
  p.session = modelspec::session_kv_bytes(f.cfg, f.plan, N, layout);
  const uint64_t other = modelspec::session_host_other_bytes(f.cfg, N);
  MemBytes& be = cuda ? p.device : p.host;
  for (int c = 0; c < kMemCategoryCount; ++c) be.bytes[c] = p.session.bytes[c] * static_cast<uint64_t>(K);
  be[MemCategory::weights] += f.small + (cuda ? f.mapped : 0);
  be[MemCategory::scratch] += model::Forward::planned_scratch_bytes(f.cfg, C) +
                              (cuda ? cuda_op_scratch_bytes(f.cfg, C, N, f.act_row)
                                    : modelspec::cpu_op_scratch_bytes(f.cfg, C, N, threads, f.act_row));
  p.host[MemCategory::weights] += f.mapped;
  p.host[MemCategory::other] += f.tokenizer + other * static_cast<uint64_t>(K);
  p.session[MemCategory::other] += other;
  p.kv_bytes_per_token = modelspec::kv_bytes_per_token(f.cfg, f.plan);
  p.kv_block_bytes = layout.block_bytes;
  p.ctx = N;
  p.sessions = K;
  p.max_chunk = C;
  // On CUDA the device must hold everything device-side; on the CPU the weights are file pages that
  // must stay resident for speed, so they are planned as RAM like the rest.
  p.needed = cuda ? p.device.total() : p.host.total();
  return p;
}

}  // namespace

Result<MemoryPlan> plan_memory(const PlanOptions& o) {
  if (o.model_path.empty()) return invalid_argument("plan: no model path given");
  if (o.ctx < 0) return invalid_argument("plan: --ctx must be >= 0");
  if (o.sessions < 1) return invalid_argument("plan: --sessions must be >= 1");
  if (o.max_chunk < 0) return invalid_argument("plan: max_chunk must be >= 0");
  DS4_ASSIGN_OR_RETURN(auto file, gguf::File::open(o.model_path));
  Fixed f;
  DS4_ASSIGN_OR_RETURN(f.cfg, modelspec::config_from_gguf(*file));
  f.plan = modelspec::layer_plan(f.cfg);
  {
    auto tok = Tokenizer::from_gguf(*file);
    if (!tok.ok()) return tok.status().with_context("plan: tokenizer");
    f.tokenizer = (*tok)->memory_bytes();
    auto be = backend::cpu::make_cpu_backend({1});
    DS4_ASSIGN_OR_RETURN(model::ModelWeights w, model::bind_weights(*file, f.cfg, f.plan, *be));
    f.mapped = w.mapped_bytes;
    f.small = w.small.bytes();
  }
  for (const auto& t : file->tensors())
    if (t.ne.size() >= 2) f.act_row = std::max(f.act_row, act_row_bytes(t.type, t.ne[0]));
  const int64_t model_ctx = f.cfg.context_length > 0 ? static_cast<int64_t>(f.cfg.context_length) : int64_t{1} << 20;
  const int64_t N = o.ctx > 0 ? o.ctx : model_ctx;
  if (N > model_ctx)
    return invalid_argument("plan: --ctx " + std::to_string(N) + " exceeds the model's context length of " +
                            std::to_string(model_ctx));
  const int64_t C = o.max_chunk > 0 ? o.max_chunk : default_max_chunk(o.backend);
  const int threads = o.n_threads > 0 ? o.n_threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));

  MemoryPlan p = compute(f, o, C, threads, N, o.sessions);
  p.model_context = model_ctx;
  if (o.backend == BackendKind::cuda) {
#ifdef DS4_HAVE_CUDA
    size_t fr = 0, tot = 0;
    int n = 0;
    if (cudaGetDeviceCount(&n) == cudaSuccess && o.cuda_device < n && cudaSetDevice(o.cuda_device) == cudaSuccess &&
        cudaMemGetInfo(&fr, &tot) == cudaSuccess) {
      p.available = fr;
      p.machine_total = tot;
    }
    (void)cudaGetLastError();
#endif
  } else {
    const HostMemory hm = host_memory();
    p.available = hm.available;
    p.machine_total = hm.total;
  }
  if (o.available) p.available = o.available;
  if (p.available == 0)
    return unavailable(std::string("plan: cannot tell how much ") + (o.backend == BackendKind::cuda ? "device" : "host") +
                       " memory is free here; pass the amount to plan against (--memory)");
  p.fits = p.needed <= p.available;
  // Largest context for K sessions and largest K at N: needed() grows monotonically in both.
  auto need = [&](int64_t n, int64_t k) { return compute(f, o, C, threads, n, k).needed; };
  int64_t lo = 0, hi = model_ctx;
  if (need(0, o.sessions) > p.available) {
    p.max_ctx_fit = 0;
  } else {
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo + 1) / 2;
      if (need(mid, o.sessions) <= p.available) lo = mid; else hi = mid - 1;
    }
    p.max_ctx_fit = lo;
  }
  int64_t klo = 0, khi = 1;
  while (need(N, khi) <= p.available && khi < (int64_t{1} << 40)) khi *= 2;
  while (klo < khi - 1) {
    const int64_t mid = klo + (khi - klo) / 2;
    if (need(N, mid) <= p.available) klo = mid; else khi = mid;
  }
  p.max_sessions_fit = need(N, 1) <= p.available ? klo : 0;
  return p;
}

}  // namespace ds4
