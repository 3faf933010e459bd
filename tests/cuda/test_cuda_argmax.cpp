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
