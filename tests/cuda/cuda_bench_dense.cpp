// cuda_bench_dense.cpp — the dense Q8_0 decode matmuls of cuda_bench with cold weights (each call reads its own
// copy of the matrix, copies cycled past the H200's 50 MB L2): per matrix on several dispatches (--dense,
// --rows, --bulk), one layer's dense matmuls back to back, and the L2-prefetch figures (--l2). Timing by
// stage_bench.h's StageBench (graph µs per call, median of 5 replays).
// Deliberately not here: correctness (tests/cuda: CudaGemv*, CudaMatmul), the warm-weight --gemv lines
// (cuda_bench_stages.cpp).
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "quant/types.h"
#include "stage_bench.h"

using namespace ds4;
using namespace ds4::backend;
using namespace ds4::bench;

namespace {

// One decode layer's dense Q8_0 matrices at the Flash shapes (q_a, kv, q_b, out_a's 8 groups of 1024 rows,
// out_b, the shared expert's gate, up, down) and their outputs for up to nmax vectors.
struct DenseLayer {
  Weight qa, kv, qb, oa, ob, gate, up, down;
};
struct DenseOuts {
  float *ya, *yb, *yq, *yo, *yf, *yg, *yu;
};
// L layers of weights made on `sb` (cycled: a call's matrices are cold when L layers exceed the L2); the
// bytes of one layer in *layer_bytes.
std::vector<DenseLayer> dense_layers(StageBench& sb, int L, double* layer_bytes) {
  std::vector<DenseLayer> ls(static_cast<size_t>(L));
  sb.reset_bytes();
  for (DenseLayer& l : ls) {
    l.qa = sb.weight(GgmlType::Q8_0, 1024, 4096);
    l.kv = sb.weight(GgmlType::Q8_0, 512, 4096);
    l.qb = sb.weight(GgmlType::Q8_0, 32768, 1024);
    l.oa = sb.weight(GgmlType::Q8_0, 8192, 4096);
    l.ob = sb.weight(GgmlType::Q8_0, 4096, 8192);
    l.gate = sb.weight(GgmlType::Q8_0, 2048, 4096);
    l.up = sb.weight(GgmlType::Q8_0, 2048, 4096);
    l.down = sb.weight(GgmlType::Q8_0, 4096, 2048);
  }
  *layer_bytes = static_cast<double>(sb.bytes()) / L;
  return ls;
}
DenseOuts dense_outs(StageBench& sb, int64_t nmax) {
  return {sb.buf(nmax * 1024), sb.buf(nmax * 512),  sb.buf(nmax * 32768), sb.buf(nmax * 8192),
          sb.buf(nmax * 4096), sb.buf(nmax * 2048), sb.buf(nmax * 2048)};
}
// The layer's matmuls in the forward pass's order: q_a + kv as a pair, q_b, out_a grouped, out_b, gate + up
// as a pair, down. mm(w, x stride, out, out stride, group rows), pair(a, a out, a rows, b, b out, b rows).
template <class Mm, class Pair>
void dense_layer_calls(const DenseLayer& l, const DenseOuts& o, Mm&& mm, Pair&& pair) {
  pair(l.qa, o.ya, 1024, l.kv, o.yb, 512);
  mm(l.qb, 1024, o.yq, 32768, 0);
  mm(l.oa, 8 * 4096, o.yo, 8192, 1024);
  mm(l.ob, 8192, o.yf, 4096, 0);
  pair(l.gate, o.yg, 2048, l.up, o.yu, 2048);
  mm(l.down, 2048, o.yf, 4096, 0);
}

}  // namespace

// Dense Q8_0 matmuls of the decode layer with cold weights (issues 5 and 8): each call reads its own
// copy of the matrix, copies cycled so that ≥ 128 MB lie between two reads of one (the H200's 50 MB L2
// holds none of them, as in a 43-layer step; the --gemv lines reuse one copy and run partly from L2).
// Per matrix and n = 1, 2, 4, 8, 16: graph µs per call and GB/s on `prev` (gemv_stream_chunks = false:
// the dispatch before the column chunks), `def` (the default dispatch: gemv_stream where gemv_stream_wins), `stream`
// (gemv_stream = always, column chunks) and `plain` (always, whole-row tiles). `only`: just the shapes
// whose name holds it, no layer table. Then one layer's dense matmuls — q_a, kv, q_b,
// out_a (grouped), out_b, shared gate, up, down on `prev`; q_a + kv and gate + up as one matmul_many each
// on the others — each call after a small op (a 64-value scale, as the rms_norm / rope / quantize
// launches between them in a real layer), 4 distinct layers of weights cycled: graph µs per layer.
void bench_dense_cold(Backend& prev, Backend& def, Backend& stream, Backend& plain, const char* only) {
  struct Mm {
    const char* name;
    int64_t rows, cols, group_rows;
  };
  const Mm shapes[] = {{"q_a 1024x4096", 1024, 4096, 0},         {"kv 512x4096", 512, 4096, 0},
                       {"q_b 32768x1024", 32768, 1024, 0},       {"out_a grouped 8x1024x4096", 8192, 4096, 1024},
                       {"out_b 4096x8192", 4096, 8192, 0},       {"shared gate/up 2048x4096", 2048, 4096, 0},
                       {"shared down 4096x2048", 4096, 2048, 0}};
  constexpr int kShapes = 7, kNs = 5, kSides = 4;
  const int64_t ns[kNs] = {1, 2, 4, 8, 16};
  const uint64_t cold_bytes = uint64_t{128} << 20;
  Backend* bes[kSides] = {&prev, &def, &stream, &plain};
  const char* label[kSides] = {"rows-default", "default", "stream-chunks", "stream-rows"};
  double op_us[kShapes][kNs][kSides] = {}, layer_us[kNs][kSides] = {}, layer_bytes = 0;
  for (int i = 0; i < kSides; ++i) {
    Backend& be = *bes[i];
    StageBench sb(be);
    float* x = sb.buf(16 * 32768);
    float* y = sb.buf(16 * 32768);
    for (int si = 0; si < kShapes; ++si) {
      const Mm& m = shapes[si];
      if (only && !std::strstr(m.name, only)) continue;
      const uint64_t bytes = *type_bytes(GgmlType::Q8_0, static_cast<uint64_t>(m.cols)) * m.rows;
      const int copies = static_cast<int>(std::max<uint64_t>(2, (cold_bytes + bytes - 1) / bytes));
      std::vector<Weight> w;
      for (int c = 0; c < copies; ++c) w.push_back(sb.weight(GgmlType::Q8_0, m.rows, m.cols));
      const int64_t xs = m.group_rows > 0 ? 8 * m.cols : m.cols;
      for (int ni = 0; ni < kNs; ++ni) {
        int k = 0;
        op_us[si][ni][i] = sb.time([&] {
          be.matmul({w[static_cast<size_t>(k++ % copies)], x, xs, y, m.rows, ns[ni], MatmulNumerics::ds4, m.group_rows,
                     m.cols});
        }, copies).graph_us;
      }
    }
    if (only) continue;  // one shape's lines only: no layer table
    const int L = 4;
    const std::vector<DenseLayer> ls = dense_layers(sb, L, &layer_bytes);
    const DenseOuts outs = dense_outs(sb, 16);
    float* tiny = sb.buf(64);
    for (int ni = 0; ni < kNs; ++ni) {
      const int64_t n = ns[ni];
      auto mm = [&](const Weight& w, int64_t xs, float* out, int64_t ys, int64_t gr = 0) {
        be.scale(tiny, 1.0f, 64);
        be.matmul({w, x, xs, out, ys, n, MatmulNumerics::ds4, gr, gr > 0 ? w.cols : 0});
      };
      auto pair = [&](const Weight& a, float* ay, int64_t ays, const Weight& b, float* by, int64_t bys) {
        if (i == 0) {  // the previous dispatch: one matmul each, as the forward pass called them before
          mm(a, 4096, ay, ays);
          mm(b, 4096, by, bys);
          return;
        }
        be.scale(tiny, 1.0f, 64);  // the same small ops as the two calls above
        be.scale(tiny, 1.0f, 64);
        const MatmulArgs jobs[2] = {{a, x, 4096, ay, ays, n, MatmulNumerics::ds4},
                                    {b, x, 4096, by, bys, n, MatmulNumerics::ds4}};
        be.matmul_many(jobs);
      };
      int k = 0;
      layer_us[ni][i] = sb.time([&] { dense_layer_calls(ls[static_cast<size_t>(k++ % L)], outs, mm, pair); }, 2 * L).graph_us;
    }
  }
  for (int si = 0; si < kShapes; ++si) {
    if (only && !std::strstr(shapes[si].name, only)) continue;
    const double bytes = static_cast<double>(*type_bytes(GgmlType::Q8_0, static_cast<uint64_t>(shapes[si].cols))) *
                         static_cast<double>(shapes[si].rows);
    for (int ni = 0; ni < kNs; ++ni) {
      std::printf("BENCH dense-cold %-26s n=%-2lld", shapes[si].name, static_cast<long long>(ns[ni]));
      for (int i = 0; i < kSides; ++i)
        std::printf("  %s %7.2f us %5.0f GB/s", label[i], op_us[si][ni][i], bytes / (op_us[si][ni][i] * 1e-6) / 1e9);
      std::printf("\n");
    }
  }
  for (int ni = 0; ni < kNs && !only; ++ni) {
    std::printf("BENCH dense-layer n=%-2lld (%.1f MB, 8 small ops incl.)", static_cast<long long>(ns[ni]), layer_bytes / 1e6);
    for (int i = 0; i < kSides; ++i)
      std::printf("  %s %7.2f us %5.0f GB/s", label[i], layer_us[ni][i], layer_bytes / (layer_us[ni][i] * 1e-6) / 1e9);
    std::printf("\n");
  }
}

// `cuda_bench --l2`: the decode-step dense Q8_0 matmuls at n = 1..16 as a layer meets them, graph µs per call:
// cold (each call reads its own copy, ≥ 128 MB cycled), warm (the same copy again: L2-resident when it fits),
// after K small latency-bound ops (a 64-value scale each, standing for HC pre / attention; the ops' own time
// is taken off), and the same with the matrix prefetched into L2 (Backend::prefetch on the side lane) as the
// ops start — the per-matrix time when the forward pass's l2_prefetch has pulled it in.
void bench_l2_prefetch(Backend& be) {
  struct Mm {
    const char* name;
    int64_t rows, cols, group_rows;
  };
  const Mm shapes[] = {{"q_a 1024x4096", 1024, 4096, 0},     {"q_b 32768x1024", 32768, 1024, 0},
                       {"out_a 8x1024x4096", 8192, 4096, 1024}, {"out_b 4096x8192", 4096, 8192, 0},
                       {"shared gate 2048x4096", 2048, 4096, 0}, {"shared down 4096x2048", 4096, 2048, 0}};
  const int64_t ns[] = {1, 2, 4, 8, 16};
  const int idles[] = {4, 10};
  const uint64_t cold_bytes = uint64_t{128} << 20;
  StageBench sb(be);
  float* x = sb.buf(16 * 32768);
  float* y = sb.buf(16 * 32768);
  float* tiny = sb.buf(64);
  double idle_us[2] = {};
  for (int ii = 0; ii < 2; ++ii)
    idle_us[ii] = sb.time([&] {
      for (int k = 0; k < idles[ii]; ++k) be.scale(tiny, 1.0f, 64);
    }, 8).graph_us;
  std::printf("BENCH l2 idle ops: %d scale ops %.2f us, %d: %.2f us\n", idles[0], idle_us[0], idles[1], idle_us[1]);
  for (const Mm& m : shapes) {
    const double bytes = static_cast<double>(*type_bytes(GgmlType::Q8_0, static_cast<uint64_t>(m.cols))) * m.rows;
    const int copies = static_cast<int>(std::max<double>(2, std::ceil(cold_bytes / bytes)));
    std::vector<Weight> w;
    for (int c = 0; c < copies; ++c) w.push_back(sb.weight(GgmlType::Q8_0, m.rows, m.cols));
    const int64_t xs = m.group_rows > 0 ? 8 * m.cols : m.cols;
    for (int64_t n : ns) {
      auto mm = [&](const Weight& wt) {
        be.matmul({wt, x, xs, y, m.rows, n, MatmulNumerics::ds4, m.group_rows, m.group_rows > 0 ? m.cols : 0});
      };
      int k = 0;
      const double cold = sb.time([&] { mm(w[static_cast<size_t>(k++ % copies)]); }, copies).graph_us;
      const double warm = sb.time([&] { mm(w[0]); }, copies).graph_us;
      double after[2], pref[2];
      for (int ii = 0; ii < 2; ++ii) {
        after[ii] = sb.time([&] {
          for (int j = 0; j < idles[ii]; ++j) be.scale(tiny, 1.0f, 64);
          mm(w[static_cast<size_t>(k++ % copies)]);
        }, copies).graph_us - idle_us[ii];
        pref[ii] = sb.time([&] {
          const Weight& wt = w[static_cast<size_t>(k++ % copies)];
          be.fork();
          be.prefetch({&wt, 1});
          be.resume_main();
          for (int j = 0; j < idles[ii]; ++j) be.scale(tiny, 1.0f, 64);
          mm(wt);
          be.join();
        }, copies).graph_us - idle_us[ii];
      }
      auto tbs = [&](double us) { return bytes / (us * 1e-6) / 1e12; };
      std::printf("BENCH l2 %-22s n=%-2lld cold %6.2f us %4.2f TB/s | warm %6.2f | after %d ops %6.2f, prefetched %6.2f "
                  "(%4.2f TB/s) | after %d ops %6.2f, prefetched %6.2f (%4.2f TB/s)\n",
                  m.name, static_cast<long long>(n), cold, tbs(cold), warm, idles[0], after[0], pref[0], tbs(pref[0]),
                  idles[1], after[1], pref[1], tbs(pref[1]));
    }
  }
}

// Dense Q8_0 matmuls at decode sizes on several backends (`sides`, labels), cold weights: the weights are
// made once on sides[0] (one device, one address space: every backend reads them) in copies cycled
// through ≥ 128 MB (the head: one 563 MB copy), graph µs per call; side i at n_lo[i] ≤ n ≤ n_hi[i] only.
// Then one layer's dense matmuls (q_a + kv and gate + up as matmul_many, out_a grouped) over 4 layers'
// weights at n = 1, 2, 4 on the sides that take that n. only: shapes whose name holds it ("layer": the layer only).
void bench_dense_rows(Backend* const* sides, const char* const* labels, const int64_t* n_lo, const int64_t* n_hi,
                      int n_sides, const char* only) {
  struct Mm {
    const char* name;
    int64_t rows, cols, group_rows;
  };
  const Mm shapes[] = {{"q_a 1024x4096", 1024, 4096, 0},         {"kv 512x4096", 512, 4096, 0},
                       {"q_b 32768x1024", 32768, 1024, 0},       {"out_a grouped 8x1024x4096", 8192, 4096, 1024},
                       {"out_b 4096x8192", 4096, 8192, 0},       {"shared gate/up 2048x4096", 2048, 4096, 0},
                       {"shared down 4096x2048", 4096, 2048, 0}, {"head 129280x4096", 129280, 4096, 0}};
  const int64_t ns[] = {1, 2, 4, 8, 16, 32};
  const uint64_t cold_bytes = uint64_t{128} << 20;
  std::vector<std::unique_ptr<StageBench>> sb;
  for (int i = 0; i < n_sides; ++i) sb.push_back(std::make_unique<StageBench>(*sides[i]));
  float* x = sb[0]->buf(32 * 32768);
  float* y = sb[0]->buf(32 * 131072);
  const bool layer_only = only && std::strcmp(only, "layer") == 0;  // only the layer lines
  for (const Mm& m : shapes) {
    if (layer_only || (only && !std::strstr(m.name, only))) continue;
    const uint64_t bytes = *type_bytes(GgmlType::Q8_0, static_cast<uint64_t>(m.cols)) * m.rows;
    const int copies = static_cast<int>(std::max<uint64_t>(1, (cold_bytes + bytes - 1) / bytes));
    std::vector<Weight> w;
    for (int c = 0; c < copies; ++c) w.push_back(sb[0]->weight(GgmlType::Q8_0, m.rows, m.cols));
    const int64_t xs = m.group_rows > 0 ? 8 * m.cols : m.cols;
    for (int64_t n : ns) {
      std::printf("BENCH dense-rows %-26s n=%-2lld", m.name, static_cast<long long>(n));
      for (int i = 0; i < n_sides; ++i) {
        if (n < n_lo[i] || n > n_hi[i]) continue;
        int k = 0;
        const double us = sb[i]->time([&] {
          sides[i]->matmul({w[static_cast<size_t>(k++ % copies)], x, xs, y, m.rows, n, MatmulNumerics::ds4,
                            m.group_rows, m.cols});
        }, std::max(copies, 4)).graph_us;
        std::printf("  %s %7.2f us %5.0f GB/s", labels[i], us, static_cast<double>(bytes) / (us * 1e-6) / 1e9);
      }
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  if (only && !layer_only) return;
  const int L = 4;
  double layer_bytes = 0;
  const std::vector<DenseLayer> ls = dense_layers(*sb[0], L, &layer_bytes);
  const DenseOuts outs = dense_outs(*sb[0], 32);
  for (int64_t n : {1, 2, 4}) {
    std::printf("BENCH dense-rows-layer n=%-2lld (%.1f MB)", static_cast<long long>(n), layer_bytes / 1e6);
    for (int i = 0; i < n_sides; ++i) {
      if (n < n_lo[i] || n > n_hi[i]) continue;
      Backend& be = *sides[i];
      auto mm = [&](const Weight& w, int64_t xs, float* out, int64_t ys, int64_t gr = 0) {
        be.matmul({w, x, xs, out, ys, n, MatmulNumerics::ds4, gr, gr > 0 ? w.cols : 0});
      };
      auto pair = [&](const Weight& a, float* ay, int64_t ays, const Weight& b, float* by, int64_t bys) {
        const MatmulArgs jobs[2] = {{a, x, 4096, ay, ays, n, MatmulNumerics::ds4},
                                    {b, x, 4096, by, bys, n, MatmulNumerics::ds4}};
        be.matmul_many(jobs);
      };
      int k = 0;
      const double us =
          sb[i]->time([&] { dense_layer_calls(ls[static_cast<size_t>(k++ % L)], outs, mm, pair); }, 2 * L).graph_us;
      std::printf("  %s %7.2f us %5.0f GB/s", labels[i], us, layer_bytes / (us * 1e-6) / 1e9);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  // The query chain as the forward pass runs it: q_a + kv as a pair, q_a's RMSNorm in place, q_b from the normed
  // row (dense_ramp.h kRampNormTrigger moves q_b's start under the norm), 4 layers cycled.
  float* nw = sb[0]->buf(1024);
  for (int64_t n : {1, 2}) {
    std::printf("BENCH dense-rows-qchain n=%-2lld", static_cast<long long>(n));
    for (int i = 0; i < n_sides; ++i) {
      if (n < n_lo[i] || n > n_hi[i]) continue;
      Backend& be = *sides[i];
      int k = 0;
      const double us = sb[i]->time([&] {
        const DenseLayer& l = ls[static_cast<size_t>(k++ % L)];
        const MatmulArgs jobs[2] = {{l.qa, x, 4096, outs.ya, 1024, n, MatmulNumerics::ds4},
                                    {l.kv, x, 4096, outs.yb, 512, n, MatmulNumerics::ds4}};
        be.matmul_many(jobs);
        be.rms_norm({outs.ya, outs.ya, nw, n, 1024, 1024, 1e-6f});
        be.matmul({l.qb, outs.ya, 1024, outs.yq, 32768, n, MatmulNumerics::ds4});
      }, 2 * L).graph_us;
      std::printf("  %s %7.2f us", labels[i], us);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
}
