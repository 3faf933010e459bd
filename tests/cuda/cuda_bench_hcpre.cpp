// cuda_bench_hcpre.cpp — `cuda_bench --hcpre-prefill [FORM…]`: a prefill chunk's HC pre (Flash: 4 × 4096 state, 24 ×
// 16,384 F16 controls) at n = 2,048 as the engine runs it (runtime::engine_cuda_options) with hc_fuse's tens digit 0
// (rms_norm + the few-row F16 MMA matmul + the split kernel) and each FORM (hc_controls_prefill.cu; default 3 5):
// "BENCH hcpre-prefill" lines, ms per call (median of 5 × 10 host-timed calls, METHOD.md), the sides in turn for
// three rounds (drift shows), then the old path's pieces alone (rms_norm, the controls matmul) and "PARITY" lines (each
// form's mix, pre, y and xn against tens digit 0's, bit for bit); "once": each side's call once, untimed (ncu).
// Deliberately not here: whole chunks (cuda_bench_branches.cpp's --hcpre-steps), correctness in general
// (test_cuda_hc_fuse.cpp).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "bench_median.h"
#include "quant/half.h"
#include "runtime/engine_cuda_options.h"

using namespace ds4;
using namespace ds4::backend;

namespace {

struct HcPreSide {
  std::unique_ptr<Backend> be;
  std::vector<Buffer> bufs;
  HcPreArgs a;
};

}  // namespace

void bench_hcpre_prefill(int argc, char** argv) {
  constexpr int64_t N = 2048, E = 4096, NHC = 4, HCD = NHC * E, MIX = (2 + NHC) * NHC;
  // "once": each side's HC pre once, untimed (for ncu: each kernel's duration), then nothing else.
  const bool once = argc > 0 && std::strcmp(argv[0], "once") == 0;
  if (once) --argc, ++argv;
  std::vector<int> forms{0};
  for (int i = 0; i < argc; ++i) forms.push_back(std::atoi(argv[i]));
  if (forms.size() == 1) forms.insert(forms.end(), {3, 5});
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> xh(static_cast<size_t>(N * HCD)), sh(3), bh(MIX), nwh(E);
  for (auto& v : xh) v = nd(rng);
  for (auto& v : sh) v = 0.5f * nd(rng);
  for (auto& v : bh) v = 0.5f * nd(rng);
  for (auto& v : nwh) v = nd(rng);
  std::vector<uint16_t> fh(static_cast<size_t>(MIX * HCD));
  for (auto& v : fh) v = f32_to_f16(0.01f * nd(rng));
  std::vector<HcPreSide> sides(forms.size());
  for (size_t k = 0; k < forms.size(); ++k) {
    cuda::CudaBackendOptions co = runtime::engine_cuda_options();
    co.hc_fuse = 10 * forms[k];
    auto made = cuda::make_cuda_backend(co);
    if (!made.ok()) {
      std::printf("BENCH hcpre-prefill form %d: %s\n", forms[k], made.status().to_string().c_str());
      return;
    }
    HcPreSide& s = sides[k];
    s.be = std::move(made).value();
    auto buf = [&](int64_t n, const float* init) {
      auto b = s.be->alloc(static_cast<uint64_t>(n) * 4, MemCategory::scratch);
      if (!b.ok()) return static_cast<float*>(nullptr);
      s.bufs.push_back(std::move(b).value());
      float* p = s.bufs.back().f32();
      if (init) s.be->upload(p, init, static_cast<uint64_t>(n) * 4);
      return p;
    };
    auto fw = s.be->map_weight(fh.data(), fh.size() * 2);
    HcPreArgs& a = s.a;
    a.fn = Weight{GgmlType::F16, fw.ok() ? *fw : nullptr, MIX, HCD, static_cast<uint64_t>(HCD) * 2};
    a.x = buf(N * HCD, xh.data());
    a.scale = buf(3, sh.data());
    a.base = buf(MIX, bh.data());
    a.norm_w = buf(E, nwh.data());
    a.n = N;
    a.dim = E;
    a.nhc = NHC;
    a.flat = buf(N * HCD, nullptr);
    a.mix = buf(N * MIX, nullptr);
    a.pre = buf(N * NHC, nullptr);
    a.post = buf(N * NHC, nullptr);
    a.comb = buf(N * NHC * NHC, nullptr);
    a.y = buf(N * E, nullptr);
    a.xn = buf(N * E, nullptr);
    a.split = false;  // the engine's (kBranchHcSplit: the split on the side lane)
    if (!a.fn.data || !a.x || !a.xn || !s.be->sync().ok()) {
      std::printf("BENCH hcpre-prefill form %d: setup failed\n", forms[k]);
      return;
    }
  }
  if (once) {
    for (HcPreSide& s : sides) {
      s.be->hc_pre(s.a);
      const Status st = s.be->sync();
      if (!st.ok()) std::printf("BENCH hcpre-prefill once: %s\n", st.to_string().c_str());
    }
    return;
  }
  for (int round = 1; round <= 3; ++round)
    for (size_t k = 0; k < forms.size(); ++k) {
      HcPreSide& s = sides[k];
      const double t = test::median_seconds([&] { s.be->hc_pre(s.a); }, [&] { (void)s.be->sync(); }, 10);
      const Status st = s.be->sync();
      std::printf("BENCH hcpre-prefill form %d round %d: hc_pre 4x4096 n=%lld %8.4f ms  (43 layers' 86 calls %6.2f ms)%s\n",
                  forms[k], round, static_cast<long long>(N), t * 1e3, 86 * t * 1e3,
                  st.ok() ? "" : (" ERROR " + st.to_string()).c_str());
    }
  {  // the old path's pieces on side 0 (tens digit 0)
    HcPreSide& s = sides[0];
    const HcPreArgs& a = s.a;
    auto sync = [&] { (void)s.be->sync(); };
    const double tn = test::median_seconds([&] { s.be->rms_norm({a.x, a.flat, nullptr, N, HCD, HCD, a.rms_eps}); }, sync, 10);
    const double tm =
        test::median_seconds([&] { s.be->matmul({a.fn, a.flat, HCD, a.mix, MIX, N, a.numerics}); }, sync, 10);
    std::printf("BENCH hcpre-prefill pieces: rms_norm 2048x16384 %8.4f ms, controls matmul 24x16384 %8.4f ms\n", tn * 1e3,
                tm * 1e3);
  }
  // Parity: each form's outputs against form 0's (the same inputs: every side uploaded the same host data).
  struct Out {
    const char* name;
    float* HcPreArgs::*field;
    int64_t count;
  };
  const Out outs[] = {{"mix", &HcPreArgs::mix, N * MIX}, {"pre", &HcPreArgs::pre, N * NHC},
                      {"y", &HcPreArgs::y, N * E}, {"xn", &HcPreArgs::xn, N * E}};
  for (const Out& o : outs) {
    std::vector<float> want(static_cast<size_t>(o.count)), got(want.size());
    sides[0].be->hc_pre(sides[0].a);
    sides[0].be->download(want.data(), sides[0].a.*o.field, want.size() * 4);
    (void)sides[0].be->sync();
    for (size_t k = 1; k < sides.size(); ++k) {
      HcPreSide& s = sides[k];
      s.be->hc_pre(s.a);
      s.be->download(got.data(), s.a.*o.field, got.size() * 4);
      const Status st = s.be->sync();
      int64_t diff = 0;
      for (size_t i = 0; i < got.size(); ++i) diff += std::memcmp(&got[i], &want[i], 4) != 0;
      std::printf("PARITY %s hcpre-prefill form %d %-3s vs form 0: %lld of %zu differ%s\n",
                  diff == 0 && st.ok() ? "ok  " : "FAIL", forms[k], o.name, static_cast<long long>(diff), got.size(),
                  st.ok() ? "" : " (error)");
    }
  }
}
