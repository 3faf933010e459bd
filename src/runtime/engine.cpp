// engine.cpp — Engine::open: map the GGUF, read and validate the config, build the tokenizer, bind
// the weights on the chosen backend and prepare the forward pass. Memory reporting: memory_report.cpp.
#include <cstdio>
#include <cstring>
#include <string>

#include "backend/cpu/cpu_backend.h"
#ifdef DS4_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif
#include "runtime/engine_cuda_options.h"
#include "runtime/engine_impl.h"
#include "runtime/model_identity.h"

namespace ds4 {

Result<std::unique_ptr<Engine>> Engine::open(const EngineOptions& opts) { return runtime::EngineImpl::open(opts); }

int cuda_device_count() {
#ifdef DS4_HAVE_CUDA
  return backend::cuda::cuda_device_count();
#else
  return 0;
#endif
}

}  // namespace ds4

namespace ds4::runtime {

#ifdef DS4_HAVE_CUDA
backend::cuda::CudaBackendOptions engine_cuda_options(const EngineOptions& opts) {
  backend::cuda::CudaBackendOptions co;
  co.device = opts.cuda_device;
  co.tensor_cores = opts.cuda_tensor_cores;
  co.branches = opts.cuda_branches;
  co.f16_mma = opts.cuda_f16_mma;
  // The decode indexer's fused score + select launch with q and the head weights loaded before the row count
  // and the radix select's lean end (ops_indexer.cu; session 10 on the H200: 17.9 → 13.8 µs per CSA layer at
  // 2K, the same ids), and past 2,048 rows (contexts above 8K) the wide kernel with its register-blocked tile:
  // scores and selection in one launch there too (session 11 on the H200, one query: 46.0 → 19.0 µs at 32K,
  // 29.1 → 12.9 at 16K; 8 queries 144.0 → 65.1 at 32K; the same ids). Since session 12 (14) the wide kernel's
  // blocked tiles have 32 rows, two blocks per multiprocessor, at every bound: in a 32K decode step the indexer
  // launch took ~54 µs with 11 where the op bench had 19 (the step's whole 32K − 2K difference); 32 rows take
  // 8–10 µs off it (H200, 4-layer whole steps at 32K in two runs; 2K unchanged; the same ids). Since session 12 (18)
  // the selects check for all-equal keys (the benchmark file's zero indexer weights make every score 0: the radix
  // passes then added every key to one shared counter) and the wide select holds 40 keys a thread up to 10,240 rows
  // (the 32K step's bound; 64 spilled): 4-layer whole steps at 32K −19 … −21 µs against 14 (H200, session 12
  // longctx2), 2K unchanged, the same ids. A bare CudaBackendOptions keeps 2, the previous launch, for before/after
  // runs.
  co.indexer_select = 18;
  return co;
}
#endif

Result<std::unique_ptr<Engine>> EngineImpl::open(const EngineOptions& opts) {
  if (opts.model_path.empty()) return invalid_argument("engine: no model path given");
  if (opts.max_context < 0) return invalid_argument("engine: max_context must be >= 0");
  if (opts.max_chunk < 0) return invalid_argument("engine: max_chunk must be >= 0");
  std::unique_ptr<EngineImpl> e(new EngineImpl());
  e->opts_ = opts;
  gguf::OpenOptions oo;
  oo.populate = opts.warm_weights;
  DS4_ASSIGN_OR_RETURN(e->file_, gguf::File::open(opts.model_path, oo));
  DS4_ASSIGN_OR_RETURN(e->cfg_, modelspec::config_from_gguf(*e->file_));
  auto tok = Tokenizer::from_gguf(*e->file_);
  if (!tok.ok()) return tok.status().with_context("engine: tokenizer");
  e->tokenizer_ = std::move(tok).value();
  if (static_cast<uint32_t>(e->tokenizer_->vocab_size()) > e->cfg_.n_vocab)
    return invalid_data("engine: tokenizer has " + std::to_string(e->tokenizer_->vocab_size()) +
                        " tokens but the model's vocabulary is " + std::to_string(e->cfg_.n_vocab));

  switch (opts.backend) {
    case BackendKind::cpu: {
      backend::cpu::CpuBackendOptions bo;
      bo.n_threads = opts.n_threads;
      e->backend_ = backend::cpu::make_cpu_backend(bo);
      break;
    }
    case BackendKind::cuda: {
#ifdef DS4_HAVE_CUDA
      const backend::cuda::CudaBackendOptions co = engine_cuda_options(opts);
      auto be = backend::cuda::make_cuda_backend(co);
      if (!be.ok()) return be.status().with_context("engine");
      e->backend_ = std::move(be).value();
      {
        // Weights live on the device: refuse at once, before minutes of copying, when they cannot fit.
        const auto di = backend::cuda::device_info(*e->backend_);
        const uint64_t need = e->file_->file_size();
        if (di.total > 0 && need > di.free)
          return out_of_memory("engine: the model's " + std::to_string(need >> 20) + " MiB of weights do not fit in " +
                               std::string(di.name) + "'s " + std::to_string(di.free >> 20) + " MiB of free memory (" +
                               std::to_string(di.total >> 20) + " MiB total); use a smaller quantization or the CPU backend");
      }
      break;
#else
      return unsupported("engine: this build has no CUDA backend (configure with -DDS4_CUDA=ON)");
#endif
    }
  }
  const auto plan = modelspec::layer_plan(e->cfg_);
  DS4_ASSIGN_OR_RETURN(e->weights_, model::bind_weights(*e->file_, e->cfg_, plan, *e->backend_));
#ifdef DS4_HAVE_CUDA
  if (opts.backend == BackendKind::cuda) {
    DS4_RETURN_IF_ERROR(e->backend_->sync());  // the last weight copies land here (counted in the upload time)
    const auto us = backend::cuda::weight_upload_stats(*e->backend_);
    e->info_.upload_bytes = us.bytes;
    e->info_.upload_seconds = us.seconds;
  }
#endif

  model::ForwardOptions fo;
  fo.max_chunk = opts.max_chunk > 0 ? opts.max_chunk : default_max_chunk(opts.backend);
  fo.numerics = opts.numerics == Numerics::reference ? model::ForwardNumerics::reference()
                                                      : model::ForwardNumerics::official();
  fo.numerics.shared_expert_clamp = opts.shared_expert_clamp;
  fo.graphs = opts.cuda_graphs;
  // CUDA: each HC pre's Sinkhorn split (post, comb: read only by the next sublayer boundary) on the side lane beside
  // the sublayer (hc_split), so the decode boundary kernel ends at xn: 6.39 against 9.15 µs a boundary in a graph, and
  // 4-layer decode steps at 2K 0.804 against 0.823 … 0.833 ms, batch 8 unchanged (H200, session 11 hcb2, docs/PERF.md;
  // the same bits: CudaSmall7.HcBoundaryEqualsPostThenPre, test_cuda_model). ForwardOptions' own default leaves it off.
  if (opts.backend == BackendKind::cuda) fo.branches |= model::kBranchHcSplit;
  if (opts.l2_prefetch >= 0) fo.l2_prefetch = static_cast<uint32_t>(opts.l2_prefetch);
  fo.profile = opts.profile_steps;
  DS4_ASSIGN_OR_RETURN(e->forward_, model::Forward::create(*e->backend_, e->cfg_, e->weights_, fo));

  ModelInfo& in = e->info_;
  in.name = e->cfg_.name;
  in.architecture = e->cfg_.architecture;
  in.path = opts.model_path;
  in.n_layer = static_cast<int32_t>(e->cfg_.n_layer);
  in.n_embd = static_cast<int32_t>(e->cfg_.n_embd);
  in.n_vocab = static_cast<int32_t>(e->cfg_.n_vocab);
  in.context_length = static_cast<int64_t>(e->cfg_.context_length);
  in.max_context = opts.max_context > 0 ? opts.max_context
                                        : (in.context_length > 0 ? in.context_length : int64_t{1} << 20);
  in.file_bytes = e->file_->file_size();
  in.weight_bytes = e->weights_.mapped_bytes;
  in.quant_summary = e->weights_.quant_summary;
  const ModelIdentity id = model_identity(*e->file_, opts);
  in.kv_identity = id.hex;
  in.routed_expert_bits = id.routed_expert_bits;
  return std::unique_ptr<Engine>(std::move(e));
}

EngineImpl::~EngineImpl() = default;

Result<std::unique_ptr<Session>> EngineImpl::new_session(const SessionOptions& opts) {
  if (opts.max_context < 0) return invalid_argument("session: max_context must be >= 0");
  const int64_t limit = opts.max_context > 0 ? std::min(opts.max_context, info_.max_context) : info_.max_context;
  DS4_ASSIGN_OR_RETURN(model::KvState kv, forward_->new_state(limit));
  return std::unique_ptr<Session>(new SessionImpl(*this, std::move(kv), limit));
}

}  // namespace ds4::runtime
