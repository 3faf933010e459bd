// cuda_prefill_quant.cpp — `cuda_prefill_bench N quant` / `quantprof`: the prefill Q8_0 activation quantizations of a
// layer's dense matmuls, each alone: ops_matmul.cu's quantize_q8_0_rows_kernel (gemm_q8 = 18; 28: the same with its
// dependent's trigger), two rounds in turn (session 14's W1 / W2 ran its rivals, removed: docs/PERF.md), on the inputs
// of an N-token chunk: xn (N × 4,096: q_a, kv, the shared gate + up), q_a's norm (× 1,024: q_b), the attention output
// (× 32,768: out_a's groups), out_a's rows (× 8,192: out_b), the shared SwiGLU (× 2,048: down). Prints "PQUANT" lines:
// µs per call, the achieved rate (f32 read + blocks written per second) and its share of the H200's copy rate
// (4.26 TB/s), and whether each backend's bytes equal the first's ("PARITY" lines). "quantprof": each call once
// (for ncu). Timing: bench_median.h. Deliberately not here: the GEMMs (cuda_prefill_bench.cpp), correctness against
// the CPU (test_cuda_gemm.cpp).
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include <cuda_runtime.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_impl.h"
#include "bench_median.h"

using namespace ds4;
using namespace ds4::backend;

void bench_quantizers(int64_t N, bool profile) {
  const int variants[] = {18, 28, 18, 28};  // in turn: the rounds show the drift (the same kernel: 28's only triggers)
  const int64_t widths[] = {4096, 1024, 32768, 8192, 2048};
  const char* names[] = {"xn (q_a kv gate+up)", "q_a norm (q_b)", "attn out (out_a)", "out_a rows (out_b)", "swiglu (down)"};
  std::vector<std::unique_ptr<Backend>> bes;
  for (int v : variants) {
    cuda::CudaBackendOptions co;
    co.gemm_q8 = v;
    auto made = cuda::make_cuda_backend(co);
    if (!made.ok()) {
      std::printf("PQUANT skipped: %s\n", made.status().to_string().c_str());
      return;
    }
    bes.push_back(std::move(made).value());
  }
  // The widest input once per backend: N × 32,768 floats, a xorshift's finite values (±8, some blocks all zero).
  const int64_t max_elems = N * 32768;
  std::vector<float> xh(static_cast<size_t>(max_elems));
  uint64_t st = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < xh.size(); ++i) {
    st ^= st << 13;
    st ^= st >> 7;
    st ^= st << 17;
    xh[i] = (i / 32) % 97 == 5 ? 0.0f : static_cast<float>(static_cast<int64_t>(st >> 40) - (int64_t{1} << 23)) / 1048576.0f;
  }
  struct Side {
    Buffer x;
    cuda::DeviceScratch out;
  };
  std::vector<Side> sides(bes.size());
  for (size_t k = 0; k < bes.size(); ++k) {
    auto x = bes[k]->alloc(static_cast<uint64_t>(max_elems) * 4, MemCategory::scratch);
    if (!x.ok()) {
      std::printf("PQUANT skipped: %s\n", x.status().to_string().c_str());
      return;
    }
    sides[k].x = std::move(x).value();
    bes[k]->upload(sides[k].x.data(), xh.data(), xh.size() * 4);
    (void)bes[k]->sync();
  }
  for (size_t w = 0; w < std::size(widths); ++w) {
    const int64_t cols = widths[w], rows = N;
    const uint64_t in_bytes = static_cast<uint64_t>(rows * cols) * 4, out_bytes = static_cast<uint64_t>(rows * cols / 32) * 36;
    std::vector<uint8_t> first;
    for (size_t k = 0; k < bes.size(); ++k) {
      if (profile && k >= 2) break;  // (one round under ncu)
      auto& cb = static_cast<cuda::CudaBackend&>(*bes[k]);
      Side& s = sides[k];
      auto call = [&] { (void)cb.quantize_act(GgmlType::Q8_0, s.x.f32(), cols, rows, cols, s.out); };
      auto sync = [&] { (void)bes[k]->sync(); };
      double t = 0;
      if (profile) {
        call();
        sync();
      } else {
        t = ds4::test::median_seconds(call, sync, 20);
        const double rate = (in_bytes + out_bytes) / t;
        std::printf("PQUANT gemm_q8 %d %-20s %lld x %-6lld %8.2f us  %7.0f GB/s  %5.1f %% of 4.26 TB/s\n", variants[k],
                    names[w], static_cast<long long>(rows), static_cast<long long>(cols), t * 1e6, rate / 1e9,
                    100.0 * rate / 4.26e12);
      }
      std::vector<uint8_t> got(out_bytes);
      bes[k]->download(got.data(), s.out.ptr, got.size());
      sync();
      if (k == 0) {
        first = std::move(got);
      } else {
        int64_t diff = 0;
        for (size_t i = 0; i < got.size(); ++i) diff += got[i] != first[i];
        std::printf("PARITY %s round %zu quantizer %s %lld x %lld vs the first: %lld of %zu bytes differ\n",
                    diff == 0 ? "ok  " : "FAIL", k + 1, names[w], static_cast<long long>(rows),
                    static_cast<long long>(cols), static_cast<long long>(diff), got.size());
      }
    }
  }
  for (Side& s : sides) cudaFree(s.out.ptr);
}
