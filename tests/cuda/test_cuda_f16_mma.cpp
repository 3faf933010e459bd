// test_cuda_f16_mma.cpp — the F16 MMA order (CudaBackendOptions::f16_mma; README.md "F16 MMA order",
// matmul_f16_mma.cu, f16_mma.cuh, ops_hc.cu's hc_seg_mma_kernel) on CUDA: every F16 matmul within
// 2e-5·max|y| of the CPU op (the CPU sums sequentially; the MMA order adds 512-value segments of four
// 128-value TF32 hi/lo MMA chains in order) at the Flash shapes and ragged ones, every launch shape (decode
// tiles of 8 and 16 rows, 8/16/32-vector tiles, the prefill block tiles of 128 × 64 and 64 × 64 and the
// few-row split shape); a token's bits the same at n = 1, 2, 5, 8, 40
// and 2,048 and with element instead of 16-byte loads; poisoned outputs (every written value checked);
// the prefill tiles' other launch shapes (matmul_f16_mma_tiles.cu f16_mma_tiles_launch_shape) ≡ the default;
// matmul_many ≡ one matmul per job; the streaming ring kernel (f16_mma_decode_kernel 1 … 9) ≡ the decode kernel.
// The HC controls' segment sums (ops_hc.cu hc_seg_mma_kernel) are test_cuda_fused.cpp's HcPreEqualsPiecesAndCpu
// (its f16_mma backend): the fused HC pre ≡ rms_norm then matmul bit for bit, and within 2e-5 of the CPU.
// Model level (W2 on the H200, binaries with f16_mma on by default): test_cuda_model's CUDA ≡ CPU in prefill,
// chunked and decode, golden logits, batched ≡ solo, graphs on ≡ off.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime.h>

#include "backend/cuda/matmul_f16_mma_tiles.h"
#include "cuda_test_util.h"

using namespace ds4;
using namespace ds4::backend;
using namespace ds4::test;

namespace {

// The F16 matrices of the Flash GGUF, rows × cols: HC controls, the head's HC, router, CSA/HCA
// compressor kv/gate, indexer q_b, indexer projection / indexer compressor.
constexpr struct {
  int64_t rows, cols;
} kShapes[] = {{24, 16384}, {4, 16384}, {256, 4096}, {1024, 4096}, {512, 4096}, {8192, 1024}, {64, 4096}};

size_t count_differing(const std::vector<float>& a, const std::vector<float>& b) {
  size_t d = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) d += std::memcmp(&a[i], &b[i], 4) != 0;
  return d + (a.size() > b.size() ? a.size() - b.size() : b.size() - a.size());
}

// F16 weights of one shape and n_max input vectors, on the host (the decode-kernel tests' cases: host_cases).
struct HostCase {
  Weight w;
  std::vector<uint8_t> bytes;
  std::vector<float> x;
};

// One CUDA backend with the cases' weights mapped (w) and inputs uploaded (x); out(count) hands out a
// NaN-poisoned output buffer (an unwritten value never equals), kept until the side goes.
struct DeviceSide {
  std::unique_ptr<Backend> be;
  std::vector<Buffer> keep;
  std::vector<Weight> w;
  std::vector<float*> x;
  DeviceSide(const backend::cuda::CudaBackendOptions& o, const std::vector<HostCase>& hs) {
    auto made = backend::cuda::make_cuda_backend(o);
    EXPECT_TRUE(made.ok());
    be = std::move(made).value();
    for (const HostCase& h : hs) {
      Weight g = h.w;
      g.data = *be->map_weight(h.w.data, h.w.row_bytes * h.w.rows);
      w.push_back(g);
      x.push_back(static_cast<float*>(buf(h.x.size() * 4)));
      be->upload(x.back(), h.x.data(), h.x.size() * 4);
    }
  }
  void* buf(size_t bytes) {
    keep.push_back(std::move(be->alloc(bytes + 16, MemCategory::scratch)).value());
    return keep.back().data();
  }
  float* out(int64_t count) {
    float* y = static_cast<float*>(buf(static_cast<size_t>(count) * 4));
    be->fill_f32(y, NAN, count);
    return y;
  }
  // Case k's matmul at n vectors into a poisoned output; its values appended to `res`.
  void matmul(const std::vector<HostCase>& hs, size_t k, int64_t n, std::vector<std::vector<float>>& res) {
    const int64_t rows = hs[k].w.rows, cols = hs[k].w.cols;
    float* y = out(n * rows);
    be->matmul({w[k], x[k], cols, y, rows, n, MatmulNumerics::ds4});
    res.emplace_back(static_cast<size_t>(n * rows));
    be->download(res.back().data(), y, res.back().size() * 4);
  }
  // The cases of `set` as one matmul_many at n vectors into poisoned outputs; their values appended to `res`.
  void matmul_many(const std::vector<HostCase>& hs, const std::vector<size_t>& set, int64_t n,
                   std::vector<std::vector<float>>& res) {
    std::vector<MatmulArgs> jobs;
    std::vector<float*> ys;
    for (size_t m : set) {
      const int64_t rows = hs[m].w.rows, cols = hs[m].w.cols;
      ys.push_back(out(n * rows));
      jobs.push_back({w[m], x[m], cols, ys.back(), rows, n, MatmulNumerics::ds4});
    }
    be->matmul_many(jobs);
    for (size_t j = 0; j < jobs.size(); ++j) {
      res.emplace_back(static_cast<size_t>(n * jobs[j].w.rows));
      be->download(res.back().data(), ys[j], res.back().size() * 4);
    }
  }
};

}  // namespace

class CudaF16Mma : public CudaOpsTest {
 protected:
  void SetUp() override {
    CudaOpsTest::SetUp();
    if (!gpu_) return;  // skipped: no device
    backend::cuda::CudaBackendOptions o;
    o.f16_mma = true;
    auto g = backend::cuda::make_cuda_backend(o);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    gpu_ = std::move(g).value();
  }

  // W·x on the MMA backend vs the CPU op, strided x and y (pads), poisoned y (unwritten values show as NaN).
  void vs_cpu(int64_t rows, int64_t cols, int64_t n, int64_t x_pad, int64_t y_pad) {
    Weight w;
    auto bytes = random_weight(GgmlType::F16, rows, cols, &w);
    w.data = bytes.data();
    const int64_t xs = cols + x_pad, ys = rows + y_pad;
    auto x = randn(static_cast<size_t>(n * xs));
    std::vector<float> want(static_cast<size_t>(n * ys), 0.0f);
    cpu_->matmul({w, x.data(), xs, want.data(), ys, n, MatmulNumerics::ds4});
    float* gy = poisoned(want.size());
    gpu_->matmul({gpu_weight(w, w.row_bytes * rows), dev(x), xs, gy, ys, n, MatmulNumerics::ds4});
    ASSERT_TRUE(gpu_->sync().ok());
    const auto got = host(gy, want.size());
    std::vector<float> g2, w2;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t o = 0; o < rows; ++o) {
        g2.push_back(got[i * ys + o]);
        w2.push_back(want[i * ys + o]);
      }
    expect_close(g2, w2, 2e-5, 1e-7,
                 "f16 mma " + std::to_string(rows) + "x" + std::to_string(cols) + " n" + std::to_string(n));
  }

  // F16 weights of each shape and n_max input vectors each.
  std::vector<HostCase> host_cases(std::span<const std::pair<int64_t, int64_t>> shapes, int64_t n_max) {
    std::vector<HostCase> hs;
    for (auto [r, c] : shapes) {
      HostCase h;
      h.bytes = random_weight(GgmlType::F16, r, c, &h.w);
      h.w.data = h.bytes.data();
      h.x = randn(static_cast<size_t>(n_max * c));
      hs.push_back(std::move(h));
    }
    return hs;
  }
};

TEST_F(CudaF16Mma, MatchesCpuAtFlashShapesEveryLaunchShape) {
  // Every Flash shape at n = 1, 2 (8-vector decode tile), 9 (16-vector) and 17 (32-vector); the 256-row
  // matrix also at n = 40 (two 32-vector blocks); prefill (n = 64): the HC controls (split shape), the
  // 256-row (64 × 64 tiles) and 1,024-row (128 × 64 tiles) matrices. (The CPU op is the slow part.)
  for (const auto& c : kShapes)
    for (int64_t n : {1, 2, 9, 17}) vs_cpu(c.rows, c.cols, n, n > 1 ? 8 : 0, n > 1 ? 3 : 0);
  vs_cpu(256, 4096, 40, 8, 3);
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{24, 16384}, {256, 4096}, {1024, 4096}}) vs_cpu(rows, cols, 64, 8, 3);
  // Ragged: K not a multiple of 512, 128 or 8 (element loads, partial blocks and quarters), one row, rows
  // not a multiple of 8 or 16, a single segment, prefill shapes with ragged rows and vectors (split shape:
  // K not a multiple of 512; tiles: 530 rows × 77 vectors at K 1,024).
  vs_cpu(37, 1000, 3, 0, 0);
  vs_cpu(5, 1533, 9, 5, 1);
  vs_cpu(1, 700, 1, 0, 0);
  vs_cpu(300, 500, 20, 0, 0);
  vs_cpu(13, 100, 70, 3, 2);
  vs_cpu(530, 1000, 77, 0, 1);
  vs_cpu(530, 1024, 77, 0, 1);
  vs_cpu(2050, 136, 3, 0, 0);
}

TEST_F(CudaF16Mma, PrefillTileShapesEqualTheDefaultShape) {
  // matmul_f16_mma_tiles.cu's launch shapes 1 (two 32-value blocks per ring stage), 2 (16-row warp tiles),
  // 3 (both), 4 and 5 (1 and 3 with the activations split into TF32 hi / lo once per stage), 6 (four blocks per
  // stage), 7 (64 × 16 warp tiles), 8 (32 × 16 warp tiles, several blocks per multiprocessor), 10 (quarter
  // pairs: two warps per warp tile), 12 (16 warps of 32 × 16 / 8 with four blocks per stage), 14 (7's warp tiles
  // with the activations split once per block by the threads that stage them), 21 (14's warp tiles in 8-warp
  // blocks with four blocks per stage) against shape 0 (checked against the CPU above) bit for
  // bit, every output written (poisoned y): the Flash tile shapes at a 2,048-token chunk and ragged rows /
  // vectors (300 × 100, 1,000 × 2,049 — partial row and vector tiles, one segment at K 512).
  struct Sh {
    int64_t rows, cols, n;
  };
  for (const Sh& sh : {Sh{256, 4096, 2048}, Sh{1024, 4096, 2048}, Sh{512, 4096, 2048}, Sh{8192, 1024, 2048},
                       Sh{300, 512, 100}, Sh{1000, 2048, 2049}}) {
    Weight w;
    auto bytes = random_weight(GgmlType::F16, sh.rows, sh.cols, &w);
    w.data = bytes.data();
    const auto x = randn(static_cast<size_t>(sh.n * sh.cols));
    backend::cuda::GemvJob j;
    j.w = gpu_weight(w, w.row_bytes * sh.rows);
    j.x = dev(x);
    j.x_stride = sh.cols;
    j.y_stride = sh.rows;
    j.n_vec = sh.n;
    ASSERT_TRUE(gpu_->sync().ok());
    ASSERT_TRUE(backend::cuda::f16_mma_tiles_support(j));
    std::vector<float> want;
    for (int shape : {0, -1, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 21}) {  // (−1: the default)
      j.y = poisoned(static_cast<size_t>(sh.n * sh.rows));
      ASSERT_TRUE(gpu_->sync().ok());
      ASSERT_EQ(backend::cuda::f16_mma_tiles_launch_shape(j, nullptr, shape), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const auto got = host(j.y, static_cast<size_t>(sh.n * sh.rows));
      const std::string label = std::to_string(sh.rows) + "x" + std::to_string(sh.cols) + " n" + std::to_string(sh.n) +
                                " shape " + std::to_string(shape);
      size_t nan = 0;
      for (float v : got) nan += std::isnan(v);
      EXPECT_EQ(nan, 0u) << label << ": outputs left unwritten";
      if (shape == 0)
        want = got;
      else
        EXPECT_EQ(count_differing(got, want), 0u) << label << " vs shape 0";
    }
  }
}

TEST_F(CudaF16Mma, FewRowShapesEqualTheDefaultShape) {
  // matmul_f16_mma.cu's prefill shapes for jobs of few rows (f16_mma_few_rows_launch_shape 1, 4, 5: 8-vector
  // blocks at 2 per multiprocessor, 16 warps × 1 quarter on 16 vectors, 8-vector blocks of 1 quarter per warp at
  // 4 per multiprocessor)
  // against shape 0 (checked against the CPU above) bit for bit, every output written (poisoned y): the HC
  // controls and the indexer weights at a 2,048-token chunk, ragged K (not a multiple of 512 / 8), rows
  // and vectors.
  struct Sh {
    int64_t rows, cols, n;
  };
  for (const Sh& sh : {Sh{24, 16384, 2048}, Sh{64, 4096, 2048}, Sh{24, 16384, 67}, Sh{13, 1000, 70}, Sh{40, 1533, 129}}) {
    Weight w;
    auto bytes = random_weight(GgmlType::F16, sh.rows, sh.cols, &w);
    w.data = bytes.data();
    const auto x = randn(static_cast<size_t>(sh.n * sh.cols));
    backend::cuda::GemvJob j;
    j.w = gpu_weight(w, w.row_bytes * sh.rows);
    j.x = dev(x);
    j.x_stride = sh.cols;
    j.y_stride = sh.rows;
    j.n_vec = sh.n;
    ASSERT_TRUE(gpu_->sync().ok());
    ASSERT_TRUE(backend::cuda::f16_mma_few_rows_support(j));
    std::vector<float> want;
    for (int shape : {0, -1, 1, 4, 5}) {  // (−1: the default)
      j.y = poisoned(static_cast<size_t>(sh.n * sh.rows));
      ASSERT_TRUE(gpu_->sync().ok());
      ASSERT_EQ(backend::cuda::f16_mma_few_rows_launch_shape(j, nullptr, shape), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const auto got = host(j.y, static_cast<size_t>(sh.n * sh.rows));
      const std::string label = std::to_string(sh.rows) + "x" + std::to_string(sh.cols) + " n" + std::to_string(sh.n) +
                                " few-row shape " + std::to_string(shape);
      size_t nan = 0;
      for (float v : got) nan += std::isnan(v);
      EXPECT_EQ(nan, 0u) << label << ": outputs left unwritten";
      if (shape == 0)
        want = got;
      else
        EXPECT_EQ(count_differing(got, want), 0u) << label << " vs shape 0";
      std::printf("PARITY %-40s values differing from shape 0: %zu\n", label.c_str(),
                  shape == 0 ? size_t{0} : count_differing(got, want));
    }
  }
}

TEST_F(CudaF16Mma, RowOfATokenIsTheSameBitsInEveryBatch) {
  // n = 2,048 (prefill tiles) vs n = 1, 2, 5, 8, 40 (decode tiles of every vector count) and vs element
  // loads (odd activation stride): the same segment chains in the same order, so the same bits.
  std::vector<std::pair<int64_t, int64_t>> shapes;
  for (const auto& c : kShapes) shapes.push_back({c.rows, c.cols});
  shapes.push_back({300, 1000});
  for (auto [rows, cols] : shapes) {
    const int64_t n = 2048;
    const auto m = device_matmul(GgmlType::F16, rows, cols, n);
    auto batch = [&](int64_t first, int64_t count) { return matmul_slice(m, first, count); };
    const auto all = batch(0, n);
    std::vector<float> x17(static_cast<size_t>(cols + 1));
    std::copy(m.x.begin() + 17 * cols, m.x.begin() + 18 * cols, x17.begin() + 1);
    float* odd = poisoned(static_cast<size_t>(rows));
    gpu_->matmul({m.gw, dev(x17) + 1, cols + 1, odd, rows, 1, MatmulNumerics::ds4});
    const auto got_odd = host(odd, static_cast<size_t>(rows));
    size_t differ = 0, nan = 0;
    const auto two = batch(16, 2), five = batch(15, 5), eight = batch(32, 8), forty = batch(0, 40);
    for (int64_t v : {int64_t{0}, int64_t{17}, int64_t{39}, int64_t{1000}, n - 1}) {
      const auto one = batch(v, 1);
      for (int64_t o = 0; o < rows; ++o) {
        const float a = all[v * rows + o];
        nan += std::isnan(a) || std::isnan(one[o]);
        differ += std::memcmp(&one[o], &a, 4) != 0;
        if (v == 17) {
          differ += std::memcmp(&one[o], &two[rows + o], 4) != 0;
          differ += std::memcmp(&one[o], &five[2 * rows + o], 4) != 0;
          differ += std::memcmp(&one[o], &got_odd[o], 4) != 0;
        }
        if (v == 39) differ += std::memcmp(&one[o], &eight[7 * rows + o], 4) != 0;
        if (v < 40) differ += std::memcmp(&one[o], &forty[v * rows + o], 4) != 0;
      }
    }
    const std::string what = "f16 mma batch invariance " + std::to_string(rows) + "x" + std::to_string(cols);
    EXPECT_EQ(differ, 0u) << what;
    EXPECT_EQ(nan, 0u) << what;
    std::printf("PARITY %-44s n=%-9lld values differing from n=1: %zu, NaN %zu  %s\n", what.c_str(),
                static_cast<long long>(n), differ, nan, differ == 0 && nan == 0 ? "ok" : "FAIL");
  }
  ASSERT_TRUE(gpu_->sync().ok());
}

TEST_F(CudaF16Mma, PrefillChunkMatchesCpu) {
  // A 2,048-vector chunk at the prefill shapes: 128 × 64 and 64 × 64 tiles, the split shape (the CPU op on
  // the last 64 vectors: time).
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1024, 4096}, {24, 16384}, {256, 4096}}) {
    const int64_t n = 2048, nc = 64;
    const auto m = device_matmul(GgmlType::F16, rows, cols, n);
    const auto got = matmul_slice(m, 0, n);
    std::vector<float> want(static_cast<size_t>(nc * rows));
    cpu_->matmul({m.w, m.x.data() + (n - nc) * cols, cols, want.data(), rows, nc, MatmulNumerics::ds4});
    std::vector<float> tail(got.end() - nc * rows, got.end());
    expect_close(tail, want, 2e-5, 1e-7, "f16 mma chunk " + std::to_string(rows) + "x" + std::to_string(cols) + " n2048");
  }
}

TEST_F(CudaF16Mma, MatmulManyEqualsOneMatmulPerJob) {
  // A CSA layer's six projections and a ragged job in one launch (n ≤ 32), or one matmul per job (33).
  const std::pair<int64_t, int64_t> shapes[] = {{1024, 4096}, {1024, 4096}, {256, 4096}, {256, 4096},
                                                {8192, 1024}, {64, 4096},   {13, 1000}};
  const int64_t n_max = 33;
  std::vector<DeviceMatmul> mats;
  for (auto [r, c] : shapes) mats.push_back(device_matmul(GgmlType::F16, r, c, n_max));
  for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{8}, int64_t{9}, int64_t{17}, int64_t{32}, int64_t{33}}) {
    std::vector<MatmulArgs> jobs;
    std::vector<float*> outs;
    for (const DeviceMatmul& m : mats) {
      outs.push_back(poisoned(static_cast<size_t>(n * m.w.rows)));
      jobs.push_back({m.gw, m.gx, m.w.cols, outs.back(), m.w.rows, n, MatmulNumerics::ds4});
    }
    gpu_->matmul_many(jobs);
    ASSERT_TRUE(gpu_->sync().ok());
    size_t differ = 0;
    for (size_t k = 0; k < jobs.size(); ++k) {
      const auto got = host(outs[k], static_cast<size_t>(n * mats[k].w.rows));
      differ += count_differing(got, matmul_slice(mats[k], 0, n));
      const int64_t rows = mats[k].w.rows, cols = mats[k].w.cols;
      for (int64_t v : {int64_t{0}, n - 1}) {  // the CPU op for the first and last vector
        std::vector<float> ref(static_cast<size_t>(rows));
        cpu_->matmul({mats[k].w, mats[k].x.data() + v * cols, cols, ref.data(), rows, 1, MatmulNumerics::ds4});
        expect_close(std::vector<float>(got.begin() + v * rows, got.begin() + (v + 1) * rows), ref, 2e-5, 1e-7,
                     "f16 mma many job " + std::to_string(k) + " n" + std::to_string(n) + " v" + std::to_string(v));
      }
    }
    EXPECT_EQ(differ, 0u) << "n " << n;
    std::printf("PARITY %-44s n=%-9lld values differing from one matmul per job: %zu  %s\n", "f16 mma matmul_many",
                static_cast<long long>(n), differ, differ == 0 ? "ok" : "FAIL");
  }
}

TEST_F(CudaF16Mma, DecodeKernelsEqualPreviousTilesAtEveryLaunchShape) {
  // matmul_f16_mma_decode.cu (a warp per quarter) at every launch shape — 4-, 8- and 16-row tiles × 1, 2, 4
  // segments per block: rows split over blocks (the last block adds the segment sums), whole rows, several
  // row tiles per block; plain launches; split rows combined in clusters — vs matmul_f16_mma.cu's decode
  // tiles (f16_mma_decode = false), n = 1, 2, 8, in matmul and in matmul_many (a CSA layer's six projections
  // and a ragged job in one launch): bit for bit.
  const std::pair<int64_t, int64_t> shapes[] = {{24, 16384}, {4, 16384}, {256, 4096}, {1024, 4096}, {8192, 1024},
                                                {64, 4096},  {13, 1000}, {37, 1000},  {5, 1533},   {1, 700},
                                                {300, 500},  {2050, 136}};
  const size_t n_many = 7;  // a CSA layer: compressor kv, gate; indexer compressor kv, gate; q_b; weights; a ragged job
  const size_t many_idx[n_many] = {3, 3, 2, 2, 4, 5, 6};
  const int64_t n_max = 8;
  const std::vector<HostCase> hs = host_cases(shapes, n_max);
  // Results of one backend: [n index][shape] matmul outputs, then [n index][job] matmul_many outputs.
  auto run = [&](bool decode, int rows, int segs, bool cluster, bool pdl) {
    backend::cuda::CudaBackendOptions o;
    o.f16_mma = true;
    o.f16_mma_cluster = cluster;
    o.f16_mma_pdl = pdl;
    o.f16_mma_decode = decode;
    o.f16_mma_decode_rows = rows;
    o.f16_mma_decode_segs = segs;
    DeviceSide d(o, hs);
    std::vector<std::vector<float>> out;
    for (int64_t n : {1, 2, 8}) {
      for (size_t k = 0; k < hs.size(); ++k) d.matmul(hs, k, n, out);
      d.matmul_many(hs, std::vector<size_t>(std::begin(many_idx), std::end(many_idx)), n, out);
    }
    EXPECT_TRUE(d.be->sync().ok());
    return out;
  };
  const auto want = run(false, 0, 0, false, true);
  // Every launch shape as a programmatic dependent (the default); the shape's own choice with plain
  // launches; one segment per block in clusters (f16_mma_cluster: the tiles of 2, 4 or 8 blocks — 5 × 1533
  // and the 16,384-column rows keep the counter).
  struct Side {
    int rows, segs;
    bool cluster, pdl;
  };
  std::vector<Side> sides;
  for (int rows : {0, 4, 8, 16})
    for (int segs : {0, 1, 2, 4})
      if ((rows == 0) == (segs == 0)) sides.push_back({rows, segs, false, true});  // by shape, or one fixed shape
  sides.push_back({0, 0, false, false});
  for (int rows : {0, 4, 8, 16}) sides.push_back({rows, rows == 0 ? 0 : 1, true, true});
  for (const Side& sd : sides) {
    const auto got = run(true, sd.rows, sd.segs, sd.cluster, sd.pdl);
    ASSERT_EQ(got.size(), want.size());
    size_t differ = 0;
    for (size_t i = 0; i < got.size(); ++i) differ += count_differing(got[i], want[i]);
    const std::string what = "f16 mma decode rows " + std::to_string(sd.rows) + " segs " + std::to_string(sd.segs) +
                             (sd.cluster ? " clusters" : "") + (sd.pdl ? "" : " plain");
    EXPECT_EQ(differ, 0u) << what;
    std::printf("PARITY %-44s n=1,2,8 shapes=%zu values differing from the previous tiles: %zu  %s\n", what.c_str(),
                std::size(shapes) + n_many, differ, differ == 0 ? "ok" : "FAIL");
  }
}

TEST_F(CudaF16Mma, RingKernelEqualsDecodeKernel) {
  // matmul_f16_mma_ring.cu (CudaBackendOptions::f16_mma_decode_kernel 1: tiles by a counter, 2: static tiles;
  // 3: 1 with the decode kernel's launches of few blocks loading every activation before the chain, 4: 3 with
  // those as programmatic dependents; 5, 6: 3 with 2 or 3 ring blocks per multiprocessor; 7 … 9: the ring with
  // 2-D tensor copies — partial last tiles arrive zero-filled) against the register-direct decode kernel (0), bit for bit, and kernel 0
  // against the CPU (2e-5·max|y|) at n = 1: matmul_many of a CSA layer's six projections plus a ragged-row
  // one-segment job and a three-segment job (the ring's shape: whole tiles of 8, 2, 1 and 3 segments, a partial
  // last tile), the same set twice in a row (the counter is left at zero by each call), the HCA pair (512 × 4096
  // twice: few blocks, clusters), at n = 1, 2, 3, 8; and single matmuls: q_b 8192 × 1024 (enough tiles: the ring), the
  // router 256 × 4096 (clusters) and the head's HC 4 × 16384 (rows split over 32 blocks: the counter).
  // Poisoned outputs: an unwritten value shows as NaN, which never equals.
  const std::pair<int64_t, int64_t> shapes[] = {{1024, 4096}, {1024, 4096}, {256, 4096}, {256, 4096}, {8192, 1024},
                                                {64, 4096},   {37, 512},    {300, 1536}, {4, 16384},  {512, 4096}};
  const size_t n_ring = 8;                       // shapes[0 … 7]: one matmul_many (the ring)
  const std::vector<size_t> hca = {9, 9};        // the HCA pair: one matmul_many of few blocks (clusters)
  const size_t singles[] = {4, 2, 8};            // q_b (the ring), the router's shape and the head's HC (few blocks)
  const int64_t n_max = 8;
  const std::vector<HostCase> hs = host_cases(shapes, n_max);
  auto run = [&](int kernel) {
    backend::cuda::CudaBackendOptions o;
    o.f16_mma = true;
    o.f16_mma_decode_kernel = kernel;
    DeviceSide d(o, hs);
    std::vector<std::vector<float>> out;
    for (int64_t n : {1, 2, 3, 8}) {
      std::vector<std::vector<size_t>> sets = {{}, {}, hca};  // the ring set twice, then the HCA pair
      for (size_t m = 0; m < n_ring; ++m) sets[0].push_back(m), sets[1].push_back(m);
      for (const auto& set : sets) d.matmul_many(hs, set, n, out);
      for (size_t k : singles) d.matmul(hs, k, n, out);
    }
    EXPECT_TRUE(d.be->sync().ok());
    return out;
  };
  const auto want = run(0);
  size_t nan_want = 0;
  for (const auto& v : want)
    for (float f : v) nan_want += std::isnan(f) ? 1 : 0;
  EXPECT_EQ(nan_want, 0u) << "the decode kernel left values unwritten";
  for (size_t m = 0; m < n_ring; ++m) {  // n = 1's first ring set: out[m]
    const int64_t rows = hs[m].w.rows, cols = hs[m].w.cols;
    std::vector<float> ref(static_cast<size_t>(rows));
    cpu_->matmul({hs[m].w, hs[m].x.data(), cols, ref.data(), rows, 1, MatmulNumerics::ds4});
    expect_close(want[m], ref, 2e-5, 1e-7, "f16 mma decode kernel 0 job " + std::to_string(m));
  }
  for (int kernel : {1, 2, 3, 4, 5, 6, 7, 8, 9}) {
    const auto got = run(kernel);
    ASSERT_EQ(got.size(), want.size());
    size_t differ = 0;
    for (size_t i = 0; i < got.size(); ++i) differ += count_differing(got[i], want[i]);
    const std::string what = "f16 mma decode kernel " + std::to_string(kernel);
    EXPECT_EQ(differ, 0u) << what;
    std::printf("PARITY %-44s n=1,2,3,8 calls=%zu values differing from kernel 0: %zu  %s\n", what.c_str(), got.size(),
                differ, differ == 0 ? "ok" : "FAIL");
  }
}
