// cuda_prefill_stages.cpp — the non-GEMM stages of a prefill chunk and of a decode step at 2K and 32K
// context, each with the current kernels and the previous ones (issue 5: where a chunk's time goes
// besides the int8 GEMMs, and which stage grows from 2K to 32K at decode). Flash shapes:
//   attention  H 64 × D 512; CSA: 128 raw + 512 selected rows (2K: the 512 rows are every compressed
//              row; 32K: 512 of 8,192, spread); HCA: 128 raw + ctx/128 compressed rows (16 or 256);
//   indexer    64 heads × 128, scores over ctx/4 rows, top 512 (2K decode: 525 rows as cuda_bench_stages;
//              a 2K..4K chunk: 1,024);
//   compressor CSA kv (ratio 4, overlap, 512) and indexer kv (ratio 4, overlap, 128), HCA (ratio 128, 512);
//   F16 matmuls of a chunk (ds4 numerics): HC controls 24×16384, router 256×4096, CSA compressor kv
//   1024×4096, indexer q 8192×1024.
// Variants: "now" (defaults: attention on tensor cores, attention_mma.cu), "before" (attention_mma = false,
// attention_heads_per_warp = 1, indexer_v2 = false, compressor_parallel = false, f16_tiles = false: the
// kernels before the MQA attention / radix select / parallel pooling / F16 tiles),
// "previous" (attention only, attention_segments = false: one online softmax over all rows), "scalar"
// (attention only, attention_mma = false: the scalar segment order's MQA kernel, what "now" replaced).
// Timing: bench_median.h (median of 5 repetitions after a warm-up, around the backend's sync).
// Prints "PSTAGE" lines. Deliberately not here: the GEMMs (cuda_prefill_bench.cpp), correctness (tests).
#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "bench_median.h"
#include "quant/half.h"

using namespace ds4;
using namespace ds4::backend;

namespace {

// Milliseconds per call (bench_median.h's rule, synced on `be`).
double median_ms(Backend& be, const std::function<void()>& body, int iters) {
  return 1e3 * ds4::test::median_seconds(body, [&] { (void)be.sync(); }, iters);
}

}  // namespace

void bench_prefill_stages(int64_t N) {
  struct Variant {
    const char* name;
    cuda::CudaBackendOptions o;
  };
  std::vector<Variant> vars(4);
  vars[0].name = "now";
  vars[1].name = "before";
  vars[1].o.attention_mma = false;
  vars[1].o.attention_heads_per_warp = 1;
  vars[1].o.indexer_v2 = false;
  vars[1].o.compressor_parallel = false;
  vars[1].o.f16_tiles = false;
  vars[2].name = "previous";
  vars[2].o.attention_mma = false;
  vars[2].o.attention_segments = false;
  vars[3].name = "scalar";
  vars[3].o.attention_mma = false;
  std::vector<std::unique_ptr<Backend>> bes;
  for (auto& v : vars) {
    auto made = cuda::make_cuda_backend(v.o);
    if (!made.ok()) {
      std::printf("PSTAGE skipped: %s\n", made.status().to_string().c_str());
      return;
    }
    bes.push_back(std::move(made).value());
  }
  Backend& be = *bes[0];  // buffers live in be; the other backends use the same device memory
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<Buffer> keep;
  auto fbuf = [&](int64_t n) {
    keep.push_back(std::move(be.alloc(static_cast<uint64_t>(std::max<int64_t>(n, 1)) * 4, MemCategory::scratch)).value());
    return keep.back().f32();
  };
  auto frand = [&](int64_t n, float sc) {
    std::vector<float> h(static_cast<size_t>(n));
    for (auto& v : h) v = sc * nd(rng);
    float* d = fbuf(n);
    be.upload(d, h.data(), h.size() * 4);
    return d;
  };
  auto ibuf = [&](const std::vector<int32_t>& h) {
    int32_t* d = reinterpret_cast<int32_t*>(fbuf(static_cast<int64_t>(h.size())));
    be.upload(d, h.data(), h.size() * 4);
    return d;
  };

  const int H = 64, D = 512, W = 128, TK = 512, IH = 64, ID = 128;
  const int64_t nq = N;
  float* q = frand(nq * H * D, 0.2f);
  float* out = fbuf(nq * H * D);
  float* sinks = frand(H, 1.0f);
  const int64_t cap = W + nq;
  // KV rows rounded through f16, as the cache holds them (MODEL.md §5.6): the MMA order multiplies such
  // rows with two TF32 products per block, arbitrary floats with three.
  auto frand_f16 = [&](int64_t n) {
    std::vector<float> h(static_cast<size_t>(n));
    for (auto& v : h) v = f16_to_f32(f32_to_f16(nd(rng)));
    float* d = fbuf(n);
    be.upload(d, h.data(), h.size() * 4);
    return d;
  };
  float* raw = frand_f16(cap * D);
  float* comp = frand_f16(int64_t{8192} * D);

  for (int64_t ctx : {int64_t{2048}, int64_t{32768}}) {
    const char* cn = ctx == 2048 ? "2K" : "32K";
    for (int64_t n : {nq, int64_t{1}}) {
      std::vector<int32_t> pos(n), csa_cnt(n, TK), hca_cnt(n, static_cast<int32_t>(ctx / 128)), idx(n * TK);
      const int64_t comp_rows = ctx / 4;
      for (int64_t i = 0; i < n; ++i) {
        pos[i] = static_cast<int32_t>(ctx + i);
        for (int j = 0; j < TK; ++j)  // sorted, distinct, spread over the compressed rows
          idx[i * TK + j] = comp_rows <= TK ? j : static_cast<int32_t>(j * (comp_rows / TK) + (i * 7 + j * 13) % (comp_rows / TK));
      }
      int32_t *dpos = ibuf(pos), *dcsa = ibuf(csa_cnt), *dhca = ibuf(hca_cnt), *didx = ibuf(idx);
      for (bool csa : {true, false}) {
        AttentionArgs a;
        a.q = q;
        a.pos = dpos;
        a.n = n;
        a.heads = H;
        a.head_dim = D;
        a.scale = 0.044f;
        a.sinks = sinks;
        a.raw = raw;
        a.raw_cap = cap;
        a.window = W;
        a.comp = comp;
        a.comp_count = csa ? dcsa : dhca;
        a.comp_idx = csa ? didx : nullptr;
        a.comp_idx_stride = TK;
        a.max_comp = csa ? TK : ctx / 128;
        a.out = out;
        std::printf("PSTAGE attention %-3s ctx=%-3s n=%-5lld rows=%-4lld", csa ? "CSA" : "HCA", cn,
                    static_cast<long long>(n), static_cast<long long>(W + (csa ? TK : ctx / 128)));
        for (size_t v = 0; v < vars.size(); ++v) {
          Backend& b = *bes[v];
          const double ms = median_ms(b, [&] { b.attention(a); }, n > 1 ? 3 : 20);
          std::printf("  %s %9.1f us", vars[v].name, ms * 1e3);
        }
        std::printf("\n");
      }
      {  // indexer: a chunk at 2K (rows of a 2K..4K chunk: 1,024) and 32K; decode at 2K (525) and 32K
        const int32_t rows_n = static_cast<int32_t>(n > 1 ? (ctx == 2048 ? 1024 : ctx / 4) : (ctx == 2048 ? 525 : ctx / 4));
        float* iq = frand(n * IH * ID, 1.0f);
        float* iw = frand(n * IH, 0.1f);
        float* irows = frand(int64_t{rows_n} * ID, 1.0f);
        int32_t* nr = ibuf(std::vector<int32_t>(n, rows_n));
        int32_t* oidx = reinterpret_cast<int32_t*>(fbuf(n * TK));
        int32_t* ocnt = reinterpret_cast<int32_t*>(fbuf(n));
        IndexerArgs ia{iq, iw, irows, nr, n, IH, ID, TK, oidx, ocnt};
        ia.max_rows = rows_n;
        std::printf("PSTAGE indexer   top512 ctx=%-3s n=%-5lld rows=%-5d", cn, static_cast<long long>(n), rows_n);
        for (size_t v = 0; v < 2; ++v) {
          Backend& b = *bes[v];
          const double ms = median_ms(b, [&] { b.indexer(ia); }, n > 1 ? 3 : 20);
          std::printf("  %s %9.1f us", vars[v].name, ms * 1e3);
        }
        std::printf("\n");
      }
    }
  }
  {  // F16 matmuls of a chunk (weights: small random values; the bits do not matter for speed)
    struct F16 {
      const char* name;
      int64_t rows, cols;
    };
    float* x = frand(nq * 16384, 1.0f);
    float* y = fbuf(nq * 8192);
    for (F16 f : {F16{"HC 24x16384", 24, 16384}, F16{"router 256x4096", 256, 4096}, F16{"CSA kv 1024x4096", 1024, 4096},
                  F16{"indexer q 8192x1024", 8192, 1024}}) {
      std::vector<uint16_t> wh(static_cast<size_t>(f.rows * f.cols));
      for (auto& h : wh) h = static_cast<uint16_t>(0x2000 + (rng() & 0x0fff));  // small positive halves
      keep.push_back(std::move(be.alloc(wh.size() * 2, MemCategory::scratch)).value());
      be.upload(keep.back().data(), wh.data(), wh.size() * 2);
      Weight w{GgmlType::F16, keep.back().data(), f.rows, f.cols, static_cast<uint64_t>(f.cols) * 2};
      std::printf("PSTAGE f16 %-20s n=%-5lld", f.name, static_cast<long long>(nq));
      double ms_now = 0;
      for (size_t v = 0; v < 2; ++v) {
        Backend& b = *bes[v];
        const double ms = median_ms(b, [&] { b.matmul({w, x, f.cols, y, f.rows, nq, MatmulNumerics::ds4}); }, 3);
        if (v == 0) ms_now = ms;
        std::printf("  %s %9.1f us", vars[v].name, ms * 1e3);
      }
      std::printf("  (now %.2f TMAC/s)\n", static_cast<double>(f.rows) * f.cols * nq / (ms_now * 1e-3) / 1e12);
    }
  }
  {  // compressors of a chunk (CSA kv, indexer kv, HCA kv) at context 2K
    struct Comp {
      const char* name;
      int32_t ratio, out_dim, slots;
      bool overlap;
    };
    for (Comp c : {Comp{"CSA kv r4 512", 4, 512, 16, true}, Comp{"indexer kv r4 128", 4, 128, 16, true},
                   Comp{"HCA kv r128 512", 128, 512, 256, false}}) {
      const int64_t width = (c.overlap ? 2 : 1) * int64_t{c.out_dim};
      float* kv = frand(nq * width, 1.0f);
      float* sc = frand(nq * width, 1.0f);
      float* ape = frand(int64_t{c.ratio} * width, 0.1f);
      float* st_kv = fbuf(int64_t{c.slots} * width);
      float* st_sc = fbuf(int64_t{c.slots} * width);
      float* cout = fbuf((nq / c.ratio + 2) * c.out_dim);
      int32_t* cpos = reinterpret_cast<int32_t*>(fbuf(nq / c.ratio + 2));
      int64_t emitted = 0;
      CompressorArgs a;
      a.kv = kv;
      a.score = sc;
      a.ape = ape;
      a.n = nq;
      a.pos0 = 2048;
      a.ratio = c.ratio;
      a.out_dim = c.out_dim;
      a.overlap = c.overlap;
      a.slots = c.slots;
      a.state_kv = st_kv;
      a.state_score = st_sc;
      a.out = cout;
      a.out_pos = cpos;
      a.n_out = &emitted;
      std::printf("PSTAGE compressor %-18s n=%-5lld", c.name, static_cast<long long>(nq));
      for (size_t v = 0; v < 2; ++v) {
        Backend& b = *bes[v];
        const double ms = median_ms(b, [&] { b.compressor(a); }, 3);
        std::printf("  %s %9.1f us", vars[v].name, ms * 1e3);
      }
      std::printf("\n");
    }
  }
}
