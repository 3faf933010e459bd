// stage_bench.h — the timing harness of the cuda_bench stage benches (cuda_bench_stages.cpp,
// cuda_bench_dense.cpp): StageBench makes random weights in the Flash types and scratch buffers on one backend
// and times a stage two ways — host (N back-to-back calls then one sync, median of 5) and graph (the same N
// calls captured into one CUDA graph and replayed, device events, median of 5) — and counts the graph's
// launches; HcBenchSide holds the HC pre's and the indexer query's buffers of the small-kernel benches.
// Deliberately not here: correctness (tests/cuda), what each bench measures (the .cpp files).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "quant/half.h"
#include "quant/types.h"

namespace ds4::bench {

using backend::Backend;
using backend::Buffer;
using backend::HcPreArgs;
using backend::IndexerQatArgs;
namespace cuda = backend::cuda;
using backend::Weight;
using Clock = std::chrono::steady_clock;


struct StageTime {
  double host_us = 0, graph_us = 0;
  double launches = 0;  // kernel and memcpy/memset nodes of the captured graph per stage call
};

// Kernel, copy and fill nodes of a captured graph (each one a launch when the host enqueues the stage).
inline double graph_launches(cudaGraph_t g) {
  size_t count = 0;
  if (cudaGraphGetNodes(g, nullptr, &count) != cudaSuccess) return NAN;
  std::vector<cudaGraphNode_t> nodes(count);
  if (count > 0 && cudaGraphGetNodes(g, nodes.data(), &count) != cudaSuccess) return NAN;
  double n = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType t;
    if (cudaGraphNodeGetType(node, &t) != cudaSuccess) continue;
    n += t == cudaGraphNodeTypeKernel || t == cudaGraphNodeTypeMemcpy || t == cudaGraphNodeTypeMemset;
  }
  return n;
}

class StageBench {
 public:
  explicit StageBench(Backend& be) : be_(be), stream_(static_cast<cudaStream_t>(cuda::cuda_stream(be))), rng_(7) {}

  Weight weight(GgmlType t, int64_t rows, int64_t cols) {
    const uint64_t rb = *type_bytes(t, static_cast<uint64_t>(cols));
    std::vector<uint8_t> b((rb * rows + 7) / 8 * 8);
    for (size_t k = 0; k < b.size(); k += 8) {
      const uint64_t r = rng_();
      std::memcpy(&b[k], &r, 8);
    }
    b.resize(rb * rows);
    const auto tr = *type_traits(static_cast<uint32_t>(t));
    if (t == GgmlType::F16) {
      const uint16_t h = f32_to_f16(0.01f);
      for (size_t k = 0; k + 1 < b.size(); k += 2) std::memcpy(&b[k], &h, 2);
    } else if (t != GgmlType::F32) {
      const uint16_t h = f32_to_f16(0.001f);
      const int off = t == GgmlType::Q2_K ? 80 : 0;
      for (uint64_t k = 0; k < b.size() / tr.block_bytes; ++k) std::memcpy(&b[k * tr.block_bytes + off], &h, 2);
    } else {
      const float f = 0.01f;
      for (size_t k = 0; k + 3 < b.size(); k += 4) std::memcpy(&b[k], &f, 4);
    }
    Weight w{t, nullptr, rows, cols, rb};
    auto p = be_.map_weight(b.data(), b.size());
    w.data = p.ok() ? *p : nullptr;
    bytes_ += b.size();
    return w;
  }
  float* buf(int64_t n, float fill = 0.01f) {
    auto b = be_.alloc(static_cast<uint64_t>(n) * 4 + 64, MemCategory::scratch);
    if (!b.ok()) return nullptr;
    be_.fill_f32(b->f32(), fill, n);
    float* p = b->f32();
    bufs_.push_back(std::move(b).value());
    return p;
  }
  int32_t* ibuf(const std::vector<int32_t>& v) {
    auto b = be_.alloc(v.size() * 4 + 64, MemCategory::scratch);
    if (!b.ok()) return nullptr;
    be_.upload(b->data(), v.data(), v.size() * 4);
    int32_t* p = b->i32();
    bufs_.push_back(std::move(b).value());
    return p;
  }

  StageTime time(const std::function<void()>& stage, int n_calls) {
    StageTime t;
    stage();  // warm-up: grows scratch before any capture
    (void)be_.sync();
    std::vector<double> h, g;
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = Clock::now();
      for (int i = 0; i < n_calls; ++i) stage();
      (void)be_.sync();
      h.push_back(std::chrono::duration<double>(Clock::now() - t0).count() * 1e6 / n_calls);
    }
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    if (cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed) == cudaSuccess) {
      for (int i = 0; i < n_calls; ++i) stage();
      if (cudaStreamEndCapture(stream_, &graph) == cudaSuccess) t.launches = graph_launches(graph) / n_calls;
      if (graph && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess) {
        cudaEvent_t e0, e1;
        cudaEventCreate(&e0);
        cudaEventCreate(&e1);
        cudaGraphLaunch(exec, stream_);  // warm-up
        for (int rep = 0; rep < 5; ++rep) {
          cudaEventRecord(e0, stream_);
          cudaGraphLaunch(exec, stream_);
          cudaEventRecord(e1, stream_);
          cudaEventSynchronize(e1);
          float ms = 0;
          cudaEventElapsedTime(&ms, e0, e1);
          g.push_back(ms * 1e3 / n_calls);
        }
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
      }
    }
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    std::sort(h.begin(), h.end());
    std::sort(g.begin(), g.end());
    t.host_us = h[2];
    t.graph_us = g.size() == 5 ? g[2] : NAN;
    if (Status s = be_.sync(); !s.ok()) std::printf("BENCH stage error: %s\n", s.to_string().c_str());
    return t;
  }

  uint64_t bytes() const { return bytes_; }
  void reset_bytes() { bytes_ = 0; }

 private:
  Backend& be_;
  cudaStream_t stream_;
  std::mt19937_64 rng_;
  std::vector<Buffer> bufs_;
  uint64_t bytes_ = 0;
};



// The HC pre's and the indexer query's buffers of bench_small4 / bench_small5 on one backend (Flash: 4 × 4096
// state, 24 control rows, 64 × 128 indexer heads) for up to nmax tokens at positions pos_h.
struct HcBenchSide {
  static constexpr int64_t kE = 4096, kNhc = 4, kHcd = kNhc * kE, kM = 24, kIh = 64, kId = 128;
  Backend* be = nullptr;
  std::unique_ptr<StageBench> sb;
  Weight fn;
  float *x = nullptr, *flat = nullptr, *mix = nullptr, *pre = nullptr, *post = nullptr, *comb = nullptr, *y = nullptr,
        *xn = nullptr, *scale = nullptr, *base = nullptr, *norm_w = nullptr, *iq = nullptr, *iw = nullptr;
  int32_t* pos = nullptr;

  void init(Backend& backend, int64_t nmax, const std::vector<int32_t>& pos_h, float x_fill) {
    be = &backend;
    sb = std::make_unique<StageBench>(backend);
    StageBench& b = *sb;
    fn = b.weight(GgmlType::F16, kM, kHcd);
    x = b.buf(nmax * kHcd, x_fill);
    flat = b.buf(nmax * kHcd);
    mix = b.buf(nmax * kM);
    pre = b.buf(nmax * kNhc);
    post = b.buf(nmax * kNhc);
    comb = b.buf(nmax * kNhc * kNhc);
    y = b.buf(nmax * kE);
    xn = b.buf(nmax * kE);
    scale = b.buf(3, 0.5f);
    base = b.buf(kM);
    norm_w = b.buf(kE, 1.0f);
    iq = b.buf(nmax * kIh * kId, 0.5f);
    iw = b.buf(nmax * kIh, 0.5f);
    pos = b.ibuf(pos_h);
  }
  // The forward pass's HC pre of the first n tokens (split = false: the caller's hc_split takes post and comb).
  void hc_pre(int64_t n, bool split) {
    HcPreArgs a;
    a.x = x;
    a.fn = fn;
    a.scale = scale;
    a.base = base;
    a.norm_w = norm_w;
    a.n = n;
    a.dim = kE;
    a.nhc = kNhc;
    a.flat = flat;
    a.mix = mix;
    a.pre = pre;
    a.post = post;
    a.comb = comb;
    a.y = y;
    a.xn = xn;
    a.split = split;
    be->hc_pre(a);
  }
  // The indexer query's RoPE + QAT + head weights' scale of the first n tokens (64 RoPE dims at freq).
  void indexer_rope_qat(int64_t n, const std::vector<double>& freq) {
    IndexerQatArgs q{iq, n * kIh, static_cast<int32_t>(kId), true};
    q.pos = pos;
    q.heads = static_cast<int32_t>(kIh);
    q.n_rot = static_cast<int32_t>(2 * freq.size());
    q.freq = freq.data();
    q.scale_x = iw;
    q.scale = 1.0f;  // repeated calls leave the weights as they are
    q.scale_count = n * kIh;
    be->indexer_qat(q);
  }
};


}  // namespace ds4::bench
