// cuda_bench_head.cpp — `cuda_bench --head [once] [V …]`: the output head of one decode token as the engine runs it
// (runtime::engine_cuda_options; the forward pass's head(): the last layer's deferred HC post handed to the head-form
// HC pre, then the 129,280 × 4,096 Q8_0 matvec and the greedy argmax) for CudaBackendOptions::hc_fuse values V (default
// 50 150 450 550: the head's HC as its pieces; on the spread kernels; the pieces + the cluster argmax; both)
// on ONE backend and one copy of the weights (the value set before each side's graphs are captured). Lines: the head's
// HC alone (post + HC pre: 86 calls a graph) and the whole head (post + HC pre + matvec + argmax: 4 calls a graph, the
// 563 MB matrix cold each call), graph µs per call (StageBench::time, median of 5), and each side's xn, logits and id
// compared bit for bit with the first side's ("PARITY head"). once: each side's whole head once, untimed (for ncu).
// Deliberately not here: whole decode steps (`cuda_bench --head-swap`, cuda_bench_moe1.cpp), the op tests
// (test_cuda_hc_fuse.cpp HeadFormEqualsPieces).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_impl.h"
#include "runtime/engine_cuda_options.h"
#include "stage_bench.h"

using namespace ds4;
using namespace ds4::backend;

void bench_head(int argc, char** argv) {
  bool once = false;
  std::vector<int> vals;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "once") == 0)
      once = true;
    else
      vals.push_back(std::atoi(argv[i]));
  }
  if (vals.empty()) vals = {50, 150, 450, 550};
  auto made = cuda::make_cuda_backend(runtime::engine_cuda_options());
  if (!made.ok()) {
    std::printf("BENCH head: backend: %s\n", made.status().to_string().c_str());
    return;
  }
  Backend& be = **made;
  auto* cbe = dynamic_cast<cuda::CudaBackend*>(&be);
  if (cbe == nullptr) return;
  constexpr int64_t E = 4096, NHC = 4, HCD = NHC * E, V = 129280;
  bench::StageBench sb(be);
  const Weight fn = sb.weight(GgmlType::F16, NHC, HCD);
  const Weight out = sb.weight(GgmlType::Q8_0, V, E);
  float* x_old = sb.buf(HCD, 0.02f);  // the last layer's post: its input state, f, f_add, post, comb
  float* f = sb.buf(E, 0.03f);
  float* f_add = sb.buf(E, -0.01f);
  float* post = sb.buf(NHC, 0.5f);
  float* comb = sb.buf(NHC * NHC, 0.25f);
  float* x = sb.buf(HCD);  // the state the post writes and the head reads
  float* flat = sb.buf(HCD);
  float* mix = sb.buf(NHC);
  float* hw = sb.buf(NHC);
  float* y = sb.buf(E);
  float* xn = sb.buf(E);
  float* scale = sb.buf(1, 0.5f);
  float* base = sb.buf(NHC, 0.1f);
  float* norm_w = sb.buf(E, 1.0f);
  float* logits = sb.buf(V);
  auto idb = be.alloc(64, MemCategory::scratch);
  if (!idb.ok() || !be.sync().ok()) {
    std::printf("BENCH head: setup failed\n");
    return;
  }
  int32_t* id = idb->i32();
  // x_old differs per stream and position (else every normed value is equal): a ramp through f32 fills of slices.
  for (int64_t k = 0; k < 16; ++k) be.fill_f32(x_old + k * 1024, 0.01f * static_cast<float>(k - 7), 1024);
  HcPostArgs pa{x_old, f, post, comb, x, 1, E, static_cast<int32_t>(NHC)};
  pa.f_add = f_add;
  auto head_hc = [&] {
    HcPreArgs a;
    a.x = x;
    a.fn = fn;
    a.scale = scale;
    a.base = base;
    a.norm_w = norm_w;
    a.n = 1;
    a.dim = E;
    a.nhc = static_cast<int32_t>(NHC);
    a.flat = flat;
    a.mix = mix;
    a.pre = hw;
    a.y = y;
    a.xn = xn;
    a.split = false;
    a.prev_post = pa;
    be.hc_pre(a);
  };
  auto whole = [&] {
    head_hc();
    be.matmul({out, xn, E, logits, V, 1, MatmulNumerics::ds4});
    be.argmax({logits, 1, V, -1, id});
  };
  std::vector<float> xn0, lg0;
  int32_t id0 = -2;
  for (size_t k = 0; k < vals.size(); ++k) {
    cbe->set_hc_fuse(vals[k]);
    if (once) {
      whole();
      (void)be.sync();
      continue;
    }
    const bench::StageTime hc = sb.time(head_hc, 86);
    const bench::StageTime all = sb.time(whole, 4);
    be.fill_f32(logits, NAN, V);
    be.fill_f32(xn, NAN, E);
    whole();
    std::vector<float> xh(E), lh(V);
    int32_t ih = -3;
    be.download(xh.data(), xn, E * 4);
    be.download(lh.data(), logits, V * 4);
    be.download(&ih, id, 4);
    const Status st = be.sync();
    std::printf("BENCH head hc_fuse %3d: head HC (post + HC pre) %7.2f us graph (%4.1f launches), whole head "
                "(+ matvec + argmax) %7.2f us graph (%4.1f launches); host %.2f / %.2f us%s\n",
                vals[k], hc.graph_us, hc.launches, all.graph_us, all.launches, hc.host_us, all.host_us,
                st.ok() ? "" : (" ERROR " + st.to_string()).c_str());
    if (k == 0) {
      xn0 = xh, lg0 = lh, id0 = ih;
      continue;
    }
    const bool same = std::memcmp(xn0.data(), xh.data(), E * 4) == 0 && std::memcmp(lg0.data(), lh.data(), V * 4) == 0 &&
                      id0 == ih;
    std::printf("PARITY head hc_fuse %d vs %d: xn, logits, id bit for bit: %s (id %d)\n", vals[k], vals[0],
                same ? "ok" : "FAIL", ih);
  }
  std::fflush(stdout);
}
