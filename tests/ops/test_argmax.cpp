// test_argmax.cpp — the CPU backend's argmax op (greedy decoding) against the host scan on every policy
// case (argmax_cases.h), and the runtime's ds4::argmax overloads on the same rows.
#include <gtest/gtest.h>

#include <span>

#include "argmax_cases.h"
#include "backend/cpu/cpu_backend.h"
#include "ds4/sampler.h"

using namespace ds4;

TEST(CpuArgmax, EveryPolicyCaseMatchesTheHostScan) {
  auto be = backend::cpu::make_cpu_backend({1});
  for (const test::ArgmaxCase& c : test::argmax_cases()) {
    std::vector<int32_t> out(static_cast<size_t>(c.rows), -7);
    be->argmax({c.x.data(), c.rows, c.n, c.excluded, out.data()});
    EXPECT_EQ(out, c.expected) << c.name;
    for (int64_t r = 0; r < c.rows; ++r) {
      const std::span<const float> row(c.x.data() + r * c.n, static_cast<size_t>(c.n));
      EXPECT_EQ(argmax(row, c.excluded), c.expected[static_cast<size_t>(r)]) << c.name;
      if (c.excluded < 0) EXPECT_EQ(argmax(row), c.expected[static_cast<size_t>(r)]) << c.name;
    }
  }
}

TEST(CpuArgmax, PolicyByHand) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {1, 5, 5, nan, 2};
  EXPECT_EQ(argmax(x), 1);           // tie → lowest id
  EXPECT_EQ(argmax(x, 1), 2);        // excluded → the tie's other id
  const std::vector<float> y = {nan, 5, 7};
  EXPECT_EQ(argmax(y), 0);           // a NaN first candidate stays the best (the scan's rule)
  EXPECT_EQ(argmax(y, 0), 2);
  EXPECT_EQ(argmax(std::vector<float>{3.0f}, 0), -1);
  EXPECT_EQ(argmax(std::vector<float>{}), 0);  // the sampler's historical answer for no logits
}
