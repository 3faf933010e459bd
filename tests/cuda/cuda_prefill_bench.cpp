// cuda_prefill_bench.cpp — prefill-shaped op rates on the GPU machine (not a ctest): the int8
// tensor-core GEMM on the Flash projection shapes, the routed experts grouped by expert for a 4K and a
// 2K chunk (256 experts, k 6), and chunk attention (8 heads per block), each against the matvec path
// (tensor cores off) and the one-head-per-block attention; the GEMM and expert lines also with the
// previous GEMM kernel ("tc-previous", gemm_pipelined = false). These rates are the "measured GEMM
// rate" of the prefill roofline in docs/PERF.md.
// "f16" / "f16prof" (few calls, for ncu) / "f16sweep" (also each decode launch shape) / "f16shapes" (the MMA order only: its
// prefill tile and few-row launch shapes; "f16shapesprof": each Flash shape's default call once, for ncu): cuda_f16_bench.cpp's lines only (the F16 matmuls in the segment and the MMA order; N < 64: decode calls).
// Method (METHOD.md): warm-up, then the median of 5 repetitions of N back-to-back calls timed around a
// stream sync. Usage: cuda_prefill_bench [N_TOKENS=4096] [stages|gemm|experts|walk|profile|q8|q8bulk|…]. Prints "PBENCH" lines; with
// "stages", only cuda_prefill_stages.cpp's "PSTAGE" lines (attention, indexer, compressor at 2K/32K); with
// "gemm", only the GEMM, F16 and routed-expert lines ("q8": only the dense Q8_0 ones), of the default kernels, of the dense Q8_0 kernel
// before gemm_q8.cu ("tc-gemm2") and of each gemm_q8.cu launch shape ("q8-direct1", "-3", "-4";
// CudaBackendOptions::gemm_q8); "experts", the GEMM and expert lines of the defaults and of the grouped
// experts' and prefill glue's previous kernels ("tc-prev-exp"); "walk", the expert lines of gemm_experts 48
// (44 with the table lookups by 32-bit shared addresses) and 50 (the default: 48's sub-block loop on stepped 32-bit
// addresses, raw prmt, the copy state in shared memory, small tiles' fragments formed a sub-block ahead), then
// again, each
// with ids spread like a router's and with routing like a text prompt's ("moe-zipf": Zipf-distributed token
// types, each with its own 6 experts drawn with a popularity skew); "profile" runs those MoE calls once each for gemm_experts = 48 and 50 (under ncu);
// "quant" / "quantprof": cuda_prefill_quant.cpp's lines (the dense matmuls' Q8_0 activation quantizers alone); "q8v3":
// the dense Q8_0 lines of gemm_q8 18, 23, 28.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "bench_median.h"
#include "backend/cuda/cuda_backend.h"
#include "quant/half.h"
#include "quant/types.h"
#include "moe_test_util.h"

using namespace ds4;
using namespace ds4::backend;
using ds4::test::median_seconds;

namespace {

// Random blocks with small scales (finite outputs); Q2_K keeps both of its scales in range.
std::vector<uint8_t> random_blocks(GgmlType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  const uint64_t rb = *type_bytes(type, cols);
  std::vector<uint8_t> b(rb * rows + 8);
  uint64_t st = rng() | 1;  // xorshift64: gigabytes of expert blocks in well under a second
  for (size_t i = 0; i + 8 <= b.size(); i += 8) {
    st ^= st << 13;
    st ^= st >> 7;
    st ^= st << 17;
    std::memcpy(&b[i], &st, 8);
  }
  b.resize(rb * rows);
  const auto tr = *type_traits(static_cast<uint32_t>(type));
  const uint16_t h = f32_to_f16(0.001f);
  for (uint64_t k = 0; k < b.size() / tr.block_bytes; ++k) {
    if (type == GgmlType::Q2_K) {
      std::memcpy(&b[k * tr.block_bytes + 80], &h, 2);
      std::memcpy(&b[k * tr.block_bytes + 82], &h, 2);
    } else {
      std::memcpy(&b[k * tr.block_bytes], &h, 2);
    }
  }
  return b;
}

}  // namespace

void bench_prefill_stages(int64_t N);  // cuda_prefill_stages.cpp: "PSTAGE" lines
void bench_f16(int64_t N, bool profile, bool sweep, bool shapes_only);
void bench_quantizers(int64_t N, bool profile);  // cuda_prefill_quant.cpp: "PQUANT" lines, the Q8_0 quantizers alone  // cuda_f16_bench.cpp: "PBENCH f16" lines, segment vs MMA order

int main(int argc, char** argv) {
  // A line at a time: a run cut short by a timeout (the device queue's 55 s) keeps the lines it printed.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const int64_t N = argc > 1 ? std::atoll(argv[1]) : 4096;
  if (argc > 2 && std::strcmp(argv[2], "stages") == 0) {  // only the non-GEMM stage lines (chunk of N queries)
    bench_prefill_stages(N);
    return 0;
  }
  if (argc > 2 && (std::strcmp(argv[2], "f16") == 0 || std::strcmp(argv[2], "f16prof") == 0 ||
                   std::strcmp(argv[2], "f16sweep") == 0 || std::strcmp(argv[2], "f16shapes") == 0 ||
                   std::strcmp(argv[2], "f16shapesprof") == 0)) {
    // the F16 lines: segment vs MMA order (N < 64: decode calls); "f16shapes": the MMA order's lines only
    const bool shapes_prof = std::strcmp(argv[2], "f16shapesprof") == 0;  // each default F16 prefill call once (ncu)
    bench_f16(N, std::strcmp(argv[2], "f16prof") == 0 || shapes_prof, std::strcmp(argv[2], "f16sweep") == 0,
              std::strcmp(argv[2], "f16shapes") == 0 || shapes_prof);
    return 0;
  }
  // "quant" / "quantprof": cuda_prefill_quant.cpp's lines only (the dense matmuls' activation quantizers alone).
  if (argc > 2 && (std::strcmp(argv[2], "quant") == 0 || std::strcmp(argv[2], "quantprof") == 0)) {
    bench_quantizers(N, std::strcmp(argv[2], "quantprof") == 0);
    return 0;
  }
  // "profile": the experts of gemm_experts 48, 50, for ncu, no timing; "q8prof": q_b's matmul once on
  // the default shape (Cfg7), then on gemm_q8.cu's Cfg4 (ncu).
  // "q8bulkprof": q_b's matmul once on the default (tensor copies), then with bulk-copy stages and the cp.async
  // ring (gemm_q8 = 12, 16; ncu).
  const bool q8bulkprof = argc > 2 && std::strcmp(argv[2], "q8bulkprof") == 0;
  // "q8v2" / "q8v2prof": the dense Q8_0 lines (twice in turn) / q_b once (ncu) of the default and of gemm_q8 = 17,
  // 18, 19, 15, 21 (session 13: vector tiles first, converted sums, the previous default, lean stores).
  const bool q8v2prof = argc > 2 && std::strcmp(argv[2], "q8v2prof") == 0;
  const bool q8v2 = argc > 2 && std::strcmp(argv[2], "q8v2") == 0;
  // "q8v3": the dense Q8_0 lines (twice in turn) of gemm_q8 = 18 and 23, 28 (session 14: converted sums on every
  // shape; + the GEMM a programmatic dependent of its quantizer).
  const bool q8v3 = argc > 2 && std::strcmp(argv[2], "q8v3") == 0;
  const bool q8prof = q8bulkprof || q8v2prof || (argc > 2 && std::strcmp(argv[2], "q8prof") == 0);
  const bool profile = q8prof || (argc > 2 && std::strcmp(argv[2], "profile") == 0);
  // "experts": the GEMM and routed-expert lines of the defaults, the expert lines of modes 21 and 14
  // (gemm_experts = 13: "tc-exp-walk", 0: "tc-gemm2-glue") and both of mode 8 ("tc-prev-exp": the grouped
  // experts on gemm2_kernel and the previous prefill glue — gemm_experts = 0, prefill_glue = false).
  const bool experts_only = argc > 2 && std::strcmp(argv[2], "experts") == 0;
  // "walk": only the routed-expert lines of gemm_experts 48 (44 with lookups by 32-bit addresses) and 50 (the
  // default; table_stage_step: stepped addresses, raw prmt, the copy state in shared memory, fragments a sub-block ahead at ≤ 32
  // pairs),
  // twice in turn (the second round shows the drift of the run), each also with routing like a text prompt's.
  // "walk1": the same, one round.
  const bool walk1 = argc > 2 && std::strcmp(argv[2], "walk1") == 0;
  const bool walk_only = walk1 || (argc > 2 && std::strcmp(argv[2], "walk") == 0);
  // "q8": only the dense Q8_0 lines of the "gemm" modes (every gemm_q8.cu shape, the parts lines).
  // "q8bulk": the dense Q8_0 lines of the default (2-D tensor copies on sm_90), of the bulk-copy stages (gemm_q8
  // = 12) and of the previous default (16: the cp.async ring), twice in turn (the second round shows the spread).
  const bool q8bulk = argc > 2 && std::strcmp(argv[2], "q8bulk") == 0;
  const bool q8_lines = q8prof || q8bulk || q8v2 || q8v3 || (argc > 2 && std::strcmp(argv[2], "q8") == 0);
  const bool gemm_only =
      profile || experts_only || walk_only || q8_lines || (argc > 2 && std::strcmp(argv[2], "gemm") == 0);
  std::mt19937 rng(1);
  // Paths: the pipelined tensor-core GEMM (default), the previous GEMM kernel (gemm_pipelined = false:
  // GEMM and grouped-expert lines only), the matvec (tensor cores off); with "gemm", the defaults (F16
  // and expert lines too), gemm2_kernel for dense Q8_0 (mode 7: gemm_q8 = 0) and each gemm_q8 launch
  // shape (modes 3, 5, 6), dense Q8_0 lines only.
  const std::vector<int> modes = walk1          ? std::vector<int>{49, 57}
                                 : walk_only    ? std::vector<int>{49, 57, 49, 57}
                                 : experts_only ? std::vector<int>{0, 21, 14, 8}
                                 : q8bulkprof ? std::vector<int>{0, 46, 47}
                                 : q8v2prof   ? std::vector<int>{0, 51, 52, 53, 54, 55}
                                 : q8v2       ? std::vector<int>{0, 51, 52, 53, 54, 55, 0, 51, 52, 53, 54, 55}
                                 : q8v3       ? std::vector<int>{52, 60, 61, 52, 60, 61}
                                 : q8prof     ? std::vector<int>{0, 6}
                                 : q8bulk     ? std::vector<int>{0, 46, 47, 0, 46, 47}
                                 : profile    ? std::vector<int>{49, 57}
                                 : q8_lines   ? std::vector<int>{0, 45, 44, 7, 3, 5, 6, 40, 41, 42, 43}
                                 : gemm_only  ? std::vector<int>{0, 7, 3, 5, 6, 40, 41, 42, 43, 44}
                                              : std::vector<int>{0, 1, 2};
  std::vector<float> xh(static_cast<size_t>(N) * 16384);  // the widest rows: F16 HC controls (once for every mode)
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& v : xh) v = nd(rng);
  // walk / profile: every mode's routed-expert lines on the same weights, ids and x (a seed of their own), each
  // line's output compared bit for bit with the first mode's for the same routing ("PARITY" lines).
  std::vector<std::vector<float>> first_out;
  for (int mode : modes) {
    const bool tc = mode != 2;
    cuda::CudaBackendOptions co;
    co.tensor_cores = tc;
    co.gemm_pipelined = mode != 1;
    // Dense Q8_0 lines only: gemm2_kernel (7) and each gemm_q8.cu launch shape (3, 5, 6: 1, 3, 4; 40 … 43:
    // 5 … 8), and the default shapes with CudaBackendOptions::gemm_q8_parts off (44: only the parts lines);
    // 45: only the norm_rope line, norm_rope_loads_first on (mode 0: off).
    // 46, 47: the shape by grid size with bulk-copy stages / the cp.async ring (gemm_q8 = 12, 16).
    // 51 … 55: gemm_q8 = 17, 18, 19 (vector tiles first; + converted sums; converted sums), 15 (tensor copies by grid
    // size, the default before session 13), 21 (lean stores only).
    // 60, 61: gemm_q8 = 23, 28 (session 14: converted sums on every shape; + the GEMM a programmatic dependent of its
    // quantizer; W1 / W2 ran the removed 24 … 27 as modes 57 … 60 and 29 as 62).
    const bool q8_only = (mode >= 3 && mode <= 7) || (mode >= 40 && mode <= 47) || (mode >= 51 && mode <= 55) || (mode >= 60 && mode <= 61);
    if (mode >= 51 && mode <= 55) co.gemm_q8 = mode == 54 ? 15 : mode - 34;
    if (mode == 60 || mode == 61) co.gemm_q8 = mode == 60 ? 23 : 28;
    if (mode == 46) co.gemm_q8 = 12;
    if (mode == 47) co.gemm_q8 = 16;  // the previous default: default_shape with the cp.async ring
    if (mode >= 3 && mode <= 7) co.gemm_q8 = mode == 7 ? 0 : mode - 2;  // 0: ops_gemm.cu's gemm2_kernel
    if (mode >= 40 && mode <= 43) co.gemm_q8 = mode - 35;              // Cfg5 … Cfg8
    co.gemm_q8_parts = mode == 44 ? 0 : -1;
    co.norm_rope_loads_first = mode == 45 ? 1 : 0;
    if (mode == 8) {
      co.gemm_experts = 0;
      co.prefill_glue = false;
    }
    if (mode == 14) co.gemm_experts = 0;  // gemm2_kernel with the new glue
    if (mode == 21) co.gemm_experts = 13;
    if (mode == 28) co.gemm_experts = 20;
    if (mode == 31) co.gemm_experts = 27;  // the lean stage, items by an atomic counter
    if (mode >= 33 && mode <= 36) co.gemm_experts = mode - 4;  // 29, 30, 32 (gemm_experts.cu: per-item stage loops, 30 gate + up in one launch, 32 the lean copies)
    if (mode == 37) co.gemm_experts = 34;                      // IQ2_XXS by shared tables (38, 39, 50: removed variants)
    if (mode == 48) co.gemm_experts = 44;                      // one gate/up launch, tiles by cost (38, 39: removed)
    if (mode == 49) co.gemm_experts = 48;                      // 44 with the table lookups by 32-bit addresses
    if (mode == 57) co.gemm_experts = 50;  // the default: stepped addresses, raw prmt, slim copy state, small tiles' fragments ahead (56, 58: removed)
    auto made = cuda::make_cuda_backend(co);
    if (!made.ok()) {
      std::printf("PBENCH skipped: %s\n", made.status().to_string().c_str());
      return 0;
    }
    auto be = std::move(made).value();
    const char* const names[] = {"tensor-core", "tc-previous", "matvec",     "q8-direct1",
                                 "-",           "q8-direct3",  "q8-direct4", "tc-gemm2",   "tc-prev-exp", "-",           "-",           "-",           "-",             "-", "tc-gemm2-glue", "-", "-", "-", "-", "-", "-", "tc-exp-walk",
                                 "-", "-", "-", "-", "-", "-", "tc-exp-fast", "-", "-", "tc-exp-dyn", "-", "tc-exp-item", "tc-exp-gu", "-", "tc-exp-lc", "tc-exp-tab", "-", "-",
                                 "q8-direct5",  "q8-direct6",  "q8-direct7", "q8-direct8", "q8-noparts",
                                 "nr-loads1",   "q8-bulk",     "q8-async",   "tc-exp-gu1", "tc-exp-la",  "-",
                                 "q8-vfirst",   "q8-vf-cvt",  "q8-cvt",     "q8-prev15",  "q8-lean",
                                 "-",           "tc-exp-ahead", "-",          "-",
                                 "q8-allcvt",   "q8-pdl"};    const char* path = names[mode];
    auto sync = [&] { (void)be->sync(); };
    auto timed = [&](const std::function<void()>& body, int iters) {
      if (!profile) return median_seconds(body, sync, iters);
      body();
      sync();
      return 0.0;
    };
    std::mt19937 erng(11);  // walk / profile: the experts' weights and uniform ids, the same in every mode
    auto weight = [&](GgmlType t, int64_t rows, int64_t cols, std::mt19937* r = nullptr) {
      auto host = random_blocks(t, rows, cols, r ? *r : rng);
      Weight w{t, nullptr, rows, cols, *type_bytes(t, cols)};
      auto p = be->map_weight(host.data(), host.size());
      w.data = p.ok() ? *p : nullptr;
      return w;
    };
    auto fbuf = [&](int64_t n) { return std::move(be->alloc(static_cast<uint64_t>(n) * 4, MemCategory::scratch)).value(); };
    Buffer x = fbuf(N * 16384), y = fbuf(N * 32768);
    be->upload(x.data(), xh.data(), xh.size() * 4);
    // The matvec path re-reads the weights per token: time it on fewer tokens and scale.
    const int64_t n = tc ? N : std::min<int64_t>(N, 256);

    struct Mm {
      const char* name;
      GgmlType t;
      int64_t rows, cols;
    };
    if (q8_lines && !profile && (mode == 0 || mode == 45)) {
      // The prefill glue beside the dense GEMMs: q's norm + RoPE over 2,048 × 64 heads × 512
      // (CudaBackendOptions::norm_rope_loads_first off in mode 0, on in 45).
      std::vector<int32_t> ph(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) ph[i] = static_cast<int32_t>(2048 + i);
      Buffer pos = fbuf(n), nw = fbuf(512);
      be->upload(pos.data(), ph.data(), ph.size() * 4);
      be->upload(nw.data(), xh.data(), 512 * 4);
      static const std::vector<double> freq = [] {
        std::vector<double> f(32);
        for (int i = 0; i < 32; ++i) f[i] = std::pow(10000.0, -2.0 * i / 64);
        return f;
      }();
      NormRopeArgs nr;
      nr.x = y.f32();
      nr.pos = pos.i32();
      nr.n = n;
      nr.heads = 64;
      nr.head_dim = 512;
      nr.n_rot = 64;
      nr.w = nw.f32();
      nr.freq = freq.data();
      be->upload(y.data(), xh.data(), static_cast<uint64_t>(n) * 64 * 512 * 4 / 2);  // (rows stay finite)
      const double s = timed([&] { be->norm_rope(nr); }, 5);
      std::printf("PBENCH %-11s norm_rope q 64x512 rope64         n=%-5lld %9.3f ms  %7.1f GB/s\n", path,
                  static_cast<long long>(n), s * 1e3, 2.0 * n * 64 * 512 * 4 / s / 1e9);
      if (mode == 45) continue;
    }
    for (Mm m : {Mm{"q_a q8_0 1024x4096", GgmlType::Q8_0, 1024, 4096}, Mm{"q_b q8_0 32768x1024", GgmlType::Q8_0, 32768, 1024},
                 Mm{"out_b q8_0 4096x8192", GgmlType::Q8_0, 4096, 8192}, Mm{"shared q8_0 2048x4096", GgmlType::Q8_0, 2048, 4096},
                 Mm{"kv q8_0 512x4096", GgmlType::Q8_0, 512, 4096},
                 Mm{"iq2_xxs 2048x4096", GgmlType::IQ2_XXS, 2048, 4096}, Mm{"q2_k 4096x2048", GgmlType::Q2_K, 4096, 2048}}) {
      if (q8_only && m.t != GgmlType::Q8_0) continue;  // gemm_q8 runs only dense Q8_0
      if (mode >= 9 && !q8_only) break;  // the same matmuls as mode 0
      if (mode == 44) break;                // (single matrices: the same launches as mode 0)
      if (profile && m.rows != 32768) continue;
      Weight w = weight(m.t, m.rows, m.cols);
      const double s = timed([&] { be->matmul({w, x.f32(), m.cols, y.f32(), m.rows, n}); }, 3);
      std::printf("PBENCH %-11s matmul %-22s n=%-5lld %9.3f ms  %7.1f TOP/s\n", path, m.name, static_cast<long long>(n),
                  s * 1e3, 2.0 * m.rows * m.cols * n / s / 1e12);
    }
    if (gemm_only && !experts_only && !q8_lines && mode == 0) {  // F16 prefill tiles (matmul_f16.cu) on the Flash F16 shapes
      for (Mm m : {Mm{"hc 24x16384", GgmlType::F16, 24, 16384}, Mm{"router 256x4096", GgmlType::F16, 256, 4096},
                   Mm{"comp 1024x4096", GgmlType::F16, 1024, 4096}, Mm{"idx q_b 8192x1024", GgmlType::F16, 8192, 1024},
                   Mm{"comp 512x4096", GgmlType::F16, 512, 4096}, Mm{"idx 64x4096", GgmlType::F16, 64, 4096}}) {
        if (profile && m.rows != 1024 && m.rows != 8192) continue;
        Weight w = weight(m.t, m.rows, m.cols);
        const double s = timed([&] { be->matmul({w, x.f32(), m.cols, y.f32(), m.rows, n}); }, 3);
        std::printf("PBENCH %-11s f16 %-25s n=%-5lld %9.3f ms  %7.1f TFLOP/s\n", path, m.name,
                    static_cast<long long>(n), s * 1e3, 2.0 * m.rows * m.cols * n / s / 1e12);
      }
    }
    if (gemm_only && !experts_only && !profile &&
        (mode == 0 || mode == 44 || mode == 46 || mode == 47 || (mode >= 51 && mode <= 55) || (mode >= 60 && mode <= 61))) {
      // Several matrices per call (CudaBackendOptions::gemm_q8_parts; mode 44: one launch each): out_a's 8
      // row groups of 1,024 over 4,096 values of the attention output each, the shared expert's gate + up.
      const int64_t G = 8, Ro = 1024, gin = 4096, E = 4096, F = 2048;
      Weight oa = weight(GgmlType::Q8_0, G * Ro, gin);
      MatmulArgs ga{oa, y.f32(), G * gin, x.f32(), G * Ro, n};  // (y holds finite outputs of the lines above)
      ga.group_rows = Ro;
      ga.group_x_stride = gin;
      double s = timed([&] { be->matmul(ga); }, 3);
      std::printf("PBENCH %-11s matmul %-22s n=%-5lld %9.3f ms  %7.1f TOP/s\n", path, "out_a 8x(1024x4096)",
                  static_cast<long long>(n), s * 1e3, 2.0 * G * Ro * gin * n / s / 1e12);
      Weight wg = weight(GgmlType::Q8_0, F, E), wu = weight(GgmlType::Q8_0, F, E);
      const MatmulArgs gu[2] = {{wg, x.f32(), E, y.f32(), F, n}, {wu, x.f32(), E, y.f32() + n * F, F, n}};
      s = timed([&] { be->matmul_many(gu); }, 3);
      std::printf("PBENCH %-11s matmul %-22s n=%-5lld %9.3f ms  %7.1f TOP/s\n", path, "gate+up 2x(2048x4096)",
                  static_cast<long long>(n), s * 1e3, 2.0 * 2 * F * E * n / s / 1e12);
    }
    if (q8_only || q8_lines) continue;
    // Routed experts of a chunk: 256 Flash experts, k 6, ids spread like a router's; N tokens and a
    // 2048-token chunk (~48 pairs per expert: one partial 64-pair tile each).
    const int NE = 256, E = 4096, F = 2048, K = 6;
    const bool same_inputs = walk_only || profile;
    std::mt19937* er = same_inputs ? &erng : nullptr;
    Weight g = weight(GgmlType::IQ2_XXS, int64_t{NE} * F, E, er), u = weight(GgmlType::IQ2_XXS, int64_t{NE} * F, E, er);
    Weight d = weight(GgmlType::Q2_K, int64_t{NE} * E, F, er);
    // The chunks: N tokens, then 2,048 when N is larger; walk / profile: N tokens again with routing like a
    // text prompt's (skewed).
    struct Run {
      int64_t chunk;
      bool skewed;
    };
    std::vector<Run> runs{{N, false}};
    if (tc && N > 2048) runs.push_back({2048, false});
    if (tc && (walk_only || profile)) runs.push_back({N, true});
    for (const Run& run : runs) {
      const int64_t chunk = run.chunk;
      const bool skewed = run.skewed;
      const int64_t nt = tc ? chunk : std::min<int64_t>(N, 64);
      std::vector<int32_t> ids(static_cast<size_t>(nt) * K);
      // skewed: token types Zipf-distributed over 800 (a 2,048-token chunk of the Italian benchmark prompt
      // has 844 distinct tokens), each type with its own 6 experts drawn by a popularity skew (a router's
      // bias): ~300 tiles of every class instead of ~259 mostly of 33 … 64 pairs.
      std::mt19937 zr(7);
      std::vector<std::vector<int32_t>> type_experts;
      std::vector<double> type_w;
      if (skewed) {
        std::vector<double> ew(NE);
        for (int e = 0; e < NE; ++e) ew[e] = 1.0 / (1.0 + e / 16.0);
        std::shuffle(ew.begin(), ew.end(), zr);
        for (int t = 0; t < 800; ++t) {
          type_w.push_back(1.0 / (t + 1));
          std::vector<double> w = ew;
          std::vector<int32_t> ex;
          for (int j = 0; j < K; ++j) {
            const int e = std::discrete_distribution<int>(w.begin(), w.end())(zr);
            ex.push_back(e);
            w[e] = 0;
          }
          type_experts.push_back(ex);
        }
      }
      std::discrete_distribution<int> type_of(type_w.begin(), type_w.end());
      for (int64_t i = 0; i < nt; ++i) {
        if (skewed) {
          const auto& ex = type_experts[type_of(zr)];
          for (int j = 0; j < K; ++j) ids[i * K + j] = ex[j];
          continue;
        }
        std::vector<int32_t> perm(NE);
        for (int e = 0; e < NE; ++e) perm[e] = e;
        std::shuffle(perm.begin(), perm.end(), same_inputs ? erng : rng);
        for (int j = 0; j < K; ++j) ids[i * K + j] = perm[j];
      }
      std::vector<float> wts(ids.size(), 0.2f);
      Buffer bid = fbuf(static_cast<int64_t>(ids.size())), bw = fbuf(static_cast<int64_t>(ids.size()));
      be->upload(bid.data(), ids.data(), ids.size() * 4);
      be->upload(bw.data(), wts.data(), wts.size() * 4);
      auto ex = [](Weight w, int64_t rows, int ne) { return ds4::test::expert_stack(w, rows, ne); };
      MoeArgs a;
      a.gate = ex(g, F, NE);
      a.up = ex(u, F, NE);
      a.down = ex(d, E, NE);
      a.x = x.f32();
      a.ids = bid.i32();
      a.weights = bw.f32();
      a.n = nt;
      a.k = K;
      a.dim = E;
      a.ff = F;
      a.clamp = 10;
      a.out = y.f32();
      const double s = timed([&] { be->moe(a); }, 2);
      std::printf("PBENCH %-11s %s iq2_xxs/q2_k 256 experts k6 n=%-5lld %9.3f ms  %7.1f TOP/s  %8.0f tok/s per layer\n",
                  path, skewed ? "moe-zipf" : "moe     ", static_cast<long long>(nt), s * 1e3, 2.0 * 3 * E * F * K * nt / s / 1e12, nt / s);
      if (same_inputs) {  // the output against the first mode's on the same inputs
        std::vector<float> out(static_cast<size_t>(nt * E));
        be->download(out.data(), y.data(), out.size() * 4);
        sync();
        const size_t at = static_cast<size_t>(&run - runs.data());
        if (first_out.size() <= at) {
          first_out.push_back(out);
        } else {
          int64_t diff = 0, nonfinite = 0;
          for (size_t i = 0; i < out.size(); ++i) {
            uint32_t a, b;
            std::memcpy(&a, &out[i], 4);
            std::memcpy(&b, &first_out[at][i], 4);
            diff += a != b;
            nonfinite += !std::isfinite(out[i]);
          }
          std::printf("PARITY %s %-11s %s vs the first mode: %lld of %zu outputs differ, %lld non-finite\n",
                      diff == 0 && nonfinite == 0 ? "ok  " : "FAIL", path, skewed ? "moe-zipf" : "moe", static_cast<long long>(diff),
                      out.size(), static_cast<long long>(nonfinite));
        }
      }
    }
    if (mode == 1 || gemm_only) continue;  // indexer and attention do not use the GEMM
    {  // Indexer of a chunk at 4K context: 64 heads × 128, 1,024 visible compressed rows, top 512.
      const int IH = 64, ID = 128, rows_n = 1024, K = 512;
      const int64_t nq = tc ? std::min<int64_t>(N, 2048) : std::min<int64_t>(N, 256);
      Buffer q = fbuf(nq * IH * ID), w = fbuf(nq * IH), rows = fbuf(int64_t{rows_n} * ID);
      Buffer nr = fbuf(nq), idx = fbuf(nq * K), cnt = fbuf(nq);
      std::vector<float> qh(static_cast<size_t>(nq) * IH * ID), rh(static_cast<size_t>(rows_n) * ID), wh(nq * IH, 0.1f);
      for (auto& v : qh) v = nd(rng);
      for (auto& v : rh) v = nd(rng);
      std::vector<int32_t> nh(nq, rows_n);
      be->upload(q.data(), qh.data(), qh.size() * 4);
      be->upload(rows.data(), rh.data(), rh.size() * 4);
      be->upload(w.data(), wh.data(), wh.size() * 4);
      be->upload(nr.data(), nh.data(), nh.size() * 4);
      IndexerArgs a;
      a.q = q.f32();
      a.w = w.f32();
      a.rows = rows.f32();
      a.n_rows = nr.i32();
      a.n = nq;
      a.heads = IH;
      a.head_dim = ID;
      a.top_k = K;
      a.idx = idx.i32();
      a.count = cnt.i32();
      const double s = median_seconds([&] { be->indexer(a); }, sync, 3);
      std::printf("PBENCH %-11s indexer 64x128 top512 of 1024 rows   n=%-5lld %9.3f ms  %8.0f queries/s\n", path,
                  static_cast<long long>(nq), s * 1e3, nq / s);
    }
    {  // Attention of a chunk: H 64, D 512, window 128 + 512 selected compressed rows per query.
      const int H = 64, D = 512;
      // Without the prefill kernels: the one-head-per-block kernel, timed on 256 queries.
      const int64_t nq = tc ? N : std::min<int64_t>(N, 256);
      const int64_t cap = 128 + nq;
      Buffer q = fbuf(nq * H * D), raw = fbuf(cap * D), comp = fbuf(4096 * D), out = fbuf(nq * H * D), sinks = fbuf(H);
      Buffer pos = fbuf(nq), cnt = fbuf(nq);
      std::vector<int32_t> ph(nq), ch(nq, 512);
      for (int64_t i = 0; i < nq; ++i) ph[i] = static_cast<int32_t>(4096 + i);
      be->upload(pos.data(), ph.data(), nq * 4);
      be->upload(cnt.data(), ch.data(), nq * 4);
      AttentionArgs a;
      a.q = q.f32();
      a.pos = pos.i32();
      a.n = nq;
      a.heads = H;
      a.head_dim = D;
      a.scale = 0.044f;
      a.sinks = sinks.f32();
      a.raw = raw.f32();
      a.raw_cap = cap;
      a.window = 128;
      a.comp = comp.f32();
      a.comp_count = cnt.i32();
      a.out = out.f32();
      const double s = median_seconds([&] { be->attention(a); }, sync, 3);
      std::printf("PBENCH %-11s attention H64 D512 128+512 rows  n=%-5lld %9.3f ms  %8.0f queries/s\n", path,
                  static_cast<long long>(nq), s * 1e3, nq / s);
    }
  }
  return 0;
}
