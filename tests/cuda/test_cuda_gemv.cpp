// test_cuda_gemv.cpp — the dense Q8_0 matmul kernels against the CPU op, bit for bit:
// - gemv_mma.cu (1..64 vectors, forced on every shape it takes: gemv_mma = always, gemv_dense = off):
//   every Flash Q8_0 matrix (q_a, q_b, kv, out_a group, out_b, shared gate/up and down, output head) at
//   n = 1, 2, 4, 5, 8, 16, 33, 64, row counts that leave a partial 8-row tile, strided x and y; a row's
//   bits the same at n = 1, 40 and 64 and on the previous kernels; shapes it does not take still right.
// - gemv_dense.cu (1..16 vectors, forced: gemv_dense = always): the same Flash matrices at n = 1, 2, 3,
//   4, 5, 8, 16 (fused and pre-quantized activations), the grouped out_a (8 × 1024 rows) in one call,
//   partial tiles, odd shapes and shapes it does not take (falling back to the other kernels); a row's
//   bits the same at every n and on the previous decode / skinny kernels (gemv_dense = gemv_mma = off).
// - gemv_stream.cu (1..16 vectors, forced: gemv_stream = always, PDL launches on sm_90): the same suites
//   plus q_b and out_b whole, Backend::matmul_many of Q8_0 matrices sharing x (q_a + kv, gate + up, 8
//   parts; different inputs and 9 jobs falling back), and three launches each reading the one before's y.
// - gemv_rows.cu (1..8 vectors, forced: gemv_rows = always, with and without L1 allocation): the same
//   Flash, grouped, odd-shape, matmul_many and chained suites at n ≤ 8 (larger n falling back).
// - gemv_stream.cu's bulk ring (forced: gemv_bulk = always; sm_90): the Flash matrices at n = 1, 2, 4, 8
//   (q_b, out_b, shared gate/up and down whole), grouped, odd-shape, matmul_many and chained suites.
// - gemv_warp.cu's per-warp rings (forced: gemv_warp = always; sm_90): the gemv_rows suites at n ≤ 4 (5..8 falling
//   back), q_b, out_b and shared down whole at 1, 2 and 4 vectors; half tiles (gemv_warp_tile_bytes).
// Deliberately not here: other weight types and routed experts (test_cuda_matmul.cpp).
#include <algorithm>
#include <cstring>

#include "cuda_test_util.h"

using namespace ds4;
using namespace ds4::backend;
using namespace ds4::test;

namespace {

// Values whose bits differ (NaN in either counts as a difference).
int64_t bit_diffs(const std::vector<float>& a, const std::vector<float>& b) {
  int64_t d = static_cast<int64_t>(a.size() > b.size() ? a.size() - b.size() : b.size() - a.size());
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return d;
}

}  // namespace

// The CPU op vs a CUDA backend made with options(), bit for bit.
class CudaGemvKernel : public CudaOpsTest {
 protected:
  virtual backend::cuda::CudaBackendOptions options() const = 0;
  void SetUp() override {
    CudaOpsTest::SetUp();
    if (IsSkipped()) return;
    auto g = backend::cuda::make_cuda_backend(options());
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    gpu_ = std::move(g).value();  // before any buffer of the fixture is allocated
  }

  // y = W·x on the CPU and on gpu_; asserts the written part is the CPU's bits. group_rows > 0: the
  // grouped form (rows / group_rows groups, group g over x values g·group_x_stride …, as the out_a call).
  void check(int64_t rows, int64_t cols, int64_t n, int64_t x_pad = 0, int64_t y_pad = 0, int64_t group_rows = 0,
             int64_t group_x_stride = 0) {
    Weight w;
    auto bytes = random_weight(GgmlType::Q8_0, rows, cols, &w);
    w.data = bytes.data();
    const int64_t groups = group_rows > 0 ? rows / group_rows : 1;
    const int64_t xs = (groups - 1) * group_x_stride + cols + x_pad, ys = rows + y_pad;
    auto x = randn(static_cast<size_t>(n * xs));
    std::vector<float> want(static_cast<size_t>(n * ys), 0.0f);
    cpu_->matmul({w, x.data(), xs, want.data(), ys, n, MatmulNumerics::ds4, group_rows, group_x_stride});
    float* gy = poisoned(want.size());
    gpu_->matmul({gpu_weight(w, w.row_bytes * rows), dev(x), xs, gy, ys, n, MatmulNumerics::ds4, group_rows,
                  group_x_stride});
    ASSERT_TRUE(gpu_->sync().ok());
    const auto got = host(gy, want.size());
    std::vector<float> g2, w2;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t o = 0; o < rows; ++o) {
        g2.push_back(got[i * ys + o]);
        w2.push_back(want[i * ys + o]);
      }
    const std::string what = "gemv q8_0 " + std::to_string(rows) + "x" + std::to_string(cols) + " n" + std::to_string(n) +
                             (group_rows > 0 ? " groups of " + std::to_string(group_rows) : "");
    expect_close(g2, w2, 0, 0, what);  // the PARITY line; the contract is bit identity
    EXPECT_EQ(bit_diffs(g2, w2), 0) << what << ": values differ from the CPU bits";
  }

  // The suites the ≤ 16-vector kernels (gemv_dense.cu, gemv_stream.cu) share.
  // Every Flash Q8_0 matrix at n = 1, 2, 3, 4, 5, 8, 16: every row at n = 1 (the head's first 20,000:
  // many tiles per block), then 1,000 rows (partial tiles). n·cols > 8,192 takes the pre-quantized
  // activations (4096 columns from n = 3, out_b from 2), the rest the fused quantization; out_b at 16
  // vectors does not fit and falls back.
  void flash_shapes();
  // out_a: 8 groups of 1024 rows, group g over values 4096·g … (fused at n ≤ 2, pre-quantized above),
  // and groups whose inputs are not contiguous.
  void grouped_shapes() {
    for (int64_t n : {1, 2, 4, 5, 8, 16}) {
      check(8 * 1024, 4096, n, n > 1 ? 8 : 0, n > 1 ? 5 : 0, 1024, 4096);
      check(4 * 96, 1024, n, 0, 0, 96, 1024 + 64);
    }
    // Group rows that no power-of-two tile divides except 1; 5 vectors of groups that are not
    // contiguous and not 16-byte apart once quantized (the other kernels take them).
    check(3 * 37, 512, 3, 0, 0, 37, 512);
    check(2 * 64, 4096, 5, 0, 0, 64, 4096 + 64);
  }
  // Row counts that leave a partial tile (1, 5, 13, 1001), one 8-block chunk (256 columns), wide rows of
  // one per tile (24,576 columns: 26 KB a row).
  void odd_shapes() {
    for (int64_t n : {1, 2, 3, 4, 7, 9, 16}) {
      check(1, 256, n);
      check(5, 768, n, 4, 1);
      check(13, 4096, n);
      check(1001, 1280, n, 0, 5);
    }
    check(3, 24576, 1);
  }
  // 96 and 4128 columns (3 and 129 blocks: not whole 8-block chunks) and 17 vectors take the other kernels.
  void outside_shapes() {
    for (int64_t n : {1, 4, 16, 17}) {
      check(40, 96, n);
      check(300, 4128, n);
    }
    check(64, 4096, 17);
  }
};

// Flash's dense Q8_0 matrices (rows × cols).
struct FlashShape {
  int64_t rows, cols;
};
constexpr FlashShape kFlashQ8[] = {
    {1024, 4096},    // q_a, and each of the 8 out_a groups
    {32768, 1024},   // q_b
    {512, 4096},     // kv
    {4096, 8192},    // out_b
    {2048, 4096},    // shared expert gate / up
    {4096, 2048},    // shared expert down
    {129280, 4096},  // output head
};

void CudaGemvKernel::flash_shapes() {
  for (const auto& c : kFlashQ8)
    for (int64_t n : {1, 2, 3, 4, 5, 8, 16}) {
      const int64_t rows = std::min<int64_t>(c.rows, n == 1 ? 20000 : 1000);
      check(rows, c.cols, n, n > 1 ? 8 : 0, n > 1 ? 3 : 0);
    }
}

class CudaGemvMma : public CudaGemvKernel {
 protected:
  backend::cuda::CudaBackendOptions options() const override {
    backend::cuda::CudaBackendOptions o;
    o.gemv_mma = backend::cuda::GemvMma::always;  // the default takes it only where it measured faster
    o.gemv_dense = backend::cuda::GemvMma::off;   // ahead of gemv_mma in the dispatch
    o.gemv_stream = backend::cuda::GemvMma::off;  // ahead of both
    o.gemv_rows = backend::cuda::GemvMma::off;    // ahead of gemv_stream
    o.gemv_bulk = backend::cuda::GemvMma::off;  // ahead of gemv_rows (CudaGemvBulk turns it on)
    o.gemv_warp = backend::cuda::GemvMma::off;  // ahead of gemv_bulk (CudaGemvWarp turns it on)
    return o;
  }
};

TEST_F(CudaGemvMma, FlashShapesEveryBatchSizeBitIdenticalToCpu) {
  for (const auto& c : kFlashQ8)
    for (int64_t n : {1, 2, 4, 5, 8, 16, 33, 64}) {
      // The CPU reference is the cost: every row at n = 1 (the head's first 20,000: still many tiles
      // per warp), 1,000 rows up to n = 8, then 250 (partial 8-row tiles; the column count, which sets
      // the block order, is Flash's).
      int64_t rows = std::min<int64_t>(c.rows, n == 1 ? 20000 : n <= 8 ? 1000 : 250);
      check(rows, c.cols, n, n > 1 ? 8 : 0, n > 1 ? 3 : 0);
    }
}

TEST_F(CudaGemvMma, OddRowCountsAndSmallShapes) {
  // Row counts that are not a multiple of the 8-row tile (1, 5, 13, 1001), one stage of 8 blocks
  // (256 columns), a partial last stage (8 + 16·k blocks), more vectors than tiles of 16.
  for (int64_t n : {1, 3, 8, 9, 17, 40, 64}) {
    check(1, 256, n);
    check(5, 768, n, 4, 1);
    check(13, 4096, n);
    check(1001, 1280, n, 0, 5);
  }
}

TEST_F(CudaGemvMma, ShapesOutsideTheKernelStillMatchTheCpu) {
  // 96 and 4128 columns (3 and 129 blocks: not whole 16-byte chunks) take the previous kernels.
  for (int64_t n : {1, 5, 64}) {
    check(40, 96, n);
    check(300, 4128, n);
  }
}

TEST_F(CudaGemvMma, RowOfAVectorIsTheSameBitsAtEveryBatchSizeAndOnThePreviousKernels) {
  backend::cuda::CudaBackendOptions o;
  o.gemv_mma = backend::cuda::GemvMma::off;
  o.gemv_dense = backend::cuda::GemvMma::off;
  o.gemv_stream = backend::cuda::GemvMma::off;
  o.gemv_rows = backend::cuda::GemvMma::off;
  o.gemv_bulk = backend::cuda::GemvMma::off;  // ahead of gemv_rows (CudaGemvBulk turns it on)
  o.gemv_warp = backend::cuda::GemvMma::off;  // ahead of gemv_bulk (CudaGemvWarp turns it on)
  auto made = backend::cuda::make_cuda_backend(o);
  ASSERT_TRUE(made.ok());
  auto& old = *made;
  for (int64_t cols : {int64_t{4096}, int64_t{8192}, int64_t{1024}}) {
    const int64_t rows = 1001, n_max = 64;
    const auto m = device_matmul(GgmlType::Q8_0, rows, cols, n_max);
    const auto& x = m.x;
    const auto all64 = matmul_slice(m, 0, 64), all40 = matmul_slice(m, 0, 40);
    // The previous kernels on their own backend: decode (n = 1) and skinny / GEMM (n = 40).
    Weight ow = m.w;
    ow.data = *old->map_weight(m.w.data, m.bytes.size());
    auto ox = old->alloc(x.size() * 4, MemCategory::scratch);
    auto oy = old->alloc(static_cast<uint64_t>(40 * rows) * 4, MemCategory::scratch);
    ASSERT_TRUE(ox.ok() && oy.ok());
    old->upload(ox->data(), x.data(), x.size() * 4);
    old->matmul({ow, ox->f32(), cols, oy->f32(), rows, 40, MatmulNumerics::ds4});
    std::vector<float> old40(static_cast<size_t>(40 * rows));
    old->download(old40.data(), oy->data(), old40.size() * 4);
    ASSERT_TRUE(old->sync().ok());
    for (int64_t v : {int64_t{0}, int64_t{17}, int64_t{39}}) {
      const auto one = matmul_slice(m, v, 1);
      old->matmul({ow, ox->f32() + v * cols, cols, oy->f32(), rows, 1, MatmulNumerics::ds4});
      std::vector<float> old1(static_cast<size_t>(rows));
      old->download(old1.data(), oy->data(), old1.size() * 4);
      ASSERT_TRUE(old->sync().ok());
      for (int64_t o = 0; o < rows; ++o) {
        const std::string at = "cols " + std::to_string(cols) + " vector " + std::to_string(v) + " row " + std::to_string(o);
        ASSERT_EQ(std::memcmp(&one[o], &all64[v * rows + o], 4), 0) << "n=1 vs n=64, " << at;
        ASSERT_EQ(std::memcmp(&one[o], &all40[v * rows + o], 4), 0) << "n=1 vs n=40, " << at;
        ASSERT_EQ(std::memcmp(&one[o], &old1[o], 4), 0) << "n=1 vs the previous decode kernel, " << at;
        ASSERT_EQ(std::memcmp(&one[o], &old40[v * rows + o], 4), 0) << "n=1 vs the previous n=40 kernel, " << at;
      }
    }
  }
  ASSERT_TRUE(gpu_->sync().ok());
}

class CudaGemvDense : public CudaGemvKernel {
 protected:
  backend::cuda::CudaBackendOptions options() const override {
    backend::cuda::CudaBackendOptions o;
    o.gemv_dense = backend::cuda::GemvMma::always;  // every shape it supports, n ≤ 16
    o.gemv_stream = backend::cuda::GemvMma::off;    // ahead of gemv_dense in the dispatch
    o.gemv_rows = backend::cuda::GemvMma::off;      // ahead of gemv_stream
    o.gemv_bulk = backend::cuda::GemvMma::off;  // ahead of gemv_rows (CudaGemvBulk turns it on)
    o.gemv_warp = backend::cuda::GemvMma::off;  // ahead of gemv_bulk (CudaGemvWarp turns it on)
    return o;
  }
};

TEST_F(CudaGemvDense, FlashShapesEveryBatchSizeBitIdenticalToCpu) { flash_shapes(); }

TEST_F(CudaGemvDense, GroupedOutputProjectionInOneCall) { grouped_shapes(); }

TEST_F(CudaGemvDense, OddRowCountsAndSmallShapes) { odd_shapes(); }

TEST_F(CudaGemvDense, ShapesOutsideTheKernelStillMatchTheCpu) { outside_shapes(); }

TEST_F(CudaGemvDense, RowOfAVectorIsTheSameBitsAtEveryBatchSizeAndOnThePreviousKernels) {
  backend::cuda::CudaBackendOptions o;
  o.gemv_mma = backend::cuda::GemvMma::off;
  o.gemv_dense = backend::cuda::GemvMma::off;
  o.gemv_stream = backend::cuda::GemvMma::off;
  o.gemv_rows = backend::cuda::GemvMma::off;
  o.gemv_bulk = backend::cuda::GemvMma::off;  // ahead of gemv_rows (CudaGemvBulk turns it on)
  o.gemv_warp = backend::cuda::GemvMma::off;  // ahead of gemv_bulk (CudaGemvWarp turns it on)
  auto made = backend::cuda::make_cuda_backend(o);
  ASSERT_TRUE(made.ok());
  auto& old = *made;
  for (int64_t cols : {int64_t{4096}, int64_t{8192}, int64_t{1024}}) {
    const int64_t rows = 777, n_max = 16;
    const auto m = device_matmul(GgmlType::Q8_0, rows, cols, n_max);
    std::vector<std::vector<float>> at_n;  // vectors 0 … n − 1 at n = 1 … 16
    for (int64_t n = 1; n <= n_max; ++n) at_n.push_back(matmul_slice(m, 0, n));
    Weight ow = m.w;
    ow.data = *old->map_weight(m.w.data, m.bytes.size());
    auto ox = old->alloc(m.x.size() * 4, MemCategory::scratch);
    auto oy = old->alloc(static_cast<uint64_t>(n_max * rows) * 4, MemCategory::scratch);
    ASSERT_TRUE(ox.ok() && oy.ok());
    old->upload(ox->data(), m.x.data(), m.x.size() * 4);
    for (int64_t n : {int64_t{1}, int64_t{4}, int64_t{16}}) {  // the previous decode (≤ 4) and skinny kernels
      old->matmul({ow, ox->f32(), cols, oy->f32(), rows, n, MatmulNumerics::ds4});
      std::vector<float> prev(static_cast<size_t>(n * rows));
      old->download(prev.data(), oy->data(), prev.size() * 4);
      ASSERT_TRUE(old->sync().ok());
      for (int64_t v = 0; v < n; ++v)
        for (int64_t o2 = 0; o2 < rows; ++o2) {
          const std::string at = "cols " + std::to_string(cols) + " vector " + std::to_string(v) + " row " + std::to_string(o2);
          ASSERT_EQ(std::memcmp(&at_n[n - 1][v * rows + o2], &prev[v * rows + o2], 4), 0) << "n=" << n << " vs previous, " << at;
        }
    }
    for (int64_t n = 2; n <= n_max; ++n)
      for (int64_t v = 0; v < n; ++v)
        for (int64_t o2 = 0; o2 < rows; ++o2)
          ASSERT_EQ(std::memcmp(&at_n[n - 1][v * rows + o2], &at_n[v][v * rows + o2], 4), 0)
              << "cols " << cols << " vector " << v << " row " << o2 << ": n=" << n << " vs n=" << v + 1;
  }
  ASSERT_TRUE(gpu_->sync().ok());
}

// gemv_stream.cu (1..16 vectors, forced: gemv_stream = always; PDL launches on sm_90 and column chunks by default).
class CudaGemvStream : public CudaGemvKernel {
 protected:
  backend::cuda::CudaBackendOptions options() const override {
    backend::cuda::CudaBackendOptions o;
    o.gemv_stream = backend::cuda::GemvMma::always;  // every shape it takes, n ≤ 16
    o.gemv_rows = backend::cuda::GemvMma::off;       // ahead of gemv_stream (CudaGemvRows turns it on)
    o.gemv_bulk = backend::cuda::GemvMma::off;  // ahead of gemv_rows (CudaGemvBulk turns it on)
    o.gemv_warp = backend::cuda::GemvMma::off;  // ahead of gemv_bulk (CudaGemvWarp turns it on)
    return o;
  }

  // Backend::matmul_many of Q8_0 jobs over one x (rows[i] × cols each, own y strides) against one CPU
  // matmul per job, bit for bit; x_offset[i] ≥ 0 gives job i its own input x + x_offset[i] instead.
  void check_many(const std::vector<int64_t>& rows, int64_t cols, int64_t n, const std::vector<int64_t>& x_offset = {}) {
    const int64_t xs = cols + 64 + (x_offset.empty() ? 0 : *std::max_element(x_offset.begin(), x_offset.end()));
    auto x = randn(static_cast<size_t>(n * xs));
    const float* gx = dev(x);
    std::vector<std::vector<uint8_t>> bytes(rows.size());
    std::vector<MatmulArgs> cpu_jobs, gpu_jobs;
    std::vector<std::vector<float>> want(rows.size());
    std::vector<float*> gy(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      Weight w;
      bytes[i] = random_weight(GgmlType::Q8_0, rows[i], cols, &w);
      w.data = bytes[i].data();
      const int64_t ys = rows[i] + static_cast<int64_t>(i) * 3, off = x_offset.empty() ? 0 : x_offset[i];
      want[i].assign(static_cast<size_t>(n * ys), 0.0f);
      cpu_->matmul({w, x.data() + off, xs, want[i].data(), ys, n, MatmulNumerics::ds4});
      gy[i] = poisoned(want[i].size());
      gpu_jobs.push_back({gpu_weight(w, w.row_bytes * rows[i]), gx + off, xs, gy[i], ys, n, MatmulNumerics::ds4});
    }
    gpu_->matmul_many(gpu_jobs);
    ASSERT_TRUE(gpu_->sync().ok());
    for (size_t i = 0; i < rows.size(); ++i) {
      const int64_t ys = gpu_jobs[i].y_stride;
      const auto got = host(gy[i], want[i].size());
      std::vector<float> g2, w2;
      for (int64_t v = 0; v < n; ++v)
        for (int64_t o = 0; o < rows[i]; ++o) {
          g2.push_back(got[v * ys + o]);
          w2.push_back(want[i][v * ys + o]);
        }
      const std::string what = "matmul_many q8_0 job " + std::to_string(i) + " of " + std::to_string(rows.size()) +
                               ": " + std::to_string(rows[i]) + "x" + std::to_string(cols) + " n" + std::to_string(n);
      expect_close(g2, w2, 0, 0, what);
      EXPECT_EQ(bit_diffs(g2, w2), 0) << what << ": values differ from the CPU bits";
    }
  }

  void chained() {
    // y1 = A·x, y2 = B·y1, y3 = C·y2 back to back on the stream (programmatic dependents on sm_90: each
    // starts its weight copies while the one before runs, and must read its input only after it ends).
    const int64_t d = 4096;
    Weight w[3];
    std::vector<uint8_t> bytes[3];
    Weight gw[3];
    for (int i = 0; i < 3; ++i) {
      bytes[i] = random_weight(GgmlType::Q8_0, d, d, &w[i], 0.02f);
      w[i].data = bytes[i].data();
      gw[i] = gpu_weight(w[i], w[i].row_bytes * d);
    }
    for (int64_t n : {1, 4}) {
      auto x = randn(static_cast<size_t>(n * d));
      std::vector<float> c1(static_cast<size_t>(n * d)), c2(c1.size()), c3(c1.size());
      cpu_->matmul({w[0], x.data(), d, c1.data(), d, n, MatmulNumerics::ds4});
      cpu_->matmul({w[1], c1.data(), d, c2.data(), d, n, MatmulNumerics::ds4});
      cpu_->matmul({w[2], c2.data(), d, c3.data(), d, n, MatmulNumerics::ds4});
      const float* gx = dev(x);
      float* y1 = poisoned(c1.size());
      float* y2 = poisoned(c1.size());
      float* y3 = poisoned(c1.size());
      for (int rep = 0; rep < 3; ++rep) {
        gpu_->matmul({gw[0], gx, d, y1, d, n, MatmulNumerics::ds4});
        gpu_->matmul({gw[1], y1, d, y2, d, n, MatmulNumerics::ds4});
        gpu_->matmul({gw[2], y2, d, y3, d, n, MatmulNumerics::ds4});
      }
      ASSERT_TRUE(gpu_->sync().ok());
      const std::string what = "chain of 3, n" + std::to_string(n);
      const auto got = host(y3, c3.size());
      expect_close(got, c3, 0, 0, what);
      EXPECT_EQ(bit_diffs(got, c3), 0) << what;
    }
  }
};

TEST_F(CudaGemvStream, FlashShapesEveryBatchSizeBitIdenticalToCpu) {
  flash_shapes();
  check(32768, 1024, 1);  // q_b whole: block ranges of ~124 rows through the 4-slot ring
  check(4096, 8192, 1);   // out_b whole: 2-row stages
}

TEST_F(CudaGemvStream, GroupedOutputProjectionInOneCall) {
  grouped_shapes();
  check(16 * 8, 256, 1, 0, 0, 8, 256);  // 16 groups: more parts than one launch takes (other kernels)
}

TEST_F(CudaGemvStream, OddRowCountsAndSmallShapes) {
  odd_shapes();
  check(300, 24576, 1);  // 26 KB rows, two per block: one row per stage, two stages
}

TEST_F(CudaGemvStream, ShapesOutsideTheKernelStillMatchTheCpu) { outside_shapes(); }

TEST_F(CudaGemvStream, MatmulManySharedInputInOneLaunch) {
  for (int64_t n : {1, 2, 4, 8, 16}) {
    check_many({1024, 512}, 4096, n);   // q_a + kv
    check_many({2048, 2048}, 4096, n);  // shared gate + up
  }
  check_many({7, 1, 300, 64, 5, 9, 33, 2}, 1024, 1);  // 8 parts, some of fewer rows than blocks
  check_many({5, 3}, 768, 3);
  check_many({100, 100}, 4096, 2, {0, 128});  // different inputs: one matmul each
  check_many({100, 100, 100, 100, 100, 100, 100, 100, 100}, 256, 1);  // 9 jobs: one matmul each
}

TEST_F(CudaGemvStream, ChainedLaunchesReadTheOutputOfTheOneBefore) { chained(); }

// gemv_stream.cu's wide rows (4096 and 8192 columns) as column chunks (the default, gemv_stream_chunks):
// the whole out_b and shared gate / up matrices, where a block holds more rows than one 40 KB stage (the
// ring of chunked tiles), at every batch size it takes.
TEST_F(CudaGemvStream, WideRowsWholeMatricesInColumnChunks) {
  for (int64_t n : {1, 2, 4, 8, 16}) check(4096, 8192, n, n > 1 ? 8 : 0, n > 1 ? 3 : 0);  // out_b whole
  for (int64_t n : {1, 2, 5}) check(2048, 4096, n);                                        // shared gate / up
  check(1001, 8192, 3, 0, 5);  // partial row groups of chunked tiles
  for (int64_t n : {1, 2, 8}) check_many({2048, 2048}, 4096, n);  // shared gate + up in one launch
}

// gemv_stream.cu with tiles of whole rows (gemv_stream_chunks = false): the same CPU bits.
class CudaGemvStreamRows : public CudaGemvStream {
 protected:
  backend::cuda::CudaBackendOptions options() const override {
    backend::cuda::CudaBackendOptions o = CudaGemvStream::options();
    o.gemv_stream_chunks = false;
    return o;
  }
};

TEST_F(CudaGemvStreamRows, FlashShapesEveryBatchSizeBitIdenticalToCpu) {
  flash_shapes();
  check(4096, 8192, 1);  // out_b whole: 2-row stages
}

TEST_F(CudaGemvStreamRows, GroupedOutputProjectionInOneCall) { grouped_shapes(); }

TEST_F(CudaGemvStreamRows, OddRowCountsAndSmallShapes) { odd_shapes(); }

TEST_F(CudaGemvStreamRows, MatmulManySharedInputInOneLaunch) {
  for (int64_t n : {1, 2, 8}) check_many({2048, 2048}, 4096, n);  // shared gate + up
}

// gemv_rows.cu (1..8 vectors, forced: gemv_rows = always; weights loaded straight into registers, PDL
// launches on sm_90): every Flash Q8_0 matrix at n = 1, 2, 3, 4, 5, 8 (q_b, out_b and the shared gate/up
// whole; the head's first 20,000 rows), the grouped out_a in one call, odd row counts (partial tiles,
// one-row tiles, 96-octet rows), matmul_many's shared-input sets, chained launches; n > 8 falls back.
class CudaGemvRows : public CudaGemvStream {
 protected:
  backend::cuda::CudaBackendOptions options() const override {
    backend::cuda::CudaBackendOptions o = CudaGemvStream::options();
    o.gemv_rows = backend::cuda::GemvMma::always;
    return o;
  }
  void flash_rows() {
    for (const auto& c : kFlashQ8)
      for (int64_t n : {1, 2, 3, 4, 5, 8}) {
        const int64_t rows = std::min<int64_t>(c.rows, n == 1 ? 20000 : 1000);
        check(rows, c.cols, n, n > 1 ? 8 : 0, n > 1 ? 3 : 0);
      }
    check(32768, 1024, 1);  // q_b whole: ~248 rows a block, 64-row tiles
    check(4096, 8192, 2);   // out_b whole: 8-row tiles, pre-quantized activations
    check(4096, 8192, 8);   // 8 vectors of 8192 columns: beyond its shared memory (other kernels)
    check(2048, 4096, 1);   // shared gate / up whole
  }
};

TEST_F(CudaGemvRows, FlashShapesBitIdenticalToCpu) { flash_rows(); }

TEST_F(CudaGemvRows, GroupedOutputProjectionInOneCall) {
  for (int64_t n : {1, 2, 4}) {
    check(8 * 1024, 4096, n, n > 1 ? 8 : 0, n > 1 ? 5 : 0, 1024, 4096);
    check(4 * 96, 1024, n, 0, 0, 96, 1024 + 64);
  }
  check(3 * 37, 512, 3, 0, 0, 37, 512);
  check(2 * 64, 4096, 5, 0, 0, 64, 4096 + 64);
  check(8 * 1024, 4096, 8, 8, 5, 1024, 4096);
  check(2 * 64, 4096, 9, 0, 0, 64, 4096);  // 9 vectors: other kernels
}

TEST_F(CudaGemvRows, OddRowCountsAndSmallShapes) {
  odd_shapes();
  check(300, 24576, 1);  // 96 octets a row: 2-row tiles
  check(300, 24576, 2);
}

TEST_F(CudaGemvRows, MatmulManySharedInputInOneLaunch) {
  for (int64_t n : {1, 2, 4, 8}) {
    check_many({1024, 512}, 4096, n);   // q_a + kv
    check_many({2048, 2048}, 4096, n);  // shared gate + up
  }
  check_many({7, 1, 300, 64, 5, 9, 33, 2}, 1024, 1);  // 8 parts, some of fewer rows than blocks
  check_many({5, 3}, 768, 3);
  check_many({100, 100}, 4096, 2, {0, 128});  // different inputs: one matmul each
}

TEST_F(CudaGemvRows, ChainedLaunchesReadTheOutputOfTheOneBefore) { chained(); }

// The same kernel with the weight loads not allocating in L1 (gemv_rows_no_l1): the same CPU bits.
class CudaGemvRowsNoL1 : public CudaGemvRows {
 protected:
  backend::cuda::CudaBackendOptions options() const override {
    backend::cuda::CudaBackendOptions o = CudaGemvRows::options();
    o.gemv_rows_no_l1 = true;
    return o;
  }
};

TEST_F(CudaGemvRowsNoL1, FlashShapesBitIdenticalToCpu) {
  for (const auto& c : kFlashQ8) check(std::min<int64_t>(c.rows, 20000), c.cols, 1);
  check(4096, 8192, 2, 8, 3);
}

// The dense ramp bits (dense_ramp.h, in l2_prefetch_mode: 64 | 256, exactly: 128; the default sets them at one
// vector): gemv_rows moves two tiles before griddepcontrol.wait at every vector count (sm_90, PDL launches;
// elsewhere ignored) and quantizes its activations straight into the per-octet layout. The CPU bits on every Flash matrix (q_b whole: one-chunk tiles; out_b and out_a's groups
// whole: column chunks), blocks of one tile, chains.
class CudaGemvRowsRamp : public CudaGemvRows {
 protected:
  backend::cuda::CudaBackendOptions options() const override {
    backend::cuda::CudaBackendOptions o = CudaGemvRows::options();
    o.l2_prefetch_mode = 128 | 64 | 256;  // kRampExplicit | both ramp bits at every vector count
    return o;
  }
  void norm_between();
};

TEST_F(CudaGemvRowsRamp, FlashShapesBitIdenticalToCpu) {
  flash_rows();
  check(4096, 8192, 1);  // out_b whole at one token
}

TEST_F(CudaGemvRowsRamp, GroupedOutputProjectionInOneCall) {
  for (int64_t n : {1, 2}) check(8 * 1024, 4096, n, n > 1 ? 8 : 0, n > 1 ? 5 : 0, 1024, 4096);
  check(3 * 37, 512, 1, 0, 0, 37, 512);
}

TEST_F(CudaGemvRowsRamp, OddRowCountsAndSmallShapes) { odd_shapes(); }

TEST_F(CudaGemvRowsRamp, ChainedLaunchesReadTheOutputOfTheOneBefore) { chained(); }

TEST_F(CudaGemvRowsRamp, NormBetweenTwoMatvecs) { norm_between(); }

// q_a → its RMSNorm in place → q_b (the forward pass's query path at one token, Flash shapes), three times back
// to back: q_b's two tiles move before its wait, it must still read the normed row.
void CudaGemvRowsRamp::norm_between() {
  const int64_t E = 4096, Q = 1024, HD = 32768;
  Weight wa, wb;
  auto ba = random_weight(GgmlType::Q8_0, Q, E, &wa, 0.02f);
  auto bb = random_weight(GgmlType::Q8_0, HD, Q, &wb, 0.02f);
  wa.data = ba.data();
  wb.data = bb.data();
  const Weight ga = gpu_weight(wa, wa.row_bytes * Q), gb = gpu_weight(wb, wb.row_bytes * HD);
  const auto nw = randn(static_cast<size_t>(Q));
  for (int64_t n : {1, 2}) {
    const auto x = randn(static_cast<size_t>(n * E));
    std::vector<float> qa(static_cast<size_t>(n * Q)), q(static_cast<size_t>(n * HD));
    cpu_->matmul({wa, x.data(), E, qa.data(), Q, n, MatmulNumerics::ds4});
    cpu_->rms_norm({qa.data(), qa.data(), nw.data(), n, Q, Q, 1e-6f});
    cpu_->matmul({wb, qa.data(), Q, q.data(), HD, n, MatmulNumerics::ds4});
    const float* gx = dev(x);
    const float* gw = dev(nw);
    float* gqa = poisoned(qa.size());
    float* gq = poisoned(q.size());
    for (int rep = 0; rep < 3; ++rep) {
      gpu_->matmul({ga, gx, E, gqa, Q, n, MatmulNumerics::ds4});
      gpu_->rms_norm({gqa, gqa, gw, n, Q, Q, 1e-6f});
      gpu_->matmul({gb, gqa, Q, gq, HD, n, MatmulNumerics::ds4});
    }
    ASSERT_TRUE(gpu_->sync().ok());
    const std::string what = "q_a, norm, q_b n" + std::to_string(n);
    const auto got = host(gq, q.size());
    expect_close(got, q, 0, 0, what);
    EXPECT_EQ(bit_diffs(got, q), 0) << what;
  }
}

// The ring (dense_ramp.h kRampRowsRing, sm_90; below it the register path): two whole-tile slots filled by
// cp.async, with the two tiles before the wait and the direct quantization — the ramp fixture's cases.
class CudaGemvRowsRing : public CudaGemvRowsRamp {
 protected:
  backend::cuda::CudaBackendOptions options() const override {
    backend::cuda::CudaBackendOptions o = CudaGemvRowsRamp::options();
    o.l2_prefetch_mode = 128 | 64 | 256 | 1024;
    return o;
  }
};

TEST_F(CudaGemvRowsRing, FlashShapesBitIdenticalToCpu) {
  flash_rows();
  check(4096, 8192, 1);
}

TEST_F(CudaGemvRowsRing, GroupedOutputProjectionInOneCall) {
  for (int64_t n : {1, 2, 4}) check(8 * 1024, 4096, n, n > 1 ? 8 : 0, n > 1 ? 5 : 0, 1024, 4096);
  check(3 * 37, 512, 1, 0, 0, 37, 512);
}

TEST_F(CudaGemvRowsRing, OddRowCountsAndSmallShapes) {
  odd_shapes();
  check(300, 24576, 1);
}

TEST_F(CudaGemvRowsRing, ChainedLaunchesReadTheOutputOfTheOneBefore) { chained(); }

// The ring alone (no two tiles before the wait, the rearranged quantization).
class CudaGemvRowsRingOnly : public CudaGemvRowsRamp {
 protected:
  backend::cuda::CudaBackendOptions options() const override {
    backend::cuda::CudaBackendOptions o = CudaGemvRowsRamp::options();
    o.l2_prefetch_mode = 128 | 1024;
    return o;
  }
};

TEST_F(CudaGemvRowsRingOnly, FlashShapesBitIdenticalToCpu) {
  for (const auto& c : kFlashQ8) check(std::min<int64_t>(c.rows, 20000), c.cols, 1);
  check(32768, 1024, 1);
  check(4096, 8192, 1);
  check(4096, 8192, 2, 8, 3);
  check(8 * 1024, 4096, 1, 0, 0, 1024, 4096);
}

// The half kernel (dense_ramp.h kRampRowsHalf, sm_90, one vector: one cp.async ring slot, two blocks an SM, on the
// launches whose blocks keep full tiles — out_a, q_b, the head; the others on the register path) with the default's
// other bits, the bulk ring on as in the engine (q_b on it): the CPU bits on every Flash matrix at one vector (rows up
// to 20,000; out_b and out_a's groups whole), two vectors (the ring), odd shapes, chains — out_a's shape, out_b's,
// out_a's again as programmatic dependents (the half kernel after the register path and before it).
class CudaGemvRowsHalf : public CudaGemvRowsRamp {
 protected:
  backend::cuda::CudaBackendOptions options() const override {
    backend::cuda::CudaBackendOptions o = CudaGemvRowsRamp::options();
    o.l2_prefetch_mode = 128 | 64 | 512 | 256 | 1024 | 2048 | 4096;
    o.gemv_bulk = backend::cuda::GemvMma::wins;
    return o;
  }
  void half_shapes() {
    for (const auto& c : kFlashQ8) check(std::min<int64_t>(c.rows, 20000), c.cols, 1);
    check(32768, 1024, 1);  // q_b whole: 64-row tiles
    check(4096, 8192, 1);   // out_b whole: the register path
    check(32768, 1024, 2);  // (two vectors: the bulk ring / the ring)
    check(4096, 8192, 2, 8, 3);
    for (int64_t n : {1, 2}) check(8 * 1024, 4096, n, n > 1 ? 8 : 0, n > 1 ? 5 : 0, 1024, 4096);  // out_a whole
    check(3 * 37, 512, 1, 0, 0, 37, 512);
    check(7400, 4096, 1);  // the fewest rows of 4096 columns that take the half kernel: 28 a block
  }
  // y1 = A·x (8192 × 4096, the half kernel), y2 = B·y1 (4096 × 8192, the register path), y3 = C·y2 (A's shape),
  // three times back to back.
  void chained_half() {
    const int64_t r[3] = {8192, 4096, 8192}, c[3] = {4096, 8192, 4096};
    Weight w[3], gw[3];
    std::vector<uint8_t> bytes[3];
    for (int i = 0; i < 3; ++i) {
      bytes[i] = random_weight(GgmlType::Q8_0, r[i], c[i], &w[i], 0.02f);
      w[i].data = bytes[i].data();
      gw[i] = gpu_weight(w[i], w[i].row_bytes * r[i]);
    }
    const auto x = randn(4096);
    std::vector<float> c1(8192), c2(4096), c3(8192);
    cpu_->matmul({w[0], x.data(), 4096, c1.data(), 8192, 1, MatmulNumerics::ds4});
    cpu_->matmul({w[1], c1.data(), 8192, c2.data(), 4096, 1, MatmulNumerics::ds4});
    cpu_->matmul({w[2], c2.data(), 4096, c3.data(), 8192, 1, MatmulNumerics::ds4});
    const float* gx = dev(x);
    float* y1 = poisoned(c1.size());
    float* y2 = poisoned(c2.size());
    float* y3 = poisoned(c3.size());
    for (int rep = 0; rep < 3; ++rep) {
      gpu_->matmul({gw[0], gx, 4096, y1, 8192, 1, MatmulNumerics::ds4});
      gpu_->matmul({gw[1], y1, 8192, y2, 4096, 1, MatmulNumerics::ds4});
      gpu_->matmul({gw[2], y2, 4096, y3, 8192, 1, MatmulNumerics::ds4});
    }
    ASSERT_TRUE(gpu_->sync().ok());
    const auto got = host(y3, c3.size());
    expect_close(got, c3, 0, 0, "half chain of 3");
    EXPECT_EQ(bit_diffs(got, c3), 0) << "half chain of 3";
  }
};

TEST_F(CudaGemvRowsHalf, FlashShapesBitIdenticalToCpu) { half_shapes(); }

TEST_F(CudaGemvRowsHalf, OddRowCountsAndSmallShapes) {
  odd_shapes();
  check(300, 24576, 1);
}

TEST_F(CudaGemvRowsHalf, ChainedLaunchesReadTheOutputOfTheOneBefore) {
  chained();
  chained_half();
}

TEST_F(CudaGemvRowsHalf, NormBetweenTwoMatvecs) { norm_between(); }

// The same with the bulk ring off: q_b on the half kernel too (q_a → norm → q_b).
class CudaGemvRowsHalfNoBulk : public CudaGemvRowsHalf {
 protected:
  backend::cuda::CudaBackendOptions options() const override {
    backend::cuda::CudaBackendOptions o = CudaGemvRowsHalf::options();
    o.gemv_bulk = backend::cuda::GemvMma::off;
    return o;
  }
};

TEST_F(CudaGemvRowsHalfNoBulk, FlashShapesBitIdenticalToCpu) { half_shapes(); }

TEST_F(CudaGemvRowsHalfNoBulk, NormBetweenTwoMatvecs) { norm_between(); }

// The half kernel on 16-row tiles of 16 octets where 32-row tiles would run half empty (dense_ramp.h kRampHalfRows16:
// out_b, 15.5 rows a block) and q_a's norm triggering its dependents after its wait (kRampNormTrigger: q_b's copies
// under the norm), on the default's bits: out_b whole (two full tiles a block, chains over both), row counts that
// leave 14-row blocks or fall back (3,000 rows: the register path), 4096 columns at 5,000 rows (16-row tiles of
// whole rows), the chains through out_b, q_a → norm → q_b.
class CudaGemvRowsHalf16 : public CudaGemvRowsHalf {
 protected:
  backend::cuda::CudaBackendOptions options() const override {
    backend::cuda::CudaBackendOptions o = CudaGemvRowsHalf::options();
    o.l2_prefetch_mode |= 524288 | 1048576;  // kRampHalfRows16 | kRampNormTrigger
    return o;
  }
};

TEST_F(CudaGemvRowsHalf16, FlashShapesBitIdenticalToCpu) {
  half_shapes();
  check(3900, 8192, 1);  // 14 or 15 rows a block
  check(3000, 8192, 1);  // too few rows for full 16-row tiles: the register path
  check(5000, 4096, 1);  // 16-row tiles of whole 4096-column rows
  check(4096, 8192, 1, 0, 7);
}

TEST_F(CudaGemvRowsHalf16, ChainedLaunchesReadTheOutputOfTheOneBefore) {
  chained();
  chained_half();
}

TEST_F(CudaGemvRowsHalf16, NormBetweenTwoMatvecs) { norm_between(); }

// The same with the bulk ring off: q_b on the half kernel too, a programmatic dependent of the triggering norm.
class CudaGemvRowsHalf16NoBulk : public CudaGemvRowsHalf16 {
 protected:
  backend::cuda::CudaBackendOptions options() const override {
    backend::cuda::CudaBackendOptions o = CudaGemvRowsHalf16::options();
    o.gemv_bulk = backend::cuda::GemvMma::off;
    return o;
  }
};

TEST_F(CudaGemvRowsHalf16NoBulk, NormBetweenTwoMatvecs) { norm_between(); }

// The half kernel's slot filled by cp.async.bulk row pieces on each warp's mbarrier (dense_ramp.h kRampRowsBulk,
// gemv_rows.cu bulk_slice) on the default's bits: the Half16 cases, and chunk widths C = 1, 3, 5 (256, 768, 1280
// columns: a warp's slice of 32, ~11 or ~7 rows; the tile's 256th slot past its rows) at the fewest rows that take the
// half kernel, partial last tiles (slices with no row of the block: an arrival of 0 bytes), chains.
class CudaGemvRowsHalfBulk : public CudaGemvRowsHalf16 {
 protected:
  backend::cuda::CudaBackendOptions options() const override {
    backend::cuda::CudaBackendOptions o = CudaGemvRowsHalf16::options();
    o.l2_prefetch_mode |= 4194304;  // kRampRowsBulk
    return o;
  }
};

TEST_F(CudaGemvRowsHalfBulk, FlashShapesBitIdenticalToCpu) {
  half_shapes();
  check(3900, 8192, 1);
  check(4096, 8192, 1, 0, 7);
  check(5000, 4096, 1);
}

TEST_F(CudaGemvRowsHalfBulk, NarrowChunksAndPartialTiles) {
  check(60000, 256, 1);   // C = 1: 256-row tiles, every slot a row
  check(20001, 768, 1);   // C = 3: 85-row tiles
  check(12007, 1280, 1);  // C = 5: 51-row tiles
  check(8190, 4096, 1);   // out_a's shape less two rows
}

TEST_F(CudaGemvRowsHalfBulk, ChainedLaunchesReadTheOutputOfTheOneBefore) {
  chained();
  chained_half();
}

TEST_F(CudaGemvRowsHalfBulk, NormBetweenTwoMatvecs) { norm_between(); }

// gemv_warp.cu's per-warp bulk rings (1..4 vectors, sm_90, forced: gemv_warp = always; below sm_90 the launch
// declines and the other kernels give the same bits): every Flash Q8_0 matrix at n = 1..8 (5..8: other kernels), q_b, out_b, gate/up and down whole
// (the rings refilled many times, partial last tiles), grouped out_a, odd shapes, matmul_many's sets,
// chained launches (PDL: the copies before the previous kernel ends, the activations after it).
class CudaGemvWarp : public CudaGemvRows {
 protected:
  backend::cuda::CudaBackendOptions options() const override {
    backend::cuda::CudaBackendOptions o = CudaGemvRows::options();
    o.gemv_warp = backend::cuda::GemvMma::always;
    return o;
  }
};

TEST_F(CudaGemvWarp, FlashShapesBitIdenticalToCpu) {
  flash_rows();
  check(4096, 8192, 1);  // out_b whole: one-row tiles
  check(4096, 8192, 4, 8, 3);
  check(4096, 2048, 1);  // shared down whole: 4-row tiles
  check(4096, 2048, 2);
  check(32768, 1024, 2);  // q_b whole: 8-row tiles
  check(32768, 1024, 4);
}

TEST_F(CudaGemvWarp, GroupedOutputProjectionInOneCall) {
  for (int64_t n : {1, 2, 3, 4}) check(8 * 1024, 4096, n, n > 1 ? 8 : 0, n > 1 ? 5 : 0, 1024, 4096);
  check(4 * 96, 1024, 3, 0, 0, 96, 1024 + 64);
  check(3 * 37, 512, 3, 0, 0, 37, 512);
  check(2 * 64, 4096, 5, 0, 0, 64, 4096 + 64);  // 5 vectors: other kernels
}

TEST_F(CudaGemvWarp, OddRowCountsAndSmallShapes) {
  odd_shapes();
  check(300, 24576, 1);  // 26 KB rows: beyond its shared memory (other kernels)
  check(1001, 2048, 1, 0, 5);
}

TEST_F(CudaGemvWarp, MatmulManySharedInputInOneLaunch) {
  for (int64_t n : {1, 2, 3, 4}) {
    check_many({1024, 512}, 4096, n);   // q_a + kv
    check_many({2048, 2048}, 4096, n);  // shared gate + up
  }
  check_many({7, 1, 300, 64, 5, 9, 33, 2}, 1024, 1);  // 8 parts, some of fewer rows than blocks
  check_many({5, 3}, 768, 3);
  check_many({100, 100}, 4096, 2, {0, 128});  // different inputs: one matmul each
}

TEST_F(CudaGemvWarp, ChainedLaunchesReadTheOutputOfTheOneBefore) { chained(); }

// Other tile sizes (gemv_warp_tile_bytes: half tiles with more slots a warp, double tiles): the same CPU bits.
class CudaGemvWarpTiles : public CudaGemvWarp {
 protected:
  int tile_bytes = 4352;
  backend::cuda::CudaBackendOptions options() const override {
    backend::cuda::CudaBackendOptions o = CudaGemvWarp::options();
    o.gemv_warp_tile_bytes = tile_bytes;
    return o;
  }
};

TEST_F(CudaGemvWarpTiles, HalfTilesBitIdenticalToCpu) {
  for (int64_t n : {1, 2}) {
    check(32768, 1024, n);
    check(4096, 8192, n);
    check(8 * 1024, 4096, n, 0, 0, 1024, 4096);
    check_many({1024, 512}, 4096, n);
  }
}

// gemv_stream.cu's bulk ring (1..16 vectors, forced: gemv_bulk = always, gemv_rows off; sm_90 only — below
// it the launch declines and the other kernels give the same bits): every Flash Q8_0 matrix at n = 1, 2, 4,
// 8 (every row at 1 — the head's first 20,000 —, 1,000 at more: partial row groups), q_b, out_b and the
// shared gate/up and down whole (the 6-slot ring refilled many times; 31 rows a block balanced as 16 + 15),
// the grouped out_a, odd row counts, matmul_many's sets (q_a + kv: every tile requested at the start),
// chained launches (PDL: the copies start before the previous kernel ends, the activations after it).
class CudaGemvBulk : public CudaGemvStream {
 protected:
  backend::cuda::CudaBackendOptions options() const override {
    backend::cuda::CudaBackendOptions o = CudaGemvStream::options();
    o.gemv_bulk = backend::cuda::GemvMma::always;
    return o;
  }
};

TEST_F(CudaGemvBulk, FlashShapesBitIdenticalToCpu) {
  for (const auto& c : kFlashQ8)
    for (int64_t n : {1, 2, 4, 8}) {
      const int64_t rows = std::min<int64_t>(c.rows, n == 1 ? 20000 : 1000);
      check(rows, c.cols, n, n > 1 ? 8 : 0, n > 1 ? 3 : 0);
    }
  check(32768, 1024, 1);  // q_b whole
  check(32768, 1024, 4);
  check(4096, 8192, 1);   // out_b whole: chunked tiles
  check(4096, 8192, 2);
  check(2048, 4096, 1);   // shared gate / up whole
  check(4096, 2048, 1);   // shared down whole
  check(4096, 8192, 16);  // beyond the bulk ring's shared memory: other kernels
}

TEST_F(CudaGemvBulk, GroupedOutputProjectionInOneCall) {
  for (int64_t n : {1, 2, 4, 8}) check(8 * 1024, 4096, n, n > 1 ? 8 : 0, n > 1 ? 5 : 0, 1024, 4096);
  check(4 * 96, 1024, 3, 0, 0, 96, 1024 + 64);
  check(3 * 37, 512, 3, 0, 0, 37, 512);
}

TEST_F(CudaGemvBulk, OddRowCountsAndSmallShapes) {
  odd_shapes();
  check(300, 24576, 1);  // 26 KB rows: chunked tiles of many rows
}

TEST_F(CudaGemvBulk, MatmulManySharedInputInOneLaunch) {
  for (int64_t n : {1, 2, 4, 8, 16}) {
    check_many({1024, 512}, 4096, n);   // q_a + kv
    check_many({2048, 2048}, 4096, n);  // shared gate + up
  }
  check_many({7, 1, 300, 64, 5, 9, 33, 2}, 1024, 1);  // 8 parts, some of fewer rows than blocks
  check_many({100, 100}, 4096, 2, {0, 128});          // different inputs: one matmul each
}

TEST_F(CudaGemvBulk, ChainedLaunchesReadTheOutputOfTheOneBefore) { chained(); }

// The bulk rings under the default (gemv_bulk = wins, the other kernels off): the launches where ring 1 measured
// faster (kv alone at 1–2 vectors, q_a at 2, shared down at 1) and ring 2 (q_b at 1–4, shared down at 2) run
// them; the rest take the kernels after them.
class CudaGemvBulkWins : public CudaGemvStream {
 protected:
  backend::cuda::CudaBackendOptions options() const override {
    backend::cuda::CudaBackendOptions o = CudaGemvStream::options();
    o.gemv_bulk = backend::cuda::GemvMma::wins;
    o.gemv_warp = backend::cuda::GemvMma::off;
    return o;
  }
};

TEST_F(CudaGemvBulkWins, ItsShapesBitIdenticalToCpu) {
  for (int64_t n : {1, 2}) check(512, 4096, n, n > 1 ? 8 : 0, n > 1 ? 3 : 0);  // kv
  check(1024, 4096, 2, 8, 3);                                                  // q_a
  check(4096, 2048, 1);                                                        // shared down whole
  check(1001, 2048, 1, 0, 5);
  check(4096, 2048, 2);                                                 // shared down at 2: ring 2
  for (int64_t n : {1, 2, 4}) check(32768, 1024, n, n > 1 ? 8 : 0, 0);  // q_b whole: ring 2
  check(32768, 1024, 8);             // q_b at 8: the kernels after them
  check_many({1024, 512}, 4096, 2);  // q_a + kv: 1,536 rows, not measured on them
}
