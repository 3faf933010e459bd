// engine_cuda_options.h — the CUDA backend options an engine runs with, in one place: EngineOptions' own CUDA
// choices plus the kernel choices the engine makes where a bare CudaBackendOptions keeps the previous kernel (the
// baseline of before/after runs). Benchmarks that measure what users run start from these, so that they follow
// the engine when its choices change.
#pragma once

#ifdef DS4_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "ds4/engine.h"

namespace ds4::runtime {

backend::cuda::CudaBackendOptions engine_cuda_options(const EngineOptions& opts = {});

}  // namespace ds4::runtime
#endif
