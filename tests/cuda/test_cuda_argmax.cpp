// test_cuda_argmax.cpp — the CUDA argmax kernel (greedy decoding on the device) against the host scan on
// every policy case of argmax_cases.h (ties, excluded id, NaN, ±inf, vocabulary-sized rows), rows at an
// unaligned address too (the kernel's scalar path).
#include "argmax_cases.h"
#include "cuda_test_util.h"

using namespace ds4;
using ds4::test::CudaOpsTest;

TEST_F(CudaOpsTest, ArgmaxMatchesHostScanOnEveryPolicyCase) {
  int cases = 0;
  for (const test::ArgmaxCase& c : test::argmax_cases()) {
    const float* x = dev(c.x);
    int32_t* out = poisoned_i32(static_cast<size_t>(c.rows));
    gpu_->argmax({x, c.rows, c.n, c.excluded, out});
    ASSERT_TRUE(gpu_->sync().ok()) << c.name;
    EXPECT_EQ(host(out, static_cast<size_t>(c.rows)), c.expected) << c.name;
    // The same rows one float past a 16-byte boundary: the scalar loads.
    if (c.rows == 1) {
      std::vector<float> shifted(c.x.size() + 1, 0.0f);
      std::copy(c.x.begin(), c.x.end(), shifted.begin() + 1);
      gpu_->argmax({dev(shifted) + 1, 1, c.n, c.excluded, out});
      ASSERT_TRUE(gpu_->sync().ok()) << c.name;
      EXPECT_EQ(host(out, 1), c.expected) << c.name << " (unaligned)";
    }
    ++cases;
  }
  std::printf("argmax: %d cases equal to the host scan\n", cases);
}

TEST_F(CudaOpsTest, ArgmaxRejectsIdsBeyondInt32) {
  int32_t* out = poisoned_i32(1);
  gpu_->argmax({reinterpret_cast<const float*>(out), 1, int64_t{1} << 32, -1, out});
  EXPECT_FALSE(gpu_->sync().ok());
}

// The cluster form (hc_fuse's hundreds digit with bit 4; sm_90, rows of ≥ 16,384 values: a cluster of 8 blocks a row,
// launched as a programmatic dependent) on the same cases, aligned and one float past a 16-byte boundary.
TEST_F(CudaOpsTest, ArgmaxClusterMatchesHostScanOnEveryPolicyCase) {
  backend::cuda::CudaBackendOptions o;
  o.hc_fuse = 450;
  auto made = backend::cuda::make_cuda_backend(o);
  ASSERT_TRUE(made.ok());
  backend::Backend& be = **made;
  int cases = 0;
  for (const test::ArgmaxCase& c : test::argmax_cases()) {
    auto xb = be.alloc(c.x.size() * 4 + 32, MemCategory::scratch);
    auto ob = be.alloc(static_cast<uint64_t>(c.rows) * 4 + 16, MemCategory::scratch);
    ASSERT_TRUE(xb.ok() && ob.ok());
    for (int shift : {0, 1}) {
      if (shift == 1 && c.rows != 1) continue;
      float* x = xb->f32() + shift;
      be.upload(x, c.x.data(), c.x.size() * 4);
      be.fill_f32(reinterpret_cast<float*>(ob->data()), NAN, c.rows);
      be.argmax({x, c.rows, c.n, c.excluded, ob->i32()});
      ASSERT_TRUE(be.sync().ok()) << c.name;
      std::vector<int32_t> got(static_cast<size_t>(c.rows));
      be.download(got.data(), ob->i32(), got.size() * 4);
      ASSERT_TRUE(be.sync().ok()) << c.name;
      EXPECT_EQ(got, c.expected) << c.name << (shift ? " (unaligned)" : "");
      std::printf("PARITY argmax cluster %-28s n=%-7lld rows %lld%s: %s\n", c.name.c_str(), static_cast<long long>(c.n),
                  static_cast<long long>(c.rows), shift ? " unaligned" : "", got == c.expected ? "ok" : "FAIL");
    }
    ++cases;
  }
  std::printf("argmax cluster: %d cases equal to the host scan\n", cases);
}
