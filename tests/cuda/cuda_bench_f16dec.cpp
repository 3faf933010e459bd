// cuda_bench_f16dec.cpp — `cuda_bench --f16dec`: the decode F16 matmuls in the F16 MMA order per
// CudaBackendOptions::f16_mma_decode_kernel (0: the register-direct decode kernel; 1 / 2: the streaming ring
// kernel, tiles by a counter / static; 3: 1 plus the small launches' activations loaded before the chain; 4: 3 with
// those as programmatic dependents; 5, 6: 3 with 2 or 3 ring blocks per multiprocessor; 7 … 9: the ring with 2-D
// tensor copies, tiles by a counter / static / by a counter at 2 blocks per multiprocessor), as device time
// per call: a CSA layer's six projections (matmul_many, 36.5 MB) at n = 1 and 8, and the router (256 × 4096)
// at n = 1. Calls cycle through distinct weight sets of > 128 MB in all (a decode step never finds a layer's
// weights in L2, and neither do these calls); 48 calls are recorded into one step graph and replayed 5
// times between device time marks (median) — kernel time plus the graph's gaps, as in a decode step.
// `cuda_bench --f16dec [K,K…]`: only those kernels (default 0 … 9). "BENCH f16dec" lines. Deliberately not here: correctness (test_cuda_f16_mma.cpp), whole steps
// (`cuda_bench --f16dec-steps`, cuda_bench_branches.cpp).
#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "bench_graph.h"

using namespace ds4;
using namespace ds4::backend;
using ds4::test::graph_median_us;

void bench_f16dec_calls(const std::vector<int>& kernels) {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  struct Shape {
    int64_t rows, cols;
  };
  const Shape csa[] = {{1024, 4096}, {1024, 4096}, {256, 4096}, {256, 4096}, {8192, 1024}, {64, 4096}};
  constexpr int kCsaSets = 4, kRouterSets = 64, kCalls = 48;
  // Host weights once (random finite F16 values of magnitude 2^-7 … 2^-6, sign random: cheap bits; every byte
  // is read), mapped by each backend.
  uint32_t state = 12345u;
  auto host_weight = [&](int64_t rows, int64_t cols) {
    std::vector<uint16_t> h(static_cast<size_t>(rows * cols));
    for (auto& v : h) {
      state ^= state << 13, state ^= state >> 17, state ^= state << 5;
      v = static_cast<uint16_t>((state & 0x83ffu) | 0x2000u);
    }
    return h;
  };
  std::vector<std::vector<uint16_t>> hcsa, hrouter;
  for (int s = 0; s < kCsaSets; ++s)
    for (const Shape& sh : csa) hcsa.push_back(host_weight(sh.rows, sh.cols));
  for (int s = 0; s < kRouterSets; ++s) hrouter.push_back(host_weight(256, 4096));
  std::vector<float> xh(8 * 4096);
  for (auto& v : xh) v = nd(rng);
  for (int kernel : kernels) {
    cuda::CudaBackendOptions co;
    co.f16_mma = true;
    co.f16_mma_decode_kernel = kernel;
    auto made = cuda::make_cuda_backend(co);
    if (!made.ok()) {
      std::printf("BENCH f16dec skipped: %s\n", made.status().to_string().c_str());
      return;
    }
    auto be = std::move(made).value();
    auto map = [&](const std::vector<uint16_t>& h, int64_t rows, int64_t cols) {
      Weight w{GgmlType::F16, nullptr, rows, cols, static_cast<uint64_t>(cols) * 2};
      auto p = be->map_weight(h.data(), h.size() * 2);
      w.data = p.ok() ? *p : nullptr;
      return w;
    };
    std::vector<Weight> wcsa, wrouter;
    for (int s = 0; s < kCsaSets; ++s)
      for (size_t k = 0; k < std::size(csa); ++k) wcsa.push_back(map(hcsa[s * std::size(csa) + k], csa[k].rows, csa[k].cols));
    for (int s = 0; s < kRouterSets; ++s) wrouter.push_back(map(hrouter[s], 256, 4096));
    auto fbuf = [&](int64_t n) { return std::move(be->alloc(static_cast<uint64_t>(n) * 4, MemCategory::scratch)).value(); };
    Buffer x = fbuf(8 * 4096), y = fbuf(8 * 8192 * 6);
    be->upload(x.data(), xh.data(), xh.size() * 4);
    int64_t graph_key = 100;
    auto graph_us = [&](const std::function<void(int)>& call) { return graph_median_us(*be, ++graph_key, kCalls, call); };
    for (int64_t n : {1, 8}) {
      auto many = [&](int i) {
        std::vector<MatmulArgs> jobs;
        float* out = y.f32();
        for (size_t k = 0; k < std::size(csa); ++k) {
          const Weight& w = wcsa[(i % kCsaSets) * std::size(csa) + k];
          jobs.push_back({w, x.f32(), w.cols, out, w.rows, n, MatmulNumerics::ds4});
          out += n * w.rows;
        }
        be->matmul_many(jobs);
      };
      std::printf("BENCH f16dec kernel %d csa matmul_many n=%lld: %.2f us/call (graph, %d weight sets)\n", kernel,
                  static_cast<long long>(n), graph_us(many), kCsaSets);
      std::fflush(stdout);
    }
    auto router = [&](int i) {
      const Weight& w = wrouter[i % kRouterSets];
      be->matmul({w, x.f32(), 4096, y.f32(), 256, 1, MatmulNumerics::ds4});
    };
    std::printf("BENCH f16dec kernel %d router 256x4096 n=1: %.2f us/call (graph, %d weight sets)\n", kernel,
                graph_us(router), kRouterSets);
    std::printf("BENCH f16dec kernel %d status: %s\n", kernel, be->sync().to_string().c_str());
    std::fflush(stdout);
  }
}
