// cuda_bench_folds.cpp — `cuda_bench --folds A B`: Backend's op pairs (launch_folds.cpp) on two backends that
// differ only in CudaBackendOptions::launch_folds (A, B; the engine's F16 order on both), graph µs per call
// (StageBench, 20 calls a graph) and launches per call (a fold taken shows one launch less), at Flash's decode shapes:
// the router's logits (F16 256 × 4096) and its top-6 selection, n = 1, 2, 4; q_a (Q8_0 1024 × 4096) and its RMSNorm in
// place, n = 1, 2. The two sides interleaved twice (drift shows). "BENCH folds" lines. Session 13 measured its folds
// with it (the router's top-k in the logits kernel, q_a's norm in its matmul, the logits as a programmatic dependent:
// none faster on whole steps, all removed — docs/PERF.md); today every value runs the two ops, and the bench stays as
// the pairs' baseline for the next attempt.
// Deliberately not here: correctness (the op tests), whole decode steps (`cuda_bench --fold-steps`,
// cuda_bench_branches.cpp: what decides a default).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "stage_bench.h"

using namespace ds4;
using namespace ds4::backend;
using namespace ds4::bench;

namespace {

// One backend's buffers for the pairs at up to kMaxN tokens.
struct FoldSide {
  static constexpr int64_t kE = 4096, kNE = 256, kK = 6, kMaxN = 4, kQ = 1024;
  Backend* be = nullptr;
  std::unique_ptr<StageBench> sb;
  Weight router, q_a;
  float *x, *logits, *bias, *weights, *qa, *qa_norm;
  int32_t* ids;

  explicit FoldSide(Backend& b) : be(&b), sb(std::make_unique<StageBench>(b)) {
    StageBench& s = *sb;
    router = s.weight(GgmlType::F16, kNE, kE);
    q_a = s.weight(GgmlType::Q8_0, kQ, kE);
    qa = s.buf(kMaxN * kQ);
    qa_norm = s.buf(kQ, 1.0f);
    x = s.buf(kMaxN * kE, 0.05f);
    logits = s.buf(kMaxN * kNE);
    bias = s.buf(kNE, 0.001f);
    weights = s.buf(kMaxN * kK);
    ids = s.ibuf(std::vector<int32_t>(kMaxN * kK, 0));
  }

  void router_pair(int64_t n) {
    RouterArgs a;
    a.logits = logits;
    a.bias = bias;
    a.n = n;
    a.n_expert = static_cast<int32_t>(kNE);
    a.k = static_cast<int32_t>(kK);
    a.scale = 1.5f;
    a.denom_guard = 1.0f / 16384;
    a.ids = ids;
    a.weights = weights;
    be->router_logits({router, x, kE, logits, kNE, n, MatmulNumerics::ds4}, a);
  }
  void q_a_pair(int64_t n) {
    be->matmul_rms_norm({q_a, x, kE, qa, kQ, n, MatmulNumerics::ds4}, {qa, qa, qa_norm, n, kQ, kQ, 1e-6f});
  }
};

}  // namespace

void bench_folds(int argc, char** argv) {
  const int vals[2] = {argc > 0 ? std::atoi(argv[0]) : 0, argc > 1 ? std::atoi(argv[1]) : 0};
  std::unique_ptr<Backend> bes[2];
  for (int k = 0; k < 2; ++k) {
    cuda::CudaBackendOptions o;
    o.f16_mma = true;  // the engine's (EngineOptions::cuda_f16_mma)
    o.launch_folds = vals[k];
    auto made = cuda::make_cuda_backend(o);
    if (!made.ok()) {
      std::printf("BENCH folds: backend %d: %s\n", vals[k], made.status().to_string().c_str());
      return;
    }
    bes[k] = std::move(made).value();
  }
  FoldSide sides[2] = {FoldSide(*bes[0]), FoldSide(*bes[1])};
  std::printf("BENCH folds graph us per call (20 calls a graph): launch_folds %d | %d\n", vals[0], vals[1]);
  for (int64_t n : {1, 2, 4})
    for (int round = 0; round < 2; ++round) {
      StageTime t[2];
      for (int k = 0; k < 2; ++k) t[k] = sides[k].sb->time([&] { sides[k].router_pair(n); }, 20);
      std::printf("BENCH folds router 256x4096 + top-6, n = %lld round %d: folds %2d %7.2f us (%.0f launches) | folds %2d "
                  "%7.2f us (%.0f launches)\n",
                  static_cast<long long>(n), round + 1, vals[0], t[0].graph_us, t[0].launches, vals[1], t[1].graph_us,
                  t[1].launches);
    }
  for (int64_t n : {1, 2})
    for (int round = 0; round < 2; ++round) {
      StageTime t[2];
      for (int k = 0; k < 2; ++k) t[k] = sides[k].sb->time([&] { sides[k].q_a_pair(n); }, 20);
      std::printf("BENCH folds q_a 1024x4096 + norm, n = %lld round %d: folds %2d %7.2f us (%.0f launches) | folds %2d "
                  "%7.2f us (%.0f launches)\n",
                  static_cast<long long>(n), round + 1, vals[0], t[0].graph_us, t[0].launches, vals[1], t[1].graph_us,
                  t[1].launches);
    }
  for (int k = 0; k < 2; ++k)
    if (!bes[k]->sync().ok()) std::printf("BENCH folds: launch_folds %d: %s\n", vals[k], bes[k]->sync().to_string().c_str());
}
