// engine_graph_stats.h — the CUDA step-graph counters (backend::cuda::graph_stats) of an open Engine, for
// the GPU model tests that check decode and batched steps really replay graphs.
// Deliberately not here: any assertion (each test states what it expects).
#pragma once

#include "backend/cuda/cuda_backend.h"
#include "ds4/engine.h"
#include "runtime/engine_impl.h"

namespace ds4::test {

inline backend::cuda::GraphStats engine_graph_stats(Engine& e) {
  auto* impl = dynamic_cast<runtime::EngineImpl*>(&e);
  return impl ? backend::cuda::graph_stats(*impl->forward_backend()) : backend::cuda::GraphStats{};
}

}  // namespace ds4::test
