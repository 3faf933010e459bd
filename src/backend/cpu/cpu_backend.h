// cpu_backend.h — the CPU reference backend: every op of backend.h as plain loops over a thread pool.
//
// It is the oracle for the CUDA backend and for the tiny-model golden tests, so readability wins
// over speed: no SIMD intrinsics, one loop nest per op, shapes in comments. Owns its thread pool and
// the scratch it needs (activation-quantization blocks, per-thread score rows), grown only when a
// larger op than any before arrives.
// Deliberately not here: model structure (src/model), session state (src/runtime).
#pragma once

#include <memory>

#include "backend/backend.h"

namespace ds4::backend::cpu {

struct CpuBackendOptions {
  int n_threads = 0;  // 0 = std::thread::hardware_concurrency()
};

std::unique_ptr<Backend> make_cpu_backend(const CpuBackendOptions& opts = {});

}  // namespace ds4::backend::cpu
