// bench_graph.h — the device-timed rule of the decode-shaped bench lines (cuda_f16_bench.cpp's decode calls,
// cuda_bench_f16dec.cpp): `iters` calls recorded into one step graph (as decode steps replay them), the graph
// replayed 5 times between the backend's device time marks, the median in µs per call. The host-timed rule
// (bench_median.h) is launch-bound for one-token calls.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "backend/backend.h"

namespace ds4::test {

// Device µs per call of call(0 … iters − 1) replayed as one graph under `key` (a key no other graph of `be` uses).
inline double graph_median_us(backend::Backend& be, int64_t key, int iters, const std::function<void(int)>& call) {
  const int64_t k[1] = {key};
  auto step = [&] {
    if (be.graph_begin(k) == backend::Backend::GraphMode::replayed) return;
    for (int i = 0; i < iters; ++i) call(i);
    if (!be.graph_end())
      for (int i = 0; i < iters; ++i) call(i);
  };
  step();  // eager (sizes scratch)
  step();  // recorded
  (void)be.sync();
  std::vector<double> t;
  for (int rep = 0; rep < 5; ++rep) {
    be.time_mark(0);
    step();
    be.time_mark(1);
    (void)be.sync();
    t.push_back(be.time_ms(0, 1));
  }
  std::sort(t.begin(), t.end());
  return t[2] * 1e3 / iters;
}

}  // namespace ds4::test
