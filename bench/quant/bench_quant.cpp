// bench_quant.cpp — Google Benchmark of the quant kernels.
//
// BM_Matvec/<type>/<level>/<rows>: one activation vector against a rows x 4096 weight matrix;
// bytes/s = weight bytes streamed (the number that matters for decode). 256 rows fit in L2 (kernel
// speed); 4096 rows (9-18 MB for the 8-bit types) stream from memory.
// BM_Quantize/<type>/<effort>: encoder speed (bytes/s of float input), what ds4-gen pays per tensor.
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "quant/dot.h"
#include "quant/quantize.h"

namespace ds4 {
namespace {

constexpr int64_t kCols = 4096;

std::vector<float> gaussian(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

void BM_Matvec(benchmark::State& state, GgmlType type, KernelLevel level) {
  if (level == KernelLevel::avx2 && detect_kernel_level() != KernelLevel::avx2) {
    state.SkipWithError("CPU lacks AVX2/FMA/F16C");
    return;
  }
  const int64_t rows = state.range(0);
  const uint64_t rb = *type_bytes(type, kCols);
  std::vector<uint8_t> w(rows * rb);
  QuantizeOptions o;
  o.effort = QuantEffort::fast;
  // Encode one block of rows and tile it: encoder speed is not what this measures.
  const int64_t enc_rows = std::min<int64_t>(rows, 64);
  const auto wf = gaussian(enc_rows * kCols, 1);
  if (!quantize_rows(type, wf.data(), w.data(), enc_rows, kCols, o).ok()) {
    state.SkipWithError("quantize failed");
    return;
  }
  for (int64_t r = enc_rows; r < rows; ++r) std::copy_n(w.data() + (r % enc_rows) * rb, rb, w.data() + r * rb);
  const ActFormat af = *act_format_for(type);
  std::vector<uint8_t> act(*act_bytes(af, kCols));
  const auto x = gaussian(kCols, 2);
  (void)quantize_activation(af, x.data(), act.data(), kCols);
  std::vector<float> out(rows);
  MatvecParams p;
  p.type = type;
  p.weights = w.data();
  p.row_stride = rb;
  p.n_cols = kCols;
  p.row_end = rows;
  p.act = act.data();
  p.out = out.data();
  const DotKernels& k = dot_kernels(level);
  for (auto _ : state) {
    (void)matvec(k, p);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * rows * static_cast<int64_t>(rb));
}

void BM_Quantize(benchmark::State& state, GgmlType type, QuantEffort effort) {
  const int64_t n = 256 * 64;
  const auto x = gaussian(n, 3);
  std::vector<uint8_t> out(*type_bytes(type, n));
  QuantizeOptions o;
  o.effort = effort;
  for (auto _ : state) {
    (void)quantize_row(type, x.data(), out.data(), n, o);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * n * 4);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * n);
}

void register_all() {
  const std::pair<GgmlType, const char*> types[] = {
      {GgmlType::Q8_0, "q8_0"}, {GgmlType::Q2_K, "q2_K"}, {GgmlType::Q4_K, "q4_K"}, {GgmlType::IQ2_XXS, "iq2_xxs"},
      {GgmlType::F16, "f16"},   {GgmlType::BF16, "bf16"}, {GgmlType::F32, "f32"}};
  for (auto [t, name] : types)
    for (auto [level, lname] : {std::pair{KernelLevel::scalar, "scalar"}, std::pair{KernelLevel::avx2, "avx2"}})
      benchmark::RegisterBenchmark(("BM_Matvec/" + std::string(name) + "/" + lname).c_str(), BM_Matvec, t, level)
          ->Arg(256)
          ->Arg(4096);
  for (auto [t, name] : types)
    for (auto [e, ename] : {std::pair{QuantEffort::best, "best"}, std::pair{QuantEffort::fast, "fast"}})
      benchmark::RegisterBenchmark(("BM_Quantize/" + std::string(name) + "/" + ename).c_str(), BM_Quantize, t, e);
}

const int kRegistered = (register_all(), 0);

}  // namespace
}  // namespace ds4
