// bench_median.h — the host-timed rule of the CUDA benchmarks (cuda_bench.cpp's op lines, cuda_prefill_bench.cpp
// and its stage lines in cuda_prefill_stages.cpp; METHOD.md): one warm-up call, then the median of 5 repetitions of `iters`
// back-to-back calls, each timed on the host around the backend's sync. Not for decode-step timing
// (cuda_bench_stages.cpp replays CUDA graphs with device events).
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

namespace ds4::test {

// Seconds per call of `body`.
inline double median_seconds(const std::function<void()>& body, const std::function<void()>& sync, int iters) {
  using Clock = std::chrono::steady_clock;
  body();
  sync();
  std::vector<double> t;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) body();
    sync();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / iters);
  }
  std::sort(t.begin(), t.end());
  return t[2];
}

}  // namespace ds4::test
