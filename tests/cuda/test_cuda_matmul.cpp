// test_cuda_matmul.cpp — CUDA matmul and routed experts vs the CPU reference op, every weight type
// of the GGUFs, both numerics, small shapes and the real Flash shapes (E 4096, q_lora 1024, H·D 32768,
// KV 512, F 2048). Tolerances (relative to max|y| of the case): F32/BF16 and every `exact` case sum in
// double: 1e-6; F16 and quantized `ds4` cases sum floats per block in another order: 2e-5; routed
// experts under `ds4` re-quantize their hidden rows: 5e-4 (see CudaMoe::run).
#include <algorithm>

#include "cuda_test_util.h"
#include "moe_test_util.h"

using namespace ds4;
using namespace ds4::backend;
using namespace ds4::test;

namespace {

struct MmShape {
  int64_t rows, cols, n;
};

double tol_for(GgmlType t, MatmulNumerics nm) {
  if (nm == MatmulNumerics::exact || t == GgmlType::F32 || t == GgmlType::BF16) return 1e-6;
  return 2e-5;
}

}  // namespace

class CudaMatmul : public CudaOpsTest {
 protected:
  void run(GgmlType t, MmShape s, MatmulNumerics nm, int64_t x_pad = 0, int64_t y_pad = 0) {
    Weight w;
    auto bytes = random_weight(t, s.rows, s.cols, &w);
    w.data = bytes.data();
    const int64_t xs = s.cols + x_pad, ys = s.rows + y_pad;
    auto x = randn(static_cast<size_t>(s.n * xs));
    std::vector<float> want(static_cast<size_t>(s.n * ys), 0.0f);
    cpu_->matmul({w, x.data(), xs, want.data(), ys, s.n, nm});
    float* gy = poisoned(want.size());
    gpu_->matmul({gpu_weight(w, w.row_bytes * s.rows), dev(x), xs, gy, ys, s.n, nm});
    ASSERT_TRUE(gpu_->sync().ok());
    auto got = host(gy, want.size());
    // Padding columns of y are not written: compare only the written part.
    std::vector<float> g2, w2;
    for (int64_t i = 0; i < s.n; ++i)
      for (int64_t o = 0; o < s.rows; ++o) {
        g2.push_back(got[i * ys + o]);
        w2.push_back(want[i * ys + o]);
      }
    const std::string what = std::string("matmul ") + std::string(type_name(t)) +
                             (nm == MatmulNumerics::ds4 ? " ds4 " : " exact ") + std::to_string(s.rows) + "x" +
                             std::to_string(s.cols) + " n" + std::to_string(s.n);
    expect_close(g2, w2, tol_for(t, nm), 1e-7, what);
  }
};

TEST_F(CudaMatmul, EveryTypeBothNumericsSmallShapes) {
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q4_K,
                     GgmlType::IQ2_XXS})
    for (MatmulNumerics nm : {MatmulNumerics::ds4, MatmulNumerics::exact}) {
      run(t, {37, 256, 1}, nm);
      run(t, {64, 512, 5}, nm, 32, 3);  // strided x and y
    }
}

TEST_F(CudaMatmul, FlashShapes) {
  // Attention projections and shared expert (Q8_0), routed expert rows (IQ2_XXS gate/up, Q2_K down),
  // router (F16), HC controls (F32 [24][16384]), a Q4_K matrix; decode (n=1) and a small prefill batch.
  const struct {
    GgmlType t;
    MmShape s;
  } cases[] = {
      {GgmlType::Q8_0, {1024, 4096, 1}},  {GgmlType::Q8_0, {32768, 1024, 1}}, {GgmlType::Q8_0, {512, 4096, 3}},
      {GgmlType::Q8_0, {4096, 8192, 2}},  {GgmlType::IQ2_XXS, {2048, 4096, 1}}, {GgmlType::IQ2_XXS, {2048, 4096, 4}},
      {GgmlType::Q2_K, {4096, 2048, 1}},  {GgmlType::Q2_K, {4096, 2048, 3}},   {GgmlType::Q4_K, {2048, 4096, 2}},
      {GgmlType::F16, {256, 4096, 2}},    {GgmlType::F32, {24, 16384, 2}},     {GgmlType::BF16, {512, 4096, 1}},
  };
  for (const auto& c : cases)
    for (MatmulNumerics nm : {MatmulNumerics::ds4, MatmulNumerics::exact}) run(c.t, c.s, nm);
}

TEST_F(CudaMatmul, TensorCoreGemmPrefillBatches) {
  // n ≥ kGemmMinVectors (8) under ds4 numerics runs the int8 tensor-core GEMM (ops_gemm.cu) for
  // Q8_0, IQ2_XXS and Q2_K: same integer block sums and per-block float products as the CPU, summed in
  // the CPU's block order, so the results should be bit-identical; the matvec's 2e-5 is asserted. Partial row tiles (200 of 128·2),
  // partial vector tiles (77, 300 of 64·k), strided x/y, and the Flash prefill shapes.
  // Quantized types sum block terms in the CPU's order in both kernels (the PARITY lines should read 0);
  // F16 runs the matvec's own order over 16 vectors per weight read.
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::IQ2_XXS, GgmlType::Q2_K, GgmlType::F16}) {
    run(t, {200, 512, t == GgmlType::F16 ? 8 : 65}, MatmulNumerics::ds4);  // ≤ 64 quantized: gemv_skinny.cu
    run(t, {200, 512, 77}, MatmulNumerics::ds4, 32, 3);
    run(t, {64, 256, 300}, MatmulNumerics::ds4);
  }
  run(GgmlType::Q8_0, {1024, 4096, 130}, MatmulNumerics::ds4);   // q_a / kv
  run(GgmlType::Q8_0, {32768, 1024, 96}, MatmulNumerics::ds4);   // q_b
  run(GgmlType::Q8_0, {4096, 8192, 72}, MatmulNumerics::ds4);    // output b
  run(GgmlType::IQ2_XXS, {2048, 4096, 70}, MatmulNumerics::ds4); // expert gate/up rows
  run(GgmlType::Q2_K, {4096, 2048, 70}, MatmulNumerics::ds4);    // expert down rows
  run(GgmlType::F16, {512, 4096, 100}, MatmulNumerics::ds4);     // compressor kv/gate
  run(GgmlType::F16, {24, 16384, 40}, MatmulNumerics::ds4);      // HC projections (partial row tile)
}

TEST_F(CudaMatmul, BatchInvariantAcrossKernels) {
  // A vector's result must not depend on how many vectors share the call (Engine::step batches
  // sessions): n = 1 (decode matvec), n = 40 and 64 (gemv_skinny.cu; F16: multi-vector matvec) and
  // n = 70 (tensor-core GEMM; Q4_K: the matvec) give the same bits. Q8_0 at 8192 columns: several
  // 32-block groups per row in the skinny kernel, and the decode path's separate quantize launch.
  const struct {
    GgmlType t;
    int64_t cols;
  } cases[] = {{GgmlType::Q8_0, 1024}, {GgmlType::Q8_0, 8192}, {GgmlType::IQ2_XXS, 4096},
               {GgmlType::Q2_K, 2048},  {GgmlType::Q4_K, 4096}, {GgmlType::F16, 1024}};
  for (const auto& c : cases) {
    const GgmlType t = c.t;
    const int64_t rows = 200, cols = c.cols, n_max = 70;
    Weight w;
    auto bytes = random_weight(t, rows, cols, &w);
    w.data = bytes.data();
    Weight gw = gpu_weight(w, w.row_bytes * rows);
    auto x = randn(static_cast<size_t>(n_max * cols));
    float* gx = dev(x);
    std::vector<std::vector<float>> got;
    for (int64_t n : {int64_t{40}, int64_t{64}, n_max}) {
      float* all = poisoned(static_cast<size_t>(n * rows));
      gpu_->matmul({gw, gx, cols, all, rows, n, MatmulNumerics::ds4});
      got.push_back(host(all, static_cast<size_t>(n * rows)));
    }
    int64_t cpu_diff = 0;
    for (int64_t v : {int64_t{0}, int64_t{17}, int64_t{39}}) {
      float* one = poisoned(static_cast<size_t>(rows));
      gpu_->matmul({gw, gx + v * cols, cols, one, rows, 1, MatmulNumerics::ds4});
      auto got_one = host(one, static_cast<size_t>(rows));
      for (size_t k = 0; k < got.size(); ++k)
        for (int64_t o = 0; o < rows; ++o)
          ASSERT_EQ(got_one[o], got[k][v * rows + o]) << type_name(t) << " cols " << cols << " call " << k
                                                     << " vector " << v << " row " << o;
      std::vector<float> want(static_cast<size_t>(rows));
      cpu_->matmul({w, x.data() + v * cols, cols, want.data(), rows, 1, MatmulNumerics::ds4});
      for (int64_t o = 0; o < rows; ++o) cpu_diff += got_one[o] != want[o];
    }
    // The contract says 0 for quantized types (F16 sums in another order): printed, the tolerance
    // tests assert closeness.
    std::printf("BITS batch-invariance %s cols %lld: %lld of %lld values differ from the CPU bits\n",
                std::string(type_name(t)).c_str(), static_cast<long long>(cols), static_cast<long long>(cpu_diff),
                static_cast<long long>(3 * rows));
  }
  ASSERT_TRUE(gpu_->sync().ok());
}

TEST_F(CudaMatmul, SkinnyPathsAtFlashShapes) {
  // gemv_skinny.cu takes 5..64 vectors of quantized ds4 rows (decode steps of several sessions) up to
  // kSkinnyMaxMacs of work (larger products: the GEMM; Q4_K: always skinny). Every Flash quantized
  // matrix at n = 5, 8, 16 (strided x and y), n = 33 (two vector tiles, the second of one) and 64 (rows
  // capped at 512 to keep the CPU reference short: the column widths, which set the block order, are
  // Flash's), odd shapes, and the vector-count edges 4 → decode, 65 → GEMM.
  const struct {
    GgmlType t;
    int64_t rows, cols;
  } cases[] = {
      {GgmlType::Q8_0, 1024, 4096},    {GgmlType::Q8_0, 32768, 1024}, {GgmlType::Q8_0, 4096, 8192},
      {GgmlType::Q8_0, 2048, 4096},    {GgmlType::Q8_0, 4096, 2048},  {GgmlType::IQ2_XXS, 2048, 4096},
      {GgmlType::Q2_K, 4096, 2048},    {GgmlType::Q4_K, 2048, 4096},  {GgmlType::Q2_K, 300, 1024},
      {GgmlType::IQ2_XXS, 100, 512},   {GgmlType::Q4_K, 77, 256},     {GgmlType::Q8_0, 5, 32},
  };
  for (const auto& c : cases)
    for (int64_t n : {5, 8, 16, 33, 64}) {
      const int64_t rows = n <= 16 ? c.rows : std::min<int64_t>(c.rows, 512);
      run(c.t, {rows, c.cols, n}, MatmulNumerics::ds4, 8, 3);
    }
  for (int64_t n : {4, 65}) run(GgmlType::Q8_0, {512, 4096, n}, MatmulNumerics::ds4, 8, 3);
}

TEST_F(CudaMatmul, DecodeAndBatchPathsAtFlashShapes) {
  // gemv_decode.cu takes quantized rows at n ≤ 4 (activation quantization fused; wide Q8_0 rows
  // quantized by a launch of their own); n = 5 goes the matvec / GEMM way. All must match the CPU:
  // every Flash decode matrix at n = 1, 2, 4 (strided x and y, as the forward's grouped calls use) and
  // n = 5 (float matrices too: they take the matvec at every n), and a Q8_0 row too wide for the fused
  // path's shared memory at n = 4 (falls back).
  const struct {
    GgmlType t;
    int64_t rows, cols;
  } cases[] = {
      {GgmlType::Q8_0, 1024, 4096},   {GgmlType::Q8_0, 32768, 1024}, {GgmlType::Q8_0, 512, 4096},
      {GgmlType::Q8_0, 4096, 8192},   {GgmlType::Q8_0, 2048, 4096},  {GgmlType::Q8_0, 4096, 2048},
      {GgmlType::IQ2_XXS, 2048, 4096}, {GgmlType::Q2_K, 4096, 2048},  {GgmlType::Q4_K, 2048, 4096},
      {GgmlType::Q2_K, 300, 1024},    {GgmlType::IQ2_XXS, 100, 512}, {GgmlType::Q4_K, 77, 256},
      {GgmlType::F16, 1024, 4096},    {GgmlType::F16, 8192, 1024},   {GgmlType::F16, 256, 4096},
      {GgmlType::F16, 64, 4096},      {GgmlType::F16, 24, 16384},    {GgmlType::F32, 24, 16384},
      {GgmlType::F16, 4, 16384},      {GgmlType::BF16, 300, 4096},
  };
  for (const auto& c : cases)
    for (int64_t n : {1, 2, 4, 5}) run(c.t, {c.rows, c.cols, n}, MatmulNumerics::ds4, n > 1 ? 8 : 0, n > 1 ? 3 : 0);
  run(GgmlType::Q8_0, {64, 16384, 4}, MatmulNumerics::ds4);
  for (GgmlType t : {GgmlType::F16, GgmlType::Q8_0, GgmlType::IQ2_XXS})
    run(t, {600, 4096, 1}, MatmulNumerics::exact);  // exact numerics never take the decode kernels
}

// The F16 matrices of the Flash GGUF (tensors_q2.tsv), rows × cols: HC controls, the head's HC,
// router, CSA/HCA compressor kv/gate, indexer q_b, indexer projection, indexer compressor kv/gate.
constexpr struct {
  int64_t rows, cols;
} kFlashF16[] = {{24, 16384}, {4, 16384}, {256, 4096}, {1024, 4096}, {512, 4096}, {8192, 1024}, {64, 4096}};

TEST_F(CudaMatmul, F16SegmentOrderMatchesCpuAtFlashShapesEveryBatchSize) {
  // matmul_f16.cu serves every batch size: n = 1, 2 (one row per block), 5, 8, 16 (one vector group)
  // and 40 (three groups; 4 rows per block where rows ≥ 256), 64 (prefill tiles), strided x and y past n = 1.
  for (const auto& c : kFlashF16)
    for (int64_t n : {1, 2, 5, 8, 16, 40, 64})
      run(GgmlType::F16, {c.rows, c.cols, n}, MatmulNumerics::ds4, n > 1 ? 8 : 0, n > 1 ? 3 : 0);
  // Ragged shapes: K not a multiple of the 512-value segment or of the 8-value loads (element loads),
  // one row, an odd activation stride.
  run(GgmlType::F16, {37, 1000, 3}, MatmulNumerics::ds4);
  run(GgmlType::F16, {5, 1533, 9}, MatmulNumerics::ds4, 5, 1);
  run(GgmlType::F16, {1, 700, 1}, MatmulNumerics::ds4);
  run(GgmlType::F16, {300, 500, 20}, MatmulNumerics::ds4);  // 4 rows per block, a single segment
}

TEST_F(CudaMatmul, F16RowOfATokenIsTheSameBitsInEveryBatch) {
  // Engine::step batches sessions: a vector's F16 result must be identical whether it runs alone, in a
  // batch of 5 (one row per block), 8 (4 rows per block), or 96 (prefill tiles) — every launch
  // shape sums in the same segment order. Also across 16-byte and element loads (odd x stride).
  std::vector<std::pair<int64_t, int64_t>> shapes;
  for (const auto& c : kFlashF16) shapes.push_back({c.rows, c.cols});
  shapes.push_back({300, 1000});
  for (auto [rows, cols] : shapes) {
    const int64_t n = 96;  // the prefill tile kernel (≥ 64 vectors)
    const auto m = device_matmul(GgmlType::F16, rows, cols, n);
    auto batch = [&](int64_t first, int64_t count) { return matmul_slice(m, first, count); };
    const auto all = batch(0, n);
    const auto five = batch(15, 5);   // vectors 15 … 19
    const auto eight = batch(32, 8);  // vectors 32 … 39
    // Vector 17 alone with an odd activation stride: element loads instead of 16-byte loads.
    std::vector<float> x17(static_cast<size_t>(cols + 1));
    std::copy(m.x.begin() + 17 * cols, m.x.begin() + 18 * cols, x17.begin() + 1);
    float* odd = poisoned(static_cast<size_t>(rows));
    gpu_->matmul({m.gw, dev(x17) + 1, cols + 1, odd, rows, 1, MatmulNumerics::ds4});
    const auto got_odd = host(odd, static_cast<size_t>(rows));
    for (int64_t v : {int64_t{0}, int64_t{17}, int64_t{39}}) {
      const auto one = batch(v, 1);
      for (int64_t o = 0; o < rows; ++o) {
        const std::string at = std::to_string(rows) + "x" + std::to_string(cols) + " vector " + std::to_string(v) +
                               " row " + std::to_string(o);
        ASSERT_EQ(one[o], all[v * rows + o]) << "n=1 vs n=40, " << at;
        if (v == 17) {
          ASSERT_EQ(one[o], five[2 * rows + o]) << "n=1 vs n=5, " << at;
          ASSERT_EQ(one[o], got_odd[o]) << "16-byte vs element loads, " << at;
        }
        if (v == 39) {
          ASSERT_EQ(one[o], eight[7 * rows + o]) << "n=1 vs n=8, " << at;
        }
      }
    }
  }
  ASSERT_TRUE(gpu_->sync().ok());
}

TEST_F(CudaMatmul, F16PreviousLaneOrderStaysSelectable) {
  // CudaBackendOptions::f16_segments = false runs the previous kernels (before/after benchmarks):
  // still within the CPU tolerance and still batch-invariant, in its own (different) order.
  backend::cuda::CudaBackendOptions o;
  o.f16_segments = false;
  auto made = backend::cuda::make_cuda_backend(o);
  ASSERT_TRUE(made.ok());
  auto& old = *made;
  const int64_t rows = 24, cols = 16384, n = 8;
  Weight w;
  auto bytes = random_weight(GgmlType::F16, rows, cols, &w);
  w.data = bytes.data();
  auto x = randn(static_cast<size_t>(n * cols));
  std::vector<float> want(static_cast<size_t>(n * rows));
  cpu_->matmul({w, x.data(), cols, want.data(), rows, n, MatmulNumerics::ds4});
  Weight gw = w;
  gw.data = *old->map_weight(w.data, bytes.size());
  auto gx = old->alloc(x.size() * 4, MemCategory::scratch);
  auto gy = old->alloc(want.size() * 4, MemCategory::scratch);
  auto g1 = old->alloc(static_cast<uint64_t>(rows) * 4, MemCategory::scratch);
  ASSERT_TRUE(gx.ok() && gy.ok() && g1.ok());
  old->upload(gx->data(), x.data(), x.size() * 4);
  old->matmul({gw, gx->f32(), cols, gy->f32(), rows, n, MatmulNumerics::ds4});
  old->matmul({gw, gx->f32() + 3 * cols, cols, g1->f32(), rows, 1, MatmulNumerics::ds4});
  std::vector<float> got(want.size()), one(static_cast<size_t>(rows));
  old->download(got.data(), gy->data(), got.size() * 4);
  old->download(one.data(), g1->data(), one.size() * 4);
  ASSERT_TRUE(old->sync().ok());
  expect_close(got, want, 2e-5, 1e-7, "matmul F16 lane order 24x16384 n8");
  for (int64_t o = 0; o < rows; ++o) ASSERT_EQ(one[o], got[3 * rows + o]) << "row " << o;
}

TEST_F(CudaMatmul, RowSliceOfAGroupedMatrix) {
  // The grouped output projection multiplies row slices (Weight::row_slice) with strided inputs.
  Weight w;
  auto bytes = random_weight(GgmlType::Q8_0, 4 * 64, 256, &w);
  w.data = bytes.data();
  Weight gw = gpu_weight(w, bytes.size());
  const int64_t n = 3, G = 4, Ro = 64, gin = 256;
  auto x = randn(static_cast<size_t>(n * G * gin));
  std::vector<float> want(static_cast<size_t>(n * G * Ro));
  float* gy = poisoned(want.size());
  float* gx = dev(x);
  for (int64_t g = 0; g < G; ++g) {
    cpu_->matmul({w.row_slice(g * Ro, Ro), x.data() + g * gin, G * gin, want.data() + g * Ro, G * Ro, n});
    gpu_->matmul({gw.row_slice(g * Ro, Ro), gx + g * gin, G * gin, gy + g * Ro, G * Ro, n});
  }
  ASSERT_TRUE(gpu_->sync().ok());
  expect_close(host(gy, want.size()), want, 2e-5, 1e-7, "matmul q8_0 grouped row slices");
}

TEST_F(CudaMatmul, GroupedMatmulEqualsItsRowSlicesBitForBit) {
  // MatmulArgs::group_rows (the output projection's 8 groups in one call): the same bits as one call per
  // row slice on the GPU, close to the CPU's grouped call; the decode batch sizes take the one-launch
  // path, n = 5 and 9 the per-slice fallback. Flash shape: 8 groups × 1024 rows over 4096 inputs each.
  const struct {
    GgmlType t;
    int64_t G, Ro, gin;
  } cases[] = {{GgmlType::Q8_0, 8, 1024, 4096}, {GgmlType::Q8_0, 3, 40, 512}, {GgmlType::Q2_K, 2, 24, 512},
               {GgmlType::IQ2_XXS, 4, 16, 256}};
  for (const auto& c : cases)
    for (int64_t n : {1, 2, 4, 5, 9}) {
      Weight w;
      auto bytes = random_weight(c.t, c.G * c.Ro, c.gin, &w);
      w.data = bytes.data();
      Weight gw = gpu_weight(w, bytes.size());
      const int64_t xs = c.G * c.gin + 32, ys = c.G * c.Ro + 8;  // padded rows
      auto x = randn(static_cast<size_t>(n * xs));
      std::vector<float> want(static_cast<size_t>(n * ys), 0.0f);
      MatmulArgs ca{w, x.data(), xs, want.data(), ys, n, MatmulNumerics::ds4};
      ca.group_rows = c.Ro;
      ca.group_x_stride = c.gin;
      cpu_->matmul(ca);
      float* gx = dev(x);
      float* one = poisoned(want.size());
      float* sliced = poisoned(want.size());
      MatmulArgs ga{gw, gx, xs, one, ys, n, MatmulNumerics::ds4};
      ga.group_rows = c.Ro;
      ga.group_x_stride = c.gin;
      gpu_->matmul(ga);
      for (int64_t g = 0; g < c.G; ++g)
        gpu_->matmul({gw.row_slice(g * c.Ro, c.Ro), gx + g * c.gin, xs, sliced + g * c.Ro, ys, n});
      ASSERT_TRUE(gpu_->sync().ok());
      auto got = host(one, want.size()), ref = host(sliced, want.size());
      std::vector<float> g2, r2, w2;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t o = 0; o < c.G * c.Ro; ++o) {
          g2.push_back(got[i * ys + o]);
          r2.push_back(ref[i * ys + o]);
          w2.push_back(want[i * ys + o]);
        }
      const std::string what = "grouped " + std::string(type_name(c.t)) + " " + std::to_string(c.G) + "x" +
                               std::to_string(c.Ro) + "x" + std::to_string(c.gin) + " n" + std::to_string(n);
      EXPECT_EQ(std::memcmp(g2.data(), r2.data(), g2.size() * sizeof(float)), 0) << what << ": not the row slices' bits";
      expect_close(g2, w2, 2e-5, 1e-7, what);
    }
}

class CudaMoe : public CudaOpsTest {
 protected:
  void check_bad_id(int64_t n);
  void run(GgmlType gate_t, GgmlType down_t, int32_t n_expert, int32_t dim, int32_t ff, int32_t k, int64_t n,
           MatmulNumerics nm, float clamp) {
    Weight g0, u0, d0;
    auto gb = random_weight(gate_t, int64_t{n_expert} * ff, dim, &g0);
    auto ub = random_weight(gate_t, int64_t{n_expert} * ff, dim, &u0);
    auto db = random_weight(down_t, int64_t{n_expert} * dim, ff, &d0);
    MoeArgs c;
    c.gate = expert_stack(g0, gb.data(), ff, n_expert);
    c.up = expert_stack(u0, ub.data(), ff, n_expert);
    c.down = expert_stack(d0, db.data(), dim, n_expert);
    auto x = randn(static_cast<size_t>(n * dim));
    std::vector<int32_t> ids(static_cast<size_t>(n * k));
    for (int64_t i = 0; i < n; ++i)  // distinct experts per token, as the router gives
      for (int j = 0; j < k; ++j) ids[i * k + j] = static_cast<int32_t>((i * 7 + j * 3) % n_expert);
    std::vector<float> wts(ids.size());
    for (auto& v : wts) v = std::uniform_real_distribution<float>(0.1f, 1.0f)(rng_);
    c.x = x.data();
    c.ids = ids.data();
    c.weights = wts.data();
    c.n = n;
    c.k = k;
    c.dim = dim;
    c.ff = ff;
    c.clamp = clamp;
    c.numerics = nm;
    std::vector<float> want(static_cast<size_t>(n * dim));
    c.out = want.data();
    cpu_->moe(c);

    MoeArgs g = c;
    g.gate.first = gpu_weight(c.gate.first, gb.size());
    g.up.first = gpu_weight(c.up.first, ub.size());
    g.down.first = gpu_weight(c.down.first, db.size());
    g.x = dev(x);
    g.ids = dev(ids);
    g.weights = dev(wts);
    g.out = poisoned(want.size());
    gpu_->moe(g);
    ASSERT_TRUE(gpu_->sync().ok());
    const std::string what = std::string("moe ") + std::string(type_name(gate_t)) + "/" +
                             std::string(type_name(down_t)) + (nm == MatmulNumerics::ds4 ? " ds4" : " exact") +
                             " E" + std::to_string(dim) + " F" + std::to_string(ff) + " n" + std::to_string(n);
    // ds4: the down projection quantizes the SwiGLU rows (which differ from the CPU's in the last
    // bits) to Q8_K again, and one value landing on the other side of a rounding step moves a whole
    // output row by one quantization step of that value: measured 1.2e-4·max|y| at Flash shapes.
    // At F 64 a row sums only 64 hidden values, so one flipped step is a larger share: measured
    // 5.4e-4·max|y| (Q8_0/Q8_0, F 64); the bound scales as 1/(127·√F).
    const double ds4_tol = ff < 512 ? 1e-3 : 5e-4;
    expect_close(host(g.out, want.size()), want, nm == MatmulNumerics::ds4 ? ds4_tol : 1e-6, 1e-7, what);
  }
};

TEST_F(CudaMoe, RoutedExpertsSmall) {
  for (MatmulNumerics nm : {MatmulNumerics::ds4, MatmulNumerics::exact}) {
    run(GgmlType::F32, GgmlType::F32, 8, 256, 32 * 8, 3, 5, nm, 1.0f);
    run(GgmlType::IQ2_XXS, GgmlType::Q2_K, 8, 512, 256, 3, 4, nm, 10.0f);
    run(GgmlType::Q8_0, GgmlType::Q8_0, 6, 256, 64, 2, 3, nm, 0.0f);
  }
}

TEST_F(CudaMoe, RoutedExpertsGroupedOnTensorCores) {
  // ≥ kGroupMinPairs (64) pairs under ds4 numerics: pairs sorted by expert, grouped int8 GEMMs
  // (several 64-pair tiles per expert, a partial last tile). exact numerics keep the matvec.
  for (MatmulNumerics nm : {MatmulNumerics::ds4, MatmulNumerics::exact}) {
    run(GgmlType::IQ2_XXS, GgmlType::Q2_K, 8, 512, 256, 3, 300, nm, 10.0f);
    run(GgmlType::Q8_0, GgmlType::Q8_0, 6, 256, 256, 2, 100, nm, 0.0f);
  }
  run(GgmlType::IQ2_XXS, GgmlType::Q2_K, 16, 4096, 2048, 6, 70, MatmulNumerics::ds4, 10.0f);
}

TEST_F(CudaMoe, SkinnyExpertsEveryBatchSize) {
  // gemv_skinny.cu takes 5..64 tokens under ds4 where the grouped GEMM does not (< 64 pairs, or a
  // Q4_K tensor): pairs grouped by expert on the device, each expert's rows read once for its pairs.
  // Flash shapes at n = 5, 8 (skinny) and 16, 33, 64 (grouped GEMM); an expert with more than 32 pairs
  // (two vector tiles: 8 experts, 64 tokens × 6 slots, Q4_K down); every quantized gate/down type
  // pair; k = 8 and k = 1.
  for (int64_t n : {5, 8, 16, 33, 64})
    run(GgmlType::IQ2_XXS, GgmlType::Q2_K, 16, 4096, 2048, 6, n, MatmulNumerics::ds4, 10.0f);
  run(GgmlType::Q8_0, GgmlType::Q4_K, 8, 512, 256, 6, 64, MatmulNumerics::ds4, 0.0f);
  run(GgmlType::Q4_K, GgmlType::Q8_0, 12, 1024, 512, 8, 20, MatmulNumerics::ds4, 10.0f);
  run(GgmlType::Q2_K, GgmlType::IQ2_XXS, 9, 2048, 256, 2, 9, MatmulNumerics::ds4, 7.0f);
  run(GgmlType::IQ2_XXS, GgmlType::Q8_0, 256, 512, 256, 1, 50, MatmulNumerics::ds4, 0.0f);
}

TEST_F(CudaMoe, GroupedExpertsOutOfRangeIdGivesNaN) {
  // A corrupt expert id must not crash or read outside the tensor: its token's output is NaN. n = 20:
  // gemv_skinny.cu's grouping; n = 65: the grouped tensor-core GEMM.
  for (int64_t n : {20, 65}) check_bad_id(n);
}

void CudaMoe::check_bad_id(int64_t n) {
  const int32_t ne = 4, dim = 256, ff = 256, k = 2;
  Weight g0, d0;
  auto gb = random_weight(GgmlType::IQ2_XXS, int64_t{ne} * ff, dim, &g0);
  auto db = random_weight(GgmlType::Q2_K, int64_t{ne} * dim, ff, &d0);
  g0.data = gb.data();
  d0.data = db.data();
  auto ex = [&](Weight w, const std::vector<uint8_t>& b, int64_t rows) {
    return expert_stack(gpu_weight(w, b.size()), rows, ne);
  };
  MoeArgs a;
  a.gate = ex(g0, gb, ff);
  a.up = a.gate;
  a.down = ex(d0, db, dim);
  std::vector<int32_t> ids(n * k);
  for (int i = 0; i < n * k; ++i) ids[i] = i % ne;
  ids[5 * k + 1] = ne + 3;  // token 5
  std::vector<float> wts(ids.size(), 0.5f);
  a.x = dev(randn(static_cast<size_t>(n * dim)));
  a.ids = dev(ids);
  a.weights = dev(wts);
  a.n = n;
  a.k = k;
  a.dim = dim;
  a.ff = ff;
  a.out = poisoned(static_cast<size_t>(n * dim));
  gpu_->moe(a);
  ASSERT_TRUE(gpu_->sync().ok());
  auto out = host(a.out, static_cast<size_t>(n * dim));
  for (int64_t i = 0; i < n; ++i)
    for (int d = 0; d < dim; ++d)
      ASSERT_EQ(std::isnan(out[i * dim + d]), i == 5) << "token " << i << " dim " << d;
}

TEST_F(CudaMoe, RoutedExpertsFlashShape) {
  // Flash rows (E 4096, F 2048, k 6) with 16 of the 256 experts resident, decode and a batch of 3.
  for (MatmulNumerics nm : {MatmulNumerics::ds4, MatmulNumerics::exact}) {
    run(GgmlType::IQ2_XXS, GgmlType::Q2_K, 16, 4096, 2048, 6, 1, nm, 10.0f);
    run(GgmlType::IQ2_XXS, GgmlType::Q2_K, 16, 4096, 2048, 6, 3, nm, 10.0f);
  }
}

TEST_F(CudaMoe, DecodeKernelsEveryQuantizedPairAndBatchPath) {
  // gemv_decode.cu's routed-expert kernels take n ≤ 4 and k ≤ 8 under ds4: Flash shapes at n = 1, 2
  // and 4, other quantized gate/down type pairs, k = 8, and n = 5 (the general path) for comparison.
  for (int64_t n : {1, 2, 4, 5}) run(GgmlType::IQ2_XXS, GgmlType::Q2_K, 16, 4096, 2048, 6, n, MatmulNumerics::ds4, 10.0f);
  run(GgmlType::Q4_K, GgmlType::Q8_0, 12, 1024, 512, 8, 2, MatmulNumerics::ds4, 10.0f);
  run(GgmlType::Q8_0, GgmlType::Q4_K, 10, 512, 768, 3, 1, MatmulNumerics::ds4, 0.0f);
  run(GgmlType::Q2_K, GgmlType::IQ2_XXS, 9, 2048, 256, 2, 3, MatmulNumerics::ds4, 7.0f);
}

TEST_F(CudaMatmul, BadShapeIsAnErrorFromSync) {
  Weight w;
  auto bytes = random_weight(GgmlType::Q2_K, 4, 256, &w);
  w.data = bytes.data();
  Weight gw = gpu_weight(w, bytes.size());
  gw.cols = 100;  // not a whole number of 256-value blocks
  auto x = randn(256);
  gpu_->matmul({gw, dev(x), 256, poisoned(4), 4, 1});
  Status s = gpu_->sync();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.to_string().find("blocks"), std::string::npos) << s.to_string();
}

TEST_F(CudaMatmul, AllocationFailureNamesTheSize) {
  auto b = gpu_->alloc(uint64_t{1} << 52, MemCategory::raw_kv);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::out_of_memory);
  EXPECT_NE(b.status().to_string().find("MiB"), std::string::npos) << b.status().to_string();
  EXPECT_TRUE(gpu_->sync().ok());  // a refused allocation does not poison the backend
  auto z = gpu_->alloc(1000, MemCategory::scratch);  // zero-filled
  ASSERT_TRUE(z.ok());
  auto h = host(static_cast<const uint8_t*>(z->data()), 1000);
  for (uint8_t v : h) ASSERT_EQ(v, 0);
}
