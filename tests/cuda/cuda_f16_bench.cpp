// cuda_f16_bench.cpp — `cuda_prefill_bench N f16`: the F16 matmuls (ds4 numerics) in the scalar segment
// order (matmul_f16.cu, the default) and in the MMA order (CudaBackendOptions::f16_mma, matmul_f16_mma.cu),
// "PBENCH f16" lines. N ≥ 64: a prefill chunk of N tokens at each Flash F16 shape (ms, TFLOP/s of the
// useful products) and the chunk's F16 total, each shape weighted by its calls per 2,048-token chunk of
// the 43-layer model (kernels.txt of the session-6 profile: HC controls 86, router + indexer compressor
// 85, compressor 42, indexer q_b 21, HCA compressor 40, indexer weights 21). N < 64: decode-shaped calls of
// N tokens — the router, the HC pre (spread kernels), a CSA layer's matmul_many — host-timed back to back
// (launch-bound at N = 1: run under ncu for the kernel times; `f16prof`: 6 calls each, for ncu) and as
// device time per call of 50 calls replayed from one step graph; three paths: the segment order, the MMA
// order with matmul_f16_mma.cu's decode tiles, and with matmul_f16_mma_decode.cu (`f16sweep`: also each
// of its fixed launch shapes, split rows combined by the counter instead of clusters, and programmatic
// dependent launches). N ≥ 64 also times the prefill tiles' launch shapes (f16_mma_tiles_launch_shape),
// "PBENCH tileS" lines.
// Method (METHOD.md): bench_median.h — one warm-up, the median of 5 repetitions of `iters` calls.
// Deliberately not here: correctness (test_cuda_f16_mma.cpp), the other prefill stages.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include <cuda_runtime.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/matmul_f16_mma_tiles.h"
#include "bench_graph.h"
#include "bench_median.h"
#include "quant/half.h"

using namespace ds4;
using namespace ds4::backend;
using ds4::test::graph_median_us;
using ds4::test::median_seconds;

void bench_f16(int64_t N, bool profile, bool sweep, bool shapes_only) {
  const int iters = profile ? 1 : 200;  // profile: few launches, for ncu
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  struct Shape {
    const char* name;
    int64_t rows, cols, per_chunk;
  };
  const Shape shapes[] = {{"hc 24x16384", 24, 16384, 86},         {"router 256x4096", 256, 4096, 85},
                          {"comp 1024x4096", 1024, 4096, 42},     {"idx q_b 8192x1024", 8192, 1024, 21},
                          {"comp 512x4096", 512, 4096, 40},       {"idx 64x4096", 64, 4096, 21},
                          {"head hc 4x16384", 4, 16384, 0}};
  // Paths: the segment order; the MMA order with matmul_f16_mma_decode.cu ("f16-mma", launch shape by
  // shape) and (N < 64) with matmul_f16_mma.cu's decode tiles ("f16-mma-t", f16_mma_decode = false), or with
  // `sweep` instead fixed launch shapes of the former ("mma-rR-sS": R-row tiles, S segments per block).
  struct Path {
    const char* name;
    bool mma, decode;
    int rows, segs;
    bool pdl = false, cluster = true;  // CudaBackendOptions::f16_mma_pdl, f16_mma_cluster (the defaults)
  };
  std::vector<Path> paths = {{"f16-seg", false, false, 0, 0}, {"f16-mma", true, true, 0, 0}};
  if (shapes_only) paths.erase(paths.begin());  // `f16shapes`: the MMA order's prefill launch shapes only
  if (N < 64 && !sweep) paths.push_back({"f16-mma-t", true, false, 0, 0});
  if (N < 64 && sweep) {
    for (auto [r, sg] : {std::pair<int, int>{16, 4}, {16, 1}, {8, 1}}) {
      static const char* kNames[] = {"mma-r16-s4", "mma-r16-s1", "mma-r8-s1"};
      paths.push_back({kNames[paths.size() - 2], true, true, r, sg});
    }
    paths.push_back({"mma-counter", true, true, 0, 0, false, false});  // by shape, split rows by the counter
    paths.push_back({"mma-pdl", true, true, 0, 0, true, true});        // by shape, programmatic dependents
  }
  for (const Path& pa : paths) {
    cuda::CudaBackendOptions co;
    co.f16_mma = pa.mma;
    co.f16_mma_pdl = pa.pdl;
    co.f16_mma_cluster = pa.cluster;
    co.f16_mma_decode = pa.decode;
    co.f16_mma_decode_rows = pa.rows;
    co.f16_mma_decode_segs = pa.segs;
    auto made = cuda::make_cuda_backend(co);
    if (!made.ok()) {
      std::printf("PBENCH skipped: %s\n", made.status().to_string().c_str());
      return;
    }
    auto be = std::move(made).value();
    const char* path = pa.name;
    // Decode calls: device µs per call, `graph_iters` calls recorded into one step graph (as decode steps
    // replay them) and replayed 5 times between device time marks (median); the host-timed figure is
    // launch-bound at N = 1.
    int64_t graph_key = 0;
    auto graph_us = [&](const std::function<void()>& body) {
      return graph_median_us(*be, ++graph_key, profile ? 1 : 50, [&](int) { body(); });
    };
    auto sync = [&] { (void)be->sync(); };
    auto fbuf = [&](int64_t n) { return std::move(be->alloc(static_cast<uint64_t>(n) * 4, MemCategory::scratch)).value(); };
    auto weight = [&](int64_t rows, int64_t cols, std::vector<std::vector<uint16_t>>& keep) {
      keep.emplace_back(static_cast<size_t>(rows * cols));
      for (auto& h : keep.back()) h = f32_to_f16(0.01f * nd(rng));
      Weight w{GgmlType::F16, nullptr, rows, cols, static_cast<uint64_t>(cols) * 2};
      auto p = be->map_weight(keep.back().data(), keep.back().size() * 2);
      w.data = p.ok() ? *p : nullptr;
      return w;
    };
    std::vector<std::vector<uint16_t>> keep;
    const int64_t xn = std::max<int64_t>(N, 1) * 16384;
    std::vector<float> xh(static_cast<size_t>(xn));
    for (auto& v : xh) v = nd(rng);
    Buffer x = fbuf(xn), y = fbuf(std::max<int64_t>(N, 1) * 8192 * 2), flat = fbuf(xn);
    be->upload(x.data(), xh.data(), xh.size() * 4);
    if (N >= 64 && profile && shapes_only) {  // `f16shapesprof`: each Flash shape once on the defaults (for ncu)
      for (const Shape& s : shapes) {
        Weight w = weight(s.rows, s.cols, keep);
        be->matmul({w, x.f32(), s.cols, y.f32(), s.rows, N});
        sync();
      }
      continue;
    }
    if (N >= 64) {
      double chunk_ms = 0;
      for (const Shape& s : shapes) {
        Weight w = weight(s.rows, s.cols, keep);
        const double t = median_seconds([&] { be->matmul({w, x.f32(), s.cols, y.f32(), s.rows, N}); }, sync, 5);
        chunk_ms += t * 1e3 * s.per_chunk * 2048.0 / static_cast<double>(N);
        std::printf("PBENCH %-8s f16 %-20s n=%-5lld %9.3f ms  %7.1f TFLOP/s\n", path, s.name, static_cast<long long>(N),
                    t * 1e3, 2.0 * s.rows * s.cols * N / t / 1e12);
      }
      std::printf("PBENCH %-8s f16 chunk total (2,048 tokens, 43 layers' calls)  %9.2f ms\n", path, chunk_ms);
      if (!pa.mma) continue;
      // The prefill tiles' launch shapes (matmul_f16_mma_tiles.cu f16_mma_tiles_launch_shape; 0 = the
      // default), launched directly on the legacy stream, twice in turn: the tile shapes' chunk totals.
      std::vector<Weight> tw;
      for (const Shape& s : shapes) tw.push_back(s.rows >= 256 ? weight(s.rows, s.cols, keep) : Weight{});
      (void)be->sync();
      for (int rep = 0; rep < 2; ++rep)
        for (int shape : {7, 10, 12, 14, 21}) {  // (the "f16-mma" lines above: the default)
          double tiles_ms = 0;
          for (size_t k = 0; k < std::size(shapes); ++k) {
            const Shape& s = shapes[k];
            const Weight& w = tw[k];
            if (s.rows < 256) continue;
            cuda::GemvJob j;
            j.w = w;
            j.x = x.f32();
            j.x_stride = s.cols;
            j.y = y.f32();
            j.y_stride = s.rows;
            j.n_vec = N;
            if (!cuda::f16_mma_tiles_support(j)) continue;
            const double t = median_seconds([&] { (void)cuda::f16_mma_tiles_launch_shape(j, nullptr, shape); },
                                            [] { (void)cudaDeviceSynchronize(); }, 5);
            tiles_ms += t * 1e3 * s.per_chunk * 2048.0 / static_cast<double>(N);
            std::printf("PBENCH tile%d    f16 %-20s n=%-5lld %9.3f ms  %7.1f TFLOP/s\n", shape, s.name,
                        static_cast<long long>(N), t * 1e3, 2.0 * s.rows * s.cols * N / t / 1e12);
          }
          std::printf("PBENCH tile%d    f16 tiles total (2,048 tokens, 43 layers' calls)  %9.2f ms (%s)\n", shape,
                      tiles_ms, cudaGetErrorString(cudaGetLastError()));
        }
      // The few-row prefill shapes (matmul_f16_mma.cu f16_mma_few_rows_launch_shape: the HC controls, the
      // indexer weights), twice in turn: "PBENCH rowsS" lines.
      for (int rep = 0; rep < 2; ++rep)
        for (int shape : {0, 4, 5}) {
          double rows_ms = 0;
          for (size_t k = 0; k < std::size(shapes); ++k) {
            const Shape& s = shapes[k];
            if (s.rows >= 256 || s.per_chunk == 0) continue;
            if (rep == 0 && shape == 0) tw[k] = weight(s.rows, s.cols, keep);
            cuda::GemvJob j;
            j.w = tw[k];
            j.x = x.f32();
            j.x_stride = s.cols;
            j.y = y.f32();
            j.y_stride = s.rows;
            j.n_vec = N;
            if (!cuda::f16_mma_few_rows_support(j)) continue;
            const double t = median_seconds([&] { (void)cuda::f16_mma_few_rows_launch_shape(j, nullptr, shape); },
                                            [] { (void)cudaDeviceSynchronize(); }, 5);
            rows_ms += t * 1e3 * s.per_chunk * 2048.0 / static_cast<double>(N);
            std::printf("PBENCH rows%d    f16 %-20s n=%-5lld %9.3f ms  %7.1f TFLOP/s\n", shape, s.name,
                        static_cast<long long>(N), t * 1e3, 2.0 * s.rows * s.cols * N / t / 1e12);
          }
          std::printf("PBENCH rows%d    f16 few-row total (2,048 tokens, 43 layers' calls)  %9.2f ms (%s)\n", shape,
                      rows_ms, cudaGetErrorString(cudaGetLastError()));
        }
      continue;
    }
    // Decode-shaped calls of N tokens.
    Weight router = weight(256, 4096, keep);
    auto rcall = [&] { be->matmul({router, x.f32(), 4096, y.f32(), 256, N}); };
    const double tr = median_seconds(rcall, sync, iters);
    std::printf("PBENCH %-10s f16 decode router 256x4096 n=%-3lld %8.2f us  graph %7.2f us\n", path,
                static_cast<long long>(N), tr * 1e6, graph_us(rcall));
    Weight head = weight(4, 16384, keep);
    auto hcall = [&] { be->matmul({head, x.f32(), 16384, y.f32(), 4, N}); };
    const double th = median_seconds(hcall, sync, iters);
    std::printf("PBENCH %-10s f16 decode head hc 4x16384 n=%-3lld %8.2f us  graph %7.2f us\n", path,
                static_cast<long long>(N), th * 1e6, graph_us(hcall));
    // HC pre (nhc 4, dim 4096): the controls' segment sums, then mix + Sinkhorn + collapse + norm.
    Weight fn = weight(24, 16384, keep);
    Buffer scale = fbuf(3), base = fbuf(24), nw = fbuf(4096), mix = fbuf(N * 24), pre = fbuf(N * 4), post = fbuf(N * 4),
           comb = fbuf(N * 16), yy = fbuf(N * 4096), xn2 = fbuf(N * 4096);
    std::vector<float> small(4096, 0.5f);
    be->upload(scale.data(), small.data(), 12);
    be->upload(base.data(), small.data(), 96);
    be->upload(nw.data(), small.data(), 4096 * 4);
    HcPreArgs a;
    a.fn = fn;
    a.x = x.f32();
    a.n = N;
    a.dim = 4096;
    a.nhc = 4;
    a.scale = scale.f32();
    a.base = base.f32();
    a.norm_w = nw.f32();
    a.flat = flat.f32();
    a.mix = mix.f32();
    a.pre = pre.f32();
    a.post = post.f32();
    a.comb = comb.f32();
    a.y = yy.f32();
    a.xn = xn2.f32();
    auto pcall = [&] { be->hc_pre(a); };
    const double thc = median_seconds(pcall, sync, iters);
    std::printf("PBENCH %-10s f16 decode hc_pre 4x4096 n=%-3lld %8.2f us  graph %7.2f us\n", path,
                static_cast<long long>(N), thc * 1e6, graph_us(pcall));
    // A CSA layer's six decode projections (compressor kv, gate; indexer compressor kv, gate; q_b; weights).
    const Shape many[] = {{"", 1024, 4096, 0}, {"", 1024, 4096, 0}, {"", 256, 4096, 0},
                          {"", 256, 4096, 0},  {"", 8192, 1024, 0}, {"", 64, 4096, 0}};
    std::vector<MatmulArgs> jobs;
    std::vector<Buffer> outs;
    for (const Shape& s : many) {
      Weight w = weight(s.rows, s.cols, keep);
      outs.push_back(fbuf(N * s.rows));
      jobs.push_back({w, x.f32(), s.cols, outs.back().f32(), s.rows, N, MatmulNumerics::ds4});
    }
    auto mcall = [&] { be->matmul_many(jobs); };
    const double tm = median_seconds(mcall, sync, iters);
    std::printf("PBENCH %-10s f16 decode matmul_many csa n=%-3lld %8.2f us  graph %7.2f us\n", path,
                static_cast<long long>(N), tm * 1e6, graph_us(mcall));
  }
}
