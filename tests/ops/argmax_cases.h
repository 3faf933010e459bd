// argmax_cases.h — rows of logits that pin down Backend::argmax's policy (ties → lowest id, the excluded id,
// NaN at and after the first candidate, ±inf, all equal, a vocabulary-sized row), with the expected id of
// each row from the host scan (argmax_row.h). Used by the CPU op test (tests/ops/test_argmax.cpp) and the
// CUDA kernel test (tests/cuda/test_cuda_argmax.cpp), so both backends answer the same cases.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/argmax_row.h"

namespace ds4::test {

struct ArgmaxCase {
  std::string name;
  int64_t rows = 0, n = 0;
  int32_t excluded = -1;
  std::vector<float> x;          // [rows][n]
  std::vector<int32_t> expected;  // [rows], from argmax_row
};

inline std::vector<ArgmaxCase> argmax_cases() {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<ArgmaxCase> cs;
  auto add = [&](std::string name, int64_t rows, int64_t n, int32_t excluded, std::vector<float> x) {
    ArgmaxCase c{std::move(name), rows, n, excluded, std::move(x), {}};
    for (int64_t r = 0; r < rows; ++r) c.expected.push_back(backend::argmax_row(c.x.data() + r * n, n, excluded));
    cs.push_back(std::move(c));
  };
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0.0f, 3.0f);
  auto random_rows = [&](int64_t rows, int64_t n) {
    std::vector<float> x(static_cast<size_t>(rows * n));
    for (float& v : x) v = d(rng);
    return x;
  };
  // A vocabulary-sized batch (129,280 = DeepSeek V4's n_vocab, a multiple of 4) and an odd size.
  add("vocab rows", 3, 129280, -1, random_rows(3, 129280));
  add("odd size", 2, 1001, -1, random_rows(2, 1001));
  // Ties: the maximum at several ids, one tie straddling float4 groups and thread strides.
  {
    std::vector<float> x = random_rows(1, 50000);
    for (int64_t i : {45000, 777, 4096 + 3, 30000}) x[static_cast<size_t>(i)] = 100.0f;
    add("ties lowest id", 1, 50000, -1, x);
  }
  // The excluded id holding the maximum, then excluded with a tie behind it, then id 0 excluded.
  {
    std::vector<float> x = random_rows(1, 70000);
    x[1234] = 50.0f;
    x[60000] = 40.0f;
    add("excluded max", 1, 70000, 1234, x);
    x[60001] = 50.0f;
    add("excluded with tie", 1, 70000, 1234, x);
    x[0] = 99.0f;
    add("excluded id 0", 1, 70000, 0, x);
  }
  // NaN policy: NaNs elsewhere are never chosen; a NaN at the first candidate id is the answer.
  {
    std::vector<float> x = random_rows(1, 4099);
    x[17] = nan;
    x[4098] = nan;
    add("nan skipped", 1, 4099, -1, x);
    x[0] = nan;
    add("nan first", 1, 4099, -1, x);
    add("nan at id 0 excluded", 1, 4099, 0, x);
    x[1] = nan;
    add("nan first after excluded 0", 1, 4099, 0, x);
  }
  add("all nan", 1, 64, -1, std::vector<float>(64, nan));
  add("all equal", 1, 5000, -1, std::vector<float>(5000, 0.25f));
  add("all -inf", 1, 300, -1, std::vector<float>(300, -inf));
  {
    std::vector<float> x(300, -inf);
    x[299] = inf;
    x[150] = inf;
    add("+inf ties", 1, 300, -1, x);
  }
  add("one id excluded: none left", 1, 1, 0, {1.0f});
  add("one id", 1, 1, -1, {-3.0f});
  return cs;
}

}  // namespace ds4::test
