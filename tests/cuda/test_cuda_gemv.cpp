// test_cuda_gemv.cpp — the dense Q8_0 matmul of 1..64 vectors (gemv_mma.cu, forced on every shape it
// takes: CudaBackendOptions::gemv_mma = always) against the CPU op, bit for bit: every Flash Q8_0
// matrix (q_a, q_b, kv, out_a group, out_b, shared gate/up and down, output head) at n = 1, 2, 4, 5, 8,
// 16, 33, 64, row counts that leave a partial 8-row tile, strided x and y; a row's bits the same at
// n = 1, 40 and 64 and on the previous kernels (gemv_mma = off); shapes the kernel does not take (a
// row that is not whole 8-block chunks) still right.
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

class CudaGemvMma : public CudaOpsTest {
 protected:
  void SetUp() override {
    CudaOpsTest::SetUp();
    if (IsSkipped()) return;
    backend::cuda::CudaBackendOptions o;
    o.gemv_mma = backend::cuda::GemvMma::always;  // the default takes it only where it measured faster
    auto g = backend::cuda::make_cuda_backend(o);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    gpu_ = std::move(g).value();  // before any buffer of the fixture is allocated
  }

  // y = W·x on the CPU and the default CUDA backend; asserts the written part is the CPU's bits.
  void check(int64_t rows, int64_t cols, int64_t n, int64_t x_pad = 0, int64_t y_pad = 0) {
    Weight w;
    auto bytes = random_weight(GgmlType::Q8_0, rows, cols, &w);
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
    const std::string what = "gemv q8_0 " + std::to_string(rows) + "x" + std::to_string(cols) + " n" + std::to_string(n);
    expect_close(g2, w2, 0, 0, what);  // the PARITY line; the contract is bit identity
    EXPECT_EQ(bit_diffs(g2, w2), 0) << what << ": values differ from the CPU bits";
  }
};

TEST_F(CudaGemvMma, FlashShapesEveryBatchSizeBitIdenticalToCpu) {
  const struct {
    int64_t rows, cols;
  } flash[] = {
      {1024, 4096},   // q_a, and each of the 8 out_a groups
      {32768, 1024},  // q_b
      {512, 4096},    // kv
      {4096, 8192},   // out_b
      {2048, 4096},   // shared expert gate / up
      {4096, 2048},   // shared expert down
      {129280, 4096}, // output head
  };
  for (const auto& c : flash)
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
