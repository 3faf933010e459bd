// cuda_bench_dattn.cpp — `cuda_bench --dattn [A B]`: one decode query's attention with its output RoPE (the engine's
// call: attn_out_rope on) on two backends that differ only in CudaBackendOptions::attention_mma_kernels (default 10:
// the split kernel then the sliced merge, and 31: the merge a programmatic dependent of the split kernel, attention_mma.cu), graph µs per call
// (StageBench, 20 calls a graph) and launches per call, at Flash's decode shapes (64 heads × 512, window 128): CSA
// (128 raw + 512 selected: 20 segments) and HCA (128 raw + ctx/128 compressed: 5 segments at 2K, 12 at 32K) at
// contexts 2K and 32K. The two sides interleaved twice (drift shows). "BENCH dattn" lines. `--dattn A B chain`: each call
// is the main lane's chain, the q norm + RoPE (in place, unweighted) and then attention — what 37's split kernel, a
// programmatic dependent of the norm, overlaps.
// Deliberately not here: correctness (test_cuda_attention.cpp, test_cuda_small7.cpp), whole decode steps
// (`cuda_bench --dattn-steps`, cuda_bench_branches.cpp).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "stage_bench.h"

using namespace ds4;
using namespace ds4::backend;
using namespace ds4::bench;

namespace {

// One backend's buffers for the four shapes (comp: 8,192 rows = 32K context's CSA rows; HCA reads its first ones).
struct DattnSide {
  static constexpr int64_t kH = 64, kD = 512, kR = 64, kWindow = 128, kCap = kWindow + 255, kTopK = 512, kComp = 8192;
  Backend* be = nullptr;
  std::unique_ptr<StageBench> sb;
  float *q, *raw, *comp, *sinks, *out;
  int32_t *pos2k, *pos32k, *csa_cnt, *hca2k_cnt, *hca32k_cnt, *sel2k, *sel32k;

  explicit DattnSide(Backend& b) : be(&b), sb(std::make_unique<StageBench>(b)) {
    StageBench& s = *sb;
    q = s.buf(kH * kD, 0.05f);
    raw = s.buf(kCap * kD, 0.05f);
    comp = s.buf(kComp * kD, 0.05f);
    sinks = s.buf(kH, 0.1f);
    out = s.buf(kH * kD);
    pos2k = s.ibuf({2101});
    pos32k = s.ibuf({32768});
    csa_cnt = s.ibuf({static_cast<int32_t>(kTopK)});
    hca2k_cnt = s.ibuf({2102 / 128});
    hca32k_cnt = s.ibuf({32769 / 128});
    std::vector<int32_t> a(kTopK), b2(kTopK);
    for (int64_t j = 0; j < kTopK; ++j) {
      a[static_cast<size_t>(j)] = static_cast<int32_t>((j * 2 + 1) % 525);          // 2K: 525 compressed rows
      b2[static_cast<size_t>(j)] = static_cast<int32_t>(j * 16 + (j * 7) % 16);     // 32K: 512 of 8,192 spread
    }
    sel2k = s.ibuf(a);
    sel32k = s.ibuf(b2);
  }

  void attention(bool csa, bool ctx32k, const std::vector<double>& freq, bool chain = false) {
    if (chain) be->norm_rope({q, ctx32k ? pos32k : pos2k, 1, static_cast<int32_t>(kH), static_cast<int32_t>(kD),
                              static_cast<int32_t>(kR), nullptr, 1e-6f, freq.data()});
    AttentionArgs a;
    a.q = q;
    a.pos = ctx32k ? pos32k : pos2k;
    a.n = 1;
    a.heads = static_cast<int32_t>(kH);
    a.head_dim = static_cast<int32_t>(kD);
    a.scale = 0.044f;
    a.sinks = sinks;
    a.raw = raw;
    a.raw_cap = kCap;
    a.window = static_cast<int32_t>(kWindow);
    a.comp = comp;
    a.comp_count = csa ? csa_cnt : ctx32k ? hca32k_cnt : hca2k_cnt;
    a.comp_idx = csa ? (ctx32k ? sel32k : sel2k) : nullptr;
    a.comp_idx_stride = kTopK;
    a.out = out;
    a.max_comp = csa ? static_cast<int32_t>(kTopK) : ctx32k ? 32769 / 128 : 2102 / 128;  // the forward's host bound
    a.out_rot = static_cast<int32_t>(kR);
    a.out_freq = freq.data();
    be->attention(a);
  }
};

}  // namespace

void bench_dattn(int argc, char** argv) {
  const int vals[2] = {argc > 0 ? std::atoi(argv[0]) : 10, argc > 1 ? std::atoi(argv[1]) : 31};
  const bool chain = argc > 2 && std::string(argv[2]) == "chain";
  std::unique_ptr<Backend> bes[2];
  for (int k = 0; k < 2; ++k) {
    cuda::CudaBackendOptions o;
    o.f16_mma = true;  // the engine's (EngineOptions::cuda_f16_mma)
    o.attn_out_rope = 1;
    o.attention_mma_kernels = vals[k];
    auto made = cuda::make_cuda_backend(o);
    if (!made.ok()) {
      std::printf("BENCH dattn: backend %d: %s\n", vals[k], made.status().to_string().c_str());
      return;
    }
    bes[k] = std::move(made).value();
  }
  std::vector<double> freq(DattnSide::kR / 2);
  for (int i = 0; i < DattnSide::kR / 2; ++i) freq[static_cast<size_t>(i)] = std::pow(10000.0, -2.0 * i / DattnSide::kR);
  DattnSide sides[2] = {DattnSide(*bes[0]), DattnSide(*bes[1])};
  struct Case {
    const char* name;
    bool csa, ctx32k;
  };
  const Case cases[] = {{"CSA 2K (128 raw + 512 sel)", true, false},
                        {"HCA 2K (128 raw + 16)", false, false},
                        {"CSA 32K (128 raw + 512 of 8192)", true, true},
                        {"HCA 32K (128 raw + 256)", false, true}};
  const char* tag = chain ? "dattn-chain" : "dattn";
  std::printf("BENCH %s %s, n = 1, graph us per call (20 calls a graph): kernels %d | %d\n", tag,
              chain ? "q norm + rope, attention + out rope" : "attention + out rope", vals[0], vals[1]);
  for (const Case& c : cases)
    for (int round = 0; round < 2; ++round) {
      StageTime t[2];
      for (int k = 0; k < 2; ++k) t[k] = sides[k].sb->time([&] { sides[k].attention(c.csa, c.ctx32k, freq, chain); }, 20);
      std::printf("BENCH %s %-34s round %d: kernels %2d %7.2f us (%.0f launches) | kernels %2d %7.2f us (%.0f launches)\n",
                  tag, c.name, round + 1, vals[0], t[0].graph_us, t[0].launches, vals[1], t[1].graph_us, t[1].launches);
    }
  for (int k = 0; k < 2; ++k)
    if (!bes[k]->sync().ok()) std::printf("BENCH dattn: kernels %d: %s\n", vals[k], bes[k]->sync().to_string().c_str());
}
